/* Resuming and divergence in the trainer: a run resumed from any of its checkpoints (after an
 * epoch, or within one with checkpoint_every) ends bit-identical to the uninterrupted run, with
 * Adam, dropout, augmentation and a plateau schedule; a non-finite loss stops the run naming
 * the epoch and step, or with skip-batch leaves that step's parameters and optimizer state as
 * they were and counts it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nnlab/alloc.h"
#include "nnlab/model.h"
#include "nnlab/spec.h"
#include "nnlab/trainer.h"
#include "tap.h"
#include "test_util.h"

enum { SIDE = 12, CLASSES = 4, MAX_CP = 32, EPOCHS = 3 };

/* The quadrants of test_util.h as floats in [0, 1]; nval samples of validation. */
static struct nl_dataset *synthetic(uint32_t ntrain, uint32_t nval, uint64_t seed)
{
    const uint32_t n[NL_NSPLITS] = {ntrain, nval, 50};
    return quadrants(n, seed, NL_F32, 2);
}

static const char spec_text[] = "fc1: dense 32\nrelu\ndropout 0.2\nfc2: dense 4\n";

/* Every checkpoint of a run, copied, and the accuracy each epoch was judged on. */
struct saved {
    int n;
    struct {
        int epoch;
        long iteration;
        float *params, *optim;
        size_t optim_floats;
    } cp[MAX_CP];
    double watched[EPOCHS];
};

static int keep_cp(void *ud, const struct nl_checkpoint *c, struct nl_error *err)
{
    struct saved *s = ud;
    (void)err;
    if (s->n == MAX_CP)
        return 0;
    s->cp[s->n].epoch = c->epoch;
    s->cp[s->n].iteration = c->iteration;
    s->cp[s->n].params = nl_malloc(c->nparams * sizeof(float));
    memcpy(s->cp[s->n].params, c->params, c->nparams * sizeof(float));
    s->cp[s->n].optim = nl_malloc(c->optim_floats * sizeof(float) + 1);
    if (c->optim_floats)
        memcpy(s->cp[s->n].optim, c->optim_state, c->optim_floats * sizeof(float));
    s->cp[s->n].optim_floats = c->optim_floats;
    s->n++;
    return 0;
}

static int keep_epoch(void *ud, const struct nl_event *ev)
{
    struct saved *s = ud;
    if (ev->kind == NL_EVENT_EPOCH && ev->epoch <= EPOCHS)
        s->watched[ev->epoch - 1] = isfinite(ev->val_accuracy) ? ev->val_accuracy : ev->accuracy;
    return 0;
}

static void saved_free(struct saved *s)
{
    for (int i = 0; i < s->n; i++) {
        nl_free(s->cp[i].params);
        nl_free(s->cp[i].optim);
    }
}

/* Trains o's run from seed's initialisation, and resumes it from each of its checkpoints. */
static void check_resume(const char *what, const struct nl_dataset *d, struct nl_train_opts *o,
                         int mid_epoch)
{
    struct nl_model *m = build(spec_text, d->shape, d->nclasses);
    struct nl_train_result res;
    struct nl_error err = {0};
    struct saved s = {0};
    struct nl_train_hooks hooks = {keep_epoch, keep_cp, &s};

    nl_model_init_params(m, o->seed);
    is_int(nl_train(m, d, o, &hooks, &res, &err), 0, "%s: the uninterrupted run", what);
    if (mid_epoch)
        ok(s.n > EPOCHS, "%s: %d checkpoints, some within epochs", what, s.n);
    else
        is_int(s.n, EPOCHS, "%s: checkpoints at epoch ends only", what);
    float *final = nl_malloc(m->nparams * sizeof(float));
    memcpy(final, m->params, m->nparams * sizeof(float));
    nl_model_free(m);

    for (int i = 0; i < s.n; i++) {
        struct nl_resume r = {
            .epoch = s.cp[i].epoch,
            .iteration = s.cp[i].iteration,
            .optim_state = s.cp[i].optim_floats ? s.cp[i].optim : NULL,
            .optim_floats = s.cp[i].optim_floats,
            .watched = s.watched,
        };
        struct nl_train_opts ro = *o;
        struct nl_train_result rres;
        ro.resume = &r;
        m = build(spec_text, d->shape, d->nclasses);
        nl_model_init_params(m, o->seed + 99); /* overwritten: the checkpoint's weights */
        memcpy(m->params, s.cp[i].params, m->nparams * sizeof(float));
        int rc = nl_train(m, d, &ro, NULL, &rres, &err);
        if (rc < 0)
            diag("resume: %s", err.msg);
        ok(rc == 0 && memcmp(m->params, final, m->nparams * sizeof(float)) == 0,
           "%s: resumed after epoch %d, step %ld: bit-identical final weights", what, s.cp[i].epoch,
           s.cp[i].iteration);
        if (i == s.n - 1)
            is_float(rres.test_accuracy, res.test_accuracy, 0.0, "%s: the same test accuracy",
                     what);
        nl_model_free(m);
    }
    nl_free(final);
    saved_free(&s);
}

