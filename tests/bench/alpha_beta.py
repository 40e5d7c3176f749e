#!/usr/bin/python3
"""Fits the alpha-beta model of a synchronous sliced exchange to tests/bench/netns_cluster.py's
rows and projects the scaling efficiency to larger clusters (a benchmark tool, not a test).

Model, per step and worker, with N workers, P trainable bytes (fp32; half with bf16) and links
of R bytes/s:

    step(N) = C + X(N),   X(N) = 2(N-1) * alpha + 2(N-1)/N * P * beta,   beta = 1 / (eta * R)

C is the compute per step (each worker's backward pass and the rest of its step), alpha the cost
of one message (latency and per-message work; each worker sends N-1 slices in the shuffle and
N-1 in the broadcast), eta the share of the link rate the exchange reaches. The fit takes the
rows with --overlap off (their communication seconds are the exchange's whole cost) and solves
for alpha and 1/eta by least squares over

    comm_s = alpha * 2(N-1) + (1/eta) * bytes_per_step / R

(bytes_per_step is what a worker sent, measured: 2(N-1)/N of the parameter bytes and framing).
Where the rows' link applied a delay (delay_us_applied), alpha cannot be below it: a fit that
puts alpha lower is printed, then redone with alpha held at the median delay applied (1/eta and
kappa fitted), and the projection uses the second. C is the mean compute per step of each
model's rows. The projection keeps each worker's share of the batch (weak scaling), so the
efficiency is C / step(N): the share of a step spent computing.

    tests/bench/alpha_beta.py netbench.jsonl [--nodes 8,32,128] [--gbits 10,100] [--alpha-ms A]
                              [--rate asked|measured]

R is the rate each row's link reached (rate_measured_mbit: one TCP stream measured before the
runs at that setting) where the row has it, so eta is the share of what the link really carried,
not of a rate the shaping asked for and a userspace link could not reach; --rate asked uses
rate_mbit. Rows from --link tap also carry the delay the link applied (delay_us_applied) and
ping's round trip; the script prints them beside the fitted alpha, which they bound from below.

On one machine whose members share busy cores, a worker also waits for peers that are not
scheduled; that lands in alpha, which is then far above a network's latency. --alpha-ms
projects with another alpha (a real network's, say) beside the fitted one.
"""
import argparse
import json
import sys


