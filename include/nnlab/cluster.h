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
    int epoch; /* of the partition's current order */
    /* Communication the computation did not hide (nl_allreduce_wait_seconds), all steps so far
     * and the last; and the whole exchange (nl_allreduce_exchange_seconds), hidden or not. */
    double comm_seconds, last_comm_seconds;
    double exchange_seconds, last_exchange_seconds;
    double early_fraction;           /* nl_allreduce_early_fraction, summed over the steps so far */
    unsigned long long last_bytes;   /* sent during the last step */
    unsigned long long bytes_before; /* sent before the step under way */
};

/* Ties the pieces together; they stay the caller's. The exchange overlaps the backward pass
 * when the allreduce was made with overlap. */
void nl_member_sync_init(struct nl_member_sync *s, struct nl_partition *part,
                         struct nl_allreduce *ar, struct nl_mesh *mesh);

#endif
