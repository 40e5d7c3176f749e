/* Tests of the PNG-folder and CSV importers, the source dispatcher, bad input and augmentation.
 * A tree with every PNG kind libpng reads (gray 1 to 16 bits, gray + alpha, palettes with tRNS,
 * RGB, RGBA, 16-bit, interlaced, another size) is written here with libpng and imported; labels
 * and every pixel are compared with values computed here. Each bad input must fail with a
 * message naming the file (and line) and leave the database unchanged; --skip-bad skips it.
 * Import memory must not grow with the number of files. */
#define _XOPEN_SOURCE 700 /* nftw */

#include <ftw.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/store/store_internal.h"
#include "import_util.h"
#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/store.h"
#include "png_writer.h"
#include "tap.h"
#include "test_util.h"

#define W 8
#define H 6

#define succeeds(rc, err, ...) (is_int((rc), 0, __VA_ARGS__) || (diag("%s", (err).msg), 0))

static void mkdirs(const char *path)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    if (system(cmd) != 0)
        diag("cannot make %s", path);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        diag("cannot write %s", path);
}

static long long db_total(struct nl_store *s)
{
    return count_rows(s, "datasets") * 1000000 + count_rows(s, "samples") +
           count_rows(s, "classes") * 1000;
}

/* Writes a PNG: rows of samples v (h, w, nch) in the kind's units (levels, palette indices,
 * 16-bit values), packed for the bit depth. */
static int write_png(const char *path, int w, int h, int color, int bits, const int *v,
                     const png_color *palette, int ncolors, const png_byte *trns, int ntrns,
                     int interlace)
{
    int nch = color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_PALETTE ? 1
              : color == PNG_COLOR_TYPE_GRAY_ALPHA                            ? 2
              : color == PNG_COLOR_TYPE_RGB                                   ? 3
                                                                              : 4;
    size_t rowbytes = ((size_t)w * nch * bits + 7) / 8;
    uint8_t *rows = calloc((size_t)h, rowbytes);

    if (!rows)
        return -1;
    for (int y = 0; y < h; y++) {
        uint8_t *r = rows + (size_t)y * rowbytes;
        for (int x = 0; x < w * nch; x++) {
            int s = v[(size_t)y * w * nch + x];
            if (bits == 16) {
                r[2 * x] = (uint8_t)(s >> 8);
                r[2 * x + 1] = (uint8_t)s;
            } else if (bits == 8) {
                r[x] = (uint8_t)s;
            } else {
                int bit = x * bits;
                r[bit / 8] |= (uint8_t)(s << (8 - bits - bit % 8));
            }
        }
    }
    const int rc = write_png_file(path, w, h, color, bits, rows, rowbytes, palette, ncolors, trns,
                                  ntrns, interlace);
    free(rows);
    return rc;
}

/* The kinds of the tree, one class folder each. */
struct kind {
    const char *name;
    int color, bits, interlace;
};

static const struct kind kinds[] = {
    {"k00-gray1", PNG_COLOR_TYPE_GRAY, 1, 0},
    {"k01-gray2", PNG_COLOR_TYPE_GRAY, 2, 0},
    {"k02-gray4", PNG_COLOR_TYPE_GRAY, 4, 0},
    {"k03-gray8", PNG_COLOR_TYPE_GRAY, 8, 0},
    {"k04-gray16", PNG_COLOR_TYPE_GRAY, 16, 0},
    {"k05-graya8", PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0},
    {"k06-graya16", PNG_COLOR_TYPE_GRAY_ALPHA, 16, 0},
    {"k07-pal4", PNG_COLOR_TYPE_PALETTE, 4, 0},
    {"k08-pal8-trns", PNG_COLOR_TYPE_PALETTE, 8, 0},
    {"k09-rgb8", PNG_COLOR_TYPE_RGB, 8, 0},
    {"k10-rgb16", PNG_COLOR_TYPE_RGB, 16, 0},
    {"k11-rgba8", PNG_COLOR_TYPE_RGB_ALPHA, 8, 0},
    {"k12-rgba16", PNG_COLOR_TYPE_RGB_ALPHA, 16, 0},
    {"k13-gray8-interlaced", PNG_COLOR_TYPE_GRAY, 8, 1},
    {"k14-rgb8-interlaced", PNG_COLOR_TYPE_RGB, 8, 1},
};
#define NKINDS ((int)(sizeof kinds / sizeof kinds[0]))

