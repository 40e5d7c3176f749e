/* Dense kernels: matrix product through OpenBLAS and the im2col/col2im pair that turns a
 * convolution into one. Each fast path has a naive twin here or in tests/test_kernels.c that the
 * tests compare it against. All matrices are row-major float.
 *
 * Vector paths: nnlab is built for the baseline x86-64 (SSE2), and GCC at -O2 vectorises few
 * loops, so the row copies of im2col/col2im and the ReLU passes ran one float at a time. Where
 * the CPU has AVX-512 (F), these run in 16-float vectors, with masked loads and stores for the
 * rows' ends and the padding (short rows such as ResNet-18's 8 or 4 columns are one masked
 * operation); a stride of 2 takes the even lanes of two loads. They copy, or add one term to,
 * each element, as the scalar loops do, so the results are the same bit for bit; the scalar
 * loops stay for other CPUs and as the twins the tests compare against. */
#include "nnlab/kernels.h"

#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nnlab/conv_gemm.h"
#include "simd.h"

#ifndef OPENBLAS_VERSION
void openblas_set_num_threads(int num_threads);
#endif
char *openblas_get_corename(void);
/* Only a DYNAMIC_ARCH OpenBLAS (Debian's) has these; weak, so another build links too. */
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));

static char blas_note[160];

/* The kernels an OpenBLAS built for many CPUs (DYNAMIC_ARCH) runs are chosen from the CPU's
 * family and model numbers. A CPU newer than the library (OpenBLAS 0.3.21 in Debian 12 does not
 * know Sapphire or Emerald Rapids), or one whose model a hypervisor hides, gets the generic
 * Prescott (SSE3) kernels: sgemm 4-5 times slower than the CPU's AVX-512 can run it. When the
 * user has not chosen (OPENBLAS_CORETYPE unset) and the library fell back to such a generic core
 * while the CPU's feature flags show AVX-512 (F, CD, BW, DQ, VL) or AVX2 with FMA, the core is
 * chosen again, SkylakeX or Haswell, before any product runs. The choice is said by
 * nl_kernels_blas_note() (`nnlab bench` prints it). */
static void choose_blas_core(void)
{
    static const char *const generic[] = {"Prescott", "Core2",    "Penryn",      "Dunnington",
                                          "Nehalem",  "Atom",     "Sandybridge", "Katmai",
                                          "Banias",   "Northwood"};
    const char *core = openblas_get_corename();
    snprintf(blas_note, sizeof blas_note, "OpenBLAS %s kernels", core ? core : "(unknown)");
    if (!core || getenv("OPENBLAS_CORETYPE") || !gotoblas_dynamic_init || !gotoblas_dynamic_quit)
        return;
    int is_generic = 0;
    for (size_t i = 0; i < sizeof generic / sizeof *generic; i++)
        is_generic |= strcmp(core, generic[i]) == 0;
    const char *want = NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        want = "Haswell";
    if (!is_generic || !want || strcmp(core, want) == 0)
        return;
    char was[32];
    snprintf(was, sizeof was, "%s", core);
    setenv("OPENBLAS_CORETYPE", want, 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
    core = openblas_get_corename();
    snprintf(blas_note, sizeof blas_note,
             "OpenBLAS %s kernels (the library took this CPU for %s; its flags say %s)",
             core ? core : "(unknown)", was, strcmp(want, "SkylakeX") == 0 ? "AVX-512" : "AVX2");
}

/* Whether OpenBLAS runs kernels with a small-matrix path (SkylakeX, Cooperlake, Sapphire Rapids),
 * set by nl_kernels_init. */
static int small_path;

/* Whether OpenBLAS runs kernels without AVX-512 on a CPU that has it, set by nl_kernels_init:
 * where the user chose them (OPENBLAS_CORETYPE=Haswell, as some sites set on AMD's Zen 5, whose
 * AVX-512 older OpenBLAS builds mistook), sgemm runs at half the rate the CPU allows. Then
 * nl_sgemm's products go to nnlab's own AVX-512 kernels (nl_sgemm_own). */
static int narrow_blas;

/* 1 where the AVX-512 paths run: set by nl_kernels_init (before any other thread), changed by
 * nl_kernels_vector for tests and benchmarks. */
static int vector_on;

static int cpu_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

int nl_kernels_vector(int on)
{
    vector_on = on && cpu_has_avx512();
    return vector_on;
}

int nl_kernels_vector_on(void)
{
    return vector_on;
}

void nl_kernels_init(void)
{
    vector_on = cpu_has_avx512();
    choose_blas_core();
    const char *core = openblas_get_corename();
    small_path =
        core && (strcasecmp(core, "SkylakeX") == 0 || strcasecmp(core, "Cooperlake") == 0 ||
                 strcasecmp(core, "SapphireRapids") == 0);
    narrow_blas = core && vector_on && !small_path;
    if (narrow_blas) {
        size_t used = strlen(blas_note);
        snprintf(blas_note + used, sizeof blas_note - used,
                 "; its products with alpha 1 run nnlab's AVX-512 kernels");
    }
    /* The trainer runs one shard per thread; a BLAS call must not start threads of its own. */
    openblas_set_num_threads(1);
}

const char *nl_kernels_blas_note(void)
{
    return blas_note;
}

int nl_sgemm_own(float beta)
{
    return narrow_blas && vector_on && (beta == 0.0f || beta == 1.0f);
}

/* c (m, n) = alpha * op(a) op(b) + beta * c. With beta == 0, c is written without being read, as
 * BLAS does, so c may hold anything (NaN included) on entry. */
void nl_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        /* An empty sum; OpenBLAS would return without scaling c. */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return;
    }
    if (alpha == 1.0f && !(trans_a && trans_b) && nl_sgemm_own(beta)) {
        if (trans_b)
            nl_pgemm_nt(m, n, k, a, lda, b, ldb, beta != 0.0f, c, ldc);
        else
            nl_pgemm_rows(trans_a, m, n, k, a, lda, b, ldb, beta != 0.0f, c, ldc);
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Rows a multiple of 16 (the small-matrix kernels' tile height): OpenBLAS 0.3.21 on the AMD EPYC
 * of README's figures, one thread, 16 different products in turn (Winograd's), GFLOP/s whole
 * against blocks of 32 rows: (256, 64, 256) a b 88.6 against 106.9, a^T b 91.1 against 111.5;
 * (256, 256, 64) 94.0 against 109.6 and 94.2 against 107.5; (128, 64, 128) in blocks of 64, 92.4
 * against 114.2; a b^T, which the blocks do not take, 92.5 against 73.2. Blocks of 64 rows of
 * (256, 64, 256), past the bound, ran at 81.7: packed again. */
int nl_sgemm_rows_block(int m, int n, int k)
{
    const double per = (double)n * (double)k;
    int rows = (int)(NL_SGEMM_SMALL / per) & ~15;

    if (!small_path || m * per <= NL_SGEMM_SMALL || rows < 16)
        return m;
    return rows;
}

void nl_sgemm_rows(int trans_a, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, float beta, float *c, int ldc)
{
    const int rows = nl_sgemm_rows_block(m, n, k);

    for (int r0 = 0; r0 < m; r0 += rows) {
        const int r = m - r0 < rows ? m - r0 : rows;
        const float *ar = trans_a ? a + r0 : a + (size_t)r0 * lda;
        nl_sgemm(trans_a, 0, r, n, k, 1.0f, ar, lda, b, ldb, beta, c + (size_t)r0 * ldc, ldc);
    }
}

/* The reference: one dot product per element of c, summed in double. */
void nl_sgemm_naive(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                    int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double sum = 0.0;
            for (int p = 0; p < k; p++) {
                float av = trans_a ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                float bv = trans_b ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                sum += (double)av * bv;
            }
            float *cij = &c[(size_t)i * ldc + j];
            *cij = (float)(alpha * sum + (beta == 0.0f ? 0.0 : (double)beta * *cij));
        }
    }
}

/* The output columns [*lo, *hi) whose input coordinate o*s - p + k lies inside [0, size); the
 * others read the zero padding. */
static void valid_range(int *lo, int *hi, int size, int k, int s, int p, int out)
{
    int first = p - k;           /* o*s >= p - k */
    int last = size - 1 + p - k; /* o*s <= size - 1 + p - k */

    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    *hi = last < 0 ? 0 : last / s + 1;
    if (*lo > out)
        *lo = out;
    if (*hi > out)
        *hi = out;
    if (*hi < *lo)
        *hi = *lo;
}

/* dst (ow) = the pixels src[ox*sw + x0] (ox in [0, ow)) of an image row of w pixels, 0 where
 * ox*sw + x0 falls outside [0, w); sw is 1 or 2. */
AVX512 static inline __attribute__((always_inline)) void
row_gather_avx512(float *dst, const float *src, int w, int x0, int sw, int ow)
{
    static const int even[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const __m512i idx = _mm512_loadu_si512(even);

    if (sw == 1 && x0 >= 0 && x0 + ow <= w) {
        /* Every tap inside the row: plain copies, a masked one for the tail. */
        int o = 0;
        for (; o + 16 <= ow; o += 16)
            _mm512_storeu_ps(dst + o, _mm512_loadu_ps(src + x0 + o));
        if (o < ow)
            _mm512_mask_storeu_ps(dst + o, lanes(0, ow - o),
                                  _mm512_maskz_loadu_ps(lanes(0, ow - o), src + x0 + o));
        return;
    }
    for (int o = 0; o < ow; o += 16) {
        const __mmask16 out = lanes(0, ow - o);
        const int base = o * sw + x0; /* the input column of lane 0 */
        __m512 v;
        if (sw == 1) {
            v = _mm512_maskz_loadu_ps(lanes(-base, w - base), src + base);
        } else {
            __m512 a = _mm512_maskz_loadu_ps(lanes(-base, w - base), src + base);
            __m512 b = _mm512_maskz_loadu_ps(lanes(-base - 16, w - base - 16), src + base + 16);
            v = _mm512_permutex2var_ps(a, idx, b);
        }
        _mm512_mask_storeu_ps(dst + o, out, v);
    }
}

/* The adjoint: dst[ox*sw + x0] += src[ox] where that lies in [0, w). */
AVX512 static inline __attribute__((always_inline)) void
row_scatter_add_avx512(float *dst, const float *src, int w, int x0, int sw, int ow)
{
    if (sw == 1 && x0 >= 0 && x0 + ow <= w) {
        int o = 0;
        for (; o + 16 <= ow; o += 16)
            _mm512_storeu_ps(dst + x0 + o, _mm512_add_ps(_mm512_loadu_ps(dst + x0 + o),
                                                         _mm512_loadu_ps(src + o)));
        if (o < ow) {
            const __mmask16 m = lanes(0, ow - o);
            _mm512_mask_storeu_ps(dst + x0 + o, m,
                                  _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + x0 + o),
                                                _mm512_maskz_loadu_ps(m, src + o)));
        }
        return;
    }
    for (int o = 0; o < ow; o += 16) {
        const int n = ow - o < 16 ? ow - o : 16; /* outputs in this block */
        const int base = o * sw + x0;
        if (sw == 1) {
            const __mmask16 m = lanes(-base, w - base) & lanes(0, n);
            __m512 d = _mm512_maskz_loadu_ps(m, dst + base);
            d = _mm512_add_ps(d, _mm512_maskz_loadu_ps(m, src + o));
            _mm512_mask_storeu_ps(dst + base, m, d);
            continue;
        }
        /* Output j goes to input lane 2j of the 32 from base: the block's first eight outputs
         * spread over the even lanes of the first vector, the last eight over the second's. */
        const __m512 s = _mm512_maskz_loadu_ps(lanes(0, n), src + o);
        const __m512 lo = _mm512_maskz_expand_ps(0x5555, s);
        const __m512 hi = _mm512_maskz_expand_ps(0x5555, _mm512_shuffle_f32x4(s, s, 0xee));
        const __mmask16 m0 = 0x5555 & lanes(-base, w - base) & lanes(0, 2 * n - 1);
        const __mmask16 m1 = 0x5555 & lanes(-base - 16, w - base - 16) & lanes(0, 2 * n - 1 - 16);
        __m512 d0 = _mm512_maskz_loadu_ps(m0, dst + base);
        __m512 d1 = _mm512_maskz_loadu_ps(m1, dst + base + 16);
        _mm512_mask_storeu_ps(dst + base, m0, _mm512_add_ps(d0, lo));
        _mm512_mask_storeu_ps(dst + base + 16, m1, _mm512_add_ps(d1, hi));
    }
}

/* A "same" convolution of stride 1 on a plane whose width divides 16 (ResNet's 16, 8, 4 and 2):
 * row (ki, kj) of an image's columns is the plane read as one flat run shifted by
 * (ki - ph) * w + kj - pw, with the same columns zeroed in every 16-lane block (colmask) and the
 * rows that fall outside the plane zeroed at the run's ends. */
static int flat_plane(int h, int w, int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow)
{
    return sh == 1 && sw == 1 && oh == h && ow == w && 16 % w == 0 && ph < kh && pw < kw;
}

static __mmask16 flat_colmask(int w, int x0)
{
    unsigned m = 0;
    for (int i = 0; i < 16; i++)
        if (i % w + x0 >= 0 && i % w + x0 < w)
            m |= 1u << i;
    return (__mmask16)m;
}

/* dst (P) = the flat run of plane (P = h*w floats) from shift, lanes of colmask only, 0 elsewhere
 * and where shift + j falls outside [0, P). */
AVX512 static void flat_gather_avx512(float *dst, const float *plane, int p, int shift,
                                      __mmask16 colmask)
{
    for (int j = 0; j < p; j += 16) {
        const __mmask16 m = colmask & lanes(-shift - j, p - shift - j);
        _mm512_mask_storeu_ps(dst + j, lanes(0, p - j),
                              _mm512_maskz_loadu_ps(m, plane + shift + j));
    }
}

AVX512 static void flat_scatter_add_avx512(float *plane, const float *src, int p, int shift,
                                           __mmask16 colmask)
{
    for (int j = 0; j < p; j += 16) {
        const __mmask16 m = colmask & lanes(-shift - j, p - shift - j) & lanes(0, p - j);
        __m512 d = _mm512_maskz_loadu_ps(m, plane + shift + j);
        d = _mm512_add_ps(d, _mm512_maskz_loadu_ps(m, src + j));
        _mm512_mask_storeu_ps(plane + shift + j, m, d);
    }
}

/* Where the vector paths beat the scalar loops (bench_conv): planes that go as one flat run, a
 * stride of 2 in x, and a shard's columns row by row. One image's rows of a plane without
 * padding or stride, such as lenet's, copy as fast in the scalar loops (whose short fixed-size
 * copies compile to vector moves), and their additions, rows that overlap shifted by one
 * column, as fast as masked vectors, whose loads wait on the masked stores before them. */
static int vector_wins(int n, int h, int w, int kh, int kw, int sh, int sw, int ph, int pw, int oh,
                       int ow)
{
    if (!vector_on || sw > 2)
        return 0;
    return n > 1 || sw == 2 || flat_plane(h, w, kh, kw, sh, sw, ph, pw, oh, ow);
}

/* The same for im2col alone, which also wins on one image's padded rows: the scalar loop's row
 * copy becomes a memcpy call, and its zeroed ends loops of their own (im2col of 32x14x14, 3x3,
 * padding 1: 27 us scalar, 16 us vector, thread CPU time; 16x28x28: 24.7 and 24.0). Their
 * adjoint's masked additions do not: that rule stays vector_wins. */
