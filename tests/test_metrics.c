/* Classification metrics (include/nnlab/metrics.h): precision, recall, F1, support, the macro
 * and weighted averages and top-5 accuracy against values computed by hand; and
 * nl_evaluate_metrics on a small dataset against a one-sample-at-a-time count, on one thread and
 * on three, with the loss and accuracy that nl_evaluate gives. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nnlab/alloc.h"
#include "nnlab/metrics.h"
#include "nnlab/model.h"
#include "nnlab/rng.h"
#include "nnlab/spec.h"
#include "nnlab/trainer.h"
#include "tap.h"
#include "test_util.h"

#define TOL 1e-12

/* A logits row of k classes whose argmax is pred. */
static void row(float *r, int k, int pred)
{
    for (int j = 0; j < k; j++)
        r[j] = (float)j * 0.01f;
    r[pred] = 5.0f;
}

static void test_by_hand(void)
{
    enum { K = 4, N = 6 };
    /* Labels and predictions; class 3 never occurs. Confusion (row label, column prediction):
     *   [2 1 0 0]   class 0: TP 2, predicted 3, support 3: P 2/3, R 2/3, F1 2/3
     *   [0 2 0 0]   class 1: TP 2, predicted 3, support 2: P 2/3, R 1,   F1 0.8
     *   [1 0 0 0]   class 2: TP 0, predicted 0, support 1: P 0,   R 0,   F1 0
     *   [0 0 0 0]   class 3: absent, left out of the macro average
     * macro:    P (2/3 + 2/3 + 0) / 3 = 4/9, R (2/3 + 1 + 0) / 3 = 5/9, F1 (2/3 + 0.8) / 3
     * weighted: P (3 * 2/3 + 2 * 2/3) / 6 = 5/9, R (2 + 2) / 6 = 2/3, F1 (2 + 1.6) / 6 = 0.6 */
    const int32_t labels[N] = {0, 0, 1, 1, 2, 0};
    const int preds[N] = {0, 1, 1, 1, 0, 0};
    float logits[N * K];
    struct nl_metrics mt;
    struct nl_error err = {0};

    for (int i = 0; i < N; i++)
        row(logits + i * K, K, preds[i]);
    is_int(nl_metrics_init(&mt, K, &err), 0, "init: %s", err.msg);
    nl_metrics_add(&mt, logits, labels, 4);
    nl_metrics_add(&mt, logits + 4 * K, labels + 4, 2);
    nl_metrics_finish(&mt);
    const long want_cm[K * K] = {2, 1, 0, 0, 0, 2, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
    ok(memcmp(mt.confusion, want_cm, sizeof want_cm) == 0, "confusion matrix");
    is_int(mt.samples, N, "samples");
    is_float(mt.accuracy, 4.0 / 6.0, TOL, "accuracy 4/6");
    is_float(mt.topk_accuracy, 1.0, TOL, "top-5 of 4 classes: every sample");
    is_float(mt.classes[0].precision, 2.0 / 3.0, TOL, "class 0 precision");
    is_float(mt.classes[0].recall, 2.0 / 3.0, TOL, "class 0 recall");
    is_float(mt.classes[0].f1, 2.0 / 3.0, TOL, "class 0 f1");
    is_int(mt.classes[0].support, 3, "class 0 support");
    is_float(mt.classes[1].precision, 2.0 / 3.0, TOL, "class 1 precision");
    is_float(mt.classes[1].recall, 1.0, TOL, "class 1 recall");
    is_float(mt.classes[1].f1, 0.8, TOL, "class 1 f1");
    is_int(mt.classes[1].support, 2, "class 1 support");
    ok(mt.classes[2].precision == 0.0 && mt.classes[2].recall == 0.0 && mt.classes[2].f1 == 0.0,
       "class 2, never predicted: precision, recall and f1 0");
    is_int(mt.classes[3].support, 0, "class 3 support 0");
    is_int(mt.occurring, 3, "three classes occur");
    is_float(mt.macro.precision, 4.0 / 9.0, TOL, "macro precision");
    is_float(mt.macro.recall, 5.0 / 9.0, TOL, "macro recall");
    is_float(mt.macro.f1, (2.0 / 3.0 + 0.8) / 3.0, TOL, "macro f1");
    is_float(mt.weighted.precision, 5.0 / 9.0, TOL, "weighted precision");
    is_float(mt.weighted.recall, 2.0 / 3.0, TOL, "weighted recall");
    is_float(mt.weighted.f1, 0.6, TOL, "weighted f1");
    is_int(mt.macro.support, N, "averages' support: all samples");

    /* finish again from the confusion matrix alone, as the window would call it. */
    mt.samples = mt.top1 = 0;
    nl_metrics_finish(&mt);
    is_float(mt.accuracy, 4.0 / 6.0, TOL, "finish recounts samples and top-1 from the matrix");
    nl_metrics_release(&mt);
    nl_metrics_release(&mt); /* released twice: harmless */
}

static void test_topk(void)
{
    enum { K = 7 };
    /* Label 0 with 4 classes above it: within the top 5; with 5 above: not; all equal: ties do
     * not count against it. */
    const float logits[3 * K] = {
        0.5f, 0.9f, 0.8f, 0.7f, 0.6f, 0.1f,  0.2f, /* 4 above */
        0.5f, 0.9f, 0.8f, 0.7f, 0.6f, 0.55f, 0.2f, /* 5 above */
        1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f,  1.0f, /* ties */
    };
    const int32_t labels[3] = {0, 0, 0};
    struct nl_metrics mt;
    struct nl_error err = {0};

    is_int(nl_metrics_init(&mt, K, &err), 0, "init of 7 classes");
    nl_metrics_add(&mt, logits, labels, 3);
    nl_metrics_finish(&mt);
    is_int(mt.topk, 2, "top-5: 4 above counts, 5 above does not, ties count");
    is_float(mt.topk_accuracy, 2.0 / 3.0, TOL, "top-5 accuracy 2/3");
    is_float(mt.accuracy, 1.0 / 3.0, TOL, "top-1: only the all-equal row (argmax 0)");
    nl_metrics_release(&mt);
    ok(nl_metrics_init(&mt, 0, &err) == NL_EINVAL, "0 classes refused");

    /* Above NL_METRICS_CONFUSION_MAX classes: no matrix, the same per-class numbers. */
    enum { BIG = NL_METRICS_CONFUSION_MAX + 1 };
    float *big = nl_calloc(3 * (size_t)BIG, sizeof *big);
    const int32_t big_labels[3] = {0, 1, BIG - 1};
    big[0 * BIG + 0] = 1.0f;       /* right */
    big[1 * BIG + 0] = 1.0f;       /* label 1 taken for 0 */
    big[2 * BIG + BIG - 1] = 1.0f; /* right */
    is_int(nl_metrics_init(&mt, BIG, &err), 0, "init of %d classes", BIG);
    ok(mt.confusion == NULL, "no confusion matrix above %d classes", NL_METRICS_CONFUSION_MAX);
    nl_metrics_add(&mt, big, big_labels, 3);
    nl_metrics_finish(&mt);
    is_int(mt.samples, 3, "samples counted without the matrix");
    is_float(mt.accuracy, 2.0 / 3.0, TOL, "accuracy 2/3");
    is_float(mt.classes[0].precision, 0.5, TOL, "class 0 precision 1/2");
    is_float(mt.classes[1].recall, 0.0, TOL, "class 1 recall 0");
    is_int(mt.occurring, 3, "three classes occur");
    is_float(mt.macro.f1, (2.0 / 3.0 + 0.0 + 1.0) / 3.0, TOL, "macro f1 over the three");
    nl_metrics_release(&mt);
    nl_free(big);
}

enum { SIDE = 6, CLASSES = 8, NTEST = 150 };

static struct nl_dataset *dataset(void)
{
    struct nl_dataset *d = dataset_new("metrics", "idx", (struct nl_shape){1, SIDE, SIDE}, NL_U8,
                                       CLASSES, "c%d", 0.5f, 0.25f);
    struct nl_rng r;

    nl_rng_seed(&r, 5);
    for (int s = 0; s < NL_NSPLITS; s++) {
        uint32_t n = s == NL_TEST ? NTEST : 0;
        uint8_t *x = nl_calloc((size_t)n * SIDE * SIDE + 1, 1);
        int32_t *y = nl_calloc((size_t)n + 1, sizeof *y);
        for (uint32_t i = 0; i < n; i++) {
            y[i] = (int32_t)nl_rng_below(&r, CLASSES);
            for (int p = 0; p < SIDE * SIDE; p++)
                x[(size_t)i * SIDE * SIDE + (size_t)p] = (uint8_t)nl_rng_below(&r, 256);
        }
        d->split[s].n = n;
        d->split[s].x = x;
        d->split[s].y = y;
    }
    return d;
}

static void test_evaluate(void)
{
    struct nl_error err = {0};
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;
    struct nl_dataset *d = dataset();
    struct nl_exec *x = NULL;
    struct nl_metrics naive, one, three;
    struct nl_rng gen;
    float in[SIDE * SIDE];
    int32_t y;

    if (nl_spec_parse(&spec, "fc1: dense 16\nrelu\nfc2: dense N\n", "t", NULL, NULL, &err) < 0 ||
        nl_model_build(&m, spec, d->shape, CLASSES, &err) < 0 || nl_exec_new(&x, m, 1, &err) < 0) {
        ok(0, "model: %s", err.msg);
        return;
    }
    nl_model_init_params(m, 3);
    nl_rng_seed(&gen, 1);
    nl_metrics_init(&naive, CLASSES, &err);
    for (uint32_t i = 0; i < NTEST; i++) {
        nl_dataset_batch(d, NL_TEST, &i, 1, in, &y);
        nl_metrics_add(&naive, nl_exec_forward(x, m->params, in, 1, 0, &gen), &y, 1);
    }
    nl_metrics_finish(&naive);

    double loss1 = 0.0, loss3 = 0.0, loss = 0.0, acc = 0.0;
    is_int(nl_evaluate_metrics(m, d, NL_TEST, 1, &loss1, &one, &err), 0, "one thread: %s", err.msg);
    is_int(nl_evaluate_metrics(m, d, NL_TEST, 3, &loss3, &three, &err), 0, "three threads: %s",
           err.msg);
    is_int(nl_evaluate(m, d, NL_TEST, 1, &loss, &acc, &err), 0, "nl_evaluate");
    size_t cells = (size_t)CLASSES * CLASSES * sizeof(long);
    ok(memcmp(one.confusion, naive.confusion, cells) == 0,
       "one thread: the confusion matrix of a sample-by-sample count");
    ok(memcmp(three.confusion, naive.confusion, cells) == 0,
       "three threads: the same confusion matrix");
    is_int(one.topk, naive.topk, "top-5 count as the sample-by-sample count");
    is_int(three.topk, naive.topk, "top-5 count on three threads");
    ok(naive.topk > naive.top1 && naive.topk < NTEST, "top-5 (%ld) between top-1 (%ld) and all",
       naive.topk, naive.top1);
    is_float(one.accuracy, acc, 1e-12, "accuracy as nl_evaluate's");
    is_float(loss1, loss, 1e-9, "loss as nl_evaluate's");
    is_float(three.macro.f1, naive.macro.f1, 1e-12, "macro f1 on three threads");
    nl_metrics_release(&naive);
    nl_metrics_release(&one);
    nl_metrics_release(&three);
    nl_exec_free(x);
    nl_model_free(m);
    nl_spec_free(spec);
    nl_dataset_free(d);
}

int main(void)
{
    test_by_hand();
    test_topk();
    test_evaluate();
    return done_testing();
}
