/* The table of layer kinds, and the checks and messages that every kind's setup shares. A new
 * kind is one file in core/engine/layers/, one line in core/engine/layers/layers.h and one row
 * below. */
#include "nnlab/layer.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "layers/layers.h"

static const struct nl_layer_ops *const kinds[] = {
    &nl__conv_ops,
    &nl__dense_ops,
    &nl__maxpool_ops,
    &nl__avgpool_ops,
    &nl__relu_ops,
    &nl__tanh_ops,
    &nl__sigmoid_ops,
    &nl__flatten_ops,
    &nl__dropout_ops,
    &nl__leakyrelu_ops,
    &nl__gelu_ops,
    &nl__softmax_ops,
    &nl__add_ops,
    &nl__concat_ops,
    &nl__globalavgpool_ops,
    &nl__batchnorm_ops,
    &nl__gconv_ops,
    &nl__relu6_ops,
    &nl__embedding_ops,
    &nl__globalavgpool1d_ops,
    &nl__globalmaxpool1d_ops,
    &nl__conv1d_ops,
    &nl__maxpool1d_ops,
    &nl__lstm_ops,
    &nl__gru_ops,
    &nl__embedcols_ops,
    NULL,
};

const struct nl_layer_ops *nl_layer_kind(const char *kind)
{
    if (!kind)
        return NULL;
    for (size_t i = 0; kinds[i]; i++)
        if (strcmp(kinds[i]->kind, kind) == 0)
            return kinds[i];
    return NULL;
}

const struct nl_layer_ops *const *nl_layer_kinds(void)
{
    return kinds;
}

size_t nl_layer_scratch(const struct nl_layer *l, int n)
{
    if (l->ops->scratch)
        return l->ops->scratch(l, n);
    return l->scratch_fixed + (size_t)n * l->scratch_per_sample;
}

const char *nl_lowering_name(enum nl_lowering lowering)
{
    switch (lowering) {
    case NL_LOWER_AUTO:
        return "chosen by setup";
    case NL_LOWER_SAMPLE:
        return "one GEMM per image";
    case NL_LOWER_SHARD:
        return "one GEMM per shard";
    case NL_LOWER_GROUPS:
        return "one GEMM per image and group";
    case NL_LOWER_DIRECT:
        return "direct";
    case NL_LOWER_WINOGRAD:
        return "Winograd F(4x4, 3x3)";
    case NL_LOWER_WINOGRAD2:
        return "Winograd F(2x2, 3x3)";
    case NL_LOWER_PLANE2:
        return "2x2-plane kernels";
    case NL_LOWER_S2LANES:
        return "stride-2 lanes";
    case NL_LOWER_PHASES:
        return "one GEMM per image from the phase planes";
    case NL_LOWER_PACKED:
        return "packed weights, one product per image";
    case NL_LOWER_ONECHAN:
        return "one channel in, direct over row pairs";
    }
    return "an unknown lowering";
}

int nl__layer_fail(const struct nl_layer *l, struct nl_error *err, const char *fmt, ...)
{
    char what[NL_ERR_MAX];
    const char *name = l->name[0] ? l->name : l->ops ? l->ops->kind : "?";
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (l->line > 0)
        return nl_error_set(err, NL_EINVAL, "layer '%s' (line %d): %s", name, l->line, what);
    return nl_error_set(err, NL_EINVAL, "layer '%s': %s", name, what);
}

int nl__layer_begin(struct nl_layer *l, struct nl_error *err)
{
    l->out = (struct nl_shape){0, 0, 0};
    l->nparams = 0;
    memset(l->params, 0, sizeof l->params);
    l->param_count = 0;
    l->aux_bytes = 0;
    l->scratch_fixed = 0;
    l->scratch_per_sample = 0;

    int min = l->ops ? l->ops->min_inputs : 1, max = l->ops ? l->ops->max_inputs : 1;
    const char *kind = l->ops ? l->ops->kind : "this layer";
    if (l->ninputs < min || l->ninputs > max || l->ninputs > NL_MAX_INPUTS) {
        if (min == max)
            return nl__layer_fail(l, err, "%s takes %d input%s, not %d", kind, min,
                                  min == 1 ? "" : "s", l->ninputs);
        return nl__layer_fail(l, err, "%s takes %d to %d inputs, not %d", kind, min, max,
                              l->ninputs);
    }
    for (int i = 0; i < l->ninputs; i++) {
        struct nl_shape s = l->in[i];
        if (s.c <= 0 || s.h <= 0 || s.w <= 0)
            return nl__layer_fail(l, err, "input %dx%dx%d is empty", s.c, s.h, s.w);
        if (nl_shape_size(s) > INT_MAX)
            return nl__layer_fail(l, err, "input %dx%dx%d is too large", s.c, s.h, s.w);
    }
    return 0;
}

void nl__layer_add_param(struct nl_layer *l, const char *name, int ndim, const int dims[4],
                         int fan_in, int fan_out, enum nl_init init)
{
    struct nl_param *p = &l->params[l->nparams++];

    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->count = 1;
    for (int i = 0; i < ndim; i++) {
        p->dims[i] = dims[i];
        p->count *= (size_t)dims[i];
    }
    p->offset = l->param_count;
    p->fan_in = fan_in;
    p->fan_out = fan_out;
    p->init = init;
    l->param_count += p->count;
}

void nl__window_get(const struct nl_layer *l, int pool, struct nl__window *win)
{
    win->c = l->in[0].c;
    win->h = l->in[0].h;
    win->w = l->in[0].w;
    win->kh = l->kh;
    win->kw = l->kw;
    win->sh = l->sh ? l->sh : pool ? l->kh : 1;
    win->sw = l->sw ? l->sw : pool ? l->kw : 1;
    win->ph = l->ph;
    win->pw = l->pw;
    win->oh = win->sh > 0 ? (win->h + 2 * win->ph - win->kh) / win->sh + 1 : 0;
    win->ow = win->sw > 0 ? (win->w + 2 * win->pw - win->kw) / win->sw + 1 : 0;
}

int nl__window_setup(const struct nl_layer *l, int pool, struct nl__window *win,
                     struct nl_error *err)
{
    const int big = 1 << 20; /* keeps every sum and product below in int range */

    if (l->kh <= 0 || l->kw <= 0)
        return nl__layer_fail(l, err, "window %dx%d must be at least 1x1", l->kh, l->kw);
    if (l->sh < 0 || l->sw < 0)
        return nl__layer_fail(l, err, "stride %dx%d is negative", l->sh, l->sw);
    if (l->ph < 0 || l->pw < 0)
        return nl__layer_fail(l, err, "padding %dx%d is negative", l->ph, l->pw);
    if (l->kh > big || l->kw > big || l->sh > big || l->sw > big || l->ph > big || l->pw > big ||
        l->in[0].h > big || l->in[0].w > big)
        return nl__layer_fail(l, err, "window, stride or padding too large");
    nl__window_get(l, pool, win);
    int kh = win->kh, kw = win->kw, padded_h = win->h + 2 * win->ph,
        padded_w = win->w + 2 * win->pw;
    if (kh > padded_h || kw > padded_w)
        return nl__layer_fail(l, err, "window %dx%d is larger than the padded input %dx%d", kh, kw,
                              padded_h, padded_w);
    if ((size_t)win->oh * (size_t)win->ow * (size_t)win->c > INT_MAX ||
        (size_t)win->c * (size_t)win->kh * (size_t)win->kw > INT_MAX)
        return nl__layer_fail(l, err, "window %dx%d on input %dx%dx%d is too large", win->kh,
                              win->kw, win->c, win->h, win->w);
    return 0;
}
