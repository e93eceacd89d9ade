#!/usr/bin/env python3
"""Writes testdata/tfrecord-in/: TFRecord files as other writers leave them, written by
real TensorFlow, for `convert tfrecord`'s tests.

Run: `$(scripts/venv.sh) scripts/make_tfrecord_inputs.py` (the venv with tensorflow-cpu).

- spark/: Spark's layout (spark-tfrecord): `part-0000N-<uuid>-c000.tfrecord` beside
  `_SUCCESS` and Hadoop's hidden `.part-….crc` checksum files; plain records.
- beam/: Beam's `WriteToTFRecord` names, `data-0000N-of-00003.tfrecord.gz`: GZIP.
- hadoop/: the older connector's `part-r-0000N` (no extension): ZLIB, found by content.
- sequence/: tf.train.SequenceExample records (plain).
- opaque/: payloads that are not protobuf messages (`--record-type bytes`).
- tfds/: a TFDS dataset version folder of one split (`toy-train.tfrecord-0000N-of-00002`
  and the `dataset_info.json` TFDS writes, trimmed to what readers use).

`expected.json` gives, per folder, every payload in reading order as TensorFlow's
`TFRecordDataset` reads it back: its length and zlib CRC-32.
"""
import json
import os
import random
import shutil
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "tfrecord-in")
rng = random.Random(30)


def example(i):
    feats = {
        "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
        "label": tf.train.Feature(bytes_list=tf.train.BytesList(value=[[b"cat", b"dog", b"owl"][i % 3]])),
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i * 0.5, -1.25, 3.0])),
        "tokens": tf.train.Feature(
            int64_list=tf.train.Int64List(value=[rng.randrange(1000) for _ in range(rng.randrange(0, 40))])
        ),
    }
    if i % 7 == 0:
        feats["note"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"seventh"]))
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()


def sequence(i):
    steps = [
        tf.train.Feature(float_list=tf.train.FloatList(value=[rng.random() for _ in range(4)]))
        for _ in range(rng.randrange(1, 6))
    ]
    return tf.train.SequenceExample(
        context=tf.train.Features(feature={"id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}),
        feature_lists=tf.train.FeatureLists(feature_list={"frames": tf.train.FeatureList(feature=steps)}),
    ).SerializeToString()


def write(path, payloads, compression=None):
    options = tf.io.TFRecordOptions(compression_type=compression) if compression else None
    with tf.io.TFRecordWriter(path, options) as w:
        for p in payloads:
            w.write(p)


def read_back(paths, compression=None):
    out = []
    for p in paths:
        for r in tf.data.TFRecordDataset(p, compression_type=compression or ""):
            b = r.numpy()
            out.append([len(b), zlib.crc32(b)])
    return out


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    expected = {}
    n = 0

    d = os.path.join(OUT, "spark")
    os.makedirs(d)
    paths = []
    for k in range(3):
        name = f"part-{k:05d}-6f1c2a9e-0b4d-4c3e-9a57-2d3f8e1b7c40-c000.tfrecord"
        write(os.path.join(d, name), [example(n + i) for i in range(150 + 40 * k)])
        n += 150 + 40 * k
        paths.append(os.path.join(d, name))
        with open(os.path.join(d, f".{name}.crc"), "wb") as f:
            f.write(b"crc\x00\x00\x02\x00" + bytes(rng.randrange(256) for _ in range(12)))
    open(os.path.join(d, "_SUCCESS"), "wb").close()
    expected["spark"] = read_back(paths)

    d = os.path.join(OUT, "beam")
    os.makedirs(d)
    paths = []
    for k in range(3):
        path = os.path.join(d, f"data-{k:05d}-of-00003.tfrecord.gz")
        write(path, [example(n + i) for i in range(200)], "GZIP")
        n += 200
        paths.append(path)
    expected["beam"] = read_back(paths, "GZIP")

    d = os.path.join(OUT, "hadoop")
    os.makedirs(d)
    paths = []
    for k in range(2):
        path = os.path.join(d, f"part-r-{k:05d}")
        write(path, [example(n + i) for i in range(120)], "ZLIB")
        n += 120
        paths.append(path)
    open(os.path.join(d, "_SUCCESS"), "wb").close()
    expected["hadoop"] = read_back(paths, "ZLIB")

    d = os.path.join(OUT, "sequence")
    os.makedirs(d)
    path = os.path.join(d, "frames.tfrecord")
    write(path, [sequence(i) for i in range(100)])
    expected["sequence"] = read_back([path])

    d = os.path.join(OUT, "opaque")
    os.makedirs(d)
    path = os.path.join(d, "blobs.tfrecord")
    # 0xff first: no protobuf message starts with field 31 of wire type 7.
    write(path, [b"\xff" + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))) for _ in range(80)])
    expected["opaque"] = read_back([path])

    d = os.path.join(OUT, "tfds")
    os.makedirs(d)
    paths, lengths = [], []
    for k in range(2):
        path = os.path.join(d, f"toy-train.tfrecord-{k:05d}-of-00002")
        count = 90 + 10 * k
        write(path, [example(n + i) for i in range(count)])
        n += count
        paths.append(path)
        lengths.append(str(count))
    info = {
        "name": "toy",
        "version": "1.0.0",
        "fileFormat": "tfrecord",
        "splits": [
            {
                "name": "train",
                "numBytes": str(sum(os.path.getsize(p) for p in paths)),
                "shardLengths": lengths,
                "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}",
            }
        ],
    }
    with open(os.path.join(d, "dataset_info.json"), "w") as f:
        json.dump(info, f, indent=2)
    expected["tfds"] = read_back(paths)

    expected["tensorflow"] = tf.__version__
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f)
    total = sum(os.path.getsize(os.path.join(r, x)) for r, _, fs in os.walk(OUT) for x in fs)
    print(f"wrote {OUT}: {total} bytes")


if __name__ == "__main__":
    main()
