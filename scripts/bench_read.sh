#!/usr/bin/env bash
# The reader pipeline against tf.data, same shards, same cores, page cache warm:
#   1. the standard table in 32 MiB shards (~200-byte records, 13 shards)
#   2. ~100 KB JPEG records (the image benchmark's 6,000 JPEGs in 32 MiB shards)
# For each: cat (ceiling), tf.data raw framing, tf.data's tutorial pipeline (per-record
# parse) and its batch-then-parse variant, tfshard bench (full pipeline, one epoch after
# a warm-up, batch 64, shuffle 10000, drop remainder) and our sequential baseline.
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
standard_shards
jpeg_folder
[ -f "$data/jpeg-shards/data.manifest.json" ] ||
  "$bin" convert images "$data/jpegs" -o "$data/jpeg-shards" --overwrite --quiet --target-shard-size 32MiB

for set in shards-32mib jpeg-shards; do
  dir=$data/$set
  files=$(ls "$dir"/*.tfrecord)
  bytes=$(du -cb $files | tail -1 | cut -f1)
  records=$("$python" -c "import json;print(json.load(open('$dir/data.manifest.json'))['records'])")
  "$bin" schema "$dir" --format python > "$data/spec-$set.py"
  cat $files > /dev/null
  s=$(date +%s.%N); for _ in 1 2 3; do cat $files > /dev/null; done; e=$(date +%s.%N)
  cat_rps=$(echo "3 * $records / ($e - $s)" | bc -l)
  echo
  echo "== $set: $(echo $files | wc -w) shards, $records records, $(echo "$bytes/1000000" | bc) MB, $(nproc) cores"
  printf "%-44s %14s %10s\n" "reader" "records/s" "MB/s"
  printf "%-44s %14.0f %10.0f\n" "cat (ceiling)" "$cat_rps" "$(echo "$cat_rps * $bytes / $records / 1000000" | bc -l)"
  tf_best=0
  while IFS=$'\t' read -r name n sec; do
    rps=$(echo "$n / $sec" | bc -l)
    printf "%-44s %14.0f %10.0f\n" "$name" "$rps" "$(echo "$rps * $bytes / $records / 1000000" | bc -l)"
    case $name in *parse*) [ "$(echo "$rps > $tf_best" | bc)" = 1 ] && tf_best=$rps ;; esac
  done < <(TF_CPP_MIN_LOG_LEVEL=3 "$python" scripts/tf_read_bench.py "$data/spec-$set.py" $files 2>/dev/null)
  json=$("$bin" bench "$dir" --json --compare --epochs 2 --drop-remainder)
  read -r ours base ours_cpu base_cpu < <(echo "$json" | "$python" -c "
import json,sys; r=json.load(sys.stdin)
print(r['epochs'][1]['records_per_sec'], r['baseline']['epochs'][1]['records_per_sec'],
      r['cpu_seconds_per_million_records'], r['baseline']['cpu_seconds_per_million_records'])")
  printf "%-44s %14.0f %10.0f   %.2f CPU-s/M records\n" "tfshard bench (pipeline, warm epoch)" "$ours" "$(echo "$ours * $bytes / $records / 1000000" | bc -l)" "$ours_cpu"
  printf "%-44s %14.0f %10.0f   %.2f CPU-s/M records\n" "tfshard sequential baseline (warm epoch)" "$base" "$(echo "$base * $bytes / $records / 1000000" | bc -l)" "$base_cpu"
  printf "ours / best tf.data parse: %.1fx   ours / cat: %.0f%%   pipeline / baseline: %.2fx\n" \
    "$(echo "$ours / $tf_best" | bc -l)" "$(echo "100 * $ours / $cat_rps" | bc -l)" "$(echo "$ours / $base" | bc -l)"
done
