/* "leakyrelu", "gelu" and "softmax": elementwise and channelwise activations, as PyTorch's
 * LeakyReLU, GELU (the exact, erf form) and Softmax(dim=1).
 *
 *   in (n, C, H, W)    out (n, C, H, W)
 *   leakyrelu SLOPE: out = x for x > 0, SLOPE * x otherwise (SLOPE defaults to 0.01)
 *   gelu:            out = x * Phi(x), Phi the standard normal distribution function
 *   softmax:         over the C channels at each of the H*W positions; on a vector (F, 1, 1)
 *                    over its F features
 *   no parameters, no aux, no scratch. leakyrelu and gelu read the input in backward, softmax
 *   its output. */
#include <math.h>

#include "layers.h"

static int same_shape_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    l->out = l->in[0];
    return 0;
}

static int leakyrelu_setup(struct nl_layer *l, struct nl_error *err)
{
    if (!(l->slope >= 0.0f && l->slope < 1.0f))
        return nl__layer_fail(l, err, "leakyrelu slope %g is outside [0, 1)", (double)l->slope);
    return same_shape_setup(l, err);
}

static size_t total(const struct nl_layer *l, int n)
{
    return n > 0 ? (size_t)n * nl_shape_size(l->out) : 0;
}

static void leakyrelu_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    size_t count = total(l, f->n);
    const float *x = f->in[0];

    for (size_t i = 0; i < count; i++)
        f->out[i] = x[i] > 0.0f ? x[i] : l->slope * x[i];
}

static void leakyrelu_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    size_t count = total(l, b->n);
    float *din = b->din[0];

    if (!din)
        return;
    for (size_t i = 0; i < count; i++)
        din[i] += b->in[0][i] > 0.0f ? b->dout[i] : l->slope * b->dout[i];
}

static void gelu_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    size_t count = total(l, f->n);

    for (size_t i = 0; i < count; i++) {
        float x = f->in[0][i];
        f->out[i] = 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2));
    }
}

/* gelu' = Phi(x) + x phi(x) */
static void gelu_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    size_t count = total(l, b->n);
    float *din = b->din[0];
    const float inv_sqrt_2pi = 0.3989422804014327f;

    if (!din)
        return;
    for (size_t i = 0; i < count; i++) {
        float x = b->in[0][i];
        float cdf = 0.5f * (1.0f + erff(x * (float)M_SQRT1_2));
        float pdf = inv_sqrt_2pi * expf(-0.5f * x * x);
        din[i] += b->dout[i] * (cdf + x * pdf);
    }
}

static void softmax_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    const int c = l->out.c, plane = l->out.h * l->out.w;
    const size_t size = nl_shape_size(l->out);

    for (int s = 0; s < f->n; s++) {
        const float *x = f->in[0] + (size_t)s * size;
        float *y = f->out + (size_t)s * size;
        for (int p = 0; p < plane; p++) {
            float mx = x[p];
            for (int k = 1; k < c; k++)
                mx = fmaxf(mx, x[(size_t)k * plane + p]);
            double sum = 0.0;
            for (int k = 0; k < c; k++) {
                float e = expf(x[(size_t)k * plane + p] - mx);
                y[(size_t)k * plane + p] = e;
                sum += e;
            }
            float inv = (float)(1.0 / sum);
            for (int k = 0; k < c; k++)
                y[(size_t)k * plane + p] *= inv;
        }
    }
}

/* din += y * (dout - sum_k dout_k y_k) at each position. */
static void softmax_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    const int c = l->out.c, plane = l->out.h * l->out.w;
    const size_t size = nl_shape_size(l->out);

    if (!b->din[0])
        return;
    for (int s = 0; s < b->n; s++) {
        const float *y = b->out + (size_t)s * size, *dy = b->dout + (size_t)s * size;
        float *dx = b->din[0] + (size_t)s * size;
        for (int p = 0; p < plane; p++) {
            double dot = 0.0;
            for (int k = 0; k < c; k++)
                dot += (double)dy[(size_t)k * plane + p] * y[(size_t)k * plane + p];
            for (int k = 0; k < c; k++) {
                size_t i = (size_t)k * plane + p;
                dx[i] += y[i] * (dy[i] - (float)dot);
            }
        }
    }
}

const struct nl_layer_ops nl__leakyrelu_ops = {
    .kind = "leakyrelu",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = leakyrelu_setup,
    .forward = leakyrelu_forward,
    .backward = leakyrelu_backward,
};

const struct nl_layer_ops nl__gelu_ops = {
    .kind = "gelu",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = same_shape_setup,
    .forward = gelu_forward,
    .backward = gelu_backward,
};

const struct nl_layer_ops nl__softmax_ops = {
    .kind = "softmax",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = same_shape_setup,
    .forward = softmax_forward,
    .backward = softmax_backward,
};
