#!/usr/bin/env python3
"""One reader of the standard shards into NumPy batches of 256, one full epoch, for
scripts/bench_python.sh (each reader in its own process, so its peak memory is its own).
Prints `records seconds`.

Usage: python_read_bench.py tfshard|tfshard-xy|tfshard-arrow|tfdata|tfrecord DIR
(tfshard-xy parses the two features the other two readers parse.)
"""
import glob
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
reader, folder = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(os.path.join(folder, "*.tfrecord")))
n = 0
if reader.startswith("tfshard"):
    import tfshard

    fmt = "arrow" if reader == "tfshard-arrow" else "numpy"
    columns = ["x", "y"] if reader == "tfshard-xy" else None
    data = tfshard.Dataset(folder, batch_size=256, shuffle_buffer=0, format=fmt, columns=columns)
    start = time.perf_counter()
    for batch in data:
        n += batch.num_rows if fmt == "arrow" else len(batch["y"])
elif reader == "tfdata":
    import tensorflow as tf

    # Two of the three features (as few as it likes): the label and the vector.
    spec = {"x": tf.io.FixedLenFeature([32], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}
    ds = (
        tf.data.TFRecordDataset(files)
        .batch(256)
        .map(lambda r: tf.io.parse_example(r, spec), num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )
    start = time.perf_counter()
    for batch in ds.as_numpy_iterator():
        n += len(batch["y"])
elif reader == "tfrecord":
    import numpy as np
    from tfrecord.reader import tfrecord_loader

    description = {"x": "float", "y": "int"}
    start = time.perf_counter()
    batch = []
    for path in files:
        for record in tfrecord_loader(path, None, description):
            batch.append(record)
            if len(batch) == 256:
                xs, ys = np.stack([r["x"] for r in batch]), np.concatenate([r["y"] for r in batch])
                n += len(ys)
                batch = []
    n += len(batch)
else:
    sys.exit(f"unknown reader {reader}")
print(n, time.perf_counter() - start)
