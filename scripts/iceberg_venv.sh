#!/usr/bin/env bash
# Creates (once) the git-ignored .venv-iceberg with pyiceberg (the Iceberg project's
# Python library: SQL catalog on SQLite, pyarrow I/O; pyiceberg-core for the day transform) from PyPI, and prints its folder.
# The Iceberg tests (tests/cli/iceberg.rs) write their tables with it and take the
# expected rows from its own reader; scripts/iceberg_tables.py is their script.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="${TFSHARD_ICEBERG_VENV:-$root/.venv-iceberg}"
pins=("pyiceberg[sql-sqlite,pyarrow,pyiceberg-core]==0.12.0" pyiceberg-core==0.10.1 pyarrow==26.0.1 sqlalchemy==2.1.9)
check='import pyiceberg, pyarrow
assert (pyiceberg.__version__, pyarrow.__version__) == ("0.12.0", "26.0.1")'
if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" >&2
fi
echo "$venv"
