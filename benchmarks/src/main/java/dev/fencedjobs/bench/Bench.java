package dev.fencedjobs.bench;

import java.util.Arrays;

/** {@code java -jar fenced-jobs-benchmarks.jar <benchmark> [args]}. */
public final class Bench {

    private Bench() {}

    public static void main(String[] args) throws Exception {
        String which = args.length == 0 ? "" : args[0];
        String[] rest = args.length == 0 ? args : Arrays.copyOfRange(args, 1, args.length);
        switch (which) {
            case "dispatcher":
                DispatcherBenchmark.main(rest);
                break;
            case "relay":
                RelayBenchmark.main(rest);
                break;
            case "consumer":
                ConsumerBenchmark.main(rest);
                break;
            case "e2e":
                EndToEndBenchmark.main(rest);
                break;
            case "soak":
                SoakBenchmark.main(rest);
                break;
            default:
                System.err.println("usage: java -jar fenced-jobs-benchmarks.jar dispatcher|relay|consumer|e2e|soak");
                System.exit(2);
        }
    }
}
