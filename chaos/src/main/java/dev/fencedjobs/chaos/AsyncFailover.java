package dev.fencedjobs.chaos;

import dev.fencedjobs.cli.Bootstrap;
import dev.fencedjobs.consumer.ConsumerConfig;
import dev.fencedjobs.consumer.FencedConsumer;
import dev.fencedjobs.consumer.LedgerEffect;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Roles;
import dev.fencedjobs.dispatcher.Dispatcher;
import dev.fencedjobs.dispatcher.DispatcherConfig;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.relay.Relay;
import dev.fencedjobs.relay.RelayConfig;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.testing.StreamingPostgres;
import dev.fencedjobs.testing.TestDatabase;
import dev.fencedjobs.testing.TestKafka;
import dev.fencedjobs.testing.TestPostgres;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

/**
 * A failover to an asynchronous standby that missed the last seconds of commits, with a lease
 * handoff inside them and the consumer's tables on a server of their own, which does not roll back.
 * What the promoted database lost is beyond reach; what it holds must still work, and the rollback
 * must be visible. The run prints what it measured:
 *
 * <pre>
 * java -cp chaos/target/fenced-jobs-chaos.jar dev.fencedjobs.chaos.AsyncFailover [WINDOW_MS] [AFTER_MS]
 * </pre>
 *
 * <ol>
 *   <li>a primary with an asynchronous standby; two dispatchers, a relay and a consumer in this JVM
 *       on the multi-host URL, as their least-privilege roles; a producer inserting 200 jobs/s with
 *       unique keys, each batch retried until acknowledged;
 *   <li>the standby caught up, then cut off (it receives no more WAL);
 *   <li>halfway through the window, the dispatcher leader stops gracefully and the other takes over
 *       with a new token; a third dispatcher starts;
 *   <li>at the end of the window the primary is SIGKILLed and the standby promoted; the load goes on;
 *   <li>once everything drained, the lost primary is started alone to read the tokens it issued.
 * </ol>
 */
public final class AsyncFailover {

    static final String DATABASE = "fencedjobs";
    private static final Map<String, String> PASSWORDS = Map.of(
            Roles.DISPATCHER,
            "dispatcher",
            Roles.RELAY,
            "relay",
            Roles.CONSUMER,
            "consumer",
            Roles.PRODUCER,
            "producer");

    /** What the scenario measured. */
    public record Figures(
            int acknowledged,
            int lost,
            int lostWithEffect,
            int inPromoted,
            int withoutOwnEffect,
            int withSeveralOwnEffects,
            int idsReissued,
            long jobIdReusesReported,
            long tokenReusesReported,
            int tokensReissued,
            long highestTokenLost,
            long lowestTokenAfterPromotion) {

        String summary() {
            return String.format(
                    "async failover: %d jobs acknowledged, %d lost with the old primary (%d of them had had their effect); "
                            + "%d jobs in the promoted database, %d without an effect of their own, %d with more than one; %d job ids handed out again, "
                            + "%d job-id reuses and %d token reuses reported by the consumer; %d tokens issued again to another tenure "
                            + "(highest token of the lost primary %d, lowest issued after the promotion %d)",
                    acknowledged,
                    lost,
                    lostWithEffect,
                    inPromoted,
                    withoutOwnEffect,
                    withSeveralOwnEffects,
                    idsReissued,
                    jobIdReusesReported,
                    tokenReusesReported,
                    tokensReissued,
                    highestTokenLost,
                    lowestTokenAfterPromotion);
        }
    }

    private AsyncFailover() {}

    public static void main(String[] args) throws Exception {
        Duration window = Duration.ofMillis(args.length > 0 ? Long.parseLong(args[0]) : 4000);
        Duration after = Duration.ofMillis(args.length > 1 ? Long.parseLong(args[1]) : 6000);
        System.out.println(run(window, after).summary());
        System.exit(0);
    }

