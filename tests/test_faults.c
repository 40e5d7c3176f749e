/* Faults through the real binary: --resume, --on-nan and --checkpoint-every on the command line,
 * and kill -9 at seeded random moments (seed and delays printed as TAP diagnostics) of a run
 * that checkpoints every few steps, so that kills land in checkpoint writes and between them. After
 * every kill the database passes PRAGMA integrity_check and the latest checkpoint loads (nnlab
 * eval); the run, resumed after each kill and at last to its end, ends with the same weights, byte
 * for byte, as the same run never interrupted. A run has one owner: a second process resuming a
 * run that trains is refused naming the first, and the run of a killed process lists as
 * interrupted and resumes. On a small tmpfs that fills (in a user and mount namespace of its own;
 * skipped with the reason where that is not allowed), a run whose checkpoint cannot be written
 * exits non-zero saying why, and is not left running; so do a regression CSV import, a text
 * import and the exports to .onnx and .safetensors, leaving nothing behind, and a run whose
 * frozen-feature cache file does not fit trains on without it. */
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "idx_writer.h"
#include "nnlab_cli.h"
#include "tap.h"

enum { KILLS = 8, SIDE = 8 };

/* An IDX pair of n 8x8 images, class k lighting row band k, with some noise. */
static void write_idx(const char *images, const char *labels, uint32_t n, unsigned seed)
{
    gzFile f = gzopen(images, "wb"), g = gzopen(labels, "wb");
    idx_images_header(f, n, SIDE, SIDE);
    idx_labels_header(g, n);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t px[SIDE * SIDE], k = (uint8_t)((i * 7 + seed) % 4);
        for (int p = 0; p < SIDE * SIDE; p++)
            px[p] = (uint8_t)((p / SIDE / 2 == k ? 180 : 20) + (p * 13 + i * 5) % 70);
        gzwrite(f, px, sizeof px);
        gzwrite(g, &k, 1);
    }
    gzclose(f);
    gzclose(g);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* PRAGMA integrity_check's answer (its first row), into buf. */
static void integrity(char *buf, size_t size)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *st = NULL;

    snprintf(buf, size, "(no answer)");
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
        sqlite3_busy_timeout(h, 5000) == SQLITE_OK &&
        sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        snprintf(buf, size, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(h);
}

static int same_file(const char *a, const char *b)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

#define TRAIN_ARGS                                                                                 \
    "--epochs", "4", "--batch", "8", "--threads", "2", "--optim", "adam", "--checkpoint-every",    \
        "5", "--quiet"

static void test_options(void)
{
    is_int(nnlab("train --resume nope --data syn"), 2, "--resume with --data is a usage error");
    like(errtext, "--data", "naming the option");
    is_int(nnlab("train --resume nope --batch 4"), 2, "--resume with --batch too");
    like(errtext, "run's own settings", "saying why");
    is_int(nnlab("train --resume nope --hosts a,b"), 1, "--resume with --hosts is accepted");
    like(errtext, "no run named 'nope'", "and looks for the run");
    is_int(nnlab("train --resume nope --hosts a,b --compress bf16"), 1,
           "--resume with --hosts and --compress is accepted");
    like(errtext, "no run named 'nope'", "and looks for the run");
    is_int(nnlab("train --on-nan maybe --data syn --model mlp"), 2, "--on-nan wants stop|skip");
    like(errtext, "--on-nan", "naming the option");
    is_int(nnlab("train --checkpoint-every 0 --data syn --model mlp"), 2,
           "--checkpoint-every 0 is a usage error");
    is_int(nnlab("train --resume nope"), 1, "resuming an unknown run fails");
    like(errtext, "nope", "naming it");
}

static void test_on_nan(void)
{
    is_int(nnlab("train --data syn --model mlp --epochs 2 --lr 1e5 --momentum 0 --schedule "
                 "constant --name nan1 --json"),
           1, "a diverging run stops (on-nan stop)");
    like(errtext, "epoch 1, step ", "naming the epoch and step");
    like(errtext, "checkpoint", "and saying the last checkpoint is kept");
    is_int(nnlab("train --data syn --model mlp --epochs 2 --lr 1e5 --momentum 0 --schedule "
                 "constant --name nan2 --json --on-nan skip-batch"),
           0, "with --on-nan skip-batch it goes on");
    like(out, "\"skipped_batches\":", "the epoch and done lines count skipped batches");
    ok(strstr(out, "\"skipped_batches\":0,") == NULL || strstr(out, "\"done\"") != NULL,
       "and a done line");
    char *done = strstr(out, "\"event\":\"done\"");
    char *sk = done ? strstr(done, "\"skipped_batches\":") : NULL;
    long n = sk ? strtol(sk + 18, NULL, 10) : -1;
    ok(n > 0, "%ld batches skipped", n);
    ok(nnlab_db_int("SELECT count(*) FROM runs WHERE name = 'nan2' AND settings LIKE "
                    "'%\"on_nan\":\"skip-batch\"%' AND settings NOT LIKE "
                    "'%\"skipped_batches\":0}%'") == 1,
       "the run's settings record the option and the count");
}

