/* Fine-tuning on Fashion-MNIST, as the issue asks: a base model trained on classes 0-4, then
 * fine-tuned on classes 5-9 with its convolutions frozen and its head re-created. Checks that
 * the frozen weights are bit-identical afterwards, that a fine-tuning step is cheaper than a full
 * one (counted: layers backward runs and weight gradients it computes, and the floats the
 * optimizer and the reduction cover), and that accuracy on 5-9 reaches 0.90. Epoch times of
 * fine-tuning and of full training are printed as diagnostics, never asserted.
 *
 * The frozen-feature cache: the prefix an executor finds (dropout ends it; a trainable layer that
 * reads two frozen ones makes two feature blocks), the head's forward and backward from the
 * features against the whole model's, and fine-tuning with the cache in memory, in a file and
 * from a finished file against fine-tuning without it: the same weights. Epoch 1 (filling the
 * cache) against epoch 2 (reading it) is printed, never asserted.
 *
 * README's photo example at a small size, through the nnlab binary: a JPEG class tree
 * (tests/bench/jpeg_photos.py), torchvision's resnet18 state_dict (tests/torchvision_models.py),
 * import with shorter/center-crop and ImageNet normalisation, fine-tuning with --init
 * --replace-head --freeze-up-to layer4.1.bn2 (the cache said, and the same evaluation as with
 * --feature-cache off), per-class eval, ONNX export checked by onnx and run by OpenCV's dnn
 * against nnlab predict (tests/onnx_check.py). That part is skipped without Debian's
 * python3-torch, -torchvision, -onnx, -opencv and -pil.
 *
 * Needs /usr/share/datasets/fashion-mnist (or $NNLAB_FASHION); skips without it. Subsets keep it
 * to seconds: 10000 training images per half, two epochs each. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/kernels.h"
#include "nnlab/model.h"
#include "nnlab/safetensors.h"
#include "nnlab/spec.h"
#include "nnlab/store.h"
#include "nnlab/trainer.h"
#include "nnlab_cli.h"
#include "sh.h"
#include "tap.h"

#define PER_HALF 10000

static const char spec_text[] = "conv1: conv 16 5x5\n"
                                "pool1: maxpool 2\n"
                                "relu\n"
                                "conv2: conv 32 5x5\n"
                                "pool2: maxpool 2\n"
                                "relu\n"
                                "fc1: dense 128\n"
                                "relu\n"
                                "fc2: dense N\n";

/* The samples of d with labels in [lo, lo + 5), relabelled from 0, at most max per split. */
static struct nl_dataset *half(const struct nl_dataset *d, int lo, uint32_t max_train)
{
    struct nl_dataset *h = nl_calloc(1, sizeof *h);
    const size_t size = nl_shape_size(d->shape);

    h->name = nl_strdup(lo ? "fashion-5-9" : "fashion-0-4");
    h->source = nl_strdup(d->source);
    h->kind = nl_strdup(d->kind);
    h->shape = d->shape;
    h->dtype = d->dtype;
    h->nclasses = 5;
    h->class_names = nl_calloc(5, sizeof *h->class_names);
    for (int k = 0; k < 5; k++)
        h->class_names[k] = nl_strdup(d->class_names[lo + k]);
    h->nnorm = d->nnorm;
    h->mean = nl_calloc((size_t)d->nnorm, sizeof(float));
    h->std = nl_calloc((size_t)d->nnorm, sizeof(float));
    memcpy(h->mean, d->mean, (size_t)d->nnorm * sizeof(float));
    memcpy(h->std, d->std, (size_t)d->nnorm * sizeof(float));
    for (int s = 0; s < NL_NSPLITS; s++) {
        uint32_t n = 0, max = s == NL_TRAIN ? max_train : UINT32_MAX;
        uint8_t *x = nl_calloc((size_t)d->split[s].n * size + 1, 1);
        int32_t *y = nl_calloc((size_t)d->split[s].n + 1, sizeof *y);
        for (uint32_t i = 0; i < d->split[s].n && n < max; i++) {
            int label = d->split[s].y[i];
            if (label < lo || label >= lo + 5)
                continue;
            memcpy(x + (size_t)n * size, (const uint8_t *)d->split[s].x + (size_t)i * size, size);
            y[n++] = label - lo;
        }
        h->split[s].n = n;
        h->split[s].x = x;
        h->split[s].y = y;
    }
    return h;
}

