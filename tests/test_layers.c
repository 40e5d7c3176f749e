/* Layers and the loss: the table of kinds, the shapes and parameters setup fills in, setup errors,
 * dropout's behaviour, and a gradient check of every kind (input and weight gradients) and of the
 * softmax cross-entropy against central finite differences.
 *
 * The gradient check differentiates the scalar L = sum(out * r) for a fixed random r, so backward
 * runs with dout = r. Each input and weight is moved by +-H in float and the difference quotient
 * of L (summed in double) is compared with the analytic value:
 *
 *     |analytic - numeric| / max(|analytic|, |numeric|, FLOOR) <= BOUND
 *
 * with H = 1e-2, FLOOR = 0.1 (float rounding of the outputs makes the quotient noisy at ~1e-4 in
 * absolute terms) and BOUND = 1e-2. Kinks are kept out of reach: inputs of maxpool and relu are a
 * shuffled grid spaced 0.05 (> 2H) apart with no value within H of 0, so no perturbation changes
 * which value is a window's maximum or which side of 0 a value is on. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/thread_pool.h"
#include "nnlab/alloc.h"
#include "nnlab/bench.h"
#include "nnlab/conv_gemm.h"
#include "nnlab/kernels.h"
#include "nnlab/layer.h"
#include "nnlab/model.h"
#include "nnlab/rng.h"
#include "nnlab/spec.h"
#include "tap.h"
#include "test_util.h"

#define H     1e-2
#define FLOOR 0.1
#define BOUND 1e-2

static int allocated_in_steps; /* set when a forward or backward allocated through nl_alloc */
static int scratch_overrun; /* set when one wrote past the nl_layer_scratch floats it was given */

#define GUARD 64 /* floats after a harness's scratch, checked after every call */

/* Distinct values (k + 0.5 - count/2) * spacing in shuffled order: none closer than spacing to
 * another, none closer than spacing/2 to 0. */
static void fill_grid(float *x, size_t count, float spacing)
{
    uint32_t *perm = malloc((count ? count : 1) * sizeof *perm);
    if (!perm)
        exit(1);
    for (size_t i = 0; i < count; i++)
        perm[i] = (uint32_t)i;
    nl_rng_shuffle(&rng, perm, count);
    for (size_t i = 0; i < count; i++)
        x[i] = ((float)perm[i] + 0.5f - (float)(count / 2)) * spacing;
    free(perm);
}

/* ---- a layer with its buffers, driven as the model drives it ---- */

struct harness {
    struct nl_layer l;
    int n, training;
    size_t in_count, out_count, scratch_count;
    float *in, *w, *out, *r, *scratch, *din, *dw;
    void *aux;
    struct nl_rng rng;
};

static int harness_setup(struct harness *h, const char *kind, struct nl_error *err)
{
    h->l.ops = nl_layer_kind(kind);
    if (!h->l.ops)
        return nl_error_set(err, NL_EINVAL, "no kind %s", kind);
    if (!h->l.name[0])
        snprintf(h->l.name, sizeof h->l.name, "%s1", kind);
    if (!h->l.ninputs)
        h->l.ninputs = 1;
    return h->l.ops->setup(&h->l, err);
}

/* A layer whose window is k x k with one stride and one padding on both axes, on input in. */
static struct nl_layer square_window(int k, int stride, int pad, struct nl_shape in)
{
    return (struct nl_layer){
        .kh = k, .kw = k, .sh = stride, .sw = stride, .ph = pad, .pw = pad, .in = {in}};
}

/* Sets up the layer (which must succeed) and allocates its buffers for a shard of n. */
static void harness_make(struct harness *h, const char *kind, int n)
{
    struct nl_error err = {0};
    if (harness_setup(h, kind, &err) != 0) {
        diag("setup of %s failed: %s", kind, err.msg);
        exit(1);
    }
    h->n = n;
    h->in_count = (size_t)n * nl_shape_size(h->l.in[0]);
    h->out_count = (size_t)n * nl_shape_size(h->l.out);
    h->scratch_count = nl_layer_scratch(&h->l, n);
    h->in = floats(h->in_count);
    h->din = floats(h->in_count);
    h->out = floats(h->out_count);
    h->r = floats(h->out_count);
    h->w = floats(h->l.param_count);
    h->dw = floats(h->l.param_count);
    h->scratch = floats(h->scratch_count + GUARD);
    h->aux = calloc((size_t)n * h->l.aux_bytes + 1, 1);
    fill(h->in, h->in_count, -1, 1);
    fill(h->w, h->l.param_count, -1, 1);
    fill(h->r, h->out_count, -1, 1);
}

static void harness_free(struct harness *h)
{
    free(h->in);
    free(h->din);
    free(h->out);
    free(h->r);
    free(h->w);
    free(h->dw);
    free(h->scratch);
    free(h->aux);
}

/* The GUARD floats after h's scratch: set to a value no layer writes, then checked. */
static void guard_set(struct harness *h)
{
    fill_value(h->scratch + h->scratch_count, GUARD, -7.25e9f);
}

static void guard_check(struct harness *h)
{
    for (size_t i = 0; i < GUARD; i++)
        if (h->scratch[h->scratch_count + i] != -7.25e9f) {
            if (!scratch_overrun)
                diag("%s (%s) wrote past its %zu floats of scratch", h->l.name,
                     nl_lowering_name(h->l.lower), h->scratch_count);
            scratch_overrun = 1;
            return;
        }
}

/* Forward with garbage in out, scratch and aux beforehand, so a layer that reads them shows. The
 * generator is reseeded each time: dropout draws the same mask on every call. */
static void forward(struct harness *h)
{
    struct nl_fwd f = {.n = h->n,
                       .in = {h->in},
                       .out = h->out,
                       .w = h->w,
                       .aux = h->aux,
                       .scratch = h->scratch,
                       .training = h->training,
                       .rng = &h->rng};
    fill_value(h->out, h->out_count, NAN);
    fill_value(h->scratch, h->scratch_count, NAN);
    guard_set(h);
    memset(h->aux, 0xff, (size_t)h->n * h->l.aux_bytes);
    nl_rng_seed(&h->rng, 99);
    uint64_t before = nl_alloc_count();
    h->l.ops->forward(&h->l, &f);
    allocated_in_steps |= nl_alloc_count() != before;
    guard_check(h);
}

/* Backward with dout = r, adding into din and dw (either may be NULL). */
static void backward(struct harness *h, float *din, float *dw)
{
    struct nl_bwd b = {.n = h->n,
                       .in = {h->in},
                       .out = h->out,
                       .dout = h->r,
                       .din = {din},
                       .w = h->w,
                       .dw = dw,
                       .aux = h->aux,
                       .scratch = h->scratch};
    fill_value(h->scratch, h->scratch_count, NAN);
    guard_set(h);
    uint64_t before = nl_alloc_count();
    h->l.ops->backward(&h->l, &b);
    allocated_in_steps |= nl_alloc_count() != before;
    guard_check(h);
}

static double loss_of(struct harness *h)
{
    double sum = 0.0;
    forward(h);
    for (size_t i = 0; i < h->out_count; i++)
        sum += (double)h->out[i] * h->r[i];
    return sum;
}

static double rel_err(double analytic, double numeric)
{
    double scale = fmax(fmax(fabs(analytic), fabs(numeric)), FLOOR);
    return fabs(analytic - numeric) / scale;
}

