#!/usr/bin/env bash
# verify throughput beside `cat` of the same files, page cache warm, each timed over at
# least one second (looped), median of 5; plus --deep records/s.
#   1. the standard table in 32 MiB shards (~200-byte records; from bench_convert.sh)
#   2. ~1 GB of ~100 KB records in 32 MiB shards
# Data under target/bench-data (generated).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
data=target/bench-data
python=$(scripts/venv.sh)
cargo build --release --quiet --bin tfshard
bin=target/release/tfshard
if [ ! -f "$data/shards-32mib/data.manifest.json" ]; then
  [ -d "$data/standard-2000000" ] || "$python" scripts/make_standard_table.py "$data/standard-2000000"
  "$bin" convert parquet "$data"/standard-2000000/*.parquet -o "$data/shards-32mib" --overwrite --quiet --target-shard-size 32MiB
fi
if [ ! -f "$data/blobs-32mib/data.manifest.json" ]; then
  [ -f "$data/blobs.parquet" ] || "$python" scripts/make_blob_table.py "$data/blobs.parquet"
  "$bin" convert parquet "$data/blobs.parquet" -o "$data/blobs-32mib" --overwrite --quiet --target-shard-size 32MiB
fi

# seconds per pass: loop the command for >= 1 s, 5 times, print the median
per_pass() {
  "$@" > /dev/null 2>&1 # warm
  for _ in 1 2 3 4 5; do
    local n=0 start end
    start=$(date +%s.%N)
    while :; do
      "$@" > /dev/null 2>&1 || true
      n=$((n + 1))
      end=$(date +%s.%N)
      [ "$(echo "$end - $start >= 1" | bc)" = 1 ] && break
    done
    echo "($end - $start) / $n" | bc -l
  done | sort -n | sed -n 3p
}

printf "%-28s %6s %9s %10s %10s %9s %12s\n" "shards" "files" "MB" "cat MB/s" "verify MB/s" "vs cat" "--deep rec/s"
for set in shards-32mib blobs-32mib; do
  dir=$data/$set
  files=$(ls "$dir"/*.tfrecord)
  nfiles=$(echo "$files" | wc -l)
  bytes=$(du -cb $files | tail -1 | cut -f1)
  records=$(python3 -c "import json;print(json.load(open('$dir/data.manifest.json'))['records'])")
  cat_s=$(per_pass sh -c "cat $dir/*.tfrecord")
  verify_s=$(per_pass "$bin" verify "$dir" --quiet)
  deep_s=$(per_pass "$bin" verify "$dir" --quiet --deep)
  printf "%-28s %6d %9.0f %10.0f %10.0f %8.0f%% %12.0f\n" "$set" "$nfiles" "$(echo "$bytes/1000000" | bc -l)" \
    "$(echo "$bytes/$cat_s/1000000" | bc -l)" "$(echo "$bytes/$verify_s/1000000" | bc -l)" \
    "$(echo "100*$cat_s/$verify_s" | bc -l)" "$(echo "$records/$deep_s" | bc -l)"
done
echo "($(nproc) cores; cat is one process reading the files in sequence, verify uses every core)"
