/* Tests of the store, IDX import, dataset loading and batching, and PNG samples: small IDX files
 * (raw and gzipped) and PNGs are written into a temporary folder, imported, read back and
 * compared with values computed here; every bad input must fail with the right code, a message
 * naming the file, and no trace in the database. The real Fashion-MNIST is imported too when
 * /usr/share/datasets/fashion-mnist exists. */
#define _XOPEN_SOURCE 700 /* nftw */

#include <ftw.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "core/store/store_internal.h"
#include "idx_writer.h"
#include "import_util.h"
#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/runs.h"
#include "nnlab/store.h"
#include "png_writer.h"
#include "tap.h"

/* A store of version 5 and older lacks the vocab table (version 6); one of version 4 and older
 * the regression columns (version 5). */
#define DROP_REGRESSION                                                                            \
    "DROP TABLE IF EXISTS vocab; "                                                                 \
    "ALTER TABLE runs DROP COLUMN task; ALTER TABLE runs DROP COLUMN val_mae; "                    \
    "ALTER TABLE runs DROP COLUMN val_rmse; ALTER TABLE runs DROP COLUMN test_mae; "               \
    "ALTER TABLE runs DROP COLUMN test_rmse; ALTER TABLE epochs DROP COLUMN train_mae; "           \
    "ALTER TABLE epochs DROP COLUMN train_rmse; ALTER TABLE epochs DROP COLUMN val_mae; "          \
    "ALTER TABLE epochs DROP COLUMN val_rmse; "
/* ... and one of version 3 and older the runs' owners (version 4). */
#define DROP_OWNERS                                                                                \
    DROP_REGRESSION                                                                                \
    "ALTER TABLE runs DROP COLUMN owner_host; ALTER TABLE runs DROP COLUMN owner_pid; "            \
    "ALTER TABLE runs DROP COLUMN owner_start; ALTER TABLE runs DROP COLUMN heartbeat; "

#define ROWS        3
#define COLS        4
#define PIX         (ROWS * COLS)
#define NTRAIN      50
#define NTEST       10
#define NCLASS      5
#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* A call that must succeed; its error message is shown when it does not. */
#define succeeds(rc, err, ...) (is_int((rc), 0, __VA_ARGS__) || (diag("%s", (err).msg), 0))

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The synthetic data: pixel 0 of image i is i, so a sample is known by its first byte. */
static uint8_t pixel(int i, int p)
{
    return p == 0 ? (uint8_t)i : (uint8_t)((i * 37 + p * 11 + (i % NCLASS) * 50) % 256);
}

static uint8_t label_of(int i)
{
    return (uint8_t)(i % NCLASS);
}

/* Writes bytes to path, gzipped when gz. */
static void write_bytes(const char *path, int gz, const void *data, size_t n)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f || (n && gzwrite(f, data, (unsigned)n) != (int)n) || gzclose(f) != Z_OK)
            diag("cannot write %s", path);
    } else {
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0)
            diag("cannot write %s", path);
    }
}

/* An IDX image file of header count n holding `have` images (from `first`), plus `extra`
 * trailing bytes. */
static void write_images(const char *path, int gz, uint32_t magic, uint32_t n, int first, int have,
                         int extra_bytes, int partial_bytes)
{
    size_t size = 16 + (size_t)have * PIX + (size_t)partial_bytes + (size_t)extra_bytes;
    unsigned char *b = calloc(1, size);
    size_t o = 16;

    put_be32(b, magic);
    put_be32(b + 4, n);
    put_be32(b + 8, ROWS);
    put_be32(b + 12, COLS);
    for (int i = 0; i < have; i++)
        for (int p = 0; p < PIX; p++)
            b[o++] = pixel(first + i, p);
    for (int p = 0; p < partial_bytes; p++)
        b[o++] = 1;
    for (int p = 0; p < extra_bytes; p++)
        b[o++] = 0xab;
    write_bytes(path, gz, b, size);
    free(b);
}

static void write_labels(const char *path, int gz, uint32_t n, int first, int have)
{
    size_t size = 8 + (size_t)have;
    unsigned char *b = calloc(1, size);

    put_be32(b, 0x00000801);
    put_be32(b + 4, n);
    for (int i = 0; i < have; i++)
        b[8 + i] = label_of(first + i);
    write_bytes(path, gz, b, size);
    free(b);
}

struct counts {
    long long datasets, samples, classes;
};

static struct counts db_counts(struct nl_store *s)
{
    struct counts c = {count_rows(s, "datasets"), count_rows(s, "samples"),
                       count_rows(s, "classes")};
    return c;
}

/* Expected mean and population std of pixel / 255 over images [0, n) selected by keep. */
static void stats_of(const uint8_t *x, int n, double *mean, double *std)
{
    double s = 0, s2 = 0;

    for (int i = 0; i < n * PIX; i++) {
        s += x[i] / 255.0;
        s2 += (x[i] / 255.0) * (x[i] / 255.0);
    }
    *mean = s / (n * PIX);
    *std = sqrt(s2 / (n * PIX) - *mean * *mean);
}

