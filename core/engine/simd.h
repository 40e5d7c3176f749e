/* AVX-512 helpers shared by the kernels (kernels.c) and the Winograd transforms (winograd.c).
 * Internal to core/engine; what is marked AVX512 runs only where the CPU has AVX-512, with
 * scalar twins beside it. */
#ifndef NNLAB_ENGINE_SIMD_H
#define NNLAB_ENGINE_SIMD_H

#include <immintrin.h>

#include "nnlab/kernels.h"

#define AVX512 __attribute__((target("avx512f")))

/* The lanes [lo, hi) of 16, clamped to [0, 16). */
static inline __mmask16 lanes(int lo, int hi)
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > 16 ? 16 : hi;
    return hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

/* act (NL_ACT_*) of the 16 lanes of v, selecting as the scalar twins compare: 0 where v > 0 is
 * false (NaN included), then 6 where v < 6 is false. */
AVX512 static inline __attribute__((always_inline)) __m512 act_avx512(__m512 v, int act)
{
    if (act == NL_ACT_NONE)
        return v;
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
    if (act == NL_ACT_RELU6) {
        const __m512 six = _mm512_set1_ps(6.0f);
        v = _mm512_mask_mov_ps(six, _mm512_cmp_ps_mask(v, six, _CMP_LT_OQ), v);
    }
    return v;
}

#endif
