/* The full mesh. See include/nnlab/mesh.h.
 *
 * Order: member r first connects to members 0..r-1 in turn, then accepts until members
 * r+1..size-1 have all joined. Member 0 accepts at once, and a member connects only to members
 * that have finished connecting, so the order cannot deadlock. An accepted connection proves its
 * rank in the handshake; one that fails the handshake, names a rank not expected or a rank
 * already joined is closed and the wait goes on. */
#include "nnlab/mesh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nnlab/alloc.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

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

/* Connects to a member, retrying refused connections until the deadline. */
static int dial(int *out, const struct nl_member *m, double deadline, struct nl_error *err)
{
    struct sockaddr_storage ss;
    socklen_t len;

    if (make_addr(&ss, &len, m->addr, m->port) < 0)
        return nl_error_set(err, NL_EINVAL, "%s: '%s' is not a numeric IP address", m->name,
                            m->addr);
    for (;;) {
        int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            return nl_error_set(err, NL_ENET, "socket: %s", strerror(errno));
        if (connect(s, (struct sockaddr *)&ss, len) == 0) {
            tune(s);
            *out = s;
            return 0;
        }
        int e = errno;
        close(s);
        if ((e != ECONNREFUSED && e != EINTR) || now_ms() > deadline)
            return nl_error_set(err, NL_ENET, "%s (%s:%d): connect: %s", m->name, m->addr, m->port,
                                strerror(e));
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
}

void nl_mesh_free(struct nl_mesh *m)
{
    if (!m)
        return;
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

int nl_mesh_connect(struct nl_mesh **out, int rank, int size, int listen_fd,
                    const struct nl_member *members, const void *secret, size_t secret_len,
                    int timeout_ms, struct nl_error *err)
{
    struct nl_mesh *m;
    char name[160];
    int rc = 0;
    const double deadline = now_ms() + timeout_ms;

    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size)
        return nl_error_set(err, NL_EINVAL, "rank %d of %d members", rank, size);
    m = nl_calloc(1, sizeof *m);
    if (m)
        m->peers = nl_calloc((size_t)size, sizeof *m->peers);
    if (!m || !m->peers) {
        nl_free(m);
        return nl_error_set(err, NL_ENOMEM, "out of memory for a mesh of %d", size);
    }
    m->rank = rank;
    m->size = size;
    for (int i = 0; i < size; i++)
        m->peers[i].fd = -1;

    for (int k = 0; k < rank; k++) {
        int fd = -1;
        int32_t id;
        peer_name(name, sizeof name, &members[k]);
        rc = dial(&fd, &members[k], deadline, err);
        if (rc < 0)
            goto fail;
        nl_conn_init(&m->peers[k], fd, name, timeout_ms);
        rc = nl_wire_handshake(&m->peers[k], NL_WIRE_CLIENT, secret, secret_len, rank, &id, err);
        if (rc == 0 && id != k)
            rc = nl_error_set(err, NL_EAUTH, "%s: answered as member %d, not %d", name, id, k);
        if (rc < 0)
            goto fail;
    }

    for (int joined = 0; joined < size - 1 - rank;) {
        struct pollfd p = {.fd = listen_fd, .events = POLLIN};
        double left = deadline - now_ms();
        int r = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = nl_error_set(err, r == 0 ? NL_ETIMEDOUT : NL_ENET,
                              "%s: %d of %d members did not connect within %d ms",
                              members[rank].name, size - 1 - rank - joined, size - 1 - rank,
                              timeout_ms);
            goto fail;
        }
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        int fd = accept(listen_fd, (struct sockaddr *)&from, &fl);
        if (fd < 0)
            continue;
        char host[64] = "?";
        if (from.ss_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&from)->sin_addr, host, sizeof host);
        else if (from.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&from)->sin6_addr, host, sizeof host);
        tune(fd);
        struct nl_conn c;
        struct nl_error herr = {0};
        int32_t id = -1;
        snprintf(name, sizeof name, "a connection from %s", host);
        nl_conn_init(&c, fd, name, timeout_ms);
        if (nl_wire_handshake(&c, NL_WIRE_SERVER, secret, secret_len, rank, &id, &herr) < 0 ||
            id <= rank || id >= size || m->peers[id].fd >= 0) {
            /* Not one of ours: drop it and keep waiting for the members. */
            nl_conn_close(&c);
            continue;
        }
        peer_name(c.peer, sizeof c.peer, &members[id]);
        m->peers[id] = c;
        joined++;
    }
    *out = m;
    return 0;
fail:
    nl_mesh_free(m);
    return rc;
}
