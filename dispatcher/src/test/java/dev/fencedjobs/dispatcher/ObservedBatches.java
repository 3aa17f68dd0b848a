package dev.fencedjobs.dispatcher;

import dev.fencedjobs.lease.Grant;
import java.time.Duration;
import java.util.function.Consumer;

/** A dispatcher's {@link JobBatches} that tells a test where each batch starts, then runs it. */
final class ObservedBatches implements JobBatches {

    private final JobBatches delegate;
    private final Consumer<Position> beforeBatch;

    /** @param beforeBatch called before each batch with where it starts ({@code null}: from the start) */
    ObservedBatches(JobBatches delegate, Consumer<Position> beforeBatch) {
        this.delegate = delegate;
        this.beforeBatch = beforeBatch;
    }

    @Override
    public BatchResult completeDue(Grant grant, int limit, Position after, String startKey) {
        beforeBatch.accept(after);
        return delegate.completeDue(grant, limit, after, startKey);
    }

    @Override
    public int purgeCompleted(Duration retention, int limit) {
        return delegate.purgeCompleted(retention, limit);
    }

    @Override
    public NextDue nextDue(Position after) {
        return delegate.nextDue(after);
    }
}
