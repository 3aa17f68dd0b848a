package dev.fencedjobs.runtime.internal;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.DigestException;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The Merkle tree of a signed batch ({@link RecordSignatures} says why and how), as the relay that
 * signs and the consumer that checks both compute it: leaves and nodes of {@value #NODE} bytes, the
 * message the signature covers, and which levels a proof has a node of.
 */
final class SignatureTree {

    static final int SIGNATURE_BYTES = 64;
    /** Bytes of a leaf or node: the first 160 bits of its SHA-256. */
    static final int NODE = 20;

    static final byte[] LEAF_TAG = "fenced-jobs record v1".getBytes(StandardCharsets.US_ASCII);
    static final byte[] ROOT_TAG = "fenced-jobs batch v1".getBytes(StandardCharsets.US_ASCII);
    /** Bytes of the message a signature covers: {@link #signedMessage}. */
    static final int SIGNED_MESSAGE_BYTES = ROOT_TAG.length + 8 + 4 + NODE;

    private SignatureTree() {}

    /** The tree's levels, leaves first, root last, {@value #NODE} bytes a node; a level's odd last node moves up as it is. */
    static List<byte[]> levels(Hasher hasher, byte[] leaves) {
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
    static final class Hasher {
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

    /** What the signature covers: a domain tag, the signing time, the number of leaves and the root (at {@code at}). */
    static byte[] signedMessage(long signedAtMillis, int count, byte[] root, int at) {
        return ByteBuffer.allocate(SIGNED_MESSAGE_BYTES)
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
     * The nodes of one tree that records' walks proved, by level and position, so that a later
     * record of it stops where its walk meets one, usually after a node or two: about 40 bytes a
     * leaf, kept for the last few trees only.
     */
    static final class Nodes {
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

    /** The nodes of the proof of leaf {@code index} of {@code count}: one a level where the node has a sibling. */
    static int proofNodes(int index, int count) {
        int nodes = 0;
        for (int size = count, position = index; size > 1; size = (size + 1) / 2, position >>= 1) {
            if ((position & 1) == 1 || position + 1 < size) {
                nodes++;
            }
        }
        return nodes;
    }
}
