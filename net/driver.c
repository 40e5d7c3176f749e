/* The driver of a cluster run. See include/nnlab/driver.h; the conversation with each worker
 * is described at the top of net/worker.c.
 *
 * The driver starts the workers one host at a time, collects where each listens, sends every
 * worker the member list, its setup and (unless its cache holds it) its partition, then follows
 * the run: it reads every worker's channel without blocking, forwards stderr lines, gathers the
 * METRIC frames of each step into one ITER event once every worker has reported it, and turns
 * rank 0's WEIGHTS into the epoch's validation, checkpoint and EPOCH event. It carries no
 * parameter traffic. On the end of the run, an error or a stop, it closes every channel: the
 * workers read the end of their stdin and exit. */
#include "nnlab/driver.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/proto.h"
#include "net/sha256.h"
#include "net/ssh.h"
#include "nnlab/alloc.h"
#include "nnlab/partition.h"
#include "nnlab/wire.h"

/* Steps in flight at most. Workers run in lockstep, but their reports may reach the driver
 * unevenly; a worker this far ahead of the oldest unreported step is not read until the others
 * catch up. */
#define WINDOW 64

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

/* One worker as the driver follows it. */
struct peer {
    struct nl_remote r;
    unsigned char *buf; /* frame being received: header then payload */
    size_t fill, cap;
    char line[512]; /* stderr not yet ended by a newline */
    size_t line_fill;
    char last_line[512]; /* the last stderr line, for error messages */
    int done, eof;
    long next_step; /* 0-based step of its next METRIC */
    struct nl_worker_metrics total;
};

struct run {
    struct peer *p;
    int n;
    const struct nl_cluster_opts *co;
    uint32_t max_frame;
};

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
 * is, or an error. */
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
                *payload = p->buf + NL_WIRE_HEADER;
                p->fill = 0;
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

static int worker_gone(struct peer *p, struct nl_error *err)
{
    /* Let the exit status arrive. */
    int status = -1;
    for (int i = 0; i < 20 && status < 0; i++) {
        ssh_channel_poll_timeout(p->r.ch, 100, 1);
        status = ssh_channel_get_exit_status(p->r.ch);
    }
    if (p->last_line[0])
        return nl_error_set(err, NL_EIO, "%s: the worker exited (status %d): %s", p->r.host, status,
                            p->last_line);
    return nl_error_set(err, NL_EIO, "%s: the worker exited (status %d) without a message",
                        p->r.host, status);
}

/* Waits up to timeout_ms for p's next frame. */
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
        ssh_channel_poll_timeout(p->r.ch, 50, 0);
    }
}

static int send_frame(struct peer *p, uint32_t type, const void *payload, size_t len,
                      struct nl_error *err)
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
    }
    return 0;
fail:
    return nl_error_set(err, NL_ENET, "%s: sending to the worker: %s", p->r.host,
                        ssh_get_error(p->r.s));
}

