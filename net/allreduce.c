/* The sliced allreduce. See include/nnlab/allreduce.h for the scheme.
 *
 * Both phases run through one multiplexed exchange: every peer has one frame to send and one to
 * receive, and a poll() loop moves whichever bytes can move, so no member blocks in a send while
 * its peers block in theirs. Received frames must have the expected type and length (checked
 * from the header, before any payload byte is read) and a matching checksum. Memory is allocated
 * once in nl_allreduce_new; a step allocates nothing. */
#include "nnlab/allreduce.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "nnlab/alloc.h"

struct xfer {
    /* Out: header and payload to send; in: header, then payload into dst. */
    unsigned char out_h[NL_WIRE_HEADER];
    const unsigned char *out;
    size_t out_len, out_done; /* out_done counts the header too */
    unsigned char in_h[NL_WIRE_HEADER];
    unsigned char *in;
    size_t in_len, in_done;
    uint32_t in_type, in_crc;
};

struct nl_allreduce {
    struct nl_mesh *mesh;
    size_t n;
    int bf16;
    const struct nl_optim *optim;
    size_t *lo, *hi;    /* (size + 1) slice bounds */
    float *master;      /* (own slice) fp32 weights of the slice this member owns */
    float *sum;         /* (own slice) */
    float *state_block; /* (nstate x own slice) optimizer state */
    float *state[NL_OPTIM_MAX_STATE];
    unsigned char *pieces;   /* (size x own slice) received gradient pieces, fp32 or bf16 */
    uint16_t *stage;         /* bf16: (n) outgoing gradient, then (n) incoming parameters */
    uint16_t *stage_own;     /* bf16: (own slice) outgoing parameters */
    struct xfer *x;          /* (size) */
    struct pollfd *pfd;      /* (size) */
    int *pidx;               /* (size) */
    double exchange_seconds; /* of the last step, in the two exchanges */
    /* Recovery (see nl_allreduce_export): the own slice's master and state as they were before
     * the latest optimizer step, and the steps both copies are "after". */
    float *bak; /* ((1 + nstate) x own slice): master, then the state arrays */
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

void nl_allreduce_free(struct nl_allreduce *a)
{
    if (!a)
        return;
    nl_free(a->lo);
    nl_free(a->hi);
    nl_free(a->master);
    nl_free(a->sum);
    nl_free(a->state_block);
    nl_free(a->pieces);
    nl_free(a->stage);
    nl_free(a->stage_own);
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

int nl_allreduce_new(struct nl_allreduce **out, struct nl_mesh *mesh, const float *params, size_t n,
                     const struct nl_optim *optim, int bf16, struct nl_error *err)
{
    const int size = mesh->size, rank = mesh->rank;
    struct nl_allreduce *a = nl_calloc(1, sizeof *a);

    *out = NULL;
    if (!a)
        goto oom;
    a->mesh = mesh;
    a->n = n;
    a->bf16 = bf16;
    a->optim = optim;
    a->lo = nl_calloc((size_t)size, sizeof *a->lo);
    a->hi = nl_calloc((size_t)size, sizeof *a->hi);
    if (!a->lo || !a->hi)
        goto oom;
    for (int r = 0; r < size; r++)
        nl_allreduce_bounds(n, size, r, &a->lo[r], &a->hi[r]);
    a->cancel_fd = -1;
    const size_t own = a->hi[rank] - a->lo[rank];
    const int nstate = nl_optim_state_arrays(optim);
    const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
    a->master = nl_alloc_floats(own + 1);
    a->sum = nl_alloc_floats(own + 1);
    a->state_block = nl_alloc_floats(own * (size_t)(nstate > 0 ? nstate : 1) + 1);
    a->pieces = nl_calloc((size_t)size * own * elem + 1, 1);
    a->x = nl_calloc((size_t)size, sizeof *a->x);
    a->pfd = nl_calloc((size_t)size + 1, sizeof *a->pfd);
    a->pidx = nl_calloc((size_t)size + 1, sizeof *a->pidx);
    a->bak = nl_alloc_floats(own * (size_t)(1 + nstate) + 1);
    if (!a->master || !a->sum || !a->state_block || !a->pieces || !a->x || !a->pfd || !a->pidx ||
        !a->bak)
        goto oom;
    if (bf16) {
        a->stage = nl_calloc(2 * n + 1, sizeof *a->stage);
        a->stage_own = nl_calloc(own + 1, sizeof *a->stage_own);
        if (!a->stage || !a->stage_own)
            goto oom;
    }
    for (int k = 0; k < nstate; k++)
        a->state[k] = a->state_block + (size_t)k * own;
    memcpy(a->master, params + a->lo[rank], own * sizeof(float));
    memcpy(a->bak, a->master, own * sizeof(float));
    *out = a;
    return 0;
oom:
    nl_allreduce_free(a);
    return nl_error_set(err, NL_ENOMEM, "out of memory for the allreduce of %zu parameters", n);
}

static void xfer_set(struct xfer *x, uint32_t type, const void *out, size_t out_len, void *in,
                     size_t in_len)
{
    nl_wire_header(x->out_h, type, out, (uint32_t)out_len);
    x->out = out;
    x->out_len = out_len;
    x->out_done = 0;
    x->in = in;
    x->in_len = in_len;
    x->in_done = 0;
    x->in_type = type;
}

/* Moves bytes on one socket without blocking: 0 (progress or none), or NL_ENET. */
static int pump_out(int fd, struct xfer *x, struct nl_conn *c)
{
    while (x->out_done < NL_WIRE_HEADER + x->out_len) {
        const unsigned char *p;
        size_t left;
        if (x->out_done < NL_WIRE_HEADER) {
            p = x->out_h + x->out_done;
            left = NL_WIRE_HEADER - x->out_done;
        } else {
            p = x->out + (x->out_done - NL_WIRE_HEADER);
            left = x->out_len - (x->out_done - NL_WIRE_HEADER);
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
    return 0;
}

static int pump_in(int fd, struct xfer *x, struct nl_conn *c, struct nl_error *err)
{
    while (x->in_done < NL_WIRE_HEADER + x->in_len) {
        unsigned char *p;
        size_t left;
        if (x->in_done < NL_WIRE_HEADER) {
            p = x->in_h + x->in_done;
            left = NL_WIRE_HEADER - x->in_done;
        } else {
            p = x->in + (x->in_done - NL_WIRE_HEADER);
            left = x->in_len - (x->in_done - NL_WIRE_HEADER);
        }
        ssize_t r = recv(fd, p, left, MSG_DONTWAIT);
        if (r > 0) {
            x->in_done += (size_t)r;
            c->bytes_received += (uint64_t)r;
            if (x->in_done == NL_WIRE_HEADER) {
                uint32_t type, len;
                nl_wire_parse_header(x->in_h, &type, &len, &x->in_crc, NL_WIRE_MAX_PAYLOAD);
                if (type != x->in_type || len != x->in_len)
                    return nl_error_set(err, NL_EFORMAT,
                                        "%s: sent a frame of type %u and %u bytes where type %u "
                                        "and %zu bytes were due",
                                        c->peer, type, len, x->in_type, x->in_len);
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
    if (!nl_wire_check(x->in_crc, x->in_type, x->in, (uint32_t)x->in_len))
        return nl_error_set(err, NL_EFORMAT, "%s: a frame of type %u fails its checksum", c->peer,
                            x->in_type);
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double nl_allreduce_exchange_seconds(const struct nl_allreduce *a)
{
    return a->exchange_seconds;
}

/* Runs every peer's transfer to the end. */
static int exchange(struct nl_allreduce *a, struct nl_error *err)
{
    struct nl_mesh *m = a->mesh;

    for (;;) {
        int np = 0, timeout = 0;
        for (int k = 0; k < m->size; k++) {
            struct xfer *x = &a->x[k];
            if (k == m->rank)
                continue;
            short ev = 0;
            if (x->out_done < NL_WIRE_HEADER + x->out_len)
                ev |= POLLOUT;
            if (x->in_done < NL_WIRE_HEADER + x->in_len)
                ev |= POLLIN;
            if (!ev)
                continue;
            a->pfd[np] = (struct pollfd){.fd = m->peers[k].fd, .events = ev};
            a->pidx[np++] = k;
            if (m->peers[k].timeout_ms > timeout)
                timeout = m->peers[k].timeout_ms;
        }
        if (np == 0)
            return 0;
        if (a->cancel_fd >= 0)
            a->pfd[np] = (struct pollfd){.fd = a->cancel_fd, .events = POLLIN};
        int r = poll(a->pfd, (nfds_t)np + (a->cancel_fd >= 0), timeout);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return nl_error_set(err, NL_ENET, "poll: %s", strerror(errno));
        if (r == 0)
            return nl_error_set(err, NL_ETIMEDOUT, "%s: no progress in the exchange within %d ms",
                                m->peers[a->pidx[0]].peer, timeout);
        if (a->cancel_fd >= 0 && (a->pfd[np].revents & (POLLIN | POLLHUP | POLLERR)))
            return nl_error_set(err, NL_ECANCELED, "the exchange was called off");
        for (int i = 0; i < np; i++) {
            const int k = a->pidx[i];
            struct nl_conn *c = &m->peers[k];
            if (a->pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                int rc = pump_in(c->fd, &a->x[k], c, err);
                if (rc < 0)
                    return rc;
            }
            if (a->pfd[i].revents & (POLLOUT | POLLERR)) {
                if (pump_out(c->fd, &a->x[k], c) < 0)
                    return nl_error_set(err, NL_ENET, "%s: sending: %s", c->peer, strerror(errno));
            }
        }
    }
}

/* The slice's state before its optimizer step `step`, for nl_allreduce_export. */
static void keep_rollback(struct nl_allreduce *a, long step)
{
    const size_t own = a->hi[a->mesh->rank] - a->lo[a->mesh->rank];
    const int nstate = nl_optim_state_arrays(a->optim);
    memcpy(a->bak, a->master, own * sizeof(float));
    if (nstate > 0)
        memcpy(a->bak + own, a->state_block, (size_t)nstate * own * sizeof(float));
    a->bak_step = a->cur_step;
    a->cur_step = step;
}

int nl_allreduce_step(struct nl_allreduce *a, float *params, const float *grad, long step, float lr,
                      struct nl_error *err)
{
    struct nl_mesh *m = a->mesh;
    const int size = m->size, rank = m->rank;
    const size_t lo = a->lo[rank], own = a->hi[rank] - lo;
    const size_t elem = a->bf16 ? sizeof(uint16_t) : sizeof(float);
    int rc;

    /* Shuffle: slice k of the gradient to member k; pieces of my slice from everyone. */
    if (a->bf16)
        for (size_t i = 0; i < a->n; i++)
            a->stage[i] = nl_bf16_from_float(grad[i]);
    for (int k = 0; k < size; k++) {
        const size_t klo = a->lo[k], klen = a->hi[k] - klo;
        const void *src = a->bf16 ? (const void *)(a->stage + klo) : (const void *)(grad + klo);
        xfer_set(&a->x[k], NL_FRAME_GRAD, src, klen * elem, a->pieces + (size_t)k * own * elem,
                 own * elem);
    }
    double t0 = now();
    rc = exchange(a, err);
    a->exchange_seconds = now() - t0;
    if (rc < 0)
        return rc;

    /* Reduce in rank order; my own piece is my unrounded gradient. */
    for (int k = 0; k < size; k++) {
        const unsigned char *p = a->pieces + (size_t)k * own * elem;
        if (k == rank) {
            const float *g = grad + lo;
            if (k == 0)
                memcpy(a->sum, g, own * sizeof(float));
            else
                for (size_t i = 0; i < own; i++)
                    a->sum[i] += g[i];
        } else if (a->bf16) {
            const uint16_t *h = (const uint16_t *)p;
            for (size_t i = 0; i < own; i++)
                a->sum[i] = k == 0 ? nl_bf16_to_float(h[i]) : a->sum[i] + nl_bf16_to_float(h[i]);
        } else {
            const float *f = (const float *)p;
            if (k == 0)
                memcpy(a->sum, f, own * sizeof(float));
            else
                for (size_t i = 0; i < own; i++)
                    a->sum[i] += f[i];
        }
    }
    keep_rollback(a, step);
    nl_optim_step(a->optim, a->master, a->sum, a->state, own, step, lr);

    /* Broadcast: my updated slice to everyone; slice k from member k. */
    const void *mine = a->master;
    if (a->bf16) {
        for (size_t i = 0; i < own; i++) {
            a->stage_own[i] = nl_bf16_from_float(a->master[i]);
            params[lo + i] = nl_bf16_to_float(a->stage_own[i]);
        }
        mine = a->stage_own;
    } else {
        memcpy(params + lo, a->master, own * sizeof(float));
    }
    for (int k = 0; k < size; k++) {
        const size_t klo = a->lo[k], klen = a->hi[k] - klo;
        void *dst = a->bf16 ? (void *)(a->stage + a->n + klo) : (void *)(params + klo);
        xfer_set(&a->x[k], NL_FRAME_PARAM, mine, own * elem, dst, klen * elem);
    }
    t0 = now();
    rc = exchange(a, err);
    a->exchange_seconds += now() - t0;
    if (rc < 0)
        return rc;
    if (a->bf16)
        for (int k = 0; k < size; k++)
            if (k != rank)
                for (size_t i = a->lo[k]; i < a->hi[k]; i++)
                    params[i] = nl_bf16_to_float(a->stage[a->n + i]);
    return 0;
}

void nl_allreduce_bounds(size_t n, int size, int r, size_t *lo, size_t *hi)
{
    const size_t blocks = (n + 15) / 16;
    size_t l = blocks * (size_t)r / (size_t)size * 16;
    size_t h = blocks * (size_t)(r + 1) / (size_t)size * 16;
    *lo = l < n ? l : n;
    *hi = h < n ? h : n;
}

void nl_allreduce_set_cancel_fd(struct nl_allreduce *a, int fd)
{
    a->cancel_fd = fd;
}

size_t nl_allreduce_state_floats(const struct nl_allreduce *a)
{
    const size_t own = a->hi[a->mesh->rank] - a->lo[a->mesh->rank];
    return own * (size_t)(1 + nl_optim_state_arrays(a->optim));
}

void nl_allreduce_import(struct nl_allreduce *a, const float *slice, long step)
{
    const size_t own = a->hi[a->mesh->rank] - a->lo[a->mesh->rank];
    const int nstate = nl_optim_state_arrays(a->optim);
    memcpy(a->master, slice, own * sizeof(float));
    if (nstate > 0)
        memcpy(a->state_block, slice + own, (size_t)nstate * own * sizeof(float));
    memcpy(a->bak, slice, nl_allreduce_state_floats(a) * sizeof(float));
    a->cur_step = a->bak_step = step;
}

long nl_allreduce_export(const struct nl_allreduce *a, int before, float *out)
{
    const size_t own = a->hi[a->mesh->rank] - a->lo[a->mesh->rank];
    const int nstate = nl_optim_state_arrays(a->optim);
    if (before) {
        memcpy(out, a->bak, nl_allreduce_state_floats(a) * sizeof(float));
        return a->bak_step;
    }
    memcpy(out, a->master, own * sizeof(float));
    if (nstate > 0)
        memcpy(out + own, a->state_block, (size_t)nstate * own * sizeof(float));
    return a->cur_step;
}
