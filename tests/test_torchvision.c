/* torchvision's models as shipped specs: data/models/resnet18 and data/models/mobilenet_v2 take
 * torchvision's resnet18().state_dict() and mobilenet_v2().state_dict(), saved as safetensors by
 * PyTorch (tests/torchvision_models.py, run with Debian's /usr/bin/python3), with no renaming —
 * num_batches_tracked skipped — and give PyTorch's logits within 1e-4 on a batch of two 3x32x32
 * images in evaluation mode. Saving the loaded model writes every tensor back under PyTorch's
 * name. The head that --replace-head re-creates is fc (resnet18) and classifier.1
 * (mobilenet_v2).
 *
 * Skips when /usr/bin/python3 lacks torch or torchvision. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/formats/json.h"
#include "nnlab/alloc.h"
#include "nnlab/model.h"
#include "nnlab/rng.h"
#include "nnlab/safetensors.h"
#include "nnlab/spec.h"
#include "tap.h"

#define SIZE    32
#define BATCH   2
#define CLASSES 1000 /* torchvision's default head */

static char dir[64];

/* The whole file into a malloc'ed buffer; NULL when it cannot be read. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        if (buf) {
            buf[n] = '\0';
            *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

/* The parsed JSON header of a safetensors file, or NULL. */
static struct nl_json_doc *header_of(const char *path)
{
    struct nl_error err = {0};
    struct nl_json_doc *doc = NULL;
    size_t len = 0;
    char *raw = slurp(path, &len);
    unsigned long long n = 0;

