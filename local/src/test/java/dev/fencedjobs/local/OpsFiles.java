package dev.fencedjobs.local;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** The operators' files in {@code ops/}: Prometheus alerting rules and the Grafana dashboard, and the metric names they use. */
final class OpsFiles {

    static final Path ALERTS = Path.of("..", "ops", "prometheus", "fenced-jobs-alerts.yml");
    static final Path DASHBOARD = Path.of("..", "ops", "grafana", "fenced-jobs-dashboard.json");
    static final List<Path> FILES = List.of(ALERTS, DASHBOARD);

    private static final Pattern NAME = Pattern.compile("fencedjobs_[a-z0-9_]+");
    /** A series' name at the start of an exposition line. */
    private static final Pattern SERIES = Pattern.compile("^(fencedjobs_[a-z0-9_]+)[{ ]");

    private OpsFiles() {}

    /** Every metric name a file mentions. */
    static Set<String> namedIn(Path file) {
        try {
            return names(Files.readString(file));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The metric names of a Prometheus text exposition: the series' names, not the comments. */
    static Set<String> metricNames(String exposition) {
        Set<String> names = new TreeSet<>();
        for (String line : exposition.split("\n")) {
            if (!line.startsWith("#")) {
                Matcher m = SERIES.matcher(line);
                if (m.find()) {
                    names.add(m.group(1));
                }
            }
        }
        return names;
    }

    private static Set<String> names(String text) {
        Set<String> names = new TreeSet<>();
        Matcher m = NAME.matcher(text);
        while (m.find()) {
            names.add(m.group());
        }
        return names;
    }
}
