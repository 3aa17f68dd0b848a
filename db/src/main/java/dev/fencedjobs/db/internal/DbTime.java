package dev.fencedjobs.db.internal;

import java.time.OffsetDateTime;
import org.jooq.Field;
import org.jooq.impl.DSL;
import org.jooq.impl.SQLDataType;

/** Database time, the only clock lease and due-time decisions are made with. */
public final class DbTime {

    /**
     * PostgreSQL's {@code clock_timestamp()}: the current time, not frozen at transaction start as
     * {@code now()} is (and jOOQ's {@code currentTimestamp()} renders {@code now()}).
     */
    public static final Field<OffsetDateTime> CLOCK_TIMESTAMP =
            DSL.function("clock_timestamp", SQLDataType.TIMESTAMPWITHTIMEZONE);

    private DbTime() {}
}
