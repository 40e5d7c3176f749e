/* What the driver and a worker say to each other over the SSH channel: the SETUP frame's text
 * form, the METRIC frame's layout, and helpers both sides use. Private to net/. */
#ifndef NNLAB_NET_PROTO_H
#define NNLAB_NET_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/mesh.h"
#include "nnlab/trainer.h"

#define NL_PROTO_MAX_NORM       16
#define NL_PROTO_MAX_SETUP      (16u << 20) /* bytes of a SETUP frame at most */
#define NL_HEARTBEAT_DEFAULT_MS 10000       /* the heartbeat timeout when none is given */
#define NL_STATE_HEADER         40          /* bytes before a STATE frame's floats (net/worker.c) */

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

/* JUDGE: the epoch (1-based) and its watched accuracy, little-endian, 16 bytes. */
#define NL_JUDGE_SIZE 16
void nl_judge_encode(unsigned char out[NL_JUDGE_SIZE], int epoch, double watched);
void nl_judge_decode(const unsigned char in[NL_JUDGE_SIZE], int *epoch, double *watched);

/* Bytes of one sample in the DATA payload (pixels only; labels follow as int32). */
size_t nl_setup_sample_bytes(const struct nl_setup *s);

#endif
