/* Training-time augmentation, applied in place to normalised training batches by each trainer
 * thread with its own generator (seeded by the run's seed, the step and the thread), in
 * torchvision's order:
 *   resized-crop  RandomResizedCrop: up to 10 tries of a box of area share U(scale) and aspect
 *                 exp(U(log ratio)), sides rounded, placed uniformly, else the centre box clamped
 *                 to the ratio range; resized back to the sample's size by bilinear interpolation
 *                 (pixel centres aligned). The box is never larger than the sample, so this only
 *                 enlarges and needs no low-pass filter; being linear, it commutes with the
 *                 normalisation.
 *   flip          mirror left-right with probability 1/2.
 *   brightness, contrast, saturation
 *                 ColorJitter: each factor uniform in [max(0, 1 - v), 1 + v], applied in a random
 *                 order to pixels in [0, 1] (un-normalised with the dataset's mean and std, then
 *                 normalised again), each clamped to [0, 1]: brightness scales, contrast blends
 *                 with the mean of the gray image, saturation with the gray image (gray =
 *                 0.2989 R + 0.587 G + 0.114 B, torchvision's weights; a no-op on 1 channel).
 *   crop:P        shift by up to P pixels each way, 0 (the mean after normalisation) entering.
 * Evaluation and prediction never augment. */
#include "nnlab/dataset.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnlab/alloc.h"

#define MAX_SIDE 16384 /* the longest row or column resized-crop handles (a stack buffer) */

/* "A-B" with lo <= A <= B <= hi. */
static int parse_range(const char *s, float lo, float hi, float *a, float *b)
{
    char *end;
    float x = strtof(s, &end), y;

    if (end == s || *end != '-')
        return 0;
    s = end + 1;
    y = strtof(s, &end);
    if (end == s || (*end && *end != ':') || !(x >= lo && x <= y && y <= hi))
        return 0;
    *a = x;
    *b = y;
    return 1;
}

static int parse_strength(const char *tok, size_t skip, float *v, struct nl_error *err)
{
    char *end;
    float f = strtof(tok + skip, &end);

    if (end == tok + skip || *end || !(f > 0 && f <= 5))
        return nl_error_set(err, NL_EINVAL, "augmentation '%s': want a strength in (0, 5]", tok);
    *v = f;
    return 0;
}

int nl_augment_parse(struct nl_augment *a, const char *text, struct nl_error *err)
{
    char buf[128];
    char *save = NULL;

    memset(a, 0, sizeof *a);
    if (!text || !*text || strcmp(text, "none") == 0)
        return 0;
    if (strlen(text) >= sizeof buf)
        return nl_error_set(err, NL_EINVAL, "augmentation '%.40s...' is too long", text);
    strcpy(buf, text);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "flip") == 0) {
            a->flip = 1;
        } else if (strncmp(tok, "crop:", 5) == 0) {
            char *end;
            long v = strtol(tok + 5, &end, 10);
            if (end == tok + 5 || *end || v < 1 || v > 64)
                return nl_error_set(err, NL_EINVAL,
                                    "augmentation '%s': want crop:P with P from 1 to 64 pixels",
                                    tok);
            a->crop = (int)v;
        } else if (strcmp(tok, "resized-crop") == 0) {
            a->scale_min = 0.08f;
            a->scale_max = 1.0f;
            a->ratio_min = 3.0f / 4.0f;
            a->ratio_max = 4.0f / 3.0f;
        } else if (strncmp(tok, "resized-crop:", 13) == 0) {
            const char *ratio = strchr(tok + 13, ':');
            a->ratio_min = 3.0f / 4.0f;
            a->ratio_max = 4.0f / 3.0f;
            if (!parse_range(tok + 13, 1e-4f, 1.0f, &a->scale_min, &a->scale_max) ||
                (ratio && !parse_range(ratio + 1, 1e-3f, 1e3f, &a->ratio_min, &a->ratio_max)) ||
                (ratio && strchr(ratio + 1, ':')))
                return nl_error_set(err, NL_EINVAL,
                                    "augmentation '%s': want resized-crop:SMIN-SMAX[:RMIN-RMAX], "
                                    "such as resized-crop:0.08-1:0.75-1.333 (shares of the area "
                                    "in (0, 1], aspect ratios w/h)",
                                    tok);
        } else if (strncmp(tok, "brightness:", 11) == 0) {
            if (parse_strength(tok, 11, &a->brightness, err))
                return err->code;
        } else if (strncmp(tok, "contrast:", 9) == 0) {
            if (parse_strength(tok, 9, &a->contrast, err))
                return err->code;
        } else if (strncmp(tok, "saturation:", 11) == 0) {
            if (parse_strength(tok, 11, &a->saturation, err))
                return err->code;
        } else {
            return nl_error_set(err, NL_EINVAL,
                                "unknown augmentation '%s' (known: flip, crop:P, resized-crop"
                                "[:SMIN-SMAX[:RMIN-RMAX]], brightness:B, contrast:C, "
                                "saturation:S, none)",
                                tok);
        }
    }
    return 0;
}

