/* The model executor and the trainer: whole-model gradients against finite differences, batch
 * shares weighted by their sizes, training a synthetic problem to high accuracy, bit-identical
 * reruns, no allocation inside training steps, checkpoints, divergence and cancellation; a
 * training session's record, its owner, and a finish the store refuses reaching the result; the
 * reproducibility rules (the seeds a run derives, the block split of work) pinned to their values;
 * embedding tables updated row by row giving the weights of the dense update; a team of threads
 * (dense layers split by units) giving one thread's weights and logits bit for bit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/engine/thread_pool.h"
#include "core/store/store_internal.h"
#include "nnlab/alloc.h"
#include "nnlab/bench.h"
#include "nnlab/kernels.h"
#include "nnlab/model.h"
#include "nnlab/rng.h"
#include "nnlab/runs.h"
#include "nnlab/session.h"
#include "nnlab/trainer.h"
#include "tap.h"
#include "test_util.h"

enum { SIDE = 12, CLASSES = 4 };

/* Four classes of 12x12 gray images: a bright 4x4 square in one quadrant (the class), jittered
 * by a pixel, on a noisy background. */
/* The quadrants of test_util.h as uint8, without a validation split. */
static struct nl_dataset *synthetic(uint32_t ntrain, uint32_t ntest, uint64_t seed)
{
    const uint32_t n[NL_NSPLITS] = {ntrain, 0, ntest};
    return quadrants(n, seed, NL_U8, 3);
}

static const char conv_spec[] = "conv1: conv 4 3x3 pad=1\n"
                                "pool1: maxpool 2\n"
                                "relu\n"
                                "fc1: dense 16\n"
                                "tanh\n"
                                "fc2: dense N\n";
static const char mlp_spec[] = "fc1: dense 32\nrelu\nfc2: dense N\n";

