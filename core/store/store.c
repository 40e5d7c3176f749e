/* The SQLite store: opening the database (creating its folder and schema), the schema itself, and
 * the helpers the other core files use to run statements with errors that name the database.
 *
 * The schema below is the documentation of the database. Its version is PRAGMA user_version;
 * this build writes version NL_STORE_SCHEMA_VERSION, upgrades older ones (1 -> 2 adds
 * worker_steps, 2 -> 3 adds recoveries, 3 -> 4 adds the runs' owner columns: their running runs
 * have no owner, so they list as interrupted; 4 -> 5 adds the regression columns; 5 -> 6 adds
 * vocab, empty for the datasets already there, none of which is text; 6 -> 7 moves each dataset's
 * rows of the one samples table into a table of its own, in the upgrade's transaction) and
 * refuses a database of a newer one. Conventions:
 *   - times are UTC ISO-8601 text, "2026-01-31T12:00:00Z";
 *   - BLOBs of numbers are little-endian (float32 unless said otherwise);
 *   - each dataset's samples are a table of their own, samples_ID (ID: datasets.id; see
 *     SAMPLES_SQL), created with the dataset's row and dropped with it in one transaction:
 *     removing a dataset is then a DROP TABLE, which frees its pages without rewriting them,
 *     where deleting its rows from one shared table rewrote nearly every page it had (version 7;
 *     before, one table samples held them all, keyed by (dataset, idx));
 *   - samples_ID.split: 0 train, 1 val, 2 test (enum nl_split); samples_ID.idx numbers the
 *     samples of the dataset from 0 across all splits, in the order of the source files;
 *   - samples_ID.data is one sample, (channels, height, width) row-major, uint8 or float32 by
 *     datasets.dtype (0 uint8, 1 float32); samples_ID.label of a regression dataset holds the
 *     float32 target's bits;
 *   - norm_mean and norm_std hold one float32 per channel, in units of pixel / 255 for uint8
 *     data, computed over the train split at import; a CSV dataset's samples are (F, 1, 1)
 *     float32, so its statistics are per feature;
 *   - datasets.preprocessing is a JSON object recording what the import did: the reader, and as
 *     they apply channels, size and how many files were resized or converted, separator, header,
 *     label column, feature names, carved split fractions and seed, skipped files or lines;
 *   - runs name their dataset by name, not by id, so that a run's record outlives the dataset;
 *     everything else that belongs to a dataset or a run goes with it (ON DELETE CASCADE, with
 *     foreign_keys on for every connection, and the samples table dropped beside the row);
 *     stores are created with auto_vacuum INCREMENTAL, and removing a dataset gives its pages
 *     back to the file system (nl_store_reclaim);
 *   - writers run with secure_delete FAST: Debian's SQLite is built with secure_delete on, which
 *     overwrites every freed page with zeros through the WAL and so wrote a removed dataset's
 *     size twice (WAL, then checkpoint); the freed pages are given back by the incremental
 *     vacuum that follows a removal, and moved-into pages overwrite what they held;
 *   - an import in progress is a dataset whose name starts with the byte 0x1f (a name nobody can
 *     give: names have no control characters): "\x1fimport HOST PID NAME". It is filled in
 *     transactions of bounded size and renamed to NAME in the last one, so people see the whole
 *     dataset or nothing; listings skip such rows, and opening the store for writing removes the
 *     ones of this host whose process is gone (an import killed with -9).
 *
 * Concurrency. Every connection waits up to NL_STORE_BUSY_MS for the write lock (SQLite's busy
 * handler retries until then), and no writer holds it for long: imports commit every few
 * thousand samples, training writes one epoch or checkpoint per transaction. Opening takes no
 * write lock unless the schema must be created or upgraded, so readers never wait for writers
 * nor block them (WAL). nl_store_open_read opens an existing store read-only when its file or
 * folder is not writable (a read-only mount, another user's store), so listing and evaluating
 * need no write access.
 *
 * Locks lost. SQLite's locks are POSIX advisory locks, which a process loses, all of them, when
 * it closes ANY descriptor of the file — and GIO opens files to tell their content type when a
 * file chooser lists their folder. A connection idle in WAL mode holds a shared lock on the
 * database file; once that is gone, another process's last connection to close takes the
 * exclusive lock, checkpoints and, by default, deletes the WAL file (and its index), and the next
 * writer makes new ones: the connection that lost its lock keeps reading the deleted files, sees
 * the store as it was, and its own commits go to a file nobody else reads. So every connection
 * keeps the WAL file when it closes (SQLITE_FCNTL_PERSIST_WAL; the checkpoint still runs, and the
 * file is reused from its start, emptied in place rather than deleted: journal_size_limit):
 * descriptors stay on the files the others write.
 * tests/test_gui_store.c reproduces it with open()+close() of the database file. What remains:
 * a lost lock no longer keeps out a checkpoint on close, which respects the readers' marks in the
 * WAL index (their own file, -shm, which a chooser may also open: a reader in a transaction at
 * that moment could then read a page newer than its snapshot). */