/* The largest relative error of grad against finite differences of loss_of over x[0..count). */
static double check_against_fd(struct harness *h, float *x, const float *grad, size_t count)
{
    double worst = 0.0;
    for (size_t i = 0; i < count; i++) {
        float saved = x[i];
        float xp = (float)(saved + H), xm = (float)(saved - H);
        x[i] = xp;
        double lp = loss_of(h);
        x[i] = xm;
        double lm = loss_of(h);
        x[i] = saved;
        double e = rel_err(grad[i], (lp - lm) / ((double)xp - (double)xm));
        if (isnan(e) || e > worst)
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

static void gradcheck(struct harness *h, const char *what)
{
    float *din = floats(h->in_count), *dw = floats(h->l.param_count);

    /* Analytic gradients, added onto 0.25 and -0.5 to show that backward accumulates. */
    loss_of(h);
    fill_value(h->din, h->in_count, 0.25f);
    fill_value(h->dw, h->l.param_count, -0.5f);
    backward(h, h->din, h->dw);
    for (size_t i = 0; i < h->in_count; i++)
        din[i] = h->din[i] - 0.25f;
    for (size_t i = 0; i < h->l.param_count; i++)
        dw[i] = h->dw[i] + 0.5f;

    double e = check_against_fd(h, h->in, din, h->in_count);
    ok(e <= BOUND, "%s: input gradient (%zu values), max relative error %.2g", what, h->in_count,
       e);
    if (h->l.param_count > 0) {
        e = check_against_fd(h, h->w, dw, h->l.param_count);
        ok(e <= BOUND, "%s: weight gradient (%zu values), max relative error %.2g", what,
           h->l.param_count, e);
    }

    /* A frozen layer (dw NULL) and a first layer (din NULL) get the same gradients. */
    loss_of(h);
    memset(h->din, 0, h->in_count * sizeof *h->din);
    memset(h->dw, 0, h->l.param_count * sizeof *h->dw);
    backward(h, h->din, NULL);
    backward(h, NULL, h->l.param_count ? h->dw : NULL);
    int same = 1;
    for (size_t i = 0; i < h->in_count; i++)
        same &= fabsf(h->din[i] - din[i]) <= 1e-5f * (1.0f + fabsf(din[i]));
    for (size_t i = 0; i < h->l.param_count; i++)
        same &= fabsf(h->dw[i] - dw[i]) <= 1e-5f * (1.0f + fabsf(dw[i]));
    ok(same, "%s: backward with din or dw NULL gives the same gradients", what);
    free(din);
    free(dw);
}

/* ---- gradient checks of every kind ---- */

static void gradcheck_conv_as(enum nl_lowering lowering, int n, struct nl_shape in, int filters,
                              int kh, int kw, int sh, int sw, int ph, int pw, int no_bias)
{
    struct harness h = {.l = {.lowering = lowering,
                              .filters = filters,
                              .kh = kh,
                              .kw = kw,
                              .sh = sh,
                              .sw = sw,
                              .ph = ph,
                              .pw = pw,
                              .no_bias = no_bias,
                              .in = {in}}};
    char what[128];
    harness_make(&h, "conv", n);
    snprintf(what, sizeof what, "conv %d %dx%d stride %dx%d pad %dx%d%s on %dx%dx%dx%d, %s",
             filters, kh, kw, sh, sw, ph, pw, no_bias ? " no bias" : "", n, in.c, in.h, in.w,
             nl_lowering_name(h.l.lower));
    gradcheck(&h, what);
    harness_free(&h);
}

/* Every case under each lowering of core/engine/layers/conv.c that takes it (the direct one only
 * with stride 1 and padding under the window's size, Winograd's two only for 3x3 windows with
 * stride 1 and padding at most 2; the phase planes, stride 2, in test_gradients' last cases). */
static void gradcheck_conv(int n, struct nl_shape in, int filters, int kh, int kw, int sh, int sw,
                           int ph, int pw, int no_bias)
{
    gradcheck_conv_as(NL_LOWER_SAMPLE, n, in, filters, kh, kw, sh, sw, ph, pw, no_bias);
    gradcheck_conv_as(NL_LOWER_SHARD, n, in, filters, kh, kw, sh, sw, ph, pw, no_bias);
    gradcheck_conv_as(NL_LOWER_PACKED, n, in, filters, kh, kw, sh, sw, ph, pw, no_bias);
    /* a stride of 0 is the default, 1 */
    if (nl_conv1c_fits(in.c, kh, kw, sh > 0 ? sh : 1, sw > 0 ? sw : 1, ph, pw,
                       (in.h + 2 * ph - kh) / (sh > 0 ? sh : 1) + 1,
                       (in.w + 2 * pw - kw) / (sw > 0 ? sw : 1) + 1))
        gradcheck_conv_as(NL_LOWER_ONECHAN, n, in, filters, kh, kw, sh, sw, ph, pw, no_bias);
    if (sh == 1 && sw == 1 && ph < kh && pw < kw)
        gradcheck_conv_as(NL_LOWER_DIRECT, n, in, filters, kh, kw, sh, sw, ph, pw, no_bias);
    if (sh == 1 && sw == 1 && kh == 3 && kw == 3 && ph < 3 && pw < 3) {
        gradcheck_conv_as(NL_LOWER_WINOGRAD, n, in, filters, kh, kw, sh, sw, ph, pw, no_bias);
        gradcheck_conv_as(NL_LOWER_WINOGRAD2, n, in, filters, kh, kw, sh, sw, ph, pw, no_bias);
    }
    if (sh == 1 && sw == 1 && kh == 3 && kw == 3 && ph == 1 && pw == 1 && in.h == 2 && in.w == 2)
        gradcheck_conv_as(NL_LOWER_PLANE2, n, in, filters, kh, kw, sh, sw, ph, pw, no_bias);
    if (sh == 2 && sw == 2 && kh == 3 && kw == 3 && ph == 1 && pw == 1 && in.h == in.w &&
        (in.h == 4 || in.h == 8))
        gradcheck_conv_as(NL_LOWER_S2LANES, n, in, filters, kh, kw, sh, sw, ph, pw, no_bias);
}

static void gradcheck_dense(int n, struct nl_shape in, int units, int no_bias)
{
    struct harness h = {.l = {.units = units, .no_bias = no_bias, .in = {in}}};
    char what[128];
    harness_make(&h, "dense", n);
    snprintf(what, sizeof what, "dense %d%s on %dx%dx%dx%d", units, no_bias ? " no bias" : "", n,
             in.c, in.h, in.w);
    gradcheck(&h, what);
    harness_free(&h);
}

static void gradcheck_pool(const char *kind, int n, struct nl_shape in, int kh, int kw, int sh,
                           int sw, int ph, int pw)
{
    /* in training: backward reads what a training forward keeps (maxpool's indices) */
    struct harness h = {
        .l = {.kh = kh, .kw = kw, .sh = sh, .sw = sw, .ph = ph, .pw = pw, .in = {in}},
        .training = 1};
    char what[128];
    harness_make(&h, kind, n);
    fill_grid(h.in, h.in_count, 0.05f);
    snprintf(what, sizeof what, "%s %dx%d stride %dx%d pad %dx%d on %dx%dx%dx%d", kind, kh, kw, sh,
             sw, ph, pw, n, in.c, in.h, in.w);
    gradcheck(&h, what);
    harness_free(&h);
}

static void gradcheck_simple(const char *kind, int n, struct nl_shape in, float p, int training)
{
    struct harness h = {.l = {.p = p, .in = {in}}, .training = training};
    char what[128];
    harness_make(&h, kind, n);
    if (strcmp(kind, "relu") == 0)
        fill_grid(h.in, h.in_count, 0.05f);
    else if (strcmp(kind, "relu6") == 0)
        fill_grid(h.in, h.in_count, 0.13f); /* -7.8 .. 7.8, no value within 0.04 of 0 or 6 */
    else
        fill(h.in, h.in_count, -2, 2);
    if (strcmp(kind, "dropout") == 0)
        snprintf(what, sizeof what, "dropout p=%g %s on %dx%dx%dx%d", (double)p,
                 training ? "training" : "eval", n, in.c, in.h, in.w);
    else
        snprintf(what, sizeof what, "%s on %dx%dx%dx%d", kind, n, in.c, in.h, in.w);
    gradcheck(&h, what);
    harness_free(&h);
}

static void test_gradients(void)
{
    gradcheck_conv(2, (struct nl_shape){2, 6, 7}, 3, 3, 3, 0, 0, 0, 0, 0);
    gradcheck_conv(2, (struct nl_shape){3, 9, 11}, 4, 3, 3, 2, 2, 1, 1, 0);
    gradcheck_conv(3, (struct nl_shape){2, 8, 7}, 3, 3, 2, 2, 1, 1, 0, 0);
    gradcheck_conv(1, (struct nl_shape){2, 5, 5}, 2, 2, 2, 1, 1, 2, 2, 1);
    gradcheck_conv(2, (struct nl_shape){4, 3, 3}, 5, 1, 1, 2, 2, 0, 0, 0);
    gradcheck_conv(3, (struct nl_shape){3, 3, 4}, 4, 1, 1, 1, 1, 0, 0, 0);
    /* Rows wider than one vector of 16 and than two; nine filters (eight and one more). */
    gradcheck_conv(2, (struct nl_shape){3, 5, 19}, 9, 3, 3, 1, 1, 1, 1, 0);
    gradcheck_conv(2, (struct nl_shape){2, 3, 35}, 3, 3, 3, 1, 1, 1, 1, 1);
    gradcheck_conv(2, (struct nl_shape){2, 6, 5}, 4, 3, 5, 1, 1, 2, 1, 0);
    /* one channel in, rows of 24 out (the one-channel lowering too) */
    gradcheck_conv(2, (struct nl_shape){1, 6, 26}, 3, 3, 3, 1, 1, 0, 0, 1);
    /* Planes that are not multiples of Winograd's tiles, a 2x2 and a 1x1 one, padding 2. */
    gradcheck_conv(3, (struct nl_shape){3, 7, 9}, 5, 3, 3, 1, 1, 1, 1, 0);
    gradcheck_conv(2, (struct nl_shape){5, 2, 2}, 4, 3, 3, 1, 1, 1, 1, 0);
    /* enough images for the 2x2-plane kernels (conv.c's PLANE2_MIN), a bias and none */
    gradcheck_conv(5, (struct nl_shape){6, 2, 2}, 5, 3, 3, 1, 1, 1, 1, 0);
    gradcheck_conv(4, (struct nl_shape){3, 2, 2}, 4, 3, 3, 1, 1, 1, 1, 1);
    /* stride 2 to 2x2 and 4x4 planes, enough images for the stride-2 lanes kernel */
    gradcheck_conv(5, (struct nl_shape){3, 4, 4}, 4, 3, 3, 2, 2, 1, 1, 0);
    gradcheck_conv(4, (struct nl_shape){2, 8, 8}, 3, 3, 3, 2, 2, 1, 1, 1);
    gradcheck_conv(2, (struct nl_shape){3, 1, 1}, 2, 3, 3, 1, 1, 1, 1, 1);
    gradcheck_conv(1, (struct nl_shape){2, 4, 5}, 3, 3, 3, 1, 1, 2, 2, 0);

    gradcheck_dense(3, (struct nl_shape){3, 2, 2}, 5, 0);
    gradcheck_dense(1, (struct nl_shape){7, 1, 1}, 4, 1);

    const char *pools[] = {"maxpool", "avgpool"};
    for (int i = 0; i < 2; i++) {
        gradcheck_pool(pools[i], 2, (struct nl_shape){3, 8, 8}, 2, 2, 0, 0, 0, 0);
        gradcheck_pool(pools[i], 2, (struct nl_shape){2, 9, 10}, 3, 3, 2, 2, 1, 1);
        gradcheck_pool(pools[i], 2, (struct nl_shape){2, 7, 9}, 2, 3, 1, 2, 0, 0);
        gradcheck_pool(pools[i], 2, (struct nl_shape){1, 5, 7}, 3, 2, 2, 3, 1, 1);
    }

    struct nl_shape s = {3, 4, 5};
    gradcheck_simple("relu", 2, s, 0, 0);
    gradcheck_simple("relu6", 2, s, 0, 0);
    gradcheck_simple("tanh", 2, s, 0, 0);
    gradcheck_simple("sigmoid", 2, s, 0, 0);
    gradcheck_simple("flatten", 2, (struct nl_shape){2, 3, 4}, 0, 0);
    gradcheck_simple("dropout", 2, s, 0.4f, 1);
    gradcheck_simple("dropout", 2, s, 0.5f, 0);
    /* The phase planes (stride 2), last so that the cases above draw the same data as before:
     * the strided cases above, a plane as resnet8's second stage but narrower, an odd one. */
    gradcheck_conv_as(NL_LOWER_PHASES, 2, (struct nl_shape){3, 9, 11}, 4, 3, 3, 2, 2, 1, 1, 0);
    gradcheck_conv_as(NL_LOWER_PHASES, 2, (struct nl_shape){4, 3, 3}, 5, 1, 1, 2, 2, 0, 0, 0);
    gradcheck_conv_as(NL_LOWER_PHASES, 2, (struct nl_shape){3, 14, 14}, 4, 3, 3, 2, 2, 1, 1, 1);
    gradcheck_conv_as(NL_LOWER_PHASES, 2, (struct nl_shape){2, 7, 9}, 3, 3, 3, 2, 2, 1, 1, 0);
}

/* ---- overwriting activation gradients (nl_bwd.set) ---- */

/* Backward of h with dout = r into din, each of din's elements set to start beforehand, with
 * bits `set`; the weight gradient into a scratch buffer of zeros. */
static void backward_set(struct harness *h, float *din, float start, unsigned set)
{
    float *dw = floats(h->l.param_count);
    fill_value(din, h->in_count, start);
    struct nl_bwd b = {.n = h->n,
                       .in = {h->in},
                       .out = h->out,
                       .dout = h->r,
                       .din = {din},
                       .w = h->w,
                       .dw = dw,
                       .aux = h->aux,
                       .scratch = h->scratch,
                       .set = set};
    guard_set(h);
    h->l.ops->backward(&h->l, &b);
    guard_check(h);
    free(dw);
}

/* The first writer of an activation gradient overwrites it when told to: into NaNs with the bit
 * set, the same values as added into zeros without it. */
static void check_overwrite(struct harness *h, const char *what)
{
    float *added = floats(h->in_count), *set = floats(h->in_count);
    forward(h);
    backward_set(h, added, 0.0f, 0);
    backward_set(h, set, NAN, 1);
    size_t same = 0;
    for (size_t i = 0; i < h->in_count; i++)
        same += set[i] == added[i];
    is_int((int)same, (int)h->in_count, "%s: backward overwrites din as it would add into zeros",
           what);
    free(added);
    free(set);
}

/* Winograd's scratch (core/engine/layers/conv.c): a shard of one chunk of images keeps its
 * filters' transform and that transform's gradient in the same floats, one after the other; a
 * shard of several chunks keeps both, and one chunk's tiles. scratch_fixed and
 * scratch_per_sample stay a bound. (The harness gives every layer nl_layer_scratch's floats.) */
static void test_winograd_scratch(void)
{
    static const struct {
        enum nl_lowering lower;
        int n, c, side, a, tiles, chunk;
        const char *what;
    } cases[] = {
        {NL_LOWER_WINOGRAD2, 16, 256, 4, 4, 4, 16, "ResNet-18 64x64 layer3, 16 images"},
        {NL_LOWER_WINOGRAD, 16, 128, 8, 6, 4, 16, "ResNet-18 64x64 layer2, 16 images"},
        {NL_LOWER_WINOGRAD, 16, 64, 16, 6, 16, 4, "ResNet-18 64x64 layer1, 16 images"},
        {NL_LOWER_WINOGRAD, 5, 16, 28, 6, 49, 4, "resnet8 stage 1, 5 images"},
        {NL_LOWER_WINOGRAD, 4, 16, 28, 6, 49, 4, "resnet8 stage 1, 4 images"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct nl_error err = {0};
        struct nl_layer l = {.ops = nl_layer_kind("conv"),
                             .lowering = cases[k].lower,
                             .filters = cases[k].c,
                             .kh = 3,
                             .kw = 3,
                             .ph = 1,
                             .pw = 1,
                             .ninputs = 1,
                             .in = {{cases[k].c, cases[k].side, cases[k].side}}};
        snprintf(l.name, sizeof l.name, "conv%zu", k);
        if (!ok(l.ops->setup(&l, &err) == 0, "%s: setup", cases[k].what)) {
            diag("%s", err.msg);
            continue;
        }
        const int n = cases[k].n, chunk = cases[k].chunk;
        const size_t u = (size_t)cases[k].a * cases[k].a * cases[k].c * cases[k].c;
        const size_t per = (size_t)cases[k].a * cases[k].a * cases[k].tiles * 2 * cases[k].c;
        const size_t want = (n > chunk ? 2 : 1) * u + (size_t)(n < chunk ? n : chunk) * per;
        is_int((long long)nl_layer_scratch(&l, n), (long long)want, "%s: %s", cases[k].what,
               n > chunk ? "u, du and a chunk's tiles" : "u or du, then the tiles");
        ok(nl_layer_scratch(&l, n) <= l.scratch_fixed + (size_t)n * l.scratch_per_sample,
           "%s: within scratch_fixed + n * scratch_per_sample", cases[k].what);
        for (int m = 1; m < n; m++)
            if (nl_layer_scratch(&l, m) > nl_layer_scratch(&l, m + 1)) {
                ok(0, "%s: %d images take more scratch than %d", cases[k].what, m, m + 1);
                break;
            }
    }
}

static void test_overwrite(void)
{
    const char *kinds[] = {"relu", "relu6", "flatten", "globalavgpool", "dense", "batchnorm"};
    const int nkinds = (int)(sizeof kinds / sizeof kinds[0]);
    const struct nl_shape s = {3, 4, 5};

    for (int k = 0; k < nkinds; k++)
        for (int training = 0; training < 2; training++) {
            struct harness h = {.l = {.in = {s}, .units = 6}, .training = training};
            char what[64];
            harness_make(&h, kinds[k], 2);
            fill(h.w, h.l.param_count, 0.5f, 1.5f); /* batchnorm: a positive running_var */
            snprintf(what, sizeof what, "%s%s", kinds[k], training ? " (training)" : "");
            check_overwrite(&h, what);
            harness_free(&h);
        }

    /* conv under each lowering: a 3x3 window that every one takes, a strided 1x1 one for the two
     * GEMM lowerings and the phase planes (with a strided 3x3); and Winograd's over 5 images of
     * 16x28x28, two chunks of images. */
    static const struct {
        enum nl_lowering lower;
        int n, filters, k, stride, pad;
        struct nl_shape in;
    } convs[] = {
        {NL_LOWER_SAMPLE, 2, 4, 3, 1, 1, {3, 6, 7}},
        {NL_LOWER_SHARD, 2, 4, 3, 1, 1, {3, 6, 7}},
        {NL_LOWER_DIRECT, 2, 4, 3, 1, 1, {3, 6, 7}},
        {NL_LOWER_WINOGRAD, 2, 4, 3, 1, 1, {3, 6, 7}},
        {NL_LOWER_WINOGRAD2, 2, 4, 3, 1, 1, {3, 6, 7}},
        {NL_LOWER_SAMPLE, 2, 4, 1, 2, 0, {3, 6, 7}},
        {NL_LOWER_SHARD, 2, 4, 1, 2, 0, {3, 6, 7}},
        {NL_LOWER_PHASES, 2, 4, 1, 2, 0, {3, 6, 7}},
        {NL_LOWER_PHASES, 2, 4, 3, 2, 1, {3, 6, 7}},
        {NL_LOWER_PACKED, 2, 4, 3, 1, 1, {3, 6, 7}},
        {NL_LOWER_PACKED, 3, 50, 5, 1, 0, {20, 12, 12}},
        {NL_LOWER_ONECHAN, 2, 7, 5, 1, 0, {1, 6, 28}},
        {NL_LOWER_WINOGRAD, 5, 16, 3, 1, 1, {16, 28, 28}},
        {NL_LOWER_WINOGRAD2, 5, 16, 3, 1, 1, {16, 28, 28}},
    };
    for (size_t k = 0; k < sizeof convs / sizeof convs[0]; k++) {
        struct harness h = {
            .l = square_window(convs[k].k, convs[k].stride, convs[k].pad, convs[k].in)};
        h.l.lowering = convs[k].lower;
        h.l.filters = convs[k].filters;
        h.l.no_bias = (int)(k & 1);
        char what[96];
        harness_make(&h, "conv", convs[k].n);
        snprintf(what, sizeof what, "conv %d %dx%d stride %d, lowering %d, on %dx%dx%dx%d",
                 convs[k].filters, convs[k].k, convs[k].k, convs[k].stride, (int)h.l.lower,
                 convs[k].n, convs[k].in.c, convs[k].in.h, convs[k].in.w);
        check_overwrite(&h, what);
        harness_free(&h);
    }

    /* globalavgpool1d on a sequence (C x 1 x L). */
    for (int training = 0; training < 2; training++) {
        struct harness h = {.l = {.in = {{3, 1, 7}}}, .training = training};
        harness_make(&h, "globalavgpool1d", 2);
        check_overwrite(&h, training ? "globalavgpool1d (training)" : "globalavgpool1d");
        harness_free(&h);
    }

    /* maxpool: lenet's 2x2 window, and overlapping 3x3 windows of stride 2 with padding. */
    for (int k = 2; k <= 3; k++) {
        struct harness h = {
            .l = {.kh = k, .kw = k, .sh = 2, .sw = 2, .ph = k - 2, .pw = k - 2, .in = {{3, 8, 8}}},
            .training = 1};
        harness_make(&h, "maxpool", 2);
        check_overwrite(&h, k == 2 ? "maxpool 2" : "maxpool 3 stride 2 pad 1");
        harness_free(&h);
    }

    /* add: each input on its own bit, the other added to. */
    const size_t count = 2 * nl_shape_size(s);
    struct nl_layer l = {.ops = nl_layer_kind("add"), .name = "add1", .ninputs = 2, .in = {s, s}};
    struct nl_error err = {0};
    l.ops->setup(&l, &err);
    float *dout = floats(count), *a = floats(count), *b0 = floats(count), *b1 = floats(count);
    fill(dout, count, -1, 1);
    fill(a, count, -1, 1);
    memcpy(b0, a, count * sizeof *a);
    fill_value(b1, count, NAN);
    struct nl_bwd b = {.n = 2, .dout = dout, .din = {b0, b1}, .set = 2u};
    l.ops->backward(&l, &b);
    size_t same = 0;
    for (size_t i = 0; i < count; i++)
        same += b0[i] == a[i] + dout[i] && b1[i] == dout[i];
    is_int((int)same, (int)count, "add: input 1 overwritten, input 0 added to");
    free(dout);
    free(a);
    free(b0);
    free(b1);

    /* Every kind that says it overwrites is checked above. */
    int unchecked = 0;
    for (const struct nl_layer_ops *const *o = nl_layer_kinds(); *o; o++) {
        int listed = strcmp((*o)->kind, "add") == 0 || strcmp((*o)->kind, "globalavgpool1d") == 0 ||
                     strcmp((*o)->kind, "conv") == 0 || strcmp((*o)->kind, "maxpool") == 0;
        for (int k = 0; k < nkinds; k++)
            listed |= strcmp((*o)->kind, kinds[k]) == 0;
        if ((*o)->overwrites && !listed) {
            diag("%s overwrites but is not checked", (*o)->kind);
            unchecked++;
        }
    }
    is_int(unchecked, 0, "every kind with ops->overwrites is checked");
}

/* ---- the loss ---- */

static double loss_naive(const float *logits, const int32_t *labels, int n, int k)
{
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        double sum = 0.0;
        for (int j = 0; j < k; j++)
            sum += exp((double)logits[i * k + j]);
        total += log(sum) - logits[i * k + labels[i]];
    }
    return total;
}

static void test_loss(void)
{
    enum { N = 5, K = 7 };
    float logits[N * K], dlogits[N * K], probs[N * K];
    int32_t labels[N] = {0, 6, 3, 3, 1};
    float scale = 1.0f / 8.0f;
    int correct = 3;

    fill(logits, N * K, -3, 3);
    double loss = nl_softmax_xent(dlogits, logits, labels, N, K, scale, &correct);
    is_float(loss, loss_naive(logits, labels, N, K), 1e-5, "xent: the loss sum as defined");
    is_float(nl_softmax_xent(NULL, logits, labels, N, K, scale, NULL), loss, 0.0,
             "xent: the same loss without dlogits");

    double worst = 0.0, row_sum = 0.0;
    for (int i = 0; i < N * K; i++) {
        float saved = logits[i], xp = (float)(saved + H), xm = (float)(saved - H);
        logits[i] = xp;
        double lp = nl_softmax_xent(NULL, logits, labels, N, K, scale, NULL);
        logits[i] = xm;
        double lm = nl_softmax_xent(NULL, logits, labels, N, K, scale, NULL);
        logits[i] = saved;
        double e = rel_err(dlogits[i], scale * (lp - lm) / ((double)xp - (double)xm));
        worst = e > worst ? e : worst;
    }
    ok(worst <= BOUND, "xent: dlogits = scale * dloss/dlogits, max relative error %.2g", worst);
    for (int i = 0; i < N; i++) {
        double s = 0.0;
        for (int j = 0; j < K; j++)
            s += dlogits[i * K + j];
        row_sum = fmax(row_sum, fabs(s));
    }
    is_float(row_sum, 0.0, 1e-6, "xent: each row of dlogits sums to 0");

    int hits = 0;
    for (int i = 0; i < N; i++) {
        int arg = 0;
        for (int j = 1; j < K; j++)
            arg = logits[i * K + j] > logits[i * K + arg] ? j : arg;
        hits += arg == labels[i];
    }
    is_int(correct, 3 + hits, "xent: adds the %d correct argmaxes to *correct", hits);

    float inplace[N * K];
    memcpy(inplace, logits, sizeof inplace);
    double loss2 = nl_softmax_xent(inplace, inplace, labels, N, K, scale, NULL);
    ok(loss2 == loss && memcmp(inplace, dlogits, sizeof inplace) == 0,
       "xent: dlogits may be the logits themselves");

    /* Large logits neither overflow nor lose the answer. */
    float big[6] = {1000.0f, -1000.0f, 0.0f, 0.0f, 1e4f, 1e4f};
    int32_t big_labels[2] = {0, 2};
    float dbig[6];
    correct = 0;
    double lb = nl_softmax_xent(dbig, big, big_labels, 2, 3, 1.0f, &correct);
    is_float(lb, log(2.0), 1e-6, "xent: stable for logits of 1000 and 1e4");
    ok(dbig[0] == 0.0f && dbig[1] == 0.0f && dbig[3] == 0.0f && fabsf(dbig[4] - 0.5f) < 1e-6f &&
           fabsf(dbig[5] + 0.5f) < 1e-6f,
       "xent: dlogits finite and right for large logits");
    is_int(correct, 1, "xent: a tie counts for the first maximum only");

    nl_softmax(probs, logits, N, K);
    double worst_sum = 0.0, worst_p = 0.0;
    for (int i = 0; i < N; i++) {
        double s = 0.0, z = 0.0;
        for (int j = 0; j < K; j++)
            z += exp((double)logits[i * K + j]);
        for (int j = 0; j < K; j++) {
            s += probs[i * K + j];
            worst_p = fmax(worst_p, fabs(probs[i * K + j] - exp((double)logits[i * K + j]) / z));
        }
        worst_sum = fmax(worst_sum, fabs(s - 1.0));
    }
    is_float(worst_p, 0.0, 1e-6, "softmax: matches exp(x) / sum exp(x)");
    is_float(worst_sum, 0.0, 1e-6, "softmax: rows sum to 1");
    nl_softmax(probs, big, 2, 3);
    ok(probs[0] == 1.0f && probs[1] == 0.0f && fabsf(probs[4] - 0.5f) < 1e-7f,
       "softmax: stable for logits of 1000 and 1e4");
}

/* ---- dropout ---- */

static void test_dropout(void)
{
    const float p = 0.3f;
    struct harness h = {.l = {.p = p, .in = {{1, 100, 1000}}}};
    harness_make(&h, "dropout", 1);
    fill(h.in, h.in_count, 0.5f, 1.5f);

    h.training = 0;
    forward(&h);
    ok(memcmp(h.out, h.in, h.in_count * sizeof *h.in) == 0, "dropout: identity in evaluation");
    memset(h.din, 0, h.in_count * sizeof *h.din);
    backward(&h, h.din, NULL);
    ok(memcmp(h.din, h.r, h.in_count * sizeof *h.r) == 0,
       "dropout: gradient passes unchanged in evaluation");

    h.training = 1;
    forward(&h);
    size_t dropped = 0, wrong = 0;
    float keep = 1.0f / (1.0f - p);
    for (size_t i = 0; i < h.in_count; i++) {
        if (h.out[i] == 0.0f)
            dropped++;
        else if (fabsf(h.out[i] - h.in[i] * keep) > 1e-6f * h.out[i])
            wrong++;
    }
    double frac = (double)dropped / (double)h.in_count;
    /* The standard deviation of frac is sqrt(p(1-p)/1e5) = 0.0014. */
    is_float(frac, p, 0.01, "dropout: training drops a fraction near p=%g", (double)p);
    is_int((long long)wrong, 0, "dropout: kept values are scaled by 1/(1-p)");

    memset(h.din, 0, h.in_count * sizeof *h.din);
    backward(&h, h.din, NULL);
    wrong = 0;
    for (size_t i = 0; i < h.in_count; i++) {
        float want = h.out[i] == 0.0f ? 0.0f : h.r[i] * keep;
        wrong += fabsf(h.din[i] - want) > 1e-6f;
    }
    is_int((long long)wrong, 0, "dropout: backward passes the kept gradients, scaled");

    float *first = floats(h.out_count);
    memcpy(first, h.out, h.out_count * sizeof *first);
    forward(&h);
    ok(memcmp(first, h.out, h.out_count * sizeof *first) == 0,
       "dropout: the same seed draws the same mask");
    struct nl_fwd f = {
        .n = 1, .in = {h.in}, .out = h.out, .aux = h.aux, .training = 1, .rng = &h.rng};
    h.l.ops->forward(&h.l, &f); /* the generator has moved on */
    ok(memcmp(first, h.out, h.out_count * sizeof *first) != 0,
       "dropout: the next draw is a different mask");
    free(first);
    harness_free(&h);

    struct harness z = {.l = {.p = 0.0f, .in = {{2, 3, 4}}}, .training = 1};
    harness_make(&z, "dropout", 2);
    forward(&z);
    ok(memcmp(z.out, z.in, z.in_count * sizeof *z.in) == 0, "dropout: p=0 is the identity");
    harness_free(&z);
}

/* ---- pooling at the padding, and NaN ---- */

/* relu6 is min(max(x, 0), 6): values below 0, inside and above 6. */
static void test_relu6_values(void)
{
    struct harness h = {.l = {.in = {{1, 1, 6}}}};
    const float x[6] = {-3.0f, -0.0f, 0.5f, 5.99f, 6.0f, 1e9f}, want[6] = {0, 0, 0.5f, 5.99f, 6, 6};
    int same = 1;

    harness_make(&h, "relu6", 1);
    memcpy(h.in, x, sizeof x);
    forward(&h);
    for (int i = 0; i < 6; i++)
        same &= h.out[i] == want[i];
    ok(same, "relu6: 0 below 0, x between, 6 above (%g %g %g %g %g %g)", (double)h.out[0],
       (double)h.out[1], (double)h.out[2], (double)h.out[3], (double)h.out[4], (double)h.out[5]);
    harness_free(&h);
}

/* Dense forward takes the transposed product on shards of 16 to 64 samples
 * (core/engine/layers/dense.c): the same floats as out = in weight^T from the bias, with and
 * without a folded ReLU, for mlp's and lenet's layers, shards on both sides of the bounds, and
 * layers without bias. */
static void test_dense_forms(void)
{
    static const struct {
        int in, units, n, bias;
    } cases[] = {{784, 512, 32, 1}, {512, 256, 64, 1}, {800, 500, 33, 1}, {500, 10, 64, 1},
                 {256, 10, 15, 1},  {7, 5, 16, 0},     {784, 512, 20, 0}, {100, 30, 65, 1}};
    int differ = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct harness h = {
            .l = {.in = {{cases[c].in, 1, 1}}, .units = cases[c].units, .no_bias = !cases[c].bias}};
        harness_make(&h, "dense", cases[c].n);
        const int n = h.n, in = cases[c].in, units = cases[c].units;
        float *want = floats(h.out_count);
        for (int s = 0; s < n; s++)
            for (int u = 0; u < units; u++)
                want[(size_t)s * units + u] = cases[c].bias ? h.w[h.l.params[1].offset + u] : 0.0f;
        nl_sgemm(0, 1, n, units, in, 1.0f, h.in, in, h.w, in, cases[c].bias ? 1.0f : 0.0f, want,
                 units);
        forward(&h);
        differ += memcmp(want, h.out, h.out_count * sizeof *want) != 0;
        /* With the ReLU folded in (inference): the same floats through it. */
        struct nl_fwd f = {
            .n = n, .in = {h.in}, .out = h.out, .w = h.w, .scratch = h.scratch, .act = NL_ACT_RELU};
        h.l.ops->forward(&h.l, &f);
        for (size_t i = 0; i < h.out_count; i++)
            want[i] = want[i] > 0.0f ? want[i] : 0.0f;
        differ += memcmp(want, h.out, h.out_count * sizeof *want) != 0;
        free(want);
        harness_free(&h);
    }
    is_int(differ, 0,
           "dense: forward's floats are those of out = in weight^T (+ bias), bit for bit, with and "
           "without a folded ReLU");
}

/* The 2x2 window of stride 2 in vectors against its scalar loops on each of shapes (count). */
static void maxpool_twins(const struct nl_shape *shapes, size_t count, const char *what)
{
    int differ = 0, cases = 0;
    for (size_t k = 0; k < count; k++) {
        struct harness p = {.l = {.kh = 2, .kw = 2, .sh = 2, .sw = 2, .in = {shapes[k]}}};
        harness_make(&p, "maxpool", 2);
        for (size_t i = 0; i < p.in_count; i++) {
            p.in[i] = (float)(int)(nl_rng_uniform(&rng) * 9.0) - 4.0f; /* -4 .. 4 */
            if (nl_rng_uniform(&rng) < 0.01)
                p.in[i] = NAN;
        }
        float *out = floats(p.out_count), *din = floats(p.in_count);
        int32_t *arg = malloc(p.out_count * sizeof *arg);
        for (int act = NL_ACT_NONE; act <= NL_ACT_RELU6; act++) {
            int was = nl_kernels_vector_on();
            for (int vec = 0; vec < 2; vec++) {
                nl_kernels_vector(vec && was);
                struct nl_fwd f = {.n = p.n, .in = {p.in}, .out = p.out, .aux = p.aux, .act = act};
                p.l.ops->forward(&p.l, &f);
                /* Backward as the first writer, into NaNs; some gradients -0.0f. */
                fill_value(p.din, p.in_count, NAN);
                for (size_t i = 0; i < p.out_count; i += 7)
                    p.r[i] = -0.0f;
                struct nl_bwd b = {.n = p.n,
                                   .in = {p.in},
                                   .out = p.out,
                                   .dout = p.r,
                                   .din = {p.din},
                                   .aux = p.aux,
                                   .set = 1,
                                   .act = act};
                p.l.ops->backward(&p.l, &b);
                if (vec == 0) {
                    memcpy(out, p.out, p.out_count * sizeof *out);
                    memcpy(arg, p.aux, p.out_count * sizeof *arg);
                    memcpy(din, p.din, p.in_count * sizeof *din);
                } else {
                    differ += memcmp(out, p.out, p.out_count * sizeof *out) != 0;
                    differ += memcmp(arg, p.aux, p.out_count * sizeof *arg) != 0;
                    differ += memcmp(din, p.din, p.in_count * sizeof *din) != 0;
                }
            }
            nl_kernels_vector(was);
            cases++;
        }
        free(out);
        free(din);
        free(arg);
        harness_free(&p);
    }
    is_int(differ, 0,
           "maxpool 2 on %s: vector and scalar paths the same values, indices and input gradients, "
           "bit for bit (%d cases%s)",
           what, cases, nl_kernels_vector_on() ? "" : "; no vector path on this CPU");
}

static void test_pool_semantics(void)
{
    /* Max pooling never picks the padding: an all-negative input stays negative. */
    struct harness m = {
        .l = {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .in = {{1, 4, 4}}}};
    harness_make(&m, "maxpool", 1);
    fill(m.in, m.in_count, -2.0f, -1.0f);
    forward(&m);
    int negative = 1;
    for (size_t i = 0; i < m.out_count; i++)
        negative &= m.out[i] < -1.0f + 1e-6f;
    ok(negative, "maxpool: the padding is never the maximum");
    m.in[15] = NAN; /* only in the last window */
    forward(&m);
    ok(isnan(m.out[3]) && !isnan(m.out[0]) && !isnan(m.out[2]),
       "maxpool: a NaN in a window gives NaN");
    harness_free(&m);

    /* The 2x2 window of stride 2 in vectors against its scalar loops, forward and backward (the
     * first writer's, which writes whole rows where the windows tile the plane, from gradients
     * that include -0.0f): values drawn from a few so that ties are common, some NaNs, rows of
     * 24, 8 and 9 (odd: the last column is left out), and of 70 (more than 16 outputs); with no
     * activation, a ReLU and a ReLU6. */
    static const struct nl_shape shapes[] = {{3, 24, 24}, {2, 8, 8}, {2, 7, 9}, {1, 4, 70}};
    maxpool_twins(shapes, sizeof shapes / sizeof shapes[0], "24, 8, 9 and 70 wide");

    /* Average pooling divides by the whole window, padding included (count_include_pad). */
    struct harness a = {.l = {.kh = 2, .kw = 2, .ph = 1, .pw = 1, .in = {{1, 2, 2}}}};
    harness_make(&a, "avgpool", 1);
    fill_value(a.in, a.in_count, 1.0f);
    forward(&a);
    ok(a.l.out.h == 2 && a.l.out.w == 2 && a.out[0] == 0.25f && a.out[1] == 0.25f &&
           a.out[2] == 0.25f && a.out[3] == 0.25f,
       "avgpool 2 pad 1 on ones 2x2: each output 1/4, the padding counted");
    harness_free(&a);
}

/* ---- the table, shapes and parameters ---- */

static void test_kinds(void)
{
    static const char *names[] = {"conv",
                                  "dense",
                                  "maxpool",
                                  "avgpool",
                                  "relu",
                                  "tanh",
                                  "sigmoid",
                                  "flatten",
                                  "dropout",
                                  "leakyrelu",
                                  "gelu",
                                  "softmax",
                                  "add",
                                  "concat",
                                  "globalavgpool",
                                  "batchnorm",
                                  "gconv",
                                  "relu6",
                                  "embedding",
                                  "conv1d",
                                  "maxpool1d",
                                  "globalavgpool1d",
                                  "globalmaxpool1d",
                                  "lstm",
                                  "gru",
                                  "embed-columns"};
    size_t count = sizeof names / sizeof names[0];
    int found = 0;

    for (size_t i = 0; i < count; i++) {
        const struct nl_layer_ops *ops = nl_layer_kind(names[i]);
        found += ops && strcmp(ops->kind, names[i]) == 0 && ops->setup && ops->forward &&
                 ops->backward &&
                 (strcmp(names[i], "add") == 0 || strcmp(names[i], "concat") == 0
                      ? ops->min_inputs == 2 && ops->max_inputs == NL_MAX_INPUTS
                  : (strncmp(names[i], "global", 6) == 0 && strstr(names[i], "1d")) ||
                          strcmp(names[i], "lstm") == 0 || strcmp(names[i], "gru") == 0
                      ? ops->min_inputs == 1 && ops->max_inputs == 2 /* the tokens: a mask */
                      : ops->min_inputs == 1 && ops->max_inputs == 1);
    }
    is_int(found, (long long)count, "all %zu kinds are in the table, complete", count);
    ok(nl_layer_kind("conv2d") == NULL && nl_layer_kind("") == NULL && nl_layer_kind(NULL) == NULL,
       "unknown kinds give NULL");
    size_t listed = 0;
    for (const struct nl_layer_ops *const *k = nl_layer_kinds(); *k; k++)
        listed++;
    is_int((long long)listed, (long long)count, "nl_layer_kinds lists %zu kinds", count);
}

static struct nl_layer layer(const char *kind, struct nl_shape in)
{
    struct nl_layer l = {.ops = nl_layer_kind(kind), .ninputs = 1, .in = {in}};
    snprintf(l.name, sizeof l.name, "%s", kind);
    return l;
}

static int setup(struct nl_layer *l)
{
    struct nl_error err = {0};
    int rc = l->ops->setup(l, &err);
    if (rc)
        diag("%s", err.msg);
    return rc;
}

static void is_shape(struct nl_shape got, int c, int h, int w, const char *what)
{
    char g[64], want[64];
    snprintf(g, sizeof g, "%dx%dx%d", got.c, got.h, got.w);
    snprintf(want, sizeof want, "%dx%dx%d", c, h, w);
    is_str(g, want, "%s gives %s", what, want);
}

static void test_shapes(void)
{
    /* LeNet on 1x28x28, as data/models/lenet builds it. */
    struct nl_layer c1 = layer("conv", (struct nl_shape){1, 28, 28});
    c1.filters = 20, c1.kh = c1.kw = 5;
    is_int(setup(&c1), 0, "conv 20 5x5 on 1x28x28 sets up");
    is_shape(c1.out, 20, 24, 24, "conv 20 5x5 on 1x28x28");
    is_int(c1.nparams, 2, "conv: two parameters");
    struct nl_param *w = &c1.params[0], *b = &c1.params[1];
    ok(strcmp(w->name, "weight") == 0 && w->ndim == 4 && w->dims[0] == 20 && w->dims[1] == 1 &&
           w->dims[2] == 5 && w->dims[3] == 5 && w->count == 500 && w->offset == 0,
       "conv: weight [20, 1, 5, 5] at 0");
    ok(strcmp(b->name, "bias") == 0 && b->ndim == 1 && b->dims[0] == 20 && b->count == 20 &&
           b->offset == 500,
       "conv: bias [20] at 500");
    ok(w->fan_in == 25 && w->fan_out == 500 && w->init == NL_INIT_DEFAULT &&
           b->init == NL_INIT_ZERO,
       "conv: fan_in C*kh*kw, fan_out F*kh*kw, default init, zero bias");
    is_int((long long)c1.param_count, 520, "conv: 520 parameters");
    is_int((long long)c1.scratch_fixed, nl_kernels_vector_on() ? 25 * 576 + 20 * 25 * 16 : 25 * 576,
           "conv: scratch K * P, one image's columns (and 16 lanes per weight where the "
           "one-channel lowering runs)");
    is_int((long long)(c1.aux_bytes + c1.scratch_per_sample), 0,
           "conv: no aux, no scratch per sample");

    struct nl_layer p1 = layer("maxpool", c1.out);
    p1.kh = p1.kw = 2;
    is_int(setup(&p1), 0, "maxpool 2 sets up");
    is_shape(p1.out, 20, 12, 12, "maxpool 2 on 20x24x24");
    is_int((long long)p1.aux_bytes, 20 * 12 * 12 * 4, "maxpool: one int32 index per output");
    is_int((long long)p1.param_count, 0, "maxpool: no parameters");

    struct nl_layer c2 = layer("conv", p1.out);
    c2.filters = 50, c2.kh = c2.kw = 5;
    setup(&c2);
    is_shape(c2.out, 50, 8, 8, "conv 50 5x5 on 20x12x12");
    struct nl_layer p2 = layer("maxpool", c2.out);
    p2.kh = p2.kw = 2;
    setup(&p2);
    is_shape(p2.out, 50, 4, 4, "maxpool 2 on 50x8x8");

    struct nl_layer fc = layer("dense", p2.out);
    fc.units = 500;
    is_int(setup(&fc), 0, "dense 500 on 50x4x4 sets up");
    is_shape(fc.out, 500, 1, 1, "dense 500 on 50x4x4");
    w = &fc.params[0], b = &fc.params[1];
    ok(fc.nparams == 2 && w->init == NL_INIT_DEFAULT && strcmp(w->name, "weight") == 0 &&
           w->ndim == 2 && w->dims[0] == 500 && w->dims[1] == 800 && w->fan_in == 800 &&
           w->fan_out == 500,
       "dense: weight [500, 800], fan_in 800, fan_out 500");
    ok(strcmp(b->name, "bias") == 0 && b->dims[0] == 500 && b->offset == 400000 &&
           b->init == NL_INIT_ZERO,
       "dense: bias [500] at 400000, zero init");
    is_int((long long)fc.param_count, 400500, "dense: 400500 parameters");

    struct nl_layer nb = layer("dense", p2.out);
    nb.units = 10, nb.no_bias = 1, nb.init = NL_INIT_HE;
    setup(&nb);
    ok(nb.nparams == 1 && nb.param_count == 8000 && nb.params[0].init == NL_INIT_HE,
       "dense no_bias: weight only; the configured init is kept");

    struct nl_layer cs = layer("conv", (struct nl_shape){3, 9, 11});
    cs.filters = 8, cs.kh = cs.kw = 3, cs.sh = cs.sw = 2, cs.ph = cs.pw = 1;
    setup(&cs);
    is_shape(cs.out, 8, 5, 6, "conv 8 3x3 stride 2 pad 1 on 3x9x11");
    struct nl_layer cn = layer("conv", (struct nl_shape){2, 10, 9});
    cn.filters = 4, cn.kh = 3, cn.kw = 1, cn.sw = 3, cn.ph = 2;
    setup(&cn);
    is_shape(cn.out, 4, 12, 3, "conv 4 3x1 stride 1x3 pad 2x0 on 2x10x9");

    struct nl_layer ap = layer("avgpool", (struct nl_shape){4, 7, 9});
    ap.kh = 2, ap.kw = 3;
    setup(&ap);
    is_shape(ap.out, 4, 3, 3, "avgpool 2x3 (stride = window) on 4x7x9");
    is_int((long long)(ap.aux_bytes + ap.scratch_per_sample), 0, "avgpool: no aux, no scratch");
    struct nl_layer mp = layer("maxpool", (struct nl_shape){20, 24, 24});
    mp.kh = mp.kw = 3, mp.sh = mp.sw = 2, mp.ph = mp.pw = 1;
    setup(&mp);
    is_shape(mp.out, 20, 12, 12, "maxpool 3 stride 2 pad 1 on 20x24x24");

    struct nl_layer fl = layer("flatten", (struct nl_shape){50, 4, 4});
    setup(&fl);
    is_shape(fl.out, 800, 1, 1, "flatten on 50x4x4");
    const char *same[] = {"relu", "relu6", "tanh", "sigmoid", "dropout"};
    for (int i = 0; i < 5; i++) {
        struct nl_layer a = layer(same[i], (struct nl_shape){6, 5, 4});
        a.p = 0.5f;
        setup(&a);
        is_shape(a.out, 6, 5, 4, same[i]);
    }
    struct nl_layer dr = layer("dropout", (struct nl_shape){6, 5, 4});
    dr.p = 0.5f;
    setup(&dr);
    is_int((long long)dr.aux_bytes, 120 * 4, "dropout: one float of mask per value");
}

/* ---- setup errors ---- */

static void expect_error(struct nl_layer *l, const char *want, const char *what)
{
    struct nl_error err = {0};
    int rc = l->ops->setup(l, &err);
    ok(rc == NL_EINVAL && err.code == NL_EINVAL, "%s: NL_EINVAL", what);
    like(err.msg, want, "%s: says so", what);
}

static void test_errors(void)
{
    struct nl_error err = {0};

    struct nl_layer c = layer("conv", (struct nl_shape){1, 4, 4});
    snprintf(c.name, sizeof c.name, "conv1");
    c.line = 3, c.filters = 6, c.kh = c.kw = 5;
    is_int(c.ops->setup(&c, &err), NL_EINVAL, "conv window larger than the input: NL_EINVAL");
    is_str(err.msg, "layer 'conv1' (line 3): window 5x5 is larger than the padded input 4x4",
           "conv window larger than the input: the message names layer and line");
    c.kh = c.kw = 7, c.ph = c.pw = 1;
    expect_error(&c, "window 7x7 is larger than the padded input 6x6", "conv 7x7 pad 1 on 4x4");
    c.kh = 3, c.kw = 3, c.ph = c.pw = 0, c.filters = 0;
    expect_error(&c, "layer 'conv1' (line 3): conv needs a positive number of filters",
                 "conv 0 filters");
    c.filters = 2, c.sh = -1;
    expect_error(&c, "stride -1x0 is negative", "conv negative stride");
    c.sh = 0, c.ph = -1;
    expect_error(&c, "padding -1x0 is negative", "conv negative padding");
    c.ph = 0, c.kh = 0;
    expect_error(&c, "window 0x3 must be at least 1x1", "conv empty window");

    struct nl_layer d = layer("dropout", (struct nl_shape){10, 1, 1});
    snprintf(d.name, sizeof d.name, "drop");
    d.p = 1.0f;
    memset(&err, 0, sizeof err);
    is_int(d.ops->setup(&d, &err), NL_EINVAL, "dropout p=1: NL_EINVAL");
    is_str(err.msg, "layer 'drop': dropout probability 1 is outside [0, 1)",
           "dropout p=1: the message names the layer, no line when it has none");
    d.p = -0.1f;
    expect_error(&d, "probability -0.1 is outside", "dropout p=-0.1");
    d.p = NAN;
    expect_error(&d, "layer 'drop'", "dropout p=NaN");

    struct nl_layer f = layer("dense", (struct nl_shape){50, 4, 4});
    snprintf(f.name, sizeof f.name, "fc2");
    f.line = 11, f.units = NL_UNITS_CLASSES;
    expect_error(&f, "layer 'fc2' (line 11): the number of units (N) must be resolved",
                 "dense N not resolved");
    f.units = 0;
    expect_error(&f, "dense needs a positive number of units, not 0", "dense 0");

    struct nl_layer p = layer("maxpool", (struct nl_shape){3, 8, 8});
    p.kh = p.kw = 2, p.ph = 2;
    expect_error(&p, "padding 2x0 is more than half the window 2x2", "maxpool 2 pad 2");
    p.ph = 0, p.kh = p.kw = 9;
    expect_error(&p, "window 9x9 is larger than the padded input 8x8", "maxpool 9 on 8x8");
    struct nl_layer a = layer("avgpool", (struct nl_shape){3, 8, 8});
    a.kh = a.kw = 3, a.pw = 2;
    expect_error(&a, "padding 0x2 is more than half the window 3x3", "avgpool 3 pad 0x2");

    struct nl_layer r = layer("relu", (struct nl_shape){3, 8, 8});
    r.ninputs = 2;
    expect_error(&r, "relu takes 1 input, not 2", "relu with two inputs");
    struct nl_layer e = layer("flatten", (struct nl_shape){0, 8, 8});
    expect_error(&e, "input 0x8x8 is empty", "flatten of an empty input");
}

/* ---- folding in inference (core/engine/model.c) ---- */

/* A model of every chain the executor folds, and some it must not: conv (with a bias) ->
 * batchnorm -> relu6; conv -> relu; conv -> batchnorm with the add reading it; a conv read
 * twice (no fold); a three-input add -> relu; and a batchnorm read by two layers. */
static const char fold_spec[] = "c1: conv 6 3x3 pad=1\n"
                                "b1: batchnorm\n"
                                "r1: relu6\n"
                                "c2: conv 6 3x3 pad=1 stride=2\n"
                                "r2: relu\n"
                                "c3: conv 6 3x3 pad=1 bias=no\n"
                                "b3: batchnorm\n"
                                "a3: add in=b3,r2\n"
                                "o3: relu\n"
                                "c4: conv 6 1x1 bias=no\n"
                                "b4: batchnorm in=c4\n"
                                "t4: tanh in=c4\n"
                                "a4: add in=b4,t4,o3\n"
                                "o4: relu\n"
                                "b5: batchnorm\n"
                                "r5: relu in=b5\n"
                                "a5: add in=r5,b5\n"
                                "pool: globalavgpool\n"
                                "fc: dense N\n";

/* Max pooling takes in the activation that alone reads it: through the general windows
 * (overlapping, padded) into a ReLU6, and lenet's 2x2 window into a ReLU. */
static const char pool_spec[] = "c1: conv 20 3x3 pad=1\n"
                                "p1: maxpool 3 stride=2 pad=1\n"
                                "r1: relu6\n"
                                "c2: conv 20 3x3 pad=1\n"
                                "p2: maxpool 2\n"
                                "r2: relu\n"
                                "fc: dense N\n";

/* Running statistics and affine parameters away from their initial values, so that folding
 * them is not the identity. */
static void perturb_batchnorms(struct nl_model *m)
{
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        if (strcmp(l->ops->kind, "batchnorm") != 0)
            continue;
        float *w = m->params + l->param_offset;
        for (int k = 0; k < l->in[0].c; k++) {
            w[k] = 0.5f + (float)nl_rng_uniform(&rng);
            w[l->params[1].offset + k] = (float)nl_rng_uniform(&rng) - 0.5f;
            w[l->params[2].offset + k] = (float)nl_rng_uniform(&rng) - 0.5f;
            w[l->params[3].offset + k] = 0.2f + (float)nl_rng_uniform(&rng);
        }
    }
}

