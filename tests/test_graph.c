/* Graph models and the layers that came with them: a gradient check of leakyrelu, gelu,
 * softmax, add, concat, globalavgpool, batchnorm and gconv (every input, every weight); gconv
 * against conv; batchnorm's running statistics (exact for the global batch, the same on 1 or 2
 * threads); a residual block with batchnorm checked whole against finite differences; freezing
 * (layout, kept values, cheaper backward, frozen weights bit-identical after training); gradient
 * clipping; and PyTorch-named batchnorm tensors in safetensors files.
 *
 * The layer check is test_layers.c's: L = sum(out * r), central differences with H = 1e-2 in
 * float, |a - n| / max(|a|, |n|, 0.1) <= 1e-2. Inputs of leakyrelu are a grid with no value
 * within H of 0. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/kernels.h"
#include "nnlab/model.h"
#include "nnlab/safetensors.h"
#include "nnlab/spec.h"
#include "nnlab/trainer.h"
#include "tap.h"
#include "test_util.h"

#define H     1e-2
#define FLOOR 0.1
#define BOUND 1e-2

/* ---- one layer with several inputs ---- */

struct harness {
    struct nl_layer l;
    int n, training;
    size_t in_count[NL_MAX_INPUTS], out_count, scratch_count, wcheck;
    float *in[NL_MAX_INPUTS], *din[NL_MAX_INPUTS], *w, *dw, *out, *r, *scratch;
    void *aux;
};

static void make(struct harness *h, const char *kind, int n, int ninputs)
{
    struct nl_error err = {0};
    h->l.ops = nl_layer_kind(kind);
    snprintf(h->l.name, sizeof h->l.name, "%s1", kind);
    h->l.ninputs = ninputs;
    if (!h->l.ops || h->l.ops->setup(&h->l, &err) != 0) {
        diag("setup of %s failed: %s", kind, err.msg);
        exit(1);
    }
    h->n = n;
    for (int j = 0; j < ninputs; j++) {
        h->in_count[j] = (size_t)n * nl_shape_size(h->l.in[j]);
        h->in[j] = floats(h->in_count[j]);
        h->din[j] = floats(h->in_count[j]);
        fill(h->in[j], h->in_count[j], -1, 1);
    }
    h->out_count = (size_t)n * nl_shape_size(h->l.out);
    h->scratch_count = h->l.scratch_fixed + (size_t)n * h->l.scratch_per_sample;
    h->out = floats(h->out_count);
    h->r = floats(h->out_count);
    h->w = floats(h->l.param_count);
    h->dw = floats(h->l.param_count);
    h->scratch = floats(h->scratch_count);
    h->aux = calloc((size_t)n * h->l.aux_bytes + 1, 1);
    fill(h->w, h->l.param_count, -1, 1);
    fill(h->r, h->out_count, -1, 1);
    for (int k = 0; k < h->l.nparams; k++) /* a variance is positive */
        if (strcmp(h->l.params[k].name, "running_var") == 0)
            fill(h->w + h->l.params[k].offset, h->l.params[k].count, 0.5f, 2.0f);
    /* Statistics are not differentiated: check only the parameters before them. */
    h->wcheck = 0;
    for (int k = 0; k < h->l.nparams; k++)
        if (!h->l.params[k].stat)
            h->wcheck += h->l.params[k].count;
}

static void unmake(struct harness *h)
{
    for (int j = 0; j < h->l.ninputs; j++) {
        free(h->in[j]);
        free(h->din[j]);
    }
    free(h->out);
    free(h->r);
    free(h->w);
    free(h->dw);
    free(h->scratch);
    free(h->aux);
}

static double loss_of(struct harness *h)
{
    struct nl_fwd f = {.n = h->n,
                       .out = h->out,
                       .w = h->w,
                       .aux = h->aux,
                       .scratch = h->scratch,
                       .training = h->training,
                       .rng = &rng};
    for (int j = 0; j < h->l.ninputs; j++)
        f.in[j] = h->in[j];
    h->l.ops->forward(&h->l, &f);
    double sum = 0.0;
    for (size_t i = 0; i < h->out_count; i++)
        sum += (double)h->out[i] * h->r[i];
    return sum;
}

static void backward(struct harness *h, int with_din, float *dw)
{
    struct nl_bwd b = {.n = h->n,
                       .out = h->out,
                       .dout = h->r,
                       .w = h->w,
                       .dw = dw,
                       .aux = h->aux,
                       .scratch = h->scratch};
    for (int j = 0; j < h->l.ninputs; j++) {
        b.in[j] = h->in[j];
        b.din[j] = with_din ? h->din[j] : NULL;
    }
    h->l.ops->backward(&h->l, &b);
}

static double worst_fd(struct harness *h, float *x, const float *grad, size_t count)
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
        double numeric = (lp - lm) / ((double)xp - (double)xm);
        double e = fabs(grad[i] - numeric) / fmax(fmax(fabs(grad[i]), fabs(numeric)), FLOOR);
        if (isnan(e) || e > worst)
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

