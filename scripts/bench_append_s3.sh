#!/usr/bin/env bash
# `convert delta --append` with the table and the set in S3 (moto on 127.0.0.1), beside a
# full conversion S3 -> S3 of the same version in the same run (interleaved; medians):
# v1 of scripts/bench_append.sh's table (the standard table + a commit adding 1% of
# its rows), shards of 16 MiB (goal: <= 10% + 0.5 s).
#
#   scripts/bench_append.sh && scripts/bench_append_s3.sh     (RUNS=3 by default)
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
runs=${RUNS:-3}
table="$data/append-delta"
[ -d "$table/_delta_log" ] || { echo "run scripts/bench_append.sh first (it writes $table)" >&2; exit 2; }
s3venv=$(scripts/s3_venv.sh)
source scripts/moto.sh
start_moto "$s3venv"
s3="$s3venv/bin/python scripts/s3_client.py"
$s3 mb bench
$s3 put-dir "$table" bench table
src=s3://bench/table
size=(--target-shard-size 16MiB --quiet)
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
seconds() {
  local t0=$EPOCHREALTIME
  "$@"
  echo "$EPOCHREALTIME - $t0" | bc -l | awk '{printf "%.3f\n", $1}'
}
a=(); f=()
for i in $(seq "$runs"); do
  "$bin" convert delta "$src" -o "s3://bench/append-$i" --version 0 "${size[@]}"
  a+=("$(seconds "$bin" convert delta "$src" -o "s3://bench/append-$i" --version 1 --append "${size[@]}")")
  f+=("$(seconds "$bin" convert delta "$src" -o "s3://bench/full-$i" --version 1 "${size[@]}")")
done
as=$(printf '%s\n' "${a[@]}" | median); fs=$(printf '%s\n' "${f[@]}" | median)
echo "moto S3, v1 (+1% rows): --append ${as} s, full conversion S3 -> S3 of version 1 ${fs} s: $(echo "100 * $as / $fs" | bc -l | cut -c1-5)% (goal <= 10% + 0.5 s)"
