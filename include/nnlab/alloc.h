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

/* Number of successful allocations made through this wrapper so far, all threads. */
uint64_t nl_alloc_count(void);

#endif
