#!/usr/bin/env bash
# Compressed conversion, everything in one run on the same files and cores:
#   1. the deflate back-ends at level 6 over fixed chunks (examples/deflate_backends.rs),
#      on the standard table's records and on the images table's (~92 KB JPEG records);
#   2. tfshard convert --compression gzip|zlib at --threads 1 and 2, beside pigz -6 -p 2
#      and libdeflate-gzip -6 (one thread) compressing the plain records of the same
#      table; sizes on disk; peak RSS; the threads 1 -> 2 speedups; and a check that
#      --threads 1 and 2 wrote the same bytes.
# Needs pigz and libdeflate-gzip (Debian: apt-get install pigz libdeflate-tools).
# Data under target/bench-data (generated, never committed).
#   scripts/bench_deflate.sh            # RUNS=3 (median)
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
runs=${RUNS:-3}
for tool in pigz libdeflate-gzip; do
  command -v "$tool" > /dev/null || { echo "needs $tool (apt-get install pigz libdeflate-tools)" >&2; exit 1; }
done
cargo build --release --quiet --example deflate_backends
standard_shards
table=$data/standard-2000000
images=$data/images-plain.parquet
if [ ! -f "$images" ]; then
  jpeg_folder > /dev/null
  "$python" scripts/make_image_table.py "$data/jpegs" "$images" > /dev/null
fi
[ -f "$data/images-32mib/data.manifest.json" ] ||
  "$bin" convert parquet "$images" -o "$data/images-32mib" --overwrite --quiet --target-shard-size 32MiB
# The plain record streams, as one file each (what pigz and libdeflate-gzip compress).
cat "$data"/shards-32mib/*.tfrecord > "$data/standard.records"
cat "$data"/images-32mib/*.tfrecord > "$data/images.records"
cat "$table"/*.parquet "$images" "$data"/*.records > /dev/null # page cache warm

echo "== deflate back-ends, level 6, $(nproc) threads"
for set in ${BACKENDS-standard images}; do
  echo "-- $set table's records"
  target/release/examples/deflate_backends "$data/$set.records"
done

for set in standard images; do
  input=$table; [ $set = images ] && input=$images
  for c in gzip zlib; do
    for t in 2 1; do
      clear=$data/$set-$c-$t time_run $set-$c-$t \
        "$bin" convert parquet "$input" -o "$data/$set-$c-$t" --quiet --compression $c --threads $t
    done
  done
  time_run $set-pigz sh -c "pigz -6 -p 2 -c $data/$set.records > $data/$set.records.pigz.gz"
  time_run $set-libdeflate sh -c "libdeflate-gzip -6 -c $data/$set.records > $data/$set.records.libdeflate.gz"
done

size() { du -cb "$@" | tail -1 | cut -f1; }
ratio() { echo "$1 / $2" | bc -l | xargs printf "%.2f"; }
echo
echo "== convert, compressed ($(nproc) cores, median of $runs); size on disk vs pigz's"
printf "%-10s %-34s %8s %9s %10s %s\n" "table" "run" "seconds" "peak MiB" "MB" "ratio"
for set in standard images; do
  pigz_bytes=$(size "$data/$set.records.pigz.gz")
  line() { # NAME LABEL BYTES NOTE
    printf "%-10s %-34s %8.2f %9s %10.1f %s\n" "$set" "$2" "${secs[$1]}" "${rss[$1]}" "$(echo "$3/1000000" | bc -l)" "$4"
  }
  line $set-pigz "pigz -6 -p 2 (plain records)" "$pigz_bytes" ""
  line $set-libdeflate "libdeflate-gzip -6 (one thread)" "$(size "$data/$set.records.libdeflate.gz")" ""
  gz=$(size "$data/$set-gzip-2"/*.gz)
  line $set-gzip-2 "tfshard --compression gzip" "$gz" \
    "$(ratio "${secs[$set-gzip-2]}" "${secs[$set-pigz]}")x pigz's time (goal <= 0.6), size $(echo "100*($gz-$pigz_bytes)/$pigz_bytes" | bc -l | xargs printf "%+.2f")% (goal within 1%)"
  line $set-gzip-1 "  --threads 1" "$(size "$data/$set-gzip-1"/*.gz)" \
    "threads 1 -> 2: $(ratio "${secs[$set-gzip-1]}" "${secs[$set-gzip-2]}")x faster (goal >= 1.7)"
  line $set-zlib-2 "tfshard --compression zlib" "$(size "$data/$set-zlib-2"/*.zlib)" ""
  line $set-zlib-1 "  --threads 1" "$(size "$data/$set-zlib-1"/*.zlib)" \
    "threads 1 -> 2: $(ratio "${secs[$set-zlib-1]}" "${secs[$set-zlib-2]}")x faster (goal >= 1.7)"
  for c in gzip zlib; do
    cmp -s <(cat "$data/$set-$c-1"/*.tfrecord.*) <(cat "$data/$set-$c-2"/*.tfrecord.*) ||
      { echo "$set $c: --threads 1 and 2 wrote different bytes" >&2; exit 1; }
  done
done
echo "--threads 1 and 2 wrote the same bytes, gzip and zlib, both tables"
rm -f "$data"/*.records "$data"/*.records.*.gz
