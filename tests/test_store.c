/* The store under contention and without write access, through the real binary and real
 * processes: an import stages its samples in bounded transactions (the write lock is free between
 * them, a training beside it finishes, `nnlab runs` and `datasets` answer and do not show the
 * staged dataset), an import killed with -9 leaves nothing visible and is cleaned at the next
 * open, a store this process may not write is listed read-only, a --db path with no store is
 * refused without creating anything, and run names: empty or taken. */
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "core/formats/json.h"
#include "idx_writer.h"
#include "nnlab_cli.h"
#include "tap.h"

#define unlike(text, needle, ...) ok(!strstr((text), (needle)), __VA_ARGS__)

/* n checks that cannot run here, as TAP skips. */
static void skip(int n, const char *why)
{
    for (int i = 0; i < n; i++)
        printf("ok %d # SKIP %s\n", ++tap_count, why);
    fflush(stdout);
}

/* n images of side x side, class k brightening band k of 4. */
static void write_idx(const char *folder, uint32_t n, uint32_t side)
{
    char images[400], labels[400];
    uint8_t *px = malloc((size_t)n * side * side), *lab = malloc(n);

    for (uint32_t i = 0; i < n; i++) {
        lab[i] = (uint8_t)(i % 4);
        for (uint32_t p = 0; p < side * side; p++)
            px[(size_t)i * side * side + p] =
                (uint8_t)((p / side * 4 / side == lab[i] ? 180 : 20) + (p * 13 + i * 5) % 70);
    }
    snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", folder);
    snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", folder);
    idx_write(images, labels, px, lab, n, side, side);
    free(px);
    free(lab);
}

/* Staged datasets in the store (-1 when it cannot be read). */
static long long staged(void)
{
    return nnlab_db_int("SELECT count(*) FROM datasets WHERE substr(name, 1, 1) = char(31)");
}

/* Polls every millisecond, for a second at most. */
static int busy_poll(void *ud, int count)
{
    (void)ud;
    if (count >= 1000)
        return 0;
    nnlab_sleep(0.001);
    return 1;
}

/* Whether another writer gets the write lock within a second. */
static int write_lock_free(void)
{
    sqlite3 *h = NULL;
    int ok = 0;

    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
        sqlite3_busy_handler(h, busy_poll, NULL) == SQLITE_OK &&
        sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK) {
        ok = 1;
        sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
    }
    sqlite3_close(h);
    return ok;
}