#include "store_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/text.h"

enum { BUSY_SLEEP_MS = 2 };

/* Pages nl_store_reclaim gives back per transaction, and the page cache (KiB) it uses meanwhile
 * to hold a step's pages: 2048 pages of 4 KiB, with room for the pages moved. Fewer pages a
 * step cost more in all (each step has its own overhead: 256 took three times as long). */
#define RECLAIM_STEP      "2048"
#define RECLAIM_CACHE_KIB "32768"
/* The page cache (KiB) of a training session's store (nl_store_lean_cache): a run's writes go
 * through it (a ResNet-18 checkpoint, 90 MB, spills every 64 pages instead of every 500), and it
 * stays out of the resident set at the run's peak. */
#define LEAN_CACHE_KIB "256"

#define NOW_UTC "(strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))"

/* Cluster runs: what each worker reported for each step (version 2). */
#define WORKER_STEPS_SQL                                                                           \
    "CREATE TABLE worker_steps (\n"                                                                \
    "    run             INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,\n"                \
    "    step            INTEGER NOT NULL,        -- from 1, over the whole run\n"                 \
    "    worker          INTEGER NOT NULL,        -- rank, from 0\n"                               \
    "    host            TEXT NOT NULL,\n"                                                         \
    "    epoch           INTEGER NOT NULL,\n"                                                      \
    "    samples         INTEGER NOT NULL,\n"                                                      \
    "    loss            REAL,                    -- mean over the worker's samples\n"             \
    "    compute_seconds REAL,\n"                                                                  \
    "    comm_seconds    REAL,\n"                                                                  \
    "    bytes_sent      INTEGER NOT NULL,\n"                                                      \
    "    PRIMARY KEY (run, step, worker)\n"                                                        \
    ") WITHOUT ROWID;\n"

/* The process training a run (version 4; see core/store/runs.c): its host, pid and start (clock
 * ticks after boot, from /proc/PID/stat), NULL when none; the time its owner last said it lives. */
/* Regression runs (version 5; see include/nnlab/trainer.h): a run's task, and the MAE and RMSE
 * beside the accuracy columns, which hold R^2 for a regression run. */
static const char regression_sql[] =
    "ALTER TABLE runs ADD COLUMN task TEXT NOT NULL DEFAULT 'classification';\n"
    "ALTER TABLE runs ADD COLUMN val_mae REAL;\n"
    "ALTER TABLE runs ADD COLUMN val_rmse REAL;\n"
    "ALTER TABLE runs ADD COLUMN test_mae REAL;\n"
    "ALTER TABLE runs ADD COLUMN test_rmse REAL;\n"
    "ALTER TABLE epochs ADD COLUMN train_mae REAL;\n"
    "ALTER TABLE epochs ADD COLUMN train_rmse REAL;\n"
    "ALTER TABLE epochs ADD COLUMN val_mae REAL;\n"
    "ALTER TABLE epochs ADD COLUMN val_rmse REAL;\n";

static const char run_owner_sql[] = "ALTER TABLE runs ADD COLUMN owner_host TEXT;\n"
                                    "ALTER TABLE runs ADD COLUMN owner_pid INTEGER;\n"
                                    "ALTER TABLE runs ADD COLUMN owner_start INTEGER;\n"
                                    "ALTER TABLE runs ADD COLUMN heartbeat TEXT;\n";

/* Text datasets: the vocabulary (version 6; see core/import/textdata.c). Token ids are the ids
 * here: 0 is padding ("<pad>", count 0), 1 stands for every word left out of the vocabulary
 * ("<unk>", count: the train split's occurrences of those words), 2.. the --vocab K most frequent
 * words of the train split by falling count (ties in byte order of the word), count their
 * occurrences. */
#define VOCAB_SQL                                                                                  \
    "CREATE TABLE vocab (\n"                                                                       \
    "    dataset INTEGER NOT NULL REFERENCES datasets(id) ON DELETE CASCADE,\n"                    \
    "    id      INTEGER NOT NULL,                -- the token id, from 0\n"                       \
    "    word    TEXT NOT NULL,                   -- lower-cased UTF-8\n"                          \
    "    count   INTEGER NOT NULL,                -- occurrences in the train split\n"             \
    "    PRIMARY KEY (dataset, id)\n"                                                              \
    ") WITHOUT ROWID;\n"

/* Cluster runs: each lost worker and what the run did about it (version 3). */
#define RECOVERIES_SQL                                                                             \
    "CREATE TABLE recoveries (\n"                                                                  \
    "    run      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,\n"                       \
    "    seq      INTEGER NOT NULL,               -- from 1, in the order they happened\n"         \
    "    step     INTEGER NOT NULL,               -- completed steps the run went on from\n"       \
    "    host     TEXT NOT NULL,\n"                                                                \
    "    what     TEXT NOT NULL,                  -- how it was lost\n"                            \
    "    action   TEXT NOT NULL,                  -- 'restarted' or 'dropped'\n"                   \
    "    restarts INTEGER NOT NULL,               -- restarts used in the run so far\n"            \
    "    workers  INTEGER NOT NULL,               -- workers after it\n"                           \
    "    created  TEXT DEFAULT " NOW_UTC ",\n"                                                     \
    "    PRIMARY KEY (run, seq)\n"                                                                 \
    ");\n"

