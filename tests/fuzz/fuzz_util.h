/* What the fuzz targets share: writing the input to a file of this process (the readers read
 * files), and one in-memory store. */
#ifndef NNLAB_FUZZ_UTIL_H
#define NNLAB_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

#endif
