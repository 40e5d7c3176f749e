/* Tests of the photo augmentations (core/engine/augment.c): parsing and writing back, random
 * resized crop against a naive twin (two-dimensional bilinear sampling of the box torchvision's
 * get_params draws), colour jitter's laws (brightness scales, contrast keeps the gray mean,
 * saturation leaves gray alone, all within the factor ranges), reproducibility by seed, the run
 * settings that carry the options, and the window's preview of augmented samples. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "nnlab/spec.h"
#include "nnlab/trainer.h"
#include "tap.h"

#define H 12
#define W 16

static void check_parse(void)
{
    struct nl_error err = {0};
    struct nl_augment a;
    char text[256];
    int rc;

    rc = nl_augment_parse(&a, "resized-crop", &err);
    ok(rc == 0 && a.scale_min == 0.08f && a.scale_max == 1.0f && a.ratio_min == 0.75f &&
           a.ratio_max == 4.0f / 3.0f,
       "resized-crop: torchvision's scale (0.08, 1) and ratio (3/4, 4/3)");
    ok(nl_augment_active(&a), "resized-crop is active");
    rc = nl_augment_parse(&a,
                          "resized-crop:0.25-0.5:0.5-2,flip,brightness:0.4,contrast:0.3,"
                          "saturation:0.2,crop:3",
                          &err);
    ok(rc == 0 && a.scale_min == 0.25f && a.scale_max == 0.5f && a.ratio_min == 0.5f &&
           a.ratio_max == 2.0f && a.flip && a.crop == 3 && a.brightness == 0.4f &&
           a.contrast == 0.3f && a.saturation == 0.2f,
       "every option parsed");
    nl_augment_format(&a, text, sizeof text);
    struct nl_augment b;
    rc = nl_augment_parse(&b, text, &err);
    ok(rc == 0 && memcmp(&a, &b, sizeof a) == 0, "written back and read again: %s", text);
    rc = nl_augment_parse(&a, "resized-crop:0.08-1", &err);
    ok(rc == 0 && a.ratio_min == 0.75f && a.ratio_max == 4.0f / 3.0f,
       "resized-crop:SMIN-SMAX keeps the default ratio");
    static const char *const bad[] = {
        "resized-crop:0-1",
        "resized-crop:0.5-0.2",
        "resized-crop:0.1-1.5",
        "resized-crop:0.1-1:2-1",
        "resized-crop:0.1-1:1-2:3",
        "brightness:0",
        "contrast:-1",
        "saturation:x",
        "hue:0.1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        is_int(nl_augment_parse(&a, bad[i], &err), NL_EINVAL, "'%s' is refused", bad[i]);
    like(err.msg, "brightness:B", "an unknown name lists the known ones");
}

/* torchvision's get_params with a fixed share and ratio: one try always fits. */
static void draw_box(struct nl_rng *rng, float share, int *top, int *left, int *bh, int *bw)
{
    double target = (double)H * W * (share + (share - share) * nl_rng_uniform(rng));
    double ar = exp(log(1.0) + 0 * (double)nl_rng_uniform(rng));
    *bw = (int)lround(sqrt(target * ar));
    *bh = (int)lround(sqrt(target / ar));
    *top = (int)nl_rng_below(rng, (uint32_t)(H - *bh + 1));
    *left = (int)nl_rng_below(rng, (uint32_t)(W - *bw + 1));
}

static double sample2d(const float *p, int top, int left, int bh, int bw, int y, int x)
{
    double sy = (y + 0.5) * bh / H - 0.5, sx = (x + 0.5) * bw / W - 0.5;
    sy = sy < 0 ? 0 : sy;
    sx = sx < 0 ? 0 : sx;
    int y0 = (int)sy, x0 = (int)sx, y1 = y0 + 1 < bh ? y0 + 1 : bh - 1,
        x1 = x0 + 1 < bw ? x0 + 1 : bw - 1;
    double fy = sy - y0, fx = sx - x0;
#define AT(r, c) (double)p[(size_t)(top + (r)) * W + left + (c)]
    return (1 - fy) * ((1 - fx) * AT(y0, x0) + fx * AT(y0, x1)) +
           fy * ((1 - fx) * AT(y1, x0) + fx * AT(y1, x1));
#undef AT
}

