/* 3x3 convolution, stride 1, padding 1, on a 2x2 plane (nnlab/conv_plane.h): ResNet-18's last
 * stage at 64x64 inputs.
 *
 * On a 2x2 plane output pixel o = (oy, ox) reads input pixel i = (iy, ix) through the tap
 * (iy - oy + 1, ix - ox + 1), for all 16 pairs (TAP below), and never reads anything else but
 * the padding. im2col's (9c, 4) columns per image hold 36 taps per channel pair, 20 of them
 * zeros that a GEMM multiplies all the same; here each channel pair costs its 16
 * multiply-adds. The images of a shard go in the 16 lanes of AVX-512 (a block of up to 16
 * images is turned image-minor in scratch first: (c, 4, 16), 512 channels 128 KiB, in the L2
 * cache), so a weight is one broadcast used for 4 (tap at the centre), 2 (edge) or 1 (corner)
 * products of 16 images:
 *
 * - forward: four filters at a time, their 16 outputs (4 filters x 4 pixels x 16 images) in
 *   registers, the channels walked once: per channel 4 loads of input, 4 x 9 broadcast weights,
 *   64 fused multiply-adds. The weights stream from memory once per block of 16 images.
 * - input gradient: the same with the roles turned: four input channels' 16 gradients in
 *   registers, the filters walked once, each filter's 36 weights of those four channels
 *   contiguous in [f, c, 3, 3].
 * - weight gradient: the same 16 pairs per channel pair, 16 channels in the lanes (below).
 * Without AVX-512 the naive loops run. */
#include "nnlab/conv_plane.h"

#include <string.h>

#include "nnlab/kernels.h"
#include "simd.h"

/* TAP[o][i]: the tap (row-major in the 3x3 window) joining output pixel o and input pixel i. */
static const int TAP[4][4] = {{4, 5, 7, 8}, {3, 4, 6, 7}, {1, 2, 4, 5}, {0, 1, 3, 4}};

size_t nl_conv_plane2_scratch(int c, int f)
{
    return ((size_t)c + (size_t)f) * 4 * 16;
}

void nl_conv_plane2_naive(float *out, const float *in, const float *weight, const float *bias,
                          int n, int c, int f)
{
    for (int s = 0; s < n; s++)
        for (int fo = 0; fo < f; fo++)
            for (int o = 0; o < 4; o++) {
                double sum = 0.0;
                for (int ci = 0; ci < c; ci++) {
                    const float *w = weight + ((size_t)fo * c + ci) * 9;
                    const float *x = in + ((size_t)s * c + ci) * 4;
                    for (int i = 0; i < 4; i++)
                        sum += (double)w[TAP[o][i]] * x[i];
                }
                out[((size_t)s * f + fo) * 4 + o] = (float)sum + (bias ? bias[fo] : 0.0f);
            }
}

void nl_conv_plane2_din_naive(float *din, const float *dout, const float *weight, int n, int c,
                              int f)
{
    for (int s = 0; s < n; s++)
        for (int ci = 0; ci < c; ci++)
            for (int i = 0; i < 4; i++) {
                double sum = 0.0;
                for (int fo = 0; fo < f; fo++) {
                    const float *w = weight + ((size_t)fo * c + ci) * 9;
                    const float *d = dout + ((size_t)s * f + fo) * 4;
                    for (int o = 0; o < 4; o++)
                        sum += (double)w[TAP[o][i]] * d[o];
                }
                din[((size_t)s * c + ci) * 4 + i] += (float)sum;
            }
}

/* dst (rows, 16) = the nb images' rows of src (nb, rows) turned image-minor, lanes past nb 0. */
static void to_lanes(float *restrict dst, const float *restrict src, int nb, size_t rows)
{
    if (nb < 16)
        memset(dst, 0, rows * 16 * sizeof *dst);
    for (int j = 0; j < nb; j++) {
        const float *row = src + (size_t)j * rows;
        for (size_t k = 0; k < rows; k++)
            dst[k * 16 + j] = row[k];
    }
}

/* y (f, 4, 16) rows f0 .. f0 + fb - 1 from x (c, 4, 16); fb at most 4. */
AVX512 static inline __attribute__((always_inline)) void
forward_filters(float *y, const float *x, const float *weight, int c, int f0, const int fb)
{
    __m512 acc[4][4];

    for (int a = 0; a < fb; a++)
        for (int o = 0; o < 4; o++)
            acc[a][o] = _mm512_setzero_ps();
    for (int ci = 0; ci < c; ci++) {
        const __m512 x0 = _mm512_loadu_ps(x + (size_t)ci * 64);
        const __m512 x1 = _mm512_loadu_ps(x + (size_t)ci * 64 + 16);
        const __m512 x2 = _mm512_loadu_ps(x + (size_t)ci * 64 + 32);
        const __m512 x3 = _mm512_loadu_ps(x + (size_t)ci * 64 + 48);
        for (int a = 0; a < fb; a++) {
            const float *w = weight + ((size_t)(f0 + a) * c + ci) * 9;
            for (int o = 0; o < 4; o++) {
                acc[a][o] = _mm512_fmadd_ps(_mm512_set1_ps(w[TAP[o][0]]), x0, acc[a][o]);
                acc[a][o] = _mm512_fmadd_ps(_mm512_set1_ps(w[TAP[o][1]]), x1, acc[a][o]);
                acc[a][o] = _mm512_fmadd_ps(_mm512_set1_ps(w[TAP[o][2]]), x2, acc[a][o]);
                acc[a][o] = _mm512_fmadd_ps(_mm512_set1_ps(w[TAP[o][3]]), x3, acc[a][o]);
            }
        }
    }
    for (int a = 0; a < fb; a++)
        for (int o = 0; o < 4; o++)
            _mm512_storeu_ps(y + ((size_t)(f0 + a) * 4 + o) * 16, acc[a][o]);
}