static struct nl_model *build(const struct nl_dataset *d)
{
    struct nl_spec *spec;
    struct nl_model *m = NULL;
    struct nl_error err = {0};

    if (nl_spec_parse(&spec, spec_text, "finetune", NULL, NULL, &err) < 0 ||
        nl_model_build(&m, spec, d->shape, d->nclasses, &err) < 0)
        diag("build: %s", err.msg);
    nl_spec_free(spec);
    return m;
}

static struct nl_model *build_text(const char *text, struct nl_shape in, int nclasses)
{
    struct nl_spec *spec;
    struct nl_model *m = NULL;
    struct nl_error err = {0};

    if (nl_spec_parse(&spec, text, "prefix", NULL, NULL, &err) < 0 ||
        nl_model_build(&m, spec, in, nclasses, &err) < 0)
        diag("build: %s", err.msg);
    nl_spec_free(spec);
    return m;
}

/* The executor's prefix on small models, and the head from the features against the whole. */
static void check_prefix(void)
{
    const struct nl_shape in = {1, 12, 12};
    const int n = 3, classes = 5;
    struct nl_error err = {0};
    struct nl_exec *x = NULL;
    struct nl_rng rng;
    float *input = nl_alloc_floats((size_t)n * 144), dlogits[3 * 5];

    nl_rng_seed(&rng, 7);
    for (int i = 0; i < n * 144; i++)
        input[i] = (float)nl_rng_uniform(&rng) - 0.5f;
    for (int i = 0; i < n * classes; i++)
        dlogits[i] = (float)nl_rng_uniform(&rng) - 0.5f;

    /* Dropout ends the prefix: it draws anew every epoch. */
    struct nl_model *m =
        build_text("c1: conv 4 3x3\nr1: relu\nd: dropout 0.5\nfc: dense N\n", in, classes);
    const char *c1[] = {"c1"};
    nl_model_freeze(m, c1, 1, NULL, &err);
    nl_exec_new(&x, m, n, &err);
    int last;
    is_int((int)nl_exec_prefix(x), 4 * 10 * 10,
           "conv, relu, dropout, dense: the prefix's "
           "features are the relu's 400 floats");
    is_int(nl_exec_prefix_layers(x, &last), 2, "the prefix is conv and relu, dropout outside");
    nl_exec_free(x);
    nl_model_free(m);

    /* Nothing frozen: no prefix. */
    m = build_text("c1: conv 4 3x3\nr1: relu\nfc: dense N\n", in, classes);
    nl_exec_new(&x, m, n, &err);
    is_int((int)nl_exec_prefix(x), 0, "nothing frozen: no prefix");
    nl_exec_free(x);
    nl_model_free(m);

    /* A trainable layer and a merge read two frozen layers: two blocks of features. */
    m = build_text("c1: conv 4 3x3 pad=1\nr1: relu\nc2: conv 4 3x3 pad=1\n"
                   "t: conv 4 1x1 in=c2\ns: add in=t,r1\nfc: dense N\n",
                   in, classes);
    nl_model_init_params(m, 3);
    const char *two[] = {"c1", "c2"};
    nl_model_freeze(m, two, 2, NULL, &err);
    nl_exec_new(&x, m, n, &err);
    const size_t floats = nl_exec_prefix(x);
    is_int((int)floats, 2 * 4 * 144, "a residual head: the features are r1's and c2's outputs");
    float *feat = nl_alloc_floats((size_t)n * floats + 1), logits[3 * 5];
    float *g1 = nl_alloc_floats(m->nreduce), *g2 = nl_alloc_floats(m->nreduce);
    memcpy(logits, nl_exec_forward(x, m->params, input, n, 1, &rng), sizeof logits);
    nl_exec_backward(x, m->params, dlogits, g1);
    for (int s = 0; s < n; s++)
        nl_exec_features(x, s, feat + (size_t)s * floats);
    nl_exec_free(x);
    nl_exec_new(&x, m, n, &err);
    const float *head = nl_exec_forward_head(x, m->params, feat, n, 1, &rng);
    ok(memcmp(head, logits, sizeof logits) == 0,
       "the head from the features gives the whole model's logits, bit for bit");
    nl_exec_backward(x, m->params, dlogits, g2);
    ok(memcmp(g1, g2, m->nreduce * sizeof(float)) == 0,
       "and the same gradients (%zu floats), bit for bit", m->nreduce);
    nl_exec_free(x);
    nl_model_free(m);
    nl_free(feat);
    nl_free(g1);
    nl_free(g2);
    nl_free(input);
}

