/* The trainer: synchronous mini-batch training of a model on a dataset, on all cores.
 *
 * A global batch of B samples is cut into T contiguous shards, one per thread; each thread runs
 * forward and backward on its shard into its own gradient buffer; then thread t sums slice t of
 * all the buffers in thread order and applies the optimizer to that slice. The summation order
 * is fixed, so a run is reproducible for a given seed and thread count. The loss is the mean
 * over the global batch, so shards of any size are weighted by their sample counts.
 *
 * The trainer talks to the outside through hooks: events (progress, epoch ends, the end) and
 * checkpoints (after every epoch). */
#ifndef NNLAB_TRAINER_H
#define NNLAB_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/dataset.h"
#include "nnlab/error.h"
#include "nnlab/metrics.h"
#include "nnlab/model.h"
#include "nnlab/optim.h"
#include "nnlab/rng.h"

struct nl_sync;
struct nl_resume;

/* What a non-finite batch loss does: stop the run with NL_ENAN (the checkpoints written so far
 * stay), or discard that step's update and go on. */
enum nl_on_nan {
    NL_ON_NAN_STOP = 0,
    NL_ON_NAN_SKIP_BATCH = 1,
};

/* When a cluster member exchanges its gradient: AUTO (the default, 0) times steps of both modes
 * early in the run and keeps the faster (one member, or a run too short to measure: overlaps
 * where the host has a core free beside the compute threads of every member it runs;
 * nl_worker_overlap in include/nnlab/worker.h), ON always overlaps with the backward pass, OFF
 * exchanges after it. */
enum nl_overlap {
    NL_OVERLAP_AUTO = 0,
    NL_OVERLAP_ON = 1,
    NL_OVERLAP_OFF = 2,
};

/* How a training run's threads hold and reduce their gradients (nl_train_opts.gradients). */
enum nl_gradients { NL_GRADIENTS_AUTO = 0, NL_GRADIENTS_FULL, NL_GRADIENTS_STREAMED };

/* How a training run's threads share a step (nl_train_opts.parallel). */
enum nl_parallel { NL_PARALLEL_AUTO = 0, NL_PARALLEL_SAMPLES, NL_PARALLEL_UNITS };

