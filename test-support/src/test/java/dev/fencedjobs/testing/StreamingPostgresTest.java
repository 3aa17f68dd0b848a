package dev.fencedjobs.testing;

import static org.assertj.core.api.Assertions.assertThat;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import org.junit.jupiter.api.Test;

/** The pair fails over as an HA manager would, and a multi-host URL follows the primary. */
class StreamingPostgresTest {

    private static long count(String url) throws SQLException {
        try (Connection c = DriverManager.getConnection(url, "postgres", "");
                Statement s = c.createStatement();
                ResultSet r = s.executeQuery("SELECT count(*) FROM t")) {
            r.next();
            return r.getLong(1);
        }
    }

    private static String timeline(String url) throws SQLException {
        try (Connection c = DriverManager.getConnection(url, "postgres", "");
                Statement s = c.createStatement();
                ResultSet r = s.executeQuery("SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)")) {
            r.next();
            return r.getString(1);
        }
    }

    @Test
    void aSynchronousPairLosesNothingAcknowledgedOverTwoFailovers() throws Exception {
        try (StreamingPostgres pg = new StreamingPostgres(StreamingPostgres.Replication.SYNCHRONOUS)) {
            String url = pg.url("postgres");
            pg.executeOnPrimary("postgres", "CREATE TABLE t (n int)");
            pg.executeOnPrimary("postgres", "INSERT INTO t SELECT generate_series(1, 1000)");
            assertThat(pg.primary()).isZero();
            assertThat(timeline(url)).isEqualTo("00000001");

            pg.failover();
            assertThat(pg.primary()).isEqualTo(1);
            assertThat(count(url)).isEqualTo(1000);
            assertThat(timeline(url)).isEqualTo("00000002");
            pg.executeOnPrimary("postgres", "INSERT INTO t SELECT generate_series(1, 500)");

            pg.failover();
            assertThat(pg.primary()).isZero();
            assertThat(count(url)).isEqualTo(1500);
            assertThat(timeline(url)).isEqualTo("00000003");
            assertThat(count(pg.nodeUrl(1, "postgres")))
                    .as("the rebuilt standby has it all too")
                    .isEqualTo(1500);
        }
    }

    @Test
    void anAsynchronousStandbyCutOffLosesWhatCameAfterTheCut() throws Exception {
        try (StreamingPostgres pg = new StreamingPostgres(StreamingPostgres.Replication.ASYNCHRONOUS)) {
            pg.executeOnPrimary("postgres", "CREATE TABLE t (n int)");
            pg.executeOnPrimary("postgres", "INSERT INTO t SELECT generate_series(1, 100)");
            // Replayed on the standby before the cut:
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (count(pg.nodeUrl(1, "postgres")) < 100 && System.nanoTime() < deadline) {
                Thread.sleep(50);
            }
            pg.cutReplication();
            pg.executeOnPrimary("postgres", "INSERT INTO t SELECT generate_series(1, 50)");
            pg.killPrimary();
            pg.promoteStandby();
            assertThat(count(pg.url("postgres"))).isEqualTo(100);
        }
    }
}
