/* Cluster mode end to end, through the real binary and a private sshd on 127.0.0.1
 * (tests/sshd.h): `hosts check`, training on 1, 2 and 3 workers with the binary uploaded to a
 * host that has no nnlab, the same loss curve on each, bytes per worker per step within
 * 2(N-1)/N of the parameter bytes plus framing, bf16 compression, the partition cache, gradient
 * clipping and batch normalisation on 2 workers (the curves of 1 worker), a plateau schedule on
 * 2 workers (the curve of 1 worker), --insecure-plaintext (the same curve as sealed frames, fewer
 * bytes), early stopping (after the epoch a local run stops), refusals
 * (changed host key, unknown host key, failed authentication, unresolvable host, missing remote
 * binary) each naming host and step, Ctrl-C, and no worker left behind after any of it.
 * (Connections without the run secret are refused in test_wire and test_allreduce.) */
#include <glob.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cluster_util.h"
#include "nnlab/model.h"
#include "nnlab/spec.h"
#include "nnlab/wire.h"
#include "tap.h"

enum { SIDE = 12, NTRAIN = 600, EPOCHS = 2, BATCH = 32 };

/* The epochs the done line in out reports; -1 without one. */
static int done_epochs(void)
{
    const char *done = strstr(out, "\"event\":\"done\"");
    const char *e = done ? strstr(done, "\"epochs\":") : NULL;
    return e ? atoi(e + 9) : -1;
}

static const char spec_text[] = "fc1: dense 24\nrelu\nfc2: dense N\n";
static const char bn_text[] = "c1: conv 4 3x3 pad=1 bias=no\nb1: batchnorm\nrelu\n"
                              "pool: globalavgpool\nfc: dense N\n";

static const char *train_args(void)
{
    static char a[1024];
    snprintf(a, sizeof a,
             "--json train --data syn --model '%s/spec' --epochs %d --batch %d --seed 3 "
             "--ssh-config '%s/ssh_config'",
             sd.dir, EPOCHS, BATCH, sd.dir);
    return a;
}

