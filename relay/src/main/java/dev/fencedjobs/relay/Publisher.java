package dev.fencedjobs.relay;

import java.util.List;
import org.apache.kafka.clients.producer.ProducerRecord;

/** Sends a batch to Kafka. */
interface Publisher extends AutoCloseable {

    /**
     * Sends all records in one Kafka transaction of the producer that belongs to {@code token},
     * and returns once the broker acknowledged and committed them. Throws if anything failed;
     * then nothing of the batch is visible to read_committed consumers.
     */
    void publish(long token, List<ProducerRecord<String, byte[]>> records);

    /** Drops the producer; the next publish starts a new one (and fences any older one). */
    void reset();

    @Override
    void close();
}
