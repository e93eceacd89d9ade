#!/usr/bin/env bash
# The trainer's reader from S3 (moto on 127.0.0.1): the standard shards in a bucket, an
# epoch of `shuffle="blocks"` beside one of the sequential `Dataset` from the same bucket
# (the second epoch of a process, and its first with the opening),
# each in its own process, alternating, best of RUNS (goal: blocks >= 0.8x the
# sequential's records/s). Twice: shards written with `--index` (their .idx files give
# the records' offsets) and shards without (the first read of each walks its frames: its
# bytes are read twice in a first epoch). Each reader's peak anonymous memory (the most
# of its runs) beside. Run scripts/bench_trainer.sh first (it writes the standard table).
#
#   scripts/bench_trainer_s3.sh            (RUNS=3 by default)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
runs=${RUNS:-3}
data=target/bench-data
[ -f "$data/shards-32mib/data.manifest.json" ] || { echo "run scripts/bench_trainer.sh first (it writes $data/shards-32mib)" >&2; exit 2; }
wheel=$(scripts/build_wheel.sh 2>/dev/null)
tv=$(scripts/torch_venv.sh "$wheel")
if [ ! -f "$data/shards-32mib-idx/data.manifest.json" ]; then
  "$tv/bin/tfshard" convert parquet "$data"/standard-2000000/*.parquet -o "$data/shards-32mib-idx" --overwrite --quiet --target-shard-size 32MiB --index
fi
s3venv=$(scripts/s3_venv.sh)
source scripts/moto.sh
start_moto "$s3venv"
"$s3venv/bin/python" scripts/s3_client.py mb bench
echo "== the standard shards ($(du -sh "$data/shards-32mib" | cut -f1), 32 MiB each) in moto S3, $(nproc) cores; batches of 256, columns x, y"
printf "%-22s %14s %14s %7s %15s %15s %7s %14s %7s\n" shards "seq records/s" "blocks rec/s" ratio "1st epoch: seq" "blocks" ratio "anon MiB: seq" blocks
for set in shards-32mib-idx shards-32mib; do
  "$s3venv/bin/python" scripts/s3_client.py put-dir "$data/$set" bench "$set"
  declare -A rate=([seq]=0 [blocks]=0) first=([seq]=0 [blocks]=0) anon=([seq]=0 [blocks]=0)
  for _ in $(seq "$runs"); do
    for reader in seq blocks; do
      read -r n s n1 s1 a < <("$tv/bin/python" scripts/bench_trainer.py "s3://bench/$set" --reader $reader)
      (( a > anon[$reader] )) && anon[$reader]=$a
      r=$(echo "$n / $s" | bc -l)
      r1=$(echo "$n1 / $s1" | bc -l)
      [ "$(echo "$r > ${rate[$reader]}" | bc)" = 1 ] && rate[$reader]=$r
      [ "$(echo "$r1 > ${first[$reader]}" | bc)" = 1 ] && first[$reader]=$r1
    done
  done
  label=$([ "$set" = shards-32mib-idx ] && echo "with .idx (--index)" || echo "without .idx")
  printf "%-22s %14.0f %14.0f %6.2fx %15.0f %15.0f %6.2fx %14d %7d\n" "$label" "${rate[seq]}" "${rate[blocks]}" \
    "$(echo "${rate[blocks]} / ${rate[seq]}" | bc -l)" "${first[seq]}" "${first[blocks]}" \
    "$(echo "${first[blocks]} / ${first[seq]}" | bc -l)" "${anon[seq]}" "${anon[blocks]}"
done
echo "(goal: blocks >= 0.8x the sequential Dataset from the same bucket)"
