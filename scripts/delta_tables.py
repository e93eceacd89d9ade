#!/usr/bin/env python3
"""Writes the Delta tables of tests/cli/delta.rs with deltalake (delta-rs), and what
tfshard must make of them: OUT/expected.json.

    python scripts/delta_tables.py OUT
    python scripts/delta_tables.py OUT --real TABLE...   # OUT/real.json only

Tables:
  events      partitioned by day (date), region (string, one value with a space) and
              bucket (int); v0 write, v1 append, v2 delete (delta-rs rewrites the files,
              the removed ones stay in the folder), v3 append that merges a new column
              `score` into the schema, then a checkpoint of v3, v4 append after it.
  overwritten v0 write, v1 overwrite: the folder holds both versions' files.
  nested      a struct column that gains a field in v1 (schema merge).
  ntz         a timestamp without time zone (reader feature timestampNtz).
  compacted   v0 write, v1 and v2 appends (one small file each), v3 an optimize that
              compacts the three files into one without changing a row (the append
              tests vacuum a copy of it).
  embeddings  a pyarrow fixed_size_list<float>[32] column (Delta records array<float>;
              the files keep the fixed-size type in their Arrow schema): v0 write, v1
              append.

Expected rows come from deltalake's own reader (DataFusion, which applies deletes), in
the contract's order: data files by their path relative to the table root, rows in file
order (read with pyarrow from the snapshot's files). Each row is written as `tfshard
inspect` prints a record: {feature: {kind: [values]}}, nulls omitted.
"""
import datetime
import json
import os
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from inspect_records import table_records


def rows(first, n, with_score=False):
    ids = list(range(first, first + n))
    cols = {
        "id": pa.array(ids, pa.int64()),
        "value": pa.array([i * 0.25 for i in ids], pa.float64()),
        "name": pa.array([None if i % 9 == 4 else f"row-{i}" for i in ids], pa.string()),
        "emb": pa.array([[i * 0.5, i * 0.5 + 1, i * 0.5 + 2, i * 0.5 + 3] for i in ids],
                        pa.list_(pa.float32())),
        "tags": pa.array([[f"t{j}" for j in range(i % 3)] for i in ids], pa.list_(pa.string())),
        "day": pa.array([datetime.date(2026, 11, 28 + i % 3) for i in ids], pa.date32()),
        "region": pa.array(["eu west" if i % 2 else "us" for i in ids], pa.string()),
        "bucket": pa.array([i % 4 for i in ids], pa.int32()),
    }
    if with_score:
        cols["score"] = pa.array([i * 2.0 for i in ids], pa.float64())
    return pa.table(cols)


def commit(f):
    f()
    # Distinct commit times (milliseconds) for --timestamp.
    time.sleep(0.05)


def deltalake_records(dt):
    """The snapshot's rows as deltalake's DataFusion reader gives them, as records."""
    return table_records(
        pa.table(QueryBuilder().register("t", dt).execute("select * from t").read_all()))


def expected(path, version):
    dt = DeltaTable(str(path), version=version)
    by_id = {r["id"]["int64"][0]: r for r in deltalake_records(dt)}
    order = []
    files = sorted(os.path.relpath(u, path) for u in dt.file_uris())
    for rel in files:
        order.extend(pq.read_table(path / rel, columns=["id"])["id"].to_pylist())
    assert sorted(order) == sorted(by_id), (path, version)
    times = {h["version"]: h["timestamp"] for h in DeltaTable(str(path)).history()}
    return {
        "version": version,
        "timestamp_ms": times[version],
        "files": files,
        "records": [by_id[i] for i in order],
    }


def real(out, tables):
    """OUT/real.json: each table's latest snapshot as deltalake reads it, records sorted
    (deletion vectors leave no file order to check against)."""
    result = {}
    for path in tables:
        records = deltalake_records(DeltaTable(str(path)))
        records.sort(key=lambda r: json.dumps(r, sort_keys=True))
        result[Path(path).name] = records
    (out / "real.json").write_text(json.dumps(result, indent=1))


