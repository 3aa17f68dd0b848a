package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.internal.DispatchOverview;
import dev.fencedjobs.lease.Grant;
import java.time.Duration;

/** {@link JobBatches} that hands every call to another: a test overrides only what it watches or holds up. */
abstract class ForwardingBatches implements JobBatches {

    protected final JobBatches delegate;

    ForwardingBatches(JobBatches delegate) {
        this.delegate = delegate;
    }

    @Override
    public BatchResult completeDue(Grant grant, int limit, Position after, String startKey) {
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

    @Override
    public void warmUp() {
        delegate.warmUp();
    }

    @Override
    public DispatchOverview.Overview overview() {
        return delegate.overview();
    }

    @Override
    public long heldJobs() {
        return delegate.heldJobs();
    }

    @Override
    public Backlog backlog() {
        return delegate.backlog();
    }
}
