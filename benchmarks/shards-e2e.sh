#!/usr/bin/env bash
# End to end with shards (docs/shards.md, "What it costs"): one shard beside the code from before shards, and
# the default count (2) beside one shard, each `e2e --phases throughput,latency` on a stack of its own
# (two dispatchers, a relay, a Kafka broker, a consumer), the sides alternating (A B C C B A ...) so that
# the machine's drift falls on all of them. The default count's runs also make the shards' faults
# (SHARD_PHASES, e2e's shard-kill and reshard; empty for none): a SIGKILL of one of the two dispatchers, TRIALS times, and
# the count changed under load from the stack's count to twice it, to half of it, and back (DEFAULT_SHARDS=4:
# 4 -> 8 -> 2 -> 4).
#
#   ./mvnw -q -pl benchmarks -am package -DskipTests
#   benchmarks/shards-e2e.sh                         the two counts of this build
#   BASE=/tmp/pre benchmarks/shards-e2e.sh           and a build from before shards: a checkout of 8eb3d3f
#                                                    with its jars built (git worktree add /tmp/pre 8eb3d3f;
#                                                    cd /tmp/pre; ./mvnw -q package -DskipTests)
#   ROUNDS=1 LOADS=400 TRIALS=1 SHARD_PHASES=shard-kill E2E_ARGS='--seconds 5 --bound-repetitions 1' E2E_JAVA_OPTS=-DwarmUpMaxSeconds=5 \
#       benchmarks/shards-e2e.sh                     CI's short mode
#
# Each side prints its sustained throughput (effects a second, SQL INSERT to effect row), the bound beside it
# (PostgreSQL alone, same run) and its due-to-effect latency at LOADS (jobs/s, 100 INSERT statements a
# second; this build's sides offer each rate until the JIT compilers are quiet before they measure it, the
# build of BASE measures after 3 s, so its latency is read beside this build's only with that said). The
# summary: each side's median and its ratio to one shard. Files in target/shards-e2e/.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
ROUNDS=${ROUNDS:-2}
LOADS=${LOADS:-400,2000}
DEFAULT_SHARDS=${DEFAULT_SHARDS:-2}
SHARD_PHASES=${SHARD_PHASES-shard-kill,reshard}
TRIALS=${TRIALS:-5}
E2E_ARGS=${E2E_ARGS:-}
E2E_JAVA_OPTS=${E2E_JAVA_OPTS:-}
BASE=${BASE:-}
jar=benchmarks/target/fenced-jobs-benchmarks.jar
[ -f "$jar" ] || { echo "build first: ./mvnw -q -pl benchmarks -am package -DskipTests" >&2; exit 2; }
if [ -n "$BASE" ]; then
    BASE=$(cd "$BASE" && pwd)
    [ -f "$BASE/benchmarks/target/fenced-jobs-benchmarks.jar" ] || { echo "no built benchmarks jar in $BASE" >&2; exit 2; }
    sides=(before one default)
else
    sides=(one default)
fi
out=target/shards-e2e
mkdir -p "$out"
echo "# $(date -u +%F), $(nproc) cores; sides: ${sides[*]} (one = 1 shard, default = $DEFAULT_SHARDS shards); $ROUNDS rounds"

# One side's run: its throughput, bound and latencies, as lines "side rate bound" and "side load p50 p99".
run() {
    local side=$1 round=$2 log="$out/$1-$2.log"
    local cmd phases=throughput,latency
    case $side in
        before) cmd=(java $E2E_JAVA_OPTS -jar "$BASE/benchmarks/target/fenced-jobs-benchmarks.jar" e2e --repo "$BASE") ;;
        one) cmd=(java $E2E_JAVA_OPTS -Dshards=1 -jar "$jar" e2e) ;;
        default) cmd=(java $E2E_JAVA_OPTS -Dshards="$DEFAULT_SHARDS" -jar "$jar" e2e --trials "$TRIALS")
            phases+=${SHARD_PHASES:+,$SHARD_PHASES} ;;
    esac
    # shellcheck disable=SC2086
    "${cmd[@]}" --phases "$phases" --loads "$LOADS" $E2E_ARGS --out "$out/$side-$round" > "$log" 2>&1 \
        || { echo "$side round $round failed: see $log" >&2; tail -60 "$log" >&2; exit 1; }
    local rate bound
    rate=$(sed -n 's/^ *[0-9,]* effects in [0-9.]* s: \([0-9,]*\) jobs\/s.*/\1/p' "$log" | tail -1 | tr -d ,)
    bound=$(sed -n 's/^ *PostgreSQL alone: median \([0-9,]*\) per second.*/\1/p' "$log" | tail -1 | tr -d ,)
    [ -n "$rate" ] && [ -n "$bound" ] || { echo "$side round $round printed no throughput: see $log" >&2; exit 1; }
    printf '  round %d %-8s %8s jobs/s end to end, PostgreSQL alone %8s (%.2f of it)\n' \
        "$round" "$side" "$rate" "$bound" "$(echo "$rate / $bound" | bc -l)"
    echo "$side $rate $bound" >> "$out/rates"
    sed -n 's/^ *\([0-9,]*\) jobs\/s offered.*p50 *\([0-9.]*\) ms *p99 *\([0-9.]*\) ms.*/\1 \2 \3/p' "$log" | tr -d , |
        while read -r load p50 p99; do
            printf '  round %d %-8s latency at %5s jobs/s: p50 %7s ms, p99 %7s ms\n' "$round" "$side" "$load" "$p50" "$p99"
            echo "$side $load $p50 $p99" >> "$out/latencies"
        done
    # The shard phases' own lines (e2e's parts 9 and 10).
    sed -n '/^9\. SIGKILL\|^10\. the shard count/,/took/p' "$log" | { grep -v took || true; } | sed "s/^/  round $round $side: /"
}

rm -f "$out/rates" "$out/latencies"
for round in $(seq 1 "$ROUNDS"); do
    order=("${sides[@]}")
    if [ $((round % 2)) -eq 0 ]; then
        order=($(printf '%s\n' "${sides[@]}" | tac))
    fi
    for side in "${order[@]}"; do
        run "$side" "$round"
    done
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
one=$(awk '$1 == "one" {print $2}' "$out/rates" | median)
echo "Summary (medians of $ROUNDS rounds):"
for side in "${sides[@]}"; do
    rate=$(awk -v s="$side" '$1 == s {print $2}' "$out/rates" | median)
    ratio=$(awk -v s="$side" '$1 == s {print $2 / $3}' "$out/rates" | median)
    line=$(printf '  %-8s %8.0f jobs/s end to end (%.2f x one shard, %.2f of PostgreSQL alone)' \
        "$side" "$rate" "$(echo "$rate / $one" | bc -l)" "$ratio")
    for load in ${LOADS//,/ }; do
        p50=$(awk -v s="$side" -v l="$load" '$1 == s && $2 == l {print $3}' "$out/latencies" | median)
        p99=$(awk -v s="$side" -v l="$load" '$1 == s && $2 == l {print $4}' "$out/latencies" | median)
        line+=$(printf '; at %s jobs/s p50 %s / p99 %s ms' "$load" "$p50" "$p99")
    done
    echo "$line"
done
