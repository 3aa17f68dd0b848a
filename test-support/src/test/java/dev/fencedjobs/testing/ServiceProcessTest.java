package dev.fencedjobs.testing;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The one launcher: a main class as a process of its own, its log across restarts, a graceful stop and a crash told apart. */
class ServiceProcessTest {

    /**
     * The process under test: exits with EXIT_CODE if given, else says bye on SIGTERM. It says
     * hello only once its shutdown hook is in place, so that the test's SIGTERM, sent on hello,
     * always finds the hook.
     */
    public static final class Greeter {
        public static void main(String[] args) throws Exception {
            if (System.getenv("EXIT_CODE") != null) {
                System.out.println("hello " + System.getenv("GREETING"));
                System.exit(Integer.parseInt(System.getenv("EXIT_CODE")));
            }
            Runtime.getRuntime().addShutdownHook(new Thread(() -> System.out.println("bye")));
            System.out.println("hello " + System.getenv("GREETING"));
            Thread.sleep(Long.MAX_VALUE);
        }
    }

    @Test
    void aGracefulStopIsNoCrashAndARestartAppendsToTheLog(@TempDir Path logs) throws Exception {
        ServiceProcess p = ServiceProcess.mainClass("greeter", Greeter.class.getName())
                .environment(Map.of("GREETING", "one"))
                .jvmOptions(java.util.List.of("-Xmx32m"))
                .logTo(logs)
                .start();
        await().atMost(Duration.ofSeconds(30)).until(() -> p.output().contains("hello one"));
        assertThat(p.stop(Duration.ofSeconds(30)))
                .as("a JVM that ran its shutdown hooks on SIGTERM")
                .isEqualTo(143);
        assertThat(p.output()).contains("bye");
        assertThat(p.crashed()).isFalse();

        p.start();
        await().atMost(Duration.ofSeconds(30)).until(() -> p.output().contains("hello one"));
        assertThat(p.output()).as("the latest start's output only").doesNotContain("bye");
        p.kill();
        assertThat(p.crashed()).as("killed by this side").isFalse();
        String file = Files.readString(logs.resolve("greeter.log"));
        assertThat(file.split("===== starting greeter", -1))
                .as("two starts in one file")
                .hasSize(3);
        assertThat(file).contains("bye");
    }

    @Test
    void aProcessThatExitsByItselfHasCrashedWithItsCode(@TempDir Path logs) {
        ServiceProcess p = ServiceProcess.mainClass("crasher", Greeter.class.getName())
                .environment(Map.of("GREETING", "two", "EXIT_CODE", "3"))
                .jvmOptions(java.util.List.of("-Xmx32m"))
                .logTo(logs)
                .start();
        assertThat(p.waitFor()).isEqualTo(3);
        assertThat(p.crashed()).isTrue();
        assertThat(p.exitCode()).isEqualTo(3);
        assertThat(p.output()).contains("hello two");
    }
}
