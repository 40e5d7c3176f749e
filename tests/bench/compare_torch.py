#!/usr/bin/python3
"""nnlab against PyTorch on Fashion-MNIST: a benchmark, not a test (meson test does not run it).

Trains the same model with the same settings (batch, SGD lr 0.05 momentum 0.9 at a constant rate,
threads) for one epoch in PyTorch (torch_reference.py beside this file) and in nnlab
(`nnlab train --schedule constant`), alternating the two, RUNS times each, and prints every run,
then the medians and the ratio nnlab / PyTorch in images per second for each model and thread
count. Each run's peak resident memory comes from wait4(); "others" is the average number of
cores that other processes kept busy during the run (from /proc/stat), so a loaded machine shows.

  tests/bench/compare_torch.py                      # lenet and mlp, 1 and 2 threads, 3 runs each
  tests/bench/compare_torch.py --models lenet --threads 2 --runs 5
  tests/bench/compare_torch.py --models resnet8,mobilenet-tiny --batch 32 --threads 2

Models: lenet, mlp, resnet8 and mobilenet-tiny (data/models; torch_reference.py builds the same
layers in PyTorch, with PyTorch's own initialisation), and resnet18: torchvision's resnet18
against the same network as nnlab's shipped data/models/resnet18 (torchvision's module paths),
on RGB_TRAIN + RGB_TEST synthetic 64x64 RGB PNGs of 10 classes (noise around a colour per class)
that this script writes and nnlab imports:

  tests/bench/compare_torch.py --models resnet18 --batch 32 --threads 2

With --mode infer it compares inference instead: forward passes of random inputs in eval mode
(PyTorch under torch.no_grad(); nnlab's `bench --mode infer`, batchnorm on running statistics,
each thread a shard of the batch), at each of --batches (default 1 and 64), for lenet, resnet8,
mobilenet-tiny and resnet18 at 3x64x64 (nnlab's resnet18-64) unless --models says otherwise,
alternating PyTorch and nnlab, RUNS times each, with the ratio nnlab / PyTorch in images per
second and each side's peak resident memory:

  tests/bench/compare_torch.py --mode infer --threads 2 --runs 3
  tests/bench/compare_torch.py --mode infer --models resnet18 --side 224 --batches 1,16

--side sets resnet18's input side in inference (nnlab's resnet18-224 at 224), with as many
fewer images per run as each is larger. In training it sets the side of the synthetic PNGs
(torchvision's resnet18 and nnlab's spec both take the plane as it comes); at 224 a run trains
on RGB_TRAIN_224 = 256 images and tests on RGB_TEST_224 = 64 (on 2 cores about 40 s for
PyTorch's epoch, 20 s for nnlab's), the PNGs written and imported once:

  tests/bench/compare_torch.py --models resnet18 --side 224 --batch 32 --threads 2

PyTorch must import in some Python: /usr/bin/python3 (Debian's python3-torch) is tried first,
then --python, then python3 on PATH.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
RGB_TRAIN, RGB_TEST, RGB_SIDE = 640, 160, 64
RGB_TRAIN_224, RGB_TEST_224 = 256, 64  # training at --side 224: a run under 2 minutes
ROOT = os.path.dirname(os.path.dirname(HERE))


def find_torch_python(extra):
    tried = []
    for py in [extra, "/usr/bin/python3", shutil.which("python3")]:
        if not py or py in tried:
            continue
        tried.append(py)
        try:
            ok = subprocess.run([py, "-c", "import torch, numpy"], capture_output=True).returncode == 0
        except OSError:
            ok = False
        if ok:
            return py
    sys.exit("compare_torch: no Python that imports torch and numpy (tried %s); "
             "install python3-torch (apt-get install python3-torch) or give --python" % ", ".join(tried))


def busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4]  # all but idle and iowait


def run_measured(cmd):
    """Runs cmd; returns (stdout lines, peak RSS MB, cores kept busy by other processes)."""
    hz = os.sysconf("SC_CLK_TCK")
    b0, t0 = busy_jiffies(), time.monotonic()
    with tempfile.TemporaryFile() as errf:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf)
        out = p.stdout.read().decode()
        _, status, ru = os.wait4(p.pid, 0)
        errf.seek(0)
        err = errf.read().decode(errors="replace")
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    busy = (busy_jiffies() - b0) / hz
    if p.returncode != 0:
        sys.exit("compare_torch: %s failed (%d):\n%s" % (" ".join(cmd), p.returncode, err))
    own = ru.ru_utime + ru.ru_stime
    others = max(0.0, busy - own) / wall if wall > 0 else 0.0
    return out.splitlines(), ru.ru_maxrss / 1024.0, others


def rgb_counts(side):
    """(train, test) images of the synthetic set at this side: fewer where the plane is large."""
    if side == RGB_SIDE:
        return RGB_TRAIN, RGB_TEST
    if side == 224:
        return RGB_TRAIN_224, RGB_TEST_224
    scale = (RGB_SIDE * RGB_SIDE) / float(side * side)
    return max(64, int(RGB_TRAIN * scale) // 32 * 32), max(32, int(RGB_TEST * scale) // 32 * 32)


def write_rgb_pngs(folder, side):
    """rgb_counts(side) SIDExSIDE RGB PNGs in folder/{train,test}/CLASS/, 10 classes."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(1)
    colours = rng.integers(40, 216, size=(10, 3))
    for split, n in zip(("train", "test"), rgb_counts(side)):
        for i in range(n):
            k = i % 10
            img = np.clip(colours[k] + rng.normal(0, 40, size=(side, side, 3)), 0, 255)
            d = os.path.join(folder, split, "c%d" % k)
            os.makedirs(d, exist_ok=True)
            Image.fromarray(img.astype(np.uint8), "RGB").save(os.path.join(d, "%04d.png" % i))