/* Writes file i of kind k and fills want (H, W) with the gray values the import must give. */
static int write_kind(const char *path, int k, int i, uint8_t *want)
{
    const struct kind *kd = &kinds[k];
    int v[H * W * 4];
    png_color pal[256];
    png_byte trns[256];
    int nch = kd->color == PNG_COLOR_TYPE_GRAY_ALPHA  ? 2
              : kd->color == PNG_COLOR_TYPE_RGB       ? 3
              : kd->color == PNG_COLOR_TYPE_RGB_ALPHA ? 4
                                                      : 1;
    int alpha = kd->color & PNG_COLOR_MASK_ALPHA;

    for (int j = 0; j < 256; j++) {
        int levels = kd->bits == 4 ? 17 : 1;
        pal[j].red = pal[j].green = pal[j].blue = (png_byte)(j * levels > 255 ? 255 : j * levels);
        trns[j] = j == 5 ? 0 : 255;
    }
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int g = (x * 29 + y * 53 + i * 71 + k * 13) % 256, out;
            int *p = v + ((size_t)y * W + x) * nch;
            if (kd->bits < 8) {
                int level = g >> (8 - kd->bits);
                p[0] = level;
                out = level * 255 / ((1 << kd->bits) - 1);
            } else if (kd->color == PNG_COLOR_TYPE_PALETTE) {
                p[0] = g;
                out = g == 5 ? 0 : g;
            } else {
                for (int c = 0; c < (alpha ? nch - 1 : nch); c++)
                    p[c] = kd->bits == 16 ? g * 257 : g;
                out = g;
            }
            if (alpha) {
                int a = x == 0 && y == 0 ? 0 : x == 1 && y == 0 ? 128 : 255;
                p[nch - 1] = kd->bits == 16 ? a * 257 : a;
                out = (int)roundf((float)out * ((float)a * (1.0f / 255.0f)));
            }
            want[y * W + x] = (uint8_t)out;
        }
    return write_png(path, W, H, kd->color, kd->bits, v,
                     kd->color == PNG_COLOR_TYPE_PALETTE ? pal : NULL,
                     kd->color == PNG_COLOR_TYPE_PALETTE ? 1 << kd->bits : 0, k == 8 ? trns : NULL,
                     k == 8 ? 256 : 0, kd->interlace);
}