static void check_resized_crop(void)
{
    const struct nl_shape shape = {2, H, W};
    struct nl_augment a = {.scale_min = 0.25f, .scale_max = 0.25f, .ratio_min = 1, .ratio_max = 1};
    float x[2 * H * W], y[2 * H * W];
    struct nl_rng rng, twin;
    double worst = 0;
    int moved = 0;

    for (int i = 0; i < 2 * H * W; i++)
        y[i] = (float)sin(i * 0.37) + (float)(i % 7) * 0.1f;
    for (int t = 0; t < 20; t++) {
        int top, left, bh, bw;
        memcpy(x, y, sizeof x);
        nl_rng_seed(&rng, 100 + (uint64_t)t);
        nl_rng_seed(&twin, 100 + (uint64_t)t);
        nl_augment_batch(&a, shape, NULL, NULL, x, 1, &rng);
        draw_box(&twin, 0.25f, &top, &left, &bh, &bw);
        moved += top != 0 || left != 0;
        for (int c = 0; c < 2; c++)
            for (int r = 0; r < H; r++)
                for (int col = 0; col < W; col++)
                    worst = fmax(worst, fabs(x[(c * H + r) * W + col] -
                                             sample2d(y + c * H * W, top, left, bh, bw, r, col)));
    }
    ok(worst < 1e-5, "resized-crop equals 2-D bilinear sampling of torchvision's box (max %.2g)",
       worst);
    ok(moved > 5, "the box moves about (%d of 20 not at the corner)", moved);

    /* The whole image at share 1 and ratio W/H: unchanged. */
    a = (struct nl_augment){
        .scale_min = 1, .scale_max = 1, .ratio_min = (float)W / H, .ratio_max = (float)W / H};
    memcpy(x, y, sizeof x);
    nl_rng_seed(&rng, 5);
    nl_augment_batch(&a, shape, NULL, NULL, x, 1, &rng);
    worst = 0;
    for (int i = 0; i < 2 * H * W; i++)
        worst = fmax(worst, fabs(x[i] - y[i]));
    ok(worst < 1e-6, "share 1 at the image's aspect leaves it as it is (max %.2g)", worst);

    /* Defaults: a constant image stays constant, and the same seed gives the same batch. */
    nl_augment_parse(&a, "resized-crop,flip", NULL);
    for (int i = 0; i < 2 * H * W; i++)
        x[i] = 0.75f;
    nl_rng_seed(&rng, 9);
    nl_augment_batch(&a, shape, NULL, NULL, x, 1, &rng);
    int constant = 1;
    for (int i = 0; i < 2 * H * W; i++)
        constant &= fabsf(x[i] - 0.75f) < 1e-6f;
    ok(constant, "a constant image stays constant");
    float x2[2 * H * W];
    memcpy(x, y, sizeof x);
    memcpy(x2, y, sizeof x2);
    nl_rng_seed(&rng, 11);
    nl_augment_batch(&a, shape, NULL, NULL, x, 1, &rng);
    nl_rng_seed(&rng, 11);
    nl_augment_batch(&a, shape, NULL, NULL, x2, 1, &rng);
    ok(memcmp(x, x2, sizeof x) == 0, "the same seed, the same augmented batch");
    nl_rng_seed(&rng, 12);
    memcpy(x2, y, sizeof x2);
    nl_augment_batch(&a, shape, NULL, NULL, x2, 1, &rng);
    ok(memcmp(x, x2, sizeof x) != 0, "another seed, another batch");
}

