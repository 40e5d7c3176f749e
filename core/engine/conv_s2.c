/* Stride-2 unrolling through the four phase planes (layouts in nnlab/conv_s2.h).
 *
 * nl_im2col of a stride-2 window gathers every output row of every column row from an input
 * row by two loads and a permute, 14 pixels at a time on resnet8's 28x28 planes (7 on 14x14),
 * and col2im spreads them back likewise. Split once into phase planes whose rows are ow floats
 * apart, each column row is instead one flat run of a plane: whole 16-lane vectors, a load and
 * a store each, the padding masked off. The split costs two permutes per 32 input pixels, once
 * per image instead of once per tap. The scalar twins below run where AVX-512 is off and are
 * what tests/test_kernels.c holds the vector paths against (both copy or add the same floats,
 * so they agree bit for bit, and with nl_im2col and nl_col2im).
 */
#include "nnlab/conv_s2.h"

#include <limits.h>

#include "nnlab/kernels.h"
#include "simd.h"

int nl_s2_fits(int h, int w, int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow)
{
    (void)h;
    (void)ph;
    (void)pw;
    return sh == 2 && sw == 2 && kh * kw <= NL_S2_TAPS && oh * ow <= 16 * NL_S2_VECS &&
           (w + 1) / 2 <= ow && oh > 0 && ow > 0;
}

size_t nl_s2_floats(int c, int h, int ow)
{
    return (size_t)c * 4 * (size_t)((h + 1) / 2) * (size_t)ow;
}

void nl_s2_plan(struct nl_s2 *p, int c, int h, int w, int kh, int kw, int ph, int pw, int oh,
                int ow)
{
    *p = (struct nl_s2){.c = c,
                        .h = h,
                        .w = w,
                        .kh = kh,
                        .kw = kw,
                        .ph = ph,
                        .pw = pw,
                        .oh = oh,
                        .ow = ow,
                        .hp = (h + 1) / 2,
                        .vecs = (oh * ow + 15) / 16};
    for (int ki = 0; ki < kh; ki++)
        for (int kj = 0; kj < kw; kj++) {
            /* input row 2*oy + a = 2*(oy + dy) + pr, and likewise for columns */
            const int a = ki - ph, b = kj - pw, t = ki * kw + kj;
            const int pr = a & 1, pc = b & 1, dy = (a - pr) / 2, dx = (b - pc) / 2;
            const int rows = (h - pr + 1) / 2, cols = (w - pc + 1) / 2;
            p->phase[t] = pr * 2 + pc;
            p->used |= 1 << (pr * 2 + pc);
            p->shift[t] = dy * ow + dx;
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    const int y = oy + dy, x = ox + dx, j = oy * ow + ox;
                    if (y >= 0 && y < rows && x >= 0 && x < cols)
                        p->mask[t][j / 16] |= (uint16_t)(1u << (j % 16));
                }
        }
}

static float *plane_of(float *phases, const struct nl_s2 *p, int ci, int phase)
{
    return phases + ((size_t)ci * 4 + phase) * p->hp * p->ow;
}

static void split_scalar(float *phases, const float *img, const struct nl_s2 *p)
{
    for (int ci = 0; ci < p->c; ci++)
        for (int y = 0; y < p->h; y++) {
            const float *row = img + ((size_t)ci * p->h + y) * p->w;
            for (int x = 0; x < p->w; x++)
                if (p->used >> ((y & 1) * 2 + (x & 1)) & 1)
                    plane_of(phases, p, ci, (y & 1) * 2 + (x & 1))[(y / 2) * p->ow + x / 2] =
                        row[x];
        }
}

static void merge_scalar(float *img, const float *phases, const struct nl_s2 *p)
{
    for (int ci = 0; ci < p->c; ci++)
        for (int y = 0; y < p->h; y++) {
            float *row = img + ((size_t)ci * p->h + y) * p->w;
            for (int x = 0; x < p->w; x++)
                if (p->used >> ((y & 1) * 2 + (x & 1)) & 1)
                    row[x] = plane_of((float *)phases, p, ci,
                                      (y & 1) * 2 + (x & 1))[(y / 2) * p->ow + x / 2];
        }
}

