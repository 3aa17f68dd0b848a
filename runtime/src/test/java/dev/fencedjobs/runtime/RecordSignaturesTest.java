package dev.fencedjobs.runtime;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.runtime.internal.RecordSignatures;
import dev.fencedjobs.runtime.internal.RecordVerifier;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.junit.jupiter.api.Test;

class RecordSignaturesTest {

    private static final long NOW = 1_800_000_000_000L;
    private final RecordTrust trust = RecordTrust.generate();

    private static List<ProducerRecord<String, byte[]>> batch(int n) {
        List<ProducerRecord<String, byte[]>> records = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            records.add(
                    new ProducerRecord<>("jobs", "r-" + i % 3, ("{\"n\":" + i + "}").getBytes(StandardCharsets.UTF_8)));
        }
        return records;
    }

    private static ConsumerRecord<String, byte[]> received(ProducerRecord<String, byte[]> r) {
        return received(r.topic(), r.key(), r.value(), r.headers().toArray());
    }

    private static ConsumerRecord<String, byte[]> received(String topic, String key, byte[] value, Header[] headers) {
        ConsumerRecord<String, byte[]> c = new ConsumerRecord<>(topic, 0, 0, key, value);
        for (Header h : headers) {
            c.headers().add(h);
        }
        return c;
    }

    @Test
    void everyRecordOfABatchOfAnySizeVerifiesOnItsOwn() {
        for (int n : new int[] {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 100, 2000}) {
            List<ProducerRecord<String, byte[]>> records = batch(n);
            RecordSignatures.sign(trust, NOW, records);
            RecordVerifier verifier = new RecordVerifier(trust, Duration.ofDays(7));
            for (ProducerRecord<String, byte[]> r : records) {
                assertThat(verifier.check(received(r), NOW))
                        .as("record %s of %d", r.key(), n)
                        .isEmpty();
                assertThat(r.headers().lastHeader(RecordSignatures.HEADER).value().length
                                + RecordSignatures.HEADER.length()
                                + 8)
                        .as("within the size the relay allows for")
                        .isLessThanOrEqualTo(RecordSignatures.headerBytes(n));
            }
        }
    }

    @Test
    void aChangedValueKeyOrTopicOrAMovedProofFails() {
        List<ProducerRecord<String, byte[]>> records = batch(5);
        RecordSignatures.sign(trust, NOW, records);
        RecordVerifier verifier = new RecordVerifier(trust, Duration.ofDays(7));
        ProducerRecord<String, byte[]> r = records.get(2);
        byte[] value = r.value().clone();
        value[value.length - 2] ^= 1;
        assertThat(verifier.check(
                        received(r.topic(), r.key(), value, r.headers().toArray()), NOW))
                .hasValueSatisfying(why -> assertThat(why).contains("signature does not match the record"));
        assertThat(verifier.check(
                        received(r.topic(), "r-9", r.value(), r.headers().toArray()), NOW))
                .isPresent();
        assertThat(verifier.check(
                        received("other-topic", r.key(), r.value(), r.headers().toArray()), NOW))
                .isPresent();
        // Record 2's bytes with record 3's signature header: a proof of another leaf.
        assertThat(verifier.check(
                        received(
                                r.topic(),
                                r.key(),
                                r.value(),
                                records.get(3).headers().toArray()),
                        NOW))
                .isPresent();
        // The signature itself changed.
        byte[] header = r.headers().lastHeader(RecordSignatures.HEADER).value().clone();
        header[30] ^= 1;
        ConsumerRecord<String, byte[]> badSignature = received(r.topic(), r.key(), r.value(), new Header[0]);
        badSignature.headers().add(RecordSignatures.HEADER, header);
        assertThat(verifier.check(badSignature, NOW)).isPresent();
        // Cut short, and with bytes added.
        ConsumerRecord<String, byte[]> cut = received(r.topic(), r.key(), r.value(), new Header[0]);
        cut.headers()
                .add(
                        RecordSignatures.HEADER,
                        java.util.Arrays.copyOf(
                                r.headers().lastHeader(RecordSignatures.HEADER).value(), 60));
        assertThat(verifier.check(cut, NOW)).hasValue("signature header is cut short");
        ConsumerRecord<String, byte[]> longer = received(r.topic(), r.key(), r.value(), new Header[0]);
        byte[] h = r.headers().lastHeader(RecordSignatures.HEADER).value();
        longer.headers().add(RecordSignatures.HEADER, java.util.Arrays.copyOf(h, h.length + 32));
        assertThat(verifier.check(longer, NOW))
                .hasValueSatisfying(why -> assertThat(why).contains("bytes too many"));
    }

    @Test
    void aVerifiedRootDoesNotVouchForARecordOutsideItsTree() {
        List<ProducerRecord<String, byte[]>> records = batch(4);
        RecordSignatures.sign(trust, NOW, records);
        RecordVerifier verifier = new RecordVerifier(trust, Duration.ofDays(7));
        assertThat(verifier.check(received(records.get(0)), NOW)).isEmpty(); // the root is now cached
        ProducerRecord<String, byte[]> r = records.get(1);
        assertThat(verifier.check(
                        received(
                                r.topic(),
                                r.key(),
                                "{\"n\":99}".getBytes(StandardCharsets.UTF_8),
                                r.headers().toArray()),
                        NOW))
                .isPresent();
    }

    @Test
    void aBatchIsSignedOnceAPartitionAndEachRecordChecksInAnyOrder() {
        List<ProducerRecord<String, byte[]>> records = new ArrayList<>();
        for (int i = 0; i < 2000; i++) {
            records.add(new ProducerRecord<>(
                    "jobs", "r-" + i % 100, ("{\"n\":" + i + "}").getBytes(StandardCharsets.UTF_8)));
        }
        RecordSignatures.sign(trust, NOW, records, 6);
        java.util.Map<String, Integer> perSignature = new java.util.HashMap<>();
        java.util.Map<String, java.util.Set<Integer>> partitionsOfSignature = new java.util.HashMap<>();
        for (ProducerRecord<String, byte[]> r : records) {
            byte[] h = r.headers().lastHeader(RecordSignatures.HEADER).value();
            String signature = java.util.HexFormat.of().formatHex(h, 2 + 16 + 8, 2 + 16 + 8 + 64);
            perSignature.merge(signature, 1, Integer::sum);
            int partition = org.apache.kafka.common.utils.Utils.toPositive(
                            org.apache.kafka.common.utils.Utils.murmur2(r.key().getBytes(StandardCharsets.UTF_8)))
                    % 6;
            partitionsOfSignature
                    .computeIfAbsent(signature, k -> new java.util.HashSet<>())
                    .add(partition);
        }
        assertThat(perSignature).as("one tree a partition").hasSize(6);
        assertThat(partitionsOfSignature.values()).allSatisfy(p -> assertThat(p).hasSize(1));
        assertThat(perSignature.values().stream().mapToInt(Integer::intValue).sum())
                .isEqualTo(2000);

        // In the batch's order, the trees' records interleave: more trees than the verifier keeps nodes of.
        RecordVerifier verifier = new RecordVerifier(trust, Duration.ofDays(7));
        for (ProducerRecord<String, byte[]> r : records) {
            assertThat(verifier.check(received(r), NOW)).isEmpty();
        }
        List<ProducerRecord<String, byte[]>> shuffled = new ArrayList<>(records);
        java.util.Collections.shuffle(shuffled, new java.util.Random(27));
        RecordVerifier another = new RecordVerifier(trust, Duration.ofDays(7));
        for (ProducerRecord<String, byte[]> r : shuffled) {
            assertThat(another.check(received(r), NOW)).isEmpty();
        }
    }

    @Test
    void aNodeProvedByEarlierRecordsVouchesOnlyForTheBytesThatHashToIt() {
        List<ProducerRecord<String, byte[]>> records = batch(16);
        RecordSignatures.sign(trust, NOW, records);
        RecordVerifier verifier = new RecordVerifier(trust, Duration.ofDays(7));
        for (int i = 0; i < 8; i++) {
            assertThat(verifier.check(received(records.get(i)), NOW)).isEmpty();
        }
        for (int i : new int[] {3, 8, 15}) {
            // Leaf 3 itself is proved; 8 to 15 share only the root with what is proved.
            ProducerRecord<String, byte[]> r = records.get(i);
            assertThat(verifier.check(
                            received(
                                    r.topic(),
                                    r.key(),
                                    "{\"n\":99}".getBytes(StandardCharsets.UTF_8),
                                    r.headers().toArray()),
                            NOW))
                    .as("record %d changed", i)
                    .hasValueSatisfying(why -> assertThat(why).contains("signature does not match the record"));
            assertThat(verifier.check(received(r), NOW))
                    .as("record %d as signed", i)
                    .isEmpty();
        }
    }

    @Test
    void unsignedRecordsDependOnTheModeAndUntrustedOrOldSignaturesNeverPass() {
        ProducerRecord<String, byte[]> unsigned = batch(1).get(0);
        assertThat(new RecordVerifier(trust, Duration.ofDays(7)).check(received(unsigned), NOW))
                .hasValue("unsigned record (RECORD_SIGNATURES=required)");
        assertThat(new RecordVerifier(trust.withMode(RecordTrust.Mode.ACCEPT_UNSIGNED), Duration.ofDays(7))
                        .check(received(unsigned), NOW))
                .isEmpty();

        List<ProducerRecord<String, byte[]>> byStranger = batch(1);
        RecordTrust stranger = RecordTrust.generate();
        RecordSignatures.sign(stranger, NOW, byStranger);
        Optional<String> why = new RecordVerifier(trust.withMode(RecordTrust.Mode.ACCEPT_UNSIGNED), Duration.ofDays(7))
                .check(received(byStranger.get(0)), NOW);
        assertThat(why)
                .hasValueSatisfying(w -> assertThat(w)
                        .contains("signed with key " + stranger.signingKeyId().orElseThrow()));

        List<ProducerRecord<String, byte[]>> old = batch(1);
        RecordSignatures.sign(trust, NOW - Duration.ofDays(8).toMillis(), old);
        assertThat(new RecordVerifier(trust, Duration.ofDays(7)).check(received(old.get(0)), NOW))
                .hasValueSatisfying(w -> assertThat(w).contains("longer ago than the dedup window"));
        assertThat(new RecordVerifier(trust, Duration.ofDays(7))
                        .check(received(old.get(0)), NOW - Duration.ofDays(7).toMillis()))
                .as("checked as it was when it arrived")
                .isEmpty();
    }

    @Test
    void keysComeFromPemOrBase64InVariablesOrFilesAndAreNeverShown() throws Exception {
        var keys = RecordTrust.generateKeys();
        String privatePem = RecordTrust.privatePem(keys);
        String publicPem = RecordTrust.publicPem(keys.getPublic());
        RecordTrust fromPem = RecordTrust.from(Settings.of(Map.of(
                RecordTrust.SIGNING_KEY,
                privatePem,
                RecordTrust.VERIFY_KEYS,
                publicPem + RecordTrust.publicPem(RecordTrust.generateKeys().getPublic()))));
        assertThat(fromPem.signingKeyId()).hasValue(RecordTrust.keyId(keys.getPublic()));
        assertThat(fromPem.trusted()).hasSize(2).containsKey(RecordTrust.keyId(keys.getPublic()));
        assertThat(fromPem.toString())
                .doesNotContain(privatePem.lines().skip(1).findFirst().orElseThrow());

        java.nio.file.Path file = java.nio.file.Files.createTempFile("verify", ".pub");
        java.nio.file.Files.writeString(file, publicPem);
        String oneLine =
                java.util.Base64.getEncoder().encodeToString(keys.getPrivate().getEncoded());
        RecordTrust fromFile = RecordTrust.from(
                Settings.of(Map.of(RecordTrust.SIGNING_KEY, oneLine, RecordTrust.VERIFY_KEYS_FILE, file.toString())));
        List<ProducerRecord<String, byte[]>> records = batch(3);
        RecordSignatures.sign(fromFile, NOW, records);
        assertThat(new RecordVerifier(fromFile, Duration.ofDays(7)).check(received(records.get(1)), NOW))
                .isEmpty();
        java.nio.file.Files.delete(file);

        assertThatThrownBy(() -> RecordTrust.NONE.requireSigningKey())
                .isInstanceOf(ConfigException.class)
                .hasMessageStartingWith("RECORD_SIGNING_KEY: is not set");
        assertThatThrownBy(() -> RecordTrust.NONE.requireVerifyKeys())
                .isInstanceOf(ConfigException.class)
                .hasMessageStartingWith("RECORD_VERIFY_KEYS: is not set");
        RecordTrust.NONE.withMode(RecordTrust.Mode.ACCEPT_UNSIGNED).requireSigningKey();
        assertThatThrownBy(() -> RecordTrust.from(Settings.of(Map.of(RecordTrust.SIGNATURES, "sometimes"))))
                .hasMessageStartingWith("RECORD_SIGNATURES: must be required or accept-unsigned");
        assertThatThrownBy(() -> RecordTrust.from(Settings.of(Map.of(RecordTrust.VERIFY_KEYS, privatePem))))
                .hasMessageStartingWith("RECORD_VERIFY_KEYS: holds a PRIVATE KEY block");
        assertThatThrownBy(() -> RecordTrust.from(
                        Settings.of(Map.of(RecordTrust.SIGNING_KEY, "x", RecordTrust.SIGNING_KEY_FILE, "/y"))))
                .hasMessageContaining("are both set");
        assertThatThrownBy(
                        () -> RecordTrust.from(Settings.of(Map.of(RecordTrust.SIGNING_KEY_FILE, "/nonexistent/key"))))
                .hasMessageStartingWith("RECORD_SIGNING_KEY_FILE: cannot read /nonexistent/key");
    }
}
