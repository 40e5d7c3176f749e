/* Writing IDX pairs for tests: gzip-compressed images (magic 0x803, n x rows x cols bytes) and
 * labels (magic 0x801, n bytes), big-endian headers, as Fashion-MNIST ships them. */
#ifndef NNLAB_TESTS_IDX_WRITER_H
#define NNLAB_TESTS_IDX_WRITER_H

#include <stdint.h>
#include <zlib.h>

static inline void idx_be32(gzFile f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    gzwrite(f, b, 4);
}

/* The header of an image file of n rows x cols images; the pixels are the caller's to add. */
static inline void idx_images_header(gzFile f, uint32_t n, uint32_t rows, uint32_t cols)
{
    idx_be32(f, 0x803);
    idx_be32(f, n);
    idx_be32(f, rows);
    idx_be32(f, cols);
}

/* The header of a label file of n labels. */
static inline void idx_labels_header(gzFile f, uint32_t n)
{
    idx_be32(f, 0x801);
    idx_be32(f, n);
}

/* Writes the pair: n images of rows x cols pixels (px) and their labels (lab). */
static inline void idx_write(const char *images, const char *labels, const uint8_t *px,
                             const uint8_t *lab, uint32_t n, uint32_t rows, uint32_t cols)
{
    gzFile f = gzopen(images, "wb");
    idx_images_header(f, n, rows, cols);
    gzwrite(f, px, n * rows * cols);
    gzclose(f);
    f = gzopen(labels, "wb");
    idx_labels_header(f, n);
    gzwrite(f, lab, n);
    gzclose(f);
}

#endif
