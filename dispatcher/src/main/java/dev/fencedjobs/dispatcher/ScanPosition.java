package dev.fencedjobs.dispatcher;

import dev.fencedjobs.lease.FencingToken;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * Where the plain path's next batch starts, and what the {@code jobs_due} notifications since the
 * last batch say about it.
 *
 * <p>A completed job's entry stays in {@code jobs_pending_due} until VACUUM removes it, at the left
 * of the index where a scan for the earliest due job begins; read from the start, every batch and
 * next-due read would step over all of them (5 ms each after two minutes at 2,000 jobs/s without a
 * vacuum, measured). So batches and next-due reads start after the last job this tenure completed,
 * a {@link JobBatches.Position}. A job can only be pending before it if it came after the read:
 * inserted or moved earlier (both notify {@code jobs_due} on commit, and a notification at or
 * before the position sends the next batch back to the start, unless the batches since the last
 * read from the start had seen its transaction: a {@link ScanChain}), or locked by another
 * transaction when its turn came (SKIP LOCKED). To find those and anything a lost notification hid,
 * a batch reads from the start at least every {@value #FROM_START_EVERY_MS} ms while the position
 * is in use, and always after a new grant, a failure, or the LISTEN connection coming back.
 *
 * <p>Notifications arrive on the LISTEN thread ({@link #notified}, {@link #lost}); everything else
 * is the dispatch loop's thread's own.
 */
final class ScanPosition {

    /** No pending job known: an idle leader sleeps until a notification. */
    static final long NOTHING = Long.MAX_VALUE;
    /** Forces a batch: set after the LISTEN connection (re)connects, when notifications may be lost. */
    static final long CATCH_UP = Long.MIN_VALUE;

    static final long FROM_START_EVERY_MS = 1000;
    static final int MAX_QUEUED = 10_000;

    private final AtomicLong earliestNotified = new AtomicLong(NOTHING);
    /** The notifications since the last batch began, to check against the position and the chain; at most {@value #MAX_QUEUED}. */
    private final ConcurrentLinkedQueue<Notified> sinceBatch = new ConcurrentLinkedQueue<>();

    private final AtomicInteger queued = new AtomicInteger();
    /** Set by a notification that could not be checked (unparseable, or too many queued) or a LISTEN reconnect: the next batch reads from the start. */
    private final AtomicBoolean fromStartNext = new AtomicBoolean();
    /** The batches since the last one from the start. */
    private final ScanChain chain = new ScanChain();
    /** Where the next batch starts (null: from the start), under which token, and when a batch last read from the start. */
    private JobBatches.Position position;

    private FencingToken positionToken;
    private long fromStartAtNanos;

    /** A {@code jobs_due} notification's payload; false when it could not be read (the next batch reads from the start). */
    boolean notified(String payload) {
        Notified n = Notified.parse(payload);
        if (n == null) {
            lost();
            return false;
        }
        earliestNotified.accumulateAndGet(n.dueMillis(), Math::min);
        if (queued.incrementAndGet() <= MAX_QUEUED) {
            sinceBatch.add(n);
        } else {
            queued.decrementAndGet();
            fromStartNext.set(true);
        }
        return true;
    }

    /** Notifications may have been lost: the next batch runs at once and reads from the start. */
    void lost() {
        earliestNotified.set(CATCH_UP);
        fromStartNext.set(true);
    }

    /** The earliest due time notified since the last call ({@link #NOTHING} for none), and forgets it. */
    long takeEarliestNotified() {
        return earliestNotified.getAndSet(NOTHING);
    }

    /**
     * Where this batch starts: after the position, unless it belongs to another grant, a
     * notification since the last batch named a due time at or before it in a transaction the
     * {@link ScanChain} did not see (or could not be checked), or the last read from the start was
     * {@value #FROM_START_EVERY_MS} ms or more ago; then from the start ({@code null}), which begins
     * a new chain. {@code sentBack} is told why a position was given up.
     */
    JobBatches.Position startFor(FencingToken token, long nowNanos, Consumer<String> sentBack) {
        boolean catchUp = fromStartNext.getAndSet(false);
        boolean back = false;
        for (Notified n; (n = sinceBatch.poll()) != null; ) {
            queued.decrementAndGet();
            if (position != null
                    && n.dueMillis() <= position.dueAt().toInstant().toEpochMilli()
                    && !chain.saw(n.dueMillis(), n.xid())) {
                back = true;
            }
        }
        if (position != null) {
            String why = !token.equals(positionToken)
                    ? "new grant"
                    : catchUp
                            ? "catch-up"
                            : back
                                    ? "notification"
                                    : nowNanos - fromStartAtNanos >= TimeUnit.MILLISECONDS.toNanos(FROM_START_EVERY_MS)
                                            ? "every second"
                                            : null;
            if (why != null) {
                position = null;
                sentBack.accept(why);
            }
        }
        if (position == null) {
            chain.restart();
        }
        return position;
    }

    /**
     * A batch that started at {@code startedNanos} from {@code after} ran under {@code token} and
     * completed jobs up to {@code last} (null: none), having seen {@code seen}.
     */
    void ran(
            JobBatches.Position after,
            long startedNanos,
            FencingToken token,
            JobBatches.Position last,
            DbSnapshot seen) {
        if (after == null) {
            fromStartAtNanos = startedNanos;
        }
        if (last != null && (position == null || last.isAfter(position))) {
            position = last;
            positionToken = token;
            chain.ran(last, seen);
        }
    }

    /** The next batch reads from the start: after a failure, or on the policy path, which reads no position. */
    void forget() {
        position = null;
    }

    JobBatches.Position current() {
        return position;
    }

    /** Nanoseconds from {@code nowNanos} until the next batch must read from the start; {@link Long#MAX_VALUE} while no position is in use. */
    long untilFromStart(long nowNanos) {
        return position == null
                ? Long.MAX_VALUE
                : fromStartAtNanos + TimeUnit.MILLISECONDS.toNanos(FROM_START_EVERY_MS) - nowNanos;
    }

    /** A {@code jobs_due} notification: the earliest due time it names (epoch ms) and its transaction, -1 when the payload names none. */
    record Notified(long dueMillis, long xid) {

        /** {@code "<due ms>"} (migrations before V8) or {@code "<due ms> <xid8>"}; {@code null} when neither. */
        static Notified parse(String payload) {
            try {
                int space = payload.indexOf(' ');
                return space < 0
                        ? new Notified(Long.parseLong(payload), -1)
                        : new Notified(
                                Long.parseLong(payload.substring(0, space)),
                                Long.parseLong(payload.substring(space + 1)));
            } catch (NumberFormatException | NullPointerException e) {
                return null;
            }
        }
    }
}
