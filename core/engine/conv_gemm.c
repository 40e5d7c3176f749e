/* Small matrix products with the left matrix packed (nnlab/conv_gemm.h): the PACKED lowering of
 * core/engine/layers/conv.c.
 *
 * OpenBLAS packs both operands at every call. One image of LeNet's conv2 is a product of
 * (50, 500) weights by (500, 64) columns: the weights' 25000 floats are packed again for every
 * image, and 64 columns pay it back poorly. Here the weights are packed once per shard, into
 * panels of 6 rows (5 where 5 divides the rows and 6 does not: nl_pgemm_mr), k-major, and the
 * columns are read where im2col wrote them:
 *
 * - a tile of 6 rows by 64 columns (24 vectors) stays in registers; per k, 4 loads of the right
 *   matrix's row, 6 broadcasts of the panel and 24 fused multiply-adds. A tile of fewer rows has
 *   fewer chains to hide the multiply-adds' latency: LeNet's conv2 (50 filters) as eight panels
 *   of 6 and one of 2 ran its forward product at 168 GFLOP/s and its weight gradient at 144, as
 *   ten panels of 5 at 171 and 153 (one image, thread CPU time, fastest of 7 x 2000, 2026-11-27,
 *   load average 4; a 6 x 64 tile in the L1 cache runs at 172, 24 chains of multiply-adds in
 *   registers alone at 176);
 * - the columns go 64 at a time (the last vector masked), k in blocks of KC = 128 rows, so that
 *   a block of the right matrix (32 KiB) stays in the L1 cache while every panel passes over it;
 *   the tile is stored after each block and loaded again before the next, which changes no sum.
 *
 * Each output is one chain of fused multiply-adds in the order of k from its initial value, as
 * the naive twin computes it with fmaf: the two agree bit for bit.
 *
 * nl_im2col_t writes the columns transposed, one output pixel's window per row, for the weight
 * gradient dW (F, K) += dout (F, P) colst (P, K), whose right matrix must be read by rows of K.
 *
 * The same tiles serve nl_sgemm where OpenBLAS runs kernels narrower than the CPU's AVX-512
 * (nl_sgemm_own, core/engine/kernels.c): nl_pgemm_rows reads the left matrix where it lies, a
 * panel's rows by their stride (or, turned, a panel's column side by side as packed), and
 * nl_pgemm_nt turns its right matrix a block at a time into a buffer on the stack, or takes a
 * thin product as dot products of 16 lanes. */
#include "nnlab/conv_gemm.h"

#include <math.h>
#include <string.h>

#include "nnlab/kernels.h"
#include "simd.h"

#define MR NL_PGEMM_MR
#define NB 64
#define KC 128

int nl_pgemm_mr(int m)
{
    return m % MR != 0 && m % 5 == 0 ? 5 : MR;
}

size_t nl_pgemm_packed_floats(int m, int k)
{
    const int mr = nl_pgemm_mr(m);

    return (size_t)((m + mr - 1) / mr) * mr * (size_t)k;
}

void nl_pgemm_pack(float *ap, const float *a, int lda, int trans, int m, int k)
{
    const int ph = nl_pgemm_mr(m);

    for (int i0 = 0; i0 < m; i0 += ph) {
        float *p = ap + (size_t)i0 * k;
        const int rows = m - i0 < ph ? m - i0 : ph;
        if (trans && rows == 5 && ph == 5) { /* a whole panel of 5, copies of known length */
            for (int kk = 0; kk < k; kk++)
                memcpy(p + (size_t)kk * 5, a + (size_t)kk * lda + i0, 5 * sizeof *p);
            continue;
        }
        if (trans) {
            for (int kk = 0; kk < k; kk++) {
                const float *src = a + (size_t)kk * lda + i0;
                for (int r = 0; r < ph; r++)
                    p[(size_t)kk * ph + r] = r < rows ? src[r] : 0.0f;
            }
            continue;
        }
        if (rows < ph) {
            for (int r = 0; r < ph; r++) {
                const float *src = a + (size_t)(i0 + r) * lda;
                for (int kk = 0; kk < k; kk++)
                    p[(size_t)kk * ph + r] = r < rows ? src[kk] : 0.0f;
            }
            continue;
        }
        /* the panel's rows read side by side, the panel written in order */
        const float *s0 = a + (size_t)i0 * lda, *s1 = s0 + lda, *s2 = s1 + lda, *s3 = s2 + lda,
                    *s4 = s3 + lda, *s5 = s4 + lda;
        if (ph == 5) {
            for (int kk = 0; kk < k; kk++, p += 5) {
                p[0] = s0[kk];
                p[1] = s1[kk];
                p[2] = s2[kk];
                p[3] = s3[kk];
                p[4] = s4[kk];
            }
            continue;
        }
        for (int kk = 0; kk < k; kk++, p += MR) {
            p[0] = s0[kk];
            p[1] = s1[kk];
            p[2] = s2[kk];
            p[3] = s3[kk];
            p[4] = s4[kk];
            p[5] = s5[kk];
        }
    }
}

