#!/usr/bin/env python3
"""tf.data over the same shards, for scripts/bench_read.sh. Prints one line per variant:
`name records seconds`. Usage: tf_read_bench.py SPEC_PY FILE..."""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

spec = eval(open(sys.argv[1]).read(), {"tf": tf})
files = sys.argv[2:]
AUTOTUNE = tf.data.AUTOTUNE


def files_ds():
    return tf.data.Dataset.from_tensor_slices(files)


def per_record():
    # The best pipeline a tutorial gives.
    ds = files_ds().interleave(tf.data.TFRecordDataset, cycle_length=8, num_parallel_calls=AUTOTUNE, deterministic=False)
    ds = ds.map(lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls=AUTOTUNE)
    return ds.shuffle(10000).batch(64, drop_remainder=True).prefetch(AUTOTUNE)


def batch_first():
    ds = files_ds().interleave(tf.data.TFRecordDataset, cycle_length=8, num_parallel_calls=AUTOTUNE, deterministic=False)
    ds = ds.shuffle(10000).batch(64, drop_remainder=True)
    return ds.map(lambda b: tf.io.parse_example(b, spec), num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)


def raw():
    # Batched so that Python's per-element loop does not bound it; counted per record.
    return tf.data.TFRecordDataset(files).batch(1024)


for name, make in [("tf.data raw TFRecordDataset (no parse)", raw), ("tf.data per-record parse (tutorial)", per_record),
                   ("tf.data batch then parse_example", batch_first)]:
    ds = make()
    n = 0
    start = time.perf_counter()
    for item in ds:
        n += int(item.shape[0]) if name.startswith("tf.data raw") else 64
    elapsed = time.perf_counter() - start
    print(f"{name}\t{n}\t{elapsed:.3f}", flush=True)
