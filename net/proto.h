/* The frames of nnlab's protocol, and the payload codecs both sides use. Private to net/.
 * Framing, the handshake and sealing are net/wire.c's; the driver-worker conversation and its
 * recovery are told at the top of net/worker.c, the exchange at the top of net/allreduce.c.
 *
 *   frame      direction             payload                                  when
 *   HELLO      member <-> member     52 bytes (net/wire.c)                    first on a mesh link
 *   AUTH       member <-> member     HMAC-SHA256 proof, 32 bytes              after HELLO
 *   GRAD       member -> owner       the owner's slice of my gradient: fp32,  each step, once
 *                                    or bf16 then fp32 statistics             the slice is final
 *   NORM       owner -> member       double LE: sum of squares of my summed   clip-norm steps,
 *                                    slice                                    after GRADs
 *   PARAM      owner -> member       my updated slice (as GRAD's layout)      each step, last
 *   TIMES      member <-> member     2 doubles (host order): my median step   once, after the
 *                                    seconds synchronous, then overlapped     measured steps of
 *                                    (nl_allreduce_agree)                     --overlap auto
 *   LISTEN     worker -> driver      text "PORT PID ADDR"                     once started
 *   SETUP      driver -> worker      text "key value" lines (nl_setup_*)      each generation
 *   HAVE       worker -> driver      1 byte: the partition is cached          after SETUP
 *   DATA       driver -> worker      samples, then int32 LE labels            after HAVE 0
 *   INIT       driver -> worker      fp32 parameters after `start` steps      after HAVE/DATA
 *   STATE      driver -> worker      STATE layout below, copies 1             after INIT, when
 *                                                                             SETUP's state is 1
 *              worker -> driver      copies 1: at checkpoint steps;           after METRIC;
 *                                    copies 2: after a FAULT                  after PARAMS
 *   METRIC     worker -> driver      nl_metric, 48 bytes                      every step
 *   WEIGHTS    worker 0 -> driver    fp32 parameters                          every epoch's end
 *   PARAMS     worker -> driver      fp32 parameters                          rank 0 at a mid-
 *                                                                             epoch checkpoint;
 *                                                                             every member after
 *                                                                             FAULT
 *   JUDGE      driver -> worker      int64 LE epoch, double LE accuracy       after each epoch
 *                                    (16 bytes)                               but the last, in
 *                                                                             judged runs
 *   OVERLAP    worker 0 -> driver    int64 LE step, double LE synchronous     --overlap auto,
 *                                    and overlapped seconds, int64 LE 1:      after the METRIC
 *                                    overlapped from step + 1 on (32 bytes)   of its last
 *                                                                             measured step
 *   DONE       worker -> driver      empty                                    training finished
 *   HEARTBEAT  both ways             empty                                    every timeout / 4
 *   ABORT      driver -> worker      empty                                    a member is lost
 *   FAULT      worker -> driver      text "C message", C steps completed      a step failed
 *
 * STATE: five uint64 LE (lo, hi, copies, step, step2: struct nl_state_head), then `copies`
 * times the slice [lo, hi) of the trainable parameters as (1 + nstate) fp32 arrays; its size is
 * nl_state_size(). Integers are little-endian everywhere. */
#ifndef NNLAB_NET_PROTO_H
#define NNLAB_NET_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/mesh.h"
#include "nnlab/trainer.h"

#define NL_PROTO_MAX_NORM       16
#define NL_PROTO_MAX_SETUP      (16u << 20) /* bytes of a SETUP frame at most */
#define NL_HEARTBEAT_DEFAULT_MS 10000       /* the heartbeat timeout when none is given */
#define NL_STATE_HEADER         40          /* bytes before a STATE frame's floats */

struct nl_setup {
    int rank, size;
    struct nl_train_opts o; /* sync unused */
    int bf16;
    int plaintext; /* the mesh's frames are checksummed, not sealed (--insecure-plaintext) */
    int timeout_ms;
    /* Recovery: the generation (0 for the first membership, +1 at each recovery), the steps
     * completed that the members start from, whether a STATE frame follows INIT, and the
     * heartbeat timeout both sides keep. */
    int generation;
    long start;
    int has_state;
    int heartbeat_ms;
    uint32_t ntrain; /* of the whole train split */
    struct nl_shape shape;
    int nclasses, dtype, nnorm;
    /* A regression dataset: its partition's labels are the bits of each sample's standardised
     * float32 target, and nclasses is 1; the loss travels in o.loss. */
    int regression;
    int vocab; /* a text dataset's vocabulary size, for embedding layers ("vocab N"); 0: none */
    /* A table's embedded columns and their rows, for embed-columns layers ("embed K R"); 0: none */
    int embed_columns, embed_rows;
    float mean[NL_PROTO_MAX_NORM], std[NL_PROTO_MAX_NORM];
    char data_hash[65];        /* SHA-256 of the partition's DATA payload, hex */
    struct nl_member *members; /* (size) */
    char *spec;                /* the model spec's text */
    char *frozen;              /* the frozen layers' names, comma-separated; NULL: none */
    /* A run that follows its epochs' accuracy (nl_train_judges): the watched accuracy of each
     * epoch completed before `start`, epoch order (NaN: unknown); NULL when nwatched is 0. */
    double *watched;
    int nwatched;
};

