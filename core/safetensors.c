/* The safetensors format (as the safetensors project defines it):
 *
 *   8 bytes    N, the header length, unsigned little-endian
 *   N bytes    a JSON object: for each tensor NAME, {"dtype": "F32", "shape": [d0, ...],
 *              "data_offsets": [begin, end]}, offsets relative to the data section; an optional
 *              "__metadata__" object of strings
 *   the data   each tensor's bytes, little-endian, row-major
 *
 * Writing: float32 tensors in the model's order, the header padded with spaces so the data
 * starts 8-byte aligned, metadata {"format": "pt", "nnlab.model": ORIGIN}. Reading: F32, F16,
 * BF16 and F64 become float32; the header is at most 64 MiB; every offset is checked against the
 * file's size and the tensor's shape before any data is read, and tensors with the same name or
 * overlapping bytes are refused; a load is staged in a copy of the
 * parameters, so a failed load leaves the model as it was. */
#include "nnlab/safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "nnlab/alloc.h"
#include "nnlab/text.h"

#define MAX_HEADER (64u << 20)

/* A growing text buffer for the header and for lists of mismatches. */
struct text {
    char *s;
    size_t len, cap;
    int oom;
};

static void put(struct text *t, const char *fmt, ...) NL_PRINTF(2, 3);
static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        size_t room = t->cap - t->len;
        va_start(ap, fmt);
        int n = t->oom ? 0 : vsnprintf(t->s ? t->s + t->len : NULL, room, fmt, ap);
        va_end(ap);
        if (t->oom || n < 0)
            return;
        if ((size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap + (size_t)n + 1) * 2;
        char *s = nl_realloc(t->s, cap);
        if (!s) {
            t->oom = 1;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
}

static void put_piece(void *ud, const char *p, size_t n)
{
    put(ud, "%.*s", (int)n, p);
}

static void put_json_string(struct text *t, const char *s)
{
    nl_json_write(put_piece, t, s);
}

static void tensor_name(char *buf, size_t size, const struct nl_layer *l, const struct nl_param *p)
{
    snprintf(buf, size, "%s.%s", l->name, p->name);
}

static void put_shape(struct text *t, const struct nl_param *p)
{
    put(t, "[");
    for (int d = 0; d < p->ndim; d++)
        put(t, "%s%d", d ? "," : "", p->dims[d]);
    put(t, "]");
}

static int write_all(FILE *f, const void *p, size_t n)
{
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

int nl_safetensors_save(const struct nl_model *m, const char *path, struct nl_error *err)
{
    struct text h = {0};
    char name[2 * NL_NAME_MAX], tmp[4096];
    size_t offset = 0;
    int rc = 0;

    put(&h, "{\"__metadata__\":{\"format\":\"pt\",\"nnlab.model\":");
    put_json_string(&h, m->spec_origin ? m->spec_origin : "");
    put(&h, "}");
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        for (int k = 0; k < l->nparams; k++) {
            const struct nl_param *p = &l->params[k];
            tensor_name(name, sizeof name, l, p);
            put(&h, ",");
            put_json_string(&h, name);
            put(&h, ":{\"dtype\":\"F32\",\"shape\":");
            put_shape(&h, p);
            put(&h, ",\"data_offsets\":[%zu,%zu]}", offset, offset + p->count * 4);
            offset += p->count * 4;
        }
    }
    put(&h, "}");
    while ((8 + h.len) % 8)
        put(&h, " ");
    if (h.oom) {
        nl_free(h.s);
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory writing the header", path);
    }

    if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp) {
        nl_free(h.s);
        return nl_error_set(err, NL_EINVAL, "%s: path too long", path);
    }
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        rc = nl_error_set(err, NL_EIO, "%s: cannot create: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        nl_free(h.s);
        return rc;
    }
    unsigned char len[8];
    for (int b = 0; b < 8; b++)
        len[b] = (unsigned char)((uint64_t)h.len >> (8 * b));
    int bad = write_all(f, len, 8) || write_all(f, h.s, h.len);
    for (int i = 0; !bad && i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        for (int k = 0; !bad && k < l->nparams; k++) {
            const struct nl_param *p = &l->params[k];
            bad = write_all(f, m->params + l->param_offset + p->offset, p->count * 4);
        }
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        bad = 1;
    if (fclose(f) != 0)
        bad = 1;
    if (!bad && rename(tmp, path) != 0)
        bad = 1;
    if (bad) {
        rc = nl_error_set(err, NL_EIO, "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
    }
    nl_free(h.s);
    return rc;
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

struct dtype {
    const char *name;
    size_t size;
};
static const struct dtype dtypes[] = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}};

/* Converts n values of dtype from raw little-endian bytes into floats. */
static void convert(float *out, const unsigned char *raw, size_t n, const struct dtype *dt)
{
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = raw + i * dt->size;
        if (dt->size == 4) {
            uint32_t v =
                (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
            memcpy(&out[i], &v, 4);
        } else if (dt->size == 8) {
            uint64_t v = 0;
            double d;
            for (int k = 7; k >= 0; k--)
                v = v << 8 | b[k];
            memcpy(&d, &v, 8);
            out[i] = (float)d;
        } else if (strcmp(dt->name, "F16") == 0) {
            out[i] = half_to_float((uint16_t)(b[0] | b[1] << 8));
        } else {
            uint32_t v = (uint32_t)(b[0] | b[1] << 8) << 16;
            memcpy(&out[i], &v, 4);
        }
    }
}

/* One tensor of the header, checked against the file. */
struct entry {
    const char *name;
    const struct dtype *dt;
    int ndim;
    int64_t dims[8];
    uint64_t begin, end, count;
};

static int read_entry(const struct nl_json *v, struct entry *e, uint64_t data_size,
                      const char *path, struct nl_error *err)
{
    const struct nl_json *dt = nl_json_get(v, "dtype"), *shape = nl_json_get(v, "shape"),
                         *off = nl_json_get(v, "data_offsets");
    e->name = v->key;
    e->dt = NULL;
    if (v->type != NL_JSON_OBJECT || !dt || dt->type != NL_JSON_STRING || !shape ||
        shape->type != NL_JSON_ARRAY || !off || off->type != NL_JSON_ARRAY || off->count != 2)
        return nl_error_set(err, NL_EFORMAT, "%s: tensor '%s' lacks dtype, shape or data_offsets",
                            path, v->key);
    if (shape->count > 8)
        return nl_error_set(err, NL_EFORMAT, "%s: tensor '%s' has %zu dimensions", path, v->key,
                            shape->count);
    e->ndim = (int)shape->count;
    e->count = 1;
    for (size_t d = 0; d < shape->count; d++) {
        const struct nl_json *x = &shape->items[d];
        if (x->type != NL_JSON_NUMBER || !x->is_integer || x->integer < 0 ||
            x->integer > (1LL << 40))
            return nl_error_set(err, NL_EFORMAT, "%s: tensor '%s' has a bad shape", path, v->key);
        e->dims[d] = x->integer;
        e->count *= (uint64_t)x->integer;
        if (e->count > (1ULL << 40))
            return nl_error_set(err, NL_EFORMAT, "%s: tensor '%s' is too large", path, v->key);
    }
    for (int k = 0; k < 2; k++) {
        const struct nl_json *x = &off->items[k];
        if (x->type != NL_JSON_NUMBER || !x->is_integer || x->integer < 0)
            return nl_error_set(err, NL_EFORMAT, "%s: tensor '%s' has bad data_offsets", path,
                                v->key);
    }
    e->begin = (uint64_t)off->items[0].integer;
    e->end = (uint64_t)off->items[1].integer;
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
        if (strcmp(dt->string, dtypes[k].name) == 0)
            e->dt = &dtypes[k];
    if (e->begin > e->end || e->end > data_size)
        return nl_error_set(err, NL_EFORMAT,
                            "%s: tensor '%s' lies outside the file (bytes %llu-%llu of %llu); "
                            "the file is truncated or corrupt",
                            path, v->key, (unsigned long long)e->begin, (unsigned long long)e->end,
                            (unsigned long long)data_size);
    if (e->dt && e->end - e->begin != e->count * e->dt->size)
        return nl_error_set(err, NL_EFORMAT, "%s: tensor '%s' has %llu bytes for %llu values of %s",
                            path, v->key, (unsigned long long)(e->end - e->begin),
                            (unsigned long long)e->count, e->dt->name);
    return 0;
}

static int by_begin(const void *a, const void *b)
{
    const struct entry *x = *(const struct entry *const *)a, *y = *(const struct entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const struct entry *const *)a)->name, (*(const struct entry *const *)b)->name);
}

