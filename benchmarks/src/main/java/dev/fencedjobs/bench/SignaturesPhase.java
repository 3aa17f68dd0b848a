package dev.fencedjobs.bench;

import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RecordTrust;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * What record signatures cost end to end: the sustained throughput of {@link ThroughputPhase} with
 * the relay signing and the consumer verifying (the default), then with both as before signatures
 * (a relay without a key that does not compress, a consumer in {@code accept-unsigned} mode),
 * {@code rounds} times each on one stack, in the order A B B A A B…, so that a drift of the machine
 * shows as spread, not as cost.
 */
final class SignaturesPhase {

    /**
     * The relay and the consumer as before record signatures: no key, unsigned records applied, and
     * the relay's records uncompressed (a client properties file saying {@code compression.type=none}).
     */
    static Map<String, String> unsigned() throws IOException {
        Path properties = Files.createTempFile("fenced-jobs-uncompressed", ".properties");
        properties.toFile().deleteOnExit();
        Files.writeString(properties, "compression.type=none\n");
        return Map.of(
                RecordTrust.SIGNATURES,
                RecordTrust.Mode.ACCEPT_UNSIGNED.setting(),
                RecordTrust.SIGNING_KEY,
                "",
                RecordTrust.VERIFY_KEYS,
                "",
                KafkaSettings.CLIENT_PROPERTIES,
                properties.toString());
    }

    private final BenchStack stack;
    private final E2eReport report;
    private final ThroughputPhase throughput;
    private final int rounds;

    SignaturesPhase(BenchStack stack, E2eReport report, ThroughputPhase throughput, int rounds) {
        this.stack = stack;
        this.report = report;
        this.throughput = throughput;
        this.rounds = rounds;
    }

    void run() throws Exception {
        System.out.println("7. record signatures: sustained throughput signed and unsigned, alternating, " + rounds
                + " rounds each");
        // The relay as it is now: signed, and its default compression (an empty variable is unset).
        Map<String, String> signed = new HashMap<>(stack.recordTrustEnvironment());
        signed.put(KafkaSettings.CLIENT_PROPERTIES, "");
        Map<String, String> unsigned = unsigned();
        List<Double> withSignatures = new ArrayList<>();
        List<Double> without = new ArrayList<>();
        List<Map<String, Long>> cpuSigned = new ArrayList<>();
        List<Map<String, Long>> cpuUnsigned = new ArrayList<>();
        // A B B A A B ...: a drift of the machine over the run (a warming cache, a growing table)
        // falls on both sides alike instead of on whichever runs second.
        for (int round = 0; round < rounds; round++) {
            for (boolean signedNow : round % 2 == 0 ? new boolean[] {false, true} : new boolean[] {true, false}) {
                // Records in flight were signed (or not) for the consumer now running: applied by it
                // before the switch, not dead-lettered by the next one as unauthenticated.
                throughput.awaitDrained();
                configure(signedNow ? signed : unsigned);
                System.out.println(
                        signedNow
                                ? "   signed (the default, compressed):"
                                : "   unsigned (no key, accept-unsigned, uncompressed):");
                ThroughputPhase.Costed measured = throughput.sustainedWithCpu();
                (signedNow ? withSignatures : without).add(measured.rate());
                (signedNow ? cpuSigned : cpuUnsigned).add(measured.cpuPerJob());
            }
        }
        double a = BenchSql.median(withSignatures);
        double b = BenchSql.median(without);
        report.put("signaturesJobsPerSecond", withSignatures);
        report.put("unsignedJobsPerSecond", without);
        report.put("signaturesCpuMicrosecondsPerJob", cpuSigned);
        report.put("unsignedCpuMicrosecondsPerJob", cpuUnsigned);
        report.row(
                "7. end to end, signed (relay signs a Merkle root for each partition's share of a batch, consumer verifies)",
                String.format(Locale.ROOT, "median %,.0f jobs/s of %s", a, E2eReport.rates(withSignatures)),
                String.format(Locale.ROOT, "%.1f %% of unsigned; target within 10 %%", 100 * a / b));
        report.row(
                "7. end to end, unsigned (as before signatures)",
                String.format(Locale.ROOT, "median %,.0f jobs/s of %s", b, E2eReport.rates(without)),
                "same run, same stack, alternating");
        System.out.printf(
                Locale.ROOT,
                "   signed median %,.0f jobs/s, unsigned median %,.0f jobs/s: %.1f %%%n",
                a,
                b,
                100 * a / b);
    }

    private void configure(Map<String, String> environment) {
        stack.reconfigure("relay", environment);
        stack.reconfigure("consumer", environment);
    }
}
