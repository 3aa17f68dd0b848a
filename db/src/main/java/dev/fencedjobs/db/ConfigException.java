package dev.fencedjobs.db;

/** A setting is missing or invalid. The message starts with the setting's name. */
public final class ConfigException extends RuntimeException {

    private static final long serialVersionUID = 1L;

    private final String setting;

    public ConfigException(String setting, String problem) {
        super(setting + ": " + problem);
        this.setting = setting;
    }

    public String setting() {
        return setting;
    }
}
