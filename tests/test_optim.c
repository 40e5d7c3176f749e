/* Optimizer steps against values computed by hand from PyTorch's update rules. */
#include <math.h>
#include <string.h>

#include "nnlab/optim.h"
#include "tap.h"

static void step_one(const struct nl_optim *o, float *w, float g, float *s0, float *s1, long t)
{
    float *state[NL_OPTIM_MAX_STATE] = {s0, s1};
    nl_optim_step(o, w, &g, state, 1, t, o->lr);
}

int main(void)
{
    struct nl_optim o;
    struct nl_error err = {0};
    float w, v, m2;

    /* Plain SGD: w -= lr g. */
    nl_optim_defaults(&o, NL_OPTIM_SGD);
    o.lr = 0.1f;
    o.momentum = 0.0f;
    is_int(nl_optim_state_arrays(&o), 0, "plain SGD keeps no state");
    w = 1.0f;
    step_one(&o, &w, 0.5f, NULL, NULL, 1);
    is_float(w, 0.95, 1e-7, "plain SGD step");

    /* Momentum 0.9: v = 0.5, w = 0.95; then v = 0.95, w = 0.855. */
    o.momentum = 0.9f;
    is_int(nl_optim_state_arrays(&o), 1, "momentum keeps one array");
    w = 1.0f;
    v = 0.0f;
    step_one(&o, &w, 0.5f, &v, NULL, 1);
    is_float(w, 0.95, 1e-7, "momentum step 1");
    is_float(v, 0.5, 1e-7, "velocity after step 1");
    step_one(&o, &w, 0.5f, &v, NULL, 2);
    is_float(v, 0.95, 1e-7, "velocity after step 2");
    is_float(w, 0.855, 1e-6, "momentum step 2");

    /* Weight decay 0.01 adds 0.01 w to the gradient: g = 0.51, w = 1 - 0.051. */
    o.weight_decay = 0.01f;
    w = 1.0f;
    v = 0.0f;
    step_one(&o, &w, 0.5f, &v, NULL, 1);
    is_float(w, 0.949, 1e-6, "weight decay");
    o.weight_decay = 0.0f;

    /* Nesterov: w -= lr (g + mu v) = 0.1 (0.5 + 0.45). */
    o.nesterov = 1;
    w = 1.0f;
    v = 0.0f;
    step_one(&o, &w, 0.5f, &v, NULL, 1);
    is_float(w, 0.905, 1e-6, "Nesterov step 1");
    /* step 2: v = 0.95; w -= 0.1 (0.5 + 0.855) */
    step_one(&o, &w, 0.5f, &v, NULL, 2);
    is_float(w, 0.905 - 0.1355, 1e-6, "Nesterov step 2");

    /* Adam, lr 0.001: the first step moves each weight by lr against the gradient's sign. */
    nl_optim_defaults(&o, NL_OPTIM_ADAM);
    is_int(nl_optim_state_arrays(&o), 2, "Adam keeps two arrays");
    is_float(o.lr, 0.001, 1e-9, "Adam's default rate");
    w = 1.0f;
    v = m2 = 0.0f;
    step_one(&o, &w, -2.0f, &v, &m2, 1);
    is_float(w, 1.001, 1e-6, "Adam step 1");
    is_float(v, -0.2, 1e-7, "first moment");
    is_float(m2, 0.004, 1e-7, "second moment (float rounding of 1 - 0.999)");
    /* Step 2 with g = 1: m = 0.9(-0.2) + 0.1 = -0.08, v = 0.999(0.004) + 0.001 = 0.004996;
     * mhat = -0.08 / 0.19, vhat = 0.004996 / 0.001999. */
    step_one(&o, &w, 1.0f, &v, &m2, 2);
    double mhat = -0.08 / 0.19, vhat = 0.004996 / (1.0 - 0.999 * 0.999);
    is_float(w, 1.001 - 0.001 * mhat / (sqrt(vhat) + 1e-8), 1e-6, "Adam step 2");

    /* A step over a whole vector equals steps over its slices (the cluster relies on it). */
    {
        enum { N = 37 };
        float wa[N], wb[N], g[N], sa[2][N], sb[2][N];
        for (int i = 0; i < N; i++) {
            wa[i] = wb[i] = (float)i / N - 0.5f;
            g[i] = (float)((i * 7) % 11) / 11.0f - 0.4f;
        }
        memset(sa, 0, sizeof sa);
        memset(sb, 0, sizeof sb);
        for (long t = 1; t <= 3; t++) {
            float *s_all[2] = {sa[0], sa[1]};
            float *s_lo[2] = {sb[0], sb[1]}, *s_hi[2] = {sb[0] + 20, sb[1] + 20};
            nl_optim_step(&o, wa, g, s_all, N, t, o.lr);
            nl_optim_step(&o, wb, g, s_lo, 20, t, o.lr);
            nl_optim_step(&o, wb + 20, g + 20, s_hi, N - 20, t, o.lr);
        }
        ok(memcmp(wa, wb, sizeof wa) == 0, "sliced Adam steps equal the whole step");
    }

    /* Settings are checked, and the messages name the setting. */
    nl_optim_defaults(&o, NL_OPTIM_SGD);
    o.lr = -1.0f;
    is_int(nl_optim_validate(&o, &err), NL_EINVAL, "negative learning rate refused");
    like(err.msg, "learning rate", "message names the learning rate");
    o.lr = 0.1f;
    o.momentum = 1.0f;
    is_int(nl_optim_validate(&o, &err), NL_EINVAL, "momentum 1 refused");
    like(err.msg, "momentum", "message names momentum");
    o.momentum = 0.0f;
    o.nesterov = 1;
    is_int(nl_optim_validate(&o, &err), NL_EINVAL, "Nesterov without momentum refused");
    enum nl_optim_kind kind;
    is_int(nl_optim_kind_parse(&kind, "adamax", &err), NL_EINVAL, "unknown optimizer refused");
    like(err.msg, "adamax", "message names the optimizer");
    is_int(nl_optim_kind_parse(&kind, "adam", &err), 0, "adam is known");
    is_int(kind, NL_OPTIM_ADAM, "adam parses to Adam");

    /* Schedules: cosine starts at the base rate, halves at mid-run, ends near 0. */
    enum nl_schedule_kind sched;
    is_int(nl_schedule_parse(&sched, "cosine", &err), 0, "cosine is known");
    is_float(nl_schedule_lr(sched, 0.1f, 1, 100), 0.1, 1e-7, "cosine: step 1 at the base rate");
    is_float(nl_schedule_lr(sched, 0.1f, 51, 100), 0.05, 1e-6, "cosine: half at mid-run");
    ok(nl_schedule_lr(sched, 0.1f, 100, 100) < 1e-4, "cosine: near 0 at the last step");
    ok(nl_schedule_lr(sched, 0.1f, 30, 100) > nl_schedule_lr(sched, 0.1f, 31, 100),
       "cosine: decreasing");
    is_int(nl_schedule_parse(&sched, "constant", &err), 0, "constant is known");
    is_float(nl_schedule_lr(sched, 0.1f, 77, 100), 0.1f, 0, "constant: always the base rate");
    is_int(nl_schedule_parse(&sched, "triangle", &err), NL_EINVAL, "unknown schedule refused");
    like(err.msg, "triangle", "message names it");
    return done_testing();
}
