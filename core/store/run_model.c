/* A run's model rebuilt from what the store recorded: the spec text, the settings' input shape,
 * class count and frozen layers (JSON, as the trainers write them), and the latest checkpoint. */
#include <limits.h>
#include <string.h>

#include "core/formats/json.h"
#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "nnlab/spec.h"

/* The shape and class count from the settings, or (for runs recorded before settings carried
 * them) from the run's dataset. */
static int run_shape(struct nl_store *s, const struct nl_run_info *run,
                     const struct nl_json *settings, struct nl_shape *shape, int *nclasses,
                     struct nl_error *err)
{
    const struct nl_json *in = nl_json_get(settings, "input");
    const struct nl_json *k = nl_json_get(settings, "classes");
    struct nl_dataset_info info;

    if (in && in->type == NL_JSON_ARRAY && in->count == 3 && k && k->is_integer) {
        shape->c = (int)in->items[0].integer;
        shape->h = (int)in->items[1].integer;
        shape->w = (int)in->items[2].integer;
        *nclasses = (int)k->integer;
        return 0;
    }
    if (nl_dataset_info(s, run->dataset, &info, err) < 0)
        return nl_error_set(err, NL_ENOENT, "run '%s': its dataset '%s' is gone", run->name,
                            run->dataset);
    *shape = info.shape;
    *nclasses = info.nclasses;
    return 0;
}

/* Freezes the layers the settings list under "frozen" (none when absent). */
static int run_frozen(struct nl_model *m, const struct nl_json *settings, struct nl_error *err)
{
    const struct nl_json *list = nl_json_get(settings, "frozen");
    int n = 0, rc = 0;

    if (!list || list->type != NL_JSON_ARRAY || list->count == 0)
        return 0;
    const char **names = nl_calloc(list->count, sizeof *names);
    if (!names)
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    for (size_t i = 0; i < list->count && n < INT_MAX; i++)
        if (list->items[i].type == NL_JSON_STRING)
            names[n++] = list->items[i].string;
    if (n > 0)
        rc = nl_model_freeze(m, names, n, NULL, err);
    nl_free(names);
    return rc;
}

int nl_run_model(struct nl_store *s, const char *name, int with_params, nl_warn_fn warn,
                 void *warn_ud, struct nl_run_info *info, struct nl_model **out,
                 struct nl_error *err)
{
    char *text = NULL, *settings = NULL;
    struct nl_json_doc *doc = NULL;
    struct nl_spec *spec = NULL;
    struct nl_shape shape = {0};
    int nclasses = 0;
    const struct nl_json *vocab = NULL;
    int rc = nl_run_get(s, name, info, &text, &settings, err);

    *out = NULL;
    if (rc == 0)
        rc = nl_json_parse(&doc, settings, strlen(settings), "run settings", err);
    if (rc == 0)
        rc = run_shape(s, info, nl_json_root(doc), &shape, &nclasses, err);
    if (rc == 0)
        rc = nl_spec_parse(&spec, text, info->model, warn, warn_ud, err);
    if (rc == 0) {
        /* Text runs: the vocabulary size the embedding layers were built for. */
        vocab = nl_json_get(nl_json_root(doc), "vocab");
        spec->vocab = vocab && vocab->is_integer && vocab->integer > 0 && vocab->integer < (1 << 24)
                          ? (int)vocab->integer
                          : 0;
        /* Table runs: the embedded columns and rows their embed-columns layers were built for
         * (runs recorded before them carry columns= and vocab= in their spec instead). */
        const struct nl_json *emb = nl_json_get(nl_json_root(doc), "embedded");
        const struct nl_json *k = emb ? nl_json_get(emb, "columns") : NULL;
        const struct nl_json *r = emb ? nl_json_get(emb, "rows") : NULL;
        if (k && k->is_integer && k->integer > 0 && k->integer < (1 << 24) && r && r->is_integer &&
            r->integer > 1 && r->integer <= (1 << 24)) {
            spec->embed_columns = (int)k->integer;
            spec->embed_rows = (int)r->integer;
        }
        rc = nl_model_build(out, spec, shape, nclasses, err);
    }
    if (rc == 0)
        rc = run_frozen(*out, nl_json_root(doc), err);
    if (rc == 0 && with_params)
        rc = nl_run_load_params(s, info, (*out)->params, (*out)->nparams, err);
    if (rc < 0) {
        nl_model_free(*out);
        *out = NULL;
    }
    nl_spec_free(spec);
    nl_json_free(doc);
    nl_free(text);
    nl_free(settings);
    return rc;
}
