/* The TCP mesh as the allreduce's transport (include/nnlab/transport.h): the frames of
 * net/wire.c on the mesh's connections, moved without blocking by one poll() loop.
 *
 * A frame on a connection is its header (sealed, or plaintext with a CRC32), the payload, and on
 * a sealed connection the payload's tag. Sending seals the payload into a per-peer buffer sized
 * once by reserve (the longest frame to that peer), so the caller's payload is read only when
 * the frame starts. Receiving reads the header first: its type and length are checked against
 * the frames expected from that peer (authenticated first when sealed) before any payload byte
 * is read, then the payload goes straight where expect said and is checked (checksum, or
 * decrypted in place and its tag checked). Bytes are counted as they move, so the allreduce can
 * tell how much went out before its gradient was final. Each peer's connection keeps the
 * timeout it was made with: no byte in either direction within the longest of them is a
 * timeout naming the peer. */
#include "nnlab/transport.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "nnlab/alloc.h"
#include "nnlab/mesh.h"

#define MAX_EXPECT 4 /* frame types expected from one peer at a time */

struct slot {
    uint32_t type;
    void *dst;
    size_t len;
    int active;
};

struct tpeer {
    size_t hb, tb; /* header and tag bytes of a frame on this connection */
    unsigned char out_h[NL_WIRE_HEAD_MAX], out_tag[NL_WIRE_TAG];
    const unsigned char *out;
    size_t out_len, out_done; /* out_done counts the header too */
    int out_active;
    unsigned char *ct; /* sealed: the outgoing payload's ciphertext */
    size_t ct_cap;
    unsigned char in_h[NL_WIRE_HEAD_MAX], in_tag[NL_WIRE_TAG];
    unsigned char *in; /* NULL until the header routed the frame */
    size_t in_len, in_done;
    uint32_t in_type, in_crc;
    struct slot exp[MAX_EXPECT];
};

struct tcp {
    struct nl_mesh *mesh;
    struct tpeer *p;    /* (size) */
    struct pollfd *pfd; /* (size + 2): peers, wake fd, cancel fd */
    int *pidx;          /* (size + 2) */
};

static int expecting(const struct tpeer *p)
{
    if (p->in_done > 0)
        return 1;
    for (int i = 0; i < MAX_EXPECT; i++)
        if (p->exp[i].active)
            return 1;
    return 0;
}

static int tcp_reserve(void *impl, int k, size_t max_len, struct nl_error *err)
{
    struct tcp *t = impl;
    struct tpeer *p = &t->p[k];
    if (!t->mesh->peers[k].seal || max_len <= p->ct_cap)
        return 0;
    unsigned char *ct = nl_malloc(max_len);
    if (!ct)
        return nl_error_set(err, NL_ENOMEM, "out of memory for frames of %zu bytes to %s", max_len,
                            t->mesh->peers[k].peer);
    nl_free(p->ct);
    p->ct = ct;
    p->ct_cap = max_len;
    return 0;
}

static int tcp_send(void *impl, int k, uint32_t type, const void *out, size_t len,
                    struct nl_error *err)
{
    struct tcp *t = impl;
    struct nl_conn *c = &t->mesh->peers[k];
    struct tpeer *p = &t->p[k];

    if (p->out_active)
        return nl_error_set(err, NL_EINVAL, "%s: a frame is already under way (a bug)", c->peer);
    if (c->seal && len > p->ct_cap)
        return nl_error_set(err, NL_EINVAL, "%s: a frame of %zu bytes was not reserved (a bug)",
                            c->peer, len);
    int rc = nl_wire_seal_head(c, p->out_h, type, out, (uint32_t)len, err);
    if (rc == 0 && c->seal) {
        rc = nl_wire_seal_payload(c, p->ct, out, (uint32_t)len, p->out_tag, err);
        out = p->ct;
    }
    if (rc < 0)
        return rc;
    p->out = out;
    p->out_len = len;
    p->out_done = 0;
    p->out_active = 1;
    return 0;
}

