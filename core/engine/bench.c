/* Speed measurements for `nnlab bench`: see include/nnlab/bench.h. Training is measured through
 * nl_train itself, with an event hook that times the steps, so the numbers are those of real
 * training runs. */
#include "nnlab/bench.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/clock.h"
#include "nnlab/kernels.h"
#include "nnlab/model.h"
#include "nnlab/rng.h"
#include "nnlab/trainer.h"
#include "thread_pool.h"

struct sgemm_run {
    struct nl_pool *pool;
    int size;
    double seconds;
    double *gflops; /* (threads) */
    int failed;
    double round_trip; /* seconds; 0 where not measured */
};

static void sgemm_thread(void *arg, int t, int count)
{
    struct sgemm_run *r = arg;
    const size_t n = (size_t)r->size;
    float *a = nl_alloc_floats(n * n), *b = nl_alloc_floats(n * n), *c = nl_alloc_floats(n * n);

    if (a && b && c) {
        for (size_t i = 0; i < n * n; i++) {
            a[i] = (float)(i % 13) / 13.0f - 0.5f;
            b[i] = (float)(i % 7) / 7.0f - 0.5f;
        }
        nl_sgemm(0, 0, r->size, r->size, r->size, 1.0f, a, r->size, b, r->size, 0.0f, c, r->size);
    } else {
        r->failed = 1;
    }
    /* Start together, so that with several threads every product runs beside the others. */
    nl_pool_barrier(r->pool);
    if (a && b && c) {
        long reps = 0;
        double t0 = nl_now(), elapsed;
        do {
            nl_sgemm(0, 0, r->size, r->size, r->size, 1.0f, a, r->size, b, r->size, 0.0f, c,
                     r->size);
            reps++;
            elapsed = nl_now() - t0;
        } while (elapsed < r->seconds);
        r->gflops[t] = 2.0 * (double)n * (double)n * (double)n * (double)reps / elapsed / 1e9;
    }
    (void)count;
    nl_free(a);
    nl_free(b);
    nl_free(c);
}

/* The round trip (round_trip_ns): thread 0 writes an odd number into one cache line and waits
 * for thread 1's even answer, ROUND_TRIPS times per block; the fastest of up to
 * ROUND_TRIP_BLOCKS whole blocks gives the figure, so that a block in which either thread lost
 * its core does not count. Short blocks, so that on a machine whose cores other processes keep
 * busy some block still falls within the time both threads hold a core. Both threads stop once
 * thread 0 has watched for ROUND_TRIP_SECONDS, however few blocks ran whole (none: 0). */
#define ROUND_TRIPS        20
#define ROUND_TRIP_BLOCKS  100
#define ROUND_TRIP_SECONDS 0.5

struct round_trip {
    _Alignas(64) atomic_long line; /* 2r + 1 from thread 0, 2r + 2 from thread 1; -1: stop */
    _Alignas(64) double best;      /* seconds per round trip, of the fastest block */
};

static void round_trip_thread(void *arg, int t, int count)
{
    struct round_trip *p = arg;

    (void)count;
    if (t == 1) {
        long seen = 0, v;
        while ((v = atomic_load_explicit(&p->line, memory_order_acquire)) != -1)
            if (v != seen && (v & 1)) {
                seen = v + 1;
                atomic_store_explicit(&p->line, seen, memory_order_release);
            }
        return;
    }
    if (t != 0)
        return;
    const double start = nl_now();
    long r = 0;
    int whole = 0, late = 0;
    p->best = 0.0;
    while (whole < ROUND_TRIP_BLOCKS && !late) {
        const double t0 = nl_now();
        int i;
        for (i = 0; i < ROUND_TRIPS && !late; i++, r++) {
            atomic_store_explicit(&p->line, 2 * r + 1, memory_order_release);
            unsigned spins = 0;
            while (atomic_load_explicit(&p->line, memory_order_acquire) != 2 * r + 2 && !late)
                late = ++spins % 4096 == 0 && nl_now() - start > ROUND_TRIP_SECONDS;
        }
        const double each = (nl_now() - t0) / ROUND_TRIPS;
        if (!late && (p->best == 0.0 || each < p->best))
            p->best = each;
        whole += !late;
        late |= nl_now() - start > ROUND_TRIP_SECONDS;
    }
    atomic_store_explicit(&p->line, -1, memory_order_release);
}

