/* The sliced allreduce of a cluster run (BigDL's shuffle and broadcast), over a full mesh of
 * members: the TCP mesh of the SSH mode, or MPI's ranks (include/nnlab/transport.h).
 *
 * The flat vector of trainable parameters and statistics is cut into one slice per member, in
 * whole blocks of 16 floats; member j owns slice j, its fp32 master copy and its optimizer state.
 * Each step:
 *   shuffle:   every member sends slice j of its gradient to member j;
 *   reduce:    owner j sums the pieces in fp32 in rank order (so arrival order does not matter)
 *              and applies the optimizer to its slice;
 *   broadcast: owner j sends its updated slice to every member.
 * Each member sends (N-1)/N of the parameter bytes in each phase, 2(N-1)/N in all, plus one
 * frame header per peer and phase. With bf16 compression the gradients and parameters travel as
 * bf16 rounded to nearest even; sums and the optimizer stay fp32 on the owner's master copy, and
 * every member (the owner too) computes with the same rounded parameters, so replicas stay
 * identical.
 *
 * Statistics (batch normalisation's sums, after the trainable range) travel like gradients but
 * always in fp32: owners sum them in rank order and broadcast the sums, not parameters; every
 * member then updates its running statistics from the global sums itself. Clipping happens on
 * the owner's summed slice: clip-value elementwise, clip-norm with the global norm, for which
 * every owner sends the sum of squares of its slice (a double) to every member and each sums
 * them in rank order, so all scale alike.
 *
 * With overlap the shuffle of a slice starts as soon as the caller says that part of the
 * gradient is final, while it still computes the rest (the trainer's backward pass runs from the
 * last layers, which lie in the highest slices), and owners sum, update and broadcast as pieces
 * arrive; the sums are the same, in the same order, so the bits are too. net/allreduce.c
 * describes the frames.
 *
 * Payloads are in the host's byte order: members must share it (every Linux host nnlab targets
 * is little-endian). */
#ifndef NNLAB_ALLREDUCE_H
#define NNLAB_ALLREDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/error.h"
#include "nnlab/mesh.h"
#include "nnlab/optim.h"
#include "nnlab/transport.h"

struct nl_allreduce;

struct nl_allreduce_opts {
    size_t n;          /* floats exchanged: a model's [0, nreduce) */
    size_t ntrainable; /* of them [0, ntrainable) the optimizer's; the rest statistics sums */
    const struct nl_optim *optim;
    int bf16;
    /* Gradient clipping of the summed gradient, before the optimizer, as the trainer's own
     * (include/nnlab/trainer.h); 0: off. */
    float clip_value, clip_norm;
    /* 1: a communication thread runs each step from nl_allreduce_begin on, sending each slice as
     * nl_allreduce_ready says it is final, while the caller still computes the rest. */
    int overlap;
};

/* For the mesh's members and o->n parameters starting at params (identical on every member).
 * The mesh stays the caller's and must outlive the allreduce; so must o->optim. */
int nl_allreduce_new(struct nl_allreduce **out, struct nl_mesh *mesh, const float *params,
                     const struct nl_allreduce_opts *o, struct nl_error *err);
/* The same over any transport (include/nnlab/transport.h), which stays the caller's and must
 * outlive the allreduce. */
int nl_allreduce_new_over(struct nl_allreduce **out, struct nl_transport *tr, const float *params,
                          const struct nl_allreduce_opts *o, struct nl_error *err);
void nl_allreduce_free(struct nl_allreduce *a);

/* Bytes this member has sent to its peers so far, on its transport. */
unsigned long long nl_allreduce_bytes_sent(const struct nl_allreduce *a);

/* One synchronous step. grad (n floats) is this member's gradient, scaled so that the members'
 * gradients sum to the global one (the trainer scales by 1/global batch), followed by its
 * statistics sums. On return params[0, ntrainable) holds the updated parameters, the same on
 * every member, and grad[ntrainable, n) the members' summed statistics (params[ntrainable, n) is
 * not touched: the caller updates its statistics from those sums). step is 1-based; lr the rate
 * of this step. */