/* The partition of rank r: samples then labels, and its SHA-256 in hex. */
static int partition_payload(const struct nl_dataset *d, const struct nl_train_opts *o, int n,
                             int r, unsigned char **out, size_t *len, char hash[65],
                             struct nl_error *err)
{
    struct nl_partition *part;
    int rc = nl_partition_new(&part, d->split[NL_TRAIN].n, o->batch, n, r, o->seed, err);
    if (rc < 0)
        return rc;
    const uint32_t count = nl_partition_count(part);
    const uint32_t *idx = nl_partition_global(part);
    const size_t sample = nl_shape_size(d->shape) * (d->dtype == NL_U8 ? 1 : sizeof(float));
    *len = (size_t)count * (sample + 4);
    *out = nl_malloc(*len + 1);
    if (!*out) {
        nl_partition_free(part);
        return nl_error_set(err, NL_ENOMEM, "out of memory for a partition");
    }
    for (uint32_t i = 0; i < count; i++) {
        memcpy(*out + (size_t)i * sample,
               (const unsigned char *)d->split[NL_TRAIN].x + (size_t)idx[i] * sample, sample);
        uint32_t y = (uint32_t)d->split[NL_TRAIN].y[idx[i]];
        unsigned char *q = *out + (size_t)count * sample + 4 * (size_t)i;
        q[0] = (unsigned char)y;
        q[1] = (unsigned char)(y >> 8);
        q[2] = (unsigned char)(y >> 16);
        q[3] = (unsigned char)(y >> 24);
    }
    nl_partition_free(part);
    unsigned char dg[NL_SHA256_SIZE];
    nl_sha256(dg, *out, *len);
    for (int i = 0; i < NL_SHA256_SIZE; i++)
        sprintf(hash + 2 * i, "%02x", dg[i]);
    return 0;
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

static void close_all(struct run *run)
{
    for (int i = 0; i < run->n; i++) {
        nl_remote_close(&run->p[i].r);
        nl_free(run->p[i].buf);
    }
}

/* Training time is the workers' own: per step, the slowest worker's compute and communication
 * seconds (the driver may read their reports late). */
struct epoch_stats {
    long samples, correct, total_samples;
    double loss, busy, train_seconds;
};

/* An epoch is complete: rank 0's weights are its end. Validation, checkpoint, EPOCH event. */
static int end_epoch(struct run *run, struct nl_model *m, const struct nl_dataset *d,
                     const struct nl_train_opts *o, const struct nl_train_hooks *hooks,
                     struct nl_train_result *res, const float *weights,
                     struct nl_worker_metrics *step_w, long iters, long steps_done,
                     struct epoch_stats *es, struct nl_error *err)
{
    const int epoch = (int)(steps_done / iters);
    double seconds = es->busy, val_loss = NAN, val_acc = NAN;
    int rc;

    es->train_seconds += seconds;
    es->total_samples += es->samples;
    memcpy(m->params, weights, m->nparams * sizeof(float));
    res->epochs = epoch;
    res->train_loss = es->loss / (double)es->samples;
    res->train_accuracy = (double)es->correct / (double)es->samples;
    if (d->split[NL_VAL].n > 0) {
        rc = nl_evaluate(m, d, NL_VAL, 0, &val_loss, &val_acc, err);
        if (rc < 0)
            return rc;
    }
    res->val_accuracy = val_acc;
    for (int i = 0; i < run->n; i++) {
        step_w[i] = run->p[i].total;
        step_w[i].loss = step_w[i].samples > 0 ? step_w[i].loss / step_w[i].samples : 0.0;
    }
    struct nl_event ev = {
        .kind = NL_EVENT_EPOCH,
        .epoch = epoch,
        .epochs = o->epochs,
        .iter = iters,
        .iters = iters,
        .loss = res->train_loss,
        .accuracy = res->train_accuracy,
        .val_loss = val_loss,
        .val_accuracy = val_acc,
        .test_accuracy = NAN,
        .test_loss = NAN,
        .seconds = seconds,
        .images_per_second = (double)es->samples / (seconds > 0 ? seconds : 1e-9),
        .samples = es->samples,
        .nworkers = run->n,
        .workers = step_w,
    };
    if (hooks && hooks->checkpoint) {
        /* The data order of a cluster run follows from the seed and the epoch alone
         * (net/partition.c); the generator stored is seeded from them. */
        struct nl_rng rng;
        nl_rng_seed(&rng, o->seed * 0x9e3779b97f4a7c15ULL + (uint64_t)epoch);
        struct nl_checkpoint cp = {
            .epoch = epoch,
            .iteration = steps_done,
            .params = m->params,
            .nparams = m->nparams,
            .rng = &rng,
            .metrics = &ev,
        };
        rc = hooks->checkpoint(hooks->ud, &cp, err);
        if (rc < 0)
            return rc;
    }
    if (hooks && hooks->event && hooks->event(hooks->ud, &ev))
        return nl_error_set(err, NL_ECANCELED, "training stopped after epoch %d", epoch);
    es->samples = es->correct = 0;
    es->loss = es->busy = 0;
    return 0;
}

int nl_cluster_train(const struct nl_host *hosts, int n, const struct nl_cluster_opts *co,
                     struct nl_model *m, const struct nl_dataset *d, const struct nl_train_opts *o,
                     const struct nl_train_hooks *hooks, struct nl_train_result *res,
                     struct nl_worker_metrics *stats, struct nl_error *err)
{
    struct run run = {.n = n, .co = co};
    unsigned char secret[32];
    char secret_hex[66];
    struct nl_member *members = NULL;
    float *weights = NULL;
    struct nl_worker_metrics *step_w = NULL;
    struct slot slots[WINDOW];
    struct nl_metric *slot_metrics = NULL;
    char *frozen = NULL;
    int rc = 0;
    const long ntrain = (long)d->split[NL_TRAIN].n;
    const long iters = (ntrain + o->batch - 1) / o->batch;
    const int timeout = co->ssh.timeout_ms > 0 ? co->ssh.timeout_ms : 30000;

