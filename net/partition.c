/* Co-partitioning that keeps a cluster run equal to a one-member run.
 *
 * The choice. A local run reshuffles all samples every epoch and cuts the order into batches; a
 * co-partitioned cluster cannot, since a member holds only its own samples and shipping samples
 * every epoch is what co-partitioning avoids. So the cluster order is built so that the set of
 * samples any member touches never changes, whatever the epoch, while batches still vary:
 *
 *   Let P be the permutation of [0, ntrain) that the seed defines, B the global batch and
 *   R = ceil(ntrain / B) the steps per epoch. Lay P out as a grid of R rows (steps) and B
 *   columns (positions within a batch): cell (b, o) is P[b B + o]; the last row is short when
 *   B does not divide ntrain, so column o has R rows if o < ntrain - (R-1) B, else R - 1.
 *   Epoch e permutes the rows of every column independently: step b of epoch e takes, in
 *   column o, the sample of row pi_{e,o}(b), where pi_{e,o} is a shuffle of that column's rows
 *   seeded by (seed, e, o). Every batch has the local run's size, every sample is seen once per
 *   epoch, and batch compositions change from epoch to epoch.
 *   Member r of N takes the columns [B r / N, B (r+1) / N), the same contiguous shards the
 *   trainer cuts a batch into across threads; its partition is those columns' samples.
 *
 * Because the grid and the shuffles depend only on (ntrain, B, seed), never on N, a step's
 * global batch is the same set of samples on 1, 2 or N members: only where the sums happen
 * changes, so loss curves agree to float summation order. (Dropout masks are drawn per thread,
 * so models with dropout agree in distribution, not sample for sample.) The order differs from
 * a local run's, which keeps its full reshuffle and its bit-for-bit reproducibility. */
#include "nnlab/partition.h"

#include <string.h>

#include "net/crypto.h"
#include "nnlab/alloc.h"
#include "nnlab/rng.h"

struct nl_partition {
    uint32_t ntrain;
    int batch, size, rank;
    uint64_t seed;
    long rows;          /* steps per epoch */
    int last;           /* columns in the last row */
    int col_lo, col_hi; /* this member's columns */
    uint32_t count;     /* samples held */
    uint32_t *global;   /* (count) train indices, column after column */
    uint32_t *offset;   /* (col_hi - col_lo) where each column starts in local order */
    uint32_t *perm;     /* (count) the current epoch's row order of each column */
};

static long col_rows(const struct nl_partition *p, int o)
{
    return o < p->last ? p->rows : p->rows - 1;
}

void nl_partition_free(struct nl_partition *p)
{
    if (!p)
        return;
    nl_free(p->global);
    nl_free(p->offset);
    nl_free(p->perm);
    nl_free(p);
}

int nl_partition_new(struct nl_partition **out, uint32_t ntrain, int batch, int size, int rank,
                     uint64_t seed, struct nl_error *err)
{
    struct nl_partition *p;
    uint32_t *all = NULL;
    struct nl_rng rng;

    *out = NULL;
    if (ntrain == 0 || batch < 1 || size < 1 || rank < 0 || rank >= size)
        return nl_error_set(err, NL_EINVAL,
                            "cannot partition %u samples in batches of %d for member %d of %d",
                            ntrain, batch, rank, size);
    p = nl_calloc(1, sizeof *p);
    if (!p)
        return nl_error_set(err, NL_ENOMEM, "out of memory for a partition");
    p->ntrain = ntrain;
    p->batch = batch;
    p->size = size;
    p->rank = rank;
    p->seed = seed;
    p->rows = ((long)ntrain + batch - 1) / batch;
    p->last = (int)((long)ntrain - (p->rows - 1) * batch);
    p->col_lo = (int)((long)batch * rank / size);
    p->col_hi = (int)((long)batch * (rank + 1) / size);
    for (int o = p->col_lo; o < p->col_hi; o++)
        p->count += (uint32_t)col_rows(p, o);
    all = nl_calloc(ntrain, sizeof *all);
    p->global = nl_calloc((size_t)p->count + 1, sizeof *p->global);
    p->offset = nl_calloc((size_t)(p->col_hi - p->col_lo) + 1, sizeof *p->offset);
    p->perm = nl_calloc((size_t)p->count + 1, sizeof *p->perm);
    if (!all || !p->global || !p->offset || !p->perm) {
        nl_free(all);
        nl_partition_free(p);
        return nl_error_set(err, NL_ENOMEM, "out of memory for a partition of %u samples", ntrain);
    }
    nl_rng_seed(&rng, nl_rng_partition_seed(seed));
    for (uint32_t i = 0; i < ntrain; i++)
        all[i] = i;
    nl_rng_shuffle(&rng, all, ntrain);
    uint32_t k = 0;
    for (int o = p->col_lo; o < p->col_hi; o++) {
        p->offset[o - p->col_lo] = k;
        for (long b = 0; b < col_rows(p, o); b++)
            p->global[k++] = all[(size_t)b * (size_t)batch + (size_t)o];
    }
    nl_free(all);
    nl_partition_epoch(p, 1);
    *out = p;
    return 0;
}

long nl_partition_iters(const struct nl_partition *p)
{
    return p->rows;
}

uint32_t nl_partition_count(const struct nl_partition *p)
{
    return p->count;
}

const uint32_t *nl_partition_global(const struct nl_partition *p)
{
    return p->global;
}

