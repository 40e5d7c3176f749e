/* A fixed pool of threads that run one function together, split by (index, count), with a
 * barrier between phases. The calling thread is index 0, so a pool of one runs inline. */
#ifndef NNLAB_POOL_H
#define NNLAB_POOL_H

#include <stdatomic.h>

#include "nnlab/error.h"

struct nl_pool;

typedef void (*nl_pool_fn)(void *arg, int index, int count);

int nl_pool_new(struct nl_pool **out, int threads, struct nl_error *err);
void nl_pool_free(struct nl_pool *p);
int nl_pool_size(const struct nl_pool *p);
/* Runs fn(arg, i, count) on every thread and returns when all have returned. */
void nl_pool_run(struct nl_pool *p, nl_pool_fn fn, void *arg);
/* Waits until every thread of the current run has reached it; call from inside fn only. */
void nl_pool_barrier(struct nl_pool *p);

/* Watches *v as a pool's waits do before they sleep (pausing, then yielding the core, for up
 * to a fraction of a millisecond): 1 once it differs from old, 0 if it did not meanwhile. For
 * waits of its own that a caller ends on a condition variable. */
int nl_pool_spin(atomic_uint *v, unsigned old);

/* Cores online, at least 1. */
int nl_cpu_count(void);

#endif
