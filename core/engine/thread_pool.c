/* The thread pool: persistent threads parked on a condition variable between runs; a run bumps a
 * generation counter and wakes them. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "nnlab/alloc.h"

struct worker {
    struct nl_pool *pool;
    int index;
};

struct nl_pool {
    int count;
    pthread_t *threads;
    struct worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    pthread_barrier_t barrier;
    unsigned long generation;
    int pending; /* workers still running the current generation */
    int quit;
    nl_pool_fn fn;
    void *arg;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct nl_pool *p = w->pool;
    unsigned long seen = 0;

    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->generation == seen && !p->quit)
            pthread_cond_wait(&p->start, &p->mu);
        if (p->quit) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = p->generation;
        nl_pool_fn fn = p->fn;
        void *fn_arg = p->arg;
        pthread_mutex_unlock(&p->mu);

        fn(fn_arg, w->index, p->count);

        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

int nl_pool_new(struct nl_pool **out, int threads, struct nl_error *err)
{
    struct nl_pool *p;

    *out = NULL;
    if (threads < 1)
        return nl_error_set(err, NL_EINVAL, "thread count %d must be at least 1", threads);
    p = nl_calloc(1, sizeof *p);
    if (!p)
        return nl_error_set(err, NL_ENOMEM, "out of memory for a thread pool");
    p->count = threads;
    p->threads = nl_calloc((size_t)threads, sizeof *p->threads);
    p->workers = nl_calloc((size_t)threads, sizeof *p->workers);
    if (!p->threads || !p->workers) {
        nl_free(p->threads);
        nl_free(p->workers);
        nl_free(p);
        return nl_error_set(err, NL_ENOMEM, "out of memory for a thread pool");
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    pthread_barrier_init(&p->barrier, NULL, (unsigned)threads);
    for (int i = 1; i < threads; i++) {
        p->workers[i].pool = p;
        p->workers[i].index = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]) != 0) {
            p->count = i; /* join the ones that started */
            nl_pool_free(p);
            return nl_error_set(err, NL_ENOMEM, "cannot start thread %d of %d", i + 1, threads);
        }
    }
    *out = p;
    return 0;
}

void nl_pool_free(struct nl_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->count; i++)
        pthread_join(p->threads[i], NULL);
    pthread_barrier_destroy(&p->barrier);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    nl_free(p->threads);
    nl_free(p->workers);
    nl_free(p);
}

int nl_pool_size(const struct nl_pool *p)
{
    return p->count;
}

void nl_pool_run(struct nl_pool *p, nl_pool_fn fn, void *arg)
{
    if (p->count == 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->pending = p->count - 1;
    p->generation++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);

    fn(arg, 0, p->count);

    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void nl_pool_barrier(struct nl_pool *p)
{
    if (p->count > 1)
        pthread_barrier_wait(&p->barrier);
}

int nl_cpu_count(void)
{
    /* The cores this process may run on: a launcher (mpirun, srun, taskset) that binds it to
     * some gets as many threads. */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
