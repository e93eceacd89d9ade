#!/usr/bin/env python3
"""TensorFlow is the judge: it reads our shards and every value equals what pyarrow reads.

Called by scripts/tf_interop.sh with the tfshard binary and a scratch folder.

1. Files the library wrote (examples/write_records.rs), plain/gzip/zlib, Example and
   SequenceExample: TensorFlow reads each record, parses it with the spec that
   `tfshard schema --format python` prints, and the values equal what `inspect` printed.
2. A pyarrow table with a column for each row of the Arrow → Feature mapping table, converted by
   `tfshard convert parquet` (plain, gzip, zlib, with --min-shards): parsed by
   `tf.io.parse_example` with the printed spec, each value equals pyarrow's by the
   mapping and null rules.
3. List-of-list columns in SequenceExample mode, parsed with
   `tf.io.parse_single_sequence_example`.
"""
import base64
import datetime
import decimal
import json
import math
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow as tf

BIN, WORK = sys.argv[1], sys.argv[2]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
checks = 0


def tfshard(*args):
    return subprocess.run([BIN, *args], check=True, capture_output=True, text=True).stdout


def spec_of(path, *extra):
    return eval(tfshard("schema", path, "--format", "python", *extra), {"tf": tf})


def compression_of(path):
    return "GZIP" if path.endswith(".gz") else "ZLIB" if path.endswith(".zlib") else ""


def dense(t):
    return tf.sparse.to_dense(t) if isinstance(t, tf.sparse.SparseTensor) else t


def check(cond, what):
    global checks
    if not cond:
        raise SystemExit(f"FAIL: {what}")
    checks += 1


def values_of(feature_json):
    (kind, vals), = feature_json.items()
    return kind, vals


def library_files():
    lib = os.path.join(WORK, "library")
    for name in ("examples", "sequence"):
        want = [json.loads(l.replace("NaN", "null")) for l in open(os.path.join(lib, f"{name}.jsonl"))]
        for suffix in ("", ".gz", ".zlib"):
            path = os.path.join(lib, f"{name}.tfrecord{suffix}")
            ds = tf.data.TFRecordDataset(path, compression_type=compression_of(path))
            records = list(ds.as_numpy_iterator())
            check(len(records) == len(want), f"{path}: {len(records)} records")
            if name == "examples":
                spec = spec_of(path)
                for rec, w in zip(records, want):
                    parsed = tf.io.parse_single_example(rec, spec)
                    for key, fj in w.items():
                        kind, vals = values_of(fj)
                        got = np.asarray(dense(parsed[key]).numpy()).reshape(-1).tolist()
                        if kind == "bytes":
                            got = [g.decode() for g in got]
                        if kind == "float":
                            check(np.allclose(got, vals), f"{path} {key}")
                        else:
                            check(got == vals, f"{path} {key}: {got} != {vals}")
            else:
                ctx_spec, seq_spec = spec_of(path, "--record-type", "sequence-example")
                for rec, w in zip(records, want):
                    ctx, seq = tf.io.parse_single_sequence_example(rec, ctx_spec, seq_spec)
                    check(ctx["id"].numpy().tolist() == w["context"]["id"]["int64"][0], f"{path} id")
                    frames = dense(seq["frames"]).numpy().tolist()
                    want_frames = [f["float"] for f in w["feature_lists"].get("frames", [])]
                    check(frames == want_frames, f"{path} frames {frames} != {want_frames}")
                    tokens = seq["tokens"]
                    want_tokens = [f["int64"] for f in w["feature_lists"]["tokens"]]
                    got_tokens = tf.RaggedTensor.from_sparse(tokens).to_list() if isinstance(tokens, tf.sparse.SparseTensor) else tokens.numpy().tolist()
                    check([t for t in got_tokens] == want_tokens, f"{path} tokens {got_tokens} != {want_tokens}")
    print(f"library files: TensorFlow read and parsed all 6 ({checks} checks)")


N = 64


