/* "maxpool" and "avgpool": a window slid over each channel on its own, as PyTorch's MaxPool2d
 * and AvgPool2d (floor mode). The stride defaults to the window; the padding may be at most half
 * the window. Max pooling never picks the padding; average pooling divides by the whole window,
 * padding included (PyTorch's count_include_pad=True).
 *
 *   in (n, C, H, W)    out (n, C, oh, ow)
 *   maxpool aux: per sample, one int32_t per output value, the index in the sample's input
 *   (c*H*W + y*W + x) of the value it copied. avgpool: no aux. No scratch, no parameters.
 * The 2x2 window of stride 2 has a branch-free loop here (in lenet's training it took 3% of the
 * time where the vector path of nl_maxpool took 8%); other windows go to nl_maxpool
 * (core/engine/kernels.c), in AVX-512 vectors where the CPU has them, with the same results.
 *
 * Max pooling takes in the ReLU or ReLU6 that alone reads it (ops->fuses, training; ops->folds,
 * inference; core/engine/model.c), as lenet's conv -> maxpool -> relu has it: forward writes
 * act(max) and backward masks dout where act's derivative, judged from that output, is 0, so the
 * activation's two passes over memory and its buffers are gone and the floats are the unfused
 * layers' bit for bit. Backward also overwrites din where it is its first writer (ops->overwrites):
 * each sample's input gradient is zeroed just before its scatter, while it is in cache, instead of
 * in one pass over the whole shard's before backward; where 2x2 windows tile the plane, in rows
 * of 12 and more, the vector path writes whole rows instead (no zeroing pass at all).
 *
 * The 2x2 window's forward runs in AVX-512 vectors where the CPU has them, 16 outputs at a time
 * from the even and odd columns of two rows (thread CPU time of 32 samples of lenet's pool1 with
 * its ReLU, 2026-11-27 at load average 6 to 8, so indicative: 79 us against 198 for the scalar
 * loop; pool2 55 against 72), with the scalar loop's values and indices (test_layers holds the
 * two paths against each other). Rows of at most 16 outputs go a vector a row with the masks made
 * once (maxpool_2x2_rows16_avx512), planes 8 wide 16 outputs from 64 consecutive floats
 * (maxpool_2x2_w8_avx512, backward too). */
#include <math.h>
#include <string.h>

#include "../simd.h"
#include "layers.h"
#include "nnlab/kernels.h"

static int pool_setup(struct nl_layer *l, struct nl_error *err)
{
    struct nl__window win;
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    rc = nl__window_setup(l, 1, &win, err);
    if (rc < 0)
        return rc;
    if (2 * win.ph > win.kh || 2 * win.pw > win.kw)
        return nl__layer_fail(l, err, "padding %dx%d is more than half the window %dx%d", win.ph,
                              win.pw, win.kh, win.kw);
    l->out = (struct nl_shape){win.c, win.oh, win.ow};
    return 0;
}

static int maxpool_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = pool_setup(l, err);

    if (rc < 0)
        return rc;
    l->aux_bytes = nl_shape_size(l->out) * sizeof(int32_t);
    return 0;
}

/* act (NL_ACT_*) of v as the activation layers compute it: 0 where v > 0 is false, NaN included. */
static inline float act_of(float v, int act)
{
    if (act == NL_ACT_NONE)
        return v;
    v = v > 0.0f ? v : 0.0f;
    return act == NL_ACT_RELU6 ? (v < 6.0f ? v : 6.0f) : v;
}

/* Whether act's derivative at its output y is 1 (else 0), as relu's and relu6's backward judge. */
static inline int act_passes(float y, int act)
{
    return act == NL_ACT_NONE || (y > 0.0f && (act == NL_ACT_RELU || y < 6.0f));
}

/* The rows [*y0, *y1) of a window starting at o*s - p that lie inside [0, size). */
static void clip(int *y0, int *y1, int o, int s, int p, int k, int size)
{
    int start = o * s - p;

    *y0 = start < 0 ? 0 : start;
    *y1 = start + k > size ? size : start + k;
}

/* The gradient of up to 16 outputs (mask m) for the backward of maxpool_2x2: dout, masked where
 * act's derivative at the output y is 0, plus 0.0f (the scalar path's 0.0f + gradient). */
