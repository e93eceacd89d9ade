#!/usr/bin/env bash
# Creates (once) the git-ignored .venv-py where the Python module's tests run: the wheel
# scripts/build_wheel.sh built (installed again whenever it changed), pytest, and the
# Arrow producers the tests convert from (pyarrow, polars, duckdb), jsonschema for the
# manifest's schema, and mypy (the typed API, `--strict`), pinned. Prints the
# venv's folder.
#
#   scripts/python_venv.sh [WHEEL]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="${TFSHARD_PY_VENV:-$root/.venv-py}"
pins=(numpy==2.4.6 pyarrow==26.0.1 polars==2.1.0 duckdb==2.0.1 pytest==9.2.0 jsonschema==4.26.0 mypy==2.4.1)
check='import numpy, pyarrow, polars, duckdb, pytest, jsonschema, mypy, importlib.metadata as m
assert (numpy.__version__, pyarrow.__version__, polars.__version__, duckdb.__version__, pytest.__version__, m.version("jsonschema"), m.version("mypy")) == ("2.4.6", "26.0.1", "2.1.0", "2.0.1", "9.2.0", "4.26.0", "2.4.1")'
if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" >&2
fi
wheel=${1:-$(ls -t "$root"/target/wheels/tfshard-*.whl 2>/dev/null | head -1)}
if [ -n "$wheel" ]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel" >&2
fi
echo "$venv"