static void gradcheck(struct harness *h, const char *what)
{
    loss_of(h);
    for (int j = 0; j < h->l.ninputs; j++)
        memset(h->din[j], 0, h->in_count[j] * sizeof(float));
    memset(h->dw, 0, h->l.param_count * sizeof(float));
    backward(h, 1, h->dw);
    for (int j = 0; j < h->l.ninputs; j++) {
        float *g = floats(h->in_count[j]);
        memcpy(g, h->din[j], h->in_count[j] * sizeof(float));
        double e = worst_fd(h, h->in[j], g, h->in_count[j]);
        ok(e <= BOUND, "%s: input %d gradient (%zu values), max relative error %.2g", what, j,
           h->in_count[j], e);
        free(g);
    }
    if (h->wcheck > 0) {
        float *g = floats(h->l.param_count);
        memcpy(g, h->dw, h->l.param_count * sizeof(float));
        double e = worst_fd(h, h->w, g, h->wcheck);
        ok(e <= BOUND, "%s: weight gradient (%zu values), max relative error %.2g", what, h->wcheck,
           e);
        /* dw NULL (frozen) leaves the input gradients as they were. */
        loss_of(h);
        float *din0 = floats(h->in_count[0]);
        memcpy(din0, h->din[0], h->in_count[0] * sizeof(float));
        memset(h->din[0], 0, h->in_count[0] * sizeof(float));
        backward(h, 1, NULL);
        double diff = 0.0;
        for (size_t i = 0; i < h->in_count[0]; i++)
            diff = fmax(diff, fabs(h->din[0][i] - din0[i]));
        ok(diff < 1e-5, "%s: the same input gradient without dw (max diff %.2g)", what, diff);
        free(din0);
        free(g);
    }
}

static void check_kind(const char *kind, struct nl_layer conf, int n, int ninputs, const char *what)
{
    struct harness h = {.l = conf};
    make(&h, kind, n, ninputs);
    if (strcmp(kind, "leakyrelu") == 0)
        for (size_t i = 0; i < h.in_count[0]; i++)
            h.in[0][i] = (h.in[0][i] >= 0 ? 0.03f : -0.03f) + h.in[0][i];
    h.training = strstr(what, "training") != NULL;
    gradcheck(&h, what);
    unmake(&h);
}

static void test_layer_gradients(void)
{
    const struct nl_shape s = {3, 4, 5};

    check_kind("leakyrelu", (struct nl_layer){.slope = 0.1f, .in = {s}}, 2, 1, "leakyrelu 0.1");
    check_kind("gelu", (struct nl_layer){.in = {s}}, 2, 1, "gelu");
    check_kind("softmax", (struct nl_layer){.in = {{7, 1, 1}}}, 3, 1, "softmax on vectors");
    check_kind("softmax", (struct nl_layer){.in = {s}}, 2, 1, "softmax over channels");
    check_kind("add", (struct nl_layer){.in = {s, s}}, 2, 2, "add of 2");
    check_kind("add", (struct nl_layer){.in = {s, s, s}}, 2, 3, "add of 3");
    check_kind("concat", (struct nl_layer){.in = {{2, 3, 3}, {3, 3, 3}, {1, 3, 3}}}, 2, 3,
               "concat of 3");
    check_kind("globalavgpool", (struct nl_layer){.in = {s}}, 2, 1, "globalavgpool");
    check_kind("batchnorm", (struct nl_layer){.in = {s}}, 3, 1, "batchnorm2d training");
    check_kind("batchnorm", (struct nl_layer){.in = {{6, 1, 1}}}, 4, 1, "batchnorm1d training");
    check_kind("batchnorm", (struct nl_layer){.in = {s}}, 2, 1, "batchnorm2d eval");
    check_kind(
        "gconv",
        (struct nl_layer){
            .filters = 4, .kh = 3, .kw = 3, .ph = 1, .pw = 1, .groups = 2, .in = {{4, 5, 6}}},
        2, 1, "gconv 4 3x3 groups=2 pad 1");
    check_kind("gconv",
               (struct nl_layer){.filters = 6,
                                 .kh = 3,
                                 .kw = 3,
                                 .sh = 2,
                                 .sw = 2,
                                 .ph = 1,
                                 .pw = 1,
                                 .groups = 3,
                                 .no_bias = 1,
                                 .in = {{3, 7, 7}}},
               2, 1, "depthwise gconv 6 3x3 groups=3 stride 2, no bias");
    check_kind(
        "gconv",
        (struct nl_layer){
            .filters = 4, .kh = 3, .kw = 3, .ph = 1, .pw = 1, .groups = 4, .in = {{4, 5, 5}}},
        2, 1, "depthwise gconv 4 3x3 groups=4 pad 1, bias");
}

/* gconv with one group computes what conv computes. */
static void test_gconv_is_conv(void)
{
    struct nl_layer base = {
        .filters = 5, .kh = 3, .kw = 2, .sh = 2, .sw = 1, .ph = 1, .pw = 0, .in = {{3, 6, 7}}};
    struct harness a = {.l = base}, b = {.l = base};
    make(&a, "conv", 2, 1);
    make(&b, "gconv", 2, 1);
    memcpy(b.w, a.w, a.l.param_count * sizeof(float));
    memcpy(b.in[0], a.in[0], a.in_count[0] * sizeof(float));
    loss_of(&a);
    loss_of(&b);
    double diff = 0.0;
    for (size_t i = 0; i < a.out_count; i++)
        diff = fmax(diff, fabs(a.out[i] - b.out[i]));
    ok(a.l.param_count == b.l.param_count && diff < 1e-5,
       "gconv groups=1 equals conv (max diff %.2g)", diff);
    unmake(&a);
    unmake(&b);
}

/* PyTorch's grouped layout: weight [F, C/G, kh, kw], filter f sees the channels of group
 * f / (F/G). With C = 4, F = 2, G = 2 and 1x1 windows: out0 = w0 x0 + w1 x1 (+ b0), out1 = w2 x2
 * + w3 x3 (+ b1). */
