/* Cached frozen features; the scheme and the file format are in core/engine/feature_cache.h. */
#define _GNU_SOURCE
#include "feature_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nnlab/alloc.h"

#define MAGIC   "nnlabft1"
#define VERSION 1u
#define HEADER  4096u /* bytes before the rows: a page, so that the rows are aligned */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The hash that names the file: the prefix's layers (kind, name, output shape, parameters with
 * their statistics) and the training split with its normalisation. */
static uint64_t cache_key(const struct nl_exec *x, const struct nl_model *m,
                          const struct nl_dataset *d, size_t floats)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const size_t n = d->split[NL_TRAIN].n;
    const size_t item = d->dtype == NL_U8 ? 1 : sizeof(float);

    h = fnv(h, &floats, sizeof floats);
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        if (!nl_exec_in_prefix(x, i))
            continue;
        h = fnv(h, l->ops->kind, strlen(l->ops->kind));
        h = fnv(h, l->name, strlen(l->name) + 1);
        h = fnv(h, &l->out, sizeof l->out);
        for (int k = 0; k < l->nparams; k++)
            h = fnv(h, m->params + l->param_offset + l->params[k].offset,
                    l->params[k].count * sizeof(float));
    }
    h = fnv(h, &d->shape, sizeof d->shape);
    h = fnv(h, &n, sizeof n);
    h = fnv(h, d->mean, (size_t)d->nnorm * sizeof(float));
    h = fnv(h, d->std, (size_t)d->nnorm * sizeof(float));
    h = fnv(h, d->split[NL_TRAIN].x, n * nl_shape_size(d->shape) * item);
    return h;
}

static void header(unsigned char *b, uint64_t key, uint64_t n, uint64_t floats)
{
    const uint64_t v[3] = {key, n, floats};
    memset(b, 0, 64);
    memcpy(b, MAGIC, 8);
    for (int i = 0; i < 4; i++)
        b[8 + i] = (unsigned char)(VERSION >> (8 * i));
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 8; i++)
            b[16 + 8 * k + i] = (unsigned char)(v[k] >> (8 * i));
}

/* mkdir -p of dir; 0 or -1 with errno. */
static int make_dirs(const char *dir)
{
    char p[512];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0700) < 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    return mkdir(p, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

/* Maps the finished file at f->path when its header is the expected one; 1 when it did. */
static int map_finished(struct nl_features *f, size_t bytes)
{
    unsigned char want[64], got[64];
    struct stat st;
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return 0;
    header(want, f->key, f->n, f->floats);
    if (fstat(fd, &st) < 0 || (size_t)st.st_size != bytes || pread(fd, got, 64, 0) != 64 ||
        memcmp(want, got, 64) != 0) {
        close(fd);
        return 0;
    }
    void *map = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return 0;
    f->map = map;
    f->map_bytes = bytes;
    f->rows = (float *)((unsigned char *)map + HEADER);
    f->complete = 1;
    return 1;
}

/* An unnamed file in f->dir of that size, mapped for writing; 0, or -1 with errno. Its blocks
 * are allocated here (posix_fallocate), not left sparse: a store into a mapped page the file
 * system cannot back is a SIGBUS, so a disk too full for the rows is ENOSPC now, and the cache
 * is off. */
static int map_new(struct nl_features *f, size_t bytes)
{
    unsigned char h[64];
    int fd = open(f->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

    if (fd < 0)
        return -1;
    header(h, f->key, f->n, f->floats);
    int rc = posix_fallocate(fd, 0, (off_t)bytes);
    if (rc != 0 || pwrite(fd, h, 64, 0) != 64) {
        int e = rc ? rc : errno;
        close(fd);
        errno = e ? e : EIO;
        return -1;
    }
    void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    f->fd = fd;
    f->map = map;
    f->map_bytes = bytes;
    f->rows = (float *)((unsigned char *)map + HEADER);
    return 0;
}

static double mib(size_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

void nl_features_open(struct nl_features *f, const struct nl_exec *x, const struct nl_model *m,
                      const struct nl_dataset *d, size_t limit, const char *dir, char *note,
                      size_t note_size)
{
    int last, layers = nl_exec_prefix_layers(x, &last);

    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->floats = nl_exec_prefix(x);
    f->n = d->split[NL_TRAIN].n;
    note[0] = '\0';
    if (f->floats == 0)
        return; /* nothing frozen to cache: nothing to say */
    const size_t bytes = f->n * f->floats * sizeof(float);
    const char *upto = m->layers[last].name;
    if (bytes <= limit) {
        f->rows = nl_alloc_floats(f->n * f->floats + 1);
        if (f->rows) {
            f->where = NL_FEATURES_MEMORY;
            snprintf(note, note_size,
                     "frozen features cached in memory: %d layers up to '%s', %zu floats a sample, "
                     "%.1f MiB for %zu samples; epochs after the first run only the layers after "
                     "them",
                     layers, upto, f->floats, mib(bytes), f->n);
            return;
        }
    }
    if (!dir) {
        snprintf(note, note_size,
                 "frozen features not cached: %.1f MiB (%zu floats a sample for %zu samples) "
                 "exceed the memory limit of %.1f MiB, and there is no cache directory",
                 mib(bytes), f->floats, f->n, mib(limit));
        return;
    }
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    f->key = cache_key(x, m, d, f->floats);
    snprintf(f->path, sizeof f->path, "%s/%016llx.features", dir, (unsigned long long)f->key);
    const size_t file_bytes = HEADER + bytes;
    if (map_finished(f, file_bytes)) {
        f->where = NL_FEATURES_FILE;
        snprintf(note, note_size,
                 "frozen features read from %s: %d layers up to '%s', %.1f MiB; no epoch runs "
                 "them",
                 f->path, layers, upto, mib(bytes));
        return;
    }
    if (make_dirs(dir) < 0 || map_new(f, file_bytes) < 0) {
        snprintf(note, note_size,
                 "frozen features not cached: %.1f MiB exceed the memory limit of %.1f MiB, and "
                 "%s cannot hold them (%s)",
                 mib(bytes), mib(limit), dir, strerror(errno));
        return;
    }
    f->where = NL_FEATURES_FILE;
    snprintf(note, note_size,
             "frozen features cached in %s: %d layers up to '%s', %.1f MiB (over the memory "
             "limit of %.1f MiB); epochs after the first, and later runs on the same data and "
             "frozen weights, run only the layers after them",
             f->path, layers, upto, mib(bytes), mib(limit));
}

void nl_features_finish(struct nl_features *f, char *note, size_t note_size)
{
    char proc[64];

    note[0] = '\0';
    f->complete = 1;
    if (f->where != NL_FEATURES_FILE || f->fd < 0)
        return;
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
    /* Another run may have linked the same features meanwhile: replace them. */
    int rc = msync(f->map, f->map_bytes, MS_SYNC);
    if (rc == 0) {
        (void)unlink(f->path);
        rc = linkat(AT_FDCWD, proc, AT_FDCWD, f->path, AT_SYMLINK_FOLLOW);
    }
    if (rc < 0)
        snprintf(note, note_size, "frozen features not kept in %s for later runs: %s", f->path,
                 strerror(errno));
    close(f->fd);
    f->fd = -1;
}

void nl_features_close(struct nl_features *f)
{
    if (f->where == NL_FEATURES_MEMORY)
        nl_free(f->rows);
    if (f->map)
        munmap(f->map, f->map_bytes);
    if (f->fd >= 0)
        close(f->fd);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}
