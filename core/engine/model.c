/* Model building, initialisation and the forward/backward executor.
 *
 * Layout (include/nnlab/model.h): trainable blocks first, then the statistics of those layers,
 * then the frozen layers' blocks, so that what the optimizer updates, and what the reduction and
 * a cluster exchange, are each one contiguous range starting at 0. A layer's statistics are
 * moved out of its block by giving their params[].offset the distance from param_offset to where
 * they lie; layers only ever address a tensor as w + params[k].offset, so they do not notice.
 * Every block starts 16-float aligned. A model without frozen layers or statistics keeps the
 * plain layer-after-layer layout.
 *
 * Memory: the flat parameter buffer belongs to the model. Each executor owns, per layer, the
 * layer's aux block. A forward-only executor has an activation buffer of max_n samples per layer,
 * those whose lives do not meet sharing floats in one block (plan_acts), and one scratch block as
 * large as the largest layer needs (layers run one at a time). A
 * training executor has one block for the activations, the activation gradients and the scratch,
 * planned by liveness over the step (plan_memory): layer i's output lives from its forward to its
 * last reader (forward's readers, then the backward passes that read it as their input or, its
 * own, as their output); its gradient only from its first writer's backward (its highest reader,
 * which zeroes it there or overwrites it) down to its own backward; a place's scratch only while
 * it runs, forward or backward; so that what does not live at the same time shares floats: the
 * gradients and scratch of the lower layers take the floats of the upper layers' activations,
 * which backward is done with. For ResNet-18 at 3x64x64 and 16 samples a thread that block is
 * 31 MiB, what is alive at the step's fullest moment (nl_exec_memory), where the activations
 * apart (25.8 MiB) and a block of the gradients and scratch (8 MiB) took 33.8, and separate
 * buffers 57.6. The values and the order of every sum are those of separate buffers.
 *
 * Folding (forward-only executors, inference only): a conv whose output only a batchnorm reads
 * takes that batchnorm into its output pass, y * scale + shift per channel (nl__bn_fold, from
 * the running statistics, computed at each forward from the parameters passed in, so they may
 * change between calls), and a ReLU or ReLU6 that alone reads the conv, its batchnorm, an
 * add or a dense layer is applied in that same pass. The folded layers do not run; the chain's
 * result lands in the last one's activation buffer, where its readers look. The output equals the
 * unfolded layers' to rounding (tests/test_layers.c holds the two against each other); a
 * forward in training mode on a forward-only executor runs the layers as they are.
 *
 * Groups (forward-only executors, inference only): where a sample's activations take more than
 * GROUP_SAMPLE_BYTES (ResNet-18: 2.6 MB at 3x64x64; resnet8 0.8, mobilenet-tiny 0.7, lenet 0.1),
 * a batch of more than FORWARD_GROUP samples goes through the whole network FORWARD_GROUP samples
 * at a time, each group into its rows of every activation buffer, so that what one layer writes
 * is still in the caches when the next reads it. Every layer computes each sample on its own in
 * inference, so only the grouping of the products changes (and with it, where OpenBLAS picks
 * another kernel for a narrower product, the last bits). ResNet-18 at
 * 3x64x64, batch 64 on two threads (32 samples each), `nnlab bench --mode infer`, five rounds
 * alternating with the whole shard at once (2026-11-28, AMD EPYC, load average 1): 996, 968, 999,
 * 1024 and 1015 images/s against 942, 943, 987, 995 and 989. 16 fills the lanes of the 2x2-plane
 * and stride-2 lanes kernels; groups of 8 ran at 726 to 765 against 866 to 892.
 *
 * Fusion (training executors, nl_exec_new): a batchnorm, an add or a maxpool (ops->fuses) runs
 * inside itself the layers that alone read it, forward and backward: a batchnorm the residual add
 * with two inputs that alone reads it (nl_fwd.res, nl_bwd.dres; not when the add's other input is
 * the batchnorm's own input), then either the ReLU or ReLU6 that alone reads what it has so far
 * (nl_fwd.act, nl_bwd.act). Such a group runs at the place of its last layer, whose output and
 * output-gradient buffers it uses; its other layers do not run and hold neither buffer (two
 * activation buffers fewer per layer fused away), and their passes over memory are gone (a
 * ReLU's forward and backward, an add's, and the head's writing and re-reading of its own output
 * and gradient). The arithmetic is the same, so the results equal the unfused layers' bit for
 * bit (tests/test_layers.c holds them against each other); a gradient that several layers add
 * into may take its terms in another order where a group's place moves its writer past another
 * reader (none in the shipped models). Groups form in the frozen prefix as well, where no
 * backward runs, but never across its edge. nl_exec_fusion turns fusion off for executors
 * made after it, for tests and benchmarks. */
#include "nnlab/model.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "layers/layers.h"
#include "nnlab/alloc.h"
#include "nnlab/clock.h"
#include "nnlab/kernels.h"
#include "nnlab/rng.h"
#include "thread_pool.h"

/* Samples per group of an inference forward (the top). */
#define FORWARD_GROUP 16
/* ... where a sample's activations take more than this */
#define GROUP_SAMPLE_BYTES (1u << 20)

static int layer_error(struct nl_error *err, const struct nl_layer *l, int code, const char *what)
{
    if (l->line > 0)
        return nl_error_set(err, code, "layer '%s' (line %d): %s", l->name, l->line, what);
    return nl_error_set(err, code, "layer '%s': %s", l->name, what);
}

/* An embed-columns layer takes the dataset's embedded columns and their table's rows, as an
 * embedding takes the vocabulary; columns= and vocab= in the spec must agree with them. Without a
 * dataset (spec->data NULL and nothing recorded) the layer's own keys stand. */
static int take_columns(const struct nl_spec *spec, struct nl_layer *l, struct nl_error *err)
{
    const char *data = spec->data ? spec->data : "the run's dataset";
    char what[384];

    if (spec->data && spec->embed_columns == 0) {
        snprintf(what, sizeof what,
                 "dataset '%s' has no embedded columns (an import embeds a categorical column "
                 "of more levels than --embed-levels): remove the layer, or import the data "
                 "again",
                 spec->data);
        return layer_error(err, l, NL_EINVAL, what);
    }
    if (spec->embed_columns == 0)
        return 0;
    if (l->columns && l->columns != spec->embed_columns) {
        snprintf(what, sizeof what,
                 "columns=%d, but %s%s%s has %d embedded column%s (leave columns= out: the "
                 "layer takes the dataset's)",
                 l->columns, spec->data ? "dataset '" : "", data, spec->data ? "'" : "",
                 spec->embed_columns, spec->embed_columns == 1 ? "" : "s");
        return layer_error(err, l, NL_EINVAL, what);
    }
    if (l->vocab && l->vocab != spec->embed_rows) {
        snprintf(what, sizeof what,
                 "vocab=%d, but the embedded columns of %s%s%s have %d rows (leave vocab= "
                 "out: the layer takes the dataset's)",
                 l->vocab, spec->data ? "dataset '" : "", data, spec->data ? "'" : "",
                 spec->embed_rows);
        return layer_error(err, l, NL_EINVAL, what);
    }
    l->columns = spec->embed_columns;
    l->vocab = spec->embed_rows;
    return 0;
}

/* The row ids of a dataset's embedded columns are never read as numbers: every layer that reads
 * the model's input must be an embed-columns layer. */
static int check_embedded_input(const struct nl_spec *spec, const struct nl_model *m,
                                struct nl_error *err)
{
    if (!spec->data || spec->embed_columns == 0)
        return 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        if (strcmp(l->ops->kind, "embed-columns") == 0)
            continue;
        for (int j = 0; j < l->ninputs; j++)
            if (l->inputs[j] < 0)
                return nl_error_set(
                    err, NL_EINVAL,
                    "%s: dataset '%s' has %d embedded column%s, row ids into a table of %d "
                    "rows, not numbers, but layer '%s' (line %d) reads them as its input: start "
                    "the model with an embed-columns layer ('embed-columns 8': 8 learned floats "
                    "a level)",
                    spec->origin, spec->data, spec->embed_columns,
                    spec->embed_columns == 1 ? "" : "s", spec->embed_rows, l->name, l->line);
    }
    return 0;
}

static size_t align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* The offsets setup gave: the params one after another. */
static void plain_offsets(struct nl_layer *l)
{
    size_t off = 0;
    for (int k = 0; k < l->nparams; k++) {
        l->params[k].offset = off;
        off += l->params[k].count;
    }
}

/* Floats of the layer's trainable parameters (the statistics come after them in params[]). */
static size_t trainable_count(const struct nl_layer *l)
{
    size_t n = 0;
    for (int k = 0; k < l->nparams; k++)
        if (!l->params[k].stat)
            n += l->params[k].count;
    return n;
}

/* Sets every layer's param_offset and params[].offset, and the model's ranges, from the layers'
 * frozen flags. */
static void lay_out(struct nl_model *m)
{
    size_t pos = 0;

    for (int i = 0; i < m->nlayers; i++) {
        struct nl_layer *l = &m->layers[i];
        plain_offsets(l);
        if (l->frozen)
            continue;
        l->param_offset = pos;
        pos += align16(trainable_count(l));
    }
    m->ntrainable = pos;
    for (int i = 0; i < m->nlayers; i++) {
        struct nl_layer *l = &m->layers[i];
        size_t start = pos;
        if (l->frozen)
            continue;
        for (int k = 0; k < l->nparams; k++)
            if (l->params[k].stat) {
                l->params[k].offset = pos - l->param_offset;
                pos += l->params[k].count;
            }
        pos = start + align16(pos - start);
    }
    m->nreduce = pos;
    for (int i = 0; i < m->nlayers; i++) {
        struct nl_layer *l = &m->layers[i];
        if (!l->frozen)
            continue;
        l->param_offset = pos;
        pos += align16(l->param_count);
    }
    m->nparams = pos;
}

void nl_model_free(struct nl_model *m)
{
    if (!m)
        return;
    nl_free(m->layers);
    nl_free(m->params);
    nl_free(m->spec_text);
    nl_free(m->spec_origin);
    nl_free(m);
}

