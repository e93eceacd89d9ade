#!/usr/bin/env bash
# The trainer's reader on the standard shards (2M records of a float[32] x, an int64 y and
# a 16-byte id, in 32 MiB shards; page cache warm), with the release wheel in the torch
# venv: each reader alone, in its own process (records/s of its second epoch and of its
# first, with the opening and the offset table's scan; peak RSS, and peak anonymous
# memory, the RSS without the shards' mapped pages; best of three rounds, each reader
# once a round; memory: the most of the three),
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
printf "%-16s %12s %8s %14s %8s %10s %10s\n" reader records/s "vs seq" "1st epoch r/s" "vs seq" "peak MiB" "anon MiB"
readers=(seq global blocks blocks-marks records1 records256)
declare -A rate first peak anon
for reader in "${readers[@]}"; do rate[$reader]=0 first[$reader]=0 peak[$reader]=0 anon[$reader]=0; done
# Round after round, each reader once a round (a machine whose speed drifts moves them
# alike, and the ratios hold); each reader's best round.
for _ in 1 2 3; do
  for reader in "${readers[@]}"; do
    /usr/bin/time -f "%M" -o "$data/time.txt" "$tv/bin/python" scripts/bench_trainer.py "$dir" --reader $reader > "$data/out.txt"
    read -r n s n1 s1 a < "$data/out.txt"
    r=$(echo "$n / $s" | bc -l)
    r1=$(echo "$n1 / $s1" | bc -l)
    [ "$(echo "$r > ${rate[$reader]}" | bc)" = 1 ] && rate[$reader]=$r
    [ "$(echo "$r1 > ${first[$reader]}" | bc)" = 1 ] && first[$reader]=$r1
    m=$(( $(cat "$data/time.txt") / 1024 ))
    (( m > peak[$reader] )) && peak[$reader]=$m
    (( a > anon[$reader] )) && anon[$reader]=$a
  done
done
for reader in "${readers[@]}"; do
  printf "%-16s %12.0f %7.2fx %14.0f %7.2fx %10d %10d\n" "$reader" "${rate[$reader]}" "$(echo "${rate[$reader]} / ${rate[seq]}" | bc -l)" \
    "${first[$reader]}" "$(echo "${first[$reader]} / ${first[seq]}" | bc -l)" "${peak[$reader]}" "${anon[$reader]}"
done
echo
"$tv/bin/python" scripts/bench_trainer.py "$dir" --steps 300 --workers 2 2>&1 | grep -v Warning
