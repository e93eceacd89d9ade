#!/usr/bin/env bash
# Many machines on one, in one run:
#
#   finalize of a ~2 GB, 64-shard output     (goal: under 1 s; it reads no shard data)
#   planning 10,000 row groups in 1,000 files (goal: under 2 s)
#   two workers at once, then finalize, vs one --threads 2 run of the standard table
#                                             (goal: at most 1.2x)
#
#   scripts/bench_workers.sh
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
[ -d "$data/standard-2000000" ] || "$python" scripts/make_standard_table.py "$data/standard-2000000"
now() { date +%s.%N; }
elapsed() { echo "$2 - $1" | bc -l; }
work="$data/workers"
rm -rf "$work"; mkdir -p "$work"

# 1. Finalize: the standard table five times over (~2 GB of records), 2 workers, 32 MiB shards.
inputs=()
for _ in 1 2 3 4 5; do inputs+=("$data"/standard-2000000/*.parquet); done
for i in 0 1; do
  "$bin" convert parquet "${inputs[@]}" -o "$work/big" --num-workers 2 --worker-index $i \
    --target-shard-size 32MiB --quiet
done
t0=$(now); summary=$("$bin" finalize "$work/big" --json); t1=$(now)
printf 'finalize: %s shards, %.1f GB: %.3f s (goal < 1 s)\n' \
  "$(echo "$summary" | python3 -c 'import json,sys; print(json.load(sys.stdin)["shards"])')" \
  "$(echo "$summary" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes"]/1e9)')" \
  "$(elapsed "$t0" "$t1")"
rm -rf "$work/big"

# 2. Planning: 1,000 files of 10 row groups each.
"$python" - "$work/many" <<'PY'
import os, sys
import pyarrow as pa, pyarrow.parquet as pq
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
t = pa.table({"id": pa.array(range(100), pa.int64()), "v": pa.array([0.5] * 100, pa.float32())})
for f in range(1000):
    pq.write_table(t, f"{out}/part-{f:04}.parquet", row_group_size=10)
PY
t0=$(now)
TFSHARD_FAILPOINTS=convert:planned=exit "$bin" convert parquet "$work/many" -o "$work/many-out" \
  --num-workers 8 --worker-index 3 --quiet || true
t1=$(now)
printf 'planning 10,000 row groups in 1,000 files (footers read, ranges cut): %.2f s (goal < 2 s)\n' "$(elapsed "$t0" "$t1")"

# 3. Two workers at once vs one run with --threads 2.
best() { sort -g | head -1; }
one=(); two=()
for _ in 1 2 3; do
  rm -rf "$work/one" "$work/two"
  t0=$(now); "$bin" convert parquet "$data/standard-2000000" -o "$work/one" --threads 2 --quiet; t1=$(now)
  one+=("$(elapsed "$t0" "$t1")")
  t0=$(now)
  "$bin" convert parquet "$data/standard-2000000" -o "$work/two" --num-workers 2 --worker-index 0 --threads 1 --quiet &
  "$bin" convert parquet "$data/standard-2000000" -o "$work/two" --num-workers 2 --worker-index 1 --threads 1 --quiet &
  wait
  "$bin" finalize "$work/two" --quiet
  t1=$(now)
  two+=("$(elapsed "$t0" "$t1")")
done
o=$(printf '%s\n' "${one[@]}" | best); w=$(printf '%s\n' "${two[@]}" | best)
printf 'standard table: one run --threads 2 %.2f s; two workers (--threads 1 each) + finalize %.2f s; ratio %.2f (goal <= 1.2; best of 3)\n' \
  "$o" "$w" "$(echo "$w / $o" | bc -l)"
cmp <(cat "$work/one"/data-*.tfrecord) <(cat "$work/two"/data-*.tfrecord) && echo "same records, byte for byte"
rm -rf "$work"