def mapping_table():
    """One column per row of the mapping table, with nulls and edge values."""
    def nullable(values, every=5):
        return [None if i % every == 3 else v for i, v in enumerate(values)]
    ints = list(range(-N // 2, N // 2))
    ts = [datetime.datetime(1900 + i, 1 + i % 12, 1, 12, 30, tzinfo=datetime.timezone.utc) for i in range(N)]
    cols = {
        "i8": pa.array(nullable([max(-128, min(127, v * 4)) for v in ints]), pa.int8()),
        "i16": pa.array(ints, pa.int16()),
        "i32": pa.array(nullable([v * 100000 for v in ints]), pa.int32()),
        "i64": pa.array([v * 2**40 for v in ints], pa.int64()),
        "u8": pa.array([i % 256 for i in range(N)], pa.uint8()),
        "u16": pa.array([i * 1000 for i in range(N)], pa.uint16()),
        "u32": pa.array([2**32 - 1 - i for i in range(N)], pa.uint32()),
        "u64": pa.array([2**63 - 1 - i for i in range(N)], pa.uint64()),
        "bool": pa.array(nullable([i % 2 == 0 for i in range(N)]), pa.bool_()),
        "f16": pa.array(np.array([i / 8 for i in range(N)], dtype=np.float16), pa.float16()),
        "f32": pa.array(nullable([float("nan") if i == 1 else i * 0.1 for i in range(N)]), pa.float32()),
        "f64": pa.array([float("inf") if i == 2 else i * 1.1e30 for i in range(N)], pa.float64()),
        "dec": pa.array([decimal.Decimal(i * 1234 - 9999) / 100 for i in range(N)], pa.decimal128(12, 2)),
        "date32": pa.array([datetime.date(1970, 1, 1) + datetime.timedelta(days=i * 400 - 9000) for i in range(N)], pa.date32()),
        "date64": pa.array([datetime.date(2000, 1, 1) + datetime.timedelta(days=i) for i in range(N)], pa.date64()),
        "ts_s": pa.array(ts, pa.timestamp("s", tz="UTC")),
        "ts_ms": pa.array(ts, pa.timestamp("ms")),
        "ts_us": pa.array(nullable(ts), pa.timestamp("us")),
        "ts_ns": pa.array([datetime.datetime(2020, 1, 1) + datetime.timedelta(microseconds=i) for i in range(N)], pa.timestamp("ns")),
        "time32": pa.array([datetime.time(i % 24, i % 60) for i in range(N)], pa.time32("ms")),
        "time64": pa.array([datetime.time(i % 24, 0, 0, i) for i in range(N)], pa.time64("us")),
        "dur": pa.array([datetime.timedelta(seconds=i - 30) for i in range(N)], pa.duration("ms")),
        "str": pa.array(nullable([f"s{i}é" for i in range(N)]), pa.string()),
        "lstr": pa.array([f"large-{i}" for i in range(N)], pa.large_string()),
        "bin": pa.array([bytes([i, 255 - i, 0]) for i in range(N)], pa.binary()),
        "lbin": pa.array([b"x" * (i % 5) for i in range(N)], pa.large_binary()),
        "fbin": pa.array([bytes([i]) * 3 for i in range(N)], pa.binary(3)),
        "list_i": pa.array(nullable([list(range(i % 4)) for i in range(N)], 7), pa.list_(pa.int32())),
        "llist_f": pa.array([[i * 0.5] * (i % 3) for i in range(N)], pa.large_list(pa.float64())),
        "fsl": pa.array([[float(i), -1.0, 2.5] for i in range(N)], pa.list_(pa.float32(), 3)),
        "list_s": pa.array([[f"t{j}" for j in range(i % 3)] for i in range(N)], pa.list_(pa.string())),
        "dict": pa.array([["red", "green", None][i % 3] for i in range(N)]).dictionary_encode(),
        "st": pa.array(nullable([{"a": i, "b": {"c": f"deep{i}"}} for i in range(N)], 6),
                       pa.struct([("a", pa.int64()), ("b", pa.struct([("c", pa.string())]))])),
    }
    return pa.table(cols)


def expected_values(col, arr):
    """What the mapping table says each row becomes: a list of values, or None (absent)."""
    t = arr.type
    out = []
    for v in arr.to_pylist():
        if v is None:
            out.append(None)
            continue
        vals = v if isinstance(v, list) else [v]
        conv = []
        for x in vals:
            if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_duration(t):
                conv.append(None)  # filled from the storage integers below
            elif isinstance(x, bool):
                conv.append(int(x))
            elif isinstance(x, (int,)):
                conv.append(x)
            elif isinstance(x, decimal.Decimal):
                conv.append(float(np.float32(float(x))))
            elif isinstance(x, float):
                conv.append(float(np.float32(x)))
            elif isinstance(x, str):
                conv.append(x.encode())
            elif isinstance(x, bytes):
                conv.append(x)
            else:
                raise TypeError((col, x))
        out.append(conv)
    if pa.types.is_temporal(t):
        storage = arr.cast({8: pa.int64(), 4: pa.int32()}[t.bit_width // 8]) if not pa.types.is_date64(t) else arr.cast(pa.int64())
        out = [None if s is None else [s] for s in storage.to_pylist()]
    return out


def compare(label, got, want):
    if want is None:
        check(got is None, f"{label}: expected absent, got {got}")
        return
    check(got is not None, f"{label}: expected {want}, got absent")
    if len(got) != len(want):
        check(False, f"{label}: {got} != {want}")
    for g, w in zip(got, want):
        if isinstance(w, float) and math.isnan(w):
            check(math.isnan(g), f"{label}: NaN")
        else:
            check(g == w, f"{label}: {got} != {want}")


def converted_table():
    table = mapping_table()
    src = os.path.join(WORK, "mapping.parquet")
    pq.write_table(table, src, row_group_size=20)
    table = pq.read_table(src)  # the judge is what pyarrow reads from the file
    flat = {}
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        if pa.types.is_struct(col.type):
            a = col.field("a")
            c = col.field("b").field("c")
            valid = [v is not None for v in col.to_pylist()]
            flat["st/a"] = [w if ok else None for w, ok in zip(expected_values("st/a", a), valid)]
            flat["st/b/c"] = [w if ok else None for w, ok in zip(expected_values("st/b/c", c), valid)]
        elif pa.types.is_dictionary(col.type):
            flat[name] = expected_values(name, col.dictionary_decode())
        else:
            flat[name] = expected_values(name, col)
    for compression, extra in (("none", []), ("gzip", ["--min-shards", "3"]), ("zlib", ["--max-records-per-shard", "10"])):
        out = os.path.join(WORK, f"mapping-{compression}")
        tfshard("convert", "parquet", src, "-o", out, "--compression", compression, "--quiet", *extra)
        manifest = json.load(open(os.path.join(out, "data.manifest.json")))
        files = [os.path.join(out, s["file"]) for s in manifest["shards"]]
        spec = spec_of(out)
        check(sorted(spec) == sorted(flat), f"spec keys {sorted(spec)}")
        units = {f["name"]: f.get("unit") for f in manifest["features"]}
        date32 = {n for n in table.column_names if pa.types.is_date32(table.column(n).type)}
        comp = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}[compression]
        ds = tf.data.TFRecordDataset(files, compression_type=comp).batch(1000)
        batches = list(ds)
        check(len(batches) == 1, "one batch")
        parsed = tf.io.parse_example(batches[0], spec)
        for name, want in flat.items():
            t = parsed[name]
            if isinstance(t, tf.sparse.SparseTensor):
                rows = tf.RaggedTensor.from_sparse(t).to_list()
            else:
                rows = t.numpy().tolist()
                rows = [r if isinstance(r, list) else [r] for r in rows]
            if name in date32 and units[name] == "ms":
                # The same dates: pyarrow reads days, the manifest's unit is ms.
                want = [None if w is None else [w[0] * 86_400_000] for w in want]
            for i, (g, w) in enumerate(zip(rows, want)):
                # A VarLenFeature cannot tell absent from empty; the inspect check below can.
                if w is None and isinstance(t, tf.sparse.SparseTensor):
                    g = None if g == [] else g
                compare(f"{compression} {name} row {i}", g, w)
        # Absent vs present-but-empty, straight from the records.
        first = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(files[0], compression_type=comp))).numpy())
        check("list_i" in first.features.feature and len(first.features.feature["list_i"].int64_list.value) == 0,
              "an empty list is written as a present, empty list")
        # u64 values near i64::MAX survive.
        check(manifest["records"] == N, "record count")
    print(f"mapping table: {len(flat)} features x {N} rows equal pyarrow's values in plain/gzip/zlib shards")


