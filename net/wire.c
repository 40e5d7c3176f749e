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
 *   HELLO (52 bytes): magic "NNLABWIR" (8), version uint32 LE (4), sender id int32 LE (4),
 *                     flags uint32 LE (4: bit 0 plaintext, bit 1 AES instructions), nonce (32
 *                     random bytes)
 *   AUTH  (32 bytes): HMAC-SHA256(secret, label || client HELLO || server HELLO), where label is
 *                     "nnlab-wire client" or "nnlab-wire server" after the sender's role, so a
 *                     proof cannot be reflected back to the side that made it.
 * Each side sends its HELLO, reads the peer's, sends its AUTH and reads the peer's; a first
 * frame that is not a HELLO of the right size, magic and version, or a second that is not an
 * AUTH with the right proof, ends the connection with NL_EAUTH. Nothing else is read before: a
 * header announcing more than a HELLO's (then an AUTH's) bytes is refused before its payload is
 * read, and the whole handshake has one deadline, so a peer that sends a byte now and then holds
 * it no longer than a silent one. The handshake also runs in steps (nl_wire_handshake_step), so
 * that a listener can take many connections at once and none of them waits for another. Both
 * sides must have the same plaintext bit (else NL_EAUTH, naming the option); the HELLOs are under
 * the proofs, so no one on the path can change the flags unseen.
 *
 * Sealed frames (every frame after the handshake unless both sides run plaintext):
 *   keys     HKDF-SHA256(ikm = the run secret, salt = client nonce || server nonce,
 *                        info = "nnlab-wire 3 c2s " or "nnlab-wire 3 s2c " || cipher name),
 *            32 bytes each: one key per connection and direction, fresh with every handshake.
 *   cipher   AES-256-GCM when both HELLOs have bit 1 (the CPU has AES instructions), else
 *            ChaCha20-Poly1305; 16-byte tags.
 *   nonce    12 bytes: part uint32 LE (0 header, 1 payload) || n uint64 LE, where n counts the
 *            frames sent in that direction since the handshake (0 first). Nothing of n travels:
 *            each side counts, so a frame replayed, reordered, dropped or injected is opened
 *            under the wrong nonce and fails. Errors say "frame n+1" (1 the first).
 *   layout   sealed header: the 12-byte header above with crc 0, encrypted (12) || tag (16);
 *            then the payload encrypted (len) || tag (16), with the header's 12 plaintext bytes
 *            as additional data. The receiver opens the header before it reads any payload byte,
 *            so type and length are authentic when they are checked against what is due.
 * A frame that fails to open ends the connection: NL_EAUTH "<peer>: frame N failed
 * authentication", and every later frame on it fails likewise.
 * Every frame's payload and when it is sent are tabled at the top of net/proto.h.
 * The same framing (without the handshake, which SSH stands in for) runs over a worker's stdin
 * and stdout; on pipes a write that has started may outlast the timeout. */
#include "nnlab/wire.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <openssl/evp.h>

#include "net/crypto.h"
#include "nnlab/alloc.h"
#include "nnlab/clock.h"

#define FLAG_PLAINTEXT 1u
#define FLAG_AES       2u
#define SEAL_CHUNK     (64u << 10) /* bytes sealed at a time by nl_wire_send */

/* One direction of a sealed connection: its cipher keyed once, and the frames so far. */
struct seal_dir {
    EVP_CIPHER_CTX *ctx;
    uint64_t n;
};

struct nl_seal {
    struct seal_dir tx, rx;
    unsigned char tx_h[NL_WIRE_HEADER], rx_h[NL_WIRE_HEADER]; /* the frames' plain headers */
    int broken; /* a frame failed to open: the connection is over */
};

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

static void seal_free(struct nl_seal *s)
{
    if (!s)
        return;
    EVP_CIPHER_CTX_free(s->tx.ctx);
    EVP_CIPHER_CTX_free(s->rx.ctx);
    nl_free(s);
}

void nl_conn_close(struct nl_conn *c)
{
    if (!c)
        return;
    if (c->fd > 0) {
        close(c->fd);
        c->fd = -1;
    }
    seal_free(c->seal);
    c->seal = NULL;
}

