/* Turning an image file (PNG or JPEG, told apart by their signatures) into one sample of a
 * dataset's shape: 8-bit pixel planes for the image-folder import, and normalised floats for
 * prediction on images a person gives (nnlab predict RUN IMAGE...). Both go through
 * nl_image_read, so a file predicts exactly as it would have imported.
 *
 * PNG: every kind libpng reads is accepted: palettes and low bit depths are expanded, 16-bit
 * samples are scaled to 8 bits, and transparency is composed onto black, the background of
 * MNIST-style data (a transparent pixel reads as 0). Values are used as stored: no gamma
 * correction. Colour becomes luminance, 0.299 R + 0.587 G + 0.114 B rounded, for 1-channel
 * datasets, and gray is replicated for 3-channel ones. JPEG: see core/import/jpeg.c.
 *
 * Geometry (the --resize modes, struct nl_resize): the image is first resized, to a fixed size
 * (stretch:WxH) or so that its shorter side is S keeping the aspect (shorter:S; the longer side
 * becomes floor(S * long / short), as torchvision's Resize(S) computes it), then its centre is
 * cut to the dataset's size (center-crop:WxH), as torchvision's CenterCrop does: the offset is
 * round((size - crop) / 2) rounding halves to even, and where the image is smaller than the crop
 * it is padded with black, (crop - size) / 2 on the left or top. shorter:S alone crops to the
 * dataset's size (the most common size after scaling). With no mode, images of another size
 * than the dataset's are stretched to it.
 *
 * Resampling is Pillow's bilinear filter reproduced exactly (Resample.c): a triangle filter whose
 * support widens by the reduction factor, coefficients normalised and rounded to 22-bit fixed
 * point, a horizontal pass into 8-bit rows followed by a vertical pass, each rounding and
 * clamping to 8 bits. So Resize(256) + CenterCrop(224) of torchvision on a PIL image gives the
 * bytes nnlab stores, and ImageNet-normalised inputs equal torchvision's to float rounding.
 * A JPEG at least twice the resize target in both directions is decoded at 1/2, 1/4 or 1/8 scale
 * (libjpeg's DCT scaling: the largest reduction whose result still covers the target) before
 * resampling; this is much faster and keeps memory flat for camera photos, and differs from a
 * full decode by the small difference of two good low-pass filters. */
#include "nnlab/dataset.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/formats/json.h"
#include "core/store/store_internal.h"
#include "import_internal.h"
#include "nnlab/alloc.h"

#define MAX_SIDE   16384
#define MAX_PIXELS (1u << 26)
#define MAX_TARGET 16384 /* largest resize target per side */

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

static uint8_t round_u8(float v)
{
    v = roundf(v);
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The PNG's pixels as planes (c, h, w), alpha composed onto black. */
static int png_to_image(const struct png_read *r, int c, struct nl_image *img)
{
    size_t plane = (size_t)r->w * r->h;

    img->px = nl_malloc(plane * (size_t)c);
    if (!img->px)
        return -1;
    img->c = c;
    img->w = (int)r->w;
    img->h = (int)r->h;
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
            img->px[p] = round_u8(r->nch == 2 || (px[0] == px[1] && px[1] == px[2])
                                      ? v[0]
                                      : 0.299f * v[0] + 0.587f * v[1] + 0.114f * v[2]);
        else
            for (int k = 0; k < 3; k++)
                img->px[k * plane + p] = round_u8(v[k]);
    }
    return 0;
}

static int read_png_image(const char *path, int c, struct nl_image *img, struct nl_error *err)
{
    struct png_read r = {.path = path};
    int rc = read_png(&r, err);

    if (rc == 0 && png_to_image(&r, c, img) != 0)
        rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    if (r.png)
        png_destroy_read_struct(&r.png, r.info ? &r.info : NULL, NULL);
    if (r.f)
        fclose(r.f);
    nl_free(r.pixels);
    nl_free(r.rows);
    return rc;
}

/* ---- the --resize modes ---- */