    public static Figures run(Duration window, Duration after) throws Exception {
        String topic = "async-failover-" + UUID.randomUUID();
        String bootstrap = TestKafka.shared().bootstrapServers();
        List<AutoCloseable> services = new CopyOnWriteArrayList<>();
        try (StreamingPostgres pg = new StreamingPostgres(StreamingPostgres.Replication.ASYNCHRONOUS);
                TestDatabase consumerDb = TestPostgres.shared().createDatabase("async_failover_consumer")) {
            pg.executeOnPrimary("postgres", "CREATE DATABASE " + DATABASE);
            String url = pg.url(DATABASE);
            DatabaseConfig jobsOwner = database(url, pg.user(), pg.password());
            DatabaseConfig consumerOwner = database(consumerDb.url(), consumerDb.user(), consumerDb.password());
            Bootstrap.migrate(jobsOwner, consumerOwner, 0);
            Bootstrap.roles(jobsOwner, PASSWORDS);
            Bootstrap.roles(consumerOwner, Map.of(Roles.CONSUMER, "consumer"));
            LeaseConfig lease = new LeaseConfig(Duration.ofSeconds(2), Duration.ofMillis(400));
            KafkaSettings kafka = new KafkaSettings(bootstrap, topic).withTrust(RecordTrust.generate());
            DispatcherConfig dispatcher = new DispatcherConfig(service(url, Roles.DISPATCHER), lease, 200);
            services.add(Dispatcher.builder(dispatcher).start());
            services.add(Dispatcher.builder(dispatcher).start());
            services.add(Relay.builder(new RelayConfig(
                            service(url, Roles.RELAY),
                            lease,
                            kafka,
                            3,
                            (short) 1,
                            500,
                            Duration.ofSeconds(1),
                            100_000,
                            Duration.ofHours(1)))
                    .start());
            services.add(FencedConsumer.builder(
                            new ConsumerConfig(
                                    service(consumerDb.url(), Roles.CONSUMER),
                                    kafka,
                                    "async-failover",
                                    500,
                                    3,
                                    Duration.ofMillis(10),
                                    Duration.ofDays(7)),
                            new LedgerEffect())
                    .start());

            Producer producer = new Producer(url);
            producer.start();
            Thread.sleep(3000);
            pg.awaitStandbyCaughtUp();
            pg.cutReplication();
            Thread.sleep(window.toMillis() / 2);
            handOff(services, dispatcher);
            Thread.sleep(window.toMillis() - window.toMillis() / 2);
            pg.killPrimary();
            pg.promoteStandby();
            Thread.sleep(after.toMillis());
            producer.finish();
            drain(url, pg, consumerDb);
            for (AutoCloseable s : services) {
                s.close();
            }
            services.clear();
            return measure(pg, url, consumerDb, producer.acknowledged);
        } finally {
            for (AutoCloseable s : services) {
                s.close();
            }
        }
    }

