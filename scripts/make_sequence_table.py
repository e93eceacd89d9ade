"""The SequenceExample benchmark table: ROWS rows (default 200,000), `label` an int64 and
`frames` a list of 1 to 50 steps of 8 float32 each. Usage: make_sequence_table.py OUT
[ROWS]. Generated, never committed."""
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

out = sys.argv[1]
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
rng = np.random.default_rng(16)
steps = rng.integers(1, 51, rows)
values = pa.array(rng.standard_normal(int(steps.sum()) * 8, dtype=np.float32))
offsets = pa.array(np.concatenate([[0], np.cumsum(steps)]).astype(np.int32))
frames = pa.ListArray.from_arrays(offsets, pa.FixedSizeListArray.from_arrays(values, 8))
table = pa.table({"label": pa.array(rng.integers(0, 10, rows), pa.int64()), "frames": frames})
pq.write_table(table, out, row_group_size=20_000)
print(f"{rows} rows, {int(steps.sum())} steps in {out}")
