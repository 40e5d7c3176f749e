/* A training session (include/nnlab/session.h): the run's record from its creation or resume to
 * its finish, written here once for the command line and the window.
 *
 * What goes to the store, and when: an epoch's metrics with its checkpoint (one transaction,
 * nl_run_save_checkpoint); the worker steps (a local run's as one worker's) about once a second
 * (NL_SESSION_STEPS_SECONDS) and at each epoch's end, so that a window can follow the run live,
 * and what is left of them when training ends; each recovery as it happens; the owner's heartbeat
 * at least every NL_RUN_HEARTBEAT_SECONDS (on steps, epochs and checkpoints); the batches skipped
 * over the run in its settings; the final status and results. A write that fails stops training
 * and makes the session's result that failure. */
#include "nnlab/session.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/clock.h"
#include "nnlab/dataset.h"
#include "nnlab/model.h"

/* The host a local run's steps are stored as coming from. */
static void local_host(struct nl_session *s)
{
    if (gethostname(s->steps.host, sizeof s->steps.host) != 0)
        snprintf(s->steps.host, sizeof s->steps.host, "localhost");
    s->steps.host[sizeof s->steps.host - 1] = '\0';
}

int nl_session_start(struct nl_store *store, const struct nl_session_new *new, struct nl_model *m,
                     struct nl_dataset *d, const struct nl_train_opts *o, struct nl_session **out,
                     struct nl_error *err)
{
    struct nl_session *s = nl_calloc(1, sizeof *s);
    char *settings = NULL, *merged = NULL;
    int rc = 0;

    *out = NULL;
    if (!s) {
        nl_model_free(m);
        nl_dataset_free(d);
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    }
    s->store = store;
    s->model = m;
    s->data = d;
    s->opts = *o;
    s->cluster = new->cluster;
    /* The frozen layers are in the settings: a run's weights are stored in the frozen layout,
     * which nl_run_model rebuilds from that list. */
    settings = nl_run_settings_format(o, m, d->shape, d->nclasses, new->cluster, 0);
    merged = settings && new->settings_extra ? nl_run_settings_keep(settings, new->settings_extra)
                                             : NULL;
    if (!settings || (new->settings_extra && !merged))
        rc = nl_error_set(err, NL_ENOMEM, "out of memory");
    /* The dataset is in memory: from here the store only writes. */
    if (rc == 0)
        rc = nl_store_lean_cache(store, err);
    if (rc == 0)
        rc = nl_run_create(store, new->name, new->dataset, new->model, m->spec_text,
                           merged ? merged : settings, &s->run, err);
    nl_free(settings);
    nl_free(merged);
    if (rc < 0) {
        nl_session_free(s);
        return rc;
    }
    s->last_beat = s->last_steps = nl_now();
    local_host(s);
    *out = s;
    return 0;
}

/* What the run recorded up to epoch done: the seconds of its epochs, and epoch done's
 * metrics. An epoch resumed in its middle counts its earlier part in its record already. */
static int resumed_record(struct nl_session *s, int done, struct nl_error *err)
{
    struct nl_run_epoch *epochs = NULL;
    int n = 0;
    int rc = nl_run_epochs(s->store, s->run.id, &epochs, &n, err);

    for (int i = 0; rc == 0 && i < n; i++) {
        if (epochs[i].epoch > done)
            continue;
        if (epochs[i].seconds > 0)
            s->seconds_before += epochs[i].seconds;
        if (epochs[i].epoch == done)
            s->epoch_before = epochs[i];
    }
    nl_free(epochs);
    return rc;
}

