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
 * order their contents came to exist: each is routed by its type (the TCP transport reads it from
 * the frame's header, MPI from the message's tag), and a length that is not the slice's is
 * refused, as is a type not due (or twice) where the transport sees one come. The
 * frames move over a transport (include/nnlab/transport.h: the TCP mesh, or MPI) that never
 * blocks, so no member blocks in a send while its peers block in theirs; at the start of a step
 * every frame due from each peer is expected, with the place its payload goes. Nothing here
 * depends on arrival order: pieces are summed in rank order into fp32 once all are there, and
 * norms likewise, so an overlapped step gives the same bits as a synchronous one, on either
 * transport.
 *
 * Payloads: fp32 floats (received straight into the parameters, except for slices holding
 * statistics, which go through a staging array since their sums belong in grad), or with bf16
 * compression the trainable part as bf16 followed by the statistics as fp32, so a slice [lo, hi)
 * takes the uint16 positions [pos(lo), pos(hi)) of a staging array where pos(i) = i below
 * ntrainable and ntrainable + 2 (i - ntrainable) above. Received frames must have the expected type
 * and length; how each transport checks them is told at the top of its file.
 *
 * Outside any step, nl_allreduce_agree sends each peer one TIMES frame (--overlap auto's
 * measured step times) and waits for each peer's: every frame of the last step came in before
 * (a peer's next GRAD waits in its connection until the step that expects it), and frames of one
 * type keep their order.
 *
 * Synchronous steps run the loop in the caller with the whole gradient final. Overlapped steps
 * run it on the allreduce's communication thread, started at nl_allreduce_new (made with
 * overlap, an allreduce may still run synchronous steps: nl_allreduce_set_overlap): begin hands
 * it the step, ready lowers the frontiers and wakes it through an eventfd, finish waits for its
 * result.
 * Memory is allocated once in nl_allreduce_new; a step allocates nothing. */
#include "nnlab/allreduce.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/clock.h"
#include "nnlab/rng.h"
#include "nnlab/transport.h"

enum { F_GRAD, F_NORM, F_PARAM };

/* The step's frames with one peer. */
struct xfer {
    int out_active;             /* a frame to the peer under way */
    unsigned out_mask, in_mask; /* 1 << F_ kind of the step's frames started; received */
};

enum { PHASE_IDLE, PHASE_RUN, PHASE_DONE, PHASE_QUIT };

/* What of the gradient is final: grad[t, ntrainable) and grad[s, n). */
struct front {
    size_t t, s;
};

struct nl_allreduce {
    struct nl_transport *tr;
    int own_tr; /* tr was made here (over a mesh) and is freed here */
    int rank, size;
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
    /* Collective exchange (a transport's reduce_scatter and allgather): each slice's floats,
     * and in bytes its size and offset, of the parameters and of the norms; coll (n) the
     * gathered slices. */
    int collective;
    int *c_floats, *c_bytes, *c_displs, *c_nbytes, *c_ndispls;
    float *coll;
    /* Buckets of the collective exchange's reduce-scatter, in the order every member starts
     * them (the trainable part from its top down, then the statistics): each's floats
     * [b_lo, b_hi) of the gradient, b_counts (nbuckets x size) each member's part of it, b_recv
     * where mine lands in sum, b_bytes what the frames would carry, b_done this step's. */
    int nbuckets;
    size_t *b_lo, *b_hi, *b_recv;
    int *b_counts, *b_done;
    unsigned long long *b_bytes;
    struct xfer *x; /* (size) */

    /* The step under way. */
    float *params, *grad;
    long step;
    float lr;
    struct front front; /* what of grad is final; under lock when overlapping */
    int got_grads, got_norms, reduced, updated;
    double t_first, owner_seconds;
    double exchange_seconds, wait_seconds; /* of the last step */
    unsigned long long bytes, early_bytes; /* sent in the last step; of them before all was final */
    int sent_final;                        /* the whole gradient was final at the last look */

