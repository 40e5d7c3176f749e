/* One sample at a time on several threads (include/nnlab/model.h, nl_infer_new): a pool of the
 * threads and a forward-only executor split between them (nl_exec_split), run by
 * nl_exec_forward_split on every thread of the pool for each call. A model of fewer than
 * NL_SPLIT_FLOPS a sample keeps one thread and nl_exec_forward: its layers are over before a
 * barrier after each would have paid for itself. */
#include "nnlab/alloc.h"
#include "nnlab/bench.h"
#include "nnlab/model.h"
#include "thread_pool.h"

struct nl_infer {
    struct nl_exec *x;
    const struct nl_model *m;
    struct nl_pool *pool; /* NULL: one thread */
    int threads;
    /* the call's, for the pool's threads */
    const float *params, *in, *logits;
    int n;
};

int nl_infer_new(struct nl_infer **out, struct nl_exec *x, const struct nl_model *m, int threads,
                 struct nl_error *err)
{
    struct nl_infer *s = nl_calloc(1, sizeof *s);

    *out = NULL;
    if (!s)
        return nl_error_set(err, NL_ENOMEM, "out of memory for an inference runner");
    s->x = x;
    s->m = m;
    s->threads = threads > 0 ? threads : nl_cpu_count();
    if (s->threads > 1 && nl_model_infer_flops(m) < NL_SPLIT_FLOPS)
        s->threads = 1;
    int rc = 0;
    if (s->threads > 1 && ((rc = nl_exec_split(x, s->threads, err)) < 0 ||
                           (rc = nl_pool_new(&s->pool, s->threads, err)) < 0)) {
        nl_infer_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

static void split_thread(void *arg, int t, int count)
{
    struct nl_infer *s = arg;
    const float *logits = nl_exec_forward_split(s->x, s->params, s->in, s->n, s->pool, t, count);

    if (t == 0)
        s->logits = logits;
}

const float *nl_infer_forward(struct nl_infer *s, const float *params, const float *in, int n)
{
    if (!s->pool)
        return nl_exec_forward(s->x, params, in, n, 0, NULL);
    s->params = params;
    s->in = in;
    s->n = n;
    nl_pool_run(s->pool, split_thread, s);
    return s->logits;
}

int nl_infer_threads(const struct nl_infer *s)
{
    return s->threads;
}

void nl_infer_free(struct nl_infer *s)
{
    if (!s)
        return;
    nl_pool_free(s->pool);
    nl_free(s);
}
