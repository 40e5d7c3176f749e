/* The sliced allreduce. See include/nnlab/allreduce.h for the scheme.
 *
 * A step is a small state machine over the member's connections. With each peer k a member
 * exchanges, in each direction, one frame of each kind per step:
 *   GRAD   slice k of my gradient to k; from k, its piece of my slice;
 *   NORM   (clip-norm only) the sum of squares of my summed slice; from k, that of its slice;
 *   PARAM  my updated slice (parameters, then statistics sums); from k, its slice.
 * A frame to a peer starts once the one before it on that connection is sent and its content
 * exists: GRAD k once grad[lo_k, hi_k) is final (the caller says so with two frontiers: its
 * trainable part lies in grad[front.t, ntrainable), its statistics in grad[front.s, n)), NORM once
 * my pieces are summed, PARAM once my slice is updated; when several could go, GRAD first (an owner
 * waits for it), then NORM, then PARAM. So an owner of high layers may broadcast its slice to a
 * peer before its gradient for that peer's lower slice is final, and frames arrive in whichever
 * order their contents came to exist: the receiver routes each by the type in its header, and
 * refuses a type that is not due (or comes twice) and a length that is not the slice's. One
 * poll() loop moves whichever bytes can move, so no member blocks in a send while its peers
 * block in theirs. Nothing here depends on arrival order: pieces are summed in rank order into
 * fp32 once all are there, and norms likewise, so an overlapped step gives the same bits as a
 * synchronous one.
 *
 * Payloads: fp32 floats (received straight into the parameters, except for slices holding
 * statistics, which go through a staging array since their sums belong in grad), or with bf16
 * compression the trainable part as bf16 followed by the statistics as fp32, so a slice [lo, hi)
 * takes the uint16 positions [pos(lo), pos(hi)) of a staging array where pos(i) = i below
 * ntrainable and ntrainable + 2 (i - ntrainable) above. Received frames must have the expected type
 * and length (checked from the header, before any payload byte is read) and a matching checksum,
 * or on a sealed connection (net/wire.c) an authentic header and payload: a sealed payload is
 * encrypted into a per-peer buffer when its frame starts, and decrypted in place on arrival.
 *
 * Synchronous steps run the loop in the caller with the whole gradient final. Overlapped steps
 * run it on the allreduce's communication thread, started at nl_allreduce_new: begin hands it the
 * step, ready lowers the frontiers and wakes it through an eventfd, finish waits for its result.
 * Memory is allocated once in nl_allreduce_new; a step allocates nothing. */
#include "nnlab/allreduce.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nnlab/alloc.h"

enum { F_GRAD, F_NORM, F_PARAM };

struct xfer {
    /* Out: header, payload and tag to send; in: header, then payload into in (chosen by the
     * header's type), then tag. A frame is hb + len + tb bytes (the tag only when sealed). */
    size_t hb, tb;
    unsigned char out_h[NL_WIRE_HEAD_MAX], out_tag[NL_WIRE_TAG];
    const unsigned char *out;
    size_t out_len, out_done; /* out_done counts the header too */
    unsigned char *ct; /* sealed: the outgoing payload's ciphertext (the longest frame to k) */
    unsigned char in_h[NL_WIRE_HEAD_MAX], in_tag[NL_WIRE_TAG];
    unsigned char *in;
    size_t in_len, in_done;
    uint32_t in_type, in_crc;
    int in_kind;                /* F_ kind of the frame coming in */
    int out_active, in_active;  /* a frame under way (in: or its header awaited) */
    unsigned out_mask, in_mask; /* 1 << F_ kind of the step's frames started */
};

enum { PHASE_IDLE, PHASE_RUN, PHASE_DONE, PHASE_QUIT };

/* What of the gradient is final: grad[t, ntrainable) and grad[s, n). */
struct front {
    size_t t, s;
};

struct nl_allreduce {
    struct nl_mesh *mesh;
    size_t n, nt; /* floats exchanged; the trainable ones */
    int bf16;
    float clip_value, clip_norm;
    const struct nl_optim *optim;
    size_t *lo, *hi;   /* (size) slice bounds */
    size_t own, own_t; /* floats of my slice; of them trainable */
    size_t own_bytes;  /* of my slice on the wire */
    /* (own) fp32 weights of my slice's trainable part; after the update its tail holds the
     * summed statistics, so that the fp32 broadcast is one block. */
    float *master;
    float *sum;         /* (own) */
    float *state_block; /* (nstate x own_t) optimizer state */
    float *state[NL_OPTIM_MAX_STATE];
    unsigned char *pieces; /* (size x own_bytes) received gradient pieces */
    uint16_t *stage_out;   /* bf16: (pos(n)) outgoing gradient */
    uint16_t *stage_in;    /* bf16: (pos(n)) incoming parameters and sums */
    float *stagef_in;      /* fp32 with statistics: (n) incoming slices that hold some */
    uint16_t *stage_own;   /* bf16: (own_bytes / 2) my outgoing parameters and sums */
    double *norms;         /* (size) clip-norm: each owner's sum of squares */
    struct xfer *x;        /* (size) */
    struct pollfd *pfd;    /* (size + 2): the peers, the eventfd, the cancel fd */
    int *pidx;             /* (size + 2) */

