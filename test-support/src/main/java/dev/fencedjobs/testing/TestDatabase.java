package dev.fencedjobs.testing;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import javax.sql.DataSource;
import org.postgresql.ds.PGSimpleDataSource;

/** An isolated, empty database on a test server; closing it drops the database. */
public final class TestDatabase implements AutoCloseable {

    private final TestPostgres server;
    private final String name;
    private final String url;
    private final String user;
    private final String password;

    TestDatabase(TestPostgres server, String name, String url, String user, String password) {
        this.server = server;
        this.name = name;
        this.url = url;
        this.user = user;
        this.password = password;
    }

    public String name() {
        return name;
    }

    public String url() {
        return url;
    }

    public String user() {
        return user;
    }

    public String password() {
        return password;
    }

    /** An unpooled data source: each {@code getConnection()} opens a new connection. */
    public DataSource dataSource() {
        PGSimpleDataSource ds = new PGSimpleDataSource();
        ds.setUrl(url);
        ds.setUser(user);
        ds.setPassword(password);
        return ds;
    }

    public Connection connect() throws SQLException {
        return DriverManager.getConnection(url, user, password);
    }

    @Override
    public void close() {
        server.dropDatabase(name);
    }
}
