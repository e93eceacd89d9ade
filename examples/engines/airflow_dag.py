"""An Airflow DAG that converts a Parquet table on many workers: one mapped task per
worker index (`tfshard convert ... --num-workers N --worker-index I`), then `finalize`.
Airflow's retries rerun a failed worker; a rerun rewrites the same part.

Settings come from the environment of the DAG processor (or edit the defaults):
TFSHARD_INPUT, TFSHARD_OUTPUT (any path or s3://, gs://, az:// URL), TFSHARD_WORKERS,
TFSHARD_FLAGS (more `convert` flags) and TFSHARD_BIN (the binary, default `tfshard` on
PATH). Object-store credentials come from the workers' environment, as for any run.

Run by tests/cli/store.rs with `airflow dags test tfshard_convert` against a local S3
server (scripts/airflow_venv.sh installs Airflow).
"""

import os
import shlex

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

INPUT = os.environ.get("TFSHARD_INPUT", "s3://lake/events/")
OUTPUT = os.environ.get("TFSHARD_OUTPUT", "s3://lake/shards/")
WORKERS = int(os.environ.get("TFSHARD_WORKERS", "8"))
FLAGS = os.environ.get("TFSHARD_FLAGS", "")
TFSHARD = shlex.quote(os.environ.get("TFSHARD_BIN", "tfshard"))

with DAG(
    "tfshard_convert",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 3},
):
    convert = BashOperator.partial(task_id="convert").expand(
        bash_command=[
            f"{TFSHARD} convert parquet {shlex.quote(INPUT)} -o {shlex.quote(OUTPUT)}"
            f" --num-workers {WORKERS} --worker-index {i} --quiet {FLAGS}"
            for i in range(WORKERS)
        ]
    )
    finalize = BashOperator(task_id="finalize", bash_command=f"{TFSHARD} finalize {shlex.quote(OUTPUT)} --json")
    convert >> finalize
