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
 * parameters, so a failed load leaves the model as it was.
 *
 * Memory is bounded by what the file holds, whatever its header claims: the header is read
 * member by member (one tensor's JSON tree at a time, never the whole document as a tree), each
 * tensor kept as a small fixed record; the tensors' bytes may not add up to more than the data
 * section (they would overlap), and at most MAX_EMPTY tensors may have no bytes, so a file
 * names at most data/2 + MAX_EMPTY tensors. Tensors are found by name in a sorted index, and
 * partial loads warn about the first MAX_WARN mismatches and count the rest. */
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
enum { MAX_EMPTY = 1024, MAX_WARN = 20 };

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
    size_t name_at; /* while the header is read: the name's offset in the names buffer */
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

/* The entries sorted by name in *out (for lookups); no two may share a name (a JSON object
 * with a key twice: which one would load?). */
static int index_names(const struct entry *e, size_t n, const struct entry ***out, const char *path,
                       struct nl_error *err)
{
    const struct entry **v = nl_malloc((n + 1) * sizeof *v);

    *out = NULL;
    if (!v)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++)
        v[i] = &e[i];
    qsort(v, n, sizeof *v, by_name);
    for (size_t i = 1; i < n; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0) {
            int rc = nl_error_set(err, NL_EFORMAT, "%s: tensor '%s' appears twice in the header",
                                  path, v[i]->name);
            nl_free((void *)v);
            return rc;
        }
    *out = v;
    return 0;
}

/* No two tensors may share a byte of the data (one tensor's bytes read as another's). */
static int check_overlap(const struct entry *e, size_t n, const char *path, struct nl_error *err)
{
    const struct entry **v = nl_malloc((n + 1) * sizeof *v);
    int rc = 0;

    if (!v)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++)
        v[i] = &e[i];
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
    const struct entry **sorted; /* the entries by name */
    FILE *f;                     /* file source */
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

static const struct entry *find(const struct source *src, const char *name)
{
    size_t lo = 0, hi = src->count;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(src->sorted[mid]->name, name);
        if (c == 0)
            return src->sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The mismatches of a load: listed (as many as an error message holds) for a whole load's
 * error, each warned about for a partial one up to MAX_WARN, then counted. */
struct problems {
    struct text list; /* one a line, cut past NL_ERR_MAX bytes */
    int count, warned;
    const struct source *src;
    int partial;
    nl_warn_fn warn;
    void *warn_ud;
};

static void problem(struct problems *pr, const char *verb, const char *text)
{
    char line[512];

    pr->count++;
    if (pr->list.len < NL_ERR_MAX)
        put(&pr->list, "%s\n", text);
    if (pr->partial && pr->warn && pr->warned++ < MAX_WARN) {
        snprintf(line, sizeof line, "%s: %s %s", pr->src->what, verb, text);
        pr->warn(pr->warn_ud, line);
    }
}

/* Matches m's tensors with the source's by name and shape, stages the matches in a copy of the
 * parameters and commits them when the load is whole (or partial loads are allowed). */
static int load_matching(struct nl_model *m, struct source *src, int partial, nl_warn_fn warn,
                         void *warn_ud, struct nl_safetensors_report *report, struct nl_error *err)
{
    struct nl_safetensors_report r = {0};
    struct problems pr = {.src = src, .partial = partial, .warn = warn, .warn_ud = warn_ud};
    struct text one = {0};
    char name[2 * NL_NAME_MAX], line[512];
    int rc = 0;
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
            tensor_name(name, sizeof name, l, p);
            const struct entry *e = find(src, name);
            if (e)
                used[e - src->entries] = 1;
            if (l->fresh)
                continue; /* --replace-head: keeps its fresh initialisation */
            one.len = 0;
            if (!e) {
                put(&one, "%s: missing, model wants ", name);
                put_shape(&one, p);
            } else if (!same_shape(e, p)) {
                put(&one, "%s: %s has ", name, src->params ? "run" : "file");
                put_entry_shape(&one, e);
                put(&one, ", model wants ");
                put_shape(&one, p);
            } else if (!e->dt) {
                put(&one, "%s: unsupported dtype (F32, F16, BF16 and F64 load)", name);
            } else {
                rc = fetch(src, e, staged + l->param_offset + p->offset, err);
                if (rc < 0)
                    goto out;
                r.loaded++;
                continue;
            }
            r.skipped++;
            problem(&pr, "skipped", one.oom ? name : one.s);
        }
    }
    for (size_t j = 0; j < src->count; j++) {
        /* PyTorch's batchnorm counter (an int64 scalar) has no use here: not an error. */
        const char *suffix = strrchr(src->entries[j].name, '.');
        if (used[j] || (suffix && strcmp(suffix, ".num_batches_tracked") == 0))
            continue;
        r.unused++;
        one.len = 0;
        put(&one, "%s: not in the model", src->entries[j].name);
        problem(&pr, "ignored", one.oom ? src->entries[j].name : one.s);
    }
    if (pr.list.oom) {
        rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", src->what);
        goto out;
    }
    if (partial && warn && pr.warned > MAX_WARN) {
        snprintf(line, sizeof line, "%s: and %d more tensors skipped or ignored", src->what,
                 pr.warned - MAX_WARN);
        warn(warn_ud, line);
    }
    if (pr.count && !partial) {
        /* One mismatch a line, as many as the message holds. */
        char list[NL_ERR_MAX];
        size_t used_len = 0;
        int shown = 0;
        list[0] = '\0';
        for (char *ln = pr.list.s; ln && *ln; shown++) {
            char *nl = strchr(ln, '\n');
            size_t n = nl ? (size_t)(nl - ln) : strlen(ln);
            if (used_len + n + 4 > sizeof list - 240)
                break;
            used_len +=
                (size_t)snprintf(list + used_len, sizeof list - used_len, "\n  %.*s", (int)n, ln);
            ln = nl ? nl + 1 : NULL;
        }
        if (shown < pr.count)
            snprintf(list + used_len, sizeof list - used_len, "\n  and %d more", pr.count - shown);
        rc = nl_error_set(err, NL_EINVAL,
                          "%s: %d tensor%s do%s not match the model (--init-partial loads the "
                          "rest):%s",
                          src->what, pr.count, pr.count == 1 ? "" : "s", pr.count == 1 ? "es" : "",
                          list);
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
    nl_free(pr.list.s);
    nl_free(one.s);
    return rc;
}