static int sgemm_on(struct sgemm_run *r, int threads, double *total, struct nl_error *err)
{
    int rc = nl_pool_new(&r->pool, threads, err);

    if (rc < 0)
        return rc;
    if (threads > 1) {
        struct round_trip p;
        atomic_init(&p.line, 0);
        nl_pool_run(r->pool, round_trip_thread, &p);
        r->round_trip = p.best;
    }
    r->gflops = nl_calloc((size_t)threads, sizeof *r->gflops);
    if (!r->gflops) {
        nl_pool_free(r->pool);
        return nl_error_set(err, NL_ENOMEM, "out of memory for the sgemm benchmark");
    }
    r->failed = 0;
    nl_pool_run(r->pool, sgemm_thread, r);
    *total = 0.0;
    for (int t = 0; t < threads; t++)
        *total += r->gflops[t];
    nl_free(r->gflops);
    nl_pool_free(r->pool);
    if (r->failed)
        return nl_error_set(err, NL_ENOMEM, "out of memory for %dx%d matrices", r->size, r->size);
    return 0;
}

int nl_bench_sgemm(struct nl_bench_sgemm *out, int size, int threads, double seconds,
                   struct nl_error *err)
{
    struct sgemm_run r = {.size = size, .seconds = seconds};
    int rc;

    memset(out, 0, sizeof *out);
    if (size < 1 || seconds <= 0)
        return nl_error_set(err, NL_EINVAL, "sgemm benchmark: size %d, %g s", size, seconds);
    out->size = size;
    out->cores = nl_cpu_count();
    out->threads = threads > 0 ? threads : nl_cpu_count();
    rc = sgemm_on(&r, 1, &out->one_gflops, err);
    if (rc == 0)
        rc = sgemm_on(&r, out->threads, &out->all_gflops, err);
    out->round_trip_ns = r.round_trip * 1e9;
    return rc;
}

int nl_bench_synthetic(struct nl_dataset **out, struct nl_shape shape, int nclasses, uint32_t n,
                       uint64_t seed, struct nl_error *err)
{
    struct nl_dataset *d = nl_calloc(1, sizeof *d);
    const size_t size = nl_shape_size(shape);
    struct nl_rng rng;

    *out = NULL;
    if (!d)
        return nl_error_set(err, NL_ENOMEM, "out of memory for a synthetic dataset");
    d->name = nl_strdup("synthetic");
    d->source = nl_strdup("uniform random pixels");
    d->kind = nl_strdup("synthetic");
    d->shape = shape;
    d->dtype = NL_U8;
    d->nclasses = nclasses;
    d->class_names = nl_calloc((size_t)nclasses, sizeof *d->class_names);
    d->nnorm = shape.c;
    d->mean = nl_calloc((size_t)shape.c, sizeof *d->mean);
    d->std = nl_calloc((size_t)shape.c, sizeof *d->std);
    d->split[NL_TRAIN].x = nl_malloc((size_t)n * size);
    d->split[NL_TRAIN].y = nl_calloc(n, sizeof *d->split[NL_TRAIN].y);
    int ok = d->name && d->source && d->kind && d->class_names && d->mean && d->std &&
             d->split[NL_TRAIN].x && d->split[NL_TRAIN].y;
    for (int k = 0; ok && k < nclasses; k++) {
        char label[16];
        snprintf(label, sizeof label, "%d", k);
        d->class_names[k] = nl_strdup(label);
        ok = d->class_names[k] != NULL;
    }
    if (!ok) {
        nl_dataset_free(d);
        return nl_error_set(err, NL_ENOMEM, "out of memory for %u synthetic samples of %dx%dx%d", n,
                            shape.c, shape.h, shape.w);
    }
    /* Uniform bytes: mean 127.5/255, standard deviation 73.9/255 per channel. */
    for (int c = 0; c < shape.c; c++) {
        d->mean[c] = 0.5f;
        d->std[c] = 0.2898f;
    }
    nl_rng_seed(&rng, seed);
    uint8_t *x = d->split[NL_TRAIN].x;
    for (size_t i = 0; i < (size_t)n * size; i++)
        x[i] = (uint8_t)(nl_rng_next(&rng) >> 56);
    for (uint32_t i = 0; i < n; i++)
        d->split[NL_TRAIN].y[i] = (int32_t)nl_rng_below(&rng, (uint32_t)nclasses);
    d->split[NL_TRAIN].n = n;
    *out = d;
    return 0;
}

