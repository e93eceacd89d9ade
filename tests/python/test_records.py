"""tfshard.Records: the records of shards by index, against what `inspect` and `Dataset`
give for the same records, locally and from moto's S3 server."""

import os
import pickle
import struct

import numpy as np
import pytest

import tfshard

from conftest import cli, corrupt_copy


def _values(value):
    """A Records value as inspect's list of values."""
    array = np.asarray(value).reshape(-1)
    return [v.decode() if isinstance(v, bytes) else v.item() for v in array]


def _inspected(record):
    """An inspect record's values by feature, as Python values."""
    out = {}
    for name, typed in record.items():
        (kind, values), = typed.items()
        out[name] = [v if kind != "float" else pytest.approx(v) for v in values]
    return out


def _payloads(folder):
    """Every record's bytes, in the manifest's order, read from the framing itself."""
    import json
    manifest = json.loads((folder / "data.manifest.json").read_text())
    out = []
    for shard in manifest["shards"]:
        data = (folder / shard["file"]).read_bytes()
        at = 0
        while at < len(data):
            (n,) = struct.unpack_from("<Q", data, at)
            out.append(data[at + 12 : at + 12 + n])
            at += 16 + n
    return out


def test_every_record_by_index_is_inspects(small_shards):
    records = tfshard.Records(small_shards)
    inspected = list(tfshard.inspect(small_shards))
    assert len(records) == len(inspected) == 2000
    assert records.table_bytes == 0, "a manifest's shards are opened when first read"
    for i, expected in enumerate(inspected):
        got = records[i]
        want = _inspected(expected)
        # (inspect leaves out what a record does not hold; Records gives empty arrays.)
        assert {k: _values(v) for k, v in got.items() if _values(v) or k in want} == want, i
    assert _values(records[-1]["y"]) == _values(records[1999]["y"])
    assert records.table_bytes == (2000 + len(records.files)) * 4  # 4 bytes a record, and each shard's end


def test_a_batch_of_indices_is_a_datasets_batch(small_shards):
    records = tfshard.Records(small_shards, columns=["x", "y", "id"])
    in_order = tfshard.Dataset(small_shards, batch_size=300, shuffle_buffer=0, cycle_length=1, columns=["x", "y", "id"])
    first = next(iter(in_order))
    for key in (list(range(300)), np.arange(300), slice(0, 300)):
        batch = records[key]
        assert set(batch) == {"x", "y", "id"}
        for name in batch:
            np.testing.assert_array_equal(batch[name], first[name])
    picked = records[np.array([1999, 0, 7])]
    np.testing.assert_array_equal(picked["y"], [records[1999]["y"], records[0]["y"], records[7]["y"]])
    # What a DataLoader's batch sampler hands to collate_fn: a list of records.
    listed = records.__getitems__([5, 6])
    assert [r["y"] for r in listed] == [records[5]["y"], records[6]["y"]]


def test_keys_follow_numpys_indexing(small_shards):
    """Regression: a NumPy bool mask was read as the indices 0 and 1, and a 0-d array
    failed. A mask of len(records) picks its records; a 0-d integer array is one index;
    a boolean alone is no index."""
    raw = tfshard.Records(small_shards, raw=True)
    mask = np.zeros(len(raw), dtype=bool)
    mask[[3, 10, 1999]] = True
    assert raw[mask] == [raw[3], raw[10], raw[1999]]
    assert raw[list(mask)] == raw[mask], "a list of bools is a mask too"
    assert raw[np.array(7)] == raw[7] and raw[np.int64(-1)] == raw[1999]
    with pytest.raises(IndexError, match="boolean mask of 2 for 2000 records"):
        raw[np.array([True, False])]
    for bad in (True, np.bool_(False), np.array(True)):
        with pytest.raises(TypeError, match="a boolean is not a record index"):
            raw[bad]
    with pytest.raises(TypeError, match="mix booleans and integers"):
        raw[[True, 3]]
    with pytest.raises(IndexError, match="one-dimensional"):
        raw[np.array([[1, 2]])]
    records = tfshard.Records(small_shards, columns=["y"])
    np.testing.assert_array_equal(records[mask]["y"], records[[3, 10, 1999]]["y"])


def test_raw_records_are_the_payloads(small_shards):
    raw = tfshard.Records(small_shards, raw=True)
    payloads = _payloads(small_shards)
    assert [raw[i] for i in range(len(raw))] == payloads
    assert raw[[3, 1]] == [payloads[3], payloads[1]]


def test_out_of_range_and_pickling(small_shards):
    records = tfshard.Records(small_shards)
    for bad in (2000, -2001):
        with pytest.raises(IndexError):
            records[bad]
    with pytest.raises(IndexError):
        records[[0, 2000]]
    again = pickle.loads(pickle.dumps(records))
    assert len(again) == 2000 and _values(again[42]["y"]) == _values(records[42]["y"])