/* The header, read member by member into entries (see the top of the file). */
struct header_read {
    const char *path;
    uint64_t data_size;
    struct entry *entries;
    size_t count, cap;
    char *names; /* the names, NUL-terminated one after the other */
    size_t names_len, names_cap;
    uint64_t bytes; /* the tensors' bytes so far */
    size_t empty;   /* tensors of no bytes so far */
    struct nl_error *err;
};

static int on_member(void *ud, const struct nl_json *v)
{
    struct header_read *h = ud;
    struct entry e;
    size_t n = strlen(v->key) + 1;

    if (strcmp(v->key, "__metadata__") == 0)
        return 0;
    int rc = read_entry(v, &e, h->data_size, h->path, h->err);
    if (rc < 0)
        return rc;
    /* Ranges inside the data that add up to more than it must overlap somewhere. */
    h->bytes += e.end - e.begin;
    if (h->bytes > h->data_size)
        return nl_error_set(h->err, NL_EFORMAT,
                            "%s: tensors overlap: by tensor '%s' their bytes add up to %llu, more "
                            "than the %llu bytes of data the file holds",
                            h->path, v->key, (unsigned long long)h->bytes,
                            (unsigned long long)h->data_size);
    if (e.begin == e.end && ++h->empty > MAX_EMPTY)
        return nl_error_set(h->err, NL_EFORMAT,
                            "%s: more than %d tensors hold no bytes (tensor '%s'); the header is "
                            "corrupt",
                            h->path, MAX_EMPTY, v->key);
    struct entry *entries = nl_grow(h->entries, &h->cap, h->count + 1, sizeof *entries, 64);
    char *names = nl_grow(h->names, &h->names_cap, h->names_len + n, 1, 4096);
    if (entries)
        h->entries = entries;
    if (names)
        h->names = names;
    if (!entries || !names)
        return nl_error_set(h->err, NL_ENOMEM, "%s: out of memory reading the header", h->path);
    memcpy(h->names + h->names_len, v->key, n);
    e.name = NULL; /* the buffer may still move */
    e.name_at = h->names_len;
    h->names_len += n;
    h->entries[h->count++] = e;
    return 0;
}

int nl_safetensors_load(struct nl_model *m, const char *path, int partial, nl_warn_fn warn,
                        void *warn_ud, struct nl_safetensors_report *report, struct nl_error *err)
{
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
    struct header_read hr = {.path = path, .data_size = data_size, .err = err};
    rc = nl_json_parse_members(header, hlen, path, on_member, &hr, err);
    nl_free(header);
    header = NULL;
    src.entries = hr.entries;
    src.count = hr.count;
    for (size_t i = 0; i < src.count; i++)
        src.entries[i].name = hr.names + src.entries[i].name_at;
    if (rc == 0)
        rc = index_names(src.entries, src.count, &src.sorted, path, err);
    if (rc == 0)
        rc = check_overlap(src.entries, src.count, path, err);
    if (rc == 0)
        rc = load_matching(m, &src, partial, warn, warn_ud, report, err);
    nl_free(hr.names);
out:
    fclose(f);
    nl_free(header);
    nl_free(src.raw);
    nl_free(src.entries);
    nl_free((void *)src.sorted);
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
    rc = index_names(entries, n, &src.sorted, what, err);
    if (rc == 0)
        rc = load_matching(dst, &src, partial, warn, warn_ud, report, err);
    nl_free((void *)src.sorted);
    nl_free(entries);
    nl_free(names);
    return rc;
}
