/* Runs, epochs and checkpoints in the store (tables defined in core/store/store.c).
 *
 * Checkpoint blobs: params is the flat parameter vector as float32 in the machine's byte order
 * (little-endian on every platform nnlab runs on), its length checked against the model on load;
 * optim is the optimizer's state arrays one after another, same encoding, the step count being
 * the row's iteration; rng is the 32-byte state of the data-order generator.
 * A checkpoint row is inserted with zeroblobs for the three and NULL for created, then its blobs
 * are written in place (sqlite3_blob_write): a row that ends in zeroblobs and NULLs is the one
 * kind SQLite stores without building it in memory, which would take as much again as the
 * weights and the optimizer state together, at the peak of a run's memory.
 *
 * Owners. A run being trained has one owner, the process training it: runs.owner_host,
 * owner_pid and owner_start (the process's start in clock ticks after boot, field 22 of
 * /proc/PID/stat, which tells it from a later process given the same pid), and a heartbeat the
 * owner writes at least every NL_RUN_HEARTBEAT_SECONDS while it trains. nl_run_create records
 * its caller as the owner; nl_run_reopen takes a run over only when no live process owns it
 * (NL_EBUSY naming the holder otherwise); nl_run_finish writes only as the owner and clears it.
 * The owner lives while, on this host, its pid runs with the same start, and on another host
 * (a store on a shared file system) while its heartbeat is younger than
 * NL_RUN_OWNER_STALE_SECONDS. A run stored as running whose owner does not live reads back with
 * status "interrupted": it can be resumed. */
#include "nnlab/runs.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "store_internal.h"

static void copy_text(char *dst, size_t size, sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    snprintf(dst, size, "%s", t ? (const char *)t : "");
}

static double column_real(sqlite3_stmt *st, int col)
{
    return sqlite3_column_type(st, col) == SQLITE_NULL ? NAN : sqlite3_column_double(st, col);
}

static void bind_real(sqlite3_stmt *st, int col, double v)
{
    if (isfinite(v))
        sqlite3_bind_double(st, col, v);
    else
        sqlite3_bind_null(st, col);
}

/* ---- Owners ---- */

/* The start of process pid in clock ticks after boot; -1 when it does not run (or is unknown). */
static long long process_start(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* After the command's closing parenthesis: field 3 (state) ... field 22 (starttime). */
    const char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoll(p + 1, NULL, 10) : -1;
}

/* This process as an owner. */
static void self_owner(char *host, size_t size, long *pid, long long *start)
{
    if (gethostname(host, size) != 0)
        snprintf(host, size, "localhost");
    host[size - 1] = '\0';
    *pid = (long)getpid();
    *start = process_start(*pid);
}

/* Whether the owner recorded lives (see the top of the file); heartbeat_age in seconds, < 0 when
 * none was written. */
static int owner_lives(const char *host, long pid, long long start, double heartbeat_age)
{
    char me[256];
    long my_pid;
    long long my_start;

    if (!host[0] || pid <= 0)
        return 0;
    self_owner(me, sizeof me, &my_pid, &my_start);
    if (strcmp(host, me) != 0)
        return heartbeat_age >= 0 && heartbeat_age < NL_RUN_OWNER_STALE_SECONDS;
    if (kill((pid_t)pid, 0) != 0 && errno != EPERM)
        return 0;
    const long long now_start = process_start(pid);
    return now_start < 0 || now_start == start;
}

#define OWNER_COLUMNS                                                                              \
    "coalesce(owner_host, ''), coalesce(owner_pid, 0), coalesce(owner_start, -1), "                \
    "coalesce(CAST(strftime('%s', 'now') AS INTEGER) - CAST(strftime('%s', heartbeat) AS "         \
    "INTEGER), -1)"

/* Binds this process as the owner at parameters first .. first + 2 (host, pid, start). */
static void bind_self(sqlite3_stmt *st, int first)
{
    char host[256];
    long pid;
    long long start;

    self_owner(host, sizeof host, &pid, &start);
    sqlite3_bind_text(st, first, host, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, first + 1, pid);
    sqlite3_bind_int64(st, first + 2, start);
}

static const char run_columns[] = "id, name, dataset, model, status, created, "
                                  "coalesce(finished, ''), epochs_done, val_accuracy, "
                                  "test_accuracy, seconds, " OWNER_COLUMNS
                                  ", task = 'regression', val_mae, val_rmse, test_mae, test_rmse";
enum { RUN_COLUMNS = 20 };

