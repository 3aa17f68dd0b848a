package dev.fencedjobs.consumer;

/** What one batch did; {@code unauthenticated} records are among the {@code deadLettered}. */
record Counts(
        int applied,
        int duplicates,
        int rejected,
        int deadLettered,
        int late,
        int reused,
        int waiting,
        int unauthenticated) {

    static final Counts NONE = new Counts(0, 0, 0, 0, 0, 0, 0, 0);

    Counts(int applied, int duplicates, int rejected, int deadLettered, int late, int reused, int waiting) {
        this(applied, duplicates, rejected, deadLettered, late, reused, waiting, 0);
    }

    Counts(int applied, int duplicates, int rejected, int deadLettered, int late, int reused) {
        this(applied, duplicates, rejected, deadLettered, late, reused, 0);
    }

    Counts plus(Counts o) {
        return new Counts(
                applied + o.applied,
                duplicates + o.duplicates,
                rejected + o.rejected,
                deadLettered + o.deadLettered,
                late + o.late,
                reused + o.reused,
                waiting + o.waiting,
                unauthenticated + o.unauthenticated);
    }
}
