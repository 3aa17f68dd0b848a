package dev.fencedjobs.local;

import dev.fencedjobs.lease.LeaseRow;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.Optional;

/**
 * Submits a stream of jobs with plain SQL and, every dozen seconds, SIGKILLs the dispatcher that
 * holds the lease and starts a new replica, then checks that every job still has exactly one effect.
 */
final class Demo {

    private final LocalStack stack;
    private final Duration length;

    Demo(LocalStack stack, Duration length) {
        this.stack = stack;
        this.length = length;
    }

    boolean run() throws Exception {
        System.out.println("Demo: submitting about 50 jobs a second for " + length.toSeconds()
                + " s, killing the dispatcher leader every 12 s.");
        long end = System.nanoTime() + length.toNanos();
        long nextKill = System.nanoTime() + Duration.ofSeconds(12).toNanos();
        int kills = 0;
        try (Connection c = stack.connect(); Statement s = c.createStatement()) {
            while (System.nanoTime() < end) {
                // Three due now, two due in the next few seconds, over ten resources.
                s.execute("INSERT INTO jobs (resource, payload, due_at) SELECT 'account-' || (random() * 9)::int, "
                        + "jsonb_build_object('demo', true), clock_timestamp() + (CASE WHEN g <= 3 THEN 0 ELSE random() * 3 END) "
                        + "* interval '1 second' FROM generate_series(1, 5) g");
                if (System.nanoTime() > nextKill) {
                    if (killLeader(s)) {
                        kills++;
                    }
                    nextKill = System.nanoTime() + Duration.ofSeconds(12).toNanos();
                }
                Thread.sleep(100);
            }
            System.out.println("Demo: submissions stopped; waiting for the system to drain...");
            Counts counts = Counts.read(s);
            long deadline = System.nanoTime() + Duration.ofSeconds(90).toNanos();
            while (!counts.exact() && System.nanoTime() < deadline) {
                Thread.sleep(500);
                counts = Counts.read(s);
            }
            boolean exact = counts.exact();
            System.out.println();
            System.out.println("Demo summary: " + counts.jobs() + " jobs submitted, " + counts.completed() + " completed, "
                    + counts.effects() + " effects for " + counts.distinctEffects() + " distinct jobs, " + kills
                    + " dispatcher leaders killed with SIGKILL, tokens used [" + counts.tokens() + "], stale " + counts.stale()
                    + ", dead letters " + counts.deadLetters() + ".");
            System.out.println(exact ? "Exactly once: every job has exactly one effect." : "NOT EXACT: see the counts above.");
            return exact;
        }
    }

    /** Finds the dispatcher process whose holder id (host-pid-random) holds the lease, and kills it. */
    private boolean killLeader(Statement s) throws Exception {
        String holder;
        long token;
        Optional<LeaseRow> lease = LeaseRow.live(s.getConnection(), "scheduler");
        if (lease.isEmpty()) {
            return false;
        }
        holder = lease.get().holderId();
        token = lease.get().token();
        Optional<LocalStack.Child> leader = stack.children().stream()
                .filter(c -> c.process.isAlive() && holder.contains("-" + c.process.pid() + "-")).findFirst();
        if (leader.isEmpty()) {
            return false;
        }
        System.out.println(String.format("%-13s| SIGKILL %s, the leader with token %d; a follower takes over once its database session ends (after the lease, 5 s, at the latest)",
                "demo", leader.get().name, token));
        leader.get().process.kill();
        stack.children().remove(leader.get());
        stack.startDispatcher();
        return true;
    }
}