def sequence_table():
    table = pa.table({
        "steps": pa.array([[[i, i + 1], [i * 2]] if i % 4 else None for i in range(12)], pa.list_(pa.list_(pa.int64()))),
        "frames": pa.array([[[1.0 * i, 2.0]] * (i % 3) for i in range(12)], pa.list_(pa.list_(pa.float32(), 2))),
        "label": pa.array(list(range(12)), pa.int64()),
    })
    src = os.path.join(WORK, "sequence.parquet")
    pq.write_table(table, src)
    out = os.path.join(WORK, "sequence-out")
    tfshard("convert", "parquet", src, "-o", out, "--record-type", "sequence-example", "--quiet")
    ctx_spec, seq_spec = spec_of(out)
    files = sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".tfrecord"))
    for i, rec in enumerate(tf.data.TFRecordDataset(files)):
        ctx, seq = tf.io.parse_single_sequence_example(rec, ctx_spec, seq_spec)
        check(int(ctx["label"]) == i, "label")
        frames = seq["frames"].numpy().tolist()
        check(frames == [[1.0 * i, 2.0]] * (i % 3), f"frames row {i}: {frames}")
        steps = tf.RaggedTensor.from_sparse(seq["steps"]).to_list()
        want = [[i, i + 1], [i * 2]] if i % 4 else []
        check(steps == want, f"steps row {i}: {steps} != {want}")
    print("sequence examples: TensorFlow parses the list-of-list columns as feature lists")


