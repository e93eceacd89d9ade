"""tfshard.convert, verify, schema, inspect and finalize: the command line's results, as
data; every Arrow producer converts to the command line's bytes."""

import json

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tfshard
from conftest import SMALL, TESTDATA, cli, corrupt_copy, shard_bytes


@pytest.fixture(scope="module")
def cli_small(tmp_path_factory, tfshard_bin):
    """small.parquet converted by the command line (the bytes every producer must give)."""
    out = tmp_path_factory.mktemp("cli") / "out"
    done = cli(tfshard_bin, "convert", "parquet", str(SMALL), "-o", str(out), "--target-shard-size", "100KB", "--json")
    assert done.returncode == 0, done.stderr
    return out, json.loads(done.stdout)


def test_a_path_converts_as_the_command_line_does(tmp_path, cli_small):
    cli_out, cli_summary = cli_small
    summary = tfshard.convert(SMALL, tmp_path / "out", target_shard_size="100KB")
    assert summary["records"] == cli_summary["records"] == 2000
    assert summary["shards"] == cli_summary["shards"] > 1
    assert set(summary) == set(cli_summary)
    assert shard_bytes(tmp_path / "out") == shard_bytes(cli_out)


@pytest.mark.parametrize(
    "producer",
    [
        pytest.param(lambda: pq.read_table(SMALL), id="pyarrow-table"),
        pytest.param(lambda: pq.ParquetFile(SMALL).iter_batches(batch_size=300), id="pyarrow-reader"),
        pytest.param(lambda: pl.read_parquet(SMALL), id="polars"),
        pytest.param(lambda: duckdb.sql(f"select * from read_parquet('{SMALL}')"), id="duckdb"),
    ],
)
def test_each_arrow_producer_converts_to_the_same_bytes(tmp_path, cli_small, producer):
    source = producer()
    if not hasattr(source, "__arrow_c_stream__"):
        source = pa.RecordBatchReader.from_batches(pq.read_schema(SMALL), source)
    summary = tfshard.convert(source, tmp_path / "out", target_shard_size="100KB")
    assert summary["records"] == 2000
    assert shard_bytes(tmp_path / "out") == shard_bytes(cli_small[0])
    manifest = json.loads((tmp_path / "out" / "data.manifest.json").read_text())
    assert manifest["records"] == 2000
    assert manifest["inputs"][0]["rows"] == 2000


def test_options_are_the_long_flags(tmp_path):
    table = pq.read_table(SMALL)
    summary = tfshard.convert(
        table, tmp_path / "out", columns=["x", "y", "id"], compression="gzip", split={"train": 0.75, "test": 0.25}, seed=3
    )
    assert set(summary["splits"]) == {"train", "test"}
    assert sum(s["records"] for s in summary["splits"].values()) == 2000
    spec = tfshard.schema(tmp_path / "out" / "train.manifest.json")
    assert sorted(f["name"] for f in spec) == ["id", "x", "y"]
    assert "tf.io.FixedLenFeature" in tfshard.schema(tmp_path / "out" / "train.manifest.json", format="python")


def test_usage_errors_raise_value_error_and_write_nothing(tmp_path):
    table = pq.read_table(SMALL)
    with pytest.raises(ValueError, match="lots"):
        tfshard.convert(SMALL, tmp_path / "a", target_shard_size="lots")
    with pytest.raises(ValueError, match="no_such_flag|no-such-flag"):
        tfshard.convert(SMALL, tmp_path / "b", no_such_flag=1)
    with pytest.raises(ValueError, match="min-shards"):
        tfshard.convert(table, tmp_path / "c", min_shards=4)
    with pytest.raises(ValueError, match="format"):
        tfshard.convert(SMALL, tmp_path / "d", format="csv")
    with pytest.raises(ValueError, match="printed"):
        tfshard.verify(SMALL, json=True)
    assert not any((tmp_path / d).exists() and any((tmp_path / d).iterdir()) for d in "abcd")


def test_bad_data_raises_tfshard_error_with_its_location(tmp_path):
    bad = TESTDATA / "parquet-corrupt"
    files = sorted(p for p in bad.rglob("*.parquet"))
    assert files
    with pytest.raises(tfshard.Error) as caught:
        tfshard.convert(files[0], tmp_path / "out")
    err = caught.value
    assert err.file and str(files[0].name) in err.file
    assert err.message == str(err)
    assert not (tmp_path / "out").exists() or not any(p.suffix == ".tfrecord" for p in (tmp_path / "out").iterdir())