static void test_kills(void)
{
    char a[256], b[256], check[256];
    const char *full[] = {"train",  "--data", "syn",      "--model", "mlp",
                          "--name", "full",   TRAIN_ARGS, NULL};
    const char *part[] = {"train",  "--data", "syn",      "--model", "mlp",
                          "--name", "part",   TRAIN_ARGS, NULL};
    const char *resume[] = {"train", "--resume", "part", "--quiet", NULL};
    int status;

    double t0 = now();
    pid_t pid = nnlab_spawn(full, err_path);
    waitpid(pid, &status, 0);
    const double seconds = now() - t0;
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the uninterrupted run (%.2f s)", seconds);

    /* Kill moments: seeded (NNLAB_FAULTS_SEED picks another seed to replay a failure), a few
     * percent of a whole run each, after the first checkpoint. */
    const char *seed_env = getenv("NNLAB_FAULTS_SEED");
    const unsigned seed = seed_env && *seed_env ? (unsigned)strtoul(seed_env, NULL, 10) : 20261121;
    srand(seed);
    diag("kill moments from seed %u (NNLAB_FAULTS_SEED=%u replays them)", seed, seed);
    int kills = 0, finished = 0, intact = 0, loads = 0, statuses = 0;
    pid = nnlab_spawn(part, err_path);
    for (int i = 0; i < KILLS && !finished; i++) {
        double wait_from = now();
        while (nnlab_db_int("SELECT count(*) FROM checkpoints JOIN runs ON runs.id = run WHERE "
                            "name = 'part'") < 1 &&
               now() - wait_from < 30)
            nnlab_sleep(0.005);
        const double delay = seconds * (0.02 + 0.08 * (double)rand() / RAND_MAX);
        diag("kill %d: %.3f s after the run has a checkpoint stored", i + 1, delay);
        nnlab_sleep(delay);
        if (waitpid(pid, &status, WNOHANG) == pid) {
            finished = 1; /* it ended before this kill */
            break;
        }
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        kills++;
        integrity(check, sizeof check);
        intact += strcmp(check, "ok") == 0;
        if (strcmp(check, "ok") != 0)
            diag("kill %d: integrity_check: %s", i + 1, check);
        loads += nnlab("eval part --json") == 0;
        statuses += nnlab_db_int("SELECT count(*) FROM runs WHERE name = 'part' AND "
                                 "status = 'running'") == 1;
        if (i + 1 < KILLS)
            pid = nnlab_spawn(resume, err_path);
    }
    diag("%d kills at random moments", kills);
    ok(kills >= KILLS / 2, "killed %d times (at least %d)", kills, KILLS / 2);
    is_int(intact, kills, "integrity_check ok after every kill");
    is_int(loads, kills, "the latest checkpoint loads after every kill (nnlab eval)");
    is_int(statuses, kills, "a killed run stays 'running'");
    if (finished)
        diag("the run ended before the last kills");
    is_int(nnlab("train --resume part"), finished ? 1 : 0, "resumed to its end");
    if (finished)
        like(errtext, "is done", "a run that finished cannot resume without more epochs");
    is_int(nnlab("runs --json"), 0, "runs");
    like(out,
         "\"name\":\"part\",\"dataset\":\"syn\",\"model\":\"mlp\",\"status\":\"done\","
         "\"epochs\":4",
         "the resumed run is done, in its own record, with 4 epochs");
    ok(nnlab_db_int("SELECT count(*) FROM epochs JOIN runs ON runs.id = run WHERE name = 'part'") ==
           4,
       "its epochs recorded once each");

    snprintf(a, sizeof a, "%s/full.safetensors", dir);
    snprintf(b, sizeof b, "%s/part.safetensors", dir);
    is_int(nnlab("export full '%s'", a), 0, "export the uninterrupted run");
    is_int(nnlab("export part '%s'", b), 0, "export the interrupted one");
    ok(same_file(a, b), "killed %d times and resumed, it ends byte-identical", kills);

    /* A finished run trains on with more epochs; the same epochs again are refused. */
    is_int(nnlab("train --resume full"), 1, "a done run does not resume as it is");
    like(errtext, "--epochs", "saying to give more epochs");
    is_int(nnlab("train --resume full --epochs 5 --quiet"), 0, "it trains on to 5 epochs");
    ok(nnlab_db_int("SELECT epochs_done FROM runs WHERE name = 'full'") == 5, "5 epochs done");
}