AVX512 static inline __attribute__((always_inline)) __m512
pool_grad_avx512(const float *dout, const float *y, __mmask16 m, int act)
{
    const __m512 zero = _mm512_setzero_ps();
    __m512 g = _mm512_maskz_loadu_ps(m, dout);

    if (act != NL_ACT_NONE) {
        const __m512 v = _mm512_maskz_loadu_ps(m, y);
        __mmask16 pass = _mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ);
        if (act == NL_ACT_RELU6)
            pass &= _mm512_cmp_ps_mask(v, _mm512_set1_ps(6.0f), _CMP_LT_OQ);
        g = _mm512_maskz_mov_ps(pass, g);
    }
    return _mm512_add_ps(zero, g);
}

/* The choice of maxpool_2x2 over up to 16 windows (mask m) whose top-left, top-right,
 * bottom-left and bottom-right values are a, b, cc and d and whose top-left and bottom-left
 * inputs are at base and base_w: the scalar loop's comparisons and selections lane by lane (so
 * values and indices are the same), the value through act into out, its input into arg. */
AVX512 static inline __attribute__((always_inline)) void
maxpool_2x2_pick(float *out, int32_t *arg, __m512 a, __m512 b, __m512 cc, __m512 d, __m512i base,
                 __m512i base_w, __mmask16 m, int act)
{
    const __m512i one = _mm512_set1_epi32(1);
    const __mmask16 right_top = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ),
                    right_bottom = _mm512_cmp_ps_mask(d, cc, _CMP_GT_OQ);
    const __m512 top = _mm512_mask_blend_ps(right_top, a, b),
                 bottom = _mm512_mask_blend_ps(right_bottom, cc, d);
    const __mmask16 down = _mm512_cmp_ps_mask(bottom, top, _CMP_GT_OQ),
                    isnan = _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) |
                            _mm512_cmp_ps_mask(cc, d, _CMP_UNORD_Q);
    __m512 v = _mm512_mask_blend_ps(down, top, bottom);
    v = act_avx512(_mm512_mask_mov_ps(v, isnan, _mm512_set1_ps(NAN)), act);
    const __m512i i_top = _mm512_mask_add_epi32(base, right_top, base, one),
                  i_bottom = _mm512_mask_add_epi32(base_w, right_bottom, base_w, one);
    _mm512_mask_storeu_ps(out, m, v);
    _mm512_mask_storeu_epi32(arg, m, _mm512_mask_blend_epi32(down, i_top, i_bottom));
}

/* Up to 16 outputs of maxpool_2x2 in AVX-512 vectors: the two input rows r0 and r1 (from column
 * 2 ox; r0's offset in the sample is at) split into their even and odd columns (lo and hi mask
 * the row's 2k pixels, m its k outputs), then the scalar loop's comparisons and selections lane
 * by lane, so values and indices are the same. */
AVX512 static inline __attribute__((always_inline)) void
maxpool_2x2_vec(float *out, int32_t *arg, const float *r0, const float *r1, int at, int w,
                __mmask16 lo, __mmask16 hi, __mmask16 m, int act)
{
    const __m512i even =
                      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
                  odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __m512 t0 = _mm512_maskz_loadu_ps(lo, r0), t1 = _mm512_maskz_loadu_ps(hi, r0 + 16),
                 b0 = _mm512_maskz_loadu_ps(lo, r1), b1 = _mm512_maskz_loadu_ps(hi, r1 + 16);
    const __m512 a = _mm512_permutex2var_ps(t0, even, t1), b = _mm512_permutex2var_ps(t0, odd, t1);
    const __m512 cc = _mm512_permutex2var_ps(b0, even, b1), d = _mm512_permutex2var_ps(b0, odd, b1);
    /* at + right_top, or one row down: at + w + right_bottom */
    const __m512i base = _mm512_add_epi32(_mm512_set1_epi32(at), even);
    maxpool_2x2_pick(out, arg, a, b, cc, d, base, _mm512_add_epi32(base, _mm512_set1_epi32(w)), m,
                     act);
}

/* One output row of maxpool_2x2, 16 outputs at a time (r0 at offset row of the sample). */
AVX512 static void maxpool_2x2_row_avx512(float *out, int32_t *arg, const float *r0, int row, int w,
                                          int ow, int act)
{
    for (int ox = 0; ox < ow; ox += 16) {
        const int k = ow - ox < 16 ? ow - ox : 16;
        maxpool_2x2_vec(out + ox, arg + ox, r0 + 2 * ox, r0 + w + 2 * ox, row + 2 * ox, w,
                        lanes(0, 2 * k), lanes(0, 2 * k - 16), lanes(0, k), act);
    }
}

