/* One member of a cluster run, as the trainer sees it: a gradient synchroniser (nl_sync) built
 * from the member's partition and the allreduce, which also measures what the member spends on
 * communication. */
#ifndef NNLAB_CLUSTER_H
#define NNLAB_CLUSTER_H

#include "nnlab/allreduce.h"
#include "nnlab/mesh.h"
#include "nnlab/partition.h"
#include "nnlab/trainer.h"

/* --overlap auto's measurement (nl_member_sync_probe). Steps before `from` (1-based) run in the
 * mode `warm`; from `from` on, `rounds` blocks of `block` steps of each mode, in the Thue-Morse
 * order synchronous, overlapped, overlapped, synchronous, overlapped, synchronous, synchronous,
 * overlapped, ...; the wall time (from its share to the end of its exchange) of each step but a
 * block's first goes to sync or ov. After the last measured step every member takes its medians,
 * the members exchange them (nl_allreduce_agree) and all decide alike
 * (nl_worker_overlap_decide): the rest of the run overlaps or not. */
#define NL_PROBE_MAX 32
struct nl_overlap_probe {
    long from; /* 0: no measurement */
    int block, rounds, warm;
    int rank, size;
    double t0; /* when the step under way began */
    double sync[NL_PROBE_MAX], ov[NL_PROBE_MAX];
    int nsync, nov;
    /* The choice, once made (decided): after step `step` the run overlaps or not; the members'
     * mean median step seconds of each mode. */
    int decided, overlapped;
    long step;
    double sync_seconds, overlap_seconds;
};

struct nl_member_sync {
    struct nl_sync sync; /* give &s->sync to nl_train_opts.sync */
    struct nl_partition *part;
    struct nl_allreduce *ar;
    struct nl_mesh *mesh;
    int epoch; /* of the partition's current order */
    /* Communication the computation did not hide (nl_allreduce_wait_seconds), all steps so far
     * and the last; and the whole exchange (nl_allreduce_exchange_seconds), hidden or not. */
    double comm_seconds, last_comm_seconds;
    double exchange_seconds, last_exchange_seconds;
    double early_fraction;           /* nl_allreduce_early_fraction, summed over the steps so far */
    unsigned long long last_bytes;   /* sent during the last step */
    unsigned long long bytes_before; /* sent before the step under way */
    /* Recovery: a copy of the complete parameters after the last completed step (NULL: none
     * kept), that step, and whether a step failed (the allreduce lost a peer or was called off).
     * The copy is taken when the next step asks for its share, so that it holds the batch
     * statistics the trainer updates after a step. */
    float *keep;
    const float *params;
    size_t nkeep;
    long done, kept;
    int failed;
    /* Judging (nl_member_sync_judge): where the watched accuracy of an epoch comes from. */
    int (*judge)(void *ud, int epoch, double *watched, struct nl_error *err);
    void *judge_ud;
    struct nl_overlap_probe probe;
};

/* Ties the pieces together; they stay the caller's (mesh may be NULL: an MPI member's). Bytes
 * sent are counted on the allreduce's transport. The exchange overlaps the backward pass
 * when the allreduce was made with overlap. */
void nl_member_sync_init(struct nl_member_sync *s, struct nl_partition *part,
                         struct nl_allreduce *ar, struct nl_mesh *mesh);

/* Keeps a copy of params (n floats, the caller's buffer keep) after every completed step, from
 * `done` completed steps on. */
void nl_member_sync_keep(struct nl_member_sync *s, float *keep, const float *params, size_t n,
                         long done);
/* Brings the copy up to the last completed step (the trainer is between steps). */
void nl_member_sync_settle(struct nl_member_sync *s);

/* Measures, then chooses, whether the member's steps overlap (see struct nl_overlap_probe): the
 * allreduce must have been made with overlap; every member of the run (rank of size) calls it
 * alike. The probe's steps are from, then 2 x block x rounds (block at least 2; rounds fewer
 * where (block - 1) x rounds, the measured steps of a mode, would exceed NL_PROBE_MAX). */
void nl_member_sync_probe(struct nl_member_sync *s, int rank, int size, long from, int block,
                          int rounds, int warm);

/* The probe's mode for step n (1-based): 1 overlapped, 0 synchronous; and 1 when step n's time
 * is one of those measured (a step of a block but its first). Pure functions of p and n. */
int nl_overlap_probe_mode(const struct nl_overlap_probe *p, long n);
int nl_overlap_probe_measures(const struct nl_overlap_probe *p, long n);

/* Lets the member follow a run's watched accuracy (include/nnlab/trainer.h): at an epoch's end
 * the synchroniser brings its copy of the parameters up to date (a recovery may start from
 * there) and asks judge(ud, ...) for the epoch's value. A judge that returns NL_ECANCELED (the
 * driver called the run's step off) sets s->failed, as a failed step does. */
void nl_member_sync_judge(struct nl_member_sync *s,
                          int (*judge)(void *ud, int epoch, double *watched, struct nl_error *err),
                          void *ud);

#endif
