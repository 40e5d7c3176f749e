/* Turning a PNG file into one sample of a dataset's shape: pixel planes for the PNG-folder
 * import, and normalised floats for prediction on images a person gives (nnlab predict RUN
 * IMAGE...). Both go through nl_png_read_planes, so a file predicts as it would have imported.
 *
 * Every PNG kind libpng reads is accepted: palettes and low bit depths are expanded, 16-bit
 * samples are scaled to 8 bits, and transparency is composed onto black, the background of
 * MNIST-style data (a transparent pixel reads as 0). Values are used as stored: no gamma
 * correction. Colour becomes luminance, 0.299 R + 0.587 G + 0.114 B, for 1-channel datasets, and
 * gray is replicated for 3-channel ones. The image is then resized to the dataset's height and
 * width with a bilinear (triangle) filter whose support widens when shrinking, so that a large
 * drawing reduced to 28 x 28 averages its pixels instead of skipping them; enlarging is plain
 * bilinear interpolation with pixel centres aligned. Last, values are normalised exactly as
 * nl_dataset_batch does. */
#include "nnlab/dataset.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <string.h>

#include "import_internal.h"
#include "nnlab/alloc.h"
#include "store_internal.h"

#define MAX_SIDE   16384
#define MAX_PIXELS (1u << 26)

/* Everything the read needs to release, reachable after a longjmp through an unchanged pointer. */
struct png_read {
    const char *path;
    FILE *f;
    png_structp png;
    png_infop info;
    uint8_t *pixels; /* (h, w, nch), 8 bits */
    png_bytep *rows; /* (h) pointers into pixels */
    uint32_t w, h;
    int nch; /* 2: gray + alpha, 4: RGBA */
    char msg[256];
};

static void on_png_error(png_structp png, png_const_charp msg)
{
    struct png_read *r = png_get_error_ptr(png);

    snprintf(r->msg, sizeof r->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* Reads the whole image as 8-bit gray + alpha or RGBA into r->pixels. */
static int read_png(struct png_read *r, struct nl_error *err)
{
    unsigned char sig[8];
    int color, has_alpha;
    size_t rowbytes;

    r->f = nl_fopen_regular(r->path, err);
    if (!r->f)
        return err->code;
    if (fread(sig, 1, sizeof sig, r->f) != sizeof sig || png_sig_cmp(sig, 0, sizeof sig) != 0)
        return nl_error_set(err, NL_EFORMAT, "%s: not a PNG file", r->path);
    r->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, r, on_png_error, on_png_warning);
    if (r->png)
        r->info = png_create_info_struct(r->png);
    if (!r->png || !r->info)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", r->path);
    if (setjmp(png_jmpbuf(r->png)))
        return nl_error_set(err, NL_EFORMAT, "%s: corrupt PNG: %s", r->path,
                            feof(r->f) ? "the file ends early" : r->msg);

    png_set_user_limits(r->png, MAX_SIDE, MAX_SIDE);
    png_init_io(r->png, r->f);
    png_set_sig_bytes(r->png, sizeof sig);
    png_read_info(r->png, r->info);
    color = png_get_color_type(r->png, r->info);
    has_alpha = (color & PNG_COLOR_MASK_ALPHA) || png_get_valid(r->png, r->info, PNG_INFO_tRNS);
    png_set_expand(r->png); /* palette to RGB, 1-4 bit gray to 8, tRNS to alpha */
    png_set_scale_16(r->png);
    if (!has_alpha)
        png_set_add_alpha(r->png, 0xff, PNG_FILLER_AFTER);
    png_set_interlace_handling(r->png);
    png_read_update_info(r->png, r->info);

    r->w = png_get_image_width(r->png, r->info);
    r->h = png_get_image_height(r->png, r->info);
    r->nch = png_get_channels(r->png, r->info);
    rowbytes = png_get_rowbytes(r->png, r->info);
    if (r->w == 0 || r->h == 0 || (uint64_t)r->w * r->h > MAX_PIXELS)
        return nl_error_set(err, NL_EFORMAT, "%s: image of %u x %u pixels is too large", r->path,
                            r->w, r->h);
    if ((r->nch != 2 && r->nch != 4) || rowbytes != (size_t)r->w * r->nch)
        return nl_error_set(err, NL_EFORMAT, "%s: unsupported PNG layout (%d channels)", r->path,
                            r->nch);
    r->pixels = nl_malloc(rowbytes * r->h);
    r->rows = nl_malloc(r->h * sizeof *r->rows);
    if (!r->pixels || !r->rows)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory for %u x %u pixels", r->path, r->w,
                            r->h);
    for (uint32_t y = 0; y < r->h; y++)
        r->rows[y] = r->pixels + (size_t)y * rowbytes;
    png_read_image(r->png, r->rows);
    png_read_end(r->png, NULL);
    return 0;
}

