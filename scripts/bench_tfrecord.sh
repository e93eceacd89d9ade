#!/usr/bin/env bash
# Existing TFRecords in, each line in one run beside its alternative:
#
#   reshard: the standard records (2M Examples, ~404 MB) in 256 MiB shards into 32 MiB
#            shards   vs   `cat` of the same bytes into one file plus `sync` of it
#            (goal: at most 1.3x); our set, whose manifest gives the spec, and the same
#            files with no manifest (as Spark or Beam leave them: every record parsed);
#            and beside `cat` into files of 32 MiB each made durable (fsync of each, as
#            tfshard syncs each shard before publishing it): the same disk work
#   gzip in: the same records as gzip shards into plain shards   vs   `pigz -dc -p 2` of
#            the same inputs into one file plus `sync` (goal: at most 1.2x)
#   shuffle: the reshard with --shuffle   vs   the plain reshard (goal: at most 2x)
#   and the peak RSS of each run (goal without shuffle: at most 64 MiB)
#
#   scripts/bench_tfrecord.sh        (RUNS=3 by default: medians of interleaved runs)
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
runs=${RUNS:-3}
command -v pigz > /dev/null || { echo "pigz is needed (apt-get install pigz)" >&2; exit 1; }
[ -d "$data/standard-2000000" ] || "$python" scripts/make_standard_table.py "$data/standard-2000000"
in256="$data/records-256mib"
ingz="$data/records-256mib-gz"
if [ ! -f "$in256/data.manifest.json" ]; then
  "$bin" convert parquet "$data"/standard-2000000/*.parquet -o "$in256" --overwrite --quiet --target-shard-size 256MiB
fi
if [ ! -f "$ingz/data.manifest.json" ]; then
  "$bin" convert parquet "$data"/standard-2000000/*.parquet -o "$ingz" --overwrite --quiet --target-shard-size 256MiB --compression gzip
fi
# The same shards with no manifest beside them.
bare="$data/records-256mib-bare"
rm -rf "$bare"; mkdir -p "$bare"
for f in "$in256"/*.tfrecord; do ln "$f" "$bare/$(basename "$f")"; done
out="$data/tfrecord-out"
cat_out="$data/cat-out.tfrecord"
split_out="$data/split-out"
bytes=$(cat "$in256"/*.tfrecord | wc -c)
gz_bytes=$(cat "$ingz"/*.gz | wc -c)

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A all peak
timed() { # NAME CMD...: one run, its seconds and peak RSS kept
  local name=$1; shift
  rm -rf "$out" "$cat_out" "$split_out"; mkdir -p "$split_out"; sync
  /usr/bin/time -f "%e %M" -o "$data/time.txt" "$@" > /dev/null
  read -r s kb < "$data/time.txt"
  all[$name]="${all[$name]:-} $s"
  [ "$kb" -gt "${peak[$name]:-0}" ] && peak[$name]=$kb
  return 0
}
# Warm the page cache: every run reads its inputs from memory, as `cat` does.
cat "$in256"/*.tfrecord "$ingz"/*.gz > /dev/null
for _ in $(seq "$runs"); do
  timed cat bash -c "cat $in256/*.tfrecord > $cat_out && sync $cat_out"
  timed reshard "$bin" convert tfrecord "$in256" -o "$out" --quiet --target-shard-size 32MiB
  timed split bash -c "cat $in256/*.tfrecord | split -b 32MiB - $split_out/part- && sync $split_out/part-* $split_out"
  timed bare "$bin" convert tfrecord "$bare" -o "$out" --quiet --target-shard-size 32MiB
  timed pigz bash -c "pigz -dc -p 2 $ingz/*.gz > $cat_out && sync $cat_out"
  timed gunzip "$bin" convert tfrecord "$ingz" -o "$out" --quiet --target-shard-size 32MiB
  timed shuffle "$bin" convert tfrecord "$in256" -o "$out" --quiet --target-shard-size 32MiB --shuffle
done
rm -rf "$out" "$cat_out" "$split_out"
m() { printf '%s\n' ${all[$1]} | median; }
ratio() { echo "$(m "$1") / $(m "$2")" | bc -l | cut -c1-4; }
mib() { echo "$(( ${peak[$1]} / 1024 )) MiB"; }
for k in cat split reshard bare pigz gunzip shuffle; do echo "  $k runs:${all[$k]}"; done
echo "inputs: $bytes bytes of records in $(ls "$in256"/*.tfrecord | wc -l) plain shards; $gz_bytes bytes gzip; $runs interleaved runs, medians"
echo "reshard to 32 MiB:   tfshard $(m reshard) s (peak $(mib reshard)), cat + sync $(m cat) s: ratio $(ratio reshard cat) (goal <= 1.3)"
echo "  same durability:   tfshard $(m reshard) s, cat into 32 MiB files + fsync of each $(m split) s: ratio $(ratio reshard split)"
echo "  no manifest:       tfshard $(m bare) s (peak $(mib bare)), cat + sync $(m cat) s: ratio $(ratio bare cat) (every record parsed)"
echo "gzip in, plain out:  tfshard $(m gunzip) s (peak $(mib gunzip)), pigz -dc -p 2 + sync $(m pigz) s: ratio $(ratio gunzip pigz) (goal <= 1.2)"
echo "--shuffle:           tfshard $(m shuffle) s (peak $(mib shuffle)), the plain reshard $(m reshard) s: ratio $(ratio shuffle reshard) (goal <= 2)"
