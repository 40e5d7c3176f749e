/* "batchnorm": batch normalisation per channel, as PyTorch's BatchNorm2d on (C, H, W) inputs and
 * BatchNorm1d on vectors (F, 1, 1), which normalise each channel over the shard's samples and
 * positions.
 *
 *   weight [C] (ones), bias [C] (zeros): trainable
 *   running_mean [C] (zeros), running_var [C] (ones): statistics, never trained
 *   in (n, C, H, W)    out (n, C, H, W)
 *   aux: 4C + 2 floats (sized per sample, used once): forward writes the mean and
 *   1/sqrt(var + eps) it used per channel, the shard's sums of x and x^2 per channel, then 1
 *   when it used batch statistics, then 1 when it added a fused residual (nl_fwd.res).
 *
 * The normalised input xhat is not kept: backward recomputes it from the input, (x - mean) * istd,
 * as forward computed it.
 *
 * Passes over memory, per channel: forward reads x once for its sums and once to write out;
 * backward reads dout and x once for its sums and once to write din (and the fused add's other
 * input's gradient, in the same pass: nl_bn_backward_apply_res), each pass a kernel of
 * core/engine/kernels.c with an AVX-512 path and a naive twin. A channel's n planes lie a whole
 * image apart and each is shorter than a page, too short for the hardware prefetchers to follow:
 * the sums' kernels ask for the next plane's lines while they read one, and the output passes
 * ask for the next plane's output (and the residual) before each plane (nl_prefetch), hints that
 * change no float. The sums go through sixteen float
 * lanes over the channel's planes, added in double at the end (float lanes hold a few hundred
 * terms each at the shard sizes here); forward sums x - x0
 * and (x - x0)^2, x0 the channel's first value, so that the variance does not cancel when the
 * mean is large against the spread.
 *
 * Training-time fusion (core/engine/model.c): where a ReLU or ReLU6 alone reads the layer, a
 * training executor runs it inside this layer (nl_fwd.act, nl_bwd.act), and likewise a residual
 * add that alone reads it, with the ReLU after that add (nl_fwd.res, nl_bwd.dres). Forward then
 * writes act(y + res) in its output pass and the layer's own y is never stored; backward reads
 * the activation's output, which says where its derivative is 0, and its gradient, and masks that
 * gradient inside the same two passes (sums, then din and the add's other input's gradient). xhat
 * is still recomputed from the saved input with mean and istd, never from the output divided by
 * weight (which may be 0). The floats are those of the two layers run one after the other.
 * Without a residual, backward judges the mask from x instead of reading the output
 * (nl_bn_grad_sums_mask, and nl_bn_backward_apply_mask with batch statistics): v = weight * xhat
 * + bias, recomputed from the mean and istd forward used as forward computed it, is > 0 (and < 6)
 * exactly where act(v) is, so the two passes read dout and x only, the same floats.
 *
 * Small planes (1 to 16 pixels: ResNet-18's layer3 and layer4 at 3x64x64) go the other way for
 * the passes that write: the sums as above, channel by channel, then the output (forward) or din
 * (backward, with each channel's g, a1 and a2 kept in scratch) image by image, every channel of
 * an image in one call (nl_bn_apply_act_chans and the two _chans backward passes of
 * nnlab/kernels.h, each lane with its channel's parameters), the same floats: a plane of 4 or 16
 * floats was a call of its own, and the calls cost more than the floats.
 *
 * In inference the layer is y = x * scale + shift per channel; nl__bn_fold gives the two so
 * that a forward-only executor can fold them into the output pass of the convolution before it
 * (core/engine/model.c), exact to rounding.
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
 * Sums are formed in float lanes and double per shard; S2 / M - mean^2 loses precision only when
 * |mean| is much larger than the standard deviation, which normalised networks avoid. */
#include <math.h>

#include "layers.h"
#include "nnlab/kernels.h"

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
    l->aux_bytes = (4 * (size_t)c + 2) * sizeof(float);
    if (nl_bn_chans_fit((size_t)l->in[0].h * l->in[0].w))
        l->scratch_fixed = 3 * (size_t)c; /* backward's g, a1 and a2 of every channel */
    return 0;
}

