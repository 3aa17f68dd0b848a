package dev.fencedjobs.chaos;

import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;

/**
 * The fault-injection run: starts the {@link ChaosCluster} (PostgreSQL with a synchronous standby,
 * Kafka, seven services), its {@link ChaosSchedules} and {@link ChaosLimits}, a {@link LoadGenerator} inserting jobs with
 * SQL the whole time and a {@link Forger} writing records around the dispatcher, and has the
 * {@link FaultInjector} inject a fault schedule drawn from a seed. Then it stops the load, heals
 * everything, waits for the system to drain, records the database and the topic ({@link
 * Recorder}), and hands them to the {@link Checker}.
 *
 * <pre>
 * java -jar chaos/target/fenced-jobs-chaos.jar [--seconds N] [--seed S] [--rate JOBS_PER_S] [--lease DURATION_MS] [--faults K,K] [--brokers N]
 *                                               [--out DIR] [--record FILE] [--repo DIR]
 * java -jar chaos/target/fenced-jobs-chaos.jar --check FILE
 * </pre>
 */
public final class ChaosRun {

    /** Every kind of fault the schedule mixes; a run injects each at least once. */
    public enum Kind {
        KILL_DISPATCHER_LEADER("kill-dispatcher-leader"),
        KILL_RELAY_LEADER("kill-relay-leader"),
        KILL_CONSUMER("kill-consumer"),
        PAUSE_DISPATCHER_LEADER("pause-dispatcher-leader"),
        PAUSE_RELAY_LEADER("pause-relay-leader"),
        PARTITION_FROM_DATABASE("partition-from-db"),
        END_LEASE_SESSION("end-lease-session"),
        RESTART_POSTGRES("restart-postgres"),
        FAILOVER_POSTGRES("failover-postgres"),
        RESTART_KAFKA("restart-kafka"),
        GRACEFUL_RESTART("sigterm-restart"),
        KILL_BROKER("kill-broker", 3),
        MOVE_LEADERS("move-leaders", 3),
        RESHARD("reshard"),
        PAUSE_KEY("pause-key");

        public final String label;
        /** The fewest brokers the kind makes sense with. */
        final int brokers;

        Kind(String label) {
            this(label, 1);
        }

        Kind(String label, int brokers) {
            this.label = label;
            this.brokers = brokers;
        }

        /** Every kind a cluster of this many brokers can have. */
        static List<Kind> all(int brokers) {
            return Arrays.stream(values()).filter(k -> k.brokers <= brokers).toList();
        }
    }

    /** How a run is shaped. */
    public record Options(
            long seconds,
            long seed,
            int rate,
            long leaseMillis,
            Path out,
            Path record,
            Path repo,
            Duration drainTimeout,
            List<Kind> faults,
            int brokers) {

        public Options {
            faults = List.copyOf(faults);
            if (faults.isEmpty()) {
                throw new IllegalArgumentException("at least one kind of fault");
            }
            if (brokers != 1 && brokers != 3) {
                throw new IllegalArgumentException("--brokers must be 1 or 3, got " + brokers);
            }
            for (Kind k : faults) {
                if (k.brokers > brokers) {
                    throw new IllegalArgumentException(k.label + " needs --brokers " + k.brokers);
                }
            }
        }

        static Options defaults() {
            return new Options(
                    120,
                    System.nanoTime() & 0xffffff,
                    200,
                    5000,
                    Path.of("target", "chaos"),
                    null,
                    Path.of("."),
                    Duration.ofMinutes(4),
                    Kind.all(3),
                    3);
        }
    }

    /** Kinds by label, comma-separated: {@code pause-relay-leader,restart-kafka}. */
    static List<Kind> kinds(String labels) {
        List<Kind> kinds = new ArrayList<>();
        for (String label : labels.split(",")) {
            String l = label.strip();
            kinds.add(Arrays.stream(Kind.values())
                    .filter(k -> k.label.equals(l))
                    .findFirst()
                    .orElseThrow(() -> new IllegalArgumentException("unknown fault '" + l + "'; the kinds are "
                            + Arrays.stream(Kind.values()).map(k -> k.label).toList())));
        }
        return kinds;
    }

    static final String DATABASE = "fencedjobs";
    static final String OWNER = "fencedjobs";
    static final String TOPIC = "fenced-jobs";
    static final int PARTITIONS = 6;
    static final int RESOURCES = 50;
    static final long FORGED_JOB_BASE = 9_000_000_000_000L;

    /** The recurring schedules of the run ({@link ChaosSchedules}). */
    static final List<String> SCHEDULES = ChaosSchedules.NAMES;

    private final Options options;
    private final Random random;
    private final History history = new History();
    private final RunLog log = new RunLog();
    private final ChaosCluster cluster;

    ChaosRun(Options options) {
        this.options = options;
        this.random = new Random(options.seed());
        this.history.seed = Long.toString(options.seed());
        this.cluster = new ChaosCluster(options, log);
    }

