/* ONNX export (core/formats/onnx.c, `nnlab export RUN FILE.onnx`): the files pass onnx.checker
 * (full) and strict shape inference of Debian's python3-onnx, and OpenCV's dnn module
 * (python3-opencv) runs them to the same top-1 class and probabilities within 1e-4 of nnlab's:
 *   - lenet, resnet8, mobilenet-tiny, resnet18 and mobilenet_v2, each trained one epoch on a
 *     small RGB PNG tree (3 classes, 32x32) through the command line, exported, and compared with
 *     `nnlab predict` on every image of the tree (tests/onnx_check.py images);
 *   - a spec that uses every layer kind (leakyrelu, relu6, grouped convolution, both pools,
 *     softmax over a plane, concat, gelu, add, tanh, flatten, dense without bias, batchnorm on
 *     vectors, dropout, a convolution reading a vector, globalavgpool, sigmoid) with random
 *     weights and statistics, exported in process and compared with nnlab's forward pass on a
 *     batch (tests/onnx_check.py raw);
 *   - a layer of a kind with no ONNX form is refused, naming the layer and kind, and no file is
 *     left behind.
 * Skips when /usr/bin/python3 lacks onnx, cv2, numpy or PIL. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/layer.h"
#include "nnlab/model.h"
#include "nnlab/onnx.h"
#include "nnlab/rng.h"
#include "nnlab/spec.h"
#include "nnlab_cli.h"
#include "tap.h"

static char script[512];

/* Runs cmd after flushing stdout, so that its '# ' lines follow the TAP lines before them. */
static int run(const char *cmd)
{
    fflush(stdout);
    return system(cmd);
}

static void test_shipped_models(void)
{
    static const char *const models[] = {"lenet", "resnet8", "mobilenet-tiny", "resnet18",
                                         "mobilenet_v2"};
    enum { NMODELS = sizeof models / sizeof models[0] };
    char cmd[4096], path[400];
    size_t len;

    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' tree '%s/tree'", script, dir);
    ok(run(cmd) == 0, "PIL wrote an RGB PNG tree");
    is_int(nnlab("import rgb '%s/tree' --test 0.25 --quiet", dir), 0, "imported: %s", errtext);
    is_int(nnlab("summary resnet18 --data rgb --freeze-up-to layer4.1.bn2"), 0,
           "summary resnet18 --data rgb: %s", errtext);
    like(out, "layer2.0.downsample.1", "lists torchvision's module paths");
    like(out, "11187651 parameters, 1539 trainable", "with the head for 3 classes trainable");
    len =
        (size_t)snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' images '%s/results'", script, dir);
    for (int i = 0; i < NMODELS; i++) {
        const char *m = models[i];
        is_int(nnlab("train --data rgb --model %s --epochs 1 --batch 9 --lr 0.001 --name %s-r "
                     "--quiet",
                     m, m),
               0, "%s: trained one epoch: %s", m, errtext);
        is_int(nnlab("export %s-r '%s/%s.onnx'", m, dir, m), 0, "%s: exported: %s", m, errtext);
        like(out, "(ONNX, opset 10)", "%s: says ONNX", m);
        is_int(nnlab("--json predict %s-r '%s'/tree/*/*.png --top 3", m, dir), 0,
               "%s: nnlab predict on every image: %s", m, errtext);
        snprintf(path, sizeof path, "%s/%s.json", dir, m);
        FILE *f = fopen(path, "w");
        ok(f && fputs(out, f) >= 0, "%s: predictions kept", m);
        if (f)
            fclose(f);
        len += (size_t)snprintf(cmd + len, sizeof cmd - len, " '%s/%s.onnx' '%s'", dir, m, path);
    }
    run(cmd);
    snprintf(path, sizeof path, "%s/results", dir);
    char results[256] = "", *line = results;
    slurp(path, results, sizeof results);
    for (int i = 0; i < NMODELS; i++) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        is_str(line, "ok",
               "%s: checker and shape inference pass; cv2.dnn gives nnlab predict's top-1 and "
               "probabilities within 1e-4",
               models[i]);
        line = nl ? nl + 1 : line + strlen(line);
    }
    is_int(nnlab("export lenet-r '%s/nope/lenet.onnx'", dir), 1, "export into a missing folder");
    like(errtext, "nope/lenet.onnx", "names the file");
}

static const char every_kind[] = "c1: conv 4 3x3 pad=1\n"
                                 "bn: batchnorm\n"
                                 "lr: leakyrelu 0.1\n"
                                 "g: conv 4 3x3 pad=1 groups=2\n"
                                 "r6: relu6\n"
                                 "mp: maxpool 2\n"
                                 "ap: avgpool 3 stride=1 pad=1\n"
                                 "sm: softmax\n"
                                 "cat: concat in=mp,sm\n"
                                 "ge: gelu\n"
                                 "ad: add in=ge,cat\n"
                                 "th: tanh\n"
                                 "fl: flatten\n"
                                 "d1: dense 16 bias=no\n"
                                 "b1: batchnorm\n"
                                 "dr: dropout 0.3\n"
                                 "rl: relu\n"
                                 "cv: conv 8 1x1\n"
                                 "gp: globalavgpool in=th\n"
                                 "s2: add in=cv,gp\n"
                                 "sg: sigmoid\n"
                                 "out: dense N\n";

enum { C = 3, H = 8, W = 8, BATCH = 4, CLASSES = 5 };