int nl_model_view(struct nl_model **out, const struct nl_model *m, int first, int count,
                  struct nl_error *err)
{
    struct nl_model *v;
    struct nl_layer *layers;

    *out = NULL;
    if (first < 0 || count < 1 || first + count > m->nlayers)
        return nl_error_set(err, NL_EINVAL, "layers %d to %d are not among the model's %d", first,
                            first + count - 1, m->nlayers);
    for (int i = first; i < first + count; i++)
        for (int j = 0; j < m->layers[i].ninputs; j++)
            if (m->layers[i].inputs[j] < first - 1)
                return nl_error_set(err, NL_EINVAL,
                                    "layer '%s' reads a layer before layers %d to %d",
                                    m->layers[i].name, first, first + count - 1);
    v = nl_malloc(sizeof *v);
    layers = nl_calloc((size_t)count, sizeof *layers);
    if (!v || !layers) {
        nl_free(v);
        nl_free(layers);
        return nl_error_set(err, NL_ENOMEM, "out of memory for a view of %d layers", count);
    }
    *v = *m;
    v->nlayers = count;
    v->layers = layers;
    v->spec_text = v->spec_origin = NULL;
    if (first > 0)
        v->input = m->layers[first - 1].out;
    if (first + count < m->nlayers)
        v->nclasses = (int)nl_shape_size(m->layers[first + count - 1].out);
    for (int i = 0; i < count; i++) {
        layers[i] = m->layers[first + i];
        for (int j = 0; j < layers[i].ninputs; j++)
            layers[i].inputs[j] = layers[i].inputs[j] >= first ? layers[i].inputs[j] - first : -1;
    }
    *out = v;
    return 0;
}

void nl_model_view_free(struct nl_model *v)
{
    if (!v)
        return;
    nl_free(v->layers);
    nl_free(v);
}

/* Bytes of memory this machine has; 0 when unknown. */
static uint64_t memory_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

static int build(struct nl_model **out, const struct nl_spec *spec, struct nl_shape input,
                 int nclasses, int allocate, struct nl_error *err)
{
    struct nl_model *m;
    char what[256];
    int rc;

    *out = NULL;
    if (spec->nlayers <= 0)
        return nl_error_set(err, NL_EINVAL, "%s: no layers", spec->origin);
    if (input.c <= 0 || input.h <= 0 || input.w <= 0 || nclasses < 1)
        return nl_error_set(err, NL_EINVAL, "%s: cannot build for input %dx%dx%d with %d classes",
                            spec->origin, input.c, input.h, input.w, nclasses);
    m = nl_calloc(1, sizeof *m);
    if (!m)
        return nl_error_set(err, NL_ENOMEM, "out of memory building %s", spec->origin);
    m->layers = nl_calloc((size_t)spec->nlayers, sizeof *m->layers);
    m->spec_text = nl_strdup(spec->text ? spec->text : "");
    m->spec_origin = nl_strdup(spec->origin ? spec->origin : "");
    if (!m->layers || !m->spec_text || !m->spec_origin) {
        nl_model_free(m);
        return nl_error_set(err, NL_ENOMEM, "out of memory building %s", spec->origin);
    }
    memcpy(m->layers, spec->layers, (size_t)spec->nlayers * sizeof *m->layers);
    m->nlayers = spec->nlayers;
    m->input = input;
    m->nclasses = nclasses;
    m->vocab = spec->vocab;

    for (int i = 0; i < m->nlayers; i++) {
        struct nl_layer *l = &m->layers[i];
        if (l->units == NL_UNITS_CLASSES)
            l->units = nclasses;
        if (strcmp(l->ops->kind, "embed-columns") == 0) {
            rc = take_columns(spec, l, err);
            if (rc < 0) {
                nl_model_free(m);
                return rc;
            }
        } else if (l->vocab == 0) {
            l->vocab = spec->vocab;
        }
        for (int j = 0; j < l->ninputs; j++) {
            int src = l->inputs[j];
            if (src >= i) {
                nl_model_free(m);
                return layer_error(err, l, NL_EINVAL, "an input comes after the layer");
            }
            l->in[j] = src < 0 ? input : m->layers[src].out;
        }
        rc = l->ops->setup(l, err);
        if (rc < 0) {
            nl_model_free(m);
            return rc;
        }
    }
    rc = check_embedded_input(spec, m, err);
    if (rc < 0) {
        nl_model_free(m);
        return rc;
    }
    for (int i = 0; i < m->nlayers; i++)
        if (strcmp(m->layers[i].ops->kind, "embed-columns") == 0) {
            m->embed_columns = m->layers[i].columns;
            m->embed_rows = m->layers[i].vocab;
        }
    lay_out(m);
    struct nl_layer *last = &m->layers[m->nlayers - 1];
    if (nl_shape_size(last->out) != (size_t)nclasses) {
        snprintf(what, sizeof what,
                 "the last layer gives %zu outputs per sample (%dx%dx%d), but the data has %d "
                 "classes (end with 'dense N')",
                 nl_shape_size(last->out), last->out.c, last->out.h, last->out.w, nclasses);
        rc = layer_error(err, last, NL_EINVAL, what);
        nl_model_free(m);
        return rc;
    }
    if (!allocate) {
        *out = m;
        return 0;
    }
    /* Refused before allocating: the parameters alone (training needs a few times more for
     * gradients and optimizer state) must fit in this machine's memory. Named at the layer
     * with the most of them. */
    uint64_t mem = memory_bytes(), need = (uint64_t)m->nparams * sizeof(float);
    if (mem && need > mem) {
        int big = 0;
        for (int i = 1; i < m->nlayers; i++)
            if (m->layers[i].param_count > m->layers[big].param_count)
                big = i;
        snprintf(what, sizeof what,
                 "the model has %zu parameters (%.1f GiB as float32, this layer %zu), more than "
                 "this machine's memory (%.1f GiB)",
                 m->nparams, (double)need / (1u << 30), m->layers[big].param_count,
                 (double)mem / (1u << 30));
        rc = nl_error_set(err, NL_ENOMEM, "%s:%d: layer '%s': %s", spec->origin,
                          m->layers[big].line, m->layers[big].name, what);
        nl_model_free(m);
        return rc;
    }
    m->params = nl_alloc_floats(m->nparams);
    if (!m->params) {
        nl_model_free(m);
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory for %zu parameters (%.1f GiB)",
                            spec->origin, m->nparams, (double)need / (1u << 30));
    }
    *out = m;
    return 0;
}

int nl_model_build(struct nl_model **out, const struct nl_spec *spec, struct nl_shape input,
                   int nclasses, struct nl_error *err)
{
    return build(out, spec, input, nclasses, 1, err);
}

int nl_model_plan(struct nl_model **out, const struct nl_spec *spec, struct nl_shape input,
                  int nclasses, struct nl_error *err)
{
    return build(out, spec, input, nclasses, 0, err);
}

int nl_model_freeze(struct nl_model *m, const char *const *names, int count, const char *up_to,
                    struct nl_error *err)
{
    int *frozen = nl_calloc((size_t)m->nlayers + 1, sizeof *frozen);
    size_t *old = nl_calloc((size_t)m->nlayers * NL_MAX_PARAMS + 1, sizeof *old);
    float *params = NULL;
    int rc = 0;

    if (!frozen || !old) {
        rc = nl_error_set(err, NL_ENOMEM, "out of memory freezing layers");
        goto out;
    }
    for (int k = 0; k < count; k++) {
        int i = nl_model_find_layer(m, names[k]);
        if (i < 0) {
            rc = nl_error_set(err, NL_EINVAL, "--freeze: the model has no layer '%s'", names[k]);
            goto out;
        }
        frozen[i] = 1;
    }
    if (up_to) {
        int last = nl_model_find_layer(m, up_to);
        if (last < 0) {
            rc = nl_error_set(err, NL_EINVAL, "--freeze-up-to: the model has no layer '%s'", up_to);
            goto out;
        }
        for (int i = 0; i <= last; i++)
            frozen[i] = 1;
    }
    for (int i = 0; i < m->nlayers; i++)
        for (int k = 0; k < m->layers[i].nparams; k++)
            old[i * NL_MAX_PARAMS + k] = m->layers[i].param_offset + m->layers[i].params[k].offset;
    for (int i = 0; i < m->nlayers; i++)
        m->layers[i].frozen = frozen[i];
    lay_out(m);
    if (!m->params)
        goto out; /* a planned model: the layout only */
    params = nl_alloc_floats(m->nparams);
    if (!params) {
        rc = nl_error_set(err, NL_ENOMEM, "out of memory for %zu parameters", m->nparams);
        goto out; /* unreachable in practice: the layout has the same size */
    }
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        for (int k = 0; k < l->nparams; k++)
            memcpy(params + l->param_offset + l->params[k].offset,
                   m->params + old[i * NL_MAX_PARAMS + k], l->params[k].count * sizeof(float));
    }
    nl_free(m->params);
    m->params = params;
out:
    nl_free(frozen);
    nl_free(old);
    return rc;
}

int nl_model_head(const struct nl_model *m)
{
    for (int i = m->nlayers - 1; i >= 0; i--)
        if (m->layers[i].param_count > 0)
            return i;
    return -1;
}

size_t nl_model_count_trainable(const struct nl_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->nlayers; i++)
        if (!m->layers[i].frozen)
            n += trainable_count(&m->layers[i]);
    return n;
}

void nl_model_update_stats(const struct nl_model *m, float *params, const float *grad, int batch)
{
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        if (!l->frozen && l->ops->update_stats)
            l->ops->update_stats(l, params + l->param_offset, grad + l->param_offset, batch);
    }
}

size_t nl_model_count_params(const struct nl_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->nlayers; i++)
        n += m->layers[i].param_count;
    return n;
}

int nl_model_find_layer(const struct nl_model *m, const char *name)
{
    for (int i = 0; i < m->nlayers; i++)
        if (strcmp(m->layers[i].name, name) == 0)
            return i;
    return -1;
}