/* The model called name, from text where that is not NULL, else from the shipped spec of that
 * name, on input in with 10 classes and its parameters drawn from seed, its batchnorms perturbed;
 * NULL after a failed check naming it. The caller frees *spec (set either way) and the model. */
static struct nl_model *build_perturbed(const char *name, const char *text, struct nl_shape in,
                                        uint64_t seed, struct nl_spec **spec)
{
    struct nl_error err = {0};
    struct nl_model *m = NULL;

    *spec = NULL;
    int rc = text ? nl_spec_parse(spec, text, name, NULL, NULL, &err)
                  : nl_spec_load(spec, name, NULL, NULL, &err);
    if (rc == 0)
        rc = nl_model_build(&m, *spec, in, 10, &err);
    if (rc < 0) {
        ok(0, "%s builds: %s", name, err.msg);
        return NULL;
    }
    nl_model_init_params(m, seed);
    perturb_batchnorms(m);
    return m;
}

/* The forward-only executor (folded) against a training executor in evaluation (every layer
 * as it is), for n samples, on the vector or the scalar kernels; returns the largest
 * difference of the logits relative to the largest logit, -1 on a failure. */
static double fold_against_plain(struct nl_model *m, int n, int *folded, int *train_same)
{
    struct nl_error err = {0};
    struct nl_exec *fx = NULL, *px = NULL;
    const size_t in_size = nl_shape_size(m->input), k = (size_t)m->nclasses;
    float *in = nl_alloc_floats((size_t)n * in_size);
    double worst = -1.0;

    int fusing = nl_exec_fusion(0); /* px runs every layer as it is */
    int made = in && nl_exec_new_forward(&fx, m, n, &err) == 0 && nl_exec_new(&px, m, n, &err) == 0;
    nl_exec_fusion(fusing);
    if (made) {
        fill(in, (size_t)n * in_size, -1.0f, 1.0f);
        const float *want = nl_exec_forward(px, m->params, in, n, 0, &rng);
        const float *got = nl_exec_forward(fx, m->params, in, n, 0, &rng);
        double big = 0.0, diff = 0.0;
        for (size_t i = 0; i < (size_t)n * k; i++) {
            if (fabs(want[i]) > big)
                big = fabs(want[i]);
            if (!(fabs((double)got[i] - want[i]) <= diff))
                diff = isnan(got[i]) ? INFINITY : fabs((double)got[i] - want[i]);
        }
        worst = big > 0.0 ? diff / big : diff;
        *folded = nl_exec_folded(fx);
        /* a forward in training mode runs every layer of the forward-only executor as it is,
         * in buffers shared by their lives in that flow too */
        struct nl_rng r1 = rng, r2 = rng;
        want = nl_exec_forward(px, m->params, in, n, 1, &r1);
        got = nl_exec_forward(fx, m->params, in, n, 1, &r2);
        *train_same = memcmp(want, got, (size_t)n * k * sizeof *got) == 0;
    } else {
        diag("%s", err.msg);
    }
    nl_exec_free(fx);
    nl_exec_free(px);
    nl_free(in);
    return worst;
}

