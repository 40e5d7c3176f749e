/* libFuzzer target for the wire protocol's receiving side: the input, after a first byte that
 * picks the case, is what a peer sends on a connection (a socketpair whose far end is then shut
 * for writing). Cases (first byte modulo 7):
 *   0, 1  the handshake as server, as client (nl_wire_handshake, the peer's bytes all there);
 *   2, 3  frames read one after another with nl_wire_recv_alloc under a 4 KiB bound, and with
 *         nl_wire_recv into a fixed buffer;
 *   4     the handshake in steps (nl_wire_handshake_step, as a member's listener runs it): the
 *         second byte picks the role and seeds the sizes of the pieces the peer's bytes arrive
 *         in, one piece per step, so every way of stopping in a header or payload and going on
 *         is tried; once all is sent and the far end shut, a step must not ask for more;
 *   5     the handshake with a secret from the input: the second byte is its length (its low
 *         bit the role), those bytes the secret (short ones must be refused), the rest the
 *         peer's bytes;
 *   6     sealed frames (net/wire.c): the connection keyed as after a handshake on FUZZ_SECRET
 *         with the nonces SEAL_NONCE_C and SEAL_NONCE_S, the second byte's bit 0 picking
 *         AES-256-GCM (1) or ChaCha20-Poly1305, bit 1 this side's role (1: server); then frames
 *         as in case 2. Seeds in corpus/wire/sealed-*.bin hold frames sealed under those keys (a
 *         peer of the other role), so mutations reach past the first frame's authentication.
 * Any input must end in a clean error that says why (or, for frames, in frames within the
 * bound): never a crash, a leak, an allocation over the bound or a wait, as the peer's side is
 * closed. In cases 0, 1 and 4 the secret is fixed (FUZZ_SECRET), so a seed may carry a
 * well-formed AUTH; the local nonce is fresh on every run, so no input can pass the proof
 * itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/wire.h"

#define FUZZ_SECRET "nnlab-fuzz-secret-0123456789abcdef"
#define FRAME_MAX   4096
#define INPUT_MAX   65536 /* well under a socket's buffer, so that one write takes it all */

static const unsigned char SEAL_NONCE_C[NL_WIRE_NONCE] = "nnlab-fuzz client nonce 0123456",
                           SEAL_NONCE_S[NL_WIRE_NONCE] = "nnlab-fuzz server nonce 0123456";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes all of p to fd; 0 or -1. */
static int put_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void read_frames(struct nl_conn *c, int fixed)
{
    struct nl_error err = {0};
    unsigned char buf[256];
    uint32_t type, len;

    for (int i = 0; i < 64; i++) {
        if (fixed) {
            if (nl_wire_recv(c, &type, buf, sizeof buf, &len, &err) < 0)
                return;
            if (len > sizeof buf)
                abort(); /* a frame over the buffer was taken */
        } else {
            void *p = NULL;
            if (nl_wire_recv_alloc(c, &type, &p, &len, FRAME_MAX, &err) < 0) {
                if (p)
                    abort(); /* an error must leave nothing allocated */
                return;
            }
            if (len > FRAME_MAX)
                abort(); /* a frame over the bound was taken */
            nl_free(p);
        }
    }
}

/* Case 4: the handshake in steps, the peer's bytes arriving in pieces. */
static void stepwise(int sv[2], struct nl_conn *c, const uint8_t *data, size_t size)
{
    struct nl_error err = {0};
    struct nl_wire_hs hs;
    uint32_t x = size > 0 ? data[0] | 0x100u : 0x100u; /* xorshift state, never 0 */
    const enum nl_wire_role role = size > 0 && data[0] & 1 ? NL_WIRE_CLIENT : NL_WIRE_SERVER;
    size_t off = size > 0 ? 1 : 0;
    int32_t peer = -1;
    int rc;

    if (nl_wire_handshake_start(&hs, c, role, FUZZ_SECRET, strlen(FUZZ_SECRET), 0, 0, &err) < 0)
        abort(); /* sending a HELLO into an empty socket buffer cannot fail */
    for (;;) {
        rc = nl_wire_handshake_step(&hs, c, &peer, &err);
        if (rc != 0)
            break;
        if (off == size) {
            /* Everything is sent: the next step sees the end and must not wait for more. */
            shutdown(sv[1], SHUT_WR);
            rc = nl_wire_handshake_step(&hs, c, &peer, &err);
            if (rc == 0)
                abort();
            break;
        }
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        size_t piece = 1 + x % 24;
        if (piece > size - off)
            piece = size - off;
        if (put_all(sv[1], data + off, piece) != 0)
            abort();
        off += piece;
    }
    if (rc == 1) {
        /* (Not reached while no input can pass the proof.) The rest, then frames. */
        if (put_all(sv[1], data + off, size - off) != 0)
            abort();
        shutdown(sv[1], SHUT_WR);
        read_frames(c, 0);
    } else if (err.msg[0] == '\0')
        abort(); /* every failure says why */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct nl_error err = {0};
    struct nl_conn c;
    int sv[2];

    if (size < 1 || size > INPUT_MAX)
        return 0;
    const int mode = data[0] % 7;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        abort();
    int sndbuf = 2 * INPUT_MAX;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    nl_conn_init(&c, sv[0], "fuzz peer", 1000);
    if (mode == 4) {
        stepwise(sv, &c, data + 1, size - 1);
        nl_conn_close(&c);
        close(sv[1]);
        return 0;
    }
    if (mode == 6) {
        const int opt = size > 1 ? data[1] : 0;
        if (nl_wire_seal_start(&c, opt & 2 ? NL_WIRE_SERVER : NL_WIRE_CLIENT, FUZZ_SECRET,
                               strlen(FUZZ_SECRET), SEAL_NONCE_C, SEAL_NONCE_S, opt & 1, &err) < 0)
            abort();
        if (size > 2 && put_all(sv[1], data + 2, size - 2) != 0)
            abort();
        shutdown(sv[1], SHUT_WR);
        read_frames(&c, 0);
        nl_conn_close(&c);
        close(sv[1]);
        return 0;
    }
    const uint8_t *secret = (const uint8_t *)FUZZ_SECRET;
    size_t secret_len = strlen(FUZZ_SECRET), skip = 1;
    if (mode == 5) {
        secret_len = size > 1 ? data[1] : 0;
        if (secret_len > size - 2)
            secret_len = size > 2 ? size - 2 : 0;
        secret = size > 2 ? data + 2 : data;
        skip = 2 + secret_len;
        if (skip > size)
            skip = size;
    }
    if (put_all(sv[1], data + skip, size - skip) != 0)
        abort();
    /* The peer has said everything: reads end in EOF, never in a wait. Our own frames still go
     * out to sv[1], which stays open (no SIGPIPE). */
    shutdown(sv[1], SHUT_WR);

    if (mode < 2 || mode == 5) {
        int32_t peer = -1;
        const enum nl_wire_role role =
            mode == 0 || (mode == 5 && !(secret_len & 1)) ? NL_WIRE_SERVER : NL_WIRE_CLIENT;
        int rc = nl_wire_handshake(&c, role, secret, secret_len, 0, 0, &peer, &err);
        if (rc == 0)
            read_frames(&c, 0);
        else if (err.msg[0] == '\0')
            abort(); /* every failure says why */
        if (mode == 5 && secret_len < NL_WIRE_SECRET_MIN && rc != NL_EINVAL)
            abort(); /* a short secret is refused before anything is sent */
    } else {
        read_frames(&c, mode == 3);
    }
    nl_conn_close(&c);
    close(sv[1]);
    return 0;
}
