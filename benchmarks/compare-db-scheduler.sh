#!/usr/bin/env bash
# Our end-to-end throughput beside db-scheduler's on one PostgreSQL 17 server, in one run.
#
#   ./mvnw -q -pl benchmarks -am package -DskipTests
#   benchmarks/compare-db-scheduler.sh            REPS=2 benchmarks/compare-db-scheduler.sh
#   N=20000 E2E_ARGS='--seconds 10 --bound-repetitions 1' E2E_JAVA_OPTS=-DwarmUpMaxSeconds=5 benchmarks/compare-db-scheduler.sh   # CI's short mode
#
# It starts a PostgreSQL 17 (the zonky binaries) with the anchor's pg.sh, and on that server, for each
# repetition: db-scheduler 16.7.1's own throughput benchmark with both its polling strategies (two
# schedulers of 20 threads each, trivial tasks, 200,000 due executions; ANCHORS/db-scheduler-bench),
# then `e2e --phases throughput` (two dispatchers, a relay, a Kafka broker and a consumer, SQL INSERT
# to effect row, with the bound beside it). db-scheduler's figure is executions picked, run and
# marked done; ours is jobs completed under the lease, published to Kafka and applied once by the
# consumer. Output on stdout; our benchmark's files in target/compare-db-scheduler/.
# ANCHORS defaults to ../shared/anchors beside the checkout.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
ANCHORS=${ANCHORS:-$repo/../shared/anchors}
REPS=${REPS:-1}
N=${N:-200000}
E2E_ARGS=${E2E_ARGS:-}
E2E_JAVA_OPTS=${E2E_JAVA_OPTS:-}
[ -f "$repo/benchmarks/target/fenced-jobs-benchmarks.jar" ] || { echo "build first: ./mvnw -q -pl benchmarks -am package -DskipTests" >&2; exit 2; }
[ -f "$ANCHORS/pg.sh" ] || { echo "no $ANCHORS/pg.sh: set ANCHORS" >&2; exit 2; }

# The anchor's sources may be read-only: build in a copy.
work=$(mktemp -d); cp -r "$ANCHORS"/. "$work"
(cd "$work/db-scheduler-bench" && mvn -q -B compile dependency:build-classpath -Dmdep.outputFile=target/cp.txt >/dev/null)
CP="$work/db-scheduler-bench/target/classes:$(cat "$work/db-scheduler-bench/target/cp.txt")"

source "$work/pg.sh"
unset PGPORT
# The settings our benchmarks' embedded server uses (durable, pg_stat_statements loaded).
H_PG_OPTS="-c shared_buffers=256MB -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
export H_PG_OPTS
# Not under $work: mktemp's directory is closed to the postgres user the server runs as.
pgdir=${PGDIR:-/tmp/fj-compare-pg-$$}
h_pg_start "$pgdir"
trap 'h_pg_stop; rm -rf "$work"; [ -n "${PGDIR:-}" ] || rm -rf "$pgdir"' EXIT
echo "# $(date -u +%F), $(nproc) cores, PostgreSQL $(h_psql -c 'show server_version'), fsync=$(h_psql -c 'show fsync'),"\
  "synchronous_commit=$(h_psql -c 'show synchronous_commit'), max_wal_size=$(h_psql -c 'show max_wal_size'),"\
  "$(java -version 2>&1 | head -1)" | sed 's/\x1b\[[0-9;]*m//g'

export FJ_BENCH_POSTGRES_URL="jdbc:postgresql://127.0.0.1:$PGPORT/postgres" FJ_BENCH_POSTGRES_USER=postgres
for rep in $(seq "$REPS"); do
  for s in lock-and-fetch fetch; do
    (cd "$work/db-scheduler-bench" && java -Xmx1g -cp "$CP" bench.Bench throughput "$s" "$N" 2>/dev/null) | sed "s/^/db-scheduler run $rep: /"
  done
  (cd "$repo" && java $E2E_JAVA_OPTS -jar benchmarks/target/fenced-jobs-benchmarks.jar e2e --phases throughput --out "target/compare-db-scheduler/$rep" $E2E_ARGS) 2>&1 |
    grep -E 'effects in|per second|^[0-9]\. ' | sed "s/^/fenced-jobs run $rep: /"
done
