/* The transforms of Winograd's F(m x m, 3 x 3) (nnlab/winograd.h says the layouts): Lavin and
 * Gray's matrices, each transform a two-sided product t x t^T by a small constant matrix, and
 * its adjoint t^T x t.
 *
 * The fast paths put 16 tiles (the filter transforms: 16 input channels) in the lanes of AVX-512
 * vectors: a tile's a*a pixels come in by a*a masked gathers (the mask drops the padding and the
 * plane's edges), the two-sided product runs on whole vectors with the tables' zeros skipped and
 * their ones turned into additions (the tables and sizes are constants where it is inlined, so
 * those tests fold away), and each of the a*a results is one contiguous store into (a*a, C, T).
 * The output transform scatters its m*m pixels; the input transform's adjoint adds into the
 * input gradient by a gather, an add and a scatter per pixel of the tile: within one such
 * operation the 16 tiles touch 16 different pixels, so the overlaps of neighbouring tiles add
 * up as they should. Gathers index with 32-bit offsets from a plane's start, so a shard whose
 * floats do not fit an int runs the naive loops.
 *
 * A scatter stores its 16 floats one by one, and the input transform's adjoint made 36 of them
 * (and 36 gathers) per 16 tiles and channel: on resnet8's first stage (16 channels, 28x28, a
 * chunk of 4 images) it took 67 us against 43 for the forward transform (tests/bench_conv.c's
 * shapes, thread CPU time, fastest of 200, 2026-11-27, load average 4). Where a tile row's a
 * input columns fit two vectors and it has 6 tiles or more (planes about 22 to 30 wide), the
 * adjoint runs instead a tile row at a time, its tiles in the lanes (7 of 16 at 28 wide): each
 * of a tile's a rows is spread over its plane row by permutes, the overlaps of neighbouring tiles
 * added there, and the row added into din by two contiguous loads and stores: 46 us against 67.
 * It adds a pixel's two terms from neighbouring tiles of a row together before adding them to
 * din, where the gathering path adds them one after the other, so the input gradients differ in
 * the last bits. The forward input transform runs on the same planes a tile row at a time as
 * well (contiguous row loads, the column pass over whole rows, a permute per tile column into
 * the lanes, the row pass, 7-lane stores into v): 38 us against 44, the same sums in the same
 * order; and the output transform, its m rows a tile spread by permutes over the plane's rows
 * and stored two vectors a row: 29 us against 36, the same results. (The output transform's
 * adjoint the same way, 16 gathers a group replaced by row loads and permutes but its 36 results
 * stored 7 lanes at a time, took 34 us against 29: it keeps its gathers.) Staging the permuted
 * columns to run the row pass over 16 tiles of several rows was no faster at 28 wide; on planes 14
 * and 7 wide, whose tile rows fill 4 or 2 lanes, these row-wise paths are 2 to 4 times slower than
 * the gathers, hence the bound of 6 tiles a row.
 *
 * Planes whose rows have 4 tiles (13 to 16 wide under F(4x4), resnet8's 14x14 second stage; 7
 * or 8 under F(2x2)) fill a group's 16 lanes with four whole tile rows instead (stack_fit), of one
 * image or of consecutive ones, and a plane row fits one vector: the input transform loads each
 * tile row's a input rows, runs the column pass over them and puts the tiles' columns into the
 * lanes by two two-source permutes and a blend per result; the output transform and the input
 * transform's adjoint spread each tile row's rows back by a permute per tile column, one masked
 * store (or load, add and store) a plane row; the output transform's adjoint loads rows as the
 * input transform does. tests/bench_conv.c's parts on resnet8's stage 2 (32 channels, chunks of 7
 * images, us per image, thread CPU time, fastest of 25, 2026-11-27, load average 2 to 6): input
 * 5.5 -> 3.9 to 4.3, output 5.1 -> 1.8 to 2.0, output adjoint 3.8 -> 2.7 to 3.1, input adjoint
 * 9.9 -> 6.3 to 7.1. All but the input adjoint do input_avx512's (output_avx512's...) sums in
 * the same order, so the same results to the bit; the input adjoint adds a pixel's terms from
 * neighbouring tiles of a row together first, as the row-wise path does. */
#include "nnlab/winograd.h"

#include <immintrin.h>
#include <limits.h>
#include <string.h>

#include "nnlab/kernels.h"
#include "simd.h"

/* F(4x4, 3x3): points 0, 1, -1, 2, -2, infinity. */
static const float bt4[6 * 6] = {
    4, 0,  -5, 0, 1, 0, /**/ 0, -4, -4, 1,  1, 0, /**/ 0, 4, -4, -1, 1, 0, /**/
    0, -2, -1, 2, 1, 0, /**/ 0, 2,  -1, -2, 1, 0, /**/ 0, 4, 0,  -5, 0, 1,
};
static const float g4[6 * 3] = {
    1.0f / 4,  0,          0,         /**/ -1.0f / 6, -1.0f / 6, -1.0f / 6, /**/
    -1.0f / 6, 1.0f / 6,   -1.0f / 6, /**/ 1.0f / 24, 1.0f / 12, 1.0f / 6,  /**/
    1.0f / 24, -1.0f / 12, 1.0f / 6,  /**/ 0,         0,         1,
};
static const float at4[4 * 6] = {
    1, 1, 1, 1, 1, 0, /**/ 0, 1, -1, 2, -2, 0, /**/ 0, 1, 1, 4, 4, 0, /**/ 0, 1, -1, 8, -8, 1,
};
/* F(2x2, 3x3): points 0, 1, -1, infinity. */
static const float bt2[4 * 4] = {
    1, 0, -1, 0, /**/ 0, 1, 1, 0, /**/ 0, -1, 1, 0, /**/ 0, 1, 0, -1,
};
static const float g2[4 * 3] = {
    1, 0, 0, /**/ 0.5f, 0.5f, 0.5f, /**/ 0.5f, -0.5f, 0.5f, /**/ 0, 0, 1,
};
static const float at2[2 * 4] = {
    1, 1, 1, 0, /**/ 0, 1, -1, -1,
};

void nl_wino_plan(struct nl_wino *p, int m, int c, int h, int w, int f, int ph, int pw, int oh,
                  int ow)
{
    *p = (struct nl_wino){
        .m = m, .a = m + 2, .c = c, .h = h, .w = w, .f = f, .ph = ph, .pw = pw, .oh = oh, .ow = ow};
    p->tiles_x = (ow + m - 1) / m;
    p->tiles = p->tiles_x * ((oh + m - 1) / m);
}

static const float *table_b(const struct nl_wino *p)
{
    return p->m == 4 ? bt4 : bt2;
}

static const float *table_g(const struct nl_wino *p)
{
    return p->m == 4 ? g4 : g2;
}

static const float *table_a(const struct nl_wino *p)
{
    return p->m == 4 ? at4 : at2;
}

