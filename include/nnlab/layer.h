/* Layers: a layer kind is a small table of functions (setup, forward, backward) over plain float
 * arrays; a new kind is one new file in core/engine/layers/ and one row in core/engine/layer.c.
 *
 * Shapes are per sample, (C, H, W); a vector of F features is (F, 1, 1). A shard of n samples is
 * stored sample after sample, so an activation is (n, C, H, W) in NCHW order.
 *
 * A layer's parameters are contiguous in the model's flat buffer, starting at param_offset, in the
 * order of params[], each in PyTorch's layout (conv weight [out, in, kh, kw], linear [out, in],
 * bias [out]). Forward overwrites its output; backward accumulates (+=) into din and dw, which the
 * caller zeroes, except where the caller asks a kind that can to write din (nl_bwd.set). Layers
 * keep no state between calls except what they write to aux. */
#ifndef NNLAB_LAYER_H
#define NNLAB_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/error.h"
#include "nnlab/rng.h"

#define NL_MAX_INPUTS    4
#define NL_MAX_PARAMS    4
#define NL_NAME_MAX      48
#define NL_UNITS_CLASSES (-1) /* dense N: as many units as the dataset has classes */

struct nl_shape {
    int c, h, w;
};

static inline size_t nl_shape_size(struct nl_shape s)
{
    return (size_t)s.c * (size_t)s.h * (size_t)s.w;
}

/* How conv and gconv turn the convolution into products (see core/engine/layers/conv.c and
 * gconv.c). AUTO lets setup choose from the shape; the others force one, so that tests can hold
 * every fast path against its twin and benchmarks can time each. */
enum nl_lowering {
    NL_LOWER_AUTO = 0,
    NL_LOWER_SAMPLE,    /* conv: im2col and one GEMM per sample */
    NL_LOWER_SHARD,     /* conv: one im2col matrix and one GEMM for the whole shard */
    NL_LOWER_GROUPS,    /* gconv: im2col and one GEMM per sample and group */
    NL_LOWER_DIRECT,    /* direct loops: depthwise gconv, and narrow 3x3 stride-1 conv */
    NL_LOWER_WINOGRAD,  /* conv 3x3 stride 1: Winograd F(4x4, 3x3), 36 GEMMs per shard */
    NL_LOWER_WINOGRAD2, /* conv 3x3 stride 1: Winograd F(2x2, 3x3), 16 GEMMs per shard */
    NL_LOWER_PLANE2,    /* conv 3x3 stride 1 padding 1 on a 2x2 plane: direct, images in lanes */
    NL_LOWER_S2LANES,   /* conv 3x3 stride 2 padding 1 to 2x2 or 4x4: forward direct, images in
                           lanes; backward SHARD's (on a 4x4 input, lanes kernels) */
    NL_LOWER_PHASES,    /* conv stride 2: SAMPLE's columns read from the four phase planes */
    NL_LOWER_PACKED,    /* conv: SAMPLE's columns, the weights packed once per shard for an
                           own product (nnlab/conv_gemm.h) */
    NL_LOWER_ONECHAN,   /* conv of one input channel, rows of 24: forward and weight gradient
                           direct over pairs of output rows (nnlab/conv_gemm.h) */
};

/* A few words that name a lowering, for test names and benchmark tables. */
const char *nl_lowering_name(enum nl_lowering lowering);

struct nl_layer;
/* The lowering a conv layer's forward of n samples runs: l->lower, but for the calls that take
 * another (core/engine/layers/conv.c): Winograd on few tiles out of training, one GEMM per image
 * or per shard; the shard lowerings on fewer samples than they fill; the phase planes' layer by
 * bands of rows, one GEMM per image. */
enum nl_lowering nl_conv_forward_lowering(const struct nl_layer *l, int n, int training);
/* Whether that forward multiplies turned (out^T = cols^T W^T, or Winograd's mm^T = v^T u^T),
 * from weights prepared once (inference, a frozen layer: prepared) and, for one GEMM per image,
 * with no bias to add in the product (none, or a batchnorm folded in: folded). */
int nl_conv_forward_turned(const struct nl_layer *l, int n, int training, int prepared, int folded);

enum nl_init {
    NL_INIT_DEFAULT = 0, /* weights: Xavier; biases: zero */
    NL_INIT_ZERO,
    NL_INIT_HE,     /* uniform, bound sqrt(6 / fan_in) */
    NL_INIT_XAVIER, /* uniform, bound sqrt(6 / (fan_in + fan_out)) */
    NL_INIT_ONE,    /* batchnorm's weight and running_var */
};

