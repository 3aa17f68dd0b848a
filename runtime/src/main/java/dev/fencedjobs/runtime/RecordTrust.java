package dev.fencedjobs.runtime;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.MessageDigest;
import java.security.PrivateKey;
import java.security.PublicKey;
import java.security.SecureRandom;
import java.security.interfaces.EdECPrivateKey;
import java.security.spec.NamedParameterSpec;
import java.security.spec.PKCS8EncodedKeySpec;
import java.security.spec.X509EncodedKeySpec;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Which records the topic's readers may trust: the relay signs what it publishes with an Ed25519
 * private key, and the consumer applies only records signed with one of the public keys it trusts
 * ({@link RecordSignatures}). A key's id is the first 16 hex digits of the SHA-256 of its public
 * key's encoding, so a key names itself and nothing has to keep ids and keys in step.
 *
 * <p>Rotation without downtime: give the consumers the new public key beside the old one, then the
 * relays the new private key, then take the old public key away once the topic holds no record
 * signed with it (its retention, or the consumers' lag, has passed).
 *
 * @param mode {@code RECORD_SIGNATURES}: {@code required} (the default) or {@code accept-unsigned}
 *     (a rollout: unsigned records are applied; a signed record must still verify)
 * @param signing the relay's private key and its public half ({@code RECORD_SIGNING_KEY} or
 *     {@code RECORD_SIGNING_KEY_FILE}); null where none was given
 * @param trusted the consumer's public keys by id ({@code RECORD_VERIFY_KEYS} or {@code RECORD_VERIFY_KEYS_FILE})
 */
public record RecordTrust(Mode mode, KeyPair signing, Map<String, PublicKey> trusted) {

    public static final String SIGNATURES = "RECORD_SIGNATURES";
    public static final String SIGNING_KEY = "RECORD_SIGNING_KEY";
    public static final String SIGNING_KEY_FILE = "RECORD_SIGNING_KEY_FILE";
    public static final String VERIFY_KEYS = "RECORD_VERIFY_KEYS";
    public static final String VERIFY_KEYS_FILE = "RECORD_VERIFY_KEYS_FILE";

    /** No keys, signatures required: a relay or consumer given this refuses to start, naming the key it lacks. */
    public static final RecordTrust NONE = new RecordTrust(Mode.REQUIRED, null, Map.of());

    private static final String ALGORITHM = "Ed25519";
    private static final Pattern PEM = Pattern.compile("-----BEGIN ([A-Z ]+)-----([^-]*)-----END \\1-----");

    /** What the consumer does with a record that carries no signature. */
    public enum Mode {
        /** It is dead-lettered as unauthenticated: the default, and the only mode in which the fence cannot be forged. */
        REQUIRED("required"),
        /** It is applied, for a rollout while relays without a key still publish; a signed record must verify all the same. */
        ACCEPT_UNSIGNED("accept-unsigned");

        private final String setting;

        Mode(String setting) {
            this.setting = setting;
        }

        public String setting() {
            return setting;
        }

        static Mode parse(String raw) {
            for (Mode m : values()) {
                if (m.setting.equals(raw.trim().toLowerCase(Locale.ROOT))) {
                    return m;
                }
            }
            throw new ConfigException(SIGNATURES, "must be required or accept-unsigned, got '" + raw + "'");
        }
    }

    public RecordTrust {
        Objects.requireNonNull(mode, SIGNATURES);
        trusted = Map.copyOf(trusted);
    }

    /** Signs with {@code keys} and trusts its public half: a relay and a consumer of one deployment, in one process or a test. */
    public static RecordTrust of(KeyPair keys) {
        return new RecordTrust(Mode.REQUIRED, keys, Map.of(keyId(keys.getPublic()), keys.getPublic()));
    }

    /** A fresh key pair, trusted by itself. */
    public static RecordTrust generate() {
        return of(generateKeys());
    }