/* Appends to buf at *n, keeping it terminated; output past size is cut. */
static void put(char *buf, size_t size, size_t *n, const char *fmt, ...) NL_PRINTF(4, 5);
static void put(char *buf, size_t size, size_t *n, const char *fmt, ...)
{
    va_list ap;
    int k;

    if (*n + 1 >= size)
        return;
    va_start(ap, fmt);
    k = vsnprintf(buf + *n, size - *n, fmt, ap);
    va_end(ap);
    if (k > 0)
        *n = *n + (size_t)k < size ? *n + (size_t)k : size - 1;
}

void nl_augment_format(const struct nl_augment *a, char *buf, size_t size)
{
    size_t n = 0;

    buf[0] = '\0';
    if (!a)
        return;
    if (a->scale_max > 0)
        put(buf, size, &n, "resized-crop:%.9g-%.9g:%.9g-%.9g", (double)a->scale_min,
            (double)a->scale_max, (double)a->ratio_min, (double)a->ratio_max);
    if (a->flip)
        put(buf, size, &n, "%sflip", n ? "," : "");
    if (a->brightness > 0)
        put(buf, size, &n, "%sbrightness:%.9g", n ? "," : "", (double)a->brightness);
    if (a->contrast > 0)
        put(buf, size, &n, "%scontrast:%.9g", n ? "," : "", (double)a->contrast);
    if (a->saturation > 0)
        put(buf, size, &n, "%ssaturation:%.9g", n ? "," : "", (double)a->saturation);
    if (a->crop > 0)
        put(buf, size, &n, "%scrop:%d", n ? "," : "", a->crop);
}

int nl_augment_active(const struct nl_augment *a)
{
    return a && (a->flip || a->crop > 0 || a->scale_max > 0 || a->brightness > 0 ||
                 a->contrast > 0 || a->saturation > 0);
}

static float uniform(struct nl_rng *rng, float lo, float hi)
{
    return lo + (hi - lo) * nl_rng_uniform(rng);
}

/* torchvision's RandomResizedCrop.get_params: the box (top, left, bh, bw) in an h x w sample. */
static void crop_box(const struct nl_augment *a, int h, int w, struct nl_rng *rng, int *top,
                     int *left, int *bh, int *bw)
{
    double area = (double)h * w, lr0 = log(a->ratio_min), lr1 = log(a->ratio_max);

    for (int tries = 0; tries < 10; tries++) {
        double target = area * uniform(rng, a->scale_min, a->scale_max);
        double ar = exp(lr0 + (lr1 - lr0) * nl_rng_uniform(rng));
        int cw = (int)lround(sqrt(target * ar)), ch = (int)lround(sqrt(target / ar));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            *top = (int)nl_rng_below(rng, (uint32_t)(h - ch + 1));
            *left = (int)nl_rng_below(rng, (uint32_t)(w - cw + 1));
            *bh = ch;
            *bw = cw;
            return;
        }
    }
    double in_ratio = (double)w / h;
    int cw = w, ch = h;
    if (in_ratio < a->ratio_min)
        ch = (int)lround(cw / (double)a->ratio_min);
    else if (in_ratio > a->ratio_max)
        cw = (int)lround(ch * (double)a->ratio_max);
    if (ch < 1)
        ch = 1;
    if (cw < 1)
        cw = 1;
    *top = (h - ch) / 2;
    *left = (w - cw) / 2;
    *bh = ch;
    *bw = cw;
}