static void test_model_gradient(void)
{
    const struct nl_shape in = {2, 6, 6};
    const int n = 3, k = 5;
    struct nl_model *m = build(conv_spec, in, k);
    struct nl_exec *x;
    struct nl_error err = {0};

    ok(m != NULL, "a conv model builds");
    if (!m)
        return;
    nl_model_init_params(m, 3);
    is_int(nl_exec_new(&x, m, n, &err), 0, "executor");
    nl_rng_seed(&rng, 5);
    float *input = nl_alloc_floats((size_t)n * nl_shape_size(in));
    float *r = nl_alloc_floats((size_t)n * k);
    float *grad = nl_alloc_floats(m->nparams);
    /* Distinct inputs so that no max-pooling window has a tie. */
    for (size_t i = 0; i < (size_t)n * nl_shape_size(in); i++)
        input[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (int i = 0; i < n * k; i++)
        r[i] = nl_rng_uniform(&rng) - 0.5f;
    nl_exec_forward(x, m->params, input, n, 0, &rng);
    nl_exec_backward(x, m->params, r, grad);

    /* Central differences in float on every 7th parameter; the bound is on the relative error
     * |a - n| / max(|a| + |n|, 1e-3). Parameters whose perturbation flips a relu or a max are
     * rare and counted separately. */
    const float h = 1e-3f;
    double worst = 0.0;
    int checked = 0, kinks = 0;
    float *p = m->params;
    for (size_t i = 0; i < m->nparams; i += 7) {
        float saved = p[i];
        p[i] = saved + h;
        double up = logits_dot(x, p, input, n, r, k, 0, &rng);
        p[i] = saved - h;
        double down = logits_dot(x, p, input, n, r, k, 0, &rng);
        p[i] = saved;
        double numeric = (up - down) / (2.0 * h);
        double rel = fabs(grad[i] - numeric) / fmax(fabs(grad[i]) + fabs(numeric), 1e-3);
        if (rel > 2e-2)
            diag("param %zu: analytic %.6g numeric %.6g", i, grad[i], numeric);
        if (rel > 5e-2)
            kinks++;
        else if (rel > worst)
            worst = rel;
        checked++;
    }
    ok(checked > 50, "checked %d parameters", checked);
    ok(kinks <= checked / 50, "at most 2%% of checks cross a kink (%d of %d)", kinks, checked);
    ok(worst < 2e-2, "whole-model gradient matches finite differences (worst relative %.2g)",
       worst);

    /* Shares are weighted: the gradient of a batch of n equals the sum over two shards, each
     * scaled by 1/n (the trainer's scheme). */
    {
        int32_t labels[3] = {0, 3, 1};
        float dl[3 * 5];
        float *g_all = nl_alloc_floats(m->nparams), *g_parts = nl_alloc_floats(m->nparams);
        const float *logits = nl_exec_forward(x, m->params, input, 3, 0, &rng);
        nl_softmax_xent(dl, logits, labels, 3, k, 1.0f / 3.0f, NULL);
        nl_exec_backward(x, m->params, dl, g_all);
        logits = nl_exec_forward(x, m->params, input, 1, 0, &rng);
        nl_softmax_xent(dl, logits, labels, 1, k, 1.0f / 3.0f, NULL);
        nl_exec_backward(x, m->params, dl, g_parts);
        logits = nl_exec_forward(x, m->params, input + nl_shape_size(in), 2, 0, &rng);
        nl_softmax_xent(dl, logits, labels + 1, 2, k, 1.0f / 3.0f, NULL);
        nl_exec_backward(x, m->params, dl, g_parts);
        double diff = 0.0;
        for (size_t i = 0; i < m->nparams; i++)
            diff = fmax(diff, fabs(g_all[i] - g_parts[i]));
        ok(diff < 1e-5, "sharded gradients sum to the batch gradient (max diff %.2g)", diff);
        nl_free(g_all);
        nl_free(g_parts);
    }
    nl_free(input);
    nl_free(r);
    nl_free(grad);
    nl_exec_free(x);
    nl_model_free(m);
}

struct watch {
    uint64_t allocs_at_step2;
    uint64_t allocs_at_end;
    int stop_at;
    long iters;
};

static int watch_event(void *ud, const struct nl_event *ev)
{
    struct watch *w = ud;
    if (ev->kind == NL_EVENT_ITER) {
        w->iters++;
        if (ev->epoch == 1 && ev->iter == 2)
            w->allocs_at_step2 = nl_alloc_count();
        if (ev->epoch == ev->epochs && ev->iter == ev->iters)
            w->allocs_at_end = nl_alloc_count();
        if (w->stop_at && w->iters == w->stop_at)
            return 1;
    }
    return 0;
}

/* m trained on d with o (not at all for 0 epochs), then freed: a copy of its parameters
 * (*nparams of them, nl_free it), or NULL with the error shown. */
static float *train_and_copy(struct nl_model *m, const struct nl_dataset *d,
                             const struct nl_train_opts *o, const struct nl_train_hooks *hooks,
                             struct nl_train_result *res, size_t *nparams)
{
    struct nl_error err = {0};

    if (o->epochs > 0 && nl_train(m, d, o, hooks, res, &err) < 0) {
        diag("train: %s", err.msg);
        nl_model_free(m);
        return NULL;
    }
    float *p = nl_malloc(m->nparams * sizeof(float));
    memcpy(p, m->params, m->nparams * sizeof(float));
    *nparams = m->nparams;
    nl_model_free(m);
    return p;
}

static float *train_once(const char *spec, const struct nl_dataset *d, int threads, uint64_t seed,
                         struct nl_train_result *res, struct watch *w, size_t *nparams)
{
    struct nl_model *m = build(spec, d->shape, d->nclasses);
    struct nl_train_opts o;
    struct watch local = {0};
    struct nl_train_hooks hooks = {watch_event, NULL, w ? w : &local};

    if (!m)
        return NULL;
    nl_train_defaults(&o);
    o.epochs = 3;
    o.batch = 32;
    o.threads = threads;
    o.seed = seed;
    nl_model_init_params(m, seed);
    return train_and_copy(m, d, &o, &hooks, res, nparams);
}

static void test_training(void)
{
    struct nl_dataset *d = synthetic(1200, 400, 11);
    struct nl_train_result res;
    struct watch w = {0};
    size_t n1, n2;

    float *a = train_once(mlp_spec, d, 2, 7, &res, &w, &n1);
    ok(a != NULL, "the mlp trains");
    ok(res.test_accuracy >= 0.95, "mlp test accuracy %.4f >= 0.95", res.test_accuracy);
    ok(res.train_loss < 0.3, "mlp final train loss %.4f < 0.3", res.train_loss);
    ok(isnan(res.val_accuracy), "no validation split, no validation accuracy");
    is_int(res.epochs, 3, "three epochs");
    is_int((long long)w.allocs_at_end, (long long)w.allocs_at_step2,
           "no allocation inside training steps after the first (%llu)",
           (unsigned long long)w.allocs_at_step2);

    float *b = train_once(mlp_spec, d, 2, 7, &res, NULL, &n2);
    ok(b && n1 == n2 && memcmp(a, b, n1 * sizeof(float)) == 0,
       "same seed and threads: bit-identical weights");
    nl_free(b);
    b = train_once(mlp_spec, d, 2, 8, &res, NULL, &n2);
    ok(b && memcmp(a, b, n1 * sizeof(float)) != 0, "another seed: other weights");
    nl_free(b);
    nl_free(a);

    a = train_once(conv_spec, d, 2, 3, &res, NULL, &n1);
    ok(a != NULL, "the conv model trains");
    ok(res.test_accuracy >= 0.95, "conv test accuracy %.4f >= 0.95", res.test_accuracy);
    nl_free(a);
    a = train_once(conv_spec, d, 1, 3, &res, NULL, &n1);
    ok(a && res.test_accuracy >= 0.95, "on one thread too: %.4f", res.test_accuracy);
    nl_free(a);
    nl_dataset_free(d);
}

/* A residual block with a projection shortcut: a batchnorm fuses the add and the ReLU after it
 * and runs at their place, after the shortcut's layers, whose gradients are summed first. */
static const char res_spec[] = "c1: conv 6 3x3 pad=1 bias=no\n"
                               "b1: batchnorm\n"
                               "r1: relu\n"
                               "c2: conv 8 3x3 stride=2 pad=1 bias=no\n"
                               "b2: batchnorm\n"
                               "sc: conv 8 1x1 stride=2 bias=no in=r1\n"
                               "sb: batchnorm\n"
                               "add: add in=b2,sb\n"
                               "r2: relu\n"
                               "pool: globalavgpool\n"
                               "fc: dense N\n";

/* A hybrid step (core/engine/trainer.c): a model whose dense tail holds most of its weights
 * trains its convolutions by samples and its tail as a team. */
static const char hybrid_spec[] = "conv1: conv 8 3x3 pad=1\n"
                                  "pool1: maxpool 2\n"
                                  "relu\n"
                                  "fc1: dense 256\n"
                                  "relu\n"
                                  "fc2: dense N\n";

/* The views of the head (layers 0 to 2) and the tail (3 to 5), run one after the other with
 * the tail's input gradient handed to the head, give the whole model's logits and gradient bit
 * for bit; a view whose layer reads a layer before it is refused, naming the layer. */
static void test_views(void)
{
    const struct nl_shape in = {1, 12, 12};
    const int n = 5, k = 4;
    struct nl_model *m = build(hybrid_spec, in, k), *head = NULL, *tail = NULL, *res;
    struct nl_exec *x = NULL, *hx = NULL, *tx = NULL;
    struct nl_error err = {0};
    struct nl_rng r;

    if (!m) {
        ok(0, "the hybrid model builds");
        return;
    }
    nl_model_init_params(m, 4);
    ok(nl_model_view(&head, m, 0, 3, &err) == 0 && nl_model_view(&tail, m, 3, 3, &err) == 0 &&
           nl_exec_new(&x, m, n, &err) == 0 && nl_exec_new(&hx, head, n, &err) == 0 &&
           nl_exec_new(&tx, tail, n, &err) == 0,
       "views of layers 0-2 and 3-5 and their executors");
    const size_t features = tail ? nl_shape_size(tail->input) : 0;
    float *input = nl_alloc_floats((size_t)n * nl_shape_size(in));
    float *dl = nl_alloc_floats((size_t)n * k), *logits = nl_alloc_floats((size_t)n * k);
    float *din = nl_alloc_floats((size_t)n * features + 1);
    float *g_full = nl_alloc_floats(m->nparams), *g_views = nl_alloc_floats(m->nparams);
    nl_rng_seed(&r, 8);
    for (size_t i = 0; i < (size_t)n * nl_shape_size(in); i++)
        input[i] = nl_rng_uniform(&r);
    for (int i = 0; i < n * k; i++)
        dl[i] = nl_rng_uniform(&r) - 0.5f;
    if (x && hx && tx) {
        memcpy(logits, nl_exec_forward(x, m->params, input, n, 1, &r), (size_t)n * k * 4);
        nl_exec_backward(x, m->params, dl, g_full);
        const float *out = nl_exec_forward(hx, m->params, input, n, 1, &r);
        ok(features == 8 * 6 * 6 && head->nclasses == (int)features && tail->nclasses == k,
           "the head's logits are its last layer's output (%zu floats), the tail's the model's",
           features);
        const float *tl = nl_exec_forward(tx, m->params, out, n, 1, &r);
        ok(memcmp(tl, logits, (size_t)n * k * sizeof(float)) == 0,
           "the tail's view on the head's output: the model's logits bit for bit");
        is_int(nl_exec_input_grad(tx, din), 0, "fc1 alone reads the tail's input: overwritten");
        nl_exec_backward(tx, m->params, dl, g_views);
        nl_exec_backward(hx, m->params, din, g_views);
        ok(memcmp(g_full, g_views, m->nparams * sizeof(float)) == 0,
           "the tail's backward, then the head's from its input gradient: the model's gradient "
           "bit for bit");
    }
    res = build(res_spec, in, k);
    struct nl_model *bad = NULL;
    ok(res && nl_model_view(&bad, res, 5, 4, &err) < 0 && bad == NULL &&
           strstr(err.msg, "'sc'") != NULL,
       "a view whose layer reads a layer before it is refused: %s", err.msg);
    nl_model_free(res);
    nl_free(input);
    nl_free(dl);
    nl_free(logits);
    nl_free(din);
    nl_free(g_full);
    nl_free(g_views);
    nl_exec_free(x);
    nl_exec_free(hx);
    nl_exec_free(tx);
    nl_model_view_free(head);
    nl_model_view_free(tail);
    nl_model_free(m);
}

/* The hybrid spec trained on d for epochs with momentum and weight decay: its weights. */
static float *train_hybrid(const struct nl_dataset *d, int batch, int threads,
                           enum nl_parallel parallel, int epochs, size_t *n)
{
    struct nl_model *m = build(hybrid_spec, d->shape, d->nclasses);
    struct nl_train_opts o;
    struct nl_train_result res;

    if (!m)
        return NULL;
    nl_train_defaults(&o);
    o.epochs = epochs;
    o.batch = batch;
    o.threads = threads;
    o.optim.momentum = 0.9f;
    o.optim.weight_decay = 1e-3f;
    o.parallel = parallel;
    nl_model_init_params(m, 6);
    return train_and_copy(m, d, &o, NULL, &res, n);
}

/* After one step of 2 or 3 threads the tail's weights (fc1 and fc2) are one thread's bit for bit
 * (a team's floats) where the sample-parallel step's are not (two shards' sums), and the head's
 * are within rounding of the sample-parallel step's (the same sums over the shards, from an input
 * gradient with the team's last bits). Over two epochs with a last batch of 1 sample (threads
 * without samples), the run is reproducible and within rounding of the sample-parallel one. */
static void test_hybrid(void)
{
    struct nl_dataset *d = synthetic(64, 8, 11), *big = synthetic(97, 8, 12);
    struct nl_model *m = build(hybrid_spec, d->shape, d->nclasses);
    const size_t lo = m ? m->layers[3].param_offset : 0, nt = m ? m->ntrainable : 0;
    size_t n1 = 0, n = 0, ns = 0;

    test_views();
    nl_model_free(m);
    float *one = train_hybrid(d, 64, 1, NL_PARALLEL_AUTO, 1, &n1);
    for (int threads = 2; threads <= 3 && one; threads++) {
        float *hyb = train_hybrid(d, 64, threads, NL_PARALLEL_AUTO, 1, &n);
        float *smp = train_hybrid(d, 64, threads, NL_PARALLEL_SAMPLES, 1, &ns);
        if (!hyb || !smp || n != n1 || ns != n1 || lo == 0) {
            ok(0, "%d threads: trains", threads);
        } else {
            double head = 0.0;
            for (size_t i = 0; i < lo; i++)
                head = fmax(head, fabs(hyb[i] - smp[i]));
            ok(memcmp(hyb + lo, one + lo, (nt - lo) * sizeof(float)) == 0 &&
                   memcmp(smp + lo, one + lo, (nt - lo) * sizeof(float)) != 0,
               "one step, %d threads: the tail's weights are one thread's (by samples: other "
               "sums)",
               threads);
            ok(head < 1e-6, "one step, %d threads: the head's weights within %.2g of by samples",
               threads, head);
        }
        nl_free(hyb);
        nl_free(smp);
    }
    nl_free(one);

    for (int threads = 2; threads <= 3; threads++) {
        float *a = train_hybrid(big, 32, threads, NL_PARALLEL_AUTO, 2, &n);
        float *b = train_hybrid(big, 32, threads, NL_PARALLEL_AUTO, 2, &n1);
        float *s = train_hybrid(big, 32, threads, NL_PARALLEL_SAMPLES, 2, &ns);
        double diff = 0.0;
        for (size_t i = 0; a && s && i < n; i++)
            diff = fmax(diff, fabs(a[i] - s[i]));
        ok(a && b && s && n == n1 && memcmp(a, b, n * sizeof(float)) == 0 && diff < 1e-4,
           "two epochs, batch 32 with a last of 1, %d threads: reproducible, within %.2g of by "
           "samples",
           threads, diff);
        nl_free(a);
        nl_free(b);
        nl_free(s);
    }
    nl_dataset_free(d);
    nl_dataset_free(big);
}
/* Winograd's lowerings, F(4x4, 3x3) on 12x12 (c1) and F(2x2, 3x3) on 4x4 (c2): ResNet-18's
 * layer1 to layer3 at 3x64x64, which train with streamed gradients. */
static const char wino_spec[] = "c0: conv 16 3x3 pad=1\n"
                                "relu\n"
                                "c1: conv 16 3x3 pad=1 bias=no\n"
                                "b1: batchnorm\n"
                                "relu\n"
                                "pool1: maxpool 3\n"
                                "c2: conv 16 3x3 pad=1\n"
                                "relu\n"
                                "pool: globalavgpool\n"
                                "fc: dense N\n";

/* ResNet-18's layer4 at 3x64x64 in small: a stride-2 conv (S2LANES, 1.18M weights) and a
 * stride-1 one (PLANE2, 2.36M) on 2x2 planes, whose weight gradients streamed runs split by
 * output channels between the threads. */
static const char split_spec[] = "c0: conv 256 3x3 pad=1\n"
                                 "relu\n"
                                 "pool0: maxpool 3\n"
                                 "c1: conv 512 3x3 stride=2 pad=1\n"
                                 "b1: batchnorm\n"
                                 "relu\n"
                                 "c2: conv 512 3x3 pad=1\n"
                                 "relu\n"
                                 "pool: globalavgpool\n"
                                 "fc: dense N\n";

/* Streamed gradients against every thread's full-size buffer (opts.gradients):
 * the same weights and statistics bit for bit, on 1 to 3 threads, with a last batch of one
 * sample (threads without samples) and with momentum and weight decay. The split model's steps
 * of 32 samples split its two large weight gradients between the threads (16 samples of 4
 * columns each on two threads: ResNet-18's depth), its last of one does not. */
static void test_streamed(void)
{
    struct nl_dataset *d = synthetic(161, 40, 4);
    /* The wide one's blocks take many chunks, which threads take in turn. The large one's fc3
     * and fc2 (1024 * 1025 floats each) are past the size from which each thread's ring holds its
     * largest block once (and a little more, which fc4's small block fits in), so that
     * fc2's block waits for fc3's to be summed. */
    const char *specs[] = {
        res_spec,
        conv_spec,
        "fc1: dense 512\nrelu\nfc2: dense 64\nrelu\nfc3: dense N\n",
        "fc1: dense 1024\nrelu\nfc2: dense 1024\nrelu\nfc3: dense 1024\nrelu\nfc4: dense N\n",
        wino_spec,
        split_spec};
    const char *names[] = {"residual", "conv", "wide", "large", "winograd", "split"};

    if (nl_kernels_vector_on()) {
        struct nl_model *m = build(wino_spec, d->shape, d->nclasses);
        ok(m && m->layers[2].lower == NL_LOWER_WINOGRAD && m->layers[6].lower == NL_LOWER_WINOGRAD2,
           "the winograd model's c1 and c2 run Winograd's lowerings");
        nl_model_free(m);
    }
    if (nl_kernels_vector_on()) {
        struct nl_model *m = build(split_spec, d->shape, d->nclasses);
        ok(m && m->layers[3].lower == NL_LOWER_S2LANES && m->layers[6].lower == NL_LOWER_PLANE2,
           "the split model's c1 and c2 run the 2x2 lowerings");
        nl_model_free(m);
    }
    for (int s = 0; s < 6; s++)
        for (int threads = 1; threads <= 3; threads++) {
            float *p[2] = {NULL, NULL};
            size_t n[2] = {0, 0};
            long split_steps = 0, split_fused = 0;
            for (int full = 0; full < 2; full++) {
                struct nl_model *m = build(specs[s], d->shape, d->nclasses);
                struct nl_train_opts o;
                struct nl_train_result res;
                if (!m)
                    break;
                nl_train_defaults(&o);
                o.epochs = 2;
                o.batch = specs[s] == split_spec ? 32 : 16;
                o.threads = threads;
                o.optim.momentum = 0.9f;
                o.optim.weight_decay = 1e-3f;
                o.gradients = full ? NL_GRADIENTS_FULL : NL_GRADIENTS_STREAMED;
                o.parallel = NL_PARALLEL_SAMPLES; /* the dense models would train as a team */
                nl_model_init_params(m, 5);
                p[full] = train_and_copy(m, d, &o, NULL, &res, &n[full]);
                if (!full) {
                    split_steps = res.split_steps;
                    split_fused = res.split_fused;
                }
            }
            ok(p[0] && p[1] && n[0] == n[1] && memcmp(p[0], p[1], n[0] * sizeof(float)) == 0,
               "%s, %d thread(s): streamed gradients give the weights of full-size ones", names[s],
               threads);
            /* 161 samples: five steps of 32 and one of 1, in each of two epochs */
            if (specs[s] == split_spec && nl_kernels_vector_on()) {
                is_int(split_steps, threads > 1 ? 10 : 0,
                       "split, %d thread(s): the steps that split weight gradients", threads);
                /* both layers' lanes kernels hand their rows to the optimizer in every one */
                is_int(split_fused, threads > 1 ? 20 : 0,
                       "split, %d thread(s): the layers' updates fused into their kernels",
                       threads);
            }
            nl_free(p[0]);
            nl_free(p[1]);
        }
    /* The split layers' updates fused into their kernels step the weights with the optimizer's
     * own code: Adam's two moments as well, against full-size gradients on two threads. */
    float *q[2] = {NULL, NULL};
    size_t nq[2] = {0, 0};
    long fused = 0;
    for (int full = 0; full < 2; full++) {
        struct nl_model *m = build(split_spec, d->shape, d->nclasses);
        struct nl_train_opts o;
        struct nl_train_result res;
        if (!m)
            break;
        nl_train_defaults(&o);
        nl_optim_defaults(&o.optim, NL_OPTIM_ADAM);
        o.optim.weight_decay = 1e-3f;
        o.epochs = 1;
        o.batch = 32;
        o.threads = 2;
        o.gradients = full ? NL_GRADIENTS_FULL : NL_GRADIENTS_STREAMED;
        nl_model_init_params(m, 6);
        q[full] = train_and_copy(m, d, &o, NULL, &res, &nq[full]);
        if (!full)
            fused = res.split_fused;
    }
    ok(q[0] && q[1] && nq[0] == nq[1] && memcmp(q[0], q[1], nq[0] * sizeof(float)) == 0,
       "split, Adam, 2 threads: streamed gradients give the weights of full-size ones");
    if (nl_kernels_vector_on())
        is_int(fused, 10, "split, Adam, 2 threads: the layers' updates fused into their kernels");
    nl_free(q[0]);
    nl_free(q[1]);
    nl_dataset_free(d);
}

/* spec trained on d for two epochs with momentum and weight decay, batch and threads as given,
 * split as parallel says: its weights (n of them). */
static float *train_split(const char *spec, const struct nl_dataset *d, int batch, int threads,
                          enum nl_parallel parallel, size_t *n, int augment)
{
    struct nl_model *m = build(spec, d->shape, d->nclasses);
    struct nl_train_opts o;
    struct nl_train_result res;

    if (!m)
        return NULL;
    nl_train_defaults(&o);
    o.epochs = 2;
    o.batch = batch;
    o.threads = threads;
    o.optim.momentum = 0.9f;
    o.optim.weight_decay = 1e-3f;
    o.parallel = parallel;
    o.augment.flip = augment;
    o.augment.crop = augment ? 2 : 0;
    nl_model_init_params(m, 9);
    return train_and_copy(m, d, &o, NULL, &res, n);
}

/* A team (opts.parallel, core/engine/trainer.c): dense layers split by units, the element-wise
 * ones by samples, give one thread's weights bit for bit on 2 and 3 threads, at the default
 * (batches up to 256) and on request; layers that do not split evenly into dense's blocks, a
 * last batch of a few samples, both of dense's forward products (batch 32 and 100), a model
 * as wide as mlp's hidden layers (K of 800 and 512), and mlp's own (a weight gradient split by
 * input features, 256 units on 512 inputs), with the ReLU between the first two dense layers
 * run inside the second one's backward share (no barrier) in wide's at both batches and mlp's at
 * 100. The sample-parallel path, where it is chosen, keeps its own results (its sums are taken
 * in another order). */
static void test_team(void)
{
    struct nl_dataset *d = synthetic(203, 40, 6);
    const char *specs[] = {"fc1: dense 300\nrelu\nfc2: dense 24\ntanh\nf: flatten\n"
                           "fc3: dense N\nsigmoid\n",
                           "fc0: dense 800\nrelu\nfc1: dense 512\nrelu\nfc2: dense N\n",
                           "fc0: dense 512\nrelu\nfc1: dense 256\nrelu\nfc2: dense N\n"};
    const char *names[] = {"small", "wide", "mlp"};
    const int batches[] = {32, 100};

    for (int s = 0; s < 3; s++)
        for (int b = 0; b < 2; b++) {
            size_t n1 = 0, n = 0;
            float *one = train_split(specs[s], d, batches[b], 1, NL_PARALLEL_AUTO, &n1, 0);
            ok(one != NULL, "%s, batch %d: trains on one thread", names[s], batches[b]);
            for (int threads = 2; threads <= 3 && one; threads++) {
                const enum nl_parallel how =
                    batches[b] == 32 ? NL_PARALLEL_AUTO : NL_PARALLEL_UNITS;
                float *p = train_split(specs[s], d, batches[b], threads, how, &n, 0);
                ok(p && n == n1 && memcmp(p, one, n * sizeof(float)) == 0,
                   "%s, batch %d, %d threads as a team (%s): the weights of one thread", names[s],
                   batches[b], threads, how == NL_PARALLEL_AUTO ? "by default" : "on request");
                nl_free(p);
            }
            nl_free(one);
        }

    /* Augmented batches: drawn in sample order by one thread of the team. */
    size_t na = 0, nb = 0;
    float *pa = train_split(specs[0], d, 32, 1, NL_PARALLEL_AUTO, &na, 1);
    float *pb = train_split(specs[0], d, 32, 2, NL_PARALLEL_AUTO, &nb, 1);
    float *pc = train_split(specs[0], d, 32, 1, NL_PARALLEL_AUTO, &nb, 0);
    ok(pa && pb && pc && memcmp(pa, pb, na * sizeof(float)) == 0 &&
           memcmp(pa, pc, na * sizeof(float)) != 0,
       "augmented batches (flip, crop): 2 threads as a team give the weights of one thread");
    nl_free(pa);
    nl_free(pb);
    nl_free(pc);

    /* Sample-parallel: by request, and by default where the shards are large. */
    size_t n1 = 0, n2 = 0, n3 = 0;
    float *one = train_split(specs[0], d, 32, 1, NL_PARALLEL_AUTO, &n1, 0);
    float *two = train_split(specs[0], d, 32, 2, NL_PARALLEL_SAMPLES, &n2, 0);
    float *again = train_split(specs[0], d, 32, 2, NL_PARALLEL_SAMPLES, &n3, 0);
    ok(one && two && again && memcmp(two, again, n2 * sizeof(float)) == 0 &&
           memcmp(one, two, n1 * sizeof(float)) != 0,
       "by samples on request: reproducible, and other sums than one thread's");
    nl_free(one);
    nl_free(two);
    nl_free(again);
    struct nl_dataset *big = synthetic(600, 40, 6);
    two = train_split(specs[0], big, 300, 2, NL_PARALLEL_SAMPLES, &n2, 0);
    again = train_split(specs[0], big, 300, 2, NL_PARALLEL_AUTO, &n3, 0);
    one = train_split(specs[0], big, 300, 2, NL_PARALLEL_UNITS, &n1, 0);
    ok(two && again && one && memcmp(two, again, n2 * sizeof(float)) == 0 &&
           memcmp(one, two, n1 * sizeof(float)) != 0,
       "shards of 150 samples: by samples by default");
    nl_free(one);
    nl_free(two);
    nl_free(again);
    nl_dataset_free(big);
    nl_dataset_free(d);
}

struct team_fwd {
    struct nl_pool *pool;
    struct nl_exec *x;
    const float *params, *in;
    int n;
    const float *out;
};

static void team_fwd_thread(void *arg, int t, int count)
{
    struct team_fwd *r = arg;
    const float *out =
        nl_exec_forward_team(r->x, r->params, r->in, r->n, 0, NULL, r->pool, t, count);
    if (t == 0)
        r->out = out;
}

/* Inference as a team (`nnlab bench --mode infer`): a forward-only executor, with the ReLUs
 * folded into the dense layers, gives the outputs of one thread's forward bit for bit. */
static void test_team_forward(void)
{
    const char *spec = "fc0: dense 800\nrelu\nfc1: dense 300\nrelu\nfc2: dense 40\ntanh\n"
                       "fc3: dense 7\n";
    struct nl_model *m = build(spec, (struct nl_shape){1, 12, 12}, 7);
    const int n = 64;
    float *in = nl_alloc_floats((size_t)n * 144), *one = nl_alloc_floats((size_t)n * 7);
    struct nl_exec *x = NULL;
    struct nl_error err = {0};
    struct nl_rng r0;

    if (!m || !in || !one || nl_exec_new_forward(&x, m, n, &err) < 0) {
        ok(0, "a forward-only executor: %s", err.msg);
        return;
    }
    nl_model_init_params(m, 4);
    nl_rng_seed(&r0, 5);
    for (int i = 0; i < n * 144; i++)
        in[i] = (float)nl_rng_uniform(&r0) - 0.5f;
    ok(nl_exec_team(x) && nl_exec_folded(x) > 0, "the executor folds and suits a team");
    memcpy(one, nl_exec_forward(x, m->params, in, n, 0, NULL), (size_t)n * 7 * sizeof(float));
    for (int threads = 2; threads <= 3; threads++) {
        struct team_fwd r = {.x = x, .params = m->params, .in = in, .n = n};
        if (nl_pool_new(&r.pool, threads, &err) < 0) {
            ok(0, "a pool: %s", err.msg);
            continue;
        }
        nl_pool_run(r.pool, team_fwd_thread, &r);
        ok(memcmp(r.out, one, (size_t)n * 7 * sizeof(float)) == 0,
           "inference as a team of %d threads: one thread's logits", threads);
        nl_pool_free(r.pool);
    }
    nl_exec_free(x);
    nl_free(in);
    nl_free(one);
    nl_model_free(m);
}

/* Token documents for the embedding tables: TOK_LEN ids of a TOK_VOCAB vocabulary, padding at
 * the end, one in three a word of the class; most rows of the table untouched by a batch. */
enum { TOK_LEN = 12, TOK_VOCAB = 300 };

static struct nl_dataset *tokens(int ntrain)
{
    struct nl_dataset *d = dataset_new("tokens", "text", (struct nl_shape){1, 1, TOK_LEN}, NL_F32,
                                       CLASSES, "c", 0.0f, 1.0f);
    struct nl_rng r;

    nl_rng_seed(&r, 5);
    d->nvocab = TOK_VOCAB;
    float *x = nl_calloc((size_t)ntrain * TOK_LEN, sizeof *x);
    int32_t *y = nl_calloc((size_t)ntrain, sizeof *y);
    for (int i = 0; i < ntrain; i++) {
        int k = (int)nl_rng_below(&r, CLASSES), n = 2 + (int)nl_rng_below(&r, TOK_LEN - 1);
        for (int t = 0; t < n; t++)
            x[(size_t)i * TOK_LEN + t] =
                (float)(nl_rng_below(&r, 3) == 0 ? 2 + 5 * k + (int)nl_rng_below(&r, 5)
                                                 : 22 + (int)nl_rng_below(&r, TOK_VOCAB - 22));
        y[i] = k;
    }
    d->split[NL_TRAIN].n = (size_t)ntrain;
    d->split[NL_TRAIN].x = x;
    d->split[NL_TRAIN].y = y;
    return d;
}

/* The weights after training the token model for epochs (0: its initial weights) with the
 * embedding tables' rows tracked, or with the tables reduced and updated whole (dense). */
static float *train_tokens(const struct nl_dataset *d, const struct nl_optim *optim, int threads,
                           int dense, float clip, int epochs, size_t *nparams)
{
    /* Rows of 5 floats: the threads' 16-float slices end inside rows. */
    static const char spec[] = "embed: embedding 5\npool: globalavgpool1d in=embed,input\n"
                               "fc1: dense 8\nrelu\nfc2: dense N\n";
    struct nl_spec *sp;
    struct nl_model *m = NULL;
    struct nl_train_opts o;
    struct nl_train_result res;
    struct nl_error err = {0};

    if (nl_spec_parse(&sp, spec, "test-spec", NULL, NULL, &err) < 0)
        return NULL;
    sp->vocab = TOK_VOCAB;
    int rc = nl_model_build(&m, sp, d->shape, d->nclasses, &err);
    nl_spec_free(sp);
    if (rc < 0) {
        diag("build: %s", err.msg);
        return NULL;
    }
    nl_model_init_params(m, 3);
    nl_train_defaults(&o);
    o.epochs = epochs;
    o.batch = 24;
    o.threads = threads;
    o.seed = 9;
    o.optim = *optim;
    o.dense_tables = dense;
    o.clip_norm = clip;
    return train_and_copy(m, d, &o, NULL, &res, nparams);
}

/* Tracking the rows a step touched gives the weights of the dense reduction and update, bit for
 * bit, for every optimizer kind (plain SGD skips untouched rows, the others step over them) and
 * thread count; and training changes the table, so that the comparison compares something. */
static void test_tables(void)
{
    struct nl_dataset *d = tokens(300);
    struct {
        const char *name;
        enum nl_optim_kind kind;
        float momentum, weight_decay;
        int nesterov;
    } optims[] = {
        {"plain SGD", NL_OPTIM_SGD, 0.0f, 0.0f, 0},
        {"SGD with momentum", NL_OPTIM_SGD, 0.9f, 0.0f, 0},
        {"SGD with Nesterov momentum", NL_OPTIM_SGD, 0.9f, 0.0f, 1},
        {"SGD with weight decay", NL_OPTIM_SGD, 0.0f, 1e-3f, 0},
        {"SGD with momentum and weight decay", NL_OPTIM_SGD, 0.9f, 1e-3f, 0},
        {"Adam", NL_OPTIM_ADAM, 0.0f, 0.0f, 0},
        {"Adagrad", NL_OPTIM_ADAGRAD, 0.0f, 0.0f, 0},
    };
    const int threads[] = {1, 3};

    for (size_t i = 0; i < sizeof optims / sizeof optims[0]; i++)
        for (int j = 0; j < 2; j++) {
            struct nl_optim op;
            size_t n1 = 0, n2 = 0;
            nl_optim_defaults(&op, optims[i].kind);
            op.momentum = optims[i].momentum;
            op.weight_decay = optims[i].weight_decay;
            op.nesterov = optims[i].nesterov;
            float *sparse = train_tokens(d, &op, threads[j], 0, 0.0f, 2, &n1);
            float *dense = train_tokens(d, &op, threads[j], 1, 0.0f, 2, &n2);
            ok(sparse && dense && n1 == n2 && memcmp(sparse, dense, n1 * sizeof(float)) == 0,
               "%s, %d thread(s): the tracked rows give the dense path's weights", optims[i].name,
               threads[j]);
            if (i == 0 && j == 1 && sparse) {
                float *still = train_tokens(d, &op, 3, 0, 0.0f, 0, &n2);
                /* Row 0 (padding) is never trained; the class words' rows are. */
                ok(still && memcmp(still, sparse, 5 * sizeof(float)) == 0 &&
                       memcmp(still + 5 * 2, sparse + 5 * 2, 5 * 25 * sizeof(float)) != 0,
                   "the table's rows of the class words moved, its padding row did not");
                nl_free(still);
            }
            nl_free(sparse);
            nl_free(dense);
        }
    struct nl_optim op;
    size_t n1 = 0, n2 = 0;
    nl_optim_defaults(&op, NL_OPTIM_SGD);
    float *a = train_tokens(d, &op, 2, 0, 0.5f, 2, &n1);
    float *b = train_tokens(d, &op, 2, 1, 0.5f, 2, &n2);
    ok(a && b && n1 == n2 && memcmp(a, b, n1 * sizeof(float)) == 0,
       "with clipping (dense for both) the weights agree too");
    nl_free(a);
    nl_free(b);
    nl_dataset_free(d);
}

static void test_failures(void)
{
    struct nl_dataset *d = synthetic(256, 64, 4);
    struct nl_model *m = build(mlp_spec, d->shape, d->nclasses);
    struct nl_train_opts o;
    struct nl_train_result res;
    struct nl_error err = {0};
    struct watch w = {.stop_at = 3};
    struct nl_train_hooks hooks = {watch_event, NULL, &w};

    nl_train_defaults(&o);
    o.epochs = 2;
    nl_model_init_params(m, 1);
    is_int(nl_train(m, d, &o, &hooks, &res, &err), NL_ECANCELED, "a hook can stop training");
    is_int(w.iters, 3, "it stopped at the third step");

    o.optim.lr = 1e7f;
    nl_model_init_params(m, 1);
    is_int(nl_train(m, d, &o, NULL, &res, &err), NL_ENAN, "a diverging run stops");
    like(err.msg, "learning rate", "and says to lower the learning rate");

    o.optim.lr = 0.05f;
    o.batch = 0;
    is_int(nl_train(m, d, &o, NULL, &res, &err), NL_EINVAL, "batch 0 refused");
    like(err.msg, "batch", "message names the batch");
    nl_model_free(m);

    /* A model for another class count does not train on this data. */
    m = build(mlp_spec, d->shape, 7);
    o.batch = 32;
    is_int(nl_train(m, d, &o, NULL, &res, &err), NL_EINVAL, "mismatched model refused");
    like(err.msg, "synthetic", "message names the dataset");
    nl_model_free(m);

    /* A last layer that does not give one output per class is refused at build time. */
    struct nl_spec *spec;
    nl_spec_parse(&spec, "fc1: dense 16\nfc2: dense 3\n", "short.spec", NULL, NULL, &err);
    is_int(nl_model_build(&m, spec, d->shape, 4, &err), NL_EINVAL, "wrong head refused");
    like(err.msg, "fc2", "message names the layer");
    like(err.msg, "line 2", "and its line");
    nl_spec_free(spec);
    nl_dataset_free(d);
}

static void test_early_stop(void)
{
    struct nl_dataset *d = synthetic(600, 100, 12);
    struct nl_model *m = build(mlp_spec, d->shape, d->nclasses);
    struct nl_train_opts o;
    struct nl_train_result res;
    struct nl_error err = {0};

    nl_train_defaults(&o);
    o.epochs = 20;
    o.batch = 32;
    o.target_accuracy = 0.5;
    nl_model_init_params(m, 1);
    is_int(nl_train(m, d, &o, NULL, &res, &err), 0, "training with a target accuracy");
    ok(res.stopped_early && res.epochs < 20, "stops early once reached (after %d epochs)",
       res.epochs);
    ok(isfinite(res.test_accuracy), "and still evaluates the test split");

    o.target_accuracy = 0.0;
    o.patience = 2;
    o.schedule.kind = NL_SCHEDULE_CONSTANT;
    nl_model_init_params(m, 1);
    is_int(nl_train(m, d, &o, NULL, &res, &err), 0, "training with patience");
    ok(res.stopped_early && res.epochs < 20,
       "stops after 2 epochs without improvement (ran %d of 20)", res.epochs);

    o.patience = -1;
    is_int(nl_train(m, d, &o, NULL, &res, &err), NL_EINVAL, "negative patience refused");
    nl_model_free(m);
    nl_dataset_free(d);
}

struct store_hook {
    struct nl_store *store;
    int64_t run;
};

static int save_cp(void *ud, const struct nl_checkpoint *cp, struct nl_error *err)
{
    struct store_hook *h = ud;
    return nl_run_save_checkpoint(h->store, h->run, cp, err);
}

static void test_checkpoints(void)
{
    char dir[] = "/tmp/nnlab-train-XXXXXX", path[256];
    struct nl_store *store;
    struct nl_error err = {0};
    struct nl_run_info run, got;
    struct nl_dataset *d = synthetic(300, 50, 9);
    struct nl_model *m = build(mlp_spec, d->shape, d->nclasses);
    struct nl_train_opts o;
    struct nl_train_result res;

    ok(mkdtemp(dir) != NULL, "temporary directory");
    snprintf(path, sizeof path, "%s/sub/dir/t.db", dir);
    is_int(nl_store_open(&store, path, &err), 0, "store opens, directories created");
    is_int(nl_run_create(store, NULL, "synthetic", "mlp", m->spec_text, "{}", &run, &err), 0,
           "run recorded");
    is_str(run.name, "mlp-synthetic-1", "generated run name");
    struct nl_run_info second;
    is_int(nl_run_create(store, "mlp-synthetic-1", "synthetic", "mlp", "", "{}", &second, &err),
           NL_EEXIST, "a taken run name is refused");

    struct store_hook h = {store, run.id};
    struct nl_train_hooks hooks = {NULL, save_cp, &h};
    nl_train_defaults(&o);
    o.epochs = 3;
    nl_model_init_params(m, 2);
    is_int(nl_train(m, d, &o, &hooks, &res, &err), 0, "training with checkpoints");
    is_int(nl_run_finish(store, run.id, "done", &res, &err), 0, "run finished");

    float *p = nl_alloc_floats(m->nparams);
    is_int(nl_run_get(store, run.name, &got, NULL, NULL, &err), 0, "run found by name");
    is_int(got.epochs_done, 3, "three epochs recorded");
    is_str(got.status, "done", "status done");
    is_float(got.test_accuracy, res.test_accuracy, 1e-12, "test accuracy stored");
    is_int(nl_run_load_params(store, &got, p, m->nparams, &err), 0, "latest checkpoint loads");
    ok(memcmp(p, m->params, m->nparams * sizeof(float)) == 0, "it holds the final weights");
    is_int(nl_run_load_params(store, &got, p, m->nparams - 1, &err), NL_EFORMAT,
           "a size mismatch is refused");
    like(err.msg, got.name, "naming the run");

    sqlite3_stmt *st;
    sqlite3_prepare_v2(nl_store_sqlite(store), "SELECT count(*) FROM checkpoints", -1, &st, NULL);
    sqlite3_step(st);
    is_int(sqlite3_column_int(st, 0), 2, "the two latest checkpoints are kept");
    sqlite3_finalize(st);
    sqlite3_prepare_v2(nl_store_sqlite(store), "SELECT count(*) FROM epochs", -1, &st, NULL);
    sqlite3_step(st);
    is_int(sqlite3_column_int(st, 0), 3, "each epoch's metrics are stored with its checkpoint");
    sqlite3_finalize(st);
    is_int(nl_run_get(store, "nope", &got, NULL, NULL, &err), NL_ENOENT, "unknown run");
    like(err.msg, "nope", "message names it");

    /* Resuming rewrites the settings in the core's format; the keys a front end added (the
     * window's init and hosts) stay, the core's take their new values. */
    char *settings = NULL;
    is_int(
        nl_run_set_settings(store, run.id,
                            "{\"epochs\":3,\"batch\":64,\"init\":\"gui-lenet\","
                            "\"hosts\":\"node1:1,node2:1\",\"extra\":{\"a\":[1,2.5,\"x\\\"y\"]}}",
                            &err),
        0, "settings with a front end's keys stored: %s", err.msg);
    is_int(nl_run_reopen(store, run.id, "{\"epochs\":5,\"batch\":64,\"cluster\":true}", &err), 0,
           "the run reopens with new settings: %s", err.msg);
    is_int(nl_run_get(store, run.name, &got, NULL, &settings, &err), 0, "and reads back");
    is_str(settings ? settings : "",
           "{\"epochs\":5,\"batch\":64,\"cluster\":true,\"init\":\"gui-lenet\","
           "\"hosts\":\"node1:1,node2:1\",\"extra\":{\"a\":[1,2.5,\"x\\\"y\"]}}",
           "the new keys first, then the old ones they lack, as they were");
    is_str(got.status, "running", "the reopened run is running again");
    nl_free(settings);

    nl_free(p);
    nl_store_close(store);
    nl_model_free(m);
    nl_dataset_free(d);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
}

static int count_epochs(void *ud, const struct nl_event *ev)
{
    if (ev->kind == NL_EVENT_EPOCH)
        (*(int *)ud)++;
    return 0;
}

/* A session records its run (epochs with checkpoints) while the front end's display sees every
 * epoch; it owns the run while it trains; a finish the store refuses is the session's result. */
static void test_session(void)
{
    char dir[] = "/tmp/nnlab-session-XXXXXX", path[256];
    struct nl_store *store = NULL;
    struct nl_session *s = NULL;
    struct nl_error err = {0};
    struct nl_train_opts o;
    struct nl_run_info info;
    int shown = 0;

    ok(mkdtemp(dir) != NULL, "temporary directory");
    snprintf(path, sizeof path, "%s/t.db", dir);
    is_int(nl_store_open(&store, path, &err), 0, "store opens");
    struct nl_dataset *d = synthetic(200, 40, 5);
    struct nl_model *m = build(mlp_spec, d->shape, d->nclasses);
    nl_train_defaults(&o);
    o.epochs = 2;
    o.batch = 32;
    nl_model_init_params(m, o.seed);
    const struct nl_session_new new = {
        .dataset = "synthetic", .model = "mlp", .settings_extra = "{\"init\":\"x.safetensors\"}"};
    is_int(nl_session_start(store, &new, m, d, &o, &s, &err), 0, "a session starts: %s", err.msg);
    if (!s) {
        nl_store_close(store);
        return;
    }
    is_str(s->run.name, "mlp-synthetic-1", "its run is recorded");
    is_int(nl_run_get(store, s->run.name, &info, NULL, NULL, &err), 0, "and reads back");
    ok(info.owner_lives && info.owner_pid == (long)getpid(), "owned by this process (pid %ld)",
       info.owner_pid);
    is_int(nl_run_reopen(store, s->run.id, NULL, &err), NL_EBUSY,
           "a run being trained is not reopened");
    like(err.msg, "being trained by process", "naming its owner");

    struct nl_train_hooks hooks = nl_session_hooks(s, count_epochs, &shown);
    int rc = nl_train(s->model, s->data, &s->opts, &hooks, &s->res, &err);
    is_int(rc, 0, "it trains: %s", err.msg);
    is_int(shown, 2, "the display saw both epochs");
    sqlite3_stmt *st;
    sqlite3_prepare_v2(nl_store_sqlite(store), "SELECT count(*) FROM epochs", -1, &st, NULL);
    sqlite3_step(st);
    is_int(sqlite3_column_int(st, 0), 2, "the session stored both epochs");
    sqlite3_finalize(st);

    /* The finish the store does not take (here, a connection made read-only). */
    sqlite3_exec(nl_store_sqlite(store), "PRAGMA query_only = 1", NULL, NULL, NULL);
    rc = nl_session_finish(s, 0, &err);
    is_int(rc, NL_EDB, "a finish not written fails the session");
    like(err.msg, "not recorded as done", "saying so: %s", err.msg);
    sqlite3_exec(nl_store_sqlite(store), "PRAGMA query_only = 0", NULL, NULL, NULL);
    is_int(nl_run_get(store, s->run.name, &info, NULL, NULL, &err), 0, "the run reads back");
    is_str(info.status, "running", "still running, with this process its owner");
    is_int(nl_session_finish(s, 0, &err), 0, "finished once the store takes it: %s", err.msg);
    is_int(nl_run_get(store, s->run.name, &info, NULL, NULL, &err), 0, "the run reads back");
    is_str(info.status, "done", "done");
    ok(info.owner_host[0] == '\0' && !info.owner_lives, "with no owner");
    char *settings = NULL;
    if (nl_run_get(store, s->run.name, &info, NULL, &settings, &err) == 0)
        like(settings, "\"init\":\"x.safetensors\"", "the front end's settings are kept");
    nl_free(settings);
    is_int(nl_run_finish(store, s->run.id, "done", &s->res, &err), NL_EBUSY,
           "a run this process no longer owns is not finished again");
    nl_session_free(s);
    nl_store_close(store);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
}

/* A run's settings as the store keeps them read back as the options that wrote them, as
 * resuming needs; a cluster run and settings without the training options are refused. */
static void test_settings(void)
{
    struct nl_dataset *d = synthetic(60, 10, 3);
    struct nl_model *m = build(mlp_spec, d->shape, d->nclasses);
    struct nl_error err = {0};
    struct nl_train_opts o, back;
    long skipped = -1;
    int cluster = -1;

    const char *frozen[] = {"fc1"};
    nl_model_freeze(m, frozen, 1, NULL, &err);
    nl_train_defaults(&o);
    o.epochs = 7;
    o.batch = 24;
    o.threads = 3;
    o.seed = 11;
    nl_optim_defaults(&o.optim, NL_OPTIM_ADAMW);
    o.optim.lr = 0.0123f;
    o.optim.weight_decay = 0.02f;
    nl_schedule_parse(&o.schedule, "step:2:0.5", &err);
    o.schedule.warmup_epochs = 1.5f;
    o.clip_norm = 2.5f;
    o.target_accuracy = 0.97;
    o.patience = 4;
    o.on_nan = NL_ON_NAN_SKIP_BATCH;
    o.checkpoint_every = 50;
    o.augment.flip = 1;
    o.augment.crop = 3;
    char *json = nl_run_settings_format(&o, m, d->shape, d->nclasses, 0, 5);
    ok(json && strstr(json, "\"frozen\":[\"fc1\"]") && strstr(json, "\"input\":[1,12,12]"),
       "the settings name the frozen layers and the input: %s", json ? json : "(none)");
    is_int(nl_run_settings_parse(json, "r", &back, &skipped, &cluster, &err), 0,
           "they parse back: %s", err.msg);
    ok(back.epochs == 7 && back.batch == 24 && back.threads == 3 && back.seed == 11 &&
           back.optim.kind == NL_OPTIM_ADAMW && back.optim.lr == o.optim.lr &&
           back.optim.weight_decay == o.optim.weight_decay &&
           back.schedule.kind == o.schedule.kind && back.schedule.gamma == o.schedule.gamma &&
           back.schedule.warmup_epochs == 1.5f && back.clip_norm == 2.5f &&
           back.target_accuracy == 0.97 && back.patience == 4 &&
           back.on_nan == NL_ON_NAN_SKIP_BATCH && back.checkpoint_every == 50 &&
           back.augment.flip == 1 && back.augment.crop == 3,
       "into the same options, floats exactly");
    ok(skipped == 5 && cluster == 0, "with the skipped batches and not a cluster run");
    nl_free(json);

    json = nl_run_settings_format(&o, m, d->shape, d->nclasses, 1, 0);
    is_int(nl_run_settings_parse(json, "c", &back, NULL, &cluster, &err), 0,
           "a cluster run's settings parse back: %s", err.msg);
    ok(cluster == 1 && back.epochs == 7, "and say it trained on hosts");
    nl_free(json);
    char *kept = nl_run_settings_keep("{}", "{\"hosts\":\"a\\u0001b\"}");
    is_str(kept ? kept : "", "{\"hosts\":\"a\\u0001b\"}",
           "keys are kept into an empty object, control characters escaped");
    nl_free(kept);
    kept = nl_run_settings_keep("{\"epochs\":2}", "not json");
    is_str(kept ? kept : "", "{\"epochs\":2}", "old settings that do not parse are left out");
    nl_free(kept);
    /* Every row of the table of settings, each away from its default, comes back as it was;
     * older settings (without the optimizer's betas, compress) read with the defaults. */
    settings_distinct(&o);
    json = nl_run_settings_format(&o, m, d->shape, d->nclasses, 1, 0);
    is_int(nl_run_settings_parse(json, "t", &back, NULL, NULL, &err), 0,
           "every setting in the table parses back: %s", err.msg);
    const char *differs = settings_differ(&o, &back);
    ok(!differs, "each as it was (%s differs) in %s", differs ? differs : "none", json);
    ok(json && strstr(json, "\"compress\":\"bf16\"") &&
           strstr(json, "\"seed\":1152921504606846979"),
       "bf16 compression and a 61-bit seed stored");
    nl_free(json);
    is_int(nl_run_settings_parse("{\"epochs\":3,\"batch\":8,\"optim\":\"adam\",\"schedule\":"
                                 "\"cosine\",\"lr\":0.5,\"seed\":2}",
                                 "older", &back, NULL, NULL, &err),
           0, "settings of an older run parse: %s", err.msg);
    ok(back.bf16 == 0 && back.optim.beta1 == 0.9f && back.optim.lr == 0.5f,
       "missing keys keep their defaults");
    is_int(nl_run_settings_parse("{\"epochs\":3,\"batch\":8,\"optim\":\"sgd\",\"schedule\":"
                                 "\"cosine\",\"lr\":0.5,\"seed\":2,\"compress\":\"zip\"}",
                                 "odd", &back, NULL, NULL, &err),
           NL_EFORMAT, "a setting of a bad value is refused");
    like(err.msg, "run 'odd': its settings: setting compress: 'zip'", "naming the run and setting");
    is_int(nl_run_settings_parse("{\"epochs\":3}", "old", &back, NULL, NULL, &err), NL_EFORMAT,
           "settings without the training options are refused");
    like(err.msg, "'old'", "naming the run");
    nl_model_free(m);
    nl_dataset_free(d);
}

/* The benchmark's FLOP count against a hand count, and its timed steps: real training steps
 * that allocate nothing, on one thread and on three. */
static void test_bench(void)
{
    struct nl_dataset *d = synthetic(600, 10, 5);
    struct nl_model *m = build(conv_spec, d->shape, d->nclasses);
    struct nl_bench_train r;
    struct nl_error err = {0};

    if (!m)
        return;
    /* conv1 4x3x3 pad 1 on 1x12x12: 4*144*9 multiply-adds, forward and weight gradient only (it
     * reads the model's input); fc1 16 on 4x6x6: 16*144; fc2 4 on 16: 64; three products each. */
    double want = 2.0 * (4.0 * 144 * 9 * 2 + 16.0 * 144 * 3 + 64.0 * 3);
    is_float(nl_model_train_flops(m), want, 1e-9, "conv model: FLOPs per sample");
    for (int threads = 1; threads <= 3; threads += 2) {
        /* 600 samples at batch 32: 19 steps an epoch, so 40 steps cross two epochs. */
        is_int(nl_bench_train(&r, m, d, 32, threads, 3, 40, &err), 0, "%d thread(s): bench runs",
               threads);
        is_int(r.steps, 40, "%d thread(s): 40 steps timed", threads);
        ok(r.images_per_second > 0 && r.seconds > 0, "%d thread(s): %.0f images/s", threads,
           r.images_per_second);
        is_float(r.gflops, nl_model_train_flops(m) * r.images_per_second / 1e9, 1e-9,
                 "%d thread(s): GFLOP/s from FLOPs and images/s", threads);
        is_float(r.allocs_per_step, 0.0, 0.0,
                 "%d thread(s): no allocation in the timed steps, epoch boundaries included",
                 threads);
        ok(r.peak_rss_mb > 0, "%d thread(s): peak RSS %.1f MB", threads, r.peak_rss_mb);
    }
    is_int(nl_bench_train(&r, m, d, 32, 1, 0, 0, &err), NL_EINVAL, "zero steps refused");
    nl_model_free(m);
    nl_dataset_free(d);

    struct nl_bench_sgemm sg;
    is_int(nl_bench_sgemm(&sg, 64, 2, 0.01, &err), 0, "sgemm benchmark runs");
    ok(sg.one_gflops > 0 && sg.all_gflops > 0 && sg.threads == 2, "sgemm: %.1f and %.1f GFLOP/s",
       sg.one_gflops, sg.all_gflops);
}

/* Stored runs and checkpoints were made with these seeds: a changed rule would make every resume
 * of an older run go on with another data order. The values are the rules worked by hand. */
static void test_rules(void)
{
    is_int((long long)nl_rng_epoch_seed(1, 3), (long long)0x9e3779b97f4a7c18ULL, "epoch seed");
    is_int((long long)nl_rng_partition_seed(1), (long long)(0x9e3779b97f4a7c15ULL ^ 0x5eed0fc1u),
           "partition seed");
    is_int((long long)nl_rng_column_seed(2, 1, 5),
           (long long)((2 * 0x100000001b3ULL + 1) * 0x9e3779b97f4a7c15ULL + 5), "column seed");
    is_int((long long)nl_rng_step_seed(0, 4, 1, 3),
           (long long)(0xd1b54a32d192ed03ULL * 0x100000001b3ULL + 13), "step seed");

    /* Every split covers [0, n) in order, in whole blocks but the last, and its parts hold numbers
     * of blocks (the last one counted whole) within one of each other. */
    const size_t ns[] = {0, 1, 15, 16, 17, 100, 1000, 4099};
    const size_t blocks[] = {1, 16};
    int good = 1;
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
        for (size_t k = 0; k < 2; k++)
            for (int nth = 1; nth <= 7; nth++) {
                size_t end = 0, least = (size_t)-1, most = 0;
                for (int t = 0; t < nth; t++) {
                    size_t lo, hi;
                    nl_block_range(ns[i], blocks[k], t, nth, &lo, &hi);
                    if (lo != end || hi < lo || (hi < ns[i] && hi % blocks[k] != 0)) {
                        diag("n %zu block %zu part %d of %d: [%zu, %zu) after %zu", ns[i],
                             blocks[k], t, nth, lo, hi, end);
                        good = 0;
                    }
                    end = hi;
                    const size_t nb = (hi - lo + blocks[k] - 1) / blocks[k];
                    least = nb < least ? nb : least;
                    most = nb > most ? nb : most;
                }
                if (end != ns[i] || most - least > 1) {
                    diag("n %zu block %zu in %d: ends at %zu, parts %zu..%zu", ns[i], blocks[k],
                         nth, end, least, most);
                    good = 0;
                }
            }
    ok(good, "block ranges cover [0, n) in whole blocks, evenly");
    size_t lo, hi;
    nl_block_range(100, 16, 1, 3, &lo, &hi);
    ok(lo == 32 && hi == 64, "part 1 of 3 of 100 floats in blocks of 16 is [32, 64): [%zu, %zu)",
       lo, hi);
}

/* Inference in groups (core/engine/model.c): a model whose sample's activations take more than
 * 1 MiB runs a batch of 40 on a forward-only executor as groups of 16, 16 and 8. Each group's
 * logits are those of the same samples run alone as a batch, bit for bit (so every group reads
 * and writes its own rows of every buffer), and every sample's are those of a forward of that
 * sample alone, to rounding; a training executor's inference forward takes the batch whole and
 * agrees to rounding as well. */
static void test_grouped_forward(void)
{
    const char *spec = "c1: conv 32 3x3 pad=1\nb1: batchnorm\nrelu\n"
                       "c2: conv 16 3x3 stride=2 pad=1\nrelu\npool: globalavgpool\nfc: dense 6\n";
    const struct nl_shape in_shape = {3, 64, 64};
    struct nl_model *m = build(spec, in_shape, 6);
    const int n = 40, k = 6;
    const size_t per = nl_shape_size(in_shape);
    float *in = nl_alloc_floats((size_t)n * per), *all = nl_alloc_floats((size_t)n * k);
    struct nl_exec *x = NULL, *one = NULL, *train = NULL;
    struct nl_error err = {0};
    struct nl_rng r0;

    if (!m || !in || !all || nl_exec_new_forward(&x, m, n, &err) < 0 ||
        nl_exec_new_forward(&one, m, 16, &err) < 0 || nl_exec_new(&train, m, n, &err) < 0) {
        ok(0, "executors for grouped inference: %s", err.msg);
        return;
    }
    nl_model_init_params(m, 9);
    nl_rng_seed(&r0, 11);
    for (size_t i = 0; i < (size_t)n * per; i++)
        in[i] = (float)nl_rng_uniform(&r0) - 0.5f;
    memcpy(all, nl_exec_forward(x, m->params, in, n, 0, NULL), (size_t)n * k * sizeof(float));
    int same = 1;
    double worst = 0.0, scale = 1.0;
    for (int s0 = 0; s0 < n; s0 += 16) {
        const int nb = n - s0 < 16 ? n - s0 : 16;
        const float *y = nl_exec_forward(one, m->params, in + (size_t)s0 * per, nb, 0, NULL);
        same &= memcmp(y, all + (size_t)s0 * k, (size_t)nb * k * sizeof(float)) == 0;
    }
    ok(same, "a batch of 40 in inference: each group of 16 samples' logits as that group alone");
    for (int s = 0; s < n; s += 13) {
        const float *y = nl_exec_forward(one, m->params, in + (size_t)s * per, 1, 0, NULL);
        for (int j = 0; j < k; j++) {
            worst = fmax(worst, fabs((double)y[j] - all[(size_t)s * k + j]));
            scale = fmax(scale, fabs((double)y[j]));
        }
    }
    is_float(worst, 0.0, 1e-5 * scale, "a batch of 40 in inference: each sample's logits as alone");
    const float *yt = nl_exec_forward(train, m->params, in, n, 0, NULL);
    worst = 0.0;
    for (size_t i = 0; i < (size_t)n * k; i++)
        worst = fmax(worst, fabs((double)yt[i] - all[i]));
    is_float(worst, 0.0, 1e-5 * scale,
             "a batch of 40 in inference: a training executor's logits, the batch whole");
    nl_exec_free(x);
    nl_exec_free(one);
    nl_exec_free(train);
    nl_free(in);
    nl_free(all);
    nl_model_free(m);
}

int main(void)
{
    nl_kernels_init(); /* as nnlab runs: the CPU's kernels, single-threaded products */
    test_rules();
    test_model_gradient();
    test_training();
    test_streamed();
    test_team();
    test_team_forward();
    test_grouped_forward();
    test_hybrid();
    test_tables();
    test_failures();
    test_early_stop();
    test_checkpoints();
    test_session();
    test_settings();
    test_bench();
    return done_testing();
}
