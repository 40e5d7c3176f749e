/* The losses: softmax cross-entropy over class logits, the plain softmax for prediction, and the
 * regression losses (mse, mae, huber) of include/nnlab/layer.h. Both
 * subtract each row's maximum before exponentiating, so no logit is too large; the loss of a
 * shard is summed in double.
 *
 * dlogits may be logits itself (in place).
 *
 * Labels must lie in [0, k): the caller checks a dataset's labels against the model's output
 * width before training, and a label outside is a programmer's bug that aborts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nnlab/layer.h"

double nl_softmax_xent(float *dlogits, const float *logits, const int32_t *labels, int n, int k,
                       float scale, int *correct)
{
    double total = 0.0;
    int hits = 0;

    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * k;
        int32_t label = labels[i];
        if (label < 0 || label >= k)
            abort();

        int arg = 0;
        for (int j = 1; j < k; j++)
            if (x[j] > x[arg])
                arg = j;
        float max = x[arg];
        double target = (double)x[label] - (double)max; /* read before dlogits may overwrite x */
        hits += arg == label;

        double sum = 0.0;
        if (dlogits) {
            float *d = dlogits + (size_t)i * k;
            for (int j = 0; j < k; j++) {
                d[j] = expf(x[j] - max);
                sum += d[j];
            }
            /* d = scale * (softmax - onehot(label)) */
            float f = (float)(scale / sum);
            for (int j = 0; j < k; j++)
                d[j] *= f;
            d[label] -= scale;
        } else {
            for (int j = 0; j < k; j++)
                sum += expf(x[j] - max);
        }
        /* -log softmax[label] = log sum exp(x - max) - (x[label] - max) */
        total += log(sum) - target;
    }
    if (correct)
        *correct += hits;
    return total;
}

void nl_softmax(float *probs, const float *logits, int n, int k)
{
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * k;
        float *p = probs + (size_t)i * k;
        float max = x[0];
        for (int j = 1; j < k; j++)
            if (x[j] > max)
                max = x[j];
        double sum = 0.0;
        for (int j = 0; j < k; j++) {
            p[j] = expf(x[j] - max);
            sum += p[j];
        }
        float f = (float)(1.0 / sum);
        for (int j = 0; j < k; j++)
            p[j] *= f;
    }
}

const char *const nl_loss_names[5] = {"default", "xent", "mse", "mae", "huber"};

int nl_loss_parse(const char *text)
{
    for (int i = 0; i < 5; i++)
        if (text && strcmp(text, nl_loss_names[i]) == 0)
            return i;
    if (text && strcmp(text, "cross-entropy") == 0)
        return NL_LOSS_XENT;
    return -1;
}

double nl_regression_loss(float *dout, const float *out, const float *t, int n, enum nl_loss kind,
                          float scale)
{
    double total = 0.0;

    if (kind != NL_LOSS_MSE && kind != NL_LOSS_MAE && kind != NL_LOSS_HUBER)
        abort();
    for (int i = 0; i < n; i++) {
        const float e = out[i] - t[i];
        const float a = fabsf(e);
        float g;
        if (kind == NL_LOSS_MSE) {
            total += (double)e * e;
            g = 2.0f * e;
        } else if (kind == NL_LOSS_MAE) {
            total += a;
            g = e > 0.0f ? 1.0f : e < 0.0f ? -1.0f : 0.0f;
        } else if (a <= 1.0f) {
            total += 0.5 * (double)e * e;
            g = e;
        } else {
            total += (double)a - 0.5;
            g = e > 0.0f ? 1.0f : -1.0f;
        }
        if (dout)
            dout[i] = scale * g;
    }
    return total;
}
