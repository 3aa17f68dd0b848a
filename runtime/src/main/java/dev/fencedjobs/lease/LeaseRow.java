package dev.fencedjobs.lease;

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * One row of {@code leader_lease}, the one read-model of it: plain JDBC, liveness in database time.
 * The status pages, the CLI, the tools and the tests read it; a follower reads the holder with its
 * sign of life instead ({@link Lease.Holder}).
 *
 * @param expiresAt as the database wrote it
 * @param live whether it expires after now, in database time
 * @param secondsLeft until it expires (negative once expired), to a tenth of a second
 */
public record LeaseRow(
        String role,
        String holderId,
        FencingToken token,
        OffsetDateTime expiresAt,
        boolean live,
        BigDecimal secondsLeft) {

    static final String SELECT = "SELECT role, holder_id, fencing_token, expires_at, expires_at > clock_timestamp(), "
            + "round(extract(epoch FROM expires_at - clock_timestamp())::numeric, 1) FROM leader_lease";

    /** Every role's row, by role. */
    public static List<LeaseRow> all(Connection c) throws SQLException {
        List<LeaseRow> rows = new ArrayList<>();
        try (PreparedStatement s = c.prepareStatement(SELECT + " ORDER BY role");
                ResultSet rs = s.executeQuery()) {
            while (rs.next()) {
                rows.add(of(rs));
            }
        }
        return rows;
    }

    /** The role's row, live or not; empty if no service ever acquired the role. */
    public static Optional<LeaseRow> of(Connection c, String role) throws SQLException {
        try (PreparedStatement s = c.prepareStatement(SELECT + " WHERE role = ?")) {
            s.setString(1, role);
            try (ResultSet rs = s.executeQuery()) {
                return rs.next() ? Optional.of(of(rs)) : Optional.empty();
            }
        }
    }

    /** The role's row while a holder's lease is live. */
    public static Optional<LeaseRow> live(Connection c, String role) throws SQLException {
        return of(c, role).filter(LeaseRow::live);
    }

    /** The process id in the holder id ({@link HolderId}). */
    public long holderPid() {
        return HolderId.pid(holderId);
    }

    private static LeaseRow of(ResultSet rs) throws SQLException {
        return new LeaseRow(
                rs.getString(1),
                rs.getString(2),
                FencingToken.of(rs.getLong(3)),
                rs.getObject(4, OffsetDateTime.class),
                rs.getBoolean(5),
                rs.getBigDecimal(6));
    }
}