struct nl_train_opts {
    int epochs;  /* >= 1 */
    int batch;   /* global batch size, >= 1 */
    int threads; /* 0: one per core */
    uint64_t seed;
    struct nl_optim optim;
    struct nl_schedule schedule; /* of the learning rate over the whole run */
    /* Early stopping, judged on validation accuracy (training accuracy without a validation
     * split): stop once it reaches target_accuracy (0: never), or after patience epochs without
     * improving (0: never). */
    double target_accuracy;
    int patience;
    /* Gradient clipping, after the reduction and before the optimizer (weight decay comes after
     * it, as in PyTorch): each value clamped to [-clip_value, clip_value], then the whole
     * trainable gradient scaled by clip_norm / norm where its global L2 norm exceeds clip_norm.
     * 0: off. */
    float clip_value, clip_norm;
    struct nl_augment augment;  /* of training batches; zero: none */
    const struct nl_sync *sync; /* NULL: a local run */
    /* skip-batch restores the parameters and optimizer state from a copy taken before the step
     * when the loss or any new parameter is not finite (a copy of both and a scan of the
     * parameters per step; local runs only). The skipped step still counts for the schedule,
     * the data order and the optimizer's step number. */
    enum nl_on_nan on_nan;
    /* A checkpoint every this many steps as well as after every epoch; 0: per epoch only. A run
     * without a validation split that follows training accuracy (plateau schedule, early
     * stopping) checkpoints at epoch ends only: a checkpoint cannot hold an epoch's accuracy so
     * far. */
    long checkpoint_every;
    /* A cluster run's exchange in bf16 (--compress bf16). The trainer does not read it: it is
     * a setting of the run, stored with it and kept when it resumes. */
    int bf16;
    /* A cluster run's exchange overlapped with the backward pass or not (--overlap, enum
     * nl_overlap); like bf16 a setting of the run that the trainer does not read. Either mode
     * gives the same bits: it changes when the bytes move, not what is summed. */
    int overlap;
    const struct nl_resume *resume; /* NULL: a fresh run */
    /* The loss (include/nnlab/layer.h): NL_LOSS_DEFAULT is cross-entropy for a classification
     * dataset and mse for a regression one; mse, mae and huber need a regression dataset. */
    enum nl_loss loss;
    /* Cached frozen features (nl_exec_prefix in include/nnlab/model.h,
     * core/engine/feature_cache.h): when the model's first layers are frozen, their output for each
     * training sample is kept from the first epoch that runs whole and read in the later ones,
     * which then run only the layers after them; the results are those of the uncached run (the
     * prefix computes the same numbers every epoch: batchnorm is in eval mode there, and dropout
     * and what follows it stay out of the prefix). Off with augmentation (the input changes every
     * epoch) and in cluster runs, said once through note. feature_cache_limit bytes may be held in
     * memory; a larger cache goes to a file under feature_cache_dir (NULL: none, the cache is
     * then off), where later runs with the same frozen weights and data find it. */
    int feature_cache; /* 1: on where it applies (the default); 0: off */
    /* 1: reduce, update and clear embedding tables whole, as every other parameter (the
     * reference for the default, which takes only the rows a step's tokens touched; both give
     * the same floats). */
    int dense_tables;
    /* NL_GRADIENTS_FULL: every thread holds a full-size gradient buffer and the update waits
     * for the whole backward (the path of a synchroniser, clipping and embedding tables);
     * NL_GRADIENTS_STREAMED: each layer's gradient goes through a small block per thread and is
     * summed and applied as soon as every thread is past the layer (see core/engine/trainer.c);
     * NL_GRADIENTS_AUTO (0, the default): streamed where the model's gradient is large enough
     * for the memory to matter, full elsewhere. All give the same floats. */
    enum nl_gradients gradients;
    /* NL_PARALLEL_SAMPLES: each thread runs the whole model on its shard of the batch;
     * NL_PARALLEL_UNITS: the threads run one executor on the whole batch together, each layer's
     * work split between them (dense layers by units), for models of dense and element-wise
     * layers only, without a synchroniser or clipping: the floats of one thread, whatever the
     * thread count; for a model whose last such layers hold most of its weights behind others
     * (lenet's dense layers behind its convolutions), those as one executor and the others by
     * samples (a hybrid step); elsewhere the same as SAMPLES. NL_PARALLEL_AUTO (0, the default):
     * as UNITS where that applies and the batch is small enough (see core/engine/trainer.c). */
    enum nl_parallel parallel;
    size_t feature_cache_limit;
    const char *feature_cache_dir;
    /* A sentence for the person training, said once (the feature cache's use). May be NULL. */
    void (*note)(void *ud, const char *text);
    void *note_ud;
    /* Per-layer wall time of thread 0 (nl_exec_time_layers in nnlab/model.h), from step
     * layer_from + 1 on: forward seconds of layer i added to layer_seconds[2i], backward to
     * [2i + 1] (2 * nlayers doubles, the caller's), the steps counted in the result's
     * layer_steps. NULL: not kept. Thread 0 runs the same layers as the others on its shard (a
     * team: its share of each), so its times are the step's, less the waits between layers. */
    double *layer_seconds;
    long layer_from;
};

/* The run's settings among nl_train_opts's fields, as one table (core/store/settings.c): each one's
 * name, type and place. The run-settings JSON (core/store/run_resume.c) and the SETUP text a
 * cluster's workers receive (net/proto.c) are both written and read through it, so a new setting is
 * one row. A name "augment.X" stands for member X of the JSON object "augment". */
enum nl_setting_type {
    NL_SETTING_INT,
    NL_SETTING_LONG,
    NL_SETTING_U64,
    NL_SETTING_BOOL,
    NL_SETTING_FLOAT,
    NL_SETTING_DOUBLE,
    NL_SETTING_OPTIM,        /* enum nl_optim_kind as its name; sets that optimizer's defaults */
    NL_SETTING_SCHEDULE,     /* struct nl_schedule as nl_schedule_format writes it */
    NL_SETTING_ON_NAN,       /* "stop" | "skip-batch" */
    NL_SETTING_COMPRESS,     /* an int flag as "bf16" | "none" */
    NL_SETTING_RESIZED_CROP, /* nl_augment's four floats from scale_min, "SMIN-SMAX:RMIN-RMAX" */
    NL_SETTING_LOSS,         /* enum nl_loss as its name (nl_loss_names) */
    NL_SETTING_OVERLAP,      /* enum nl_overlap as "auto" | "on" | "off" */
};

