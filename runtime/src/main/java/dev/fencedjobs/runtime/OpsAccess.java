package dev.fencedjobs.runtime;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;

/**
 * Who can reach the ops endpoint and what they see. The health endpoints are always open (a
 * kubelet's probe carries no credentials); {@code /status}, {@code /dashboard.json} and
 * {@code /metrics} show holders, tokens, host names and backlog, so with a token set they answer
 * only a request that carries it as {@code Authorization: Bearer <token>}, which is what a
 * Prometheus scrape config's {@code authorization.credentials_file} sends.
 *
 * @param bindAddress the interface to listen on ({@code HTTP_BIND_ADDRESS}; default all, which a
 *     container needs for its probes; {@code 127.0.0.1} keeps it to the host)
 * @param token the bearer token ({@code OPS_TOKEN} or {@code OPS_TOKEN_FILE}); null for none
 */
public record OpsAccess(String bindAddress, String token) {

    public static final String BIND_ADDRESS = "HTTP_BIND_ADDRESS";
    public static final String TOKEN = "OPS_TOKEN";
    public static final String TOKEN_FILE = "OPS_TOKEN_FILE";
    public static final String ALL_INTERFACES = "0.0.0.0";

    /** Every interface, no token: as before these settings existed. */
    public static final OpsAccess OPEN = new OpsAccess(ALL_INTERFACES, null);

    public OpsAccess {
        try {
            InetAddress.getByName(bindAddress);
        } catch (UnknownHostException | RuntimeException e) {
            throw new ConfigException(BIND_ADDRESS, "is not an address of this host: '" + bindAddress + "'");
        }
        if (token != null && token.strip().length() < 16) {
            throw new ConfigException(TOKEN, "must be at least 16 characters (a guessable token protects nothing)");
        }
        token = token == null ? null : token.strip();
    }

    public static OpsAccess from(Settings settings) {
        return new OpsAccess(
                settings.string(BIND_ADDRESS, ALL_INTERFACES),
                settings.valueOrFile(TOKEN, TOKEN_FILE).orElse(null));
    }

    public OpsAccess withToken(String other) {
        return new OpsAccess(bindAddress, other);
    }

    public OpsAccess withBindAddress(String other) {
        return new OpsAccess(other, token);
    }

    /** Whether an {@code Authorization} header value lets its request see what the token guards; compared in constant time. */
    public boolean admits(String authorization) {
        if (token == null) {
            return true;
        }
        if (authorization == null || !authorization.startsWith("Bearer ")) {
            return false;
        }
        return MessageDigest.isEqual(
                authorization.substring("Bearer ".length()).strip().getBytes(StandardCharsets.UTF_8),
                token.getBytes(StandardCharsets.UTF_8));
    }

    @Override
    public String toString() {
        return "OpsAccess[bindAddress=" + bindAddress + ", token=" + (token == null ? "none" : "[hidden]") + "]";
    }
}
