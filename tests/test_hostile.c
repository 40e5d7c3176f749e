/* Hostile input on the cluster network, through the real binary and a private sshd on 127.0.0.1
 * (tests/sshd.h). A 2-worker run with --port-range A-B trains once undisturbed, then again with
 * the same seed while threads of this test attack every port of the range, from before the
 * workers listen until the run ends: (a) random garbage, (b) headers announcing 0xffffffff and
 * 2^30+1 bytes, (c) full handshakes with a wrong (random) secret, (d) half-open connections that
 * send nothing and stay open, (e) a slow drip of one byte per 100 ms. The attacked run must end
 * with exit 0, the same losses and the same weights as the undisturbed one; no wrong-secret
 * handshake may pass; every non-idle attacker connection must be closed, and those made while
 * the run still had time to go must be closed while both workers still ran (by the worker, not
 * by its exit: nothing may sit in a listening socket's queue), and no worker may remain.
 *
 * Then secret hygiene: a run whose workers start through a wrapper that keeps a copy of the
 * secret line they read on stdin, so the test knows the run's secret; while it runs, the command
 * lines and environments of every process descended from the test's sshd (and of the driver) are
 * read, and neither they, nor the driver's stdout and stderr, nor sshd's log, nor the database
 * may hold the secret; no command line may hold any 64-hex-digit string.
 *
 * And host keys: --accept-new-host-keys still refuses a changed key and leaves known_hosts as it
 * was; it adds exactly one line, with the host's key, for an unknown host (asked twice through
 * two names for the same host:port); later connections use that line without the option. */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
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
#include "nnlab/rng.h"
#include "nnlab/wire.h"
#include "tap.h"

enum { SIDE = 12, NTRAIN = 600, EPOCHS = 30, NPORTS = 3, MAX_RECORDS = 8192, MAX_HALF_OPEN = 90 };

/* Attacker connections made at least this many seconds before the run ended must have been
 * closed while both workers still ran: by the worker, not by its exit. */
#define MARGIN_S 1.5

static int port_lo;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* NPORTS consecutive ports, all free now, below the kernel's ephemeral range (so that no
 * outgoing connection of this test takes one of them). */
static int free_range(void)
{
    struct nl_rng r;
    nl_rng_seed(&r, (uint64_t)getpid());
    for (int tries = 0; tries < 200; tries++) {
        const int lo = 20000 + (int)nl_rng_below(&r, 12000);
        int ok_all = 1;
        for (int p = lo; p < lo + NPORTS && ok_all; p++) {
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
            inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
            int s = socket(AF_INET, SOCK_STREAM, 0);
            ok_all = s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0;
            if (s >= 0)
                close(s);
        }
        if (ok_all)
            return lo;
    }
    return -1;
}

/* ---- the attackers ---- */

enum kind { GARBAGE, OVERSIZED, WRONG_SECRET, DRIP, HALF_OPEN, KINDS };
static const char *const kind_name[KINDS] = {"garbage", "oversized length", "wrong secret",
                                             "slow drip", "half-open"};

struct record {
    enum kind kind;
    double made, closed; /* closed: -1 when the worker never closed it */
    int alive;           /* both workers still ran when the close was seen */
};

static struct attack {
    volatile int stop;
    pthread_mutex_t lock;
    struct record rec[MAX_RECORDS];
    int nrec;
    int admitted; /* wrong-secret handshakes that passed: must stay 0 */
    int refused;  /* wrong-secret handshakes refused with NL_EAUTH (during mesh formation) */
    int half_open[MAX_HALF_OPEN], nhalf;
} att = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Notes an attacker connection; when it was closed, whether the workers still ran then (a
 * process's command line is gone before its descriptors are closed at exit). */
static void record(enum kind k, double made, double closed)
{
    const int alive = closed >= 0 && sshd_workers_alive(&sd) == 2;
    pthread_mutex_lock(&att.lock);
    if (att.nrec < MAX_RECORDS)
        att.rec[att.nrec++] = (struct record){k, made, closed, alive};
    pthread_mutex_unlock(&att.lock);
}

/* A connection to 127.0.0.1:port within wait_ms (non-blocking socket), or -1 (refused: no
 * worker listens there, or not yet). */
static int attach(int port, int wait_ms)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
        return fd;
    if (errno == EINPROGRESS && wait_ms > 0) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int e = 0;
        socklen_t el = sizeof e;
        if (poll(&p, 1, wait_ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 &&
            e == 0)
            return fd;
    } else if (errno == EINPROGRESS) {
        return fd;
    }
    close(fd);
    return -1;
}

