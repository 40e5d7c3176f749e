/* The wire protocol between cluster processes: framed messages over TCP, bounded lengths,
 * timeouts on every wait, a challenge-response on the run's secret before anything else is read,
 * and after it every frame sealed with an AEAD under per-connection, per-direction keys (or, on
 * a trusted network and when asked, a checksum only). The format is documented at the top of
 * net/wire.c. */
#ifndef NNLAB_WIRE_H
#define NNLAB_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/error.h"

/* Members refuse a peer of another wire version in the handshake; the driver reaches only workers
 * of its own `nnlab --version` (else it uploads itself), so a change of any frame's meaning
 * goes with a new wire version and a new release. 2: NORM frames, statistics in the exchange,
 * heartbeats and recovery. 3: flags in HELLO, sealed frames. 4: TIMES and OVERLAP frames
 * (--overlap auto's measurement), the `embed K R` line in SETUP. */
#define NL_WIRE_VERSION 4
#define NL_WIRE_HEADER  12 /* bytes before every payload of a plaintext frame */
#define NL_WIRE_TAG     16 /* bytes of an AEAD tag */
/* A sealed frame: its header sealed (NL_WIRE_HEADER + tag), the payload, the payload's tag. */
#define NL_WIRE_SEALED_HEADER (NL_WIRE_HEADER + NL_WIRE_TAG)
#define NL_WIRE_HEAD_MAX      NL_WIRE_SEALED_HEADER
#define NL_WIRE_MAX_PAYLOAD   (1u << 30) /* no frame is ever longer; checked before allocation */
#define NL_WIRE_SECRET_MIN    16         /* bytes of run secret at the least */
#define NL_WIRE_NONCE         32
#define NL_WIRE_HELLO         52 /* bytes of a HELLO payload */
#define NL_WIRE_PROOF         32 /* bytes of an AUTH payload */

enum nl_frame_type {
    NL_FRAME_HELLO = 1,  /* handshake: magic, version, sender id, nonce */
    NL_FRAME_AUTH = 2,   /* handshake: HMAC-SHA256 proof */
    NL_FRAME_GRAD = 16,  /* allreduce shuffle: a gradient slice for its owner */
    NL_FRAME_PARAM = 17, /* allreduce broadcast: an updated parameter slice from its owner */
    NL_FRAME_NORM = 18,  /* allreduce, clip-norm: the sum of squares of an owner's slice */
    NL_FRAME_TIMES = 19, /* allreduce, --overlap auto: a member's measured step times */
    /* Between the driver and a worker, over the SSH channel (net/worker.c documents them). */
    NL_FRAME_LISTEN = 32,    /* worker -> driver: where it listens */
    NL_FRAME_SETUP = 33,     /* driver -> worker: rank, members, options, model, data layout */
    NL_FRAME_DATA = 34,      /* driver -> worker: the worker's partition */
    NL_FRAME_METRIC = 35,    /* worker -> driver: one step's metrics */
    NL_FRAME_WEIGHTS = 36,   /* worker 0 -> driver: the parameters after an epoch */
    NL_FRAME_DONE = 37,      /* worker -> driver: training finished */
    NL_FRAME_HAVE = 38,      /* worker -> driver: whether the partition is cached (1 byte) */
    NL_FRAME_INIT = 39,      /* driver -> worker: the initial parameters, in the model's layout */
    NL_FRAME_HEARTBEAT = 40, /* both ways: empty; the sender is alive */
    NL_FRAME_ABORT = 41,     /* driver -> worker: a member is lost; stop the step, report */
    NL_FRAME_FAULT = 42,     /* worker -> driver: "COMPLETED_STEP message" after a failed step */
    NL_FRAME_PARAMS = 43,    /* worker -> driver: the complete parameters after that step */
    NL_FRAME_STATE = 44,     /* both ways: a slice's fp32 master and optimizer state */
    NL_FRAME_JUDGE = 45,     /* driver -> worker: an epoch's watched accuracy */
    NL_FRAME_OVERLAP = 46,   /* worker 0 -> driver: what --overlap auto measured and chose */
};

