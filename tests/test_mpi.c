/* MPI mode end to end, through the real binary under Open MPI's mpirun (--oversubscribe, on
 * 127.0.0.1): 1, 2 and 3 ranks reach the loss curve of one local run of the same seed and global
 * batch; an MPI run and an SSH run (the private sshd of tests/sshd.h) of a seed end with
 * bit-identical weights; bytes per rank per step within 1.02x of 2(N-1)/N of the trainable
 * bytes, frozen layers costing nothing and bf16 about half; the run is recorded with each rank's
 * worker steps; a run of 3 ranks resumed on 2; a rank killed with SIGKILL ends the job within
 * the heartbeat timeout, no rank left, the run resumable; and the misconfigurations: --mpi
 * outside a launcher, singletons, --mpi with --hosts, ranks of different versions.
 *
 * NNLAB_MPIRUN replaces the launcher's command (default: Open MPI's, below), to run the test
 * against another MPI: NNLAB_MPIRUN=mpirun.mpich with a build made with -Dmpi_pkg=mpich
 * (README, "MPICH"). NNLAB_MPI_KILLS=N runs the kill check alone, N times (each with its
 * launcher's stderr as a diagnostic, and how many runs ended failed), for a launcher whose
 * handling of a dead rank is in doubt: with NNLAB_MPIRUN="taskset -c 0 mpirun ..." every rank
 * shares one core, as on a loaded host. The kill check runs with Open MPI's defaults, its
 * shared-memory single copy (CMA) included. */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nnlab-config.h"
#include "nnlab/model.h"
#include "nnlab/spec.h"
#if NNLAB_HAVE_MPI
#include <mpi.h>

#include "net/transport_mpi.h"
#include "nnlab/allreduce.h"
#include "nnlab/mpi.h"
#include "nnlab/optim.h"
#endif
#include "cluster_util.h"
#include "tap.h"

/* 541 training samples after --val 0.1. */
enum { SIDE = 12, NTRAIN = 600, NTRAIN_TRAIN = 541, EPOCHS = 2, BATCH = 32 };

static int have_sshd;

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* nnlab ARGS after PREFIX. */
static int nnlab_under(const char *prefix, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int nnlab_under(const char *prefix, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int st = cluster_vrun(prefix, fmt, ap);
    va_end(ap);
    return st;
}

/* The launcher's command: NNLAB_MPIRUN, or Open MPI's mpirun on one host. */
static const char *mpirun = "mpirun --oversubscribe --bind-to none";

/* nnlab ARGS under mpirun -np n. */
static int mpi(int n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int mpi(int n, const char *fmt, ...)
{
    char prefix[128];
    va_list ap;
    snprintf(prefix, sizeof prefix, "%s -np %d", mpirun, n);
    va_start(ap, fmt);
    int st = cluster_vrun(prefix, fmt, ap);
    va_end(ap);
    return st;
}

static const char spec_text[] = "fc1: dense 24\nrelu\nfc2: dense N\n";

static const char *train_args(const char *name, int epochs)
{
    static char a[1024];
    snprintf(a, sizeof a,
             "--json train --data syn --model '%s/spec' --epochs %d --batch %d --seed 3 "
             "--threads 1 --name %s",
             sd.dir, epochs, BATCH, name);
    return a;
}

/* Whether two files hold the same bytes (and are not empty). */
static int same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int ca = 0, cb = 0;
    long n = 0;
    while (fa && fb && ca == cb && ca != EOF) {
        ca = fgetc(fa);
        cb = fgetc(fb);
        n++;
    }
    const int same = fa && fb && ca == cb && n > 1;
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

/* The process ids of pid's descendants (MPICH's mpirun starts the ranks under a proxy). */
static int children(long pid, long *kids, int max)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) && n < max) {
        long p = strtol(e->d_name, NULL, 10);
        for (long a = p; a > 1 && n < max; a = sshd_parent_of(a))
            if (sshd_parent_of(a) == pid) {
                kids[n++] = p;
                break;
            }
    }
    if (d)
        closedir(d);
    return n;
}

/* Whether process pid has NAME=VALUE in its environment. */
static int has_env(long pid, const char *name_value)
{
    char path[64], buf[1 << 15];
    snprintf(path, sizeof path, "/proc/%ld/environ", pid);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
        if (strcmp(buf + i, name_value) == 0)
            return 1;
    return 0;
}

