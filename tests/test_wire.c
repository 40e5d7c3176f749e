/* The wire protocol: SHA-256 and HMAC-SHA256 against the FIPS 180-4 and RFC 4231 vectors, frame
 * round trips over socketpairs (also written a byte at a time), lengths refused before
 * allocation, checksums, timeouts, and the challenge-response with the right secret, a wrong
 * one, and a peer that does not speak the protocol. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "net/sha256.h"
#include "nnlab/alloc.h"
#include "nnlab/wire.h"
#include "tap.h"

static const char secret[] = "0123456789abcdef-run-secret";

static void hex(char *out, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

static void test_sha256(void)
{
    unsigned char d[NL_SHA256_SIZE];
    char h[2 * NL_SHA256_SIZE + 1];

    nl_sha256(d, "", 0);
    hex(h, d, sizeof d);
    is_str(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "sha256('')");
    nl_sha256(d, "abc", 3);
    hex(h, d, sizeof d);
    is_str(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "sha256(abc)");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    nl_sha256(d, two, strlen(two));
    hex(h, d, sizeof d);
    is_str(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
           "sha256 of the two-block message");

    /* A million 'a', fed in uneven pieces to exercise the partial-block path. */
    struct nl_sha256 s;
    char a[997];
    memset(a, 'a', sizeof a);
    nl_sha256_init(&s);
    size_t left = 1000000;
    for (size_t piece = 1; left > 0; piece = (piece + 13) % sizeof a + 1) {
        size_t n = piece < left ? piece : left;
        nl_sha256_update(&s, a, n);
        left -= n;
    }
    nl_sha256_final(&s, d);
    hex(h, d, sizeof d);
    is_str(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
           "sha256 of a million 'a' in pieces");

    unsigned char key[131];
    memset(key, 0x0b, 20);
    nl_hmac_sha256(d, key, 20, "Hi There", 8);
    hex(h, d, sizeof d);
    is_str(h, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
           "HMAC RFC 4231 case 1");
    const char *q = "what do ya want for nothing?";
    nl_hmac_sha256(d, "Jefe", 4, q, strlen(q));
    hex(h, d, sizeof d);
    is_str(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
           "HMAC RFC 4231 case 2");
    memset(key, 0xaa, sizeof key);
    const char *big = "Test Using Larger Than Block-Size Key - Hash Key First";
    nl_hmac_sha256(d, key, sizeof key, big, strlen(big));
    hex(h, d, sizeof d);
    is_str(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
           "HMAC RFC 4231 case 6 (key longer than a block)");
}

static void pair(struct nl_conn *a, struct nl_conn *b, int timeout_ms)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        abort();
    nl_conn_init(a, sv[0], "peer-a", timeout_ms);
    nl_conn_init(b, sv[1], "peer-b", timeout_ms);
}

