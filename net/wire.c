/* The wire protocol. Every message is a frame:
 *
 *   offset  size  field
 *   0       4     type     (enum nl_frame_type), little-endian uint32
 *   4       4     length   of the payload in bytes, little-endian uint32, <= NL_WIRE_MAX_PAYLOAD
 *                          and <= what the receiver expects at that point (checked before any
 *                          buffer is allocated or any payload byte read)
 *   8       4     crc      zlib CRC32 of bytes 0..7 followed by the payload, little-endian
 *   12      len   payload
 *
 * A connection starts with the handshake, in this order on both sides:
 *   HELLO (48 bytes): magic "NNLABWIR" (8), version uint32 LE (4), sender id int32 LE (4),
 *                     nonce (32 random bytes)
 *   AUTH  (32 bytes): HMAC-SHA256(secret, label || client HELLO || server HELLO), where label is
 *                     "nnlab-wire client" or "nnlab-wire server" after the sender's role, so a
 *                     proof cannot be reflected back to the side that made it.
 * Each side sends its HELLO, reads the peer's, sends its AUTH and reads the peer's; a first
 * frame that is not a HELLO of the right size, magic and version, or a second that is not an
 * AUTH with the right proof, ends the connection with NL_EAUTH. Nothing else is read before: a
 * header announcing more than a HELLO's (then an AUTH's) bytes is refused before its payload is
 * read, and the whole handshake has one deadline, so a peer that sends a byte now and then holds
 * it no longer than a silent one. The handshake also runs in steps (nl_wire_handshake_step), so
 * that a listener can take many connections at once and none of them waits for another.
 * Payload formats of the later frames belong to their users (net/allreduce.c, net/worker.c).
 * The same framing (without the handshake, which SSH stands in for) runs over a worker's stdin
 * and stdout; on pipes a write that has started may outlast the timeout. */
#include "nnlab/wire.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "net/crypto.h"
#include "nnlab/alloc.h"

static const char magic[8] = {'N', 'N', 'L', 'A', 'B', 'W', 'I', 'R'};

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void nl_conn_init(struct nl_conn *c, int fd, const char *peer, int timeout_ms)
{
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->timeout_ms = timeout_ms;
    snprintf(c->peer, sizeof c->peer, "%s", peer ? peer : "peer");
}

void nl_conn_close(struct nl_conn *c)
{
    if (c && c->fd > 0) {
        close(c->fd);
        c->fd = -1;
    }
}

static int wait_fd(int fd, short events, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = events};
    for (;;) {
        int r = poll(&p, 1, timeout_ms);
        if (r > 0)
            return 0;
        if (r == 0)
            return NL_ETIMEDOUT;
        if (errno != EINTR)
            return NL_ENET;
    }
}

int nl_wire_write_all(int fd, const void *p, size_t n, int timeout_ms)
{
    const unsigned char *b = p;

    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            b += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOTSOCK)) {
            const int not_socket = errno == ENOTSOCK;
            int rc = wait_fd(fd, POLLOUT, timeout_ms);
            if (rc < 0)
                return rc;
            if (not_socket) {
                /* A pipe (a worker's stdout): write() once it is writable. */
                w = write(fd, b, n);
                if (w < 0 && errno != EINTR && errno != EAGAIN)
                    return NL_ENET;
                if (w > 0) {
                    b += w;
                    n -= (size_t)w;
                }
            }
            continue;
        }
        return NL_ENET;
    }
    return 0;
}

int nl_wire_read_all(int fd, void *p, size_t n, int timeout_ms)
{
    unsigned char *b = p;

    while (n > 0) {
        ssize_t r = recv(fd, b, n, MSG_DONTWAIT);
        if (r > 0) {
            b += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0) {
            errno = 0;
            return NL_ENET;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOTSOCK) {
            const int not_socket = errno == ENOTSOCK;
            int rc = wait_fd(fd, POLLIN, timeout_ms);
            if (rc < 0)
                return rc;
            if (not_socket) {
                /* A pipe (a worker's stdin): read() once it is readable. */
                r = read(fd, b, n);
                if (r == 0) {
                    errno = 0;
                    return NL_ENET;
                }
                if (r < 0 && errno != EINTR && errno != EAGAIN)
                    return NL_ENET;
                if (r > 0) {
                    b += r;
                    n -= (size_t)r;
                }
            }
            continue;
        }
        return NL_ENET;
    }
    return 0;
}

