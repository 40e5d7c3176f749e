/* Layers for sequences of tokens: "embedding", "globalavgpool1d", "globalmaxpool1d", "conv1d" and
 * "maxpool1d". A sequence of L steps with C features is (C, 1, L), as PyTorch's Conv1d reads
 * (N, C, L); the model's input of a text dataset is (1, 1, L) token ids (held as floats).
 *
 * embedding DIM: weight [V, DIM] as PyTorch's nn.Embedding (V, the vocabulary size, from the
 *   dataset). in (n, 1, 1, L) ids; out (n, DIM, 1, L): out[:, t] = weight[id_t], and 0 where
 *   id_t is 0 (padding), which gets no gradient: row 0 is never read nor written, as
 *   nn.Embedding(padding_idx=0) whose row 0 is zero. An id outside [0, V) reads as 1 (the
 *   out-of-vocabulary token); the datasets' loader refuses such ids already. No din: ids are not
 *   differentiable. Backward marks the rows it adds to in nl_bwd.rows when given, so that the
 *   trainer reduces, updates and clears only those rows of the table's gradient.
 * globalavgpool1d, globalmaxpool1d: in (n, C, 1, L) [, tokens (n, 1, 1, L)]; out (n, C, 1, 1),
 *   the mean or maximum over the steps. With the tokens as second input (in=x,input) the steps
 *   whose token is padding (id 0) are left out; a document with no token gives 0. max's aux: the
 *   chosen step per (sample, channel), int32, -1 for none.
 * conv1d FILTERS K: weight [F, C, K] and bias [F] as nn.Conv1d; stride=S, pad=P (both ends).
 *   It is conv (core/engine/layers/conv.c) on (C, 1, L) with a 1 x K window: the same floats, with
 *   PyTorch's three-dimensional weight shape.
 * maxpool1d K: maxpool with a 1 x K window (stride K unless given).
 * embed-columns DIM: a table's categorical columns of many levels (see the top of
 *   core/import/csv.c); K, the embedded columns, and R, their table's rows, come from the dataset
 *   (nl_spec.embed_columns, embed_rows) or from columns=K vocab=R. in (n, F) (any shape, read
 *   flat): F - K features, then K row ids (integers held as floats, not standardised) into one
 *   table weight [R, DIM] that the K columns share, each column its own block of rows; out
 *   (n, F - K + K * DIM, 1, 1): the features as they are, then each id's row, in column order. An
 * id that is not an integer in [0, R) reads row 0. din: the features' gradient passes through; the
 * ids get none. Backward adds each row's gradient to dw and marks it in nl_bwd.rows when given. */
#include <string.h>

#include "layers.h"
#include "nnlab/kernels.h"

static int check_sequence(const struct nl_layer *l, struct nl_error *err)
{
    if (l->in[0].h != 1)
        return nl__layer_fail(l, err,
                              "%s takes a sequence (C x 1 x L), not %dx%dx%d (an embedding "
                              "gives one)",
                              l->ops->kind, l->in[0].c, l->in[0].h, l->in[0].w);
    return 0;
}

/* ---- embedding ------------------------------------------------------------------------------ */

static int embedding_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    if (l->units <= 0)
        return nl__layer_fail(l, err, "embedding needs a positive dimension, not %d", l->units);
    if (l->vocab < 2)
        return nl__layer_fail(l, err,
                              "embedding needs the vocabulary size of a text dataset (train on "
                              "one imported from text, or give vocab=V)");
    if (l->in[0].c != 1 || l->in[0].h != 1)
        return nl__layer_fail(l, err,
                              "embedding reads token ids (1x1xL, a text dataset's samples), not "
                              "%dx%dx%d",
                              l->in[0].c, l->in[0].h, l->in[0].w);
    if ((size_t)l->vocab * (size_t)l->units > (1ull << 34))
        return nl__layer_fail(l, err, "embedding of %d x %d is too large", l->vocab, l->units);
    l->out = (struct nl_shape){l->units, 1, l->in[0].w};
    int dims[4] = {l->vocab, l->units};
    /* Xavier over (1, DIM): one row is read per token. */
    nl__layer_add_param(l, "weight", 2, dims, 1, l->units, l->init);
    return 0;
}

