/* Fine-tuning from a past run: the run's model is rebuilt for its own dataset, and each layer of
 * the new model that has a layer of the same name, kind and parameter shapes there starts from
 * that layer's weights; the others (the head, when the class count differs) keep their fresh
 * initialisation. No GTK here: the training thread calls it. */
#ifndef NNLAB_UI_FINETUNE_H
#define NNLAB_UI_FINETUNE_H

#include "nnlab/model.h"
#include "nnlab/store.h"

/* Builds run's model for its dataset's shape and class count; with_params also loads its latest
 * checkpoint. */
int finetune_source(struct nl_store *s, const char *run, int with_params, struct nl_model **out,
                    struct nl_error *err);

/* from (dst->nlayers): for each layer of dst with parameters, the index of its match in src, or
 * -1; layers without parameters get -1. Returns the number of layers matched. */
int finetune_match(const struct nl_model *dst, const struct nl_model *src, int *from);

/* Copies the matched layers' parameters from src into dst. */
void finetune_copy(struct nl_model *dst, const struct nl_model *src, const int *from);

#endif
