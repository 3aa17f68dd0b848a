package dev.fencedjobs.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.fencedjobs.consumer.FencedConsumer;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.testing.TestDatabase;
import dev.fencedjobs.testing.TestPostgres;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.flywaydb.core.Flyway;
import org.flywaydb.core.api.configuration.FluentConfiguration;
import org.junit.jupiter.api.Test;

/**
 * The schema as it is now is readable in one place: the current body of every function and
 * trigger is in one repeatable migration ({@code R__<table>.sql}), the table in docs/schema.md
 * "What the database refuses" lists every live trigger, and a database that was migrated before
 * the repeatable migrations existed, or before the lease had its own location, upgrades in place
 * to exactly what a new one gets.
 */
class SchemaDefinitionsTest {

    private static final Path ROOT = Path.of("..").toAbsolutePath().normalize();
    private static final List<Path> LOCATIONS = List.of(
            ROOT.resolve("db/src/main/resources/db/lease"),
            ROOT.resolve("db/src/main/resources/db/migration"),
            ROOT.resolve("consumer/src/main/resources/db/consumer"));
    /**
     * The dispatcher's migrations that changed when the lease became a location of its own, as the
     * releases before shipped them (V1, V4, V5 and V10 held the lease's parts, R__leader_lease.sql
     * was in db/migration), and the repeatable migrations that shards (V13) changed to use its
     * columns, as they were before it.
     */
    private static final Path BEFORE_THE_LEASE_LOCATION =
            Path.of("src/test/resources/db/before-the-lease-location").toAbsolutePath();
    /**
     * The last versioned migration of each location when the repeatable ones were made. A later
     * versioned migration that defines a function or trigger of a repeatable one would be undone
     * on new databases (the repeatable one runs after it) and kept on upgraded ones.
     */
    private static final Map<String, Integer> LAST_VERSIONED = Map.of("lease", 1, "migration", 10, "consumer", 7);

    private static final Pattern FUNCTION = Pattern.compile("(?im)^CREATE (?:OR REPLACE )?FUNCTION (\\w+)\\(");
    /** At a line's start, or in the statement a function of the migration runs (jobs_shard_trigger: EXECUTE format('CREATE ...). */
    private static final Pattern TRIGGER =
            Pattern.compile("(?im)^(?:\\s*EXECUTE format\\(')?CREATE (?:OR REPLACE )?TRIGGER (\\w+)");

    private static final Pattern TRIGGER_DEF = Pattern.compile(
            "CREATE (?:CONSTRAINT )?TRIGGER (\\w+) (BEFORE|AFTER|INSTEAD OF) (.+?) ON (?:\\w+\\.)?(\\w+) (?:REFERENCING .+? )?FOR EACH (ROW|STATEMENT) .*");

    @Test
    void everyFunctionAndTriggerIsDefinedInExactlyOneRepeatableMigration() throws Exception {
        Map<String, String> functionFiles = new TreeMap<>();
        Map<String, String> triggerFiles = new TreeMap<>();
        List<String> twice = new ArrayList<>();
        for (Path file : files("R__")) {
            String sql = Files.readString(file);
            collect(FUNCTION.matcher(sql), file, functionFiles, twice);
            collect(TRIGGER.matcher(sql), file, triggerFiles, twice);
        }
        assertThat(twice).as("defined in more than one repeatable migration").isEmpty();
        try (TestDatabase db = TestPostgres.shared().createDatabase("schema-now")) {
            migrateAll(db);
            Snapshot live = Snapshot.of(db);
            assertThat(live.functions.keySet().stream()
                            .map(f -> f.substring(0, f.indexOf('(')))
                            .distinct())
                    .as("every live function has its current body in a repeatable migration")
                    .containsExactlyInAnyOrderElementsOf(functionFiles.keySet());
            assertThat(live.triggers.keySet())
                    .as("every live trigger is created in a repeatable migration")
                    .containsExactlyInAnyOrderElementsOf(triggerFiles.keySet());
        }
        // A versioned migration after them must change a repeatable one instead of redefining.
        List<String> redefined = new ArrayList<>();
        for (Path file : files("V")) {
            String location = file.getParent().getFileName().toString();
            int version = Integer.parseInt(file.getFileName().toString().replaceAll("^V(\\d+)__.*", "$1"));
            if (version > LAST_VERSIONED.get(location)) {
                String sql = Files.readString(file);
                for (Matcher m : List.of(FUNCTION.matcher(sql), TRIGGER.matcher(sql))) {
                    while (m.find()) {
                        if (functionFiles.containsKey(m.group(1)) || triggerFiles.containsKey(m.group(1))) {
                            redefined.add(file.getFileName() + " defines " + m.group(1)
                                    + ": edit its repeatable migration instead");
                        }
                    }
                }
            }
        }
        assertThat(redefined).isEmpty();
    }