    /* The step under way. */
    float *params, *grad;
    long step;
    float lr;
    struct front front; /* what of grad is final; under lock when overlapping */
    int got_grads, got_norms, reduced, updated;
    double t_first, owner_seconds;
    double exchange_seconds, wait_seconds; /* of the last step */
    unsigned long long bytes, early_bytes; /* sent in the last step; of them before all was final */

    /* Overlap: the communication thread and what it shares with the caller. */
    int overlap, thread_started, efd;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int phase, rc;
    struct nl_error err;

    /* Recovery (see nl_allreduce_export): the own slice's trainable master and optimizer state
     * as they were before the latest optimizer step, and the steps both copies are "after". */
    float *bak; /* ((1 + nstate) x own_t): master, then the state arrays */
    long cur_step, bak_step;
    int cancel_fd; /* readable: give up the exchange with NL_ECANCELED; -1: none */
};

uint16_t nl_bf16_from_float(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* a quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float nl_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The uint16 position of float i in a bf16 staging array. */
static size_t pos(const struct nl_allreduce *a, size_t i)
{
    return i <= a->nt ? i : a->nt + 2 * (i - a->nt);
}

/* Bytes of the floats [lo, hi) on the wire. */
static size_t wire_bytes(const struct nl_allreduce *a, size_t lo, size_t hi)
{
    return a->bf16 ? 2 * (pos(a, hi) - pos(a, lo)) : 4 * (hi - lo);
}

/* Floats of [lo, hi) below ntrainable. */
static size_t trainable_part(const struct nl_allreduce *a, size_t lo, size_t hi)
{
    if (lo >= a->nt)
        return 0;
    return (hi < a->nt ? hi : a->nt) - lo;
}

static void *comm_main(void *arg);

void nl_allreduce_free(struct nl_allreduce *a)
{
    if (!a)
        return;
    if (a->thread_started) {
        pthread_mutex_lock(&a->lock);
        a->phase = PHASE_QUIT;
        pthread_cond_broadcast(&a->cond);
        pthread_mutex_unlock(&a->lock);
        pthread_join(a->thread, NULL);
    }
    if (a->overlap) {
        pthread_mutex_destroy(&a->lock);
        pthread_cond_destroy(&a->cond);
    }
    if (a->efd >= 0)
        close(a->efd);
    nl_free(a->lo);
    nl_free(a->hi);
    nl_free(a->master);
    nl_free(a->sum);
    nl_free(a->state_block);
    nl_free(a->pieces);
    nl_free(a->stage_out);
    nl_free(a->stage_in);
    nl_free(a->stagef_in);
    nl_free(a->stage_own);
    nl_free(a->norms);
    for (int k = 0; a->x && k < a->mesh->size; k++)
        nl_free(a->x[k].ct);
    nl_free(a->x);
    nl_free(a->pfd);
    nl_free(a->pidx);
    nl_free(a->bak);
    nl_free(a);
}

void nl_allreduce_slice(const struct nl_allreduce *a, int r, size_t *lo, size_t *hi)
{
    *lo = a->lo[r];
    *hi = a->hi[r];
}

int nl_allreduce_new(struct nl_allreduce **out, struct nl_mesh *mesh, const float *params,
                     const struct nl_allreduce_opts *o, struct nl_error *err)
{
    const int size = mesh->size, rank = mesh->rank;
    const size_t n = o->n;
    struct nl_allreduce *a;

    *out = NULL;
    if (o->ntrainable > n)
        return nl_error_set(err, NL_EINVAL,
                            "the allreduce's %zu trainable floats exceed the %zu it exchanges",
                            o->ntrainable, n);
    a = nl_calloc(1, sizeof *a);
    if (!a)
        goto oom;
    a->efd = -1;
    a->mesh = mesh;
    a->n = n;
    a->nt = o->ntrainable;
    a->bf16 = o->bf16;
    a->optim = o->optim;
    a->clip_value = o->clip_value;
    a->clip_norm = o->clip_norm;
    a->lo = nl_calloc((size_t)size, sizeof *a->lo);
    a->hi = nl_calloc((size_t)size, sizeof *a->hi);
    if (!a->lo || !a->hi)
        goto oom;
    for (int r = 0; r < size; r++)
        nl_allreduce_bounds(n, size, r, &a->lo[r], &a->hi[r]);
    a->cancel_fd = -1;
    a->own = a->hi[rank] - a->lo[rank];
    a->own_t = trainable_part(a, a->lo[rank], a->hi[rank]);
    a->own_bytes = wire_bytes(a, a->lo[rank], a->hi[rank]);
    const int nstate = nl_optim_state_arrays(o->optim);
    a->master = nl_alloc_floats(a->own + 1);
    a->sum = nl_alloc_floats(a->own + 1);
    a->state_block = nl_alloc_floats(a->own_t * (size_t)(nstate > 0 ? nstate : 1) + 1);
    a->pieces = nl_calloc((size_t)size * a->own_bytes + 1, 1);
    a->norms = nl_calloc((size_t)size, sizeof *a->norms);
    a->x = nl_calloc((size_t)size, sizeof *a->x);
    a->pfd = nl_calloc((size_t)size + 2, sizeof *a->pfd);
    a->pidx = nl_calloc((size_t)size + 2, sizeof *a->pidx);
    a->bak = nl_alloc_floats(a->own_t * (size_t)(1 + nstate) + 1);
    if (!a->master || !a->sum || !a->state_block || !a->pieces || !a->norms || !a->x || !a->pfd ||
        !a->pidx || !a->bak)
        goto oom;
    if (a->bf16) {
        a->stage_out = nl_calloc(pos(a, n) + 1, sizeof *a->stage_out);
        a->stage_in = nl_calloc(pos(a, n) + 1, sizeof *a->stage_in);
        a->stage_own = nl_calloc(a->own_bytes / 2 + 1, sizeof *a->stage_own);
        if (!a->stage_out || !a->stage_in || !a->stage_own)
            goto oom;
    } else if (a->nt < n) {
        a->stagef_in = nl_alloc_floats(n);
        if (!a->stagef_in)
            goto oom;
    }
    for (int k = 0; k < size; k++) {
        struct nl_conn *c = &mesh->peers[k];
        size_t cap = wire_bytes(a, a->lo[k], a->hi[k]);
        if (cap < a->own_bytes)
            cap = a->own_bytes;
        if (cap < sizeof(double))
            cap = sizeof(double);
        a->x[k].hb = nl_wire_head_bytes(c);
        a->x[k].tb = nl_wire_tail_bytes(c);
        if (k != rank && c->seal && !(a->x[k].ct = nl_malloc(cap)))
            goto oom;
    }
    for (int k = 0; k < nstate; k++)
        a->state[k] = a->state_block + (size_t)k * a->own_t;
    memcpy(a->master, params + a->lo[rank], a->own_t * sizeof(float));
    memcpy(a->bak, a->master, a->own_t * sizeof(float));
    if (o->overlap) {
        a->overlap = 1;
        pthread_mutex_init(&a->lock, NULL);
        pthread_cond_init(&a->cond, NULL);
        a->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (a->efd < 0) {
            int e = errno;
            nl_allreduce_free(a);
            return nl_error_set(err, NL_EIO, "eventfd for the allreduce: %s", strerror(e));
        }
        int e = pthread_create(&a->thread, NULL, comm_main, a);
        if (e != 0) {
            nl_allreduce_free(a);
            return nl_error_set(err, NL_ENOMEM, "cannot start the allreduce's thread: %s",
                                strerror(e));
        }
        a->thread_started = 1;
    }
    *out = a;
    return 0;
oom:
    nl_allreduce_free(a);
    return nl_error_set(err, NL_ENOMEM, "out of memory for the allreduce of %zu parameters", n);
}

/* Starts a frame to peer k: its header, and on a sealed connection its payload sealed. */
static int out_set(struct nl_allreduce *a, int k, uint32_t type, const void *out, size_t len,
                   struct nl_error *err)
{
    struct nl_conn *c = &a->mesh->peers[k];
    struct xfer *x = &a->x[k];
    int rc = nl_wire_seal_head(c, x->out_h, type, out, (uint32_t)len, err);

    if (rc == 0 && c->seal) {
        rc = nl_wire_seal_payload(c, x->ct, out, (uint32_t)len, x->out_tag, err);
        out = x->ct;
    }
    if (rc < 0)
        return rc;
    x->out = out;
    x->out_len = len;
    x->out_done = 0;
    x->out_active = 1;
    return 0;
}

/* The frames of a step between two members, as a mask of F_ kinds. */
static unsigned all_frames(const struct nl_allreduce *a)
{
    return 1u << F_GRAD | 1u << F_PARAM | (a->clip_norm > 0.0f ? 1u << F_NORM : 0u);
}

/* Where a frame from peer k with that header goes: sets x->in and its kind, or refuses it. */
static int in_route(struct nl_allreduce *a, int k, uint32_t type, uint32_t len,
                    struct nl_error *err)
{
    struct xfer *x = &a->x[k];
    const size_t klo = a->lo[k], khi = a->hi[k];
    int f = -1;
    size_t want = 0;
    void *dst = NULL;

    if (type == NL_FRAME_GRAD) {
        f = F_GRAD;
        dst = a->pieces + (size_t)k * a->own_bytes;
        want = a->own_bytes;
    } else if (type == NL_FRAME_NORM) {
        f = F_NORM;
        dst = &a->norms[k];
        want = sizeof(double);
    } else if (type == NL_FRAME_PARAM) {
        f = F_PARAM;
        want = wire_bytes(a, klo, khi);
        if (a->bf16)
            dst = a->stage_in + pos(a, klo);
        else
            dst = khi <= a->nt ? a->params + klo : a->stagef_in + klo;
    }
    if (f < 0 || !(all_frames(a) & 1u << f) || (x->in_mask & 1u << f) || len != want)
        return nl_error_set(err, NL_EFORMAT,
                            "%s: sent a frame of type %u and %u bytes, which was not due in this "
                            "step of the exchange",
                            a->mesh->peers[k].peer, type, len);
    x->in = dst;
    x->in_len = want;
    x->in_type = type;
    x->in_kind = f;
    x->in_mask |= 1u << f;
    return 0;
}

/* Moves bytes on one socket without blocking: 0 (progress or none), or NL_ENET. */
static int pump_out(int fd, struct xfer *x, struct nl_conn *c)
{
    const size_t hb = x->hb, body = hb + x->out_len;
    while (x->out_done < body + x->tb) {
        const unsigned char *p;
        size_t left;
        if (x->out_done < hb) {
            p = x->out_h + x->out_done;
            left = hb - x->out_done;
        } else if (x->out_done < body) {
            p = x->out + (x->out_done - hb);
            left = body - x->out_done;
        } else {
            p = x->out_tag + (x->out_done - body);
            left = body + x->tb - x->out_done;
        }
        ssize_t w = send(fd, p, left, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            x->out_done += (size_t)w;
            c->bytes_sent += (uint64_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return NL_ENET;
    }
    x->out_active = 0;
    return 0;
}

/* 1 when the frame is complete, 0 when more is to come, or an error. */
static int pump_in(struct nl_allreduce *a, int k, struct nl_error *err)
{
    struct nl_conn *c = &a->mesh->peers[k];
    struct xfer *x = &a->x[k];
    const int fd = c->fd;

    const size_t hb = x->hb;
    while (x->in_done < hb + x->in_len + x->tb) {
        const size_t body = hb + x->in_len;
        unsigned char *p;
        size_t left;
        if (x->in_done < hb) {
            p = x->in_h + x->in_done;
            left = hb - x->in_done;
        } else if (x->in_done < body) {
            p = x->in + (x->in_done - hb);
            left = body - x->in_done;
        } else {
            p = x->in_tag + (x->in_done - body);
            left = body + x->tb - x->in_done;
        }
        ssize_t r = recv(fd, p, left, MSG_DONTWAIT);
        if (r > 0) {
            x->in_done += (size_t)r;
            c->bytes_received += (uint64_t)r;
            if (x->in_done == hb) {
                uint32_t type, len;
                int rc = nl_wire_open_head(c, x->in_h, &type, &len, &x->in_crc, NL_WIRE_MAX_PAYLOAD,
                                           err);
                if (rc == 0)
                    rc = in_route(a, k, type, len, err);
                if (rc < 0)
                    return rc;
            }
            continue;
        }
        if (r == 0)
            return nl_error_set(err, NL_ENET, "%s: closed the connection during an exchange",
                                c->peer);
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return nl_error_set(err, NL_ENET, "%s: receiving: %s", c->peer, strerror(errno));
    }
    int rc =
        nl_wire_open_payload(c, x->in_type, x->in, (uint32_t)x->in_len, x->in_crc, x->in_tag, err);
    if (rc < 0)
        return rc;
    x->in_active = 0;
    return 1;
}

double nl_allreduce_exchange_seconds(const struct nl_allreduce *a)
{
    return a->exchange_seconds;
}

double nl_allreduce_wait_seconds(const struct nl_allreduce *a)
{
    return a->wait_seconds;
}

double nl_allreduce_early_fraction(const struct nl_allreduce *a)
{
    return a->bytes > 0 ? (double)a->early_bytes / (double)a->bytes : 0.0;
}

int nl_allreduce_overlaps(const struct nl_allreduce *a)
{
    return a->overlap;
}

/* Adds member k's piece of my slice into dst_sum as floats (copies it there when first). */
static void piece_floats(const struct nl_allreduce *a, int k, float *dst_sum, int first)
{
    const int rank = a->mesh->rank;
    const size_t own = a->own, own_t = a->own_t;
    const unsigned char *p = a->pieces + (size_t)k * a->own_bytes;

    if (k == rank || !a->bf16) {
        /* My own piece is my unrounded gradient. */
        const float *f = k == rank ? a->grad + a->lo[rank] : (const float *)p;
        if (first)
            memcpy(dst_sum, f, own * sizeof(float));
        else
            for (size_t i = 0; i < own; i++)
                dst_sum[i] += f[i];
        return;
    }
    const uint16_t *h = (const uint16_t *)p;
    for (size_t i = 0; i < own_t; i++)
        dst_sum[i] = first ? nl_bf16_to_float(h[i]) : dst_sum[i] + nl_bf16_to_float(h[i]);
    for (size_t i = own_t; i < own; i++) {
        float f;
        memcpy(&f, p + 2 * own_t + 4 * (i - own_t), sizeof f);
        dst_sum[i] = first ? f : dst_sum[i] + f;
    }
}

/* The owner's sums: every piece of my slice in rank order, clip-value, and for clip-norm the sum
 * of squares of the clipped trainable part. */
static void owner_reduce(struct nl_allreduce *a)
{
    const size_t own_t = a->own_t;
    const float v = a->clip_value;

    for (int k = 0; k < a->mesh->size; k++)
        piece_floats(a, k, a->sum, k == 0);
    if (v > 0.0f)
        for (size_t i = 0; i < own_t; i++)
            a->sum[i] = a->sum[i] > v ? v : a->sum[i] < -v ? -v : a->sum[i];
    if (a->clip_norm > 0.0f) {
        double sumsq = 0.0;
        for (size_t i = 0; i < own_t; i++)
            sumsq += (double)a->sum[i] * a->sum[i];
        a->norms[a->mesh->rank] = sumsq;
    }
}

/* The slice's master and state before the optimizer step under way, for nl_allreduce_export. */
static void keep_rollback(struct nl_allreduce *a)
{
    const int nstate = nl_optim_state_arrays(a->optim);
    memcpy(a->bak, a->master, a->own_t * sizeof(float));
    if (nstate > 0)
        memcpy(a->bak + a->own_t, a->state_block, (size_t)nstate * a->own_t * sizeof(float));
    a->bak_step = a->cur_step;
    a->cur_step = a->step;
}

/* The owner's update of its slice, once its pieces are summed (and with clip-norm every owner's
 * sum of squares is in): the clip-norm scale, then the optimizer on the trainable part, then the
 * broadcast's payload and this member's own copy of the result. The master copy and the state
 * are changed here and nowhere else. */
static void owner_update(struct nl_allreduce *a)
{
    const int rank = a->mesh->rank;
    const size_t lo = a->lo[rank], own = a->own, own_t = a->own_t;

    if (a->clip_norm > 0.0f) {
        double sumsq = 0.0;
        for (int k = 0; k < a->mesh->size; k++)
            sumsq += a->norms[k];
        const double norm = sqrt(sumsq);
        if (norm > a->clip_norm) {
            const float scale = (float)(a->clip_norm / (norm + 1e-6));
            for (size_t i = 0; i < own_t; i++)
                a->sum[i] *= scale;
        }
    }
    keep_rollback(a);
    nl_optim_step(a->optim, a->master, a->sum, a->state, own_t, a->step, a->lr);

    memcpy(a->master + own_t, a->sum + own_t, (own - own_t) * sizeof(float));
    memcpy(a->grad + lo + own_t, a->sum + own_t, (own - own_t) * sizeof(float));
    if (a->bf16) {
        for (size_t i = 0; i < own_t; i++) {
            a->stage_own[i] = nl_bf16_from_float(a->master[i]);
            a->params[lo + i] = nl_bf16_to_float(a->stage_own[i]);
        }
        memcpy(a->stage_own + own_t, a->sum + own_t, (own - own_t) * sizeof(float));
    } else {
        memcpy(a->params + lo, a->master, own_t * sizeof(float));
    }
}

/* Starts the next frame to peer k whose content exists. */
/* Whether slice k of the gradient is final. */
static int slice_final(const struct nl_allreduce *a, int k, struct front f)
{
    const size_t lo = a->lo[k], hi = a->hi[k];
    const int t_ok = lo >= a->nt || lo >= f.t;
    const int s_ok = hi <= a->nt || (lo > a->nt ? lo : a->nt) >= f.s;
    return t_ok && s_ok;
}

/* Whether the whole gradient is final. */
static int all_final(const struct nl_allreduce *a, struct front f)
{
    return f.t == 0 && f.s <= a->nt;
}

static int next_out(struct nl_allreduce *a, int k, struct front f, struct nl_error *err)
{
    struct xfer *x = &a->x[k];
    const size_t klo = a->lo[k], khi = a->hi[k];
    const unsigned pending = all_frames(a) & ~x->out_mask;

    if (x->out_active)
        return 0;
    if ((pending & 1u << F_GRAD) && slice_final(a, k, f)) {
        x->out_mask |= 1u << F_GRAD;
        if (a->bf16) {
            const size_t t = trainable_part(a, klo, khi);
            for (size_t i = klo; i < klo + t; i++)
                a->stage_out[i] = nl_bf16_from_float(a->grad[i]);
            memcpy(a->stage_out + pos(a, klo + t), a->grad + klo + t,
                   (khi - klo - t) * sizeof(float));
            return out_set(a, k, NL_FRAME_GRAD, a->stage_out + pos(a, klo), wire_bytes(a, klo, khi),
                           err);
        }
        return out_set(a, k, NL_FRAME_GRAD, a->grad + klo, wire_bytes(a, klo, khi), err);
    }
    if ((pending & 1u << F_NORM) && a->reduced) {
        x->out_mask |= 1u << F_NORM;
        return out_set(a, k, NL_FRAME_NORM, &a->norms[a->mesh->rank], sizeof(double), err);
    }
    if ((pending & 1u << F_PARAM) && a->updated) {
        x->out_mask |= 1u << F_PARAM;
        const void *mine = a->bf16 ? (const void *)a->stage_own : (const void *)a->master;
        return out_set(a, k, NL_FRAME_PARAM, mine, a->own_bytes, err);
    }
    return 0;
}

/* Awaits the next frame from peer k, whichever it is. */
static void next_in(struct nl_allreduce *a, int k)
{
    struct xfer *x = &a->x[k];

    if (x->in_active || x->in_mask == all_frames(a))
        return;
    x->in = NULL;
    x->in_len = 0;
    x->in_done = 0;
    x->in_active = 1;
}

/* A frame from peer k has come in whole: count it, and put parameters where they belong. */
static void in_done(struct nl_allreduce *a, int k)
{
    const int f = a->x[k].in_kind;
    const size_t klo = a->lo[k], khi = a->hi[k], t = trainable_part(a, klo, khi);

    if (f == F_GRAD) {
        a->got_grads++;
    } else if (f == F_NORM) {
        a->got_norms++;
    } else if (a->bf16) {
        for (size_t i = klo; i < klo + t; i++)
            a->params[i] = nl_bf16_to_float(a->stage_in[i]);
        memcpy(a->grad + klo + t, a->stage_in + pos(a, klo + t), (khi - klo - t) * sizeof(float));
    } else if (khi > a->nt) {
        memcpy(a->params + klo, a->stagef_in + klo, t * sizeof(float));
        memcpy(a->grad + klo + t, a->stagef_in + klo + t, (khi - klo - t) * sizeof(float));
    }
}

static struct front front_get(struct nl_allreduce *a)
{
    if (!a->overlap)
        return a->front;
    pthread_mutex_lock(&a->lock);
    struct front f = a->front;
    pthread_mutex_unlock(&a->lock);
    return f;
}

static void step_reset(struct nl_allreduce *a, float *params, float *grad, long step, float lr)
{
    a->params = params;
    a->grad = grad;
    a->step = step;
    a->lr = lr;
    a->got_grads = a->got_norms = a->reduced = a->updated = 0;
    a->t_first = -1.0;
    a->owner_seconds = 0.0;
    a->bytes = a->early_bytes = 0;
    for (int k = 0; k < a->mesh->size; k++) {
        struct xfer *x = &a->x[k];
        x->out_active = x->in_active = 0;
        x->out_mask = x->in_mask = 0;
    }
}

/* Runs the step to its end. */
static int step_loop(struct nl_allreduce *a, struct nl_error *err)
{
    struct nl_mesh *m = a->mesh;
    const int size = m->size, rank = m->rank;

    /* Called off before it began: nothing is sent (a peer called off too may be gone). */
    if (a->cancel_fd >= 0) {
        struct pollfd c = {.fd = a->cancel_fd, .events = POLLIN};
        if (poll(&c, 1, 0) > 0 && (c.revents & (POLLIN | POLLHUP | POLLERR)))
            return nl_error_set(err, NL_ECANCELED, "the exchange was called off");
    }

    for (;;) {
        const struct front f = front_get(a);
        if (a->t_first < 0.0 && (f.t <= a->nt || f.s <= a->n))
            a->t_first = now();

        /* What this member can do by itself. */
        if (!a->reduced && slice_final(a, rank, f) && a->got_grads == size - 1) {
            double t0 = now();
            owner_reduce(a);
            a->reduced = 1;
            a->owner_seconds += now() - t0;
        }
        if (a->reduced && !a->updated && (a->clip_norm <= 0.0f || a->got_norms == size - 1)) {
            double t0 = now();
            owner_update(a);
            a->updated = 1;
            a->owner_seconds += now() - t0;
        }
        int done = a->updated, np = 0, timeout = 0;
        for (int k = 0; k < size; k++) {
            if (k == rank)
                continue;
            struct xfer *x = &a->x[k];
            const int orc = next_out(a, k, f, err);
            if (orc < 0)
                return orc;
            next_in(a, k);
            done &= !x->out_active && x->out_mask == all_frames(a) && !x->in_active &&
                    x->in_mask == all_frames(a);
            short ev = (short)((x->out_active ? POLLOUT : 0) | (x->in_active ? POLLIN : 0));
            if (!ev)
                continue;
            a->pfd[np] = (struct pollfd){.fd = m->peers[k].fd, .events = ev};
            a->pidx[np++] = k;
            if (m->peers[k].timeout_ms > timeout)
                timeout = m->peers[k].timeout_ms;
        }
        if (done)
            return 0;
        /* Waiting for the rest of the gradient as well: the computation, not the peers. */
        const int local = a->overlap && !all_final(a, f);
        if (local) {
            a->pfd[np] = (struct pollfd){.fd = a->efd, .events = POLLIN};
            a->pidx[np++] = -1;
            if (timeout == 0)
                timeout = 1000;
        }
        if (np == 0)
            return nl_error_set(err, NL_EINVAL, "the allreduce's step is stuck (a bug)");
        if (a->cancel_fd >= 0) {
            a->pfd[np] = (struct pollfd){.fd = a->cancel_fd, .events = POLLIN};
            a->pidx[np++] = -2;
        }
        int r = poll(a->pfd, (nfds_t)np, timeout);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return nl_error_set(err, NL_ENET, "poll: %s", strerror(errno));
        if (r == 0 && local)
            continue;
        if (r == 0)
            return nl_error_set(err, NL_ETIMEDOUT, "%s: no progress in the exchange within %d ms",
                                m->peers[a->pidx[0]].peer, timeout);
        /* Called off, whatever else came: a peer called off too may have closed already. */
        if (a->pidx[np - 1] == -2 && (a->pfd[np - 1].revents & (POLLIN | POLLHUP | POLLERR)))
            return nl_error_set(err, NL_ECANCELED, "the exchange was called off");
        for (int i = 0; i < np; i++) {
            const int k = a->pidx[i];
            if (k == -2)
                continue;
            if (k < 0) {
                uint64_t v;
                if (a->pfd[i].revents & POLLIN)
                    (void)!read(a->efd, &v, sizeof v);
                continue;
            }
            struct nl_conn *c = &m->peers[k];
            if (a->pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                int rc = pump_in(a, k, err);
                if (rc < 0)
                    return rc;
                if (rc == 1)
                    in_done(a, k);
            }
            if (a->x[k].out_active && (a->pfd[i].revents & (POLLOUT | POLLERR))) {
                const uint64_t before = c->bytes_sent;
                if (pump_out(c->fd, &a->x[k], c) < 0)
                    return nl_error_set(err, NL_ENET, "%s: sending: %s", c->peer, strerror(errno));
                a->bytes += c->bytes_sent - before;
                if (!all_final(a, f))
                    a->early_bytes += c->bytes_sent - before;
            }
        }
    }
}

static void step_times(struct nl_allreduce *a, double end)
{
    a->exchange_seconds = a->t_first >= 0.0 ? end - a->t_first - a->owner_seconds : 0.0;
    if (a->exchange_seconds < 0.0)
        a->exchange_seconds = 0.0;
}

int nl_allreduce_step(struct nl_allreduce *a, float *params, float *grad, long step, float lr,
                      struct nl_error *err)
{
    if (a->overlap) {
        nl_allreduce_begin(a, params, grad, step, lr);
        nl_allreduce_ready(a, 0, 0);
        return nl_allreduce_finish(a, err);
    }
    const double t0 = now();
    step_reset(a, params, grad, step, lr);
    a->front = (struct front){0, a->nt};
    int rc = step_loop(a, err);
    const double t1 = now();
    step_times(a, t1);
    a->wait_seconds = t1 - t0;
    return rc;
}

static void *comm_main(void *arg)
{
    struct nl_allreduce *a = arg;

    pthread_mutex_lock(&a->lock);
    for (;;) {
        while (a->phase != PHASE_RUN && a->phase != PHASE_QUIT)
            pthread_cond_wait(&a->cond, &a->lock);
        if (a->phase == PHASE_QUIT)
            break;
        pthread_mutex_unlock(&a->lock);
        struct nl_error err = {0};
        int rc = step_loop(a, &err);
        step_times(a, now());
        pthread_mutex_lock(&a->lock);
        a->rc = rc;
        a->err = err;
        if (a->phase == PHASE_RUN)
            a->phase = PHASE_DONE;
        pthread_cond_broadcast(&a->cond);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

int nl_allreduce_begin(struct nl_allreduce *a, float *params, float *grad, long step, float lr)
{
    if (!a->overlap)
        return NL_EINVAL;
    pthread_mutex_lock(&a->lock);
    step_reset(a, params, grad, step, lr);
    a->front = (struct front){a->nt + 1, a->n + 1}; /* nothing is final yet */
    a->phase = PHASE_RUN;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
    return 0;
}

void nl_allreduce_ready(struct nl_allreduce *a, size_t from, size_t stats_from)
{
    int lowered = 0;

    if (!a->overlap)
        return;
    pthread_mutex_lock(&a->lock);
    if (from < a->front.t) {
        a->front.t = from;
        lowered = 1;
    }
    if (stats_from < a->front.s) {
        a->front.s = stats_from;
        lowered = 1;
    }
    pthread_mutex_unlock(&a->lock);
    if (lowered) {
        uint64_t one = 1;
        (void)!write(a->efd, &one, sizeof one);
    }
}

int nl_allreduce_finish(struct nl_allreduce *a, struct nl_error *err)
{
    const double t0 = now();
    int rc;

    if (!a->overlap)
        return nl_error_set(err, NL_EINVAL, "the allreduce does not overlap");
    pthread_mutex_lock(&a->lock);
    while (a->phase != PHASE_DONE)
        pthread_cond_wait(&a->cond, &a->lock);
    a->phase = PHASE_IDLE;
    rc = a->rc;
    if (rc < 0 && err)
        *err = a->err;
    pthread_mutex_unlock(&a->lock);
    a->wait_seconds = now() - t0;
    return rc;
}

void nl_allreduce_bounds(size_t n, int size, int r, size_t *lo, size_t *hi)
{
    const size_t blocks = (n + 15) / 16;
    size_t l = blocks * (size_t)r / (size_t)size * 16;
    size_t h = blocks * (size_t)(r + 1) / (size_t)size * 16;
    *lo = l < n ? l : n;
    *hi = h < n ? h : n;
}

void nl_allreduce_state_bounds(size_t n, size_t ntrainable, int size, int r, size_t *lo, size_t *hi)
{
    nl_allreduce_bounds(n, size, r, lo, hi);
    if (*lo > ntrainable)
        *lo = ntrainable;
    if (*hi > ntrainable)
        *hi = ntrainable;
}

void nl_allreduce_set_cancel_fd(struct nl_allreduce *a, int fd)
{
    a->cancel_fd = fd;
}

size_t nl_allreduce_state_floats(const struct nl_allreduce *a)
{
    return a->own_t * (size_t)(1 + nl_optim_state_arrays(a->optim));
}

void nl_allreduce_import(struct nl_allreduce *a, const float *slice, long step)
{
    const int nstate = nl_optim_state_arrays(a->optim);
    memcpy(a->master, slice, a->own_t * sizeof(float));
    if (nstate > 0)
        memcpy(a->state_block, slice + a->own_t, (size_t)nstate * a->own_t * sizeof(float));
    memcpy(a->bak, slice, nl_allreduce_state_floats(a) * sizeof(float));
    a->cur_step = a->bak_step = step;
}

long nl_allreduce_export(const struct nl_allreduce *a, int before, float *out)
{
    const int nstate = nl_optim_state_arrays(a->optim);
    if (before) {
        memcpy(out, a->bak, nl_allreduce_state_floats(a) * sizeof(float));
        return a->bak_step;
    }
    memcpy(out, a->master, a->own_t * sizeof(float));
    if (nstate > 0)
        memcpy(out + a->own_t, a->state_block, (size_t)nstate * a->own_t * sizeof(float));
    return a->cur_step;
}
