/* Writing IDX pairs for tests: images (magic 0x803, n x rows x cols bytes) and labels (magic
 * 0x801, n bytes), big-endian headers, gzip-compressed as Fashion-MNIST ships them or raw; and
 * reading the first images of such a pair (a subset of Fashion-MNIST). */
#ifndef NNLAB_TESTS_IDX_WRITER_H
#define NNLAB_TESTS_IDX_WRITER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* Writes the pair uncompressed; 0, or -1 when a file cannot be written whole. */
static inline int idx_write_raw(const char *images, const char *labels, const uint8_t *px,
                                const uint8_t *lab, uint32_t n, uint32_t rows, uint32_t cols)
{
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        const uint32_t h[4] = {k ? 0x801u : 0x803u, n, rows, cols};
        const size_t bytes = k ? n : (size_t)n * rows * cols;
        FILE *f = fopen(k ? labels : images, "wb");
        if (!f)
            return -1;
        for (int i = 0; i < (k ? 2 : 4); i++)
            for (int s = 24; s >= 0; s -= 8)
                fputc((int)(h[i] >> s) & 255, f);
        if (fwrite(k ? lab : px, 1, bytes, f) != bytes)
            rc = -1;
        if (fclose(f) != 0)
            rc = -1;
    }
    return rc;
}

/* The first n 28x28 images and labels of the gzip-compressed pair PREFIX-images-idx3-ubyte.gz
 * and PREFIX-labels-idx1-ubyte.gz (prefix a path, as ".../train"), into new blocks *px and *lab
 * (free them); 0, or -1 (nothing to free) when the pair does not hold them. */
static inline int idx_read_first(const char *prefix, uint32_t n, uint8_t **px, uint8_t **lab)
{
    char path[600];
    unsigned char hdr[16];
    *px = malloc((size_t)n * 784);
    *lab = malloc(n ? n : 1);
    snprintf(path, sizeof path, "%s-images-idx3-ubyte.gz", prefix);
    gzFile a = gzopen(path, "rb");
    snprintf(path, sizeof path, "%s-labels-idx1-ubyte.gz", prefix);
    gzFile b = gzopen(path, "rb");
    const int ok = a && b && *px && *lab && gzread(a, hdr, 16) == 16 && gzread(b, hdr, 8) == 8 &&
                   gzread(a, *px, n * 784) == (int)(n * 784) && gzread(b, *lab, n) == (int)n;
    if (a)
        gzclose(a);
    if (b)
        gzclose(b);
    if (!ok) {
        free(*px);
        free(*lab);
        *px = *lab = NULL;
    }
    return ok ? 0 : -1;
}

#endif
