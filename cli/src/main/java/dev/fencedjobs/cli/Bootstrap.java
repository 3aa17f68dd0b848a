package dev.fencedjobs.cli;

import dev.fencedjobs.consumer.FencedConsumer;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.db.internal.Roles;
import dev.fencedjobs.db.internal.Shards;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.Map;

/**
 * Makes a database ready for the services to log in without owning it: the jobs' schema and the
 * consumer's migrated, and the roles they run as ({@link Roles}) made with their passwords. What
 * {@code fenced-jobs migrate --roles} does, and what the chaos suite, the benchmarks and {@code
 * run-local} do before they start services as those roles.
 */
public final class Bootstrap {

    private Bootstrap() {}

    /** The same password for each of the four roles. */
    public static Map<String, String> everyRole(String password) {
        return Map.of(
                Roles.DISPATCHER, password, Roles.RELAY, password, Roles.CONSUMER, password, Roles.PRODUCER, password);
    }

    /** One database, as its owner: both schemas, then the roles with these passwords. */
    public static void all(DatabaseConfig owner, Map<String, String> passwords, int connectRetries)
            throws SQLException {
        migrate(owner, owner, connectRetries);
        roles(owner, passwords);
    }

    /** The jobs' schema on {@code jobs}, the consumer's on {@code consumer}: the same database, or the consumer's own. */
    public static void migrate(DatabaseConfig jobs, DatabaseConfig consumer, int connectRetries) {
        Database.migrate(jobs, Database.MIGRATIONS, Database.HISTORY_TABLE, connectRetries, Shards.DEFAULT_COUNT);
        Database.migrate(consumer, FencedConsumer.MIGRATIONS, FencedConsumer.HISTORY_TABLE, connectRetries);
    }

    /** Makes or updates the roles with these passwords on {@code database}, logged in as its user (one with CREATEROLE). */
    public static void roles(DatabaseConfig database, Map<String, String> passwords) throws SQLException {
        try (Connection c = DriverManager.getConnection(database.url(), database.user(), database.password())) {
            Roles.apply(c, passwords);
        }
    }
}
