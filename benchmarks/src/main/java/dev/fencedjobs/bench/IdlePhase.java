package dev.fencedjobs.bench;

import dev.fencedjobs.lease.LeaseRow;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/** Part 5 of the end-to-end benchmark: statements per second of each idle service (pg_stat_statements, one login role each). */
final class IdlePhase {

    private final BenchStack stack;
    private final E2eReport report;
    private final int idleSeconds;

    IdlePhase(BenchStack stack, E2eReport report, int idleSeconds) {
        this.stack = stack;
        this.report = report;
        this.idleSeconds = idleSeconds;
    }

    void run() throws Exception {
        System.out.println("5. idle services, " + idleSeconds + " s");
        BenchStack.waitFor(
                "the system to drain",
                () -> stack.scalar("SELECT count(*) FROM jobs WHERE state = 'pending'") == 0
                        && stack.scalar("SELECT count(*) FROM outbox_unpublished") == 0,
                Duration.ofMinutes(2));
        Thread.sleep(5_000);
        Map<String, Double> perSecond = new LinkedHashMap<>();
        try (Connection c = stack.owner();
                Statement s = c.createStatement()) {
            String leaderPid;
            leaderPid = Long.toString(LeaseRow.of(c, "scheduler").orElseThrow().holderPid());
            s.execute("SELECT pg_stat_statements_reset()");
            long start = System.nanoTime();
            Thread.sleep(idleSeconds * 1000L);
            double elapsed = (System.nanoTime() - start) / 1e9;
            for (String name : List.of("dispatcher-1", "dispatcher-2", "relay", "consumer")) {
                String role = "bench_" + name.replace('-', '_');
                long calls = BenchStack.scalar(
                        s,
                        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements st JOIN pg_roles r ON r.oid = st.userid"
                                + " WHERE r.rolname = '" + role + "'");
                String label = name.startsWith("dispatcher")
                        ? name
                                + (Long.toString(stack.services().get(name).pid())
                                                .equals(leaderPid)
                                        ? " (leader)"
                                        : " (follower)")
                        : name;
                perSecond.put(label, calls / elapsed);
            }
        }
        report.put("idleStatementsPerSecond", perSecond);
        StringBuilder sb = new StringBuilder();
        perSecond.forEach((k, v) -> sb.append(sb.length() == 0 ? "" : ", ")
                .append(k)
                .append(' ')
                .append(String.format(Locale.ROOT, "%.2f", v)));
        report.row("5. idle statements/s per service", sb.toString(), "target < 1 each");
    }
}