/* A sample's rows of at most 16 outputs (lenet's pool1: 20x24x24 to 20x12x12), one vector each,
 * the masks made once: where the row function's call and masks per row of 12 outputs took about
 * as long as its vector work. Thread CPU time of 32 samples of lenet's pool1 with its ReLU,
 * fastest of 9 x 200, alternating with the row function (2026-11-27 15:23 UTC, load average 7 to
 * 8, so indicative): 56.3 to 58.5 us against 72.0 to 82.1. */
AVX512 static void maxpool_2x2_rows16_avx512(float *out, int32_t *arg, const float *x, int rows,
                                             int w, int ow, int act)
{
    const __mmask16 lo = lanes(0, 2 * ow), hi = lanes(0, 2 * ow - 16), m = lanes(0, ow);

    /* input row pair i starts at 2 i w, whatever its channel, as the planes' heights are even */
    for (int i = 0; i < rows; i++, out += ow, arg += ow)
        maxpool_2x2_vec(out, arg, x + 2 * (size_t)i * w, x + (2 * (size_t)i + 1) * w, 2 * i * w, w,
                        lo, hi, m, act);
}

/* The input gradient of one output row of maxpool_2x2 where backward is its first writer and the
 * windows tile the plane: both input rows written whole, each window's maximum getting 0.0f +
 * its output's gradient (masked where act's derivative is 0) and the other three 0, which is
 * what zeroing and scattering give (0.0f + -0.0f is +0.0f), without a pass that zeroes. din and
 * arg's indices are the sample's; row is the offset of the window's top row. */
AVX512 static void maxpool_2x2_row_backward_avx512(float *din, const float *dout, const float *y,
                                                   const int32_t *arg, int row, int w, int ow,
                                                   int act)
{
    const __m512i even =
                      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
                  first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
                  second = _mm512_add_epi32(first, _mm512_set1_epi32(8)),
                  one = _mm512_set1_epi32(1), wv = _mm512_set1_epi32(w);

    for (int ox = 0; ox < ow; ox += 16) {
        const int k = ow - ox < 16 ? ow - ox : 16;
        const __mmask16 m = lanes(0, k), lo = lanes(0, 2 * k), hi = lanes(0, 2 * k - 16);
        const __m512 g = pool_grad_avx512(dout + ox, y + ox, m, act);
        const __m512i a = _mm512_maskz_loadu_epi32(m, arg + ox);
        const __m512i base = _mm512_add_epi32(_mm512_set1_epi32(row + 2 * ox), even);
        const __m512i below = _mm512_add_epi32(base, wv);
        const __m512 v00 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, base), g),
                     v01 = _mm512_maskz_mov_ps(
                         _mm512_cmpeq_epi32_mask(a, _mm512_add_epi32(base, one)), g),
                     v10 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, below), g),
                     v11 = _mm512_maskz_mov_ps(
                         _mm512_cmpeq_epi32_mask(a, _mm512_add_epi32(below, one)), g);
        float *d0 = din + row + 2 * ox, *d1 = d0 + w;
        _mm512_mask_storeu_ps(d0, lo, _mm512_permutex2var_ps(v00, first, v01));
        _mm512_mask_storeu_ps(d0 + 16, hi, _mm512_permutex2var_ps(v00, second, v01));
        _mm512_mask_storeu_ps(d1, lo, _mm512_permutex2var_ps(v10, first, v11));
        _mm512_mask_storeu_ps(d1 + 16, hi, _mm512_permutex2var_ps(v10, second, v11));
    }
}

/* maxpool_2x2 on planes 8 wide with even heights (lenet's pool2: 50x8x8 to 50x4x4), where
 * maxpool_2x2_row_avx512 would fill 4 lanes of 16: a sample's rows, in every channel, pair up
 * into runs of 16 floats, one output row of 4 each, so that 64 consecutive floats of the sample
 * give 16 consecutive outputs (count outputs in all, the last vector masked). Each of the four
 * corners of the 16 windows is two permutes of two vectors and a blend; then the row kernel's
 * comparisons and selections, so values and indices are the same. Thread CPU time of 32 samples
 * of lenet's pool2 with its ReLU, fastest of 9 x 200, alternating with the build before
 * (2026-11-27 15:13 UTC, load average 12, so indicative): forward 12.6 to 13.0 us against 58.8
 * to 60.9 by rows, backward as the first writer 13.6 to 14.0 against 31.5 to 32.2 for zeroing
 * and scattering. */