def sequence_pipeline():
    """The pipeline's batches of SequenceExamples equal tf.io.parse_sequence_example's with
    tf.io.RaggedFeature: context features as columns, each feature list two levels of
    row splits (records -> steps -> values); also when the batches come from the cache."""
    n = 13
    table = pa.table({
        "label": pa.array(range(n), pa.int64()),
        "name": pa.array([f"seq-{i}" for i in range(n)]),
        "scores": pa.array([[0.5 * j for j in range(i % 4)] for i in range(n)], pa.list_(pa.float32())),
        "steps": pa.array([[[i, j] * (j % 3) for j in range(i % 5)] if i % 6 else None for i in range(n)],
                          pa.list_(pa.list_(pa.int64()))),
        "frames": pa.array([[[1.0 * i, 2.0 * j] for j in range(i % 4)] for i in range(n)],
                           pa.list_(pa.list_(pa.float32(), 2))),
        "words": pa.array([[[f"w{i}.{j}.{k}" for k in range(j)] for j in range(i % 3)] for i in range(n)],
                          pa.list_(pa.list_(pa.string()))),
    })
    src = os.path.join(WORK, "sequence-pipeline.parquet")
    pq.write_table(table, src)
    out = os.path.join(WORK, "sequence-pipeline")
    tfshard("convert", "parquet", src, "-o", out, "--record-type", "sequence-example", "--quiet",
            "--max-records-per-shard", "4")
    manifest = json.load(open(os.path.join(out, "data.manifest.json")))
    dtype = {"int64": tf.int64, "float": tf.float32, "bytes": tf.string}
    context, lists = {}, {}
    for f in manifest["features"]:
        d = dtype[f["kind"]]
        if f.get("part") == "feature_lists":
            lists[f["name"]] = tf.io.RaggedFeature(d, row_splits_dtype=tf.int64)
        elif f["shape"] is None:
            context[f["name"]] = tf.io.RaggedFeature(d, row_splits_dtype=tf.int64)
        else:
            context[f["name"]] = tf.io.FixedLenFeature(f["shape"], d)
    check(set(lists) == {"steps", "frames", "words"}, f"feature lists: {sorted(lists)}")
    files = [os.path.join(out, s["file"]) for s in manifest["shards"]]
    batch = 5
    want = []
    for records in tf.data.TFRecordDataset(files).batch(batch):
        ctx, seq, _ = tf.io.parse_sequence_example(records, context_features=context, sequence_features=lists)
        want.append((ctx, seq))
    reader = os.environ.get("TFSHARD_READ_BATCHES") or os.path.join(ROOT, "target/debug/examples/read_batches")
    for extra in ([], ["--cache"]):
        lines = subprocess.run([reader, out, str(batch), *extra], check=True, capture_output=True,
                               text=True).stdout.splitlines()
        label = "cached " if extra else ""
        check(len(lines) == len(want), f"{label}batches: {len(lines)} != {len(want)}")
        for b, (line, (ctx, seq)) in enumerate(zip(lines, want)):
            got = json.loads(line)["columns"]

            def flat(name, t):
                v = t.flat_values.numpy() if isinstance(t, tf.RaggedTensor) else t.numpy().reshape(-1)
                if v.dtype == object:
                    return [base64.b64encode(x).decode() for x in v.tolist()]
                return v.tolist()

            for name, t in list(ctx.items()) + list(seq.items()):
                g = got[name]
                check(g["values"] == flat(name, t), f"{label}batch {b} {name}: values {g['values']} != {flat(name, t)}")
                if name in lists:
                    check(g["row_splits"] == t.row_splits.numpy().tolist(), f"{label}batch {b} {name}: row splits")
                    check(g["step_splits"] == t.values.row_splits.numpy().tolist(), f"{label}batch {b} {name}: step splits")
                elif isinstance(t, tf.RaggedTensor):
                    check(g["row_splits"] == t.row_splits.numpy().tolist(), f"{label}batch {b} {name}: row splits")
                    check(g["step_splits"] is None, f"{label}batch {b} {name}: one level")
    print(f"sequence pipeline: batches of {n} SequenceExamples equal tf.io.parse_sequence_example's "
          "with RaggedFeature (read and cached)")