static int token_id(float v, int vocab)
{
    int id = (int)v;
    return id >= 0 && id < vocab && (float)id == v ? id : 1;
}

static void embedding_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    const int len = l->in[0].w, dim = l->units, vocab = l->vocab;

    /* Blocks of BLOCK steps: their rows are gathered, then written out channel after channel,
     * BLOCK contiguous floats at a time (a transpose of (BLOCK, DIM) into (DIM, BLOCK)). */
    enum { BLOCK = 16 };
    for (int s = 0; s < f->n; s++) {
        const float *ids = f->in[0] + (size_t)s * len;
        float *out = f->out + (size_t)s * dim * len;
        for (int t0 = 0; t0 < len; t0 += BLOCK) {
            /* The block's steps that are not padding: nk of them, step t0 + at[k], row rows[k]. */
            const float *rows[BLOCK];
            int at[BLOCK], nk = 0;
            int nb = len - t0 < BLOCK ? len - t0 : BLOCK;
            for (int j = 0; j < nb; j++) {
                int id = token_id(ids[t0 + j], vocab);
                if (id == 0) {
                    for (int d = 0; d < dim; d++)
                        out[(size_t)d * len + t0 + j] = 0.0f;
                    continue;
                }
                rows[nk] = f->w + (size_t)id * dim;
                at[nk++] = j;
            }
            if (nk == BLOCK) /* no padding: a fixed count the compiler unrolls */
                for (int d = 0; d < dim; d++) {
                    float *o = out + (size_t)d * len + t0;
                    for (int k = 0; k < BLOCK; k++)
                        o[k] = rows[k][d];
                }
            else
                for (int d = 0; d < dim; d++) {
                    float *o = out + (size_t)d * len + t0;
                    for (int k = 0; k < nk; k++)
                        o[at[k]] = rows[k][d];
                }
        }
    }
}

static void embedding_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    if (b->dw)
        nl_embedding_backward(b->dw, b->rows, b->dout, b->in[0], b->n, l->in[0].w, l->units,
                              l->vocab);
}

const struct nl_layer_ops nl__embedding_ops = {
    .kind = "embedding",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = embedding_setup,
    .forward = embedding_forward,
    .backward = embedding_backward,
};

/* ---- global pooling over the steps ----------------------------------------------------------- */

static int gpool1d_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    rc = check_sequence(l, err);
    if (rc < 0)
        return rc;
    if (l->ninputs == 2 && (l->in[1].c != 1 || l->in[1].h != 1 || l->in[1].w != l->in[0].w))
        return nl__layer_fail(l, err,
                              "the second input must be the tokens (1x1x%d) that mark padding, "
                              "not %dx%dx%d; a sequence that changed length cannot be masked",
                              l->in[0].w, l->in[1].c, l->in[1].h, l->in[1].w);
    l->out = (struct nl_shape){l->in[0].c, 1, 1};
    l->scratch_fixed = (size_t)l->in[0].w; /* the steps' weights: 1 / count or 0 */
    if (strcmp(l->ops->kind, "globalmaxpool1d") == 0)
        l->aux_bytes = (size_t)l->in[0].c * sizeof(int32_t);
    return 0;
}

/* Whether step t of sample s counts: not padding, when the tokens are given. */
static int step_counts(const float *const *in, int ninputs, int s, int len, int t)
{
    return ninputs < 2 || in[1][(size_t)s * len + t] != 0.0f;
}

/* wt (len) = 1 where step t of sample s counts, else 0; returns how many count. */
static int step_weights(const float *const *in, int ninputs, int s, int len, float *wt)
{
    int count = 0;
    for (int t = 0; t < len; t++) {
        int v = step_counts(in, ninputs, s, len, t);
        wt[t] = (float)v;
        count += v;
    }
    return count;
}

static void gavg1d_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    const int c = l->in[0].c, len = l->in[0].w;
    float *wt = f->scratch;

    for (int s = 0; s < f->n; s++) {
        const float *x = f->in[0] + (size_t)s * c * len;
        int count = step_weights(f->in, l->ninputs, s, len, wt);
        for (int ch = 0; ch < c; ch++) {
            const float *row = x + (size_t)ch * len;
            float sum = 0.0f;
            for (int t = 0; t < len; t++)
                sum += row[t] * wt[t];
            f->out[(size_t)s * c + ch] = count ? sum / (float)count : 0.0f;
        }
    }
}

