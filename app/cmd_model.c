/* The model commands — summary, export — and what the training commands share for building
 * models and loading weights into them (--init). */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "core/formats/json.h"
#include "nnlab-config.h"
#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/model.h"
#include "nnlab/onnx.h"
#include "nnlab/runs.h"
#include "nnlab/safetensors.h"
#include "nnlab/spec.h"
#include "nnlab/text.h"

int build_model(struct nl_model **m, const char *model, const char *spec_text,
                const struct nl_dataset *d, struct nl_error *err)
{
    struct nl_spec *spec;
    int rc = spec_text ? nl_spec_parse(&spec, spec_text, model, warn_cb, NULL, err)
                       : nl_spec_load(&spec, model, warn_cb, NULL, err);
    if (rc < 0)
        return rc;
    nl_spec_use(spec, d);
    rc = nl_model_build(m, spec, d->shape, d->nclasses, err);
    nl_spec_free(spec);
    return rc;
}

int load_init(struct nl_store *store, struct nl_model *m, const char *init, int partial,
              struct nl_error *err)
{
    struct nl_safetensors_report rep = {0};
    struct stat st;
    int rc;

    if (stat(init, &st) == 0 || strchr(init, '/') || strstr(init, ".safetensors")) {
        rc = nl_safetensors_load(m, init, partial, warn_cb, NULL, &rep, err);
    } else {
        struct nl_run_info run;
        struct nl_model *src;
        char what[160];
        rc = nl_run_model(store, init, 1, warn_cb, NULL, &run, &src, err);
        if (rc < 0)
            return nl_error_prefix(err, "--init");
        snprintf(what, sizeof what, "run '%s'", run.name);
        rc = nl_weights_copy(m, src, what, partial, warn_cb, NULL, &rep, err);
        nl_model_free(src);
    }
    if (rc < 0)
        return rc;
    char ib[4096];
    if (!g.json && !g.quiet)
        printf("initialised %d tensors from %s%s\n", rep.loaded, nl_term_str(ib, sizeof ib, init),
               rep.skipped ? " (the others keep their fresh initialisation)" : "");
    return 0;
}

/* ONNX needs the dataset's normalisation, which the graph applies to its input. */
static int export_onnx(struct nl_store *store, const struct nl_model *m,
                       const struct nl_run_info *run, const char *path, struct nl_error *err)
{
    struct nl_dataset *d = NULL;
    char doc[1024];
    int rc = nl_dataset_load(store, run->dataset, &d, err);

    if (rc < 0)
        return nl_error_prefix(err, "export");
    snprintf(doc, sizeof doc, "run '%s' of nnlab: model %s on dataset '%s'", run->name, run->model,
             run->dataset);
    struct nl_onnx_opts o = {
        .nnorm = d->nnorm,
        .mean = d->mean,
        .std = d->std,
        .scale = d->dtype == NL_U8 ? 1.0f / 255.0f : 1.0f,
        .class_names = (const char *const *)d->class_names,
        .producer_version = NNLAB_VERSION,
        .doc = doc,
        .regression = d->regression,
        .target_mean = d->target_mean,
        .target_std = d->target_std,
    };
    rc = nl_onnx_save(m, &o, path, err);
    nl_dataset_free(d);
    return rc;
}

