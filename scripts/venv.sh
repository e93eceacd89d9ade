#!/usr/bin/env bash
# Creates (once) the git-ignored .venv with tensorflow-cpu and pyarrow from PyPI, and
# prints its python. Every script that needs TensorFlow goes through here. Versions are
# pinned (the ones the golden files and the interop check were last run with), so a
# new release cannot change what CI checks; an older .venv is upgraded to them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
pins=(tensorflow-cpu==2.21.0 pyarrow==26.0.1 pillow==13.0.0 numpy==2.4.6)
check='import tensorflow as tf, pyarrow, PIL, numpy
assert (tf.__version__, pyarrow.__version__, PIL.__version__, numpy.__version__) == ("2.21.0", "26.0.1", "13.0.0", "2.4.6")'
if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" >&2
fi
echo "$venv/bin/python"
