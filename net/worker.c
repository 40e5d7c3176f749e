/* The worker. Its conversation with the driver, over the SSH channel (stdin and stdout), in the
 * framing of net/wire.c:
 *
 *   driver -> worker  the run secret: 64 hex digits and a newline (never on a command line)
 *   worker -> driver  LISTEN: "PORT ADDR" (ADDR empty unless --bind named one)
 *   driver -> worker  SETUP: rank, members, options, model spec, data layout (net/proto.h)
 *   worker -> driver  HAVE: one byte, 1 when ~/.cache/nnlab/data/HASH holds the partition
 *   driver -> worker  DATA, only after HAVE 0: the partition's samples then labels (int32 LE),
 *                     in the order nl_partition_global() lists them; the worker checks the
 *                     hash and keeps a copy in the cache
 *   driver -> worker  INIT: the initial parameters (float32 LE) in the layout of the model
 *                     with SETUP's frozen layers; every member starts from them
 *   worker -> driver  METRIC after every step; WEIGHTS (rank 0, after every epoch); DONE
 *
 * Workers then join the mesh (net/mesh.c) and train with the sliced allreduce. From the moment
 * the data is in, a thread watches stdin: its end (the driver died, or stopped the run) ends
 * the process, so no worker outlives its driver. Messages go to stderr, which the driver shows
 * prefixed with the host's name. */
#include "nnlab/worker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "net/proto.h"
#include "net/sha256.h"
#include "nnlab/alloc.h"
#include "nnlab/cluster.h"
#include "nnlab/model.h"
#include "nnlab/spec.h"

#define DRIVER_TIMEOUT_MS 600000 /* the driver may take long to upload or ship data */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void hexify(char *out, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

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

static void *watch_stdin(void *arg)
{
    int fd = *(int *)arg;
    char c;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, -1) < 0 && errno == EINTR)
            continue;
        ssize_t r = read(fd, &c, 1);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        /* End of stdin, or anything at all from the driver: stop now. */
        _exit(3);
    }
    return NULL;
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
    unsigned char d[NL_SHA256_SIZE];
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
    nl_sha256(d, buf, size);
    hexify(hex, d, sizeof d);
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
    struct nl_conn *out;
    struct nl_member_sync *ms;
    const struct nl_model *m;
    int rank;
    long prev_samples, prev_correct;
    double last;
    struct nl_error err;
    int failed;
};