static int vector_wins_gather(int n, int h, int w, int kh, int kw, int sh, int sw, int ph, int pw,
                              int oh, int ow)
{
    return vector_wins(n, h, w, kh, kw, sh, sw, ph, pw, oh, ow) ||
           (vector_on && sw == 1 && (ph > 0 || pw > 0));
}

AVX512 static void im2col_s2_avx512(float *cols, int ldc, const float *img, int n, size_t stride,
                                    int c, int h, int w, int kh, int kw, int sh, int ph, int pw,
                                    int oh, int ow);
#define S2_ROW 512

/* nl_im2col_batch for strides of 1 or 2 in x, row by row through row_gather_avx512 (or whole
 * planes through flat_gather_avx512): each row of cols is written from its start to its end,
 * image after image, so a shard's matrix, wider than the cache, is written in one sweep instead
 * of n sweeps of short pieces. */
AVX512 static void im2col_avx512(float *cols, int ldc, const float *img, int n, size_t stride,
                                 int c, int h, int w, int kh, int kw, int sh, int sw, int ph,
                                 int pw, int oh, int ow)
{
    const int flat = flat_plane(h, w, kh, kw, sh, sw, ph, pw, oh, ow), p = oh * ow;
    size_t row = 0;

    if (sw == 2 && !flat && (pw + 1) / 2 + ow + kw / 2 + 1 + 16 <= S2_ROW) {
        im2col_s2_avx512(cols, ldc, img, n, stride, c, h, w, kh, kw, sh, ph, pw, oh, ow);
        return;
    }
    for (int ci = 0; ci < c; ci++)
        for (int ki = 0; ki < kh; ki++)
            for (int kj = 0; kj < kw; kj++, row++) {
                float *dst = cols + row * (size_t)ldc;
                const __mmask16 colmask = flat ? flat_colmask(w, kj - pw) : 0;
                for (int s = 0; s < n; s++) {
                    const float *plane = img + s * stride + (size_t)ci * h * w;
                    if (flat) {
                        flat_gather_avx512(dst, plane, p, (ki - ph) * w + kj - pw, colmask);
                        dst += p;
                        continue;
                    }
                    for (int oy = 0; oy < oh; oy++, dst += ow) {
                        int iy = oy * sh - ph + ki;
                        if (iy < 0 || iy >= h)
                            for (int o = 0; o < ow; o += 16)
                                _mm512_mask_storeu_ps(dst + o, lanes(0, ow - o),
                                                      _mm512_setzero_ps());
                        else
                            row_gather_avx512(dst, plane + (size_t)iy * w, w, kj - pw, sw, ow);
                    }
                }
            }
}

/* im2col_avx512 for a stride of 2 in x off the flat planes (ResNet-18's 7x7 stem, its 3x3
 * stride-2 convolutions): each input row a window row reads is split once into its even and odd
 * columns (zero beyond the row's ends), and the kw rows of cols it feeds are then plain copies
 * from one or the other, where row_gather_avx512 loaded and permuted the row again for every
 * tap. The same floats. Split rows of up to S2_ROW floats. */
AVX512 static void im2col_s2_avx512(float *cols, int ldc, const float *img, int n, size_t stride,
                                    int c, int h, int w, int kh, int kw, int sh, int ph, int pw,
                                    int oh, int ow)
{
    static const int even[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const __m512i ie = _mm512_loadu_si512(even);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    const int p = oh * ow, a = (pw + 1) / 2 + 1; /* ev[j] holds column 2 * (j - a) */
    const int len = a + ow + kw / 2 + 1;
    float ev[S2_ROW], od[S2_ROW];

    for (int ci = 0; ci < c; ci++)
        for (int ki = 0; ki < kh; ki++) {
            float *rows = cols + (size_t)(ci * kh + ki) * kw * ldc;
            for (int s = 0; s < n; s++) {
                const float *plane = img + s * stride + (size_t)ci * h * w;
                for (int oy = 0; oy < oh; oy++) {
                    const int iy = oy * sh - ph + ki;
                    float *dst = rows + (size_t)s * p + (size_t)oy * ow;
                    if (iy < 0 || iy >= h) {
                        for (int kj = 0; kj < kw; kj++)
                            for (int o = 0; o < ow; o += 16)
                                _mm512_mask_storeu_ps(dst + (size_t)kj * ldc + o, lanes(0, ow - o),
                                                      _mm512_setzero_ps());
                        continue;
                    }
                    const float *row = plane + (size_t)iy * w;
                    for (int j = 0; j < len; j += 16) {
                        const int base = 2 * (j - a);
                        __m512 lo = _mm512_maskz_loadu_ps(lanes(-base, w - base), row + base);
                        __m512 hi = _mm512_maskz_loadu_ps(lanes(-base - 16, w - base - 16),
                                                          row + base + 16);
                        _mm512_storeu_ps(ev + j, _mm512_permutex2var_ps(lo, ie, hi));
                        _mm512_storeu_ps(od + j, _mm512_permutex2var_ps(lo, io, hi));
                    }
                    for (int kj = 0; kj < kw; kj++) {
                        const int q = kj - pw; /* column 2 * ox + q */
                        const int m = q >= 0 ? q / 2 : -((1 - q) / 2), odd = q - 2 * m;
                        const float *src = (odd ? od : ev) + a + m;
                        float *d = dst + (size_t)kj * ldc;
                        for (int o = 0; o < ow; o += 16) {
                            const __mmask16 live = lanes(0, ow - o);
                            _mm512_mask_storeu_ps(d + o, live,
                                                  _mm512_maskz_loadu_ps(live, src + o));
                        }
                    }
                }
            }
        }
}

/* Each image element gets its terms in row order, as the scalar loop adds them. */
AVX512 static void col2im_avx512(float *img, const float *cols, int ldc, int n, size_t stride,
                                 int c, int h, int w, int kh, int kw, int sh, int sw, int ph,
                                 int pw, int oh, int ow)
{
    const int flat = flat_plane(h, w, kh, kw, sh, sw, ph, pw, oh, ow), p = oh * ow;
    size_t row = 0;

    for (int ci = 0; ci < c; ci++)
        for (int ki = 0; ki < kh; ki++)
            for (int kj = 0; kj < kw; kj++, row++) {
                const float *src = cols + row * (size_t)ldc;
                const __mmask16 colmask = flat ? flat_colmask(w, kj - pw) : 0;
                for (int s = 0; s < n; s++) {
                    float *plane = img + s * stride + (size_t)ci * h * w;
                    if (flat) {
                        flat_scatter_add_avx512(plane, src, p, (ki - ph) * w + kj - pw, colmask);
                        src += p;
                        continue;
                    }
                    for (int oy = 0; oy < oh; oy++, src += ow) {
                        int iy = oy * sh - ph + ki;
                        if (iy >= 0 && iy < h)
                            row_scatter_add_avx512(plane + (size_t)iy * w, src, w, kj - pw, sw, ow);
                    }
                }
            }
}

/* Row (ci, ki, kj) of cols holds, for each output position (oy, ox), the pixel
 * img[ci, oy*sh - ph + ki, ox*sw - pw + kj], or 0 where that falls in the padding. */
/* dst (n) = src (n) for short runs: fixed-size copies that compile to vector moves. A plain loop
 * here becomes a memcpy call at -O3, which costs more than copying 8 or 24 floats. */
static inline void copy_short(float *restrict dst, const float *restrict src, int n)
{
    int i = 0;

    for (; i + 8 <= n; i += 8)
        memcpy(dst + i, src + i, 8 * sizeof *dst);
    if (i + 4 <= n) {
        memcpy(dst + i, src + i, 4 * sizeof *dst);
        i += 4;
    }
    for (; i < n; i++)
        dst[i] = src[i];
}

/* Stride 1 and no padding, the common case: every row of cols is oh runs of ow pixels, each
 * run a contiguous piece of one image row. */
AVX512 static void im2col_w8_avx512(float *restrict cols, int ldc, const float *restrict img, int c,
                                    int h, int w, int kh, int kw, int oh);

static void im2col_dense(float *restrict cols, int ldc, const float *restrict img, int c, int h,
                         int w, int kh, int kw, int oh, int ow)
{
    if (vector_on && ow == 8) {
        im2col_w8_avx512(cols, ldc, img, c, h, w, kh, kw, oh);
        return;
    }
    for (int ci = 0; ci < c; ci++)
        for (int ki = 0; ki < kh; ki++)
            for (int kj = 0; kj < kw; kj++) {
                float *dst = cols + ((size_t)(ci * kh + ki) * kw + kj) * (size_t)ldc;
                const float *src = img + ((size_t)ci * h + ki) * w + kj;
                for (int oy = 0; oy < oh; oy++, dst += ow, src += w)
                    copy_short(dst, src, ow);
            }
}

/* im2col_dense on rows of 8 (lenet's conv2: 8x8 outputs of 12x12 planes): two runs of 8, from
 * two image rows, make one vector of the columns. One image of lenet's conv2, single-threaded,
 * fastest of 5 x 2000 (2026-11-27, load average 4.5): 3.6 us against 6.2 in the scalar loop's
 * short copies; its adjoint below, col2im_w16_avx512, 4.1 to 4.4 us against 5.6 to 5.7. */
AVX512 static void im2col_w8_avx512(float *restrict cols, int ldc, const float *restrict img, int c,
                                    int h, int w, int kh, int kw, int oh)
{
    for (int ci = 0; ci < c; ci++)
        for (int ki = 0; ki < kh; ki++)
            for (int kj = 0; kj < kw; kj++) {
                float *dst = cols + ((size_t)(ci * kh + ki) * kw + kj) * (size_t)ldc;
                const float *src = img + ((size_t)ci * h + ki) * w + kj;
                int oy = 0;
                for (; oy + 2 <= oh; oy += 2, dst += 16, src += 2 * w) {
                    const __m512d lo =
                        _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(src)));
                    const __m256d hi = _mm256_castps_pd(_mm256_loadu_ps(src + w));
                    _mm512_storeu_ps(dst, _mm512_castpd_ps(_mm512_insertf64x4(lo, hi, 1)));
                }
                if (oy < oh)
                    _mm256_storeu_ps(dst, _mm256_loadu_ps(src));
            }
}

/* col2im_dense for image rows of at most 16 pixels (lenet's conv2: 12), image rows in registers:
 * each row (ci, iy) adds the runs of every (ki, kj) that land on it, in col2im_dense's order,
 * each run loaded into its lanes [kj, kj + ow) and added there alone (a masked add, so the other
 * lanes keep their values, signed zeros included). Four rows go at once, four chains of
 * additions side by side; no load waits on a store, where col2im_dense's runs of neighbouring kj
 * overlap in memory shifted by one pixel. */
AVX512 static void col2im_w16_avx512(float *restrict img, const float *restrict cols, int ldc,
                                     int c, int h, int w, int kh, int kw, int oh, int ow, int set)
{
    const __mmask16 row = lanes(0, w);

    for (int ci = 0; ci < c; ci++)
        for (int y0 = 0; y0 < h; y0 += 4) {
            const int rows = h - y0 < 4 ? h - y0 : 4;
            float *dst = img + ((size_t)ci * h + y0) * w;
            __m512 acc[4];
            for (int r = 0; r < 4; r++)
                acc[r] = _mm512_maskz_loadu_ps(r < rows && !set ? row : 0, dst + (size_t)r * w);
            for (int ki = 0; ki < kh; ki++) {
                const float *src = cols + (size_t)(ci * kh + ki) * kw * ldc;
                for (int kj = 0; kj < kw; kj++, src += ldc) {
                    const __mmask16 m = lanes(kj, kj + ow);
                    for (int r = 0; r < 4; r++) {
                        const int oy = y0 + r - ki;
                        if (r >= rows || oy < 0 || oy >= oh)
                            continue;
                        /* lane kj + ox takes src[oy*ow + ox] */
                        const __m512 v = _mm512_maskz_loadu_ps(m, src + (size_t)oy * ow - kj);
                        acc[r] = _mm512_mask_add_ps(acc[r], m, acc[r], v);
                    }
                }
            }
            for (int r = 0; r < rows; r++)
                _mm512_mask_storeu_ps(dst + (size_t)r * w, row, acc[r]);
        }
}

static void col2im_dense(float *restrict img, const float *restrict cols, int ldc, int c, int h,
                         int w, int kh, int kw, int oh, int ow)
{
    if (vector_on && w <= 16) {
        col2im_w16_avx512(img, cols, ldc, c, h, w, kh, kw, oh, ow, 0);
        return;
    }
    for (int ci = 0; ci < c; ci++)
        for (int ki = 0; ki < kh; ki++)
            for (int kj = 0; kj < kw; kj++) {
                const float *src = cols + ((size_t)(ci * kh + ki) * kw + kj) * (size_t)ldc;
                float *dst = img + ((size_t)ci * h + ki) * w + kj;
                for (int oy = 0; oy < oh; oy++, src += ow, dst += w)
                    for (int ox = 0; ox < ow; ox++)
                        dst[ox] += src[ox];
            }
}