static void cols_scalar(float *cols, const float *phases, const struct nl_s2 *p)
{
    const int taps = p->kh * p->kw, n = p->oh * p->ow;
    for (int ci = 0; ci < p->c; ci++)
        for (int t = 0; t < taps; t++) {
            /* indexed from the plane's start: only the live lanes' addresses are formed */
            const float *plane = plane_of((float *)phases, p, ci, p->phase[t]);
            float *dst = cols + ((size_t)ci * taps + t) * n;
            for (int j = 0; j < n; j++)
                dst[j] = p->mask[t][j / 16] >> (j % 16) & 1 ? plane[p->shift[t] + j] : 0.0f;
        }
}

static void cols_adjoint_scalar(float *phases, const float *cols, const struct nl_s2 *p)
{
    const int taps = p->kh * p->kw, n = p->oh * p->ow;
    for (int ci = 0; ci < p->c; ci++)
        for (int t = 0; t < taps; t++) {
            float *plane = plane_of(phases, p, ci, p->phase[t]);
            const float *src = cols + ((size_t)ci * taps + t) * n;
            for (int j = 0; j < n; j++)
                if (p->mask[t][j / 16] >> (j % 16) & 1)
                    plane[p->shift[t] + j] += src[j];
        }
}

/* split_avx512 for rows of at most 32 pixels, one block a row: the masks are the same for every
 * row, and where the block's 32 floats lie within the image and a plane's 16 within that plane,
 * whole vectors are loaded and stored. The floats past a plane row's end land on the start of
 * the plane's next rows, which later rows of the image overwrite (rows go in order, each plane
 * row is written by one image row), and are never read: the same planes. */
AVX512 static void split_row_avx512(float *phases, const float *img, const struct nl_s2 *p)
{
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __mmask16 la = lanes(0, p->w), lb = lanes(0, p->w - 16);
    const __mmask16 m0 = lanes(0, (p->w + 1) / 2), m1 = lanes(0, p->w / 2);
    const size_t size = (size_t)p->c * p->h * p->w, plane = (size_t)p->hp * p->ow;
    const int use[4] = {p->used & 1, p->used >> 1 & 1, p->used >> 2 & 1, p->used >> 3 & 1};

    for (int ci = 0; ci < p->c; ci++)
        for (int y = 0; y < p->h; y++) {
            const int pr = y & 1, use0 = use[pr * 2], use1 = use[pr * 2 + 1];
            if (!use0 && !use1)
                continue;
            const size_t at = ((size_t)ci * p->h + y) * p->w;
            const float *row = img + at;
            const size_t off = (size_t)(y / 2) * p->ow;
            float *d0 = plane_of(phases, p, ci, pr * 2) + off;
            float *d1 = plane_of(phases, p, ci, pr * 2 + 1) + off;
            __m512 a, b;
            if (at + 32 <= size) {
                a = _mm512_loadu_ps(row);
                b = _mm512_loadu_ps(row + 16);
            } else {
                a = _mm512_maskz_loadu_ps(la, row);
                b = _mm512_maskz_loadu_ps(lb, row + 16);
            }
            const __m512 e = _mm512_permutex2var_ps(a, even, b);
            const __m512 o = _mm512_permutex2var_ps(a, odd, b);
            const int whole = off + 16 <= plane;
            if (use0 && whole)
                _mm512_storeu_ps(d0, e);
            else if (use0)
                _mm512_mask_storeu_ps(d0, m0, e);
            if (use1 && whole)
                _mm512_storeu_ps(d1, o);
            else if (use1)
                _mm512_mask_storeu_ps(d1, m1, o);
        }
}

/* Each input row's 32-pixel blocks: even lanes to phase pc = 0, odd lanes to pc = 1; the rows and
 * lanes of phases no tap reads are skipped. */
