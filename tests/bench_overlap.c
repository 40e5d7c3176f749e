/* Overlap benchmark (meson benchmark, not a timed test): N cluster members as processes on
 * 127.0.0.1 (no SSH), each of T threads, train a shipped model on synthetic 28x28 images with the
 * exchange synchronous (S), overlapped with the backward pass (O), and with --overlap auto's
 * measurement (A: nl_member_sync_probe, steps of each mode, then the faster for the rest). Repeat
 * k runs them in the order S O A, O A S, A S O, ... (rotated, so that no mode always runs first
 * or after the same other), and prints each run's step time over the whole run and over its
 * steady state (the steps after auto's measurement), and what auto measured and chose; then per
 * mode the medians over the repeats: the wall time per step, the seconds members waited for the
 * exchange after their backward pass, how much of that wait the overlap hid, the share of the
 * bytes sent before the backward pass ended; the overlapped run's steady state against the
 * synchronous one's of the same repeat; and which mode auto chose in each of its runs.
 * NNLAB_BENCH_MODEL (default lenet), NNLAB_BENCH_MEMBERS (2), NNLAB_BENCH_THREADS (1),
 * NNLAB_BENCH_STEPS (60), NNLAB_BENCH_BATCH (64) and NNLAB_BENCH_REPEAT (5) change the set-up;
 * NNLAB_BENCH_PROBE_BLOCK and NNLAB_BENCH_PROBE_ROUNDS auto's blocks (long blocks, in a long
 * run, compare the modes within one run, in their steady pattern); NNLAB_BENCH_VERBOSE prints
 * every step's time (the members' mean, ms; auto's overlapped steps marked o). With
 * NNLAB_BENCH_PLAINTEXT set, the members' frames are checksummed rather than sealed
 * (--insecure-plaintext), to weigh what sealing costs. On one machine the members share its
 * cores: with more threads than cores the numbers say little about two machines. The last line
 * says which mode --overlap auto's static rule (one member, or a run too short to measure) would
 * pick for these members on this machine (nl_worker_overlap). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/cluster.h"
#include "nnlab/model.h"
#include "nnlab/worker.h"

#define MAXN     8
#define MAXREP   32
#define MAXSTEPS 1024 /* steps whose end times a member records */

static const char secret[] = "bench-overlap-secret-0123456789abcdef";

enum { SYNC, OVERLAPPED, AUTO };

struct cfg {
    const char *model;
    int size, threads, steps, batch, mode;
    int block, rounds; /* of auto's measurement (NL_OVERLAP_PROBE_BLOCK, _ROUNDS) */
};

/* The steps of auto's measurement with c's blocks and rounds. */
static int probe_steps(const struct cfg *c)
{
    return NL_OVERLAP_PROBE_WARMUP + 2 * c->block * c->rounds;
}

struct result {
    int rc;
    char msg[NL_ERR_MAX];
    double seconds, wait, exchange, early;
    long steps;
    /* AUTO: whether it decided, its choice, and the members' mean median step seconds. */
    int decided, overlapped;
    double sync_seconds, overlap_seconds;
    /* When each step ended (seconds after training began; step n at end[n - 1]) and whether it
     * overlapped, for the first MAXSTEPS steps. */
    double end[MAXSTEPS];
    char overlapped_step[MAXSTEPS];
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static struct nl_dataset *synthetic(int n)
{
    struct nl_dataset *d = nl_calloc(1, sizeof *d);
    struct nl_rng r;
    enum { SIDE = 28 };

    nl_rng_seed(&r, 3);
    d->name = nl_strdup("synthetic");
    d->shape = (struct nl_shape){1, SIDE, SIDE};
    d->dtype = NL_U8;
    d->nclasses = 10;
    d->nnorm = 1;
    d->mean = nl_calloc(1, sizeof(float));
    d->std = nl_calloc(1, sizeof(float));
    d->mean[0] = 0.3f;
    d->std[0] = 0.3f;
    uint8_t *x = nl_calloc((size_t)n * SIDE * SIDE, 1);
    int32_t *y = nl_calloc((size_t)n, sizeof *y);
    for (int i = 0; i < n; i++) {
        y[i] = (int32_t)nl_rng_below(&r, 10);
        for (int p = 0; p < SIDE * SIDE; p++)
            x[(size_t)i * SIDE * SIDE + p] = (uint8_t)(nl_rng_below(&r, 60) + 19 * y[i]);
    }
    d->split[NL_TRAIN].n = (size_t)n;
    d->split[NL_TRAIN].x = x;
    d->split[NL_TRAIN].y = y;
    return d;
}

/* The member's synchroniser, whose steps are timed (one member a process). */
static struct {
    struct nl_sync inner;
    struct nl_allreduce *ar;
    struct result *res;
    double t0;
} timed;

static int timed_step(void *ud, float *params, float *grad, long n, float lr, struct nl_error *err)
{
    const int rc = timed.inner.step(ud, params, grad, n, lr, err);
    if (n >= 1 && n <= MAXSTEPS) {
        timed.res->end[n - 1] = now() - timed.t0;
        timed.res->overlapped_step[n - 1] = (char)nl_allreduce_overlaps(timed.ar);
    }
    return rc;
}

static int member(const struct cfg *c, int rank, int fd, const struct nl_member *members,
                  struct result *res)
{
    struct nl_error err = {0};
    const int ntrain = c->steps * c->batch;
    struct nl_dataset *d = synthetic(ntrain), *part_d = NULL;
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;
    struct nl_partition *part = NULL;
    struct nl_mesh *mesh = NULL;
    struct nl_allreduce *ar = NULL;
    struct nl_member_sync ms;
    struct nl_train_opts o;
    struct nl_train_result tr;
    int rc;
    /* auto: the static rule's mode, which it keeps when the run is too short to measure. */
    const int warm =
        nl_worker_overlap(NL_OVERLAP_AUTO, c->threads, (int)sysconf(_SC_NPROCESSORS_ONLN), c->size);
    const int probe = c->mode == AUTO && c->steps >= NL_OVERLAP_PROBE_MIN_RUN * probe_steps(c);

