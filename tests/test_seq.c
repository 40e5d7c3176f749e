/* Sequence layers (core/engine/layers/seq.c) and the tokenizer of text datasets: each layer's
 * gradients against finite differences, through small models built from specs on token ids with
 * padding; padding that gives nothing and gets no gradient; conv1d against direct loops; words,
 * lower-casing and invalid UTF-8. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/model.h"
#include "nnlab/spec.h"
#include "tap.h"

#define N     4 /* documents */
#define L     7 /* tokens each */
#define VOCAB 9 /* ids 0 (padding) .. 8 */
#define BOUND 2e-2

/* Token ids: documents of 7, 4, 1 and 0 words, padding after. */
static void tokens(float *x)
{
    static const int lens[N] = {7, 4, 1, 0};
    for (int s = 0; s < N; s++)
        for (int t = 0; t < L; t++)
            x[s * L + t] = t < lens[s] ? (float)(1 + (s * 5 + t * 3) % (VOCAB - 1)) : 0.0f;
}

static struct nl_model *build(const char *text, int classes)
{
    struct nl_spec *spec;
    struct nl_model *m = NULL;
    struct nl_error err = {0};

    if (nl_spec_parse(&spec, text, "test", NULL, NULL, &err) < 0) {
        diag("%s", err.msg);
        return NULL;
    }
    spec->vocab = VOCAB;
    if (nl_model_build(&m, spec, (struct nl_shape){1, 1, L}, classes, &err) < 0)
        diag("%s", err.msg);
    nl_spec_free(spec);
    if (m)
        nl_model_init_params(m, 7);
    return m;
}

/* sum(logits * r), by a forward in training mode: backward reads what such a forward keeps (a
 * max pooling's indices); the models have no dropout or batchnorm for the mode to change. */
static double loss(struct nl_exec *x, const float *params, const float *in, const float *r, int k)
{
    const float *logits = nl_exec_forward(x, params, in, N, 1, NULL);
    double sum = 0;
    for (int i = 0; i < N * k; i++)
        sum += (double)logits[i] * r[i];
    return sum;
}

/* Every parameter's gradient against central differences; returns the worst relative error
 * and fills *pad_grad with the largest |gradient| of the embedding's padding row. */
static double check_model(const char *text, double h, double *pad_grad)
{
    const int k = 3;
    struct nl_model *m = build(text, k);
    struct nl_exec *x = NULL;
    struct nl_error err = {0};
    float in[N * L], r[N * 3];
    double worst = 0;

    *pad_grad = INFINITY;
    if (!m || nl_exec_new(&x, m, N, &err) < 0) {
        diag("%s", err.msg);
        nl_model_free(m);
        return INFINITY;
    }
    tokens(in);
    for (int i = 0; i < N * k; i++)
        r[i] = (float)((i * 7 % 11) - 5) / 5.0f;
    float *grad = nl_calloc(m->nreduce + 1, sizeof *grad);
    loss(x, m->params, in, r, k);
    nl_exec_backward(x, m->params, r, grad);
    for (size_t i = 0; i < m->ntrainable; i++) {
        float saved = m->params[i];
        m->params[i] = saved + (float)h;
        double lp = loss(x, m->params, in, r, k);
        m->params[i] = saved - (float)h;
        double lm = loss(x, m->params, in, r, k);
        m->params[i] = saved;
        double fd = (lp - lm) / (2 * h);
        double e = fabs(fd - grad[i]) / fmax(fmax(fabs(fd), fabs(grad[i])), 1e-2);
        if (e > worst || isnan(e))
            worst = isnan(e) ? INFINITY : e;
    }
    /* The embedding is the first layer: its row 0 (padding) is params [0, dim). */
    const struct nl_layer *emb = &m->layers[0];
    *pad_grad = 0;
    for (int d = 0; d < emb->units; d++)
        *pad_grad = fmax(*pad_grad, fabs(grad[emb->param_offset + (size_t)d]));
    nl_free(grad);
    nl_exec_free(x);
    nl_model_free(m);
    return worst;
}

