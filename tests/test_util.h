/* Helpers the unit tests share: a seeded generator and float buffers to fill from it, a model
 * built from spec text, and synthetic datasets. Failures are reported with diag(); include after
 * tap.h. */
#ifndef NNLAB_TESTS_UTIL_H
#define NNLAB_TESTS_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/model.h"
#include "nnlab/rng.h"
#include "nnlab/spec.h"
#include "nnlab/trainer.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

static struct nl_rng rng __attribute__((unused)); /* each test that uses it seeds it */

/* This process's peak resident memory so far, in KiB. (Under AddressSanitizer its quarantine
 * keeps freed memory: peaks measure little there.) */
static inline long max_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* count zeroed floats; the test ends when memory runs out. */
static inline float *floats(size_t count)
{
    float *p = calloc(count ? count : 1, sizeof *p);
    if (!p) {
        diag("out of memory");
        exit(1);
    }
    return p;
}

/* x[0..count) uniform in [lo, hi) from rng. */
static inline void fill(float *x, size_t count, float lo, float hi)
{
    for (size_t i = 0; i < count; i++)
        x[i] = lo + (hi - lo) * nl_rng_uniform(&rng);
}

static inline void fill_value(float *x, size_t count, float v)
{
    for (size_t i = 0; i < count; i++)
        x[i] = v;
}

/* The model of spec text for samples of shape in and classes classes, or NULL with the error
 * shown. */
static inline struct nl_model *build(const char *text, struct nl_shape in, int classes)
{
    struct nl_spec *spec;
    struct nl_model *m = NULL;
    struct nl_error err = {0};

    if (nl_spec_parse(&spec, text, "test-spec", NULL, NULL, &err) < 0) {
        diag("spec: %s", err.msg);
        return NULL;
    }
    if (nl_model_build(&m, spec, in, classes, &err) < 0)
        diag("build: %s", err.msg);
    nl_spec_free(spec);
    return m;
}

/* sum(logits * r) of the executor's forward pass over n inputs with k classes: the objective
 * whose gradient backward(r) gives, for checks against finite differences. */
static inline double logits_dot(struct nl_exec *x, const float *p, const float *in, int n,
                                const float *r, int k, int training, struct nl_rng *gen)
{
    const float *logits = nl_exec_forward(x, p, in, n, training, gen);
    double s = 0.0;
    for (int i = 0; i < n * k; i++)
        s += (double)logits[i] * r[i];
    return s;
}

/* A dataset from "test" named name, of kind, for samples of shape as dtype, with nclasses classes
 * named by the printf format names and the class index ("c%d"; "c" names each c) and one
 * normalisation (mean, std); its splits are empty for the test to fill. */
static inline struct nl_dataset *dataset_new(const char *name, const char *kind,
                                             struct nl_shape shape, enum nl_dtype dtype,
                                             int nclasses, const char *names, float mean, float std)
{
    struct nl_dataset *d = nl_calloc(1, sizeof *d);

    d->name = nl_strdup(name);
    d->source = nl_strdup("test");
    d->kind = nl_strdup(kind);
    d->shape = shape;
    d->dtype = dtype;
    d->nclasses = nclasses;
    d->class_names = nl_calloc((size_t)nclasses, sizeof *d->class_names);
    for (int k = 0; k < nclasses; k++) {
        char label[32];
        snprintf(label, sizeof label, names, k);
        d->class_names[k] = nl_strdup(label);
    }
    d->nnorm = 1;
    d->mean = nl_calloc(1, sizeof(float));
    d->std = nl_calloc(1, sizeof(float));
    d->mean[0] = mean;
    d->std[0] = std;
    return d;
}

/* The synthetic dataset of the training tests: 12x12 gray images of four classes, a bright 4x4
 * square in the class's quadrant (jittered by up to jitter - 1 pixels; what a square jittered to
 * the far edge would put past the image is dropped, the draws staying the same) on dim noise,
 * drawn from seed; n samples per split (train, val, test); as uint8, or as floats in [0, 1]. */
enum { QUAD_SIDE = 12, QUAD_CLASSES = 4 };

static inline struct nl_dataset *quadrants(const uint32_t n[NL_NSPLITS], uint64_t seed,
                                           enum nl_dtype dtype, int jitter)
{
    struct nl_dataset *d =
        dataset_new("synthetic", "idx", (struct nl_shape){1, QUAD_SIDE, QUAD_SIDE}, dtype,
                    QUAD_CLASSES, "q%d", 0.25f, 0.3f);
    const size_t px = QUAD_SIDE * QUAD_SIDE, item = dtype == NL_U8 ? 1 : sizeof(float);
    struct nl_rng r;

