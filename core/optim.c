/* SGD (momentum, Nesterov, weight decay) and Adam, with PyTorch's update rules:
 *   SGD:  g += wd w;  v = mu v + g;  w -= lr (nesterov ? g + mu v : v)       (v starts at 0)
 *   Adam: g += wd w;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *         w -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 * PyTorch initialises the SGD velocity to the first gradient; starting at zero gives the same
 * value after the first step (mu 0 + g), so the two agree exactly. */
#include "nnlab/optim.h"

#include <math.h>
#include <string.h>

void nl_optim_defaults(struct nl_optim *o, enum nl_optim_kind kind)
{
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    if (kind == NL_OPTIM_SGD) {
        o->lr = 0.05f;
        o->momentum = 0.9f;
    } else {
        o->lr = 1e-3f;
    }
}

static const char *const kind_names[] = {"sgd", "adam"};

int nl_optim_kind_parse(enum nl_optim_kind *kind, const char *name, struct nl_error *err)
{
    for (int i = 0; i < (int)(sizeof kind_names / sizeof kind_names[0]); i++) {
        if (strcmp(name, kind_names[i]) == 0) {
            *kind = (enum nl_optim_kind)i;
            return 0;
        }
    }
    return nl_error_set(err, NL_EINVAL, "unknown optimizer '%s' (known: sgd, adam)", name);
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
    if (o->kind == NL_OPTIM_ADAM) {
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
    if (o->kind == NL_OPTIM_ADAM)
        return 2;
    return o->momentum > 0.0f ? 1 : 0;
}

static void sgd_step(const struct nl_optim *o, float *w, const float *g, float *const *state,
                     size_t n, float lr)
{
    const float wd = o->weight_decay, mu = o->momentum;

    if (mu == 0.0f) {
        for (size_t i = 0; i < n; i++)
            w[i] -= lr * (g[i] + wd * w[i]);
        return;
    }
    float *v = state[0];
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * w[i];
        v[i] = mu * v[i] + gi;
        w[i] -= lr * (o->nesterov ? gi + mu * v[i] : v[i]);
    }
}

static void adam_step(const struct nl_optim *o, float *w, const float *g, float *const *state,
                      size_t n, long step, float lr)
{
    float *m = state[0], *v = state[1];
    const float b1 = o->beta1, b2 = o->beta2, wd = o->weight_decay;
    const double c1 = 1.0 - pow(b1, (double)step), c2 = 1.0 - pow(b2, (double)step);
    const float step_size = (float)(lr / c1), inv_sqrt_c2 = (float)(1.0 / sqrt(c2));

    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * w[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        w[i] -= step_size * m[i] / (sqrtf(v[i]) * inv_sqrt_c2 + o->eps);
    }
}

void nl_optim_step(const struct nl_optim *o, float *w, const float *g, float *const *state,
                   size_t n, long step, float lr)
{
    if (o->kind == NL_OPTIM_ADAM)
        adam_step(o, w, g, state, n, step, lr);
    else
        sgd_step(o, w, g, state, n, lr);
}

static const char *const schedule_names[] = {"constant", "cosine"};

int nl_schedule_parse(enum nl_schedule_kind *kind, const char *name, struct nl_error *err)
{
    for (int i = 0; i < (int)(sizeof schedule_names / sizeof schedule_names[0]); i++) {
        if (strcmp(name, schedule_names[i]) == 0) {
            *kind = (enum nl_schedule_kind)i;
            return 0;
        }
    }
    return nl_error_set(err, NL_EINVAL, "unknown schedule '%s' (known: constant, cosine)", name);
}

const char *nl_schedule_name(enum nl_schedule_kind kind)
{
    return (unsigned)kind < sizeof schedule_names / sizeof schedule_names[0] ? schedule_names[kind]
                                                                             : "?";
}

float nl_schedule_lr(enum nl_schedule_kind kind, float base, long step, long total)
{
    if (kind != NL_SCHEDULE_COSINE || total <= 0)
        return base;
    /* Step 1 runs at the base rate; the last step at a small fraction of it. */
    double t = (double)(step - 1) / (double)total;
    if (t > 1.0)
        t = 1.0;
    return (float)(base * 0.5 * (1.0 + cos(3.14159265358979323846 * t)));
}
