/* Optimizers over slices of the flat parameter vector.
 *
 * An optimizer's state mirrors the parameter layout: nl_optim_state_arrays() arrays of nparams
 * floats each (SGD momentum: the velocity; Adam: first and second moments). A step acts on any
 * slice [a, b) given the slice's parameters, gradient and state, so the same code serves the local
 * trainer (threads update disjoint slices) and the cluster (each owner updates its own slice).
 * The update rules are PyTorch's, so runs compare one to one. */
#ifndef NNLAB_OPTIM_H
#define NNLAB_OPTIM_H

#include <stddef.h>

#include "nnlab/error.h"

enum nl_optim_kind {
    NL_OPTIM_SGD = 0,
    NL_OPTIM_ADAM = 1,
    NL_OPTIM_ADAMW = 2, /* Adam with decoupled weight decay */
    NL_OPTIM_RMSPROP = 3,
    NL_OPTIM_ADAGRAD = 4,
};

#define NL_OPTIM_MAX_STATE 2

struct nl_optim {
    enum nl_optim_kind kind;
    float lr;
    float momentum;          /* SGD; 0 for plain SGD */
    int nesterov;            /* SGD with momentum > 0 */
    float weight_decay;      /* L2, added to the gradient as PyTorch's weight_decay does */
    float beta1, beta2, eps; /* Adam, AdamW; eps also RMSprop and Adagrad */
    float alpha;             /* RMSprop: smoothing of the squared gradient */
};

/* Defaults: SGD lr 0.05 momentum 0.9 (they train the shipped models well); the others as
 * PyTorch has them: Adam lr 1e-3, betas (0.9, 0.999), eps 1e-8; AdamW the same with weight
 * decay 0.01; RMSprop lr 0.01, alpha 0.99, eps 1e-8; Adagrad lr 0.01, eps 1e-10. */
void nl_optim_defaults(struct nl_optim *o, enum nl_optim_kind kind);
/* "sgd", "adam", "adamw", "rmsprop", "adagrad"; errors list the known names. */
int nl_optim_kind_parse(enum nl_optim_kind *kind, const char *name, struct nl_error *err);
const char *nl_optim_kind_name(enum nl_optim_kind kind);
/* Checks ranges (lr > 0, 0 <= momentum < 1, ...); the message names the setting. */
int nl_optim_validate(const struct nl_optim *o, struct nl_error *err);

/* Number of state arrays, each as long as the parameter vector. */
int nl_optim_state_arrays(const struct nl_optim *o);

/* One step on a slice of n parameters: w -= update(g, state). state[k] points at the slice's
 * part of state array k. step is the 1-based step count (Adam's bias correction); lr the rate
 * for this step (schedules may vary it). */
void nl_optim_step(const struct nl_optim *o, float *w, const float *g, float *const *state,
                   size_t n, long step, float lr);
/* nl_optim_step, then g = 0 (the gradient buffer ready for the next step's sums): for SGD in the
 * same pass over memory. */
void nl_optim_step_clear(const struct nl_optim *o, float *w, float *g, float *const *state,
                         size_t n, long step, float lr);
/* nl_optim_step with a gradient of zeros, g (n) being those zeros: the same floats for finite
 * weights. SGD with momentum and no weight decay does not read g (v = mu v + 0, w -= lr v); the
 * others take nl_optim_step. */
void nl_optim_step_zero(const struct nl_optim *o, float *w, const float *g, float *const *state,
                        size_t n, long step, float lr);

/* Learning-rate schedules. The rate of a step is the base rate times the schedule's factor,
 * times a linear warmup factor during the first warmup epochs. Epoch-based kinds change the
 * rate at epoch boundaries, as PyTorch's schedulers stepped once per epoch do. */
enum nl_schedule_kind {
    NL_SCHEDULE_CONSTANT = 0,
    NL_SCHEDULE_COSINE,      /* from the base rate down to 0 over the run, half a cosine wave */
    NL_SCHEDULE_STEP,        /* times gamma every step_epochs epochs */
    NL_SCHEDULE_MULTISTEP,   /* times gamma after each milestone epoch */
    NL_SCHEDULE_EXPONENTIAL, /* times gamma every epoch */
    NL_SCHEDULE_PLATEAU,     /* times gamma when validation accuracy stalls for patience epochs */
};

#define NL_SCHEDULE_MAX_MILESTONES 16

struct nl_schedule {
    enum nl_schedule_kind kind;
    float gamma;
    int step_epochs;
    int nmilestones;
    int milestones[NL_SCHEDULE_MAX_MILESTONES];
    int patience;
    float warmup_epochs; /* 0: none */
};

/* Parses "constant", "cosine", "step:EPOCHS[:GAMMA]", "multistep:E1,E2,...[:GAMMA]",
 * "exponential:GAMMA", "plateau[:PATIENCE[:GAMMA]]" (gamma defaults to 0.1, patience to 5).
 * Keeps s->warmup_epochs. Errors say what was expected. */
int nl_schedule_parse(struct nl_schedule *s, const char *text, struct nl_error *err);
/* The same text back, e.g. "step:10:0.1". */
void nl_schedule_format(const struct nl_schedule *s, char *buf, size_t size);

/* The rate of step (1-based) in a run of total steps, steps_per_epoch to an epoch.
 * plateau_factor is the reduce-on-plateau state's factor (1 for other kinds). */
float nl_schedule_lr(const struct nl_schedule *s, float base, long step, long steps_per_epoch,
                     long total, float plateau_factor);

/* Reduce-on-plateau: call once per epoch with the validation accuracy; factor is what the rate
 * is multiplied by (starts at 1). */
struct nl_plateau {
    double best;
    int bad_epochs;
    float factor;
};
void nl_plateau_init(struct nl_plateau *p);
/* Returns 1 when this epoch lowered the factor. */
int nl_plateau_update(struct nl_plateau *p, const struct nl_schedule *s, double val_accuracy);

#endif
