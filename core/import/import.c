/* The import side that every reader shares: choosing the reader by the source, the streaming
 * writer (statistics summed on the way, classes and preprocessing record at the end), and the
 * seeded stratified split. See core/import/import_internal.h.
 *
 * The writer stages the dataset under a name nobody can give (core/store/store.c) and commits every
 * CHUNK_SAMPLES samples or CHUNK_BYTES bytes, so the write lock is never held for long and a
 * training or a listing beside a long import does not wait for it; the last transaction renames
 * the staged dataset to its name, so people see all of it or nothing. An import that fails or is
 * interrupted removes what it staged; one killed with -9 is removed at the next open. */
#include "import_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/store/store_internal.h"
#include "nnlab/alloc.h"
#include "nnlab/rng.h"
#include "nnlab/text.h"

enum { CHUNK_SAMPLES = 4096, CHUNK_BYTES = 32 << 20 };

struct nl_writer {
    struct nl_store *s;
    char *name;           /* the dataset's name, given when the import publishes */
    int in_txn;           /* a chunk's transaction is open */
    uint32_t chunk_n;     /* samples in it */
    size_t chunk_bytes;   /* and their bytes */
    sqlite3_stmt *insert; /* (dataset, idx, split, label, data) */
    sqlite3_int64 dataset;
    struct nl_shape shape;
    enum nl_dtype dtype;
    size_t plane, bytes; /* values per channel; bytes per sample */
    uint32_t next_idx;
    uint32_t count[NL_NSPLITS];
    uint32_t *train_count; /* per label, grown as labels appear */
    int ncount;
    /* Per channel over the train split. uint8: exact integer sums of pixels. float: sums of
     * x - shift (the channel's first value), which keeps the variance accurate. */
    uint64_t *usum, *usumsq;
    double *fshift, *fsum, *fsumsq;
    uint64_t nstat; /* train samples summed */
};

static int oom(struct nl_error *err)
{
    return nl_error_set(err, NL_ENOMEM, "out of memory");
}

static void writer_free(struct nl_writer *w)
{
    if (!w)
        return;
    sqlite3_finalize(w->insert);
    nl_free(w->name);
    nl_free(w->train_count);
    nl_free(w->usum);
    nl_free(w->usumsq);
    nl_free(w->fshift);
    nl_free(w->fsum);
    nl_free(w->fsumsq);
    nl_free(w);
}

/* Removes the staged dataset (best effort: what is left is removed at the next open). */
static void unstage(struct nl_writer *w)
{
    struct nl_error ignored = {0};

    sqlite3_finalize(w->insert);
    w->insert = NULL;
    nl_store_rollback(w->s);
    w->in_txn = 0;
    if (w->dataset <= 0 || nl_store_begin(w->s, &ignored) < 0)
        return;
    if (nl_store_drop_dataset(w->s, w->dataset, &ignored) >= 0 &&
        nl_store_commit(w->s, &ignored) == 0)
        return;
    nl_store_rollback(w->s);
}

void nl_writer_abort(struct nl_writer *w)
{
    if (!w)
        return;
    unstage(w);
    writer_free(w);
}

/* Opens the next chunk's transaction when none is open. */
static int chunk_begin(struct nl_writer *w, struct nl_error *err)
{
    int rc;

    if (w->in_txn)
        return 0;
    rc = nl_store_begin(w->s, err);
    if (rc == 0 && !w->insert)
        rc = nl_store_preparef(w->s, &w->insert, err,
                               "INSERT INTO samples_%lld (idx, split, label, data) "
                               "VALUES (?, ?, ?, ?)",
                               (long long)w->dataset);
    if (rc) {
        nl_store_rollback(w->s);
        return rc;
    }
    w->in_txn = 1;
    w->chunk_n = 0;
    w->chunk_bytes = 0;
    return 0;
}

/* Commits a chunk and, unless it is the last, leaves the write lock free for a moment: a
 * training waiting to record an epoch (polling every 2 ms, core/store/store.c) takes it then. */
static int chunk_commit(struct nl_writer *w, int last, struct nl_error *err)
{
    struct timespec pause = {0, 10 * 1000000L};
    int rc;

    /* The insert statement must be finished before COMMIT. */
    sqlite3_finalize(w->insert);
    w->insert = NULL;
    w->in_txn = 0;
    rc = nl_store_commit(w->s, err);
    if (rc == 0 && !last)
        nanosleep(&pause, NULL);
    return rc;
}