AVX512 static void split_avx512(float *phases, const float *img, const struct nl_s2 *p)
{
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const int w0 = (p->w + 1) / 2, w1 = p->w / 2;

    if (p->w <= 32) {
        split_row_avx512(phases, img, p);
        return;
    }
    for (int ci = 0; ci < p->c; ci++)
        for (int y = 0; y < p->h; y++) {
            const int pr = y & 1, use0 = p->used >> (pr * 2) & 1,
                      use1 = p->used >> (pr * 2 + 1) & 1;
            if (!use0 && !use1)
                continue;
            const float *row = img + ((size_t)ci * p->h + y) * p->w;
            float *d0 = plane_of(phases, p, ci, pr * 2) + (y / 2) * p->ow;
            float *d1 = plane_of(phases, p, ci, pr * 2 + 1) + (y / 2) * p->ow;
            for (int x = 0; x < p->w; x += 32) {
                const __m512 a = _mm512_maskz_loadu_ps(lanes(0, p->w - x), row + x);
                const __m512 b = _mm512_maskz_loadu_ps(lanes(0, p->w - x - 16), row + x + 16);
                if (use0)
                    _mm512_mask_storeu_ps(d0 + x / 2, lanes(0, w0 - x / 2),
                                          _mm512_permutex2var_ps(a, even, b));
                if (use1)
                    _mm512_mask_storeu_ps(d1 + x / 2, lanes(0, w1 - x / 2),
                                          _mm512_permutex2var_ps(a, odd, b));
            }
        }
}

AVX512 static void merge_avx512(float *img, const float *phases, const struct nl_s2 *p)
{
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    const int w0 = (p->w + 1) / 2, w1 = p->w / 2;

    if (p->w <= 32 && p->used == 15) {
        /* every pixel written, one block a row: whole vectors where they stay within the planes
         * and the image, as split_row_avx512; the floats past a row's end land on the next
         * row's start, written after */
        const __mmask16 m0 = lanes(0, w0), m1 = lanes(0, w1), la = lanes(0, p->w),
                        lb = lanes(0, p->w - 16);
        const size_t size = (size_t)p->c * p->h * p->w, total = nl_s2_floats(p->c, p->h, p->ow);
        for (int ci = 0; ci < p->c; ci++)
            for (int y = 0; y < p->h; y++) {
                const int pr = y & 1;
                const size_t at = ((size_t)ci * p->h + y) * p->w;
                const float *s0 = plane_of((float *)phases, p, ci, pr * 2) + (y / 2) * p->ow;
                const float *s1 = plane_of((float *)phases, p, ci, pr * 2 + 1) + (y / 2) * p->ow;
                const int whole = (size_t)(s1 - phases) + 16 <= total;
                const __m512 e = whole ? _mm512_loadu_ps(s0) : _mm512_maskz_loadu_ps(m0, s0);
                const __m512 o = whole ? _mm512_loadu_ps(s1) : _mm512_maskz_loadu_ps(m1, s1);
                const __m512 r0 = _mm512_permutex2var_ps(e, lo, o);
                const __m512 r1 = _mm512_permutex2var_ps(e, hi, o);
                if (at + 32 <= size) {
                    _mm512_storeu_ps(img + at, r0);
                    _mm512_storeu_ps(img + at + 16, r1);
                } else {
                    _mm512_mask_storeu_ps(img + at, la, r0);
                    _mm512_mask_storeu_ps(img + at + 16, lb, r1);
                }
            }
        return;
    }
    for (int ci = 0; ci < p->c; ci++)
        for (int y = 0; y < p->h; y++) {
            const int pr = y & 1, use0 = p->used >> (pr * 2) & 1,
                      use1 = p->used >> (pr * 2 + 1) & 1;
            if (!use0 && !use1)
                continue;
            /* the lanes of the written phases: even lanes pc = 0, odd lanes pc = 1 */
            const __mmask16 keep = (__mmask16)((use0 ? 0x5555 : 0) | (use1 ? 0xaaaa : 0));
            float *row = img + ((size_t)ci * p->h + y) * p->w;
            const float *s0 = plane_of((float *)phases, p, ci, pr * 2) + (y / 2) * p->ow;
            const float *s1 = plane_of((float *)phases, p, ci, pr * 2 + 1) + (y / 2) * p->ow;
            for (int x = 0; x < p->w; x += 32) {
                const __m512 e = _mm512_maskz_loadu_ps(use0 ? lanes(0, w0 - x / 2) : 0, s0 + x / 2);
                const __m512 o = _mm512_maskz_loadu_ps(use1 ? lanes(0, w1 - x / 2) : 0, s1 + x / 2);
                _mm512_mask_storeu_ps(row + x, keep & lanes(0, p->w - x),
                                      _mm512_permutex2var_ps(e, lo, o));
                _mm512_mask_storeu_ps(row + x + 16, keep & lanes(0, p->w - x - 16),
                                      _mm512_permutex2var_ps(e, hi, o));
            }
        }
}

