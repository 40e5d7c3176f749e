/* The worker. Its conversation with the driver, over the SSH channel (stdin and stdout), in the
 * framing of net/wire.c:
 *
 *   driver -> worker  the run secret: 64 hex digits and a newline (never on a command line)
 *   worker -> driver  LISTEN: "PORT PID ADDR" (ADDR empty unless --bind named one; PID is the
 *                     worker's process id, which the driver kills when it gives up on it)
 *   driver -> worker  SETUP: rank, members, options, model spec, data layout, and for recovery
 *                     the generation, the start step, whether STATE follows, the heartbeat
 *                     timeout (net/proto.h)
 *   worker -> driver  HAVE: one byte, 1 when ~/.cache/nnlab/data/HASH holds the partition
 *   driver -> worker  DATA, only after HAVE 0: the partition's samples then labels (int32 LE),
 *                     in the order nl_partition_global() lists them; the worker checks the
 *                     hash and keeps a copy in the cache
 *   driver -> worker  INIT: the parameters (float32 LE) in the layout of the model with SETUP's
 *                     frozen layers, after `start` steps; every member starts from them
 *   driver -> worker  STATE, when SETUP says so: the worker's slice of the fp32 master weights
 *                     and optimizer state after `start` steps (layout below)
 *   worker -> driver  OVERLAP (rank 0, --overlap auto on several members), after the METRIC of
 *                     the last step it measured: the step times of both modes and the choice,
 *                     which every member made alike (net/cluster.c, struct nl_overlap_probe)
 *   worker -> driver  METRIC after every step; WEIGHTS (rank 0, after every epoch); DONE; and
 *                     at each checkpoint step (every epoch's end, every SETUP checkpoint_every
 *                     steps) after its METRIC: STATE of its slice (copies 1; not when the
 *                     optimizer keeps no state) and, within an epoch, rank 0's PARAMS
 *   driver -> worker  JUDGE, in a run that follows its epochs' accuracy (a plateau schedule,
 *                     early stopping: nl_train_judges), after every epoch but the last: the
 *                     epoch and its watched accuracy (net/proto.h), once the driver has
 *                     validated rank 0's WEIGHTS. Every member waits for it before its next
 *                     epoch, and applies the same plateau factor and early-stopping decision;
 *                     when that ends the run, the members' DONE comes after fewer epochs.
 *                     SETUP carries the watched accuracy of every epoch completed before its
 *                     start step, so a restarted or new member (or a resumed run) decides as
 *                     the others
 *   both ways         HEARTBEAT (empty) every heartbeat timeout / 4, from the first SETUP on
 *
 * Every frame's payload is in the table at the top of net/proto.h. STATE holds `copies` copies
 * of the slice: the fp32 master, then nl_optim_state_arrays() state arrays. The first copy is the
 * state after `step` steps; a second one (a FAULT's report) the state after `step2`, from before
 * the owner's latest optimizer step (step2 is 0 when copies is 1).
 *
 * Liveness. After the first SETUP a thread of the worker is the only reader of stdin: HEARTBEAT
 * frames reset its clock; the end of stdin or no frame within the heartbeat timeout means the
 * driver is gone, and the process exits at once (status 3), so no worker outlives its driver;
 * every other frame goes to a mailbox (a queue with a pipe that is readable while the queue is
 * not empty) from which the training thread takes SETUP, DATA, INIT, STATE and JUDGE (its wait
 * for JUDGE needs no clock of its own: a driver silent for the heartbeat timeout ends the
 * process through the reader). Another thread sends HEARTBEAT; writes to stdout are serialised
 * by a mutex. Messages go to stderr, which the driver shows prefixed with the host's name.
 *
 * Recovery. When the driver loses a member (its channel ends, or it sends nothing within the
 * heartbeat timeout), it sends ABORT to the others. The mailbox's pipe is the allreduce's cancel
 * fd, and the mesh's while it forms, so a member waiting in an exchange, or for a lost member to
 * join its mesh, gives up at once (JUDGE cannot be mistaken for that: it comes only while every
 * member waits for it, outside any exchange); a member waiting for JUDGE that gets ABORT has
 * completed the epoch's steps. Any member whose step (or wait) fails (a peer closed, a timeout,
 * the abort) does not exit: it reports
 *   worker -> driver  FAULT: "C L message", C the steps it completed
 *   worker -> driver  PARAMS: its complete parameters after step C
 *   worker -> driver  STATE: its slice, copies 2: the state after its latest optimizer step,
 *                     then before it
 * and waits for a new SETUP (a new generation: new members, ranks and start step), which
 * proceeds as above. Members of a generation mix the generation into the mesh secret, so a
 * connection left over from an earlier one fails the handshake.
 *
 * Why this is consistent: members run in lockstep, so the completed steps C of the survivors
 * differ by at most one; let R be the largest. Someone completed step R, so every owner
 * broadcast step R: every owner has applied its optimizer for step R, and at most for R + 1
 * (step R + 2 needs everyone's gradient of R + 2, hence everyone past R + 1). So each owner's
 * state after R is either its current one or the copy from before its latest optimizer step,
 * and a survivor with C = R holds the complete parameters after R (members keep a copy after
 * every completed step, taken when the next step asks for its share so that it holds the batch
 * statistics the trainer updates after a step: a step in progress overwrites its parameters
 * slice by slice). The exchange carries the statistics sums too, but the optimizer state covers
 * only the trainable part of each slice (nl_allreduce_state_bounds), and that is what STATE
 * holds. The lost member's slice of the optimizer state comes from the run's latest checkpoint
 * (zeros before the first), its master from the parameters. The driver hands every member of
 * the new generation these, and training goes on from step R as if nothing happened. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "nnlab/worker.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "net/crypto.h"
#include "net/proto.h"
#include "nnlab/alloc.h"
#include "nnlab/clock.h"
#include "nnlab/cluster.h"
#include "nnlab/model.h"
#include "nnlab/spec.h"

#define DRIVER_TIMEOUT_MS 600000 /* the driver may take long to upload or ship data */

