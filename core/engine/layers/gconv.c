/* "gconv": grouped and depthwise 2-D convolution, as PyTorch's Conv2d with groups=G. A spec
 * writes it `conv F KxK groups=G` (core/engine/spec.c maps that to this kind when G > 1) or `gconv
 * F KxK groups=G`; groups=C with F = C (or a multiple) is a depthwise convolution. The input's C
 * channels and the F filters are cut into G groups; group g's filters see only its C/G input
 * channels.
 *
 *   weight [F, C/G, kh, kw], bias [F]
 *   in  (n, C, H, W)    out (n, F, oh, ow)
 *
 * Two lowerings (l->lower, chosen by setup; a test may force one):
 * - GROUPS: each (sample, group) is one small im2col and GEMM, (F/G, Kg) x (Kg, P),
 *   Kg = (C/G)*kh*kw, P = oh*ow. scratch: Kg*P floats, reused for every sample and group.
 * - DIRECT, for depthwise convolutions (one input channel per group): nl_dwconv's loops, tap
 *   after tap over the plane, no im2col and no scratch. A depthwise group's GEMM is (F/G, 9) x
 *   (9, P), nine multiply-adds per output: OpenBLAS spends more on packing and the call than
 *   on them. tests/bench_conv.c (forward and backward of 16 images, thread CPU time) on
 *   mobilenet-tiny's depthwise layers, 64 channels of 14x14: 3.2 GFLOP/s per group against
 *   8.4 direct at stride 1, 2.3 against 3.9 at stride 2. DIRECT sums a tap at a time
 *   rather than in the GEMM's order, so the last bits differ from GROUPS'.
 * In inference the executor may fold the batchnorm and ReLU after it into a pass over each
 * sample's output (nl_fwd.scale, shift, act), as for conv. */
#include <limits.h>

#include "layers.h"
#include "nnlab/kernels.h"

struct gdims {
    struct nl__window win;
    int g, cg, fg; /* groups, input channels and filters per group */
    int kg, p;     /* cg*kh*kw, oh*ow */
    size_t in_size, out_size;
};

static void gdims(const struct nl_layer *l, struct gdims *d)
{
    nl__window_get(l, 0, &d->win);
    d->g = l->groups > 1 ? l->groups : 1;
    d->cg = d->win.c / d->g;
    d->fg = l->filters / d->g;
    d->kg = d->cg * d->win.kh * d->win.kw;
    d->p = d->win.oh * d->win.ow;
    d->in_size = nl_shape_size(l->in[0]);
    d->out_size = (size_t)l->filters * d->p;
}

static int gconv_setup(struct nl_layer *l, struct nl_error *err)
{
    struct nl__window win;
    int rc = nl__layer_begin(l, err), g = l->groups > 1 ? l->groups : 1;

    if (rc < 0)
        return rc;
    if (l->filters <= 0)
        return nl__layer_fail(l, err, "conv needs a positive number of filters, not %d",
                              l->filters);
    if (l->in[0].c % g != 0 || l->filters % g != 0)
        return nl__layer_fail(l, err,
                              "groups=%d must divide both the input channels (%d) and the "
                              "filters (%d)",
                              g, l->in[0].c, l->filters);
    rc = nl__window_setup(l, 0, &win, err);
    if (rc < 0)
        return rc;
    size_t kg = (size_t)(win.c / g) * (size_t)win.kh * (size_t)win.kw;
    size_t p = (size_t)win.oh * (size_t)win.ow;
    if ((size_t)l->filters * p > INT_MAX || kg * p > INT_MAX)
        return nl__layer_fail(l, err, "%d filters of %dx%d on input %dx%dx%d are too many",
                              l->filters, win.kh, win.kw, win.c, win.h, win.w);
    l->out = (struct nl_shape){l->filters, win.oh, win.ow};
    int wdims[4] = {l->filters, win.c / g, win.kh, win.kw};
    int fan_in = (int)kg, fan_out = l->filters / g * win.kh * win.kw;
    nl__layer_add_param(l, "weight", 4, wdims, fan_in, fan_out, l->init);
    if (!l->no_bias) {
        int bdims[4] = {l->filters};
        nl__layer_add_param(l, "bias", 1, bdims, fan_in, fan_out, NL_INIT_ZERO);
    }
    int depthwise = win.c / g == 1;
    if (l->lowering == NL_LOWER_AUTO)
        l->lower = depthwise ? NL_LOWER_DIRECT : NL_LOWER_GROUPS;
    else if (l->lowering == NL_LOWER_GROUPS || (l->lowering == NL_LOWER_DIRECT && depthwise))
        l->lower = l->lowering;
    else
        return nl__layer_fail(l, err, "gconv has no lowering %d for %d channels per group",
                              (int)l->lowering, win.c / g);
    if (l->lower == NL_LOWER_GROUPS)
        l->scratch_fixed = kg * p;
    return 0;
}

static void group_cols(float *cols, const float *img, const struct gdims *d, int grp)
{
    const struct nl__window *w = &d->win;
    nl_im2col(cols, img + (size_t)grp * d->cg * w->h * w->w, d->cg, w->h, w->w, w->kh, w->kw, w->sh,
              w->sw, w->ph, w->pw, w->oh, w->ow);
}