void nl_model_init_params(struct nl_model *m, uint64_t seed)
{
    struct nl_rng rng;

    nl_rng_seed(&rng, seed);
    memset(m->params, 0, m->nparams * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        for (int p = 0; p < l->nparams; p++) {
            const struct nl_param *pd = &l->params[p];
            float *w = m->params + l->param_offset + pd->offset;
            enum nl_init init = pd->init;
            double bound;

            if (init == NL_INIT_DEFAULT)
                init = l->init != NL_INIT_DEFAULT ? l->init : NL_INIT_XAVIER;
            if (init == NL_INIT_ZERO)
                continue;
            if (init == NL_INIT_ONE) {
                for (size_t k = 0; k < pd->count; k++)
                    w[k] = 1.0f;
                continue;
            }
            if (init == NL_INIT_HE)
                bound = sqrt(6.0 / (pd->fan_in > 0 ? pd->fan_in : 1));
            else
                bound = sqrt(6.0 / (pd->fan_in + pd->fan_out > 0 ? pd->fan_in + pd->fan_out : 1));
            for (size_t k = 0; k < pd->count; k++)
                w[k] = (float)((2.0 * nl_rng_uniform(&rng) - 1.0) * bound);
        }
    }
}

struct nl_exec {
    const struct nl_model *m;
    int max_n, n;
    float **act;         /* (nlayers) outputs, (max_n, out) each */
    float **dact;        /* (nlayers) gradients of the outputs */
    unsigned char **aux; /* (nlayers) each layer's, page-aligned in aux_pages */
    unsigned char *aux_pages;
    size_t aux_size;
    char *need; /* (nlayers) 1 where backward runs: trainable, or reads a layer that needs it */
    char *pre;  /* (nlayers) 1 in the frozen prefix (nl_exec_prefix), 2 there and read from
                 * outside it (its features), all 0 when there is no prefix */
    size_t features; /* floats per sample of the prefix's features; 0: no prefix */
    /* Activation gradients: zero[i] when dact[i] is zeroed before backward; else its first
     * writer (the highest layer reading it) overwrites it, told so by bit j of set[k]. */
    char *zero;
    unsigned *set;
    /* A training executor's activations, activation gradients and scratch share one block by
     * liveness (see the top of the file, plan_memory): dact[i] is alive from place from[i] (its
     * first writer, where backward zeroes it when zero[i]) down to place i (its reader). */
    float *dblock;
    float *ablock; /* a forward-only executor's activations, by liveness (plan_acts) */
    size_t block_floats, alive_floats, apart_floats; /* nl_exec_memory */
    int *from;
    float **bscratch; /* (nlayers) the scratch of the backward at each place, in dblock */
    float **fscratch; /* (nlayers) the forward's, in dblock; NULL: scratch serves every place */
    /* For nl_exec_backward_blocks: copies of the layers that have statistics, with the offsets
     * of their tensors one after another (setup's), so that their gradient block is compact;
     * NULL where the model's layer serves (no statistics) or when no layer has any. */
    struct nl_layer **plain;
    /* nl_exec_backward_split's split, for the length of that call; else NULL. */
    struct nl_wsplit *(*split)(void *ud, int layer);
    float *scratch;
    size_t scratch_floats; /* a forward-only executor's, in each of scratch and pscratch's parts */
    float *pscratch;       /* nl_exec_split's: the scratch of parts 1 and up, one after another */
    int parts;             /* nl_exec_split's parts; 1 before it */
    struct nl_pool *pool;  /* nl_exec_forward_split's, for the length of that call */
    const float *input;    /* of the last forward */
    float *dinput;         /* (max_n, input): the input's gradient, backward's; NULL: none */
    struct nl_rng *rng;
    unsigned char **rows; /* (nlayers) nl_exec_track_rows's maps, NULL where none */
    /* Folding (see the top of the file), forward-only executors only. into[i]: the layer whose
     * activation buffer layer i's output pass writes (i, or the last layer folded into it);
     * bn[i]: the batchnorm folded into conv i, or -1; actk[i]: NL_ACT_* folded into i; skip[i]:
     * 1 for a folded layer, which does not run; fold: scale and shift (2 * filters floats) of
     * each folding conv, at fold_at[i]. nfolded counts the folded layers. */
    int *into, *bn;
    char *actk, *skip;
    size_t *fold_at;
    float *fold;
    int nfolded;
    /* Fusion (see the top of the file), training executors only. A group is a head h (a
     * batchnorm or an add) with the layers fused into it: fuse[h] is the group's last layer o,
     * whose output and output gradient buffers the group uses, or -1 for a layer that heads no
     * group; radd[h] is the add fused into batchnorm h, or -1. The group runs, forward and
     * backward, at o's place in the order: runs[o] = h, runs[k] = -1 for its other layers (which
     * hold no buffers), runs[k] = k for every layer outside a group. All three NULL when nothing
     * is fused; nfolded counts the layers fused into a head. */
    int *fuse, *radd, *runs;
    int group; /* samples per group of an inference forward (the top); 0: the whole batch */
    const struct nl_prep *prep; /* nl_exec_use_prep's, or NULL */
    double *times;              /* nl_exec_time_layers's, or NULL */
};

/* Prepared weights (nnlab/model.h): one block, each layer's at at[i] (NO_PREP: none). Why: in
 * inference each thread made every Winograd layer's transformed filters in every call (FORWARD_
 * GROUP samples), 4.5% (F(2x2)) and 2.4% (F(4x4)) of the samples of ResNet-18 at 3x64x64, batch
 * 64, two threads. `nnlab bench --model resnet18-64 --mode infer`, alternating with the filters
 * made in every call (2026-11-28, AMD EPYC, load average 0.1 to 1.6), images/s, medians: batch
 * 64 on two threads 1,061 -> 1,136 (five rounds), batch 1 on one thread 126 -> 143 (three). Tried
 * the same day, not kept: layer3 (4x4 planes) by F(4x4, 3x3) where its filters are prepared,
 * whose products are 36 per tile against F(2x2)'s 4 tiles of 16 (a forward of 16 images, one
 * thread, without the filters' transform: 998 us against 1,297 in a small program): in the
 * network its 9.4 MB of prepared filters a layer come from memory, and it ran at 994 to 1,110
 * images/s at batch 64 against 1,102 to 1,153 with F(2x2), 109 against 140 to 145 at batch 1.
 * Fine-tuning ResNet-18 at 3x64x64 with layer1 to layer3 frozen and flipped images (so that
 * every step runs them; batch 32, two threads, 6 epochs of 512 images, three runs alternating):
 * 537, 652 and 639 images/s -> 576, 665 and 670 with their filters prepared. */
#define NO_PREP SIZE_MAX
struct nl_prep {
    const struct nl_model *m;
    const float *params; /* what they were made from */
    float *block;
    size_t floats, *at;
    int layers;
};

int nl_prep_new(struct nl_prep **out, const struct nl_model *m, const float *params, int frozen,
                struct nl_error *err)
{
    struct nl_prep *p = nl_calloc(1, sizeof *p);

    *out = NULL;
    if (!p || !(p->at = nl_calloc((size_t)(m->nlayers > 0 ? m->nlayers : 1), sizeof *p->at))) {
        nl_free(p);
        return nl_error_set(err, NL_ENOMEM, "out of memory for prepared weights");
    }
    p->m = m;
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        const size_t k = l->ops->prep_floats && (l->frozen || !frozen) ? l->ops->prep_floats(l) : 0;
        p->at[i] = NO_PREP;
        if (k == 0 || p->floats + k > NL_PREP_MAX)
            continue;
        p->at[i] = p->floats;
        p->floats += k;
        p->layers++;
    }
    if (p->floats && !(p->block = nl_alloc_floats(p->floats))) {
        nl_prep_free(p);
        return nl_error_set(err, NL_ENOMEM, "out of memory for %zu MB of prepared weights",
                            p->floats * sizeof(float) >> 20);
    }
    nl_prep_fill(p, params);
    *out = p;
    return 0;
}

void nl_prep_fill(struct nl_prep *p, const float *params)
{
    p->params = params;
    for (int i = 0; i < p->m->nlayers; i++) {
        const struct nl_layer *l = &p->m->layers[i];
        if (p->at[i] != NO_PREP)
            l->ops->prep(l, params + l->param_offset, p->block + p->at[i]);
    }
}

size_t nl_prep_floats(const struct nl_prep *p, int *layers)
{
    if (layers)
        *layers = p->layers;
    return p->floats;
}

void nl_prep_free(struct nl_prep *p)
{
    if (!p)
        return;
    nl_free(p->block);
    nl_free(p->at);
    nl_free(p);
}

void nl_exec_use_prep(struct nl_exec *x, const struct nl_prep *p)
{
    x->prep = p && p->m == x->m ? p : NULL;
}

/* Whether executors made from now on fuse (nl_exec_fusion). */
static int fusion_on = 1;

int nl_exec_fusion(int on)
{
    int was = fusion_on;
    fusion_on = on != 0;
    return was;
}

void nl_exec_free(struct nl_exec *x)
{
    if (!x)
        return;
    nl_free(x->ablock);
    nl_free(x->act);
    nl_free(x->dact);
    nl_free(x->aux);
    nl_free_pages(x->aux_pages, x->aux_size);
    nl_free(x->need);
    nl_free(x->pre);
    nl_free(x->zero);
    nl_free(x->set);
    if (x->scratch != x->dblock)
        nl_free(x->scratch);
    nl_free(x->pscratch);
    nl_free(x->dblock);
    nl_free(x->from);
    nl_free(x->bscratch);
    nl_free(x->fscratch);
    for (int i = 0; x->plain && i < x->m->nlayers; i++)
        nl_free(x->plain[i]);
    nl_free(x->plain);
    nl_free(x->rows);
    nl_free(x->into);
    nl_free(x->bn);
    nl_free(x->actk);
    nl_free(x->skip);
    nl_free(x->fold_at);
    nl_free(x->fold);
    nl_free(x->fuse);
    nl_free(x->radd);
    nl_free(x->runs);
    nl_free(x);
}

/* The frozen prefix (include/nnlab/model.h) from x->need, and its features' floats. */
/* Whether layer i of the prefix is read by a layer outside it (find_prefix marks those 2). */
static int is_feature(const struct nl_exec *x, int i)
{
    return x->pre[i] == 2;
}

