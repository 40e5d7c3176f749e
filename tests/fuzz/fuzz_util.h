/* What the fuzz targets share: writing the input to a file of this process (the readers read
 * files), one in-memory store, and the decoding of an image file as the importers and predict
 * decode it. */
#ifndef NNLAB_FUZZ_UTIL_H
#define NNLAB_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/import/import_internal.h"
#include "nnlab/store.h"

/* Writes data to $TMPDIR/nnlab-fuzz-PID.EXT (the same file every call); NULL on failure. */
static inline const char *fuzz_write_file(const char *ext, const uint8_t *data, size_t size)
{
    static char path[2][256];
    static int next;
    const char *base = getenv("TMPDIR");
    char *p = path[next++ % 2];
    FILE *f;

    snprintf(p, sizeof path[0], "%s/nnlab-fuzz-%ld-%d.%s", base && *base ? base : "/tmp",
             (long)getpid(), next % 2, ext);
    f = fopen(p, "wb");
    if (!f)
        return NULL;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return NULL;
    }
    fclose(f);
    return p;
}

static inline struct nl_store *fuzz_store(void)
{
    static struct nl_store *s;
    struct nl_error err = {0};

    if (!s && nl_store_open(&s, ":memory:", &err) != 0) {
        fprintf(stderr, "fuzz: %s\n", err.msg);
        abort();
    }
    return s;
}

/* Decodes data, written to a file named .EXT, as the image-folder import and predict decode it:
 * the header probe, then gray and RGB planes stretched to 8x8, and the RGB centre cropped after
 * scaling the shorter side to 6. Errors are the expected outcome of most inputs. */
static inline void fuzz_image(const char *ext, const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_file(ext, data, size);
    const struct nl_resize crop = {.shorter = 6, .crop_w = 4, .crop_h = 4};
    struct nl_error err = {0};
    struct nl_image_info info;
    uint8_t out[3 * 8 * 8];

    if (!path)
        return;
    if (nl_image_probe(path, &info, &err) == 0) {
        nl_image_read(path, 1, NULL, 8, 8, out, NULL, &err);
        nl_image_read(path, 3, NULL, 8, 8, out, NULL, &err);
        nl_image_read(path, 3, &crop, 4, 4, out, NULL, &err);
    }
}

#endif
