/* Tests of JPEG reading and photo preprocessing against Pillow and torchvision: the variants of
 * tests/jpeg_fixtures.py (baseline, progressive, gray, CMYK, restart markers, arithmetic coding,
 * EXIF orientations 1-8) and a YCCK file written here decode to Pillow's exact bytes; stretch,
 * centre crop with padding and Resize + CenterCrop give Pillow's and torchvision's bytes; a mixed
 * PNG/JPEG class tree imported with --resize shorter:48,center-crop:40x40 --normalize imagenet
 * gives torchvision's normalised tensors within 1e-5, in training batches and in predict's path;
 * truncated, corrupt and non-JPEG files are refused naming the file with nothing stored, or skipped
 * with --skip-bad; big photos are decoded at reduced DCT scale. The fixtures need Debian's
 * /usr/bin/python3 with python3-pil, python3-torchvision and cjpeg (libjpeg-turbo-progs); without
 * them the test skips. */
#define _XOPEN_SOURCE 700 /* nftw */

#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "core/import/import_internal.h"
#include "core/store/store_internal.h"
#include "import_util.h"
#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/store.h"
#include "tap.h"

#define succeeds(rc, err, ...) (is_int((rc), 0, __VA_ARGS__) || (diag("%s", (err).msg), 0))

/* The whole file; NULL when it cannot be read. */
static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b = NULL;
    long len;

    *n = 0;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        b = malloc((size_t)len + 1);
        if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
            free(b);
            b = NULL;
        }
        *n = (size_t)len;
    }
    fclose(f);
    return b;
}

static int run(const char *cmd)
{
    int rc = system(cmd);
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Bytes of a that differ from b, and the largest difference. */
static size_t differ(const uint8_t *a, const uint8_t *b, size_t n, int *maxd)
{
    size_t bad = 0;

    *maxd = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        bad += d != 0;
        if (d > *maxd)
            *maxd = d;
    }
    return bad;
}

/* Every variant at its own size (no resampling) gives Pillow's bytes. */
static void check_variants(void)
{
    FILE *f = fopen(at("fx/variants.txt"), "r");
    char name[64], path[600];
    int w, h, n = 0;

    ok(f != NULL, "the fixture list exists");
    if (!f)
        return;
    while (fscanf(f, "%63s %d %d", name, &w, &h) == 3) {
        struct nl_error err = {0};
        struct nl_image_info info;
        size_t nwant, bytes = (size_t)3 * w * h;
        uint8_t *got = nl_malloc(bytes), *want;
        int maxd, rc;

        snprintf(path, sizeof path, "%s/fx/v/%s.jpg", tmp, name);
        rc = nl_image_probe(path, &info, &err);
        ok(rc == 0 && info.format == NL_IMAGE_JPEG && (int)info.w == w && (int)info.h == h,
           "%s: probed as a %dx%d JPEG (got %ux%u)", name, w, h, info.w, info.h);
        rc = nl_image_read(path, 3, NULL, h, w, got, NULL, &err);
        succeeds(rc, err, "%s: decodes", name);
        snprintf(path, sizeof path, "%s/fx/v/%s.rgb", tmp, name);
        want = slurp(path, &nwant);
        if (rc == 0 && want && nwant == bytes) {
            size_t bad = differ(got, want, bytes, &maxd);
            ok(bad == 0, "%s: Pillow's exact RGB bytes (%zu differ, by up to %d)", name, bad, maxd);
        } else {
            ok(0, "%s: Pillow's bytes are there to compare (%zu of %zu)", name, nwant, bytes);
        }
        free(want);
        if (strcmp(name, "gray") == 0) {
            snprintf(path, sizeof path, "%s/fx/v/%s.l", tmp, name);
            want = slurp(path, &nwant);
            snprintf(path, sizeof path, "%s/fx/v/%s.jpg", tmp, name);
            rc = nl_image_read(path, 1, NULL, h, w, got, NULL, &err);
            ok(rc == 0 && want && nwant == (size_t)w * h && differ(got, want, nwant, &maxd) == 0,
               "gray: one channel, Pillow's L bytes");
            free(want);
        }
        nl_free(got);
        n++;
    }
    fclose(f);
    is_int(n, 18, "every variant checked");
}

