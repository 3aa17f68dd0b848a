package dev.fencedjobs.lease;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import java.util.function.Supplier;

/** One role's lease meters (docs/operations.md lists them), tagged with the role. */
final class LeaseMeters {

    final Counter takeovers;
    final Counter renewals;
    final Counter renewalFailures;
    final Counter fastTakeovers;
    final Timer renewalLatency;

    /** {@code leading}: 1 while this replica holds the role's lease; {@code lastToken}: the last grant's token, null before one. */
    LeaseMeters(String role, MeterRegistry registry, Supplier<Boolean> leading, Supplier<FencingToken> lastToken) {
        Gauge.builder("fencedjobs_leader", () -> leading.get() ? 1 : 0)
                .tag("role", role)
                .description("1 while this replica holds the role's lease")
                .register(registry);
        Gauge.builder("fencedjobs_lease_token", () -> {
                    FencingToken t = lastToken.get();
                    return t == null ? 0 : t.value();
                })
                .tag("role", role)
                .description("fencing token of the last grant this replica received")
                .register(registry);
        takeovers = Counter.builder("fencedjobs_lease_takeovers")
                .tag("role", role)
                .description("times this replica became leader")
                .register(registry);
        renewals = Counter.builder("fencedjobs_lease_renewals")
                .tag("role", role)
                .description("successful acquisitions and renewals")
                .register(registry);
        renewalFailures = Counter.builder("fencedjobs_lease_renewal_failures")
                .tag("role", role)
                .description("acquisition or renewal statements that failed with an error")
                .register(registry);
        fastTakeovers = Counter.builder("fencedjobs_lease_fast_takeovers")
                .tag("role", role)
                .description(
                        "takeovers at once from a holder whose session ended (the fast path), before its lease expired")
                .register(registry);
        renewalLatency = Timer.builder("fencedjobs_lease_renewal")
                .tag("role", role)
                .description("latency of the acquire-or-renew statement")
                .register(registry);
    }
}