int nl_bench_synthetic_text(struct nl_dataset **out, int len, int vocab, int nclasses, uint32_t n,
                            uint64_t seed, struct nl_error *err)
{
    struct nl_rng rng;
    int rc = nl_bench_synthetic(out, (struct nl_shape){1, 1, len}, nclasses, n, seed, err);

    if (rc)
        return rc;
    struct nl_dataset *d = *out;
    float *x = nl_malloc((size_t)n * (size_t)len * sizeof *x);
    if (!x) {
        nl_dataset_free(d);
        *out = NULL;
        return nl_error_set(err, NL_ENOMEM, "out of memory for %u synthetic documents", n);
    }
    nl_free(d->split[NL_TRAIN].x);
    d->split[NL_TRAIN].x = x;
    d->dtype = NL_F32;
    d->mean[0] = 0.0f;
    d->std[0] = 1.0f;
    d->nvocab = vocab;
    nl_free(d->kind);
    d->kind = nl_strdup("text");
    nl_rng_seed(&rng, seed ^ 0x7465787400ull);
    /* Words: ids of a rough Zipf law (the square of a uniform draw favours small ids), from 2. */
    for (uint32_t i = 0; i < n; i++) {
        int words = len / 4 + (int)nl_rng_below(&rng, (uint32_t)(len - len / 4 + 1));
        for (int t = 0; t < len; t++) {
            double u = (double)(nl_rng_next(&rng) >> 11) / 9007199254740992.0;
            x[(size_t)i * len + t] = t < words ? (float)(2 + (int)(u * u * (vocab - 2))) : 0.0f;
        }
    }
    return d->kind ? 0 : nl_error_set(err, NL_ENOMEM, "out of memory");
}

/* Multiply-adds of one sample's forward product through layer l, or 0 for layers without one. */
static double forward_madds(const struct nl_layer *l)
{
    if (strcmp(l->ops->kind, "conv") == 0 || strcmp(l->ops->kind, "conv1d") == 0)
        return (double)nl_shape_size(l->out) * l->in[0].c * l->kh * l->kw;
    if (strcmp(l->ops->kind, "gconv") == 0)
        return (double)nl_shape_size(l->out) * (l->in[0].c / (l->groups > 1 ? l->groups : 1)) *
               l->kh * l->kw;
    if (strcmp(l->ops->kind, "dense") == 0)
        return (double)l->units * (double)nl_shape_size(l->in[0]);
    return 0.0;
}

double nl_model_infer_flops(const struct nl_model *m)
{
    double flops = 0.0;

    for (int i = 0; i < m->nlayers; i++)
        flops += 2.0 * forward_madds(&m->layers[i]);
    return flops;
}

double nl_model_train_flops(const struct nl_model *m)
{
    double flops = 0.0;

    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        double madds = forward_madds(l);
        if (madds == 0.0)
            continue;
        int products = 1;              /* forward */
        products += !l->frozen;        /* weight gradient */
        products += l->inputs[0] >= 0; /* input gradient, unless the input is the model's */
        flops += 2.0 * madds * products;
    }
    return flops;
}

double nl_peak_rss_mb(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* Linux: writing 5 to clear_refs resets the peak resident size (VmHWM) to the current one. */
static int reset_peak_rss(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY);

    if (fd < 0)
        return -1;
    int ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok ? 0 : -1;
}

/* VmHWM from /proc/self/status in MiB, or -1. */
static double vm_hwm_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1.0;

    if (!f)
        return -1.0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lf kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1.0 : kb / 1024.0;
}

struct watch {
    int warmup, steps;
    long events; /* steps done */
    int counted; /* steps measured */
    double t_prev;
    int epoch_prev;
    long samples_prev;
    double seconds;
    long images;
    uint64_t allocs0, allocs1;
};

/* After every step: a step is measured as the time from the previous step's event to this one,
 * when both are in the same epoch (the gap between epochs holds the shuffle and evaluation). */