static void test_gconv_layout(void)
{
    struct harness h = {.l = {.filters = 2, .kh = 1, .kw = 1, .groups = 2, .in = {{4, 1, 1}}}};
    make(&h, "gconv", 1, 1);
    const float w[] = {1, 2, 3, 4, 0.5f, -0.5f}, x[] = {10, 20, 30, 40};
    memcpy(h.w, w, sizeof w);
    memcpy(h.in[0], x, sizeof x);
    loss_of(&h);
    is_float(h.out[0], 10 + 40 + 0.5, 1e-5, "gconv filter 0 reads channels 0 and 1");
    is_float(h.out[1], 90 + 160 - 0.5, 1e-5, "gconv filter 1 reads channels 2 and 3");
    unmake(&h);
}

/* A grouped convolution is a convolution whose weight is zero outside the diagonal blocks:
 * compares gconv (the depthwise loops and the per-group GEMMs) with conv on such a weight, in
 * output, input gradient and weight gradient. */
static void gconv_vs_block_diagonal(int c, int f, int groups, const char *what)
{
    struct nl_layer base = {
        .filters = f, .kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .in = {{c, 7, 6}}};
    struct harness a = {.l = base}, b = {.l = base};
    const int cg = c / groups, fg = f / groups;
    b.l.groups = groups;
    make(&a, "conv", 2, 1);
    make(&b, "gconv", 2, 1);
    memcpy(a.in[0], b.in[0], b.in_count[0] * sizeof(float));
    memcpy(a.r, b.r, b.out_count * sizeof(float));
    memset(a.w, 0, a.l.param_count * sizeof(float));
    for (int fo = 0; fo < f; fo++)
        for (int k = 0; k < cg; k++)
            memcpy(a.w + ((size_t)fo * c + (size_t)(fo / fg) * cg + k) * 9,
                   b.w + ((size_t)fo * cg + k) * 9, 9 * sizeof(float));
    memcpy(a.w + a.l.params[1].offset, b.w + b.l.params[1].offset, (size_t)f * sizeof(float));
    loss_of(&a);
    loss_of(&b);
    double dout = 0.0, din = 0.0, dw = 0.0;
    for (size_t i = 0; i < a.out_count; i++)
        dout = fmax(dout, fabs(a.out[i] - b.out[i]));
    memset(a.din[0], 0, a.in_count[0] * sizeof(float));
    memset(b.din[0], 0, b.in_count[0] * sizeof(float));
    memset(a.dw, 0, a.l.param_count * sizeof(float));
    memset(b.dw, 0, b.l.param_count * sizeof(float));
    backward(&a, 1, a.dw);
    backward(&b, 1, b.dw);
    for (size_t i = 0; i < a.in_count[0]; i++)
        din = fmax(din, fabs(a.din[0][i] - b.din[0][i]));
    for (int fo = 0; fo < f; fo++) {
        for (int k = 0; k < cg; k++)
            for (int j = 0; j < 9; j++)
                dw = fmax(dw, fabs(a.dw[((size_t)fo * c + (size_t)(fo / fg) * cg + k) * 9 + j] -
                                   b.dw[((size_t)fo * cg + k) * 9 + j]));
        dw = fmax(dw, fabs(a.dw[a.l.params[1].offset + fo] - b.dw[b.l.params[1].offset + fo]));
    }
    ok(dout < 1e-5 && din < 1e-5 && dw < 1e-4,
       "%s equals conv with block-diagonal weights (max diffs %.2g, %.2g, %.2g)", what, dout, din,
       dw);
    unmake(&a);
    unmake(&b);
}

/* ---- models ---- */

/* A residual block with batchnorm, a concatenated branch and a grouped convolution. Smooth
 * activations only: batchnorm couples every value of a channel, so a perturbation of an early
 * weight moves all of them and some would cross a leakyrelu's kink. */
static const char residual_spec[] = "c1: conv 4 3x3 pad=1\n"
                                    "b1: batchnorm\n"
                                    "r1: gelu\n"
                                    "c2: conv 4 3x3 pad=1 groups=2\n"
                                    "b2: batchnorm\n"
                                    "sum: add in=b2,r1\n"
                                    "g: gelu\n"
                                    "side: conv 2 1x1 in=r1\n"
                                    "cat: concat in=g,side\n"
                                    "pool: globalavgpool\n"
                                    "fc: dense N\n";

