#!/usr/bin/env bash
# Creates (once) the venv of the model-based append histories (scripts/model_appends.py):
# deltalake and pyiceberg to write the tables, pyroaring for deletion vectors, pinned. It
# lives outside the clone, in a folder named by its pins, so that every fresh clone of a
# CI run reuses it. Prints its folder.
#
#   scripts/model_venv.sh
set -euo pipefail
pins=(deltalake==1.6.6 "pyiceberg[sql-sqlite,pyarrow,pyiceberg-core]==0.12.0" pyiceberg-core==0.10.1
  pyarrow==26.0.1 sqlalchemy==2.1.9 pyroaring==1.2.0)
key=$(printf '%s\n' "${pins[@]}" | sha256sum | cut -c1-12)
venv="${TFSHARD_MODEL_VENV:-$HOME/.cache/tfshard/venv-model-$key}"
check='import deltalake, pyiceberg, pyarrow, pyroaring, importlib.metadata as m
assert (deltalake.__version__, pyiceberg.__version__, pyarrow.__version__, m.version("pyroaring")) == ("1.6.6", "0.12.0", "26.0.1", "1.2.0")'
if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  mkdir -p "$(dirname "$venv")"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}" >&2
fi
echo "$venv"