int nl_writer_begin(struct nl_writer **out, struct nl_store *s, const struct nl_writer_spec *spec,
                    struct nl_error *err)
{
    struct nl_writer *w;
    sqlite3_stmt *st = NULL;
    char staged[512];
    int c = spec->shape.c, rc;

    *out = NULL;
    rc = nl_store_check_name("dataset", spec->name, err);
    if (rc)
        return rc;
    if (c < 1 || spec->shape.h < 1 || spec->shape.w < 1)
        return nl_error_set(err, NL_EINVAL, "bad sample shape %d x %d x %d", c, spec->shape.h,
                            spec->shape.w);
    w = nl_calloc(1, sizeof *w);
    if (!w)
        return oom(err);
    w->s = s;
    w->shape = spec->shape;
    w->dtype = spec->dtype;
    w->plane = (size_t)spec->shape.h * spec->shape.w;
    w->bytes = nl_shape_size(spec->shape) * (spec->dtype == NL_F32 ? sizeof(float) : 1);
    if (spec->dtype == NL_U8) {
        w->usum = nl_calloc((size_t)c, sizeof *w->usum);
        w->usumsq = nl_calloc((size_t)c, sizeof *w->usumsq);
        if (!w->usum || !w->usumsq) {
            writer_free(w);
            return oom(err);
        }
    } else {
        w->fshift = nl_calloc((size_t)c, sizeof *w->fshift);
        w->fsum = nl_calloc((size_t)c, sizeof *w->fsum);
        w->fsumsq = nl_calloc((size_t)c, sizeof *w->fsumsq);
        if (!w->fshift || !w->fsum || !w->fsumsq) {
            writer_free(w);
            return oom(err);
        }
    }
    w->name = nl_strdup(spec->name);
    if (!w->name) {
        writer_free(w);
        return oom(err);
    }
    rc = nl_dataset_exists(s, spec->name, err);
    if (rc == 1)
        rc = nl_error_set(err, NL_EEXIST, "dataset '%s' already exists (nnlab rm %s first)",
                          spec->name, spec->name);
    if (rc == 0 && nl_store_staging_name(staged, sizeof staged, spec->name) < 0)
        rc = nl_error_set(err, NL_EINVAL, "dataset name '%.40s...' is too long", spec->name);
    if (rc == 0)
        rc = nl_store_begin(s, err);
    if (rc) {
        writer_free(w);
        return rc;
    }
    rc = nl_store_prepare(s, &st,
                          "INSERT INTO datasets (name, kind, source, channels, height, width, "
                          "dtype, nclasses, preprocessing) VALUES (?, ?, ?, ?, ?, ?, ?, 0, '{}')",
                          err);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, staged, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, spec->kind, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, spec->source, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 4, c);
        sqlite3_bind_int(st, 5, spec->shape.h);
        sqlite3_bind_int(st, 6, spec->shape.w);
        sqlite3_bind_int(st, 7, (int)spec->dtype);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = nl_store_db_error(s, err, "creating the dataset");
    }
    sqlite3_finalize(st);
    if (rc == 0) {
        sqlite3_int64 id = sqlite3_last_insert_rowid(nl_store_sqlite(s));
        rc = nl_store_create_samples(s, id, err);
        if (rc == 0)
            rc = nl_store_commit(s, err);
        if (rc == 0)
            w->dataset = id;
    } else {
        nl_store_rollback(s);
    }
    if (rc) {
        nl_writer_abort(w);
        return rc;
    }
    *out = w;
    return 0;
}

static void add_stats(struct nl_writer *w, const void *data)
{
    const size_t plane = w->plane;

    for (int c = 0; c < w->shape.c; c++) {
        if (w->dtype == NL_U8) {
            const uint8_t *x = (const uint8_t *)data + (size_t)c * plane;
            uint64_t sum = 0, sumsq = 0;
            for (size_t p = 0; p < plane; p++) {
                sum += x[p];
                sumsq += (uint32_t)x[p] * x[p];
            }
            w->usum[c] += sum;
            w->usumsq[c] += sumsq;
        } else {
            const float *x = (const float *)data + (size_t)c * plane;
            if (w->nstat == 0)
                w->fshift[c] = x[0];
            for (size_t p = 0; p < plane; p++) {
                double v = (double)x[p] - w->fshift[c];
                w->fsum[c] += v;
                w->fsumsq[c] += v * v;
            }
        }
    }
    w->nstat++;
}

static int writer_put(struct nl_writer *w, enum nl_split split, int label, int32_t stored,
                      const void *data, struct nl_error *err);