/* Epoch seconds, from the EPOCH events. */
struct epochs {
    double seconds[8];
};

static int on_event(void *ud, const struct nl_event *ev)
{
    struct epochs *e = ud;
    if (ev->kind == NL_EVENT_EPOCH && ev->epoch >= 1 && ev->epoch <= 8)
        e->seconds[ev->epoch - 1] = ev->seconds;
    return 0;
}

static int notes;
static void on_note(void *ud, const char *text)
{
    (void)ud;
    notes++;
    diag("note: %s", text);
}

/* The largest difference between two models' parameters. */
static double max_diff(const struct nl_model *a, const struct nl_model *b)
{
    double d = 0.0;
    for (size_t i = 0; i < a->nparams; i++) {
        double e = a->params[i] - b->params[i];
        d = e > d ? e : -e > d ? -e : d;
    }
    return d;
}

/* README's photo classifier, small: see the top of the file. */
static void photo_flow(void)
{
    const char *root = getenv("NNLAB_SOURCE_ROOT");
    char f[512];

    bin = getenv("NNLAB_BIN");
    if (!root || !bin ||
        sh("/usr/bin/python3 -c 'import torch, torchvision, onnx, cv2, PIL' >/dev/null 2>&1")) {
        diag("the photo example is skipped: no NNLAB_BIN, or /usr/bin/python3 lacks torch, "
             "torchvision, onnx, cv2 or PIL");
        return;
    }
    snprintf(dir, sizeof dir, "/tmp/nnlab-photos-XXXXXX");
    if (!mkdtemp(dir))
        return;
    snprintf(db, sizeof db, "%s/nnlab.db", dir);
    snprintf(out_path, sizeof out_path, "%s/out", dir);
    snprintf(err_path, sizeof err_path, "%s/err", dir);
    is_int(sh("/usr/bin/python3 '%s/tests/bench/jpeg_photos.py' '%s/photos' 24 400 >/dev/null",
              root, dir),
           0, "jpeg_photos.py writes 24 JPEG photos in 3 classes");
    is_int(sh("/usr/bin/python3 '%s/tests/torchvision_models.py' '%s' 32", root, dir), 0,
           "PyTorch writes torchvision's resnet18 state_dict as safetensors");
    int rc = nnlab("import photos '%s/photos' --resize shorter:32,center-crop:32x32 "
                   "--normalize imagenet --test 0.25",
                   dir);
    is_int(rc, 0, "the JPEG tree imports, resized and cropped, ImageNet-normalised%s",
           rc ? errtext : "");
    const char *ft = "--model resnet18 --init '%s/resnet18.safetensors' --replace-head "
                     "--freeze-up-to layer4.1.bn2 --epochs 3 --batch 8 --lr 0.01 --seed 3";
    char args[1024], eval_on[4096] = "";
    snprintf(args, sizeof args, ft, dir);
    rc = nnlab("train --data photos %s --name r18", args);
    is_int(rc, 0, "resnet18 fine-tunes with its head replaced and layer4.1.bn2 frozen%s",
           rc ? errtext : "");
    ok(strstr(errtext, "frozen features cached in memory: 67 layers up to 'avgpool'") != NULL,
       "the frozen features are cached, and it is said");
    rc = nnlab("--json eval r18");
    snprintf(eval_on, sizeof eval_on, "%s",
             strstr(out, "\"dataset\"") ? strstr(out, "\"dataset\"") : "");
    ok(rc == 0 && strstr(out, "\"macro\"") && strstr(out, "\"f1\""),
       "eval reports per-class precision, recall and F1 with macro averages");
    rc = nnlab("train --data photos %s --name r18-off --feature-cache off", args);
    is_int(rc, 0, "the same without the feature cache%s", rc ? errtext : "");
    ok(strstr(errtext, "frozen features") == NULL, "and then nothing is said of it");
    nnlab("--json eval r18-off");
    const char *off = strstr(out, "\"dataset\"");
    ok(eval_on[0] && off && strcmp(eval_on, off) == 0,
       "the cached and uncached runs evaluate alike: %.200s", eval_on);
    rc = nnlab("export r18 '%s/r18.onnx'", dir);
    is_int(rc, 0, "the run exports to ONNX%s", rc ? errtext : "");
    is_int(sh("/usr/bin/python3 '%s/tests/onnx_check.py' crops '%s/photos' '%s/crops' 32 2", root,
              dir, dir),
           0, "photos cut as the import cuts them");
    rc = nnlab("--json predict r18 '%s'/crops/*/*.png", dir);
    snprintf(f, sizeof f, "%s/predict.json", dir);
    is_int(rc == 0 ? rename(out_path, f) : rc, 0, "nnlab predict classifies them%s",
           rc ? errtext : "");
    rc = sh("/usr/bin/python3 '%s/tests/onnx_check.py' images '%s/result' '%s/r18.onnx' '%s'", root,
            dir, dir, f);
    snprintf(f, sizeof f, "%s/result", dir);
    char result[64];
    slurp(f, result, sizeof result);
    ok(rc == 0 && strcmp(result, "ok\n") == 0,
       "onnx checks the file, and OpenCV's dnn gives nnlab predict's classes and probabilities");
    sh("rm -rf '%s'", dir);
}

