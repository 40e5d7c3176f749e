/* Text models against PyTorch: tests/text_models.py (run with Debian's /usr/bin/python3) writes
 * state_dicts of nn.Embedding, nn.Conv1d, nn.LSTM and nn.GRU models with PyTorch's own names and
 * layouts, a batch of token ids with padding, and PyTorch's logits; nnlab builds the same models
 * from specs, loads the files with no renaming, and gives the same logits within 1e-4. A model
 * exported by nnlab loads back into a fresh one with the same logits. Skips when
 * /usr/bin/python3 lacks torch. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/model.h"
#include "nnlab/safetensors.h"
#include "nnlab/spec.h"
#include "tap.h"

#define V 50
#define L 12
#define N 4
#define K 3

static char dir[64];

static int read_floats(const char *name, float *x, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(x, sizeof *x, n, f) : 0;
    if (f)
        fclose(f);
    return got == n ? 0 : -1;
}

static struct nl_model *build(const char *spec_text)
{
    struct nl_spec *spec;
    struct nl_model *m = NULL;
    struct nl_error err = {0};
    if (nl_spec_parse(&spec, spec_text, "test", NULL, NULL, &err) < 0) {
        diag("%s", err.msg);
        return NULL;
    }
    spec->vocab = V;
    if (nl_model_build(&m, spec, (struct nl_shape){1, 1, L}, K, &err) < 0)
        diag("%s", err.msg);
    nl_spec_free(spec);
    return m;
}

static double worst_diff(struct nl_model *m, const float *tokens, const float *want)
{
    struct nl_exec *x = NULL;
    struct nl_error err = {0};
    double worst = 0;
    if (nl_exec_new_forward(&x, m, N, &err) < 0) {
        diag("%s", err.msg);
        return INFINITY;
    }
    const float *logits = nl_exec_forward(x, m->params, tokens, N, 0, NULL);
    for (int i = 0; i < N * K; i++)
        worst = fmax(worst, fabs((double)logits[i] - want[i]));
    nl_exec_free(x);
    return worst;
}

static void check(const char *name, const char *spec_text, const float *tokens)
{
    char path[256], out[256];
    float want[N * K];
    struct nl_error err = {0};
    struct nl_model *m = build(spec_text);

    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    snprintf(out, sizeof out, "%s.logits", name);
    if (!m || read_floats(out, want, N * K) < 0) {
        ok(0, "%s: model and PyTorch's logits", name);
        nl_model_free(m);
        return;
    }
    int rc = nl_safetensors_load(m, path, 0, NULL, NULL, NULL, &err);
    ok(rc == 0, "%s: PyTorch's state_dict loads by its own names", name);
    if (rc) {
        diag("%s", err.msg);
        nl_model_free(m);
        return;
    }
    double e = worst_diff(m, tokens, want);
    ok(e <= 1e-4, "%s: the logits match PyTorch's (worst difference %.2g)", name, e);

    /* Export and load back into a fresh model. */
    struct nl_model *m2 = build(spec_text);
    snprintf(out, sizeof out, "%s/%s.out.safetensors", dir, name);
    rc = m2 ? nl_safetensors_save(m, out, &err) : -1;
    if (rc == 0)
        rc = nl_safetensors_load(m2, out, 0, NULL, NULL, NULL, &err);
    ok(rc == 0 && worst_diff(m2, tokens, want) <= 1e-4, "%s: exported and loaded back", name);
    nl_model_free(m2);
    nl_model_free(m);
}

int main(void)
{
    char cmd[512];
    const char *root = getenv("NNLAB_SOURCE_ROOT");
    float tokens[N * L];

    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
        skip_all("/usr/bin/python3 has no torch (Debian's python3-torch)");
    snprintf(dir, sizeof dir, "/tmp/nnlab-texttorch-XXXXXX");
    if (!mkdtemp(dir))
        skip_all("cannot make a temporary directory: %s", strerror(errno));
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/text_models.py' '%s'", root ? root : ".",
             dir);
    ok(system(cmd) == 0, "PyTorch wrote the text models");
    if (read_floats("tokens", tokens, N * L) < 0)
        skip_all("no tokens from tests/text_models.py");

    /* The shipped embedbag and textcnn, as data/models has them. */
    check("embedbag", nl_spec_shipped_text("embedbag"), tokens);
    check("textcnn", nl_spec_shipped_text("textcnn"), tokens);
    check("lstm", "embed: embedding 16\nrnn: lstm 8\nfc: dense N\n", tokens);
    check("lstm_packed", "embed: embedding 16\nrnn: lstm 8 in=embed,input\nfc: dense N\n", tokens);
    check("gru_packed", "embed: embedding 16\nrnn: gru 8 in=embed,input\nfc: dense N\n", tokens);
    check("gru_all",
          "embed: embedding 16\nrnn: gru 8 states=all in=embed,input\n"
          "pool: globalmaxpool1d in=rnn,input\nfc: dense N\n",
          tokens);

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
