/* "batchnorm": batch normalisation per channel, as PyTorch's BatchNorm2d on (C, H, W) inputs and
 * BatchNorm1d on vectors (F, 1, 1), which normalise each channel over the shard's samples and
 * positions.
 *
 *   weight [C] (ones), bias [C] (zeros): trainable
 *   running_mean [C] (zeros), running_var [C] (ones): statistics, never trained
 *   in (n, C, H, W)    out (n, C, H, W)
 *   aux: per sample C*H*W + 2C + 1 floats; forward writes xhat (n, C, H, W), then the mean and
 *   1/sqrt(var + eps) it used per channel, then 1 when it used batch statistics.
 *
 * In training a layer that is not frozen normalises with its shard's statistics (biased
 * variance, as PyTorch); in evaluation, and always when frozen, with the running statistics.
 *
 * Running statistics and threads: each thread sees only its shard, so no thread may update the
 * shared running statistics. Backward instead adds the shard's per-channel sums of x and x^2
 * into dw at the running_mean and running_var positions; the trainer's fixed-order reduction
 * sums them into the whole batch's sums, and update_stats replaces the optimizer for that range:
 * mean = S1 / M, var = (S2 / M - mean^2) * M / (M - 1) (unbiased, as PyTorch), with M = batch *
 * H * W, then running = (1 - momentum) * running + momentum * batch value. The result does not
 * depend on the thread count, and a cluster can sum the same sums like gradients. The shard
 * normalisation itself does depend on the shard (as PyTorch's DataParallel without SyncBatchNorm).
 * Sums are formed in double per shard; S2 / M - mean^2 loses precision only when |mean| is much
 * larger than the standard deviation, which normalised networks avoid. */
#include <math.h>

#include "layers.h"

#define DEFAULT_MOMENTUM 0.1f
#define DEFAULT_EPS      1e-5f

static float momentum_of(const struct nl_layer *l)
{
    return l->momentum > 0.0f ? l->momentum : DEFAULT_MOMENTUM;
}

static float eps_of(const struct nl_layer *l)
{
    return l->eps > 0.0f ? l->eps : DEFAULT_EPS;
}

static int bn_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    if (!(l->momentum >= 0.0f && l->momentum <= 1.0f))
        return nl__layer_fail(l, err, "batchnorm momentum %g is outside (0, 1]",
                              (double)l->momentum);
    if (!(l->eps >= 0.0f && l->eps < 1.0f))
        return nl__layer_fail(l, err, "batchnorm eps %g is outside (0, 1)", (double)l->eps);
    int c = l->in[0].c, dims[4] = {c};
    l->out = l->in[0];
    nl__layer_add_param(l, "weight", 1, dims, c, c, NL_INIT_ONE);
    nl__layer_add_param(l, "bias", 1, dims, c, c, NL_INIT_ZERO);
    nl__layer_add_param(l, "running_mean", 1, dims, c, c, NL_INIT_ZERO);
    nl__layer_add_param(l, "running_var", 1, dims, c, c, NL_INIT_ONE);
    l->params[2].stat = 1;
    l->params[3].stat = 1;
    l->aux_bytes = (nl_shape_size(l->in[0]) + 2 * (size_t)c + 1) * sizeof(float);
    return 0;
}

static void bn_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    const int c = l->in[0].c, n = f->n;
    const size_t plane = (size_t)l->in[0].h * l->in[0].w, size = nl_shape_size(l->in[0]);
    const float *gamma = f->w, *beta = f->w + l->params[1].offset;
    const float *rmean = f->w + l->params[2].offset, *rvar = f->w + l->params[3].offset;
    float *xhat = f->aux, *mean = xhat + (size_t)n * size, *istd = mean + c, *batch = istd + c;
    const int use_batch = f->training && !l->frozen;
    const double m = (double)n * (double)plane;

    if (n <= 0)
        return;
    *batch = (float)use_batch;
    for (int k = 0; k < c; k++) {
        if (use_batch) {
            double s1 = 0.0, s2 = 0.0;
            for (int s = 0; s < n; s++) {
                const float *x = f->in[0] + (size_t)s * size + (size_t)k * plane;
                for (size_t i = 0; i < plane; i++)
                    s1 += x[i];
            }
            double mu = s1 / m;
            for (int s = 0; s < n; s++) {
                const float *x = f->in[0] + (size_t)s * size + (size_t)k * plane;
                for (size_t i = 0; i < plane; i++)
                    s2 += (x[i] - mu) * (x[i] - mu);
            }
            mean[k] = (float)mu;
            istd[k] = (float)(1.0 / sqrt(s2 / m + (double)eps_of(l)));
        } else {
            mean[k] = rmean[k];
            istd[k] = (float)(1.0 / sqrt((double)rvar[k] + (double)eps_of(l)));
        }
        for (int s = 0; s < n; s++) {
            size_t at = (size_t)s * size + (size_t)k * plane;
            for (size_t i = 0; i < plane; i++) {
                float h = (f->in[0][at + i] - mean[k]) * istd[k];
                xhat[at + i] = h;
                f->out[at + i] = gamma[k] * h + beta[k];
            }
        }
    }
}

