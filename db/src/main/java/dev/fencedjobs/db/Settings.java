package dev.fencedjobs.db;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Reads settings by their environment-variable name ({@code LEASE_DURATION}); a system property
 * of the same name in lower case with dots ({@code -Dlease.duration=15s}) overrides it.
 *
 * <p>Parsing fails with a {@link ConfigException} that names the setting; nothing is clamped.
 */
public final class Settings {

    private static final Pattern DURATION = Pattern.compile("(\\d+)\\s*(ms|s|m|h)");

    private final Map<String, String> environment;
    private final Properties properties;

    public Settings(Map<String, String> environment, Properties properties) {
        this.environment = Map.copyOf(environment);
        this.properties = (Properties) properties.clone();
    }

    public static Settings fromEnvironment() {
        return new Settings(System.getenv(), System.getProperties());
    }

    /** Settings from a map of environment-style names, for tests and embedding. */
    public static Settings of(Map<String, String> values) {
        return new Settings(values, new Properties());
    }

    public static String propertyName(String name) {
        return name.toLowerCase(Locale.ROOT).replace('_', '.');
    }

    public Optional<String> get(String name) {
        String value = properties.getProperty(propertyName(name));
        if (value == null) {
            value = environment.get(name);
        }
        return Optional.ofNullable(value).map(String::trim).filter(v -> !v.isEmpty());
    }

    /**
     * A secret given as a variable or as the path of a file holding it ({@code OPS_TOKEN} or
     * {@code OPS_TOKEN_FILE}); both set is an error, and so is a file that cannot be read.
     */
    public Optional<String> valueOrFile(String name, String fileName) {
        Optional<String> value = get(name);
        Optional<String> file = get(fileName);
        if (value.isPresent() && file.isPresent()) {
            throw new ConfigException(name, "and " + fileName + " are both set; set one of them");
        }
        if (file.isEmpty()) {
            return value;
        }
        try {
            return Optional.of(Files.readString(Path.of(file.get()), StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new ConfigException(fileName, "cannot read " + file.get() + ": " + e.getMessage());
        }
    }

    public String string(String name, String defaultValue) {
        return get(name).orElse(defaultValue);
    }

    public String required(String name) {
        return get(name).orElseThrow(() -> new ConfigException(name, "is required"));
    }

    public int integer(String name, int defaultValue) {
        Optional<String> raw = get(name);
        if (raw.isEmpty()) {
            return defaultValue;
        }
        try {
            return Integer.parseInt(raw.get());
        } catch (NumberFormatException e) {
            throw new ConfigException(name, "must be a whole number, got '" + raw.get() + "'");
        }
    }

    /** Accepts true/false, yes/no, 1/0. */
    public boolean bool(String name, boolean defaultValue) {
        Optional<String> raw = get(name);
        if (raw.isEmpty()) {
            return defaultValue;
        }
        return switch (raw.get().toLowerCase(Locale.ROOT)) {
            case "true", "yes", "1" -> true;
            case "false", "no", "0" -> false;
            default -> throw new ConfigException(name, "must be true or false, got '" + raw.get() + "'");
        };
    }

    public Duration duration(String name, Duration defaultValue) {
        return get(name).map(raw -> parseDuration(name, raw)).orElse(defaultValue);
    }

    /** Accepts {@code 250ms}, {@code 10s}, {@code 5m}, {@code 1h}, or ISO-8601 such as {@code PT10S}. */
    public static Duration parseDuration(String name, String raw) {
        String value = raw.trim().toLowerCase(Locale.ROOT);
        Matcher m = DURATION.matcher(value);
        try {
            if (m.matches()) {
                long amount = Long.parseLong(m.group(1));
                return switch (m.group(2)) {
                    case "ms" -> Duration.ofMillis(amount);
                    case "s" -> Duration.ofSeconds(amount);
                    case "m" -> Duration.ofMinutes(amount);
                    default -> Duration.ofHours(amount);
                };
            }
            return Duration.parse(raw.trim());
        } catch (RuntimeException e) {
            throw new ConfigException(name, "must be a duration such as 500ms, 10s, 5m or PT10S, got '" + raw + "'");
        }
    }

    public static Duration requirePositive(String name, Duration value) {
        if (value.isNegative() || value.isZero()) {
            throw new ConfigException(name, "must be positive, got " + value);
        }
        return value;
    }

    public static int requirePositive(String name, int value) {
        if (value <= 0) {
            throw new ConfigException(name, "must be positive, got " + value);
        }
        return value;
    }
}
