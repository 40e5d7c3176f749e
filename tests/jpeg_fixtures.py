#!/usr/bin/python3
"""Makes the JPEG test data of tests/test_jpeg.c, and what Pillow and torchvision make of it.

Run with Debian's /usr/bin/python3 (python3-pil, python3-numpy, python3-torchvision and
libjpeg-turbo-progs for cjpeg): jpeg_fixtures.py OUT. Writes under OUT:

  v/NAME.jpg        JPEG variants: PIL baseline 4:2:0 and 4:4:4, progressive, gray, CMYK (Adobe),
                    EXIF orientations 1-8 on a 37x29 picture; cjpeg baseline, progressive,
                    restart markers every row and every 2 MCUs, arithmetic coding; a truncated,
                    a corrupt and a non-JPEG file named .jpg
  v/NAME.rgb        Pillow's pixels after ImageOps.exif_transpose and convert("RGB"), planes
                    (3, h, w) of bytes; v/NAME.l the same as convert("L") for the gray file
  variants.txt      one line per good variant: NAME W H (after orientation)
  tree/CLASS/...    a class tree of JPEG and PNG photos of several sizes and aspects, some
                    portrait with EXIF orientation 6 or 8 (coloured shapes on noise)
  tree.f32          torchvision's Resize(48) + CenterCrop(40) + ToTensor + Normalize(ImageNet) of
                    every tree file, in nnlab's import order (classes sorted, files sorted), after
                    exif_transpose, float32 (n, 3, 40, 40)
  stretch.rgb       Pillow's resize((20, 15), BILINEAR) of v/baseline.jpg, planes
  padcrop.rgb       torchvision's CenterCrop((40, 50)) of v/baseline.jpg (padded), planes
  big.jpg, big.rgb  a 960x720 photo and Pillow's Resize(64) + CenterCrop(64) of it, planes
"""
import io
import os
import subprocess
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageOps

out = sys.argv[1]
rng = np.random.default_rng(7)


def photo(w, h, seed):
    """Coloured shapes on photographic-looking noise."""
    r = np.random.default_rng(seed)
    base = r.integers(0, 256, size=3)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.empty((h, w, 3), np.float64)
    for k in range(3):
        img[..., k] = base[k] * (0.6 + 0.4 * xx / max(w - 1, 1)) + 20 * np.sin(yy / 7.0 + k)
    img += r.normal(0, 18, size=img.shape)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(im)
    for _ in range(3):
        x0, y0 = int(r.integers(0, w - 4)), int(r.integers(0, h - 4))
        x1, y1 = int(r.integers(x0 + 2, w)), int(r.integers(y0 + 2, h))
        colour = tuple(int(v) for v in r.integers(0, 256, size=3))
        if r.integers(0, 2):
            d.ellipse([x0, y0, x1, y1], fill=colour)
        else:
            d.rectangle([x0, y0, x1, y1], fill=colour)
    return im


def exif_bytes(orientation):
    e = Image.Exif()
    e[0x0112] = orientation
    return e.tobytes()


def planes(im):
    a = np.asarray(im.convert("RGB"), np.uint8)
    return np.ascontiguousarray(a.transpose(2, 0, 1)).tobytes()


def pil_view(path):
    return ImageOps.exif_transpose(Image.open(path))


os.makedirs(f"{out}/v", exist_ok=True)
pic = photo(37, 29, 1)
good = []


def save(name, im, **kw):
    im.save(f"{out}/v/{name}.jpg", "JPEG", **kw)
    good.append(name)


save("baseline", pic, quality=90)
save("s444", pic, quality=95, subsampling=0)
save("progressive", pic, quality=85, progressive=True)
save("gray", pic.convert("L"), quality=90)
save("cmyk", pic.convert("CMYK"), quality=90)
for o in range(1, 9):
    save(f"orient{o}", pic, quality=90, exif=exif_bytes(o))