/* One dataset's samples (version 7), samples_ID for datasets.id ID; the index serves the counts
 * per split without reading the samples. */
#define SAMPLES_SQL                                                                                \
    "CREATE TABLE samples_%lld (\n"                                                                \
    "    idx     INTEGER PRIMARY KEY,             -- from 0, across the splits\n"                  \
    "    split   INTEGER NOT NULL,                -- 0 train, 1 val, 2 test\n"                     \
    "    label   INTEGER NOT NULL,\n"                                                              \
    "    data    BLOB NOT NULL                    -- one sample, (C, H, W)\n"                      \
    ");\n"
#define SAMPLES_INDEX_SQL "CREATE INDEX samples_%lld_by_split ON samples_%lld (split, idx);\n"

static const char schema_sql[] =
    "CREATE TABLE datasets (\n"
    "    id            INTEGER PRIMARY KEY,\n"
    "    name          TEXT NOT NULL UNIQUE,\n"
    "    kind          TEXT NOT NULL,            -- 'idx', 'png' or 'csv'\n"
    "    source        TEXT NOT NULL,            -- the files or folder imported from\n"
    "    channels      INTEGER NOT NULL,\n"
    "    height        INTEGER NOT NULL,\n"
    "    width         INTEGER NOT NULL,\n"
    "    dtype         INTEGER NOT NULL,         -- 0 uint8, 1 float32\n"
    "    nclasses      INTEGER NOT NULL,\n"
    "    norm_mean     BLOB,                     -- float32 (channels)\n"
    "    norm_std      BLOB,                     -- float32 (channels)\n"
    "    preprocessing TEXT NOT NULL DEFAULT '{}', -- JSON\n"
    "    created       TEXT NOT NULL DEFAULT " NOW_UTC "\n"
    ");\n"
    "CREATE TABLE classes (\n"
    "    dataset INTEGER NOT NULL REFERENCES datasets(id) ON DELETE CASCADE,\n"
    "    label   INTEGER NOT NULL,                -- 0 .. nclasses - 1\n"
    "    name    TEXT NOT NULL,\n"
    "    PRIMARY KEY (dataset, label)\n"
    ");\n"
    "CREATE TABLE runs (\n"
    "    id            INTEGER PRIMARY KEY,\n"
    "    name          TEXT NOT NULL UNIQUE,\n"
    "    dataset       TEXT NOT NULL,            -- datasets.name\n"
    "    model         TEXT NOT NULL,            -- the model's name or spec file\n"
    "    spec          TEXT NOT NULL,            -- the model spec's text\n"
    "    settings      TEXT NOT NULL,            -- JSON: epochs, batch, optimizer, seed...\n"
    "    status        TEXT NOT NULL,\n"
    "    created       TEXT DEFAULT " NOW_UTC ",\n"
    "    finished      TEXT,\n"
    "    epochs_done   INTEGER NOT NULL DEFAULT 0,\n"
    "    val_accuracy  REAL,\n"
    "    test_accuracy REAL,\n"
    "    seconds       REAL\n"
    ");\n"
    "CREATE TABLE epochs (\n"
    "    run               INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,\n"
    "    epoch             INTEGER NOT NULL,      -- from 1\n"
    "    train_loss        REAL,\n"
    "    train_accuracy    REAL,\n"
    "    val_loss          REAL,\n"
    "    val_accuracy      REAL,\n"
    "    seconds           REAL,\n"
    "    images_per_second REAL,\n"
    "    PRIMARY KEY (run, epoch)\n"
    ");\n"
    "CREATE TABLE checkpoints (\n"
    "    run       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,\n"
    "    epoch     INTEGER NOT NULL,\n"
    "    iteration INTEGER NOT NULL,\n"
    "    params    BLOB NOT NULL,                 -- the flat parameter buffer, float32\n"
    "    optim     BLOB,                          -- optimizer state\n"
    "    rng       BLOB,                          -- RNG state\n"
    "    created   TEXT DEFAULT " NOW_UTC ",\n"
    "    PRIMARY KEY (run, iteration)\n"
    ");\n" WORKER_STEPS_SQL RECOVERIES_SQL; /* then run_owner_sql and VOCAB_SQL */

struct nl_store {
    sqlite3 *db;
    char *path;
    int readonly;
};

sqlite3 *nl_store_sqlite(struct nl_store *s)
{
    return s->db;
}

const char *nl_store_path(const struct nl_store *s)
{
    return s->path;
}

