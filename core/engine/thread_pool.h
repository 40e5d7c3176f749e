/* A fixed pool of threads that run one function together, split by (index, count), with a
 * barrier between phases. The calling thread is index 0, so a pool of one runs inline. */
#ifndef NNLAB_POOL_H
#define NNLAB_POOL_H

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

/* Cores online, at least 1. */
int nl_cpu_count(void);

#endif
