/* Fast kernels against their naive twins: nl_sgemm against nl_sgemm_naive for every transpose
 * combination with odd sizes and padded leading dimensions; im2col against its definition and
 * col2im as its adjoint; their vector paths and those of ReLU, max pooling, batchnorm's output
 * and add against the scalar loops, bit for bit; Winograd's transforms against their naive
 * twins and their adjoints against the dot-product identity; and the conv (every lowering,
 * Winograd's to a stated tolerance), dense and pooling layers against direct loops written here
 * (a 7-loop convolution, a dot product per output, a scan of each window). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nnlab/conv_gemm.h"
#include "nnlab/conv_plane.h"
#include "nnlab/conv_s2.h"
#include "nnlab/kernels.h"
#include "nnlab/layer.h"
#include "nnlab/rng.h"
#include "nnlab/winograd.h"
#include "tap.h"
#include "test_util.h"

/* max |a - b| over count values; NaN when either holds one. */
static double max_diff(const float *a, const float *b, size_t count)
{
    double m = 0.0;
    for (size_t i = 0; i < count; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d))
            return NAN;
        if (d > m)
            m = d;
    }
    return m;
}

static double max_abs(const float *a, size_t count)
{
    double m = 0.0;
    for (size_t i = 0; i < count; i++)
        if (fabs(a[i]) > m)
            m = fabs(a[i]);
    return m;
}

/* ---- GEMM ---- */

static void check_sgemm(int ta, int tb, int m, int n, int k)
{
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
    size_t arows = ta ? k : m, brows = tb ? n : k;
    float *a = floats(arows * lda), *b = floats(brows * ldb);
    float *c = floats((size_t)m * ldc), *c2 = floats((size_t)m * ldc);

    fill(a, arows * lda, -1, 1);
    fill(b, brows * ldb, -1, 1);
    fill(c, (size_t)m * ldc, -1, 1);
    for (int i = 0; i < m; i++)
        c[(size_t)i * ldc + n] = 12345.0f; /* the padding column must stay untouched */
    memcpy(c2, c, (size_t)m * ldc * sizeof *c);

    nl_sgemm(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, -1.25f, c, ldc);
    nl_sgemm_naive(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, -1.25f, c2, ldc);
    double tol = 1e-5 * (1.0 + max_abs(c2, (size_t)m * ldc - 1)) * (1.0 + k / 16.0);
    double d = 0.0;
    int pad_ok = 1;
    for (int i = 0; i < m; i++) {
        double di = max_diff(c + (size_t)i * ldc, c2 + (size_t)i * ldc, n);
        d = isnan(di) || di > d ? di : d;
        pad_ok &= c[(size_t)i * ldc + n] == 12345.0f && c2[(size_t)i * ldc + n] == 12345.0f;
    }
    is_float(d, 0.0, tol, "sgemm %c%c m=%d n=%d k=%d matches the naive product", ta ? 'T' : 'N',
             tb ? 'T' : 'N', m, n, k);
    ok(pad_ok, "sgemm %c%c m=%d n=%d k=%d leaves columns past n alone", ta ? 'T' : 'N',
       tb ? 'T' : 'N', m, n, k);

    /* beta = 0: what c held, NaN included, is not read. */
    fill_value(c, (size_t)m * ldc, NAN);
    fill_value(c2, (size_t)m * ldc, NAN);
    nl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
    nl_sgemm_naive(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c2, ldc);
    d = 0.0;
    for (int i = 0; i < m; i++) {
        double di = max_diff(c + (size_t)i * ldc, c2 + (size_t)i * ldc, n);
        d = isnan(di) || di > d ? di : d;
    }
    is_float(d, 0.0, tol, "sgemm %c%c m=%d n=%d k=%d with beta 0 ignores NaN in c", ta ? 'T' : 'N',
             tb ? 'T' : 'N', m, n, k);
    free(a);
    free(b);
    free(c);
    free(c2);
}

/* nl_sgemm_rows: blocks of whole multiples of 16 rows within OpenBLAS's small-matrix bound where
 * its kernels have that path, the last block short; the product that of the naive loops, with
 * beta 0 (NaN in c not read) and 1, a as it is and turned, wider leading dimensions. */
static void check_sgemm_rows(int ta, int m, int n, int k, float beta)
{
    const int lda = (ta ? m : k) + 3, ldb = n + 2, ldc = n + 1;
    const size_t arows = ta ? k : m;
    float *a = floats(arows * lda), *b = floats((size_t)k * ldb);
    float *c = floats((size_t)m * ldc), *c2 = floats((size_t)m * ldc);

    fill(a, arows * lda, -1, 1);
    fill(b, (size_t)k * ldb, -1, 1);
    if (beta == 0.0f)
        fill_value(c, (size_t)m * ldc, NAN);
    else
        fill(c, (size_t)m * ldc, -1, 1);
    for (int i = 0; i < m; i++)
        c[(size_t)i * ldc + n] = 12345.0f;
    memcpy(c2, c, (size_t)m * ldc * sizeof *c);
    nl_sgemm_rows(ta, m, n, k, a, lda, b, ldb, beta, c, ldc);
    nl_sgemm_naive(ta, 0, m, n, k, 1.0f, a, lda, b, ldb, beta, c2, ldc);
    double d = 0.0;
    int pad_ok = 1;
    for (int i = 0; i < m; i++) {
        double di = max_diff(c + (size_t)i * ldc, c2 + (size_t)i * ldc, n);
        d = isnan(di) || di > d ? di : d;
        pad_ok &= c[(size_t)i * ldc + n] == 12345.0f;
    }
    const double tol = 1e-5 * (1.0 + max_abs(c2, (size_t)m * ldc - 1)) * (1.0 + k / 16.0);
    is_float(d, 0.0, tol, "sgemm_rows %c m=%d n=%d k=%d beta %g matches the naive product",
             ta ? 'T' : 'N', m, n, k, beta);
    ok(pad_ok, "sgemm_rows %c m=%d n=%d k=%d leaves columns past n alone", ta ? 'T' : 'N', m, n, k);
    free(a);
    free(b);
    free(c);
    free(c2);
}

static void test_sgemm_rows(void)
{
    const int rows = nl_sgemm_rows_block(256, 64, 256);
    ok(rows == 256 || (rows % 16 == 0 && rows * 64.0 * 256 <= NL_SGEMM_SMALL && rows >= 48),
       "sgemm_rows: (256, 64, 256) in one call or blocks of 48 (%d)", rows);
    ok(nl_sgemm_rows_block(64, 64, 64) == 64 && nl_sgemm_rows_block(512, 64, 4608) == 512,
       "sgemm_rows: one call within the bound, and where 16 rows pass it");
    for (int ta = 0; ta <= 1; ta++) {
        check_sgemm_rows(ta, 256, 64, 256, 0.0f);
        check_sgemm_rows(ta, 100, 48, 300, 1.0f);
        check_sgemm_rows(ta, 37, 20, 17, 0.0f);
    }
}

static void test_sum(void)
{
    static const int sizes[] = {0, 1, 7, 8, 9, 64, 576, 1001};
    float *x = floats(1001);

    fill(x, 1001, -1, 1);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int n = sizes[i];
        is_float(nl_sum(x, n), nl_sum_naive(x, n), 1e-5 * (1 + n),
                 "sum of %d matches the naive sum", n);
    }
    free(x);
}

/* The embedding's weight gradient, blocked against step by step: the same floats, the same rows
 * marked; lengths below, at and past the block of 16, padding, repeated and out-of-range ids. */
static void test_embedding_backward(void)
{
    static const int lens[] = {1, 5, 16, 37};
    enum { N = 3, DIM = 7, VOCAB = 11 };

    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        const int len = lens[i];
        float *ids = floats((size_t)N * len), *dout = floats((size_t)N * DIM * len);
        float *a = floats(VOCAB * DIM), *b = floats(VOCAB * DIM);
        unsigned char ma[VOCAB] = {0}, mb[VOCAB] = {0};
        fill(dout, N * DIM * len, -1, 1);
        fill(a, VOCAB * DIM, -1, 1);
        memcpy(b, a, VOCAB * DIM * sizeof *a);
        for (int k = 0; k < N * len; k++) {
            int v = (int)(nl_rng_next(&rng) % (VOCAB + 3)); /* 11..13: out of range */
            ids[k] = k % 4 == 3 ? 0.0f : v == VOCAB + 2 ? 2.5f : (float)v;
        }
        nl_embedding_backward(a, ma, dout, ids, N, len, DIM, VOCAB);
        nl_embedding_backward_naive(b, mb, dout, ids, N, len, DIM, VOCAB);
        int marked = 0;
        for (int r = 0; r < VOCAB; r++)
            marked += ma[r];
        ok(memcmp(a, b, VOCAB * DIM * sizeof *a) == 0 && memcmp(ma, mb, sizeof ma) == 0 &&
               ma[0] == 0 && marked > 0,
           "embedding backward over %d steps matches the naive one (%d rows marked)", len, marked);
        nl_embedding_backward(a, NULL, dout, ids, N, len, DIM, VOCAB);
        ok(memcmp(a, b, VOCAB * DIM * sizeof *a) != 0, "and adds to dw (%d steps)", len);
        free(ids);
        free(dout);
        free(a);
        free(b);
    }
}

static void test_sgemm(void)
{
    static const int sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {17, 3, 29}, {33, 65, 31}, {5, 2, 300}};

    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                check_sgemm(ta, tb, sizes[s][0], sizes[s][1], sizes[s][2]);

    /* k = 0: an empty sum, c = beta * c. */
    float a[1] = {1}, b[1] = {1}, c[6] = {1, 2, 3, 4, 5, 6};
    nl_sgemm(0, 0, 2, 3, 0, 1.0f, a, 1, b, 3, 0.5f, c, 3);
    ok(c[0] == 0.5f && c[5] == 3.0f, "sgemm with k=0 scales c by beta");
}

/* ---- im2col / col2im ---- */

struct geom {
    int c, h, w, kh, kw, sh, sw, ph, pw;
};

static int out_size(int in, int k, int s, int p)
{
    return (in + 2 * p - k) / s + 1;
}

static void test_im2col(const struct geom *g)
{
    int oh = out_size(g->h, g->kh, g->sh, g->ph), ow = out_size(g->w, g->kw, g->sw, g->pw);
    size_t k = (size_t)g->c * g->kh * g->kw, p = (size_t)oh * ow,
           isize = (size_t)g->c * g->h * g->w;
    float *x = floats(isize), *cols = floats(k * p), *y = floats(k * p), *img = floats(isize);
    char what[128];

    snprintf(what, sizeof what, "%dx%dx%d window %dx%d stride %dx%d pad %dx%d", g->c, g->h, g->w,
             g->kh, g->kw, g->sh, g->sw, g->ph, g->pw);
    fill(x, isize, -1, 1);
    fill_value(cols, k * p, NAN);
    nl_im2col(cols, x, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, oh, ow);

    /* Against the definition, element by element. */
    int wrong = 0;
    for (int ci = 0; ci < g->c; ci++)
        for (int ki = 0; ki < g->kh; ki++)
            for (int kj = 0; kj < g->kw; kj++)
                for (int oy = 0; oy < oh; oy++)
                    for (int ox = 0; ox < ow; ox++) {
                        int iy = oy * g->sh - g->ph + ki, ix = ox * g->sw - g->pw + kj;
                        float want = iy >= 0 && iy < g->h && ix >= 0 && ix < g->w
                                         ? x[((size_t)ci * g->h + iy) * g->w + ix]
                                         : 0.0f;
                        size_t row = ((size_t)ci * g->kh + ki) * g->kw + kj;
                        wrong += cols[row * p + (size_t)oy * ow + ox] != want;
                    }
    is_int(wrong, 0, "im2col %s: every element as defined", what);

    /* <im2col(x), y> == <x, col2im(y)>; col2im adds to what img held (0.5 here). */
    fill(y, k * p, -1, 1);
    fill_value(img, isize, 0.5f);
    nl_col2im(img, y, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, oh, ow);
    double lhs = 0.0, rhs = 0.0, scale = 0.0;
    for (size_t i = 0; i < k * p; i++) {
        lhs += (double)cols[i] * y[i];
        scale += fabs((double)cols[i] * y[i]);
    }
    for (size_t i = 0; i < isize; i++)
        rhs += (double)x[i] * ((double)img[i] - 0.5);
    is_float(lhs, rhs, 1e-5 * (1.0 + scale), "col2im %s is the adjoint of im2col", what);

    /* The _ld forms write the same columns into a wider matrix and read them back. */
    int ld = (int)p * 3 + 1;
    float *wide = floats(k * ld), *img_ld = floats(isize);
    fill_value(wide, k * ld, 7.0f);
    nl_im2col_ld(wide + p, ld, x, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, oh,
                 ow);
    int same = 1;
    for (size_t r = 0; r < k; r++) {
        same &= memcmp(wide + r * ld + p, cols + r * p, p * sizeof *cols) == 0;
        for (size_t j = 0; j < (size_t)ld; j++)
            same &= j >= p && j < 2 * p ? 1 : wide[r * ld + j] == 7.0f;
    }
    ok(same, "im2col_ld %s: same columns, others untouched", what);
    for (size_t r = 0; r < k; r++)
        memcpy(wide + r * ld + p, y + r * p, p * sizeof *y);
    fill_value(img_ld, isize, 0.5f);
    nl_col2im_ld(img_ld, wide + p, ld, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw,
                 oh, ow);
    is_float(max_diff(img, img_ld, isize), 0.0, 0.0, "col2im_ld %s: same as col2im", what);

    free(x);
    free(cols);
    free(y);
    free(img);
    free(wide);
    free(img_ld);
}

/* nl_pgemm's tiles (AVX-512, where the CPU has it) against its naive twin, bit for bit: every
 * panel height 1 to 6, widths around one vector and one tile of 64 columns, depths around its
 * block of 128 rows, wider strides than the matrices, from 0, the bias and c itself; the naive
 * twin against a sum in double; the packing against its definition. */
static void test_pgemm(void)
{
    static const int shapes[][3] = {
        {1, 1, 1},     {6, 16, 3},    {5, 17, 7}, {7, 64, 129},  {13, 63, 128},  {50, 64, 500},
        {500, 64, 50}, {50, 500, 64}, {4, 80, 0}, {20, 576, 25}, {12, 130, 257},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
        const int lda = k + 3, ldb = n + 5, ldc = n + 2;
        float *a = floats((size_t)m * lda + 1), *at = floats((size_t)k * (m + 1) + 1);
        float *b = floats((size_t)k * ldb + 1), *bias = floats((size_t)m);
        float *ap = floats(nl_pgemm_packed_floats(m, k) + 1),
              *apt = floats(nl_pgemm_packed_floats(m, k) + 1);
        float *c0 = floats((size_t)m * ldc), *c1 = floats((size_t)m * ldc);
        fill(a, (size_t)m * lda, -1, 1);
        fill(b, (size_t)k * ldb, -1, 1);
        fill(bias, (size_t)m, -1, 1);
        for (int r = 0; r < m; r++)
            for (int kk = 0; kk < k; kk++)
                at[(size_t)kk * (m + 1) + r] = a[(size_t)r * lda + kk];
        nl_pgemm_pack(ap, a, lda, 0, m, k);
        nl_pgemm_pack(apt, at, m + 1, 1, m, k);
        int wrong = 0;
        const int ph = nl_pgemm_mr(m);
        for (int r = 0; r < (m + ph - 1) / ph * ph; r++)
            for (int kk = 0; kk < k; kk++) {
                const float want = r < m ? a[(size_t)r * lda + kk] : 0.0f;
                const size_t at_p = ((size_t)(r / ph) * k + kk) * ph + r % ph;
                wrong += ap[at_p] != want || apt[at_p] != want;
            }
        is_int(wrong, 0, "pgemm pack %dx%d, and from its transpose: as defined", m, k);
        for (int mode = 0; mode < 3; mode++) {
            const float *bs = mode == 1 ? bias : NULL;
            fill(c0, (size_t)m * ldc, -1, 1);
            memcpy(c1, c0, (size_t)m * ldc * sizeof *c1);
            nl_pgemm(c0, ldc, ap, b, ldb, m, n, k, bs, mode == 2);
            nl_pgemm_naive(c1, ldc, ap, b, ldb, m, n, k, bs, mode == 2);
            ok(memcmp(c0, c1, (size_t)m * ldc * sizeof *c0) == 0,
               "pgemm %dx%dx%d %s: the tiles agree with the naive twin bit for bit", m, n, k,
               mode == 0   ? "from 0"
               : mode == 1 ? "from the bias"
                           : "added to c");
            double worst = 0.0;
            for (int r = 0; r < m; r++)
                for (int j = 0; j < n; j++) {
                    double want = mode == 1 ? bias[r] : 0.0, scale = 1.0;
                    for (int kk = 0; kk < k; kk++) {
                        const double t = (double)a[(size_t)r * lda + kk] * b[(size_t)kk * ldb + j];
                        want += t;
                        scale += fabs(t);
                    }
                    if (mode == 2)
                        continue; /* c's old value is gone; the bit-for-bit check covers it */
                    const double d = fabs(c1[(size_t)r * ldc + j] - want) / scale;
                    worst = d > worst ? d : worst;
                }
            if (mode != 2)
                ok(worst < 1e-6, "pgemm %dx%dx%d naive: within %.2g of the sum in double", m, n, k,
                   worst);
        }
        free(a);
        free(at);
        free(b);
        free(bias);
        free(ap);
        free(apt);
        free(c0);
        free(c1);
    }
}

/* nl_conv1c's vectors against its naive twin, bit for bit, and the twin against a sum in double:
 * lenet's conv1 and other one-channel planes with rows of 24, 1 to 11 filters (every block
 * size), with and without the bias. */
