package dev.fencedjobs.cli;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/** Every relative link in the README and docs/ reaches a file, and every #anchor a heading of that file (GitHub's slugs). */
class DocsLinksTest {

    private static final Path ROOT = Path.of("..").toAbsolutePath().normalize();
    private static final Pattern LINK = Pattern.compile("!?\\[[^\\]]*\\]\\(([^)\\s]+)\\)");

    @Test
    void everyLinkAndAnchorResolves() throws IOException {
        List<Path> pages = new ArrayList<>();
        pages.add(ROOT.resolve("README.md"));
        try (Stream<Path> docs = Files.walk(ROOT.resolve("docs"))) {
            docs.filter(p -> p.toString().endsWith(".md")).forEach(pages::add);
        }
        List<String> broken = new ArrayList<>();
        int checked = 0;
        for (Path page : pages) {
            String text = withoutCode(Files.readString(page));
            Matcher m = LINK.matcher(text);
            while (m.find()) {
                String url = m.group(1);
                if (url.matches("^[a-z]+:.*")) {
                    continue;
                }
                checked++;
                int hash = url.indexOf('#');
                String file = hash < 0 ? url : url.substring(0, hash);
                Path target =
                        file.isEmpty() ? page : page.getParent().resolve(file).normalize();
                if (!Files.exists(target)) {
                    broken.add(ROOT.relativize(page) + ": " + url + " (no such file)");
                } else if (hash >= 0 && !anchors(target).contains(url.substring(hash + 1))) {
                    broken.add(ROOT.relativize(page) + ": " + url + " (no such heading)");
                }
            }
        }
        assertThat(checked).isGreaterThan(100);
        assertThat(broken).isEmpty();
    }

    /** Fenced code blocks are not markdown: a "# comment" there is no heading and a "[x](y)" no link. */
    private static String withoutCode(String text) {
        StringBuilder out = new StringBuilder();
        boolean code = false;
        for (String line : text.split("\n", -1)) {
            if (line.startsWith("```")) {
                code = !code;
                continue;
            }
            if (!code) {
                out.append(line).append('\n');
            }
        }
        return out.toString();
    }

    private static Set<String> anchors(Path page) throws IOException {
        Set<String> anchors = new HashSet<>();
        for (String line : withoutCode(Files.readString(page)).split("\n")) {
            Matcher h = Pattern.compile("^#{1,6} (.*)$").matcher(line);
            if (h.matches()) {
                anchors.add(h.group(1)
                        .strip()
                        .toLowerCase(Locale.ROOT)
                        .replace("`", "")
                        .replaceAll("[^\\p{L}\\p{N}_\\- ]", "")
                        .replace(' ', '-'));
            }
        }
        return anchors;
    }
}