static int wait_child(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_frames(void)
{
    struct nl_conn a, b;
    struct nl_error err = {0};
    uint32_t type, len;
    char buf[64];

    pair(&a, &b, 2000);
    ok(nl_wire_send(&a, 7, "hello", 5, &err) == 0, "send a small frame");
    ok(nl_wire_recv(&b, &type, buf, sizeof buf, &len, &err) == 0, "receive it");
    ok(type == 7 && len == 5 && memcmp(buf, "hello", 5) == 0, "type, length and payload intact");
    ok(nl_wire_send(&a, 9, NULL, 0, &err) == 0 &&
           nl_wire_recv(&b, &type, buf, sizeof buf, &len, &err) == 0 && type == 9 && len == 0,
       "an empty frame");
    is_int((long long)a.bytes_sent, 2 * NL_WIRE_HEADER + 5, "bytes_sent counts headers");
    is_int((long long)b.bytes_received, 2 * NL_WIRE_HEADER + 5, "bytes_received too");

    /* 4 MiB, more than a socket buffer: the writer is a child, the reader loops. */
    const uint32_t big = 4u << 20;
    unsigned char *p = nl_malloc(big), *q = NULL;
    for (uint32_t i = 0; i < big; i++)
        p[i] = (unsigned char)(i * 2654435761u >> 24);
    pid_t pid = fork();
    if (pid == 0) {
        nl_conn_close(&b);
        _exit(nl_wire_send(&a, NL_FRAME_GRAD, p, big, NULL) == 0 ? 0 : 1);
    }
    ok(nl_wire_recv_alloc(&b, &type, (void **)&q, &len, big, &err) == 0, "receive 4 MiB: %s",
       err.msg);
    ok(q && len == big && memcmp(p, q, big) == 0, "4 MiB arrive intact");
    is_int(wait_child(pid), 0, "the writer finished");
    nl_free(q);

    /* Written a byte at a time with pauses: partial reads are looped. */
    unsigned char frame[NL_WIRE_HEADER + 10];
    nl_wire_header(frame, 3, "0123456789", 10);
    memcpy(frame + NL_WIRE_HEADER, "0123456789", 10);
    pid = fork();
    if (pid == 0) {
        for (size_t i = 0; i < sizeof frame; i++) {
            struct timespec ts = {0, 2000000};
            nl_wire_write_all(a.fd, frame + i, 1, 1000);
            nanosleep(&ts, NULL);
        }
        _exit(0);
    }
    ok(nl_wire_recv(&b, &type, buf, sizeof buf, &len, &err) == 0 && len == 10 &&
           memcmp(buf, "0123456789", 10) == 0,
       "a frame trickled in byte by byte");
    wait_child(pid);

    /* A header that claims 1 GiB: refused before allocating or reading on. */
    unsigned char h[NL_WIRE_HEADER];
    nl_wire_header(h, 5, NULL, 0);
    h[4] = 0;
    h[5] = 0;
    h[6] = 0;
    h[7] = 0x40;
    nl_wire_write_all(a.fd, h, sizeof h, 1000);
    uint64_t allocs = nl_alloc_count();
    void *none = NULL;
    is_int(nl_wire_recv_alloc(&b, &type, &none, &len, 1u << 20, &err), NL_EFORMAT,
           "an oversized length is refused");
    ok(nl_alloc_count() == allocs && none == NULL, "nothing allocated for it");
    like(err.msg, "over the", "the message says the length is over the bound: %s", err.msg);
    nl_conn_close(&a);
    nl_conn_close(&b);

    /* A flipped payload bit fails the checksum. */
    pair(&a, &b, 2000);
    frame[NL_WIRE_HEADER + 3] ^= 1;
    nl_wire_write_all(a.fd, frame, sizeof frame, 1000);
    is_int(nl_wire_recv(&b, &type, buf, sizeof buf, &len, &err), NL_EFORMAT,
           "a corrupted payload is refused");
    like(err.msg, "checksum", "the message names the checksum: %s", err.msg);

    /* Nothing arrives: the wait ends at the timeout. */
    b.timeout_ms = 100;
    is_int(nl_wire_recv(&b, &type, buf, sizeof buf, &len, &err), NL_ETIMEDOUT,
           "a silent peer times out");
    like(err.msg, "peer-b: receiving: no answer within 100 ms", "the message: %s", err.msg);
    nl_conn_close(&a);
    is_int(nl_wire_recv(&b, &type, buf, sizeof buf, &len, &err), NL_ENET,
           "a closed peer ends the read");
    like(err.msg, "closed the connection", "the message: %s", err.msg);
    nl_conn_close(&b);
    nl_free(p);
}

/* Runs the server side of a handshake in a child with the given secret (NULL: sends raw bytes
 * instead) and the client in this process; returns the client's result. */
static int handshake(const char *server_secret, const char *raw, int32_t *peer_id,
                     struct nl_error *err)
{
    struct nl_conn a, b;
    pair(&a, &b, 2000);
    pid_t pid = fork();
    if (pid == 0) {
        int32_t id;
        nl_conn_close(&a);
        if (raw) {
            nl_wire_write_all(b.fd, raw, strlen(raw), 1000);
            char sink[256];
            while (read(b.fd, sink, sizeof sink) > 0)
                ;
            _exit(0);
        }
        int rc = nl_wire_handshake(&b, NL_WIRE_SERVER, server_secret, strlen(server_secret), 42,
                                   &id, NULL);
        _exit(rc == 0 && id == 7 ? 0 : 1);
    }
    nl_conn_close(&b);
    int rc = nl_wire_handshake(&a, NL_WIRE_CLIENT, secret, strlen(secret), 7, peer_id, err);
    nl_conn_close(&a);
    int status = wait_child(pid);
    if (!raw && (rc == 0) != (status == 0))
        diag("client and server disagree: %d, %d", rc, status);
    return rc;
}

static void test_handshake(void)
{
    struct nl_error err = {0};
    int32_t id = -1;

    is_int(handshake(secret, NULL, &id, &err), 0, "the same secret passes: %s", err.msg);
    is_int(id, 42, "the peer's id comes through");
    is_int(handshake("0123456789abcdef-other-secret", NULL, &id, &err), NL_EAUTH,
           "a different secret is refused");
    like(err.msg, "failed the challenge-response", "the message: %s", err.msg);
    like(err.msg, "peer-a", "it names the peer: %s", err.msg);
    is_int(handshake(NULL, "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\nsome more bytes\r\n", &id, &err),
           NL_EAUTH, "a peer that does not speak the protocol is refused");
    like(err.msg, "does not speak nnlab's wire protocol", "the message: %s", err.msg);
    struct nl_conn a, b;
    pair(&a, &b, 100);
    is_int(nl_wire_handshake(&a, NL_WIRE_CLIENT, "short", 5, 0, &id, &err), NL_EINVAL,
           "a short secret is refused");
    nl_conn_close(&a);
    nl_conn_close(&b);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_sha256();
    test_frames();
    test_handshake();
    return done_testing();
}