static int reads_prefix(const struct nl_exec *x, int i)
{
    const struct nl_model *m = x->m;
    if (!x->pre[i])
        return 0;
    for (int k = i + 1; k < m->nlayers; k++)
        for (int j = 0; !x->pre[k] && j < m->layers[k].ninputs; j++)
            if (m->layers[k].inputs[j] == i)
                return 1;
    return 0;
}

static void find_prefix(struct nl_exec *x)
{
    const struct nl_model *m = x->m;
    int reads_input = 0;

    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        int in = !x->need[i] && !(l->ops->stochastic && l->p > 0.0f);
        for (int j = 0; j < l->ninputs; j++)
            if (l->inputs[j] >= 0 && !x->pre[l->inputs[j]])
                in = 0;
        x->pre[i] = (char)in;
    }
    x->features = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        if (x->pre[i])
            continue;
        for (int j = 0; j < l->ninputs; j++)
            reads_input |= l->inputs[j] < 0;
    }
    for (int i = 0; i < m->nlayers && !reads_input && !x->pre[m->nlayers - 1]; i++)
        if (reads_prefix(x, i)) {
            x->pre[i] = 2;
            x->features += nl_shape_size(m->layers[i].out);
        }
    if (x->features == 0)
        memset(x->pre, 0, (size_t)m->nlayers);
}

/* The layer that runs at place k of the order: k itself, the head of the fused group whose last
 * layer k is, or -1 for the other layers of a group. */
static int runs_at(const struct nl_exec *x, int k)
{
    return x->runs ? x->runs[k] : k;
}

/* The inputs read by what runs at place k (runs_at(x, k) >= 0): src[c] is read as input bit[c]
 * of that layer's nl_bwd.set. For a batchnorm with an add fused in, the add's other input is bit
 * 1 (nl_bwd.dres). Returns their count. */
static int inputs_at(const struct nl_exec *x, int k, int *src, int *bit)
{
    const struct nl_model *m = x->m;
    const int h = runs_at(x, k);
    const struct nl_layer *l = &m->layers[h];
    int count = 0;

    for (int j = 0; j < l->ninputs; j++) {
        src[count] = l->inputs[j];
        bit[count++] = j;
    }
    if (x->radd && x->radd[h] >= 0) {
        const struct nl_layer *a = &m->layers[x->radd[h]];
        src[count] = a->inputs[0] == h ? a->inputs[1] : a->inputs[0];
        bit[count++] = 1;
    }
    return count;
}

/* Which activation gradients backward must zero, and which its first writer overwrites: the
 * layer's highest reader in the order backward runs (from the last place down; a fused group
 * reads at its last layer's place), when its kind can overwrite (ops->overwrites) and it reads
 * the layer once. */
static void find_writers(struct nl_exec *x)
{
    const struct nl_model *m = x->m;
    int src[NL_MAX_INPUTS + 1], bit[NL_MAX_INPUTS + 1];

    for (int i = 0; i < m->nlayers; i++) {
        if (x->from[i] < 0)
            continue;
        x->zero[i] = 1;
        x->from[i] = i; /* read by nothing: alive at its own place only */
        for (int k = m->nlayers - 1; k > i; k--) {
            const int h = runs_at(x, k);
            int reads = 0, at = -1;
            if (h < 0)
                continue;
            const int count = inputs_at(x, k, src, bit);
            for (int c = 0; c < count; c++)
                if (src[c] == i) {
                    reads++;
                    at = bit[c];
                }
            if (reads == 0)
                continue;
            x->from[i] = k;
            if (reads == 1 && m->layers[h].ops->overwrites && x->need[k]) {
                x->zero[i] = 0;
                x->set[h] |= 1u << at;
            }
            break;
        }
    }
}

/* The one layer that reads layer i's output, or -1 when none or several do (or one reads it
 * twice), or when i is the model's output. */
static int sole_reader(const struct nl_model *m, int i)
{
    int reader = -1;

    if (i == m->nlayers - 1)
        return -1;
    for (int k = i + 1; k < m->nlayers; k++)
        for (int j = 0; j < m->layers[k].ninputs; j++)
            if (m->layers[k].inputs[j] == i) {
                if (reader >= 0)
                    return -1;
                reader = k;
            }
    return reader;
}

static int activation_kind(const struct nl_layer *l)
{
    if (l->ops == &nl__relu_ops)
        return NL_ACT_RELU;
    if (l->ops == &nl__relu6_ops)
        return NL_ACT_RELU6;
    return NL_ACT_NONE;
}

/* The folding plan (see the top of the file): conv -> [batchnorm] -> [relu | relu6], and
 * add, dense or maxpool -> relu | relu6, each link the sole reader of the layer before it. */
static int plan_folds(struct nl_exec *x)
{
    const struct nl_model *m = x->m;
    size_t floats = 0;

    x->into = nl_calloc((size_t)m->nlayers, sizeof *x->into);
    x->bn = nl_calloc((size_t)m->nlayers, sizeof *x->bn);
    x->actk = nl_calloc((size_t)m->nlayers, 1);
    x->skip = nl_calloc((size_t)m->nlayers, 1);
    x->fold_at = nl_calloc((size_t)m->nlayers, sizeof *x->fold_at);
    if (!x->into || !x->bn || !x->actk || !x->skip || !x->fold_at)
        return -1;
    for (int i = 0; i < m->nlayers; i++) {
        x->into[i] = i;
        x->bn[i] = -1;
    }
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        int end = i, r;
        if (x->skip[i] || !(l->ops->folds & 2))
            continue;
        if (l->ops->folds & 1) {
            r = sole_reader(m, i);
            if (r >= 0 && m->layers[r].ops == &nl__batchnorm_ops) {
                x->bn[i] = r;
                x->skip[r] = 1;
                end = r;
            }
        }
        r = sole_reader(m, end);
        if (r >= 0 && activation_kind(&m->layers[r])) {
            x->actk[i] = (char)activation_kind(&m->layers[r]);
            x->skip[r] = 1;
            end = r;
        }
        x->into[i] = end;
        if (end != i && (l->ops->folds & 1)) {
            x->fold_at[i] = floats;
            floats += 2 * (size_t)l->out.c;
        }
    }
    for (int i = 0; i < m->nlayers; i++)
        x->nfolded += x->skip[i];
    x->fold = nl_alloc_floats(floats ? floats : 1);
    return x->fold ? 0 : -1;
}

/* Whether layers i and k are both in the frozen prefix or both outside it. */
static int same_side(const struct nl_exec *x, int i, int k)
{
    return !x->pre[i] == !x->pre[k];
}

/* The fusion plan of a training executor (see the top of the file), after find_prefix: each
 * layer whose kind fuses takes the add that alone reads it (a batchnorm, the add having two
 * inputs, the other not the batchnorm's own input), then the ReLU or ReLU6 that alone reads what
 * it has so far, each on the same side of the frozen prefix as the head. Returns -1 when out of
 * memory. */
static int plan_fusion(struct nl_exec *x)
{
    const struct nl_model *m = x->m;

    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        if (!l->ops->fuses || runs_at(x, i) != i)
            continue;
        int o = i, a = -1, r = sole_reader(m, i);
        if ((l->ops->fuses & 2) && r >= 0 && runs_at(x, r) == r &&
            m->layers[r].ops == &nl__add_ops && m->layers[r].ninputs == 2 && same_side(x, i, r)) {
            const struct nl_layer *al = &m->layers[r];
            const int other = al->inputs[0] == i ? al->inputs[1] : al->inputs[0];
            if (other != l->inputs[0]) {
                a = o = r;
                r = sole_reader(m, a);
            }
        }
        if (r >= 0 && runs_at(x, r) == r && activation_kind(&m->layers[r]) && same_side(x, i, r))
            o = r;
        if (o == i)
            continue;
        if (!x->runs) {
            x->fuse = nl_calloc((size_t)m->nlayers, sizeof *x->fuse);
            x->radd = nl_calloc((size_t)m->nlayers, sizeof *x->radd);
            x->runs = nl_calloc((size_t)m->nlayers, sizeof *x->runs);
            if (!x->fuse || !x->radd || !x->runs)
                return -1;
            for (int k = 0; k < m->nlayers; k++) {
                x->fuse[k] = x->radd[k] = -1;
                x->runs[k] = k;
            }
        }
        x->fuse[i] = o;
        x->radd[i] = a;
        x->runs[i] = -1;
        if (a >= 0)
            x->runs[a] = -1;
        x->runs[o] = i;
        x->nfolded += (a >= 0) + (o != a);
    }
    return 0;
}

/* Where layer i writes its output and reads its output gradient: its own buffers, or those of
 * the last layer of the group it heads. */
static int output_of(const struct nl_exec *x, int i)
{
    return x->fuse && x->fuse[i] >= 0 ? x->fuse[i] : i;
}

/* Floats of scratch the layer that runs at place k asks for. */
static size_t scratch_at(const struct nl_exec *x, int i)
{
    return nl_layer_scratch(&x->m->layers[i], x->max_n);
}

/* The last slot (see plan_memory) at which anything reads activation j, whose buffer place j
 * owns: forward's readers (a layer's input, or the residual of a fused add), then backward's,
 * which read it as a layer's input or, at place j, as its output; the model's output and the
 * prefix's features to the step's end, the trainer reading them after forward. */
static int last_read(const struct nl_exec *x, int j)
{
    const struct nl_model *m = x->m;
    const int nl = m->nlayers;
    int fwd = j, bwd = nl;

    if (j == nl - 1 || is_feature(x, j))
        return 2 * nl - 1;
    for (int k = j; k < nl; k++) {
        const int i = runs_at(x, k);
        int reads = 0, res = 0;
        if (i < 0)
            continue;
        for (int c = 0; c < m->layers[i].ninputs; c++)
            reads |= m->layers[i].inputs[c] == j;
        if (x->radd && x->radd[i] >= 0) {
            const struct nl_layer *a = &m->layers[x->radd[i]];
            res = (a->inputs[0] == i ? a->inputs[1] : a->inputs[0]) == j;
        }
        if (reads || res)
            fwd = k;
        if (x->need[k] && (reads || k == j) && k < bwd)
            bwd = k;
    }
    return bwd < nl && 2 * nl - 1 - bwd > fwd ? 2 * nl - 1 - bwd : fwd;
}

