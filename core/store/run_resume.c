/* A run's training settings as the store keeps them, and resuming a run from its latest
 * checkpoint: what `nnlab train --resume RUN` and the desktop window's Resume share.
 *
 * The settings are one flat JSON object (but for "input", "frozen" and "augment"):
 *   epochs, batch, optim ("sgd", ...), schedule (nl_schedule_format's text), warmup (epochs),
 *   lr, momentum, nesterov, weight_decay, threads (0: all cores), seed, input [c, h, w],
 *   classes, vocab (a text dataset's vocabulary size; 0 or absent for others), embedded
 *   {columns, rows} (a table's embedded columns, for embed-columns; absent for none), clip_value,
 *   clip_norm, frozen [layer names], augment {flip, crop, resized_crop,
 *   brightness, contrast, saturation (the last four only when on)},
 *   early_stop_acc, patience, on_nan ("stop" | "skip-batch"), checkpoint_every (steps; 0: per
 *   epoch), compress ("bf16" or "none": a cluster run's exchange), cluster (trained on hosts),
 *   skipped_batches (over the run so far), loss ("default", "xent", "mse", "mae" or
 *   "huber"); also beta1, beta2, eps and alpha, the optimizer's.
 * Every member but input, classes, embedded, frozen, cluster and skipped_batches is a row of the
 * table of settings (nl_settings, core/store/settings.c), which also writes them for cluster
 * workers. Floats are written with 9 significant digits, which give the same float back; a reader
 * takes a missing key as its default, so older runs still resume. nl_run_model reads input,
 * classes, vocab, embedded and frozen; nl_run_settings_parse the rest.
 *
 * A resumed run continues in its own record: its model (spec, shape, frozen layers) and
 * settings are the run's, its weights, optimizer state and step count the latest checkpoint's.
 * The accuracy each completed epoch was judged on comes from the stored epochs (for plateau
 * schedules and early stopping); an epoch whose record a kill lost gets its validation accuracy
 * from the checkpoint again (a count over a fixed split, so exact). A cluster run resumes on
 * hosts only (its checkpoints carry the optimizer state gathered from the workers), a local run
 * only locally.
 *
 * Front ends may add keys of their own to a run's settings (the window adds "init", where its
 * weights started, and "hosts", the hosts it trained on). Rewriting the settings keeps them:
 * nl_run_set_settings, and so nl_run_reopen, keeps every key of the stored settings that the new
 * ones lack (nl_run_settings_keep), in its stored order after the new ones. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/formats/json.h"
#include "nnlab/alloc.h"
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "nnlab/text.h"

static int json_flag(const struct nl_json *root, const char *key)
{
    const struct nl_json *v = nl_json_get(root, key);
    return v && v->type == NL_JSON_BOOL && v->boolean;
}

/* A setting's value in the settings object (a member of "augment" for "augment.X"), or NULL. */
static const struct nl_json *setting_value(const struct nl_json *root, const char *name)
{
    const char *dot = strchr(name, '.');
    char group[32];

    if (!dot)
        return nl_json_get(root, name);
    snprintf(group, sizeof group, "%.*s", (int)(dot - name), name);
    return nl_json_get(nl_json_get(root, group), dot + 1);
}

/* The options from a parsed settings object, through the table of settings. */
static int settings_opts(const struct nl_json *root, const char *run, struct nl_train_opts *o,
                         long *skipped, int *cluster, struct nl_error *err)
{
    nl_train_defaults(o);
    if (!root || root->type != NL_JSON_OBJECT || !nl_json_get(root, "optim") ||
        !nl_json_get(root, "schedule") || !nl_json_get(root, "epochs") ||
        !nl_json_get(root, "batch") || !nl_json_get(root, "lr") || !nl_json_get(root, "seed"))
        return nl_error_set(err, NL_EFORMAT, "run '%s': its settings lack the training options",
                            run);
    for (int i = 0; i < nl_nsettings; i++) {
        const struct nl_setting *f = &nl_settings[i];
        const struct nl_json *v = setting_value(root, f->name);
        char text[64];
        const char *t = text;
        if (!v)
            continue;
        if (v->type == NL_JSON_STRING && nl_setting_is_text(f))
            t = v->string;
        else if (v->type == NL_JSON_BOOL && !nl_setting_is_text(f))
            t = v->boolean ? "true" : "false";
        else if (v->type == NL_JSON_NUMBER && v->is_integer)
            snprintf(text, sizeof text, "%lld", (long long)v->integer);
        else if (v->type == NL_JSON_NUMBER)
            snprintf(text, sizeof text, "%.17g", v->number);
        else
            return nl_error_set(err, NL_EFORMAT, "run '%s': its settings: %s has the wrong type",
                                run, f->name);
        if (nl_setting_parse(f, o, t, err) < 0) {
            char why[NL_ERR_MAX];
            snprintf(why, sizeof why, "%s", err->msg);
            return nl_error_set(err, NL_EFORMAT, "run '%s': its settings: %s", run, why);
        }
    }
    const struct nl_json *sk = nl_json_get(root, "skipped_batches");
    *skipped = sk && sk->type == NL_JSON_NUMBER ? (long)sk->number : 0;
    *cluster = json_flag(root, "cluster");
    return nl_optim_validate(&o->optim, err);
}

