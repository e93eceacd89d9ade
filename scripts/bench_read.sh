#!/usr/bin/env bash
# The reader pipeline against tf.data, same shards, same cores, page cache warm:
#   1. the standard table in 32 MiB shards (~200-byte records, 13 shards)
#   2. ~100 KB JPEG records (the image benchmark's 6,000 JPEGs in 32 MiB shards)
# For each: cat (ceiling), tf.data raw framing, tf.data's tutorial pipeline (per-record
# parse) and its batch-then-parse variant, tfshard bench (full pipeline, warm epochs after
# the first, batch 64, shuffle 10000, drop remainder; mapped, and read into buffers)
# and our sequential baseline.
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
    case $name in *raw*) ;; *parse*) [ "$(echo "$rps > $tf_best" | bc)" = 1 ] && tf_best=$rps ;; esac
  done < <(TF_CPP_MIN_LOG_LEVEL=3 "$python" scripts/tf_read_bench.py "$data/spec-$set.py" $files 2>/dev/null)
  # Warm epochs only (the first maps the files and warms the allocator); more of them
  # for the JPEG shards, whose epochs last a fraction of a second.
  epochs=3; [ "$set" = jpeg-shards ] && epochs=9
  warm() {
    "$python" -c "
import json,sys; r=json.load(sys.stdin)
def warm(run):
    e = run['epochs'][1:]
    return sum(x['records'] for x in e) / sum(x['seconds'] for x in e)
print(warm(r), warm(r.get('baseline', r)), r['cpu_seconds_per_million_records'],
      r.get('baseline', r)['cpu_seconds_per_million_records'], r['epochs'][-1]['peak_anon_rss_bytes'] >> 20)"
  }
  read -r ours base ours_cpu base_cpu anon < <("$bin" bench "$dir" --json --compare --epochs $epochs --drop-remainder | warm)
  read -r buffered _ buffered_cpu _ buffered_anon < <("$bin" bench "$dir" --json --no-mmap --epochs $epochs --drop-remainder | warm)
  row() { printf "%-44s %14.0f %10.0f   %.2f CPU-s/M records%s\n" "$1" "$2" "$(echo "$2 * $bytes / $records / 1000000" | bc -l)" "$3" "$4"; }
  row "tfshard bench (pipeline, warm epochs)" "$ours" "$ours_cpu" ", anon memory $anon MiB"
  row "tfshard bench --no-mmap (read into buffers)" "$buffered" "$buffered_cpu" ", anon memory $buffered_anon MiB"
  row "tfshard sequential baseline (warm epochs)" "$base" "$base_cpu" ""
  printf "ours / best tf.data parse: %.1fx   ours / cat: %.0f%%   pipeline / baseline: %.2fx\n" \
    "$(echo "$ours / $tf_best" | bc -l)" "$(echo "100 * $ours / $cat_rps" | bc -l)" "$(echo "$ours / $base" | bc -l)"
done