int cmd_export(int argc, char **argv)
{
    struct nl_error err = {0};
    struct nl_store *store;
    struct nl_run_info run;
    struct nl_model *m = NULL;

    if (argc != 3)
        return usage_error("export", "needs a RUN and a FILE.safetensors or FILE.onnx");
    const char *path = argv[2];
    const size_t len = strlen(path);
    const int onnx = len > 5 && strcmp(path + len - 5, ".onnx") == 0;
    if (open_store_read(&store, &err) < 0)
        return fail(&err);
    int rc = nl_run_model(store, argv[1], 1, warn_cb, NULL, &run, &m, &err);
    if (rc == 0)
        rc = onnx ? export_onnx(store, m, &run, path, &err) : nl_safetensors_save(m, path, &err);
    nl_store_close(store);
    if (rc < 0) {
        nl_model_free(m);
        return fail(&err);
    }
    size_t count = nl_model_count_params(m);
    nl_model_free(m);
    if (g.json) {
        printf("{\"run\":");
        json_str(stdout, run.name);
        printf(",\"file\":");
        json_str(stdout, path);
        printf(",\"format\":\"%s\",\"parameters\":%zu}\n", onnx ? "onnx" : "safetensors", count);
    } else if (!g.quiet) {
        char pb[4096];
        printf("wrote %zu parameters of run '%s' to %s%s\n", count, run.name,
               nl_term_str(pb, sizeof pb, path), onnx ? " (ONNX, opset 10)" : "");
    }
    return EXIT_OK;
}

static const char *kind_of(const struct nl_layer *l)
{
    return l->ops->kind;
}

