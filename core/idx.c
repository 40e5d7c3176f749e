/* Importing MNIST-family IDX files (MNIST, Fashion-MNIST, KMNIST...) into the store.
 *
 * An IDX file is a big-endian header, magic 0x000008NN (0x08: unsigned bytes; NN: number of
 * dimensions), one uint32 per dimension, then the bytes. Images are 0x00000803 (n, rows, cols),
 * labels 0x00000801 (n). Files may be gzip-compressed; zlib reads plain files transparently.
 *
 * The whole import is one transaction. Labels are read one split at a time (n bytes); images are
 * streamed from the file into INSERTs a chunk at a time. The validation split is chosen from the
 * train labels before the images are read, so every sample is written once with its final split
 * and the normalisation statistics are summed on the way. */
#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/rng.h"
#include "store_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define MAX_SAMPLE_BYTES (1u << 24)   /* one image: 16 MiB */
#define MAX_FILE_BYTES   (1ull << 31) /* all images of one file: 2 GiB */
#define CHUNK_BYTES      (1u << 20)   /* images read per chunk, at least one image */
#define MAX_CLASSES      256

/* One open IDX file. dims[0] is the number of items. */
struct idx_file {
    const char *path;
    gzFile gz;
    uint32_t dims[3];
};

/* One split's pair of files. */
struct idx_pair {
    char images[PATH_MAX], labels[PATH_MAX];
    enum nl_split split;
    struct idx_file im, lb;
};

static const char *const fashion_names[10] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot",
};

static int file_error(struct nl_error *err, const char *path, const char *what)
{
    int e = errno;
    return nl_error_set(err, e == ENOENT ? NL_ENOENT : NL_EIO, "%s: %s: %s", path, what,
                        strerror(e));
}

/* Reads up to n bytes; *got is how many came. A short count with 0 returned is the end of the
 * file; gzip and read errors are reported naming the file. */
static int idx_read(struct idx_file *f, void *buf, size_t n, size_t *got, struct nl_error *err)
{
    unsigned char *p = buf;
    size_t done = 0;

    while (done < n) {
        size_t want = n - done < (1u << 30) ? n - done : (1u << 30);
        int r = gzread(f->gz, p + done, (unsigned)want);
        int zerr;
        const char *msg;

        if (r > 0) {
            done += (size_t)r;
            continue;
        }
        *got = done;
        msg = gzerror(f->gz, &zerr);
        /* zlib's message starts with the path it was opened with. */
        if (strncmp(msg, f->path, strlen(f->path)) == 0 && msg[strlen(f->path)] == ':')
            msg += strlen(f->path) + (msg[strlen(f->path) + 1] == ' ' ? 2 : 1);
        if (zerr == Z_ERRNO)
            return file_error(err, f->path, "read error");
        if (zerr == Z_BUF_ERROR)
            return nl_error_set(err, NL_EFORMAT, "%s: truncated: the gzip data ends early (%s)",
                                f->path, msg);
        if (zerr != Z_OK && zerr != Z_STREAM_END)
            return nl_error_set(err, NL_EFORMAT, "%s: corrupt gzip data: %s", f->path, msg);
        return 0;
    }
    *got = done;
    return 0;
}

