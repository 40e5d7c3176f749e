/* A training session's steps in the store, which a window follows a run by: a local run's steps
 * are stored as its one worker's (this host, the step's samples, loss and seconds) while it
 * trains, not only at its epochs' ends, and nl_run_worker_steps reads them back after a given
 * step, in order, as many as asked. The session's store keeps a small page cache
 * (nl_store_lean_cache). */
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/store/store_internal.h"
#include "nnlab/alloc.h"
#include "nnlab/model.h"
#include "nnlab/session.h"
#include "nnlab/trainer.h"
#include "tap.h"
#include "test_util.h"

enum { NTRAIN = 400, BATCH = 16, ITERS = NTRAIN / BATCH, EPOCHS = 2, PAUSE_STEP = 5 };

static char db[300];

/* What the display hook saw: each step's loss, and the steps another connection found stored
 * while the first epoch was still in progress. */
struct seen {
    double loss[EPOCHS * ITERS + 1];
    long steps;
    int stored_midway;
    long checked_at;
};

static int show(void *ud, const struct nl_event *ev)
{
    struct seen *s = ud;
    if (ev->kind != NL_EVENT_ITER)
        return 0;
    const long step = (long)(ev->epoch - 1) * ev->iters + ev->iter;
    if (step <= EPOCHS * ITERS)
        s->loss[step] = ev->loss;
    s->steps = step;
    if (step == PAUSE_STEP) {
        /* Longer than NL_SESSION_STEPS_SECONDS: the next step's report stores what is pending. */
        struct timespec t = {1, 200000000};
        nanosleep(&t, NULL);
    } else if (step == PAUSE_STEP + 2) {
        struct nl_store *st;
        struct nl_error err = {0};
        struct nl_run_worker_step *rows = NULL;
        int n = 0;
        if (nl_store_open_read(&st, db, &err) == 0) {
            struct nl_run_info info;
            if (nl_run_get(st, "steps", &info, NULL, NULL, &err) == 0 &&
                nl_run_worker_steps(st, info.id, 0, 0, &rows, &n, &err) == 0)
                s->stored_midway = n;
            nl_store_close(st);
        }
        if (err.msg[0])
            diag("%s", err.msg);
        nl_free(rows);
        s->checked_at = step;
    }
    return 0;
}

int main(void)
{
    char dir[] = "/tmp/nnlab-session-XXXXXX";
    if (!mkdtemp(dir))
        skip_all("cannot make a temporary directory");
    snprintf(db, sizeof db, "%s/nnlab.db", dir);

    const uint32_t n[NL_NSPLITS] = {NTRAIN, 40, 40};
    struct nl_dataset *d = quadrants(n, 7, NL_F32, 2);
    struct nl_model *m = build("fc1: dense 16\nrelu\nfc2: dense 4\n", d->shape, d->nclasses);
    struct nl_train_opts o;
    nl_train_defaults(&o);
    o.epochs = EPOCHS;
    o.batch = BATCH;
    o.threads = 1;
    o.seed = 3;

    struct nl_store *store = NULL;
    struct nl_session *s = NULL;
    struct nl_error err = {0};
    struct seen seen = {0};
    int rc = nl_store_open(&store, db, &err);
    const struct nl_session_new new = {.name = "steps", .dataset = "synthetic", .model = "test"};
    if (rc == 0)
        rc = nl_session_start(store, &new, m, d, &o, &s, &err);
    else {
        nl_model_free(m);
        nl_dataset_free(d);
    }
    if (rc == 0) {
        sqlite3 *h = nl_store_sqlite(store);
        sqlite3_stmt *st = NULL;
        int cache = 0, used = -1, most = 0;
        if (sqlite3_prepare_v2(h, "PRAGMA cache_size", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            cache = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
        sqlite3_db_status(h, SQLITE_DBSTATUS_CACHE_USED, &used, &most, 0);
        is_int(cache, -256, "a session's store keeps a page cache of 256 KiB");
        ok(used >= 0 && used < 512 * 1024, "and holds less than 512 KiB of pages (%d bytes)", used);
    }
    if (rc == 0) {
        struct nl_train_hooks hooks = nl_session_hooks(s, show, &seen);
        rc = nl_train(s->model, s->data, &s->opts, &hooks, &s->res, &err);
        rc = nl_session_finish(s, rc, &err);
    }
    is_int(rc, 0, "a local run of %d epochs of %d steps trains and is recorded (%s)", EPOCHS, ITERS,
           err.msg);
    ok(seen.checked_at == PAUSE_STEP + 2 && seen.stored_midway >= PAUSE_STEP,
       "its steps are in the store while its first epoch goes on (%d at step %ld)",
       seen.stored_midway, seen.checked_at);

    struct nl_run_worker_step *rows = NULL;
    int count = 0;
    const int64_t run = s ? s->run.id : 0;
    rc = s ? nl_run_worker_steps(store, run, 0, 0, &rows, &count, &err) : -1;
    is_int(count, EPOCHS * ITERS, "every step is stored once");
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    int in_order = rc == 0, same_loss = rc == 0, local = rc == 0;
    long samples[EPOCHS + 1] = {0};
    double seconds = 0;
    for (int i = 0; rc == 0 && i < count; i++) {
        const struct nl_run_worker_step *r = &rows[i];
        in_order &= r->step == i + 1 && r->epoch == 1 + i / ITERS;
        same_loss &= r->loss == seen.loss[r->step];
        local &= r->worker == 0 && strcmp(r->host, host) == 0 && r->comm_seconds == 0 &&
                 r->bytes_sent == 0;
        if (r->epoch >= 1 && r->epoch <= EPOCHS)
            samples[r->epoch] += r->samples;
        seconds += r->compute_seconds;
    }
    ok(in_order, "in step order, numbered over the run, with their epochs");
    ok(local, "as the report of one worker on this host (%s), with no communication", host);
    ok(same_loss, "each with the loss its step reported");
    ok(samples[1] == NTRAIN && samples[2] == NTRAIN,
       "each epoch's steps hold its samples (%ld and %ld of %d)", samples[1], samples[2], NTRAIN);
    ok(seconds > 1.0 && isfinite(seconds),
       "and their seconds, the pause in the hook included (%.2f s)", seconds);
    nl_free(rows);

    rc = nl_run_worker_steps(store, run, 30, 5, &rows, &count, &err);
    ok(rc == 0 && count == 5 && rows[0].step == 31 && rows[4].step == 35,
       "nl_run_worker_steps reads from a given step, as many as asked (%d from %ld)", count,
       count > 0 ? rows[0].step : -1L);
    nl_free(rows);
    rc = nl_run_worker_steps(store, run, EPOCHS * ITERS, 0, &rows, &count, &err);
    ok(rc == 0 && count == 0, "and none after the last");
    nl_free(rows);

    nl_session_free(s);
    nl_store_close(store);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
