#!/usr/bin/env python3
"""Writes the Iceberg tables of tests/cli/iceberg.rs with pyiceberg, and what tfshard
must make of them: OUT/expected.json.

    python scripts/iceberg_tables.py OUT
    python scripts/iceberg_tables.py OUT --s3 http://127.0.0.1:PORT BUCKET   # s3_events only

Tables (a SQL catalog on SQLite, OUT/catalog.db; the warehouse OUT/warehouse):
  events    format v2, partitioned by identity(region) and day(day): s0 append, s1
            append, s2 delete (copy-on-write: pyiceberg rewrites the files, the old ones
            stay in the folder), s3 a schema change (`value` renamed `amount`, `score`
            added, `tags` dropped) then an append, s4 a data file written without its
            partition column `region` (its value only in the manifest).
  deletes   format v2, unpartitioned: s0 and s1 appends, s2 a position delete file, s3
            an equality delete file on `grp`, s4 an append with rows of that `grp` again
            (a later sequence number: the delete does not apply to them).
  v1        format v1, partitioned by bucket(id) and truncate(name): two appends.
  empty     created, never written: no snapshot.
  embeddings  created from a pyarrow schema with a fixed_size_list<float>[32] column
            (Iceberg records list<float>): two appends.
  s3_events (--s3 only) the first three snapshots of `events`, written to the bucket.

pyiceberg 0.12 writes copy-on-write deletes only: the delete files are written here with
pyarrow (the spec's columns and field ids) and committed through pyiceberg's own snapshot
producer with a delete manifest. Expected rows come from pyiceberg's reader (it applies
position deletes and fills identity partition values); it refuses equality deletes, so
for those snapshots the rows are the previous snapshot's minus the deleted keys, plus
what was appended. Order is the contract's: data files by their path relative to the
table location, rows in file order.
"""
import json
import sys
import time
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import In
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import (DataFile, DataFileContent, FileFormat, ManifestContent,
                                ManifestEntry, ManifestEntryStatus, ManifestWriterV2)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, TruncateTransform
from pyiceberg.typedef import Record
from pyiceberg.types import (DateType, DoubleType, FloatType, IntegerType, ListType, LongType,
                             NestedField, StringType)

from inspect_records import table_records

FILE_PATH_ID = 2147483546
POS_ID = 2147483545
REGIONS = ["eu west", "us"]


def events_rows(first, n, evolved=False):
    ids = list(range(first, first + n))
    cols = {
        "id": pa.array(ids, pa.int64()),
        ("amount" if evolved else "value"): pa.array([i * 0.25 for i in ids], pa.float64()),
        "name": pa.array([None if i % 9 == 4 else f"row-{i}" for i in ids], pa.string()),
        "emb": pa.array([[i * 0.5, i * 0.5 + 1, i * 0.5 + 2, i * 0.5 + 3] for i in ids],
                        pa.list_(pa.float32())),
    }
    if not evolved:
        cols["tags"] = pa.array([[f"t{j}" for j in range(i % 3)] for i in ids],
                                pa.list_(pa.string()))
    cols["day"] = pa.array([date(2026, 11, 28 + i % 3) for i in ids], pa.date32())
    cols["region"] = pa.array([REGIONS[i % 2] for i in ids], pa.string())
    if evolved:
        cols["score"] = pa.array([None if i % 4 == 0 else i * 2.0 for i in ids], pa.float64())
    return pa.table(cols)


def events_schema():
    return Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "value", DoubleType(), required=False),
        NestedField(3, "name", StringType(), required=False),
        NestedField(4, "emb", ListType(8, FloatType(), element_required=False), required=False),
        NestedField(5, "tags", ListType(9, StringType(), element_required=False), required=False),
        NestedField(6, "day", DateType(), required=False),
        NestedField(7, "region", StringType(), required=False),
    )


def events_spec():
    return PartitionSpec(
        PartitionField(source_id=7, field_id=1000, transform=IdentityTransform(), name="region"),
        PartitionField(source_id=6, field_id=1001, transform=DayTransform(), name="day_day"),
    )


def pause():
    # Distinct snapshot times (milliseconds) for --timestamp.
    time.sleep(0.05)


def local(path):
    """A local file: URI's path."""
    return path[len("file://"):] if path.startswith("file://") else path


def relative(path, location):
    return path[len(location.rstrip("/")) + 1:]


def read_parquet(tbl, path, columns=None):
    with tbl.io.new_input(path).open() as f:
        return pq.read_table(f, columns=columns)


def snapshot_times(tbl):
    times = {}
    for entry in tbl.metadata.snapshot_log:
        times[entry.snapshot_id] = entry.timestamp_ms
    return times


