package dev.fencedjobs.bench;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/** The end-to-end benchmark's latency chart ({@code e2e-latency.svg}). */
final class LatencyChart {

    private LatencyChart() {}

    /** A small SVG line chart: p50, p99 and max latency (log scale) against offered load. */
    static void write(Path file, List<Map<String, Object>> points) throws Exception {
        int w = 640;
        int h = 400;
        int left = 70;
        int right = 20;
        int top = 40;
        int bottom = 60;
        double maxLoad = points.stream()
                .mapToDouble(p -> ((Number) p.get("offeredJobsPerSecond")).doubleValue())
                .max()
                .orElse(1);
        double maxMs = points.stream()
                .mapToDouble(p -> ((Number) p.get("maxMs")).doubleValue())
                .max()
                .orElse(10);
        double logMin = 0; // 1 ms
        double logMax = Math.ceil(Math.log10(Math.max(10, maxMs)));
        StringBuilder svg = new StringBuilder();
        svg.append("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"")
                .append(w)
                .append("\" height=\"")
                .append(h)
                .append(
                        "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
        svg.append("<text x=\"")
                .append(w / 2)
                .append(
                        "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">Due-to-effect latency against offered load</text>\n");
        for (double e = logMin; e <= logMax; e++) {
            double y = top + (h - top - bottom) * (1 - (e - logMin) / (logMax - logMin));
            svg.append(String.format(
                    Locale.ROOT,
                    "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>",
                    left,
                    w - right,
                    y,
                    y));
            svg.append(String.format(
                    Locale.ROOT,
                    "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s ms</text>%n",
                    left - 6,
                    y + 4,
                    String.format(Locale.ROOT, "%,.0f", Math.pow(10, e))));
        }
        for (Map<String, Object> p : points) {
            double load = ((Number) p.get("offeredJobsPerSecond")).doubleValue();
            double x = left + (w - left - right) * load / maxLoad;
            svg.append(String.format(
                    Locale.ROOT,
                    "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#eee\"/>",
                    x,
                    x,
                    top,
                    h - bottom));
            svg.append(String.format(
                    Locale.ROOT,
                    "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%,.0f</text>%n",
                    x,
                    h - bottom + 16,
                    load));
        }
        svg.append("<text x=\"")
                .append((left + w - right) / 2)
                .append("\" y=\"")
                .append(h - 20)
                .append("\" text-anchor=\"middle\">offered load, jobs/s (due at once, inserted with SQL)</text>\n");
        String[][] series = {{"p50Ms", "#1f77b4", "p50"}, {"p99Ms", "#d62728", "p99"}, {"maxMs", "#7f7f7f", "max"}};
        int legend = 0;
        for (String[] s : series) {
            StringBuilder path = new StringBuilder();
            for (Map<String, Object> p : points) {
                double load = ((Number) p.get("offeredJobsPerSecond")).doubleValue();
                double ms = Math.max(1, ((Number) p.get(s[0])).doubleValue());
                double x = left + (w - left - right) * load / maxLoad;
                double y = top + (h - top - bottom) * (1 - (Math.log10(ms) - logMin) / (logMax - logMin));
                path.append(path.length() == 0 ? "M" : " L").append(String.format(Locale.ROOT, "%.1f %.1f", x, y));
                svg.append(String.format(
                        Locale.ROOT, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", x, y, s[1]));
            }
            svg.append("\n<path d=\"")
                    .append(path)
                    .append("\" fill=\"none\" stroke=\"")
                    .append(s[1])
                    .append("\" stroke-width=\"2\"/>\n");
            svg.append(String.format(
                    Locale.ROOT,
                    "<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>%n",
                    left + 10 + 50 * legend++,
                    top + 14,
                    s[1],
                    s[2]));
        }
        svg.append("</svg>\n");
        Files.createDirectories(file.getParent());
        Files.writeString(file, svg.toString(), StandardCharsets.UTF_8);
    }
}
