/* Models: layers built from a spec for a given input shape and class count, with every parameter
 * in one flat buffer, and executors that run forward and backward passes over shards.
 *
 * The layers form a graph in topological order (each names its inputs among earlier layers); the
 * last layer's output is the logits, (nclasses) per sample. */
#ifndef NNLAB_MODEL_H
#define NNLAB_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/error.h"
#include "nnlab/layer.h"
#include "nnlab/rng.h"
#include "nnlab/spec.h"

struct nl_model {
    int nlayers;
    struct nl_layer *layers; /* (nlayers), topological order */
    struct nl_shape input;
    int nclasses;
    int vocab; /* the spec's vocabulary size (text datasets), 0 for none */
    /* The embedded columns its embed-columns layers read and their table's rows; 0 for none. */
    int embed_columns, embed_rows;
    size_t nparams; /* floats in params */
    float *params;  /* every layer's parameters, 64-byte aligned, laid out as below */
    /* The layout: [0, ntrainable) the trainable blocks of the layers that are not frozen, layer
     * after layer; [ntrainable, nreduce) their statistics (batchnorm's running_mean and
     * running_var); [nreduce, nparams) the frozen layers' whole blocks. Gradients, their
     * reduction and (in a cluster) their exchange cover [0, nreduce); the optimizer and its
     * state [0, ntrainable). Without frozen layers nreduce = nparams. */
    size_t ntrainable, nreduce;
    char *spec_text;
    char *spec_origin;
};

/* Builds the model for samples of shape input and nclasses classes: resolves dense N, runs every
 * layer's setup, lays out the flat buffer (zeroed). Errors name the layer and spec line. */
/* A model whose parameters would not fit in this machine's memory is refused before allocating,
 * naming the spec line of its largest layer and the size. nl_model_plan does the same without
 * the buffer (params NULL): shapes, counts and layout for a summary, whatever the size;
 * nl_model_freeze works on it, training and loading do not. */
int nl_model_plan(struct nl_model **out, const struct nl_spec *spec, struct nl_shape input,
                  int nclasses, struct nl_error *err);
int nl_model_build(struct nl_model **out, const struct nl_spec *spec, struct nl_shape input,
                   int nclasses, struct nl_error *err);
void nl_model_free(struct nl_model *m);

/* Seeded initialisation: weights Xavier-uniform unless the spec's init= says otherwise (he,
 * zero), biases zero. Xavier is the default because He's larger weights make the shipped
 * defaults (SGD, lr 0.05, momentum 0.9) diverge on lenet in the first steps, while Xavier trains
 * it to PyTorch's accuracy. */
void nl_model_init_params(struct nl_model *m, uint64_t seed);

/* Floats of every tensor of every layer, statistics included (nparams also counts the alignment
 * between blocks). */
size_t nl_model_count_params(const struct nl_model *m);

/* Index of the layer of that name, or -1. */
int nl_model_find_layer(const struct nl_model *m, const char *name);

/* Freezes the named layers (names, count of them) and, when up_to is not NULL, every layer up
 * to and including the one named up_to; the others become trainable. The flat buffer is laid
 * out again (see above) with every tensor's values kept. Unknown names fail naming them, and
 * leave the model as it was. */
int nl_model_freeze(struct nl_model *m, const char *const *names, int count, const char *up_to,
                    struct nl_error *err);

/* A view of layers [first, first + count) of m as a model of its own, for executors that run
 * part of m: its layers are copies of m's (their parameters at the same offsets of the same
 * flat buffer, m's params and layout), renumbered, with layer first - 1's output (m's input when
 * first is 0) as the view's input and the last one's as its logits. Fails, naming the layer,
 * where one reads a layer before first - 1. Freed with nl_model_view_free, never with
 * nl_model_free; m outlives it. */
int nl_model_view(struct nl_model **out, const struct nl_model *m, int first, int count,
                  struct nl_error *err);
void nl_model_view_free(struct nl_model *v);

/* Index of the last layer with parameters (the head that --replace-head re-creates), or -1. */
int nl_model_head(const struct nl_model *m);

/* Parameters (statistics excluded) of the layers that are not frozen. */
size_t nl_model_count_trainable(const struct nl_model *m);

/* After the gradients of a batch of `batch` samples are reduced into grad (nreduce floats):
 * updates the statistics in [ntrainable, nreduce) of params from the sums there. */
void nl_model_update_stats(const struct nl_model *m, float *params, const float *grad, int batch);

/* An executor holds one thread's activations, activation gradients, aux and scratch for shards
 * of up to max_n samples. Creating it allocates everything; forward and backward allocate
 * nothing. */
