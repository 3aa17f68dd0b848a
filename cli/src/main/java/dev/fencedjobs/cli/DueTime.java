package dev.fencedjobs.cli;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.format.DateTimeParseException;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.TypeConversionException;

/** A due time: absolute, or an offset from the database's clock. */
record DueTime(OffsetDateTime absolute, Duration offset) {

    /** {@code now}, {@code +30s} (an offset from the database's clock) or an ISO-8601 time. */
    static DueTime parse(String raw) {
        if (raw.equals("now")) {
            return new DueTime(null, Duration.ZERO);
        }
        if (raw.startsWith("+")) {
            try {
                return new DueTime(null, Settings.parseDuration("offset", raw.substring(1)));
            } catch (ConfigException e) {
                throw new TypeConversionException("'" + raw + "' is not an offset such as +30s, +5m or +2h");
            }
        }
        try {
            return new DueTime(OffsetDateTime.parse(raw), null);
        } catch (DateTimeParseException e) {
            throw new TypeConversionException(
                    "'" + raw + "' is neither now, an offset such as +30s, nor an ISO-8601 time such as "
                            + "2026-12-01T09:00:00Z");
        }
    }

    /** Offsets are added to clock_timestamp(), so the due time is in database time. */
    String sql() {
        return absolute != null ? "?" : "clock_timestamp() + ? * interval '1 millisecond'";
    }

    static final class Converter implements ITypeConverter<DueTime> {
        @Override
        public DueTime convert(String raw) {
            return parse(raw);
        }
    }
}
