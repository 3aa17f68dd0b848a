package dev.fencedjobs.runtime.internal;

import static dev.fencedjobs.runtime.internal.SignatureTree.NODE;
import static dev.fencedjobs.runtime.internal.SignatureTree.SIGNATURE_BYTES;
import static dev.fencedjobs.runtime.internal.SignatureTree.SIGNED_MESSAGE_BYTES;
import static dev.fencedjobs.runtime.internal.SignatureTree.proofNodes;
import static dev.fencedjobs.runtime.internal.SignatureTree.signedMessage;

import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.internal.SignatureTree.Hasher;
import dev.fencedjobs.runtime.internal.SignatureTree.Nodes;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.bouncycastle.math.ec.rfc8032.Ed25519;

/**
 * Checks records against the trusted keys. One per consumer, used by one thread at a time (the
 * consumer's loop, its patient retries and its replays each hold it only inside a call).
 */
public final class RecordVerifier {

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
    private final Fields fields = new Fields();
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
    public RecordVerifier(RecordTrust trust, Duration maxAge) {
        this.trust = trust;
        this.maxAge = maxAge;
        trust.trusted().forEach((id, key) -> keys.put(id, RecordSignatures.publicKey(key)));
    }

    public RecordTrust trust() {
        return trust;
    }

    /**
     * Why the record cannot be trusted, or empty when it can: signed by a trusted key, or
     * unsigned in {@code accept-unsigned} mode. {@code nowMillis} is when it arrived.
     *
     * <p>The steps: read the header's fields; find the tree of its signature, if an earlier
     * record's check proved it; the key it names must be trusted and the signature young enough;
     * walk from the record's leaf up its proof; the walk must meet a node an earlier record proved,
     * or end at the proved tree's root, or at a root the signature covers; then keep what this
     * record proved.
     */
    public synchronized Optional<String> check(ConsumerRecord<String, byte[]> record, long nowMillis) {
        Header header = record.headers().lastHeader(RecordSignatures.HEADER);
        if (header == null || header.value() == null) {
            return trust.mode() == RecordTrust.Mode.ACCEPT_UNSIGNED
                    ? Optional.empty()
                    : Optional.of("unsigned record (" + RecordTrust.SIGNATURES + "=required)");
        }
        try {
            Fields f = fields;
            String problem = f.read(header.value());
            if (problem != null) {
                return Optional.of(problem);
            }
            Tree tree = provedTree(f);
            String keyId = tree != null ? tree.keyId : f.keyId();
            byte[] key = keys.get(keyId);
            if (key == null) {
                return Optional.of("signed with key " + keyId + ", which this consumer does not trust (trusted: "
                        + new TreeSet<>(trust.trusted().keySet()) + ")");
            }
            if (tooOld(f.signedAt, nowMillis)) {
                return Optional.of(old(f.signedAt));
            }
            Nodes known = tree != null ? tree.nodes : null;
            Walk walk = walk(record, f, known);
            if (!walk.met() && !rootMatches(tree, key, f, walk.level())) {
                return Optional.of("signature does not match the record (key " + keyId
                        + "): its bytes were changed, or it was never signed");
            }
            keep(tree != null ? tree : prove(keyId, f, walk.level()), known, f.index, walk.level());
            return Optional.empty();
        } catch (BufferUnderflowException | IllegalArgumentException e) {
            // IllegalArgumentException: a position past the end (Buffer.position).
            return Optional.of("signature header is cut short");
        }
    }

    /** The tree of the header's signature, if an earlier record proved it and the header claims what it did. */
    private Tree provedTree(Fields f) {
        // A partition's records of one tree come one after another: most find the tree of the one before.
        Tree tree = last != null && last.signs(f.header, f.signatureAt)
                ? last
                : trees.get(new Sig(Arrays.copyOfRange(f.header, f.signatureAt, f.signatureAt + SIGNATURE_BYTES)));
        if (tree != null && !tree.describedBy(f.header, f.idAt, f.idLength, f.signedAt, f.count)) {
            return null; // a known signature with other claims: checked in full, and fails
        }
        return tree;
    }

    /** How far a record's walk went: the level it stopped at, and whether it met a node proved before. */
    private record Walk(int level, boolean met) {}