/* Item k of count (size[k] floats, alive in lives intervals of slots, the v-th from lo[k * lives
 * + v] to hi[k * lives + v], none where lo > hi) in the order given (by decreasing size) at at[k],
 * the lowest offset clear of every item placed before it whose life meets its own; returns the
 * floats of the whole. */
static size_t place_lives(const int *order, int count, const size_t *size, const int *lo,
                          const int *hi, int lives, size_t *at)
{
    size_t total = 0;

    for (int a = 0; a < count; a++) {
        const int k = order[a];
        size_t off = 0;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int b = 0; b < a; b++) {
                const int j = order[b];
                int meet = 0;
                for (int v = 0; v < lives; v++) {
                    const int jv = j * lives + v, kv = k * lives + v;
                    meet |= lo[jv] <= hi[jv] && lo[kv] <= hi[kv] && hi[jv] >= lo[kv] &&
                            hi[kv] >= lo[jv];
                }
                if (meet && off < at[j] + size[j] && at[j] < off + size[k]) {
                    off = at[j] + size[j];
                    moved = 1;
                }
            }
        }
        at[k] = off;
        if (off + size[k] > total)
            total = off + size[k];
    }
    return total;
}

/* A memory plan's items: their offsets, sizes, order of placing, and per lives of slots each. */
struct lives {
    size_t *at, *size;
    int *lo, *hi, *order;
};

/* 1 when v holds items items of per lives each (zeroed), else 0 (out of memory). */
static int lives_new(struct lives *v, int items, int per)
{
    const size_t n = (size_t)items;

    v->at = nl_calloc(n, sizeof *v->at);
    v->size = nl_calloc(n, sizeof *v->size);
    v->lo = nl_calloc(n * (size_t)per, sizeof *v->lo);
    v->hi = nl_calloc(n * (size_t)per, sizeof *v->hi);
    v->order = nl_calloc(n, sizeof *v->order);
    return v->at && v->size && v->lo && v->hi && v->order;
}

static void lives_free(struct lives *v)
{
    nl_free(v->at);
    nl_free(v->size);
    nl_free(v->lo);
    nl_free(v->hi);
    nl_free(v->order);
}

/* Inserts item k into order[0, count), kept by decreasing size; returns the new count. */
static int order_by_size(int *order, int count, const size_t *size, int k)
{
    int a = count;

    while (a > 0 && size[order[a - 1]] < size[k]) {
        order[a] = order[a - 1];
        a--;
    }
    order[a] = k;
    return count + 1;
}

/* Places everything a training executor holds in one block, first fit by decreasing size, two
 * things sharing floats only when their lives do not meet. Lives are counted in slots: forward
 * runs place k at slot k, backward at slot 2L - 1 - k (L layers). Activation j (acts[j] floats,
 * 0 where place j holds none) lives from its place's forward to its last reader (last_read);
 * gradient i (from[i] >= 0, after find_writers) from its first writer's backward, at place
 * from[i], down to place i's; the scratch of each place, forward and backward, at that place
 * alone. Returns -1 when out of memory. */
static int plan_memory(struct nl_exec *x, const size_t *acts)
{
    const struct nl_model *m = x->m;
    const int nl = m->nlayers, most = 4 * nl, end = 2 * nl - 1;
    struct lives v;
    const int made = lives_new(&v, most, 1);
    size_t *at = v.at, *size = v.size, total = 0;
    int *lo = v.lo, *hi = v.hi, *order = v.order, count = 0, rc = -1;

    x->bscratch = nl_calloc((size_t)nl, sizeof *x->bscratch);
    x->fscratch = nl_calloc((size_t)nl, sizeof *x->fscratch);
    if (!made || !x->bscratch || !x->fscratch)
        goto out;
    /* Items [0, L) the activations, [L, 2L) the gradients, 2L + k and 3L + k the backward's and
     * the forward's scratch at place k. */
    for (int k = 0; k < most; k++) {
        const int p = k % nl, i = runs_at(x, p);
        if (k < nl && acts[k] > 0) {
            size[k] = align16(acts[k]);
            lo[k] = is_feature(x, k) ? 0 : k;
            hi[k] = last_read(x, k);
        } else if (k >= nl && k < 2 * nl && x->from[p] >= 0) {
            size[k] = align16((size_t)x->max_n * nl_shape_size(m->layers[p].out));
            lo[k] = end - x->from[p];
            hi[k] = end - p;
        } else if (k >= 2 * nl && k < 3 * nl && i >= 0 && x->need[p] && scratch_at(x, i) > 0) {
            size[k] = align16(scratch_at(x, i));
            lo[k] = hi[k] = end - p;
        } else if (k >= 3 * nl && i >= 0 && scratch_at(x, i) > 0) {
            size[k] = align16(scratch_at(x, i));
            lo[k] = hi[k] = p;
        } else {
            continue;
        }
        count = order_by_size(order, count, size, k);
    }
    for (int s = 0; s <= end; s++) {
        size_t alive = 0;
        for (int k = 0; k < most; k++)
            alive += size[k] > 0 && lo[k] <= s && s <= hi[k] ? size[k] : 0;
        if (alive > x->alive_floats)
            x->alive_floats = alive;
    }
    size_t largest = 0;
    for (int k = 0; k < most; k++) {
        if (k < 2 * nl)
            x->apart_floats += size[k];
        else if (size[k] > largest)
            largest = size[k];
    }
    x->apart_floats += largest;
    total = place_lives(order, count, size, lo, hi, 1, at);
    x->dblock = nl_alloc_floats(total ? total : 1);
    if (!x->dblock)
        goto out;
    x->block_floats = total;
    for (int i = 0; i < nl; i++) {
        x->act[i] = acts[i] > 0 ? x->dblock + at[i] : NULL;
        x->dact[i] = x->from[i] >= 0 ? x->dblock + at[nl + i] : NULL;
        x->bscratch[i] = x->dblock + at[2 * nl + i];
        x->fscratch[i] = x->dblock + at[3 * nl + i];
    }
    x->scratch = x->dblock;
    rc = 0;
out:
    lives_free(&v);
    return rc;
}

/* A forward-only executor's activations (acts[i] floats for layer i) in one block, two sharing
 * floats only when their lives do not meet (place_lives), so that what a layer writes lands where
 * an output that is dead by then was just read, in the caches, rather than in memory of its own.
 * Each buffer has two lives, one in each flow: inference's folded one (forward running layer k at
 * slot k), where only the buffers that folded output passes or unfolded layers write live, from
 * the first such writer to the last layer that runs and reads it; and a forward in training mode,
 * which runs every layer (slot L + 1 + k), each output living from its layer to its last reader.
 * The model's output lives to the end of both (the caller reads it after forward). With groups
 * every layer is done with a group's rows before the next group starts, and only the model's
 * output keeps rows from one group to the next. ResNet-18 at 3x224x224 and one image: 3.8 MiB
 * against 31.4 for every layer's buffer apart, whose writes went to memory no cache held.
 * Returns -1 when out of memory. */
static int plan_acts(struct nl_exec *x, const size_t *acts)
{
    const struct nl_model *m = x->m;
    const int nl = m->nlayers, end = 2 * nl + 1;
    struct lives v;
    const int made = lives_new(&v, nl, 2);
    size_t *at = v.at, *size = v.size;
    int *lo = v.lo, *hi = v.hi, *order = v.order, count = 0, rc = -1;

    if (!made)
        goto out;
    for (int i = 0; i < nl; i++) {
        size[i] = acts[i] > 0 ? align16(acts[i]) : 0;
        lo[2 * i] = nl; /* folded: none until a writer is found */
        hi[2 * i] = -1;
        lo[2 * i + 1] = hi[2 * i + 1] = nl + 1 + i;
    }
    for (int i = 0; i < nl; i++) {
        const int b = x->into[i];
        if (!x->skip[i]) {
            if (i < lo[2 * b])
                lo[2 * b] = i;
            if (hi[2 * b] < i)
                hi[2 * b] = i;
        }
        for (int j = 0; j < m->layers[i].ninputs; j++) {
            const int r = m->layers[i].inputs[j];
            if (r < 0)
                continue;
            if (!x->skip[i] && hi[2 * r] < i)
                hi[2 * r] = i;
            if (hi[2 * r + 1] < nl + 1 + i)
                hi[2 * r + 1] = nl + 1 + i;
        }
    }
    lo[2 * (nl - 1)] = lo[2 * (nl - 1)] < nl ? lo[2 * (nl - 1)] : nl;
    hi[2 * (nl - 1)] = nl;
    hi[2 * (nl - 1) + 1] = end;
    for (int i = 0; i < nl; i++)
        if (size[i] > 0)
            count = order_by_size(order, count, size, i);
    for (int t = 0; t <= end; t++) {
        size_t alive = 0;
        for (int i = 0; i < 2 * nl; i++)
            alive += lo[i] <= t && t <= hi[i] ? size[i / 2] : 0;
        if (alive > x->alive_floats)
            x->alive_floats = alive;
    }
    for (int i = 0; i < nl; i++)
        x->apart_floats += size[i];
    x->block_floats = place_lives(order, count, size, lo, hi, 2, at);
    if (!(x->ablock = nl_alloc_floats(x->block_floats ? x->block_floats : 1)))
        goto out;
    for (int i = 0; i < nl; i++)
        x->act[i] = size[i] > 0 ? x->ablock + at[i] : NULL;
    rc = 0;
out:
    lives_free(&v);
    return rc;
}

/* The layers' aux blocks (max_n * aux_bytes each), each starting on a page of one mapping whose
 * pages become resident only where written: a kind that sizes its aux per sample but writes it
 * once per call (batchnorm: 4C + 1 floats) keeps the rest of it out of the resident set (half a
 * MiB a thread for ResNet-18 at 16 samples). */
static int aux_pages(struct nl_exec *x)
{
    const struct nl_model *m = x->m;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t total = 0;

    for (int i = 0; i < m->nlayers; i++)
        total += ((size_t)x->max_n * m->layers[i].aux_bytes + page - 1) / page * page;
    x->aux_size = total;
    if (total > 0 && !(x->aux_pages = nl_alloc_pages(total)))
        return -1;
    total = 0;
    for (int i = 0; i < m->nlayers; i++) {
        x->aux[i] = m->layers[i].aux_bytes ? x->aux_pages + total : NULL;
        total += ((size_t)x->max_n * m->layers[i].aux_bytes + page - 1) / page * page;
    }
    return 0;
}