void nl_im2col_ld(float *restrict cols, int ldc, const float *restrict img, int c, int h, int w,
                  int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow)
{
    size_t row = 0;

    if (vector_wins_gather(1, h, w, kh, kw, sh, sw, ph, pw, oh, ow)) {
        im2col_avx512(cols, ldc, img, 1, 0, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
        return;
    }
    if (sh == 1 && sw == 1 && ph == 0 && pw == 0) {
        im2col_dense(cols, ldc, img, c, h, w, kh, kw, oh, ow);
        return;
    }

    for (int ci = 0; ci < c; ci++) {
        const float *plane = img + (size_t)ci * h * w;
        for (int ki = 0; ki < kh; ki++) {
            for (int kj = 0; kj < kw; kj++, row++) {
                float *dst = cols + row * (size_t)ldc;
                int lo, hi;
                valid_range(&lo, &hi, w, kj, sw, pw, ow);
                for (int oy = 0; oy < oh; oy++, dst += ow) {
                    int iy = oy * sh - ph + ki;
                    if (iy < 0 || iy >= h) {
                        memset(dst, 0, (size_t)ow * sizeof *dst);
                        continue;
                    }
                    for (int ox = 0; ox < lo; ox++)
                        dst[ox] = 0.0f;
                    const float *src = plane + (size_t)iy * w;
                    if (sw == 1) {
                        /* A loop, not memcpy: rows are short (8 floats in lenet's conv2), and
                         * the call costs more than the copy. */
                        const float *s1 = src - pw + kj;
                        for (int ox = lo; ox < hi; ox++)
                            dst[ox] = s1[ox];
                    } else {
                        for (int ox = lo; ox < hi; ox++)
                            dst[ox] = src[ox * sw - pw + kj];
                    }
                    for (int ox = hi; ox < ow; ox++)
                        dst[ox] = 0.0f;
                }
            }
        }
    }
}

void nl_im2col(float *cols, const float *img, int c, int h, int w, int kh, int kw, int sh, int sw,
               int ph, int pw, int oh, int ow)
{
    nl_im2col_ld(cols, oh * ow, img, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
}

/* The adjoint of nl_im2col_ld: each element of cols is added to the pixel it was read from;
 * elements that were read from the padding are dropped. */
void nl_col2im_ld(float *restrict img, const float *restrict cols, int ldc, int c, int h, int w,
                  int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow)
{
    size_t row = 0;

    if (vector_wins(1, h, w, kh, kw, sh, sw, ph, pw, oh, ow)) {
        col2im_avx512(img, cols, ldc, 1, 0, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
        return;
    }
    if (sh == 1 && sw == 1 && ph == 0 && pw == 0) {
        col2im_dense(img, cols, ldc, c, h, w, kh, kw, oh, ow);
        return;
    }

    for (int ci = 0; ci < c; ci++) {
        float *plane = img + (size_t)ci * h * w;
        for (int ki = 0; ki < kh; ki++) {
            for (int kj = 0; kj < kw; kj++, row++) {
                const float *src = cols + row * (size_t)ldc;
                int lo, hi;
                valid_range(&lo, &hi, w, kj, sw, pw, ow);
                for (int oy = 0; oy < oh; oy++, src += ow) {
                    int iy = oy * sh - ph + ki;
                    if (iy < 0 || iy >= h)
                        continue;
                    float *dst = plane + (size_t)iy * w;
                    if (sw == 1) {
                        /* Contiguous on both sides: a vector loop. */
                        float *restrict d1 = dst - pw + kj;
                        for (int ox = lo; ox < hi; ox++)
                            d1[ox] += src[ox];
                    } else {
                        for (int ox = lo; ox < hi; ox++)
                            dst[ox * sw - pw + kj] += src[ox];
                    }
                }
            }
        }
    }
}

void nl_col2im(float *img, const float *cols, int c, int h, int w, int kh, int kw, int sh, int sw,
               int ph, int pw, int oh, int ow)
{
    nl_col2im_ld(img, cols, oh * ow, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
}

void nl_col2im_set(float *img, const float *cols, int c, int h, int w, int kh, int kw, int sh,
                   int sw, int ph, int pw, int oh, int ow)
{
    /* the rows start from +0.0 in registers instead of from memory: the same sums */
    if (vector_on && sh == 1 && sw == 1 && ph == 0 && pw == 0 && w <= 16 &&
        !vector_wins(1, h, w, kh, kw, sh, sw, ph, pw, oh, ow)) {
        col2im_w16_avx512(img, cols, oh * ow, c, h, w, kh, kw, oh, ow, 1);
        return;
    }
    memset(img, 0, (size_t)c * h * w * sizeof *img);
    nl_col2im(img, cols, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
}

void nl_im2col_batch(float *cols, const float *img, int n, size_t stride, int c, int h, int w,
                     int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow)
{
    const int p = oh * ow;

    if (vector_wins(n, h, w, kh, kw, sh, sw, ph, pw, oh, ow)) {
        im2col_avx512(cols, n * p, img, n, stride, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
        return;
    }
    for (int s = 0; s < n; s++)
        nl_im2col_ld(cols + (size_t)s * p, n * p, img + s * stride, c, h, w, kh, kw, sh, sw, ph, pw,
                     oh, ow);
}

void nl_col2im_batch(float *img, const float *cols, int n, size_t stride, int c, int h, int w,
                     int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow)
{
    const int p = oh * ow;

    if (vector_wins(n, h, w, kh, kw, sh, sw, ph, pw, oh, ow)) {
        col2im_avx512(img, cols, n * p, n, stride, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
        return;
    }
    for (int s = 0; s < n; s++)
        nl_col2im_ld(img + s * stride, cols + (size_t)s * p, n * p, c, h, w, kh, kw, sh, sw, ph, pw,
                     oh, ow);
}

float nl_sum(const float *x, int n)
{
    float part[8] = {0};
    int i = 0;

    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            part[j] += x[i + j];
    double sum = 0.0;
    for (int j = 0; j < 8; j++)
        sum += part[j];
    for (; i < n; i++)
        sum += x[i];
    return (float)sum;
}

float nl_sum_naive(const float *x, int n)
{
    double sum = 0.0;

    for (int i = 0; i < n; i++)
        sum += x[i];
    return (float)sum;
}

/* The reference depthwise convolution: for each filter, tap after tap, one multiply-add sweep over
 * the output rows whose input row lies inside the image, over the columns [lo, hi) whose input
 * column does (valid_range); the padding adds nothing. */
void nl_dwconv_ref(float *restrict out, const float *restrict img, const float *restrict weight,
                   const float *bias, int c, int h, int w, int mult, int kh, int kw, int sh, int sw,
                   int ph, int pw, int oh, int ow)
{
    const size_t plane = (size_t)oh * ow;

    for (int f = 0; f < c * mult; f++) {
        const float *x = img + (size_t)(f / mult) * h * w, *wf = weight + (size_t)f * kh * kw;
        float *y = out + (size_t)f * plane;
        const float b = bias ? bias[f] : 0.0f;
        for (size_t i = 0; i < plane; i++)
            y[i] = b;
        for (int ki = 0; ki < kh; ki++)
            for (int kj = 0; kj < kw; kj++) {
                const float wv = wf[ki * kw + kj];
                int lo, hi;
                valid_range(&lo, &hi, w, kj, sw, pw, ow);
                for (int oy = 0; oy < oh; oy++) {
                    int iy = oy * sh - ph + ki;
                    if (iy < 0 || iy >= h)
                        continue;
                    float *yr = y + (size_t)oy * ow;
                    const float *xr = x + (size_t)iy * w;
                    const int x0 = kj - pw;
                    if (sw == 1)
                        for (int ox = lo; ox < hi; ox++)
                            yr[ox] += wv * xr[ox + x0];
                    else
                        for (int ox = lo; ox < hi; ox++)
                            yr[ox] += wv * xr[ox * sw + x0];
                }
            }
    }
}

void nl_dwconv_backward_ref(float *din, float *dweight, float *dbias, const float *restrict dout,
                            const float *restrict img, const float *restrict weight, int c, int h,
                            int w, int mult, int kh, int kw, int sh, int sw, int ph, int pw, int oh,
                            int ow)
{
    const size_t plane = (size_t)oh * ow;

    for (int f = 0; f < c * mult; f++) {
        const float *x = img + (size_t)(f / mult) * h * w, *wf = weight + (size_t)f * kh * kw;
        const float *dy = dout + (size_t)f * plane;
        float *dx = din ? din + (size_t)(f / mult) * h * w : NULL;
        if (dbias)
            dbias[f] += nl_sum(dy, (int)plane);
        for (int ki = 0; ki < kh; ki++)
            for (int kj = 0; kj < kw; kj++) {
                const float wv = wf[ki * kw + kj];
                float acc = 0.0f;
                int lo, hi;
                valid_range(&lo, &hi, w, kj, sw, pw, ow);
                for (int oy = 0; oy < oh; oy++) {
                    int iy = oy * sh - ph + ki;
                    if (iy < 0 || iy >= h)
                        continue;
                    const float *dyr = dy + (size_t)oy * ow;
                    const float *xr = x + (size_t)iy * w;
                    float *dxr = dx ? dx + (size_t)iy * w : NULL;
                    const int x0 = kj - pw;
                    float part = 0.0f;
                    if (sw == 1) {
                        for (int ox = lo; ox < hi; ox++)
                            part += dyr[ox] * xr[ox + x0];
                        for (int ox = lo; dxr && ox < hi; ox++)
                            dxr[ox + x0] += wv * dyr[ox];
                    } else {
                        for (int ox = lo; ox < hi; ox++)
                            part += dyr[ox] * xr[ox * sw + x0];
                        for (int ox = lo; dxr && ox < hi; ox++)
                            dxr[ox * sw + x0] += wv * dyr[ox];
                    }
                    acc += part;
                }
                if (dweight)
                    dweight[(size_t)f * kh * kw + ki * kw + kj] += acc;
            }
    }
}

/* The fast depthwise convolution adds the same products in the same order, element by element,
 * as the reference, so their results are the same bit for bit: an output element gets its bias,
 * then its taps in (ki, kj) order; a tap's weight gradient sums its rows in order, each row's
 * columns in order; an input-gradient element gets its taps in (ki, kj) order. What changes is
 * the loop nest: output row by output row (input row by input row for the input gradient), all
 * taps of a row while it is in L1, and the kw taps of a kernel row in one pass over the columns
 * that every one of them reads inside the image (dw_inner), the edge columns tap by tap. */

/* The output columns [*a, *b) where every tap kj in [0, kw) reads inside the image. */
static void dw_inner(int *a, int *b, int w, int kw, int sw, int pw, int ow)
{
    int lo0, hi0, lo1, hi1;
    valid_range(&lo0, &hi0, w, 0, sw, pw, ow);
    valid_range(&lo1, &hi1, w, kw - 1, sw, pw, ow);
    *a = lo0;
    *b = hi1 > lo0 ? hi1 : lo0;
}

/* yr[ox] += the kw taps wk of output column ox over input row xr, for ox in [from, to), each
 * tap that reads inside the row (columns outside [a, b) check every tap). */
static void dw_row(float *restrict yr, const float *restrict xr, const float *restrict wk, int w,
                   int kw, int sw, int pw, int from, int to, int a, int b)
{
    int ox = from;
    for (; ox < to && ox < a; ox++)
        for (int kj = 0; kj < kw; kj++) {
            int ix = ox * sw - pw + kj;
            if (ix >= 0 && ix < w)
                yr[ox] += wk[kj] * xr[ix];
        }
    if (kw == 3 && sw == 1) {
        const float w0 = wk[0], w1 = wk[1], w2 = wk[2];
        const float *xp = xr - pw;
        for (; ox < b && ox < to; ox++) {
            float t = yr[ox];
            t += w0 * xp[ox];
            t += w1 * xp[ox + 1];
            t += w2 * xp[ox + 2];
            yr[ox] = t;
        }
    } else if (kw == 3) {
        const float w0 = wk[0], w1 = wk[1], w2 = wk[2];
        for (; ox < b && ox < to; ox++) {
            const float *xp = xr + ox * sw - pw;
            float t = yr[ox];
            t += w0 * xp[0];
            t += w1 * xp[1];
            t += w2 * xp[2];
            yr[ox] = t;
        }
    } else {
        for (; ox < b && ox < to; ox++) {
            const float *xp = xr + ox * sw - pw;
            float t = yr[ox];
            for (int kj = 0; kj < kw; kj++)
                t += wk[kj] * xp[kj];
            yr[ox] = t;
        }
    }
    for (; ox < to; ox++)
        for (int kj = 0; kj < kw; kj++) {
            int ix = ox * sw - pw + kj;
            if (ix >= 0 && ix < w)
                yr[ox] += wk[kj] * xr[ix];
        }
}

#define DW_MAX_TAPS 64 /* kernels up to 8x8 take the fast paths; larger ones the reference */

/* nl_dwconv for strides of 1 or 2 in x, 16 output columns at a time: each output gets the bias,
 * then its valid taps in (ki, kj) order, a multiply and an add each (lanes of a tap that falls
 * in the padding are left alone, not added 0), as the scalar loops do: the same floats. */
AVX512 static void dwconv_avx512(float *out, const float *img, const float *weight,
                                 const float *bias, int c, int h, int w, int mult, int kh, int kw,
                                 int sh, int sw, int ph, int pw, int oh, int ow)
{
    static const int even[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const __m512i idx = _mm512_loadu_si512(even);
    enum { R = 4 }; /* output rows at a time: four independent chains of additions */
    int lo[DW_MAX_TAPS], hi[DW_MAX_TAPS];
    __mmask16 m[DW_MAX_TAPS];

    for (int kj = 0; kj < kw; kj++)
        valid_range(&lo[kj], &hi[kj], w, kj, sw, pw, ow);
    for (int f = 0; f < c * mult; f++) {
        const float *x = img + (size_t)(f / mult) * h * w, *wf = weight + (size_t)f * kh * kw;
        const __m512 bv = _mm512_set1_ps(bias ? bias[f] : 0.0f);
        float *y = out + (size_t)f * oh * ow;
        for (int o = 0; o < ow; o += 16) {
            const __mmask16 store = lanes(0, ow - o);
            for (int kj = 0; kj < kw; kj++)
                m[kj] = lanes(lo[kj] - o, hi[kj] - o) & store;
            for (int oy0 = 0; oy0 < oh; oy0 += R) {
                __m512 v[R];
                for (int r = 0; r < R; r++)
                    v[r] = bv;
                for (int ki = 0; ki < kh; ki++)
                    for (int kj = 0; kj < kw; kj++) {
                        const __m512 wv = _mm512_set1_ps(wf[ki * kw + kj]);
                        const int base = o * sw + kj - pw; /* the input column of lane 0 */
                        for (int r = 0; r < R; r++) {
                            const int iy = (oy0 + r) * sh - ph + ki;
                            if (oy0 + r >= oh || iy < 0 || iy >= h)
                                continue;
                            const float *xr = x + (size_t)iy * w;
                            __m512 xv;
                            if (sw == 1) {
                                xv = _mm512_maskz_loadu_ps(m[kj], xr + base);
                            } else {
                                __m512 a = _mm512_maskz_loadu_ps(lanes(-base, w - base), xr + base);
                                __m512 b = _mm512_maskz_loadu_ps(lanes(-base - 16, w - base - 16),
                                                                 xr + base + 16);
                                xv = _mm512_permutex2var_ps(a, idx, b);
                            }
                            v[r] = _mm512_mask_add_ps(v[r], m[kj], v[r], _mm512_mul_ps(wv, xv));
                        }
                    }
                for (int r = 0; r < R && oy0 + r < oh; r++)
                    _mm512_mask_storeu_ps(y + (size_t)(oy0 + r) * ow + o, store, v[r]);
            }
        }
    }
}

void nl_dwconv(float *restrict out, const float *restrict img, const float *restrict weight,
               const float *bias, int c, int h, int w, int mult, int kh, int kw, int sh, int sw,
               int ph, int pw, int oh, int ow)
{
    int a, b;
    if (vector_on && sw <= 2 && kw <= DW_MAX_TAPS) {
        dwconv_avx512(out, img, weight, bias, c, h, w, mult, kh, kw, sh, sw, ph, pw, oh, ow);
        return;
    }
    dw_inner(&a, &b, w, kw, sw, pw, ow);
    for (int f = 0; f < c * mult; f++) {
        const float *x = img + (size_t)(f / mult) * h * w, *wf = weight + (size_t)f * kh * kw;
        const float bv = bias ? bias[f] : 0.0f;
        for (int oy = 0; oy < oh; oy++) {
            float *yr = out + (size_t)f * oh * ow + (size_t)oy * ow;
            for (int ox = 0; ox < ow; ox++)
                yr[ox] = bv;
            for (int ki = 0; ki < kh; ki++) {
                int iy = oy * sh - ph + ki;
                if (iy >= 0 && iy < h)
                    dw_row(yr, x + (size_t)iy * w, wf + ki * kw, w, kw, sw, pw, 0, ow, a, b);
            }
        }
    }
}

/* acc (kh*kw) = the weight gradient of one depthwise filter, dy (oh, ow) against its input plane
 * x (h, w), for strides of 1 or 2 in x: per tap, one 16-lane sum of products over the rows,
 * lanes [lo, hi) of the tap's valid output columns, added across the lanes at the end. A
 * mobilenet plane's row (14 or 7 columns) is one masked vector, where the scalar loop adds one
 * product after another. Its sums go in another order than the reference's (the tests compare
 * them to rounding). */
AVX512 static void dw_weight_grad_avx512(float *acc, const float *dy, const float *x, int h, int w,
                                         int kh, int kw, int sh, int sw, int ph, int pw, int oh,
                                         int ow, const int *lo, const int *hi)
{
    static const int even[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const __m512i idx = _mm512_loadu_si512(even);

    if (kh == 3 && kw == 3 && sw == 1 && ow <= 16) {
        /* The common case, a 3x3 window over rows of one vector: each row of dy is loaded once
         * and feeds the nine taps' sums, held in registers. */
        __m512 v[9];
        __mmask16 m[3];
        for (int k = 0; k < 9; k++)
            v[k] = _mm512_setzero_ps();
        for (int kj = 0; kj < 3; kj++)
            m[kj] = lanes(lo[kj], hi[kj]) & lanes(0, ow);
        for (int oy = 0; oy < oh; oy++) {
            const __m512 g = _mm512_maskz_loadu_ps(lanes(0, ow), dy + (size_t)oy * ow);
            for (int ki = 0; ki < 3; ki++) {
                const int iy = oy * sh - ph + ki;
                if (iy < 0 || iy >= h)
                    continue;
                const float *xr = x + (size_t)iy * w - pw;
                for (int kj = 0; kj < 3; kj++)
                    v[ki * 3 + kj] = _mm512_mask3_fmadd_ps(g, _mm512_maskz_loadu_ps(m[kj], xr + kj),
                                                           v[ki * 3 + kj], m[kj]);
            }
        }
        for (int k = 0; k < 9; k++)
            acc[k] = _mm512_reduce_add_ps(v[k]);
        return;
    }
    for (int ki = 0; ki < kh; ki++)
        for (int kj = 0; kj < kw; kj++) {
            __m512 v = _mm512_setzero_ps();
            const int x0 = kj - pw;
            for (int oy = 0; oy < oh; oy++) {
                const int iy = oy * sh - ph + ki;
                if (iy < 0 || iy >= h)
                    continue;
                const float *dyr = dy + (size_t)oy * ow, *xr = x + (size_t)iy * w;
                for (int o = 0; o < ow; o += 16) {
                    const __mmask16 m = lanes(lo[kj] - o, hi[kj] - o) & lanes(0, ow - o);
                    const int base = o * sw + x0; /* the input column of lane 0 */
                    __m512 xv;
                    if (sw == 1) {
                        xv = _mm512_maskz_loadu_ps(m, xr + base);
                    } else {
                        __m512 a = _mm512_maskz_loadu_ps(lanes(-base, w - base), xr + base);
                        __m512 b =
                            _mm512_maskz_loadu_ps(lanes(-base - 16, w - base - 16), xr + base + 16);
                        xv = _mm512_maskz_mov_ps(m, _mm512_permutex2var_ps(a, idx, b));
                    }
                    v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, dyr + o), xv, v);
                }
            }
            acc[ki * kw + kj] = _mm512_reduce_add_ps(v);
        }
}

/* dx (h, w) += the input gradient of one depthwise filter wf (kh, kw) from dy (oh, ow), for a
 * stride of 1 or 2 in x (at 2, every other lane reads, its outputs expanded from consecutive
 * columns): 16 input columns and four input rows at a time, each element's terms in
 * (ki, kj) order, a multiply and an add each, only where the tap reads an output (the padding's
 * lanes left alone): the floats of the scalar loops. */
AVX512 static void dw_input_grad_avx512(float *dx, const float *dy, const float *wf, int h, int w,
                                        int kh, int kw, int sh, int sw, int ph, int pw, int oh,
                                        int ow)
{
    enum { R = 4 };
    for (int i = 0; i < w; i += 16) {
        const __mmask16 store = lanes(0, w - i);
        for (int iy0 = 0; iy0 < h; iy0 += R) {
            __m512 v[R];
            for (int r = 0; r < R; r++)
                v[r] = iy0 + r < h ? _mm512_maskz_loadu_ps(store, dx + (size_t)(iy0 + r) * w + i)
                                   : _mm512_setzero_ps();
            for (int ki = 0; ki < kh; ki++)
                for (int kj = 0; kj < kw; kj++) {
                    const __m512 wv = _mm512_set1_ps(wf[ki * kw + kj]);
                    /* Lane l reads output column (q + l) / sw, where that divides. */
                    const int q = i + pw - kj;
                    __mmask16 m;
                    int first = q; /* the output column of the first lane read */
                    if (sw == 1) {
                        m = lanes(-q, ow - q) & store;
                    } else {
                        m = lanes(-q, 2 * ow - q) & store & (q % 2 == 0 ? 0x5555 : 0xaaaa);
                        if (!m)
                            continue;
                        first = (q + __builtin_ctz(m)) / 2;
                    }
                    for (int r = 0; r < R; r++) {
                        const int t = iy0 + r + ph - ki;
                        if (iy0 + r >= h || t < 0 || t % sh != 0 || t / sh >= oh)
                            continue;
                        const float *dyr = dy + (size_t)(t / sh) * ow;
                        const __m512 g = sw == 1 ? _mm512_maskz_loadu_ps(m, dyr + first)
                                                 : _mm512_maskz_expandloadu_ps(m, dyr + first);
                        v[r] = _mm512_mask_add_ps(v[r], m, v[r], _mm512_mul_ps(wv, g));
                    }
                }
            for (int r = 0; r < R && iy0 + r < h; r++)
                _mm512_mask_storeu_ps(dx + (size_t)(iy0 + r) * w + i, store, v[r]);
        }
    }
}

void nl_dwconv_backward(float *din, float *dweight, float *dbias, const float *restrict dout,
                        const float *restrict img, const float *restrict weight, int c, int h,
                        int w, int mult, int kh, int kw, int sh, int sw, int ph, int pw, int oh,
                        int ow)
{
    if (kh * kw > DW_MAX_TAPS) {
        nl_dwconv_backward_ref(din, dweight, dbias, dout, img, weight, c, h, w, mult, kh, kw, sh,
                               sw, ph, pw, oh, ow);
        return;
    }
    const size_t plane = (size_t)oh * ow;
    int lo[DW_MAX_TAPS], hi[DW_MAX_TAPS];
    for (int kj = 0; kj < kw; kj++)
        valid_range(&lo[kj], &hi[kj], w, kj, sw, pw, ow);

    for (int f = 0; f < c * mult; f++) {
        const float *x = img + (size_t)(f / mult) * h * w, *wf = weight + (size_t)f * kh * kw;
        const float *dy = dout + (size_t)f * plane;
        if (dbias)
            dbias[f] += nl_sum(dy, (int)plane);
        if (dweight && vector_on && sw <= 2) {
            float acc[DW_MAX_TAPS];
            dw_weight_grad_avx512(acc, dy, x, h, w, kh, kw, sh, sw, ph, pw, oh, ow, lo, hi);
            for (int k = 0; k < kh * kw; k++)
                dweight[(size_t)f * kh * kw + k] += acc[k];
        } else if (dweight) {
            /* The weight gradient: per tap, the rows' partial sums added in row order. */
            float acc[DW_MAX_TAPS] = {0};
            for (int oy = 0; oy < oh; oy++) {
                const float *dyr = dy + (size_t)oy * ow;
                for (int ki = 0; ki < kh; ki++) {
                    int iy = oy * sh - ph + ki;
                    if (iy < 0 || iy >= h)
                        continue;
                    const float *xr = x + (size_t)iy * w;
                    for (int kj = 0; kj < kw; kj++) {
                        const float *xp = xr + kj - pw;
                        float part = 0.0f;
                        if (sw == 1)
                            for (int ox = lo[kj]; ox < hi[kj]; ox++)
                                part += dyr[ox] * xp[ox];
                        else
                            for (int ox = lo[kj]; ox < hi[kj]; ox++)
                                part += dyr[ox] * xp[ox * sw];
                        acc[ki * kw + kj] += part;
                    }
                }
            }
            for (int k = 0; k < kh * kw; k++)
                dweight[(size_t)f * kh * kw + k] += acc[k];
        }
        if (!din)
            continue;
        /* The input gradient, input row by input row: its taps in (ki, kj) order. */
        float *dx = din + (size_t)(f / mult) * h * w;
        if (vector_on && sw <= 2) {
            dw_input_grad_avx512(dx, dy, wf, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
            continue;
        }
        for (int iy = 0; iy < h; iy++) {
            float *dxr = dx + (size_t)iy * w;
            for (int ki = 0; ki < kh; ki++) {
                int t = iy + ph - ki;
                if (t < 0 || t % sh != 0 || t / sh >= oh)
                    continue;
                const float *dyr = dy + (size_t)(t / sh) * ow;
                const float *wk = wf + ki * kw;
                if (sw == 1 && kw == 3) {
                    /* dx[ix] += w0 dy[ix + pw] + w1 dy[ix + pw - 1] + w2 dy[ix + pw - 2], each
                     * term where its output column is in [0, ow). */
                    int a = 2 - pw, b = ow - pw; /* all three terms valid in [a, b) */
                    if (a < 0)
                        a = 0;
                    if (b > w)
                        b = w;
                    int ix = 0;
                    for (; ix < w && ix < a; ix++)
                        for (int kj = 0; kj < 3; kj++) {
                            int ox = ix + pw - kj;
                            if (ox >= 0 && ox < ow)
                                dxr[ix] += wk[kj] * dyr[ox];
                        }
                    const float w0 = wk[0], w1 = wk[1], w2 = wk[2];
                    const float *dp = dyr + pw;
                    for (; ix < b; ix++) {
                        float v = dxr[ix];
                        v += w0 * dp[ix];
                        v += w1 * dp[ix - 1];
                        v += w2 * dp[ix - 2];
                        dxr[ix] = v;
                    }
                    for (; ix < w; ix++)
                        for (int kj = 0; kj < 3; kj++) {
                            int ox = ix + pw - kj;
                            if (ox >= 0 && ox < ow)
                                dxr[ix] += wk[kj] * dyr[ox];
                        }
                } else {
                    for (int kj = 0; kj < kw; kj++) {
                        const float wv = wk[kj];
                        float *dp = dxr + kj - pw;
                        if (sw == 1)
                            for (int ox = lo[kj]; ox < hi[kj]; ox++)
                                dp[ox] += wv * dyr[ox];
                        else
                            for (int ox = lo[kj]; ox < hi[kj]; ox++)
                                dp[ox * sw] += wv * dyr[ox];
                    }
                }
            }
        }
    }
}

/* As core/engine/layers/seq.c reads a token: an id outside [0, vocab), or not whole, is 1. */
static int token_row(float v, int vocab)
{
    int id = (int)v;
    return id >= 0 && id < vocab && (float)id == v ? id : 1;
}

void nl_embedding_backward_naive(float *dw, unsigned char *marks, const float *dout,
                                 const float *ids, int n, int len, int dim, int vocab)
{
    for (int s = 0; s < n; s++) {
        const float *g = dout + (size_t)s * dim * len;
        for (int t = 0; t < len; t++) {
            int id = token_row(ids[(size_t)s * len + t], vocab);
            float *row = dw + (size_t)id * dim;
            if (id == 0)
                continue;
            if (marks)
                marks[id] = 1;
            for (int d = 0; d < dim; d++)
                row[d] += g[(size_t)d * len + t];
        }
    }
}

void nl_embedding_backward(float *dw, unsigned char *marks, const float *dout, const float *ids,
                           int n, int len, int dim, int vocab)
{
    enum { BLOCK = 16 };
    for (int s = 0; s < n; s++) {
        const float *g = dout + (size_t)s * dim * len;
        for (int t0 = 0; t0 < len; t0 += BLOCK) {
            /* The block's steps that are not padding: nk of them, step t0 + at[k], row rows[k]. */
            float *rows[BLOCK];
            int at[BLOCK], nk = 0;
            int nb = len - t0 < BLOCK ? len - t0 : BLOCK;
            for (int j = 0; j < nb; j++) {
                int id = token_row(ids[(size_t)s * len + t0 + j], vocab);
                if (id == 0)
                    continue;
                if (marks)
                    marks[id] = 1;
                rows[nk] = dw + (size_t)id * dim;
                at[nk++] = j;
            }
            if (nk == BLOCK) /* no padding: a fixed count the compiler unrolls */
                for (int d = 0; d < dim; d++) {
                    const float *gd = g + (size_t)d * len + t0;
                    for (int k = 0; k < BLOCK; k++)
                        rows[k][d] += gd[k];
                }
            else
                for (int d = 0; d < dim; d++) {
                    const float *gd = g + (size_t)d * len + t0;
                    for (int k = 0; k < nk; k++)
                        rows[k][d] += gd[at[k]];
                }
        }
    }
}

/* ReLU. The vector paths compare and select as the scalar loops do: 0 where x > 0 is false (NaN
 * included), and backward adds 0.0f rather than nothing, so -0.0 sums come out the same. */
AVX512 static void relu_avx512(float *out, const float *x, size_t n)
{
    const __m512 zero = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm512_mask_storeu_ps(out + i, m,
                              _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), v));
    }
}

AVX512 static void relu_backward_avx512(float *din, const float *out, const float *dout, size_t n,
                                        int set)
{
    const __m512 zero = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        __mmask16 pos = _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(m, out + i), zero, _CMP_GT_OQ);
        __m512 g = _mm512_maskz_loadu_ps(pos & m, dout + i);
        if (!set)
            g = _mm512_add_ps(_mm512_maskz_loadu_ps(m, din + i), g);
        _mm512_mask_storeu_ps(din + i, m, g);
    }
}

void nl_relu_naive(float *out, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void nl_relu_backward_naive(float *restrict din, const float *restrict out,
                            const float *restrict dout, size_t n, int set)
{
    if (set)
        for (size_t i = 0; i < n; i++)
            din[i] = out[i] > 0.0f ? dout[i] : 0.0f;
    else
        for (size_t i = 0; i < n; i++) {
            float g = dout[i];
            din[i] += out[i] > 0.0f ? g : 0.0f;
        }
}

void nl_relu(float *out, const float *x, size_t n)
{
    if (vector_on)
        relu_avx512(out, x, n);
    else
        nl_relu_naive(out, x, n);
}

void nl_relu_backward(float *din, const float *out, const float *dout, size_t n, int set)
{
    if (vector_on)
        relu_backward_avx512(din, out, dout, n, set);
    else
        nl_relu_backward_naive(din, out, dout, n, set);
}

/* Max pooling of one sample, window after window: the first maximum in row-major order wins,
 * a window that holds a NaN gives NaN, the padding is never picked. */
void nl_maxpool_naive(float *out, int32_t *arg, const float *x, int c, int h, int w, int kh, int kw,
                      int sh, int sw, int ph, int pw, int oh, int ow)
{
    for (int ci = 0; ci < c; ci++) {
        int plane = ci * h * w;
        for (int oy = 0; oy < oh; oy++) {
            int y0 = oy * sh - ph, y1 = y0 + kh;
            y0 = y0 < 0 ? 0 : y0;
            y1 = y1 > h ? h : y1;
            for (int ox = 0; ox < ow; ox++, out++) {
                int x0 = ox * sw - pw, x1 = x0 + kw;
                x0 = x0 < 0 ? 0 : x0;
                x1 = x1 > w ? w : x1;
                int best = plane + y0 * w + x0, nan = 0;
                float m = x[best];
                for (int y = y0; y < y1; y++) {
                    const float *row = x + plane + y * w;
                    for (int xx = x0; xx < x1; xx++) {
                        float v = row[xx];
                        int take = v > m;
                        nan |= v != v;
                        m = take ? v : m;
                        best = take ? plane + y * w + xx : best;
                    }
                }
                *out = nan ? NAN : m;
                if (arg)
                    *arg++ = best;
            }
        }
    }
}

/* 16 output columns at a time, the taps in the same row-major order; a lane takes its first
 * tap inside the image, then each later one that is greater. Strides of 1 or 2 in x, windows at
 * most MAXPOOL_KW wide. The taps' lane masks and offsets of up to MAXPOOL_BLOCKS blocks of 16
 * columns are worked out once (the divisions and masks per tap took most of the time of
 * ResNet-18's 3x3 stride-2 pooling when they sat in the inner loop); then each output row of each
 * channel goes through those blocks while its input rows are in the L1 cache. Block by block
 * through every channel and row instead, ResNet-18's pooling at 3x224x224 (64 planes of 112x112
 * in, 56x56 out: four blocks, each reading its band of every row) took 1.77 to 1.96 ms an image
 * against 0.80 to 1.23 (`nnlab bench --model resnet18-224 --mode infer --batch 1 --threads 1
 * --layers`, three rounds alternating, 2026-11-29, Zen 5 EPYC, beside another build and its tests
 * on the other core). The same values and indices. */
#define MAXPOOL_KW     16
#define MAXPOOL_BLOCKS 8
/* The taps of the blocks of 16 output columns from o0 (at most MAXPOOL_BLOCKS): for block bi and
 * tap kx, the input column of lane 0 (base), the lanes whose column lies inside the row (valid),
 * and the masks of the two row loads that cover them (m0, m1); live, the block's output lanes. */
struct pool_taps {
    int base[MAXPOOL_BLOCKS][MAXPOOL_KW];
    __mmask16 valid[MAXPOOL_BLOCKS][MAXPOOL_KW], m0[MAXPOOL_BLOCKS][MAXPOOL_KW],
        m1[MAXPOOL_BLOCKS][MAXPOOL_KW], live[MAXPOOL_BLOCKS];
};

/* Fills t for the blocks from o0; returns how many. */
static int maxpool_taps(struct pool_taps *t, int o0, int ow, int w, int kw, int sw, int pw)
{
    int blocks = 0;

    for (int o = o0; o < ow && blocks < MAXPOOL_BLOCKS; o += 16, blocks++) {
        t->live[blocks] = lanes(0, ow - o);
        for (int kx = 0; kx < kw; kx++) {
            const int b = o * sw - pw + kx;
            /* lanes j with 0 <= b + sw*j < w */
            const int jlo = b >= 0 ? 0 : (-b + sw - 1) / sw;
            const int jhi = w - b <= 0 ? 0 : (w - b + sw - 1) / sw;
            t->base[blocks][kx] = b;
            t->valid[blocks][kx] = lanes(jlo, jhi) & t->live[blocks];
            t->m0[blocks][kx] = lanes(-b, w - b);
            t->m1[blocks][kx] = lanes(-b - 16, w - b - 16);
        }
    }
    return blocks;
}

/* A tap's 16 lanes from p, its first column: contiguous (sw 1), or every other of two loads. */
AVX512 static inline __attribute__((always_inline)) __m512
maxpool_tap(const float *p, __mmask16 m0, __mmask16 m1, int sw, __m512i even)
{
    if (sw == 1)
        return _mm512_maskz_loadu_ps(m0, p);
    return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(m0, p), even,
                                  _mm512_maskz_loadu_ps(m1, p + 16));
}

AVX512 static void maxpool_avx512(float *out, int32_t *arg, const float *x, int c, int h, int w,
                                  int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow)
{
    static const int even[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const __m512i idx = _mm512_loadu_si512(even);
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i step = _mm512_mullo_epi32(iota, _mm512_set1_epi32(sw));
    const __m512 qnan = _mm512_set1_ps(NAN);
    struct pool_taps t;

    for (int o0 = 0; o0 < ow; o0 += 16 * MAXPOOL_BLOCKS) {
        const int blocks = maxpool_taps(&t, o0, ow, w, kw, sw, pw);
        for (int ci = 0; ci < c; ci++) {
            const int plane = ci * h * w;
            for (int oy = 0; oy < oh; oy++) {
                int y0 = oy * sh - ph, y1 = y0 + kh;
                y0 = y0 < 0 ? 0 : y0;
                y1 = y1 > h ? h : y1;
                for (int bi = 0; bi < blocks; bi++) {
                    __m512 m = _mm512_setzero_ps();
                    __m512i best = _mm512_setzero_si512();
                    __mmask16 seen = 0, nan = 0;
                    for (int y = y0; y < y1; y++) {
                        const float *row = x + plane + y * w;
                        for (int kx = 0; kx < kw; kx++) {
                            const int b = t.base[bi][kx];
                            const __m512 v =
                                maxpool_tap(row + b, t.m0[bi][kx], t.m1[bi][kx], sw, idx);
                            const __mmask16 take =
                                t.valid[bi][kx] &
                                (__mmask16)(~seen | _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ));
                            nan |= t.valid[bi][kx] & _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                            seen |= t.valid[bi][kx];
                            m = _mm512_mask_mov_ps(m, take, v);
                            best = _mm512_mask_mov_epi32(
                                best, take,
                                _mm512_add_epi32(_mm512_set1_epi32(plane + y * w + b), step));
                        }
                    }
                    const size_t at = ((size_t)ci * oh + oy) * ow + o0 + 16 * bi;
                    _mm512_mask_storeu_ps(out + at, t.live[bi], _mm512_mask_mov_ps(m, nan, qnan));
                    _mm512_mask_storeu_epi32(arg + at, t.live[bi], best);
                }
            }
        }
    }
}

/* The values alone (no arg: inference), with the taps of every block of a row interleaved: each
 * block's running maximum is m = max(v, m) from minus infinity, masked to the taps inside the
 * image, which gives the first maximum (max_ps returns its second operand, the earlier value,
 * where the two are equal, zeros of either sign included, or where v is NaN; NaN is then set
 * where a tap held one), maxpool_avx512's floats to the bit; and the blocks' chains, one tap at a
 * time across all of them, do not wait on each other. */
AVX512 static void maxpool_values_avx512(float *out, const float *x, int c, int h, int w, int kh,
                                         int kw, int sh, int sw, int ph, int pw, int oh, int ow)
{
    static const int even[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const __m512i idx = _mm512_loadu_si512(even);
    const __m512 qnan = _mm512_set1_ps(NAN), low = _mm512_set1_ps(-INFINITY);
    struct pool_taps t;

    for (int o0 = 0; o0 < ow; o0 += 16 * MAXPOOL_BLOCKS) {
        const int blocks = maxpool_taps(&t, o0, ow, w, kw, sw, pw);
        for (int ci = 0; ci < c; ci++) {
            const float *plane = x + (size_t)ci * h * w;
            for (int oy = 0; oy < oh; oy++) {
                int y0 = oy * sh - ph, y1 = y0 + kh;
                y0 = y0 < 0 ? 0 : y0;
                y1 = y1 > h ? h : y1;
                __m512 m[MAXPOOL_BLOCKS];
                __mmask16 nan[MAXPOOL_BLOCKS];
                for (int bi = 0; bi < blocks; bi++) {
                    m[bi] = low;
                    nan[bi] = 0;
                }
                for (int y = y0; y < y1; y++) {
                    const float *row = plane + (size_t)y * w;
                    for (int kx = 0; kx < kw; kx++)
                        for (int bi = 0; bi < blocks; bi++) {
                            const int b = t.base[bi][kx];
                            const __m512 v =
                                maxpool_tap(row + b, t.m0[bi][kx], t.m1[bi][kx], sw, idx);
                            nan[bi] |= t.valid[bi][kx] & _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                            m[bi] = _mm512_mask_max_ps(m[bi], t.valid[bi][kx], v, m[bi]);
                        }
                }
                for (int bi = 0; bi < blocks; bi++)
                    _mm512_mask_storeu_ps(out + ((size_t)ci * oh + oy) * ow + o0 + 16 * bi,
                                          t.live[bi], _mm512_mask_mov_ps(m[bi], nan[bi], qnan));
            }
        }
    }
}

void nl_maxpool(float *out, int32_t *arg, const float *x, int c, int h, int w, int kh, int kw,
                int sh, int sw, int ph, int pw, int oh, int ow)
{
    if (vector_on && sw <= 2 && kw <= MAXPOOL_KW && !arg)
        maxpool_values_avx512(out, x, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
    else if (vector_on && sw <= 2 && kw <= MAXPOOL_KW)
        maxpool_avx512(out, arg, x, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
    else
        nl_maxpool_naive(out, arg, x, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
}

/* y (n) = g * ((x - mu) * is) + b: batchnorm's output pass over one plane, the same operations
 * in the same order in every lane (no fused multiply-add: ISO C mode keeps them apart). */
AVX512 static void bn_apply_avx512(float *y, const float *x, size_t n, float mu, float is, float g,
                                   float b)
{
    const __m512 vmu = _mm512_set1_ps(mu), vis = _mm512_set1_ps(is), vg = _mm512_set1_ps(g),
                 vb = _mm512_set1_ps(b);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        v = _mm512_add_ps(_mm512_mul_ps(vg, _mm512_mul_ps(_mm512_sub_ps(v, vmu), vis)), vb);
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

void nl_bn_apply_naive(float *y, const float *x, size_t n, float mu, float is, float g, float b)
{
    for (size_t i = 0; i < n; i++)
        y[i] = g * ((x[i] - mu) * is) + b;
}

void nl_bn_apply(float *y, const float *x, size_t n, float mu, float is, float g, float b)
{
    if (vector_on)
        bn_apply_avx512(y, x, n, mu, is, g, b);
    else
        nl_bn_apply_naive(y, x, n, mu, is, g, b);
}

/* out (n) = a + b. */
AVX512 static void add_avx512(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        _mm512_mask_storeu_ps(
            out + i, m,
            _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
    }
}

void nl_add_naive(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void nl_add(float *out, const float *a, const float *b, size_t n)
{
    if (vector_on)
        add_avx512(out, a, b, n);
    else
        nl_add_naive(out, a, b, n);
}

static inline float act_scalar(float v, int act)
{
    if (act == NL_ACT_NONE)
        return v;
    v = v > 0.0f ? v : 0.0f;
    return act == NL_ACT_RELU6 ? (v < 6.0f ? v : 6.0f) : v;
}

/* y (n) = act(x * s + t): a multiply then an add in every lane, as the scalar loop does. */
AVX512 static void scale_shift_avx512(float *y, const float *x, size_t n, float s, float t, int act)
{
    const __m512 vs = _mm512_set1_ps(s), vt = _mm512_set1_ps(t);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs), vt);
        _mm512_mask_storeu_ps(y + i, m, act_avx512(v, act));
    }
}

void nl_scale_shift_naive(float *y, const float *x, size_t n, float s, float t, int act)
{
    for (size_t i = 0; i < n; i++)
        y[i] = act_scalar(x[i] * s + t, act);
}

void nl_scale_shift(float *y, const float *x, size_t n, float s, float t, int act)
{
    if (vector_on)
        scale_shift_avx512(y, x, n, s, t, act);
    else
        nl_scale_shift_naive(y, x, n, s, t, act);
}

/* out (n) = act(a + b). */
AVX512 static void add_act_avx512(float *out, const float *a, const float *b, size_t n, int act)
{
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i));
        _mm512_mask_storeu_ps(out + i, m, act_avx512(v, act));
    }
}

void nl_add_act_naive(float *out, const float *a, const float *b, size_t n, int act)
{
    for (size_t i = 0; i < n; i++)
        out[i] = act_scalar(a[i] + b[i], act);
}

void nl_add_act(float *out, const float *a, const float *b, size_t n, int act)
{
    if (vector_on)
        add_act_avx512(out, a, b, n, act);
    else
        nl_add_act_naive(out, a, b, n, act);
}

/* Adds the 16 lanes of a and of b, in order and in double, to *s1 and *s2: how the batchnorm sums'
 * kernels, vector and naive, end (so that both give the same doubles). */
static void add_lanes(const float *a, const float *b, double *s1, double *s2)
{
    double t1 = 0.0, t2 = 0.0;
    for (int j = 0; j < 16; j++) {
        t1 += a[j];
        t2 += b[j];
    }
    *s1 += t1;
    *s2 += t2;
}

/* Batchnorm's sums over one channel: n planes of `plane` floats, plane s at s * stride. Each keeps
 * sixteen float partial sums, lane j taking the elements i + j of every plane (i a multiple of
 * 16), and adds them in double in lane order at the end: the vector paths do the same in one
 * register with masked tails, so they agree with the naive twins bit for bit. */
void nl_bn_shifted_sums_naive(const float *restrict x, int n, size_t stride, size_t plane, float x0,
                              double *s1, double *s2)
{
    float a[16] = {0}, b[16] = {0};

    for (int s = 0; s < n; s++) {
        const float *p = x + (size_t)s * stride;
        for (size_t i = 0; i < plane; i += 16)
            for (size_t j = 0; j < 16 && i + j < plane; j++) {
                float d = p[i + j] - x0;
                a[j] += d;
                b[j] += d * d;
            }
    }
    add_lanes(a, b, s1, s2);
}

AVX512 static void bn_shifted_sums_avx512(const float *x, int n, size_t stride, size_t plane,
                                          float x0, double *s1, double *s2)
{
    __m512 va = _mm512_setzero_ps(), vb = _mm512_setzero_ps();
    const __m512 v0 = _mm512_set1_ps(x0);
    float a[16], b[16];

    for (int s = 0; s < n; s++) {
        const float *p = x + (size_t)s * stride;
        size_t i = 0;
        for (; i + 16 <= plane; i += 16) {
            if (s + 1 < n)
                _mm_prefetch((const char *)(p + stride + i), _MM_HINT_T0);
            __m512 d = _mm512_sub_ps(_mm512_loadu_ps(p + i), v0);
            va = _mm512_add_ps(va, d);
            vb = _mm512_add_ps(vb, _mm512_mul_ps(d, d));
        }
        if (i < plane) {
            const __mmask16 m = lanes(0, (int)(plane - i));
            __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + i), v0);
            va = _mm512_mask_add_ps(va, m, va, d);
            vb = _mm512_mask_add_ps(vb, m, vb, _mm512_mul_ps(d, d));
        }
    }
    _mm512_storeu_ps(a, va);
    _mm512_storeu_ps(b, vb);
    add_lanes(a, b, s1, s2);
}

void nl_bn_shifted_sums(const float *x, int n, size_t stride, size_t plane, float x0, double *s1,
                        double *s2)
{
    if (vector_on)
        bn_shifted_sums_avx512(x, n, stride, plane, x0, s1, s2);
    else
        nl_bn_shifted_sums_naive(x, n, stride, plane, x0, s1, s2);
}

void nl_bn_grad_sums_naive(const float *restrict dy, const float *restrict x, int n, size_t stride,
                           size_t plane, float mu, double *sdy, double *sdyc)
{
    float a[16] = {0}, b[16] = {0};

    for (int s = 0; s < n; s++) {
        const float *g = dy + (size_t)s * stride, *p = x + (size_t)s * stride;
        for (size_t i = 0; i < plane; i += 16)
            for (size_t j = 0; j < 16 && i + j < plane; j++) {
                a[j] += g[i + j];
                b[j] += g[i + j] * (p[i + j] - mu);
            }
    }
    add_lanes(a, b, sdy, sdyc);
}

AVX512 static void bn_grad_sums_avx512(const float *dy, const float *x, int n, size_t stride,
                                       size_t plane, float mu, double *sdy, double *sdyc)
{
    __m512 va = _mm512_setzero_ps(), vb = _mm512_setzero_ps();
    const __m512 vmu = _mm512_set1_ps(mu);
    float a[16], b[16];

    for (int s = 0; s < n; s++) {
        const float *g = dy + (size_t)s * stride, *p = x + (size_t)s * stride;
        size_t i = 0;
        for (; i + 16 <= plane; i += 16) {
            if (s + 1 < n) {
                _mm_prefetch((const char *)(g + stride + i), _MM_HINT_T0);
                _mm_prefetch((const char *)(p + stride + i), _MM_HINT_T0);
            }
            __m512 gv = _mm512_loadu_ps(g + i);
            va = _mm512_add_ps(va, gv);
            vb = _mm512_add_ps(vb, _mm512_mul_ps(gv, _mm512_sub_ps(_mm512_loadu_ps(p + i), vmu)));
        }
        if (i < plane) {
            const __mmask16 m = lanes(0, (int)(plane - i));
            __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
            va = _mm512_mask_add_ps(va, m, va, gv);
            vb = _mm512_mask_add_ps(
                vb, m, vb, _mm512_mul_ps(gv, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + i), vmu)));
        }
    }
    _mm512_storeu_ps(a, va);
    _mm512_storeu_ps(b, vb);
    add_lanes(a, b, sdy, sdyc);
}

