package dev.fencedjobs.chaos;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;

/**
 * The fault schedule, drawn from the run's seed: every kind the run asks for once in a shuffled
 * order, then kinds at random until the run's time is up, 2 to 6 s apart; every third fault
 * pauses or resumes the toggled schedule and every fourth writes forged records. Each fault is
 * recorded in the history with when, what and how long it took.
 */
final class FaultInjector {

    static final String TOPIC = ChaosRun.TOPIC;
    static final int PARTITIONS = ChaosRun.PARTITIONS;

    private final ChaosRun.Options options;
    private final Random random;
    private final ChaosCluster cluster;
    private final ChaosSchedules schedules;
    private final Forger forger;
    private final History history;
    private final RunLog log;

    FaultInjector(
            ChaosRun.Options options,
            Random random,
            ChaosCluster cluster,
            ChaosSchedules schedules,
            Forger forger,
            History history,
            RunLog log) {
        this.options = options;
        this.random = random;
        this.cluster = cluster;
        this.schedules = schedules;
        this.forger = forger;
        this.history = history;
        this.log = log;
    }

    void injectFaults() throws Exception {
        List<ChaosRun.Kind> kinds = options.faults();
        List<ChaosRun.Kind> order = new ArrayList<>(kinds);
        Collections.shuffle(order, random);
        long end = log.startNanos() + TimeUnit.SECONDS.toNanos(options.seconds());
        int n = 0;
        while (n < order.size() || System.nanoTime() < end) {
            ChaosRun.Kind kind = n < order.size() ? order.get(n) : kinds.get(random.nextInt(kinds.size()));
            log.sleep(2000 + random.nextInt(4000));
            inject(kind);
            n++;
            if (n % 3 == 0) {
                schedules.pause(List.of(ChaosSchedules.TOGGLED), n % 2 == 1);
            }
            if (n % 4 == 0) {
                forger.forge();
            }
        }
        log.log(n + " faults injected");
    }