def tfds_layout():
    """`--tfds NAME`: tensorflow_datasets loads the folder with builder_from_directory;
    every record of every split has pyarrow's values with the dtypes and shapes that
    features.json declares; images decode through TFDS's Image feature, labels through
    ClassLabel with the folder names; GIF and WebP are refused or skipped; workers'
    parts finalized with --tfds load the same."""
    import shutil
    import tensorflow_datasets as tfds
    n = 300
    rows = list(range(n))
    table = pa.table({
        "id": pa.array(rows, pa.int64()),
        "maybe": pa.array([None if i % 3 == 0 else i * 7 for i in rows], pa.int64()),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array([float(i + k) for i in rows for k in range(3)], pa.float32()), 3),
        "name": pa.array([f"row {i} \u00e9" for i in rows]),
        "flag": pa.array([i % 2 == 0 for i in rows]),
        "big": pa.array([2**62 + i for i in rows], pa.uint64()),
        "ragged": pa.array([list(range(i % 4)) for i in rows], pa.list_(pa.int64())),
        "meta": pa.array([{"a": i, "b": f"b{i}"} for i in rows], pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "x64": pa.array([i / 3 for i in rows], pa.float64()),
    })
    src = os.path.join(WORK, "tfds.parquet")
    pq.write_table(table, src)
    out = os.path.join(WORK, "tfds-out")
    tfshard("convert", "parquet", src, "-o", out, "--tfds", "interop_ds", "--split", "train=0.7,test=0.3",
            "--target-shard-size", "8KB", "--quiet")
    builder = tfds.builder_from_directory(os.path.join(out, "interop_ds", "1.0.0"))
    seen = []
    for split in ("train", "test"):
        check(builder.info.splits[split].num_shards > 1, f"tfds: {split} in several shards")
        for ex in tfds.as_numpy(builder.as_dataset(split=split)):
            i = int(ex["id"])
            seen.append(i)
            check(ex["id"].dtype == np.int64 and ex["id"].shape == (), "tfds: id is an int64 scalar")
            want_maybe = [] if i % 3 == 0 else [i * 7]
            check(ex["maybe"].tolist() == want_maybe, f"tfds: null as an empty array ({ex['maybe']})")
            check(ex["vec"].dtype == np.float32 and ex["vec"].tolist() == [float(i + k) for k in range(3)], "tfds: vec")
            check(ex["name"] == f"row {i} \u00e9".encode(), "tfds: string")
            check(ex["flag"].dtype == np.bool_ and bool(ex["flag"]) == (i % 2 == 0), "tfds: bool")
            check(ex["big"].dtype == np.uint64 and int(ex["big"]) == 2**62 + i, f"tfds: uint64 {ex['big']}")
            check(ex["ragged"].tolist() == list(range(i % 4)), "tfds: variable length")
            check(int(ex["meta"]["a"]) == i and ex["meta"]["b"] == f"b{i}".encode(), "tfds: nested dict")
            check(ex["x64"] == np.float32(i / 3), "tfds: float64 as float32")
    check(sorted(seen) == rows, "tfds: every row once over the splits")

    # Images: JPEG, PNG, BMP decode through Image; GIF and WebP are an error, or skipped.
    images = os.path.join(ROOT, "testdata", "images")
    img_out = os.path.join(WORK, "tfds-images")
    bad = subprocess.run([BIN, "convert", "images", images, "-o", img_out, "--tfds", "imgs", "--quiet"],
                         capture_output=True, text=True)
    check(bad.returncode == 1 and "TFDS's Image feature cannot decode" in bad.stderr
          and (".gif" in bad.stderr or ".webp" in bad.stderr), f"tfds: gif/webp refused: {bad.stderr}")
    tfshard("convert", "images", images, "-o", img_out, "--tfds", "imgs", "--on-error", "skip",
            "--overwrite", "--quiet")
    manifest = json.load(open(os.path.join(img_out, "imgs", "1.0.0", "imgs-train.manifest.json")))
    skipped = sorted(s["path"].rsplit(".", 1)[1] for s in manifest["skipped"])
    check(skipped == ["gif", "webp"], f"tfds: skipped {skipped}")
    builder = tfds.builder_from_directory(os.path.join(img_out, "imgs", "1.0.0"))
    label = builder.info.features["image"]["class"]["label"]
    check(label.names == manifest["classes"], f"tfds: ClassLabel names {label.names}")
    count = 0
    for ex in tfds.as_numpy(builder.as_dataset(split="train")):
        img = ex["image"]["encoded"]
        check(img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3, f"tfds: image {img.shape}")
        check(img.shape[:2] == (int(ex["image"]["height"]), int(ex["image"]["width"])), "tfds: image size")
        check(label.names[int(ex["image"]["class"]["label"])] == ex["image"]["class"]["text"].decode(), "tfds: label")
        count += 1
    check(count == 5, f"tfds: {count} images")

    # Workers, then finalize --tfds.
    many = os.path.join(WORK, "tfds-workers")
    for i in (1, 0):
        tfshard("convert", "parquet", src, "-o", many, "--tfds", "interop_ds", "--target-shard-size", "8KB",
                "--num-workers", "2", "--worker-index", str(i), "--quiet")
    tfshard("finalize", many, "--tfds", "interop_ds", "--quiet")
    builder = tfds.builder_from_directory(os.path.join(many, "interop_ds", "1.0.0"))
    ids = [int(ex["id"]) for ex in tfds.as_numpy(builder.as_dataset(split="train"))]
    check(sorted(ids) == rows, "tfds: workers' set, every row once")
    print(f"tfds: builder_from_directory loads --tfds output: {n} rows over 2 splits with pyarrow's values, "
          f"{count} images through Image and ClassLabel, GIF/WebP refused or skipped, workers + finalize")


def image_folder():
    """TensorFlow decodes every image/encoded; height, width and labels agree."""
    import shutil
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "images")
    folder = os.path.join(WORK, "images")
    shutil.copytree(src, folder)
    os.makedirs(os.path.join(folder, "zebras"), exist_ok=True)
    out = os.path.join(WORK, "images-out")
    tfshard("convert", "images", folder, "-o", out, "--quiet")
    manifest = json.load(open(os.path.join(out, "data.manifest.json")))
    spec = spec_of(out)
    files = [os.path.join(out, s["file"]) for s in manifest["shards"]]
    n = 0
    for rec in tf.data.TFRecordDataset(files):
        ex = tf.io.parse_single_example(rec, spec)
        image = tf.io.decode_image(ex["image/encoded"], expand_animations=False)
        check(image.shape[0] == int(ex["image/height"]) and image.shape[1] == int(ex["image/width"]),
              f"{ex['image/filename'].numpy()}: decoded {image.shape}, header {int(ex['image/height'])}x{int(ex['image/width'])}")
        text = ex["image/class/text"].numpy().decode()
        check(manifest["classes"][int(ex["image/class/label"])] == text, f"label of {text}")
        check(ex["image/filename"].numpy().decode().split("/")[0] == text, "class folder")
        n += 1
    check(n == 7, f"{n} images")
    print(f"images: TensorFlow decoded all {n} (jpeg, png, gif, bmp, webp); sizes and labels agree")


