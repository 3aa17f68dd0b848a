package dev.fencedjobs.local;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * The operators' files in {@code ops/} hold together: the dashboard is valid JSON whose every
 * panel queries the dashboard's Prometheus, every alert has a promtool test and a section in
 * docs/operations.md. That they name only exported metrics is checked against running services in
 * {@link LocalStackIT}; that each alert fires when it should, by {@code promtool test rules} in CI.
 */
class OpsFilesTest {

    private static final Path ALERT_TESTS = Path.of("..", "ops", "prometheus", "fenced-jobs-alerts.test.yml");
    private static final Path OPERATIONS = Path.of("..", "docs", "operations.md");

    @Test
    void theDashboardIsValidJsonAndEveryPanelQueriesItsPrometheus() throws Exception {
        JsonNode dashboard = new ObjectMapper().readTree(OpsFiles.DASHBOARD.toFile());
        assertThat(dashboard.path("uid").asText()).isEqualTo("fenced-jobs");
        assertThat(dashboard.path("panels").size()).isGreaterThan(5);
        for (JsonNode panel : dashboard.path("panels")) {
            assertThat(panel.path("datasource").path("uid").asText())
                    .as(panel.path("title").asText())
                    .isEqualTo("${datasource}");
            assertThat(panel.path("targets").size())
                    .as(panel.path("title").asText())
                    .isPositive();
            for (JsonNode target : panel.path("targets")) {
                assertThat(target.path("expr").asText())
                        .as(panel.path("title").asText())
                        .contains("fencedjobs_");
            }
        }
        assertThat(OpsFiles.namedIn(OpsFiles.DASHBOARD))
                .contains("fencedjobs_leader", "fencedjobs_consumer_applied_total");
    }

    @Test
    void everyAlertHasATestAndARunbookSectionInOperations() throws Exception {
        String rules = Files.readString(OpsFiles.ALERTS);
        String tests = Files.readString(ALERT_TESTS);
        Set<String> anchors = anchors(Files.readString(OPERATIONS));
        List<String> alerts = new ArrayList<>();
        Matcher m = Pattern.compile("(?m)^ *- alert: (\\w+)$").matcher(rules);
        while (m.find()) {
            alerts.add(m.group(1));
        }
        assertThat(alerts).hasSizeGreaterThan(10).doesNotHaveDuplicates();
        for (String alert : alerts) {
            assertThat(tests).as("a promtool test of %s", alert).contains("alertname: " + alert + "\n");
            assertThat(rules)
                    .as("%s's runbook link", alert)
                    .contains("runbook: \"docs/operations.md#" + alert.toLowerCase(Locale.ROOT) + "\"");
            assertThat(anchors)
                    .as("a section of docs/operations.md for %s", alert)
                    .contains(alert.toLowerCase(Locale.ROOT));
        }
    }

    /** The anchors of a Markdown file's headings, as GitHub makes them (enough for headings of one word). */
    private static Set<String> anchors(String markdown) {
        Set<String> anchors = new TreeSet<>();
        Matcher m = Pattern.compile("(?m)^#+ +`?([^`\\n]+?)`?\\s*$").matcher(markdown);
        while (m.find()) {
            anchors.add(m.group(1)
                    .toLowerCase(Locale.ROOT)
                    .replaceAll("[^a-z0-9 _-]", "")
                    .replace(' ', '-'));
        }
        return anchors;
    }
}
