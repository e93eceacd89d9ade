#!/usr/bin/env bash
# Creates (once) the venv of the trainer's-reader tests (tests/python/test_torch.py):
# PyTorch (PyPI's CUDA build, some 5.4 GB), torchdata's StatefulDataLoader and Grain,
# pinned, with pytest and the wheel scripts/build_wheel.sh built (installed again
# whenever it changed). It lives outside the clone, in a folder named by its pins, so
# that every fresh clone of a CI run reuses it. Prints its folder.
#
#   scripts/torch_venv.sh [WHEEL]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pins=(torch==2.15.0 torchdata==0.11.0 grain==0.2.18 numpy==2.4.6 pytest==9.2.0)
key=$(printf '%s\n' "${pins[@]}" | sha256sum | cut -c1-12)
venv="${TFSHARD_TORCH_VENV:-$HOME/.cache/tfshard/venv-torch-$key}"
check='import torch, torchdata, grain, numpy, pytest, importlib.metadata as m
from torchdata.stateful_dataloader import StatefulDataLoader
assert (m.version("torch").split("+")[0], m.version("torchdata"), m.version("grain"), numpy.__version__, pytest.__version__) == ("2.15.0", "0.11.0", "0.2.18", "2.4.6", "9.2.0")'
if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  mkdir -p "$(dirname "$venv")"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}" >&2
fi
wheel=${1:-$(ls -t "$root"/target/wheels/tfshard-*.whl 2>/dev/null | head -1)}
if [ -n "$wheel" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel" >&2
fi
echo "$venv"