void nl_pgemm_naive(float *c, int ldc, const float *ap, const float *b, int ldb, int m, int n,
                    int k, const float *bias, int accumulate)
{
    const int ph = nl_pgemm_mr(m);

    for (int i = 0; i < m; i++) {
        const float *p = ap + (size_t)(i / ph) * ph * k + i % ph;
        for (int j = 0; j < n; j++) {
            float *cij = c + (size_t)i * ldc + j;
            float acc = accumulate ? *cij : bias ? bias[i] : 0.0f;
            for (int kk = 0; kk < k; kk++)
                acc = fmaf(p[(size_t)kk * ph], b[(size_t)kk * ldb + j], acc);
            *cij = acc;
        }
    }
}

/* One tile: c (mr, up to 16*nv) from its initial value (init: 0 zero, 1 bias, 2 c itself) plus
 * the left matrix's k columns times b's k rows, the left matrix's element (r, kk) at
 * ap[kk * ks + r * rs] (a packed panel: ks = its height, rs = 1); mask[v] picks the vector's
 * columns. mr and nv are constants in each instantiation, so the tile's mr*nv accumulators stay
 * in registers. */
AVX512 static inline __attribute__((always_inline)) void
tile_avx512(float *c, int ldc, const float *ap, size_t ks, size_t rs, const float *b, int ldb,
            int k, int init, const float *bias, const __mmask16 *mask, const int mr, const int nv,
            const int full)
{
    __m512 acc[MR][4];

#pragma GCC unroll 6
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[r][v] = init == 2 && full ? _mm512_loadu_ps(c + (size_t)r * ldc + 16 * v)
                        : init == 2 ? _mm512_maskz_loadu_ps(mask[v], c + (size_t)r * ldc + 16 * v)
                        : init == 1 ? _mm512_set1_ps(bias[r])
                                    : _mm512_setzero_ps();
    for (int kk = 0; kk < k; kk++) {
        const float *brow = b + (size_t)kk * ldb;
        const float *arow = ap + (size_t)kk * ks;
        __m512 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            bv[v] = full ? _mm512_loadu_ps(brow + 16 * v)
                         : _mm512_maskz_loadu_ps(mask[v], brow + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            const __m512 a = _mm512_set1_ps(arow[r * rs]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm512_fmadd_ps(a, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            if (full)
                _mm512_storeu_ps(c + (size_t)r * ldc + 16 * v, acc[r][v]);
            else
                _mm512_mask_storeu_ps(c + (size_t)r * ldc + 16 * v, mask[v], acc[r][v]);
}

#define TILE_MR(NV, FULL)                                                                          \
    switch (mr) {                                                                                  \
    case 1:                                                                                        \
        tile_avx512(c, ldc, ap, ks, rs, b, ldb, k, init, bias, mask, 1, NV, FULL);                 \
        break;                                                                                     \
    case 2:                                                                                        \
        tile_avx512(c, ldc, ap, ks, rs, b, ldb, k, init, bias, mask, 2, NV, FULL);                 \
        break;                                                                                     \
    case 3:                                                                                        \
        tile_avx512(c, ldc, ap, ks, rs, b, ldb, k, init, bias, mask, 3, NV, FULL);                 \
        break;                                                                                     \
    case 4:                                                                                        \
        tile_avx512(c, ldc, ap, ks, rs, b, ldb, k, init, bias, mask, 4, NV, FULL);                 \
        break;                                                                                     \
    case 5:                                                                                        \
        tile_avx512(c, ldc, ap, ks, rs, b, ldb, k, init, bias, mask, 5, NV, FULL);                 \
        break;                                                                                     \
    default:                                                                                       \
        tile_avx512(c, ldc, ap, ks, rs, b, ldb, k, init, bias, mask, 6, NV, FULL);                 \
        break;                                                                                     \
    }

AVX512 static void tile_any(float *c, int ldc, const float *ap, size_t ks, size_t rs,
                            const float *b, int ldb, int k, int init, const float *bias,
                            const __mmask16 *mask, int mr, int nv)
{
    /* a full tile of 64 columns, the common case, loads and stores without masks */
    if (nv == 4 && mask[3] == 0xffff) {
        TILE_MR(4, 1)
        return;
    }
    switch (nv) {
    case 1:
        TILE_MR(1, 0)
        break;
    case 2:
        TILE_MR(2, 0)
        break;
    case 3:
        TILE_MR(3, 0)
        break;
    default:
        TILE_MR(4, 0)
        break;
    }
}

/* c (m, n) = init + the left matrix (m, k) b; its element (i, kk) at a[i0 * ps + kk * ks + r * rs]
 * for i = i0 + r, i0 a multiple of the panel height ph, r < ph: a packed (ps = k, ks = ph, rs = 1),
 * given turned (ps = 1, ks = lda, rs = 1) or by rows (ps = lda, ks = 1, rs = lda). */
AVX512 static void pgemm_strided(float *c, int ldc, const float *a, size_t ps, size_t ks, size_t rs,
                                 int ph, const float *b, int ldb, int m, int n, int k,
                                 const float *bias, int accumulate)
{
    for (int j0 = 0; j0 < n; j0 += NB) {
        const int nj = n - j0 < NB ? n - j0 : NB, nv = (nj + 15) / 16;
        __mmask16 mask[4];
        for (int v = 0; v < 4; v++)
            mask[v] = lanes(0, nj - 16 * v);
        /* k == 0 still runs one block: the tile is its initial value */
        for (int kb = 0; kb < k || kb == 0; kb += KC) {
            const int kc = k - kb < KC ? k - kb : KC;
            const int init = accumulate || kb > 0 ? 2 : bias ? 1 : 0;
            for (int i0 = 0; i0 < m; i0 += ph) {
                const int mr = m - i0 < ph ? m - i0 : ph;
                tile_any(c + (size_t)i0 * ldc + j0, ldc, a + (size_t)i0 * ps + (size_t)kb * ks, ks,
                         rs, b + (size_t)kb * ldb + j0, ldb, kc, init, bias ? bias + i0 : NULL,
                         mask, mr, nv);
            }
        }
    }
}

AVX512 static void pgemm_avx512(float *c, int ldc, const float *ap, const float *b, int ldb, int m,
                                int n, int k, const float *bias, int accumulate)
{
    const int ph = nl_pgemm_mr(m);

    pgemm_strided(c, ldc, ap, (size_t)k, (size_t)ph, 1, ph, b, ldb, m, n, k, bias, accumulate);
}

void nl_pgemm(float *c, int ldc, const float *ap, const float *b, int ldb, int m, int n, int k,
              const float *bias, int accumulate)
{
    if (nl_kernels_vector_on())
        pgemm_avx512(c, ldc, ap, b, ldb, m, n, k, bias, accumulate);
    else
        nl_pgemm_naive(c, ldc, ap, b, ldb, m, n, k, bias, accumulate);
}

void nl_pgemm_rows(int trans_a, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, int accumulate, float *c, int ldc)
{
    const size_t ps = trans_a ? 1 : (size_t)lda, ks = trans_a ? (size_t)lda : 1;

    if (nl_kernels_vector_on()) {
        pgemm_strided(c, ldc, a, ps, ks, ps, nl_pgemm_mr(m), b, ldb, m, n, k, NULL, accumulate);
        return;
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float *cij = c + (size_t)i * ldc + j;
            float acc = accumulate ? *cij : 0.0f;
            for (int kk = 0; kk < k; kk++)
                acc = fmaf(a[(size_t)i * ps + (size_t)kk * ks], b[(size_t)kk * ldb + j], acc);
            *cij = acc;
        }
}

/* The 16 lanes of a dot product added pairwise: lane i and i + 8, then i and i + 4, i and i + 2,
 * and the last two. */
static inline float lanes_sum(const float *l)
{
    float h[8];
    for (int i = 0; i < 8; i++)
        h[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; i++)
        h[i] = h[i] + h[i + 4];
    return (h[0] + h[2]) + (h[1] + h[3]);
}

void nl_pgemm_nt_naive(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                       int accumulate, float *c, int ldc)
{
    const int dots = m < NL_PGEMM_NT_TILES || n < NL_PGEMM_NT_TILES;

    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            const float *ar = a + (size_t)i * lda, *br = b + (size_t)j * ldb;
            float *cij = c + (size_t)i * ldc + j;
            float acc = accumulate ? *cij : 0.0f;
            if (dots) {
                float l[16] = {0};
                for (int kk = 0; kk < k; kk++)
                    l[kk % 16] = fmaf(ar[kk], br[kk], l[kk % 16]);
                acc = accumulate ? acc + lanes_sum(l) : lanes_sum(l);
            } else {
                for (int kk = 0; kk < k; kk++)
                    acc = fmaf(ar[kk], br[kk], acc);
            }
            *cij = acc;
        }
}

/* Dot products of up to R rows of a by up to C rows of b in registers, 16 k at a time, the tail
 * masked with its lanes left as they were (a masked multiply-add), as the naive twin skips them. */
AVX512 static inline __attribute__((always_inline)) void
dot_block(int mr, int nr, int k, const float *a, int lda, const float *b, int ldb, int accumulate,
          float *c, int ldc, const int R, const int C)
{
    __m512 acc[4][8];

    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (int k0 = 0; k0 < k; k0 += 16) {
        const __mmask16 mk = lanes(0, k - k0);
        __m512 av[4], bv[8];
        for (int i = 0; i < R; i++)
            av[i] =
                i < mr ? _mm512_maskz_loadu_ps(mk, a + (size_t)i * lda + k0) : _mm512_setzero_ps();
        for (int j = 0; j < C; j++)
            bv[j] =
                j < nr ? _mm512_maskz_loadu_ps(mk, b + (size_t)j * ldb + k0) : _mm512_setzero_ps();
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++)
                acc[i][j] = _mm512_mask3_fmadd_ps(av[i], bv[j], acc[i][j], mk);
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float l[16];
            _mm512_storeu_ps(l, acc[i][j]);
            float *cij = c + (size_t)i * ldc + j;
            *cij = accumulate ? *cij + lanes_sum(l) : lanes_sum(l);
        }
}

/* A thin product (one side under NL_PGEMM_NT_TILES rows, as a dense layer's batch of one): 4 x 4
 * blocks of dot products, or 1 x 8 where a is a single row. */
AVX512 static void pgemm_dots(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                              int accumulate, float *c, int ldc)
{
    const int R = m == 1 ? 1 : 4, C = m == 1 ? 8 : 4;

    for (int i0 = 0; i0 < m; i0 += R)
        for (int j0 = 0; j0 < n; j0 += C) {
            const int mr = m - i0 < R ? m - i0 : R, nr = n - j0 < C ? n - j0 : C;
            const float *ai = a + (size_t)i0 * lda, *bj = b + (size_t)j0 * ldb;
            float *cij = c + (size_t)i0 * ldc + j0;
            if (R == 1)
                dot_block(mr, nr, k, ai, lda, bj, ldb, accumulate, cij, ldc, 1, 8);
            else
                dot_block(mr, nr, k, ai, lda, bj, ldb, accumulate, cij, ldc, 4, 4);
        }
}

/* bt (kc, NB) = b's rows [0, nj) (stride ldb), columns [0, kc), turned: each row of bt gathers
 * a column of 16 rows of b at once (as nl_s2_transpose does; 16 x 16 register transposes were
 * slower there), the last rows' gathers masked. */
AVX512 static void turn_block(float *bt, const float *b, int ldb, int nj, int kc)
{
    const __m512i idx =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(ldb));

    for (int j0 = 0; j0 < nj; j0 += 16) {
        const __mmask16 m = lanes(0, nj - j0);
        const float *src = b + (size_t)j0 * ldb;
        for (int kk = 0; kk < kc; kk++)
            _mm512_mask_storeu_ps(
                bt + (size_t)kk * NB + j0, m,
                _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, src + kk, 4));
    }
}