/* A YCCK JPEG (Adobe transform 2), written here with libjpeg since neither Pillow nor cjpeg
 * makes one, decodes to Pillow's RGB bytes. */
static void check_ycck(void)
{
    enum { YW = 19, YH = 13 };
    uint8_t cmyk[YH][YW * 4], got[3 * YW * YH], *want = NULL;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    struct nl_error err = {0};
    char cmd[1500];
    size_t n = 0;
    FILE *f = fopen(at("ycck.jpg"), "wb");

    if (!f) {
        ok(0, "write ycck.jpg");
        return;
    }
    for (int y = 0; y < YH; y++)
        for (int x = 0; x < YW; x++) {
            cmyk[y][4 * x + 0] = (uint8_t)(x * 13);
            cmyk[y][4 * x + 1] = (uint8_t)(y * 19);
            cmyk[y][4 * x + 2] = (uint8_t)((x + y) * 7);
            cmyk[y][4 * x + 3] = (uint8_t)(x * y % 200);
        }
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = YW;
    c.image_height = YH;
    c.input_components = 4;
    c.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, JCS_YCCK);
    jpeg_set_quality(&c, 95, TRUE);
    jpeg_start_compress(&c, TRUE);
    for (int y = 0; y < YH; y++) {
        JSAMPROW row = cmyk[y];
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c 'import sys, numpy; from PIL import Image; "
             "im = Image.open(sys.argv[1]); assert im.mode == \"CMYK\"; "
             "open(sys.argv[2], \"wb\").write(numpy.asarray(im.convert(\"RGB\"))"
             ".transpose(2, 0, 1).tobytes())' '%s' '%s'",
             at("ycck.jpg"), at("ycck.rgb"));
    ok(run(cmd) == 0, "Pillow reads the YCCK file as CMYK");
    want = slurp(at("ycck.rgb"), &n);
    int rc = nl_image_read(at("ycck.jpg"), 3, NULL, YH, YW, got, NULL, &err);
    succeeds(rc, err, "a YCCK JPEG decodes");
    int maxd = 0;
    ok(rc == 0 && want && n == sizeof got && differ(got, want, n, &maxd) == 0,
       "YCCK: Pillow's exact RGB bytes (differ by up to %d)", maxd);
    free(want);
}

/* Truncated, corrupt and non-JPEG files are refused, naming the file and the trouble. */
static void check_bad_files(void)
{
    static const struct {
        const char *file, *why;
    } bad[] = {
        {"truncated.jpg", "corrupt JPEG: Premature end of JPEG file"},
        {"corrupt.jpg", "corrupt JPEG"},
        {"notjpeg.jpg", "not a PNG or JPEG image"},
    };
    uint8_t px[3 * 8 * 8];

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct nl_error err = {0};
        char path[600], want[700];
        snprintf(path, sizeof path, "%s/fx/v/%s", tmp, bad[i].file);
        int rc = nl_image_read(path, 3, NULL, 8, 8, px, NULL, &err);
        is_int(rc, NL_EFORMAT, "%s is refused", bad[i].file);
        snprintf(want, sizeof want, "%s: %s", path, bad[i].why);
        like(err.msg, want, "%s: the message names the file and says why", bad[i].file);
    }
}

