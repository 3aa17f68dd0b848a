package dev.fencedjobs.relay;

import dev.fencedjobs.lease.FencingToken;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;
import org.apache.kafka.clients.producer.ProducerRecord;

/** Sends a batch to Kafka. */
interface Publisher extends AutoCloseable {

    /**
     * Sends all records with the producer that belongs to {@code token}, flushes once, and returns
     * once the broker acknowledged every one of them. Throws if any record failed; then part of the
     * batch may be in the topic, and the caller sends the whole batch again (consumers drop the
     * duplicates by job id).
     */
    void publish(FencingToken token, List<ProducerRecord<String, byte[]>> records);

    /**
     * As {@link #publish(FencingToken, List)}, for records in groups, with {@code beforeSending} called on
     * each group just before its records are sent: the relay signs a group while the one before is
     * on its way to the broker.
     */
    default void publish(
            FencingToken token,
            List<List<ProducerRecord<String, byte[]>>> groups,
            Consumer<List<ProducerRecord<String, byte[]>>> beforeSending) {
        List<ProducerRecord<String, byte[]>> records = new ArrayList<>();
        for (List<ProducerRecord<String, byte[]>> group : groups) {
            beforeSending.accept(group);
            records.addAll(group);
        }
        publish(token, records);
    }

    /**
     * Gets ready to publish for {@code token} (the topic exists, a producer for the token) before
     * there is anything to send, so that a broker that refuses us shows when leadership begins, not
     * at the first row. Throws as {@link #publish} does.
     */
    default void prepare(FencingToken token) {}

    /**
     * This replica follows: drop a leader's producer, and get ready to lead (the topic checked, a
     * spare producer started) so that a takeover does not wait for them. Best effort: whatever
     * fails here, {@link #prepare} does again when leading.
     */
    default void standBy() {
        reset();
    }

    /**
     * The topic's partition count as the producer last learned it, for the relay to sign each
     * partition's share of a batch on its own; 1 when not known.
     */
    default int partitions() {
        return 1;
    }

    /** Drops the producer; the next publish starts a new one. */
    void reset();

    @Override
    void close();
}