/* b's block of NB rows by NT_K columns turned into bt (NT_K, NB) on the stack, then the tiles
 * over it, reading a's rows in place. */
#define NT_K 256
void nl_pgemm_nt(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                 int accumulate, float *c, int ldc)
{
    float bt[NT_K * NB] __attribute__((aligned(64)));
    const int ph = nl_pgemm_mr(m);

    if (!nl_kernels_vector_on()) {
        nl_pgemm_nt_naive(m, n, k, a, lda, b, ldb, accumulate, c, ldc);
        return;
    }
    if (m < NL_PGEMM_NT_TILES || n < NL_PGEMM_NT_TILES) {
        pgemm_dots(m, n, k, a, lda, b, ldb, accumulate, c, ldc);
        return;
    }
    for (int j0 = 0; j0 < n; j0 += NB) {
        const int nj = n - j0 < NB ? n - j0 : NB;
        /* k == 0 still makes one pass: c takes its initial value */
        for (int k0 = 0; k0 < k || k0 == 0; k0 += NT_K) {
            const int kc = k - k0 < NT_K ? k - k0 : NT_K;
            turn_block(bt, b + (size_t)j0 * ldb + k0, ldb, nj, kc);
            pgemm_strided(c + j0, ldc, a + k0, (size_t)lda, 1, (size_t)lda, ph, bt, NB, m, nj, kc,
                          NULL, accumulate || k0 > 0);
        }
    }
}