AVX512 static void maxpool_2x2_w8_avx512(float *out, int32_t *arg, const float *x, int count,
                                         int act)
{
    /* output lane o (its row of 4 o / 4, column o % 4) of a vector's 8 rows of 4: top left
     * pixel 16 (o / 4) + 2 (o % 4), of the first two input vectors for o < 8, else the other two */
    const __m512i corner =
        _mm512_setr_epi32(0, 2, 4, 6, 16, 18, 20, 22, 0, 2, 4, 6, 16, 18, 20, 22);
    const __m512i one = _mm512_set1_epi32(1), eight = _mm512_set1_epi32(8),
                  nine = _mm512_set1_epi32(9),
                  base0 =
                      _mm512_setr_epi32(0, 2, 4, 6, 16, 18, 20, 22, 32, 34, 36, 38, 48, 50, 52, 54);

    for (int o0 = 0; o0 < count; o0 += 16) {
        const int k = count - o0 < 16 ? count - o0 : 16;
        const __mmask16 m = lanes(0, k);
        const float *src = x + 4 * (size_t)o0;
        /* input vector t holds outputs [4t, 4t + 4): present where 4t < k */
        const __m512 v0 = _mm512_maskz_loadu_ps(lanes(0, 4 * k), src),
                     v1 = _mm512_maskz_loadu_ps(lanes(0, 4 * k - 16), src + 16),
                     v2 = _mm512_maskz_loadu_ps(lanes(0, 4 * k - 32), src + 32),
                     v3 = _mm512_maskz_loadu_ps(lanes(0, 4 * k - 48), src + 48);
        const __m512i ib = _mm512_add_epi32(corner, one), ic = _mm512_add_epi32(corner, eight),
                      id = _mm512_add_epi32(corner, nine);
        const __m512 a = _mm512_mask_blend_ps(0xff00, _mm512_permutex2var_ps(v0, corner, v1),
                                              _mm512_permutex2var_ps(v2, corner, v3)),
                     b = _mm512_mask_blend_ps(0xff00, _mm512_permutex2var_ps(v0, ib, v1),
                                              _mm512_permutex2var_ps(v2, ib, v3)),
                     cc = _mm512_mask_blend_ps(0xff00, _mm512_permutex2var_ps(v0, ic, v1),
                                               _mm512_permutex2var_ps(v2, ic, v3)),
                     d = _mm512_mask_blend_ps(0xff00, _mm512_permutex2var_ps(v0, id, v1),
                                              _mm512_permutex2var_ps(v2, id, v3));
        const __m512i base = _mm512_add_epi32(_mm512_set1_epi32(4 * o0), base0);
        maxpool_2x2_pick(out + o0, arg + o0, a, b, cc, d, base, _mm512_add_epi32(base, eight), m,
                         act);
    }
}

/* The input gradient of maxpool_2x2_w8_avx512 where backward is din's first writer: each input
 * vector (two rows of 8, one output row of 4) written whole, as
 * maxpool_2x2_row_backward_avx512 writes its rows: each window's maximum gets 0.0f + its output's
 * gradient (masked where act's derivative is 0), the other three 0. */
AVX512 static void maxpool_2x2_w8_backward_avx512(float *din, const float *dout, const float *y,
                                                  const int32_t *arg, int count, int act)
{
    /* input lane l of vector t: output 4t + (l % 8) / 2 of the 16 */
    const __m512i pick = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);

    for (int o0 = 0; o0 < count; o0 += 16) {
        const int k = count - o0 < 16 ? count - o0 : 16;
        const __mmask16 m = lanes(0, k);
        const __m512 g = pool_grad_avx512(dout + o0, y + o0, m, act);
        const __m512i a = _mm512_maskz_loadu_epi32(m, arg + o0);
        float *dst = din + 4 * (size_t)o0;
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m512i idx = _mm512_add_epi32(pick, _mm512_set1_epi32(4 * t));
            const __m512i at = _mm512_add_epi32(lane, _mm512_set1_epi32(4 * o0 + 16 * t));
            const __mmask16 hit = _mm512_cmpeq_epi32_mask(_mm512_permutexvar_epi32(idx, a), at);
            _mm512_mask_storeu_ps(dst + 16 * t, lanes(0, 4 * k - 16 * t),
                                  _mm512_maskz_mov_ps(hit, _mm512_permutexvar_ps(idx, g)));
        }
    }
}

