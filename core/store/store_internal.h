/* The store's private side, shared by the core files that read and write the database (datasets,
 * IDX import, runs and checkpoints): the raw SQLite handle and helpers that turn SQLite failures
 * into nl_error sentences naming the database file. Not part of the public headers. */
#ifndef NNLAB_STORE_INTERNAL_H
#define NNLAB_STORE_INTERNAL_H

#include <sqlite3.h>

#include "nnlab/error.h"
#include "nnlab/store.h"

/* The schema version this build creates and understands (PRAGMA user_version). */
#define NL_STORE_SCHEMA_VERSION 7

/* How long a connection waits for another's write lock before it gives up ("database is
 * locked"). No writer holds the lock for more than a few seconds (imports commit in chunks), so
 * a minute is only reached when something is wrong. */
#define NL_STORE_BUSY_MS 60000

/* The name under which this process stages an import of dataset name (see core/store/store.c):
 * "\x1fimport HOST PID NAME". 0, or -1 when buf is too small. */
int nl_store_staging_name(char *buf, size_t size, const char *name);

/* Prepares one statement whose text is fmt formatted (the samples tables' names: "samples_%lld"
 * with the dataset's id); otherwise as nl_store_prepare. */
int nl_store_preparef(struct nl_store *s, sqlite3_stmt **st, struct nl_error *err, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));

/* Creates dataset id's samples table, samples_ID (see core/store/store.c), inside the caller's
 * transaction. */
int nl_store_create_samples(struct nl_store *s, sqlite3_int64 id, struct nl_error *err);

/* Removes dataset id: drops its samples table and deletes its row (its classes and vocabulary go
 * with it), inside the caller's transaction. 0 when removed, 1 when there was no such dataset. */
int nl_store_drop_dataset(struct nl_store *s, sqlite3_int64 id, struct nl_error *err);

/* The connection; owned by the store, valid until nl_store_close. */
sqlite3 *nl_store_sqlite(struct nl_store *s);

/* Fills err with NL_EDB and "PATH: what: <SQLite's message>" and returns NL_EDB. what may be
 * NULL. Call it right after the failing SQLite call, before any other use of the connection. */
int nl_store_db_error(struct nl_store *s, struct nl_error *err, const char *what);

/* Runs one or more statements that return no rows needed by the caller. */
int nl_store_exec(struct nl_store *s, const char *sql, struct nl_error *err);

/* Prepares one statement; on failure *st is NULL and err names the database. */
int nl_store_prepare(struct nl_store *s, sqlite3_stmt **st, const char *sql, struct nl_error *err);

/* Transactions. begin takes the write lock at once (BEGIN IMMEDIATE), so a concurrent writer is
 * waited for (busy timeout) rather than failing halfway. rollback is a no-op outside a
 * transaction and never fails: call it on every error path after begin. */
int nl_store_begin(struct nl_store *s, struct nl_error *err);
int nl_store_commit(struct nl_store *s, struct nl_error *err);
void nl_store_rollback(struct nl_store *s);

/* Checks a name a person gives to a dataset or run: 1 to 100 bytes of valid UTF-8 (the one rule
 * for names, core/formats/text.c), no control characters, no '/', no leading '-' and no leading or
 * trailing space. what is "dataset", "run"... */
int nl_store_check_name(const char *what, const char *name, struct nl_error *err);

/* One normalised value: v is a pixel in [0, 255] (uint8 datasets) and mean, std are in units of
 * pixel / 255. nl_dataset_batch and nl_dataset_sample_from_png both use this, so a PNG of the
 * same pixels gives the same floats as the stored sample. */
static inline float nl_normalise_u8(float v, float mean, float std)
{
    return (v * (1.0f / 255.0f) - mean) / std;
}

#endif