static int put(int fd, const void *p, size_t n)
{
    struct pollfd pf = {.fd = fd, .events = POLLOUT};
    if (poll(&pf, 1, 2000) != 1)
        return -1;
    return send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

/* When the peer ended the connection (EOF or reset), reading away what it sends, or -1 when it
 * did not within ms. */
static double closed_by_peer(int fd, int ms)
{
    const double end = now_s() + ms / 1e3;
    char sink[512];
    for (;;) {
        ssize_t r = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            return now_s();
        const int left = (int)((end - now_s()) * 1e3);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) < 0)
            return -1;
    }
}

/* A valid HELLO frame claiming member 1, as anyone can make one. */
static void hello_frame(unsigned char f[NL_WIRE_HEADER + NL_WIRE_HELLO])
{
    unsigned char *p = f + NL_WIRE_HEADER;
    memset(p, 0, NL_WIRE_HELLO);
    memcpy(p, "NNLABWIR", 8);
    p[8] = NL_WIRE_VERSION;
    p[12] = 1;
    nl_wire_header(f, NL_FRAME_HELLO, p, NL_WIRE_HELLO);
}

/* One attack of kind k on port; records it when the connection was made. */
static void strike(enum kind k, int port, struct nl_rng *r, int round)
{
    const int fd = attach(port, 1000);
    if (fd < 0)
        return;
    const double made = now_s();
    if (k == GARBAGE) {
        unsigned char junk[256];
        for (size_t i = 0; i < sizeof junk; i++)
            junk[i] = (unsigned char)nl_rng_below(r, 256);
        put(fd, junk, 1 + nl_rng_below(r, sizeof junk));
    } else if (k == OVERSIZED) {
        unsigned char h[NL_WIRE_HEADER];
        const uint32_t len = round % 2 ? 0xffffffffu : (1u << 30) + 1;
        nl_wire_header(h, round % 3 ? NL_FRAME_HELLO : NL_FRAME_GRAD, NULL, 0);
        for (int i = 0; i < 4; i++)
            h[4 + i] = (unsigned char)(len >> (8 * i));
        put(fd, h, sizeof h);
    } else if (k == WRONG_SECRET) {
        unsigned char secret[32];
        struct nl_conn c;
        struct nl_error err = {0};
        int32_t id;
        nl_wire_random(secret, sizeof secret, NULL);
        nl_conn_init(&c, fd, "a worker", 5000);
        const int rc =
            nl_wire_handshake(&c, NL_WIRE_CLIENT, secret, sizeof secret, 0, 1, &id, &err);
        pthread_mutex_lock(&att.lock);
        att.admitted += rc == 0;
        att.refused += rc == NL_EAUTH;
        pthread_mutex_unlock(&att.lock);
    }
    record(k, made, closed_by_peer(fd, 8000));
    close(fd);
}

static void *striker(void *arg)
{
    const enum kind k = (enum kind)(long)arg;
    struct nl_rng r;
    nl_rng_seed(&r, 100 + (uint64_t)k);
    for (int round = 0; !att.stop; round++) {
        for (int p = port_lo; p < port_lo + NPORTS && !att.stop; p++)
            strike(k, p, &r, round);
        sleep_ms(150);
    }
    return NULL;
}

/* One slow drip per port, a byte of a HELLO every 100 ms; when the worker closes one, the next
 * tick dials again. */