/* --resize modes against Pillow and torchvision. */
static void check_resize_modes(void)
{
    struct nl_error err = {0};
    struct nl_resize r;
    uint8_t got[3 * 64 * 64], *want;
    size_t n;
    int maxd, denom = 0, rc;

    rc = nl_resize_parse(&r, "stretch:20x15", &err);
    rc = rc ? rc : nl_image_read(at("fx/v/baseline.jpg"), 3, &r, 15, 20, got, NULL, &err);
    want = slurp(at("fx/stretch.rgb"), &n);
    ok(rc == 0 && want && n == 3 * 20 * 15 && differ(got, want, n, &maxd) == 0,
       "stretch:20x15 gives Pillow's resize((20, 15), BILINEAR) exactly");
    free(want);

    rc = nl_resize_parse(&r, "center-crop:50x40", &err);
    rc = rc ? rc : nl_image_read(at("fx/v/baseline.jpg"), 3, &r, 40, 50, got, NULL, &err);
    want = slurp(at("fx/padcrop.rgb"), &n);
    ok(rc == 0 && want && n == 3 * 50 * 40 && differ(got, want, n, &maxd) == 0,
       "center-crop:50x40 of a 37x29 photo pads with black as torchvision's CenterCrop");
    free(want);

    /* A 960x720 photo to shorter:64: decoded at 1/8 (120x90 still covers 85x64). */
    rc = nl_resize_parse(&r, "shorter:64,center-crop:64x64", &err);
    rc = rc ? rc : nl_image_read(at("fx/big.jpg"), 3, &r, 64, 64, got, &denom, &err);
    succeeds(rc, err, "a big photo with shorter:64,center-crop:64x64");
    is_int(denom, 8, "decoded at 1/8 scale by libjpeg's DCT scaling");
    want = slurp(at("fx/big.rgb"), &n);
    if (rc == 0 && want && n == sizeof got) {
        double sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += fabs((double)got[i] - want[i]);
        ok(sum / (double)n < 3.0,
           "close to torchvision's full decode + Resize + CenterCrop (mean |diff| %.2f levels)",
           sum / (double)n);
    } else {
        ok(0, "torchvision's big.rgb is there to compare");
    }
    free(want);

    /* Parsing and writing back. */
    char text[96];
    rc = nl_resize_parse(&r, "shorter:256,center-crop:224x224", &err);
    nl_resize_format(&r, text, sizeof text);
    ok(rc == 0 && strcmp(text, "shorter:256,center-crop:224x224") == 0, "round trip: %s", text);
    rc = nl_resize_parse(&r, "28x28", &err);
    nl_resize_format(&r, text, sizeof text);
    ok(rc == 0 && strcmp(text, "stretch:28x28") == 0, "WxH is stretch:WxH (%s)", text);
    is_int(nl_resize_parse(&r, "shorter:0", &err), NL_EINVAL, "shorter:0 is refused");
    is_int(nl_resize_parse(&r, "shorter:8,stretch:4x4", &err), NL_EINVAL,
           "two resizes are refused");
    is_int(nl_resize_parse(&r, "center-crop:4x4,shorter:8", &err), NL_EINVAL,
           "a resize after the crop is refused");
    is_int(nl_resize_parse(&r, "fit:4", &err), NL_EINVAL, "an unknown mode is refused");
    like(err.msg, "shorter:S", "the message lists the modes");
}

/* The mixed tree with Resize(48) + CenterCrop(40) and ImageNet statistics: torchvision's
 * tensors, in batches and through predict's path. */