int nl_writer_add(struct nl_writer *w, enum nl_split split, int label, const void *data,
                  struct nl_error *err)
{
    if (split < 0 || split >= NL_NSPLITS || label < 0 || label >= 65536)
        return nl_error_set(err, NL_EINVAL, "sample %u: bad split %d or label %d", w->next_idx,
                            (int)split, label);
    return writer_put(w, split, label, label, data, err);
}

int nl_writer_add_target(struct nl_writer *w, enum nl_split split, float target, const void *data,
                         struct nl_error *err)
{
    int32_t bits;

    if (split < 0 || split >= NL_NSPLITS || !isfinite(target))
        return nl_error_set(err, NL_EINVAL, "sample %u: bad split %d or target %g", w->next_idx,
                            (int)split, (double)target);
    memcpy(&bits, &target, sizeof bits);
    return writer_put(w, split, 0, bits, data, err);
}

static int writer_put(struct nl_writer *w, enum nl_split split, int label, int32_t stored,
                      const void *data, struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc = 0;

    if (split == NL_TRAIN) {
        if (label >= w->ncount) {
            size_t n = (size_t)w->ncount;
            uint32_t *p = nl_grow(w->train_count, &n, (size_t)label + 1, sizeof *p, 16);
            if (!p)
                return oom(err);
            memset(p + w->ncount, 0, (n - (size_t)w->ncount) * sizeof *p);
            w->train_count = p;
            w->ncount = (int)n;
        }
        w->train_count[label]++;
        add_stats(w, data);
    }
    rc = chunk_begin(w, err);
    if (rc)
        return rc;
    st = w->insert;
    sqlite3_bind_int64(st, 1, w->next_idx);
    sqlite3_bind_int(st, 2, (int)split);
    sqlite3_bind_int(st, 3, stored);
    sqlite3_bind_blob(st, 4, data, (int)w->bytes, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = nl_store_db_error(w->s, err, "storing a sample");
    sqlite3_reset(st);
    if (rc == 0) {
        w->next_idx++;
        w->count[split]++;
        w->chunk_bytes += w->bytes;
        if (++w->chunk_n >= CHUNK_SAMPLES || w->chunk_bytes >= CHUNK_BYTES)
            rc = chunk_commit(w, 0, err);
    }
    return rc;
}

int nl_writer_add_word(struct nl_writer *w, int id, const char *word, int64_t count,
                       struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc = chunk_begin(w, err);

    if (rc)
        return rc;
    rc = nl_store_prepare(w->s, &st,
                          "INSERT INTO vocab (dataset, id, word, count) VALUES (?, ?, ?, ?)", err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, w->dataset);
    sqlite3_bind_int(st, 2, id);
    sqlite3_bind_text(st, 3, word, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, count);
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = nl_store_db_error(w->s, err, "storing the vocabulary");
    sqlite3_finalize(st);
    if (rc == 0 && ++w->chunk_n >= CHUNK_SAMPLES)
        rc = chunk_commit(w, 0, err);
    return rc;
}

uint32_t nl_writer_count(const struct nl_writer *w, enum nl_split split)
{
    return w->count[split];
}

static void put_le32f(unsigned char *p, float v)
{
    uint32_t u;

    memcpy(&u, &v, 4);
    p[0] = (unsigned char)u;
    p[1] = (unsigned char)(u >> 8);
    p[2] = (unsigned char)(u >> 16);
    p[3] = (unsigned char)(u >> 24);
}

/* mean and std per channel, little-endian float32 into mean_le and std_le (4 bytes each): the
 * train split's, or fixed ones (--normalize imagenet or none). */
static void final_stats(const struct nl_writer *w, enum nl_normalize norm, unsigned char *mean_le,
                        unsigned char *std_le)
{
    static const float imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
    static const float imagenet_std[3] = {0.229f, 0.224f, 0.225f};

    for (int c = 0; c < w->shape.c; c++) {
        double n = (double)w->nstat * (double)w->plane, mean = 0, std = 1;
        if (norm == NL_NORM_IMAGENET && w->shape.c == 3) {
            put_le32f(mean_le + 4 * c, imagenet_mean[c]);
            put_le32f(std_le + 4 * c, imagenet_std[c]);
            continue;
        }
        if (norm == NL_NORM_NONE) {
            n = 0;
        } else if (n > 0 && w->dtype == NL_U8) {
            double m = (double)w->usum[c] / n;
            double var = (double)w->usumsq[c] / n - m * m;
            mean = m / 255.0;
            std = var > 0 ? sqrt(var) / 255.0 : 0;
        } else if (n > 0) {
            double m = w->fsum[c] / n;
            double var = w->fsumsq[c] / n - m * m;
            mean = m + w->fshift[c];
            std = var > 0 ? sqrt(var) : 0;
        }
        /* A constant channel or feature: divide by 1, not by 0. */
        if (!(std > 1e-12) || !isfinite(std))
            std = 1;
        put_le32f(mean_le + 4 * c, (float)mean);
        put_le32f(std_le + 4 * c, (float)std);
    }
}

int nl_writer_commit(struct nl_writer *w, int nclasses, const char *const *names,
                     const char *preprocessing, const struct nl_import_opts *opts,
                     struct nl_error *err)
{
    unsigned char *mean_le = nl_malloc((size_t)w->shape.c * 4);
    unsigned char *std_le = nl_malloc((size_t)w->shape.c * 4);
    sqlite3_stmt *st = NULL;
    int rc = 0;

    if (!mean_le || !std_le || !preprocessing)
        rc = oom(err);
    if (rc == 0 && (nclasses < 1 || nclasses > 65536))
        rc = nl_error_set(err, NL_EFORMAT, "%d classes; a dataset needs 1 to 65536", nclasses);
    if (rc == 0 && w->next_idx == 0)
        rc = nl_error_set(err, NL_EFORMAT, "no samples to import");
    if (rc == 0)
        rc = chunk_begin(w, err);
    if (rc == 0)
        rc = nl_store_prepare(w->s, &st,
                              "INSERT INTO classes (dataset, label, name) VALUES (?, ?, ?)", err);
    for (int k = 0; k < nclasses && rc == 0; k++) {
        char digits[16];
        snprintf(digits, sizeof digits, "%d", k);
        sqlite3_bind_int64(st, 1, w->dataset);
        sqlite3_bind_int(st, 2, k);
        sqlite3_bind_text(st, 3, names && names[k] ? names[k] : digits, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = nl_store_db_error(w->s, err, "storing the class names");
        sqlite3_reset(st);
        if (rc == 0 && (k >= w->ncount || w->train_count[k] == 0) && opts && opts->warn) {
            char msg[160];
            snprintf(msg, sizeof msg, "class %d (%.100s) has no samples in the train split", k,
                     names && names[k] ? names[k] : digits);
            opts->warn(opts->warn_ud, msg);
        }
    }
    sqlite3_finalize(st);
    st = NULL;
    if (rc == 0) {
        final_stats(w, opts ? opts->normalize : NL_NORM_DATASET, mean_le, std_le);
        rc = nl_store_prepare(w->s, &st,
                              "UPDATE datasets SET nclasses = ?, norm_mean = ?, norm_std = ?, "
                              "preprocessing = ? WHERE id = ?",
                              err);
    }
    if (rc == 0) {
        sqlite3_bind_int(st, 1, nclasses);
        sqlite3_bind_blob(st, 2, mean_le, 4 * w->shape.c, SQLITE_STATIC);
        sqlite3_bind_blob(st, 3, std_le, 4 * w->shape.c, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, preprocessing, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, w->dataset);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = nl_store_db_error(w->s, err, "storing the dataset's statistics");
    }
    sqlite3_finalize(st);
    st = NULL;
    /* Publish: the staged dataset takes its name, unless another import took it meanwhile. */
    if (rc == 0) {
        rc = nl_dataset_exists(w->s, w->name, err);
        if (rc == 1)
            rc = nl_error_set(err, NL_EEXIST,
                              "dataset '%s' was created by another import meanwhile (nnlab rm "
                              "%s first)",
                              w->name, w->name);
    }
    if (rc == 0)
        rc = nl_store_prepare(w->s, &st, "UPDATE datasets SET name = ? WHERE id = ?", err);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, w->name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, w->dataset);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = nl_store_db_error(w->s, err, "naming the dataset");
    }
    sqlite3_finalize(st);
    if (rc == 0)
        rc = chunk_commit(w, 1, err);
    if (rc)
        unstage(w);
    nl_free(mean_le);
    nl_free(std_le);
    writer_free(w);
    return rc;
}

