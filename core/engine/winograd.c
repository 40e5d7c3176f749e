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
 * Stacked tile rows (stack_rows) fill the lanes better: planes whose rows have 4 tiles (13 to
 * 16 wide under F(4x4), resnet8's 14x14 second stage; 7 or 8 under F(2x2)) put four whole tile
 * rows in a group's 16 lanes, a plane row in one vector; rows of 6 to 8 tiles within 32 columns
 * (resnet8's 28x28 first stage) put two tile rows in 14 lanes, a plane row in two vectors. Either
 * way the tiles' columns come from four row vectors: the input transform runs the column pass
 * over each tile row's input rows and fills each result by two two-source permutes and a blend;
 * the output transform's adjoint loads rows and does the same without arithmetic; the output
 * transform and the input transform's adjoint spread each tile row's rows back by a permute per
 * tile column, a masked store (or load, add and store) per vector of a plane row. These take the
 * planes before the row-wise paths. tests/bench_conv.c's parts (us per image, thread CPU time,
 * fastest of 25, 2026-11-27, load average 5 to 6, alternating with the build before): resnet8's
 * stage 2 (32 channels, chunks of 7 images) input 5.5 -> 3.9 to 4.3, output 5.1 -> 1.8 to 2.0,
 * output adjoint 3.8 -> 2.7 to 3.1, input adjoint 9.9 -> 6.3 to 7.1 (against the gathers); stage 1
 * (16 channels, chunks of 4) input 9.2 -> 8.4, output 7.3 -> 6.1, output adjoint 7.5 -> 7.2,
 * input adjoint 12.4 -> 11.2 (against the row-wise paths). All of them do the sums of the paths
 * they replace in the same order, so the same results to the bit, but for the input adjoint against
 * the gathers (14x14): it adds a pixel's terms from neighbouring tiles of a row together first, as
 * the row-wise path does, so the input gradient differs from the gathering path's in the last
 * bits. Eight tile rows of 2 tiles (resnet8's 7x7 stage 3, each result from four pairs of rows)
 * were no faster than the gathers there (same parts, alternating: input 3.4 against 3.4, output
 * 2.2 against 2.8, output adjoint 2.2 against 2.2, input adjoint 6.2 against 5.4): planes of 2
 * tiles a row keep the gathers.
 *
 * A plane 16 wide with padding 1 under F(4x4) (ResNet-18's layer1 at 3x64x64) has 4 tiles a row,
 * but its padded input rows are 18 wide: they took the gathers until the stacked rows held the
 * plane's columns from lane 0 instead of lane pw (stack_shift), the padding's columns that fall
 * out of the vector read as zeros by stack_pick's masks. A small program on the AMD EPYC of
 * README's figures (64 channels, chunks of 4 images, fastest of 3000 calls, 2026-11-28, two
 * rounds): input 21.4 and 21.5 us per image -> 9.7 and 9.9, output 13.1 and 13.4 -> 6.7 and
 * 6.8, output adjoint 12.8 and 13.0 -> 8.0 and 8.2, all three the same floats to the bit (compared
 * byte for byte on nine planes from 7x8 to 16x16); input adjoint 40.5 and 40.6 -> 13.0 and 16.5,
 * which adds a pixel's terms from neighbouring tiles in the stacked path's order, so that layer1's
 * input gradients differ from the gathering path's in the last bits (since 0.4.6). */
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

/* The rows of each of v's a*a matrices: p->vc where the input transform writes a block of a
 * wider input's channels, else p->c. */
static size_t v_rows(const struct nl_wino *p)
{
    return p->vc > 0 ? (size_t)p->vc : (size_t)p->c;
}

/* The output's channel plane: p->op where the output transform writes a band of a taller
 * output, else oh*ow. */
static size_t out_plane(const struct nl_wino *p)
{
    return p->op > 0 ? (size_t)p->op : (size_t)p->oh * p->ow;
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

void nl_wino_filter_cols_naive(float *u, const float *weight, const struct nl_wino *p, int wc)
{
    const size_t fc = (size_t)p->f * p->c;
    float y[36];

    for (size_t i = 0; i < fc; i++) {
        const size_t f = i / (size_t)p->c, c = i % (size_t)p->c;
        sandwich(y, table_g(p), p->a, 3, weight + 9 * (f * (size_t)wc + c));
        for (int xi = 0; xi < p->a * p->a; xi++)
            u[xi * fc + i] = y[xi];
    }
}

void nl_wino_filter_naive(float *u, const float *weight, const struct nl_wino *p)
{
    nl_wino_filter_cols_naive(u, weight, p, p->c);
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

/* The input transform of every tile, written at v[((xi * C + c) * T + t)] or, transposed, at
 * v[((xi * T + t) * C + c)]. */
static void input_naive(float *v, const float *in, int n, const struct nl_wino *p, int transposed)
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
                    v[transposed ? ((size_t)xi * tt + t) * p->c + c
                                 : ((size_t)xi * v_rows(p) + c) * tt + t] = y[xi];
            }
        }
}

void nl_wino_input_naive(float *v, const float *in, int n, const struct nl_wino *p)
{
    input_naive(v, in, n, p, 0);
}

void nl_wino_input_t_naive(float *vt, const float *in, int n, const struct nl_wino *p)
{
    input_naive(vt, in, n, p, 1);
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
    const size_t tt = (size_t)n * p->tiles, plane = out_plane(p);
    float x[36], y[16];

    for (int s = 0; s < n; s++)
        for (int f = 0; f < p->f; f++) {
            float *img = out + ((size_t)s * p->f + f) * plane;
            for (int r = 0; r < p->tiles; r++) {
                const size_t t = (size_t)s * p->tiles + r;
                const int y0 = r / p->tiles_x * m, x0 = r % p->tiles_x * m;
                for (int xi = 0; xi < a * a; xi++)
                    x[xi] = p->mt ? mm[((size_t)xi * tt + t) * p->mt + f]
                                  : mm[((size_t)xi * p->f + f) * tt + t];
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

/* Product xi of filter f for the tiles t0 .. t0 + 15 of mm (those in live): 16 contiguous floats,
 * or with p->mt (mm turned) 16 floats p->mt apart. */
AVX512 static inline __attribute__((always_inline)) __m512
mm_lanes(const float *mm, const struct nl_wino *p, int xi, int f, size_t t0, int tt, __mmask16 live)
{
    if (!p->mt)
        return _mm512_maskz_loadu_ps(live, mm + ((size_t)xi * p->f + f) * tt + t0);
    const __m512i idx =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(p->mt));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, idx,
                                    mm + ((size_t)xi * tt + t0) * p->mt + f, 4);
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
    const size_t vc = v_rows(p);
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
                _mm512_mask_storeu_ps(v + ((size_t)xi * vc + c) * tt + t0, g.live, y[xi]);
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
    const size_t vc = v_rows(p);
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
                        _mm512_mask_storeu_ps(v + ((size_t)(i * a + j) * vc + c) * tt + t0, tx_live,
                                              comb(bt + j * a, 1, x + i * a, 1, a));
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
    const size_t plane = out_plane(p);
    struct group g;
    __m512 x[36], y[16];

    for (int t0 = 0; t0 < tt; t0 += 16) {
        group_at(&g, p, t0, tt, p->f * plane, 0);
        for (int f = 0; f < p->f; f++) {
            float *img = out + f * plane;
            for (int xi = 0; xi < a * a; xi++)
                x[xi] = mm_lanes(mm, p, xi, f, (size_t)t0, tt, g.live);
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
    const size_t plane = out_plane(p);
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
                    x[xi] = mm_lanes(mm, p, xi, f, t0, tt, tx_live);
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
AVX512 INLINE void filter_avx512(float *u, const float *weight, const struct nl_wino *p, int wc,
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
            const float *wf = weight + ((size_t)f * wc + c0) * 9;
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

/* Stacked tile rows: a group's lanes hold R whole tile rows, q = g*tiles_x + tx for tile tx of
 * the group's tile row g (of one image or of consecutive ones), and a plane row is H vectors
 * (input columns -pw .. 16H - 1 - pw, the output's 0 .. 16H - 1). Two shapes: R = 4, H = 1 for
 * rows of 4 tiles (13 to 16 wide under F(4x4), resnet8's 14x14 stage; 7 or 8 under F(2x2)), and
 * R = 2, H = 2 for rows of 6 to 8 tiles within 32 columns (22 to 30 wide, resnet8's 28x28
 * stage: 14 of 16 lanes where a tile row alone fills 7). Either way the plane rows a result
 * takes its lanes from are four vectors, two pairs for two-source permutes. stack_rows says R,
 * or 0 where neither shape fits. */
static int stack_rows(const struct nl_wino *p)
{
    if (p->tiles_x == 4 && p->w <= 16 && p->ow <= 16)
        return 4;
    if (p->tiles_x >= 6 && p->tiles_x <= 8 && (p->tiles_x - 1) * p->m + p->a <= 32)
        return 2;
    return 0;
}

/* The lane of a stacked input row that holds the plane's column 0: pw, so that a tile's columns
 * start at lane tx*m, unless the padded row does not fit its vectors (16 wide with padding 1 under
 * F(4x4): ResNet-18's layer1 at 3x64x64); then 16 - w, the row's columns all in the vector and the
 * padding's lanes that fall out of it read as zeros (stack_pick). */
static int stack_shift(const struct nl_wino *p)
{
    return stack_rows(p) == 4 && p->w + p->pw > 16 ? 16 - p->w : p->pw;
}

/* Tile row g of the group at t0: where its image starts (image: the floats of one image), its
 * first input (in) or output row; 0 where the group has no such row. */
static int stack_row(const struct nl_wino *p, int t0, int g, int tt, size_t image, int in,
                     size_t *at, int *y0)
{
    const int t = t0 + g * p->tiles_x;

    *at = 0;
    *y0 = 0;
    if (t >= tt)
        return 0;
    *at = (size_t)(t / p->tiles) * image;
    *y0 = (t % p->tiles) / p->tiles_x * p->m - (in ? p->ph : 0);
    return 1;
}

/* The permute that takes column k of the tiles of R tile rows into the lanes: lane q (tile tx of
 * row g) takes lane tx*m + k - drop of row g's H vectors, the four vectors s[g*H + h] read as the
 * pairs (s0, s1) and (s2, s3); *pair0 marks the lanes taken from the first pair, *valid those
 * that exist and whose column lies within the vectors (the others are zeros of the padding).
 * drop: the padding's columns left out of the rows' vectors at the left (pw - stack_shift for
 * input rows, else 0). */
AVX512 INLINE __m512i stack_pick(const struct nl_wino *p, int rows, int k, int drop,
                                 __mmask16 *valid, __mmask16 *pair0)
{
    const int span = rows * p->tiles_x;
    int idx[16];

    *valid = *pair0 = 0;
    for (int q = 0; q < 16; q++) {
        const int g = q / p->tiles_x, col = q % p->tiles_x * p->m + k - drop;
        const int in_vectors = col >= 0 && (rows == 4 ? col < 16 : col < 32);
        idx[q] = 0;
        if (q >= span || !in_vectors)
            continue;
        idx[q] = rows == 4 ? g % 2 * 16 + col : col;
        *valid |= (__mmask16)(1u << q);
        if (rows == 4 ? g < 2 : g < 1)
            *pair0 |= (__mmask16)(1u << q);
    }
    return _mm512_loadu_si512(idx);
}

AVX512 INLINE __m512 stack_gather(const __m512 s[4], __m512i pick, __mmask16 valid, __mmask16 pair0)
{
    const __m512 lo = _mm512_maskz_permutex2var_ps(valid & pair0, s[0], pick, s[1]);
    return _mm512_mask_mov_ps(lo, valid & (__mmask16)~pair0,
                              _mm512_permutex2var_ps(s[2], pick, s[3]));
}

/* The spread back along a plane row: lane l of vector h of tile row g's row (lane col = 16h + l
 * + drop of the row, drop as stack_pick's) takes column j of tile (col - j) / m, lane g*tiles_x +
 * (col - j) / m, where col - j is a tile's first column (takes[h][j] marks those lanes). For
 * j < cols. */
AVX512 INLINE void stack_spread(const struct nl_wino *p, int rows, int halves, int cols, int drop,
                                __m512i spread[4][2][6], __mmask16 takes[2][6])
{
    const int m = p->m;

    for (int h = 0; h < halves; h++)
        for (int j = 0; j < cols; j++) {
            takes[h][j] = 0;
            for (int g = 0; g < rows; g++) {
                int idx[16];
                for (int l = 0; l < 16; l++) {
                    const int d = 16 * h + l + drop - j,
                              has = d >= 0 && d % m == 0 && d / m < p->tiles_x;
                    idx[l] = g * p->tiles_x + (has ? d / m : 0);
                    if (has)
                        takes[h][j] |= (__mmask16)(1u << l);
                }
                spread[g][h][j] = _mm512_loadu_si512(idx);
            }
        }
}

/* The lanes of a plane row's H vectors that hold the plane's columns: input rows (lane = column +
 * stack_shift) or output rows. */
static void stack_cols(const struct nl_wino *p, int in, __mmask16 cols[2])
{
    if (in) {
        const int sh = stack_shift(p);
        cols[0] = (__mmask16)(first_lanes(p->w + sh) & (0xffffu << sh));
        cols[1] = first_lanes(p->w + sh - 16);
    } else {
        cols[0] = first_lanes(p->ow);
        cols[1] = first_lanes(p->ow - 16);
    }
}

/* The input transform on stacked tile rows: per group and channel, each tile row's a input rows
 * by masked loads, the column pass of B^T x B over those whole rows, the tiles' columns put into
 * the lanes (stack_gather: two permutes and a blend), the row pass, stores of the group's lanes
 * into v. input_avx512's sums in its order: the same results to the bit. */
AVX512 INLINE void input_stack_avx512(float *v, const float *in, int n, const struct nl_wino *p,
                                      const int a, const float *bt, const int rows,
                                      const int halves)
{
    const int tt = n * p->tiles, span = rows * p->tiles_x, sh = stack_shift(p);
    const size_t plane = (size_t)p->h * p->w;
    const size_t vc = v_rows(p);
    __m512i pick[6];
    __mmask16 valid[6], pair0[6], cols[2];

    stack_cols(p, 1, cols);
    for (int k = 0; k < a; k++)
        pick[k] = stack_pick(p, rows, k, p->pw - sh, &valid[k], &pair0[k]);
    for (int t0 = 0; t0 < tt; t0 += span) {
        const __mmask16 live = first_lanes(tt - t0 < span ? tt - t0 : span);
        size_t at[4];
        int y0[4], has[4];
        for (int g = 0; g < rows; g++)
            has[g] = stack_row(p, t0, g, tt, p->c * plane, 1, &at[g], &y0[g]);
        for (int c = 0; c < p->c; c++) {
            __m512 r[4][12]; /* r[g][i*H + h]: vector h of tile row g's input row i */
#pragma GCC unroll 4
            for (int g = 0; g < rows; g++)
#pragma GCC unroll 6
                for (int i = 0; i < a; i++) {
                    const int iy = y0[g] + i;
                    const float *row = in + at[g] + c * plane + (size_t)iy * p->w - sh;
                    const int ok = has[g] && iy >= 0 && iy < p->h;
#pragma GCC unroll 2
                    for (int h = 0; h < halves; h++)
                        r[g][i * halves + h] =
                            ok ? _mm512_maskz_loadu_ps(cols[h], row + 16 * h) : _mm512_setzero_ps();
                }
#pragma GCC unroll 6
            for (int i = 0; i < a; i++) {
                __m512 z[4], x[6];
#pragma GCC unroll 4
                for (int g = 0; g < rows; g++)
#pragma GCC unroll 2
                    for (int h = 0; h < halves; h++)
                        z[g * halves + h] = comb(bt + i * a, 1, r[g] + h, halves, a);
#pragma GCC unroll 6
                for (int k = 0; k < a; k++)
                    x[k] = stack_gather(z, pick[k], valid[k], pair0[k]);
#pragma GCC unroll 6
                for (int j = 0; j < a; j++)
                    _mm512_mask_storeu_ps(v + ((size_t)(i * a + j) * vc + c) * tt + t0, live,
                                          comb(bt + j * a, 1, x, 1, a));
            }
        }
    }
}

/* The output transform on stacked tile rows: output_avx512's products, then each of a tile row's
 * m output rows laid along its H vectors by m permutes each and stored by masked stores, instead
 * of a scatter per pixel. The same results to the bit. */
AVX512 INLINE void output_stack_avx512(float *out, const float *mm, const float *bias,
                                       const float *scale, const float *shift, int act, int n,
                                       const struct nl_wino *p, const int m, const float *at,
                                       const int rows, const int halves)
{
    const int a = m + 2, tt = n * p->tiles, span = rows * p->tiles_x;
    const size_t plane = out_plane(p);
    __m512i spread[4][2][6];
    __mmask16 takes[2][6], cols[2];
    __m512 x[36], y[16];

    stack_cols(p, 0, cols);
    stack_spread(p, rows, halves, m, 0, spread, takes);
    for (int t0 = 0; t0 < tt; t0 += span) {
        const __mmask16 live = first_lanes(tt - t0 < span ? tt - t0 : span);
        size_t base[4];
        int y0[4], has[4];
        for (int g = 0; g < rows; g++)
            has[g] = stack_row(p, t0, g, tt, p->f * plane, 0, &base[g], &y0[g]);
        for (int f = 0; f < p->f; f++) {
#pragma GCC unroll 36
            for (int xi = 0; xi < a * a; xi++)
                x[xi] = mm_lanes(mm, p, xi, f, (size_t)t0, tt, live);
            sandwich_v(y, at, m, a, x);
            for (int g = 0; g < rows && has[g]; g++)
                for (int i = 0; i < m && y0[g] + i < p->oh; i++) {
                    float *row = out + base[g] + f * plane + (size_t)(y0[g] + i) * p->ow;
#pragma GCC unroll 2
                    for (int h = 0; h < halves; h++) {
                        __m512 o = _mm512_setzero_ps();
#pragma GCC unroll 4
                        for (int j = 0; j < m; j++)
                            o = _mm512_mask_permutexvar_ps(o, takes[h][j], spread[g][h][j],
                                                           y[i * m + j]);
                        if (scale)
                            o = act_avx512(_mm512_add_ps(_mm512_mul_ps(o, _mm512_set1_ps(scale[f])),
                                                         _mm512_set1_ps(shift[f])),
                                           act);
                        else if (bias)
                            o = _mm512_add_ps(o, _mm512_set1_ps(bias[f]));
                        _mm512_mask_storeu_ps(row + 16 * h, cols[h], o);
                    }
                }
        }
    }
}

/* The output transform's adjoint on stacked tile rows: each tile row's m rows of dout by masked
 * loads, the tiles' columns put into the lanes (stack_gather), output_adjoint_avx512's product.
 * The same results to the bit, without its gathers. */
AVX512 INLINE void output_adjoint_stack_avx512(float *dmm, const float *dout, int n,
                                               const struct nl_wino *p, const int m,
                                               const float *at, const int rows, const int halves)
{
    const int a = m + 2, tt = n * p->tiles, span = rows * p->tiles_x;
    const size_t plane = (size_t)p->oh * p->ow;
    __m512i pick[4];
    __mmask16 valid[4], pair0[4], cols[2];
    __m512 x[16], y[36];

    stack_cols(p, 0, cols);
    for (int j = 0; j < m; j++)
        pick[j] = stack_pick(p, rows, j, 0, &valid[j], &pair0[j]);
    for (int t0 = 0; t0 < tt; t0 += span) {
        const __mmask16 live = first_lanes(tt - t0 < span ? tt - t0 : span);
        size_t base[4];
        int y0[4], has[4];
        for (int g = 0; g < rows; g++)
            has[g] = stack_row(p, t0, g, tt, p->f * plane, 0, &base[g], &y0[g]);
        for (int f = 0; f < p->f; f++) {
#pragma GCC unroll 4
            for (int i = 0; i < m; i++) {
                __m512 r[4];
#pragma GCC unroll 4
                for (int g = 0; g < rows; g++) {
                    const int ok = has[g] && y0[g] + i < p->oh;
                    const float *row = dout + base[g] + f * plane + (size_t)(y0[g] + i) * p->ow;
#pragma GCC unroll 2
                    for (int h = 0; h < halves; h++)
                        r[g * halves + h] =
                            ok ? _mm512_maskz_loadu_ps(cols[h], row + 16 * h) : _mm512_setzero_ps();
                }
#pragma GCC unroll 4
                for (int j = 0; j < m; j++)
                    x[i * m + j] = stack_gather(r, pick[j], valid[j], pair0[j]);
            }
            sandwich_tv(y, at, m, a, x);
#pragma GCC unroll 36
            for (int xi = 0; xi < a * a; xi++)
                _mm512_mask_storeu_ps(dmm + ((size_t)xi * p->f + f) * tt + t0, live, y[xi]);
        }
    }
}

/* The input transform's adjoint on stacked tile rows: input_adjoint_avx512's product, then each
 * of a tile row's a rows spread along its H vectors by a permutes each, the neighbouring tiles'
 * shared columns added there, and added to din by masked loads and stores, instead of a gather
 * and a scatter per pixel. The sums of input_adjoint_rows_avx512, in its order (tile rows one
 * after the other, a pixel's terms from neighbouring tiles of a row added together first): on
 * the planes both take, the same results to the bit; against the gathering path they differ in
 * the last bits. */
AVX512 INLINE void input_adjoint_stack_avx512(float *din, const float *dv, int n,
                                              const struct nl_wino *p, const int a, const float *bt,
                                              const int rows, const int halves, int set)
{
    const __m512 zero = _mm512_setzero_ps();
    const int tt = n * p->tiles, span = rows * p->tiles_x, sh = stack_shift(p);
    const size_t plane = (size_t)p->h * p->w;
    __m512i spread[4][2][6];
    __mmask16 takes[2][6], cols[2];
    __m512 x[36], y[36];

    stack_cols(p, 1, cols);
    stack_spread(p, rows, halves, a, p->pw - sh, spread, takes);
    for (int t0 = 0; t0 < tt; t0 += span) {
        const __mmask16 live = first_lanes(tt - t0 < span ? tt - t0 : span);
        size_t base[4];
        int y0[4], has[4];
        for (int g = 0; g < rows; g++)
            has[g] = stack_row(p, t0, g, tt, p->c * plane, 1, &base[g], &y0[g]);
        for (int c = 0; c < p->c; c++) {
#pragma GCC unroll 36
            for (int xi = 0; xi < a * a; xi++)
                x[xi] = _mm512_maskz_loadu_ps(live, dv + ((size_t)xi * p->c + c) * tt + t0);
            sandwich_tv(y, bt, a, a, x);
            for (int g = 0; g < rows && has[g]; g++)
#pragma GCC unroll 6
                for (int i = 0; i < a; i++) {
                    const int iy = y0[g] + i;
                    if (iy < 0 || iy >= p->h)
                        continue;
                    float *row = din + base[g] + c * plane + (size_t)iy * p->w - sh;
                    /* set: the rows no earlier tile row of the image reached are written, 0 + o
                     * as the sum into din zeroed would be (-0 + 0 = +0) */
                    const int first = set && (i >= a - p->m || y0[g] == -p->ph);
#pragma GCC unroll 2
                    for (int h = 0; h < halves; h++) {
                        __m512 o =
                            _mm512_maskz_permutexvar_ps(takes[h][0], spread[g][h][0], y[i * a]);
#pragma GCC unroll 6
                        for (int j = 1; j < a; j++)
                            o = _mm512_add_ps(o, _mm512_maskz_permutexvar_ps(
                                                     takes[h][j], spread[g][h][j], y[i * a + j]));
                        const __m512 was =
                            first ? zero : _mm512_maskz_loadu_ps(cols[h], row + 16 * h);
                        _mm512_mask_storeu_ps(row + 16 * h, cols[h], _mm512_add_ps(was, o));
                    }
                }
        }
    }
}

/* out (16, 16) = the transpose of the 16 rows of 16 floats at in, in + stride, ..., the columns
 * past the mask read as 0: unpacks of 32 and 64 bits, then two rounds of 128-bit shuffles. */
AVX512 INLINE void transpose16(float *out, const float *in, size_t stride, __mmask16 cols)
{
    __m512 r[16], t[16];

#pragma GCC unroll 16
    for (int k = 0; k < 16; k++)
        r[k] = _mm512_maskz_loadu_ps(cols, in + k * stride);
#pragma GCC unroll 8
    for (int k = 0; k < 16; k += 2) {
        t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 16; k += 4) {
        r[k] = _mm512_castpd_ps(
            _mm512_unpacklo_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
        r[k + 1] = _mm512_castpd_ps(
            _mm512_unpackhi_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
        r[k + 2] = _mm512_castpd_ps(
            _mm512_unpacklo_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
        r[k + 3] = _mm512_castpd_ps(
            _mm512_unpackhi_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
    }
    /* r[4b + j]: rows 4b .. 4b + 3, column j of each 128-bit lane */
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
        t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        _mm512_store_ps(out + 16 * j, _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88));
        _mm512_store_ps(out + 16 * (4 + j), _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88));
        _mm512_store_ps(out + 16 * (8 + j), _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd));
        _mm512_store_ps(out + 16 * (12 + j), _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd));
    }
}

/* The transposed input transform, 16 channels in the lanes: per image and block of 16 channels,
 * the block's planes turned pixel-major into tb (pixel, 16) by 16x16 transposes, then per tile
 * its a*a pixels' 16 channels by one load each (none outside the plane), input_avx512's two-sided
 * product (the same sums in the same order, per lane), and each of the a*a results one 16-float
 * store into vt. */
#define INPUT_T_PIXELS 256

AVX512 INLINE void input_t_avx512(float *vt, const float *in, int n, const struct nl_wino *p,
                                  const int a, const float *bt)
{
    const size_t tt = (size_t)n * p->tiles, plane = (size_t)p->h * p->w;
    float tb[INPUT_T_PIXELS * 16] __attribute__((aligned(64)));
    __m512 x[36], y[36];

    for (int s = 0; s < n; s++)
        for (int c0 = 0; c0 < p->c; c0 += 16) {
            const float *blk = in + ((size_t)s * p->c + c0) * plane;
            for (size_t q = 0; q < plane; q += 16)
                transpose16(tb + 16 * q, blk + q, plane,
                            plane - q < 16 ? first_lanes((int)(plane - q)) : (__mmask16)0xffff);
            for (int r = 0; r < p->tiles; r++) {
                int y0, x0;
                tile_origin(p, r, &y0, &x0);
#pragma GCC unroll 6
                for (int i = 0; i < a; i++)
#pragma GCC unroll 6
                    for (int j = 0; j < a; j++) {
                        const int iy = y0 + i, ix = x0 + j;
                        x[i * a + j] = iy >= 0 && iy < p->h && ix >= 0 && ix < p->w
                                           ? _mm512_load_ps(tb + 16 * ((size_t)iy * p->w + ix))
                                           : _mm512_setzero_ps();
                    }
                sandwich_v(y, bt, a, a, x);
                const size_t t = (size_t)s * p->tiles + r;
#pragma GCC unroll 36
                for (int xi = 0; xi < a * a; xi++)
                    _mm512_storeu_ps(vt + ((size_t)xi * tt + t) * p->c + c0, y[xi]);
            }
        }
}

AVX512 static void input_t4(float *vt, const float *in, int n, const struct nl_wino *p)
{
    input_t_avx512(vt, in, n, p, 6, bt4);
}

AVX512 static void input_t2(float *vt, const float *in, int n, const struct nl_wino *p)
{
    input_t_avx512(vt, in, n, p, 4, bt2);
}

/* The tile-sized instances, each with its constant table. */
AVX512 static void input4(float *v, const float *in, int n, const struct nl_wino *p)
{
    if (stack_rows(p) == 4)
        input_stack_avx512(v, in, n, p, 6, bt4, 4, 1);
    else if (stack_rows(p) == 2)
        input_stack_avx512(v, in, n, p, 6, bt4, 2, 2);
    else if (rows_fit(p))
        input_rows_avx512(v, in, n, p, 6, bt4);
    else
        input_avx512(v, in, n, p, 6, bt4);
}

AVX512 static void input2(float *v, const float *in, int n, const struct nl_wino *p)
{
    if (stack_rows(p) == 4)
        input_stack_avx512(v, in, n, p, 4, bt2, 4, 1);
    else if (stack_rows(p) == 2)
        input_stack_avx512(v, in, n, p, 4, bt2, 2, 2);
    else if (rows_fit(p))
        input_rows_avx512(v, in, n, p, 4, bt2);
    else
        input_avx512(v, in, n, p, 4, bt2);
}

AVX512 static void input_adjoint4(float *din, const float *dv, int n, const struct nl_wino *p,
                                  int set)
{
    if (stack_rows(p) == 4)
        input_adjoint_stack_avx512(din, dv, n, p, 6, bt4, 4, 1, set);
    else if (stack_rows(p) == 2)
        input_adjoint_stack_avx512(din, dv, n, p, 6, bt4, 2, 2, set);
    else if (set) {
        memset(din, 0, (size_t)n * p->c * p->h * p->w * sizeof *din);
        input_adjoint4(din, dv, n, p, 0);
    } else if (rows_fit(p))
        input_adjoint_rows_avx512(din, dv, n, p, 6, bt4);
    else
        input_adjoint_avx512(din, dv, n, p, 6, bt4);
}

AVX512 static void input_adjoint2(float *din, const float *dv, int n, const struct nl_wino *p,
                                  int set)
{
    if (stack_rows(p) == 4)
        input_adjoint_stack_avx512(din, dv, n, p, 4, bt2, 4, 1, set);
    else if (stack_rows(p) == 2)
        input_adjoint_stack_avx512(din, dv, n, p, 4, bt2, 2, 2, set);
    else if (set) {
        memset(din, 0, (size_t)n * p->c * p->h * p->w * sizeof *din);
        input_adjoint2(din, dv, n, p, 0);
    } else if (rows_fit(p))
        input_adjoint_rows_avx512(din, dv, n, p, 4, bt2);
    else
        input_adjoint_avx512(din, dv, n, p, 4, bt2);
}

AVX512 static void output4(float *out, const float *mm, const float *bias, const float *scale,
                           const float *shift, int act, int n, const struct nl_wino *p)
{
    if (stack_rows(p) == 4)
        output_stack_avx512(out, mm, bias, scale, shift, act, n, p, 4, at4, 4, 1);
    else if (stack_rows(p) == 2)
        output_stack_avx512(out, mm, bias, scale, shift, act, n, p, 4, at4, 2, 2);
    else if (rows_fit(p))
        output_rows_avx512(out, mm, bias, scale, shift, act, n, p, 4, at4);
    else
        output_avx512(out, mm, bias, scale, shift, act, n, p, 4, at4);
}

AVX512 static void output2(float *out, const float *mm, const float *bias, const float *scale,
                           const float *shift, int act, int n, const struct nl_wino *p)
{
    if (stack_rows(p) == 4)
        output_stack_avx512(out, mm, bias, scale, shift, act, n, p, 2, at2, 4, 1);
    else if (stack_rows(p) == 2)
        output_stack_avx512(out, mm, bias, scale, shift, act, n, p, 2, at2, 2, 2);
    else if (rows_fit(p))
        output_rows_avx512(out, mm, bias, scale, shift, act, n, p, 2, at2);
    else
        output_avx512(out, mm, bias, scale, shift, act, n, p, 2, at2);
}

AVX512 static void output_adjoint4(float *dmm, const float *dout, int n, const struct nl_wino *p)
{
    if (stack_rows(p) == 4)
        output_adjoint_stack_avx512(dmm, dout, n, p, 4, at4, 4, 1);
    else if (stack_rows(p) == 2)
        output_adjoint_stack_avx512(dmm, dout, n, p, 4, at4, 2, 2);
    else
        output_adjoint_avx512(dmm, dout, n, p, 4, at4);
}

AVX512 static void output_adjoint2(float *dmm, const float *dout, int n, const struct nl_wino *p)
{
    if (stack_rows(p) == 4)
        output_adjoint_stack_avx512(dmm, dout, n, p, 2, at2, 4, 1);
    else if (stack_rows(p) == 2)
        output_adjoint_stack_avx512(dmm, dout, n, p, 2, at2, 2, 2);
    else
        output_adjoint_avx512(dmm, dout, n, p, 2, at2);
}

AVX512 static void filter4(float *u, const float *weight, const struct nl_wino *p, int wc)
{
    filter_avx512(u, weight, p, wc, 6, g4);
}

AVX512 static void filter2(float *u, const float *weight, const struct nl_wino *p, int wc)
{
    filter_avx512(u, weight, p, wc, 4, g2);
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

void nl_wino_filter_cols(float *u, const float *weight, const struct nl_wino *p, int wc)
{
    if (!vector_fits((size_t)p->f * wc * 9))
        nl_wino_filter_cols_naive(u, weight, p, wc);
    else if (p->m == 4)
        filter4(u, weight, p, wc);
    else
        filter2(u, weight, p, wc);
}

void nl_wino_filter(float *u, const float *weight, const struct nl_wino *p)
{
    nl_wino_filter_cols(u, weight, p, p->c);
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

int nl_wino_input_t_fast(const struct nl_wino *p)
{
    return nl_kernels_vector_on() && p->c % 16 == 0 && (size_t)p->h * p->w <= INPUT_T_PIXELS &&
           (size_t)p->c * p->h * p->w < (size_t)INT_MAX;
}

void nl_wino_input_t(float *vt, const float *in, int n, const struct nl_wino *p)
{
    if (!nl_wino_input_t_fast(p))
        nl_wino_input_t_naive(vt, in, n, p);
    else if (p->m == 4)
        input_t4(vt, in, n, p);
    else
        input_t2(vt, in, n, p);
}

void nl_wino_input_adjoint(float *din, const float *dv, int n, const struct nl_wino *p)
{
    if (!vector_fits((size_t)n * p->c * p->h * p->w))
        nl_wino_input_adjoint_naive(din, dv, n, p);
    else if (p->m == 4)
        input_adjoint4(din, dv, n, p, 0);
    else
        input_adjoint2(din, dv, n, p, 0);
}

/* The stacked paths write the rows that no earlier tile row of their image reached and add into
 * the others, so din needs no clearing first; the other paths clear it and add. */
void nl_wino_input_adjoint_set(float *din, const float *dv, int n, const struct nl_wino *p)
{
    if (!vector_fits((size_t)n * p->c * p->h * p->w))
        nl_wino_input_adjoint_set_naive(din, dv, n, p);
    else if (p->m == 4)
        input_adjoint4(din, dv, n, p, 1);
    else
        input_adjoint2(din, dv, n, p, 1);
}

void nl_wino_input_adjoint_set_naive(float *din, const float *dv, int n, const struct nl_wino *p)
{
    memset(din, 0, (size_t)n * p->c * p->h * p->w * sizeof *din);
    nl_wino_input_adjoint_naive(din, dv, n, p);
}

void nl_wino_output(float *out, const float *mm, const float *bias, const float *scale,
                    const float *shift, int act, int n, const struct nl_wino *p)
{
    if (!vector_fits((size_t)n * p->f * out_plane(p)))
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
