#!/usr/bin/python3
"""Checks an ONNX file that `nnlab export` wrote, for test_onnx (Debian's python3-onnx and
python3-opencv).

  onnx_check.py tree DIR                 writes a small RGB PNG class tree (3 classes of 12
                                         32x32 images: coloured shapes on noise)
  onnx_check.py crops SRC DIR SIZE N    the first N photos (JPEG or PNG) of each class folder
                                         of SRC as nnlab imports them with --resize
                                         shorter:SIZE,center-crop:SIZExSIZE (EXIF orientation,
                                         Pillow's bilinear resize, torchvision's centre crop),
                                         written as PNGs under DIR/CLASS/, so that nnlab predict
                                         and cv2.dnn see the same pixels
  onnx_check.py images RESULTS FILE.onnx PREDICT.json [FILE.onnx PREDICT.json ...]
                                         runs every image that `nnlab --json predict` classified
                                         through cv2.dnn and compares; writes one line per model
                                         to RESULTS, "ok" or "not ok" (one process for all, as
                                         importing onnx and cv2 takes a second)
  onnx_check.py raw FILE.onnx INPUT.f32 C H W PROBS.f32
                                         runs a raw float32 batch (pixel values) and compares
                                         with the probabilities nnlab computed
  onnx_check.py table FILE.onnx ROWS.csv PREDICT.json
                                         a regression model: runs the rows of a CSV of numeric
                                         features (a header, the target last) through cv2.dnn and
                                         compares its "prediction" output with the values of
                                         `nnlab --json predict RUN --csv ROWS.csv`, within 1e-4
                                         of the target's scale

Every mode but tree first runs onnx.checker.check_model (full) and strict shape inference and
checks that the inferred outputs are [batch, classes]. Comparisons: the same top-1 class and
every probability within 1e-4. Prints '# ' diagnostics (TAP comments) and exits 1 on failure."""
import json
import os
import sys

import numpy as np

TOL = 1e-4


def check_model(path, output="probabilities"):
    import onnx
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    shapes = {}
    for v in inferred.graph.output:
        shapes[v.name] = [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
    print("# %s: checker and strict shape inference pass; outputs %s" % (
        os.path.basename(path), shapes))
    probs = shapes.get(output)
    if not probs or len(probs) != 2 or probs[0] != "batch":
        print("# unexpected output shape %s" % probs)
        return False
    return True


def run(path, batch, output="probabilities"):
    import cv2
    net = cv2.dnn.readNetFromONNX(path)
    net.setInput(batch)
    return net.forward(output)


def compare(got, want, what):
    worst = float(np.abs(got - want).max())
    same_top = bool((got.argmax(axis=1) == want.argmax(axis=1)).all())
    print("# %s: %d samples, top-1 %s, max probability difference %.3g (probabilities "
          "%.3g to %.3g)" % (what, got.shape[0], "the same" if same_top else "DIFFERS", worst,
                             float(want.min()), float(want.max())))
    return same_top and worst <= TOL


def tree(out):
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(3)
    colours = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (50, 60, 230)}
    for k, (name, colour) in enumerate(sorted(colours.items())):
        os.makedirs(os.path.join(out, name), exist_ok=True)
        for i in range(12):
            noise = rng.integers(0, 120, size=(32, 32, 3), dtype=np.uint8)
            img = Image.fromarray(noise, "RGB")
            draw = ImageDraw.Draw(img)
            x, y = rng.integers(2, 14, size=2)
            s = int(rng.integers(10, 16))
            if k == 0:
                draw.ellipse([x, y, x + s, y + s], fill=colour)
            elif k == 1:
                draw.rectangle([x, y, x + s, y + s], fill=colour)
            else:
                draw.polygon([(x, y + s), (x + s, y + s), (x + s // 2, y)], fill=colour)
            img.save(os.path.join(out, name, "%02d.png" % i))


def crops(src, out, size, n):
    from PIL import Image, ImageOps
    for cls in sorted(os.listdir(src)):
        files = sorted(os.listdir(os.path.join(src, cls)))[:n]
        os.makedirs(os.path.join(out, cls), exist_ok=True)
        for name in files:
            img = ImageOps.exif_transpose(Image.open(os.path.join(src, cls, name))).convert("RGB")
            w, h = img.size
            if w <= h:
                rw, rh = size, int(size * h / w)
            else:
                rw, rh = int(size * w / h), size
            img = img.resize((rw, rh), Image.BILINEAR)
            x, y = round((rw - size) / 2), round((rh - size) / 2)
            img.crop((x, y, x + size, y + size)).save(
                os.path.join(out, cls, os.path.splitext(name)[0] + ".png"))


def images(path, predict_json):
    from PIL import Image
    with open(predict_json) as f:
        pred = json.load(f)["predictions"]
    batch, want = [], []
    for p in pred:
        img = np.asarray(Image.open(p["file"]).convert("RGB"), dtype=np.float32)
        batch.append(img.transpose(2, 0, 1))
        row = np.zeros(len(p["top"]), dtype=np.float32)
        for t in p["top"]:
            row[t["label"]] = t["probability"]
        want.append(row)
    got = run(path, np.stack(batch))
    return compare(got, np.stack(want), "cv2.dnn against nnlab predict")


def raw(path, inp, c, h, w, probs):
    x = np.fromfile(inp, dtype="<f4").reshape(-1, c, h, w)
    want = np.fromfile(probs, dtype="<f4").reshape(x.shape[0], -1)
    return compare(run(path, x), want, "cv2.dnn against nnlab's forward pass")


def table(path, rows_csv, predict_json):
    rows = np.loadtxt(rows_csv, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
    x = rows[:, :-1].astype(np.float32).reshape(rows.shape[0], -1, 1, 1)
    with open(predict_json) as f:
        want = np.array([p["value"] for p in json.load(f)["predictions"]], dtype=np.float64)
    got = run(path, x, "prediction").reshape(-1).astype(np.float64)
    if got.shape != want.shape:
        print("# %d predictions from cv2.dnn, %d from nnlab" % (got.size, want.size))
        return False
    scale = max(1.0, float(np.abs(want).max()))
    worst = float(np.abs(got - want).max())
    print("# cv2.dnn against nnlab predict --csv: %d rows, values %.4g to %.4g, max difference "
          "%.3g (tolerance %.3g)" % (got.size, float(want.min()), float(want.max()), worst,
                                    TOL * scale))
    return worst <= TOL * scale


def main():
    mode = sys.argv[1]
    if mode == "tree":
        tree(sys.argv[2])
        return 0
    if mode == "crops":
        crops(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return 0
    if mode == "images":
        results = []
        for onnx_path, predict_json in zip(sys.argv[3::2], sys.argv[4::2]):
            try:
                ok = check_model(onnx_path)
                ok = images(onnx_path, predict_json) and ok
            except Exception as e:  # reported per model; the others still run
                print("# %s: %s" % (onnx_path, str(e).replace("\n", " ")[:400]))
                ok = False
            results.append("ok" if ok else "not ok")
        with open(sys.argv[2], "w") as f:
            f.write("\n".join(results) + "\n")
        return 0 if all(r == "ok" for r in results) else 1
    if mode == "table":
        ok = check_model(sys.argv[2], "prediction")
        return 0 if table(sys.argv[2], sys.argv[3], sys.argv[4]) and ok else 1
    ok = check_model(sys.argv[2])
    if True:
        a = sys.argv
        ok = raw(a[2], a[3], int(a[4]), int(a[5]), int(a[6]), a[7]) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