void nl_bn_grad_sums(const float *dy, const float *x, int n, size_t stride, size_t plane, float mu,
                     double *sdy, double *sdyc)
{
    if (vector_on)
        bn_grad_sums_avx512(dy, x, n, stride, plane, mu, sdy, sdyc);
    else
        nl_bn_grad_sums_naive(dy, x, n, stride, plane, mu, sdy, sdyc);
}

void nl_bn_backward_apply_naive(float *restrict dx, const float *restrict dy,
                                const float *restrict x, size_t n, float g, float a1, float a2,
                                float mu, float is, int set)
{
    if (set)
        for (size_t i = 0; i < n; i++)
            dx[i] = g * (dy[i] - a1 - ((x[i] - mu) * is) * a2);
    else
        for (size_t i = 0; i < n; i++)
            dx[i] += g * (dy[i] - a1 - ((x[i] - mu) * is) * a2);
}

void nl_conv_s1_naive(float *out, const float *img, const float *weight, const float *bias, int c,
                      int h, int w, int f, int kh, int kw, int ph, int pw, int oh, int ow, int acc)
{
    for (int fo = 0; fo < f; fo++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                float s = 0.0f;
                for (int ci = 0; ci < c; ci++)
                    for (int ky = 0; ky < kh; ky++) {
                        const int iy = oy - ph + ky;
                        if (iy < 0 || iy >= h)
                            continue;
                        for (int kx = 0; kx < kw; kx++) {
                            const int ix = ox - pw + kx;
                            if (ix < 0 || ix >= w)
                                continue;
                            s += weight[(((size_t)fo * c + ci) * kh + ky) * kw + kx] *
                                 img[((size_t)ci * h + iy) * w + ix];
                        }
                    }
                float *o = out + ((size_t)fo * oh + oy) * ow + ox;
                *o = (acc ? *o : bias ? bias[fo] : 0.0f) + s;
            }
}

