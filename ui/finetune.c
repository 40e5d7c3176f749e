/* Fine-tuning from a past run (see finetune.h). */
#include "finetune.h"

#include <string.h>

#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/runs.h"
#include "nnlab/spec.h"

int finetune_source(struct nl_store *s, const char *run, int with_params, struct nl_model **out,
                    struct nl_error *err)
{
    struct nl_run_info info;
    return nl_run_model(s, run, with_params, NULL, NULL, &info, out, err);
}

static int same_params(const struct nl_layer *a, const struct nl_layer *b)
{
    if (a->ops != b->ops || a->nparams != b->nparams || a->param_count != b->param_count)
        return 0;
    for (int p = 0; p < a->nparams; p++) {
        if (a->params[p].ndim != b->params[p].ndim)
            return 0;
        for (int d = 0; d < a->params[p].ndim; d++)
            if (a->params[p].dims[d] != b->params[p].dims[d])
                return 0;
    }
    return 1;
}

int finetune_match(const struct nl_model *dst, const struct nl_model *src, int *from)
{
    int matched = 0;
    for (int i = 0; i < dst->nlayers; i++) {
        const struct nl_layer *l = &dst->layers[i];
        int j = l->param_count > 0 ? nl_model_find_layer(src, l->name) : -1;
        from[i] = j >= 0 && same_params(l, &src->layers[j]) ? j : -1;
        matched += from[i] >= 0;
    }
    return matched;
}

/* Tensor by tensor: a layer's statistics may live outside its block (include/nnlab/model.h). */
void finetune_copy(struct nl_model *dst, const struct nl_model *src, const int *from)
{
    for (int i = 0; i < dst->nlayers; i++) {
        if (from[i] < 0)
            continue;
        const struct nl_layer *d = &dst->layers[i], *s = &src->layers[from[i]];
        for (int k = 0; k < d->nparams; k++)
            memcpy(dst->params + d->param_offset + d->params[k].offset,
                   src->params + s->param_offset + s->params[k].offset,
                   d->params[k].count * sizeof(float));
    }
}
