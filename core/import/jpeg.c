/* Reading JPEG files with libjpeg-turbo's libjpeg API: the header alone (size, colour, EXIF
 * orientation) for the import's first pass, and the pixels as 8-bit planes for the second pass
 * and for prediction.
 *
 * Every kind libjpeg reads is accepted: baseline and progressive, arithmetic-coded, with restart
 * markers, gray, YCbCr, RGB, CMYK and YCCK. Pixels are decoded with libjpeg's defaults (accurate
 * integer IDCT, fancy upsampling), the settings Pillow uses, so a file decodes to the bytes Pillow
 * gives. CMYK and YCCK become RGB as Pillow converts them: with Adobe's inverted CMYK,
 * R = (255 - K) - C (255 - K) / 255 in Pillow's integer rounding. Gray is replicated for RGB
 * datasets; colour becomes 0.299 R + 0.587 G + 0.114 B, rounded, for gray ones (as for PNG).
 *
 * The EXIF orientation (tag 0x0112 of IFD0 in an APP1 "Exif" segment) is applied, as Pillow's
 * ImageOps.exif_transpose applies it: 2 mirrors, 3 turns 180 degrees, 4 flips, 5 transposes,
 * 6 turns 90 degrees clockwise, 7 transverses, 8 turns 90 degrees anticlockwise. The segment is
 * read within its own length; a malformed segment or a value outside 1..8 means orientation 1.
 * Sizes reported by the probe are those after orientation.
 *
 * libjpeg never ends the process: its error_exit longjmps back here, and every warning except
 * "extraneous bytes before a marker" (the image data is whole) is an error, so a truncated file
 * ("premature end of JPEG file") or corrupt entropy data is refused and named, never imported as
 * a half-gray picture. Progressive files with more than MAX_SCANS scans are refused, which bounds
 * the time a hostile file can take. */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "import_internal.h"
#include "nnlab/alloc.h"

#define MAX_SIDE   65500
#define MAX_PIXELS (1u << 26)
#define MAX_SCANS  1000

struct nl_jpeg {
    const char *path;
    FILE *f;
    struct jpeg_decompress_struct cinfo;
    struct jpeg_error_mgr jerr;
    struct jpeg_progress_mgr progress;
    int created;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX];
    int orientation;
    uint8_t *row; /* one output scanline */
};

static void on_error_exit(j_common_ptr c)
{
    struct nl_jpeg *j = (struct nl_jpeg *)c->client_data;

    c->err->format_message(c, j->msg);
    longjmp(j->jmp, 1);
}

static void on_message(j_common_ptr c, int level)
{
    struct nl_jpeg *j = (struct nl_jpeg *)c->client_data;

    /* level -1: a warning about the data; 0 and up: trace messages, ignored. */
    if (level >= 0 || c->err->msg_code == JWRN_EXTRANEOUS_DATA)
        return;
    c->err->format_message(c, j->msg);
    longjmp(j->jmp, 1);
}

static void on_progress(j_common_ptr c)
{
    struct nl_jpeg *j = (struct nl_jpeg *)c->client_data;
    struct jpeg_decompress_struct *d = (struct jpeg_decompress_struct *)c;

    if (c->is_decompressor && d->input_scan_number > MAX_SCANS) {
        snprintf(j->msg, sizeof j->msg, "more than %d scans", MAX_SCANS);
        longjmp(j->jmp, 1);
    }
}

static unsigned get16(const uint8_t *p, int le)
{
    return le ? (unsigned)p[0] | (unsigned)p[1] << 8 : (unsigned)p[0] << 8 | p[1];
}