    /**
     * The walk from the record's leaf towards the root, each node kept in {@link #path}; it stops
     * early at a node of the tree that an earlier record's walk already proved ({@code known}).
     */
    private Walk walk(ConsumerRecord<String, byte[]> record, Fields f, Nodes known) {
        byte[] h = f.header;
        hasher.leaf(record.topic(), record.key(), record.value(), path, 0);
        int level = 0;
        for (int size = f.count, position = f.index, at = f.proofAt; ; size = (size + 1) / 2, position >>= 1, level++) {
            if (known != null && known.has(level, position, path, level * NODE)) {
                return new Walk(level, true);
            }
            if (size == 1) {
                return new Walk(level, false);
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
    }

    /** A walk that met no proved node ended at a root: the proved tree's, if known, else the signature decides. */
    private boolean rootMatches(Tree tree, byte[] key, Fields f, int level) {
        if (tree != null) {
            return Arrays.equals(tree.root, 0, NODE, path, level * NODE, (level + 1) * NODE);
        }
        return Ed25519.verify(
                f.header,
                f.signatureAt,
                key,
                0,
                signedMessage(f.signedAt, f.count, path, level * NODE),
                0,
                SIGNED_MESSAGE_BYTES);
    }

    /** A tree whose signature was checked just now, over the root at {@code level} of the path: remembered. */
    private Tree prove(String keyId, Fields f, int level) {
        Tree tree = new Tree(
                keyId,
                Arrays.copyOfRange(f.header, f.idAt, f.idAt + f.idLength),
                f.signedAt,
                f.count,
                Arrays.copyOfRange(f.header, f.signatureAt, f.signatureAt + SIGNATURE_BYTES),
                Arrays.copyOfRange(path, level * NODE, (level + 1) * NODE));
        trees.put(new Sig(tree.signature), tree);
        return tree;
    }

    /** The nodes the walk of leaf {@code index} proved, up to {@code level}, kept for the tree's later records. */
    private void keep(Tree tree, Nodes known, int index, int level) {
        if (known == null) {
            known = tree.nodes = new Nodes(tree.count);
            withNodes.addLast(tree);
            if (withNodes.size() > MAX_TREES_WITH_NODES) {
                withNodes.removeFirst().nodes = null;
            }
        }
        known.learn(index, level, path);
        last = tree;
    }

    /**
     * The fields of the header being checked, as offsets into its bytes ({@link RecordSignatures}
     * gives its layout). One per verifier, read anew for each record: the verifier is used by one
     * thread at a time.
     */
    private static final class Fields {
        byte[] header;
        int idAt;
        int idLength;
        long signedAt;
        int signatureAt;
        int index;
        int count;
        int proofAt;

        /** Reads {@code h}; why it cannot be trusted as a header, or null when it can be read. */
        String read(byte[] h) {
            header = h;
            ByteBuffer b = ByteBuffer.wrap(h);
            if (b.get() != RecordSignatures.VERSION_BYTE) {
                return "signature header of an unknown version";
            }
            idLength = b.get() & 0xff;
            idAt = b.position();
            b.position(idAt + idLength);
            signedAt = b.getLong();
            signatureAt = b.position();
            b.position(signatureAt + SIGNATURE_BYTES);
            index = b.getInt();
            count = b.getInt();
            if (count < 1 || count > RecordSignatures.MAX_LEAVES || index < 0 || index >= count) {
                return "signature header with leaf " + index + " of " + count;
            }
            proofAt = b.position();
            int proof = proofNodes(index, count) * NODE;
            if (h.length - proofAt < proof) {
                return "signature header is cut short";
            }
            if (h.length - proofAt > proof) {
                return "signature header with " + (h.length - proofAt - proof) + " bytes too many";
            }
            return null;
        }

        String keyId() {
            return new String(header, idAt, idLength, StandardCharsets.US_ASCII);
        }
    }

    private boolean tooOld(long signedAt, long nowMillis) {
        return signedAt < nowMillis - maxAge.toMillis();
    }

    private String old(long signedAt) {
        return "signed at " + Instant.ofEpochMilli(signedAt) + ", longer ago than the dedup window (" + maxAge
                + "), so it cannot be told from a replay";
    }

    /** A signature as a map key: equal by its bytes. */
    private static final class Sig {
        private final byte[] bytes;

        Sig(byte[] bytes) {
            this.bytes = bytes;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Sig s && Arrays.equals(s.bytes, bytes);
        }

        @Override
        public int hashCode() {
            return (bytes[0] & 0xff) << 24 | (bytes[1] & 0xff) << 16 | (bytes[2] & 0xff) << 8 | (bytes[3] & 0xff);
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