int nl_store_db_error(struct nl_store *s, struct nl_error *err, const char *what)
{
    int code = sqlite3_errcode(s->db);
    const char *hint = code == SQLITE_BUSY || code == SQLITE_LOCKED
                           ? " (another nnlab is using the database; try again when it is done)"
                       : code == SQLITE_FULL
                           ? " (the disk is full; free space on it, nnlab rm a dataset, or use "
                             "a store on another disk with --db PATH)"
                           : "";

    if (what)
        return nl_error_set(err, NL_EDB, "%s: %s: %s%s", s->path, what, sqlite3_errmsg(s->db),
                            hint);
    return nl_error_set(err, NL_EDB, "%s: %s%s", s->path, sqlite3_errmsg(s->db), hint);
}

int nl_store_exec(struct nl_store *s, const char *sql, struct nl_error *err)
{
    if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, NULL);
    return 0;
}

int nl_store_prepare(struct nl_store *s, sqlite3_stmt **st, const char *sql, struct nl_error *err)
{
    *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK) {
        *st = NULL;
        return nl_store_db_error(s, err, NULL);
    }
    return 0;
}

int nl_store_preparef(struct nl_store *s, sqlite3_stmt **st, struct nl_error *err, const char *fmt,
                      ...)
{
    char sql[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof sql)
        abort(); /* the callers' statements are short */
    return nl_store_prepare(s, st, sql, err);
}

/* Runs one statement built from fmt that returns no rows. */
static int execf(struct nl_store *s, struct nl_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int execf(struct nl_store *s, struct nl_error *err, const char *fmt, ...)
{
    char sql[1024];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof sql)
        abort();
    return nl_store_exec(s, sql, err);
}

int nl_store_create_samples(struct nl_store *s, sqlite3_int64 id, struct nl_error *err)
{
    long long i = (long long)id;

    return execf(s, err, SAMPLES_SQL SAMPLES_INDEX_SQL, i, i, i);
}

int nl_store_drop_dataset(struct nl_store *s, sqlite3_int64 id, struct nl_error *err)
{
    int rc = execf(s, err, "DROP TABLE IF EXISTS samples_%lld", (long long)id);

    if (rc == 0)
        rc = execf(s, err, "DELETE FROM datasets WHERE id = %lld", (long long)id);
    if (rc == 0 && sqlite3_changes(s->db) == 0)
        return 1;
    return rc;
}

/* Version 6 -> 7: each dataset's rows of the shared samples table move to its own table, in idx
 * order, and the shared table goes. Inside the upgrade's transaction; a store without the shared
 * table (a test's older version made from a newer store) has nothing to move. */
static int split_samples(struct nl_store *s, struct nl_error *err)
{
    sqlite3_int64 *ids = NULL;
    size_t n = 0, cap = 0;
    sqlite3_stmt *st;
    int rc, step, shared = 0;

    rc = nl_store_prepare(
        s, &st, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'samples'",
        err);
    if (rc)
        return rc;
    if (sqlite3_step(st) == SQLITE_ROW)
        shared = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (!shared)
        return 0;
    rc = nl_store_prepare(s, &st, "SELECT id FROM datasets ORDER BY id", err);
    if (rc)
        return rc;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        sqlite3_int64 *more = nl_grow(ids, &cap, n + 1, sizeof *ids, 16);
        if (!more) {
            rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory upgrading the store", s->path);
            break;
        }
        ids = more;
        ids[n++] = sqlite3_column_int64(st, 0);
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = nl_store_db_error(s, err, "upgrading the store");
    sqlite3_finalize(st);
    for (size_t k = 0; k < n && rc == 0; k++) {
        long long i = (long long)ids[k];
        rc = execf(s, err, SAMPLES_SQL, i);
        if (rc == 0)
            rc = execf(s, err,
                       "INSERT INTO samples_%lld (idx, split, label, data) SELECT idx, split, "
                       "label, data FROM samples WHERE dataset = %lld ORDER BY idx",
                       i, i);
        if (rc == 0)
            rc = execf(s, err, SAMPLES_INDEX_SQL, i, i);
    }
    nl_free(ids);
    if (rc == 0)
        rc = nl_store_exec(s, "DROP TABLE samples", err);
    return rc;
}

int nl_store_begin(struct nl_store *s, struct nl_error *err)
{
    if (s->readonly)
        return nl_error_set(err, NL_EDB,
                            "%s: the store is open read-only (the file or its folder is not "
                            "writable)",
                            s->path);
    return nl_store_exec(s, "BEGIN IMMEDIATE", err);
}

int nl_store_commit(struct nl_store *s, struct nl_error *err)
{
    if (sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        int rc = nl_store_db_error(s, err, "commit");
        nl_store_rollback(s);
        return rc;
    }
    return 0;
}

