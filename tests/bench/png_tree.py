#!/usr/bin/env python3
"""Writes a PNG class tree: for timing `nnlab import`, and for README's examples.

usage: png_tree.py [--test] OUT_DIR [COUNT]

OUT_DIR/classK/NNNNN.png, COUNT (default 60000) 28x28 8-bit gray PNGs, K the label and NNNNN
the sample's index. The pixels and labels come from Fashion-MNIST's train split (--test: its
test split) when /usr/share/datasets/fashion-mnist is installed, otherwise from a fixed
synthetic pattern. Then, for example:

    time build/app/nnlab --db /tmp/bench.db import bench OUT_DIR
"""
import gzip
import os
import struct
import sys
import zlib

FASHION = "/usr/share/datasets/fashion-mnist"


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def png_gray(pixels, w, h):
    raw = b"".join(b"\x00" + pixels[y * w:(y + 1) * w] for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def samples(count, split):
    images = os.path.join(FASHION, split + "-images-idx3-ubyte.gz")
    labels = os.path.join(FASHION, split + "-labels-idx1-ubyte.gz")
    if os.path.exists(images) and os.path.exists(labels):
        with gzip.open(images) as fi, gzip.open(labels) as fl:
            fi.read(16)
            fl.read(8)
            for _ in range(count):
                px, lb = fi.read(784), fl.read(1)
                if len(px) < 784:
                    return
                yield px, lb[0]
        return
    for i in range(count):
        yield bytes((i * 7 + p * 13) % 256 for p in range(784)), i % 10


def main():
    args = sys.argv[1:]
    split = "train"
    if args and args[0] == "--test":
        split, args = "t10k", args[1:]
    if not args:
        sys.exit(__doc__)
    out, count = args[0], int(args[1]) if len(args) > 1 else 60000
    for i, (px, label) in enumerate(samples(count, split)):
        folder = os.path.join(out, "class%d" % label)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "%05d.png" % i), "wb") as f:
            f.write(png_gray(px, 28, 28))


if __name__ == "__main__":
    main()