def shuffled_splits():
    """Shuffled, split output: TensorFlow reads every split; together they hold each row once."""
    table = pa.table({"id": pa.array(range(2000), pa.int64()), "v": pa.array([float(i) for i in range(2000)], pa.float32())})
    src = os.path.join(WORK, "splits.parquet")
    pq.write_table(table, src)
    out = os.path.join(WORK, "splits-out")
    tfshard("convert", "parquet", src, "-o", out, "--shuffle", "--seed", "3", "--split", "train=0.8,validation=0.1,test=0.1",
            "--split-key", "id", "--compression", "gzip", "--quiet")
    seen = []
    for name in ("train", "validation", "test"):
        manifest = json.load(open(os.path.join(out, f"{name}.manifest.json")))
        files = [os.path.join(out, s["file"]) for s in manifest["shards"]]
        spec = spec_of(os.path.join(out, f"{name}.manifest.json"))
        ids = []
        for batch in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(512):
            parsed = tf.io.parse_example(batch, spec)
            ids.extend(parsed["id"].numpy().tolist())
            check(np.array_equal(parsed["v"].numpy(), parsed["id"].numpy().astype(np.float32)), f"{name}: v == id")
        check(len(ids) == manifest["records"], f"{name}: record count")
        check(ids != sorted(ids), f"{name}: shuffled")
        seen.extend(ids)
    check(sorted(seen) == list(range(2000)), "each row in exactly one split")
    print("splits: TensorFlow reads every shuffled, gzip split; each row once")


def hive_from_store():
    """A Hive table converted from and to the S3 server (tf_interop.sh copies it down):
    TensorFlow reads the partition features with the values pyarrow's dataset reader gives."""
    sets = os.path.join(WORK, "s3")
    if not os.path.isdir(sets):
        print("hive from S3: skipped (no .venv-s3; run scripts/s3_venv.sh)")
        return
    want = json.load(open(os.path.join(ROOT, "testdata", "hive.expected.json")))
    for name, rows in (("hive", want), ("hive-2021", [r for r in want if r["year"] == 2021])):
        out = os.path.join(sets, name)
        manifest = json.load(open(os.path.join(out, "data.manifest.json")))
        files = [os.path.join(out, s["file"]) for s in manifest["shards"]]
        spec = spec_of(os.path.join(out, "data.manifest.json"))
        got = []
        for batch in tf.data.TFRecordDataset(files).batch(64):
            parsed = tf.io.parse_example(batch, spec)
            years = dense(parsed["year"]).numpy()
            year = parsed["year"]
            present = set(year.indices[:, 0].numpy().tolist()) if isinstance(year, tf.sparse.SparseTensor) else set(range(len(years)))
            for i in range(len(years)):
                got.append({
                    "id": int(parsed["id"].numpy()[i]),
                    "name": parsed["name"].numpy()[i].decode(),
                    "city": parsed["city"].numpy()[i].decode(),
                    "year": int(np.ravel(years[i])[0]) if i in present else None,
                })
        wanted = [{"id": r["id"], "name": r["name"], "city": r["city"], "year": r["year"]} for r in rows]
        check(got == wanted, f"{name}: TensorFlow's values equal pyarrow's ({len(got)} rows)")
    print(f"hive from S3: TensorFlow reads partition features as pyarrow gives them")


def finalized_workers():
    """Three workers and finalize: TensorFlow reads the same records as one machine's run."""
    table = os.path.join(ROOT, "testdata", "hive")
    one, many = os.path.join(WORK, "workers-one"), os.path.join(WORK, "workers-many")
    tfshard("convert", "parquet", table, "-o", one, "--target-shard-size", "700B", "--quiet")
    for i in (2, 0, 1):
        tfshard("convert", "parquet", table, "-o", many, "--target-shard-size", "700B",
                "--num-workers", "3", "--worker-index", str(i), "--quiet")
    tfshard("finalize", many, "--quiet")

    def read(out):
        files = [os.path.join(out, s["file"]) for s in json.load(open(os.path.join(out, "data.manifest.json")))["shards"]]
        return [r.numpy() for r in tf.data.TFRecordDataset(files)]
    got, want = read(many), read(one)
    check(len(got) == 24 and got == want, "finalized workers: TensorFlow reads one machine's records")
    spec = spec_of(os.path.join(many, "data.manifest.json"))
    parsed = tf.io.parse_example(tf.constant(got), spec)
    check(sorted(parsed["id"].numpy().tolist()) == list(range(24)), "finalized workers: every id once")
    print("workers: TensorFlow reads a set finalized from 3 workers, record for record as one machine's")