void nl_partition_epoch(struct nl_partition *p, int epoch)
{
    struct nl_rng rng;

    for (int o = p->col_lo; o < p->col_hi; o++) {
        uint32_t *perm = p->perm + p->offset[o - p->col_lo];
        const long rows = col_rows(p, o);
        nl_rng_seed(&rng, nl_rng_column_seed(p->seed, epoch, o));
        for (long b = 0; b < rows; b++)
            perm[b] = (uint32_t)b;
        nl_rng_shuffle(&rng, perm, (size_t)rows);
    }
}

int nl_partition_share(const struct nl_partition *p, long it, uint32_t *idx, int *global)
{
    int n = 0;

    *global = it == p->rows - 1 ? p->last : p->batch;
    for (int o = p->col_lo; o < p->col_hi && o < *global; o++) {
        const uint32_t off = p->offset[o - p->col_lo];
        idx[n++] = off + p->perm[off + (uint32_t)it];
    }
    return n;
}

int nl_dataset_subset(struct nl_dataset **out, const struct nl_dataset *d, const uint32_t *idx,
                      uint32_t n, struct nl_error *err)
{
    struct nl_dataset *s = nl_calloc(1, sizeof *s);
    const size_t sample = nl_shape_size(d->shape) * (d->dtype == NL_U8 ? 1 : sizeof(float));
    int ok = s != NULL;

    *out = NULL;
    if (ok) {
        s->name = nl_strdup(d->name);
        s->source = nl_strdup(d->source ? d->source : "");
        s->kind = nl_strdup(d->kind ? d->kind : "");
        s->shape = d->shape;
        s->dtype = d->dtype;
        s->nclasses = d->nclasses;
        s->nvocab = d->nvocab; /* the size only: the words stay with the dataset */
        s->nnorm = d->nnorm;
        s->class_names = nl_calloc((size_t)d->nclasses, sizeof *s->class_names);
        s->mean = nl_calloc((size_t)d->nnorm + 1, sizeof(float));
        s->std = nl_calloc((size_t)d->nnorm + 1, sizeof(float));
        s->split[NL_TRAIN].x = nl_malloc((size_t)n * sample + 1);
        s->split[NL_TRAIN].y = nl_calloc((size_t)n + 1, sizeof(int32_t));
        ok = s->name && s->source && s->kind && s->class_names && s->mean && s->std &&
             s->split[NL_TRAIN].x && s->split[NL_TRAIN].y;
    }
    for (int k = 0; ok && k < d->nclasses; k++) {
        s->class_names[k] = nl_strdup(d->class_names ? d->class_names[k] : "");
        ok = s->class_names[k] != NULL;
    }
    if (!ok) {
        nl_dataset_free(s);
        return nl_error_set(err, NL_ENOMEM, "out of memory for a partition of %u samples", n);
    }
    memcpy(s->mean, d->mean, (size_t)d->nnorm * sizeof(float));
    memcpy(s->std, d->std, (size_t)d->nnorm * sizeof(float));
    for (uint32_t i = 0; i < n; i++) {
        if (idx[i] >= d->split[NL_TRAIN].n) {
            nl_dataset_free(s);
            return nl_error_set(err, NL_EINVAL, "sample %u is past the %u of '%s'", idx[i],
                                d->split[NL_TRAIN].n, d->name);
        }
        memcpy((unsigned char *)s->split[NL_TRAIN].x + (size_t)i * sample,
               (const unsigned char *)d->split[NL_TRAIN].x + (size_t)idx[i] * sample, sample);
        s->split[NL_TRAIN].y[i] = d->split[NL_TRAIN].y[idx[i]];
    }
    s->split[NL_TRAIN].n = n;
    *out = s;
    return 0;
}

int nl_partition_payload(const struct nl_dataset *d, int batch, uint64_t seed, int n, int r,
                         unsigned char **out, size_t *len, char hash[65], struct nl_error *err)
{
    struct nl_partition *part;
    int rc = nl_partition_new(&part, d->split[NL_TRAIN].n, batch, n, r, seed, err);
    if (rc < 0)
        return rc;
    const uint32_t count = nl_partition_count(part);
    const uint32_t *idx = nl_partition_global(part);
    const size_t sample = nl_shape_size(d->shape) * (d->dtype == NL_U8 ? 1 : sizeof(float));
    *len = (size_t)count * (sample + 4);
    *out = nl_malloc(*len + 1);
    if (!*out) {
        nl_partition_free(part);
        return nl_error_set(err, NL_ENOMEM, "out of memory for a partition");
    }
    for (uint32_t i = 0; i < count; i++) {
        memcpy(*out + (size_t)i * sample,
               (const unsigned char *)d->split[NL_TRAIN].x + (size_t)idx[i] * sample, sample);
        /* A regression sample's label is its standardised target's bits (net/proto.h). */
        uint32_t y = (uint32_t)d->split[NL_TRAIN].y[idx[i]];
        if (d->regression)
            memcpy(&y, &d->split[NL_TRAIN].t[idx[i]], sizeof y);
        unsigned char *q = *out + (size_t)count * sample + 4 * (size_t)i;
        q[0] = (unsigned char)y;
        q[1] = (unsigned char)(y >> 8);
        q[2] = (unsigned char)(y >> 16);
        q[3] = (unsigned char)(y >> 24);
    }
    nl_partition_free(part);
    nl_sha256_hex(hash, *out, *len);
    return 0;
}