static void check_good_import(struct nl_store *s)
{
    struct nl_error err = {0};
    struct nl_dataset *d = NULL;
    const char *paths[2] = {at("img"), at("lbl")};
    int rc, same = 1, labels_same = 1;
    uint8_t orig[NTRAIN * PIX];
    double mean, std;

    write_images(paths[0], 0, 0x803, NTRAIN, 0, NTRAIN, 0, 0);
    write_labels(paths[1], 0, NTRAIN, 0, NTRAIN);
    rc = nl_import_idx(s, "plain", paths, 2, NULL, &err);
    succeeds(rc, err, "import of a raw images + labels pair");
    is_int(nl_dataset_exists(s, "plain", &err), 1, "the dataset exists");
    rc = nl_dataset_load(s, "plain", &d, &err);
    succeeds(rc, err, "load");
    if (rc)
        return;
    is_str(d->kind, "idx", "kind");
    ok(d->shape.c == 1 && d->shape.h == ROWS && d->shape.w == COLS, "shape 1 x %d x %d", ROWS,
       COLS);
    is_int(d->dtype, NL_U8, "uint8 samples");
    is_int(d->nclasses, NCLASS, "class count is max label + 1");
    is_str(d->class_names[3], "3", "digit class names");
    ok(d->split[NL_TRAIN].n == NTRAIN && d->split[NL_VAL].n == 0 && d->split[NL_TEST].n == 0,
       "counts %u / %u / %u", d->split[0].n, d->split[1].n, d->split[2].n);
    for (int i = 0; i < NTRAIN; i++) {
        for (int p = 0; p < PIX; p++) {
            orig[i * PIX + p] = pixel(i, p);
            same &= ((uint8_t *)d->split[NL_TRAIN].x)[i * PIX + p] == pixel(i, p);
        }
        labels_same &= d->split[NL_TRAIN].y[i] == label_of(i);
    }
    ok(same, "pixels round-trip in file order");
    ok(labels_same, "labels round-trip");
    stats_of(orig, NTRAIN, &mean, &std);
    is_int(d->nnorm, 1, "one mean/std pair");
    is_float(d->mean[0], mean, 1e-6, "mean of pixel / 255");
    is_float(d->std[0], std, 1e-6, "population std of pixel / 255");

    {
        uint32_t idx[3] = {7, 0, 49};
        float x[3 * PIX];
        int32_t y[3];
        uint64_t before = nl_alloc_count();
        int close = 1;
        nl_dataset_batch(d, NL_TRAIN, idx, 3, x, y);
        is_int((long long)(nl_alloc_count() - before), 0, "nl_dataset_batch allocates nothing");
        for (int i = 0; i < 3; i++)
            for (int p = 0; p < PIX; p++) {
                double want = (pixel((int)idx[i], p) / 255.0 - mean) / std;
                close &= fabs(x[i * PIX + p] - want) < 1e-5;
            }
        ok(close, "batch values are (pixel / 255 - mean) / std");
        ok(y[0] == label_of(7) && y[1] == label_of(0) && y[2] == label_of(49), "batch labels");
        nl_dataset_batch(d, NL_TRAIN, idx, 1, x, NULL);
        ok(1, "batch without labels");
    }
    nl_dataset_free(d);
    nl_dataset_free(NULL);
}

static void check_folder_import(struct nl_store *s)
{
    struct nl_error err = {0};
    struct nl_dataset *d = NULL;
    const char *dir = at("Fashion-like");
    char path[600];
    const char *args[1] = {dir};
    int rc, same = 1;

    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    write_images(path, 1, 0x803, NTRAIN, 0, NTRAIN, 0, 0);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    write_labels(path, 1, NTRAIN, 0, NTRAIN);
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte", dir);
    write_images(path, 0, 0x803, NTEST, 100, NTEST, 0, 0);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", dir);
    write_labels(path, 1, NTEST, 100, NTEST);
    rc = nl_import_idx(s, "folder", args, 1, NULL, &err);
    succeeds(rc, err, "folder import, gzipped and raw");
    rc = nl_dataset_load(s, "folder", &d, &err);
    succeeds(rc, err, "load");
    if (rc)
        return;
    ok(d->split[NL_TRAIN].n == NTRAIN && d->split[NL_TEST].n == NTEST && d->split[NL_VAL].n == 0,
       "train %u, test %u", d->split[NL_TRAIN].n, d->split[NL_TEST].n);
    for (int i = 0; i < NTEST; i++) {
        for (int p = 0; p < PIX; p++)
            same &= ((uint8_t *)d->split[NL_TEST].x)[i * PIX + p] == pixel(100 + i, p);
        same &= d->split[NL_TEST].y[i] == label_of(100 + i);
    }
    ok(same, "the t10k pair is the test split, in order");
    is_str(d->class_names[0], "T-shirt/top", "a path with 'fashion' gets Fashion-MNIST names");
    is_str(d->class_names[4], "Coat", "class 4 is Coat");
    {
        double mean, std;
        uint8_t orig[NTRAIN * PIX];
        for (int i = 0; i < NTRAIN * PIX; i++)
            orig[i] = pixel(i / PIX, i % PIX);
        stats_of(orig, NTRAIN, &mean, &std);
        is_float(d->mean[0], mean, 1e-6, "statistics ignore the test split");
    }
    nl_dataset_free(d);

    /* The "train-images.idx3-ubyte" spelling, no test pair. */
    dir = at("dotted");
    args[0] = dir;
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/train-images.idx3-ubyte", dir);
    write_images(path, 0, 0x803, NTRAIN, 0, NTRAIN, 0, 0);
    snprintf(path, sizeof path, "%s/train-labels.idx1-ubyte", dir);
    write_labels(path, 0, NTRAIN, 0, NTRAIN);
    rc = nl_import_idx(s, "dotted", args, 1, NULL, &err);
    succeeds(rc, err, "folder with train-images.idx3-ubyte names");
}

/* The set of sample ids (first pixel) in the val split, as a bit mask; -1 on failure. */
static int import_val(struct nl_store *s, const char *name, uint64_t seed, uint64_t *val_mask,
                      struct nl_dataset **out)
{
    struct nl_error err = {0};
    const char *paths[2] = {at("img"), at("lbl")};
    struct nl_import_opts opts = {.val_fraction = 0.2f, .seed = seed};
    struct nl_dataset *d = NULL;
    int rc = nl_import_idx(s, name, paths, 2, &opts, &err);