void nl_im2col_t_naive(float *colst, const float *img, int c, int h, int w, int kh, int kw, int sh,
                       int sw, int ph, int pw, int oh, int ow)
{
    const size_t k = (size_t)c * kh * kw;

    for (int oy = 0; oy < oh; oy++)
        for (int ox = 0; ox < ow; ox++) {
            float *row = colst + ((size_t)oy * ow + ox) * k;
            for (int ci = 0; ci < c; ci++)
                for (int ki = 0; ki < kh; ki++)
                    for (int kj = 0; kj < kw; kj++) {
                        const int iy = oy * sh - ph + ki, ix = ox * sw - pw + kj;
                        *row++ = iy < 0 || iy >= h || ix < 0 || ix >= w
                                     ? 0.0f
                                     : img[((size_t)ci * h + iy) * w + ix];
                    }
        }
}

/* A window row of kw <= 16 taps: one masked load (zeros off the image's edges), one masked
 * store. */
AVX512 static void im2col_t_avx512(float *colst, const float *img, int c, int h, int w, int kh,
                                   int kw, int sh, int sw, int ph, int pw, int oh, int ow)
{
    const size_t k = (size_t)c * kh * kw;
    const __mmask16 store = lanes(0, kw);

    for (int oy = 0; oy < oh; oy++)
        for (int ox = 0; ox < ow; ox++) {
            float *row = colst + ((size_t)oy * ow + ox) * k;
            const int x0 = ox * sw - pw;
            const __mmask16 load = lanes(-x0, w - x0) & store;
            for (int ci = 0; ci < c; ci++)
                for (int ki = 0; ki < kh; ki++, row += kw) {
                    const int iy = oy * sh - ph + ki;
                    __m512 v = _mm512_setzero_ps();
                    if (iy >= 0 && iy < h)
                        v = _mm512_maskz_loadu_ps(load, img + ((size_t)ci * h + iy) * w + x0);
                    _mm512_mask_storeu_ps(row, store, v);
                }
        }
}

