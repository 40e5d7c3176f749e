/* Classification metrics from a confusion matrix (definitions in include/nnlab/metrics.h). */
#include "nnlab/metrics.h"

#include <math.h>
#include <string.h>

#include "nnlab/alloc.h"

int nl_metrics_init(struct nl_metrics *mt, int nclasses, struct nl_error *err)
{
    memset(mt, 0, sizeof *mt);
    if (nclasses < 1 || nclasses > 1 << 20)
        return nl_error_set(err, NL_EINVAL, "metrics: %d classes", nclasses);
    mt->nclasses = nclasses;
    if (nclasses <= NL_METRICS_CONFUSION_MAX)
        mt->confusion = nl_calloc((size_t)nclasses * (size_t)nclasses, sizeof *mt->confusion);
    mt->tp = nl_calloc((size_t)nclasses, sizeof *mt->tp);
    mt->classes = nl_calloc((size_t)nclasses, sizeof *mt->classes);
    if (!mt->tp || !mt->classes || (nclasses <= NL_METRICS_CONFUSION_MAX && !mt->confusion)) {
        nl_metrics_release(mt);
        return nl_error_set(err, NL_ENOMEM, "out of memory for the metrics of %d classes",
                            nclasses);
    }
    return 0;
}

void nl_metrics_release(struct nl_metrics *mt)
{
    if (!mt)
        return;
    nl_free(mt->confusion);
    nl_free(mt->tp);
    nl_free(mt->classes);
    memset(mt, 0, sizeof *mt);
}

void nl_metrics_add(struct nl_metrics *mt, const float *logits, const int32_t *labels, int n)
{
    const int k = mt->nclasses;

    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * (size_t)k;
        const int y = labels[i];
        int best = 0, above = 0;
        for (int j = 1; j < k; j++)
            if (row[j] > row[best])
                best = j;
        for (int j = 0; j < k; j++)
            above += row[j] > row[y];
        if (mt->confusion)
            mt->confusion[(size_t)y * (size_t)k + (size_t)best]++;
        mt->classes[y].support++;
        mt->classes[best].predicted++;
        mt->tp[y] += best == y;
        mt->top1 += best == y;
        mt->topk += above < NL_TOPK;
        mt->samples++;
    }
}

void nl_metrics_merge(struct nl_metrics *dst, const struct nl_metrics *src)
{
    const size_t cells = (size_t)dst->nclasses * (size_t)dst->nclasses;

    for (size_t i = 0; dst->confusion && src->confusion && i < cells; i++)
        dst->confusion[i] += src->confusion[i];
    for (int c = 0; c < dst->nclasses; c++) {
        dst->tp[c] += src->tp[c];
        dst->classes[c].support += src->classes[c].support;
        dst->classes[c].predicted += src->classes[c].predicted;
    }
    dst->samples += src->samples;
    dst->top1 += src->top1;
    dst->topk += src->topk;
}

void nl_metrics_finish(struct nl_metrics *mt)
{
    const int k = mt->nclasses;
    double n;

    if (mt->confusion) {
        mt->samples = mt->top1 = 0;
        for (int c = 0; c < k; c++) {
            mt->tp[c] = mt->confusion[(size_t)c * (size_t)k + (size_t)c];
            mt->classes[c].support = mt->classes[c].predicted = 0;
            mt->top1 += mt->tp[c];
        }
        for (int c = 0; c < k; c++)
            for (int j = 0; j < k; j++) {
                long v = mt->confusion[(size_t)c * (size_t)k + (size_t)j];
                mt->classes[c].support += v;
                mt->classes[j].predicted += v;
                mt->samples += v;
            }
    }
    n = (double)mt->samples;
    memset(&mt->macro, 0, sizeof mt->macro);
    memset(&mt->weighted, 0, sizeof mt->weighted);
    mt->occurring = 0;
    for (int c = 0; c < k; c++) {
        struct nl_class_metrics *cm = &mt->classes[c];
        long tp = mt->tp[c];
        cm->precision = cm->predicted ? (double)tp / (double)cm->predicted : 0.0;
        cm->recall = cm->support ? (double)tp / (double)cm->support : 0.0;
        cm->f1 = cm->precision + cm->recall > 0.0
                     ? 2.0 * cm->precision * cm->recall / (cm->precision + cm->recall)
                     : 0.0;
        if (cm->support || cm->predicted) {
            mt->occurring++;
            mt->macro.precision += cm->precision;
            mt->macro.recall += cm->recall;
            mt->macro.f1 += cm->f1;
        }
        mt->weighted.precision += cm->precision * (double)cm->support;
        mt->weighted.recall += cm->recall * (double)cm->support;
        mt->weighted.f1 += cm->f1 * (double)cm->support;
    }
    if (mt->occurring) {
        mt->macro.precision /= mt->occurring;
        mt->macro.recall /= mt->occurring;
        mt->macro.f1 /= mt->occurring;
    }
    if (n > 0.0) {
        mt->weighted.precision /= n;
        mt->weighted.recall /= n;
        mt->weighted.f1 /= n;
    }
    mt->macro.support = mt->weighted.support = mt->samples;
    mt->accuracy = n > 0.0 ? (double)mt->top1 / n : 0.0;
    mt->topk_accuracy = n > 0.0 ? (double)mt->topk / n : 0.0;
}

void nl_reg_add(struct nl_reg_sums *s, const float *p, const float *t, int n)
{
    for (int i = 0; i < n; i++) {
        const double e = (double)p[i] - t[i];
        s->n += 1.0;
        s->abs += fabs(e);
        s->sq += e * e;
        s->t += t[i];
        s->tt += (double)t[i] * t[i];
    }
}

void nl_reg_merge(struct nl_reg_sums *dst, const struct nl_reg_sums *src)
{
    dst->n += src->n;
    dst->abs += src->abs;
    dst->sq += src->sq;
    dst->t += src->t;
    dst->tt += src->tt;
}

void nl_reg_finish(const struct nl_reg_sums *s, double std, double *mae, double *rmse, double *r2)
{
    if (!(s->n > 0)) {
        *mae = *rmse = *r2 = NAN;
        return;
    }
    const double sst = s->tt - s->t * s->t / s->n;
    *mae = s->abs / s->n * std;
    *rmse = sqrt(s->sq / s->n) * std;
    *r2 = sst > 1e-12 * s->n ? 1.0 - s->sq / sst : NAN;
}
