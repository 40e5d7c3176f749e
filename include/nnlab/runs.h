/* Training runs in the store: their settings, per-epoch metrics, final results and checkpoints. */
#ifndef NNLAB_RUNS_H
#define NNLAB_RUNS_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/error.h"
#include "nnlab/store.h"
#include "nnlab/trainer.h"

struct nl_run_info {
    int64_t id;
    char name[128];
    char dataset[128];
    char model[256]; /* as given: a shipped name or a path */
    char status[16]; /* running, done, failed, stopped, or interrupted: stored as running but
                      * its owner is gone (see core/store/runs.c), so it can be resumed */
    char created[32];
    char finished[32];
    int epochs_done;
    double val_accuracy, test_accuracy, seconds; /* NAN when not known */
    /* The process training it (status running), as its record names it. */
    char owner_host[256]; /* "" when none */
    long owner_pid;
    double heartbeat_age; /* seconds since its owner last wrote; < 0 when never */
    int owner_lives;      /* status running: the owner still runs */
    /* A regression run (include/nnlab/trainer.h): its accuracies are R^2; the MAE and RMSE in
     * the target's units, NAN when not known. */
    int regression;
    double val_mae, val_rmse, test_mae, test_rmse;
};

/* An owner writes its heartbeat at least this often while it trains (nl_run_heartbeat); an owner
 * on another host whose heartbeat is older than NL_RUN_OWNER_STALE_SECONDS is taken for dead. */
#define NL_RUN_HEARTBEAT_SECONDS   30
#define NL_RUN_OWNER_STALE_SECONDS 300

/* Records a new run with status "running", owned by this process. name NULL or "" picks
 * MODEL-DATASET-N (the model's base name, the first free N). A taken name is NL_EEXIST. info
 * receives the record. */
int nl_run_create(struct nl_store *s, const char *name, const char *dataset, const char *model,
                  const char *spec_text, const char *settings_json, struct nl_run_info *info,
                  struct nl_error *err) NL_MUST_CHECK;

/* Stores an epoch's metrics (an NL_EVENT_EPOCH event). */
int nl_run_record_epoch(struct nl_store *s, int64_t run, const struct nl_event *ev,
                        struct nl_error *err) NL_MUST_CHECK;

/* One worker's report of one step of a cluster run. */
struct nl_worker_step {
    long step; /* from 1, over the whole run */
    int worker;
    const char *host;
    int epoch;
    long samples;
    double loss, compute_seconds, comm_seconds;
    unsigned long long bytes_sent;
};

/* Stores n worker reports in one transaction. */
int nl_run_record_worker_steps(struct nl_store *s, int64_t run, const struct nl_worker_step *rows,
                               size_t n, struct nl_error *err) NL_MUST_CHECK;

/* A run's worker reports not yet stored: the ITER events' workers, gathered step by step and
 * stored by the session about once a second and at each epoch's end, so that another process can
 * follow the run's steps (nl_run_worker_steps). A local run's step is stored as the report of
 * its one worker, on host (its samples and seconds, its loss; no communication). Zero-initialised
 * is empty, with host "". */
struct nl_worker_steps {
    struct nl_worker_step *v;
    size_t n, cap;
    char host[64]; /* a local run's */
    /* The previous local step: its epoch and step, and the epoch's samples and seconds then. */
    int local_epoch;
    long local_iter, local_samples;
    double local_seconds;
};
/* Adds an ITER event's worker reports, or for a local run's event its one report. */
int nl_worker_steps_add(struct nl_worker_steps *b, const struct nl_event *ev,
                        struct nl_error *err) NL_MUST_CHECK;
/* Stores what b holds in run's record (one transaction) and empties b. */
int nl_worker_steps_flush(struct nl_worker_steps *b, struct nl_store *s, int64_t run,
                          struct nl_error *err) NL_MUST_CHECK;
void nl_worker_steps_release(struct nl_worker_steps *b);

/* One stored worker report (nl_run_worker_steps). */
struct nl_run_worker_step {
    long step; /* from 1, over the whole run: (epoch - 1) * steps per epoch + step in it */
    int worker;
    char host[64];
    int epoch;
    long samples;
    double loss, compute_seconds, comm_seconds; /* NAN when not stored */
    unsigned long long bytes_sent;
};

/* A run's worker reports of the steps after step `after` (0: from the first), in step then
 * worker order, at most max rows (max <= 0: all); *out freed with nl_free. What a window
 * following a run trained by another process draws. */
int nl_run_worker_steps(struct nl_store *s, int64_t run, long after, int max,
                        struct nl_run_worker_step **out, int *count, struct nl_error *err);

/* Stores a cluster run's recovery (an NL_EVENT_RECOVERY event's). */
int nl_run_record_recovery(struct nl_store *s, int64_t run, const struct nl_recovery *r,
                           struct nl_error *err) NL_MUST_CHECK;