def main():
    out = Path(sys.argv[1]).resolve()
    if sys.argv[2:3] == ["--real"]:
        out.mkdir(parents=True, exist_ok=True)
        return real(out, sys.argv[3:])
    out.mkdir(parents=True, exist_ok=True)
    events = out / "events"
    parts = ["day", "region", "bucket"]
    commit(lambda: write_deltalake(str(events), rows(0, 60), partition_by=parts))
    commit(lambda: write_deltalake(str(events), rows(60, 40), mode="append"))
    commit(lambda: DeltaTable(str(events)).delete("id % 5 = 0"))
    commit(lambda: write_deltalake(str(events), rows(100, 20, with_score=True), mode="append",
                                   schema_mode="merge"))
    DeltaTable(str(events)).create_checkpoint()
    commit(lambda: write_deltalake(str(events), rows(120, 10, with_score=True), mode="append"))

    overwritten = out / "overwritten"
    commit(lambda: write_deltalake(str(overwritten), rows(0, 30).drop_columns(parts)))
    commit(lambda: write_deltalake(str(overwritten), rows(500, 12).drop_columns(parts),
                                   mode="overwrite"))

    # A struct column that gains a field (schema merge): older files lack `s.b`.
    nested = out / "nested"
    s_a = pa.struct([("a", pa.int64())])
    s_ab = pa.struct([("a", pa.int64()), ("b", pa.string())])
    commit(lambda: write_deltalake(str(nested), pa.table({
        "id": pa.array(range(6), pa.int64()),
        "s": pa.array([{"a": i} if i != 3 else None for i in range(6)], s_a)})))
    commit(lambda: write_deltalake(str(nested), pa.table({
        "id": pa.array(range(6, 10), pa.int64()),
        "s": pa.array([{"a": i, "b": f"b{i}"} for i in range(6, 10)], s_ab)}),
        mode="append", schema_mode="merge"))

    # timestamp without a time zone: Delta's timestampNtz (a reader feature).
    ntz = out / "ntz"
    commit(lambda: write_deltalake(str(ntz), pa.table({
        "id": pa.array([1, 2, 3], pa.int64()),
        "ts": pa.array([datetime.datetime(2026, 11, 30, 8, 15), None,
                        datetime.datetime(1969, 12, 31, 23, 59, 59, 5)], pa.timestamp("us"))})))

    # An embedding as pyarrow holds it: a fixed-size list (Delta has none: array<float>).
    embeddings = out / "embeddings"
    def embedded(first, n):
        ids = list(range(first, first + n))
        return pa.table({
            "id": pa.array(ids, pa.int64()),
            "emb": pa.array([[i + j / 32 for j in range(32)] for i in ids],
                            pa.list_(pa.float32(), 32))})
    commit(lambda: write_deltalake(str(embeddings), embedded(0, 6)))
    commit(lambda: write_deltalake(str(embeddings), embedded(6, 4), mode="append"))

    # Small appends, then an optimize: the same rows, rewritten into one file.
    compacted = out / "compacted"
    plain = lambda first, n: rows(first, n).drop_columns(parts)
    commit(lambda: write_deltalake(str(compacted), plain(0, 20)))
    commit(lambda: write_deltalake(str(compacted), plain(20, 20), mode="append"))
    commit(lambda: write_deltalake(str(compacted), plain(40, 20), mode="append"))
    commit(lambda: DeltaTable(str(compacted)).optimize.compact())
    assert len(DeltaTable(str(compacted)).file_uris()) == 1

    result = {
        "embeddings": [expected(embeddings, v) for v in range(2)],
        "ntz": [expected(ntz, 0)],
        "events": [expected(events, v) for v in range(5)],
        "overwritten": [expected(overwritten, v) for v in range(2)],
        "nested": [expected(nested, v) for v in range(2)],
    }
    (out / "expected.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
