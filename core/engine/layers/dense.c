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
 * OpenBLAS's blocked kernels sum each element over K in the same order whichever rows or columns
 * a call covers, but it takes other kernels for some products by their size (by its sources, for
 * SkylakeX: "small matrix" kernels up to 1e6 multiply-adds, and "direct" ones for row-major
 * products with beta 0 below 28 * 512 * 512), whose last bits may differ: with the SkylakeX
 * kernels, a 100 x 40 x 144 product cut into columns [0, 32) and [32, 40) gave other floats than
 * whole. So a product is split only where
 * every share is past SMALL_MNK, din's with beta 0 only where the whole product is past
 * DIRECT_MNK (the shares then zero their columns and add); a smaller product (mlp's last layer)
 * runs whole in one share. A team's floats are then those of one thread (test_train compares 1,
 * 2 and 3 threads on mlp's shapes).
 *
 * Where the layer has at least twice as many inputs as units (mlp's fc2, 256 units on 512), a
 * team takes the weight gradient by input features instead (dweight[:, i0:i1] = dout^T
 * in[:, i0:i1]; dbias still by units): each share then reads all of the narrower dout and half of
 * in, rather than all of in. The two shares' products at once, thread CPU time of both, best of
 * 30, 2026-11-27 at load average 6 (so indicative): fc2's at batch 64 120 us against 134, at 256
 * 441 against 464; fc1's (512 units on 784) 343 against 327 at batch 64, so it keeps units.
 *
 * In a team's training step, a ReLU that alone reads the layer runs inside its share (f.act set
 * with f.training): each share passes its own columns through the relu layer's kernel (nl_relu,
 * the same floats) into the ReLU's output, and the barrier between the two goes. mlp at batch
 * 256 on two threads, thread CPU time per step, 2026-11-27 (see core/engine/trainer.c's TEAM
 * paragraph): fc1 with its ReLU 800 to 824 us per thread against 801 to 822 for the two apart,
 * fc2 303 to 309 against 295 to 302: no CPU time saved, only the two barriers' waits (1 to 2 us
 * each per thread there, more where a thread is delayed between them). In backward, the ReLU
 * between two dense layers runs inside the upper one's share where the lower one's share reads
 * only the columns of its output gradient that the upper one's input gradient share wrote
 * (nl__dense_din_cols and nl__dense_dout_cols give this file's rules to core/engine/model.c's
 * team_relu_back). */
#include <limits.h>
#include <string.h>

#include "layers.h"
#include "nnlab/kernels.h"
#include "nnlab/rng.h"

/* Shards from NARROW to WIDE samples take the transposed product (see the top of the file). */
#define NARROW 16
#define WIDE   64
/* A team splits a product whose shares are past these sizes (multiply-adds; see the top of the
 * file). */
#define SMALL_MNK  1e6
#define DIRECT_MNK (28.0 * 512 * 512)

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

/* The share [*lo, *hi) of count items (units or input features) of a product of mnk multiply-adds
 * that part of parts takes (see the top of the file): blocks of 16, so that two shares write no
 * common cache line of a row, where every share's product is past SMALL_MNK (and, for din's
 * product with beta 0, the whole one past DIRECT_MNK); else all of them for part `whole`, none
 * for the others. All of them when parts is 0 or 1. Returns whether the product is split. */
static int part_range(int count, double mnk, int direct, int part, int parts, int whole, int *lo,
                      int *hi)
{
    size_t a = 0, b = (size_t)count, least = (size_t)count;

    *lo = 0;
    *hi = count;
    if (parts <= 1)
        return 0;
    for (int p = 0; p < parts; p++) {
        nl_block_range((size_t)count, 16, p, parts, &a, &b);
        least = b - a < least ? b - a : least;
    }
    if (mnk * (double)least / count > SMALL_MNK && (!direct || mnk >= DIRECT_MNK)) {
        nl_block_range((size_t)count, 16, part, parts, &a, &b);
        *lo = (int)a;
        *hi = (int)b;
        return 1;
    }
    if (part != whole)
        *hi = 0;
    return 0;
}

int nl__dense_units(const struct nl_layer *l, int n, int part, int parts, int *lo, int *hi)
{
    const int in = (int)nl_shape_size(l->in[0]), units = l->units;

    part_range(units, (double)n * units * in, 0, part, parts, 0, lo, hi);
    return units;
}

