/* Cluster mode on the wire: real 2-worker runs through the private sshd of tests/sshd.h while
 * tcpdump records the loopback traffic of the workers' port range, whose TCP streams the test
 * puts together again. With --insecure-plaintext the streams hold the GRAD and PARAM frames of
 * every step (a header whose CRC32 holds over the bytes after it), so the scan can tell; with
 * sealed frames (the default) it finds none, though about as many bytes went by. Skipped without
 * tcpdump or the right to capture on lo (root).
 *
 * A byte flipped between two real workers: the workers (started over the sshd through a
 * --remote-nnlab wrapper that preloads tests/relay_shim.c) reach each other through a relay this
 * test runs. A run through a relay that alters nothing trains as usual; a run whose relay flips
 * one byte of the mesh stream in the middle fails with the connection's error, naming the host
 * and "frame N failed authentication", with the epochs before it as the clean run had them and
 * none after (nothing was trained on the altered frame), and leaves no worker behind; resumed, it
 * ends as the clean run. (test_wire
 * alters, replays and reorders frames of the mesh and the allreduce in-process.) */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster_util.h"
#include "nnlab/wire.h"
#include "tap.h"

enum { SIDE = 12, NTRAIN = 600, BATCH = 32 };

static const char spec_text[] = "fc1: dense 24\nrelu\nfc2: dense N\n";

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

/* The relay between the workers: it listens on 127.0.0.1 ports relay .. relay + RELAY_PORTS - 1
 * and forwards a connection on relay + k to port lo + k, both ways. The byte at offset flip
 * (none when negative) of the first stream from a connecting side to reach it is XORed with
 * 0x01 on its way. Each connection that ends appends "PORT FORWARD BACK FLIPPED" to a log. */
enum { RELAY_PORTS = 4, RELAY_PAIRS = 16 };

struct relay_pair {
    int a, b, port, flipped;
    long ab, ba; /* bytes from the connecting side, and back */
};

static int relay_listen(int port)
{
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&in, sizeof in) != 0 || listen(fd, 16) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int relay_dial(int port)
{
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&in, sizeof in) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void relay_close(struct relay_pair *p, const char *log)
{
    FILE *f = fopen(log, "a");
    if (f) {
        fprintf(f, "%d %ld %ld %d\n", p->port, p->ab, p->ba, p->flipped);
        fclose(f);
    }
    close(p->a);
    close(p->b);
    p->a = p->b = -1;
}