def test_a_corrupt_record_is_named(small_shards, tmp_path):
    # A byte of the second shard's first payload (its header is 12 bytes).
    path = corrupt_copy(small_shards, tmp_path / "bad", 1, at=lambda n: 17)
    records = tfshard.Records(tmp_path / "bad")
    counts = [len(tfshard.Records(p, raw=True)) for p in sorted((tmp_path / "bad").glob("*.tfrecord"))]
    first = counts[0]
    bad = None
    for i in range(first, first + counts[1]):
        try:
            records[i]
        except tfshard.Error as e:
            bad = (i, str(e))
            break
    assert bad is not None, "the flipped byte is found"
    assert path.name in bad[1] and f"record {bad[0] - first}" in bad[1] and "offset" in bad[1], bad


def test_what_cannot_be_read_by_index_says_so(small_shards, tmp_path, tfshard_bin):
    gz = tmp_path / "gz"
    done = cli(tfshard_bin, "convert", "tfrecord", str(small_shards), "-o", str(gz), "--compression", "gzip", "--quiet")
    assert done.returncode == 0, done.stderr
    with pytest.raises(ValueError, match="compress"):
        tfshard.Records(gz)
    with pytest.raises(ValueError, match="--index"):
        tfshard.Records(small_shards, table_bound=100)
    # With .idx files the offsets come from them, whatever the bound.
    idx = tmp_path / "idx"
    done = cli(tfshard_bin, "convert", "tfrecord", str(small_shards), "-o", str(idx), "--index", "--quiet")
    assert done.returncode == 0, done.stderr
    records = tfshard.Records(idx, table_bound=100)
    assert len(records) == 2000 and _values(records[1999]["y"]) == _values(tfshard.Records(small_shards)[1999]["y"])


def test_records_in_a_bucket(s3, small_shards):
    bucket = s3("pytest-records")
    summary = tfshard.convert(small_shards, f"s3://{bucket}/small", format="tfrecord", target_shard_size="100KB")
    assert summary["records"] == 2000
    remote = tfshard.Records(f"s3://{bucket}/small", raw=True)
    local = tfshard.Records(small_shards, raw=True)
    assert len(remote) == 2000
    order = np.random.default_rng(1).permutation(2000)[:300].tolist()
    assert remote[order] == [local[i] for i in order]
    assert [remote[i] for i in (0, 1999)] == [local[0], local[1999]]


def _assert_same_batches(got, want):
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for k in a:
            # (A variable-length feature is a tuple: values, row splits.)
            for x, y in zip(*(v if isinstance(v, tuple) else (v,) for v in (a[k], b[k]))):
                np.testing.assert_array_equal(x, y, err_msg=k)


@pytest.mark.parametrize("listed", [True, False])
@pytest.mark.parametrize("block_size", [None, 7, 100])
def test_blocks_over_the_table_bound_keep_one_offset_a_block(small_shards, tmp_path, block_size, listed):
    """A set whose table of every record's offset would pass table_bound: "global" says
    what to do; "blocks" keeps one offset a block (16 bytes) and walks each block's
    frames, the same batches as with the whole table. Shards a manifest lists, and
    shards without one (the first walked whole while they fit, the rest marked)."""
    source = small_shards
    if not listed:
        source = tmp_path / "bare"
        source.mkdir()
        for shard in sorted(small_shards.glob("*.tfrecord")):
            (source / shard.name).write_bytes(shard.read_bytes())
        source = sorted(source.glob("*.tfrecord"))
    kw = dict(batch_size=64, shuffle="blocks", block_size=block_size, window=3, seed=2)
    for ranks, rank in [(1, 0), (2, 1)]:
        whole = tfshard.Dataset(source, num_shards=ranks, shard_index=rank, **kw)
        marked = tfshard.Dataset(source, num_shards=ranks, shard_index=rank, table_bound=6000, **kw)
        _assert_same_batches(list(marked), list(whole))
        assert 0 < marked.table_bytes <= 6000 < whole.table_bytes
    ids = np.concatenate([b["id"] for b in tfshard.Dataset(source, table_bound=6000, **kw)])
    assert sorted(ids.tolist()) == sorted(np.concatenate([b["id"] for b in tfshard.Dataset(source)]).tolist())
    with pytest.raises(ValueError, match='shuffle="blocks"'):
        list(tfshard.Dataset(source, batch_size=64, shuffle="global", table_bound=6000))
    with pytest.raises(ValueError, match="table_bound"):
        tfshard.Dataset(source, shuffle="blocks", table_bound=-1)