static void test_folding(void)
{
    static const struct {
        const char *name; /* shipped model, or NULL for fold_spec */
        struct nl_shape in;
        int folded; /* layers folded away */
    } cases[] = {
        {NULL, {3, 9, 9}, 6},
        {"resnet8", {1, 28, 28}, 16},
        {"mobilenet-tiny", {1, 28, 28}, 19},
        {"lenet", {1, 28, 28}, 3},     /* the relus after both maxpools and fc1 */
        {"pool_spec", {3, 14, 14}, 2}, /* a maxpool's relu6 and another's relu */
        {"resnet18", {3, 32, 32}, 37},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct nl_spec *spec = NULL;
        const char *name = cases[c].name ? cases[c].name : "fold_spec";
        const char *text = !cases[c].name                   ? fold_spec
                           : strcmp(name, "pool_spec") == 0 ? pool_spec
                                                            : NULL;
        struct nl_model *m = build_perturbed(name, text, cases[c].in, 11, &spec);
        if (!m) {
            nl_spec_free(spec);
            continue;
        }
        for (int vec = 1; vec >= 0; vec--) {
            int was = nl_kernels_vector_on();
            nl_kernels_vector(vec && was);
            for (int n = 1; n <= 5; n += 4) {
                int folded = -1, train_same = 0;
                double worst = fold_against_plain(m, n, &folded, &train_same);
                ok(worst >= 0.0 && worst < 1e-5,
                   "%s, %d sample(s), %s kernels: folded logits equal the plain ones to rounding "
                   "(worst %.2g of the largest)",
                   name, n, vec && was ? "vector" : "scalar", worst);
                is_int(folded, cases[c].folded, "%s: layers folded away", name);
                ok(train_same,
                   "%s, %d sample(s): a forward in training mode on the forward-only executor "
                   "gives the plain executor's logits bit for bit",
                   name, n);
            }
            nl_kernels_vector(was);
        }
        nl_model_free(m);
        nl_spec_free(spec);
    }
}

