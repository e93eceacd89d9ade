#!/usr/bin/env python3
"""Writes the golden TFRecord files in testdata/golden/ with real TensorFlow.

Run: `$(scripts/venv.sh) scripts/make_golden.py` (installs tensorflow-cpu into .venv).

Each file comes with `<file>.expected.json`: the TensorFlow version, the payload length
of every record, and (for Example/SequenceExample files) every record as `tfshard
inspect` prints it. Our tests read every file, compare with the JSON, and rebuild the
plain files byte for byte from the same messages.
"""
import base64
import gzip
import json
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "golden")


def f(v):
    """A float as inspect prints it: float32 widened to float64, shortest repr."""
    return float(tf.constant(v, tf.float32).numpy())


def feature_json(feat):
    kind = feat.WhichOneof("kind")
    if kind == "int64_list":
        return {"int64": list(feat.int64_list.value)}
    if kind == "float_list":
        return {"float": [f(v) for v in feat.float_list.value]}
    if kind == "bytes_list":
        vals = list(feat.bytes_list.value)
        try:
            return {"bytes": [v.decode("utf-8") for v in vals]}
        except UnicodeDecodeError:
            return {"bytes_b64": [base64.b64encode(v).decode() for v in vals]}
    return {}


def features_json(features):
    return {k: feature_json(features.feature[k]) for k in sorted(features.feature)}


def example_json(ex):
    return features_json(ex.features)


def seq_json(seq):
    return {
        "context": features_json(seq.context),
        "feature_lists": {
            k: [feature_json(x) for x in seq.feature_lists.feature_list[k].feature]
            for k in sorted(seq.feature_lists.feature_list)
        },
    }


def i64(*v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(v)))


def fl(*v):
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(v)))


def by(*v):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(v)))


def examples():
    """Every feature kind, empty lists, odd values."""
    out = []
    out.append(tf.train.Example(features=tf.train.Features(feature={
        "id": by(b"row-0"), "label": i64(3), "score": fl(0.1),
        "vec": fl(1.0, -2.5, 3.25), "tags": by(b"a", b"", "é".encode()),
        "ints": i64(0, -1, 2**63 - 1, -(2**63), 300),
    })))
    out.append(tf.train.Example(features=tf.train.Features(feature={
        "id": by(b"row-1"), "label": i64(), "score": fl(),
        "vec": fl(float("nan"), float("inf"), float("-inf")),
        "tags": by(), "blob": by(b"\x00\xff\xfe"),
    })))
    out.append(tf.train.Example(features=tf.train.Features(feature={})))
    out.append(tf.train.Example(features=tf.train.Features(feature={
        "id": by(b"row-3"), "label": i64(7), "score": fl(3.4028234663852886e38, 1e-45),
    })))
    return out


def sequences():
    out = []
    s = tf.train.SequenceExample()
    s.context.feature["len"].CopyFrom(i64(3))
    s.context.feature["name"].CopyFrom(by(b"seq-0"))
    fl_ = s.feature_lists.feature_list["tokens"]
    for toks in ([1, 2], [3], []):
        fl_.feature.add().CopyFrom(i64(*toks))
    fl2 = s.feature_lists.feature_list["frames"]
    for v in ([0.5, 1.5], [2.5, 3.5], [4.5, 5.5]):
        fl2.feature.add().CopyFrom(fl(*v))
    out.append(s)
    s = tf.train.SequenceExample()
    s.context.feature["len"].CopyFrom(i64(0))
    s.feature_lists.feature_list["tokens"].SetInParent()
    out.append(s)
    return out


def write(name, payloads, options=None, records=None):
    path = os.path.join(OUT, name)
    with tf.io.TFRecordWriter(path, options) as w:
        for p in payloads:
            w.write(p)
    expected = {
        "tensorflow": tf.__version__,
        "payload_lengths": [len(p) for p in payloads],
    }
    if records is not None:
        # Exactly the lines `tfshard inspect` prints (Python's json.dumps separators).
        expected["lines"] = [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in records]
    if sum(len(p) for p in payloads) < 16384:
        expected["payloads_b64"] = [base64.b64encode(p).decode() for p in payloads]
    with open(path + ".expected.json", "w") as fh:
        json.dump(expected, fh, indent=1, sort_keys=True, ensure_ascii=False)
        fh.write("\n")
    # TensorFlow reads back what it wrote.
    got = list(tf.data.TFRecordDataset(path, compression_type=(options or "")).as_numpy_iterator())
    assert got == payloads, name
    return path


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    exs = examples()
    ex_bytes = [e.SerializeToString(deterministic=True) for e in exs]
    ex_json = [example_json(e) for e in exs]
    write("examples.tfrecord", ex_bytes, records=ex_json)
    write("examples.tfrecord.gz", ex_bytes, "GZIP", records=ex_json)
    write("examples.tfrecord.zlib", ex_bytes, "ZLIB", records=ex_json)
    seqs = sequences()
    write("sequence.tfrecord", [s.SerializeToString(deterministic=True) for s in seqs],
          records=[seq_json(s) for s in seqs])
    write("empty.tfrecord", [])
    write("zero_length.tfrecord", [b""])
    big = bytes((i * 7919) % 251 for i in range(1_000_000))
    write("large_record.tfrecord", [b"small", big, b""])
    # Two gzip members: two files TensorFlow wrote, concatenated. TensorFlow reads both.
    a = write("member_a.tfrecord.gz", ex_bytes[:2], "GZIP")
    b = write("member_b.tfrecord.gz", ex_bytes[2:], "GZIP")
    two = os.path.join(OUT, "two_members.tfrecord.gz")
    with open(two, "wb") as out:
        for part in (a, b):
            with open(part, "rb") as fh:
                out.write(fh.read())
            os.remove(part)
            os.remove(part + ".expected.json")
    got = list(tf.data.TFRecordDataset(two, compression_type="GZIP").as_numpy_iterator())
    assert got == ex_bytes, "TensorFlow reads every gzip member"
    assert gzip.decompress(open(two, "rb").read())  # stdlib agrees it is valid gzip
    with open(two + ".expected.json", "w") as fh:
        json.dump({"tensorflow": tf.__version__, "payload_lengths": [len(p) for p in ex_bytes],
                   "lines": [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in ex_json],
                   "payloads_b64": [base64.b64encode(p).decode() for p in ex_bytes]},
                  fh, indent=1, sort_keys=True, ensure_ascii=False)
        fh.write("\n")
    for name in sorted(os.listdir(OUT)):
        size = os.path.getsize(os.path.join(OUT, name))
        assert size < 1.5 * 2**20, name
        print(f"{size:>9}  {name}")


if __name__ == "__main__":
    sys.exit(main())