int nl_allreduce_step(struct nl_allreduce *a, float *params, float *grad, long step, float lr,
                      struct nl_error *err);

/* The same step, overlapped with the computation of grad (overlap only): begin before grad is
 * computed; ready(from, stats_from) once grad[from, ntrainable) and grad[stats_from, n) are final
 * (each only ever falls; any thread may call it; slices wholly final go out at once); finish once
 * grad is whole, which waits for the end of the step and has nl_allreduce_step's result. Until
 * finish returns, params may change in slices that were final, and nowhere else. */
int nl_allreduce_begin(struct nl_allreduce *a, float *params, float *grad, long step, float lr);
void nl_allreduce_ready(struct nl_allreduce *a, size_t from, size_t stats_from);
int nl_allreduce_finish(struct nl_allreduce *a, struct nl_error *err);
/* Whether the steps overlap: from nl_allreduce_new's overlap, or set_overlap's on. Between steps
 * an allreduce made with overlap may run synchronous steps (on 0) and overlapped ones again (1);
 * one made without cannot overlap (NL_EINVAL). Members may differ in it: the frames and sums
 * are the same either way. */
int nl_allreduce_overlaps(const struct nl_allreduce *a);
int nl_allreduce_set_overlap(struct nl_allreduce *a, int on);

/* Between steps, on every member at the same point of the run: each member's
 * NL_ALLREDUCE_TIMES doubles, all[NL_ALLREDUCE_TIMES * rank + i] on entry, go to every peer
 * (TIMES frames), so that on return all[NL_ALLREDUCE_TIMES * r + i] holds member r's on every
 * member, bit for bit (--overlap auto agrees on its choice from them). */
#define NL_ALLREDUCE_TIMES 2
int nl_allreduce_agree(struct nl_allreduce *a, double *all, struct nl_error *err);

/* Seconds the last step spent communicating: from the first slice ready to the end of the
 * exchange, the owner's sums and optimizer excluded. */
double nl_allreduce_exchange_seconds(const struct nl_allreduce *a);
/* The seconds the caller spent in nl_allreduce_step or waiting in nl_allreduce_finish: the
 * communication (and the owner's update) that the computation did not hide. */
double nl_allreduce_wait_seconds(const struct nl_allreduce *a);

/* Of the bytes the last step sent, the share that went out before the whole gradient was final:
 * while the caller still computed (0 for synchronous steps). */
double nl_allreduce_early_fraction(const struct nl_allreduce *a);

/* The [lo, hi) floats of member r's slice. */
void nl_allreduce_slice(const struct nl_allreduce *a, int r, size_t *lo, size_t *hi);

/* The [lo, hi) floats of member r's slice of n exchanged floats among size members (what
 * nl_allreduce_slice gives, without an allreduce). */
void nl_allreduce_bounds(size_t n, int size, int r, size_t *lo, size_t *hi);
/* The trainable part of that slice, [lo, hi) within [0, ntrainable): what the member's optimizer
 * state covers (empty when the slice holds only statistics). */
void nl_allreduce_state_bounds(size_t n, size_t ntrainable, int size, int r, size_t *lo,
                               size_t *hi);

/* Recovery of a cluster run (net/worker.c). A readable cancel_fd (-1: none) makes a step give up
 * its exchange at once with NL_ECANCELED. The own slice's state travels as (1 + nstate) arrays
 * of the length of its trainable part (nl_allreduce_state_bounds): the fp32 master, then the
 * optimizer's state arrays (nl_allreduce_state_floats floats in all). import sets it (both
 * copies below) as the state after step `step`; export gives the current state (before 0) or the
 * state before the latest optimizer step (before 1), and returns the step that copy is
 * "after". */
void nl_allreduce_set_cancel_fd(struct nl_allreduce *a, int fd);
size_t nl_allreduce_state_floats(const struct nl_allreduce *a);
void nl_allreduce_import(struct nl_allreduce *a, const float *slice, long step);
long nl_allreduce_export(const struct nl_allreduce *a, int before, float *out);

/* fp32 <-> bf16, rounding to nearest even (NaN stays NaN). */
uint16_t nl_bf16_from_float(float f);
float nl_bf16_to_float(uint16_t h);

#endif