static void test_conv1c(void)
{
    static const int shapes[][4] = {{28, 28, 5, 5}, {26, 26, 3, 3}, {4, 30, 3, 7}, {10, 24, 1, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int f = 1; f <= 11; f += 2) {
            const int h = shapes[i][0], w = shapes[i][1], kh = shapes[i][2], kw = shapes[i][3];
            const int oh = h - kh + 1, ow = w - kw + 1;
            float *img = floats((size_t)h * w), *wt = floats((size_t)f * kh * kw),
                  *bias = floats((size_t)f), *a = floats((size_t)f * oh * ow),
                  *b = floats((size_t)f * oh * ow);
            const float *bs = f % 4 == 1 ? NULL : bias;
            fill(img, (size_t)h * w, -1, 1);
            fill(wt, (size_t)f * kh * kw, -1, 1);
            fill(bias, (size_t)f, -1, 1);
            ok(nl_conv1c_fits(1, kh, kw, 1, 1, 0, 0, oh, ow), "conv1c %dx%d, %dx%d: fits", h, w, kh,
               kw);
            nl_conv1c(a, img, wt, bs, h, w, f, kh, kw, oh, ow);
            nl_conv1c_naive(b, img, wt, bs, h, w, f, kh, kw, oh, ow);
            ok(memcmp(a, b, (size_t)f * oh * ow * sizeof *a) == 0,
               "conv1c %d filters %dx%d on %dx%d%s: the vectors agree with the naive twin bit for "
               "bit",
               f, kh, kw, h, w, bs ? "" : " no bias");
            double worst = 0.0;
            for (int fo = 0; fo < f; fo++)
                for (int y = 0; y < oh; y++)
                    for (int x = 0; x < ow; x++) {
                        double want = bs ? bs[fo] : 0.0, scale = 1.0;
                        for (int ki = 0; ki < kh; ki++)
                            for (int kj = 0; kj < kw; kj++) {
                                const double t = (double)wt[((size_t)fo * kh + ki) * kw + kj] *
                                                 img[(size_t)(y + ki) * w + x + kj];
                                want += t;
                                scale += fabs(t);
                            }
                        const double d = fabs(b[((size_t)fo * oh + y) * ow + x] - want) / scale;
                        worst = d > worst ? d : worst;
                    }
            ok(worst < 1e-6,
               "conv1c %d filters %dx%d on %dx%d: naive within %.2g of the sum in "
               "double",
               f, kh, kw, h, w, worst);
            if (nl_conv1c_dweight_fits(kw)) {
                /* the weight gradient over two images */
                const size_t taps = (size_t)kh * kw, lanes16 = (size_t)f * taps * 16;
                float *img2 = floats(2 * (size_t)h * w), *dout = floats(2 * (size_t)f * oh * ow);
                float *pa = floats(lanes16), *pb = floats(lanes16);
                float *dwa = floats((size_t)f * taps);
                fill(img2, 2 * (size_t)h * w, -1, 1);
                fill(dout, 2 * (size_t)f * oh * ow, -1, 1);
                for (int s = 0; s < 2; s++) {
                    const float *x = img2 + (size_t)s * h * w, *g = dout + (size_t)s * f * oh * ow;
                    nl_conv1c_dweight(pa, g, x, w, f, kh, kw, oh, ow);
                    nl_conv1c_dweight_naive(pb, g, x, w, f, kh, kw, oh, ow);
                }
                ok(memcmp(pa, pb, lanes16 * sizeof *pa) == 0,
                   "conv1c weight gradient %d filters %dx%d on 2x%dx%d: the vectors agree with the "
                   "naive twin bit for bit",
                   f, kh, kw, h, w);
                nl_conv1c_dweight_finish(dwa, pa, (size_t)f * taps);
                double werr = 0.0;
                for (int fo = 0; fo < f; fo++)
                    for (size_t t = 0; t < taps; t++) {
                        const int ki = (int)t / kw, kj = (int)t % kw;
                        double want = 0.0, scale = 1.0;
                        for (int s = 0; s < 2; s++)
                            for (int y = 0; y < oh; y++)
                                for (int x = 0; x < ow; x++) {
                                    const double v =
                                        (double)dout[(((size_t)s * f + fo) * oh + y) * ow + x] *
                                        img2[((size_t)s * h + y + ki) * w + x + kj];
                                    want += v;
                                    scale += fabs(v);
                                }
                        const double e = fabs(dwa[(size_t)fo * taps + t] - want) / scale;
                        werr = e > werr ? e : werr;
                    }
                ok(werr < 1e-6,
                   "conv1c weight gradient %d filters %dx%d: within %.2g of the sum "
                   "in double",
                   f, kh, kw, werr);
                free(img2);
                free(dout);
                free(pa);
                free(pb);
                free(dwa);
            }
            free(img);
            free(wt);
            free(bias);
            free(a);
            free(b);
        }
}

/* nl_im2col_t against nl_im2col's columns transposed, on the vector path and the naive one. */
static void test_im2col_t(const struct geom *g)
{
    int oh = out_size(g->h, g->kh, g->sh, g->ph), ow = out_size(g->w, g->kw, g->sw, g->pw);
    size_t k = (size_t)g->c * g->kh * g->kw, p = (size_t)oh * ow,
           isize = (size_t)g->c * g->h * g->w;
    float *x = floats(isize), *cols = floats(k * p), *colst = floats(k * p);

    fill(x, isize, -1, 1);
    nl_im2col(cols, x, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, oh, ow);
    fill_value(colst, k * p, NAN);
    nl_im2col_t(colst, x, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, oh, ow);
    int wrong = 0;
    for (size_t r = 0; r < k; r++)
        for (size_t q = 0; q < p; q++)
            wrong += memcmp(&colst[q * k + r], &cols[r * p + q], sizeof *cols) != 0;
    /* col2im_set writes what col2im adds to zeros, whatever the image held (NaN here) */
    float *zeroed = floats(isize), *set = floats(isize);
    fill_value(set, isize, NAN);
    nl_col2im(zeroed, cols, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, oh, ow);
    nl_col2im_set(set, cols, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, oh, ow);
    ok(memcmp(zeroed, set, isize * sizeof *set) == 0,
       "col2im_set %dx%dx%d window %dx%d stride %dx%d pad %dx%d%s: col2im into zeros", g->c, g->h,
       g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, nl_kernels_vector_on() ? "" : " (scalar)");
    free(zeroed);
    free(set);
    is_int(wrong, 0, "im2col_t %dx%dx%d window %dx%d stride %dx%d pad %dx%d%s: im2col transposed",
           g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw,
           nl_kernels_vector_on() ? "" : " (scalar)");
    free(x);
    free(cols);
    free(colst);
}

/* The vector paths (AVX-512, where the CPU has it) against the scalar loops, bit for bit:
 * im2col and col2im on every row width from 1 to 35 (one, two and three vectors, short tails),
 * strides 1, 2 and 3 (3 stays scalar), paddings 0 to 3; ReLU on lengths around the vector
 * width, with NaN, infinities and signed zeros in its input. */
static void test_vector_twins(void)
{
    if (!nl_kernels_vector(1)) {
        ok(1, "# SKIP this CPU has no AVX-512: the scalar loops are the only path");
        return;
    }
    int wrong_cols = 0, wrong_img = 0, cases = 0;
    for (int w = 1; w <= 35; w++)
        for (int s = 1; s <= 3; s++)
            for (int p = 0; p <= 3; p++)
                for (int k = 1; k <= 7; k += 2) {
                    const int c = 2, h = 5, sh = s, ph = p > 1 ? 1 : p;
                    int oh = out_size(h, 3, sh, ph), ow = out_size(w, k, s, p);
                    if (oh < 1 || ow < 1 || k > w + 2 * p)
                        continue;
                    size_t rows = (size_t)c * 3 * k, isize = (size_t)c * h * w;
                    size_t ld = (size_t)oh * ow + 5;
                    float *x = floats(isize), *a = floats(rows * ld), *b = floats(rows * ld);
                    float *ia = floats(isize), *ib = floats(isize);
                    fill(x, isize, -1, 1);
                    fill(a, rows * ld, -1, 1);
                    memcpy(b, a, rows * ld * sizeof *a);
                    fill(ia, isize, -1, 1);
                    ia[0] = -0.0f;
                    memcpy(ib, ia, isize * sizeof *ia);
                    nl_kernels_vector(1);
                    nl_im2col_ld(a, (int)ld, x, c, h, w, 3, k, sh, s, ph, p, oh, ow);
                    nl_col2im_ld(ia, a, (int)ld, c, h, w, 3, k, sh, s, ph, p, oh, ow);
                    nl_kernels_vector(0);
                    nl_im2col_ld(b, (int)ld, x, c, h, w, 3, k, sh, s, ph, p, oh, ow);
                    nl_col2im_ld(ib, a, (int)ld, c, h, w, 3, k, sh, s, ph, p, oh, ow);
                    wrong_cols += memcmp(a, b, rows * ld * sizeof *a) != 0;
                    wrong_img += memcmp(ia, ib, isize * sizeof *ia) != 0;
                    cases++;
                    free(x);
                    free(a);
                    free(b);
                    free(ia);
                    free(ib);
                }
    /* A shard of three images at once (row by row, the vector rows on every geometry) against
     * image by image, scalar: widths 1 to 35, strides 1 to 3, windows 1, 3 and 5 padded 0 to 2. */
    int wrong_batch = 0, batches = 0;
    for (int w = 1; w <= 35; w++)
        for (int s = 1; s <= 3; s++)
            for (int k = 1; k <= 5; k += 2)
                for (int p = 0; p <= 2 && p < k; p++) {
                    const int n = 3, c = 2, h = 6, oh = out_size(h, 3, s, 1),
                              ow = out_size(w, k, s, p);
                    if (ow < 1 || k > w + 2 * p)
                        continue;
                    size_t rows = (size_t)c * 3 * k, ld = (size_t)n * oh * ow;
                    size_t isize = (size_t)c * h * w, stride = isize + 3;
                    float *x = floats(n * stride), *a = floats(rows * ld), *b = floats(rows * ld);
                    float *ia = floats(n * stride), *ib = floats(n * stride);
                    fill(x, n * stride, -1, 1);
                    fill(ia, n * stride, -1, 1);
                    memcpy(ib, ia, n * stride * sizeof *ia);
                    nl_kernels_vector(1);
                    nl_im2col_batch(a, x, n, stride, c, h, w, 3, k, s, s, 1, p, oh, ow);
                    nl_col2im_batch(ia, a, n, stride, c, h, w, 3, k, s, s, 1, p, oh, ow);
                    nl_kernels_vector(0);
                    for (int i = 0; i < n; i++) {
                        nl_im2col_ld(b + (size_t)i * oh * ow, (int)ld, x + i * stride, c, h, w, 3,
                                     k, s, s, 1, p, oh, ow);
                        nl_col2im_ld(ib + i * stride, a + (size_t)i * oh * ow, (int)ld, c, h, w, 3,
                                     k, s, s, 1, p, oh, ow);
                    }
                    wrong_batch += memcmp(a, b, rows * ld * sizeof *a) != 0;
                    wrong_batch += memcmp(ia, ib, n * stride * sizeof *ia) != 0;
                    batches++;
                    free(x);
                    free(a);
                    free(b);
                    free(ia);
                    free(ib);
                }
    nl_kernels_vector(1);
    is_int(wrong_batch, 0, "im2col_batch and col2im_batch: image by image's floats (%d shapes)",
           batches);

    /* Max pooling: ties (values on a grid of eight), NaNs, -inf; windows 1 to 3, strides 1 to 3,
     * paddings up to half the window; rows of up to 35 inputs, and of 289 and 301, whose outputs
     * span more than one group of MAXPOOL_BLOCKS blocks of 16 in the vector path. */
    int wrong_pool = 0, pools = 0;
    static const int pool_widths[] = {1,  3,  5,  7,  9,  11, 13, 15, 17,  19,
                                      21, 23, 25, 27, 29, 31, 33, 35, 289, 301};
    for (size_t wi = 0; wi < sizeof pool_widths / sizeof pool_widths[0]; wi++)
        for (int k = 1, w = pool_widths[wi]; k <= 3; k++)
            for (int st = 1; st <= 3; st++)
                for (int p = 0; 2 * p <= k; p++) {
                    const int c = 2, h = 7, oh = out_size(h, k, st, p), ow = out_size(w, k, st, p);
                    if (ow < 1 || k > w + 2 * p)
                        continue;
                    size_t isize = (size_t)c * h * w, osize = (size_t)c * oh * ow;
                    float *x = floats(isize), *o1 = floats(osize), *o2 = floats(osize);
                    int32_t *a1 = calloc(osize, sizeof *a1), *a2 = calloc(osize, sizeof *a2);
                    fill(x, isize, -1, 1);
                    for (size_t i = 0; i < isize; i++)
                        x[i] = floorf(x[i] * 4.0f) / 4.0f;
                    x[isize / 3] = NAN;
                    x[isize / 2] = -INFINITY;
                    for (size_t i = 5; i + 1 < isize; i += 11) { /* ties of zeros' signs */
                        x[i] = -0.0f;
                        x[i + 1] = 0.0f;
                    }
                    nl_kernels_vector(1);
                    nl_maxpool(o1, a1, x, c, h, w, k, k, st, st, p, p, oh, ow);
                    nl_maxpool_naive(o2, a2, x, c, h, w, k, k, st, st, p, p, oh, ow);
                    wrong_pool += memcmp(o1, o2, osize * sizeof *o1) != 0 ||
                                  memcmp(a1, a2, osize * sizeof *a1) != 0;
                    /* the values alone (no indices), both paths */
                    nl_maxpool(o1, NULL, x, c, h, w, k, k, st, st, p, p, oh, ow);
                    wrong_pool += memcmp(o1, o2, osize * sizeof *o1) != 0;
                    nl_maxpool_naive(o1, NULL, x, c, h, w, k, k, st, st, p, p, oh, ow);
                    wrong_pool += memcmp(o1, o2, osize * sizeof *o1) != 0;
                    pools++;
                    free(x);
                    free(o1);
                    free(o2);
                    free(a1);
                    free(a2);
                }
    is_int(wrong_pool, 0,
           "maxpool: vector and naive the same values and indices, and the values without the "
           "indices (%d shapes)",
           pools);
    ok(cases > 1000, "%d im2col/col2im geometries compared", cases);
    is_int(wrong_cols, 0, "im2col: vector and scalar columns the same bit for bit");
    is_int(wrong_img, 0, "col2im: vector and scalar sums the same bit for bit");

    static const int sizes[] = {0, 1, 15, 16, 17, 31, 33, 100, 1000};
    const size_t max = 1000;
    float *x = floats(max), *dy = floats(max), *y1 = floats(max), *y2 = floats(max);
    float *d1 = floats(max), *d2 = floats(max);
    fill(x, max, -1, 1);
    fill(dy, max, -1, 1);
    x[3] = NAN;
    x[5] = -0.0f;
    x[6] = 0.0f;
    x[7] = INFINITY;
    x[8] = -INFINITY;
    int wrong = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = (size_t)sizes[i];
        fill_value(y1, max, 9.0f);
        fill_value(y2, max, 9.0f);
        nl_relu(y1, x, n);
        nl_relu_naive(y2, x, n);
        wrong += memcmp(y1, y2, max * sizeof *y1) != 0;
        for (int set = 0; set <= 1; set++) {
            fill(d1, max, -1, 1);
            d1[5] = -0.0f;
            memcpy(d2, d1, max * sizeof *d1);
            nl_relu_backward(d1, x, dy, n, set);
            nl_relu_backward_naive(d2, x, dy, n, set);
            wrong += memcmp(d1, d2, max * sizeof *d1) != 0;
        }
    }
    is_int(wrong, 0, "relu forward and backward: vector and naive the same bit for bit");

    int wrong_bn = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = (size_t)sizes[i];
        fill_value(y1, max, 9.0f);
        fill_value(y2, max, 9.0f);
        nl_bn_apply(y1, x, n, 0.3f, 1.7f, -0.8f, 0.1f);
        nl_bn_apply_naive(y2, x, n, 0.3f, 1.7f, -0.8f, 0.1f);
        wrong_bn += memcmp(y1, y2, max * sizeof *y1) != 0;
        fill_value(y1, max, 9.0f);
        fill_value(y2, max, 9.0f);
        nl_add(y1, x, dy, n);
        nl_add_naive(y2, x, dy, n);
        wrong_bn += memcmp(y1, y2, max * sizeof *y1) != 0;
    }
    is_int(wrong_bn, 0, "batchnorm's output pass and add: vector and naive the same bit for bit");

    /* The folded output passes, with each activation; x holds NaN, +-0 and +-inf, and values
     * on both sides of 6 after the scaling. */
    int wrong_fold = 0, differ = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = (size_t)sizes[i];
        for (int act = NL_ACT_NONE; act <= NL_ACT_RELU6; act++) {
            fill_value(y1, max, 9.0f);
            fill_value(y2, max, 9.0f);
            nl_scale_shift(y1, x, n, 7.3f, -0.4f, act);
            nl_scale_shift_naive(y2, x, n, 7.3f, -0.4f, act);
            wrong_fold += memcmp(y1, y2, max * sizeof *y1) != 0;
            for (size_t j = 0; j < n; j++) {
                float v = x[j] * 7.3f - 0.4f;
                float want = act == NL_ACT_NONE ? v
                             : v > 0.0f         ? (act == 2 && !(v < 6.0f) ? 6.0f : v)
                                                : 0.0f;
                differ += memcmp(&want, &y2[j], sizeof want) != 0;
            }
            fill_value(y1, max, 9.0f);
            fill_value(y2, max, 9.0f);
            nl_add_act(y1, x, dy, n, act);
            nl_add_act_naive(y2, x, dy, n, act);
            wrong_fold += memcmp(y1, y2, max * sizeof *y1) != 0;
            for (size_t j = 0; j < n; j++) {
                float v = x[j] + dy[j];
                float want = act == NL_ACT_NONE ? v
                             : v > 0.0f         ? (act == 2 && !(v < 6.0f) ? 6.0f : v)
                                                : 0.0f;
                differ += memcmp(&want, &y2[j], sizeof want) != 0;
            }
            /* In place, as conv's per-image pass runs it. */
            memcpy(y1, x, max * sizeof *y1);
            nl_scale_shift(y1, y1, n, 0.5f, 0.25f, act);
            nl_scale_shift_naive(y2, x, n, 0.5f, 0.25f, act);
            wrong_fold += memcmp(y1, y2, n * sizeof *y1) != 0;
        }
    }
    is_int(wrong_fold, 0, "folded output passes: vector and naive the same bit for bit");

    /* Batchnorm's sums over 1 to 3 planes of lengths around the 16 lanes, and its input
     * gradient pass. */
    int wrong_sums = 0, wrong_dx = 0, sums_far = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = (size_t)sizes[i];
        const float *xs = x + 10; /* past the NaN and infinities */
        n = n > (max - 10) / 3 ? (max - 10) / 3 : n;
        for (int planes = 1; planes <= 3; planes++) {
            const size_t stride = n + 5; /* the planes of one channel, apart */
            if ((size_t)planes * stride > max - 10)
                continue;
            double v[4] = {0.5, -0.25, 0.5, -0.25}, w[4] = {0.5, -0.25, 0.5, -0.25};
            nl_bn_shifted_sums(xs, planes, stride, n, 0.3f, &v[0], &v[1]);
            nl_bn_shifted_sums_naive(xs, planes, stride, n, 0.3f, &w[0], &w[1]);
            nl_bn_grad_sums(dy, xs, planes, stride, n, -0.2f, &v[2], &v[3]);
            nl_bn_grad_sums_naive(dy, xs, planes, stride, n, -0.2f, &w[2], &w[3]);
            wrong_sums += memcmp(v, w, sizeof v) != 0;
            double e[4] = {0.5, -0.25, 0.5, -0.25};
            for (int p = 0; p < planes; p++)
                for (size_t j = p * stride; j < p * stride + n; j++) {
                    e[0] += (double)xs[j] - 0.3;
                    e[1] += ((double)xs[j] - 0.3) * ((double)xs[j] - 0.3);
                    e[2] += dy[j];
                    e[3] += (double)dy[j] * ((double)xs[j] + 0.2);
                }
            for (int j = 0; j < 4; j++)
                sums_far += fabs(v[j] - e[j]) > 1e-4 * (1.0 + fabs(e[j]));
        }
        for (int set = 0; set <= 1; set++) {
            fill(y1, max, -1, 1);
            memcpy(y2, y1, max * sizeof *y1);
            nl_bn_backward_apply(y1, dy, xs, n, 0.7f, 0.1f, -0.3f, 0.2f, 1.9f, set);
            nl_bn_backward_apply_naive(y2, dy, xs, n, 0.7f, 0.1f, -0.3f, 0.2f, 1.9f, set);
            wrong_dx += memcmp(y1, y2, max * sizeof *y1) != 0;
        }
    }
    is_int(wrong_sums, 0, "batchnorm's sums: vector and naive the same bit for bit");
    is_int(sums_far, 0, "batchnorm's sums: the sums of the values, to float rounding");
    is_int(wrong_dx, 0, "batchnorm's input gradient: vector and naive the same bit for bit");
    is_int(differ, 0, "folded output passes: act(x * s + t) and act(a + b) as written out");
    free(x);
    free(dy);
    free(y1);
    free(y2);
    free(d1);
    free(d2);
}

/* ---- layers against direct loops ---- */

struct run {
    struct nl_layer l;
    int n;
    size_t in_count, out_count;
    float *in, *w, *out, *scratch, *din, *dw, *dout;
    void *aux;
};

static void run_make(struct run *r, const char *kind, int n)
{
    struct nl_error err = {0};
    r->l.ops = nl_layer_kind(kind);
    r->l.ninputs = 1;
    snprintf(r->l.name, sizeof r->l.name, "%s", kind);
    if (!r->l.ops || r->l.ops->setup(&r->l, &err) != 0) {
        diag("setup of %s failed: %s", kind, err.msg);
        exit(1);
    }
    r->n = n;
    r->in_count = (size_t)n * nl_shape_size(r->l.in[0]);
    r->out_count = (size_t)n * nl_shape_size(r->l.out);
    r->in = floats(r->in_count);
    r->din = floats(r->in_count);
    r->out = floats(r->out_count);
    r->dout = floats(r->out_count);
    r->w = floats(r->l.param_count);
    r->dw = floats(r->l.param_count);
    r->scratch = floats(r->l.scratch_fixed + (size_t)n * r->l.scratch_per_sample);
    r->aux = calloc((size_t)n * r->l.aux_bytes + 1, 1);
    fill(r->in, r->in_count, -1, 1);
    fill(r->dout, r->out_count, -1, 1);
    fill(r->w, r->l.param_count, -1, 1);
}

static void run_forward_as(struct run *r, int training)
{
    struct nl_fwd f = {.n = r->n,
                       .in = {r->in},
                       .out = r->out,
                       .w = r->w,
                       .aux = r->aux,
                       .scratch = r->scratch,
                       .training = training};
    fill_value(r->scratch, r->l.scratch_fixed + (size_t)r->n * r->l.scratch_per_sample, NAN);
    fill_value(r->out, r->out_count, NAN);
    r->l.ops->forward(&r->l, &f);
}

static void run_forward(struct run *r)
{
    run_forward_as(r, 0);
}

static void run_backward(struct run *r)
{
    struct nl_bwd b = {.n = r->n,
                       .in = {r->in},
                       .out = r->out,
                       .dout = r->dout,
                       .din = {r->din},
                       .w = r->w,
                       .dw = r->dw,
                       .aux = r->aux,
                       .scratch = r->scratch};
    fill_value(r->scratch, r->l.scratch_fixed + (size_t)r->n * r->l.scratch_per_sample, NAN);
    memset(r->din, 0, r->in_count * sizeof *r->din);
    memset(r->dw, 0, r->l.param_count * sizeof *r->dw);
    r->l.ops->backward(&r->l, &b);
}

static void run_free(struct run *r)
{
    free(r->in);
    free(r->din);
    free(r->out);
    free(r->dout);
    free(r->w);
    free(r->dw);
    free(r->scratch);
    free(r->aux);
}

static double tol_for(const float *want, size_t count)
{
    return 1e-5 * (1.0 + max_abs(want, count));
}

struct conv_case {
    int n, c, h, w, f, kh, kw, sh, sw, ph, pw, no_bias;
};

/* The direct convolution and its gradients, seven loops each: out (n, F, oh, ow) from x
 * (n, C, H, W) and wt [F, C, kh, kw]; din and dw (weight part) += what dout sends back. */
static void conv_direct(const struct conv_case *cc, int oh, int ow, const float *x,
                        const float *weight, const float *bias, const float *dout, float *out,
                        float *din, float *dw)
{
    int c = cc->c, h = cc->h, w = cc->w, f = cc->f, kh = cc->kh, kw = cc->kw;

    for (int s = 0; s < cc->n; s++)
        for (int fo = 0; fo < f; fo++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    size_t o = (((size_t)s * f + fo) * oh + oy) * ow + ox;
                    double sum = bias ? bias[fo] : 0.0;
                    for (int ci = 0; ci < c; ci++)
                        for (int ki = 0; ki < kh; ki++)
                            for (int kj = 0; kj < kw; kj++) {
                                int iy = oy * cc->sh - cc->ph + ki, ix = ox * cc->sw - cc->pw + kj;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                                    continue;
                                size_t i = (((size_t)s * c + ci) * h + iy) * w + ix;
                                size_t wi = (((size_t)fo * c + ci) * kh + ki) * kw + kj;
                                sum += (double)weight[wi] * x[i];
                                din[i] += weight[wi] * dout[o];
                                dw[wi] += x[i] * dout[o];
                            }
                    out[o] = (float)sum;
                }
}

/* The relative tolerance of test_conv: 1e-5 of (1 + the largest value compared), except for
 * Winograd's lowerings (main says why theirs is wider); the largest error seen relative to that
 * scale is kept for a diagnostic. */
static double conv_rel = 1e-5, conv_worst;

static double conv_check(const float *got, const float *want, size_t count)
{
    const double scale = 1.0 + max_abs(want, count), d = max_diff(got, want, count);
    if (d / scale > conv_worst)
        conv_worst = d / scale;
    return d;
}

