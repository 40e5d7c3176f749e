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
 * floats are those of the other form, which test_layers checks bit for bit.
 *
 * A team (nl_exec_forward_team, core/engine/model.c) splits the layer over its threads: forward
 * by output units (a share computes columns [u0, u1) of out for every sample from its rows of
 * weight), the weight and bias gradients by units too (dweight[u0, u1) = dout[:, u0:u1]^T in:
 * nothing summed across shares), din by input features (din[:, i0:i1] = dout weight[:, i0:i1]).
 * A team, whatever its size (one thread too), computes each product in blocks of TEAM_BLOCK
 * units or features, a share taking whole blocks: OpenBLAS picks its kernels by a product's
 * shape (SkylakeX: another kernel for small products), and a 100 x 40 x 144 product cut into
 * columns [0, 32) and [32, 40) gave other last bits than whole; the same blocks on any number
 * of threads are the same products, so a team's floats do not depend on its size (test_train
 * compares 1, 2 and 3 threads). */
#include <limits.h>

#include "layers.h"
#include "nnlab/kernels.h"
#include "nnlab/rng.h"

/* Shards from NARROW to WIDE samples take the transposed product (see the top of the file). */
#define NARROW 16
#define WIDE   64
/* A team's products are of this many units (or input features) each, see the top of the file. */
#define TEAM_BLOCK 128

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

/* The share [*lo, *hi) of count items that part of parts takes, whole blocks of TEAM_BLOCK; all
 * of them when parts is 0 (no team). */
static void part_range(int count, int part, int parts, int *lo, int *hi)
{
    size_t a = 0, b = (size_t)count;

    if (parts > 0)
        nl_block_range((size_t)count, TEAM_BLOCK, part, parts, &a, &b);
    *lo = (int)a;
    *hi = (int)b;
}

/* Where the product that starts at item a of a share ending at hi ends: a team's are blocks of
 * TEAM_BLOCK items, whatever the share; without a team the share is one product. */
static int block_end(int a, int hi, int parts)
{
    return parts > 0 && hi - a > TEAM_BLOCK ? a + TEAM_BLOCK : hi;
}

static void dense_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    const int n = f->n, in = (int)nl_shape_size(l->in[0]), units = l->units;
    const float beta = l->no_bias ? 0.0f : 1.0f; /* the sums start from the bias, if any */
    int u0, u1;

    part_range(units, f->part, f->parts, &u0, &u1);
    if (n <= 0 || u0 >= u1)
        return;
    const int nu = u1 - u0;
    if (n >= NARROW && n <= WIDE) {
        /* out^T (U, n) = weight (U, I) in^T (I, n), then out (n, U) = its transpose [+ bias];
         * a share takes rows [u0, u1) of out^T */
        float *t = f->scratch;
        for (int u = u0; !l->no_bias && u < u1; u++) {
            const float b = f->w[l->params[1].offset + u];
            for (int s = 0; s < n; s++)
                t[(size_t)u * n + s] = b;
        }
        for (int a = u0, b; a < u1; a = b) {
            b = block_end(a, u1, f->parts);
            nl_sgemm(0, 1, b - a, n, in, 1.0f, f->w + (size_t)a * in, in, f->in[0], in, beta,
                     t + (size_t)a * n, n);
        }
        for (int s = 0; s < n; s++) {
            float *row = f->out + (size_t)s * units;
            for (int u = u0; u < u1; u++)
                row[u] = t[(size_t)u * n + s];
        }
    } else {
        if (!l->no_bias) {
            const float *bias = f->w + l->params[1].offset;
            for (int s = 0; s < n; s++)
                for (int u = u0; u < u1; u++)
                    f->out[(size_t)s * units + u] = bias[u];
        }
        /* out (n, U) = in (n, I) weight^T (I, U) [+ bias]; a share takes columns [u0, u1) */
        for (int a = u0, b; a < u1; a = b) {
            b = block_end(a, u1, f->parts);
            nl_sgemm(0, 1, n, b - a, in, 1.0f, f->in[0], in, f->w + (size_t)a * in, in, beta,
                     f->out + a, units);
        }
    }
    if (!f->act) /* else the ReLU after it, folded in (inference): x * 1 + 0 is x */
        return;
    if (nu == units)
        nl_scale_shift(f->out, f->out, (size_t)n * units, 1.0f, 0.0f, f->act);
    else
        for (int s = 0; s < n; s++)
            nl_scale_shift(f->out + (size_t)s * units + u0, f->out + (size_t)s * units + u0,
                           (size_t)nu, 1.0f, 0.0f, f->act);
}

static void dense_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    int n = b->n, in = (int)nl_shape_size(l->in[0]), units = l->units, u0, u1, i0, i1;

    if (n <= 0)
        return;
    /* A share takes din's input features [i0, i1) and dweight's and dbias's units [u0, u1). */
    part_range(in, b->part, b->parts, &i0, &i1);
    part_range(units, b->part, b->parts, &u0, &u1);
    for (int a = i0, e; b->din[0] && a < i1; a = e) {
        /* din (n, I) += dout (n, U) weight (U, I); = when b->set */
        e = block_end(a, i1, b->parts);
        nl_sgemm(0, 0, n, e - a, units, 1.0f, b->dout, units, b->w + a, in,
                 (b->set & 1) ? 0.0f : 1.0f, b->din[0] + a, in);
    }
    if (!b->dw)
        return;
    for (int a = u0, e; a < u1; a = e) {
        /* dweight (U, I) += dout^T (U, n) in (n, I) */
        e = block_end(a, u1, b->parts);
        nl_sgemm(1, 0, e - a, in, n, 1.0f, b->dout + a, units, b->in[0], in, 1.0f,
                 b->dw + (size_t)a * in, in);
    }
    if (!l->no_bias) {
        /* dbias (U) += column sums of dout, row after row, so that the units' sums are
         * independent (and vectorise). */
        float *db = b->dw + l->params[1].offset;
        for (int s = 0; s < n; s++) {
            const float *row = b->dout + (size_t)s * units;
            for (int u = u0; u < u1; u++)
                db[u] += row[u];
        }
    }
}

const struct nl_layer_ops nl__dense_ops = {
    .kind = "dense",
    .folds = 2,
    .overwrites = 1,
    .parts = 1,
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = dense_setup,
    .forward = dense_forward,
    .backward = dense_backward,
};
