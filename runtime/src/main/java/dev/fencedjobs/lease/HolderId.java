package dev.fencedjobs.lease;

import java.net.InetAddress;
import java.security.SecureRandom;
import java.util.Locale;

/**
 * Names one process start as a lease holder: {@code host-pid-random}, for example
 * {@code worker-3-48113-k2v9q1}. Each start gets a new one, so a restarted process never inherits
 * the lease of its former self.
 */
public final class HolderId {

    private static final SecureRandom RANDOM = new SecureRandom();
    private static final String ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";

    private HolderId() {}

    public static String generate() {
        return host() + "-" + ProcessHandle.current().pid() + "-" + random(6);
    }

    /**
     * The pid in a holder id made by {@link #generate()}, so an operator or a test can tell which
     * process holds a lease; -1 when the id has another form (a hand-written holder, for example).
     */
    public static long pid(String holderId) {
        String[] parts = holderId.split("-");
        if (parts.length < 3) {
            return -1;
        }
        try {
            return Long.parseLong(parts[parts.length - 2]);
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    static String random(int length) {
        StringBuilder sb = new StringBuilder(length);
        for (int i = 0; i < length; i++) {
            sb.append(ALPHABET.charAt(RANDOM.nextInt(ALPHABET.length())));
        }
        return sb.toString();
    }

    private static String host() {
        String host = System.getenv("HOSTNAME");
        if (host == null || host.isBlank()) {
            try {
                host = InetAddress.getLocalHost().getHostName();
            } catch (Exception e) {
                host = "unknown-host";
            }
        }
        host = host.toLowerCase(Locale.ROOT).replaceAll("[^a-z0-9.-]", "-");
        return host.length() > 60 ? host.substring(0, 60) : host;
    }
}
