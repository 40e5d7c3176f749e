#!/usr/bin/python3
"""Writes a JPEG photo class tree for trying and timing `nnlab import` (not part of the suite).

usage: /usr/bin/python3 jpeg_photos.py OUT_DIR [COUNT] [MAX_SIDE]

OUT_DIR/CLASS/NNNNN.jpg, COUNT (default 2000) photos in three classes (circle, square,
triangle): a coloured shape on photographic-looking noise (smooth colour fields, grain and a
vignette), of several sizes and aspect ratios up to MAX_SIDE pixels on the longer side (default
2048): landscape 4:3 and 3:2, square, and portraits, a quarter of which are stored sideways with
EXIF orientation 6 or 8 as cameras do. Some are progressive, a few PNG. Needs Debian's
python3-pil and python3-numpy. Then, for example:

    /usr/bin/time -v build/app/nnlab --db /tmp/bench.db import photos OUT_DIR \\
        --resize shorter:256,center-crop:224x224 --normalize imagenet
"""
import os
import sys

import numpy as np
from PIL import Image, ImageDraw

out = sys.argv[1]
count = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
max_side = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
classes = ["circle", "square", "triangle"]
shapes = [(4, 3), (3, 2), (1, 1), (3, 4), (2, 3)]
longs = [s for s in (320, 480, 640, 800, 1024, 1280, 1600, 2048, 3000) if s <= max_side] or [
    max_side]
rng = np.random.default_rng(2024)


def photo(w, h, kind):
    # Smooth colour fields: low-resolution noise enlarged, then grain and a vignette.
    small = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
    field = np.asarray(Image.fromarray(small, "RGB").resize((w, h), Image.BICUBIC), np.float32)
    field += rng.normal(0, 10, size=(h, w, 1)).astype(np.float32)
    yy, xx = np.ogrid[0:h, 0:w]
    r2 = ((xx - w / 2) / w) ** 2 + ((yy - h / 2) / h) ** 2
    field *= (1.0 - 0.8 * r2)[..., None]
    im = Image.fromarray(np.clip(field, 0, 255).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(im)
    s = min(w, h) * rng.uniform(0.3, 0.6)
    cx, cy = rng.uniform(s / 2, w - s / 2), rng.uniform(s / 2, h - s / 2)
    colour = tuple(int(v) for v in rng.integers(0, 256, size=3))
    box = [cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2]
    if kind == "circle":
        d.ellipse(box, fill=colour)
    elif kind == "square":
        d.rectangle(box, fill=colour)
    else:
        d.polygon([(cx, cy - s / 2), (cx - s / 2, cy + s / 2), (cx + s / 2, cy + s / 2)],
                  fill=colour)
    return im


for c in classes:
    os.makedirs(f"{out}/{c}", exist_ok=True)
for i in range(count):
    kind = classes[i % len(classes)]
    aw, ah = shapes[int(rng.integers(0, len(shapes)))]
    long = longs[int(rng.integers(0, len(longs)))]
    w, h = (long, long * ah // aw) if aw >= ah else (long * aw // ah, long)
    im = photo(w, h, kind)
    path = f"{out}/{kind}/{i:05d}"
    if i % 50 == 7:
        im.save(path + ".png")
        continue
    exif = None
    if h > w and i % 4 == 1:  # a portrait stored sideways, turned back by its EXIF orientation
        o = 6 if i % 8 == 1 else 8
        im = im.transpose(Image.Transpose.ROTATE_90 if o == 6 else Image.Transpose.ROTATE_270)
        e = Image.Exif()
        e[0x0112] = o
        exif = e.tobytes()
    kw = {"quality": 88, "progressive": i % 5 == 3}
    if exif:
        kw["exif"] = exif
    im.save(path + ".jpg", "JPEG", **kw)
print(f"{count} photos in {out}")
