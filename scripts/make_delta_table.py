#!/usr/bin/env python3
"""Writes testdata/delta-table/: a small Delta Lake table written by `deltalake`, with a
row deleted, so its folder holds a Parquet file that is no longer part of the table.
tfshard must refuse the folder.

    python3 -m venv /tmp/delta && /tmp/delta/bin/pip install deltalake==1.6.6 pyarrow==26.0.1
    /tmp/delta/bin/python scripts/make_delta_table.py
"""
import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

out = Path(__file__).resolve().parent.parent / "testdata" / "delta-table"
shutil.rmtree(out, ignore_errors=True)
write_deltalake(str(out), pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}))
write_deltalake(str(out), pa.table({"id": [4], "name": ["d"]}), mode="append")
DeltaTable(str(out)).delete("id = 2")
print(sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()))
