/* "conv": 2-D convolution (cross-correlation, as PyTorch's Conv2d) with stride and zero padding.
 * Each image is unrolled by im2col into a (K, P) matrix of columns, K = C*kh*kw and P = oh*ow,
 * and goes through one GEMM of its own: per image, the columns stay in cache and the product is
 * already in the output's layout. (Measured on lenet: one GEMM over the whole shard's columns
 * was 1.7x slower, the (K, n*P) matrix being far larger than the caches.)
 *
 *   weight [F, C, kh, kw], read as the matrix (F, K); bias [F]
 *   in  (n, C, H, W)    out (n, F, oh, ow)
 *   scratch: K*P floats of columns, whatever the shard's size; no aux. */
#include <limits.h>

#include "layers.h"
#include "nnlab/kernels.h"

struct conv_dims {
    struct nl__window win;
    int f;          /* filters */
    int k;          /* C*kh*kw */
    int p;          /* oh*ow */
    size_t in_size; /* C*H*W */
};

static void conv_dims(const struct nl_layer *l, struct conv_dims *d)
{
    nl__window_get(l, 0, &d->win);
    d->f = l->filters;
    d->k = d->win.c * d->win.kh * d->win.kw;
    d->p = d->win.oh * d->win.ow;
    d->in_size = nl_shape_size(l->in[0]);
}

static int conv_setup(struct nl_layer *l, struct nl_error *err)
{
    struct nl__window win;
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    if (l->filters <= 0)
        return nl__layer_fail(l, err, "conv needs a positive number of filters, not %d",
                              l->filters);
    rc = nl__window_setup(l, 0, &win, err);
    if (rc < 0)
        return rc;

    size_t k = (size_t)win.c * (size_t)win.kh * (size_t)win.kw;
    size_t p = (size_t)win.oh * (size_t)win.ow;
    if ((size_t)l->filters * p > INT_MAX || (size_t)l->filters * k > INT_MAX)
        return nl__layer_fail(l, err, "%d filters of %dx%d on input %dx%dx%d are too many",
                              l->filters, win.kh, win.kw, win.c, win.h, win.w);

    l->out = (struct nl_shape){l->filters, win.oh, win.ow};
    int wdims[4] = {l->filters, win.c, win.kh, win.kw};
    int fan_in = (int)k, fan_out = l->filters * win.kh * win.kw;
    nl__layer_add_param(l, "weight", 4, wdims, fan_in, fan_out, l->init);
    if (!l->no_bias) {
        int bdims[4] = {l->filters};
        nl__layer_add_param(l, "bias", 1, bdims, fan_in, fan_out, NL_INIT_ZERO);
    }
    l->scratch_fixed = k * p;
    return 0;
}

/* A 1x1 window with stride 1 and no padding: an image (C, H, W) is its own (K, P) columns. */
static int pointwise(const struct nl__window *g)
{
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* cols (K, P): image img (C, H, W) unrolled, or img itself when the conv is pointwise. */
static const float *sample_cols(float *cols, const float *img, const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;

    if (pointwise(g))
        return img;
    nl_im2col(cols, img, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->oh, g->ow);
    return cols;
}

/* Sample after sample: out_s (F, P) = weight (F, K) cols_s (K, P) + bias. One sample's columns
 * (K*P floats: 56 KiB for lenet's conv1, 125 KiB for conv2) stay in cache between the unrolling
 * and the product, and the product lands in the output's own layout with no reordering. */
static void conv_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    struct conv_dims d;
    conv_dims(l, &d);
    const float *bias = l->no_bias ? NULL : f->w + l->params[1].offset;
    const size_t out_size = (size_t)d.f * d.p;

    for (int s = 0; s < f->n; s++) {
        float *out = f->out + (size_t)s * out_size;
        const float *cols = sample_cols(f->scratch, f->in[0] + (size_t)s * d.in_size, &d);
        if (bias)
            for (int fo = 0; fo < d.f; fo++)
                for (int i = 0; i < d.p; i++)
                    out[(size_t)fo * d.p + i] = bias[fo];
        nl_sgemm(0, 0, d.f, d.p, d.k, 1.0f, f->w, d.k, cols, d.p, bias ? 1.0f : 0.0f, out, d.p);
    }
}

/* Sample after sample: dweight (F, K) += dout_s (F, P) cols_s^T (P, K), dbias (F) += row sums of
 * dout_s, then dcols (K, P) = weight^T (K, F) dout_s (F, P) folded back onto din_s. */
static void conv_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    struct conv_dims d;
    conv_dims(l, &d);
    const struct nl__window *g = &d.win;
    const size_t out_size = (size_t)d.f * d.p;
    float *db = b->dw && !l->no_bias ? b->dw + l->params[1].offset : NULL;

    for (int s = 0; s < b->n; s++) {
        const float *dout = b->dout + (size_t)s * out_size;
        if (b->dw) {
            const float *cols = sample_cols(b->scratch, b->in[0] + (size_t)s * d.in_size, &d);
            nl_sgemm(0, 1, d.f, d.k, d.p, 1.0f, dout, d.p, cols, d.p, 1.0f, b->dw, d.k);
        }
        if (db) {
            for (int fo = 0; fo < d.f; fo++)
                db[fo] += nl_sum(dout + (size_t)fo * d.p, d.p);
        }
        if (b->din[0]) {
            float *din = b->din[0] + (size_t)s * d.in_size;
            if (pointwise(g)) {
                /* din_s is dcols itself. */
                nl_sgemm(1, 0, d.k, d.p, d.f, 1.0f, b->w, d.k, dout, d.p, 1.0f, din, d.p);
                continue;
            }
            nl_sgemm(1, 0, d.k, d.p, d.f, 1.0f, b->w, d.k, dout, d.p, 0.0f, b->scratch, d.p);
            nl_col2im(din, b->scratch, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw,
                      g->oh, g->ow);
        }
    }
}

const struct nl_layer_ops nl__conv_ops = {
    .kind = "conv",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = conv_setup,
    .forward = conv_forward,
    .backward = conv_backward,
};
