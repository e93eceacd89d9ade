#!/usr/bin/env bash
# Builds the pip-installable wheel into target/wheels/ and prints its path: the `tfshard`
# Python module (maturin, PyO3, `--features python`), whose `tfshard` command (on PATH
# once installed) is an entry point into the same extension. maturin comes from PyPI into
# the git-ignored .venv-maturin.
#
#   scripts/build_wheel.sh            # release build, the wheel to ship
#   scripts/build_wheel.sh --debug    # the dev profile (what the tests use: no second build)
#
# The wheel is tagged for the glibc symbols it uses (manylinux_2_34 from this Debian 12
# machine): it installs on Linux x86_64 with glibc 2.34 or newer. For older systems
# (manylinux2014, glibc 2.17), build it inside quay.io/pypa/manylinux2014_x86_64.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv="$root/.venv-maturin"
if ! "$venv/bin/maturin" --version 2>/dev/null | grep -q "^maturin 1.16.0$"; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check maturin==1.16.0 >&2
fi
profile=(--release)
if [ "${1:-}" = "--debug" ]; then
  profile=(--profile dev)
fi
# (Its output goes to stderr as it is: `tee /dev/stderr` would reopen, and truncate, a
# log file that stderr is redirected to.)
log=$("$venv/bin/maturin" build "${profile[@]}" --strip --out target/wheels 2>&1) || { echo "$log" >&2; exit 1; }
echo "$log" >&2
echo "$log" | grep -o '[^ ]*\.whl' | tail -1
