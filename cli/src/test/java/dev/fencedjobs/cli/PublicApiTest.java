package dev.fencedjobs.cli;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.consumer.FencedConsumer;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.dispatcher.Dispatcher;
import dev.fencedjobs.relay.Relay;
import dev.fencedjobs.runtime.RunningService;
import java.io.IOException;
import java.lang.reflect.Modifier;
import java.net.URISyntaxException;
import java.nio.file.FileSystem;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * The public types of the five library modules are exactly those docs/api.md lists, as API or as
 * internal: a new public type fails here until it is placed in one of the two lists.
 */
class PublicApiTest {

    private static final Path API_PAGE = Path.of("..", "docs", "api.md");
    private static final Pattern LISTED =
            Pattern.compile("^\\| `(dev\\.fencedjobs\\.[A-Za-z.]+)` \\|", Pattern.MULTILINE);
    /** One class of each library module: where its classes are. */
    private static final List<Class<?>> MODULES =
            List.of(DatabaseConfig.class, RunningService.class, Dispatcher.class, Relay.class, FencedConsumer.class);

    @Test
    void everyPublicTypeIsListedAsApiOrInternal_andEveryListedTypeIsPublic() throws Exception {
        String page = Files.readString(API_PAGE);
        int internalAt = page.indexOf("\n## Internal");
        assertThat(internalAt).as("docs/api.md has an Internal section").isPositive();
        Set<String> api = listed(page.substring(0, internalAt));
        Set<String> internal = listed(page.substring(internalAt));
        assertThat(api).as("the API").hasSizeGreaterThan(10).doesNotContainAnyElementsOf(internal);

        Set<String> found = new TreeSet<>();
        for (Class<?> module : MODULES) {
            for (String name : classNames(module)) {
                Class<?> type = Class.forName(name, false, getClass().getClassLoader());
                if (Modifier.isPublic(type.getModifiers()) && !name.contains(".jooq.")) {
                    found.add(name);
                }
            }
        }
        Set<String> unlisted = new TreeSet<>(found);
        unlisted.removeAll(api);
        unlisted.removeAll(internal);
        assertThat(unlisted)
                .as(
                        "public types docs/api.md does not list: add each to the API or to Internal, or make it package-private")
                .isEmpty();
        Set<String> gone = new TreeSet<>(api);
        gone.addAll(internal);
        gone.removeAll(found);
        assertThat(gone)
                .as("types docs/api.md lists that are not public types of the library modules")
                .isEmpty();
        for (String name : found) {
            if (name.contains(".internal.")) {
                assertThat(internal)
                        .as("a type in an internal package is internal")
                        .contains(name);
            }
        }
    }

    private static Set<String> listed(String section) {
        Set<String> names = new TreeSet<>();
        Matcher m = LISTED.matcher(section);
        while (m.find()) {
            names.add(m.group(1));
        }
        return names;
    }

    /** The top-level classes in the directory or jar that {@code module} was loaded from. */
    private static List<String> classNames(Class<?> module) throws IOException, URISyntaxException {
        Path location = Path.of(
                module.getProtectionDomain().getCodeSource().getLocation().toURI());
        List<String> names = new ArrayList<>();
        if (Files.isDirectory(location)) {
            collect(location, names);
        } else {
            try (FileSystem jar = FileSystems.newFileSystem(location)) {
                collect(jar.getPath("/"), names);
            }
        }
        assertThat(names).as("classes found at " + location).isNotEmpty();
        return names;
    }

    private static void collect(Path root, List<String> names) throws IOException {
        try (Stream<Path> files = Files.walk(root)) {
            files.map(p -> root.relativize(p).toString().replace('\\', '/'))
                    .filter(p -> p.startsWith("dev/fencedjobs/") && p.endsWith(".class") && !p.contains("$"))
                    .forEach(p -> names.add(
                            p.substring(0, p.length() - ".class".length()).replace('/', '.')));
        }
    }
}