/* Whether this CPU has AES instructions (AES-GCM is then the faster AEAD). */
static int cpu_has_aes(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul");
#elif defined(__aarch64__)
    return 1; /* ARMv8 cores that run nnlab have the crypto extension, and OpenSSL checks */
#else
    return 0;
#endif
}

/* Keys c's two directions from the handshake (see the top of the file). */
int nl_wire_seal_start(struct nl_conn *c, enum nl_wire_role role, const void *secret,
                       size_t secret_len, const unsigned char client_nonce[NL_WIRE_NONCE],
                       const unsigned char server_nonce[NL_WIRE_NONCE], int aes,
                       struct nl_error *err)
{
    const EVP_CIPHER *cipher = aes ? EVP_aes_256_gcm() : EVP_chacha20_poly1305();
    const char *name = aes ? "aes-256-gcm" : "chacha20-poly1305";
    unsigned char salt[2 * NL_WIRE_NONCE], keys[2][32];
    char info[2][64];
    struct nl_seal *s = nl_calloc(1, sizeof *s);
    int ok = s != NULL;

    memcpy(salt, client_nonce, NL_WIRE_NONCE);
    memcpy(salt + NL_WIRE_NONCE, server_nonce, NL_WIRE_NONCE);
    for (int d = 0; ok && d < 2; d++) {
        int l =
            snprintf(info[d], sizeof info[d], "nnlab-wire 3 %s %s", d == 0 ? "c2s" : "s2c", name);
        ok = nl_hkdf_sha256(keys[d], sizeof keys[d], secret, secret_len, salt, sizeof salt, info[d],
                            (size_t)l) == 0;
    }
    /* The client sends with c2s and receives with s2c; the server the other way round. */
    const int tx = role == NL_WIRE_CLIENT ? 0 : 1;
    if (ok) {
        s->tx.ctx = EVP_CIPHER_CTX_new();
        s->rx.ctx = EVP_CIPHER_CTX_new();
        ok = s->tx.ctx && s->rx.ctx &&
             EVP_EncryptInit_ex(s->tx.ctx, cipher, NULL, keys[tx], NULL) == 1 &&
             EVP_DecryptInit_ex(s->rx.ctx, cipher, NULL, keys[1 - tx], NULL) == 1;
    }
    OPENSSL_cleanse(keys, sizeof keys);
    if (!ok) {
        seal_free(s);
        return nl_error_set(err, NL_EIO, "%s: handshake: cannot key the connection (libcrypto)",
                            c->peer);
    }
    seal_free(c->seal);
    c->seal = s;
    return 0;
}

static void nonce(unsigned char out[12], uint32_t part, uint64_t n)
{
    put32(out, part);
    put32(out + 4, (uint32_t)n);
    put32(out + 8, (uint32_t)(n >> 32));
}

size_t nl_wire_head_bytes(const struct nl_conn *c)
{
    return c->seal ? NL_WIRE_SEALED_HEADER : NL_WIRE_HEADER;
}

size_t nl_wire_tail_bytes(const struct nl_conn *c)
{
    return c->seal ? NL_WIRE_TAG : 0;
}

static int crypto_error(struct nl_conn *c, struct nl_error *err)
{
    return nl_error_set(err, NL_EIO, "%s: sealing a frame failed (libcrypto)", c->peer);
}

static int auth_error(struct nl_conn *c, struct nl_error *err)
{
    c->seal->broken = 1;
    return nl_error_set(err, NL_EAUTH, "%s: frame %llu failed authentication", c->peer,
                        (unsigned long long)c->seal->rx.n + 1);
}

/* Encrypts n bytes (in place allowed) under the tx cipher set up for the current part. */
static int seal_update(EVP_CIPHER_CTX *ctx, unsigned char *out, const unsigned char *in, size_t n)
{
    while (n > 0) {
        int l = n > SEAL_CHUNK ? (int)SEAL_CHUNK : (int)n, got;
        if (EVP_EncryptUpdate(ctx, out, &got, in, l) != 1 || got != l)
            return -1;
        out += l;
        in += l;
        n -= (size_t)l;
    }
    return 0;
}

