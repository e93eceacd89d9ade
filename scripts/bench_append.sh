#!/usr/bin/env bash
# `convert delta --append` on the standard table written by deltalake (about six data
# files), each line beside a full conversion of the same version in the same run
# (interleaved; medians), shards of 16 MiB (at the default size six files make two
# shards, and any change would retire most of the set):
#
#   v1: a commit adding 1% of the rows        append vs full   (goal <= 5% + 0.2 s)
#   v2: a delete of 1% of the rows in one file append vs full   (goal <= 35%)
#   v3: a commit adding 1% of the rows onto a set converted in the second of its last
#       commit (v2 written, converted at once)  append vs full   (goal <= 5% + 0.2 s)
#   nothing new: an append at the set's version (goal <= 0.3 s), beside deltalake's
#                load of the table
#
#   scripts/bench_append.sh        (RUNS=3 by default)
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
runs=${RUNS:-3}
delta_python=$(scripts/delta_venv.sh)/bin/python
standard_delta
base="$data/standard-delta"
# A copy of the table that gains v1 (1% more rows) and v2 (1% of one file's rows deleted).
table="$data/append-delta"
rm -rf "$table"; cp -r "$base" "$table"
"$delta_python" - "$table" <<'EOF'
import sys
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

path = sys.argv[1]
dt = DeltaTable(path)
files = sorted(dt.file_uris())
rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
# v1: 1% more rows, copies of the first file's first rows with new ids.
first = pq.read_table(files[0]).slice(0, rows // 100)
first = first.set_column(first.schema.get_field_index("id"), "id",
                         pc.binary_join_element_wise("new-", first["id"], ""))
write_deltalake(path, first, mode="append")
# v2: 1% of the rows deleted, all in one file (the third): an id range in its middle.
ids = pq.read_table(files[2], columns=["id"])["id"].to_pylist()
mid = len(ids) // 2
lo, hi = ids[mid - rows // 200], ids[mid + rows // 200]
DeltaTable(path).delete(f"id >= '{lo}' AND id < '{hi}'")
print(f"{len(files)} data files, {rows} rows; v1 appends {rows // 100}, v2 deletes ids [{lo}, {hi})",
      file=sys.stderr)
EOF
# v2 converted in the second of its commit (the delete above ran a moment ago), then v3:
# 1% more rows again.
"$bin" convert delta "$table" -o "$data/append-v2" --version 2 --overwrite --target-shard-size 16MiB --quiet
"$delta_python" - "$table" <<'EOF'
import sys
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

path = sys.argv[1]
files = sorted(DeltaTable(path).file_uris())
rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
more = pq.read_table(files[0]).slice(0, rows // 100)
# (A file deltalake rewrote holds string views: the ids as strings, as v0's.)
more = more.cast(pa.schema([f.with_type(pa.string()) if f.name == "id" else f for f in more.schema]))
more = more.set_column(more.schema.get_field_index("id"), "id",
                       pc.binary_join_element_wise("v3-", more["id"], ""))
write_deltalake(path, more, mode="append")
EOF

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
size=(--target-shard-size 16MiB --quiet)
# Wall seconds of a command, to the millisecond.
seconds() {
  local t0=$EPOCHREALTIME
  "$@"
  echo "$EPOCHREALTIME - $t0" | bc -l | awk '{printf "%.3f\n", $1}'
}
# The set at version $1, converted once.
"$bin" convert delta "$table" -o "$data/append-v0" --version 0 --overwrite "${size[@]}"
"$bin" convert delta "$table" -o "$data/append-v1" --version 1 --overwrite "${size[@]}"

compare() { # LABEL FROM_SET VERSION GOAL
  local label=$1 from=$2 version=$3 goal=$4 a=() f=()
  # What the append does, once, untimed: its records and the shards it retires.
  rm -rf "$data/append-out"; cp -r "$from" "$data/append-out"
  local did
  did=$("$bin" convert delta "$table" -o "$data/append-out" --version "$version" --append --json |
    grep -o '"records":[0-9]*\|"retired":[0-9]*' | tr '\n' ' ')
  for _ in $(seq "$runs"); do
    rm -rf "$data/append-out" "$data/append-full"
    cp -r "$from" "$data/append-out"; sync
    a+=("$(seconds "$bin" convert delta "$table" -o "$data/append-out" --version "$version" --append "${size[@]}")")
    sync
    f+=("$(seconds "$bin" convert delta "$table" -o "$data/append-full" --version "$version" "${size[@]}")")
  done
  local as fs
  as=$(printf '%s\n' "${a[@]}" | median); fs=$(printf '%s\n' "${f[@]}" | median)
  echo "$label: --append ${as} s (${did% }), full conversion of version $version ${fs} s: $(echo "100 * $as / $fs" | bc -l | cut -c1-5)% (goal $goal)"
}
compare "v1 (+1% rows)" "$data/append-v0" 1 "<= 5% + 0.2 s"
compare "v2 (-1% rows of one file)" "$data/append-v1" 2 "<= 35%"
compare "v3 (+1% rows, onto a set converted in the second of v2's commit)" "$data/append-v2" 3 "<= 5% + 0.2 s"

# Nothing new: planning only.
"$bin" convert delta "$table" -o "$data/append-v1" --append "${size[@]}" >/dev/null
n=()
for _ in $(seq "$runs"); do
  n+=("$(seconds "$bin" convert delta "$table" -o "$data/append-v1" --append "${size[@]}")")
done
ns=$(printf '%s\n' "${n[@]}" | median)
theirs=$("$delta_python" -c "
import sys, time
from deltalake import DeltaTable
t = time.perf_counter(); dt = DeltaTable(sys.argv[1]); n = len(dt.file_uris())
print('%.3f' % (time.perf_counter() - t))" "$table")
echo "nothing new: --append ${ns} s (goal <= 0.3 s); deltalake's load of the table ${theirs} s"

# compact of 20 small generations (20 appends of 25,000 rows of the standard table, one
# or two shards each) beside `cat` of the same shard files into one file + sync (goal
# <= 1.2x).
parts="$data/compact-parts"; grow="$data/compact-table"; set20="$data/compact-20"
if [ ! -f "$parts/part-19.parquet" ]; then
  rm -rf "$parts"; mkdir -p "$parts"
  "$python" - "$data/standard-2000000" "$parts" <<'PY'
import sys
from pathlib import Path
import pyarrow.dataset as ds
import pyarrow.parquet as pq
table = ds.dataset(sys.argv[1], format="parquet").head(500_000)
for i in range(20):
    pq.write_table(table.slice(i * 25_000, 25_000), Path(sys.argv[2]) / f"part-{i:02d}.parquet")
PY
fi
rm -rf "$grow" "$set20"; mkdir -p "$grow"
for i in $(seq -w 0 19); do
  cp "$parts/part-$i.parquet" "$grow/"
  "$bin" convert parquet "$grow" -o "$set20" --append --quiet --target-shard-size 64MiB
done
c=(); k=()
for _ in $(seq "$runs"); do
  rm -rf "$data/compact-run" "$data/cat.out"; cp -r "$set20" "$data/compact-run"; sync
  c+=("$(seconds "$bin" compact "$data/compact-run" --quiet)")
  rm -rf "$data/compact-run"; cp -r "$set20" "$data/compact-run"; sync
  k+=("$(seconds sh -c "cat $data/compact-run/*.tfrecord > $data/cat.out && sync")")
done
cs=$(printf '%s\n' "${c[@]}" | median); ks=$(printf '%s\n' "${k[@]}" | median)
mb=$(du -cm "$set20"/*.tfrecord | tail -1 | cut -f1)
echo "compact of 20 generations ($(ls "$set20"/*.tfrecord | wc -l) shards, $mb MB): ${cs} s; cat + sync ${ks} s: ratio $(echo "$cs / $ks" | bc -l | cut -c1-4) (goal <= 1.2)"
