#!/usr/bin/env python3
"""Writes testdata/images/: a tiny class-folder image set in every format we sniff.

Run: `$(scripts/venv.sh) scripts/make_images.py` (Pillow). Classes `cats`, `dogs` and an
empty `zebras`; a nested sub-folder inside a class; a PNG named `.jpg`.
"""
import os
import shutil

from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "images")
shutil.rmtree(OUT, ignore_errors=True)


def img(w, h, seed):
    im = Image.new("RGB", (w, h))
    im.putdata([((x * 7 + seed) % 256, (y * 13 + seed) % 256, (x * y + seed) % 256) for y in range(h) for x in range(w)])
    return im


def save(rel, im, fmt):
    path = os.path.join(OUT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    im.save(path, fmt)


save("cats/a.jpg", img(32, 24, 1), "JPEG")
save("cats/nested/deep/b.png", img(17, 9, 2), "PNG")
save("cats/c.webp", img(20, 30, 3), "WEBP")
save("dogs/d.gif", img(12, 12, 4).convert("P"), "GIF")
save("dogs/e.bmp", img(8, 5, 5), "BMP")
save("dogs/f-really-png.jpg", img(10, 11, 6), "PNG")
save("dogs/G.JPEG", img(40, 2, 7), "JPEG")
os.makedirs(os.path.join(OUT, "zebras"), exist_ok=True)
open(os.path.join(OUT, "zebras", ".gitkeep"), "w").close()
for root, _, files in sorted(os.walk(OUT)):
    for f in sorted(files):
        p = os.path.join(root, f)
        print(os.path.getsize(p), os.path.relpath(p, OUT))