def parses_as_inspect_shows(out, label):
    """TensorFlow parses every record of the set in `out` with its manifest's spec, with
    the values `tfshard inspect` shows."""
    manifest = json.load(open(os.path.join(out, "data.manifest.json")))
    files = [os.path.join(out, sh["file"]) for sh in manifest["shards"]]
    want = [json.loads(l) for f in files for l in tfshard("inspect", f, "--limit", "100000").splitlines()]
    spec = spec_of(os.path.join(out, "data.manifest.json"))
    got = []
    for batch in tf.data.TFRecordDataset(files).batch(256):
        parsed = tf.io.parse_example(batch, spec)
        n = int(batch.shape[0])
        rows = [dict() for _ in range(n)]
        for key, t in parsed.items():
            if isinstance(t, tf.sparse.SparseTensor):
                for (i, _), v in zip(t.indices.numpy().tolist(), t.values.numpy().tolist()):
                    rows[i].setdefault(key, []).append(v)
            else:
                for i, v in enumerate(t.numpy().tolist()):
                    rows[i][key] = v if isinstance(v, list) else [v]
        got.extend(rows)
    decoded = [{k: [x.decode() if isinstance(x, bytes) else x for x in v] for k, v in r.items()} for r in got]
    # An empty list is a feature with no values: a VarLenFeature gives none for it.
    wanted = [{k: values_of(v)[1] for k, v in r.items() if values_of(v)[1]} for r in want]
    check(len(got) == manifest["records"] and decoded == wanted,
          f"{label}: TensorFlow parses {len(got)} records as inspect shows them")
    return len(got)


def delta_tables():
    """Delta tables (deletion vectors, column mapping, partition values, a v2 checkpoint
    with sidecars): TensorFlow parses every record with the schema's spec, with the
    values `tfshard inspect` shows (tests/cli/delta.rs checks those against deltalake)."""
    tables = os.path.join(ROOT, "testdata", "delta-kernel")
    names = ["table-with-dv-small", "cdf-column-mapping-name-mode", "basic_partitioned",
             "v2-checkpoints-parquet-with-sidecars", "basic-decimal-table"]
    for name in names:
        out = os.path.join(WORK, "delta-" + name)
        tfshard("convert", "delta", os.path.join(tables, name), "-o", out, "--quiet")
        parses_as_inspect_shows(out, f"delta {name}")
    print(f"delta: TensorFlow parses {len(names)} Delta tables' records (deletion vectors, column mapping, partitions)")


def iceberg_tables():
    """Iceberg tables pyiceberg wrote (tf_interop.sh runs scripts/iceberg_tables.py):
    every snapshot converted (renamed, added and dropped columns, identity and day
    partitions, position and equality deletes, format v1); TensorFlow parses every
    record with the manifest's spec, as many as pyiceberg's rows (tests/cli/iceberg.rs
    checks the values against pyiceberg)."""
    folder = os.path.join(WORK, "iceberg-tables")
    expected = json.load(open(os.path.join(folder, "expected.json")))
    runs = 0
    for table in ("events", "deletes", "v1"):
        location = expected["locations"][table].removeprefix("file://")
        for snapshot in expected[table]:
            out = os.path.join(WORK, f"iceberg-{table}-{runs}")
            tfshard("convert", "iceberg", location, "-o", out, "--snapshot-id",
                    str(snapshot["snapshot_id"]), "--quiet")
            n = parses_as_inspect_shows(out, f"iceberg {table} {snapshot['snapshot_id']}")
            check(n == len(snapshot["records"]), f"iceberg {table}: pyiceberg's {len(snapshot['records'])} rows")
            runs += 1
    print(f"iceberg: TensorFlow parses {runs} snapshots of 3 Iceberg tables (schema changes, partitions, deletes)")


def appended_generations():
    """Iceberg tables appended snapshot by snapshot into one set (appends, a copy-on-write
    delete, a schema change, position and equality deletes): after each append,
    TensorFlow reads the manifest's shards of every generation, parses every record with
    its spec as `tfshard inspect` shows it, and reads the same records as a full
    conversion of that snapshot."""
    folder = os.path.join(WORK, "iceberg-tables")
    expected = json.load(open(os.path.join(folder, "expected.json")))
    appends = 0
    for table in ("events", "deletes"):
        location = expected["locations"][table].removeprefix("file://")
        out = os.path.join(WORK, f"append-{table}")
        for i, snapshot in enumerate(expected[table]):
            sid = str(snapshot["snapshot_id"])
            tfshard("convert", "iceberg", location, "-o", out, "--snapshot-id", sid,
                    "--max-records-per-shard", "16", "--append", "--quiet")
            n = parses_as_inspect_shows(out, f"append {table} s{i}")
            check(n == len(snapshot["records"]), f"append {table} s{i}: pyiceberg's rows")
            full = os.path.join(WORK, f"append-{table}-full-{i}")
            tfshard("convert", "iceberg", location, "-o", full, "--snapshot-id", sid, "--quiet")

            def read(d):
                m = json.load(open(os.path.join(d, "data.manifest.json")))
                return sorted(r.numpy() for r in tf.data.TFRecordDataset(
                    [os.path.join(d, s["file"]) for s in m["shards"]]))
            check(read(out) == read(full), f"append {table} s{i}: a full conversion's records")
            appends += 1
        manifest = json.load(open(os.path.join(out, "data.manifest.json")))
        check(manifest["manifest_version"] == 2, f"append {table}: generations")
    print(f"appends: TensorFlow reads {appends} generations of 2 Iceberg tables, each a full conversion's records")