static int exit_status(pid_t pid)
{
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A long import while a training runs and `nnlab runs` lists. */
static void test_contention(void)
{
    char big[300], train_err[320], import_err[320];
    const char *train[] = {"train", "--data",  "small",  "--model",   "mlp", "--epochs",
                           "3",     "--batch", "16",     "--threads", "1",   "--checkpoint-every",
                           "3",     "--name",  "beside", "--quiet",   NULL};
    const char *import[] = {"import", "big", big, NULL};
    int seen_staged = 0, lock_free = 0, runs_ok = 0, runs_fail = 0, listed_staged = 0;

    snprintf(big, sizeof big, "%s/big", dir);
    snprintf(train_err, sizeof train_err, "%s/train.err", dir);
    snprintf(import_err, sizeof import_err, "%s/import.err", dir);
    pid_t tp = nnlab_spawn(train, train_err);
    pid_t ip = nnlab_spawn(import, import_err);
    for (int i = 0; i < 4000; i++) {
        int status;
        if (waitpid(ip, &status, WNOHANG) == ip) {
            ip = -status - 1; /* reaped: keep the status */
            break;
        }
        if (staged() > 0) {
            seen_staged++;
            if (write_lock_free() && staged() > 0)
                lock_free++; /* and the import still going on */
            if (nnlab("runs --json") == 0)
                runs_ok++;
            else
                runs_fail++;
            /* "big" is listed only once published, when nothing is staged any more. */
            if (nnlab("datasets --json") != 0 || strstr(out, "import ") ||
                (strstr(out, "\"big\"") && staged() > 0))
                listed_staged++;
        }
        nnlab_sleep(0.005);
    }
    int import_rc = ip < 0 ? WEXITSTATUS(-(ip + 1)) : exit_status(ip);
    int train_rc = exit_status(tp);
    is_int(import_rc, 0, "the long import succeeds");
    ok(seen_staged > 0, "its samples were committed in chunks while it ran (%d looks)",
       seen_staged);
    ok(lock_free > 0,
       "another writer got the lock within a second during the import (%d of %d looks)", lock_free,
       seen_staged);
    is_int(runs_fail, 0, "nnlab runs answered during the import (%d times)", runs_ok);
    is_int(listed_staged, 0, "nnlab datasets never listed the dataset before it was whole");
    is_int(train_rc, 0, "the training beside it finished");
    slurp(train_err, errtext, sizeof errtext);
    unlike(errtext, "locked", "without 'database is locked'");
    is_int(nnlab("runs beside --json"), 0, "the run is listed");
    like(out, "\"status\":\"done\"", "done");
    is_int(nnlab("datasets --json"), 0, "datasets lists");
    like(out,
         "\"name\":\"big\",\"kind\":\"idx\",\"shape\":[1,28,28],\"classes\":4,"
         "\"train\":40000",
         "the whole import, published under its name");
    is_int(staged(), 0, "nothing staged remains");

    struct stat before, after;
    stat(db, &before);
    is_int(nnlab("rm big"), 0, "rm of the big dataset");
    stat(db, &after);
    ok(after.st_size < before.st_size - (20 << 20),
       "gives its pages back: the store file shrank from %lld to %lld bytes",
       (long long)before.st_size, (long long)after.st_size);
}

/* Starts `nnlab import NAME DIR/big` in the background (its pid in *pid, its stderr in
 * DIR/NAME.err) and waits up to about 20 s for it to stage samples: whether it did. */
static int import_staging(const char *name, pid_t *pid)
{
    char big[300], import_err[320];
    const char *import[] = {"import", name, big, NULL};

    snprintf(big, sizeof big, "%s/big", dir);
    snprintf(import_err, sizeof import_err, "%s/%s.err", dir, name);
    *pid = nnlab_spawn(import, import_err);
    for (int i = 0; i < 4000; i++) {
        if (staged() > 0)
            return 1;
        nnlab_sleep(0.005);
    }
    return 0;
}

/* kill -9 in the middle of an import: nothing visible; the next writer removes the staging. */
static void test_killed_import(void)
{
    pid_t ip;
    int seen;

    is_int(nnlab("import big '%s/big'", dir), 0,
           "import big again, to kill the next import beside it");
    seen = import_staging("big2", &ip);
    kill(ip, SIGKILL);
    is_int(exit_status(ip), 128 + SIGKILL, "an import killed with -9");
    ok(seen, "had staged samples when it was killed");
    is_int(nnlab("datasets --json"), 0, "datasets lists");
    unlike(out, "big2", "without the killed import");
    ok(staged() > 0 || !seen, "a read-only command leaves the staging alone");
    is_int(nnlab("import big2 '%s/big' --val 0.1", dir), 0, "the next import (a writer) succeeds");
    is_int(staged(), 0, "and the killed import's staging is gone");
    is_int(nnlab("rm big2"), 0, "rm");
}

/* Ctrl-C in the middle of an import: exit 130, and what it staged is removed. */
static void test_interrupted_import(void)
{
    pid_t ip;
    const int seen = import_staging("big3", &ip);
    kill(ip, SIGINT);
    is_int(exit_status(ip), 130, "an import interrupted with Ctrl-C exits 130");
    ok(seen, "it had staged samples");
    is_int(staged(), 0, "and removed them");
    is_int(nnlab("datasets --json"), 0, "datasets");
    ok(!strstr(out, "big3"), "without the interrupted import");
}

/* A --db path with no store; a store this process may not write. */
static void test_readonly(void)
{
    char ro[120], cmd[4096];
    struct stat st;

    snprintf(ro, sizeof ro, "%s/nothere/n.db", dir);
    snprintf(cmd, sizeof cmd, "'%s' --db '%s' datasets >'%s' 2>'%s'", bin, ro, out_path, err_path);
    int rc = system(cmd);
    slurp(err_path, errtext, sizeof errtext);
    slurp(out_path, out, sizeof out);
    ok(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "datasets on a path with no store lists nothing");
    like(out, "no store here", "saying there is no store");
    snprintf(cmd, sizeof cmd, "'%s' --db '%s' show x >'%s' 2>'%s'", bin, ro, out_path, err_path);
    rc = system(cmd);
    slurp(err_path, errtext, sizeof errtext);
    ok(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "show on it fails");
    like(errtext, "no store here", "saying there is no store");
    ok(stat(ro, &st) != 0, "and creates nothing");
    snprintf(ro, sizeof ro, "%s/nothere", dir);
    ok(stat(ro, &st) != 0, "not even its folder");

    /* Another user's store: as root, run the commands as nobody; otherwise remove write
     * permission (root ignores it). */
    snprintf(ro, sizeof ro, "%s/ro", dir);
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cp '%s' '%s/n.db' && chmod 0555 '%s' && chmod 0444 '%s/n.db'", ro,
             db, ro, ro, ro);
    if (system(cmd) != 0) {
        skip(12, "cannot copy the store");
        return;
    }
    const char *as = "";
    if (geteuid() == 0) {
        if (system("setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null") != 0) {
            skip(12, "running as root without setpriv to drop privileges");
            return;
        }
        as = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
    }
    snprintf(cmd, sizeof cmd, "%s'%s' --db '%s/n.db' datasets --json >'%s' 2>'%s'", as, bin, ro,
             out_path, err_path);
    rc = system(cmd);
    slurp(out_path, out, sizeof out);
    slurp(err_path, errtext, sizeof errtext);
    ok(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "a read-only store is listed");
    like(out, "\"name\":\"small\"", "with its datasets");
    snprintf(cmd, sizeof cmd, "%s'%s' --db '%s/n.db' runs --json >'%s' 2>'%s'", as, bin, ro,
             out_path, err_path);
    rc = system(cmd);
    slurp(out_path, out, sizeof out);
    ok(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "and its runs");
    like(out, "beside", "naming them");
    snprintf(cmd, sizeof cmd, "%s'%s' --db '%s/n.db' show small >'%s' 2>'%s'", as, bin, ro,
             out_path, err_path);
    rc = system(cmd);
    ok(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "show reads it too");
    /* A command that writes is told in a sentence naming the store, not with SQLite's
     * "attempt to write a readonly database", and the store is as it was. */
    static const char *const writers[] = {"rm small", "train --data small --model mlp --epochs 1"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s'%s' --db '%s/n.db' %s >'%s' 2>'%s'", as, bin, ro, writers[i],
                 out_path, err_path);
        rc = system(cmd);
        slurp(err_path, errtext, sizeof errtext);
        ok(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "%s on it fails", writers[i]);
        like(errtext, "n.db: this store is read-only here", "saying why, naming the file");
        ok(!strstr(errtext, "attempt to write"), "not in SQLite's words: %s", errtext);
    }
    snprintf(cmd, sizeof cmd, "%s'%s' --db '%s/n.db' datasets --json >'%s' 2>'%s'", as, bin, ro,
             out_path, err_path);
    rc = system(cmd);
    slurp(out_path, out, sizeof out);
    like(out, "\"name\":\"small\"", "the dataset is still there");
    snprintf(cmd, sizeof cmd, "chmod -R u+w '%s'", ro);
    if (system(cmd) != 0)
        diag("could not make %s writable again", ro);
}

