/* Optimizers and learning-rate schedules, with PyTorch's update rules:
 *   SGD:     g += wd w;  v = mu v + g;  w -= lr (nesterov ? g + mu v : v)       (v starts at 0)
 *   Adam:    g += wd w;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *            w -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 *   AdamW:   w -= lr wd w, then Adam without weight decay in the gradient
 *   RMSprop: g += wd w;  v = a v + (1-a) g^2;  with momentum: b = mu b + g / (sqrt(v) + eps),
 *            w -= lr b; without: w -= lr g / (sqrt(v) + eps)
 *   Adagrad: g += wd w;  s += g^2;  w -= lr g / (sqrt(s) + eps)
 * PyTorch initialises the SGD velocity to the first gradient; starting at zero gives the same
 * value after the first step (mu 0 + g), so the two agree exactly. */
#include "nnlab/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnlab/kernels.h"

void nl_optim_defaults(struct nl_optim *o, enum nl_optim_kind kind)
{
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->alpha = 0.99f;
    switch (kind) {
    case NL_OPTIM_SGD:
        o->lr = 0.05f;
        o->momentum = 0.9f;
        break;
    case NL_OPTIM_ADAM:
        o->lr = 1e-3f;
        break;
    case NL_OPTIM_ADAMW:
        o->lr = 1e-3f;
        o->weight_decay = 0.01f;
        break;
    case NL_OPTIM_RMSPROP:
        o->lr = 0.01f;
        break;
    case NL_OPTIM_ADAGRAD:
        o->lr = 0.01f;
        o->eps = 1e-10f;
        break;
    }
}

static const char *const kind_names[] = {"sgd", "adam", "adamw", "rmsprop", "adagrad"};

int nl_optim_kind_parse(enum nl_optim_kind *kind, const char *name, struct nl_error *err)
{
    for (int i = 0; i < (int)(sizeof kind_names / sizeof kind_names[0]); i++) {
        if (strcmp(name, kind_names[i]) == 0) {
            *kind = (enum nl_optim_kind)i;
            return 0;
        }
    }
    return nl_error_set(err, NL_EINVAL,
                        "unknown optimizer '%s' (known: sgd, adam, adamw, rmsprop, adagrad)", name);
}

const char *nl_optim_kind_name(enum nl_optim_kind kind)
{
    return (unsigned)kind < sizeof kind_names / sizeof kind_names[0] ? kind_names[kind] : "?";
}

int nl_optim_validate(const struct nl_optim *o, struct nl_error *err)
{
    if (!(o->lr > 0.0f) || !isfinite(o->lr))
        return nl_error_set(err, NL_EINVAL, "learning rate %g must be a positive number", o->lr);
    if (!(o->momentum >= 0.0f && o->momentum < 1.0f))
        return nl_error_set(err, NL_EINVAL, "momentum %g must be in [0, 1)", o->momentum);
    if (o->nesterov && o->momentum == 0.0f)
        return nl_error_set(err, NL_EINVAL, "Nesterov momentum needs a momentum above 0");
    if (!(o->weight_decay >= 0.0f) || !isfinite(o->weight_decay))
        return nl_error_set(err, NL_EINVAL, "weight decay %g must be 0 or more", o->weight_decay);
    if (o->kind == NL_OPTIM_RMSPROP && !(o->alpha >= 0.0f && o->alpha < 1.0f))
        return nl_error_set(err, NL_EINVAL, "RMSprop alpha %g must be in [0, 1)", o->alpha);
    if (o->kind != NL_OPTIM_SGD && !(o->eps > 0.0f))
        return nl_error_set(err, NL_EINVAL, "eps %g must be above 0", o->eps);
    if (o->kind == NL_OPTIM_ADAM || o->kind == NL_OPTIM_ADAMW) {
        if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f) || !(o->beta2 >= 0.0f && o->beta2 < 1.0f))
            return nl_error_set(err, NL_EINVAL, "Adam betas (%g, %g) must be in [0, 1)", o->beta1,
                                o->beta2);
        if (!(o->eps > 0.0f))
            return nl_error_set(err, NL_EINVAL, "Adam eps %g must be above 0", o->eps);
    }
    return 0;
}