/* One stored recovery. */
struct nl_run_recovery {
    long step;
    char host[256];
    char what[400];
    char action[16];
    int restarts, workers;
    char created[32];
};

/* A run's recoveries in order; *out freed with nl_free. */
int nl_run_recoveries(struct nl_store *s, int64_t run, struct nl_run_recovery **out, int *count,
                      struct nl_error *err);

/* Stores a checkpoint, the run's progress and, when cp->metrics is set, the epoch's metrics in one
 * transaction; keeps the two latest checkpoints. */
int nl_run_save_checkpoint(struct nl_store *s, int64_t run, const struct nl_checkpoint *cp,
                           struct nl_error *err) NL_MUST_CHECK;

/* Sets the final status and results (res may be NULL for a failed run) and lets go of the run:
 * NL_EBUSY when this process no longer owns it (removed, or taken over). */
int nl_run_finish(struct nl_store *s, int64_t run, const char *status,
                  const struct nl_train_result *res, struct nl_error *err) NL_MUST_CHECK;

/* The owner's sign of life: NL_EBUSY when this process no longer owns the run. */
int nl_run_heartbeat(struct nl_store *s, int64_t run, struct nl_error *err) NL_MUST_CHECK;

/* NL_EBUSY, naming the holder (pid, host, since when), when a live process other than this one
 * owns run; 0 when none does. */
int nl_run_check_owner(struct nl_store *s, int64_t run, struct nl_error *err) NL_MUST_CHECK;

/* All runs, oldest first; *out freed with nl_free. */
int nl_run_list(struct nl_store *s, struct nl_run_info **out, int *count, struct nl_error *err);

/* One run by name; spec_text and settings_json (either may be NULL) are freed with nl_free. */
int nl_run_get(struct nl_store *s, const char *name, struct nl_run_info *info, char **spec_text,
               char **settings_json, struct nl_error *err);

/* Copies the latest checkpoint's parameters into params (nparams floats, which must match). */
int nl_run_load_params(struct nl_store *s, const struct nl_run_info *run, float *params,
                       size_t nparams, struct nl_error *err);

/* The latest checkpoint whole, for resuming a run. */
struct nl_run_checkpoint {
    int epoch;      /* epochs completed */
    long iteration; /* steps completed */
    float *optim;   /* the optimizer's state arrays, optim_floats floats; NULL when not stored
                     * (an optimizer without state, or a cluster run); freed with nl_free */
    size_t optim_floats;
};

/* Copies the latest checkpoint's parameters into params (nparams floats, which must match) and
 * gives its position and optimizer state. NL_ENOENT when the run has none. */
int nl_run_load_checkpoint(struct nl_store *s, const struct nl_run_info *run, float *params,
                           size_t nparams, struct nl_run_checkpoint *cp, struct nl_error *err);

/* The epoch of run's latest checkpoint (0: one taken within the first epoch) in *epoch:
 * 1 when it has one, 0 when none, < 0 with err. */
int nl_run_checkpoint_epoch(struct nl_store *s, int64_t run, int *epoch, struct nl_error *err);

/* Marks a run as running again (no finish time), owned by this process, and replaces its settings
 * when settings_json is not NULL, as nl_run_set_settings does: a resumed run continues in its own
 * record. NL_EBUSY, naming the holder, while another live process owns it. */
int nl_run_reopen(struct nl_store *s, int64_t run, const char *settings_json,
                  struct nl_error *err) NL_MUST_CHECK;

/* Replaces a run's settings (a JSON object). Keys of its stored settings that the new ones lack
 * are kept (after them): what a front end adds, such as the window's "init" and "hosts", outlives
 * a rewrite in the core's format. */
int nl_run_set_settings(struct nl_store *s, int64_t run, const char *settings_json,
                        struct nl_error *err) NL_MUST_CHECK;

/* One epoch of a run as stored by nl_run_record_epoch; NAN where not recorded. */
struct nl_run_epoch {
    int epoch;
    double train_loss, train_accuracy, val_loss, val_accuracy, seconds, images_per_second;
};

/* A run's epochs in order; *out freed with nl_free. */
int nl_run_epochs(struct nl_store *s, int64_t run, struct nl_run_epoch **out, int *count,
                  struct nl_error *err);

/* Whether the dataset the run names was imported after the run began, so that it is not the data
 * the run trained on and any of its splits (a validation split carved since, say) may hold
 * images the run trained on: 1 with a sentence saying so in why (cap bytes), 0 when the dataset
 * is the run's own, < 0 with err (NL_ENOENT when the dataset is gone). Timestamps are seconds
 * (UTC, ISO 8601): an import in the second the run began counts as the run's own. */
int nl_run_data_replaced(struct nl_store *s, const struct nl_run_info *run, char *why, size_t cap,
                         struct nl_error *err);

/* Removes a run with its epochs and checkpoints, in one transaction, then gives the freed pages
 * back to the file system (nl_store_reclaim, best effort). NL_ENOENT when unknown. */