/* No two tensors may share a name (a JSON object with a key twice: which one would load?) or a
 * byte of the data (one tensor's bytes read as another's). */
static int check_entries(const struct entry *e, size_t n, const char *path, struct nl_error *err)
{
    const struct entry **v = nl_malloc((n + 1) * sizeof *v);
    int rc = 0;

    if (!v)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++)
        v[i] = &e[i];
    qsort(v, n, sizeof *v, by_name);
    for (size_t i = 1; i < n && rc == 0; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            rc = nl_error_set(err, NL_EFORMAT, "%s: tensor '%s' appears twice in the header", path,
                              v[i]->name);
    if (rc == 0)
        qsort(v, n, sizeof *v, by_begin);
    const struct entry *last = NULL; /* the non-empty tensor that ends last so far */
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (v[i]->begin == v[i]->end)
            continue;
        if (last && last->end > v[i]->begin)
            rc = nl_error_set(err, NL_EFORMAT,
                              "%s: tensors '%s' (bytes %llu-%llu) and '%s' (bytes %llu-%llu) "
                              "overlap",
                              path, last->name, (unsigned long long)last->begin,
                              (unsigned long long)last->end, v[i]->name,
                              (unsigned long long)v[i]->begin, (unsigned long long)v[i]->end);
        if (!last || v[i]->end > last->end)
            last = v[i];
    }
    nl_free((void *)v);
    return rc;
}

