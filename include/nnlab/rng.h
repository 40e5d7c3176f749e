/* A small portable random generator (xoshiro256**, seeded with splitmix64): the same seed gives the
 * same stream on every machine, so shuffles, initialisation and dropout are reproducible. */
#ifndef NNLAB_RNG_H
#define NNLAB_RNG_H

#include <stddef.h>
#include <stdint.h>

struct nl_rng {
    uint64_t s[4];
};

void nl_rng_seed(struct nl_rng *r, uint64_t seed);
uint64_t nl_rng_next(struct nl_rng *r);
/* Uniform in [0, 1). */
float nl_rng_uniform(struct nl_rng *r);
/* Standard normal (Box-Muller). */
float nl_rng_normal(struct nl_rng *r);
/* Uniform integer in [0, n), unbiased; n > 0. */
uint32_t nl_rng_below(struct nl_rng *r, uint32_t n);
/* Fisher-Yates shuffle of a[0..n). */
void nl_rng_shuffle(struct nl_rng *r, uint32_t *a, size_t n);

/* Reproducibility rules. A run's results follow from its seed alone, whatever the machine, the
 * thread count of the reduction or a resume in between: every generator a run seeds takes its seed
 * from one of these, and every split of work that decides an order of summation is a block range.
 *
 *   nl_rng_epoch_seed(seed, epoch)      a local run's data order of that epoch (1-based), and the
 *                                       generator a checkpoint stores for the epoch it goes on in
 *   nl_rng_partition_seed(seed)         a cluster run's split of the training set into columns
 *   nl_rng_column_seed(seed, epoch, o)  a cluster run's order of column o in that epoch
 *   nl_rng_step_seed(seed, step, t, nth) thread t of nth's generator (dropout, augmentation) in
 *                                       that step (1-based, counted over the whole run) */
uint64_t nl_rng_epoch_seed(uint64_t seed, int epoch);
uint64_t nl_rng_partition_seed(uint64_t seed);
uint64_t nl_rng_column_seed(uint64_t seed, int epoch, int column);
uint64_t nl_rng_step_seed(uint64_t seed, long step, int t, int nth);

/* Part t of nth of the range [0, n) split in whole blocks of `block` elements (as ggml's ith/nth):
 * [*lo, *hi), the last part ending at n. Parts differ by at most one block; with block 16 no two
 * parts of a float array share a 64-byte cache line. block 1 is an even split of n items. */
void nl_block_range(size_t n, size_t block, int t, int nth, size_t *lo, size_t *hi);

#endif