/* The relay process's loop over its listeners (lfd) and connections; it runs until killed. */
static void relay_loop(const int *lfd, int lo, long flip, const char *log)
{
    static unsigned char buf[1 << 16];
    struct relay_pair p[RELAY_PAIRS];
    int np = 0, flipped = flip < 0;

    for (;;) {
        struct pollfd fds[RELAY_PORTS + 2 * RELAY_PAIRS];
        int nf = 0;
        for (int k = 0; k < RELAY_PORTS; k++)
            fds[nf++] = (struct pollfd){.fd = lfd[k], .events = POLLIN};
        for (int i = 0; i < np; i++) {
            fds[nf++] = (struct pollfd){.fd = p[i].a, .events = POLLIN};
            fds[nf++] = (struct pollfd){.fd = p[i].b, .events = POLLIN};
        }
        if (poll(fds, (nfds_t)nf, -1) < 0) {
            if (errno == EINTR)
                continue;
            _exit(1);
        }
        const int polled = np;
        for (int i = 0; i < polled; i++) {
            for (int side = 0; side < 2 && p[i].a >= 0; side++) {
                if (!(fds[RELAY_PORTS + 2 * i + side].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                ssize_t n = read(side ? p[i].b : p[i].a, buf, sizeof buf);
                if (n <= 0) {
                    relay_close(&p[i], log);
                    break;
                }
                if (side == 0 && !flipped && flip >= p[i].ab && flip < p[i].ab + n) {
                    buf[flip - p[i].ab] ^= 0x01;
                    flipped = p[i].flipped = 1;
                }
                *(side ? &p[i].ba : &p[i].ab) += n;
                if (write_all(side ? p[i].a : p[i].b, buf, (size_t)n) < 0) {
                    relay_close(&p[i], log);
                    break;
                }
            }
        }
        int keep = 0;
        for (int i = 0; i < np; i++)
            if (p[i].a >= 0)
                p[keep++] = p[i];
        np = keep;
        for (int k = 0; k < RELAY_PORTS; k++) {
            if (!(fds[k].revents & POLLIN))
                continue;
            int a = accept(lfd[k], NULL, NULL);
            if (a < 0)
                continue;
            int b = relay_dial(lo + k);
            if (b < 0 || np == RELAY_PAIRS) {
                close(a);
                if (b >= 0)
                    close(b);
                continue;
            }
            p[np++] = (struct relay_pair){.a = a, .b = b, .port = lo + k};
        }
    }
}

/* Starts the relay (a child process) on ports relay.. to lo..; its pid, or -1 when a port
 * cannot be had. */
static pid_t relay_start(int lo, int relay, long flip, const char *log)
{
    int lfd[RELAY_PORTS];

    unlink(log);
    for (int k = 0; k < RELAY_PORTS; k++) {
        lfd[k] = relay_listen(relay + k);
        if (lfd[k] < 0) {
            while (k-- > 0)
                close(lfd[k]);
            return -1;
        }
    }
    pid_t pid = fork();
    if (pid == 0)
        relay_loop(lfd, lo, flip, log);
    for (int k = 0; k < RELAY_PORTS; k++)
        close(lfd[k]);
    return pid;
}

static void relay_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

/* What the relay's log says: the connections, the bytes from the connecting sides, and how many
 * were altered. */
static int relay_log(const char *log, long *forward, int *flipped)
{
    char *t = sshd_read(log); /* its static buffer */
    int n = 0;

    *forward = 0;
    *flipped = 0;
    for (char *line = t; line && *line;) {
        int port, fl;
        long ab, ba;
        if (sscanf(line, "%d %ld %ld %d", &port, &ab, &ba, &fl) == 4) {
            n++;
            *forward += ab;
            *flipped += fl;
        }
        char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

/* Whether each of count ports from port can be listened on now. */
static int ports_free(int port, int count)
{
    for (int k = 0; k < count; k++) {
        const int fd = relay_listen(port + k);
        if (fd < 0)
            return 0;
        close(fd);
    }
    return 1;
}

/* A block of ports for the workers, lo .. lo + RELAY_PORTS - 1, whose relay's, lo + 10 on, are
 * free too: an ephemeral port from the kernel says nothing of its neighbours, which another
 * connection's local end may hold. -1 when 50 tries found none. */
static int relay_ports(void)
{
    for (int i = 0; i < 50; i++) {
        const int lo = sshd_free_port();
        if (lo > 0 && lo + 10 + RELAY_PORTS < 65536 && ports_free(lo, RELAY_PORTS) &&
            ports_free(lo + 10, RELAY_PORTS))
            return lo;
    }
    return -1;
}

/* One epoch's training loss of a run, or NAN. */
static double epoch_loss(const char *run, int epoch)
{
    long long micro = sshd_db_int(&sd,
                                  "SELECT CAST(round(train_loss * 1e9) AS INTEGER) FROM epochs "
                                  "JOIN runs ON runs.id = run WHERE name = '%s' AND epoch = %d",
                                  run, epoch);
    return micro < 0 ? NAN : (double)micro * 1e-9;
}

static void check_flipped_byte(void)
{
    enum { EPOCHS = 3 };
    const char *shim = getenv("NNLAB_RELAY_SHIM");
    char wrapper[600], text[2048], log[600], args[1600];

    if (!shim || access(shim, R_OK) != 0) {
        ok(0, "NNLAB_RELAY_SHIM names the relay shim (%s)", shim ? shim : "unset");
        return;
    }
    const int lo = relay_ports(), relay = lo + 10;
    if (lo < 0) {
        ok(0, "free ports for the workers and their relay");
        return;
    }
    snprintf(text, sizeof text,
             "#!/bin/sh\n"
             "# The worker with its mesh connections sent through the test's relay.\n"
             "[ \"$1\" = worker ] || exec '%s' \"$@\"\n"
             "export LD_PRELOAD='%s' NNLAB_TEST_REDIRECT='%d-%d:%d'\n"
             "export ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0\"\n"
             "exec '%s' \"$@\"\n",
             bin, shim, lo, lo + RELAY_PORTS - 1, relay, bin);
    sshd_write(sd.dir, "relay-nnlab", text);
    snprintf(wrapper, sizeof wrapper, "%s/relay-nnlab", sd.dir);
    chmod(wrapper, 0755);
    snprintf(log, sizeof log, "%s/relay.log", sd.dir);
    snprintf(args, sizeof args,
             "--json train --data syn --model '%s/spec' --epochs %d --batch %d --seed 3 "
             "--ssh-config '%s/ssh_config' --hosts node1:1,node2:1 --port-range %d-%d "
             "--remote-nnlab '%s'",
             sd.dir, EPOCHS, BATCH, sd.dir, lo, lo + RELAY_PORTS - 1, wrapper);

    /* Through a relay that alters nothing: the run trains as usual. */
    long forward = 0;
    int flipped = 0;
    pid_t rp = relay_start(lo, relay, -1, log);
    ok(rp > 0, "a relay on ports %d-%d to %d-%d", relay, relay + RELAY_PORTS - 1, lo,
       lo + RELAY_PORTS - 1);
    if (rp <= 0)
        return;
    is_int(nnlab("%s --name relayed", args), 0, "a 2-worker run through the relay: %s", errtext);
    relay_stop(rp);
    const int conns = relay_log(log, &forward, &flipped);
    ok(conns >= 1 && forward > 100000,
       "the workers' mesh went through it (%d connection, %ld bytes from the connecting worker)",
       conns, forward);
    is_int(sshd_db_int(&sd, "SELECT count(*) FROM epochs JOIN runs ON runs.id = run WHERE name = "
                            "'relayed'"),
           EPOCHS, "and trained its %d epochs", EPOCHS);

    /* The same run, one byte flipped in the middle of the stream. */
    const long at = forward / 2;
    rp = relay_start(lo, relay, at, log);
    if (rp <= 0) {
        ok(0, "the relay starts again");
        return;
    }
    is_int(nnlab("%s --name tampered", args), 1, "a run whose relay flips byte %ld fails", at);
    relay_stop(rp);
    relay_log(log, &forward, &flipped);
    is_int(flipped, 1, "the relay flipped the byte");
    like(errtext, "failed authentication",
         "the connection ended as a frame that failed "
         "authentication");
    ok(strstr(errtext, "node1") || strstr(errtext, "node2"), "naming the host: %s", errtext);
    is_int(sshd_db_int(&sd, "SELECT status = 'failed' FROM runs WHERE name = 'tampered'"), 1,
           "the run is stored as failed");
    const long long done = sshd_db_int(&sd, "SELECT count(*) FROM epochs JOIN runs ON runs.id = "
                                            "run WHERE name = 'tampered'");
    ok(done >= 1 && done < EPOCHS, "%lld of its %d epochs are stored, the ones before the flip",
       done, EPOCHS);
    int same = done >= 1;
    for (int e = 1; e <= done; e++) {
        const double a = epoch_loss("tampered", e), b = epoch_loss("relayed", e);
        same = same && isfinite(a) && fabs(a - b) <= 1e-6 + 1e-6 * fabs(b);
        diag("epoch %d: loss %.9f, the clean run's %.9f", e, a, b);
    }
    ok(same, "as the clean run had them: nothing trained on the altered frame");
    ok(sshd_no_workers_left(&sd, 5), "no worker is left");

    /* Resumed through a relay that alters nothing, it ends as the clean run. */
    rp = relay_start(lo, relay, -1, log);
    if (rp <= 0) {
        ok(0, "the relay starts a third time");
        return;
    }
    is_int(nnlab("--json train --resume tampered --ssh-config '%s/ssh_config' --hosts "
                 "node1:1,node2:1 --port-range %d-%d --remote-nnlab '%s'",
                 sd.dir, lo, lo + RELAY_PORTS - 1, wrapper),
           0, "--resume continues it: %s", errtext);
    relay_stop(rp);
    int match = 1;
    for (int e = 2; e <= EPOCHS; e++) {
        const double a = epoch_loss("tampered", e), b = epoch_loss("relayed", e);
        match = match && isfinite(a) && b > 0 && fabs(a - b) <= 1e-4 * b;
        diag("epoch %d: loss %.9f, the clean run's %.9f", e, a, b);
    }
    ok(match, "the epochs after the flip have the clean run's losses (within 1e-4 of each)");
    ok(sshd_no_workers_left(&sd, 5), "no worker is left");
}

int main(void)
{
    const char *why = cluster_start();
    if (why)
        skip_all("%s", why);
    sshd_write_quadrants(&sd, NTRAIN, SIDE);
    sshd_write(sd.dir, "spec", spec_text);
    is_int(nnlab("import syn '%s/data' --val 0.1", sd.dir), 0, "import a synthetic dataset: %s",
           errtext);
    check_flipped_byte();
    if (system("tcpdump --version >/dev/null 2>&1") != 0) {
        ok(1, "# SKIP no tcpdump (apt-get install tcpdump): the recording checks");
        sshd_stop(&sd);
        return done_testing();
    }

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
            ok(1, "# SKIP tcpdump cannot capture on lo here (needs root): the recording checks");
            sshd_stop(&sd);
            return done_testing();
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