/* The copies nl_exec_backward_blocks hands the layers that have statistics (x->plain). */
static int plain_layers(struct nl_exec *x)
{
    const struct nl_model *m = x->m;

    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        if (l->frozen || trainable_count(l) == l->param_count)
            continue;
        if (!x->plain && !(x->plain = nl_calloc((size_t)m->nlayers, sizeof *x->plain)))
            return -1;
        if (!(x->plain[i] = nl_malloc(sizeof *l)))
            return -1;
        *x->plain[i] = *l;
        plain_offsets(x->plain[i]);
    }
    return 0;
}

/* forward_only: no backward will run, so no layer needs an activation gradient. */
static int exec_new(struct nl_exec **out, const struct nl_model *m, int max_n, int forward_only,
                    struct nl_error *err)
{
    struct nl_exec *x = nl_calloc(1, sizeof *x);
    size_t scratch = 0, *acts = NULL, sample_floats = 0;

    *out = NULL;
    if (!x)
        return nl_error_set(err, NL_ENOMEM, "out of memory for an executor");
    x->m = m;
    x->max_n = max_n;
    x->act = nl_calloc((size_t)m->nlayers, sizeof *x->act);
    x->dact = nl_calloc((size_t)m->nlayers, sizeof *x->dact);
    x->aux = nl_calloc((size_t)m->nlayers, sizeof *x->aux);
    x->need = nl_calloc((size_t)m->nlayers, 1);
    x->pre = nl_calloc((size_t)m->nlayers, 1);
    x->zero = nl_calloc((size_t)m->nlayers, 1);
    x->set = nl_calloc((size_t)m->nlayers, sizeof *x->set);
    x->rows = nl_calloc((size_t)m->nlayers, sizeof *x->rows);
    x->from = nl_calloc((size_t)m->nlayers, sizeof *x->from);
    if (!x->act || !x->dact || !x->aux || !x->need || !x->pre || !x->zero || !x->set || !x->rows ||
        !x->from)
        goto oom;
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        x->need[i] = !forward_only && !l->frozen && trainable_count(l) > 0;
        for (int j = 0; !forward_only && j < l->ninputs; j++)
            if (l->inputs[j] >= 0 && x->need[l->inputs[j]])
                x->need[i] = 1;
    }
    if (!forward_only)
        find_prefix(x);
    if (!forward_only && fusion_on && plan_fusion(x) < 0)
        goto oom;
    if (!(acts = nl_calloc((size_t)m->nlayers, sizeof *acts)))
        goto oom;
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        size_t need = nl_layer_scratch(l, max_n);

        /* Gradients only where backward writes them: a layer that backward skips (frozen, with
         * nothing trainable below it) gets none, nor does the last (dlogits stands in). A layer
         * of a fused group other than its last has neither buffer: the last one's serve. */
        int own = runs_at(x, i) >= 0 && output_of(x, i) == i;
        int grad = own && x->need[i] && i < m->nlayers - 1;
        acts[i] = own ? (size_t)max_n * nl_shape_size(l->out) : 0;
        if (own)
            sample_floats += nl_shape_size(l->out);
        x->from[i] = grad ? 0 : -1; /* placed by plan_memory */
        if (need > scratch)
            scratch = need;
    }
    if (aux_pages(x) < 0)
        goto oom;
    if (!forward_only) {
        find_writers(x);
        if (plan_memory(x, acts) < 0 || plain_layers(x) < 0)
            goto oom;
    } else if (!(x->scratch = nl_alloc_floats(scratch)) || plan_folds(x) < 0 ||
               plan_acts(x, acts) < 0) {
        goto oom;
    }
    x->scratch_floats = scratch;
    x->parts = 1;
    nl_free(acts);
    if (forward_only && sample_floats * sizeof(float) > GROUP_SAMPLE_BYTES)
        x->group = FORWARD_GROUP;
    *out = x;
    return 0;
oom:
    nl_free(acts);
    nl_exec_free(x);
    return nl_error_set(err, NL_ENOMEM, "out of memory for activations of %d samples", max_n);
}

int nl_exec_new(struct nl_exec **out, const struct nl_model *m, int max_n, struct nl_error *err)
{
    return exec_new(out, m, max_n, 0, err);
}

int nl_exec_new_forward(struct nl_exec **out, const struct nl_model *m, int max_n,
                        struct nl_error *err)
{
    return exec_new(out, m, max_n, 1, err);
}

/* Layer i's folded scale and shift, written into x->fold: for a conv, its batchnorm's (1 and its
 * bias without one). */
static void fold_make(struct nl_exec *x, const float *params, int i)
{
    const struct nl_layer *l = &x->m->layers[i];

    if (!(l->ops->folds & 1))
        return;
    float *scale = x->fold + x->fold_at[i], *shift = scale + l->out.c;
    const float *bias = l->no_bias ? NULL : params + l->param_offset + l->params[1].offset;
    if (x->bn[i] >= 0) {
        nl__bn_fold(&x->m->layers[x->bn[i]], params + x->m->layers[x->bn[i]].param_offset, bias,
                    scale, shift);
    } else {
        for (int k = 0; k < l->out.c; k++) {
            scale[k] = 1.0f;
            shift[k] = bias ? bias[k] : 0.0f;
        }
    }
}

/* fold_make of every layer whose output pass a forward-only executor folds (the part 0 of a
 * split call or a team, before the parts start). */
static void make_folds(struct nl_exec *x, const float *params)
{
    for (int i = 0; i < x->m->nlayers; i++)
        if (!x->skip[i] && x->into[i] != i)
            fold_make(x, params, i);
}

/* Layer i's folded output pass into f: the activation, and the scale and shift of fold_make,
 * made here unless made already (a split call's part 0 makes every layer's before its parts
 * start, so that none writes them while another reads them). */
static void fold_pass(struct nl_exec *x, const float *params, int i, struct nl_fwd *f, int made)
{
    const struct nl_layer *l = &x->m->layers[i];

    f->act = x->actk[i];
    if (!(l->ops->folds & 1))
        return;
    if (!made)
        fold_make(x, params, i);
    f->scale = x->fold + x->fold_at[i];
    f->shift = f->scale + l->out.c;
}

/* Layer i's forward, its wall time added to x->times where they are kept (part 0's, for a
 * team: the share that, like every other, runs between the same two barriers). */
static void run_forward(struct nl_exec *x, int i, int part, const struct nl_layer *l,
                        const struct nl_fwd *f)
{
    if (!x->times || part != 0) {
        l->ops->forward(l, f);
        return;
    }
    const double t0 = nl_now();
    l->ops->forward(l, f);
    x->times[2 * i] += nl_now() - t0;
}

/* nl_fwd.sync of a split call: the pool's barrier. */
static void meet(void *pool)
{
    nl_pool_barrier(pool);
}

/* Runs layer i forward on the nb samples from s0 of the executor's batch, reading the model's
 * input from x->input and every other input from the activations before it; with fold, into the
 * buffer of the last layer folded into it, with their output pass. */
static void forward_layer(struct nl_exec *x, int i, const float *params, int training, int fold,
                          struct nl_rng *rng, int part, int parts, int s0, int nb)
{
    const struct nl_layer *l = &x->m->layers[i];
    struct nl_fwd f = {
        .n = nb,
        .out = x->act[fold ? x->into[i] : output_of(x, i)] + (size_t)s0 * nl_shape_size(l->out),
        .w = params + l->param_offset,
        .aux = x->aux[i],
        .scratch = x->fscratch && !fold ? x->fscratch[output_of(x, i)] : x->scratch,
        .training = training,
        .rng = rng,
    };
    if ((!training || l->frozen) && x->prep && x->prep->params == params &&
        x->prep->at[i] != NO_PREP)
        f.prep = x->prep->block + x->prep->at[i];
    for (int j = 0; j < l->ninputs; j++)
        f.in[j] = (l->inputs[j] < 0 ? x->input : x->act[l->inputs[j]]) +
                  (size_t)s0 * nl_shape_size(l->in[j]);
    if (fold && x->into[i] != i) {
        fold_pass(x, params, i, &f, parts > 1);
    } else if (!fold && output_of(x, i) != i) { /* a fused group */
        const int o = output_of(x, i), a = x->radd[i];
        f.act = activation_kind(&x->m->layers[o]);
        if (a >= 0) {
            const struct nl_layer *al = &x->m->layers[a];
            const int other = al->inputs[0] == i ? al->inputs[1] : al->inputs[0];
            f.res = other < 0 ? x->input : x->act[other];
        }
    }
    float *first = f.scratch;    /* part 0's */
    if (part > 0 && x->pscratch) /* nl_exec_forward_split: each part's scratch its own */
        f.scratch = x->pscratch + (size_t)(part - 1) * x->scratch_floats;
    if (parts > 1 && l->ops->splits && !training) {
        f.part = part;
        f.parts = parts;
        f.sync = meet;
        f.sync_arg = x->pool;
        f.shared = first;
    } else if (parts > 1 && l->ops->rows) { /* a team's share of the samples */
        size_t lo, hi;
        nl_block_range((size_t)x->n, 1, part, parts, &lo, &hi);
        if (lo >= hi)
            return;
        f.n = (int)(hi - lo);
        for (int j = 0; j < l->ninputs; j++)
            f.in[j] += lo * nl_shape_size(l->in[j]);
        f.out += lo * nl_shape_size(l->out);
    } else if (parts > 1 && l->ops->parts) {
        f.part = part;
        f.parts = parts;
    }
    run_forward(x, i, part, l, &f);
}