/* Whether text is one JSON document per line. */
static int json_lines(const char *text)
{
    int good = 1, lines = 0;

    while (*text && good) {
        const char *nl = strchr(text, '\n');
        size_t n = nl ? (size_t)(nl - text) : strlen(text);
        struct nl_json_doc *d = NULL;
        struct nl_error err = {0};
        good = nl_json_parse(&d, text, n, "output", &err) == 0;
        if (!good)
            diag("not JSON: %.*s (%s)", (int)n, text, err.msg);
        nl_json_free(d);
        lines++;
        text += n + (nl ? 1 : 0);
    }
    return good && lines > 0;
}

static int has_control(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p < 0x20 && *p != '\n') || *p == 0x7f ||
            (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f))
            return 1;
    return 0;
}

/* Hostile CSV files (tests/fuzz/corpus/csv): NUL bytes and hexadecimal refused with FILE:LINE;
 * labels with terminal escapes and bytes that are not UTF-8 imported, listed as JSON that parses
 * and printed with the escapes shown, not obeyed. */
static void test_hostile_csv(const char *corpus)
{
    is_int(nnlab("import nul1 '%s/nul-number.csv'", corpus), 1, "a NUL inside a number is refused");
    like(errtext, "nul-number.csv:3: field 1 has a NUL byte", "with FILE:LINE");
    is_int(nnlab("import nul2 '%s/nul-label.csv'", corpus), 1, "a NUL inside a label is refused");
    like(errtext, "nul-label.csv:2: field 3 has a NUL byte", "with FILE:LINE");
    is_int(nnlab("import hex '%s/hex.csv'", corpus), 1, "0x10 is refused");
    like(errtext, "hex.csv:3: field 1 ('0x10') is not a number", "with FILE:LINE");
    is_int(nnlab("import esc '%s/escape-label.csv'", corpus), 0,
           "labels with escapes and Latin-1 import");
    is_int(nnlab("show esc"), 0, "show");
    ok(!has_control(out), "show prints no control character");
    like(out, "\\e]0;pwned\\x07\\e[2Jcat", "the escape sequence shown escaped");
    like(out, "caf\\xe9", "the Latin-1 byte shown as \\xe9");
    is_int(nnlab("show esc --json"), 0, "show --json");
    ok(json_lines(out), "is JSON");
    like(out, "\"name\":\"caf\\ufffd\"", "the byte that is not UTF-8 as U+FFFD");
    like(out, "\\u001b]0;pwned\\u0007", "control characters as \\u00XX");
    is_int(nnlab("datasets --json"), 0, "datasets --json");
    ok(json_lines(out), "is JSON for the whole store");
    is_int(nnlab("import \"$(printf 'caf\\351')\" '%s/escape-label.csv'", corpus), 1,
           "a dataset name that is not UTF-8 is refused");
    like(errtext, "not valid UTF-8", "saying why");
    is_int(nnlab("train --data esc --model mlp --epochs 1 --name \"$(printf 'r\\351')\""), 1,
           "a run name that is not UTF-8 is refused");
    like(errtext, "not valid UTF-8", "saying why");
    is_int(nnlab("rm esc"), 0, "rm");
}