    memset(res, 0, sizeof *res);
    res->val_accuracy = res->test_accuracy = res->test_loss = NAN;
    if (n < 1)
        return nl_error_set(err, NL_EINVAL, "no hosts to train on");
    if (ntrain == 0)
        return nl_error_set(err, NL_EINVAL, "dataset '%s' has no training samples", d->name);
    rc = nl_optim_validate(&o->optim, err);
    if (rc < 0)
        return rc;
    /* What members cannot yet keep in step: decisions on validation accuracy (the driver
     * validates, the members schedule). */
    if (o->schedule.kind == NL_SCHEDULE_PLATEAU || o->target_accuracy > 0.0 || o->patience > 0)
        return nl_error_set(err, NL_EINVAL,
                            "a cluster run cannot follow validation accuracy yet (plateau "
                            "schedule, --early-stop-acc, --patience); train on one machine or "
                            "drop them");
    run.p = nl_calloc((size_t)n, sizeof *run.p);
    members = nl_calloc((size_t)n, sizeof *members);
    weights = nl_alloc_floats(m->nparams);
    step_w = nl_calloc((size_t)n, sizeof *step_w);
    run.max_frame = (uint32_t)(m->nparams * sizeof(float)) + 4096;
    /* The frozen layers' names: the members freeze the same ones, so that the initial weights
     * sent in INIT have their layout and only the trainable range is exchanged. */
    size_t fcap = 1;
    for (int i = 0; i < m->nlayers; i++)
        fcap += strlen(m->layers[i].name) + 1;
    frozen = nl_calloc(fcap, 1);
    for (int i = 0; frozen && i < m->nlayers; i++) {
        if (!m->layers[i].frozen)
            continue;
        if (frozen[0])
            strcat(frozen, ",");
        strcat(frozen, m->layers[i].name);
    }
    if (!run.p || !members || !weights || !step_w || !frozen) {
        rc = nl_error_set(err, NL_ENOMEM, "out of memory for %d workers", n);
        goto out;
    }
    rc = nl_wire_random(secret, sizeof secret, err);
    if (rc < 0)
        goto out;
    for (int i = 0; i < 32; i++)
        sprintf(secret_hex + 2 * i, "%02x", secret[i]);
    secret_hex[64] = '\n';