/* The filters [fo, fo + fb) over one block of 32 outputs: piece v (0, 1) is the 16 outputs from
 * (oy + dy[v], x0 + dx[v]), valid in the lanes of mo[v]. mk[v * kw + kx] holds the lanes whose
 * input column (output column - pw + kx) lies inside the row. fb is 8 or 1; the sixteen sums
 * are named variables so that they stay in registers. */
#define CONV_S1_TAP(J)                                                                             \
    do {                                                                                           \
        if ((J) < fb) {                                                                            \
            const __m512 wv = _mm512_set1_ps(wp[(J)*ckk + kx]);                                    \
            a0##J = _mm512_fmadd_ps(wv, x0v, a0##J);                                               \
            a1##J = _mm512_fmadd_ps(wv, x1v, a1##J);                                               \
        }                                                                                          \
    } while (0)
#define CONV_S1_INIT(J)                                                                            \
    __m512 a0##J = _mm512_setzero_ps(), a1##J = _mm512_setzero_ps();                               \
    if ((J) < fb) {                                                                                \
        a0##J = conv_s1_start(out, bias, acc, fo + (J), plane, o0, mo[0]);                         \
        a1##J = conv_s1_start(out, bias, acc, fo + (J), plane, o1, mo[1]);                         \
    }
#define CONV_S1_STORE(J)                                                                           \
    do {                                                                                           \
        if ((J) < fb) {                                                                            \
            if (mo[0])                                                                             \
                _mm512_mask_storeu_ps(out + (fo + (J)) * plane + o0, mo[0], a0##J);                \
            if (mo[1])                                                                             \
                _mm512_mask_storeu_ps(out + (fo + (J)) * plane + o1, mo[1], a1##J);                \
        }                                                                                          \
    } while (0)

/* The starting sum of filter fo's 16 outputs at offset o of its plane. */
AVX512 static inline __attribute__((always_inline)) __m512 conv_s1_start(const float *out,
                                                                         const float *bias, int acc,
                                                                         int fo, size_t plane,
                                                                         size_t o, __mmask16 m)
{
    if (acc)
        return m ? _mm512_maskz_loadu_ps(m, out + fo * plane + o) : _mm512_setzero_ps();
    return bias ? _mm512_set1_ps(bias[fo]) : _mm512_setzero_ps();
}

AVX512 static inline __attribute__((always_inline)) void
conv_s1_block(float *out, const float *img, const float *weight, const float *bias, int fb, int fo,
              int c, int h, int w, int kh, int kw, int ph, int pw, int oh, int ow, int acc, int oy,
              int x0, const int dy[2], const int dx[2], const __mmask16 mo[2], const __mmask16 *mk)
{
    const size_t ckk = (size_t)c * kh * kw, plane = (size_t)oh * ow;
    const size_t o0 = (size_t)(oy + dy[0]) * ow + x0 + dx[0];
    const size_t o1 = (size_t)(oy + dy[1]) * ow + x0 + dx[1];
    CONV_S1_INIT(0)
    CONV_S1_INIT(1)
    CONV_S1_INIT(2)
    CONV_S1_INIT(3)
    CONV_S1_INIT(4)
    CONV_S1_INIT(5)
    CONV_S1_INIT(6)
    CONV_S1_INIT(7)

    for (int ci = 0; ci < c; ci++)
        for (int ky = 0; ky < kh; ky++) {
            const int iy0 = oy + dy[0] - ph + ky, iy1 = oy + dy[1] - ph + ky;
            const int in0 = mo[0] && iy0 >= 0 && iy0 < h, in1 = mo[1] && iy1 >= 0 && iy1 < h;
            if (!in0 && !in1)
                continue;
            const __mmask16 rm0 = in0 ? 0xffff : 0, rm1 = in1 ? 0xffff : 0;
            const float *r0 = in0 ? img + ((size_t)ci * h + iy0) * w + x0 + dx[0] - pw : img;
            const float *r1 = in1 ? img + ((size_t)ci * h + iy1) * w + x0 + dx[1] - pw : img;
            const float *wp = weight + (size_t)fo * ckk + ((size_t)ci * kh + ky) * kw;
            for (int kx = 0; kx < kw; kx++) {
                const __m512 x0v = _mm512_maskz_loadu_ps(mk[kx] & rm0, r0 + kx);
                const __m512 x1v = _mm512_maskz_loadu_ps(mk[kw + kx] & rm1, r1 + kx);
                CONV_S1_TAP(0);
                CONV_S1_TAP(1);
                CONV_S1_TAP(2);
                CONV_S1_TAP(3);
                CONV_S1_TAP(4);
                CONV_S1_TAP(5);
                CONV_S1_TAP(6);
                CONV_S1_TAP(7);
            }
        }
    CONV_S1_STORE(0);
    CONV_S1_STORE(1);
    CONV_S1_STORE(2);
    CONV_S1_STORE(3);
    CONV_S1_STORE(4);
    CONV_S1_STORE(5);
    CONV_S1_STORE(6);
    CONV_S1_STORE(7);
}

AVX512 static void conv_s1_avx512(float *out, const float *img, const float *weight,
                                  const float *bias, int c, int h, int w, int f, int kh, int kw,
                                  int ph, int pw, int oh, int ow, int acc)
{
    /* Rows wider than 16 go 32 columns at a time; narrower ones two rows at a time. */
    const int wide = ow > 16;
    const int dy[2] = {0, wide ? 0 : 1}, dx[2] = {0, wide ? 16 : 0};

    for (int oy = 0; oy < oh; oy += wide ? 1 : 2)
        for (int x0 = 0; x0 < ow; x0 += 32) {
            __mmask16 mo[2], mk[16];
            for (int v = 0; v < 2; v++) {
                const int base = x0 + dx[v];
                mo[v] = oy + dy[v] < oh ? lanes(0, ow - base) : 0;
                for (int kx = 0; kx < kw; kx++) {
                    const int hi = w + pw - kx - base;
                    mk[v * kw + kx] = mo[v] & lanes(pw - kx - base, hi);
                }
            }
            int fo = 0;
            for (; fo + 8 <= f; fo += 8)
                conv_s1_block(out, img, weight, bias, 8, fo, c, h, w, kh, kw, ph, pw, oh, ow, acc,
                              oy, x0, dy, dx, mo, mk);
            for (; fo < f; fo++)
                conv_s1_block(out, img, weight, bias, 1, fo, c, h, w, kh, kw, ph, pw, oh, ow, acc,
                              oy, x0, dy, dx, mo, mk);
        }
}

void nl_conv_s1(float *out, const float *img, const float *weight, const float *bias, int c, int h,
                int w, int f, int kh, int kw, int ph, int pw, int oh, int ow, int acc)
{
    if (vector_on && kw <= 8)
        conv_s1_avx512(out, img, weight, bias, c, h, w, f, kh, kw, ph, pw, oh, ow, acc);
    else
        nl_conv_s1_naive(out, img, weight, bias, c, h, w, f, kh, kw, ph, pw, oh, ow, acc);
}

void nl_conv_s1_dweight_naive(float *dweight, const float *dout, const float *img, int c, int h,
                              int w, int f, int kh, int kw, int ph, int pw, int oh, int ow)
{
    for (int fo = 0; fo < f; fo++)
        for (int ci = 0; ci < c; ci++)
            for (int ky = 0; ky < kh; ky++)
                for (int kx = 0; kx < kw; kx++) {
                    float s = 0.0f;
                    for (int oy = 0; oy < oh; oy++) {
                        const int iy = oy - ph + ky;
                        if (iy < 0 || iy >= h)
                            continue;
                        for (int ox = 0; ox < ow; ox++) {
                            const int ix = ox - pw + kx;
                            if (ix < 0 || ix >= w)
                                continue;
                            s += dout[((size_t)fo * oh + oy) * ow + ox] *
                                 img[((size_t)ci * h + iy) * w + ix];
                        }
                    }
                    dweight[(((size_t)fo * c + ci) * kh + ky) * kw + kx] += s;
                }
}

#define CONV_DW_DECL(J) __m512 s##J##0 = z, s##J##1 = z, s##J##2 = z, d##J = z
#define CONV_DW_LOAD(J)                                                                            \
    do {                                                                                           \
        if ((J) < fb)                                                                              \
            d##J = _mm512_maskz_loadu_ps(mo, dout + (fo + (J)) * plane + o);                       \
    } while (0)
#define CONV_DW_TAP(J, X)                                                                          \
    do {                                                                                           \
        if ((J) < fb)                                                                              \
            s##J##X = _mm512_fmadd_ps(d##J, v##X, s##J##X);                                        \
    } while (0)
#define CONV_DW_PUT(J)                                                                             \
    do {                                                                                           \
        if ((J) < fb) {                                                                            \
            float *dst = dweight + (((size_t)(fo + (J)) * c + ci) * kh + ky) * 3;                  \
            dst[0] += _mm512_reduce_add_ps(s##J##0);                                               \
            dst[1] += _mm512_reduce_add_ps(s##J##1);                                               \
            dst[2] += _mm512_reduce_add_ps(s##J##2);                                               \
        }                                                                                          \
    } while (0)

/* Filters [fo, fo + fb) (fb 4 or 1), input channel ci, tap row ky of a 3-wide window. */
AVX512 static inline __attribute__((always_inline)) void
conv_dw_block(float *dweight, const float *dout, const float *img, int fb, int fo, int ci, int ky,
              int c, int h, int w, int kh, int ph, int pw, int oh, int ow)
{
    const __m512 z = _mm512_setzero_ps();
    const size_t plane = (size_t)oh * ow;
    CONV_DW_DECL(0);
    CONV_DW_DECL(1);
    CONV_DW_DECL(2);
    CONV_DW_DECL(3);

    /* Column pieces outside, rows inside: the masks are worked out once per piece. */
    const int y_lo = ph - ky > 0 ? ph - ky : 0, y_hi = h + ph - ky < oh ? h + ph - ky : oh;
    for (int x0 = 0; x0 < ow; x0 += 16) {
        const __mmask16 mo = lanes(0, ow - x0);
        const __mmask16 m0 = mo & lanes(pw - x0, w + pw - x0);
        const __mmask16 m1 = mo & lanes(pw - 1 - x0, w + pw - 1 - x0);
        const __mmask16 m2 = mo & lanes(pw - 2 - x0, w + pw - 2 - x0);
        for (int oy = y_lo; oy < y_hi; oy++) {
            const float *row = img + ((size_t)ci * h + oy - ph + ky) * w - pw + x0;
            const size_t o = (size_t)oy * ow + x0;
            CONV_DW_LOAD(0);
            CONV_DW_LOAD(1);
            CONV_DW_LOAD(2);
            CONV_DW_LOAD(3);
            const __m512 v0 = _mm512_maskz_loadu_ps(m0, row);
            const __m512 v1 = _mm512_maskz_loadu_ps(m1, row + 1);
            const __m512 v2 = _mm512_maskz_loadu_ps(m2, row + 2);
            CONV_DW_TAP(0, 0);
            CONV_DW_TAP(0, 1);
            CONV_DW_TAP(0, 2);
            CONV_DW_TAP(1, 0);
            CONV_DW_TAP(1, 1);
            CONV_DW_TAP(1, 2);
            CONV_DW_TAP(2, 0);
            CONV_DW_TAP(2, 1);
            CONV_DW_TAP(2, 2);
            CONV_DW_TAP(3, 0);
            CONV_DW_TAP(3, 1);
            CONV_DW_TAP(3, 2);
        }
    }
    CONV_DW_PUT(0);
    CONV_DW_PUT(1);
    CONV_DW_PUT(2);
    CONV_DW_PUT(3);
}

AVX512 static void conv_s1_dweight_avx512(float *dweight, const float *dout, const float *img,
                                          int c, int h, int w, int f, int kh, int ph, int pw,
                                          int oh, int ow)
{
    for (int ci = 0; ci < c; ci++)
        for (int ky = 0; ky < kh; ky++) {
            int fo = 0;
            for (; fo + 4 <= f; fo += 4)
                conv_dw_block(dweight, dout, img, 4, fo, ci, ky, c, h, w, kh, ph, pw, oh, ow);
            for (; fo < f; fo++)
                conv_dw_block(dweight, dout, img, 1, fo, ci, ky, c, h, w, kh, ph, pw, oh, ow);
        }
}

void nl_conv_s1_dweight(float *dweight, const float *dout, const float *img, int c, int h, int w,
                        int f, int kh, int kw, int ph, int pw, int oh, int ow)
{
    if (vector_on && kw == 3)
        conv_s1_dweight_avx512(dweight, dout, img, c, h, w, f, kh, ph, pw, oh, ow);
    else
        nl_conv_s1_dweight_naive(dweight, dout, img, c, h, w, f, kh, kw, ph, pw, oh, ow);
}

/* Training-time fusion (core/engine/model.c): a batchnorm or a residual add writes the output of
 * the ReLU or ReLU6 that alone reads it, and its backward takes that activation's gradient,
 * masked where the activation's output says its derivative is 0. The mask is a select, as in
 * nl_relu_backward: dy where live, +0.0f elsewhere, so every later operation sees the floats the
 * activation layer's backward would have written, and the results are the unfused layers' bit
 * for bit. */

/* 1 where act (NL_ACT_*) passes its input's gradient, judged from its output y: y > 0 for ReLU,
 * 0 < y < 6 for ReLU6 (no gradient at the kinks, as PyTorch), everywhere for none. */
static inline int act_live(float y, int act)
{
    if (act == NL_ACT_NONE)
        return 1;
    return act == NL_ACT_RELU6 ? y > 0.0f && y < 6.0f : y > 0.0f;
}

AVX512 static inline __attribute__((always_inline)) __mmask16 act_live_avx512(__m512 y, int act)
{
    if (act == NL_ACT_NONE)
        return 0xffff;
    __mmask16 live = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GT_OQ);
    if (act == NL_ACT_RELU6)
        live &= _mm512_cmp_ps_mask(y, _mm512_set1_ps(6.0f), _CMP_LT_OQ);
    return live;
}

void nl_bn_apply_act_naive(float *y, const float *x, const float *res, size_t n, float mu, float is,
                           float g, float b, int act)
{
    for (size_t i = 0; i < n; i++) {
        float v = g * ((x[i] - mu) * is) + b;
        y[i] = act_scalar(res ? v + res[i] : v, act);
    }
}

AVX512 static void bn_apply_act_avx512(float *y, const float *x, const float *res, size_t n,
                                       float mu, float is, float g, float b, int act)
{
    const __m512 vmu = _mm512_set1_ps(mu), vis = _mm512_set1_ps(is), vg = _mm512_set1_ps(g),
                 vb = _mm512_set1_ps(b);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        v = _mm512_add_ps(_mm512_mul_ps(vg, _mm512_mul_ps(_mm512_sub_ps(v, vmu), vis)), vb);
        if (res)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res + i));
        _mm512_mask_storeu_ps(y + i, m, act_avx512(v, act));
    }
}

void nl_bn_apply_act(float *y, const float *x, const float *res, size_t n, float mu, float is,
                     float g, float b, int act)
{
    if (act == NL_ACT_NONE && !res)
        nl_bn_apply(y, x, n, mu, is, g, b);
    else if (vector_on)
        bn_apply_act_avx512(y, x, res, n, mu, is, g, b, act);
    else
        nl_bn_apply_act_naive(y, x, res, n, mu, is, g, b, act);
}

void nl_bn_grad_sums_act_naive(const float *restrict dy, const float *restrict y,
                               const float *restrict x, int n, size_t stride, size_t plane,
                               float mu, int act, double *sdy, double *sdyc)
{
    float a[16] = {0}, b[16] = {0};

    for (int s = 0; s < n; s++) {
        const size_t at = (size_t)s * stride;
        const float *g = dy + at, *o = y + at, *p = x + at;
        for (size_t i = 0; i < plane; i += 16)
            for (size_t j = 0; j < 16 && i + j < plane; j++) {
                float gv = act_live(o[i + j], act) ? g[i + j] : 0.0f;
                a[j] += gv;
                b[j] += gv * (p[i + j] - mu);
            }
    }
    add_lanes(a, b, sdy, sdyc);
}

AVX512 static void bn_grad_sums_act_avx512(const float *dy, const float *y, const float *x, int n,
                                           size_t stride, size_t plane, float mu, int act,
                                           double *sdy, double *sdyc)
{
    __m512 va = _mm512_setzero_ps(), vb = _mm512_setzero_ps();
    const __m512 vmu = _mm512_set1_ps(mu);
    float a[16], b[16];

    for (int s = 0; s < n; s++) {
        const size_t at = (size_t)s * stride;
        const float *g = dy + at, *o = y + at, *p = x + at;
        size_t i = 0;
        for (; i + 16 <= plane; i += 16) {
            if (s + 1 < n) {
                _mm_prefetch((const char *)(g + stride + i), _MM_HINT_T0);
                _mm_prefetch((const char *)(o + stride + i), _MM_HINT_T0);
                _mm_prefetch((const char *)(p + stride + i), _MM_HINT_T0);
            }
            __m512 gv = _mm512_maskz_loadu_ps(act_live_avx512(_mm512_loadu_ps(o + i), act), g + i);
            va = _mm512_add_ps(va, gv);
            vb = _mm512_add_ps(vb, _mm512_mul_ps(gv, _mm512_sub_ps(_mm512_loadu_ps(p + i), vmu)));
        }
        if (i < plane) {
            const __mmask16 m = lanes(0, (int)(plane - i));
            const __mmask16 live = m & act_live_avx512(_mm512_maskz_loadu_ps(m, o + i), act);
            __m512 gv = _mm512_maskz_loadu_ps(live, g + i);
            va = _mm512_mask_add_ps(va, m, va, gv);
            vb = _mm512_mask_add_ps(
                vb, m, vb, _mm512_mul_ps(gv, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + i), vmu)));
        }
    }
    _mm512_storeu_ps(a, va);
    _mm512_storeu_ps(b, vb);
    add_lanes(a, b, sdy, sdyc);
}

