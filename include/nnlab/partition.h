/* Co-partitioned data for a cluster run, arranged so that a run on N members is the same
 * mathematics as a run on one (see net/partition.c for why the order is built this way).
 *
 * The driver and every member build the same plan from (ntrain, global batch, members, seed);
 * member r holds the samples nl_partition_global() lists, in that order, as its own train split,
 * and nl_partition_share() gives, for each step, the indices into that local split of its share
 * of the global batch. */
#ifndef NNLAB_PARTITION_H
#define NNLAB_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/dataset.h"
#include "nnlab/error.h"

struct nl_partition;

int nl_partition_new(struct nl_partition **out, uint32_t ntrain, int batch, int size, int rank,
                     uint64_t seed, struct nl_error *err);
void nl_partition_free(struct nl_partition *p);

/* Steps per epoch: ceil(ntrain / batch), the same as a local run's. */
long nl_partition_iters(const struct nl_partition *p);
/* Samples this member holds, and their indices in the full train split, in local order. */
uint32_t nl_partition_count(const struct nl_partition *p);
const uint32_t *nl_partition_global(const struct nl_partition *p);
/* Sets up epoch (1-based): the per-column orders of that epoch. Allocates nothing. */
void nl_partition_epoch(struct nl_partition *p, int epoch);
/* Local indices of this member's share of step it (0-based) of the current epoch, in the order
 * of the global batch; returns their count and sets *global to the whole step's batch size. */
int nl_partition_share(const struct nl_partition *p, long it, uint32_t *idx, int *global);

/* The DATA payload of member r of n (net/proto.h): its samples as stored, then their labels as
 * int32 LE, in the order nl_partition_global() lists them, and the payload's SHA-256 in hex (the
 * name members cache it under). *out is freed with nl_free. */
int nl_partition_payload(const struct nl_dataset *d, int batch, uint64_t seed, int n, int r,
                         unsigned char **out, size_t *len, char hash[65], struct nl_error *err);

/* A dataset holding d's samples idx[0..n) of the train split, in that order, as its train split
 * (no val or test), with d's shape, classes and normalisation. Freed with nl_dataset_free. */
int nl_dataset_subset(struct nl_dataset **out, const struct nl_dataset *d, const uint32_t *idx,
                      uint32_t n, struct nl_error *err);

#endif