static int tcp_expect(void *impl, int k, uint32_t type, void *dst, size_t len, struct nl_error *err)
{
    struct tcp *t = impl;
    struct tpeer *p = &t->p[k];
    for (int i = 0; i < MAX_EXPECT; i++) {
        if (!p->exp[i].active) {
            p->exp[i] = (struct slot){type, dst, len, 1};
            return 0;
        }
    }
    return nl_error_set(err, NL_EINVAL, "%s: too many frames expected at once (a bug)",
                        t->mesh->peers[k].peer);
}

/* Sends what it can of the frame to peer k: 0, or NL_ENET. */
static int pump_out(struct tcp *t, int k, const struct nl_transport_sink *sink)
{
    struct nl_conn *c = &t->mesh->peers[k];
    struct tpeer *x = &t->p[k];
    const size_t hb = x->hb, body = hb + x->out_len;
    size_t moved = 0;
    int rc = 0;

    while (x->out_done < body + x->tb) {
        const unsigned char *q;
        size_t left;
        if (x->out_done < hb) {
            q = x->out_h + x->out_done;
            left = hb - x->out_done;
        } else if (x->out_done < body) {
            q = x->out + (x->out_done - hb);
            left = body - x->out_done;
        } else {
            q = x->out_tag + (x->out_done - body);
            left = body + x->tb - x->out_done;
        }
        ssize_t w = send(c->fd, q, left, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            x->out_done += (size_t)w;
            c->bytes_sent += (uint64_t)w;
            moved += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        rc = NL_ENET;
        break;
    }
    const int complete = rc == 0 && x->out_done == body + x->tb;
    if (complete)
        x->out_active = 0;
    if (moved > 0 || complete)
        sink->sent(sink->ud, k, moved, complete);
    return rc;
}

/* Routes a frame from peer k by its header: to the slot expecting that type and length. */
static int in_route(struct tcp *t, int k, uint32_t type, uint32_t len, struct nl_error *err)
{
    struct tpeer *x = &t->p[k];
    for (int i = 0; i < MAX_EXPECT; i++) {
        struct slot *s = &x->exp[i];
        if (s->active && s->type == type && s->len == len) {
            s->active = 0;
            x->in = s->dst;
            x->in_len = len;
            x->in_type = type;
            return 0;
        }
    }
    return nl_error_set(err, NL_EFORMAT,
                        "%s: sent a frame of type %u and %u bytes, which was not due in this step "
                        "of the exchange",
                        t->mesh->peers[k].peer, type, len);
}

/* 1 when a frame from peer k is complete, 0 when more is to come, or an error. */
static int pump_in(struct tcp *t, int k, struct nl_error *err)
{
    struct nl_conn *c = &t->mesh->peers[k];
    struct tpeer *x = &t->p[k];
    const size_t hb = x->hb;

    if (x->in_done == 0)
        x->in_len = 0;
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
        ssize_t r = recv(c->fd, p, left, MSG_DONTWAIT);
        if (r > 0) {
            x->in_done += (size_t)r;
            c->bytes_received += (uint64_t)r;
            if (x->in_done == hb) {
                uint32_t type, len;
                int rc = nl_wire_open_head(c, x->in_h, &type, &len, &x->in_crc, NL_WIRE_MAX_PAYLOAD,
                                           err);
                if (rc == 0)
                    rc = in_route(t, k, type, len, err);
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
    x->in_done = 0;
    x->in = NULL;
    return 1;
}

static int readable(const struct pollfd *p)
{
    return (p->revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

static int tcp_progress(void *impl, int wake_fd, int cancel_fd,
                        const struct nl_transport_sink *sink, struct nl_error *err)
{
    struct tcp *t = impl;
    struct nl_mesh *m = t->mesh;
    int np = 0, timeout = 0;

    for (int k = 0; k < m->size; k++) {
        if (k == m->rank)
            continue;
        const short ev =
            (short)((t->p[k].out_active ? POLLOUT : 0) | (expecting(&t->p[k]) ? POLLIN : 0));
        if (!ev)
            continue;
        t->pfd[np] = (struct pollfd){.fd = m->peers[k].fd, .events = ev};
        t->pidx[np++] = k;
        if (m->peers[k].timeout_ms > timeout)
            timeout = m->peers[k].timeout_ms;
    }
    if (wake_fd >= 0) {
        t->pfd[np] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
        t->pidx[np++] = -1;
        if (timeout == 0)
            timeout = 1000;
    }
    if (np == 0)
        return nl_error_set(err, NL_EINVAL, "the exchange waits for nothing (a bug)");
    if (cancel_fd >= 0) {
        t->pfd[np] = (struct pollfd){.fd = cancel_fd, .events = POLLIN};
        t->pidx[np++] = -2;
    }
    const int r = poll(t->pfd, (nfds_t)np, timeout);
    if (r < 0 && errno == EINTR)
        return 0;
    if (r < 0)
        return nl_error_set(err, NL_ENET, "poll: %s", strerror(errno));
    if (r == 0 && wake_fd >= 0)
        return 0;
    if (r == 0)
        return nl_error_set(err, NL_ETIMEDOUT, "%s: no progress in the exchange within %d ms",
                            m->peers[t->pidx[0]].peer, timeout);
    /* Called off, whatever else came: a peer called off too may have closed already. */
    if (t->pidx[np - 1] == -2 && readable(&t->pfd[np - 1]))
        return nl_error_set(err, NL_ECANCELED, "the exchange was called off");
    for (int i = 0; i < np; i++) {
        const int k = t->pidx[i];
        if (k < 0)
            continue;
        if (readable(&t->pfd[i])) {
            int rc = pump_in(t, k, err);
            if (rc < 0)
                return rc;
            if (rc == 1)
                sink->received(sink->ud, k, t->p[k].in_type);
        }
        if (t->p[k].out_active && (t->pfd[i].revents & (POLLOUT | POLLERR)) &&
            pump_out(t, k, sink) < 0)
            return nl_error_set(err, NL_ENET, "%s: sending: %s", m->peers[k].peer, strerror(errno));
    }
    return 0;
}

static const char *tcp_peer_name(const void *impl, int k)
{
    const struct tcp *t = impl;
    return t->mesh->peers[k].peer;
}

static unsigned long long tcp_bytes_sent(const void *impl)
{
    const struct tcp *t = impl;
    return nl_mesh_bytes_sent(t->mesh);
}

static void tcp_free(void *impl)
{
    struct tcp *t = impl;
    if (!t)
        return;
    for (int k = 0; t->p && k < t->mesh->size; k++)
        nl_free(t->p[k].ct);
    nl_free(t->p);
    nl_free(t->pfd);
    nl_free(t->pidx);
    nl_free(t);
}

static const struct nl_transport_ops tcp_ops = {
    .name = "tcp",
    .reserve = tcp_reserve,
    .send = tcp_send,
    .expect = tcp_expect,
    .progress = tcp_progress,
    .peer_name = tcp_peer_name,
    .bytes_sent = tcp_bytes_sent,
    .free = tcp_free,
};

int nl_transport_tcp_new(struct nl_transport **out, struct nl_mesh *mesh, struct nl_error *err)
{
    struct nl_transport *tr = nl_calloc(1, sizeof *tr);
    struct tcp *t = nl_calloc(1, sizeof *t);

    *out = NULL;
    if (t) {
        t->mesh = mesh;
        t->p = nl_calloc((size_t)mesh->size, sizeof *t->p);
        t->pfd = nl_calloc((size_t)mesh->size + 2, sizeof *t->pfd);
        t->pidx = nl_calloc((size_t)mesh->size + 2, sizeof *t->pidx);
    }
    if (!tr || !t || !t->p || !t->pfd || !t->pidx) {
        tcp_free(t);
        nl_free(tr);
        return nl_error_set(err, NL_ENOMEM, "out of memory for a transport of %d members",
                            mesh->size);
    }
    for (int k = 0; k < mesh->size; k++) {
        t->p[k].hb = nl_wire_head_bytes(&mesh->peers[k]);
        t->p[k].tb = nl_wire_tail_bytes(&mesh->peers[k]);
    }
    *tr = (struct nl_transport){.ops = &tcp_ops, .impl = t, .rank = mesh->rank, .size = mesh->size};
    *out = tr;
    return 0;
}

void nl_transport_free(struct nl_transport *t)
{
    if (!t)
        return;
    t->ops->free(t->impl);
    nl_free(t);
}

unsigned long long nl_transport_bytes_sent(const struct nl_transport *t)
{
    return t->ops->bytes_sent(t->impl);
}