/* dst[0..n_out) = src[0..n_in) resampled linearly, pixel centres aligned (n_in <= n_out);
 * src and dst may be the same array only through tmp: src is copied to tmp first. */
static void lerp_line(float *dst, size_t dstride, const float *src, size_t sstride, int n_in,
                      int n_out, float *tmp)
{
    const double scale = (double)n_in / n_out;

    for (int i = 0; i < n_in; i++)
        tmp[i] = src[(size_t)i * sstride];
    for (int o = 0; o < n_out; o++) {
        double s = (o + 0.5) * scale - 0.5;
        if (s < 0)
            s = 0;
        int i0 = (int)s, i1 = i0 + 1 < n_in ? i0 + 1 : n_in - 1;
        float f = (float)(s - i0);
        dst[(size_t)o * dstride] = tmp[i0] + f * (tmp[i1] - tmp[i0]);
    }
}

/* One plane (h, w): its box (top, left, bh, bw) resized to h x w in place, rows then columns. */
static void resized_crop_plane(float *p, int h, int w, int top, int left, int bh, int bw)
{
    float tmp[MAX_SIDE];

    for (int y = 0; y < bh; y++) /* rows of the box, widened to w, moved up to row y */
        lerp_line(p + (size_t)y * w, 1, p + (size_t)(top + y) * w + left, 1, bw, w, tmp);
    for (int x = 0; x < w; x++)
        lerp_line(p + x, (size_t)w, p + x, (size_t)w, bh, h, tmp);
}

/* The colour jitter on sample x (c, plane), normalised by mean and std. */
static void jitter(const struct nl_augment *a, int c, size_t plane, const float *mean,
                   const float *std, float *x, struct nl_rng *rng)
{
    float f[3] = {1, 1, 1}, v[3] = {a->brightness, a->contrast, a->saturation};
    int order[3] = {0, 1, 2};

    for (int k = 2; k > 0; k--) { /* a random order */
        int j = (int)nl_rng_below(rng, (uint32_t)k + 1), t = order[k];
        order[k] = order[j];
        order[j] = t;
    }
    for (int k = 0; k < 3; k++)
        if (v[k] > 0)
            f[k] = uniform(rng, v[k] < 1 ? 1 - v[k] : 0, 1 + v[k]);
    for (int ch = 0; ch < c; ch++)
        for (size_t p = 0; p < plane; p++)
            x[ch * plane + p] = x[ch * plane + p] * std[ch] + mean[ch];
    for (int k = 0; k < 3; k++) {
        int op = order[k];
        if (v[op] <= 0)
            continue;
        if (op == 0) {
            for (size_t p = 0; p < (size_t)c * plane; p++)
                x[p] = fminf(fmaxf(x[p] * f[0], 0.0f), 1.0f);
        } else if (op == 1) {
            double sum = 0;
            for (size_t p = 0; p < plane; p++)
                sum += c == 3 ? 0.2989f * x[p] + 0.587f * x[plane + p] + 0.114f * x[2 * plane + p]
                              : x[p];
            float m = (float)(sum / (double)plane);
            for (size_t p = 0; p < (size_t)c * plane; p++)
                x[p] = fminf(fmaxf(f[1] * x[p] + (1 - f[1]) * m, 0.0f), 1.0f);
        } else if (c == 3) {
            for (size_t p = 0; p < plane; p++) {
                float g = 0.2989f * x[p] + 0.587f * x[plane + p] + 0.114f * x[2 * plane + p];
                for (int ch = 0; ch < 3; ch++) {
                    float *q = x + ch * plane + p;
                    *q = fminf(fmaxf(f[2] * *q + (1 - f[2]) * g, 0.0f), 1.0f);
                }
            }
        }
    }
    for (int ch = 0; ch < c; ch++)
        for (size_t p = 0; p < plane; p++)
            x[ch * plane + p] = (x[ch * plane + p] - mean[ch]) / std[ch];
}