static void bn_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    const int c = l->in[0].c, n = f->n;
    const size_t plane = (size_t)l->in[0].h * l->in[0].w, size = nl_shape_size(l->in[0]);
    const float *gamma = f->w, *beta = f->w + l->params[1].offset;
    const float *rmean = f->w + l->params[2].offset, *rvar = f->w + l->params[3].offset;
    float *mean = f->aux, *istd = mean + c, *sum1 = istd + c, *sum2 = sum1 + c, *batch = sum2 + c;
    const int use_batch = f->training && !l->frozen;
    const double m = (double)n * (double)plane;
    const int chans = nl_bn_chans_fit(plane);

    if (n <= 0)
        return;
    batch[0] = (float)use_batch;
    batch[1] = (float)(f->res != NULL);
    for (int k = 0; k < c; k++) {
        const float *xk = f->in[0] + (size_t)k * plane;
        if (use_batch) {
            const float x0 = xk[0];
            double s1 = 0.0, s2 = 0.0;
            nl_bn_shifted_sums(xk, n, size, plane, x0, &s1, &s2);
            double d = s1 / m, var = s2 / m - d * d;
            mean[k] = (float)(x0 + d);
            istd[k] = (float)(1.0 / sqrt((var > 0.0 ? var : 0.0) + (double)eps_of(l)));
            /* sum x and sum x^2, for the running statistics (backward passes them on). */
            sum1[k] = (float)(s1 + m * x0);
            sum2[k] = (float)(s2 + 2.0 * x0 * s1 + m * (double)x0 * x0);
        } else {
            mean[k] = rmean[k];
            istd[k] = (float)(1.0 / sqrt((double)rvar[k] + (double)eps_of(l)));
        }
        const float mu = mean[k], is = istd[k], g = gamma[k], bt = beta[k];
        for (int s = 0; s < n && !chans; s++) {
            const size_t at = (size_t)s * size + (size_t)k * plane;
            if (s + 1 < n) { /* the next plane's lines on their way (see the top of the file) */
                nl_prefetch(f->out + at + size, plane);
                if (f->res)
                    nl_prefetch(f->res + at + size, plane);
            }
            nl_bn_apply_act(f->out + at, f->in[0] + at, f->res ? f->res + at : NULL, plane, mu, is,
                            g, bt, f->act);
        }
    }
    for (int s = 0; s < n && chans; s++) { /* small planes: image by image (the top) */
        const size_t at = (size_t)s * size;
        nl_bn_apply_act_chans(f->out + at, f->in[0] + at, f->res ? f->res + at : NULL, plane, c,
                              mean, istd, gamma, beta, f->act);
    }
}

/* Where the fused activation act (NL_ACT_*) passes the gradient, judged from its output y. */
static inline int live(float y, int act)
{
    if (act == NL_ACT_NONE)
        return 1;
    return act == NL_ACT_RELU6 ? y > 0.0f && y < 6.0f : y > 0.0f;
}