static void test_conv(const struct conv_case *cc, enum nl_lowering lowering)
{
    struct run r = {.l = {.lowering = lowering,
                          .filters = cc->f,
                          .kh = cc->kh,
                          .kw = cc->kw,
                          .sh = cc->sh,
                          .sw = cc->sw,
                          .ph = cc->ph,
                          .pw = cc->pw,
                          .no_bias = cc->no_bias,
                          .in = {{cc->c, cc->h, cc->w}}}};
    char what[128];

    run_make(&r, "conv", cc->n);
    snprintf(what, sizeof what, "conv %d %dx%d stride %dx%d pad %dx%d%s on %dx%dx%dx%d, %s", cc->f,
             cc->kh, cc->kw, cc->sh, cc->sw, cc->ph, cc->pw, cc->no_bias ? " no bias" : "", cc->n,
             cc->c, cc->h, cc->w, nl_lowering_name(r.l.lower));
    int oh = r.l.out.h, ow = r.l.out.w, k = cc->c * cc->kh * cc->kw;
    const float *wt = r.w, *bias = cc->no_bias ? NULL : r.w + (size_t)cc->f * k;
    float *out = floats(r.out_count), *din = floats(r.in_count), *dw = floats(r.l.param_count);

    conv_direct(cc, oh, ow, r.in, wt, bias, r.dout, out, din, dw);
    if (bias)
        for (int s = 0; s < cc->n; s++)
            for (int fo = 0; fo < cc->f; fo++)
                for (int i = 0; i < oh * ow; i++)
                    dw[(size_t)cc->f * k + fo] += r.dout[((size_t)s * cc->f + fo) * oh * ow + i];

    run_forward(&r);
    is_float(conv_check(r.out, out, r.out_count), 0.0, conv_rel * (1.0 + max_abs(out, r.out_count)),
             "%s: forward matches the direct loops", what);
    run_backward(&r);
    is_float(conv_check(r.din, din, r.in_count), 0.0, conv_rel * (1.0 + max_abs(din, r.in_count)),
             "%s: input gradient matches the direct loops", what);
    is_float(conv_check(r.dw, dw, r.l.param_count), 0.0,
             conv_rel * (1.0 + max_abs(dw, r.l.param_count)),
             "%s: weight gradient matches the direct loops", what);
    free(out);
    free(din);
    free(dw);
    run_free(&r);
}

/* The 2x2-plane kernels against their naive twins: shards that fill 16 lanes, leave a tail and
 * hold one image; channel and filter counts off multiples of 4; the input gradient added into
 * non-zero starting values. Both twins sum the same terms in the same order, the vector path in
 * fused multiply-adds, the naive one in double: they agree to rounding. With the vector paths
 * off the kernels are the naive loops. */
static void test_conv_plane2_twins(void)
{
    static const int cases[][3] = {/* n, c, f */ {16, 32, 16},
                                   {21, 5, 7},
                                   {1, 3, 4},
                                   {4, 64, 9},
                                   {40, 6, 5},
                                   {33, 4, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i][0], c = cases[i][1], f = cases[i][2];
        const size_t in = (size_t)n * c * 4, out = (size_t)n * f * 4, nw = (size_t)f * c * 9;
        float *x = floats(in), *w = floats(nw), *bias = floats((size_t)f), *dy = floats(out);
        float *y[2] = {floats(out), floats(out)}, *dx[3] = {floats(in), floats(in), floats(in)};
        float *scratch = floats(nl_conv_plane2_scratch(c, f));
        fill(x, in, -1, 1);
        fill(w, nw, -1, 1);
        fill(bias, (size_t)f, -1, 1);
        fill(dy, out, -1, 1);
        fill(dx[0], in, -1, 1);
        memcpy(dx[1], dx[0], in * sizeof(float));
        memcpy(dx[2], dx[0], in * sizeof(float));
        nl_conv_plane2_naive(y[0], x, w, i % 2 ? NULL : bias, n, c, f);
        nl_conv_plane2(y[1], x, w, i % 2 ? NULL : bias, n, c, f, scratch);
        is_float(max_diff(y[0], y[1], out), 0.0, 1e-5 * (1.0 + max_abs(y[0], out)),
                 "conv_plane2 on %dx%dx2x2, %d filters%s: matches the naive twin", n, c, f,
                 i % 2 ? "" : " and a bias");
        nl_conv_plane2_din_naive(dx[0], dy, w, n, c, f);
        nl_conv_plane2_din(dx[1], dy, w, n, c, f, scratch);
        is_float(max_diff(dx[0], dx[1], in), 0.0, 1e-5 * (1.0 + max_abs(dx[0], in)),
                 "conv_plane2_din on %dx%dx2x2, %d filters: matches the naive twin", n, c, f);
        nl_kernels_vector(0);
        nl_conv_plane2_din(dx[2], dy, w, n, c, f, scratch);
        nl_kernels_vector(1);
        ok(memcmp(dx[0], dx[2], in * sizeof(float)) == 0,
           "conv_plane2_din on %dx%dx2x2, %d filters, vector paths off: the naive twin", n, c, f);
        /* Both against the direct sum over the 3x3 window with its padding. */
        float *ref = floats((size_t)f * 4);
        nl_conv_s1_naive(ref, x + (size_t)(n - 1) * c * 4, w, i % 2 ? NULL : bias, c, 2, 2, f, 3, 3,
                         1, 1, 2, 2, 0);
        is_float(max_diff(ref, y[1] + (size_t)(n - 1) * f * 4, (size_t)f * 4), 0.0,
                 1e-5 * (1.0 + max_abs(ref, (size_t)f * 4)),
                 "conv_plane2 on %dx%dx2x2, %d filters: the last image is the direct sum", n, c, f);
        free(ref);
        if (n > 16) {
            /* each block of 16 images sums on its own: the first 16 alone, bit for bit */
            float *y16 = floats((size_t)16 * f * 4);
            nl_conv_plane2(y16, x, w, i % 2 ? NULL : bias, 16, c, f, scratch);
            ok(memcmp(y16, y[1], (size_t)16 * f * 4 * sizeof(float)) == 0,
               "conv_plane2 on %dx%dx2x2, %d filters: its first 16 images as a shard of 16", n, c,
               f);
            free(y16);
        }
        free(x);
        free(w);
        free(bias);
        free(dy);
        free(scratch);
        for (int j = 0; j < 2; j++)
            free(y[j]);
        for (int j = 0; j < 3; j++)
            free(dx[j]);
    }
}

/* The stride-2 lanes kernel against its naive twin and the direct sum: 2x2 and 4x4 outputs
 * (inputs of even and odd size), shards of 16, 5 and 21 images, channel and filter counts off
 * multiples of 4, chunks of channels (conv_plane.c: the padded planes in 32 KiB); an 8x8 output,
 * which the vector path leaves to the naive loops. */
static void test_conv_s2_lanes_twins(void)
{
    static const int cases[][5] = {/* n, c, h, f */ {16, 8, 4, 8},
                                   {5, 3, 3, 5},
                                   {21, 70, 4, 6},
                                   {16, 40, 8, 3},
                                   {3, 5, 7, 17},
                                   {4, 2, 16, 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i][0], c = cases[i][1], h = cases[i][2], f = cases[i][3];
        const int o = (h - 1) / 2 + 1;
        const size_t in = (size_t)n * c * h * h, out = (size_t)n * f * o * o,
                     nw = (size_t)f * c * 9;
        float *x = floats(in), *w = floats(nw), *bias = floats((size_t)f);
        float *y[2] = {floats(out), floats(out)}, *ref = floats((size_t)f * o * o);
        float *scratch = floats(nl_conv_s2_lanes_scratch(c, h, h, f));
        fill(x, in, -1, 1);
        fill(w, nw, -1, 1);
        fill(bias, (size_t)f, -1, 1);
        const float *b = i % 2 ? NULL : bias;
        nl_conv_s2_lanes_naive(y[0], x, w, b, n, c, h, h, f);
        nl_conv_s2_lanes(y[1], x, w, b, n, c, h, h, f, scratch);
        is_float(max_diff(y[0], y[1], out), 0.0, 1e-5 * (1.0 + max_abs(y[0], out)),
                 "conv_s2_lanes on %dx%dx%dx%d, %d filters%s: matches the naive twin", n, c, h, h,
                 f, b ? " and a bias" : "");
        /* image n - 1 against im2col and a plain product */
        float *cols = floats((size_t)c * 9 * o * o);
        nl_im2col(cols, x + (size_t)(n - 1) * c * h * h, c, h, h, 3, 3, 2, 2, 1, 1, o, o);
        nl_sgemm_naive(0, 0, f, o * o, c * 9, 1.0f, w, c * 9, cols, o * o, 0.0f, ref, o * o);
        if (b)
            for (int fo = 0; fo < f; fo++)
                for (int q = 0; q < o * o; q++)
                    ref[fo * o * o + q] += b[fo];
        is_float(max_diff(ref, y[1] + (size_t)(n - 1) * f * o * o, (size_t)f * o * o), 0.0,
                 1e-5 * (1.0 + max_abs(ref, (size_t)f * o * o)),
                 "conv_s2_lanes on %dx%dx%dx%d, %d filters: the last image is im2col's product", n,
                 c, h, h, f);
        free(cols);
        free(ref);
        free(x);
        free(w);
        free(bias);
        free(scratch);
        free(y[0]);
        free(y[1]);
    }
}

/* The phase planes' unrolling (nnlab/conv_s2.h) against nl_im2col and nl_col2im of the same
 * stride-2 window, bit for bit, the adjoint adding into an image that holds values already. */
static void test_s2_twins(int c, int h, int w, int kh, int kw, int ph, int pw)
{
    const int oh = (h + 2 * ph - kh) / 2 + 1, ow = (w + 2 * pw - kw) / 2 + 1;
    const size_t in = (size_t)c * h * w, kp = (size_t)c * kh * kw * oh * ow;
    const size_t nph = nl_s2_floats(c, h, ow);
    char what[96];

    snprintf(what, sizeof what, "phase planes of %dx%dx%d, %dx%d stride 2 pad %dx%d, %s", c, h, w,
             kh, kw, ph, pw, nl_kernels_vector_on() ? "vector" : "scalar");
    if (!nl_s2_fits(h, w, kh, kw, 2, 2, ph, pw, oh, ow)) {
        ok(0, "%s: fits", what);
        return;
    }
    struct nl_s2 *plan = malloc(sizeof *plan);
    float *img = floats(in), *phases = floats(nph), *want = floats(kp), *got = floats(kp);
    float *d1 = floats(in), *d2 = floats(in);
    if (!plan) {
        diag("out of memory");
        exit(1);
    }
    fill(img, in, -1, 1);
    fill(d1, in, -1, 1);
    memcpy(d2, d1, in * sizeof *d2);
    nl_s2_plan(plan, c, h, w, kh, kw, ph, pw, oh, ow);
    nl_im2col(want, img, c, h, w, kh, kw, 2, 2, ph, pw, oh, ow);
    fill_value(phases, nph, NAN);
    fill_value(got, kp, NAN);
    nl_s2_split(phases, img, plan);
    nl_s2_cols(got, phases, plan);
    ok(memcmp(got, want, kp * sizeof *got) == 0, "%s: the columns are nl_im2col's", what);
    fill(want, kp, -1, 1);
    nl_col2im(d1, want, c, h, w, kh, kw, 2, 2, ph, pw, oh, ow);
    fill_value(phases, nph, NAN);
    nl_s2_split(phases, d2, plan);
    nl_s2_cols_adjoint(phases, want, plan);
    nl_s2_merge(d2, phases, plan);
    ok(memcmp(d1, d2, in * sizeof *d1) == 0, "%s: folded back as nl_col2im adds", what);
    free(plan);
    free(img);
    free(phases);
    free(want);
    free(got);
    free(d1);
    free(d2);
}

/* PHASES against SAMPLE on the same layer and data: the same products of the same columns, so
 * the same output and gradients bit for bit. */
static void test_s2_layer(const struct conv_case *cc)
{
    struct run a = {.l = {.lowering = NL_LOWER_SAMPLE,
                          .filters = cc->f,
                          .kh = cc->kh,
                          .kw = cc->kw,
                          .sh = cc->sh,
                          .sw = cc->sw,
                          .ph = cc->ph,
                          .pw = cc->pw,
                          .no_bias = cc->no_bias,
                          .in = {{cc->c, cc->h, cc->w}}}};
    struct run b = a;

    b.l.lowering = NL_LOWER_PHASES;
    run_make(&a, "conv", cc->n);
    run_make(&b, "conv", cc->n);
    memcpy(b.in, a.in, a.in_count * sizeof *a.in);
    memcpy(b.dout, a.dout, a.out_count * sizeof *a.dout);
    memcpy(b.w, a.w, a.l.param_count * sizeof *a.w);
    run_forward(&a);
    run_forward(&b);
    run_backward(&a);
    run_backward(&b);
    ok(b.l.lower == NL_LOWER_PHASES && memcmp(a.out, b.out, a.out_count * sizeof *a.out) == 0 &&
           memcmp(a.din, b.din, a.in_count * sizeof *a.din) == 0,
       "conv %d %dx%d stride 2 pad %d on %dx%dx%dx%d, %s: the phase planes' output and input "
       "gradient are SAMPLE's bit for bit",
       cc->f, cc->kh, cc->kw, cc->ph, cc->n, cc->c, cc->h, cc->w,
       nl_kernels_vector_on() ? "vector" : "scalar");
    /* The weight gradient is taken turned (backward_phases): the same sums where the products
     * are nnlab's (nl_sgemm_own) or OpenBLAS's SkylakeX family, which sums c and c^T alike;
     * OpenBLAS's other kernels (its AVX2 ones, with the vector paths off) sum them in other
     * orders. */
    const char *note = nl_kernels_blas_note();
    const int alike = nl_sgemm_own(1.0f) || strstr(note, "SkylakeX") ||
                      strstr(note, "Cooperlake") || strstr(note, "SapphireRapids");
    if (alike)
        ok(memcmp(a.dw, b.dw, a.l.param_count * sizeof *a.dw) == 0,
           "conv %d %dx%d stride 2 pad %d on %dx%dx%dx%d, %s: the weight gradient is SAMPLE's bit "
           "for bit",
           cc->f, cc->kh, cc->kw, cc->ph, cc->n, cc->c, cc->h, cc->w,
           nl_kernels_vector_on() ? "vector" : "scalar");
    else
        is_float(max_diff(a.dw, b.dw, a.l.param_count), 0.0,
                 1e-5 * (1.0 + max_abs(a.dw, a.l.param_count)),
                 "conv %d %dx%d stride 2 pad %d on %dx%dx%dx%d, %s: the weight gradient is "
                 "SAMPLE's to rounding (%s)",
                 cc->f, cc->kh, cc->kw, cc->ph, cc->n, cc->c, cc->h, cc->w,
                 nl_kernels_vector_on() ? "vector" : "scalar", note);
    run_free(&a);
    run_free(&b);
}

/* The direct weight gradient against its naive twin, added into non-zero starting values, to
 * rounding; with the vector paths off, bit for bit. */
