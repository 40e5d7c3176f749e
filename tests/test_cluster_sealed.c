/* Cluster mode on the wire: real 2-worker runs through the private sshd of tests/sshd.h while
 * tcpdump records the loopback traffic of the workers' port range, whose TCP streams the test
 * puts together again. With --insecure-plaintext the streams hold the GRAD and PARAM frames of
 * every step (a header whose CRC32 holds over the bytes after it), so the scan can tell; with
 * sealed frames (the default) it finds none, though about as many bytes went by. Skipped without
 * tcpdump or the right to capture on lo (root). A byte flipped in transit is test_wire's (the mesh
 * and the allreduce through a tampering relay). */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nnlab/wire.h"
#include "sshd.h"
#include "tap.h"

enum { SIDE = 12, NTRAIN = 600, BATCH = 32 };

static struct sshd sd;
static const char *bin;
static char errtext[1 << 16];

static const char spec_text[] = "fc1: dense 24\nrelu\nfc2: dense N\n";

/* Runs nnlab with the fixture's database; stderr lands in errtext (one line). */
static int nnlab(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int nnlab(const char *fmt, ...)
{
    char args[2048], cmd[4096], path[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "env -u SSH_AUTH_SOCK '%s' --db '%s/db' %s >'%s/out' 2>'%s/err'", bin,
             sd.dir, args, sd.dir, sd.dir);
    int st = system(cmd);
    snprintf(path, sizeof path, "%s/err", sd.dir);
    char *t = sshd_read(path);
    snprintf(errtext, sizeof errtext, "%s", t ? t : "");
    for (char *c = errtext; *c; c++)
        if (*c == '\n')
            *c = ' ';
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Starts tcpdump on lo for ports [lo, hi] into path; its pid once it listens, or -1. */
static pid_t capture_start(const char *path, int lo, int hi)
{
    char filter[64], errpath[600];
    snprintf(filter, sizeof filter, "tcp portrange %d-%d", lo, hi);
    snprintf(errpath, sizeof errpath, "%s/tcpdump.err", sd.dir);
    unlink(errpath);
    pid_t pid = fork();
    if (pid == 0) {
        freopen(errpath, "w", stderr);
        freopen("/dev/null", "w", stdout);
        execlp("tcpdump", "tcpdump", "-i", "lo", "-U", "-n", "-s", "0", "-w", path, filter,
               (char *)NULL);
        _exit(127);
    }
    /* Ready when it says it listens (or gone when it cannot). */
    for (int i = 0; i < 100; i++) {
        char *t = sshd_read(errpath);
        int ready = t && strstr(t, "listening on");
        if (ready)
            return pid;
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return -1;
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static void capture_stop(pid_t pid)
{
    struct timespec ts = {0, 300000000}; /* the last packets reach the file (-U) */
    nanosleep(&ts, NULL);
    kill(pid, SIGINT);
    waitpid(pid, NULL, 0);
}

/* One direction of a TCP connection in the capture: its payload bytes in order. */
struct stream {
    unsigned sport, dport;
    unsigned char *p;
    size_t n, cap;
};

/* Reassembles the TCP streams of a pcap file (Ethernet or Linux cooked framing, IPv4, as tcpdump
 * writes on lo) into s (at most max); returns how many, or -1 when the file is not a capture. */
static int streams_read(const char *path, struct stream *s, int max)
{
    char *raw = NULL;
    size_t n = 0;
    FILE *f = fopen(path, "rb");
    if (f) {
        raw = malloc(64u << 20);
        n = raw ? fread(raw, 1, 64u << 20, f) : 0;
        fclose(f);
    }
    const unsigned char *p = (const unsigned char *)raw;
    uint32_t magic =
        n >= 24 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
                : 0;
    if (magic != 0xa1b2c3d4u) {
        free(raw);
        return -1;
    }
    const uint32_t link = (uint32_t)p[20] | (uint32_t)p[21] << 8;
    const size_t l2 = link == 1 ? 14 : link == 113 ? 16 : 0; /* Ethernet, Linux cooked */
    int ns = 0;
    for (size_t off = 24; off + 16 <= n;) {
        const unsigned char *r = p + off;
        size_t incl = (size_t)r[8] | (size_t)r[9] << 8 | (size_t)r[10] << 16 | (size_t)r[11] << 24;
        const unsigned char *q = r + 16;
        off += 16 + incl;
        if (off > n || incl < l2 + 40)
            break;
        q += l2;
        if ((q[0] >> 4) != 4 || q[9] != 6)
            continue;
        const size_t ihl = (size_t)(q[0] & 15) * 4, total = (size_t)q[2] << 8 | q[3];
        const unsigned char *t = q + ihl;
        const size_t thl = (size_t)(t[12] >> 4) * 4;
        if (total > incl - l2 || ihl + thl > total)
            continue;
        const size_t len = total - ihl - thl;
        const unsigned sport = (unsigned)t[0] << 8 | t[1], dport = (unsigned)t[2] << 8 | t[3];
        if (len == 0)
            continue;
        int k = 0;
        while (k < ns && !(s[k].sport == sport && s[k].dport == dport))
            k++;
        if (k == ns) {
            if (ns == max)
                continue;
            s[ns++] = (struct stream){.sport = sport, .dport = dport};
        }
        if (s[k].n + len > s[k].cap) {
            s[k].cap = 2 * (s[k].n + len);
            s[k].p = realloc(s[k].p, s[k].cap);
        }
        memcpy(s[k].p + s[k].n, t + thl, len);
        s[k].n += len;
    }
    free(raw);
    return ns;
}

/* GRAD and PARAM frames in a capture's TCP streams that parse as plaintext: a header whose CRC32
 * holds over the bytes after it. *bytes: the streams' bytes in all; -1 when unreadable. */
static int plaintext_frames(const char *path, long *bytes)
{
    struct stream s[64];
    int found = 0, ns = streams_read(path, s, 64);
    *bytes = 0;
    if (ns < 0)
        return -1;
    for (int k = 0; k < ns; k++) {
        *bytes += (long)s[k].n;
        for (size_t i = 0; i + NL_WIRE_HEADER <= s[k].n; i++) {
            uint32_t type, len, crc;
            if (nl_wire_parse_header(s[k].p + i, &type, &len, &crc, 1u << 20) < 0 ||
                (type != NL_FRAME_GRAD && type != NL_FRAME_PARAM) || len == 0 ||
                i + NL_WIRE_HEADER + len > s[k].n)
                continue;
            found += nl_wire_check(crc, type, s[k].p + i + NL_WIRE_HEADER, len);
        }
        free(s[k].p);
    }
    return found;
}

int main(void)
{
    bin = getenv("NNLAB_BIN");
    if (!bin || access(bin, X_OK) != 0)
        skip_all("NNLAB_BIN does not name the nnlab binary");
    signal(SIGPIPE, SIG_IGN);
    char probe[700];
    snprintf(probe, sizeof probe, "'%s' hosts --help >/dev/null 2>&1", bin);
    if (system(probe) != 0)
        skip_all("this nnlab was built without cluster mode (libssh)");
    if (system("tcpdump --version >/dev/null 2>&1") != 0)
        skip_all("no tcpdump (apt-get install tcpdump)");
    const char *why = sshd_start(&sd);
    if (why) {
        sshd_stop(&sd);
        skip_all("%s", why);
    }
    sshd_write_quadrants(&sd, NTRAIN, SIDE);
    sshd_write(sd.dir, "spec", spec_text);
    is_int(nnlab("import syn '%s/data' --val 0.1", sd.dir), 0, "import a synthetic dataset: %s",
           errtext);

    char cap[600];
    snprintf(cap, sizeof cap, "%s/cap.pcap", sd.dir);
    const int lo = sshd_free_port(), hi = lo + 19;
    const long iters = (540 + BATCH - 1) / BATCH; /* one epoch of 540 train samples */
    long bytes[2] = {0};
    int frames[2] = {0};
    for (int sealed = 0; sealed < 2; sealed++) {
        const char *mode = sealed ? "sealed" : "plaintext";
        pid_t pid = capture_start(cap, lo, hi);
        if (pid < 0 && !sealed) {
            sshd_stop(&sd);
            skip_all("tcpdump cannot capture on lo here (needs root)");
        }
        if (pid < 0) {
            ok(0, "tcpdump starts a second time");
            break;
        }
        is_int(nnlab("--json train --data syn --model '%s/spec' --epochs 1 --batch %d --seed 3 "
                     "--ssh-config '%s/ssh_config' --hosts node1:1,node2:1 --port-range %d-%d%s",
                     sd.dir, BATCH, sd.dir, lo, hi, sealed ? "" : " --insecure-plaintext"),
               0, "%s: 2 workers train while tcpdump records: %s", mode, errtext);
        capture_stop(pid);
        frames[sealed] = plaintext_frames(cap, &bytes[sealed]);
    }
    ok(frames[0] >= 2 * iters,
       "plaintext: the recording shows the frames (%d GRAD and PARAM frames, %ld steps)", frames[0],
       iters);
    /* (tcpdump may drop a few packets on a loaded machine: "as much" is within a fifth.) */
    ok(bytes[1] >= bytes[0] * 4 / 5 && bytes[0] > 2 * iters * 1000,
       "sealed: as much traffic recorded (%ld stream bytes against %ld)", bytes[1], bytes[0]);
    is_int(frames[1], 0, "sealed: no recorded frame parses as plaintext");
    ok(sshd_no_workers_left(&sd, 5), "no worker is left");
    sshd_stop(&sd);
    return done_testing();
}
