/* The thread pool: persistent threads that wait for a run by watching a generation counter.
 *
 * Waiting spins first, then sleeps. A training step of a small model lasts a millisecond or less
 * and holds three waits (the start, a barrier, the end); a thread that went to sleep on a
 * condition variable at each of them had to be woken through the kernel (and, in a virtual
 * machine, through the host's scheduler), which took longer than the work between them and made
 * two threads no faster than one. So every wait watches its counter, pausing between looks for
 * PAUSE_SECONDS, then yielding the core between looks up to SPIN_SECONDS (where other processes
 * take cores, the thread waited for may need this one to run: a pure spin of 200 us made two
 * threads slower than one there), and only then sleeps on the pool's condition variable; whoever
 * changes a counter wakes sleepers only when there are any (the count of sleepers and the counter
 * are both sequentially consistent atomics, so a waiter that is about to sleep either sees the new
 * value or is counted and woken). A spin costs at most SPIN_SECONDS of a core per wait.
 *
 * The barrier counts arrivals; the last to arrive resets the count and advances the barrier's
 * phase, which the others watch. The end of a run is the same with the pending workers: the last
 * one advances the done counter that the calling thread watches. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/clock.h"

#define PAUSE_SECONDS 20e-6  /* of watching a counter with a pause between looks, */
#define SPIN_SECONDS  200e-6 /* then yielding the core between looks, before sleeping */
#define SPIN_CHECK    64     /* looks between two readings of the clock while pausing */

struct worker {
    struct nl_pool *pool;
    int index;
};

struct nl_pool {
    int count;
    pthread_t *threads;
    struct worker *workers;
    pthread_mutex_t mu; /* only for sleeping and waking */
    pthread_cond_t wake;
    atomic_int sleepers;
    atomic_uint generation; /* advanced by each run (and by nl_pool_free) */
    atomic_uint done;       /* advanced when the last worker of a run returns */
    atomic_int pending;     /* workers still running the current run */
    atomic_int arrived;     /* threads at the barrier in its current phase */
    atomic_uint phase;      /* advanced when the last thread reaches the barrier */
    atomic_int quit;
    nl_pool_fn fn; /* the run's; written before generation advances */
    void *arg;
};

static void pause_once(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

int nl_pool_spin(atomic_uint *v, unsigned old)
{
    double start = 0.0;

    for (int i = 1;; i++) {
        if (atomic_load_explicit(v, memory_order_acquire) != old)
            return 1;
        pause_once();
        if (i % SPIN_CHECK == 0) {
            double now = nl_now();
            if (start == 0.0)
                start = now;
            else if (now - start > PAUSE_SECONDS)
                break;
        }
    }
    while (nl_now() - start < SPIN_SECONDS) {
        if (atomic_load_explicit(v, memory_order_acquire) != old)
            return 1;
        sched_yield();
    }
    return 0;
}

/* Returns once *v differs from old: spins, then sleeps. */
static void wait_change(struct nl_pool *p, atomic_uint *v, unsigned old)
{
    if (nl_pool_spin(v, old))
        return;
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (atomic_load(v) == old)
        pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
}

/* After a counter advanced: wakes the threads that went to sleep on one. */
static void notify(struct nl_pool *p)
{
    if (atomic_load(&p->sleepers) == 0)
        return;
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct nl_pool *p = w->pool;
    unsigned seen = 0;

    for (;;) {
        wait_change(p, &p->generation, seen);
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (atomic_load(&p->quit))
            return NULL;
        p->fn(p->arg, w->index, p->count);
        if (atomic_fetch_sub(&p->pending, 1) == 1) {
            atomic_fetch_add(&p->done, 1);
            notify(p);
        }
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
    pthread_cond_init(&p->wake, NULL);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->arrived, 0);
    atomic_init(&p->phase, 0);
    atomic_init(&p->quit, 0);
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
    atomic_store(&p->quit, 1);
    atomic_fetch_add(&p->generation, 1);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->count; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->wake);
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
    const unsigned done = atomic_load(&p->done);
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, p->count - 1);
    atomic_fetch_add(&p->generation, 1); /* publishes fn, arg and pending */
    notify(p);

    fn(arg, 0, p->count);

    wait_change(p, &p->done, done);
}

void nl_pool_barrier(struct nl_pool *p)
{
    if (p->count == 1)
        return;
    /* The phase cannot advance before this thread arrives, so this is the current one. */
    const unsigned phase = atomic_load(&p->phase);
    if (atomic_fetch_add(&p->arrived, 1) == p->count - 1) {
        atomic_store(&p->arrived, 0);
        atomic_fetch_add(&p->phase, 1);
        notify(p);
        return;
    }
    wait_change(p, &p->phase, phase);
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
