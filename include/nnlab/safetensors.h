/* Weights in and out as .safetensors files with PyTorch's tensor names and layouts, so that a
 * state_dict saved from the equivalent PyTorch model loads here and ours loads there. A layer
 * named conv1 holds conv1.weight [out, in, kh, kw] and conv1.bias [out]; dense layers hold
 * weight [out, in] and bias [out]; grouped convolutions weight [out, in/groups, kh, kw];
 * batchnorm weight, bias, running_mean and running_var [C]. Loads ignore PyTorch's
 * NAME.num_batches_tracked, and skip the tensors of a layer marked fresh (--replace-head), which
 * keeps its initialisation. The format and its checks are described at the top of
 * core/formats/safetensors.c. */
#ifndef NNLAB_SAFETENSORS_H
#define NNLAB_SAFETENSORS_H

#include "nnlab/error.h"
#include "nnlab/model.h"

/* Writes every parameter of m to path as float32, atomically (a temporary file renamed into
 * place): on failure nothing is left at path. */
int nl_safetensors_save(const struct nl_model *m, const char *path, struct nl_error *err);

struct nl_safetensors_report {
    int loaded;  /* tensors copied into the model */
    int skipped; /* tensors of the model left as they were (partial loads) */
    int unused;  /* tensors of the file the model does not have */
};

/* Loads the model's parameters from path. Every mismatch — a tensor the model has and the file
 * lacks, a shape that differs, a tensor the model does not have — is listed one per line, e.g.
 * "conv2.weight: file has [50,20,5,5], model wants [64,20,5,5]". Without partial any mismatch
 * fails and leaves the model unchanged; with partial the matching tensors load and each mismatch
 * goes to warn. report may be NULL. */
int nl_safetensors_load(struct nl_model *m, const char *path, int partial, nl_warn_fn warn,
                        void *warn_ud, struct nl_safetensors_report *report, struct nl_error *err);

/* The same matching from another model's parameters (an earlier run's, for --init RUN); what
 * names the source in messages. */
int nl_weights_copy(struct nl_model *dst, const struct nl_model *src, const char *what, int partial,
                    nl_warn_fn warn, void *warn_ud, struct nl_safetensors_report *report,
                    struct nl_error *err);

#endif