static void test_resume(void)
{
    struct nl_dataset *d = synthetic(310, 40, 5);
    struct nl_dataset *noval = synthetic(310, 0, 6);
    struct nl_train_opts o;
    struct nl_error err = {0};

    nl_train_defaults(&o);
    o.epochs = EPOCHS;
    o.batch = 32; /* 10 steps an epoch, the last of 22 samples */
    o.threads = 2;
    o.seed = 4;
    nl_optim_defaults(&o.optim, NL_OPTIM_ADAM);
    o.augment.flip = 1;
    o.augment.crop = 1;
    o.schedule.warmup_epochs = 0.5f;
    o.checkpoint_every = 4;
    check_resume("adam, cosine, warmup, dropout, augmentation", d, &o, 1);

    nl_train_defaults(&o);
    o.epochs = EPOCHS;
    o.batch = 32;
    o.threads = 2;
    o.seed = 9;
    o.checkpoint_every = 7;
    o.patience = 5;
    nl_schedule_parse(&o.schedule, "plateau:1:0.5", &err);
    check_resume("sgd momentum, plateau on training accuracy", noval, &o, 0);
    check_resume("sgd momentum, plateau on validation accuracy", d, &o, 1);

    /* A checkpoint that does not fit the run is refused. */
    struct nl_model *m = build(spec_text, d->shape, d->nclasses);
    struct nl_train_result res;
    struct nl_resume r = {.epoch = 1, .iteration = 3};
    o.resume = &r;
    is_int(nl_train(m, d, &o, NULL, &res, &err), NL_EFORMAT, "a step count out of its epoch");
    like(err.msg, "does not fit", "is refused with a message");
    r.iteration = 10;
    is_int(nl_train(m, d, &o, NULL, &res, &err), NL_EFORMAT, "missing optimizer state");
    like(err.msg, "optimizer state", "is refused, saying so");
    nl_model_free(m);
    nl_dataset_free(d);
    nl_dataset_free(noval);
}

/* Watches skipped steps: parameters at each ITER event, compared with the previous one's. */
struct nan_watch {
    const struct nl_model *m;
    float *prev;
    int skipped, unchanged, epochs_skipped;
};

static int nan_event(void *ud, const struct nl_event *ev)
{
    struct nan_watch *w = ud;
    const size_t bytes = w->m->nparams * sizeof(float);
    if (ev->kind == NL_EVENT_ITER) {
        if (isnan(ev->loss)) {
            w->skipped++;
            w->unchanged += memcmp(w->prev, w->m->params, bytes) == 0;
        }
        memcpy(w->prev, w->m->params, bytes);
    } else if (ev->kind == NL_EVENT_EPOCH) {
        w->epochs_skipped += (int)ev->skipped_batches;
    }
    return 0;
}

static void test_on_nan(void)
{
    struct nl_dataset *d = synthetic(300, 0, 7);
    struct nl_model *m = build("fc1: dense 32\ntanh\nfc2: dense 4\n", d->shape, d->nclasses);
    struct nl_train_opts o;
    struct nl_train_result res;
    struct nl_error err = {0};

    /* One poisoned sample: the step whose batch holds it has a NaN loss, once an epoch. */
    ((float *)d->split[NL_TRAIN].x)[17 * SIDE * SIDE + 5] = NAN;
    nl_train_defaults(&o);
    o.epochs = 2;
    o.batch = 30;
    o.threads = 2;
    nl_model_init_params(m, 1);
    is_int(nl_train(m, d, &o, NULL, &res, &err), NL_ENAN, "on-nan stop: the run stops");
    like(err.msg, "epoch 1, step ", "naming the epoch and step");
    like(err.msg, "NaN", "and what the loss was");

    struct nan_watch w = {.m = m, .prev = nl_malloc(m->nparams * sizeof(float))};
    struct nl_train_hooks hooks = {nan_event, NULL, &w};
    o.on_nan = NL_ON_NAN_SKIP_BATCH;
    nl_optim_defaults(&o.optim, NL_OPTIM_ADAM);
    nl_model_init_params(m, 1);
    memcpy(w.prev, m->params, m->nparams * sizeof(float));
    is_int(nl_train(m, d, &o, &hooks, &res, &err), 0, "on-nan skip-batch: the run goes on");
    is_int(res.skipped_batches, 2, "one batch skipped an epoch");
    is_int(w.epochs_skipped, 2, "the epoch events count them");
    is_int(w.unchanged, w.skipped, "a skipped step leaves the parameters as they were");
    int finite = 1;
    for (size_t i = 0; i < m->nparams; i++)
        finite &= isfinite(m->params[i]) != 0;
    ok(finite, "the weights stay finite");
    ok(res.train_accuracy > 0.5, "and the model learns (%.3f)", res.train_accuracy);

    nl_free(w.prev);
    nl_model_free(m);
    nl_dataset_free(d);
}

int main(void)
{
    test_resume();
    test_on_nan();
    return done_testing();
}