static int parse_wxh(const char *s, int *w, int *h)
{
    char *end;
    long a = strtol(s, &end, 10), b;

    if (end == s || (*end != 'x' && *end != 'X'))
        return 0;
    s = end + 1;
    b = strtol(s, &end, 10);
    if (end == s || *end || a < 1 || b < 1 || a > MAX_TARGET || b > MAX_TARGET)
        return 0;
    *w = (int)a;
    *h = (int)b;
    return 1;
}

int nl_resize_parse(struct nl_resize *r, const char *text, struct nl_error *err)
{
    char buf[128], *save = NULL;

    memset(r, 0, sizeof *r);
    if (!text || !*text || strcmp(text, "none") == 0)
        return 0;
    if (strlen(text) >= sizeof buf)
        return nl_error_set(err, NL_EINVAL, "resize '%.40s...' is too long", text);
    strcpy(buf, text);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int resize = r->w || r->shorter;
        if (strncmp(tok, "stretch:", 8) == 0 ||
            (tok[0] >= '0' && tok[0] <= '9' && strchr(tok, 'x'))) {
            const char *s = tok[0] == 's' ? tok + 8 : tok;
            if (!parse_wxh(s, &r->w, &r->h))
                return nl_error_set(err, NL_EINVAL,
                                    "resize '%s': want stretch:WxH (or WxH), sides 1 to %d", tok,
                                    MAX_TARGET);
            if (resize || r->crop_w)
                return nl_error_set(err, NL_EINVAL,
                                    "resize '%s': one of stretch or shorter, before center-crop",
                                    text);
        } else if (strncmp(tok, "shorter:", 8) == 0) {
            char *end;
            long v = strtol(tok + 8, &end, 10);
            if (end == tok + 8 || *end || v < 1 || v > MAX_TARGET)
                return nl_error_set(err, NL_EINVAL, "resize '%s': want shorter:S, S from 1 to %d",
                                    tok, MAX_TARGET);
            if (resize || r->crop_w)
                return nl_error_set(err, NL_EINVAL,
                                    "resize '%s': one of stretch or shorter, before center-crop",
                                    text);
            r->shorter = (int)v;
        } else if (strncmp(tok, "center-crop:", 12) == 0) {
            if (!parse_wxh(tok + 12, &r->crop_w, &r->crop_h))
                return nl_error_set(err, NL_EINVAL,
                                    "resize '%s': want center-crop:WxH, sides 1 to %d", tok,
                                    MAX_TARGET);
        } else {
            return nl_error_set(err, NL_EINVAL,
                                "unknown resize '%s' (known: stretch:WxH or WxH, shorter:S, "
                                "center-crop:WxH, none)",
                                tok);
        }
    }
    return 0;
}

void nl_resize_format(const struct nl_resize *r, char *buf, size_t size)
{
    int n = 0;

    buf[0] = '\0';
    if (r->w)
        n = snprintf(buf, size, "stretch:%dx%d", r->w, r->h);
    else if (r->shorter)
        n = snprintf(buf, size, "shorter:%d", r->shorter);
    if (r->crop_w && n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "%scenter-crop:%dx%d", n ? "," : "", r->crop_w,
                 r->crop_h);
}

/* The size an image of iw x ih has after the resize step, before the crop to out_w x out_h. */
static void resized_size(const struct nl_resize *r, int iw, int ih, int out_w, int out_h, int *rw,
                         int *rh)
{
    if (r && r->w) {
        *rw = r->w;
        *rh = r->h;
    } else if (r && r->shorter) {
        int lng = iw > ih ? iw : ih, shrt = iw > ih ? ih : iw;
        int nl = (int)((double)r->shorter * lng / shrt);
        *rw = iw <= ih ? r->shorter : nl;
        *rh = iw <= ih ? nl : r->shorter;
    } else if (r && r->crop_w) {
        *rw = iw;
        *rh = ih;
    } else {
        *rw = out_w;
        *rh = out_h;
    }
}