static void test_conv_s1_dweight_twins(void)
{
    static const int cases[][8] = {
        /* c, h, w, f, kh, kw, ph, pw */
        {16, 28, 28, 16, 3, 3, 1, 1}, {3, 7, 9, 5, 3, 3, 1, 1}, {2, 6, 5, 9, 3, 5, 2, 1},
        {5, 14, 14, 7, 3, 3, 1, 1},   {1, 1, 1, 3, 3, 3, 1, 1}, {2, 4, 37, 6, 3, 3, 1, 1},
        {3, 9, 33, 2, 3, 3, 0, 0},    {2, 8, 8, 4, 5, 3, 2, 2}, {1, 3, 17, 1, 1, 3, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *k = cases[i];
        const int c = k[0], h = k[1], w = k[2], f = k[3], kh = k[4], kw = k[5], ph = k[6],
                  pw = k[7];
        const int oh = h + 2 * ph - kh + 1, ow = w + 2 * pw - kw + 1;
        const size_t in = (size_t)c * h * w, out = (size_t)f * oh * ow,
                     nw = (size_t)f * c * kh * kw;
        float *x = floats(in), *dy = floats(out), *dw[3];
        fill(x, in, -1, 1);
        fill(dy, out, -1, 1);
        for (int j = 0; j < 3; j++)
            dw[j] = floats(nw);
        fill(dw[0], nw, -1, 1);
        memcpy(dw[1], dw[0], nw * sizeof(float));
        memcpy(dw[2], dw[0], nw * sizeof(float));
        nl_conv_s1_dweight_naive(dw[0], dy, x, c, h, w, f, kh, kw, ph, pw, oh, ow);
        nl_conv_s1_dweight(dw[1], dy, x, c, h, w, f, kh, kw, ph, pw, oh, ow);
        nl_kernels_vector(0);
        nl_conv_s1_dweight(dw[2], dy, x, c, h, w, f, kh, kw, ph, pw, oh, ow);
        nl_kernels_vector(1);
        is_float(max_diff(dw[0], dw[1], nw), 0.0, 1e-5 * (1.0 + (double)oh * ow),
                 "conv_s1_dweight %dx%dx%d, %d filters %dx%d pad %dx%d: matches the naive twin", c,
                 h, w, f, kh, kw, ph, pw);
        ok(memcmp(dw[0], dw[2], nw * sizeof(float)) == 0,
           "conv_s1_dweight %dx%dx%d: the scalar path is the twin bit for bit", c, h, w);
        for (int j = 0; j < 3; j++)
            free(dw[j]);
        free(x);
        free(dy);
    }
}

/* The direct stride-1 convolution against its naive twin: with a bias, without, and added into
 * non-zero outputs, to rounding (the vector path fuses multiply and add); the floats after the
 * output stay untouched. With the vector paths off it is the twin bit for bit. */
static void test_conv_s1_twins(void)
{
    static const int cases[][8] = {
        /* c, h, w, f, kh, kw, ph, pw */
        {16, 28, 28, 16, 3, 3, 1, 1}, {3, 7, 9, 5, 3, 3, 1, 1},  {2, 6, 5, 9, 3, 5, 2, 1},
        {5, 14, 14, 17, 3, 3, 1, 1},  {1, 1, 1, 3, 3, 3, 1, 1},  {2, 4, 37, 8, 3, 3, 1, 1},
        {3, 9, 33, 2, 3, 3, 0, 0},    {2, 8, 8, 7, 5, 5, 2, 2},  {4, 5, 6, 3, 1, 1, 0, 0},
        {2, 10, 12, 11, 2, 8, 1, 7},  {1, 3, 17, 1, 3, 3, 1, 1}, {32, 7, 7, 32, 3, 3, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *k = cases[i];
        const int c = k[0], h = k[1], w = k[2], f = k[3], kh = k[4], kw = k[5], ph = k[6],
                  pw = k[7];
        const int oh = h + 2 * ph - kh + 1, ow = w + 2 * pw - kw + 1;
        const size_t in = (size_t)c * h * w, out = (size_t)f * oh * ow,
                     nw = (size_t)f * c * kh * kw;
        float *x = floats(in), *wt = floats(nw), *bias = floats((size_t)f), *start = floats(out);
        float *y[2];
        double diff = 0.0, tol = 0.0;
        int guard = 1, scalar_same = 1;
        fill(x, in, -1, 1);
        fill(wt, nw, -1, 1);
        fill(bias, (size_t)f, -1, 1);
        fill(start, out, -1, 1);
        for (int j = 0; j < 2; j++)
            y[j] = floats(out + 16);
        for (int mode = 0; mode < 3; mode++) {
            const float *b = mode == 0 ? bias : NULL;
            const int acc = mode == 2;
            for (int j = 0; j < 2; j++) {
                memcpy(y[j], start, out * sizeof(float));
                for (int g = 0; g < 16; g++)
                    y[j][out + g] = 7.0f;
            }
            nl_conv_s1_naive(y[0], x, wt, b, c, h, w, f, kh, kw, ph, pw, oh, ow, acc);
            nl_conv_s1(y[1], x, wt, b, c, h, w, f, kh, kw, ph, pw, oh, ow, acc);
            const double d = max_diff(y[0], y[1], out), t = tol_for(y[0], out) * (1.0 + c * kh);
            diff = d > diff ? d : diff;
            tol = t > tol ? t : tol;
            for (int g = 0; g < 16; g++)
                guard &= y[1][out + g] == 7.0f;
            memcpy(y[1], start, out * sizeof(float));
            nl_kernels_vector(0);
            nl_conv_s1(y[1], x, wt, b, c, h, w, f, kh, kw, ph, pw, oh, ow, acc);
            nl_kernels_vector(1);
            scalar_same &= memcmp(y[0], y[1], out * sizeof(float)) == 0;
        }
        is_float(
            diff, 0.0, tol,
            "conv_s1 %dx%dx%d, %d filters %dx%d pad %dx%d: matches the naive twin with a bias, "
            "without, and added in",
            c, h, w, f, kh, kw, ph, pw);
        ok(guard && scalar_same,
           "conv_s1 %dx%dx%d: nothing written past the output; the scalar path is the twin", c, h,
           w);
        free(x);
        free(wt);
        free(bias);
        free(start);
        free(y[0]);
        free(y[1]);
    }
}

/* Winograd's transforms, the vector paths against their naive twins on one geometry, to
 * rounding (they skip zero coefficients and fuse products, so the last bits differ), and each
 * adjoint as the adjoint: <T x, y> = <x, T^T y> for random x and y. */
static void test_wino_twins(int m, int n, int c, int h, int w, int f, int ph, int pw)
{
    struct nl_wino p;
    const int oh = h + 2 * ph - 2, ow = w + 2 * pw - 2;
    nl_wino_plan(&p, m, c, h, w, f, ph, pw, oh, ow);
    const size_t aa = (size_t)p.a * p.a, tt = (size_t)n * p.tiles;
    const size_t nu = aa * f * c, nv = aa * c * tt, nm = aa * f * tt;
    const size_t nin = (size_t)n * c * h * w, nout = (size_t)n * f * oh * ow,
                 nw = (size_t)f * c * 9;
    float *x = floats(nin), *wt = floats(nw), *u[2] = {floats(nu), floats(nu)};
    float *v[2] = {floats(nv), floats(nv)}, *mm = floats(nm), *y[2] = {floats(nout), floats(nout)};
    float *dy = floats(nout), *dm[2] = {floats(nm), floats(nm)},
          *dx[2] = {floats(nin), floats(nin)};
    float *dwt[2] = {floats(nw), floats(nw)}, *bias = floats((size_t)f), *sc = floats((size_t)f);
    double worst = 0.0;

    fill(x, nin, -1, 1);
    fill(wt, nw, -1, 1);
    fill(mm, nm, -1, 1);
    fill(dy, nout, -1, 1);
    fill(bias, (size_t)f, -1, 1);
    fill(sc, (size_t)f, 0.5, 1.5);
    for (int i = 0; i < 2; i++) {
        fill_value(dx[i], nin, 0.25f);
        fill_value(dwt[i], nw, -0.5f);
    }
    nl_wino_filter_naive(u[0], wt, &p);
    nl_wino_filter(u[1], wt, &p);
    worst = fmax(worst, max_diff(u[0], u[1], nu) / (1.0 + max_abs(u[0], nu)));
    nl_wino_input_naive(v[0], x, n, &p);
    nl_wino_input(v[1], x, n, &p);
    worst = fmax(worst, max_diff(v[0], v[1], nv) / (1.0 + max_abs(v[0], nv)));
    if (n == 1 && c > 1) {
        /* two blocks of channels, each into its rows of a wider v (vc), both paths */
        float *vb = floats(nv);
        int same = 1;
        for (int naive = 0; naive <= 1; naive++) {
            fill_value(vb, nv, NAN);
            for (int b = 0; b < 2; b++) {
                const int c0 = b ? c / 3 : 0, c1 = b ? c : c / 3;
                struct nl_wino q = p;
                q.c = c1 - c0;
                q.vc = c;
                if (q.c == 0)
                    continue;
                (naive ? nl_wino_input_naive : nl_wino_input)(vb + (size_t)c0 * tt,
                                                              x + (size_t)c0 * h * w, 1, &q);
            }
            same &= memcmp(vb, v[naive ? 0 : 1], nv * sizeof *vb) == 0;
        }
        ok(same,
           "F(%dx%d): nl_wino_input of channels [0, %d) and [%d, %d) of %dx%dx%d into a v of "
           "%d rows, and its naive twin: the whole calls' floats",
           m, m, c / 3, c / 3, c, c, h, w, c);
        free(vb);
    }
    if (n == 1 && p.tiles / p.tiles_x >= 2) {
        /* Bands of tile rows (a split call's parts): each band planned with its origin moved by
         * the padding, its input transform the whole one's tiles of those rows, and its output
         * transform (nl_wino.op) into its rows of the whole output, both paths: the whole
         * calls' floats, bit for bit. */
        const int ty = p.tiles / p.tiles_x, bands = ty >= 3 ? 3 : 2;
        float *vb = floats(nv), *mb = floats(nm), *yb = floats(nout), *yw = floats(nout);
        int same_in = 1, same_out = 1;
        for (int naive = 0; naive <= 1; naive++) {
            (naive ? nl_wino_output_naive : nl_wino_output)(yw, mm, bias, NULL, NULL, 0, 1, &p);
            fill_value(yb, nout, NAN);
            for (int b = 0; b < bands; b++) {
                const int r0 = ty * b / bands, r1 = ty * (b + 1) / bands;
                const int y0 = r0 * m, y1 = r1 * m < oh ? r1 * m : oh;
                struct nl_wino q;
                nl_wino_plan(&q, m, c, h, w, f, ph - y0, pw, y1 - y0, ow);
                q.op = oh * ow;
                const size_t bt = (size_t)q.tiles, t0 = (size_t)r0 * p.tiles_x;
                (naive ? nl_wino_input_naive : nl_wino_input)(vb, x, 1, &q);
                for (size_t row = 0; row < aa * (size_t)c; row++)
                    same_in &= memcmp(vb + row * bt, v[naive ? 0 : 1] + row * tt + t0,
                                      bt * sizeof *vb) == 0;
                for (size_t row = 0; row < aa * (size_t)f; row++)
                    memcpy(mb + row * bt, mm + row * tt + t0, bt * sizeof *mb);
                (naive ? nl_wino_output_naive : nl_wino_output)(yb + (size_t)y0 * ow, mb, bias,
                                                                NULL, NULL, 0, 1, &q);
            }
            same_out &= memcmp(yb, yw, nout * sizeof *yb) == 0;
        }
        ok(same_in && same_out,
           "F(%dx%d) on %dx%dx%d, %d filters, pad %d: %d bands of tile rows, input and output "
           "transforms (origin moved, op), both paths: the whole calls' floats",
           m, m, c, h, w, f, ph, bands);
        free(vb);
        free(mb);
        free(yb);
        free(yw);
    }
    /* The transposed input transform: the vector path (where it takes the shape) has
     * nl_wino_input's values to the bit, each matrix transposed, and the naive twin the naive
     * transform's. */
    {
        float *vt[2] = {floats(nv), floats(nv)};
        size_t off[2] = {0, 0};
        nl_wino_input_t_naive(vt[0], x, n, &p);
        nl_wino_input_t(vt[1], x, n, &p);
        for (size_t xi = 0; xi < aa; xi++)
            for (size_t t = 0; t < tt; t++)
                for (int ch = 0; ch < c; ch++) {
                    const size_t at = (xi * c + (size_t)ch) * tt + t,
                                 at_t = (xi * tt + t) * c + (size_t)ch;
                    off[0] += memcmp(&vt[0][at_t], &v[0][at], sizeof(float)) != 0;
                    off[1] +=
                        memcmp(&vt[1][at_t], &v[nl_wino_input_t_fast(&p)][at], sizeof(float)) != 0;
                }
        ok(off[0] == 0 && off[1] == 0,
           "winograd F(%dx%d) on %dx%dx%dx%d: the transposed input transform is the input "
           "transform's, %s path (%zu and %zu values differ)",
           m, m, n, c, h, w, nl_wino_input_t_fast(&p) ? "16 channels a vector" : "naive", off[0],
           off[1]);
        free(vt[0]);
        free(vt[1]);
    }
    /* mm turned (nl_wino.mt: each matrix (T, mt), here mt = f + 3, a wider row): both paths
     * give the outputs of mm as it is, bit for bit */
    float *mt = floats(aa * tt * (size_t)(f + 3)), *yt = floats(nout);
    int turned_same = 1;
    for (size_t xi = 0; xi < aa; xi++)
        for (size_t t = 0; t < tt; t++)
            for (int g = 0; g < f + 3; g++)
                mt[(xi * tt + t) * (size_t)(f + 3) + (size_t)g] =
                    g < f ? mm[(xi * f + (size_t)g) * tt + t] : NAN;
    for (int act = 0; act <= 2; act++) {
        const float *s = act ? sc : NULL, *t = act ? bias : NULL;
        struct nl_wino q = p;
        q.mt = f + 3;
        fill_value(y[1], nout, NAN);
        nl_wino_output_naive(y[0], mm, bias, s, t, act, n, &p);
        nl_wino_output(y[1], mm, bias, s, t, act, n, &p);
        worst = fmax(worst, max_diff(y[0], y[1], nout) / (1.0 + max_abs(y[0], nout)));
        for (int naive = 0; naive <= 1; naive++) {
            fill_value(yt, nout, NAN);
            (naive ? nl_wino_output_naive : nl_wino_output)(yt, mt, bias, s, t, act, n, &q);
            turned_same &= memcmp(yt, y[naive ? 0 : 1], nout * sizeof *yt) == 0;
        }
    }
    ok(turned_same,
       "winograd F(%dx%d) output transform on %dx%dx%dx%d from mm turned (mt), vector path and "
       "naive twin: the outputs from mm as it is, bit for bit",
       m, m, n, f, oh, ow);
    free(mt);
    free(yt);
    nl_wino_output_adjoint_naive(dm[0], dy, n, &p);
    nl_wino_output_adjoint(dm[1], dy, n, &p);
    worst = fmax(worst, max_diff(dm[0], dm[1], nm) / (1.0 + max_abs(dm[0], nm)));
    nl_wino_input_adjoint_naive(dx[0], v[0], n, &p);
    nl_wino_input_adjoint(dx[1], v[0], n, &p);
    worst = fmax(worst, max_diff(dx[0], dx[1], nin) / (1.0 + max_abs(dx[0], nin)));
    nl_wino_filter_adjoint_naive(dwt[0], u[0], &p);
    nl_wino_filter_adjoint(dwt[1], u[0], &p);
    worst = fmax(worst, max_diff(dwt[0], dwt[1], nw) / (1.0 + max_abs(dwt[0], nw)));
    is_float(worst, 0.0, 1e-5,
             "winograd F(%dx%d) transforms on %dx%dx%dx%d, %d filters, pad %dx%d: vector paths "
             "match the naive twins",
             m, m, n, c, h, w, f, ph, pw);

    /* Adjoints: <B(x), v> against <x, B^T(v)> and likewise for the filter and output, to within
     * the rounding of the float transforms: relative to the sums of the products' magnitudes,
     * since the products cancel (a wrong adjoint is off by a share of those sums). */
    double lhs[3] = {0}, rhs[3] = {0}, mag[3] = {0};
    fill(v[1], nv, -1, 1);
    fill(u[1], nu, -1, 1);
    memset(dx[0], 0, nin * sizeof(float));
    memset(dwt[0], 0, nw * sizeof(float));
    nl_wino_input_adjoint_naive(dx[0], v[1], n, &p);
    nl_wino_filter_adjoint_naive(dwt[0], u[1], &p);
    nl_wino_output_naive(y[0], mm, NULL, NULL, NULL, 0, n, &p);
    for (size_t i = 0; i < nv; i++) {
        lhs[0] += (double)v[0][i] * v[1][i];
        mag[0] += fabs((double)v[0][i] * v[1][i]);
    }
    for (size_t i = 0; i < nin; i++)
        rhs[0] += (double)x[i] * dx[0][i];
    for (size_t i = 0; i < nu; i++) {
        lhs[1] += (double)u[0][i] * u[1][i];
        mag[1] += fabs((double)u[0][i] * u[1][i]);
    }
    for (size_t i = 0; i < nw; i++)
        rhs[1] += (double)wt[i] * dwt[0][i];
    for (size_t i = 0; i < nout; i++) {
        lhs[2] += (double)y[0][i] * dy[i];
        mag[2] += fabs((double)y[0][i] * dy[i]);
    }
    for (size_t i = 0; i < nm; i++)
        rhs[2] += (double)mm[i] * dm[0][i];
    for (int k = 0; k < 3; k++)
        is_float(lhs[k], rhs[k], 1e-6 * (1.0 + mag[k]),
                 "winograd F(%dx%d) on %dx%dx%dx%d: the %s transform's adjoint is its adjoint", m,
                 m, n, c, h, w,
                 k == 0   ? "input"
                 : k == 1 ? "filter"
                          : "output");
    free(x);
    free(wt);
    free(mm);
    free(dy);
    free(bias);
    free(sc);
    for (int i = 0; i < 2; i++) {
        free(u[i]);
        free(v[i]);
        free(y[i]);
        free(dm[i]);
        free(dx[i]);
        free(dwt[i]);
    }
}

/* Depthwise gconv (groups = C, F = mult * C): the direct loops against the per-group im2col and
 * GEMM on the same inputs, weights and output gradient. */
static void test_depthwise(const struct conv_case *cc)
{
    struct run r[2];
    const enum nl_lowering lowerings[2] = {NL_LOWER_GROUPS, NL_LOWER_DIRECT};
    char what[128];

    for (int i = 0; i < 2; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i].l = (struct nl_layer){.lowering = lowerings[i],
                                   .groups = cc->c,
                                   .filters = cc->f,
                                   .kh = cc->kh,
                                   .kw = cc->kw,
                                   .sh = cc->sh,
                                   .sw = cc->sw,
                                   .ph = cc->ph,
                                   .pw = cc->pw,
                                   .no_bias = cc->no_bias,
                                   .in = {{cc->c, cc->h, cc->w}}};
        run_make(&r[i], "gconv", cc->n);
    }
    memcpy(r[1].in, r[0].in, r[0].in_count * sizeof(float));
    memcpy(r[1].w, r[0].w, r[0].l.param_count * sizeof(float));
    memcpy(r[1].dout, r[0].dout, r[0].out_count * sizeof(float));
    snprintf(what, sizeof what, "depthwise %d %dx%d stride %dx%d pad %dx%d%s on %dx%dx%dx%d", cc->f,
             cc->kh, cc->kw, cc->sh, cc->sw, cc->ph, cc->pw, cc->no_bias ? " no bias" : "", cc->n,
             cc->c, cc->h, cc->w);
    ok(r[0].l.lower == NL_LOWER_GROUPS && r[1].l.lower == NL_LOWER_DIRECT &&
           r[1].l.scratch_fixed + r[1].l.scratch_per_sample == 0,
       "%s: per-group GEMMs and direct loops (no scratch) set up", what);
    for (int i = 0; i < 2; i++) {
        run_forward(&r[i]);
        run_backward(&r[i]);
    }
    is_float(max_diff(r[1].out, r[0].out, r[0].out_count), 0.0, tol_for(r[0].out, r[0].out_count),
             "%s: direct forward matches the GEMMs", what);
    is_float(max_diff(r[1].din, r[0].din, r[0].in_count), 0.0, tol_for(r[0].din, r[0].in_count),
             "%s: direct input gradient matches", what);
    is_float(max_diff(r[1].dw, r[0].dw, r[0].l.param_count), 0.0,
             tol_for(r[0].dw, r[0].l.param_count), "%s: direct weight gradient matches", what);
    for (int i = 0; i < 2; i++)
        run_free(&r[i]);
}

/* The fast depthwise kernels against their reference twins, bit for bit (the same products in
 * the same order): forward, and every gradient added into the same non-zero starting values;
 * the weight gradient's vector path, which sums in lanes, to rounding. */
static void test_dwconv_twins(void)
{
    static const int cases[][10] = {
        /* c, h, w, mult, kh, kw, sh, sw, ph, pw */
        {3, 14, 14, 1, 3, 3, 1, 1, 1, 1}, {2, 14, 13, 1, 3, 3, 2, 2, 1, 1},
        {2, 7, 9, 2, 3, 3, 1, 1, 0, 0},   {2, 6, 5, 1, 5, 5, 1, 1, 2, 2},
        {1, 2, 2, 1, 3, 3, 1, 1, 1, 1},   {1, 1, 1, 1, 3, 3, 1, 1, 1, 1},
        {2, 9, 8, 1, 3, 3, 2, 1, 2, 2},   {1, 5, 7, 3, 2, 3, 1, 2, 0, 1},
        {1, 3, 3, 1, 3, 3, 1, 1, 2, 2},   {2, 8, 8, 1, 9, 9, 1, 1, 4, 4},
        {2, 5, 37, 1, 3, 3, 1, 1, 1, 1},  {2, 6, 40, 1, 3, 3, 2, 2, 1, 1}, /* rows of 2 vectors */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *k = cases[i];
        const int c = k[0], h = k[1], w = k[2], mult = k[3], kh = k[4], kw = k[5], sh = k[6],
                  sw = k[7], ph = k[8], pw = k[9];
        const int oh = (h + 2 * ph - kh) / sh + 1, ow = (w + 2 * pw - kw) / sw + 1;
        const size_t in = (size_t)c * h * w, out = (size_t)c * mult * oh * ow,
                     nw = (size_t)c * mult * kh * kw, nb = (size_t)c * mult;
        float *x = floats(in), *wt = floats(nw), *bias = floats(nb), *dy = floats(out);
        float *y[2], *dx[2], *dwt[2], *db[2];
        for (int j = 0; j < 2; j++) {
            y[j] = floats(out);
            dx[j] = floats(in);
            dwt[j] = floats(nw);
            db[j] = floats(nb);
        }
        fill(x, in, -1, 1);
        fill(wt, nw, -1, 1);
        fill(bias, nb, -1, 1);
        fill(dy, out, -1, 1);
        fill(dx[0], in, -1, 1);
        fill(dwt[0], nw, -1, 1);
        fill(db[0], nb, -1, 1);
        memcpy(dx[1], dx[0], in * sizeof(float));
        memcpy(dwt[1], dwt[0], nw * sizeof(float));
        memcpy(db[1], db[0], nb * sizeof(float));
        nl_dwconv_ref(y[0], x, wt, bias, c, h, w, mult, kh, kw, sh, sw, ph, pw, oh, ow);
        nl_dwconv(y[1], x, wt, bias, c, h, w, mult, kh, kw, sh, sw, ph, pw, oh, ow);
        nl_dwconv_backward_ref(dx[0], dwt[0], db[0], dy, x, wt, c, h, w, mult, kh, kw, sh, sw, ph,
                               pw, oh, ow);
        nl_dwconv_backward(dx[1], dwt[1], db[1], dy, x, wt, c, h, w, mult, kh, kw, sh, sw, ph, pw,
                           oh, ow);
        /* The weight gradient sums in vector lanes where the vector paths run (kh*kw <= 64,
         * strides of 1 or 2 in x): to rounding there, bit for bit elsewhere. */
        const int lanes16 = nl_kernels_vector_on() && kh * kw <= 64 && sw <= 2;
        ok(memcmp(y[0], y[1], out * sizeof(float)) == 0 &&
               memcmp(dx[0], dx[1], in * sizeof(float)) == 0 &&
               (lanes16 || memcmp(dwt[0], dwt[1], nw * sizeof(float)) == 0) &&
               memcmp(db[0], db[1], nb * sizeof(float)) == 0,
           "depthwise %dx%dx%d x%d, %dx%d stride %dx%d pad %dx%d: the fast kernels give their "
           "twins' output, input and bias gradients bit for bit",
           c, h, w, mult, kh, kw, sh, sw, ph, pw);
        is_float(max_diff(dwt[0], dwt[1], nw), 0.0, 1e-5 * (1.0 + (double)oh * ow),
                 "depthwise %dx%dx%d: the weight gradient to rounding", c, h, w);
        if (lanes16) {
            /* and the scalar loops, with the vector paths off, bit for bit */
            fill(dwt[0], nw, -1, 1);
            memcpy(dwt[1], dwt[0], nw * sizeof(float));
            nl_dwconv_backward_ref(NULL, dwt[0], NULL, dy, x, wt, c, h, w, mult, kh, kw, sh, sw, ph,
                                   pw, oh, ow);
            nl_kernels_vector(0);
            nl_dwconv_backward(NULL, dwt[1], NULL, dy, x, wt, c, h, w, mult, kh, kw, sh, sw, ph, pw,
                               oh, ow);
            nl_kernels_vector(1);
            ok(memcmp(dwt[0], dwt[1], nw * sizeof(float)) == 0,
               "depthwise %dx%dx%d: the scalar weight gradient bit for bit", c, h, w);
        }
        for (int j = 0; j < 2; j++) {
            free(y[j]);
            free(dx[j]);
            free(dwt[j]);
            free(db[j]);
        }
        free(x);
        free(wt);
        free(bias);
        free(dy);
    }
}

static void test_dense(int n, struct nl_shape in, int units, int no_bias)
{
    struct run r = {.l = {.units = units, .no_bias = no_bias, .in = {in}}};
    run_make(&r, "dense", n);
    int fan = (int)nl_shape_size(in);
    float *out = floats(r.out_count), *din = floats(r.in_count), *dw = floats(r.l.param_count);

    for (int s = 0; s < n; s++)
        for (int u = 0; u < units; u++) {
            double sum = no_bias ? 0.0 : r.w[(size_t)units * fan + u];
            float g = r.dout[(size_t)s * units + u];
            for (int i = 0; i < fan; i++) {
                sum += (double)r.w[(size_t)u * fan + i] * r.in[(size_t)s * fan + i];
                din[(size_t)s * fan + i] += r.w[(size_t)u * fan + i] * g;
                dw[(size_t)u * fan + i] += r.in[(size_t)s * fan + i] * g;
            }
            out[(size_t)s * units + u] = (float)sum;
            if (!no_bias)
                dw[(size_t)units * fan + u] += g;
        }

    run_forward(&r);
    is_float(max_diff(r.out, out, r.out_count), 0.0, tol_for(out, r.out_count),
             "dense %d%s on %dx%dx%dx%d: forward matches the loops", units,
             no_bias ? " no bias" : "", n, in.c, in.h, in.w);
    run_backward(&r);
    is_float(max_diff(r.din, din, r.in_count), 0.0, tol_for(din, r.in_count),
             "dense %d on %dx%d: input gradient matches the loops", units, n, fan);
    is_float(max_diff(r.dw, dw, r.l.param_count), 0.0, tol_for(dw, r.l.param_count),
             "dense %d on %dx%d: weight gradient matches the loops", units, n, fan);
    free(out);
    free(din);
    free(dw);
    run_free(&r);
}

static void test_pool(const char *kind, int n, struct nl_shape in, int kh, int kw, int sh, int sw,
                      int ph, int pw)
{
    struct run r = {.l = {.kh = kh, .kw = kw, .sh = sh, .sw = sw, .ph = ph, .pw = pw, .in = {in}}};
    int is_max = strcmp(kind, "maxpool") == 0;
    run_make(&r, kind, n);
    int esh = sh ? sh : kh, esw = sw ? sw : kw;
    int oh = out_size(in.h, kh, esh, ph), ow = out_size(in.w, kw, esw, pw);
    float *out = floats(r.out_count), *din = floats(r.in_count);

    is_int(r.l.out.h * 1000 + r.l.out.w, oh * 1000 + ow,
           "%s %dx%d stride %dx%d pad %dx%d: out "
           "plane %dx%d",
           kind, kh, kw, sh, sw, ph, pw, oh, ow);
    for (int s = 0; s < n; s++)
        for (int c = 0; c < in.c; c++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    size_t o = (((size_t)s * in.c + c) * oh + oy) * ow + ox;
                    double sum = 0.0;
                    float best = -INFINITY;
                    size_t arg = 0;
                    for (int ki = 0; ki < kh; ki++)
                        for (int kj = 0; kj < kw; kj++) {
                            int iy = oy * esh - ph + ki, ix = ox * esw - pw + kj;
                            if (iy < 0 || iy >= in.h || ix < 0 || ix >= in.w)
                                continue;
                            size_t i = (((size_t)s * in.c + c) * in.h + iy) * in.w + ix;
                            sum += r.in[i];
                            if (r.in[i] > best) {
                                best = r.in[i];
                                arg = i;
                            }
                        }
                    out[o] = is_max ? best : (float)(sum / (kh * kw));
                    if (is_max) {
                        din[arg] += r.dout[o];
                    } else {
                        for (int ki = 0; ki < kh; ki++)
                            for (int kj = 0; kj < kw; kj++) {
                                int iy = oy * esh - ph + ki, ix = ox * esw - pw + kj;
                                if (iy >= 0 && iy < in.h && ix >= 0 && ix < in.w)
                                    din[(((size_t)s * in.c + c) * in.h + iy) * in.w + ix] +=
                                        r.dout[o] / (float)(kh * kw);
                            }
                    }
                }
    /* out of training and in it (which keeps the indices backward reads) */
    for (int training = 0; training <= 1; training++) {
        run_forward_as(&r, training);
        is_float(max_diff(r.out, out, r.out_count), 0.0, tol_for(out, r.out_count),
                 "%s %dx%d stride %dx%d pad %dx%d, %s: forward matches a scan of every window",
                 kind, kh, kw, sh, sw, ph, pw, training ? "training" : "inference");
    }
    run_backward(&r);
    is_float(max_diff(r.din, din, r.in_count), 0.0, tol_for(din, r.in_count),
             "%s %dx%d stride %dx%d pad %dx%d: backward matches", kind, kh, kw, sh, sw, ph, pw);
    free(out);
    free(din);
    run_free(&r);
}

/* OpenBLAS must not run its generic SSE3 kernels on a CPU that has AVX2 or AVX-512 (it takes
 * CPUs newer than itself for Prescott); nl_kernels_init chooses again. */
static void test_blas_core(void)
{
    const char *note = nl_kernels_blas_note();
    ok(strncmp(note, "OpenBLAS ", 9) == 0, "the BLAS note names the kernels: %s", note);
    __builtin_cpu_init();
    if (getenv("OPENBLAS_CORETYPE") || !__builtin_cpu_supports("avx2")) {
        printf("# the kernel choice is not checked: OPENBLAS_CORETYPE is set or no AVX2\n");
        return;
    }
    static const char *const generic[] = {"Prescott", "Core2",  "Penryn", "Dunnington", "Nehalem",
                                          "Atom",     "Katmai", "Banias", "Northwood"};
    int is_generic = 0;
    for (size_t i = 0; i < sizeof generic / sizeof *generic; i++)
        is_generic |= strstr(note, generic[i]) == note + 9;
    ok(!is_generic, "an AVX2 CPU runs OpenBLAS kernels that use it: %s", note);
}

/* ---- training-time fusion's kernels ----
 *
 * Each fused kernel against its naive twin and against the unfused kernels run one after the
 * other (the activation's backward writing the masked gradient, then batchnorm's or the add's
 * pass reading it), bit for bit, for every activation: lengths around the 16 lanes, 1 to 3
 * planes apart, outputs that hit 0 and 6 exactly, NaN and infinities in the inputs. */
static float masked(float y, float g, int act)
{
    int live = act == NL_ACT_NONE ? 1 : act == NL_ACT_RELU6 ? y > 0.0f && y < 6.0f : y > 0.0f;
    return live ? g : 0.0f;
}

static void test_fusion_twins(void)
{
    static const int sizes[] = {0, 1, 15, 16, 17, 31, 33, 100, 333};
    const size_t max = 1000;
    float *x = floats(max), *dy = floats(max), *y = floats(max), *g = floats(max);
    float *a1 = floats(max), *a2 = floats(max), *b1 = floats(max), *b2 = floats(max);
    float *e1 = floats(max), *e2 = floats(max);
    int wrong_apply = 0, wrong_sums = 0, wrong_dx = 0, wrong_add = 0, twins = 0, dead = 0;
    int wrong_res = 0, res_cases = 0;

    fill(x, max, -1, 1);
    fill(dy, max, -1, 1);
    dy[4] = -0.0f;
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        for (int act = NL_ACT_NONE; act <= NL_ACT_RELU6; act++) {
            /* y as the activation writes it: 0 on about half, 6 on some under ReLU6. */
            nl_scale_shift_naive(y, x, max, 7.3f, -0.4f, act);
            y[2] = act == NL_ACT_NONE ? NAN : 0.0f;
            for (size_t j = 0; j < max; j++) {
                g[j] = masked(y[j], dy[j], act);
                dead += act != NL_ACT_NONE && g[j] == 0.0f;
            }
            for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
                const size_t n = (size_t)sizes[i];
                /* forward: bn_apply then the activation */
                fill_value(a1, max, 9.0f);
                fill_value(a2, max, 9.0f);
                nl_bn_apply_act(a1, x, NULL, n, 0.3f, 1.7f, -0.8f, 0.1f, act);
                nl_bn_apply_act_naive(a2, x, NULL, n, 0.3f, 1.7f, -0.8f, 0.1f, act);
                fill_value(b1, max, 9.0f);
                nl_bn_apply_naive(b1, x, n, 0.3f, 1.7f, -0.8f, 0.1f);
                nl_scale_shift_naive(b1, b1, n, 1.0f, 0.0f, act);
                wrong_apply += memcmp(a1, a2, max * sizeof *a1) != 0;
                wrong_apply += memcmp(a1, b1, max * sizeof *a1) != 0;
                /* with a residual add: bn_apply, add, then the activation */
                fill_value(a1, max, 9.0f);
                fill_value(a2, max, 9.0f);
                nl_bn_apply_act(a1, x, dy, n, 0.3f, 1.7f, -0.8f, 0.1f, act);
                nl_bn_apply_act_naive(a2, x, dy, n, 0.3f, 1.7f, -0.8f, 0.1f, act);
                fill_value(b1, max, 9.0f);
                nl_bn_apply_naive(b1, x, n, 0.3f, 1.7f, -0.8f, 0.1f);
                nl_add_act_naive(b1, dy, b1, n, act);
                wrong_apply += memcmp(a1, a2, max * sizeof *a1) != 0;
                wrong_apply += memcmp(a1, b1, max * sizeof *a1) != 0;
                /* the sums over 1 to 3 planes */
                for (int planes = 1; planes <= 3; planes++) {
                    const size_t stride = n + 5;
                    if ((size_t)planes * stride > max)
                        continue;
                    double v[2] = {0.5, -0.25}, w[2] = {0.5, -0.25}, u[2] = {0.5, -0.25};
                    nl_bn_grad_sums_act(dy, y, x, planes, stride, n, -0.2f, act, &v[0], &v[1]);
                    nl_bn_grad_sums_act_naive(dy, y, x, planes, stride, n, -0.2f, act, &w[0],
                                              &w[1]);
                    nl_bn_grad_sums_naive(g, x, planes, stride, n, -0.2f, &u[0], &u[1]);
                    wrong_sums += memcmp(v, w, sizeof v) != 0 || memcmp(v, u, sizeof v) != 0;
                    twins++;
                }
                /* the input gradient pass, written and added */
                for (int set = 0; set <= 1; set++) {
                    fill(a1, max, -1, 1);
                    memcpy(a2, a1, max * sizeof *a1);
                    memcpy(b1, a1, max * sizeof *a1);
                    nl_bn_backward_apply_act(a1, dy, y, x, n, 0.7f, 0.1f, -0.3f, 0.2f, 1.9f, act,
                                             set);
                    nl_bn_backward_apply_act_naive(a2, dy, y, x, n, 0.7f, 0.1f, -0.3f, 0.2f, 1.9f,
                                                   act, set);
                    nl_bn_backward_apply_naive(b1, g, x, n, 0.7f, 0.1f, -0.3f, 0.2f, 1.9f, set);
                    wrong_dx += memcmp(a1, a2, max * sizeof *a1) != 0;
                    wrong_dx += memcmp(a1, b1, max * sizeof *a1) != 0;
                }
                /* the add's two input gradients, each written, added or absent */
                for (unsigned set = 0; set < 4; set++)
                    for (int absent = 0; absent < 3; absent++) {
                        fill(a1, max, -1, 1);
                        a1[4] = -0.0f;
                        fill(b1, max, -1, 1);
                        memcpy(a2, a1, max * sizeof *a1);
                        memcpy(b2, b1, max * sizeof *b1);
                        memcpy(e1, a1, max * sizeof *a1);
                        memcpy(e2, b1, max * sizeof *b1);
                        float *d0 = absent == 1 ? NULL : a1, *d1 = absent == 2 ? NULL : b1;
                        nl_add_act_backward(d0, d1, y, dy, n, act, set);
                        nl_add_act_backward_naive(absent == 1 ? NULL : a2, absent == 2 ? NULL : b2,
                                                  y, dy, n, act, set);
                        for (size_t j = 0; j < n; j++) { /* the add's backward on g */
                            if (absent != 1)
                                e1[j] = set & 1 ? g[j] : e1[j] + g[j];
                            if (absent != 2)
                                e2[j] = set & 2 ? g[j] : e2[j] + g[j];
                        }
                        wrong_add += memcmp(a1, a2, max * sizeof *a1) != 0 ||
                                     memcmp(b1, b2, max * sizeof *b1) != 0;
                        wrong_add += memcmp(a1, e1, max * sizeof *a1) != 0 ||
                                     memcmp(b1, e2, max * sizeof *b1) != 0;
                    }
                /* the input gradient and the add's other input's in one pass, each written or
                 * added, and both in one buffer: against bn_backward_apply_act after
                 * add_act_backward (a1 and b1 as the add's test left them) */
                for (unsigned set = 0; set < 4; set++)
                    for (int shared = 0; shared <= 1; shared++) {
                        memcpy(a2, a1, max * sizeof *a1);
                        memcpy(e1, a1, max * sizeof *a1);
                        memcpy(b2, shared ? a1 : b1, max * sizeof *b1);
                        memcpy(e2, shared ? a1 : b1, max * sizeof *b1);
                        float *r1 = shared ? a1 : b1, *r2 = shared ? a2 : b2,
                              *r3 = shared ? e1 : e2;
                        const unsigned both = shared ? set & 2 : set;
                        if (shared)
                            memcpy(b1, a1, max * sizeof *a1);
                        nl_bn_backward_apply_res(a1, r1, dy, y, x, n, 0.7f, 0.1f, -0.3f, 0.2f, 1.9f,
                                                 act, both);
                        nl_bn_backward_apply_res_naive(a2, r2, dy, y, x, n, 0.7f, 0.1f, -0.3f, 0.2f,
                                                       1.9f, act, both);
                        nl_add_act_backward_naive(r3, NULL, y, dy, n, act, (both >> 1) & 1);
                        nl_bn_backward_apply_act_naive(e1, dy, y, x, n, 0.7f, 0.1f, -0.3f, 0.2f,
                                                       1.9f, act, (int)(both & 1));
                        wrong_res += memcmp(a1, a2, max * sizeof *a1) != 0 ||
                                     memcmp(r1, r2, max * sizeof *r1) != 0;
                        wrong_res += memcmp(a1, e1, max * sizeof *a1) != 0 ||
                                     memcmp(r1, r3, max * sizeof *r1) != 0;
                        res_cases++;
                    }
            }
        }
    }
    nl_kernels_vector(1);
    ok(twins > 100 && dead > 500, "%d sums compared; %d gradients masked to 0", twins, dead);
    is_int(wrong_apply, 0, "batchnorm's output pass with its activation: twin and unfused");
    is_int(wrong_sums, 0, "batchnorm's sums of the masked gradient: twin and unfused");
    is_int(wrong_dx, 0, "batchnorm's input gradient from the masked gradient: twin and unfused");
    is_int(wrong_add, 0, "add's input gradients from the masked gradient: twin and unfused");
    is_int(wrong_res, 0,
           "batchnorm's input gradient and the add's other one in one pass (%d cases, one buffer "
           "in half): twin and unfused",
           res_cases);
    free(x);
    free(dy);
    free(y);
    free(g);
    free(a1);
    free(a2);
    free(b1);
    free(b2);
    free(e1);
    free(e2);
}