    if (rc == 0)
        rc = nl_dataset_load(s, name, &d, &err);
    if (rc) {
        diag("%s: %s", name, err.msg);
        return -1;
    }
    *val_mask = 0;
    for (uint32_t i = 0; i < d->split[NL_VAL].n; i++)
        *val_mask |= 1ull << ((uint8_t *)d->split[NL_VAL].x)[i * PIX];
    *out = d;
    return 0;
}

static void check_val_split(struct nl_store *s)
{
    struct nl_dataset *a = NULL, *b = NULL, *c = NULL;
    uint64_t ma = 0, mb = 0, mc = 0, seen = 0;
    int per_class[NCLASS] = {0}, stratified = 1, consistent = 1, twice = 0;

    if (import_val(s, "val-a", 42, &ma, &a) || import_val(s, "val-b", 42, &mb, &b) ||
        import_val(s, "val-c", 7, &mc, &c)) {
        ok(0, "imports with a validation split");
        goto out;
    }
    ok(a->split[NL_TRAIN].n == NTRAIN - NTRAIN / 5 && a->split[NL_VAL].n == NTRAIN / 5,
       "20%% of %d: train %u, val %u", NTRAIN, a->split[NL_TRAIN].n, a->split[NL_VAL].n);
    for (uint32_t i = 0; i < a->split[NL_VAL].n; i++)
        per_class[a->split[NL_VAL].y[i]]++;
    for (int k = 0; k < NCLASS; k++)
        stratified &= per_class[k] == NTRAIN / NCLASS / 5;
    ok(stratified, "stratified: 2 val samples of each class");
    for (int k = 0; k < 2; k++) {
        uint32_t n = a->split[k].n;
        for (uint32_t i = 0; i < n; i++) {
            int id = ((uint8_t *)a->split[k].x)[i * PIX];
            twice |= (seen >> id) & 1;
            seen |= 1ull << id;
            consistent &= a->split[k].y[i] == label_of(id);
            for (int p = 1; p < PIX; p++)
                consistent &= ((uint8_t *)a->split[k].x)[i * PIX + p] == pixel(id, p);
        }
    }
    ok(!twice && seen == (1ull << NTRAIN) - 1, "train and val partition the samples");
    ok(consistent, "moved samples keep their pixels and labels");
    ok(ma == mb, "the same seed gives the same split");
    ok(ma != mc, "another seed gives another split");
    {
        double mean, std;
        stats_of(a->split[NL_TRAIN].x, (int)a->split[NL_TRAIN].n, &mean, &std);
        is_float(a->mean[0], mean, 1e-6, "mean over the final train split only");
        is_float(a->std[0], std, 1e-6, "std over the final train split only");
    }
out:
    nl_dataset_free(a);
    nl_dataset_free(b);
    nl_dataset_free(c);
}

/* Runs a failing import and checks code, message and that the database did not change. */
static void expect_failure(struct nl_store *s, const char *what, const char *const *paths,
                           int npaths, int code, const char *needle, const char *needle2)
{
    struct nl_error err = {0};
    struct counts before = db_counts(s), after;
    int rc = nl_import_idx(s, "broken", paths, npaths, NULL, &err);

    is_int(rc, code, "%s: code %s", what, nl_strerror(code));
    diag("%s: %s", what, err.msg);
    like(err.msg, needle, "%s: the message names %s", what, needle);
    if (needle2)
        like(err.msg, needle2, "%s: the message says '%s'", what, needle2);
    after = db_counts(s);
    ok(nl_dataset_exists(s, "broken", &err) == 0 && after.datasets == before.datasets &&
           after.samples == before.samples && after.classes == before.classes,
       "%s: the database is unchanged (%lld/%lld samples)", what, after.samples, before.samples);
}

