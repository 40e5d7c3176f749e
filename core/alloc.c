/* The allocation wrapper: plain libc allocation plus a counter that tests read to prove a
 * training step allocates nothing. */
#include "nnlab/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint_fast64_t alloc_count;

static void *counted(void *p)
{
    if (p)
        atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    return p;
}

void *nl_malloc(size_t size)
{
    return counted(malloc(size ? size : 1));
}

void *nl_calloc(size_t count, size_t size)
{
    return counted(calloc(count ? count : 1, size ? size : 1));
}

void *nl_realloc(void *p, size_t size)
{
    return counted(realloc(p, size ? size : 1));
}

float *nl_alloc_floats(size_t count)
{
    void *p = NULL;
    size_t bytes = (count ? count : 1) * sizeof(float);

    if (count > SIZE_MAX / sizeof(float) || posix_memalign(&p, 64, bytes) != 0)
        return NULL;
    memset(p, 0, bytes);
    return counted(p);
}

void nl_free(void *p)
{
    free(p);
}

char *nl_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = nl_malloc(n);

    if (d)
        memcpy(d, s, n);
    return d;
}

uint64_t nl_alloc_count(void)
{
    return atomic_load_explicit(&alloc_count, memory_order_relaxed);
}