static void check_tree(struct nl_store *s)
{
    const int n = 18, sample = 3 * 40 * 40;
    struct nl_import_opts o = {
        .seed = 1, .shorter = 48, .crop_w = 40, .crop_h = 40, .normalize = NL_NORM_IMAGENET};
    const char *src[1] = {at("fx/tree")};
    struct nl_error err = {0};
    struct nl_dataset *d = NULL;
    size_t nref;
    float *ref = (float *)slurp(at("fx/tree.f32"), &nref);
    int rc = nl_import(s, "photos", src, 1, &o, &err);

    succeeds(rc, err, "import a mixed PNG/JPEG tree with shorter:48,center-crop:40x40, imagenet");
    rc = rc ? rc : nl_dataset_load(s, "photos", &d, &err);
    if (rc || !ref || nref != (size_t)n * sample * sizeof(float)) {
        ok(0, "the dataset and torchvision's tensors are there (%zu bytes)", nref);
        free(ref);
        nl_dataset_free(d);
        return;
    }
    is_str(d->kind, "image", "kind image: PNG and JPEG");
    ok(d->shape.c == 3 && d->shape.h == 40 && d->shape.w == 40, "shape 3x40x40");
    is_int(d->split[NL_TRAIN].n, n, "every file imported");
    is_float(d->mean[1], 0.456, 1e-7, "ImageNet's mean stored");
    is_float(d->std[2], 0.225, 1e-7, "ImageNet's std stored");
    like(d->preprocessing, "\"resize\":\"shorter:48,center-crop:40x40\"",
         "the record has --resize");
    like(d->preprocessing, "\"png\":3,\"jpeg\":15", "the record counts PNG and JPEG files");

    float *x = nl_alloc_floats((size_t)n * sample), *p = nl_alloc_floats((size_t)sample);
    uint32_t idx[18];
    double worst = 0, worst_p = 0;
    for (int i = 0; i < n; i++)
        idx[i] = (uint32_t)i;
    nl_dataset_batch(d, NL_TRAIN, idx, n, x, NULL);
    for (size_t i = 0; i < (size_t)n * sample; i++)
        worst = fmax(worst, fabs((double)x[i] - ref[i]));
    ok(worst < 1e-5, "every normalised input equals torchvision's within 1e-5 (max %.3g)", worst);

    /* predict's path on the portrait JPEG with EXIF orientation 6, squares/p1.JPG (sample 7) */
    rc = nl_dataset_sample_from_image(d, at("fx/tree/squares/p1.JPG"), p, &err);
    succeeds(rc, err, "predict reads a JPEG");
    for (int i = 0; rc == 0 && i < sample; i++)
        worst_p = fmax(worst_p, fabs((double)p[i] - ref[(size_t)7 * sample + i]));
    ok(rc == 0 && worst_p < 1e-5, "predict's input equals torchvision's (max %.3g)", worst_p);
    ok(rc == 0 && memcmp(p, x + (size_t)7 * sample, (size_t)sample * sizeof *p) == 0,
       "predict's input is the imported sample's, bit for bit");
    nl_free(x);
    nl_free(p);
    free(ref);
    nl_dataset_free(d);

    /* shorter:48 alone: the most common size after scaling; the six sizes of the tree become six
     * sizes (64x48, 48x64, 48x48, ...), three files each, and ties go to the smaller: 48x48. And
     * --normalize none stores mean 0, std 1. */
    struct nl_import_opts o2 = {.seed = 1, .shorter = 48, .normalize = NL_NORM_NONE};
    rc = nl_import(s, "photos-shorter", src, 1, &o2, &err);
    succeeds(rc, err, "shorter:48 alone, --normalize none");
    if (rc == 0 && nl_dataset_load(s, "photos-shorter", &d, &err) == 0) {
        ok(d->shape.h == 48 && d->shape.w == 48,
           "the most common size after scaling: 48x48 (%dx%d)", d->shape.w, d->shape.h);
        ok(d->mean[0] == 0 && d->std[0] == 1 && d->mean[2] == 0 && d->std[2] == 1,
           "--normalize none: mean 0, std 1");
        nl_dataset_free(d);
    }
    /* --normalize imagenet needs RGB. */
    struct nl_import_opts o3 = {.seed = 1, .channels = 1, .normalize = NL_NORM_IMAGENET};
    rc = nl_import(s, "photos-gray", src, 1, &o3, &err);
    is_int(rc, NL_EINVAL, "--gray with --normalize imagenet is refused");
    like(err.msg, "--normalize imagenet needs RGB", "the message says why");
}

/* A tree with bad JPEGs: refused atomically naming the file, or skipped with --skip-bad. */
static void check_bad_tree(struct nl_store *s)
{
    static const char *const bad[] = {"truncated.jpg", "corrupt.jpg", "notjpeg.jpg"};
    const char *src[1] = {at("fx/bad")};
    struct nl_import_opts o = {.seed = 1, .shorter = 32, .crop_w = 32, .crop_h = 32};
    struct nl_error err = {0};
    char cmd[1500];

    snprintf(cmd, sizeof cmd, "cp -r '%s/fx/tree' '%s/fx/bad'", tmp, tmp);
    ok(run(cmd) == 0, "copy the tree");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long long before = count_rows(s, "samples") + 1000 * count_rows(s, "datasets");
        snprintf(cmd, sizeof cmd, "cp '%s/fx/v/%s' '%s/fx/bad/squares/%s'", tmp, bad[i], tmp,
                 bad[i]);
        ok(run(cmd) == 0, "add %s", bad[i]);
        int rc = nl_import(s, "bad", src, 1, &o, &err);
        is_int(rc, NL_EFORMAT, "a tree with %s is refused", bad[i]);
        like(err.msg, bad[i], "the message names %s", bad[i]);
        ok(count_rows(s, "samples") + 1000 * count_rows(s, "datasets") == before &&
               nl_dataset_exists(s, "bad", &err) == 0,
           "nothing was stored");
        snprintf(cmd, sizeof cmd, "%s/fx/bad/squares/%s", tmp, bad[i]);
        if (i + 1 < sizeof bad / sizeof bad[0])
            remove(cmd);
    }
    for (size_t i = 0; i + 1 < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "cp '%s/fx/v/%s' '%s/fx/bad/squares/%s'", tmp, bad[i], tmp,
                 bad[i]);
        run(cmd);
    }
    o.skip_bad = 1;
    struct nl_dataset *d = NULL;
    int rc = nl_import(s, "bad", src, 1, &o, &err);
    succeeds(rc, err, "--skip-bad imports the rest");
    if (rc == 0 && nl_dataset_load(s, "bad", &d, &err) == 0) {
        is_int(d->split[NL_TRAIN].n, 18, "the 18 good files");
        like(d->preprocessing, "\"skipped\":3", "three files skipped");
        like(d->preprocessing, "corrupt.jpg", "the record names them");
        nl_dataset_free(d);
    }
}

