/* The driver of a cluster run. See include/nnlab/driver.h; the conversation with each worker
 * is described at the top of net/worker.c.
 *
 * The driver starts the workers one host at a time, collects where each listens, sends every
 * worker the member list, its setup and (unless its cache holds it) its partition, then follows
 * the run: it reads every worker's channel without blocking, forwards stderr lines, gathers the
 * METRIC frames of each step into one ITER event once every worker has reported it, and turns
 * rank 0's WEIGHTS into the epoch's validation, checkpoint and EPOCH event. It carries no
 * parameter traffic. On the end of the run, an error or a stop, it closes every channel: the
 * workers read the end of their stdin and exit.
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
 * status 1 after saying why (a non-finite loss, say) is not a loss but the run's error.
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
#define WINDOW 64

static double now(void)
{
    return nl_now();
}

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

/* Steps in flight: the sum of every worker's metrics, emitted when all have come. */
struct slot {
    long step; /* 0-based global step, -1 when free */
    int count;
    int epoch;
    long iter;
    long samples, correct;
    double loss_sum;
    double busy;         /* the slowest worker's compute and communication seconds */
    struct nl_metric *w; /* (workers) each one's report */
};

/* Training time is the workers' own: per step, the slowest worker's compute and communication
 * seconds (the driver may read their reports late). */
struct epoch_stats {
    long samples, correct, total_samples;
    double loss, busy, train_seconds;
};

/* One worker as the driver follows it. */
struct peer {
    struct nl_remote r;
    int hosti;          /* its index in the hosts the run was given */
    unsigned char *buf; /* frame being received: header then payload */
    size_t fill, cap;
    char line[512]; /* stderr not yet ended by a newline */
    size_t line_fill;
    char last_line[512]; /* the last stderr line, for error messages */
    int done, eof;
    long next_step; /* 0-based step of its next METRIC */
    struct nl_worker_metrics total;
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

/* A checkpoint being put together from the members' pieces: each member's slice of the master
 * weights and optimizer state (STATE), and within an epoch rank 0's parameters (PARAMS; at an
 * epoch's end its WEIGHTS). One at a time: a piece of a later step waits in its channel. */
struct ckpt {
    long step;     /* -1: none */
    int count;     /* members whose slice came */
    int params;    /* the parameters came */
    float *state;  /* (nstate x ntrainable) */
    float *values; /* (nparams) */
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
    /* Following the steps. */
    struct slot slots[WINDOW];
    struct nl_metric *slot_metrics;
    long iters, next_emit;
    struct epoch_stats es;
    int pending_epoch, epochs_done, ndone;
    float *weights;                   /* rank 0's latest epoch-end weights */
    struct nl_worker_metrics *step_w; /* (hosts) */
    /* Recovery. */
    int generation, restarts, nstate;
    long start;        /* the steps completed that the current generation started from */
    float *params;     /* (nparams) what the members of a generation start from */
    float *master;     /* (ntrainable) the fp32 master weights after the start step */
    float *state;      /* (nstate x ntrainable) the optimizer state after it */
    float *ckpt_state; /* (nstate x ntrainable) of the latest checkpoint; zeros before one */
    struct ckpt cp;
    int recovering; /* gathering the survivors' reports */
    long force_to;  /* a recovery reports every step before this one (0: none) */
    /* Judging (nl_train_judges): the plateau and early-stopping state, and each completed
     * epoch's watched accuracy (o->epochs of them). */
    int judges;
    struct nl_judge judge;
    double *watched;
};

static int fault_complete(const struct peer *p)
{
    return p->faulted && p->fault_parts == 3;
}

static void mark_dead(struct peer *p, const char *fmt, ...) NL_PRINTF(2, 3);
static void mark_dead(struct peer *p, const char *fmt, ...)
{
    va_list ap;
    if (p->dead)
        return;
    p->dead = 1;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof p->why, fmt, ap);
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
                p->last_frame = now();
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
    const double t = now();
    if (t - run->last_beat < 0.25e-3 * run->hb_ms)
        return;
    run->last_beat = t;
    for (int i = 0; i < run->n; i++) {
        struct peer *p = &run->p[i];
        if (p == except || !p->live || p->dead || p->done || p->eof || !p->r.ch)
            continue;
        if (send_raw(p, NL_FRAME_HEARTBEAT, NULL, 0, NULL) < 0)
            mark_dead(p, "worker lost (sending to it failed during step %ld)", p->next_step + 1);
    }
}

/* Heartbeats from a thread while the driver validates or writes a checkpoint (which touch no
 * channel), however long that takes. */
struct keepalive {
    struct run *run;
    pthread_t t;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, started;
};

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

