#!/usr/bin/env python3
"""What a team writes today: pyarrow iter_batches -> tf.train.Example per row ->
tf.io.TFRecordWriter, rolling to a new shard at 256 MiB. The baseline for
scripts/bench_convert.sh.  Usage: python_exporter.py OUT_DIR FILE..."""
import os
import sys

import pyarrow.parquet as pq
import tensorflow as tf

out, files = sys.argv[1], sys.argv[2:]
os.makedirs(out, exist_ok=True)
limit = 256 << 20
shard, size, rows = 0, 0, 0
writer = tf.io.TFRecordWriter(os.path.join(out, f"data-{shard:05d}.tfrecord"))
for path in files:
    for batch in pq.ParquetFile(path).iter_batches(batch_size=8192):
        cols = batch.to_pydict()
        for x, y, i in zip(cols["x"], cols["y"], cols["id"]):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[y])),
                "id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[i.encode()])),
            }))
            data = ex.SerializeToString()
            if size + len(data) + 16 > limit:
                writer.close()
                shard += 1
                size = 0
                writer = tf.io.TFRecordWriter(os.path.join(out, f"data-{shard:05d}.tfrecord"))
            writer.write(data)
            size += len(data) + 16
            rows += 1
writer.close()
print(f"{rows} rows")