/* SGD's one-pass update and the threads' gradient reduction: vector against naive, bit for bit,
 * with and without momentum, weight decay, Nesterov and the clearing of g; and the naive update
 * against PyTorch's rule written out. */
static void test_sgd_twins(void)
{
    static const int sizes[] = {0, 1, 15, 16, 17, 100, 2048, 2049};
    const size_t max = 2049;
    float *w[2], *v[2], *g[2], *h[2];
    int wrong = 0, wrong_rule = 0, wrong_add = 0, cases = 0;

    for (int j = 0; j < 2; j++) {
        w[j] = floats(max);
        v[j] = floats(max);
        g[j] = floats(max);
        h[j] = floats(max);
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int mom = 0; mom <= 1; mom++)
            for (int decay = 0; decay <= 1; decay++)
                for (int nesterov = 0; nesterov <= mom; nesterov++)
                    for (int clear = 0; clear <= 1; clear++) {
                        const size_t n = (size_t)sizes[i];
                        const float lr = 0.05f, mu = mom ? 0.9f : 0.0f, wd = decay ? 1e-3f : 0.0f;
                        fill(w[0], max, -1, 1);
                        fill(v[0], max, -1, 1);
                        fill(g[0], max, -1, 1);
                        g[0][1] = -0.0f;
                        for (int j = 1; j < 2; j++) {
                            memcpy(w[j], w[0], max * sizeof *w[0]);
                            memcpy(v[j], v[0], max * sizeof *v[0]);
                            memcpy(g[j], g[0], max * sizeof *g[0]);
                        }
                        float *want = floats(max);
                        for (size_t k = 0; k < max; k++) { /* PyTorch's rule */
                            float gi = g[0][k] + wd * w[0][k], vk = mu * v[0][k] + gi;
                            want[k] = k >= n ? w[0][k]
                                      : mom  ? w[0][k] - lr * (nesterov ? gi + mu * vk : vk)
                                             : w[0][k] - lr * gi;
                        }
                        nl_kernels_vector(1);
                        nl_sgd_update(w[0], mom ? v[0] : NULL, g[0], n, lr, mu, wd, nesterov,
                                      clear);
                        nl_kernels_vector(0);
                        nl_sgd_update(w[1], mom ? v[1] : NULL, g[1], n, lr, mu, wd, nesterov,
                                      clear);
                        wrong += memcmp(w[0], w[1], max * sizeof *w[0]) != 0 ||
                                 memcmp(v[0], v[1], max * sizeof *v[0]) != 0 ||
                                 memcmp(g[0], g[1], max * sizeof *g[0]) != 0;
                        wrong_rule += memcmp(w[1], want, max * sizeof *want) != 0;
                        for (size_t k = 0; clear && k < n; k++)
                            wrong_rule += g[1][k] != 0.0f;
                        free(want);
                        /* the reduction */
                        fill(h[0], max, -1, 1);
                        memcpy(h[1], h[0], max * sizeof *h[0]);
                        nl_kernels_vector(1);
                        nl_add_clear(g[0], h[0], n);
                        nl_kernels_vector(0);
                        nl_add_clear_naive(g[1], h[1], n);
                        wrong_add += memcmp(g[0], g[1], max * sizeof *g[0]) != 0 ||
                                     memcmp(h[0], h[1], max * sizeof *h[0]) != 0;
                        cases++;
                    }
    nl_kernels_vector(1);
    is_int(wrong, 0, "SGD update: vector and naive the same bit for bit (%d cases)", cases);
    is_int(wrong_rule, 0, "SGD update: PyTorch's rule, g cleared where asked");
    is_int(wrong_add, 0, "gradient reduction: vector and naive the same bit for bit");
    for (int j = 0; j < 2; j++) {
        free(w[j]);
        free(v[j]);
        free(g[j]);
        free(h[j]);
    }
}

/* nl_s2_transpose on both paths against dst[j][i] = src[i][j]. */
static void test_s2_transpose(int rows, int cols)
{
    const size_t size = (size_t)rows * cols;
    float *src = floats(size), *want = floats(size), *got = floats(size);

    fill(src, size, -1, 1);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            want[(size_t)j * rows + i] = src[(size_t)i * cols + j];
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        fill_value(got, size, NAN);
        nl_s2_transpose(got, src, rows, cols);
        ok(memcmp(got, want, size * sizeof *got) == 0, "nl_s2_transpose of %dx%d, %s", rows, cols,
           vec ? "vector" : "scalar");
    }
    nl_kernels_vector(1);
    free(src);
    free(want);
    free(got);
}

/* nl_s2_pick and its adjoint on both paths against nl_im2col and nl_col2im of a 1x1 stride-2
 * window, bit for bit, the adjoint adding into an image that holds values already (a -0 among
 * them, which adding 0 would turn). */
static void test_s2_pick(int c, int h, int w)
{
    const int oh = (h + 1) / 2, ow = (w + 1) / 2;
    const size_t in = (size_t)c * h * w, kp = (size_t)c * oh * ow;
    float *img = floats(in), *want = floats(kp), *got = floats(kp), *d1 = floats(in);
    float *d2 = floats(in);

    fill(img, in, -1, 1);
    fill(d1, in, -1, 1);
    d1[in - 1] = -0.0f;
    nl_im2col(want, img, c, h, w, 1, 1, 2, 2, 0, 0, oh, ow);
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        fill_value(got, kp, NAN);
        nl_s2_pick(got, img, c, h, w, oh, ow);
        ok(memcmp(got, want, kp * sizeof *got) == 0, "nl_s2_pick of %dx%dx%d, %s: nl_im2col's", c,
           h, w, vec ? "vector" : "scalar");
    }
    fill(want, kp, -1, 1);
    memcpy(d2, d1, in * sizeof *d2);
    nl_col2im(d1, want, c, h, w, 1, 1, 2, 2, 0, 0, oh, ow);
    float *d3 = floats(in);
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        memcpy(d3, d2, in * sizeof *d3);
        nl_s2_pick_adjoint(d3, want, c, h, w, oh, ow);
        ok(memcmp(d1, d3, in * sizeof *d1) == 0,
           "nl_s2_pick_adjoint of %dx%dx%d, %s: nl_col2im's sums", c, h, w,
           vec ? "vector" : "scalar");
    }
    nl_kernels_vector(1);
    free(img);
    free(want);
    free(got);
    free(d1);
    free(d2);
    free(d3);
}

/* The stride-2 weight gradients (PHASES's, and SAMPLE's for a 1x1 window, which take it turned
 * where F*K is large) against SAMPLE's per-image products over nl_im2col's columns, added into
 * non-zero values: the same sums in the same order, bit for bit. */
static void test_s2_dweight(int n, int c, int h, int f, int k, int pad)
{
    struct run r = {.l = {.filters = f,
                          .kh = k,
                          .kw = k,
                          .sh = 2,
                          .sw = 2,
                          .ph = pad,
                          .pw = pad,
                          .no_bias = 1,
                          .in = {{c, h, h}}}};
    run_make(&r, "conv", n);
    const int o = (h + 2 * pad - k) / 2 + 1, kk = c * k * k, p = o * o;
    float *want = floats(r.l.param_count), *cols = floats((size_t)kk * p);

    fill(r.dw, r.l.param_count, -1, 1);
    memcpy(want, r.dw, r.l.param_count * sizeof *want);
    for (int s = 0; s < n; s++) {
        nl_im2col(cols, r.in + (size_t)s * c * h * h, c, h, h, k, k, 2, 2, pad, pad, o, o);
        nl_sgemm(0, 1, f, kk, p, 1.0f, r.dout + (size_t)s * f * p, p, cols, p, 1.0f, want, kk);
    }
    struct nl_bwd b = {.n = n,
                       .in = {r.in},
                       .out = r.out,
                       .dout = r.dout,
                       .din = {r.din},
                       .w = r.w,
                       .dw = r.dw,
                       .aux = r.aux,
                       .scratch = r.scratch};
    memset(r.din, 0, r.in_count * sizeof *r.din);
    r.l.ops->backward(&r.l, &b);
    ok(memcmp(want, r.dw, r.l.param_count * sizeof *want) == 0,
       "conv %d %dx%d stride 2 pad %d on %dx%dx%dx%d, %s: the weight gradient is SAMPLE's "
       "per-image products' bit for bit",
       f, k, k, pad, n, c, h, h, nl_lowering_name(r.l.lower));
    free(want);
    free(cols);
    run_free(&r);
}

/* nl_wino_input_adjoint_set against the adjoint added into din zeroed, bit for bit, whatever din
 * held before (NaN here), on both paths; and its naive twin likewise. */
static void test_wino_adjoint_set(int m, int n, int c, int h, int w, int ph, int pw)
{
    struct nl_wino p;
    nl_wino_plan(&p, m, c, h, w, 1, ph, pw, h + 2 * ph - 2, w + 2 * pw - 2);
    const size_t nv = (size_t)p.a * p.a * c * n * p.tiles, nin = (size_t)n * c * h * w;
    float *v = floats(nv), *want = floats(nin), *got = floats(nin), *naive = floats(nin);

    fill(v, nv, -1, 1);
    for (size_t i = 0; i < nv; i += 7) /* zeros of both signs, whose sums keep a sign */
        v[i] = i % 2 ? -0.0f : 0.0f;
    memset(want, 0, nin * sizeof *want);
    nl_wino_input_adjoint(want, v, n, &p);
    fill_value(got, nin, NAN);
    nl_wino_input_adjoint_set(got, v, n, &p);
    fill_value(naive, nin, NAN);
    nl_wino_input_adjoint_set_naive(naive, v, n, &p);
    float *ref = floats(nin);
    memset(ref, 0, nin * sizeof *ref);
    nl_wino_input_adjoint_naive(ref, v, n, &p);
    ok(memcmp(got, want, nin * sizeof *got) == 0 && memcmp(naive, ref, nin * sizeof *ref) == 0,
       "winograd F(%dx%d) on %dx%dx%dx%d, pad %dx%d, %s paths: the input adjoint written is the "
       "adjoint added into zeros, bit for bit",
       m, m, n, c, h, w, ph, pw, nl_kernels_vector_on() ? "vector" : "scalar");
    free(v);
    free(want);
    free(got);
    free(naive);
    free(ref);
}

/* Batchnorm's backward passes with the fused activation's mask judged from x
 * (nl_bn_grad_sums_mask, nl_bn_backward_apply_mask) against the passes that read forward's
 * output (nl_bn_apply_act's), vector paths and naive twins: the same floats, bit for bit. The
 * second parameter set makes v = x exactly, so x = 0, -0 and 6 sit on the masks' edges. */
