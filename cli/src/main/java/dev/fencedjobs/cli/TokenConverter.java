package dev.fencedjobs.cli;

import dev.fencedjobs.lease.FencingToken;
import picocli.CommandLine;

/** A fencing token on the command line: a whole number of at least 1. */
final class TokenConverter implements CommandLine.ITypeConverter<FencingToken> {
    @Override
    public FencingToken convert(String value) {
        try {
            return FencingToken.of(Long.parseLong(value.trim()));
        } catch (IllegalArgumentException e) {
            throw new CommandLine.TypeConversionException(
                    "a fencing token is a whole number of at least 1, got '" + value + "'");
        }
    }
}
