package dev.fencedjobs.db;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Map;

/**
 * The database roles each component connects as, with only the grants it needs. Run as the
 * schema owner after the migrations ({@code fenced-jobs migrate --roles} does both).
 *
 * <ul>
 *   <li>{@code fj_dispatcher}: reads and completes jobs, inserts outbox rows, holds its lease;
 *   <li>{@code fj_relay}: reads, marks and purges outbox rows, holds its lease;
 *   <li>{@code fj_consumer}: its own tables only;
 *   <li>{@code fj_producer}: inserts jobs, nothing else.
 * </ul>
 */
public final class Roles {

    public static final String DISPATCHER = "fj_dispatcher";
    public static final String RELAY = "fj_relay";
    public static final String CONSUMER = "fj_consumer";
    public static final String PRODUCER = "fj_producer";

    /** Grants per role; consumer grants apply only where the consumer's tables exist. */
    private static final Map<String, String> GRANTS = Map.of(
            DISPATCHER, "GRANT SELECT, UPDATE ON jobs TO fj_dispatcher;"
                    + "GRANT SELECT, INSERT ON outbox TO fj_dispatcher;"
                    + "GRANT SELECT, INSERT, UPDATE ON leader_lease TO fj_dispatcher;",
            RELAY, "GRANT SELECT, DELETE ON outbox TO fj_relay;"
                    + "GRANT UPDATE (published_at, publish_error) ON outbox TO fj_relay;"
                    + "GRANT SELECT, INSERT, UPDATE ON leader_lease TO fj_relay;",
            // SELECT on unique_key alone: INSERT ... ON CONFLICT (unique_key) DO NOTHING needs it to
            // find the conflicting row; the producer still cannot read any job.
            PRODUCER, "GRANT INSERT ON jobs TO fj_producer; GRANT SELECT (unique_key) ON jobs TO fj_producer;",
            CONSUMER, "DO $$ BEGIN IF to_regclass('consumer_processed') IS NOT NULL THEN "
                    + "GRANT SELECT, INSERT, UPDATE, DELETE ON consumer_resource_fence, consumer_processed, consumer_rejected, "
                    + "consumer_dead_letter, consumer_late, ledger TO fj_consumer; END IF; END $$;");

    private Roles() {}

    /**
     * Creates each role that is missing (login, with the given password) or sets its password,
     * and grants it its privileges. Roles without a password in {@code passwords} are skipped.
     */
    public static void apply(Connection owner, Map<String, String> passwords) throws SQLException {
        for (Map.Entry<String, String> grant : GRANTS.entrySet()) {
            String role = grant.getKey();
            String password = passwords.get(role);
            if (password == null || password.isEmpty()) {
                continue;
            }
            boolean exists;
            try (PreparedStatement ps = owner.prepareStatement("SELECT 1 FROM pg_roles WHERE rolname = ?")) {
                ps.setString(1, role);
                exists = ps.executeQuery().next();
            }
            try (Statement s = owner.createStatement()) {
                // Role names are the constants above; the password is quoted as a literal.
                s.execute((exists ? "ALTER ROLE " : "CREATE ROLE ") + role + " LOGIN PASSWORD " + literal(password));
                s.execute(grant.getValue());
            }
        }
    }

    static String literal(String value) {
        return "'" + value.replace("'", "''") + "'";
    }
}