/* A tensor name with terminal escapes reaches the error escaped. */
static void test_hostile_tensor_name(void)
{
    static const char header[] = "{\"\\u001b]0;pwned\\u0007\\u001b[2Jevil\":{\"dtype\":\"F32\","
                                 "\"shape\":[1],\"data_offsets\":[0,4]}}";
    char path[300];
    unsigned char len[8] = {(unsigned char)(sizeof header - 1)};
    snprintf(path, sizeof path, "%s/evil.safetensors", dir);
    FILE *f = fopen(path, "wb");
    fwrite(len, 1, 8, f);
    fwrite(header, 1, sizeof header - 1, f);
    fwrite("\0\0\0\0", 1, 4, f);
    fclose(f);
    is_int(nnlab("eval '%s' --model mlp --data small", path), 1, "a file of other tensors fails");
    ok(!has_control(errtext), "its error prints no control character");
    like(errtext, "\\e]0;pwned\\x07\\e[2Jevil: not in the model", "the tensor name escaped");
}

/* FIFOs where files should be: refused at once, not read forever. */
static void test_fifo(void)
{
    char path[300];

    snprintf(path, sizeof path, "%s/fifo.csv", dir);
    if (mkfifo(path, 0600) != 0) {
        skip(4, "cannot make a FIFO");
        return;
    }
    is_int(nnlab("import f '%s'", path), 1, "a FIFO given as the CSV is refused");
    like(errtext, "fifo.csv: not a regular file (a FIFO)", "saying what it is");
    snprintf(path, sizeof path, "%s/pngs/cat", dir);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    if (system(cmd) != 0 || (snprintf(path, sizeof path, "%s/pngs/cat/a.png", dir), 0) ||
        mkfifo(path, 0600) != 0) {
        skip(2, "cannot make a FIFO in a folder");
        return;
    }
    is_int(nnlab("import p '%s/pngs'", dir), 1, "a FIFO named a.png is refused");
    like(errtext, "a.png: not a regular file (a FIFO)", "saying what it is");
}