/* ---- training-time fusion ----
 *
 * A training executor runs each ReLU or ReLU6 that alone reads a batchnorm or an add inside that
 * layer, and each residual add that alone reads a batchnorm inside the batchnorm, with the ReLU
 * after the add (core/engine/model.c). The arithmetic is the unfused layers', so the logits, the
 * weight gradients and batchnorm's sums for its statistics must equal theirs bit for bit, forward
 * in training (batch statistics) and in evaluation (running statistics), on the vector and the
 * scalar kernels. fuse_spec has 20 channels (not a multiple of 16), planes of 14x14 and 7x7, a
 * batchnorm over vectors (dense -> batchnorm -> relu), a ReLU6, a batchnorm -> add -> relu whose
 * other input is a ReLU6 that a convolution also reads, and a model whose last layer is a fused
 * ReLU; fold_spec adds a three-input add -> relu, a batchnorm feeding a three-input add (not
 * fused) and one read by two layers (not fused); resnet8 has adds of two batchnorms, where one
 * is fused, and the shortcut's layers lying between the fused batchnorm and its add; lenet and
 * pool_spec have maxpools that take in their ReLU or ReLU6. Every batchnorm has a channel of
 * weight 0, where xhat cannot be recovered from the output. */
static const char fuse_spec[] = "c1: conv 20 3x3 pad=1\n"
                                "b1: batchnorm\n"
                                "r1: relu\n"
                                "p1: maxpool 2\n"
                                "b2: batchnorm\n"
                                "r2: relu6\n"
                                "c2: conv 20 3x3 pad=1 bias=no\n"
                                "b3: batchnorm\n"
                                "a3: add in=b3,r2\n"
                                "o3: relu\n"
                                "fc1: dense 24\n"
                                "b4: batchnorm\n"
                                "r4: relu\n"
                                "fc: dense N\n"
                                "bo: batchnorm\n"
                                "ro: relu\n";

