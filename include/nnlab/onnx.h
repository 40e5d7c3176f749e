/* ONNX export: a model and its input normalisation as an ONNX file (opset 13) that any ONNX
 * runtime runs. The format notes and the mapping of layer kinds to operators are at the top of
 * core/formats/onnx.c. */
#ifndef NNLAB_ONNX_H
#define NNLAB_ONNX_H

#include "nnlab/error.h"
#include "nnlab/model.h"

/* What the graph's input is and how the model normalises it, so that the file is whole. */
struct nl_onnx_opts {
    /* The dataset's normalisation, one value per channel (nnorm = the input's channels): the
     * graph computes (input * scale - mean) / std before the first layer. */
    int nnorm;
    const float *mean, *std;
    float scale; /* 1/255 for 8-bit pixels (the input is then pixel values 0-255); 1 for CSV */
    const char *const *class_names; /* (m->nclasses) stored as metadata; may be NULL */
    const char *producer_version;   /* e.g. "0.9.0"; may be NULL */
    const char *doc;                /* the graph's doc_string (run, dataset); may be NULL */
    /* A regression model (one output, the standardised target): the graph's output is
     * "prediction" [batch, 1] = logits * target_std + target_mean, in the target's units, in
     * place of "probabilities". */
    int regression;
    double target_mean, target_std;
};

/* Writes m as ONNX to path (atomically: a temporary file renamed into place). Refuses, naming
 * the layer and its kind, a model with a layer that has no ONNX form. */
int nl_onnx_save(const struct nl_model *m, const struct nl_onnx_opts *o, const char *path,
                 struct nl_error *err);

#endif