/* The keys and sequence numbers of a sealed connection (net/wire.c). */
struct nl_seal;

/* One connection. peer names it in every error ("node2 (127.0.0.1:41234)"). */
struct nl_conn {
    int fd;         /* -1 when closed */
    int timeout_ms; /* the longest any single wait for the peer may last */
    char peer[160];
    uint64_t bytes_sent, bytes_received; /* frame bytes, headers included */
    struct nl_seal *seal; /* set by the handshake unless plaintext; NULL: checksummed frames */
};

void nl_conn_init(struct nl_conn *c, int fd, const char *peer, int timeout_ms);
/* Closes the socket and forgets the keys; accepts a closed or zeroed connection. */
void nl_conn_close(struct nl_conn *c);

/* Writes or reads exactly n bytes, looping over partial transfers and EINTR; each wait for the
 * socket lasts at most timeout_ms. 0, NL_ETIMEDOUT, or NL_ENET (errno says why; 0 when the peer
 * closed the connection). */
int nl_wire_write_all(int fd, const void *p, size_t n, int timeout_ms);
int nl_wire_read_all(int fd, void *p, size_t n, int timeout_ms);

/* The header of a frame: type, length, CRC32 of type, length and payload. */
void nl_wire_header(unsigned char h[NL_WIRE_HEADER], uint32_t type, const void *payload,
                    uint32_t len);
/* Parses a header: 0, or NL_EFORMAT when the length is over max (nothing more is read). */
int nl_wire_parse_header(const unsigned char h[NL_WIRE_HEADER], uint32_t *type, uint32_t *len,
                         uint32_t *crc, uint32_t max);
/* 1 when crc is the checksum of that frame. */
int nl_wire_check(uint32_t crc, uint32_t type, const void *payload, uint32_t len);

/* The frame layer of a connection, for a caller that moves the bytes itself (net/allreduce.c):
 * a frame on c is nl_wire_head_bytes(c) of header, the payload, then nl_wire_tail_bytes(c) of
 * tag (0 on a plaintext connection). Frames in each direction are made and opened in order:
 * head then payload, one frame after the other.
 * - nl_wire_seal_head writes the header of a frame of that type and payload; nl_wire_seal_payload
 *   (sealed connections only) writes the payload's ciphertext to out (out == in allowed) and its
 *   tag. Both 0, or NL_EIO when libcrypto fails.
 * - nl_wire_open_head reads a header: type and length, refused (NL_EFORMAT) when the length is
 *   over max, (NL_EAUTH) when a sealed header fails authentication; *crc is for open_payload.
 * - nl_wire_open_payload checks the payload (checksum, or in place decryption and tag): 0,
 *   NL_EFORMAT (checksum) or NL_EAUTH ("frame N failed authentication"). After a failed
 *   authentication every later frame on c fails too. */
size_t nl_wire_head_bytes(const struct nl_conn *c);
size_t nl_wire_tail_bytes(const struct nl_conn *c);
int nl_wire_seal_head(struct nl_conn *c, unsigned char h[NL_WIRE_HEAD_MAX], uint32_t type,
                      const void *payload, uint32_t len, struct nl_error *err);
int nl_wire_seal_payload(struct nl_conn *c, void *out, const void *in, uint32_t len,
                         unsigned char tag[NL_WIRE_TAG], struct nl_error *err);
int nl_wire_open_head(struct nl_conn *c, const unsigned char *h, uint32_t *type, uint32_t *len,
                      uint32_t *crc, uint32_t max, struct nl_error *err);
int nl_wire_open_payload(struct nl_conn *c, uint32_t type, void *buf, uint32_t len, uint32_t crc,
                         const unsigned char tag[NL_WIRE_TAG], struct nl_error *err);