int nl_session_resume(struct nl_store *store, const char *name, const struct nl_resume_request *req,
                      nl_warn_fn warn, void *warn_ud, struct nl_session **out, struct nl_error *err)
{
    struct nl_session *s = nl_calloc(1, sizeof *s);
    struct nl_run_resumed *r = NULL;

    *out = NULL;
    if (!s)
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    int rc = nl_run_resume_open(store, name, req, warn, warn_ud, &r, err);
    if (rc < 0) {
        nl_free(s);
        return rc;
    }
    s->store = store;
    s->run = r->run;
    s->model = r->model;
    s->data = r->data;
    r->model = NULL;
    r->data = NULL;
    s->opts = r->opts; /* its resume points into r, which the session keeps */
    s->cluster = r->cluster;
    s->skipped_before = r->skipped;
    s->resumed = r;
    rc = nl_store_lean_cache(store, err);
    if (rc == 0)
        rc = resumed_record(s, r->resume.epoch, err);
    if (rc < 0) {
        nl_session_free(s);
        return rc;
    }
    s->last_beat = s->last_steps = nl_now();
    local_host(s);
    *out = s;
    return 0;
}

/* A write failed: keep the first failure, and stop training. */
static int record_failed(struct nl_session *s, const struct nl_error *e)
{
    if (!s->record_failed) {
        s->record_failed = 1;
        s->record_err = *e;
    }
    return 1;
}

static int heartbeat(struct nl_session *s)
{
    struct nl_error e = {0};
    const double t = nl_now();

    if (t - s->last_beat < NL_RUN_HEARTBEAT_SECONDS)
        return 0;
    if (nl_run_heartbeat(s->store, s->run.id, &e) < 0)
        return record_failed(s, &e);
    s->last_beat = t;
    return 0;
}

static int session_event(void *ud, const struct nl_event *ev)
{
    struct nl_session *s = ud;
    struct nl_error e = {0};

    s->began = 1;
    if (s->record_failed)
        return 1;
    if (ev->kind == NL_EVENT_ITER) {
        if (nl_worker_steps_add(&s->steps, ev, &e) < 0)
            return record_failed(s, &e);
        /* Stored about once a second, for whoever follows the run from the store. */
        const double t = nl_now();
        if (t - s->last_steps >= NL_SESSION_STEPS_SECONDS) {
            if (nl_worker_steps_flush(&s->steps, s->store, s->run.id, &e) < 0)
                return record_failed(s, &e);
            s->last_steps = t;
        }
    } else if (ev->kind == NL_EVENT_RECOVERY && ev->recovery) {
        if (nl_run_record_recovery(s->store, s->run.id, ev->recovery, &e) < 0)
            return record_failed(s, &e);
    } else if (ev->kind == NL_EVENT_OVERLAP && ev->overlap) {
        /* Beside "overlap": "auto", what it measured and chose; a resumed run measures again. */
        const struct nl_overlap_choice *c = ev->overlap;
        char json[256];
        snprintf(json, sizeof json,
                 "{\"overlap_chosen\":\"%s\",\"overlap_sync_ms\":%.3f,"
                 "\"overlap_overlapped_ms\":%.3f,\"overlap_step\":%ld}",
                 c->overlapped ? "overlapped" : "synchronous", 1e3 * c->sync_seconds,
                 1e3 * c->overlap_seconds, c->step);
        if (nl_run_set_settings(s->store, s->run.id, json, &e) < 0)
            return record_failed(s, &e);
    } else if (ev->kind == NL_EVENT_EPOCH) {
        /* The epoch's metrics were stored with its checkpoint. */
        if (nl_worker_steps_flush(&s->steps, s->store, s->run.id, &e) < 0)
            return record_failed(s, &e);
        s->last_steps = nl_now();
    }
    if (heartbeat(s))
        return 1;
    return s->show ? s->show(s->show_ud, ev) : 0;
}

static int session_checkpoint(void *ud, const struct nl_checkpoint *cp, struct nl_error *err)
{
    struct nl_session *s = ud;
    int rc;

    s->began = 1;
    rc = nl_run_save_checkpoint(s->store, s->run.id, cp, err);
    if (rc < 0) {
        record_failed(s, err);
        return rc;
    }
    s->last_beat = nl_now(); /* the checkpoint is a sign of life; its heartbeat follows in time */
    return 0;
}