struct nl_param {
    char name[16]; /* PyTorch's name inside the layer: "weight", "bias" */
    int ndim;
    int dims[4];   /* PyTorch's layout */
    size_t count;  /* product of dims */
    size_t offset; /* floats from the start of the layer's parameters */
    int fan_in, fan_out;
    enum nl_init init;
    /* A statistic (batchnorm's running_mean, running_var): saved and loaded like any tensor but
     * never trained. It comes after the layer's trainable parameters in params[]; the model may
     * place it outside the layer's block (offset then reaches past the block). */
    int stat;
};

struct nl_layer_ops;

struct nl_layer {
    const struct nl_layer_ops *ops;
    char name[NL_NAME_MAX];
    int line; /* line of the spec that made it; 0 when built in code */

    /* Configuration, as the spec gave it; a kind ignores the fields it does not use. */
    int units;   /* dense: output features, or NL_UNITS_CLASSES */
    int filters; /* conv: output channels */
    int kh, kw;  /* conv and pools: window */
    int sh, sw;  /* stride; 0 means the default (conv 1, pools the window) */
    int ph, pw;  /* zero padding on each side */
    float p;     /* dropout: probability of dropping a value */
    int no_bias; /* conv, dense: no bias term */
    enum nl_init init;
    int groups;                /* gconv: channel groups (0 or 1: one group) */
    float slope;               /* leakyrelu: slope for negative inputs */
    float momentum;            /* batchnorm: weight of the new batch in the running statistics */
    float eps;                 /* batchnorm: added to the variance */
    enum nl_lowering lowering; /* conv, gconv: AUTO, or a forced lowering */
    int vocab;                 /* embedding: rows (token ids); 0: the model's (the dataset's) */
    int all_states;            /* lstm, gru: output every step's hidden state, not the last */
    int columns;               /* embed-columns: the last inputs, row ids of a table's columns */

    /* Wiring: indices of earlier layers, -1 for the model's input. */
    int ninputs;
    int inputs[NL_MAX_INPUTS];

    /* Filled by ops->setup from in[] and the configuration. */
    struct nl_shape in[NL_MAX_INPUTS];
    struct nl_shape out;
    int nparams;
    struct nl_param params[NL_MAX_PARAMS];
    size_t param_count;        /* floats, all params together */
    size_t aux_bytes;          /* per sample, written by forward for backward */
    size_t scratch_fixed;      /* floats of scratch per call ... */
    size_t scratch_per_sample; /* ... plus this many per sample of the shard */
    enum nl_lowering lower;    /* conv, gconv: the lowering setup chose (never AUTO) */

    /* Filled by the model. */
    size_t param_offset; /* into the model's flat buffer */
    int frozen;          /* no weight gradient; batchnorm uses its running statistics */
    int fresh;           /* loads skip this layer's tensors (--replace-head) */
};

struct nl_fwd {
    int n;                          /* samples in the shard */
    const float *in[NL_MAX_INPUTS]; /* (n, in[i]) */
    float *out;                     /* (n, out), overwritten */
    const float *w;                 /* the layer's parameters, laid out as params[] */
    void *aux;                      /* n * aux_bytes */
    float *scratch;                 /* scratch_fixed + n * scratch_per_sample floats */
    int training;                   /* dropout drops only when set */
    struct nl_rng *rng;             /* the calling thread's generator */
    /* A folded output pass, set only by a forward-only executor in inference (core/engine/
     * model.c) for the kinds that honour it (ops->folds): conv writes channel k of out as
     * act(y * scale[k] + shift[k]), y its product without the bias (the batchnorm that alone
     * read it folded in); add writes act(sum). act is NL_ACT_* of nnlab/kernels.h; scale NULL
     * and act 0: the plain output. A training executor sets act alone, for the kinds with
     * ops->fuses: out is then the output of the ReLU or ReLU6 that alone reads this layer. */
    const float *scale, *shift;
    int act;
    /* Training-time fusion of a residual add into a batchnorm (ops->fuses & 2): (n, out), the
     * add's other input, so that out = act(y + res); NULL: none. */
    const float *res;
    /* A team's share (nl_exec_forward_team): with parts > 1, forward computes share part of
     * parts of out, as the kind splits it (ops->parts); 0 or 1: all of it. */
    int part, parts;
    /* A split call's meeting (nl_exec_forward_split: parts > 1 out of training, for the kinds
     * with ops->splits): sync(sync_arg) returns once every part of the call has called it, and
     * shared is part 0's scratch, into which a kind may have each part write its own piece
     * before a meeting and every part read after it. Where a kind meets, every part of the call
     * meets as often. NULL outside a split call. */
    void (*sync)(void *arg);
    void *sync_arg;
    float *shared;
    /* The layer's prepared weights (ops->prep, through nl_prep of nnlab/model.h), set in
     * inference and for a frozen layer: what forward would otherwise derive from w in every
     * call; NULL: derive them. */
    const float *prep;
};