/* perturb_batchnorms, then channel 0 of every batchnorm gets weight 0. */
static void perturb_for_fusion(struct nl_model *m)
{
    perturb_batchnorms(m);
    for (int i = 0; i < m->nlayers; i++)
        if (strcmp(m->layers[i].ops->kind, "batchnorm") == 0)
            m->params[m->layers[i].param_offset] = 0.0f;
}

struct fusion_result {
    int made;                    /* both executors were made */
    int fused, plain;            /* nl_exec_folded of the fused and of the plain executor */
    int logits_same;             /* bit for bit */
    int grads_same;              /* the whole reduced range [0, nreduce), bit for bit */
    double grad_norm;            /* of the fused gradient: 0 would make the comparison empty */
    size_t prefix, prefix_plain; /* nl_exec_prefix of each */
    int head_same; /* forward_head from the fused executor's features: the same logits */
};

/* One forward (training or not) and backward of n samples through a fused and a plain executor
 * of m, from the same input and logits' gradient. */
static struct fusion_result fuse_against_plain(struct nl_model *m, int n, int training)
{
    struct fusion_result res = {0};
    struct nl_error err = {0};
    struct nl_exec *fx = NULL, *px = NULL;
    const size_t in_size = nl_shape_size(m->input), k = (size_t)m->nclasses;
    float *in = nl_alloc_floats((size_t)n * in_size), *dl = nl_alloc_floats((size_t)n * k);
    float *gf = nl_alloc_floats(m->nreduce + 1), *gp = nl_alloc_floats(m->nreduce + 1);
    float *want = nl_alloc_floats((size_t)n * k);

    int fusing = nl_exec_fusion(1);
    res.made = in && dl && gf && gp && want && nl_exec_new(&fx, m, n, &err) == 0;
    nl_exec_fusion(0);
    res.made = res.made && nl_exec_new(&px, m, n, &err) == 0;
    nl_exec_fusion(fusing);
    if (!res.made) {
        diag("%s", err.msg);
        goto out;
    }
    res.fused = nl_exec_folded(fx);
    res.plain = nl_exec_folded(px);
    res.prefix = nl_exec_prefix(fx);
    res.prefix_plain = nl_exec_prefix(px);
    res.logits_same = res.grads_same = 1;
    /* Twice, from other data: the second pass finds the activation gradients that the first
     * left behind, which a gradient's first writer must overwrite, not add to. */
    for (int pass = 0; pass < 2; pass++) {
        fill(in, (size_t)n * in_size, -1.0f, 1.0f);
        fill(dl, (size_t)n * k, -1.0f, 1.0f);
        memset(gf, 0, m->nreduce * sizeof *gf);
        memset(gp, 0, m->nreduce * sizeof *gp);
        struct nl_rng r1 = rng, r2 = rng;
        memcpy(want, nl_exec_forward(px, m->params, in, n, training, &r1),
               (size_t)n * k * sizeof *want);
        const float *got = nl_exec_forward(fx, m->params, in, n, training, &r2);
        res.logits_same &= memcmp(want, got, (size_t)n * k * sizeof *want) == 0;
        nl_exec_backward(px, m->params, dl, gp);
        nl_exec_backward(fx, m->params, dl, gf);
        res.grads_same &= memcmp(gf, gp, m->nreduce * sizeof *gf) == 0;
    }
    for (size_t i = 0; i < m->ntrainable; i++)
        res.grad_norm += (double)gf[i] * gf[i];
    res.grad_norm = sqrt(res.grad_norm);
    res.head_same = 1;
    if (res.prefix > 0) {
        /* The frozen prefix's features, read back from the fused executor, through the head. */
        float *feat = nl_alloc_floats((size_t)n * res.prefix);
        for (int s = 0; feat && s < n; s++)
            nl_exec_features(fx, s, feat + (size_t)s * res.prefix);
        struct nl_rng r3 = rng;
        const float *head =
            feat ? nl_exec_forward_head(fx, m->params, feat, n, training, &r3) : NULL;
        res.head_same = head && memcmp(want, head, (size_t)n * k * sizeof *want) == 0;
        nl_free(feat);
    }
out:
    nl_exec_free(fx);
    nl_exec_free(px);
    nl_free(in);
    nl_free(dl);
    nl_free(gf);
    nl_free(gp);
    nl_free(want);
    return res;
}

static void test_fusion(void)
{
    static const struct {
        const char *name; /* shipped model, or NULL for the spec */
        const char *spec;
        struct nl_shape in;
        int fused; /* layers fused into a batchnorm or an add before them */
    } cases[] = {
        {NULL, fuse_spec, {3, 14, 14}, 6},         {NULL, fold_spec, {3, 9, 9}, 4},
        {"resnet8", NULL, {1, 28, 28}, 10},        /* 4 ReLUs; 3 adds, each with its ReLU */
        {"mobilenet-tiny", NULL, {1, 28, 28}, 10}, /* 8 ReLUs, 2 adds without a ReLU */
        {"lenet", NULL, {1, 28, 28}, 2},           /* the ReLUs after its two maxpools */
        {"pool_spec", pool_spec, {3, 14, 14}, 2},  /* maxpool 3 -> relu6, maxpool 2 -> relu */
        {"resnet18", NULL, {3, 32, 32}, 25},       /* 9 ReLUs; 8 adds, each with its ReLU */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct nl_error err = {0};
        struct nl_spec *spec = NULL;
        struct nl_model *m = NULL;
        const char *name = cases[c].name                ? cases[c].name
                           : cases[c].spec == fuse_spec ? "fuse_spec"
                                                        : "fold_spec";
        int rc = cases[c].spec ? nl_spec_parse(&spec, cases[c].spec, name, NULL, NULL, &err)
                               : nl_spec_load(&spec, cases[c].name, NULL, NULL, &err);
        if (rc == 0)
            rc = nl_model_build(&m, spec, cases[c].in, 10, &err);
        if (rc < 0) {
            ok(0, "%s builds: %s", name, err.msg);
            nl_spec_free(spec);
            continue;
        }
        nl_model_init_params(m, 13);
        perturb_for_fusion(m);
        const int big = strcmp(name, "resnet18") == 0;
        for (int vec = 1; vec >= 0; vec--) {
            int was = nl_kernels_vector_on();
            nl_kernels_vector(vec && was);
            const char *kern = vec && was ? "vector" : "scalar";
            for (int n = 1; n <= 3; n += 2) {
                for (int training = 1; training >= 0; training--) {
                    if (big && (n == 1 || !training))
                        continue; /* the large model once per kernel path */
                    struct fusion_result r = fuse_against_plain(m, n, training);
                    ok(r.made && r.logits_same && r.grads_same && r.grad_norm > 0.0,
                       "%s, %d sample(s), %s, %s kernels: fused logits and gradients equal the "
                       "plain layers' bit for bit (gradient norm %.3g)",
                       name, n, training ? "training" : "evaluation", kern, r.grad_norm);
                    if (n == 3 && training)
                        ok(r.fused == cases[c].fused && r.plain == 0,
                           "%s: %d layers fused (%d without fusion)", name, r.fused, r.plain);
                }
            }
            nl_kernels_vector(was);
        }
        nl_model_free(m);
        nl_spec_free(spec);
    }
}

/* A frozen backbone (--freeze-up-to): the head alone trains, the groups of the frozen part still
 * fuse (no buffers for the layers fused away), and the prefix's features, taken from the fused
 * executor, give the same logits through the head. */
static void test_fusion_frozen(void)
{
    struct nl_error err = {0};
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;

    if (nl_spec_load(&spec, "resnet8", NULL, NULL, &err) < 0 ||
        nl_model_build(&m, spec, (struct nl_shape){1, 28, 28}, 10, &err) < 0 ||
        nl_model_freeze(m, NULL, 0, "s3out", &err) < 0) {
        ok(0, "resnet8 builds and freezes up to s3out: %s", err.msg);
        nl_model_free(m);
        nl_spec_free(spec);
        return;
    }
    nl_model_init_params(m, 17);
    perturb_for_fusion(m);
    const int fc = nl_model_find_layer(m, "fc");
    is_int((long long)m->ntrainable, (long long)((m->layers[fc].param_count + 15) & ~(size_t)15),
           "frozen up to s3out: only fc's parameters train");
    for (int n = 1; n <= 3; n += 2) {
        struct fusion_result r = fuse_against_plain(m, n, 1);
        ok(r.made && r.logits_same && r.grads_same && r.grad_norm > 0.0,
           "frozen backbone, %d sample(s): fused logits and head gradients equal the plain ones",
           n);
        ok(r.fused == 10 && r.prefix > 0 && r.prefix == r.prefix_plain && r.head_same,
           "frozen backbone: %d layers fused in the prefix, %zu features a sample, and the "
           "head on the fused executor's features gives the same logits",
           r.fused, r.prefix);
    }
    nl_model_free(m);
    nl_spec_free(spec);
}

/* din's first writer under SAMPLE's paths, each image's din cleared just before it is added
 * into: a pointwise window (din_s is the product itself), a 3x3 one over 3 images, and SHARD's
 * lowering over one image (which runs SAMPLE's backward), into NaNs. */
static void test_overwrite_sample(void)
{
    static const struct {
        enum nl_lowering lower;
        int n, filters, k, pad;
    } convs[] = {
        {NL_LOWER_SAMPLE, 3, 5, 1, 0},
        {NL_LOWER_SAMPLE, 3, 4, 3, 1},
        {NL_LOWER_SHARD, 1, 4, 3, 1},
    };
    for (size_t k = 0; k < sizeof convs / sizeof convs[0]; k++) {
        struct harness h = {
            .l = square_window(convs[k].k, 1, convs[k].pad, (struct nl_shape){3, 6, 7})};
        h.l.lowering = convs[k].lower;
        h.l.filters = convs[k].filters;
        char what[96];
        harness_make(&h, "conv", convs[k].n);
        snprintf(what, sizeof what, "conv %d %dx%d, lowering %d, on %dx3x6x7", convs[k].filters,
                 convs[k].k, convs[k].k, (int)h.l.lower, convs[k].n);
        check_overwrite(&h, what);
        harness_free(&h);
    }
}