/* dx (c, 4, 16) rows c0 .. c0 + cb - 1 from dy (f, 4, 16); cb at most 4. */
AVX512 static inline __attribute__((always_inline)) void
din_channels(float *dx, const float *dy, const float *weight, int c, int f, int c0, const int cb)
{
    __m512 acc[4][4];

    for (int a = 0; a < cb; a++)
        for (int i = 0; i < 4; i++)
            acc[a][i] = _mm512_setzero_ps();
    for (int fo = 0; fo < f; fo++) {
        const __m512 d0 = _mm512_loadu_ps(dy + (size_t)fo * 64);
        const __m512 d1 = _mm512_loadu_ps(dy + (size_t)fo * 64 + 16);
        const __m512 d2 = _mm512_loadu_ps(dy + (size_t)fo * 64 + 32);
        const __m512 d3 = _mm512_loadu_ps(dy + (size_t)fo * 64 + 48);
        const float *wf = weight + ((size_t)fo * c + c0) * 9;
        /* The filters' rows are c*9 floats apart, too far for the hardware to see a stream:
         * fetch the 36 weights of a filter some rows ahead. */
        if (fo + 8 < f) {
            const float *ahead = wf + (size_t)8 * c * 9;
            _mm_prefetch((const char *)ahead, _MM_HINT_T0);
            _mm_prefetch((const char *)(ahead + 16), _MM_HINT_T0);
            _mm_prefetch((const char *)(ahead + 4 * 9 - 1), _MM_HINT_T0);
        }
        for (int a = 0; a < cb; a++) {
            const float *w = wf + a * 9;
            for (int i = 0; i < 4; i++) {
                acc[a][i] = _mm512_fmadd_ps(_mm512_set1_ps(w[TAP[0][i]]), d0, acc[a][i]);
                acc[a][i] = _mm512_fmadd_ps(_mm512_set1_ps(w[TAP[1][i]]), d1, acc[a][i]);
                acc[a][i] = _mm512_fmadd_ps(_mm512_set1_ps(w[TAP[2][i]]), d2, acc[a][i]);
                acc[a][i] = _mm512_fmadd_ps(_mm512_set1_ps(w[TAP[3][i]]), d3, acc[a][i]);
            }
        }
    }
    for (int a = 0; a < cb; a++)
        for (int i = 0; i < 4; i++)
            _mm512_storeu_ps(dx + ((size_t)(c0 + a) * 4 + i) * 16, acc[a][i]);
}

AVX512 static void conv_plane2_avx512(float *out, const float *in, const float *weight,
                                      const float *bias, int n, int c, int f, float *scratch)
{
    float *x = scratch, *y = scratch + (size_t)c * 64;

    for (int s0 = 0; s0 < n; s0 += 16) {
        const int nb = n - s0 < 16 ? n - s0 : 16;
        to_lanes(x, in + (size_t)s0 * c * 4, nb, (size_t)c * 4);
        int f0 = 0;
        for (; f0 + 4 <= f; f0 += 4)
            forward_filters(y, x, weight, c, f0, 4);
        for (; f0 < f; f0++)
            forward_filters(y, x, weight, c, f0, 1);
        for (int j = 0; j < nb; j++) {
            float *dst = out + (size_t)(s0 + j) * f * 4;
            for (size_t k = 0; k < (size_t)f * 4; k++)
                dst[k] = y[k * 16 + j] + (bias ? bias[k / 4] : 0.0f);
        }
    }
}

AVX512 static void conv_plane2_din_avx512(float *din, const float *dout, const float *weight, int n,
                                          int c, int f, float *scratch)
{
    float *dx = scratch, *dy = scratch + (size_t)c * 64;

    for (int s0 = 0; s0 < n; s0 += 16) {
        const int nb = n - s0 < 16 ? n - s0 : 16;
        to_lanes(dy, dout + (size_t)s0 * f * 4, nb, (size_t)f * 4);
        int c0 = 0;
        for (; c0 + 4 <= c; c0 += 4)
            din_channels(dx, dy, weight, c, f, c0, 4);
        for (; c0 < c; c0++)
            din_channels(dx, dy, weight, c, f, c0, 1);
        for (int j = 0; j < nb; j++) {
            float *dst = din + (size_t)(s0 + j) * c * 4;
            for (size_t k = 0; k < (size_t)c * 4; k++)
                dst[k] += dx[k * 16 + j];
        }
    }
}

void nl_conv_plane2(float *out, const float *in, const float *weight, const float *bias, int n,
                    int c, int f, float *scratch)
{
    if (nl_kernels_vector_on())
        conv_plane2_avx512(out, in, weight, bias, n, c, f, scratch);
    else
        nl_conv_plane2_naive(out, in, weight, bias, n, c, f);
}

void nl_conv_plane2_din(float *din, const float *dout, const float *weight, int n, int c, int f,
                        float *scratch)
{
    if (nl_kernels_vector_on())
        conv_plane2_din_avx512(din, dout, weight, n, c, f, scratch);
    else
        nl_conv_plane2_din_naive(din, dout, weight, n, c, f);
}

/* ---- the weight gradient, channels in lanes ----
 *
 * dweight[fo, ci, t] sums dy[fo, o] * x[ci, i] over the images and the 1 (corner), 2 (edge) or 4
 * (centre) pairs (o, i) of tap t. With 16 channels of xt in a vector per input pixel, an image
 * gives each of a filter's 9 tap accumulators its pairs' fused multiply-adds from 4 loads and 4
 * broadcasts of dy: 16 per filter per image, two filters at a time (18 accumulators). The block
 * of 16 channels of xt, 256 bytes per image, stays in the L1 cache while every filter walks it.
 * At the end the 9 x 16 accumulators are turned into the 144 consecutive floats of
 * dweight[fo, c0 .. c0 + 15, 0 .. 8] through a small buffer (one gather per output vector). */

