/* The window's store connection stays current when the process opens and closes the database
 * file behind SQLite's back, as GIO does when a file chooser lists the folder that holds it (it
 * reads files to tell their content type).
 *
 * Why it could not: SQLite's locks are POSIX advisory locks, and closing ANY descriptor of a
 * file drops all the locks the process holds on it. The window's connection, idle in WAL mode,
 * holds a shared lock on the database file; once dropped, `nnlab import` closing its own
 * connection believes it is the last, checkpoints and deletes the WAL file, and the next writer
 * (`nnlab train`) creates a new one — which the window's connection, still holding the old
 * (deleted) file and its index, never reads: it sees the store as it was, and a write of its own
 * would go to the deleted file. core/store.c keeps the WAL file in place (persistent WAL), so
 * every connection's descriptors stay on the files the others write.
 *
 * Checks, with the window's connection (nl_store_open) open throughout, after open()+close() of
 * the database file and its WAL files: a dataset imported and a run started by other processes are
 * seen by that connection while the run trains, and a write of its own is seen by another process;
 * once every connection is closed, the kept WAL file is empty.
 */
#include "nnlab-config.h"
#include "tap.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/runs.h"
#include "nnlab/store.h"

static char tmp[64] = "/tmp/nnlab-store-XXXXXX", db[256], csv[256], spec[256];
static const char *bin;

/* Runs `nnlab --db DB --quiet ARGS`; its exit status is 0. */
static int nnlab(const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' --db '%s' --quiet %s >/dev/null", bin, db, args);
    return system(cmd) == 0;
}

/* Whether another process lists the run (`nnlab runs`). */
static int others_see_run(const char *name)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' --db '%s' runs | grep -q '%s'", bin, db, name);
    return system(cmd) == 0;
}

static int datasets(struct nl_store *s)
{
    struct nl_dataset_info *list = NULL;
    int n = -1;
    struct nl_error err = {0};
    if (nl_dataset_list(s, &list, &n, &err) < 0)
        diag("listing datasets: %s", err.msg);
    nl_free(list);
    return n;
}

static int sees_run(struct nl_store *s, const char *name)
{
    struct nl_run_info info;
    struct nl_error err = {0};
    return nl_run_get(s, name, &info, NULL, NULL, &err) == 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* open()+close() of the database file and of its WAL and WAL index: what a content-type sniff
 * of the folder's files does. */
static void touch_db(void)
{
    static const char *const ends[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char path[300];
        snprintf(path, sizeof path, "%s%s", db, ends[i]);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
            close(fd);
    }
}

int main(void)
{
    bin = getenv("NNLAB_BIN");
    if (!bin)
        skip_all("NNLAB_BIN is not set");
    if (!mkdtemp(tmp))
        skip_all("mkdtemp failed");
    plan(8);
    snprintf(db, sizeof db, "%s/nnlab.db", tmp);
    snprintf(csv, sizeof csv, "%s/rows.csv", tmp);
    snprintf(spec, sizeof spec, "%s/small.nn", tmp);
    FILE *f = fopen(csv, "w");
    fputs("a,b,kind\n", f);
    for (int i = 0; i < 400; i++)
        fprintf(f, "%d,%d,%s\n", i % 13, i % 7, (i % 13 + i % 7) % 2 ? "odd" : "even");
    fclose(f);
    f = fopen(spec, "w");
    fputs("fc1: dense 64\nrelu\nfc2: dense N\n", f);
    fclose(f);

    char args[1024];
    snprintf(args, sizeof args, "import first %s --val 0.1", csv);
    ok(nnlab(args), "nnlab import creates the store");
    struct nl_store *s = NULL;
    struct nl_error err = {0};
    if (nl_store_open(&s, db, &err) < 0)
        diag("%s", err.msg);
    if (!s)
        return done_testing();
    ok(datasets(s) == 1, "the window's connection sees the dataset");

    touch_db();
    snprintf(args, sizeof args, "import second %s --val 0.1", csv);
    const int imported = nnlab(args);
    ok(imported && datasets(s) == 2,
       "after open()+close() of the database file, a dataset another process imports is seen "
       "(%d datasets)",
       datasets(s));

    /* A run that trains on while the window reads. */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec '%s' --db '%s' --quiet train --data first --model %s --epochs 100000 "
             "--threads 1 --batch 4 --name far >/dev/null",
             bin, db, spec);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int listed = 0;
    for (int t = 0; pid > 0 && t < 300 && !listed; t++) {
        listed = others_see_run("far");
        if (!listed)
            sleep_ms(100);
    }
    ok(listed, "another process lists the run that trains");
    int seen = 0;
    for (int t = 0; listed && t < 50 && !seen; t++) {
        seen = sees_run(s, "far");
        if (!seen)
            sleep_ms(100);
    }
    ok(seen, "the window's connection sees the run while it trains");

    /* A write of the window's own, with the run still training: another process sees it. */
    touch_db();
    const int removed = nl_dataset_remove(s, "second", &err) == 0;
    if (!removed)
        diag("removing a dataset: %s", err.msg);
    snprintf(cmd, sizeof cmd, "'%s' --db '%s' datasets | grep -q second", bin, db);
    ok(removed && system(cmd) != 0, "a dataset the window removes is gone for other processes");

    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    nl_store_close(s);
    s = NULL;
    /* The WAL file stays, but empty: what the import and the run wrote does not keep its
     * disk space. */
    char wal[300];
    struct stat st;
    snprintf(wal, sizeof wal, "%s-wal", db);
    const int kept = stat(wal, &st) == 0;
    ok(kept && st.st_size == 0,
       "the last connection closed, the WAL file is kept and empty (%lld bytes)",
       kept ? (long long)st.st_size : -1LL);
    if (nl_store_open_read(&s, db, &err) < 0)
        diag("%s", err.msg);
    ok(s && datasets(s) == 1 && sees_run(s, "far"),
       "reopened, the store holds one dataset and the run");
    nl_store_close(s);

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        diag("could not remove %s", tmp);
    return done_testing();
}