/* Reads the secret line: 64 hex digits. */
static int read_secret(int fd, unsigned char secret[32], struct nl_error *err)
{
    char line[66];
    size_t n = 0;

    while (n < sizeof line) {
        if (nl_wire_read_all(fd, line + n, 1, DRIVER_TIMEOUT_MS) < 0)
            return nl_error_set(err, NL_EAUTH, "no run secret on stdin");
        if (line[n] == '\n')
            break;
        n++;
    }
    if (n != 64)
        return nl_error_set(err, NL_EAUTH, "the run secret on stdin is not 64 hex digits");
    for (int i = 0; i < 32; i++) {
        unsigned v;
        char h[3] = {line[2 * i], line[2 * i + 1], 0};
        if (sscanf(h, "%2x", &v) != 1)
            return nl_error_set(err, NL_EAUTH, "the run secret on stdin is not 64 hex digits");
        secret[i] = (unsigned char)v;
    }
    return 0;
}

/* A frame from the driver, queued for the training thread. */
struct mail {
    struct mail *next;
    uint32_t type, len;
    void *buf;
};

/* The worker's side of the SSH channel. */
struct link {
    struct nl_conn in, out;
    pthread_mutex_t out_lock; /* every write to stdout */
    pthread_mutex_t lock;     /* the mailbox */
    pthread_cond_t cond;
    struct mail *head, *tail;
    int wake[2]; /* one byte in the pipe per queued frame */
    int heartbeat_ms;
    int started; /* the reader and heartbeat threads run */
    /* NULL: the SSH channel (in, out); else the frames go over this link (MPI). */
    const struct nl_worker_link *ext;
};

static int link_send(struct link *l, uint32_t type, const void *p, uint32_t len,
                     struct nl_error *err)
{
    pthread_mutex_lock(&l->out_lock);
    int rc = l->ext ? l->ext->send(l->ext->ud, type, p, len, err)
                    : nl_wire_send(&l->out, type, p, len, err);
    pthread_mutex_unlock(&l->out_lock);
    return rc;
}

/* A frame from the driver, straight from the channel (or link). */
static int link_read(struct link *l, uint32_t *type, void **buf, uint32_t *len, int timeout_ms,
                     struct nl_error *err)
{
    if (l->ext)
        return l->ext->recv(l->ext->ud, type, buf, len, timeout_ms, err);
    l->in.timeout_ms = timeout_ms;
    return nl_wire_recv_alloc(&l->in, type, buf, len, NL_WIRE_MAX_PAYLOAD, err);
}

static void *reader(void *arg)
{
    struct link *l = arg;
    for (;;) {
        uint32_t type, len;
        void *buf;
        struct nl_error e = {0};
        if (link_read(l, &type, &buf, &len, l->heartbeat_ms, &e) < 0) {
            if (e.code == NL_ECANCELED)
                return NULL; /* the link is closing: the run is over */
            if (e.code == NL_ETIMEDOUT)
                fprintf(stderr,
                        "nnlab worker: no heartbeat from the driver within %d ms; exiting\n",
                        l->heartbeat_ms);
            _exit(3); /* the driver is gone (or closed the channel to stop the run) */
        }
        if (type == NL_FRAME_HEARTBEAT) {
            nl_free(buf);
            continue;
        }
        struct mail *m = nl_malloc(sizeof *m);
        if (!m)
            _exit(3);
        *m = (struct mail){NULL, type, len, buf};
        pthread_mutex_lock(&l->lock);
        if (l->tail)
            l->tail->next = m;
        else
            l->head = m;
        l->tail = m;
        while (write(l->wake[1], "m", 1) < 0 && errno == EINTR)
            ;
        pthread_cond_signal(&l->cond);
        pthread_mutex_unlock(&l->lock);
    }
    return NULL;
}

static void *heartbeat(void *arg)
{
    struct link *l = arg;
    const long ns = (long)l->heartbeat_ms * 250000L; /* a quarter of the timeout */
    for (;;) {
        struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
        nanosleep(&ts, NULL);
        struct nl_error e = {0};
        if (link_send(l, NL_FRAME_HEARTBEAT, NULL, 0, &e) < 0) {
            if (e.code == NL_ECANCELED)
                return NULL;
            _exit(3);
        }
    }
    return NULL;
}

static int link_start(struct link *l, int heartbeat_ms, struct nl_error *err)
{
    pthread_t t;
    l->heartbeat_ms = heartbeat_ms > 0 ? heartbeat_ms : NL_HEARTBEAT_DEFAULT_MS;
    if (pthread_create(&t, NULL, reader, l) != 0)
        return nl_error_set(err, NL_ENOMEM, "cannot start a thread");
    pthread_detach(t);
    if (pthread_create(&t, NULL, heartbeat, l) != 0)
        return nl_error_set(err, NL_ENOMEM, "cannot start a thread");
    pthread_detach(t);
    l->started = 1;
    return 0;
}

