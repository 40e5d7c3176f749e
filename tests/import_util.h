/* What the importer tests share: a temporary folder of their own (tmp: made by tmp_make, removed
 * with all it holds by tmp_remove) and paths in it (at), big-endian words for the headers they
 * forge, and the rows a table of the store holds. The file that includes it defines
 * _XOPEN_SOURCE 700 (for nftw) before its first include. */
#ifndef NNLAB_TESTS_IMPORT_UTIL_H
#define NNLAB_TESTS_IMPORT_UTIL_H

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "core/store/store_internal.h"
#include "nnlab/store.h"

static char tmp[256];

/* tmp/name, in one of eight buffers used in turn (so a call may take several). */
static inline const char *at(const char *name)
{
    static char buf[8][512];
    static int next;
    char *p = buf[next++ % 8];

    snprintf(p, 512, "%s/%s", tmp, name);
    return p;
}

/* Makes tmp, $TMPDIR/PREFIX-XXXXXX (or under /tmp); bails out of the test when it cannot. */
static inline void tmp_make(const char *prefix)
{
    const char *base = getenv("TMPDIR");

    snprintf(tmp, sizeof tmp, "%s/%s-XXXXXX", base && *base ? base : "/tmp", prefix);
    if (!mkdtemp(tmp)) {
        printf("Bail out! cannot create a temporary folder\n");
        exit(1);
    }
}

static inline int tmp_remove_entry(const char *path, const struct stat *st, int flag,
                                   struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Removes tmp and everything in it. */
static inline void tmp_remove(void)
{
    nftw(tmp, tmp_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The rows of table in the store, -1 when it cannot be read; "samples" counts every dataset's
 * samples table (core/store/store.c), summed. */
static inline long long count_rows(struct nl_store *s, const char *table)
{
    char sql[128];
    sqlite3_stmt *st;
    long long n = -1;

    if (strcmp(table, "samples") == 0) {
        long long sum = 0;
        if (sqlite3_prepare_v2(nl_store_sqlite(s),
                               "SELECT name FROM sqlite_master WHERE type = 'table' AND "
                               "name GLOB 'samples_[0-9]*'",
                               -1, &st, NULL) != SQLITE_OK)
            return -1;
        while (sum >= 0 && sqlite3_step(st) == SQLITE_ROW) {
            long long k = count_rows(s, (const char *)sqlite3_column_text(st, 0));
            sum = k < 0 ? -1 : sum + k;
        }
        sqlite3_finalize(st);
        return sum;
    }
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
    if (sqlite3_prepare_v2(nl_store_sqlite(s), sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

#endif
