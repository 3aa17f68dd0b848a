package dev.fencedjobs.runtime.internal;

import static dev.fencedjobs.runtime.internal.SignatureTree.NODE;
import static dev.fencedjobs.runtime.internal.SignatureTree.SIGNATURE_BYTES;
import static dev.fencedjobs.runtime.internal.SignatureTree.levels;
import static dev.fencedjobs.runtime.internal.SignatureTree.signedMessage;

import dev.fencedjobs.runtime.RecordTrust;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.PublicKey;
import java.security.interfaces.EdECPrivateKey;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.utils.Utils;
import org.bouncycastle.math.ec.rfc8032.Ed25519;

/**
 * One Ed25519 signature for each partition's share of a relay batch, which each record of it is
 * checked against on its own.
 *
 * <p><b>Why a tree.</b> The JDK's Ed25519 signs or verifies about 2,000 times a second on one core
 * of the build machine (0.5 ms each, measured); BouncyCastle's, used here, signs in 24 us and
 * verifies in 57 us, which is still half a core at 20,000 records a second for the relay, and more
 * for each consumer. The relay therefore hashes each record of a partition's share of a batch to a
 * leaf of a Merkle tree and signs the root once; each record carries the signature and the sibling
 * hashes from its leaf to the root (its proof). A consumer hashes the record and walks the proof
 * towards the root; the first record of a tree checks the signature over the root, and later ones
 * compare with the root it proved, or stop where their walk meets a node an earlier record of the
 * tree proved, usually after a node or two. A forged record needs a root the relay signed whose
 * tree holds its exact bytes, which SHA-256 rules out.
 *
 * <p><b>Why a tree a partition.</b> A tree's records then come to one consumer, one after
 * another, so each signature is checked once however many instances share the topic, and a proof
 * has the levels of a partition's share (9 for 333 records), not of the whole batch. The relay
 * places a record in a tree by the partition Kafka's default partitioner gives its key; if the
 * topic has since grown, or another partitioner is configured, a tree only spans partitions, and
 * consumers check more signatures.
 *
 * <p><b>What is signed.</b> A leaf is SHA-256 of {@code 0x00}, a domain tag, the topic, the record
 * key and the record value. The value is the {@link Envelope}, which holds everything the consumer
 * decides on: job id, creation time, resource, token, tenure, outbox id and payload; the topic
 * keeps a record signed for one topic from counting on another. An inner node is SHA-256 of
 * {@code 0x01}, its left and its right child (RFC 6962's prefixes: a leaf can never pass for a
 * node). The signature covers a domain tag, the signing time, the number of leaves and the root.
 *
 * <p><b>Nodes of 160 bits.</b> Leaves and nodes keep the first 20 bytes of their SHA-256, so that a
 * node's input (41 bytes) is one block of the hash, not two, and a proof of a tree of 2,000 is 220
 * bytes, not 352 (measured: the consumer's check of a record took 3 us with 32-byte nodes, and the
 * whole pipeline lost 15 % of its throughput). To forge a record, one must find bytes whose hash
 * walk meets a node the relay signed: a second preimage of 160 bits. A collision (2^80) helps only
 * a party that controls both records' exact bytes before the relay signs one, and the relay writes
 * the outbox id, token and completion time (to the microsecond) into each.
 *
 * <p><b>The header</b> {@value #HEADER}, binary, big-endian: version byte 1; key id length (one
 * byte) and key id (ASCII); signing time (8 bytes, epoch milliseconds); signature (64 bytes); leaf
 * index and leaf count (4 bytes each); then the proof, 20 bytes a level. A level's last node without
 * a sibling moves up as it is, so the proof's length follows from index and count. For a tree of
 * 333 records (a batch of 2,000 over 6 partitions) it is 278 bytes; of 2,000, 318.
 *
 * <p>This class signs; {@link RecordVerifier} checks; {@link SignatureTree} is the tree both compute.
 */
public final class RecordSignatures {

    /** The signature header. */
    public static final String HEADER = "fj-signature";

    static final byte VERSION_BYTE = 1;
    static final int MAX_LEAVES = 1 << 20;

    private RecordSignatures() {}

    /** The most bytes the header adds to a record of a batch of {@code batchSize}, its name and framing included. */
    public static int headerBytes(int batchSize) {
        int depth = 32 - Integer.numberOfLeadingZeros(Math.max(1, batchSize - 1));
        return HEADER.length() + 16 + 1 + 1 + 16 + 8 + SIGNATURE_BYTES + 8 + NODE * depth;
    }

    /** Signs a batch as one tree: {@link #sign(RecordTrust, long, List, int)} for a topic of one partition. */
    public static void sign(RecordTrust trust, long nowMillis, List<ProducerRecord<String, byte[]>> records) {
        sign(trust, nowMillis, records, 1);
    }

