#!/usr/bin/env bash
# Creates (once) the git-ignored .venv-delta with deltalake (delta-rs's Python writer and
# reader) and pyarrow from PyPI, and prints its folder. The Delta tests
# (tests/cli/delta.rs) write their tables with it and take the expected rows from its
# own reader (DataFusion applies deletion vectors); scripts/delta_tables.py is their
# script. Kept apart from .venv: TensorFlow and these pin different packages.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="${TFSHARD_DELTA_VENV:-$root/.venv-delta}"
pins=(deltalake==1.6.6 pyarrow==26.0.1)
check='import deltalake, pyarrow
assert (deltalake.__version__, pyarrow.__version__) == ("1.6.6", "26.0.1")'
if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" >&2
fi
echo "$venv"
