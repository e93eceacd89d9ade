#!/usr/bin/env bash
# Converter benchmark, everything in one run on the same files and cores:
#   the arrow-rs decode-only floor, tfshard convert (all cores and --threads 1), the
#   Python exporter teams write today, peak RSS of each, and the ratios; then peak RSS
#   converting a table of images (6,000 JPEGs of ~90 KB in row groups of 500, plain and
#   gzip), where memory must be bounded by bytes in flight (goal: <= 256 MiB).
# Data goes to target/bench-data (generated, never committed). Also leaves the standard
# table converted with --target-shard-size 32MiB in target/bench-data/shards-32mib for
# the verify and reader benchmarks.
#
#   scripts/bench_convert.sh            # RUNS=3 (median), ROWS=2000000, PYTHON=1
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
runs=${RUNS:-3}
rows=${ROWS:-2000000}
table=$data/standard-$rows
cargo build --release --quiet --example decode_parquet
decode=target/release/examples/decode_parquet
[ -d "$table" ] || "$python" scripts/make_standard_table.py "$table" "$rows"
files=$(ls "$table"/*.parquet)
input_mb=$(du -cb $files | tail -1 | awk '{printf "%.1f", $1/1e6}')
cat $files > /dev/null # page cache warm

cores=$(nproc)
time_run decode "$decode" $files
# pyarrow's pq.read_table on every core, timed inside Python (not its start-up): the
# decode floor a Python exporter starts from.
pyarrow_secs=$("$python" - "$runs" $files <<'PY'
import sys, time, statistics
import pyarrow.parquet as pq
runs, files = int(sys.argv[1]), sys.argv[2:]
times = []
for _ in range(runs):
    t = time.perf_counter()
    for f in files:
        pq.read_table(f)
    times.append(time.perf_counter() - t)
print(f"{statistics.median(times):.3f}")
PY
)
time_run decode-1 "$decode" --threads 1 $files
clear="$data/out" time_run tfshard "$bin" convert parquet $files -o "$data/out" --quiet
# The same conversion into memory (tmpfs): no disk under it, so what is left is the
# conversion's own work. On a VM whose disk writes ~0.5 GB/s the on-disk run above is
# bound by the fsync of 404 MB, whatever the converter does.
tmpfs=${TMPFS:-/dev/shm}
if [ -d "$tmpfs" ] && [ -w "$tmpfs" ]; then
  clear="$tmpfs/tfshard-bench-out" time_run tfshard-tmpfs "$bin" convert parquet $files -o "$tmpfs/tfshard-bench-out" --quiet
  rm -rf "$tmpfs/tfshard-bench-out"
fi
# The disk's own time for the same bytes: each shard copied from the page cache and
# fdatasync'ed (dd), as the converter fsyncs each shard before renaming it.
disk_write() {
  for f in "$data"/out/*.tfrecord; do
    dd if="$f" of="$data/disk-anchor/$(basename "$f")" bs=4M conv=fdatasync status=none
  done
}
mkdir -p "$data/disk-anchor"
clear="$data/disk-anchor" time_run disk-write bash -c "$(declare -f disk_write); data=$data; mkdir -p $data/disk-anchor; disk_write"
rm -rf "$data/disk-anchor"
clear="$data/out-1" time_run tfshard-1 "$bin" convert parquet $files -o "$data/out-1" --quiet --threads 1
clear="$data/out-gz" time_run tfshard-gzip "$bin" convert parquet $files -o "$data/out-gz" --quiet --compression gzip
clear="$data/out-shuffle" time_run tfshard-shuffle "$bin" convert parquet $files -o "$data/out-shuffle" --quiet --shuffle
# Far less budget than data: the records go through bucket files, and peak RSS should
# stay near the plain conversion's plus the budget (this was a test; RSS is the
# allocator's and the scheduler's as much as ours, so it is measured here).
clear="$data/out-shuffle-64m" time_run tfshard-shuffle-64m "$bin" convert parquet $files -o "$data/out-shuffle-64m" --quiet --shuffle --shuffle-memory 64MiB
if [ "${PYTHON:-1}" = 1 ]; then
  rm -rf "$data/out-python"
  time_run python env TF_CPP_MIN_LOG_LEVEL=3 "$python" scripts/python_exporter.py "$data/out-python" $files
fi
[ -d "$data/jpegs" ] || "$python" scripts/make_jpegs.py "$data/jpegs" 6000 > /dev/null
[ -f "$data/images-plain.parquet" ] || "$python" scripts/make_image_table.py "$data/jpegs" "$data/images-plain.parquet" > /dev/null
images="$data/images-plain.parquet"
clear="$data/out-images" time_run images-plain "$bin" convert parquet "$images" -o "$data/out-images" --quiet
clear="$data/out-images-gz" time_run images-gzip "$bin" convert parquet "$images" -o "$data/out-images-gz" --quiet --compression gzip
"$bin" convert parquet $files -o "$data/shards-32mib" --overwrite --quiet --target-shard-size 32MiB
out_mb=$(du -cb "$data"/out/*.tfrecord | tail -1 | awk '{printf "%.1f", $1/1e6}')
shards32=$(ls "$data"/shards-32mib/*.tfrecord | wc -l)

echo
echo "standard table: $rows rows, 8 zstd files, $input_mb MB Parquet -> $out_mb MB TFRecord; $cores cores; median of $runs"
printf "%-34s %9s %12s %10s %s\n" "run" "seconds" "rows/s" "peak MiB" "ratio"
row() { # name label ratio-text
  printf "%-34s %9.2f %12.0f %10s %s\n" "$2" "${secs[$1]}" "$(echo "$rows / ${secs[$1]}" | bc -l)" "${rss[$1]}" "$3"
}
ratio() { echo "${secs[$1]} / ${secs[$2]}" | bc -l | xargs printf "%.2f"; }
printf "%-34s %9.2f %12.0f %10s %s\n" "pyarrow pq.read_table (floor)" "$pyarrow_secs" "$(echo "$rows / $pyarrow_secs" | bc -l)" "" "(in-process, every core)"
row decode "arrow-rs decode only (floor)" ""
row decode-1 "arrow-rs decode only, 1 thread" ""
row tfshard "tfshard convert" "$(ratio tfshard decode)x the arrow-rs floor, $(echo "${secs[tfshard]} / $pyarrow_secs" | bc -l | xargs printf "%.2f")x pyarrow's (goal <= 1.2)"
if [ -n "${secs[tfshard-tmpfs]:-}" ]; then
  row tfshard-tmpfs "tfshard convert into tmpfs" "$(ratio tfshard-tmpfs decode)x the arrow-rs floor, $(echo "${secs[tfshard-tmpfs]} / $pyarrow_secs" | bc -l | xargs printf "%.2f")x pyarrow's (goal <= 1.2)"
fi
printf "%-34s %9.2f %12s %10s %s\n" "disk: dd + fdatasync of the shards" "${secs[disk-write]}" "" "" "on disk, tfshard takes $(ratio tfshard disk-write)x the disk's own write of its output"
row tfshard-1 "tfshard convert --threads 1" "$(ratio tfshard-1 decode-1)x the 1-thread floor"
row tfshard-gzip "tfshard convert --compression gzip" "$(ratio tfshard-gzip decode)x the floor"
row tfshard-shuffle "tfshard convert --shuffle" "$(ratio tfshard-shuffle tfshard)x the plain conversion"
row tfshard-shuffle-64m "  --shuffle-memory 64MiB" "peak RSS $(( ${rss[tfshard-shuffle-64m]} - ${rss[tfshard]} )) MiB over plain (budget 64)"
if [ -n "${secs[python]:-}" ]; then
  row python "Python exporter (pyarrow+tf)" "tfshard is $(ratio python tfshard)x faster"
fi
images_mb=$(du -b "$images" | awk '{printf "%.0f", $1/1e6}')
echo
echo "images table: 6000 JPEGs, $images_mb MB Parquet, row groups of 500 rows (~46 MB)"
printf "%-34s %9s %10s\n" "run" "seconds" "peak MiB"
printf "%-34s %9.2f %10s\n" "tfshard convert (images)" "${secs[images-plain]}" "${rss[images-plain]}"
printf "%-34s %9.2f %10s\n" "tfshard convert --compression gzip" "${secs[images-gzip]}" "${rss[images-gzip]}"
echo "also wrote $data/shards-32mib: $shards32 shards"
