/* The full mesh. See include/nnlab/mesh.h.
 *
 * Order: member r first connects to members 0..r-1 in turn, then accepts until members
 * r+1..size-1 have all joined. Member 0 accepts at once, and a member connects only to members
 * that have finished connecting, so the order cannot deadlock. An accepted connection proves its
 * rank in the handshake; one that fails the handshake, names a rank not expected or a rank
 * already joined is closed and the wait goes on.
 *
 * Anyone can reach a member's port, so the accepting side assumes nothing of a connection:
 * - It takes every queued connection at once (the listening socket is made non-blocking) and
 *   runs the handshakes of all of them side by side with poll, each in steps
 *   (nl_wire_handshake_step), so a silent, half-open or slowly dripping connection never delays
 *   another's handshake.
 * - Each accepted connection has HANDSHAKE_MS (or the mesh's timeout when shorter) for its whole
 *   handshake, then it is closed; at most MAX_PENDING handshakes are open at once, and when a
 *   new connection comes with all of them taken, the oldest is closed (a member's handshake on
 *   the same network takes milliseconds, so it is never the oldest for long).
 * - Lengths are bounded by the handshake frames' sizes before anything is read (net/wire.c).
 * The connecting side dials with a non-blocking connect bounded by the deadline, and when the
 * member it dialled closes the connection before the handshake ends (it was busy with junk, or
 * had not yet reached this mesh and its guard answered), it dials again until the deadline. A
 * wrong proof is not retried: that is a member without this run's secret.
 *
 * After the mesh is formed, the listening socket stays open (the caller owns it, and may form a
 * mesh on it again). A guard thread then accepts whatever connects there and closes it at once,
 * so a connection made while the run trains is answered by a close rather than left waiting in
 * the kernel's queue. nl_mesh_free stops the guard, and so does nl_mesh_connect on the same
 * socket (the guards are kept in a list by socket, one per socket). */
#include "nnlab/mesh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/clock.h"

#define HANDSHAKE_MS 3000 /* an accepted connection's whole handshake, at most */
#define MAX_PENDING  32   /* accepted connections in their handshake at once */

/* Fills a sockaddr for a numeric address; 0 or NL_EINVAL. */
static int make_addr(struct sockaddr_storage *ss, socklen_t *len, const char *addr, int port)
{
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof *ss);
    if (!addr || !*addr) {
        in4->sin_family = AF_INET;
        in4->sin_addr.s_addr = htonl(INADDR_ANY);
        in4->sin_port = htons((uint16_t)port);
        *len = sizeof *in4;
        return 0;
    }
    if (inet_pton(AF_INET, addr, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        *len = sizeof *in4;
        return 0;
    }
    if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        *len = sizeof *in6;
        return 0;
    }
    return NL_EINVAL;
}

int nl_net_listen(int *fd, const char *addr, int port_lo, int port_hi, int *port,
                  struct nl_error *err)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int last_errno = 0;

    *fd = -1;
    if (port_lo < 0 || port_hi > 65535 || port_lo > port_hi)
        return nl_error_set(err, NL_EINVAL, "port range %d-%d is not within 0-65535", port_lo,
                            port_hi);
    for (int p = port_lo; p <= port_hi; p++) {
        if (make_addr(&ss, &len, addr, p) < 0)
            return nl_error_set(err, NL_EINVAL, "'%s' is not a numeric IP address", addr);
        int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            return nl_error_set(err, NL_ENET, "socket: %s", strerror(errno));
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(s, (struct sockaddr *)&ss, len) == 0 && listen(s, 64) == 0) {
            struct sockaddr_storage got;
            socklen_t gl = sizeof got;
            getsockname(s, (struct sockaddr *)&got, &gl);
            *port = ntohs(got.ss_family == AF_INET ? ((struct sockaddr_in *)&got)->sin_port
                                                   : ((struct sockaddr_in6 *)&got)->sin6_port);
            *fd = s;
            return 0;
        }
        last_errno = errno;
        close(s);
    }
    return nl_error_set(err, NL_ENET, "cannot listen on %s port %d-%d: %s",
                        addr && *addr ? addr : "*", port_lo, port_hi, strerror(last_errno));
}

static void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int set_blocking(int fd, int blocking)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    return fcntl(fd, F_SETFL, blocking ? fl & ~O_NONBLOCK : fl | O_NONBLOCK);
}

static int wait_ms(double deadline)
{
    double left = deadline - 1e3 * nl_now();
    return left <= 0 ? 0 : left > 1e9 ? 1000000000 : (int)left + 1;
}

