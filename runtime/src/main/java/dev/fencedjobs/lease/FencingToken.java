package dev.fencedjobs.lease;

/**
 * A fencing token: what a lease grants its holder, what the holder stamps on every protected write
 * and on every outbox row, and what the consumer fences each resource by. Greater is newer: the
 * lease hands out one more on every takeover, and a promoted standby starts a new epoch above
 * every token of the timeline before it ({@code fencing_epoch_base()} in {@code
 * R__leader_lease.sql}).
 *
 * <p>A value of its own type so that it cannot be passed where an outbox id or a job id goes. In
 * the tables and on the wire it is the {@code bigint} {@link #value()}, always positive: the
 * lease's first token is 1. Where there is no token (no lease held, a resource the consumer never
 * saw) the code says so with {@code null} or {@code Optional}, never with a number.
 *
 * @param value the token as the database stores it, at least 1
 */
public record FencingToken(long value) implements Comparable<FencingToken> {

    private static final long COUNTER_BITS = 32;

    public FencingToken {
        if (value < 1) {
            throw new IllegalArgumentException("a fencing token is at least 1, got " + value);
        }
    }

    public static FencingToken of(long value) {
        return new FencingToken(value);
    }

    /** The token of the next takeover. */
    public FencingToken next() {
        return new FencingToken(Math.addExact(value, 1));
    }

    /** Newer than {@code other}: issued by a later takeover or in a later epoch. */
    public boolean isAfter(FencingToken other) {
        return value > other.value;
    }

    /** Older than {@code other}. */
    public boolean isBefore(FencingToken other) {
        return value < other.value;
    }

    /** The epoch: the database timeline the token was issued on, less one (0 on a database that never failed over). */
    public long epoch() {
        return value >>> COUNTER_BITS;
    }

    /**
     * The token's low 32 bits as a signed int: the second key of its holder's sign-of-life
     * advisory lock ({@link Lease#signOfLifeKey}), as {@code (value & 4294967295)::bit(32)::int}
     * gives them in SQL.
     */
    public int lockKey() {
        return (int) value;
    }

    @Override
    public int compareTo(FencingToken other) {
        return Long.compare(value, other.value);
    }

    /** The number, as logs, metrics and the wire show it. */
    @Override
    public String toString() {
        return Long.toString(value);
    }
}
