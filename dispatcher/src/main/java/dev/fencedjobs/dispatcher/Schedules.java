package dev.fencedjobs.dispatcher;

import java.util.Map;

/** The schedule firer beside the dispatch loop, as the loop sees it: started and stopped with it, woken by its channel. */
interface Schedules {
    /** For a loop without schedules. */
    Schedules NONE = new Schedules() {
        @Override
        public void start() {}

        @Override
        public void wake() {}

        @Override
        public Map<String, Object> status() {
            return Map.of();
        }

        @Override
        public void close() {}
    };

    void start();

    void wake();

    Map<String, Object> status();

    void close();
}
