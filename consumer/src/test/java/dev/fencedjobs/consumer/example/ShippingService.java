package dev.fencedjobs.consumer.example;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.consumer.Effect;
import dev.fencedjobs.consumer.FencedConsumer;
import dev.fencedjobs.consumer.Job;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RecordTrust;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.jooq.DSLContext;

/**
 * A plain Java application that runs the consumer inside itself, on its own pool and its own meter
 * registry: each job ships an order, once, in the same transaction that records the job as
 * processed. The README's "Embedding" section is this file's middle; {@code ShippingServiceTest}
 * runs it and checks that the README still shows it.
 */
public final class ShippingService implements AutoCloseable {

    private final HikariDataSource pool;
    private final MeterRegistry registry;
    private final FencedConsumer consumer;

    public ShippingService(
            String jdbcUrl, String user, String password, String kafkaBootstrap, String topic, RecordTrust relayKeys) {
        HikariConfig hikari = new HikariConfig();
        hikari.setJdbcUrl(jdbcUrl);
        hikari.setUsername(user);
        hikari.setPassword(password);
        this.pool = new HikariDataSource(hikari);
        this.registry = new SimpleMeterRegistry();
        // README:begin
        Effect shipOrder = new Effect() {
            @Override
            public void apply(DSLContext tx, Job job) {
                // tx is the consumer's transaction: this row commits with the record of the job, or not at all.
                tx.execute(
                        "INSERT INTO shipments (order_id, job_id, fencing_token) VALUES (?::jsonb ->> 'order', ?, ?)",
                        job.payloadJson(),
                        job.jobId(),
                        job.fencingToken().value());
            }
        };
        // relayKeys: the relay's public key (RecordTrust.from(Settings.fromEnvironment()) reads it)
        consumer = FencedConsumer.builder(
                        new KafkaSettings(kafkaBootstrap, topic).withTrust(relayKeys), "shipping", shipOrder)
                .dataSource(pool) // the application's pool; or .database(DatabaseConfig.of(url, user, password))
                .meterRegistry(registry) // optional: fencedjobs_consumer_* meters, tagged service=consumer
                .start(); // no HTTP port unless .opsServer(port)
        // README:end
    }

    public FencedConsumer consumer() {
        return consumer;
    }

    public MeterRegistry registry() {
        return registry;
    }

    public HikariDataSource pool() {
        return pool;
    }

    @Override
    public void close() {
        consumer.close(); // finishes the batch in hand and leaves the group; the pool stays the application's
        pool.close();
    }

    public static void main(String[] args) throws InterruptedException {
        try (ShippingService service = new ShippingService(
                args[0],
                args[1],
                args[2],
                args[3],
                args[4],
                RecordTrust.from(dev.fencedjobs.db.Settings.fromEnvironment()))) {
            Runtime.getRuntime().addShutdownHook(new Thread(service.consumer()::close));
            service.consumer().awaitTermination();
        }
    }
}
