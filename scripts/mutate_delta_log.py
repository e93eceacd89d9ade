#!/usr/bin/env python3
"""Seeded mutation run of `tfshard convert delta` over the Delta log of real tables.

Each run copies a table of testdata/delta-kernel/, damages one file of its `_delta_log/`
(a commit's JSON: bytes flipped, a line cut, a field's value replaced, a line dropped or
repeated; a checkpoint or sidecar: bytes flipped or the file cut) and converts it. Every
conversion must end with exit 0 and a manifest, or exit 1 with one `error:` line, no
panic text and no manifest. Any other outcome is kept under --crashes and counted as a
failure (exit 1 at the end).

    scripts/mutate_delta_log.py --binary target/release/tfshard --runs 300 --seed 1
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLES = ["table-with-dv-small", "cdf-column-mapping-name-mode", "basic_partitioned",
          "v1-multi-part-struct-stats-only", "v2-checkpoints-parquet-with-sidecars",
          "basic-decimal-table"]
VALUES = [None, 0, -1, 2**63, "", "x", [], {}, True, 1e308, "u", "i", "p", "../../etc"]


def mutate_json(data, rng):
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    kind = rng.choice(["flip", "cut", "value", "drop", "repeat"])
    if kind == "flip" and lines[i]:
        b = bytearray(lines[i])
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        lines[i] = bytes(b)
    elif kind == "cut" and lines[i]:
        lines[i] = lines[i][: rng.randrange(len(lines[i]))]
    elif kind == "value":
        try:
            obj = json.loads(lines[i])
            stack = [obj]
            target = None
            while stack:
                o = stack.pop()
                if isinstance(o, dict) and o:
                    target = o
                    stack.extend(o.values())
            if target is not None:
                key = rng.choice(list(target))
                target[key] = rng.choice(VALUES)
                lines[i] = json.dumps(obj).encode()
        except ValueError:
            pass
    elif kind == "drop":
        del lines[i]
    else:
        lines.insert(i, lines[i])
    return b"\n".join(lines), kind


def mutate_binary(data, rng):
    b = bytearray(data)
    if rng.random() < 0.3 and b:
        return bytes(b[: rng.randrange(len(b))]), "cut"
    for _ in range(rng.randint(1, 8)):
        if b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b), "flip"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/tfshard"))
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--crashes", default=os.path.join(ROOT, "target/delta-log-crashes"))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="tfshard-delta-mutate-")
    counts = {"converted": 0, "error": 0, "failed": 0}
    for run in range(args.runs):
        name = rng.choice(TABLES)
        table = os.path.join(work, "t")
        shutil.rmtree(table, ignore_errors=True)
        shutil.copytree(os.path.join(ROOT, "testdata", "delta-kernel", name), table)
        log = os.path.join(table, "_delta_log")
        files = [os.path.join(d, f) for d, _, fs in os.walk(log) for f in fs
                 if f.endswith(".json") or f.endswith(".parquet") or f == "_last_checkpoint"]
        target = rng.choice(files)
        data = open(target, "rb").read()
        if target.endswith(".parquet"):
            mutated, kind = mutate_binary(data, rng)
        else:
            mutated, kind = mutate_json(data, rng)
        open(target, "wb").write(mutated)
        out = os.path.join(work, "out")
        shutil.rmtree(out, ignore_errors=True)
        p = subprocess.run([args.binary, "convert", "delta", table, "-o", out, "--threads", "1"],
                           capture_output=True, text=True)
        err = p.stderr.strip().splitlines()
        manifest = os.path.exists(os.path.join(out, "data.manifest.json"))
        ok = (p.returncode == 0 and manifest) or (
            p.returncode == 1 and len(err) == 1 and err[0].startswith("error:")
            and "panicked" not in p.stderr and not manifest)
        if ok:
            counts["converted" if p.returncode == 0 else "error"] += 1
        else:
            counts["failed"] += 1
            keep = os.path.join(args.crashes, f"run-{args.seed}-{run}")
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(table, keep)
            print(f"FAIL run {run}: {name} {os.path.relpath(target, table)} ({kind}): "
                  f"exit {p.returncode}: {p.stderr.strip()[:300]}", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    print(f"mutate_delta_log: {args.runs} runs (seed {args.seed}): {counts['converted']} converted, "
          f"{counts['error']} one-line errors, {counts['failed']} failures")
    sys.exit(1 if counts["failed"] else 0)


if __name__ == "__main__":
    main()
