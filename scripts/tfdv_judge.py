#!/usr/bin/env python3
"""TFDV as the judge of tfshard's statistics: the same shards, counted by tfshard and by
TFDV's own `generate_statistics_from_tfrecord`, compared feature by feature.

    $(scripts/tfdv_venv.sh)/bin/python scripts/tfdv_judge.py --tfshard target/release/tfshard [--rows N] [--work DIR]

The sets: `testdata/small.parquet` and a drawn table (numbers normal, heavy-tailed, with
NaN, infinities and zeros, integers, a categorical string of Zipf-like frequencies, ids
all distinct, lists of varying length, features often missing), each converted with
`--stats`; and the records TensorFlow wrote (`testdata/golden/examples.tfrecord`).
For each, tfshard's statistics are read with TFDV's own loader (`tfdv.load_stats_binary`,
tensorflow-metadata's messages): those the conversion kept, and those `tfshard stats`
computes from the shard files.

The checks, per feature (DESIGN's): the type; presence and values per record exact;
min, max and zeros exact; mean and deviation within 1e-6 relative; the median and
deciles within 1% of rank (each value's rank among the float32 values written, counted
exactly here); the unique count within 2%; the top values' counts exact where the counts
are exact (TFDV's too); the average length within 1e-6. Then the time of both on the
drawn table's shards (one run each; tfshard's memory printed). Exits 1 on any difference
outside those bounds, naming set, feature and field.
"""
import argparse
import bisect
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

# TensorFlow's and Beam's chatter off: the judge prints its own lines.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
warnings.filterwarnings("ignore")

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent

failures = []


def check(ok, where, what):
    if not ok:
        failures.append(f"{where}: {what}")