    private void inject(ChaosRun.Kind kind) throws Exception {
        long at = log.elapsedMillis();
        long started = System.nanoTime();
        String target;
        switch (kind) {
            case KILL_DISPATCHER_LEADER, KILL_RELAY_LEADER, KILL_CONSUMER -> {
                Service s = kind == ChaosRun.Kind.KILL_CONSUMER
                        ? cluster.pick("consumer", random)
                        : cluster.leader(kind == ChaosRun.Kind.KILL_DISPATCHER_LEADER ? "scheduler" : "relay");
                target = s.toString();
                long down = 500L + random.nextInt(2500);
                log.log("fault " + kind.label + ": SIGKILL " + target + ", start again in " + down + " ms");
                s.kill();
                log.sleep(down);
                s.start();
            }
            case PAUSE_DISPATCHER_LEADER, PAUSE_RELAY_LEADER -> {
                Service s = cluster.leader(kind == ChaosRun.Kind.PAUSE_DISPATCHER_LEADER ? "scheduler" : "relay");
                target = s.toString();
                long hold = options.leaseMillis() + 1000 + random.nextInt(4000);
                log.log("fault " + kind.label + ": SIGSTOP " + target + " for " + hold + " ms (lease "
                        + options.leaseMillis() + " ms)");
                s.pause();
                log.sleep(hold);
                s.resume();
            }
            case PARTITION_FROM_DATABASE -> {
                boolean hitLeader = random.nextBoolean();
                Service s = hitLeader
                        ? cluster.leader(random.nextBoolean() ? "scheduler" : "relay")
                        : cluster.pick(null, random);
                target = s.toString();
                long hold = 1000L + random.nextInt((int) options.leaseMillis() * 2);
                log.log("fault " + kind.label + ": cut " + target + " off from PostgreSQL for " + hold + " ms");
                s.proxy.partition();
                log.sleep(hold);
                s.proxy.heal();
            }
            case END_LEASE_SESSION -> {
                // The fast path's own fault: the leader runs on, its sign-of-life session alone ends.
                String role = random.nextBoolean() ? "scheduler" : "relay";
                Service s = cluster.leader(role);
                target = s + " (its lease session)";
                int ended = cluster.endLeaseSession(role);
                log.log("fault " + kind.label + ": pg_terminate_backend of the " + role + " leader " + s
                        + "'s lease session (" + ended + " ended); it runs on");
            }
            case RESHARD -> {
                // The shard count changed while jobs flow (docs/shards.md): the map drains, and the
                // dispatcher that holds shard 0 puts the new count in force once the relays have
                // published every record of the old map.
                int before = cluster.shardCount();
                int[] counts = {1, 2, 3, 4, 6, 8};
                int after = before;
                while (after == before) {
                    after = counts[random.nextInt(counts.length)];
                }
                target = "shard map " + before + " -> " + after;
                log.log("fault " + kind.label + ": shards_set(" + after + ") with " + before + " shards in force");
                long switched = cluster.reshard(after, Duration.ofSeconds(60));
                log.log("fault " + kind.label + ": " + after + " shards in force after " + switched + " ms");
            }
            case PAUSE_KEY -> {
                // An operator pauses a tenant key for 1 to 5 s and resumes it (docs/dispatch.md): its jobs
                // stay pending meanwhile, whoever leads.
                String key = ChaosLimits.TENANTS.get(random.nextInt(ChaosLimits.TENANTS.size()));
                long hold = 1000L + random.nextInt(4000);
                target = "key " + key;
                log.log("fault " + kind.label + ": pause " + key + " for " + hold + " ms");
                History.KeyPause pause = cluster.pauseKey(key, Duration.ofMillis(hold));
                history.keyPauses.add(pause);
                log.log("fault " + kind.label + ": " + key + " resumed");
            }
            case RESTART_POSTGRES -> {
                long down = 500L + random.nextInt(3000);
                target = "postgresql primary";
                log.log("fault " + kind.label + ": stop the PostgreSQL primary (fast shutdown), start it again in "
                        + down + " ms");
                cluster.postgres.restartPrimary(Duration.ofMillis(down));
            }
            case FAILOVER_POSTGRES -> {
                int from = cluster.postgres.primary();
                target = "postgresql primary (server " + from + ")";
                log.log("fault " + kind.label + ": SIGKILL the PostgreSQL primary (server " + from
                        + "), promote the synchronous standby");
                cluster.postgres.killPrimary();
                cluster.postgres.promoteStandby();
                log.log("failover: server " + cluster.postgres.primary() + " promoted after "
                        + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started) + " ms; rebuilding server " + from
                        + " as its standby");
                cluster.postgres.rebuildStandby();
                log.log("failover: server " + from + " streams again, "
                        + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started) + " ms after the kill");
            }
            case RESTART_KAFKA -> {
                boolean hard = random.nextBoolean();
                long down = 1000L + random.nextInt(5000);
                String all = cluster.kafka.size() == 1 ? "the broker" : "all " + cluster.kafka.size() + " brokers";
                target = "kafka, " + all + " (" + (hard ? "SIGKILL" : "SIGTERM") + ")";
                log.log("fault " + kind.label + ": stop " + all + " with " + (hard ? "SIGKILL" : "SIGTERM")
                        + ", start again in " + down + " ms");
                if (hard) {
                    cluster.kafka.killAll();
                } else {
                    cluster.kafka.stopAll();
                }
                log.sleep(down);
                cluster.kafka.startAll();
            }
            case KILL_BROKER -> {
                int broker = random.nextInt(cluster.kafka.size());
                long down = 1000L + random.nextInt(5000);
                target = "kafka broker " + (broker + 1);
                log.log("fault " + kind.label + ": SIGKILL broker " + (broker + 1) + " of " + cluster.kafka.size()
                        + ", start again in " + down + " ms");
                cluster.kafka.kill(broker);
                log.sleep(down);
                cluster.kafka.start(broker);
            }
            case MOVE_LEADERS -> {
                target = "kafka leaders of " + TOPIC;
                int moved = cluster.kafka.moveLeaders(TOPIC);
                log.log("fault " + kind.label
                        + ": rotated every partition's replicas and elected the preferred leaders; " + moved + " of "
                        + PARTITIONS + " partitions changed leader");
            }
            case GRACEFUL_RESTART -> {
                Service s = cluster.pick(null, random);
                target = s.toString();
                log.log("fault " + kind.label + ": SIGTERM " + target + " and start it again");
                int code = s.terminate();
                if (!ChaosCluster.graceful(code)) {
                    cluster.crashes.add(
                            s.name + " exited with code " + code + " after SIGTERM (a graceful stop exits 0 or 143)");
                }
                s.start();
            }
            default -> throw new IllegalStateException(kind.toString());
        }
        history.faults.add(
                new History.Fault(at, kind.label, target, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started)));
    }
}