static void *dripper(void *arg)
{
    int fd[NPORTS];
    size_t at[NPORTS] = {0};
    double made[NPORTS];
    unsigned char f[NL_WIRE_HEADER + NL_WIRE_HELLO];
    (void)arg;
    hello_frame(f);
    for (int i = 0; i < NPORTS; i++)
        fd[i] = -1;
    while (!att.stop) {
        for (int i = 0; i < NPORTS; i++) {
            if (fd[i] < 0) {
                fd[i] = attach(port_lo + i, 200);
                made[i] = now_s();
                at[i] = 0;
                continue;
            }
            char sink[512];
            ssize_t got = recv(fd[i], sink, sizeof sink, MSG_DONTWAIT);
            int gone = got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR);
            if (!gone)
                gone = send(fd[i], f + at[i] % sizeof f, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
                       errno != EAGAIN;
            at[i]++;
            if (gone) {
                record(DRIP, made[i], now_s());
                close(fd[i]);
                fd[i] = -1;
            }
        }
        sleep_ms(100);
    }
    for (int i = 0; i < NPORTS; i++)
        if (fd[i] >= 0) {
            record(DRIP, made[i], closed_by_peer(fd[i], 8000));
            close(fd[i]);
        }
    return NULL;
}

/* Half-open connections: one more on each port every 300 ms, all kept open to the end. */
static void *holder(void *arg)
{
    (void)arg;
    while (!att.stop && att.nhalf + NPORTS <= MAX_HALF_OPEN) {
        for (int i = 0; i < NPORTS; i++) {
            int fd = attach(port_lo + i, 200);
            if (fd >= 0)
                att.half_open[att.nhalf++] = fd;
        }
        sleep_ms(300);
    }
    return NULL;
}

/* ---- runs ---- */

static const char spec_text[] = "fc1: dense 128\nrelu\nfc2: dense N\n";

/* A run long enough (several seconds of training) to be attacked while it trains. */
static const char *train_args(const char *name, int epochs)
{
    static char a[1024];
    snprintf(a, sizeof a,
             "--json train --data syn --model '%s/spec' --epochs %d --batch 2 --seed 3 "
             "--hosts node1:1,node2:1 --port-range %d-%d --ssh-config '%s/ssh_config' --name %s",
             sd.dir, epochs, port_lo, port_lo + NPORTS - 1, sd.dir, name);
    return a;
}