static int open_update(EVP_CIPHER_CTX *ctx, unsigned char *out, const unsigned char *in, size_t n)
{
    while (n > 0) {
        int l = n > SEAL_CHUNK ? (int)SEAL_CHUNK : (int)n, got;
        if (EVP_DecryptUpdate(ctx, out, &got, in, l) != 1 || got != l)
            return -1;
        out += l;
        in += l;
        n -= (size_t)l;
    }
    return 0;
}

/* Starts the tx cipher on a part of the current frame, with aad (NULL: none). */
static int seal_begin(struct seal_dir *d, uint32_t part, const unsigned char *aad, int aadlen)
{
    unsigned char iv[12];
    int got;
    nonce(iv, part, d->n);
    return EVP_EncryptInit_ex(d->ctx, NULL, NULL, NULL, iv) == 1 &&
                   (!aad || EVP_EncryptUpdate(d->ctx, NULL, &got, aad, aadlen) == 1)
               ? 0
               : -1;
}

static int seal_end(struct seal_dir *d, unsigned char tag[NL_WIRE_TAG])
{
    unsigned char none[16];
    int got;
    return EVP_EncryptFinal_ex(d->ctx, none, &got) == 1 &&
                   EVP_CIPHER_CTX_ctrl(d->ctx, EVP_CTRL_AEAD_GET_TAG, NL_WIRE_TAG, tag) == 1
               ? 0
               : -1;
}

static int open_begin(struct seal_dir *d, uint32_t part, const unsigned char *aad, int aadlen)
{
    unsigned char iv[12];
    int got;
    nonce(iv, part, d->n);
    return EVP_DecryptInit_ex(d->ctx, NULL, NULL, NULL, iv) == 1 &&
                   (!aad || EVP_DecryptUpdate(d->ctx, NULL, &got, aad, aadlen) == 1)
               ? 0
               : -1;
}

