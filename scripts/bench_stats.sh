#!/usr/bin/env bash
# Statistics, on the standard table (2M rows; scripts/bench_data.sh), page cache warm:
#   1. `convert --stats` beside plain `convert` into tmpfs (/dev/shm), interleaved runs,
#      the median of each and their ratio (DESIGN's budget: at most 1.10);
#   2. the partials' size against the shards' at the default 256 MiB shards;
#   3. `stats` of the 32 MiB shards (computed: no stored statistics) beside `verify
#      --deep` of the same shards, interleaved, medians, peak RSS.
#   RUNS=5 scripts/bench_stats.sh
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
standard_shards
runs=${RUNS:-5}
table=$data/standard-2000000
out=/dev/shm/tfshard-bench-stats
[ -d /dev/shm ] || out=$data/bench-stats-out
trap 'rm -rf "$out"' EXIT

# Wall seconds and peak RSS (KiB) of one run of the command, as "S K".
timed() {
  /usr/bin/time -f "%e %M" -o /tmp/tfshard-bench-stats.time "$@" > /dev/null 2>&1
  cat /tmp/tfshard-bench-stats.time
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

: > /tmp/bench-stats-plain
: > /tmp/bench-stats-with
"$bin" convert parquet "$table"/*.parquet -o "$out" --overwrite --quiet # warm
for _ in $(seq "$runs"); do
  timed "$bin" convert parquet "$table"/*.parquet -o "$out" --overwrite --quiet >> /tmp/bench-stats-plain
  timed "$bin" convert parquet "$table"/*.parquet -o "$out" --overwrite --quiet --stats >> /tmp/bench-stats-with
done
plain=$(cut -d' ' -f1 /tmp/bench-stats-plain | median)
with=$(cut -d' ' -f1 /tmp/bench-stats-with | median)
echo "convert, $runs interleaved runs each (seconds): plain $(cut -d' ' -f1 /tmp/bench-stats-plain | tr '\n' ' ')"
echo "                                          --stats $(cut -d' ' -f1 /tmp/bench-stats-with | tr '\n' ' ')"
echo "median plain ${plain} s, --stats ${with} s: ratio $(echo "scale=2; $with / $plain" | bc)"
shards=$(du -cb "$out"/*.tfrecord | tail -1 | cut -f1)
partials=$(du -cb "$out"/*.tfrecord.stats | tail -1 | cut -f1)
pb=$(stat -c %s "$out/data.stats.pb")
echo "partials ${partials} bytes beside ${shards} bytes of shards ($(echo "scale=4; 100 * $partials / $shards" | bc)%); data.stats.pb ${pb} bytes"

: > /tmp/bench-stats-verify
: > /tmp/bench-stats-stats
shards32=$(ls "$data"/shards-32mib/*.tfrecord)
for _ in $(seq "$runs"); do
  # shellcheck disable=SC2086
  timed "$bin" verify $shards32 --deep --quiet >> /tmp/bench-stats-verify
  # shellcheck disable=SC2086
  timed "$bin" stats $shards32 >> /tmp/bench-stats-stats
done
v=$(cut -d' ' -f1 /tmp/bench-stats-verify | median)
s=$(cut -d' ' -f1 /tmp/bench-stats-stats | median)
echo "verify --deep of the 32 MiB shards: median ${v} s, peak RSS $(cut -d' ' -f2 /tmp/bench-stats-verify | median) KiB"
echo "stats of the same shards:           median ${s} s, peak RSS $(cut -d' ' -f2 /tmp/bench-stats-stats | median) KiB; ratio $(echo "scale=2; $s / $v" | bc)"