static void read_info(sqlite3_stmt *st, struct nl_run_info *info)
{
    memset(info, 0, sizeof *info);
    info->id = sqlite3_column_int64(st, 0);
    copy_text(info->name, sizeof info->name, st, 1);
    copy_text(info->dataset, sizeof info->dataset, st, 2);
    copy_text(info->model, sizeof info->model, st, 3);
    copy_text(info->status, sizeof info->status, st, 4);
    copy_text(info->created, sizeof info->created, st, 5);
    copy_text(info->finished, sizeof info->finished, st, 6);
    info->epochs_done = sqlite3_column_int(st, 7);
    info->val_accuracy = column_real(st, 8);
    info->test_accuracy = column_real(st, 9);
    info->seconds = column_real(st, 10);
    copy_text(info->owner_host, sizeof info->owner_host, st, 11);
    info->owner_pid = (long)sqlite3_column_int64(st, 12);
    const long long start = sqlite3_column_int64(st, 13);
    info->heartbeat_age = (double)sqlite3_column_int64(st, 14);
    info->regression = sqlite3_column_int(st, 15);
    info->val_mae = column_real(st, 16);
    info->val_rmse = column_real(st, 17);
    info->test_mae = column_real(st, 18);
    info->test_rmse = column_real(st, 19);
    if (strcmp(info->status, "running") == 0) {
        info->owner_lives =
            owner_lives(info->owner_host, info->owner_pid, start, info->heartbeat_age);
        if (!info->owner_lives)
            snprintf(info->status, sizeof info->status, "interrupted");
    }
}