static void put_entry_shape(struct text *t, const struct entry *e)
{
    put(t, "[");
    for (int d = 0; d < e->ndim; d++)
        put(t, "%s%lld", d ? "," : "", (long long)e->dims[d]);
    put(t, "]");
}

static int same_shape(const struct entry *e, const struct nl_param *p)
{
    if (e->ndim != p->ndim)
        return 0;
    for (int d = 0; d < p->ndim; d++)
        if (e->dims[d] != p->dims[d])
            return 0;
    return 1;
}

/* Reads exactly n bytes at offset. */
static int read_at(FILE *f, uint64_t offset, void *buf, size_t n)
{
    if (fseeko(f, (off_t)offset, SEEK_SET) != 0)
        return -1;
    return fread(buf, 1, n, f) == n ? 0 : -1;
}

/* Where the tensors of a load come from: a file's entries (data read at their offsets), or
 * another model's parameters. */
struct source {
    const char *what; /* the file's path, or "run 'NAME'" */
    struct entry *entries;
    size_t count;
    FILE *f; /* file source */
    uint64_t data_start;
    const float *params; /* model source: entries' begin is a float offset into params */
    unsigned char *raw;  /* read buffer */
};

static int fetch(struct source *src, const struct entry *e, float *out, struct nl_error *err)
{
    if (src->params) {
        memcpy(out, src->params + e->begin, e->count * sizeof(float));
        return 0;
    }
    size_t bytes = (size_t)(e->end - e->begin);
    unsigned char *raw = nl_realloc(src->raw, bytes ? bytes : 1);
    if (!raw)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", src->what);
    src->raw = raw;
    if (read_at(src->f, src->data_start + e->begin, raw, bytes) != 0)
        return nl_error_set(err, NL_EIO, "%s: cannot read tensor '%s'", src->what, e->name);
    convert(out, raw, (size_t)e->count, e->dt);
    return 0;
}

/* Matches m's tensors with the source's by name and shape, stages the matches in a copy of the
 * parameters and commits them when the load is whole (or partial loads are allowed). */