static uint32_t frame_crc(uint32_t type, uint32_t len, const void *payload)
{
    unsigned char h[8];
    put32(h, type);
    put32(h + 4, len);
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, h, 8);
    /* zlib takes uInt lengths; payloads are at most NL_WIRE_MAX_PAYLOAD, which fits. */
    if (len > 0)
        crc = crc32(crc, payload, (uInt)len);
    return (uint32_t)crc;
}

void nl_wire_header(unsigned char h[NL_WIRE_HEADER], uint32_t type, const void *payload,
                    uint32_t len)
{
    put32(h, type);
    put32(h + 4, len);
    put32(h + 8, frame_crc(type, len, payload));
}

int nl_wire_parse_header(const unsigned char h[NL_WIRE_HEADER], uint32_t *type, uint32_t *len,
                         uint32_t *crc, uint32_t max)
{
    *type = get32(h);
    *len = get32(h + 4);
    *crc = get32(h + 8);
    if (*len > max || *len > NL_WIRE_MAX_PAYLOAD)
        return NL_EFORMAT;
    return 0;
}

int nl_wire_check(uint32_t crc, uint32_t type, const void *payload, uint32_t len)
{
    return frame_crc(type, len, payload) == crc;
}

static int io_error(struct nl_conn *c, int rc, const char *what, struct nl_error *err)
{
    if (rc == NL_ETIMEDOUT)
        return nl_error_set(err, rc, "%s: %s: no answer within %d ms", c->peer, what,
                            c->timeout_ms);
    if (errno == 0)
        return nl_error_set(err, NL_ENET, "%s: %s: the peer closed the connection", c->peer, what);
    return nl_error_set(err, NL_ENET, "%s: %s: %s", c->peer, what, strerror(errno));
}

int nl_wire_send(struct nl_conn *c, uint32_t type, const void *payload, uint32_t len,
                 struct nl_error *err)
{
    unsigned char h[NL_WIRE_HEADER];
    int rc;

    if (len > NL_WIRE_MAX_PAYLOAD)
        return nl_error_set(err, NL_EINVAL, "%s: a frame of %u bytes is over the limit", c->peer,
                            len);
    nl_wire_header(h, type, payload, len);
    rc = nl_wire_write_all(c->fd, h, sizeof h, c->timeout_ms);
    if (rc == 0 && len > 0)
        rc = nl_wire_write_all(c->fd, payload, len, c->timeout_ms);
    if (rc < 0)
        return io_error(c, rc, "sending", err);
    c->bytes_sent += sizeof h + len;
    return 0;
}

/* Reads a header and checks its length against cap. */
static int recv_header(struct nl_conn *c, uint32_t *type, uint32_t *len, uint32_t *crc,
                       uint32_t cap, struct nl_error *err)
{
    unsigned char h[NL_WIRE_HEADER];
    int rc = nl_wire_read_all(c->fd, h, sizeof h, c->timeout_ms);

    if (rc < 0)
        return io_error(c, rc, "receiving", err);
    if (nl_wire_parse_header(h, type, len, crc, cap) < 0)
        return nl_error_set(err, NL_EFORMAT,
                            "%s: a frame of type %u claims %u bytes, over the %u expected", c->peer,
                            *type, *len, cap);
    return 0;
}

static int recv_payload(struct nl_conn *c, uint32_t type, void *buf, uint32_t len, uint32_t crc,
                        struct nl_error *err)
{
    int rc = len > 0 ? nl_wire_read_all(c->fd, buf, len, c->timeout_ms) : 0;

    if (rc < 0)
        return io_error(c, rc, "receiving", err);
    if (!nl_wire_check(crc, type, buf, len))
        return nl_error_set(err, NL_EFORMAT, "%s: a frame of type %u (%u bytes) fails its checksum",
                            c->peer, type, len);
    c->bytes_received += NL_WIRE_HEADER + len;
    return 0;
}

