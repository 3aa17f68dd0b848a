package dev.fencedjobs.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.TypeConversionException;

/** A JSON document, checked to parse. */
record Json(String text) {
    static final Json EMPTY = new Json("{}");

    static final class Converter implements ITypeConverter<Json> {
        @Override
        public Json convert(String raw) {
            try {
                new ObjectMapper().readTree(raw);
            } catch (IOException e) {
                throw new TypeConversionException("'" + raw + "' is not valid JSON");
            }
            return new Json(raw);
        }
    }
}