/* Stride 1 and no padding: a channel's window, kh*kw taps, lies in the image at offsets
 * ki*w + kj from its first pixel. It is cut into runs of at most 16 taps that lie within 32
 * floats of the image (lenet's conv2, 5x5 on rows of 12: taps 0-14 within 29 floats, 15-24
 * within 17); each run is two loads (masked to the run's pixels, so nothing past the window is
 * read), one two-source permute and one store of 16 lanes, whose lanes past the run the next
 * run's store overwrites (the last channel's runs are masked to the row). im2col_t_avx512 loads
 * and stores each window row of kw taps alone, masked: 6400 masked stores of 5 floats for one
 * image of lenet's conv2, where this makes 2560 stores; 5.1 to 5.6 us against 6.8 (thread CPU
 * time, fastest of 7 x 2000, 2026-11-27, load average 4 to 6). Both write 128 KiB, more than
 * the L1 cache holds: 2000 aligned stores of 64 bytes into the L2 cache alone take 2.7 us. */
#define RUNS_MAX 8

struct t_runs {
    int count;
    int first[RUNS_MAX]; /* the run's first tap */
    int taps[RUNS_MAX];  /* its taps */
    int at[RUNS_MAX];    /* its first pixel's offset in the window */
    int span[RUNS_MAX];  /* the offset of its last pixel from its first, < 32 */
    int idx[RUNS_MAX][16];
};