static void check_bad_inputs(struct nl_store *s)
{
    const char *img = at("bad-img"), *lbl = at("bad-lbl"), *good_img = at("img");
    const char *good_lbl = at("lbl");
    const char *p[2];
    struct nl_error err = {0};

    /* Truncated images: 49 whole images and part of one; 49 rows are inserted first. */
    write_images(img, 0, 0x803, NTRAIN, 0, NTRAIN - 1, 0, 5);
    p[0] = img;
    p[1] = good_lbl;
    expect_failure(s, "truncated images", p, 2, NL_EFORMAT, img, "truncated");
    write_images(img, 1, 0x803, NTRAIN, 0, NTRAIN - 1, 0, 5);
    expect_failure(s, "truncated gzipped images", p, 2, NL_EFORMAT, img, "truncated");

    write_labels(lbl, 0, NTRAIN, 0, NTRAIN - 3);
    p[0] = good_img;
    p[1] = lbl;
    expect_failure(s, "truncated labels", p, 2, NL_EFORMAT, lbl, "truncated");

    write_images(img, 0, 0x801, NTRAIN, 0, NTRAIN, 0, 0);
    p[0] = img;
    p[1] = good_lbl;
    expect_failure(s, "wrong magic", p, 2, NL_EFORMAT, img, "magic 0x00000801");

    write_labels(lbl, 0, NTRAIN - 1, 0, NTRAIN - 1);
    p[0] = good_img;
    p[1] = lbl;
    expect_failure(s, "mismatched counts (labels)", p, 2, NL_EFORMAT, lbl, good_img);

    write_images(img, 0, 0x803, NTRAIN, 0, NTRAIN, 7, 0);
    p[0] = img;
    p[1] = good_lbl;
    expect_failure(s, "trailing garbage", p, 2, NL_EFORMAT, img, "trailing");

    {
        unsigned char junk[1000];
        for (int i = 0; i < 1000; i++)
            junk[i] = (unsigned char)(i * 97 + 13);
        write_bytes(img, 0, junk, sizeof junk);
        expect_failure(s, "garbage file", p, 2, NL_EFORMAT, img, "not an IDX image file");
        /* A gzip header followed by junk. */
        junk[0] = 0x1f;
        junk[1] = 0x8b;
        junk[2] = 8;
        junk[3] = 0;
        write_bytes(img, 0, junk, sizeof junk);
        expect_failure(s, "corrupt gzip", p, 2, NL_EFORMAT, img, "gzip");
    }
    {
        /* A gzip stream cut in the middle. */
        FILE *f;
        unsigned char buf[4096];
        size_t n;
        write_images(img, 1, 0x803, NTRAIN, 0, NTRAIN, 0, 0);
        f = fopen(img, "rb");
        n = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f)
            fclose(f);
        write_bytes(img, 0, buf, n / 2);
        expect_failure(s, "cut gzip stream", p, 2, NL_EFORMAT, img, "truncated");
    }

    write_bytes(img, 0, "", 0);
    expect_failure(s, "empty file", p, 2, NL_EFORMAT, img, "empty");

    p[0] = good_img;
    p[1] = at("no-such-labels");
    expect_failure(s, "missing labels file", p, 2, NL_ENOENT, p[1], NULL);

    {
        const char *dir = at("only-images");
        char path[600];
        const char *args[1] = {dir};
        mkdir(dir, 0700);
        snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
        write_images(path, 1, 0x803, NTRAIN, 0, NTRAIN, 0, 0);
        expect_failure(s, "folder without labels", args, 1, NL_ENOENT, dir, "train-labels");
    }

    p[0] = good_img;
    p[1] = good_lbl;
    {
        struct counts before = db_counts(s), after;
        int rc = nl_import_idx(s, "plain", p, 2, NULL, &err);
        is_int(rc, NL_EEXIST, "duplicate name: code");
        like(err.msg, "dataset 'plain' already exists", "duplicate name: message");
        after = db_counts(s);
        ok(after.samples == before.samples && after.datasets == before.datasets,
           "duplicate name: the database is unchanged");
        rc = nl_import_idx(s, "a/b", p, 2, NULL, &err);
        is_int(rc, NL_EINVAL, "a name with '/' is refused");
        diag("%s", err.msg);
        rc = nl_import_idx(s, "", p, 2, NULL, &err);
        is_int(rc, NL_EINVAL, "an empty name is refused");
        struct nl_import_opts opts = {.val_fraction = 1.0f};
        rc = nl_import_idx(s, "whole", p, 2, &opts, &err);
        is_int(rc, NL_EINVAL, "a validation fraction of 1 is refused");
    }
}

static void check_list_remove(struct nl_store *s)
{
    struct nl_error err = {0};
    struct nl_dataset_info *list = NULL;
    struct nl_dataset *d = NULL;
    int n = 0, found = 0;
    long long samples = count_rows(s, "samples");

    succeeds(nl_dataset_list(s, &list, &n, &err), err, "list");
    for (int i = 0; i < n; i++)
        if (strcmp(list[i].name, "folder") == 0)
            found = list[i].count[NL_TRAIN] == NTRAIN && list[i].count[NL_VAL] == 0 &&
                    list[i].count[NL_TEST] == NTEST && list[i].nclasses == NCLASS &&
                    list[i].shape.h == ROWS && list[i].created[0] == '2' &&
                    strstr(list[i].source, "Fashion-like") != NULL;
    ok(n == 6 && found, "list: %d datasets, 'folder' with its counts and source", n);
    nl_free(list);

    succeeds(nl_dataset_remove(s, "plain", &err), err, "remove");
    is_int(nl_dataset_exists(s, "plain", &err), 0, "removed");
    is_int(count_rows(s, "samples"), samples - NTRAIN, "its samples went with it");
    is_int(nl_dataset_remove(s, "plain", &err), NL_ENOENT, "removing it again: not found");
    like(err.msg, "'plain'", "the message names the dataset");
    is_int(nl_dataset_load(s, "plain", &d, &err), NL_ENOENT, "loading it: not found");
    ok(d == NULL, "no dataset returned");
}