/* The command line: --resize and --normalize, and the summary. */
static void check_cli(void)
{
    const char *bin = getenv("NNLAB_BIN");
    char cmd[1500];
    size_t n;

    ok(bin != NULL, "NNLAB_BIN names the program");
    if (!bin)
        return;
    snprintf(cmd, sizeof cmd,
             "'%s' --db '%s/cli.db' --json import cli '%s/fx/tree' --resize "
             "shorter:48,center-crop:40x40 --normalize imagenet > '%s/cli.out' 2>&1",
             bin, tmp, tmp, tmp);
    is_int(run(cmd), 0, "nnlab import --resize shorter:48,center-crop:40x40 --normalize imagenet");
    char *out = (char *)slurp(at("cli.out"), &n);
    if (out)
        out[n] = '\0';
    like(out ? out : "", "\"kind\":\"image\",\"shape\":[3,40,40]", "the summary");
    free(out);
    snprintf(cmd, sizeof cmd,
             "'%s' --db '%s/cli.db' import cli2 '%s/fx/tree' --normalize imagenet --gray "
             "> '%s/cli.out' 2>&1",
             bin, tmp, tmp, tmp);
    ok(run(cmd) != 0, "--gray --normalize imagenet fails");
    snprintf(cmd, sizeof cmd,
             "'%s' --db '%s/cli.db' import cli3 '%s/fx/tree' --resize shorter:x > '%s/cli.out' "
             "2>&1",
             bin, tmp, tmp, tmp);
    ok(run(cmd) != 0, "--resize shorter:x fails");
    out = (char *)slurp(at("cli.out"), &n);
    if (out)
        out[n] = '\0';
    like(out ? out : "", "shorter:S", "and says what it wants");
    free(out);
}

int main(void)
{
    const char *srcdir = getenv("NNLAB_SOURCE_ROOT");
    struct nl_error err = {0};
    struct nl_store *s = NULL;
    char cmd[1200];

    if (access("/usr/bin/python3", X_OK) != 0 || !srcdir)
        skip_all("needs /usr/bin/python3 and NNLAB_SOURCE_ROOT");
    if (run("/usr/bin/python3 -c 'import PIL, numpy, torchvision' 2>/dev/null") != 0 ||
        run("command -v cjpeg >/dev/null") != 0)
        skip_all("needs python3-pil, python3-torchvision and cjpeg (libjpeg-turbo-progs)");
    tmp_make("nnlab-jpeg");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/jpeg_fixtures.py' '%s/fx' >&2", srcdir,
             tmp);
    if (run(cmd) != 0) {
        printf("Bail out! tests/jpeg_fixtures.py failed\n");
        tmp_remove();
        return 1;
    }
    check_variants();
    check_ycck();
    check_bad_files();
    check_resize_modes();
    int rc = nl_store_open(&s, at("nnlab.db"), &err);
    succeeds(rc, err, "open a store");
    if (rc == 0) {
        check_tree(s);
        check_bad_tree(s);
        nl_store_close(s);
    }
    check_cli();
    tmp_remove();
    return done_testing();
}
