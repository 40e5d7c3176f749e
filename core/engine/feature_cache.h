/* Cached frozen features: the output of a model's frozen prefix (nl_exec_prefix in
 * include/nnlab/model.h) for every training sample, computed in one epoch and read in the
 * later ones, so that those run only the layers outside the prefix.
 *
 * Where the rows live: in memory when ntrain * floats * 4 bytes fits in the caller's limit,
 * else in a file under the caller's cache directory, mapped into memory and named by a hash of
 * the prefix (its layers, shapes and parameters) and of the training split (shape, samples,
 * normalisation), so that a later run with the same frozen backbone on the same data reads the
 * finished file and computes no prefix at all. The file is written unnamed (O_TMPFILE) and
 * linked under its name only once every row is in it, so a file under that name is always
 * whole; a crash leaves nothing. Without a directory, or when the file cannot be made, the
 * cache is off and every epoch computes the prefix.
 *
 * The file: a header of 64 bytes, little-endian, then zeros up to byte 4096, then the rows
 * (n, floats) as float32:
 *   0  "nnlabft1"   magic
 *   8  u32 version  1
 *   12 u32 0
 *   16 u64 key      the hash above (FNV-1a, 64 bits)
 *   24 u64 n        training samples
 *   32 u64 floats   per sample
 * A file whose header does not match what the run expects is not read; the run writes its own
 * in its place. */
#ifndef NNLAB_FEATURE_CACHE_H
#define NNLAB_FEATURE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/dataset.h"
#include "nnlab/model.h"

enum nl_features_where {
    NL_FEATURES_NONE = 0,
    NL_FEATURES_MEMORY,
    NL_FEATURES_FILE,
};

struct nl_features {
    enum nl_features_where where;
    float *rows;   /* (n, floats), sample i of the train split at row i */
    size_t floats; /* per sample */
    size_t n;
    int complete; /* every row holds its sample's features */
    /* The file: its descriptor while it is being written (-1 otherwise), its mapping, its name
     * and directory. */
    int fd;
    void *map;
    size_t map_bytes;
    uint64_t key;
    char dir[512];
    char path[600];
};

/* Sets f up for the prefix of executor x (model m, dataset d's train split): in memory within
 * limit bytes, else in a file under dir (NULL: none), reading a finished one if there is one.
 * Writes what it did, or why the cache is off, in note (a sentence for the person training).
 * f->where is NL_FEATURES_NONE when the cache is off. Never fails: a cache that cannot be made
 * is off. */
void nl_features_open(struct nl_features *f, const struct nl_exec *x, const struct nl_model *m,
                      const struct nl_dataset *d, size_t limit, const char *dir, char *note,
                      size_t note_size);

/* After an epoch that wrote every row: marks f complete and, for a file, links it under its
 * name. A file that cannot be linked stays in use for this run; note says so (else ""). */
void nl_features_finish(struct nl_features *f, char *note, size_t note_size);

void nl_features_close(struct nl_features *f);

#endif