/* Waits up to timeout_ms for p's next frame; the others keep their heartbeats. */
static int next_frame(struct run *run, struct peer *p, uint32_t *type, unsigned char **payload,
                      uint32_t *len, int timeout_ms, struct nl_error *err)
{
    const double deadline = now() + timeout_ms * 1e-3;
    for (;;) {
        int rc = pump(run, p, type, payload, len, err);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        if (p->eof)
            return worker_gone(p, err);
        if (run->co->stop && *run->co->stop)
            return nl_error_set(err, NL_ECANCELED, "stopped while starting the workers");
        if (now() > deadline)
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

/* An epoch is complete: rank 0's weights are its end. Validation, checkpoint, EPOCH event, judging:
 * a local run's epoch end (nl_epoch_event, nl_epoch_report, nl_epoch_watched, nl_judge_epoch).
 * During a recovery to step run->force_to, weights NULL means they were lost with rank 0 (the
 * others went past the epoch's end before the loss was seen): the epoch is reported without
 * validation, and its metrics go with a checkpoint at force_to when that step is in the next
 * epoch (the parameters and state after it are known), else with none. */
static int end_epoch(struct run *run, struct nl_model *m, const struct nl_dataset *d,
                     const struct nl_train_opts *o, const struct nl_train_hooks *hooks,
                     struct nl_train_result *res, const float *weights,
                     struct nl_worker_metrics *step_w, long iters, long steps_done,
                     struct epoch_stats *es, struct nl_error *err)
{
    const int epoch = (int)(steps_done / iters);
    struct nl_epoch_sums e = {
        .epoch = epoch,
        .iters = iters,
        .loss = es->loss,
        .correct = es->correct,
        .samples = es->samples,
        .seconds = es->busy,
        .val_loss = NAN,
        .val_accuracy = NAN,
        .lr = nl_schedule_lr(&o->schedule, o->optim.lr, steps_done, iters, (long)o->epochs * iters,
                             run->judge.plateau.factor),
        .nworkers = run->n,
        .workers = step_w,
    };
    struct nl_event ev;
    int rc;

    es->train_seconds += es->busy;
    es->total_samples += es->samples;
    if (weights)
        memcpy(m->params, weights, m->nparams * sizeof(float));
    /* A regression run's training R^2 is not gathered from the members (NaN); its validation
     * and test metrics are the driver's, as a local run's. */
    e.regression = d->regression;
    e.target_std = d->target_std;
    e.val_mae = e.val_rmse = NAN;
    if (weights && d->split[NL_VAL].n > 0) {
        struct nl_reg_sums val;
        double r2;
        rc = nl_evaluate_reg(m, d, NL_VAL, 0, o->loss, &e.val_loss, &e.val_accuracy, &val, err);
        if (rc < 0)
            return rc;
        nl_reg_finish(&val, d->target_std, &e.val_mae, &e.val_rmse, &r2);
    }
    for (int i = 0; i < run->n; i++) {
        step_w[i] = run->p[i].total;
        step_w[i].loss = step_w[i].samples > 0 ? step_w[i].loss / step_w[i].samples : 0.0;
    }
    nl_epoch_event(&e, o, res, &ev);
    const int at_force = run->force_to > 0 && !weights && steps_done + iters > run->force_to;
    struct nl_checkpoint cp;
    /* The data order of a cluster run follows from the seed and the epoch alone
     * (net/partition.c); the generator stored is seeded from them. */
    struct nl_rng rng;
    if (weights || at_force) {
        nl_rng_seed(&rng, nl_rng_epoch_seed(o->seed, epoch + at_force));
        /* The optimizer state: every member's slice of it for this step, or what a recovery
         * gathered for the step it goes on from. */
        const size_t sfloats = (size_t)run->nstate * m->ntrainable;
        const float *state = NULL;
        if (run->nstate > 0 && run->cp.step == steps_done && run->cp.count == run->n)
            state = run->cp.state;
        else if (run->nstate > 0 && run->force_to > 0 && (at_force || steps_done == run->force_to))
            state = run->state;
        if (state)
            memcpy(run->ckpt_state, state, sfloats * sizeof(float));
        cp = (struct nl_checkpoint){
            .epoch = epoch,
            .iteration = at_force ? run->force_to : steps_done,
            .params = at_force ? run->params : m->params,
            .nparams = m->nparams,
            .optim_state = state,
            .optim_floats = state ? sfloats : 0,
            .rng = &rng,
        };
    }
    /* The members' pieces of this step's checkpoint are spent once it is stored (a failed store
     * keeps them), also when the event then stops the run. */
    rc = nl_epoch_report(hooks, weights || at_force ? &cp : NULL, &ev, err);
    if ((rc == 0 || rc == NL_ECANCELED) && run->cp.step == steps_done)
        run->cp.step = -1;
    if (rc < 0)
        return rc;
    es->samples = es->correct = 0;
    es->loss = es->busy = 0;
    /* What a local run watches: validation accuracy, or training accuracy without a
     * validation split. */
    const double watched = nl_epoch_watched(&ev);
    run->watched[epoch - 1] = watched;
    if (nl_judge_epoch(&run->judge, o, epoch, watched))
        res->stopped_early = 1;
    return 0;
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
            const double deadline = now() + 1e-3 * run->hb_ms;
            while (!ssh_channel_is_eof(ch) && ssh_channel_is_open(ch) && now() < deadline) {
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

#define HOLD 2 /* handle_frame(): the frame waits until the checkpoint in progress is written */

/* Within an epoch the checkpoint is written once its pieces are in; at an epoch's end, by
 * end_epoch with the epoch's metrics. */
static int mid_checkpoint(struct run *run, struct nl_error *err)
{
    struct ckpt *c = &run->cp;
    if (c->step % run->iters == 0 || !c->params || (run->nstate > 0 && c->count < run->n))
        return 0;
    const size_t sfloats = (size_t)run->nstate * run->m->ntrainable;
    memcpy(run->ckpt_state, c->state, sfloats * sizeof(float));
    /* As a local run: one judged on training accuracy (no validation split) checkpoints at
     * epoch ends only, for a checkpoint cannot hold an epoch's accuracy so far. */
    const int epoch_ends_only = run->judges && run->d->split[NL_VAL].n == 0;
    if (run->hooks && run->hooks->checkpoint && !epoch_ends_only) {
        const int epoch = (int)(c->step / run->iters);
        struct nl_rng rng;
        nl_rng_seed(&rng, nl_rng_epoch_seed(run->o->seed, epoch + 1));
        struct nl_checkpoint cp = {
            .epoch = epoch,
            .iteration = c->step,
            .params = c->values,
            .nparams = run->m->nparams,
            .optim_state = run->nstate > 0 ? c->state : NULL,
            .optim_floats = sfloats,
            .rng = &rng,
        };
        struct keepalive k;
        keepalive_start(&k, run);
        int rc = run->hooks->checkpoint(run->hooks->ud, &cp, err);
        keepalive_stop(&k);
        if (rc < 0)
            return rc;
    }
    c->step = -1;
    return 0;
}

/* A member's piece of the checkpoint after its latest reported step. */
static int checkpoint_piece(struct run *run, int i, uint32_t type, const unsigned char *pl,
                            uint32_t len, struct nl_error *err)
{
    struct peer *p = &run->p[i];
    struct ckpt *c = &run->cp;
    const size_t nt = run->m->ntrainable;
    const long step = p->next_step; /* pieces follow the step's METRIC */

    if (c->step >= 0 && c->step != step)
        return HOLD;
    if (c->step < 0) {
        c->step = step;
        c->count = c->params = 0;
    }
    if (type == NL_FRAME_PARAMS) {
        if (len != run->m->nparams * sizeof(float))
            return nl_error_set(err, NL_EFORMAT, "%s: a checkpoint's parameters of %u bytes",
                                p->r.host, len);
        memcpy(c->values, pl, len);
        c->params = 1;
        return mid_checkpoint(run, err);
    }
    struct nl_state_head h;
    if (len < NL_STATE_HEADER)
        return nl_error_set(err, NL_EFORMAT, "%s: a malformed optimizer state", p->r.host);
    nl_state_head_decode(&h, pl);
    const size_t lo = (size_t)h.lo, hi = (size_t)h.hi, own = hi - lo;
    if (lo > hi || hi > nt || h.copies != 1 || (long)h.step != step ||
        len != nl_state_size(own, run->nstate, 1))
        return nl_error_set(err, NL_EFORMAT, "%s: a malformed optimizer state for step %ld",
                            p->r.host, step);
    const float *f = (const float *)(const void *)(pl + NL_STATE_HEADER);
    for (int k = 0; k < run->nstate; k++)
        memcpy(c->state + (size_t)k * nt + lo, f + own * (size_t)(1 + k), own * sizeof(float));
    c->count++;
    return mid_checkpoint(run, err);
}

/* One frame from member i. */
static int handle_frame(struct run *run, int i, uint32_t type, const unsigned char *pl,
                        uint32_t len, struct nl_error *err)
{
    struct peer *p = &run->p[i];
    const size_t pbytes = run->m->nparams * sizeof(float);

    if (type == NL_FRAME_METRIC && len == NL_METRIC_SIZE) {
        struct nl_metric mt;
        nl_metric_decode(&mt, pl);
        const long step = (long)(mt.epoch - 1) * run->iters + mt.iter - 1;
        if (mt.epoch < 1 || mt.epoch > run->o->epochs || mt.iter < 1 || mt.iter > run->iters ||
            step != p->next_step || (step >= run->next_emit + WINDOW && !run->recovering))
            return nl_error_set(err, NL_EFORMAT,
                                "%s: a metric for epoch %d step %d, while step %ld of the run is "
                                "due",
                                p->r.host, mt.epoch, mt.iter, run->next_emit + 1);
        p->next_step++;
        /* While recovering, reports far ahead (a member the driver lost touch with went on
         * for a while) are past what is kept: the steps are reported without them. */
        if (step >= run->next_emit + WINDOW)
            return 0;
        struct slot *sl = &run->slots[step % WINDOW];
        if (sl->step != step) {
            struct nl_metric *keep = sl->w;
            memset(sl, 0, sizeof *sl);
            memset(keep, 0, (size_t)run->n * sizeof *keep);
            sl->w = keep;
            sl->step = step;
            sl->epoch = mt.epoch;
            sl->iter = mt.iter;
        }
        sl->count++;
        sl->samples += mt.samples;
        sl->correct += mt.correct;
        sl->loss_sum += mt.loss_sum;
        if (mt.compute_seconds + mt.comm_seconds > sl->busy)
            sl->busy = mt.compute_seconds + mt.comm_seconds;
        sl->w[i] = mt;
    } else if (type == NL_FRAME_WEIGHTS && i == 0 && len == pbytes) {
        if (run->pending_epoch > 0 && run->recovering)
            return 0; /* a later epoch's, far ahead: that epoch ends without them */
        if (run->pending_epoch > 0)
            return nl_error_set(err, NL_EFORMAT, "%s: an epoch's weights came twice", p->r.host);
        memcpy(run->weights, pl, len);
        run->pending_epoch++;
    } else if (type == NL_FRAME_DONE && len == 0) {
        p->done = 1;
        run->ndone++;
    } else if (type == NL_FRAME_FAULT) {
        nl_fault_decode(pl, len, &p->fault_done, p->fault_msg, sizeof p->fault_msg);
        p->faulted = 1;
        p->fault_parts = 0; /* a report of its own follows: not an earlier recovery's */
    } else if ((type == NL_FRAME_STATE || (type == NL_FRAME_PARAMS && i == 0)) && !p->faulted) {
        return checkpoint_piece(run, i, type, pl, len, err);
    } else if (type == NL_FRAME_PARAMS && p->faulted && len == pbytes) {
        if (!p->fault_params && !(p->fault_params = nl_alloc_floats(run->m->nparams)))
            return nl_error_set(err, NL_ENOMEM, "out of memory for %s's parameters", p->r.host);
        memcpy(p->fault_params, pl, len);
        p->fault_parts |= 1;
    } else if (type == NL_FRAME_STATE && p->faulted && len >= NL_STATE_HEADER) {
        nl_free(p->fault_state);
        if (!(p->fault_state = nl_malloc(len)))
            return nl_error_set(err, NL_ENOMEM, "out of memory for %s's state", p->r.host);
        memcpy(p->fault_state, pl, len);
        p->fault_parts |= 2;
        p->fault_state_len = len;
    } else {
        return nl_error_set(err, NL_EFORMAT, "%s: an unexpected frame (type %u)", p->r.host, type);
    }
    return 0;
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
        if (!recovering &&
            ((i == 0 && run->pending_epoch > 0) || p->next_step >= run->next_emit + WINDOW)) {
            p->last_frame = now(); /* not read now: its silence says nothing */
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
                      p->next_step + 1);
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
                              p->next_step + 1);
                else
                    mark_dead(p, "worker died (connection closed during step %ld)",
                              p->next_step + 1);
            } else if (now() - p->last_frame > 1e-3 * run->hb_ms) {
                mark_dead(p, "worker stalled (no heartbeat for %.1f s during step %ld)",
                          now() - p->last_frame, p->next_step + 1);
            }
            return progressed;
        }
        int rc;
        if (recovering && !p->faulted && (type == NL_FRAME_STATE || type == NL_FRAME_PARAMS))
            rc = 0; /* a checkpoint's piece: no checkpoint is made while recovering */
        else
            rc = handle_frame(run, i, type, pl, len, err);
        if (rc < 0)
            return rc;
        p->held = rc == HOLD;
        if (p->held) {
            p->held_type = type;
            p->held_len = len;
            p->last_frame = now();
            return progressed;
        }
        progressed = 1;
        if (p->done)
            return progressed; /* it ends its channel now */
    }
}