static void test_residual_gradient(void)
{
    const struct nl_shape in = {2, 5, 5};
    const int n = 3, k = 4;
    struct nl_model *m = build(residual_spec, in, k);
    struct nl_exec *x = NULL;
    struct nl_error err = {0};

    ok(m != NULL, "a residual model with batchnorm, gconv and concat builds");
    if (!m)
        return;
    nl_model_init_params(m, 3);
    ok(m->ntrainable < m->nreduce && m->nreduce == m->nparams,
       "statistics lie after the trainable range (%zu < %zu = %zu)", m->ntrainable, m->nreduce,
       m->nparams);
    is_int(nl_exec_new(&x, m, n, &err), 0, "executor");
    float *input = nl_alloc_floats((size_t)n * nl_shape_size(in));
    float *r = nl_alloc_floats((size_t)n * k);
    float *grad = nl_alloc_floats(m->nparams);
    fill(input, (size_t)n * nl_shape_size(in), -1, 1);
    fill(r, (size_t)n * k, -0.5f, 0.5f);
    nl_exec_forward(x, m->params, input, n, 1, &rng);
    nl_exec_backward(x, m->params, r, grad);

    const float h = 1e-2f;
    double worst = 0.0;
    int checked = 0;
    for (size_t i = 0; i < m->ntrainable; i++) {
        float saved = m->params[i];
        m->params[i] = saved + h;
        double up = logits_dot(x, m->params, input, n, r, k, 1, &rng);
        m->params[i] = saved - h;
        double down = logits_dot(x, m->params, input, n, r, k, 1, &rng);
        m->params[i] = saved;
        double numeric = (up - down) / (2.0 * h);
        double rel = fabs(grad[i] - numeric) / fmax(fabs(grad[i]) + fabs(numeric), 1e-2);
        if (rel > worst)
            worst = rel;
        if (rel > 2e-2)
            diag("param %zu: analytic %.6g numeric %.6g", i, grad[i], numeric);
        checked++;
    }
    ok(worst < 2e-2,
       "whole residual model: %d parameter gradients match finite differences "
       "(worst relative %.2g)",
       checked, worst);
    int layers;
    size_t wf;
    nl_exec_backward_cost(x, &layers, &wf);
    is_int(layers, m->nlayers, "backward runs every layer of the unfrozen model");

    /* A forward-only executor computes the same logits, bit for bit, and no backward. */
    struct nl_exec *fx = NULL;
    is_int(nl_exec_new_forward(&fx, m, n, &err), 0, "forward-only executor");
    const float *a = nl_exec_forward(x, m->params, input, n, 0, &rng);
    float *want = nl_alloc_floats((size_t)n * k);
    memcpy(want, a, (size_t)n * k * sizeof *want);
    const float *b = nl_exec_forward(fx, m->params, input, n, 0, &rng);
    ok(memcmp(want, b, (size_t)n * k * sizeof *want) == 0,
       "forward-only executor: the same logits in evaluation");
    nl_exec_backward_cost(fx, &layers, &wf);
    ok(layers == 0 && wf == 0, "forward-only executor: no backward layer (%d)", layers);
    nl_free(want);
    nl_exec_free(fx);
    nl_free(input);
    nl_free(r);
    nl_free(grad);
    nl_exec_free(x);
    nl_model_free(m);
}

/* ---- freezing ---- */

static const char small_spec[] = "conv1: conv 4 3x3 pad=1\n"
                                 "bn1: batchnorm\n"
                                 "relu\n"
                                 "pool1: maxpool 2\n"
                                 "conv2: conv 6 3x3\n"
                                 "relu\n"
                                 "fc1: dense 12\n"
                                 "relu\n"
                                 "fc2: dense N\n";

/* A value of each tensor, by name, to compare layouts. */
static float tensor_value(const struct nl_model *m, const char *layer, int param, size_t at)
{
    int i = nl_model_find_layer(m, layer);
    const struct nl_layer *l = &m->layers[i];
    return m->params[l->param_offset + l->params[param].offset + at];
}

static void test_freeze_layout(void)
{
    const struct nl_shape in = {1, 8, 8};
    struct nl_model *m = build(small_spec, in, 3), *ref = build(small_spec, in, 3);
    struct nl_error err = {0};
    const char *names[] = {"conv2"};
    int layers_full, layers_frozen;
    size_t wf_full, wf_frozen;
    struct nl_exec *x;

    nl_model_init_params(m, 5);
    nl_model_init_params(ref, 5);
    nl_exec_new(&x, m, 2, &err);
    nl_exec_backward_cost(x, &layers_full, &wf_full);
    nl_exec_free(x);

    is_int(nl_model_freeze(m, names, 1, "bn1", &err), 0, "freeze conv2 and up to bn1");
    ok(m->layers[0].frozen && m->layers[1].frozen && !m->layers[2].frozen && m->layers[4].frozen &&
           !m->layers[6].frozen,
       "the flags follow --freeze and --freeze-up-to");
    is_int((long long)nl_model_count_trainable(m), 12 * 24 + 12 + 3 * 12 + 3,
           "only fc1 and fc2 are trainable");
    ok(m->ntrainable == m->nreduce && m->nreduce < m->nparams,
       "frozen blocks (and frozen batchnorm statistics) lie after the trainable range");
    int same = 1;
    const char *check[] = {"conv1", "bn1", "conv2", "fc1", "fc2"};
    for (int c = 0; c < 5; c++) {
        int i = nl_model_find_layer(m, check[c]);
        for (int k = 0; k < m->layers[i].nparams; k++)
            for (size_t a = 0; a < m->layers[i].params[k].count; a++)
                same &= tensor_value(m, check[c], k, a) == tensor_value(ref, check[c], k, a);
    }
    ok(same, "every tensor keeps its values through the new layout");
    nl_exec_new(&x, m, 2, &err);
    nl_exec_backward_cost(x, &layers_frozen, &wf_frozen);
    nl_exec_free(x);
    ok(layers_frozen < layers_full && wf_frozen < wf_full,
       "backward runs %d of %d layers and computes %zu of %zu weight gradients", layers_frozen,
       layers_full, wf_frozen, wf_full);
    is_int(nl_model_freeze(m, (const char *[]){"nope"}, 1, NULL, &err), NL_EINVAL,
           "an unknown layer is refused");
    like(err.msg, "nope", "naming it");

    /* Saved from the frozen layout, loaded into a plain one: the same tensors. */
    char path[] = "/tmp/nnlab-graph-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    struct nl_model *plain = build(small_spec, in, 3);
    nl_model_init_params(plain, 99);
    ok(nl_safetensors_save(m, path, &err) == 0 &&
           nl_safetensors_load(plain, path, 0, NULL, NULL, NULL, &err) == 0,
       "a frozen model's weights save and load into an unfrozen one");
    same = 1;
    for (int c = 0; c < 5; c++) {
        int i = nl_model_find_layer(m, check[c]);
        for (int k = 0; k < m->layers[i].nparams; k++)
            for (size_t a = 0; a < m->layers[i].params[k].count; a++)
                same &= tensor_value(m, check[c], k, a) == tensor_value(plain, check[c], k, a);
    }
    ok(same, "with every value in place");
    unlink(path);
    nl_model_free(plain);
    nl_model_free(m);
    nl_model_free(ref);
}

