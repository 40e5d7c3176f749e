/* Running the real nnlab binary from a TAP test: nnlab("ARGS") runs `$NNLAB_BIN --db DB ARGS`
 * with no standard input and returns its exit status (128 + signal when killed), leaving its
 * stdout in out and its stderr in errtext; nnlab_spawn starts one in the background, and
 * nnlab_db_int reads the store DB as the test goes. nnlab_cli_setup fills bin, dir (a temporary
 * folder of the test's own), db, out_path and err_path before the first call, and
 * nnlab_cli_cleanup removes dir at the end. */
#ifndef NNLAB_TESTS_CLI_H
#define NNLAB_TESTS_CLI_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "slurp.h"
#include "tap.h"

static char dir[64] __attribute__((unused)), db[320], out_path[320], err_path[320];
static const char *bin;
static char out[1 << 16], errtext[1 << 14];

static inline int nnlab(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int nnlab(const char *fmt, ...)
{
    char args[2048], cmd[4096];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' --db '%s' %s >'%s' 2>'%s' </dev/null", bin, db, args, out_path,
             err_path);
    int status = system(cmd);
    slurp(out_path, out, sizeof out);
    slurp(err_path, errtext, sizeof errtext);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Sets bin from NNLAB_BIN, makes dir (/tmp/nnlab-NAME-XXXXXX) and puts db (DIR/STORE), out_path
 * and err_path in it; skips the whole test when the binary or the folder cannot be had. */
static inline void nnlab_cli_setup(const char *name, const char *store)
{
    bin = getenv("NNLAB_BIN");
    if (!bin || access(bin, X_OK) != 0)
        skip_all("NNLAB_BIN does not name the nnlab binary");
    snprintf(dir, sizeof dir, "/tmp/nnlab-%s-XXXXXX", name);
    if (!mkdtemp(dir))
        skip_all("cannot make a temporary directory");
    snprintf(db, sizeof db, "%s/%s", dir, store);
    snprintf(out_path, sizeof out_path, "%s/stdout", dir);
    snprintf(err_path, sizeof err_path, "%s/stderr", dir);
}

/* Removes dir and all it holds. */
static inline void nnlab_cli_cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
}

/* Starts `$NNLAB_BIN --db DB ARGS...` (args NULL-terminated, at most 28) in the background, its
 * stdout to /dev/null and its stderr to errfile; its pid. */
static inline pid_t nnlab_spawn(const char *const *args, const char *errfile)
{
    const char *argv[32];
    int n = 0;

    argv[n++] = bin;
    argv[n++] = "--db";
    argv[n++] = db;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        FILE *o = freopen("/dev/null", "w", stdout);
        FILE *e = freopen(errfile, "w", stderr);
        (void)o;
        (void)e;
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* The integer the query sql answers first on the store DB, read-only, waiting up to 5 s for a
 * writer's lock; -1 when it cannot be read. */
static inline long long nnlab_db_int(const char *sql)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *st = NULL;
    long long v = -1;

    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_busy_timeout(h, 5000) == SQLITE_OK &&
        sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

/* Sleeps s seconds. */
static inline void nnlab_sleep(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

#endif