/* Waits up to ms for cancel_fd (-1: none) to become readable: 1 when it did. */
static int cancelled(int cancel_fd, int ms)
{
    if (cancel_fd < 0) {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        return 0;
    }
    struct pollfd p = {.fd = cancel_fd, .events = POLLIN};
    return poll(&p, 1, ms) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

static int cancel_error(struct nl_error *err, const struct nl_member *m)
{
    return nl_error_set(err, NL_ECANCELED, "%s: forming the mesh was called off", m->name);
}

/* Connects to a member, retrying refused connections until the deadline; the connect itself is
 * bounded by the deadline too (a host that drops packets does not hold it for minutes). Gives
 * up when cancel_fd is readable. */
static int dial(int *out, const struct nl_member *m, double deadline, int cancel_fd,
                struct nl_error *err)
{
    struct sockaddr_storage ss;
    socklen_t len;

    if (make_addr(&ss, &len, m->addr, m->port) < 0)
        return nl_error_set(err, NL_EINVAL, "%s: '%s' is not a numeric IP address", m->name,
                            m->addr);
    for (;;) {
        int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (s < 0)
            return nl_error_set(err, NL_ENET, "socket: %s", strerror(errno));
        int e = 0;
        if (connect(s, (struct sockaddr *)&ss, len) != 0) {
            e = errno;
            if (e == EINPROGRESS || e == EINTR) {
                struct pollfd p[2] = {{.fd = s, .events = POLLOUT},
                                      {.fd = cancel_fd, .events = POLLIN}};
                int r;
                do
                    r = poll(p, cancel_fd >= 0 ? 2 : 1, wait_ms(deadline));
                while (r < 0 && errno == EINTR);
                socklen_t el = sizeof e;
                if (r > 0 && cancel_fd >= 0 && p[1].revents) {
                    close(s);
                    return cancel_error(err, m);
                }
                if (r == 0)
                    e = ETIMEDOUT;
                else if (r < 0)
                    e = errno;
                else if (getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el) != 0)
                    e = errno;
            }
        }
        if (e == 0 && set_blocking(s, 1) == 0) {
            tune(s);
            *out = s;
            return 0;
        }
        close(s);
        if (e == 0)
            e = errno;
        if (e != ECONNREFUSED || 1e3 * nl_now() > deadline)
            return nl_error_set(err, e == ETIMEDOUT ? NL_ETIMEDOUT : NL_ENET,
                                "%s (%s:%d): connect: %s", m->name, m->addr, m->port, strerror(e));
        if (cancelled(cancel_fd, 20))
            return cancel_error(err, m);
    }
}

/* The guards of listening sockets whose mesh is formed: a thread that accepts and closes. */
struct guard {
    int fd;      /* the listening socket */
    int wake[2]; /* a byte on wake[1] stops the thread */
    unsigned long id;
    pthread_t thread;
    struct guard *next;
};

static pthread_mutex_t guards_lock = PTHREAD_MUTEX_INITIALIZER;
static struct guard *guards;
static unsigned long guards_made;