/* Emits, in order, the steps every member reported and the epochs they complete; with force_to,
 * every step before it as well (steps the members completed, whose reports a lost worker took
 * with it). At an epoch's end it waits for rank 0's weights (they precede its next step's
 * metric on its channel).
 * Longer than a screen (about 110 lines) because its two halves, a step's event and an epoch's
 * end, share the order of the reports they consume: split, each would need the other's cursor. */
static int emit(struct run *run, long force_to, struct nl_error *err)
{
    const struct nl_train_opts *o = run->o;
    const long iters = run->iters;
    int rc;

    run->force_to = force_to;

    for (;;) {
        const long ne = run->next_emit;
        if (ne > 0 && ne % iters == 0 && ne / iters > run->epochs_done) {
            /* The epoch's weights: rank 0's; in a recovery to this very step, the parameters
             * gathered; before it, lost with rank 0 (NULL). */
            const float *w = run->weights;
            if (run->pending_epoch == 0 && force_to > 0 && ne <= force_to)
                w = ne == force_to ? run->params : NULL;
            else if (run->pending_epoch == 0)
                break;
            /* The checkpoint's optimizer state: every member's slice (not waited for when
             * forced: the epoch's last step is done, ne <= force_to). */
            if (run->nstate > 0 && !(run->cp.step == ne && run->cp.count == run->n) &&
                ne > force_to)
                break;
            struct keepalive k;
            keepalive_start(&k, run);
            rc = end_epoch(run, run->m, run->d, o, run->hooks, run->res, w, run->step_w, iters, ne,
                           &run->es, err);
            keepalive_stop(&k);
            if (rc < 0)
                return rc;
            if (w == run->weights)
                run->pending_epoch--;
            run->epochs_done++;
            /* The members wait for the epoch's judgement; in a recovery the next SETUP
             * carries it. */
            if (force_to == 0 && run->judges && run->epochs_done < o->epochs) {
                unsigned char j[NL_JUDGE_SIZE];
                nl_judge_encode(j, run->epochs_done, run->watched[run->epochs_done - 1]);
                for (int i = 0; i < run->n; i++) {
                    struct peer *p = &run->p[i];
                    if (!p->live || p->dead || p->done || p->eof || !p->r.ch)
                        continue;
                    if (send_raw(p, NL_FRAME_JUDGE, j, sizeof j, NULL) < 0)
                        mark_dead(p, "worker lost (sending to it failed after epoch %d)",
                                  run->epochs_done);
                }
            }
            continue;
        }
        struct slot *sl = &run->slots[ne % WINDOW];
        if (!(sl->step == ne && sl->count == run->n) && ne >= force_to)
            break;
        if (sl->step == ne && sl->samples > 0) {
            for (int i = 0; i < run->n; i++) {
                const struct nl_metric *mt = &sl->w[i];
                struct nl_worker_metrics *t = &run->p[i].total;
                struct nl_worker_metrics *w = &run->step_w[i];
                t->samples += mt->samples;
                t->loss += mt->loss_sum;
                t->compute_seconds += mt->compute_seconds;
                t->comm_seconds += mt->comm_seconds;
                t->bytes_sent += mt->bytes_sent;
                w->samples = mt->samples;
                w->loss = mt->samples > 0 ? mt->loss_sum / mt->samples : 0.0;
                w->compute_seconds = mt->compute_seconds;
                w->comm_seconds = mt->comm_seconds;
                w->bytes_sent = mt->bytes_sent;
            }
            run->es.samples += sl->samples;
            run->es.correct += sl->correct;
            run->es.loss += sl->loss_sum;
            run->es.busy += sl->busy;
            if (!isfinite(sl->loss_sum))
                return nl_error_set(err, NL_ENAN,
                                    "epoch %d, step %ld: the loss is not finite; lower the "
                                    "learning rate (now %g)",
                                    sl->epoch, sl->iter, o->optim.lr);
            if (run->hooks && run->hooks->event) {
                double elapsed = run->es.busy;
                long gstep = ne + 1;
                double per_step = (run->es.train_seconds + elapsed) / (double)gstep;
                struct nl_event ev = {
                    .kind = NL_EVENT_ITER,
                    .epoch = sl->epoch,
                    .epochs = o->epochs,
                    .iter = sl->iter,
                    .iters = iters,
                    .loss = sl->loss_sum / (double)sl->samples,
                    .accuracy = run->d->regression
                                    ? NAN
                                    : (double)run->es.correct / (double)run->es.samples,
                    .regression = run->d->regression,
                    .mae = NAN,
                    .rmse = NAN,
                    .val_mae = NAN,
                    .val_rmse = NAN,
                    .test_mae = NAN,
                    .test_rmse = NAN,
                    .val_loss = NAN,
                    .val_accuracy = NAN,
                    .test_accuracy = NAN,
                    .test_loss = NAN,
                    .seconds = elapsed,
                    .images_per_second = (double)run->es.samples / (elapsed > 0 ? elapsed : 1e-9),
                    .eta_seconds = per_step * (double)((long)o->epochs * iters - gstep),
                    .lr = nl_schedule_lr(&o->schedule, o->optim.lr, gstep, iters,
                                         (long)o->epochs * iters, run->judge.plateau.factor),
                    .samples = run->es.samples,
                    .nworkers = run->n,
                    .workers = run->step_w,
                };
                if (run->hooks->event(run->hooks->ud, &ev))
                    return nl_error_set(err, NL_ECANCELED, "training stopped at epoch %d",
                                        sl->epoch);
            }
        }
        sl->step = -1;
        run->next_emit++;
    }
    return 0;
}