    /**
     * Every function (the guards' triggers, what they call, the owner's functions a producer may
     * call) reads the schema's tables and no others: it sets its search path, {@code pg_temp} last,
     * so that no table of the calling login's own stands in for one of the schema's (a temporary
     * table is found before any other unless the path names it; LeastPrivilegeTest makes them).
     */
    @Test
    void everyFunctionSetsItsSearchPathWithTheLoginsTemporaryTablesLast() throws Exception {
        try (TestDatabase db = TestPostgres.shared().createDatabase("schema-paths")) {
            migrateAll(db);
            Map<String, String> settings = new TreeMap<>();
            try (Connection c = db.connect();
                    Statement s = c.createStatement();
                    ResultSet rs = s.executeQuery(
                            "SELECT p.oid::regprocedure::text, p.proconfig::text FROM pg_proc p"
                                    + " WHERE p.pronamespace = current_schema()::regnamespace"
                                    + " AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')")) {
                while (rs.next()) {
                    settings.put(rs.getString(1), String.valueOf(rs.getString(2)));
                }
            }
            assertThat(settings)
                    .as("the functions of the jobs, lease and consumer schemas")
                    .containsKeys(
                            "outbox_written_for_completed_jobs()",
                            "login_owns_schema()",
                            "leader_lease_guard()",
                            "consumer_fence_guard()");
            // The one other setting a function may make: the policy batch plans its statements with
            // sorts allowed whatever its transaction says (R__jobs.sql).
            assertThat(settings)
                    .allSatisfy((function, config) -> assertThat(config)
                            .as(function)
                            .isEqualTo(
                                    function.startsWith("dispatch_batch(bigint,integer,integer,")
                                            ? "{enable_sort=on,\"search_path=pg_catalog, public, pg_temp\"}"
                                            : "{\"search_path=pg_catalog, public, pg_temp\"}"));
        }
    }

    @Test
    void aDatabaseMigratedBeforeTheRepeatableMigrationsUpgradesInPlaceToWhatANewOneGets() throws Exception {
        Path before = dispatcherMigrationsBeforeTheLeaseLocation(false);
        try (TestDatabase old = TestPostgres.shared().createDatabase("schema-old");
                TestDatabase fresh = TestPostgres.shared().createDatabase("schema-fresh")) {
            // The release before the repeatable migrations: versioned migrations up to V10 only.
            oldFlyway(old, "filesystem:" + before, Database.HISTORY_TABLE)
                    .target(String.valueOf(LAST_VERSIONED.get("migration")))
                    .load()
                    .migrate();
            oldFlyway(old, FencedConsumer.MIGRATIONS, FencedConsumer.HISTORY_TABLE)
                    .target(String.valueOf(LAST_VERSIONED.get("consumer")))
                    .load()
                    .migrate();
            Snapshot beforeUpgrade = Snapshot.of(old);
            try (Connection c = old.connect();
                    Statement s = c.createStatement()) {
                s.execute("INSERT INTO jobs (due_at, resource) VALUES (clock_timestamp(), 'kept')");
            }
            migrateAll(old);
            migrateAll(fresh);
            assertUpgradedAsNew(old, fresh);
            // When they came, the repeatable migrations restated the versioned ones' result and changed
            // nothing; later ones may change bodies and add functions, but nothing was lost on the way.
            Snapshot made = Snapshot.of(fresh);
            assertThat(made.functions.keySet())
                    .as("functions: the repeatable migrations vs V10 and the consumer's V7")
                    .containsAll(beforeUpgrade.functions.keySet());
            assertThat(made.triggers.keySet())
                    .as("triggers: the repeatable migrations vs V10 and the consumer's V7")
                    .containsAll(beforeUpgrade.triggers.keySet());
            assertThat(count(old, "SELECT count(*) FROM jobs WHERE resource = 'kept'"))
                    .as("the existing job")
                    .isEqualTo(1);
        }
    }

