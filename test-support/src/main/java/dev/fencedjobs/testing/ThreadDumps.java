package dev.fencedjobs.testing;

import java.util.Map;

/** Prints every thread's stack, so a test that times out shows where things stood. */
public final class ThreadDumps {

    private ThreadDumps() {}

    public static String all() {
        StringBuilder sb = new StringBuilder("Thread dump:\n");
        for (Map.Entry<Thread, StackTraceElement[]> e :
                Thread.getAllStackTraces().entrySet()) {
            sb.append('"')
                    .append(e.getKey().getName())
                    .append("\" ")
                    .append(e.getKey().getState())
                    .append('\n');
            for (StackTraceElement frame : e.getValue()) {
                sb.append("    at ").append(frame).append('\n');
            }
        }
        return sb.toString();
    }

    /** Runs {@code check}; if it throws, prints a thread dump to stderr first. */
    public static void onFailure(Runnable check) {
        try {
            check.run();
        } catch (RuntimeException | AssertionError e) {
            System.err.println(all());
            throw e;
        }
    }
}
