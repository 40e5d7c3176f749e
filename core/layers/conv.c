/* "conv": 2-D convolution (cross-correlation, as PyTorch's Conv2d) with stride and zero padding.
 * The whole shard goes through one GEMM: every image is unrolled by im2col into its block of
 * columns of one (K, n*P) matrix, with K = C*kh*kw and P = oh*ow.
 *
 *   weight [F, C, kh, kw], read as the matrix (F, K); bias [F]
 *   in  (n, C, H, W)    out (n, F, oh, ow)
 *   scratch per sample: K*P floats of columns + F*P floats of products; no aux.
 * A shard's n*P must fit in int (the GEMM's dimension): 64 images of 224x224 use 3.2M. */
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
    l->scratch_per_sample = (k + (size_t)l->filters) * p;
    return 0;
}

/* cols (K, n*P): image s of in (n, C, H, W) unrolled into columns [s*P, (s+1)*P). */
static void shard_im2col(float *cols, const float *in, int n, const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    int np = n * d->p;

    for (int s = 0; s < n; s++)
        nl_im2col_ld(cols + (size_t)s * d->p, np, in + (size_t)s * d->in_size, g->c, g->h, g->w,
                     g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->oh, g->ow);
}

static void conv_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    struct conv_dims d;
    conv_dims(l, &d);
    int n = f->n, np = n * d.p;
    const float *bias = l->no_bias ? NULL : f->w + l->params[1].offset;
    float *cols = f->scratch;                             /* (K, n*P) */
    float *y = n == 1 ? f->out : cols + (size_t)d.k * np; /* (F, n*P) */

    if (n <= 0)
        return;
    shard_im2col(cols, f->in[0], n, &d);
    nl_sgemm(0, 0, d.f, np, d.k, 1.0f, f->w, d.k, cols, np, 0.0f, y, np);

    /* out (n, F, P) from y (F, n*P), plus the bias. */
    for (int s = 0; s < n; s++) {
        for (int fo = 0; fo < d.f; fo++) {
            float *dst = f->out + ((size_t)s * d.f + fo) * d.p;
            const float *src = y + (size_t)fo * np + (size_t)s * d.p;
            float b = bias ? bias[fo] : 0.0f;
            for (int i = 0; i < d.p; i++)
                dst[i] = src[i] + b;
        }
    }
}

static void conv_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    struct conv_dims d;
    conv_dims(l, &d);
    int n = b->n, np = n * d.p;
    float *cols = b->scratch;  /* (K, n*P): columns of in, then their gradient */
    const float *dy = b->dout; /* (F, n*P) */

    if (n <= 0 || (!b->dw && !b->din[0]))
        return;
    if (n > 1) {
        /* dy (F, n*P) from dout (n, F, P). */
        float *t = cols + (size_t)d.k * np;
        for (int s = 0; s < n; s++)
            for (int fo = 0; fo < d.f; fo++) {
                const float *src = b->dout + ((size_t)s * d.f + fo) * d.p;
                float *dst = t + (size_t)fo * np + (size_t)s * d.p;
                for (int i = 0; i < d.p; i++)
                    dst[i] = src[i];
            }
        dy = t;
    }

    if (b->dw) {
        /* dweight (F, K) += dy (F, n*P) cols^T (n*P, K); dbias (F) += row sums of dy. */
        shard_im2col(cols, b->in[0], n, &d);
        nl_sgemm(0, 1, d.f, d.k, np, 1.0f, dy, np, cols, np, 1.0f, b->dw, d.k);
        if (!l->no_bias) {
            float *db = b->dw + l->params[1].offset;
            for (int fo = 0; fo < d.f; fo++) {
                const float *row = dy + (size_t)fo * np;
                double sum = 0.0;
                for (int i = 0; i < np; i++)
                    sum += row[i];
                db[fo] += (float)sum;
            }
        }
    }
    if (b->din[0]) {
        /* dcols (K, n*P) = weight^T (K, F) dy (F, n*P), folded back onto each image. */
        const struct nl__window *g = &d.win;
        nl_sgemm(1, 0, d.k, np, d.f, 1.0f, b->w, d.k, dy, np, 0.0f, cols, np);
        for (int s = 0; s < n; s++)
            nl_col2im_ld(b->din[0] + (size_t)s * d.in_size, cols + (size_t)s * d.p, np, g->c, g->h,
                         g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->oh, g->ow);
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