static void check_store(void)
{
    struct nl_error err = {0};
    struct nl_store *s = NULL;
    const char *path = at("v/newer.db");
    char buf[64];
    int rc;

    rc = nl_store_open(&s, path, &err);
    succeeds(rc, err, "open creates parent folders");
    if (rc == 0) {
        sqlite3_stmt *st;
        is_str(nl_store_path(s), path, "nl_store_path");
        sqlite3_prepare_v2(nl_store_sqlite(s), "PRAGMA journal_mode", -1, &st, NULL);
        ok(sqlite3_step(st) == SQLITE_ROW &&
               strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0,
           "WAL mode");
        sqlite3_finalize(st);
        sqlite3_prepare_v2(nl_store_sqlite(s), "PRAGMA foreign_keys", -1, &st, NULL);
        ok(sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1, "foreign keys on");
        sqlite3_finalize(st);
        nl_store_close(s);
        rc = nl_store_open(&s, path, &err);
        succeeds(rc, err, "an existing store opens again");
    }
    if (rc == 0) {
        /* A version 1 store (before worker_steps, recoveries and the runs' owners), a version 2
         * store (before recoveries and owners) and a version 3 store (before owners) are
         * upgraded on open. */
        sqlite3_stmt *st;
        sqlite3_exec(nl_store_sqlite(s),
                     "DROP TABLE worker_steps; DROP TABLE recoveries; " DROP_OWNERS
                     "PRAGMA user_version = 1",
                     NULL, NULL, NULL);
        nl_store_close(s);
        rc = nl_store_open(&s, path, &err);
        succeeds(rc, err, "a version 1 store opens");
        if (rc == 0) {
            sqlite3_prepare_v2(nl_store_sqlite(s), "SELECT count(*) FROM worker_steps", -1, &st,
                               NULL);
            ok(sqlite3_step(st) == SQLITE_ROW, "and gains the worker_steps table");
            sqlite3_finalize(st);
            sqlite3_prepare_v2(nl_store_sqlite(s), "SELECT count(*) FROM recoveries", -1, &st,
                               NULL);
            ok(sqlite3_step(st) == SQLITE_ROW, "and the recoveries table");
            sqlite3_finalize(st);
            sqlite3_exec(nl_store_sqlite(s),
                         "DROP TABLE recoveries; " DROP_OWNERS "PRAGMA user_version = 2", NULL,
                         NULL, NULL);
            nl_store_close(s);
            rc = nl_store_open(&s, path, &err);
            succeeds(rc, err, "a version 2 store opens");
        }
        if (rc == 0) {
            sqlite3_prepare_v2(nl_store_sqlite(s), "SELECT count(*) FROM recoveries", -1, &st,
                               NULL);
            ok(sqlite3_step(st) == SQLITE_ROW, "and gains the recoveries table");
            sqlite3_finalize(st);
            /* A version 3 store's running run has no owner: it reads back as interrupted. */
            sqlite3_exec(nl_store_sqlite(s),
                         DROP_OWNERS "INSERT INTO runs (name, dataset, model, spec, settings, "
                                     "status) VALUES ('old', 'd', 'mlp', '', '{}', 'running'); "
                                     "PRAGMA user_version = 3",
                         NULL, NULL, NULL);
            nl_store_close(s);
            rc = nl_store_open(&s, path, &err);
            succeeds(rc, err, "a version 3 store opens");
        }
        if (rc == 0) {
            struct nl_run_info info;
            sqlite3_prepare_v2(nl_store_sqlite(s), "SELECT count(owner_pid) FROM runs", -1, &st,
                               NULL);
            ok(sqlite3_step(st) == SQLITE_ROW, "and gains the runs' owner columns");
            sqlite3_finalize(st);
            is_int(nl_run_get(s, "old", &info, NULL, NULL, &err), 0, "its run reads back");
            is_str(info.status, "interrupted", "a running run without an owner is interrupted");
            if (nl_run_remove(s, "old", &err) < 0)
                diag("could not remove the run: %s", err.msg);
            /* A version 4 store gains the regression columns; its runs are classification. */
            sqlite3_exec(nl_store_sqlite(s),
                         DROP_REGRESSION "INSERT INTO runs (name, dataset, model, spec, settings, "
                                         "status) VALUES ('v4', 'd', 'mlp', '', '{}', 'done'); "
                                         "PRAGMA user_version = 4",
                         NULL, NULL, NULL);
            nl_store_close(s);
            rc = nl_store_open(&s, path, &err);
            succeeds(rc, err, "a version 4 store opens");
        }
        if (rc == 0) {
            struct nl_run_info info;
            is_int(nl_run_get(s, "v4", &info, NULL, NULL, &err), 0,
                   "and its run reads back with the regression columns");
            ok(!info.regression && isnan(info.test_mae), "as a classification run");
            if (nl_run_remove(s, "v4", &err) < 0)
                diag("could not remove the run: %s", err.msg);
            sqlite3_prepare_v2(nl_store_sqlite(s), "SELECT count(*) FROM vocab", -1, &st, NULL);
            ok(sqlite3_step(st) == SQLITE_ROW, "and gains the vocab table");
            sqlite3_finalize(st);
            /* A version 5 store has the regression columns but not the vocab table. */
            sqlite3_exec(nl_store_sqlite(s), "DROP TABLE vocab; PRAGMA user_version = 5", NULL,
                         NULL, NULL);
            nl_store_close(s);
            rc = nl_store_open(&s, path, &err);
            succeeds(rc, err, "a version 5 store opens");
        }
        if (rc == 0) {
            sqlite3_prepare_v2(nl_store_sqlite(s), "SELECT count(*) FROM vocab", -1, &st, NULL);
            ok(sqlite3_step(st) == SQLITE_ROW, "and gains the vocab table");
            sqlite3_finalize(st);
        }
    }
    if (rc == 0) {
        sqlite3_exec(nl_store_sqlite(s), "PRAGMA user_version = 99", NULL, NULL, NULL);
        nl_store_close(s);
    }
    rc = nl_store_open(&s, path, &err);
    is_int(rc, NL_EFORMAT, "a newer schema is refused");
    like(err.msg, "newer", "the message says it is newer");
    diag("%s", err.msg);
    nl_store_close(NULL);

    {
        static const char text[] = "this is not a database but a text file, long enough to be "
                                   "read as a header by SQLite.";
        write_bytes(at("not-a-db"), 0, text, sizeof text - 1);
    }
    rc = nl_store_open(&s, at("not-a-db"), &err);
    is_int(rc, NL_EDB, "a text file is not a database");
    like(err.msg, "not-a-db", "the message names the file");
    diag("%s", err.msg);

    setenv("XDG_DATA_HOME", "/x/data", 1);
    rc = nl_store_default_path(buf, sizeof buf, &err);
    ok(rc == 0 && strcmp(buf, "/x/data/nnlab/nnlab.db") == 0, "default path under XDG_DATA_HOME");
    setenv("XDG_DATA_HOME", "relative", 1);
    setenv("HOME", "/home/u", 1);
    rc = nl_store_default_path(buf, sizeof buf, &err);
    ok(rc == 0 && strcmp(buf, "/home/u/.local/share/nnlab/nnlab.db") == 0,
       "default path under HOME when XDG_DATA_HOME is not absolute");
    rc = nl_store_default_path(buf, 8, &err);
    is_int(rc, NL_EINVAL, "a buffer too small is an error");
}

