package dev.fencedjobs.bench;

import dev.fencedjobs.consumer.GroupMembership;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.lease.LeaseRow;
import dev.fencedjobs.relay.RelayConfig;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.testing.ServiceProcess;
import dev.fencedjobs.testing.TcpProxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Part 4 of the end-to-end benchmark, under 200 jobs/s due now: the dispatcher leader stopped by
 * SIGKILL (with the fast path and without), SIGTERM and a partition, to its successor's first
 * completed job; the relay leader by SIGKILL (with and without), to its successor's first published
 * batch; all beside the lease duration in the same run. Then one of two consumers, to the first
 * effect from its partitions, beside the session timeout ({@link ConsumerFailover}).
 */
final class FailoverPhase {

    private final BenchStack stack;
    private final E2eReport report;
    private final int trials;
    private final boolean dispatcher;
    /** Fixed ops ports of the consumers, whose {@code /status} the consumer failover reads. */
    private final Map<String, Integer> consumerPorts;

    /** {@code dispatcher}: the dispatcher's trials too, not only the consumer's. */
    FailoverPhase(
            BenchStack stack, E2eReport report, int trials, boolean dispatcher, Map<String, Integer> consumerPorts) {
        this.stack = stack;
        this.report = report;
        this.trials = trials;
        this.dispatcher = dispatcher;
        this.consumerPorts = consumerPorts;
    }

    void run() throws Exception {
        long leaseMs = 10_000; // the services run with the default LEASE_DURATION
        System.out.println(
                "4. failover, " + trials + " trials each, with 200 jobs/s due now; lease " + leaseMs + " ms");
        AtomicBoolean stop = new AtomicBoolean();
        Thread background = new Thread(
                () -> {
                    try (Connection c = stack.owner();
                            Statement s = c.createStatement()) {
                        while (!stop.get()) {
                            s.executeUpdate(String.format(BenchStack.INSERT_DUE, 2));
                            Thread.sleep(10);
                        }
                    } catch (Exception e) {
                        System.err.println("background load: " + e);
                    }
                },
                "e2e-background");
        background.start();
        try {
            if (dispatcher) {
                dispatcherFailover();
                relayFailover();
            }
            consumerFailover();
        } finally {
            stop.set(true);
            background.join();
        }
    }

    /** How a trial stops the leader. */
    enum Fault {
        SIGKILL,
        SIGTERM,
        /** Its database proxy holds every byte, both ways: its sessions stay open on the server. */
        PARTITION
    }

    /**
     * The dispatcher leader, {@code trials} times each: SIGKILL with the fast path (the default),
     * SIGTERM, SIGKILL with the fast path off, all in this run and connected as users run them;
     * then, behind database proxies (so it can be made), a partition. The new leader's first job is
     * the first outbox row written with a newer token.
     */
    private void dispatcherFailover() throws Exception {
        long leaseMs = 10_000; // the services run with the default LEASE_DURATION
        List<String> replicas = List.of("dispatcher-1", "dispatcher-2");
        String firstJob =
                "SELECT coalesce((extract(epoch FROM min(completed_at)) * 1000)::bigint, 0) FROM outbox WHERE id > %2$d AND fencing_token > %1$d";
        List<Double> fast = trials("dispatcher SIGKILL, fast path", "scheduler", Fault.SIGKILL, firstJob, true);
        List<Double> term = trials("dispatcher SIGTERM", "scheduler", Fault.SIGTERM, firstJob, true);
        for (String name : replicas) {
            stack.reconfigure(name, Map.of(LeaseConfig.FAST_TAKEOVER, "false"));
        }
        List<Double> lease = trials("dispatcher SIGKILL, fast path off", "scheduler", Fault.SIGKILL, firstJob, false);
        List<Double> termLease =
                trials("dispatcher SIGTERM, fast path off", "scheduler", Fault.SIGTERM, firstJob, false);
        for (String name : replicas) {
            stack.reconfigure(name, Map.of(LeaseConfig.FAST_TAKEOVER, "true"));
            stack.behindProxy(name);
        }
        List<Double> partition = trials("dispatcher partition", "scheduler", Fault.PARTITION, firstJob, true);
        report.put("leaseDurationMs", leaseMs);
        report.put("failoverSigkillMs", fast);
        report.put("failoverSigkillLeaseOnlyMs", lease);
        report.put("failoverSigtermMs", term);
        report.put("failoverSigtermLeaseOnlyMs", termLease);
        report.put("failoverPartitionMs", partition);
        String who = " of the dispatcher leader to the new leader's first job";
        report.row("4. SIGKILL" + who + ", fast path (default)", E2eReport.summary(fast), "target p99 < 1000 ms");
        report.row(
                "4. SIGKILL" + who + ", fast path off (LEASE_FAST_TAKEOVER=false)",
                E2eReport.summary(lease),
                "lease " + leaseMs + " ms (the floor)");
        report.row(
                "4. partition (proxy holding bytes)" + who + ", fast path on",
                E2eReport.summary(partition),
                "the session stays: the lease decides, " + leaseMs + " ms floor");
        report.row(
                "4. SIGTERM" + who + ", fast path (default)",
                E2eReport.summary(term),
                "released at once; target p99 < 200 ms");
        report.row(
                "4. SIGTERM" + who + ", fast path off",
                E2eReport.summary(termLease),
                "released at once, as before the fast path");
    }

