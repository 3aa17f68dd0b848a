package dev.fencedjobs.chaos;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.zip.GZIPInputStream;
import java.util.zip.GZIPOutputStream;

/**
 * Everything a run left behind, as the checker reads it: the rows of the database, the records of
 * the topic, what the load generator was told was committed, what was forged on purpose, and the
 * faults injected. Times are microseconds since the epoch on the database clock. A history can be
 * saved (gzip JSON) and checked again later, which is how the checker's own tests plant violations.
 */
public final class History {

    /**
     * A row of {@code jobs}; {@code dispatchKey} as inserted (null: the resource is its key);
     * {@code dueAt} in microseconds and {@code priority} in seconds (null in histories from before
     * the dispatch policy).
     */
    public record Job(
            long id,
            String uniqueKey,
            String resource,
            String state,
            Long completedByToken,
            Long completedAt,
            String dispatchKey,
            Long dueAt,
            Integer priority,
            int shard) {

        public Job(long id, String uniqueKey, String resource, String state, Long completedByToken, Long completedAt) {
            this(id, uniqueKey, resource, state, completedByToken, completedAt, null, null, null);
        }

        public Job(
                long id,
                String uniqueKey,
                String resource,
                String state,
                Long completedByToken,
                Long completedAt,
                String dispatchKey,
                Long dueAt,
                Integer priority) {
            this(id, uniqueKey, resource, state, completedByToken, completedAt, dispatchKey, dueAt, priority, 0);
        }

        /** The key that limits and fairness count it by. */
        public String key() {
            return dispatchKey != null ? dispatchKey : resource;
        }

        /** Its rank within its key: the due time moved earlier by the priority's seconds. */
        public long rank() {
            return dueAt - (priority == null ? 0 : priority) * 1_000_000L;
        }
    }

    /** A row of {@code dispatch_limits}, as the run defined it and left it. */
    public record Limit(String dispatchKey, double perSecond, double burst) {}

    /**
     * A row of {@code outbox}. publishedAt: 0 once the relay's position passed the row (histories from
     * before it kept the time), null while unpublished.
     */
    public record OutboxRow(
            long id, long jobId, String resource, long fencingToken, Long publishedAt, String publishError) {}

    /** A row of {@code lease_takeover}. */
    public record Takeover(String role, long fencingToken, String holderId, long acquiredAt) {}

    /** A row of {@code leader_lease}. */
    public record Lease(String role, String holderId, long fencingToken) {}

    /**
     * A committed record of the topic. {@code jobId}, {@code outboxId} and {@code fencingToken} are
     * null when the value is not a valid envelope.
     */
    public record TopicRecord(
            int partition, long offset, String key, Long outboxId, Long jobId, String resource, Long fencingToken) {}

    /** A row of the consumer's {@code ledger}: one applied effect. */
    public record Effect(long id, long jobId, String resource, long fencingToken, long appliedAt) {}

    /** A row of {@code consumer_processed}. */
    public record Processed(long jobId, String resource, long fencingToken, String outcome) {}

    /** A row of {@code consumer_rejected}: a stale record, refused. */
    public record Rejection(
            long id, long jobId, String resource, long fencingToken, long highestToken, int partition, long offset) {}

    /** A row of {@code consumer_dead_letter}. */
    public record DeadLetter(long id, int partition, long offset, Long jobId, String reason) {}

    /** A record the consumer applied although a later outbox row of its resource had been applied before it. */
    public record Late(long jobId, String resource, long outboxId, long highestOutboxId, int partition, long offset) {}

    /** A job id or a token the consumer saw on two different jobs or tenures (kind job_id or token). */
    public record Reused(
            String kind, long jobId, String resource, long fencingToken, String previous, int partition, long offset) {}