static int name_taken(struct nl_store *s, const char *name, struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc;

    if (sqlite3_prepare_v2(nl_store_sqlite(s), "SELECT 1 FROM runs WHERE name = ?", -1, &st,
                           NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "looking up a run");
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return nl_store_db_error(s, err, "looking up a run");
    return rc == SQLITE_ROW;
}

/* The model's base name: "lenet" for "lenet" and for "specs/lenet.txt". */
static void model_stem(char *dst, size_t size, const char *model)
{
    const char *base = strrchr(model, '/');
    base = base ? base + 1 : model;
    snprintf(dst, size, "%s", base);
    char *dot = strchr(dst, '.');
    if (dot && dot != dst)
        *dot = '\0';
}

int nl_run_create(struct nl_store *s, const char *name, const char *dataset, const char *model,
                  const char *spec_text, const char *settings_json, struct nl_run_info *info,
                  struct nl_error *err)
{
    char chosen[128], stem[64];
    sqlite3_stmt *st;
    int rc;

    if (name && *name) {
        rc = nl_store_check_name("run", name, err);
        if (rc < 0)
            return rc;
        snprintf(chosen, sizeof chosen, "%s", name);
        rc = name_taken(s, chosen, err);
        if (rc < 0)
            return rc;
        if (rc)
            return nl_error_set(err, NL_EEXIST,
                                "a run named '%s' already exists; give another --name (nnlab "
                                "runs lists them)",
                                chosen);
    } else {
        model_stem(stem, sizeof stem, model);
        for (int n = 1;; n++) {
            snprintf(chosen, sizeof chosen, "%s-%s-%d", stem, dataset, n);
            rc = name_taken(s, chosen, err);
            if (rc < 0)
                return rc;
            if (!rc)
                break;
        }
    }
    if (sqlite3_prepare_v2(nl_store_sqlite(s),
                           "INSERT INTO runs (name, dataset, model, spec, settings, status, "
                           "created, owner_host, owner_pid, owner_start, heartbeat) VALUES (?, ?, "
                           "?, ?, ?, 'running', strftime('%Y-%m-%dT%H:%M:%SZ', 'now'), ?, ?, ?, "
                           "strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
                           -1, &st, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "recording a run");
    sqlite3_bind_text(st, 1, chosen, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, dataset, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, model, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, spec_text, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, settings_json, -1, SQLITE_TRANSIENT);
    bind_self(st, 6);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    /* Another process took the name between the check and the insert. */
    if (rc == SQLITE_CONSTRAINT &&
        sqlite3_extended_errcode(nl_store_sqlite(s)) == SQLITE_CONSTRAINT_UNIQUE)
        return nl_error_set(err, NL_EEXIST,
                            "a run named '%s' was just created by another nnlab; give another "
                            "--name",
                            chosen);
    if (rc != SQLITE_DONE)
        return nl_store_db_error(s, err, "recording a run");
    return nl_run_get(s, chosen, info, NULL, NULL, err);
}

/* Also used inside nl_run_save_checkpoint's transaction. */
int nl_run_record_epoch(struct nl_store *s, int64_t run, const struct nl_event *ev,
                        struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc;

    if (sqlite3_prepare_v2(nl_store_sqlite(s),
                           "INSERT OR REPLACE INTO epochs (run, epoch, train_loss, "
                           "train_accuracy, val_loss, val_accuracy, seconds, images_per_second, "
                           "train_mae, train_rmse, val_mae, val_rmse) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           -1, &st, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "recording an epoch");
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, ev->epoch);
    bind_real(st, 3, ev->loss);
    bind_real(st, 4, ev->accuracy);
    bind_real(st, 5, ev->val_loss);
    bind_real(st, 6, ev->val_accuracy);
    bind_real(st, 7, ev->seconds);
    bind_real(st, 8, ev->images_per_second);
    bind_real(st, 9, ev->regression ? ev->mae : NAN);
    bind_real(st, 10, ev->regression ? ev->rmse : NAN);
    bind_real(st, 11, ev->regression ? ev->val_mae : NAN);
    bind_real(st, 12, ev->regression ? ev->val_rmse : NAN);
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE)
        rc = nl_store_db_error(s, err, "recording an epoch");
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rc;
    if (!ev->regression)
        return 0;
    /* The run is a regression run from its first epoch on, for listings while it trains. */
    if (sqlite3_prepare_v2(nl_store_sqlite(s),
                           "UPDATE runs SET task = 'regression', val_mae = ?, val_rmse = ? "
                           "WHERE id = ?",
                           -1, &st, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "recording an epoch");
    bind_real(st, 1, ev->val_mae);
    bind_real(st, 2, ev->val_rmse);
    sqlite3_bind_int64(st, 3, run);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : nl_store_db_error(s, err, "recording an epoch");
}

int nl_run_record_worker_steps(struct nl_store *s, int64_t run, const struct nl_worker_step *rows,
                               size_t n, struct nl_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc;

    if (n == 0)
        return 0;
    rc = nl_store_exec(s, "BEGIN IMMEDIATE", err);
    if (rc < 0)
        return rc;
    if (sqlite3_prepare_v2(nl_store_sqlite(s),
                           "INSERT OR REPLACE INTO worker_steps (run, step, worker, host, epoch, "
                           "samples, loss, compute_seconds, comm_seconds, bytes_sent) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           -1, &st, NULL) != SQLITE_OK)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        const struct nl_worker_step *r = &rows[i];
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_int64(st, 2, r->step);
        sqlite3_bind_int(st, 3, r->worker);
        sqlite3_bind_text(st, 4, r->host ? r->host : "", -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 5, r->epoch);
        sqlite3_bind_int64(st, 6, r->samples);
        bind_real(st, 7, r->loss);
        bind_real(st, 8, r->compute_seconds);
        bind_real(st, 9, r->comm_seconds);
        sqlite3_bind_int64(st, 10, (sqlite3_int64)r->bytes_sent);
        if (sqlite3_step(st) != SQLITE_DONE)
            goto fail;
    }
    sqlite3_finalize(st);
    return nl_store_exec(s, "COMMIT", err);
fail:
    rc = nl_store_db_error(s, err, "recording the workers' steps");
    sqlite3_finalize(st);
    nl_store_exec(s, "ROLLBACK", NULL);
    return rc;
}

/* A local run's step as its one worker's report: its samples and seconds are the growth of the
 * epoch's totals since the previous step (both start again with each epoch). */
static int add_local_step(struct nl_worker_steps *b, const struct nl_event *ev,
                          struct nl_error *err)
{
    struct nl_worker_step *v = nl_grow(b->v, &b->cap, b->n + 1, sizeof *v, 1024);
    if (!v)
        return nl_error_set(err, NL_ENOMEM, "out of memory for the steps' metrics");
    b->v = v;
    const int same_epoch = ev->epoch == b->local_epoch && ev->iter > b->local_iter;
    const long samples = ev->samples - (same_epoch ? b->local_samples : 0);
    const double seconds = ev->seconds - (same_epoch ? b->local_seconds : 0);
    b->local_epoch = ev->epoch;
    b->local_iter = ev->iter;
    b->local_samples = ev->samples;
    b->local_seconds = ev->seconds;
    b->v[b->n++] = (struct nl_worker_step){
        .step = (long)(ev->epoch - 1) * ev->iters + ev->iter,
        .worker = 0,
        .host = b->host,
        .epoch = ev->epoch,
        .samples = samples > 0 ? samples : 0,
        .loss = ev->loss,
        .compute_seconds = seconds > 0 ? seconds : 0,
    };
    return 0;
}

int nl_worker_steps_add(struct nl_worker_steps *b, const struct nl_event *ev, struct nl_error *err)
{
    if (ev->nworkers <= 0)
        return ev->kind == NL_EVENT_ITER && ev->iters > 0 ? add_local_step(b, ev, err) : 0;
    struct nl_worker_step *v = nl_grow(b->v, &b->cap, b->n + (size_t)ev->nworkers, sizeof *v, 1024);
    if (!v)
        return nl_error_set(err, NL_ENOMEM, "out of memory for the workers' metrics");
    b->v = v;
    for (int i = 0; i < ev->nworkers; i++) {
        const struct nl_worker_metrics *w = &ev->workers[i];
        b->v[b->n++] = (struct nl_worker_step){
            .step = (long)(ev->epoch - 1) * ev->iters + ev->iter,
            .worker = i,
            .host = w->host,
            .epoch = ev->epoch,
            .samples = w->samples,
            .loss = w->loss,
            .compute_seconds = w->compute_seconds,
            .comm_seconds = w->comm_seconds,
            .bytes_sent = w->bytes_sent,
        };
    }
    return 0;
}

int nl_worker_steps_flush(struct nl_worker_steps *b, struct nl_store *s, int64_t run,
                          struct nl_error *err)
{
    int rc = nl_run_record_worker_steps(s, run, b->v, b->n, err);
    b->n = 0;
    return rc;
}

int nl_run_worker_steps(struct nl_store *s, int64_t run, long after, int max,
                        struct nl_run_worker_step **out, int *count, struct nl_error *err)
{
    sqlite3_stmt *st = NULL;
    struct nl_run_worker_step *v = NULL;
    size_t n = 0, cap = 0;
    int rc;

    *out = NULL;
    *count = 0;
    if (sqlite3_prepare_v2(nl_store_sqlite(s),
                           "SELECT step, worker, host, epoch, samples, loss, compute_seconds, "
                           "comm_seconds, bytes_sent FROM worker_steps WHERE run = ? AND step > ? "
                           "ORDER BY step, worker LIMIT ?",
                           -1, &st, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "reading the steps");
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int(st, 3, max > 0 ? max : -1);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct nl_run_worker_step *g = nl_grow(v, &cap, n + 1, sizeof *v, 256);
        if (!g) {
            sqlite3_finalize(st);
            nl_free(v);
            return nl_error_set(err, NL_ENOMEM, "out of memory for the steps");
        }
        v = g;
        struct nl_run_worker_step *r = &v[n++];
        const char *host = (const char *)sqlite3_column_text(st, 2);
        r->step = (long)sqlite3_column_int64(st, 0);
        r->worker = sqlite3_column_int(st, 1);
        snprintf(r->host, sizeof r->host, "%s", host ? host : "");
        r->epoch = sqlite3_column_int(st, 3);
        r->samples = (long)sqlite3_column_int64(st, 4);
        r->loss = column_real(st, 5);
        r->compute_seconds = column_real(st, 6);
        r->comm_seconds = column_real(st, 7);
        r->bytes_sent = (unsigned long long)sqlite3_column_int64(st, 8);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        nl_free(v);
        return nl_store_db_error(s, err, "reading the steps");
    }
    *out = v;
    *count = (int)n;
    return 0;
}

void nl_worker_steps_release(struct nl_worker_steps *b)
{
    nl_free(b->v);
    *b = (struct nl_worker_steps){0};
}

int nl_run_record_recovery(struct nl_store *s, int64_t run, const struct nl_recovery *r,
                           struct nl_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = nl_store_prepare(s, &st,
                              "INSERT INTO recoveries (run, seq, step, host, what, action, "
                              "restarts, workers) VALUES (?1, (SELECT coalesce(max(seq), 0) + 1 "
                              "FROM recoveries WHERE run = ?1), ?2, ?3, ?4, ?5, ?6, ?7)",
                              err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int64(st, 2, r->step);
    sqlite3_bind_text(st, 3, r->host ? r->host : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, r->what ? r->what : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, r->action ? r->action : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 6, r->restarts);
    sqlite3_bind_int(st, 7, r->workers);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : nl_store_db_error(s, err, "recording a recovery");
    sqlite3_finalize(st);
    return rc;
}

int nl_run_recoveries(struct nl_store *s, int64_t run, struct nl_run_recovery **out, int *count,
                      struct nl_error *err)
{
    sqlite3_stmt *st = NULL;
    struct nl_run_recovery *v = NULL;
    int n = 0;
    size_t cap = 0;
    int rc = nl_store_prepare(s, &st,
                              "SELECT step, host, what, action, restarts, workers, created "
                              "FROM recoveries WHERE run = ? ORDER BY seq",
                              err);
    *out = NULL;
    *count = 0;
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, run);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct nl_run_recovery *g = nl_grow(v, &cap, (size_t)n + 1, sizeof *v, 8);
        if (!g) {
            sqlite3_finalize(st);
            nl_free(v);
            return nl_error_set(err, NL_ENOMEM, "out of memory for a run's recoveries");
        }
        v = g;
        struct nl_run_recovery *r = &v[n++];
        r->step = (long)sqlite3_column_int64(st, 0);
        copy_text(r->host, sizeof r->host, st, 1);
        copy_text(r->what, sizeof r->what, st, 2);
        copy_text(r->action, sizeof r->action, st, 3);
        r->restarts = sqlite3_column_int(st, 4);
        r->workers = sqlite3_column_int(st, 5);
        copy_text(r->created, sizeof r->created, st, 6);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        nl_free(v);
        return nl_store_db_error(s, err, "reading a run's recoveries");
    }
    *out = v;
    *count = n;
    return 0;
}

/* Writes p[0, bytes) into column col of checkpoint row `row`, whose value there is a zeroblob
 * of that size. */
static int write_blob(sqlite3 *db, sqlite3_int64 row, const char *col, const void *p, size_t bytes)
{
    const size_t chunk = (size_t)1 << 30; /* sqlite3_blob_write takes an int */
    sqlite3_blob *b = NULL;

    if (bytes == 0)
        return SQLITE_OK;
    int rc = sqlite3_blob_open(db, "main", "checkpoints", col, row, 1, &b);
    for (size_t at = 0; rc == SQLITE_OK && at < bytes; at += chunk)
        rc = sqlite3_blob_write(b, (const char *)p + at,
                                (int)(bytes - at < chunk ? bytes - at : chunk), (int)at);
    int rc2 = sqlite3_blob_close(b);
    return rc != SQLITE_OK ? rc : rc2;
}

int nl_run_save_checkpoint(struct nl_store *s, int64_t run, const struct nl_checkpoint *cp,
                           struct nl_error *err)
{
    sqlite3 *db = nl_store_sqlite(s);
    sqlite3_stmt *st = NULL;
    const size_t pbytes = cp->nparams * sizeof(float), obytes = cp->optim_floats * sizeof(float);
    int rc = nl_store_exec(s, "BEGIN IMMEDIATE", err);

    if (rc < 0)
        return rc;
    /* Zeroblobs, written in place below (see the top of the file); created stays NULL, since
     * a value there would have SQLite build the row (nothing reads it; the epoch recorded with
     * the checkpoint has its time). */
    if (sqlite3_prepare_v2(db,
                           "INSERT OR REPLACE INTO checkpoints (run, epoch, iteration, params, "
                           "optim, rng, created) VALUES (?, ?, ?, zeroblob(?), ?, zeroblob(?), "
                           "NULL)",
                           -1, &st, NULL) != SQLITE_OK)
        goto fail;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, cp->epoch);
    sqlite3_bind_int64(st, 3, cp->iteration);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)pbytes);
    if (cp->optim_state)
        sqlite3_bind_zeroblob64(st, 5, obytes);
    else
        sqlite3_bind_null(st, 5);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)sizeof cp->rng->s);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    sqlite3_finalize(st);
    st = NULL;
    const sqlite3_int64 row = sqlite3_last_insert_rowid(db);
    if (write_blob(db, row, "params", cp->params, pbytes) != SQLITE_OK ||
        (cp->optim_state && write_blob(db, row, "optim", cp->optim_state, obytes) != SQLITE_OK) ||
        write_blob(db, row, "rng", cp->rng->s, sizeof cp->rng->s) != SQLITE_OK)
        goto fail;
    /* The epoch's metrics with its checkpoint: a crash leaves both or neither. */
    if (cp->metrics) {
        rc = nl_run_record_epoch(s, run, cp->metrics, err);
        if (rc < 0) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            return rc;
        }
    }
    if (sqlite3_prepare_v2(db,
                           "DELETE FROM checkpoints WHERE run = ?1 AND iteration NOT IN "
                           "(SELECT iteration FROM checkpoints WHERE run = ?1 "
                           "ORDER BY iteration DESC LIMIT 2)",
                           -1, &st, NULL) != SQLITE_OK)
        goto fail;
    sqlite3_bind_int64(st, 1, run);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "UPDATE runs SET epochs_done = ? WHERE id = ?", -1, &st, NULL) !=
        SQLITE_OK)
        goto fail;
    sqlite3_bind_int(st, 1, cp->epoch);
    sqlite3_bind_int64(st, 2, run);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    sqlite3_finalize(st);
    return nl_store_exec(s, "COMMIT", err);