/* ---- naive twins ---- */

/* y (rp, rp) = t x t^T, t (rp, q), x (q, q). */
static void sandwich(float *y, const float *t, int rp, int q, const float *x)
{
    float tmp[6 * 6];

    for (int i = 0; i < rp; i++)
        for (int l = 0; l < q; l++) {
            float s = 0.0f;
            for (int k = 0; k < q; k++)
                s += t[i * q + k] * x[k * q + l];
            tmp[i * q + l] = s;
        }
    for (int i = 0; i < rp; i++)
        for (int j = 0; j < rp; j++) {
            float s = 0.0f;
            for (int l = 0; l < q; l++)
                s += tmp[i * q + l] * t[j * q + l];
            y[i * rp + j] = s;
        }
}

/* y (q, q) = t^T x t, t (rp, q), x (rp, rp): the adjoint of sandwich. */
static void sandwich_t(float *y, const float *t, int rp, int q, const float *x)
{
    float tmp[6 * 6];

    for (int k = 0; k < q; k++)
        for (int j = 0; j < rp; j++) {
            float s = 0.0f;
            for (int i = 0; i < rp; i++)
                s += t[i * q + k] * x[i * rp + j];
            tmp[k * rp + j] = s;
        }
    for (int k = 0; k < q; k++)
        for (int l = 0; l < q; l++) {
            float s = 0.0f;
            for (int j = 0; j < rp; j++)
                s += tmp[k * rp + j] * t[j * q + l];
            y[k * q + l] = s;
        }
}

static float act_scalar(float v, int act)
{
    if (act == NL_ACT_NONE)
        return v;
    v = v > 0.0f ? v : 0.0f;
    if (act == NL_ACT_RELU6)
        v = v < 6.0f ? v : 6.0f;
    return v;
}

void nl_wino_filter_naive(float *u, const float *weight, const struct nl_wino *p)
{
    const size_t fc = (size_t)p->f * p->c;
    float y[36];

    for (size_t i = 0; i < fc; i++) {
        sandwich(y, table_g(p), p->a, 3, weight + 9 * i);
        for (int xi = 0; xi < p->a * p->a; xi++)
            u[xi * fc + i] = y[xi];
    }
}

void nl_wino_filter_adjoint_naive(float *dweight, const float *du, const struct nl_wino *p)
{
    const size_t fc = (size_t)p->f * p->c;
    float x[36], y[9];

    for (size_t i = 0; i < fc; i++) {
        for (int xi = 0; xi < p->a * p->a; xi++)
            x[xi] = du[xi * fc + i];
        sandwich_t(y, table_g(p), p->a, 3, x);
        for (int k = 0; k < 9; k++)
            dweight[9 * i + k] += y[k];
    }
}

/* The first input row and column of tile r of an image. */
static void tile_origin(const struct nl_wino *p, int r, int *y0, int *x0)
{
    *y0 = r / p->tiles_x * p->m - p->ph;
    *x0 = r % p->tiles_x * p->m - p->pw;
}

void nl_wino_input_naive(float *v, const float *in, int n, const struct nl_wino *p)
{
    const int a = p->a;
    const size_t tt = (size_t)n * p->tiles, plane = (size_t)p->h * p->w;
    float x[36], y[36];

    for (int s = 0; s < n; s++)
        for (int c = 0; c < p->c; c++) {
            const float *img = in + ((size_t)s * p->c + c) * plane;
            for (int r = 0; r < p->tiles; r++) {
                int y0, x0;
                tile_origin(p, r, &y0, &x0);
                for (int i = 0; i < a; i++)
                    for (int j = 0; j < a; j++) {
                        const int iy = y0 + i, ix = x0 + j;
                        x[i * a + j] = iy >= 0 && iy < p->h && ix >= 0 && ix < p->w
                                           ? img[(size_t)iy * p->w + ix]
                                           : 0.0f;
                    }
                sandwich(y, table_b(p), a, a, x);
                const size_t t = (size_t)s * p->tiles + r;
                for (int xi = 0; xi < a * a; xi++)
                    v[((size_t)xi * p->c + c) * tt + t] = y[xi];
            }
        }
}

void nl_wino_input_adjoint_naive(float *din, const float *dv, int n, const struct nl_wino *p)
{
    const int a = p->a;
    const size_t tt = (size_t)n * p->tiles, plane = (size_t)p->h * p->w;
    float x[36], y[36];

    for (int s = 0; s < n; s++)
        for (int c = 0; c < p->c; c++) {
            float *img = din + ((size_t)s * p->c + c) * plane;
            for (int r = 0; r < p->tiles; r++) {
                const size_t t = (size_t)s * p->tiles + r;
                int y0, x0;
                for (int xi = 0; xi < a * a; xi++)
                    x[xi] = dv[((size_t)xi * p->c + c) * tt + t];
                sandwich_t(y, table_b(p), a, a, x);
                tile_origin(p, r, &y0, &x0);
                for (int i = 0; i < a; i++)
                    for (int j = 0; j < a; j++) {
                        const int iy = y0 + i, ix = x0 + j;
                        if (iy >= 0 && iy < p->h && ix >= 0 && ix < p->w)
                            img[(size_t)iy * p->w + ix] += y[i * a + j];
                    }
            }
        }
}

void nl_wino_output_naive(float *out, const float *mm, const float *bias, const float *scale,
                          const float *shift, int act, int n, const struct nl_wino *p)
{
    const int a = p->a, m = p->m;
    const size_t tt = (size_t)n * p->tiles, plane = (size_t)p->oh * p->ow;
    float x[36], y[16];

    for (int s = 0; s < n; s++)
        for (int f = 0; f < p->f; f++) {
            float *img = out + ((size_t)s * p->f + f) * plane;
            for (int r = 0; r < p->tiles; r++) {
                const size_t t = (size_t)s * p->tiles + r;
                const int y0 = r / p->tiles_x * m, x0 = r % p->tiles_x * m;
                for (int xi = 0; xi < a * a; xi++)
                    x[xi] = mm[((size_t)xi * p->f + f) * tt + t];
                sandwich(y, table_a(p), m, a, x);
                for (int i = 0; i < m && y0 + i < p->oh; i++)
                    for (int j = 0; j < m && x0 + j < p->ow; j++) {
                        float o = y[i * m + j];
                        if (scale)
                            o = act_scalar(o * scale[f] + shift[f], act);
                        else if (bias)
                            o += bias[f];
                        img[(size_t)(y0 + i) * p->ow + x0 + j] = o;
                    }
            }
        }
}