static void test_attacked_run(void)
{
    double plain[EPOCHS], hit[EPOCHS];
    char cmd[4096], a[700], b[700];

    const double t0 = now_s();
    is_int(nnlab("%s", train_args("plain", EPOCHS)), 0,
           "an undisturbed 2-worker run on ports %d-%d: %s", port_lo, port_lo + NPORTS - 1,
           errtext);
    const double plain_s = now_s() - t0;
    is_int(losses(plain, EPOCHS), EPOCHS, "it reports %d epochs (%.1f s)", EPOCHS, plain_s);
    ok(sshd_no_workers_left(&sd, 10), "no worker is left after it");

    pthread_t t[KINDS];
    for (int k = 0; k < KINDS; k++)
        pthread_create(&t[k], NULL,
                       k == DRIP        ? dripper
                       : k == HALF_OPEN ? holder
                                        : striker,
                       (void *)(long)k);
    sleep_ms(300); /* the attack is on before any worker listens */
    const double start = now_s();
    pid_t pid = cluster_start_as("", "attacked", train_args("attacked", EPOCHS));
    int status = 0;
    waitpid(pid, &status, 0);
    const double end = now_s();
    att.stop = 1;
    for (int k = 0; k < KINDS; k++)
        pthread_join(t[k], NULL);
    cluster_outputs("attacked");
    is_int(exit_code(status), 0, "the run under attack ends with exit 0 (%.1f s): %s", end - start,
           errtext);
    const int n = losses(hit, EPOCHS);
    is_int(n, EPOCHS, "it reports %d epochs", EPOCHS);
    int same = n == EPOCHS;
    for (int i = 0; i < n; i++)
        same &= hit[i] == plain[i];
    ok(same, "with the same losses as the undisturbed run (last epoch %.9g and %.9g)",
       hit[EPOCHS - 1], plain[EPOCHS - 1]);
    snprintf(a, sizeof a, "%s/plain.safetensors", sd.dir);
    snprintf(b, sizeof b, "%s/attacked.safetensors", sd.dir);
    ok(nnlab("export plain '%s'", a) == 0 && nnlab("export attacked '%s'", b) == 0,
       "both runs export: %s", errtext);
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    ok(system(cmd) == 0, "and end with the same weights, byte for byte");
    ok(sshd_no_workers_left(&sd, 10), "no worker is left after the attacked run");

    /* What the attackers saw. */
    int made[KINDS] = {0}, closed[KINDS] = {0}, early[KINDS] = {0}, prompt[KINDS] = {0};
    double slowest = 0;
    for (int i = 0; i < att.nrec; i++) {
        const struct record *r = &att.rec[i];
        made[r->kind]++;
        closed[r->kind] += r->closed >= 0;
        if (r->closed >= 0 && r->closed - r->made > slowest)
            slowest = r->closed - r->made;
        if (r->made > start && r->made < end - MARGIN_S) {
            early[r->kind]++;
            prompt[r->kind] += r->alive;
        }
    }
    for (int k = 0; k < HALF_OPEN; k++) {
        diag("%s: %d connections made, %d closed by the other side; of the %d made over %.1f s "
             "before the end, %d closed while both workers ran",
             kind_name[k], made[k], closed[k], early[k], MARGIN_S, prompt[k]);
        ok(made[k] > 0, "%s: the workers' ports were reached (%d connections)", kind_name[k],
           made[k]);
        is_int(closed[k], made[k], "%s: every connection was closed", kind_name[k]);
    }
    diag("half-open: %d connections held open; wrong-secret handshakes refused during mesh "
         "formation: %d; slowest close: %.2f s",
         att.nhalf, att.refused, slowest);
    ok(att.nhalf > 0, "half-open connections were held on the workers' ports (%d)", att.nhalf);
    is_int(att.admitted, 0, "no handshake with a wrong secret passed");
    int all_early = 0, all_prompt = 0;
    for (int k = 0; k < HALF_OPEN; k++) {
        all_early += early[k];
        all_prompt += prompt[k];
    }
    ok(all_early > 0, "%d attacks came while the run had more than %.1f s to go", all_early,
       MARGIN_S);
    is_int(all_prompt, all_early,
           "each of them was closed by its worker while both ran, not left queued until the "
           "worker exited");
    for (int i = 0; i < att.nhalf; i++)
        close(att.half_open[i]);
}

/* ---- secret hygiene ---- */

static int descends_from(pid_t pid, pid_t root)
{
    for (int depth = 0; depth < 64 && pid > 1; depth++) {
        if (pid == root)
            return 1;
        pid = (pid_t)sshd_parent_of(pid);
    }
    return 0;
}

/* What the test saw of other processes: command lines and environments, NULs made spaces. */
static char seen_cmdlines[1 << 18], seen_environ[1 << 20];
static size_t seen_cmd_len, seen_env_len;
static int seen_procs;

static void keep(char *dst, size_t cap, size_t *len, const char *path)
{
    char buf[1 << 15];
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    if (*len + n + 2 >= cap)
        return;
    memcpy(dst + *len, buf, n);
    *len += n;
    dst[(*len)++] = '\n';
    dst[*len] = '\0';
}

/* Reads the command line and environment of the driver and of every process under sshd. */
static void look_at_processes(pid_t driver)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0 || (pid != driver && !descends_from(pid, sd.pid)) || pid == sd.pid)
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        keep(seen_cmdlines, sizeof seen_cmdlines, &seen_cmd_len, path);
        snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
        keep(seen_environ, sizeof seen_environ, &seen_env_len, path);
        seen_procs++;
    }
    if (d)
        closedir(d);
}

/* Whether text (n bytes) holds needle (m bytes), ignoring the case of ASCII letters. */
static int holds(const char *text, size_t n, const char *needle, size_t m)
{
    for (size_t i = 0; m > 0 && i + m <= n; i++) {
        size_t j = 0;
        while (j < m && tolower((unsigned char)text[i + j]) == tolower((unsigned char)needle[j]))
            j++;
        if (j == m)
            return 1;
    }
    return 0;
}

