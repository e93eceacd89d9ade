#!/usr/bin/env python3
"""The Python way to pack an image folder: tf.io.read_file + tf.train.Example +
TFRecordWriter, one shard per 256 MiB. Usage: python_image_exporter.py DIR OUT_DIR"""
import os
import sys

import tensorflow as tf

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
classes = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
files = sorted((os.path.join(c, f), i) for i, c in enumerate(classes) for f in os.listdir(os.path.join(src, c)))
shard, size = 0, 0
w = tf.io.TFRecordWriter(os.path.join(out, f"data-{shard:05d}.tfrecord"))
for rel, label in files:
    data = tf.io.read_file(os.path.join(src, rel)).numpy()
    ex = tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
        "image/filename": tf.train.Feature(bytes_list=tf.train.BytesList(value=[rel.encode()])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    })).SerializeToString()
    if size + len(ex) + 16 > 256 << 20:
        w.close()
        shard, size = shard + 1, 0
        w = tf.io.TFRecordWriter(os.path.join(out, f"data-{shard:05d}.tfrecord"))
    w.write(ex)
    size += len(ex) + 16
w.close()