def torch_run(py, model, threads, batch, png):
    cmd = [py, os.path.join(HERE, "torch_reference.py"), "--model", model, "--threads", str(threads),
           "--batch", str(batch), "--epochs", "1"]
    lines, rss, others = run_measured(cmd + (["--png", png] if model == "resnet18" else []))
    r = json.loads(lines[-1])
    return {"ips": r["images_per_second"], "seconds": r["train_seconds"],
            "acc": r["test_accuracy"], "rss": rss, "others": others}


def nnlab_run(exe, db, model, threads, batch):
    data = "rgb64" if model == "resnet18" else "fashion"
    lines, rss, others = run_measured([exe, "--db", db, "--json", "train", "--data", data,
                                       "--model", model,
                                       "--epochs", "1", "--batch", str(batch),
                                       "--threads", str(threads), "--optim", "sgd", "--lr", "0.05",
                                       "--momentum", "0.9", "--schedule", "constant", "--seed", "1"])
    events = [json.loads(l) for l in lines if l.startswith("{")]
    epoch = [e for e in events if e.get("event") == "epoch"][-1]
    done = [e for e in events if e.get("event") == "done"][-1]
    return {"ips": epoch["images_per_second"], "seconds": epoch["train_seconds"],
            "acc": done["test_accuracy"], "rss": rss, "others": others}


# Images per timed inference run, per model (steps = images / batch, at least 10): a run of a
# few seconds on a 2-core machine; PyTorch stops after 10 s (on a loaded machine its threads can
# wait on one another for a long time at batch 1).
INFER_IMAGES = {"lenet": 3200, "mlp": 3200, "resnet8": 1280, "mobilenet-tiny": 1280,
                "resnet18": 256}


