/* The thread pool (core/engine/thread_pool.c): every run reaches every thread once, a barrier
 * separates what the threads wrote before it from what they read after it, and both hold when
 * the waits spin (back-to-back runs), when they sleep (a thread that lingers past the spin), and
 * with more threads than cores. A lost wake-up hangs: the alarm turns that into a failure. */
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "core/engine/thread_pool.h"
#include "tap.h"

#define MAX_THREADS 8
#define PHASES      4

struct probe {
    struct nl_pool *pool;
    int threads;
    atomic_int hits[MAX_THREADS]; /* runs that reached each index */
    atomic_int wrong_count;       /* calls that were told another thread count */
    atomic_int torn;              /* reads after a barrier that saw another phase's value */
    int slot[MAX_THREADS];        /* plain: the barrier must order them */
    long linger_ns;               /* thread 0 sleeps this long before each barrier */
};

static void linger(long ns)
{
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    if (ns > 0)
        nanosleep(&ts, NULL);
}

static void count_fn(void *arg, int t, int count)
{
    struct probe *p = arg;
    atomic_fetch_add(&p->hits[t], 1);
    if (count != p->threads)
        atomic_fetch_add(&p->wrong_count, 1);
}

/* Phase after phase: write this thread's slot, wait, check every slot, wait. */
static void phase_fn(void *arg, int t, int count)
{
    struct probe *p = arg;
    for (int k = 1; k <= PHASES; k++) {
        p->slot[t] = k;
        if (t == 0)
            linger(p->linger_ns);
        nl_pool_barrier(p->pool);
        for (int j = 0; j < count; j++)
            if (p->slot[j] != k)
                atomic_fetch_add(&p->torn, 1);
        nl_pool_barrier(p->pool);
    }
}

static void check_pool(int threads, int runs, long linger_ns, const char *what)
{
    struct probe p = {.threads = threads, .linger_ns = linger_ns};
    struct nl_error err = {0};

    if (nl_pool_new(&p.pool, threads, &err) < 0) {
        ok(0, "%d threads: %s", threads, err.msg);
        return;
    }
    is_int(nl_pool_size(p.pool), threads, "%d threads: the pool's size", threads);
    int missed = 0;
    for (int r = 0; r < runs; r++) {
        nl_pool_run(p.pool, count_fn, &p);
        /* The run has returned: every thread's call is over and seen. */
        for (int t = 0; t < threads; t++)
            missed += atomic_load(&p.hits[t]) != r + 1;
        if (linger_ns > 0)
            linger(linger_ns); /* the workers give up spinning and sleep */
    }
    is_int(missed, 0, "%d threads, %s: each of %d runs reached every thread once", threads, what,
           runs);
    is_int(atomic_load(&p.wrong_count), 0, "%d threads, %s: every call was told the count", threads,
           what);
    for (int r = 0; r < runs / 4; r++) {
        for (int t = 0; t < threads; t++)
            p.slot[t] = 0;
        nl_pool_run(p.pool, phase_fn, &p);
    }
    is_int(atomic_load(&p.torn), 0,
           "%d threads, %s: after each barrier every thread saw every write made before it",
           threads, what);
    nl_pool_free(p.pool);
}

int main(void)
{
    struct nl_pool *pool = (struct nl_pool *)&pool;
    struct nl_error err = {0};

    alarm(120); /* a thread that is never woken ends the test here */
    is_int(nl_pool_new(&pool, 0, &err), NL_EINVAL, "a pool of 0 threads is refused");
    ok(pool == NULL, "and nothing is returned");
    like(err.msg, "at least 1", "the error says why: %s", err.msg);
    nl_pool_free(NULL);

    check_pool(1, 1000, 0, "inline");
    check_pool(2, 20000, 0, "back to back");
    check_pool(2, 40, 2000000, "thread 0 lingering 2 ms");
    check_pool(3, 2000, 0, "back to back");
    check_pool(MAX_THREADS, 1000, 0, "more threads than cores");
    check_pool(MAX_THREADS, 20, 1000000, "more threads than cores, lingering 1 ms");
    return done_testing();
}
