#!/usr/bin/env python3
"""The standard benchmark table (scripts/make_standard_table.py) written as an Iceberg
table by pyiceberg (a SQL catalog on SQLite beside it), in about six data files, its
FixedSizeList column stored as Iceberg's list<float> (Iceberg has no fixed-size lists).
Generated, never committed.

Usage: make_standard_iceberg.py STANDARD_DIR OUT_DIR     (the table: OUT_DIR/warehouse/bench/standard)
"""
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.catalog.sql import SqlCatalog

src, out = sys.argv[1], Path(sys.argv[2]).resolve()
out.mkdir(parents=True, exist_ok=True)
table = ds.dataset(src, format="parquet").to_table()
table = table.set_column(0, "x", table["x"].cast(pa.list_(pa.float32())))
catalog = SqlCatalog("bench", uri=f"sqlite:///{out}/catalog.db", warehouse=f"file://{out}/warehouse")
catalog.create_namespace("bench")
iceberg = catalog.create_table("bench.standard", schema=table.schema, properties={
    "write.target-file-size-bytes": str(48 * 1024 * 1024),
    "write.parquet.compression-codec": "zstd",
    "write.parquet.row-group-limit": "65536",
})
iceberg.append(table)
print(f"{table.num_rows} rows as an Iceberg table under {iceberg.metadata.location}")