void nl_wino_output_adjoint_naive(float *dmm, const float *dout, int n, const struct nl_wino *p)
{
    const int a = p->a, m = p->m;
    const size_t tt = (size_t)n * p->tiles, plane = (size_t)p->oh * p->ow;
    float x[16], y[36];

    for (int s = 0; s < n; s++)
        for (int f = 0; f < p->f; f++) {
            const float *img = dout + ((size_t)s * p->f + f) * plane;
            for (int r = 0; r < p->tiles; r++) {
                const size_t t = (size_t)s * p->tiles + r;
                const int y0 = r / p->tiles_x * m, x0 = r % p->tiles_x * m;
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < m; j++)
                        x[i * m + j] = y0 + i < p->oh && x0 + j < p->ow
                                           ? img[(size_t)(y0 + i) * p->ow + x0 + j]
                                           : 0.0f;
                sandwich_t(y, table_a(p), m, a, x);
                for (int xi = 0; xi < a * a; xi++)
                    dmm[((size_t)xi * p->f + f) * tt + t] = y[xi];
            }
        }
}

/* ---- AVX-512 ---- */

#define INLINE static inline __attribute__((always_inline))

/* The lanes [0, k) of 16. */
static inline __mmask16 first_lanes(int k)
{
    return k >= 16 ? (__mmask16)0xffff : k <= 0 ? 0 : (__mmask16)((1u << k) - 1u);
}

/* sum over k < q of c[k*cs] x[k*xs]; with constant tables the zero coefficients vanish and the
 * ones and minus ones become additions and subtractions. */
AVX512 INLINE __m512 comb(const float *c, int cs, const __m512 *x, int xs, int q)
{
    __m512 acc = _mm512_setzero_ps();
    int first = 1;

#pragma GCC unroll 8
    for (int k = 0; k < q; k++) {
        const float ck = c[k * cs];
        const __m512 xk = x[k * xs];
        if (ck == 0.0f)
            continue;
        if (first && ck == 1.0f)
            acc = xk;
        else if (first)
            acc = _mm512_mul_ps(_mm512_set1_ps(ck), xk);
        else if (ck == 1.0f)
            acc = _mm512_add_ps(acc, xk);
        else if (ck == -1.0f)
            acc = _mm512_sub_ps(acc, xk);
        else
            acc = _mm512_fmadd_ps(_mm512_set1_ps(ck), xk, acc);
        first = 0;
    }
    return acc;
}

/* y (rp, rp) = t x t^T over vectors, t (rp, q) a constant table, x (q, q). */
AVX512 INLINE void sandwich_v(__m512 *y, const float *t, int rp, int q, const __m512 *x)
{
    __m512 tmp[36];

#pragma GCC unroll 8
    for (int i = 0; i < rp; i++)
#pragma GCC unroll 8
        for (int l = 0; l < q; l++)
            tmp[i * q + l] = comb(t + i * q, 1, x + l, q, q);
#pragma GCC unroll 8
    for (int i = 0; i < rp; i++)
#pragma GCC unroll 8
        for (int j = 0; j < rp; j++)
            y[i * rp + j] = comb(t + j * q, 1, tmp + i * q, 1, q);
}

/* y (q, q) = t^T x t over vectors, x (rp, rp). */
AVX512 INLINE void sandwich_tv(__m512 *y, const float *t, int rp, int q, const __m512 *x)
{
    __m512 tmp[36];

#pragma GCC unroll 8
    for (int k = 0; k < q; k++)
#pragma GCC unroll 8
        for (int j = 0; j < rp; j++)
            tmp[k * rp + j] = comb(t + k, q, x + j, rp, rp);
#pragma GCC unroll 8
    for (int k = 0; k < q; k++)
#pragma GCC unroll 8
        for (int l = 0; l < q; l++)
            y[k * q + l] = comb(t + l, q, tmp + k * rp, 1, rp);
}

/* Where the 16 tiles t0.. of a group start: the offset of each one's first pixel from its
 * image's start in a plane of width w (input when in, else output), and the masks of the rows
 * and columns of the tile (a of them, or m for the output) that lie inside the plane. */
struct group {
    __m512i base;
    __mmask16 live, row[6], col[6];
};

AVX512 INLINE void group_at(struct group *g, const struct nl_wino *p, int t0, int count,
                            size_t image, int in)
{
    const int side = in ? p->a : p->m, h = in ? p->h : p->oh, w = in ? p->w : p->ow;
    int base[16];

    g->live = first_lanes(count - t0);
    for (int i = 0; i < side; i++)
        g->row[i] = g->col[i] = 0;
    for (int l = 0; l < 16; l++) {
        const int t = t0 + l < count ? t0 + l : t0, s = t / p->tiles, r = t % p->tiles;
        int y0 = r / p->tiles_x * p->m, x0 = r % p->tiles_x * p->m;
        if (in) {
            y0 -= p->ph;
            x0 -= p->pw;
        }
        base[l] = (int)((size_t)s * image) + y0 * w + x0;
        if (!(g->live >> l & 1))
            continue;
        for (int i = 0; i < side; i++) {
            g->row[i] |= (__mmask16)((y0 + i >= 0 && y0 + i < h) << l);
            g->col[i] |= (__mmask16)((x0 + i >= 0 && x0 + i < w) << l);
        }
    }
    g->base = _mm512_loadu_si512(base);
}

AVX512 INLINE void input_avx512(float *v, const float *in, int n, const struct nl_wino *p,
                                const int a, const float *bt)
{
    const int tt = n * p->tiles;
    const size_t plane = (size_t)p->h * p->w;
    struct group g;
    __m512 x[36], y[36];

    for (int t0 = 0; t0 < tt; t0 += 16) {
        group_at(&g, p, t0, tt, p->c * plane, 1);
        for (int c = 0; c < p->c; c++) {
            const float *img = in + c * plane;
            for (int i = 0; i < a; i++)
                for (int j = 0; j < a; j++) {
                    const __m512i idx = _mm512_add_epi32(g.base, _mm512_set1_epi32(i * p->w + j));
                    x[i * a + j] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(),
                                                            g.row[i] & g.col[j], idx, img, 4);
                }
            sandwich_v(y, bt, a, a, x);
            for (int xi = 0; xi < a * a; xi++)
                _mm512_mask_storeu_ps(v + ((size_t)xi * p->c + c) * tt + t0, g.live, y[xi]);
        }
    }
}

AVX512 INLINE void input_adjoint_avx512(float *din, const float *dv, int n, const struct nl_wino *p,
                                        const int a, const float *bt)
{
    const int tt = n * p->tiles;
    const size_t plane = (size_t)p->h * p->w;
    struct group g;
    __m512 x[36], y[36];

    for (int t0 = 0; t0 < tt; t0 += 16) {
        group_at(&g, p, t0, tt, p->c * plane, 1);
        for (int c = 0; c < p->c; c++) {
            float *img = din + c * plane;
            for (int xi = 0; xi < a * a; xi++)
                x[xi] = _mm512_maskz_loadu_ps(g.live, dv + ((size_t)xi * p->c + c) * tt + t0);
            sandwich_tv(y, bt, a, a, x);
            for (int i = 0; i < a; i++)
                for (int j = 0; j < a; j++) {
                    const __mmask16 k = g.row[i] & g.col[j];
                    const __m512i idx = _mm512_add_epi32(g.base, _mm512_set1_epi32(i * p->w + j));
                    const __m512 old =
                        _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, idx, img, 4);
                    _mm512_mask_i32scatter_ps(img, k, idx, _mm512_add_ps(old, y[i * a + j]), 4);
                }
        }
    }
}

