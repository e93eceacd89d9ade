#!/usr/bin/env bash
# The trainer's reader on the standard shards (2M records of a float[32] x, an int64 y and
# a 16-byte id, in 32 MiB shards; page cache warm), with the release wheel in the torch
# venv: each reader alone, in its own process (records/s and peak RSS, best of three),
# then the fed-model benchmark (scripts/bench_trainer.py: a small model fed by each
# reader beside synthetic tensors).
#
#   scripts/bench_trainer.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
data=target/bench-data
mkdir -p "$data"
wheel=$(scripts/build_wheel.sh 2>/dev/null)
tv=$(scripts/torch_venv.sh "$wheel")
if [ ! -f "$data/shards-32mib/data.manifest.json" ]; then
  [ -d "$data/standard-2000000" ] || "$(scripts/python_venv.sh)/bin/python" scripts/make_standard_table.py "$data/standard-2000000"
  "$tv/bin/tfshard" convert parquet "$data"/standard-2000000/*.parquet -o "$data/shards-32mib" --overwrite --quiet --target-shard-size 32MiB
fi
dir=$data/shards-32mib
cat "$dir"/*.tfrecord > /dev/null
echo "== $(ls "$dir"/*.tfrecord | wc -l) shards of $dir, $(nproc) cores; batches of 256, columns x, y"
printf "%-44s %12s %10s %10s\n" reader records/s "peak MiB" "vs seq"
declare -A rate
for reader in seq global blocks blocks-marks records1 records256; do
  best=0
  for _ in 1 2 3; do
    /usr/bin/time -f "%M" -o "$data/time.txt" "$tv/bin/python" scripts/bench_trainer.py "$dir" --reader $reader > "$data/out.txt"
    read -r n s < "$data/out.txt"
    r=$(echo "$n / $s" | bc -l)
    [ "$(echo "$r > $best" | bc)" = 1 ] && best=$r
  done
  rate[$reader]=$best
  printf "%-44s %12.0f %10d %9.2fx\n" "$reader" "$best" $(( $(cat "$data/time.txt") / 1024 )) "$(echo "$best / ${rate[seq]}" | bc -l)"
done
echo
"$tv/bin/python" scripts/bench_trainer.py "$dir" --steps 300 --workers 2 2>&1 | grep -v Warning