/* ---- training with statistics, freezing and clipping ---- */

enum { SIDE = 8, CLASSES = 3 };

static struct nl_dataset *synthetic(uint32_t ntrain, uint32_t ntest)
{
    struct nl_dataset *d = dataset_new("synthetic", "idx", (struct nl_shape){1, SIDE, SIDE}, NL_U8,
                                       CLASSES, "c", 0.3f, 0.3f);
    const uint32_t n[NL_NSPLITS] = {ntrain, 0, ntest};

    for (int s = 0; s < NL_NSPLITS; s++) {
        uint8_t *x = nl_calloc((size_t)n[s] * SIDE * SIDE + 1, 1);
        int32_t *y = nl_calloc((size_t)n[s] + 1, sizeof *y);
        for (uint32_t i = 0; i < n[s]; i++) {
            int k = (int)nl_rng_below(&rng, CLASSES);
            uint8_t *img = x + (size_t)i * SIDE * SIDE;
            for (int p = 0; p < SIDE * SIDE; p++)
                img[p] = (uint8_t)nl_rng_below(&rng, 60);
            for (int p = 0; p < SIDE; p++) /* a bright row, column or diagonal */
                img[k == 0 ? 3 * SIDE + p : k == 1 ? p * SIDE + 4 : p * SIDE + p] = 230;
            y[i] = k;
        }
        d->split[s].n = n[s];
        d->split[s].x = x;
        d->split[s].y = y;
    }
    return d;
}

static struct nl_model *train_steps(const char *spec, const struct nl_dataset *d, int threads,
                                    int epochs, const struct nl_train_opts *base,
                                    const char *freeze_up_to, struct nl_train_result *res)
{
    struct nl_model *m = build(spec, d->shape, d->nclasses);
    struct nl_train_opts o;
    struct nl_error err = {0};

    if (base)
        o = *base;
    else
        nl_train_defaults(&o);
    o.epochs = epochs;
    o.threads = threads;
    nl_model_init_params(m, 4);
    if (freeze_up_to && nl_model_freeze(m, NULL, 0, freeze_up_to, &err) < 0)
        diag("freeze: %s", err.msg);
    if (nl_train(m, d, &o, NULL, res, &err) < 0) {
        diag("train: %s", err.msg);
        nl_model_free(m);
        return NULL;
    }
    return m;
}

static void test_running_stats(void)
{
    struct nl_dataset *d = synthetic(32, 0);
    struct nl_train_opts o;
    struct nl_train_result res;

    /* One step of one batch of 32 samples, cut into shards of 32 or 16: the running statistics
     * are those of the whole batch either way. */
    nl_train_defaults(&o);
    o.batch = 32;
    struct nl_model *a = train_steps(small_spec, d, 1, 1, &o, NULL, &res);
    struct nl_model *b = train_steps(small_spec, d, 2, 1, &o, NULL, &res);
    ok(a && b, "a batchnorm model trains on 1 and 2 threads");
    if (a && b) {
        int i = nl_model_find_layer(a, "bn1");
        const struct nl_layer *l = &a->layers[i];
        double diff = 0.0, moved = 0.0;
        for (int k = 2; k < 4; k++)
            for (size_t c = 0; c < l->params[k].count; c++) {
                float va = tensor_value(a, "bn1", k, c), vb = tensor_value(b, "bn1", k, c);
                diff = fmax(diff, fabs(va - vb));
                moved = fmax(moved, fabs(va - (k == 2 ? 0.0f : 1.0f)));
            }
        ok(moved > 1e-3, "one step moved the running statistics (by up to %.3g)", moved);
        ok(diff < 1e-5, "running statistics do not depend on the thread count (max diff %.2g)",
           diff);
    }
    nl_model_free(a);
    nl_model_free(b);
    nl_dataset_free(d);
}

/* The statistics of one step against a direct computation: mean and unbiased variance of the
 * layer's input over the batch, mixed in with momentum 0.1. */
static void test_running_stats_values(void)
{
    static const char spec[] = "bn: batchnorm\nflatten\nfc: dense N\n";
    struct nl_dataset *d = synthetic(20, 0);
    struct nl_train_opts o;
    struct nl_train_result res;

    nl_train_defaults(&o);
    o.batch = 20;
    struct nl_model *m = train_steps(spec, d, 2, 1, &o, NULL, &res);
    float *in = nl_alloc_floats(20 * SIDE * SIDE);
    uint32_t idx[20];
    for (int i = 0; i < 20; i++)
        idx[i] = (uint32_t)i;
    nl_dataset_batch(d, NL_TRAIN, idx, 20, in, NULL);
    double s1 = 0.0, s2 = 0.0, n = 20.0 * SIDE * SIDE;
    for (size_t i = 0; i < 20 * SIDE * SIDE; i++)
        s1 += in[i];
    for (size_t i = 0; i < 20 * SIDE * SIDE; i++)
        s2 += (in[i] - s1 / n) * (in[i] - s1 / n);
    double want_mean = 0.1 * s1 / n, want_var = 0.9 + 0.1 * s2 / (n - 1.0);
    is_float(tensor_value(m, "bn", 2, 0), want_mean, 1e-4, "running_mean after one step");
    is_float(tensor_value(m, "bn", 3, 0), want_var, 1e-4, "running_var (unbiased) after one step");
    nl_free(in);
    nl_model_free(m);
    nl_dataset_free(d);
}