const float *nl_exec_forward(struct nl_exec *x, const float *params, const float *in, int n,
                             int training, struct nl_rng *rng)
{
    const struct nl_model *m = x->m;

    const int fold = x->fold && !training;

    x->n = n;
    x->input = in;
    /* inference on a forward-only executor: FORWARD_GROUP samples at a time (the top) */
    const int step = x->group && !training && n > x->group ? x->group : n;
    for (int s0 = 0; s0 == 0 || s0 < n; s0 += step) {
        const int nb = n - s0 < step ? n - s0 : step;
        for (int k = 0; k < m->nlayers; k++) {
            const int i = fold ? k : runs_at(x, k);
            if (i >= 0 && !(fold && x->skip[i]))
                forward_layer(x, i, params, training, fold, rng, 0, 1, s0, nb);
        }
    }
    return x->act[m->nlayers - 1];
}

int nl_exec_split(struct nl_exec *x, int parts, struct nl_error *err)
{
    if (parts < 1)
        return nl_error_set(err, NL_EINVAL, "an executor split in %d parts: at least 1", parts);
    if (x->dblock)
        return nl_error_set(err, NL_EINVAL,
                            "a training executor cannot be split between threads; only a "
                            "forward-only one (nl_exec_new_forward)");
    if (parts == x->parts)
        return 0;
    float *p = NULL;
    if (parts > 1 &&
        !(p = nl_alloc_floats((size_t)(parts - 1) * (x->scratch_floats ? x->scratch_floats : 1))))
        return nl_error_set(err, NL_ENOMEM, "out of memory for the scratch of %d parts", parts);
    nl_free(x->pscratch);
    x->pscratch = p;
    x->parts = parts;
    return 0;
}

const float *nl_exec_forward_split(struct nl_exec *x, const float *params, const float *in, int n,
                                   struct nl_pool *pool, int part, int parts)
{
    const struct nl_model *m = x->m;
    const int fold = x->fold != NULL;

    if (part == 0) {
        x->n = n;
        x->input = in;
        x->pool = pool;
        if (fold)
            make_folds(x, params);
    }
    nl_pool_barrier(pool);
    for (int k = 0; k < m->nlayers; k++) {
        const int i = fold ? k : runs_at(x, k);
        if (i < 0 || (fold && x->skip[i]))
            continue;
        const struct nl_layer_ops *ops = m->layers[i].ops;
        if (part == 0 || ops->splits || ops->parts || ops->rows)
            forward_layer(x, i, params, 0, fold, NULL, part, parts, 0, x->n);
        nl_pool_barrier(pool);
    }
    return x->act[m->nlayers - 1];
}

int nl_exec_forward_samples(const struct nl_exec *x, int n)
{
    return x->group && n > x->group ? x->group : n;
}

void nl_exec_time_layers(struct nl_exec *x, double *seconds)
{
    x->times = seconds;
}

static int team_relu(const struct nl_exec *x, int k);

int nl_exec_runs_in(const struct nl_exec *x, int i, int team)
{
    if (team && i > 0 && team_relu(x, i - 1) == i)
        return i - 1; /* team_forward_relu */
    if (x->runs && x->runs[i] >= 0)
        return x->runs[i];
    for (int j = i; x->runs && j >= 0; j--)
        if (x->fuse[j] >= i)
            return j; /* the head of the group that ends at or after i */
    for (int j = i - 1; x->skip && x->skip[i] && j >= 0; j--)
        if (!x->skip[j] && x->into[j] >= i)
            return j; /* the layer whose output pass i is folded into */
    return i;
}

int nl_exec_team(const struct nl_exec *x)
{
    const struct nl_model *m = x->m;

    if (x->runs || x->features)
        return 0; /* fused groups or a frozen prefix: not for a team */
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        if (l->frozen || !(l->ops->rows || l->ops->parts))
            return 0;
    }
    return 1;
}

/* In training, the ReLU r that alone reads a team's layer k of a kind split by parts (dense)
 * and runs inside k's share (team_forward_relu), else -1. r's output then lies in k's buffer,
 * which the memory plan keeps from k's place to at least r's last reader (last_read), and
 * which nothing else reads (dense's backward reads its input and output gradient alone): r's own
 * buffer would meet k's forward scratch, which the other threads may still be using. */
static int team_relu(const struct nl_exec *x, int k)
{
    const struct nl_model *m = x->m;
    const int r = sole_reader(m, k);

    if (!m->layers[k].ops->parts || r != k + 1 || activation_kind(&m->layers[r]) != NL_ACT_RELU ||
        !x->act[k] || !x->act[r] || !x->need[k] || last_read(x, k) < last_read(x, r))
        return -1;
    return r;
}

/* 1 where a (na floats) and b (nb floats) share a float. */
static int overlaps(const float *a, size_t na, const float *b, size_t nb)
{
    return a < b + nb && b < a + na;
}

/* In a team's backward, the ReLU r = k - 1 between dense layers k and k - 2 that share part of
 * parts runs inside k's share, on the columns [*c0, *c1) of its gradient that k's input gradient
 * share wrote, where k - 2's share reads only those columns (its weight gradient by units, no
 * input gradient): no share then reads what another wrote between k's place and k - 2's, and the
 * barriers after k and after r go. Else -1. Only where nothing is zeroed at r's place or at
 * k - 2's, and r overwrites its input's gradient (k - 2's then writes no activation's: nothing
 * that k's share, still running on another thread, may read). */
static int team_relu_back(const struct nl_exec *x, int k, int part, int parts, int *c0, int *c1)
{
    const struct nl_model *m = x->m;
    const int r = k - 1, d = k - 2;

    if (parts <= 1 || d < 0 || m->layers[k].ops != &nl__dense_ops ||
        m->layers[d].ops != &nl__dense_ops || activation_kind(&m->layers[r]) != NL_ACT_RELU ||
        !m->layers[r].ops->rows || m->layers[k].inputs[0] != r || m->layers[r].inputs[0] != d ||
        sole_reader(m, r) != k || !x->need[k] || !x->need[r] || !x->need[d] || !(x->set[r] & 1) ||
        runs_at(x, k) != k || runs_at(x, r) != r || runs_at(x, d) != d)
        return -1;
    const int src = m->layers[d].inputs[0];
    if (src < 0 ? x->dinput != NULL : x->need[src])
        return -1; /* d's share writes its input's gradient, by features: all of dout */
    for (int i = 0; i < m->nlayers; i++)
        if ((x->from[i] == r || x->from[i] == d) && x->zero[i])
            return -1;
    /* The plan (plan_memory) may give d's gradient, alive from r's place on, the floats of what
     * k's shares still read or write: k's output gradient and input, r's gradient. */
    const size_t n = (size_t)x->n, fd = n * nl_shape_size(m->layers[d].out);
    const size_t fr = n * nl_shape_size(m->layers[r].out);
    const size_t fk = n * nl_shape_size(m->layers[k].out);
    if (overlaps(x->dact[d], fd, x->act[r], fr) || overlaps(x->dact[d], fd, x->dact[r], fr) ||
        (k < m->nlayers - 1 && overlaps(x->dact[d], fd, x->dact[k], fk)))
        return -1;
    int d0, d1;
    if (!nl__dense_din_cols(&m->layers[k], x->n, x->set[k] & 1, part, parts, c0, c1) ||
        !nl__dense_dout_cols(&m->layers[d], x->n, part, parts, &d0, &d1) || d0 != *c0 || d1 != *c1)
        return -1;
    return r;
}

/* A team's share of layer k (dense, one input) and of the ReLU r that alone reads it, with no
 * barrier between them: the share's outputs go into k's buffer, r's output from now on, and
 * through the ReLU there (the layer's f.act in training). */
static void team_forward_relu(struct nl_exec *x, int k, const float *params, struct nl_rng *rng,
                              int part, int parts)
{
    const struct nl_layer *l = &x->m->layers[k];
    struct nl_fwd f = {
        .n = x->n,
        .out = x->act[k],
        .w = params + l->param_offset,
        .aux = x->aux[k],
        .scratch = x->fscratch ? x->fscratch[k] : x->scratch,
        .training = 1,
        .rng = rng,
        .act = NL_ACT_RELU,
        .part = part,
        .parts = parts,
    };
    f.in[0] = l->inputs[0] < 0 ? x->input : x->act[l->inputs[0]];
    run_forward(x, k, part, l, &f);
}

const float *nl_exec_forward_team(struct nl_exec *x, const float *params, const float *in, int n,
                                  int training, struct nl_rng *rng, struct nl_pool *pool, int part,
                                  int parts)
{
    const struct nl_model *m = x->m;

    const int fold = x->fold && !training;
    if (part == 0) {
        x->n = n;
        x->input = in;
        for (int k = 0; training && k < m->nlayers; k++) {
            const int r = team_relu(x, k);
            if (r >= 0)
                x->act[r] = x->act[k]; /* as the ReLU in place: the same floats */
        }
        if (fold)
            make_folds(x, params);
    }
    nl_pool_barrier(pool);
    for (int k = 0; k < m->nlayers; k++) {
        if (fold && x->skip[k])
            continue;
        const int r = training ? team_relu(x, k) : -1;
        if (r >= 0) {
            team_forward_relu(x, k, params, rng, part, parts);
            k = r;
        } else {
            forward_layer(x, k, params, training, fold, rng, part, parts, 0, x->n);
        }
        nl_pool_barrier(pool);
    }
    return x->act[m->nlayers - 1];
}

int nl_exec_team_rows(const struct nl_exec *x, int i, int part, int parts, int *lo, int *hi)
{
    const struct nl_layer *l = &x->m->layers[i];

    if (l->ops == &nl__dense_ops)
        return nl__dense_units(l, x->n, part, parts, lo, hi);
    *lo = 0;
    *hi = part == 0;
    return 1;
}

void nl_exec_memory(const struct nl_exec *x, size_t *block, size_t *alive, size_t *apart)
{
    *block = x->block_floats;
    *alive = x->alive_floats;
    *apart = x->apart_floats;
}

int nl_exec_folded(const struct nl_exec *x)
{
    return x->nfolded;
}

size_t nl_exec_prefix(const struct nl_exec *x)
{
    return x->features;
}

int nl_exec_prefix_layers(const struct nl_exec *x, int *last)
{
    int count = 0;
    *last = -1;
    for (int i = 0; x->features && i < x->m->nlayers; i++)
        if (x->pre[i]) {
            count++;
            *last = i;
        }
    return count;
}

int nl_exec_in_prefix(const struct nl_exec *x, int i)
{
    return x->pre[i] != 0;
}