void nl_conv_lanes_turn(float *xt, const float *in, int n, int c, int pixels)
{
    const size_t image = (size_t)c * pixels;

    for (int s = 0; s < n; s++) {
        const float *src = in + (size_t)s * image;
        float *dst = xt + (size_t)s * image;
        for (int ci = 0; ci < c; ci++)
            for (int i = 0; i < pixels; i++)
                dst[(size_t)i * c + ci] = src[(size_t)ci * pixels + i];
    }
}

/* The lanes weight gradients' naive twin: dweight[fo - f0, ci, t] (dweight at row f0) += the sum in
 * double over the images and the 2x2 output pixels o of dy[fo, o] times input pixel in_of[o * 9 +
 * t] of the image (pixels of them, turned channel-minor in xt), where that is not -1 (the padding).
 */
static void lanes_dweight_naive(float *dweight, const float *dy, size_t ld, const float *xt, int n,
                                int c, int f0, int f1, const int *in_of, int pixels)
{
    for (int fo = f0; fo < f1; fo++)
        for (int ci = 0; ci < c; ci++)
            for (int t = 0; t < 9; t++) {
                double sum = 0.0;
                for (int s = 0; s < n; s++)
                    for (int o = 0; o < 4; o++)
                        if (in_of[o * 9 + t] >= 0)
                            sum += (double)dy[(size_t)fo * ld + (size_t)s * 4 + o] *
                                   xt[((size_t)s * pixels + in_of[o * 9 + t]) * c + ci];
                dweight[((size_t)(fo - f0) * c + ci) * 9 + t] += (float)sum;
            }
}

void nl_conv_plane2_dweight_naive(float *dweight, const float *dy, size_t ld, const float *xt,
                                  int n, int c, int f0, int f1)
{
    int in_of[4][9];

    for (int o = 0; o < 4; o++) {
        for (int t = 0; t < 9; t++)
            in_of[o][t] = -1;
        for (int i = 0; i < 4; i++)
            in_of[o][TAP[o][i]] = i;
    }
    lanes_dweight_naive(dweight + (size_t)f0 * c * 9, dy, ld, xt, n, c, f0, f1, &in_of[0][0], 4);
}

/* TURN[j][e]: where float 16j + e of a block's 144 (channel-major, 9 taps each) lies in the
 * buffer of 9 tap vectors of 16 channels: tap (16j + e) % 9, channel (16j + e) / 9. */
static const int TURN[9][16] __attribute__((aligned(64))) = {
#define T_(q) (((q) % 9) * 16 + (q) / 9)
#define ROW_(j)                                                                                    \
    {                                                                                              \
        T_(16 * j + 0), T_(16 * j + 1), T_(16 * j + 2), T_(16 * j + 3), T_(16 * j + 4),            \
            T_(16 * j + 5), T_(16 * j + 6), T_(16 * j + 7), T_(16 * j + 8), T_(16 * j + 9),        \
            T_(16 * j + 10), T_(16 * j + 11), T_(16 * j + 12), T_(16 * j + 13), T_(16 * j + 14),   \
            T_(16 * j + 15)                                                                        \
    }
    ROW_(0), ROW_(1), ROW_(2), ROW_(3), ROW_(4),
    ROW_(5), ROW_(6), ROW_(7), ROW_(8)
#undef ROW_
#undef T_
};

/* One image's 16 pairs into a filter's nine tap accumulators t0 .. t8 (TAP's rows in order),
 * from its four output pixels' gradients d[0 .. 3] and its input pixels' vectors, loaded through
 * LD_(i). */
#define PAIRS_(t, d)                                                                               \
    do {                                                                                           \
        const __m512 d0_ = _mm512_set1_ps((d)[0]), d1_ = _mm512_set1_ps((d)[1]);                   \
        const __m512 d2_ = _mm512_set1_ps((d)[2]), d3_ = _mm512_set1_ps((d)[3]);                   \
        t[4] = _mm512_fmadd_ps(d0_, LD_(0), t[4]);                                                 \
        t[5] = _mm512_fmadd_ps(d0_, LD_(1), t[5]);                                                 \
        t[7] = _mm512_fmadd_ps(d0_, LD_(2), t[7]);                                                 \
        t[8] = _mm512_fmadd_ps(d0_, LD_(3), t[8]);                                                 \
        t[3] = _mm512_fmadd_ps(d1_, LD_(0), t[3]);                                                 \
        t[4] = _mm512_fmadd_ps(d1_, LD_(1), t[4]);                                                 \
        t[6] = _mm512_fmadd_ps(d1_, LD_(2), t[6]);                                                 \
        t[7] = _mm512_fmadd_ps(d1_, LD_(3), t[7]);                                                 \
        t[1] = _mm512_fmadd_ps(d2_, LD_(0), t[1]);                                                 \
        t[2] = _mm512_fmadd_ps(d2_, LD_(1), t[2]);                                                 \
        t[4] = _mm512_fmadd_ps(d2_, LD_(2), t[4]);                                                 \
        t[5] = _mm512_fmadd_ps(d2_, LD_(3), t[5]);                                                 \
        t[0] = _mm512_fmadd_ps(d3_, LD_(0), t[0]);                                                 \
        t[1] = _mm512_fmadd_ps(d3_, LD_(1), t[1]);                                                 \
        t[3] = _mm512_fmadd_ps(d3_, LD_(2), t[3]);                                                 \
        t[4] = _mm512_fmadd_ps(d3_, LD_(3), t[4]);                                                 \
    } while (0)