static void test_frozen_training(void)
{
    struct nl_dataset *d = synthetic(600, 200);
    struct nl_train_result res;
    struct nl_model *init = build(small_spec, d->shape, d->nclasses);
    nl_model_init_params(init, 4);
    struct nl_train_opts o;
    nl_train_defaults(&o);
    o.optim.weight_decay = 5e-4f; /* weight decay and frozen layers go together */
    struct nl_model *m = train_steps(small_spec, d, 2, 3, &o, "conv2", &res);

    ok(m != NULL, "training with conv1, bn1 and conv2 frozen, and weight decay, runs");
    if (m) {
        int same = 1;
        const char *frozen[] = {"conv1", "bn1", "conv2"};
        for (int c = 0; c < 3; c++) {
            int i = nl_model_find_layer(m, frozen[c]);
            for (int k = 0; k < m->layers[i].nparams; k++)
                for (size_t a = 0; a < m->layers[i].params[k].count; a++)
                    same &= tensor_value(m, frozen[c], k, a) == tensor_value(init, frozen[c], k, a);
        }
        ok(same, "frozen weights and frozen batchnorm statistics are bit-identical afterwards");
        ok(tensor_value(m, "fc2", 0, 0) != tensor_value(init, "fc2", 0, 0), "the head trained");
        ok(res.test_accuracy > 0.9, "and learned the task (test accuracy %.3f)", res.test_accuracy);
    }
    nl_model_free(m);
    nl_model_free(init);
    nl_dataset_free(d);
}

static void test_clipping(void)
{
    struct nl_dataset *d = synthetic(16, 0);
    struct nl_train_opts o;
    struct nl_train_result res;
    static const char spec[] = "fc1: dense 8\ntanh\nfc2: dense N\n";

    nl_train_defaults(&o);
    o.batch = 16;
    o.optim.momentum = 0.0f;
    o.optim.lr = 1.0f;
    o.schedule.kind = NL_SCHEDULE_CONSTANT;
    struct nl_model *init = build(spec, d->shape, d->nclasses);
    nl_model_init_params(init, 4);

    o.clip_norm = 1e-3f;
    struct nl_model *m = train_steps(spec, d, 2, 1, &o, NULL, &res);
    double sq = 0.0;
    for (size_t i = 0; i < m->ntrainable; i++)
        sq += ((double)m->params[i] - init->params[i]) * ((double)m->params[i] - init->params[i]);
    is_float(sqrt(sq), 1e-3, 1e-5, "--clip-norm: one SGD step of lr 1 moves by the clip norm");
    nl_model_free(m);

    o.clip_norm = 0.0f;
    o.clip_value = 1e-4f;
    m = train_steps(spec, d, 2, 1, &o, NULL, &res);
    double most = 0.0;
    for (size_t i = 0; i < m->ntrainable; i++)
        most = fmax(most, fabs((double)m->params[i] - init->params[i]));
    ok(most <= 1.01e-4 && most > 0.9e-4, "--clip-value: no value moves by more than 1e-4 (%.3g)",
       most);
    nl_model_free(m);

    o.clip_value = -1.0f;
    struct nl_error err = {0};
    m = build(spec, d->shape, d->nclasses);
    is_int(nl_train(m, d, &o, NULL, &res, &err), NL_EINVAL, "a negative clip value is refused");
    nl_model_free(m);
    nl_model_free(init);
    nl_dataset_free(d);
}

/* ---- safetensors with batchnorm, as PyTorch names it ---- */