static void check_png_kinds(struct nl_store *s)
{
    static uint8_t want[NKINDS + 1][2][H * W];
    struct nl_error err = {0};
    struct nl_dataset *d = NULL;
    char path[600];
    int rc, bad = 0;

    for (int k = 0; k < NKINDS; k++) {
        snprintf(path, sizeof path, "%s/kinds/%s", tmp, kinds[k].name);
        mkdirs(path);
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s/kinds/%s/img%d.png", tmp, kinds[k].name, i);
            if (write_kind(path, k, i, want[k][i]) != 0)
                diag("cannot write %s", path);
        }
    }
    /* Another size, resized: a constant image stays constant. */
    mkdirs(at("kinds/z-big"));
    {
        int v[12 * 16];
        for (int j = 0; j < 12 * 16; j++)
            v[j] = 100;
        write_png(at("kinds/z-big/big.png"), 16, 12, PNG_COLOR_TYPE_GRAY, 8, v, NULL, 0, NULL, 0,
                  0);
        memset(want[NKINDS][0], 100, H * W);
    }
    /* A dotfile is ignored. */
    write_text(at("kinds/k03-gray8/.DS_Store"), "junk");

    const char *src[1] = {at("kinds")};
    rc = nl_import(s, "kinds", src, 1, NULL, &err);
    succeeds(rc, err, "import a tree with every PNG kind");
    rc = rc ? rc : nl_dataset_load(s, "kinds", &d, &err);
    if (rc)
        return;
    is_str(d->kind, "png", "kind png");
    ok(d->shape.c == 1 && d->shape.h == H && d->shape.w == W,
       "shape 1x%dx%d: gray (most files) and the most common size (got %dx%dx%d)", H, W, d->shape.c,
       d->shape.h, d->shape.w);
    is_int(d->nclasses, NKINDS + 1, "one class per folder");
    is_str(d->class_names[0], "k00-gray1", "class names are the sorted folder names");
    is_str(d->class_names[NKINDS], "z-big", "the last class");
    is_int(d->split[NL_TRAIN].n, 2 * NKINDS + 1, "every file imported (the dotfile ignored)");
    for (uint32_t j = 0; j < d->split[NL_TRAIN].n && j < 2 * NKINDS + 1; j++) {
        int k = (int)j / 2, i = (int)j % 2;
        const uint8_t *x = (const uint8_t *)d->split[NL_TRAIN].x + (size_t)j * H * W;
        if (d->split[NL_TRAIN].y[j] != k || memcmp(x, want[k][i], H * W) != 0) {
            bad++;
            diag("sample %u (%s #%d): label %d, first pixels %d %d %d, want %d %d %d", j,
                 k < NKINDS ? kinds[k].name : "z-big", i, d->split[NL_TRAIN].y[j], x[0], x[1], x[2],
                 want[k][i][0], want[k][i][1], want[k][i][2]);
        }
    }
    is_int(bad, 0, "every sample has its label and its exact pixel values");
    like(d->preprocessing, "\"resized\":1", "the preprocessing record counts the resized file");

    /* Predict reads a file as the import stored it. */
    {
        float *a = nl_alloc_floats(H * W), *b = nl_alloc_floats(H * W);
        uint32_t idx = 13; /* k06-graya16 #1 */
        snprintf(path, sizeof path, "%s/kinds/%s/img1.png", tmp, kinds[6].name);
        rc = nl_dataset_sample_from_image(d, path, a, &err);
        nl_dataset_batch(d, NL_TRAIN, &idx, 1, b, NULL);
        double diff = 0;
        for (int p = 0; p < H * W; p++)
            diff = fmax(diff, fabs(a[p] - b[p]));
        ok(rc == 0 && diff < 1e-2, "predict's sample of a file matches the imported one (%g)",
           diff);
        nl_free(a);
        nl_free(b);
    }
    nl_dataset_free(d);

    /* The same tree as RGB, resized to 4x3. */
    struct nl_import_opts o = {.seed = 1, .channels = 3, .width = 4, .height = 3};
    rc = nl_import(s, "kinds-rgb", src, 1, &o, &err);
    succeeds(rc, err, "--rgb --resize 4x3");
    if (rc == 0 && nl_dataset_load(s, "kinds-rgb", &d, &err) == 0) {
        ok(d->shape.c == 3 && d->shape.h == 3 && d->shape.w == 4, "shape 3x3x4");
        nl_dataset_free(d);
    }
}

/* Colour values: RGB planes kept exactly with --rgb; luminance with --gray. */
static void check_png_color(struct nl_store *s)
{
    int v[H * W * 3];
    uint8_t want_rgb[3 * H * W], want_gray[H * W];
    struct nl_error err = {0};
    struct nl_dataset *d = NULL;

    mkdirs(at("color/red"));
    mkdirs(at("color/blue"));
    for (int p = 0; p < H * W; p++) {
        for (int c = 0; c < 3; c++) {
            v[3 * p + c] = (p * 7 + c * 90) % 256;
            want_rgb[c * H * W + p] = (uint8_t)v[3 * p + c];
        }
        want_gray[p] = (uint8_t)roundf(0.299f * (float)v[3 * p] + 0.587f * (float)v[3 * p + 1] +
                                       0.114f * (float)v[3 * p + 2]);
    }
    write_png(at("color/red/a.png"), W, H, PNG_COLOR_TYPE_RGB, 8, v, NULL, 0, NULL, 0, 0);
    write_png(at("color/blue/a.png"), W, H, PNG_COLOR_TYPE_RGB, 8, v, NULL, 0, NULL, 0, 0);
    const char *src[1] = {at("color")};
    int rc = nl_import(s, "color", src, 1, NULL, &err);
    succeeds(rc, err, "import colour PNGs");
    if (rc == 0 && nl_dataset_load(s, "color", &d, &err) == 0) {
        is_int(d->shape.c, 3, "RGB by default when most files are colour");
        ok(memcmp(d->split[NL_TRAIN].x, want_rgb, sizeof want_rgb) == 0, "RGB planes exact");
        is_str(d->class_names[0], "blue", "classes sorted");
        nl_dataset_free(d);
    }
    struct nl_import_opts o = {.seed = 1, .channels = 1};
    rc = nl_import(s, "color-gray", src, 1, &o, &err);
    succeeds(rc, err, "import colour PNGs --gray");
    if (rc == 0 && nl_dataset_load(s, "color-gray", &d, &err) == 0) {
        ok(memcmp(d->split[NL_TRAIN].x, want_gray, sizeof want_gray) == 0,
           "gray is the luminance 0.299 R + 0.587 G + 0.114 B");
        nl_dataset_free(d);
    }
}