def drawn_table(path, rows, seed=7):
    rng = np.random.default_rng(seed)
    normal = rng.normal(100.0, 15.0, rows)
    heavy = rng.standard_cauchy(rows)
    heavy[rng.random(rows) < 0.01] = np.nan
    heavy[rng.random(rows) < 0.001] = np.inf
    heavy[rng.random(rows) < 0.05] = 0.0
    ints = rng.integers(-1000, 1000, rows)
    zipf = np.minimum(rng.zipf(1.5, rows), 500)
    category = pa.array([f"c{v}" for v in zipf])
    ids = pa.array([f"id-{seed}-{i:09d}" for i in range(rows)])
    lengths = rng.integers(0, 6, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.normal(0.0, 1.0, int(offsets[-1])).astype(np.float32)
    lists = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    sometimes = pa.array(np.where(rng.random(rows) < 0.3, ints * 2, 0), mask=rng.random(rows) >= 0.3)
    table = pa.table({
        "normal": pa.array(normal),
        "heavy": pa.array(heavy),
        "ints": pa.array(ints),
        "category": category,
        "id": ids,
        "lists": lists,
        "sometimes": sometimes,
    })
    pq.write_table(table, path, row_group_size=50_000)


def run(args):
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def feature_map(stats):
    out = {}
    for f in stats.datasets[0].features:
        name = ".".join(f.path.step) if f.HasField("path") else f.name
        out[name] = f
    return out


def common_of(f):
    kind = f.WhichOneof("stats")
    return getattr(f, kind).common_stats if kind else None


def rel(a, b):
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def values_of(records, name):
    """The feature's values, as the records hold them (float32 widened), NaN apart."""
    import tensorflow as tf

    out = []
    for payload in records:
        ex = tf.train.Example.FromString(payload)
        if name not in ex.features.feature:
            continue
        f = ex.features.feature[name]
        kind = f.WhichOneof("kind")
        if kind == "float_list":
            out.extend(float(v) for v in f.float_list.value)
        elif kind == "int64_list":
            out.extend(float(v) for v in f.int64_list.value)
    return sorted(v for v in out if not math.isnan(v))


def read_records(files):
    import tensorflow as tf

    out = []
    for f in files:
        out.extend(r.numpy() for r in tf.data.TFRecordDataset(str(f)))
    return out


def compare(where, ours, theirs, records):
    o, t = feature_map(ours), feature_map(theirs)
    check(set(o) == set(t), where, f"features: tfshard {sorted(o)}, TFDV {sorted(t)}")
    check(ours.datasets[0].num_examples == theirs.datasets[0].num_examples, where,
          f"records: tfshard {ours.datasets[0].num_examples}, TFDV {theirs.datasets[0].num_examples}")
    checked = 0
    for name in sorted(set(o) & set(t)):
        a, b = o[name], t[name]
        at = f"{where}: {name}"
        check(a.type == b.type, at, f"type: tfshard {a.type}, TFDV {b.type}")
        ca, cb = common_of(a), common_of(b)
        for field in ["num_non_missing", "num_missing", "min_num_values", "max_num_values", "tot_num_values"]:
            check(getattr(ca, field) == getattr(cb, field), at,
                  f"{field}: tfshard {getattr(ca, field)}, TFDV {getattr(cb, field)}")
        check(rel(ca.avg_num_values, cb.avg_num_values) < 1e-6, at,
              f"avg_num_values: tfshard {ca.avg_num_values}, TFDV {cb.avg_num_values}")
        kind = a.WhichOneof("stats")
        if kind == "num_stats" and b.WhichOneof("stats") == "num_stats":
            x, y = a.num_stats, b.num_stats
            for field in ["min", "max", "num_zeros"]:
                vx, vy = getattr(x, field), getattr(y, field)
                check(vx == vy or (math.isnan(vx) and math.isnan(vy)), at, f"{field}: tfshard {vx}, TFDV {vy}")
            for field in ["mean", "std_dev"]:
                vx, vy = getattr(x, field), getattr(y, field)
                same = (math.isnan(vx) and math.isnan(vy)) or (math.isinf(vx) and vx == vy) or rel(vx, vy) < 1e-6
                check(same, at, f"{field}: tfshard {vx!r}, TFDV {vy!r}")
            values = values_of(records, name)
            n = len(values)
            if n:
                def rank_error(v, q):
                    # The nearest rank v can stand at (ties span a range), against q n.
                    lo = bisect.bisect_left(values, v)
                    hi = bisect.bisect_right(values, v)
                    target = q * n
                    return 0.0 if lo <= target <= hi else min(abs(lo - target), abs(hi - target)) / n

                check(rank_error(x.median, 0.5) <= 0.01, at, f"median {x.median}: rank off by {rank_error(x.median, 0.5):.4f}")
                hist = [h for h in x.histograms if h.type == h.QUANTILES]
                if hist:
                    edges = [hist[0].buckets[0].low_value] + [bk.high_value for bk in hist[0].buckets]
                    for i, e in enumerate(edges):
                        err = rank_error(e, i / 10)
                        check(err <= 0.01, at, f"decile {i} = {e}: rank off by {err:.4f}")
        elif kind == "string_stats" and b.WhichOneof("stats") == "string_stats":
            x, y = a.string_stats, b.string_stats
            check(rel(x.unique, y.unique) <= 0.02, at, f"unique: tfshard {x.unique}, TFDV {y.unique}")
            check(rel(x.avg_length, y.avg_length) < 1e-6, at, f"avg_length: tfshard {x.avg_length}, TFDV {y.avg_length}")
            check(x.invalid_utf8_count == y.invalid_utf8_count, at, "invalid_utf8_count")
            exact = x.unique <= 16384
            if exact:
                theirs_top = {v.value: v.frequency for v in y.top_values}
                for v in x.top_values:
                    if v.value in theirs_top:
                        check(v.frequency == theirs_top[v.value], at,
                              f"top value {v.value!r}: tfshard {v.frequency}, TFDV {theirs_top[v.value]}")
                # The most frequent value and its count agree.
                if x.top_values and y.top_values:
                    check(x.top_values[0].frequency == y.top_values[0].frequency, at,
                          f"top count: tfshard {x.top_values[0].frequency}, TFDV {y.top_values[0].frequency}")
        checked += 1
    return checked


def judge_schemas(tfdv, tfshard, work, name, out, ours, theirs):
    """Schemas both ways: the schema TFDV infers drives `tfshard verify --schema` (the set
    it came from passes), and TFDV finds our statistics valid against it; TFDV reads the
    schema `tfshard schema --format tfdv` infers, and finds its own statistics valid."""
    from google.protobuf import text_format

    theirs_schema = tfdv.infer_schema(theirs)
    path = work / f"{name}.tfdv-schema.pbtxt"
    tfdv.write_schema_text(theirs_schema, str(path))
    done = subprocess.run([tfshard, "verify", str(out), "--schema", str(path), "--json"], capture_output=True, text=True)
    report = json.loads(done.stdout or "{}")
    check(done.returncode == 0 and report.get("anomalies") == [], f"{name}: verify --schema (TFDV's inferred schema)",
          f"exit {done.returncode}: {report.get('anomalies')} {done.stderr.strip()}")
    anomalies = tfdv.validate_statistics(ours, theirs_schema)
    check(not anomalies.anomaly_info, f"{name}: TFDV's validate_statistics of tfshard's statistics",
          str(dict(anomalies.anomaly_info))[:500])
    text = run([tfshard, "schema", str(out), "--format", "tfdv"]).stdout
    ours_schema = text_format.Parse(text, type(theirs_schema)())
    anomalies = tfdv.validate_statistics(theirs, ours_schema)
    check(not anomalies.anomaly_info, f"{name}: TFDV's validate_statistics against tfshard's inferred schema",
          str(dict(anomalies.anomaly_info))[:500])
    print(f"{name}: TFDV's schema checks our statistics and ours TFDV's, both ways clean")


def tfdv_stats(pattern):
    import tensorflow_data_validation as tfdv

    return tfdv.generate_statistics_from_tfrecord(data_location=pattern)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tfshard", default=str(ROOT / "target/release/tfshard"))
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--work", default=str(ROOT / "target/tfdv-judge"))
    a = ap.parse_args()
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    import tensorflow_data_validation as tfdv

    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    drawn = work / "drawn.parquet"
    drawn_table(drawn, a.rows)
    sets = []
    for name, table, extra in [
        ("small", ROOT / "testdata/small.parquet", ["--target-shard-size", "100KB"]),
        ("drawn", drawn, ["--target-shard-size", "4MiB"]),
    ]:
        out = work / name
        run([a.tfshard, "convert", "parquet", str(table), "-o", str(out), "--stats", "--quiet"] + extra)
        manifest = json.loads((out / "data.manifest.json").read_text())
        files = [out / s["file"] for s in manifest["shards"]]
        sets.append((name, files, out / "data.stats.pb"))
    golden = ROOT / "testdata/golden/examples.tfrecord"
    sets.append(("golden", [golden], None))
    timing = None
    for name, files, kept in sets:
        records = read_records(files)
        pattern = str(files[0]) if len(files) == 1 else str(files[0].parent / "data-*.tfrecord")
        started = time.perf_counter()
        theirs = tfdv_stats(pattern)
        tfdv_seconds = time.perf_counter() - started
        computed = work / f"{name}.computed.pb"
        started = time.perf_counter()
        run([a.tfshard, "stats", *map(str, files), "--format", "tfdv", "-o", str(computed), "--quiet"])
        ours_seconds = time.perf_counter() - started
        for label, path in [("kept", kept), ("computed", computed)]:
            if path is None:
                continue
            ours = tfdv.load_stats_binary(str(path))
            n = compare(f"{name} ({label})", ours, theirs, records)
            print(f"{name} ({label}): {n} features compared with TFDV's, {len(records)} records")
        if kept is not None:
            judge_schemas(tfdv, a.tfshard, work, name, files[0].parent, tfdv.load_stats_binary(str(kept)), theirs)
        if name == "drawn":
            timing = (tfdv_seconds, ours_seconds, sum(f.stat().st_size for f in files))
    if timing:
        tfdv_seconds, ours_seconds, size = timing
        usage = run(["/usr/bin/time", "-f", "%M", a.tfshard, "stats", *map(str, sets[1][1]), "--quiet"])
        rss = usage.stderr.strip().splitlines()[-1]
        print(f"drawn table ({a.rows} records, {size / 1e6:.1f} MB of shards), one run each: "
              f"TFDV generate_statistics_from_tfrecord {tfdv_seconds:.2f} s, tfshard stats {ours_seconds:.2f} s "
              f"({tfdv_seconds / ours_seconds:.0f}x), tfshard's peak RSS {int(rss) / 1024:.0f} MiB")
    if failures:
        print(f"{len(failures)} differences outside the bounds:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print("every statistic within its bound of TFDV's")


if __name__ == "__main__":
    main()