int nl_optim_state_arrays(const struct nl_optim *o)
{
    switch (o->kind) {
    case NL_OPTIM_ADAM:
    case NL_OPTIM_ADAMW:
        return 2;
    case NL_OPTIM_RMSPROP:
        return o->momentum > 0.0f ? 2 : 1;
    case NL_OPTIM_ADAGRAD:
        return 1;
    case NL_OPTIM_SGD:
        break;
    }
    return o->momentum > 0.0f ? 1 : 0;
}

/* One pass (nl_sgd_update, in vectors where the CPU has AVX-512); g is written only with clear. */
static void sgd_step(const struct nl_optim *o, float *w, float *g, float *const *state, size_t n,
                     float lr, int clear)
{
    nl_sgd_update(w, o->momentum == 0.0f ? NULL : state[0], g, n, lr, o->momentum, o->weight_decay,
                  o->nesterov, clear);
}

static void adam_step(const struct nl_optim *o, float *w, const float *g, float *const *state,
                      size_t n, long step, float lr)
{
    float *m = state[0], *v = state[1];
    const float b1 = o->beta1, b2 = o->beta2;
    const float wd = o->kind == NL_OPTIM_ADAMW ? 0.0f : o->weight_decay;
    const double c1 = 1.0 - pow(b1, (double)step), c2 = 1.0 - pow(b2, (double)step);
    const float step_size = (float)(lr / c1), inv_sqrt_c2 = (float)(1.0 / sqrt(c2));

    if (o->kind == NL_OPTIM_ADAMW && o->weight_decay > 0.0f) {
        const float keep = 1.0f - lr * o->weight_decay;
        for (size_t i = 0; i < n; i++)
            w[i] *= keep;
    }
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * w[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        w[i] -= step_size * m[i] / (sqrtf(v[i]) * inv_sqrt_c2 + o->eps);
    }
}

static void rmsprop_step(const struct nl_optim *o, float *w, const float *g, float *const *state,
                         size_t n, float lr)
{
    float *v = state[0], *buf = state[1];
    const float a = o->alpha, wd = o->weight_decay, mu = o->momentum;

    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * w[i];
        v[i] = a * v[i] + (1.0f - a) * gi * gi;
        float step = gi / (sqrtf(v[i]) + o->eps);
        if (mu > 0.0f) {
            buf[i] = mu * buf[i] + step;
            step = buf[i];
        }
        w[i] -= lr * step;
    }
}

static void adagrad_step(const struct nl_optim *o, float *w, const float *g, float *const *state,
                         size_t n, float lr)
{
    float *sum = state[0];
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + o->weight_decay * w[i];
        sum[i] += gi * gi;
        w[i] -= lr * gi / (sqrtf(sum[i]) + o->eps);
    }
}

void nl_optim_step(const struct nl_optim *o, float *w, const float *g, float *const *state,
                   size_t n, long step, float lr)
{
    switch (o->kind) {
    case NL_OPTIM_ADAM:
    case NL_OPTIM_ADAMW:
        adam_step(o, w, g, state, n, step, lr);
        break;
    case NL_OPTIM_RMSPROP:
        rmsprop_step(o, w, g, state, n, lr);
        break;
    case NL_OPTIM_ADAGRAD:
        adagrad_step(o, w, g, state, n, lr);
        break;
    case NL_OPTIM_SGD:
        sgd_step(o, w, (float *)g, state, n, lr, 0); /* g is only read */
        break;
    }
}

void nl_optim_step_clear(const struct nl_optim *o, float *w, float *g, float *const *state,
                         size_t n, long step, float lr)
{
    if (o->kind == NL_OPTIM_SGD) {
        sgd_step(o, w, g, state, n, lr, 1);
        return;
    }
    nl_optim_step(o, w, g, state, n, step, lr);
    memset(g, 0, n * sizeof *g);
}