/* train/ and test/ folders, and --val carved from train. */
static void check_png_splits(struct nl_store *s)
{
    int v[H * W];
    char path[600];
    struct nl_error err = {0};
    struct nl_dataset *d = NULL;

    for (int p = 0; p < H * W; p++)
        v[p] = p;
    for (int sp = 0; sp < 2; sp++)
        for (int c = 0; c < 2; c++) {
            snprintf(path, sizeof path, "%s/split/%s/c%d", tmp, sp ? "test" : "train", c);
            mkdirs(path);
            for (int i = 0; i < (sp ? 3 : 10); i++) {
                snprintf(path, sizeof path, "%s/split/%s/c%d/%02d.png", tmp, sp ? "test" : "train",
                         c, i);
                write_png(path, W, H, PNG_COLOR_TYPE_GRAY, 8, v, NULL, 0, NULL, 0, 0);
            }
        }
    struct nl_import_opts o = {.seed = 1, .val_fraction = 0.2f};
    const char *src[1] = {at("split")};
    int rc = nl_import(s, "split", src, 1, &o, &err);
    succeeds(rc, err, "import train/ and test/ folders with --val 0.2");
    if (rc == 0 && nl_dataset_load(s, "split", &d, &err) == 0) {
        ok(d->split[NL_TRAIN].n == 16 && d->split[NL_VAL].n == 4 && d->split[NL_TEST].n == 6,
           "16 train, 4 val (stratified), 6 test: got %u %u %u", d->split[NL_TRAIN].n,
           d->split[NL_VAL].n, d->split[NL_TEST].n);
        nl_dataset_free(d);
    }
}

/* A failing import: code, message and an unchanged database. */
static void expect_failure(struct nl_store *s, const char *what, const char *src,
                           const struct nl_import_opts *o, int code, const char *needle,
                           const char *needle2)
{
    struct nl_error err = {0};
    long long before = db_total(s);
    const char *paths[1] = {src};
    int rc = nl_import(s, "broken", paths, 1, o, &err);

    is_int(rc, code, "%s: fails with %s", what, nl_strerror(code));
    diag("%s: %s", what, err.msg);
    like(err.msg, needle, "%s: the message names %s", what, needle);
    if (needle2)
        like(err.msg, needle2, "%s: the message says '%s'", what, needle2);
    ok(db_total(s) == before && nl_dataset_exists(s, "broken", &err) == 0,
       "%s: the database is unchanged", what);
}

struct warn_log {
    int n;
    char last[NL_ERR_MAX + 32];
};

static void log_warn(void *ud, const char *msg)
{
    struct warn_log *w = ud;
    w->n++;
    snprintf(w->last, sizeof w->last, "%s", msg);
}

/* A good tree of n files in 2 classes, plus one bad file written by bad(path). */
static void good_tree(const char *dir, int n)
{
    int v[H * W];
    char path[600];

    for (int p = 0; p < H * W; p++)
        v[p] = 3 * p;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/c%d", dir, i % 2);
        mkdirs(path);
        snprintf(path, sizeof path, "%s/c%d/%04d.png", dir, i % 2, i);
        write_png(path, W, H, PNG_COLOR_TYPE_GRAY, 8, v, NULL, 0, NULL, 0, 0);
    }
}

static void cut_file(const char *src, const char *dst, long keep, long flip_at)
{
    unsigned char buf[8192];
    FILE *f = fopen(src, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    if (flip_at >= 0 && (size_t)flip_at < n)
        for (size_t i = (size_t)flip_at; i < n - 12 && i < (size_t)flip_at + 16; i++)
            buf[i] ^= 0x5a;
    if (keep >= 0 && (size_t)keep < n)
        n = (size_t)keep;
    f = fopen(dst, "wb");
    if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0)
        diag("cannot write %s", dst);
}

