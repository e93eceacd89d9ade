#!/usr/bin/env bash
# Delta Lake tables, each line in one run beside its alternative:
#
#   convert delta   on the standard table written by deltalake (~6 data files, x as
#                   array<float>)   vs   convert parquet on the same data files
#                   (goal: at most 1.15x)
#   planning the 300,000-file log (examples/delta_plan.rs)   vs   deltalake's load of
#                   the same table (DeltaTable(path) and its file list)
#   convert delta   vs   Ray Data's read_delta(...).write_tfrecords(...) (.venv-ray), one
#                   run each: time and peak RSS
#
#   scripts/bench_delta.sh        (RUNS=3 by default: 9 interleaved pairs, 3 planning runs)
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
runs=${RUNS:-3}
delta_python=$(scripts/delta_venv.sh)/bin/python
standard_delta
table="$data/standard-delta"
# The same data files, as a plain folder `convert parquet` takes.
plain="$data/standard-delta-plain"
rm -rf "$plain"; mkdir -p "$plain"
for f in "$table"/*.parquet; do ln "$f" "$plain/$(basename "$f")"; done
files=$(ls "$plain" | wc -l)

# Interleaved runs (a sub-second run is noisy: each pair runs under the same conditions),
# medians of each.
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
d=(); p=(); dr=0; pr=0
for _ in $(seq "$((runs * 3))"); do
  for which in delta parquet; do
    rm -rf "$data/delta-out"; sync
    if [ $which = delta ]; then input=("$table"); else input=("$plain"); fi
    /usr/bin/time -f "%e %M" -o "$data/time.txt" "$bin" convert $which "${input[@]}" -o "$data/delta-out" --quiet --target-shard-size 32MiB
    read -r s kb < "$data/time.txt"
    if [ $which = delta ]; then d+=("$s"); [ "$kb" -gt "$dr" ] && dr=$kb; else p+=("$s"); [ "$kb" -gt "$pr" ] && pr=$kb; fi
  done
done
ds=$(printf '%s\n' "${d[@]}" | median); ps_=$(printf '%s\n' "${p[@]}" | median)
echo "standard table as Delta ($files data files), $((runs * 3)) interleaved runs: convert delta ${ds} s (peak $((dr / 1024)) MiB), convert parquet on the same files ${ps_} s (peak $((pr / 1024)) MiB): ratio $(echo "$ds / $ps_" | bc -l | cut -c1-4) (goal <= 1.15)"

# Planning the 300,000-file log.
big="$data/300k-add-files-100-col-partitioned"
if [ ! -d "$big" ]; then
  archive=testdata/delta-kernel/300k-add-files-100-col-partitioned.tar.zst
  tar --zstd -xf "$archive" -C "$data"
fi
cargo build --release --quiet --example delta_plan
for i in $(seq "$runs"); do
  ours=$("$root/target/release/examples/delta_plan" "$big")
  theirs=$("$delta_python" -c "
import sys, time
from deltalake import DeltaTable
t = time.perf_counter(); dt = DeltaTable(sys.argv[1]); n = len(dt.file_uris())
print('{\"version\": %d, \"files\": %d, \"seconds\": %.3f}' % (dt.version(), n, time.perf_counter() - t))" "$big")
  echo "300k-file log, run $i: tfshard plan $ours; deltalake load $theirs"
done

# Ray Data, one run each. Its read_delta reads through deltalake and its TFRecord writer
# through TensorFlow and crc32c: the benchmark installs them into .venv-ray (pinned as
# .venv-delta and .venv pin them); the engine tests need none of them.
scripts/engines_venv.sh >/dev/null
ray_python="$root/.venv-ray/bin/python"
"$ray_python" -c "import deltalake, tensorflow, crc32c, pandas" 2>/dev/null ||
  "$root/.venv-ray/bin/pip" install --quiet --disable-pip-version-check "ray[data]==2.60.0" \
    deltalake==1.6.6 tensorflow-cpu==2.21.0 crc32c==2.8
rm -rf "$data/delta-ray"
runs=1 clear="$data/delta-ray" time_run python-ray "$ray_python" -c "
import sys, ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
ray.data.read_delta(sys.argv[1]).write_tfrecords(sys.argv[2])" "$table" "$data/delta-ray"
runs=1 clear="$data/delta-out" time_run delta1 "$bin" convert delta "$table" -o "$data/delta-out" --quiet --target-shard-size 32MiB
echo "Ray Data read_delta + write_tfrecords (num_cpus=2): ${secs[python-ray]} s, peak ${rss[python-ray]} MiB (the driver; Ray's workers are apart); convert delta: ${secs[delta1]} s, peak ${rss[delta1]} MiB"