/* A model far larger than memory: summary shows it without allocating it, train refuses it with
 * FILE:LINE and the size. */
static void test_huge_model(void)
{
    char spec[300];

    snprintf(spec, sizeof spec, "%s/huge.spec", dir);
    FILE *f = fopen(spec, "w");
    fputs("fc1: dense 1000000\nrelu\nfc2: dense 1000000\nrelu\nout: dense N\n", f);
    fclose(f);
    /* 4 TB of parameters: the summary's peak memory (wait4) shows it allocated none of them. */
    pid_t pid = fork();
    if (pid == 0) {
        FILE *o = freopen(out_path, "w", stdout);
        (void)o;
        execl(bin, bin, "summary", spec, (char *)NULL);
        _exit(127);
    }
    struct rusage ru;
    int status = 0;
    memset(&ru, 0, sizeof ru);
    pid_t got = wait4(pid, &status, 0, &ru);
    slurp(out_path, out, sizeof out);
    ok(got == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "summary of a 4 TB model");
    ok(ru.ru_maxrss < 512 * 1024, "at a peak of %ld KiB", ru.ru_maxrss);
    like(out, "1000796000010 parameters", "with its count");
    is_int(nnlab("train --data small --model '%s' --epochs 1", spec), 1, "train refuses it");
    like(errtext, "huge.spec:3: layer 'fc2': the model has", "with FILE:LINE");
    like(errtext, "GiB as float32", "and the size");
}

static void test_names(void)
{
    is_int(nnlab("train --data small --model mlp --epochs 1 --name ''"), 2,
           "--name '' is a usage error");
    like(errtext, "must not be empty", "saying why");
    is_int(nnlab("train --data small --model mlp --epochs 1 --name beside"), 1,
           "a taken --name is refused");
    like(errtext, "a run named 'beside' already exists", "saying so");
    unlike(errtext, "UNIQUE", "not in SQLite's words");
    is_int(nnlab("train --data small --model mlp --epochs 1 --freeze-up-to fc3"), 1,
           "--freeze of every layer is refused");
    like(errtext, "every layer with parameters would be frozen", "saying why");
}

int main(void)
{
    char folder[300], cmd[400];

    nnlab_cli_setup("store", "nnlab.db");
    if (chmod(dir, 0755) != 0)
        skip_all("cannot make a temporary directory");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/small' '%s/big'", dir, dir);
    if (system(cmd) != 0)
        skip_all("cannot make folders");
    snprintf(folder, sizeof folder, "%s/small", dir);
    write_idx(folder, 600, 8);
    snprintf(folder, sizeof folder, "%s/big", dir);
    write_idx(folder, 40000, 28);
    is_int(nnlab("import small '%s/small' --val 0.2", dir), 0, "import a small dataset");

    test_contention();
    test_killed_import();
    test_interrupted_import();
    test_readonly();
    test_names();
    const char *root = getenv("NNLAB_SOURCE_ROOT");
    char corpus[400];
    snprintf(corpus, sizeof corpus, "%s/tests/fuzz/corpus/csv", root ? root : ".");
    test_hostile_csv(corpus);
    test_hostile_tensor_name();
    test_fifo();
    test_huge_model();

    nnlab_cli_cleanup();
    return done_testing();
}
