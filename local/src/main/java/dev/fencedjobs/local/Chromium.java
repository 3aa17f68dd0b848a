package dev.fencedjobs.local;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** Headless Chromium (Debian's {@code chromium}), for screenshots of the dashboards. */
final class Chromium {

    static final Path BINARY = Path.of("/usr/bin/chromium");

    private Chromium() {}

    /** A 1280 × 1000 screenshot of {@code url} into {@code file}, once the page's script had a few seconds. */
    static void screenshot(String url, Path file) throws IOException, InterruptedException {
        if (!Files.isExecutable(BINARY)) {
            throw new IOException(BINARY + " is not installed (apt-get install chromium)");
        }
        Path absolute = file.toAbsolutePath();
        Files.deleteIfExists(absolute);
        List<String> command = List.of(
                BINARY.toString(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--virtual-time-budget=4000",
                "--window-size=1280,1000",
                "--screenshot=" + absolute,
                url);
        Process process = new ProcessBuilder(command)
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.DISCARD)
                .start();
        if (!process.waitFor(90, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            throw new IOException("chromium did not finish in 90 s");
        }
        if (process.exitValue() != 0 || !Files.isRegularFile(absolute) || Files.size(absolute) < 10_000) {
            throw new IOException("chromium exited with " + process.exitValue() + " and no screenshot in " + absolute);
        }
    }
}