/* Whether text holds a run of 64 or more hex digits. */
static int holds_hex64(const char *text)
{
    int run = 0;
    for (const char *p = text; *p; p++) {
        run = isxdigit((unsigned char)*p) ? run + 1 : 0;
        if (run >= 64)
            return 1;
    }
    return 0;
}

static int file_holds(const char *path, const char *needle, size_t m)
{
    size_t n;
    char *t = whole(path, &n);
    int found = t && holds(t, n, needle, m);
    free(t);
    return found;
}

static void test_secret_hygiene(void)
{
    char wrapper[600], text[2048], args[2048], path[700];
    glob_t gl;

    /* The uploaded binary, started through a wrapper that keeps the secret line it reads. */
    snprintf(path, sizeof path, "%s/home/.cache/nnlab/bin/*/nnlab", sd.dir);
    if (glob(path, 0, NULL, &gl) != 0 || gl.gl_pathc != 1) {
        ok(0, "the binary was uploaded by the first run");
        return;
    }
    snprintf(text, sizeof text,
             "#!/bin/sh\n"
             "# Keeps a copy of the secret line, then hands it and the rest of stdin to nnlab.\n"
             "[ \"$1\" = worker ] || exec '%s' \"$@\"\n"
             "IFS= read -r line || exit 9\n"
             "printf '%%s\\n' \"$line\" > '%s/secret.'$$\n"
             "{ printf '%%s\\n' \"$line\"; exec cat; } | '%s' \"$@\"\n",
             gl.gl_pathv[0], sd.dir, gl.gl_pathv[0]);
    globfree(&gl);
    sshd_write(sd.dir, "wrapper", text);
    snprintf(wrapper, sizeof wrapper, "%s/wrapper", sd.dir);
    chmod(wrapper, 0755);

    snprintf(args, sizeof args, "%s --remote-nnlab '%s'", train_args("hygiene", 2), wrapper);
    pid_t pid = cluster_start_as("", "hygiene", args);
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        look_at_processes(pid);
        sleep_ms(20);
    }
    cluster_outputs("hygiene");
    is_int(exit_code(status), 0, "a run through the wrapper: %s", errtext);
    ok(sshd_no_workers_left(&sd, 10), "no worker is left after it");

    /* The secret the workers read. */
    char secret[2][80] = {"", ""};
    snprintf(path, sizeof path, "%s/secret.*", sd.dir);
    int nsecrets = glob(path, 0, NULL, &gl) == 0 ? (int)gl.gl_pathc : 0;
    for (int i = 0; i < nsecrets && i < 2; i++) {
        slurp(gl.gl_pathv[i], secret[i], sizeof secret[i]);
        secret[i][strcspn(secret[i], "\n")] = '\0';
    }
    if (nsecrets > 0)
        globfree(&gl);
    is_int(nsecrets, 2, "both workers read a secret line");
    ok(strlen(secret[0]) == 64 && holds_hex64(secret[0]) && strcmp(secret[0], secret[1]) == 0,
       "the same 64 hex digits for both");
    const char *s = secret[0];
    const size_t m = strlen(s);
    unsigned char raw[32];
    for (int i = 0; i < 32 && m == 64; i++) {
        unsigned v = 0;
        sscanf(s + 2 * i, "%2x", &v);
        raw[i] = (unsigned char)v;
    }

    diag("%d process samples read: driver, sshd's sessions, shells, wrappers, workers", seen_procs);
    ok(strstr(seen_cmdlines, " worker ") != NULL, "the workers' command lines were read");
    ok(m == 64 && !holds(seen_cmdlines, seen_cmd_len, s, m), "no command line holds the secret");
    ok(!holds_hex64(seen_cmdlines), "no command line holds any 64-hex-digit string");
    ok(seen_env_len > 0 && m == 64 && !holds(seen_environ, seen_env_len, s, m),
       "no environment holds it");
    ok(m == 64 && !holds(out, strlen(out), s, m) && !holds(errtext, strlen(errtext), s, m),
       "the driver's stdout and stderr do not");
    ok(!holds_hex64(out) && !holds_hex64(errtext), "nor any 64-hex-digit string");
    snprintf(path, sizeof path, "%s/sshd.log", sd.dir);
    ok(m == 64 && !file_holds(path, s, m), "sshd's log does not");
    int in_db = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/db%s", sd.dir, i == 0 ? "" : i == 1 ? "-wal" : "-journal");
        in_db += file_holds(path, s, m) || file_holds(path, (const char *)raw, sizeof raw);
    }
    ok(m == 64 && in_db == 0, "the database holds it neither in hex nor in binary");
}

