package dev.fencedjobs.bench;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * How many small synced writes a second the disk takes now: what a commit with
 * {@code synchronous_commit=on} waits for. On this project's build machine (a shared virtual disk)
 * it moves by up to twice between samples a few seconds apart (pg_test_fsync's fdatasync: 3,720,
 * 6,620 and 3,910 a second in three 2-second runs), so each window of the bound and of the
 * end-to-end throughput prints it beside its figure, for a reader to rule it in or out.
 */
final class DiskFlushProbe {

    private DiskFlushProbe() {}

    /** 8 KB written and forced (data only, as fdatasync) over and over for {@code millis}, in the temp directory. */
    static double flushesPerSecond(long millis) throws IOException {
        Path file = Files.createTempFile("fj-flush-probe", ".bin");
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
            ByteBuffer block = ByteBuffer.allocate(8192);
            long started = System.nanoTime();
            long deadline = started + millis * 1_000_000L;
            long flushes = 0;
            while (System.nanoTime() < deadline) {
                block.clear();
                ch.write(block, 0);
                ch.force(false);
                flushes++;
            }
            return flushes / ((System.nanoTime() - started) / 1e9);
        } finally {
            Files.deleteIfExists(file);
        }
    }
}