@pytest.mark.parametrize("shuffle", ["global", "blocks"])
def test_an_epoch_opens_every_local_shard_before_its_first_batch(small_shards, shuffle):
    """A manifest's local shards are opened when first read; an epoch's threads open
    them all first, each shard by one thread (two threads needing one at once walked it
    twice): with one thread, the whole table is there at the first batch (with blocks,
    a block of 8 records: one shard). Every record once; the same batches on 2 threads."""
    kw = dict(batch_size=8, shuffle=shuffle, block_size=8, window=1, seed=4)
    ds = tfshard.Dataset(small_shards, threads=1, **kw)
    assert ds.table_bytes == 0
    batches = iter(ds)
    first = next(batches)
    assert ds.table_bytes == (2000 + len(list(small_shards.glob("*.tfrecord")))) * 4
    got = [first, *batches]
    every = tfshard.Records(small_shards)[list(range(2000))]["id"]
    assert sorted(np.concatenate([b["id"] for b in got]).tolist()) == sorted(every.tolist())
    _assert_same_batches(got, list(tfshard.Dataset(small_shards, threads=2, **kw)))


@pytest.mark.parametrize("block_size, window", [(100, 4), (7, 2), (500, 8)])
def test_blocks_from_a_bucket_are_the_local_batches(s3, small_shards, block_size, window):
    """shuffle="blocks" from a store reads a window's records at once, in runs (a batch
    across windows made in pieces, joined): the same batches as from local shards, every
    record once; windows smaller than a batch (7 x 2 records) too; with ranks and
    drop_remainder."""
    bucket = s3(f"pytest-blocks-{block_size}")
    tfshard.convert(small_shards, f"s3://{bucket}/small", format="tfrecord", target_shard_size="100KB")
    for ranks, rank, drop in [(1, 0, False), (3, 1, True)]:
        kw = dict(batch_size=64, shuffle="blocks", block_size=block_size, window=window, seed=5,
                  num_shards=ranks, shard_index=rank, drop_remainder=drop)
        local = list(tfshard.Dataset(small_shards, **kw))
        _assert_same_batches(list(tfshard.Dataset(f"s3://{bucket}/small", **kw)), local)
        # Over the table's bound: one offset a block, each block's frames walked.
        marked = tfshard.Dataset(f"s3://{bucket}/small", table_bound=6000, **kw)
        _assert_same_batches(list(marked), local)
        assert 0 < marked.table_bytes <= 6000
    ids = np.concatenate([b["id"] for b in tfshard.Dataset(f"s3://{bucket}/small", batch_size=64, shuffle="blocks",
                                                          block_size=block_size, window=window)])
    assert len(ids) == 2000 and len(set(ids.tolist())) == 2000


