/* "relu", "relu6", "tanh" and "sigmoid": elementwise activations (relu6 is PyTorch's ReLU6,
 * min(max(x, 0), 6), as MobileNetV2 uses it). The output has the input's shape; each
 * backward reads only the output, which determines the derivative.
 *
 *   in (n, C, H, W)    out (n, C, H, W)
 *   no parameters, no aux, no scratch. */
#include <math.h>

#include "layers.h"
#include "nnlab/kernels.h"

static int activation_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    l->out = l->in[0];
    return 0;
}

static size_t total(const struct nl_layer *l, int n)
{
    return n > 0 ? (size_t)n * nl_shape_size(l->out) : 0;
}

static void relu_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    nl_relu(f->out, f->in[0], total(l, f->n));
}

/* din += dout where out > 0, which is where the input was > 0: a select, never a branch (the
 * sign of an activation is a coin toss that the branch predictor loses), in vectors where the
 * CPU has AVX-512 (core/engine/kernels.c). */
static void relu_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    if (b->din[0])
        nl_relu_backward(b->din[0], b->out, b->dout, total(l, b->n), b->set & 1);
}

static void relu6_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    size_t count = total(l, f->n);
    const float *x = f->in[0];

    for (size_t i = 0; i < count; i++)
        f->out[i] = x[i] > 0.0f ? (x[i] < 6.0f ? x[i] : 6.0f) : 0.0f;
}

/* din += dout where 0 < out < 6, which is where 0 < in < 6 (PyTorch's hardtanh_backward: no
 * gradient at the kinks themselves). */
static void relu6_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    size_t count = total(l, b->n);
    float *restrict din = b->din[0];
    const float *restrict out = b->out, *restrict dout = b->dout;

    if (!din)
        return;
    if (b->set & 1)
        for (size_t i = 0; i < count; i++)
            din[i] = out[i] > 0.0f && out[i] < 6.0f ? dout[i] : 0.0f;
    else
        for (size_t i = 0; i < count; i++) {
            float g = dout[i];
            din[i] += out[i] > 0.0f && out[i] < 6.0f ? g : 0.0f;
        }
}

static void tanh_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    size_t count = total(l, f->n);

    for (size_t i = 0; i < count; i++)
        f->out[i] = tanhf(f->in[0][i]);
}

/* tanh' = 1 - tanh^2 */
static void tanh_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    size_t count = total(l, b->n);
    float *din = b->din[0];

    if (!din)
        return;
    for (size_t i = 0; i < count; i++)
        din[i] += b->dout[i] * (1.0f - b->out[i] * b->out[i]);
}

static void sigmoid_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    size_t count = total(l, f->n);

    for (size_t i = 0; i < count; i++) {
        float x = f->in[0][i];
        /* exp of a non-positive number only: no overflow for large |x|. */
        if (x >= 0.0f) {
            f->out[i] = 1.0f / (1.0f + expf(-x));
        } else {
            float e = expf(x);
            f->out[i] = e / (1.0f + e);
        }
    }
}

/* sigmoid' = sigmoid (1 - sigmoid) */
static void sigmoid_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    size_t count = total(l, b->n);
    float *din = b->din[0];

    if (!din)
        return;
    for (size_t i = 0; i < count; i++)
        din[i] += b->dout[i] * b->out[i] * (1.0f - b->out[i]);
}

const struct nl_layer_ops nl__relu_ops = {
    .kind = "relu",
    .overwrites = 1,
    .rows = 1,
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = activation_setup,
    .forward = relu_forward,
    .backward = relu_backward,
};

const struct nl_layer_ops nl__relu6_ops = {
    .kind = "relu6",
    .overwrites = 1,
    .rows = 1,
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = activation_setup,
    .forward = relu6_forward,
    .backward = relu6_backward,
};

const struct nl_layer_ops nl__tanh_ops = {
    .kind = "tanh",
    .rows = 1,
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = activation_setup,
    .forward = tanh_forward,
    .backward = tanh_backward,
};

const struct nl_layer_ops nl__sigmoid_ops = {
    .kind = "sigmoid",
    .rows = 1,
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = activation_setup,
    .forward = sigmoid_forward,
    .backward = sigmoid_backward,
};
