/* xoshiro256** seeded through splitmix64 (both public domain algorithms by Blackman and Vigna), and
 * the reproducibility rules: which seed each generator of a run takes, and the block split of work.
 */
#include "nnlab/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void nl_rng_seed(struct nl_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

uint64_t nl_rng_next(struct nl_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float nl_rng_uniform(struct nl_rng *r)
{
    return (float)(nl_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

float nl_rng_normal(struct nl_rng *r)
{
    double u1 = ((double)(nl_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(nl_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint32_t nl_rng_below(struct nl_rng *r, uint32_t n)
{
    /* Lemire's multiply-and-reject: unbiased without a division on the common path. */
    uint64_t m = (uint64_t)(uint32_t)(nl_rng_next(r) >> 32) * n;
    uint32_t low = (uint32_t)m;

    if (low < n) {
        uint32_t threshold = (uint32_t)(-n) % n;
        while (low < threshold) {
            m = (uint64_t)(uint32_t)(nl_rng_next(r) >> 32) * n;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

void nl_rng_shuffle(struct nl_rng *r, uint32_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        uint32_t j = nl_rng_below(r, (uint32_t)i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* The constants are splitmix64's increment (the golden ratio) and FNV-1a's 64-bit prime: any odd
 * multipliers would do, these are the ones every stored run and checkpoint was made with. */
#define GOLDEN    0x9e3779b97f4a7c15ULL
#define FNV_PRIME 0x100000001b3ULL

uint64_t nl_rng_epoch_seed(uint64_t seed, int epoch)
{
    return seed * GOLDEN + (uint64_t)epoch;
}

uint64_t nl_rng_partition_seed(uint64_t seed)
{
    return seed * GOLDEN ^ 0x5eed0fc1u;
}

uint64_t nl_rng_column_seed(uint64_t seed, int epoch, int column)
{
    return (seed * FNV_PRIME + (uint64_t)epoch) * GOLDEN + (uint64_t)column;
}

uint64_t nl_rng_step_seed(uint64_t seed, long step, int t, int nth)
{
    return (seed ^ 0xd1b54a32d192ed03ULL) * FNV_PRIME + (uint64_t)step * (uint64_t)nth +
           (uint64_t)t;
}

void nl_block_range(size_t n, size_t block, int t, int nth, size_t *lo, size_t *hi)
{
    const size_t blocks = (n + block - 1) / block;
    const size_t l = blocks * (size_t)t / (size_t)nth * block;
    const size_t h = blocks * (size_t)(t + 1) / (size_t)nth * block;

    *lo = l < n ? l : n;
    *hi = h < n ? h : n;
}