/* Planes (c, h, w) of pixel values in [0, 255], alpha composed onto black. */
static void to_planes(const struct png_read *r, int c, float *out)
{
    size_t plane = (size_t)r->w * r->h;

    for (size_t p = 0; p < plane; p++) {
        const uint8_t *px = r->pixels + p * (size_t)r->nch;
        float a = (float)px[r->nch - 1] * (1.0f / 255.0f), v[3];
        if (r->nch == 2) {
            v[0] = v[1] = v[2] = (float)px[0] * a;
        } else {
            for (int k = 0; k < 3; k++)
                v[k] = (float)px[k] * a;
        }
        if (c == 1)
            out[p] = r->nch == 2 || (px[0] == px[1] && px[1] == px[2])
                         ? v[0]
                         : 0.299f * v[0] + 0.587f * v[1] + 0.114f * v[2];
        else
            for (int k = 0; k < 3; k++)
                out[k * plane + p] = v[k];
    }
}

/* Filter taps from n_in samples to n_out: output o reads first[o] .. first[o] + count[o] - 1
 * with weights w[o * max + j], summing to 1. */
struct taps {
    int max;
    int *first, *count;
    float *w;
};

static void taps_free(struct taps *t)
{
    nl_free(t->first);
    nl_free(t->count);
    nl_free(t->w);
}

static int taps_make(struct taps *t, int n_in, int n_out)
{
    double scale = (double)n_in / n_out, support = scale > 1 ? scale : 1;

    t->max = 2 * (int)ceil(support) + 3;
    t->first = nl_malloc((size_t)n_out * sizeof *t->first);
    t->count = nl_malloc((size_t)n_out * sizeof *t->count);
    t->w = nl_malloc((size_t)n_out * t->max * sizeof *t->w);
    if (!t->first || !t->count || !t->w)
        return -1;
    for (int o = 0; o < n_out; o++) {
        double centre = (o + 0.5) * scale, sum = 0;
        int lo = (int)floor(centre - support), hi = (int)ceil(centre + support);
        float *w = t->w + (size_t)o * t->max;
        if (lo < 0)
            lo = 0;
        if (hi > n_in - 1)
            hi = n_in - 1;
        if (hi - lo + 1 > t->max)
            hi = lo + t->max - 1;
        for (int i = lo; i <= hi; i++) {
            double x = fabs((i + 0.5 - centre) / support);
            w[i - lo] = (float)(x < 1 ? 1 - x : 0);
            sum += w[i - lo];
        }
        if (!(sum > 0)) { /* cannot happen with support >= 1; nearest pixel as a guard */
            lo = hi = (int)centre < n_in ? (int)centre : n_in - 1;
            w[0] = 1;
            sum = 1;
        }
        for (int i = lo; i <= hi; i++)
            w[i - lo] = (float)(w[i - lo] / sum);
        t->first[o] = lo;
        t->count[o] = hi - lo + 1;
    }
    return 0;
}

/* dst (c, oh, ow) = src (c, ih, iw) resampled: rows first, then columns. */
static int resize(const float *src, int c, int ih, int iw, float *dst, int oh, int ow)
{
    struct taps tx = {0}, ty = {0};
    float *tmp = nl_malloc((size_t)c * ih * ow * sizeof *tmp);
    int rc = -1;

    if (!tmp || taps_make(&tx, iw, ow) || taps_make(&ty, ih, oh))
        goto out;
    for (int k = 0; k < c; k++) {
        const float *s = src + (size_t)k * ih * iw;
        float *t = tmp + (size_t)k * ih * ow, *d = dst + (size_t)k * oh * ow;
        for (int y = 0; y < ih; y++)
            for (int x = 0; x < ow; x++) {
                const float *w = tx.w + (size_t)x * tx.max;
                const float *row = s + (size_t)y * iw + tx.first[x];
                float acc = 0;
                for (int j = 0; j < tx.count[x]; j++)
                    acc += w[j] * row[j];
                t[(size_t)y * ow + x] = acc;
            }
        for (int y = 0; y < oh; y++) {
            const float *w = ty.w + (size_t)y * ty.max;
            for (int x = 0; x < ow; x++) {
                float acc = 0;
                for (int j = 0; j < ty.count[y]; j++)
                    acc += w[j] * t[(size_t)(ty.first[y] + j) * ow + x];
                d[(size_t)y * ow + x] = acc;
            }
        }
    }
    rc = 0;
out:
    taps_free(&tx);
    taps_free(&ty);
    nl_free(tmp);
    return rc;
}