    @Test
    void aDatabaseMigratedBeforeTheLeaseHadItsOwnLocationUpgradesInPlaceKeepingItsTokens() throws Exception {
        Path before = dispatcherMigrationsBeforeTheLeaseLocation(true);
        try (TestDatabase old = TestPostgres.shared().createDatabase("schema-lease-old");
                TestDatabase fresh = TestPostgres.shared().createDatabase("schema-lease-fresh")) {
            // The last release before: up to V11.
            oldFlyway(old, "filesystem:" + before, Database.HISTORY_TABLE)
                    .target("11")
                    .load()
                    .migrate();
            oldFlyway(old, FencedConsumer.MIGRATIONS, FencedConsumer.HISTORY_TABLE)
                    .load()
                    .migrate();
            String dispatcherLogin = "old_dispatcher_" + Long.toHexString(System.nanoTime());
            try (Connection c = old.connect();
                    Statement s = c.createStatement()) {
                s.execute(
                        "INSERT INTO leader_lease VALUES ('scheduler', 'old-holder', 41, clock_timestamp() + interval '1 hour')");
                s.execute("UPDATE leader_lease SET holder_id = 'next-holder', fencing_token = 42");
                // A dispatcher's login with the grants of that release, which named the columns it wrote.
                s.execute("CREATE ROLE " + dispatcherLogin);
                s.execute("GRANT INSERT (due_at, resource, payload, unique_key, submitted_by) ON jobs TO "
                        + dispatcherLogin);
                s.execute(
                        "GRANT INSERT (job_id, resource, fencing_token, payload, due_at, completed_at, job_created_at) ON outbox TO "
                                + dispatcherLogin);
            }
            migrateAll(old);
            // V12: whoever wrote jobs and outbox rows may write their trace context, without `migrate --roles`.
            assertThat(count(
                            old,
                            "SELECT count(*) FROM (VALUES ('jobs'), ('outbox')) t(name), (VALUES ('traceparent'), ('tracestate')) c(col) "
                                    + "WHERE has_column_privilege('" + dispatcherLogin + "', t.name, c.col, 'INSERT')"))
                    .as("trace columns granted")
                    .isEqualTo(4);
            migrateAll(fresh);
            assertUpgradedAsNew(old, fresh);
            assertThat(
                            count(
                                    old,
                                    "SELECT fencing_token FROM leader_lease WHERE role = 'scheduler' AND holder_id = 'next-holder'"))
                    .as("the lease and its token")
                    .isEqualTo(42);
            assertThat(count(old, "SELECT count(*) FROM lease_takeover WHERE role = 'scheduler'"))
                    .as("the takeover history")
                    .isEqualTo(2);
            assertThat(count(
                            old, "SELECT count(*) FROM lease_schema_history WHERE type = 'BASELINE' AND version = '1'"))
                    .as("the lease's location baselined after its tables")
                    .isEqualTo(1);
            assertThat(count(old, "SELECT count(*) FROM lease_schema_history WHERE script = 'V1__lease_tables.sql'"))
                    .as("the tables were not made again")
                    .isZero();
            assertThat(
                            count(
                                    fresh,
                                    "SELECT count(*) FROM lease_schema_history WHERE script = 'V1__lease_tables.sql' AND success"))
                    .as("a new database gets them from the lease's location")
                    .isEqualTo(1);
            assertThat(Flyway.configure()
                            .dataSource(old.dataSource())
                            .placeholders(Map.of(Database.INITIAL_SHARDS, "1"))
                            .locations(Database.MIGRATIONS)
                            .table(Database.HISTORY_TABLE)
                            .load()
                            .validateWithResult()
                            .validationSuccessful)
                    .as("the dispatcher's history, realigned, validates")
                    .isTrue();
            // Upgraded once, the database is as any other: migrating again changes nothing.
            Snapshot upgraded = Snapshot.of(old);
            migrateAll(old);
            assertThat(Snapshot.of(old)).isEqualTo(upgraded);
        }
    }