    /**
     * The relay leader, with a second relay following for this part: SIGKILL with the fast path and
     * without, to the new leader's first published batch (its first move of the relay position after
     * its takeover, read every 20 ms).
     */
    private void relayFailover() throws Exception {
        long leaseMs = 10_000;
        stack.start(
                "relay-2",
                "relay",
                "bench_relay",
                Map.of(RelayConfig.PARTITIONS, Integer.toString(BenchStack.PARTITIONS)));
        String firstPublish =
                "SELECT coalesce((SELECT (extract(epoch FROM p.updated_at) * 1000)::bigint FROM outbox_position p"
                        + " JOIN leader_lease l ON l.role = p.role WHERE p.role = 'relay' AND l.fencing_token > %1$d AND p.updated_at >="
                        + " (SELECT t.acquired_at FROM lease_takeover t WHERE t.role = 'relay' AND t.fencing_token = l.fencing_token)), 0)";
        List<String> replicas = List.of("relay", "relay-2");
        try {
            List<Double> fast = trials("relay SIGKILL, fast path", "relay", Fault.SIGKILL, firstPublish, true);
            for (String name : replicas) {
                stack.reconfigure(name, Map.of(LeaseConfig.FAST_TAKEOVER, "false"));
            }
            List<Double> lease = trials("relay SIGKILL, fast path off", "relay", Fault.SIGKILL, firstPublish, false);
            report.put("relayFailoverSigkillMs", fast);
            report.put("relayFailoverSigkillLeaseOnlyMs", lease);
            String who = " of the relay leader to the new leader's first published batch";
            report.row("4. SIGKILL" + who + ", fast path (default)", E2eReport.summary(fast), "target p99 < 1000 ms");
            report.row(
                    "4. SIGKILL" + who + ", fast path off",
                    E2eReport.summary(lease),
                    "lease " + leaseMs + " ms (the floor)");
        } finally {
            ServiceProcess second = stack.services().remove("relay-2");
            second.terminate();
            second.waitFor();
            stack.reconfigure("relay", Map.of(LeaseConfig.FAST_TAKEOVER, "true"));
        }
    }

    /** {@code fastPath}: the replicas run with it now, so each trial first waits for the follower's wait. */
    private List<Double> trials(String label, String role, Fault fault, String firstWorkSql, boolean fastPath)
            throws Exception {
        List<Double> ms = new ArrayList<>();
        for (int i = 0; i < trials; i++) {
            ms.add(takeover(role, fault, firstWorkSql, fastPath));
            System.out.printf(Locale.ROOT, "   %s trial %d: %.0f ms%n", label, i + 1, ms.get(i));
        }
        return ms;
    }