fail:
    rc = nl_store_db_error(s, err, "saving a checkpoint");
    sqlite3_finalize(st);
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

int nl_run_finish(struct nl_store *s, int64_t run, const char *status,
                  const struct nl_train_result *res, struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc;

    if (sqlite3_prepare_v2(nl_store_sqlite(s),
                           "UPDATE runs SET status = ?, finished = "
                           "strftime('%Y-%m-%dT%H:%M:%SZ', 'now'), val_accuracy = ?, "
                           "test_accuracy = ?, seconds = ?, owner_host = NULL, owner_pid = NULL, "
                           "owner_start = NULL, task = CASE WHEN ?9 THEN 'regression' ELSE task "
                           "END, val_mae = coalesce(?10, val_mae), val_rmse = coalesce(?11, "
                           "val_rmse), test_mae = ?12, test_rmse = ?13 WHERE id = ?5 AND "
                           "owner_host = ?6 AND owner_pid = ?7 AND owner_start = ?8",
                           -1, &st, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "finishing a run");
    sqlite3_bind_text(st, 1, status, -1, SQLITE_TRANSIENT);
    bind_real(st, 2, res ? res->val_accuracy : NAN);
    bind_real(st, 3, res ? res->test_accuracy : NAN);
    bind_real(st, 4, res ? res->seconds : NAN);
    sqlite3_bind_int64(st, 5, run);
    bind_self(st, 6);
    const int reg = res && res->regression;
    sqlite3_bind_int(st, 9, reg);
    bind_real(st, 10, reg ? res->val_mae : NAN);
    bind_real(st, 11, reg ? res->val_rmse : NAN);
    bind_real(st, 12, reg ? res->test_mae : NAN);
    bind_real(st, 13, reg ? res->test_rmse : NAN);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return nl_store_db_error(s, err, "finishing a run");
    if (sqlite3_changes(nl_store_sqlite(s)) != 1)
        return nl_error_set(err, NL_EBUSY,
                            "%s: run %lld is no longer this process's to finish (removed, or "
                            "taken over by another process)",
                            nl_store_path(s), (long long)run);
    return 0;
}

int nl_run_list(struct nl_store *s, struct nl_run_info **out, int *count, struct nl_error *err)
{
    char sql[512];
    sqlite3_stmt *st;
    struct nl_run_info *v = NULL;
    int n = 0, rc;
    size_t cap = 0;

    *out = NULL;
    *count = 0;
    snprintf(sql, sizeof sql, "SELECT %s FROM runs ORDER BY id", run_columns);
    if (sqlite3_prepare_v2(nl_store_sqlite(s), sql, -1, &st, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "listing runs");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct nl_run_info *nv = nl_grow(v, &cap, (size_t)n + 1, sizeof *v, 16);
        if (!nv) {
            nl_free(v);
            sqlite3_finalize(st);
            return nl_error_set(err, NL_ENOMEM, "out of memory listing runs");
        }
        v = nv;
        read_info(st, &v[n++]);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        nl_free(v);
        return nl_store_db_error(s, err, "listing runs");
    }
    *out = v;
    *count = n;
    return 0;
}

int nl_run_get(struct nl_store *s, const char *name, struct nl_run_info *info, char **spec_text,
               char **settings_json, struct nl_error *err)
{
    char sql[512];
    sqlite3_stmt *st;
    int rc;

    snprintf(sql, sizeof sql, "SELECT %s, spec, settings FROM runs WHERE name = ?", run_columns);
    if (sqlite3_prepare_v2(nl_store_sqlite(s), sql, -1, &st, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "looking up a run");
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        if (rc == SQLITE_DONE)
            return nl_error_set(err, NL_ENOENT, "no run named '%s' (see nnlab runs)", name);
        return nl_store_db_error(s, err, "looking up a run");
    }
    read_info(st, info);
    rc = 0;
    if (spec_text) {
        const unsigned char *t = sqlite3_column_text(st, RUN_COLUMNS);
        *spec_text = nl_strdup(t ? (const char *)t : "");
        if (!*spec_text)
            rc = nl_error_set(err, NL_ENOMEM, "out of memory");
    }
    if (settings_json && rc == 0) {
        const unsigned char *t = sqlite3_column_text(st, RUN_COLUMNS + 1);
        *settings_json = nl_strdup(t ? (const char *)t : "{}");
        if (!*settings_json)
            rc = nl_error_set(err, NL_ENOMEM, "out of memory");
    }
    sqlite3_finalize(st);
    return rc;
}

int nl_run_load_params(struct nl_store *s, const struct nl_run_info *run, float *params,
                       size_t nparams, struct nl_error *err)
{
    struct nl_run_checkpoint cp;
    int rc = nl_run_load_checkpoint(s, run, params, nparams, &cp, err);

    nl_free(cp.optim);
    return rc;
}

int nl_run_checkpoint_epoch(struct nl_store *s, int64_t run, int *epoch, struct nl_error *err)
{
    sqlite3_stmt *st;
    *epoch = 0;
    if (sqlite3_prepare_v2(nl_store_sqlite(s),
                           "SELECT epoch FROM checkpoints WHERE run = ? "
                           "ORDER BY iteration DESC LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "looking for a checkpoint");
    sqlite3_bind_int64(st, 1, run);
    const int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *epoch = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return nl_store_db_error(s, err, "looking for a checkpoint");
    return rc == SQLITE_ROW;
}

int nl_run_load_checkpoint(struct nl_store *s, const struct nl_run_info *run, float *params,
                           size_t nparams, struct nl_run_checkpoint *cp, struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc;

    memset(cp, 0, sizeof *cp);
    if (sqlite3_prepare_v2(nl_store_sqlite(s),
                           "SELECT params, optim, epoch, iteration FROM checkpoints WHERE run = ? "
                           "ORDER BY iteration DESC LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "loading a checkpoint");
    sqlite3_bind_int64(st, 1, run->id);
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        if (rc == SQLITE_DONE)
            return nl_error_set(err, NL_ENOENT, "run '%s' has no checkpoint (status %s)", run->name,
                                run->status);
        return nl_store_db_error(s, err, "loading a checkpoint");
    }
    const size_t bytes = (size_t)sqlite3_column_bytes(st, 0);
    const size_t obytes = (size_t)sqlite3_column_bytes(st, 1);
    if (bytes != nparams * sizeof(float) || obytes % sizeof(float) != 0) {
        sqlite3_finalize(st);
        return nl_error_set(err, NL_EFORMAT,
                            "run '%s': its checkpoint holds %zu parameters and %zu bytes of "
                            "optimizer state, the model has %zu parameters",
                            run->name, bytes / sizeof(float), obytes, nparams);
    }
    if (obytes > 0) {
        cp->optim = nl_malloc(obytes);
        if (!cp->optim) {
            sqlite3_finalize(st);
            return nl_error_set(err, NL_ENOMEM, "out of memory for a checkpoint");
        }
        memcpy(cp->optim, sqlite3_column_blob(st, 1), obytes);
        cp->optim_floats = obytes / sizeof(float);
    }
    memcpy(params, sqlite3_column_blob(st, 0), bytes);
    cp->epoch = sqlite3_column_int(st, 2);
    cp->iteration = (long)sqlite3_column_int64(st, 3);
    sqlite3_finalize(st);
    return 0;
}

int nl_run_set_settings(struct nl_store *s, int64_t run, const char *settings_json,
                        struct nl_error *err)
{
    sqlite3_stmt *st;
    char *old = NULL, *merged;
    int rc;

    /* The stored settings, whose keys the new ones lack are kept. */
    if (sqlite3_prepare_v2(nl_store_sqlite(s), "SELECT settings FROM runs WHERE id = ?", -1, &st,
                           NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "reading a run's settings");
    sqlite3_bind_int64(st, 1, run);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0) &&
        !(old = nl_strdup((const char *)sqlite3_column_text(st, 0)))) {
        sqlite3_finalize(st);
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        nl_free(old);
        return nl_store_db_error(s, err, "reading a run's settings");
    }
    merged = nl_run_settings_keep(settings_json, old);
    nl_free(old);
    if (!merged)
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    if (sqlite3_prepare_v2(nl_store_sqlite(s), "UPDATE runs SET settings = ? WHERE id = ?", -1, &st,
                           NULL) != SQLITE_OK) {
        nl_free(merged);
        return nl_store_db_error(s, err, "updating a run's settings");
    }
    sqlite3_bind_text(st, 1, merged, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, run);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    nl_free(merged);
    return rc == SQLITE_DONE ? 0 : nl_store_db_error(s, err, "updating a run's settings");
}

/* NL_EBUSY naming the holder when a live process other than this one owns run; 0 when nobody
 * does. */
static int check_owner(struct nl_store *s, int64_t run, struct nl_error *err)
{
    char sql[512];
    sqlite3_stmt *st;
    struct nl_run_info info;

    snprintf(sql, sizeof sql, "SELECT %s FROM runs WHERE id = ?", run_columns);
    if (sqlite3_prepare_v2(nl_store_sqlite(s), sql, -1, &st, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "looking up a run's owner");
    sqlite3_bind_int64(st, 1, run);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        read_info(st, &info);
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE)
        return nl_error_set(err, NL_ENOENT, "no run with id %lld", (long long)run);
    if (rc != SQLITE_ROW)
        return nl_store_db_error(s, err, "looking up a run's owner");
    if (!info.owner_lives)
        return 0;
    char age[64] = "";
    if (info.heartbeat_age >= 0)
        snprintf(age, sizeof age, ", last heard from %.0f s ago", info.heartbeat_age);
    return nl_error_set(err, NL_EBUSY,
                        "run '%s' is being trained by process %ld on %s (since %s%s); stop it "
                        "there or wait for it to end",
                        info.name, info.owner_pid, info.owner_host, info.created, age);
}

int nl_run_reopen(struct nl_store *s, int64_t run, const char *settings_json, struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc = nl_store_begin(s, err);

    if (rc < 0)
        return rc;
    rc = check_owner(s, run, err);
    if (rc == 0 && settings_json)
        rc = nl_run_set_settings(s, run, settings_json, err);
    if (rc < 0) {
        nl_store_rollback(s);
        return rc;
    }
    if (sqlite3_prepare_v2(nl_store_sqlite(s),
                           "UPDATE runs SET status = 'running', finished = NULL, owner_host = ?, "
                           "owner_pid = ?, owner_start = ?, heartbeat = "
                           "strftime('%Y-%m-%dT%H:%M:%SZ', 'now') WHERE id = ?",
                           -1, &st, NULL) != SQLITE_OK) {
        rc = nl_store_db_error(s, err, "reopening a run");
        nl_store_rollback(s);
        return rc;
    }
    bind_self(st, 1);
    sqlite3_bind_int64(st, 4, run);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        rc = nl_store_db_error(s, err, "reopening a run");
        nl_store_rollback(s);
        return rc;
    }
    return nl_store_commit(s, err);
}

int nl_run_check_owner(struct nl_store *s, int64_t run, struct nl_error *err)
{
    return check_owner(s, run, err);
}

int nl_run_heartbeat(struct nl_store *s, int64_t run, struct nl_error *err)
{
    sqlite3_stmt *st;

    if (sqlite3_prepare_v2(nl_store_sqlite(s),
                           "UPDATE runs SET heartbeat = strftime('%Y-%m-%dT%H:%M:%SZ', 'now') "
                           "WHERE id = ? AND owner_host = ? AND owner_pid = ? AND owner_start = ?",
                           -1, &st, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "recording a run's heartbeat");
    sqlite3_bind_int64(st, 1, run);
    bind_self(st, 2);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return nl_store_db_error(s, err, "recording a run's heartbeat");
    if (sqlite3_changes(nl_store_sqlite(s)) != 1)
        return nl_error_set(err, NL_EBUSY,
                            "%s: run %lld is no longer this process's (removed, or taken over "
                            "by another process)",
                            nl_store_path(s), (long long)run);
    return 0;
}

int nl_run_epochs(struct nl_store *s, int64_t run, struct nl_run_epoch **out, int *count,
                  struct nl_error *err)
{
    sqlite3_stmt *st;
    struct nl_run_epoch *v = NULL;
    int n = 0, rc;
    size_t cap = 0;

    *out = NULL;
    *count = 0;
    if (sqlite3_prepare_v2(nl_store_sqlite(s),
                           "SELECT epoch, train_loss, train_accuracy, val_loss, val_accuracy, "
                           "seconds, images_per_second FROM epochs WHERE run = ? ORDER BY epoch",
                           -1, &st, NULL) != SQLITE_OK)
        return nl_store_db_error(s, err, "reading a run's epochs");
    sqlite3_bind_int64(st, 1, run);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct nl_run_epoch *nv = nl_grow(v, &cap, (size_t)n + 1, sizeof *v, 16);
        if (!nv) {
            nl_free(v);
            sqlite3_finalize(st);
            return nl_error_set(err, NL_ENOMEM, "out of memory reading a run's epochs");
        }
        v = nv;
        struct nl_run_epoch *e = &v[n++];
        e->epoch = sqlite3_column_int(st, 0);
        e->train_loss = column_real(st, 1);
        e->train_accuracy = column_real(st, 2);
        e->val_loss = column_real(st, 3);
        e->val_accuracy = column_real(st, 4);
        e->seconds = column_real(st, 5);
        e->images_per_second = column_real(st, 6);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        nl_free(v);
        return nl_store_db_error(s, err, "reading a run's epochs");
    }
    *out = v;
    *count = n;
    return 0;
}

int nl_run_remove(struct nl_store *s, const char *name, struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc;

    /* Foreign keys cascade to epochs and checkpoints. */
    if (sqlite3_prepare_v2(nl_store_sqlite(s), "DELETE FROM runs WHERE name = ?", -1, &st, NULL) !=
        SQLITE_OK)
        return nl_store_db_error(s, err, "removing a run");
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return nl_store_db_error(s, err, "removing a run");
    if (sqlite3_changes(nl_store_sqlite(s)) == 0)
        return nl_error_set(err, NL_ENOENT, "no run named '%s' (see nnlab runs)", name);
    /* Its checkpoints' pages back to the file system, as after a dataset's removal (best
     * effort: later writes reuse what stays free). */
    struct nl_error ignored = {0};
    long long unused;
    (void)nl_store_reclaim(s, &unused, &ignored);
    return 0;
}

int nl_run_data_replaced(struct nl_store *s, const struct nl_run_info *run, char *why, size_t cap,
                         struct nl_error *err)
{
    struct nl_dataset_info info;
    int rc = nl_dataset_info(s, run->dataset, &info, err);

    if (rc < 0)
        return rc;
    /* Both are strftime('%Y-%m-%dT%H:%M:%SZ'): they compare as strings. */
    if (strcmp(info.created, run->created) <= 0)
        return 0;
    snprintf(why, cap,
             "dataset '%s' was imported at %s, after run '%s' began at %s: it is not the data "
             "the run trained on, and its splits may hold images the run trained on",
             info.name, info.created, run->name, run->created);
    return 1;
}