/* The permutes that lay a row of tiles' results along a row of the plane (at most 32 pixels, two
 * vectors): lane q of half h, pixel q + 16h, takes lane tx (tile tx of the row) of the result in
 * column j of the tiles, where q + 16h = tx*m + j; takes[h][j] keeps the lanes that have such a
 * tile. For j < cols. */
AVX512 INLINE void spread_tables(__m512i spread[2][6], __mmask16 takes[2][6], int m, int cols,
                                 int tiles_x)
{
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < cols; j++) {
            int idx[16];
            takes[h][j] = 0;
            for (int q = 0; q < 16; q++) {
                const int at = q + 16 * h - j;
                idx[q] = 0;
                if (at >= 0 && at % m == 0 && at / m < tiles_x) {
                    idx[q] = at / m;
                    takes[h][j] |= (__mmask16)(1u << q);
                }
            }
            spread[h][j] = _mm512_loadu_si512(idx);
        }
}

/* Whether the row-wise paths take the plane (see the top of the file): a tile row's a input
 * columns lie within 32 floats (two vectors), and it has at least 6 tiles to fill the lanes. */
static int rows_fit(const struct nl_wino *p)
{
    return (p->tiles_x - 1) * p->m + p->a <= 32 && p->tiles_x >= 6;
}

/* The input transform a tile row at a time where rows_fit: the tile row's a input rows by
 * contiguous loads (two vectors each, masked at the plane's edges), the column pass of
 * B^T x B over whole rows, a permute per tile column into the lanes, the row pass, and each of
 * the a*a results stored as the row's tiles_x contiguous floats of v. The sums are
 * input_avx512's, in its order: the results are the same to the bit. */
AVX512 INLINE void input_rows_avx512(float *v, const float *in, int n, const struct nl_wino *p,
                                     const int a, const float *bt)
{
    const int tt = n * p->tiles, m = p->m, tiles_y = p->tiles / p->tiles_x;
    const size_t plane = (size_t)p->h * p->w;
    const __mmask16 tx_live = first_lanes(p->tiles_x);
    const int left = -p->pw;
    const __mmask16 lo = first_lanes(p->w - left) & (__mmask16)(0xffffu << (left < 0 ? -left : 0)),
                    hi = first_lanes(p->w - left - 16);
    __m512i pick[6];

    for (int k = 0; k < a; k++) {
        int idx[16];
        for (int l = 0; l < 16; l++)
            idx[l] = l < p->tiles_x ? l * m + k : 0;
        pick[k] = _mm512_loadu_si512(idx);
    }
    for (int s = 0; s < n; s++)
        for (int c = 0; c < p->c; c++) {
            const float *img = in + ((size_t)s * p->c + c) * plane;
            for (int ty = 0; ty < tiles_y; ty++) {
                const size_t t0 = (size_t)s * p->tiles + (size_t)ty * p->tiles_x;
                const int y0 = ty * m - p->ph;
                __m512 rl[6], rh[6], x[36];
#pragma GCC unroll 6
                for (int i = 0; i < a; i++) {
                    const int iy = y0 + i;
                    if (iy < 0 || iy >= p->h) {
                        rl[i] = rh[i] = _mm512_setzero_ps();
                        continue;
                    }
                    const float *row = img + (size_t)iy * p->w + left;
                    rl[i] = _mm512_maskz_loadu_ps(lo, row);
                    rh[i] = _mm512_maskz_loadu_ps(hi, row + 16);
                }
#pragma GCC unroll 6
                for (int i = 0; i < a; i++) {
                    const __m512 zl = comb(bt + i * a, 1, rl, 1, a),
                                 zh = comb(bt + i * a, 1, rh, 1, a);
#pragma GCC unroll 6
                    for (int k = 0; k < a; k++)
                        x[i * a + k] = _mm512_permutex2var_ps(zl, pick[k], zh);
                }
#pragma GCC unroll 6
                for (int i = 0; i < a; i++)
#pragma GCC unroll 6
                    for (int j = 0; j < a; j++)
                        _mm512_mask_storeu_ps(v + ((size_t)(i * a + j) * p->c + c) * tt + t0,
                                              tx_live, comb(bt + j * a, 1, x + i * a, 1, a));
            }
        }
}

/* The input transform's adjoint without gathers or scatters, for planes 24 to 30 wide: per
 * channel and tile row, the row's tiles in the lanes (contiguous loads from dv), the two-sided
 * product t^T x t as input_adjoint_avx512's, then each of the tile's a rows spread by permutes
 * over the pixels of its plane row, the neighbouring tiles' shared columns added there, and
 * added to din by contiguous loads and stores of two vectors. */
AVX512 INLINE void input_adjoint_rows_avx512(float *din, const float *dv, int n,
                                             const struct nl_wino *p, const int a, const float *bt)
{
    const int tt = n * p->tiles, m = p->m, tiles_y = p->tiles / p->tiles_x;
    const size_t plane = (size_t)p->h * p->w;
    const __mmask16 tx_live = first_lanes(p->tiles_x);
    const int left = -p->pw;
    const __mmask16 lo = first_lanes(p->w - left) & (__mmask16)(0xffffu << (left < 0 ? -left : 0)),
                    hi = first_lanes(p->w - left - 16);
    __m512i spread[2][6];
    __mmask16 takes[2][6];
    __m512 x[36], y[36];

    spread_tables(spread, takes, m, a, p->tiles_x);
    for (int s = 0; s < n; s++)
        for (int c = 0; c < p->c; c++) {
            float *img = din + ((size_t)s * p->c + c) * plane;
            for (int ty = 0; ty < tiles_y; ty++) {
                const size_t t0 = (size_t)s * p->tiles + (size_t)ty * p->tiles_x;
                const int y0 = ty * m - p->ph;
#pragma GCC unroll 36
                for (int xi = 0; xi < a * a; xi++)
                    x[xi] = _mm512_maskz_loadu_ps(tx_live, dv + ((size_t)xi * p->c + c) * tt + t0);
                sandwich_tv(y, bt, a, a, x);
#pragma GCC unroll 6
                for (int i = 0; i < a; i++) {
                    const int iy = y0 + i;
                    if (iy < 0 || iy >= p->h)
                        continue;
                    __m512 rl = _mm512_maskz_permutexvar_ps(takes[0][0], spread[0][0], y[i * a]);
                    __m512 rh = _mm512_maskz_permutexvar_ps(takes[1][0], spread[1][0], y[i * a]);
#pragma GCC unroll 6
                    for (int j = 1; j < a; j++) {
                        rl = _mm512_add_ps(rl, _mm512_maskz_permutexvar_ps(
                                                   takes[0][j], spread[0][j], y[i * a + j]));
                        rh = _mm512_add_ps(rh, _mm512_maskz_permutexvar_ps(
                                                   takes[1][j], spread[1][j], y[i * a + j]));
                    }
                    float *row = img + (size_t)iy * p->w + left;
                    _mm512_mask_storeu_ps(row, lo,
                                          _mm512_add_ps(_mm512_maskz_loadu_ps(lo, row), rl));
                    _mm512_mask_storeu_ps(row + 16, hi,
                                          _mm512_add_ps(_mm512_maskz_loadu_ps(hi, row + 16), rh));
                }
            }
        }
}