static int truncated(struct nl_error *err, const char *path, const char *what, uint64_t want,
                     uint64_t found)
{
    return nl_error_set(err, NL_EFORMAT, "%s: truncated: expected %llu bytes of %s, found %llu",
                        path, (unsigned long long)want, what, (unsigned long long)found);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Opens path and reads its header; images have 3 dimensions, labels 1. */
static int idx_open(struct idx_file *f, const char *path, int images, struct nl_error *err)
{
    const char *what = images ? "IDX image file" : "IDX label file";
    uint32_t want = images ? IDX_IMAGES_MAGIC : IDX_LABELS_MAGIC;
    size_t hlen = images ? 16 : 8, got;
    unsigned char h[16];
    struct stat st;
    uint32_t magic;
    int rc;

    f->path = path;
    if (stat(path, &st) != 0)
        return file_error(err, path, "cannot open");
    if (S_ISDIR(st.st_mode))
        return nl_error_set(err, NL_EINVAL, "%s: is a folder, expected an %s", path, what);
    errno = 0;
    f->gz = gzopen(path, "rb");
    if (!f->gz)
        return errno ? file_error(err, path, "cannot open")
                     : nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    gzbuffer(f->gz, 1u << 17);
    rc = idx_read(f, h, hlen, &got, err);
    if (rc)
        return rc;
    if (got == 0)
        return nl_error_set(err, NL_EFORMAT, "%s: empty file, expected an %s", path, what);
    if (got < 4)
        return nl_error_set(err, NL_EFORMAT, "%s: not an %s (only %zu bytes)", path, what, got);
    magic = be32(h);
    if (magic != want)
        return nl_error_set(err, NL_EFORMAT, "%s: not an %s (magic 0x%08x, expected 0x%08x)%s",
                            path, what, magic, want,
                            magic == (images ? IDX_LABELS_MAGIC : IDX_IMAGES_MAGIC)
                                ? "; are the images and labels files swapped?"
                                : "");
    if (got < hlen)
        return truncated(err, path, "header", hlen, got);
    f->dims[0] = be32(h + 4);
    f->dims[1] = images ? be32(h + 8) : 1;
    f->dims[2] = images ? be32(h + 12) : 1;
    if (f->dims[0] == 0 || f->dims[1] == 0 || f->dims[2] == 0) {
        const char *items = images ? "images" : "labels";
        return nl_error_set(err, NL_EFORMAT, "%s: no %s in this file (dimensions %u x %u x %u)",
                            path, items, f->dims[0], f->dims[1], f->dims[2]);
    }
    if ((uint64_t)f->dims[1] * f->dims[2] > MAX_SAMPLE_BYTES ||
        (uint64_t)f->dims[0] * f->dims[1] * f->dims[2] > MAX_FILE_BYTES)
        return nl_error_set(err, NL_EFORMAT,
                            "%s: implausible dimensions %u x %u x %u (limits: %u bytes an image, "
                            "%llu bytes a file)",
                            path, f->dims[0], f->dims[1], f->dims[2], MAX_SAMPLE_BYTES,
                            (unsigned long long)MAX_FILE_BYTES);
    return 0;
}

static void idx_close(struct idx_file *f)
{
    if (f->gz)
        gzclose_r(f->gz);
    f->gz = NULL;
}

/* After the last item: anything more is an error. */
static int idx_expect_end(struct idx_file *f, const char *items, struct nl_error *err)
{
    unsigned char extra[64];
    size_t got;
    int rc = idx_read(f, extra, sizeof extra, &got, err);

    if (rc)
        return rc;
    if (got)
        return nl_error_set(err, NL_EFORMAT,
                            "%s: trailing data after the %u %s the header announces", f->path,
                            f->dims[0], items);
    return 0;
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Finds STEM-idxN-ubyte, STEM.idxN-ubyte, each possibly .gz, in dir. 1 found, 0 not. */
static int find_idx(const char *dir, const char *stem, int ndims, char *out)
{
    static const char *const forms[] = {"%s/%s-idx%d-ubyte", "%s/%s.idx%d-ubyte",
                                        "%s/%s-idx%d-ubyte.gz", "%s/%s.idx%d-ubyte.gz"};

    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        int n = snprintf(out, PATH_MAX, forms[i], dir, stem, ndims);
        if (n > 0 && n < PATH_MAX && is_file(out))
            return 1;
    }
    snprintf(out, PATH_MAX, "%s/%s-idx%d-ubyte", dir, stem, ndims);
    return 0;
}

/* Resolves the import's arguments into one or two pairs of files. */
static int resolve_pairs(const char *const *paths, int npaths, struct idx_pair *pairs, int *npairs,
                         struct nl_error *err)
{
    struct stat st;

    *npairs = 0;
    if (npaths == 2) {
        if (strlen(paths[0]) >= PATH_MAX || strlen(paths[1]) >= PATH_MAX)
            return nl_error_set(err, NL_EINVAL, "a path is longer than %d bytes", PATH_MAX - 1);
        strcpy(pairs[0].images, paths[0]);
        strcpy(pairs[0].labels, paths[1]);
        pairs[0].split = NL_TRAIN;
        *npairs = 1;
        return 0;
    }
    if (npaths != 1)
        return nl_error_set(err, NL_EINVAL,
                            "IDX import takes a folder, or an images file and a labels file "
                            "(got %d paths)",
                            npaths);
    if (stat(paths[0], &st) != 0)
        return file_error(err, paths[0], "cannot open");
    if (!S_ISDIR(st.st_mode))
        return nl_error_set(err, NL_EINVAL,
                            "%s: not a folder; give a folder holding train-images-idx3-ubyte and "
                            "train-labels-idx1-ubyte, or an images file and a labels file",
                            paths[0]);
    if (strlen(paths[0]) > PATH_MAX - 64)
        return nl_error_set(err, NL_EINVAL, "%s: path too long", paths[0]);
    if (!find_idx(paths[0], "train-images", 3, pairs[0].images))
        return nl_error_set(err, NL_ENOENT, "%s: no train-images-idx3-ubyte[.gz] in this folder",
                            paths[0]);
    if (!find_idx(paths[0], "train-labels", 1, pairs[0].labels))
        return nl_error_set(err, NL_ENOENT, "%s: no train-labels-idx1-ubyte[.gz] beside %s",
                            paths[0], pairs[0].images);
    pairs[0].split = NL_TRAIN;
    *npairs = 1;

    int have_im = find_idx(paths[0], "t10k-images", 3, pairs[1].images);
    int have_lb = find_idx(paths[0], "t10k-labels", 1, pairs[1].labels);
    if (have_im != have_lb)
        return nl_error_set(err, NL_ENOENT, "%s: %s has no matching %s", paths[0],
                            have_im ? pairs[1].images : pairs[1].labels,
                            have_im ? "t10k-labels-idx1-ubyte[.gz]"
                                    : "t10k-images-idx3-ubyte[.gz]");
    if (have_im) {
        pairs[1].split = NL_TEST;
        *npairs = 2;
    }
    return 0;
}

static int contains_fashion(const char *s)
{
    static const char word[] = "fashion";

    for (; *s; s++) {
        size_t i = 0;
        while (word[i] && tolower((unsigned char)s[i]) == word[i])
            i++;
        if (!word[i])
            return 1;
    }
    return 0;
}

/* Reads a split's labels (n bytes) whole, checking the file ends where its header says. */
static int read_labels(struct idx_file *lb, uint8_t *labels, struct nl_error *err)
{
    size_t got;
    int rc = idx_read(lb, labels, lb->dims[0], &got, err);

    if (rc)
        return rc;
    if (got < lb->dims[0])
        return truncated(err, lb->path, "labels", lb->dims[0], got);
    return idx_expect_end(lb, "labels", err);
}

/* Marks a stratified, seeded share of the train samples as validation: per class, round(f * count)
 * samples (keeping at least one in train) chosen by a shuffle of that class's samples. Classes
 * are visited in label order, so the same seed gives the same split. */
static int carve_val(const uint8_t *labels, uint32_t n, float f, uint64_t seed, uint8_t *split,
                     struct nl_error *err)
{
    uint32_t start[MAX_CLASSES + 1] = {0}, fill[MAX_CLASSES];
    uint32_t *order = nl_malloc((size_t)n * sizeof *order);
    struct nl_rng rng;

    if (!order)
        return nl_error_set(err, NL_ENOMEM, "out of memory choosing the validation split");
    for (uint32_t i = 0; i < n; i++)
        start[labels[i] + 1]++;
    for (int k = 0; k < MAX_CLASSES; k++)
        start[k + 1] += start[k];
    memcpy(fill, start, sizeof fill);
    for (uint32_t i = 0; i < n; i++)
        order[fill[labels[i]]++] = i;
    nl_rng_seed(&rng, seed);
    for (int k = 0; k < MAX_CLASSES; k++) {
        uint32_t count = start[k + 1] - start[k];
        uint32_t nval = (uint32_t)lround((double)f * count);
        if (count == 0)
            continue;
        if (nval > count - 1)
            nval = count - 1;
        nl_rng_shuffle(&rng, order + start[k], count);
        for (uint32_t j = 0; j < nval; j++)
            split[order[start[k] + j]] = NL_VAL;
    }
    nl_free(order);
    return 0;
}

/* State of one import. */
struct import {
    struct nl_store *s;
    sqlite3_stmt *insert; /* (dataset, idx, split, label, data) */
    sqlite3_int64 dataset;
    uint32_t next_idx;
    int max_label; /* over all splits; -1 before the first */
    uint32_t train_count[MAX_CLASSES];
    uint64_t sum, sumsq, npix; /* over the pixels of the train split, in pixel units */
};

static int insert_sample(struct import *im, uint32_t idx, int split, int label, const void *data,
                         int bytes, struct nl_error *err)
{
    sqlite3_stmt *st = im->insert;
    int rc = 0;

    sqlite3_bind_int64(st, 1, im->dataset);
    sqlite3_bind_int64(st, 2, idx);
    sqlite3_bind_int(st, 3, split);
    sqlite3_bind_int(st, 4, label);
    sqlite3_bind_blob(st, 5, data, bytes, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = nl_store_db_error(im->s, err, "storing a sample");
    sqlite3_reset(st);
    return rc;
}

/* Imports one pair of files: labels whole, then images streamed a chunk at a time. */
static int import_pair(struct import *im, struct idx_pair *p, const struct nl_import_opts *opts,
                       struct nl_error *err)
{
    uint32_t n = p->im.dims[0];
    size_t sample = (size_t)p->im.dims[1] * p->im.dims[2];
    size_t chunk = sample >= CHUNK_BYTES ? 1 : CHUNK_BYTES / sample;
    uint64_t total = (uint64_t)n * sample, done = 0;
    uint8_t *labels = nl_malloc(n), *split = nl_malloc(n), *buf = nl_malloc(chunk * sample);
    int rc = 0;

    if (!labels || !split || !buf) {
        rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", p->images);
        goto out;
    }
    rc = read_labels(&p->lb, labels, err);
    if (rc)
        goto out;
    memset(split, p->split, n);
    if (p->split == NL_TRAIN && opts->val_fraction > 0) {
        rc = carve_val(labels, n, opts->val_fraction, opts->seed, split, err);
        if (rc)
            goto out;
    }
    for (uint32_t i = 0; i < n && rc == 0;) {
        size_t k = n - i < chunk ? n - i : chunk, got;
        rc = idx_read(&p->im, buf, k * sample, &got, err);
        if (rc)
            break;
        if (got < k * sample) {
            rc = truncated(err, p->images, "images", total, done + got);
            break;
        }
        done += got;
        for (size_t j = 0; j < k && rc == 0; j++, i++) {
            const uint8_t *x = buf + j * sample;
            if (labels[i] > im->max_label)
                im->max_label = labels[i];
            if (split[i] == NL_TRAIN) {
                uint64_t sum = 0, sumsq = 0;
                for (size_t q = 0; q < sample; q++) {
                    sum += x[q];
                    sumsq += (uint32_t)x[q] * x[q];
                }
                im->sum += sum;
                im->sumsq += sumsq;
                im->npix += sample;
                im->train_count[labels[i]]++;
            }
            rc = insert_sample(im, im->next_idx++, split[i], labels[i], x, (int)sample, err);
        }
    }
    if (rc == 0)
        rc = idx_expect_end(&p->im, "images", err);
out:
    nl_free(labels);
    nl_free(split);
    nl_free(buf);
    return rc;
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

/* Writes the classes and the train statistics once all samples are in. */
static int finish_dataset(struct import *im, int fashion, const struct nl_import_opts *opts,
                          struct nl_error *err)
{
    int nclasses = im->max_label + 1, rc;
    double mean = 0, std = 1;
    unsigned char mean_le[4], std_le[4];
    sqlite3_stmt *st = NULL;

    if (im->npix > 0) {
        double m = (double)im->sum / (double)im->npix;
        double var = (double)im->sumsq / (double)im->npix - m * m;
        mean = m / 255.0;
        std = var > 0 ? sqrt(var) / 255.0 : 0;
        if (!(std > 0))
            std = 1;
    }
    put_le32f(mean_le, (float)mean);
    put_le32f(std_le, (float)std);

    rc = nl_store_prepare(im->s, &st,
                          "INSERT INTO classes (dataset, label, name) "
                          "VALUES (?, ?, ?)",
                          err);
    for (int k = 0; k < nclasses && rc == 0; k++) {
        char digits[16];
        snprintf(digits, sizeof digits, "%d", k);
        sqlite3_bind_int64(st, 1, im->dataset);
        sqlite3_bind_int(st, 2, k);
        sqlite3_bind_text(st, 3, fashion && k < 10 ? fashion_names[k] : digits, -1,
                          SQLITE_TRANSIENT);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = nl_store_db_error(im->s, err, "storing the class names");
        sqlite3_reset(st);
        if (rc == 0 && im->train_count[k] == 0 && opts->warn) {
            char msg[96];
            snprintf(msg, sizeof msg, "class %d has no samples in the train split", k);
            opts->warn(opts->warn_ud, msg);
        }
    }
    sqlite3_finalize(st);
    if (rc)
        return rc;

    rc = nl_store_prepare(im->s, &st,
                          "UPDATE datasets SET nclasses = ?, norm_mean = ?, norm_std = ? "
                          "WHERE id = ?",
                          err);
    if (rc)
        return rc;
    sqlite3_bind_int(st, 1, nclasses);
    sqlite3_bind_blob(st, 2, mean_le, 4, SQLITE_STATIC);
    sqlite3_bind_blob(st, 3, std_le, 4, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, im->dataset);
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = nl_store_db_error(im->s, err, "storing the dataset's statistics");
    sqlite3_finalize(st);
    return rc;
}

/* The source column: the folder or the two files, as absolute paths where they resolve. */
static void describe_source(const char *const *paths, int npaths, char *out, size_t size)
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

static int dataset_taken(struct nl_store *s, const char *name, struct nl_error *err)
{
    int rc = nl_dataset_exists(s, name, err);

    if (rc == 1)
        rc = nl_error_set(err, NL_EEXIST, "dataset '%s' already exists (nnlab rm %s first)", name,
                          name);
    return rc;
}

static int create_dataset(struct import *im, const char *name, const char *source,
                          const struct idx_file *images, struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc = nl_store_prepare(im->s, &st,
                              "INSERT INTO datasets (name, kind, source, channels, height, width, "
                              "dtype, nclasses, preprocessing) "
                              "VALUES (?, 'idx', ?, 1, ?, ?, 0, 0, '{}')",
                              err);

    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, source, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, images->dims[1]);
    sqlite3_bind_int64(st, 4, images->dims[2]);
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = nl_store_db_error(im->s, err, "creating the dataset");
    else
        im->dataset = sqlite3_last_insert_rowid(nl_store_sqlite(im->s));
    sqlite3_finalize(st);
    return rc;
}

/* Opens both files of every pair and checks that their headers agree. */
static int open_pairs(struct idx_pair *pairs, int npairs, struct nl_error *err)
{
    for (int i = 0; i < npairs; i++) {
        struct idx_pair *p = &pairs[i];
        int rc = idx_open(&p->im, p->images, 1, err);
        if (rc == 0)
            rc = idx_open(&p->lb, p->labels, 0, err);
        if (rc)
            return rc;
        if (p->im.dims[0] != p->lb.dims[0])
            return nl_error_set(err, NL_EFORMAT, "%s holds %u images but %s holds %u labels",
                                p->images, p->im.dims[0], p->labels, p->lb.dims[0]);
        const uint32_t *d0 = pairs[0].im.dims, *d = p->im.dims;
        if (d[1] != d0[1] || d[2] != d0[2])
            return nl_error_set(err, NL_EFORMAT,
                                "%s: images are %u x %u but those of %s are %u x %u", p->images,
                                d[1], d[2], pairs[0].images, d0[1], d0[2]);
    }
    return 0;
}

int nl_import_idx(struct nl_store *s, const char *name, const char *const *paths, int npaths,
                  const struct nl_import_opts *opts, struct nl_error *err)
{
    static const struct nl_import_opts defaults = {0};
    struct import im = {.s = s, .max_label = -1};
    struct idx_pair *pairs = NULL;
    char *source = NULL;
    int npairs = 0, fashion = 0, began = 0, rc;

    if (!opts)
        opts = &defaults;
    rc = nl_store_check_name("dataset", name, err);
    if (rc)
        return rc;
    if (!(opts->val_fraction >= 0 && opts->val_fraction < 1))
        return nl_error_set(err, NL_EINVAL, "validation fraction %g is not in [0, 1)",
                            (double)opts->val_fraction);
    if (npaths < 1 || !paths)
        return nl_error_set(err, NL_EINVAL, "IDX import needs a folder or two files");
    pairs = nl_calloc(2, sizeof *pairs);
    source = nl_malloc(2 * PATH_MAX + 8);
    if (!pairs || !source) {
        rc = nl_error_set(err, NL_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < npaths; i++)
        fashion |= contains_fashion(paths[i]);
    describe_source(paths, npaths, source, 2 * PATH_MAX + 8);
    rc = resolve_pairs(paths, npaths, pairs, &npairs, err);
    if (rc == 0)
        rc = open_pairs(pairs, npairs, err);
    if (rc == 0)
        rc = nl_store_begin(s, err);
    began = rc == 0;
    if (rc == 0)
        rc = dataset_taken(s, name, err);
    if (rc == 0)
        rc = create_dataset(&im, name, source, &pairs[0].im, err);
    if (rc == 0)
        rc = nl_store_prepare(s, &im.insert,
                              "INSERT INTO samples (dataset, idx, split, label, data) "
                              "VALUES (?, ?, ?, ?, ?)",
                              err);
    for (int i = 0; i < npairs && rc == 0; i++)
        rc = import_pair(&im, &pairs[i], opts, err);
    sqlite3_finalize(im.insert);
    if (rc == 0)
        rc = finish_dataset(&im, fashion, opts, err);
    if (rc == 0)
        rc = nl_store_commit(s, err);
    else if (began)
        nl_store_rollback(s);
out:
    for (int i = 0; i < npairs; i++) {
        idx_close(&pairs[i].im);
        idx_close(&pairs[i].lb);
    }
    nl_free(pairs);
    nl_free(source);
    return rc;
}