/* Two processes, one run: the second is refused while the first trains, naming it; killed, the
 * first's run shows as interrupted everywhere and resumes. */
static void test_owner(void)
{
    const char *first[] = {
        "train",    "--data",  "syn",     "--model", "mlp",       "--name", "owned",
        "--epochs", "60",      "--batch", "8",       "--threads", "1",      "--checkpoint-every",
        "3",        "--quiet", NULL};
    char want[128];
    int status;

    pid_t pid = nnlab_spawn(first, err_path);
    double t0 = now();
    while (nnlab_db_int("SELECT count(*) FROM checkpoints JOIN runs ON runs.id = run WHERE name = "
                        "'owned'") < 1 &&
           now() - t0 < 30)
        nnlab_sleep(0.01);
    ok(waitpid(pid, &status, WNOHANG) == 0, "the first process trains (pid %d)", (int)pid);

    is_int(nnlab("train --resume owned --epochs 61"), 1,
           "a second process resuming the run is refused");
    snprintf(want, sizeof want, "being trained by process %d on ", (int)pid);
    like(errtext, want, "naming the process that holds it");
    is_int(nnlab("runs --json"), 0, "runs --json");
    snprintf(want, sizeof want, "\"status\":\"running\"");
    like(out, want, "lists it running");
    snprintf(want, sizeof want, "\"pid\":%d,\"lives\":true}", (int)pid);
    like(out, want, "with its owner");
    is_int(nnlab("runs owned"), 0, "runs RUN");
    snprintf(want, sizeof want, "trained by process %d", (int)pid);
    like(out, want, "names its owner");

    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    is_int(nnlab("runs --json"), 0, "after a kill -9, runs --json");
    like(out, "\"name\":\"owned\",\"dataset\":\"syn\",\"model\":\"mlp\",\"status\":\"interrupted\"",
         "lists it interrupted");
    is_int(nnlab("runs"), 0, "runs");
    like(out, "interrupted", "the table too");
    is_int(nnlab("runs owned"), 0, "runs RUN");
    like(out, "--resume owned", "says how to go on");
    const long long done = nnlab_db_int("SELECT epochs_done FROM runs WHERE name = 'owned'");
    is_int(nnlab("train --resume owned --epochs %lld --quiet", done + 1), 0,
           "the interrupted run resumes: %s", errtext);
    is_int(nnlab("runs --json"), 0, "runs --json");
    ok(strstr(out,
              "\"name\":\"owned\",\"dataset\":\"syn\",\"model\":\"mlp\",\"status\":\"done\"") &&
           !strstr(out, "\"owner\""),
       "and is done, with no owner");
}

/* Whether a user and mount namespace of this test's own may mount a tmpfs on mnt; where not,
 * one skipped check says why. */
static int tmpfs_allowed(const char *mnt)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "unshare --user --map-root-user --mount mount -t tmpfs -o size=64k tmpfs '%s' "
             ">'%s' 2>&1",
             mnt, err_path);
    if (system(cmd) == 0)
        return 1;
    slurp(err_path, errtext, sizeof errtext);
    errtext[strcspn(errtext, "\n")] = '\0';
    ok(1, "# SKIP cannot mount a tmpfs in a namespace of its own: %s", errtext);
    return 0;
}

/* Runs the shell script in a user and mount namespace of its own, its stdout in out_path and its
 * stderr in err_path and errtext; system()'s status. */
static int unshared(const char *script)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "unshare --user --map-root-user --mount sh '%s' >'%s' 2>'%s'", script,
             out_path, err_path);
    int rc = system(cmd);
    slurp(err_path, errtext, sizeof errtext);
    return rc;
}