static void *guard_main(void *arg)
{
    struct guard *g = arg;

    for (;;) {
        struct pollfd p[2] = {{.fd = g->fd, .events = POLLIN},
                              {.fd = g->wake[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        if (p[1].revents)
            return NULL;
        for (;;) {
            int fd = accept(g->fd, NULL, NULL);
            if (fd >= 0) {
                close(fd);
                continue;
            }
            const int e = errno;
            if (e == EINTR || e == ECONNABORTED)
                continue;
            if (e != EAGAIN && e != EWOULDBLOCK) {
                /* Out of descriptors or memory: let the pressure pass rather than spin. */
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
            }
            break;
        }
    }
}

/* Stops and frees the guard with that id (0: none), or with that socket (fd >= 0). */
static void guard_stop(unsigned long id, int fd)
{
    struct guard *g = NULL;

    pthread_mutex_lock(&guards_lock);
    for (struct guard **pp = &guards; *pp; pp = &(*pp)->next) {
        if ((id && (*pp)->id == id) || (fd >= 0 && (*pp)->fd == fd)) {
            g = *pp;
            *pp = g->next;
            break;
        }
    }
    pthread_mutex_unlock(&guards_lock);
    if (!g)
        return;
    char c = 1;
    while (write(g->wake[1], &c, 1) < 0 && errno == EINTR)
        ;
    pthread_join(g->thread, NULL);
    close(g->wake[0]);
    close(g->wake[1]);
    nl_free(g);
}

/* Starts a guard on a listening socket; its id, or 0 when it could not (then connections wait
 * in the kernel's queue as they would without one). */
static unsigned long guard_start(int fd)
{
    struct guard *g = nl_calloc(1, sizeof *g);

    if (!g)
        return 0;
    g->fd = fd;
    if (pipe(g->wake) != 0) {
        nl_free(g);
        return 0;
    }
    fcntl(g->wake[0], F_SETFD, FD_CLOEXEC);
    fcntl(g->wake[1], F_SETFD, FD_CLOEXEC);
    if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
        close(g->wake[0]);
        close(g->wake[1]);
        nl_free(g);
        return 0;
    }
    pthread_mutex_lock(&guards_lock);
    g->id = ++guards_made;
    g->next = guards;
    guards = g;
    pthread_mutex_unlock(&guards_lock);
    return g->id;
}

void nl_mesh_free(struct nl_mesh *m)
{
    if (!m)
        return;
    guard_stop(m->guard, -1);
    for (int i = 0; m->peers && i < m->size; i++)
        nl_conn_close(&m->peers[i]);
    nl_free(m->peers);
    nl_free(m);
}

unsigned long long nl_mesh_bytes_sent(const struct nl_mesh *m)
{
    unsigned long long n = 0;
    for (int i = 0; i < m->size; i++)
        n += m->peers[i].bytes_sent;
    return n;
}

static void peer_name(char *out, size_t n, const struct nl_member *m)
{
    snprintf(out, n, "%s (%s:%d)", m->name, m->addr, m->port);
}

/* Connects to member k and runs the handshake as client, dialling again while k closes the
 * connection before the handshake ends, until the deadline. */
static int join(struct nl_conn *c, int rank, int k, const struct nl_member *members,
                const void *secret, size_t secret_len, unsigned wire_opts, int timeout_ms,
                double deadline, int cancel_fd, struct nl_error *err)
{
    char name[160];
    int rc;

    peer_name(name, sizeof name, &members[k]);
    for (;;) {
        int fd = -1;
        int32_t id = -1;
        rc = dial(&fd, &members[k], deadline, cancel_fd, err);
        if (rc < 0)
            return rc;
        const int left = wait_ms(deadline);
        nl_conn_init(c, fd, name, left > 0 ? left : 1);
        rc = nl_wire_handshake(c, NL_WIRE_CLIENT, secret, secret_len, wire_opts, rank, &id, err);
        c->timeout_ms = timeout_ms;
        if (rc == 0 && id != k)
            rc = nl_error_set(err, NL_EAUTH, "%s: answered as member %d, not %d", name, id, k);
        if (rc == 0)
            return 0;
        nl_conn_close(c);
        if (rc != NL_ENET || 1e3 * nl_now() > deadline)
            return rc;
        if (cancelled(cancel_fd, 20))
            return cancel_error(err, &members[k]);
    }
}

/* An accepted connection whose handshake is under way. */
struct pending {
    struct nl_conn c;
    struct nl_wire_hs hs;
    double deadline;
};

/* Takes every connection queued on listen_fd into pend (*np of MAX_PENDING), each with its
 * HELLO sent; the oldest pending one makes room when all are taken. */
static void accept_all(int listen_fd, struct pending *pend, int *np, int rank, const void *secret,
                       size_t secret_len, unsigned wire_opts, int hs_ms)
{
    for (;;) {
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        int fd = accept(listen_fd, (struct sockaddr *)&from, &fl);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return; /* EAGAIN: all taken; anything else: the next poll says more */
        }
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        if (*np == MAX_PENDING) {
            int oldest = 0;
            for (int i = 1; i < *np; i++)
                if (pend[i].deadline < pend[oldest].deadline)
                    oldest = i;
            nl_conn_close(&pend[oldest].c);
            pend[oldest] = pend[--*np];
        }
        char host[64] = "?", name[160];
        if (from.ss_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&from)->sin_addr, host, sizeof host);
        else if (from.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&from)->sin6_addr, host, sizeof host);
        tune(fd);
        snprintf(name, sizeof name, "a connection from %s", host);
        struct pending *p = &pend[*np];
        struct nl_error herr = {0};
        nl_conn_init(&p->c, fd, name, hs_ms);
        p->deadline = 1e3 * nl_now() + hs_ms;
        if (nl_wire_handshake_start(&p->hs, &p->c, NL_WIRE_SERVER, secret, secret_len, wire_opts,
                                    rank, &herr) < 0) {
            nl_conn_close(&p->c);
            continue;
        }
        ++*np;
    }
}

int nl_mesh_connect(struct nl_mesh **out, int rank, int size, int listen_fd,
                    const struct nl_member *members, const void *secret, size_t secret_len,
                    int timeout_ms, struct nl_error *err)
{
    return nl_mesh_connect_cancel(out, rank, size, listen_fd, members, secret, secret_len, 0,
                                  timeout_ms, -1, err);
}