static uint32_t get32(const uint8_t *p, int le)
{
    return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
              : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The orientation in one APP1 segment's data[0..n), or 0 when it holds none. */
static int exif_orientation(const uint8_t *data, size_t n)
{
    const uint8_t *t;
    size_t tn;
    uint32_t ifd;
    unsigned count;
    int le;

    if (n < 6 || memcmp(data, "Exif\0\0", 6) != 0)
        return 0;
    t = data + 6; /* the TIFF structure; offsets count from here */
    tn = n - 6;
    if (tn < 8)
        return 0;
    if (t[0] == 'I' && t[1] == 'I')
        le = 1;
    else if (t[0] == 'M' && t[1] == 'M')
        le = 0;
    else
        return 0;
    if (get16(t + 2, le) != 42)
        return 0;
    ifd = get32(t + 4, le);
    if (ifd > tn - 2)
        return 0;
    count = get16(t + ifd, le);
    for (unsigned i = 0; i < count; i++) {
        size_t at = (size_t)ifd + 2 + (size_t)i * 12;
        if (at + 12 > tn)
            return 0;
        if (get16(t + at, le) != 0x0112)
            continue;
        /* SHORT, one value, stored in the first two bytes of the value field. */
        if (get16(t + at + 2, le) != 3 || get32(t + at + 4, le) != 1)
            return 0;
        unsigned v = get16(t + at + 8, le);
        return v >= 1 && v <= 8 ? (int)v : 0;
    }
    return 0;
}

void nl_jpeg_close(struct nl_jpeg *j)
{
    if (!j)
        return;
    if (j->created)
        jpeg_destroy_decompress(&j->cinfo);
    if (j->f)
        fclose(j->f);
    nl_free(j->row);
    nl_free(j);
}

int nl_jpeg_open(struct nl_jpeg **out, const char *path, struct nl_image_info *info,
                 struct nl_error *err)
{
    struct nl_jpeg *j = nl_calloc(1, sizeof *j);
    unsigned char sig[3];

    *out = NULL;
    if (!j)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    j->path = path;
    j->f = nl_fopen_regular(path, err);
    if (!j->f) {
        nl_jpeg_close(j);
        return err->code;
    }
    if (fread(sig, 1, sizeof sig, j->f) != sizeof sig || sig[0] != 0xff || sig[1] != 0xd8 ||
        sig[2] != 0xff) {
        nl_jpeg_close(j);
        return nl_error_set(err, NL_EFORMAT, "%s: not a JPEG file", path);
    }
    rewind(j->f);
    j->cinfo.err = jpeg_std_error(&j->jerr);
    j->jerr.error_exit = on_error_exit;
    j->jerr.emit_message = on_message;
    j->cinfo.client_data = j;
    if (setjmp(j->jmp)) {
        int rc = nl_error_set(err, NL_EFORMAT, "%s: corrupt JPEG: %s", path, j->msg);
        nl_jpeg_close(j);
        return rc;
    }
    jpeg_create_decompress(&j->cinfo);
    j->created = 1;
    j->progress.progress_monitor = on_progress;
    j->cinfo.progress = &j->progress;
    jpeg_stdio_src(&j->cinfo, j->f);
    jpeg_save_markers(&j->cinfo, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(&j->cinfo, TRUE);

    j->orientation = 1;
    for (jpeg_saved_marker_ptr m = j->cinfo.marker_list; m; m = m->next) {
        int o = m->marker == JPEG_APP0 + 1 ? exif_orientation(m->data, m->data_length) : 0;
        if (o) {
            j->orientation = o;
            break;
        }
    }
    uint32_t w = j->cinfo.image_width, h = j->cinfo.image_height;
    if (w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE || (uint64_t)w * h > MAX_PIXELS) {
        nl_jpeg_close(j);
        return nl_error_set(err, NL_EFORMAT, "%s: image of %u x %u pixels is not supported", path,
                            w, h);
    }
    info->orientation = j->orientation;
    info->w = j->orientation >= 5 ? h : w;
    info->h = j->orientation >= 5 ? w : h;
    info->color = j->cinfo.num_components > 1;
    info->format = NL_IMAGE_JPEG;
    *out = j;
    return 0;
}

static uint8_t muldiv255(int a, int b)
{
    int t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

static uint8_t luminance(int r, int g, int b)
{
    float v = 0.299f * (float)r + 0.587f * (float)g + 0.114f * (float)b + 0.5f;
    return (uint8_t)(v > 255 ? 255 : v);
}

/* Stores decoded pixel (x, y) of the stored frame at its oriented place in planes (c, oh, ow). */
static size_t oriented(int orientation, uint32_t x, uint32_t y, uint32_t w, uint32_t h)
{
    uint32_t ox, oy, ow = orientation >= 5 ? h : w;

    switch (orientation) {
    case 2:
        ox = w - 1 - x, oy = y;
        break;
    case 3:
        ox = w - 1 - x, oy = h - 1 - y;
        break;
    case 4:
        ox = x, oy = h - 1 - y;
        break;
    case 5:
        ox = y, oy = x;
        break;
    case 6:
        ox = h - 1 - y, oy = x;
        break;
    case 7:
        ox = h - 1 - y, oy = w - 1 - x;
        break;
    case 8:
        ox = y, oy = w - 1 - x;
        break;
    default:
        ox = x, oy = y;
        break;
    }
    return (size_t)oy * ow + ox;
}

int nl_jpeg_decode(struct nl_jpeg *j, int denom, int channels, struct nl_image *img,
                   struct nl_error *err)
{
    struct jpeg_decompress_struct *ci = &j->cinfo;
    J_COLOR_SPACE in = ci->jpeg_color_space;
    int cmyk = in == JCS_CMYK || in == JCS_YCCK;
    uint32_t w, h;
    size_t plane;

    img->px = NULL;
    if (setjmp(j->jmp)) {
        nl_free(img->px);
        img->px = NULL;
        return nl_error_set(err, NL_EFORMAT, "%s: corrupt JPEG: %s", j->path, j->msg);
    }
    ci->scale_num = 1;
    ci->scale_denom = (unsigned)(denom == 2 || denom == 4 || denom == 8 ? denom : 1);
    ci->out_color_space = ci->num_components == 1 ? JCS_GRAYSCALE : cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(ci);
    w = ci->output_width;
    h = ci->output_height;
    plane = (size_t)w * h;
    if (ci->output_components != (ci->out_color_space == JCS_GRAYSCALE ? 1 : cmyk ? 4 : 3))
        return nl_error_set(err, NL_EFORMAT, "%s: unsupported JPEG layout (%d components)", j->path,
                            ci->output_components);
    j->row = nl_malloc((size_t)w * ci->output_components);
    img->px = nl_malloc(plane * channels);
    if (!j->row || !img->px) {
        nl_free(img->px);
        img->px = NULL;
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory for %u x %u pixels", j->path, w, h);
    }
    img->c = channels;
    img->w = (int)(j->orientation >= 5 ? h : w);
    img->h = (int)(j->orientation >= 5 ? w : h);
    while (ci->output_scanline < h) {
        JSAMPROW rows[1] = {j->row};
        uint32_t y = ci->output_scanline;
        if (jpeg_read_scanlines(ci, rows, 1) != 1) { /* only a suspending source does this */
            nl_free(img->px);
            img->px = NULL;
            return nl_error_set(err, NL_EFORMAT, "%s: corrupt JPEG: no data for row %u", j->path,
                                y);
        }
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *p = j->row + (size_t)x * ci->output_components;
            uint8_t rgb[3];
            size_t at = oriented(j->orientation, x, y, w, h);
            if (ci->output_components == 1) {
                rgb[0] = rgb[1] = rgb[2] = p[0];
            } else if (cmyk) {
                /* Pillow's CMYK;I (Adobe) or CMYK, then its cmyk2rgb. */
                int inv = ci->saw_Adobe_marker;
                int nk = inv ? p[3] : 255 - p[3];
                for (int k = 0; k < 3; k++) {
                    int c = inv ? 255 - p[k] : p[k];
                    int v = nk - muldiv255(c, nk);
                    rgb[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
            } else {
                memcpy(rgb, p, 3);
            }
            if (channels == 1)
                img->px[at] = ci->output_components == 1 || (rgb[0] == rgb[1] && rgb[1] == rgb[2])
                                  ? rgb[0]
                                  : luminance(rgb[0], rgb[1], rgb[2]);
            else
                for (int k = 0; k < 3; k++)
                    img->px[(size_t)k * plane + at] = rgb[k];
        }
    }
    jpeg_finish_decompress(ci);
    return 0;
}
