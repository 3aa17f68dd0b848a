package dev.fencedjobs.testing;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A broker process with a {@code SASL_SSL} listener, as hosted and production clusters have one:
 * TLS with a certificate made for the test by {@code keytool} (its own issuer, subject
 * {@code localhost}), and SASL users for PLAIN ({@value #PLAIN_USER}) and SCRAM-SHA-512
 * ({@value #SCRAM_USER}). A PLAINTEXT listener stays for the broker's own traffic.
 */
public final class SecureKafka implements AutoCloseable {

    public static final String PLAIN_USER = "alice";
    public static final String PLAIN_PASSWORD = "alice-Pl41n-secret";
    public static final String SCRAM_USER = "bob";
    public static final String SCRAM_PASSWORD = "bob-Scr4m-secret";
    public static final String TRUSTSTORE_PASSWORD = "trust-St0re-secret";
    private static final String KEYSTORE_PASSWORD = "key-St0re-secret";

    private final Path directory;
    private final Path truststore;
    private final int securePort;
    private final KafkaProcess broker;

    public SecureKafka() {
        try {
            directory = Files.createTempDirectory("fj-kafka-tls");
            Path keystore = directory.resolve("broker.p12");
            Path certificate = directory.resolve("broker.crt");
            truststore = directory.resolve("truststore.p12");
            keytool(
                    "-genkeypair",
                    "-alias",
                    "broker",
                    "-keyalg",
                    "RSA",
                    "-keysize",
                    "2048",
                    "-validity",
                    "2",
                    "-dname",
                    "CN=localhost",
                    "-ext",
                    "SAN=dns:localhost,ip:127.0.0.1",
                    "-keystore",
                    keystore.toString(),
                    "-storetype",
                    "PKCS12",
                    "-storepass",
                    KEYSTORE_PASSWORD,
                    "-keypass",
                    KEYSTORE_PASSWORD);
            keytool(
                    "-exportcert",
                    "-rfc",
                    "-alias",
                    "broker",
                    "-keystore",
                    keystore.toString(),
                    "-storetype",
                    "PKCS12",
                    "-storepass",
                    KEYSTORE_PASSWORD,
                    "-file",
                    certificate.toString());
            keytool(
                    "-importcert",
                    "-noprompt",
                    "-alias",
                    "broker",
                    "-file",
                    certificate.toString(),
                    "-keystore",
                    truststore.toString(),
                    "-storetype",
                    "PKCS12",
                    "-storepass",
                    TRUSTSTORE_PASSWORD);
            securePort = KafkaProcess.freePort();
            broker = new KafkaProcess(
                    0,
                    "SASL_SSL://localhost:" + securePort,
                    List.of(
                            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
                            "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                                    + "user_" + PLAIN_USER + "=\"" + PLAIN_PASSWORD + "\";",
                            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;",
                            "ssl.keystore.location=" + keystore,
                            "ssl.keystore.type=PKCS12",
                            "ssl.keystore.password=" + KEYSTORE_PASSWORD,
                            "ssl.key.password=" + KEYSTORE_PASSWORD),
                    List.of("--add-scram", "SCRAM-SHA-512=[name=" + SCRAM_USER + ",password=" + SCRAM_PASSWORD + "]"));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The SASL_SSL listener. */
    public String secureBootstrapServers() {
        return "localhost:" + securePort;
    }

    /** A PKCS12 truststore holding the broker's certificate, password {@link #TRUSTSTORE_PASSWORD}. */
    public Path truststore() {
        return truststore;
    }

    public Path directory() {
        return broker.directory();
    }

    private static void keytool(String... args) throws IOException {
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "keytool").toString());
        command.addAll(List.of(args));
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        try {
            String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
                throw new IllegalStateException("keytool " + args[0] + " failed: " + output);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    @Override
    public void close() {
        broker.close();
        try (var files = Files.walk(directory)) {
            files.sorted(Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        } catch (IOException e) {
            // A temp directory left behind is harmless.
        }
    }
}
