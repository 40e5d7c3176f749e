/* Reading files for tests: the start of one into a buffer of the test's (slurp), or the whole of
 * one into a new block (whole). */
#ifndef NNLAB_TESTS_SLURP_H
#define NNLAB_TESTS_SLURP_H

#include <stdio.h>
#include <stdlib.h>

/* The file's first size - 1 bytes into buf, NUL-terminated; empty when it cannot be read. */
static inline void slurp(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

/* The whole of a file into a new block (*n bytes, then a NUL; free it); NULL when it cannot be
 * read. */
static inline char *whole(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    *n = 0;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        rewind(f);
        buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
        if (buf) {
            *n = fread(buf, 1, (size_t)size, f);
            buf[*n] = '\0';
        }
    }
    fclose(f);
    return buf;
}

#endif