int cmd_summary(int argc, char **argv)
{
    int vocab = 0;                         /* of --data, when it is text */
    int embed_columns = 0, embed_rows = 0; /* of --data, when it has embedded columns */
    static const struct option opts[] = {
        {"data", required_argument, NULL, 'd'},         {"input", required_argument, NULL, 'i'},
        {"classes", required_argument, NULL, 'k'},      {"freeze", required_argument, NULL, 'F'},
        {"freeze-up-to", required_argument, NULL, 'U'}, {NULL, 0, NULL, 0},
    };
    struct nl_error err = {0};
    struct nl_shape shape = {1, 28, 28};
    long nclasses = 10;
    char target[128] = ""; /* a regression dataset's target column */
    const char *data = NULL, *up_to = NULL, *names[256];
    char *freeze = NULL;
    int c, nfreeze = 0;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'd') {
            data = optarg;
        } else if (c == 'i') {
            char tail;
            if (sscanf(optarg, "%dx%dx%d%c", &shape.c, &shape.h, &shape.w, &tail) != 3 ||
                shape.c < 1 || shape.h < 1 || shape.w < 1 || shape.c > 4096 || shape.h > 65536 ||
                shape.w > 65536)
                return usage_error("summary", "--input %s: want CxHxW, e.g. 1x28x28", optarg);
        } else if (c == 'k') {
            if (!parse_int(optarg, 2, 1000000, &nclasses))
                return usage_error("summary", "--classes %s: want a whole number from 2", optarg);
        } else if (c == 'F') {
            freeze = optarg;
        } else if (c == 'U') {
            up_to = optarg;
        } else {
            return option_error("summary");
        }
    }
    for (char *save = NULL, *tok = freeze ? strtok_r(freeze, ",", &save) : NULL; tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (nfreeze == 256)
            return usage_error("summary", "--freeze: more than 256 layers");
        names[nfreeze++] = tok;
    }
    if (argc - optind != 1)
        return usage_error("summary", "needs one MODEL");
    const char *model = argv[optind];
    if (data) {
        struct nl_store *store;
        struct nl_dataset_info info;
        if (open_store_read(&store, &err) < 0)
            return fail(&err);
        int rc = nl_dataset_info(store, data, &info, &err);
        nl_store_close(store);
        if (rc < 0)
            return fail(&err);
        shape = info.shape;
        nclasses = info.nclasses;
        vocab = info.nvocab;
        embed_columns = info.embed_columns;
        embed_rows = info.embed_rows;
        if (info.regression)
            snprintf(target, sizeof target, "%s", info.target);
    }
    /* Shapes and counts only: no parameters are allocated, whatever the model's size. */
    struct nl_model *m;
    struct nl_spec *spec;
    if (nl_spec_load(&spec, model, warn_cb, NULL, &err) < 0)
        return fail(&err);
    spec->vocab = vocab;
    spec->embed_columns = embed_columns;
    spec->embed_rows = embed_rows;
    spec->data = data; /* checked against the dataset when there is one */
    int built = nl_model_plan(&m, spec, shape, (int)nclasses, &err);
    nl_spec_free(spec);
    if (built < 0)
        return fail(&err);
    if ((nfreeze || up_to) && nl_model_freeze(m, names, nfreeze, up_to, &err) < 0) {
        nl_model_free(m);
        return fail(&err);
    }

    size_t total = nl_model_count_params(m), trainable = nl_model_count_trainable(m);
    if (g.json) {
        printf("{\"model\":");
        json_str(stdout, model);
        printf(",\"input\":[%d,%d,%d],", shape.c, shape.h, shape.w);
        if (target[0]) {
            printf("\"target\":");
            json_str(stdout, target);
        } else
            printf("\"classes\":%ld", nclasses);
        printf(",\"layers\":[");
        for (int i = 0; i < m->nlayers; i++) {
            const struct nl_layer *l = &m->layers[i];
            printf("%s{\"name\":", i ? "," : "");
            json_str(stdout, l->name);
            printf(",\"kind\":");
            json_str(stdout, kind_of(l));
            printf(",\"inputs\":[");
            for (int j = 0; j < l->ninputs; j++) {
                printf(j ? "," : "");
                json_str(stdout, l->inputs[j] < 0 ? "input" : m->layers[l->inputs[j]].name);
            }
            printf("],\"output\":[%d,%d,%d],\"params\":%zu,\"trainable\":%s}", l->out.c, l->out.h,
                   l->out.w, l->param_count, l->frozen ? "false" : "true");
        }
        printf("],\"params\":%zu,\"trainable\":%zu}\n", total, trainable);
    } else {
        char mb[4096];
        char tb[160];
        printf("%s for %dx%dx%d inputs, ", nl_term_str(mb, sizeof mb, model), shape.c, shape.h,
               shape.w);
        if (target[0])
            printf("regression of '%s'\n\n", nl_term_str(tb, sizeof tb, target));
        else
            printf("%ld classes\n\n", nclasses);
        /* Columns as wide as the longest name (module paths such as layer2.0.downsample.1). */
        int wname = 16, win = 16;
        for (int i = 0; i < m->nlayers; i++) {
            const struct nl_layer *l = &m->layers[i];
            int len = -1;
            if ((int)strlen(l->name) > wname)
                wname = (int)strlen(l->name);
            for (int j = 0; j < l->ninputs; j++)
                len += 1 + (int)strlen(l->inputs[j] < 0 ? "input" : m->layers[l->inputs[j]].name);
            if (len > win)
                win = len;
        }
        printf("%-*s %-13s %-*s %-14s %10s  %s\n", wname, "LAYER", "KIND", win, "INPUT", "OUTPUT",
               "PARAMS", "TRAINABLE");
        for (int i = 0; i < m->nlayers; i++) {
            const struct nl_layer *l = &m->layers[i];
            char out[48], in[NL_MAX_INPUTS * NL_NAME_MAX + 8] = "";
            size_t len = 0;
            snprintf(out, sizeof out, "%dx%dx%d", l->out.c, l->out.h, l->out.w);
            for (int j = 0; j < l->ninputs; j++)
                len += (size_t)snprintf(in + len, sizeof in - len, "%s%s", j ? "," : "",
                                        l->inputs[j] < 0 ? "input" : m->layers[l->inputs[j]].name);
            char nb[256], ib[sizeof in * 4];
            printf("%-*s %-13s %-*s %-14s %10zu  %s\n", wname, nl_term_str(nb, sizeof nb, l->name),
                   kind_of(l), win, nl_term_str(ib, sizeof ib, in), out, l->param_count,
                   l->param_count ? (l->frozen ? "no" : "yes") : "-");
        }
        printf("\n%zu parameters, %zu trainable\n", total, trainable);
    }
    nl_model_free(m);
    return EXIT_OK;
}
