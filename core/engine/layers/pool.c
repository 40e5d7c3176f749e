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
 * in one pass over the whole shard's before backward. */
#include <math.h>
#include <string.h>

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

/* The common 2x2 window with stride 2 and no padding, on one sample: the same choices as the
 * general scan below (the first maximum in row-major order wins, a NaN gives NaN), computed
 * without data-dependent branches, which random data mispredicts half the time. */
static void maxpool_2x2(const struct nl__window *g, const float *x, float *out, int32_t *arg,
                        int act)
{
    const int w = g->w, ow = g->ow; /* locals: arg might alias *g for all the compiler knows */

    for (int c = 0; c < g->c; c++) {
        for (int oy = 0; oy < g->oh; oy++) {
            const int row = (c * g->h + 2 * oy) * w;
            const float *r0 = x + row, *r1 = r0 + w;
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

static void maxpool_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    struct nl__window g;
    nl__window_get(l, 1, &g);
    size_t in_size = nl_shape_size(l->in[0]), out_size = nl_shape_size(l->out);

    if (g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0) {
        for (int s = 0; s < f->n; s++)
            maxpool_2x2(&g, f->in[0] + (size_t)s * in_size, f->out + (size_t)s * out_size,
                        (int32_t *)f->aux + (size_t)s * out_size, f->act);
        return;
    }
    /* The padding rule makes every window hold at least one input value. */
    for (int s = 0; s < f->n; s++) {
        float *out = f->out + (size_t)s * out_size;
        nl_maxpool(out, (int32_t *)f->aux + (size_t)s * out_size, f->in[0] + (size_t)s * in_size,
                   g.c, g.h, g.w, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.oh, g.ow);
        for (size_t i = 0; f->act && i < out_size; i++) /* while the sample is in cache */
            out[i] = act_of(out[i], f->act);
    }
}

static void maxpool_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    size_t in_size = nl_shape_size(l->in[0]), out_size = nl_shape_size(l->out);

    if (!b->din[0])
        return;
    for (int s = 0; s < b->n; s++) {
        float *din = b->din[0] + (size_t)s * in_size;
        const float *dout = b->dout + (size_t)s * out_size, *out = b->out + (size_t)s * out_size;
        const int32_t *arg = (const int32_t *)b->aux + (size_t)s * out_size;
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
