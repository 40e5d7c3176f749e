/* libFuzzer target for the wire protocol's receiving side: the input, after a first byte that
 * picks the case, is what a peer sends on a connection (a socketpair whose far end is then shut
 * for writing). Cases: the handshake as server, the handshake as client, and frames read one
 * after another with nl_wire_recv_alloc under a 4 KiB bound and with nl_wire_recv into a fixed
 * buffer. Any input must end in a clean error (or, for frames, in frames within the bound):
 * never a crash, a leak, an allocation over the bound or a wait, as the peer's side is closed.
 * The secret is fixed (FUZZ_SECRET), so a seed may carry a well-formed AUTH; the local nonce is
 * fresh on every run, so no input can pass the proof itself. */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct nl_error err = {0};
    struct nl_conn c;
    int sv[2];

    if (size < 1 || size > INPUT_MAX)
        return 0;
    const int mode = data[0] % 4;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        abort();
    int sndbuf = 2 * INPUT_MAX;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (put_all(sv[1], data + 1, size - 1) != 0)
        abort();
    /* The peer has said everything: reads end in EOF, never in a wait. Our own frames still go
     * out to sv[1], which stays open (no SIGPIPE). */
    shutdown(sv[1], SHUT_WR);
    nl_conn_init(&c, sv[0], "fuzz peer", 1000);

    if (mode < 2) {
        int32_t peer = -1;
        int rc = nl_wire_handshake(&c, mode == 0 ? NL_WIRE_SERVER : NL_WIRE_CLIENT, FUZZ_SECRET,
                                   strlen(FUZZ_SECRET), 0, &peer, &err);
        if (rc == 0)
            read_frames(&c, 0);
        else if (err.msg[0] == '\0')
            abort(); /* every failure says why */
    } else {
        read_frames(&c, mode == 3);
    }
    nl_conn_close(&c);
    close(sv[1]);
    return 0;
}