/* 0 when the tag holds. */
static int open_end(struct seal_dir *d, const unsigned char tag[NL_WIRE_TAG])
{
    unsigned char none[16];
    int got;
    return EVP_CIPHER_CTX_ctrl(d->ctx, EVP_CTRL_AEAD_SET_TAG, NL_WIRE_TAG, (void *)tag) == 1 &&
                   EVP_DecryptFinal_ex(d->ctx, none, &got) == 1
               ? 0
               : -1;
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

int nl_wire_seal_head(struct nl_conn *c, unsigned char h[NL_WIRE_HEAD_MAX], uint32_t type,
                      const void *payload, uint32_t len, struct nl_error *err)
{
    struct nl_seal *s = c->seal;

    if (!s) {
        nl_wire_header(h, type, payload, len);
        return 0;
    }
    put32(s->tx_h, type);
    put32(s->tx_h + 4, len);
    put32(s->tx_h + 8, 0);
    if (seal_begin(&s->tx, 0, NULL, 0) < 0 ||
        seal_update(s->tx.ctx, h, s->tx_h, NL_WIRE_HEADER) < 0 ||
        seal_end(&s->tx, h + NL_WIRE_HEADER) < 0)
        return crypto_error(c, err);
    return 0;
}

int nl_wire_seal_payload(struct nl_conn *c, void *out, const void *in, uint32_t len,
                         unsigned char tag[NL_WIRE_TAG], struct nl_error *err)
{
    struct nl_seal *s = c->seal;

    if (!s)
        return nl_error_set(err, NL_EINVAL, "%s: sealing a frame on a plaintext connection",
                            c->peer);
    if (seal_begin(&s->tx, 1, s->tx_h, NL_WIRE_HEADER) < 0 ||
        seal_update(s->tx.ctx, out, in, len) < 0 || seal_end(&s->tx, tag) < 0)
        return crypto_error(c, err);
    s->tx.n++;
    return 0;
}

static int over_cap(struct nl_conn *c, uint32_t type, uint32_t len, uint32_t cap,
                    struct nl_error *err)
{
    return nl_error_set(err, NL_EFORMAT,
                        "%s: a frame of type %u claims %u bytes, over the %u expected", c->peer,
                        type, len, cap);
}

int nl_wire_open_head(struct nl_conn *c, const unsigned char *h, uint32_t *type, uint32_t *len,
                      uint32_t *crc, uint32_t max, struct nl_error *err)
{
    struct nl_seal *s = c->seal;

    if (!s) {
        if (nl_wire_parse_header(h, type, len, crc, max) < 0)
            return over_cap(c, *type, *len, max, err);
        return 0;
    }
    if (s->broken || open_begin(&s->rx, 0, NULL, 0) < 0 ||
        open_update(s->rx.ctx, s->rx_h, h, NL_WIRE_HEADER) < 0 ||
        open_end(&s->rx, h + NL_WIRE_HEADER) < 0)
        return auth_error(c, err);
    if (nl_wire_parse_header(s->rx_h, type, len, crc, max) < 0)
        return over_cap(c, *type, *len, max, err);
    return 0;
}

int nl_wire_open_payload(struct nl_conn *c, uint32_t type, void *buf, uint32_t len, uint32_t crc,
                         const unsigned char tag[NL_WIRE_TAG], struct nl_error *err)
{
    struct nl_seal *s = c->seal;

    if (!s) {
        if (!nl_wire_check(crc, type, buf, len))
            return nl_error_set(err, NL_EFORMAT,
                                "%s: a frame of type %u (%u bytes) fails its checksum", c->peer,
                                type, len);
        return 0;
    }
    if (s->broken || open_begin(&s->rx, 1, s->rx_h, NL_WIRE_HEADER) < 0 ||
        open_update(s->rx.ctx, buf, buf, len) < 0 || open_end(&s->rx, tag) < 0)
        return auth_error(c, err);
    s->rx.n++;
    return 0;
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
    unsigned char h[NL_WIRE_HEAD_MAX], tag[NL_WIRE_TAG];
    const size_t hb = nl_wire_head_bytes(c), tb = nl_wire_tail_bytes(c);
    int rc;

    if (len > NL_WIRE_MAX_PAYLOAD)
        return nl_error_set(err, NL_EINVAL, "%s: a frame of %u bytes is over the limit", c->peer,
                            len);
    rc = nl_wire_seal_head(c, h, type, payload, len, err);
    if (rc < 0)
        return rc;
    rc = nl_wire_write_all(c->fd, h, hb, c->timeout_ms);
    if (rc == 0 && len > 0 && !c->seal)
        rc = nl_wire_write_all(c->fd, payload, len, c->timeout_ms);
    if (rc == 0 && c->seal) {
        /* The payload sealed a chunk at a time: the cipher streams, the tag comes at the end. */
        struct nl_seal *s = c->seal;
        const unsigned char *p = payload;
        unsigned char *chunk = nl_malloc(len < SEAL_CHUNK ? len + 1 : SEAL_CHUNK);
        if (!chunk)
            return nl_error_set(err, NL_ENOMEM, "%s: out of memory for sealing a frame", c->peer);
        if (seal_begin(&s->tx, 1, s->tx_h, NL_WIRE_HEADER) < 0)
            rc = NL_EIO;
        for (uint32_t off = 0; rc == 0 && off < len;) {
            uint32_t n = len - off < SEAL_CHUNK ? len - off : SEAL_CHUNK;
            if (seal_update(s->tx.ctx, chunk, p + off, n) < 0)
                rc = NL_EIO;
            else
                rc = nl_wire_write_all(c->fd, chunk, n, c->timeout_ms);
            off += n;
        }
        nl_free(chunk);
        if (rc == 0 && seal_end(&s->tx, tag) < 0)
            rc = NL_EIO;
        if (rc == NL_EIO)
            return crypto_error(c, err);
        if (rc == 0)
            rc = nl_wire_write_all(c->fd, tag, tb, c->timeout_ms);
        s->tx.n++;
    }
    if (rc < 0)
        return io_error(c, rc, "sending", err);
    c->bytes_sent += hb + len + tb;
    return 0;
}

/* Reads a header and checks its length against cap. */
static int recv_header(struct nl_conn *c, uint32_t *type, uint32_t *len, uint32_t *crc,
                       uint32_t cap, struct nl_error *err)
{
    unsigned char h[NL_WIRE_HEAD_MAX];
    int rc = nl_wire_read_all(c->fd, h, nl_wire_head_bytes(c), c->timeout_ms);

    if (rc < 0)
        return io_error(c, rc, "receiving", err);
    return nl_wire_open_head(c, h, type, len, crc, cap, err);
}

static int recv_payload(struct nl_conn *c, uint32_t type, void *buf, uint32_t len, uint32_t crc,
                        struct nl_error *err)
{
    unsigned char tag[NL_WIRE_TAG];
    const size_t tb = nl_wire_tail_bytes(c);
    int rc = len > 0 ? nl_wire_read_all(c->fd, buf, len, c->timeout_ms) : 0;

    if (rc == 0 && tb > 0)
        rc = nl_wire_read_all(c->fd, tag, tb, c->timeout_ms);
    if (rc < 0)
        return io_error(c, rc, "receiving", err);
    rc = nl_wire_open_payload(c, type, buf, len, crc, tag, err);
    if (rc < 0)
        return rc;
    c->bytes_received += nl_wire_head_bytes(c) + len + tb;
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
                            const void *secret, size_t secret_len, unsigned opts, int32_t my_id,
                            struct nl_error *err)
{
    int rc;

    memset(hs, 0, sizeof *hs);
    hs->role = role;
    hs->secret = secret;
    hs->secret_len = secret_len;
    hs->opts = opts;
    if (secret_len < NL_WIRE_SECRET_MIN)
        return nl_error_set(err, NL_EINVAL, "%s: the run secret is shorter than %d bytes", c->peer,
                            NL_WIRE_SECRET_MIN);
    memcpy(hs->mine, magic, sizeof magic);
    put32(hs->mine + 8, NL_WIRE_VERSION);
    put32(hs->mine + 12, (uint32_t)my_id);
    put32(hs->mine + 16, (opts & NL_WIRE_PLAINTEXT ? FLAG_PLAINTEXT : 0) |
                             (!(opts & NL_WIRE_NO_AES) && cpu_has_aes() ? FLAG_AES : 0));
    rc = nl_wire_random(hs->mine + 20, NL_WIRE_NONCE, err);
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
        if ((get32(p + 16) ^ get32(hs->mine + 16)) & FLAG_PLAINTEXT)
            return nl_error_set(err, NL_EAUTH,
                                "%s: handshake: the peer %s --insecure-plaintext and this member "
                                "%s (give it to every member or to none)",
                                c->peer,
                                get32(p + 16) & FLAG_PLAINTEXT ? "runs with" : "runs without",
                                get32(p + 16) & FLAG_PLAINTEXT ? "does not" : "does");
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
        if (!(get32(hs->mine + 16) & FLAG_PLAINTEXT)) {
            const unsigned aes = get32(hs->mine + 16) & get32(hs->theirs + 16) & FLAG_AES;
            rc = nl_wire_seal_start(c, hs->role, hs->secret, hs->secret_len,
                                    (client ? hs->mine : hs->theirs) + 20,
                                    (client ? hs->theirs : hs->mine) + 20, aes != 0, err);
            if (rc < 0)
                return rc;
        }
        hs->stage = 2;
    }
    *peer_id = (int32_t)get32(hs->theirs + 12);
    return 1;
}

int nl_wire_handshake(struct nl_conn *c, enum nl_wire_role role, const void *secret,
                      size_t secret_len, unsigned opts, int32_t my_id, int32_t *peer_id,
                      struct nl_error *err)
{
    struct nl_wire_hs hs;
    const double deadline = 1e3 * nl_now() + c->timeout_ms;
    int rc = nl_wire_handshake_start(&hs, c, role, secret, secret_len, opts, my_id, err);

    while (rc == 0) {
        rc = nl_wire_handshake_step(&hs, c, peer_id, err);
        if (rc != 0)
            break;
        const double left = deadline - 1e3 * nl_now();
        rc = left > 0 ? wait_fd(c->fd, POLLIN, (int)left + 1) : NL_ETIMEDOUT;
        if (rc == NL_ETIMEDOUT)
            return nl_error_set(err, rc, "%s: handshake: no answer within %d ms", c->peer,
                                c->timeout_ms);
        if (rc < 0)
            return nl_error_set(err, rc, "%s: handshake: %s", c->peer, strerror(errno));
    }
    return rc < 0 ? rc : 0;
}