static void cost(const struct nl_model *m, int *layers, size_t *weights)
{
    struct nl_exec *x;
    struct nl_error err = {0};
    nl_exec_new(&x, m, 1, &err);
    nl_exec_backward_cost(x, layers, weights);
    nl_exec_free(x);
}

/* A run's frozen Winograd layers have their filters transformed once (nl_prep): c2, frozen with
 * c1 (one input channel: not Winograd) and trained with augmentation (so that every step runs
 * them), 36 * 16 * 16 floats; the same run with nothing frozen, none. The frozen weights stay as
 * they were. */
static void check_prepared(const struct nl_dataset *d)
{
    static const char text[] = "c1: conv 16 3x3 pad=1\n"
                               "relu\n"
                               "c2: conv 16 3x3 pad=1\n"
                               "relu\n"
                               "c3: conv 16 3x3 pad=1\n"
                               "relu\n"
                               "pool: maxpool 2\n"
                               "fc: dense N\n";
    static const char *const frozen[] = {"c1", "c2"};
    for (int f = 1; f >= 0; f--) {
        struct nl_model *m = build_text(text, d->shape, d->nclasses);
        struct nl_train_opts o;
        struct nl_train_result res;
        struct nl_error err = {0};
        nl_train_defaults(&o);
        o.epochs = 1;
        o.threads = 2;
        nl_augment_parse(&o.augment, "flip", &err);
        nl_model_init_params(m, 3);
        if (f)
            nl_model_freeze(m, frozen, 2, NULL, &err);
        const struct nl_layer *l = &m->layers[nl_model_find_layer(m, "c2")];
        const size_t bytes = l->param_count * sizeof(float);
        float *saved = nl_malloc(bytes);
        memcpy(saved, m->params + l->param_offset, bytes);
        int rc = nl_train(m, d, &o, NULL, &res, &err);
        is_int(rc, 0, "a Winograd model with %s trains%s%s",
               f ? "c1 and c2 frozen" : "nothing frozen", rc ? ": " : "", rc ? err.msg : "");
        is_int((long)res.prep_floats, f ? 36 * 16 * 16 : 0, "%s: the prepared weights' floats",
               f ? "c2 frozen" : "nothing frozen");
        ok((memcmp(saved, m->params + l->param_offset, bytes) == 0) == f, "%s: c2's weights %s",
           f ? "c2 frozen" : "nothing frozen", f ? "are bit-identical after the run" : "trained");
        nl_free(saved);
        nl_model_free(m);
    }
}