struct nl_exec;

int nl_exec_new(struct nl_exec **out, const struct nl_model *m, int max_n, struct nl_error *err);
/* An executor for forward passes only (evaluation, prediction): it holds no activation
 * gradients, and nl_exec_backward on it computes nothing. In inference (training 0) it folds
 * each conv's batchnorm and the ReLUs after convs and adds into one output pass (see
 * core/engine/model.c), which gives the same outputs to rounding; nl_exec_folded says how many
 * layers it folds away. A training executor (nl_exec_new) fuses each ReLU or ReLU6 that alone
 * reads a batchnorm or an add into it, and each residual add that alone reads a batchnorm, with
 * the same results bit for bit and two activation buffers fewer a layer fused away;
 * nl_exec_folded then counts those layers. */
int nl_exec_new_forward(struct nl_exec **out, const struct nl_model *m, int max_n,
                        struct nl_error *err);
int nl_exec_folded(const struct nl_exec *x);
/* An executor's memory plan (core/engine/model.c): the floats of the one block that holds a
 * training executor's activations, activation gradients and scratch; the most of those alive at
 * any one moment of a step, a bound no plan can go under; and what they take in buffers of their
 * own (every activation and gradient, and the largest scratch). For a forward-only executor the
 * same of its activations alone. */
void nl_exec_memory(const struct nl_exec *x, size_t *block, size_t *alive, size_t *apart);
/* Whether training executors made from now on fuse (on by default); returns the former setting.
 * For tests and benchmarks that compare the two, before any thread makes an executor. */
int nl_exec_fusion(int on);
void nl_exec_free(struct nl_exec *x);

/* Prepared weights: what a model's layers derive from the parameters alone before their products
 * (each Winograd convolution's filters transformed, or the weights of a convolution of few
 * pixels turned for its products, core/engine/layers/conv.c), made once for
 * many passes instead of in every call, and read by the executors of every thread that use it.
 * nl_prep_new allocates them for the layers that have any (with frozen, for the frozen ones
 * alone), in layer order while the whole stays within NL_PREP_MAX floats (a layer past that
 * derives its own in every call, as without), and makes them from params (the model's buffer or
 * a copy of the same layout); nl_prep_fill makes them again from params after these changed.
 * Inference passes read every layer's; training passes a frozen layer's, whose weights no step
 * changes. The caller keeps params as they were made from while executors use them: a forward
 * pass reads them only where it is given the same params pointer, but cannot see a change in
 * place. Its outputs are those of a pass without, bit for bit. */
/* 80 MB: ResNet-18 at 3x224x224 takes 17.8M floats (layers 1 to 3's u, layer4's weights turned) */
#define NL_PREP_MAX ((size_t)20 << 20)
struct nl_prep;
int nl_prep_new(struct nl_prep **out, const struct nl_model *m, const float *params, int frozen,
                struct nl_error *err);
void nl_prep_fill(struct nl_prep *p, const float *params);
/* Floats held, and the layers that have prepared weights. */
size_t nl_prep_floats(const struct nl_prep *p, int *layers);
void nl_prep_free(struct nl_prep *p);
/* Forward passes of x from now on read p's prepared weights (NULL: none), as above; p is of x's
 * model (nl_model_view's executors need one made from the view) and outlives that use. */
void nl_exec_use_prep(struct nl_exec *x, const struct nl_prep *p);

/* Per-layer wall time (`nnlab bench --layers`): from now on each call of layer i's forward adds
 * its seconds to seconds[2i] and each of its backward to seconds[2i + 1], i the layer of x's
 * model that runs (see nl_exec_runs_in); seconds (2 * nlayers) is the caller's and outlives the
 * use; NULL stops. A team's executor (nl_exec_forward_team, nl_exec_backward_team) times part 0's
 * shares only. The clock is read twice a layer and call, nothing else changes. */
void nl_exec_time_layers(struct nl_exec *x, double *seconds);
/* The layer whose calls do layer i's work: i itself, or the head of the fused group i belongs to
 * (a training executor's batchnorm or add with the ReLU after it), or the convolution whose
 * output pass a forward-only executor folded i into; with team (x trains as a team, see
 * nl_exec_forward_team), the dense layer a ReLU runs inside (its forward, and its backward where
 * that runs within a share too; a ReLU's backward that runs alone is timed as its own). */
int nl_exec_runs_in(const struct nl_exec *x, int i, int team);
/* The samples of each layer call of x's inference on n samples: a forward-only executor's group
 * (FORWARD_GROUP, core/engine/model.c) where it goes through the network in groups, else n. */
