package dev.fencedjobs.runtime;

import java.sql.SQLException;

/** One-line descriptions of faults for WARN logs: the root cause, without the SQL text. */
public final class Faults {

    private Faults() {}

    /**
     * True when Kafka refused who we are or what we may do (SASL or TLS authentication, ACLs): a
     * setting to fix, not a fault to wait out, so it is logged once at ERROR with a hint.
     */
    public static boolean kafkaRefusedAccess(Throwable fault) {
        for (Throwable t = fault; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (t instanceof org.apache.kafka.common.errors.AuthenticationException
                    || t instanceof org.apache.kafka.common.errors.AuthorizationException) {
                return true;
            }
        }
        return false;
    }

    /** What to check when {@link #kafkaRefusedAccess} is true. */
    public static final String KAFKA_ACCESS_HINT = "check KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_* and "
            + "KAFKA_CLIENT_PROPERTIES, and the principal's ACLs";

    public static String describe(Throwable fault) {
        Throwable root = fault;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        String message = String.valueOf(root.getMessage());
        int newline = message.indexOf('\n');
        if (newline >= 0) {
            message = message.substring(0, newline);
        }
        String state = root instanceof SQLException sql && sql.getSQLState() != null ? " [SQLSTATE " + sql.getSQLState() + "]" : "";
        return root.getClass().getSimpleName() + ": " + message + state;
    }
}