pic.save(f"{out}/v/src.ppm")
for name, args in [("cjpeg", []), ("cjpeg-progressive", ["-progressive"]),
                   ("cjpeg-restart-row", ["-restart", "1"]),
                   ("cjpeg-restart-2", ["-restart", "2b"]),
                   ("cjpeg-arithmetic", ["-arithmetic"])]:
    subprocess.run(["cjpeg", "-quality", "88", *args, "-outfile", f"{out}/v/{name}.jpg",
                    f"{out}/v/src.ppm"], check=True)
    good.append(name)
os.remove(f"{out}/v/src.ppm")

with open(f"{out}/variants.txt", "w") as f:
    for name in good:
        im = pil_view(f"{out}/v/{name}.jpg")
        with open(f"{out}/v/{name}.rgb", "wb") as g:
            g.write(planes(im))
        if im.mode == "L":
            with open(f"{out}/v/{name}.l", "wb") as g:
                g.write(np.asarray(im, np.uint8).tobytes())
        f.write(f"{name} {im.width} {im.height}\n")

data = open(f"{out}/v/baseline.jpg", "rb").read()
open(f"{out}/v/truncated.jpg", "wb").write(data[: len(data) // 2])
bad = bytearray(data)
sos = bad.find(b"\xff\xda")
for i in range(sos + 40, len(bad) - 10, 7):
    bad[i] = 0xFF if bad[i + 1] != 0 else bad[i]
open(f"{out}/v/corrupt.jpg", "wb").write(bytes(bad))
open(f"{out}/v/notjpeg.jpg", "wb").write(b"GIF89a this is not a JPEG file at all")

# The class tree: JPEG and PNG, several sizes and aspects, portraits stored sideways with EXIF.
import torch  # noqa: E402  (after the Pillow-only part, which needs no torch)
from torchvision import transforms  # noqa: E402

sizes = [(64, 48), (48, 64), (50, 50), (81, 57), (45, 90), (96, 60)]
classes = {"circles": [], "squares": [], "stripes": []}
seed = 100
for cls in classes:
    os.makedirs(f"{out}/tree/{cls}", exist_ok=True)
    for i, (w, h) in enumerate(sizes):
        seed += 1
        im = photo(w, h, seed)
        if i == 3:
            name = f"p{i}.png"
            im.save(f"{out}/tree/{cls}/{name}")
        elif i in (1, 4):  # a portrait photo stored sideways, as cameras do
            o = 6 if i == 1 else 8
            stored = im.transpose(Image.Transpose.ROTATE_90 if o == 6 else Image.Transpose.ROTATE_270)
            name = f"p{i}.JPG" if i == 1 else f"p{i}.jpeg"
            stored.save(f"{out}/tree/{cls}/{name}", "JPEG", quality=90, exif=exif_bytes(o))
        else:
            name = f"p{i}.jpg"
            im.save(f"{out}/tree/{cls}/{name}", "JPEG", quality=90,
                    progressive=(i == 2))
        classes[cls].append(name)

tf = transforms.Compose([
    transforms.Resize(48),
    transforms.CenterCrop(40),
    transforms.ToTensor(),
    transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
])
with open(f"{out}/tree.f32", "wb") as f:
    for cls in sorted(classes):
        for name in sorted(classes[cls], key=lambda s: s.encode()):
            x = tf(pil_view(f"{out}/tree/{cls}/{name}").convert("RGB"))
            f.write(x.numpy().astype(np.float32).tobytes())

base = Image.open(f"{out}/v/baseline.jpg").convert("RGB")
open(f"{out}/stretch.rgb", "wb").write(planes(base.resize((20, 15), Image.BILINEAR)))
open(f"{out}/padcrop.rgb", "wb").write(planes(transforms.CenterCrop((40, 50))(base)))

photo(960, 720, 5).save(f"{out}/big.jpg", "JPEG", quality=90)
big = transforms.CenterCrop(64)(transforms.Resize(64)(Image.open(f"{out}/big.jpg").convert("RGB")))
open(f"{out}/big.rgb", "wb").write(planes(big))
