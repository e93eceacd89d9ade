#!/usr/bin/env python3
"""Convert a Parquet table with tfshard on a Spark cluster: one Spark task per worker
index, then `tfshard finalize` on the driver. Spark only launches the binary; the
workers share nothing but the output (a bucket, or a shared folder).

    spark-submit spark_convert.py INPUT OUTPUT --workers 8 [-- extra convert flags]
    python spark_convert.py INPUT OUTPUT --workers 2 --local   # local[2,4], loopback only

A worker that fails (a non-zero exit, a killed process) is retried by Spark, --retries
times (default 3; `spark.task.maxFailures` is set to retries + 1, and `--local` runs
`local[2,retries+1]`: plain `local[2]` allows no retry). A retried worker rewrites the
same part; `finalize` aborts what a killed attempt left in the store.

`tfshard` must be on every executor's PATH (`pip install` the wheel, or ship it), or
named with --tfshard. Object-store credentials come from the executors' environment
(AWS_*, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_*), as for any tfshard run.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys


def convert(args, index):
    cmd = [args.tfshard, "convert", "parquet", args.input, "-o", args.output,
           "--num-workers", str(args.workers), "--worker-index", str(index), "--quiet", *args.extra]
    done = subprocess.run(cmd, capture_output=True, text=True)
    # Spark retries a failed task (--retries); a retried worker rewrites the same part.
    if done.returncode != 0:
        raise RuntimeError(f"worker {index}: exit {done.returncode}: {done.stderr.strip()}")
    return index


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--workers", type=int, required=True)
    # The wheel (`pip install tfshard-*.whl`) puts the binary beside the environment's python.
    beside = os.path.join(os.path.dirname(sys.executable), "tfshard")
    p.add_argument("--tfshard", default=shutil.which("tfshard") or beside)
    p.add_argument("--retries", type=int, default=3,
                   help="times Spark retries a failed worker (default 3)")
    p.add_argument("--local", action="store_true",
                   help="run Spark in local[2,retries+1] on 127.0.0.1")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = p.parse_args(argv[: len(argv) - len(extra) - (1 if extra or "--" in argv else 0)])
    args.extra = extra

    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.appName("tfshard-convert")
               .config("spark.task.maxFailures", str(args.retries + 1)))
    if args.local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.master(f"local[2,{args.retries + 1}]")
                   .config("spark.ui.enabled", "false")
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    spark = builder.getOrCreate()
    try:
        sc = spark.sparkContext
        done = sc.parallelize(range(args.workers), args.workers).map(lambda i: convert(args, i)).collect()
        assert sorted(done) == list(range(args.workers)), done
    finally:
        spark.stop()
    out = subprocess.run([args.tfshard, "finalize", args.output, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"finalize: exit {out.returncode}: {out.stderr.strip()}")
    print(json.dumps(json.loads(out.stdout)))


if __name__ == "__main__":
    main()