static void wait_a_little(struct run *run)
{
    struct pollfd pf[64];
    int np = 0;
    for (int i = 0; i < run->n && np < 64; i++)
        if (!run->p[i].done && !run->p[i].dead && run->p[i].r.s)
            pf[np++] = (struct pollfd){.fd = ssh_get_fd(run->p[i].r.s), .events = POLLIN};
    poll(pf, (nfds_t)np, 20);
}

#define FAULTED 1 /* follow(): a member was lost or reported a fault */
#define OVER    2 /* recover(): early stopping ended the run at the recovery's step */

/* Follows the members until all are done (0), one is lost or reports a fault (FAULTED), or an
 * error. */
static int follow(struct run *run, struct nl_error *err)
{
    const struct nl_cluster_opts *co = run->co;
    for (int i = 0; i < run->n; i++)
        run->p[i].last_frame = now();
    while (run->ndone < run->n) {
        int progressed = 0, lost = 0;
        for (int i = 0; i < run->n; i++) {
            if (run->p[i].done)
                continue;
            int got = serve(run, i, 0, err);
            if (got < 0)
                return got;
            progressed |= got;
        }
        int rc = emit(run, 0, err);
        if (rc < 0)
            return rc;
        beat(run, NULL);
        for (int i = 0; i < run->n; i++)
            lost |= run->p[i].dead || run->p[i].faulted;
        /* A member lost once the run is over (stopped early, or its last epoch ended: weights,
         * checkpoint and event are the driver's) takes nothing with it: members that finish
         * close their connections while a slower one still ends its own, so a loss seen here
         * is not the run's failure. */
        if (lost && (run->res->stopped_early || run->epochs_done >= run->o->epochs))
            return 0;
        if (lost)
            return FAULTED;
        if (co->stop && *co->stop)
            return nl_error_set(err, NL_ECANCELED, "training stopped");
        if (!progressed)
            wait_a_little(run);
    }
    return 0;
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
        .dtype = (int)d->dtype,
        .nnorm = d->nnorm < NL_PROTO_MAX_NORM ? d->nnorm : NL_PROTO_MAX_NORM,
        .members = run->members,
        .spec = m->spec_text,
        .frozen = run->frozen[0] ? run->frozen : NULL,
        .watched = run->judges ? run->watched : NULL,
        .nwatched = run->judges ? (int)(start / run->iters) : 0,
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
    p->last_frame = now();
    p->next_step = start;
    p->done = 0;
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
                                   m->ntrainable, run->nstate, err);
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
        p->total.host = run->hosts[p->hosti].name;
        run->step_w[i].host = p->total.host;
    }
    run->ndone = 0;
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