void nl_bn_grad_sums_act(const float *dy, const float *y, const float *x, int n, size_t stride,
                         size_t plane, float mu, int act, double *sdy, double *sdyc)
{
    if (act == NL_ACT_NONE) /* the same floats without reading y */
        nl_bn_grad_sums(dy, x, n, stride, plane, mu, sdy, sdyc);
    else if (vector_on)
        bn_grad_sums_act_avx512(dy, y, x, n, stride, plane, mu, act, sdy, sdyc);
    else
        nl_bn_grad_sums_act_naive(dy, y, x, n, stride, plane, mu, act, sdy, sdyc);
}

void nl_bn_backward_apply_act_naive(float *restrict dx, const float *restrict dy,
                                    const float *restrict y, const float *restrict x, size_t n,
                                    float g, float a1, float a2, float mu, float is, int act,
                                    int set)
{
    for (size_t i = 0; i < n; i++) {
        float gv = act_live(y[i], act) ? dy[i] : 0.0f;
        float v = g * (gv - a1 - ((x[i] - mu) * is) * a2);
        dx[i] = set ? v : dx[i] + v;
    }
}

/* Batchnorm's input gradient at the m lanes of dx: g * (dy - a1 - xhat * a2), dy read where live
 * (the output's mask), added to dx unless set. */
