package dev.fencedjobs.chaos;

import dev.fencedjobs.runtime.Envelope;
import java.nio.charset.StandardCharsets;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.Properties;
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

    Forger(ChaosCluster cluster, History history) {
        this.cluster = cluster;
        this.history = history;
    }

    /**
     * Writes records the consumer must handle without the dispatcher: two malformed ones (dead
     * letters), a fresh record with a high token on a resource of its own (applied once), a copy of it
     * (a duplicate) and a record below that token (rejected as stale).
     */
    void forge() throws Exception {
        int round = forgeRounds++;
        String resource = "forged-" + round;
        long fresh = FORGED_JOB_BASE + 2L * round;
        Properties p = new Properties();
        p.put("bootstrap.servers", cluster.kafka.bootstrapServers());
        p.put("acks", "all");
        p.put("delivery.timeout.ms", "60000");
        try (KafkaProducer<String, byte[]> producer = new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer())) {
            send(producer, "malformed", resource, "{\"version\":1,\"jobId\":".getBytes(StandardCharsets.UTF_8), null, null);
            send(producer, "malformed", resource, "{\"version\":1,\"resource\":\"x\"}".getBytes(StandardCharsets.UTF_8), null, null);
            send(producer, "fresh", resource, envelope(fresh, resource, 1_000_000), fresh, 1_000_000L);
            send(producer, "duplicate", resource, envelope(fresh, resource, 1_000_000), fresh, 1_000_000L);
            send(producer, "stale", resource, envelope(fresh + 1, resource, 999_999), fresh + 1, 999_999L);
        }
    }

    private static byte[] envelope(long jobId, String resource, long token) {
        OffsetDateTime now = OffsetDateTime.now(ZoneOffset.UTC);
        return new Envelope(Envelope.VERSION, jobId, jobId, resource, token, "{\"forged\":true}", now, now).toJson();
    }

    private void send(KafkaProducer<String, byte[]> producer, String kind, String resource, byte[] value, Long jobId, Long token) throws Exception {
        RecordMetadata m = producer.send(new ProducerRecord<>(TOPIC, resource, value)).get(90, TimeUnit.SECONDS);
        history.forged.add(new History.Forged(kind, m.partition(), m.offset(), jobId, resource, token));
    }

}