void nl_store_rollback(struct nl_store *s)
{
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

int nl_store_check_name(const char *what, const char *name, struct nl_error *err)
{
    size_t n = name ? strlen(name) : 0;

    if (n == 0)
        return nl_error_set(err, NL_EINVAL, "a %s name must not be empty", what);
    if (n > 100)
        return nl_error_set(err, NL_EINVAL, "%s name '%.40s...' is longer than 100 bytes", what,
                            name);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch < 0x20 || ch == 0x7f)
            return nl_error_set(err, NL_EINVAL, "%s name has a control character (byte %zu)", what,
                                i + 1);
        if (ch == 0xc2 && (unsigned char)name[i + 1] >= 0x80 && (unsigned char)name[i + 1] <= 0x9f)
            return nl_error_set(err, NL_EINVAL, "%s name has a control character (byte %zu)", what,
                                i + 1);
        if (ch == '/')
            return nl_error_set(err, NL_EINVAL, "%s name '%s' must not contain '/'", what, name);
    }
    if (!nl_utf8_valid(name))
        return nl_error_set(err, NL_EINVAL, "%s name is not valid UTF-8", what);
    if (name[0] == '-' || name[0] == ' ' || name[n - 1] == ' ')
        return nl_error_set(err, NL_EINVAL,
                            "%s name '%s' must not start with '-' or start or end with a space",
                            what, name);
    return 0;
}

/* mkdir -p of the folder that will hold path (everything before its last '/'). */
static int make_parent_dirs(const char *path, struct nl_error *err)
{
    const char *slash = strrchr(path, '/');
    size_t n;
    char *dir;
    int rc = 0;

    if (!slash || slash == path)
        return 0;
    n = (size_t)(slash - path);
    dir = nl_malloc(n + 1);
    if (!dir)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    memcpy(dir, path, n);
    dir[n] = '\0';
    for (size_t i = 1; i <= n && rc == 0; i++) {
        struct stat st;
        if (dir[i] != '/' && dir[i] != '\0')
            continue;
        dir[i] = '\0';
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            rc = nl_error_set(err, errno == ENOENT ? NL_ENOENT : NL_EIO,
                              "%s: cannot create folder: %s", dir, strerror(errno));
        else if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            rc = nl_error_set(err, NL_EIO, "%s: not a folder (needed for %s)", dir, path);
        if (i < n)
            dir[i] = '/';
    }
    nl_free(dir);
    return rc;
}

static int query_int(struct nl_store *s, const char *sql, int *out, struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc = nl_store_prepare(s, &st, sql, err);

    if (rc)
        return rc;
    if (sqlite3_step(st) != SQLITE_ROW) {
        rc = nl_store_db_error(s, err, NULL);
    } else {
        *out = sqlite3_column_int(st, 0);
    }
    sqlite3_finalize(st);
    return rc;
}

/* Creates the schema in an empty database and checks the version of an existing one, in one
 * transaction. *moved: whether an upgrade moved the samples to a table per dataset (version 6 or
 * older), leaving the shared table's pages free. */
static int ensure_schema(struct nl_store *s, int *moved, struct nl_error *err)
{
    int version = 0, ntables = 0, rc;
    char sql[64];

    /* Up to date (the common case): no write lock. */
    rc = query_int(s, "PRAGMA user_version", &version, err);
    if (rc)
        return rc;
    if (version == NL_STORE_SCHEMA_VERSION)
        return 0;
    if (s->readonly && version > NL_STORE_SCHEMA_VERSION)
        return nl_error_set(err, NL_EFORMAT,
                            "%s: the database has schema version %d, newer than this nnlab "
                            "understands (%d); use a newer nnlab",
                            s->path, version, NL_STORE_SCHEMA_VERSION);
    if (s->readonly)
        return nl_error_set(err, NL_EFORMAT,
                            "%s: the store has schema version %d and is read-only here; this "
                            "nnlab reads version %d (its owner upgrades it by running any nnlab "
                            "command that writes, such as nnlab import)",
                            s->path, version, NL_STORE_SCHEMA_VERSION);
    rc = nl_store_begin(s, err);
    if (rc)
        return rc;
    rc = query_int(s, "PRAGMA user_version", &version, err);
    if (rc == 0 && version > NL_STORE_SCHEMA_VERSION)
        rc = nl_error_set(err, NL_EFORMAT,
                          "%s: the database has schema version %d, newer than this nnlab "
                          "understands (%d); use a newer nnlab or another database (--db PATH)",
                          s->path, version, NL_STORE_SCHEMA_VERSION);
    if (rc == 0 && version == 0)
        rc = query_int(s, "SELECT count(*) FROM sqlite_master", &ntables, err);
    if (rc == 0 && version == 0 && ntables > 0)
        rc = nl_error_set(err, NL_EFORMAT,
                          "%s: not an nnlab database (it has tables but no nnlab schema "
                          "version); use another database (--db PATH)",
                          s->path);
    if (rc == 0 && version == 0) {
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", NL_STORE_SCHEMA_VERSION);
        rc = nl_store_exec(s, schema_sql, err);
        if (rc == 0)
            rc = nl_store_exec(s, run_owner_sql, err);
        if (rc == 0)
            rc = nl_store_exec(s, regression_sql, err);
        if (rc == 0)
            rc = nl_store_exec(s, VOCAB_SQL, err);
        if (rc == 0)
            rc = nl_store_exec(s, sql, err);
    } else if (rc == 0 && version < NL_STORE_SCHEMA_VERSION) {
        /* Version 1 lacked worker_steps, 2 recoveries, 3 the runs' owners, 4 the regression
         * columns, 5 vocab; 6 kept every dataset's samples in one table. */
        if (version < 2)
            rc = nl_store_exec(s, WORKER_STEPS_SQL, err);
        if (rc == 0 && version < 3)
            rc = nl_store_exec(s, RECOVERIES_SQL, err);
        if (rc == 0 && version < 4)
            rc = nl_store_exec(s, run_owner_sql, err);
        if (rc == 0 && version < 5)
            rc = nl_store_exec(s, regression_sql, err);
        if (rc == 0 && version < 6)
            rc = nl_store_exec(s, VOCAB_SQL, err);
        if (rc == 0 && version < 7) {
            rc = split_samples(s, err);
            *moved = rc == 0;
        }
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", NL_STORE_SCHEMA_VERSION);
        if (rc == 0)
            rc = nl_store_exec(s, sql, err);
    }
    if (rc) {
        nl_store_rollback(s);
        return rc;
    }
    return nl_store_commit(s, err);
}

