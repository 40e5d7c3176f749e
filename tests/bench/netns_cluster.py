#!/usr/bin/python3
"""SSH-mode cluster runs between network namespaces joined by shaped links (a benchmark, not a
test; needs root, iproute2's ip and tc, and openssh-server).

Layout: a switch namespace NETBENCH-sw holds bridge br0; each member host K is a namespace
NETBENCH-hK with its own sshd on 10.214.S.1K:22 and one veth pair into the bridge; the driver
(this namespace) reaches the bridge over a veth of its own at 10.214.S.1. Every host link is
shaped in both directions with tc: a token bucket (tbf) at the given rate on the host's end
(egress from the host) and on the bridge's end (egress toward it), so host-to-host traffic
crosses two shapers at the same rate. Where the kernel has sch_netem, netem adds the one-way
delay (--delay-ms) on both ends as well; where it has not (the kernel reports "Specified qdisc
kind is unknown"), the links carry no added delay and every output line says so.

For each model, member count, link rate, transport (SSH workers, and MPI ranks under Open MPI's
mpirun, whose rsh agent enters each host's namespace and whose TCP transport is kept to the
bridge's subnet), --compress none/bf16 and --overlap off/on it trains
2 epochs on synthetic data (lenet: 28x28 gray IDX; resnet18: the shipped spec on 3x64x64 RGB
PNGs) and reports, from the second epoch (the first holds start-up and the binary's upload):
the step time (the mean of the workers' compute plus communication seconds per step), the
communication share, the bytes each worker sent per step, and for overlap on, how much of the
synchronous wait it hid (1 - wait_on / wait_off). Every row is also one JSON line in --out, which
tests/bench/alpha_beta.py reads. On one machine the members share its cores: the links are
shaped like real ones, the CPUs are not.

Every namespace, link, process and file made here is removed at the end, also on Ctrl-C.
"""
import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib

TAG = "netbench%d" % (os.getpid() % 100000)


def sh(cmd, check=True):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (cmd, r.stderr.strip()))
    return r


def png_rgb(path, w, h, rows):
    """A w x h RGB PNG from rows (h byte strings of 3w bytes)."""
    raw = b"".join(b"\x00" + r for r in rows)

    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 1)))
        f.write(chunk(b"IEND", b""))


