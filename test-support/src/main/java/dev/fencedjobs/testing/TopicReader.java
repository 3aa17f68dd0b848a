package dev.fencedjobs.testing;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

/** Reads a whole topic from the beginning, as a read_committed consumer sees it. */
public final class TopicReader implements AutoCloseable {

    private final KafkaConsumer<String, byte[]> consumer;
    private final List<ConsumerRecord<String, byte[]>> records = new ArrayList<>();

    public TopicReader(String bootstrapServers, String topic) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrapServers);
        p.put("group.id", "reader-" + UUID.randomUUID());
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("isolation.level", "read_committed");
        consumer = new KafkaConsumer<>(p, new StringDeserializer(), new ByteArrayDeserializer());
        consumer.subscribe(List.of(topic));
    }

    /** Polls until at least {@code count} records were read in all, or the timeout passes. */
    public List<ConsumerRecord<String, byte[]>> readAtLeast(int count, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (records.size() < count && System.nanoTime() < deadline) {
            consumer.poll(Duration.ofMillis(200)).forEach(records::add);
        }
        return List.copyOf(records);
    }

    /** Polls for a while longer, to see whether anything more arrives. */
    public List<ConsumerRecord<String, byte[]>> readFor(Duration duration) {
        long deadline = System.nanoTime() + duration.toNanos();
        while (System.nanoTime() < deadline) {
            consumer.poll(Duration.ofMillis(200)).forEach(records::add);
        }
        return List.copyOf(records);
    }

    public static long headerLong(ConsumerRecord<?, ?> record, String name) {
        Header h = record.headers().lastHeader(name);
        return Long.parseLong(new String(h.value(), StandardCharsets.UTF_8));
    }

    @Override
    public void close() {
        consumer.close();
    }
}
