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
work="$root/target/interop"
rm -rf "$work"
mkdir -p "$work"
"$example" "$work/library" >/dev/null
TF_CPP_MIN_LOG_LEVEL=3 "$python" scripts/tf_interop.py "$bin" "$work"
