/* What a person who mistypes meets, through the real binary: an unknown option or a missing
 * value named in nnlab's own line (and no getopt line before it), range errors that state the
 * range, a warning when a run is evaluated on a dataset imported again since it trained (its
 * validation split may be the run's training data), and a cluster run whose host does not
 * resolve leaving no run record behind. A 60-row CSV dataset keeps it to a few seconds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nnlab_cli.h"
#include "tap.h"

/* How many lines text has. */
static int lines(const char *text)
{
    int n = 0;
    for (const char *p = text; *p; p++)
        n += *p == '\n';
    return n;
}

static void test_options(void)
{
    is_int(nnlab("train --data x --model mlp --foo"), 2, "an unknown option is a usage error");
    like(errtext, "nnlab: train: unknown option '--foo'\n", "named in one line");
    ok(!strstr(errtext, "unrecognized"), "without getopt's own line");
    is_int(lines(errtext), 2, "that line and the pointer to --help");
    is_int(nnlab("eval --nonsense=3 r"), 2, "an unknown option with a value");
    like(errtext, "nnlab: eval: unknown option '--nonsense'\n", "named without its value");
    is_int(nnlab("train --data x --model mlp --lr"), 2, "an option without its value");
    like(errtext, "nnlab: train: option '--lr' needs a value\n", "says which");
    is_int(nnlab("import --zzz a b"), 2, "import names it too");
    like(errtext, "nnlab: import: unknown option '--zzz'", "import's line");
    is_int(nnlab("summary lenet --zzz"), 2, "summary names it too");
    like(errtext, "nnlab: summary: unknown option '--zzz'", "summary's line");
    is_int(nnlab("predict --zzz r f.png"), 2, "predict names it too");
    like(errtext, "nnlab: predict: unknown option '--zzz'", "predict's line");

    is_int(nnlab("train --data x --model mlp --lr 1e10"), 2, "--lr 1e10 is a usage error");
    like(errtext, "--lr 1e10: want a number in (0, 1e6]", "stating the range");
    is_int(nnlab("train --data x --model mlp --epochs 0"), 2, "--epochs 0");
    like(errtext, "from 1 to 100000", "stating the range");
    is_int(nnlab("predict --top 0 r f.png"), 2, "--top 0");
    like(errtext, "--top 0: want a whole number from 1 to 1000", "stating the range");
}

/* Two classes of points about (0, 0) and (1, -1). */
static void write_points(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "a,b,label\n");
    for (int i = 0; i < 60; i++) {
        const int c = i % 2;
        fprintf(f, "%.3f,%.3f,%s\n", c + 0.01 * (i % 7), -c - 0.01 * (i % 5), c ? "y" : "x");
    }
    fclose(f);
}

static void test_replaced_data(void)
{
    char csv[320];
    snprintf(csv, sizeof csv, "%s/points.csv", dir);
    write_points(csv);
    is_int(nnlab("import pts '%s'", csv), 0, "a dataset without a validation split");
    is_int(nnlab("train --data pts --model mlp --epochs 1 --name r1 --quiet"), 0, "a run on it");
    is_int(nnlab("eval r1 --split test"), 1, "it has no test split");
    ok(!strstr(errtext, "imported at"), "and no warning for the run's own data");
    sleep(1); /* the stores's timestamps are seconds */
    is_int(nnlab("rm pts"), 0, "the dataset removed");
    is_int(nnlab("import pts '%s' --val 0.2", csv), 0, "and imported again with --val");
    is_int(nnlab("eval r1 --split val"), 0, "eval of the run on the new validation split");
    like(errtext, "nnlab: warning: dataset 'pts' was imported at", "warns");
    like(errtext, "may hold images the run trained on", "saying why");
    like(out, "val accuracy", "and still evaluates");
    is_int(nnlab("eval r1 --split train"), 0, "on the train split");
    ok(!strstr(errtext, "warning"), "no warning");
    is_int(nnlab("train --data pts --model mlp --epochs 1 --name r2 --quiet"), 0, "a new run");
    is_int(nnlab("eval r2 --split val"), 0, "eval of the new run on the validation split");
    ok(!strstr(errtext, "warning"), "no warning: it trained on this import");
}

static void test_unresolved_host(void)
{
    int rc = nnlab("train --data pts --model mlp --epochs 1 --name c1 --hosts "
                   "no-such-host.invalid --heartbeat-timeout 2");
    if (strstr(errtext, "without cluster mode")) {
        ok(1, "# SKIP built without cluster mode");
        return;
    }
    is_int(rc, 1, "a cluster run on a host that does not resolve fails");
    like(errtext, "no-such-host.invalid", "naming the host");
    is_int(nnlab("runs c1"), 1, "and leaves no run record");
    is_int(nnlab("runs --json"), 0, "runs");
    ok(!strstr(out, "\"c1\""), "c1 is not listed");
    like(out, "\"r2\"", "the other runs are");
}

int main(void)
{
    nnlab_cli_setup("usage", "store/nnlab.db");
    setenv("HOME", dir, 1); /* no ssh config or known_hosts of the user's */

    test_options();
    test_replaced_data();
    test_unresolved_host();

    nnlab_cli_cleanup();
    return done_testing();
}
