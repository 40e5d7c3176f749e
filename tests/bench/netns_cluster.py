#!/usr/bin/python3
"""SSH-mode cluster runs between network namespaces joined by shaped links (a benchmark, not a
test; needs root, iproute2's ip and tc, ping, and openssh-server).

Two kinds of link (--link; by default veth with --delay-us 0 and tap otherwise):
- tap: each member host K is a namespace NETBENCH-hK whose eth0 is a TAP device
  of tests/bench/delay_link (built by meson as build/tests/delay_link), a userspace switch that
  delays every frame by --delay-us (100 us by default, once per crossing, so a ping's round trip
  carries twice that) and shapes each host's port to the link rate in both directions with token
  buckets; the driver (this namespace) has a TAP port of its own at 10.214.S.1. delay_link runs
  at real-time priority (SCHED_FIFO 1, --no-rt: not) so that the machine's busy cores delay its
  releases less. Where a kernel has no sch_netem (as the test machine's), delay_link is the only
  delay.
- veth: a switch namespace NETBENCH-sw holds bridge br0, each host joins it by a veth pair, the
  driver over a veth of its own; every host link is shaped in both directions with tc tbf (on the
  host's end and the bridge's end), and, where the kernel has sch_netem and --delay-us > 0, netem
  adds the delay on both ends.
Each member host runs its own sshd on 10.214.S.1K:22. Before the runs at each rate, the link is
measured: the round trip of 50 pings between two hosts and the TCP throughput of one stream
(iperf3 where it is installed, a Python socket stream otherwise) for 3 s; the rows carry the rate
the link reached beside the rate asked, and the delay delay_link applied to the run's frames
(min, median, 99th percentile of release - arrival: the delay and any queueing behind the rate)
and how late delay_link released them (release - due) beside the delay asked.

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

Every namespace, link, process (delay_link and the sshds, by pid) and file made here is removed
at the end, also on an error, Ctrl-C or SIGTERM.
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


def parent_death_signal():
    """In a child before exec: SIGTERM when this script ends, however it ends."""
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


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
    def __init__(self, hosts, subnet, link, delay_us, delay_link, rt, offload=True):
        self.hosts = hosts
        self.net = "10.214.%d" % subnet
        self.link = link
        self.delay_us = delay_us
        self.delay_link = delay_link
        self.rt = rt
        self.offload = offload
        self.made = False
        self.sshd = []
        self.switch = None
        self.dir = tempfile.mkdtemp(prefix="nnlab-netbench-")
        self.netem = None
        self.netem_why = ""

    def addr(self, k):
        return "%s.1%d" % (self.net, k)

    def up(self):
        self.made = True
        if self.link == "tap":
            self.up_tap()
        else:
            self.up_veth()

    def up_tap(self):
        """delay_link makes the TAPs (the driver's TAGtd, host K's TAGtK) and holds them; each
        host's moves into its namespace as eth0."""
        t, n = TAG, self.net
        cmd = ([self.delay_link, "--delay-us", "%g" % self.delay_us, f"{t}td"] +
               [f"{t}t{k}" for k in range(1, self.hosts + 1)])
        if not self.offload:
            cmd.insert(1, "--no-offload")
        if self.rt:
            cmd = ["chrt", "-f", "1"] + cmd
        # Its own session, so that Ctrl-C does not end the link before the runs' processes
        # have seen their connections close; it gets SIGTERM when this script dies.
        self.switch = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True, start_new_session=True,
                                       preexec_fn=parent_death_signal)
        if self.switch.stdout.readline().strip() != "ready":
            raise RuntimeError("delay_link did not start (%s)" % " ".join(cmd))
        sh(f"ip addr add {n}.1/24 dev {t}td && ip link set {t}td up")
        for k in range(1, self.hosts + 1):
            sh(f"ip netns add {t}-h{k} && ip netns exec {t}-h{k} ip link set lo up && "
               f"ip link set {t}t{k} netns {t}-h{k} && "
               f"ip netns exec {t}-h{k} ip link set {t}t{k} name eth0 && "
               f"ip netns exec {t}-h{k} ip addr add {self.addr(k)}/24 dev eth0 && "
               f"ip netns exec {t}-h{k} ip link set eth0 up")

    def switch_say(self, line):
        """Sends a command to delay_link; for "stats", returns its JSON answer."""
        self.switch.stdin.write(line + "\n")
        self.switch.stdin.flush()
        if line == "stats":
            return json.loads(self.switch.stdout.readline())
        return None

    def up_veth(self):
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
        if self.delay_us > 0 and not self.netem:
            raise RuntimeError("--link veth --delay-us %g: this kernel has no netem (%s); use "
                               "--link tap" % (self.delay_us, self.netem_why))

    def shape(self, rate_mbit):
        """Every host link at rate_mbit each way: delay_link's buckets, or tbf (with netem's
        delay before it where asked) on both ends of each veth. A tbf bucket holds 50 us at the
        rate, at least 64 KiB (a GSO segment), as delay_link's do."""
        if self.link == "tap":
            self.switch_say("rate %d" % rate_mbit)
            return
        delay_ms = self.delay_us / 1000
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

    def measure(self):
        """The link between hosts 1 and 2 as it is shaped now: ping's round trip (50 pings,
        10 ms apart; ms: min, avg, max) and one TCP stream's throughput over 3 s (Mbit/s)."""
        t = TAG
        if self.switch:
            self.switch_say("stats")
        r = sh(f"ip netns exec {t}-h1 ping -q -c 50 -i 0.01 {self.addr(2)}", check=False)
        pinged = self.switch_say("stats") if self.switch else None
        rtt = None
        for line in r.stdout.splitlines():
            if line.startswith("rtt") or line.startswith("round-trip"):
                v = line.split("=")[1].split()[0].split("/")
                rtt = {"min": float(v[0]), "avg": float(v[1]), "max": float(v[2])}
        if rtt is not None and pinged:
            rtt["link_delay_us"] = pinged["delay_us"]
        if rtt is None:
            raise RuntimeError("ping between %s-h1 and %s-h2: %s" %
                               (t, t, (r.stderr or r.stdout).strip()))
        if shutil.which("iperf3"):
            srv = subprocess.Popen(["ip", "netns", "exec", f"{t}-h2", "iperf3", "-s", "-1",
                                    "-B", self.addr(2)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            try:
                out = None
                for _ in range(50):
                    time.sleep(0.1)
                    r = sh(f"ip netns exec {t}-h1 iperf3 -J -t 3 -c {self.addr(2)}", check=False)
                    if r.returncode == 0:
                        out = json.loads(r.stdout)
                        break
                if out is None:
                    raise RuntimeError("iperf3 between %s-h1 and %s-h2: %s" %
                                       (t, t, r.stdout.strip()[-200:]))
                mbit = out["end"]["sum_received"]["bits_per_second"] / 1e6
                tool = "iperf3"
            finally:
                srv.terminate()
                srv.wait()
        else:
            mbit = self.python_stream()
            tool = "python"
        return rtt, mbit, tool

    def python_stream(self):
        """One TCP stream from host 1 to host 2 for 3 s; Mbit/s as the receiver counted."""
        t = TAG
        recv = ("import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,"
                "socket.SO_REUSEADDR,1)\ns.bind(('%s',5201));s.listen(1);print('up',flush=True)"
                "\nc,_=s.accept();n=0;t0=time.time()\nwhile True:\n b=c.recv(1<<20)\n"
                " if not b: break\n n+=len(b)\nprint(n*8/(time.time()-t0)/1e6)\n" % self.addr(2))
        send = ("import socket,time\nc=socket.create_connection(('%s',5201));b=bytes(1<<20)"
                "\nt0=time.time()\nwhile time.time()-t0<3: c.sendall(b)\nc.close()\n"
                % self.addr(2))
        srv = subprocess.Popen(["ip", "netns", "exec", f"{t}-h2", sys.executable, "-c", recv],
                               stdout=subprocess.PIPE, text=True)
        try:
            srv.stdout.readline()
            sh(f"ip netns exec {t}-h1 {sys.executable} -c \"{send}\"")
            return float(srv.stdout.readline())
        finally:
            srv.kill()
            srv.wait()

    def end_hosts_processes(self):
        """Waits up to 5 s for what runs in the hosts' namespaces (the workers and MPI daemons
        of a run that was interrupted, their sshd sessions) to end, then ends it by pid."""
        def pids():
            found = []
            for k in range(1, self.hosts + 1):
                r = sh(f"ip netns pids {TAG}-h{k}", check=False)
                found += [int(x) for x in r.stdout.split()]
            return found
        for _ in range(50):
            left = pids()
            if not left:
                return
            time.sleep(0.1)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in left:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(1)
            left = pids()
            if not left:
                return

    def down(self):
        """Ends the sshds and delay_link (by pid) and removes the namespaces, links and files;
        returns delay_link's totals (None without it)."""
        for p in self.sshd:
            p.terminate()
            p.wait()
        if self.made:
            self.end_hosts_processes()
        total = None
        if self.switch:
            try:
                self.switch.stdin.close()
            except OSError:
                pass  # it has ended already (Ctrl-C reaches it too)
            self.switch.terminate()
            try:
                total = json.loads(self.switch.stdout.readline() or "null")
            except ValueError:
                pass
            self.switch.wait()
        if self.made:
            for k in range(1, self.hosts + 1):
                sh(f"ip netns del {TAG}-h{k}", check=False)
            if self.link == "veth":
                sh(f"ip netns del {TAG}-sw", check=False)
                sh(f"ip link del {TAG}d", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        return total


def epoch_lines(text):
    return [json.loads(l) for l in text.splitlines()
            if l.startswith("{") and '"event":"epoch"' in l]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nnlab", default="build/app/nnlab")
    ap.add_argument("--models", default="lenet,resnet18")
    ap.add_argument("--members", default="2,3")
    ap.add_argument("--rates", default="1000,10000", help="link rates, Mbit/s")
    ap.add_argument("--link", choices=("tap", "veth"), default=None, help="tap: the hosts' "
                    "links are ports of delay_link, which delays and shapes them; veth: veth "
                    "pairs on a bridge shaped by tc tbf (and netem where the kernel has it); "
                    "default: veth with --delay-us 0, tap otherwise")
    ap.add_argument("--delay-us", type=float, default=None, help="one-way delay per crossing, "
                    "microseconds (default 100 on tap, 0 on veth)")
    ap.add_argument("--delay-link", default="build/tests/delay_link", help="delay_link's binary")
    ap.add_argument("--no-rt", action="store_true", help="run delay_link at normal priority, "
                    "not SCHED_FIFO 1")
    ap.add_argument("--no-offload", action="store_true", help="delay_link's TAPs without TSO "
                    "and checksum offload: frames of the MTU (1500 bytes) instead of segments "
                    "of up to 64 KiB")
    ap.add_argument("--measure-only", action="store_true", help="only measure the link at each "
                    "rate (ping, one TCP stream), no training runs")
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
    if a.link is None:
        a.link = "veth" if a.delay_us == 0 else "tap"
    if a.delay_us is None:
        a.delay_us = 100.0 if a.link == "tap" else 0.0
    if a.link == "tap" and not os.access(a.delay_link, os.X_OK):
        sys.exit("netns_cluster: %s: no delay_link binary (meson compile -C build, or "
                 "--delay-link PATH)" % a.delay_link)
    lab = Lab(max(members), os.getpid() % 250, a.link, a.delay_us,
              os.path.abspath(a.delay_link), not a.no_rt, not a.no_offload)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    rows = []
    failed = 0
    measured = {}
    printed = False
    try:
        lab.up()
        if a.measure_only:
            print("# %s link, %g us one-way delay asked%s%s; load average %s; %s UTC" %
                  (a.link, a.delay_us, "" if a.no_rt or a.link == "veth" else
                   ", delay_link at SCHED_FIFO 1", ", no offload" if a.no_offload else "",
                   " ".join(open("/proc/loadavg").read().split()[:3]),
                   time.strftime("%Y-%m-%d %H:%M", time.gmtime())))
            for rate in [int(x) for x in a.rates.split(",")]:
                lab.shape(rate)
                rtt, mbit, tool = lab.measure()
                d = rtt.get("link_delay_us")
                print("  %5g Gbit/s asked: ping RTT min/avg/max %.3f/%.3f/%.3f ms (50 pings)%s; "
                      "one TCP stream %.0f Mbit/s (%s, 3 s)" %
                      (rate / 1000, rtt["min"], rtt["avg"], rtt["max"],
                       "; the pings' delay min/p50/p99 %d/%d/%d us" % (d["min"], d["p50"],
                                                                        d["p99"]) if d else "",
                       mbit, tool), flush=True)
            return 0
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
        if a.link == "tap":
            delay = "tap links through delay_link, %g us one-way delay asked%s" % (
                a.delay_us, "" if a.no_rt else " (SCHED_FIFO 1)")
        elif a.delay_us > 0:
            delay = "veth links, tbf and netem, %g us one-way delay" % a.delay_us
        else:
            delay = "veth links, tbf, no added delay"
        load = open("/proc/loadavg").read().split()[:3]
        print("# %s; %d thread(s) per worker; load average %s at the start; %s UTC" %
              (delay, a.threads, " ".join(load), time.strftime("%Y-%m-%d %H:%M",
                                                               time.gmtime())))
        header = ("# %-8s %-3s %2s %6s %5s %3s %9s %7s %9s %8s %7s %6s %6s" %
                  ("model", "via", "N", "Gbit/s", "wire", "ov", "step_ms", "comm_%", "MB/step",
                   "wait_ms", "hidden", "d50_us", "d99_us"))
        out = open(a.out, "w")
        for model in a.models.split(","):
            data = "gray" if model == "lenet" else "rgb"
            for n in members:
                batch = a.batch or (64 if model == "lenet" else 16) * n
                hosts = ",".join("lab%d:%d" % (k, a.threads) for k in range(1, n + 1))
                for rate in [int(x) for x in a.rates.split(",")]:
                    lab.shape(rate)
                    if rate not in measured:
                        rtt, mbit, tool = lab.measure()
                        measured[rate] = (rtt, mbit)
                        print("# link at %g Gbit/s asked: ping RTT min/avg/max %.3f/%.3f/%.3f ms "
                              "(50 pings), one TCP stream %.0f Mbit/s (%s, 3 s); load average %s"
                              % (rate / 1000, rtt["min"], rtt["avg"], rtt["max"], mbit, tool,
                                 " ".join(open("/proc/loadavg").read().split()[:3])), flush=True)
                        if not printed:
                            print(header, flush=True)
                            printed = True
                    rtt, mbit = measured[rate]
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
                            if lab.switch:
                                lab.switch_say("stats")
                            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
                            dl = lab.switch_say("stats") if lab.switch else None
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
                                   "link": a.link, "delay_us_asked": a.delay_us,
                                   "delay_us_applied": dl["delay_us"] if dl else None,
                                   "delay_late_us": dl["late_us"] if dl else None,
                                   "link_frames": dl["frames"] if dl else None,
                                   "link_dropped": dl["dropped"] if dl else None,
                                   "ping_rtt_ms": rtt, "rate_measured_mbit": mbit,
                                   "compress": comp, "overlap": ov, "threads": a.threads,
                                   "batch": batch, "steps": nsteps, "step_s": step,
                                   "compute_s": comp_s, "comm_s": comm_s,
                                   "bytes_per_step": sent, "hidden": hidden,
                                   "images_per_second": ep[1]["images_per_second"]}
                            rows.append(row)
                            out.write(json.dumps(row) + "\n")
                            out.flush()
                            print("  %-8s %-3s %2d %6g %5s %3s %9.1f %7.1f %9.2f %8.1f %7s "
                                  "%6s %6s" %
                                  (model, tr, n, rate / 1000, "bf16" if comp == "bf16" else "fp32",
                                   ov, 1e3 * step, 100 * comm_s / step, sent / 1e6,
                                   1e3 * comm_s,
                                   "" if hidden is None else "%.0f%%" % (100 * hidden),
                                   dl["delay_us"]["p50"] if dl else "-",
                                   dl["delay_us"]["p99"] if dl else "-"), flush=True)
        out.close()
        load = open("/proc/loadavg").read().split()[:3]
        print("# load average %s at the end" % " ".join(load))
    finally:
        total = lab.down()
        if total:
            d, l = total["delay_us"], total["late_us"]
            print("# delay_link carried %d frames, %.1f GB, dropped %d; delay applied (release -"
                  " arrival, us) min %d, median %d, p99 %d, max %d; late (release - due) median "
                  "%d, p99 %d, max %d" %
                  (total["frames"], total["bytes"] / 1e9, total["dropped"], d["min"], d["p50"],
                   d["p99"], d["max"], l["p50"], l["p99"], l["max"]))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        sys.exit("netns_cluster: %s" % e)