    nl_rng_seed(&r, seed);
    for (int s = 0; s < NL_NSPLITS; s++) {
        unsigned char *x = nl_calloc((size_t)n[s] * px * item + 1, 1);
        int32_t *y = nl_calloc((size_t)n[s] + 1, sizeof *y);
        for (uint32_t i = 0; i < n[s]; i++) {
            int k = (int)nl_rng_below(&r, QUAD_CLASSES);
            int oy = (k / 2) * 6 + 1 + (int)nl_rng_below(&r, (uint64_t)jitter);
            int ox = (k % 2) * 6 + 1 + (int)nl_rng_below(&r, (uint64_t)jitter);
            unsigned char *img = x + (size_t)i * px * item;
            for (size_t p = 0; p < px; p++) {
                uint8_t v = (uint8_t)nl_rng_below(&r, 80);
                if (dtype == NL_U8)
                    img[p] = v;
                else
                    ((float *)img)[p] = (float)v / 255.0f;
            }
            for (int yy = 0; yy < 4; yy++)
                for (int xx = 0; xx < 4; xx++) {
                    uint8_t v = (uint8_t)(150 + nl_rng_below(&r, 106));
                    int at = (oy + yy) * QUAD_SIDE + ox + xx;
                    if (at >= QUAD_SIDE * QUAD_SIDE)
                        continue;
                    if (dtype == NL_U8)
                        img[at] = v;
                    else
                        ((float *)img)[at] = (float)v / 255.0f;
                }
            y[i] = k;
        }
        d->split[s].n = n[s];
        d->split[s].x = x;
        d->split[s].y = y;
    }
    return d;
}

/* Every row of the table of run settings (nl_settings) set in o to a value unlike its default,
 * type by type (a seed past 2^53, which a double would not hold), so that a round trip through
 * a serialiser shows each one kept. */
static inline void settings_distinct(struct nl_train_opts *o)
{
    nl_train_defaults(o);
    nl_optim_defaults(&o->optim, NL_OPTIM_ADAM);
    for (int i = 0; i < nl_nsettings; i++) {
        const struct nl_setting *f = &nl_settings[i];
        char *p = (char *)o + f->offset;
        int v = 3 + i;
        long l = 1000L + i;
        uint64_t u = (1ULL << 60) + 3;
        float x = 0.01f * (float)(i + 1) + 0.001f;
        double d = 0.123456789012345 + i;
        switch (f->type) {
        case NL_SETTING_INT:
            memcpy(p, &v, sizeof v);
            break;
        case NL_SETTING_LONG:
            memcpy(p, &l, sizeof l);
            break;
        case NL_SETTING_U64:
            memcpy(p, &u, sizeof u);
            break;
        case NL_SETTING_BOOL:
        case NL_SETTING_COMPRESS:
            v = 1;
            memcpy(p, &v, sizeof v);
            break;
        case NL_SETTING_FLOAT:
            memcpy(p, &x, sizeof x);
            break;
        case NL_SETTING_DOUBLE:
            memcpy(p, &d, sizeof d);
            break;
        case NL_SETTING_OPTIM:
            break; /* Adam, above */
        case NL_SETTING_SCHEDULE:
            nl_schedule_parse(&o->schedule, "multistep:2,5:0.5", NULL);
            break;
        case NL_SETTING_ON_NAN:
            o->on_nan = NL_ON_NAN_SKIP_BATCH;
            break;
        case NL_SETTING_RESIZED_CROP:
            o->augment.scale_min = 0.25f;
            o->augment.scale_max = 0.75f;
            o->augment.ratio_min = 0.5f;
            o->augment.ratio_max = 2.0f;
            break;
        case NL_SETTING_LOSS:
            o->loss = NL_LOSS_HUBER;
            break;
        case NL_SETTING_OVERLAP:
            o->overlap = NL_OVERLAP_OFF;
            break;
        }
    }
}

/* The name of the first setting that differs between a and b, or NULL. */
static inline const char *settings_differ(const struct nl_train_opts *a,
                                          const struct nl_train_opts *b)
{
    for (int i = 0; i < nl_nsettings; i++) {
        const struct nl_setting *f = &nl_settings[i];
        size_t n = f->type == NL_SETTING_LONG           ? sizeof(long)
                   : f->type == NL_SETTING_U64          ? sizeof(uint64_t)
                   : f->type == NL_SETTING_DOUBLE       ? sizeof(double)
                   : f->type == NL_SETTING_SCHEDULE     ? sizeof(struct nl_schedule)
                   : f->type == NL_SETTING_RESIZED_CROP ? 4 * sizeof(float)
                                                        : sizeof(int);
        if (memcmp((const char *)a + f->offset, (const char *)b + f->offset, n) != 0)
            return f->name;
    }
    return NULL;
}

#endif