    /**
     * A second consumer joins the group for this part; each trial stops one of the two and times the
     * first effect from the partitions it held. The second consumer leaves again afterwards, so the
     * idle phase measures the same services as before.
     */
    private void consumerFailover() throws Exception {
        long sessionMs = GroupMembership.DEFAULT_SESSION_TIMEOUT.toMillis();
        stack.start(
                "consumer-2",
                "consumer",
                "bench_consumer",
                Map.of(ServiceConfig.HTTP_PORT, Integer.toString(consumerPorts.get("consumer-2"))));
        List<String> resources = new ArrayList<>();
        for (int i = 0; i < BenchStack.RESOURCES; i++) {
            resources.add("account-" + i);
        }
        ConsumerFailover consumers = new ConsumerFailover(
                new ConsumerFailover.Services() {
                    @Override
                    public ServiceProcess get(String name) {
                        return stack.services().get(name);
                    }

                    @Override
                    public void restart(String name) {
                        stack.restart(name);
                    }

                    @Override
                    public Connection owner() throws SQLException {
                        return stack.owner();
                    }
                },
                consumerPorts,
                BenchStack.TOPIC,
                BenchStack.PARTITIONS,
                resources);
        try {
            List<Double> kill = consumers.trials(trials, true);
            for (int i = 0; i < kill.size(); i++) {
                System.out.printf(Locale.ROOT, "   consumer SIGKILL trial %d: %.0f ms%n", i + 1, kill.get(i));
            }
            List<Double> term = consumers.trials(trials, false);
            for (int i = 0; i < term.size(); i++) {
                System.out.printf(Locale.ROOT, "   consumer SIGTERM trial %d: %.0f ms%n", i + 1, term.get(i));
            }
            report.put("consumerSessionTimeoutMs", sessionMs);
            report.put("consumerFailoverSigkillMs", kill);
            report.put("consumerFailoverSigtermMs", term);
            report.row(
                    "4. SIGKILL of one of two consumers to the first effect from its partitions",
                    E2eReport.summary(kill),
                    "CONSUMER_SESSION_TIMEOUT " + sessionMs + " ms (the floor), then a rebalance");
            report.row(
                    "4. SIGTERM of one of two consumers to the first effect from its partitions",
                    E2eReport.summary(term),
                    "it leaves the group at once");
        } finally {
            ServiceProcess second = stack.services().remove("consumer-2");
            second.terminate();
            second.waitFor();
        }
    }

    /**
     * Stops the leader of {@code role} with {@code fault} and returns ms from the fault to the
     * first work of its successor: {@code firstWorkSql} with the old token and the highest outbox
     * id before the fault, answering epoch ms or 0 while there is none yet. {@code fastPath}: the
     * replicas run with it, so the trial first waits for the follower's wait to begin.
     */
    private double takeover(String role, Fault fault, String firstWorkSql, boolean fastPath) throws Exception {
        // Each trial starts once every replica reports ready (ops server up, the dispatcher's warm-up
        // over), so that it measures a takeover by a replica that is really following; with the fast
        // path, once the follower waits for the holder's session (a replica restarted by the trial
        // before needs its first look at the holder for that).
        stack.awaitAllReady(Duration.ofSeconds(60));
        if (fastPath) {
            String watch = (role.equals("scheduler") ? "dispatcher" : "relay") + "-watch";
            BenchStack.waitFor(
                    "a follower waiting for the " + role + " holder's session",
                    () -> stack.scalar(
                                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND NOT l.granted"
                                            + " AND a.application_name = '" + watch + "'")
                            > 0,
                    Duration.ofSeconds(60));
        }
        String leaderName = null;
        long token = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (leaderName == null) {
            try (Connection c = stack.owner()) {
                Optional<LeaseRow> lease = LeaseRow.live(c, role);
                if (lease.isPresent()) {
                    long pid = lease.get().holderPid();
                    token = lease.get().token().value();
                    for (Map.Entry<String, ServiceProcess> e : stack.services().entrySet()) {
                        if (e.getValue().pid() == pid && e.getValue().isAlive()) {
                            leaderName = e.getKey();
                        }
                    }
                }
            }
            if (leaderName == null) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("no live " + role + " leader");
                }
                Thread.sleep(100);
            }
        }
        long outboxBefore = stack.scalar("SELECT coalesce(max(id), 0) FROM outbox");
        ServiceProcess leader = stack.services().get(leaderName);
        TcpProxy proxy = fault == Fault.PARTITION ? stack.behindProxy(leaderName) : null;
        long signalledAt = System.currentTimeMillis();
        switch (fault) {
            case SIGKILL -> leader.kill();
            case SIGTERM -> leader.terminate();
            case PARTITION -> proxy.partition();
        }
        String sql = String.format(Locale.ROOT, firstWorkSql, token, outboxBefore);
        long first = 0;
        while (first == 0) {
            first = stack.scalar(sql);
            Thread.sleep(20);
            if (System.currentTimeMillis() - signalledAt > 60_000) {
                throw new IllegalStateException("no takeover within 60 s");
            }
        }
        if (fault == Fault.PARTITION) {
            // The partitioned former leader is stopped before the partition heals, as an operator would.
            leader.kill();
            leader.waitFor();
            proxy.heal();
        } else if (fault == Fault.SIGTERM) {
            leader.waitFor();
        }
        stack.restart(leaderName);
        return first - signalledAt;
    }
}