    /**
     * Signs a batch: adds the header to every record, one tree and one signature for each
     * partition's share of the batch ({@link #trees}, {@link #signTree}).
     */
    public static void sign(
            RecordTrust trust, long nowMillis, List<ProducerRecord<String, byte[]>> records, int partitions) {
        for (List<ProducerRecord<String, byte[]>> tree : trees(records, partitions)) {
            signTree(trust, nowMillis, tree);
        }
    }

    /**
     * A batch's records in trees, one a partition, each in the batch's order: a tree's records
     * then come to one consumer, one after another, so that it checks each signature once however
     * many instances share the partitions. {@code partitions} is the topic's partition count, which
     * puts a record in the tree of the partition Kafka's default partitioner gives its key; a wrong
     * count (a topic that grew since) or another partitioner only makes consumers check more
     * signatures.
     */
    public static List<List<ProducerRecord<String, byte[]>>> trees(
            List<ProducerRecord<String, byte[]>> records, int partitions) {
        if (partitions <= 1 || records.size() <= 1) {
            return List.of(records);
        }
        Map<Integer, List<ProducerRecord<String, byte[]>>> groups = new TreeMap<>();
        for (ProducerRecord<String, byte[]> r : records) {
            int partition = r.partition() != null
                    ? r.partition()
                    : r.key() == null
                            ? 0
                            : Utils.toPositive(Utils.murmur2(r.key().getBytes(StandardCharsets.UTF_8))) % partitions;
            groups.computeIfAbsent(partition, p -> new ArrayList<>()).add(r);
        }
        return List.copyOf(groups.values());
    }

    /**
     * Signs one tree of records: adds the header to each. One signature, plus two SHA-256
     * computations a record (its leaf, and a node for every two).
     */
    public static void signTree(RecordTrust trust, long nowMillis, List<ProducerRecord<String, byte[]>> records) {
        if (records.isEmpty() || trust.signing() == null) {
            return;
        }
        if (records.size() > MAX_LEAVES) {
            throw new IllegalArgumentException(
                    "a tree of " + records.size() + " records is more than one signature covers (" + MAX_LEAVES + ")");
        }
        byte[] id = trust.signingKeyId().orElseThrow().getBytes(StandardCharsets.US_ASCII);
        SignatureTree.Hasher hasher = new SignatureTree.Hasher();
        int count = records.size();
        byte[] leaves = new byte[count * NODE];
        for (int i = 0; i < count; i++) {
            ProducerRecord<String, byte[]> r = records.get(i);
            hasher.leaf(r.topic(), r.key(), r.value(), leaves, i * NODE);
        }
        List<byte[]> levels = levels(hasher, leaves);
        byte[] root = levels.get(levels.size() - 1);
        byte[] signature = new byte[SIGNATURE_BYTES];
        byte[] message = signedMessage(nowMillis, count, root, 0);
        Ed25519.sign(
                privateKey(trust),
                0,
                publicKey(trust.signing().getPublic()),
                0,
                message,
                0,
                message.length,
                signature,
                0);
        // Each header is written here, as long as the longest proof, and copied out at its own length.
        ByteBuffer b = ByteBuffer.allocate(1 + 1 + id.length + 8 + SIGNATURE_BYTES + 8 + NODE * (levels.size() - 1));
        for (int i = 0; i < count; i++) {
            b.clear();
            b.put(VERSION_BYTE)
                    .put((byte) id.length)
                    .put(id)
                    .putLong(nowMillis)
                    .put(signature)
                    .putInt(i)
                    .putInt(count);
            int index = i;
            for (int l = 0; l < levels.size() - 1; l++) {
                byte[] level = levels.get(l);
                if (((index ^ 1) + 1) * NODE <= level.length) {
                    b.put(level, (index ^ 1) * NODE, NODE);
                }
                index >>= 1;
            }
            records.get(i).headers().add(new RecordHeader(HEADER, Arrays.copyOf(b.array(), b.position())));
        }
    }

    /** The 32 bytes of an Ed25519 private key (its seed), for BouncyCastle. */
    private static byte[] privateKey(RecordTrust trust) {
        return ((EdECPrivateKey) trust.signing().getPrivate())
                .getBytes()
                .orElseThrow(() -> new IllegalStateException("the signing key hides its bytes"));
    }

    /** The 32 bytes of an Ed25519 public key: the end of its X.509 encoding. */
    static byte[] publicKey(PublicKey key) {
        byte[] encoded = key.getEncoded();
        return Arrays.copyOfRange(encoded, encoded.length - Ed25519.PUBLIC_KEY_SIZE, encoded.length);
    }
}
