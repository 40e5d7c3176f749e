/* safetensors in and out: a round trip, a file laid out as PyTorch's state_dict written from
 * known values (F32, F16, BF16), mismatches listed one by one, partial loads, corrupt files,
 * copying weights between models, a header of a million-tensor kind read in memory bounded by
 * the file (and its warnings counted, not repeated), and the JSON reader underneath. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/formats/json.h"
#include "nnlab/alloc.h"
#include "nnlab/safetensors.h"
#include "tap.h"
#include "test_util.h"

static char dir[64];

static const char small[] = "conv1: conv 2 3x3\nrelu\nfc1: dense N\n";

/* Writes a safetensors file from a header text and a data block. */
static void write_file(const char *path, const char *header, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    uint64_t len = strlen(header);
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(len >> (8 * i));
    fwrite(b, 1, 8, f);
    fwrite(header, 1, len, f);
    if (n)
        fwrite(data, 1, n, f);
    fclose(f);
}

static int warnings;
static char last_warning[512];
static void count_warning(void *ud, const char *msg)
{
    (void)ud;
    warnings++;
    snprintf(last_warning, sizeof last_warning, "%s", msg);
}

static void test_round_trip(void)
{
    char path[128];
    struct nl_error err = {0};
    struct nl_model *a = build(small, (struct nl_shape){1, 5, 5}, 3);
    struct nl_model *b = build(small, (struct nl_shape){1, 5, 5}, 3);
    struct nl_safetensors_report rep;

    nl_model_init_params(a, 1);
    nl_model_init_params(b, 2);
    snprintf(path, sizeof path, "%s/rt.safetensors", dir);
    is_int(nl_safetensors_save(a, path, &err), 0, "save");
    is_int(nl_safetensors_load(b, path, 0, NULL, NULL, &rep, &err), 0, "load");
    is_int(rep.loaded, 4, "four tensors loaded");
    ok(memcmp(a->params, b->params, a->nparams * sizeof(float)) == 0, "bit-identical weights");

    FILE *f = fopen(path, "rb");
    unsigned char len[8];
    ok(f && fread(len, 1, 8, f) == 8, "header length readable");
    if (f)
        fclose(f);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len[i];
    is_int((long long)((8 + n) % 8), 0, "data starts 8-byte aligned");

    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", dir);
    is_int(nl_safetensors_save(a, path, &err), NL_EIO, "saving into a missing folder fails");
    like(err.msg, "no/such/dir", "naming the path");

    /* Copying between models by name. */
    struct nl_model *c = build(small, (struct nl_shape){1, 5, 5}, 3);
    nl_model_init_params(c, 9);
    is_int(nl_weights_copy(c, a, "run 'a'", 0, NULL, NULL, &rep, &err), 0, "copy weights");
    ok(memcmp(a->params, c->params, a->nparams * sizeof(float)) == 0, "copied exactly");
    struct nl_model *d = build(small, (struct nl_shape){1, 5, 5}, 4);
    is_int(nl_weights_copy(d, a, "run 'a'", 0, NULL, NULL, &rep, &err), NL_EINVAL,
           "another head does not copy whole");
    like(err.msg, "fc1.weight: run has [3,18], model wants [4,18]", "the mismatch is listed");
    warnings = 0;
    is_int(nl_weights_copy(d, a, "run 'a'", 1, count_warning, NULL, &rep, &err), 0,
           "a partial copy loads the rest");
    is_int(rep.loaded, 2, "the conv tensors");
    is_int(rep.skipped, 2, "the head skipped");
    is_int(warnings, 2, "one warning per skipped tensor");
    float *conv_d = d->params + d->layers[0].param_offset;
    float *conv_a = a->params + a->layers[0].param_offset;
    ok(memcmp(conv_d, conv_a, d->layers[0].param_count * sizeof(float)) == 0,
       "conv weights copied");
    nl_model_free(a);
    nl_model_free(b);
    nl_model_free(c);
    nl_model_free(d);
}

/* A file in PyTorch's layout, written from known values: conv1.weight [2,1,3,3] as F32,
 * conv1.bias [2] as F16, fc1.weight [3,18] as BF16, fc1.bias [3] as F32. */