    public RecordTrust withMode(Mode other) {
        return new RecordTrust(other, signing, trusted);
    }

    /** The same, trusting also (or only) these public keys. */
    public RecordTrust withTrusted(Map<String, PublicKey> keys) {
        return new RecordTrust(mode, signing, keys);
    }

    /** Reads {@code RECORD_SIGNATURES}, the signing key and the trusted keys; each key from its variable or its file. */
    public static RecordTrust from(Settings settings) {
        Mode mode = settings.get(SIGNATURES).map(Mode::parse).orElse(Mode.REQUIRED);
        KeyPair signing = settings.valueOrFile(SIGNING_KEY, SIGNING_KEY_FILE)
                .map(RecordTrust::parsePrivate)
                .orElse(null);
        Map<String, PublicKey> trusted = new LinkedHashMap<>();
        settings.valueOrFile(VERIFY_KEYS, VERIFY_KEYS_FILE).ifPresent(t -> {
            for (PublicKey key : parsePublic(t)) {
                trusted.put(keyId(key), key);
            }
        });
        return new RecordTrust(mode, signing, trusted);
    }

    /** The relay's check at start-up. */
    public void requireSigningKey() {
        if (signing == null && mode == Mode.REQUIRED) {
            throw new ConfigException(
                    SIGNING_KEY,
                    "is not set (nor " + SIGNING_KEY_FILE + "): the relay signs every record so that "
                            + "consumers can tell its records from forged ones. Make a key pair with `fenced-jobs keygen`, or set "
                            + SIGNATURES + "=accept-unsigned while a rollout still has consumers without keys");
        }
    }

    /** The consumer's check at start-up. */
    public void requireVerifyKeys() {
        if (trusted.isEmpty() && mode == Mode.REQUIRED) {
            throw new ConfigException(
                    VERIFY_KEYS,
                    "is not set (nor " + VERIFY_KEYS_FILE + "): the consumer applies only records signed "
                            + "by a relay key it trusts. Give it the relay's public key (`fenced-jobs keygen` writes one), or set "
                            + SIGNATURES + "=accept-unsigned while relays without a key still publish");
        }
    }

    /** The signing key's id, if any. */
    public Optional<String> signingKeyId() {
        return signing == null ? Optional.empty() : Optional.of(keyId(signing.getPublic()));
    }

    /** For logs and {@code /status}: the mode and key ids, never a key. */
    public Map<String, Object> describe() {
        Map<String, Object> d = new LinkedHashMap<>();
        d.put("mode", mode.setting());
        signingKeyId().ifPresent(id -> d.put("signingKey", id));
        if (!trusted.isEmpty()) {
            d.put("trustedKeys", List.copyOf(new TreeSet<>(trusted.keySet())));
        }
        return d;
    }

    @Override
    public String toString() {
        return "RecordTrust" + describe();
    }

    public static KeyPair generateKeys() {
        try {
            return KeyPairGenerator.getInstance(ALGORITHM).generateKeyPair();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("this JVM has no " + ALGORITHM + " (JDK 15 and later have it)", e);
        }
    }

