#!/usr/bin/env python3
"""A folder of JPEGs in class sub-folders for the image benchmarks (default 6,000 files
of ~100 KB in 10 classes). Usage: make_jpegs.py OUT_DIR [COUNT]. Generated, never
committed."""
import io
import os
import sys

import numpy as np
from PIL import Image

out = sys.argv[1]
count = int(sys.argv[2]) if len(sys.argv) > 2 else 6000
rng = np.random.default_rng(3)
# One noisy base image per class, re-encoded with a per-file shift: ~100 KB at quality 90.
bases = [rng.integers(0, 256, (320, 320, 3), dtype=np.uint8) for _ in range(10)]
for i in range(count):
    k = i % 10
    d = os.path.join(out, f"class_{k:02d}")
    os.makedirs(d, exist_ok=True)
    arr = np.roll(bases[k], i, axis=1)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=90)
    with open(os.path.join(d, f"img_{i:06d}.jpg"), "wb") as fh:
        fh.write(buf.getvalue())
print(f"{count} JPEGs under {out}")