/* The nine tap vectors t of filter row dst (channels c0 .. c0 + cb - 1 at dst) added to it. */
AVX512 static inline __attribute__((always_inline)) void dweight_put(float *dst, const __m512 *t,
                                                                     int cb, const int add)
{
    float buf[9 * 16] __attribute__((aligned(64)));

    for (int k = 0; k < 9; k++)
        _mm512_store_ps(buf + k * 16, t[k]);
    if (cb == 16) {
        for (int j = 0; j < 9; j++) {
            const __m512i at = _mm512_load_si512((const void *)TURN[j]);
            const __m512 v = _mm512_i32gather_ps(at, buf, 4);
            _mm512_storeu_ps(dst + j * 16,
                             add ? _mm512_add_ps(_mm512_loadu_ps(dst + j * 16), v) : v);
        }
    } else {
        for (int l = 0; l < cb; l++)
            for (int k = 0; k < 9; k++)
                dst[l * 9 + k] = add ? dst[l * 9 + k] + buf[k * 16 + l] : buf[k * 16 + l];
    }
}

/* ---- 3x3 stride 2, padding 1, images in lanes ----
 *
 * ResNet-18's downsampling convolutions at 64x64 inputs, layer3.0.conv1 (8x8 -> 4x4) and
 * layer4.0.conv1 (4x4 -> 2x2), go through SHARD's im2col and one GEMM at 80-90 GFLOP/s: the
 * products are short (P = 16 and 4 per image), and of the terms per channel pair 11 of 36 on a
 * 2x2 output read the padding (23 of 144 on a 4x4). Here the input of a block of 16 images is
 * turned into x (c, h + 2, w + 2, 16), zero-padded, each pixel the 16 images' values; an output
 * tile of 16 vectors (one filter's 4x4 plane, or four filters' 2x2 planes) is held in registers
 * while the taps of a chunk of channels (their planes of x in the L1 cache) are walked, and the
 * taps that read the top or left padding are left out. Partial sums go through y (f, oh*ow, 16)
 * between chunks. Each output sums its terms chunk after chunk, channel after channel, taps in
 * row-major order, in fused multiply-adds; the naive twin sums the same terms in the same order
 * in double, so the two agree to rounding. 8x8 outputs (layer2.0.conv1, tiles of 2 rows of 8)
 * ran slower than SHARD, so they stay there. The gradients are SHARD's, but on a 4x4 input those
 * of the kernels at the end of this file. */

size_t nl_conv_s2_lanes_scratch(int c, int h, int w, int f)
{
    const int oh = (h - 1) / 2 + 1, ow = (w - 1) / 2 + 1;
    return ((size_t)c * (h + 2) * (w + 2) + (size_t)f * oh * ow) * 16;
}

int nl_conv_s2_lanes_fits(int h, int w)
{
    const int oh = (h - 1) / 2 + 1, ow = (w - 1) / 2 + 1;
    return oh == ow && (ow == 2 || ow == 4);
}

void nl_conv_s2_lanes_naive(float *out, const float *in, const float *weight, const float *bias,
                            int n, int c, int h, int w, int f)
{
    const int oh = (h - 1) / 2 + 1, ow = (w - 1) / 2 + 1;

    for (int s = 0; s < n; s++)
        for (int fo = 0; fo < f; fo++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    double sum = 0.0;
                    for (int ci = 0; ci < c; ci++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                const int iy = 2 * oy - 1 + ky, ix = 2 * ox - 1 + kx;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                                    continue;
                                sum += (double)weight[((size_t)fo * c + ci) * 9 + ky * 3 + kx] *
                                       in[(((size_t)s * c + ci) * h + iy) * w + ix];
                            }
                    out[(((size_t)s * f + fo) * oh + oy) * ow + ox] =
                        (float)sum + (bias ? bias[fo] : 0.0f);
                }
}

/* y's tile of tr x tw outputs (rows from ty, all ow = tw columns) of fb filters from f0, over
 * the channels [c0, c1) of x (hp x wp planes, 16 lanes); first: from 0 rather than from y.
 * fb * tr * tw is at most 16, the registers that hold the tile. */
AVX512 static inline __attribute__((always_inline)) void
s2_tile(float *y, const float *x, const float *weight, int c, int c0, int c1, int hp, int wp,
        int f0, int ty, int first, const int fb, const int tr, const int tw)
{
    const int t = tr * tw, p = tw * tw;
    __m512 acc[16];

    for (int a = 0; a < fb; a++)
        for (int q = 0; q < t; q++)
            acc[a * t + q] = first ? _mm512_setzero_ps()
                                   : _mm512_loadu_ps(y + ((size_t)(f0 + a) * p + ty * tw + q) * 16);
    for (int ci = c0; ci < c1 && fb > 1; ci++) {
        /* several filters of a 2x2 tile: each tap's 4 input vectors loaded once for all */
        const float *xc = x + (size_t)ci * hp * wp * 16;
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
                __m512 xv[4];
                for (int q = 0; q < t; q++)
                    xv[q] = _mm512_loadu_ps(
                        xc + ((size_t)(2 * (ty + q / tw) + ky) * wp + 2 * (q % tw) + kx) * 16);
                for (int a = 0; a < fb; a++) {
                    const __m512 wv =
                        _mm512_set1_ps(weight[((size_t)(f0 + a) * c + ci) * 9 + ky * 3 + kx]);
                    for (int q = 0; q < t; q++)
                        if (2 * (ty + q / tw) + ky > 0 && 2 * (q % tw) + kx > 0)
                            acc[a * t + q] = _mm512_fmadd_ps(wv, xv[q], acc[a * t + q]);
                }
            }
    }
    for (int ci = c0; ci < c1 && fb == 1; ci++) {
        /* one filter's tile of 16: each multiply-add reads its input vector from the chunk */
        const float *xc = x + (size_t)ci * hp * wp * 16;
        const float *wk = weight + ((size_t)f0 * c + ci) * 9;
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
                const __m512 wv = _mm512_set1_ps(wk[ky * 3 + kx]);
                for (int r = 0; r < tr; r++) {
                    const float *row = xc + ((size_t)(2 * (ty + r) + ky) * wp + kx) * 16;
                    for (int q = 0; q < tw; q++)
                        if (2 * (ty + r) + ky > 0 && 2 * q + kx > 0) /* not the padding */
                            acc[r * tw + q] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(row + 2 * q * 16),
                                                              acc[r * tw + q]);
                }
            }
    }
    for (int a = 0; a < fb; a++)
        for (int q = 0; q < t; q++)
            _mm512_storeu_ps(y + ((size_t)(f0 + a) * p + ty * tw + q) * 16, acc[a * t + q]);
}

