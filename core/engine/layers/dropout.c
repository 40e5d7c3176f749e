/* "dropout": inverted dropout. In training each value is dropped with probability p and the
 * kept ones are scaled by 1/(1-p), so evaluation is the identity and needs no rescaling.
 *
 *   in (n, C, H, W)    out (n, C, H, W)
 *   aux: per sample, one float per value, the factor forward applied (0 or 1/(1-p) in training,
 *   1 in evaluation); backward multiplies by it. No parameters, no scratch.
 * The mask comes from f->rng, the calling thread's generator: one draw per value when training
 * with p > 0, none otherwise. */
#include <math.h>

#include "layers.h"

static int dropout_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    if (!(l->p >= 0.0f && l->p < 1.0f))
        return nl__layer_fail(l, err, "dropout probability %g is outside [0, 1)", (double)l->p);
    l->out = l->in[0];
    l->aux_bytes = nl_shape_size(l->out) * sizeof(float);
    return 0;
}

static void dropout_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    size_t count = f->n > 0 ? (size_t)f->n * nl_shape_size(l->out) : 0;
    const float *x = f->in[0];
    float *mask = f->aux;

    if (!f->training || l->p <= 0.0f) {
        for (size_t i = 0; i < count; i++) {
            mask[i] = 1.0f;
            f->out[i] = x[i];
        }
        return;
    }
    float keep = 1.0f / (1.0f - l->p);
    for (size_t i = 0; i < count; i++) {
        mask[i] = nl_rng_uniform(f->rng) < l->p ? 0.0f : keep;
        f->out[i] = x[i] * mask[i];
    }
}

static void dropout_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    size_t count = b->n > 0 ? (size_t)b->n * nl_shape_size(l->out) : 0;
    const float *mask = b->aux;

    if (!b->din[0])
        return;
    for (size_t i = 0; i < count; i++)
        b->din[0][i] += b->dout[i] * mask[i];
}

const struct nl_layer_ops nl__dropout_ops = {
    .kind = "dropout",
    .min_inputs = 1,
    .max_inputs = 1,
    .stochastic = 1,
    .setup = dropout_setup,
    .forward = dropout_forward,
    .backward = dropout_backward,
};
