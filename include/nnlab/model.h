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
    size_t nparams; /* floats in params */
    float *params;  /* every layer's parameters, layer after layer, 64-byte aligned */
    char *spec_text;
    char *spec_origin;
};

/* Builds the model for samples of shape input and nclasses classes: resolves dense N, runs every
 * layer's setup, lays out the flat buffer (zeroed). Errors name the layer and spec line. */
int nl_model_build(struct nl_model **out, const struct nl_spec *spec, struct nl_shape input,
                   int nclasses, struct nl_error *err);
void nl_model_free(struct nl_model *m);

/* Seeded initialisation: weights Xavier-uniform unless the spec's init= says otherwise (he,
 * zero), biases zero. Xavier is the default because He's larger weights make the shipped
 * defaults (SGD, lr 0.05, momentum 0.9) diverge on lenet in the first steps, while Xavier trains
 * it to PyTorch's accuracy. */
void nl_model_init_params(struct nl_model *m, uint64_t seed);

/* Parameters of all layers (nparams also counts the alignment between layers' blocks). */
size_t nl_model_count_params(const struct nl_model *m);

/* Index of the layer of that name, or -1. */
int nl_model_find_layer(const struct nl_model *m, const char *name);

/* An executor holds one thread's activations, activation gradients, aux and scratch for shards
 * of up to max_n samples. Creating it allocates everything; forward and backward allocate
 * nothing. */
struct nl_exec;

int nl_exec_new(struct nl_exec **out, const struct nl_model *m, int max_n, struct nl_error *err);
void nl_exec_free(struct nl_exec *x);

/* Runs n <= max_n samples x (n, input) through the model with parameters params (the model's own
 * buffer or a copy of the same layout). Returns the logits (n, nclasses), valid until the next
 * call on x. training enables dropout, drawing from rng. */
const float *nl_exec_forward(struct nl_exec *x, const float *params, const float *in, int n,
                             int training, struct nl_rng *rng);

/* Backward pass of the last forward (same n and params): dparams (nparams) += the gradient of
 * sum(logits * dlogits). Frozen layers get no weight gradient. */
void nl_exec_backward(struct nl_exec *x, const float *params, const float *dlogits, float *dparams);

#endif