/* ---- host keys ---- */

static int count_lines(const char *path)
{
    size_t n;
    char *t = whole(path, &n);
    int lines = 0;
    for (size_t i = 0; t && i < n; i++)
        lines += t[i] == '\n';
    free(t);
    return t ? lines : -1;
}

static void test_host_keys(void)
{
    char path[600], keyfile[600], key[512];
    size_t n0, n1;

    /* A changed key, with --accept-new-host-keys: still refused, known_hosts untouched. */
    snprintf(path, sizeof path, "%s/bad_known_hosts", sd.dir);
    char *before = whole(path, &n0);
    is_int(nnlab("hosts check node1 --accept-new-host-keys --ssh-config '%s/ssh_config_badkey'",
                 sd.dir),
           1, "--accept-new-host-keys refuses a changed host key");
    like(errtext, "node1: host key:", "naming host and step: %s", errtext);
    like(errtext, "differs", "saying the key differs");
    is_int(nnlab("--json train --data syn --model '%s/spec' --epochs 1 --hosts node1 "
                 "--accept-new-host-keys --ssh-config '%s/ssh_config_badkey'",
                 sd.dir, sd.dir),
           1, "and so does a training run");
    char *after = whole(path, &n1);
    ok(before && after && n0 == n1 && memcmp(before, after, n0) == 0,
       "known_hosts is left as it was");
    free(before);
    free(after);

    /* An unknown host, reached through two names: exactly one line, the host's key. */
    snprintf(path, sizeof path, "%s/empty_known_hosts", sd.dir);
    is_int(count_lines(path), 0, "known_hosts starts empty");
    is_int(nnlab("hosts check node1 --ssh-config '%s/ssh_config_unknown'", sd.dir), 1,
           "an unknown host is refused without the option");
    is_int(count_lines(path), 0, "and nothing is added");
    is_int(nnlab("hosts check node1,node2 --accept-new-host-keys --ssh-config "
                 "'%s/ssh_config_unknown'",
                 sd.dir),
           0, "--accept-new-host-keys accepts it: %s", errtext);
    is_int(count_lines(path), 1, "known_hosts gained exactly one line");
    snprintf(keyfile, sizeof keyfile, "%s/host_key.pub", sd.dir);
    slurp(keyfile, key, sizeof key);
    char *blob = strchr(key, ' ');
    if (blob) {
        blob++;
        blob[strcspn(blob, " \n")] = '\0';
    }
    size_t n;
    char *line = whole(path, &n);
    char want[64];
    snprintf(want, sizeof want, "[127.0.0.1]:%d ", sd.port);
    ok(line && blob && strncmp(line, want, strlen(want)) == 0 && strstr(line, blob) != NULL,
       "the line names [127.0.0.1]:%d with the host's own key", sd.port);
    free(line);
    is_int(nnlab("hosts check node1,node2 --ssh-config '%s/ssh_config_unknown'", sd.dir), 0,
           "the host is known from then on: %s", errtext);
    is_int(count_lines(path), 1, "still one line");
}

int main(void)
{
    const char *why;

    why = cluster_start();
    if (why)
        skip_all("%s", why);
    port_lo = free_range();
    if (port_lo < 0) {
        sshd_stop(&sd);
        skip_all("no %d free consecutive ports below the ephemeral range", NPORTS);
    }
    sshd_write_quadrants(&sd, NTRAIN, SIDE);
    sshd_write(sd.dir, "spec", spec_text);
    is_int(nnlab("import syn '%s/data' --val 0.1", sd.dir), 0, "import a synthetic dataset");

    test_attacked_run();
    test_secret_hygiene();
    test_host_keys();

    sshd_stop(&sd);
    return done_testing();
}