void nl_resize_size(const struct nl_resize *r, uint32_t iw, uint32_t ih, int *w, int *h)
{
    resized_size(r, (int)iw, (int)ih, (int)iw, (int)ih, w, h);
    if (r && r->crop_w) {
        *w = r->crop_w;
        *h = r->crop_h;
    }
}

/* torchvision's CenterCrop offset of a crop of n out of size (negative: padding). */
static int crop_offset(int size, int n)
{
    int d = size - n;

    if (d < 0)
        return -((n - size) / 2);
    /* round(d / 2) with halves to even */
    return d % 2 == 0 ? d / 2 : (d / 2) % 2 == 0 ? d / 2 : d / 2 + 1;
}

/* ---- Pillow's bilinear resampling, 8 bits per channel ---- */

#define PRECISION_BITS (32 - 8 - 2)

/* Coefficients from n_in samples to n_out: output o reads bound[2o] .. bound[2o] + bound[2o+1] - 1
 * with fixed-point weights k[o * ksize + j]. Pillow's precompute_coeffs and
 * normalize_coeffs_8bpc. */
struct coeffs {
    int ksize;
    int *bound;
    int32_t *k;
};

static int coeffs_make(struct coeffs *c, int n_in, int n_out)
{
    double scale = (double)n_in / n_out, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    double *kk;

    c->ksize = (int)ceil(support) * 2 + 1;
    c->bound = nl_malloc((size_t)n_out * 2 * sizeof *c->bound);
    c->k = nl_malloc((size_t)n_out * c->ksize * sizeof *c->k);
    kk = nl_malloc((size_t)c->ksize * sizeof *kk);
    if (!c->bound || !c->k || !kk) {
        nl_free(kk);
        return -1;
    }
    for (int xx = 0; xx < n_out; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5), x;
        if (xmin < 0)
            xmin = 0;
        if (xmax > n_in)
            xmax = n_in;
        xmax -= xmin;
        if (xmax > c->ksize) /* cannot happen; a guard for the buffer */
            xmax = c->ksize;
        for (x = 0; x < xmax; x++) {
            double t = fabs((x + xmin - center + 0.5) * ss);
            kk[x] = t < 1.0 ? 1.0 - t : 0.0;
            ww += kk[x];
        }
        for (x = 0; x < c->ksize; x++) {
            double w = x < xmax ? (ww != 0.0 ? kk[x] / ww : kk[x]) : 0.0;
            c->k[(size_t)xx * c->ksize + x] = w < 0 ? (int32_t)(-0.5 + w * (1 << PRECISION_BITS))
                                                    : (int32_t)(0.5 + w * (1 << PRECISION_BITS));
        }
        c->bound[2 * xx] = xmin;
        c->bound[2 * xx + 1] = xmax;
    }
    nl_free(kk);
    return 0;
}

static void coeffs_free(struct coeffs *c)
{
    nl_free(c->bound);
    nl_free(c->k);
}