AVX512 static inline __attribute__((always_inline)) void
bn_apply_store(float *dx, const float *dy, __mmask16 m, __mmask16 live, __m512 xh, __m512 vg,
               __m512 va1, __m512 va2, int set)
{
    __m512 v =
        _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, dy), va1), _mm512_mul_ps(xh, va2));
    v = _mm512_mul_ps(vg, v);
    if (!set)
        v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dx), v);
    _mm512_mask_storeu_ps(dx, m, v);
}

AVX512 static void bn_backward_apply_act_avx512(float *dx, const float *dy, const float *y,
                                                const float *x, size_t n, float g, float a1,
                                                float a2, float mu, float is, int act, int set)
{
    const __m512 vg = _mm512_set1_ps(g), va1 = _mm512_set1_ps(a1), va2 = _mm512_set1_ps(a2),
                 vmu = _mm512_set1_ps(mu), vis = _mm512_set1_ps(is);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        const __mmask16 live = m & act_live_avx512(_mm512_maskz_loadu_ps(m, y + i), act);
        __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmu), vis);
        bn_apply_store(dx + i, dy + i, m, live, xh, vg, va1, va2, set);
    }
}

void nl_bn_backward_apply_act(float *dx, const float *dy, const float *y, const float *x, size_t n,
                              float g, float a1, float a2, float mu, float is, int act, int set)
{
    if (act == NL_ACT_NONE)
        nl_bn_backward_apply(dx, dy, x, n, g, a1, a2, mu, is, set);
    else if (vector_on)
        bn_backward_apply_act_avx512(dx, dy, y, x, n, g, a1, a2, mu, is, act, set);
    else
        nl_bn_backward_apply_act_naive(dx, dy, y, x, n, g, a1, a2, mu, is, act, set);
}

/* dx and dres may be one buffer (an add whose other input is this batchnorm's own input): each
 * element's dres is updated before its dx, as the unfused layers do. */
void nl_bn_backward_apply_res_naive(float *dx, float *dres, const float *restrict dy,
                                    const float *restrict y, const float *restrict x, size_t n,
                                    float g, float a1, float a2, float mu, float is, int act,
                                    unsigned set)
{
    for (size_t i = 0; i < n; i++) {
        float gv = act_live(y[i], act) ? dy[i] : 0.0f;
        float v = g * (gv - a1 - ((x[i] - mu) * is) * a2);
        dres[i] = set & 2 ? gv : dres[i] + gv;
        dx[i] = set & 1 ? v : dx[i] + v;
    }
}

/* bn_backward_apply_res at the m lanes from dx, dres, dy, y and x: dres the masked dy, dx
 * g * (gv - a1 - xhat * a2), each written or added by set. */
AVX512 static inline __attribute__((always_inline)) void
bn_res_store(float *dx, float *dres, const float *dy, const float *y, const float *x, __mmask16 m,
             __m512 vg, __m512 va1, __m512 va2, __m512 vmu, __m512 vis, int act, unsigned set)
{
    const __mmask16 live = m & act_live_avx512(_mm512_maskz_loadu_ps(m, y), act);
    const __m512 gv = _mm512_maskz_loadu_ps(live, dy);
    _mm512_mask_storeu_ps(dres, m,
                          set & 2 ? gv : _mm512_add_ps(_mm512_maskz_loadu_ps(m, dres), gv));
    __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x), vmu), vis);
    __m512 v = _mm512_mul_ps(vg, _mm512_sub_ps(_mm512_sub_ps(gv, va1), _mm512_mul_ps(xh, va2)));
    if (!(set & 1))
        v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dx), v);
    _mm512_mask_storeu_ps(dx, m, v);
}

AVX512 static void bn_backward_apply_res_avx512(float *dx, float *dres, const float *dy,
                                                const float *y, const float *x, size_t n, float g,
                                                float a1, float a2, float mu, float is, int act,
                                                unsigned set)
{
    const __m512 vg = _mm512_set1_ps(g), va1 = _mm512_set1_ps(a1), va2 = _mm512_set1_ps(a2),
                 vmu = _mm512_set1_ps(mu), vis = _mm512_set1_ps(is);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        bn_res_store(dx + i, dres + i, dy + i, y + i, x + i, m, vg, va1, va2, vmu, vis, act, set);
    }
}

void nl_bn_backward_apply_res(float *dx, float *dres, const float *dy, const float *y,
                              const float *x, size_t n, float g, float a1, float a2, float mu,
                              float is, int act, unsigned set)
{
    if (vector_on)
        bn_backward_apply_res_avx512(dx, dres, dy, y, x, n, g, a1, a2, mu, is, act, set);
    else
        nl_bn_backward_apply_res_naive(dx, dres, dy, y, x, n, g, a1, a2, mu, is, act, set);
}

/* nl_bn_grad_sums_act and nl_bn_backward_apply_act where the fused activation came straight
 * after the normalisation (no residual): its mask is judged from v = w * ((x - mu) * is) + b,
 * the float forward computed and passed through act, instead of from the stored output, so the
 * passes read two streams of three. act(v) > 0 exactly where v > 0 (and < 6 where v < 6), so
 * the mask, and every float after it, is the one read from the output. */
static inline int mask_live(float x, float mu, float is, float w, float b, int act)
{
    const float v = w * ((x - mu) * is) + b;
    return act == NL_ACT_RELU6 ? v > 0.0f && v < 6.0f : v > 0.0f;
}

void nl_bn_grad_sums_mask_naive(const float *restrict dy, const float *restrict x, int n,
                                size_t stride, size_t plane, float mu, float is, float w, float b,
                                int act, double *sdy, double *sdyc)
{
    float a[16] = {0}, c[16] = {0};

    for (int s = 0; s < n; s++) {
        const size_t at = (size_t)s * stride;
        const float *g = dy + at, *p = x + at;
        for (size_t i = 0; i < plane; i += 16)
            for (size_t j = 0; j < 16 && i + j < plane; j++) {
                float gv = mask_live(p[i + j], mu, is, w, b, act) ? g[i + j] : 0.0f;
                a[j] += gv;
                c[j] += gv * (p[i + j] - mu);
            }
    }
    add_lanes(a, c, sdy, sdyc);
}

/* The forward output's mask from x - mu (xc): act_live_avx512 of v, as forward wrote act(v). */
AVX512 static inline __attribute__((always_inline)) __mmask16
mask_live_avx512(__m512 xc, __m512 vis, __m512 vw, __m512 vb, int act)
{
    return act_live_avx512(_mm512_add_ps(_mm512_mul_ps(vw, _mm512_mul_ps(xc, vis)), vb), act);
}

AVX512 static void bn_grad_sums_mask_avx512(const float *dy, const float *x, int n, size_t stride,
                                            size_t plane, float mu, float is, float w, float b,
                                            int act, double *sdy, double *sdyc)
{
    __m512 va = _mm512_setzero_ps(), vc = _mm512_setzero_ps();
    const __m512 vmu = _mm512_set1_ps(mu), vis = _mm512_set1_ps(is), vw = _mm512_set1_ps(w),
                 vb = _mm512_set1_ps(b);
    float a[16], c[16];

    for (int s = 0; s < n; s++) {
        const size_t at = (size_t)s * stride;
        const float *g = dy + at, *p = x + at;
        size_t i = 0;
        for (; i + 16 <= plane; i += 16) {
            if (s + 1 < n) {
                _mm_prefetch((const char *)(g + stride + i), _MM_HINT_T0);
                _mm_prefetch((const char *)(p + stride + i), _MM_HINT_T0);
            }
            const __m512 xc = _mm512_sub_ps(_mm512_loadu_ps(p + i), vmu);
            __m512 gv = _mm512_maskz_loadu_ps(mask_live_avx512(xc, vis, vw, vb, act), g + i);
            va = _mm512_add_ps(va, gv);
            vc = _mm512_add_ps(vc, _mm512_mul_ps(gv, xc));
        }
        if (i < plane) {
            const __mmask16 m = lanes(0, (int)(plane - i));
            const __m512 xc = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + i), vmu);
            __m512 gv = _mm512_maskz_loadu_ps(m & mask_live_avx512(xc, vis, vw, vb, act), g + i);
            va = _mm512_mask_add_ps(va, m, va, gv);
            vc = _mm512_mask_add_ps(vc, m, vc, _mm512_mul_ps(gv, xc));
        }
    }
    _mm512_storeu_ps(a, va);
    _mm512_storeu_ps(c, vc);
    add_lanes(a, c, sdy, sdyc);
}

void nl_bn_grad_sums_mask(const float *dy, const float *x, int n, size_t stride, size_t plane,
                          float mu, float is, float w, float b, int act, double *sdy, double *sdyc)
{
    if (act == NL_ACT_NONE)
        nl_bn_grad_sums(dy, x, n, stride, plane, mu, sdy, sdyc);
    else if (vector_on)
        bn_grad_sums_mask_avx512(dy, x, n, stride, plane, mu, is, w, b, act, sdy, sdyc);
    else
        nl_bn_grad_sums_mask_naive(dy, x, n, stride, plane, mu, is, w, b, act, sdy, sdyc);
}

void nl_bn_backward_apply_mask_naive(float *restrict dx, const float *restrict dy,
                                     const float *restrict x, size_t n, float g, float a1, float a2,
                                     float mu, float is, float w, float b, int act, int set)
{
    for (size_t i = 0; i < n; i++) {
        float gv = mask_live(x[i], mu, is, w, b, act) ? dy[i] : 0.0f;
        float v = g * (gv - a1 - ((x[i] - mu) * is) * a2);
        dx[i] = set ? v : dx[i] + v;
    }
}

