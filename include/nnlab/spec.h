/* Model specs: the plain-text description of a model that a person writes by hand.
 *
 *     # LeNet as in the BigDL studies
 *     conv1: conv 20 5x5
 *     pool1: maxpool 2
 *     relu
 *     fc2:   dense N          # N: the dataset's class count
 *
 * One layer per line: an optional `NAME:`, the kind, positional arguments, then key=value
 * options. `#` starts a comment. Unnamed layers are named kind + running number (relu1, relu2).
 * The grammar, with every kind's arguments and keys, is at the top of core/engine/spec.c. */
#ifndef NNLAB_SPEC_H
#define NNLAB_SPEC_H

#include "nnlab/error.h"
#include "nnlab/layer.h"

struct nl_spec {
    char *origin; /* file path, or the shipped model's name */
    char *text;   /* the whole text, as read */
    int nlayers;
    struct nl_layer *layers; /* configuration, name, line and inputs filled; ops set */
    /* The vocabulary size of the text dataset the model is built for (its nvocab): embedding
     * layers without vocab= take it. 0: none (the caller sets it before nl_model_build). */
    int vocab;
    /* A table's embedded columns (nl_dataset.embed_columns, core/import/csv.c): K row-id inputs
     * into a table of R rows, which embed-columns layers take as they take vocab (columns= and
     * vocab= may repeat them, and must agree). 0: none. */
    int embed_columns, embed_rows;
    /* The dataset the model is built for, borrowed, for the checks at build (NULL: none is made,
     * as for a run's recorded model): a dataset with embedded columns must be read through an
     * embed-columns layer, and an embed-columns layer needs a dataset that has them. nl_spec_use
     * sets this, vocab and the embedded columns from a dataset. */
    const char *data;
};

struct nl_dataset;
/* What the model takes from d, the dataset it is built for: vocab, embed_columns, embed_rows and
 * data (d's name, borrowed: d must outlive the build). */
void nl_spec_use(struct nl_spec *s, const struct nl_dataset *d);

/* Parses text. Errors read "ORIGIN:LINE: what is wrong"; unknown keys are warnings of the same
 * form through warn (which may be NULL). */
int nl_spec_parse(struct nl_spec **out, const char *text, const char *origin, nl_warn_fn warn,
                  void *warn_ud, struct nl_error *err);

/* name_or_path: a path (it holds a '/' or names an existing file) is read from disk; otherwise
 * the shipped model of that name (data/models/, compiled into the binary). */
int nl_spec_load(struct nl_spec **out, const char *name_or_path, nl_warn_fn warn, void *warn_ud,
                 struct nl_error *err);
void nl_spec_free(struct nl_spec *s);

/* The shipped models, NULL-terminated names; and one's text (NULL if unknown). */
const char *const *nl_spec_shipped_names(void);
const char *nl_spec_shipped_text(const char *name);

#endif