/* The driver's next frame: from stdin before the threads run, from the mailbox after. */
static int link_recv(struct link *l, uint32_t *type, void **buf, uint32_t *len,
                     struct nl_error *err)
{
    if (!l->started)
        return link_read(l, type, buf, len, DRIVER_TIMEOUT_MS, err);
    pthread_mutex_lock(&l->lock);
    while (!l->head)
        pthread_cond_wait(&l->cond, &l->lock);
    struct mail *m = l->head;
    l->head = m->next;
    if (!l->head)
        l->tail = NULL;
    char c;
    while (read(l->wake[0], &c, 1) < 0 && errno == EINTR)
        ;
    pthread_mutex_unlock(&l->lock);
    *type = m->type;
    *buf = m->buf;
    *len = m->len;
    nl_free(m);
    return 0;
}

static int cache_path(char *out, size_t n, const char *hash)
{
    const char *home = getenv("HOME");
    if (!home || !*home)
        return -1;
    snprintf(out, n, "%s/.cache/nnlab/data/%s", home, hash);
    return 0;
}

/* Loads a cached partition whose content hashes to hash; NULL when there is none. */
static unsigned char *cache_load(const char *hash, size_t size)
{
    char path[4096];
    char hex[65];
    unsigned char *buf;

    if (cache_path(path, sizeof path, hash) < 0)
        return NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    buf = nl_malloc(size + 1);
    if (buf && (fread(buf, 1, size + 1, f) != size)) {
        nl_free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf)
        return NULL;
    nl_sha256_hex(hex, buf, size);
    if (strcmp(hex, hash) != 0) {
        nl_free(buf);
        return NULL;
    }
    return buf;
}

static void mkdirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0700);
            *p = '/';
        }
    }
}

/* Best effort: a failed cache write costs only the next run's transfer. */
static void cache_store(const char *hash, const unsigned char *buf, size_t size)
{
    char path[4096], tmp[4200];

    if (cache_path(path, sizeof path, hash) < 0)
        return;
    mkdirs(path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return;
    int ok = fwrite(buf, 1, size, f) == size;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0)
        unlink(tmp);
}

struct worker_hook {
    struct link *l;
    struct nl_member_sync *ms;
    const struct nl_model *m;
    int rank;
    /* Checkpoints: at every epoch's end and every `every` steps (0: epochs only), each member
     * sends its slice's state (when the optimizer keeps any), rank 0 within an epoch its
     * parameters (at an epoch's end its WEIGHTS follow anyway). */
    long every, iters;
    int nstate;
    size_t lo, hi, nslice;
    unsigned char *state; /* NL_STATE_HEADER + nslice floats */
    long prev_samples, prev_correct;
    double last;
    int told; /* the driver has --overlap auto's choice (rank 0 sends it) */
    struct nl_error err;
    int failed;
};

static int on_event(void *ud, const struct nl_event *ev)
{
    struct worker_hook *h = ud;
    unsigned char buf[NL_METRIC_SIZE];

    if (ev->kind == NL_EVENT_ITER) {
        const double t = nl_now();
        const long samples = ev->iter == 1 ? ev->samples : ev->samples - h->prev_samples;
        const long correct_so_far = (long)(ev->accuracy * (double)ev->samples + 0.5);
        const long correct = ev->iter == 1 ? correct_so_far : correct_so_far - h->prev_correct;
        struct nl_metric m = {
            .epoch = ev->epoch,
            .iter = (int32_t)ev->iter,
            .samples = (int32_t)samples,
            .correct = (int32_t)correct,
            .loss_sum = ev->loss * (double)samples,
            .comm_seconds = h->ms->last_comm_seconds,
            .bytes_sent = h->ms->last_bytes,
        };
        m.compute_seconds = t - h->last - m.comm_seconds;
        h->last = t;
        h->prev_samples = ev->samples;
        h->prev_correct = correct_so_far;
        nl_metric_encode(buf, &m);
        if (link_send(h->l, NL_FRAME_METRIC, buf, sizeof buf, &h->err) < 0) {
            h->failed = 1;
            return 1;
        }
        const struct nl_overlap_probe *p = &h->ms->probe;
        if (p->decided && !h->told && h->rank == 0) {
            unsigned char ob[NL_OVERLAP_SIZE];
            nl_overlap_encode(ob, &(struct nl_overlap_choice){p->step, p->sync_seconds,
                                                              p->overlap_seconds, p->overlapped});
            if (link_send(h->l, NL_FRAME_OVERLAP, ob, sizeof ob, &h->err) < 0) {
                h->failed = 1;
                return 1;
            }
        }
        h->told = p->decided;
        const long step = (long)(ev->epoch - 1) * h->iters + ev->iter;
        if (step % h->iters != 0 && !(h->every > 0 && step % h->every == 0))
            return 0;
        int rc = 0;
        if (h->nstate > 0) {
            nl_state_head_encode(h->state,
                                 &(struct nl_state_head){h->lo, h->hi, 1, (uint64_t)step, 0});
            nl_allreduce_export(h->ms->ar, 0, (float *)(void *)(h->state + NL_STATE_HEADER));
            rc = link_send(h->l, NL_FRAME_STATE, h->state,
                           (uint32_t)nl_state_size(h->hi - h->lo, h->nstate, 1), &h->err);
        }
        if (rc == 0 && h->rank == 0 && step % h->iters != 0)
            rc = link_send(h->l, NL_FRAME_PARAMS, h->m->params,
                           (uint32_t)(h->m->nparams * sizeof(float)), &h->err);
        if (rc < 0) {
            h->failed = 1;
            return 1;
        }
    } else if (ev->kind == NL_EVENT_EPOCH && h->rank == 0) {
        if (link_send(h->l, NL_FRAME_WEIGHTS, h->m->params,
                      (uint32_t)(h->m->nparams * sizeof(float)), &h->err) < 0) {
            h->failed = 1;
            return 1;
        }
        h->last = nl_now(); /* the epoch's evaluation is not compute time */
    }
    return 0;
}

