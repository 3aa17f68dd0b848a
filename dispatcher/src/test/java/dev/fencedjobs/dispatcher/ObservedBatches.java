package dev.fencedjobs.dispatcher;

import dev.fencedjobs.lease.Grant;
import java.util.function.Consumer;

/** A dispatcher's {@link JobBatches} that tells a test where each batch starts, then runs it. */
final class ObservedBatches extends ForwardingBatches {

    private final Consumer<Position> beforeBatch;

    /** @param beforeBatch called before each batch with where it starts ({@code null}: from the start) */
    ObservedBatches(JobBatches delegate, Consumer<Position> beforeBatch) {
        super(delegate);
        this.beforeBatch = beforeBatch;
    }

    @Override
    public BatchResult completeDue(Grant grant, int limit, Position after, String startKey) {
        beforeBatch.accept(after);
        return super.completeDue(grant, limit, after, startKey);
    }
}