def expected(tbl, snapshot_id, rows=None):
    """What converting snapshot `snapshot_id` gives: `rows` (a pyarrow table) or
    pyiceberg's own read of it, in the contract's order."""
    location = tbl.metadata.location
    if rows is None:
        rows = tbl.scan(snapshot_id=snapshot_id).to_arrow()
    by_id = {}
    for record in table_records(rows):
        by_id[record["id"]["int64"][0]] = record
    # The snapshot's live files, from its manifests (pyiceberg's planner refuses
    # equality deletes).
    files, deletes = [], []
    for manifest in tbl.metadata.snapshot_by_id(snapshot_id).manifests(tbl.io):
        for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
            rel = relative(entry.data_file.file_path, location)
            (files if entry.data_file.content == DataFileContent.DATA else deletes).append(rel)
    files.sort()
    deletes.sort()
    order = []
    for rel in files:
        ids = read_parquet(tbl, f"{location}/{rel}", ["id"])["id"].to_pylist()
        order.extend(i for i in ids if i in by_id)
    assert sorted(order) == sorted(by_id), (location, snapshot_id)
    return {
        "snapshot_id": snapshot_id,
        "timestamp_ms": snapshot_times(tbl)[snapshot_id],
        "files": files,
        "deletes": deletes,
        "records": [by_id[i] for i in order],
    }


class _DeleteManifestWriter(ManifestWriterV2):
    def content(self):
        return ManifestContent.DELETES

    @property
    def _meta(self):
        return {**super()._meta, "content": "deletes"}


class _AddDeleteFiles(_FastAppendFiles):
    """A snapshot that keeps every manifest and adds one of delete files (pyiceberg's
    snapshot producer, with the delete manifest Java's RowDelta would write)."""

    delete_files = ()

    def _manifests(self):
        manifests = super()._manifests()
        metadata = self._transaction.table_metadata
        writer = _DeleteManifestWriter(metadata.spec(), metadata.schema(), self.new_manifest_output(),
                                       self._snapshot_id, self._compression)
        with writer:
            for data_file in self.delete_files:
                writer.add(ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                    sequence_number=None, file_sequence_number=None, data_file=data_file))
        return manifests + [writer.to_manifest_file()]


def write_file(tbl, name, table):
    """Writes a Parquet file into the table's data folder; its path and size."""
    path = f"{tbl.metadata.location}/data/{name}.parquet"
    with tbl.io.new_output(path).create(overwrite=True) as f:
        pq.write_table(table, f)
    return path, len(tbl.io.new_input(path))


def with_ids(fields):
    """A pyarrow schema whose fields carry Iceberg field ids: [(name, type, id)]."""
    return pa.schema([pa.field(n, t, nullable=True, metadata={b"PARQUET:field_id": str(i).encode()})
                      for n, t, i in fields])


def delete_file(tbl, name, table, content, equality_ids=None):
    path, size = write_file(tbl, name, table)
    return DataFile.from_args(
        content=content, file_path=path, file_format=FileFormat.PARQUET, partition=Record(),
        record_count=table.num_rows, file_size_in_bytes=size, equality_ids=equality_ids,
        spec_id=0)


def commit_deletes(tbl, files):
    with tbl.transaction() as tx:
        op = _AddDeleteFiles(operation=Operation.DELETE, transaction=tx, io=tbl.io)
        op.delete_files = files
        op.commit()
    pause()


def current(tbl):
    tbl = tbl.refresh()
    return tbl.metadata.current_snapshot_id


def events(catalog, name, snapshots=5):
    tbl = catalog.create_table(name, schema=events_schema(), partition_spec=events_spec(),
                               properties={"format-version": "2"})
    ids = []
    tbl.append(events_rows(0, 60)); pause(); ids.append(current(tbl))
    tbl.append(events_rows(60, 40)); pause(); ids.append(current(tbl))
    tbl.delete(delete_filter=In("id", list(range(0, 100, 5)))); pause(); ids.append(current(tbl))
    result = [expected(tbl, i) for i in ids]
    if snapshots == 3:
        return result
    with tbl.update_schema() as update:
        update.rename_column("value", "amount")
        update.add_column("score", DoubleType())
        update.delete_column("tags")
    tbl = tbl.refresh()
    tbl.append(events_rows(100, 20, evolved=True)); pause(); ids.append(current(tbl))
    # A data file without its identity partition column: region comes from the manifest.
    rows = events_rows(130, 6, evolved=True).drop_columns(["region"])
    rows = rows.set_column(rows.schema.get_field_index("day"), "day",
                           pa.array([date(2026, 11, 29)] * 6, pa.date32()))
    full = schema_to_pyarrow(tbl.schema())
    typed = rows.cast(pa.schema([full.field(f.name) for f in rows.schema]))
    path, size = write_file(tbl, "region=apac/no-region-column", typed)
    days = (date(2026, 11, 29) - date(1970, 1, 1)).days
    data_file = DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=Record("apac", days), record_count=typed.num_rows, file_size_in_bytes=size,
        spec_id=0)
    with tbl.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            append.append_data_file(data_file)
    pause()
    ids.append(current(tbl))
    return result + [expected(tbl, i) for i in ids[3:]]