/* "file:PATH?immutable=1" with PATH percent-encoded where a URI needs it; NULL when out of
 * memory. For a read-only store in a folder where SQLite cannot create the WAL index. */
static char *immutable_uri(const char *path)
{
    static const char suffix[] = "?immutable=1";
    char *uri = nl_malloc(5 + 3 * strlen(path) + sizeof suffix);
    char *o = uri;

    if (!uri)
        return NULL;
    memcpy(o, "file:", 5);
    o += 5;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (*p == '%' || *p == '?' || *p == '#' || *p < 0x20 || *p >= 0x7f) {
            snprintf(o, 4, "%%%02X", *p);
            o += 3;
        } else {
            *o++ = (char)*p;
        }
    }
    memcpy(o, suffix, sizeof suffix);
    return uri;
}

/* The name of a dataset being imported by this process: "\x1fimport HOST PID NAME". */
static int staging_prefix(char *buf, size_t size, long pid)
{
    char host[256];

    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *h = host; *h; h++)
        if (*h == ' ')
            *h = '_';
    return snprintf(buf, size, "\x1fimport %s %ld ", host, pid);
}

int nl_store_staging_name(char *buf, size_t size, const char *name)
{
    int n = staging_prefix(buf, size, (long)getpid());

    if (n < 0 || (size_t)n >= size ||
        snprintf(buf + n, size - (size_t)n, "%s", name) >= (int)(size - (size_t)n))
        return -1;
    return 0;
}

/* Removes the staged imports of this host whose process is gone. Takes the write lock only when
 * there is one. */