/* y (f, ow*ow, 16) over the channels [c0, c1). */
AVX512 static void s2_chunk(float *y, const float *x, const float *weight, int c, int c0, int c1,
                            int hp, int wp, int f, int ow)
{
    const int first = c0 == 0;

    if (ow == 4) {
        for (int fo = 0; fo < f; fo++)
            s2_tile(y, x, weight, c, c0, c1, hp, wp, fo, 0, first, 1, 4, 4);
    } else {
        int fo = 0;
        for (; fo + 4 <= f; fo += 4)
            s2_tile(y, x, weight, c, c0, c1, hp, wp, fo, 0, first, 4, 2, 2);
        for (; fo < f; fo++)
            s2_tile(y, x, weight, c, c0, c1, hp, wp, fo, 0, first, 1, 2, 2);
    }
}

AVX512 static void conv_s2_lanes_avx512(float *out, const float *in, const float *weight,
                                        const float *bias, int n, int c, int h, int w, int f,
                                        float *scratch)
{
    const int ow = (w - 1) / 2 + 1, p = ow * ow, hp = h + 2, wp = w + 2;
    const size_t in_size = (size_t)c * h * w, out_size = (size_t)f * p;
    const size_t plane = (size_t)hp * wp * 16;
    /* channels per chunk: their padded planes in 32 KiB, the L1 cache */
    const int cc = plane * sizeof(float) < 32768 ? (int)(32768 / (plane * sizeof(float))) : 1;
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    float *x = scratch, *y = scratch + (size_t)c * plane;

    for (int s0 = 0; s0 < n; s0 += 16) {
        const int nb = n - s0 < 16 ? n - s0 : 16;
        const __mmask16 m = lanes(0, nb);
        const __m512i in_at = _mm512_mullo_epi32(iota, _mm512_set1_epi32((int)in_size));
        const __m512i out_at = _mm512_mullo_epi32(iota, _mm512_set1_epi32((int)out_size));
        const float *src = in + (size_t)s0 * in_size;
        memset(x, 0, (size_t)c * plane * sizeof *x);
        for (int ci = 0; ci < c; ci++)
            for (int iy = 0; iy < h; iy++)
                for (int ix = 0; ix < w; ix++) {
                    const float *at = src + ((size_t)ci * h + iy) * w + ix;
                    _mm512_storeu_ps(
                        x + (size_t)ci * plane + ((size_t)(iy + 1) * wp + ix + 1) * 16,
                        _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, in_at, at, 4));
                }
        for (int c0 = 0; c0 < c; c0 += cc)
            s2_chunk(y, x, weight, c, c0, c0 + cc < c ? c0 + cc : c, hp, wp, f, ow);
        float *dst = out + (size_t)s0 * out_size;
        for (int fo = 0; fo < f; fo++) {
            const __m512 b = _mm512_set1_ps(bias ? bias[fo] : 0.0f);
            for (int q = 0; q < p; q++) {
                const __m512 v = _mm512_loadu_ps(y + ((size_t)fo * p + q) * 16);
                _mm512_mask_i32scatter_ps(dst + (size_t)fo * p + q, m, out_at,
                                          bias ? _mm512_add_ps(v, b) : v, 4);
            }
        }
    }
}

void nl_conv_s2_lanes(float *out, const float *in, const float *weight, const float *bias, int n,
                      int c, int h, int w, int f, float *scratch)
{
    if (nl_kernels_vector_on() && nl_conv_s2_lanes_fits(h, w))
        conv_s2_lanes_avx512(out, in, weight, bias, n, c, h, w, f, scratch);
    else
        nl_conv_s2_lanes_naive(out, in, weight, bias, n, c, h, w, f);
}

/* ---- 3x3 stride 2, padding 1, 4x4 to 2x2: the gradients ----
 *
 * Output pixel o = (oy, ox) reads input pixel (2oy - 1 + ky, 2ox - 1 + kx) through tap (ky, kx):
 * output (0, 0) through the 4 taps of rows and columns 1 and 2, (0, 1) and (1, 0) through 6, and
 * (1, 1) through all 9; the 11 others read the top and left padding. S2I[o][t] is the input pixel
 * (row-major in the 4x4 plane) of output o through tap t, or -1. */
static const int S2I[4][9] = {{-1, -1, -1, -1, 0, 1, -1, 4, 5},
                              {-1, -1, -1, 1, 2, 3, 5, 6, 7},
                              {-1, 4, 5, -1, 8, 9, -1, 12, 13},
                              {5, 6, 7, 9, 10, 11, 13, 14, 15}};

int nl_conv_s2_lanes_grad_fits(int h, int w)
{
    return h == 4 && w == 4;
}