static int watch_event(void *ud, const struct nl_event *ev)
{
    struct watch *w = ud;

    if (ev->kind != NL_EVENT_ITER)
        return 0;
    double t = nl_now();
    w->events++;
    if (w->events > w->warmup && ev->epoch == w->epoch_prev) {
        w->seconds += t - w->t_prev;
        w->images += ev->samples - w->samples_prev;
        w->counted++;
    }
    if (w->events == (w->warmup > 0 ? w->warmup : 1))
        w->allocs0 = nl_alloc_count();
    w->t_prev = t;
    w->epoch_prev = ev->epoch;
    w->samples_prev = ev->samples;
    if (w->counted >= w->steps) {
        w->allocs1 = nl_alloc_count();
        return 1;
    }
    return 0;
}

static int bench_train(struct nl_bench_train *out, struct nl_model *m, const struct nl_dataset *d,
                       int batch, int threads, int warmup, int steps, double *seconds, long *timed,
                       int *team_from, struct nl_error *err)
{
    struct nl_train_opts o;
    struct nl_train_result res;
    struct watch w = {.warmup = warmup, .steps = steps};
    struct nl_train_hooks hooks = {watch_event, NULL, &w};

    memset(out, 0, sizeof *out);
    if (batch < 1 || steps < 1 || warmup < 0 || threads < 0)
        return nl_error_set(err, NL_EINVAL, "benchmark: batch %d, %d steps, %d warm-up steps",
                            batch, steps, warmup);
    if (d->split[NL_TRAIN].n == 0)
        return nl_error_set(err, NL_EINVAL, "dataset '%s' has no training samples", d->name);
    nl_train_defaults(&o);
    o.batch = batch;
    o.threads = threads;
    o.schedule.kind = NL_SCHEDULE_CONSTANT;
    long iters = ((long)d->split[NL_TRAIN].n + batch - 1) / batch;
    /* Enough epochs for the steps and one lost at each epoch boundary. */
    o.epochs = (int)((warmup + steps + 1) / iters + 2);
    o.layer_seconds = seconds;
    o.layer_from = warmup;
    nl_model_init_params(m, 1);

    int reset = reset_peak_rss() == 0;
    int rc = nl_train(m, d, &o, &hooks, &res, err);
    if (rc == NL_ECANCELED && w.counted >= steps)
        rc = 0;
    if (rc < 0)
        return rc;
    if (w.counted < steps || w.seconds <= 0)
        return nl_error_set(err, NL_EINVAL, "benchmark: only %d of %d steps could be timed",
                            w.counted, steps);
    double hwm = reset ? vm_hwm_mb() : -1.0;
    out->batch = batch;
    out->threads = threads > 0 ? threads : nl_cpu_count();
    if (out->threads > batch)
        out->threads = batch;
    out->steps = w.counted;
    out->seconds = w.seconds;
    out->images_per_second = (double)w.images / w.seconds;
    out->gflops = nl_model_train_flops(m) * out->images_per_second / 1e9;
    out->peak_rss_mb = hwm > 0 ? hwm : nl_peak_rss_mb();
    out->allocs_per_step = (double)(w.allocs1 - w.allocs0) / (double)w.counted;
    if (timed)
        *timed = res.layer_steps;
    if (team_from)
        *team_from = res.team_from;
    return 0;
}

struct infer_run {
    struct nl_pool *pool;
    struct nl_prep *prep; /* the model's prepared weights, shared by the threads' executors */
    const struct nl_model *m;
    const struct nl_dataset *d;
    int batch, warmup, steps;
    double seconds;        /* of the measured steps, from thread 0's clock */
    uint64_t allocs;       /* allocations during them */
    double *layer_seconds; /* nl_bench_layers's, or NULL */
    int failed;
    int split;             /* fewer samples than threads: thread 0's executor, split */
    struct nl_exec *whole; /* that executor */
};

