/* The wire protocol: SHA-256, HMAC-SHA256 and HKDF against the FIPS 180-4, RFC 4231 and RFC 5869
 * vectors; sealed frames (both ciphers) carried through a relay that alters, replays, reorders,
 * injects, truncates and reflects them, and keys that differ at either end, each ending in a
 * named error; the handshake's plaintext option on both sides, on one side only; the mesh and
 * the sliced allreduce through a recording relay (no frame of a sealed run parses as plaintext,
 * where a plaintext run's do; a byte flipped on the way ends the exchange, naming the member and
 * the frame); frame
 * round trips over socketpairs (also written a byte at a time), lengths refused before
 * allocation, checksums, timeouts, and the challenge-response with the right secret, a wrong
 * one, a peer that does not speak the protocol, one that says HELLO and stalls, and one that
 * drips. Then the mesh of two members (threads of this process) formed while its port is under
 * attack: silent and half-open connections, a valid HELLO that stalls, absurd lengths, a
 * connection closed at once, a slow drip, and a hundred connections at once; it forms within a
 * few seconds of a 30 s timeout, the attackers are closed, a connection made after the mesh is
 * formed is closed by the guard, and a second mesh forms on the same listening sockets. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "net/crypto.h"
#include "net/proto.h"
#include "nnlab/alloc.h"
#include "nnlab/allreduce.h"
#include "nnlab/mesh.h"
#include "nnlab/wire.h"
#include "tap.h"
#include "test_util.h"

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

    /* A million 'a': more than any buffer of a one-block implementation. */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    nl_sha256_hex(h, a, 1000000);
    free(a);
    is_str(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
           "sha256 of a million 'a'");

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

    /* HKDF, RFC 5869 test case 1. */
    unsigned char ikm[22], salt[13], info[10], okm[42];
    char okm_hex[2 * sizeof okm + 1];
    memset(ikm, 0x0b, sizeof ikm);
    for (int i = 0; i < 13; i++)
        salt[i] = (unsigned char)i;
    for (int i = 0; i < 10; i++)
        info[i] = (unsigned char)(0xf0 + i);
    ok(nl_hkdf_sha256(okm, sizeof okm, ikm, sizeof ikm, salt, sizeof salt, info, sizeof info) == 0,
       "HKDF derives");
    hex(okm_hex, okm, sizeof okm);
    is_str(okm_hex,
           "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
           "HKDF-SHA256 RFC 5869 case 1");
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
        int rc = nl_wire_handshake(&b, NL_WIRE_SERVER, server_secret, strlen(server_secret), 0, 42,
                                   &id, NULL);
        _exit(rc == 0 && id == 7 ? 0 : 1);
    }
    nl_conn_close(&b);
    int rc = nl_wire_handshake(&a, NL_WIRE_CLIENT, secret, strlen(secret), 0, 7, peer_id, err);
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
    is_int(nl_wire_handshake(&a, NL_WIRE_CLIENT, "short", 5, 0, 0, &id, &err), NL_EINVAL,
           "a short secret is refused");
    nl_conn_close(&a);
    nl_conn_close(&b);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A valid HELLO frame claiming member id, as an attacker without the secret can make one. */
static void hello_frame(unsigned char f[NL_WIRE_HEADER + NL_WIRE_HELLO], int32_t id)
{
    unsigned char *p = f + NL_WIRE_HEADER;
    memset(p, 0, NL_WIRE_HELLO);
    memcpy(p, "NNLABWIR", 8);
    p[8] = NL_WIRE_VERSION;
    p[12] = (unsigned char)id;
    nl_wire_header(f, NL_FRAME_HELLO, p, NL_WIRE_HELLO);
}

/* 1 when the peer ends the connection (EOF or reset) within ms, reading away what it sends. */
static int closed_within(int fd, int ms)
{
    const double end = now_s() + ms / 1e3;
    char sink[256];
    for (;;) {
        const int left = (int)((end - now_s()) * 1e3);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return 0;
        ssize_t r = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            return 1;
    }
}

static void test_handshake_stalls(void)
{
    struct nl_conn a, b;
    struct nl_error err = {0};
    unsigned char f[NL_WIRE_HEADER + NL_WIRE_HELLO];
    int32_t id;

    /* A valid HELLO, then nothing: the handshake ends at its deadline. */
    pair(&a, &b, 300);
    hello_frame(f, 1);
    nl_wire_write_all(b.fd, f, sizeof f, 1000);
    double t0 = now_s();
    is_int(nl_wire_handshake(&a, NL_WIRE_SERVER, secret, strlen(secret), 0, 0, &id, &err),
           NL_ETIMEDOUT, "a peer that says HELLO and stalls times out");
    like(err.msg, "peer-a: handshake: no answer within 300 ms", "the message: %s", err.msg);
    nl_conn_close(&a);
    nl_conn_close(&b);

    /* A byte every 50 ms: the whole handshake has one deadline, not each wait. */
    pair(&a, &b, 400);
    pid_t pid = fork();
    if (pid == 0) {
        nl_conn_close(&a);
        for (size_t i = 0; i < sizeof f; i++) {
            struct timespec ts = {0, 50000000};
            if (nl_wire_write_all(b.fd, f + i, 1, 1000) < 0)
                break;
            nanosleep(&ts, NULL);
        }
        _exit(0);
    }
    nl_conn_close(&b);
    t0 = now_s();
    is_int(nl_wire_handshake(&a, NL_WIRE_SERVER, secret, strlen(secret), 0, 0, &id, &err),
           NL_ETIMEDOUT, "a peer that drips a byte every 50 ms times out");
    const double took = now_s() - t0;
    ok(took < 2.0,
       "at the handshake's deadline (%.2f s for 400 ms), not after the %.1f s the "
       "drip would take",
       took, sizeof f * 0.05);
    nl_conn_close(&a);
    wait_child(pid);

    /* A HELLO header announcing 4 GiB: refused at once, nothing more read. */
    pair(&a, &b, 2000);
    nl_wire_header(f, NL_FRAME_HELLO, NULL, 0);
    memset(f + 4, 0xff, 4);
    nl_wire_write_all(b.fd, f, NL_WIRE_HEADER, 1000);
    is_int(nl_wire_handshake(&a, NL_WIRE_SERVER, secret, strlen(secret), 0, 0, &id, &err), NL_EAUTH,
           "a HELLO of 0xffffffff bytes is refused");
    like(err.msg, "does not speak nnlab's wire protocol", "the message: %s", err.msg);
    nl_conn_close(&a);
    nl_conn_close(&b);
}

