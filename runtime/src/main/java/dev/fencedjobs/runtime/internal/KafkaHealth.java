package dev.fencedjobs.runtime.internal;

import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.slf4j.Logger;

/**
 * How a service's Kafka calls went last, for its readiness and {@code /status}, with one log line
 * per change: the first failure of a streak at WARN, or at ERROR with what to check when Kafka
 * refused access (credentials, ACLs), the rest of the streak at DEBUG, and the recovery at INFO.
 * The caller's logger is used, so the lines carry the service's own logger name.
 */
public final class KafkaHealth {

    /** What to check when Kafka refused access. */
    private static final String ACCESS_HINT = "check KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_* and "
            + "KAFKA_CLIENT_PROPERTIES, and the principal's ACLs";

    private final Logger log;
    private final String service;
    private final String meanwhile;
    /** The last failure of the streak, null while calls succeed; shared by a replica's shards. */
    private final AtomicReference<String> lastError = new AtomicReference<>();

    /**
     * @param service who is talking to Kafka, for the messages ("relay")
     * @param meanwhile what happens while Kafka fails ("the rows stay in the outbox and are retried")
     */
    public KafkaHealth(Logger log, String service, String meanwhile) {
        this.log = log;
        this.service = service;
        this.meanwhile = meanwhile;
    }

    public void failed(Throwable fault) {
        String error = Faults.describe(fault);
        boolean first = lastError.getAndSet(error) == null;
        if (first && refusedAccess(fault)) {
            log.error(
                    "Kafka refused the {}: {}; {}. Nothing moves until it is fixed; retrying every few seconds",
                    service,
                    error,
                    ACCESS_HINT);
        } else if (first) {
            log.warn("Kafka: {}; {}", error, meanwhile);
        } else {
            log.debug("Kafka still failing: {}", error);
        }
    }

    public void succeeded() {
        if (lastError.getAndSet(null) != null) {
            log.info("Kafka works again for the {}", service);
        }
    }

    /**
     * Kafka refused who we are or what we may do (SASL or TLS authentication, ACLs): a setting to
     * fix, not a fault to wait out.
     */
    private static boolean refusedAccess(Throwable fault) {
        for (Throwable t = fault; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (t instanceof AuthenticationException || t instanceof AuthorizationException) {
                return true;
            }
        }
        return false;
    }

    public boolean healthy() {
        return lastError.get() == null;
    }

    /** {@code ok}, or the last failure while it lasts. */
    public String state() {
        String e = lastError.get();
        return e == null ? "ok" : e;
    }
}