void nl_conv_s2_lanes_dweight_naive(float *dweight, const float *dy, size_t ld, const float *xt,
                                    int n, int c, int f0, int f1)
{
    lanes_dweight_naive(dweight + (size_t)f0 * c * 9, dy, ld, xt, n, c, f0, f1, &S2I[0][0], 16);
}

void nl_conv_s2_lanes_din_naive(float *din, const float *dout, const float *weight, int n, int c,
                                int f)
{
    for (int s = 0; s < n; s++)
        for (int ci = 0; ci < c; ci++)
            for (int i = 0; i < 16; i++) {
                double sum = 0.0;
                for (int fo = 0; fo < f; fo++)
                    for (int o = 0; o < 4; o++)
                        for (int t = 0; t < 9; t++)
                            if (S2I[o][t] == i)
                                sum += (double)weight[((size_t)fo * c + ci) * 9 + t] *
                                       dout[((size_t)s * f + fo) * 4 + o];
                din[((size_t)s * c + ci) * 16 + i] += (float)sum;
            }
}

/* One image's 25 pairs into a filter's tap accumulators t from its output gradients d[0 .. 3]
 * and the image's 16 input pixels' vectors, loaded through LD_(i). */
#define S2PAIRS_(t, d)                                                                             \
    do {                                                                                           \
        const __m512 d0_ = _mm512_set1_ps((d)[0]), d1_ = _mm512_set1_ps((d)[1]);                   \
        const __m512 d2_ = _mm512_set1_ps((d)[2]), d3_ = _mm512_set1_ps((d)[3]);                   \
        t[4] = _mm512_fmadd_ps(d0_, LD_(0), t[4]);                                                 \
        t[5] = _mm512_fmadd_ps(d0_, LD_(1), t[5]);                                                 \
        t[7] = _mm512_fmadd_ps(d0_, LD_(4), t[7]);                                                 \
        t[8] = _mm512_fmadd_ps(d0_, LD_(5), t[8]);                                                 \
        t[3] = _mm512_fmadd_ps(d1_, LD_(1), t[3]);                                                 \
        t[4] = _mm512_fmadd_ps(d1_, LD_(2), t[4]);                                                 \
        t[5] = _mm512_fmadd_ps(d1_, LD_(3), t[5]);                                                 \
        t[6] = _mm512_fmadd_ps(d1_, LD_(5), t[6]);                                                 \
        t[7] = _mm512_fmadd_ps(d1_, LD_(6), t[7]);                                                 \
        t[8] = _mm512_fmadd_ps(d1_, LD_(7), t[8]);                                                 \
        t[1] = _mm512_fmadd_ps(d2_, LD_(4), t[1]);                                                 \
        t[2] = _mm512_fmadd_ps(d2_, LD_(5), t[2]);                                                 \
        t[4] = _mm512_fmadd_ps(d2_, LD_(8), t[4]);                                                 \
        t[5] = _mm512_fmadd_ps(d2_, LD_(9), t[5]);                                                 \
        t[7] = _mm512_fmadd_ps(d2_, LD_(12), t[7]);                                                \
        t[8] = _mm512_fmadd_ps(d2_, LD_(13), t[8]);                                                \
        t[0] = _mm512_fmadd_ps(d3_, LD_(5), t[0]);                                                 \
        t[1] = _mm512_fmadd_ps(d3_, LD_(6), t[1]);                                                 \
        t[2] = _mm512_fmadd_ps(d3_, LD_(7), t[2]);                                                 \
        t[3] = _mm512_fmadd_ps(d3_, LD_(9), t[3]);                                                 \
        t[4] = _mm512_fmadd_ps(d3_, LD_(10), t[4]);                                                \
        t[5] = _mm512_fmadd_ps(d3_, LD_(11), t[5]);                                                \
        t[6] = _mm512_fmadd_ps(d3_, LD_(13), t[6]);                                                \
        t[7] = _mm512_fmadd_ps(d3_, LD_(14), t[7]);                                                \
        t[8] = _mm512_fmadd_ps(d3_, LD_(15), t[8]);                                                \
    } while (0)

/* The sums over n images of rows f0 and, with two, f0 + 1 of a weight gradient into a and b
 * (nine tap vectors each), from dy's rows at da; channels c0 .. c0 + cb - 1 (m their lanes):
 * PLANE2's 16 pairs (s2 0, images of 4 pixels) or the stride-2 lanes' 25 (s2 1, images of 16). */
AVX512 static inline __attribute__((always_inline)) void
dweight_sums(__m512 *a, __m512 *b, const float *da, size_t ld, const float *xt, int n, int c,
             int c0, __mmask16 m, const int two, const int s2)
{
    for (int k = 0; k < 9; k++)
        a[k] = b[k] = _mm512_setzero_ps();
    const float *db = da + ld;
    for (int s = 0; s < n; s++) {
        const float *xs = xt + (size_t)s * (s2 ? 16 : 4) * c + c0;
#define LD_(i) _mm512_maskz_loadu_ps(m, xs + (size_t)(i)*c)
        if (s2) {
            S2PAIRS_(a, da + (size_t)s * 4);
            if (two)
                S2PAIRS_(b, db + (size_t)s * 4);
        } else {
            PAIRS_(a, da + (size_t)s * 4);
            if (two)
                PAIRS_(b, db + (size_t)s * 4);
        }
#undef LD_
    }
}

/* Rows f0 and, with two, f0 + 1 of a weight gradient, at wa (row f0's start; row f0 + 1 c * 9
 * floats on), dweight_sums's added to them. */
AVX512 static inline __attribute__((always_inline)) void
dweight_block(float *wa, const float *da, size_t ld, const float *xt, int n, int c, int c0, int cb,
              __mmask16 m, const int two, const int s2)
{
    __m512 a[9], b[9];

    dweight_sums(a, b, da, ld, xt, n, c, c0, m, two, s2);
    dweight_put(wa + (size_t)c0 * 9, a, cb, 1);
    if (two)
        dweight_put(wa + ((size_t)c + c0) * 9, b, cb, 1);
}