AVX512 static void cols_avx512(float *cols, const float *phases, const struct nl_s2 *p)
{
    const int taps = p->kh * p->kw, n = p->oh * p->ow;
    for (int ci = 0; ci < p->c; ci++)
        for (int t = 0; t < taps; t++) {
            const float *src = plane_of((float *)phases, p, ci, p->phase[t]) + p->shift[t];
            float *dst = cols + ((size_t)ci * taps + t) * n;
            for (int v = 0; v < p->vecs; v++)
                _mm512_mask_storeu_ps(dst + 16 * v, lanes(0, n - 16 * v),
                                      _mm512_maskz_loadu_ps(p->mask[t][v], src + 16 * v));
        }
}

AVX512 static void cols_adjoint_avx512(float *phases, const float *cols, const struct nl_s2 *p)
{
    const int taps = p->kh * p->kw, n = p->oh * p->ow;
    for (int ci = 0; ci < p->c; ci++)
        for (int t = 0; t < taps; t++) {
            float *dst = plane_of(phases, p, ci, p->phase[t]) + p->shift[t];
            const float *src = cols + ((size_t)ci * taps + t) * n;
            for (int v = 0; v < p->vecs; v++) {
                const __mmask16 m = p->mask[t][v];
                const __m512 d = _mm512_maskz_loadu_ps(m, dst + 16 * v);
                _mm512_mask_storeu_ps(dst + 16 * v, m,
                                      _mm512_add_ps(d, _mm512_maskz_loadu_ps(m, src + 16 * v)));
            }
        }
}

static void transpose_scalar(float *dst, const float *src, int rows, int cols, int from)
{
    for (int i = from; i < rows; i++)
        for (int j = 0; j < cols; j++)
            dst[(size_t)j * rows + i] = src[(size_t)i * cols + j];
}

/* Sixteen rows at a time, a column of them gathered into one vector: 4.5 against 1.2 us for a
 * (32, 196) matrix (resnet8's s2c1 dout), where 16x16 register transposes took 1.4. */
AVX512 static void transpose_avx512(float *dst, const float *src, int rows, int cols)
{
    const __m512i idx =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(cols));
    int r = 0;

    for (; r + 16 <= rows; r += 16)
        for (int j = 0; j < cols; j++)
            _mm512_storeu_ps(dst + (size_t)j * rows + r,
                             _mm512_i32gather_ps(idx, src + (size_t)r * cols + j, 4));
    transpose_scalar(dst, src, rows, cols, r);
}

void nl_s2_transpose(float *dst, const float *src, int rows, int cols)
{
    if (nl_kernels_vector_on() && (size_t)rows * cols <= INT_MAX)
        transpose_avx512(dst, src, rows, cols);
    else
        transpose_scalar(dst, src, rows, cols, 0);
}

static void pick_scalar(float *cols, const float *img, int c, int h, int w, int oh, int ow)
{
    for (int ci = 0; ci < c; ci++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++)
                cols[((size_t)ci * oh + oy) * ow + ox] =
                    img[((size_t)ci * h + 2 * oy) * w + 2 * ox];
}

static void pick_adjoint_scalar(float *img, const float *cols, int c, int h, int w, int oh, int ow)
{
    for (int ci = 0; ci < c; ci++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++)
                img[((size_t)ci * h + 2 * oy) * w + 2 * ox] +=
                    cols[((size_t)ci * oh + oy) * ow + ox];
}

