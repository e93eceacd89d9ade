#!/usr/bin/env python3
"""Writes testdata/hive/: a Hive-partitioned table written by pyarrow, as data platforms
lay tables out, and testdata/hive.expected.json: every row as pyarrow's
dataset reader gives it (partition keys included), in the order tfshard reads the files.

    .venv/bin/python scripts/make_hive_table.py

Keys: `year` (int, with a null row -> __HIVE_DEFAULT_PARTITION__) and `city` (strings
that need URL escaping: a space, a slash, '&', '=', a non-ASCII letter).
"""
import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

root = Path(__file__).resolve().parent.parent / "testdata"
out = root / "hive"
shutil.rmtree(out, ignore_errors=True)

cities = ["New York/NJ", "a&b=c", "Zürich", "plain"]
rows = []
for i in range(24):
    rows.append(
        {
            "id": i,
            "value": float(i) * 0.5,
            "name": f"row-{i}",
            "year": None if i % 7 == 3 else 2020 + i % 3,
            "city": cities[i % len(cities)],
        }
    )
table = pa.Table.from_pylist(rows)
pq.write_to_dataset(
    table,
    out,
    partition_cols=["year", "city"],
    basename_template="part-{i}.parquet",
)

# What pyarrow's dataset reader gives, per file, in tfshard's order: byte order of the
# path relative to the table folder.
dataset = ds.dataset(out, format="parquet", partitioning="hive")
by_file = {}
for fragment in dataset.get_fragments():
    rel = Path(fragment.path).relative_to(out).as_posix()
    by_file[rel] = fragment.to_table(schema=dataset.schema).to_pylist()
files = sorted(by_file, key=lambda s: s.encode())
expected = [{"file": rel, **row} for rel in files for row in by_file[rel]]
(root / "hive.expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
print(f"{len(files)} files, {len(expected)} rows -> {out}", file=sys.stderr)