AVX512 INLINE void output_avx512(float *out, const float *mm, const float *bias, const float *scale,
                                 const float *shift, int act, int n, const struct nl_wino *p,
                                 const int m, const float *at)
{
    const int a = m + 2, tt = n * p->tiles;
    const size_t plane = (size_t)p->oh * p->ow;
    struct group g;
    __m512 x[36], y[16];

    for (int t0 = 0; t0 < tt; t0 += 16) {
        group_at(&g, p, t0, tt, p->f * plane, 0);
        for (int f = 0; f < p->f; f++) {
            float *img = out + f * plane;
            for (int xi = 0; xi < a * a; xi++)
                x[xi] = _mm512_maskz_loadu_ps(g.live, mm + ((size_t)xi * p->f + f) * tt + t0);
            sandwich_v(y, at, m, a, x);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < m; j++) {
                    __m512 o = y[i * m + j];
                    if (scale)
                        o = act_avx512(_mm512_add_ps(_mm512_mul_ps(o, _mm512_set1_ps(scale[f])),
                                                     _mm512_set1_ps(shift[f])),
                                       act);
                    else if (bias)
                        o = _mm512_add_ps(o, _mm512_set1_ps(bias[f]));
                    const __m512i idx = _mm512_add_epi32(g.base, _mm512_set1_epi32(i * p->ow + j));
                    _mm512_mask_i32scatter_ps(img, g.row[i] & g.col[j], idx, o, 4);
                }
        }
    }
}

/* The output transform a tile row at a time where rows_fit: the row's tiles in the lanes
 * (contiguous loads from mm), the product A^T x A as output_avx512's, and each of the tile's m
 * rows spread by permutes over its plane row, then the bias or the folded output pass over whole
 * vectors and two contiguous stores a row instead of a scatter per pixel. The same arithmetic in
 * the same order: the results are output_avx512's to the bit. */
AVX512 INLINE void output_rows_avx512(float *out, const float *mm, const float *bias,
                                      const float *scale, const float *shift, int act, int n,
                                      const struct nl_wino *p, const int m, const float *at)
{
    const int a = m + 2, tt = n * p->tiles, tiles_y = p->tiles / p->tiles_x;
    const size_t plane = (size_t)p->oh * p->ow;
    const __mmask16 tx_live = first_lanes(p->tiles_x), lo = first_lanes(p->ow),
                    hi = first_lanes(p->ow - 16);
    __m512i spread[2][6];
    __mmask16 takes[2][6];
    __m512 x[36], y[16];

    spread_tables(spread, takes, m, m, p->tiles_x);
    for (int s = 0; s < n; s++)
        for (int f = 0; f < p->f; f++) {
            float *img = out + ((size_t)s * p->f + f) * plane;
            for (int ty = 0; ty < tiles_y; ty++) {
                const size_t t0 = (size_t)s * p->tiles + (size_t)ty * p->tiles_x;
#pragma GCC unroll 36
                for (int xi = 0; xi < a * a; xi++)
                    x[xi] = _mm512_maskz_loadu_ps(tx_live, mm + ((size_t)xi * p->f + f) * tt + t0);
                sandwich_v(y, at, m, a, x);
#pragma GCC unroll 4
                for (int i = 0; i < m; i++) {
                    const int oy = ty * m + i;
                    if (oy >= p->oh)
                        break;
                    __m512 r[2];
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++) {
                        r[h] = _mm512_setzero_ps();
#pragma GCC unroll 4
                        for (int j = 0; j < m; j++)
                            r[h] = _mm512_mask_permutexvar_ps(r[h], takes[h][j], spread[h][j],
                                                              y[i * m + j]);
                        if (scale)
                            r[h] = act_avx512(
                                _mm512_add_ps(_mm512_mul_ps(r[h], _mm512_set1_ps(scale[f])),
                                              _mm512_set1_ps(shift[f])),
                                act);
                        else if (bias)
                            r[h] = _mm512_add_ps(r[h], _mm512_set1_ps(bias[f]));
                    }
                    float *row = img + (size_t)oy * p->ow;
                    _mm512_mask_storeu_ps(row, lo, r[0]);
                    _mm512_mask_storeu_ps(row + 16, hi, r[1]);
                }
            }
        }
}

AVX512 INLINE void output_adjoint_avx512(float *dmm, const float *dout, int n,
                                         const struct nl_wino *p, const int m, const float *at)
{
    const int a = m + 2, tt = n * p->tiles;
    const size_t plane = (size_t)p->oh * p->ow;
    struct group g;
    __m512 x[16], y[36];

    for (int t0 = 0; t0 < tt; t0 += 16) {
        group_at(&g, p, t0, tt, p->f * plane, 0);
        for (int f = 0; f < p->f; f++) {
            const float *img = dout + f * plane;
            for (int i = 0; i < m; i++)
                for (int j = 0; j < m; j++) {
                    const __m512i idx = _mm512_add_epi32(g.base, _mm512_set1_epi32(i * p->ow + j));
                    x[i * m + j] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(),
                                                            g.row[i] & g.col[j], idx, img, 4);
                }
            sandwich_tv(y, at, m, a, x);
            for (int xi = 0; xi < a * a; xi++)
                _mm512_mask_storeu_ps(dmm + ((size_t)xi * p->f + f) * tt + t0, g.live, y[xi]);
        }
    }
}

/* 16 input channels in the lanes: a weight's 9 taps come in by 9 gathers of stride 9. */
AVX512 INLINE void filter_avx512(float *u, const float *weight, const struct nl_wino *p,
                                 const int a, const float *gt)
{
    const size_t fc = (size_t)p->f * p->c;
    const __m512i nine =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(9));
    __m512 x[9], y[36];

    for (int f = 0; f < p->f; f++)
        for (int c0 = 0; c0 < p->c; c0 += 16) {
            const __mmask16 live = first_lanes(p->c - c0);
            const float *wf = weight + ((size_t)f * p->c + c0) * 9;
            for (int k = 0; k < 9; k++)
                x[k] = _mm512_mask_i32gather_ps(
                    _mm512_setzero_ps(), live, _mm512_add_epi32(nine, _mm512_set1_epi32(k)), wf, 4);
            sandwich_v(y, gt, a, 3, x);
            for (int xi = 0; xi < a * a; xi++)
                _mm512_mask_storeu_ps(u + xi * fc + (size_t)f * p->c + c0, live, y[xi]);
        }
}