/* The runs of a kh x kw window on rows of w, or 0 where they would be more than RUNS_MAX. */
static int t_runs_plan(struct t_runs *r, int w, int kh, int kw)
{
    const int taps = kh * kw;
    int ki = 0, kj = 0; /* tap t's place in the window */

    r->count = 0;
    for (int t = 0; t < taps;) {
        const int at = ki * w + kj;
        int n = 0;
        if (r->count == RUNS_MAX)
            return 0;
        const int i = r->count++;
        for (; t + n < taps && n < 16 && ki * w + kj - at < 32; n++) {
            r->idx[i][n] = ki * w + kj - at;
            if (++kj == kw) {
                kj = 0;
                ki++;
            }
        }
        for (int l = n; l < 16; l++)
            r->idx[i][l] = 0;
        r->first[i] = t;
        r->taps[i] = n;
        r->at[i] = at;
        r->span[i] = r->idx[i][n - 1];
        t += n;
    }
    return 1;
}

AVX512 static void im2col_t_dense_avx512(float *colst, const float *img, int c, int h, int w,
                                         int kh, int kw, int oh, int ow, const struct t_runs *r)
{
    const int taps = kh * kw;
    const size_t k = (size_t)c * taps;
    __m512i idx[RUNS_MAX];
    __mmask16 lo[RUNS_MAX], hi[RUNS_MAX], end[RUNS_MAX];

    for (int i = 0; i < r->count; i++) {
        idx[i] = _mm512_loadu_si512(r->idx[i]);
        lo[i] = lanes(0, r->span[i] + 1);
        hi[i] = lanes(0, r->span[i] - 15);
        end[i] = lanes(0, taps - r->first[i]); /* not past the row */
    }
    for (int oy = 0; oy < oh; oy++)
        for (int ox = 0; ox < ow; ox++) {
            float *row = colst + ((size_t)oy * ow + ox) * k;
            const float *win = img + (size_t)oy * w + ox;
            for (int ci = 0; ci < c; ci++, row += taps, win += (size_t)h * w)
                for (int i = 0; i < r->count; i++) {
                    const float *src = win + r->at[i];
                    const __m512 a = _mm512_maskz_loadu_ps(lo[i], src),
                                 b = _mm512_maskz_loadu_ps(hi[i], src + 16);
                    const __m512 v = _mm512_permutex2var_ps(a, idx[i], b);
                    if (ci == c - 1)
                        _mm512_mask_storeu_ps(row + r->first[i], end[i], v);
                    else
                        _mm512_storeu_ps(row + r->first[i], v);
                }
        }
}

void nl_im2col_t(float *colst, const float *img, int c, int h, int w, int kh, int kw, int sh,
                 int sw, int ph, int pw, int oh, int ow)
{
    struct t_runs runs;

    if (nl_kernels_vector_on() && sh == 1 && sw == 1 && ph == 0 && pw == 0 &&
        t_runs_plan(&runs, w, kh, kw))
        im2col_t_dense_avx512(colst, img, c, h, w, kh, kw, oh, ow, &runs);
    else if (nl_kernels_vector_on() && kw <= 16)
        im2col_t_avx512(colst, img, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
    else
        nl_im2col_t_naive(colst, img, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
}

int nl_conv1c_fits(int c, int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow)
{
    return c == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && kh >= 1 && kw >= 1 && ow == 24 &&
           oh % 2 == 0;
}

void nl_conv1c_naive(float *out, const float *img, const float *weight, const float *bias, int h,
                     int w, int f, int kh, int kw, int oh, int ow)
{
    (void)h;
    for (int fo = 0; fo < f; fo++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                float acc = bias ? bias[fo] : 0.0f;
                for (int ki = 0; ki < kh; ki++)
                    for (int kj = 0; kj < kw; kj++)
                        acc = fmaf(weight[((size_t)fo * kh + ki) * kw + kj],
                                   img[(size_t)(oy + ki) * w + ox + kj], acc);
                out[((size_t)fo * oh + oy) * ow + ox] = acc;
            }
}

/* fb filters (a constant in each instantiation) over output rows oy and oy + 1, 48 pixels: the
 * vectors [0, 16) and [32, 48) lie in one row each and load whole; [16, 32) is the last 8 of the
 * first row and the first 8 of the second. */
AVX512 static inline __attribute__((always_inline)) void
conv1c_block(float *out, const float *img, const float *weight, const float *bias, int w, int kh,
             int kw, int oh, int fb)
{
    const int taps = kh * kw, p = oh * 24;

    for (int oy = 0; oy < oh; oy += 2) {
        __m512 acc[6][3];
#pragma GCC unroll 6
        for (int r = 0; r < fb; r++)
#pragma GCC unroll 3
            for (int v = 0; v < 3; v++)
                acc[r][v] = bias ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps();
        for (int ki = 0; ki < kh; ki++) {
            const float *r0 = img + (size_t)(oy + ki) * w, *r1 = r0 + w;
            const float *wk = weight + (size_t)ki * kw;
            for (int kj = 0; kj < kw; kj++) {
                const __m512 b0 = _mm512_loadu_ps(r0 + kj);
                const __m512d lo =
                    _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(r0 + 16 + kj)));
                const __m512 b1 = _mm512_castpd_ps(
                    _mm512_insertf64x4(lo, _mm256_castps_pd(_mm256_loadu_ps(r1 + kj)), 1));
                const __m512 b2 = _mm512_loadu_ps(r1 + 8 + kj);
#pragma GCC unroll 6
                for (int r = 0; r < fb; r++) {
                    const __m512 a = _mm512_set1_ps(wk[(size_t)r * taps + kj]);
                    acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
                    acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
                    acc[r][2] = _mm512_fmadd_ps(a, b2, acc[r][2]);
                }
            }
        }
#pragma GCC unroll 6
        for (int r = 0; r < fb; r++)
#pragma GCC unroll 3
            for (int v = 0; v < 3; v++)
                _mm512_storeu_ps(out + (size_t)r * p + (size_t)oy * 24 + 16 * v, acc[r][v]);
    }
}