static void test_every_kind(void)
{
    struct nl_error err = {0};
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;
    struct nl_exec *x = NULL;
    struct nl_rng rng;
    const float mean[C] = {0.4f, 0.5f, 0.3f}, std[C] = {0.2f, 0.25f, 0.3f};
    const size_t sample = (size_t)C * H * W;
    float pixels[BATCH * C * H * W], in[BATCH * C * H * W], probs[BATCH * CLASSES];
    char path[256], cmd[2048];

    if (nl_spec_parse(&spec, every_kind, "every-kind", NULL, NULL, &err) < 0 ||
        nl_model_build(&m, spec, (struct nl_shape){C, H, W}, CLASSES, &err) < 0 ||
        nl_exec_new(&x, m, BATCH, &err) < 0) {
        ok(0, "every-kind model: %s", err.msg);
        nl_spec_free(spec);
        nl_model_free(m);
        return;
    }
    nl_spec_free(spec);
    nl_model_init_params(m, 7);
    nl_rng_seed(&rng, 11);
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        if (strcmp(l->ops->kind, "batchnorm") != 0)
            continue;
        float *w = m->params + l->param_offset;
        for (size_t k = 0; k < l->params[0].count; k++) {
            w[l->params[1].offset + k] = (float)(nl_rng_uniform(&rng) - 0.5);
            w[l->params[2].offset + k] = (float)(nl_rng_uniform(&rng) - 0.5);
            w[l->params[3].offset + k] = (float)(0.5 + nl_rng_uniform(&rng));
        }
    }
    for (size_t i = 0; i < sizeof pixels / sizeof pixels[0]; i++) {
        pixels[i] = (float)nl_rng_below(&rng, 256);
        int c = (int)((i % sample) / ((size_t)H * W));
        in[i] = (pixels[i] * (1.0f / 255.0f) - mean[c]) / std[c]; /* as the dataset does */
    }
    nl_softmax(probs, nl_exec_forward(x, m->params, in, BATCH, 0, &rng), BATCH, CLASSES);

    static const char *const names[CLASSES] = {"a", "b", "c", "d", "e"};
    struct nl_onnx_opts o = {.nnorm = C,
                             .mean = mean,
                             .std = std,
                             .scale = 1.0f / 255.0f,
                             .class_names = names,
                             .producer_version = "test",
                             .doc = "every kind"};
    snprintf(path, sizeof path, "%s/every.onnx", dir);
    is_int(nl_onnx_save(m, &o, path, &err), 0, "every kind exports: %s", err.msg);
    char pin[256], pout[256];
    snprintf(pin, sizeof pin, "%s/every.input", dir);
    snprintf(pout, sizeof pout, "%s/every.probs", dir);
    FILE *f = fopen(pin, "wb"), *g2 = fopen(pout, "wb");
    ok(f && g2 && fwrite(pixels, sizeof pixels, 1, f) == 1 &&
           fwrite(probs, sizeof probs, 1, g2) == 1,
       "batch and probabilities written");
    if (f)
        fclose(f);
    if (g2)
        fclose(g2);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' raw '%s' '%s' %d %d %d '%s'", script, path,
             pin, C, H, W, pout);
    ok(run(cmd) == 0,
       "every kind: checker and shape inference pass; cv2.dnn gives nnlab's probabilities");

    /* A kind with no ONNX form: refused by name, nothing written. */
    struct nl_layer_ops mystery = *m->layers[2].ops;
    mystery.kind = "mystery";
    m->layers[2].ops = &mystery;
    snprintf(path, sizeof path, "%s/refused.onnx", dir);
    is_int(nl_onnx_save(m, &o, path, &err), NL_EINVAL, "a kind with no ONNX form: NL_EINVAL");
    like(err.msg, "layer 'lr' (line 3): kind 'mystery' has no ONNX form", "names layer and kind");
    ok(access(path, F_OK) != 0, "and writes no file");
    m->layers[2].ops = m->layers[1].ops; /* any kind with an ONNX form; the name is the point */
    snprintf(m->layers[2].name, sizeof m->layers[2].name, "c1.weight");
    is_int(nl_onnx_save(m, &o, path, &err), NL_EINVAL, "a layer named as a parameter: refused");
    like(err.msg, "layer 'c1.weight' is named as a parameter of another layer", "says so");
    snprintf(m->layers[2].name, sizeof m->layers[2].name, "logits");
    is_int(nl_onnx_save(m, &o, path, &err), NL_EINVAL, "a layer named logits: refused");
    like(err.msg, "layer 'logits' is named as logits", "says so");
    ok(access(path, F_OK) != 0, "and no file");
    struct nl_onnx_opts bad = o;
    bad.nnorm = 1;
    is_int(nl_onnx_save(m, &bad, path, &err), NL_EINVAL, "normalisation of the wrong width");
    nl_exec_free(x);
    nl_model_free(m);
}

int main(void)
{
    const char *root = getenv("NNLAB_SOURCE_ROOT");

    if (system("/usr/bin/python3 -c 'import onnx, cv2, numpy, PIL' >/dev/null 2>&1") != 0)
        skip_all("/usr/bin/python3 lacks onnx, cv2, numpy or PIL (Debian's python3-onnx, "
                 "python3-opencv, python3-numpy, python3-pil)");
    snprintf(script, sizeof script, "%s/tests/onnx_check.py", root ? root : ".");
    nnlab_cli_setup("onnx", "nnlab.db");

    test_every_kind();
    test_shipped_models();

    nnlab_cli_cleanup();
    return done_testing();
}