/* The common 2x2 window with stride 2 and no padding, on one sample: the same choices as the
 * general scan below (the first maximum in row-major order wins, a NaN gives NaN), computed
 * without data-dependent branches, which random data mispredicts half the time. */
static void maxpool_2x2(const struct nl__window *g, const float *x, float *out, int32_t *arg,
                        int act)
{
    const int w = g->w, ow = g->ow; /* locals: arg might alias *g for all the compiler knows */
    const int vector = nl_kernels_vector_on();

    if (vector && w == 8 && g->h == 2 * g->oh) {
        maxpool_2x2_w8_avx512(out, arg, x, g->c * g->oh * ow, act);
        return;
    }
    if (vector && ow <= 16 && g->h == 2 * g->oh) {
        maxpool_2x2_rows16_avx512(out, arg, x, g->c * g->oh, w, ow, act);
        return;
    }

    for (int c = 0; c < g->c; c++) {
        for (int oy = 0; oy < g->oh; oy++) {
            const int row = (c * g->h + 2 * oy) * w;
            const float *r0 = x + row, *r1 = r0 + w;
            if (vector) {
                maxpool_2x2_row_avx512(out, arg, r0, row, w, ow, act);
                out += ow;
                arg += ow;
                continue;
            }
            for (int ox = 0; ox < ow; ox++) {
                float a = r0[2 * ox], b = r0[2 * ox + 1], cc = r1[2 * ox], d = r1[2 * ox + 1];
                int right_top = b > a, right_bottom = d > cc;
                float top = b > a ? b : a, bottom = d > cc ? d : cc;
                int down = bottom > top;
                int nan = (a != a) | (b != b) | (cc != cc) | (d != d);
                float m = bottom > top ? bottom : top;
                arg[ox] = row + 2 * ox + right_top + down * (w + right_bottom - right_top);
                out[ox] = act_of(nan ? NAN : m, act);
            }
            out += ow;
            arg += ow;
        }
    }
}

/* A part of a split call (nl_exec_forward_split: one image out of training) pools the channels
 * [c0, c1) of nl_block_range(C, 1, part, parts), their argmax offsets then moved to count from
 * the image's start as the whole call's do; a split call of more images runs whole on part 0. */
static void maxpool_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    struct nl__window g;
    nl__window_get(l, 1, &g);
    const size_t in_size = nl_shape_size(l->in[0]), out_size = nl_shape_size(l->out);
    const size_t in_plane = (size_t)g.h * g.w, out_plane = (size_t)g.oh * g.ow;
    size_t c0 = 0, c1 = (size_t)g.c;

    if (f->parts > 1 && f->n == 1)
        nl_block_range((size_t)g.c, 1, f->part, f->parts, &c0, &c1);
    else if (f->parts > 1 && f->part != 0)
        return;
    if (c0 >= c1)
        return;
    g.c = (int)(c1 - c0);
    const float *in = f->in[0] + c0 * in_plane;
    float *out = f->out + c0 * out_plane;
    int32_t *arg = (int32_t *)f->aux + c0 * out_plane;
    /* out of training no backward reads the indices (as conv's forward keeps nothing for it) */
    const int keep = f->training;
    if (g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0) {
        for (int s = 0; s < f->n; s++)
            maxpool_2x2(&g, in + (size_t)s * in_size, out + (size_t)s * out_size,
                        arg + (size_t)s * out_size, f->act);
    } else {
        /* The padding rule makes every window hold at least one input value. */
        for (int s = 0; s < f->n; s++) {
            float *o = out + (size_t)s * out_size;
            nl_maxpool(o, keep ? arg + (size_t)s * out_size : NULL, in + (size_t)s * in_size, g.c,
                       g.h, g.w, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.oh, g.ow);
            for (size_t i = 0; f->act && i < g.c * out_plane; i++) /* while it is in cache */
                o[i] = act_of(o[i], f->act);
        }
        if (!keep)
            return;
    }
    for (size_t i = 0; c0 > 0 && i < g.c * out_plane; i++)
        arg[i] += (int32_t)(c0 * in_plane);
}

