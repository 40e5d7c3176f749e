/* The allocation wrapper: plain libc allocation plus a counter that tests read to prove a
 * training step allocates nothing, and the trim that hands freed heap pages back. */
#include "nnlab/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <string.h>
#include <sys/mman.h>

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

void *nl_grow(void *p, size_t *cap, size_t need, size_t elem, size_t first)
{
    size_t n = *cap;

    if (need <= n && p)
        return p;
    if (n < first)
        n = first;
    if (n == 0)
        n = 1;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return NULL;
        n *= 2;
    }
    if (elem && n > SIZE_MAX / elem)
        return NULL;
    void *q = nl_realloc(p, n * elem);
    if (q)
        *cap = n;
    return q;
}

uint64_t nl_alloc_count(void)
{
    return atomic_load_explicit(&alloc_count, memory_order_relaxed);
}

void *nl_alloc_pages(size_t bytes)
{
    void *p =
        mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    return p == MAP_FAILED ? NULL : counted(p);
}

void nl_free_pages(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes ? bytes : 1);
}

void nl_alloc_trim(void)
{
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}
