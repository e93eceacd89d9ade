#!/usr/bin/env bash
# Creates (once) the git-ignored .venv with tensorflow-cpu and pyarrow from PyPI, and
# prints its python. Every script that needs TensorFlow goes through here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
if ! "$venv/bin/python" -c 'import tensorflow, pyarrow, PIL' >/dev/null 2>&1; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check tensorflow-cpu pyarrow pillow >&2
fi
echo "$venv/bin/python"