static void test_bn_mask(void)
{
    static const size_t sizes[] = {1, 15, 16, 17, 49, 196, 200, 784};
    static const float par[2][4] = {{0.3f, 1.7f, -0.8f, 0.1f}, {0.0f, 1.0f, 1.0f, 0.0f}};
    enum { PLANES = 3, MAX = 3 * (784 + 5) };
    float *x = malloc(MAX * sizeof *x), *y = malloc(MAX * sizeof *y), *dy = malloc(MAX * sizeof *y);
    float *a1 = malloc(MAX * sizeof *a1), *a2 = malloc(MAX * sizeof *a2);
    float *a3 = malloc(MAX * sizeof *a3);
    int wrong_sums = 0, wrong_dx = 0, cases = 0, dead = 0, edges = 0;

    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        for (int act = NL_ACT_RELU; act <= NL_ACT_RELU6; act++)
            for (int k = 0; k < 2; k++)
                for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
                    const size_t n = sizes[i], stride = n + 5;
                    const float mu = par[k][0], is = par[k][1], w = par[k][2], b = par[k][3];
                    fill(x, MAX, -8.0f, 8.0f);
                    fill(dy, MAX, -1.0f, 1.0f);
                    for (size_t j = 0; j + 7 < MAX; j += 7) /* the edges */
                        x[j] = j % 3 == 0 ? 0.0f : j % 3 == 1 ? -0.0f : 6.0f;
                    for (int s = 0; s < PLANES; s++)
                        nl_bn_apply_act(y + s * stride, x + s * stride, NULL, n, mu, is, w, b, act);
                    for (int s = 0; s < PLANES; s++)
                        for (size_t j = 0; j < n; j++) {
                            const float v = y[s * stride + j];
                            dead += v == 0.0f || v == 6.0f;
                            edges += x[s * stride + j] == 6.0f && v == 6.0f;
                        }
                    double u[2] = {0.5, -0.25}, v[2] = {0.5, -0.25}, t[2] = {0.5, -0.25};
                    nl_bn_grad_sums_act(dy, y, x, PLANES, stride, n, mu, act, &u[0], &u[1]);
                    nl_bn_grad_sums_mask(dy, x, PLANES, stride, n, mu, is, w, b, act, &v[0], &v[1]);
                    nl_bn_grad_sums_mask_naive(dy, x, PLANES, stride, n, mu, is, w, b, act, &t[0],
                                               &t[1]);
                    wrong_sums += memcmp(u, v, sizeof u) != 0 || memcmp(u, t, sizeof u) != 0;
                    for (int set = 0; set <= 1; set++) {
                        fill(a1, MAX, -1.0f, 1.0f);
                        memcpy(a2, a1, MAX * sizeof *a1);
                        memcpy(a3, a1, MAX * sizeof *a1);
                        nl_bn_backward_apply_act(a1, dy, y, x, n, w * is, 0.1f, -0.3f, mu, is, act,
                                                 set);
                        nl_bn_backward_apply_mask(a2, dy, x, n, w * is, 0.1f, -0.3f, mu, is, w, b,
                                                  act, set);
                        nl_bn_backward_apply_mask_naive(a3, dy, x, n, w * is, 0.1f, -0.3f, mu, is,
                                                        w, b, act, set);
                        wrong_dx += memcmp(a1, a2, MAX * sizeof *a1) != 0 ||
                                    memcmp(a1, a3, MAX * sizeof *a1) != 0;
                    }
                    cases++;
                }
    }
    nl_kernels_vector(1);
    ok(cases == 64 && dead > 1000 && edges > 10, "%d cases; %d outputs at a mask's edge or past it",
       cases, dead);
    is_int(wrong_sums, 0, "batchnorm's sums with the mask from x: as from the output, and twin");
    is_int(wrong_dx, 0,
           "batchnorm's input gradient with the mask from x: as from the output, twin");
    free(x);
    free(y);
    free(dy);
    free(a1);
    free(a2);
    free(a3);
}

/* conv's WINOGRAD forward on a shard of one chunk transforms and multiplies u by blocks of
 * filters (core/engine/layers/conv.c), its input gradient by blocks of input channels; on a
 * shard of more chunks, u whole: the same products, element by element, so the outputs and
 * input gradients of the first chunk's images are the same floats, with the bias and with the
 * folded output pass; and nl_wino_filter_cols gives a block of channels nl_wino_filter's floats,
 * on the vector path and the naive one. */
static void test_wino_rows(enum nl_lowering lower, int c, int side, int one, int more)
{
    struct nl_error err = {0};
    struct nl_layer l = {.ops = nl_layer_kind("conv"),
                         .lowering = lower,
                         .filters = c,
                         .kh = 3,
                         .kw = 3,
                         .ph = 1,
                         .pw = 1,
                         .ninputs = 1,
                         .in = {{c, side, side}}};
    snprintf(l.name, sizeof l.name, "wino_rows");
    if (!ok(l.ops->setup(&l, &err) == 0 && l.lower == lower, "winograd rows: setup"))
        return;
    const size_t in_size = (size_t)c * side * side, out_size = (size_t)c * l.out.h * l.out.w;
    float *w = floats(l.param_count), *x = floats(more * in_size);
    float *scale = floats((size_t)c), *shift = floats((size_t)c);
    float *y[2] = {floats(more * out_size), floats(more * out_size)};
    float *scratch = floats(nl_layer_scratch(&l, more));
    size_t off = 0;
    fill(w, l.param_count, -1, 1);
    fill(x, more * in_size, -1, 1);
    fill(scale, (size_t)c, 0.5, 1.5);
    fill(shift, (size_t)c, -1, 1);
    for (int fold = 0; fold < 2; fold++) {
        for (int k = 0; k < 2; k++) {
            struct nl_fwd f = {.n = k ? more : one, .out = y[k], .w = w, .scratch = scratch};
            f.in[0] = x;
            if (fold) {
                f.scale = scale;
                f.shift = shift;
                f.act = NL_ACT_RELU;
            }
            l.ops->forward(&l, &f);
        }
        for (size_t i = 0; i < (size_t)one * out_size; i++)
            off += memcmp(&y[0][i], &y[1][i], sizeof(float)) != 0;
    }
    ok(off == 0,
       "%s on %d images of %dx%dx%d, one chunk, against %d images: the same outputs (%zu differ)",
       lower == NL_LOWER_WINOGRAD ? "WINOGRAD" : "WINOGRAD2", one, c, side, side, more, off);
    float *dx[2] = {floats(more * in_size), floats(more * in_size)};
    float *dw[2] = {floats(l.param_count), floats(l.param_count)};
    fill(y[0], more * out_size, -1, 1); /* dout */
    off = 0;
    for (int k = 0; k < 2; k++) {
        struct nl_bwd b = {.n = k ? more : one, .dout = y[0], .w = w, .dw = dw[k]};
        b.in[0] = x;
        b.out = y[1];
        b.din[0] = dx[k];
        b.scratch = scratch;
        l.ops->backward(&l, &b);
    }
    for (size_t i = 0; i < (size_t)one * in_size; i++)
        off += memcmp(&dx[0][i], &dx[1][i], sizeof(float)) != 0;
    ok(off == 0,
       "%s on %d images of %dx%dx%d, one chunk, against %d images: the same input gradients (%zu "
       "differ)",
       lower == NL_LOWER_WINOGRAD ? "WINOGRAD" : "WINOGRAD2", one, c, side, side, more, off);
    struct nl_wino p;
    nl_wino_plan(&p, lower == NL_LOWER_WINOGRAD ? 4 : 2, c, side, side, c, 1, 1, side, side);
    const size_t aa = (size_t)p.a * p.a, fc = (size_t)c * c;
    float *u = floats(aa * fc), *part = floats(aa * fc);
    /* the one-chunk shard's weight gradient against 0 + the fold of du, du's products whole */
    {
        const int tt = one * p.tiles, fast = nl_wino_input_t_fast(&p);
        const size_t ct = (size_t)c * tt;
        float *dmm = floats(aa * ct), *vt = floats(aa * ct), *ref = floats(fc * 9);
        nl_wino_output_adjoint(dmm, y[0], one, &p);
        if (fast)
            nl_wino_input_t(vt, x, one, &p);
        else
            nl_wino_input(vt, x, one, &p);
        for (size_t xi = 0; xi < aa; xi++)
            nl_sgemm(0, fast ? 0 : 1, c, c, tt, 1.0f, dmm + xi * ct, tt, vt + xi * ct,
                     fast ? c : tt, 0.0f, u + xi * fc, c);
        nl_wino_filter_adjoint(ref, u, &p);
        ok(memcmp(ref, dw[0] + l.params[0].offset, fc * 9 * sizeof(float)) == 0,
           "%s on %d images of %dx%dx%d, one chunk: the weight gradient of du whole, to the bit",
           lower == NL_LOWER_WINOGRAD ? "WINOGRAD" : "WINOGRAD2", one, c, side, side);
        free(dmm);
        free(vt);
        free(ref);
    }
    off = 0;
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        nl_wino_filter(u, w, &p);
        for (int c0 = 0; c0 < c; c0 += 40) {
            struct nl_wino q = p;
            q.c = c - c0 < 40 ? c - c0 : 40;
            nl_wino_filter_cols(part, w + (size_t)c0 * 9, &q, c);
            for (size_t xi = 0; xi < aa; xi++)
                for (int fo = 0; fo < c; fo++)
                    off +=
                        memcmp(part + (xi * (size_t)c + (size_t)fo) * q.c,
                               u + xi * fc + (size_t)fo * c + c0, (size_t)q.c * sizeof(float)) != 0;
        }
    }
    nl_kernels_vector(1);
    ok(off == 0,
       "nl_wino_filter_cols: blocks of 40 of %d channels are nl_wino_filter's (%zu differ)", c,
       off);
    free(u);
    free(part);
    free(dx[0]);
    free(dx[1]);
    free(dw[0]);
    free(dw[1]);
    free(w);
    free(x);
    free(scale);
    free(shift);
    free(y[0]);
    free(y[1]);
    free(scratch);
}

typedef void (*lanes_dweight_fn)(float *dweight, const float *dy, size_t ld, const float *xt, int n,
                                 int c, int f0, int f1);

/* The lanes weight gradients against their naive twins: PLANE2's (a 2x2 input, stride 1) and the
 * stride-2 lanes' (a 4x4 input, stride 2), both to a 2x2 output. Channel counts that fill blocks
 * of 16, leave a tail or are only a tail; odd filter counts; one image and many; dy rows wider
 * than the shard (a split's posted rows); added to non-zero starting values. A range of rows
 * against the whole bit for bit; the turned images against the input; one filter and channel's
 * nine taps against the direct correlation over the padded window; the naive loops with the
 * vector paths off. For the stride-2 lanes, the input gradient likewise, and one image's last
 * channel against the transposed convolution. */
static void test_lanes_grad_twins(int side, int stride)
{
    static const int cases[][4] = {/* n, c, f, extra dy columns */ {16, 32, 16, 0},
                                   {21, 5, 7, 4},
                                   {1, 16, 3, 0},
                                   {4, 40, 9, 8},
                                   {33, 17, 5, 0}};
    const int pixels = side * side, s2 = stride == 2;
    const char *name = s2 ? "conv_s2_lanes_dweight" : "conv_plane2_dweight";
    const lanes_dweight_fn fast = s2 ? nl_conv_s2_lanes_dweight : nl_conv_plane2_dweight;
    const lanes_dweight_fn naive =
        s2 ? nl_conv_s2_lanes_dweight_naive : nl_conv_plane2_dweight_naive;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i][0], c = cases[i][1], f = cases[i][2];
        const size_t ld = (size_t)n * 4 + (size_t)cases[i][3], in = (size_t)n * c * pixels;
        const size_t nw = (size_t)f * c * 9;
        float *x = floats(in), *xt = floats(in), *dy = floats((size_t)f * ld);
        float *dw[4] = {floats(nw), floats(nw), floats(nw), floats(nw)};
        fill(x, in, -1, 1);
        fill(dy, (size_t)f * ld, -1, 1);
        fill(dw[0], nw, -1, 1);
        for (int j = 1; j < 4; j++)
            memcpy(dw[j], dw[0], nw * sizeof(float));
        nl_conv_lanes_turn(xt, x, n, c, pixels);
        int turned = 1;
        for (int s = 0; s < n; s++)
            for (int ci = 0; ci < c; ci++)
                for (int p = 0; p < pixels; p++)
                    turned &= xt[((size_t)s * pixels + p) * c + ci] ==
                              x[((size_t)s * c + ci) * pixels + p];
        ok(turned, "conv_lanes_turn on %dx%dx%dx%d: each image's pixels channel-minor", n, c, side,
           side);
        naive(dw[1], dy, ld, xt, n, c, 0, f);
        fast(dw[2], dy, ld, xt, n, c, 0, f);
        is_float(max_diff(dw[1], dw[2], nw), 0.0, 1e-5 * (1.0 + max_abs(dw[1], nw)),
                 "%s on %dx%dx%dx%d, %d filters, rows of %zu: matches the naive twin", name, n, c,
                 side, side, f, ld);
        /* rows [1, f - 1), then the first and the last: the whole, bit for bit */
        fast(dw[3], dy, ld, xt, n, c, 1, f - 1);
        fast(dw[3], dy, ld, xt, n, c, 0, 1);
        fast(dw[3], dy, ld, xt, n, c, f - 1, f);
        ok(memcmp(dw[2], dw[3], nw * sizeof(float)) == 0,
           "%s on %dx%dx%dx%d, %d filters: three ranges of rows give the whole", name, n, c, side,
           side, f);
        /* the last filter and channel's nine taps: dy correlated with the padded input */
        double worst = 0.0, scale = 1.0;
        for (int t = 0; t < 9; t++) {
            double sum = 0.0;
            for (int s = 0; s < n; s++)
                for (int o = 0; o < 4; o++) {
                    const int iy = stride * (o / 2) - 1 + t / 3, ix = stride * (o % 2) - 1 + t % 3;
                    if (iy >= 0 && iy < side && ix >= 0 && ix < side)
                        sum += (double)dy[(size_t)(f - 1) * ld + (size_t)s * 4 + o] *
                               x[((size_t)s * c + c - 1) * pixels + iy * side + ix];
                }
            const size_t at = ((size_t)(f - 1) * c + c - 1) * 9 + t;
            worst = fmax(worst, fabs((double)dw[2][at] - (double)dw[0][at] - sum));
            scale += fabs(sum);
        }
        is_float(worst, 0.0, 1e-5 * scale,
                 "%s on %dx%dx%dx%d, %d filters: a filter's taps are the direct correlation", name,
                 n, c, side, side, f);
        nl_kernels_vector(0);
        memcpy(dw[3], dw[0], nw * sizeof(float));
        fast(dw[3], dy, ld, xt, n, c, 0, f);
        nl_kernels_vector(1);
        ok(memcmp(dw[1], dw[3], nw * sizeof(float)) == 0,
           "%s on %dx%dx%dx%d, %d filters, vector paths off: the naive twin", name, n, c, side,
           side, f);
        if (s2) {
            const size_t out = (size_t)n * f * 4;
            float *w = floats(nw), *dout = floats(out);
            float *scratch = floats(nl_conv_s2_lanes_din_scratch(c, f));
            float *dx[3] = {floats(in), floats(in), floats(in)};
            fill(w, nw, -1, 1);
            fill(dout, out, -1, 1);
            fill(dx[0], in, -1, 1);
            for (int j = 1; j < 3; j++)
                memcpy(dx[j], dx[0], in * sizeof(float));
            nl_conv_s2_lanes_din_naive(dx[1], dout, w, n, c, f);
            nl_conv_s2_lanes_din(dx[2], dout, w, n, c, f, scratch);
            is_float(max_diff(dx[1], dx[2], in), 0.0, 1e-5 * (1.0 + max_abs(dx[1], in)),
                     "conv_s2_lanes_din on %dx%dx4x4, %d filters: matches the naive twin", n, c, f);
            /* the last image's last channel: the transposed convolution, pixel by pixel */
            worst = 0.0;
            scale = 1.0;
            for (int p = 0; p < 16; p++) {
                double sum = 0.0;
                for (int fo = 0; fo < f; fo++)
                    for (int o = 0; o < 4; o++) {
                        const int ky = p / 4 - 2 * (o / 2) + 1, kx = p % 4 - 2 * (o % 2) + 1;
                        if (ky >= 0 && ky < 3 && kx >= 0 && kx < 3)
                            sum += (double)w[((size_t)fo * c + c - 1) * 9 + ky * 3 + kx] *
                                   dout[((size_t)(n - 1) * f + fo) * 4 + o];
                    }
                const size_t at = ((size_t)(n - 1) * c + c - 1) * 16 + p;
                worst = fmax(worst, fabs((double)dx[2][at] - (double)dx[0][at] - sum));
                scale += fabs(sum);
            }
            is_float(worst, 0.0, 1e-5 * scale,
                     "conv_s2_lanes_din on %dx%dx4x4, %d filters: the last image's last channel "
                     "is the transposed convolution",
                     n, c, f);
            nl_kernels_vector(0);
            memcpy(dx[2], dx[0], in * sizeof(float));
            nl_conv_s2_lanes_din(dx[2], dout, w, n, c, f, scratch);
            nl_kernels_vector(1);
            ok(memcmp(dx[1], dx[2], in * sizeof(float)) == 0,
               "conv_s2_lanes_din on %dx%dx4x4, %d filters, vector paths off: the naive twin", n, c,
               f);
            free(w);
            free(dout);
            free(scratch);
            for (int j = 0; j < 3; j++)
                free(dx[j]);
        }
        free(x);
        free(xt);
        free(dy);
        for (int j = 0; j < 4; j++)
            free(dw[j]);
    }
}

/* What nl_conv_lanes_dweight_rows hands out, kept: rows of out (f, c, 3, 3) as put gives them. */
struct rows_got {
    float *out;
    size_t row;
    int next, calls, bad;
};

static void rows_keep(void *ud, int fo, int rows, const float *g)
{
    struct rows_got *r = ud;
    r->bad |= fo != r->next || rows < 1 || rows > 2;
    memcpy(r->out + (size_t)fo * r->row, g, (size_t)rows * r->row * sizeof(float));
    r->next = fo + rows;
    r->calls++;
}

/* The lanes weight gradients of a split step, rows handed to a caller: on 1 to 3 parts of
 * different sizes, channels that fill blocks of
 * 16 or leave a tail, ranges of rows of odd and even length, both kernels; each row what the
 * kernel called for each part in turn into zeros leaves, bit for bit, in pairs from the range's
 * first row; the naive twin likewise with the vector paths off, and the two to rounding. */
static void test_lanes_rows(int s2)
{
    static const int cases[][5] = {/* parts, c, f, f0, f1 */ {2, 32, 16, 0, 16},
                                   {3, 21, 9, 1, 8},
                                   {1, 16, 5, 2, 5},
                                   {2, 40, 7, 3, 4}};
    const int pixels = s2 ? 16 : 4;
    const lanes_dweight_fn one = s2 ? nl_conv_s2_lanes_dweight : nl_conv_plane2_dweight;
    const char *name = s2 ? "stride-2 lanes" : "plane2";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int parts = cases[i][0], c = cases[i][1], f = cases[i][2];
        const int f0 = cases[i][3], f1 = cases[i][4];
        const size_t row = (size_t)c * 9, nw = (size_t)f * row;
        const float *dy[3], *xt[3];
        int ld[3];
        float *own[6];
        for (int t = 0; t < parts; t++) {
            const int n = 3 + 7 * t; /* 3, 10, 17 images */
            const size_t in = (size_t)n * c * pixels;
            float *x = floats(in), *turned = floats(in);
            float *d = floats((size_t)f * (size_t)n * 4);
            ld[t] = n * 4;
            fill(x, in, -1, 1);
            fill(d, (size_t)f * (size_t)ld[t], -1, 1);
            nl_conv_lanes_turn(turned, x, n, c, pixels);
            free(x);
            dy[t] = own[2 * t] = d;
            xt[t] = own[2 * t + 1] = turned;
        }
        const struct nl_lanes_parts p = {.parts = parts, .dy = dy, .xt = xt, .ld = ld};
        float *want[2] = {floats(nw), floats(nw)}, *got[2] = {floats(nw), floats(nw)};
        float *buf = floats(2 * row);
        for (int vec = 1; vec >= 0; vec--) {
            nl_kernels_vector(vec);
            memset(want[vec], 0, nw * sizeof(float));
            for (int t = 0; t < parts; t++)
                one(want[vec], dy[t], (size_t)ld[t], xt[t], ld[t] / 4, c, f0, f1);
            struct rows_got r = {.out = got[vec], .row = row, .next = f0};
            memset(got[vec], 0, nw * sizeof(float));
            nl_conv_lanes_dweight_rows(&p, c, f0, f1, s2, buf, rows_keep, &r);
            ok(!r.bad && r.next == f1 && r.calls == (f1 - f0 + 1) / 2 &&
                   memcmp(want[vec], got[vec], nw * sizeof(float)) == 0,
               "lanes rows (%s, %s), %d part(s), %d channels, rows [%d, %d): each part's kernel "
               "into zeros, by pairs",
               name, vec ? "vector" : "naive", parts, c, f0, f1);
        }
        nl_kernels_vector(1);
        is_float(max_diff(got[0], got[1], nw), 0.0, 1e-5 * (1.0 + max_abs(got[0], nw)),
                 "lanes rows (%s), %d part(s), %d channels: the vector path matches the naive twin",
                 name, parts, c);
        for (int t = 0; t < 2 * parts; t++)
            free(own[t]);
        for (int j = 0; j < 2; j++) {
            free(want[j]);
            free(got[j]);
        }
        free(buf);
    }
}

/* Batchnorm's element-wise passes over all channels of an image at once (nl_bn_*_chans) against a
 * call per channel of the per-plane kernels, bit for bit: vector and naive paths, planes that
 * take the vector path (1 to 16) and one that does not (3), channel counts that fill the last
 * vector and that do not, every activation, written and added, the residual's gradient and dx. */
