/* Private to core/: the layer kinds that core/engine/layer.c lists, and the helpers their setup and
 * forward functions share (defined in core/engine/layer.c). Not installed, not for ui/ or app/; the
 * nl__ prefix marks names that are global only so that core/ files can share them. */
#ifndef NNLAB_CORE_LAYERS_H
#define NNLAB_CORE_LAYERS_H

#include "nnlab/layer.h"

extern const struct nl_layer_ops nl__conv_ops;
extern const struct nl_layer_ops nl__dense_ops;
extern const struct nl_layer_ops nl__maxpool_ops;
extern const struct nl_layer_ops nl__avgpool_ops;
extern const struct nl_layer_ops nl__relu_ops;
extern const struct nl_layer_ops nl__relu6_ops;
extern const struct nl_layer_ops nl__tanh_ops;
extern const struct nl_layer_ops nl__sigmoid_ops;
extern const struct nl_layer_ops nl__flatten_ops;
extern const struct nl_layer_ops nl__dropout_ops;
extern const struct nl_layer_ops nl__leakyrelu_ops;
extern const struct nl_layer_ops nl__gelu_ops;
extern const struct nl_layer_ops nl__softmax_ops;
extern const struct nl_layer_ops nl__add_ops;
extern const struct nl_layer_ops nl__concat_ops;
extern const struct nl_layer_ops nl__globalavgpool_ops;
extern const struct nl_layer_ops nl__batchnorm_ops;
extern const struct nl_layer_ops nl__gconv_ops;
extern const struct nl_layer_ops nl__embedding_ops;
extern const struct nl_layer_ops nl__globalavgpool1d_ops;
extern const struct nl_layer_ops nl__globalmaxpool1d_ops;
extern const struct nl_layer_ops nl__conv1d_ops;
extern const struct nl_layer_ops nl__maxpool1d_ops;
extern const struct nl_layer_ops nl__lstm_ops;
extern const struct nl_layer_ops nl__gru_ops;
extern const struct nl_layer_ops nl__embedcols_ops;

/* A team's share part of parts of a dense layer's backward on n samples (core/engine/layers/
 * dense.c). nl__dense_din_cols: 1 where the share writes columns [*lo, *hi) of din alone (set:
 * it overwrites din), 0 where din is not split. nl__dense_dout_cols: 1 where, without din, the
 * share reads columns [*lo, *hi) of dout alone (the weight gradient by units), else 0. */
int nl__dense_din_cols(const struct nl_layer *l, int n, int set, int part, int parts, int *lo,
                       int *hi);
int nl__dense_dout_cols(const struct nl_layer *l, int n, int part, int parts, int *lo, int *hi);
/* The output units [*lo, *hi) of a dense layer whose forward share part of parts computes on n
 * samples (the weight rows it reads); returns the layer's units. */
int nl__dense_units(const struct nl_layer *l, int n, int part, int parts, int *lo, int *hi);

/* Fills err with "layer 'NAME' (line L): " and the formatted text (no line part when l->line is
 * 0) and returns NL_EINVAL. */
int nl__layer_fail(const struct nl_layer *l, struct nl_error *err, const char *fmt, ...)
    NL_PRINTF(3, 4);

/* The start of every setup: clears what setup fills (out, params, sizes) and checks the number
 * of inputs against the kind and that each input shape is non-empty and small enough for int
 * indexing. */
int nl__layer_begin(struct nl_layer *l, struct nl_error *err);

/* Appends a parameter after those already in l->params and grows l->param_count. */
void nl__layer_add_param(struct nl_layer *l, const char *name, int ndim, const int dims[4],
                         int fan_in, int fan_out, enum nl_init init);

/* Batchnorm l in inference as one multiply and add per channel (C = l->in[0].c): scale (C) =
 * weight / sqrt(running_var + eps), shift (C) = (bias - running_mean) * scale + batchnorm's bias,
 * where bias (C) is the bias of the layer before it, NULL for none. w: l's parameters. */
void nl__bn_fold(const struct nl_layer *l, const float *w, const float *bias, float *scale,
                 float *shift);

/* A sliding window over in[0] (conv and pools), with strides resolved. */
struct nl__window {
    int c, h, w; /* input, per sample */
    int kh, kw;  /* window */
    int sh, sw;  /* stride, never 0 */
    int ph, pw;  /* zero padding on each side */
    int oh, ow;  /* output plane */
};

/* Checks the window configuration of l against l->in[0] and fills win; a stride of 0 becomes
 * pool ? the window (pools) : 1 (conv). Errors name the layer. */
int nl__window_setup(const struct nl_layer *l, int pool, struct nl__window *win,
                     struct nl_error *err);

/* The same geometry again, for forward and backward, from a layer that setup accepted. */
void nl__window_get(const struct nl_layer *l, int pool, struct nl__window *win);

#endif