static void gavg1d_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    const int c = l->in[0].c, len = l->in[0].w;
    float *wt = b->scratch;

    if (!b->din[0])
        return;
    /* First writer (b->set): din is written, 0.0f + the term, the floats of adding the term to
     * zeros (a -0.0f term gives 0.0f) without the pass that would zero din first. */
    const int set = b->set & 1;
    for (int s = 0; s < b->n; s++) {
        float *dx = b->din[0] + (size_t)s * c * len;
        int count = step_weights(b->in, l->ninputs, s, len, wt);
        if (!count) {
            if (set)
                memset(dx, 0, (size_t)c * len * sizeof *dx);
            continue;
        }
        for (int ch = 0; ch < c; ch++) {
            float g = b->dout[(size_t)s * c + ch] / (float)count, *row = dx + (size_t)ch * len;
            if (set)
                for (int t = 0; t < len; t++)
                    row[t] = 0.0f + g * wt[t];
            else
                for (int t = 0; t < len; t++)
                    row[t] += g * wt[t];
        }
    }
}

static void gmax1d_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    const int c = l->in[0].c, len = l->in[0].w;

    for (int s = 0; s < f->n; s++) {
        const float *x = f->in[0] + (size_t)s * c * len;
        int32_t *arg = (int32_t *)f->aux + (size_t)s * c;
        for (int ch = 0; ch < c; ch++) {
            int best = -1;
            for (int t = 0; t < len; t++)
                if (step_counts(f->in, l->ninputs, s, len, t) &&
                    (best < 0 || x[(size_t)ch * len + t] > x[(size_t)ch * len + best]))
                    best = t;
            arg[ch] = best;
            f->out[(size_t)s * c + ch] = best < 0 ? 0.0f : x[(size_t)ch * len + best];
        }
    }
}

static void gmax1d_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    const int c = l->in[0].c, len = l->in[0].w;

    if (!b->din[0])
        return;
    for (int s = 0; s < b->n; s++) {
        const int32_t *arg = (const int32_t *)b->aux + (size_t)s * c;
        for (int ch = 0; ch < c; ch++)
            if (arg[ch] >= 0)
                b->din[0][(size_t)s * c * len + (size_t)ch * len + arg[ch]] +=
                    b->dout[(size_t)s * c + ch];
    }
}

const struct nl_layer_ops nl__globalavgpool1d_ops = {
    .kind = "globalavgpool1d",
    .min_inputs = 1,
    .max_inputs = 2,
    .setup = gpool1d_setup,
    .forward = gavg1d_forward,
    .backward = gavg1d_backward,
    .overwrites = 1,
};

const struct nl_layer_ops nl__globalmaxpool1d_ops = {
    .kind = "globalmaxpool1d",
    .min_inputs = 1,
    .max_inputs = 2,
    .setup = gpool1d_setup,
    .forward = gmax1d_forward,
    .backward = gmax1d_backward,
};

/* ---- conv1d and maxpool1d: the 2-D kinds on a 1 x K window ---------------------------------- */

/* Makes the window 1 x K (the spec gives K as K x K), with no stride or padding across rows. */
static int window_1d(struct nl_layer *l, struct nl_error *err)
{
    if (l->kh != 1 && l->kh != l->kw)
        return nl__layer_fail(l, err, "%s takes one window size K, not %dx%d", l->ops->kind, l->kh,
                              l->kw);
    l->kh = 1;
    l->sh = l->sw ? 1 : 0;
    l->ph = 0;
    return check_sequence(l, err);
}

static int conv1d_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc == 0)
        rc = window_1d(l, err);
    if (rc == 0)
        rc = nl__conv_ops.setup(l, err);
    if (rc < 0)
        return rc;
    /* PyTorch's Conv1d weight [F, C, K]: the same floats as [F, C, 1, K]. */
    struct nl_param *w = &l->params[0];
    w->ndim = 3;
    w->dims[2] = l->kw;
    w->dims[3] = 0;
    return 0;
}

static void conv1d_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    nl__conv_ops.forward(l, f);
}

