"""tf.data on SequenceExample shards: the batched parse (`batch` then
`tf.io.parse_sequence_example` with a RaggedFeature feature list, parallel map, prefetch).
Prints records/s of a warm epoch (the second). Usage: tf_sequence_bench.py BATCH FILE..."""
import sys
import time

import tensorflow as tf

batch, files = int(sys.argv[1]), sys.argv[2:]
ctx = {"label": tf.io.FixedLenFeature([], tf.int64)}
seq = {"frames": tf.io.RaggedFeature(tf.float32, row_splits_dtype=tf.int64)}
ds = (tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
      .batch(batch)
      .map(lambda x: tf.io.parse_sequence_example(x, context_features=ctx, sequence_features=seq)[:2],
           num_parallel_calls=tf.data.AUTOTUNE)
      .prefetch(tf.data.AUTOTUNE))
for epoch in range(2):
    n, start = 0, time.perf_counter()
    for c, _ in ds:
        n += int(tf.shape(c["label"])[0])
    seconds = time.perf_counter() - start
print(n / seconds)
