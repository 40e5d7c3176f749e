/* Classification metrics of an evaluation: the confusion matrix, top-1 and top-5 accuracy, and
 * per class precision, recall, F1 and support with their macro and weighted averages, as
 * scikit-learn's classification_report defines them. The command line's eval and the window's
 * Runs page compute them with these functions, so both show the same numbers.
 *
 * Definitions, for class c with TP = confusion[c][c], predicted = column c's sum, support = row
 * c's sum:
 *   precision = TP / predicted (0 when nothing was predicted as c)
 *   recall    = TP / support   (0 when c has no samples)
 *   f1        = 2 precision recall / (precision + recall) (0 when both are 0)
 *   macro     = the unweighted mean over the classes that occur, as a label or a prediction
 *   weighted  = the mean weighted by support
 * A sample counts towards top-5 when fewer than 5 classes have a logit strictly greater than its
 * label's (with 5 classes or fewer, every sample does). */
#ifndef NNLAB_METRICS_H
#define NNLAB_METRICS_H

#include <stdint.h>

#include "nnlab/error.h"

#define NL_TOPK 5
/* The largest class count with a confusion matrix (8 MiB of counts); above it the per-class
 * counts are kept without one. */
#define NL_METRICS_CONFUSION_MAX 1024

struct nl_class_metrics {
    double precision, recall, f1;
    long support;   /* samples of the class */
    long predicted; /* samples predicted as the class */
};

struct nl_metrics {
    int nclasses;
    long samples;
    /* (nclasses, nclasses): row the label, column the prediction (argmax); NULL above
     * NL_METRICS_CONFUSION_MAX classes */
    long *confusion;
    long *tp;        /* (nclasses) samples of each class predicted as it */
    long top1, topk; /* samples right at top-1 and within the top NL_TOPK */
    /* Filled by nl_metrics_finish: */
    double accuracy, topk_accuracy;
    struct nl_class_metrics *classes;        /* (nclasses) */
    int occurring;                           /* classes counted in the macro averages */
    struct nl_class_metrics macro, weighted; /* support: all samples; predicted: unused */
};

/* Allocates the counts of a k-class problem, all zero. */
int nl_metrics_init(struct nl_metrics *mt, int nclasses, struct nl_error *err);
/* Frees what init allocated; accepts a zeroed struct. */
void nl_metrics_release(struct nl_metrics *mt);
/* Counts n samples: logits (n, nclasses), labels (n). */
void nl_metrics_add(struct nl_metrics *mt, const float *logits, const int32_t *labels, int n);
/* Adds src's counts into dst (of the same class count). */
void nl_metrics_merge(struct nl_metrics *dst, const struct nl_metrics *src);
/* Computes the rates and averages. With a confusion matrix, the counts (samples, top1, each
 * class's support, predictions and true positives) are first taken from it, so this may be
 * called on a matrix filled elsewhere (topk then as the caller set it). */
void nl_metrics_finish(struct nl_metrics *mt);

/* Regression metrics, from sums over standardised predictions p and targets t (the dataset's
 * target std turns them back into the target's units): MAE = mean |p - t| std, RMSE = sqrt(mean
 * (p - t)^2) std, R^2 = 1 - sum (p - t)^2 / sum (t - mean t)^2 (scikit-learn's r2_score; NAN when
 * the targets do not vary). */
struct nl_reg_sums {
    double n, abs, sq, t, tt; /* samples, sum |p - t|, sum (p - t)^2, sum t, sum t^2 */
};
void nl_reg_add(struct nl_reg_sums *s, const float *p, const float *t, int n);
void nl_reg_merge(struct nl_reg_sums *dst, const struct nl_reg_sums *src);
/* NAN for all three when s holds no sample. */
void nl_reg_finish(const struct nl_reg_sums *s, double std, double *mae, double *rmse, double *r2);

#endif
