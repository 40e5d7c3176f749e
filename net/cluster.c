/* A cluster member's gradient synchroniser: the partition gives each step's share, the
 * allreduce the step itself, overlapped with the backward pass when the allreduce has its
 * communication thread. See include/nnlab/cluster.h. */
#include "nnlab/cluster.h"

#include <string.h>

#include "nnlab/alloc.h"
#include "nnlab/clock.h"
#include "nnlab/worker.h"

void nl_member_sync_settle(struct nl_member_sync *s)
{
    if (s->keep && s->kept != s->done) {
        memcpy(s->keep, s->params, s->nkeep * sizeof(float));
        s->kept = s->done;
    }
}

static int share(void *ud, int epoch, long iter, uint32_t *idx, int *global)
{
    struct nl_member_sync *s = ud;
    nl_member_sync_settle(s);
    if (epoch != s->epoch) {
        nl_partition_epoch(s->part, epoch);
        s->epoch = epoch;
    }
    s->probe.t0 = nl_now();
    return nl_partition_share(s->part, iter, idx, global);
}

static int begin(void *ud, float *params, float *grad, long n, float lr)
{
    struct nl_member_sync *s = ud;
    s->bytes_before = nl_allreduce_bytes_sent(s->ar);
    return nl_allreduce_begin(s->ar, params, grad, n, lr);
}

static void ready(void *ud, size_t from, size_t stats_from)
{
    struct nl_member_sync *s = ud;
    nl_allreduce_ready(s->ar, from, stats_from);
}

int nl_overlap_probe_mode(const struct nl_overlap_probe *p, long n)
{
    if (p->decided)
        return p->overlapped;
    if (n < p->from || n >= p->from + 2L * p->block * p->rounds)
        return p->warm;
    /* Block b's mode is the parity of b's set bits (the Thue-Morse sequence): S O O S O S S O
     * ..., each pair of blocks one of each mode, and over 2^k blocks the positions of either
     * mode have the same sum, and the same sum of squares for k >= 3: a load that changes
     * linearly or quadratically through the measurement weighs on both modes alike. */
    int bit = 0;
    for (long b = (n - p->from) / p->block; b; b &= b - 1)
        bit ^= 1;
    return bit;
}

int nl_overlap_probe_measures(const struct nl_overlap_probe *p, long n)
{
    return p->from > 0 && n > p->from && n < p->from + 2L * p->block * p->rounds &&
           (n - p->from) % p->block != 0;
}

static int overlaps(void *ud, long n)
{
    struct nl_member_sync *s = ud;
    const int on = nl_overlap_probe_mode(&s->probe, n);
    nl_allreduce_set_overlap(s->ar, on);
    return on;
}

/* After step n: its time, and after the last measured step the members' choice. */
static int probe_step(struct nl_member_sync *s, long n, struct nl_error *err)
{
    struct nl_overlap_probe *p = &s->probe;
    const long end = p->from + 2L * p->block * p->rounds;

    if (p->decided || n < p->from || n >= end)
        return 0;
    const double t = nl_now() - p->t0;
    const int measured = nl_overlap_probe_measures(p, n);
    if (measured && nl_allreduce_overlaps(s->ar) && p->nov < NL_PROBE_MAX)
        p->ov[p->nov++] = t;
    else if (measured && !nl_allreduce_overlaps(s->ar) && p->nsync < NL_PROBE_MAX)
        p->sync[p->nsync++] = t;
    if (n != end - 1)
        return 0;
    /* Once in a run: the members' medians, NL_ALLREDUCE_TIMES each. */
    double *all = nl_calloc((size_t)p->size * NL_ALLREDUCE_TIMES, sizeof *all);
    if (!all)
        return nl_error_set(err, NL_ENOMEM, "out of memory for the step times of %d members",
                            p->size);
    all[NL_ALLREDUCE_TIMES * p->rank] = nl_worker_median(p->sync, p->nsync);
    all[NL_ALLREDUCE_TIMES * p->rank + 1] = nl_worker_median(p->ov, p->nov);
    int rc = nl_allreduce_agree(s->ar, all, err);
    if (rc == 0)
        p->overlapped =
            nl_worker_overlap_decide(all, p->size, &p->sync_seconds, &p->overlap_seconds);
    nl_free(all);
    if (rc < 0)
        return rc;
    p->step = n;
    p->decided = 1;
    return 0;
}

static int step(void *ud, float *params, float *grad, long n, float lr, struct nl_error *err)
{
    struct nl_member_sync *s = ud;
    int rc;

    if (s->sync.begin && nl_allreduce_overlaps(s->ar)) {
        rc = nl_allreduce_finish(s->ar, err);
    } else {
        s->bytes_before = nl_allreduce_bytes_sent(s->ar);
        rc = nl_allreduce_step(s->ar, params, grad, n, lr, err);
    }
    s->last_comm_seconds = nl_allreduce_wait_seconds(s->ar);
    s->comm_seconds += s->last_comm_seconds;
    s->last_exchange_seconds = nl_allreduce_exchange_seconds(s->ar);
    s->exchange_seconds += s->last_exchange_seconds;
    s->early_fraction += nl_allreduce_early_fraction(s->ar);
    s->last_bytes = nl_allreduce_bytes_sent(s->ar) - s->bytes_before;
    if (rc == 0)
        s->done = n; /* its exchange completed, whatever the probe meets after it */
    if (rc == 0 && s->sync.overlaps)
        rc = probe_step(s, n, err);
    if (rc < 0)
        s->failed = 1;
    return rc;
}

static int judge(void *ud, int epoch, double *watched, struct nl_error *err)
{
    struct nl_member_sync *s = ud;
    nl_member_sync_settle(s);
    int rc = s->judge(s->judge_ud, epoch, watched, err);
    if (rc == NL_ECANCELED)
        s->failed = 1;
    return rc;
}

void nl_member_sync_judge(struct nl_member_sync *s,
                          int (*fn)(void *ud, int epoch, double *watched, struct nl_error *err),
                          void *ud)
{
    s->judge = fn;
    s->judge_ud = ud;
    s->sync.judge = fn ? judge : NULL;
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
    if (nl_allreduce_overlaps(ar)) {
        s->sync.begin = begin;
        s->sync.ready = ready;
    }
    s->sync.ud = s;
}

void nl_member_sync_probe(struct nl_member_sync *s, int rank, int size, long from, int block,
                          int rounds, int warm)
{
    struct nl_overlap_probe *p = &s->probe;
    memset(p, 0, sizeof *p);
    p->rank = rank;
    p->size = size;
    p->from = from;
    p->block = block < 2 ? 2 : block;
    p->rounds = (p->block - 1) * rounds > NL_PROBE_MAX ? NL_PROBE_MAX / (p->block - 1) : rounds;
    p->warm = warm;
    s->sync.overlaps = overlaps;
}

void nl_member_sync_keep(struct nl_member_sync *s, float *keep, const float *params, size_t n,
                         long done)
{
    s->keep = keep;
    s->params = params;
    s->nkeep = n;
    s->done = s->kept = done;
    memcpy(keep, params, n * sizeof(float));
}