/* Batchnorm's input gradient over n floats of one channel where the forward output's mask
 * (mask_live_avx512) is live: everywhere for NL_ACT_NONE, the plain pass's. */
AVX512 static inline __attribute__((always_inline)) void
bn_backward_apply_body(float *dx, const float *dy, const float *x, size_t n, float g, float a1,
                       float a2, float mu, float is, float w, float b, int act, int set)
{
    const __m512 vg = _mm512_set1_ps(g), va1 = _mm512_set1_ps(a1), va2 = _mm512_set1_ps(a2),
                 vmu = _mm512_set1_ps(mu), vis = _mm512_set1_ps(is), vw = _mm512_set1_ps(w),
                 vb = _mm512_set1_ps(b);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        const __m512 xc = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmu);
        const __mmask16 live = act == NL_ACT_NONE ? m : m & mask_live_avx512(xc, vis, vw, vb, act);
        __m512 xh = _mm512_mul_ps(xc, vis);
        bn_apply_store(dx + i, dy + i, m, live, xh, vg, va1, va2, set);
    }
}

AVX512 static void bn_backward_apply_avx512(float *dx, const float *dy, const float *x, size_t n,
                                            float g, float a1, float a2, float mu, float is,
                                            int set)
{
    bn_backward_apply_body(dx, dy, x, n, g, a1, a2, mu, is, 0.0f, 0.0f, NL_ACT_NONE, set);
}

void nl_bn_backward_apply(float *dx, const float *dy, const float *x, size_t n, float g, float a1,
                          float a2, float mu, float is, int set)
{
    if (vector_on)
        bn_backward_apply_avx512(dx, dy, x, n, g, a1, a2, mu, is, set);
    else
        nl_bn_backward_apply_naive(dx, dy, x, n, g, a1, a2, mu, is, set);
}

AVX512 static void bn_backward_apply_mask_avx512(float *dx, const float *dy, const float *x,
                                                 size_t n, float g, float a1, float a2, float mu,
                                                 float is, float w, float b, int act, int set)
{
    bn_backward_apply_body(dx, dy, x, n, g, a1, a2, mu, is, w, b, act, set);
}

void nl_bn_backward_apply_mask(float *dx, const float *dy, const float *x, size_t n, float g,
                               float a1, float a2, float mu, float is, float w, float b, int act,
                               int set)
{
    if (act == NL_ACT_NONE)
        nl_bn_backward_apply(dx, dy, x, n, g, a1, a2, mu, is, set);
    else if (vector_on)
        bn_backward_apply_mask_avx512(dx, dy, x, n, g, a1, a2, mu, is, w, b, act, set);
    else
        nl_bn_backward_apply_mask_naive(dx, dy, x, n, g, a1, a2, mu, is, w, b, act, set);
}

/* Batchnorm's element-wise passes over the c channels of one image at once, for planes of 1, 2,
 * 4, 8 or 16 pixels (nl_bn_chans_fit): a vector holds 16 / plane channels' planes, each lane
 * taking its channel's parameters (a permute of the arrays' next 16 / plane entries), and each
 * element goes through the same operations as in the kernels above, so the floats are theirs bit
 * for bit. Why: a channel's plane of 4 or 16 floats is one call of the kernels above, and the
 * calls cost more than the floats (ResNet-18 at 3x64x64: 253 us a batchnorm of 512 channels of
 * 2x2 planes for 16 images). */
int nl_bn_chans_fit(size_t plane)
{
    return plane == 1 || plane == 2 || plane == 4 || plane == 8 || plane == 16;
}

/* The lanes' channels of the vector at float i, and their parameters from a. */
AVX512 static inline __attribute__((always_inline)) __m512
chan_params(const float *a, size_t i, size_t plane, int c, __m512i idx)
{
    const size_t k0 = i / plane;
    const int left = c - (int)k0, per = (int)(16 / plane);
    return _mm512_permutexvar_ps(idx,
                                 _mm512_maskz_loadu_ps(lanes(0, left < per ? left : per), a + k0));
}

AVX512 static inline __attribute__((always_inline)) __m512i chan_index(size_t plane)
{
    int v[16];
    for (int l = 0; l < 16; l++)
        v[l] = l / (int)plane;
    return _mm512_loadu_si512(v);
}

/* The backward passes' five parameters of the lanes of the vector at float i. */
AVX512 static inline __attribute__((always_inline)) void
grad_params(__m512 *vg, __m512 *va1, __m512 *va2, __m512 *vmu, __m512 *vis, const float *g,
            const float *a1, const float *a2, const float *mu, const float *is, size_t i,
            size_t plane, int c, __m512i idx)
{
    *vg = chan_params(g, i, plane, c, idx);
    *va1 = chan_params(a1, i, plane, c, idx);
    *va2 = chan_params(a2, i, plane, c, idx);
    *vmu = chan_params(mu, i, plane, c, idx);
    *vis = chan_params(is, i, plane, c, idx);
}

void nl_bn_apply_act_chans_naive(float *y, const float *x, const float *res, size_t plane, int c,
                                 const float *mu, const float *is, const float *g, const float *b,
                                 int act)
{
    for (int k = 0; k < c; k++) {
        const size_t at = (size_t)k * plane;
        nl_bn_apply_act_naive(y + at, x + at, res ? res + at : NULL, plane, mu[k], is[k], g[k],
                              b[k], act);
    }
}

AVX512 static void bn_apply_act_chans_avx512(float *y, const float *x, const float *res,
                                             size_t plane, int c, const float *mu, const float *is,
                                             const float *g, const float *b, int act)
{
    const size_t n = (size_t)c * plane;
    const __m512i idx = chan_index(plane);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        const __m512 vmu = chan_params(mu, i, plane, c, idx),
                     vis = chan_params(is, i, plane, c, idx), vg = chan_params(g, i, plane, c, idx),
                     vb = chan_params(b, i, plane, c, idx);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        v = _mm512_add_ps(_mm512_mul_ps(vg, _mm512_mul_ps(_mm512_sub_ps(v, vmu), vis)), vb);
        if (res)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res + i));
        _mm512_mask_storeu_ps(y + i, m, act_avx512(v, act));
    }
}

void nl_bn_apply_act_chans(float *y, const float *x, const float *res, size_t plane, int c,
                           const float *mu, const float *is, const float *g, const float *b,
                           int act)
{
    if (vector_on && nl_bn_chans_fit(plane))
        bn_apply_act_chans_avx512(y, x, res, plane, c, mu, is, g, b, act);
    else
        nl_bn_apply_act_chans_naive(y, x, res, plane, c, mu, is, g, b, act);
}

void nl_bn_backward_apply_res_chans_naive(float *dx, float *dres, const float *dy, const float *y,
                                          const float *x, size_t plane, int c, const float *g,
                                          const float *a1, const float *a2, const float *mu,
                                          const float *is, int act, unsigned set)
{
    for (int k = 0; k < c; k++) {
        const size_t at = (size_t)k * plane;
        nl_bn_backward_apply_res_naive(dx + at, dres + at, dy + at, y + at, x + at, plane, g[k],
                                       a1[k], a2[k], mu[k], is[k], act, set);
    }
}

AVX512 static void bn_backward_apply_res_chans_avx512(float *dx, float *dres, const float *dy,
                                                      const float *y, const float *x, size_t plane,
                                                      int c, const float *g, const float *a1,
                                                      const float *a2, const float *mu,
                                                      const float *is, int act, unsigned set)
{
    const size_t n = (size_t)c * plane;
    const __m512i idx = chan_index(plane);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        __m512 vg, va1, va2, vmu, vis;
        grad_params(&vg, &va1, &va2, &vmu, &vis, g, a1, a2, mu, is, i, plane, c, idx);
        bn_res_store(dx + i, dres + i, dy + i, y + i, x + i, m, vg, va1, va2, vmu, vis, act, set);
    }
}

void nl_bn_backward_apply_res_chans(float *dx, float *dres, const float *dy, const float *y,
                                    const float *x, size_t plane, int c, const float *g,
                                    const float *a1, const float *a2, const float *mu,
                                    const float *is, int act, unsigned set)
{
    if (vector_on && nl_bn_chans_fit(plane))
        bn_backward_apply_res_chans_avx512(dx, dres, dy, y, x, plane, c, g, a1, a2, mu, is, act,
                                           set);
    else
        nl_bn_backward_apply_res_chans_naive(dx, dres, dy, y, x, plane, c, g, a1, a2, mu, is, act,
                                             set);
}

void nl_bn_backward_apply_mask_chans_naive(float *dx, const float *dy, const float *x, size_t plane,
                                           int c, const float *g, const float *a1, const float *a2,
                                           const float *mu, const float *is, const float *w,
                                           const float *b, int act, int set)
{
    for (int k = 0; k < c; k++) {
        const size_t at = (size_t)k * plane;
        if (act == NL_ACT_NONE)
            nl_bn_backward_apply_naive(dx + at, dy + at, x + at, plane, g[k], a1[k], a2[k], mu[k],
                                       is[k], set);
        else
            nl_bn_backward_apply_mask_naive(dx + at, dy + at, x + at, plane, g[k], a1[k], a2[k],
                                            mu[k], is[k], w[k], b[k], act, set);
    }
}

AVX512 static void bn_backward_apply_mask_chans_avx512(float *dx, const float *dy, const float *x,
                                                       size_t plane, int c, const float *g,
                                                       const float *a1, const float *a2,
                                                       const float *mu, const float *is,
                                                       const float *w, const float *b, int act,
                                                       int set)
{
    const size_t n = (size_t)c * plane;
    const __m512i idx = chan_index(plane);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        __m512 vg, va1, va2, vmu, vis;
        grad_params(&vg, &va1, &va2, &vmu, &vis, g, a1, a2, mu, is, i, plane, c, idx);
        const __m512 xc = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmu);
        __mmask16 live = m;
        if (act != NL_ACT_NONE)
            live &= mask_live_avx512(xc, vis, chan_params(w, i, plane, c, idx),
                                     chan_params(b, i, plane, c, idx), act);
        const __m512 xh = _mm512_mul_ps(xc, vis);
        bn_apply_store(dx + i, dy + i, m, live, xh, vg, va1, va2, set);
    }
}

void nl_bn_backward_apply_mask_chans(float *dx, const float *dy, const float *x, size_t plane,
                                     int c, const float *g, const float *a1, const float *a2,
                                     const float *mu, const float *is, const float *w,
                                     const float *b, int act, int set)
{
    if (vector_on && nl_bn_chans_fit(plane))
        bn_backward_apply_mask_chans_avx512(dx, dy, x, plane, c, g, a1, a2, mu, is, w, b, act, set);
    else
        nl_bn_backward_apply_mask_chans_naive(dx, dy, x, plane, c, g, a1, a2, mu, is, w, b, act,
                                              set);
}

void nl_add_act_backward_naive(float *d0, float *d1, const float *y, const float *dy, size_t n,
                               int act, unsigned set)
{
    for (size_t i = 0; i < n; i++) {
        float gv = act_live(y[i], act) ? dy[i] : 0.0f;
        if (d0)
            d0[i] = set & 1 ? gv : d0[i] + gv;
        if (d1)
            d1[i] = set & 2 ? gv : d1[i] + gv;
    }
}

AVX512 static void add_act_backward_avx512(float *d0, float *d1, const float *y, const float *dy,
                                           size_t n, int act, unsigned set)
{
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        const __mmask16 live = m & act_live_avx512(_mm512_maskz_loadu_ps(m, y + i), act);
        const __m512 gv = _mm512_maskz_loadu_ps(live, dy + i);
        if (d0)
            _mm512_mask_storeu_ps(
                d0 + i, m, set & 1 ? gv : _mm512_add_ps(_mm512_maskz_loadu_ps(m, d0 + i), gv));
        if (d1)
            _mm512_mask_storeu_ps(
                d1 + i, m, set & 2 ? gv : _mm512_add_ps(_mm512_maskz_loadu_ps(m, d1 + i), gv));
    }
}

void nl_add_act_backward(float *d0, float *d1, const float *y, const float *dy, size_t n, int act,
                         unsigned set)
{
    if (vector_on)
        add_act_backward_avx512(d0, d1, y, dy, n, act, set);
    else
        nl_add_act_backward_naive(d0, d1, y, dy, n, act, set);
}

/* A hint, no result: the lines of x[0, n) are asked into the caches (read prefetches, which a
 * later store finds in an exclusive state). Batchnorm's passes over one channel of a shard read
 * and write n planes a whole image apart, each plane shorter than a page, too short for the
 * hardware's stream prefetchers to pick up before it ends. */
void nl_prefetch(const float *x, size_t n)
{
    if (n == 0)
        return;
    for (size_t i = 0; i < n; i += 16)
        _mm_prefetch((const char *)(x + i), _MM_HINT_T0);
    _mm_prefetch((const char *)(x + n - 1), _MM_HINT_T0);
}

/* SGD's update and the reduction of the threads' gradients (core/engine/optim.c and trainer.c),
 * each one pass over memory. The vector paths do the scalar loops' multiplies and adds in the
 * same order, unfused, so they agree bit for bit. */
void nl_sgd_update_naive(float *w, float *v, float *g, size_t n, float lr, float mu, float wd,
                         int nesterov, int clear)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * w[i];
        if (v) {
            v[i] = mu * v[i] + gi;
            w[i] -= lr * (nesterov ? gi + mu * v[i] : v[i]);
        } else {
            w[i] -= lr * gi;
        }
        if (clear)
            g[i] = 0.0f;
    }
}

AVX512 static void sgd_update_avx512(float *w, float *v, float *g, size_t n, float lr, float mu,
                                     float wd, int nesterov, int clear)
{
    const __m512 vlr = _mm512_set1_ps(lr), vmu = _mm512_set1_ps(mu), vwd = _mm512_set1_ps(wd);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        __m512 wi = _mm512_maskz_loadu_ps(m, w + i);
        __m512 gi = _mm512_add_ps(_mm512_maskz_loadu_ps(m, g + i), _mm512_mul_ps(vwd, wi));
        __m512 step = gi;
        if (v) {
            __m512 vi = _mm512_add_ps(_mm512_mul_ps(vmu, _mm512_maskz_loadu_ps(m, v + i)), gi);
            _mm512_mask_storeu_ps(v + i, m, vi);
            step = nesterov ? _mm512_add_ps(gi, _mm512_mul_ps(vmu, vi)) : vi;
        }
        _mm512_mask_storeu_ps(w + i, m, _mm512_sub_ps(wi, _mm512_mul_ps(vlr, step)));
        if (clear)
            _mm512_mask_storeu_ps(g + i, m, _mm512_setzero_ps());
    }
}

void nl_sgd_update(float *w, float *v, float *g, size_t n, float lr, float mu, float wd,
                   int nesterov, int clear)
{
    if (vector_on)
        sgd_update_avx512(w, v, g, n, lr, mu, wd, nesterov, clear);
    else
        nl_sgd_update_naive(w, v, g, n, lr, mu, wd, nesterov, clear);
}

void nl_add_clear_naive(float *g, float *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        g[i] += h[i];
        h[i] = 0.0f;
    }
}

AVX512 static void add_clear_avx512(float *g, float *h, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(0, (int)(n - i < 16 ? n - i : 16));
        _mm512_mask_storeu_ps(
            g + i, m,
            _mm512_add_ps(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, h + i)));
        _mm512_mask_storeu_ps(h + i, m, _mm512_setzero_ps());
    }
}

void nl_add_clear(float *g, float *h, size_t n)
{
    if (vector_on)
        add_clear_avx512(g, h, n);
    else
        nl_add_clear_naive(g, h, n);
}