static void test_gradients(void)
{
    static const struct {
        const char *what, *spec;
    } cases[] = {
        {"embedding + globalavgpool1d (masked)",
         "embedding 4\nglobalavgpool1d in=embedding1,input\ndense N\n"},
        {"embedding + globalmaxpool1d (masked)",
         "embedding 4\nglobalmaxpool1d in=embedding1,input\ndense N\n"},
        {"embedding + globalavgpool1d (unmasked)", "embedding 3\nglobalavgpool1d\ndense N\n"},
        {"conv1d 4 3 pad=1 + masked max", "embedding 3\nconv1d 4 3 pad=1\n"
                                          "globalmaxpool1d in=conv1d1,input\ndense N\n"},
        {"conv1d 5 2 stride=2", "embedding 3\nconv1d 5 2 stride=2\nflatten\ndense N\n"},
        {"conv1d 5 2 + maxpool1d 2", "embedding 3\nconv1d 5 2\nmaxpool1d 2\nflatten\ndense N\n"},
        {"conv1d without bias + tanh", "embedding 2\nconv1d 3 3 bias=no\ntanh\ndense N\n"},
        {"lstm, last state", "embedding 3\nlstm 4\ndense N\n"},
        {"lstm, last state, masked", "e: embedding 3\nlstm 4 in=e,input\ndense N\n"},
        {"lstm, all states, masked", "e: embedding 2\nlstm 3 states=all in=e,input\n"
                                     "flatten\ndense N\n"},
        {"gru, last state", "embedding 3\ngru 4\ndense N\n"},
        {"gru, all states", "embedding 2\ngru 3 states=all\nflatten\ndense N\n"},
        {"gru, last state, masked", "e: embedding 3\ngru 4 in=e,input\ndense N\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double pad;
        /* A small step where a max may switch between close values; a larger one for the smooth
         * recurrences, whose float sums are longer. */
        double e = check_model(
            cases[i].spec,
            strstr(cases[i].spec, "lstm") || strstr(cases[i].spec, "gru") ? 3e-3 : 1e-3, &pad);
        ok(e <= BOUND, "%s: parameter gradients match finite differences (worst %.2g)",
           cases[i].what, e);
        ok(pad == 0, "%s: the padding row gets no gradient", cases[i].what);
    }
}

/* Padding gives nothing: the masked average equals the mean over the words alone, whatever
 * the padding row holds. */
static void test_padding(void)
{
    struct nl_model *m = build("e: embedding 3\np: globalavgpool1d in=e,input\ndense N\n", 2);
    struct nl_exec *x = NULL;
    struct nl_error err = {0};
    float in[N * L];

    if (!m || nl_exec_new(&x, m, N, &err) < 0) {
        ok(0, "model builds: %s", err.msg);
        nl_model_free(m);
        return;
    }
    tokens(in);
    for (int d = 0; d < 3; d++)
        m->params[d] = 100.0f; /* row 0: never read */
    nl_exec_forward(x, m->params, in, N, 0, NULL);
    /* Recompute the pooled vector of document 1 (4 words) by hand from the logits' input:
     * compare logits against a model whose padding row is 0. */
    float logits1[N * 2], logits2[N * 2];
    memcpy(logits1, nl_exec_forward(x, m->params, in, N, 0, NULL), sizeof logits1);
    for (int d = 0; d < 3; d++)
        m->params[d] = 0.0f;
    memcpy(logits2, nl_exec_forward(x, m->params, in, N, 0, NULL), sizeof logits2);
    int same = 1;
    for (int i = 0; i < N * 2; i++)
        same &= logits1[i] == logits2[i];
    ok(same, "the padding row's values change nothing");
    /* An empty document pools to 0: its logits are the dense bias alone (0 at init). */
    ok(logits2[3 * 2] == 0.0f && logits2[3 * 2 + 1] == 0.0f, "an empty document pools to zero");
    nl_exec_free(x);
    nl_model_free(m);
}

/* conv1d (the conv lowering) against direct loops of PyTorch's Conv1d. */
static void test_conv1d_naive(void)
{
    struct nl_model *m =
        build("e: embedding 3\nc: conv1d 4 3 stride=2 pad=1\nflatten\ndense N\n", 2);
    struct nl_exec *x = NULL;
    struct nl_error err = {0};
    float in[N * L];

    if (!m || nl_exec_new(&x, m, N, &err) < 0) {
        ok(0, "model builds: %s", err.msg);
        nl_model_free(m);
        return;
    }
    tokens(in);
    const struct nl_layer *c = &m->layers[1];
    is_int(c->params[0].ndim, 3, "conv1d's weight has three dimensions");
    ok(c->params[0].dims[0] == 4 && c->params[0].dims[1] == 3 && c->params[0].dims[2] == 3,
       "as [F, C, K]");
    const int lo = (L + 2 - 3) / 2 + 1;
    is_int(c->out.w, lo, "output length (L + 2P - K) / S + 1");
    /* Run to the conv's output: a model without the head. */
    struct nl_model *m2 = build("e: embedding 3\nc: conv1d 4 3 stride=2 pad=1\n", 4 * lo);
    if (!m2) {
        ok(0, "the headless model builds");
    } else {
        struct nl_exec *x2 = NULL;
        memcpy(m2->params, m->params, m2->nparams * sizeof *m2->params);
        (void)nl_exec_new(&x2, m2, N, &err);
        /* The last layer's output is what forward returns. */
        const float *out = x2 ? nl_exec_forward(x2, m2->params, in, N, 0, NULL) : NULL;
        const float *emb = m2->params + m2->layers[0].param_offset;
        const float *w = m2->params + m2->layers[1].param_offset;
        const float *b = w + m2->layers[1].params[1].offset;
        double worst = out ? 0 : INFINITY;
        for (int s = 0; s < N && out; s++)
            for (int f = 0; f < 4; f++)
                for (int t = 0; t < lo; t++) {
                    double acc = b[f];
                    for (int ch = 0; ch < 3; ch++)
                        for (int j = 0; j < 3; j++) {
                            int pos = t * 2 - 1 + j;
                            if (pos < 0 || pos >= L)
                                continue;
                            int id = (int)in[s * L + pos];
                            double e = id ? emb[id * 3 + ch] : 0.0;
                            acc += w[(f * 3 + ch) * 3 + j] * e;
                        }
                    worst = fmax(worst, fabs(acc - out[(s * 4 + f) * lo + t]));
                }
        ok(worst < 1e-5, "conv1d matches direct loops (worst %.2g)", worst);
        nl_exec_free(x2);
        nl_model_free(m2);
    }
    nl_exec_free(x);
    nl_model_free(m);
}

struct words {
    char buf[512];
    int n;
};

static void collect(void *ud, const char *w, size_t n)
{
    struct words *ws = ud;
    size_t len = strlen(ws->buf);
    snprintf(ws->buf + len, sizeof ws->buf - len, "%s%.*s", ws->n++ ? "|" : "", (int)n, w);
}

static void test_words(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"Hello, World! It's 2024.", "hello|world|it|s|2024"},
        {"ÉCOLE Straße İstanbul", "école|straße|istanbul"},
        {"ΟΔΥΣΣΕΥΣ Ἀθῆναι ΆΈΉ", "οδυσσευσ|ἀθῆναι|άέή"},
        {"ПРИВЕТ, мир! Ёж", "привет|мир|ёж"},
        {"a—b…c “quoted” 😀emoji", "a|b|c|quoted|emoji"},
        {"  \t\n", ""},
        {"日本語のテキスト", "日本語のテキスト"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct words ws = {{0}, 0};
        size_t bad = nl_text_words(cases[i].text, strlen(cases[i].text), collect, &ws);
        is_int((long)bad, 0, "valid UTF-8: %s", cases[i].want);
        is_str(ws.buf, cases[i].want, "words of case %zu", i + 1);
    }
    struct words ws = {{0}, 0};
    is_int((long)nl_text_words("ok \xc3\x28 no", 8, collect, &ws), 4,
           "an invalid sequence is found at its byte (1-based)");
    is_int((long)nl_text_words("\xed\xa0\x80", 3, collect, &ws), 1, "a surrogate is invalid");
    is_int((long)nl_text_words("\xc0\xaf", 2, collect, &ws), 1, "an overlong form is invalid");
}

