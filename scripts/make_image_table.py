#!/usr/bin/env python3
"""A Parquet table of images in the Hugging Face `datasets` layout: `image` is a struct
{bytes, path}, `label` an int64 (the class folder's index). Row groups of 500 rows
(~46 MB each for ~92 KB JPEGs), as `datasets` and Spark write large-value tables.
For the converter's memory benchmark.

Usage: make_image_table.py JPEG_DIR OUT.parquet [--dictionary]. The image bytes are
PLAIN-encoded (as a table of distinct images ends up: pyarrow's dictionary falls back
to plain); --dictionary keeps them dictionary-encoded, as a table of repeated images
is. Generated, never committed."""
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

root, out = sys.argv[1], sys.argv[2]
dictionary = "--dictionary" in sys.argv[3:]
classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
files = [(c, i, f) for i, c in enumerate(classes) for f in sorted(os.listdir(os.path.join(root, c)))]
image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
schema = pa.schema([("image", image_type), ("label", pa.int64())])
use_dictionary = True if dictionary else ["image.path", "label"]
with pq.ParquetWriter(out, schema, compression="zstd", use_dictionary=use_dictionary) as writer:
    for start in range(0, len(files), 500):
        chunk = files[start : start + 500]
        images = [{"bytes": open(os.path.join(root, c, f), "rb").read(), "path": f} for c, _, f in chunk]
        writer.write_table(
            pa.table({"image": pa.array(images, image_type), "label": pa.array([i for _, i, _ in chunk], pa.int64())}),
            row_group_size=500,
        )
print(f"{len(files)} images in {(len(files) + 499) // 500} row groups: {out}")