static void test_pytorch_batchnorm_file(void)
{
    static const char spec[] = "conv1: conv 2 1x1 bias=no\nbn1: batchnorm\nflatten\nfc: dense N\n";
    const struct nl_shape in = {1, 1, 1};
    struct nl_model *m = build(spec, in, 2);
    struct nl_error err = {0};
    char path[] = "/tmp/nnlab-graph-XXXXXX";
    int fd = mkstemp(path);

    /* conv1.weight [2,1,1,1] = {2, -1}; bn1 weight {1.5, 0.5}, bias {0.1, -0.2}, running_mean
     * {1, 0}, running_var {4, 0.25}; num_batches_tracked (int64, ignored); fc.weight [2,2] =
     * identity, fc.bias = 0. */
    const float data[] = {2, -1, 1.5f, 0.5f, 0.1f, -0.2f, 1, 0, 4, 0.25f, 1, 0, 0, 1, 0, 0};
    const int64_t tracked = 7;
    char header[1024];
    snprintf(header, sizeof header,
             "{\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,1,1],\"data_offsets\":[0,8]},"
             "\"bn1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
             "\"bn1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
             "\"bn1.running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
             "\"bn1.running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[32,40]},"
             "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[40,56]},"
             "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[56,64]},"
             "\"bn1.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],"
             "\"data_offsets\":[64,72]}}");
    FILE *f = fdopen(fd, "wb");
    uint64_t len = strlen(header);
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(len >> (8 * i));
    fwrite(b, 1, 8, f);
    fwrite(header, 1, len, f);
    fwrite(data, 1, sizeof data, f);
    fwrite(&tracked, 1, sizeof tracked, f);
    fclose(f);

    is_int(nl_safetensors_load(m, path, 0, NULL, NULL, NULL, &err), 0,
           "a PyTorch state_dict with batchnorm loads (num_batches_tracked ignored)");
    if (err.msg[0])
        diag("%s", err.msg);
    is_float(tensor_value(m, "bn1", 3, 0), 4.0, 0, "bn1.running_var lands in place");
    /* Eval: x = 3 -> conv (6, -3) -> bn ((6-1)/sqrt(4+eps)*1.5+0.1, (-3-0)/sqrt(.25+eps)*.5-.2)
     * -> identity head. */
    struct nl_exec *x;
    nl_exec_new(&x, m, 1, &err);
    const float one = 3.0f;
    const float *logits = nl_exec_forward(x, m->params, &one, 1, 0, &rng);
    is_float(logits[0], 5.0 / sqrt(4.0 + 1e-5) * 1.5 + 0.1, 1e-5, "eval output 0 as PyTorch's");
    is_float(logits[1], -3.0 / sqrt(0.25 + 1e-5) * 0.5 - 0.2, 1e-5, "eval output 1 as PyTorch's");
    nl_exec_free(x);

    /* --replace-head: the head keeps its fresh values, and a head of another shape is fine. */
    struct nl_model *m3 = build(spec, in, 3);
    nl_model_init_params(m3, 1);
    m3->layers[nl_model_head(m3)].fresh = 1;
    float before = tensor_value(m3, "fc", 0, 0);
    is_int(nl_safetensors_load(m3, path, 0, NULL, NULL, NULL, &err), 0,
           "with the head replaced, a file for 2 classes loads into a model for 3");
    ok(tensor_value(m3, "fc", 0, 0) == before && tensor_value(m3, "bn1", 2, 0) == 1.0f,
       "the head keeps its fresh values, the rest loads");
    nl_model_free(m3);
    unlink(path);
    nl_model_free(m);
}

static void test_shipped_models(void)
{
    const char *names[] = {"resnet8", "mobilenet-tiny"};
    for (int i = 0; i < 2; i++) {
        struct nl_spec *spec;
        struct nl_model *m = NULL;
        struct nl_error err = {0};
        int rc = nl_spec_load(&spec, names[i], NULL, NULL, &err);
        if (rc == 0) {
            rc = nl_model_build(&m, spec, (struct nl_shape){1, 28, 28}, 10, &err);
            nl_spec_free(spec);
        }
        ok(rc == 0, "%s builds for 1x28x28 and 10 classes%s%s", names[i], rc ? ": " : "",
           rc ? err.msg : "");
        nl_model_free(m);
    }
}

/* An executor's plan (nl_exec_memory): its block holds at least what is alive at the fullest
 * moment, and less than the buffers apart. A training executor's for ResNet-18 at 3x64x64 and a
 * shard of 16 (a batch of 32 on 2 threads): 31 MiB, the bound itself, where activations apart
 * (25.8 MiB) and a block of gradients and scratch (8 MiB) took 33.8. A forward-only executor's
 * activations (plan_acts) for ResNet-18 at 3x224x224 and one image: 6.12 MiB (two conv1 outputs,
 * which a forward in training mode holds at once: conv1's and its batchnorm's) against 31.4 for
 * every layer's buffer apart. That the sharing keeps every output still to be read is what
 * test_layers and test_train hold (folded against plain logits, groups against samples alone,
 * split calls against one thread, training-mode forwards against a training executor's). */
static void test_memory_plan(void)
{
    static const struct {
        const char *name;
        struct nl_shape in;
        int n, forward;
        double most; /* MiB, 0: no bound */
    } cases[] = {
        {"lenet", {1, 28, 28}, 32, 0, 0},          {"resnet8", {1, 28, 28}, 16, 0, 0},
        {"mobilenet-tiny", {1, 28, 28}, 16, 0, 0}, {"resnet18", {3, 64, 64}, 16, 0, 31.5},
        {"lenet", {1, 28, 28}, 64, 1, 0},          {"resnet8", {1, 28, 28}, 64, 1, 0},
        {"mobilenet-tiny", {1, 28, 28}, 1, 1, 0},  {"resnet18", {3, 224, 224}, 1, 1, 6.5},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct nl_spec *spec;
        struct nl_model *m = NULL;
        struct nl_exec *x = NULL;
        struct nl_error err = {0};
        size_t block = 0, alive = 0, apart = 0;
        const char *kind = cases[c].forward ? "a forward-only" : "a training";
        int rc = nl_spec_load(&spec, cases[c].name, NULL, NULL, &err);
        if (rc == 0) {
            rc = nl_model_build(&m, spec, cases[c].in, 10, &err);
            nl_spec_free(spec);
        }
        if (rc == 0)
            rc = cases[c].forward ? nl_exec_new_forward(&x, m, cases[c].n, &err)
                                  : nl_exec_new(&x, m, cases[c].n, &err);
        if (!ok(rc == 0, "%s: %s executor of %d samples%s%s", cases[c].name, kind, cases[c].n,
                rc ? ": " : "", rc ? err.msg : "")) {
            nl_model_free(m);
            continue;
        }
        nl_exec_memory(x, &block, &alive, &apart);
        const double mib = 4.0 / 1048576.0;
        ok(alive > 0 && alive <= block && block < apart,
           "%s, %s executor: its block (%.2f MiB) holds the most alive at once (%.2f) and is "
           "smaller than the buffers apart (%.2f)",
           cases[c].name, kind, block * mib, alive * mib, apart * mib);
        if (cases[c].most > 0)
            ok(block * mib < cases[c].most,
               "%s at %dx%dx%d, %s executor of %d: %.2f MiB, under %.1f", cases[c].name,
               cases[c].in.c, cases[c].in.h, cases[c].in.w, kind, cases[c].n, block * mib,
               cases[c].most);
        nl_exec_free(x);
        nl_model_free(m);
    }
}