    /* Reach every host, settle the binary, start the workers, learn their ports. */
    for (int i = 0; i < n; i++) {
        struct peer *p = &run.p[i];
        char cmd[512], rv[64];
        int would;
        p->cap = NL_WIRE_HEADER + run.max_frame;
        p->buf = nl_malloc(p->cap);
        if (!p->buf) {
            rc = nl_error_set(err, NL_ENOMEM, "out of memory for %d workers", n);
            goto out;
        }
        rc = nl_remote_open(&p->r, hosts[i].name, &co->ssh, err);
        if (rc == 0)
            rc = nl_remote_prepare(&p->r, &co->ssh, 1, &would, rv, sizeof rv, err);
        if (rc < 0)
            goto out;
        int k = snprintf(cmd, sizeof cmd, "%s worker", p->r.path);
        if (co->port_lo || co->port_hi)
            k += snprintf(cmd + k, sizeof cmd - (size_t)k, " --port-range %d-%d", co->port_lo,
                          co->port_hi);
        if (co->bind)
            snprintf(cmd + k, sizeof cmd - (size_t)k, " --bind %s", co->bind);
        p->r.ch = ssh_channel_new(p->r.s);
        if (!p->r.ch || ssh_channel_open_session(p->r.ch) != SSH_OK ||
            ssh_channel_request_exec(p->r.ch, cmd) != SSH_OK ||
            ssh_channel_write(p->r.ch, secret_hex, 65) != 65) {
            rc = nl_error_set(err, NL_ENET, "%s: launch: cannot start the worker: %s",
                              hosts[i].name, ssh_get_error(p->r.s));
            goto out;
        }
    }
    for (int i = 0; i < n; i++) {
        struct peer *p = &run.p[i];
        uint32_t type, len;
        unsigned char *pl;
        char text[128], addr[64] = "";
        int port = 0;
        rc = next_frame(&run, p, &type, &pl, &len, timeout, err);
        if (rc < 0)
            goto out;
        if (type != NL_FRAME_LISTEN || len >= sizeof text) {
            rc = nl_error_set(err, NL_EFORMAT,
                              "%s: launch: the worker did not say where it "
                              "listens",
                              p->r.host);
            goto out;
        }
        memcpy(text, pl, len);
        text[len] = '\0';
        if (sscanf(text, "%d %63s", &port, addr) < 1 || port < 1 || port > 65535) {
            rc = nl_error_set(err, NL_EFORMAT, "%s: launch: the worker listens on '%s'?", p->r.host,
                              text);
            goto out;
        }
        snprintf(members[i].name, sizeof members[i].name, "%.63s", hosts[i].name);
        snprintf(members[i].addr, sizeof members[i].addr, "%s", addr[0] ? addr : p->r.addr);
        members[i].port = port;
    }

    /* Setups and partitions. */
    for (int i = 0; i < n; i++) {
        struct peer *p = &run.p[i];
        struct nl_setup s = {
            .rank = i,
            .size = n,
            .o = *o,
            .bf16 = co->bf16,
            .timeout_ms = timeout,
            .ntrain = (uint32_t)ntrain,
            .shape = d->shape,
            .nclasses = d->nclasses,
            .dtype = (int)d->dtype,
            .nnorm = d->nnorm < NL_PROTO_MAX_NORM ? d->nnorm : NL_PROTO_MAX_NORM,
            .members = members,
            .spec = m->spec_text,
            .frozen = frozen[0] ? frozen : NULL,
        };
        unsigned char *data = NULL, *pl;
        size_t dlen;
        char *text;
        size_t tlen;
        uint32_t type, len;
        s.o.threads = hosts[i].cores;
        s.o.sync = NULL;
        memcpy(s.mean, d->mean, (size_t)s.nnorm * sizeof(float));
        memcpy(s.std, d->std, (size_t)s.nnorm * sizeof(float));
        rc = partition_payload(d, o, n, i, &data, &dlen, s.data_hash, err);
        if (rc == 0)
            rc = nl_setup_encode(&s, &text, &tlen, err);
        if (rc == 0) {
            rc = send_frame(p, NL_FRAME_SETUP, text, tlen, err);
            nl_free(text);
        }
        if (rc == 0)
            rc = next_frame(&run, p, &type, &pl, &len, timeout, err);
        if (rc == 0 && (type != NL_FRAME_HAVE || len != 1))
            rc =
                nl_error_set(err, NL_EFORMAT, "%s: the worker did not answer its setup", p->r.host);
        if (rc == 0 && pl[0] == 0)
            rc = send_frame(p, NL_FRAME_DATA, data, dlen, err);
        nl_free(data);
        /* Every member starts from the driver's weights (initialised, or loaded by --init). */
        if (rc == 0)
            rc = send_frame(p, NL_FRAME_INIT, m->params, m->nparams * sizeof(float), err);
        if (rc < 0)
            goto out;
        p->total.host = hosts[i].name;
        step_w[i].host = hosts[i].name;
    }