/* Writes a PNG of any kind; rows holds h rows of rowbytes. */
static int write_png(const char *path, int w, int h, int color, int depth, const uint8_t *data,
                     size_t rowbytes)
{
    return write_png_file(path, w, h, color, depth, data, rowbytes, NULL, 0, NULL, 0, 0);
}

static void check_png(struct nl_store *s)
{
    struct nl_error err = {0};
    struct nl_dataset *d = NULL;
    float x[PIX], want_x[PIX];
    uint8_t data[16 * 16 * 4];
    int rc, close;

    rc = nl_dataset_load(s, "folder", &d, &err);
    succeeds(rc, err, "load for PNG checks");
    if (rc)
        return;

    /* Gray 8-bit, 7 x 9, constant 200. */
    memset(data, 200, 7 * 9);
    write_png(at("gray.png"), 7, 9, PNG_COLOR_TYPE_GRAY, 8, data, 7);
    rc = nl_dataset_sample_from_image(d, at("gray.png"), x, &err);
    succeeds(rc, err, "gray 7 x 9 PNG");
    close = 1;
    for (int p = 0; p < PIX; p++)
        close &= fabs(x[p] - (200 / 255.0 - d->mean[0]) / d->std[0]) < 1e-4;
    ok(close, "a constant gray image resized gives the constant's normalised value");

    /* RGBA 10 x 6, (100, 150, 200) at alpha 128, composed onto black. */
    for (int i = 0; i < 10 * 6; i++) {
        data[4 * i + 0] = 100;
        data[4 * i + 1] = 150;
        data[4 * i + 2] = 200;
        data[4 * i + 3] = 128;
    }
    write_png(at("rgba.png"), 10, 6, PNG_COLOR_TYPE_RGBA, 8, data, 40);
    rc = nl_dataset_sample_from_image(d, at("rgba.png"), x, &err);
    succeeds(rc, err, "RGBA 10 x 6 PNG");
    {
        /* Rounded to 8 bits, as the import stores it. */
        double lum = round((0.299 * 100 + 0.587 * 150 + 0.114 * 200) * 128 / 255.0);
        close = 1;
        for (int p = 0; p < PIX; p++)
            close &= fabs(x[p] - (lum / 255.0 - d->mean[0]) / d->std[0]) < 1e-4;
        ok(close, "RGBA becomes luminance times alpha");
    }

    /* Gray 16-bit, 2 x 2, 0xffff: enlarged, white. */
    memset(data, 0xff, 8);
    write_png(at("gray16.png"), 2, 2, PNG_COLOR_TYPE_GRAY, 16, data, 4);
    rc = nl_dataset_sample_from_image(d, at("gray16.png"), x, &err);
    succeeds(rc, err, "16-bit gray 2 x 2 PNG");
    close = 1;
    for (int p = 0; p < PIX; p++)
        close &= fabs(x[p] - (1.0 - d->mean[0]) / d->std[0]) < 1e-4;
    ok(close, "16-bit white enlarged stays white");

    /* Palette, 4 bits, interlaced, 5 x 5 of entry 1: red at alpha 51 (one fifth). */
    {
        png_color pal[2] = {{0, 0, 0}, {255, 0, 0}};
        png_byte trns[2] = {255, 51};
        memset(data, 0x11, 3 * 5);
        write_png_file(at("pal.png"), 5, 5, PNG_COLOR_TYPE_PALETTE, 4, data, 3, pal, 2, trns, 2, 1);
        rc = nl_dataset_sample_from_image(d, at("pal.png"), x, &err);
        succeeds(rc, err, "interlaced 4-bit palette PNG with transparency");
        close = 1;
        for (int p = 0; p < PIX; p++)
            close &=
                fabs(x[p] - (round(0.299 * 255 * 0.2) / 255.0 - d->mean[0]) / d->std[0]) < 1e-4;
        ok(close, "palette red at alpha 0.2 gives its luminance times alpha");
    }

    /* Same size as the dataset: exactly what nl_dataset_batch gives for that sample. */
    {
        uint32_t idx = 17;
        for (int p = 0; p < PIX; p++)
            data[p] = ((uint8_t *)d->split[NL_TRAIN].x)[idx * PIX + p];
        write_png(at("same.png"), COLS, ROWS, PNG_COLOR_TYPE_GRAY, 8, data, COLS);
        rc = nl_dataset_sample_from_image(d, at("same.png"), x, &err);
        nl_dataset_batch(d, NL_TRAIN, &idx, 1, want_x, NULL);
        ok(rc == 0 && memcmp(x, want_x, sizeof x) == 0,
           "a PNG of a stored sample gives the same floats as nl_dataset_batch");
    }

    write_bytes(at("fake.png"), 0, "GIF89a not a png at all", 23);
    rc = nl_dataset_sample_from_image(d, at("fake.png"), x, &err);
    is_int(rc, NL_EFORMAT, "a non-PNG file is refused");
    like(err.msg, "fake.png: not a PNG or JPEG image", "the message names the file");
    {
        FILE *f = fopen(at("rgba.png"), "rb");
        uint8_t head[60];
        size_t n = f ? fread(head, 1, sizeof head, f) : 0;
        if (f)
            fclose(f);
        write_bytes(at("cut.png"), 0, head, n);
        rc = nl_dataset_sample_from_image(d, at("cut.png"), x, &err);
        is_int(rc, NL_EFORMAT, "a cut PNG is refused");
        like(err.msg, "cut.png: corrupt PNG", "the message names the file");
        diag("%s", err.msg);
    }
    rc = nl_dataset_sample_from_image(d, at("none.png"), x, &err);
    is_int(rc, NL_ENOENT, "a missing PNG: not found");
    nl_dataset_free(d);
}

