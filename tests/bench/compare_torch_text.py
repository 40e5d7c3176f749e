#!/usr/bin/python3
"""nnlab against PyTorch on text models: a benchmark, not a test (meson test does not run it).

Trains embedbag and textcnn (data/models) on synthetic documents of 200 token ids from a
vocabulary of 20002 (the default --vocab 20000 with padding and out-of-vocabulary), 2 classes,
with SGD (lr 0.05, momentum 0.9) at batch 64: nnlab through `nnlab bench --json` (which makes the
same kind of documents: a quarter to all of the 200 tokens words, padding after), PyTorch with
the same layers (nn.Embedding(padding_idx=0), masked mean or max over the words, nn.Conv1d,
nn.Linear), in eval-free training mode, the same number of steps after the same warm-up. Both on
the same thread count (torch.set_num_threads). Prints samples per second of each, and the ratio
nnlab / PyTorch, RUNS times alternating, then the medians.

  tests/bench/compare_torch_text.py                       # both models, 1 thread, 3 runs
  tests/bench/compare_torch_text.py --threads 2 --runs 5
"""
import argparse, json, os, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LEN, VOCAB, CLASSES = 200, 20002, 2


def torch_ips(model, threads, batch, steps, warmup):
    import torch
    import torch.nn as nn
    torch.set_num_threads(threads)
    torch.manual_seed(1)

    def masked(x, mask, op):  # x (N, L, C)
        if op == "avg":
            m = mask.unsqueeze(-1).float()
            return (x * m).sum(1) / m.sum(1).clamp(min=1)
        return x.masked_fill(~mask.unsqueeze(-1), float("-inf")).max(1).values

    class EmbedBag(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 64, padding_idx=0)
            self.fc1, self.fc2 = nn.Linear(64, 64), nn.Linear(64, CLASSES)

        def forward(self, tok):
            return self.fc2(torch.relu(self.fc1(masked(self.embed(tok), tok != 0, "avg"))))

    class TextCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 64, padding_idx=0)
            self.conv = nn.Conv1d(64, 128, 3, padding=1)
            self.drop, self.fc = nn.Dropout(0.5), nn.Linear(128, CLASSES)

        def forward(self, tok):
            x = torch.relu(self.conv(self.embed(tok).transpose(1, 2))).transpose(1, 2)
            return self.fc(self.drop(masked(x, tok != 0, "max")))

    m = EmbedBag() if model == "embedbag" else TextCNN()
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    n = batch * 8
    g = torch.Generator().manual_seed(1)
    words = torch.randint(LEN // 4, LEN + 1, (n,), generator=g)
    u = torch.rand(n, LEN, generator=g)
    tok = (2 + (u * u * (VOCAB - 2)).long()) * (torch.arange(LEN)[None, :] < words[:, None])
    y = torch.randint(0, CLASSES, (n,), generator=g)
    loss_fn = nn.CrossEntropyLoss()
    m.train()
    t0 = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            t0 = time.perf_counter()
        j = (i % 8) * batch
        opt.zero_grad()
        loss_fn(m(tok[j:j + batch]), y[j:j + batch]).backward()
        opt.step()
    return steps * batch / (time.perf_counter() - t0)


def nnlab_ips(exe, model, threads, batch, steps, warmup):
    out = subprocess.run([exe, "--json", "bench", "--model", model, "--batch", str(batch),
                          "--threads", str(threads), "--steps", str(steps), "--warmup",
                          str(warmup)], capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["results"][0]["images_per_second"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nnlab", default=os.path.join(ROOT, "build", "app", "nnlab"))
    ap.add_argument("--models", default="embedbag,textcnn")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_only:  # the PyTorch side in a process of its own, for a clean thread setting
        for model in a.models.split(","):
            print(json.dumps({"model": model, "ips": torch_ips(model, a.threads, a.batch, a.steps,
                                                               a.warmup)}))
        return
    print("%-9s %3s %8s %12s %12s %7s" % ("MODEL", "RUN", "THREADS", "NNLAB/S", "TORCH/S", "RATIO"))
    for model in a.models.split(","):
        ratios, ours, theirs = [], [], []
        for run in range(a.runs):
            n = nnlab_ips(a.nnlab, model, a.threads, a.batch, a.steps, a.warmup)
            out = subprocess.run(["/usr/bin/python3", __file__, "--torch-only", "--models", model,
                                  "--threads", str(a.threads), "--batch", str(a.batch), "--steps",
                                  str(a.steps), "--warmup", str(a.warmup)],
                                 capture_output=True, text=True, check=True).stdout
            t = json.loads(out.strip().splitlines()[-1])["ips"]
            ours.append(n)
            theirs.append(t)
            ratios.append(n / t)
            print("%-9s %3d %8d %12.0f %12.0f %7.2f" % (model, run + 1, a.threads, n, t, n / t))
        print("%-9s %3s %8d %12.0f %12.0f %7.2f  (medians)" % (
            model, "med", a.threads, statistics.median(ours), statistics.median(theirs),
            statistics.median(ratios)))


main()