/* ---- prepared weights ----
 *
 * nl_prep (nnlab/model.h) makes each Winograd convolution's transformed filters once for many
 * inference passes; a pass that reads them must give the logits of one that makes them, bit for
 * bit: on a forward-only executor (folded) and a training one in evaluation, for shards of one
 * image, of one chunk (ResNet-18's layer2 and layer3 at 3x64x64 then take their filters by
 * blocks) and of more than a group (the forward-only executor's 16 at a time). A pass given other
 * params than the prepared weights were made from reads none of them; nl_prep_fill makes them
 * again after the weights change in place. prep_spec's layers on 6x6 run one image as SAMPLE
 * from their weights turned (wt_turned), which take 4.7M and 18.9M floats: the second is past
 * NL_PREP_MAX, so that the model runs with one layer prepared and one not. */
static const char prep_spec[] = "c1: conv 1024 3x3 pad=1 bias=no\n"
                                "r1: relu\n"
                                "c2: conv 2048 3x3 pad=1\n"
                                "pool: globalavgpool\n"
                                "fc: dense N\n";

/* Logits of n samples in through x, with p attached (NULL: none) and params. */
static void prep_logits(struct nl_exec *x, const struct nl_prep *p, const float *params,
                        const float *in, int n, size_t k, float *out)
{
    nl_exec_use_prep(x, p);
    memcpy(out, nl_exec_forward(x, params, in, n, 0, &rng), (size_t)n * k * sizeof *out);
}