    /** The dispatcher leader stops gracefully (releasing its lease), another takes over, a new one joins. */
    private static void handOff(List<AutoCloseable> services, DispatcherConfig config) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (System.nanoTime() < deadline) {
            for (AutoCloseable s : services) {
                if (s instanceof Dispatcher d && d.state() == RunningService.State.LEADING) {
                    services.remove(d);
                    d.close();
                    services.add(Dispatcher.builder(config).start());
                    return;
                }
            }
            Thread.sleep(50);
        }
        throw new IllegalStateException("no dispatcher leader to hand off from");
    }

    /** Until nothing is pending or unpublished on the promoted database and the consumer has decided nothing new for 3 s. */
    private static void drain(String url, StreamingPostgres pg, TestDatabase consumerDb) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        long lastDecided = -1;
        long stableSince = System.nanoTime();
        while (System.nanoTime() < deadline) {
            long open;
            long decided;
            try (Connection c = DriverManager.getConnection(url, pg.user(), pg.password())) {
                open = single(
                        c,
                        "SELECT (SELECT count(*) FROM jobs WHERE state = 'pending') + (SELECT count(*) FROM outbox_unpublished)");
            } catch (SQLException e) {
                open = -1;
            }
            try (Connection c =
                    DriverManager.getConnection(consumerDb.url(), consumerDb.user(), consumerDb.password())) {
                decided = single(c, "SELECT count(*) FROM consumer_processed")
                        + (exists(c, "consumer_processed_reissued")
                                ? single(c, "SELECT count(*) FROM consumer_processed_reissued")
                                : 0);
            }
            if (decided != lastDecided || open != 0) {
                lastDecided = decided;
                stableSince = System.nanoTime();
            } else if (System.nanoTime() - stableSince > TimeUnit.SECONDS.toNanos(3)) {
                return;
            }
            Thread.sleep(250);
        }
        throw new IllegalStateException("the system did not drain in 120 s after the failover");
    }

    private static Figures measure(StreamingPostgres pg, String url, TestDatabase consumerDb, List<String> acknowledged)
            throws Exception {
        Map<String, Long> promotedIdByKey = new HashMap<>();
        Map<Long, String> tenureAfter = new HashMap<>();
        try (Connection c = DriverManager.getConnection(url, pg.user(), pg.password());
                Statement s = c.createStatement()) {
            try (ResultSet r = s.executeQuery("SELECT id, unique_key FROM jobs")) {
                while (r.next()) {
                    promotedIdByKey.put(r.getString(2), r.getLong(1));
                }
            }
            readTenures(s, tenureAfter);
        }
        Map<String, Integer> effectsByKeyAndId = new HashMap<>();
        Map<Long, Set<String>> keysById = new HashMap<>();
        Set<String> keysWithEffect = new HashSet<>();
        long jobIdReuses = 0;
        long tokenReuses = 0;
        try (Connection c = DriverManager.getConnection(consumerDb.url(), consumerDb.user(), consumerDb.password());
                Statement s = c.createStatement()) {
            try (ResultSet r = s.executeQuery("SELECT job_id, payload->>'key' FROM ledger")) {
                while (r.next()) {
                    effectsByKeyAndId.merge(r.getLong(1) + "/" + r.getString(2), 1, Integer::sum);
                    keysById.computeIfAbsent(r.getLong(1), id -> new HashSet<>())
                            .add(r.getString(2));
                    keysWithEffect.add(r.getString(2));
                }
            }
            if (exists(c, "consumer_reused")) {
                jobIdReuses = single(c, "SELECT count(*) FROM consumer_reused WHERE kind = 'job_id'");
                tokenReuses = single(c, "SELECT count(*) FROM consumer_reused WHERE kind = 'token'");
            }
        }
        Map<Long, String> tenureLost = new HashMap<>();
        String lostUrl = pg.startLostPrimaryAlone(DATABASE);
        try (Connection c = DriverManager.getConnection(lostUrl, pg.user(), pg.password());
                Statement s = c.createStatement()) {
            readTenures(s, tenureLost);
        }
        int lost = 0;
        int lostWithEffect = 0;
        for (String key : acknowledged) {
            if (!promotedIdByKey.containsKey(key)) {
                lost++;
                if (keysWithEffect.contains(key)) {
                    lostWithEffect++;
                }
            }
        }
        int without = 0;
        int several = 0;
        int reissued = 0;
        for (Map.Entry<String, Long> job : promotedIdByKey.entrySet()) {
            int own = effectsByKeyAndId.getOrDefault(job.getValue() + "/" + job.getKey(), 0);
            if (own == 0) {
                without++;
            } else if (own > 1) {
                several++;
            }
            if (keysById.getOrDefault(job.getValue(), Set.of()).stream().anyMatch(k -> !k.equals(job.getKey()))) {
                reissued++;
            }
        }
        int tokensReissued = 0;
        for (Map.Entry<Long, String> t : tenureAfter.entrySet()) {
            String before = tenureLost.get(t.getKey());
            if (before != null && !before.equals(t.getValue())) {
                tokensReissued++;
            }
        }
        long highestLost =
                tenureLost.keySet().stream().mapToLong(Long::longValue).max().orElse(0);
        long lowestAfter = tenureAfter.keySet().stream()
                .filter(t -> !tenureLost.containsKey(t) || !tenureLost.get(t).equals(tenureAfter.get(t)))
                .mapToLong(Long::longValue)
                .min()
                .orElse(0);
        return new Figures(
                acknowledged.size(),
                lost,
                lostWithEffect,
                promotedIdByKey.size(),
                without,
                several,
                reissued,
                jobIdReuses,
                tokenReuses,
                tokensReissued,
                highestLost,
                lowestAfter);
    }

    private static void readTenures(Statement s, Map<Long, String> into) throws SQLException {
        try (ResultSet r = s.executeQuery(
                // Every shard's scheduler lease (docs/shards.md): one counter, so a token names one tenure of one
                // shard.
                "SELECT fencing_token, holder_id, acquired_at FROM lease_takeover WHERE split_part(role, '/', 1) = 'scheduler'")) {
            while (r.next()) {
                into.put(r.getLong(1), r.getString(2) + "@" + r.getString(3));
            }
        }
    }

    private static boolean exists(Connection c, String table) throws SQLException {
        try (PreparedStatement s = c.prepareStatement("SELECT to_regclass(?) IS NOT NULL")) {
            s.setString(1, table);
            try (ResultSet r = s.executeQuery()) {
                r.next();
                return r.getBoolean(1);
            }
        }
    }

    private static long single(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement();
                ResultSet r = s.executeQuery(sql)) {
            r.next();
            return r.getLong(1);
        }
    }

    private static DatabaseConfig database(String url, String user, String password) {
        return DatabaseConfig.of(url, user, password)
                .withConnectTimeout(Duration.ofSeconds(1))
                .withServerTimeouts(Duration.ofMillis(800), Duration.ofMillis(800), Duration.ofSeconds(1));
    }

    private static ServiceConfig service(String url, String role) {
        return new ServiceConfig(database(url, role, PASSWORDS.get(role)), 0, Duration.ofSeconds(5), false);
    }

    /** Inserts 10 jobs every 50 ms as fj_producer; a batch is retried under the same keys until acknowledged. */
    private static final class Producer extends Thread {
        final List<String> acknowledged = new CopyOnWriteArrayList<>();
        private final String url;
        private volatile boolean stop;

        Producer(String url) {
            super("async-failover-producer");
            setDaemon(true);
            this.url = url;
        }

        @Override
        public void run() {
            long sequence = 0;
            Connection c = null;
            while (!stop) {
                List<String> keys = new ArrayList<>();
                for (int i = 0; i < 10; i++) {
                    keys.add("async-" + sequence++);
                }
                while (true) {
                    try {
                        if (c == null) {
                            Properties p = new Properties();
                            p.setProperty("user", Roles.PRODUCER);
                            p.setProperty("password", PASSWORDS.get(Roles.PRODUCER));
                            p.setProperty("connectTimeout", "2");
                            p.setProperty("socketTimeout", "5");
                            c = DriverManager.getConnection(url, p);
                        }
                        try (PreparedStatement s =
                                c.prepareStatement("INSERT INTO jobs (unique_key, resource, payload, due_at)"
                                        + " SELECT k, 'resource-' || (abs(hashtext(k)) % 10), jsonb_build_object('key', k), clock_timestamp()"
                                        + " FROM unnest(?::varchar[]) AS t(k) ON CONFLICT (unique_key) DO NOTHING")) {
                            s.setArray(1, c.createArrayOf("varchar", keys.toArray()));
                            s.executeUpdate();
                        }
                        acknowledged.addAll(keys);
                        break;
                    } catch (SQLException e) {
                        try {
                            if (c != null) {
                                c.close();
                            }
                        } catch (SQLException ignored) {
                            // Gone already.
                        }
                        c = null;
                        sleepQuietly(100);
                    }
                }
                sleepQuietly(50);
            }
            try {
                if (c != null) {
                    c.close();
                }
            } catch (SQLException ignored) {
                // Gone already.
            }
        }

        void finish() throws InterruptedException {
            stop = true;
            join();
        }

        private static void sleepQuietly(long millis) {
            try {
                Thread.sleep(millis);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