/* The folded output pass of one sample's output y (F, P), when the executor set one. */
static void fold_pass(const struct nl_fwd *f, float *y, int filters, int p)
{
    for (int fo = 0; f->scale && fo < filters; fo++)
        nl_scale_shift(y + (size_t)fo * p, y + (size_t)fo * p, (size_t)p, f->scale[fo],
                       f->shift[fo], f->act);
}

static void gconv_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    struct gdims d;
    gdims(l, &d);
    const float *bias = l->no_bias ? NULL : f->w + l->params[1].offset;
    const size_t wg = (size_t)d.fg * d.kg; /* weights per group */
    const struct nl__window *w = &d.win;

    if (f->scale)
        bias = NULL; /* the folded output pass adds it (its shift) */
    if (l->lower == NL_LOWER_DIRECT) {
        for (int s = 0; s < f->n; s++) {
            nl_dwconv(f->out + (size_t)s * d.out_size, f->in[0] + (size_t)s * d.in_size, f->w, bias,
                      w->c, w->h, w->w, d.fg, w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, w->oh,
                      w->ow);
            fold_pass(f, f->out + (size_t)s * d.out_size, l->filters, d.p);
        }
        return;
    }

    for (int s = 0; s < f->n; s++) {
        const float *x = f->in[0] + (size_t)s * d.in_size;
        float *y = f->out + (size_t)s * d.out_size;
        for (int grp = 0; grp < d.g; grp++) {
            float *yg = y + (size_t)grp * d.fg * d.p;
            group_cols(f->scratch, x, &d, grp);
            /* yg (Fg, P) = weight_g (Fg, Kg) cols (Kg, P) */
            nl_sgemm(0, 0, d.fg, d.p, d.kg, 1.0f, f->w + grp * wg, d.kg, f->scratch, d.p, 0.0f, yg,
                     d.p);
            for (int fo = 0; bias && fo < d.fg; fo++) {
                float b = bias[grp * d.fg + fo];
                for (int i = 0; i < d.p; i++)
                    yg[(size_t)fo * d.p + i] += b;
            }
        }
        fold_pass(f, y, l->filters, d.p);
    }
}

static void gconv_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    struct gdims d;
    gdims(l, &d);
    const size_t wg = (size_t)d.fg * d.kg;
    const struct nl__window *w = &d.win;

    if (!b->dw && !b->din[0])
        return;
    if (l->lower == NL_LOWER_DIRECT) {
        float *db = b->dw && !l->no_bias ? b->dw + l->params[1].offset : NULL;
        for (int s = 0; s < b->n; s++)
            nl_dwconv_backward(b->din[0] ? b->din[0] + (size_t)s * d.in_size : NULL, b->dw, db,
                               b->dout + (size_t)s * d.out_size, b->in[0] + (size_t)s * d.in_size,
                               b->w, w->c, w->h, w->w, d.fg, w->kh, w->kw, w->sh, w->sw, w->ph,
                               w->pw, w->oh, w->ow);
        return;
    }
    for (int s = 0; s < b->n; s++) {
        const float *x = b->in[0] + (size_t)s * d.in_size;
        const float *dy = b->dout + (size_t)s * d.out_size;
        for (int grp = 0; grp < d.g; grp++) {
            const float *dyg = dy + (size_t)grp * d.fg * d.p;
            if (b->dw) {
                /* dweight_g (Fg, Kg) += dy_g (Fg, P) cols^T (P, Kg); dbias += row sums. */
                group_cols(b->scratch, x, &d, grp);
                nl_sgemm(0, 1, d.fg, d.kg, d.p, 1.0f, dyg, d.p, b->scratch, d.p, 1.0f,
                         b->dw + grp * wg, d.kg);
                if (!l->no_bias) {
                    float *db = b->dw + l->params[1].offset + grp * d.fg;
                    for (int fo = 0; fo < d.fg; fo++) {
                        double sum = 0.0;
                        for (int i = 0; i < d.p; i++)
                            sum += dyg[(size_t)fo * d.p + i];
                        db[fo] += (float)sum;
                    }
                }
            }
            if (b->din[0]) {
                /* dcols (Kg, P) = weight_g^T (Kg, Fg) dy_g (Fg, P), folded back. */
                nl_sgemm(1, 0, d.kg, d.p, d.fg, 1.0f, b->w + grp * wg, d.kg, dyg, d.p, 0.0f,
                         b->scratch, d.p);
                nl_col2im(b->din[0] + (size_t)s * d.in_size + (size_t)grp * d.cg * w->h * w->w,
                          b->scratch, d.cg, w->h, w->w, w->kh, w->kw, w->sh, w->sw, w->ph, w->pw,
                          w->oh, w->ow);
            }
        }
    }
}

const struct nl_layer_ops nl__gconv_ops = {
    .kind = "gconv",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = gconv_setup,
    .folds = 3,
    .forward = gconv_forward,
    .backward = gconv_backward,
};
