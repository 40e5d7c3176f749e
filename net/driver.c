/* The driver of a cluster run. See include/nnlab/driver.h; the conversation with each worker
 * is described at the top of net/worker.c.
 *
 * The driver starts the workers one host at a time, collects where each listens, sends every
 * worker the member list, its setup and (unless its cache holds it) its partition, then follows
 * the run: it reads every worker's channel without blocking, forwards stderr lines, and hands
 * each frame to the follower (net/follow.c, shared with the MPI driver), which gathers the
 * METRIC frames of each step into one ITER event once every worker has reported it, and turns
 * rank 0's WEIGHTS into the epoch's validation, checkpoint and EPOCH event. Here are what only
 * SSH has: channels, heartbeats, and the recovery below. It carries no parameter traffic. On the
 * end of the run, an error or a stop, it closes every channel: the workers read the end of their
 * stdin and exit.
 *
 * Checkpoints: at each checkpoint step every worker sends its slice of the master weights and
 * optimizer state (STATE) after that step's METRIC, and within an epoch rank 0 its parameters
 * (PARAMS); the driver puts one checkpoint together at a time (a piece of a later one waits,
 * unread, in its channel) and writes it in one transaction, with the epoch's metrics at an
 * epoch's end.
 *
 * Faults: every heartbeat timeout / 4 the driver sends each worker a HEARTBEAT (from a thread
 * while it validates or writes a checkpoint). A worker whose channel ends or fails, or that sent
 * nothing for the heartbeat timeout, is lost; so is one that reports a FAULT of its own (its
 * mesh lost a peer first). Then recover() runs the recovery of net/worker.c: ABORT to the
 * others, their FAULT, PARAMS and STATE, the steps up to R reported with what is known of them,
 * the lost worker ended on its host (kill -9 of its pid, when the host answers) and restarted
 * there over a new channel of the same SSH session while --max-restarts lasts, else dropped, and
 * a new generation set up for every member with the state after R. A worker that exits with
 * status 1 after saying why (a non-finite loss, say) is not a loss but the run's error. A send
 * that fails is no loss while what the worker sent is still unread: a worker that ended (DONE,
 * or why it stopped) closes its channel before the driver has read it all, and what it sent
 * says whether the run is over.
 *
 * A loss during a recovery is recovered from in turn: a restarted worker lost before it says
 * where it listens is restarted again while restarts last; a member lost while the generation
 * is set up ends setup_generation() with FAULTED, and recover() runs again: the members already
 * set up are called off (ABORT also ends a mesh that is forming) and report, those not yet set
 * up have nothing to report, and since no member got past the generation's start the driver
 * already holds the parameters, master weights and optimizer state to go on from, the lost
 * member's slice included.
 *
 * Judging: in a run that follows its epochs' accuracy (plateau schedule, early stopping) the
 * driver, which alone validates and sums the global training accuracy, keeps an nl_judge of its
 * own and the watched accuracy of every epoch; after validating an epoch it sends each member
 * JUDGE, for which the members wait, so all apply the same plateau factor and stop after the
 * same epoch (their DONE then comes early, and the run reports stopped_early). A new
 * generation's SETUP, and a resumed run's first, carry the watched accuracy of the epochs before
 * its start step. An early stop decided, the run needs nothing more of its members: one lost
 * after that ends the run instead of a recovery. */
#include "nnlab/driver.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/crypto.h"
#include "net/follow.h"
#include "net/proto.h"
#include "net/ssh.h"
#include "nnlab/alloc.h"
#include "nnlab/allreduce.h"
#include "nnlab/clock.h"
#include "nnlab/partition.h"
#include "nnlab/rng.h"
#include "nnlab/wire.h"

/* Steps in flight at most. Workers run in lockstep, but their reports may reach the driver
 * unevenly; a worker this far ahead of the oldest unreported step is not read until the others
 * catch up. */
#define WINDOW NL_FOLLOW_MAX_WINDOW

static int add_host(struct nl_host **hosts, int *n, const char *text, size_t len, const char *where,
                    struct nl_error *err)
{
    char buf[300];
    long cores = 0;

    while (len > 0 && isspace((unsigned char)*text))
        text++, len--;
    while (len > 0 && isspace((unsigned char)text[len - 1]))
        len--;
    if (len == 0)
        return nl_error_set(err, NL_EINVAL, "%s: an empty host name", where);
    if (len >= sizeof buf || len >= sizeof((*hosts)->name))
        return nl_error_set(err, NL_EINVAL, "%s: a host name is too long", where);
    memcpy(buf, text, len);
    buf[len] = '\0';
    char *colon = strrchr(buf, ':');
    if (colon) {
        char *end;
        cores = strtol(colon + 1, &end, 10);
        if (*end || end == colon + 1 || cores < 1 || cores > 4096)
            return nl_error_set(err, NL_EINVAL, "%s: '%s': CORES must be a whole number from 1",
                                where, buf);
        *colon = '\0';
    }
    for (const char *p = buf; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr(".-_@", *p))
            return nl_error_set(err, NL_EINVAL, "%s: '%s' is not a host name", where, buf);
    struct nl_host *h = nl_realloc(*hosts, (size_t)(*n + 1) * sizeof **hosts);
    if (!h)
        return nl_error_set(err, NL_ENOMEM, "out of memory for hosts");
    *hosts = h;
    memcpy(h[*n].name, buf, strlen(buf) + 1); /* checked shorter than name above */
    h[*n].cores = (int)cores;
    (*n)++;
    return 0;
}

int nl_hosts_parse(const char *list, struct nl_host **hosts, int *n, struct nl_error *err)
{
    *hosts = NULL;
    *n = 0;
    for (const char *p = list;;) {
        size_t len = strcspn(p, ",");
        int rc = add_host(hosts, n, p, len, "--hosts", err);
        if (rc < 0) {
            nl_free(*hosts);
            *hosts = NULL;
            *n = 0;
            return rc;
        }
        if (!p[len])
            return 0;
        p += len + 1;
    }
}

int nl_hosts_load(const char *path, struct nl_host **hosts, int *n, struct nl_error *err)
{
    FILE *f = fopen(path, "r");
    char line[512], where[600];
    int lineno = 0, rc = 0;

    *hosts = NULL;
    *n = 0;
    if (!f)
        return nl_error_set(err, NL_ENOENT, "%s: %s", path, strerror(errno));
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "#\n")] = '\0';
        const char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            continue;
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        rc = add_host(hosts, n, p, strlen(p), where, err);
    }
    fclose(f);
    if (rc == 0 && *n == 0)
        rc = nl_error_set(err, NL_EINVAL, "%s: names no host", path);
    if (rc < 0) {
        nl_free(*hosts);
        *hosts = NULL;
        *n = 0;
    }
    return rc;
}

int nl_host_check(const struct nl_host *h, const struct nl_ssh_opts *so, struct nl_host_report *r,
                  struct nl_error *err)
{
    struct nl_remote rem;
    char out[256], errb[1024];
    int status, rc;