int main(void)
{
    nl_kernels_init();
    check_prefix();
    photo_flow();

    const char *fashion_dir = getenv("NNLAB_FASHION");
    struct stat st;
    char tmp[] = "/tmp/nnlab-finetune-XXXXXX", dbpath[256];
    struct nl_error err = {0};
    struct nl_store *store;
    struct nl_dataset *all;

    if (!fashion_dir)
        fashion_dir = "/usr/share/datasets/fashion-mnist";
    if (stat(fashion_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        diag("no Fashion-MNIST at %s: the fine-tuning runs are skipped", fashion_dir);
        return done_testing();
    }
    if (!mkdtemp(tmp))
        return 1;
    snprintf(dbpath, sizeof dbpath, "%s/nnlab.dbpath", tmp);
    struct nl_import_opts io = {.seed = 1};
    const char *paths[] = {fashion_dir};
    int rc = nl_store_open(&store, dbpath, &err);
    if (rc == 0)
        rc = nl_import_idx(store, "fashion", paths, 1, &io, &err);
    if (rc == 0)
        rc = nl_dataset_load(store, "fashion", &all, &err);
    is_int(rc, 0, "Fashion-MNIST imports and loads%s%s", rc ? ": " : "", rc ? err.msg : "");
    if (rc < 0)
        return done_testing();
    nl_store_close(store);
    struct nl_dataset *a = half(all, 0, PER_HALF), *b = half(all, 5, PER_HALF);
    struct nl_dataset *few = half(all, 5, 600);
    nl_dataset_free(all);
    diag("classes 0-4: %u train, %u test; 5-9: %u train, %u test", a->split[NL_TRAIN].n,
         a->split[NL_TEST].n, b->split[NL_TRAIN].n, b->split[NL_TEST].n);

    struct nl_train_opts o;
    struct nl_train_result res;
    nl_train_defaults(&o);
    o.epochs = 2;

    /* The base model, on 0-4. */
    struct nl_model *base = build(a);
    nl_model_init_params(base, 1);
    rc = nl_train(base, a, &o, NULL, &res, &err);
    is_int(rc, 0, "the base model trains on classes 0-4%s%s", rc ? ": " : "", rc ? err.msg : "");
    diag("base on 0-4: test accuracy %.4f, %.2f s per epoch", res.test_accuracy,
         res.seconds / res.epochs);

    /* Fine-tuning on 5-9: the base's weights, a fresh head, conv1 and conv2 frozen. */
    struct nl_model *ft = build(b);
    nl_model_init_params(ft, 2);
    ft->layers[nl_model_head(ft)].fresh = 1;
    struct nl_safetensors_report rep;
    rc = nl_weights_copy(ft, base, "the base model", 0, NULL, NULL, &rep, &err);
    is_int(rc, 0, "the base's weights load, head excepted%s%s", rc ? ": " : "", rc ? err.msg : "");
    is_int(rep.loaded, 6, "six tensors loaded (conv1, conv2, fc1), the head left fresh");
    const char *frozen[] = {"conv1", "conv2"};
    is_int(nl_model_freeze(ft, frozen, 2, NULL, &err), 0, "conv1 and conv2 frozen");

    int ft_layers, full_layers;
    size_t ft_weights, full_weights;
    struct nl_model *full = build(b);
    nl_model_init_params(full, 2);
    cost(ft, &ft_layers, &ft_weights);
    cost(full, &full_layers, &full_weights);
    ok(ft_layers < full_layers && ft_weights < full_weights,
       "a fine-tuning step is cheaper: backward runs %d of %d layers, computes %zu of %zu weight "
       "gradients",
       ft_layers, full_layers, ft_weights, full_weights);
    ok(ft->nreduce < full->nreduce,
       "the optimizer and the gradient reduction cover %zu of %zu floats", ft->nreduce,
       full->nreduce);

    size_t cbytes[2];
    float *saved[2];
    for (int k = 0; k < 2; k++) {
        const struct nl_layer *l = &ft->layers[nl_model_find_layer(ft, frozen[k])];
        cbytes[k] = l->param_count * sizeof(float);
        saved[k] = nl_malloc(cbytes[k]);
        memcpy(saved[k], ft->params + l->param_offset, cbytes[k]);
    }
    rc = nl_train(ft, b, &o, NULL, &res, &err);
    is_int(rc, 0, "fine-tuning on classes 5-9 runs%s%s", rc ? ": " : "", rc ? err.msg : "");
    double ft_seconds = res.seconds / res.epochs;
    int same = 1;
    for (int k = 0; k < 2; k++) {
        const struct nl_layer *l = &ft->layers[nl_model_find_layer(ft, frozen[k])];
        same &= memcmp(saved[k], ft->params + l->param_offset, cbytes[k]) == 0;
        nl_free(saved[k]);
    }
    ok(same, "the frozen conv1 and conv2 are bit-identical after fine-tuning");
    ok(res.test_accuracy >= 0.90, "fine-tuned accuracy on classes 5-9: %.4f >= 0.90",
       res.test_accuracy);

    rc = nl_train(full, b, &o, NULL, &res, &err);
    is_int(rc, 0, "full training on 5-9 from scratch, for comparison");
    diag("epoch seconds: fine-tuning %.3f, full training %.3f (test accuracy %.4f)", ft_seconds,
         res.seconds / res.epochs, res.test_accuracy);

    /* The feature cache: off, in memory, in a file, from the finished file. Fine-tuning with
     * conv1 and conv2 frozen has them and what follows up to fc1 as its prefix. */
    const char *runs[] = {"without the cache", "cached in memory", "cached in a file",
                          "from the finished file", "with augmentation"};
    struct nl_model *tuned[5];
    char cache_dir[300];
    snprintf(cache_dir, sizeof cache_dir, "%s/features", tmp);
    o.epochs = 3;
    o.note = on_note;
    for (int r = 0; r < 5; r++) {
        struct epochs e = {{0}};
        struct nl_train_hooks hooks = {on_event, NULL, &e};
        tuned[r] = build(b);
        nl_model_init_params(tuned[r], 2);
        tuned[r]->layers[nl_model_head(tuned[r])].fresh = 1;
        nl_weights_copy(tuned[r], base, "the base model", 0, NULL, NULL, &rep, &err);
        nl_model_freeze(tuned[r], frozen, 2, NULL, &err);
        o.feature_cache = r > 0;
        o.feature_cache_limit = r >= 2 && r < 4 ? 0 : (size_t)1 << 30;
        o.feature_cache_dir = r >= 2 ? cache_dir : NULL;
        if (r == 4)
            nl_augment_parse(&o.augment, "flip", &err);
        notes = 0;
        rc = nl_train(tuned[r], b, &o, &hooks, &res, &err);
        is_int(rc, 0, "fine-tuning %s runs%s%s", runs[r], rc ? ": " : "", rc ? err.msg : "");
        diag("%s: epoch seconds %.3f %.3f %.3f, test accuracy %.4f", runs[r], e.seconds[0],
             e.seconds[1], e.seconds[2], res.test_accuracy);
        const int where[] = {0, 1, 2, 2, 0}, cached[] = {0, 2, 2, 3, 0};
        is_int(res.feature_cache, where[r], "%s: the cache is where it should be", runs[r]);
        is_int(res.cached_epochs, cached[r], "%s: %d epochs read the cache", runs[r], cached[r]);
        is_int(notes, r > 0, "%s: %s", runs[r], r > 0 ? "said once" : "nothing said");
        if (r > 0 && r < 4) {
            const double d = max_diff(tuned[r], tuned[0]);
            is_float(d, 0.0, 1e-6, "%s: the weights are those of the run without it (%s)", runs[r],
                     d == 0.0 ? "bit for bit" : "within 1e-6");
        }
    }
    memset(&o.augment, 0, sizeof o.augment);
    for (int r = 0; r < 5; r++)
        nl_model_free(tuned[r]);
    char cached_file[700];
    DIR *dd = opendir(cache_dir);
    struct dirent *de;
    int files = 0;
    while (dd && (de = readdir(dd)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        files++;
        snprintf(cached_file, sizeof cached_file, "%s/%s", cache_dir, de->d_name);
        unlink(cached_file);
    }
    if (dd)
        closedir(dd);
    is_int(files, 1, "one file in the cache directory");
    rmdir(cache_dir);

    check_prepared(few);
    nl_dataset_free(few);

    nl_model_free(base);
    nl_model_free(ft);
    nl_model_free(full);
    nl_dataset_free(a);
    nl_dataset_free(b);
    unlink(dbpath);
    char side[300];
    snprintf(side, sizeof side, "%s-wal", dbpath);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", dbpath);
    unlink(side);
    rmdir(tmp);
    return done_testing();
}
