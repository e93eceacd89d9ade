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
    with pytest.raises(TypeError, match="no_such_flag"):
        tfshard.convert(SMALL, tmp_path / "b", no_such_flag=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="version"):
        tfshard.convert(SMALL, tmp_path / "b", version=3)
    with pytest.raises(ValueError, match="min-shards"):
        tfshard.convert(table, tmp_path / "c", min_shards=4)
    with pytest.raises(ValueError, match="format"):
        tfshard.convert(SMALL, tmp_path / "d", format="csv")
    with pytest.raises(TypeError, match="json"):
        tfshard.verify(SMALL, json=True)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="compression"):
        tfshard.convert(SMALL, tmp_path / "b", compression="lz4")
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
    # A corrupt file: the family's subclass, and the library's kind.
    assert isinstance(err, tfshard.CorruptInputError) and err.kind in ("parquet", "chunk_layout", "decoder_panic", "row_count_mismatch"), (type(err), err.kind)
    assert not (tmp_path / "out").exists() or not any(p.suffix == ".tfrecord" for p in (tmp_path / "out").iterdir())


def test_a_column_that_cannot_be_encoded_is_named(tmp_path):
    table = pa.table({"ok": [1, 2], "m": pa.array([[("k", 1)], [("j", 2)]], type=pa.map_(pa.string(), pa.int64()))})
    with pytest.raises(tfshard.Error) as caught:
        tfshard.convert(table, tmp_path / "out")
    assert caught.value.column == "m"
    assert isinstance(caught.value, tfshard.SchemaMismatchError) and caught.value.kind == "unsupported_type"


def test_a_value_out_of_range_names_its_row(tmp_path):
    table = pa.table({"u": pa.array([1, 2, 2**63 + 5], type=pa.uint64())})
    with pytest.raises(tfshard.Error) as caught:
        tfshard.convert(table, tmp_path / "out")
    assert (caught.value.column, caught.value.row) == ("u", 2)
    assert caught.value.kind == "out_of_range"


def test_verify_returns_its_report(small_shards, tmp_path):
    report = tfshard.verify(small_shards, deep=True)
    assert report["ok"] and report["records"] == 2000
    broken = tmp_path / "broken"
    corrupt_copy(small_shards, broken, 0, at=lambda n: 100)
    report = tfshard.verify(broken)
    assert not report["ok"] and report["problems"]
    assert all(p["kind"] and p["problem"] for p in report["problems"])
    with pytest.raises(tfshard.Error):
        tfshard.verify(tmp_path / "nothing-here")


def test_inspect_yields_records_as_the_command_line_prints_them(small_shards, tfshard_bin):
    records = list(tfshard.inspect(small_shards, limit=3))
    assert len(records) == 3
    assert set(records[0]) >= {"x", "y", "id"} and records[0]["y"] == {"int64": [0]}
    printed = cli(tfshard_bin, "inspect", str(small_shards))
    assert printed.returncode == 0, printed.stderr
    assert list(tfshard.inspect(small_shards)) == [json.loads(line) for line in printed.stdout.splitlines()]


def test_inspect_of_two_million_records_holds_a_few_at_a_time(tmp_path):
    out = tmp_path / "big"
    tfshard.convert(pa.table({"i": pa.array(range(2_000_000), pa.int64())}), out)
    records = tfshard.inspect(out)
    seen = 0
    for record in records:
        assert record["i"]["int64"][0] == seen
        seen += 1
    assert seen == 2_000_000
    # What the reader may hold ahead of the caller is bounded: a few dozen records.
    assert 0 < records.most_held <= 64, records.most_held
    # A generator left early stops reading.
    first = next(iter(tfshard.inspect(out)))
    assert first == {"i": {"int64": [0]}}


def test_functions_have_real_signatures():
    import inspect

    convert = inspect.signature(tfshard.convert).parameters
    for name, default in [("target_shard_size", "256MiB"), ("compression", "none"), ("overwrite", False), ("io_concurrency", 16), ("io_timeout", "5m"), ("shuffle_memory", "1GiB")]:
        assert convert[name].kind is inspect.Parameter.KEYWORD_ONLY and convert[name].default == default, name
    assert {"version", "snapshot_id", "partition_filter", "labels", "input_compression", "split"} <= set(convert)
    assert inspect.signature(tfshard.verify).parameters["deep"].default is False
    assert inspect.signature(tfshard.inspect).parameters["limit"].default is None
    assert inspect.signature(tfshard.finalize).parameters["overwrite"].default is False


def test_the_signatures_defaults_are_the_flags_defaults(tfshard_bin):
    """Each option's default in Python is the flag's default in --help."""
    import inspect
    import re

    commands = ["convert parquet", "convert delta", "convert iceberg", "convert images", "convert tfrecord"]
    checked = 0
    for command, function in [(c, tfshard.convert) for c in commands] + [("verify", tfshard.verify), ("schema", tfshard.schema), ("finalize", tfshard.finalize), ("compact", tfshard.compact), ("inspect", tfshard.inspect)]:
        help_text = cli(tfshard_bin, *command.split(), "--help").stdout
        for name, param in inspect.signature(function).parameters.items():
            # (None: the format's own default; progress: nothing is drawn unless asked.)
            if param.default in (None, inspect.Parameter.empty) or name == "progress":
                continue
            flag = "--" + name.replace("_", "-")
            found = re.search(r"^ *" + re.escape(flag) + r"(?![\w-])[^\n]*(?:\n(?! *-)[^\n]*)*?\[default: ([^\]]+)\]", help_text, re.M)
            if found:
                assert str(param.default).lower() == found.group(1).lower(), (command, name, param.default, found.group(1))
                checked += 1
    assert checked > 20, checked