void nl_optim_step_zero(const struct nl_optim *o, float *w, const float *g, float *const *state,
                        size_t n, long step, float lr)
{
    if (o->kind != NL_OPTIM_SGD || o->momentum == 0.0f || o->weight_decay != 0.0f) {
        nl_optim_step(o, w, g, state, n, step, lr);
        return;
    }
    /* sgd_step's gi = 0 + 0 w is +0 for any finite w, and the + 0.0f keep its roundings (a -0
     * becomes +0 as there). */
    const float mu = o->momentum;
    float *v = state[0];
    for (size_t i = 0; i < n; i++) {
        v[i] = mu * v[i] + 0.0f;
        w[i] -= lr * (o->nesterov ? 0.0f + mu * v[i] : v[i]);
    }
}

static const char *const schedule_names[] = {"constant",  "cosine",      "step",
                                             "multistep", "exponential", "plateau"};

/* A number at *p ending at ':', ',' or the end; advances *p past it. */
static int take_number(const char **p, double *v)
{
    char *end;
    *v = strtod(*p, &end);
    if (end == *p || (*end && *end != ':' && *end != ','))
        return 0;
    *p = end;
    return 1;
}

int nl_schedule_parse(struct nl_schedule *s, const char *text, struct nl_error *err)
{
    struct nl_schedule r = {.gamma = 0.1f, .patience = 5, .warmup_epochs = s->warmup_epochs};
    const char *colon = strchr(text, ':'), *p;
    size_t n = colon ? (size_t)(colon - text) : strlen(text);
    double v;
    int kind = -1;

    for (int i = 0; i < (int)(sizeof schedule_names / sizeof schedule_names[0]); i++)
        if (strlen(schedule_names[i]) == n && strncmp(text, schedule_names[i], n) == 0)
            kind = i;
    if (kind < 0)
        return nl_error_set(err, NL_EINVAL,
                            "unknown schedule '%s' (known: constant, cosine, step:EPOCHS[:GAMMA], "
                            "multistep:E1,E2[:GAMMA], exponential:GAMMA, "
                            "plateau[:PATIENCE[:GAMMA]])",
                            text);
    r.kind = (enum nl_schedule_kind)kind;
    p = colon ? colon + 1 : NULL;
    switch (r.kind) {
    case NL_SCHEDULE_CONSTANT:
    case NL_SCHEDULE_COSINE:
        if (p)
            return nl_error_set(err, NL_EINVAL, "schedule '%s' takes no arguments", text);
        break;
    case NL_SCHEDULE_STEP:
        if (!p || !take_number(&p, &v) || v < 1 || v != (int)v || *p == ',')
            return nl_error_set(err, NL_EINVAL, "schedule '%s': want step:EPOCHS[:GAMMA]", text);
        r.step_epochs = (int)v;
        break;
    case NL_SCHEDULE_MULTISTEP:
        if (!p)
            return nl_error_set(err, NL_EINVAL, "schedule '%s': want multistep:E1,E2[:GAMMA]",
                                text);
        for (;;) {
            if (!take_number(&p, &v) || v < 1 || v != (int)v ||
                r.nmilestones == NL_SCHEDULE_MAX_MILESTONES ||
                (r.nmilestones && v <= r.milestones[r.nmilestones - 1]))
                return nl_error_set(err, NL_EINVAL,
                                    "schedule '%s': milestones are increasing epochs (at most "
                                    "%d)",
                                    text, NL_SCHEDULE_MAX_MILESTONES);
            r.milestones[r.nmilestones++] = (int)v;
            if (*p != ',')
                break;
            p++;
        }
        break;
    case NL_SCHEDULE_EXPONENTIAL:
        if (!p || !take_number(&p, &v) || *p == ',' || !(v > 0 && v <= 1))
            return nl_error_set(err, NL_EINVAL,
                                "schedule '%s': want exponential:GAMMA, 0 < GAMMA <= 1", text);
        r.gamma = (float)v;
        p = *p ? p : NULL;
        if (p)
            return nl_error_set(err, NL_EINVAL, "schedule '%s': extra argument", text);
        break;
    case NL_SCHEDULE_PLATEAU:
        if (p) {
            if (!take_number(&p, &v) || v < 1 || v != (int)v || *p == ',')
                return nl_error_set(err, NL_EINVAL,
                                    "schedule '%s': want plateau[:PATIENCE[:GAMMA]]", text);
            r.patience = (int)v;
        }
        break;
    }
    /* An optional :GAMMA after step, multistep and plateau. */
    if (p && *p == ':' && r.kind != NL_SCHEDULE_EXPONENTIAL) {
        p++;
        if (!take_number(&p, &v) || *p || !(v > 0 && v < 1))
            return nl_error_set(err, NL_EINVAL, "schedule '%s': gamma must be in (0, 1)", text);
        r.gamma = (float)v;
    } else if (p && *p) {
        return nl_error_set(err, NL_EINVAL, "schedule '%s': unexpected '%s'", text, p);
    }
    *s = r;
    return 0;
}