/* nl_alloc_pages, where executors keep the layers' aux: zeroed, and resident only where written
 * (mincore), so that batchnorm's aux, sized per sample and written once, costs a page or two. */
static void test_alloc_pages(void)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = 64;
    unsigned char *p = nl_alloc_pages(pages * page), in[64];
    if (!ok(p != NULL, "nl_alloc_pages gives %zu pages", pages))
        return;
    memset(p + 3 * page, 1, page);
    size_t resident = 0;
    if (mincore(p, pages * page, in) == 0)
        for (size_t i = 0; i < pages; i++)
            resident += in[i] & 1;
    ok(resident >= 1 && resident <= 2, "%zu of %zu pages resident after one is written", resident,
       pages);
    size_t zero = 0; /* read after mincore: reading maps the zero page, which it counts */
    for (size_t i = 0; i < pages * page; i += 997)
        zero += p[i] == (i / page == 3);
    ok(zero == (pages * page + 996) / 997, "zeroed where not written");
    nl_free_pages(p, pages * page);
}

static void test_spec_syntax(void)
{
    struct nl_spec *spec = NULL;
    struct nl_error err = {0};
    static const char text[] = "a: conv 8 3x3 pad=1 groups=4\n"
                               "b: conv 8 1x1 groups=1\n"
                               "l: leakyrelu 0.2\n"
                               "l2: leakyrelu\n"
                               "bn: batchnorm momentum=0.5 eps=0.001\n"
                               "s: add in=bn,a\n"
                               "c: concat in=s,input\n"
                               "globalavgpool\n"
                               "softmax\n";

    is_int(nl_spec_parse(&spec, text, "t", NULL, NULL, &err), 0, "the new syntax parses%s%s",
           err.msg[0] ? ": " : "", err.msg);
    if (spec) {
        ok(strcmp(spec->layers[0].ops->kind, "gconv") == 0 && spec->layers[0].groups == 4,
           "conv groups=4 becomes gconv");
        ok(strcmp(spec->layers[1].ops->kind, "conv") == 0, "conv groups=1 stays conv");
        is_float(spec->layers[2].slope, 0.2, 1e-7, "leakyrelu takes a slope");
        is_float(spec->layers[3].slope, 0.01, 1e-7, "which defaults to 0.01");
        is_float(spec->layers[4].momentum, 0.5, 1e-7, "batchnorm momentum=");
        is_float(spec->layers[4].eps, 0.001, 1e-9, "batchnorm eps=");
        ok(spec->layers[5].ninputs == 2 && spec->layers[5].inputs[0] == 4 &&
               spec->layers[5].inputs[1] == 0,
           "add in=bn,a reads both");
        ok(spec->layers[6].ninputs == 2 && spec->layers[6].inputs[1] == -1,
           "concat may read the model's input");
        is_str(spec->layers[7].name, "globalavgpool1", "unnamed layers are named by kind");
    }
    nl_spec_free(spec);
    struct {
        const char *text, *want;
    } bad[] = {
        {"add\n", "add takes 2 to 4 inputs"},
        {"leakyrelu 1.5\n", "slope 1.5 not in [0, 1)"},
        {"batchnorm momentum=0\n", "momentum 0 not in (0, 1]"},
        {"conv 8 3x3 groups=0\n", "group count"},
        {"relu\nadd in=relu1,nope\n", "no layer named 'nope'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spec = NULL;
        ok(nl_spec_parse(&spec, bad[i].text, "t", NULL, NULL, &err) < 0 && !spec, "refused: %s",
           bad[i].want);
        like(err.msg, bad[i].want, "with a message that says so");
    }
    /* Shapes that do not fit fail at build, naming the layer. */
    struct nl_model *m =
        build("a: conv 6 3x3 groups=4\nfc: dense N\n", (struct nl_shape){4, 5, 5}, 2);
    ok(m == NULL, "groups must divide the filters");
    m = build("a: conv 3 1x1\nb: conv 4 1x1 in=input\ns: add in=a,b\nfc: dense N\n",
              (struct nl_shape){2, 3, 3}, 2);
    ok(m == NULL, "add needs one shape");
}

int main(void)
{
    nl_kernels_init();
    nl_rng_seed(&rng, 12345);
    test_layer_gradients();
    test_gconv_is_conv();
    test_gconv_layout();
    gconv_vs_block_diagonal(3, 6, 3, "depthwise gconv (2 filters per channel)");
    gconv_vs_block_diagonal(4, 4, 4, "depthwise gconv (1 filter per channel)");
    gconv_vs_block_diagonal(4, 6, 2, "gconv groups=2");
    test_residual_gradient();
    test_freeze_layout();
    test_running_stats();
    test_running_stats_values();
    test_frozen_training();
    test_clipping();
    test_pytorch_batchnorm_file();
    test_shipped_models();
    test_memory_plan();
    test_alloc_pages();
    test_spec_syntax();
    return done_testing();
}
