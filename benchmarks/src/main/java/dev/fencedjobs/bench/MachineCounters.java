package dev.fencedjobs.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;

/**
 * The machine's own counters at one moment, for what a window shares the machine with: CPU time
 * by kind from {@code /proc/stat} (all cores, clock ticks) and sectors written to the block
 * devices from {@code /proc/diskstats} (512 bytes each; loop, ram and zram devices left out).
 * Zero everywhere where those files are not there (not Linux).
 */
record MachineCounters(long total, long idle, long iowait, long steal, long sectorsWritten) {

    static MachineCounters read() {
        try {
            String[] cpu =
                    Files.readAllLines(Path.of("/proc/stat")).get(0).trim().split("\\s+");
            long total = 0;
            for (int i = 1; i < cpu.length && i <= 8; i++) {
                total += Long.parseLong(cpu[i]);
            }
            long written = 0;
            for (String line : Files.readAllLines(Path.of("/proc/diskstats"))) {
                String[] f = line.trim().split("\\s+");
                if (f.length > 9 && !f[2].matches("(loop|ram|zram|dm-).*")) {
                    written += Long.parseLong(f[9]);
                }
            }
            return new MachineCounters(
                    total, Long.parseLong(cpu[4]), Long.parseLong(cpu[5]), Long.parseLong(cpu[8]), written);
        } catch (IOException | RuntimeException e) {
            return new MachineCounters(0, 0, 0, 0, 0);
        }
    }

    /** Since {@code before}: idle, I/O wait and steal as shares of the machine, and the megabytes written to disk. */
    String since(MachineCounters before) {
        double ticks = Math.max(1, total - before.total);
        return String.format(
                Locale.ROOT,
                "machine idle %.0f %%, I/O wait %.0f %%, stolen %.1f %%; %,.0f MB written to disk",
                idlePercent(before),
                100 * (iowait - before.iowait) / ticks,
                100 * (steal - before.steal) / ticks,
                (sectorsWritten - before.sectorsWritten) * 512 / 1e6);
    }

    /** Since {@code before}: the share of the machine's CPU time that was idle, in percent. */
    double idlePercent(MachineCounters before) {
        return 100.0 * (idle - before.idle) / Math.max(1, total - before.total);
    }

    /** Since {@code before}: the CPU time spent at work (neither idle nor waiting for I/O), in microseconds of one core. */
    double busyMicros(MachineCounters before) {
        long ticks = total - before.total - (idle - before.idle) - (iowait - before.iowait);
        // A clock tick is 10 ms of one core.
        return ticks * 10_000.0;
    }
}