static int load_matching(struct nl_model *m, struct source *src, int partial, nl_warn_fn warn,
                         void *warn_ud, struct nl_safetensors_report *report, struct nl_error *err)
{
    struct nl_safetensors_report r = {0};
    struct text problems = {0};
    char name[2 * NL_NAME_MAX], line[512];
    int nproblems = 0, rc = 0;
    char *used = nl_calloc(src->count + 1, 1);
    float *staged = nl_alloc_floats(m->nparams);

    if (!used || !staged) {
        rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", src->what);
        goto out;
    }
    memcpy(staged, m->params, m->nparams * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        for (int k = 0; k < l->nparams; k++) {
            const struct nl_param *p = &l->params[k];
            struct entry *e = NULL;
            tensor_name(name, sizeof name, l, p);
            for (size_t j = 0; j < src->count; j++)
                if (strcmp(src->entries[j].name, name) == 0) {
                    e = &src->entries[j];
                    used[j] = 1;
                }
            if (l->fresh)
                continue; /* --replace-head: keeps its fresh initialisation */
            size_t mark = problems.len;
            if (!e) {
                put(&problems, "%s: missing, model wants ", name);
                put_shape(&problems, p);
            } else if (!same_shape(e, p)) {
                put(&problems, "%s: %s has ", name, src->params ? "run" : "file");
                put_entry_shape(&problems, e);
                put(&problems, ", model wants ");
                put_shape(&problems, p);
            } else if (!e->dt) {
                put(&problems, "%s: unsupported dtype (F32, F16, BF16 and F64 load)", name);
            } else {
                rc = fetch(src, e, staged + l->param_offset + p->offset, err);
                if (rc < 0)
                    goto out;
                r.loaded++;
                continue;
            }
            r.skipped++;
            nproblems++;
            if (partial && warn && !problems.oom) {
                snprintf(line, sizeof line, "%s: skipped %s", src->what, problems.s + mark);
                warn(warn_ud, line);
            }
            put(&problems, "\n");
        }
    }
    for (size_t j = 0; j < src->count; j++) {
        /* PyTorch's batchnorm counter (an int64 scalar) has no use here: not an error. */
        const char *suffix = strrchr(src->entries[j].name, '.');
        if (used[j] || (suffix && strcmp(suffix, ".num_batches_tracked") == 0))
            continue;
        r.unused++;
        nproblems++;
        size_t mark = problems.len;
        put(&problems, "%s: not in the model", src->entries[j].name);
        if (partial && warn && !problems.oom) {
            snprintf(line, sizeof line, "%s: ignored %s", src->what, problems.s + mark);
            warn(warn_ud, line);
        }
        put(&problems, "\n");
    }
    if (problems.oom) {
        rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", src->what);
        goto out;
    }
    if (nproblems && !partial) {
        /* One mismatch a line, as many as the message holds. */
        char list[NL_ERR_MAX];
        size_t used_len = 0;
        int shown = 0;
        list[0] = '\0';
        for (char *ln = problems.s; ln && *ln; shown++) {
            char *nl = strchr(ln, '\n');
            size_t n = nl ? (size_t)(nl - ln) : strlen(ln);
            if (used_len + n + 4 > sizeof list - 240)
                break;
            used_len +=
                (size_t)snprintf(list + used_len, sizeof list - used_len, "\n  %.*s", (int)n, ln);
            ln = nl ? nl + 1 : NULL;
        }
        if (shown < nproblems)
            snprintf(list + used_len, sizeof list - used_len, "\n  and %d more", nproblems - shown);
        rc = nl_error_set(err, NL_EINVAL,
                          "%s: %d tensor%s do%s not match the model (--init-partial loads the "
                          "rest):%s",
                          src->what, nproblems, nproblems == 1 ? "" : "s",
                          nproblems == 1 ? "es" : "", list);
        goto out;
    }
    if (r.loaded == 0 && m->nparams > 0) {
        rc = nl_error_set(err, NL_EINVAL, "%s: no tensor matches the model", src->what);
        goto out;
    }
    memcpy(m->params, staged, m->nparams * sizeof(float));
    if (report)
        *report = r;
out:
    nl_free(used);
    nl_free(staged);
    nl_free(problems.s);
    return rc;
}

