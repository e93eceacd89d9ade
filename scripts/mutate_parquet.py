#!/usr/bin/env python3
"""Seeded mutation run of `tfshard convert parquet` over small valid Parquet files (or,
with --format tfrecord, of `convert tfrecord` over testdata/tfrecord-in's files).

Each run takes a valid file, damages it (bit flips, 32-bit integers patched with edge
values, truncation; the footer, where a Parquet file's metadata lives, more often than
the rest) and converts it. Every conversion must end with exit 0 and a manifest, or
exit 1 with one `error:` line (and at most a `hint:` line), no panic text and nothing
left in the output folder. Any other outcome is saved under --crashes as a regression
file and counted as a failure (exit 1 at the end).

    scripts/mutate_parquet.py --binary target/release/tfshard --seconds 300 --seed 1
    scripts/mutate_parquet.py --format tfrecord --seconds 120 --seed 2

TFRecord runs damage the record stream (a gzip or zlib file's compressed bytes) anywhere,
and convert it with flags drawn per run: --record-type auto, bytes or sequence-example,
--threads 1 or every core, a split by key or by position, gzip output, a shuffle.
"""

import argparse
import collections
import concurrent.futures
import hashlib
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

EDGE_INTS = [0, 1, -1, 2, 7, 8, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, -0x80000000, -2, 1 << 20]


def valid_inputs(root, max_bytes):
    """Small Parquet files the project's tests expect to convert."""
    table = os.path.join(root, "tests/cli/corpus_table.rs")
    ok = []
    for line in open(table):
        line = line.strip()
        if line.startswith('("') and line.endswith('"OK"),'):
            ok.append(line.split('"')[1])
    files = [os.path.join(root, "testdata/parquet-testing", f) for f in ok]
    files.append(os.path.join(root, "testdata/small.parquet"))
    return sorted(f for f in files if os.path.getsize(f) <= max_bytes)


def tfrecord_inputs(root):
    """TensorFlow-written TFRecord files of every kind the tests read."""
    base = os.path.join(root, "testdata/tfrecord-in")
    return sorted(
        os.path.join(d, f)
        for d, _, files in os.walk(base)
        for f in files
        if not f.startswith(("_", ".")) and not f.endswith(".json")
    )


TFRECORD_FLAGS = [
    [],
    ["--record-type", "bytes"],
    ["--record-type", "sequence-example"],
    ["--target-shard-size", "2KB"],
    ["--split", "a=0.5,b=0.5", "--split-key", "id"],
    ["--split", "a=0.5,b=0.5", "--compression", "gzip"],
    ["--shuffle", "--target-shard-size", "4KB"],
]


def mutate(data, rng, footer=True):
    data = bytearray(data)
    kind = rng.choice(["flip", "flip", "int", "int", "trunc"])
    # Half the time aim at the footer (the last KiB: metadata, page offsets, lengths).
    def position():
        if footer and rng.random() < 0.5 and len(data) > 8:
            return rng.randrange(max(0, len(data) - 1024), len(data) - 8)
        return rng.randrange(len(data))

    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            p = position()
            data[p] ^= 1 << rng.randrange(8)
    elif kind == "int":
        for _ in range(rng.randint(1, 2)):
            p = min(position(), len(data) - 4)
            value = rng.choice(EDGE_INTS) if rng.random() < 0.7 else rng.randrange(-(1 << 31), 1 << 31)
            data[p : p + 4] = struct.pack("<i", value)
    else:
        cut = rng.randrange(len(data)) if rng.random() < 0.3 else len(data) - rng.randint(1, min(64, len(data)))
        del data[cut:]
    return kind, bytes(data)


def check(binary, path, out, command="parquet", flags=()):
    """Runs one conversion; returns (exit code, None) or (exit code, what is wrong)."""
    shutil.rmtree(out, ignore_errors=True)
    try:
        p = subprocess.run(
            [binary, "convert", command, path, "-o", out, "--quiet", *(flags or ["--threads", "2"])],
            capture_output=True,
            timeout=60,
            env={**os.environ, "RUST_BACKTRACE": "0"},
        )
    except subprocess.TimeoutExpired:
        return "timeout", "no answer in 60 s"
    err = p.stderr.decode("utf-8", "replace")
    left = sorted(os.listdir(out)) if os.path.isdir(out) else []
    if "panicked" in err or "backtrace" in err.lower():
        return p.returncode, "panic text: " + err.strip().splitlines()[0][:300]
    if p.returncode == 0:
        if not any(f.endswith(".manifest.json") for f in left):
            return 0, "exit 0 without a manifest"
        return 0, None
    if p.returncode != 1:
        return p.returncode, f"exit {p.returncode}: {err.strip()[:300]}"
    lines = err.strip().splitlines()
    if not lines or not lines[0].startswith("error: ") or any(not l.startswith("hint: ") for l in lines[1:]):
        return 1, "not one error line: " + err.strip()[:300]
    if left:
        return 1, f"left {left}"
    return 1, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--binary", default=os.path.join(root, "target/release/tfshard"))
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--max-bytes", type=int, default=64 << 10, help="largest input file used")
    ap.add_argument("--crashes", default=os.path.join(root, "target/mutate-crashes"))
    ap.add_argument("--format", choices=["parquet", "tfrecord"], default="parquet")
    args = ap.parse_args()

    tfrecord = args.format == "tfrecord"
    inputs = tfrecord_inputs(root) if tfrecord else valid_inputs(root, args.max_bytes)
    originals = {f: open(f, "rb").read() for f in inputs}
    os.makedirs(args.crashes, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="tfshard-mutate-")
    deadline = time.monotonic() + args.seconds
    codes = collections.Counter()
    kinds = collections.Counter()
    failures = []
    lock = threading.Lock()

    def worker(w):
        rng = random.Random(args.seed * 1000 + w)
        out = os.path.join(scratch, f"out-{w}")
        while time.monotonic() < deadline:
            source = rng.choice(inputs)
            # A TFRecord file keeps its name: .gz and .zlib say how it is compressed.
            name = os.path.basename(source) if tfrecord else "in.parquet"
            path = os.path.join(scratch, f"in-{w}-{name}")
            kind, data = mutate(originals[source], rng, footer=not tfrecord)
            with open(path, "wb") as f:
                f.write(data)
            flags = rng.choice(TFRECORD_FLAGS) if tfrecord else []
            if tfrecord and rng.random() < 0.3:
                flags = flags + ["--threads", "1"]
            code, problem = check(args.binary, path, out, args.format, flags)
            os.remove(path)
            with lock:
                codes[code] += 1
                kinds[kind] += 1
                if problem:
                    saved = hashlib.sha256(data).hexdigest()[:16] + "-" + name
                    with open(os.path.join(args.crashes, saved), "wb") as f:
                        f.write(data)
                    failures.append(f"{saved} (from {os.path.basename(source)}, {kind}, {flags}): {problem}")

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(worker, range(args.jobs)))
    shutil.rmtree(scratch, ignore_errors=True)
    runs = sum(codes.values())
    print(f"{runs} conversions of {len(inputs)} valid files in {time.monotonic() - started:.0f} s, seed {args.seed}")
    print("mutations: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    print("exit codes: " + ", ".join(f"{k}: {n}" for k, n in sorted(codes.items(), key=str)))
    for f in failures:
        print("FAIL " + f)
    print(f"{runs - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