AVX512 static void conv1c_avx512(float *out, const float *img, const float *weight,
                                 const float *bias, int w, int f, int kh, int kw, int oh)
{
    const size_t taps = (size_t)kh * kw, p = (size_t)oh * 24;

    /* blocks of 5 filters (15 accumulators), as lenet's 20 divide; the last block what is left */
    for (int f0 = 0; f0 < f; f0 += 5) {
        const int fb = f - f0 < 5 ? f - f0 : 5;
        float *o = out + (size_t)f0 * p;
        const float *wt = weight + (size_t)f0 * taps, *b = bias ? bias + f0 : NULL;
        switch (fb) {
        case 1:
            conv1c_block(o, img, wt, b, w, kh, kw, oh, 1);
            break;
        case 2:
            conv1c_block(o, img, wt, b, w, kh, kw, oh, 2);
            break;
        case 3:
            conv1c_block(o, img, wt, b, w, kh, kw, oh, 3);
            break;
        case 4:
            conv1c_block(o, img, wt, b, w, kh, kw, oh, 4);
            break;
        default:
            conv1c_block(o, img, wt, b, w, kh, kw, oh, 5);
            break;
        }
    }
}

void nl_conv1c(float *out, const float *img, const float *weight, const float *bias, int h, int w,
               int f, int kh, int kw, int oh, int ow)
{
    if (nl_kernels_vector_on() && nl_conv1c_fits(1, kh, kw, 1, 1, 0, 0, oh, ow))
        conv1c_avx512(out, img, weight, bias, w, f, kh, kw, oh);
    else
        nl_conv1c_naive(out, img, weight, bias, h, w, f, kh, kw, oh, ow);
}

int nl_conv1c_dweight_fits(int kw)
{
    return kw >= 1 && kw <= 5;
}

void nl_conv1c_dweight_naive(float *part, const float *dout, const float *img, int w, int f, int kh,
                             int kw, int oh, int ow)
{
    const int taps = kh * kw, p = oh * ow;

    for (int fo = 0; fo < f; fo++)
        for (int t = 0; t < taps; t++) {
            const int ki = t / kw, kj = t % kw;
            float *lane = part + ((size_t)fo * taps + t) * 16;
            for (int oy = 0; oy < oh; oy += 2)
                for (int q = 0; q < 2 * ow; q++) {
                    const int y = oy + q / ow, x = q % ow;
                    lane[q % 16] = fmaf(dout[(size_t)fo * p + (size_t)y * ow + x],
                                        img[(size_t)(y + ki) * w + x + kj], lane[q % 16]);
                }
        }
}

void nl_conv1c_dweight_finish(float *dweight, const float *part, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const float *lane = part + i * 16;
        float sum = lane[0];
        for (int l = 1; l < 16; l++)
            sum += lane[l];
        dweight[i] += sum;
    }
}

/* fb filters by the kw taps of window row ki (constants in each instantiation): fb*kw lanes'
 * chains in registers, the filters' dout of a pair of rows in 3*fb more. */