int nl_mesh_connect_cancel(struct nl_mesh **out, int rank, int size, int listen_fd,
                           const struct nl_member *members, const void *secret, size_t secret_len,
                           unsigned wire_opts, int timeout_ms, int cancel_fd, struct nl_error *err)
{
    struct nl_mesh *m;
    struct pending *pend = NULL;
    struct pollfd *pfd = NULL;
    int rc = 0, np = 0;
    const double deadline = 1e3 * nl_now() + timeout_ms;
    const int hs_ms = timeout_ms < HANDSHAKE_MS ? timeout_ms : HANDSHAKE_MS;

    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size)
        return nl_error_set(err, NL_EINVAL, "rank %d of %d members", rank, size);
    if (secret_len < NL_WIRE_SECRET_MIN)
        return nl_error_set(err, NL_EINVAL, "the run secret is shorter than %d bytes",
                            NL_WIRE_SECRET_MIN);
    /* A mesh formed on this socket before hands it back: its guard stops accepting. */
    if (listen_fd >= 0)
        guard_stop(0, listen_fd);
    m = nl_calloc(1, sizeof *m);
    if (m)
        m->peers = nl_calloc((size_t)size, sizeof *m->peers);
    pend = nl_calloc(MAX_PENDING, sizeof *pend);
    pfd = nl_calloc(MAX_PENDING + 2, sizeof *pfd);
    if (!m || !m->peers || !pend || !pfd) {
        if (m)
            nl_free(m->peers);
        nl_free(m);
        nl_free(pend);
        nl_free(pfd);
        return nl_error_set(err, NL_ENOMEM, "out of memory for a mesh of %d", size);
    }
    m->rank = rank;
    m->size = size;
    for (int i = 0; i < size; i++)
        m->peers[i].fd = -1;

    for (int k = 0; k < rank; k++) {
        rc = join(&m->peers[k], rank, k, members, secret, secret_len, wire_opts, timeout_ms,
                  deadline, cancel_fd, err);
        if (rc < 0)
            goto fail;
    }

    if (rank < size - 1 && set_blocking(listen_fd, 0) != 0) {
        rc = nl_error_set(err, NL_ENET, "%s: listening socket: %s", members[rank].name,
                          strerror(errno));
        goto fail;
    }
    for (int joined = 0; joined < size - 1 - rank;) {
        /* Wait for a new connection, or more from a pending one, or the next deadline. */
        double until = deadline;
        pfd[0] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
        for (int i = 0; i < np; i++) {
            pfd[1 + i] = (struct pollfd){.fd = pend[i].c.fd, .events = POLLIN};
            if (pend[i].deadline < until)
                until = pend[i].deadline;
        }
        if (1e3 * nl_now() >= deadline) {
            rc = nl_error_set(
                err, NL_ETIMEDOUT, "%s: %d of %d members did not connect within %d ms",
                members[rank].name, size - 1 - rank - joined, size - 1 - rank, timeout_ms);
            goto fail;
        }
        /* The cancel fd last, after the pending connections. */
        pfd[1 + np] = (struct pollfd){.fd = cancel_fd, .events = POLLIN};
        int r = poll(pfd, (nfds_t)np + 1 + (cancel_fd >= 0), wait_ms(until));
        if (r < 0 && errno != EINTR) {
            rc = nl_error_set(err, NL_ENET, "%s: waiting for members: %s", members[rank].name,
                              strerror(errno));
            goto fail;
        }
        if (r > 0 && cancel_fd >= 0 && pfd[1 + np].revents) {
            rc = cancel_error(err, &members[rank]);
            goto fail;
        }
        /* Move every pending handshake on; drop the failed and the late. */
        const double now = 1e3 * nl_now();
        for (int i = np - 1; i >= 0; i--) {
            struct nl_error herr = {0};
            int32_t id = -1;
            int step = 0;
            if (r > 0 && pfd[1 + i].revents)
                step = nl_wire_handshake_step(&pend[i].hs, &pend[i].c, &id, &herr);
            if (step == 0 && now < pend[i].deadline)
                continue;
            if (step == 1 && id > rank && id < size && m->peers[id].fd < 0) {
                m->peers[id] = pend[i].c;
                m->peers[id].timeout_ms = timeout_ms;
                peer_name(m->peers[id].peer, sizeof m->peers[id].peer, &members[id]);
                joined++;
            } else {
                /* Not one of ours, or not in time: drop it and keep waiting for the members. */
                nl_conn_close(&pend[i].c);
            }
            pend[i] = pend[--np];
        }
        if (r > 0 && pfd[0].revents)
            accept_all(listen_fd, pend, &np, rank, secret, secret_len, wire_opts, hs_ms);
    }
    for (int i = 0; i < np; i++)
        nl_conn_close(&pend[i].c);
    nl_free(pend);
    nl_free(pfd);
    if (listen_fd >= 0 && set_blocking(listen_fd, 0) == 0)
        m->guard = guard_start(listen_fd);
    *out = m;
    return 0;
fail:
    for (int i = 0; i < np; i++)
        nl_conn_close(&pend[i].c);
    nl_free(pend);
    nl_free(pfd);
    nl_mesh_free(m);
    return rc;
}