/* One thread's part of every step: its contiguous shard of the batch, normalised from the
 * dataset and run forward (no dropout) by its own executor, as evaluation runs (eval_thread in
 * core/engine/trainer.c), then a barrier. Its executor and input buffer are allocated and first
 * touched here, on this thread.
 *
 * A model that a team could run (dense and element-wise layers: nl_exec_team) was measured here
 * as one team on the threads, each layer split by units with a barrier after it. On the AMD EPYC of
 * README's figures (2026-11-28, load average 0.3 to 1, images/s on two threads, alternating) mlp
 * ran so at 110 to 168 thousand images/s at batch 256 against 165 to 178 thousand with a shard
 * each (one thread: 91 thousand), at batch 128 109 to 161 against 165 to 170, at batch 64 155 to
 * 158 against 154 to 159, at batch 32 109 to 148 against 134 to 140: a team's four barriers a
 * step lose where one thread falls behind, more than packing each weight matrix for each shard
 * costs.
 *
 * A batch of fewer samples than threads, of a model of at least NL_SPLIT_FLOPS a sample, runs
 * on one executor split between the threads (nl_exec_forward_split: each convolution by its
 * filters), as `nnlab predict` runs one image (nl_infer_new); a smaller model runs on as many
 * threads as samples, where a barrier after each layer would cost more than the split saves. */
static void infer_thread(void *arg, int t, int count)
{
    struct infer_run *r = arg;
    const int split = r->split;
    const int lo = split ? 0 : (int)((long)r->batch * t / count),
              hi = split ? r->batch : (int)((long)r->batch * (t + 1) / count);
    const int n = hi - lo, mine = n > 0 && (!split || t == 0);
    const uint32_t total = r->d->split[NL_TRAIN].n;
    struct nl_exec *x = NULL;
    struct nl_error err = {0};
    float *in = nl_alloc_floats((size_t)(n > 0 ? n : 1) * nl_shape_size(r->d->shape));
    uint32_t *idx = nl_calloc((size_t)(n > 0 ? n : 1), sizeof *idx);

    if (!in || !idx || (mine && nl_exec_new_forward(&x, r->m, n, &err) < 0) ||
        (mine && split && nl_exec_split(x, count, &err) < 0))
        r->failed = 1;
    else if (x)
        nl_exec_use_prep(x, r->prep);
    if (split && t == 0)
        r->whole = x;
    nl_pool_barrier(r->pool);
    double t0 = 0.0;
    uint64_t allocs0 = 0;
    for (int step = 0; step < r->warmup + r->steps; step++) {
        if (t == 0 && step == r->warmup) {
            t0 = nl_now();
            allocs0 = nl_alloc_count();
            /* thread 0 alone writes them */
            if (r->layer_seconds)
                memset(r->layer_seconds, 0, 2 * (size_t)r->m->nlayers * sizeof(double));
            if (r->layer_seconds && x)
                nl_exec_time_layers(x, r->layer_seconds);
        }
        if (!r->failed && mine) {
            for (int i = 0; i < n; i++)
                idx[i] =
                    (uint32_t)(((uint64_t)step * (uint64_t)r->batch + (uint64_t)(lo + i)) % total);
            nl_dataset_batch(r->d, NL_TRAIN, idx, n, in, NULL);
        }
        if (!r->failed && split) /* its first barrier: thread 0's in is seen */
            nl_exec_forward_split(r->whole, r->m->params, in, n, r->pool, t, count);
        else if (!r->failed && mine)
            nl_exec_forward(x, r->m->params, in, n, 0, NULL);
        nl_pool_barrier(r->pool);
    }
    if (t == 0) {
        r->seconds = nl_now() - t0;
        r->allocs = nl_alloc_count() - allocs0;
    }
    nl_exec_free(x);
    nl_free(in);
    nl_free(idx);
}

