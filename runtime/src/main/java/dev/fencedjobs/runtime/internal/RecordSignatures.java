package dev.fencedjobs.runtime.internal;

import dev.fencedjobs.runtime.RecordTrust;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.DigestException;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.PublicKey;
import java.security.interfaces.EdECPrivateKey;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
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
 */
public final class RecordSignatures {

    /** The signature header. */
    public static final String HEADER = "fj-signature";

    private static final byte VERSION = 1;
    private static final int SIGNATURE_BYTES = 64;
    private static final int MAX_LEAVES = 1 << 20;
    /** Bytes of a leaf or node: the first 160 bits of its SHA-256. */
    private static final int NODE = 20;

    private static final byte[] LEAF_TAG = "fenced-jobs record v1".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] ROOT_TAG = "fenced-jobs batch v1".getBytes(StandardCharsets.US_ASCII);

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
        Hasher hasher = new Hasher();
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
            b.put(VERSION)
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

    /** The tree's levels, leaves first, root last, {@value #NODE} bytes a node; a level's odd last node moves up as it is. */
    private static List<byte[]> levels(Hasher hasher, byte[] leaves) {
        List<byte[]> levels = new ArrayList<>();
        byte[] level = leaves;
        levels.add(level);
        for (int size = level.length / NODE; size > 1; size = (size + 1) / 2) {
            byte[] up = new byte[(size + 1) / 2 * NODE];
            for (int i = 0; 2 * i < size; i++) {
                if (2 * i + 1 < size) {
                    hasher.node(level, 2 * i * NODE, level, (2 * i + 1) * NODE, up, i * NODE);
                } else {
                    System.arraycopy(level, 2 * i * NODE, up, i * NODE, NODE);
                }
            }
            levels.add(up);
            level = up;
        }
        return levels;
    }

    /**
     * SHA-256 of leaves and nodes, kept to their first {@value #NODE} bytes and written into the
     * caller's array, with the few calls the digest is fastest with: a leaf's fixed prefix (its tag
     * and topic) made once per topic, a node's 41 bytes from one scratch array.
     */
    private static final class Hasher {
        private final MessageDigest sha = sha256();
        private final byte[] node = new byte[1 + NODE + NODE];
        private final byte[] digest = new byte[32];
        private String topic;
        private byte[] prefix;
        private byte[] scratch = new byte[256];

        Hasher() {
            node[0] = 1;
        }

        /** {@code 0x00 || tag || len(topic) || topic || len(key) || key || len(value) || value}; a null is length -1. */
        void leaf(String topic, String key, byte[] value, byte[] out, int at) {
            if (!topic.equals(this.topic)) {
                byte[] t = topic.getBytes(StandardCharsets.UTF_8);
                this.prefix = ByteBuffer.allocate(1 + LEAF_TAG.length + 4 + t.length)
                        .put((byte) 0)
                        .put(LEAF_TAG)
                        .putInt(t.length)
                        .put(t)
                        .array();
                this.topic = topic;
            }
            byte[] k = key == null ? null : key.getBytes(StandardCharsets.UTF_8);
            int head = prefix.length + 4 + (k == null ? 0 : k.length) + 4;
            if (scratch.length < head) {
                scratch = new byte[Math.max(head, 2 * scratch.length)];
            }
            ByteBuffer b = ByteBuffer.wrap(scratch);
            b.put(prefix).putInt(k == null ? -1 : k.length);
            if (k != null) {
                b.put(k);
            }
            b.putInt(value == null ? -1 : value.length);
            sha.update(scratch, 0, head);
            if (value != null) {
                sha.update(value);
            }
            finish(out, at);
        }

        /** {@code 0x01 || left || right}. */
        void node(byte[] left, int leftAt, byte[] right, int rightAt, byte[] out, int at) {
            System.arraycopy(left, leftAt, node, 1, NODE);
            System.arraycopy(right, rightAt, node, 1 + NODE, NODE);
            sha.update(node);
            finish(out, at);
        }

        private void finish(byte[] out, int at) {
            try {
                sha.digest(digest, 0, digest.length);
            } catch (DigestException e) {
                throw new IllegalStateException(e);
            }
            System.arraycopy(digest, 0, out, at, NODE);
        }
    }

    private static byte[] signedMessage(long signedAtMillis, int count, byte[] root, int at) {
        return ByteBuffer.allocate(ROOT_TAG.length + 8 + 4 + NODE)
                .put(ROOT_TAG)
                .putLong(signedAtMillis)
                .putInt(count)
                .put(root, at, NODE)
                .array();
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * Checks records against the trusted keys. One per consumer, used by one thread at a time (the
     * consumer's loop, its patient retries and its replays each hold it only inside a call).
     */
    public static final class Verifier {

        /**
         * Trees whose signature was checked, by their signature, with their root: a later record of
         * the tree walks its proof to the root and compares, without checking the signature again.
         * About 200 bytes a tree, the least recently used dropped first; a record of a dropped tree
         * only costs a signature check again.
         */
        private static final int MAX_TREES = 4096;
        /**
         * Trees whose proved nodes are kept: a partition's records of one tree come one after
         * another, so a consumer's few partitions need few.
         */
        private static final int MAX_TREES_WITH_NODES = 8;

        private final RecordTrust trust;
        private final Map<String, byte[]> keys = new HashMap<>();
        private final Duration maxAge;
        private final Hasher hasher = new Hasher();
        /** A record's walk: its leaf, then a node a level, up to 32 levels and the root. */
        private final byte[] path = new byte[33 * NODE];

        private final LinkedHashMap<Sig, Tree> trees = new LinkedHashMap<>(256, 0.75f, true) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<Sig, Tree> eldest) {
                return size() > MAX_TREES;
            }
        };
        private Tree last;
        /** The trees whose proved nodes are kept, oldest first. */
        private final ArrayDeque<Tree> withNodes = new ArrayDeque<>();

        /**
         * @param maxAge a record signed longer ago than this is refused: past the consumer's
         *     dedup window ({@code PROCESSED_RETENTION}) a copy of a genuine record could not be told
         *     from a replay, so it could apply a job again
         */
        public Verifier(RecordTrust trust, Duration maxAge) {
            this.trust = trust;
            this.maxAge = maxAge;
            trust.trusted().forEach((id, key) -> keys.put(id, publicKey(key)));
        }

        public RecordTrust trust() {
            return trust;
        }

        /**
         * Why the record cannot be trusted, or empty when it can: signed by a trusted key, or
         * unsigned in {@code accept-unsigned} mode. {@code nowMillis} is when it arrived.
         */
        public synchronized Optional<String> check(ConsumerRecord<String, byte[]> record, long nowMillis) {
            Header header = record.headers().lastHeader(HEADER);
            if (header == null || header.value() == null) {
                return trust.mode() == RecordTrust.Mode.ACCEPT_UNSIGNED
                        ? Optional.empty()
                        : Optional.of("unsigned record (" + RecordTrust.SIGNATURES + "=required)");
            }
            byte[] h = header.value();
            ByteBuffer b = ByteBuffer.wrap(h);
            try {
                if (b.get() != VERSION) {
                    return Optional.of("signature header of an unknown version");
                }
                int idLength = b.get() & 0xff;
                int idAt = b.position();
                b.position(idAt + idLength);
                long signedAt = b.getLong();
                int signatureAt = b.position();
                b.position(signatureAt + SIGNATURE_BYTES);
                int index = b.getInt();
                int count = b.getInt();
                if (count < 1 || count > MAX_LEAVES || index < 0 || index >= count) {
                    return Optional.of("signature header with leaf " + index + " of " + count);
                }
                int proofAt = b.position();
                int proof = proofNodes(index, count) * NODE;
                if (h.length - proofAt < proof) {
                    return Optional.of("signature header is cut short");
                }
                if (h.length - proofAt > proof) {
                    return Optional.of("signature header with " + (h.length - proofAt - proof) + " bytes too many");
                }
                // A partition's records of one tree come one after another: most find the tree of the one before.
                Tree tree = last != null && last.signs(h, signatureAt)
                        ? last
                        : trees.get(new Sig(Arrays.copyOfRange(h, signatureAt, signatureAt + SIGNATURE_BYTES)));
                if (tree != null && !tree.describedBy(h, idAt, idLength, signedAt, count)) {
                    tree = null; // a known signature with other claims: checked in full, and fails
                }
                String keyId = tree != null ? tree.keyId : new String(h, idAt, idLength, StandardCharsets.US_ASCII);
                byte[] key = keys.get(keyId);
                if (key == null) {
                    return Optional.of("signed with key " + keyId + ", which this consumer does not trust (trusted: "
                            + new TreeSet<>(trust.trusted().keySet()) + ")");
                }
                if (tooOld(signedAt, nowMillis)) {
                    return Optional.of(old(signedAt));
                }
                // The walk from the leaf towards the root, each node kept in the path; it stops early
                // at a node of the last tree that an earlier record's walk already proved.
                Nodes known = tree != null ? tree.nodes : null;
                hasher.leaf(record.topic(), record.key(), record.value(), path, 0);
                int level = 0;
                boolean met = false;
                for (int size = count, position = index, at = proofAt;
                        ;
                        size = (size + 1) / 2, position >>= 1, level++) {
                    if (known != null && known.has(level, position, path, level * NODE)) {
                        met = true;
                        break;
                    }
                    if (size == 1) {
                        break;
                    }
                    int from = level * NODE;
                    if ((position & 1) == 1) {
                        hasher.node(h, at, path, from, path, from + NODE);
                        at += NODE;
                    } else if (position + 1 < size) {
                        hasher.node(path, from, h, at, path, from + NODE);
                        at += NODE;
                    } else {
                        System.arraycopy(path, from, path, from + NODE, NODE);
                    }
                }
                // Without a node met: the root, the tree's if known, else the signature decides.
                boolean matches = met
                        || (tree != null
                                ? Arrays.equals(tree.root, 0, NODE, path, level * NODE, (level + 1) * NODE)
                                : Ed25519.verify(
                                        h,
                                        signatureAt,
                                        key,
                                        0,
                                        signedMessage(signedAt, count, path, level * NODE),
                                        0,
                                        ROOT_TAG.length + 8 + 4 + NODE));
                if (!matches) {
                    return Optional.of("signature does not match the record (key " + keyId
                            + "): its bytes were changed, or it was never signed");
                }
                if (tree == null) {
                    tree = new Tree(
                            keyId,
                            Arrays.copyOfRange(h, idAt, idAt + idLength),
                            signedAt,
                            count,
                            Arrays.copyOfRange(h, signatureAt, signatureAt + SIGNATURE_BYTES),
                            Arrays.copyOfRange(path, level * NODE, (level + 1) * NODE));
                    trees.put(new Sig(tree.signature), tree);
                }
                if (known == null) {
                    known = tree.nodes = new Nodes(tree.count);
                    withNodes.addLast(tree);
                    if (withNodes.size() > MAX_TREES_WITH_NODES) {
                        withNodes.removeFirst().nodes = null;
                    }
                }
                known.learn(index, level, path);
                last = tree;
                return Optional.empty();
            } catch (BufferUnderflowException | IllegalArgumentException e) {
                // IllegalArgumentException: a position past the end (Buffer.position).
                return Optional.of("signature header is cut short");
            }
        }

        private boolean tooOld(long signedAt, long nowMillis) {
            return signedAt < nowMillis - maxAge.toMillis();
        }

        private String old(long signedAt) {
            return "signed at " + Instant.ofEpochMilli(signedAt) + ", longer ago than the dedup window (" + maxAge
                    + "), so it cannot be told from a replay";
        }

        /** A signature as a map key. */
        private record Sig(byte[] bytes) {
            @Override
            public boolean equals(Object o) {
                return o instanceof Sig s && Arrays.equals(s.bytes, bytes);
            }

            @Override
            public int hashCode() {
                return (bytes[0] & 0xff) << 24 | (bytes[1] & 0xff) << 16 | (bytes[2] & 0xff) << 8 | (bytes[3] & 0xff);
            }
        }

        /**
         * The nodes of one tree that records' walks proved, by level and position, so that a later
         * record of it stops where its walk meets one, usually after a node or two: about 40 bytes a
         * leaf, kept for the last few trees only.
         */
        private static final class Nodes {
            /** Where each level starts, in nodes; the leaves first. */
            final int[] starts = new int[33];

            final byte[] hashes;
            final boolean[] proved;

            Nodes(int count) {
                int total = 0;
                int level = 0;
                for (int size = count; ; size = (size + 1) / 2, level++) {
                    starts[level] = total;
                    total += size;
                    if (size == 1) {
                        break;
                    }
                }
                hashes = new byte[total * NODE];
                proved = new boolean[total];
            }

            boolean has(int level, int position, byte[] hash, int at) {
                int n = starts[level] + position;
                return proved[n] && Arrays.equals(hashes, n * NODE, (n + 1) * NODE, hash, at, at + NODE);
            }

            /** The walk of leaf {@code index}, levels 0 to {@code top}: each proved now. */
            void learn(int index, int top, byte[] path) {
                for (int level = 0, position = index; level <= top; level++, position >>= 1) {
                    int n = starts[level] + position;
                    proved[n] = true;
                    System.arraycopy(path, level * NODE, hashes, n * NODE, NODE);
                }
            }
        }

        /** A tree whose signature a trusted key made over its root, and the nodes of it proved so far, if kept. */
        private static final class Tree {
            final String keyId;
            final byte[] id;
            final long signedAt;
            final int count;
            final byte[] signature;
            final byte[] root;
            Nodes nodes;

            Tree(String keyId, byte[] id, long signedAt, int count, byte[] signature, byte[] root) {
                this.keyId = keyId;
                this.id = id;
                this.signedAt = signedAt;
                this.count = count;
                this.signature = signature;
                this.root = root;
            }

            boolean signs(byte[] header, int at) {
                return Arrays.equals(signature, 0, SIGNATURE_BYTES, header, at, at + SIGNATURE_BYTES);
            }

            boolean describedBy(byte[] header, int idAt, int idLength, long otherSignedAt, int otherCount) {
                return otherSignedAt == signedAt
                        && otherCount == count
                        && Arrays.equals(id, 0, id.length, header, idAt, idAt + idLength);
            }
        }
    }

    /** The nodes of the proof of leaf {@code index} of {@code count}: one a level where the node has a sibling. */
    private static int proofNodes(int index, int count) {
        int nodes = 0;
        for (int size = count, position = index; size > 1; size = (size + 1) / 2, position >>= 1) {
            if ((position & 1) == 1 || position + 1 < size) {
                nodes++;
            }
        }
        return nodes;
    }
}