/* One plane (h, w) shifted by (dy, dx) with zeros entering, and mirrored when flip. */
static void move_plane(float *p, int h, int w, int dy, int dx, int flip)
{
    if (flip)
        for (int y = 0; y < h; y++) {
            float *row = p + (size_t)y * w;
            for (int i = 0, j = w - 1; i < j; i++, j--) {
                float t = row[i];
                row[i] = row[j];
                row[j] = t;
            }
        }
    if (dx == 0 && dy == 0)
        return;
    /* out(y, x) = in(y + dy, x + dx); copy in the order that never reads a written value. */
    int y0 = dy > 0 ? 0 : h - 1, ystep = dy > 0 ? 1 : -1;
    for (int k = 0; k < h; k++) {
        int y = y0 + k * ystep, sy = y + dy;
        float *row = p + (size_t)y * w;
        if (sy < 0 || sy >= h) {
            memset(row, 0, (size_t)w * sizeof *row);
            continue;
        }
        const float *src = p + (size_t)sy * w;
        if (dx >= 0) {
            for (int x = 0; x < w; x++)
                row[x] = x + dx < w ? src[x + dx] : 0.0f;
        } else {
            for (int x = w - 1; x >= 0; x--)
                row[x] = x + dx >= 0 ? src[x + dx] : 0.0f;
        }
    }
}

void nl_augment_batch(const struct nl_augment *a, struct nl_shape shape, const float *mean,
                      const float *std, float *x, int n, struct nl_rng *rng)
{
    const size_t plane = (size_t)shape.h * shape.w;
    const int color = a && (a->brightness > 0 || a->contrast > 0 || a->saturation > 0);

    if (!nl_augment_active(a))
        return;
    for (int i = 0; i < n; i++) {
        float *xi = x + (size_t)i * shape.c * plane;
        if (a->scale_max > 0 && shape.h <= MAX_SIDE && shape.w <= MAX_SIDE) {
            int top, left, bh, bw;
            crop_box(a, shape.h, shape.w, rng, &top, &left, &bh, &bw);
            for (int c = 0; c < shape.c; c++)
                resized_crop_plane(xi + c * plane, shape.h, shape.w, top, left, bh, bw);
        }
        int flip = a->flip && shape.w > 1 ? (int)(nl_rng_next(rng) >> 63) : 0;
        if (flip && color) { /* mirror now: the jitter comes after the flip */
            for (int c = 0; c < shape.c; c++)
                move_plane(xi + c * plane, shape.h, shape.w, 0, 0, 1);
            flip = 0;
        }
        if (color && mean && std)
            jitter(a, shape.c, plane, mean, std, xi, rng);
        int dy = 0, dx = 0;
        if (a->crop > 0) {
            uint32_t span = 2u * (uint32_t)a->crop + 1;
            dy = shape.h > 1 ? (int)nl_rng_below(rng, span) - a->crop : 0;
            dx = shape.w > 1 ? (int)nl_rng_below(rng, span) - a->crop : 0;
        }
        for (int c = 0; c < shape.c; c++)
            move_plane(x + ((size_t)i * shape.c + c) * plane, shape.h, shape.w, dy, dx, flip);
    }
}

int nl_augment_preview(const struct nl_dataset *d, const struct nl_augment *a, uint64_t seed, int n,
                       uint8_t *pixels, struct nl_error *err)
{
    const size_t size = nl_shape_size(d->shape), plane = (size_t)d->shape.h * d->shape.w;
    uint32_t *idx;
    float *x;
    struct nl_rng rng;

    if (d->dtype != NL_U8)
        return nl_error_set(err, NL_EINVAL, "dataset '%s' holds float samples, not pixels",
                            d->name);
    if (n < 0 || (uint32_t)n > d->split[NL_TRAIN].n)
        return nl_error_set(err, NL_EINVAL, "dataset '%s' has %u train samples, not %d", d->name,
                            d->split[NL_TRAIN].n, n);
    if (n == 0)
        return 0;
    idx = nl_malloc((size_t)n * sizeof *idx);
    x = nl_alloc_floats((size_t)n * size);
    if (!idx || !x) {
        nl_free(idx);
        nl_free(x);
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++)
        idx[i] = (uint32_t)i;
    nl_dataset_batch(d, NL_TRAIN, idx, n, x, NULL);
    nl_rng_seed(&rng, seed);
    nl_augment_batch(a, d->shape, d->mean, d->std, x, n, &rng);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < d->shape.c; c++)
            for (size_t p = 0; p < plane; p++) {
                size_t at = (size_t)i * size + (size_t)c * plane + p;
                float v = (x[at] * d->std[c] + d->mean[c]) * 255.0f + 0.5f;
                pixels[at] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    nl_free(idx);
    nl_free(x);
    return 0;
}