int nl_wire_send(struct nl_conn *c, uint32_t type, const void *payload, uint32_t len,
                 struct nl_error *err);
/* Receives one frame into buf (cap bytes); a longer frame is refused before its payload is
 * read, as is a frame whose checksum does not match. */
int nl_wire_recv(struct nl_conn *c, uint32_t *type, void *buf, uint32_t cap, uint32_t *len,
                 struct nl_error *err);
/* Receives one frame of at most max bytes into a new block (*buf, freed with nl_free). */
int nl_wire_recv_alloc(struct nl_conn *c, uint32_t *type, void **buf, uint32_t *len, uint32_t max,
                       struct nl_error *err);

enum nl_wire_role { NL_WIRE_CLIENT = 0, NL_WIRE_SERVER = 1 };

/* Handshake options. PLAINTEXT: after the handshake, frames carry a checksum, not a seal (both
 * sides must agree; `--insecure-plaintext`, for trusted networks). NO_AES: this side asks for
 * ChaCha20-Poly1305 as if its CPU had no AES instructions (tests). */
enum { NL_WIRE_PLAINTEXT = 1, NL_WIRE_NO_AES = 2 };

/* The first exchange on every connection: both sides send HELLO (my_id, options, a fresh nonce)
 * and AUTH (an HMAC of both HELLOs keyed by the secret); a peer whose first frames are not
 * exactly these, whose proof is wrong, or whose PLAINTEXT option differs, is refused with
 * NL_EAUTH. Then, unless PLAINTEXT, c is sealed with keys derived from the secret and both
 * nonces. *peer_id is what the peer said it is. The whole handshake lasts at most c->timeout_ms
 * (NL_ETIMEDOUT), however slowly the peer sends. */
int nl_wire_handshake(struct nl_conn *c, enum nl_wire_role role, const void *secret,
                      size_t secret_len, unsigned opts, int32_t my_id, int32_t *peer_id,
                      struct nl_error *err);

/* The same handshake in steps, for a caller that waits on many connections at once with poll
 * (net/mesh.c). Start sends this side's HELLO; step reads what the peer has sent so far without
 * waiting and answers: 1 when the handshake is complete (*peer_id set), 0 when it needs more from
 * the peer (wait until c->fd is readable, and keep your own deadline), or an error as
 * nl_wire_handshake's. secret must outlive the handshake. */
struct nl_wire_hs {
    enum nl_wire_role role;
    const void *secret;
    size_t secret_len;
    unsigned opts;
    int stage;     /* 0: reading the peer's HELLO, 1: its AUTH, 2: done */
    uint32_t have; /* bytes of the current frame read so far */
    unsigned char mine[NL_WIRE_HELLO], theirs[NL_WIRE_HELLO];
    unsigned char frame[NL_WIRE_HEADER + NL_WIRE_HELLO];
};
int nl_wire_handshake_start(struct nl_wire_hs *hs, struct nl_conn *c, enum nl_wire_role role,
                            const void *secret, size_t secret_len, unsigned opts, int32_t my_id,
                            struct nl_error *err);
int nl_wire_handshake_step(struct nl_wire_hs *hs, struct nl_conn *c, int32_t *peer_id,
                           struct nl_error *err);

/* Keys c as a completed handshake would (see the top of net/wire.c) from the secret and both
 * HELLO nonces, AES-256-GCM when aes, else ChaCha20-Poly1305; for tests and the fuzz target,
 * which need sealed frames without a handshake. */
int nl_wire_seal_start(struct nl_conn *c, enum nl_wire_role role, const void *secret,
                       size_t secret_len, const unsigned char client_nonce[NL_WIRE_NONCE],
                       const unsigned char server_nonce[NL_WIRE_NONCE], int aes,
                       struct nl_error *err);

/* Fills p with n bytes from the kernel's generator (run secrets, nonces). */
int nl_wire_random(void *p, size_t n, struct nl_error *err);

#endif
