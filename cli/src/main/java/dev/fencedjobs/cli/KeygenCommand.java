package dev.fencedjobs.cli;

import dev.fencedjobs.db.Settings;
import dev.fencedjobs.runtime.RecordTrust;
import java.io.IOException;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.KeyPair;
import java.util.List;
import java.util.Map;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code fenced-jobs keygen}: an Ed25519 key pair for record signatures, as the relay
 * ({@code record-signing.key}, readable by its owner only) and the consumers
 * ({@code record-signing.pub}) read them.
 */
@Command(
        name = "keygen",
        customSynopsis = "keygen [--dir <directory>] [--if-missing]",
        description = {
            "Make an Ed25519 key pair for record signatures.",
            "Writes record-signing.key (the relay's RECORD_SIGNING_KEY_FILE, readable by its owner only) and record-signing.pub (the consumers' "
                    + "RECORD_VERIFY_KEYS_FILE) and prints the key's id. Refuses to overwrite either; with --if-missing, keeps a pair already there "
                    + "and makes one only where there is none."
        })
final class KeygenCommand implements Cli.Action {

    @Option(
            names = "--dir",
            paramLabel = "<directory>",
            description = "where to write them (default: the current directory)")
    Path dir = Path.of(".");

    @Option(
            names = "--if-missing",
            description = "keep the pair already in the directory (a container's first start makes it)")
    boolean ifMissing;

    private final PrintStream out;
    private final PrintStream err;

    KeygenCommand(PrintStream out, PrintStream err) {
        this.out = out;
        this.err = err;
    }

    @Override
    public int run() {
        Path key = dir.resolve("record-signing.key");
        Path pub = dir.resolve("record-signing.pub");
        if (ifMissing && Files.exists(key) && Files.exists(pub)) {
            String id = RecordTrust.from(Settings.of(Map.of(RecordTrust.SIGNING_KEY_FILE, key.toString())))
                    .signingKeyId()
                    .orElseThrow();
            out.println("Keeping the key pair in " + dir.toAbsolutePath() + " (key " + id + ")");
            return 0;
        }
        for (Path p : List.of(key, pub)) {
            if (Files.exists(p)) {
                throw new Cli.UsageException(
                        "keygen: " + p + " exists; move it away first (a relay or consumer may be using it)");
            }
        }
        KeyPair keys = RecordTrust.generateKeys();
        try {
            Files.createDirectories(dir);
            Files.writeString(key, RecordTrust.privatePem(keys));
            try {
                Files.setPosixFilePermissions(key, PosixFilePermissions.fromString("rw-------"));
            } catch (UnsupportedOperationException e) {
                err.println("fenced-jobs keygen: could not make " + key + " readable by its owner only; do it by hand");
            }
            Files.writeString(pub, RecordTrust.publicPem(keys.getPublic()));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        out.println("Key " + RecordTrust.keyId(keys.getPublic()) + ":");
        out.println("  relay:     RECORD_SIGNING_KEY_FILE=" + key.toAbsolutePath());
        out.println("  consumers: RECORD_VERIFY_KEYS_FILE=" + pub.toAbsolutePath()
                + "  (several public keys in one file while a rotation runs)");
        return 0;
    }
}