/* A member was lost (or reported a fault). Every other member is told to stop (ABORT) and
 * reports the steps it completed, its parameters and its slice of the state (net/worker.c says
 * why that is consistent); the run goes on from R, the most steps any survivor completed: each
 * lost worker is restarted on its host while restarts last and its host answers, or dropped and
 * its data shared out among the others.
 * Long (about 260 lines): it is one protocol exchange in phases (abort, gather the survivors'
 * reports, decide R, restart or drop, report), each of which reads what the previous one
 * gathered; its test is test_cluster_faults, which exercises every phase with real processes, and
 * it is left whole until the transport interface (issue 15, item 3) reshapes its frames. */
static int recover(struct run *run, struct nl_error *err)
{
    const struct nl_model *m = run->m;
    const struct nl_cluster_opts *co = run->co;
    const size_t nt = m->ntrainable;
    int rc;

    /* Members still waiting for this generation's SETUP (its setup lost a member before
     * theirs) have nothing to call off or report. */
    for (int i = 0; i < run->n; i++) {
        struct peer *p = &run->p[i];
        if (!p->dead && !p->done && p->gen == run->generation &&
            send_raw(p, NL_FRAME_ABORT, NULL, 0, NULL) < 0)
            mark_dead(p, "worker lost (sending to it failed during step %ld)", p->next_step + 1);
    }
    /* Survivors may be rebuilding a mesh when they learn of the loss: they give up within the
     * mesh's own timeout. */
    const double deadline = now() + 1e-3 * (run->timeout + 2 * run->hb_ms);
    run->recovering = 1;
    for (;;) {
        int waiting = 0, progressed = 0;
        for (int i = 0; i < run->n; i++) {
            struct peer *p = &run->p[i];
            if (p->dead || p->done || fault_complete(p) || p->gen != run->generation)
                continue;
            int got = serve(run, i, 1, err);
            if (got < 0) {
                run->recovering = 0;
                return got;
            }
            progressed |= got;
            waiting += !p->dead && !p->done && !fault_complete(p);
        }
        if (!waiting)
            break;
        if (now() > deadline) {
            for (int i = 0; i < run->n; i++)
                if (!run->p[i].done && !fault_complete(&run->p[i]) &&
                    run->p[i].gen == run->generation)
                    mark_dead(&run->p[i], "worker lost (it did not report after step %ld)",
                              run->p[i].next_step);
            break;
        }
        if (co->stop && *co->stop) {
            run->recovering = 0;
            return nl_error_set(err, NL_ECANCELED, "training stopped");
        }
        beat(run, NULL);
        if (!progressed)
            wait_a_little(run);
    }
    run->recovering = 0;

    int nsurv = 0, ndead = 0, first_dead = -1;
    for (int i = 0; i < run->n; i++) {
        struct peer *p = &run->p[i];
        if (p->dead) {
            ndead++;
            if (first_dead < 0)
                first_dead = i;
        } else if (p->done) {
            return nl_error_set(err, NL_EIO, "%s: %s, at the very end of the run",
                                run->p[first_dead >= 0 ? first_dead : i].r.host,
                                first_dead >= 0 ? run->p[first_dead].why : "a worker was lost");
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
                            run->p[first_dead].r.host, run->p[first_dead].why);

    /* R, the parameters after it, and the master weights and state after it: the survivors'
     * slices from them, the lost ones' from the parameters and the latest checkpoint. When no
     * member got past the generation's start (it was lost before the mesh stood, or in its
     * first step) the driver holds all of that already: what it set the generation up with,
     * the lost members' slices included. */
    long R = run->start;
    int from = -1;
    for (int i = 0; i < run->n; i++) {
        const struct peer *p = &run->p[i];
        if (!p->dead && p->gen == run->generation && p->fault_done > R) {
            R = p->fault_done;
            from = i;
        }
    }
    if (from >= 0) {
        memcpy(run->params, run->p[from].fault_params, m->nparams * sizeof(float));
        memcpy(run->master, run->params, nt * sizeof(float));
        memcpy(run->state, run->ckpt_state, (size_t)run->nstate * nt * sizeof(float));
    }
    for (int i = 0; from >= 0 && i < run->n; i++) {
        const struct peer *p = &run->p[i];
        if (p->dead)
            continue;
        if (p->gen != run->generation || !fault_complete(p))
            return nl_error_set(err, NL_EIO, "%s: no report of its state after step %ld", p->r.host,
                                R);
        const unsigned char *b = p->fault_state;
        struct nl_state_head h;
        nl_state_head_decode(&h, b);
        const size_t lo = (size_t)h.lo, hi = (size_t)h.hi;
        const size_t own = hi - lo, copy = own * (size_t)(1 + run->nstate);
        if (lo > hi || hi > nt || h.copies != 2 ||
            p->fault_state_len != nl_state_size(own, run->nstate, 2))
            return nl_error_set(err, NL_EFORMAT, "%s: its optimizer state is malformed", p->r.host);
        const int which = (long)h.step == R ? 0 : (long)h.step2 == R ? 1 : -1;
        if (which < 0)
            return nl_error_set(err, NL_EIO,
                                "%s: its optimizer state is after step %ld or %ld, not %ld; the "
                                "run cannot go on",
                                p->r.host, (long)h.step, (long)h.step2, R);
        const float *f = (const float *)(const void *)(b + NL_STATE_HEADER) + (size_t)which * copy;
        memcpy(run->master + lo, f, own * sizeof(float));
        for (int k = 0; k < run->nstate; k++)
            memcpy(run->state + (size_t)k * nt + lo, f + own * (size_t)(1 + k),
                   own * sizeof(float));
    }

    /* The steps up to R are done: report them (with what came of them) and the epochs they
     * end; reports of later steps are void, those steps are done again. */
    if (run->pending_epoch > 0 && (long)(run->epochs_done + 1) * run->iters > R)
        run->pending_epoch = 0;
    /* A checkpoint in the making keeps its pieces only for the next epoch's end. */
    if (run->cp.step >= 0 && !(run->cp.step == (long)(run->epochs_done + 1) * run->iters &&
                               run->cp.step <= R && run->cp.count == run->n))
        run->cp.step = -1;
    rc = emit(run, R, err);
    run->force_to = 0;
    if (rc < 0)
        return rc;
    if (run->res->stopped_early)
        return OVER; /* the epoch up to R ended the run */
    if (run->next_emit != R || run->pending_epoch != 0)
        return nl_error_set(err, NL_EIO,
                            "the run cannot go on from step %ld: the weights of epoch %d were lost "
                            "with %s",
                            R, run->epochs_done + 1, run->p[first_dead].r.host);
    for (int k = 0; k < WINDOW; k++)
        run->slots[k].step = -1;
    run->cp.step = -1;
    for (int i = 0; i < run->n; i++)
        run->p[i].held = 0;

    /* Restart or drop. */
    struct nl_recovery rec[64];
    char what[64][400];
    int nrec = 0, keep = 0;
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
        const char *action = "dropped";
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
            p->eof = 0;
            p->fill = p->line_fill = 0;
            p->last_line[0] = '\0';
            if (rc2 == 0 && launch(run, p, &lerr) == 0 && read_listen(run, p, &lerr) == 0) {
                action = "restarted";
                break;
            }
            size_t l = strlen(p->why);
            snprintf(p->why + l, sizeof p->why - l, "; restarting it failed: %s", lerr.msg);
            if (rc2 < 0 || lerr.code == NL_ECANCELED)
                break;
        }
        if (strcmp(action, "dropped") == 0) {
            struct keepalive k;
            keepalive_start(&k, run);
            end_worker(run, p);
            p->live = 0;
            keepalive_stop(&k);
        }
        if (nrec < 64) {
            snprintf(what[nrec], sizeof what[nrec], "%s", p->why);
            rec[nrec] = (struct nl_recovery){
                .host = run->hosts[p->hosti].name,
                .what = what[nrec],
                .action = action,
                .restarts = run->restarts,
                .max_restarts = co->max_restarts,
                .step = R,
            };
            nrec++;
        }
        if (strcmp(action, "restarted") == 0) {
            p->dead = 0;
            run->p[keep++] = *p;
        } else {
            nl_remote_close(&p->r);
            nl_free(p->buf);
            nl_free(p->fault_params);
            nl_free(p->fault_state);
        }
    }
    run->n = keep;
    if (run->n == 0)
        return nl_error_set(err, NL_EIO, "%s: %s; no worker is left to go on", rec[0].host,
                            rec[0].what);
    for (int i = 0; i < run->n; i++) {
        struct peer *p = &run->p[i];
        p->faulted = 0;
        p->dead = 0;
        p->why[0] = '\0';
    }
    for (int k = 0; k < nrec; k++) {
        rec[k].workers = run->n;
        if (run->hooks && run->hooks->event) {
            struct nl_event ev = {
                .kind = NL_EVENT_RECOVERY,
                .epoch = (int)(R / run->iters) + 1,
                .epochs = run->o->epochs,
                .iter = R % run->iters,
                .iters = run->iters,
                .recovery = &rec[k],
            };
            if (run->hooks->event(run->hooks->ud, &ev))
                return nl_error_set(err, NL_ECANCELED, "training stopped");
        }
    }
    run->generation++;
    return setup_generation(run, R, 1, err);
}

