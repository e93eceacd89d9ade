#!/usr/bin/env bash
# SHA-256 of every uncompressed output a binary writes for the repository's inputs: the
# parquet-testing files that convert, testdata/small.parquet (plain, --index, shuffled
# splits, --min-shards), the image folder, the Hive folder, the Delta and Iceberg tables,
# the TFRecord inputs, and (when present) the standard benchmark
# table. Manifests are hashed without their "created" and "tfshard_version" fields.
# Two binaries that print the same lines write the same bytes.
#
#   scripts/output_hashes.sh target/release/tfshard > before.txt
#   ... change the code, rebuild ...
#   scripts/output_hashes.sh target/release/tfshard | diff before.txt -
#
# STANDARD=path/to/standard-2000000 adds the standard table (scripts/bench_data.sh
# generates it under target/bench-data).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(realpath "${1:?usage: output_hashes.sh BINARY}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

hash_dir() { # LABEL DIR
  local label=$1 dir=$2
  (cd "$dir" && find . -type f ! -name '.*' | LC_ALL=C sort | while read -r f; do
    if [[ $f == *.manifest.json ]]; then
      h=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); m.pop("created",None); m.pop("tfshard_version",None); sys.stdout.write(json.dumps(m,sort_keys=True))' "$f" | sha256sum | cut -c1-64)
    else
      h=$(sha256sum "$f" | cut -c1-64)
    fi
    echo "$label/${f#./} $h"
  done)
}

convert() { # LABEL ARGS...
  local label=$1; shift
  rm -rf "$work/out"
  if "$bin" convert "$@" -o "$work/out" --quiet 2>/dev/null; then
    hash_dir "$label" "$work/out"
  else
    echo "$label: failed"
  fi
}

small=$root/testdata/small.parquet
convert small parquet "$small" --target-shard-size 100KB
convert small-index parquet "$small" --target-shard-size 100KB --index
convert small-min-shards parquet "$small" --min-shards 7
convert small-sequence parquet "$small" --record-type sequence-example
convert small-shuffle-split parquet "$small" --shuffle --seed 3 --split train=0.8,test=0.2 --target-shard-size 50KB
convert small-split-key parquet "$small" --split train=0.5,test=0.5 --split-key id
convert small-shuffle-min-shards parquet "$small" --shuffle --split train=0.9,test=0.1 --min-shards 3 --target-shard-size 200KB
convert small-threads-1 parquet "$small" --target-shard-size 100KB --threads 1
convert small-gzip-threads-1 parquet "$small" --target-shard-size 100KB --threads 1 --compression gzip
convert small-gzip-threads-2 parquet "$small" --target-shard-size 100KB --threads 2 --compression gzip
convert images images "$root/testdata/images"
convert small-tfds parquet "$small" --tfds small_set --split train=0.8,test=0.2 --split-key id
convert images-shuffle images "$root/testdata/images" --shuffle --split a=0.5,b=0.5
convert hive parquet "$root/testdata/hive"
for t in $(cd "$root/testdata/delta-kernel" && find . -mindepth 1 -maxdepth 1 -type d | LC_ALL=C sort); do
  convert "delta/${t#./}" delta "$root/testdata/delta-kernel/$t" | grep -v ': failed$' || true
done
convert delta-table delta "$root/testdata/delta-table"
convert delta-table-v0 delta "$root/testdata/delta-table" --version 0
convert iceberg iceberg "$root/testdata/iceberg-table"
convert iceberg-split iceberg "$root/testdata/iceberg-table" --split a=0.5,b=0.5 --target-shard-size 4KB
for t in $(cd "$root/testdata/tfrecord-in" && find . -mindepth 1 -maxdepth 1 -type d | LC_ALL=C sort); do
  convert "tfrecord/${t#./}" tfrecord "$root/testdata/tfrecord-in/$t" --target-shard-size 32KB | grep -v ': failed$' || true
done
convert tfrecord-shuffle-gzip tfrecord "$root/testdata/tfrecord-in/spark" --shuffle --seed 2 --compression gzip --target-shard-size 32KB
for f in $(cd "$root/testdata/parquet-testing" && find data bad_data -type f | LC_ALL=C sort); do
  convert "corpus/$f" parquet "$root/testdata/parquet-testing/$f" | grep -v ': failed$' || true
done
if [ -n "${STANDARD:-}" ]; then
  convert standard parquet "$STANDARD" --target-shard-size 32MiB
  convert standard-shuffle parquet "$STANDARD" --target-shard-size 32MiB --shuffle
fi