    @Test
    void aDispatcherHistoryThatDiffersInAnythingElseIsNotRealignedButRefused() throws Exception {
        Path before = dispatcherMigrationsBeforeTheLeaseLocation(true);
        try (TestDatabase old = TestPostgres.shared().createDatabase("schema-lease-tampered")) {
            oldFlyway(old, "filesystem:" + before, Database.HISTORY_TABLE)
                    .load()
                    .migrate();
            String v1 = "SELECT checksum FROM flyway_schema_history WHERE version = '1'";
            int checksum = count(old, v1);
            try (Connection c = old.connect();
                    Statement s = c.createStatement()) {
                s.execute("UPDATE flyway_schema_history SET checksum = checksum + 1 WHERE version = '2'");
            }
            assertThatThrownBy(() -> Database.migrate(old.dataSource()))
                    .hasMessageContaining("checksum mismatch")
                    .hasMessageContaining("Migration checksum mismatch for migration version 2");
            assertThat(count(old, v1)).as("V1's old checksum, left alone").isEqualTo(checksum);
        }
    }

    private static FluentConfiguration oldFlyway(TestDatabase db, String location, String historyTable) {
        return Flyway.configure()
                .dataSource(db.dataSource())
                .placeholders(Map.of(Database.INITIAL_SHARDS, "1"))
                .locations(location)
                .table(historyTable)
                .baselineOnMigrate(true)
                .baselineVersion("0");
    }

    /**
     * The dispatcher's migrations as the last release before the lease's own location shipped
     * them: today's files, with the ones that changed as they were then. Without repeatables, as
     * the release before the repeatable migrations had them (up to V10).
     */
    /** Repeatable migrations that came later than those releases, and need their versioned ones. */
    private static final List<String> AFTER_THOSE_RELEASES = List.of("R__shards.sql", "R__dispatch_pauses.sql");

    private static Path dispatcherMigrationsBeforeTheLeaseLocation(boolean withRepeatables) throws IOException {
        Path dir = Files.createTempDirectory("migrations-before-the-lease-location");
        dir.toFile().deleteOnExit();
        try (Stream<Path> now = Files.list(LOCATIONS.get(1));
                Stream<Path> then = Files.list(BEFORE_THE_LEASE_LOCATION)) {
            for (Path file : Stream.concat(
                            now.filter(f -> !Files.exists(BEFORE_THE_LEASE_LOCATION.resolve(f.getFileName()))), then)
                    .toList()) {
                String name = file.getFileName().toString();
                if ((withRepeatables || !name.startsWith("R__")) && !AFTER_THOSE_RELEASES.contains(name)) {
                    Files.copy(file, dir.resolve(file.getFileName()));
                    dir.resolve(file.getFileName()).toFile().deleteOnExit();
                }
            }
        }
        return dir;
    }

    private static void assertUpgradedAsNew(TestDatabase old, TestDatabase fresh) throws SQLException {
        Snapshot upgraded = Snapshot.of(old);
        Snapshot made = Snapshot.of(fresh);
        assertThat(upgraded.functions).as("functions: upgraded in place vs new").isEqualTo(made.functions);
        assertThat(upgraded.triggers).as("triggers: upgraded in place vs new").isEqualTo(made.triggers);
        assertThat(upgraded.columns)
                .as("tables and columns: upgraded in place vs new")
                .isEqualTo(made.columns);
    }

    private static int count(TestDatabase db, String sql) throws SQLException {
        try (Connection c = db.connect();
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(sql)) {
            rs.next();
            return rs.getInt(1);
        }
    }

    @Test
    void theTableOfGuardsInTheDocsListsEveryLiveTrigger() throws Exception {
        Map<String, String> documented = new TreeMap<>();
        boolean inTable = false;
        for (String line : Files.readAllLines(ROOT.resolve("docs/schema.md"))) {
            if (line.startsWith("### What the database refuses")) {
                inTable = true;
            } else if (inTable && line.startsWith("#")) {
                break;
            } else if (inTable && line.startsWith("| `")) {
                String[] cells = line.split("\\|");
                // | `trigger` | `table` | fires | keeps | defined in |
                documented.put(strip(cells[1]), strip(cells[2]) + " | " + strip(cells[3]) + " | " + strip(cells[5]));
            }
        }
        assertThat(documented)
                .as("rows of docs/schema.md \"What the database refuses\"")
                .isNotEmpty();
        Map<String, String> definedIn = new TreeMap<>();
        for (Path file : files("R__")) {
            Matcher m = TRIGGER.matcher(Files.readString(file));
            while (m.find()) {
                definedIn.put(m.group(1), file.getFileName().toString());
            }
        }
        try (TestDatabase db = TestPostgres.shared().createDatabase("schema-docs")) {
            migrateAll(db);
            Map<String, String> live = new TreeMap<>();
            Snapshot.of(db).triggers.forEach((name, def) -> {
                Matcher m = TRIGGER_DEF.matcher(def);
                assertThat(m.matches()).as(def).isTrue();
                live.put(
                        name,
                        m.group(4) + " | " + m.group(2) + " " + m.group(3) + ", each "
                                + m.group(5).toLowerCase(Locale.ROOT) + " | " + definedIn.get(name));
            });
            assertThat(documented)
                    .as("table, when it fires and file of each trigger: docs vs the live database")
                    .isEqualTo(live);
        }
    }