static int bench_infer(struct nl_bench_train *out, const struct nl_model *m,
                       const struct nl_dataset *d, int batch, int threads, int warmup, int steps,
                       double *seconds, struct nl_error *err)
{
    struct infer_run r = {
        .m = m, .d = d, .batch = batch, .warmup = warmup, .steps = steps, .layer_seconds = seconds};

    memset(out, 0, sizeof *out);
    if (batch < 1 || steps < 1 || warmup < 0 || threads < 0)
        return nl_error_set(err, NL_EINVAL, "benchmark: batch %d, %d steps, %d warm-up steps",
                            batch, steps, warmup);
    if (d->split[NL_TRAIN].n == 0)
        return nl_error_set(err, NL_EINVAL, "dataset '%s' has no training samples", d->name);
    out->threads = threads > 0 ? threads : nl_cpu_count();
    r.split = batch < out->threads && nl_model_infer_flops(m) >= NL_SPLIT_FLOPS;
    if (out->threads > batch && !r.split)
        out->threads = batch;
    int rc = nl_pool_new(&r.pool, out->threads, err);
    if (rc < 0)
        return rc;
    int reset = reset_peak_rss() == 0;
    if (nl_prep_new(&r.prep, m, m->params, 0, err) < 0)
        r.failed = 1;
    else
        nl_pool_run(r.pool, infer_thread, &r);
    nl_pool_free(r.pool);
    nl_prep_free(r.prep);
    if (r.failed)
        return nl_error_set(err, NL_ENOMEM, "out of memory for inference on %d samples", batch);
    double hwm = reset ? vm_hwm_mb() : -1.0;
    out->batch = batch;
    out->steps = steps;
    out->seconds = r.seconds;
    out->images_per_second = (double)batch * steps / r.seconds;
    out->gflops = nl_model_infer_flops(m) * out->images_per_second / 1e9;
    out->peak_rss_mb = hwm > 0 ? hwm : nl_peak_rss_mb();
    out->allocs_per_step = (double)r.allocs / (double)steps;
    return 0;
}

int nl_bench_train(struct nl_bench_train *out, struct nl_model *m, const struct nl_dataset *d,
                   int batch, int threads, int warmup, int steps, struct nl_error *err)
{
    return bench_train(out, m, d, batch, threads, warmup, steps, NULL, NULL, NULL, err);
}

int nl_bench_infer(struct nl_bench_train *out, const struct nl_model *m, const struct nl_dataset *d,
                   int batch, int threads, int warmup, int steps, struct nl_error *err)
{
    return bench_infer(out, m, d, batch, threads, warmup, steps, NULL, err);
}

int nl_bench_layers(struct nl_bench_train *out, struct nl_bench_layer *layers, int infer,
                    struct nl_model *m, const struct nl_dataset *d, int batch, int threads,
                    int warmup, int steps, struct nl_error *err)
{
    const size_t nl = (size_t)m->nlayers;
    double *seconds = nl_calloc(2 * nl, sizeof *seconds);
    struct nl_exec *x = NULL;
    long timed = steps;
    int team_from = m->nlayers, rc;

    if (!seconds)
        return nl_error_set(err, NL_ENOMEM, "out of memory for %zu layers' times", nl);
    /* an executor of the run's kind, for which layer runs which (its fusion or folding) */
    rc = infer ? nl_exec_new_forward(&x, m, 1, err) : nl_exec_new(&x, m, 1, err);
    if (rc == 0)
        rc = infer ? bench_infer(out, m, d, batch, threads, warmup, steps, seconds, err)
                   : bench_train(out, m, d, batch, threads, warmup, steps, seconds, &timed,
                                 &team_from, err);
    const int shard = (batch + threads - 1) / threads; /* a split call: 1 */
    const int calls = infer && x ? nl_exec_forward_samples(x, shard) : shard;
    for (size_t i = 0; rc == 0 && i < nl; i++) {
        const struct nl_layer *l = &m->layers[i];
        layers[i].lower = strcmp(l->ops->kind, "conv") == 0
                              ? nl_conv_forward_lowering(l, calls, !infer)
                              : l->lower;
        int folded = 0; /* a batchnorm folded into it */
        for (size_t j = i + 1; infer && j < nl; j++)
            folded |= nl_exec_runs_in(x, (int)j, 0) == (int)i &&
                      strcmp(m->layers[j].ops->kind, "batchnorm") == 0;
        layers[i].turned = strcmp(l->ops->kind, "conv") == 0 &&
                           nl_conv_forward_turned(l, calls, !infer, infer || l->frozen, folded);
        layers[i].forward_ms = timed > 0 ? seconds[2 * i] * 1e3 / (double)timed : 0.0;
        layers[i].backward_ms = timed > 0 ? seconds[2 * i + 1] * 1e3 / (double)timed : 0.0;
        layers[i].runs_in = nl_exec_runs_in(x, (int)i, (int)i >= team_from);
    }
    nl_exec_free(x);
    nl_free(seconds);
    return rc;
}