/* Long (about 200 lines): allocation of the run's buffers, starting the workers, the resume
 * state, the follow/recover loop and the run's totals, in that order with one exit path that
 * releases everything; its epoch end is shared with nl_train (end_epoch). */
int nl_cluster_train(const struct nl_host *hosts, int n, const struct nl_cluster_opts *co,
                     struct nl_model *m, const struct nl_dataset *d, const struct nl_train_opts *o,
                     const struct nl_train_hooks *hooks, struct nl_train_result *res,
                     struct nl_worker_metrics *stats, struct nl_error *err)
{
    struct run run = {
        .n = n, .co = co, .hosts = hosts, .m = m, .d = d, .o = o, .hooks = hooks, .res = res};
    unsigned char secret[32];
    int rc = 0;
    const long ntrain = (long)d->split[NL_TRAIN].n;

    memset(res, 0, sizeof *res);
    res->val_accuracy = res->test_accuracy = res->test_loss = NAN;
    res->regression = d->regression;
    res->train_mae = res->train_rmse = res->val_mae = res->val_rmse = NAN;
    res->test_mae = res->test_rmse = NAN;
    if (n < 1)
        return nl_error_set(err, NL_EINVAL, "no hosts to train on");
    if (ntrain == 0)
        return nl_error_set(err, NL_EINVAL, "dataset '%s' has no training samples", d->name);
    rc = nl_optim_validate(&o->optim, err);
    if (rc < 0)
        return rc;
    run.iters = (ntrain + o->batch - 1) / o->batch;
    if (o->resume && (rc = nl_resume_check(o->resume, o->epochs, run.iters, err)) < 0)
        return rc;
    run.timeout = co->ssh.timeout_ms > 0 ? co->ssh.timeout_ms : 30000;
    run.hb_ms = co->heartbeat_ms > 0 ? co->heartbeat_ms : NL_HEARTBEAT_DEFAULT_MS;
    run.nstate = nl_optim_state_arrays(&o->optim);
    const size_t nt = m->ntrainable, sfloats = (size_t)run.nstate * nt;
    run.p = nl_calloc((size_t)n, sizeof *run.p);
    run.members = nl_calloc((size_t)n, sizeof *run.members);
    run.weights = nl_alloc_floats(m->nparams);
    run.params = nl_alloc_floats(m->nparams);
    run.master = nl_alloc_floats(nt + 1);
    run.state = nl_alloc_floats(sfloats + 1);
    run.ckpt_state = nl_alloc_floats(sfloats + 1);
    run.cp.state = nl_alloc_floats(sfloats + 1);
    run.cp.values = nl_alloc_floats(m->nparams + 1);
    run.cp.step = -1;
    run.step_w = nl_calloc((size_t)n, sizeof *run.step_w);
    run.judges = nl_train_judges(o);
    nl_judge_init(&run.judge);
    run.watched = nl_calloc((size_t)o->epochs + 1, sizeof *run.watched);
    run.slot_metrics = nl_calloc((size_t)WINDOW * (size_t)n, sizeof *run.slot_metrics);
    /* The largest frame a worker sends: its parameters, or two copies of its slice's state. */
    const size_t pbytes = m->nparams * sizeof(float);
    const size_t sbytes = nl_state_size(nt + 16, run.nstate, 2);
    run.max_frame = (uint32_t)((pbytes > sbytes ? pbytes : sbytes) + 4096);
    /* The frozen layers' names: the members freeze the same ones, so that the initial weights
     * sent in INIT have their layout and only the trainable range is exchanged. */
    size_t fcap = 1;
    for (int i = 0; i < m->nlayers; i++)
        fcap += strlen(m->layers[i].name) + 1;
    run.frozen = nl_calloc(fcap, 1);
    for (int i = 0; run.frozen && i < m->nlayers; i++) {
        if (!m->layers[i].frozen)
            continue;
        if (run.frozen[0])
            strcat(run.frozen, ",");
        strcat(run.frozen, m->layers[i].name);
    }
    if (!run.p || !run.members || !run.weights || !run.params || !run.master || !run.state ||
        !run.ckpt_state || !run.cp.state || !run.cp.values || !run.step_w || !run.slot_metrics ||
        !run.frozen || !run.watched) {
        rc = nl_error_set(err, NL_ENOMEM, "out of memory for %d workers", n);
        goto out;
    }
    for (int k = 0; k < WINDOW; k++) {
        run.slots[k].step = -1;
        run.slots[k].w = run.slot_metrics + (size_t)k * (size_t)n;
    }
    rc = nl_wire_random(secret, sizeof secret, err);
    if (rc < 0)
        goto out;
    for (int i = 0; i < 32; i++)
        sprintf(run.secret_hex + 2 * i, "%02x", secret[i]);
    run.secret_hex[64] = '\n';

