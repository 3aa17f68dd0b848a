package dev.fencedjobs.chaos;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.testing.KafkaProcess;
import dev.fencedjobs.testing.TestKafka;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;

/** LogDump reads what a real broker wrote: data batches, commit and abort markers, the abort index. */
class LogDumpTest {

    @Test
    void showsTheBatchesMarkersAndAbortedTransactionsOfTheOutboxIdsAskedFor() throws Exception {
        try (KafkaProcess kafka = new KafkaProcess()) {
            TestKafka.createTopic(kafka.bootstrapServers(), "dump", 1);
            Properties p = new Properties();
            p.put("bootstrap.servers", kafka.bootstrapServers());
            p.put("transactional.id", "log-dump-test");
            try (KafkaProducer<String, String> producer =
                    new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
                producer.initTransactions();
                producer.beginTransaction();
                producer.send(record(11)).get();
                producer.commitTransaction();
                producer.beginTransaction();
                producer.send(record(12)).get();
                producer.abortTransaction();
                producer.beginTransaction();
                producer.send(record(13)).get();
                producer.commitTransaction();
            }
            kafka.stop();

            String all = dump(kafka, Set.of());
            assertThat(all).contains("outbox=[11]", "outbox=[12]", "outbox=[13]", "COMMIT", "ABORT", "aborted pid=");

            String one = dump(kafka, Set.of(12L));
            assertThat(one)
                    .containsPattern("(?m)^\\* dump-0 \\d+\\.\\.\\d+ pid=\\d+ epoch=\\d+ txn outbox=\\[12\\]$")
                    .containsPattern("(?m)^\\* dump-0 aborted pid=\\d+ ");
            assertThat(one.lines().filter(l -> l.startsWith("* ") && l.contains("outbox=")))
                    .hasSize(1);
        }
    }

    private static ProducerRecord<String, String> record(long outboxId) {
        ProducerRecord<String, String> r = new ProducerRecord<>("dump", "resource", "{}");
        r.headers().add(Envelope.OUTBOX_ID_HEADER, Envelope.header(outboxId));
        return r;
    }

    private static String dump(KafkaProcess kafka, Set<Long> wanted) throws Exception {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8)) {
            LogDump.dump(kafka.directory().resolve("data"), "dump", wanted, out);
        }
        return bytes.toString(StandardCharsets.UTF_8);
    }
}