int nl_safetensors_load(struct nl_model *m, const char *path, int partial, nl_warn_fn warn,
                        void *warn_ud, struct nl_safetensors_report *report, struct nl_error *err)
{
    struct nl_json_doc *doc = NULL;
    struct source src = {.what = path};
    unsigned char len[8];
    char *header = NULL;
    int rc = 0;
    struct stat st;
    FILE *f = fopen(path, "rb");

    if (!f)
        return nl_error_set(err, errno == ENOENT ? NL_ENOENT : NL_EIO, "%s: %s", path,
                            strerror(errno));
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return nl_error_set(err, NL_EIO, "%s: not a regular file", path);
    }
    if (fread(len, 1, 8, f) != 8) {
        fclose(f);
        return nl_error_set(err, NL_EFORMAT, "%s: not a safetensors file (shorter than 8 bytes)",
                            path);
    }
    uint64_t hlen = 0;
    for (int b = 7; b >= 0; b--)
        hlen = hlen << 8 | len[b];
    if (hlen < 2 || hlen > MAX_HEADER || 8 + hlen > (uint64_t)st.st_size) {
        fclose(f);
        return nl_error_set(err, NL_EFORMAT,
                            "%s: not a safetensors file (header length %llu, file %lld bytes)",
                            path, (unsigned long long)hlen, (long long)st.st_size);
    }
    src.f = f;
    src.data_start = 8 + hlen;
    const uint64_t data_size = (uint64_t)st.st_size - src.data_start;
    header = nl_malloc(hlen);
    if (!header) {
        rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    if (fread(header, 1, hlen, f) != hlen) {
        rc = nl_error_set(err, NL_EIO, "%s: cannot read the header", path);
        goto out;
    }
    rc = nl_json_parse(&doc, header, hlen, path, err);
    if (rc < 0)
        goto out;
    const struct nl_json *root = nl_json_root(doc);
    if (root->type != NL_JSON_OBJECT) {
        rc = nl_error_set(err, NL_EFORMAT, "%s: the header is not a JSON object", path);
        goto out;
    }
    src.entries = nl_calloc(root->count + 1, sizeof *src.entries);
    if (!src.entries) {
        rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (size_t i = 0; i < root->count; i++) {
        if (strcmp(root->items[i].key, "__metadata__") == 0)
            continue;
        rc = read_entry(&root->items[i], &src.entries[src.count], data_size, path, err);
        if (rc < 0)
            goto out;
        src.count++;
    }
    rc = check_entries(src.entries, src.count, path, err);
    if (rc == 0)
        rc = load_matching(m, &src, partial, warn, warn_ud, report, err);
out:
    fclose(f);
    nl_free(header);
    nl_free(src.raw);
    nl_free(src.entries);
    nl_json_free(doc);
    return rc;
}

int nl_weights_copy(struct nl_model *dst, const struct nl_model *src_model, const char *what,
                    int partial, nl_warn_fn warn, void *warn_ud,
                    struct nl_safetensors_report *report, struct nl_error *err)
{
    struct source src = {.what = what, .params = src_model->params};
    struct entry *entries;
    size_t n = 0;
    char(*names)[2 * NL_NAME_MAX];
    int rc;

    for (int i = 0; i < src_model->nlayers; i++)
        n += (size_t)src_model->layers[i].nparams;
    entries = nl_calloc(n + 1, sizeof *entries);
    names = nl_calloc(n + 1, sizeof *names);
    if (!entries || !names) {
        nl_free(entries);
        nl_free(names);
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", what);
    }
    n = 0;
    for (int i = 0; i < src_model->nlayers; i++) {
        const struct nl_layer *l = &src_model->layers[i];
        for (int k = 0; k < l->nparams; k++) {
            const struct nl_param *p = &l->params[k];
            struct entry *e = &entries[n];
            tensor_name(names[n], sizeof names[n], l, p);
            e->name = names[n];
            e->dt = &dtypes[0];
            e->ndim = p->ndim;
            for (int d = 0; d < p->ndim; d++)
                e->dims[d] = p->dims[d];
            e->count = p->count;
            e->begin = l->param_offset + p->offset;
            e->end = e->begin + p->count;
            n++;
        }
    }
    src.entries = entries;
    src.count = n;
    rc = load_matching(dst, &src, partial, warn, warn_ud, report, err);
    nl_free(entries);
    nl_free(names);
    return rc;
}