/* A checkpoint that does not fit on the store's disk: a tmpfs a little larger than the database,
 * mounted in a user and mount namespace of a shell script that trains there and copies the store
 * out for the checks. */
static void test_full_disk(void)
{
    char cmd[1024], spec[256], mnt[256], copy[256], script[256];

    snprintf(spec, sizeof spec, "%s/wide.txt", dir);
    snprintf(mnt, sizeof mnt, "%s/full", dir);
    snprintf(copy, sizeof copy, "%s/copy", dir);
    snprintf(script, sizeof script, "%s/full.sh", dir);
    FILE *f = fopen(spec, "w");
    if (f) {
        fputs("fc1: dense 512\nrelu\nfc2: dense N\n", f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s'", mnt, copy);
    if (system(cmd) != 0) {
        ok(0, "folders for the full disk");
        return;
    }
    if (!tmpfs_allowed(mnt))
        return;
    /* The store, in one file after the last command closed it, and 96 KiB more: room for the
     * run's record, not for a checkpoint of the 512-unit model (about 400 KiB with Adam's
     * moments). */
    struct stat st;
    is_int(nnlab("datasets --quiet"), 0, "the store is whole");
    if (stat(db, &st) != 0) {
        ok(0, "the store's size");
        return;
    }
    const long kib = (long)(st.st_size / 1024) + 96;
    f = fopen(script, "w");
    if (!f) {
        ok(0, "the script");
        return;
    }
    fprintf(f,
            "mount -t tmpfs -o size=%ldk tmpfs \"%s\" || exit 100\n"
            "cp \"%s\" \"%s/nnlab.db\" || exit 101\n"
            "\"%s\" --db \"%s/nnlab.db\" train --data syn --model \"%s\" --name diskfull "
            "--optim adam --epochs 2 --quiet\n"
            "echo $? >\"%s/rc\"\n"
            "cp \"%s\"/nnlab.db* \"%s\"/\n",
            kib, mnt, db, mnt, bin, mnt, spec, copy, mnt, copy);
    fclose(f);
    int rc = unshared(script);
    char rcpath[300], rctext[16];
    snprintf(rcpath, sizeof rcpath, "%s/rc", copy);
    slurp(rcpath, rctext, sizeof rctext);
    ok(rc == 0 && rctext[0], "train ran on a %ld KiB tmpfs", kib);
    is_int(atoi(rctext), 1, "it exits 1 when its checkpoint does not fit");
    like(errtext, "disk is full", "saying the disk is full");
    like(errtext, "run 'diskfull'", "naming the run");
    diag("%s", errtext);
    /* Its record: failed, or when even that could not be written, its owner is gone. */
    char saved[320];
    snprintf(saved, sizeof saved, "%s", db);
    snprintf(db, sizeof db, "%s/nnlab.db", copy);
    is_int(nnlab("runs --json"), 0, "the store copied out reads");
    ok(strstr(out, "\"name\":\"diskfull\",\"dataset\":\"syn\",\"model\":") &&
           (strstr(out, "\"status\":\"failed\"") || strstr(out, "\"status\":\"interrupted\"")),
       "the run is failed or interrupted, not running: %s", out);
    snprintf(db, sizeof db, "%s", saved);
}

/* One integer from a query on the store file path (-1 on error), read-only. */
static long long query_file(const char *path, const char *sql)
{
    char saved[320];
    long long v;

    snprintf(saved, sizeof saved, "%s", db);
    snprintf(db, sizeof db, "%s", path);
    v = nnlab_db_int(sql);
    snprintf(db, sizeof db, "%s", saved);
    return v;
}

/* The newer write paths on a full disk, each on a fresh tmpfs in a namespace of its own: a CSV
 * import with --task regression and a text import (a store with 96 KiB to spare), a training
 * run whose frozen-feature cache file does not fit (the run goes on computing every epoch, as
 * documented, saying why; the file was a SIGBUS when its pages were left sparse), and exports
 * to .onnx and .safetensors. Each fails with an error naming the file, exits non-zero, and
 * leaves nothing behind: no dataset, no staged rows once a writer opens the store with room
 * again, no file. */
static void test_full_disk_paths(void)
{
    char cmd[1024], mnt[256], copy[256], script[256], path[320];
    struct stat st;

    snprintf(mnt, sizeof mnt, "%s/full2", dir);
    snprintf(copy, sizeof copy, "%s/copy2", dir);
    snprintf(script, sizeof script, "%s/full2.sh", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s' '%s/txt/pos' '%s/txt/neg'", mnt, copy, dir, dir);
    if (system(cmd) != 0) {
        ok(0, "folders for the full disks");
        return;
    }
    if (!tmpfs_allowed(mnt))
        return;
    /* A regression CSV of 20000 rows (about 1 MB stored) and 800 text files. */
    snprintf(path, sizeof path, "%s/reg.csv", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        ok(0, "the CSV");
        return;
    }
    fputs("a,b,c,d,e,f,g,h,y\n", f);
    for (int r = 0; r < 20000; r++) {
        double sum = 0;
        for (int c = 0; c < 8; c++) {
            double x = (double)((r * 31 + c * 17) % 1000) / 1000.0;
            sum += x;
            fprintf(f, "%.3f,", x);
        }
        fprintf(f, "%.3f\n", sum);
    }
    fclose(f);
    static const char *const words[] = {"alpha", "beta", "gamma", "delta", "eps",
                                        "zeta",  "eta",  "theta", "iota",  "kappa"};
    for (int i = 0; i < 800; i++) {
        snprintf(path, sizeof path, "%s/txt/%s/%d.txt", dir, i % 2 ? "pos" : "neg", i);
        f = fopen(path, "w");
        for (int w = 0; f && w < 150; w++)
            fprintf(f, "%s%s", w ? " " : "", words[(i * 7 + w * 3 + (w * w) % 5) % 10]);
        if (f)
            fclose(f);
    }
    is_int(nnlab("datasets --quiet"), 0, "the store is whole");
    if (stat(db, &st) != 0) {
        ok(0, "the store's size");
        return;
    }
    const long long tables = nnlab_db_int("SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                                          "AND name GLOB 'samples_[0-9]*'");
    const long long datasets = nnlab_db_int("SELECT count(*) FROM datasets");
    const long kib = (long)(st.st_size / 1024) + 96;
    f = fopen(script, "w");
    if (!f) {
        ok(0, "the script");
        return;
    }
    /* import_case NAME SOURCE OPTION...: the import into a copy of the store on a fresh tmpfs,
     * its exit status and stderr kept in the copy folder, the tmpfs grown back, the store opened
     * by a writer (nnlab rm of no dataset) and copied out. Then the cache and the exports, their
     * files on a 64 KiB tmpfs. */
    fprintf(f,
            "B='%s'; D='%s'; M='%s'; C='%s'\n"
            "fresh() { umount \"$M\" 2>/dev/null; mount -t tmpfs -o size=$1k tmpfs \"$M\" || "
            "exit 100; }\n"
            "import_case() {\n"
            "  fresh %ld; cp \"$D/nnlab.db\" \"$M/nnlab.db\" || exit 101\n"
            "  \"$B\" --db \"$M/nnlab.db\" import \"$@\" >/dev/null 2>\"$C/$1.err\"\n"
            "  echo $? >\"$C/$1.rc\"\n"
            "  mount -o remount,size=65536k \"$M\" || exit 102\n"
            "  \"$B\" --db \"$M/nnlab.db\" rm no-such-dataset 2>/dev/null\n"
            "  cp \"$M/nnlab.db\" \"$C/$1.db\" || exit 103\n"
            "}\n"
            "import_case reg \"$D/reg.csv\" --task regression\n"
            "import_case words \"$D/txt\"\n"
            "fresh 64\n"
            "XDG_CACHE_HOME=\"$M\" \"$B\" --db \"$D/nnlab.db\" train --data syn --model "
            "\"$D/wide.txt\" --freeze fc1 --feature-cache on --feature-cache-limit 0 --epochs 2 "
            "--name fcache >/dev/null 2>\"$C/fc.err\"\n"
            "echo $? >\"$C/fc.rc\"\n"
            "ls -A \"$M/nnlab/features\" >\"$C/fc.ls\" 2>/dev/null\n"
            "fresh 64\n"
            "\"$B\" --db \"$D/nnlab.db\" export fcache \"$M/w.onnx\" 2>\"$C/onnx.err\"\n"
            "echo $? >\"$C/onnx.rc\"\n"
            "\"$B\" --db \"$D/nnlab.db\" export fcache \"$M/w.safetensors\" 2>\"$C/st.err\"\n"
            "echo $? >\"$C/st.rc\"\n"
            "ls -A \"$M\" >\"$C/export.ls\"\n",
            bin, dir, mnt, copy, kib);
    fclose(f);
    int rc = unshared(script);
    ok(rc == 0, "the full-disk script ran (%d) %s", rc, errtext);

    static const char *const imports[][2] = {{"reg", "a regression CSV import"},
                                             {"words", "a text import"}};
    for (int i = 0; i < 2; i++) {
        const char *name = imports[i][0], *what = imports[i][1];
        char text[256], store[320];
        snprintf(path, sizeof path, "%s/%s.rc", copy, name);
        slurp(path, text, sizeof text);
        is_int(text[0] ? atoi(text) : -1, 1, "%s exits 1 on a %ld KiB tmpfs", what, kib);
        snprintf(path, sizeof path, "%s/%s.err", copy, name);
        slurp(path, errtext, sizeof errtext);
        like(errtext, "disk is full", "%s: saying the disk is full", what);
        like(errtext, "nnlab.db", "%s: naming the store", what);
        diag("%s", errtext);
        snprintf(store, sizeof store, "%s/%s.db", copy, name);
        snprintf(text, sizeof text, "SELECT count(*) FROM datasets WHERE name = '%s'", name);
        is_int(query_file(store, text), 0, "%s: no dataset '%s'", what, name);
        is_int(query_file(store, "SELECT count(*) FROM datasets"), datasets,
               "%s: nothing staged is left once a writer opens the store with room", what);
        is_int(query_file(store, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                                 "name GLOB 'samples_[0-9]*'"),
               tables, "%s: and no samples table", what);
    }

    char text[256];
    snprintf(path, sizeof path, "%s/fc.rc", copy);
    slurp(path, text, sizeof text);
    is_int(text[0] ? atoi(text) : -1, 0,
           "a run whose feature cache does not fit goes on without it (no SIGBUS)");
    snprintf(path, sizeof path, "%s/fc.err", copy);
    slurp(path, errtext, sizeof errtext);
    like(errtext, "cannot hold them (No space left on device)", "saying why the cache is off");
    diag("%s", errtext);
    snprintf(path, sizeof path, "%s/fc.ls", copy);
    slurp(path, text, sizeof text);
    is_str(text, "", "no cache file is left");
    ok(nnlab_db_int("SELECT count(*) FROM runs WHERE name = 'fcache' AND status = 'done'") == 1,
       "the run is done");

    static const char *const exports[][2] = {{"onnx", "w.onnx"}, {"st", "w.safetensors"}};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s.rc", copy, exports[i][0]);
        slurp(path, text, sizeof text);
        is_int(text[0] ? atoi(text) : -1, 1, "export to %s on a full disk exits 1", exports[i][1]);
        snprintf(path, sizeof path, "%s/%s.err", copy, exports[i][0]);
        slurp(path, errtext, sizeof errtext);
        like(errtext, exports[i][1], "naming the file");
        like(errtext, "No space left on device", "saying the disk is full");
        diag("%s", errtext);
    }
    snprintf(path, sizeof path, "%s/export.ls", copy);
    slurp(path, text, sizeof text);
    is_str(text, "", "no exported file is left, whole or part");
}

/* A plateau schedule follows validation accuracy: a run resumed after its epoch's record was
 * lost (a kill between checkpoint and record) recovers it from the checkpoint and decides the
 * same. A run of 2 epochs extended to 3 equals one of 3 (the plateau schedule does not depend on
 * the run's length). */
static void test_plateau(void)
{
    char a[256], b[256];

    is_int(nnlab("train --data syn --model mlp --epochs 3 --batch 32 --threads 2 --lr 0.3 "
                 "--schedule plateau:1:0.1 --name pl-full --quiet"),
           0, "a plateau run of 3 epochs");
    is_int(nnlab("train --data syn --model mlp --epochs 2 --batch 32 --threads 2 --lr 0.3 "
                 "--schedule plateau:1:0.1 --name pl-part --quiet"),
           0, "the same run, 2 epochs");
    sqlite3 *h = NULL;
    ok(sqlite3_open(db, &h) == SQLITE_OK &&
           sqlite3_exec(h,
                        "DELETE FROM epochs WHERE epoch = 2 AND run = (SELECT id FROM runs "
                        "WHERE name = 'pl-part')",
                        NULL, NULL, NULL) == SQLITE_OK,
       "its last epoch's record lost");
    sqlite3_close(h);
    is_int(nnlab("train --resume pl-part --epochs 3 --quiet"), 0, "resumed to 3 epochs");
    snprintf(a, sizeof a, "%s/pl-full.safetensors", dir);
    snprintf(b, sizeof b, "%s/pl-part.safetensors", dir);
    nnlab("export pl-full '%s'", a);
    nnlab("export pl-part '%s'", b);
    ok(same_file(a, b), "it ends byte-identical to the run of 3");

    /* A cluster run resumes on hosts only (tests/test_cluster_faults.c resumes one). */
    ok(sqlite3_open(db, &h) == SQLITE_OK &&
           sqlite3_exec(h,
                        "UPDATE runs SET settings = replace(settings, '\"cluster\":false', "
                        "'\"cluster\":true') WHERE name = 'pl-full'",
                        NULL, NULL, NULL) == SQLITE_OK,
       "a run marked as trained on a cluster");
    sqlite3_close(h);
    is_int(nnlab("train --resume pl-full --epochs 4"), 1, "does not resume without hosts");
    like(errtext, "give --hosts or --hostfile to resume it", "saying so");
}

/* A kill -9 right after the last checkpoint (its epoch's record with it) leaves the run running
 * with no owner and no result: resumed, it trains nothing more and finishes with the last
 * epoch's validation accuracy and the whole run's seconds, not the resumed session's. */
static void test_last_checkpoint(void)
{
    is_int(nnlab("train --data syn --model mlp --epochs 2 --batch 32 --threads 2 --name lastcp "
                 "--quiet"),
           0, "a run of 2 epochs");
    const long long val = nnlab_db_int("SELECT CAST(val_accuracy * 1000000 AS INTEGER) FROM runs "
                                       "WHERE name = 'lastcp'");
    const long long ms = nnlab_db_int("SELECT CAST(seconds * 1000 AS INTEGER) FROM runs WHERE name "
                                      "= 'lastcp'");
    sqlite3 *h = NULL;
    ok(sqlite3_open(db, &h) == SQLITE_OK &&
           sqlite3_exec(h,
                        "UPDATE runs SET status = 'running', finished = NULL, val_accuracy = "
                        "NULL, test_accuracy = NULL, seconds = NULL, owner_host = NULL, "
                        "owner_pid = NULL, owner_start = NULL WHERE name = 'lastcp'",
                        NULL, NULL, NULL) == SQLITE_OK,
       "its process killed after the last checkpoint, before its result");
    sqlite3_close(h);
    is_int(nnlab("train --resume lastcp --json"), 0, "resumed: %s", errtext);
    is_str(nnlab_db_int("SELECT status = 'done' FROM runs WHERE name = 'lastcp'") == 1 ? "done"
                                                                                       : "?",
           "done", "the run is done");
    ok(val > 0 &&
           nnlab_db_int("SELECT CAST(val_accuracy * 1000000 AS INTEGER) FROM runs WHERE name "
                        "= 'lastcp'") == val,
       "with the last epoch's validation accuracy (%lld ppm)", val);
    const long long after =
        nnlab_db_int("SELECT CAST(seconds * 1000 AS INTEGER) FROM runs WHERE name = 'lastcp'");
    ok(ms > 0 && after >= ms * 9 / 10, "and the run's seconds: %lld ms, %lld ms first", after, ms);
}

int main(void)
{
    char images[256], labels[256], cmd[300];

    nnlab_cli_setup("faults", "nnlab.db");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/syn'", dir);
    if (system(cmd) != 0)
        skip_all("cannot make a folder");
    snprintf(images, sizeof images, "%s/syn/train-images-idx3-ubyte.gz", dir);
    snprintf(labels, sizeof labels, "%s/syn/train-labels-idx1-ubyte.gz", dir);
    write_idx(images, labels, 1500, 1);
    snprintf(images, sizeof images, "%s/syn/t10k-images-idx3-ubyte.gz", dir);
    snprintf(labels, sizeof labels, "%s/syn/t10k-labels-idx1-ubyte.gz", dir);
    write_idx(images, labels, 200, 3);
    is_int(nnlab("import syn '%s/syn' --val 0.2", dir), 0, "import a synthetic IDX folder");

    test_options();
    test_on_nan();
    test_kills();
    test_owner();
    test_full_disk();
    test_full_disk_paths();
    test_plateau();
    test_last_checkpoint();

    nnlab_cli_cleanup();
    return done_testing();
}