static uint8_t clip8(int32_t v)
{
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* out (img.c, out_h, out_w) = img resized to rw x rh, then the window at (left, top) of the
 * resized image (black outside it). Only the rows and columns the window needs are computed. */
static int transform(const struct nl_image *img, int rw, int rh, int left, int top, int out_w,
                     int out_h, uint8_t *out)
{
    const int c = img->c, iw = img->w, ih = img->h;
    int x0 = left < 0 ? 0 : left, x1 = left + out_w > rw ? rw : left + out_w;
    int y0 = top < 0 ? 0 : top, y1 = top + out_h > rh ? rh : top + out_h;
    int hx = rw != iw, vy = rh != ih; /* which passes are needed */
    struct coeffs cx = {0}, cy = {0};
    uint8_t *tmp = NULL;
    int r0 = y0, r1 = y1, nx = x1 - x0, rc = -1;

    memset(out, 0, (size_t)c * out_h * out_w);
    if (x1 <= x0 || y1 <= y0)
        return 0;
    if ((hx && coeffs_make(&cx, iw, rw)) || (vy && coeffs_make(&cy, ih, rh)))
        goto done;
    if (vy) { /* the source rows the window's output rows read */
        r0 = cy.bound[2 * y0];
        r1 = cy.bound[2 * (y1 - 1)] + cy.bound[2 * (y1 - 1) + 1];
    }
    /* Horizontal pass: rows r0 .. r1 - 1 of the source, columns x0 .. x1 - 1 of the result. */
    tmp = nl_malloc((size_t)c * (r1 - r0) * nx);
    if (!tmp)
        goto done;
    for (int k = 0; k < c; k++)
        for (int y = r0; y < r1; y++) {
            const uint8_t *src = img->px + ((size_t)k * ih + y) * iw;
            uint8_t *dst = tmp + ((size_t)k * (r1 - r0) + (y - r0)) * nx;
            if (!hx) {
                memcpy(dst, src + x0, (size_t)nx);
                continue;
            }
            for (int x = x0; x < x1; x++) {
                const int32_t *w = cx.k + (size_t)x * cx.ksize;
                const uint8_t *s = src + cx.bound[2 * x];
                int32_t acc = 1 << (PRECISION_BITS - 1);
                for (int j = 0; j < cx.bound[2 * x + 1]; j++)
                    acc += s[j] * w[j];
                dst[x - x0] = clip8(acc);
            }
        }
    /* Vertical pass into the window. */
    for (int k = 0; k < c; k++)
        for (int y = y0; y < y1; y++) {
            uint8_t *dst = out + ((size_t)k * out_h + (y - top)) * out_w + (x0 - left);
            const uint8_t *t = tmp + (size_t)k * (r1 - r0) * nx;
            if (!vy) {
                memcpy(dst, t + (size_t)(y - r0) * nx, (size_t)nx);
                continue;
            }
            const int32_t *w = cy.k + (size_t)y * cy.ksize;
            int first = cy.bound[2 * y] - r0, count = cy.bound[2 * y + 1];
            for (int x = 0; x < nx; x++) {
                int32_t acc = 1 << (PRECISION_BITS - 1);
                for (int j = 0; j < count; j++)
                    acc += t[(size_t)(first + j) * nx + x] * w[j];
                dst[x] = clip8(acc);
            }
        }
    rc = 0;
done:
    coeffs_free(&cx);
    coeffs_free(&cy);
    nl_free(tmp);
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

/* ---- reading a file ---- */

/* NL_IMAGE_PNG or NL_IMAGE_JPEG by the file's signature, or an error naming the file. */
static int sniff(const char *path, int *format, struct nl_error *err)
{
    unsigned char sig[8];
    FILE *f = nl_fopen_regular(path, err);
    size_t got;

    if (!f)
        return err->code;
    got = fread(sig, 1, sizeof sig, f);
    if (got < sizeof sig && ferror(f)) {
        int e = errno;
        fclose(f);
        return nl_error_set(err, NL_EIO, "%s: read error: %s", path, strerror(e));
    }
    fclose(f);
    if (got >= 2 && sig[0] == 0xff && sig[1] == 0xd8) {
        *format = NL_IMAGE_JPEG;
        return 0;
    }
    if (got == 0)
        return nl_error_set(err, NL_EFORMAT, "%s: empty file, not a PNG or JPEG image", path);
    if (got < 8 || png_sig_cmp(sig, 0, 8) != 0)
        return nl_error_set(err, NL_EFORMAT, "%s: not a PNG or JPEG image", path);
    *format = NL_IMAGE_PNG;
    return 0;
}

int nl_image_probe(const char *path, struct nl_image_info *info, struct nl_error *err)
{
    int format = 0, rc;

    memset(info, 0, sizeof *info);
    rc = sniff(path, &format, err);
    if (rc == 0 && format == NL_IMAGE_JPEG) {
        struct nl_jpeg *j;
        rc = nl_jpeg_open(&j, path, info, err);
        nl_jpeg_close(j);
    } else if (rc == 0) {
        info->format = NL_IMAGE_PNG;
        info->orientation = 1;
        rc = nl_png_probe(path, &info->w, &info->h, &info->color, err);
    }
    return rc;
}

int nl_image_read(const char *path, int channels, const struct nl_resize *r, int out_h, int out_w,
                  uint8_t *out, int *dct_denom, struct nl_error *err)
{
    struct nl_image_info info;
    struct nl_image img = {0};
    int rc, rw = 0, rh = 0, denom = 1, format = 0;

    if (dct_denom)
        *dct_denom = 1;
    rc = sniff(path, &format, err);
    if (rc == 0 && format == NL_IMAGE_JPEG) {
        struct nl_jpeg *j;
        rc = nl_jpeg_open(&j, path, &info, err);
        if (rc == 0)
            resized_size(r, (int)info.w, (int)info.h, out_w, out_h, &rw, &rh);
        /* The largest DCT reduction whose result still covers the resize target. */
        for (int d = 8; rc == 0 && d > 1 && (rw != (int)info.w || rh != (int)info.h); d /= 2)
            if ((info.w + d - 1) / d >= (uint32_t)rw && (info.h + d - 1) / d >= (uint32_t)rh) {
                denom = d;
                break;
            }
        if (rc == 0)
            rc = nl_jpeg_decode(j, denom, channels, &img, err);
        nl_jpeg_close(j);
    } else if (rc == 0) {
        rc = read_png_image(path, channels, &img, err);
        if (rc == 0)
            resized_size(r, img.w, img.h, out_w, out_h, &rw, &rh);
    }
    /* Then the centre of the resized image, at the dataset's size. */
    if (rc == 0 && transform(&img, rw, rh, crop_offset(rw, out_w), crop_offset(rh, out_h), out_w,
                             out_h, out) != 0)
        rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory resizing", path);
    if (rc == 0 && dct_denom)
        *dct_denom = denom;
    nl_free(img.px);
    return rc;
}

/* The resize mode a dataset was imported with, from its preprocessing record. */
static void dataset_resize(const struct nl_dataset *d, struct nl_resize *r)
{
    struct nl_json_doc *doc = NULL;
    struct nl_error ignored = {0};
    const struct nl_json *mode;

    memset(r, 0, sizeof *r);
    if (!d->preprocessing || nl_json_parse(&doc, d->preprocessing, strlen(d->preprocessing),
                                           "preprocessing", &ignored) != 0)
        return;
    mode = nl_json_get(nl_json_root(doc), "resize");
    if (mode && mode->type == NL_JSON_STRING && nl_resize_parse(r, mode->string, &ignored) != 0)
        memset(r, 0, sizeof *r);
    nl_json_free(doc);
}

int nl_dataset_sample_from_image(const struct nl_dataset *d, const char *path, float *x,
                                 struct nl_error *err)
{
    int c = d->shape.c, rc;
    size_t n = nl_shape_size(d->shape), plane = (size_t)d->shape.h * d->shape.w;
    struct nl_resize r;
    uint8_t *px;

    if (d->dtype != NL_U8)
        return nl_error_set(err, NL_EINVAL,
                            "dataset '%s' holds float samples; image input needs an 8-bit dataset",
                            d->name);
    if (c != 1 && c != 3)
        return nl_error_set(err, NL_EINVAL,
                            "dataset '%s' has %d channels; image input needs 1 (gray) or 3 (RGB)",
                            d->name, c);
    px = nl_malloc(n);
    if (!px)
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    dataset_resize(d, &r);
    rc = nl_image_read(path, c, &r, d->shape.h, d->shape.w, px, NULL, err);
    if (rc == 0)
        for (int k = 0; k < c; k++)
            for (size_t p = 0; p < plane; p++)
                x[k * plane + p] = nl_normalise_u8((float)px[k * plane + p], d->mean[k], d->std[k]);
    nl_free(px);
    return rc;
}