static void conv1d_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    nl__conv_ops.backward(l, b);
}

const struct nl_layer_ops nl__conv1d_ops = {
    .kind = "conv1d",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = conv1d_setup,
    .forward = conv1d_forward,
    .backward = conv1d_backward,
};

static int maxpool1d_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc == 0)
        rc = window_1d(l, err);
    if (rc == 0)
        rc = nl__maxpool_ops.setup(l, err);
    return rc;
}

static void maxpool1d_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    nl__maxpool_ops.forward(l, f);
}

static void maxpool1d_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    nl__maxpool_ops.backward(l, b);
}

const struct nl_layer_ops nl__maxpool1d_ops = {
    .kind = "maxpool1d",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = maxpool1d_setup,
    .forward = maxpool1d_forward,
    .backward = maxpool1d_backward,
};

/* ---- embed-columns -------------------------------------------------------------------------- */

static int embedcols_setup(struct nl_layer *l, struct nl_error *err)
{
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    const size_t f = nl_shape_size(l->in[0]);
    if (l->units <= 0)
        return nl__layer_fail(l, err, "embed-columns needs a positive dimension, not %d", l->units);
    if (l->columns < 1 || (size_t)l->columns > f)
        return nl__layer_fail(l, err,
                              "embed-columns needs the embedded columns of a table dataset, 1 to "
                              "its %zu inputs (train on one, or give columns=K)",
                              f);
    if (l->vocab < 2)
        return nl__layer_fail(l, err,
                              "embed-columns needs the rows of a table dataset's embedded levels "
                              "(train on one, or give vocab=R)");
    const size_t out = f - (size_t)l->columns + (size_t)l->columns * (size_t)l->units;
    if (out > (1u << 30) || (size_t)l->vocab * (size_t)l->units > (1ull << 34))
        return nl__layer_fail(l, err, "embed-columns of %d x %d is too large", l->vocab, l->units);
    l->out = (struct nl_shape){(int)out, 1, 1};
    int dims[4] = {l->vocab, l->units};
    /* Xavier over (1, DIM): one row is read per column. */
    nl__layer_add_param(l, "weight", 2, dims, 1, l->units, l->init);
    return 0;
}

/* The row an id names; 0 (unknown) for anything else. */
static int column_row(float v, int rows)
{
    if (!(v >= 0.0f && v < (float)rows))
        return 0;
    int id = (int)v;
    return (float)id == v ? id : 0;
}

static void embedcols_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    const size_t in = nl_shape_size(l->in[0]), out = nl_shape_size(l->out);
    const int k = l->columns, dim = l->units;
    const size_t plain = in - (size_t)k;

    for (int s = 0; s < f->n; s++) {
        const float *x = f->in[0] + (size_t)s * in;
        float *y = f->out + (size_t)s * out;
        memcpy(y, x, plain * sizeof *y);
        for (int c = 0; c < k; c++)
            memcpy(y + plain + (size_t)c * dim,
                   f->w + (size_t)column_row(x[plain + c], l->vocab) * dim,
                   (size_t)dim * sizeof *y);
    }
}

static void embedcols_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    const size_t in = nl_shape_size(l->in[0]), out = nl_shape_size(l->out);
    const int k = l->columns, dim = l->units;
    const size_t plain = in - (size_t)k;

    for (int s = 0; s < b->n; s++) {
        const float *x = b->in[0] + (size_t)s * in;
        const float *g = b->dout + (size_t)s * out;
        if (b->din[0]) {
            float *dx = b->din[0] + (size_t)s * in;
            for (size_t i = 0; i < plain; i++)
                dx[i] += g[i];
        }
        if (!b->dw)
            continue;
        for (int c = 0; c < k; c++) {
            const int row = column_row(x[plain + c], l->vocab);
            float *dw = b->dw + (size_t)row * dim;
            const float *gc = g + plain + (size_t)c * dim;
            if (b->rows)
                b->rows[row] = 1;
            for (int d = 0; d < dim; d++)
                dw[d] += gc[d];
        }
    }
}

const struct nl_layer_ops nl__embedcols_ops = {
    .kind = "embed-columns",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = embedcols_setup,
    .forward = embedcols_forward,
    .backward = embedcols_backward,
};