struct nl_wsplit;

struct nl_bwd {
    int n;
    const float *in[NL_MAX_INPUTS]; /* what forward read */
    const float *out;               /* what forward wrote */
    const float *dout;              /* (n, out) */
    float *din[NL_MAX_INPUTS];      /* (n, in[i]), +=; NULL where no gradient is wanted */
    /* Bit j: din[j] holds nothing yet (this is its first writer), so the layer writes it (=)
     * instead of adding to it, sparing the caller a pass that zeroes it. Set only for kinds
     * whose ops->overwrites is 1. */
    unsigned set;
    const float *w;
    float *dw; /* +=, laid out as w; NULL when the layer is frozen */
    /* embedding: rows[r] = 1 for every row r of dw that backward adds to; NULL when the caller
     * does not track them (nl_exec_track_rows). */
    unsigned char *rows;
    const void *aux; /* what forward wrote there */
    float *scratch;
    /* Training-time fusion (ops->fuses): forward applied act (NL_ACT_*) to its output, so out is
     * act(y) and dout the gradient of act(y); the layer masks dout where act's derivative, read
     * from out, is 0. 0: out and dout are the layer's own. */
    int act;
    /* With nl_fwd.res: its gradient, the masked dout, written (= where bit 1 of set is on) or
     * added; NULL when no gradient is wanted there. */
    float *dres;
    /* A team's share, as nl_fwd's: backward computes only share part of parts of din and dw. */
    int part, parts;
    /* A weight gradient split by output channels between the threads of a step (set only for
     * kinds with ops->split, by nl_exec_backward_blocks' caller; dw is then NULL): see
     * struct nl_wsplit. NULL: the layer writes its whole weight gradient into dw. */
    struct nl_wsplit *split;
};

/* A weight gradient dw (F, K) += sum over threads t of dy_t (F, ld_t) cols_t^T (ld_t, K) (or what
 * the layer makes of its cols_t instead: conv's PLANE2 posts its images turned) that the
 * parts (threads) of a training step take by output channels (core/engine/trainer.c): part p of
 * parts computes rows [lo, hi) of nl_block_range(F, 1, p, parts) over every part's matrices, t
 * in order from 0 (each product added with beta = 1), into the one block dw that all parts write
 * (zeroed when it is handed out), the bias's rows likewise: row sums of dy_t added in t's order.
 * Every tensor of the layer has F rows (its first dimension), which the caller may update by
 * parts as well.
 * A layer's backward calls post with its matrices, which then stay unchanged until it has called
 * leave; sets w_done; calls wait, which returns once every part has done so (then dy, cols, ld,
 * dw and fuse are filled); computes its rows; sets fused; and calls leave, which returns once
 * every part is done reading the others' matrices. ud is the caller's. */
struct nl_wsplit {
    int part, parts;
    const float **dy, **cols; /* (parts) each */
    int *ld;                  /* (parts) */
    float *dw;
    /* Set by the layer before wait: 1 where its backward reads w no more once it waits (its
     * input gradient made, or none wanted), so that the weights may then be updated. */
    int w_done;
    /* Set by wait: 1 where every part set w_done and the caller steps the weights from the rows
     * the layer hands to update. */
    int fuse;
    /* Set by the layer before leave: 1 where, with fuse, it handed every tensor's rows of its
     * part to update instead of writing them into dw (which it then leaves as it was). The caller
     * updates in place the rows of the parts that did not. */
    int fused;
    /* The optimizer's step on rows [lo, hi) of the layer's tensor p from their gradient g
     * ((hi - lo) rows, laid out as the tensor's). */
    void (*update)(struct nl_wsplit *s, int p, size_t lo, size_t hi, const float *g);
    void (*post)(struct nl_wsplit *s, const float *dy, const float *cols, int ld);
    void (*wait)(struct nl_wsplit *s);
    void (*leave)(struct nl_wsplit *s);
    void *ud;
};

