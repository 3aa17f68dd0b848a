package dev.fencedjobs.chaos;

import dev.fencedjobs.db.internal.Roles;
import dev.fencedjobs.runtime.internal.Faults;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * Inserts jobs with plain SQL as the producer role, some due at once, some a few seconds out. One
 * in {@link ChaosLimits#TENANT_SHARE} names a rate-limited tenant key, and one in eight has a
 * priority (-30 to 90 s).
 */
final class LoadGenerator extends Thread {

    static final int RESOURCES = ChaosRun.RESOURCES;

    private final ChaosRun.Options options;
    private final String url;
    private final RunLog log;
    final List<String> submitted = new ArrayList<>();
    volatile boolean stop;
    private final Random loadRandom;
    private Connection connection;
    private long lastFailureReport = System.nanoTime() - TimeUnit.MINUTES.toNanos(1);

    LoadGenerator(ChaosRun.Options options, String url, RunLog log) {
        super("chaos-load");
        this.options = options;
        this.url = url;
        this.log = log;
        this.loadRandom = new Random(options.seed() ^ 0x5DEECE66DL);
        setDaemon(true);
    }

    @Override
    public void run() {
        int perTick = Math.max(1, options.rate() / 20);
        long next = System.nanoTime();
        long sequence = 0;
        while (!stop) {
            List<String> keys = new ArrayList<>(perTick);
            String[] resources = new String[perTick];
            Long[] delays = new Long[perTick];
            String[] dispatchKeys = new String[perTick];
            Integer[] priorities = new Integer[perTick];
            for (int i = 0; i < perTick; i++) {
                keys.add("chaos-" + options.seed() + "-" + sequence++);
                resources[i] = "resource-" + loadRandom.nextInt(RESOURCES);
                delays[i] = loadRandom.nextInt(4) == 0 ? (long) loadRandom.nextInt(4000) : 0L;
                dispatchKeys[i] = loadRandom.nextInt(ChaosLimits.TENANT_SHARE) == 0
                        ? ChaosLimits.TENANTS.get(loadRandom.nextInt(ChaosLimits.TENANTS.size()))
                        : null;
                priorities[i] = loadRandom.nextInt(8) == 0 ? loadRandom.nextInt(121) - 30 : 0;
            }
            insertUntilAcknowledged(keys, resources, delays, dispatchKeys, priorities);
            submitted.addAll(keys);
            next += TimeUnit.MILLISECONDS.toNanos(50);
            long wait = next - System.nanoTime();
            if (wait > 0) {
                LockSupport.parkNanos(wait);
            } else if (wait < -TimeUnit.SECONDS.toNanos(1)) {
                next = System.nanoTime();
            }
        }
    }

    /**
     * The same batch is retried, under the same unique keys, until the database acknowledges it:
     * an INSERT whose commit was cut off may or may not have landed, and ON CONFLICT DO NOTHING
     * makes the retry safe either way.
     */
    private void insertUntilAcknowledged(
            List<String> keys, String[] resources, Long[] delays, String[] dispatchKeys, Integer[] priorities) {
        while (true) {
            try {
                if (connection == null) {
                    Properties p = new Properties();
                    p.setProperty("user", Roles.PRODUCER);
                    p.setProperty("password", "producer");
                    p.setProperty("connectTimeout", "2");
                    p.setProperty("socketTimeout", "10");
                    connection = DriverManager.getConnection(url, p);
                }
                try (PreparedStatement s = connection.prepareStatement(
                        "INSERT INTO jobs (unique_key, resource, payload, due_at, dispatch_key, priority)"
                                + " SELECT k, r, jsonb_build_object('key', k), clock_timestamp() + d * interval '1 millisecond', dk, p"
                                + " FROM unnest(?::varchar[], ?::varchar[], ?::bigint[], ?::varchar[], ?::integer[]) AS t(k, r, d, dk, p)"
                                + " ON CONFLICT (unique_key) DO NOTHING")) {
                    s.setArray(1, connection.createArrayOf("varchar", keys.toArray()));
                    s.setArray(2, connection.createArrayOf("varchar", resources));
                    s.setArray(3, connection.createArrayOf("bigint", delays));
                    s.setArray(4, connection.createArrayOf("varchar", dispatchKeys));
                    s.setArray(5, connection.createArrayOf("integer", priorities));
                    s.executeUpdate();
                }
                return;
            } catch (SQLException e) {
                if (System.nanoTime() - lastFailureReport > TimeUnit.SECONDS.toNanos(5)) {
                    lastFailureReport = System.nanoTime();
                    log.log("load: insert failed, retrying the same batch: " + Faults.describe(e));
                }
                closeConnection();
                LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(200));
            }
        }
    }

    private void closeConnection() {
        if (connection != null) {
            try {
                connection.close();
            } catch (SQLException ignored) {
                // Gone already.
            }
            connection = null;
        }
    }

    void finish() throws InterruptedException {
        stop = true;
        join();
        closeConnection();
    }
}
