/* Helpers the unit tests share: a seeded generator and float buffers to fill from it, and a
 * model built from spec text. Failures are reported with diag(); include after tap.h. */
#ifndef NNLAB_TESTS_UTIL_H
#define NNLAB_TESTS_UTIL_H

#include <stdlib.h>
#include <sys/resource.h>

#include "nnlab/model.h"
#include "nnlab/rng.h"
#include "nnlab/spec.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

static struct nl_rng rng; /* each test seeds it */

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

#endif
