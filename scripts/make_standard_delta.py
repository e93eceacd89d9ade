#!/usr/bin/env python3
"""The standard benchmark table (scripts/make_standard_table.py) written as a Delta table
by deltalake, in about six data files, its FixedSizeList column stored as Delta's
array<float> (Delta has no fixed-size lists). Generated, never committed.

Usage: make_standard_delta.py STANDARD_DIR OUT_DIR
"""
import sys

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import WriterProperties, write_deltalake

src, out = sys.argv[1], sys.argv[2]
table = ds.dataset(src, format="parquet").to_table()
table = table.set_column(0, "x", table["x"].cast(pa.list_(pa.float32())))
write_deltalake(
    out,
    table,
    target_file_size=48 * 1024 * 1024,
    writer_properties=WriterProperties(compression="ZSTD", max_row_group_size=65_536),
)
print(f"{table.num_rows} rows as a Delta table under {out}")