    /**
     * A record the runner wrote to the topic itself, to see the consumer handle it.
     *
     * @param kind {@code malformed} (must be dead-lettered), {@code fresh} (must be applied once),
     *     {@code stale} (must be rejected) or {@code duplicate} (a copy of a fresh one: absorbed)
     */
    public record Forged(String kind, int partition, long offset, Long jobId, String resource, Long fencingToken) {}

    /**
     * A row of {@code schedules}: {@code everyMicros} for an interval schedule, {@code cron} and
     * {@code timeZone} for a cron one; times in microseconds.
     */
    public record Schedule(
            String name,
            String cron,
            Long everyMicros,
            String timeZone,
            String misfire,
            long startsAt,
            Long nextFireAt,
            long fired,
            long skipped) {}

    /** A row of {@code schedule_skips}. */
    public record ScheduleSkip(String name, long firstFireAt, long lastFireAt, long occurrences, String reason) {}

    /** The runner paused or resumed a schedule, at this database time. */
    public record SchedulePause(String name, long at, boolean paused) {}

    /** A fault as the runner injected it. */
    public record Fault(long atMillis, String kind, String target, long heldMillis) {}

    /**
     * A pause of {@code key} (dispatch_pauses): its row's {@code paused_at}, and the database's clock
     * in the resume's transaction before it deleted the row, the pause still standing.
     */
    public record KeyPause(String key, long pausedAt, long checkedAt) {}

    public String seed = "";
    /** The unique_key of every job whose INSERT the database acknowledged. */
    public List<String> submitted = new ArrayList<>();

    public List<Job> jobs = new ArrayList<>();
    public List<OutboxRow> outbox = new ArrayList<>();
    public List<Takeover> takeovers = new ArrayList<>();
    public List<Lease> leases = new ArrayList<>();
    public List<TopicRecord> topic = new ArrayList<>();
    public List<Effect> effects = new ArrayList<>();
    public List<Processed> processed = new ArrayList<>();
    public List<Rejection> rejections = new ArrayList<>();
    public List<DeadLetter> deadLetters = new ArrayList<>();
    public List<Late> late = new ArrayList<>();
    public List<Reused> reused = new ArrayList<>();
    public List<Forged> forged = new ArrayList<>();
    /** Each fault's {@code atMillis} counts from the run's start: this, epoch milliseconds. */
    public long startedAtMillis;

    public List<Fault> faults = new ArrayList<>();
    /** The pauses of a key the runner made ({@code pause-key} faults). */
    public List<KeyPause> keyPauses = new ArrayList<>();

    public List<Schedule> schedules = new ArrayList<>();
    public List<Limit> limits = new ArrayList<>();
    /** Keys whose jobs were all committed before any service could complete one: completed in rank order. */
    public List<String> rankOrderedKeys = new ArrayList<>();

    public List<ScheduleSkip> scheduleSkips = new ArrayList<>();
    public List<SchedulePause> schedulePauses = new ArrayList<>();
    /** Services that exited without the runner ending them, with their exit codes. */
    public List<String> crashes = new ArrayList<>();

    /** Faults injected, counted by kind. */
    public Map<String, Integer> faultCounts() {
        Map<String, Integer> counts = new TreeMap<>();
        for (Fault f : faults) {
            counts.merge(f.kind(), 1, Integer::sum);
        }
        return counts;
    }

    private static final ObjectMapper MAPPER = new ObjectMapper().disable(SerializationFeature.FAIL_ON_EMPTY_BEANS);

    public void save(Path file) throws IOException {
        Files.createDirectories(file.toAbsolutePath().getParent());
        try (OutputStream out = new GZIPOutputStream(Files.newOutputStream(file))) {
            MAPPER.writeValue(out, this);
        }
    }

    public static History load(Path file) throws IOException {
        try (InputStream in = Files.newInputStream(file)) {
            return load(in);
        }
    }

    public static History load(InputStream gzipJson) throws IOException {
        try (InputStream in = new GZIPInputStream(gzipJson)) {
            return MAPPER.readValue(in, History.class);
        }
    }
}
