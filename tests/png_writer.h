/* Writing PNG files for tests with libpng: any colour type and bit depth from packed rows, with a
 * palette, transparency and Adam7 interlacing where asked; and the common case, 8-bit gray or RGB
 * pixels. */
#ifndef NNLAB_TESTS_PNG_WRITER_H
#define NNLAB_TESTS_PNG_WRITER_H

#include <png.h>
#include <stdint.h>
#include <stdio.h>

/* A w x h PNG of colour type color and bit depth bits from h rows of rowbytes bytes at px, already
 * packed for that depth; palette (ncolors entries) and alpha (nalpha) where not NULL; interlace:
 * Adam7. 0, or -1 when the file cannot be written. */
static inline int write_png_file(const char *path, int w, int h, int color, int bits,
                                 const uint8_t *px, size_t rowbytes, const png_color *palette,
                                 int ncolors, const png_byte *alpha, int nalpha, int interlace)
{
    FILE *f = fopen(path, "wb");
    png_structp png;
    png_infop info;

    if (!f)
        return -1;
    png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, bits, color,
                 interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (palette)
        png_set_PLTE(png, info, palette, ncolors);
    if (alpha)
        png_set_tRNS(png, info, alpha, nalpha, NULL);
    png_write_info(png, info);
    for (int pass = png_set_interlace_handling(png); pass > 0; pass--)
        for (int y = 0; y < h; y++)
            png_write_row(png, px + (size_t)y * rowbytes);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return fclose(f) == 0 ? 0 : -1;
}

/* A w x h 8-bit PNG of px, gray (channels 1) or RGB (channels 3), rows packed. */
static inline int write_png_8bit(const char *path, const uint8_t *px, int w, int h, int channels)
{
    return write_png_file(path, w, h, channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, 8,
                          px, (size_t)w * channels, NULL, 0, NULL, 0, 0);
}

#endif
