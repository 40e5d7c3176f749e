/* "flatten": reshapes (C, H, W) into a vector of C*H*W features. The data is copied unchanged
 * (NCHW order); only the shape changes.
 *
 *   in (n, C, H, W)    out (n, C*H*W, 1, 1)
 *   no parameters, no aux, no scratch. */
#include <string.h>

#include "layers.h"

static int flatten_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    l->out = (struct nl_shape){(int)nl_shape_size(l->in[0]), 1, 1};
    return 0;
}

static void flatten_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    if (f->n > 0)
        memcpy(f->out, f->in[0], (size_t)f->n * nl_shape_size(l->out) * sizeof *f->out);
}

static void flatten_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    size_t count = b->n > 0 ? (size_t)b->n * nl_shape_size(l->out) : 0;

    if (!b->din[0])
        return;
    if (b->set & 1)
        memcpy(b->din[0], b->dout, count * sizeof(float));
    else
        for (size_t i = 0; i < count; i++)
            b->din[0][i] += b->dout[i];
}

const struct nl_layer_ops nl__flatten_ops = {
    .kind = "flatten",
    .overwrites = 1,
    .rows = 1,
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = flatten_setup,
    .forward = flatten_forward,
    .backward = flatten_backward,
};