/* Pixels in [0.1, 0.5] of a 3-channel image, normalised by mean and std. */
static void photo(float *x, const float *mean, const float *std, int gray)
{
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < H * W; p++) {
            float v = 0.1f + 0.4f * (float)((gray ? p * 7 : p * 7 + c * 31) % 97) / 96.0f;
            x[c * H * W + p] = (v - mean[c]) / std[c];
        }
}

static void pixels(float *x, const float *mean, const float *std)
{
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < H * W; p++)
            x[c * H * W + p] = x[c * H * W + p] * std[c] + mean[c];
}

static double gray_mean(const float *v)
{
    double s = 0;
    for (int p = 0; p < H * W; p++)
        s += 0.2989 * v[p] + 0.587 * v[H * W + p] + 0.114 * v[2 * H * W + p];
    return s / (H * W);
}

static void check_jitter(void)
{
    const struct nl_shape shape = {3, H, W};
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    float x[3 * H * W], y[3 * H * W];
    struct nl_rng rng;
    struct nl_augment a = {.brightness = 0.5f};
    int law = 1, spread = 0;
    double fmin = 9, fmax_ = 0;

    nl_rng_seed(&rng, 21);
    for (int t = 0; t < 30; t++) {
        photo(x, mean, std, 0);
        photo(y, mean, std, 0);
        nl_augment_batch(&a, shape, mean, std, x, 1, &rng);
        pixels(x, mean, std);
        pixels(y, mean, std);
        double f = x[0] / y[0];
        for (int i = 0; i < 3 * H * W; i++)
            law &= fabs(x[i] - f * y[i]) < 1e-5;
        fmin = fmin < f ? fmin : f;
        fmax_ = fmax_ > f ? fmax_ : f;
        spread += fabs(f - 1) > 0.05;
    }
    ok(law, "brightness scales every pixel by one factor");
    ok(fmin >= 0.5 - 1e-6 && fmax_ <= 1.5 + 1e-6 && spread > 15,
       "its factors lie in [0.5, 1.5] and vary (%.3f to %.3f)", fmin, fmax_);

    a = (struct nl_augment){.contrast = 0.5f};
    law = 1;
    for (int t = 0; t < 10; t++) {
        photo(x, mean, std, 0);
        photo(y, mean, std, 0);
        nl_augment_batch(&a, shape, mean, std, x, 1, &rng);
        pixels(x, mean, std);
        pixels(y, mean, std);
        law &= fabs(gray_mean(x) - gray_mean(y)) < 1e-4;
    }
    ok(law, "contrast keeps the mean of the gray image");

    a = (struct nl_augment){.saturation = 0.9f};
    photo(x, mean, std, 1);
    photo(y, mean, std, 1);
    nl_augment_batch(&a, shape, mean, std, x, 1, &rng);
    double worst = 0;
    for (int i = 0; i < 3 * H * W; i++)
        worst = fmax(worst, fabs(x[i] - y[i]));
    ok(worst < 1e-4, "saturation leaves a gray image gray (max %.2g)", worst);
    photo(x, mean, std, 0);
    photo(y, mean, std, 0);
    nl_augment_batch(&a, shape, mean, std, x, 1, &rng);
    ok(memcmp(x, y, sizeof x) != 0, "and changes a coloured one");

    /* All three with a flip: pixels stay within [0, 1]. */
    nl_augment_parse(&a, "flip,brightness:2,contrast:2,saturation:2", NULL);
    int inside = 1;
    for (int t = 0; t < 10; t++) {
        photo(x, mean, std, 0);
        nl_augment_batch(&a, shape, mean, std, x, 1, &rng);
        pixels(x, mean, std);
        for (int i = 0; i < 3 * H * W; i++)
            inside &= x[i] >= -1e-5f && x[i] <= 1 + 1e-5f;
    }
    ok(inside, "strong jitter keeps pixels within [0, 1]");
}