void nl_exec_features(const struct nl_exec *x, int s, float *row)
{
    const struct nl_model *m = x->m;
    for (int i = 0; i < m->nlayers; i++) {
        if (!is_feature(x, i))
            continue;
        const size_t size = nl_shape_size(m->layers[i].out);
        memcpy(row, x->act[i] + (size_t)s * size, size * sizeof(float));
        row += size;
    }
}

const float *nl_exec_forward_head(struct nl_exec *x, const float *params, const float *features,
                                  int n, int training, struct nl_rng *rng)
{
    const struct nl_model *m = x->m;
    size_t at = 0;

    /* The features back into the prefix's output buffers, (n, out) each. */
    for (int i = 0; i < m->nlayers; i++) {
        if (!is_feature(x, i))
            continue;
        const size_t size = nl_shape_size(m->layers[i].out);
        for (int s = 0; s < n; s++)
            memcpy(x->act[i] + (size_t)s * size, features + (size_t)s * x->features + at,
                   size * sizeof(float));
        at += size;
    }
    x->n = n;
    x->input = NULL; /* no layer outside the prefix reads it */
    for (int k = 0; k < m->nlayers; k++)
        if (!x->pre[k] && runs_at(x, k) >= 0)
            forward_layer(x, runs_at(x, k), params, training, 0, rng, 0, 1, 0, x->n);
    return x->act[m->nlayers - 1];
}

void nl_exec_backward(struct nl_exec *x, const float *params, const float *dlogits, float *dparams)
{
    nl_exec_backward_hook(x, params, dlogits, dparams, NULL, NULL);
}

/* Backward into dparams, or (block not NULL) into the blocks block(ud, i) gives, or where
 * x->split(ud, i) gives one, split between the threads. */
static void backward(struct nl_exec *x, const float *params, const float *dlogits, float *dparams,
                     float *(*block)(void *ud, int layer), void (*done)(void *ud, int layer),
                     void *ud, struct nl_pool *pool, int part, int parts);

void nl_exec_backward_hook(struct nl_exec *x, const float *params, const float *dlogits,
                           float *dparams, void (*done)(void *ud, int layer), void *ud)
{
    backward(x, params, dlogits, dparams, NULL, done, ud, NULL, 0, 1);
}

void nl_exec_backward_blocks(struct nl_exec *x, const float *params, const float *dlogits,
                             float *(*block)(void *ud, int layer),
                             void (*done)(void *ud, int layer), void *ud)
{
    backward(x, params, dlogits, NULL, block, done, ud, NULL, 0, 1);
}

void nl_exec_backward_split(struct nl_exec *x, const float *params, const float *dlogits,
                            float *(*block)(void *ud, int layer),
                            struct nl_wsplit *(*split)(void *ud, int layer),
                            void (*done)(void *ud, int layer), void *ud)
{
    x->split = split;
    backward(x, params, dlogits, NULL, block, done, ud, NULL, 0, 1);
    x->split = NULL;
}

int nl_exec_split_columns(const struct nl_model *m, int i)
{
    const struct nl_layer *l = &m->layers[i];
    return l->frozen || !l->ops->split ? 0 : l->ops->split(l);
}

void nl_exec_backward_team(struct nl_exec *x, const float *params, const float *dlogits,
                           float *dparams, struct nl_pool *pool, int part, int parts)
{
    backward(x, params, dlogits, dparams, NULL, NULL, NULL, pool, part, parts);
}

int nl_exec_block_at(const struct nl_exec *x, int k)
{
    const int i = runs_at(x, k);
    if (i < 0 || !x->need[k] || x->m->layers[i].frozen || x->m->layers[i].param_count == 0)
        return -1;
    return i;
}

size_t nl_exec_block_floats(const struct nl_model *m, int i, size_t *trainable)
{
    const struct nl_layer *l = &m->layers[i];
    if (trainable)
        *trainable = l->frozen ? 0 : trainable_count(l);
    return l->frozen ? 0 : l->param_count;
}

/* With a pool, a team's share part of parts (nl_exec_backward_team): each zeroing and each layer
 * split between the team's threads, with a barrier after each. */
static void backward(struct nl_exec *x, const float *params, const float *dlogits, float *dparams,
                     float *(*block)(void *ud, int layer), void (*done)(void *ud, int layer),
                     void *ud, struct nl_pool *pool, int part, int parts)
{
    const struct nl_model *m = x->m;
    const int n = x->n, last = m->nlayers - 1;

    for (int k = last; k >= 0; k--) {
        /* Activation gradients accumulate from every consumer: they start at zero where their
         * life starts (they share memory), except the logits', which is dlogits itself, and
         * those whose first writer overwrites them (find_writers). */
        int zeroed = 0;
        for (int i = 0; i <= k; i++) {
            if (x->from[i] != k || !x->zero[i])
                continue;
            size_t lo = 0, hi = (size_t)n * nl_shape_size(m->layers[i].out);
            if (pool)
                nl_block_range(hi, 16, part, parts, &lo, &hi);
            memset(x->dact[i] + lo, 0, (hi - lo) * sizeof(float));
            zeroed = 1;
        }
        if (pool && zeroed)
            nl_pool_barrier(pool);
        /* What runs at place k: layer k, or the head i of the fused group ending at k. */
        const int i = runs_at(x, k);
        if (i < 0 || !x->need[k]) {
            if (done)
                done(ud, k);
            continue; /* nothing below it, nor it, is trained; or its group's head runs it */
        }
        const struct nl_layer *l = &m->layers[i];
        float *dw = NULL;
        struct nl_wsplit *ws = NULL;
        if (!l->frozen && !block)
            dw = dparams + l->param_offset;
        else if (!l->frozen && l->param_count > 0 && x->split && nl_exec_split_columns(m, i) > 0)
            ws = x->split(ud, i);
        if (!l->frozen && block && !ws && l->param_count > 0)
            dw = block(ud, i);
        if (block && x->plain && x->plain[i])
            l = x->plain[i]; /* its gradient block is compact; backward reads no statistic */
        struct nl_bwd b = {
            .n = n,
            .out = x->act[k],
            .dout = k == last ? dlogits : x->dact[k],
            .act = k != i ? activation_kind(&m->layers[k]) : NL_ACT_NONE,
            .w = params + l->param_offset,
            .dw = dw,
            .aux = x->aux[i],
            .scratch = x->bscratch ? x->bscratch[k] : x->scratch,
            .set = x->set[i],
            .rows = x->rows ? x->rows[i] : NULL,
            .split = ws,
        };
        for (int j = 0; j < l->ninputs; j++) {
            int src = l->inputs[j];
            b.in[j] = src < 0 ? x->input : x->act[src];
            b.din[j] = src < 0 ? x->dinput : !x->need[src] ? NULL : x->dact[src];
        }
        if (k != i && x->radd[i] >= 0) { /* the fused add's other input */
            const struct nl_layer *al = &m->layers[x->radd[i]];
            const int other = al->inputs[0] == i ? al->inputs[1] : al->inputs[0];
            b.dres = other < 0 || !x->need[other] ? NULL : x->dact[other];
        }
        if (pool && parts > 1 && l->ops->rows) { /* the team's share of the samples */
            size_t lo, hi;
            nl_block_range((size_t)n, 1, part, parts, &lo, &hi);
            const size_t out = nl_shape_size(l->out);
            b.n = (int)(hi - lo);
            b.out += lo * out;
            b.dout += lo * out;
            for (int j = 0; j < l->ninputs; j++) {
                b.in[j] += lo * nl_shape_size(l->in[j]);
                if (b.din[j])
                    b.din[j] += lo * nl_shape_size(l->in[j]);
            }
        } else if (pool && parts > 1 && l->ops->parts) {
            b.part = part;
            b.parts = parts;
        }
        if ((!pool || b.n > 0) && x->times && part == 0) {
            const double t0 = nl_now();
            l->ops->backward(l, &b);
            x->times[2 * i + 1] += nl_now() - t0;
        } else if (!pool || b.n > 0) {
            l->ops->backward(l, &b);
        }
        int c0, c1;
        const int r = pool ? team_relu_back(x, k, part, parts, &c0, &c1) : -1;
        if (r >= 0) { /* the ReLU's share, from the gradient this share wrote: no barrier */
            const size_t f = nl_shape_size(m->layers[r].out);
            const double t0 = x->times && part == 0 ? nl_now() : 0.0;
            for (int s = 0; s < n; s++)
                nl_relu_backward(x->dact[r - 1] + s * f + c0, x->act[r] + s * f + c0,
                                 x->dact[r] + s * f + c0, (size_t)(c1 - c0), 1);
            if (x->times && part == 0) /* with its forward, in the dense layer below it */
                x->times[2 * (r - 1) + 1] += nl_now() - t0;
            if (done) {
                done(ud, k);
                done(ud, r);
            }
            k = r;
            continue;
        }
        if (pool)
            nl_pool_barrier(pool);
        if (done)
            done(ud, k);
    }
}

int nl_exec_input_grad(struct nl_exec *x, float *din)
{
    const struct nl_model *m = x->m;
    int reader = -1, reads = 0, at = 0;

    x->dinput = din;
    for (int i = 0; i < m->nlayers; i++)
        for (int j = 0; j < m->layers[i].ninputs; j++)
            if (m->layers[i].inputs[j] < 0) {
                reader = i;
                reads++;
                at = j;
            }
    /* find_writers's rule: the sole reader, reading it once, overwrites where its kind can. */
    if (reads == 1 && runs_at(x, reader) == reader && m->layers[reader].ops->overwrites &&
        x->need[reader]) {
        x->set[reader] |= 1u << at;
        return 0;
    }
    return 1;
}

void nl_exec_track_rows(struct nl_exec *x, int i, unsigned char *rows)
{
    x->rows[i] = rows;
}

void nl_exec_backward_cost(const struct nl_exec *x, int *layers, size_t *weight_floats)
{
    *layers = 0;
    *weight_floats = 0;
    for (int i = 0; i < x->m->nlayers; i++) {
        const struct nl_layer *l = &x->m->layers[i];
        if (!x->need[i])
            continue;
        (*layers)++;
        if (!l->frozen)
            *weight_floats += trainable_count(l);
    }
}