/* Freezes the layers SETUP names (comma-separated). */
static int freeze(struct nl_model *m, const char *list, struct nl_error *err)
{
    const char *names[256];
    char buf[4096];
    int n = 0;

    if (!list || !*list)
        return 0;
    if (strlen(list) >= sizeof buf)
        return nl_error_set(err, NL_EINVAL, "too many frozen layers in the setup");
    strcpy(buf, list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == 256)
            return nl_error_set(err, NL_EINVAL, "too many frozen layers in the setup");
        names[n++] = t;
    }
    return nl_model_freeze(m, names, n, NULL, err);
}

/* The judge of a member (nl_member_sync_judge): JUDGE from the mailbox; ABORT instead means the
 * run's step is called off. */
struct judge_ctx {
    struct link *l;
};

static int wait_judge(void *ud, int epoch, double *watched, struct nl_error *err)
{
    struct judge_ctx *j = ud;
    uint32_t type, len;
    unsigned char *buf;
    int rc = link_recv(j->l, &type, (void **)&buf, &len, err);
    if (rc < 0)
        return rc;
    if (type == NL_FRAME_ABORT) {
        nl_free(buf);
        return nl_error_set(err, NL_ECANCELED, "the driver called the run off after epoch %d",
                            epoch);
    }
    int got = 0;
    if (type == NL_FRAME_JUDGE && len == NL_JUDGE_SIZE)
        nl_judge_decode(buf, &got, watched);
    nl_free(buf);
    if (got != epoch)
        return nl_error_set(err, NL_EFORMAT,
                            "the driver sent frame type %u (epoch %d), not the judgement of epoch "
                            "%d",
                            type, got, epoch);
    return 0;
}

#define FAULTED 1 /* generation(): a step failed and the fault is reported */

/* What one generation leaves to the next: the partition, when it stays the same. */
struct carry {
    unsigned char *data;
    char hash[65];
};

/* The secret of generation g's mesh: SHA-256 of the run secret and g. */
static void generation_secret(unsigned char out[32], const unsigned char secret[32], int g)
{
    unsigned char buf[36];
    memcpy(buf, secret, 32);
    buf[32] = (unsigned char)g;
    buf[33] = (unsigned char)(g >> 8);
    buf[34] = (unsigned char)(g >> 16);
    buf[35] = (unsigned char)(g >> 24);
    nl_sha256(out, buf, sizeof buf);
}

/* The partition: kept from the last generation, from the cache, or from the driver. */
static int get_data(struct link *l, const struct nl_setup *s, uint32_t count, struct carry *c,
                    struct nl_error *err)
{
    const size_t size = (size_t)count * (nl_setup_sample_bytes(s) + sizeof(int32_t));
    uint32_t type, len;
    int rc;

    if (!c->data || strcmp(c->hash, s->data_hash) != 0) {
        nl_free(c->data);
        c->hash[0] = '\0';
        c->data = cache_load(s->data_hash, size);
    }
    unsigned char have = c->data != NULL;
    rc = link_send(l, NL_FRAME_HAVE, &have, 1, err);
    if (rc < 0 || have) {
        if (have)
            snprintf(c->hash, sizeof c->hash, "%s", s->data_hash);
        return rc;
    }
    if (size > NL_WIRE_MAX_PAYLOAD)
        return nl_error_set(err, NL_EINVAL, "a partition of %zu bytes is too large", size);
    rc = link_recv(l, &type, (void **)&c->data, &len, err);
    if (rc == 0 && (type != NL_FRAME_DATA || len != size))
        rc = nl_error_set(err, NL_EFORMAT, "the driver's data is not the partition");
    if (rc == 0) {
        char hex[65];
        nl_sha256_hex(hex, c->data, size);
        if (strcmp(hex, s->data_hash) != 0)
            rc = nl_error_set(err, NL_EFORMAT, "the partition does not match its hash");
        else
            cache_store(s->data_hash, c->data, size);
    }
    if (rc < 0) {
        nl_free(c->data);
        c->data = NULL;
        return rc;
    }
    snprintf(c->hash, sizeof c->hash, "%s", s->data_hash);
    return 0;
}

/* FAULT, PARAMS and STATE (two copies of the slice [lo, hi) and its nstate arrays, after steps
 * st[0], st[1]). */