struct nl_setting {
    const char *name;
    enum nl_setting_type type;
    size_t offset; /* in struct nl_train_opts */
    int omit_off;  /* left out of the JSON when zero (off), as older runs lack it */
};

extern const struct nl_setting nl_settings[];
extern const int nl_nsettings;
/* enum nl_overlap's names, as --overlap and the settings write them. */
extern const char *const nl_overlap_names[];

/* Whether its value is written as a JSON string (the named kinds) rather than a number or a
 * boolean. */
int nl_setting_is_text(const struct nl_setting *f);
/* Its value in o as text: a number (floats with 9 significant digits, doubles 17: each gives
 * the same value back), true or false, or the string; no spaces. 0 if the setting is off
 * (zero) and omit_off says to leave it out, 1 otherwise. */
int nl_setting_format(const struct nl_setting *f, const struct nl_train_opts *o, char *buf,
                      size_t size);
/* Sets it in o from such text; the message names the setting and what was wrong. */
int nl_setting_parse(const struct nl_setting *f, struct nl_train_opts *o, const char *text,
                     struct nl_error *err);
/* The row of that name, or NULL. */
const struct nl_setting *nl_setting_find(const char *name);

/* Where a resumed run picks up (a cluster member's too: its synchroniser holds the optimizer
 * state, and optim_state is NULL), from one of its checkpoints: the model's parameters are
 * the checkpoint's, the options the run's own. Each epoch's sample order depends only on the
 * seed and the epoch, and each step's dropout and augmentation only on the seed, the step and
 * the thread count, so with the same thread count the run ends as the uninterrupted one would,
 * bit for bit. */
struct nl_resume {
    int epoch;      /* epochs completed */
    long iteration; /* steps completed: at least epoch whole epochs, less than epoch + 1 */
    /* The optimizer's state (nl_checkpoint's layout); NULL when the optimizer keeps none. */
    const float *optim_state;
    size_t optim_floats;
    /* For the plateau schedule and early stopping: the accuracy each completed epoch was judged
     * on (validation, or training without a validation split), epoch values; NULL: unknown,
     * those start afresh. */
    const double *watched;
};

/* A gradient synchroniser makes the trainer one member of a cluster run. Each step the member
 * takes its share of the global batch (share()), computes the gradient of those samples on all
 * its threads, scaled by 1/global batch so that the members' gradients sum to the global
 * gradient, and hands the thread-summed gradient (nreduce floats: the trainable part, then the
 * statistics sums) to step(), which replaces the local optimizer and clipping: it must leave the
 * new parameters in params[0, ntrainable) and the members' summed statistics in
 * grad[ntrainable, nreduce), from which the trainer updates the running statistics with the
 * global batch, as a local run does. Steps per epoch come from the synchroniser; the local
 * sample order is not used. The ITER events report the member's own samples and loss;
 * checkpoints carry no optimizer state (each owner keeps its slice's).
 *
 * Overlap (begin and ready not NULL): begin() comes before the step's forward pass with the
 * buffers step() will get; then, while the threads run backward from the last layer down, the
 * trainer reduces each layer's range of the gradient over the threads (in thread order, as
 * without overlap) as soon as every thread is past that layer, and calls ready(from, stats_from)
 * once grad[from, ntrainable) and grad[stats_from, nreduce) are final; they fall to 0 and
 * ntrainable by the end of the pass (calls may come from any thread, and a later call may carry
 * higher values than an earlier one). step() then waits for the exchange to end. The parameters
 * of layers the threads are past may change before step() returns; no others. overlaps (NULL:
 * every step overlaps) is asked before each step, after share(), whether that step (1-based)
 * overlaps; a step it says no to runs as without begin and ready.
 *
 * Judging (judge not NULL): a member cannot measure the accuracy an epoch is judged on (the
 * validation split and the global training accuracy are the driver's), so for a run that
 * follows it (nl_train_judges()) the trainer calls judge() at the end of every epoch but the
 * last, after its EPOCH event, and waits for the watched accuracy of that epoch (1-based); the
 * plateau schedule and early stopping then decide as a local run would on that value. A member
 * without judge() cannot run such a run. */
