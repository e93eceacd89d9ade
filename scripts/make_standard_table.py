#!/usr/bin/env python3
"""The standard benchmark table: 2,000,000 rows in 8 zstd Parquet files, row groups of
65,536 rows; `x` FixedSizeList<float32>[32], `y` int64 in 0..9, `id` a 16-char string.

Usage: standard_table.py OUT_DIR [ROWS]. Generated, never committed.
"""
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

out = sys.argv[1]
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 2_000_000
files = 8
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(42)
per = rows // files
for f in range(files):
    n = per if f < files - 1 else rows - per * (files - 1)
    x = rng.standard_normal((n, 32), dtype=np.float32)
    table = pa.table({
        "x": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), 32),
        "y": pa.array(rng.integers(0, 10, n), pa.int64()),
        "id": pa.array([f"{f:02d}{i:014d}" for i in range(n)], pa.string()),
    })
    pq.write_table(table, os.path.join(out, f"part-{f:05d}.parquet"), compression="zstd", row_group_size=65_536)
print(f"{rows} rows in {files} files under {out}")
