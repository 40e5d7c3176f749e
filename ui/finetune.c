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
    struct nl_dataset_info *list = NULL;
    struct nl_spec *spec = NULL;
    char *text = NULL;
    int n = 0, found = -1;

    *out = NULL;
    int rc = nl_run_get(s, run, &info, &text, NULL, err);
    if (rc == 0)
        rc = nl_dataset_list(s, &list, &n, err);
    for (int i = 0; rc == 0 && i < n; i++)
        if (strcmp(list[i].name, info.dataset) == 0)
            found = i;
    if (rc == 0 && found < 0)
        rc = nl_error_set(err, NL_ENOENT,
                          "run '%s' was trained on dataset '%s', which is no longer in the store",
                          run, info.dataset);
    if (rc == 0)
        rc = nl_spec_parse(&spec, text, info.model, NULL, NULL, err);
    if (rc == 0)
        rc = nl_model_build(out, spec, list[found].shape, list[found].nclasses, err);
    if (rc == 0 && with_params)
        rc = nl_run_load_params(s, &info, (*out)->params, (*out)->nparams, err);
    if (rc < 0) {
        nl_model_free(*out);
        *out = NULL;
    }
    nl_spec_free(spec);
    nl_free(list);
    nl_free(text);
    return rc;
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

void finetune_copy(struct nl_model *dst, const struct nl_model *src, const int *from)
{
    for (int i = 0; i < dst->nlayers; i++)
        if (from[i] >= 0)
            memcpy(dst->params + dst->layers[i].param_offset,
                   src->params + src->layers[from[i]].param_offset,
                   dst->layers[i].param_count * sizeof(float));
}