int nl_run_settings_parse(const char *settings_json, const char *run, struct nl_train_opts *o,
                          long *skipped, int *cluster, struct nl_error *err)
{
    struct nl_json_doc *doc = NULL;
    long sk = 0;
    int cl = 0;
    int rc = nl_json_parse(&doc, settings_json, strlen(settings_json), "run settings", err);

    if (rc == 0)
        rc = settings_opts(nl_json_root(doc), run, o, &sk, &cl, err);
    nl_json_free(doc);
    if (skipped)
        *skipped = sk;
    if (cluster)
        *cluster = cl;
    return rc;
}

/* A growing string for nl_run_settings_keep; failed once an allocation fails. */
struct sbuf {
    char *s;
    size_t len, cap;
    int failed;
};

static void sb_add(struct sbuf *b, const char *t, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *s = nl_realloc(b->s, cap);
        if (!s) {
            b->failed = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->len, t, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *t)
{
    sb_add(b, t, strlen(t));
}

static void sb_put(void *ud, const char *p, size_t n)
{
    sb_add(ud, p, n);
}

static void sb_json_string(struct sbuf *b, const char *t)
{
    nl_json_write(sb_put, b, t);
}

char *nl_run_settings_format(const struct nl_train_opts *o, const struct nl_model *m,
                             struct nl_shape shape, int nclasses, int cluster, long skipped)
{
    struct sbuf b = {0};
    char value[192];
    int in_group = 0, first = 1;

    sb_str(&b, "{");
    for (int i = 0; i < nl_nsettings; i++) {
        const struct nl_setting *f = &nl_settings[i];
        const char *dot = strchr(f->name, '.');
        if (!nl_setting_format(f, o, value, sizeof value))
            continue;
        /* Members of a group ("augment.flip") go in one object, one after the other. */
        if (in_group && !dot) {
            sb_str(&b, "}");
            in_group = 0;
        }
        if (!first)
            sb_str(&b, ",");
        first = 0;
        if (dot && !in_group) {
            sb_add(&b, "\"", 1);
            sb_add(&b, f->name, (size_t)(dot - f->name));
            sb_str(&b, "\":{");
            in_group = 1;
        }
        sb_json_string(&b, dot ? dot + 1 : f->name);
        sb_str(&b, ":");
        if (nl_setting_is_text(f))
            sb_json_string(&b, value);
        else
            sb_str(&b, value);
    }
    if (in_group)
        sb_str(&b, "}");
    snprintf(value, sizeof value, ",\"input\":[%d,%d,%d],\"classes\":%d,\"vocab\":%d,", shape.c,
             shape.h, shape.w, nclasses, m->vocab);
    sb_str(&b, value);
    if (m->embed_columns > 0) {
        snprintf(value, sizeof value, "\"embedded\":{\"columns\":%d,\"rows\":%d},",
                 m->embed_columns, m->embed_rows);
        sb_str(&b, value);
    }
    sb_str(&b, "\"frozen\":[");
    for (int i = 0, n = 0; i < m->nlayers; i++)
        if (m->layers[i].frozen) {
            if (n++)
                sb_str(&b, ",");
            sb_json_string(&b, m->layers[i].name);
        }
    snprintf(value, sizeof value, "],\"cluster\":%s,\"skipped_batches\":%ld}",
             cluster ? "true" : "false", skipped);
    sb_str(&b, value);
    if (b.failed) {
        nl_free(b.s);
        return NULL;
    }
    return b.s;
}

/* A parsed value written back as JSON. */
static void sb_json(struct sbuf *b, const struct nl_json *v)
{
    char num[40];
    switch (v->type) {
    case NL_JSON_NULL:
        sb_str(b, "null");
        break;
    case NL_JSON_BOOL:
        sb_str(b, v->boolean ? "true" : "false");
        break;
    case NL_JSON_NUMBER:
        if (v->is_integer)
            snprintf(num, sizeof num, "%lld", (long long)v->integer);
        else
            snprintf(num, sizeof num, "%.17g", v->number);
        sb_str(b, num);
        break;
    case NL_JSON_STRING:
        sb_json_string(b, v->string);
        break;
    case NL_JSON_ARRAY:
    case NL_JSON_OBJECT:
        sb_str(b, v->type == NL_JSON_ARRAY ? "[" : "{");
        for (size_t i = 0; i < v->count; i++) {
            if (i)
                sb_str(b, ",");
            if (v->type == NL_JSON_OBJECT) {
                sb_json_string(b, v->items[i].key);
                sb_str(b, ":");
            }
            sb_json(b, &v->items[i]);
        }
        sb_str(b, v->type == NL_JSON_ARRAY ? "]" : "}");
        break;
    }
}

char *nl_run_settings_keep(const char *settings_json, const char *old_json)
{
    struct nl_json_doc *now = NULL, *old = NULL;
    struct nl_error err = {0};
    struct sbuf b = {0};

    if (old_json &&
        nl_json_parse(&now, settings_json, strlen(settings_json), "settings", &err) == 0 &&
        nl_json_parse(&old, old_json, strlen(old_json), "settings", &err) == 0 &&
        nl_json_root(now)->type == NL_JSON_OBJECT && nl_json_root(old)->type == NL_JSON_OBJECT) {
        const struct nl_json *n = nl_json_root(now), *o = nl_json_root(old);
        /* The new object up to its closing brace, then the old keys it lacks. */
        const char *end = strrchr(settings_json, '}');
        sb_add(&b, settings_json, (size_t)(end - settings_json));
        int members = n->count > 0;
        for (size_t i = 0; i < o->count; i++) {
            if (nl_json_get(n, o->items[i].key))
                continue;
            if (members)
                sb_str(&b, ",");
            members = 1;
            sb_json_string(&b, o->items[i].key);
            sb_str(&b, ":");
            sb_json(&b, &o->items[i]);
        }
        sb_str(&b, "}");
    } else {
        sb_str(&b, settings_json);
    }
    nl_json_free(now);
    nl_json_free(old);
    if (b.failed) {
        nl_free(b.s);
        return NULL;
    }
    return b.s;
}

void nl_run_resumed_free(struct nl_run_resumed *r)
{
    if (!r)
        return;
    nl_model_free(r->model);
    nl_dataset_free(r->data);
    nl_free(r->optim_state);
    nl_free(r->watched);
    nl_free(r);
}

/* The accuracy each completed epoch was judged on (r->watched, cp_epoch values). */
static int watched_epochs(struct nl_store *s, struct nl_run_resumed *r, struct nl_error *err)
{
    const int done = r->resume.epoch;
    const struct nl_train_opts *o = &r->opts;
    struct nl_run_epoch *epochs = NULL;
    int nepochs = 0;
    int rc = nl_run_epochs(s, r->run.id, &epochs, &nepochs, err);

    if (rc == 0 && !(r->watched = nl_calloc((size_t)done + 1, sizeof *r->watched)))
        rc = nl_error_set(err, NL_ENOMEM, "out of memory");
    for (int e = 0; rc == 0 && e < done; e++)
        r->watched[e] = NAN;
    for (int i = 0; rc == 0 && i < nepochs; i++)
        if (epochs[i].epoch >= 1 && epochs[i].epoch <= done)
            r->watched[epochs[i].epoch - 1] = isfinite(epochs[i].val_accuracy)
                                                  ? epochs[i].val_accuracy
                                                  : epochs[i].train_accuracy;
    nl_free(epochs);
    /* A kill between the last checkpoint and its epoch's record leaves that epoch without one;
     * its validation accuracy is the checkpoint's, exactly (a count over a fixed split). */
    const struct nl_dataset *d = r->data;
    if (rc == 0 && done > 0 && isnan(r->watched[done - 1]) &&
        r->resume.iteration %
                ((d->split[NL_TRAIN].n + (uint32_t)o->batch - 1) / (uint32_t)o->batch) ==
            0 &&
        d->split[NL_VAL].n > 0) {
        double loss;
        rc = nl_evaluate(r->model, d, NL_VAL, o->threads, &loss, &r->watched[done - 1], err);
    }
    return rc;
}

int nl_run_resume_open(struct nl_store *s, const char *name, const struct nl_resume_request *req,
                       nl_warn_fn warn, void *warn_ud, struct nl_run_resumed **out,
                       struct nl_error *err)
{
    struct nl_run_resumed *r = nl_calloc(1, sizeof *r);
    struct nl_run_checkpoint cp = {0};
    char *settings = NULL;
    int rc;

    *out = NULL;
    if (!r)
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    rc = nl_run_model(s, name, 0, warn, warn_ud, &r->run, &r->model, err);
    if (rc == 0)
        rc = nl_run_get(s, name, &r->run, NULL, &settings, err);
    if (rc == 0)
        rc = nl_run_check_owner(s, r->run.id, err); /* again, atomically, in nl_run_reopen */
    if (rc == 0)
        rc = nl_run_settings_parse(settings, r->run.name, &r->opts, &r->skipped, &r->cluster, err);
    nl_free(settings);
    settings = NULL;
    if (rc == 0 && r->cluster && !req->on_hosts)
        rc = nl_error_set(err, NL_EINVAL,
                          "run '%s' trained on a cluster; give --hosts or --hostfile to "
                          "resume it (or --mpi under an MPI launcher)",
                          r->run.name);
    if (rc == 0 && !r->cluster && req->on_hosts)
        rc = nl_error_set(err, NL_EINVAL,
                          "run '%s' trained on one machine; resume it without hosts", r->run.name);
    if (rc == 0 && strcmp(r->run.status, "done") == 0 &&
        (req->epochs < 0 || req->epochs <= r->opts.epochs))
        rc = nl_error_set(err, NL_EINVAL,
                          "run '%s' is done (%d epochs); give --epochs N, more, to train it "
                          "further",
                          r->run.name, r->run.epochs_done);
    if (req->epochs > 0)
        r->opts.epochs = req->epochs;
    if (req->on_nan >= 0)
        r->opts.on_nan = (enum nl_on_nan)req->on_nan;
    if (req->checkpoint_every >= 0)
        r->opts.checkpoint_every = req->checkpoint_every;
    if (req->compress)
        r->opts.bf16 = strcmp(req->compress, "bf16") == 0;
    if (rc == 0) {
        rc = nl_run_load_checkpoint(s, &r->run, r->model->params, r->model->nparams, &cp, err);
        if (rc == NL_ENOENT)
            nl_error_set(err, rc, "run '%s' has no checkpoint to resume from; train it again",
                         r->run.name);
    }
    r->optim_state = cp.optim;
    /* A cluster run's checkpoints from before they carried the optimizer state resume with a
     * fresh one. */
    if (rc == 0 && nl_optim_state_arrays(&r->opts.optim) > 0 && !cp.optim && !r->cluster)
        rc = nl_error_set(err, NL_EINVAL, "run '%s': its checkpoints carry no optimizer state",
                          r->run.name);
    if (rc == 0)
        rc = nl_dataset_load(s, r->run.dataset, &r->data, err);
    r->resume.epoch = cp.epoch;
    r->resume.iteration = cp.iteration;
    r->resume.optim_state = cp.optim;
    r->resume.optim_floats = cp.optim_floats;
    if (rc == 0)
        rc = watched_epochs(s, r, err);
    r->resume.watched = r->watched;
    if (rc == 0 && !(settings = nl_run_settings_format(&r->opts, r->model, r->data->shape,
                                                       r->data->nclasses, r->cluster, r->skipped)))
        rc = nl_error_set(err, NL_ENOMEM, "out of memory");
    if (rc == 0)
        rc = nl_run_reopen(s, r->run.id, settings, err);
    nl_free(settings);
    if (rc < 0) {
        nl_run_resumed_free(r);
        return rc;
    }
    r->opts.resume = &r->resume;
    *out = r;
    return 0;
}