AVX512 INLINE void filter_adjoint_avx512(float *dweight, const float *du, const struct nl_wino *p,
                                         const int a, const float *gt)
{
    const size_t fc = (size_t)p->f * p->c;
    const __m512i nine =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(9));
    __m512 x[36], y[9];

    for (int f = 0; f < p->f; f++)
        for (int c0 = 0; c0 < p->c; c0 += 16) {
            const __mmask16 live = first_lanes(p->c - c0);
            float *wf = dweight + ((size_t)f * p->c + c0) * 9;
            for (int xi = 0; xi < a * a; xi++)
                x[xi] = _mm512_maskz_loadu_ps(live, du + xi * fc + (size_t)f * p->c + c0);
            sandwich_tv(y, gt, a, 3, x);
            for (int k = 0; k < 9; k++) {
                const __m512i idx = _mm512_add_epi32(nine, _mm512_set1_epi32(k));
                const __m512 old = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, idx, wf, 4);
                _mm512_mask_i32scatter_ps(wf, live, idx, _mm512_add_ps(old, y[k]), 4);
            }
        }
}

/* Planes 13 to 16 wide under F(4x4) and 7 or 8 wide under F(2x2) (resnet8's second stage: 4
 * tiles a row): a group's 16 tiles are four whole tile rows, of one image or of several, and a
 * plane row (input columns -pw .. 15 - pw, the output's 0 .. 15) fits one vector. stack_fit says
 * where; lane q of a group holds tile q % 4 of the group's tile row g = q / 4. */
static int stack_fit(const struct nl_wino *p)
{
    return p->tiles_x == 4 && p->w + p->pw <= 16 && p->ow <= 16;
}

/* Tile row g of the group at t0: where its image's first channel starts, its first input (in) or
 * output row, and whether it exists; image is the floats of one image (C or F planes). */
static int stack_row(const struct nl_wino *p, int t0, int g, int tt, size_t image, int in,
                     size_t *at, int *y0)
{
    const int t = t0 + 4 * g;

    *at = 0;
    *y0 = 0;
    if (t >= tt)
        return 0;
    *at = (size_t)(t / p->tiles) * image;
    *y0 = (t % p->tiles) / 4 * p->m - (in ? p->ph : 0);
    return 1;
}

/* The permute that gathers column k of four tile rows' tiles into the lanes: lane q = 4g + tx
 * takes lane tx*m + k of row vector g, from the pair (rows 0 and 1, or 2 and 3) it lies in;
 * *valid drops the lanes whose column lies past the vector (zeros of the plane's right edge). */
AVX512 INLINE __m512i stack_pick(int m, int k, __mmask16 *valid)
{
    int idx[16];

    *valid = 0;
    for (int q = 0; q < 16; q++) {
        const int col = q % 4 * m + k;
        idx[q] = (q / 4 % 2) * 16 + (col < 16 ? col : 0);
        if (col < 16)
            *valid |= (__mmask16)(1u << q);
    }
    return _mm512_loadu_si512(idx);
}

/* Lanes q = 4g + tx of the result from lane tx*m + k of r[g] (stack_pick's permute). */
AVX512 INLINE __m512 stack_gather(const __m512 r[4], __m512i pick, __mmask16 valid)
{
    const __m512 lo = _mm512_maskz_permutex2var_ps(valid & 0x00ff, r[0], pick, r[1]);
    return _mm512_mask_mov_ps(lo, valid & 0xff00, _mm512_permutex2var_ps(r[2], pick, r[3]));
}

/* The spread back: lane p of tile row g's plane row takes lane 4g + p / m (tile p / m of the
 * row), in the lanes where p % m == j (takes[j]). */
AVX512 INLINE void stack_spread(__m512i spread[4], __mmask16 takes[6], int m, int cols)
{
    for (int g = 0; g < 4; g++) {
        int idx[16];
        for (int q = 0; q < 16; q++)
            idx[q] = 4 * g + (q / m < 4 ? q / m : 0);
        spread[g] = _mm512_loadu_si512(idx);
    }
    for (int j = 0; j < cols; j++) {
        takes[j] = 0;
        for (int q = 0; q < 16; q++)
            if (q % m == j && q / m < 4)
                takes[j] |= (__mmask16)(1u << q);
    }
}

/* The input transform where stack_fit: per group and channel, the a input rows of each of the
 * four tile rows by a masked load each, the column pass of B^T x B over those whole rows, the
 * columns of the tiles permuted into the lanes (stack_gather), the row pass, 16-lane stores into
 * v. input_avx512's sums in its order: the same results to the bit, without its 36 gathers. */
AVX512 INLINE void input_stack_avx512(float *v, const float *in, int n, const struct nl_wino *p,
                                      const int a, const float *bt)
{
    const int tt = n * p->tiles, m = p->m;
    const size_t plane = (size_t)p->h * p->w;
    const __mmask16 cols = (__mmask16)(first_lanes(p->w) << p->pw);
    __m512i pick[6];
    __mmask16 valid[6];

    for (int k = 0; k < a; k++)
        pick[k] = stack_pick(m, k, &valid[k]);
    for (int t0 = 0; t0 < tt; t0 += 16) {
        const __mmask16 live = first_lanes(tt - t0);
        size_t at[4];
        int y0[4], has[4];
        for (int g = 0; g < 4; g++)
            has[g] = stack_row(p, t0, g, tt, p->c * plane, 1, &at[g], &y0[g]);
        for (int c = 0; c < p->c; c++) {
            __m512 rows[4][6];
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++)
#pragma GCC unroll 6
                for (int i = 0; i < a; i++) {
                    const int iy = y0[g] + i;
                    rows[g][i] = has[g] && iy >= 0 && iy < p->h
                                     ? _mm512_maskz_loadu_ps(cols, in + at[g] + c * plane +
                                                                       (size_t)iy * p->w - p->pw)
                                     : _mm512_setzero_ps();
                }
#pragma GCC unroll 6
            for (int i = 0; i < a; i++) {
                __m512 z[4], x[6];
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++)
                    z[g] = comb(bt + i * a, 1, rows[g], 1, a);
#pragma GCC unroll 6
                for (int k = 0; k < a; k++)
                    x[k] = stack_gather(z, pick[k], valid[k]);
#pragma GCC unroll 6
                for (int j = 0; j < a; j++)
                    _mm512_mask_storeu_ps(v + ((size_t)(i * a + j) * p->c + c) * tt + t0, live,
                                          comb(bt + j * a, 1, x, 1, a));
            }
        }
    }
}