int nl_split_assign(const int32_t *labels, uint32_t n, int nclasses, float val, float test,
                    uint64_t seed, uint8_t *split, struct nl_error *err)
{
    uint32_t *start = nl_calloc((size_t)nclasses + 1, sizeof *start);
    uint32_t *fill = nl_malloc(((size_t)nclasses + 1) * sizeof *fill);
    uint32_t *order = nl_malloc(((size_t)n + 1) * sizeof *order);
    struct nl_rng rng;

    if (!start || !fill || !order) {
        nl_free(start);
        nl_free(fill);
        nl_free(order);
        return nl_error_set(err, NL_ENOMEM, "out of memory choosing the splits");
    }
    for (uint32_t i = 0; i < n; i++)
        if (labels[i] >= 0 && labels[i] < nclasses && split[i] == NL_TRAIN)
            start[labels[i] + 1]++;
    for (int k = 0; k < nclasses; k++)
        start[k + 1] += start[k];
    memcpy(fill, start, ((size_t)nclasses + 1) * sizeof *fill);
    for (uint32_t i = 0; i < n; i++)
        if (labels[i] >= 0 && labels[i] < nclasses && split[i] == NL_TRAIN)
            order[fill[labels[i]]++] = i;
    nl_rng_seed(&rng, seed);
    for (int k = 0; k < nclasses; k++) {
        uint32_t count = start[k + 1] - start[k];
        uint32_t nval = (uint32_t)lround((double)val * count);
        uint32_t ntest = (uint32_t)lround((double)test * count);
        if (count == 0)
            continue;
        if (nval > count - 1)
            nval = count - 1;
        if (ntest > count - 1 - nval)
            ntest = count - 1 - nval;
        nl_rng_shuffle(&rng, order + start[k], count);
        for (uint32_t j = 0; j < nval; j++)
            split[order[start[k] + j]] = NL_VAL;
        for (uint32_t j = nval; j < nval + ntest; j++)
            split[order[start[k] + j]] = NL_TEST;
    }
    nl_free(start);
    nl_free(fill);
    nl_free(order);
    return 0;
}