/* nl_conv_lanes_dweight_rows's block: the parts' sums added in registers, 0 + p_0 + p_1 + ...
 * (never -0, so that storing it is adding it to zeros), then turned and stored once: the turn
 * (a gather of each output vector) costs as much as the multiply-adds of some 16 images. */
AVX512 static inline __attribute__((always_inline)) void
dweight_parts(float *wa, const struct nl_lanes_parts *p, int fo, int c, int c0, int cb, __mmask16 m,
              const int two, const int s2)
{
    __m512 a[9], b[9], sa[9], sb[9];

    for (int k = 0; k < 9; k++)
        sa[k] = sb[k] = _mm512_setzero_ps();
    for (int t = 0; t < p->parts; t++) {
        const size_t ld = (size_t)p->ld[t];
        dweight_sums(a, b, p->dy[t] + (size_t)fo * ld, ld, p->xt[t], p->ld[t] / 4, c, c0, m, two,
                     s2);
        for (int k = 0; k < 9; k++) {
            sa[k] = _mm512_add_ps(sa[k], a[k]);
            if (two)
                sb[k] = _mm512_add_ps(sb[k], b[k]);
        }
    }
    dweight_put(wa + (size_t)c0 * 9, sa, cb, 0);
    if (two)
        dweight_put(wa + ((size_t)c + c0) * 9, sb, cb, 0);
}
#undef S2PAIRS_
#undef PAIRS_

/* The weight gradient's blocks of 16 channels by two filters: PLANE2's (s2 0) or the stride-2
 * lanes' on a 4x4 input (s2 1). */
AVX512 static void lanes_dweight_avx512(float *dweight, const float *dy, size_t ld, const float *xt,
                                        int n, int c, int f0, int f1, int s2)
{
    for (int c0 = 0; c0 < c; c0 += 16) {
        const int cb = c - c0 < 16 ? c - c0 : 16;
        const __mmask16 m = lanes(0, cb);
        for (int fo = f0; fo < f1; fo += 2) {
            float *wa = dweight + (size_t)fo * c * 9;
            const float *da = dy + (size_t)fo * ld;
            const int two = fo + 2 <= f1;
            if (s2 && two)
                dweight_block(wa, da, ld, xt, n, c, c0, cb, m, 1, 1);
            else if (s2)
                dweight_block(wa, da, ld, xt, n, c, c0, cb, m, 0, 1);
            else if (two)
                dweight_block(wa, da, ld, xt, n, c, c0, cb, m, 1, 0);
            else
                dweight_block(wa, da, ld, xt, n, c, c0, cb, m, 0, 0);
        }
    }
}

/* nl_conv_lanes_dweight_rows by two rows, into buf. */
AVX512 static void lanes_rows_avx512(const struct nl_lanes_parts *p, int c, int f0, int f1, int s2,
                                     float *buf,
                                     void (*put)(void *ud, int fo, int rows, const float *g),
                                     void *ud)
{
    for (int fo = f0; fo < f1; fo += 2) {
        const int rows = fo + 2 <= f1 ? 2 : 1;
        for (int c0 = 0; c0 < c; c0 += 16) {
            const int cb = c - c0 < 16 ? c - c0 : 16;
            const __mmask16 m = lanes(0, cb);
            if (s2 && rows == 2)
                dweight_parts(buf, p, fo, c, c0, cb, m, 1, 1);
            else if (s2)
                dweight_parts(buf, p, fo, c, c0, cb, m, 0, 1);
            else if (rows == 2)
                dweight_parts(buf, p, fo, c, c0, cb, m, 1, 0);
            else
                dweight_parts(buf, p, fo, c, c0, cb, m, 0, 0);
        }
        put(ud, fo, rows, buf);
    }
}

void nl_conv_plane2_dweight(float *dweight, const float *dy, size_t ld, const float *xt, int n,
                            int c, int f0, int f1)
{
    if (nl_kernels_vector_on())
        lanes_dweight_avx512(dweight, dy, ld, xt, n, c, f0, f1, 0);
    else
        nl_conv_plane2_dweight_naive(dweight, dy, ld, xt, n, c, f0, f1);
}

void nl_conv_s2_lanes_dweight(float *dweight, const float *dy, size_t ld, const float *xt, int n,
                              int c, int f0, int f1)
{
    if (nl_kernels_vector_on())
        lanes_dweight_avx512(dweight, dy, ld, xt, n, c, f0, f1, 1);
    else
        nl_conv_s2_lanes_dweight_naive(dweight, dy, ld, xt, n, c, f0, f1);
}

void nl_conv_lanes_dweight_rows(const struct nl_lanes_parts *p, int c, int f0, int f1, int s2,
                                float *buf, void (*put)(void *ud, int fo, int rows, const float *g),
                                void *ud)
{
    if (nl_kernels_vector_on()) {
        lanes_rows_avx512(p, c, f0, f1, s2, buf, put, ud);
        return;
    }
    nl_conv_lanes_dweight_rows_naive(p, c, f0, f1, s2, buf, put, ud);
}

