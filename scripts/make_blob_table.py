#!/usr/bin/env python3
"""A table of large binary records (default 10,000 x ~100 KB, about 1 GB): `image`
holds incompressible bytes, `label` an int. For the verify and reader benchmarks.

Usage: make_blob_table.py OUT.parquet [ROWS] [BYTES]. Generated, never committed."""
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

out = sys.argv[1]
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
size = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
rng = np.random.default_rng(7)
writer = None
for start in range(0, rows, 500):
    n = min(500, rows - start)
    blobs = [rng.bytes(size + int(rng.integers(-2000, 2000))) for _ in range(n)]
    t = pa.table({"image": pa.array(blobs, pa.binary()), "label": pa.array(rng.integers(0, 10, n), pa.int64())})
    if writer is None:
        writer = pq.ParquetWriter(out, t.schema, compression="none")
    writer.write_table(t, row_group_size=500)
writer.close()
print(f"{rows} rows of ~{size} bytes -> {out}")