struct nl_train_hooks nl_session_hooks(struct nl_session *s,
                                       int (*show)(void *ud, const struct nl_event *ev), void *ud)
{
    s->show = show;
    s->show_ud = ud;
    return (struct nl_train_hooks){session_event, session_checkpoint, s};
}

/* The skipped batches over the whole run, in its settings. */
static int record_skipped(struct nl_session *s, struct nl_error *err)
{
    char *settings = nl_run_settings_format(&s->opts, s->model, s->data->shape, s->data->nclasses,
                                            s->cluster, s->skipped_before + s->res.skipped_batches);
    if (!settings)
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    int rc = nl_run_set_settings(s->store, s->run.id, settings, err);
    nl_free(settings);
    return rc;
}

int nl_session_finish(struct nl_session *s, int rc, struct nl_error *err)
{
    struct nl_error e = {0};

    /* A new cluster run that failed before training began (a host that does not resolve,
     * refuses or fails to launch) keeps no record, as if it had been refused before it was
     * made; the error is the result. */
    if (rc < 0 && rc != NL_ECANCELED && s->cluster && !s->resumed && !s->began) {
        if (nl_run_remove(s->store, s->run.name, &e) < 0) {
            char why[NL_ERR_MAX];
            snprintf(why, sizeof why, "%s", err->msg);
            nl_error_set(err, rc, "%s; and run '%s' could not be removed: %s", why, s->run.name,
                         e.msg);
        }
        return rc;
    }
    /* What a stopped or failed cluster run reported since its last epoch. */
    if (nl_worker_steps_flush(&s->steps, s->store, s->run.id, &e) < 0)
        record_failed(s, &e);
    nl_worker_steps_release(&s->steps);
    if (s->res.skipped_batches > 0 && record_skipped(s, &e) < 0)
        record_failed(s, &e);
    /* A failed write stopped training (or came after it): that failure is the result. */
    if (s->record_failed && (rc == 0 || rc == NL_ECANCELED || rc == s->record_err.code)) {
        *err = s->record_err;
        rc = s->record_err.code < 0 ? s->record_err.code : NL_EDB;
        nl_error_prefix(err, "run '%s' not recorded", s->run.name);
    }
    /* A resumed run's result covers the whole run: its time, and its last epoch's metrics
     * where this session completed none. */
    if (s->resumed) {
        s->res.seconds += s->seconds_before;
        if (s->epoch_before.epoch > 0 && s->res.epochs <= s->epoch_before.epoch) {
            s->res.epochs = s->epoch_before.epoch;
            s->res.train_loss = s->epoch_before.train_loss;
            s->res.train_accuracy = s->epoch_before.train_accuracy;
            s->res.val_accuracy = s->epoch_before.val_accuracy;
        }
    }
    const char *status = rc == 0 ? "done" : rc == NL_ECANCELED ? "stopped" : "failed";
    if (nl_run_finish(s->store, s->run.id, status, rc == 0 ? &s->res : NULL, &e) < 0) {
        if (rc == 0) {
            *err = e;
            rc = e.code < 0 ? e.code : NL_EDB;
            nl_error_prefix(err, "run '%s' not recorded as done", s->run.name);
            /* Failed where the store still takes it; else its owner dies with this process and
             * the run lists as interrupted. */
            if (nl_run_finish(s->store, s->run.id, "failed", NULL, &e) < 0)
                return rc;
        } else {
            char why[NL_ERR_MAX];
            snprintf(why, sizeof why, "%s", err->msg);
            nl_error_set(err, rc, "%s; and run '%s' could not be marked %s: %s", why, s->run.name,
                         status, e.msg);
        }
    }
    return rc;
}

void nl_session_free(struct nl_session *s)
{
    if (!s)
        return;
    nl_worker_steps_release(&s->steps);
    nl_model_free(s->model);
    nl_dataset_free(s->data);
    nl_run_resumed_free(s->resumed);
    nl_free(s);
}
