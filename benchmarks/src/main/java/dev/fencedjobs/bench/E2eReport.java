package dev.fencedjobs.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/** What the end-to-end benchmark found: the values for {@code e2e.json} and the rows of the table in {@code e2e.md}. */
final class E2eReport {

    private final Map<String, Object> values = new LinkedHashMap<>();
    private final List<String> table = new ArrayList<>();

    void put(String key, Object value) {
        values.put(key, value);
    }

    void row(String what, String measured, String against) {
        table.add("| " + what + " | " + measured + " | " + against + " |");
    }

    /** {@code {a=1, b=2}} as {@code a 1, b 2}, for a table cell. */
    static String listing(Map<String, ?> values) {
        return values.toString().replaceAll("[{}]", "").replace("=", " ");
    }

    /** Rates in jobs/s, as a list of whole numbers: [16,274, 14,706]. */
    static String rates(List<Double> values) {
        return values.stream()
                .map(v -> String.format(Locale.ROOT, "%,.0f", v))
                .toList()
                .toString();
    }

    static String summary(List<Double> ms) {
        double[] sorted = ms.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        double p50 = sorted[(int) Math.ceil(0.5 * sorted.length) - 1];
        double p99 = sorted[(int) Math.ceil(0.99 * sorted.length) - 1];
        return String.format(
                Locale.ROOT,
                "min %.0f / p50 %.0f / p99 %.0f / max %.0f ms (%d trials)",
                sorted[0],
                p50,
                p99,
                sorted[sorted.length - 1],
                sorted.length);
    }

    void write(Path out) throws Exception {
        Files.createDirectories(out);
        StringBuilder md = new StringBuilder();
        md.append("# End-to-end benchmark\n\n");
        md.append("`java -jar benchmarks/target/fenced-jobs-benchmarks.jar e2e` on ")
                .append(values.get("machine"))
                .append("\n\n");
        md.append("| measure | result | against |\n|---|---|---|\n");
        table.forEach(r -> md.append(r).append('\n'));
        md.append("\n![due-to-effect latency against offered load](e2e-latency.svg)\n");
        Files.writeString(out.resolve("e2e.md"), md.toString(), StandardCharsets.UTF_8);
        new ObjectMapper()
                .enable(SerializationFeature.INDENT_OUTPUT)
                .writeValue(out.resolve("e2e.json").toFile(), values);
        System.out.println();
        System.out.println(md);
        System.out.println("Written: " + out.resolve("e2e.md") + ", " + out.resolve("e2e.json") + ", "
                + out.resolve("e2e-latency.svg"));
    }
}