    /** Runs the whole suite once and returns the checker's verdict (already printed). */
    public Checker.Result run() throws Exception {
        log.log("seed " + options.seed() + ", " + options.seconds() + " s of faults, " + options.rate()
                + " jobs/s, lease " + options.leaseMillis() + " ms, " + options.brokers() + " Kafka broker(s); logs in "
                + options.out().toAbsolutePath());
        Files.createDirectories(options.out());
        LoadGenerator load = null;
        Checker.Result result = null;
        try {
            cluster.startServers();
            cluster.startServices();
            ChaosSchedules schedules = new ChaosSchedules(cluster, history, log);
            schedules.start();
            ChaosLimits limits = new ChaosLimits(options, cluster, log);
            limits.start();
            cluster.watch();
            load = new LoadGenerator(options, cluster.ownerUrl, log);
            load.start();
            Forger forger = new Forger(cluster, history);
            forger.forge();
            new FaultInjector(options, random, cluster, schedules, forger, history, log).injectFaults();
            cluster.healAll();
            load.finish();
            schedules.pause(SCHEDULES, true);
            List<String> submitted = new ArrayList<>(limits.backlog);
            submitted.addAll(load.submitted);
            log.log("load stopped: " + submitted.size() + " jobs inserted (" + limits.backlog.size()
                    + " of them the backlog), schedules paused; draining");
            drain(submitted.size());
            cluster.stopServices();
            cluster.stopWatching();
            history.submitted = submitted;
            history.rankOrderedKeys = List.of(ChaosLimits.BACKLOG_KEY);
            history.startedAtMillis = log.startEpochMillis();
            history.crashes = List.copyOf(cluster.crashes);
            Recorder.readTopic(cluster.kafka.bootstrapServers(), TOPIC, history, Duration.ofMinutes(2));
            try (Connection c = cluster.owner()) {
                Recorder.readDatabase(c, history);
            }
            result = Checker.check(history);
        } finally {
            if (load != null) {
                load.stop = true;
            }
            cluster.close(result != null && !result.ok());
        }
        if (options.record() != null || !result.ok()) {
            Path file = options.record() != null
                    ? options.record()
                    : options.out().resolve("history-" + options.seed() + ".json.gz");
            history.save(file);
            log.log("history saved to " + file.toAbsolutePath() + " (check it again with --check)");
        }
        report(result);
        return result;
    }

    static void report(Checker.Result result) {
        int shown = 0;
        for (Checker.Violation v : result.violations()) {
            if (shown++ == 50) {
                System.out.println("... and " + (result.violations().size() - 50) + " more violations");
                break;
            }
            System.out.println(v);
        }
        System.out.println(result.summary());
    }

    // ---------------------------------------------------------------- drain and stop

    /** Waits until every job is completed, published and decided by a consumer, or the drain timeout. */
    private void drain(int submitted) throws Exception {
        long forgedJobs = history.forged.stream()
                .filter(f -> f.kind().equals("fresh") || f.kind().equals("stale"))
                .count();
        long deadline = System.nanoTime() + options.drainTimeout().toNanos();
        long lastReport = 0;
        while (true) {
            long pending = -1;
            long unpublished = -1;
            long decided = -1;
            long scheduled = 0;
            try (Connection c = cluster.owner();
                    Statement s = c.createStatement();
                    ResultSet r = s.executeQuery("SELECT (SELECT count(*) FROM jobs WHERE state = 'pending'),"
                            + " (SELECT count(*) FROM outbox_unpublished),"
                            + " (SELECT count(*) FROM consumer_processed),"
                            + " (SELECT count(*) FROM jobs WHERE submitted_by LIKE 'schedule:%')")) {
                r.next();
                pending = r.getLong(1);
                unpublished = r.getLong(2);
                decided = r.getLong(3);
                scheduled = r.getLong(4);
            } catch (SQLException e) {
                log.log("drain: " + e.getMessage());
            }
            if (pending == 0 && unpublished == 0 && decided >= submitted + forgedJobs + scheduled) {
                log.log("drained: every job completed, published and decided by a consumer");
                return;
            }
            if (System.nanoTime() > deadline) {
                log.log("NOT DRAINED after " + options.drainTimeout().toSeconds() + " s: " + pending + " pending, "
                        + unpublished + " unpublished, " + decided + " of " + (submitted + forgedJobs + scheduled)
                        + " decided; checking what is there");
                return;
            }
            if (System.nanoTime() - lastReport > TimeUnit.SECONDS.toNanos(10)) {
                lastReport = System.nanoTime();
                log.log("draining: " + pending + " pending, " + unpublished + " unpublished, " + decided + " of "
                        + (submitted + forgedJobs + scheduled) + " decided");
            }
            log.sleep(500);
        }
    }
}