static void bn_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    const int c = l->in[0].c, n = b->n;
    const size_t plane = (size_t)l->in[0].h * l->in[0].w, size = nl_shape_size(l->in[0]);
    const float *gamma = b->w, *beta = b->w + l->params[1].offset;
    const float *mean = b->aux, *istd = mean + c, *sum1 = istd + c, *sum2 = sum1 + c;
    const int use_batch = sum2[c] != 0.0f;
    /* act straight after the normalisation: its mask from x (see the top of the file) */
    const int mask = b->act != NL_ACT_NONE && sum2[c + 1] == 0.0f;
    const double m = (double)n * (double)plane;
    /* small planes: the passes that write din image by image, over every channel at once (the
     * top), from each channel's g, a1 and a2 kept in scratch; the sums stay channel by channel */
    const int chans = nl_bn_chans_fit(plane) && b->din[0] && use_batch &&
                      (b->dres || mask || b->act == NL_ACT_NONE);
    float *gk = b->scratch, *a1k = gk + c, *a2k = a1k + c;

    if (n <= 0)
        return;
    for (int k = 0; k < c; k++) {
        const float mu = mean[k], is = istd[k];
        const size_t off = (size_t)k * plane;
        /* sum dy * xhat = istd * sum dy * (x - mean) */
        double sdy = 0.0, sdyc = 0.0;
        if (mask)
            nl_bn_grad_sums_mask(b->dout + off, b->in[0] + off, n, size, plane, mu, is, gamma[k],
                                 beta[k], b->act, &sdy, &sdyc);
        else
            nl_bn_grad_sums_act(b->dout + off, b->out + off, b->in[0] + off, n, size, plane, mu,
                                b->act, &sdy, &sdyc);
        double sdyx = (double)is * sdyc;
        if (b->dw) {
            b->dw[k] += (float)sdyx;
            b->dw[l->params[1].offset + k] += (float)sdy;
            if (use_batch) {
                /* The shard's sums for the running statistics (see the top of the file). */
                b->dw[l->params[2].offset + k] += sum1[k];
                b->dw[l->params[3].offset + k] += sum2[k];
            }
        }
        float g = gamma[k] * is;
        float a1 = (float)(sdy / m), a2 = (float)(sdyx / m);
        if (chans) {
            gk[k] = g;
            a1k[k] = a1;
            a2k[k] = a2;
            continue;
        }
        for (int s = 0; s < n && (b->din[0] || b->dres); s++) {
            const size_t at = (size_t)s * size + off;
            const float *dy = b->dout + at, *x = b->in[0] + at, *y = b->out + at;
            if (s + 1 < n) { /* the next plane's lines on their way (see the top of the file) */
                if (b->din[0])
                    nl_prefetch(b->din[0] + at + size, plane);
                if (b->dres)
                    nl_prefetch(b->dres + at + size, plane);
            }
            if (b->dres && b->din[0] && use_batch) { /* both in one pass over dy and y */
                nl_bn_backward_apply_res(b->din[0] + at, b->dres + at, dy, y, x, plane, g, a1, a2,
                                         mu, is, b->act, b->set & 3u);
                continue;
            }
            /* The fused add's other input: the masked gradient, while this plane is in cache. */
            if (b->dres)
                nl_add_act_backward(b->dres + at, NULL, y, dy, plane, b->act, (b->set >> 1) & 1);
            if (!b->din[0])
                continue;
            float *dx = b->din[0] + at;
            if (use_batch && mask)
                nl_bn_backward_apply_mask(dx, dy, x, plane, g, a1, a2, mu, is, gamma[k], beta[k],
                                          b->act, b->set & 1);
            else if (use_batch)
                nl_bn_backward_apply_act(dx, dy, y, x, plane, g, a1, a2, mu, is, b->act,
                                         b->set & 1);
            else /* the running statistics: din = weight * istd * dy */
                for (size_t i = 0; i < plane; i++) {
                    float v = g * (live(y[i], b->act) ? dy[i] : 0.0f);
                    dx[i] = b->set & 1 ? v : dx[i] + v;
                }
        }
    }
    for (int s = 0; s < n && chans; s++) {
        const size_t at = (size_t)s * size;
        if (b->dres)
            nl_bn_backward_apply_res_chans(b->din[0] + at, b->dres + at, b->dout + at, b->out + at,
                                           b->in[0] + at, plane, c, gk, a1k, a2k, mean, istd,
                                           b->act, b->set & 3u);
        else
            nl_bn_backward_apply_mask_chans(b->din[0] + at, b->dout + at, b->in[0] + at, plane, c,
                                            gk, a1k, a2k, mean, istd, gamma, beta,
                                            mask ? b->act : NL_ACT_NONE, b->set & 1);
    }
}

void nl__bn_fold(const struct nl_layer *l, const float *w, const float *bias, float *scale,
                 float *shift)
{
    const float *gamma = w, *beta = w + l->params[1].offset;
    const float *rmean = w + l->params[2].offset, *rvar = w + l->params[3].offset;

    for (int k = 0; k < l->in[0].c; k++) {
        const float is = (float)(1.0 / sqrt((double)rvar[k] + (double)eps_of(l)));
        scale[k] = gamma[k] * is;
        shift[k] = ((bias ? bias[k] : 0.0f) - rmean[k]) * scale[k] + beta[k];
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
    .overwrites = 1,
    .fuses = 3,
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = bn_setup,
    .forward = bn_forward,
    .backward = bn_backward,
    .update_stats = bn_update_stats,
};