int nl_png_read_planes(const char *path, int channels, int out_h, int out_w, float *out,
                       struct nl_error *err)
{
    struct png_read r = {.path = path};
    const int c = channels;
    float *planes = NULL;
    int rc = read_png(&r, err);

    if (rc == 0 && (int)r.w == out_w && (int)r.h == out_h) {
        to_planes(&r, c, out);
    } else if (rc == 0) {
        planes = nl_malloc((size_t)c * r.w * r.h * sizeof *planes);
        if (!planes)
            rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
        if (rc == 0) {
            to_planes(&r, c, planes);
            if (resize(planes, c, (int)r.h, (int)r.w, out, out_h, out_w) != 0)
                rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory resizing", path);
        }
    }
    if (r.png)
        png_destroy_read_struct(&r.png, r.info ? &r.info : NULL, NULL);
    if (r.f)
        fclose(r.f);
    nl_free(r.pixels);
    nl_free(r.rows);
    nl_free(planes);
    return rc;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int nl_png_probe(const char *path, uint32_t *w, uint32_t *h, int *color, struct nl_error *err)
{
    unsigned char b[33];
    FILE *f = nl_fopen_regular(path, err);
    size_t got;

    if (!f)
        return err->code;
    got = fread(b, 1, sizeof b, f);
    if (got < sizeof b && ferror(f)) {
        int e = errno;
        fclose(f);
        return nl_error_set(err, NL_EIO, "%s: read error: %s", path, strerror(e));
    }
    fclose(f);
    if (got == 0)
        return nl_error_set(err, NL_EFORMAT, "%s: empty file, not a PNG", path);
    if (got < 8 || png_sig_cmp(b, 0, 8) != 0)
        return nl_error_set(err, NL_EFORMAT, "%s: not a PNG file", path);
    if (got < sizeof b)
        return nl_error_set(err, NL_EFORMAT, "%s: corrupt PNG: the file ends early", path);
    if (be32(b + 8) != 13 || memcmp(b + 12, "IHDR", 4) != 0)
        return nl_error_set(err, NL_EFORMAT, "%s: corrupt PNG: no IHDR chunk first", path);
    *w = be32(b + 16);
    *h = be32(b + 20);
    if (*w == 0 || *h == 0 || *w > MAX_SIDE || *h > MAX_SIDE || (uint64_t)*w * *h > MAX_PIXELS)
        return nl_error_set(err, NL_EFORMAT, "%s: image of %u x %u pixels is not supported", path,
                            *w, *h);
    *color = (b[25] & PNG_COLOR_MASK_COLOR) != 0;
    return 0;
}

int nl_dataset_sample_from_png(const struct nl_dataset *d, const char *path, float *x,
                               struct nl_error *err)
{
    int c = d->shape.c, rc;
    size_t plane = (size_t)d->shape.h * d->shape.w;

    if (d->dtype != NL_U8)
        return nl_error_set(err, NL_EINVAL,
                            "dataset '%s' holds float samples; PNG input needs an 8-bit dataset",
                            d->name);
    if (c != 1 && c != 3)
        return nl_error_set(err, NL_EINVAL,
                            "dataset '%s' has %d channels; PNG input needs 1 (gray) or 3 (RGB)",
                            d->name, c);
    rc = nl_png_read_planes(path, c, d->shape.h, d->shape.w, x, err);
    if (rc == 0)
        for (int k = 0; k < c; k++)
            for (size_t p = 0; p < plane; p++)
                x[k * plane + p] = nl_normalise_u8(x[k * plane + p], d->mean[k], d->std[k]);
    return rc;
}