static int report_fault(struct link *l, long done, const char *why, const float *params,
                        size_t nparams, size_t lo, size_t hi, const long st[2], const float *copies,
                        int nstate, struct nl_error *err)
{
    char text[NL_ERR_MAX + 32];
    int k = nl_fault_encode(text, sizeof text, done, why);
    int rc = link_send(l, NL_FRAME_FAULT, text, (uint32_t)k, err);
    if (rc == 0)
        rc = link_send(l, NL_FRAME_PARAMS, params, (uint32_t)(nparams * sizeof(float)), err);
    if (rc < 0)
        return rc;
    const size_t bytes = nl_state_size(hi - lo, nstate, 2);
    const size_t n = (hi - lo) * (size_t)(1 + nstate);
    unsigned char *b = nl_malloc(bytes);
    if (!b)
        return nl_error_set(err, NL_ENOMEM, "out of memory for the optimizer state");
    nl_state_head_encode(b, &(struct nl_state_head){lo, hi, 2, (uint64_t)st[0], (uint64_t)st[1]});
    memcpy(b + NL_STATE_HEADER, copies, 2 * n * sizeof(float));
    rc = link_send(l, NL_FRAME_STATE, b, (uint32_t)bytes, err);
    nl_free(b);
    return rc;
}

/* A member's slice [lo, hi) of the trainable parameters with its nstate optimizer arrays, and the
 * weights it starts from and keeps: what a generation hands its allreduce, its checkpoints and a
 * fault's report. Released by slices_release(). */
struct slices {
    float *init;         /* (nparams) INIT: the weights every member starts from */
    float *slice;        /* (nslice) the slice's fp32 master, then its state arrays */
    float *copies;       /* (2 x nslice) a fault's two copies of the slice */
    float *keep;         /* (nparams) the parameters after the latest completed step */
    unsigned char *ckpt; /* NL_STATE_HEADER + nslice floats: a checkpoint's STATE */
    size_t lo, hi, nslice;
    int nstate;
};

static void slices_release(struct slices *sl)
{
    nl_free(sl->init);
    nl_free(sl->slice);
    nl_free(sl->copies);
    nl_free(sl->keep);
    nl_free(sl->ckpt);
}

/* INIT, the weights every member starts from, into sl->init. */
static int recv_init(struct link *l, const struct nl_model *m, struct slices *sl,
                     struct nl_error *err)
{
    uint32_t type, len;
    int rc = link_recv(l, &type, (void **)&sl->init, &len, err);
    if (rc == 0 && (type != NL_FRAME_INIT || len != m->nparams * sizeof(float)))
        rc = nl_error_set(err, NL_EFORMAT,
                          "the driver's weights (frame type %u) hold %zu values, the model has "
                          "%zu",
                          type, len / sizeof(float), m->nparams);
    return rc;
}

/* This member's slice bounds (nl_allreduce_state_bounds) and the buffers of sl. */
static int slices_alloc(struct slices *sl, const struct nl_setup *s, const struct nl_model *m,
                        struct nl_error *err)
{
    nl_allreduce_state_bounds(m->nreduce, m->ntrainable, s->size, s->rank, &sl->lo, &sl->hi);
    sl->nslice = (sl->hi - sl->lo) * (size_t)(1 + sl->nstate);
    sl->slice = nl_alloc_floats(sl->nslice + 1);
    sl->copies = nl_alloc_floats(2 * sl->nslice + 1);
    sl->keep = nl_alloc_floats(m->nparams + 1);
    sl->ckpt = nl_malloc(nl_state_size(sl->hi - sl->lo, sl->nstate, 1));
    if (!sl->slice || !sl->copies || !sl->keep || !sl->ckpt)
        return nl_error_set(err, NL_ENOMEM, "out of memory for the optimizer state");
    return 0;
}

/* The slice's master weights and optimizer state to start from: STATE when SETUP says one
 * follows, else the slice of INIT and a zero state. */
static int recv_state(struct link *l, const struct nl_setup *s, struct slices *sl,
                      struct nl_error *err)
{
    if (!s->has_state) {
        memcpy(sl->slice, sl->init + sl->lo, (sl->hi - sl->lo) * sizeof(float));
        return 0;
    }
    uint32_t type, len;
    unsigned char *st = NULL;
    int rc = link_recv(l, &type, (void **)&st, &len, err);
    struct nl_state_head sh = {0};
    if (rc == 0 && type == NL_FRAME_STATE && len >= NL_STATE_HEADER)
        nl_state_head_decode(&sh, st);
    if (rc == 0 &&
        (type != NL_FRAME_STATE || len != nl_state_size(sl->hi - sl->lo, sl->nstate, 1) ||
         sh.lo != sl->lo || sh.hi != sl->hi || sh.copies != 1))
        rc = nl_error_set(err, NL_EFORMAT,
                          "the driver's optimizer state is not that of slice [%zu, %zu)", sl->lo,
                          sl->hi);
    if (rc == 0)
        memcpy(sl->slice, st + NL_STATE_HEADER, sl->nslice * sizeof(float));
    nl_free(st);
    return rc;
}

/* The partition's n labels (int32 LE), or for regression its targets (float32 LE, each with the
 * label 0), checked into d's training split. */
