#!/usr/bin/env python3
"""Convert a Parquet table with tfshard on a Ray cluster: one `ray.remote` task per
worker index, then `tfshard finalize`. Ray only launches the binary; the workers share
nothing but the output (a bucket, or a shared folder).

    python ray_convert.py INPUT OUTPUT --workers 8 [-- extra convert flags]
    python ray_convert.py INPUT OUTPUT --workers 2 --local   # ray.init(num_cpus=2) on 127.0.0.1

A worker that fails (a non-zero exit, a killed process) is retried by Ray, --retries
times (default 3: `max_retries` for a dead process, `retry_exceptions` for a tfshard that
exits non-zero). A retried worker rewrites the same part; `finalize` aborts what a killed
attempt left in the store.

With --local, Ray runs on this machine only, but not on loopback alone: with its node
address set to 127.0.0.1, Ray 2.60's GCS server, raylet and worker processes still listen
on every interface (*:port) and its runtime-env agent on the host's address; we found no
Ray setting that binds them to loopback. Use a firewall or a network namespace where that
matters (the Spark recipe's --local listens on 127.0.0.1 only).

`tfshard` must be on every node's PATH (`pip install` the wheel in the runtime
environment, or ship it), or named with --tfshard.
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--workers", type=int, required=True)
    # The wheel (`pip install tfshard-*.whl`) puts the binary beside the environment's python.
    beside = os.path.join(os.path.dirname(sys.executable), "tfshard")
    p.add_argument("--tfshard", default=shutil.which("tfshard") or beside)
    p.add_argument("--retries", type=int, default=3,
                   help="times Ray retries a failed worker (default 3)")
    p.add_argument("--local", action="store_true",
                   help="a local Ray with 2 CPUs (node address 127.0.0.1; see above: not loopback-only)")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = p.parse_args(argv[: len(argv) - len(extra) - (1 if extra or "--" in argv else 0)])
    args.extra = extra

    import ray

    temp = None
    if args.local:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        # Ray's sockets live under its temp folder, and a Unix socket path must stay
        # under 108 bytes: a short folder of its own, whatever TMPDIR is.
        temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
        ray.init(num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False,
                 log_to_driver=False, _temp_dir=temp, runtime_env={"env_vars": dict(os.environ)})
    else:
        ray.init()

    # Ray retries a task whose process dies (max_retries) and one that raises
    # (retry_exceptions): a tfshard that exits non-zero or is killed.
    @ray.remote(max_retries=args.retries, retry_exceptions=True)
    def convert(index):
        cmd = [args.tfshard, "convert", "parquet", args.input, "-o", args.output,
               "--num-workers", str(args.workers), "--worker-index", str(index), "--quiet", *args.extra]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"worker {index}: exit {done.returncode}: {done.stderr.strip()}")
        return index

    try:
        done = ray.get([convert.remote(i) for i in range(args.workers)])
        assert sorted(done) == list(range(args.workers)), done
    finally:
        ray.shutdown()
        if args.local:
            shutil.rmtree(temp, ignore_errors=True)
    out = subprocess.run([args.tfshard, "finalize", args.output, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"finalize: exit {out.returncode}: {out.stderr.strip()}")
    print(json.dumps(json.loads(out.stdout)))


if __name__ == "__main__":
    main()
