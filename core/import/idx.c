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
#include "core/store/store_internal.h"
#include "import_internal.h"
#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/rng.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
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
    int fd = nl_open_regular(path, err);
    if (fd < 0)
        return err->code;
    f->gz = gzdopen(fd, "rb");
    if (!f->gz) {
        close(fd);
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    }
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

/* State of one import. */
struct import {
    struct nl_writer *w;
    int max_label;        /* over all splits; -1 before the first */
    uint64_t done, total; /* images, for progress */
};

/* Imports one pair of files: labels whole, then images streamed a chunk at a time. carve_test
 * also carves a test split out of train (the source has none). */
static int import_pair(struct import *im, struct idx_pair *p, const struct nl_import_opts *opts,
                       int carve_test, struct nl_error *err)
{
    uint32_t n = p->im.dims[0];
    size_t sample = (size_t)p->im.dims[1] * p->im.dims[2];
    size_t chunk = sample >= CHUNK_BYTES ? 1 : CHUNK_BYTES / sample;
    uint64_t total = (uint64_t)n * sample, done = 0;
    uint8_t *labels = nl_malloc(n), *split = nl_malloc(n), *buf = nl_malloc(chunk * sample);
    int32_t *lab32 = NULL;
    int rc = 0;

    if (!labels || !split || !buf) {
        rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", p->images);
        goto out;
    }
    rc = read_labels(&p->lb, labels, err);
    if (rc)
        goto out;
    memset(split, p->split, n);
    if (p->split == NL_TRAIN && (opts->val_fraction > 0 || carve_test)) {
        lab32 = nl_malloc((size_t)n * sizeof *lab32);
        if (!lab32) {
            rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", p->labels);
            goto out;
        }
        for (uint32_t i = 0; i < n; i++)
            lab32[i] = labels[i];
        rc = nl_split_assign(lab32, n, MAX_CLASSES, opts->val_fraction,
                             carve_test ? opts->test_fraction : 0, opts->seed, split, err);
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
            if (labels[i] > im->max_label)
                im->max_label = labels[i];
            rc = nl_writer_add(im->w, split[i], labels[i], buf + j * sample, err);
        }
        im->done += k;
        if (rc == 0 && opts->progress && opts->progress(opts->progress_ud, im->done, im->total))
            rc = nl_error_set(err, NL_ECANCELED, "stopped");
    }
    if (rc == 0)
        rc = idx_expect_end(&p->im, "images", err);
out:
    nl_free(labels);
    nl_free(split);
    nl_free(buf);
    nl_free(lab32);
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
    static const struct nl_import_opts defaults = {.seed = 1};
    struct import im = {.max_label = -1};
    struct idx_pair *pairs = NULL;
    char *source = NULL;
    const char *names[MAX_CLASSES] = {0};
    struct nl_text pre = {0};
    int npairs = 0, fashion = 0, rc;

    if (!opts)
        opts = &defaults;
    rc = nl_store_check_name("dataset", name, err);
    if (rc)
        return rc;
    if (!(opts->val_fraction >= 0 && opts->val_fraction < 1))
        return nl_error_set(err, NL_EINVAL, "validation fraction %g is not in [0, 1)",
                            (double)opts->val_fraction);
    if (!(opts->test_fraction >= 0 && opts->val_fraction + opts->test_fraction < 1))
        return nl_error_set(err, NL_EINVAL, "test fraction %g is not in [0, 1 - validation)",
                            (double)opts->test_fraction);
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
    nl_import_describe_source(paths, npaths, source, 2 * PATH_MAX + 8);
    rc = resolve_pairs(paths, npaths, pairs, &npairs, err);
    if (rc == 0)
        rc = open_pairs(pairs, npairs, err);
    const int carve_test = npairs == 1 && opts->test_fraction > 0;
    if (rc == 0 && npairs == 2 && opts->test_fraction > 0 && opts->warn)
        opts->warn(opts->warn_ud, "the source has a test split (t10k files); --test is ignored");
    if (rc == 0) {
        struct nl_writer_spec spec = {
            .name = name,
            .kind = "idx",
            .source = source,
            .shape = {1, (int)pairs[0].im.dims[1], (int)pairs[0].im.dims[2]},
            .dtype = NL_U8,
        };
        for (int i = 0; i < npairs; i++)
            im.total += pairs[i].im.dims[0];
        rc = nl_writer_begin(&im.w, s, &spec, err);
    }
    for (int i = 0; i < npairs && rc == 0; i++)
        rc = import_pair(&im, &pairs[i], opts, carve_test, err);
    if (rc == 0) {
        for (int k = 0; k < 10 && fashion; k++)
            names[k] = fashion_names[k];
        nl_text_printf(&pre,
                       "{\"reader\":\"idx\",\"channels\":1,\"val_fraction\":%g,"
                       "\"test_fraction\":%g,\"seed\":%llu,\"normalise\":\"per-channel "
                       "mean/std of train\"}",
                       (double)opts->val_fraction, carve_test ? (double)opts->test_fraction : 0.0,
                       (unsigned long long)opts->seed);
        rc = nl_writer_commit(im.w, im.max_label + 1, names, pre.failed ? NULL : pre.s, opts, err);
        im.w = NULL;
    }
    nl_writer_abort(im.w);
out:
    for (int i = 0; i < npairs; i++) {
        idx_close(&pairs[i].im);
        idx_close(&pairs[i].lb);
    }
    nl_text_free(&pre);
    nl_free(pairs);
    nl_free(source);
    return rc;
}