def test_a_typed_caller_passes_mypy_strict(tmp_path):
    mypy = pytest.importorskip("mypy.api")
    caller = tmp_path / "caller.py"
    caller.write_text(
        "import tfshard\n"
        "from typing import Any, Dict, List\n"
        "summary: Dict[str, Any] = tfshard.convert('in.parquet', 'out/', target_shard_size='128MiB', split={'train': 0.9, 'test': 0.1}, overwrite=True)\n"
        "report: Dict[str, Any] = tfshard.verify(['out/'], deep=True)\n"
        "records: List[Dict[str, Any]] = list(tfshard.inspect('out/', limit=2))\n"
        "for batch in tfshard.Dataset('out/', batch_size=32, seed=1):\n"
        "    pass\n"
        "by_index = tfshard.Records('out/', columns=['x'])\n"
        "n: int = len(by_index) + by_index.table_bytes\n"
        "one: Any = by_index[0]\n"
        "try:\n"
        "    tfshard.verify('out/')\n"
        "except tfshard.CorruptInputError as e:\n"
        "    kind: str = e.kind\n"
    )
    out, err, code = mypy.run(["--strict", "--no-incremental", str(caller)])
    assert code == 0, out + err
    bad = tmp_path / "bad.py"
    bad.write_text("import tfshard\ntfshard.convert('a', 'b', target_shard_size=1.5)\n")
    out, _, code = mypy.run(["--strict", "--no-incremental", str(bad)])
    assert code == 1 and "target_shard_size" in out, out


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


def test_a_stream_outlives_a_usage_error(tmp_path):
    """Options are checked before an Arrow stream is taken (taking it uses it up)."""
    reader = pq.read_table(SMALL).to_reader(max_chunksize=500)
    with pytest.raises(ValueError, match="compression"):
        tfshard.convert(reader, tmp_path / "a", compression="lz4")
    assert tfshard.convert(reader, tmp_path / "b")["records"] == 2000


def test_pairs_take_any_mapping_and_values_as_text(tmp_path):
    from types import MappingProxyType

    table = pa.table({"x": [1, 2], "y": [3, 4]})
    summary = tfshard.convert(table, tmp_path / "out", rename=MappingProxyType({"x": "renamed"}), split="a=0.5,b=0.5")
    assert set(summary["splits"]) == {"a", "b"}
    names = {f["name"] for f in tfshard.schema(tmp_path / "out" / "a.manifest.json")}
    assert names == {"renamed", "y"}


def test_inspect_close_stops_reading_and_verify_takes_a_manifest(small_shards):
    records = tfshard.inspect(small_shards)
    assert next(records)["y"] == {"int64": [0]}
    records.close()
    assert list(records) == []
    report = tfshard.verify(manifest=small_shards / "data.manifest.json")
    assert report["ok"] and report["records"] == 2000
    with pytest.raises(ValueError, match="manifest"):
        tfshard.verify()


def test_stats_and_verify_against_a_baseline(tmp_path, tfshard_bin):
    """`stats=True` keeps the statistics; `tfshard.stats` returns `stats --json`'s data;
    `verify(baseline=...)` lists drift as the command line does."""
    base, swapped = tmp_path / "base", tmp_path / "swapped"
    tfshard.convert(SMALL, base, stats=True)
    tfshard.convert(SMALL, swapped, stats=True, rename={"price": "cost", "score": "price"})
    got = tfshard.stats(base)
    printed = cli(tfshard_bin, "stats", str(base), "--json")
    assert printed.returncode == 0, printed.stderr
    assert got == json.loads(printed.stdout)
    assert got["records"] == 2000 and {f["name"] for f in got["features"]} >= {"price", "score"}
    with_base = tfshard.stats(swapped, baseline=base)
    assert with_base["baseline"] == got
    assert tfshard.verify(base, baseline=base)["anomalies"] == []
    report = tfshard.verify(swapped, baseline=base)
    assert not report["ok"]
    kinds = {(a["feature"], a["kind"]) for a in report["anomalies"]}
    assert ("price", "COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH") in kinds, kinds
    assert ("score", "SCHEMA_MISSING_COLUMN") in kinds, kinds
    loose = tfshard.verify(swapped, baseline=base, thresholds={"price": 1.0})
    assert ("price", "COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH") not in {
        (a["feature"], a["kind"]) for a in loose["anomalies"]
    }
    with pytest.raises(ValueError, match="baseline"):
        tfshard.verify(base, baseline=tmp_path / "nowhere")
    with pytest.raises(ValueError, match="baseline"):
        tfshard.verify(base, thresholds={"price": 0.2})
    schema = tmp_path / "schema.pbtxt"
    printed = cli(tfshard_bin, "schema", str(base), "--format", "tfdv")
    schema.write_text(printed.stdout)
    assert tfshard.verify(base, schema=schema)["anomalies"] == []
    kinds = {(a["feature"], a["kind"]) for a in tfshard.verify(swapped, schema=schema)["anomalies"]}
    assert ("score", "SCHEMA_MISSING_COLUMN") in kinds and ("cost", "SCHEMA_NEW_COLUMN") in kinds, kinds
    schema.write_text("feature { nonsense: 1 }")
    with pytest.raises(ValueError, match="line 1"):
        tfshard.verify(base, schema=schema)
