package dev.fencedjobs.bench;

import dev.fencedjobs.testing.ServiceProcess;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Part 4 of the end-to-end benchmark, under 200 jobs/s due now: SIGKILL and SIGTERM of the
 * dispatcher leader to its successor's first completed job, beside the lease duration; then of one
 * of two consumers to the first effect from its partitions, beside the session timeout ({@link
 * ConsumerFailover}).
 */
final class FailoverPhase {

    private final BenchStack stack;
    private final E2eReport report;
    private final int trials;
    private final boolean dispatcher;
    /** Fixed ops ports of the consumers, whose {@code /status} the consumer failover reads. */
    private final Map<String, Integer> consumerPorts;

    /** {@code dispatcher}: the dispatcher's trials too, not only the consumer's. */
    FailoverPhase(BenchStack stack, E2eReport report, int trials, boolean dispatcher, Map<String, Integer> consumerPorts) {
        this.stack = stack;
        this.report = report;
        this.trials = trials;
        this.dispatcher = dispatcher;
        this.consumerPorts = consumerPorts;
    }

    void run() throws Exception {
        long leaseMs = 10_000; // the services run with the default LEASE_DURATION
        System.out.println("4. failover, " + trials + " trials each, with 200 jobs/s due now; lease " + leaseMs + " ms");
        AtomicBoolean stop = new AtomicBoolean();
        Thread background = new Thread(() -> {
            try (Connection c = stack.owner(); Statement s = c.createStatement()) {
                while (!stop.get()) {
                    s.executeUpdate(String.format(BenchStack.INSERT_DUE, 2));
                    Thread.sleep(10);
                }
            } catch (Exception e) {
                System.err.println("background load: " + e);
            }
        }, "e2e-background");
        background.start();
        try {
            if (dispatcher) {
                dispatcherFailover();
            }
            consumerFailover();
        } finally {
            stop.set(true);
            background.join();
        }
    }

    /** SIGKILL, then SIGTERM, of the dispatcher leader, {@code trials} times each. */
    private void dispatcherFailover() throws Exception {
        long leaseMs = 10_000; // the services run with the default LEASE_DURATION
        List<Double> kill = new ArrayList<>();
        List<Double> term = new ArrayList<>();
        for (int i = 0; i < trials; i++) {
            kill.add(takeover(true));
            System.out.printf(Locale.ROOT, "   SIGKILL trial %d: %.0f ms%n", i + 1, kill.get(i));
        }
        for (int i = 0; i < trials; i++) {
            term.add(takeover(false));
            System.out.printf(Locale.ROOT, "   SIGTERM trial %d: %.0f ms%n", i + 1, term.get(i));
        }
        report.put("leaseDurationMs", leaseMs);
        report.put("failoverSigkillMs", kill);
        report.put("failoverSigtermMs", term);
        report.row("4. SIGKILL of the leader to the new leader's first job (each trial starts once every replica reports ready)", E2eReport.summary(kill), "lease " + leaseMs + " ms (the floor); target < " + (leaseMs + 1000));
        report.row("4. SIGTERM of the leader to the new leader's first job (each trial starts once every replica reports ready)", E2eReport.summary(term), "target p99 < 200 ms");
    }

    /**
     * A second consumer joins the group for this part; each trial stops one of the two and times the
     * first effect from the partitions it held. The second consumer leaves again afterwards, so the
     * idle phase measures the same services as before.
     */
    private void consumerFailover() throws Exception {
        long sessionMs = dev.fencedjobs.consumer.GroupMembership.DEFAULT_SESSION_TIMEOUT.toMillis();
        stack.start("consumer-2", "consumer", "bench_consumer",
                Map.of(dev.fencedjobs.runtime.ServiceConfig.HTTP_PORT, Integer.toString(consumerPorts.get("consumer-2"))));
        List<String> resources = new ArrayList<>();
        for (int i = 0; i < BenchStack.RESOURCES; i++) {
            resources.add("account-" + i);
        }
        ConsumerFailover consumers = new ConsumerFailover(new ConsumerFailover.Services() {
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
        }, consumerPorts, BenchStack.TOPIC, BenchStack.PARTITIONS, resources);
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
            report.row("4. SIGKILL of one of two consumers to the first effect from its partitions", E2eReport.summary(kill),
                    "CONSUMER_SESSION_TIMEOUT " + sessionMs + " ms (the floor), then a rebalance");
            report.row("4. SIGTERM of one of two consumers to the first effect from its partitions", E2eReport.summary(term),
                    "it leaves the group at once");
        } finally {
            ServiceProcess second = stack.services().remove("consumer-2");
            second.terminate();
            second.waitFor();
        }
    }

    /** Stops the dispatcher leader and returns ms from the signal to the first job its successor completed. */
    private double takeover(boolean sigkill) throws Exception {
        // Each trial starts once every replica reports ready (ops server up, the dispatcher's warm-up
        // over), so that it measures a takeover by a replica that is really following.
        stack.awaitAllReady(Duration.ofSeconds(60));
        String leaderName = null;
        long token = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (leaderName == null) {
            try (Connection c = stack.owner()) {
                java.util.Optional<dev.fencedjobs.db.LeaseRow> lease = dev.fencedjobs.db.LeaseRow.live(c, "scheduler");
                if (lease.isPresent()) {
                    long pid = lease.get().holderPid();
                    token = lease.get().token();
                    for (Map.Entry<String, ServiceProcess> e : stack.services().entrySet()) {
                        if (e.getValue().pid() == pid && e.getValue().isAlive()) {
                            leaderName = e.getKey();
                        }
                    }
                }
            }
            if (leaderName == null) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("no live dispatcher leader");
                }
                Thread.sleep(100);
            }
        }
        long outboxBefore = stack.scalar("SELECT coalesce(max(id), 0) FROM outbox");
        ServiceProcess leader = stack.services().get(leaderName);
        long signalledAt = System.currentTimeMillis();
        if (sigkill) {
            leader.kill();
        } else {
            leader.terminate();
        }
        long first = 0;
        while (first == 0) {
            first = stack.scalar("SELECT coalesce((extract(epoch FROM min(completed_at)) * 1000)::bigint, 0) FROM outbox WHERE id > " + outboxBefore
                    + " AND fencing_token > " + token);
            Thread.sleep(20);
            if (System.currentTimeMillis() - signalledAt > 60_000) {
                throw new IllegalStateException("no takeover within 60 s");
            }
        }
        if (!sigkill) {
            leader.waitFor();
        }
        stack.restart(leaderName);
        return first - signalledAt;
    }
}
