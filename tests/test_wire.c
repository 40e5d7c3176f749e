/* The wire protocol: SHA-256 and HMAC-SHA256 against the FIPS 180-4 and RFC 4231 vectors, frame
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
#include "nnlab/alloc.h"
#include "nnlab/mesh.h"
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

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_sha256();
    test_frames();
    test_handshake();
    test_handshake_stalls();
    test_mesh_under_attack();
    return done_testing();
}
