package dev.fencedjobs.chaos;

import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.runtime.internal.RecordSignatures;
import java.nio.charset.StandardCharsets;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Records written straight to the topic, around the dispatcher, each recorded in the history for the checker. */
final class Forger {

    static final String TOPIC = ChaosRun.TOPIC;
    static final long FORGED_JOB_BASE = ChaosRun.FORGED_JOB_BASE;

    private final ChaosCluster cluster;
    private final History history;
    private int forgeRounds;
    /** A key of the forger's own, which no consumer trusts. */
    private final RecordTrust stranger = RecordTrust.generate();

    Forger(ChaosCluster cluster, History history) {
        this.cluster = cluster;
        this.history = history;
    }

    /** Kinds of forged record that no trusted key signed: each must be dead-lettered as unauthenticated, with no effect. */
    static final Set<String> UNAUTHENTICATED = Set.of("unsigned", "wrong-key");

    /**
     * Writes records the consumer must handle without the dispatcher. Some come from a party that
     * can write to the topic but holds no relay key: one unsigned and one signed with a key of its
     * own, each with a token above all others on a resource of its own (dead-lettered as
     * unauthenticated, no effect; were either to move the fence, the fresh record after them would be
     * rejected, which the checker catches). The others are signed with the relay's key, as a relay
     * with a bug would write them: two malformed ones (dead letters), a fresh record with a high
     * token (applied once), a copy of it (a duplicate) and a record below that token (rejected as
     * stale).
     */
    void forge() throws Exception {
        int round = forgeRounds++;
        String resource = "forged-" + round;
        long fresh = FORGED_JOB_BASE + 4L * round;
        Properties p = new Properties();
        p.put("bootstrap.servers", cluster.kafka.bootstrapServers());
        p.put("acks", "all");
        p.put("delivery.timeout.ms", "60000");
        try (KafkaProducer<String, byte[]> producer =
                new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer())) {
            send(producer, "unsigned", resource, envelope(fresh + 2, resource, 2_000_000), fresh + 2, 2_000_000L, null);
            send(
                    producer,
                    "wrong-key",
                    resource,
                    envelope(fresh + 3, resource, 2_000_000),
                    fresh + 3,
                    2_000_000L,
                    stranger);
            send(
                    producer,
                    "malformed",
                    resource,
                    "{\"version\":1,\"jobId\":".getBytes(StandardCharsets.UTF_8),
                    null,
                    null);
            send(
                    producer,
                    "malformed",
                    resource,
                    "{\"version\":1,\"resource\":\"x\"}".getBytes(StandardCharsets.UTF_8),
                    null,
                    null);
            send(producer, "fresh", resource, envelope(fresh, resource, 1_000_000), fresh, 1_000_000L);
            send(producer, "duplicate", resource, envelope(fresh, resource, 1_000_000), fresh, 1_000_000L);
            send(producer, "stale", resource, envelope(fresh + 1, resource, 999_999), fresh + 1, 999_999L);
        }
    }

    private static byte[] envelope(long jobId, String resource, long token) {
        OffsetDateTime now = OffsetDateTime.now(ZoneOffset.UTC);
        return new Envelope(
                        Envelope.VERSION, jobId, jobId, resource, FencingToken.of(token), "{\"forged\":true}", now, now)
                .toJson();
    }

    private void send(
            KafkaProducer<String, byte[]> producer, String kind, String resource, byte[] value, Long jobId, Long token)
            throws Exception {
        send(producer, kind, resource, value, jobId, token, cluster.trust);
    }

    /** Signed with {@code keys} as a batch of one, or unsigned where it is null. */
    private void send(
            KafkaProducer<String, byte[]> producer,
            String kind,
            String resource,
            byte[] value,
            Long jobId,
            Long token,
            RecordTrust keys)
            throws Exception {
        ProducerRecord<String, byte[]> record = new ProducerRecord<>(TOPIC, resource, value);
        if (keys != null) {
            RecordSignatures.sign(keys, System.currentTimeMillis(), List.of(record));
        }
        RecordMetadata m = producer.send(record).get(90, TimeUnit.SECONDS);
        history.forged.add(new History.Forged(kind, m.partition(), m.offset(), jobId, resource, token));
    }
}