/* The options survive a run's settings (resume) unchanged. */
static void check_settings(void)
{
    struct nl_error err = {0};
    struct nl_model *m = NULL;
    struct nl_spec *spec = NULL;
    struct nl_train_opts o, back;
    long skipped = 0;
    int cluster = 0, rc;

    rc = nl_spec_load(&spec, "mlp", NULL, NULL, &err);
    rc = rc ? rc : nl_model_build(&m, spec, (struct nl_shape){3, 8, 8}, 4, &err);
    nl_spec_free(spec);
    if (rc != 0) {
        ok(0, "a model for the settings: %s", err.msg);
        return;
    }
    nl_train_defaults(&o);
    nl_augment_parse(&o.augment, "resized-crop:0.3-0.9:0.6-1.7,flip,brightness:0.25,saturation:0.1",
                     &err);
    char *json = nl_run_settings_format(&o, m, (struct nl_shape){3, 8, 8}, 4, 0, 0);
    rc = json ? nl_run_settings_parse(json, "r", &back, &skipped, &cluster, &err) : -1;
    ok(rc == 0 && memcmp(&o.augment, &back.augment, sizeof o.augment) == 0,
       "the augmentation survives the run settings");
    like(json ? json : "", "\"resized_crop\":\"0.300000012-0.899999976:", "written exactly");
    nl_free(json);
    nl_model_free(m);
}

/* The window's preview: no augmentation gives the stored pixels back; a flip gives each sample
 * or its mirror; another draw, another batch. */
static void check_preview(void)
{
    struct nl_dataset d = {
        .name = "t", .shape = {3, 4, 5}, .dtype = NL_U8, .nclasses = 2, .nnorm = 3};
    float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    uint8_t x[6 * 60], out[6 * 60], out2[6 * 60];
    int32_t y[6] = {0, 1, 0, 1, 0, 1};
    struct nl_augment a = {0};
    struct nl_error err = {0};
    int rc;

    for (int i = 0; i < 6 * 60; i++)
        x[i] = (uint8_t)(i * 37 % 256);
    d.mean = mean;
    d.std = std;
    d.split[NL_TRAIN].n = 6;
    d.split[NL_TRAIN].x = x;
    d.split[NL_TRAIN].y = y;
    rc = nl_augment_preview(&d, &a, 1, 6, out, &err);
    ok(rc == 0 && memcmp(out, x, sizeof x) == 0, "no augmentation: the stored pixels back");
    a.flip = 1;
    rc = nl_augment_preview(&d, &a, 2, 6, out, &err);
    int good = rc == 0, mirrored = 0;
    for (int i = 0; i < 6 && good; i++) {
        int same = memcmp(out + 60 * i, x + 60 * i, 60) == 0, mirror = 1;
        for (int c = 0; c < 3; c++)
            for (int r = 0; r < 4; r++)
                for (int col = 0; col < 5; col++)
                    mirror &=
                        out[60 * i + c * 20 + r * 5 + col] == x[60 * i + c * 20 + r * 5 + 4 - col];
        good &= same || mirror;
        mirrored += mirror && !same;
    }
    ok(good, "flip: each sample or its mirror (%d mirrored)", mirrored);
    nl_augment_parse(&a, "resized-crop,brightness:0.5", NULL);
    rc = nl_augment_preview(&d, &a, 3, 6, out, &err);
    rc = rc ? rc : nl_augment_preview(&d, &a, 4, 6, out2, &err);
    ok(rc == 0 && memcmp(out, out2, sizeof out) != 0, "another draw, another batch");
    is_int(nl_augment_preview(&d, &a, 1, 7, out, &err), NL_EINVAL, "more samples than train has");
    d.dtype = NL_F32;
    is_int(nl_augment_preview(&d, &a, 1, 2, out, &err), NL_EINVAL, "a float dataset is refused");
}

int main(void)
{
    check_parse();
    check_resized_crop();
    check_jitter();
    check_settings();
    check_preview();
    return done_testing();
}