def deletes(catalog):
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "grp", IntegerType(), required=False),
        NestedField(3, "name", StringType(), required=False),
    )
    tbl = catalog.create_table("db.deletes", schema=schema, properties={"format-version": "2"})

    def rows(first, n):
        ids = list(range(first, first + n))
        return pa.table({"id": pa.array(ids, pa.int64()),
                         "grp": pa.array([i % 7 for i in ids], pa.int32()),
                         "name": pa.array([f"n{i}" for i in ids], pa.string())})

    ids = []
    tbl.append(rows(0, 40)); pause(); ids.append(current(tbl))
    tbl.append(rows(40, 20)); pause(); ids.append(current(tbl))
    files = sorted(t.file.file_path for t in tbl.scan().plan_files())
    first, second = (f for f in files)
    firsts = read_parquet(tbl, first, ["id"])["id"].to_pylist()
    seconds = read_parquet(tbl, second, ["id"])["id"].to_pylist()
    positions = pa.table(
        [pa.array([first] * 3 + [second], pa.string()), pa.array([1, 3, 10, 0], pa.int64())],
        schema=with_ids([("file_path", pa.string(), FILE_PATH_ID), ("pos", pa.int64(), POS_ID)]))
    commit_deletes(tbl, [delete_file(tbl, "pos-deletes", positions,
                                     DataFileContent.POSITION_DELETES)])
    ids.append(current(tbl))
    gone = {firsts[1], firsts[3], firsts[10], seconds[0]}
    s2 = tbl.scan(snapshot_id=ids[2]).to_arrow()
    assert sorted(s2["id"].to_pylist()) == sorted(set(range(60)) - gone), "position deletes"
    keys = pa.table([pa.array([3], pa.int32())], schema=with_ids([("grp", pa.int32(), 2)]))
    commit_deletes(tbl, [delete_file(tbl, "eq-deletes", keys, DataFileContent.EQUALITY_DELETES,
                                     equality_ids=[2])])
    ids.append(current(tbl))
    s3 = s2.filter(pa.compute.not_equal(s2["grp"], 3))
    tbl.append(rows(60, 10)); pause(); ids.append(current(tbl))
    s4 = pa.concat_tables([s3, rows(60, 10).cast(s3.schema)])
    return [expected(tbl, ids[0]), expected(tbl, ids[1]), expected(tbl, ids[2]),
            expected(tbl, ids[3], s3), expected(tbl, ids[4], s4)]


def v1(catalog):
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "name", StringType(), required=False))
    # Hidden partitions the reader needs nothing from: bucket(id) and truncate(name).
    spec = PartitionSpec(
        PartitionField(source_id=1, field_id=1000, transform=BucketTransform(4), name="id_bucket"),
        PartitionField(source_id=2, field_id=1001, transform=TruncateTransform(2), name="name_trunc"),
    )
    tbl = catalog.create_table("db.v1", schema=schema, partition_spec=spec,
                               properties={"format-version": "1"})
    ids = []
    for first in (0, 10):
        tbl.append(pa.table({"id": pa.array(range(first, first + 10), pa.int64()),
                             "name": pa.array([f"v{i % 3}-{i}" for i in range(first, first + 10)])}))
        pause()
        ids.append(current(tbl))
    return [expected(tbl, i) for i in ids]


def embeddings(catalog):
    def rows(first, n):
        ids = list(range(first, first + n))
        return pa.table({
            "id": pa.array(ids, pa.int64()),
            "emb": pa.array([[i + j / 32 for j in range(32)] for i in ids],
                            pa.list_(pa.float32(), 32))})
    tbl = catalog.create_table("db.embeddings", schema=rows(0, 0).schema)
    ids = []
    for first, n in ((0, 6), (6, 4)):
        tbl.append(rows(first, n))
        pause()
        ids.append(current(tbl))
    return [expected(tbl, i) for i in ids]


def catalog_at(out, name, warehouse, **props):
    catalog = SqlCatalog(name, uri=f"sqlite:///{out}/{name}.db", warehouse=warehouse, **props)
    catalog.create_namespace("db")
    return catalog


def location(catalog, name):
    return catalog.load_table(name).metadata.location


def main():
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if sys.argv[2:3] == ["--s3"]:
        endpoint, bucket = sys.argv[3], sys.argv[4]
        s3 = catalog_at(out, "s3catalog", f"s3://{bucket}/warehouse", **{
            "s3.endpoint": endpoint, "s3.access-key-id": "testing",
            "s3.secret-access-key": "testing-secret-key", "s3.region": "us-east-1"})
        result = {"s3_events": events(s3, "db.events", snapshots=3),
                  "locations": {"s3_events": location(s3, "db.events")}}
    else:
        catalog = catalog_at(out, "catalog", f"file://{out}/warehouse")
        result = {
            "events": events(catalog, "db.events"),
            "deletes": deletes(catalog),
            "v1": v1(catalog),
            "embeddings": embeddings(catalog),
        }
        catalog.create_table("db.empty",
                             schema=Schema(NestedField(1, "id", LongType(), required=False)))
        result["locations"] = {t: location(catalog, f"db.{t}")
                               for t in ["events", "deletes", "v1", "empty", "embeddings"]}
    (out / "expected.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