/* SETUP as text: "key value" lines, floats in C99 hex so they travel exactly, the members one a
 * line, then a line "spec" and the spec's text to the end. *out is freed with nl_free. */
int nl_setup_encode(const struct nl_setup *s, char **out, size_t *len, struct nl_error *err);
/* Fills s from a payload (which it does not keep); s->members and s->spec are freed with
 * nl_setup_release. Errors say which line is wrong. */
int nl_setup_decode(struct nl_setup *s, const char *text, size_t len, struct nl_error *err);
void nl_setup_release(struct nl_setup *s);

/* One step of one worker, as a METRIC frame carries it (little-endian, 48 bytes). */
struct nl_metric {
    int32_t epoch, iter; /* 1-based */
    int32_t samples, correct;
    double loss_sum; /* summed over the worker's samples */
    double compute_seconds, comm_seconds;
    uint64_t bytes_sent;
};
#define NL_METRIC_SIZE 48
void nl_metric_encode(unsigned char out[NL_METRIC_SIZE], const struct nl_metric *m);
void nl_metric_decode(struct nl_metric *m, const unsigned char in[NL_METRIC_SIZE]);

/* OVERLAP: what --overlap auto chose (struct nl_overlap_choice), little-endian, 32 bytes. */
#define NL_OVERLAP_SIZE 32
void nl_overlap_encode(unsigned char out[NL_OVERLAP_SIZE], const struct nl_overlap_choice *c);
void nl_overlap_decode(const unsigned char in[NL_OVERLAP_SIZE], struct nl_overlap_choice *c);

/* JUDGE: the epoch (1-based) and its watched accuracy, little-endian, 16 bytes. */
#define NL_JUDGE_SIZE 16
void nl_judge_encode(unsigned char out[NL_JUDGE_SIZE], int epoch, double watched);
void nl_judge_decode(const unsigned char in[NL_JUDGE_SIZE], int *epoch, double *watched);

/* STATE's header (see the top of this file). */
struct nl_state_head {
    uint64_t lo, hi; /* the slice [lo, hi) of the trainable parameters */
    uint64_t copies; /* 1, or 2 in a FAULT's report */
    uint64_t step;   /* the first copy is the state after this many steps */
    uint64_t step2;  /* the second copy's steps (0 with one copy) */
};
void nl_state_head_encode(unsigned char out[NL_STATE_HEADER], const struct nl_state_head *h);
void nl_state_head_decode(struct nl_state_head *h, const unsigned char in[NL_STATE_HEADER]);
/* Bytes of a STATE frame: the header and `copies` copies of (1 + nstate) arrays of own floats. */
size_t nl_state_size(size_t own, int nstate, int copies);
/* A STATE frame of one copy for the slice [lo, hi): master[lo, hi), then [lo, hi) of each of the
 * nstate arrays of ntrainable floats in state, the state after `step` steps. *out (*len bytes)
 * is freed with nl_free. */
int nl_state_encode_slice(unsigned char **out, size_t *len, size_t lo, size_t hi, long step,
                          const float *master, const float *state, size_t ntrainable, int nstate,
                          struct nl_error *err);

/* LISTEN: "PORT PID ADDR" (ADDR empty unless the worker was told where to bind). decode: 0, or
 * NL_EFORMAT for text that is not that (a port out of range, no pid). */
#define NL_LISTEN_MAX 128
int nl_listen_encode(char out[NL_LISTEN_MAX], int port, long pid, const char *addr);
int nl_listen_decode(const void *payload, size_t len, int *port, long *pid, char addr[64]);

/* FAULT: "C message", C the steps the member completed. decode keeps at most msg_cap - 1 bytes
 * of the message. */
int nl_fault_encode(char *out, size_t cap, long done, const char *why);
void nl_fault_decode(const void *payload, size_t len, long *done, char *msg, size_t msg_cap);

/* HAVE: one byte, 1 when the member holds the partition. */
int nl_have_decode(const void *payload, size_t len, int *have);

/* Bytes of one sample in the DATA payload (pixels only; labels follow as int32). */
size_t nl_setup_sample_bytes(const struct nl_setup *s);

#endif
