#!/usr/bin/python3
"""nnlab against PyTorch layer by layer: where a training step's time goes on each side, as a
benchmark (meson test does not run it).

For one model, alternating the two RUNS times each: PyTorch trains --steps steps of one batch
under torch.profiler (torch_reference.py --layers), nnlab runs `nnlab bench --layers` (thread
0's wall time per step in each layer), and the script prints, for each convolution shape and
each activation shape, the milliseconds per step of the forward and backward on both sides
(medians of the runs) and their ratio, PyTorch over nnlab. A convolution is keyed by its input
(channels, plane), filters and window, so equal shapes are summed together (ResNet-18's layer1
holds four); "bn C,H,W" sums the batchnorms of that shape with the ReLUs and adds that read
them, which nnlab runs inside the batchnorm in training. Both sides' times are wall times of a
whole step: PyTorch's on the batch with its threads inside each operation, nnlab's on thread 0,
which runs every layer on its shard while the other threads run theirs.

  tests/bench/compare_layers.py --model resnet8 --batch 32 --threads 2
  tests/bench/compare_layers.py --model resnet18 --batch 32 --threads 2 --steps 10

Models: lenet, resnet8 and mobilenet-tiny on Fashion-MNIST, resnet18 (torchvision's, nnlab's
resnet18-64) on random 3x64x64 inputs. Needs /usr/bin/python3 with python3-torch.
"""
import argparse, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit("compare_layers: %s failed (%d):\n%s" % (" ".join(cmd), p.returncode, p.stderr))
    return p.stdout.splitlines()


def torch_groups(a):
    out = run([sys.executable, os.path.join(HERE, "torch_reference.py"), "--model", a.model,
               "--threads", str(a.threads), "--batch", str(a.batch), "--layers", str(a.steps),
               "--warmup", str(a.warmup)])
    r = json.loads(out[-1])
    return r["step_ms"], {g["key"]: (g["forward_ms"], g["backward_ms"]) for g in r["groups"]}


def dims(text):
    return [int(v) for v in text.split("x")]


def nnlab_groups(a):
    model = "resnet18-64" if a.model == "resnet18" else a.model
    out = run([a.nnlab, "--db", a.db, "--json", "bench", "--model", model, "--batch",
               str(a.batch), "--threads", str(a.threads), "--steps", str(a.steps), "--warmup",
               str(a.warmup), "--mode", "train", "--layers"])
    r = [json.loads(l) for l in out if '"bench_layers"' in l][-1]
    groups, count = {}, {}
    for l in r["layers"]:
        c, h, w = dims(l["in"])
        if l["kind"] == "conv":
            f = dims(l["out"])[0]
            key = "conv %d,%d,%d>%d,%s" % (c, h, w, f, l["window"])
        elif l["kind"] in ("batchnorm", "relu", "add"):
            key = "bn %d,%d,%d" % tuple(dims(l["out"]))
        else:
            key = "other"
        fw, bw = groups.get(key, (0.0, 0.0))
        groups[key] = (fw + l["forward_ms"], bw + l["backward_ms"])
        if l["kind"] in ("conv", "batchnorm"):
            count[key] = count.get(key, 0) + 1
    return r["step_ms"], groups, count


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="resnet8")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--nnlab", default=os.path.join(ROOT, "build", "app", "nnlab"))
    p.add_argument("--db", default="/tmp/nnlab-compare-layers.db")
    a = p.parse_args()
    tr, nr, count = [], [], {}
    for _ in range(a.runs):
        tstep, tgroups = torch_groups(a)
        step, groups, count = nnlab_groups(a)
        nr.append((step, groups))
        merged = {}  # a shape nnlab has no layer of (an optimizer's tensor) counts as other
        for k, (f, b) in tgroups.items():
            key = k if k in groups else "other"
            merged[key] = (merged.get(key, (0.0, 0.0))[0] + f, merged.get(key, (0.0, 0.0))[1] + b)
        tr.append((tstep, merged))
    keys = sorted(set(k for _, g in tr for k in g) | set(k for _, g in nr for k in g),
                  key=lambda k: (k == "other", k.split()[0], [int(v) for v in
                                 k.split()[1].replace(">", ",").replace("x", ",").split(",")]
                                 if k != "other" else []))
    med = lambda runs, k, i: statistics.median(g.get(k, (0.0, 0.0))[i] for _, g in runs)
    print("%s, batch %d, %d threads: ms per step, medians of %d alternating runs "
          "(PyTorch: the batch; nnlab: thread 0's shard)" % (a.model, a.batch, a.threads, a.runs))
    print("%-26s %3s %9s %9s %9s %9s %7s" % ("GROUP", "N", "TORCH_FWD", "TORCH_BWD", "NNLAB_FWD",
                                             "NNLAB_BWD", "RATIO"))
    sums = [0.0, 0.0]
    for k in keys:
        tf, tb, nf, nb = med(tr, k, 0), med(tr, k, 1), med(nr, k, 0), med(nr, k, 1)
        if k != "other":
            sums[0] += tf + tb
            sums[1] += nf + nb
        ratio = "%6.2fx" % ((tf + tb) / (nf + nb)) if nf + nb > 0 and tf + tb > 0 else "      -"
        print("%-26s %3s %9.3f %9.3f %9.3f %9.3f %s" % (k, count.get(k, ""), tf, tb, nf, nb, ratio))
    ts = statistics.median(s for s, _ in tr)
    ns = statistics.median(s for s, _ in nr)
    print("%-26s %3s %19.3f %19.3f %6.2fx" % ("these groups", "", sums[0], sums[1],
                                              sums[0] / sums[1] if sums[1] else 0))
    print("%-26s %3s %19.3f %19.3f %6.2fx" % ("whole step", "", ts, ns, ts / ns if ns else 0))


if __name__ == "__main__":
    main()