    /** The id of a public key: 16 hex digits of the SHA-256 of its X.509 encoding. */
    public static String keyId(PublicKey key) {
        try {
            byte[] digest = MessageDigest.getInstance("SHA-256").digest(key.getEncoded());
            return HexFormat.of().formatHex(digest, 0, 8);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The private key as PEM ({@code PRIVATE KEY}, PKCS #8, the form {@code openssl genpkey -algorithm ed25519} writes). */
    public static String privatePem(KeyPair keys) {
        return pem("PRIVATE KEY", keys.getPrivate().getEncoded());
    }

    /** The public key as PEM ({@code PUBLIC KEY}, X.509, the form {@code openssl pkey -pubout} writes). */
    public static String publicPem(PublicKey key) {
        return pem("PUBLIC KEY", key.getEncoded());
    }

    private static String pem(String type, byte[] der) {
        return "-----BEGIN " + type + "-----\n"
                + Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII))
                        .encodeToString(der) + "\n-----END " + type + "-----\n";
    }

    /**
     * The PEM blocks in {@code text}, or, without any, its base64 bodies separated by commas or
     * white space (one line per key fits an environment variable).
     */
    private static List<byte[]> blocks(String text, String variable, String type) {
        List<byte[]> ders = new ArrayList<>();
        try {
            if (text.contains("-----BEGIN")) {
                Matcher m = PEM.matcher(text);
                while (m.find()) {
                    if (!m.group(1).equals(type)) {
                        throw new ConfigException(
                                variable, "holds a " + m.group(1) + " block; it takes " + type + " blocks");
                    }
                    ders.add(Base64.getMimeDecoder().decode(m.group(2)));
                }
            } else {
                for (String body : text.trim().split("[,\\s]+")) {
                    if (!body.isEmpty()) {
                        ders.add(Base64.getDecoder().decode(body));
                    }
                }
            }
        } catch (IllegalArgumentException e) {
            throw new ConfigException(variable, "is not PEM or base64: " + e.getMessage());
        }
        if (ders.isEmpty()) {
            throw new ConfigException(variable, "holds no key");
        }
        return ders;
    }

    private static KeyPair parsePrivate(String text) {
        List<byte[]> ders = blocks(text, SIGNING_KEY, "PRIVATE KEY");
        if (ders.size() != 1) {
            throw new ConfigException(SIGNING_KEY, "holds " + ders.size() + " keys; the relay signs with one");
        }
        try {
            PrivateKey key = KeyFactory.getInstance(ALGORITHM).generatePrivate(new PKCS8EncodedKeySpec(ders.get(0)));
            return new KeyPair(publicOf(key), key);
        } catch (GeneralSecurityException e) {
            throw new ConfigException(SIGNING_KEY, "is not an Ed25519 private key (PKCS #8): " + e.getMessage());
        }
    }

    private static List<PublicKey> parsePublic(String text) {
        List<PublicKey> keys = new ArrayList<>();
        for (byte[] der : blocks(text, VERIFY_KEYS, "PUBLIC KEY")) {
            try {
                keys.add(KeyFactory.getInstance(ALGORITHM).generatePublic(new X509EncodedKeySpec(der)));
            } catch (GeneralSecurityException e) {
                throw new ConfigException(
                        VERIFY_KEYS, "holds a key that is not an Ed25519 public key (X.509): " + e.getMessage());
            }
        }
        return keys;
    }

    /**
     * The public half of an Ed25519 private key. The JDK has no call for it, so the key pair
     * generator is given the private key's 32 bytes as its only randomness: the pair it makes is the
     * same private key and its public key (checked).
     */
    private static PublicKey publicOf(PrivateKey key) throws GeneralSecurityException {
        byte[] seed = ((EdECPrivateKey) key)
                .getBytes()
                .orElseThrow(() -> new GeneralSecurityException("the private key hides its bytes"));
        KeyPairGenerator generator = KeyPairGenerator.getInstance(ALGORITHM);
        generator.initialize(NamedParameterSpec.ED25519, new FixedSeed(seed));
        KeyPair pair = generator.generateKeyPair();
        if (!Arrays.equals(((EdECPrivateKey) pair.getPrivate()).getBytes().orElseThrow(), seed)) {
            throw new GeneralSecurityException("could not derive the public key");
        }
        return pair.getPublic();
    }

    /** A SecureRandom that returns one seed: the generator's private key is then that seed. */
    private static final class FixedSeed extends SecureRandom {
        private static final long serialVersionUID = 1L;
        private final byte[] seed;

        FixedSeed(byte[] seed) {
            this.seed = seed.clone();
        }

        @Override
        public void nextBytes(byte[] bytes) {
            System.arraycopy(seed, 0, bytes, 0, Math.min(seed.length, bytes.length));
        }
    }
}
