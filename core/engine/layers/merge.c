/* "add", "concat" and "globalavgpool": the layers that join and reduce branches of a graph.
 *
 *   add in=a,b[,...]      out = the sum of 2 to NL_MAX_INPUTS inputs of one shape (residuals);
 *                         the ReLU that alone reads it may be folded in (nl_fwd.act), in
 *                         inference and in training, where backward then masks the ReLU's
 *                         gradient into both inputs in one pass (nl_bwd.act)
 *   concat in=a,b[,...]   out (C1 + C2 + ..., H, W): the inputs one after another along the
 *                         channels, as torch.cat(dim=1); all inputs share H and W
 *   globalavgpool         out (C, 1, 1): the mean of each channel's plane, as
 *                         AdaptiveAvgPool2d(1)
 *   no parameters, no aux, no scratch. */
#include <string.h>

#include "layers.h"
#include "nnlab/kernels.h"

static int add_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    for (int j = 1; j < l->ninputs; j++) {
        struct nl_shape a = l->in[0], b = l->in[j];
        if (a.c != b.c || a.h != b.h || a.w != b.w)
            return nl__layer_fail(l, err, "add needs inputs of one shape: %dx%dx%d and %dx%dx%d",
                                  a.c, a.h, a.w, b.c, b.h, b.w);
    }
    l->out = l->in[0];
    return 0;
}

/* A part of a split call (nl_exec_forward_split) adds the elements [lo, hi) of
 * nl_block_range(count, 16, part, parts), each element's sum as the whole call's. */
static void add_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    const size_t all = f->n > 0 ? (size_t)f->n * nl_shape_size(l->out) : 0;
    size_t lo = 0, hi = all;

    if (f->parts > 1)
        nl_block_range(all, 16, f->part, f->parts, &lo, &hi);
    const size_t count = hi > lo ? hi - lo : 0;
    float *out = f->out + lo;
    const float *a = f->in[0] + lo;
    if (l->ninputs == 2) { /* a residual block's add: in vectors where the CPU allows */
        if (f->act)        /* and its ReLU, folded in (inference) */
            nl_add_act(out, a, f->in[1] + lo, count, f->act);
        else
            nl_add(out, a, f->in[1] + lo, count);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        float s = a[i];
        for (int j = 1; j < l->ninputs; j++)
            s += f->in[j][lo + i];
        out[i] = s;
    }
    if (f->act) /* the folded activation: x * 1 + 0 is x */
        nl_scale_shift(out, out, count, 1.0f, 0.0f, f->act);
}

static void add_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    size_t count = b->n > 0 ? (size_t)b->n * nl_shape_size(l->out) : 0;

    if (b->act) { /* the fused activation's gradient, masked into two inputs a pass */
        for (int j = 0; j < l->ninputs; j += 2) {
            float *d1 = j + 1 < l->ninputs ? b->din[j + 1] : NULL;
            nl_add_act_backward(b->din[j], d1, b->out, b->dout, count, b->act, (b->set >> j) & 3u);
        }
        return;
    }
    for (int j = 0; j < l->ninputs; j++) {
        float *din = b->din[j];
        if (!din)
            continue;
        if (b->set & (1u << j))
            memcpy(din, b->dout, count * sizeof *din);
        else
            for (size_t i = 0; i < count; i++)
                din[i] += b->dout[i];
    }
}

static int concat_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);
    long c = 0;

    if (rc < 0)
        return rc;
    for (int j = 0; j < l->ninputs; j++) {
        struct nl_shape a = l->in[0], b = l->in[j];
        if (a.h != b.h || a.w != b.w)
            return nl__layer_fail(l, err,
                                  "concat joins channels of one plane size: %dx%d and %dx%d", a.h,
                                  a.w, b.h, b.w);
        c += b.c;
    }
    if ((size_t)c * (size_t)l->in[0].h * (size_t)l->in[0].w > (size_t)1 << 30)
        return nl__layer_fail(l, err, "concatenated output is too large");
    l->out = (struct nl_shape){(int)c, l->in[0].h, l->in[0].w};
    return 0;
}

/* Each sample's output is its inputs' samples one after another (NCHW). */
static void concat_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    float *out = f->out;

    for (int s = 0; s < f->n; s++)
        for (int j = 0; j < l->ninputs; j++) {
            size_t size = nl_shape_size(l->in[j]);
            const float *x = f->in[j] + (size_t)s * size;
            for (size_t i = 0; i < size; i++)
                *out++ = x[i];
        }
}

static void concat_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    const float *dout = b->dout;

    for (int s = 0; s < b->n; s++)
        for (int j = 0; j < l->ninputs; j++) {
            size_t size = nl_shape_size(l->in[j]);
            float *din = b->din[j];
            if (din) {
                din += (size_t)s * size;
                for (size_t i = 0; i < size; i++)
                    din[i] += dout[i];
            }
            dout += size;
        }
}

static int gap_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    l->out = (struct nl_shape){l->in[0].c, 1, 1};
    return 0;
}

static void gap_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    const size_t plane = (size_t)l->in[0].h * (size_t)l->in[0].w;
    const int c = l->in[0].c;

    for (int s = 0; s < f->n; s++)
        for (int k = 0; k < c; k++) {
            const float *x = f->in[0] + ((size_t)s * c + k) * plane;
            double sum = 0.0;
            for (size_t i = 0; i < plane; i++)
                sum += x[i];
            f->out[(size_t)s * c + k] = (float)(sum / (double)plane);
        }
}

static void gap_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    const size_t plane = (size_t)l->in[0].h * (size_t)l->in[0].w;
    const int c = l->in[0].c;

    if (!b->din[0])
        return;
    for (int s = 0; s < b->n; s++)
        for (int k = 0; k < c; k++) {
            float *dx = b->din[0] + ((size_t)s * c + k) * plane;
            float v = b->dout[(size_t)s * c + k] / (float)plane;
            if (b->set & 1)
                for (size_t i = 0; i < plane; i++)
                    dx[i] = v;
            else
                for (size_t i = 0; i < plane; i++)
                    dx[i] += v;
        }
}

const struct nl_layer_ops nl__add_ops = {
    .kind = "add",
    .splits = 1,
    .overwrites = 1,
    .folds = 2,
    .fuses = 1,
    .min_inputs = 2,
    .max_inputs = NL_MAX_INPUTS,
    .setup = add_setup,
    .forward = add_forward,
    .backward = add_backward,
};

const struct nl_layer_ops nl__concat_ops = {
    .kind = "concat",
    .min_inputs = 2,
    .max_inputs = NL_MAX_INPUTS,
    .setup = concat_setup,
    .forward = concat_forward,
    .backward = concat_backward,
};

const struct nl_layer_ops nl__globalavgpool_ops = {
    .kind = "globalavgpool",
    .overwrites = 1,
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = gap_setup,
    .forward = gap_forward,
    .backward = gap_backward,
};
