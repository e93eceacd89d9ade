#!/usr/bin/env bash
# Creates (once) the venv of TFDV, the judge of tfshard's statistics
# (scripts/tfdv_judge.py), pinned as the issue found they install on Python 3.11 (unpinned,
# pip backtracks for half an hour). It lives outside the clone, in a folder named by its
# pins, so that every fresh clone of a CI run reuses it. Prints its folder.
#
#   scripts/tfdv_venv.sh
set -euo pipefail
pins=(tensorflow-data-validation==1.16.1 tfx-bsl==1.16.1 tensorflow==2.16.2 apache-beam==2.59.0
  pyarrow==10.0.1 numpy==1.26.4 tensorflow-metadata==1.16.1)
key=$(printf '%s\n' "${pins[@]}" | sha256sum | cut -c1-12)
venv="${TFSHARD_TFDV_VENV:-$HOME/.cache/tfshard/venv-tfdv-$key}"
check='import tensorflow_data_validation as tfdv, tensorflow as tf
assert (tfdv.__version__, tf.__version__) == ("1.16.1", "2.16.2")'
if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  mkdir -p "$(dirname "$venv")"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}" >&2
fi
echo "$venv"