/* Every output row: the even lanes of 32 input floats at a time, as the split's phase 0. */
AVX512 static void pick_avx512(float *cols, const float *img, int c, int h, int w, int oh, int ow)
{
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);

    if (w <= 32) {
        /* one block a row, as split_row_avx512: whole vectors where they stay within the image
         * and the columns; the floats past an output row's end land on the next rows' start,
         * written after */
        const __mmask16 la = lanes(0, w), lb = lanes(0, w - 16), lo = lanes(0, ow);
        const size_t size = (size_t)c * h * w, end = (size_t)c * oh * ow;
        for (int ci = 0; ci < c; ci++)
            for (int oy = 0; oy < oh; oy++) {
                const size_t at = ((size_t)ci * h + 2 * oy) * w, to = ((size_t)ci * oh + oy) * ow;
                __m512 a, b;
                if (at + 32 <= size) {
                    a = _mm512_loadu_ps(img + at);
                    b = _mm512_loadu_ps(img + at + 16);
                } else {
                    a = _mm512_maskz_loadu_ps(la, img + at);
                    b = _mm512_maskz_loadu_ps(lb, img + at + 16);
                }
                const __m512 e = _mm512_permutex2var_ps(a, even, b);
                if (to + 16 <= end)
                    _mm512_storeu_ps(cols + to, e);
                else
                    _mm512_mask_storeu_ps(cols + to, lo, e);
            }
        return;
    }
    for (int ci = 0; ci < c; ci++)
        for (int oy = 0; oy < oh; oy++) {
            const float *row = img + ((size_t)ci * h + 2 * oy) * w;
            float *dst = cols + ((size_t)ci * oh + oy) * ow;
            for (int x = 0; x < w; x += 32) {
                const __m512 a = _mm512_maskz_loadu_ps(lanes(0, w - x), row + x);
                const __m512 b = _mm512_maskz_loadu_ps(lanes(0, w - x - 16), row + x + 16);
                _mm512_mask_storeu_ps(dst + x / 2, lanes(0, ow - x / 2),
                                      _mm512_permutex2var_ps(a, even, b));
            }
        }
}

/* The columns spread to the even lanes of 32 image floats, added there; the odd lanes are not
 * written (nor is 0 added to them, which would turn a -0 into +0). */
AVX512 static void pick_adjoint_avx512(float *img, const float *cols, int c, int h, int w, int oh,
                                       int ow)
{
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    const __m512 zero = _mm512_setzero_ps();

    for (int ci = 0; ci < c; ci++)
        for (int oy = 0; oy < oh; oy++) {
            float *row = img + ((size_t)ci * h + 2 * oy) * w;
            const float *src = cols + ((size_t)ci * oh + oy) * ow;
            for (int x = 0; x < w; x += 32) {
                const __m512 e = _mm512_maskz_loadu_ps(lanes(0, ow - x / 2), src + x / 2);
                const __mmask16 m0 = lanes(0, w - x) & 0x5555, m1 = lanes(0, w - x - 16) & 0x5555;
                const __m512 r0 = _mm512_maskz_loadu_ps(m0, row + x);
                const __m512 r1 = _mm512_maskz_loadu_ps(m1, row + x + 16);
                _mm512_mask_storeu_ps(row + x, m0,
                                      _mm512_add_ps(r0, _mm512_permutex2var_ps(e, lo, zero)));
                _mm512_mask_storeu_ps(row + x + 16, m1,
                                      _mm512_add_ps(r1, _mm512_permutex2var_ps(e, hi, zero)));
            }
        }
}

void nl_s2_pick(float *cols, const float *img, int c, int h, int w, int oh, int ow)
{
    if (nl_kernels_vector_on())
        pick_avx512(cols, img, c, h, w, oh, ow);
    else
        pick_scalar(cols, img, c, h, w, oh, ow);
}

void nl_s2_pick_adjoint(float *img, const float *cols, int c, int h, int w, int oh, int ow)
{
    if (nl_kernels_vector_on())
        pick_adjoint_avx512(img, cols, c, h, w, oh, ow);
    else
        pick_adjoint_scalar(img, cols, c, h, w, oh, ow);
}

void nl_s2_split(float *phases, const float *img, const struct nl_s2 *p)
{
    if (nl_kernels_vector_on())
        split_avx512(phases, img, p);
    else
        split_scalar(phases, img, p);
}

void nl_s2_merge(float *img, const float *phases, const struct nl_s2 *p)
{
    if (nl_kernels_vector_on())
        merge_avx512(img, phases, p);
    else
        merge_scalar(img, phases, p);
}

void nl_s2_cols(float *cols, const float *phases, const struct nl_s2 *p)
{
    if (nl_kernels_vector_on())
        cols_avx512(cols, phases, p);
    else
        cols_scalar(cols, phases, p);
}

void nl_s2_cols_adjoint(float *phases, const float *cols, const struct nl_s2 *p)
{
    if (nl_kernels_vector_on())
        cols_adjoint_avx512(phases, cols, p);
    else
        cols_adjoint_scalar(phases, cols, p);
}
