/* A cluster member's gradient synchroniser: the partition gives each step's share, the
 * allreduce the step itself. See include/nnlab/cluster.h. */
#include "nnlab/cluster.h"

#include <string.h>

static int share(void *ud, int epoch, long iter, uint32_t *idx, int *global)
{
    struct nl_member_sync *s = ud;
    if (epoch != s->epoch) {
        nl_partition_epoch(s->part, epoch);
        s->epoch = epoch;
    }
    return nl_partition_share(s->part, iter, idx, global);
}

static int step(void *ud, float *params, const float *grad, long n, float lr, struct nl_error *err)
{
    struct nl_member_sync *s = ud;
    const unsigned long long before = nl_mesh_bytes_sent(s->mesh);
    int rc = nl_allreduce_step(s->ar, params, grad, n, lr, err);

    s->last_comm_seconds = nl_allreduce_exchange_seconds(s->ar);
    s->comm_seconds += s->last_comm_seconds;
    s->last_bytes = nl_mesh_bytes_sent(s->mesh) - before;
    if (rc < 0) {
        s->failed = 1;
        return rc;
    }
    if (s->keep)
        memcpy(s->keep, params, s->nkeep * sizeof(float));
    s->done = n;
    return rc;
}

void nl_member_sync_init(struct nl_member_sync *s, struct nl_partition *part,
                         struct nl_allreduce *ar, struct nl_mesh *mesh)
{
    memset(s, 0, sizeof *s);
    s->part = part;
    s->ar = ar;
    s->mesh = mesh;
    s->epoch = 1;
    s->sync.iters = nl_partition_iters(part);
    s->sync.share = share;
    s->sync.step = step;
    s->sync.ud = s;
}

void nl_member_sync_keep(struct nl_member_sync *s, float *keep, const float *params, size_t n,
                         long done)
{
    s->keep = keep;
    s->nkeep = n;
    s->done = done;
    memcpy(keep, params, n * sizeof(float));
}