def chunked_compression():
    """Shards of many deflate chunks (gzip: a member per 512 KiB chunk; zlib: one stream of
    primed chunks), cut early near each shard's target: TensorFlow reads every record,
    equal to the plain shards'."""
    n = 40_000
    rng = np.random.default_rng(7)
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "x": pa.array(rng.integers(0, 1000, n).astype(np.float32)),
        "text": pa.array([f"row {i} " + "abc" * (i % 50) for i in range(n)]),
    })
    src = os.path.join(WORK, "chunked.parquet")
    pq.write_table(table, src, row_group_size=5000)
    records = {}
    for compression in ("none", "gzip", "zlib"):
        out = os.path.join(WORK, f"chunked-{compression}")
        tfshard("convert", "parquet", src, "-o", out, "--compression", compression,
                "--target-shard-size", "2MiB", "--quiet")
        manifest = json.load(open(os.path.join(out, "data.manifest.json")))
        files = [os.path.join(out, s["file"]) for s in manifest["shards"]]
        comp = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}[compression]
        records[compression] = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type=comp)]
        check(len(records[compression]) == n, f"{compression}: {len(records[compression])} records")
        if compression == "gzip":
            members = sum(open(f, "rb").read().count(b"\x1f\x8b\x08\x00\x00\x00\x00\x00") for f in files)
            check(members > 2 * len(files), f"gzip: {members} members in {len(files)} files")
    check(records["gzip"] == records["none"] and records["zlib"] == records["none"],
          "chunked gzip and zlib hold the plain records")
    print(f"chunked deflate: TensorFlow reads multi-member gzip and multi-chunk zlib shards, {n} records each")


def tfrecords_in():
    """convert tfrecord: TensorFlow-written inputs (plain, GZIP, ZLIB, SequenceExamples,
    opaque payloads, a TFDS folder) resharded, recompressed and shuffled: TensorFlow
    reads every output, the payloads equal the inputs' (in order, or as a multiset with
    --shuffle), and tf.io.parse_example parses the Examples with the manifest's spec."""
    base = os.path.join(ROOT, "testdata", "tfrecord-in")
    read_in = {
        "spark": [], "beam": ["GZIP"], "hadoop": ["ZLIB"], "tfds": [], "sequence": [], "opaque": [],
    }
    runs = 0
    for name, comp in read_in.items():
        folder = os.path.join(base, name)
        files = sorted(os.path.join(folder, f) for f in os.listdir(folder)
                       if not f.startswith(("_", ".")) and f != "dataset_info.json")
        want = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type=(comp or [""])[0])]
        record_type = {"sequence": "sequence-example", "opaque": "bytes"}.get(name, "auto")
        for compression, shuffle in (("none", False), ("gzip", False), ("zlib", True)):
            out = os.path.join(WORK, f"tfin-{name}-{compression}")
            args = ["convert", "tfrecord", folder, "-o", out, "--record-type", record_type,
                    "--compression", compression, "--target-shard-size", "16KB", "--quiet"]
            tfshard(*(args + (["--shuffle", "--seed", "5"] if shuffle else [])))
            manifest = json.load(open(os.path.join(out, "data.manifest.json")))
            shards = [os.path.join(out, s["file"]) for s in manifest["shards"]]
            tf_comp = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}[compression]
            got = [r.numpy() for r in tf.data.TFRecordDataset(shards, compression_type=tf_comp)]
            if shuffle:
                check(sorted(got) == sorted(want) and got != want, f"tfrecord {name} shuffled: the same payloads")
            else:
                check(got == want, f"tfrecord {name} {compression}: payloads in order")
            if name in ("spark", "beam", "hadoop", "tfds"):
                spec = spec_of(os.path.join(out, "data.manifest.json"))
                n = 0
                for batch in tf.data.TFRecordDataset(shards, compression_type=tf_comp).batch(64):
                    parsed = tf.io.parse_example(batch, spec)
                    n += int(parsed["id"].shape[0])
                check(n == len(want), f"tfrecord {name}: the manifest's spec parses every record")
            runs += 1
    print(f"tfrecords in: TensorFlow reads all {runs} outputs (6 inputs x plain/gzip/zlib+shuffle), payloads equal")


library_files()
tfrecords_in()
chunked_compression()
hive_from_store()
delta_tables()
iceberg_tables()
appended_generations()
finalized_workers()
shuffled_splits()
image_folder()
converted_table()
sequence_table()
sequence_pipeline()
tfds_layout()
print(f"tf_interop: {checks} passed, 0 failed")
