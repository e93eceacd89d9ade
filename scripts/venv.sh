#!/usr/bin/env bash
# Creates (once) the git-ignored .venv with tensorflow-cpu and pyarrow from PyPI, and
# prints its python. Every script that needs TensorFlow goes through here. Versions are
# pinned (the ones the golden files and the interop check were last run with), so a
# new release cannot change what CI checks; an older .venv is upgraded to them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
# tensorflow-datasets and what it pulls in, pinned too (the interop check loads --tfds
# output with it).
pins=(tensorflow-cpu==2.21.0 pyarrow==26.0.1 pillow==13.0.0 numpy==2.4.6
  tensorflow-datasets==4.9.10 array_record==0.8.6 attrs==26.1.0 dm-tree==0.1.10
  docstring-parser==0.18.0 einops==0.8.2 etils==1.15.0 fsspec==2026.9.0
  googleapis-common-protos==1.76.0 immutabledict==4.3.1 promise==2.3 psutil==7.2.2
  simple_parsing==0.1.9 tensorflow-metadata==1.21.0 toml==0.10.2 tqdm==4.70.1 zipp==4.1.2)
check='import tensorflow as tf, pyarrow, PIL, numpy, tensorflow_datasets as tfds
assert (tf.__version__, pyarrow.__version__, PIL.__version__, numpy.__version__, tfds.__version__) == ("2.21.0", "26.0.1", "13.0.0", "2.4.6", "4.9.10")'
if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" >&2
fi
echo "$venv/bin/python"