    if (!raw || len < 8) {
        free(raw);
        return NULL;
    }
    for (int k = 7; k >= 0; k--)
        n = n << 8 | (unsigned char)raw[k];
    if (n <= len - 8 && nl_json_parse(&doc, raw + 8, (size_t)n, path, &err) < 0)
        diag("%s", err.msg);
    free(raw);
    return doc;
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* Every tensor of torch's file (num_batches_tracked aside) is in ours and the other way round. */
static void check_names(const char *torch_path, const char *ours_path, const char *model)
{
    struct nl_json_doc *a = header_of(torch_path), *b = header_of(ours_path);
    const struct nl_json *ra = a ? nl_json_root(a) : NULL, *rb = b ? nl_json_root(b) : NULL;
    int missing = 0, expected = 0, extra = 0;

    ok(ra && rb, "%s: both headers read", model);
    for (size_t i = 0; ra && rb && i < ra->count; i++) {
        const char *key = ra->items[i].key;
        if (ends_with(key, ".num_batches_tracked"))
            continue;
        expected++;
        if (!nl_json_get(rb, key)) {
            if (missing++ < 3)
                diag("%s not in the exported file", key);
        }
    }
    for (size_t i = 0; ra && rb && i < rb->count; i++) {
        const char *key = rb->items[i].key;
        if (strcmp(key, "__metadata__") != 0 && !nl_json_get(ra, key) && extra++ < 3)
            diag("%s not in PyTorch's file", key);
    }
    ok(missing == 0 && extra == 0 && expected > 0,
       "%s: export writes PyTorch's %d tensor names back unchanged (%d missing, %d extra)", model,
       expected, missing, extra);
    nl_json_free(a);
    nl_json_free(b);
}

static float *read_floats(const char *path, size_t count)
{
    size_t len = 0;
    char *raw = slurp(path, &len);

    if (raw && len != count * sizeof(float)) {
        diag("%s: %zu bytes, want %zu", path, len, count * sizeof(float));
        free(raw);
        return NULL;
    }
    return (float *)raw; /* little-endian float32, as this machine's */
}

static void check_model(const char *name, const char *head)
{
    struct nl_error err = {0};
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;
    struct nl_exec *x = NULL;
    struct nl_safetensors_report rep = {0};
    char path[256], saved[256];
    const size_t in_count = (size_t)BATCH * 3 * SIZE * SIZE;

    ok(nl_spec_load(&spec, name, NULL, NULL, &err) == 0, "%s: shipped spec parses: %s", name,
       err.msg);
    if (!spec)
        return;
    ok(nl_model_build(&m, spec, (struct nl_shape){3, SIZE, SIZE}, CLASSES, &err) == 0,
       "%s: builds for 3x%dx%d, %d classes: %s", name, SIZE, SIZE, CLASSES, err.msg);
    nl_spec_free(spec);
    if (!m)
        return;
    int h = nl_model_head(m);
    is_str(h >= 0 ? m->layers[h].name : "", head, "%s: --replace-head re-creates %s", name, head);

    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    ok(nl_safetensors_load(m, path, 0, NULL, NULL, &rep, &err) == 0,
       "%s: torchvision's state_dict loads with no renaming: %s", name, err.msg);
    int tensors = 0;
    for (int i = 0; i < m->nlayers; i++)
        tensors += m->layers[i].nparams;
    is_int(rep.loaded, tensors, "%s: all %d tensors loaded", name, tensors);
    is_int(rep.skipped, 0, "%s: none skipped", name);

    snprintf(path, sizeof path, "%s/%s.input", dir, name);
    float *in = read_floats(path, in_count);
    snprintf(path, sizeof path, "%s/%s.logits", dir, name);
    float *want = read_floats(path, (size_t)BATCH * CLASSES);
    ok(in && want, "%s: PyTorch's batch and logits read", name);
    if (in && want && nl_exec_new(&x, m, BATCH, &err) == 0) {
        struct nl_rng rng;
        nl_rng_seed(&rng, 1);
        const float *got = nl_exec_forward(x, m->params, in, BATCH, 0, &rng);
        double worst = 0.0, scale = 0.0;
        for (size_t i = 0; i < (size_t)BATCH * CLASSES; i++) {
            double d = fabs((double)got[i] - (double)want[i]);
            worst = d > worst ? d : worst;
            scale = fabs((double)want[i]) > scale ? fabs((double)want[i]) : scale;
        }
        ok(worst <= 1e-4,
           "%s: logits within 1e-4 of PyTorch's (max difference %.3g, max |logit| "
           "%.3g)",
           name, worst, scale);
    } else {
        ok(0, "%s: executor: %s", name, err.msg);
    }

    snprintf(saved, sizeof saved, "%s/%s.saved.safetensors", dir, name);
    ok(nl_safetensors_save(m, saved, &err) == 0, "%s: saved: %s", name, err.msg);
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    check_names(path, saved, name);

    free(in);
    free(want);
    nl_exec_free(x);
    nl_model_free(m);

    /* Fine-tuning for 3 classes: --replace-head keeps the head fresh, --freeze-up-to the rest. */
    struct nl_model *ft = NULL;
    ok(nl_spec_load(&spec, name, NULL, NULL, &err) == 0 &&
           nl_model_build(&ft, spec, (struct nl_shape){3, SIZE, SIZE}, 3, &err) == 0,
       "%s: builds for 3 classes: %s", name, err.msg);
    nl_spec_free(spec);
    if (!ft)
        return;
    h = nl_model_head(ft);
    ft->layers[h].fresh = 1;
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    memset(&rep, 0, sizeof rep);
    ok(nl_safetensors_load(ft, path, 0, NULL, NULL, &rep, &err) == 0,
       "%s: loads with the head replaced: %s", name, err.msg);
    is_int(rep.loaded, tensors - ft->layers[h].nparams, "%s: every tensor but the head's", name);
    is_int(rep.unused, 0, "%s: the file's head is not reported unused", name);
    nl_model_free(ft);
}

int main(void)
{
    char cmd[512];
    const char *root = getenv("NNLAB_SOURCE_ROOT");

    if (system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") != 0)
        skip_all("/usr/bin/python3 has no torch and torchvision (Debian's python3-torch, "
                 "python3-torchvision)");
    snprintf(dir, sizeof dir, "/tmp/nnlab-tv-XXXXXX");
    if (!mkdtemp(dir))
        skip_all("cannot make a temporary directory");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/torchvision_models.py' '%s' %d",
             root ? root : ".", dir, SIZE);
    ok(system(cmd) == 0, "PyTorch wrote torchvision's resnet18 and mobilenet_v2");
    check_model("resnet18", "fc");
    check_model("mobilenet_v2", "classifier.1");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