static void bn_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    const int c = l->in[0].c, n = b->n;
    const size_t plane = (size_t)l->in[0].h * l->in[0].w, size = nl_shape_size(l->in[0]);
    const float *gamma = b->w;
    const float *xhat = b->aux, *mean = xhat + (size_t)n * size, *istd = mean + c;
    const int use_batch = istd[c] != 0.0f;
    const double m = (double)n * (double)plane;

    if (n <= 0)
        return;
    for (int k = 0; k < c; k++) {
        double sdy = 0.0, sdyx = 0.0;
        for (int s = 0; s < n; s++) {
            size_t at = (size_t)s * size + (size_t)k * plane;
            for (size_t i = 0; i < plane; i++) {
                sdy += b->dout[at + i];
                sdyx += (double)b->dout[at + i] * xhat[at + i];
            }
        }
        if (b->dw) {
            b->dw[k] += (float)sdyx;
            b->dw[l->params[1].offset + k] += (float)sdy;
            if (use_batch) {
                /* The shard's sums for the running statistics (see the top of the file). */
                double s1 = 0.0, s2 = 0.0;
                for (int s = 0; s < n; s++) {
                    const float *x = b->in[0] + (size_t)s * size + (size_t)k * plane;
                    for (size_t i = 0; i < plane; i++) {
                        s1 += x[i];
                        s2 += (double)x[i] * x[i];
                    }
                }
                b->dw[l->params[2].offset + k] += (float)s1;
                b->dw[l->params[3].offset + k] += (float)s2;
            }
        }
        if (!b->din[0])
            continue;
        float g = gamma[k] * istd[k];
        float a1 = (float)(sdy / m), a2 = (float)(sdyx / m);
        for (int s = 0; s < n; s++) {
            size_t at = (size_t)s * size + (size_t)k * plane;
            float *dx = b->din[0] + at;
            const float *dy = b->dout + at, *h = xhat + at;
            if (use_batch)
                for (size_t i = 0; i < plane; i++)
                    dx[i] += g * (dy[i] - a1 - h[i] * a2);
            else
                for (size_t i = 0; i < plane; i++)
                    dx[i] += g * dy[i];
        }
    }
}

static void bn_update_stats(const struct nl_layer *l, float *w, const float *sums, int batch)
{
    const int c = l->in[0].c;
    const double m = (double)batch * (double)l->in[0].h * (double)l->in[0].w;
    const float mom = momentum_of(l);
    float *rmean = w + l->params[2].offset, *rvar = w + l->params[3].offset;
    const float *s1 = sums + l->params[2].offset, *s2 = sums + l->params[3].offset;

    if (batch <= 0)
        return;
    for (int k = 0; k < c; k++) {
        double mu = s1[k] / m, var = s2[k] / m - mu * mu;
        if (var < 0.0)
            var = 0.0;
        if (m > 1.0)
            var *= m / (m - 1.0);
        rmean[k] = (1.0f - mom) * rmean[k] + mom * (float)mu;
        rvar[k] = (1.0f - mom) * rvar[k] + mom * (float)var;
    }
}

const struct nl_layer_ops nl__batchnorm_ops = {
    .kind = "batchnorm",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = bn_setup,
    .forward = bn_forward,
    .backward = bn_backward,
    .update_stats = bn_update_stats,
};