/* Raw text to a sample: the dataset's vocabulary, its length, and which end it keeps. */
static void test_sample_from_text(void)
{
    char *words[4] = {"<pad>", "<unk>", "a", "b"};
    struct nl_dataset d = {.name = "t", .shape = {1, 1, 3}, .nvocab = 4, .vocab = words};
    struct nl_error err = {0};
    float x[3];
    int unknown = -1;

    ok(nl_dataset_sample_from_text(&d, "B a, b A x", 10, x, &unknown, &err) == 0 && x[0] == 3 &&
           x[1] == 2 && x[2] == 3 && unknown == 1,
       "the first words are kept (3 2 3), one unknown");
    d.keep_end = 1;
    ok(nl_dataset_sample_from_text(&d, "B a, b A x", 10, x, NULL, &err) == 0 && x[0] == 3 &&
           x[1] == 2 && x[2] == 1,
       "--keep end keeps the last words (3 2 1)");
    ok(nl_dataset_sample_from_text(&d, "a", 1, x, NULL, &err) == 0 && x[0] == 2 && x[1] == 0 &&
           x[2] == 0,
       "a short text is padded after its words");
    is_int(nl_dataset_sample_from_text(&d, "a \xff", 3, x, NULL, &err), NL_EFORMAT,
           "invalid UTF-8 is refused");
    like(err.msg, "byte 3", "naming the byte");
    d.nvocab = 0;
    ok(nl_dataset_sample_from_text(&d, "a", 1, x, NULL, &err) < 0, "a dataset without vocabulary");
}

int main(void)
{
    test_sample_from_text();
    test_gradients();
    test_padding();
    test_conv1d_naive();
    test_words();
    return done_testing();
}