static void dense_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    const int n = f->n, in = (int)nl_shape_size(l->in[0]), units = l->units;
    const float beta = l->no_bias ? 0.0f : 1.0f; /* the sums start from the bias, if any */
    int u0, u1;

    nl__dense_units(l, n, f->part, f->parts, &u0, &u1);
    if (n <= 0 || u0 >= u1)
        return;
    const int nu = u1 - u0;
    const float *w = f->w + (size_t)u0 * in; /* the share's rows of weight */
    if (n >= NARROW && n <= WIDE) {
        /* out^T (U, n) = weight (U, I) in^T (I, n), then out (n, U) = its transpose [+ bias];
         * a share takes rows [u0, u1) of out^T */
        float *t = f->scratch;
        for (int u = u0; !l->no_bias && u < u1; u++) {
            const float b = f->w[l->params[1].offset + u];
            for (int s = 0; s < n; s++)
                t[(size_t)u * n + s] = b;
        }
        nl_sgemm(0, 1, nu, n, in, 1.0f, w, in, f->in[0], in, beta, t + (size_t)u0 * n, n);
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
        nl_sgemm(0, 1, n, nu, in, 1.0f, f->in[0], in, w, in, beta, f->out + u0, units);
    }
    if (!f->act)
        return;
    if (f->training) { /* a team's ReLU (see the top of the file): the relu layer's kernel */
        if (nu == units)
            nl_relu(f->out, f->out, (size_t)n * units);
        else
            for (int s = 0; s < n; s++)
                nl_relu(f->out + (size_t)s * units + u0, f->out + (size_t)s * units + u0,
                        (size_t)nu);
        return;
    }
    /* the ReLU after it, folded in (inference): x * 1 + 0 is x */
    if (nu == units)
        nl_scale_shift(f->out, f->out, (size_t)n * units, 1.0f, 0.0f, f->act);
    else
        for (int s = 0; s < n; s++)
            nl_scale_shift(f->out + (size_t)s * units + u0, f->out + (size_t)s * units + u0,
                           (size_t)nu, 1.0f, 0.0f, f->act);
}

int nl__dense_din_cols(const struct nl_layer *l, int n, int set, int part, int parts, int *lo,
                       int *hi)
{
    const int in = (int)nl_shape_size(l->in[0]);
    return parts > 1 &&
           part_range(in, (double)n * l->units * in, set & 1, part, parts, parts - 1, lo, hi);
}

int nl__dense_dout_cols(const struct nl_layer *l, int n, int part, int parts, int *lo, int *hi)
{
    const int in = (int)nl_shape_size(l->in[0]), units = l->units;
    const double mnk = (double)n * units * in;
    int c0, c1;

    if (parts <= 1 || (in >= 2 * units && part_range(in, mnk, 0, part, parts, 0, &c0, &c1)))
        return 0; /* the weight gradient by input features reads all of dout */
    return part_range(units, mnk, 0, part, parts, 0, lo, hi);
}

static void dense_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    int n = b->n, in = (int)nl_shape_size(l->in[0]), units = l->units, u0, u1, i0, i1;
    const double mnk = (double)n * units * in;

    if (n <= 0)
        return;
    /* A share takes din's input features [i0, i1) and dweight's and dbias's units [u0, u1); of
     * products not split, the last part takes din's and the first dweight's. */
    const int zero = b->set & 1;
    if (b->din[0] && part_range(in, mnk, zero, b->part, b->parts, b->parts - 1, &i0, &i1) && zero) {
        /* din's columns [i0, i1) = 0, then += the product: OpenBLAS's products with beta 0
         * below DIRECT_MNK take another kernel */
        for (int s = 0; s < n; s++)
            memset(b->din[0] + (size_t)s * in + i0, 0, (size_t)(i1 - i0) * sizeof(float));
        nl_sgemm(0, 0, n, i1 - i0, units, 1.0f, b->dout, units, b->w + i0, in, 1.0f, b->din[0] + i0,
                 in);
    } else if (b->din[0] && i0 < i1) { /* din (n, I) += dout (n, U) weight (U, I); = when set */
        nl_sgemm(0, 0, n, i1 - i0, units, 1.0f, b->dout, units, b->w + i0, in, zero ? 0.0f : 1.0f,
                 b->din[0] + i0, in);
    }
    part_range(units, mnk, 0, b->part, b->parts, 0, &u0, &u1);
    int c0 = 0, c1 = 0;
    const int by_features =
        in >= 2 * units && part_range(in, mnk, 0, b->part, b->parts, 0, &c0, &c1) && b->dw;
    if (by_features) /* dweight[:, c0:c1] += dout^T (U, n) in[:, c0:c1] (see the top) */
        nl_sgemm(1, 0, units, c1 - c0, n, 1.0f, b->dout, units, b->in[0] + c0, in, 1.0f, b->dw + c0,
                 in);
    if (b->dw && u0 < u1) {
        /* dweight (U, I) += dout^T (U, n) in (n, I); dbias (U) += column sums of dout. */
        if (!by_features)
            nl_sgemm(1, 0, u1 - u0, in, n, 1.0f, b->dout + u0, units, b->in[0], in, 1.0f,
                     b->dw + (size_t)u0 * in, in);
        if (!l->no_bias) {
            /* Row after row, so that the units' sums are independent (and vectorise). */
            float *db = b->dw + l->params[1].offset;
            for (int s = 0; s < n; s++) {
                const float *row = b->dout + (size_t)s * units;
                for (int u = u0; u < u1; u++)
                    db[u] += row[u];
            }
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