static void test_bn_chans(void)
{
    static const size_t planes[] = {1, 2, 4, 8, 16, 3};
    static const int chans[] = {1, 5, 64, 37};
    const int cmax = 64;
    const size_t max = 16 * (size_t)cmax;
    float *x = floats(max), *y = floats(max), *dy = floats(max), *res = floats(max);
    float *o1 = floats(max), *o2 = floats(max), *r1 = floats(max), *r2 = floats(max);
    float mu[64], is[64], g[64], b[64], a1[64], a2[64], w[64];
    int wrong = 0, cases = 0;

    fill(x, max, -1, 1);
    fill(dy, max, -1, 1);
    fill(res, max, -1, 1);
    fill(mu, cmax, -0.3f, 0.3f);
    fill(is, cmax, 0.5f, 2.0f);
    fill(g, cmax, -1, 1);
    fill(b, cmax, -0.5f, 0.5f);
    fill(a1, cmax, -0.2f, 0.2f);
    fill(a2, cmax, -0.2f, 0.2f);
    fill(w, cmax, -1.5f, 1.5f);
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        for (size_t pi = 0; pi < sizeof planes / sizeof planes[0]; pi++)
            for (size_t ci = 0; ci < sizeof chans / sizeof chans[0]; ci++)
                for (int act = NL_ACT_NONE; act <= NL_ACT_RELU6; act++) {
                    const size_t plane = planes[pi], n = plane * (size_t)chans[ci];
                    const int c = chans[ci];
                    nl_scale_shift_naive(y, x, max, 7.3f, -0.4f, act);
                    for (int with_res = 0; with_res < 2; with_res++) {
                        fill_value(o1, max, 9.0f);
                        fill_value(o2, max, 9.0f);
                        nl_bn_apply_act_chans(o1, x, with_res ? res : NULL, plane, c, mu, is, g, b,
                                              act);
                        for (int k = 0; k < c; k++)
                            nl_bn_apply_act(o2 + k * plane, x + k * plane,
                                            with_res ? res + k * plane : NULL, plane, mu[k], is[k],
                                            g[k], b[k], act);
                        wrong += memcmp(o1, o2, max * sizeof *o1) != 0;
                        cases++;
                    }
                    for (unsigned set = 0; set < 4; set++) {
                        fill_value(o1, max, 0.5f);
                        fill_value(o2, max, 0.5f);
                        fill_value(r1, max, -0.25f);
                        fill_value(r2, max, -0.25f);
                        nl_bn_backward_apply_res_chans(o1, r1, dy, y, x, plane, c, g, a1, a2, mu,
                                                       is, act, set);
                        for (int k = 0; k < c; k++) {
                            const size_t at = (size_t)k * plane;
                            nl_bn_backward_apply_res(o2 + at, r2 + at, dy + at, y + at, x + at,
                                                     plane, g[k], a1[k], a2[k], mu[k], is[k], act,
                                                     set);
                        }
                        wrong += memcmp(o1, o2, max * sizeof *o1) != 0;
                        wrong += memcmp(r1, r2, max * sizeof *r1) != 0;
                        fill_value(o1, max, 0.5f);
                        fill_value(o2, max, 0.5f);
                        nl_bn_backward_apply_mask_chans(o1, dy, x, plane, c, g, a1, a2, mu, is, w,
                                                        b, act, (int)(set & 1));
                        for (int k = 0; k < c; k++) {
                            const size_t at = (size_t)k * plane;
                            nl_bn_backward_apply_mask(o2 + at, dy + at, x + at, plane, g[k], a1[k],
                                                      a2[k], mu[k], is[k], w[k], b[k], act,
                                                      (int)(set & 1));
                        }
                        wrong += memcmp(o1, o2, max * sizeof *o1) != 0;
                        cases += 3;
                    }
                    (void)n;
                }
    }
    nl_kernels_vector(1);
    is_int(wrong, 0,
           "batchnorm's passes over all channels of an image: the floats of a call per "
           "channel, %d cases, vector and naive paths",
           cases);
    /* the lanes' parameters do change along the vector: a plane of 4 where each channel differs */
    fill_value(o1, max, 0.0f);
    nl_bn_apply_act_chans(o1, x, NULL, 4, 4, mu, is, g, b, NL_ACT_NONE);
    float want = g[3] * ((x[12] - mu[3]) * is[3]) + b[3];
    ok(o1[12] == want && o1[16] == 0.0f, "channel 3's plane takes channel 3's parameters, and "
                                         "nothing past the 4 channels is written");
    free(x);
    free(y);
    free(dy);
    free(res);
    free(o1);
    free(o2);
    free(r1);
    free(r2);
}

/* nl_pgemm_rows (a read in place) against the whole matrix packed and nl_pgemm_naive, bit for
 * bit, on the vector path and the scalar one: both transposes, rows around the panel heights of 6
 * and 5, k past several blocks of 128, from 0 (c full of NaN) and from c; and nl_sgemm_rows,
 * where it takes that kernel (OpenBLAS without AVX-512 on a CPU that has it), the same floats. */
static void check_pgemm_rows(int ta, int m, int n, int k, int accumulate)
{
    const int lda = (ta ? m : k) + 3, ldb = n + 5, ldc = n + 2;
    const size_t arows = ta ? k : m;
    float *a = floats(arows * lda), *b = floats((size_t)k * ldb);
    float *c0 = floats((size_t)m * ldc), *c1 = floats((size_t)m * ldc);
    float *c2 = floats((size_t)m * ldc), *ap = floats(nl_pgemm_packed_floats(m, k) + 1);

    fill(a, arows * lda, -1, 1);
    fill(b, (size_t)k * ldb, -1, 1);
    if (accumulate)
        fill(c0, (size_t)m * ldc, -1, 1);
    else
        fill_value(c0, (size_t)m * ldc, NAN);
    memcpy(c1, c0, (size_t)m * ldc * sizeof *c0);
    memcpy(c2, c0, (size_t)m * ldc * sizeof *c0);
    nl_pgemm_rows(ta, m, n, k, a, lda, b, ldb, accumulate, c0, ldc);
    nl_pgemm_pack(ap, a, lda, ta, m, k);
    nl_pgemm_naive(c1, ldc, ap, b, ldb, m, n, k, NULL, accumulate);
    int same = 1;
    for (int i = 0; i < m; i++)
        same &= memcmp(c0 + (size_t)i * ldc, c1 + (size_t)i * ldc, (size_t)ldc * sizeof *c0) == 0 &&
                !isnan(c0[(size_t)i * ldc + n - 1]);
    ok(same, "pgemm_rows %c %dx%dx%d from %s: the whole packed product's floats", ta ? 'T' : 'N', m,
       n, k, accumulate ? "c" : "0");
    if (nl_sgemm_own(accumulate ? 1.0f : 0.0f)) {
        nl_sgemm_rows(ta, m, n, k, a, lda, b, ldb, accumulate ? 1.0f : 0.0f, c2, ldc);
        same = 1;
        for (int i = 0; i < m; i++)
            same &= memcmp(c2 + (size_t)i * ldc, c1 + (size_t)i * ldc, (size_t)n * sizeof *c0) == 0;
        ok(same, "sgemm_rows %c %dx%dx%d takes nnlab's kernel: the same floats", ta ? 'T' : 'N', m,
           n, k);
    }
    free(a);
    free(b);
    free(c0);
    free(c1);
    free(c2);
    free(ap);
}

/* nl_pgemm_nt against its naive twin bit for bit (k around the 16 lanes, blocks of 4 rows and a
 * remainder, from 0 and from c), against the sum in double, and its transpose: b a^T computed so
 * is c turned, to the bit; and nl_sgemm where it takes this kernel, the same floats. */
static void check_pgemm_nt(int m, int n, int k, int accumulate)
{
    const int lda = k + 3, ldb = k + 1, ldc = n + 2, ldt = m + 1;
    float *a = floats((size_t)m * lda), *b = floats((size_t)n * ldb);
    float *c0 = floats((size_t)m * ldc), *c1 = floats((size_t)m * ldc),
          *c2 = floats((size_t)m * ldc);
    float *ct = floats((size_t)n * ldt), *cd = floats((size_t)m * ldc);

    fill(a, (size_t)m * lda, -1, 1);
    fill(b, (size_t)n * ldb, -1, 1);
    fill(c0, (size_t)m * ldc, -1, 1);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            ct[(size_t)j * ldt + i] = c0[(size_t)i * ldc + j];
    memcpy(c1, c0, (size_t)m * ldc * sizeof *c0);
    memcpy(c2, c0, (size_t)m * ldc * sizeof *c0);
    memcpy(cd, c0, (size_t)m * ldc * sizeof *c0);
    nl_pgemm_nt(m, n, k, a, lda, b, ldb, accumulate, c0, ldc);
    nl_pgemm_nt_naive(m, n, k, a, lda, b, ldb, accumulate, c1, ldc);
    nl_pgemm_nt(n, m, k, b, ldb, a, lda, accumulate, ct, ldt);
    nl_sgemm_naive(0, 1, m, n, k, 1.0f, a, lda, b, ldb, accumulate ? 1.0f : 0.0f, cd, ldc);
    int same = 1, turned = 1;
    for (int i = 0; i < m; i++) {
        same &= memcmp(c0 + (size_t)i * ldc, c1 + (size_t)i * ldc, (size_t)ldc * sizeof *c0) == 0;
        for (int j = 0; j < n; j++)
            turned &= memcmp(&c0[(size_t)i * ldc + j], &ct[(size_t)j * ldt + i], sizeof *c0) == 0;
    }
    ok(same, "pgemm_nt %dx%dx%d from %s: the tiles agree with the naive twin bit for bit", m, n, k,
       accumulate ? "c" : "0");
    ok(turned, "pgemm_nt %dx%dx%d: b a^T is the same floats turned", m, n, k);
    is_float(max_diff(c0, cd, (size_t)m * ldc), 0.0, 1e-5 * (1.0 + k / 16.0),
             "pgemm_nt %dx%dx%d: within rounding of the sum in double", m, n, k);
    if (nl_sgemm_own(accumulate ? 1.0f : 0.0f)) {
        nl_sgemm(0, 1, m, n, k, 1.0f, a, lda, b, ldb, accumulate ? 1.0f : 0.0f, c2, ldc);
        ok(memcmp(c2, c1, (size_t)m * ldc * sizeof *c2) == 0,
           "sgemm N T %dx%dx%d takes nnlab's kernel: the same floats", m, n, k);
    }
    free(a);
    free(b);
    free(c0);
    free(c1);
    free(c2);
    free(ct);
    free(cd);
}

static void test_pgemm_rows(void)
{
    static const int nt[][3] = {{1, 1, 1},     {4, 4, 16},   {5, 33, 17}, {16, 144, 196},
                                {33, 70, 300}, {1, 300, 50}, {70, 3, 40}};
    for (size_t i = 0; i < sizeof nt / sizeof nt[0]; i++)
        for (int acc = 0; acc <= 1; acc++)
            for (int vec = 1; vec >= 0; vec--) {
                nl_kernels_vector(vec);
                check_pgemm_nt(nt[i][0], nt[i][1], nt[i][2], acc);
            }
    nl_kernels_vector(1);
    static const int shapes[][3] = {{1, 32, 1},    {16, 784, 16},   {37, 33, 17},
                                    {50, 64, 500}, {13, 100, 2100}, {64, 49, 4500}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int ta = 0; ta <= 1; ta++)
            for (int acc = 0; acc <= 1; acc++)
                for (int vec = 1; vec >= 0; vec--) {
                    nl_kernels_vector(vec);
                    check_pgemm_rows(ta, shapes[i][0], shapes[i][1], shapes[i][2], acc);
                }
    nl_kernels_vector(1);
    const char *note = nl_kernels_blas_note();
    const int narrow = nl_kernels_vector_on() && strstr(note, "SkylakeX") == NULL &&
                       strstr(note, "Cooperlake") == NULL && strstr(note, "SapphireRapids") == NULL;
    ok(nl_sgemm_own(0.0f) == narrow && nl_sgemm_own(1.0f) == narrow,
       "sgemm takes nnlab's kernels exactly where OpenBLAS runs no AVX-512 on a CPU with it "
       "(%s)",
       note);
    ok(!nl_sgemm_own(0.5f) && !nl_sgemm_own(-1.0f),
       "sgemm keeps OpenBLAS for betas other than 0 and 1");
}