int nl_wire_recv(struct nl_conn *c, uint32_t *type, void *buf, uint32_t cap, uint32_t *len,
                 struct nl_error *err)
{
    uint32_t crc;
    int rc = recv_header(c, type, len, &crc, cap, err);
    return rc < 0 ? rc : recv_payload(c, *type, buf, *len, crc, err);
}

int nl_wire_recv_alloc(struct nl_conn *c, uint32_t *type, void **buf, uint32_t *len, uint32_t max,
                       struct nl_error *err)
{
    uint32_t crc;
    int rc;

    *buf = NULL;
    rc = recv_header(c, type, len, &crc, max, err);
    if (rc < 0)
        return rc;
    void *p = nl_malloc(*len > 0 ? *len : 1);
    if (!p)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory for a frame of %u bytes", c->peer,
                            *len);
    rc = recv_payload(c, *type, p, *len, crc, err);
    if (rc < 0) {
        nl_free(p);
        return rc;
    }
    *buf = p;
    return 0;
}

int nl_wire_random(void *p, size_t n, struct nl_error *err)
{
    unsigned char *b = p;

    while (n > 0) {
        ssize_t r = getrandom(b, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return nl_error_set(err, NL_EIO, "no random bytes from the kernel: %s",
                                strerror(errno));
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static void proof(unsigned char out[NL_SHA256_SIZE], enum nl_wire_role sender,
                  const unsigned char client_hello[NL_WIRE_HELLO],
                  const unsigned char server_hello[NL_WIRE_HELLO], const void *secret,
                  size_t secret_len)
{
    static const char labels[2][18] = {"nnlab-wire client", "nnlab-wire server"};
    unsigned char msg[17 + 2 * NL_WIRE_HELLO];

    memcpy(msg, labels[sender], 17);
    memcpy(msg + 17, client_hello, NL_WIRE_HELLO);
    memcpy(msg + 17 + NL_WIRE_HELLO, server_hello, NL_WIRE_HELLO);
    nl_hmac_sha256(out, secret, secret_len, msg, sizeof msg);
}

static int not_wire(struct nl_conn *c, struct nl_error *err)
{
    return nl_error_set(err, NL_EAUTH,
                        "%s: handshake: the peer does not speak nnlab's wire protocol", c->peer);
}

static int failed_proof(struct nl_conn *c, struct nl_error *err)
{
    return nl_error_set(err, NL_EAUTH,
                        "%s: handshake: the peer failed the challenge-response (it does not "
                        "hold this run's secret)",
                        c->peer);
}

/* Reads, without waiting, what the peer has sent of the handshake's current frame into
 * hs->frame: its header, then a payload of at most cap bytes (a longer one is refused before it
 * is read). 1 when the whole frame is in and its checksum holds, 0 when the peer has sent no more
 * yet, or an error. */
static int hs_read(struct nl_wire_hs *hs, struct nl_conn *c, uint32_t cap, uint32_t *type,
                   uint32_t *len, struct nl_error *err)
{
    for (;;) {
        uint32_t want = NL_WIRE_HEADER, crc;
        if (hs->have >= NL_WIRE_HEADER) {
            if (nl_wire_parse_header(hs->frame, type, len, &crc, cap) < 0)
                return hs->stage == 0 ? not_wire(c, err) : failed_proof(c, err);
            want += *len;
            if (hs->have == want) {
                if (!nl_wire_check(crc, *type, hs->frame + NL_WIRE_HEADER, *len))
                    return hs->stage == 0 ? not_wire(c, err) : failed_proof(c, err);
                c->bytes_received += want;
                hs->have = 0;
                return 1;
            }
        }
        ssize_t r = recv(c->fd, hs->frame + hs->have, want - hs->have, MSG_DONTWAIT);
        if (r > 0) {
            hs->have += (uint32_t)r;
            continue;
        }
        if (r == 0)
            return nl_error_set(err, NL_ENET, "%s: handshake: the peer closed the connection",
                                c->peer);
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return nl_error_set(err, NL_ENET, "%s: handshake: %s", c->peer, strerror(errno));
    }
}

int nl_wire_handshake_start(struct nl_wire_hs *hs, struct nl_conn *c, enum nl_wire_role role,
                            const void *secret, size_t secret_len, int32_t my_id,
                            struct nl_error *err)
{
    int rc;

    memset(hs, 0, sizeof *hs);
    hs->role = role;
    hs->secret = secret;
    hs->secret_len = secret_len;
    if (secret_len < NL_WIRE_SECRET_MIN)
        return nl_error_set(err, NL_EINVAL, "%s: the run secret is shorter than %d bytes", c->peer,
                            NL_WIRE_SECRET_MIN);
    memcpy(hs->mine, magic, sizeof magic);
    put32(hs->mine + 8, NL_WIRE_VERSION);
    put32(hs->mine + 12, (uint32_t)my_id);
    rc = nl_wire_random(hs->mine + 16, NL_WIRE_NONCE, err);
    if (rc == 0)
        rc = nl_wire_send(c, NL_FRAME_HELLO, hs->mine, sizeof hs->mine, err);
    return rc;
}

int nl_wire_handshake_step(struct nl_wire_hs *hs, struct nl_conn *c, int32_t *peer_id,
                           struct nl_error *err)
{
    const int client = hs->role == NL_WIRE_CLIENT;
    unsigned char want[NL_SHA256_SIZE];
    uint32_t type, len;
    int rc;

    if (hs->stage == 0) {
        rc = hs_read(hs, c, NL_WIRE_HELLO, &type, &len, err);
        if (rc <= 0)
            return rc;
        const unsigned char *p = hs->frame + NL_WIRE_HEADER;
        if (type != NL_FRAME_HELLO || len != NL_WIRE_HELLO || memcmp(p, magic, sizeof magic) != 0)
            return not_wire(c, err);
        if (get32(p + 8) != NL_WIRE_VERSION)
            return nl_error_set(err, NL_EAUTH,
                                "%s: handshake: the peer speaks wire version %u, this nnlab %d "
                                "(run the same nnlab version everywhere)",
                                c->peer, get32(p + 8), NL_WIRE_VERSION);
        memcpy(hs->theirs, p, NL_WIRE_HELLO);
        proof(want, hs->role, client ? hs->mine : hs->theirs, client ? hs->theirs : hs->mine,
              hs->secret, hs->secret_len);
        rc = nl_wire_send(c, NL_FRAME_AUTH, want, sizeof want, err);
        if (rc < 0)
            return rc;
        hs->stage = 1;
    }
    if (hs->stage == 1) {
        rc = hs_read(hs, c, NL_WIRE_PROOF, &type, &len, err);
        if (rc <= 0)
            return rc;
        proof(want, client ? NL_WIRE_SERVER : NL_WIRE_CLIENT, client ? hs->mine : hs->theirs,
              client ? hs->theirs : hs->mine, hs->secret, hs->secret_len);
        if (type != NL_FRAME_AUTH || len != sizeof want ||
            !nl_mem_equal_ct(hs->frame + NL_WIRE_HEADER, want, sizeof want))
            return failed_proof(c, err);
        hs->stage = 2;
    }
    *peer_id = (int32_t)get32(hs->theirs + 12);
    return 1;
}

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int nl_wire_handshake(struct nl_conn *c, enum nl_wire_role role, const void *secret,
                      size_t secret_len, int32_t my_id, int32_t *peer_id, struct nl_error *err)
{
    struct nl_wire_hs hs;
    const double deadline = mono_ms() + c->timeout_ms;
    int rc = nl_wire_handshake_start(&hs, c, role, secret, secret_len, my_id, err);

    while (rc == 0) {
        rc = nl_wire_handshake_step(&hs, c, peer_id, err);
        if (rc != 0)
            break;
        const double left = deadline - mono_ms();
        rc = left > 0 ? wait_fd(c->fd, POLLIN, (int)left + 1) : NL_ETIMEDOUT;
        if (rc == NL_ETIMEDOUT)
            return nl_error_set(err, rc, "%s: handshake: no answer within %d ms", c->peer,
                                c->timeout_ms);
        if (rc < 0)
            return nl_error_set(err, rc, "%s: handshake: %s", c->peer, strerror(errno));
    }
    return rc < 0 ? rc : 0;
}