static void check_bad_png(struct nl_store *s)
{
    char good[600], bad[600];
    struct warn_log log = {0};
    struct nl_import_opts skip = {.seed = 1, .skip_bad = 1, .warn = log_warn, .warn_ud = &log};
    struct nl_error err = {0};
    struct nl_dataset *d = NULL;

    good_tree(at("bad1"), 6);
    snprintf(good, sizeof good, "%s/c0/0000.png", at("bad1"));

    snprintf(bad, sizeof bad, "%s/c1/zz-truncated.png", at("bad1"));
    cut_file(good, bad, 60, -1);
    expect_failure(s, "truncated PNG", at("bad1"), NULL, NL_EFORMAT, bad, "ends early");
    remove(bad);

    snprintf(bad, sizeof bad, "%s/c1/zz-corrupt.png", at("bad1"));
    cut_file(good, bad, -1, 45);
    expect_failure(s, "corrupt PNG", at("bad1"), NULL, NL_EFORMAT, bad, "corrupt PNG");
    remove(bad);

    snprintf(bad, sizeof bad, "%s/c0/notes.txt", at("bad1"));
    write_text(bad, "these are not pixels\n");
    expect_failure(s, "a text file", at("bad1"), NULL, NL_EFORMAT, bad, "not a PNG");
    remove(bad);

    snprintf(bad, sizeof bad, "%s/c2", at("bad1"));
    mkdirs(bad);
    expect_failure(s, "an empty class folder", at("bad1"), NULL, NL_EFORMAT, bad,
                   "empty class folder");
    rmdir(bad);

    snprintf(bad, sizeof bad, "%s/c1/zz-locked.png", at("bad1"));
    cut_file(good, bad, -1, -1);
    chmod(bad, 0);
    if (geteuid() != 0) {
        expect_failure(s, "an unreadable file", at("bad1"), NULL, NL_EIO, bad, "Permission denied");
    } else {
        for (int i = 0; i < 3; i++)
            ok(1, "# SKIP root reads any file");
    }
    remove(bad);

    /* A file that cannot be opened, even by root: a link to nothing. */
    snprintf(bad, sizeof bad, "%s/c1/zz-gone.png", at("bad1"));
    ok(symlink("/nonexistent/nnlab-test.png", bad) == 0, "made a dangling link");
    expect_failure(s, "a file that cannot be opened", at("bad1"), NULL, NL_ENOENT, bad,
                   "No such file");
    remove(bad);

    expect_failure(s, "a folder without class folders", at("bad1/c0"), NULL, NL_EFORMAT,
                   at("bad1/c0"), "no class folders");
    write_text(at("notes.txt"), "hello\n");
    expect_failure(s, "neither IDX, PNG folder nor CSV", at("notes.txt"), NULL, NL_EINVAL,
                   at("notes.txt"), "not a source");

    /* --skip-bad: the bad files are skipped, named, and counted. */
    snprintf(bad, sizeof bad, "%s/c1/zz-truncated.png", at("bad1"));
    cut_file(good, bad, 60, -1);
    snprintf(bad, sizeof bad, "%s/c0/zz-corrupt.png", at("bad1"));
    cut_file(good, bad, -1, 45);
    const char *src[1] = {at("bad1")};
    int rc = nl_import(s, "skipped", src, 1, &skip, &err);
    succeeds(rc, err, "--skip-bad imports the good files");
    is_int(log.n, 2, "and reports the two bad files");
    like(log.last, "skipped ", "each as skipped");
    if (rc == 0 && nl_dataset_load(s, "skipped", &d, &err) == 0) {
        is_int(d->split[NL_TRAIN].n, 6, "the six good files");
        like(d->preprocessing, "\"skipped\":2", "the record counts the skipped files");
        like(d->preprocessing, "zz-corrupt.png", "and names them");
        nl_dataset_free(d);
    }
}