int main(void)
{
    nl_kernels_init();
    nl_rng_seed(&rng, 20240601);

    test_blas_core();

    test_sgemm();
    test_sum();
    test_embedding_backward();

    static const struct geom geoms[] = {
        {2, 5, 6, 3, 3, 1, 1, 0, 0}, {3, 7, 9, 3, 3, 2, 2, 1, 1},   {2, 8, 7, 3, 2, 2, 3, 2, 0},
        {1, 6, 6, 1, 1, 3, 3, 0, 0}, {2, 4, 5, 2, 2, 1, 1, 3, 3},   {1, 28, 28, 5, 5, 1, 1, 0, 0},
        {3, 5, 5, 5, 5, 1, 1, 0, 0}, {2, 12, 12, 5, 5, 1, 1, 0, 0}, {2, 11, 12, 5, 5, 1, 1, 0, 0},
    };
    /* Against the definition on the vector paths (where the CPU has them) and the scalar ones. */
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        for (size_t i = 0; i < sizeof geoms / sizeof geoms[0]; i++) {
            test_im2col(&geoms[i]);
            test_im2col_t(&geoms[i]);
        }
        test_pgemm();
        test_conv1c();
    }
    nl_kernels_vector(1);
    test_vector_twins();
    test_fusion_twins();
    test_sgd_twins();

    static const struct conv_case convs[] = {
        {3, 3, 12, 10, 4, 3, 5, 2, 1, 1, 2, 0}, {1, 1, 28, 28, 20, 5, 5, 1, 1, 0, 0, 0},
        {4, 2, 9, 9, 3, 3, 3, 2, 2, 1, 1, 1},   {2, 5, 6, 6, 7, 1, 1, 1, 1, 0, 0, 0},
        {2, 2, 4, 5, 3, 2, 2, 1, 1, 3, 3, 0},   {5, 20, 12, 12, 50, 5, 5, 1, 1, 0, 0, 0},
        {3, 7, 5, 3, 9, 1, 1, 1, 1, 0, 0, 1},   {4, 3, 7, 6, 5, 3, 3, 2, 1, 1, 0, 0},
        {3, 6, 3, 5, 11, 1, 1, 2, 2, 0, 0, 0},
    };
    /* Both lowerings of every shape against the direct loops; one image alone takes the
     * per-image path whatever the lowering, so those cases run on several. */
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
        test_conv(&convs[i], NL_LOWER_SAMPLE);
        test_conv(&convs[i], NL_LOWER_SHARD);
        test_conv(&convs[i], NL_LOWER_PACKED);
        if (nl_conv1c_fits(convs[i].c, convs[i].kh, convs[i].kw, convs[i].sh, convs[i].sw,
                           convs[i].ph, convs[i].pw, (convs[i].h - convs[i].kh) / convs[i].sh + 1,
                           (convs[i].w - convs[i].kw) / convs[i].sw + 1))
            test_conv(&convs[i], NL_LOWER_ONECHAN);
        if (convs[i].sh == 1 && convs[i].sw == 1 && convs[i].ph < convs[i].kh &&
            convs[i].pw < convs[i].kw)
            test_conv(&convs[i], NL_LOWER_DIRECT);
    }
    /* Stride 2 from the phase planes: the unrolling against im2col and col2im, the layer against
     * the direct loops and against SAMPLE, on resnet8's shapes and odd ones, both paths. */
    static const int s2_twins[][6] = {
        {16, 28, 28, 3, 1}, {32, 14, 14, 3, 1}, {16, 28, 28, 1, 0}, {3, 9, 11, 3, 1},
        {2, 7, 7, 3, 1},    {3, 8, 8, 2, 0},    {2, 5, 6, 3, 2},    {2, 1, 1, 3, 1},
        {2, 40, 40, 3, 1},  {1, 64, 64, 3, 1},  {4, 6, 7, 1, 0},
    };
    static const struct conv_case s2s[] = {
        {3, 16, 28, 28, 32, 3, 3, 2, 2, 1, 1, 1}, {2, 32, 14, 14, 64, 3, 3, 2, 2, 1, 1, 0},
        {4, 2, 9, 9, 3, 3, 3, 2, 2, 1, 1, 1},     {3, 6, 3, 5, 11, 1, 1, 2, 2, 0, 0, 0},
        {2, 3, 7, 8, 5, 3, 3, 2, 2, 1, 1, 0},
    };
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        for (size_t i = 0; i < sizeof s2_twins / sizeof s2_twins[0]; i++) {
            const int *t = s2_twins[i];
            test_s2_twins(t[0], t[1], t[2], t[3], t[3], t[4], t[4]);
        }
        for (size_t i = 0; i < sizeof s2s / sizeof s2s[0]; i++) {
            test_conv(&s2s[i], NL_LOWER_PHASES);
            test_s2_layer(&s2s[i]);
        }
    }
    nl_kernels_vector(1);
    {
        struct nl_layer s2c1 = {.ops = nl_layer_kind("conv"),
                                .ninputs = 1,
                                .filters = 32,
                                .kh = 3,
                                .kw = 3,
                                .sh = 2,
                                .sw = 2,
                                .ph = 1,
                                .pw = 1,
                                .in = {{16, 28, 28}}};
        struct nl_layer s2sc = s2c1, s1 = s2c1;
        struct nl_error err = {0};
        s2sc.kh = s2sc.kw = 1;
        s2sc.ph = s2sc.pw = 0;
        s1.sh = s1.sw = 1;
        s1.lowering = NL_LOWER_PHASES;
        ok(s2c1.ops->setup(&s2c1, &err) == 0 && s2c1.lower == NL_LOWER_PHASES &&
               s2sc.ops->setup(&s2sc, &err) == 0 && s2sc.lower == NL_LOWER_SAMPLE,
           "resnet8's s2c1 (3x3 stride 2 on 16x28x28): the phase planes; its 1x1 shortcut: SAMPLE");
        ok(s1.ops->setup(&s1, &err) < 0 && strstr(err.msg, "phase planes"),
           "conv 3x3 stride 1 asked to run the phase planes fails setup: %s", err.msg);
    }
    /* The direct lowering on shapes of resnet8 and on odd ones: rows of one, two and three
     * vectors, filters not a multiple of eight. */
    test_conv_s1_twins();
    test_conv_s1_dweight_twins();
    test_conv_plane2_twins();
    test_conv_s2_lanes_twins();
    static const struct conv_case directs[] = {
        {2, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1}, {3, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1, 0},
        {2, 3, 5, 37, 11, 3, 3, 1, 1, 1, 1, 0},   {3, 5, 9, 13, 6, 3, 3, 1, 1, 0, 0, 1},
        {2, 2, 6, 5, 9, 3, 5, 1, 1, 2, 1, 0},
    };
    for (size_t i = 0; i < sizeof directs / sizeof directs[0]; i++)
        test_conv(&directs[i], NL_LOWER_DIRECT);
    /* Winograd's lowerings: planes that are and are not multiples of the tile, one image and
     * several, C and F off multiples of 16, padding 1, 0 and 2, one chunk of images and several, on
     * the vector paths and the naive ones. In fp32 they are not the direct sum: the transforms
     * scale values up by as much as 100 (F(4x4)'s points 2 and -2) before the products, so the
     * tolerance is 5e-5 of the largest value compared, plus 5e-5; the largest error measured is
     * printed. */
    static const int wino_twins[][8] = {
        /* m, n, c, h, w, f, ph, pw */
        {4, 2, 3, 7, 9, 5, 1, 1},
        {2, 2, 3, 7, 9, 5, 1, 1},
        {4, 3, 17, 16, 16, 19, 1, 1},
        {2, 5, 33, 2, 2, 18, 1, 1},
        {4, 1, 2, 5, 13, 3, 0, 0},
        {2, 2, 4, 6, 5, 7, 2, 2},
        {4, 7, 16, 4, 4, 16, 1, 1},
        {4, 2, 5, 11, 3, 6, 2, 0},
        {2, 3, 20, 1, 1, 17, 1, 1},
        /* Planes whose tile rows the input adjoint takes row by row (6 tiles and more in 32
         * columns): 28 wide, padding 1, 2 and 0, a row of tiles whose last one overhangs. */
        {4, 2, 16, 28, 28, 16, 1, 1},
        {2, 2, 3, 28, 28, 5, 1, 1},
        {4, 2, 3, 9, 25, 4, 2, 2},
        {2, 1, 2, 7, 30, 3, 0, 0},
        {4, 3, 2, 6, 23, 3, 1, 1},
        /* One image in blocks of channels (a split call's input transform, vc): 56 wide (the
         * gathers), 28 (a tile row at a time), 16 (stacked tile rows) and 7, padding 1. */
        {4, 1, 20, 56, 56, 4, 1, 1},
        {4, 1, 20, 28, 28, 4, 1, 1},
        {4, 1, 20, 16, 16, 4, 1, 1},
        {4, 1, 20, 7, 7, 4, 1, 1},
        {2, 1, 20, 14, 14, 4, 1, 1},
    };
    static const struct conv_case winos[] = {
        {2, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1},
        {3, 17, 7, 9, 19, 3, 3, 1, 1, 1, 1, 0},
        {1, 5, 13, 11, 6, 3, 3, 1, 1, 1, 1, 0},
        {4, 33, 4, 4, 18, 3, 3, 1, 1, 1, 1, 1},
        {5, 20, 2, 2, 35, 3, 3, 1, 1, 1, 1, 0},
        {3, 6, 10, 7, 5, 3, 3, 1, 1, 0, 0, 0},
        {2, 3, 5, 6, 4, 3, 3, 1, 1, 2, 2, 0},
        {2, 4, 8, 8, 9, 3, 3, 1, 1, 1, 0, 1},
        {3, 9, 1, 1, 7, 3, 3, 1, 1, 1, 1, 0},
        /* Shards that go through in several chunks of images (conv.c's wino_chunk), the last one
         * shorter: 4 + 1 images under F(4x4), 3 + 2 under F(2x2); one image a chunk. */
        {5, 24, 22, 22, 20, 3, 3, 1, 1, 1, 1, 0},
        {3, 32, 30, 30, 40, 3, 3, 1, 1, 1, 1, 1},
    };
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        for (size_t i = 0; i < sizeof wino_twins / sizeof wino_twins[0]; i++) {
            const int *k = wino_twins[i];
            test_wino_twins(k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]);
        }
        conv_rel = 5e-5;
        for (int lw = NL_LOWER_WINOGRAD; lw <= NL_LOWER_WINOGRAD2; lw++) {
            conv_worst = 0.0;
            for (size_t i = 0; i < sizeof winos / sizeof winos[0]; i++)
                test_conv(&winos[i], (enum nl_lowering)lw);
            diag("Winograd F(%dx%d, 3x3), %s paths: largest error %.2g of (1 + largest value)",
                 lw == NL_LOWER_WINOGRAD ? 4 : 2, lw == NL_LOWER_WINOGRAD ? 4 : 2,
                 vec ? "vector" : "naive", conv_worst);
        }
        conv_rel = 1e-5;
    }
    nl_kernels_vector(1);
    /* The 2x2-plane lowering: shards of 5 and 17 images (a tail of lanes), with and without a
     * bias; 2 images (under PLANE2_MIN: SHARD's products) and 1 (SAMPLE's); vector paths on and
     * off. */
    static const struct conv_case planes2[] = {
        {5, 20, 2, 2, 12, 3, 3, 1, 1, 1, 1, 0},
        {17, 9, 2, 2, 6, 3, 3, 1, 1, 1, 1, 1},
        {2, 8, 2, 2, 5, 3, 3, 1, 1, 1, 1, 0},
        {1, 4, 2, 2, 3, 3, 3, 1, 1, 1, 1, 0},
    };
    /* The stride-2 lanes lowering likewise: 4x4 and 2x2 outputs, a tail of lanes, a bias and
     * none, under PLANE2_MIN images. */
    static const struct conv_case s2lanes[] = {
        {5, 20, 8, 8, 12, 3, 3, 2, 2, 1, 1, 0}, {17, 9, 4, 4, 6, 3, 3, 2, 2, 1, 1, 1},
        {6, 7, 7, 7, 5, 3, 3, 2, 2, 1, 1, 0},   {2, 8, 4, 4, 5, 3, 3, 2, 2, 1, 1, 0},
        {1, 4, 8, 8, 3, 3, 3, 2, 2, 1, 1, 1},
    };
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        for (size_t i = 0; i < sizeof planes2 / sizeof planes2[0]; i++)
            test_conv(&planes2[i], NL_LOWER_PLANE2);
        for (size_t i = 0; i < sizeof s2lanes / sizeof s2lanes[0]; i++)
            test_conv(&s2lanes[i], NL_LOWER_S2LANES);
    }
    nl_kernels_vector(1);
    {
        struct nl_layer bad = {.ops = nl_layer_kind("conv"),
                               .ninputs = 1,
                               .filters = 4,
                               .kh = 3,
                               .kw = 3,
                               .ph = 1,
                               .pw = 1,
                               .lowering = NL_LOWER_PLANE2,
                               .in = {{3, 4, 4}}};
        struct nl_error err = {0};
        ok(bad.ops->setup(&bad, &err) < 0 && strstr(err.msg, "cannot run the 2x2-plane"),
           "conv 3x3 on a 4x4 plane asked to run the 2x2-plane lowering fails setup: %s", err.msg);
        struct nl_layer wide = bad;
        wide.sh = wide.sw = 2;
        wide.lowering = NL_LOWER_S2LANES;
        wide.in[0] = (struct nl_shape){3, 16, 16};
        ok(wide.ops->setup(&wide, &err) < 0 && strstr(err.msg, "cannot run the stride-2 lanes"),
           "conv 3x3 stride 2 to an 8x8 plane asked to run the stride-2 lanes lowering fails "
           "setup: %s",
           err.msg);
        struct nl_layer l3 = wide, l2 = wide;
        l3.lowering = l2.lowering = NL_LOWER_AUTO;
        l3.filters = 256;
        l3.in[0] = (struct nl_shape){128, 8, 8};
        l2.filters = 128;
        l2.in[0] = (struct nl_shape){64, 16, 16};
        const int vec = nl_kernels_vector_on();
        ok(l3.ops->setup(&l3, &err) == 0 && l3.lower == (vec ? NL_LOWER_S2LANES : NL_LOWER_SHARD) &&
               l2.ops->setup(&l2, &err) == 0 &&
               l2.lower == (vec ? NL_LOWER_PHASES : NL_LOWER_SHARD),
           "ResNet-18 64x64 layer3.0.conv1: the stride-2 lanes where the vector paths run, else "
           "one GEMM per shard; layer2.0.conv1: the phase planes, else one GEMM per shard");
        /* the phase planes only where the weights fit the cache: layer4.0.conv1 at 224x224 (P 49,
         * 1.18M weights) keeps one GEMM per shard */
        struct nl_layer l4 = wide;
        l4.lowering = NL_LOWER_AUTO;
        l4.filters = 512;
        l4.in[0] = (struct nl_shape){256, 14, 14};
        ok(l4.ops->setup(&l4, &err) == 0 && l4.lower == NL_LOWER_SHARD,
           "ResNet-18 224x224 layer4.0.conv1: one GEMM per shard");
        /* the 7x7 stride-2 stem: packed weights at 64x64 (P 1024), SAMPLE at 224x224 */
        struct nl_layer stem = {.ops = nl_layer_kind("conv"),
                                .ninputs = 1,
                                .filters = 64,
                                .kh = 7,
                                .kw = 7,
                                .sh = 2,
                                .sw = 2,
                                .ph = 3,
                                .pw = 3,
                                .in = {{3, 64, 64}}};
        struct nl_layer stem224 = stem;
        stem224.in[0] = (struct nl_shape){3, 224, 224};
        ok(stem.ops->setup(&stem, &err) == 0 &&
               stem.lower == (vec ? NL_LOWER_PACKED : NL_LOWER_SAMPLE) &&
               stem224.ops->setup(&stem224, &err) == 0 && stem224.lower == NL_LOWER_SAMPLE,
           "ResNet-18's conv1: packed weights at 64x64 where the vector paths run, else one GEMM "
           "per image; one GEMM per image at 224x224");
    }
    {
        struct nl_layer strided = {.ops = nl_layer_kind("conv"),
                                   .ninputs = 1,
                                   .filters = 4,
                                   .kh = 3,
                                   .kw = 3,
                                   .sh = 2,
                                   .sw = 2,
                                   .lowering = NL_LOWER_WINOGRAD,
                                   .in = {{3, 8, 8}}};
        struct nl_layer five = strided;
        struct nl_error err = {0};
        five.sh = five.sw = 1;
        five.kh = five.kw = 5;
        ok(strided.ops->setup(&strided, &err) < 0 && strstr(err.msg, "cannot run Winograd") &&
               five.ops->setup(&five, &err) < 0 && strstr(err.msg, "cannot run Winograd"),
           "conv 3x3 stride 2 and conv 5x5 asked to run Winograd fail setup: %s", err.msg);
    }
    /* Shapes whose lowering setup chooses by itself: a 2x2 and a 4x4 plane under many filters,
     * padded 3x3 (one GEMM per shard, the 4x4 one Winograd F(2x2) where the vector paths run)
     * and pointwise. */
    static const struct conv_case small_planes[] = {
        {3, 64, 4, 4, 128, 3, 3, 1, 1, 1, 1, 1},
        {2, 128, 2, 2, 256, 1, 1, 1, 1, 0, 0, 0},
        {3, 40, 5, 5, 100, 3, 3, 2, 2, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof small_planes / sizeof small_planes[0]; i++)
        test_conv(&small_planes[i], NL_LOWER_AUTO);
    {
        struct nl_layer big = {.ops = nl_layer_kind("conv"),
                               .ninputs = 1,
                               .filters = 512,
                               .kh = 3,
                               .kw = 3,
                               .ph = 1,
                               .pw = 1,
                               .in = {{512, 2, 2}}};
        struct nl_layer wide = big;
        struct nl_error err = {0};
        wide.in[0] = (struct nl_shape){512, 14, 14};
        const int vec = nl_kernels_vector_on();
        struct nl_layer four = big;
        four.filters = 256;
        four.in[0] = (struct nl_shape){256, 4, 4};
        ok(big.ops->setup(&big, &err) == 0 &&
               big.lower == (vec ? NL_LOWER_PLANE2 : NL_LOWER_SHARD) &&
               wide.ops->setup(&wide, &err) == 0 &&
               wide.lower == (vec ? NL_LOWER_WINOGRAD : NL_LOWER_SAMPLE) &&
               four.ops->setup(&four, &err) == 0 &&
               four.lower == (vec ? NL_LOWER_WINOGRAD2 : NL_LOWER_SHARD),
           "conv 512 3x3 on 512x2x2: the 2x2-plane kernels where the vector paths run, else one "
           "GEMM per shard; on 512x14x14: Winograd F(4x4), else one GEMM per image; 256 on "
           "256x4x4: F(2x2), else per shard");
        struct nl_layer mid = big, lenet2 = big;
        mid.filters = 128;
        mid.in[0] = (struct nl_shape){128, 8, 8};
        lenet2.filters = 50;
        lenet2.kh = lenet2.kw = 5;
        lenet2.ph = lenet2.pw = 0;
        lenet2.in[0] = (struct nl_shape){20, 12, 12};
        ok(mid.ops->setup(&mid, &err) == 0 &&
               mid.lower == (vec ? NL_LOWER_WINOGRAD : NL_LOWER_SHARD) &&
               lenet2.ops->setup(&lenet2, &err) == 0 &&
               lenet2.lower == (vec ? NL_LOWER_PACKED : NL_LOWER_SAMPLE),
           "conv 128 3x3 on 128x8x8 (ResNet-18 64x64 layer2): Winograd F(4x4) where the vector "
           "paths run, else one GEMM per shard; lenet's conv2: packed weights where the vector "
           "paths run, else one GEMM per image");
        struct nl_layer lenet1 = lenet2;
        lenet1.filters = 20;
        lenet1.in[0] = (struct nl_shape){1, 28, 28};
        ok(lenet1.ops->setup(&lenet1, &err) == 0 &&
               lenet1.lower == (vec ? NL_LOWER_ONECHAN : NL_LOWER_SAMPLE),
           "lenet's conv1 (20 5x5 on 1x28x28): one channel in where the vector paths run, else one "
           "GEMM per image");
        struct nl_layer stage1 = big, stage3 = big, strided = big;
        stage1.filters = 16;
        stage1.in[0] = (struct nl_shape){16, 28, 28};
        stage3.filters = 64;
        stage3.in[0] = (struct nl_shape){64, 7, 7};
        strided.filters = 16;
        strided.sh = strided.sw = 2;
        strided.lowering = NL_LOWER_DIRECT;
        strided.in[0] = (struct nl_shape){16, 28, 28};
        struct nl_layer stem = stage1;
        stem.in[0] = (struct nl_shape){1, 28, 28};
        ok(stage1.ops->setup(&stage1, &err) == 0 &&
               stage1.lower == (vec ? NL_LOWER_WINOGRAD : NL_LOWER_SAMPLE) &&
               stem.ops->setup(&stem, &err) == 0 &&
               stem.lower == (vec ? NL_LOWER_DIRECT : NL_LOWER_SAMPLE) &&
               stage3.ops->setup(&stage3, &err) == 0 && stage3.lower != NL_LOWER_DIRECT,
           "conv 16 3x3 on 16x28x28 (resnet8 stage 1): Winograd F(4x4) where the vector paths "
           "run; on 1x28x28 (its stem): direct; conv 64 on 64x7x7: not direct");
        ok(strided.ops->setup(&strided, &err) < 0 && strstr(err.msg, "cannot run direct"),
           "conv 3x3 stride 2 asked to run direct fails setup: %s", err.msg);
    }

    /* n, C, H, W, F (a multiple of C), kh, kw, sh, sw, ph, pw, no bias */
    static const struct conv_case depthwise[] = {
        {2, 4, 7, 9, 4, 3, 3, 1, 1, 1, 1, 0},   {3, 3, 8, 7, 6, 3, 3, 2, 2, 1, 1, 1},
        {1, 5, 6, 5, 5, 5, 5, 1, 1, 2, 2, 0},   {2, 2, 9, 4, 6, 3, 2, 2, 1, 0, 1, 0},
        {2, 6, 14, 14, 6, 3, 3, 1, 1, 1, 1, 1}, {2, 3, 5, 5, 3, 1, 1, 1, 1, 0, 0, 0},
        {2, 4, 11, 13, 8, 3, 5, 3, 2, 2, 0, 0}, {1, 2, 3, 3, 2, 3, 3, 1, 1, 2, 2, 1},
    };
    for (size_t i = 0; i < sizeof depthwise / sizeof depthwise[0]; i++)
        test_depthwise(&depthwise[i]);
    test_dwconv_twins();

    test_dense(5, (struct nl_shape){3, 2, 2}, 7, 0);
    test_dense(1, (struct nl_shape){10, 1, 1}, 3, 0);
    test_dense(8, (struct nl_shape){50, 1, 1}, 13, 1);
    test_dense(7, (struct nl_shape){50, 4, 4}, 500, 0);

    const char *pools[] = {"maxpool", "avgpool"};
    for (int i = 0; i < 2; i++) {
        test_pool(pools[i], 2, (struct nl_shape){3, 8, 8}, 2, 2, 0, 0, 0, 0);
        test_pool(pools[i], 3, (struct nl_shape){4, 9, 7}, 2, 2, 2, 2, 0, 0);
        test_pool(pools[i], 2, (struct nl_shape){2, 9, 10}, 3, 3, 2, 2, 1, 1);
        test_pool(pools[i], 3, (struct nl_shape){2, 7, 9}, 2, 3, 1, 2, 0, 0);
        test_pool(pools[i], 2, (struct nl_shape){1, 5, 7}, 3, 2, 2, 3, 1, 1);
    }
    /* Winograd's transforms on planes whose groups of 16 tiles are four tile rows of 4 tiles
     * (13 to 16 wide under F(4x4), 7 or 8 under F(2x2)): 14x14 as resnet8's second stage, a last
     * group that stops after one tile row, the tile rows of one group in two images, padding 0
     * and 2; and whole convolutions, resnet8's second stage in two chunks of images. (Last,
     * so that the random data of the tests before stay as they were.) */
    static const int wino_stack[][8] = {
        {4, 3, 32, 14, 14, 32, 1, 1},
        {4, 2, 3, 10, 14, 5, 1, 1},
        {4, 3, 2, 13, 15, 3, 0, 0},
        {4, 2, 3, 9, 14, 4, 2, 2},
        {2, 3, 5, 8, 8, 6, 1, 1},
        {2, 2, 3, 5, 7, 4, 1, 1},
        /* two tile rows of 6 to 8 tiles (22 to 30 wide under F(4x4), 11 to 16 under F(2x2)):
         * 28x28 as resnet8's first stage, rows of 7 tiles over 5 tile rows an image, 8 tiles. */
        {4, 3, 16, 28, 28, 16, 1, 1},
        {4, 3, 3, 20, 25, 4, 1, 1},
        {2, 3, 4, 16, 16, 5, 1, 1},
        /* rows of 2 tiles, which the gathering paths take: 7x7 as resnet8's third stage over
         * 5 images (a last group of 4 tiles), 8x8, 3 tile rows an image with padding 2. */
        {4, 5, 16, 7, 7, 16, 1, 1},
        {4, 3, 3, 8, 8, 4, 1, 1},
        {4, 2, 3, 9, 6, 5, 2, 2},
    };
    static const struct conv_case wino_stack_convs[] = {
        {9, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1},
        {3, 5, 13, 15, 6, 3, 3, 1, 1, 0, 0, 0},
        /* 16 channels a vector in the transposed input transform (du's plain products): 7x7 as
         * resnet8's third stage, one chunk; 16x16 in chunks. */
        {3, 16, 7, 7, 20, 3, 3, 1, 1, 1, 1, 1},
        {9, 16, 16, 16, 5, 3, 3, 1, 1, 1, 1, 0},
    };
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        for (size_t i = 0; i < sizeof wino_stack / sizeof wino_stack[0]; i++) {
            const int *k = wino_stack[i];
            test_wino_twins(k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]);
        }
        conv_rel = 5e-5;
        for (int lw = NL_LOWER_WINOGRAD; lw <= NL_LOWER_WINOGRAD2; lw++)
            for (size_t i = 0; i < sizeof wino_stack_convs / sizeof wino_stack_convs[0]; i++)
                test_conv(&wino_stack_convs[i], (enum nl_lowering)lw);
        conv_rel = 1e-5;
    }
    nl_kernels_vector(1);
    /* The transposes of PHASES' weight gradient, both paths, against a direct loop: resnet8's
     * dout and weight shapes, and rows that are no multiple of 16. */
    static const int transposes[][2] = {{32, 196}, {64, 49}, {32, 144},
                                        {144, 32}, {37, 13}, {5, 1}};
    for (size_t i = 0; i < sizeof transposes / sizeof transposes[0]; i++)
        test_s2_transpose(transposes[i][0], transposes[i][1]);
    /* The 1x1 stride-2 picking against nl_im2col and nl_col2im, both paths: resnet8's s2sc and
     * s3sc, odd sizes, rows wider than 32. */
    static const int picks[][3] = {{16, 28, 28}, {32, 14, 14}, {3, 7, 9}, {2, 40, 37}, {2, 1, 1}};
    for (size_t i = 0; i < sizeof picks / sizeof picks[0]; i++)
        test_s2_pick(picks[i][0], picks[i][1], picks[i][2]);
    /* resnet8's stride-2 convolutions: PHASES's and the 1x1 picking's weight gradients */
    test_s2_dweight(3, 16, 28, 32, 3, 1);
    test_s2_dweight(3, 32, 14, 64, 3, 1);
    test_s2_dweight(3, 16, 28, 32, 1, 0);
    test_s2_dweight(3, 32, 14, 64, 1, 0);
    /* nl_im2col_t's runs of taps (stride 1, no padding) on both paths: rows of 32 floats and
     * more (a run a window row), 49 taps, a 16-wide window, 10 window rows (more runs than it
     * plans: the row-by-row path), one pixel's output */
    static const struct geom dense_t[] = {
        {3, 9, 40, 3, 4, 1, 1, 0, 0},  {2, 20, 20, 7, 7, 1, 1, 0, 0},
        {1, 6, 17, 2, 16, 1, 1, 0, 0}, {2, 12, 40, 10, 3, 1, 1, 0, 0},
        {2, 4, 4, 4, 4, 1, 1, 0, 0},
    };
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        for (size_t i = 0; i < sizeof dense_t / sizeof dense_t[0]; i++)
            test_im2col_t(&dense_t[i]);
    }
    nl_kernels_vector(1);
    /* PACKED's forward by blocks of whole channels: a last block shorter than the others (9, 25
     * and 49 taps a channel), windows of more than 100 taps (a channel a block), padding and
     * stride 2, on the vector paths and the naive ones */
    static const struct conv_case packed_blocks[] = {
        {2, 13, 9, 9, 6, 3, 3, 1, 1, 1, 1, 0},  {3, 6, 10, 10, 5, 5, 5, 1, 1, 0, 0, 1},
        {2, 5, 9, 9, 3, 7, 7, 1, 1, 3, 3, 0},   {2, 3, 13, 13, 4, 11, 11, 1, 1, 0, 0, 0},
        {2, 7, 11, 12, 9, 5, 5, 2, 2, 2, 1, 0},
    };
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        for (size_t i = 0; i < sizeof packed_blocks / sizeof packed_blocks[0]; i++)
            test_conv(&packed_blocks[i], NL_LOWER_PACKED);
    }
    nl_kernels_vector(1);
    /* The input adjoint written rather than added (din's first writer): resnet8's three stages
     * (two and four tile rows stacked, and the gathers), other paddings and odd planes. */
    static const int adjoint_sets[][7] = {
        {4, 3, 16, 28, 28, 1, 1}, {4, 3, 32, 14, 14, 1, 1}, {4, 3, 64, 7, 7, 1, 1},
        {4, 2, 3, 13, 15, 0, 0},  {4, 2, 3, 9, 14, 2, 2},   {4, 2, 3, 20, 25, 1, 1},
        {2, 3, 5, 8, 8, 1, 1},    {2, 2, 4, 16, 16, 0, 2},  {4, 2, 3, 40, 37, 1, 1},
    };
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        for (size_t i = 0; i < sizeof adjoint_sets / sizeof adjoint_sets[0]; i++) {
            const int *k = adjoint_sets[i];
            test_wino_adjoint_set(k[0], k[1], k[2], k[3], k[4], k[5], k[6]);
        }
    }
    nl_kernels_vector(1);
    test_bn_mask();
    test_wino_rows(NL_LOWER_WINOGRAD2, 144, 4, 16, 22);
    test_wino_rows(NL_LOWER_WINOGRAD, 96, 8, 16, 20);
    test_lanes_grad_twins(2, 1);
    ok(nl_conv_s2_lanes_grad_fits(4, 4) && !nl_conv_s2_lanes_grad_fits(8, 8) &&
           !nl_conv_s2_lanes_grad_fits(3, 3),
       "the stride-2 lanes gradients take 4x4 inputs alone");
    test_lanes_grad_twins(4, 2);
    test_sgemm_rows();
    test_lanes_rows(0);
    test_lanes_rows(1);
    /* Four tile rows stacked where the padded input row is wider than a vector (stack_shift in
     * core/engine/winograd.c): 16x16 with padding 1 as ResNet-18's layer1 at 3x64x64, with
     * padding only at the sides, 16 wide over 14 rows; every transform and adjoint, the input
     * adjoint also written into din rather than added. */
    static const int wino_shift[][8] = {
        {4, 3, 20, 16, 16, 6, 1, 1},
        {4, 2, 3, 16, 16, 4, 0, 1},
        {4, 2, 5, 14, 16, 3, 1, 1},
    };
    for (int vec = 1; vec >= 0; vec--) {
        nl_kernels_vector(vec);
        for (size_t i = 0; i < sizeof wino_shift / sizeof wino_shift[0]; i++) {
            const int *k = wino_shift[i];
            test_wino_twins(k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]);
            test_wino_adjoint_set(k[0], k[1], k[2], k[3], k[4], k[6], k[7]);
        }
    }
    nl_kernels_vector(1);
    test_bn_chans();
    test_pgemm_rows();
    return done_testing();
}