static int clean_staging(struct nl_store *s, struct nl_error *err)
{
    sqlite3_stmt *st;
    sqlite3_int64 dead[16];
    int ndead = 0, rc;

    rc = nl_store_prepare(s, &st,
                          "SELECT id, name FROM datasets WHERE substr(name, 1, 1) = char(31)", err);
    if (rc)
        return rc;
    while (sqlite3_step(st) == SQLITE_ROW && ndead < 16) {
        const char *name = (const char *)sqlite3_column_text(st, 1);
        char prefix[320];
        const char *p;
        long pid;
        /* "\x1fimport HOST PID NAME": HOST has no space; NAME may have. */
        if (!name || strncmp(name, "\x1fimport ", 8) != 0)
            continue;
        p = strchr(name + 8, ' ');
        if (!p)
            continue;
        pid = strtol(p + 1, NULL, 10);
        if (pid <= 0 || staging_prefix(prefix, sizeof prefix, pid) < 0 ||
            strncmp(name, prefix, strlen(prefix)) != 0)
            continue; /* another host's, or not ours to judge */
        if (kill((pid_t)pid, 0) == 0 || errno == EPERM)
            continue; /* its process is still there */
        dead[ndead++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    if (ndead == 0)
        return 0;
    rc = nl_store_begin(s, err);
    for (int i = 0; i < ndead && rc == 0; i++) {
        int dropped = nl_store_drop_dataset(s, dead[i], err);
        if (dropped < 0)
            rc = dropped;
    }
    if (rc) {
        nl_store_rollback(s);
        return rc;
    }
    return nl_store_commit(s, err);
}

/* Waiting for another connection's lock: short, even sleeps (SQLite's own handler backs off to
 * 100 ms, and then loses every race against a writer that pauses between its transactions for
 * less), for NL_STORE_BUSY_MS in all. */
static int busy_wait(void *ud, int count)
{
    struct timespec ts = {0, BUSY_SLEEP_MS * 1000000L};

    (void)ud;
    if ((long)count * BUSY_SLEEP_MS >= NL_STORE_BUSY_MS)
        return 0;
    nanosleep(&ts, NULL);
    return 1;
}

static int store_open(struct nl_store **out, const char *path, int mode, struct nl_error *err)
{
    struct nl_store *s;
    int rc, flags = SQLITE_OPEN_FULLMUTEX, moved = 0;

    *out = NULL;
    if (!path || !*path)
        return nl_error_set(err, NL_EINVAL, "no database path given");
    if (mode == 0 && strcmp(path, ":memory:") != 0) {
        rc = make_parent_dirs(path, err);
        if (rc)
            return rc;
    }
    s = nl_calloc(1, sizeof *s);
    if (!s || !(s->path = nl_strdup(path))) {
        nl_free(s);
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    }
    s->readonly = mode == 2;
    flags |= mode == 0   ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
             : mode == 1 ? SQLITE_OPEN_READWRITE
                         : SQLITE_OPEN_READONLY;
    if (sqlite3_open_v2(path, &s->db, flags, NULL) != SQLITE_OK) {
        int sys = s->db ? sqlite3_system_errno(s->db) : 0;
        if (!s->db)
            rc = nl_error_set(err, NL_ENOMEM, "%s: cannot open database: out of memory", path);
        else if (sys)
            rc = nl_error_set(err, sys == ENOENT ? NL_ENOENT : NL_EDB, "%s: %s: %s", path,
                              sqlite3_errmsg(s->db), strerror(sys));
        else
            rc = nl_store_db_error(s, err, NULL);
        nl_store_close(s);
        return rc;
    }
    /* SQLite opens a file it may not write read-only without a word, and says so only at the
     * first write ("attempt to write a readonly database"): a command that writes is told now,
     * in a sentence. */
    if (mode != 2 && sqlite3_db_readonly(s->db, "main") == 1) {
        rc = nl_error_set(err, NL_EDB,
                          "%s: this store is read-only here (the file, its folder or its file "
                          "system may not be written by this user), and this needs to write "
                          "to it; listing, showing and evaluating still work",
                          path);
        nl_store_close(s);
        return rc;
    }
    sqlite3_busy_handler(s->db, busy_wait, NULL);
    /* The WAL file stays when the last connection closes (see "Locks lost" above). */
    int persist = 1;
    sqlite3_file_control(s->db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
    rc = nl_store_exec(s, "PRAGMA foreign_keys = ON", err);
    if (rc == 0 && s->readonly) {
        /* A WAL database in a folder SQLite may not write to has no WAL index to share: read
         * it as an immutable file (nobody can be writing it there either). */
        int version;
        if (query_int(s, "PRAGMA user_version", &version, err) < 0) {
            char *uri = immutable_uri(path);
            sqlite3_close_v2(s->db);
            s->db = NULL;
            if (!uri)
                rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
            else if (sqlite3_open_v2(uri, &s->db, flags | SQLITE_OPEN_URI, NULL) != SQLITE_OK)
                rc = s->db ? nl_store_db_error(s, err, NULL)
                           : nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
            else
                rc = nl_store_exec(s, "PRAGMA foreign_keys = ON", err);
            nl_free(uri);
        }
    }
    if (rc == 0 && mode == 0) {
        /* A new file, before its first page: pages freed by rm can be given back
         * (nl_store_reclaim). */
        int pages = -1;
        rc = query_int(s, "PRAGMA page_count", &pages, err);
        if (rc == 0 && pages == 0)
            rc = nl_store_exec(s, "PRAGMA auto_vacuum = INCREMENTAL", err);
    }
    if (rc == 0 && !s->readonly) {
        char mode_now[16] = "";
        sqlite3_stmt *st;
        /* WAL, set once for the file: asking again would take a lock. In-memory databases
         * answer "memory"; both are fine. */
        rc = nl_store_prepare(s, &st, "PRAGMA journal_mode", err);
        if (rc == 0) {
            if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
                snprintf(mode_now, sizeof mode_now, "%s", sqlite3_column_text(st, 0));
            sqlite3_finalize(st);
        }
        if (rc == 0 && strcmp(mode_now, "wal") != 0 && strcmp(mode_now, "memory") != 0) {
            rc = nl_store_prepare(s, &st, "PRAGMA journal_mode = WAL", err);
            if (rc == 0) {
                if (sqlite3_step(st) != SQLITE_ROW)
                    rc = nl_store_db_error(s, err, NULL);
                sqlite3_finalize(st);
            }
        }
    }
    /* WAL with synchronous NORMAL: a crash loses at most the last transactions, never
     * consistency. */
    if (rc == 0 && !s->readonly)
        rc = nl_store_exec(s, "PRAGMA synchronous = NORMAL", err);
    if (rc == 0 && !s->readonly)
        rc = nl_store_exec(s, "PRAGMA secure_delete = FAST", err);
    /* The kept WAL file (see "Locks lost") is cut back to 4 MiB when a checkpoint restarts it
     * and to nothing when the last connection closes: an import's gigabyte does not stay. */
    if (rc == 0 && !s->readonly)
        rc = nl_store_exec(s, "PRAGMA journal_size_limit = 4194304", err);
    if (rc == 0)
        rc = ensure_schema(s, &moved, err);
    /* The shared samples table an upgrade emptied: its pages back to the file system (best
     * effort, as after a removal), or the file would keep twice its size. */
    if (rc == 0 && moved) {
        struct nl_error ignored = {0};
        long long unused;
        (void)nl_store_reclaim(s, &unused, &ignored);
    }
    /* Writers only: commands that read take no write lock. Best effort: a store on a full disk
     * must still open, so that nnlab rm can free it; what is left goes at a later open. */
    if (rc == 0 && mode == 0) {
        struct nl_error ignored = {0};
        clean_staging(s, &ignored);
    }
    if (rc) {
        nl_store_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

int nl_store_open(struct nl_store **out, const char *path, struct nl_error *err)
{
    return store_open(out, path, 0, err);
}

/* Whether this process may write the file and create files (the WAL) beside it. */
static int writable(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];

    if (access(path, W_OK) != 0)
        return 0;
    if (!slash)
        return access(".", W_OK) == 0;
    if ((size_t)(slash - path) >= sizeof dir)
        return 1;
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
    return access(slash == path ? "/" : dir, W_OK) == 0;
}

int nl_store_open_read(struct nl_store **out, const char *path, struct nl_error *err)
{
    struct stat st;

    *out = NULL;
    if (!path || !*path)
        return nl_error_set(err, NL_EINVAL, "no database path given");
    if (strcmp(path, ":memory:") == 0)
        return store_open(out, path, 0, err);
    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return nl_error_set(err, NL_ENOENT,
                                "%s: there is no store here yet (nnlab import or nnlab demo "
                                "creates one; --db PATH names another)",
                                path);
        return nl_error_set(err, NL_EIO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return nl_error_set(err, NL_EINVAL, "%s: not a store (not a regular file)", path);
    return store_open(out, path, writable(path) ? 1 : 2, err);
}

int nl_store_readonly(const struct nl_store *s)
{
    return s->readonly;
}

int nl_store_lean_cache(struct nl_store *s, struct nl_error *err)
{
    int rc = nl_store_exec(s, "PRAGMA cache_size = -" LEAN_CACHE_KIB, err);

    if (rc == 0) {
        sqlite3_db_release_memory(s->db);
        nl_alloc_trim();
    }
    return rc;
}

int nl_store_reclaim(struct nl_store *s, long long *unused, struct nl_error *err)
{
    int mode = 0, free_pages = 0, page_size = 0, cache = 0;
    int rc = query_int(s, "PRAGMA auto_vacuum", &mode, err);
    char sql[64];

    *unused = 0;
    if (rc == 0)
        rc = query_int(s, "PRAGMA freelist_count", &free_pages, err);
    if (rc == 0)
        rc = query_int(s, "PRAGMA cache_size", &cache, err);
    if (rc == 0 && mode == 2 && !s->readonly && free_pages > 0)
        rc = nl_store_exec(s, "PRAGMA cache_size = -" RECLAIM_CACHE_KIB, err);
    /* RECLAIM_STEP pages at a time, each step its own transaction: taking a free page off the
     * list makes it dirty, and in one long transaction SQLite spills the dirty pages to the WAL
     * once its cache is full, so giving back a removed dataset wrote its whole size into the WAL
     * (and again at the checkpoint); a step's pages stay in the cache and, lying past the
     * truncated end, are never written. A writer waiting for the lock gets it between steps. */
    for (int before = -1;
         rc == 0 && mode == 2 && !s->readonly && free_pages > 0 && free_pages != before;) {
        before = free_pages;
        rc = nl_store_exec(s, "PRAGMA incremental_vacuum(" RECLAIM_STEP ")", err);
        if (rc == 0)
            rc = query_int(s, "PRAGMA freelist_count", &free_pages, err);
    }
    snprintf(sql, sizeof sql, "PRAGMA cache_size = %d", cache);
    if (cache != 0)
        sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    if (rc == 0)
        rc = query_int(s, "PRAGMA page_size", &page_size, err);
    if (rc)
        return rc;
    *unused = (long long)free_pages * page_size;
    return 0;
}

void nl_store_close(struct nl_store *s)
{
    if (!s)
        return;
    sqlite3_close_v2(s->db);
    nl_free(s->path);
    nl_free(s);
}

int nl_store_default_path(char *buf, size_t size, struct nl_error *err)
{
    const char *xdg = getenv("XDG_DATA_HOME");
    const char *home = getenv("HOME");
    int n;

    /* The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored. */
    if (xdg && xdg[0] == '/')
        n = snprintf(buf, size, "%s/nnlab/nnlab.db", xdg);
    else if (home && home[0])
        n = snprintf(buf, size, "%s/.local/share/nnlab/nnlab.db", home);
    else
        return nl_error_set(err, NL_EINVAL,
                            "neither XDG_DATA_HOME nor HOME is set; give the database with "
                            "--db PATH");
    if (n < 0 || (size_t)n >= size)
        return nl_error_set(err, NL_EINVAL,
                            "the default database path is longer than %zu bytes; "
                            "give one with --db PATH",
                            size ? size - 1 : 0);
    return 0;
}