def write_data(root, n28, n64):
    """gray: 28x28 IDX of 10 classes; rgb: 64x64 PNGs of 4 classes, each class a tint."""
    r = random.Random(7)
    gray = os.path.join(root, "gray")
    os.makedirs(gray)
    im, lb = bytearray(), bytearray()
    for _ in range(n28):
        k = r.randrange(10)
        im += bytes(min(255, r.randrange(60) + 19 * k) for _ in range(784))
        lb.append(k)
    with open(os.path.join(gray, "train-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n28, 28, 28) + im)
    with open(os.path.join(gray, "train-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n28) + lb)
    rgb = os.path.join(root, "rgb")
    for i in range(n64):
        k = i % 4
        d = os.path.join(rgb, "c%d" % k)
        os.makedirs(d, exist_ok=True)
        base = [(60 * k) % 256, (120 + 50 * k) % 256, (200 - 40 * k) % 256]
        rows = [bytes(min(255, base[c] + r.randrange(50)) for _ in range(64) for c in range(3))
                for _ in range(64)]
        png_rgb(os.path.join(d, "%04d.png" % i), 64, 64, rows)


class Lab:
    def __init__(self, hosts, subnet):
        self.hosts = hosts
        self.net = "10.214.%d" % subnet
        self.made = False
        self.sshd = []
        self.dir = tempfile.mkdtemp(prefix="nnlab-netbench-")
        self.netem = None

    def addr(self, k):
        return "%s.1%d" % (self.net, k)

    def up(self):
        self.made = True
        t, n = TAG, self.net
        sh(f"ip netns add {t}-sw && ip netns exec {t}-sw ip link set lo up && "
           f"ip netns exec {t}-sw ip link add br0 type bridge && "
           f"ip netns exec {t}-sw ip link set br0 up")
        sh(f"ip link add {t}d type veth peer name dD && ip link set dD netns {t}-sw && "
           f"ip netns exec {t}-sw ip link set dD master br0 up && "
           f"ip addr add {n}.1/24 dev {t}d && ip link set {t}d up")
        for k in range(1, self.hosts + 1):
            sh(f"ip netns add {t}-h{k} && ip netns exec {t}-h{k} ip link set lo up && "
               f"ip link add {t}x{k} type veth peer name b{k} && "
               f"ip link set {t}x{k} netns {t}-h{k} && ip link set b{k} netns {t}-sw && "
               f"ip netns exec {t}-h{k} ip link set {t}x{k} name eth0 && "
               f"ip netns exec {t}-sw ip link set b{k} master br0 up && "
               f"ip netns exec {t}-h{k} ip addr add {self.addr(k)}/24 dev eth0 && "
               f"ip netns exec {t}-h{k} ip link set eth0 up")
        probe = sh(f"ip netns exec {t}-h1 tc qdisc add dev eth0 root netem delay 0.1ms",
                   check=False)
        self.netem = probe.returncode == 0
        if self.netem:
            sh(f"ip netns exec {t}-h1 tc qdisc del dev eth0 root")
        self.netem_why = "" if self.netem else probe.stderr.strip()

    def shape(self, rate_mbit, delay_ms):
        """Every host link at rate_mbit each way (tbf), with delay_ms each way where netem is
        there. The bucket holds 50 us at the rate, at least 64 KiB (a GSO segment)."""
        burst = max(65536, int(rate_mbit * 1e6 / 8 * 50e-6))
        for k in range(1, self.hosts + 1):
            for ns, dev in ((f"{TAG}-h{k}", "eth0"), (f"{TAG}-sw", f"b{k}")):
                sh(f"ip netns exec {ns} tc qdisc del dev {dev} root", check=False)
                if self.netem and delay_ms > 0:
                    sh(f"ip netns exec {ns} tc qdisc add dev {dev} root handle 1: netem "
                       f"delay {delay_ms}ms && ip netns exec {ns} tc qdisc add dev {dev} "
                       f"parent 1:1 handle 10: tbf rate {rate_mbit}mbit burst {burst} "
                       f"latency 20ms")
                else:
                    sh(f"ip netns exec {ns} tc qdisc add dev {dev} root tbf rate "
                       f"{rate_mbit}mbit burst {burst} latency 20ms")

    def start_sshd(self):
        d = self.dir
        os.makedirs(os.path.join(d, "home"))
        # Open MPI's rsh agent: "HOST COMMAND..." runs COMMAND in HOST's namespace, so mpirun
        # starts its daemons there and the ranks' TCP traffic crosses the shaped links.
        with open(f"{d}/nsagent", "w") as f:
            f.write("#!/bin/sh\nh=$1; shift\ncase $h in\n" +
                    "".join(f"  {self.addr(k)}) ns={TAG}-h{k};;\n"
                            for k in range(1, self.hosts + 1)) +
                    "  *) echo \"no namespace for $h\" >&2; exit 1;;\nesac\n"
                    "exec ip netns exec \"$ns\" /bin/sh -c \"$*\"\n")
        os.chmod(f"{d}/nsagent", 0o755)
        for key in ("host_key", "user_key"):
            sh(f"ssh-keygen -q -t ed25519 -N '' -f {d}/{key}")
        shutil.copy(f"{d}/user_key.pub", f"{d}/authorized_keys")
        os.makedirs("/run/sshd", exist_ok=True)
        hostkey = open(f"{d}/host_key.pub").read().strip()
        with open(f"{d}/known_hosts", "w") as kh, open(f"{d}/ssh_config", "w") as sc:
            for k in range(1, self.hosts + 1):
                conf = f"{d}/sshd_config{k}"
                with open(conf, "w") as f:
                    f.write(f"Port 22\nListenAddress {self.addr(k)}\nHostKey {d}/host_key\n"
                            f"PidFile none\nAuthorizedKeysFile {d}/authorized_keys\n"
                            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                            "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
                            f"SetEnv HOME={d}/home\n"
                            f"Subsystem sftp /usr/lib/openssh/sftp-server -d {d}/home\n"
                            "LogLevel ERROR\n")
                log = open(f"{d}/sshd{k}.log", "w")
                self.sshd.append(subprocess.Popen(
                    ["ip", "netns", "exec", f"{TAG}-h{k}", "/usr/sbin/sshd", "-D", "-e", "-f",
                     conf], stdout=subprocess.DEVNULL, stderr=log))
                kh.write(f"{self.addr(k)} {hostkey}\n")
                sc.write(f"Host lab{k}\n    HostName {self.addr(k)}\n    User root\n"
                         f"    IdentityFile {d}/user_key\n    UserKnownHostsFile {d}/known_hosts\n")
        for k in range(1, self.hosts + 1):
            for _ in range(100):
                if sh(f"timeout 1 bash -c 'echo > /dev/tcp/{self.addr(k)}/22'",
                      check=False).returncode == 0:
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError("sshd in %s-h%d does not listen" % (TAG, k))

    def down(self):
        for p in self.sshd:
            p.terminate()
            p.wait()
        if self.made:
            for k in range(1, self.hosts + 1):
                sh(f"ip netns del {TAG}-h{k}", check=False)
            sh(f"ip netns del {TAG}-sw", check=False)
            sh(f"ip link del {TAG}d", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def epoch_lines(text):
    return [json.loads(l) for l in text.splitlines()
            if l.startswith("{") and '"event":"epoch"' in l]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nnlab", default="build/app/nnlab")
    ap.add_argument("--models", default="lenet,resnet18")
    ap.add_argument("--members", default="2,3")
    ap.add_argument("--rates", default="1000,10000", help="link rates, Mbit/s")
    ap.add_argument("--delay-ms", type=float, default=0.1, help="one-way, where netem exists")
    ap.add_argument("--compress", default="none,bf16")
    ap.add_argument("--overlap", default="off,on")
    ap.add_argument("--threads", type=int, default=1, help="per worker")
    ap.add_argument("--batch", type=int, default=0, help="global (default 64 x members for "
                    "lenet, 16 x members for resnet18)")
    ap.add_argument("--out", default="netbench.jsonl", help="one JSON line per row")
    ap.add_argument("--heartbeat-timeout", type=float, default=60, help="seconds (the runs' "
                    "--heartbeat-timeout: a large model's step on a slow link is long)")
    ap.add_argument("--transports", default="ssh,mpi", help="mpi: Open MPI's mpirun with an rsh "
                    "agent that enters each host's namespace (skipped without mpirun or an nnlab "
                    "built with MPI)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("netns_cluster: needs root (ip netns, tc)")
    nnlab = os.path.abspath(a.nnlab)
    members = [int(x) for x in a.members.split(",")]
    lab = Lab(max(members), os.getpid() % 250)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    rows = []
    failed = 0
    try:
        lab.up()
        lab.start_sshd()
        db = f"{lab.dir}/db"
        base = ["env", "-u", "SSH_AUTH_SOCK", nnlab, "--db", db]
        # Epochs of 16 steps (lenet) and 4 (resnet18) on the most members, more on fewer.
        write_data(lab.dir, 64 * max(members) * 16, 16 * max(members) * 4)
        sh(" ".join(base) + f" import gray {lab.dir}/gray >/dev/null")
        sh(" ".join(base) + f" import rgb {lab.dir}/rgb >/dev/null")
        transports = a.transports.split(",")
        if "mpi" in transports and (shutil.which("mpirun") is None or "--mpi" not in sh(
                f"{nnlab} train --help").stdout):
            print("# mpi rows skipped: no mpirun, or this nnlab has no MPI mode")
            transports.remove("mpi")
        delay = "%.3g ms delay" % a.delay_ms if lab.netem else \
            "no added delay (no netem: %s)" % lab.netem_why
        load = open("/proc/loadavg").read().split()[:3]
        print("# %s; %d thread(s) per worker; load average %s at the start; %s UTC" %
              (delay, a.threads, " ".join(load), time.strftime("%Y-%m-%d %H:%M",
                                                               time.gmtime())))
        print("# %-8s %-3s %2s %6s %5s %3s %9s %7s %9s %8s %7s" %
              ("model", "via", "N", "Gbit/s", "wire", "ov", "step_ms", "comm_%", "MB/step",
               "wait_ms", "hidden"))
        out = open(a.out, "w")
        for model in a.models.split(","):
            data = "gray" if model == "lenet" else "rgb"
            for n in members:
                batch = a.batch or (64 if model == "lenet" else 16) * n
                hosts = ",".join("lab%d:%d" % (k, a.threads) for k in range(1, n + 1))
                for rate in [int(x) for x in a.rates.split(",")]:
                    lab.shape(rate, a.delay_ms)
                    for tr, comp in [(t, c) for t in transports
                                     for c in a.compress.split(",")]:
                        wait_off = None
                        for ov in a.overlap.split(","):
                            name = "%s-%s-%d-%d-%s-%s" % (model, tr, n, rate, comp, ov)
                            args = ["--json", "train", "--data", data, "--model", model,
                                    "--epochs", "2", "--batch", str(batch), "--seed", "1",
                                    "--compress", comp, "--overlap", ov, "--name", name,
                                    "--heartbeat-timeout", "%g" % a.heartbeat_timeout]
                            env = None
                            if tr == "ssh":
                                cmd = base + args + ["--hosts", hosts, "--ssh-config",
                                                     f"{lab.dir}/ssh_config"]
                            else:
                                sub = lab.net + ".0/24"
                                cmd = ["mpirun", "--host",
                                       ",".join(lab.addr(k) for k in range(1, n + 1)), "-np",
                                       str(n), "--mca", "plm_rsh_agent", f"{lab.dir}/nsagent",
                                       "--mca", "plm_rsh_no_tree_spawn", "1", "--mca",
                                       "oob_tcp_if_include", sub, "--mca", "btl_tcp_if_include",
                                       sub, "--mca", "btl", "tcp,self", "--bind-to", "none",
                                       nnlab, "--db", db] + args + [
                                           "--threads", str(a.threads), "--mpi"]
                                env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
                                           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                                           HOME=f"{lab.dir}/home")
                            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
                            ep = epoch_lines(r.stdout) if r.returncode == 0 else []
                            if len(ep) < 2:
                                why = (r.stderr.strip().splitlines() or ["no second epoch"])[0]
                                print("  %-8s %-3s %2d %6g %5s %3s failed: %s" %
                                      (model, tr, n, rate / 1000, comp, ov, why), flush=True)
                                failed += 1
                                continue
                            ws0, ws1 = ep[0]["workers"], ep[1]["workers"]
                            nsteps = (ep[1]["workers"][0]["samples"] -
                                      ep[0]["workers"][0]["samples"]) * n / batch
                            comp_s = sum(w1["compute_seconds"] - w0["compute_seconds"]
                                         for w0, w1 in zip(ws0, ws1)) / n / nsteps
                            comm_s = sum(w1["comm_seconds"] - w0["comm_seconds"]
                                         for w0, w1 in zip(ws0, ws1)) / n / nsteps
                            sent = sum(w1["bytes_sent"] - w0["bytes_sent"]
                                       for w0, w1 in zip(ws0, ws1)) / n / nsteps
                            step = comp_s + comm_s
                            hidden = None
                            if ov == "off":
                                wait_off = comm_s
                            elif wait_off:
                                hidden = 1 - comm_s / wait_off
                            row = {"model": model, "transport": tr, "members": n,
                                   "rate_mbit": rate,
                                   "delay_ms": a.delay_ms if lab.netem else 0.0,
                                   "compress": comp, "overlap": ov, "threads": a.threads,
                                   "batch": batch, "steps": nsteps, "step_s": step,
                                   "compute_s": comp_s, "comm_s": comm_s,
                                   "bytes_per_step": sent, "hidden": hidden,
                                   "images_per_second": ep[1]["images_per_second"]}
                            rows.append(row)
                            out.write(json.dumps(row) + "\n")
                            out.flush()
                            print("  %-8s %-3s %2d %6g %5s %3s %9.1f %7.1f %9.2f %8.1f %7s" %
                                  (model, tr, n, rate / 1000, "bf16" if comp == "bf16" else "fp32",
                                   ov, 1e3 * step, 100 * comm_s / step, sent / 1e6,
                                   1e3 * comm_s,
                                   "" if hidden is None else "%.0f%%" % (100 * hidden)),
                                  flush=True)
        out.close()
        load = open("/proc/loadavg").read().split()[:3]
        print("# load average %s at the end" % " ".join(load))
    finally:
        lab.down()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
