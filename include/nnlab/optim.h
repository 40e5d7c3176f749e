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

enum nl_optim_kind { NL_OPTIM_SGD = 0, NL_OPTIM_ADAM = 1 };

#define NL_OPTIM_MAX_STATE 2

struct nl_optim {
    enum nl_optim_kind kind;
    float lr;
    float momentum;          /* SGD; 0 for plain SGD */
    int nesterov;            /* SGD with momentum > 0 */
    float weight_decay;      /* L2, added to the gradient as PyTorch's weight_decay does */
    float beta1, beta2, eps; /* Adam */
};

/* Defaults that train the shipped models well: SGD lr 0.05 momentum 0.9; Adam lr 1e-3,
 * betas (0.9, 0.999), eps 1e-8. */
void nl_optim_defaults(struct nl_optim *o, enum nl_optim_kind kind);
/* "sgd" or "adam"; errors list the known names. */
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

/* Learning-rate schedules: the rate of each step as a factor of the base rate. */
enum nl_schedule_kind {
    NL_SCHEDULE_CONSTANT = 0,
    NL_SCHEDULE_COSINE = 1, /* from the base rate down to 0 over the run, half a cosine wave */
};

/* "constant" or "cosine"; errors list the known names. */
int nl_schedule_parse(enum nl_schedule_kind *kind, const char *name, struct nl_error *err);
const char *nl_schedule_name(enum nl_schedule_kind kind);
/* The rate of step (1-based) out of total steps. */
float nl_schedule_lr(enum nl_schedule_kind kind, float base, long step, long total);

#endif