    memset(r, 0, sizeof *r);
    rc = nl_remote_open(&rem, h->name, so, err);
    if (rc == 0) {
        snprintf(r->user, sizeof r->user, "%s", rem.user);
        snprintf(r->address, sizeof r->address, "%s", rem.addr);
        r->port = rem.port;
        rc = nl_remote_prepare(&rem, so, 0, &r->would_upload, r->remote_version,
                               sizeof r->remote_version, err);
    }
    if (rc == 0)
        rc = nl_remote_exec(&rem, "nproc; awk '/^MemTotal:/ {print $2}' /proc/meminfo", out,
                            sizeof out, errb, sizeof errb, &status, err);
    if (rc == 0 && sscanf(out, "%d %lld", &r->cores, &r->mem_kb) != 2)
        rc = nl_error_set(err, NL_EIO, "%s: cannot read its core count and memory", h->name);
    nl_remote_close(&rem);
    return rc;
}

/* One worker as the driver follows it. */
struct peer {
    struct nl_remote r;
    int hosti;          /* its index in the hosts the run was given */
    unsigned char *buf; /* frame being received: header then payload */
    size_t fill, cap;
    char line[512]; /* stderr not yet ended by a newline */
    size_t line_fill;
    char last_line[512]; /* the last stderr line, for error messages */
    int eof;
    int ended; /* its channel closed with frames unread: nothing more is sent to it */
    struct nl_follow_member fm; /* what the follower keeps of it (net/follow.h) */
    /* Liveness and recovery. */
    long pid;      /* the worker's process id on its host */
    char addr[64]; /* where it listens */
    int port;
    int live;          /* it has its SETUP: heartbeats go both ways */
    int gen;           /* the generation of its latest SETUP; -1: none yet */
    double last_frame; /* when its last frame (any, heartbeats too) came */
    int dead;          /* lost in this generation */
    char why[400];     /* how it was lost */
    int faulted;       /* its FAULT came: after it, PARAMS and STATE */
    long fault_done;
    char fault_msg[400];
    float *fault_params;
    unsigned char *fault_state;
    int fault_parts; /* of its latest FAULT's report: 1 the parameters came, 2 the state */
    uint32_t fault_state_len;
    /* A frame read but not handled yet (a checkpoint's piece for a later step). */
    int held;
    uint32_t held_type, held_len;
};

/* Heartbeats from a thread while the driver validates or writes a checkpoint (which touch no
 * channel), however long that takes. */
struct keepalive {
    struct run *run;
    pthread_t t;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, started;
};

struct run {
    struct peer *p;
    int n;
    const struct nl_host *hosts;
    const struct nl_cluster_opts *co;
    uint32_t max_frame;
    int timeout; /* ms: connecting, launching, a member's answer */
    int hb_ms;   /* the heartbeat timeout */
    double last_beat;
    char secret_hex[66];
    struct nl_model *m;
    const struct nl_dataset *d;
    const struct nl_train_opts *o;
    const struct nl_train_hooks *hooks;
    struct nl_train_result *res;
    char *frozen;
    struct nl_member *members; /* (hosts) */
    /* Following the members (net/follow.h): steps, epochs, checkpoints, judging; heartbeats
     * from a thread while it validates or stores. */
    struct nl_follow f;
    struct keepalive busy;
    /* Recovery. */
    int generation, restarts;
    long start;    /* the steps completed that the current generation started from */
    float *params; /* (nparams) what the members of a generation start from */
    float *master; /* (ntrainable) the fp32 master weights after the start step */
    float *state;  /* (nstate x ntrainable) the optimizer state after it */
};

static int fault_complete(const struct peer *p)
{
    return p->faulted && p->fault_parts == 3;
}

static void vmark_dead(struct peer *p, const char *fmt, va_list ap)
{
    if (p->dead)
        return;
    p->dead = 1;
    vsnprintf(p->why, sizeof p->why, fmt, ap);
}

static void mark_dead(struct peer *p, const char *fmt, ...) NL_PRINTF(2, 3);
static void mark_dead(struct peer *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmark_dead(p, fmt, ap);
    va_end(ap);
}

/* A send to p failed. A worker that has ended (it said DONE, or why it stops) closes its channel
 * before the driver has read all it sent; while any of that is unread the failure says nothing
 * yet: p gets nothing more, and serve() reads what it sent, then the channel's end. Otherwise p
 * is lost, for the reason fmt gives. */