struct nl_sync {
    long iters; /* steps per epoch of the global run */
    /* The train-split indices of this member's share of step iter (0-based) of epoch (1-based),
     * at most batch of them; returns their count, which may be 0, and sets *global to the size
     * of the whole step's batch across members. */
    int (*share)(void *ud, int epoch, long iter, uint32_t *idx, int *global);
    /* grad and params have the model's nparams floats; step is 1-based. */
    int (*step)(void *ud, float *params, float *grad, long step, float lr, struct nl_error *err);
    int (*begin)(void *ud, float *params, float *grad, long step, float lr);
    void (*ready)(void *ud, size_t from, size_t stats_from);
    int (*overlaps)(void *ud, long step);
    int (*judge)(void *ud, int epoch, double *watched, struct nl_error *err);
    void *ud;
};

/* 1 when o's run follows the accuracy of its epochs: a plateau schedule, a target accuracy or a
 * patience. */
int nl_train_judges(const struct nl_train_opts *o);

/* What the plateau schedule and early stopping make of a run's epochs so far, fed each epoch's
 * watched accuracy (validation, or training without a validation split) in order. A cluster's
 * driver keeps one beside its members' so that all decide alike. */
struct nl_judge {
    struct nl_plateau plateau; /* its factor scales the rate */
    double best;               /* the best watched accuracy so far (-1: none yet) */
    int since_best;            /* epochs since it improved by more than 1e-4 */
};
void nl_judge_init(struct nl_judge *j);
/* Takes the watched accuracy of epoch (1-based; NaN: unknown, no improvement); returns 1 when
 * early stopping ends the run after it (never after o->epochs). */
int nl_judge_epoch(struct nl_judge *j, const struct nl_train_opts *o, int epoch, double watched);

/* Defaults that train the shipped models well: 10 epochs, batch 64, all cores, seed 1, SGD with
 * lr 0.05 and momentum 0.9, decayed to 0 by a cosine schedule over the run; the feature cache on
 * with 1 GiB in memory and no directory. */
void nl_train_defaults(struct nl_train_opts *o);

enum nl_event_kind {
    NL_EVENT_ITER,     /* after every step */
    NL_EVENT_EPOCH,    /* after an epoch and its validation */
    NL_EVENT_DONE,     /* after the final test evaluation */
    NL_EVENT_RECOVERY, /* cluster runs: a worker was lost, and the run goes on without a gap */
    NL_EVENT_OVERLAP,  /* cluster runs, --overlap auto: the members measured and chose */
};

/* What --overlap auto measured and chose (NL_EVENT_OVERLAP): the members' median step wall
 * time (share to the end of the exchange, mean over the members) with a synchronous and with an
 * overlapped exchange, and the mode the run keeps after step `step` (1-based). */
struct nl_overlap_choice {
    long step;
    double sync_seconds, overlap_seconds;
    int overlapped;
};

/* What a cluster run did about a lost worker (NL_EVENT_RECOVERY). */
struct nl_recovery {
    const char *host;
    const char *what;   /* "worker died (connection closed during step 37)" */
    const char *action; /* "restarted" (on its host) or "dropped" (its data shared out) */
    int restarts;       /* restarts used in the run so far, this one included */
    int max_restarts;
    long step;   /* completed steps the run continues from */
    int workers; /* workers from now on */
};

/* One worker of a cluster run, as the driver reports it: for an ITER event that step, for EPOCH
 * the epoch, for DONE the whole run. */
struct nl_worker_metrics {
    const char *host;
    long samples;
    double loss;            /* mean over its samples */
    double compute_seconds; /* forward, backward and the local reduction */
    double comm_seconds;    /* in the allreduce */
    unsigned long long bytes_sent;
};

/* A regression run (its dataset's regression flag) reports R^2 where a classification run reports
 * accuracy: every accuracy field of its events and results holds R^2 (of the targets, as
 * scikit-learn's r2_score), which is also what the plateau schedule and early stopping follow;
 * the regression flag and the MAE and RMSE fields (in the target's units) say so. Its losses are
 * of the standardised target. */