static int decode_targets(struct nl_dataset *d, const struct nl_setup *s, const unsigned char *y,
                          uint32_t n, struct nl_error *err)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)y[4 * i] | (uint32_t)y[4 * i + 1] << 8 |
                     (uint32_t)y[4 * i + 2] << 16 | (uint32_t)y[4 * i + 3] << 24;
        if (s->regression) {
            float t;
            memcpy(&t, &v, sizeof t);
            if (!isfinite(t))
                return nl_error_set(err, NL_EFORMAT, "target %u of the partition is not a number",
                                    i);
            d->split[NL_TRAIN].t[i] = t;
            v = 0;
        }
        if (v >= (uint32_t)s->nclasses)
            return nl_error_set(err, NL_EFORMAT, "label %u of the partition is out of range", v);
        d->split[NL_TRAIN].y[i] = (int32_t)v;
    }
    return 0;
}

/* The member's partition (data: its samples, then its labels) as a dataset of one training
 * split, in *dp: the caller's to free, as far as it was made. */
static int partition_dataset(struct nl_dataset **dp, const struct nl_setup *s,
                             const struct nl_partition *part, const unsigned char *data,
                             struct nl_error *err)
{
    struct nl_dataset *d = *dp = nl_calloc(1, sizeof *d);
    const uint32_t n = nl_partition_count(part);
    const size_t sample = nl_setup_sample_bytes(s);
    if (d) {
        d->name = nl_strdup("partition");
        d->shape = s->shape;
        d->dtype = (enum nl_dtype)s->dtype;
        d->nclasses = s->nclasses;
        d->regression = s->regression;
        d->target_std = 1.0; /* the targets arrive standardised */
        d->nvocab = s->vocab;
        d->nnorm = s->nnorm;
        d->mean = nl_calloc((size_t)s->nnorm, sizeof(float));
        d->std = nl_calloc((size_t)s->nnorm, sizeof(float));
        d->split[NL_TRAIN].x = nl_malloc((size_t)n * sample + 1);
        d->split[NL_TRAIN].y = nl_calloc((size_t)n + 1, sizeof(int32_t));
        if (s->regression)
            d->split[NL_TRAIN].t = nl_malloc(((size_t)n + 1) * sizeof(float));
    }
    if (!d || !d->name || !d->mean || !d->std || !d->split[NL_TRAIN].x || !d->split[NL_TRAIN].y ||
        (s->regression && !d->split[NL_TRAIN].t))
        return nl_error_set(err, NL_ENOMEM, "out of memory for the partition");
    memcpy(d->mean, s->mean, (size_t)s->nnorm * sizeof(float));
    memcpy(d->std, s->std, (size_t)s->nnorm * sizeof(float));
    memcpy(d->split[NL_TRAIN].x, data, (size_t)n * sample);
    int rc = decode_targets(d, s, data + (size_t)n * sample, n, err);
    d->split[NL_TRAIN].n = n;
    return rc;
}

/* Trains the generation's steps with o's member sync, each step and epoch reported to the driver
 * (on_event). A report that failed is the error. */
static int train_steps(struct link *l, const struct nl_setup *s, struct nl_model *m,
                       const struct nl_dataset *d, const struct nl_train_opts *o,
                       struct nl_member_sync *ms, const struct slices *sl, struct nl_error *err)
{
    struct nl_train_result res;
    struct worker_hook h = {
        .l = l,
        .ms = ms,
        .m = m,
        .rank = s->rank,
        .every = s->o.checkpoint_every,
        .iters = ms->sync.iters,
        .nstate = sl->nstate,
        .lo = sl->lo,
        .hi = sl->hi,
        .nslice = sl->nslice,
        .state = sl->ckpt,
        .last = nl_now(),
    };
    struct nl_train_hooks hooks = {on_event, NULL, &h};
    int rc = nl_train(m, d, o, &hooks, &res, err);
    if (h.failed)
        *err = h.err;
    return rc;
}

/* A step failed, or the mesh did not stand: FAULT, PARAMS and STATE after the steps completed,
 * from the allreduce (ar) when there is one, else as the generation started. FAULTED once
 * reported, or an error. */
static int send_fault(struct link *l, const struct nl_setup *s, const struct nl_model *m,
                      struct nl_allreduce *ar, long done, const struct slices *sl,
                      struct nl_error *err)
{
    char why[NL_ERR_MAX];
    long steps[2] = {s->start, s->start};
    snprintf(why, sizeof why, "%s", err->msg);
    if (ar) {
        steps[0] = nl_allreduce_export(ar, 0, sl->copies);
        steps[1] = nl_allreduce_export(ar, 1, sl->copies + sl->nslice);
    } else {
        memcpy(sl->copies, sl->slice, sl->nslice * sizeof(float));
        memcpy(sl->copies + sl->nslice, sl->slice, sl->nslice * sizeof(float));
    }
    int rc = report_fault(l, ar ? done : s->start, why, ar ? sl->keep : sl->init, m->nparams,
                          sl->lo, sl->hi, steps, sl->copies, sl->nstate, err);
    return rc == 0 ? FAULTED : rc;
}

int nl_worker_overlap(int mode, int threads, int cores, int sharing)
{
    if (mode == NL_OVERLAP_ON || mode == NL_OVERLAP_OFF)
        return mode == NL_OVERLAP_ON;
    if (threads < 1)
        threads = cores;
    if (sharing < 1)
        sharing = 1;
    return (long)cores > (long)threads * sharing;
}