/* The output transform where stack_fit: output_avx512's products, then each of a tile row's m
 * output rows laid along a vector by m permutes and stored by one masked store, instead of a
 * scatter per pixel. The same results to the bit. */
AVX512 INLINE void output_stack_avx512(float *out, const float *mm, const float *bias,
                                       const float *scale, const float *shift, int act, int n,
                                       const struct nl_wino *p, const int m, const float *at)
{
    const int a = m + 2, tt = n * p->tiles;
    const size_t plane = (size_t)p->oh * p->ow;
    const __mmask16 cols = first_lanes(p->ow);
    __m512i spread[4];
    __mmask16 takes[6];
    __m512 x[36], y[16];

    stack_spread(spread, takes, m, m);
    for (int t0 = 0; t0 < tt; t0 += 16) {
        const __mmask16 live = first_lanes(tt - t0);
        size_t base[4];
        int y0[4], has[4];
        for (int g = 0; g < 4; g++)
            has[g] = stack_row(p, t0, g, tt, p->f * plane, 0, &base[g], &y0[g]);
        for (int f = 0; f < p->f; f++) {
#pragma GCC unroll 36
            for (int xi = 0; xi < a * a; xi++)
                x[xi] = _mm512_maskz_loadu_ps(live, mm + ((size_t)xi * p->f + f) * tt + t0);
            sandwich_v(y, at, m, a, x);
            for (int g = 0; g < 4 && has[g]; g++)
                for (int i = 0; i < m && y0[g] + i < p->oh; i++) {
                    __m512 r = _mm512_setzero_ps();
#pragma GCC unroll 4
                    for (int j = 0; j < m; j++)
                        r = _mm512_mask_permutexvar_ps(r, takes[j], spread[g], y[i * m + j]);
                    if (scale)
                        r = act_avx512(_mm512_add_ps(_mm512_mul_ps(r, _mm512_set1_ps(scale[f])),
                                                     _mm512_set1_ps(shift[f])),
                                       act);
                    else if (bias)
                        r = _mm512_add_ps(r, _mm512_set1_ps(bias[f]));
                    _mm512_mask_storeu_ps(out + base[g] + f * plane + (size_t)(y0[g] + i) * p->ow,
                                          cols, r);
                }
        }
    }
}

/* The output transform's adjoint where stack_fit: each tile row's m rows of dout by a masked load
 * each, the tiles' columns permuted into the lanes (stack_gather), output_adjoint_avx512's product.
 * The same results to the bit, without its gathers. */
AVX512 INLINE void output_adjoint_stack_avx512(float *dmm, const float *dout, int n,
                                               const struct nl_wino *p, const int m,
                                               const float *at)
{
    const int a = m + 2, tt = n * p->tiles;
    const size_t plane = (size_t)p->oh * p->ow;
    const __mmask16 cols = first_lanes(p->ow);
    __m512i pick[4];
    __mmask16 valid[4];
    __m512 x[16], y[36];

    for (int j = 0; j < m; j++)
        pick[j] = stack_pick(m, j, &valid[j]);
    for (int t0 = 0; t0 < tt; t0 += 16) {
        const __mmask16 live = first_lanes(tt - t0);
        size_t base[4];
        int y0[4], has[4];
        for (int g = 0; g < 4; g++)
            has[g] = stack_row(p, t0, g, tt, p->f * plane, 0, &base[g], &y0[g]);
        for (int f = 0; f < p->f; f++) {
#pragma GCC unroll 4
            for (int i = 0; i < m; i++) {
                __m512 r[4];
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++)
                    r[g] = has[g] && y0[g] + i < p->oh
                               ? _mm512_maskz_loadu_ps(cols, dout + base[g] + f * plane +
                                                                 (size_t)(y0[g] + i) * p->ow)
                               : _mm512_setzero_ps();
#pragma GCC unroll 4
                for (int j = 0; j < m; j++)
                    x[i * m + j] = stack_gather(r, pick[j], valid[j]);
            }
            sandwich_tv(y, at, m, a, x);
#pragma GCC unroll 36
            for (int xi = 0; xi < a * a; xi++)
                _mm512_mask_storeu_ps(dmm + ((size_t)xi * p->f + f) * tt + t0, live, y[xi]);
        }
    }
}

/* The input transform's adjoint where stack_fit: input_adjoint_avx512's product, then each of a
 * tile row's a rows spread along a vector by a permutes, the neighbouring tiles' shared columns
 * added there (as input_adjoint_rows_avx512 does), and added to din by one masked load and store,
 * instead of a gather and a scatter per pixel. It adds a pixel's terms from neighbouring tiles of
 * a row together first, so the input gradient differs from the gathering path's in the last bits
 * (and is input_adjoint_rows_avx512's). */
AVX512 INLINE void input_adjoint_stack_avx512(float *din, const float *dv, int n,
                                              const struct nl_wino *p, const int a, const float *bt)
{
    const int tt = n * p->tiles, m = p->m;
    const size_t plane = (size_t)p->h * p->w;
    const __mmask16 cols = (__mmask16)(first_lanes(p->w) << p->pw);
    __m512i spread_j[4][6];
    __mmask16 takes[6];
    __m512 x[36], y[36];

    /* Lane p of tile row g's plane row takes column j of tile (p - j) / m, lane 4g + (p - j) / m,
     * where p - j is a tile's first column. */
    for (int j = 0; j < a; j++) {
        takes[j] = 0;
        for (int g = 0; g < 4; g++) {
            int idx[16];
            for (int q = 0; q < 16; q++) {
                const int d = q - j, has = d >= 0 && d % m == 0 && d / m < 4;
                idx[q] = 4 * g + (has ? d / m : 0);
                if (has)
                    takes[j] |= (__mmask16)(1u << q);
            }
            spread_j[g][j] = _mm512_loadu_si512(idx);
        }
    }
    for (int t0 = 0; t0 < tt; t0 += 16) {
        const __mmask16 live = first_lanes(tt - t0);
        size_t base[4];
        int y0[4], has[4];
        for (int g = 0; g < 4; g++)
            has[g] = stack_row(p, t0, g, tt, p->c * plane, 1, &base[g], &y0[g]);
        for (int c = 0; c < p->c; c++) {
#pragma GCC unroll 36
            for (int xi = 0; xi < a * a; xi++)
                x[xi] = _mm512_maskz_loadu_ps(live, dv + ((size_t)xi * p->c + c) * tt + t0);
            sandwich_tv(y, bt, a, a, x);
            for (int g = 0; g < 4 && has[g]; g++)
#pragma GCC unroll 6
                for (int i = 0; i < a; i++) {
                    const int iy = y0[g] + i;
                    if (iy < 0 || iy >= p->h)
                        continue;
                    __m512 r = _mm512_maskz_permutexvar_ps(takes[0], spread_j[g][0], y[i * a]);
#pragma GCC unroll 6
                    for (int j = 1; j < a; j++)
                        r = _mm512_add_ps(
                            r, _mm512_maskz_permutexvar_ps(takes[j], spread_j[g][j], y[i * a + j]));
                    float *row = din + base[g] + c * plane + (size_t)iy * p->w - p->pw;
                    _mm512_mask_storeu_ps(row, cols,
                                          _mm512_add_ps(_mm512_maskz_loadu_ps(cols, row), r));
                }
        }
    }
}