def infer_steps(model, batch, side=RGB_SIDE):
    images = INFER_IMAGES.get(model, 1280)
    if model == "resnet18":  # the same work at any side: fewer images of a larger plane
        images = images * RGB_SIDE * RGB_SIDE // (side * side)
    return max(10, images // batch)


def torch_infer(py, model, threads, batch, side):
    cmd = [py, os.path.join(HERE, "torch_reference.py"), "--model", model, "--threads",
           str(threads), "--batch", str(batch), "--infer", str(infer_steps(model, batch, side)),
           "--side", str(side)]
    lines, rss, others = run_measured(cmd)
    r = json.loads(lines[-1])
    return {"ips": r["images_per_second"], "seconds": r["seconds"], "rss": rss, "others": others}


def nnlab_infer(exe, db, model, threads, batch, side):
    name = "resnet18-%d" % side if model == "resnet18" else model
    lines, rss, others = run_measured([exe, "--db", db, "--json", "bench", "--model", name,
                                       "--mode", "infer", "--batch", str(batch), "--threads",
                                       str(threads), "--steps", str(infer_steps(model, batch, side)),
                                       "--warmup", "3"])
    r = [json.loads(l) for l in lines if l.startswith("{")][-1]["results"][-1]
    return {"ips": r["images_per_second"], "seconds": r["seconds"], "rss": r["peak_rss_mb"],
            "others": others}


def main_infer(a, py):
    models = (a.models or "lenet,resnet8,mobilenet-tiny,resnet18").split(",")
    threads = [int(t) for t in a.threads.split(",")]
    batches = [int(b) for b in a.batches.split(",")]
    tmp = tempfile.mkdtemp(prefix="nnlab-compare-")
    db = os.path.join(tmp, "bench.db")
    results = {}
    try:
        subprocess.run([a.nnlab, "--db", db, "--quiet", "import", "fashion", a.data_dir], check=True,
                       stdout=subprocess.DEVNULL)
        print("machine: %s; load average %.2f %.2f %.2f; torch from %s" %
              ((machine(),) + os.getloadavg() + (py,)), flush=True)
        print("%-15s %-6s %3s %5s %4s %10s %8s %7s" %
              ("MODEL", "WHO", "T", "BATCH", "#", "IMAGES/S", "RSS_MB", "OTHERS"), flush=True)
        for model in models:
            for t in threads:
                for b in batches:
                    for i in range(a.runs):
                        for who in ("torch", "nnlab"):
                            r = (torch_infer(py, model, t, b, a.side) if who == "torch"
                                 else nnlab_infer(a.nnlab, db, model, t, b, a.side))
                            results.setdefault((model, t, b, who), []).append(r)
                            print("%-15s %-6s %3d %5d %4d %10.0f %8.0f %7.2f" %
                                  (model, who, t, b, i + 1, r["ips"], r["rss"], r["others"]),
                                  flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    summary = []
    print("\ninference, medians of %d alternating runs (eval mode, random inputs)" % a.runs)
    print("%-15s %3s %5s %12s %12s %7s %9s %9s" % ("MODEL", "T", "BATCH", "TORCH_IMG/S",
          "NNLAB_IMG/S", "RATIO", "TORCH_MB", "NNLAB_MB"))
    for model in models:
        for t in threads:
            for b in batches:
                tr, nr = results[(model, t, b, "torch")], results[(model, t, b, "nnlab")]
                row = {"model": model, "threads": t, "batch": b, "runs": a.runs, "mode": "infer",
                       "torch_images_per_second": med(tr, "ips"),
                       "nnlab_images_per_second": med(nr, "ips"),
                       "torch_peak_rss_mb": med(tr, "rss"), "nnlab_peak_rss_mb": med(nr, "rss"),
                       "others_cores": statistics.mean(r["others"] for r in tr + nr)}
                row["ratio"] = row["nnlab_images_per_second"] / row["torch_images_per_second"]
                summary.append(row)
                print("%-15s %3d %5d %12.0f %12.0f %6.2fx %9.0f %9.0f" %
                      (model, t, b, row["torch_images_per_second"], row["nnlab_images_per_second"],
                       row["ratio"], row["torch_peak_rss_mb"], row["nnlab_peak_rss_mb"]))
    print("average cores kept busy by other processes during the runs: %.2f" %
          statistics.mean(r["others"] for rs in results.values() for r in rs))
    if a.json:
        print(json.dumps({"machine": machine(), "summary": summary}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nnlab", default=os.path.join(ROOT, "build", "app", "nnlab"))
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--python", help="a Python that imports torch")
    ap.add_argument("--models", default=None,
                    help="default: lenet,mlp to train, lenet,resnet8,mobilenet-tiny,resnet18 to infer")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    ap.add_argument("--mode", choices=("train", "infer"), default="train")
    ap.add_argument("--batches", default="1,64", help="with --mode infer: the batch sizes")
    ap.add_argument("--side", type=int, default=RGB_SIDE,
                    help="resnet18's input side (64: 3x64x64; 224: ImageNet's): in inference the "
                    "random inputs', in training the synthetic PNGs' (%d train and %d test images "
                    "at 64, %d and %d at 224)" % (RGB_TRAIN, RGB_TEST, RGB_TRAIN_224,
                                                  RGB_TEST_224))
    a = ap.parse_args()
    if a.side < 32:
        sys.exit("compare_torch: --side %d is too small for resnet18 (at least 32)" % a.side)
    if not os.access(a.nnlab, os.X_OK):
        sys.exit("compare_torch: %s is not an executable; build nnlab first (meson setup build && "
                 "ninja -C build) or give --nnlab" % a.nnlab)
    py = find_torch_python(a.python)
    if a.models is None and a.mode == "train":
        a.models = "lenet,mlp"
    if a.mode == "train" and "resnet18" in a.models.split(",") and os.path.realpath(py) != \
            os.path.realpath(sys.executable):
        try:
            import numpy, PIL  # noqa: F401 -- write_rgb_pngs needs them in this Python
        except ImportError:  # run as `python3 compare_torch.py` by a Python without them
            os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])
    if a.mode == "infer":
        return main_infer(a, py)
    models = a.models.split(",")
    threads = [int(t) for t in a.threads.split(",")]

    tmp = tempfile.mkdtemp(prefix="nnlab-compare-")
    db = os.path.join(tmp, "bench.db")
    try:
        subprocess.run([a.nnlab, "--db", db, "--quiet", "import", "fashion", a.data_dir], check=True,
                       stdout=subprocess.DEVNULL)
        png = os.path.join(tmp, "rgb64")
        if "resnet18" in models:
            write_rgb_pngs(png, a.side)
            subprocess.run([a.nnlab, "--db", db, "--quiet", "import", "rgb64", png, "--rgb"],
                           check=True, stdout=subprocess.DEVNULL)
        print("machine: %s; load average %.2f %.2f %.2f; torch from %s" %
              ((machine(),) + os.getloadavg() + (py,)), flush=True)
        mw = max([6] + [len(m) for m in models])  # the model column fits the longest name
        print("%-*s %-6s %3s %4s %10s %8s %7s %8s %7s" %
              (mw, "RUN", "WHO", "T", "#", "IMAGES/S", "SECONDS", "TEST", "RSS_MB", "OTHERS"),
              flush=True)
        results = {}
        for model in models:
            for t in threads:
                for i in range(a.runs):
                    for who in ("torch", "nnlab"):
                        r = (torch_run(py, model, t, a.batch, png) if who == "torch"
                             else nnlab_run(a.nnlab, db, model, t, a.batch))
                        results.setdefault((model, t, who), []).append(r)
                        print("%-*s %-6s %3d %4d %10.0f %8.2f %7.4f %8.0f %7.2f" %
                              (mw, model, who, t, i + 1, r["ips"], r["seconds"], r["acc"], r["rss"],
                               r["others"]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = lambda rs, k: statistics.median(r[k] for r in rs)
    summary = []
    print("\nmedians of %d alternating runs, batch %d, SGD lr 0.05 momentum 0.9 constant, 1 epoch%s" %
          (a.runs, a.batch, ", resnet18 on 3x%dx%d" % (a.side, a.side)
           if "resnet18" in models and a.side != RGB_SIDE else ""))
    print("%-*s %3s %12s %12s %7s %10s %10s %9s %9s" % (mw, "MODEL", "T", "TORCH_IMG/S", "NNLAB_IMG/S",
          "RATIO", "TORCH_ACC", "NNLAB_ACC", "TORCH_MB", "NNLAB_MB"))
    for model in models:
        for t in threads:
            tr, nr = results[(model, t, "torch")], results[(model, t, "nnlab")]
            row = {"model": model, "threads": t, "batch": a.batch, "runs": a.runs,
                   "torch_images_per_second": med(tr, "ips"), "nnlab_images_per_second": med(nr, "ips"),
                   "torch_test_accuracy": med(tr, "acc"), "nnlab_test_accuracy": med(nr, "acc"),
                   "torch_peak_rss_mb": med(tr, "rss"), "nnlab_peak_rss_mb": med(nr, "rss"),
                   "others_cores": statistics.mean(r["others"] for r in tr + nr)}
            row["ratio"] = row["nnlab_images_per_second"] / row["torch_images_per_second"]
            summary.append(row)
            print("%-*s %3d %12.0f %12.0f %6.2fx %10.4f %10.4f %9.0f %9.0f" %
                  (mw, model, t, row["torch_images_per_second"], row["nnlab_images_per_second"],
                   row["ratio"], row["torch_test_accuracy"], row["nnlab_test_accuracy"],
                   row["torch_peak_rss_mb"], row["nnlab_peak_rss_mb"]))
    for model in models:
        if 1 in threads and len(threads) > 1:
            hi = max(threads)
            n1 = med(results[(model, 1, "nnlab")], "ips")
            nh = med(results[(model, hi, "nnlab")], "ips")
            print("nnlab %s: %d threads are %.2fx faster than 1" % (model, hi, nh / n1))
    print("average cores kept busy by other processes during the runs: %.2f" %
          statistics.mean(r["others"] for rs in results.values() for r in rs))
    if a.json:
        print(json.dumps({"machine": machine(), "summary": summary}))


def machine():
    name = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s, %d cores" % (name, os.cpu_count() or 1)


if __name__ == "__main__":
    main()