int nl_exec_forward_samples(const struct nl_exec *x, int n);

/* Runs n <= max_n samples x (n, input) through the model with parameters params (the model's own
 * buffer or a copy of the same layout). Returns the logits (n, nclasses), valid until the next
 * call on x. training enables dropout, drawing from rng. */
const float *nl_exec_forward(struct nl_exec *x, const float *params, const float *in, int n,
                             int training, struct nl_rng *rng);

/* A team: the threads of a pool (core/engine/thread_pool.h) running one executor on the whole
 * batch together, each call of the pool's function making the call below with its (part,
 * parts); every layer's work is split between them (ops->rows by samples, ops->parts as the kind
 * splits it: dense by units), with a barrier after each layer (in backward, none between a dense
 * layer and the one two below it where each share reads only what it wrote there, the ReLU
 * between them run inside the share), so that on return every thread sees the whole result.
 * nl_exec_forward_team starts with a barrier, after which every thread sees what the others wrote
 * before it (their rows of in). nl_exec_team says whether x's model
 * allows it: every layer of such a kind, none frozen, no fused group or prefix. The floats are
 * those of nl_exec_forward and nl_exec_backward whatever parts is (core/engine/layers/dense.c says
 * how). */
struct nl_pool;
int nl_exec_team(const struct nl_exec *x);
const float *nl_exec_forward_team(struct nl_exec *x, const float *params, const float *in, int n,
                                  int training, struct nl_rng *rng, struct nl_pool *pool, int part,
                                  int parts);
void nl_exec_backward_team(struct nl_exec *x, const float *params, const float *dlogits,
                           float *dparams, struct nl_pool *pool, int part, int parts);
/* Inference of fewer samples than threads (one image on two cores): nl_exec_split gives a
 * forward-only executor a scratch for each of parts parts (allocated here, once; parts 1: none
 * beyond its own). Then every thread of a pool of parts threads calls nl_exec_forward_split
 * with its part: after a first barrier (which makes in, written before it, seen), each layer
 * runs split between the parts where its kind splits one call (ops->splits: a convolution by
 * its filters, on one sample; dense by its units, ops->parts; element-wise kinds by samples),
 * else whole on part 0, a barrier after each. Every part returns the logits. A split layer's
 * outputs are those of the whole call: each output's sum is the same. */
int nl_exec_split(struct nl_exec *x, int parts, struct nl_error *err);
const float *nl_exec_forward_split(struct nl_exec *x, const float *params, const float *in, int n,
                                   struct nl_pool *pool, int part, int parts);

/* The same from one thread (`nnlab predict`): nl_infer_new makes a pool of threads threads (0:
 * one per core) over forward-only executor x of model m and splits x between them, where m's
 * forward pass takes at least NL_SPLIT_FLOPS a sample (nl_model_infer_flops), else keeps one
 * thread; nl_infer_forward runs x on n samples of in as nl_exec_forward does and returns the
 * logits, the same floats. x outlives it; nl_infer_free frees the pool, not x. */
#define NL_SPLIT_FLOPS 100e6
struct nl_infer;
int nl_infer_new(struct nl_infer **out, struct nl_exec *x, const struct nl_model *m, int threads,
                 struct nl_error *err);
const float *nl_infer_forward(struct nl_infer *s, const float *params, const float *in, int n);
int nl_infer_threads(const struct nl_infer *s);
void nl_infer_free(struct nl_infer *s);
/* The rows of layer i's parameters that share part of parts of a team reads in forward on the
 * executor's last batch: each parameter of the layer read as R rows of count / R floats, where R
 * is what it returns, share part takes rows [*lo, *hi) of every one (dense: its output units,
 * whose weight rows its forward reads; a kind that a team does not split: R is 1, and part 0
 * takes it whole). The shares cover every row once. */
int nl_exec_team_rows(const struct nl_exec *x, int i, int part, int parts, int *lo, int *hi);

/* Backward from now on writes the gradient of the model's input, (n, input) floats, into din
 * (NULL: none, the default): it overwrites din where one layer alone reads the input once and its
 * kind can overwrite (returns 0); else it adds, and the caller zeroes din before each backward
 * (returns 1). For the tail of a model run as a view (nl_model_view). */
int nl_exec_input_grad(struct nl_exec *x, float *din);

/* Backward pass of the last forward, which ran in training mode (same n and params; a forward
 * out of training keeps nothing that backward reads: a maxpool's indices, a convolution's
 * transformed tiles): dparams (nreduce floats) += the
 * gradient of sum(logits * dlogits), and batchnorm's sums for its statistics. Frozen layers get
 * no weight gradient, and no backward runs for a layer that neither has trainable parameters nor
 * reads (through any path) a layer that has. */
