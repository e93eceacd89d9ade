#!/usr/bin/env bash
# Creates (once) the git-ignored .venv-spark (PySpark), .venv-ray (Ray) and .venv-airflow
# (Apache Airflow) from PyPI, pinned, for the engine recipes' tests (examples/engines/,
# tests/cli/store.rs). Each
# engine has its own venv: they, and TensorFlow's .venv, pin different packages.
# PySpark needs Java 17 (on the machine); nothing here downloads at run time
# (PYSPARK_HADOOP_VERSION is never set).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
make() {
  local venv=$1 check=$2; shift 2
  if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$@" >&2
  fi
}
make "${TFSHARD_SPARK_VENV:-$root/.venv-spark}" \
  'import pyspark; assert pyspark.__version__ == "4.3.0"' pyspark==4.3.0 py4j==0.10.9.9
make "${TFSHARD_RAY_VENV:-$root/.venv-ray}" \
  'import ray; assert ray.__version__ == "2.60.0"' ray==2.60.0
make "${TFSHARD_AIRFLOW_VENV:-$root/.venv-airflow}" \
  'import importlib.metadata as m; assert m.version("apache-airflow") == "3.1.3"' apache-airflow==3.1.3
