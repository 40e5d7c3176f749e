/* The sliced allreduce of a cluster run (BigDL's shuffle and broadcast), over a full mesh.
 *
 * The flat vector of trainable parameters is cut into one slice per member, in whole blocks of
 * 16 floats; member j owns slice j, its fp32 master copy and its optimizer state. Each step:
 *   shuffle:   every member sends slice j of its gradient to member j;
 *   reduce:    owner j sums the pieces in fp32 in rank order (so arrival order does not matter)
 *              and applies the optimizer to its slice;
 *   broadcast: owner j sends its updated slice to every member.
 * Each member sends (N-1)/N of the parameter bytes in each phase, 2(N-1)/N in all, plus one
 * frame header per peer and phase. With bf16 compression the gradients and parameters travel as
 * bf16 rounded to nearest even; sums and the optimizer stay fp32 on the owner's master copy, and
 * every member (the owner too) computes with the same rounded parameters, so replicas stay
 * identical. Payloads are in the host's byte order: members must share it (every Linux host
 * nnlab targets is little-endian). */
#ifndef NNLAB_ALLREDUCE_H
#define NNLAB_ALLREDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/error.h"
#include "nnlab/mesh.h"
#include "nnlab/optim.h"

struct nl_allreduce;

/* For the mesh's members and n parameters starting at params (identical on every member). The
 * mesh stays the caller's and must outlive the allreduce. */
int nl_allreduce_new(struct nl_allreduce **out, struct nl_mesh *mesh, const float *params, size_t n,
                     const struct nl_optim *optim, int bf16, struct nl_error *err);
void nl_allreduce_free(struct nl_allreduce *a);

/* One synchronous step. grad (n floats) is this member's gradient, scaled so that the members'
 * gradients sum to the global one (the trainer scales by 1/global batch). On return params holds
 * the updated parameters, the same on every member. step is 1-based; lr the rate of this step. */
int nl_allreduce_step(struct nl_allreduce *a, float *params, const float *grad, long step, float lr,
                      struct nl_error *err);

/* Seconds the last step spent moving bytes (both exchanges, waits for peers included); the
 * rest of the step is the owner's sums, optimizer and conversions. */
double nl_allreduce_exchange_seconds(const struct nl_allreduce *a);

/* The [lo, hi) floats of member r's slice. */
void nl_allreduce_slice(const struct nl_allreduce *a, int r, size_t *lo, size_t *hi);

/* The [lo, hi) floats of member r's slice of n parameters among size members (what
 * nl_allreduce_slice gives, without an allreduce). */
void nl_allreduce_bounds(size_t n, int size, int r, size_t *lo, size_t *hi);

/* Recovery of a cluster run (net/worker.c). A readable cancel_fd (-1: none) makes a step give up
 * its exchange at once with NL_ECANCELED. The own slice's state travels as (1 + nstate) arrays
 * of the slice's length: the fp32 master, then the optimizer's state arrays
 * (nl_allreduce_state_floats floats in all). import sets it (both copies below) as the state
 * after step `step`; export gives the current state (before 0) or the state before the latest
 * optimizer step (before 1), and returns the step that copy is "after". */
void nl_allreduce_set_cancel_fd(struct nl_allreduce *a, int fd);
size_t nl_allreduce_state_floats(const struct nl_allreduce *a);
void nl_allreduce_import(struct nl_allreduce *a, const float *slice, long step);
long nl_allreduce_export(const struct nl_allreduce *a, int before, float *out);

/* fp32 <-> bf16, rounding to nearest even (NaN stays NaN). */
uint16_t nl_bf16_from_float(float f);
float nl_bf16_to_float(uint16_t h);

#endif
