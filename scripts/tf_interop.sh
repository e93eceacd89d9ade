#!/usr/bin/env bash
# TensorFlow reads what tfshard writes. Builds nothing new: uses the binary and example
# that `cargo test` already built (set TFSHARD to use another binary).
#
#   scripts/tf_interop.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=$(scripts/venv.sh)
bin=${TFSHARD:-$root/target/debug/tfshard}
example=${TFSHARD_WRITE_RECORDS:-$root/target/debug/examples/write_records}
[ -x "$bin" ] || cargo build --quiet
[ -x "$example" ] || cargo build --quiet --example write_records
export TFSHARD_READ_BATCHES=${TFSHARD_READ_BATCHES:-$root/target/debug/examples/read_batches}
[ -x "$TFSHARD_READ_BATCHES" ] || cargo build --quiet --example read_batches
work="$root/target/interop"
rm -rf "$work"
mkdir -p "$work"
"$example" "$work/library" >/dev/null
# Iceberg tables written by pyiceberg (its own venv: it pins other packages than TensorFlow).
icevenv=$(scripts/iceberg_venv.sh)
"$icevenv/bin/python" scripts/iceberg_tables.py "$work/iceberg-tables" >/dev/null
# A Hive table through the S3 server: converted S3 -> S3, copied down with a plain client
# (TensorFlow cannot reach the server: it has no S3 file system without tensorflow-io).
if s3venv=$(TFSHARD_S3_VENV=${TFSHARD_S3_VENV:-} scripts/s3_venv.sh 2>/dev/null); then
  source scripts/moto.sh
  start_moto "$s3venv"
  s3="$s3venv/bin/python scripts/s3_client.py"
  $s3 mb interop
  $s3 put-dir testdata/hive interop tables/hive
  "$bin" convert parquet s3://interop/tables/hive -o s3://interop/out/hive --quiet
  "$bin" convert parquet s3://interop/tables/hive/year=2021 -o s3://interop/out/hive-2021 \
    --partition-base s3://interop/tables/hive --quiet
  $s3 get-dir interop out "$work/s3"
fi
TF_CPP_MIN_LOG_LEVEL=3 "$python" scripts/tf_interop.py "$bin" "$work"
