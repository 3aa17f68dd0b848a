package dev.fencedjobs.runtime.internal;

import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.ServiceConfig;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The environment a service process reads at start-up, written by whoever starts one: the tests,
 * the chaos suite, the benchmarks and {@code run-local}. Each method sets the variables its
 * settings class reads, under that class's names.
 */
public final class ServiceEnvironment {

    private final Map<String, String> variables = new LinkedHashMap<>();

    private ServiceEnvironment() {}

    /** {@code DATABASE_URL}, {@code DATABASE_USER}, {@code DATABASE_PASSWORD}. */
    public static ServiceEnvironment database(String url, String user, String password) {
        ServiceEnvironment e = new ServiceEnvironment();
        e.variables.put(DatabaseConfig.URL, url);
        e.variables.put(DatabaseConfig.USER, user);
        e.variables.put(DatabaseConfig.PASSWORD, password);
        return e;
    }

    /** {@code DATABASE_MIGRATE}: false where the schema is made beforehand (and the service's role may not make it). */
    public ServiceEnvironment migrate(boolean migrate) {
        return set(ServiceConfig.MIGRATE, Boolean.toString(migrate));
    }

    /** {@code HTTP_PORT}: 0 for any free port. */
    public ServiceEnvironment httpPort(int port) {
        return set(ServiceConfig.HTTP_PORT, Integer.toString(port));
    }

    /** {@code KAFKA_BOOTSTRAP_SERVERS} and {@code KAFKA_TOPIC}. */
    public ServiceEnvironment kafka(String bootstrapServers, String topic) {
        set(KafkaSettings.BOOTSTRAP_SERVERS, bootstrapServers);
        return set(KafkaSettings.TOPIC, topic);
    }

    /**
     * {@code RECORD_SIGNATURES}, and {@code RECORD_SIGNING_KEY} and {@code RECORD_VERIFY_KEYS} as
     * PEM: the relay reads the first, the consumer the second (a process handed both reads its own).
     */
    public ServiceEnvironment recordTrust(RecordTrust trust) {
        return setAll(recordTrustVariables(trust));
    }

    /** The variables of {@link #recordTrust}, alone: to switch a running stack's keys. */
    public static Map<String, String> recordTrustVariables(RecordTrust trust) {
        Map<String, String> variables = new LinkedHashMap<>();
        variables.put(RecordTrust.SIGNATURES, trust.mode().setting());
        if (trust.signing() != null) {
            variables.put(RecordTrust.SIGNING_KEY, RecordTrust.privatePem(trust.signing()));
        }
        if (!trust.trusted().isEmpty()) {
            StringBuilder keys = new StringBuilder();
            trust.trusted().values().forEach(k -> keys.append(RecordTrust.publicPem(k)));
            variables.put(RecordTrust.VERIFY_KEYS, keys.toString());
        }
        return variables;
    }

    /** {@code LEASE_DURATION} and {@code RENEW_INTERVAL}. */
    public ServiceEnvironment lease(Duration duration, Duration renewInterval) {
        set(LeaseConfig.DURATION, duration.toMillis() + "ms");
        return set(LeaseConfig.RENEW_INTERVAL, renewInterval.toMillis() + "ms");
    }

    /** {@code LEASE_FAST_TAKEOVER}. */
    public ServiceEnvironment fastTakeover(boolean on) {
        return set(LeaseConfig.FAST_TAKEOVER, Boolean.toString(on));
    }

    /** {@code DATABASE_STATEMENT_TIMEOUT}, {@code DATABASE_LOCK_TIMEOUT}, {@code DATABASE_IDLE_IN_TRANSACTION_TIMEOUT}. */
    public ServiceEnvironment serverTimeouts(Duration statement, Duration lock, Duration idleInTransaction) {
        set(DatabaseConfig.STATEMENT_TIMEOUT, statement.toMillis() + "ms");
        set(DatabaseConfig.LOCK_TIMEOUT, lock.toMillis() + "ms");
        return set(DatabaseConfig.IDLE_IN_TRANSACTION_TIMEOUT, idleInTransaction.toMillis() + "ms");
    }

    /** Any other variable, by the name its settings class gives it. */
    public ServiceEnvironment set(String name, String value) {
        variables.put(name, value);
        return this;
    }

    /** Variables given by the caller; they replace those set so far. */
    public ServiceEnvironment setAll(Map<String, String> more) {
        variables.putAll(more);
        return this;
    }

    public Map<String, String> toMap() {
        return Map.copyOf(variables);
    }
}