    /* Overlap: the communication thread and what it shares with the caller. threaded: the
     * allreduce was made with overlap (the thread, its lock and eventfd exist); overlap: the
     * steps from now on overlap (nl_allreduce_set_overlap, between steps). */
    int threaded, overlap, thread_started, efd;
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
    if (a->threaded) {
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
    nl_free(a->x);
    nl_free(a->c_floats);
    nl_free(a->c_bytes);
    nl_free(a->c_displs);
    nl_free(a->c_nbytes);
    nl_free(a->c_ndispls);
    nl_free(a->coll);
    nl_free(a->b_lo);
    nl_free(a->b_hi);
    nl_free(a->b_recv);
    nl_free(a->b_counts);
    nl_free(a->b_done);
    nl_free(a->b_bytes);
    if (a->own_tr)
        nl_transport_free(a->tr);
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
    struct nl_transport *tr;
    *out = NULL;
    int rc = nl_transport_tcp_new(&tr, mesh, err);
    if (rc == 0)
        rc = nl_allreduce_new_over(out, tr, params, o, err);
    if (rc < 0) {
        nl_transport_free(tr);
        return rc;
    }
    (*out)->own_tr = 1;
    return 0;
}

/* The collective exchange's buckets (struct nl_allreduce) and the transport's lanes for them.
 * Their bounds depend on n and ntrainable alone, so every member cuts the same: the trainable
 * part in pieces of about BUCKET_FLOATS (4 MB, as Horovod and PyTorch DDP fuse), at least
 * MIN_BUCKETS of at least BUCKET_MIN floats, at most MAX_BUCKETS; the statistics one more. */
enum { BUCKET_FLOATS = 1 << 20, BUCKET_MIN = 1024, MIN_BUCKETS = 8, MAX_BUCKETS = 32 };

static int make_buckets(struct nl_allreduce *a, struct nl_error *err)
{
    const size_t nt = a->nt;
    size_t nb = (nt + BUCKET_FLOATS - 1) / BUCKET_FLOATS;
    size_t few = (nt + BUCKET_MIN - 1) / BUCKET_MIN;
    if (few > MIN_BUCKETS)
        few = MIN_BUCKETS;
    if (nb < few)
        nb = few;
    if (nb > MAX_BUCKETS)
        nb = MAX_BUCKETS;
    const int total = (int)nb + (a->n > nt ? 1 : 0);
    if (total == 0)
        return 0;
    a->b_lo = nl_calloc((size_t)total, sizeof *a->b_lo);
    a->b_hi = nl_calloc((size_t)total, sizeof *a->b_hi);
    a->b_recv = nl_calloc((size_t)total, sizeof *a->b_recv);
    a->b_counts = nl_calloc((size_t)total * (size_t)a->size, sizeof *a->b_counts);
    a->b_done = nl_calloc((size_t)total, sizeof *a->b_done);
    a->b_bytes = nl_calloc((size_t)total, sizeof *a->b_bytes);
    if (!a->b_lo || !a->b_hi || !a->b_recv || !a->b_counts || !a->b_done || !a->b_bytes)
        return nl_error_set(err, NL_ENOMEM, "out of memory for %d buckets", total);
    for (int b = 0; b < total; b++) {
        if (b < (int)nb) {
            nl_block_range(nt, 16, (int)nb - 1 - b, (int)nb, &a->b_lo[b], &a->b_hi[b]);
        } else {
            a->b_lo[b] = nt;
            a->b_hi[b] = a->n;
        }
        for (int r = 0; r < a->size; r++) {
            const size_t lo = a->b_lo[b] > a->lo[r] ? a->b_lo[b] : a->lo[r];
            const size_t hi = a->b_hi[b] < a->hi[r] ? a->b_hi[b] : a->hi[r];
            const int c = hi > lo ? (int)(hi - lo) : 0;
            a->b_counts[(size_t)b * (size_t)a->size + (size_t)r] = c;
            if (r != a->rank)
                a->b_bytes[b] += (unsigned long long)c * sizeof(float);
            else if (c > 0)
                a->b_recv[b] = lo - a->lo[r];
        }
    }
    a->nbuckets = total;
    return a->tr->ops->lanes(a->tr->impl, total, err);
}

int nl_allreduce_new_over(struct nl_allreduce **out, struct nl_transport *tr, const float *params,
                          const struct nl_allreduce_opts *o, struct nl_error *err)
{
    const int size = tr->size, rank = tr->rank;
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
    a->tr = tr;
    a->rank = rank;
    a->size = size;
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
    a->bak = nl_alloc_floats(a->own_t * (size_t)(1 + nstate) + 1);
    if (!a->master || !a->sum || !a->state_block || !a->pieces || !a->norms || !a->x || !a->bak)
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
    if (tr->collective) {
        if (!tr->ops->reduce_scatter || !tr->ops->allgather || a->bf16) {
            nl_allreduce_free(a);
            return nl_error_set(err, NL_EINVAL,
                                "the collective exchange needs a transport with collectives "
                                "and takes no bf16 compression");
        }
        a->collective = 1;
        a->c_floats = nl_calloc((size_t)size, sizeof *a->c_floats);
        a->c_bytes = nl_calloc((size_t)size, sizeof *a->c_bytes);
        a->c_displs = nl_calloc((size_t)size, sizeof *a->c_displs);
        a->c_nbytes = nl_calloc((size_t)size, sizeof *a->c_nbytes);
        a->c_ndispls = nl_calloc((size_t)size, sizeof *a->c_ndispls);
        a->coll = nl_alloc_floats(n + 1);
        if (!a->c_floats || !a->c_bytes || !a->c_displs || !a->c_nbytes || !a->c_ndispls ||
            !a->coll)
            goto oom;
        if (n * sizeof(float) > INT_MAX) {
            nl_allreduce_free(a);
            return nl_error_set(err, NL_EINVAL,
                                "the collective exchange takes at most %d bytes of parameters",
                                INT_MAX);
        }
        const int rc0 = tr->ops->lanes ? make_buckets(a, err) : 0;
        if (rc0 < 0) {
            nl_allreduce_free(a);
            return rc0;
        }
        for (int r = 0; r < size; r++) {
            a->c_floats[r] = (int)(a->hi[r] - a->lo[r]);
            a->c_bytes[r] = a->c_floats[r] * (int)sizeof(float);
            a->c_displs[r] = (int)(a->lo[r] * sizeof(float));
            a->c_nbytes[r] = (int)sizeof(double);
            a->c_ndispls[r] = r * (int)sizeof(double);
        }
    }
    for (int k = 0; k < size; k++) {
        /* The longest frame to k: its piece of my gradient, or my slice, or a norm. */
        size_t cap = wire_bytes(a, a->lo[k], a->hi[k]);
        if (cap < a->own_bytes)
            cap = a->own_bytes;
        if (cap < NL_ALLREDUCE_TIMES * sizeof(double))
            cap = NL_ALLREDUCE_TIMES * sizeof(double); /* a TIMES frame */
        const int rc = k != rank ? tr->ops->reserve(tr->impl, k, cap, err) : 0;
        if (rc < 0) {
            nl_allreduce_free(a);
            return rc;
        }
    }
    for (int k = 0; k < nstate; k++)
        a->state[k] = a->state_block + (size_t)k * a->own_t;
    memcpy(a->master, params + a->lo[rank], a->own_t * sizeof(float));
    memcpy(a->bak, a->master, a->own_t * sizeof(float));
    if (o->overlap) {
        a->threaded = a->overlap = 1;
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

/* Starts a frame to peer k. */
static int out_set(struct nl_allreduce *a, int k, uint32_t type, const void *out, size_t len,
                   struct nl_error *err)
{
    int rc = a->tr->ops->send(a->tr->impl, k, type, out, len, err);
    if (rc == 0)
        a->x[k].out_active = 1;
    return rc;
}

/* The frames of a step between two members, as a mask of F_ kinds. */
static unsigned all_frames(const struct nl_allreduce *a)
{
    return 1u << F_GRAD | 1u << F_PARAM | (a->clip_norm > 0.0f ? 1u << F_NORM : 0u);
}

/* Expects every frame of the step from peer k, each where its payload belongs. */
static int expect_all(struct nl_allreduce *a, int k, struct nl_error *err)
{
    struct nl_transport *t = a->tr;
    const size_t klo = a->lo[k], khi = a->hi[k];
    void *param_dst;

    if (a->bf16)
        param_dst = a->stage_in + pos(a, klo);
    else
        param_dst = khi <= a->nt ? a->params + klo : a->stagef_in + klo;
    int rc = t->ops->expect(t->impl, k, NL_FRAME_GRAD, a->pieces + (size_t)k * a->own_bytes,
                            a->own_bytes, err);
    if (rc == 0 && a->clip_norm > 0.0f)
        rc = t->ops->expect(t->impl, k, NL_FRAME_NORM, &a->norms[k], sizeof(double), err);
    if (rc == 0)
        rc = t->ops->expect(t->impl, k, NL_FRAME_PARAM, param_dst, wire_bytes(a, klo, khi), err);
    return rc;
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

unsigned long long nl_allreduce_bytes_sent(const struct nl_allreduce *a)
{
    return nl_transport_bytes_sent(a->tr);
}

int nl_allreduce_overlaps(const struct nl_allreduce *a)
{
    return a->overlap;
}

int nl_allreduce_set_overlap(struct nl_allreduce *a, int on)
{
    if (on && !a->threaded)
        return NL_EINVAL;
    a->overlap = on != 0;
    return 0;
}

/* What nl_allreduce_agree has sent and received. */
struct agree {
    struct nl_allreduce *a;
    int sent, received;
};

static void agree_sent(void *ud, int k, size_t bytes, int complete)
{
    struct agree *g = ud;
    (void)bytes;
    if (complete) {
        g->a->x[k].out_active = 0;
        g->sent++;
    }
}

static void agree_received(void *ud, int k, uint32_t type)
{
    struct agree *g = ud;
    (void)k;
    (void)type;
    g->received++;
}

int nl_allreduce_agree(struct nl_allreduce *a, double *all, struct nl_error *err)
{
    const size_t len = NL_ALLREDUCE_TIMES * sizeof(double);
    struct agree g = {a, 0, 0};
    const struct nl_transport_sink sink = {agree_sent, agree_received, &g};
    int rc = 0;

    for (int k = 0; rc == 0 && k < a->size; k++)
        if (k != a->rank)
            rc = a->tr->ops->expect(a->tr->impl, k, NL_FRAME_TIMES, all + NL_ALLREDUCE_TIMES * k,
                                    len, err);
    for (int k = 0; rc == 0 && k < a->size; k++)
        if (k != a->rank)
            rc = out_set(a, k, NL_FRAME_TIMES, all + NL_ALLREDUCE_TIMES * a->rank, len, err);
    while (rc == 0 && (g.sent < a->size - 1 || g.received < a->size - 1))
        rc = a->tr->ops->progress(a->tr->impl, -1, a->cancel_fd, &sink, err);
    return rc;
}

/* Adds member k's piece of my slice into dst_sum as floats (copies it there when first). */
static void piece_floats(const struct nl_allreduce *a, int k, float *dst_sum, int first)
{
    const int rank = a->rank;
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
static void owner_clip(struct nl_allreduce *a);

static void owner_reduce(struct nl_allreduce *a)
{
    for (int k = 0; k < a->size; k++)
        piece_floats(a, k, a->sum, k == 0);
    owner_clip(a);
}

/* Clip-value of the summed slice, and for clip-norm its sum of squares. */
static void owner_clip(struct nl_allreduce *a)
{
    const size_t own_t = a->own_t;
    const float v = a->clip_value;

    if (v > 0.0f)
        for (size_t i = 0; i < own_t; i++)
            a->sum[i] = a->sum[i] > v ? v : a->sum[i] < -v ? -v : a->sum[i];
    if (a->clip_norm > 0.0f) {
        double sumsq = 0.0;
        for (size_t i = 0; i < own_t; i++)
            sumsq += (double)a->sum[i] * a->sum[i];
        a->norms[a->rank] = sumsq;
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
    const int rank = a->rank;
    const size_t lo = a->lo[rank], own = a->own, own_t = a->own_t;

    if (a->clip_norm > 0.0f) {
        double sumsq = 0.0;
        for (int k = 0; k < a->size; k++)
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

/* Starts the next frame to peer k whose content exists. */
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
        return out_set(a, k, NL_FRAME_NORM, &a->norms[a->rank], sizeof(double), err);
    }
    if ((pending & 1u << F_PARAM) && a->updated) {
        x->out_mask |= 1u << F_PARAM;
        const void *mine = a->bf16 ? (const void *)a->stage_own : (const void *)a->master;
        return out_set(a, k, NL_FRAME_PARAM, mine, a->own_bytes, err);
    }
    return 0;
}

/* A frame from peer k has come in whole: count it, and put parameters where they belong. */
static void in_done(struct nl_allreduce *a, int k, int f)
{
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
    for (int k = 0; k < a->size; k++) {
        struct xfer *x = &a->x[k];
        x->out_active = 0;
        x->out_mask = x->in_mask = 0;
    }
}

/* What the transport reports. */
static void on_sent(void *ud, int k, size_t bytes, int complete)
{
    struct nl_allreduce *a = ud;
    a->bytes += bytes;
    if (!a->sent_final)
        a->early_bytes += bytes;
    if (complete)
        a->x[k].out_active = 0;
}

static void on_received(void *ud, int k, uint32_t type)
{
    struct nl_allreduce *a = ud;
    const int f = type == NL_FRAME_GRAD ? F_GRAD : type == NL_FRAME_NORM ? F_NORM : F_PARAM;
    a->x[k].in_mask |= 1u << f;
    in_done(a, k, f);
}

/* Whether bucket b's part of the gradient is final. */
static int bucket_final(const struct nl_allreduce *a, int b, struct front f)
{
    return a->b_lo[b] >= a->nt ? f.s <= a->nt : f.t <= a->b_lo[b];
}

/* The reduce-scatter in buckets, each on its lane (make_buckets): bucket b starts once its part is
 * final and every bucket before it has started, so every member starts them in one order, and
 * while the caller still computes the rest. Bytes of a bucket done before the whole gradient was
 * final count as sent early. */
static int bucket_reduce(struct nl_allreduce *a, struct nl_error *err)
{
    const struct nl_transport_ops *ops = a->tr->ops;
    void *t = a->tr->impl;
    int started = 0, done = 0;

    memset(a->b_done, 0, (size_t)a->nbuckets * sizeof *a->b_done);
    for (long spin = 0;; spin++) {
        if (a->overlap) {
            uint64_t v;
            (void)!read(a->efd, &v, sizeof v);
        }
        const struct front f = front_get(a);
        if (a->t_first < 0.0 && (f.t <= a->nt || f.s <= a->n))
            a->t_first = nl_now();
        const int whole = all_final(a, f);
        int rc = 0;
        for (; rc == 0 && started < a->nbuckets && bucket_final(a, started, f); started++) {
            const int b = started;
            rc = ops->lane_start(t, b, a->grad + a->b_lo[b], a->sum + a->b_recv[b],
                                 a->b_counts + (size_t)b * (size_t)a->size, err);
        }
        for (int b = 0; rc == 0 && b < started; b++) {
            if (a->b_done[b])
                continue;
            rc = ops->lane_test(t, b, &a->b_done[b], err);
            if (a->b_done[b]) {
                done++;
                if (!whole)
                    a->early_bytes += a->b_bytes[b];
            }
        }
        if (rc < 0)
            return rc;
        if (started == a->nbuckets)
            break;
        /* The computation's next frontier, testing the buckets under way every millisecond. */
        struct pollfd pf[2] = {{.fd = a->efd, .events = POLLIN},
                               {.fd = a->cancel_fd, .events = POLLIN}};
        const int ms = done < started ? (spin < 50 ? 0 : 1) : 1000;
        if (poll(pf, a->cancel_fd >= 0 ? 2 : 1, ms) > 0 &&
            (pf[1].revents & (POLLIN | POLLHUP | POLLERR)))
            return nl_error_set(err, NL_ECANCELED, "the exchange was called off");
    }
    a->sent_final = 1;
    for (int b = 0; b < a->nbuckets; b++) {
        if (a->b_done[b])
            continue;
        int rc = ops->lane_wait(t, b, a->cancel_fd, err);
        if (rc < 0)
            return rc;
        a->b_done[b] = 1;
    }
    return 0;
}

/* The step through the transport's collectives (include/nnlab/transport.h): the gradient's sum
 * reduce-scattered into my slice (in buckets as it becomes final where the transport has lanes,
 * else at once when it is whole), clipped, the norms gathered for clip-norm, my slice updated, and
 * every updated slice (parameters, then statistics sums) gathered. */
static int collective_step(struct nl_allreduce *a, struct nl_error *err)
{
    const struct nl_transport_ops *ops = a->tr->ops;
    const unsigned long long b0 = ops->bytes_sent(a->tr->impl);
    int rc;
    if (a->nbuckets > 0) {
        rc = bucket_reduce(a, err);
    } else {
        while (a->overlap) {
            uint64_t v;
            (void)!read(a->efd, &v, sizeof v);
            const struct front f = front_get(a);
            if (a->t_first < 0.0 && (f.t <= a->nt || f.s <= a->n))
                a->t_first = nl_now();
            if (all_final(a, f))
                break;
            struct pollfd pf[2] = {{.fd = a->efd, .events = POLLIN},
                                   {.fd = a->cancel_fd, .events = POLLIN}};
            if (poll(pf, a->cancel_fd >= 0 ? 2 : 1, 1000) > 0 &&
                (pf[1].revents & (POLLIN | POLLHUP | POLLERR)))
                return nl_error_set(err, NL_ECANCELED, "the exchange was called off");
        }
        a->sent_final = 1;
        rc = ops->reduce_scatter(a->tr->impl, a->grad, a->sum, a->c_floats, a->cancel_fd, err);
    }
    if (rc < 0)
        return rc;
    if (a->t_first < 0.0)
        a->t_first = nl_now();
    double t0 = nl_now();
    owner_clip(a);
    a->owner_seconds += nl_now() - t0;
    if (a->clip_norm > 0.0f && (rc = ops->allgather(a->tr->impl, a->norms, a->c_nbytes,
                                                    a->c_ndispls, a->cancel_fd, err)) < 0)
        return rc;
    t0 = nl_now();
    owner_update(a);
    a->owner_seconds += nl_now() - t0;
    const size_t lo = a->lo[a->rank];
    memcpy(a->coll + lo, a->master, a->own * sizeof(float));
    rc = ops->allgather(a->tr->impl, a->coll, a->c_bytes, a->c_displs, a->cancel_fd, err);
    if (rc < 0)
        return rc;
    memcpy(a->params, a->coll, a->nt * sizeof(float));
    memcpy(a->grad + a->nt, a->coll + a->nt, (a->n - a->nt) * sizeof(float));
    a->bytes += ops->bytes_sent(a->tr->impl) - b0;
    return 0;
}

/* Runs the step to its end. */
static int step_loop(struct nl_allreduce *a, struct nl_error *err)
{
    const int size = a->size, rank = a->rank;
    const struct nl_transport_sink sink = {on_sent, on_received, a};

    /* Called off before it began: nothing is sent (a peer called off too may be gone). */
    if (a->cancel_fd >= 0) {
        struct pollfd c = {.fd = a->cancel_fd, .events = POLLIN};
        if (poll(&c, 1, 0) > 0 && (c.revents & (POLLIN | POLLHUP | POLLERR)))
            return nl_error_set(err, NL_ECANCELED, "the exchange was called off");
    }
    if (a->collective)
        return collective_step(a, err);
    for (int k = 0; k < size; k++) {
        if (k == rank)
            continue;
        int rc = expect_all(a, k, err);
        if (rc < 0)
            return rc;
    }

    for (;;) {
        /* Waiting for the rest of the gradient as well: the computation, not the peers. The
         * eventfd is read before the frontiers, so a later ready() wakes the wait below. */
        if (a->overlap) {
            uint64_t v;
            (void)!read(a->efd, &v, sizeof v);
        }
        const struct front f = front_get(a);
        if (a->t_first < 0.0 && (f.t <= a->nt || f.s <= a->n))
            a->t_first = nl_now();
        a->sent_final = all_final(a, f);

        /* What this member can do by itself. */
        if (!a->reduced && slice_final(a, rank, f) && a->got_grads == size - 1) {
            double t0 = nl_now();
            owner_reduce(a);
            a->reduced = 1;
            a->owner_seconds += nl_now() - t0;
        }
        if (a->reduced && !a->updated && (a->clip_norm <= 0.0f || a->got_norms == size - 1)) {
            double t0 = nl_now();
            owner_update(a);
            a->updated = 1;
            a->owner_seconds += nl_now() - t0;
        }
        int done = a->updated;
        for (int k = 0; k < size; k++) {
            if (k == rank)
                continue;
            struct xfer *x = &a->x[k];
            const int orc = next_out(a, k, f, err);
            if (orc < 0)
                return orc;
            done &= !x->out_active && x->out_mask == all_frames(a) && x->in_mask == all_frames(a);
        }
        if (done)
            return 0;
        const int local = a->overlap && !a->sent_final;
        int rc = a->tr->ops->progress(a->tr->impl, local ? a->efd : -1, a->cancel_fd, &sink, err);
        if (rc < 0)
            return rc;
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
    const double t0 = nl_now();
    step_reset(a, params, grad, step, lr);
    a->front = (struct front){0, a->nt};
    int rc = step_loop(a, err);
    const double t1 = nl_now();
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
        step_times(a, nl_now());
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
    const double t0 = nl_now();
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
    a->wait_seconds = nl_now() - t0;
    return rc;
}

void nl_allreduce_bounds(size_t n, int size, int r, size_t *lo, size_t *hi)
{
    nl_block_range(n, 16, r, size, lo, hi);
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
