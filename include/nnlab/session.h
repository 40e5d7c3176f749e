/* A training session: one process training one run, from its record's creation (or its resume) to
 * its finish. The session is the run's owner in the store while it lasts, records what training
 * reports (epochs and checkpoints, a cluster run's worker steps and recoveries, skipped batches)
 * and finishes the record; a front end only displays. The command line (app/cmd_train.c) and the
 * window (ui/train-page.c) both drive it:
 *
 *     nl_session_start(store, &new, m, d, &opts, &s, err)
 *         (or nl_session_resume(store, name, &req, warn, ud, &s, err))
 *     struct nl_train_hooks h = nl_session_hooks(s, show_event, ui);
 *     rc = nl_train(s->model, s->data, &s->opts, &h, &s->res, err);   (or nl_cluster_train)
 *     rc = nl_session_finish(s, rc, err);   rc < 0: training or its record failed, err says why
 *     nl_session_free(s);
 *
 * Every failure to write the record reaches the caller: a failed write during training stops it
 * (the event hook asks to stop, the checkpoint hook returns the error) and nl_session_finish
 * turns it into its result; a run whose finish cannot be written is left to its owner, which dies
 * with the process, so the run then lists as "interrupted". */
#ifndef NNLAB_SESSION_H
#define NNLAB_SESSION_H

#include "nnlab/runs.h"

/* How often, at most, the steps reported so far are stored (nl_run_worker_steps reads them). */
#define NL_SESSION_STEPS_SECONDS 1.0

/* A new run. */
struct nl_session_new {
    const char *name;    /* NULL or "": MODEL-DATASET-N */
    const char *dataset; /* the dataset's name */
    const char *model;   /* as given: a shipped name or a spec file */
    int cluster;         /* it trains on hosts */
    /* Members added to the run's settings after the core's (a JSON object, or NULL): what a front
     * end records beside them, such as where the weights started. */
    const char *settings_extra;
};

/* Read-only for the front ends but for res, which training fills. */
struct nl_session {
    struct nl_store *store;
    struct nl_run_info run;
    struct nl_model *model;    /* owned */
    struct nl_dataset *data;   /* owned */
    struct nl_train_opts opts; /* a resumed run's opts.resume points into resumed */
    int cluster;
    long skipped_before;            /* batches skipped in the run's earlier sessions */
    struct nl_run_resumed *resumed; /* a resumed run's checkpoint (its model and data moved out) */
    struct nl_train_result res;

    /* What the hooks record. */
    int (*show)(void *ud, const struct nl_event *ev);
    void *show_ud;
    struct nl_worker_steps steps; /* the worker reports not yet stored */
    int record_failed;
    struct nl_error record_err;
    double last_beat;  /* monotonic seconds of the owner's last heartbeat */
    double last_steps; /* monotonic seconds of the last store of the worker steps */
    /* A resumed run's record before this session: its training seconds, and its last completed
     * epoch's metrics (epoch 0 when none), which the run's result keeps where this session
     * trains no further epoch (a kill right after the last checkpoint). */
    double seconds_before;
    struct nl_run_epoch epoch_before;
    int began; /* training reported an event or a checkpoint */
};

/* Records a new run of model m on d with options o (all of which the session takes: m and d are
 * freed with it) and becomes its owner. On failure m and d are freed too. */
int nl_session_start(struct nl_store *store, const struct nl_session_new *new, struct nl_model *m,
                     struct nl_dataset *d, const struct nl_train_opts *o, struct nl_session **out,
                     struct nl_error *err) NL_MUST_CHECK;

/* Opens the run named name to go on from its latest checkpoint (nl_run_resume_open) and becomes
 * its owner; a run another live process trains is refused (NL_EBUSY, naming it). */
int nl_session_resume(struct nl_store *store, const char *name, const struct nl_resume_request *req,
                      nl_warn_fn warn, void *warn_ud, struct nl_session **out,
                      struct nl_error *err) NL_MUST_CHECK;

/* The hooks to train with: each event is recorded, then passed to show (may be NULL; its non-zero
 * return stops training); each checkpoint is stored. */
struct nl_train_hooks nl_session_hooks(struct nl_session *s,
                                       int (*show)(void *ud, const struct nl_event *ev), void *ud);

/* Finishes the record after training returned rc (err holding its message when rc < 0): a new
 * cluster run that failed before training began is removed; otherwise stores
 * what is pending and the skipped batches, then the status (done, stopped or failed) with s->res.
 * Returns rc, or when training succeeded but its record did not, the store's error (err filled);
 * a record that failed during training makes the run "failed" with that error. */
int nl_session_finish(struct nl_session *s, int rc, struct nl_error *err) NL_MUST_CHECK;

/* Frees the model, dataset and resume state. NULL is fine. */
void nl_session_free(struct nl_session *s);

#endif