static void test_prep(void)
{
    static const struct {
        const char *name; /* shipped model, or "prep_spec" */
        struct nl_shape in;
        int layers; /* with prepared weights */
        int n[4];
    } cases[] = {
        {"resnet18", {3, 64, 64}, 16, {1, 2, 16, 21}},
        {"resnet8", {1, 28, 28}, 4, {1, 3, 17, 0}},
        {"lenet", {1, 28, 28}, 0, {1, 4, 0, 0}},
        {"prep_spec", {512, 6, 6}, 1, {1, 8, 0, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct nl_error err = {0};
        struct nl_spec *spec = NULL;
        const char *name = cases[c].name;
        struct nl_model *m = build_perturbed(
            name, strcmp(name, "prep_spec") == 0 ? prep_spec : NULL, cases[c].in, 13, &spec);
        if (!m) {
            nl_spec_free(spec);
            continue;
        }
        int max_n = 0;
        for (int j = 0; j < 4; j++)
            max_n = cases[c].n[j] > max_n ? cases[c].n[j] : max_n;
        const size_t in_size = nl_shape_size(m->input), k = (size_t)m->nclasses;
        float *in = nl_alloc_floats((size_t)max_n * in_size);
        float *want = nl_alloc_floats((size_t)max_n * k), *got = nl_alloc_floats((size_t)max_n * k);
        float *other = nl_alloc_floats(m->nparams);
        struct nl_exec *fx = NULL, *tx = NULL;
        struct nl_prep *p = NULL;
        if (!in || !want || !got || !other || nl_exec_new_forward(&fx, m, max_n, &err) < 0 ||
            nl_exec_new(&tx, m, max_n, &err) < 0 || nl_prep_new(&p, m, m->params, 0, &err) < 0) {
            ok(0, "%s: executors and prepared weights: %s", name, err.msg);
            goto next;
        }
        int layers = -1;
        size_t floats = nl_prep_floats(p, &layers);
        is_int(layers, cases[c].layers, "%s: layers with prepared weights", name);
        ok(floats <= NL_PREP_MAX && (floats > 0) == (layers > 0),
           "%s: %zu floats of prepared weights, within NL_PREP_MAX", name, floats);
        fill(in, (size_t)max_n * in_size, -1.0f, 1.0f);
        for (int j = 0; j < 4 && cases[c].n[j] > 0; j++) {
            const int n = cases[c].n[j];
            const size_t bytes = (size_t)n * k * sizeof(float);
            for (int e = 0; e < 2; e++) {
                struct nl_exec *x = e ? tx : fx;
                const char *what = e ? "a training executor in evaluation" : "forward-only";
                prep_logits(x, NULL, m->params, in, n, k, want);
                prep_logits(x, p, m->params, in, n, k, got);
                ok(memcmp(want, got, bytes) == 0,
                   "%s, %d sample(s), %s: the logits with prepared weights are those without, "
                   "bit for bit",
                   name, n, what);
            }
        }
        /* other params (every conv's weights changed): the prepared ones go unread; one image,
         * which every kind of prepared weights serves */
        const int n = cases[c].n[0];
        const size_t bytes = (size_t)n * k * sizeof(float);
        memcpy(other, m->params, m->nparams * sizeof *other);
        for (int i = 0; i < m->nlayers; i++) {
            const struct nl_layer *l = &m->layers[i];
            for (size_t j = 0; strcmp(l->ops->kind, "conv") == 0 && j < l->params[0].count; j++)
                other[l->param_offset + j] *= -0.5f;
        }
        prep_logits(fx, NULL, other, in, n, k, want);
        prep_logits(fx, p, other, in, n, k, got);
        ok(memcmp(want, got, bytes) == 0,
           "%s: a pass given other params reads no prepared weights made from these", name);
        /* the weights changed in place, then prepared again */
        prep_logits(fx, NULL, m->params, in, n, k, got);
        memcpy(m->params, other, m->nparams * sizeof *other);
        prep_logits(fx, NULL, m->params, in, n, k, want);
        ok(layers == 0 || memcmp(want, got, bytes) != 0,
           "%s: the changed weights change the logits", name);
        prep_logits(fx, p, m->params, in, n, k, got);
        ok(layers == 0 || memcmp(want, got, bytes) != 0,
           "%s: before nl_prep_fill, a pass reads the weights prepared from the former values",
           name);
        nl_prep_fill(p, m->params);
        prep_logits(fx, p, m->params, in, n, k, got);
        ok(memcmp(want, got, bytes) == 0,
           "%s: prepared again after a change in place, the logits are those without", name);
    next:
        nl_prep_free(p);
        nl_exec_free(fx);
        nl_exec_free(tx);
        nl_free(in);
        nl_free(want);
        nl_free(got);
        nl_free(other);
        nl_model_free(m);
        nl_spec_free(spec);
    }
}

/* A training run prepares its frozen layers' weights once (nl_prep with frozen): resnet8 with
 * s1c1 and s2c2 frozen (each between trainable layers, so that its backward still runs for its
 * input gradient) and with everything up to s1out frozen (no backward there). A training
 * executor's forward in training and in evaluation, and its backward, give the same floats with
 * them as without, bit for bit. */
static void test_prep_frozen(void)
{
    static const char *const names[] = {"s1c1", "s2c2"};
    for (int c = 0; c < 2; c++) {
        struct nl_error err = {0};
        struct nl_spec *spec = NULL;
        const char *what = c ? "resnet8 frozen up to s1out" : "resnet8, s1c1 and s2c2 frozen";
        struct nl_model *m =
            build_perturbed("resnet8", NULL, (struct nl_shape){1, 28, 28}, 17, &spec);
        if (m && (c ? nl_model_freeze(m, NULL, 0, "s1out", &err)
                    : nl_model_freeze(m, names, 2, NULL, &err)) < 0) {
            ok(0, "%s freezes: %s", what, err.msg);
            nl_model_free(m);
            m = NULL;
        }
        if (!m) {
            nl_spec_free(spec);
            continue;
        }
        const int n = 6;
        const size_t in_size = nl_shape_size(m->input), k = (size_t)m->nclasses;
        float *in = nl_alloc_floats((size_t)n * in_size), *dl = nl_alloc_floats((size_t)n * k);
        float *y[2] = {nl_alloc_floats((size_t)n * k), nl_alloc_floats((size_t)n * k)};
        float *g[2] = {nl_alloc_floats(m->nreduce), nl_alloc_floats(m->nreduce)};
        struct nl_exec *x = NULL;
        struct nl_prep *p = NULL;
        int layers = -1;
        if (!in || !dl || !y[0] || !y[1] || !g[0] || !g[1] || nl_exec_new(&x, m, n, &err) < 0 ||
            nl_prep_new(&p, m, m->params, 1, &err) < 0) {
            ok(0, "%s: executor and prepared weights: %s", what, err.msg);
            goto next;
        }
        nl_prep_floats(p, &layers);
        is_int(layers, 2, "%s: the two frozen Winograd layers have prepared weights", what);
        fill(in, (size_t)n * in_size, -1.0f, 1.0f);
        fill(dl, (size_t)n * k, -1.0f, 1.0f);
        for (int training = 1; training >= 0; training--) {
            for (int e = 0; e < 2; e++) {
                nl_exec_use_prep(x, e ? p : NULL);
                memcpy(y[e], nl_exec_forward(x, m->params, in, n, training, &rng),
                       (size_t)n * k * sizeof(float));
                memset(g[e], 0, m->nreduce * sizeof(float));
                if (training)
                    nl_exec_backward(x, m->params, dl, g[e]);
            }
            ok(memcmp(y[0], y[1], (size_t)n * k * sizeof(float)) == 0,
               "%s, %s: the logits with the frozen layers' weights prepared are those without",
               what, training ? "training" : "evaluation");
            if (training)
                ok(memcmp(g[0], g[1], m->nreduce * sizeof(float)) == 0,
                   "%s: so is the gradient, bit for bit", what);
        }
        /* every layer's prepared, then a trainable one's weights stepped: training reads only
         * the frozen layers' */
        nl_prep_free(p);
        p = NULL;
        if (nl_prep_new(&p, m, m->params, 0, &err) < 0) {
            ok(0, "%s: every layer's prepared weights: %s", what, err.msg);
            goto next;
        }
        const struct nl_layer *t = &m->layers[nl_model_find_layer(m, "s3c2")];
        for (size_t j = 0; j < t->params[0].count; j++)
            m->params[t->param_offset + j] *= 0.75f;
        for (int e = 0; e < 2; e++) {
            nl_exec_use_prep(x, e ? p : NULL);
            memcpy(y[e], nl_exec_forward(x, m->params, in, n, 1, &rng),
                   (size_t)n * k * sizeof(float));
        }
        ok(memcmp(y[0], y[1], (size_t)n * k * sizeof(float)) == 0,
           "%s: training reads no prepared weights of a layer that trains", what);
    next:
        nl_prep_free(p);
        nl_exec_free(x);
        nl_free(in);
        nl_free(dl);
        for (int e = 0; e < 2; e++) {
            nl_free(y[e]);
            nl_free(g[e]);
        }
        nl_model_free(m);
        nl_spec_free(spec);
    }
}

/* Inference on few tiles (conv.c's WINO_DIRECT): a Winograd layer whose u is large for the
 * call's tiles (512 channels on 7x7, 4 tiles an image) runs SAMPLE's forward from the weights at
 * one image and SHARD's at two, bit for bit, into NaNs; in training, and at 8 images, Winograd's
 * own (other floats, close to them). */
static void test_wino_direct(void)
{
    const struct nl_shape in = {512, 7, 7};
    struct harness wino = {
        .l = {.filters = 512, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1, .in = {in}}};
    harness_make(&wino, "conv", 8);
    if (wino.l.lower != NL_LOWER_WINOGRAD) {
        diag("conv 512 3x3 on 7x7 takes %s here, not Winograd: nothing to compare",
             nl_lowering_name(wino.l.lower));
        harness_free(&wino);
        return;
    }
    const int counts[] = {1, 2, 8};
    const enum nl_lowering twins[] = {NL_LOWER_SAMPLE, NL_LOWER_SHARD, NL_LOWER_SHARD};
    for (int c = 0; c < 3; c++) {
        const int n = counts[c];
        struct harness gemm = {.l = {.lowering = twins[c],
                                     .filters = 512,
                                     .kh = 3,
                                     .kw = 3,
                                     .sh = 1,
                                     .sw = 1,
                                     .ph = 1,
                                     .pw = 1,
                                     .in = {in}}};
        harness_make(&gemm, "conv", n);
        memcpy(gemm.in, wino.in, gemm.in_count * sizeof *gemm.in);
        memcpy(gemm.w, wino.w, gemm.l.param_count * sizeof *gemm.w);
        wino.n = n;
        wino.out_count = gemm.out_count;
        forward(&gemm);
        for (int training = 0; training <= 1; training++) {
            wino.training = training;
            forward(&wino);
            const int same = memcmp(wino.out, gemm.out, gemm.out_count * sizeof *gemm.out) == 0;
            double worst = 0.0;
            for (size_t i = 0; i < gemm.out_count; i++) {
                const double d = fabs((double)wino.out[i] - gemm.out[i]);
                worst = d > worst || isnan(d) ? d : worst;
            }
            if (!training && n < 8)
                ok(same, "conv 512 3x3 on 7x7, %d image(s), inference: %s's floats", n,
                   nl_lowering_name(twins[c]));
            else
                ok(!same && worst < 1e-2,
                   "conv 512 3x3 on 7x7, %d images, %s: Winograd's (%g from %s's)", n,
                   training ? "training" : "inference", worst, nl_lowering_name(twins[c]));
        }
        harness_free(&gemm);
    }
    ok(nl_conv_forward_lowering(&wino.l, 1, 0) == NL_LOWER_SAMPLE &&
           nl_conv_forward_lowering(&wino.l, 2, 0) == NL_LOWER_SHARD &&
           nl_conv_forward_lowering(&wino.l, 8, 0) == NL_LOWER_WINOGRAD &&
           nl_conv_forward_lowering(&wino.l, 1, 1) == NL_LOWER_WINOGRAD,
       "conv 512 3x3 on 7x7: nl_conv_forward_lowering names what 1, 2 and 8 images run, and "
       "training");
    wino.n = 8;
    harness_free(&wino);
}

/* Max pooling's part of a split call (one image: channels [c0, c1) of nl_block_range(C, 1, ...))
 * writes the whole call's outputs and argmax offsets over those channels, the offsets counted
 * from the image's start: ResNet-18's 3x3 stride-2 window with padding and lenet's 2x2, in 2 and
 * 3 parts, each part into outputs and offsets that hold NaNs and -1 elsewhere. */
static void test_pool_split(void)
{
    static const struct {
        struct nl_shape in;
        int k, s, p;
    } cases[] = {{{64, 20, 20}, 3, 2, 1}, {{20, 24, 24}, 2, 2, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct harness h = {.l = square_window(cases[c].k, cases[c].s, cases[c].p, cases[c].in)};
        harness_make(&h, "maxpool", 1);
        float *out = floats(h.out_count);
        int32_t *arg = malloc(h.out_count * sizeof *arg), *want = malloc(h.out_count * sizeof *arg);
        forward(&h);
        memcpy(want, h.aux, h.out_count * sizeof *want);
        for (int parts = 2; want && arg && parts <= 3; parts++) {
            int same = 1;
            for (int part = 0; part < parts; part++) {
                size_t c0, c1;
                const size_t plane = (size_t)h.l.out.h * h.l.out.w;
                nl_block_range((size_t)h.l.out.c, 1, part, parts, &c0, &c1);
                fill_value(out, h.out_count, NAN);
                memset(arg, 0xff, h.out_count * sizeof *arg);
                struct nl_fwd f = {
                    .n = 1, .in = {h.in}, .out = out, .aux = arg, .part = part, .parts = parts};
                h.l.ops->forward(&h.l, &f);
                for (size_t i = 0; i < h.out_count; i++) {
                    const int mine = i >= c0 * plane && i < c1 * plane;
                    same &= mine ? memcmp(&out[i], &h.out[i], sizeof *out) == 0 && arg[i] == want[i]
                                 : isnan(out[i]) && arg[i] == -1;
                }
            }
            ok(same,
               "maxpool %dx%d stride %d on %dx%dx%d, one image in %d parts: each part's "
               "channels and argmax offsets, as the whole call's",
               cases[c].k, cases[c].k, cases[c].s, cases[c].in.c, cases[c].in.h, cases[c].in.w,
               parts);
        }
        free(out);
        free(arg);
        free(want);
        harness_free(&h);
    }
}

/* SAMPLE's forward by bands of output rows (conv.c's band_rows: an image's columns past 512 KiB
 * and a plane of at least twice as many pixels as filters) gives the floats of the whole
 * image's columns and one product: each image's im2col and nl_sgemm from the bias, here,
 * compared bit for bit. A 7x7 stride-2 stem (2 bands of 27 and 5 rows), 3x3 on 64 channels (8
 * bands of 5 rows) and 3x3 stride 2 (the phase planes' layer), 1 and 2 images, in training
 * and inference. */
static void test_bands(void)
{
    static const struct {
        struct nl_shape in;
        int filters, k, s, p;
        enum nl_lowering lower;
    } cases[] = {
        {{3, 64, 64}, 16, 7, 2, 3, NL_LOWER_SAMPLE},
        {{64, 40, 40}, 32, 3, 1, 1, NL_LOWER_SAMPLE},
        {{64, 56, 56}, 96, 3, 2, 1, NL_LOWER_PHASES},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int n = 1; n <= 2; n++) {
            struct harness h = {.l =
                                    square_window(cases[c].k, cases[c].s, cases[c].p, cases[c].in)};
            h.l.lowering = cases[c].lower;
            h.l.filters = cases[c].filters;
            harness_make(&h, "conv", n);
            const struct nl_shape *o = &h.l.out;
            const int f = o->c, p = o->h * o->w, k = cases[c].in.c * cases[c].k * cases[c].k;
            const size_t out_size = (size_t)f * p, in_size = nl_shape_size(cases[c].in);
            float *cols = nl_alloc_floats((size_t)k * p), *want = nl_alloc_floats(h.out_count);
            const float *bias = h.w + h.l.params[1].offset;
            for (int s = 0; cols && want && s < n; s++) {
                float *w_s = want + (size_t)s * out_size;
                nl_im2col(cols, h.in + (size_t)s * in_size, cases[c].in.c, cases[c].in.h,
                          cases[c].in.w, cases[c].k, cases[c].k, cases[c].s, cases[c].s, cases[c].p,
                          cases[c].p, o->h, o->w);
                for (int fo = 0; fo < f; fo++)
                    for (int i = 0; i < p; i++)
                        w_s[(size_t)fo * p + i] = bias[fo];
                nl_sgemm(0, 0, f, p, k, 1.0f, h.w, k, cols, p, 1.0f, w_s, p);
            }
            for (int training = 0; cols && want && training <= 1; training++) {
                h.training = training;
                forward(&h);
                ok(memcmp(h.out, want, h.out_count * sizeof *want) == 0,
                   "conv %d %dx%d stride %d on %dx%dx%d (%s), %d image(s)%s: by bands, the floats "
                   "of one product",
                   f, cases[c].k, cases[c].k, cases[c].s, cases[c].in.c, cases[c].in.h,
                   cases[c].in.w, nl_lowering_name(h.l.lower), n, training ? ", training" : "");
            }
            nl_free(cols);
            nl_free(want);
            harness_free(&h);
        }
}

/* ---- one sample split between threads (nl_exec_forward_split) ----
 *
 * A forward-only executor split in 2 and 3 parts, on a pool of as many threads, gives the
 * logits of nl_exec_forward on the same sample bit for bit, with and without prepared weights:
 * ResNet-18 at 3x64x64 (Winograd, the phase planes, one product a shard), resnet8, lenet,
 * mobilenet-tiny (grouped convolutions, which run whole on part 0) and 512 channels on 7x7
 * (Winograd's layer run as SAMPLE for so few tiles), on 512 and 256 input channels (the latter's
 * first layer a third of whose filters alone would stay Winograd). */
struct split_run {
    struct nl_exec *x;
    const float *params, *in;
    float *got;
    size_t k;
    struct nl_pool *pool;
};

static void split_thread(void *arg, int t, int count)
{
    struct split_run *r = arg;
    const float *logits = nl_exec_forward_split(r->x, r->params, r->in, 1, r->pool, t, count);
    if (t == 0)
        memcpy(r->got, logits, r->k * sizeof *logits);
}

static void test_split(void)
{
    static const char wide7[] = "c1: conv 512 3x3 pad=1\n"
                                "b1: batchnorm\n"
                                "r1: relu\n"
                                "c2: conv 512 3x3 pad=1 bias=no\n"
                                "pool: globalavgpool\n"
                                "fc: dense N\n";
    static const struct {
        const char *name; /* shipped model, or "wide7" */
        struct nl_shape in;
    } cases[] = {
        {"resnet18", {3, 64, 64}},       {"resnet8", {1, 28, 28}}, {"lenet", {1, 28, 28}},
        {"mobilenet-tiny", {1, 28, 28}}, {"wide7", {512, 7, 7}},   {"wide7", {256, 7, 7}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct nl_error err = {0};
        struct nl_spec *spec = NULL;
        const char *name = cases[c].name;
        struct nl_model *m =
            build_perturbed(name, strcmp(name, "wide7") == 0 ? wide7 : NULL, cases[c].in, 5, &spec);
        if (!m) {
            nl_spec_free(spec);
            continue;
        }
        const size_t in_size = nl_shape_size(m->input), k = (size_t)m->nclasses;
        float *in = nl_alloc_floats(in_size), *want = nl_alloc_floats(k), *got = nl_alloc_floats(k);
        struct nl_exec *fx = NULL, *sx = NULL;
        struct nl_prep *p = NULL;
        if (!in || !want || !got || nl_exec_new_forward(&fx, m, 1, &err) < 0 ||
            nl_exec_new_forward(&sx, m, 1, &err) < 0 ||
            nl_prep_new(&p, m, m->params, 0, &err) < 0) {
            ok(0, "%s: executors: %s", name, err.msg);
            goto next;
        }
        if (c == 0) {
            struct nl_exec *tx = NULL;
            struct nl_error e1 = {0}, e2 = {0};
            ok(nl_exec_new(&tx, m, 1, &err) == 0 && nl_exec_split(tx, 2, &e1) == NL_EINVAL &&
                   strstr(e1.msg, "forward-only") && nl_exec_split(fx, 0, &e2) == NL_EINVAL &&
                   strstr(e2.msg, "at least 1"),
               "nl_exec_split: a training executor and 0 parts fail, saying why (%s; %s)", e1.msg,
               e2.msg);
            nl_exec_free(tx);
        }
        fill(in, in_size, -1.0f, 1.0f);
        memcpy(want, nl_exec_forward(fx, m->params, in, 1, 0, &rng), k * sizeof *want);
        for (int parts = 2; parts <= 3; parts++)
            for (int prep = 0; prep <= 1; prep++) {
                struct split_run r = {.x = sx, .params = m->params, .in = in, .got = got, .k = k};
                fill_value(got, k, NAN);
                nl_exec_use_prep(sx, prep ? p : NULL);
                if (nl_exec_split(sx, parts, &err) < 0 || nl_pool_new(&r.pool, parts, &err) < 0) {
                    ok(0, "%s: %d parts: %s", name, parts, err.msg);
                    continue;
                }
                nl_pool_run(r.pool, split_thread, &r);
                nl_pool_free(r.pool);
                ok(memcmp(want, got, k * sizeof *got) == 0,
                   "%s, one sample split in %d parts%s: the logits of one thread, bit for bit",
                   name, parts, prep ? ", prepared weights" : "");
            }
        {
            /* nl_infer: two threads where the model is large enough, else one */
            struct nl_infer *run = NULL;
            const int big = nl_model_infer_flops(m) >= NL_SPLIT_FLOPS;
            nl_exec_use_prep(sx, p);
            if (nl_infer_new(&run, sx, m, 2, &err) < 0) {
                ok(0, "%s: nl_infer_new: %s", name, err.msg);
            } else {
                fill_value(got, k, NAN);
                memcpy(got, nl_infer_forward(run, m->params, in, 1), k * sizeof *got);
                ok(nl_infer_threads(run) == (big ? 2 : 1) &&
                       memcmp(want, got, k * sizeof *got) == 0,
                   "%s, nl_infer on %d thread(s) (%.0f MFLOP a sample): the same logits", name,
                   nl_infer_threads(run), nl_model_infer_flops(m) / 1e6);
            }
            nl_infer_free(run);
        }
        {
            struct split_run r = {.x = sx, .params = m->params, .in = in, .got = got, .k = k};
            nl_exec_use_prep(sx, NULL);
            ok(nl_exec_split(sx, 1, &err) == 0 && nl_pool_new(&r.pool, 1, &err) == 0,
               "%s: split in one part again", name);
            fill_value(got, k, NAN);
            nl_pool_run(r.pool, split_thread, &r);
            nl_pool_free(r.pool);
            ok(memcmp(want, got, k * sizeof *got) == 0, "%s, in one part: the same logits", name);
        }
    next:
        nl_prep_free(p);
        nl_exec_free(fx);
        nl_exec_free(sx);
        nl_free(in);
        nl_free(want);
        nl_free(got);
        nl_model_free(m);
        nl_spec_free(spec);
    }
}

int main(void)
{
    nl_kernels_init();
    nl_rng_seed(&rng, 7);

    test_kinds();
    test_shapes();
    test_errors();
    test_pool_semantics();
    test_dense_forms();
    test_relu6_values();
    test_gradients();
    test_loss();
    test_dropout();
    test_winograd_scratch();
    test_overwrite();
    test_folding();
    test_fusion();
    test_fusion_frozen();
    /* Planes 8 wide, whose rows pair up across channels into runs of 16 (lenet's pool2, 50x8x8;
     * a last vector of 4, 8 and 12 outputs; one output row). */
    static const struct nl_shape w8[] = {{50, 8, 8}, {3, 6, 8}, {1, 4, 8}, {5, 6, 8}, {1, 2, 8}};
    maxpool_twins(w8, sizeof w8 / sizeof w8[0], "planes 8 wide");
    /* Rows of at most 16 outputs, even heights, a vector a row with the masks made once (lenet's
     * pool1, 20x24x24; 9 wide, the last column left out; 16 and 15 outputs a row). */
    static const struct nl_shape rows16[] = {{20, 24, 24}, {3, 6, 9}, {2, 4, 32}, {2, 2, 31}};
    maxpool_twins(rows16, sizeof rows16 / sizeof rows16[0], "rows of at most 16 outputs");
    test_overwrite_sample();
    test_prep();
    test_prep_frozen();
    test_wino_direct();
    test_pool_split();
    test_bands();
    test_split();
    ok(!allocated_in_steps, "no forward or backward allocated memory");
    ok(!scratch_overrun, "no forward or backward wrote past the scratch nl_layer_scratch asks for");
    return done_testing();
}