    nl_train_defaults(&o);
    o.epochs = 1;
    o.batch = c->batch;
    o.threads = c->threads;
    rc = nl_spec_load(&spec, c->model, NULL, NULL, &err);
    if (rc == 0)
        rc = nl_model_build(&m, spec, d->shape, d->nclasses, &err);
    if (rc == 0) {
        nl_model_init_params(m, o.seed);
        rc = nl_partition_new(&part, (uint32_t)ntrain, c->batch, c->size, rank, o.seed, &err);
    }
    if (rc == 0)
        rc = nl_dataset_subset(&part_d, d, nl_partition_global(part), nl_partition_count(part),
                               &err);
    if (rc == 0)
        rc = nl_mesh_connect_cancel(&mesh, rank, c->size, fd, members, secret, strlen(secret),
                                    getenv("NNLAB_BENCH_PLAINTEXT") ? NL_WIRE_PLAINTEXT : 0, 60000,
                                    -1, &err);
    if (rc == 0)
        rc = nl_allreduce_new(
            &ar, mesh, m->params,
            &(struct nl_allreduce_opts){.n = m->nreduce,
                                        .ntrainable = m->ntrainable,
                                        .optim = &o.optim,
                                        .overlap = c->mode == OVERLAPPED ||
                                                   (c->mode == AUTO && (probe || warm))},
            &err);
    if (rc == 0) {
        nl_member_sync_init(&ms, part, ar, mesh);
        if (probe)
            nl_member_sync_probe(&ms, rank, c->size, NL_OVERLAP_PROBE_WARMUP + 1, c->block,
                                 c->rounds, warm);
        struct nl_sync sync = ms.sync;
        timed.inner = ms.sync;
        timed.ar = ar;
        timed.res = res;
        sync.step = timed_step;
        o.sync = &sync;
        double t0 = now();
        timed.t0 = t0;
        rc = nl_train(m, part_d, &o, NULL, &tr, &err);
        res->seconds = now() - t0;
        res->wait = ms.comm_seconds;
        res->exchange = ms.exchange_seconds;
        res->early = ms.early_fraction;
        res->steps = ms.sync.iters;
        res->decided = ms.probe.decided;
        res->overlapped = ms.probe.overlapped;
        res->sync_seconds = ms.probe.sync_seconds;
        res->overlap_seconds = ms.probe.overlap_seconds;
    }
    res->rc = rc;
    memcpy(res->msg, err.msg, sizeof res->msg);
    nl_allreduce_free(ar);
    nl_mesh_free(mesh);
    nl_partition_free(part);
    nl_dataset_free(part_d);
    nl_model_free(m);
    nl_spec_free(spec);
    nl_dataset_free(d);
    return rc == 0 ? 0 : 1;
}

/* One run, averaged over the members: per step its wall time (whole run, setup included), the
 * steady state (the steps after the first `skip`), the waits and exchange span; auto's choice
 * (rank 0's: every member chose the same); and the members' mean step durations (d[n - 1] for
 * step n, at most MAXSTEPS) with each step's mode. */
struct outcome {
    double step, steady, wait, exchange, early;
    int decided, overlapped;
    double sync_seconds, overlap_seconds;
    long nd;
    double d[MAXSTEPS];
    char overlapped_step[MAXSTEPS];
};

/* 0, or -1. */
static int run(const struct cfg *c, int skip, struct outcome *oc)
{
    struct result *res = mmap(NULL, sizeof *res * (size_t)c->size, PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct nl_member members[MAXN];
    struct nl_error err = {0};
    int fds[MAXN], all = 1;
    pid_t pids[MAXN];

    if (res == MAP_FAILED)
        return -1;
    memset(oc, 0, sizeof *oc);
    for (int r = 0; r < c->size; r++) {
        snprintf(members[r].name, sizeof members[r].name, "member%d", r);
        snprintf(members[r].addr, sizeof members[r].addr, "127.0.0.1");
        if (nl_net_listen(&fds[r], "127.0.0.1", 0, 0, &members[r].port, &err) < 0) {
            fprintf(stderr, "bench_overlap: %s\n", err.msg);
            return -1;
        }
    }
    for (int r = 0; r < c->size; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(member(c, r, fds[r], members, &res[r]));
    }
    for (int r = 0; r < c->size; r++) {
        int st;
        close(fds[r]);
        while (waitpid(pids[r], &st, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || res[r].steps == 0) {
            fprintf(stderr, "bench_overlap: member %d: %s\n", r, res[r].msg);
            all = 0;
            continue;
        }
        oc->step += res[r].seconds / (double)res[r].steps / c->size;
        oc->wait += res[r].wait / (double)res[r].steps / c->size;
        oc->exchange += res[r].exchange / (double)res[r].steps / c->size;
        oc->early += res[r].early / (double)res[r].steps / c->size;
    }
    if (all) {
        oc->nd = res[0].steps < MAXSTEPS ? res[0].steps : MAXSTEPS;
        for (long n = 0; n < oc->nd; n++) {
            for (int r = 0; r < c->size; r++)
                oc->d[n] += (res[r].end[n] - (n ? res[r].end[n - 1] : 0.0)) / c->size;
            oc->overlapped_step[n] = res[0].overlapped_step[n];
        }
        double sum = 0.0;
        for (long n = skip; n < oc->nd; n++)
            sum += oc->d[n];
        oc->steady = oc->nd > skip ? sum / (double)(oc->nd - skip) : 0.0;
    }
    oc->decided = res[0].decided;
    oc->overlapped = res[0].overlapped;
    oc->sync_seconds = res[0].sync_seconds;
    oc->overlap_seconds = res[0].overlap_seconds;
    munmap(res, sizeof *res * (size_t)c->size);
    return all ? 0 : -1;
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int env_int(const char *name, int def, int lo, int hi)
{
    const char *v = getenv(name);
    int n = v ? atoi(v) : def;
    return n < lo || n > hi ? def : n;
}

int main(void)
{
    struct cfg c = {
        .model = getenv("NNLAB_BENCH_MODEL") ? getenv("NNLAB_BENCH_MODEL") : "lenet",
        .size = env_int("NNLAB_BENCH_MEMBERS", 2, 1, MAXN),
        .threads = env_int("NNLAB_BENCH_THREADS", 1, 1, 64),
        .steps = env_int("NNLAB_BENCH_STEPS", 60, 2, 100000),
        .batch = env_int("NNLAB_BENCH_BATCH", 64, 1, 100000),
        .block = env_int("NNLAB_BENCH_PROBE_BLOCK", NL_OVERLAP_PROBE_BLOCK, 2, NL_PROBE_MAX + 1),
        .rounds = env_int("NNLAB_BENCH_PROBE_ROUNDS", NL_OVERLAP_PROBE_ROUNDS, 1, NL_PROBE_MAX),
    };
    const int reps = env_int("NNLAB_BENCH_REPEAT", 5, 1, MAXREP);
    const int verbose = getenv("NNLAB_BENCH_VERBOSE") != NULL;
    /* The steady state: the steps after auto's measurement (all of them in a run too short to
     * measure, after a tenth of it). */
    const int skip =
        c.steps >= NL_OVERLAP_PROBE_MIN_RUN * probe_steps(&c) ? probe_steps(&c) : c.steps / 10;
    double steps[3][MAXREP], steadies[3][MAXREP], waits[3][MAXREP], exchanges[3][MAXREP],
        earlies[3][MAXREP];
    double step[3], steady[3], wait[3], exchange[3], early[3];
    static struct outcome oc[3][MAXREP];
    static const char *const names[] = {"synchronous", "overlapped", "auto"};
    static const char letter[] = "SOA";

    signal(SIGPIPE, SIG_IGN);
    printf("%s, %d members x %d thread%s on 127.0.0.1, batch %d, %d steps, fp32, %d repeats\n",
           c.model, c.size, c.threads, c.threads > 1 ? "s" : "", c.batch, c.steps, reps);
    /* Repeat k runs the modes in the order k, k + 1, k + 2 (mod 3): S O A, O A S, A S O, ...,
     * so that no mode always runs first, or right after the same other. */
    for (int k = 0; k < reps; k++) {
        printf("repeat %d:", k + 1);
        for (int i = 0; i < 3; i++) {
            const int mode = (k + i) % 3;
            struct outcome *o = &oc[mode][k];
            c.mode = mode;
            if (run(&c, skip, o) < 0)
                return 1;
            steps[mode][k] = o->step;
            steadies[mode][k] = o->steady;
            waits[mode][k] = o->wait;
            exchanges[mode][k] = o->exchange;
            earlies[mode][k] = o->early;
            printf(" %c %.1f ms (steps %d-%d: %.1f ms)", letter[mode], 1e3 * o->step, skip + 1,
                   c.steps, 1e3 * o->steady);
            if (mode == AUTO && o->decided)
                printf(" [measured %.1f/%.1f: %s]", 1e3 * o->sync_seconds, 1e3 * o->overlap_seconds,
                       o->overlapped ? "O" : "S");
            fflush(stdout);
        }
        printf("\n");
        for (int mode = SYNC; verbose && mode <= AUTO; mode++) {
            printf("  %c step ms:", letter[mode]);
            for (long n = 0; n < oc[mode][k].nd; n++)
                printf(" %.1f%s", 1e3 * oc[mode][k].d[n],
                       mode == AUTO && oc[mode][k].overlapped_step[n] ? "o" : "");
            printf("\n");
        }
    }
    /* The runs of one repeat ran back to back: their ratio is less at the mercy of a load that
     * changes between repeats than the ratio of the medians. */
    double ratio[MAXREP];
    int faster = 0;
    printf("overlapped/synchronous by repeat, steps %d-%d:", skip + 1, c.steps);
    for (int k = 0; k < reps; k++) {
        ratio[k] = steadies[SYNC][k] > 0 ? steadies[OVERLAPPED][k] / steadies[SYNC][k] : 0.0;
        faster += ratio[k] < 1.0;
        printf(" %.3f", ratio[k]);
    }
    printf("; median %.3f, overlapped faster in %d of %d\n", median(ratio, reps), faster, reps);
    /* (median sorts its values: the ratios first, then the medians.) */
    for (int mode = SYNC; mode <= AUTO; mode++) {
        step[mode] = median(steps[mode], reps);
        steady[mode] = median(steadies[mode], reps);
        wait[mode] = median(waits[mode], reps);
        exchange[mode] = median(exchanges[mode], reps);
        early[mode] = median(earlies[mode], reps);
    }
    printf("medians of %d:\n", reps);
    for (int mode = SYNC; mode <= AUTO; mode++)
        printf("%-12s %7.2f ms per step (steps %d-%d: %7.2f ms), of which %6.2f ms waiting for "
               "the exchange (exchange span %.2f ms)\n",
               names[mode], 1e3 * step[mode], skip + 1, c.steps, 1e3 * steady[mode],
               1e3 * wait[mode], 1e3 * exchange[mode]);
    printf("bytes sent while the backward pass still ran: %.0f%%\n", 100.0 * early[OVERLAPPED]);
    printf("wait hidden by the overlap: %.0f%%; step time %+.1f%% (steps %d-%d: %+.1f%%)\n",
           wait[SYNC] > 0 ? 100.0 * (1.0 - wait[OVERLAPPED] / wait[SYNC]) : 0.0,
           step[SYNC] > 0 ? 100.0 * (step[OVERLAPPED] / step[SYNC] - 1.0) : 0.0, skip + 1, c.steps,
           steady[SYNC] > 0 ? 100.0 * (steady[OVERLAPPED] / steady[SYNC] - 1.0) : 0.0);
    int chose = 0, decided = 0;
    for (int k = 0; k < reps; k++) {
        decided += oc[AUTO][k].decided;
        chose += oc[AUTO][k].decided && oc[AUTO][k].overlapped;
    }
    if (decided == 0) {
        printf("auto measured nothing: %d steps are fewer than %d\n", c.steps,
               NL_OVERLAP_PROBE_MIN_RUN * probe_steps(&c));
    } else {
        printf("auto chose overlapped in %d of %d runs; measured (synchronous/overlapped ms):",
               chose, decided);
        for (int k = 0; k < reps; k++)
            if (oc[AUTO][k].decided)
                printf(" %.1f/%.1f%s", 1e3 * oc[AUTO][k].sync_seconds,
                       1e3 * oc[AUTO][k].overlap_seconds, oc[AUTO][k].overlapped ? "*" : "");
        printf(" (* overlapped)\n");
    }
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    printf("--overlap auto's static rule (one member, or too short to measure) picks %s here "
           "(%d members x %d thread%s on %ld cores)\n",
           nl_worker_overlap(NL_OVERLAP_AUTO, c.threads, (int)ncpu, c.size) ? "overlapped"
                                                                            : "synchronous",
           c.size, c.threads, c.threads > 1 ? "s" : "", ncpu);
    return 0;
}
