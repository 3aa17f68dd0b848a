package dev.fencedjobs.local;

import dev.fencedjobs.lease.LeaseRow;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.Optional;

/**
 * Submits a stream of jobs with plain SQL and, every dozen seconds, SIGKILLs the dispatcher that
 * holds the lease and starts a new replica, then checks that every job still has exactly one effect.
 * With a directory for screenshots, takes the consumer's and a dispatcher's dashboards a few seconds
 * before the submissions stop.
 */
final class Demo {

    private final LocalStack stack;
    private final Duration length;
    /** Jobs submitted a second, in ten statements. */
    private final int rate;
    /** Where the dashboards' screenshots go, taken while the load still runs; null for none. */
    private final Path screenshots;

    Demo(LocalStack stack, Duration length, int rate, Path screenshots) {
        this.stack = stack;
        this.length = length;
        this.rate = rate;
        this.screenshots = screenshots;
    }

    boolean run() throws Exception {
        System.out.println("Demo: submitting about " + rate + " jobs a second for " + length.toSeconds()
                + " s, killing the dispatcher leader every 12 s.");
        long end = System.nanoTime() + length.toNanos();
        long nextKill = System.nanoTime() + Duration.ofSeconds(12).toNanos();
        // The screenshots a few seconds before the end, under load: long enough for chromium to load the pages.
        long screenshotAt = screenshots == null
                ? Long.MAX_VALUE
                : end - Duration.ofSeconds(Math.min(5, length.toSeconds() / 2)).toNanos();
        int perStatement = Math.max(1, rate / 10);
        int kills = 0;
        boolean screenshotsOk = true;
        try (Connection c = stack.connect();
                Statement s = c.createStatement()) {
            while (System.nanoTime() < end) {
                // Three in five due now, the others in the next few seconds, over ten resources.
                s.execute("INSERT INTO jobs (resource, payload, due_at) SELECT 'account-' || (random() * 9)::int, "
                        + "jsonb_build_object('demo', true), clock_timestamp() + (CASE WHEN g % 5 < 3 THEN 0 ELSE random() * 3 END) "
                        + "* interval '1 second' FROM generate_series(1, " + perStatement + ") g");
                if (System.nanoTime() > screenshotAt) {
                    screenshotAt = Long.MAX_VALUE;
                    screenshotsOk = screenshots(s);
                }
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
            System.out.println(
                    "Demo summary: " + counts.jobs() + " jobs submitted, " + counts.completed() + " completed, "
                            + counts.effects() + " effects for " + counts.distinctEffects() + " distinct jobs, " + kills
                            + " dispatcher leaders killed with SIGKILL, tokens used [" + counts.tokens() + "], stale "
                            + counts.stale()
                            + ", dead letters " + counts.deadLetters() + ".");
            System.out.println(
                    exact ? "Exactly once: every job has exactly one effect." : "NOT EXACT: see the counts above.");
            if (!screenshotsOk) {
                System.out.println("Screenshots: not all taken (see above).");
            }
            return exact && screenshotsOk;
        }
    }

    /**
     * The consumer's dashboard and a live dispatcher's, each with the job applied last looked up, as
     * PNG files in {@link #screenshots} (headless Chromium, Debian's {@code chromium}).
     */
    private boolean screenshots(Statement s) throws Exception {
        long job;
        try (ResultSet rs = s.executeQuery("SELECT coalesce(max(job_id), 0) FROM ledger")) {
            rs.next();
            job = rs.getLong(1);
        }
        Files.createDirectories(screenshots);
        boolean ok = true;
        boolean dispatcherTaken = false;
        for (LocalStack.Child child : stack.children()) {
            boolean consumer = child.name.equals("consumer");
            // The consumer's page and one dispatcher's (another one's if the first failed).
            if (!child.process.isAlive() || !(consumer || (child.name.startsWith("dispatcher-") && !dispatcherTaken))) {
                continue;
            }
            Path file = screenshots.resolve(consumer ? "dashboard.png" : "dashboard-dispatcher.png");
            String url = "http://localhost:" + child.httpPort() + "/#job=" + job;
            try {
                Chromium.screenshot(url, file);
                dispatcherTaken |= !consumer;
                System.out.println(String.format(
                        "%-13s| screenshot of the %s's dashboard under load: %s", "demo", child.name, file));
            } catch (IOException e) {
                System.out.println(String.format(
                        "%-13s| NO screenshot of the %s's dashboard: %s", "demo", child.name, e.getMessage()));
                ok = false;
            }
        }
        return ok;
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
        token = lease.get().token().value();
        Optional<LocalStack.Child> leader = stack.children().stream()
                .filter(c -> c.process.isAlive() && holder.contains("-" + c.process.pid() + "-"))
                .findFirst();
        if (leader.isEmpty()) {
            return false;
        }
        System.out.println(String.format(
                "%-13s| SIGKILL %s, the leader with token %d; a follower takes over once its database session ends (after the lease, 5 s, at the latest)",
                "demo", leader.get().name, token));
        leader.get().process.kill();
        stack.children().remove(leader.get());
        stack.startDispatcher();
        return true;
    }
}