void nl_text_printf(struct nl_text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (t->failed)
        return;
    for (;;) {
        size_t room = t->cap - t->len;
        va_start(ap, fmt);
        n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if (t->s && (size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        char *p = nl_grow(t->s, &t->cap, t->len + (size_t)n + 1, 1, 256);
        if (!p) {
            t->failed = 1;
            return;
        }
        t->s = p;
    }
}

static void put_text(void *ud, const char *p, size_t n)
{
    nl_text_printf(ud, "%.*s", (int)n, p);
}

void nl_text_json_str(struct nl_text *t, const char *s)
{
    nl_json_write(put_text, t, s);
}

void nl_text_free(struct nl_text *t)
{
    nl_free(t->s);
    t->s = NULL;
    t->len = t->cap = 0;
}

int nl_open_regular(const char *path, struct nl_error *err)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), flags;

    if (fd < 0)
        return nl_error_set(err, errno == ENOENT ? NL_ENOENT : NL_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    if (fstat(fd, &st) != 0) {
        nl_error_set(err, NL_EIO, "%s: %s", path, strerror(errno));
        close(fd);
        return err->code;
    }
    if (!S_ISREG(st.st_mode)) {
        nl_error_set(err, NL_EFORMAT, "%s: not a regular file (%s)", path,
                     S_ISFIFO(st.st_mode)   ? "a FIFO"
                     : S_ISDIR(st.st_mode)  ? "a folder"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "a device");
        close(fd);
        return err->code;
    }
    flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

FILE *nl_fopen_regular(const char *path, struct nl_error *err)
{
    int fd = nl_open_regular(path, err);
    FILE *f;

    if (fd < 0)
        return NULL;
    f = fdopen(fd, "rb");
    if (!f) {
        nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
        close(fd);
    }
    return f;
}

void nl_import_describe_source(const char *const *paths, int npaths, char *out, size_t size)
{
    size_t used = 0;

    out[0] = '\0';
    for (int i = 0; i < npaths && used < size; i++) {
        char *abs = realpath(paths[i], NULL);
        int n = snprintf(out + used, size - used, "%s%s", i ? ", " : "", abs ? abs : paths[i]);
        free(abs);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

static int is_idx_name(const char *s)
{
    return strstr(s, "idx1-ubyte") || strstr(s, "idx3-ubyte");
}

/* Whether dir holds IDX files (train-images...). */
static int has_idx(const char *dir)
{
    static const char *const names[] = {"train-images-idx3-ubyte", "train-images.idx3-ubyte",
                                        "train-images-idx3-ubyte.gz", "train-images.idx3-ubyte.gz"};
    char path[PATH_MAX];
    struct stat st;

    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int n = snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (n > 0 && (size_t)n < sizeof path && stat(path, &st) == 0)
            return 1;
    }
    return 0;
}

/* Options that only one kind of source takes are refused for the others rather than ignored. */
static int check_options(const struct nl_import_opts *o, const char *path, int png, int csv,
                         struct nl_error *err)
{
    const char *kind = png ? "an image folder" : csv ? "a CSV file" : "IDX files";
    if (png < 0) { /* a folder of text class folders */
        kind = "a folder of text";
        png = 0;
    }
    if (!png && (o->channels || o->width || o->height || o->shorter || o->crop_w || o->normalize))
        return nl_error_set(err, NL_EINVAL,
                            "%s: --gray, --rgb, --resize and --normalize apply to image folders; "
                            "this is %s",
                            path, kind);
    if (!csv && o->label)
        return nl_error_set(err, NL_EINVAL, "%s: --label applies to CSV files; this is %s", path,
                            kind);
    if (!csv && (o->regression || o->categorical || o->missing))
        return nl_error_set(err, NL_EINVAL,
                            "%s: --task, --categorical and --missing apply to CSV files; this is "
                            "%s",
                            path, kind);
    if (!csv && o->text)
        return nl_error_set(err, NL_EINVAL, "%s: --text applies to CSV files; this is %s", path,
                            kind);
    return 0;
}

int nl_import(struct nl_store *s, const char *name, const char *const *paths, int npaths,
              const struct nl_import_opts *opts, struct nl_error *err)
{
    static const struct nl_import_opts defaults = {.seed = 1};
    struct stat st;

    if (!opts)
        opts = &defaults;
    if (npaths < 1 || !paths)
        return nl_error_set(err, NL_EINVAL, "no source given");
    if (!(opts->val_fraction >= 0 && opts->test_fraction >= 0 &&
          opts->val_fraction + opts->test_fraction < 1))
        return nl_error_set(err, NL_EINVAL,
                            "validation and test fractions %g and %g must be >= 0 with a sum "
                            "below 1",
                            (double)opts->val_fraction, (double)opts->test_fraction);
    if (npaths == 2)
        return check_options(opts, paths[0], 0, 0, err) < 0
                   ? err->code
                   : nl_import_idx(s, name, paths, npaths, opts, err);
    if (npaths > 2)
        return nl_error_set(err, NL_EINVAL,
                            "give one source (a folder or a .csv file), or an IDX images file and "
                            "its labels file (got %d paths)",
                            npaths);
    if (stat(paths[0], &st) != 0)
        return nl_error_set(err, errno == ENOENT ? NL_ENOENT : NL_EIO, "%s: cannot open: %s",
                            paths[0], strerror(errno));
    if (S_ISDIR(st.st_mode) && !has_idx(paths[0]) && nl_text_dir_probe(paths[0]))
        return check_options(opts, paths[0], -1, 0, err) < 0
                   ? err->code
                   : nl_import_text_dir(s, name, paths[0], opts, err);
    if (!opts->text && (opts->vocab || opts->max_len || opts->keep_end))
        return nl_error_set(err, NL_EINVAL,
                            "%s: --vocab, --max-len and --keep apply to text (a folder of class "
                            "folders of .txt files, or a CSV file with --text)",
                            paths[0]);
    if (S_ISDIR(st.st_mode)) {
        int idx = has_idx(paths[0]);
        if (check_options(opts, paths[0], !idx, 0, err) < 0)
            return err->code;
        return idx ? nl_import_idx(s, name, paths, 1, opts, err)
                   : nl_import_image_dir(s, name, paths[0], opts, err);
    }
    if (ends_with(paths[0], ".csv") || ends_with(paths[0], ".csv.txt") ||
        ends_with(paths[0], ".tsv"))
        return check_options(opts, paths[0], 0, 1, err) < 0 ? err->code
               : opts->text ? nl_import_text_csv(s, name, paths[0], opts, err)
                            : nl_import_csv(s, name, paths[0], opts, err);
    if (opts->text)
        return nl_error_set(err, NL_EINVAL, "%s: --text applies to CSV files (.csv, .tsv)",
                            paths[0]);
    if (is_idx_name(paths[0]))
        return nl_error_set(err, NL_EINVAL,
                            "%s: an IDX file alone; give its folder, or the images file and the "
                            "labels file",
                            paths[0]);
    return nl_error_set(
        err, NL_EINVAL,
        "%s: not a source nnlab imports; give a folder of IDX files, an IDX "
        "images file and labels file, a folder of PNG/JPEG class folders, or a .csv "
        "file",
        paths[0]);
}
