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

    /* AdamW decays the weight apart from the gradient: w = w (1 - lr wd), then Adam. */
    nl_optim_defaults(&o, NL_OPTIM_ADAMW);
    is_float(o.weight_decay, 0.01, 1e-9, "AdamW's default decay");
    w = 1.0f;
    v = m2 = 0.0f;
    step_one(&o, &w, -2.0f, &v, &m2, 1);
    is_float(w, 1.0 * (1.0 - 0.001 * 0.01) + 0.001, 1e-6, "AdamW step 1");
    is_float(v, -0.2, 1e-7, "AdamW keeps the decay out of the moments");

    /* RMSprop: v = 0.01 g^2 = 0.04, w -= 0.01 * 2 / 0.2 = 0.1. */
    nl_optim_defaults(&o, NL_OPTIM_RMSPROP);
    is_int(nl_optim_state_arrays(&o), 1, "RMSprop keeps one array");
    w = 1.0f;
    v = 0.0f;
    step_one(&o, &w, 2.0f, &v, NULL, 1);
    is_float(v, 0.04, 1e-7, "RMSprop square average");
    is_float(w, 0.9, 1e-5, "RMSprop step");
    o.momentum = 0.5f;
    is_int(nl_optim_state_arrays(&o), 2, "RMSprop with momentum keeps two");
    w = 1.0f;
    v = m2 = 0.0f;
    step_one(&o, &w, 2.0f, &v, &m2, 1);
    step_one(&o, &w, 2.0f, &v, &m2, 2);
    /* step 2: v = 0.99 * 0.04 + 0.04 = 0.0796; b = 0.5 * 10 + 2 / sqrt(0.0796) */
    is_float(w, 0.9 - 0.01 * (5.0 + 2.0 / sqrt(0.0796)), 1e-5, "RMSprop momentum step 2");

    /* Adagrad: s = g^2, w -= lr g / sqrt(s): the first step moves by lr. */
    nl_optim_defaults(&o, NL_OPTIM_ADAGRAD);
    w = 1.0f;
    v = 0.0f;
    step_one(&o, &w, 3.0f, &v, NULL, 1);
    is_float(w, 0.99, 1e-6, "Adagrad step 1");
    step_one(&o, &w, 4.0f, &v, NULL, 2);
    is_float(w, 0.99 - 0.01 * 4.0 / 5.0, 1e-6, "Adagrad step 2 (s = 9 + 16)");
    is_int(nl_optim_kind_parse(&kind, "rmsprop", &err), 0, "rmsprop is known");
    is_int(nl_optim_kind_parse(&kind, "adagrad", &err), 0, "adagrad is known");
    is_int(nl_optim_kind_parse(&kind, "adamw", &err), 0, "adamw is known");

    /* Schedules. 10 steps an epoch, 100 steps in all. */
    struct nl_schedule sch = {0};
    char text[64];
    is_int(nl_schedule_parse(&sch, "cosine", &err), 0, "cosine parses");
    is_float(nl_schedule_lr(&sch, 0.1f, 1, 10, 100, 1), 0.1, 1e-7, "cosine: step 1 at the base");
    is_float(nl_schedule_lr(&sch, 0.1f, 51, 10, 100, 1), 0.05, 1e-6, "cosine: half at mid-run");
    ok(nl_schedule_lr(&sch, 0.1f, 100, 10, 100, 1) < 1e-4, "cosine: near 0 at the end");
    is_int(nl_schedule_parse(&sch, "constant", &err), 0, "constant parses");
    is_float(nl_schedule_lr(&sch, 0.1f, 77, 10, 100, 1), 0.1f, 0, "constant: the base rate");
    is_int(nl_schedule_parse(&sch, "step:3:0.5", &err), 0, "step parses");
    is_float(nl_schedule_lr(&sch, 0.1f, 30, 10, 100, 1), 0.1f, 1e-7, "step: epoch 3 at the base");
    is_float(nl_schedule_lr(&sch, 0.1f, 31, 10, 100, 1), 0.05, 1e-7, "step: epoch 4 halved");
    is_float(nl_schedule_lr(&sch, 0.1f, 61, 10, 100, 1), 0.025, 1e-7, "step: epoch 7 quartered");
    nl_schedule_format(&sch, text, sizeof text);
    is_str(text, "step:3:0.5", "step formats back");
    is_int(nl_schedule_parse(&sch, "multistep:2,5", &err), 0, "multistep parses");
    is_float(nl_schedule_lr(&sch, 1.0f, 20, 10, 100, 1), 1.0, 1e-7, "multistep: before 2");
    is_float(nl_schedule_lr(&sch, 1.0f, 21, 10, 100, 1), 0.1, 1e-7, "multistep: after 2");
    is_float(nl_schedule_lr(&sch, 1.0f, 51, 10, 100, 1), 0.01, 1e-8, "multistep: after 5");
    is_int(nl_schedule_parse(&sch, "exponential:0.9", &err), 0, "exponential parses");
    is_float(nl_schedule_lr(&sch, 1.0f, 25, 10, 100, 1), 0.81, 1e-6, "exponential: epoch 3");
    sch.warmup_epochs = 2.0f;
    is_float(nl_schedule_lr(&sch, 1.0f, 5, 10, 100, 1), 0.25, 1e-6, "warmup: a quarter in");
    is_float(nl_schedule_lr(&sch, 1.0f, 25, 10, 100, 1), 0.81, 1e-6, "warmup: done by epoch 3");
    is_int(nl_schedule_parse(&sch, "plateau:2:0.5", &err), 0, "plateau parses");
    is_float(sch.warmup_epochs, 2.0, 0, "parsing keeps the warmup");
    struct nl_plateau pl;
    nl_plateau_init(&pl);
    is_int(nl_plateau_update(&pl, &sch, 0.5), 0, "plateau: improving");
    is_int(nl_plateau_update(&pl, &sch, 0.6), 0, "plateau: improving");
    is_int(nl_plateau_update(&pl, &sch, 0.6), 0, "plateau: one flat epoch");
    is_int(nl_plateau_update(&pl, &sch, 0.59), 1, "plateau: two flat epochs lower the rate");
    is_float(pl.factor, 0.5, 0, "by gamma");
    is_float(nl_schedule_lr(&sch, 1.0f, 95, 10, 100, pl.factor), 0.5, 0, "the rate follows");
    static const char *bad[] = {"triangle",      "step",        "step:0",        "step:2:1.5",
                                "multistep:5,3", "exponential", "exponential:2", "cosine:3",
                                "plateau:x",     "step:3:0.5:9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        is_int(nl_schedule_parse(&sch, bad[i], &err), NL_EINVAL, "'%s' refused", bad[i]);
        like(err.msg, bad[i], "naming it");
    }
    return done_testing();
}