static int on_event(void *ud, const struct nl_event *ev)
{
    struct worker_hook *h = ud;
    unsigned char buf[NL_METRIC_SIZE];

    if (ev->kind == NL_EVENT_ITER) {
        const double t = now();
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
        if (nl_wire_send(h->out, NL_FRAME_METRIC, buf, sizeof buf, &h->err) < 0) {
            h->failed = 1;
            return 1;
        }
    } else if (ev->kind == NL_EVENT_EPOCH && h->rank == 0) {
        if (nl_wire_send(h->out, NL_FRAME_WEIGHTS, h->m->params,
                         (uint32_t)(h->m->nparams * sizeof(float)), &h->err) < 0) {
            h->failed = 1;
            return 1;
        }
        h->last = now(); /* the epoch's evaluation is not compute time */
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

static int train(const struct nl_setup *s, const unsigned char *data, const float *init,
                 size_t init_bytes, const unsigned char *secret, int listen_fd, struct nl_conn *out,
                 struct nl_error *err)
{
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;
    struct nl_partition *part = NULL;
    struct nl_dataset *d = NULL;
    struct nl_mesh *mesh = NULL;
    struct nl_allreduce *ar = NULL;
    struct nl_member_sync ms;
    struct nl_train_opts o = s->o;
    struct nl_train_result res;
    int rc;

    rc = nl_spec_parse(&spec, s->spec, "the driver's model", NULL, NULL, err);
    if (rc == 0)
        rc = nl_model_build(&m, spec, s->shape, s->nclasses, err);
    if (rc == 0)
        rc = freeze(m, s->frozen, err);
    if (rc == 0 && init_bytes != m->nparams * sizeof(float))
        rc = nl_error_set(err, NL_EFORMAT,
                          "the driver's initial weights hold %zu values, the model has %zu",
                          init_bytes / sizeof(float), m->nparams);
    if (rc == 0)
        rc = nl_partition_new(&part, s->ntrain, s->o.batch, s->size, s->rank, s->o.seed, err);
    if (rc == 0) {
        memcpy(m->params, init, init_bytes);
        d = nl_calloc(1, sizeof *d);
        const uint32_t n = nl_partition_count(part);
        const size_t sample = nl_setup_sample_bytes(s);
        if (d) {
            d->name = nl_strdup("partition");
            d->shape = s->shape;
            d->dtype = (enum nl_dtype)s->dtype;
            d->nclasses = s->nclasses;
            d->nnorm = s->nnorm;
            d->mean = nl_calloc((size_t)s->nnorm, sizeof(float));
            d->std = nl_calloc((size_t)s->nnorm, sizeof(float));
            d->split[NL_TRAIN].x = nl_malloc((size_t)n * sample + 1);
            d->split[NL_TRAIN].y = nl_calloc((size_t)n + 1, sizeof(int32_t));
        }
        if (!d || !d->name || !d->mean || !d->std || !d->split[NL_TRAIN].x ||
            !d->split[NL_TRAIN].y) {
            rc = nl_error_set(err, NL_ENOMEM, "out of memory for the partition");
        } else {
            memcpy(d->mean, s->mean, (size_t)s->nnorm * sizeof(float));
            memcpy(d->std, s->std, (size_t)s->nnorm * sizeof(float));
            memcpy(d->split[NL_TRAIN].x, data, (size_t)n * sample);
            const unsigned char *y = data + (size_t)n * sample;
            for (uint32_t i = 0; i < n; i++) {
                uint32_t v = (uint32_t)y[4 * i] | (uint32_t)y[4 * i + 1] << 8 |
                             (uint32_t)y[4 * i + 2] << 16 | (uint32_t)y[4 * i + 3] << 24;
                if (v >= (uint32_t)s->nclasses) {
                    rc = nl_error_set(err, NL_EFORMAT, "label %u of the partition is out of range",
                                      v);
                    break;
                }
                d->split[NL_TRAIN].y[i] = (int32_t)v;
            }
            d->split[NL_TRAIN].n = n;
        }
    }
    if (rc == 0)
        rc = nl_mesh_connect(&mesh, s->rank, s->size, listen_fd, s->members, secret, 32,
                             s->timeout_ms, err);
    if (rc == 0) {
        /* The trainable range and the statistics travel: frozen layers cost no bytes. */
        struct nl_allreduce_opts ao = {
            .n = m->nreduce,
            .ntrainable = m->ntrainable,
            .optim = &o.optim,
            .bf16 = s->bf16,
            .clip_value = o.clip_value,
            .clip_norm = o.clip_norm,
            .overlap = 1,
        };
        rc = nl_allreduce_new(&ar, mesh, m->params, &ao, err);
    }
    if (rc == 0) {
        nl_member_sync_init(&ms, part, ar, mesh);
        o.sync = &ms.sync;
        struct worker_hook h = {.out = out, .ms = &ms, .m = m, .rank = s->rank, .last = now()};
        struct nl_train_hooks hooks = {on_event, NULL, &h};
        rc = nl_train(m, d, &o, &hooks, &res, err);
        if (h.failed)
            *err = h.err;
    }
    if (rc == 0)
        rc = nl_wire_send(out, NL_FRAME_DONE, NULL, 0, err);
    nl_allreduce_free(ar);
    nl_mesh_free(mesh);
    nl_dataset_free(d);
    nl_partition_free(part);
    nl_model_free(m);
    nl_spec_free(spec);
    return rc;
}

int nl_worker_run(int in_fd, int out_fd, const struct nl_worker_opts *wo, struct nl_error *err)
{
    unsigned char secret[32];
    struct nl_conn in, out;
    struct nl_setup s;
    char *text = NULL;
    unsigned char *data = NULL;
    int listen_fd = -1, port = 0, rc;
    uint32_t type, len;

    memset(&s, 0, sizeof s);
    nl_conn_init(&in, in_fd, "the driver (stdin)", DRIVER_TIMEOUT_MS);
    nl_conn_init(&out, out_fd, "the driver (stdout)", DRIVER_TIMEOUT_MS);
    rc = read_secret(in_fd, secret, err);
    if (rc == 0)
        rc = nl_net_listen(&listen_fd, wo->bind, wo->port_lo, wo->port_hi, &port, err);
    if (rc == 0) {
        char msg[128];
        int n = snprintf(msg, sizeof msg, "%d %s", port, wo->bind ? wo->bind : "");
        rc = nl_wire_send(&out, NL_FRAME_LISTEN, msg, (uint32_t)n, err);
    }
    if (rc == 0)
        rc = nl_wire_recv_alloc(&in, &type, (void **)&text, &len, NL_PROTO_MAX_SETUP, err);
    if (rc == 0 && type != NL_FRAME_SETUP)
        rc = nl_error_set(err, NL_EFORMAT, "the driver sent frame type %u, not its setup", type);
    if (rc == 0)
        rc = nl_setup_decode(&s, text, len, err);
    nl_free(text);
    if (rc == 0) {
        struct nl_partition *p;
        rc = nl_partition_new(&p, s.ntrain, s.o.batch, s.size, s.rank, s.o.seed, err);
        if (rc == 0) {
            const size_t size =
                (size_t)nl_partition_count(p) * (nl_setup_sample_bytes(&s) + sizeof(int32_t));
            nl_partition_free(p);
            data = cache_load(s.data_hash, size);
            unsigned char have = data != NULL;
            rc = nl_wire_send(&out, NL_FRAME_HAVE, &have, 1, err);
            if (rc == 0 && !data) {
                if (size > NL_WIRE_MAX_PAYLOAD)
                    rc =
                        nl_error_set(err, NL_EINVAL, "a partition of %zu bytes is too large", size);
                if (rc == 0)
                    rc = nl_wire_recv_alloc(&in, &type, (void **)&data, &len, (uint32_t)size, err);
                if (rc == 0 && (type != NL_FRAME_DATA || len != size))
                    rc = nl_error_set(err, NL_EFORMAT, "the driver's data is not the partition");
                if (rc == 0) {
                    unsigned char d[NL_SHA256_SIZE];
                    char hex[65];
                    nl_sha256(d, data, size);
                    hexify(hex, d, sizeof d);
                    if (strcmp(hex, s.data_hash) != 0)
                        rc = nl_error_set(err, NL_EFORMAT, "the partition does not match its hash");
                    else
                        cache_store(s.data_hash, data, size);
                }
            }
        }
    }
    /* The initial weights, before anything else watches stdin. */
    float *init = NULL;
    uint32_t init_len = 0;
    if (rc == 0)
        rc = nl_wire_recv_alloc(&in, &type, (void **)&init, &init_len, NL_WIRE_MAX_PAYLOAD, err);
    if (rc == 0 && type != NL_FRAME_INIT)
        rc = nl_error_set(err, NL_EFORMAT, "the driver sent frame type %u, not the weights", type);
    if (rc == 0) {
        pthread_t t;
        static int watched;
        watched = in_fd;
        if (pthread_create(&t, NULL, watch_stdin, &watched) == 0)
            pthread_detach(t);
        rc = train(&s, data, init, init_len, secret, listen_fd, &out, err);
    }
    nl_free(init);
    if (listen_fd >= 0)
        close(listen_fd);
    nl_free(data);
    nl_setup_release(&s);
    return rc;
}