@pytest.fixture()
def logged_s3(tmp_path):
    """A moto S3 server of this test's own, its request log in a file: yields (bucket
    maker, a function that returns the requests logged since the last call)."""
    import re
    import time
    from conftest import moto_server

    log = tmp_path / "moto.log"
    seen = [0]

    def requests():
        time.sleep(0.3)  # the server writes its log line after answering
        lines = re.findall(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP', log.read_text())
        new, seen[0] = lines[seen[0]:], len(lines)
        return new

    with moto_server(log) as bucket:
        yield bucket, requests


def test_blocks_from_a_bucket_read_the_next_windows_with_a_window(logged_s3, small_shards, tmp_path):
    """A store's windows of blocks are read a few windows ahead: the runs of the next
    windows that meet one of a window's come in its request. Here every window is within
    reach (5 windows of 4 blocks), so an epoch reads each shard in one request, where a
    window at a time makes one for each shard each window reads from; the batches are
    those of the same shards on disk (a second epoch's: the first opens the shards)."""
    import json

    bucket, requests = logged_s3
    name = bucket("pytest-ahead")
    local = tmp_path / "local"
    for out in (f"s3://{name}/small", str(local)):
        tfshard.convert(small_shards, out, format="tfrecord", target_shard_size="100KB")
    kw = dict(batch_size=64, shuffle="blocks", block_size=100, window=4, seed=3, threads=1)
    ds = tfshard.Dataset(f"s3://{name}/small", **kw)
    list(ds)  # (the first epoch opens the shards: a walk of each, no .idx files)
    requests()
    got = list(ds)
    counts = [s["records"] for s in json.loads((local / "data.manifest.json").read_text())["shards"]]
    reads = [path for method, path in requests() if method == "GET" and path.endswith(".tfrecord")]
    assert sorted(reads) == sorted(set(reads)) and len(reads) == len(counts), reads
    # A window at a time: a request for each shard a window's records are in.
    index = {v: i for i, v in enumerate(tfshard.Records(str(local))[list(range(2000))]["id"].tolist())}
    records = [index[v] for b in got for v in b["id"].tolist()]
    starts = np.cumsum([0, *counts])
    shard_of = np.searchsorted(starts, records, side="right")
    by_window = sum(len(set(shard_of[w:w + 400].tolist())) for w in range(0, 2000, 400))
    assert len(reads) < by_window, (len(reads), by_window)
    on_disk = tfshard.Dataset(str(local), **kw)
    list(on_disk)
    _assert_same_batches(got, list(on_disk))


def test_opening_a_10000_shard_set_from_its_manifest_reads_one_object(logged_s3, small_shards, tmp_path):
    """A set of 10,000 shards opened from its manifest: no listing, one object read (the
    manifest); a record reads its own shard only. Only the manifest and the shard read are
    in the bucket: opening touches no other (the shards are copies of 250 real ones of 8
    records, named as a 10,000-shard set's)."""
    import json
    import urllib.request

    bucket, requests = logged_s3
    name = bucket("pytest-startup")
    local = tmp_path / "250"
    tfshard.convert(small_shards, str(local), format="tfrecord", max_records_per_shard=8)
    m = json.loads((local / "data.manifest.json").read_text())
    real = m["shards"]
    assert len(real) == 250 and all(s["records"] == 8 for s in real)
    m["shards"] = [dict(real[i % 250], file=f"data-{i:05d}-of-10000.tfrecord") for i in range(10_000)]
    m["records"] = 80_000
    m["bytes"] = sum(s["bytes"] for s in m["shards"])

    def put(key, data):
        url = f"{os.environ['AWS_ENDPOINT_URL']}/{name}/{key}"
        headers = {"Content-Type": "application/octet-stream"}
        urllib.request.urlopen(urllib.request.Request(url, data=data, method="PUT", headers=headers)).read()

    put("many/data.manifest.json", json.dumps(m).encode())
    put("many/data-09999-of-10000.tfrecord", (local / real[9999 % 250]["file"]).read_bytes())
    manifest = f"s3://{name}/many/data.manifest.json"
    requests()
    ds = tfshard.Dataset(manifest, batch_size=64, shuffle="global")
    records = tfshard.Records(manifest)
    assert len(records) == 80_000 and len(ds) == 1250 and len(records.files) == 10_000
    made = requests()
    assert not [r for r in made if "list-type" in r[1] or "prefix=" in r[1]], made
    reads = [r for r in made if r[0] == "GET"]
    assert {path for _, path in reads} == {f"/{name}/many/data.manifest.json"}, made
    assert len(reads) == 2, made  # one for Dataset, one for Records
    assert records.table_bytes == 0
    # A record reads its own shard only: record 1 of shard 9,999 is record 1 of the real
    # shard it copies.
    want = tfshard.Records(str(local))[8 * (9999 % 250) + 1]
    got = records[8 * 9999 + 1]
    touched = {path.split("?")[0] for _, path in requests()}
    assert touched <= {f"/{name}/many/data-09999-of-10000.tfrecord", f"/{name}/many/data-09999-of-10000.tfrecord.idx"}, touched
    assert records.table_bytes == (8 + 1) * 4
    assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in got)


def test_blocks_from_a_set_of_bucket_and_local_shards(s3, small_shards, tmp_path):
    """A set whose shards are some in a bucket, some on disk, in either order: a store's
    windows read ahead only the bucket's shards, the local ones are mapped; every record
    once, the batches of the same shards all on disk."""
    bucket = s3("pytest-mixed")
    tfshard.convert(small_shards, f"s3://{bucket}/small", format="tfrecord", target_shard_size="100KB")
    local = tmp_path / "local"
    tfshard.convert(small_shards, str(local), format="tfrecord", target_shard_size="100KB")
    names = sorted(p.name for p in local.glob("*.tfrecord"))
    half = len(names) // 2
    kw = dict(batch_size=64, shuffle="blocks", block_size=100, window=4, seed=7)
    for first_in_bucket in (True, False):
        remote = [f"s3://{bucket}/small/{n}" for n in names[:half]]
        on_disk = [str(local / n) for n in names[half:]]
        if not first_in_bucket:
            remote = [f"s3://{bucket}/small/{n}" for n in names[half:]]
            on_disk = [str(local / n) for n in names[:half]]
        paths = remote + on_disk if first_in_bucket else on_disk + remote
        got = list(tfshard.Dataset(paths, **kw))
        same = [str(local / p.rsplit("/", 1)[-1]) for p in paths]
        _assert_same_batches(got, list(tfshard.Dataset(same, **kw)))
        ids = np.concatenate([b["id"] for b in got]).tolist()
        assert len(ids) == 2000 and len(set(ids)) == 2000
