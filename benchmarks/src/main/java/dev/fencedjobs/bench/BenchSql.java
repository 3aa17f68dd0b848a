package dev.fencedjobs.bench;

import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Database;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.BooleanSupplier;
import org.postgresql.ds.PGSimpleDataSource;

/** Small JDBC helpers the benchmarks share. */
final class BenchSql {

    private BenchSql() {}

    static DatabaseConfig database(String url, String user, String password) {
        return DatabaseConfig.of(url, user, password);
    }

    static void migrate(DatabaseConfig db) {
        PGSimpleDataSource ds = new PGSimpleDataSource();
        ds.setUrl(db.url());
        ds.setUser(db.user());
        ds.setPassword(db.password());
        Database.migrate(ds);
    }

    static Connection connect(DatabaseConfig db) throws SQLException {
        return DriverManager.getConnection(db.url(), db.user(), db.password());
    }

    static void execute(DatabaseConfig db, String sql) throws SQLException {
        try (Connection c = connect(db);
                Statement s = c.createStatement()) {
            s.execute(sql);
        }
    }

    static boolean exists(DatabaseConfig db, String sql) {
        try (Connection c = connect(db);
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(sql)) {
            return rs.next();
        } catch (SQLException e) {
            throw new IllegalStateException(e);
        }
    }

    static double queryDouble(DatabaseConfig db, String sql) throws SQLException {
        try (Connection c = connect(db);
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(sql)) {
            rs.next();
            return rs.getDouble(1);
        }
    }

    /**
     * Figures of one benchmark run in rounds, signed beside unsigned: each run printed as it ends,
     * and the medians at the end.
     */
    static final class Rounds {
        private final String unit;
        private final Map<String, List<Double>> rates = new TreeMap<>();

        Rounds(String unit) {
            this.unit = unit;
            System.out.printf(
                    "%-7s %-10s %-18s %12s %12s %14s%n", "round", "batch", "records", unit, "seconds", unit + "/s");
        }

        /**
         * The rounds to run: {@code -DwarmUpRounds} (1 unless set) rounds numbered 0 and below, which
         * print but do not count (the JIT compiles the code under test through the first runs of a
         * fresh JVM, more for whichever side runs first), then {@code rounds} from 1.
         */
        static int firstRound() {
            return 1 - Integer.getInteger("warmUpRounds", 1);
        }

        /** The sides of a round in turn: in the order given in odd rounds, the other way round in even ones. */
        static <T> List<T> inTurn(int round, List<T> sides) {
            List<T> turn = new ArrayList<>(sides);
            if (Math.floorMod(round, 2) == 0) {
                Collections.reverse(turn);
            }
            return turn;
        }

        void add(int round, int batch, String side, long count, double seconds) {
            System.out.printf(
                    "%-7s %-10d %-18s %,12d %12.2f %,14.0f%n",
                    round < 1 ? "warm-up" : String.valueOf(round), batch, side, count, seconds, count / seconds);
            if (round < 1) {
                return;
            }
            rates.computeIfAbsent(String.format("%5d %s", batch, side), k -> new ArrayList<>())
                    .add(count / seconds);
        }

        void printMedians(int rounds) {
            System.out.printf("%nMedian of %d rounds, %s/s:%n", rounds, unit);
            rates.forEach((k, v) -> System.out.printf(
                    "  batch %s: %,.0f (of %s)%n",
                    k, median(v), v.stream().map(x -> String.format("%,.0f", x)).toList()));
        }
    }

    /** The median of some figures (the mean of the middle two for an even count). */
    static double median(List<Double> values) {
        List<Double> sorted = new ArrayList<>(values);
        sorted.sort(null);
        int n = sorted.size();
        return n % 2 == 1 ? sorted.get(n / 2) : (sorted.get(n / 2 - 1) + sorted.get(n / 2)) / 2;
    }

    static void waitFor(BooleanSupplier condition, Duration timeout) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("timed out after " + timeout);
            }
            Thread.sleep(100);
        }
    }

    /** Runs {@code insert} {@code perTick} rows at a time at {@code rate} rows/s for {@code seconds}; returns the rate achieved. */
    static double offer(Statement statement, String insert, int rate, int perTick, int seconds) throws Exception {
        return offerMillis(statement, insert, rate, perTick, seconds * 1000L);
    }

    /** As {@link #offer}, for {@code millis}. */
    static double offerMillis(Statement statement, String insert, int rate, int perTick, long millis) throws Exception {
        long tickNanos = 1_000_000_000L * perTick / rate;
        long start = System.nanoTime();
        long end = start + millis * 1_000_000L;
        long next = start;
        long inserted = 0;
        while (next < end) {
            long wait = next - System.nanoTime();
            if (wait > 0) {
                Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
            }
            inserted += statement.executeUpdate(insert);
            next += tickNanos;
        }
        return inserted / ((System.nanoTime() - start) / 1e9);
    }

    /** p50, p99 and max of a millisecond expression over the rows of a query's FROM/WHERE part. */
    /**
     * Due-to-effect latency, SQL INSERT's due time to the consumer's ledger row, of the jobs that
     * {@code where} picks (over {@code ledger l JOIN jobs j}): count, p50, p99 and max, in ms.
     */
    static double[] dueToEffect(Statement statement, String where) throws SQLException {
        return percentiles(
                statement,
                "extract(epoch FROM (l.applied_at - j.due_at)) * 1000",
                "FROM ledger l JOIN jobs j ON j.id = l.job_id WHERE " + where);
    }

    static double[] percentiles(Statement statement, String msExpression, String fromWhere) throws SQLException {
        try (ResultSet rs = statement.executeQuery("SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), "
                + "percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), max(ms) FROM (SELECT " + msExpression + " AS ms "
                + fromWhere + ") l")) {
            rs.next();
            return new double[] {rs.getLong(1), rs.getDouble(2), rs.getDouble(3), rs.getDouble(4)};
        }
    }
}