/* A cluster's data order is not a local run's (net/partition.c): a step's global batch holds the
 * same samples on any number of members, but only a run whose batch is the whole train split
 * sees a local run's batches. So N ranks follow one rank's curve, and with full batches a local
 * run's. */
static void check_local_and_ranks(double *base, long iters, double tbytes)
{
    double loc[3] = {0}, full[3] = {0};
    char a[1200];
    snprintf(a, sizeof a, "%s --batch %d", train_args("localfull", 3), NTRAIN_TRAIN);
    is_int(nnlab("%s", a), 0, "a local full-batch run trains: %s", errtext);
    is_int(losses(loc, 3), 3, "one epoch line per epoch");
    snprintf(a, sizeof a, "%s --batch %d --mpi", train_args("mpifull", 3), NTRAIN_TRAIN);
    is_int(mpi(3, "%s", a), 0, "3 ranks, full batches: %s", errtext);
    const int nf = losses(full, 3);
    ok(nf == 3 && fabs(full[0] - loc[0]) < 1e-5 && fabs(full[2] - loc[2]) < 1e-4,
       "3 ranks, full batches: the local run's loss curve (%.6f %.6f vs %.6f %.6f)", full[0],
       full[2], loc[0], loc[2]);
    for (int n = 1; n <= 3; n++) {
        char name[16];
        double got[EPOCHS] = {0};
        unsigned long long b[4] = {0};
        snprintf(name, sizeof name, "mpi%d", n);
        is_int(mpi(n, "%s --mpi", train_args(name, EPOCHS)), 0, "%d ranks train: %s", n, errtext);
        const int nl = losses(got, EPOCHS);
        if (n == 1)
            memcpy(base, got, sizeof got);
        ok(nl == EPOCHS && fabs(got[0] - base[0]) < 1e-4 &&
               fabs(got[EPOCHS - 1] - base[EPOCHS - 1]) < 1e-4,
           "%d ranks: the loss curve of 1 (%.6f %.6f vs %.6f %.6f)", n, got[0], got[EPOCHS - 1],
           base[0], base[EPOCHS - 1]);
        is_int(done_bytes(b, 4), n, "%d ranks: the done line names each rank", n);
        const double want = 2.0 * (n - 1) / n * tbytes;
        int within = 1;
        for (int r = 0; r < n; r++) {
            const double per = (double)b[r] / (double)(EPOCHS * iters);
            within &= n == 1 ? b[r] == 0 : per >= want / 1.02 && per <= want * 1.02;
            if (n > 1)
                diag("%d ranks: rank %d sends %.0f bytes per step, 2(N-1)/N of the trainable "
                     "bytes is %.0f",
                     n, r, per, want);
        }
        ok(within, "%d ranks: bytes per rank per step within 1.02x of 2(N-1)/N of %.0f", n, tbytes);
        const long long ranks = sshd_db_int(
            &sd,
            "SELECT COUNT(DISTINCT worker) FROM worker_steps WHERE run = (SELECT id FROM runs "
            "WHERE name = '%s') AND host LIKE 'rank %%'",
            name);
        is_int(ranks, n, "%d ranks: each rank's worker steps are recorded", n);
    }
    like(out, "\"host\":\"rank 2 (", "workers are named by rank and host");
    is_int(nnlab("--json runs"), 0, "runs lists the runs");
    like(out, "\"name\":\"mpi3\"", "the MPI run is a run of the store");
}

static void check_frozen_and_bf16(long iters, double tbytes, double head_bytes)
{
    unsigned long long b[4] = {0};
    double got[EPOCHS] = {0}, base[EPOCHS] = {0};

    is_int(mpi(2, "%s --mpi --freeze fc1", train_args("frozen", EPOCHS)), 0,
           "2 ranks with fc1 frozen: %s", errtext);
    int nb = done_bytes(b, 4);
    ok(nb == 2 && fabs((double)b[0] / (double)(EPOCHS * iters) - head_bytes) <= 0.02 * head_bytes,
       "frozen layers cost nothing: %.0f bytes per step, 2(N-1)/N of fc2's is %.0f",
       nb ? (double)b[0] / (double)(EPOCHS * iters) : 0.0, head_bytes);

    is_int(mpi(1, "%s --mpi", train_args("one", EPOCHS)), 0, "1 rank again");
    losses(base, EPOCHS);
    is_int(mpi(2, "%s --mpi --compress bf16", train_args("bf16", EPOCHS)), 0,
           "2 ranks with bf16: %s", errtext);
    nb = done_bytes(b, 4);
    const double per = nb ? (double)b[0] / (double)(EPOCHS * iters) : 0.0;
    ok(nb == 2 && fabs(per - tbytes / 2.0) <= 0.02 * tbytes / 2.0,
       "bf16 halves the bytes: %.0f per step", per);
    const int nl = losses(got, EPOCHS);
    ok(nl == EPOCHS && fabs(got[0] - base[0]) < 0.05, "bf16: near the fp32 curve (%.4f vs %.4f)",
       got[0], base[0]);
}