enum { MESH_TIMEOUT_MS = 30000, FLOOD = 100 };

struct member_run {
    int rank, fd;
    struct nl_member *members;
    struct nl_mesh *mesh;
    int rc;
    double seconds;
    struct nl_error err;
};

static void *member_main(void *arg)
{
    struct member_run *r = arg;
    const double t0 = now_s();
    r->rc = nl_mesh_connect(&r->mesh, r->rank, 2, r->fd, r->members, secret, strlen(secret),
                            MESH_TIMEOUT_MS, &r->err);
    r->seconds = now_s() - t0;
    return NULL;
}

/* A TCP connection to 127.0.0.1:port, not waiting for the connect to complete; -1 on failure. */
static int knock(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Writes n bytes to a socket that may still be connecting. */
static int put(int fd, const void *p, size_t n)
{
    struct pollfd pf = {.fd = fd, .events = POLLOUT};
    if (poll(&pf, 1, 5000) != 1)
        return -1;
    return send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

struct drip {
    int fd;
    volatile int stop;
    int refused; /* 1 once a write failed: the member closed the connection */
};

static void *drip_main(void *arg)
{
    struct drip *d = arg;
    unsigned char f[NL_WIRE_HEADER + NL_WIRE_HELLO];
    hello_frame(f, 1);
    for (size_t i = 0; !d->stop; i = (i + 1) % sizeof f) {
        if (put(d->fd, f + i, 1) < 0) {
            d->refused = 1;
            break;
        }
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Forms the mesh of members with both threads; 1 when both succeed. */
static int form(struct member_run run[2], struct nl_member *members, const int fds[2])
{
    pthread_t t[2];
    for (int r = 0; r < 2; r++) {
        run[r] = (struct member_run){.rank = r, .fd = fds[r], .members = members};
        pthread_create(&t[r], NULL, member_main, &run[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(t[r], NULL);
    for (int r = 0; r < 2; r++)
        if (run[r].rc != 0)
            diag("member %d: %s", r, run[r].err.msg);
    return run[0].rc == 0 && run[1].rc == 0;
}

static void test_mesh_under_attack(void)
{
    struct nl_member members[2] = {{"node1", "127.0.0.1", 0}, {"node2", "127.0.0.1", 0}};
    struct nl_error err = {0};
    struct member_run run[2];
    int fds[2];

    for (int r = 0; r < 2; r++)
        if (nl_net_listen(&fds[r], "127.0.0.1", 0, 0, &members[r].port, &err) < 0)
            abort();
    /* Everything that waits at member 0's port before the mesh forms. */
    enum { SILENT, HALF_OPEN, HELLO_STALL, ABSURD, ABSURD2, GARBAGE, NKNOCK };
    int k[NKNOCK];
    unsigned char f[NL_WIRE_HEADER + NL_WIRE_HELLO];
    for (int i = 0; i < NKNOCK; i++)
        k[i] = knock(members[0].port);
    shutdown(k[HALF_OPEN], SHUT_WR);
    hello_frame(f, 1);
    put(k[HELLO_STALL], f, sizeof f);
    nl_wire_header(f, NL_FRAME_HELLO, NULL, 0);
    memset(f + 4, 0xff, 4);
    put(k[ABSURD], f, NL_WIRE_HEADER);
    const uint32_t big = (1u << 30) + 1;
    memcpy(f + 4, &big, 4); /* little-endian on the machines this runs on */
    put(k[ABSURD2], f, NL_WIRE_HEADER);
    put(k[GARBAGE], "GET / HTTP/1.0\r\n\r\n", 18);
    int gone = knock(members[0].port);
    put(gone, "x", 1);
    close(gone);
    struct drip d = {.fd = knock(members[0].port)};
    pthread_t dt;
    pthread_create(&dt, NULL, drip_main, &d);
    int flood[FLOOD];
    for (int i = 0; i < FLOOD; i++)
        flood[i] = knock(members[0].port);

    ok(form(run, members, fds), "the mesh forms with its port under attack");
    const double slowest = run[0].seconds > run[1].seconds ? run[0].seconds : run[1].seconds;
    ok(slowest < 10.0,
       "within %.2f s, where each silent connection could once hold it for the "
       "whole %d ms timeout",
       slowest, MESH_TIMEOUT_MS);
    ok(run[0].mesh && run[0].mesh->peers[1].fd >= 0 && run[1].mesh && run[1].mesh->peers[0].fd >= 0,
       "each member holds a connection to the other");
    ok(closed_within(k[ABSURD], 5000), "the HELLO announcing 0xffffffff bytes was closed");
    ok(closed_within(k[ABSURD2], 5000), "the HELLO announcing 2^30+1 bytes was closed");
    ok(closed_within(k[GARBAGE], 5000), "the garbage was closed");
    ok(closed_within(k[HELLO_STALL], 5000), "the valid HELLO that stalled was closed");
    ok(closed_within(k[SILENT], 5000), "the silent connection was closed");
    ok(closed_within(k[HALF_OPEN], 5000), "the half-open connection was closed");
    for (int i = 0; i < 60 && !d.refused; i++) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
    d.stop = 1;
    pthread_join(dt, NULL);
    ok(d.refused, "the slow drip was closed");
    int flood_closed = 0;
    for (int i = 0; i < FLOOD; i++)
        flood_closed += closed_within(flood[i], 5000);
    is_int(flood_closed, FLOOD, "all %d connections of the flood were closed", FLOOD);

    /* The mesh works: a frame each way. */
    uint32_t type, len;
    char buf[16];
    ok(nl_wire_send(&run[1].mesh->peers[0], NL_FRAME_GRAD, "up", 2, &err) == 0 &&
           nl_wire_recv(&run[0].mesh->peers[1], &type, buf, sizeof buf, &len, &err) == 0 &&
           len == 2 && memcmp(buf, "up", 2) == 0,
       "frames pass between the members: %s", err.msg);

    /* After the mesh formed, whoever connects to either port is closed, not queued. */
    for (int r = 0; r < 2; r++) {
        int late = knock(members[r].port);
        put(late, "late junk", 9);
        ok(closed_within(late, 5000), "a connection to member %d after the mesh formed is closed",
           r);
        close(late);
    }

    /* The same listening sockets take a second mesh (the guards step aside), junk queued. */
    struct member_run again[2];
    int junk = knock(members[0].port);
    ok(form(again, members, fds), "a second mesh forms on the same listening sockets");
    nl_mesh_free(again[0].mesh);
    nl_mesh_free(again[1].mesh);
    close(junk);

    nl_mesh_free(run[0].mesh);
    nl_mesh_free(run[1].mesh);
    for (int i = 0; i < NKNOCK; i++)
        close(k[i]);
    for (int i = 0; i < FLOOD; i++)
        close(flood[i]);
    close(d.fd);
    close(fds[0]);
    close(fds[1]);
}

/* A sealed link through a relay this test controls: a (client) writes into ra, whose bytes the
 * test reads and passes on (or not) into rb, which b (server) reads; and b -> a likewise. */
struct link {
    struct nl_conn a, ra, rb, b;
};

/* Whether text occurs in the n bytes at p. */
static int contains(const unsigned char *p, size_t n, const char *text)
{
    const size_t t = strlen(text);
    for (size_t i = 0; i + t <= n; i++)
        if (memcmp(p + i, text, t) == 0)
            return 1;
    return 0;
}

static void bail(const char *what, const struct nl_error *err)
{
    printf("Bail out! %s: %s\n", what, err->msg);
    exit(1);
}

static const unsigned char nonce_c[NL_WIRE_NONCE] = {1, 2, 3}, nonce_s[NL_WIRE_NONCE] = {4, 5, 6};

static void link_open(struct link *l, int aes_a, int aes_b, const char *secret_b)
{
    struct nl_error err = {0};
    pair(&l->a, &l->ra, 2000);
    pair(&l->rb, &l->b, 300);
    snprintf(l->b.peer, sizeof l->b.peer, "node1 (127.0.0.1:5001)");
    if (nl_wire_seal_start(&l->a, NL_WIRE_CLIENT, secret, strlen(secret), nonce_c, nonce_s, aes_a,
                           &err) < 0 ||
        nl_wire_seal_start(&l->b, NL_WIRE_SERVER, secret_b, strlen(secret_b), nonce_c, nonce_s,
                           aes_b, &err) < 0)
        bail("sealing a link", &err);
}

static void link_close(struct link *l)
{
    nl_conn_close(&l->a);
    nl_conn_close(&l->ra);
    nl_conn_close(&l->rb);
    nl_conn_close(&l->b);
}

/* Sends a frame from a and takes its bytes off the relay into out (its size returned). */
static size_t send_capture(struct link *l, uint32_t type, const char *payload, unsigned char *out)
{
    struct nl_error err = {0};
    const size_t n = NL_WIRE_SEALED_HEADER + strlen(payload) + NL_WIRE_TAG;
    if (nl_wire_send(&l->a, type, payload, (uint32_t)strlen(payload), &err) < 0 ||
        nl_wire_read_all(l->ra.fd, out, n, 1000) < 0)
        bail("sending through the relay", &err);
    return n;
}

static void deliver(struct link *l, const unsigned char *p, size_t n)
{
    nl_wire_write_all(l->rb.fd, p, n, 1000);
}

/* b receives one frame: its result, the message in err. */
static int recv_b(struct link *l, char *buf, uint32_t *len, struct nl_error *err)
{
    uint32_t type;
    err->msg[0] = '\0';
    return nl_wire_recv(&l->b, &type, buf, 256, len, err);
}

static void test_sealed_cipher(int aes)
{
    const char *name = aes ? "AES-256-GCM" : "ChaCha20-Poly1305";
    const char *msg = "gradient slice 0123456789";
    unsigned char f1[256], f2[256], g[256];
    struct nl_error err = {0};
    struct link l;
    char buf[256];
    uint32_t len;

    /* Intact, and nothing of it readable on the way. */
    link_open(&l, aes, aes, secret);
    size_t n = send_capture(&l, NL_FRAME_GRAD, msg, f1);
    unsigned char plain_h[NL_WIRE_HEADER];
    nl_wire_header(plain_h, NL_FRAME_GRAD, msg, (uint32_t)strlen(msg));
    ok(!contains(f1, n, "gradient") && memcmp(f1, plain_h, 8) != 0,
       "%s: neither payload nor header travel in clear", name);
    deliver(&l, f1, n);
    ok(recv_b(&l, buf, &len, &err) == 0 && len == strlen(msg) && memcmp(buf, msg, len) == 0,
       "%s: a sealed frame arrives intact: %s", name, err.msg);
    is_int((long long)l.b.bytes_received, (long long)n, "%s: bytes_received counts the seal", name);
    /* b answers a; the directions have their own keys and counts. */
    ok(nl_wire_send(&l.b, NL_FRAME_PARAM, "back", 4, &err) == 0, "%s: b answers", name);
    n = NL_WIRE_SEALED_HEADER + 4 + NL_WIRE_TAG;
    nl_wire_read_all(l.rb.fd, g, n, 1000);
    nl_wire_write_all(l.ra.fd, g, n, 1000);
    uint32_t type;
    ok(nl_wire_recv(&l.a, &type, buf, sizeof buf, &len, &err) == 0 && type == NL_FRAME_PARAM &&
           len == 4 && memcmp(buf, "back", 4) == 0,
       "%s: and a reads the answer: %s", name, err.msg);
    /* An empty frame and one longer than a sealing chunk (the cipher streams). */
    const uint32_t big = 200000;
    unsigned char *p = nl_malloc(big), *q = NULL;
    for (uint32_t i = 0; i < big; i++)
        p[i] = (unsigned char)(i * 2654435761u >> 24);
    pid_t pid = fork();
    if (pid == 0) {
        struct nl_error e2 = {0};
        _exit(nl_wire_send(&l.a, NL_FRAME_STATE, NULL, 0, &e2) == 0 &&
                      nl_wire_send(&l.a, NL_FRAME_STATE, p, big, &e2) == 0
                  ? 0
                  : 1);
    }
    /* The relay (another child) passes it on as it comes. */
    const size_t total = 2 * (NL_WIRE_SEALED_HEADER + NL_WIRE_TAG) + big;
    pid_t relay = fork();
    if (relay == 0) {
        unsigned char chunk[4096];
        for (size_t moved = 0; moved < total;) {
            size_t k = total - moved < sizeof chunk ? total - moved : sizeof chunk;
            if (nl_wire_read_all(l.ra.fd, chunk, k, 2000) < 0 ||
                nl_wire_write_all(l.rb.fd, chunk, k, 2000) < 0)
                _exit(1);
            moved += k;
        }
        _exit(0);
    }
    l.b.timeout_ms = 2000;
    ok(nl_wire_recv(&l.b, &type, buf, sizeof buf, &len, &err) == 0 && len == 0,
       "%s: an empty sealed frame", name);
    ok(nl_wire_recv_alloc(&l.b, &type, (void **)&q, &len, big, &err) == 0 && len == big &&
           memcmp(p, q, big) == 0,
       "%s: 200 kB sealed in chunks arrive intact: %s", name, err.msg);
    is_int(wait_child(pid), 0, "%s: the writer finished", name);
    is_int(wait_child(relay), 0, "%s: the relay finished", name);
    nl_free(p);
    nl_free(q);
    link_close(&l);

    /* A byte altered anywhere: in the sealed header, the payload, the tag. */
    const size_t where[3] = {2, NL_WIRE_SEALED_HEADER + 3,
                             NL_WIRE_SEALED_HEADER + strlen(msg) + NL_WIRE_TAG - 1};
    const char *part[3] = {"header", "payload", "tag"};
    for (int i = 0; i < 3; i++) {
        link_open(&l, aes, aes, secret);
        n = send_capture(&l, NL_FRAME_GRAD, msg, f1);
        f1[where[i]] ^= 0x01;
        deliver(&l, f1, n);
        is_int(recv_b(&l, buf, &len, &err), NL_EAUTH, "%s: a flipped bit in the %s is refused",
               name, part[i]);
        is_str(err.msg, "node1 (127.0.0.1:5001): frame 1 failed authentication",
               "%s: the error names the peer and the frame", name);
        /* The connection is over: an intact frame after it fails too. */
        n = send_capture(&l, NL_FRAME_GRAD, msg, f2);
        deliver(&l, f2, n);
        is_int(recv_b(&l, buf, &len, &err), NL_EAUTH, "%s: nothing is read after it (%s)", name,
               part[i]);
        link_close(&l);
    }

    /* Replayed. */
    link_open(&l, aes, aes, secret);
    n = send_capture(&l, NL_FRAME_GRAD, msg, f1);
    deliver(&l, f1, n);
    deliver(&l, f1, n);
    ok(recv_b(&l, buf, &len, &err) == 0, "%s: the frame once", name);
    is_int(recv_b(&l, buf, &len, &err), NL_EAUTH, "%s: a replayed frame is refused", name);
    like(err.msg, "frame 2 failed authentication", "%s: %s", name, err.msg);
    link_close(&l);

    /* Reordered. */
    link_open(&l, aes, aes, secret);
    size_t n1 = send_capture(&l, NL_FRAME_GRAD, msg, f1);
    size_t n2 = send_capture(&l, NL_FRAME_PARAM, "second frame", f2);
    deliver(&l, f2, n2);
    deliver(&l, f1, n1);
    is_int(recv_b(&l, buf, &len, &err), NL_EAUTH, "%s: frames swapped on the way are refused",
           name);
    like(err.msg, "frame 1 failed authentication", "%s: %s", name, err.msg);
    link_close(&l);

    /* Dropped: the next frame comes under the wrong count. */
    link_open(&l, aes, aes, secret);
    send_capture(&l, NL_FRAME_GRAD, msg, f1);
    n2 = send_capture(&l, NL_FRAME_PARAM, "second frame", f2);
    deliver(&l, f2, n2);
    is_int(recv_b(&l, buf, &len, &err), NL_EAUTH, "%s: a frame after a dropped one is refused",
           name);
    link_close(&l);

    /* Injected: a well-formed plaintext frame of the same size, and a sealed one under another
     * run's secret. */
    link_open(&l, aes, aes, secret);
    const size_t inj_len = strlen(msg) + NL_WIRE_SEALED_HEADER + NL_WIRE_TAG - NL_WIRE_HEADER;
    memset(g, 'x', sizeof g);
    nl_wire_header(g, NL_FRAME_GRAD, g + NL_WIRE_HEADER, (uint32_t)inj_len);
    deliver(&l, g, NL_WIRE_HEADER + inj_len);
    is_int(recv_b(&l, buf, &len, &err), NL_EAUTH, "%s: an injected plaintext frame is refused",
           name);
    link_close(&l);
    link_open(&l, aes, aes, "another run's secret, 0123456789");
    n = send_capture(&l, NL_FRAME_GRAD, msg, f1);
    deliver(&l, f1, n);
    is_int(recv_b(&l, buf, &len, &err), NL_EAUTH,
           "%s: b keyed from another secret refuses a's frame", name);
    like(err.msg, "node1 (127.0.0.1:5001): frame 1 failed authentication", "%s: %s", name, err.msg);
    /* And the other end: a refuses what b seals under its wrong key. */
    ok(nl_wire_send(&l.b, NL_FRAME_PARAM, "back", 4, &err) == 0, "%s: b sends back", name);
    n = NL_WIRE_SEALED_HEADER + 4 + NL_WIRE_TAG;
    nl_wire_read_all(l.rb.fd, g, n, 1000);
    nl_wire_write_all(l.ra.fd, g, n, 1000);
    l.a.timeout_ms = 300;
    is_int(nl_wire_recv(&l.a, &type, buf, sizeof buf, &len, &err), NL_EAUTH,
           "%s: a refuses b's frame under the wrong key", name);
    like(err.msg, "peer-a: frame 1 failed authentication", "%s: %s", name, err.msg);
    link_close(&l);

    /* Reflected: a's own frame sent back to it (the directions' keys differ). */
    link_open(&l, aes, aes, secret);
    n = send_capture(&l, NL_FRAME_GRAD, msg, f1);
    nl_wire_write_all(l.ra.fd, f1, n, 1000);
    l.a.timeout_ms = 300;
    is_int(nl_wire_recv(&l.a, &type, buf, sizeof buf, &len, &err), NL_EAUTH,
           "%s: a frame reflected to its sender is refused", name);
    link_close(&l);

    /* Truncated: the relay passes part of a frame, then closes. */
    link_open(&l, aes, aes, secret);
    n = send_capture(&l, NL_FRAME_GRAD, msg, f1);
    deliver(&l, f1, n - 5);
    nl_conn_close(&l.rb);
    is_int(recv_b(&l, buf, &len, &err), NL_ENET, "%s: a truncated frame ends the read", name);
    like(err.msg, "closed the connection", "%s: %s", name, err.msg);
    link_close(&l);
}

static void test_sealed(void)
{
    test_sealed_cipher(1);
    test_sealed_cipher(0);

    /* The two ends disagree on the cipher: nothing opens. */
    struct link l;
    struct nl_error err = {0};
    unsigned char f[256];
    char buf[256];
    uint32_t len;
    link_open(&l, 1, 0, secret);
    size_t n = send_capture(&l, NL_FRAME_GRAD, "abc", f);
    deliver(&l, f, n);
    is_int(recv_b(&l, buf, &len, &err), NL_EAUTH, "AES-GCM frames do not open under ChaCha20");
    link_close(&l);
}

/* The handshake's plaintext option, each side's, on a socketpair (the server a thread). */
struct hs_side {
    struct nl_conn c;
    unsigned opts;
    int rc;
    struct nl_error err;
};

static void *hs_server(void *arg)
{
    struct hs_side *s = arg;
    int32_t id;
    s->rc =
        nl_wire_handshake(&s->c, NL_WIRE_SERVER, secret, strlen(secret), s->opts, 1, &id, &s->err);
    return NULL;
}

static int handshake_opts(unsigned client_opts, unsigned server_opts, struct hs_side *cl,
                          struct hs_side *sv)
{
    pthread_t t;
    int32_t id;
    memset(cl, 0, sizeof *cl);
    memset(sv, 0, sizeof *sv);
    pair(&cl->c, &sv->c, 2000);
    cl->opts = client_opts;
    sv->opts = server_opts;
    pthread_create(&t, NULL, hs_server, sv);
    cl->rc = nl_wire_handshake(&cl->c, NL_WIRE_CLIENT, secret, strlen(secret), client_opts, 0, &id,
                               &cl->err);
    pthread_join(t, NULL);
    return cl->rc;
}

static void test_handshake_opts(void)
{
    struct hs_side cl, sv;
    struct nl_error err = {0};
    uint32_t type, len;
    char buf[64];

    const unsigned both[3][2] = {
        {0, 0}, {NL_WIRE_NO_AES, 0}, {NL_WIRE_PLAINTEXT, NL_WIRE_PLAINTEXT}};
    const char *what[3] = {"sealed", "sealed, one side without AES (ChaCha20)", "plaintext"};
    for (int i = 0; i < 3; i++) {
        is_int(handshake_opts(both[i][0], both[i][1], &cl, &sv), 0, "%s: the handshake passes: %s",
               what[i], cl.err.msg);
        is_int(sv.rc, 0, "%s: on both sides", what[i]);
        ok((cl.c.seal != NULL) == (i < 2) && (sv.c.seal != NULL) == (i < 2),
           "%s: the connection is %s", what[i], i < 2 ? "sealed" : "not sealed");
        ok(nl_wire_send(&cl.c, 7, "over", 4, &err) == 0 &&
               nl_wire_recv(&sv.c, &type, buf, sizeof buf, &len, &err) == 0 && len == 4 &&
               memcmp(buf, "over", 4) == 0 && nl_wire_send(&sv.c, 8, "back", 4, &err) == 0 &&
               nl_wire_recv(&cl.c, &type, buf, sizeof buf, &len, &err) == 0 && type == 8,
           "%s: frames both ways: %s", what[i], err.msg);
        nl_conn_close(&cl.c);
        nl_conn_close(&sv.c);
    }
    is_int(handshake_opts(NL_WIRE_PLAINTEXT, 0, &cl, &sv), NL_EAUTH,
           "a plaintext client is refused by a sealing server");
    like(cl.err.msg, "--insecure-plaintext", "the message names the option: %s", cl.err.msg);
    like(sv.err.msg, "runs with --insecure-plaintext and this member does not",
         "and the server's says who runs it: %s", sv.err.msg);
    nl_conn_close(&cl.c);
    nl_conn_close(&sv.c);
}

/* The mesh and the sliced allreduce through a relay: member 1 reaches member 0 through a TCP
 * relay (a thread) that records every byte each way and may flip one byte of member 1's stream
 * at a given offset. */
enum { RELAY_CAP = 1 << 20, RELAY_N = 4000, RELAY_STEPS = 3 };

struct relay {
    int listen_fd, target_port;
    long flip_at; /* offset in member 1's stream; < 0: none */
    unsigned char *rec[2];
    size_t n[2]; /* [0]: member 1 -> 0, [1]: member 0 -> 1 */
};

static void *relay_main(void *arg)
{
    struct relay *r = arg;
    int in = accept(r->listen_fd, NULL, NULL);
    int out = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)r->target_port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (in < 0 || connect(out, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (in >= 0)
            close(in);
        close(out);
        return NULL;
    }
    struct pollfd pf[2] = {{.fd = in, .events = POLLIN}, {.fd = out, .events = POLLIN}};
    for (;;) {
        if (poll(pf, 2, 10000) <= 0)
            break;
        int closed = 0;
        for (int d = 0; d < 2; d++) {
            if (!pf[d].revents)
                continue;
            unsigned char buf[65536];
            ssize_t got = read(pf[d].fd, buf, sizeof buf);
            if (got <= 0) {
                closed = 1;
                continue;
            }
            for (ssize_t i = 0; i < got; i++) {
                if (d == 0 && r->flip_at >= 0 && (long)r->n[0] + i == r->flip_at)
                    buf[i] ^= 0x20;
            }
            size_t keep = r->n[d] + (size_t)got <= RELAY_CAP ? (size_t)got : RELAY_CAP - r->n[d];
            memcpy(r->rec[d] + r->n[d], buf, keep);
            r->n[d] += keep;
            nl_wire_write_all(pf[1 - d].fd, buf, (size_t)got, 2000);
        }
        if (closed)
            break;
    }
    close(in);
    close(out);
    return NULL;
}

struct relay_member {
    int rank, fd;
    unsigned opts;
    const struct nl_member *members;
    int rc;
    struct nl_error err;
};

/* The gradient member r computes in every step: recognisable floats. */
static float relay_grad(int r, size_t i)
{
    return 0.25f + (float)(i % 97) * 0.0078125f + (float)r;
}

static void *relay_member_main(void *arg)
{
    struct relay_member *m = arg;
    struct nl_mesh *mesh = NULL;
    struct nl_allreduce *a = NULL;
    struct nl_optim o;
    float *params = nl_alloc_floats(RELAY_N), *grad = nl_alloc_floats(RELAY_N);

    nl_optim_defaults(&o, NL_OPTIM_SGD);
    for (size_t i = 0; i < RELAY_N; i++)
        params[i] = 0.5f;
    m->rc = nl_mesh_connect_cancel(&mesh, m->rank, 2, m->fd, m->members, secret, strlen(secret),
                                   m->opts, 5000, -1, &m->err);
    if (m->rc == 0)
        m->rc = nl_allreduce_new(
            &a, mesh, params,
            &(struct nl_allreduce_opts){
                .n = RELAY_N, .ntrainable = RELAY_N, .optim = &o, .overlap = m->rank == 0},
            &m->err);
    for (long step = 1; m->rc == 0 && step <= RELAY_STEPS; step++) {
        for (size_t i = 0; i < RELAY_N; i++)
            grad[i] = relay_grad(m->rank, i);
        m->rc = nl_allreduce_step(a, params, grad, step, 0.01f, &m->err);
    }
    nl_allreduce_free(a);
    nl_mesh_free(mesh);
    nl_free(params);
    nl_free(grad);
    return NULL;
}

/* Frames in a recorded stream that parse as plaintext: a header of a GRAD or PARAM whose
 * length is a slice's and whose checksum holds over the bytes that follow. */
static int plaintext_frames(const unsigned char *p, size_t n)
{
    int found = 0;
    for (size_t i = 0; i + NL_WIRE_HEADER <= n; i++) {
        uint32_t type, len, crc;
        if (nl_wire_parse_header(p + i, &type, &len, &crc, RELAY_N * sizeof(float)) < 0 ||
            (type != NL_FRAME_GRAD && type != NL_FRAME_PARAM) || len == 0 ||
            i + NL_WIRE_HEADER + len > n)
            continue;
        found += nl_wire_check(crc, type, p + i + NL_WIRE_HEADER, len);
    }
    return found;
}

/* Whether 16 bytes of member r's gradient occur in p. */
static int has_gradient(const unsigned char *p, size_t n, int r)
{
    float g[4];
    for (int i = 0; i < 4; i++)
        g[i] = relay_grad(r, 10 + (size_t)i);
    for (size_t i = 0; i + sizeof g <= n; i++)
        if (memcmp(p + i, g, sizeof g) == 0)
            return 1;
    return 0;
}

static void relay_run(unsigned opts, long flip_at, struct relay *r, struct relay_member m[2])
{
    struct nl_member members[2] = {{"node1", "127.0.0.1", 0}, {"node2", "127.0.0.1", 0}};
    struct nl_error err = {0};
    int fds[2], target;
    pthread_t rt, mt[2];

    memset(r, 0, sizeof *r);
    r->rec[0] = nl_malloc(RELAY_CAP);
    r->rec[1] = nl_malloc(RELAY_CAP);
    r->flip_at = flip_at;
    if (nl_net_listen(&fds[0], "127.0.0.1", 0, 0, &target, &err) < 0 ||
        nl_net_listen(&fds[1], "127.0.0.1", 0, 0, &members[1].port, &err) < 0 ||
        nl_net_listen(&r->listen_fd, "127.0.0.1", 0, 0, &members[0].port, &err) < 0)
        bail("listening", &err);
    r->target_port = target;
    pthread_create(&rt, NULL, relay_main, r);
    for (int i = 0; i < 2; i++) {
        m[i] = (struct relay_member){.rank = i, .fd = fds[i], .opts = opts, .members = members};
        pthread_create(&mt[i], NULL, relay_member_main, &m[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(mt[i], NULL);
    pthread_join(rt, NULL);
    close(fds[0]);
    close(fds[1]);
    close(r->listen_fd);
}

static void test_mesh_relay(void)
{
    struct relay r;
    struct relay_member m[2];

    /* Plaintext first: the scan finds the frames, so it can tell. */
    relay_run(NL_WIRE_PLAINTEXT, -1, &r, m);
    ok(m[0].rc == 0 && m[1].rc == 0, "plaintext: %d steps through the relay: %s%s", RELAY_STEPS,
       m[0].err.msg, m[1].err.msg);
    ok(plaintext_frames(r.rec[0], r.n[0]) >= RELAY_STEPS &&
           plaintext_frames(r.rec[1], r.n[1]) >= RELAY_STEPS && has_gradient(r.rec[0], r.n[0], 1),
       "plaintext: the recording shows the frames and the gradient (%d, %d frames)",
       plaintext_frames(r.rec[0], r.n[0]), plaintext_frames(r.rec[1], r.n[1]));
    nl_free(r.rec[0]);
    nl_free(r.rec[1]);

    relay_run(0, -1, &r, m);
    ok(m[0].rc == 0 && m[1].rc == 0, "sealed: %d steps through the relay: %s%s", RELAY_STEPS,
       m[0].err.msg, m[1].err.msg);
    ok(r.n[0] > RELAY_STEPS * RELAY_N * sizeof(float) / 2, "sealed: %zu bytes recorded", r.n[0]);
    is_int(plaintext_frames(r.rec[0], r.n[0]) + plaintext_frames(r.rec[1], r.n[1]), 0,
           "sealed: no recorded frame parses as plaintext");
    ok(!has_gradient(r.rec[0], r.n[0], 1) && !has_gradient(r.rec[1], r.n[1], 0),
       "sealed: no gradient bytes in the recording");
    nl_free(r.rec[0]);
    nl_free(r.rec[1]);

    /* A byte flipped in member 1's first sealed frame (after its HELLO and AUTH), and one far
     * into the run: member 0 ends the connection, naming member 1 and the frame. */
    const long hs = 2 * NL_WIRE_HEADER + NL_WIRE_HELLO + NL_WIRE_PROOF;
    const long at[2] = {hs + NL_WIRE_SEALED_HEADER + 7,
                        hs + 2 * (long)(RELAY_N * sizeof(float) / 2 + 2 * NL_WIRE_SEALED_HEADER) +
                            5};
    for (int i = 0; i < 2; i++) {
        relay_run(0, at[i], &r, m);
        is_int(m[0].rc, NL_EAUTH, "flipped at byte %ld: member 0's step fails", at[i]);
        like(m[0].err.msg, "node2 (127.0.0.1:", "it names the member: %s", m[0].err.msg);
        like(m[0].err.msg, "failed authentication", "and the failed authentication");
        ok(m[1].rc < 0, "member 1 sees the connection end: %s", m[1].err.msg);
        nl_free(r.rec[0]);
        nl_free(r.rec[1]);
    }
}

/* A worker's SETUP carries every row of the table of run settings as the run-settings JSON
 * does (one table drives both), and bf16 compression with them. */
static void test_setup_settings(void)
{
    struct nl_member members[2] = {{"a", "127.0.0.1", 5000}, {"b", "127.0.0.1", 5001}};
    float mean = 0.5f, std = 0.25f;
    struct nl_setup s = {.rank = 1,
                         .size = 2,
                         .bf16 = 1,
                         .ntrain = 100,
                         .shape = {1, 4, 4},
                         .nclasses = 3,
                         .nnorm = 1,
                         .members = members,
                         .spec = "fc: dense N\n",
                         .data_hash = "00ff"};
    struct nl_setup back;
    struct nl_error err = {0};
    char *text = NULL;
    size_t len = 0;

    settings_distinct(&s.o);
    s.mean[0] = mean;
    s.std[0] = std;
    is_int(nl_setup_encode(&s, &text, &len, &err), 0, "a setup encodes: %s", err.msg);
    is_int(text ? nl_setup_decode(&back, text, len, &err) : -1, 0, "and decodes: %s", err.msg);
    const char *differs = settings_differ(&s.o, &back.o);
    ok(!differs, "every setting as it was (%s differs)", differs ? differs : "none");
    ok(back.bf16 == 1 && back.rank == 1 && back.size == 2 && strcmp(back.spec, s.spec) == 0,
       "with bf16, the member's rank, the members and the spec");
    nl_setup_release(&back);
    s.bf16 = 0;
    nl_free(text);
    is_int(nl_setup_encode(&s, &text, &len, &err), 0, "without compression");
    is_int(text ? nl_setup_decode(&back, text, len, &err) : -1, 0, "decodes");
    is_int(back.bf16, 0, "fp32 exchange");
    nl_setup_release(&back);
    nl_free(text);
}

/* SETUP carries a text dataset's vocabulary size ("vocab N") and a table's embedded columns
 * ("embed K R"), and none for other datasets. */
static void test_setup_vocab(void)
{
    struct nl_member members[1] = {{"node1", "127.0.0.1", 4000}};
    struct nl_setup s = {.rank = 0,
                         .size = 1,
                         .ntrain = 10,
                         .shape = {1, 1, 8},
                         .nclasses = 2,
                         .dtype = 1,
                         .nnorm = 1,
                         .members = members,
                         .spec = "embedding 4\n",
                         .data_hash = "ab"};
    struct nl_error err = {0};

    nl_train_defaults(&s.o);
    s.std[0] = 1.0f;
    for (int v = 0; v <= 1; v++) {
        struct nl_setup back = {0};
        char *text = NULL;
        size_t len = 0;
        s.vocab = v ? 20002 : 0;
        int rc = nl_setup_encode(&s, &text, &len, &err);
        if (rc == 0)
            rc = nl_setup_decode(&back, text, len, &err);
        ok(rc == 0, "a SETUP %s a vocabulary encodes and decodes: %s", v ? "with" : "without",
           err.msg);
        is_int(back.vocab, s.vocab, "the vocabulary size comes back");
        nl_setup_release(&back);
        nl_free(text);
        text = NULL;
        /* A table's embedded columns and their rows, for embed-columns ("embed K R"). */
        s.embed_columns = v ? 3 : 0;
        s.embed_rows = v ? 517 : 0;
        memset(&back, 0, sizeof back);
        rc = nl_setup_encode(&s, &text, &len, &err);
        if (rc == 0)
            rc = nl_setup_decode(&back, text, len, &err);
        ok(rc == 0, "a SETUP %s embedded columns encodes and decodes: %s", v ? "with" : "without",
           err.msg);
        is_int(back.embed_columns, s.embed_columns, "the embedded columns come back");
        is_int(back.embed_rows, s.embed_rows, "and their rows");
        nl_setup_release(&back);
        nl_free(text);
    }
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_setup_settings();
    test_setup_vocab();
    test_sha256();
    test_frames();
    test_handshake();
    test_sealed();
    test_handshake_opts();
    test_mesh_relay();
    test_handshake_stalls();
    test_mesh_under_attack();
    return done_testing();
}