AVX512 static inline __attribute__((always_inline)) void
conv1c_dw_block(float *part, const float *dout, const float *img, int w, int kh, int oh, int p,
                const int fb, const int kw)
{
    const int taps = kh * kw;

    for (int ki = 0; ki < kh; ki++) {
        __m512 acc[3][5];
#pragma GCC unroll 3
        for (int r = 0; r < fb; r++)
#pragma GCC unroll 5
            for (int kj = 0; kj < kw; kj++)
                acc[r][kj] = _mm512_loadu_ps(part + ((size_t)r * taps + ki * kw + kj) * 16);
        for (int oy = 0; oy < oh; oy += 2) {
            __m512 d[3][3];
#pragma GCC unroll 3
            for (int r = 0; r < fb; r++)
#pragma GCC unroll 3
                for (int v = 0; v < 3; v++)
                    d[r][v] = _mm512_loadu_ps(dout + (size_t)r * p + (size_t)oy * 24 + 16 * v);
            const float *r0 = img + (size_t)(oy + ki) * w, *r1 = r0 + w;
#pragma GCC unroll 5
            for (int kj = 0; kj < kw; kj++) {
                const __m512 b0 = _mm512_loadu_ps(r0 + kj);
                const __m512d lo =
                    _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(r0 + 16 + kj)));
                const __m512 b1 = _mm512_castpd_ps(
                    _mm512_insertf64x4(lo, _mm256_castps_pd(_mm256_loadu_ps(r1 + kj)), 1));
                const __m512 b2 = _mm512_loadu_ps(r1 + 8 + kj);
#pragma GCC unroll 3
                for (int r = 0; r < fb; r++) {
                    acc[r][kj] = _mm512_fmadd_ps(d[r][0], b0, acc[r][kj]);
                    acc[r][kj] = _mm512_fmadd_ps(d[r][1], b1, acc[r][kj]);
                    acc[r][kj] = _mm512_fmadd_ps(d[r][2], b2, acc[r][kj]);
                }
            }
        }
#pragma GCC unroll 3
        for (int r = 0; r < fb; r++)
#pragma GCC unroll 5
            for (int kj = 0; kj < kw; kj++)
                _mm512_storeu_ps(part + ((size_t)r * taps + ki * kw + kj) * 16, acc[r][kj]);
    }
}

#define DW_KW(FB)                                                                                  \
    switch (kw) {                                                                                  \
    case 1:                                                                                        \
        conv1c_dw_block(pt, dt, img, w, kh, oh, p, FB, 1);                                         \
        break;                                                                                     \
    case 2:                                                                                        \
        conv1c_dw_block(pt, dt, img, w, kh, oh, p, FB, 2);                                         \
        break;                                                                                     \
    case 3:                                                                                        \
        conv1c_dw_block(pt, dt, img, w, kh, oh, p, FB, 3);                                         \
        break;                                                                                     \
    case 4:                                                                                        \
        conv1c_dw_block(pt, dt, img, w, kh, oh, p, FB, 4);                                         \
        break;                                                                                     \
    default:                                                                                       \
        conv1c_dw_block(pt, dt, img, w, kh, oh, p, FB, 5);                                         \
        break;                                                                                     \
    }

AVX512 static void conv1c_dw_avx512(float *part, const float *dout, const float *img, int w, int f,
                                    int kh, int kw, int oh)
{
    const int p = oh * 24;
    const size_t taps = (size_t)kh * kw;

    for (int f0 = 0; f0 < f; f0 += 3) {
        const int fb = f - f0 < 3 ? f - f0 : 3;
        float *pt = part + (size_t)f0 * taps * 16;
        const float *dt = dout + (size_t)f0 * p;
        if (fb == 3) {
            DW_KW(3)
        } else if (fb == 2) {
            DW_KW(2)
        } else {
            DW_KW(1)
        }
    }
}

void nl_conv1c_dweight(float *part, const float *dout, const float *img, int w, int f, int kh,
                       int kw, int oh, int ow)
{
    if (nl_kernels_vector_on() && nl_conv1c_fits(1, kh, kw, 1, 1, 0, 0, oh, ow) &&
        nl_conv1c_dweight_fits(kw))
        conv1c_dw_avx512(part, dout, img, w, f, kh, kw, oh);
    else
        nl_conv1c_dweight_naive(part, dout, img, w, f, kh, kw, oh, ow);
}