void nl_exec_backward(struct nl_exec *x, const float *params, const float *dlogits, float *dparams);

/* The same, calling done(ud, i) once layer i's backward has run (or been skipped), from the last
 * layer down to layer 0: from then on dparams of layers i and above (trainable blocks and
 * statistics) is final, since a layer's weight gradient comes only from its own backward. */
void nl_exec_backward_hook(struct nl_exec *x, const float *params, const float *dlogits,
                           float *dparams, void (*done)(void *ud, int layer), void *ud);

/* The same, with each layer's parameter gradient in a block of the caller's: before the backward
 * of a layer i that is not frozen and has parameters, block(ud, i) returns where its gradient
 * goes, nl_exec_block_floats(m, i) floats, zeroed (backward adds into it), laid out as the
 * layer's tensors one after another in params[] order: the trainable ones first (the same floats
 * as from param_offset in the flat layout), then the statistics' sums (which the flat layout
 * keeps apart). done as above. A kind's backward reads no statistic from the weights, so the
 * layer it is shown may have its statistics' offsets moved into the block. */
void nl_exec_backward_blocks(struct nl_exec *x, const float *params, const float *dlogits,
                             float *(*block)(void *ud, int layer),
                             void (*done)(void *ud, int layer), void *ud);
/* The same, where split(ud, i), asked first for each such layer i, may return the split of its
 * weight gradient between the threads (struct nl_wsplit, include/nnlab/layer.h) instead of
 * NULL: block is then not asked for layer i. Only for layers whose nl_exec_split_columns is
 * not 0, on shards of 2 samples or more. */
void nl_exec_backward_split(struct nl_exec *x, const float *params, const float *dlogits,
                            float *(*block)(void *ud, int layer),
                            struct nl_wsplit *(*split)(void *ud, int layer),
                            void (*done)(void *ud, int layer), void *ud);
/* Columns per sample of layer i's weight gradient's product where its backward can take it
 * split (ops->split), else 0. */
int nl_exec_split_columns(const struct nl_model *m, int i);
/* The layer whose block backward asks for at place k of its order (from the last place down,
 * done(ud, k) following), or -1 for none: the same at every call on executors of one model. */
int nl_exec_block_at(const struct nl_exec *x, int k);
/* Floats of layer i's gradient block (0 for a frozen layer), and of its trainable part. */
size_t nl_exec_block_floats(const struct nl_model *m, int i, size_t *trainable);

/* Backward of layer i (an embedding) marks rows[r] = 1 for each row of its weight gradient it
 * adds to, so that a caller can reduce, update and clear only those rows; rows (the layer's
 * vocabulary size, bytes) stays the caller's, NULL stops the marking. The caller clears it. */
void nl_exec_track_rows(struct nl_exec *x, int i, unsigned char *rows);

/* The frozen prefix of a training executor: the layers whose output no training step can change
 * (frozen or without parameters, reading only such layers or the input, and not stochastic:
 * no dropout), so that their output for a sample is the same in every epoch, batchnorm being in
 * eval mode there. Its features are the outputs of the prefix's layers that a layer outside it
 * reads, one after another in layer order: nl_exec_prefix returns their floats per sample, 0
 * when there is no such prefix (nothing frozen, a trainable layer reads the model's input, the
 * whole model is in it, or a forward-only executor). The features of sample s of the last
 * forward go to row (nl_exec_prefix floats) with nl_exec_features; nl_exec_forward_head runs
 * the layers outside the prefix on n samples' features (n, floats) instead of the input, giving
 * the same logits as nl_exec_forward on those samples, after which nl_exec_backward runs as
 * after nl_exec_forward. */
size_t nl_exec_prefix(const struct nl_exec *x);
void nl_exec_features(const struct nl_exec *x, int s, float *row);
const float *nl_exec_forward_head(struct nl_exec *x, const float *params, const float *features,
                                  int n, int training, struct nl_rng *rng);
/* Layers in the prefix, for a summary or a note: the count, and the index of the last one; and
 * whether layer i is one of them. */
int nl_exec_prefix_layers(const struct nl_exec *x, int *last);
int nl_exec_in_prefix(const struct nl_exec *x, int i);

/* How many layers nl_exec_backward runs, and how many weight-gradient floats it computes: a
 * measure of a backward pass's cost that does not depend on timing. */
void nl_exec_backward_cost(const struct nl_exec *x, int *layers, size_t *weight_floats);

#endif
