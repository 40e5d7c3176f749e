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

#endif
