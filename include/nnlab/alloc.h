/* Allocation through one wrapper, so that tests can count allocations (a training step after the
 * first one must make none). All blocks, aligned or not, are released with nl_free. */
#ifndef NNLAB_ALLOC_H
#define NNLAB_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *nl_malloc(size_t size);
void *nl_calloc(size_t count, size_t size);
void *nl_realloc(void *p, size_t size);
/* 64-byte aligned, zero-filled; count floats. */
float *nl_alloc_floats(size_t count);
void nl_free(void *p);
char *nl_strdup(const char *s);

/* The one growth rule for arrays that grow an element at a time: returns p with room for at
 * least need elements of elem bytes, *cap of which it has now, doubling the capacity (from
 * first at least) when need exceeds it, and sets *cap. Returns NULL when memory runs out or the
 * size would overflow; p and *cap are then as they were (p still owned by the caller). */
void *nl_grow(void *p, size_t *cap, size_t need, size_t elem, size_t first);

/* Number of successful allocations made through this wrapper so far, all threads. */
uint64_t nl_alloc_count(void);

/* bytes of zeroed memory straight from the system (mmap), whose pages become resident only once
 * written: for blocks sized for the most a caller may write, of which it often writes a little.
 * Released with nl_free_pages and the same size; NULL when memory runs out. */
void *nl_alloc_pages(size_t bytes);
void nl_free_pages(void *p, size_t bytes);

/* Gives the free memory inside the allocator's heap back to the system (glibc's malloc_trim):
 * small blocks freed in the middle of the heap otherwise stay resident. */
void nl_alloc_trim(void);

#endif
