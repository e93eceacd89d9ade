#!/usr/bin/env bash
# The Python module's reader against the Python readers people use, same shards (the
# standard table in 32 MiB shards), one full epoch into NumPy batches of 256, page cache
# warm, each reader in its own process: tfshard.Dataset, tf.data's
# TFRecordDataset.batch(256).map(parse_example, AUTOTUNE).prefetch().as_numpy_iterator(),
# and the PyPI `tfrecord` reader (tfrecord_loader), the last two parsing two of the three
# features (tfshard.Dataset both ways: all three, and columns=["x", "y"]). Peak RSS of
# each, and of `tfshard bench` on the same shards. Ratios are to tfshard.Dataset parsing
# the same two features; each reader's best of three runs.
#
#   scripts/bench_python.sh
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
standard_shards
dir=$data/shards-32mib
wheel=$(scripts/build_wheel.sh 2>/dev/null)
# TensorFlow's venv, with the wheel and the PyPI reader (pinned) beside it.
"$python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel"
"$python" -m pip install --quiet --disable-pip-version-check tfrecord==1.14.6 crc32c==2.9.post0
records=$("$python" -c "import json;print(json.load(open('$dir/data.manifest.json'))['records'])")
cat "$dir"/*.tfrecord > /dev/null
echo "== $records records, $(ls "$dir"/*.tfrecord | wc -l) shards, $(nproc) cores; batches of 256, one epoch"
printf "%-58s %12s %10s %14s\n" reader records/s "peak MiB" "vs tfshard"
declare -A rate peak
for reader in tfshard tfshard-xy tfshard-arrow tfdata tfrecord; do
  best=0
  for _ in 1 2 3; do
    /usr/bin/time -f "%M" -o "$data/time.txt" "$python" scripts/python_read_bench.py "$reader" "$dir" > "$data/out.txt"
    read -r n s < "$data/out.txt"
    [ "$n" = "$records" ] || { echo "$reader read $n of $records records" >&2; exit 1; }
    r=$(echo "$n / $s" | bc -l)
    [ "$(echo "$r > $best" | bc)" = 1 ] && best=$r
    peak[$reader]=$(( $(cat "$data/time.txt") / 1024 ))
  done
  rate[$reader]=$best
  [ "$reader" = tfrecord ] && break
done
/usr/bin/time -f "%M" -o "$data/time.txt" "$bin" bench "$dir" --batch-size 256 --shuffle-buffer 0 --epochs 1 --quiet > /dev/null
bench_peak=$(( $(cat "$data/time.txt") / 1024 ))
for reader in tfshard tfshard-xy tfshard-arrow tfdata tfrecord; do
  name=$reader
  case $reader in
    tfshard) name="tfshard.Dataset (NumPy, 3 features)" ;;
    tfshard-xy) name='tfshard.Dataset(columns=["x", "y"])' ;;
    tfshard-arrow) name='tfshard.Dataset(format="arrow", 3 features)' ;;
    tfdata) name="tf.data batch(256).map(parse_example).prefetch()" ;;
    tfrecord) name="PyPI tfrecord 1.14.6 tfrecord_loader" ;;
  esac
  printf "%-58s %12.0f %10d %14s\n" "$name" "${rate[$reader]}" "${peak[$reader]}" \
    "$(echo "scale=1; ${rate[tfshard-xy]} / ${rate[$reader]}" | bc)x"
done
printf "%-58s %12s %10d\n" "tfshard bench (same shards, batch 256, one epoch)" "" "$bench_peak"
echo "peak memory, tfshard.Dataset / tfshard bench: $(echo "scale=2; ${peak[tfshard]} / $bench_peak" | bc)"
