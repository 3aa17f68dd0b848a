package dev.fencedjobs.dispatcher;

import java.util.Arrays;

/**
 * A PostgreSQL snapshot as {@code pg_current_snapshot()} prints it, {@code xmin:xmax:xip,…}
 * (64-bit transaction ids): which transactions had committed, as far as a statement that ran
 * with it could see. {@link #sees} is {@code pg_visible_in_snapshot} for a committed transaction.
 */
final class DbSnapshot {

    private final long xmin;
    private final long xmax;
    /** Sorted. */
    private final long[] inProgress;

    DbSnapshot(long xmin, long xmax, long[] inProgress) {
        this.xmin = xmin;
        this.xmax = xmax;
        this.inProgress = inProgress.clone();
        Arrays.sort(this.inProgress);
    }

    static DbSnapshot parse(String text) {
        String[] parts = text.split(":", -1);
        if (parts.length != 3) {
            throw new IllegalArgumentException("not a snapshot: " + text);
        }
        long[] xip = parts[2].isEmpty()
                ? new long[0]
                : Arrays.stream(parts[2].split(",")).mapToLong(Long::parseLong).toArray();
        return new DbSnapshot(Long.parseLong(parts[0]), Long.parseLong(parts[1]), xip);
    }

    /** Whether a transaction that committed had done so for this snapshot. */
    boolean sees(long xid) {
        return xid < xmin || (xid < xmax && Arrays.binarySearch(inProgress, xid) < 0);
    }

    @Override
    public String toString() {
        StringBuilder s =
                new StringBuilder().append(xmin).append(':').append(xmax).append(':');
        for (int i = 0; i < inProgress.length; i++) {
            s.append(i == 0 ? "" : ",").append(inProgress[i]);
        }
        return s.toString();
    }
}
