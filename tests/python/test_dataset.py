"""tfshard.Dataset: NumPy and Arrow batches, every record once over ranks and DataLoader
workers, len(), epochs, resume, cache, errors; and the batches TensorFlow parses."""

import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import tfshard
from conftest import ROOT, corrupt_copy


def ids(dataset):
    out = []
    for batch in dataset:
        out.extend(v.decode() for v in batch["id"].reshape(-1))
    return out


@pytest.fixture(scope="module")
def every_id(small_shards):
    return sorted(r["id"]["bytes"][0] for r in tfshard.inspect(small_shards))


def test_numpy_batches_have_the_documented_shapes(small_shards):
    ds = tfshard.Dataset(small_shards, batch_size=256, shuffle_buffer=0, cycle_length=1)
    batches = list(ds)
    assert len(batches) == len(ds) == 8
    first = batches[0]
    assert first["x"].shape == (256, 8) and first["x"].dtype == np.float32
    assert first["y"].shape == (256,) and first["y"].dtype == np.int64
    assert first["id"].dtype == object and isinstance(first["id"][0], bytes)
    values, splits = first["tags"]
    assert splits.dtype == np.int64 and splits.shape == (257,) and splits[0] == 0 and splits[-1] == len(values)
    assert batches[-1]["y"].shape == (2000 - 7 * 256,)
    records = list(tfshard.inspect(small_shards, limit=2))
    assert first["y"][:2].tolist() == [r["y"]["int64"][0] for r in records]
    assert list(values[splits[1] : splits[2]]) == [t.encode() for t in records[1].get("tags", {}).get("bytes", [])]


def test_arrow_batches_hold_the_same_values(small_shards):
    as_numpy = next(iter(tfshard.Dataset(small_shards, batch_size=100, shuffle_buffer=0)))
    batch = next(iter(tfshard.Dataset(small_shards, batch_size=100, shuffle_buffer=0, format="arrow")))
    assert isinstance(batch, pa.RecordBatch) and batch.num_rows == 100
    assert batch.schema.field("x").type == pa.list_(pa.field("item", pa.float32(), nullable=False), 8)
    np.testing.assert_array_equal(np.stack(batch.column("x").to_numpy(zero_copy_only=False)), as_numpy["x"])
    assert batch.column("id").to_pylist() == list(as_numpy["id"])
    values, splits = as_numpy["tags"]
    assert batch.column("tags").to_pylist()[3] == list(values[splits[3] : splits[4]])


def test_shuffle_reads_every_record_once_in_a_seeded_order(small_shards, every_id):
    a = ids(tfshard.Dataset(small_shards, batch_size=64, seed=7, shuffle_buffer=500))
    assert sorted(a) == every_id and a != every_id
    assert ids(tfshard.Dataset(small_shards, batch_size=64, seed=7, shuffle_buffer=500)) == a
    assert ids(tfshard.Dataset(small_shards, batch_size=64, seed=8, shuffle_buffer=500)) != a


def test_epochs_advance_and_set_epoch_repeats_one(small_shards, every_id):
    ds = tfshard.Dataset(small_shards, batch_size=64, seed=7, shuffle_buffer=500)
    first, second = ids(ds), ids(ds)
    assert ds.epoch == 2 and first != second and sorted(second) == every_id
    ds.set_epoch(1)
    assert ids(ds) == second


class IterableDataset:
    """Stands for torch.utils.data.IterableDataset."""


