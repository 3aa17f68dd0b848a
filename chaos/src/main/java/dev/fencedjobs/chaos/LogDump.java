package dev.fencedjobs.chaos;

import dev.fencedjobs.runtime.internal.Envelope;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.stream.Stream;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.FileRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;

/**
 * Prints a topic's log segments as the broker stored them, batch by batch: offsets, producer id and
 * epoch, transactional or not, commit and abort markers, and the outbox ids each data batch carries;
 * then each partition's aborted-transaction index. A failed run keeps the broker's data directory
 * for this; it shows what a {@code read_committed} reader was given and why it skipped a record.
 *
 * <pre>
 * java -cp chaos/target/fenced-jobs-chaos.jar dev.fencedjobs.chaos.LogDump DATA_DIR TOPIC [OUTBOX_ID...]
 * </pre>
 *
 * With outbox ids, only the batches holding them are printed (marked {@code *}), each with the
 * {@value #CONTEXT} batches and markers before and after it, and the aborted transactions whose
 * offset range covers them.
 */
public final class LogDump {

    private static final int CONTEXT = 8;

    private LogDump() {}

    public static void main(String[] args) throws IOException {
        if (args.length < 2) {
            System.err.println("usage: LogDump DATA_DIR TOPIC [OUTBOX_ID...]");
            System.exit(2);
        }
        Set<Long> wanted = new HashSet<>();
        for (int i = 2; i < args.length; i++) {
            wanted.add(Long.parseLong(args[i]));
        }
        dump(Path.of(args[0]), args[1], wanted, System.out);
    }

    /** Every partition of {@code topic} under the broker's {@code data} directory. */
    static void dump(Path data, String topic, Set<Long> wanted, PrintStream out) throws IOException {
        List<Path> partitions;
        try (Stream<Path> dirs = Files.list(data)) {
            partitions = dirs.filter(d -> d.getFileName().toString().startsWith(topic + "-"))
                    .sorted()
                    .toList();
        }
        for (Path partition : partitions) {
            dumpPartition(partition, wanted, out);
        }
    }

    private static void dumpPartition(Path partition, Set<Long> wanted, PrintStream out) throws IOException {
        List<Path> segments;
        List<Path> indexes;
        try (Stream<Path> files = Files.list(partition)) {
            List<Path> all = files.sorted().toList();
            segments = all.stream().filter(f -> f.toString().endsWith(".log")).toList();
            indexes =
                    all.stream().filter(f -> f.toString().endsWith(".txnindex")).toList();
        }
        List<String> lines = new ArrayList<>();
        Set<Integer> hits = new LinkedHashSet<>();
        List<long[]> hitOffsets = new ArrayList<>();
        for (Path segment : segments) {
            try (FileRecords records = FileRecords.open(segment.toFile(), false)) {
                for (RecordBatch batch : records.batches()) {
                    StringBuilder line = new StringBuilder(String.format(
                            "%s %d..%d pid=%d epoch=%d %s",
                            partition.getFileName(),
                            batch.baseOffset(),
                            batch.lastOffset(),
                            batch.producerId(),
                            batch.producerEpoch(),
                            batch.isTransactional() ? "txn" : "plain"));
                    List<Long> ids = new ArrayList<>();
                    for (Record record : batch) {
                        if (batch.isControlBatch()) {
                            line.append(' ').append(ControlRecordType.parse(record.key()));
                        } else {
                            for (Header h : record.headers()) {
                                if (h.key().equals(Envelope.OUTBOX_ID_HEADER)) {
                                    ids.add(Long.parseLong(new String(h.value(), StandardCharsets.UTF_8)));
                                }
                            }
                        }
                    }
                    if (!ids.isEmpty()) {
                        line.append(" outbox=").append(ids);
                    }
                    if (ids.stream().anyMatch(wanted::contains)) {
                        hits.add(lines.size());
                        hitOffsets.add(new long[] {batch.baseOffset(), batch.lastOffset()});
                    }
                    lines.add(line.toString());
                }
            }
        }
        boolean[] shown = new boolean[lines.size()];
        for (int hit : hits) {
            for (int i = Math.max(0, hit - CONTEXT); i <= Math.min(lines.size() - 1, hit + CONTEXT); i++) {
                shown[i] = true;
            }
        }
        for (int i = 0; i < lines.size(); i++) {
            if (wanted.isEmpty() || shown[i]) {
                out.println((hits.contains(i) ? "* " : "  ") + lines.get(i));
            }
        }
        for (Path index : indexes) {
            // Fixed 34-byte entries: version (short), producer id, first offset, last offset, last stable offset.
            ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(index));
            while (b.remaining() >= 34) {
                short version = b.getShort();
                long producerId = b.getLong();
                long first = b.getLong();
                long last = b.getLong();
                long lastStable = b.getLong();
                boolean covers = hitOffsets.stream().anyMatch(o -> first <= o[1] && o[0] <= last);
                if (wanted.isEmpty() || covers) {
                    out.printf(
                            "%s%s aborted pid=%d %d..%d lastStable=%d (v%d)%n",
                            covers ? "* " : "  ",
                            partition.getFileName(),
                            producerId,
                            first,
                            last,
                            lastStable,
                            version);
                }
            }
        }
    }
}