static void test_pytorch_layout(void)
{
    char path[128], header[1024];
    struct nl_error err = {0};
    unsigned char data[4096];
    size_t off = 0;
    float w[18], fb[3] = {0.5f, -0.25f, 2.0f};

    for (int i = 0; i < 18; i++)
        w[i] = (float)i / 10.0f - 0.9f;
    memcpy(data, w, sizeof w); /* little-endian host */
    off += sizeof w;
    /* F16: 1.5 = 0x3e00, -2.0 = 0xc000 */
    data[off++] = 0x00;
    data[off++] = 0x3e;
    data[off++] = 0x00;
    data[off++] = 0xc0;
    /* BF16 of 0.25 * (i - 27): the top half of the float32 bits (exact for these values) */
    for (int i = 0; i < 54; i++) {
        float v = 0.25f * (float)(i - 27);
        uint32_t bits;
        memcpy(&bits, &v, 4);
        data[off++] = (unsigned char)(bits >> 16);
        data[off++] = (unsigned char)(bits >> 24);
    }
    memcpy(data + off, fb, sizeof fb);
    off += sizeof fb;
    snprintf(header, sizeof header,
             "{\"__metadata__\":{\"format\":\"pt\"},"
             "\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,3,3],\"data_offsets\":[0,72]},"
             "\"conv1.bias\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[72,76]},"
             "\"fc1.weight\":{\"dtype\":\"BF16\",\"shape\":[3,18],\"data_offsets\":[76,184]},"
             "\"fc1.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[184,196]}}");
    snprintf(path, sizeof path, "%s/torch.safetensors", dir);
    write_file(path, header, data, off);

    struct nl_model *m = build(small, (struct nl_shape){1, 5, 5}, 3);
    is_int(nl_safetensors_load(m, path, 0, NULL, NULL, NULL, &err), 0, "PyTorch layout loads");
    if (err.code)
        diag("%s", err.msg);
    const float *cw = m->params + m->layers[0].param_offset;
    is_float(cw[0], -0.9, 1e-7, "conv1.weight[0,0,0,0]");
    is_float(cw[17], 0.8, 1e-6, "conv1.weight[1,0,2,2]");
    is_float(cw[18], 1.5, 0, "conv1.bias[0] from F16");
    is_float(cw[19], -2.0, 0, "conv1.bias[1] from F16");
    const float *fw = m->params + m->layers[2].param_offset;
    is_float(fw[0], -6.75, 0, "fc1.weight[0,0] from BF16");
    is_float(fw[18 + 5], 0.25f * (18 + 5 - 27), 0, "fc1.weight[1,5] from BF16");
    is_float(fw[54 + 2], 2.0, 0, "fc1.bias[2]");

    /* Mismatches: the model is left unchanged and each one is named. */
    struct nl_model *big =
        build("conv1: conv 4 3x3\nrelu\nfc1: dense N\n", (struct nl_shape){1, 5, 5}, 3);
    nl_model_init_params(big, 5);
    float *before = nl_malloc(big->nparams * sizeof(float));
    memcpy(before, big->params, big->nparams * sizeof(float));
    is_int(nl_safetensors_load(big, path, 0, NULL, NULL, NULL, &err), NL_EINVAL,
           "shape mismatches fail a strict load");
    like(err.msg, "conv1.weight: file has [2,1,3,3], model wants [4,1,3,3]", "listed one by one");
    like(err.msg, "fc1.weight: file has [3,18], model wants [3,36]", "each of them");
    like(err.msg, path, "naming the file");
    like(err.msg, "--init-partial", "and saying how to load the rest");
    ok(memcmp(before, big->params, big->nparams * sizeof(float)) == 0, "model unchanged");
    warnings = 0;
    struct nl_safetensors_report rep;
    is_int(nl_safetensors_load(big, path, 1, count_warning, NULL, &rep, &err), 0,
           "a partial load goes through");
    is_int(rep.loaded, 1, "fc1.bias matched");
    is_int(rep.skipped, 3, "three skipped");
    is_int(warnings, 3, "each skipped one reported");
    like(last_warning, "skipped", "as skipped");
    nl_free(before);
    nl_model_free(big);

    struct nl_model *other =
        build("conv1: conv 2 3x3\nrelu\nhead: dense N\n", (struct nl_shape){1, 5, 5}, 3);
    is_int(nl_safetensors_load(other, path, 0, NULL, NULL, NULL, &err), NL_EINVAL,
           "other names fail");
    like(err.msg, "head.weight: missing", "a missing tensor is named");
    like(err.msg, "fc1.weight: not in the model", "so is an unexpected one");
    nl_model_free(other);
    nl_model_free(m);
}