/* Clipping by the global norm (NORM frames between the ranks) and early stopping (JUDGE from
 * rank 0 after each epoch) as on one rank. */
static void check_clip_and_judge(void)
{
    double one[EPOCHS] = {0}, two[EPOCHS] = {0};
    is_int(mpi(1, "%s --mpi --clip-norm 0.05", train_args("clip1", EPOCHS)), 0,
           "1 rank with --clip-norm: %s", errtext);
    losses(one, EPOCHS);
    is_int(mpi(3, "%s --mpi --clip-norm 0.05", train_args("clip3", EPOCHS)), 0,
           "3 ranks with --clip-norm: %s", errtext);
    const int nl = losses(two, EPOCHS);
    ok(nl == EPOCHS && fabs(two[EPOCHS - 1] - one[EPOCHS - 1]) < 1e-4,
       "3 ranks clip by the global norm as 1 does (%.6f vs %.6f)", two[EPOCHS - 1],
       one[EPOCHS - 1]);
    is_int(mpi(2, "%s --mpi --early-stop-acc 0.5", train_args("early", 4)), 0,
           "2 ranks with --early-stop-acc: %s", errtext);
    like(out, "\"stopped_early\":true", "stop early");
    like(out, "\"epochs\":1,", "after the first epoch");
}

static void check_ssh_identical(void)
{
    char a[600], b[600];
    if (!have_sshd) {
        ok(1, "# SKIP MPI vs SSH: no sshd");
        return;
    }
    is_int(nnlab("%s --hosts node1:1,node2:1 --ssh-config '%s/ssh_config'",
                 train_args("ssh2", EPOCHS), sd.dir),
           0, "2 SSH workers train: %s", errtext);
    snprintf(a, sizeof a, "%s/ssh2.safetensors", sd.dir);
    snprintf(b, sizeof b, "%s/mpi2.safetensors", sd.dir);
    is_int(nnlab("export ssh2 '%s'", a), 0, "export the SSH run: %s", errtext);
    is_int(nnlab("export mpi2 '%s'", b), 0, "export the MPI run: %s", errtext);
    ok(same_file(a, b), "an MPI run and an SSH run of a seed end with bit-identical weights");
}

/* 3 ranks train 2 epochs with adam; resumed on 2 ranks, the third epoch is that of a run of 3
 * epochs straight (on 1 rank: the same data order): the adam moments were gathered into the
 * checkpoint and re-cut into 2 slices (restarting them from zeros changes the epoch's loss by far
 * more than the 1% allowed). */
static void check_resume(void)
{
    double got[4] = {0}, base[4] = {0};
    is_int(mpi(3, "%s --mpi --optim adam --lr 0.003 --schedule constant", train_args("re", 2)), 0,
           "3 ranks train 2 epochs with adam: %s", errtext);
    is_int(mpi(1, "%s --mpi --optim adam --lr 0.003 --schedule constant", train_args("adam3", 3)),
           0, "1 rank trains 3 epochs with adam: %s", errtext);
    is_int(losses(base, 3), 3, "3 epoch lines");
    is_int(mpi(2, "--json train --resume re --epochs 3 --mpi"), 0,
           "resumed on 2 ranks to epoch 3: %s", errtext);
    const int nl = losses(got, 4);
    ok(nl == 1 && fabs(got[0] - base[2]) <= 0.01 * base[2],
       "its third epoch is the straight run's, optimizer state re-cut (%.6f vs %.6f)", got[0],
       base[2]);
    like(out, "\"epochs\":3", "the run has 3 epochs");
}

/* A 3-rank job of 400 epochs named name, under the launcher in the background. */
static pid_t start_job(const char *name)
{
    char args[1200], prefix[300];
    snprintf(args, sizeof args, "%s --mpi --heartbeat-timeout 2", train_args(name, 400));
    snprintf(prefix, sizeof prefix, "%s -np 3", mpirun);
    return cluster_start_as(prefix, "run", args);
}