void nl_schedule_format(const struct nl_schedule *s, char *buf, size_t size)
{
    const char *name = (unsigned)s->kind < sizeof schedule_names / sizeof schedule_names[0]
                           ? schedule_names[s->kind]
                           : "?";
    size_t n = (size_t)snprintf(buf, size, "%s", name);
    switch (s->kind) {
    case NL_SCHEDULE_STEP:
        snprintf(buf + n, size - n, ":%d:%g", s->step_epochs, s->gamma);
        break;
    case NL_SCHEDULE_MULTISTEP:
        for (int i = 0; i < s->nmilestones && n < size; i++)
            n += (size_t)snprintf(buf + n, size - n, "%c%d", i ? ',' : ':', s->milestones[i]);
        if (n < size)
            snprintf(buf + n, size - n, ":%g", s->gamma);
        break;
    case NL_SCHEDULE_EXPONENTIAL:
        snprintf(buf + n, size - n, ":%g", s->gamma);
        break;
    case NL_SCHEDULE_PLATEAU:
        snprintf(buf + n, size - n, ":%d:%g", s->patience, s->gamma);
        break;
    default:
        break;
    }
}

float nl_schedule_lr(const struct nl_schedule *s, float base, long step, long steps_per_epoch,
                     long total, float plateau_factor)
{
    const long epoch = steps_per_epoch > 0 ? (step - 1) / steps_per_epoch : 0; /* 0-based */
    double f = 1.0;

    switch (s->kind) {
    case NL_SCHEDULE_COSINE:
        if (total > 0) {
            /* Step 1 runs at the base rate; the last step at a small fraction of it. */
            double t = (double)(step - 1) / (double)total;
            f = 0.5 * (1.0 + cos(3.14159265358979323846 * (t > 1.0 ? 1.0 : t)));
        }
        break;
    case NL_SCHEDULE_STEP:
        f = pow(s->gamma, (double)(epoch / s->step_epochs));
        break;
    case NL_SCHEDULE_MULTISTEP:
        for (int i = 0; i < s->nmilestones; i++)
            if (epoch >= s->milestones[i])
                f *= s->gamma;
        break;
    case NL_SCHEDULE_EXPONENTIAL:
        f = pow(s->gamma, (double)epoch);
        break;
    case NL_SCHEDULE_PLATEAU:
        f = plateau_factor;
        break;
    case NL_SCHEDULE_CONSTANT:
        break;
    }
    if (s->warmup_epochs > 0 && steps_per_epoch > 0) {
        double warm = (double)s->warmup_epochs * (double)steps_per_epoch;
        if ((double)step < warm)
            f *= (double)step / warm;
    }
    return (float)(base * f);
}

void nl_plateau_init(struct nl_plateau *p)
{
    p->best = -1.0;
    p->bad_epochs = 0;
    p->factor = 1.0f;
}

int nl_plateau_update(struct nl_plateau *p, const struct nl_schedule *s, double val_accuracy)
{
    if (s->kind != NL_SCHEDULE_PLATEAU || !isfinite(val_accuracy))
        return 0;
    if (val_accuracy > p->best + 1e-4) {
        p->best = val_accuracy;
        p->bad_epochs = 0;
        return 0;
    }
    if (++p->bad_epochs < s->patience)
        return 0;
    p->bad_epochs = 0;
    p->factor *= s->gamma;
    return 1;
}