int nl_worker_overlap_decide(const double *times, int members, double *sync_seconds,
                             double *overlap_seconds)
{
    double sync = 0.0, ov = 0.0;
    for (int r = 0; r < members; r++) {
        sync += times[NL_ALLREDUCE_TIMES * r];
        ov += times[NL_ALLREDUCE_TIMES * r + 1];
    }
    if (members > 0) {
        sync /= members;
        ov /= members;
    }
    *sync_seconds = sync;
    *overlap_seconds = ov;
    return members > 0 && ov <= sync * (1.0 + NL_OVERLAP_MARGIN);
}

double nl_worker_median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    if (n <= 0)
        return 0.0;
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The overlap for this member: its threads (0: one per core it may run on), and the members
 * listed at its own address share its host's cores. MPI ranks (alone) count as alone: their
 * launcher binds each to its cores, or leaves them all to every rank. */
static int member_overlaps(const struct nl_setup *s, int alone)
{
    cpu_set_t set;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    int cores = n > 0 ? (int)n : 1, sharing = 0;

    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        cores = CPU_COUNT(&set);
    for (int i = 0; !alone && s->members && s->members[s->rank].addr[0] && i < s->size; i++)
        sharing += strcmp(s->members[i].addr, s->members[s->rank].addr) == 0;
    return nl_worker_overlap(s->o.overlap, s->o.threads, cores, sharing);
}

/* Whether this generation measures: auto, several members, and enough steps left. */
static int measures(const struct nl_setup *s, long iters)
{
    const long left = (long)s->o.epochs * iters - s->start;
    return s->o.overlap == NL_OVERLAP_AUTO && s->size > 1 &&
           left >= NL_OVERLAP_PROBE_MIN_RUN * NL_OVERLAP_PROBE_STEPS;
}

/* One generation: data, weights and state, the mesh, training. 0 when the run is over,
 * FAULTED when a step failed and the fault went to the driver, or an error. */
static int generation(struct link *l, const struct nl_setup *s, struct carry *cr,
                      const unsigned char *secret, int listen_fd, struct nl_error *err)
{
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;
    struct nl_partition *part = NULL;
    struct nl_dataset *d = NULL;
    struct nl_mesh *mesh = NULL;
    struct nl_transport *tr = NULL;
    struct nl_allreduce *ar = NULL;
    struct nl_member_sync ms;
    struct nl_train_opts o = s->o;
    struct nl_resume r = {0};
    struct judge_ctx jc = {l};
    struct slices sl = {.nstate = nl_optim_state_arrays(&o.optim)};
    int rc, fault = 0;

    memset(&ms, 0, sizeof ms);
    rc = nl_partition_new(&part, s->ntrain, s->o.batch, s->size, s->rank, s->o.seed, err);
    if (rc == 0)
        rc = get_data(l, s, nl_partition_count(part), cr, err);
    if (rc == 0)
        rc = nl_spec_parse(&spec, s->spec, "the driver's model", NULL, NULL, err);
    if (rc == 0) {
        spec->vocab = s->vocab;
        spec->embed_columns = s->embed_columns;
        spec->embed_rows = s->embed_rows;
        rc = nl_model_build(&m, spec, s->shape, s->nclasses, err);
    }
    if (rc == 0)
        rc = freeze(m, s->frozen, err);
    if (rc == 0)
        rc = recv_init(l, m, &sl, err);
    if (rc == 0)
        rc = slices_alloc(&sl, s, m, err);
    if (rc == 0)
        rc = recv_state(l, s, &sl, err);
    if (rc == 0) {
        memcpy(m->params, sl.init, m->nparams * sizeof(float));
        rc = partition_dataset(&d, s, part, cr->data, err);
    }
    if (rc == 0 && l->ext) {
        rc = l->ext->transport(l->ext->ud, s->rank, s->size, &tr, err);
    } else if (rc == 0) {
        unsigned char gs[32];
        generation_secret(gs, secret, s->generation);
        /* ABORT in the mailbox calls it off. */
        rc = nl_mesh_connect_cancel(&mesh, s->rank, s->size, listen_fd, s->members, gs, sizeof gs,
                                    s->plaintext ? NL_WIRE_PLAINTEXT : 0, s->timeout_ms, l->wake[0],
                                    err);
        fault = rc < 0; /* a member lost before the mesh stood */
    }
    /* --overlap auto on several members measures both modes when the run is long enough. */
    const int warm = member_overlaps(s, l->ext != NULL);
    const int probe = rc == 0 && measures(s, nl_partition_iters(part));
    if (rc == 0) {
        /* The trainable range and the statistics travel: frozen layers cost no bytes. */
        struct nl_allreduce_opts ao = {
            .n = m->nreduce,
            .ntrainable = m->ntrainable,
            .optim = &o.optim,
            .bf16 = s->bf16,
            .clip_value = o.clip_value,
            .clip_norm = o.clip_norm,
            .overlap = warm || probe,
        };
        rc = tr ? nl_allreduce_new_over(&ar, tr, m->params, &ao, err)
                : nl_allreduce_new(&ar, mesh, m->params, &ao, err);
    }
    if (rc == 0) {
        nl_allreduce_import(ar, sl.slice, s->start);
        nl_allreduce_set_cancel_fd(ar, l->wake[0]);
        nl_member_sync_init(&ms, part, ar, mesh);
        nl_member_sync_keep(&ms, sl.keep, m->params, m->nparams, s->start);
        nl_member_sync_judge(&ms, wait_judge, &jc);
        if (probe)
            nl_member_sync_probe(&ms, s->rank, s->size, s->start + NL_OVERLAP_PROBE_WARMUP + 1,
                                 NL_OVERLAP_PROBE_BLOCK, NL_OVERLAP_PROBE_ROUNDS, warm);
        o.sync = &ms.sync;
        r.epoch = (int)(s->start / ms.sync.iters);
        r.iteration = s->start;
        /* The watched accuracy of the epochs before the start, for the plateau schedule and
         * early stopping. */
        if (s->nwatched >= r.epoch)
            r.watched = s->watched;
        else if (nl_train_judges(&o))
            rc = nl_error_set(err, NL_EFORMAT,
                              "the driver's setup judges %d of the %d epochs before step %ld",
                              s->nwatched, r.epoch, s->start);
        o.resume = s->start > 0 ? &r : NULL;
    }
    if (rc == 0) {
        rc = train_steps(l, s, m, d, &o, &ms, &sl, err);
        fault = rc < 0 && ms.failed;
    }
    if (fault)
        rc = send_fault(l, s, m, ar, ms.done, &sl, err);
    nl_allreduce_free(ar);
    nl_transport_free(tr);
    nl_mesh_free(mesh);
    nl_dataset_free(d);
    nl_partition_free(part);
    nl_model_free(m);
    nl_spec_free(spec);
    slices_release(&sl);
    return rc;
}