static void check_fashion(void)
{
    struct nl_error err = {0};
    struct nl_store *s = NULL;
    struct nl_dataset *d = NULL;
    const char *args[1] = {FASHION_DIR};
    double t0, t1, t2;
    int rc;

    if (access(FASHION_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        diag("%s not found; skipping the Fashion-MNIST checks", FASHION_DIR);
        for (int i = 0; i < 7; i++)
            ok(1, "# SKIP no Fashion-MNIST");
        return;
    }
    rc = nl_store_open(&s, at("fashion.db"), &err);
    t0 = now();
    if (rc == 0)
        rc = nl_import_idx(s, "fashion-mnist", args, 1, NULL, &err);
    t1 = now();
    if (rc == 0)
        rc = nl_dataset_load(s, "fashion-mnist", &d, &err);
    t2 = now();
    succeeds(rc, err, "Fashion-MNIST imports and loads");
    if (rc == 0) {
        diag("Fashion-MNIST: import %.2f s, load %.2f s", t1 - t0, t2 - t1);
        uint32_t ntrain = d->split[NL_TRAIN].n, nval = d->split[NL_VAL].n;
        int counts_ok = ntrain == 60000 && d->split[NL_TEST].n == 10000 && nval == 0;
        ok(counts_ok, "60000 train, 10000 test");
        ok(d->nclasses == 10 && strcmp(d->class_names[9], "Ankle boot") == 0,
           "10 classes, the last 'Ankle boot'");
        ok(d->shape.c == 1 && d->shape.h == 28 && d->shape.w == 28, "28 x 28");
        is_float(d->mean[0], 0.2860, 0.0005, "mean");
        is_float(d->std[0], 0.3530, 0.0005, "std");
        diag("Fashion-MNIST train mean %.5f, std %.5f", d->mean[0], d->std[0]);
    } else {
        for (int i = 0; i < 5; i++)
            ok(0, "Fashion-MNIST");
    }
    nl_dataset_free(d);
    d = NULL;
    {
        struct nl_import_opts opts = {.val_fraction = 0.1f, .seed = 1};
        t0 = now();
        rc = nl_import_idx(s, "fashion-val", args, 1, &opts, &err);
        t1 = now();
        if (rc == 0)
            rc = nl_dataset_load(s, "fashion-val", &d, &err);
        ok(rc == 0 && d->split[NL_TRAIN].n == 54000 && d->split[NL_VAL].n == 6000,
           "with a 10%% validation split: 54000 train, 6000 val");
        if (rc == 0)
            diag("import with a validation split %.2f s", t1 - t0);
        nl_dataset_free(d);
    }
    nl_store_close(s);
}

/* A larger dataset for the removal checks: n images of 28 x 28 that do not compress. */
static void write_big_idx(const char *images, const char *labels, uint32_t n, uint32_t seed)
{
    uint8_t *px = malloc((size_t)n * 784), *lab = malloc(n);
    uint32_t x = seed;

    for (size_t i = 0; i < (size_t)n * 784; i++) {
        x = x * 1664525u + 1013904223u;
        px[i] = (uint8_t)(x >> 24);
    }
    for (uint32_t i = 0; i < n; i++)
        lab[i] = (uint8_t)(i % NCLASS);
    idx_write(images, labels, px, lab, n, 28, 28);
    free(px);
    free(lab);
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static long long pragma_int(struct nl_store *s, const char *sql)
{
    sqlite3_stmt *st;
    long long v = -1;

    if (sqlite3_prepare_v2(nl_store_sqlite(s), sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* Whether two loaded datasets hold the same samples and labels. */
static int same_samples(const struct nl_dataset *a, const struct nl_dataset *b)
{
    size_t sample = nl_shape_size(a->shape);

    for (int k = 0; k < NL_NSPLITS; k++)
        if (a->split[k].n != b->split[k].n ||
            (a->split[k].n &&
             (memcmp(a->split[k].x, b->split[k].x, a->split[k].n * sample) != 0 ||
              memcmp(a->split[k].y, b->split[k].y, a->split[k].n * sizeof(int32_t)) != 0)))
            return 0;
    return 1;
}

/* Removing a dataset drops its table, which frees its pages without writing them again, and
 * gives them back to the file system a few hundred per transaction (the WAL stays small where
 * deleting its rows, and then vacuuming in one transaction, each wrote nearly all of them), and
 * leaves the rest of the store whole. */
static void check_remove_reclaims(void)
{
    enum { BIG = 12000, SMALL = 2000 };
    const char *db = at("r/nnlab.db");
    const char *big[2] = {at("r/big-img"), at("r/big-lbl")};
    const char *small[2] = {at("r/small-img"), at("r/small-lbl")};
    struct nl_error err = {0};
    struct nl_store *s = NULL;
    struct nl_dataset *before = NULL, *after = NULL;
    long long size0, size1, wal, unused = -1;
    char wal_path[600];
    int rc;

    rc = nl_store_open(&s, db, &err);
    succeeds(rc, err, "removal: a new store");
    if (rc)
        return;
    write_big_idx(big[0], big[1], BIG, 1);
    write_big_idx(small[0], small[1], SMALL, 2);
    rc = nl_import_idx(s, "big", big, 2, NULL, &err);
    succeeds(rc, err, "removal: import %d samples", BIG);
    if (rc == 0)
        rc = nl_import_idx(s, "after", small, 2, NULL, &err);
    succeeds(rc, err, "removal: and a dataset after it in the file");
    if (rc == 0)
        rc = nl_dataset_load(s, "after", &before, &err);
    nl_store_close(s);
    s = NULL;
    size0 = file_size(db);
    if (rc == 0)
        rc = nl_store_open(&s, db, &err);
    if (rc == 0) {
        snprintf(wal_path, sizeof wal_path, "%s-wal", db);
        is_int(pragma_int(s, "PRAGMA secure_delete"), 2, "writers run with secure_delete FAST");
        rc = nl_dataset_remove(s, "big", &err);
        succeeds(rc, err, "remove the large dataset");
        wal = file_size(wal_path);
        ok(wal >= 0 && wal < (long long)BIG * 784 / 3,
           "removing it and giving its pages back wrote %lld bytes to the WAL, under a third of "
           "its %d (the other dataset's pages moved down)",
           wal, BIG * 784);
        is_int(pragma_int(s, "PRAGMA freelist_count"), 0, "no page is left on the free list");
        if (rc == 0)
            rc = nl_store_reclaim(s, &unused, &err);
        succeeds(rc, err, "reclaim");
        is_int(unused, 0, "no page stays free inside the file");
        nl_store_close(s);
        s = NULL;
    }
    size1 = file_size(db);
    ok(size0 > 0 && size1 > 0 && size0 - size1 >= (long long)BIG * 784 * 9 / 10,
       "the file shrank by the dataset's size (%lld -> %lld bytes)", size0, size1);
    if (rc == 0)
        rc = nl_store_open(&s, db, &err);
    if (rc == 0) {
        sqlite3_stmt *st;
        ok(sqlite3_prepare_v2(nl_store_sqlite(s), "PRAGMA integrity_check", -1, &st, NULL) ==
                   SQLITE_OK &&
               sqlite3_step(st) == SQLITE_ROW &&
               strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0,
           "the store passes SQLite's integrity check");
        sqlite3_finalize(st);
        is_int(count_rows(s, "samples"), SMALL, "only the other dataset's samples are left");
        is_int(nl_dataset_exists(s, "big", &err), 0, "the removed dataset is gone");
        rc = nl_dataset_load(s, "after", &after, &err);
        succeeds(rc, err, "the other dataset loads");
        ok(rc == 0 && before && same_samples(before, after), "with the same samples and labels");
    }
    nl_dataset_free(before);
    nl_dataset_free(after);
    nl_store_close(s);
}

/* A version 6 store kept every dataset's samples in one table; opening it for writing moves
 * them to a table per dataset. */
static void check_upgrade_6(void)
{
    const char *db = at("u/nnlab.db");
    const char *files[2] = {at("u/img"), at("u/lbl")};
    struct nl_error err = {0};
    struct nl_store *s = NULL;
    struct nl_dataset *before = NULL, *after = NULL;
    struct nl_dataset_info *list = NULL;
    long long id = -1;
    char sql[1024];
    int n = 0, rc;

    rc = nl_store_open(&s, db, &err);
    succeeds(rc, err, "upgrade: a new store");
    if (rc)
        return;
    write_big_idx(files[0], files[1], 300, 3);
    rc = nl_import_idx(s, "six", files, 2, NULL, &err);
    if (rc == 0)
        rc = nl_dataset_load(s, "six", &before, &err);
    succeeds(rc, err, "upgrade: import a dataset");
    id = pragma_int(s, "SELECT id FROM datasets WHERE name = 'six'");
    snprintf(sql, sizeof sql,
             "CREATE TABLE samples (dataset INTEGER NOT NULL REFERENCES datasets(id) ON DELETE "
             "CASCADE, idx INTEGER NOT NULL, split INTEGER NOT NULL, label INTEGER NOT NULL, "
             "data BLOB NOT NULL, PRIMARY KEY (dataset, idx)) WITHOUT ROWID; "
             "CREATE INDEX samples_by_split ON samples (dataset, split, idx); "
             "INSERT INTO samples SELECT %lld, idx, split, label, data FROM samples_%lld; "
             "DROP TABLE samples_%lld; PRAGMA user_version = 6",
             id, id, id);
    ok(rc == 0 && sqlite3_exec(nl_store_sqlite(s), sql, NULL, NULL, NULL) == SQLITE_OK,
       "made a version 6 store of it");
    nl_store_close(s);
    s = NULL;
    rc = nl_store_open(&s, db, &err);
    succeeds(rc, err, "a version 6 store opens");
    if (rc == 0) {
        is_int(pragma_int(s, "PRAGMA user_version"), 7, "and is version 7");
        is_int(pragma_int(s, "SELECT count(*) FROM sqlite_master WHERE name = 'samples'"), 0,
               "the shared samples table is gone");
        is_int(pragma_int(s, "PRAGMA freelist_count"), 0,
               "and its pages are given back to the file system");
        snprintf(sql, sizeof sql, "SELECT count(*) FROM samples_%lld", id);
        is_int(pragma_int(s, sql), 300, "the dataset's table holds its samples");
        rc = nl_dataset_load(s, "six", &after, &err);
        succeeds(rc, err, "the dataset loads");
        ok(rc == 0 && before && same_samples(before, after), "with the same samples and labels");
        rc = nl_dataset_list(s, &list, &n, &err);
        ok(rc == 0 && n == 1 && list[0].count[NL_TRAIN] + list[0].count[NL_TEST] == 300,
           "and lists with its counts");
        nl_free(list);
        succeeds(nl_dataset_remove(s, "six", &err), err, "and is removed");
        is_int(count_rows(s, "samples"), 0, "with its samples");
    }
    nl_dataset_free(before);
    nl_dataset_free(after);
    nl_store_close(s);
}

int main(void)
{
    struct nl_error err = {0};
    struct nl_store *s = NULL;
    int rc;

    tmp_make("nnlab-idx");
    rc = nl_store_open(&s, at("a/b/nnlab.db"), &err);
    succeeds(rc, err, "open a new store in folders that do not exist yet");
    if (rc == 0) {
        check_good_import(s);
        check_folder_import(s);
        check_val_split(s);
        check_bad_inputs(s);
        check_list_remove(s);
        check_png(s);
        nl_store_close(s);
    }
    check_store();
    check_upgrade_6();
    check_remove_reclaims();
    check_fashion();
    tmp_remove();
    return done_testing();
}