static void check_csv(struct nl_store *s)
{
    struct nl_error err = {0};
    struct nl_dataset *d = NULL;
    const char *src[1];
    int rc;

    /* String labels, a header, quoted fields, CRLF and a blank line. */
    write_text(at("iris.csv"), "\"sepal, length\",width,species\r\n"
                               "5.1,3.5,setosa\r\n"
                               "\"7.0\",3.2,\"versi\"\"color\"\r\n"
                               "\r\n"
                               "6.3, 3.3 ,virginica\r\n"
                               "4.9,3.0,setosa\r\n");
    src[0] = at("iris.csv");
    rc = nl_import(s, "iris", src, 1, NULL, &err);
    succeeds(rc, err, "CSV with string labels, a header and quoted fields");
    if (rc == 0 && nl_dataset_load(s, "iris", &d, &err) == 0) {
        const float *x = d->split[NL_TRAIN].x;
        ok(d->dtype == NL_F32 && d->shape.c == 2 && d->shape.h == 1 && d->shape.w == 1,
           "float samples of shape (2, 1, 1)");
        ok(d->nclasses == 3 && strcmp(d->class_names[0], "setosa") == 0 &&
               strcmp(d->class_names[1], "versi\"color") == 0 &&
               strcmp(d->class_names[2], "virginica") == 0,
           "string labels become sorted classes with their names");
        ok(d->split[NL_TRAIN].n == 4 && x[0] == 5.1f && x[1] == 3.5f && x[2] == 7.0f &&
               x[4] == 6.3f && x[5] == 3.3f,
           "values as written");
        ok(d->split[NL_TRAIN].y[0] == 0 && d->split[NL_TRAIN].y[1] == 1 &&
               d->split[NL_TRAIN].y[2] == 2 && d->split[NL_TRAIN].y[3] == 0,
           "labels as written");
        is_float(d->mean[0], (5.1 + 7.0 + 6.3 + 4.9) / 4, 1e-5, "per-feature mean");
        float xb[2];
        uint32_t idx = 0;
        nl_dataset_batch(d, NL_TRAIN, &idx, 1, xb, NULL);
        is_float(xb[0], (5.1 - d->mean[0]) / d->std[0], 1e-5, "batches are standardised");
        like(d->preprocessing, "\"sepal, length\"", "the record keeps the feature names");
        nl_dataset_free(d);
    }

    /* Semicolons, decimal commas, integer labels in numeric order, the label column by index. */
    write_text(at("semi.csv"), "10;1,5;2\n7;2,5;3\n3;0,5;4\n10;1;5\n");
    struct nl_import_opts o = {.seed = 1, .label = "1"};
    src[0] = at("semi.csv");
    rc = nl_import(s, "semi", src, 1, &o, &err);
    succeeds(rc, err, "CSV with semicolons and --label 1");
    if (rc == 0 && nl_dataset_load(s, "semi", &d, &err) == 0) {
        const float *x = d->split[NL_TRAIN].x;
        ok(d->nclasses == 3 && strcmp(d->class_names[0], "3") == 0 &&
               strcmp(d->class_names[1], "7") == 0 && strcmp(d->class_names[2], "10") == 0,
           "integer labels in numeric order");
        ok(d->split[NL_TRAIN].y[0] == 2 && d->split[NL_TRAIN].y[2] == 0, "mapped to class ids");
        ok(x[0] == 1.5f && x[1] == 2.0f, "a decimal comma with semicolons");
        nl_dataset_free(d);
    }
    write_text(at("first.csv"), "kind,a,b\ncat,1,2\ndog,3,4\n");
    struct nl_import_opts resize = {.seed = 1, .width = 8, .height = 8};
    expect_failure(s, "--resize on a CSV file", at("first.csv"), &resize, NL_EINVAL, "--resize",
                   "image folders");
    struct nl_import_opts label = {.seed = 1, .label = "kind"};
    expect_failure(s, "--label on a PNG folder", at("bad1"), &label, NL_EINVAL, "--label",
                   "CSV files");
    struct nl_import_opts byname = {.seed = 1, .label = "kind"};
    src[0] = at("first.csv");
    rc = nl_import(s, "first", src, 1, &byname, &err);
    succeeds(rc, err, "--label by name");
    if (rc == 0 && nl_dataset_load(s, "first", &d, &err) == 0) {
        ok(d->shape.c == 2 && d->nclasses == 2 && ((float *)d->split[NL_TRAIN].x)[2] == 3.0f,
           "the named column is the label, the others the features");
        nl_dataset_free(d);
    }

    /* Bad rows: the message names the file and line; nothing is stored. */
    static const struct {
        const char *what, *text, *line, *why;
    } bad[] = {
        {"wrong field count", "a,b,c\n1,2,0\n1,2,3,0\n", ":3:", "expected 3 fields, found 4"},
        {"an empty value", "1,2,0\n1,,1\n", ":2:", "field 2 is empty"},
        {"a non-numeric value", "1,2,0\n1,2,0\n1,two,1\n", ":3:", "'two') is not a number"},
        {"an empty label", "1,2,0\n1,2,\n", ":2:", "the label"},
        {"an unclosed quote", "1,2,0\n\"1,2,1\n", ":2:", "not closed"},
        {"only a header", "a,b,c\n", "bad.csv", "no data rows"},
        {"one column", "1\n2\n", ":1:", "one column"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(at("bad.csv"), bad[i].text);
        expect_failure(s, bad[i].what, at("bad.csv"), NULL, NL_EFORMAT, bad[i].line, bad[i].why);
    }
    write_text(at("bad.csv"), "a,b,c\n1,2,0\n1,x,1\n3,4,1\n5,6\n");
    struct warn_log log = {0};
    struct nl_import_opts skip = {.seed = 1, .skip_bad = 1, .warn = log_warn, .warn_ud = &log};
    src[0] = at("bad.csv");
    rc = nl_import(s, "csv-skip", src, 1, &skip, &err);
    succeeds(rc, err, "--skip-bad skips bad rows");
    is_int(log.n, 2, "two rows reported");
    if (rc == 0 && nl_dataset_load(s, "csv-skip", &d, &err) == 0) {
        is_int(d->split[NL_TRAIN].n, 2, "two rows kept");
        like(d->preprocessing, "\"skipped_lines\":[3,5]", "the skipped lines are recorded");
        nl_dataset_free(d);
    }
    expect_failure(s, "a missing CSV", at("none.csv"), NULL, NL_ENOENT, at("none.csv"), NULL);
}

/* An IDX pair without a test split: --test carves one, stratified, beside --val. */
static void check_idx_carve(struct nl_store *s)
{
    uint8_t im[16 + 100 * 4], lb[8 + 100];
    struct nl_error err = {0};
    struct nl_dataset *d = NULL;
    FILE *f;

    put_be32(im, 0x803);
    put_be32(im + 4, 100);
    put_be32(im + 8, 2);
    put_be32(im + 12, 2);
    put_be32(lb, 0x801);
    put_be32(lb + 4, 100);
    for (int i = 0; i < 100; i++) {
        memset(im + 16 + 4 * i, i, 4);
        lb[8 + i] = (uint8_t)(i % 4);
    }
    f = fopen(at("im-idx3-ubyte"), "wb");
    if (!f || fwrite(im, 1, sizeof im, f) != sizeof im || fclose(f) != 0)
        diag("cannot write the images file");
    f = fopen(at("lb-idx1-ubyte"), "wb");
    if (!f || fwrite(lb, 1, sizeof lb, f) != sizeof lb || fclose(f) != 0)
        diag("cannot write the labels file");
    const char *src[2] = {at("im-idx3-ubyte"), at("lb-idx1-ubyte")};
    struct nl_import_opts o = {.seed = 7, .val_fraction = 0.2f, .test_fraction = 0.2f};
    int rc = nl_import(s, "idx-carved", src, 2, &o, &err);
    succeeds(rc, err, "IDX pair with --val 0.2 --test 0.2");
    if (rc == 0 && nl_dataset_load(s, "idx-carved", &d, &err) == 0) {
        ok(d->split[NL_TRAIN].n == 60 && d->split[NL_VAL].n == 20 && d->split[NL_TEST].n == 20,
           "60 train, 20 val, 20 test: got %u %u %u", d->split[NL_TRAIN].n, d->split[NL_VAL].n,
           d->split[NL_TEST].n);
        int per_class[4] = {0};
        for (uint32_t i = 0; i < d->split[NL_TEST].n; i++)
            per_class[d->split[NL_TEST].y[i]]++;
        ok(per_class[0] == 5 && per_class[1] == 5 && per_class[2] == 5 && per_class[3] == 5,
           "the test split is stratified");
        nl_dataset_free(d);
    }
}

static void check_augment(void)
{
    struct nl_augment a;
    struct nl_error err = {0};
    struct nl_rng aug_rng;
    struct nl_shape shape = {1, 3, 4};
    float x[2 * 12], y[2 * 12];

    ok(nl_augment_parse(&a, "flip,crop:4", &err) == 0 && a.flip && a.crop == 4,
       "parse flip,crop:4");
    ok(nl_augment_parse(&a, "rotate", &err) == NL_EINVAL, "an unknown augmentation is refused");
    like(err.msg, "rotate", "naming it");
    ok(nl_augment_parse(&a, "crop:0", &err) == NL_EINVAL, "crop:0 is refused");
    nl_augment_parse(&a, "none", &err);
    ok(!nl_augment_active(&a), "none is no augmentation");

    /* Flip only: each sample is itself or its mirror. */
    for (int i = 0; i < 24; i++)
        x[i] = y[i] = (float)i + 1;
    a = (struct nl_augment){.flip = 1};
    nl_rng_seed(&aug_rng, 3);
    int flipped = 0, same = 0;
    for (int t = 0; t < 20; t++) {
        memcpy(x, y, sizeof x);
        nl_augment_batch(&a, shape, NULL, NULL, x, 2, &aug_rng);
        for (int i = 0; i < 2; i++) {
            const float *p = x + 12 * i, *q = y + 12 * i;
            int is_same = memcmp(p, q, 12 * sizeof *p) == 0;
            int is_flip = 1;
            for (int r = 0; r < 3; r++)
                for (int c = 0; c < 4; c++)
                    is_flip &= p[r * 4 + c] == q[r * 4 + 3 - c];
            same += is_same;
            flipped += is_flip && !is_same;
        }
    }
    ok(same + flipped == 40 && same > 5 && flipped > 5,
       "flip: mirrored about half the time "
       "(%d of 40)",
       flipped);

    /* Crop: a shifted copy, with zeros coming in. */
    a = (struct nl_augment){.crop = 1};
    int good = 1;
    for (int t = 0; t < 20; t++) {
        memcpy(x, y, sizeof x);
        nl_augment_batch(&a, shape, NULL, NULL, x, 1, &aug_rng);
        int found = 0;
        for (int dy = -1; dy <= 1 && !found; dy++)
            for (int dx = -1; dx <= 1 && !found; dx++) {
                int match = 1;
                for (int r = 0; r < 3; r++)
                    for (int c = 0; c < 4; c++) {
                        int sr = r + dy, sc = c + dx;
                        float want = sr >= 0 && sr < 3 && sc >= 0 && sc < 4 ? y[sr * 4 + sc] : 0;
                        match &= x[r * 4 + c] == want;
                    }
                found = match;
            }
        good &= found;
    }
    ok(good, "crop: every sample is a shift of at most one pixel");
}

/* Peak memory must not grow with the number of files: a tree of 3,000 64x64 PNGs (12 MB of
 * pixels) after one of 300. */
static void check_memory(struct nl_store *s)
{
#ifdef UNDER_ASAN
    (void)s;
    ok(1, "# SKIP AddressSanitizer's quarantine keeps freed memory");
#else
    int v[64 * 64];
    char path[600];
    struct nl_error err = {0};
    long rss[2];

    for (int p = 0; p < 64 * 64; p++)
        v[p] = (p * 31) % 256;
    for (int t = 0; t < 2; t++) {
        int n = t ? 3000 : 300;
        char dir[64], name[16];
        snprintf(dir, sizeof dir, "mem%d", t);
        for (int c = 0; c < 4; c++) {
            snprintf(path, sizeof path, "%s/%s/c%d", tmp, dir, c);
            mkdirs(path);
        }
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "%s/%s/c%d/%05d.png", tmp, dir, i % 4, i);
            v[0] = i % 256;
            write_png(path, 64, 64, PNG_COLOR_TYPE_GRAY, 8, v, NULL, 0, NULL, 0, 0);
        }
        const char *src[1] = {at(dir)};
        snprintf(name, sizeof name, "mem%d", t);
        int rc = nl_import(s, name, src, 1, NULL, &err);
        if (rc)
            diag("%s", err.msg);
        rss[t] = max_rss_kb();
    }
    diag("peak RSS after 300 files %ld KiB, after 3000 files %ld KiB", rss[0], rss[1]);
    ok(rss[1] - rss[0] < 6 * 1024, "import memory stays flat: +%ld KiB for 10x the files",
       rss[1] - rss[0]);
#endif
}

int main(void)
{
    struct nl_error err = {0};
    struct nl_store *s = NULL;

    tmp_make("nnlab-import");
    int rc = nl_store_open(&s, at("nnlab.db"), &err);
    succeeds(rc, err, "open a store");
    if (rc == 0) {
        check_png_kinds(s);
        check_png_color(s);
        check_png_splits(s);
        check_bad_png(s);
        check_csv(s);
        check_idx_carve(s);
        check_memory(s);
        nl_store_close(s);
    }
    check_augment();
    tmp_remove();
    return done_testing();
}
