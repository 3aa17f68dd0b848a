package dev.fencedjobs.runtime.internal;

import java.sql.SQLException;

/** One-line descriptions of faults for WARN logs: the root cause, without the SQL text. */
public final class Faults {

    private Faults() {}

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
        String state = root instanceof SQLException sql && sql.getSQLState() != null
                ? " [SQLSTATE " + sql.getSQLState() + "]"
                : "";
        return root.getClass().getSimpleName() + ": " + message + state;
    }
}