    private static String strip(String cell) {
        return cell.trim().replace("`", "");
    }

    private static void collect(Matcher m, Path file, Map<String, String> into, List<String> twice) {
        while (m.find()) {
            String previous = into.put(m.group(1), file.getFileName().toString());
            if (previous != null && !previous.equals(file.getFileName().toString())) {
                twice.add(m.group(1) + " in " + previous + " and " + file.getFileName());
            }
        }
    }

    private static List<Path> files(String prefix) throws IOException {
        List<Path> files = new ArrayList<>();
        for (Path location : LOCATIONS) {
            try (Stream<Path> list = Files.list(location)) {
                list.filter(f -> f.getFileName().toString().startsWith(prefix)
                                && f.toString().endsWith(".sql"))
                        .sorted()
                        .forEach(files::add);
            }
        }
        return files;
    }

    /** The dispatcher's (which migrates the lease's first) and the consumer's. */
    private static String[][] locations() {
        return new String[][] {
            {Database.MIGRATIONS, Database.HISTORY_TABLE}, {FencedConsumer.MIGRATIONS, FencedConsumer.HISTORY_TABLE}
        };
    }

    private static void migrateAll(TestDatabase db) {
        for (String[] location : locations()) {
            Database.migrate(db.dataSource(), location[0], location[1], 0);
        }
    }

    /**
     * Every function (with its definition, owner and rights), trigger (with its definition) and
     * column (with its type, nullability and default) of the schema, the history tables left out.
     */
    private record Snapshot(Map<String, String> functions, Map<String, String> triggers, Map<String, String> columns) {

        static Snapshot of(TestDatabase db) throws SQLException {
            Map<String, String> functions = new TreeMap<>();
            Map<String, String> triggers = new TreeMap<>();
            Map<String, String> columns = new TreeMap<>();
            try (Connection c = db.connect();
                    Statement s = c.createStatement()) {
                try (ResultSet rs = s.executeQuery(
                        "SELECT table_name || '.' || column_name, "
                                + "data_type || coalesce('(' || character_maximum_length || ')', '') || ' ' || is_nullable || ' ' || coalesce(column_default, '-') "
                                + "FROM information_schema.columns WHERE table_schema = current_schema() AND table_name NOT LIKE '%schema_history'")) {
                    while (rs.next()) {
                        columns.put(rs.getString(1), rs.getString(2));
                    }
                }
                try (ResultSet rs = s.executeQuery(
                        "SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')', "
                                + "pg_get_functiondef(p.oid) || ' owner ' || pg_get_userbyid(p.proowner) || ' acl ' || coalesce(p.proacl::text, '-') "
                                + "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                                + "WHERE n.nspname = current_schema() AND p.prokind = 'f' "
                                + "AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')")) {
                    while (rs.next()) {
                        functions.put(rs.getString(1), rs.getString(2));
                    }
                }
                try (ResultSet rs =
                        s.executeQuery("SELECT t.tgname, pg_get_triggerdef(t.oid) || ' enabled ' || t.tgenabled::text "
                                + "FROM pg_trigger t JOIN pg_class r ON r.oid = t.tgrelid JOIN pg_namespace n ON n.oid = r.relnamespace "
                                + "WHERE NOT t.tgisinternal AND n.nspname = current_schema()")) {
                    while (rs.next()) {
                        triggers.put(rs.getString(1), rs.getString(2).replaceAll(" enabled O$", ""));
                    }
                }
            }
            return new Snapshot(functions, triggers, columns);
        }
    }
}