void nl_conv_lanes_dweight_rows_naive(const struct nl_lanes_parts *p, int c, int f0, int f1, int s2,
                                      float *buf,
                                      void (*put)(void *ud, int fo, int rows, const float *g),
                                      void *ud)
{
    for (int fo = f0; fo < f1; fo += 2) {
        const int rows = fo + 2 <= f1 ? 2 : 1;
        memset(buf, 0, (size_t)rows * c * 9 * sizeof *buf);
        for (int t = 0; t < p->parts; t++) {
            const size_t ld = (size_t)p->ld[t];
            const int n = p->ld[t] / 4;
            if (s2)
                nl_conv_s2_lanes_dweight_naive(buf, p->dy[t] + (size_t)fo * ld, ld, p->xt[t], n, c,
                                               0, rows);
            else
                nl_conv_plane2_dweight_naive(buf, p->dy[t] + (size_t)fo * ld, ld, p->xt[t], n, c, 0,
                                             rows);
        }
        put(ud, fo, rows, buf);
    }
}

size_t nl_conv_s2_lanes_din_scratch(int c, int f)
{
    (void)c;
    return ((size_t)f * 4 + 16) * 16;
}

/* dx (16, 16) of input channel ci: its 16 pixels' gradients for the block's images, from dy
 * (f, 4, 16), each pixel's terms filter after filter, output pixels in row-major order. */
AVX512 static void s2_din_channel(float *dx, const float *dy, const float *weight, int c, int f,
                                  int ci)
{
    __m512 x[16];

    for (int i = 0; i < 16; i++)
        x[i] = _mm512_setzero_ps();
    for (int fo = 0; fo < f; fo++) {
        const float *w = weight + ((size_t)fo * c + ci) * 9;
        const __m512 d0 = _mm512_loadu_ps(dy + (size_t)fo * 64);
        const __m512 d1 = _mm512_loadu_ps(dy + (size_t)fo * 64 + 16);
        const __m512 d2 = _mm512_loadu_ps(dy + (size_t)fo * 64 + 32);
        const __m512 d3 = _mm512_loadu_ps(dy + (size_t)fo * 64 + 48);
        if (fo + 8 < f)
            _mm_prefetch((const char *)(w + (size_t)8 * c * 9), _MM_HINT_T0);
        const __m512 w0 = _mm512_set1_ps(w[0]), w1 = _mm512_set1_ps(w[1]);
        const __m512 w2 = _mm512_set1_ps(w[2]), w3 = _mm512_set1_ps(w[3]);
        const __m512 w4 = _mm512_set1_ps(w[4]), w5 = _mm512_set1_ps(w[5]);
        const __m512 w6 = _mm512_set1_ps(w[6]), w7 = _mm512_set1_ps(w[7]);
        const __m512 w8 = _mm512_set1_ps(w[8]);
        /* output (0, 0) */
        x[0] = _mm512_fmadd_ps(w4, d0, x[0]);
        x[1] = _mm512_fmadd_ps(w5, d0, x[1]);
        x[4] = _mm512_fmadd_ps(w7, d0, x[4]);
        x[5] = _mm512_fmadd_ps(w8, d0, x[5]);
        /* output (0, 1) */
        x[1] = _mm512_fmadd_ps(w3, d1, x[1]);
        x[2] = _mm512_fmadd_ps(w4, d1, x[2]);
        x[3] = _mm512_fmadd_ps(w5, d1, x[3]);
        x[5] = _mm512_fmadd_ps(w6, d1, x[5]);
        x[6] = _mm512_fmadd_ps(w7, d1, x[6]);
        x[7] = _mm512_fmadd_ps(w8, d1, x[7]);
        /* output (1, 0) */
        x[4] = _mm512_fmadd_ps(w1, d2, x[4]);
        x[5] = _mm512_fmadd_ps(w2, d2, x[5]);
        x[8] = _mm512_fmadd_ps(w4, d2, x[8]);
        x[9] = _mm512_fmadd_ps(w5, d2, x[9]);
        x[12] = _mm512_fmadd_ps(w7, d2, x[12]);
        x[13] = _mm512_fmadd_ps(w8, d2, x[13]);
        /* output (1, 1) */
        x[5] = _mm512_fmadd_ps(w0, d3, x[5]);
        x[6] = _mm512_fmadd_ps(w1, d3, x[6]);
        x[7] = _mm512_fmadd_ps(w2, d3, x[7]);
        x[9] = _mm512_fmadd_ps(w3, d3, x[9]);
        x[10] = _mm512_fmadd_ps(w4, d3, x[10]);
        x[11] = _mm512_fmadd_ps(w5, d3, x[11]);
        x[13] = _mm512_fmadd_ps(w6, d3, x[13]);
        x[14] = _mm512_fmadd_ps(w7, d3, x[14]);
        x[15] = _mm512_fmadd_ps(w8, d3, x[15]);
    }
    for (int i = 0; i < 16; i++)
        _mm512_storeu_ps(dx + (size_t)i * 16, x[i]);
}

AVX512 static void conv_s2_lanes_din_avx512(float *din, const float *dout, const float *weight,
                                            int n, int c, int f, float *scratch)
{
    float *dy = scratch, *dx = scratch + (size_t)f * 64;

    for (int s0 = 0; s0 < n; s0 += 16) {
        const int nb = n - s0 < 16 ? n - s0 : 16;
        to_lanes(dy, dout + (size_t)s0 * f * 4, nb, (size_t)f * 4);
        for (int ci = 0; ci < c; ci++) {
            s2_din_channel(dx, dy, weight, c, f, ci);
            for (int j = 0; j < nb; j++) {
                float *dst = din + ((size_t)(s0 + j) * c + ci) * 16;
                for (int i = 0; i < 16; i++)
                    dst[i] += dx[i * 16 + j];
            }
        }
    }
}

void nl_conv_s2_lanes_din(float *din, const float *dout, const float *weight, int n, int c, int f,
                          float *scratch)
{
    if (nl_kernels_vector_on())
        conv_s2_lanes_din_avx512(din, dout, weight, n, c, f, scratch);
    else
        nl_conv_s2_lanes_din_naive(din, dout, weight, n, c, f);
}