struct nl_layer_ops {
    const char *kind; /* the word in a spec: "conv", "dense", ... */
    int min_inputs, max_inputs;
    /* 1 when forward in training draws from f->rng (dropout): such a layer's output differs from
     * one epoch to the next, so it never belongs to a cached frozen prefix (nl_exec_prefix). */
    int stochastic;
    /* 1 when backward honours nl_bwd.set. */
    int overwrites;
    /* What of nl_fwd's folded output pass forward honours: bit 0 scale and shift, bit 1 act. */
    int folds;
    /* Bit 0: forward honours nl_fwd.act in training as well, and backward nl_bwd.act, so that a
     * training executor can fuse the ReLU or ReLU6 that alone reads the layer into it. Bit 1:
     * also nl_fwd.res and nl_bwd.dres, the residual add that alone reads it. */
    int fuses;
    /* 1 when each sample's output depends on that sample's input alone and the kind has no
     * parameters, aux, scratch or draw from the generator (the activations, flatten): an executor
     * may run it on any range of samples, so a team splits it by rows. */
    int rows;
    /* 1 when forward and backward honour nl_fwd.part and nl_bwd.part (dense: by output units,
     * and din by input features), each share computing its elements as the whole call would,
     * the same sums in the same order. */
    int parts;
    /* 1 when forward out of training honours nl_fwd.part and nl_fwd.parts for a call of one
     * sample (conv: part p computes its block of the filters, with a scratch of its own;
     * nl_exec_forward_split), each output as the whole call computes it. */
    int splits;
    /* Columns per sample of the weight gradient's product where backward honours nl_bwd.split
     * (for shards of 2 samples or more; conv: its shard lowerings), else 0; NULL: never. */
    int (*split)(const struct nl_layer *l);
    /* Validates the configuration against in[] and fills out, params, aux and scratch sizes.
     * Errors name the layer (and its spec line when it has one). */
    int (*setup)(struct nl_layer *l, struct nl_error *err);
    void (*forward)(const struct nl_layer *l, const struct nl_fwd *f);
    void (*backward)(const struct nl_layer *l, const struct nl_bwd *b);
    /* Kinds with statistics (params[].stat): backward adds the shard's sums into dw at the
     * statistics' positions; after the sums of the whole batch of `batch` samples are reduced
     * into sums, this replaces the optimizer for them, updating w. NULL for other kinds. */
    void (*update_stats)(const struct nl_layer *l, float *w, const float *sums, int batch);
    /* Floats of scratch a call of at most n samples uses, where that is less than scratch_fixed +
     * n * scratch_per_sample (which stays a bound for every n); never less for a larger n. NULL:
     * that sum. */
    size_t (*scratch)(const struct nl_layer *l, int n);
    /* Weights prepared once for many forward calls (nl_prep): the floats they take for layer l
     * (0: none for this layer), and making them from the layer's parameters w. NULL: none. */
    size_t (*prep_floats)(const struct nl_layer *l);
    void (*prep)(const struct nl_layer *l, const float *w, float *out);
};

/* The table of kinds; NULL for an unknown word. */
const struct nl_layer_ops *nl_layer_kind(const char *kind);
/* All kinds, NULL-terminated, for help texts. */
const struct nl_layer_ops *const *nl_layer_kinds(void);
/* Floats of scratch a call of at most n samples of layer l needs (ops->scratch, or
 * scratch_fixed + n * scratch_per_sample): what an executor of n samples per call gives it. */
size_t nl_layer_scratch(const struct nl_layer *l, int n);

/* Softmax cross-entropy of a shard. logits and dlogits are (n, k). Returns the sum over the shard
 * of -log softmax(logits)[label]; writes dlogits = scale * (softmax - onehot(label)) when dlogits
 * is not NULL (scale = 1 / global batch gives the gradient of the batch mean); adds the number of
 * samples whose argmax equals the label to *correct when correct is not NULL. */
double nl_softmax_xent(float *dlogits, const float *logits, const int32_t *labels, int n, int k,
                       float scale, int *correct);

/* The losses a run may train with. NL_LOSS_DEFAULT: cross-entropy for a classification dataset,
 * mse for a regression one. The regression losses compare a model's single output with the
 * standardised target: mse (y - t)^2, mae |y - t|, huber (y - t)^2 / 2 where |y - t| <= 1 and
 * |y - t| - 1/2 beyond (PyTorch's HuberLoss with delta 1; its gradient is clipped at 1). */
enum nl_loss {
    NL_LOSS_DEFAULT = 0,
    NL_LOSS_XENT = 1,
    NL_LOSS_MSE = 2,
    NL_LOSS_MAE = 3,
    NL_LOSS_HUBER = 4,
};
/* "default", "xent", "mse", "mae", "huber"; parse gives -1 for anything else. */
extern const char *const nl_loss_names[5];
int nl_loss_parse(const char *text);

/* A regression loss of a shard: out and t are (n) (the model's single output and the target).
 * Returns the sum of the loss over the shard; writes dout = scale * dloss/dout when dout is not
 * NULL (it may be out itself). kind is NL_LOSS_MSE, NL_LOSS_MAE or NL_LOSS_HUBER (an other kind
 * is a programmer's bug). The gradient of mae at 0 is 0. */
double nl_regression_loss(float *dout, const float *out, const float *t, int n, enum nl_loss kind,
                          float scale);

/* probs (n, k) = softmax(logits), row by row, numerically stable. */
void nl_softmax(float *probs, const float *logits, int n, int k);

#endif
