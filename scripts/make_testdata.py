#!/usr/bin/env python3
"""Writes testdata/small.parquet: the README's demo table (pyarrow, zstd).

Run: `$(scripts/venv.sh) scripts/make_testdata.py`. 2,000 rows in 2 row groups, a column
of most kinds the converter maps: a float vector, a label, a string id, a nullable
score, a timestamp, a decimal, a variable-length list with nulls and empty lists, and a
struct (flattened to `meta/source`, `meta/weight`).
"""
import datetime
import decimal
import os

import pyarrow as pa
import pyarrow.parquet as pq

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "small.parquet")
N = 2000

rows_x = [[float((i * 31 + j) % 97) / 7.0 for j in range(8)] for i in range(N)]
table = pa.table({
    "x": pa.array(rows_x, type=pa.list_(pa.float32(), 8)),
    "y": pa.array([i % 10 for i in range(N)], type=pa.int64()),
    "id": pa.array([f"row-{i:06d}" for i in range(N)], type=pa.string()),
    "score": pa.array([None if i % 7 == 0 else i / 3.0 for i in range(N)], type=pa.float64()),
    "ts": pa.array([datetime.datetime(2024, 1, 1) + datetime.timedelta(minutes=i) for i in range(N)],
                   type=pa.timestamp("us")),
    "price": pa.array([decimal.Decimal(f"{i}.{i % 100:02d}") for i in range(N)], type=pa.decimal128(10, 2)),
    "tags": pa.array([None if i % 11 == 0 else [f"t{j}" for j in range(i % 4)] for i in range(N)],
                     type=pa.list_(pa.string())),
    "meta": pa.array([{"source": "web" if i % 2 else "app", "weight": i % 5} for i in range(N)],
                     type=pa.struct([("source", pa.string()), ("weight", pa.int32())])),
})
pq.write_table(table, OUT, compression="zstd", row_group_size=N // 2)
print(OUT, os.path.getsize(OUT), "bytes")
