/* How a cluster run's driver follows its members, written once for both ways of reaching them:
 * SSH channels (net/driver.c) and MPI messages (net/mpi.c). Private to net/.
 *
 * The members' frames (net/proto.h) come to the driver in order from each member; the driver
 * reads them its own way and hands each to nl_follow_frame, which keeps:
 *   - the steps in flight: each step's METRIC from every member, summed into one ITER event
 *     (nl_follow_emit, in step order) with each member's worker_steps figures;
 *   - the epoch's end: rank 0's WEIGHTS, validated here (classification or regression metrics),
 *     stored as the epoch's checkpoint with every member's optimizer slice, the EPOCH event, and
 *     the judgement (plateau, early stop) sent to every member as JUDGE;
 *   - checkpoints within an epoch: every member's STATE slice and rank 0's PARAMS, stored once
 *     all are in (one at a time: a piece of a later checkpoint is held by its reader, HOLD);
 *   - the run's end (nl_follow_finish): the test split, the totals, the DONE event.
 * What it needs of the way members are reached is the members link below: a member's name, a
 * frame to member i, word of the driver's slow work (validation, a store write), during which
 * the link keeps heartbeats going and does not count the members' silence, and for the loop that
 * follows the run (nl_follow_run) reading a member's frames, judging liveness, and waiting.
 *
 * The SSH driver's recovery also drives it: while `recovering`, reports far ahead of the steps
 * emitted are taken and dropped, and nl_follow_emit(force_to) reports every step before force_to
 * with what is known of it (force_params and force_state: what the recovery gathered). */
#ifndef NNLAB_NET_FOLLOW_H
#define NNLAB_NET_FOLLOW_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/dataset.h"
#include "nnlab/error.h"
#include "nnlab/model.h"
#include "nnlab/trainer.h"
#include "nnlab/wire.h"

#define NL_FOLLOW_MAX_WINDOW 64
#define NL_FOLLOW_HOLD       2 /* nl_follow_frame: the frame waits for the checkpoint in progress */
#define NL_FOLLOW_OTHER      3 /* nl_follow_frame: not a frame the follower takes */
#define NL_FOLLOW_END        4 /* a members link's check: the run is complete */

struct nl_members_link {
    const char *(*name)(void *ud, int i);
    /* A frame to member i (JUDGE). A failure that loses only that member is the link's to
     * record (it returns 0); a negative return fails the run. */
    int (*send)(void *ud, int i, uint32_t type, const void *p, size_t len, struct nl_error *err);
    /* The driver starts (begin 1) or ends (0) slow work that reads no frame. May be NULL. */
    void (*busy)(void *ud, int begin);
    /* nl_follow_run's round, for each member not done: serve reads member i's frames as far as
     * the follower can use them (nl_follow_readable), each handed to nl_follow_frame: 1 when one
     * came, 0, or an error; after the round's steps are emitted, check judges the members'
     * liveness and a stop (progressed: some frame came): 0 goes on, NL_FOLLOW_END ends the run as
     * complete, another positive value ends it with that value, a negative one is the run's
     * error; wait, when nothing came, waits a little for more. */
    int (*serve)(void *ud, int i, struct nl_error *err);
    int (*check)(void *ud, int progressed, struct nl_error *err);
    void (*wait)(void *ud);
    void *ud;
};

/* What the follower keeps of each member; embedded in the driver's own per-member struct, every
 * member_stride bytes from member0. */
struct nl_follow_member {
    long next_step; /* 0-based step of its next METRIC */
    int done;       /* its DONE came */
    struct nl_worker_metrics total;
};

struct nl_follow_slot {
    long step; /* 0-based global step, -1 when free */
    int count, epoch;
    long iter, samples, correct;
    double loss_sum;
    double busy;         /* the slowest member's compute and communication seconds */
    struct nl_metric *w; /* (members) each one's report */
};

struct nl_follow {
    /* Set by the driver before nl_follow_init. */
    struct nl_members_link link;
    int n;      /* members now (a recovery may drop some) */
    int window; /* steps in flight at most, up to NL_FOLLOW_MAX_WINDOW */
    unsigned char *member0;
    size_t member_stride;
    struct nl_model *m;
    const struct nl_dataset *d;
    const struct nl_train_opts *o;
    const struct nl_train_hooks *hooks;
    struct nl_train_result *res;
    /* Recovery (the SSH driver): see the top of this file. */
    int recovering;
    long force_to;
    const float *force_params, *force_state;

    /* Kept by the follower. */
    long iters, next_emit;
    int nstate, judges, epochs_done, pending_epoch, ndone;
    struct nl_follow_slot slots[NL_FOLLOW_MAX_WINDOW];
    struct nl_metric *slot_metrics;   /* (window x members) */
    struct nl_worker_metrics *step_w; /* (members) */
    float *weights;                   /* (nparams) rank 0's latest epoch-end weights */
    float *ckpt_state;                /* (nstate x ntrainable) of the latest checkpoint */
    struct {
        long step;     /* -1: none */
        int count;     /* members whose slice came */
        int params;    /* the parameters came */
        float *state;  /* (nstate x ntrainable) */
        float *values; /* (nparams) */
    } cp;
    long samples, correct, total_samples; /* the epoch's, and the run's */
    double loss, busy, train_seconds;
    struct nl_judge judge;
    double *watched; /* (epochs) each completed epoch's watched accuracy */
};

/* Resets res, checks what the run asks (training samples, the optimizer, a resume point) and
 * sizes the follower for f->n members. */
int nl_follow_init(struct nl_follow *f, struct nl_error *err);
/* Member i's part. */
struct nl_follow_member *nl_follow_member(const struct nl_follow *f, int i);
/* Where the run starts (0, or a resumed run's step): the epochs judged so far, and the
 * optimizer state to start from (NULL: zeros, or none). */
const float *nl_follow_resume(struct nl_follow *f, long *start);
/* Whether member i's next frame may be read now (it is not too far ahead). */
int nl_follow_readable(const struct nl_follow *f, int i);
/* One frame from member i: 0, NL_FOLLOW_HOLD, NL_FOLLOW_OTHER, or an error. */
int nl_follow_frame(struct nl_follow *f, int i, uint32_t type, const unsigned char *pl,
                    uint32_t len, struct nl_error *err);
/* Follows the members until every one is done (0), the link's check ends it (its value; 0 for
 * NL_FOLLOW_END), or an error: rounds of serve, emit, check, wait. */
int nl_follow_run(struct nl_follow *f, struct nl_error *err);
/* Emits, in order, the steps every member reported and the epochs they complete; with force_to
 * (> 0), every step before it as well. */
int nl_follow_emit(struct nl_follow *f, long force_to, struct nl_error *err);
/* The run's end: the test split, res's totals, each member's totals in step_w, the DONE event. */
int nl_follow_finish(struct nl_follow *f, struct nl_error *err);
void nl_follow_release(struct nl_follow *f);

#endif