struct nl_event {
    enum nl_event_kind kind;
    int regression;
    double mae, rmse;           /* regression, ITER: running over the epoch; EPOCH: the epoch's */
    double val_mae, val_rmse;   /* regression, EPOCH: NAN without a validation split */
    double test_mae, test_rmse; /* regression, DONE: NAN without a test split */
    int epoch, epochs;          /* 1-based epoch in progress (or finished) */
    long iter, iters;           /* ITER: 1-based step within the epoch, and steps per epoch */
    double loss;                /* ITER: the batch's mean loss; EPOCH: the epoch's mean */
    double accuracy;            /* ITER: running over the epoch; EPOCH: the epoch's */
    double val_loss;            /* EPOCH: NAN without a validation split */
    double val_accuracy;        /* EPOCH: NAN without a validation split */
    double test_accuracy;       /* DONE: NAN without a test split */
    double test_loss;           /* DONE */
    double seconds;             /* ITER, EPOCH: training seconds of the epoch so far; DONE: all */
    double images_per_second;   /* training samples per training second (epoch, or all for DONE) */
    double eta_seconds;         /* ITER: estimated seconds left for the whole run */
    double lr;                  /* ITER: the learning rate of this step; EPOCH: of its last */
    long samples;               /* ITER, EPOCH: samples seen in the epoch */
    long skipped_batches;       /* EPOCH: steps of the epoch skipped for a non-finite loss */
    int nworkers;               /* cluster runs: the workers' own metrics; 0 for local runs */
    const struct nl_worker_metrics *workers;
    const struct nl_recovery *recovery;      /* RECOVERY only */
    const struct nl_overlap_choice *overlap; /* OVERLAP only */
};

struct nl_checkpoint {
    int epoch;      /* epochs completed */
    long iteration; /* optimizer steps completed */
    const float *params;
    size_t nparams;
    /* nl_optim_state_arrays() arrays of the model's ntrainable floats, one after another */
    const float *optim_state;
    size_t optim_floats;
    const struct nl_rng *rng; /* the data-order generator at this point */
    /* At the end of an epoch, its metrics (the NL_EVENT_EPOCH event that follows), to be stored
     * with the checkpoint in one transaction; NULL for checkpoints within an epoch. */
    const struct nl_event *metrics;
};

struct nl_train_hooks {
    /* Every event; a non-zero return stops training with NL_ECANCELED. May be NULL. */
    int (*event)(void *ud, const struct nl_event *ev);
    /* After every epoch; an error stops training. May be NULL. */
    int (*checkpoint)(void *ud, const struct nl_checkpoint *c, struct nl_error *err);
    void *ud;
};

struct nl_train_result {
    int epochs;
    int stopped_early;                 /* 1 when early stopping ended the run before o->epochs */
    double train_loss, train_accuracy; /* of the last epoch */
    double val_accuracy;               /* NAN without a validation split */
    double test_accuracy, test_loss;   /* NAN without a test split */
    double seconds;                    /* training time, evaluation excluded */
    double images_per_second;
    long skipped_batches; /* over the run (this session of it, when resumed) */
    /* A regression run: the accuracies above are R^2 (see struct nl_event). */
    int regression;
    double train_mae, train_rmse, val_mae, val_rmse, test_mae, test_rmse;
    /* The frozen-feature cache: 0 off, 1 in memory, 2 in a file; its bytes; and the epochs
     * that read it instead of running the prefix. */
    int feature_cache;
    size_t feature_cache_bytes;
    int cached_epochs;
    /* Streamed gradients: the steps in which some layer's weight gradient was split by output
     * channels between the threads (core/engine/trainer.c). */
    long split_steps;
    /* Of those layers' splits (one a layer a step), the ones whose weights every thread stepped
     * from its rows of the gradient as the layer made them, never writing them to memory. */
    long split_fused;
    /* Floats of the frozen layers' prepared weights (nl_prep in nnlab/model.h), made once for
     * the run; 0 for none. */
    size_t prep_floats;
    /* Steps whose layer times went into nl_train_opts.layer_seconds. */
    long layer_steps;
    /* The first layer that the threads ran as a team (nl_train_opts.parallel): 0 for all of
     * them, the tail's first in a hybrid step, the model's layer count for none. */
    int team_from;
};