static void send_failed(struct peer *p, const char *fmt, ...) NL_PRINTF(2, 3);
static void send_failed(struct peer *p, const char *fmt, ...)
{
    if (ssh_channel_poll(p->r.ch, 0) > 0 || ssh_channel_poll(p->r.ch, 1) > 0) {
        p->ended = 1;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vmark_dead(p, fmt, ap);
    va_end(ap);
}

static void flush_line(struct run *run, struct peer *p)
{
    p->line[p->line_fill] = '\0';
    if (p->line_fill > 0) {
        memcpy(p->last_line, p->line, p->line_fill + 1);
        if (run->co->log)
            run->co->log(run->co->log_ud, p->r.host, p->line);
    }
    p->line_fill = 0;
}

/* Reads what is there on p's channel. Returns 1 and a frame when one is complete, 0 when none
 * is, or an error (NL_ENET: the connection failed). Heartbeats are taken here. */
static int pump(struct run *run, struct peer *p, uint32_t *type, unsigned char **payload,
                uint32_t *len, struct nl_error *err)
{
    char ebuf[1024];
    int e;

    while ((e = ssh_channel_read_nonblocking(p->r.ch, ebuf, sizeof ebuf, 1)) > 0) {
        for (int i = 0; i < e; i++) {
            if (ebuf[i] == '\n' || p->line_fill == sizeof p->line - 1)
                flush_line(run, p);
            if (ebuf[i] != '\n')
                p->line[p->line_fill++] = ebuf[i];
        }
    }
    for (;;) {
        size_t want = NL_WIRE_HEADER;
        uint32_t crc;
        if (p->fill >= NL_WIRE_HEADER) {
            if (nl_wire_parse_header(p->buf, type, len, &crc, run->max_frame) < 0)
                return nl_error_set(err, NL_EFORMAT,
                                    "%s: the worker sent a frame of %u bytes, over the %u "
                                    "expected",
                                    p->r.host, *len, run->max_frame);
            want += *len;
            if (p->fill == want) {
                if (!nl_wire_check(crc, *type, p->buf + NL_WIRE_HEADER, *len))
                    return nl_error_set(err, NL_EFORMAT,
                                        "%s: a frame from the worker fails its checksum",
                                        p->r.host);
                p->fill = 0;
                p->last_frame = nl_now();
                if (*type == NL_FRAME_HEARTBEAT)
                    continue;
                *payload = p->buf + NL_WIRE_HEADER;
                return 1;
            }
        }
        int n =
            ssh_channel_read_nonblocking(p->r.ch, p->buf + p->fill, (uint32_t)(want - p->fill), 0);
        if (n == SSH_ERROR)
            return nl_error_set(err, NL_ENET, "%s: the connection failed: %s", p->r.host,
                                ssh_get_error(p->r.s));
        if (n <= 0) { /* nothing now (0, SSH_AGAIN), or the end (SSH_EOF) */
            if (ssh_channel_is_eof(p->r.ch) && !p->eof) {
                p->eof = 1;
                flush_line(run, p);
            }
            return 0;
        }
        p->fill += (size_t)n;
    }
}

/* The worker's exit status once its channel ended; -1 when it gave none (a signal). */
static int exit_status(struct peer *p)
{
    int status = -1;
    for (int i = 0; i < 20 && status < 0; i++) {
        ssh_channel_poll_timeout(p->r.ch, 100, 1);
        status = ssh_channel_get_exit_status(p->r.ch);
        if (status < 0 && ssh_channel_is_closed(p->r.ch))
            break;
    }
    return status;
}

static int worker_gone(struct peer *p, struct nl_error *err)
{
    int status = exit_status(p);
    if (p->last_line[0])
        return nl_error_set(err, NL_EIO, "%s: the worker exited (status %d): %s", p->r.host, status,
                            p->last_line);
    return nl_error_set(err, NL_EIO, "%s: the worker exited (status %d) without a message",
                        p->r.host, status);
}

static int send_raw(struct peer *p, uint32_t type, const void *payload, size_t len,
                    struct nl_error *err)
{
    unsigned char h[NL_WIRE_HEADER];

    nl_wire_header(h, type, payload, (uint32_t)len);
    if (ssh_channel_write(p->r.ch, h, sizeof h) != (int)sizeof h)
        return nl_error_set(err, NL_ENET, "%s: sending to the worker: %s", p->r.host,
                            ssh_get_error(p->r.s));
    if (len > 0 && ssh_channel_write(p->r.ch, payload, (uint32_t)len) != (int)len)
        return nl_error_set(err, NL_ENET, "%s: sending to the worker: %s", p->r.host,
                            ssh_get_error(p->r.s));
    return 0;
}

/* Every heartbeat timeout / 4, a HEARTBEAT to every member that has its setup (but except,
 * which is in the middle of a frame). */
static void beat(struct run *run, const struct peer *except)
{
    const double t = nl_now();
    if (t - run->last_beat < 0.25e-3 * run->hb_ms)
        return;
    run->last_beat = t;
    for (int i = 0; i < run->n; i++) {
        struct peer *p = &run->p[i];
        if (p == except || !p->live || p->dead || p->fm.done || p->eof || p->ended || !p->r.ch)
            continue;
        if (send_raw(p, NL_FRAME_HEARTBEAT, NULL, 0, NULL) < 0)
            send_failed(p, "worker lost (sending to it failed during step %ld)",
                        p->fm.next_step + 1);
    }
}

static void *keepalive_main(void *arg)
{
    struct keepalive *k = arg;
    pthread_mutex_lock(&k->mu);
    while (!k->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        const long ns = ts.tv_nsec + (long)k->run->hb_ms * 250000L / 2; /* an eighth */
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&k->cv, &k->mu, &ts);
        if (!k->stop)
            beat(k->run, NULL);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

static void keepalive_start(struct keepalive *k, struct run *run)
{
    memset(k, 0, sizeof *k);
    k->run = run;
    beat(run, NULL);
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    k->started = pthread_create(&k->t, NULL, keepalive_main, k) == 0;
}

static void keepalive_stop(struct keepalive *k)
{
    if (k->started) {
        pthread_mutex_lock(&k->mu);
        k->stop = 1;
        pthread_cond_signal(&k->cv);
        pthread_mutex_unlock(&k->mu);
        pthread_join(k->t, NULL);
    }
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    beat(k->run, NULL);
}

/* The members link of the follower (net/follow.h) over the workers' channels. */
static const char *link_name(void *ud, int i)
{
    const struct run *run = ud;
    return run->hosts[run->p[i].hosti].name;
}

static int link_send(void *ud, int i, uint32_t type, const void *pl, size_t len,
                     struct nl_error *err)
{
    struct run *run = ud;
    struct peer *p = &run->p[i];
    (void)err;
    if (!p->live || p->dead || p->fm.done || p->eof || p->ended || !p->r.ch)
        return 0;
    if (send_raw(p, type, pl, len, NULL) < 0)
        send_failed(p, "worker lost (sending to it failed after epoch %d)", run->f.epochs_done);
    return 0;
}

static void link_busy(void *ud, int begin)
{
    struct run *run = ud;
    if (begin)
        keepalive_start(&run->busy, run);
    else
        keepalive_stop(&run->busy);
}

/* Waits up to timeout_ms for p's next frame; the others keep their heartbeats. */
static int next_frame(struct run *run, struct peer *p, uint32_t *type, unsigned char **payload,
                      uint32_t *len, int timeout_ms, struct nl_error *err)
{
    const double deadline = nl_now() + timeout_ms * 1e-3;
    for (;;) {
        int rc = pump(run, p, type, payload, len, err);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        if (p->eof)
            return worker_gone(p, err);
        if (run->co->stop && *run->co->stop)
            return nl_error_set(err, NL_ECANCELED, "stopped while starting the workers");
        if (nl_now() > deadline)
            return nl_error_set(err, NL_ETIMEDOUT, "%s: the worker did not answer within %d ms",
                                p->r.host, timeout_ms);
        beat(run, p);
        ssh_channel_poll_timeout(p->r.ch, 50, 0);
    }
}

/* A frame to p, a megabyte at a time, the others' heartbeats in between. */
static int send_frame(struct run *run, struct peer *p, uint32_t type, const void *payload,
                      size_t len, struct nl_error *err)
{
    unsigned char h[NL_WIRE_HEADER];
    const unsigned char *b = payload;

    nl_wire_header(h, type, payload, (uint32_t)len);
    if (ssh_channel_write(p->r.ch, h, sizeof h) != (int)sizeof h)
        goto fail;
    while (len > 0) {
        uint32_t n = len > (1u << 20) ? (1u << 20) : (uint32_t)len;
        int w = ssh_channel_write(p->r.ch, b, n);
        if (w <= 0)
            goto fail;
        b += w;
        len -= (size_t)w;
        beat(run, p);
    }
    return 0;
fail:
    return nl_error_set(err, NL_ENET, "%s: sending to the worker: %s", p->r.host,
                        ssh_get_error(p->r.s));
}

static void close_all(struct run *run)
{
    for (int i = 0; i < run->n; i++) {
        nl_remote_close(&run->p[i].r);
        nl_free(run->p[i].buf);
        nl_free(run->p[i].fault_params);
        nl_free(run->p[i].fault_state);
    }
}

/* Starts `nnlab worker` on p's host over a new channel of its session, and gives it the secret. */
static int launch(struct run *run, struct peer *p, struct nl_error *err)
{
    const struct nl_cluster_opts *co = run->co;
    char cmd[512];
    int k = snprintf(cmd, sizeof cmd, "%s worker", p->r.path);
    if (co->port_lo || co->port_hi)
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, " --port-range %d-%d", co->port_lo,
                      co->port_hi);
    if (co->bind)
        snprintf(cmd + k, sizeof cmd - (size_t)k, " --bind %s", co->bind);
    p->r.ch = ssh_channel_new(p->r.s);
    if (!p->r.ch || ssh_channel_open_session(p->r.ch) != SSH_OK ||
        ssh_channel_request_exec(p->r.ch, cmd) != SSH_OK ||
        ssh_channel_write(p->r.ch, run->secret_hex, 65) != 65)
        return nl_error_set(err, NL_ENET, "%s: launch: cannot start the worker: %s", p->r.host,
                            ssh_get_error(p->r.s));
    return 0;
}

/* The worker's LISTEN: its port, process id and address. */
static int read_listen(struct run *run, struct peer *p, struct nl_error *err)
{
    uint32_t type, len;
    unsigned char *pl;
    char addr[64] = "";
    int port = 0;
    long pid = 0;
    int rc = next_frame(run, p, &type, &pl, &len, run->timeout, err);
    if (rc < 0)
        return rc;
    if (type != NL_FRAME_LISTEN || len >= NL_LISTEN_MAX)
        return nl_error_set(err, NL_EFORMAT, "%s: launch: the worker did not say where it listens",
                            p->r.host);
    if (nl_listen_decode(pl, len, &port, &pid, addr) < 0)
        return nl_error_set(err, NL_EFORMAT, "%s: launch: the worker listens on '%.*s'?", p->r.host,
                            (int)len, (const char *)pl);
    p->port = port;
    p->pid = pid;
    snprintf(p->addr, sizeof p->addr, "%s", addr[0] ? addr : p->r.addr);
    return 0;
}

/* Ends a lost worker's process when its host still answers (a stalled one would linger) and
 * closes its channel, each wait at most the heartbeat timeout; a session that does not answer
 * in that time is closed too (a restart reconnects). Run with the others' keepalive. */
static void end_worker(struct run *run, struct peer *p)
{
    if (p->pid > 0 && !p->eof && p->r.s && ssh_is_connected(p->r.s)) {
        long t = run->hb_ms / 1000 + 1, restore = run->timeout / 1000 + 1;
        char cmd[64];
        int ok = 0;
        ssh_options_set(p->r.s, SSH_OPTIONS_TIMEOUT, &t);
        snprintf(cmd, sizeof cmd, "kill -9 %ld", p->pid);
        ssh_channel ch = ssh_channel_new(p->r.s);
        if (ch && ssh_channel_open_session(ch) == SSH_OK &&
            ssh_channel_request_exec(ch, cmd) == SSH_OK) {
            const double deadline = nl_now() + 1e-3 * run->hb_ms;
            while (!ssh_channel_is_eof(ch) && ssh_channel_is_open(ch) && nl_now() < deadline) {
                char b[256];
                if (ssh_channel_read_timeout(ch, b, sizeof b, 0, 100) == SSH_ERROR)
                    break;
            }
            ok = ssh_channel_is_eof(ch);
        }
        if (ch)
            ssh_channel_free(ch);
        ssh_options_set(p->r.s, SSH_OPTIONS_TIMEOUT, &restore);
        if (!ok) {
            nl_remote_close(&p->r); /* frees the worker's channel too */
            return;
        }
    }
    if (p->r.ch) {
        if (ssh_channel_is_open(p->r.ch))
            ssh_channel_close(p->r.ch);
        ssh_channel_free(p->r.ch);
        p->r.ch = NULL;
    }
}

/* One frame from member i: a FAULT and the report after it are the recovery's, the rest the
 * follower's (net/follow.h). 0, NL_FOLLOW_HOLD, or an error. */
static int handle_frame(struct run *run, int i, uint32_t type, const unsigned char *pl,
                        uint32_t len, struct nl_error *err)
{
    struct peer *p = &run->p[i];
    const size_t pbytes = run->m->nparams * sizeof(float);

    if (type == NL_FRAME_FAULT) {
        nl_fault_decode(pl, len, &p->fault_done, p->fault_msg, sizeof p->fault_msg);
        p->faulted = 1;
        p->fault_parts = 0; /* a report of its own follows: not an earlier recovery's */
        return 0;
    }
    if (type == NL_FRAME_PARAMS && p->faulted && len == pbytes) {
        if (!p->fault_params && !(p->fault_params = nl_alloc_floats(run->m->nparams)))
            return nl_error_set(err, NL_ENOMEM, "out of memory for %s's parameters", p->r.host);
        memcpy(p->fault_params, pl, len);
        p->fault_parts |= 1;
        return 0;
    }
    if (type == NL_FRAME_STATE && p->faulted && len >= NL_STATE_HEADER) {
        nl_free(p->fault_state);
        if (!(p->fault_state = nl_malloc(len)))
            return nl_error_set(err, NL_ENOMEM, "out of memory for %s's state", p->r.host);
        memcpy(p->fault_state, pl, len);
        p->fault_parts |= 2;
        p->fault_state_len = len;
        return 0;
    }
    int rc = p->faulted && (type == NL_FRAME_STATE || type == NL_FRAME_PARAMS)
                 ? NL_FOLLOW_OTHER
                 : nl_follow_frame(&run->f, i, type, pl, len, err);
    if (rc == NL_FOLLOW_OTHER)
        return nl_error_set(err, NL_EFORMAT, "%s: an unexpected frame (type %u)", p->r.host, type);
    return rc;
}

/* Reads and handles what member i sent. It is lost when its channel ends or fails, or when
 * nothing came for the heartbeat timeout. Returns 1 when a frame came, 0, or an error. While
 * following (not recovering), a member whose reports are too far ahead is not read. */
static int serve(struct run *run, int i, int recovering, struct nl_error *err)
{
    struct peer *p = &run->p[i];
    int progressed = 0;

    for (;;) {
        uint32_t type, len;
        unsigned char *pl;
        if (!recovering && !nl_follow_readable(&run->f, i)) {
            p->last_frame = nl_now(); /* not read now: its silence says nothing */
            return progressed;
        }
        int got;
        if (p->held) {
            if (recovering) {
                p->held = 0; /* a checkpoint that will not be written */
                continue;
            }
            type = p->held_type;
            len = p->held_len;
            pl = p->buf + NL_WIRE_HEADER;
            got = 1;
        } else {
            got = pump(run, p, &type, &pl, &len, err);
        }
        if (got == NL_ENET) {
            mark_dead(p, "connection lost (%s, during step %ld)", ssh_get_error(p->r.s),
                      p->fm.next_step + 1);
            return progressed;
        }
        if (got < 0)
            return got;
        if (got == 0) {
            if (p->eof) {
                const int status = exit_status(p);
                /* A worker that stopped on an error of its own (it said why): the run's error. */
                if (status == 1 && p->last_line[0] && !recovering)
                    return worker_gone(p, err);
                if (status >= 0)
                    mark_dead(p, "worker died (exited with status %d during step %ld)", status,
                              p->fm.next_step + 1);
                else
                    mark_dead(p, "worker died (connection closed during step %ld)",
                              p->fm.next_step + 1);
            } else if (nl_now() - p->last_frame > 1e-3 * run->hb_ms) {
                mark_dead(p, "worker stalled (no heartbeat for %.1f s during step %ld)",
                          nl_now() - p->last_frame, p->fm.next_step + 1);
            }
            return progressed;
        }
        /* While recovering no checkpoint is made: its pieces are dropped (net/follow.c). */
        int rc = handle_frame(run, i, type, pl, len, err);
        if (rc < 0)
            return rc;
        p->held = rc == NL_FOLLOW_HOLD;
        if (p->held) {
            p->held_type = type;
            p->held_len = len;
            p->last_frame = nl_now();
            return progressed;
        }
        progressed = 1;
        if (p->fm.done)
            return progressed; /* it ends its channel now */
    }
}

static void wait_a_little(struct run *run)
{
    struct pollfd pf[64];
    int np = 0;
    for (int i = 0; i < run->n && np < 64; i++)
        if (!run->p[i].fm.done && !run->p[i].dead && run->p[i].r.s)
            pf[np++] = (struct pollfd){.fd = ssh_get_fd(run->p[i].r.s), .events = POLLIN};
    poll(pf, (nfds_t)np, 20);
}

#define FAULTED 1 /* follow(): a member was lost or reported a fault */
#define OVER    2 /* recover(): early stopping ended the run at the recovery's step */

/* The members link's loop over the workers' channels (net/follow.h). */
static int link_serve(void *ud, int i, struct nl_error *err)
{
    return serve(ud, i, 0, err);
}

/* A member lost or faulted ends the follow loop with FAULTED; once the run is over (stopped
 * early, or its last epoch ended: weights, checkpoint and event are the driver's) a loss takes
 * nothing with it: members that finish close their connections while a slower one still ends
 * its own, so a loss seen then is not the run's failure. */
static int link_check(void *ud, int progressed, struct nl_error *err)
{
    struct run *run = ud;
    int lost = 0;
    (void)progressed;
    beat(run, NULL);
    for (int i = 0; i < run->n; i++)
        lost |= run->p[i].dead || run->p[i].faulted;
    if (lost && (run->res->stopped_early || run->f.epochs_done >= run->o->epochs))
        return NL_FOLLOW_END;
    if (lost)
        return FAULTED;
    if (run->co->stop && *run->co->stop)
        return nl_error_set(err, NL_ECANCELED, "training stopped");
    return 0;
}

static void link_wait(void *ud)
{
    wait_a_little(ud);
}

/* Follows the members until all are done (0), one is lost or reports a fault (FAULTED), or an
 * error. */
static int follow(struct run *run, struct nl_error *err)
{
    for (int i = 0; i < run->n; i++)
        run->p[i].last_frame = nl_now();
    return nl_follow_run(&run->f, err);
}

/* Sends member i its SETUP, its partition unless cached, the parameters, and (has_state) its
 * slice of the master weights and optimizer state: a member of the current generation, starting
 * after `start` steps. */
static int setup_member(struct run *run, int i, long start, int has_state, struct nl_error *err)
{
    struct peer *p = &run->p[i];
    const struct nl_dataset *d = run->d;
    const struct nl_model *m = run->m;
    const int n = run->n;
    struct nl_setup s = {
        .rank = i,
        .size = n,
        .o = *run->o,
        .bf16 = run->co->bf16,
        .plaintext = run->co->insecure_plaintext,
        .timeout_ms = run->timeout,
        .generation = run->generation,
        .start = start,
        .has_state = has_state,
        .heartbeat_ms = run->hb_ms,
        .ntrain = (uint32_t)d->split[NL_TRAIN].n,
        .shape = d->shape,
        .nclasses = d->nclasses,
        .regression = d->regression,
        .vocab = d->nvocab,
        .embed_columns = m->embed_columns,
        .embed_rows = m->embed_rows,
        .dtype = (int)d->dtype,
        .nnorm = d->nnorm < NL_PROTO_MAX_NORM ? d->nnorm : NL_PROTO_MAX_NORM,
        .members = run->members,
        .spec = m->spec_text,
        .frozen = run->frozen[0] ? run->frozen : NULL,
        .watched = run->f.judges ? run->f.watched : NULL,
        .nwatched = run->f.judges ? (int)(start / run->f.iters) : 0,
    };
    unsigned char *data = NULL, *pl;
    size_t dlen = 0;
    char *text;
    size_t tlen;
    uint32_t type, len;
    int rc;

    s.o.threads = run->hosts[p->hosti].cores;
    s.o.sync = NULL;
    s.o.resume = NULL;
    memcpy(s.mean, d->mean, (size_t)s.nnorm * sizeof(float));
    memcpy(s.std, d->std, (size_t)s.nnorm * sizeof(float));
    rc = nl_partition_payload(d, run->o->batch, run->o->seed, n, i, &data, &dlen, s.data_hash, err);
    if (rc == 0)
        rc = nl_setup_encode(&s, &text, &tlen, err);
    if (rc == 0) {
        rc = send_frame(run, p, NL_FRAME_SETUP, text, tlen, err);
        nl_free(text);
    }
    p->live = 1;
    p->gen = run->generation;
    p->last_frame = nl_now();
    p->fm.next_step = start;
    p->fm.done = 0;
    if (rc == 0)
        rc = next_frame(run, p, &type, &pl, &len, run->timeout, err);
    if (rc == 0 && (type != NL_FRAME_HAVE || len != 1))
        rc = nl_error_set(err, NL_EFORMAT,
                          "%s: the worker did not answer its setup (frame type %u of %u bytes)",
                          p->r.host, type, len);
    if (rc == 0 && pl[0] == 0)
        rc = send_frame(run, p, NL_FRAME_DATA, data, dlen, err);
    nl_free(data);
    if (rc == 0)
        rc = send_frame(run, p, NL_FRAME_INIT, run->params, m->nparams * sizeof(float), err);
    if (rc == 0 && has_state) {
        size_t lo, hi;
        unsigned char *b;
        size_t bytes;
        nl_allreduce_state_bounds(m->nreduce, m->ntrainable, n, i, &lo, &hi);
        rc = nl_state_encode_slice(&b, &bytes, lo, hi, start, run->master, run->state,
                                   m->ntrainable, run->f.nstate, err);
        if (rc < 0)
            return rc;
        rc = send_frame(run, p, NL_FRAME_STATE, b, bytes, err);
        nl_free(b);
    }
    return rc;
}

/* Whether a member whose setup failed with rc is lost (its process or connection ended, or it
 * did not answer) rather than the run failing: a worker that exited with status 1 after saying
 * why stopped on an error of its own. */
static int lost_in_setup(struct peer *p, int rc)
{
    if (rc == NL_ENET || rc == NL_ETIMEDOUT)
        return 1;
    return rc == NL_EIO && p->eof && !(exit_status(p) == 1 && p->last_line[0]);
}

/* A generation: the member list as it stands, then every member's setup. FAULTED when a member
 * was lost on the way (it is marked dead; the members set up before it are left to be called
 * off by a recovery, those after it still wait for their SETUP). */
static int setup_generation(struct run *run, long start, int has_state, struct nl_error *err)
{
    run->start = start;
    for (int i = 0; i < run->n; i++) {
        struct peer *p = &run->p[i];
        snprintf(run->members[i].name, sizeof run->members[i].name, "%.63s",
                 run->hosts[p->hosti].name);
        snprintf(run->members[i].addr, sizeof run->members[i].addr, "%s", p->addr);
        run->members[i].port = p->port;
        p->fm.total.host = run->hosts[p->hosti].name;
        run->f.step_w[i].host = p->fm.total.host;
    }
    run->f.ndone = 0;
    for (int i = 0; i < run->n; i++) {
        struct peer *p = &run->p[i];
        int rc = setup_member(run, i, start, has_state, err);
        if (rc < 0 && lost_in_setup(p, rc)) {
            mark_dead(p, "worker lost while being set up for step %ld (%s)", start, err->msg);
            return FAULTED;
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Tells every member set up in this generation to stop (ABORT). Members still waiting for this
 * generation's SETUP (its setup lost a member before theirs) have nothing to call off or
 * report. */
static void call_off(struct run *run)
{
    for (int i = 0; i < run->n; i++) {
        struct peer *p = &run->p[i];
        if (!p->dead && !p->fm.done && !p->ended && p->gen == run->generation &&
            send_raw(p, NL_FRAME_ABORT, NULL, 0, NULL) < 0)
            send_failed(p, "worker lost (sending to it failed during step %ld)",
                        p->fm.next_step + 1);
    }
}

/* One round of gather_reports(): serves every member of the generation that has not reported.
 * 1 when some still wait for theirs, 0 when none does, or an error; *progressed: a frame came. */
static int gather_round(struct run *run, int *progressed, struct nl_error *err)
{
    int waiting = 0;
    for (int i = 0; i < run->n; i++) {
        struct peer *p = &run->p[i];
        if (p->dead || p->fm.done || fault_complete(p) || p->gen != run->generation)
            continue;
        int got = serve(run, i, 1, err);
        if (got < 0)
            return got;
        *progressed |= got;
        waiting += !p->dead && !p->fm.done && !fault_complete(p);
    }
    return waiting > 0;
}

/* Reads the survivors' FAULT, PARAMS and STATE until each has reported, is lost or done; one that
 * has not reported by the deadline is lost. 0 or an error. */
static int gather_reports(struct run *run, struct nl_error *err)
{
    const struct nl_cluster_opts *co = run->co;
    /* Survivors may be rebuilding a mesh when they learn of the loss: they give up within the
     * mesh's own timeout. */
    const double deadline = nl_now() + 1e-3 * (run->timeout + 2 * run->hb_ms);
    run->f.recovering = 1;
    for (;;) {
        int progressed = 0;
        int waiting = gather_round(run, &progressed, err);
        if (waiting < 0) {
            run->f.recovering = 0;
            return waiting;
        }
        if (!waiting)
            break;
        if (nl_now() > deadline) {
            for (int i = 0; i < run->n; i++)
                if (!run->p[i].fm.done && !fault_complete(&run->p[i]) &&
                    run->p[i].gen == run->generation)
                    mark_dead(&run->p[i], "worker lost (it did not report after step %ld)",
                              run->p[i].fm.next_step);
            break;
        }
        if (co->stop && *co->stop) {
            run->f.recovering = 0;
            return nl_error_set(err, NL_ECANCELED, "training stopped");
        }
        beat(run, NULL);
        if (!progressed)
            wait_a_little(run);
    }
    run->f.recovering = 0;
    return 0;
}

/* Whether the run can go on after the reports: *first_dead, the first member lost (-1: none), or
 * an error when a member is already done, when nobody was lost but a member faulted, or when
 * nobody is left. */
static int count_lost(const struct run *run, int *first_dead, struct nl_error *err)
{
    int nsurv = 0, ndead = 0;
    *first_dead = -1;
    for (int i = 0; i < run->n; i++) {
        const struct peer *p = &run->p[i];
        if (p->dead) {
            ndead++;
            if (*first_dead < 0)
                *first_dead = i;
        } else if (p->fm.done) {
            const int fd = *first_dead;
            return nl_error_set(err, NL_EIO, "%s: %s, at the very end of the run",
                                run->p[fd >= 0 ? fd : i].r.host,
                                fd >= 0 ? run->p[fd].why : "a worker was lost");
        } else {
            nsurv++;
        }
    }
    if (ndead == 0) {
        /* Nobody was lost: the members could not go on by themselves (a mesh they cannot build,
         * say). That is the run's error. */
        for (int i = 0; i < run->n; i++)
            if (run->p[i].faulted)
                return nl_error_set(err, NL_EIO, "%s: %s", run->p[i].r.host, run->p[i].fault_msg);
    }
    if (nsurv == 0)
        return nl_error_set(err, NL_EIO, "%s: %s; no worker is left to go on",
                            run->p[*first_dead].r.host, run->p[*first_dead].why);
    return 0;
}

/* Survivor p's slice of the master weights and optimizer state after step R, from the two copies
 * its report holds, into the run's. */
static int take_slice(struct run *run, const struct peer *p, long R, struct nl_error *err)
{
    const size_t nt = run->m->ntrainable;
    if (p->gen != run->generation || !fault_complete(p))
        return nl_error_set(err, NL_EIO, "%s: no report of its state after step %ld", p->r.host, R);
    const unsigned char *b = p->fault_state;
    struct nl_state_head h;
    nl_state_head_decode(&h, b);
    const size_t lo = (size_t)h.lo, hi = (size_t)h.hi;
    const size_t own = hi - lo, copy = own * (size_t)(1 + run->f.nstate);
    if (lo > hi || hi > nt || h.copies != 2 ||
        p->fault_state_len != nl_state_size(own, run->f.nstate, 2))
        return nl_error_set(err, NL_EFORMAT, "%s: its optimizer state is malformed", p->r.host);
    const int which = (long)h.step == R ? 0 : (long)h.step2 == R ? 1 : -1;
    if (which < 0)
        return nl_error_set(err, NL_EIO,
                            "%s: its optimizer state is after step %ld or %ld, not %ld; the run "
                            "cannot go on",
                            p->r.host, (long)h.step, (long)h.step2, R);
    const float *f = (const float *)(const void *)(b + NL_STATE_HEADER) + (size_t)which * copy;
    memcpy(run->master + lo, f, own * sizeof(float));
    for (int k = 0; k < run->f.nstate; k++)
        memcpy(run->state + (size_t)k * nt + lo, f + own * (size_t)(1 + k), own * sizeof(float));
    return 0;
}

/* R (*R), the parameters after it, and the master weights and state after it: the survivors'
 * slices from them, the lost ones' from the parameters and the latest checkpoint. When no member
 * got past the generation's start (it was lost before the mesh stood, or in its first step) the
 * driver holds all of that already: what it set the generation up with, the lost members' slices
 * included. */
static int restore_start(struct run *run, long *R, struct nl_error *err)
{
    const struct nl_model *m = run->m;
    const size_t nt = m->ntrainable;
    int from = -1;
    *R = run->start;
    for (int i = 0; i < run->n; i++) {
        const struct peer *p = &run->p[i];
        if (!p->dead && p->gen == run->generation && p->fault_done > *R) {
            *R = p->fault_done;
            from = i;
        }
    }
    if (from < 0)
        return 0;
    memcpy(run->params, run->p[from].fault_params, m->nparams * sizeof(float));
    memcpy(run->master, run->params, nt * sizeof(float));
    memcpy(run->state, run->f.ckpt_state, (size_t)run->f.nstate * nt * sizeof(float));
    for (int i = 0; i < run->n; i++) {
        if (run->p[i].dead)
            continue;
        int rc = take_slice(run, &run->p[i], *R, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The steps up to R are done: reports them (with what came of them) and the epochs they end;
 * reports of later steps are void, those steps are done again. 0, OVER when the epoch up to R
 * ended the run, or an error (the weights of an epoch that R ends were lost). */
static int report_to(struct run *run, long R, int first_dead, struct nl_error *err)
{
    if (run->f.pending_epoch > 0 && (long)(run->f.epochs_done + 1) * run->f.iters > R)
        run->f.pending_epoch = 0;
    /* A checkpoint in the making keeps its pieces only for the next epoch's end. */
    if (run->f.cp.step >= 0 && !(run->f.cp.step == (long)(run->f.epochs_done + 1) * run->f.iters &&
                                 run->f.cp.step <= R && run->f.cp.count == run->n))
        run->f.cp.step = -1;
    int rc = nl_follow_emit(&run->f, R, err);
    run->f.force_to = 0;
    if (rc < 0)
        return rc;
    if (run->res->stopped_early)
        return OVER; /* the epoch up to R ended the run */
    if (run->f.next_emit != R || run->f.pending_epoch != 0)
        return nl_error_set(err, NL_EIO,
                            "the run cannot go on from step %ld: the weights of epoch %d were lost "
                            "with %s",
                            R, run->f.epochs_done + 1, run->p[first_dead].r.host);
    for (int k = 0; k < run->f.window; k++)
        run->f.slots[k].step = -1;
    run->f.cp.step = -1;
    for (int i = 0; i < run->n; i++)
        run->p[i].held = 0;
    return 0;
}

/* Ends lost worker p and starts a new one on its host, over a new channel of its session (or of
 * a new session when that one is gone), while --max-restarts lasts: 1 when a new worker said
 * where it listens, 0 when p is to be dropped (p->why then says why each try failed). */
static int restart(struct run *run, struct peer *p)
{
    const struct nl_cluster_opts *co = run->co;
    while (run->restarts < co->max_restarts) {
        struct keepalive k;
        struct nl_error lerr = {0};
        int rc2 = 0;
        keepalive_start(&k, run);
        end_worker(run, p);
        p->live = 0;
        p->gen = -1;
        if (!p->r.s || !ssh_is_connected(p->r.s)) {
            /* Its connection is gone: reach the host again. */
            char rv[64];
            int would;
            nl_remote_close(&p->r);
            rc2 = nl_remote_open(&p->r, run->hosts[p->hosti].name, &co->ssh, &lerr);
            if (rc2 == 0)
                rc2 = nl_remote_prepare(&p->r, &co->ssh, 1, &would, rv, sizeof rv, &lerr);
        }
        keepalive_stop(&k);
        run->restarts++;
        p->pid = 0; /* the new worker's comes with its LISTEN */
        p->eof = p->ended = 0;
        p->fill = p->line_fill = 0;
        p->last_line[0] = '\0';
        if (rc2 == 0 && launch(run, p, &lerr) == 0 && read_listen(run, p, &lerr) == 0)
            return 1;
        size_t l = strlen(p->why);
        snprintf(p->why + l, sizeof p->why - l, "; restarting it failed: %s", lerr.msg);
        if (rc2 < 0 || lerr.code == NL_ECANCELED)
            break;
    }
    return 0;
}

/* What a recovery did with its lost workers (the first 64), for its RECOVERY events. */
struct recoveries {
    struct nl_recovery rec[64];
    char what[64][400];
    int n;
};

/* Records what became of lost worker p: action is "restarted" or "dropped". */
static void note_recovery(const struct run *run, struct recoveries *rs, const struct peer *p,
                          const char *action, long R)
{
    if (rs->n >= 64)
        return;
    snprintf(rs->what[rs->n], sizeof rs->what[rs->n], "%s", p->why);
    rs->rec[rs->n] = (struct nl_recovery){
        .host = run->hosts[p->hosti].name,
        .what = rs->what[rs->n],
        .action = action,
        .restarts = run->restarts,
        .max_restarts = run->co->max_restarts,
        .step = R,
    };
    rs->n++;
}

/* Restarts every lost worker, or drops it (its data shared out among the others), noting each in
 * rs; the members that go on keep their order at the front of run->p. */
static void restart_or_drop(struct run *run, long R, struct recoveries *rs)
{
    int keep = 0;
    for (int i = 0; i < run->n; i++) {
        struct peer *p = &run->p[i];
        if (!p->dead) {
            run->p[keep++] = *p;
            continue;
        }
        /* The others keep their heartbeats meanwhile (this peer, dead and not live, is out of
         * the keepalive's way); the driver's own waits are bounded. A new worker lost before
         * it said where it listens is restarted again while restarts last; a host that cannot
         * be reached is dropped. */
        const int restarted = restart(run, p);
        if (!restarted) {
            struct keepalive k;
            keepalive_start(&k, run);
            end_worker(run, p);
            p->live = 0;
            keepalive_stop(&k);
        }
        note_recovery(run, rs, p, restarted ? "restarted" : "dropped", R);
        if (restarted) {
            p->dead = 0;
            run->p[keep++] = *p;
        } else {
            nl_remote_close(&p->r);
            nl_free(p->buf);
            nl_free(p->fault_params);
            nl_free(p->fault_state);
        }
    }
    run->n = run->f.n = keep;
}

/* The members that go on start clean, and each lost worker's RECOVERY event goes out. */
static int announce(struct run *run, struct recoveries *rs, long R, struct nl_error *err)
{
    for (int i = 0; i < run->n; i++) {
        struct peer *p = &run->p[i];
        p->faulted = 0;
        p->dead = 0;
        p->why[0] = '\0';
    }
    for (int k = 0; k < rs->n; k++) {
        rs->rec[k].workers = run->n;
        if (run->hooks && run->hooks->event) {
            struct nl_event ev = {
                .kind = NL_EVENT_RECOVERY,
                .epoch = (int)(R / run->f.iters) + 1,
                .epochs = run->o->epochs,
                .iter = R % run->f.iters,
                .iters = run->f.iters,
                .recovery = &rs->rec[k],
            };
            if (run->hooks->event(run->hooks->ud, &ev))
                return nl_error_set(err, NL_ECANCELED, "training stopped");
        }
    }
    return 0;
}

/* A member was lost (or reported a fault). Every other member is told to stop (ABORT) and
 * reports the steps it completed, its parameters and its slice of the state (net/worker.c says
 * why that is consistent); the run goes on from R, the most steps any survivor completed: each
 * lost worker is restarted on its host while restarts last and its host answers, or dropped and
 * its data shared out among the others. Each phase reads what the one before it gathered; their
 * test is test_cluster_faults, which exercises every phase with real processes. */
static int recover(struct run *run, struct nl_error *err)
{
    struct recoveries rs = {.n = 0};
    int first_dead = -1;
    long R = 0;

    call_off(run);
    int rc = gather_reports(run, err);
    if (rc == 0)
        rc = count_lost(run, &first_dead, err);
    if (rc == 0)
        rc = restore_start(run, &R, err);
    if (rc == 0)
        rc = report_to(run, R, first_dead, err);
    if (rc != 0)
        return rc; /* an error, or OVER */
    restart_or_drop(run, R, &rs);
    if (run->n == 0)
        return nl_error_set(err, NL_EIO, "%s: %s; no worker is left to go on", rs.rec[0].host,
                            rs.rec[0].what);
    rc = announce(run, &rs, R, err);
    if (rc < 0)
        return rc;
    run->generation++;
    return setup_generation(run, R, 1, err);
}

/* The frozen layers' names, comma-separated ("" when none), or NULL when out of memory. The
 * members freeze the same ones, so that the initial weights sent in INIT have their layout and
 * only the trainable range is exchanged. */
static char *frozen_names(const struct nl_model *m)
{
    size_t fcap = 1;
    for (int i = 0; i < m->nlayers; i++)
        fcap += strlen(m->layers[i].name) + 1;
    char *frozen = nl_calloc(fcap, 1);
    for (int i = 0; frozen && i < m->nlayers; i++) {
        if (!m->layers[i].frozen)
            continue;
        if (frozen[0])
            strcat(frozen, ",");
        strcat(frozen, m->layers[i].name);
    }
    return frozen;
}

/* Sets up the follower over the members link and allocates the run's buffers (run->p is
 * allocated, run->n set). What it allocated is released by run_release() however it ends. */
static int run_alloc(struct run *run, struct nl_error *err)
{
    const struct nl_model *m = run->m;
    run->f = (struct nl_follow){
        .link = {.name = link_name,
                 .send = link_send,
                 .busy = link_busy,
                 .serve = link_serve,
                 .check = link_check,
                 .wait = link_wait,
                 .ud = run},
        .n = run->n,
        .window = WINDOW,
        .member0 = (unsigned char *)&run->p[0].fm,
        .member_stride = sizeof *run->p,
        .m = run->m,
        .d = run->d,
        .o = run->o,
        .hooks = run->hooks,
        .res = run->res,
    };
    int rc = nl_follow_init(&run->f, err);
    if (rc < 0)
        return rc;
    run->timeout = run->co->ssh.timeout_ms > 0 ? run->co->ssh.timeout_ms : 30000;
    run->hb_ms = run->co->heartbeat_ms > 0 ? run->co->heartbeat_ms : NL_HEARTBEAT_DEFAULT_MS;
    const size_t nt = m->ntrainable, sfloats = (size_t)run->f.nstate * nt;
    run->members = nl_calloc((size_t)run->n, sizeof *run->members);
    run->params = nl_alloc_floats(m->nparams);
    run->master = nl_alloc_floats(nt + 1);
    run->state = nl_alloc_floats(sfloats + 1);
    run->f.force_params = run->params;
    run->f.force_state = run->state;
    /* The largest frame a worker sends: its parameters, or two copies of its slice's state. */
    const size_t pbytes = m->nparams * sizeof(float);
    const size_t sbytes = nl_state_size(nt + 16, run->f.nstate, 2);
    run->max_frame = (uint32_t)((pbytes > sbytes ? pbytes : sbytes) + 4096);
    run->frozen = frozen_names(m);
    if (!run->members || !run->params || !run->master || !run->state || !run->frozen)
        return nl_error_set(err, NL_ENOMEM, "out of memory for %d workers", run->n);
    return 0;
}

/* The run's secret, as the 64 hex digits and newline each worker reads first. */
static int make_secret(struct run *run, struct nl_error *err)
{
    unsigned char secret[32];
    int rc = nl_wire_random(secret, sizeof secret, err);
    if (rc < 0)
        return rc;
    for (int i = 0; i < 32; i++)
        sprintf(run->secret_hex + 2 * i, "%02x", secret[i]);
    run->secret_hex[64] = '\n';
    return 0;
}

/* Reaches every host, settles the binary, starts the workers, learns their ports. */
static int start_workers(struct run *run, struct nl_error *err)
{
    for (int i = 0; i < run->n; i++) {
        struct peer *p = &run->p[i];
        char rv[64];
        int would;
        p->hosti = i;
        p->gen = -1;
        p->cap = NL_WIRE_HEADER + run->max_frame;
        p->buf = nl_malloc(p->cap);
        if (!p->buf)
            return nl_error_set(err, NL_ENOMEM, "out of memory for %d workers", run->n);
        int rc = nl_remote_open(&p->r, run->hosts[i].name, &run->co->ssh, err);
        if (rc == 0)
            rc = nl_remote_prepare(&p->r, &run->co->ssh, 1, &would, rv, sizeof rv, err);
        if (rc == 0)
            rc = launch(run, p, err);
        if (rc < 0)
            return rc;
    }
    for (int i = 0; i < run->n; i++) {
        int rc = read_listen(run, &run->p[i], err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Every member starts from the driver's weights (initialised, or loaded by --init, or a
 * checkpoint's with its optimizer state when resuming): the steps the run starts after. */
static long start_state(struct run *run)
{
    const struct nl_model *m = run->m;
    const size_t nt = m->ntrainable;
    long start;
    memcpy(run->params, m->params, m->nparams * sizeof(float));
    memcpy(run->master, m->params, nt * sizeof(float));
    const float *state = nl_follow_resume(&run->f, &start);
    if (state)
        memcpy(run->state, state, (size_t)run->f.nstate * nt * sizeof(float));
    return start;
}

/* Sets up the first generation and follows the members, recovering from each loss, until the run
 * is over: 0 or an error. A member lost while a generation is set up (FAULTED) is recovered from
 * as one lost while training. */
static int train(struct run *run, struct nl_error *err)
{
    const long start = start_state(run);
    int rc = setup_generation(run, start, run->o->resume != NULL, err);
    for (;;) {
        if (rc == 0)
            rc = follow(run, err);
        if (rc != FAULTED)
            break;
        rc = recover(run, err);
    }
    return rc == OVER ? 0 : rc;
}

/* Every host the run was given, those dropped on the way included (nothing more). */
static void fill_stats(const struct run *run, int n, struct nl_worker_metrics *stats)
{
    for (int i = 0; i < n; i++)
        stats[i] = (struct nl_worker_metrics){.host = run->hosts[i].name};
    for (int i = 0; i < run->n; i++)
        stats[run->p[i].hosti] = run->f.step_w[i];
}

static void run_release(struct run *run)
{
    close_all(run);
    nl_free(run->p);
    nl_free(run->members);
    nl_follow_release(&run->f);
    nl_free(run->params);
    nl_free(run->master);
    nl_free(run->state);
    nl_free(run->frozen);
}

/* The run in its steps: buffers, workers, training with its recoveries, the run's end; one exit
 * path releases everything. Its epoch end is shared with nl_train (end_epoch). */
int nl_cluster_train(const struct nl_host *hosts, int n, const struct nl_cluster_opts *co,
                     struct nl_model *m, const struct nl_dataset *d, const struct nl_train_opts *o,
                     const struct nl_train_hooks *hooks, struct nl_train_result *res,
                     struct nl_worker_metrics *stats, struct nl_error *err)
{
    struct run run = {
        .n = n, .co = co, .hosts = hosts, .m = m, .d = d, .o = o, .hooks = hooks, .res = res};

    if (n < 1)
        return nl_error_set(err, NL_EINVAL, "no hosts to train on");
    run.p = nl_calloc((size_t)n, sizeof *run.p);
    if (!run.p)
        return nl_error_set(err, NL_ENOMEM, "out of memory for %d workers", n);
    int rc = run_alloc(&run, err);
    if (rc == 0)
        rc = make_secret(&run, err);
    if (rc == 0)
        rc = start_workers(&run, err);
    if (rc == 0)
        rc = train(&run, err);
    if (rc >= 0)
        rc = nl_follow_finish(&run.f, err);
    if (rc >= 0 && stats)
        fill_stats(&run, n, stats);
    run_release(&run);
    return rc < 0 ? rc : 0;
}