    /* Reach every host, settle the binary, start the workers, learn their ports. */
    for (int i = 0; i < n; i++) {
        struct peer *p = &run.p[i];
        char rv[64];
        int would;
        p->hosti = i;
        p->gen = -1;
        p->cap = NL_WIRE_HEADER + run.max_frame;
        p->buf = nl_malloc(p->cap);
        if (!p->buf) {
            rc = nl_error_set(err, NL_ENOMEM, "out of memory for %d workers", n);
            goto out;
        }
        rc = nl_remote_open(&p->r, hosts[i].name, &co->ssh, err);
        if (rc == 0)
            rc = nl_remote_prepare(&p->r, &co->ssh, 1, &would, rv, sizeof rv, err);
        if (rc == 0)
            rc = launch(&run, p, err);
        if (rc < 0)
            goto out;
    }
    for (int i = 0; i < n; i++) {
        rc = read_listen(&run, &run.p[i], err);
        if (rc < 0)
            goto out;
    }

    /* Every member starts from the driver's weights (initialised, or loaded by --init, or a
     * checkpoint's with its optimizer state when resuming). */
    memcpy(run.params, m->params, pbytes);
    memcpy(run.master, m->params, nt * sizeof(float));
    long start = 0;
    if (o->resume) {
        const struct nl_resume *r = o->resume;
        start = r->iteration;
        if (r->optim_state && r->optim_floats == sfloats) {
            memcpy(run.state, r->optim_state, sfloats * sizeof(float));
            memcpy(run.ckpt_state, r->optim_state, sfloats * sizeof(float));
        }
        run.next_emit = start;
        run.epochs_done = r->epoch;
        res->epochs = r->epoch;
        /* The epochs judged so far, as a local resume replays them (unknown: NaN). */
        for (int e = 0; e < r->epoch; e++) {
            run.watched[e] = r->watched ? r->watched[e] : NAN;
            nl_judge_epoch(&run.judge, o, e + 1, run.watched[e]);
        }
    }
    /* A member lost while a generation is set up (FAULTED) is recovered from as one lost while
     * training. */
    rc = setup_generation(&run, start, o->resume != NULL, err);
    for (;;) {
        if (rc == 0)
            rc = follow(&run, err);
        if (rc != FAULTED)
            break;
        rc = recover(&run, err);
    }
    if (rc == OVER)
        rc = 0;
    if (rc < 0)
        goto out;
    if (res->epochs != o->epochs && !res->stopped_early) {
        rc = nl_error_set(err, NL_EIO, "the workers finished after %d of %d epochs", res->epochs,
                          o->epochs);
        goto out;
    }
    if (d->split[NL_TEST].n > 0) {
        struct nl_reg_sums test;
        double r2;
        rc = nl_evaluate_reg(m, d, NL_TEST, 0, o->loss, &res->test_loss, &res->test_accuracy, &test,
                             err);
        if (rc < 0)
            goto out;
        nl_reg_finish(&test, d->target_std, &res->test_mae, &res->test_rmse, &r2);
    }
    res->seconds = run.es.train_seconds;
    res->images_per_second =
        (double)run.es.total_samples / (run.es.train_seconds > 0 ? run.es.train_seconds : 1e-9);
    for (int i = 0; i < run.n; i++) {
        run.step_w[i] = run.p[i].total;
        run.step_w[i].loss =
            run.step_w[i].samples > 0 ? run.step_w[i].loss / run.step_w[i].samples : 0.0;
    }
    if (stats) {
        /* Every host the run was given, those dropped on the way included (nothing more). */
        for (int i = 0; i < n; i++)
            stats[i] = (struct nl_worker_metrics){.host = hosts[i].name};
        for (int i = 0; i < run.n; i++)
            stats[run.p[i].hosti] = run.step_w[i];
    }
    if (hooks && hooks->event) {
        struct nl_event ev;
        nl_done_event(res, o, &ev);
        ev.nworkers = run.n;
        ev.workers = run.step_w;
        hooks->event(hooks->ud, &ev);
    }
    rc = 0;
out:
    if (run.p)
        close_all(&run);
    nl_free(run.p);
    nl_free(run.members);
    nl_free(run.weights);
    nl_free(run.params);
    nl_free(run.master);
    nl_free(run.state);
    nl_free(run.ckpt_state);
    nl_free(run.cp.state);
    nl_free(run.cp.values);
    nl_free(run.step_w);
    nl_free(run.slot_metrics);
    nl_free(run.frozen);
    nl_free(run.watched);
    return rc;
}