int main(void)
{
    const char *why;
    char path[600];
    double base[EPOCHS] = {0}, got[EPOCHS] = {0};

    why = cluster_start();
    if (why)
        skip_all("%s", why);
    sshd_write_quadrants(&sd, NTRAIN, SIDE);
    sshd_write(sd.dir, "spec", spec_text);
    is_int(nnlab("import syn '%s/data' --val 0.1", sd.dir), 0, "import a synthetic dataset");

    /* hosts check before anything is there. */
    is_int(nnlab("hosts check node1,node2 --ssh-config '%s/ssh_config'", sd.dir), 0,
           "hosts check connects: %s", errtext);
    like(out, "would upload", "it says the binary would be uploaded");

    /* One worker; the binary is uploaded. */
    is_int(nnlab("%s --hosts node1", train_args()), 0, "1 worker trains: %s", errtext);
    is_int(losses(base, EPOCHS), EPOCHS, "one epoch line per epoch");
    like(out, "\"workers\":[{\"host\":\"node1\"", "the epoch lines carry per-worker fields");
    like(out, "\"comm_fraction\":", "the done line carries comm_fraction");
    glob_t gl;
    snprintf(path, sizeof path, "%s/home/.cache/nnlab/bin/*/nnlab", sd.dir);
    ok(glob(path, 0, NULL, &gl) == 0 && gl.gl_pathc == 1, "the binary was uploaded to the cache");
    globfree(&gl);
    ok(sshd_no_workers_left(&sd, 5), "no worker is left after the run");
    is_int(nnlab("hosts check node1 --ssh-config '%s/ssh_config'", sd.dir), 0, "hosts check");
    like(out, "ready", "now the uploaded binary is ready");
    /* What a host answers is printed with its control characters escaped: a remote nnlab whose
     * version would retitle and clear the terminal. */
    sshd_write(sd.dir, "evil-nnlab", "#!/bin/sh\nprintf 'nnlab 9\\033]0;owned\\007\\033[2J\\n'\n");
    snprintf(path, sizeof path, "chmod +x '%s/evil-nnlab'", sd.dir);
    ok(system(path) == 0, "a remote nnlab with a hostile version");
    is_int(nnlab("hosts check node1 --ssh-config '%s/ssh_config' --remote-nnlab '%s/evil-nnlab'",
                 sd.dir, sd.dir),
           0, "hosts check runs it: %s", errtext);
    ok(!strchr(out, '\033') && strstr(out, "nnlab 9\\e]0;owned\\x07\\e[2J"),
       "its version escaped: %s", out);

    /* 2 and 3 workers: the same mathematics. */
    struct nl_spec *spec;
    struct nl_model *m = NULL;
    struct nl_error err = {0};
    nl_spec_parse(&spec, spec_text, "spec", NULL, NULL, &err);
    nl_model_build(&m, spec, (struct nl_shape){1, SIDE, SIDE}, 4, &err);
    const double pbytes = (double)m->nparams * 4.0;
    const long iters = (540 + BATCH - 1) / BATCH; /* 540 train samples after --val 0.1 */
    nl_model_free(m);
    nl_spec_free(spec);
    for (int n = 2; n <= 3; n++) {
        is_int(
            nnlab("%s --hosts %s", train_args(), n == 2 ? "node1:1,node2:1" : "node1,node2,node3"),
            0, "%d workers train: %s", n, errtext);
        const int nl = losses(got, EPOCHS);
        ok(nl == EPOCHS && fabs(got[0] - base[0]) < 1e-4 &&
               fabs(got[EPOCHS - 1] - base[EPOCHS - 1]) < 1e-4,
           "%d workers: the loss curve matches 1 worker's (%.6f %.6f vs %.6f %.6f)", n, got[0],
           got[EPOCHS - 1], base[0], base[EPOCHS - 1]);
        unsigned long long b[3];
        int nb = done_bytes(b, 3);
        is_int(nb, n, "%d workers report bytes_sent", n);
        /* Each frame sealed: header and tags (net/wire.c). */
        const double frame = NL_WIRE_SEALED_HEADER + NL_WIRE_TAG;
        const double bound = 1.02 * 2.0 * (n - 1) / n * pbytes + 2.0 * (n - 1) * frame;
        double most = 0;
        for (int i = 0; i < nb; i++)
            most = fmax(most, (double)b[i] / (double)(EPOCHS * iters));
        ok(most > 0 && most <= bound, "%d workers: %.0f bytes per worker per step (bound %.0f)", n,
           most, bound);
        ok(sshd_no_workers_left(&sd, 5), "no worker is left after the %d-worker run", n);
        is_int(sshd_db_int(
                   &sd, "SELECT count(*) FROM worker_steps WHERE run = (SELECT max(id) FROM runs)"),
               (long long)n * EPOCHS * iters, "%d workers: every worker's every step is stored", n);
    }
    /* 1 + 2 + 3 partitions, each under its content hash. */
    snprintf(path, sizeof path, "%s/home/.cache/nnlab/data/*", sd.dir);
    int g1 = glob(path, 0, NULL, &gl) == 0 ? (int)gl.gl_pathc : 0;
    globfree(&gl);
    is_int(g1, 6, "partitions are cached by content hash");
    is_int(nnlab("%s --hosts node1,node2", train_args()), 0, "a repeated run");
    double base2[EPOCHS] = {0};
    losses(base2, EPOCHS);
    int g2 = glob(path, 0, NULL, &gl) == 0 ? (int)gl.gl_pathc : 0;
    globfree(&gl);
    is_int(g2, 6, "reuses the cached partitions");

    /* On a trusted network, frames unsealed: the same bits, fewer bytes. */
    unsigned long long sealed_b[2] = {0}, plain_b[2] = {0};
    done_bytes(sealed_b, 2);
    is_int(nnlab("%s --hosts node1,node2 --insecure-plaintext", train_args()), 0,
           "--insecure-plaintext trains on 2 workers: %s", errtext);
    ok(losses(got, EPOCHS) == EPOCHS && got[0] == base2[0] && got[EPOCHS - 1] == base2[EPOCHS - 1],
       "the same loss curve as sealed (%.9f %.9f)", got[0], got[EPOCHS - 1]);
    ok(done_bytes(plain_b, 2) == 2 && plain_b[0] < sealed_b[0] && plain_b[1] < sealed_b[1],
       "and fewer bytes (%llu against %llu sealed)", plain_b[0], sealed_b[0]);
    is_int(nnlab("%s --insecure-plaintext", train_args()), 2,
           "--insecure-plaintext without hosts is a usage error");
    like(errtext, "cluster options need --hosts", "the message: %s", errtext);

    is_int(nnlab("%s --hosts node1,node2 --compress bf16 --name bf16", train_args()), 0,
           "bf16 compression trains: %s", errtext);
    const int nbf = losses(got, EPOCHS);
    ok(nbf == EPOCHS && fabs(got[0] - base[0]) < 0.05,
       "bf16 stays near the fp32 curve (%.4f vs %.4f)", got[0], base[0]);

    /* Compression is one of the run's settings: resumed without --compress, the run exchanges
     * bf16 still (a step sends the bytes its first epoch's steps sent), and --compress none
     * with --resume changes it. */
    static const char step_bytes[] =
        "SELECT bytes_sent FROM worker_steps JOIN runs ON runs.id = run "
        "WHERE name = 'bf16' AND worker = 0 AND epoch = %d LIMIT 1";
    ok(sshd_db_int(&sd, "SELECT count(*) FROM runs WHERE name = 'bf16' AND settings LIKE "
                        "'%%\"compress\":\"bf16\"%%'") == 1,
       "bf16 compression is stored with the run");
    is_int(nnlab("--json train --resume bf16 --epochs %d --hosts node1,node2 --ssh-config "
                 "'%s/ssh_config'",
                 EPOCHS + 1, sd.dir),
           0, "the bf16 run resumed on the cluster: %s", errtext);
    const long long first = sshd_db_int(&sd, step_bytes, 1);
    ok(first > 0 && sshd_db_int(&sd, step_bytes, EPOCHS + 1) == first,
       "resumed, a step sends what a first epoch's step sent (%lld bytes, bf16)", first);
    is_int(nnlab("--json train --resume bf16 --epochs %d --hosts node1,node2 --compress none "
                 "--ssh-config '%s/ssh_config'",
                 EPOCHS + 2, sd.dir),
           0, "resumed again with --compress none: %s", errtext);
    ok(sshd_db_int(&sd, step_bytes, EPOCHS + 2) > first, "now a step sends fp32's (%lld bytes)",
       sshd_db_int(&sd, step_bytes, EPOCHS + 2));
    ok(sshd_db_int(&sd, "SELECT count(*) FROM runs WHERE name = 'bf16' AND settings LIKE "
                        "'%%\"compress\":\"none\"%%'") == 1,
       "and the run's settings say so");

    /* Clipping: 2 workers clip the global gradient as 1 worker does. */
    double clip1[EPOCHS] = {0}, clip2[EPOCHS] = {0};
    is_int(nnlab("%s --hosts node1 --clip-norm 0.1 --clip-value 0.01", train_args()), 0,
           "clipping on 1 worker: %s", errtext);
    const int nc1 = losses(clip1, EPOCHS);
    is_int(nnlab("%s --hosts node1,node2 --clip-norm 0.1 --clip-value 0.01", train_args()), 0,
           "clipping on 2 workers: %s", errtext);
    const int nc2 = losses(clip2, EPOCHS);
    ok(nc1 == EPOCHS && nc2 == EPOCHS && fabs(clip1[0] - base[0]) > 1e-3,
       "clipping changes the curve (%.4f against %.4f)", clip1[0], base[0]);
    ok(nc2 == EPOCHS && fabs(clip2[0] - clip1[0]) < 1e-4 &&
           fabs(clip2[EPOCHS - 1] - clip1[EPOCHS - 1]) < 1e-4,
       "2 clipping workers follow 1 (%.6f %.6f vs %.6f %.6f)", clip2[0], clip2[EPOCHS - 1],
       clip1[0], clip1[EPOCHS - 1]);

    /* Batch normalisation: 2 workers of 1 core normalise the shards 1 worker of 2 cores does
     * (with batch 36 every step but the last, of 1 sample, splits alike) and keep the running
     * statistics of the global batch. */
    sshd_write(sd.dir, "bnspec", bn_text);
    double bn1[EPOCHS] = {0}, bn2[EPOCHS] = {0};
    for (int n = 1; n <= 2; n++) {
        is_int(nnlab("--json train --data syn --model '%s/bnspec' --epochs %d --batch 36 --seed 3 "
                     "--ssh-config '%s/ssh_config' --hosts %s",
                     sd.dir, EPOCHS, sd.dir, n == 1 ? "node1:2" : "node1:1,node2:1"),
               0, "batch normalisation on %d worker%s: %s", n, n > 1 ? "s" : "", errtext);
        losses(n == 1 ? bn1 : bn2, EPOCHS);
    }
    ok(bn1[0] > 0 && fabs(bn2[0] - bn1[0]) < 1e-4 && fabs(bn2[EPOCHS - 1] - bn1[EPOCHS - 1]) < 1e-4,
       "2 workers follow 1 with batch normalisation (%.6f %.6f vs %.6f %.6f)", bn2[0],
       bn2[EPOCHS - 1], bn1[0], bn1[EPOCHS - 1]);
    like(out, "\"val_accuracy\":0.", "and validate with the running statistics");

    /* Fine-tuning on two workers: they start from the run's weights, freeze fc1, and exchange
     * only fc2's parameters (24*4+4 floats, padded to 112 for alignment). */
    is_int(nnlab("%s --hosts node1 --name base1", train_args()), 0, "a base run: %s", errtext);
    is_int(nnlab("%s --hosts node1,node2 --init base1 --freeze fc1", train_args()), 0,
           "fine-tuning with fc1 frozen on 2 workers: %s", errtext);
    unsigned long long fb[2];
    is_int(done_bytes(fb, 2), 2, "both workers report bytes_sent");
    const double frozen_bound =
        1.02 * 2.0 * 1 / 2 * (112 * 4.0) + 2.0 * (NL_WIRE_SEALED_HEADER + NL_WIRE_TAG);
    const double frozen_most = fmax((double)fb[0], (double)fb[1]) / (double)(EPOCHS * iters);
    ok(frozen_most > 0 && frozen_most <= frozen_bound,
       "frozen layers cost no bytes: %.0f bytes per worker per step (bound %.0f, %.0f unfrozen)",
       frozen_most, frozen_bound, 1.02 * pbytes / 2.0 * 2.0);
    is_int(nnlab("%s --hosts node1 --init base1 --freeze fc1", train_args()), 0,
           "and on one worker");
    int n1 = losses(got, EPOCHS);
    ok(n1 == EPOCHS && got[0] < base[0] - 0.05,
       "a worker starts from the run's weights: first-epoch loss %.4f, against %.4f from "
       "scratch",
       got[0], base[0]);

    /* Following validation accuracy, which only the driver measures. A plateau schedule of
     * patience 1 and gamma 0.1 lowers the rate after epoch 2 (validation accuracy is 1 from the
     * first epoch on): 2 workers follow 1 worker's curve, which leaves the constant rate's. */
    double pl1[4] = {0}, pl2[4] = {0}, cst[4] = {0};
    const char *slow = "--json train --data syn --model '%s/spec' --epochs 4 --batch 32 --seed 3 "
                       "--lr 0.002 --ssh-config '%s/ssh_config' --hosts %s --schedule %s";
    is_int(nnlab(slow, sd.dir, sd.dir, "node1", "constant"), 0, "a constant rate on 1 worker: %s",
           errtext);
    const int ncst = losses(cst, 4);
    is_int(nnlab(slow, sd.dir, sd.dir, "node1", "plateau:1:0.1"), 0,
           "a plateau schedule on 1 worker: %s", errtext);
    const int npl1 = losses(pl1, 4);
    is_int(nnlab(slow, sd.dir, sd.dir, "node1:1,node2:1", "plateau:1:0.1"), 0,
           "a plateau schedule on 2 workers: %s", errtext);
    const int npl2 = losses(pl2, 4);
    ok(ncst == 4 && npl1 == 4 && fabs(pl1[1] - cst[1]) < 1e-6 && pl1[2] > cst[2] + 0.01,
       "the plateau lowers the rate after epoch 2 (epoch 3's loss %.4f, at a constant rate %.4f)",
       pl1[2], cst[2]);
    ok(npl2 == 4 && fabs(pl2[0] - pl1[0]) < 1e-4 && fabs(pl2[2] - pl1[2]) < 1e-4 &&
           fabs(pl2[3] - pl1[3]) < 1e-4,
       "2 workers follow 1 under the plateau schedule (%.6f %.6f vs %.6f %.6f)", pl2[2], pl2[3],
       pl1[2], pl1[3]);
    ok(sshd_no_workers_left(&sd, 5), "no worker is left after the plateau runs");

    /* Early stopping: a slow rate, validation accuracy rising epoch by epoch past 0.7; a local
     * run (another data order, the same mathematics), 1 worker and 2 workers stop after the same
     * epoch, well before the 10th. */
    const char *early = "--json train --data syn --model '%s/spec' --epochs 10 --batch 32 --seed 3 "
                        "--lr 0.001 --momentum 0 --schedule constant %s %s";
    char hosts_arg[700];
    int stop_at[3] = {0};
    for (int n = 0; n <= 2; n++) {
        snprintf(hosts_arg, sizeof hosts_arg, "--ssh-config '%s/ssh_config' --hosts %s", sd.dir,
                 n == 1 ? "node1" : "node1:1,node2:1");
        is_int(nnlab(early, sd.dir, "--early-stop-acc 0.7", n == 0 ? "" : hosts_arg), 0,
               "--early-stop-acc 0.7 %s: %s",
               n == 0   ? "locally"
               : n == 1 ? "on 1 worker"
                        : "on 2 workers",
               errtext);
        stop_at[n] = done_epochs();
        like(out, "\"stopped_early\":true", "it stops early");
    }
    ok(stop_at[0] > 1 && stop_at[0] < 10, "the local run stops after epoch %d", stop_at[0]);
    is_int(stop_at[1], stop_at[0], "1 worker stops after the same epoch");
    is_int(stop_at[2], stop_at[0], "2 workers stop after the same epoch");
    is_int(sshd_db_int(&sd, "SELECT count(*) FROM epochs WHERE run = (SELECT max(id) FROM runs)"),
           stop_at[0], "the run stores %d epochs", stop_at[0]);
    /* --patience: validation accuracy is 1 after epoch 1 at the default rate, so a patience of 2
     * ends the run after epoch 3. */
    is_int(nnlab("%s --hosts node1:1,node2:1 --epochs 6 --patience 2", train_args()), 0,
           "--patience 2 on 2 workers: %s", errtext);
    is_int(done_epochs(), 3, "stops after epoch 3");
    ok(sshd_no_workers_left(&sd, 5), "no worker is left after the early stops");
    /* A regression table (a linear function of two numbers and a category, with noise): 2
     * workers follow 1 worker's loss curve, and the cluster's test R2 is the local run's within
     * 0.02 (a local run shuffles its data in another order). */
    {
        cluster_write_regression();
        is_int(nnlab("import reg '%s/reg.csv' --task regression --val 0.1 --test 0.2", sd.dir), 0,
               "a regression table");
        double r1[3] = {0}, r2[3] = {0}, test[3] = {0};
        const char *reg = "--json train --data reg --model '%s/spec' --epochs 3 --batch 32 "
                          "--seed 3 --optim adam --lr 0.01 --loss huber %s%s%s";
        for (int n = 0; n <= 2; n++) {
            is_int(nnlab(reg, sd.dir, n ? "--ssh-config '" : "", n ? sd.dir : "",
                         n == 0   ? ""
                         : n == 1 ? "/ssh_config' --hosts node1"
                                  : "/ssh_config' --hosts node1:1,node2:1"),
                   0, "regression %s: %s",
                   n == 0   ? "locally"
                   : n == 1 ? "on 1 worker"
                            : "on 2",
                   errtext);
            if (n == 1)
                losses(r1, 3);
            if (n == 2)
                losses(r2, 3);
            test[n] = json_field(out, "test_r2");
        }
        like(out, "\"val_r2\":", "a cluster regression run reports validation R2");
        ok(r1[0] > 0 && fabs(r2[0] - r1[0]) < 1e-4 && fabs(r2[2] - r1[2]) < 1e-4,
           "2 workers follow 1 on a regression table (%.6f %.6f vs %.6f %.6f)", r2[0], r2[2], r1[0],
           r1[2]);
        ok(test[0] > 0.9 && fabs(test[1] - test[0]) < 0.02 && fabs(test[2] - test[0]) < 0.02,
           "the cluster's test R2 is the local run's within 0.02 (%.4f, %.4f; local %.4f)", test[1],
           test[2], test[0]);
    }

    /* Without a validation split a judged run follows training accuracy, which a checkpoint
     * within an epoch cannot hold: as a local run, it checkpoints at epoch ends only (600
     * samples, 19 steps an epoch; the two latest checkpoints are kept). */
    is_int(nnlab("import synall '%s/data'", sd.dir), 0,
           "the data again, without a validation "
           "split");
    long long mid[2] = {-1, -1};
    for (int judged = 0; judged <= 1; judged++) {
        is_int(nnlab("--json train --data synall --model '%s/spec' --epochs 2 --batch 32 --seed 3 "
                     "--ssh-config '%s/ssh_config' --hosts node1:1,node2:1 --checkpoint-every 5 "
                     "%s",
                     sd.dir, sd.dir, judged ? "--patience 5" : ""),
               0, "%s on 2 workers without a validation split: %s",
               judged ? "--patience" : "no early stopping", errtext);
        mid[judged] = sshd_db_int(
            &sd, "SELECT count(*) FROM checkpoints WHERE iteration %% 19 != 0 AND run = "
                 "(SELECT max(id) FROM runs)");
    }
    ok(mid[0] > 0 && mid[1] == 0,
       "a judged run without a validation split keeps no checkpoint within an epoch (%lld, "
       "against %lld for one that is not judged)",
       mid[1], mid[0]);

    /* Refusals, each naming the host and the step. */
    is_int(nnlab("%s --hosts node1 --ssh-config '%s/ssh_config_badkey'", train_args(), sd.dir), 1,
           "a changed host key is refused");
    like(errtext, "node1: host key:", "the message names host and step: %s", errtext);
    like(errtext, "differs", "and says the key differs");
    is_int(nnlab("hosts check node1 --ssh-config '%s/ssh_config_unknown'", sd.dir), 1,
           "an unknown host key is refused");
    like(errtext, "not in known_hosts", "the message: %s", errtext);
    is_int(nnlab("hosts check node1 --accept-new-host-keys --ssh-config '%s/ssh_config_unknown'",
                 sd.dir),
           0, "--accept-new-host-keys accepts it: %s", errtext);
    snprintf(path, sizeof path, "%s/empty_known_hosts", sd.dir);
    struct stat st;
    ok(stat(path, &st) == 0 && st.st_size > 0, "and records it in known_hosts");
    is_int(nnlab("%s --hosts node1 --ssh-config '%s/ssh_config_badauth'", train_args(), sd.dir), 1,
           "a key the host does not accept is refused");
    like(errtext, "node1: auth:", "the message names host and step: %s", errtext);
    is_int(nnlab("hosts check no-such-host.invalid --ssh-config '%s/ssh_config'", sd.dir), 1,
           "an unresolvable host fails");
    like(errtext, "no-such-host.invalid: resolve:", "the message: %s", errtext);
    is_int(nnlab("%s --hosts node1 --remote-nnlab /nonexistent/nnlab", train_args()), 1,
           "a missing remote binary fails");
    like(errtext, "node1: launch:", "the message: %s", errtext);
    /* A binary that cannot start there: the loader's complaint becomes a package to install. */
    sshd_write(sd.dir, "broken-nnlab",
               "#!/bin/sh\necho 'nnlab: error while loading shared libraries: "
               "libopenblas.so.0: cannot open shared object file: No such file or directory' "
               ">&2\nexit 127\n");
    snprintf(path, sizeof path, "%s/broken-nnlab", sd.dir);
    chmod(path, 0755);
    is_int(nnlab("%s --hosts node1 --remote-nnlab '%s'", train_args(), path), 1,
           "a binary missing a library fails");
    like(errtext, "libopenblas.so.0 is missing there (Debian package libopenblas0",
         "the message names the library and its package: %s", errtext);
    /* A worker that fails: its stderr comes back prefixed with the host, and the first failing
     * host's message ends the run. 192.0.2.1 (TEST-NET-1) is no address of this machine. */
    is_int(nnlab("%s --hosts node1,node2 --bind 192.0.2.1", train_args()), 1,
           "a worker that cannot listen fails the run");
    like(errtext, "node1: nnlab worker: cannot listen on 192.0.2.1",
         "its stderr comes back prefixed with the host: %s", errtext);
    like(errtext, "nnlab: node1: the worker exited (status 1): nnlab worker: cannot listen",
         "the run's error names the first failing host");
    ok(sshd_no_workers_left(&sd, 5), "no worker is left after the failures");

    /* A hostfile, with a comment and a host listed twice. */
    sshd_write(sd.dir, "hosts", "# the lab\nnode1:1\n\nnode1:1  # again: a second worker\n");
    is_int(nnlab("%s --hostfile '%s/hosts'", train_args(), sd.dir), 0,
           "a hostfile naming one host twice trains: %s", errtext);
    const int nhf = losses(got, EPOCHS);
    ok(nhf == EPOCHS && fabs(got[EPOCHS - 1] - base[EPOCHS - 1]) < 1e-4, "on the same loss curve");
    sshd_write(sd.dir, "badhosts", "node1\nnode2:zero\n");
    is_int(nnlab("%s --hostfile '%s/badhosts'", train_args(), sd.dir), 2,
           "a malformed hostfile is a usage error");
    like(errtext, "badhosts:2", "naming the file and line: %s", errtext);

    /* The driver killed outright: its workers see their stdin end and exit. */
    for (int round = 0; round < 2; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            char db[600], spec_path[600], cfg[600];
            snprintf(db, sizeof db, "%s/db", sd.dir);
            snprintf(spec_path, sizeof spec_path, "%s/spec", sd.dir);
            snprintf(cfg, sizeof cfg, "%s/ssh_config", sd.dir);
            freopen("/dev/null", "w", stdout);
            freopen("/dev/null", "w", stderr);
            unsetenv("SSH_AUTH_SOCK");
            execl(bin, bin, "--db", db, "--json", "train", "--data", "syn", "--model", spec_path,
                  "--epochs", "1000", "--batch", "4", "--hosts", "node1,node2", "--ssh-config", cfg,
                  (char *)NULL);
            _exit(127);
        }
        int up = 0;
        for (int i = 0; i < 100 && !up; i++) {
            usleep(100000);
            up = sshd_workers_alive(&sd) == 2;
        }
        ok(up, "a long run has its 2 workers up");
        usleep(300000);
        int status;
        if (round == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            ok(sshd_no_workers_left(&sd, 5), "the driver killed: no worker is left");
            continue;
        }
        kill(pid, SIGINT);
        waitpid(pid, &status, 0);
        is_int(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 130, "Ctrl-C ends it with status 130");
        ok(sshd_no_workers_left(&sd, 5), "and no worker is left");
    }

    sshd_stop(&sd);
    return done_testing();
}
