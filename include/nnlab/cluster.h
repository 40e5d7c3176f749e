/* One member of a cluster run, as the trainer sees it: a gradient synchroniser (nl_sync) built
 * from the member's partition and the allreduce, which also measures what the member spends on
 * communication. */
#ifndef NNLAB_CLUSTER_H
#define NNLAB_CLUSTER_H

#include "nnlab/allreduce.h"
#include "nnlab/mesh.h"
#include "nnlab/partition.h"
#include "nnlab/trainer.h"

struct nl_member_sync {
    struct nl_sync sync; /* give &s->sync to nl_train_opts.sync */
    struct nl_partition *part;
    struct nl_allreduce *ar;
    struct nl_mesh *mesh;
    int epoch;                     /* of the partition's current order */
    double comm_seconds;           /* in the allreduce, all steps so far */
    double last_comm_seconds;      /* of the last step */
    unsigned long long last_bytes; /* sent during the last step */
    /* Recovery: a copy of the complete parameters after the last completed step (NULL: none
     * kept), that step, and whether a step failed (the allreduce lost a peer or was called off). */
    float *keep;
    size_t nkeep;
    long done;
    int failed;
};

/* Ties the pieces together; they stay the caller's. */
void nl_member_sync_init(struct nl_member_sync *s, struct nl_partition *part,
                         struct nl_allreduce *ar, struct nl_mesh *mesh);

/* Keeps a copy of params (n floats, the caller's buffer keep) after every completed step, from
 * `done` completed steps on. */
void nl_member_sync_keep(struct nl_member_sync *s, float *keep, const float *params, size_t n,
                         long done);

#endif