static void test_corrupt(void)
{
    char path[128];
    struct nl_error err = {0};
    struct nl_model *m = build(small, (struct nl_shape){1, 5, 5}, 3);
    float data[64] = {0}; /* 256 bytes, enough for every case */
    static const struct {
        const char *header;
        size_t data;
        const char *why;
    } cases[] = {
        {"{\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,3,3],\"data_offsets\":[0,72]}}", 40,
         "outside the file"},
        {"{\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,3,3],\"data_offsets\":[0,70]}}", 72,
         "bytes for"},
        {"{\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,3,3]}}", 72, "lacks"},
        {"{\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[-2,1],\"data_offsets\":[0,8]}}", 8,
         "bad shape"},
        {"{\"conv1.weight\": nope}", 0, "bad JSON"},
        {"[1,2]", 0, "not a JSON object"},
        {"{\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,3,3],\"data_offsets\":[0,72]},"
         "\"conv1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[64,72]}}",
         72, "overlap"},
        {"{\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,3,3],\"data_offsets\":[0,72]},"
         "\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,3,3],\"data_offsets\":[72,144]}}",
         144, "appears twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/bad%zu.safetensors", dir, i);
        write_file(path, cases[i].header, data, cases[i].data);
        is_int(nl_safetensors_load(m, path, 1, NULL, NULL, NULL, &err) < 0, 1, "corrupt file %zu",
               i);
        like(err.msg, cases[i].why, "says why (%s)", cases[i].why);
        like(err.msg, path, "and names the file");
    }
    /* A header length beyond the file, and a file too short to hold one. */
    snprintf(path, sizeof path, "%s/short.safetensors", dir);
    FILE *f = fopen(path, "wb");
    fwrite("\xff\xff\x00\x00\x00\x00\x00\x00{}", 1, 10, f);
    fclose(f);
    is_int(nl_safetensors_load(m, path, 0, NULL, NULL, NULL, &err), NL_EFORMAT,
           "a header longer than the file");
    like(err.msg, "not a safetensors file", "is not a safetensors file");
    f = fopen(path, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    is_int(nl_safetensors_load(m, path, 0, NULL, NULL, NULL, &err), NL_EFORMAT, "3 bytes");
    snprintf(path, sizeof path, "%s/none.safetensors", dir);
    is_int(nl_safetensors_load(m, path, 0, NULL, NULL, NULL, &err), NL_ENOENT, "a missing file");
    like(err.msg, "none.safetensors", "named");
    nl_model_free(m);
}

/* A header naming n one-float tensors t0, t1, ... laid end to end, with the data they need. */
static size_t write_many(const char *path, size_t n)
{
    size_t cap = n * 80 + 64, len = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{");
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(h + len, cap - len,
                                "%s\"t%zu\":{\"dtype\":\"F32\",\"shape\":[1],"
                                "\"data_offsets\":[%zu,%zu]}",
                                i ? "," : "", i, 4 * i, 4 * i + 4);
    snprintf(h + len, cap - len, "}");
    float *data = calloc(n, sizeof *data);
    write_file(path, h, data, n * sizeof *data);
    len = strlen(h);
    free(h);
    free(data);
    return len;
}

/* 200,000 tensors (an 11 MB header; the tree of the whole document took about 2 KB a tensor,
 * 400 MB): refused for not matching the model in memory of the order of the header, listing a
 * few and counting the rest; a partial load warns about the first ones and counts the rest. */
static void test_many_tensors(void)
{
    char path[128];
    struct nl_error err = {0};
    struct nl_model *m = build(small, (struct nl_shape){1, 5, 5}, 3);

    snprintf(path, sizeof path, "%s/many.safetensors", dir);
    size_t header = write_many(path, 200000);
    long before = max_rss_kb();
    is_int(nl_safetensors_load(m, path, 0, NULL, NULL, NULL, &err), NL_EINVAL,
           "200,000 tensors the model lacks: refused");
    long grew = max_rss_kb() - before;
    like(err.msg, "200004 tensors do not match", "counted");
    like(err.msg, "and 1999", "the list cut short");
#ifdef UNDER_ASAN
    (void)grew;
    (void)header;
    ok(1, "# SKIP AddressSanitizer's quarantine keeps freed memory");
#else
    ok(grew < (long)(6 * header / 1024), "read in %ld KiB for a header of %zu KiB", grew,
       header / 1024);
#endif
    warnings = 0;
    is_int(nl_safetensors_load(m, path, 1, count_warning, NULL, NULL, &err), NL_EINVAL,
           "partially: nothing matches");
    is_int(warnings, 21, "20 mismatches warned about, then one count");
    like(last_warning, "and 199984 more tensors skipped or ignored", "the rest counted");
    nl_model_free(m);

    /* Tensors of no bytes cost nothing in the data: a header may name only so many. */
    size_t cap = 1100 * 80, len = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{");
    for (int i = 0; i < 1100; i++)
        len += (size_t)snprintf(h + len, cap - len,
                                "%s\"e%d\":{\"dtype\":\"F32\",\"shape\":[0],"
                                "\"data_offsets\":[0,0]}",
                                i ? "," : "", i);
    snprintf(h + len, cap - len, "}");
    snprintf(path, sizeof path, "%s/empty.safetensors", dir);
    write_file(path, h, NULL, 0);
    free(h);
    m = build(small, (struct nl_shape){1, 5, 5}, 3);
    is_int(nl_safetensors_load(m, path, 1, NULL, NULL, NULL, &err), NL_EFORMAT,
           "1,100 empty tensors refused");
    like(err.msg, "more than 1024 tensors hold no bytes", "saying why");
    nl_model_free(m);
}

/* nl_grow, the growth rule of the readers' arrays: doubling from the first capacity, the
 * elements kept, and a size that would overflow refused with the array left as it was. */
static void test_grow(void)
{
    size_t cap = 0;
    int *v = nl_grow(NULL, &cap, 1, sizeof *v, 8);
    ok(v && cap == 8, "room for 8 first (%zu)", cap);
    for (int i = 0; v && i < 8; i++)
        v[i] = i;
    int *w = v ? nl_grow(v, &cap, 9, sizeof *v, 8) : NULL;
    ok(w && cap == 16 && w[7] == 7, "then 16, the elements kept (%zu)", cap);
    v = w ? w : v;
    w = nl_grow(v, &cap, 100, sizeof *v, 8);
    ok(w && cap == 128, "to the next power of two past the need (%zu)", cap);
    v = w ? w : v;
    ok(nl_grow(v, &cap, 50, sizeof *v, 8) == v && cap == 128, "no growth when it fits");
    ok(nl_grow(v, &cap, SIZE_MAX / 2, sizeof *v, 8) == NULL && cap == 128,
       "an overflowing size refused, the array as it was");
    nl_free(v);
}

static void test_json(void)
{
    struct nl_json_doc *doc;
    struct nl_error err = {0};
    const char *text = " {\"a\": [1, -2.5e1, true, null], \"s\": \"x\\n\\u00e9\\ud83d\\ude00\","
                       "\"o\": {\"k\": 12345678901}} ";

    is_int(nl_json_parse(&doc, text, strlen(text), "t", &err), 0, "a document parses");
    const struct nl_json *root = nl_json_root(doc);
    const struct nl_json *a = nl_json_get(root, "a");
    ok(a && a->type == NL_JSON_ARRAY && a->count == 4, "an array of four");
    ok(a && a->items[0].is_integer && a->items[0].integer == 1, "an integer");
    ok(a && a->items[1].number == -25.0 && !a->items[1].is_integer, "a float");
    ok(a && a->items[2].type == NL_JSON_BOOL && a->items[2].boolean, "true");
    ok(a && a->items[3].type == NL_JSON_NULL, "null");
    const struct nl_json *s = nl_json_get(root, "s");
    is_str(s ? s->string : NULL, "x\n\xc3\xa9\xf0\x9f\x98\x80", "escapes and surrogate pairs");
    const struct nl_json *k = nl_json_get(nl_json_get(root, "o"), "k");
    ok(k && k->integer == 12345678901LL, "a 64-bit integer");
    ok(nl_json_get(root, "missing") == NULL, "an absent key");
    nl_json_free(doc);

    static const char *bad[] = {"",        "{",     "[1,]",        "{\"a\" 1}", "01",
                                "\"\\x\"", "[1] 2", "\"\\ud800\"", "tru",       "{\"a\":1,}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        is_int(nl_json_parse(&doc, bad[i], strlen(bad[i]), "doc", &err), NL_EFORMAT,
               "bad JSON %zu refused", i);
        like(err.msg, "doc: bad JSON at byte", "with the offset");
    }
    char deep[200];
    memset(deep, '[', sizeof deep);
    is_int(nl_json_parse(&doc, deep, sizeof deep, "deep", &err), NL_EFORMAT,
           "deep nesting refused");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/nnlab-st-XXXXXX");
    if (!mkdtemp(dir))
        skip_all("cannot make a temporary directory");
    test_round_trip();
    test_pytorch_layout();
    test_corrupt();
    test_many_tensors();
    test_grow();
    test_json();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