/* The end of an epoch, written once for local runs (nl_train) and cluster runs (net/driver.c):
 * the epoch's sums become res's epoch fields and its NL_EVENT_EPOCH event (nl_epoch_event); the
 * checkpoint that carries its metrics is stored and the event reported (nl_epoch_report); the
 * accuracy the epoch is judged on (nl_epoch_watched) goes to nl_judge_epoch. */
struct nl_epoch_sums {
    int epoch;
    long iters;                    /* steps per epoch */
    double loss;                   /* summed over its samples */
    long correct, samples;         /* samples: those its loss and accuracy count */
    long skipped;                  /* steps skipped for a non-finite loss */
    double seconds;                /* its training time */
    double val_loss, val_accuracy; /* NAN without a validation split */
    double lr;                     /* of its last step */
    int nworkers;                  /* a cluster run's workers' totals, else 0 */
    const struct nl_worker_metrics *workers;
    /* A regression run: the epoch's training sums, and its validation MAE and RMSE (its R^2 in
     * val_accuracy); target_std turns the sums into the target's units. */
    int regression;
    struct nl_reg_sums reg;
    double target_std, val_mae, val_rmse;
};
void nl_epoch_event(const struct nl_epoch_sums *e, const struct nl_train_opts *o,
                    struct nl_train_result *res, struct nl_event *ev);
/* Stores cp (NULL: none) with ev as its metrics through hooks->checkpoint, then reports ev;
 * NL_ECANCELED when the event hook asks to stop. */
int nl_epoch_report(const struct nl_train_hooks *hooks, struct nl_checkpoint *cp,
                    const struct nl_event *ev, struct nl_error *err);
/* Validation accuracy, or training accuracy without a validation split. */
double nl_epoch_watched(const struct nl_event *ev);
/* The NL_EVENT_DONE event of a run that ended with res. */
void nl_done_event(const struct nl_train_result *res, const struct nl_train_opts *o,
                   struct nl_event *ev);

/* NL_EFORMAT unless r is a point a run of epochs epochs of iters steps can go on from: at least
 * r->epoch whole epochs and less than one more, or exactly its end. */
int nl_resume_check(const struct nl_resume *r, int epochs, long iters, struct nl_error *err);

/* Trains m (its parameters as initialised or loaded) on d's train split. The model must have
 * been built for d's shape and class count. */
int nl_train(struct nl_model *m, const struct nl_dataset *d, const struct nl_train_opts *o,
             const struct nl_train_hooks *hooks, struct nl_train_result *res, struct nl_error *err);

/* The same with a regression dataset's sums (reg may be NULL; for a regression dataset *accuracy
 * is R^2) and the loss a run trains with (NL_LOSS_DEFAULT: the dataset's default). */
int nl_evaluate_reg(const struct nl_model *m, const struct nl_dataset *d, enum nl_split split,
                    int threads, enum nl_loss loss, double *loss_out, double *accuracy,
                    struct nl_reg_sums *reg, struct nl_error *err);

/* A regression model's predictions on a split, for plots of predicted against actual values
 * and of residuals: pred and actual (the split's n) in the target's units, in the split's order.
 * NL_EINVAL for a classification dataset. */
int nl_evaluate_values(const struct nl_model *m, const struct nl_dataset *d, enum nl_split split,
                       int threads, float *pred, float *actual, struct nl_error *err);

/* Mean loss and accuracy of m on a split, on `threads` threads (0: all cores). */
int nl_evaluate(const struct nl_model *m, const struct nl_dataset *d, enum nl_split split,
                int threads, double *loss, double *accuracy, struct nl_error *err);

/* The same evaluation with the classification metrics: out is initialised here (release it with
 * nl_metrics_release) and finished; *loss is the mean loss. The split must not be empty. */
int nl_evaluate_metrics(const struct nl_model *m, const struct nl_dataset *d, enum nl_split split,
                        int threads, double *loss, struct nl_metrics *out, struct nl_error *err);

#endif
