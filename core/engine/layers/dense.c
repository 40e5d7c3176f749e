/* "dense": a fully connected layer, as PyTorch's Linear. The input (C, H, W) is read as a vector
 * of I = C*H*W features without a copy; the shard goes through one GEMM.
 *
 *   weight [U, I], bias [U]
 *   in  (n, I)    out (n, U, 1, 1)
 *   scratch: U floats per sample (forward's transposed product); no aux.
 *
 * Forward computes the product as out^T (U, n) = weight (U, I) in^T (I, n) into the scratch, from
 * the bias, then transposes it into out, for shards of NARROW to WIDE samples: OpenBLAS packs the
 * whole weight matrix at every call either way, but the packing of weight^T that out = in
 * weight^T takes is the slower one, and weighs most on a small shard. The products alone,
 * thread CPU time, fastest of 20, 2026-11-27 at load average 5 to 10, so indicative: mlp's fc1
 * (512 x 784) on 16 samples 155 us against 221, on 32 235 against 307, on 64 395 against 450, on
 * 128 717 against 772, on 256 1364 against 1376; lenet's fc1 (500 x 800) alike. From 128 samples
 * on, the two passes around the product (the bias, the transpose) cost more than it saves: a
 * training step of mlp at batch 256 took more time. Each output is the same sum in the
 * same order (from the bias, the same K blocks, each summed in registers, added in turn), so the
 * floats are those of the other form, which test_layers checks bit for bit. */
#include <limits.h>

#include "layers.h"
#include "nnlab/kernels.h"

/* Shards from NARROW to WIDE samples take the transposed product (see the top of the file). */
#define NARROW 16
#define WIDE   64

static int dense_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    if (l->units == NL_UNITS_CLASSES)
        return nl__layer_fail(l, err,
                              "the number of units (N) must be resolved to the class "
                              "count before setup");
    if (l->units <= 0)
        return nl__layer_fail(l, err, "dense needs a positive number of units, not %d", l->units);

    int in = (int)nl_shape_size(l->in[0]); /* nl__layer_begin checked it fits */
    l->out = (struct nl_shape){l->units, 1, 1};
    int wdims[4] = {l->units, in};
    nl__layer_add_param(l, "weight", 2, wdims, in, l->units, l->init);
    l->scratch_per_sample = (size_t)l->units;
    if (!l->no_bias) {
        int bdims[4] = {l->units};
        nl__layer_add_param(l, "bias", 1, bdims, in, l->units, NL_INIT_ZERO);
    }
    return 0;
}

static void dense_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    const int n = f->n, in = (int)nl_shape_size(l->in[0]), units = l->units;
    const float beta = l->no_bias ? 0.0f : 1.0f; /* the sums start from the bias, if any */

    if (n <= 0)
        return;
    if (n >= NARROW && n <= WIDE) {
        /* out^T (U, n) = weight (U, I) in^T (I, n), then out (n, U) = its transpose [+ bias] */
        float *t = f->scratch;
        for (int u = 0; !l->no_bias && u < units; u++) {
            const float b = f->w[l->params[1].offset + u];
            for (int s = 0; s < n; s++)
                t[(size_t)u * n + s] = b;
        }
        nl_sgemm(0, 1, units, n, in, 1.0f, f->w, in, f->in[0], in, beta, t, n);
        for (int s = 0; s < n; s++) {
            float *row = f->out + (size_t)s * units;
            for (int u = 0; u < units; u++)
                row[u] = t[(size_t)u * n + s];
        }
        if (f->act)
            nl_scale_shift(f->out, f->out, (size_t)n * units, 1.0f, 0.0f, f->act);
        return;
    }
    if (!l->no_bias) {
        const float *bias = f->w + l->params[1].offset;
        for (int s = 0; s < n; s++)
            for (int u = 0; u < units; u++)
                f->out[(size_t)s * units + u] = bias[u];
    }
    /* out (n, U) = in (n, I) weight^T (I, U) [+ bias] */
    nl_sgemm(0, 1, n, units, in, 1.0f, f->in[0], in, f->w, in, beta, f->out, units);
    if (f->act) /* the ReLU after it, folded in (inference): x * 1 + 0 is x */
        nl_scale_shift(f->out, f->out, (size_t)n * units, 1.0f, 0.0f, f->act);
}

static void dense_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    int n = b->n, in = (int)nl_shape_size(l->in[0]), units = l->units;

    if (n <= 0)
        return;
    if (b->din[0]) /* din (n, I) += dout (n, U) weight (U, I); = when b->set */
        nl_sgemm(0, 0, n, in, units, 1.0f, b->dout, units, b->w, in, (b->set & 1) ? 0.0f : 1.0f,
                 b->din[0], in);
    if (b->dw) {
        /* dweight (U, I) += dout^T (U, n) in (n, I); dbias (U) += column sums of dout. */
        nl_sgemm(1, 0, units, in, n, 1.0f, b->dout, units, b->in[0], in, 1.0f, b->dw, in);
        if (!l->no_bias) {
            /* Row after row, so that the units' sums are independent (and vectorise). */
            float *db = b->dw + l->params[1].offset;
            for (int s = 0; s < n; s++) {
                const float *row = b->dout + (size_t)s * units;
                for (int u = 0; u < units; u++)
                    db[u] += row[u];
            }
        }
    }
}

const struct nl_layer_ops nl__dense_ops = {
    .kind = "dense",
    .folds = 2,
    .overwrites = 1,
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = dense_setup,
    .forward = dense_forward,
    .backward = dense_backward,
};