def solve(a, b):
    """x with a x = b (Gauss-Jordan with partial pivoting); None when a is singular."""
    n = len(b)
    m = [a[i][:] + [b[i]] for i in range(n)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


RATE_KEY = ["rate_measured_mbit"]


def rate_of(r):
    """The link rate of a row, Mbit/s: the measured one where asked for and present."""
    return r.get(RATE_KEY[0]) or r["rate_mbit"]


def features(r):
    """The regressors of a row: messages, ideal wire seconds, compute seconds."""
    return [2.0 * (r["members"] - 1), r["bytes_per_step"] / (rate_of(r) * 1e6 / 8.0),
            r["compute_s"]]


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def fit(rows, alpha=None):
    """alpha (s), 1/eta and kappa from least squares on rows with overlap off; with alpha given,
    only 1/eta and kappa (alpha held there)."""
    x = [features(r) for r in rows]
    y = [r["comm_s"] for r in rows]
    first = 0
    if alpha is not None:
        y = [c - alpha * v[0] for v, c in zip(x, y)]
        first = 1
    n = 3 - first
    a = [[sum(v[first + i] * v[first + j] for v in x) for j in range(n)] for i in range(n)]
    b = [sum(v[first + i] * c for v, c in zip(x, y)) for i in range(n)]
    k = solve(a, b)
    if k is None:
        sys.exit("alpha_beta: the rows do not tell the terms apart (one member count, one rate "
                 "and one model?)")
    return k if alpha is None else [alpha] + k


def say_fit(what, nrows, alpha, inv_eta, kappa):
    print("%s on %d rows (overlap off): alpha = %.3g ms per message, eta = %.3g (the exchange "
          "reaches %.0f%% of the link rate; beta = 1/(eta R): %.3g ns/byte at 1 Gbit/s, %.3g at "
          "10), kappa = %.3g (waiting for peers that share the cores)" %
          (what, nrows, 1e3 * alpha, 1 / inv_eta, 100 / inv_eta, 1e9 * inv_eta * 8 / 1e9,
           1e9 * inv_eta * 8 / 1e10, kappa))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", help="netns_cluster.py's --out file")
    ap.add_argument("--nodes", default="8,32,128")
    ap.add_argument("--gbits", default="10,100")
    ap.add_argument("--alpha-ms", type=float, default=None, help="also project with this alpha "
                    "(ms per message) in place of the fitted one, keeping the fitted eta")
    ap.add_argument("--rate", choices=("measured", "asked"), default="measured",
                    help="the link rate R of a row: the one measured (where the row has it) or "
                    "the one asked")
    a = ap.parse_args()
    if a.rate == "asked":
        RATE_KEY[0] = "rate_mbit"
    rows = [json.loads(l) for l in open(a.rows) if l.strip()]
    off = [r for r in rows if r["overlap"] == "off"]
    if not off:
        sys.exit("alpha_beta: no rows with overlap off in %s" % a.rows)
    alpha, inv_eta, kappa = fit(off)
    links = sorted({r.get("link", "veth") for r in rows})
    asked = sorted({r.get("delay_us_asked", 1e3 * r.get("delay_ms", 0.0)) for r in rows})
    applied = [r["delay_us_applied"]["p50"] for r in rows if r.get("delay_us_applied")]
    p99 = [r["delay_us_applied"]["p99"] for r in rows if r.get("delay_us_applied")]
    print("links: %s; one-way delay asked %s us%s" %
          (",".join(links), ",".join("%g" % d for d in asked),
           "; applied to the runs' frames: median over the rows of each run's median %g us "
           "(%g to %g), of its p99 %g us" % (median(applied), min(applied), max(applied),
                                             median(p99)) if applied else ""))
    for rate in sorted({r["rate_mbit"] for r in rows}):
        got = [r["rate_measured_mbit"] for r in rows
               if r["rate_mbit"] == rate and r.get("rate_measured_mbit")]
        rtt = [r["ping_rtt_ms"]["avg"] for r in rows
               if r["rate_mbit"] == rate and r.get("ping_rtt_ms")]
        if got:
            print("link at %g Gbit/s asked: one TCP stream reached %.0f Mbit/s, ping RTT avg "
                  "%.3f ms%s" % (rate / 1000, got[0], rtt[0] if rtt else float("nan"),
                                 "" if a.rate == "measured" else " (the fit uses the rate asked)"))
    say_fit("fit", len(off), alpha, inv_eta, kappa)
    # A message costs at least the link's one-way delay: a fit below it is held there.
    floor = median(applied) / 1e6 if applied else 0.0
    if alpha < floor:
        alpha, inv_eta, kappa = fit(off, floor)
        say_fit("alpha below the delay the link applied (%.3g ms): held there, fit" %
                (1e3 * floor), len(off), alpha, inv_eta, kappa)
    print("%-8s %2s %6s %5s %9s %9s %9s" % ("model", "N", "Gbit/s", "wire", "comm_ms",
                                              "model_ms", "resid_ms"))
    for r in off:
        f = features(r)
        pred = alpha * f[0] + inv_eta * f[1] + kappa * f[2]
        print("%-8s %2d %6g %5s %9.1f %9.1f %+9.1f" % (r["model"], r["members"],
                                                         r["rate_mbit"] / 1000,
                                                         "bf16" if r["compress"] == "bf16"
                                                         else "fp32", 1e3 * r["comm_s"],
                                                         1e3 * pred,
                                                         1e3 * (r["comm_s"] - pred)))
    models = []
    for r in off:
        if r["model"] not in models:
            models.append(r["model"])
    nodes = [int(x) for x in a.nodes.split(",")]
    gbits = [float(x) for x in a.gbits.split(",")]
    alphas = [("held" if alpha == floor else "fitted", alpha)]
    if a.alpha_ms is not None:
        alphas.append(("given", a.alpha_ms / 1e3))
    for label, al in alphas:
        project(off, models, nodes, gbits, label, al, inv_eta)
    return 0


def project(off, models, nodes, gbits, label, alpha, inv_eta):
    print("projected scaling efficiency, C / (C + X(N)), fp32 exchange, synchronous, %s alpha "
          "%.3g ms, eta %.3g:" % (label, 1e3 * alpha, 1 / inv_eta))
    print("%-8s %9s %11s %6s  %s" % ("model", "C_ms", "P_MB", "Gbit/s",
                                     "  ".join("N=%-5d" % n for n in nodes)))
    for m in models:
        mr = [r for r in off if r["model"] == m]
        c = sum(r["compute_s"] for r in mr) / len(mr)
        fp = [r for r in mr if r["compress"] != "bf16"]
        # Parameter bytes from what a worker sent: 2(N-1)/N of them (framing included).
        p = sum(r["bytes_per_step"] * r["members"] / (2.0 * (r["members"] - 1))
                for r in fp) / max(1, len(fp))
        for g in gbits:
            eff = []
            for n in nodes:
                x = 2 * (n - 1) * alpha + 2.0 * (n - 1) / n * p * inv_eta / (g * 1e9 / 8)
                eff.append(c / (c + x))
            print("%-8s %9.1f %11.2f %6g  %s" % (m, 1e3 * c, p / 1e6, g,
                                                  "  ".join("%-7.2f" % e for e in eff)))


if __name__ == "__main__":
    sys.exit(main())