int nl_run_remove(struct nl_store *s, const char *name, struct nl_error *err) NL_MUST_CHECK;

struct nl_model;

/* Builds a run's model as it was trained — its recorded spec, input shape, class count and
 * frozen layers, so the flat buffer has the run's layout — and, when with_params, loads its
 * latest checkpoint. Runs recorded before their settings carried the shape take it from their
 * dataset. warn (may be NULL) gets the spec's warnings. */
int nl_run_model(struct nl_store *s, const char *name, int with_params, nl_warn_fn warn,
                 void *warn_ud, struct nl_run_info *info, struct nl_model **out,
                 struct nl_error *err);

/* A run's training settings as JSON, as nl_run_model and nl_run_settings_parse read them back
 * (the keys are described at the top of core/store/run_resume.c); m gives the frozen layers,
 * cluster whether it runs on hosts, skipped the batches skipped so far. NULL when out of memory;
 * freed with nl_free. */
char *nl_run_settings_format(const struct nl_train_opts *o, const struct nl_model *m,
                             struct nl_shape shape, int nclasses, int cluster, long skipped);

/* The training options back from a run's settings (run names it in messages); skipped and
 * cluster (either may be NULL) get the batches skipped so far and whether it trained on hosts. */
int nl_run_settings_parse(const char *settings_json, const char *run, struct nl_train_opts *o,
                          long *skipped, int *cluster, struct nl_error *err);

/* settings_json (a JSON object) with the members of old_json that it lacks added at its end, in
 * their order; a copy of settings_json when old_json is NULL or either is not a JSON object. NULL
 * when out of memory; freed with nl_free. */
char *nl_run_settings_keep(const char *settings_json, const char *old_json);

/* What a resume may change of a run's settings; each < 0 keeps the run's. A finished run needs
 * more epochs than it was set to train. */
struct nl_resume_request {
    int epochs;
    int on_nan; /* enum nl_on_nan */
    long checkpoint_every;
    int on_hosts; /* 1: it goes on on hosts, so it must be a cluster run; 0: a local run */
    /* A cluster run's exchange from now on, "bf16" or "none", stored as the run's; NULL: as the
     * run's settings say. */
    const char *compress;
};

/* A run ready to continue from its latest checkpoint. */
struct nl_run_resumed {
    struct nl_run_info run;
    struct nl_model *model;    /* the run's model with the checkpoint's parameters */
    struct nl_dataset *data;   /* the run's dataset */
    struct nl_train_opts opts; /* the run's options; opts.resume points at resume */
    struct nl_resume resume;
    long skipped; /* batches skipped before this session */
    int cluster;  /* it trained on hosts: continue it with nl_cluster_train */
    /* Owned here; resume points into them. */
    float *optim_state;
    double *watched;
};

/* Prepares the run named name to resume, as `nnlab train --resume` does: rebuilds its model,
 * loads its latest checkpoint with the optimizer state, its dataset and its settings (with req's
 * changes), and marks it running again with those settings. Then nl_train(r->model, r->data,
 * &r->opts, ...) continues it; the caller finishes it with nl_run_finish. warn (may be NULL)
 * gets the spec's warnings. *out freed with nl_run_resumed_free. */
int nl_run_resume_open(struct nl_store *s, const char *name, const struct nl_resume_request *req,
                       nl_warn_fn warn, void *warn_ud, struct nl_run_resumed **out,
                       struct nl_error *err) NL_MUST_CHECK;
void nl_run_resumed_free(struct nl_run_resumed *r);

/* How a cluster run exchanged, from its settings (README "overlap"): the --overlap mode and, for
 * "auto", what the members measured and chose (the session records it as overlap_chosen,
 * overlap_sync_ms, overlap_overlapped_ms and overlap_step). */
struct nl_run_overlap {
    int cluster;                   /* it trained on hosts or MPI ranks; 0: a local run */
    char mode[8];                  /* "auto", "on" or "off" */
    int measured;                  /* auto measured: the members below hold its choice */
    int overlapped;                /* 1: overlapped, 0: synchronous */
    double sync_ms, overlapped_ms; /* the members' mean median step times */
    long step;                     /* the mode holds from step step + 1 */
};

/* Reads o from a run's settings JSON (nl_run_get's settings_json). */
int nl_run_overlap_parse(const char *settings_json, struct nl_run_overlap *o,
                         struct nl_error *err) NL_MUST_CHECK;

/* o as people read it, into buf: "auto: overlapped from step 28 (41.2 ms synchronous, 35.0 ms
 * overlapped)", "auto, not measured" (a run of one worker or too few steps follows the static
 * rule; a run in its first steps has not measured yet), "on" or "off"; "" for a local run. */
const char *nl_run_overlap_text(const struct nl_run_overlap *o, char *buf, size_t size);

#endif