/* Rank r's process of the job pid, once run name has stored an epoch; -1 after 30 s. */
static long rank_after_an_epoch(pid_t pid, const char *name, int r)
{
    char q[300], ompi[64], pmi[64];
    snprintf(q, sizeof q,
             "SELECT COUNT(*) FROM epochs WHERE run = (SELECT id FROM runs WHERE name = '%s')",
             name);
    snprintf(ompi, sizeof ompi, "OMPI_COMM_WORLD_RANK=%d", r);
    snprintf(pmi, sizeof pmi, "PMI_RANK=%d", r);
    const double t0 = mono();
    while (mono() - t0 < 30) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        if (sshd_db_int(&sd, q) < 1)
            continue;
        long kids[16];
        const int nk = children(pid, kids, 16);
        for (int i = 0; i < nk; i++)
            if (has_env(kids[i], ompi) || has_env(kids[i], pmi))
                return kids[i];
    }
    return -1;
}

/* Waits up to 20 s for the job pid (killed after that): whether it ended, its status. */
static int job_ended(pid_t pid, int *status)
{
    const double tk = mono();
    int ended = 0;
    while (mono() - tk < 20 && !ended) {
        ended = waitpid(pid, status, WNOHANG) == pid;
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    if (!ended) {
        kill(pid, SIGKILL);
        waitpid(pid, status, 0);
    }
    return ended;
}

/* A person's SIGINT to rank 0 stops the run (stopped, resumable), where the launcher's SIGTERM
 * fails it (check_kill). */
static void check_sigint(void)
{
    const pid_t pid = start_job("interrupted");
    const long r0 = rank_after_an_epoch(pid, "interrupted", 0);
    ok(r0 > 0 && kill((pid_t)r0, SIGINT) == 0, "rank 0 sent SIGINT after an epoch");
    int status = 0;
    ok(job_ended(pid, &status), "the job ends");
    cluster_outputs("run");
    is_int(nnlab("--json runs interrupted"), 0, "runs shows it");
    ok(strstr(out, "\"status\":\"stopped\"") != NULL, "the run is stopped: %.200s", out);
}

/* Kills rank 1 of a job of run name after its first epoch: 1 when the run ended failed. */
static int check_kill(const char *name)
{
    const pid_t pid = start_job(name);
    /* After the first epoch, kill rank 1. */
    const long victim = rank_after_an_epoch(pid, name, 1);
    ok(victim > 0 && kill((pid_t)victim, SIGKILL) == 0, "rank 1 killed after an epoch");
    const double tk = mono();
    int status = 0;
    const int ended = job_ended(pid, &status);
    ok(ended, "the job ended %.1f s after the kill (heartbeat timeout 2 s)", mono() - tk);
    cluster_outputs("run");
    ok(!WIFEXITED(status) || WEXITSTATUS(status) != 0, "with a failure status");
    if (getenv("NNLAB_MPI_KILLS") || !strstr(errtext, "the MPI launcher ended the job"))
        diag("the launcher ended %s %d: %.3000s", WIFEXITED(status) ? "with status" : "by signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), errtext);
    /* Open MPI's launcher ends the others with SIGTERM, which rank 0 takes for the job's end
     * and records as a failure. MPICH's Hydra ends every rank at once, before rank 0 can record
     * anything: its run lists as interrupted (its process gone), resumable all the same. */
    const int hydra = strstr(mpirun, "mpich") != NULL;
    if (hydra)
        diag("under %s a rank's death ends rank 0 at once: the run is interrupted", mpirun);
    else
        like(errtext, "the MPI launcher ended the job", "rank 0 says why: %.300s", errtext);
    long kids[16];
    ok(children(pid, kids, 16) == 0, "no rank is left");
    const long long done =
        sshd_db_int(&sd, "SELECT COUNT(*) FROM runs WHERE name = '%s' AND status = 'done'", name);
    is_int(done, 0, "the run is not done");
    is_int(nnlab("--json runs %s", name), 0, "runs shows it");
    /* The launcher ends the other ranks with SIGTERM: rank 0 takes it for the job's end, not a
     * person's stop, and records the run as failed. */
    const int failed = strstr(out, "\"status\":\"failed\"") != NULL;
    ok(failed || (hydra && strstr(out, "\"status\":\"interrupted\"")),
       "the run is %s, so resumable: %.200s", hydra ? "failed or interrupted" : "failed", out);
    const long long at = sshd_db_int(&sd,
                                     "SELECT MAX(epoch) FROM checkpoints WHERE run = "
                                     "(SELECT id FROM runs WHERE name = '%s')",
                                     name);
    is_int(mpi(2, "--json train --resume %s --epochs %lld --mpi", name, at + 1), 0,
           "it resumes on 2 ranks from epoch %lld: %s", at, errtext);
    like(out, "\"event\":\"done\"", "and finishes");
    return failed;
}

/* --mpi-exchange collective: MPI_Ireduce_scatter and MPI_Iallgatherv sum in MPI's order, so the
 * loss curve is p2p's within float rounding (not bit-identical), on 3 ranks, synchronous and
 * with --clip-norm (the norms gathered too); each rank accounts for the bytes the frames would
 * carry. bf16 does not go with it. */
static void check_collective(const double *base, long iters, double tbytes)
{
    double p2p[EPOCHS], coll[EPOCHS], clip[2][EPOCHS];
    unsigned long long b[4];
    is_int(mpi(3, "%s --mpi --mpi-exchange p2p", train_args("p2p3", EPOCHS)), 0,
           "3 ranks, --mpi-exchange p2p: %s", errtext);
    const int np = losses(p2p, EPOCHS);
    is_int(mpi(3, "%s --mpi --mpi-exchange collective", train_args("coll3", EPOCHS)), 0,
           "3 ranks, --mpi-exchange collective: %s", errtext);
    const int nc = losses(coll, EPOCHS);
    const int nb = done_bytes(b, 4);
    ok(np == EPOCHS && nc == EPOCHS && fabs(p2p[0] - base[0]) < 1e-4 &&
           fabs(coll[0] - p2p[0]) <= 1e-4 * fabs(p2p[0]) + 1e-6 &&
           fabs(coll[EPOCHS - 1] - p2p[EPOCHS - 1]) <= 1e-4 * fabs(p2p[EPOCHS - 1]) + 1e-6,
       "collective follows p2p within float rounding (%.7f %.7f vs %.7f %.7f)", coll[0],
       coll[EPOCHS - 1], p2p[0], p2p[EPOCHS - 1]);
    double over[EPOCHS] = {0};
    is_int(mpi(3, "%s --mpi --mpi-exchange collective --overlap on", train_args("coll3o", EPOCHS)),
           0, "3 ranks, --mpi-exchange collective --overlap on: %s", errtext);
    const int no = losses(over, EPOCHS);
    ok(no == EPOCHS && fabs(over[0] - p2p[0]) <= 1e-4 * fabs(p2p[0]) + 1e-6 &&
           fabs(over[EPOCHS - 1] - p2p[EPOCHS - 1]) <= 1e-4 * fabs(p2p[EPOCHS - 1]) + 1e-6,
       "overlapped, it follows p2p too (%.7f %.7f vs %.7f %.7f)", over[0], over[EPOCHS - 1], p2p[0],
       p2p[EPOCHS - 1]);
    const double per = nb == 3 ? (double)b[0] / (double)(EPOCHS * iters) : 0.0;
    ok(nb == 3 && fabs(per - tbytes * 4.0 / 3.0) <= 0.02 * tbytes,
       "collective: rank 0 accounts for 2(N-1)/N of the trainable bytes per step (%.0f, %.0f)", per,
       tbytes * 4.0 / 3.0);
    for (int k = 0; k < 2; k++) {
        is_int(mpi(3, "%s --mpi --clip-norm 0.05 --mpi-exchange %s",
                   train_args(k ? "cclip3" : "pclip3", EPOCHS), k ? "collective" : "p2p"),
               0, "3 ranks, --clip-norm 0.05, %s: %s", k ? "collective" : "p2p", errtext);
        losses(clip[k], EPOCHS);
    }
    ok(fabs(clip[1][EPOCHS - 1] - clip[0][EPOCHS - 1]) <= 1e-4 * fabs(clip[0][EPOCHS - 1]) + 1e-6,
       "with --clip-norm too (%.7f vs %.7f)", clip[1][EPOCHS - 1], clip[0][EPOCHS - 1]);
    ok(nnlab("%s --mpi --mpi-exchange collective --compress bf16", train_args("cbf", 1)) == 2,
       "--mpi-exchange collective with bf16: usage");
    like(errtext, "does not go with --compress bf16", "saying so: %s", errtext);
    ok(nnlab("%s --mpi-exchange collective", train_args("cnompi", 1)) == 2,
       "--mpi-exchange without --mpi: usage");
    /* Ranks started with different exchanges (an MPMD launch): refused, the rank named. */
    char prefix[1024], mixed[600];
    snprintf(mixed, sizeof mixed, "%s --mpi --mpi-exchange p2p", train_args("mixed", 1));
    snprintf(prefix, sizeof prefix, "%s -np 1 '%s' --db '%s/db' %s : -np 1", mpirun, bin, sd.dir,
             mixed);
    const int st =
        nnlab_under(prefix, "%s --mpi --mpi-exchange collective", train_args("mixed", 1));
    ok(st != 0, "ranks with different --mpi-exchange fail (status %d)", st);
    like(errtext, "rank 1 (", "naming the rank that differs: %.300s", errtext);
}

/* A regression table (a linear function of two numbers and a category, with noise) under --mpi:
 * the driver validates and tests as the SSH driver does (net/follow.c), so the run records R2,
 * MAE and RMSE; 2 ranks follow 1 rank's loss curve, and the test R2 is a local run's within
 * 0.02 (a local run shuffles its data in another order). */
static void check_regression(void)
{
    cluster_write_regression();
    is_int(nnlab("import reg '%s/reg.csv' --task regression --val 0.1 --test 0.2", sd.dir), 0,
           "a regression table: %s", errtext);
    double r1[3] = {0}, r2[3] = {0}, test[3] = {NAN, NAN, NAN};
    char args[1024];
    for (int n = 0; n <= 2; n++) {
        snprintf(args, sizeof args,
                 "--json train --data reg --model '%s/spec' --epochs 3 --batch 32 --seed 3 "
                 "--threads 1 --optim adam --lr 0.01 --loss huber --name reg%d%s",
                 sd.dir, n, n ? " --mpi" : "");
        is_int(n ? mpi(n, "%s", args) : nnlab("%s", args), 0, "regression %s: %s",
               n == 0   ? "locally"
               : n == 1 ? "on 1 rank"
                        : "on 2 ranks",
               errtext);
        if (n == 1)
            losses(r1, 3);
        if (n == 2)
            losses(r2, 3);
        test[n] = json_field(out, "test_r2");
    }
    like(out, "\"val_r2\":", "an MPI regression run reports validation R2");
    like(out, "\"test_mae\":", "and the test MAE");
    ok(r1[0] > 0 && fabs(r2[0] - r1[0]) < 1e-4 && fabs(r2[2] - r1[2]) < 1e-4,
       "2 ranks follow 1 on a regression table (%.6f %.6f vs %.6f %.6f)", r2[0], r2[2], r1[0],
       r1[2]);
    ok(test[0] > 0.9 && fabs(test[1] - test[0]) < 0.02 && fabs(test[2] - test[0]) < 0.02,
       "the ranks' test R2 is the local run's within 0.02 (%.4f, %.4f; local %.4f)", test[1],
       test[2], test[0]);
    ok(sshd_db_int(&sd, "SELECT COUNT(*) FROM epochs WHERE run = (SELECT id FROM runs WHERE "
                        "name = 'reg2') AND val_mae IS NOT NULL") == 3,
       "each epoch of the 2-rank run stores its validation MAE");
    is_int(nnlab("--json runs reg2"), 0, "runs shows the 2-rank run");
    ok(strstr(out, "\"task\":\"regression\"") && strstr(out, "\"test_r2\":0."),
       "as a regression run with its test R2: %.300s", out);
}

static void check_misconfigurations(void)
{
    is_int(nnlab("%s --mpi", train_args("alone", 1)) != 0, 1, "--mpi outside a launcher fails");
    like(errtext, "not started by an MPI launcher", "saying so: %s", errtext);
    setenv("SLURM_NTASKS", "3", 1);
    setenv("SLURM_PROCID", "0", 1);
    is_int(nnlab("%s --mpi", train_args("single", 1)) != 0, 1, "a Slurm task without PMI fails");
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_PROCID");
    like(errtext, "3 tasks", "naming the singletons: %s", errtext);
    ok(nnlab("%s --mpi --hosts node1", train_args("both", 1)) == 2, "--mpi with --hosts: usage");
    like(errtext, "not two of them", "saying so");
#if NNLAB_HAVE_MPI
    const char *names[] = {"rank 0 (a)", "rank 1 (b)", "rank 2 (c)"};
    char v[3][32] = {"nnlab 0.2.0 wire 3", "nnlab 0.2.0 wire 3", "nnlab 0.1.9 wire 3"};
    struct nl_error err = {0};
    is_int(nl_mpi_check_versions(&v[0][0], 2, sizeof v[0], names, &err), 0,
           "ranks of one version pass");
    is_int(nl_mpi_check_versions(&v[0][0], 3, sizeof v[0], names, &err), NL_EINVAL,
           "a rank of another version is refused");
    like(err.msg, "rank 2 (c) runs nnlab 0.1.9", "naming it: %s", err.msg);
#endif
}

#if NNLAB_HAVE_MPI
/* The allreduce alone over MPI, as a rank of `test_mpi --allreduce-child p2p|collective` under
 * mpirun: 3 overlapped steps of SGD on AR_N floats (AR_NT trainable, then statistics sums) of
 * which the statistics and the top two thirds of the trainable part are declared final 300 ms
 * before the rest; the last
 * rank does not overlap (a member's overlap is its own choice; the exchange must not depend on
 * it). Rank 0 prints the share of bytes sent before its gradient was whole and a checksum of the
 * parameters and summed statistics. */
enum { AR_NT = 5200, AR_N = 5240, AR_STEPS = 3 };

static int allreduce_child(const char *mode)
{
    int provided = 0, rank = 0, size = 1;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    static char name[8][16];
    const char *names[8];
    for (int r = 0; r < size && r < 8; r++) {
        snprintf(name[r], sizeof name[r], "rank %d", r);
        names[r] = name[r];
    }
    static float params[AR_N], grad[AR_N];
    for (int i = 0; i < AR_N; i++)
        params[i] = 0.01f * (float)sin(0.1 * i);
    struct nl_optim sgd;
    nl_optim_defaults(&sgd, NL_OPTIM_SGD);
    struct nl_error err = {0};
    struct nl_transport *tr = NULL;
    struct nl_allreduce *a = NULL;
    const int overlap = rank < size - 1;
    int rc = nl_transport_mpi_new(&tr, comm, names, 20000, strcmp(mode, "collective") == 0, &err);
    if (rc == 0)
        rc = nl_allreduce_new_over(
            &a, tr, params,
            &(struct nl_allreduce_opts){
                .n = AR_N, .ntrainable = AR_NT, .optim = &sgd, .overlap = overlap},
            &err);
    double early = 0.0;
    for (long step = 1; rc == 0 && step <= AR_STEPS; step++) {
        for (int i = 0; i < AR_N; i++)
            grad[i] = (float)((i * 7 + rank * 13 + (int)step * 5) % 101 - 50) * 1e-3f;
        if (!overlap) {
            rc = nl_allreduce_step(a, params, grad, step, 0.1f, &err);
            continue;
        }
        nl_allreduce_begin(a, params, grad, step, 0.1f);
        nl_allreduce_ready(a, AR_NT / 3, AR_NT);
        struct timespec ts = {0, 300000000};
        nanosleep(&ts, NULL);
        nl_allreduce_ready(a, 0, AR_NT);
        rc = nl_allreduce_finish(a, &err);
        early += nl_allreduce_early_fraction(a);
    }
    double check = 0.0;
    for (int i = 0; i < AR_N; i++)
        check += (i < AR_NT ? params[i] : grad[i]) * (1.0 + (i % 13));
    if (rc < 0)
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    else if (rank == 0)
        printf("early %.4f check %.9g\n", early / AR_STEPS, check);
    nl_allreduce_free(a);
    nl_transport_free(tr);
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return rc < 0 ? 1 : 0;
}

/* The collective exchange overlaps the backward pass: its buckets go as they become final, each
 * on a communicator of its own, in one order on every rank (one of them not overlapping), and
 * end where the p2p exchange does within float rounding, on 2 and 3 ranks. */
static void check_collective_overlap(void)
{
    char self[600], cmd[1600];
    const ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0) {
        ok(0, "the test's own path");
        return;
    }
    self[k] = '\0';
    for (int n = 2; n <= 3; n++) {
        double early[2] = {-1, -1}, check[2] = {0, 0};
        for (int c = 0; c < 2; c++) {
            const char *mode = c ? "collective" : "p2p";
            snprintf(cmd, sizeof cmd,
                     "%s -np %d '%s' --allreduce-child %s >'%s/run.out' 2>'%s/run.err'", mpirun, n,
                     self, mode, sd.dir, sd.dir);
            const int st = system(cmd);
            cluster_outputs("run");
            ok(st == 0 && sscanf(out, "early %lf check %lf", &early[c], &check[c]) == 2,
               "%d ranks, the allreduce over MPI %s, overlapped: %s %s", n, mode, out, errtext);
        }
        diag("%d ranks: bytes sent before the gradient was whole: p2p %.0f%%, collective %.0f%%", n,
             100 * early[0], 100 * early[1]);
        ok(early[0] > 0.0 && early[1] > 0.0,
           "%d ranks: both exchanges send before backward ends (p2p %.3f, collective %.3f)", n,
           early[0], early[1]);
        ok(fabs(check[1] - check[0]) <= 1e-5 * fabs(check[0]) + 1e-6,
           "%d ranks: it ends where p2p does, within float rounding (%.9g vs %.9g)", n, check[1],
           check[0]);
    }
}
#endif

int main(int argc, char **argv)
{
    double base[EPOCHS] = {0};

#if NNLAB_HAVE_MPI
    if (argc == 3 && strcmp(argv[1], "--allreduce-child") == 0)
        return allreduce_child(argv[2]);
#else
    (void)argv;
#endif
    (void)argc;
    const char *why = cluster_bin();
    if (why)
        skip_all("%s", why);
    if (getenv("NNLAB_MPIRUN") && *getenv("NNLAB_MPIRUN"))
        mpirun = getenv("NNLAB_MPIRUN");
    char probe0[400];
    snprintf(probe0, sizeof probe0, "command -v %.*s >/dev/null 2>&1", (int)strcspn(mpirun, " "),
             mpirun);
    if (system(probe0) != 0)
        skip_all("no %s (apt-get install openmpi-bin)", mpirun);
    char probe[700];
    snprintf(probe, sizeof probe, "'%s' train --help | grep -q -- --mpi", bin);
    if (system(probe) != 0)
        skip_all("this nnlab was built without MPI");
    /* OpenBLAS picks its kernels from OPENBLAS_CORETYPE and the like, which the SSH workers'
     * sessions (sshd's clean environment) do not get: the ranks must compute as they do. */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("OPENBLAS_L2_SIZE");
    unsetenv("OPENBLAS_VERBOSE");
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    const long kills = getenv("NNLAB_MPI_KILLS") ? strtol(getenv("NNLAB_MPI_KILLS"), NULL, 10) : 0;
    why = kills > 0 ? "NNLAB_MPI_KILLS runs the kill check alone" : sshd_start(&sd);
    have_sshd = why == NULL;
    if (!have_sshd) {
        diag("no SSH comparison: %s", why);
        sshd_stop(&sd);
        snprintf(sd.dir, sizeof sd.dir, "/tmp/nnlab-mpi-XXXXXX");
        if (!mkdtemp(sd.dir))
            skip_all("cannot make a temporary folder");
    }
    /* The ranks' partition cache lands in the test's folder. */
    char home[600];
    snprintf(home, sizeof home, "%s/home", sd.dir);
    mkdir(home, 0755);
    setenv("HOME", home, 1);
    sshd_write_quadrants(&sd, NTRAIN, SIDE);
    sshd_write(sd.dir, "spec", spec_text);
    is_int(nnlab("import syn '%s/data' --val 0.1", sd.dir), 0, "import a synthetic dataset");

    if (kills > 0) {
        int failed = 0;
        for (long i = 0; i < kills; i++) {
            char name[32];
            snprintf(name, sizeof name, "killed%ld", i);
            failed += check_kill(name);
        }
        diag("%d of %ld killed runs ended failed", failed, kills);
        sshd_stop(&sd);
        return done_testing();
    }

    struct nl_spec *spec;
    struct nl_model *m = NULL;
    struct nl_error err = {0};
    nl_spec_parse(&spec, spec_text, "spec", NULL, NULL, &err);
    nl_model_build(&m, spec, (struct nl_shape){1, SIDE, SIDE}, 4, &err);
    const double tbytes = (double)m->ntrainable * 4.0;
    const char *frozen[] = {"fc1"};
    nl_model_freeze(m, frozen, 1, NULL, &err);
    const double head_bytes = (double)m->ntrainable * 4.0; /* fc2's, 2(N-1)/N = 1 of it */
    const long iters = (NTRAIN_TRAIN + BATCH - 1) / BATCH;
    nl_model_free(m);
    nl_spec_free(spec);

    check_local_and_ranks(base, iters, tbytes);
    check_frozen_and_bf16(iters, tbytes, head_bytes);
    check_clip_and_judge();
    check_ssh_identical();
    check_resume();
    check_kill("killed");
    check_sigint();
    check_collective(base, iters, tbytes);
#if NNLAB_HAVE_MPI
    check_collective_overlap();
#endif
    check_regression();
    check_misconfigurations();
    sshd_stop(&sd);
    return done_testing();
}