def test_a_column_that_cannot_be_encoded_is_named(tmp_path):
    table = pa.table({"ok": [1, 2], "m": pa.array([[("k", 1)], [("j", 2)]], type=pa.map_(pa.string(), pa.int64()))})
    with pytest.raises(tfshard.Error) as caught:
        tfshard.convert(table, tmp_path / "out")
    assert caught.value.column == "m"


def test_a_value_out_of_range_names_its_row(tmp_path):
    table = pa.table({"u": pa.array([1, 2, 2**63 + 5], type=pa.uint64())})
    with pytest.raises(tfshard.Error) as caught:
        tfshard.convert(table, tmp_path / "out")
    assert (caught.value.column, caught.value.row) == ("u", 2)


def test_verify_returns_its_report(small_shards, tmp_path):
    report = tfshard.verify(small_shards, deep=True)
    assert report["ok"] and report["records"] == 2000
    broken = tmp_path / "broken"
    corrupt_copy(small_shards, broken, 0, at=lambda n: 100)
    report = tfshard.verify(broken)
    assert not report["ok"] and report["problems"]
    with pytest.raises(tfshard.Error):
        tfshard.verify(tmp_path / "nothing-here")


def test_inspect_returns_records(small_shards):
    records = tfshard.inspect(small_shards, limit=3)
    assert len(records) == 3
    assert set(records[0]) >= {"x", "y", "id"} and records[0]["y"] == {"int64": [0]}
    assert len(tfshard.inspect(small_shards)) == 2000


def test_workers_then_finalize(tmp_path, tfshard_bin):
    out = tmp_path / "out"
    for i in range(2):
        tfshard.convert(TESTDATA / "hive", out, num_workers=2, worker_index=i)
    summary = tfshard.finalize(out)
    assert summary["workers"] == 2
    assert tfshard.verify(out)["ok"]
    whole = tmp_path / "whole"
    assert cli(tfshard_bin, "convert", "parquet", str(TESTDATA / "hive"), "-o", str(whole)).returncode == 0
    assert summary["records"] == json.loads((whole / "data.manifest.json").read_text())["records"]


def test_a_store_url_in_and_out(s3, tmp_path):
    bucket = s3("pytest-convert")
    summary = tfshard.convert(pq.read_table(SMALL), f"s3://{bucket}/small", target_shard_size="100KB")
    assert summary["records"] == 2000
    assert tfshard.verify(f"s3://{bucket}/small")["ok"]
    ds = tfshard.Dataset(f"s3://{bucket}/small", batch_size=500, shuffle_buffer=0)
    assert sum(len(b["y"]) for b in ds) == 2000


def test_keyboard_interrupt_cancels_the_run_and_leaves_nothing(tmp_path):
    import os
    import signal
    import time

    schema = pa.schema([("v", pa.int64())])

    def batches():
        # The second batch interrupts; the stream then goes on (slowly) until the run
        # notices. A run that never did would end after 100,000 batches and fail below.
        for i in range(100_000):
            if i == 1:
                os.kill(os.getpid(), signal.SIGINT)
            if i >= 1:
                time.sleep(0.001)
            yield pa.record_batch([pa.array([i])], schema=schema)

    # Python's own handler, as in a terminal or a notebook: a shell that starts a job in
    # the background without job control (CI's, say) hands it SIGINT ignored, and Python
    # then leaves it ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            tfshard.convert(pa.RecordBatchReader.from_batches(schema, batches()), tmp_path / "out")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not (tmp_path / "out").exists() or not any(p.suffix in (".tfrecord", ".json") for p in (tmp_path / "out").iterdir())


def test_a_forked_child_reads_the_store_as_dataloader_workers_do(s3):
    """The dataset found its shards in the bucket before the fork (a DataLoader forks its
    workers then): the child reads through clients of its own."""
    import os

    bucket = s3("pytest-fork")
    tfshard.convert(pq.read_table(SMALL), f"s3://{bucket}/small", target_shard_size="100KB")
    ds = tfshard.Dataset(f"s3://{bucket}/small", batch_size=500, shuffle_buffer=0)
    assert len(ds) == 4
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, str(sum(len(b["y"]) for b in ds)).encode())
        finally:
            os._exit(0)
    os.close(write)
    import select

    ready, _, _ = select.select([read], [], [], 120)
    if not ready:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    assert ready, "the forked child did not finish reading"
    assert os.read(read, 100) == b"2000"
    assert sum(len(b["y"]) for b in ds) == 2000