class FakeTorch(types.ModuleType):
    """What Dataset asks of torch: utils.data.get_worker_info() inside a worker, and the
    IterableDataset class a DataLoader checks for."""

    def __init__(self, worker, workers):
        super().__init__("torch")
        info = types.SimpleNamespace(id=worker, num_workers=workers) if workers else None
        self.utils = types.SimpleNamespace(
            data=types.SimpleNamespace(get_worker_info=lambda: info, IterableDataset=IterableDataset)
        )


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_ranks_times_workers_read_each_record_once(small_shards, every_id, monkeypatch, drop_remainder):
    ranks, workers, size = 3, 2, 64
    seen, batches, lens = [], 0, set()
    for rank in range(ranks):
        ds = tfshard.Dataset(
            small_shards, batch_size=size, seed=1, num_shards=ranks, shard_index=rank, drop_remainder=drop_remainder
        )
        rank_batches = 0
        for worker in range(workers):
            monkeypatch.setitem(sys.modules, "torch", FakeTorch(worker, workers))
            for batch in ds:
                seen.extend(v.decode() for v in batch["id"])
                rank_batches += 1
                assert len(batch["id"]) == size or not drop_remainder
        monkeypatch.delitem(sys.modules, "torch")
        assert rank_batches == len(ds)
        lens.add(len(ds))
        batches += rank_batches
    if drop_remainder:
        # Every rank the same batches (DDP): the smallest share's whole batches.
        assert lens == {666 // size}
        assert len(seen) == len(set(seen)) and set(seen) <= set(every_id)
        assert len(seen) == ranks * (666 // size) * size
    else:
        assert sorted(seen) == every_id


def test_state_resumes_with_the_same_remaining_batches(small_shards):
    def run(ds, n=None):
        out = []
        for batch in ds:
            out.append(batch["id"].tolist())
            if n is not None and len(out) == n:
                break
        return out

    kwargs = dict(batch_size=100, seed=5, shuffle_buffer=300, num_shards=2, shard_index=1)
    whole = run(tfshard.Dataset(small_shards, **kwargs))
    ds = tfshard.Dataset(small_shards, **kwargs)
    head = run(ds, 4)
    state = json.loads(json.dumps(ds.state()))
    assert state["batches"] == 4 and state["epoch"] == 0
    rest = run(tfshard.Dataset(small_shards, state=state, **kwargs))
    assert head + rest == whole
    with pytest.raises(ValueError, match="seed"):
        tfshard.Dataset(small_shards, state=state, **dict(kwargs, seed=6))


def test_with_torch_loaded_a_dataset_is_an_iterable_dataset(small_shards, monkeypatch):
    import pickle

    monkeypatch.setitem(sys.modules, "torch", FakeTorch(0, 0))
    ds = tfshard.Dataset(small_shards, batch_size=64, seed=3)
    assert isinstance(ds, IterableDataset) and isinstance(ds, tfshard.Dataset)
    copy = pickle.loads(pickle.dumps(ds))
    assert isinstance(copy, IterableDataset) and len(copy) == len(ds) == 32


def test_resumes_that_would_not_give_the_same_batches_are_refused(small_shards, monkeypatch):
    ds = tfshard.Dataset(small_shards, batch_size=100, seed=1)
    it = iter(ds)
    next(it)
    state = ds.state()
    del it
    resumed = tfshard.Dataset(small_shards, batch_size=100, seed=1, state=state)
    monkeypatch.setitem(sys.modules, "torch", FakeTorch(0, 2))
    with pytest.raises(ValueError, match="DataLoader workers"):
        iter(resumed)
    monkeypatch.delitem(sys.modules, "torch")
    cached = tfshard.Dataset(small_shards, batch_size=100, seed=1, cache=True)
    for _ in cached:
        pass
    it = iter(cached)
    next(it)
    with pytest.raises(ValueError, match="memory cache"):
        tfshard.Dataset(small_shards, batch_size=100, seed=1, cache=True, state=cached.state())
    with pytest.raises(ValueError, match="cache"):
        tfshard.Dataset(small_shards, batch_size=100, seed=1, state=cached.state())


def test_each_rank_keeps_its_own_cache_file(small_shards, tmp_path, every_id):
    seen = []
    for rank in range(2):
        ds = tfshard.Dataset(small_shards, batch_size=128, seed=2, cache=tmp_path / "c", num_shards=2, shard_index=rank)
        first, second = ids(ds), ids(ds)
        assert sorted(first) == sorted(second)
        seen += first
    assert sorted(seen) == every_id
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.0-1000", "c.1000-2000"]


def test_cache_serves_later_epochs(small_shards, tmp_path, every_id):
    for cache in (True, tmp_path / "small.cache"):
        ds = tfshard.Dataset(small_shards, batch_size=128, seed=2, cache=cache)
        first, second = ids(ds), ids(ds)
        assert sorted(first) == sorted(second) == every_id and first != second
    assert (tmp_path / "small.cache").stat().st_size > 0


def test_columns_and_their_errors(small_shards):
    batch = next(iter(tfshard.Dataset(small_shards, batch_size=10, columns=["y"])))
    assert list(batch) == ["y"]
    with pytest.raises(ValueError, match="nope"):
        tfshard.Dataset(small_shards, batch_size=10, columns=["nope"])
    for bad in (dict(batch_size=0), dict(num_shards=2, shard_index=2), dict(format="torch")):
        with pytest.raises(ValueError):
            tfshard.Dataset(small_shards, **{"batch_size": 10, **bad})


def test_a_corrupt_record_raises_with_its_location(small_shards, tmp_path):
    broken = tmp_path / "broken"
    shard = corrupt_copy(small_shards, broken, 1)
    with pytest.raises(tfshard.Error) as caught:
        for _ in tfshard.Dataset(broken, batch_size=64, shuffle_buffer=0):
            pass
    assert caught.value.file.endswith(shard.name)
    assert caught.value.record is not None or caught.value.offset is not None


def test_a_pickled_dataset_reads_the_same(small_shards):
    import pickle

    ds = tfshard.Dataset(small_shards, batch_size=64, seed=3)
    ds.set_epoch(2)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.epoch == 2 and len(copy) == len(ds)
    assert ids(copy) == ids(ds)


def test_iteration_can_be_left_midway(small_shards):
    ds = tfshard.Dataset(small_shards, batch_size=16)
    for _ in range(3):
        it = iter(ds)
        next(it)
        del it
    assert len(list(ds)) == len(ds)


def test_the_example_trains(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "python" / "train_loop.py"), str(tmp_path / "shards")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "epoch 3" in done.stdout


TF_PARSE = r"""
import json, sys
import numpy as np, tensorflow as tf
files, spec_json, out = sys.argv[1], sys.argv[2], sys.argv[3]
spec = {}
for f in json.loads(spec_json):
    dtype = {"int64": tf.int64, "float": tf.float32, "bytes": tf.string}[f["kind"]]
    spec[f["name"]] = tf.io.FixedLenFeature(f["shape"], dtype) if f.get("shape") is not None else tf.io.RaggedFeature(dtype)
ds = tf.data.TFRecordDataset(json.loads(files)).batch(256).map(lambda r: tf.io.parse_example(r, spec))
arrays = {}
for i, batch in enumerate(ds):
    for name, t in batch.items():
        if isinstance(t, tf.RaggedTensor):
            arrays[f"{i}/{name}/values"] = t.flat_values.numpy()
            arrays[f"{i}/{name}/row_splits"] = t.row_splits.numpy()
        else:
            arrays[f"{i}/{name}"] = t.numpy()
np.savez(out, **arrays)
"""


def test_batches_equal_tensorflow_parse_example(small_shards, tf_python, tmp_path):
    # One file after another, as TFRecordDataset(files) reads them.
    ds = tfshard.Dataset(small_shards, batch_size=256, shuffle_buffer=0, cycle_length=1)
    out = tmp_path / "tf.npz"
    done = subprocess.run(
        [tf_python, "-c", TF_PARSE, json.dumps(ds.files), json.dumps(ds.spec), str(out)],
        capture_output=True,
        text=True,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    expected = np.load(out, allow_pickle=True)
    compared = 0
    for i, batch in enumerate(ds):
        for name, value in batch.items():
            if isinstance(value, tuple):
                np.testing.assert_array_equal(value[0], expected[f"{i}/{name}/values"])
                np.testing.assert_array_equal(value[1], expected[f"{i}/{name}/row_splits"])
            else:
                np.testing.assert_array_equal(value, expected[f"{i}/{name}"])
            compared += 1
    assert compared == 8 * len(ds.spec)


def test_append_and_reading_some_generations(tmp_path):
    """convert(..., append=True) adds a generation; Dataset(generations=[...]) reads only
    its shards, and a pinned manifest reads the set as it was."""
    import shutil
    import time

    from conftest import SMALL

    table = tmp_path / "table"
    (table / "day=1").mkdir(parents=True)
    shutil.copy(SMALL, table / "day=1" / "part.parquet")
    time.sleep(1.1)  # a file modified in the second its set was published counts as changed
    out = tmp_path / "out"
    first = tfshard.convert(table, out, target_shard_size="100KB", append=True)
    assert first["records"] == 2000 and "up_to_date" not in first
    (table / "day=2").mkdir()
    shutil.copy(SMALL, table / "day=2" / "part.parquet")
    time.sleep(1.1)
    second = tfshard.convert(table, out, target_shard_size="100KB", append=True)
    assert (second["generation"], second["retired"], second["records"]) == (1, 0, 2000)
    again = tfshard.convert(table, out, target_shard_size="100KB", append=True)
    assert again["up_to_date"] is True
    def rows(ds):
        return sum(len(b["y"]) for b in ds)
    assert rows(tfshard.Dataset(out, batch_size=500, shuffle_buffer=0)) == 4000
    newest = tfshard.Dataset(out, batch_size=500, shuffle_buffer=0, generations=[1])
    assert all("-g00001-" in f for f in newest.files)
    assert rows(newest) == 2000
    assert rows(tfshard.Dataset(out, batch_size=500, shuffle_buffer=0, generations=[0, 1])) == 4000
    pinned = tfshard.Dataset(out / "data.manifest-g00001.json", batch_size=500, shuffle_buffer=0)
    assert rows(pinned) == 4000
    with pytest.raises(ValueError, match="generations"):
        tfshard.Dataset(out, generations=[7])
    # Two generations of one small shard each: compacted into one, the same records.
    done = tfshard.compact(out, target_shard_size="10MB")
    assert (done["compacted"], done["generation"], done["shards"]) == ([0, 1], 2, 1)
    assert rows(tfshard.Dataset(out, batch_size=500, shuffle_buffer=0)) == 4000
    assert tfshard.verify(out, deep=True)["ok"]