static void maxpool_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    size_t in_size = nl_shape_size(l->in[0]), out_size = nl_shape_size(l->out);

    if (!b->din[0])
        return;
    struct nl__window g;
    nl__window_get(l, 1, &g);
    /* Rows of 12 outputs and more (the thread CPU time of 32 samples' backward: lenet's pool1,
     * 20x24x24, 93 us against 108 for zeroing and scattering; pool2, 50x8x8, rows of 4 in 16
     * lanes, 54 against 27). */
    const int tiles = g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 &&
                      g.h == 2 * g.oh && g.w == 2 * g.ow && g.ow >= 12;
    /* planes 8 wide: maxpool_2x2_w8_backward_avx512 (figures at maxpool_2x2_w8_avx512) */
    const int w8 = g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 &&
                   g.h == 2 * g.oh && g.w == 8;
    for (int s = 0; s < b->n; s++) {
        float *din = b->din[0] + (size_t)s * in_size;
        const float *dout = b->dout + (size_t)s * out_size, *out = b->out + (size_t)s * out_size;
        const int32_t *arg = (const int32_t *)b->aux + (size_t)s * out_size;
        if (w8 && (b->set & 1) && nl_kernels_vector_on()) {
            maxpool_2x2_w8_backward_avx512(din, dout, out, arg, (int)out_size, b->act);
            continue;
        }
        if (tiles && (b->set & 1) && nl_kernels_vector_on()) {
            for (int c = 0; c < g.c; c++)
                for (int oy = 0; oy < g.oh; oy++) {
                    const size_t o = ((size_t)c * g.oh + oy) * g.ow;
                    maxpool_2x2_row_backward_avx512(din, dout + o, out + o, arg + o,
                                                    (c * g.h + 2 * oy) * g.w, g.w, g.ow, b->act);
                }
            continue;
        }
        if (b->set & 1)
            memset(din, 0, in_size * sizeof *din);
        if (b->act == NL_ACT_NONE) {
            for (size_t i = 0; i < out_size; i++)
                din[arg[i]] += dout[i];
            continue;
        }
        /* The masked terms add 0.0f, as the activation's backward would have written. */
        for (size_t i = 0; i < out_size; i++)
            din[arg[i]] += act_passes(out[i], b->act) ? dout[i] : 0.0f;
    }
}

static void avgpool_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    struct nl__window g;
    nl__window_get(l, 1, &g);
    size_t in_size = nl_shape_size(l->in[0]), out_size = nl_shape_size(l->out);
    float scale = 1.0f / (float)(g.kh * g.kw);

    for (int s = 0; s < f->n; s++) {
        const float *x = f->in[0] + (size_t)s * in_size;
        float *out = f->out + (size_t)s * out_size;
        for (int c = 0; c < g.c; c++) {
            const float *plane = x + (size_t)c * g.h * g.w;
            for (int oy = 0; oy < g.oh; oy++) {
                int y0, y1;
                clip(&y0, &y1, oy, g.sh, g.ph, g.kh, g.h);
                for (int ox = 0; ox < g.ow; ox++, out++) {
                    int x0, x1;
                    clip(&x0, &x1, ox, g.sw, g.pw, g.kw, g.w);
                    float sum = 0.0f;
                    for (int y = y0; y < y1; y++)
                        for (int xx = x0; xx < x1; xx++)
                            sum += plane[y * g.w + xx];
                    *out = sum * scale;
                }
            }
        }
    }
}

static void avgpool_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    struct nl__window g;
    nl__window_get(l, 1, &g);
    size_t in_size = nl_shape_size(l->in[0]), out_size = nl_shape_size(l->out);
    float scale = 1.0f / (float)(g.kh * g.kw);

    if (!b->din[0])
        return;
    for (int s = 0; s < b->n; s++) {
        float *din = b->din[0] + (size_t)s * in_size;
        const float *dout = b->dout + (size_t)s * out_size;
        for (int c = 0; c < g.c; c++) {
            float *plane = din + (size_t)c * g.h * g.w;
            for (int oy = 0; oy < g.oh; oy++) {
                int y0, y1;
                clip(&y0, &y1, oy, g.sh, g.ph, g.kh, g.h);
                for (int ox = 0; ox < g.ow; ox++, dout++) {
                    int x0, x1;
                    clip(&x0, &x1, ox, g.sw, g.pw, g.kw, g.w);
                    float v = *dout * scale;
                    for (int y = y0; y < y1; y++)
                        for (int xx = x0; xx < x1; xx++)
                            plane[y * g.w + xx] += v;
                }
            }
        }
    }
}

const struct nl_layer_ops nl__maxpool_ops = {
    .kind = "maxpool",
    .splits = 1,
    .overwrites = 1,
    .folds = 2,
    .fuses = 1,
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = maxpool_setup,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
};

const struct nl_layer_ops nl__avgpool_ops = {
    .kind = "avgpool",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = pool_setup,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
};
