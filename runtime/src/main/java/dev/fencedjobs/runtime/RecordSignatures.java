package dev.fencedjobs.runtime;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.PublicKey;
import java.security.interfaces.EdECPrivateKey;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.bouncycastle.math.ec.rfc8032.Ed25519;

/**
 * One Ed25519 signature per relay batch, which each record of the batch is checked against on its
 * own.
 *
 * <p><b>Why a batch.</b> The JDK's Ed25519 signs or verifies about 2,000 times a second on one core
 * of the build machine (0.5 ms each, measured); BouncyCastle's, used here, signs in 24 us and
 * verifies in 57 us, which is still half a core at 20,000 records a second for the relay, and more
 * for each consumer. The relay therefore hashes each record of a batch to a leaf of a Merkle tree
 * and signs the root once; each record carries the signature and the sibling hashes from its leaf
 * to the root (its proof). A consumer hashes the record and walks the proof towards the root; the
 * first record of a batch checks the signature over the root, and the nodes it passed are kept
 * (bounded), so a later record of the batch stops where its walk meets one of them, usually after
 * a node or two. A forged record needs a root the relay signed whose tree holds its exact bytes,
 * which SHA-256 rules out.
 *
 * <p><b>What is signed.</b> A leaf is SHA-256 of {@code 0x00}, a domain tag, the topic, the record
 * key and the record value. The value is the {@link Envelope}, which holds everything the consumer
 * decides on: job id, creation time, resource, token, tenure, outbox id and payload; the topic
 * keeps a record signed for one topic from counting on another. An inner node is SHA-256 of
 * {@code 0x01}, its left and its right child (RFC 6962's prefixes: a leaf can never pass for a
 * node). The signature covers a domain tag, the signing time, the number of leaves and the root.
 *
 * <p><b>Nodes of 160 bits.</b> Leaves and nodes keep the first 20 bytes of their SHA-256, so that a
 * node's input (41 bytes) is one block of the hash, not two, and a proof of a batch of 2,000 is 220
 * bytes, not 352 (measured: the consumer's check of a record took 3 us with 32-byte nodes, and the
 * whole pipeline lost 15 % of its throughput). To forge a record, one must find bytes whose hash
 * walk meets a node the relay signed: a second preimage of 160 bits. A collision (2^80) helps only
 * a party that controls both records' exact bytes before the relay signs one, and the relay writes
 * the outbox id, token and completion time (to the microsecond) into each.
 *
 * <p><b>The header</b> {@value #HEADER}, binary, big-endian: version byte 1; key id length (one
 * byte) and key id (ASCII); signing time (8 bytes, epoch milliseconds); signature (64 bytes); leaf
 * index and leaf count (4 bytes each); then the proof, 20 bytes a level. A level's last node without
 * a sibling moves up as it is, so the proof's length follows from index and count. For a batch of
 * 2,000 records it is 318 bytes.
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

    /**
     * Signs a batch: adds the header to every record. One signature for the whole batch, plus two
     * SHA-256 computations a record (its leaf, and a node for every two).
     */
    public static void sign(RecordTrust trust, long nowMillis, List<ProducerRecord<String, byte[]>> records) {
        if (records.isEmpty() || trust.signing() == null) {
            return;
        }
        if (records.size() > MAX_LEAVES) {
            throw new IllegalArgumentException("a batch of " + records.size() + " records is more than one signature covers (" + MAX_LEAVES + ")");
        }
        Hasher hasher = new Hasher();
        byte[][] leaves = new byte[records.size()][];
        for (int i = 0; i < leaves.length; i++) {
            ProducerRecord<String, byte[]> r = records.get(i);
            leaves[i] = hasher.leaf(r.topic(), r.key(), r.value());
        }
        List<byte[][]> levels = levels(hasher, leaves);
        byte[] root = levels.get(levels.size() - 1)[0];
        byte[] signature = new byte[SIGNATURE_BYTES];
        byte[] message = signedMessage(nowMillis, leaves.length, root);
        Ed25519.sign(privateKey(trust), 0, publicKey(trust.signing().getPublic()), 0, message, 0, message.length, signature, 0);
        byte[] id = trust.signingKeyId().orElseThrow().getBytes(StandardCharsets.US_ASCII);
        // Each header is written here, as long as the longest proof, and copied out at its own length.
        ByteBuffer b = ByteBuffer.allocate(1 + 1 + id.length + 8 + SIGNATURE_BYTES + 8 + NODE * (levels.size() - 1));
        for (int i = 0; i < leaves.length; i++) {
            b.clear();
            b.put(VERSION).put((byte) id.length).put(id).putLong(nowMillis).put(signature).putInt(i).putInt(leaves.length);
            int index = i;
            for (int l = 0; l < levels.size() - 1; l++) {
                byte[][] level = levels.get(l);
                if ((index ^ 1) < level.length) {
                    b.put(level[index ^ 1]);
                }
                index >>= 1;
            }
            records.get(i).headers().add(new RecordHeader(HEADER, Arrays.copyOf(b.array(), b.position())));
        }
    }

    /** The 32 bytes of an Ed25519 private key (its seed), for BouncyCastle. */
    private static byte[] privateKey(RecordTrust trust) {
        return ((EdECPrivateKey) trust.signing().getPrivate()).getBytes()
                .orElseThrow(() -> new IllegalStateException("the signing key hides its bytes"));
    }

    /** The 32 bytes of an Ed25519 public key: the end of its X.509 encoding. */
    static byte[] publicKey(PublicKey key) {
        byte[] encoded = key.getEncoded();
        return Arrays.copyOfRange(encoded, encoded.length - Ed25519.PUBLIC_KEY_SIZE, encoded.length);
    }

    /** The tree's levels, leaves first, root last; a level's odd last node moves up as it is. */
    private static List<byte[][]> levels(Hasher hasher, byte[][] leaves) {
        List<byte[][]> levels = new ArrayList<>();
        byte[][] level = leaves;
        levels.add(level);
        while (level.length > 1) {
            byte[][] up = new byte[(level.length + 1) / 2][];
            for (int i = 0; i < up.length; i++) {
                up[i] = 2 * i + 1 < level.length ? hasher.node(level[2 * i], level[2 * i + 1]) : level[2 * i];
            }
            levels.add(up);
            level = up;
        }
        return levels;
    }

    /**
     * SHA-256 of leaves and nodes, kept to their first {@value #NODE} bytes, with the few calls the
     * digest is fastest with: a leaf's fixed prefix (its tag and topic) made once per topic, a
     * node's 41 bytes from one scratch array.
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
        byte[] leaf(String topic, String key, byte[] value) {
            if (!topic.equals(this.topic)) {
                byte[] t = topic.getBytes(StandardCharsets.UTF_8);
                this.prefix = ByteBuffer.allocate(1 + LEAF_TAG.length + 4 + t.length).put((byte) 0).put(LEAF_TAG).putInt(t.length).put(t).array();
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
            return truncated();
        }

        private byte[] truncated() {
            try {
                sha.digest(digest, 0, digest.length);
            } catch (java.security.DigestException e) {
                throw new IllegalStateException(e);
            }
            return Arrays.copyOf(digest, NODE);
        }

        /** {@code 0x01 || left || right}. */
        byte[] node(byte[] left, byte[] right) {
            System.arraycopy(left, 0, node, 1, NODE);
            System.arraycopy(right, 0, node, 1 + NODE, NODE);
            sha.update(node);
            return truncated();
        }
    }

    private static byte[] signedMessage(long signedAtMillis, int count, byte[] root) {
        return ByteBuffer.allocate(ROOT_TAG.length + 8 + 4 + root.length).put(ROOT_TAG).putLong(signedAtMillis).putInt(count).put(root).array();
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
         * Trees whose signature was checked, by their signature, with the nodes known to be in
         * them: a later record of the tree stops its walk where it meets one, at the same level and
         * position, usually after a node or two, and its signature is not checked again. Bounded
         * by the slots their rows hold (8 bytes each, and a node learned 20 more): about 40 MB at
         * most, the oldest trees dropped first.
         */
        private static final long MAX_SLOTS = 2_000_000;

        private final RecordTrust trust;
        private final Map<String, byte[]> keys = new java.util.HashMap<>();
        private final Duration maxAge;
        private final Hasher hasher = new Hasher();
        private final LinkedHashMap<Sig, Tree> trees = new LinkedHashMap<>(256, 0.75f, true);
        private long slots;
        private Tree last;

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
                return trust.mode() == RecordTrust.Mode.ACCEPT_UNSIGNED ? Optional.empty()
                        : Optional.of("unsigned record (" + RecordTrust.SIGNATURES + "=required)");
            }
            ByteBuffer b = ByteBuffer.wrap(header.value());
            try {
                if (b.get() != VERSION) {
                    return Optional.of("signature header of an unknown version");
                }
                byte[] id = new byte[b.get() & 0xff];
                b.get(id);
                long signedAt = b.getLong();
                byte[] signature = new byte[SIGNATURE_BYTES];
                b.get(signature);
                int index = b.getInt();
                int count = b.getInt();
                if (count < 1 || count > MAX_LEAVES || index < 0 || index >= count) {
                    return Optional.of("signature header with leaf " + index + " of " + count);
                }
                // A partition's records of one batch come one after another: most find the tree of the one before.
                Tree tree = last != null && Arrays.equals(last.signature, signature) ? last : trees.get(new Sig(signature));
                if (tree != null && !tree.describedBy(id, signedAt, count)) {
                    tree = null; // a known signature with other claims: checked in full, and fails
                }
                String keyId = tree != null ? tree.keyId : new String(id, StandardCharsets.US_ASCII);
                byte[] key = keys.get(keyId);
                if (key == null) {
                    return Optional.of("signed with key " + keyId + ", which this consumer does not trust (trusted: "
                            + new java.util.TreeSet<>(trust.trusted().keySet()) + ")");
                }
                if (tooOld(signedAt, nowMillis)) {
                    return Optional.of(old(signedAt));
                }
                byte[][] path = new byte[33][];
                int level = 0;
                int position = index;
                byte[] hash = hasher.leaf(record.topic(), record.key(), record.value());
                for (int size = count; ; size = (size + 1) / 2, position >>= 1, level++) {
                    if (tree != null && tree.knows(level, position, hash)) {
                        last = tree;
                        return Optional.empty();
                    }
                    path[level] = hash;
                    if (size == 1) {
                        break;
                    }
                    if ((position & 1) == 1) {
                        hash = hasher.node(next(b), hash);
                    } else if (position + 1 < size) {
                        hash = hasher.node(hash, next(b));
                    }
                }
                if (b.hasRemaining()) {
                    return Optional.of("signature header with " + b.remaining() + " bytes too many");
                }
                // Of a known tree, the walk met no node of it, not even its root; else the signature decides.
                if (tree != null || !signs(signature, key, signedMessage(signedAt, count, hash))) {
                    return Optional.of("signature does not match the record (key " + keyId
                            + "): its bytes were changed, or it was never signed");
                }
                tree = new Tree(keyId, id, signedAt, count, signature);
                trees.put(new Sig(signature), tree);
                last = tree;
                slots += tree.learn(path, index, count);
                for (var eldest = trees.entrySet().iterator(); slots > MAX_SLOTS && eldest.hasNext(); ) {
                    Tree dropped = eldest.next().getValue();
                    if (dropped != tree) {
                        slots -= dropped.slots;
                        eldest.remove();
                    }
                }
                return Optional.empty();
            } catch (java.nio.BufferUnderflowException e) {
                return Optional.of("signature header is cut short");
            }
        }

        private static boolean signs(byte[] signature, byte[] key, byte[] message) {
            return Ed25519.verify(signature, 0, key, 0, message, 0, message.length);
        }

        private boolean tooOld(long signedAt, long nowMillis) {
            return signedAt < nowMillis - maxAge.toMillis();
        }

        private String old(long signedAt) {
            return "signed at " + java.time.Instant.ofEpochMilli(signedAt) + ", longer ago than the dedup window (" + maxAge
                    + "), so it cannot be told from a replay";
        }

        private static byte[] next(ByteBuffer b) {
            byte[] h = new byte[NODE];
            b.get(h);
            return h;
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

        /** A tree whose signature a trusted key made, and its nodes known so far, by level and position. */
        private static final class Tree {
            final String keyId;
            final byte[] id;
            final long signedAt;
            final int count;
            final byte[] signature;
            final byte[][][] known = new byte[33][][];
            long slots;

            Tree(String keyId, byte[] id, long signedAt, int count, byte[] signature) {
                this.keyId = keyId;
                this.id = id;
                this.signedAt = signedAt;
                this.count = count;
                this.signature = signature;
            }

            boolean describedBy(byte[] otherId, long otherSignedAt, int otherCount) {
                return otherSignedAt == signedAt && otherCount == count && Arrays.equals(otherId, id);
            }

            boolean knows(int level, int position, byte[] hash) {
                byte[][] row = known[level];
                return row != null && row[position] != null && Arrays.equals(row[position], hash);
            }

            /** The hashes of a record's walk, all now known to be in the tree; returns the slots it added. */
            long learn(byte[][] path, int index, int count) {
                long added = 0;
                int position = index;
                for (int level = 0, size = count; path[level] != null; level++, size = (size + 1) / 2, position >>= 1) {
                    if (known[level] == null) {
                        known[level] = new byte[size][];
                        added += size;
                    }
                    if (known[level][position] == null) {
                        known[level][position] = path[level];
                        added += 3;
                    }
                    if (size == 1) {
                        break;
                    }
                }
                slots += added;
                return added;
            }
        }
    }
}