    /* Follow the run. */
    slot_metrics = nl_calloc((size_t)WINDOW * (size_t)n, sizeof *slot_metrics);
    if (!slot_metrics) {
        rc = nl_error_set(err, NL_ENOMEM, "out of memory for %d workers", n);
        goto out;
    }
    for (int k = 0; k < WINDOW; k++) {
        slots[k].step = -1;
        slots[k].w = slot_metrics + (size_t)k * (size_t)n;
    }
    long next_emit = 0;
    struct epoch_stats epoch_stats = {0};
    int pending_epoch = 0, done = 0, epochs_done = 0;
    while (done < n) {
        int progressed = 0;
        for (int i = 0; i < n; i++) {
            struct peer *p = &run.p[i];
            uint32_t type, len;
            unsigned char *pl;
            /* Rank 0 waits while its epoch's weights are unprocessed (they are kept in one
             * buffer); anyone waits while too far ahead. */
            if (p->done || (i == 0 && pending_epoch > 0) || p->next_step >= next_emit + WINDOW)
                continue;
            int got = pump(&run, p, &type, &pl, &len, err);
            if (got < 0) {
                rc = got;
                goto out;
            }
            if (got == 0) {
                if (p->eof) {
                    rc = worker_gone(p, err);
                    goto out;
                }
                continue;
            }
            progressed = 1;
            if (type == NL_FRAME_METRIC && len == NL_METRIC_SIZE) {
                struct nl_metric mt;
                nl_metric_decode(&mt, pl);
                const long step = (long)(mt.epoch - 1) * iters + mt.iter - 1;
                if (mt.epoch < 1 || mt.epoch > o->epochs || mt.iter < 1 || mt.iter > iters ||
                    step != p->next_step || step >= next_emit + WINDOW) {
                    rc = nl_error_set(err, NL_EFORMAT,
                                      "%s: a metric for epoch %d step %d, while step %ld of "
                                      "the run is due",
                                      p->r.host, mt.epoch, mt.iter, next_emit + 1);
                    goto out;
                }
                p->next_step++;
                struct slot *sl = &slots[step % WINDOW];
                if (sl->step != step) {
                    struct nl_metric *keep = sl->w;
                    memset(sl, 0, sizeof *sl);
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
            } else if (type == NL_FRAME_WEIGHTS && i == 0 && len == m->nparams * sizeof(float)) {
                memcpy(weights, pl, len);
                pending_epoch++;
            } else if (type == NL_FRAME_DONE && len == 0) {
                p->done = 1;
                done++;
            } else {
                rc = nl_error_set(err, NL_EFORMAT, "%s: an unexpected frame (type %u)", p->r.host,
                                  type);
                goto out;
            }
        }
        /* Steps every worker has reported, in order; at an epoch's end, wait for rank 0's
         * weights (they precede its next step's metric on its channel). */
        for (;;) {
            if (next_emit > 0 && next_emit % iters == 0 && next_emit / iters > epochs_done) {
                if (pending_epoch == 0)
                    break;
                rc = end_epoch(&run, m, d, o, hooks, res, weights, step_w, iters, next_emit,
                               &epoch_stats, err);
                if (rc < 0)
                    goto out;
                pending_epoch--;
                epochs_done++;
                continue;
            }
            struct slot *sl = &slots[next_emit % WINDOW];
            if (sl->step != next_emit || sl->count != n)
                break;
            for (int i = 0; i < n; i++) {
                const struct nl_metric *mt = &sl->w[i];
                struct nl_worker_metrics *t = &run.p[i].total;
                t->samples += mt->samples;
                t->loss += mt->loss_sum;
                t->compute_seconds += mt->compute_seconds;
                t->comm_seconds += mt->comm_seconds;
                t->bytes_sent += mt->bytes_sent;
                step_w[i].samples = mt->samples;
                step_w[i].loss = mt->samples > 0 ? mt->loss_sum / mt->samples : 0.0;
                step_w[i].compute_seconds = mt->compute_seconds;
                step_w[i].comm_seconds = mt->comm_seconds;
                step_w[i].bytes_sent = mt->bytes_sent;
            }
            epoch_stats.samples += sl->samples;
            epoch_stats.correct += sl->correct;
            epoch_stats.loss += sl->loss_sum;
            epoch_stats.busy += sl->busy;
            if (!isfinite(sl->loss_sum)) {
                rc = nl_error_set(err, NL_ENAN,
                                  "epoch %d, step %ld: the loss is not finite; lower the "
                                  "learning rate (now %g)",
                                  sl->epoch, sl->iter, o->optim.lr);
                goto out;
            }
            if (hooks && hooks->event) {
                double elapsed = epoch_stats.busy;
                long gstep = next_emit + 1;
                double per_step = (epoch_stats.train_seconds + elapsed) / (double)gstep;
                struct nl_event ev = {
                    .kind = NL_EVENT_ITER,
                    .epoch = sl->epoch,
                    .epochs = o->epochs,
                    .iter = sl->iter,
                    .iters = iters,
                    .loss = sl->loss_sum / (double)sl->samples,
                    .accuracy = (double)epoch_stats.correct / (double)epoch_stats.samples,
                    .val_loss = NAN,
                    .val_accuracy = NAN,
                    .test_accuracy = NAN,
                    .test_loss = NAN,
                    .seconds = elapsed,
                    .images_per_second =
                        (double)epoch_stats.samples / (elapsed > 0 ? elapsed : 1e-9),
                    .eta_seconds = per_step * (double)((long)o->epochs * iters - gstep),
                    .lr = nl_schedule_lr(&o->schedule, o->optim.lr, gstep, iters,
                                         (long)o->epochs * iters, 1.0f),
                    .samples = epoch_stats.samples,
                    .nworkers = n,
                    .workers = step_w,
                };
                if (hooks->event(hooks->ud, &ev)) {
                    rc = nl_error_set(err, NL_ECANCELED, "training stopped at epoch %d", sl->epoch);
                    goto out;
                }
            }
            sl->step = -1;
            next_emit++;
        }
        if (co->stop && *co->stop) {
            rc = nl_error_set(err, NL_ECANCELED, "training stopped");
            goto out;
        }
        if (!progressed) {
            struct pollfd pf[64];
            int np = 0;
            for (int i = 0; i < n && np < 64; i++)
                if (!run.p[i].done)
                    pf[np++] = (struct pollfd){.fd = ssh_get_fd(run.p[i].r.s), .events = POLLIN};
            poll(pf, (nfds_t)np, 20);
        }
    }
    if (res->epochs != o->epochs) {
        rc = nl_error_set(err, NL_EIO, "the workers finished after %d of %d epochs", res->epochs,
                          o->epochs);
        goto out;
    }
    if (d->split[NL_TEST].n > 0) {
        rc = nl_evaluate(m, d, NL_TEST, 0, &res->test_loss, &res->test_accuracy, err);
        if (rc < 0)
            goto out;
    }
    res->seconds = epoch_stats.train_seconds;
    res->images_per_second = (double)epoch_stats.total_samples /
                             (epoch_stats.train_seconds > 0 ? epoch_stats.train_seconds : 1e-9);
    for (int i = 0; i < n; i++) {
        step_w[i] = run.p[i].total;
        step_w[i].loss = step_w[i].samples > 0 ? step_w[i].loss / step_w[i].samples : 0.0;
        if (stats)
            stats[i] = step_w[i];
    }
    if (hooks && hooks->event) {
        struct nl_event ev = {
            .kind = NL_EVENT_DONE,
            .epoch = res->epochs,
            .epochs = o->epochs,
            .loss = res->train_loss,
            .accuracy = res->train_accuracy,
            .val_loss = NAN,
            .val_accuracy = res->val_accuracy,
            .test_accuracy = res->test_accuracy,
            .test_loss = res->test_loss,
            .seconds = res->seconds,
            .images_per_second = res->images_per_second,
            .nworkers = n,
            .workers = step_w,
        };
        hooks->event(hooks->ud, &ev);
    }
    rc = 0;
out:
    if (run.p)
        close_all(&run);
    nl_free(run.p);
    nl_free(members);
    nl_free(weights);
    nl_free(step_w);
    nl_free(slot_metrics);
    nl_free(frozen);
    return rc;
}