/* Waits for the next generation's SETUP; ABORT (and HEARTBEAT, and a JUDGE of an epoch the member
 * did not wait for) frames before it are done with. */
static int next_setup(struct link *l, struct nl_setup *s, struct nl_error *err)
{
    for (;;) {
        uint32_t type, len;
        char *text;
        int rc = link_recv(l, &type, (void **)&text, &len, err);
        if (rc < 0)
            return rc;
        if (type == NL_FRAME_ABORT || type == NL_FRAME_HEARTBEAT || type == NL_FRAME_JUDGE) {
            nl_free(text);
            continue;
        }
        if (type != NL_FRAME_SETUP || len > NL_PROTO_MAX_SETUP) {
            nl_free(text);
            return nl_error_set(err, NL_EFORMAT, "the driver sent frame type %u, not a setup",
                                type);
        }
        rc = nl_setup_decode(s, text, len, err);
        nl_free(text);
        return rc;
    }
}

/* The link's mailbox and locks. */
static int link_init(struct link *l, struct nl_error *err)
{
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->out_lock, NULL);
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
    if (pipe(l->wake) < 0)
        return nl_error_set(err, NL_EIO, "pipe: %s", strerror(errno));
    fcntl(l->wake[0], F_SETFD, FD_CLOEXEC);
    fcntl(l->wake[1], F_SETFD, FD_CLOEXEC);
    return 0;
}

/* From the first SETUP to the end of the run: generations until one ends it. */
static int follow_driver(struct link *l, const unsigned char *secret, int listen_fd,
                         struct nl_error *err)
{
    struct nl_setup s;
    struct carry cr = {0};

    memset(&s, 0, sizeof s);
    int rc = next_setup(l, &s, err);
    /* From here on the driver and this worker watch each other. */
    if (rc == 0)
        rc = link_start(l, s.heartbeat_ms, err);
    while (rc == 0) {
        rc = generation(l, &s, &cr, secret, listen_fd, err);
        nl_setup_release(&s);
        if (rc == 0) {
            rc = link_send(l, NL_FRAME_DONE, NULL, 0, err);
            break;
        }
        if (rc == FAULTED)
            rc = next_setup(l, &s, err);
    }
    nl_setup_release(&s);
    nl_free(cr.data);
    return rc;
}

int nl_worker_run(int in_fd, int out_fd, const struct nl_worker_opts *wo, struct nl_error *err)
{
    /* The reader and heartbeat threads use it until the process ends. */
    static struct link l;
    unsigned char secret[32];
    int listen_fd = -1, port = 0;

    int rc = link_init(&l, err);
    if (rc < 0)
        return rc;
    nl_conn_init(&l.in, in_fd, "the driver (stdin)", DRIVER_TIMEOUT_MS);
    nl_conn_init(&l.out, out_fd, "the driver (stdout)", DRIVER_TIMEOUT_MS);
    rc = read_secret(in_fd, secret, err);
    if (rc == 0)
        rc = nl_net_listen(&listen_fd, wo->bind, wo->port_lo, wo->port_hi, &port, err);
    if (rc == 0) {
        char msg[NL_LISTEN_MAX];
        int n = nl_listen_encode(msg, port, (long)getpid(), wo->bind);
        rc = link_send(&l, NL_FRAME_LISTEN, msg, (uint32_t)n, err);
    }
    if (rc == 0)
        rc = follow_driver(&l, secret, listen_fd, err);
    if (listen_fd >= 0)
        close(listen_fd);
    return rc;
}

int nl_worker_run_link(const struct nl_worker_link *wl, struct nl_error *err)
{
    static struct link l;
    int rc = link_init(&l, err);
    if (rc < 0)
        return rc;
    l.ext = wl;
    return follow_driver(&l, NULL, -1, err);
}