/* The tile-sized instances, each with its constant table. */
AVX512 static void input4(float *v, const float *in, int n, const struct nl_wino *p)
{
    if (rows_fit(p))
        input_rows_avx512(v, in, n, p, 6, bt4);
    else if (stack_fit(p))
        input_stack_avx512(v, in, n, p, 6, bt4);
    else
        input_avx512(v, in, n, p, 6, bt4);
}

AVX512 static void input2(float *v, const float *in, int n, const struct nl_wino *p)
{
    if (rows_fit(p))
        input_rows_avx512(v, in, n, p, 4, bt2);
    else if (stack_fit(p))
        input_stack_avx512(v, in, n, p, 4, bt2);
    else
        input_avx512(v, in, n, p, 4, bt2);
}

AVX512 static void input_adjoint4(float *din, const float *dv, int n, const struct nl_wino *p)
{
    if (rows_fit(p))
        input_adjoint_rows_avx512(din, dv, n, p, 6, bt4);
    else if (stack_fit(p))
        input_adjoint_stack_avx512(din, dv, n, p, 6, bt4);
    else
        input_adjoint_avx512(din, dv, n, p, 6, bt4);
}

AVX512 static void input_adjoint2(float *din, const float *dv, int n, const struct nl_wino *p)
{
    if (rows_fit(p))
        input_adjoint_rows_avx512(din, dv, n, p, 4, bt2);
    else if (stack_fit(p))
        input_adjoint_stack_avx512(din, dv, n, p, 4, bt2);
    else
        input_adjoint_avx512(din, dv, n, p, 4, bt2);
}

AVX512 static void output4(float *out, const float *mm, const float *bias, const float *scale,
                           const float *shift, int act, int n, const struct nl_wino *p)
{
    if (rows_fit(p))
        output_rows_avx512(out, mm, bias, scale, shift, act, n, p, 4, at4);
    else if (stack_fit(p))
        output_stack_avx512(out, mm, bias, scale, shift, act, n, p, 4, at4);
    else
        output_avx512(out, mm, bias, scale, shift, act, n, p, 4, at4);
}

AVX512 static void output2(float *out, const float *mm, const float *bias, const float *scale,
                           const float *shift, int act, int n, const struct nl_wino *p)
{
    if (rows_fit(p))
        output_rows_avx512(out, mm, bias, scale, shift, act, n, p, 2, at2);
    else if (stack_fit(p))
        output_stack_avx512(out, mm, bias, scale, shift, act, n, p, 2, at2);
    else
        output_avx512(out, mm, bias, scale, shift, act, n, p, 2, at2);
}

AVX512 static void output_adjoint4(float *dmm, const float *dout, int n, const struct nl_wino *p)
{
    if (stack_fit(p))
        output_adjoint_stack_avx512(dmm, dout, n, p, 4, at4);
    else
        output_adjoint_avx512(dmm, dout, n, p, 4, at4);
}

AVX512 static void output_adjoint2(float *dmm, const float *dout, int n, const struct nl_wino *p)
{
    if (stack_fit(p))
        output_adjoint_stack_avx512(dmm, dout, n, p, 2, at2);
    else
        output_adjoint_avx512(dmm, dout, n, p, 2, at2);
}

AVX512 static void filter4(float *u, const float *weight, const struct nl_wino *p)
{
    filter_avx512(u, weight, p, 6, g4);
}

AVX512 static void filter2(float *u, const float *weight, const struct nl_wino *p)
{
    filter_avx512(u, weight, p, 4, g2);
}

AVX512 static void filter_adjoint4(float *dweight, const float *du, const struct nl_wino *p)
{
    filter_adjoint_avx512(dweight, du, p, 6, g4);
}

AVX512 static void filter_adjoint2(float *dweight, const float *du, const struct nl_wino *p)
{
    filter_adjoint_avx512(dweight, du, p, 4, g2);
}

/* Whether the vector paths may run: on, and every offset a gather takes fits an int. */
static int vector_fits(size_t floats)
{
    return nl_kernels_vector_on() && floats < (size_t)INT_MAX;
}

void nl_wino_filter(float *u, const float *weight, const struct nl_wino *p)
{
    if (!vector_fits((size_t)p->f * p->c * 9))
        nl_wino_filter_naive(u, weight, p);
    else if (p->m == 4)
        filter4(u, weight, p);
    else
        filter2(u, weight, p);
}

void nl_wino_filter_adjoint(float *dweight, const float *du, const struct nl_wino *p)
{
    if (!vector_fits((size_t)p->f * p->c * 9))
        nl_wino_filter_adjoint_naive(dweight, du, p);
    else if (p->m == 4)
        filter_adjoint4(dweight, du, p);
    else
        filter_adjoint2(dweight, du, p);
}

void nl_wino_input(float *v, const float *in, int n, const struct nl_wino *p)
{
    if (!vector_fits((size_t)n * p->c * p->h * p->w))
        nl_wino_input_naive(v, in, n, p);
    else if (p->m == 4)
        input4(v, in, n, p);
    else
        input2(v, in, n, p);
}

void nl_wino_input_adjoint(float *din, const float *dv, int n, const struct nl_wino *p)
{
    if (!vector_fits((size_t)n * p->c * p->h * p->w))
        nl_wino_input_adjoint_naive(din, dv, n, p);
    else if (p->m == 4)
        input_adjoint4(din, dv, n, p);
    else
        input_adjoint2(din, dv, n, p);
}

void nl_wino_output(float *out, const float *mm, const float *bias, const float *scale,
                    const float *shift, int act, int n, const struct nl_wino *p)
{
    if (!vector_fits((size_t)n * p->f * p->oh * p->ow))
        nl_wino_output_naive(out, mm, bias, scale, shift, act, n, p);
    else if (p->m == 4)
        output4(out, mm, bias, scale, shift, act, n, p);
    else
        output2(out, mm, bias, scale, shift, act, n, p);
}

void nl_wino_output_adjoint(float *dmm, const float *dout, int n, const struct nl_wino *p)
{
    if (!vector_fits((size_t)n * p->f * p->oh * p->ow))
        nl_wino_output_adjoint_naive(dmm, dout, n, p);
    else if (p->m == 4)
        output_adjoint4(dmm, dout, n, p);
    else
        output_adjoint2(dmm, dout, n, p);
}
