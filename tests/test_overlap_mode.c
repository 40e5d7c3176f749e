/* --overlap auto|on|off: the static rule auto follows before it measures and where it does not
 * (nl_worker_overlap: overlap only where a host has a core free beside the compute threads of
 * every member it runs), the choice it makes from measured step times (nl_worker_overlap_decide),
 * the order of its measurement's blocks and the steps it times (nl_overlap_probe_mode, _measures),
 * the option's refusals, and, through the real binary and the private sshd of tests/sshd.h, that
 * the three modes train 2 workers to the same weights bit for bit (the mode changes when bytes
 * move, not what is summed; auto measures both modes, then keeps one), that auto reports what it
 * measured and chose, the run records it and `nnlab runs RUN` (and --json) shows it, that a
 * run too short to measure reports nothing, that the run's settings record the mode, and that a
 * resumed run keeps it (auto measures again). */
#include <math.h>
#include <signal.h>
#include <stdarg.h>

#include "cluster_util.h"
#include "nnlab/allreduce.h"
#include "nnlab/cluster.h"
#include "nnlab/trainer.h"
#include "nnlab/worker.h"
#include "tap.h"

enum { NTRAIN = 400, SIDE = 12 };

static void test_rule(void)
{
    /* on and off are what they say, whatever the host. */
    is_int(nl_worker_overlap(NL_OVERLAP_ON, 8, 2, 4), 1, "on overlaps with no core free");
    is_int(nl_worker_overlap(NL_OVERLAP_OFF, 1, 64, 1), 0, "off never overlaps");
    /* auto: cores > threads x members on the host. */
    is_int(nl_worker_overlap(NL_OVERLAP_AUTO, 1, 2, 1), 1, "auto: 1 thread on 2 cores overlaps");
    is_int(nl_worker_overlap(NL_OVERLAP_AUTO, 1, 2, 2), 0,
           "auto: 2 members of 1 thread on 2 cores do not");
    is_int(nl_worker_overlap(NL_OVERLAP_AUTO, 0, 16, 1), 0,
           "auto: all cores computing (threads 0) do not");
    is_int(nl_worker_overlap(NL_OVERLAP_AUTO, 16, 16, 1), 0, "auto: 16 threads on 16 cores do not");
    is_int(nl_worker_overlap(NL_OVERLAP_AUTO, 15, 16, 1), 1, "auto: 15 threads on 16 cores do");
    is_int(nl_worker_overlap(NL_OVERLAP_AUTO, 3, 8, 2), 1, "auto: 2 members of 3 on 8 cores do");
    is_int(nl_worker_overlap(NL_OVERLAP_AUTO, 4, 8, 2), 0, "auto: 2 members of 4 on 8 do not");
    is_int(nl_worker_overlap(NL_OVERLAP_AUTO, 1, 1, 0), 0, "auto: 1 thread on 1 core does not");
}

/* nl_worker_overlap_decide: a pure function of the members' medians. */
static void test_decide(void)
{
    double sync, ov;
    /* resnet8 on 3 members, as bench_overlap measured it: overlapped 17% faster. */
    const double faster[] = {0.620, 0.512, 0.640, 0.530, 0.600, 0.500};
    is_int(nl_worker_overlap_decide(faster, 3, &sync, &ov), 1, "overlapped 17%% faster: overlap");
    is_float(sync, (0.620 + 0.640 + 0.600) / 3, 1e-12, "the synchronous mean of the members");
    is_float(ov, (0.512 + 0.530 + 0.500) / 3, 1e-12, "the overlapped mean of the members");
    const double slower[] = {0.105, 0.116, 0.107, 0.118};
    is_int(nl_worker_overlap_decide(slower, 2, &sync, &ov), 0, "overlapped 10%% slower: do not");
    const double tie[] = {0.100, 0.099}, tie_slow[] = {0.100, 0.101};
    is_int(nl_worker_overlap_decide(tie, 1, &sync, &ov), 1,
           "overlapped 1%% faster, within the margin: overlapped");
    is_int(nl_worker_overlap_decide(tie_slow, 1, &sync, &ov), 1,
           "overlapped 1%% slower, within the margin: overlapped");
    const double past[] = {0.100, 0.1025};
    is_int(nl_worker_overlap_decide(past, 1, &sync, &ov), 0,
           "overlapped 2.5%% slower: synchronous");
    /* Members that disagree: the means decide, the same on every member. */
    const double mixed[] = {0.100, 0.080, 0.100, 0.125};
    is_int(nl_worker_overlap_decide(mixed, 2, &sync, &ov), 0,
           "one member faster overlapped, one slower by more: synchronous");
    is_int(nl_worker_overlap_decide(mixed, 0, &sync, &ov), 0, "no members: synchronous");
    double v[] = {5, 1, 4, 2, 3}, w[] = {4, 1, 3, 2};
    is_float(nl_worker_median(v, 5), 3, 0, "the median of 5");
    is_float(nl_worker_median(w, 4), 2.5, 0, "the median of 4");
    is_float(nl_worker_median(w, 0), 0, 0, "the median of none");
}

/* nl_overlap_probe_mode and _measures: the order of the blocks and the steps whose times count,
 * for the probe a worker runs (NL_OVERLAP_PROBE_*) and for a longer one. */
static void test_probe_order(void)
{
    struct nl_overlap_probe p;
    char modes[64] = "", measured[64] = "";
    const long from = NL_OVERLAP_PROBE_WARMUP + 1;

    memset(&p, 0, sizeof p);
    p.from = from;
    p.block = NL_OVERLAP_PROBE_BLOCK;
    p.rounds = NL_OVERLAP_PROBE_ROUNDS;
    p.warm = 0;
    for (long n = 1; n <= NL_OVERLAP_PROBE_STEPS + 2 && n < 63; n++) {
        modes[n - 1] = nl_overlap_probe_mode(&p, n) ? 'O' : 'S';
        measured[n - 1] = nl_overlap_probe_measures(&p, n) ? 'm' : '.';
    }
    /* 3 warm-up steps in the static rule's mode, blocks of 3 in the Thue-Morse order S O O S O S
     * S O, then the static rule's mode again until the choice is made. */
    is_str(modes,
           "SSS"
           "SSS"
           "OOO"
           "OOO"
           "SSS"
           "OOO"
           "SSS"
           "SSS"
           "OOO"
           "SS",
           "the probe's modes, step by step");
    is_str(measured,
           "..."
           ".mm"
           ".mm"
           ".mm"
           ".mm"
           ".mm"
           ".mm"
           ".mm"
           ".mm"
           "..",
           "the steps measured: each block's but its first");
    int nsync = 0, nov = 0, sum_sync = 0, sum_ov = 0, sq_sync = 0, sq_ov = 0;
    for (long n = 1; n <= NL_OVERLAP_PROBE_STEPS; n++) {
        if (!nl_overlap_probe_measures(&p, n))
            continue;
        const int b = (int)((n - from) / p.block);
        if (nl_overlap_probe_mode(&p, n)) {
            nov++;
            sum_ov += b;
            sq_ov += b * b;
        } else {
            nsync++;
            sum_sync += b;
            sq_sync += b * b;
        }
    }
    is_int(nsync, (NL_OVERLAP_PROBE_BLOCK - 1) * NL_OVERLAP_PROBE_ROUNDS,
           "synchronous steps measured");
    is_int(nov, nsync, "as many overlapped");
    is_int(sum_ov, sum_sync, "the blocks of both modes balance a load that changes linearly");
    is_int(sq_ov, sq_sync, "and quadratically");
    is_int(NL_OVERLAP_PROBE_STEPS, 27, "27 steps in all (README and --help say so)");
    /* Warm overlapped: the static rule's mode before and after; decided: the choice. */
    p.warm = 1;
    ok(nl_overlap_probe_mode(&p, 1) && nl_overlap_probe_mode(&p, NL_OVERLAP_PROBE_STEPS + 1) &&
           !nl_overlap_probe_mode(&p, from),
       "an overlapping static rule warms up and waits overlapped, measures from a synchronous "
       "block");
    p.decided = 1;
    p.overlapped = 0;
    ok(!nl_overlap_probe_mode(&p, 1) && !nl_overlap_probe_mode(&p, from + p.block),
       "once decided, the choice holds");
    /* A longer probe: 8 rounds of blocks of 2, where the first of 16 blocks is S and the order
     * the Thue-Morse sequence's. */
    memset(&p, 0, sizeof p);
    p.from = 1;
    p.block = 2;
    p.rounds = 8;
    char tm[17] = "";
    for (int b = 0; b < 16; b++)
        tm[b] = nl_overlap_probe_mode(&p, 1 + 2L * b) ? 'O' : 'S';
    is_str(tm, "SOOSOSSOOSSOSOOS", "16 blocks in the Thue-Morse order");
    ok(!nl_overlap_probe_measures(&p, 1) && nl_overlap_probe_measures(&p, 2) &&
           !nl_overlap_probe_measures(&p, 33) && !nl_overlap_probe_measures(&p, 0),
       "the first step of a block, and steps outside the probe, are not measured");
}

/* The value of "key": in the line of out that holds "event":"overlap"; NAN when none. */
static double overlap_field(const char *key)
{
    const char *line = strstr(out, "\"event\":\"overlap\"");
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *end = line ? strchr(line, '\n') : NULL;
    const char *at = line ? strstr(line, k) : NULL;
    if (!at || (end && at > end))
        return NAN;
    at += strlen(k);
    if (strncmp(at, "true", 4) == 0)
        return 1;
    if (strncmp(at, "false", 5) == 0)
        return 0;
    return strtod(at, NULL);
}

/* The number after "key": in out (the first), or NAN. */
static double out_number(const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *at = strstr(out, k);
    return at ? strtod(at + strlen(k), NULL) : NAN;
}

/* `nnlab runs RUN` and `runs RUN --json` show how the run exchanged: want is the text after
 * "overlap" for a fixed or unmeasured mode; NULL for a measured auto run, whose line must carry
 * the choice (chosen) and the step times that the JSON gives, which must be those measured. */
static void check_runs(const char *run, const char *mode, const char *want, const char *chosen,
                       double sync, double ov)
{
    char line[256];
    is_int(nnlab("runs %s", run), 0, "runs %s: %s", run, errtext);
    static char text[sizeof out];
    snprintf(text, sizeof text, "%s", out);
    is_int(nnlab("--json runs %s", run), 0, "--json runs %s: %s", run, errtext);
    snprintf(line, sizeof line, "\"overlap\":{\"mode\":\"%s\"", mode);
    like(out, line, "runs %s --json: overlap mode %s", run, mode);
    if (want) {
        snprintf(line, sizeof line, "\noverlap       %s\n", want);
        like(text, line, "runs %s: overlap %s", run, want);
        ok(!strstr(out, "\"chosen\""), "runs %s --json: no choice", run);
        return;
    }
    snprintf(line, sizeof line, "\"chosen\":\"%s\"", chosen);
    like(out, line, "runs %s --json: chosen %s", run, chosen);
    const double jsync = out_number("sync_ms"), jov = out_number("overlapped_ms");
    is_float(jsync, sync, 1e-3, "runs %s --json: sync_ms as measured", run);
    is_float(jov, ov, 1e-3, "runs %s --json: overlapped_ms as measured", run);
    is_float(out_number("step"), NL_OVERLAP_PROBE_STEPS, 0, "runs %s --json: chose after step %d",
             run, NL_OVERLAP_PROBE_STEPS);
    snprintf(line, sizeof line,
             "\noverlap       auto: %s from step %d (%.1f ms synchronous, %.1f ms overlapped)\n",
             chosen, NL_OVERLAP_PROBE_STEPS + 1, jsync, jov);
    like(text, line, "runs %s: the choice and both times", run);
}

/* Requirement: the same through MPI ranks (net/mpi.c runs the worker's code): 2 ranks with
 * --overlap auto measure, report, record, and end bit for bit as the SSH workers did (the
 * exported ov-auto.safetensors of 5 epochs). Skipped without mpirun or an MPI build. */
static void test_mpi(void)
{
    const char *mpirun = "mpirun --oversubscribe --bind-to none";
    char probe[700];
    if (system("command -v mpirun >/dev/null 2>&1") != 0) {
        diag("no mpirun: no MPI run");
        return;
    }
    snprintf(probe, sizeof probe, "'%s' train --help | grep -q -- --mpi", bin);
    if (system(probe) != 0) {
        diag("built without MPI: no MPI run");
        return;
    }
    /* The ranks compute as the SSH workers, whose sessions get no OpenBLAS settings. */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("OPENBLAS_L2_SIZE");
    unsetenv("OPENBLAS_VERBOSE");
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "env ASAN_OPTIONS=detect_leaks=0 %s -np 2 '%s' --db '%s/db' --json train --data syn "
             "--model '%s/spec' --batch 32 --seed 5 --momentum 0.9 --epochs 5 --threads 1 --mpi "
             "--name ov-mpi >'%s/out' 2>'%s/err' </dev/null",
             mpirun, bin, sd.dir, sd.dir, sd.dir, sd.dir);
    int st = system(cmd);
    char path[600];
    snprintf(path, sizeof path, "%s/out", sd.dir);
    char *t = sshd_read(path);
    snprintf(out, sizeof out, "%s", t ? t : "");
    snprintf(path, sizeof path, "%s/err", sd.dir);
    t = sshd_read(path);
    snprintf(errtext, sizeof errtext, "%s", t ? t : "");
    is_int(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 0, "2 MPI ranks train with --overlap auto: %s",
           errtext);
    const double sync = overlap_field("sync_ms"), ov = overlap_field("overlapped_ms");
    is_float(overlap_field("step"), NL_OVERLAP_PROBE_STEPS, 0, "the ranks chose after step %d",
             NL_OVERLAP_PROBE_STEPS);
    ok(sync > 0 && ov > 0, "they measured %.2f ms synchronous, %.2f ms overlapped", sync, ov);
    ok(sshd_db_int(&sd,
                   "SELECT count(*) FROM runs WHERE name = 'ov-mpi' AND "
                   "json_extract(settings, '$.overlap_step') = %d",
                   NL_OVERLAP_PROBE_STEPS) == 1,
       "the MPI run records the choice");
    check_runs("ov-mpi", "auto", NULL,
               overlap_field("overlapped") == 1 ? "overlapped" : "synchronous", sync, ov);
    is_int(nnlab("export ov-mpi '%s/ov-mpi.safetensors'", sd.dir), 0, "export ov-mpi: %s", errtext);
    size_t na = 0, nb = 0;
    snprintf(path, sizeof path, "%s/ov-auto.safetensors", sd.dir);
    char *a = whole(path, &na);
    snprintf(path, sizeof path, "%s/ov-mpi.safetensors", sd.dir);
    char *b = whole(path, &nb);
    ok(a && b && na == nb && memcmp(a, b, na) == 0,
       "MPI ranks with auto end as the SSH workers did, bit for bit (%zu bytes)", nb);
    free(a);
    free(b);
}

static const char *train_args(void)
{
    static char a[1024];
    snprintf(a, sizeof a,
             "--json train --data syn --model '%s/spec' --batch 32 --seed 5 --momentum 0.9 "
             "--ssh-config '%s/ssh_config' --hosts node1:1,node2:1",
             sd.dir, sd.dir);
    return a;
}

int main(void)
{
    static const char *const modes[] = {"off", "on", "auto"};
    const char *why;

    test_rule();
    test_decide();
    test_probe_order();

    why = cluster_start();
    if (why) {
        diag("no runs: %s", why);
        return done_testing();
    }
    sshd_write_quadrants(&sd, NTRAIN, SIDE);
    sshd_write(sd.dir, "spec", "c1: conv 4 3x3 pad=1\nrelu\nfc1: dense 16\nrelu\nfc2: dense N\n");
    is_int(nnlab("import syn '%s/data'", sd.dir), 0, "import a synthetic dataset: %s", errtext);

    /* Refusals. */
    is_int(nnlab("%s --epochs 1 --overlap sometimes", train_args()), 2,
           "--overlap sometimes is a usage error");
    like(errtext, "--overlap sometimes: want auto, on or off", "the message: %s", errtext);
    is_int(nnlab("--json train --data syn --model '%s/spec' --epochs 1 --overlap on", sd.dir), 2,
           "--overlap without hosts is a usage error");
    like(errtext, "cluster options need --hosts", "the message: %s", errtext);

    /* The three modes: the same weights, bit for bit; each recorded in the run's settings. 5
     * epochs of 13 steps: enough for auto to measure (3 warm-up steps, then 4 blocks of 3 steps
     * of each mode, 27 steps in a run of at least twice that: 54). */
    char *w[3] = {NULL, NULL, NULL};
    size_t wn[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        is_int(nnlab("%s --epochs 5 --overlap %s --name ov-%s", train_args(), modes[k], modes[k]),
               0, "2 workers train with --overlap %s: %s", modes[k], errtext);
        ok(sshd_db_int(&sd,
                       "SELECT count(*) FROM runs WHERE name = 'ov-%s' AND settings LIKE "
                       "'%%\"overlap\":\"%s\"%%'",
                       modes[k], modes[k]) == 1,
           "the run's settings record overlap %s", modes[k]);
        if (k < 2) {
            ok(isnan(overlap_field("step")), "--overlap %s measures nothing", modes[k]);
            check_runs(k ? "ov-on" : "ov-off", modes[k], modes[k], NULL, 0, 0);
        } else {
            /* auto: both step times, and the choice from step 28 on (3 warm-up steps, 24 steps
             * of blocks, 16 of them measured). */
            const double sync = overlap_field("sync_ms"), ov = overlap_field("overlapped_ms");
            const double chosen = overlap_field("overlapped");
            is_float(overlap_field("step"), NL_OVERLAP_PROBE_STEPS, 0, "auto chose after step %d",
                     NL_OVERLAP_PROBE_STEPS);
            ok(sync > 0 && ov > 0, "auto measured %.2f ms synchronous, %.2f ms overlapped", sync,
               ov);
            ok(chosen == (ov <= sync * (1 + NL_OVERLAP_MARGIN)),
               "and chose the faster: %s (the rule's margin: %.0f%%)",
               chosen == 1 ? "overlapped" : "synchronous", 100 * NL_OVERLAP_MARGIN);
            ok(sshd_db_int(&sd,
                           "SELECT count(*) FROM runs WHERE name = 'ov-auto' AND "
                           "json_extract(settings, '$.overlap_chosen') = '%s' AND "
                           "json_extract(settings, '$.overlap_sync_ms') > 0 AND "
                           "json_extract(settings, '$.overlap_overlapped_ms') > 0 AND "
                           "json_extract(settings, '$.overlap_step') = %d",
                           chosen == 1 ? "overlapped" : "synchronous", NL_OVERLAP_PROBE_STEPS) == 1,
               "the run records the choice and both step times");
            check_runs("ov-auto", "auto", NULL, chosen == 1 ? "overlapped" : "synchronous", sync,
                       ov);
        }
        is_int(nnlab("export ov-%s '%s/ov-%s.safetensors'", modes[k], sd.dir, modes[k]), 0,
               "export ov-%s: %s", modes[k], errtext);
        char path[600];
        snprintf(path, sizeof path, "%s/ov-%s.safetensors", sd.dir, modes[k]);
        w[k] = whole(path, &wn[k]);
    }
    ok(w[0] && w[1] && wn[0] > 0 && wn[0] == wn[1] && memcmp(w[0], w[1], wn[0]) == 0,
       "overlapped and synchronous exchanges end with the same weights, bit for bit (%zu bytes)",
       wn[0]);
    ok(w[0] && w[2] && wn[0] == wn[2] && memcmp(w[0], w[2], wn[0]) == 0,
       "and so does auto, measuring both then keeping one (%zu bytes)", wn[2]);
    for (int k = 0; k < 3; k++)
        free(w[k]);

    /* Too short to measure (52 steps, 2 fewer than twice the probe's 27), or one member: the
     * static rule, nothing to report. */
    is_int(nnlab("%s --epochs 4 --name ov-short", train_args()), 0,
           "2 workers train 4 epochs with --overlap auto: %s", errtext);
    ok(isnan(overlap_field("step")), "a run too short to measure measures nothing");
    check_runs("ov-short", "auto", "auto, not measured", NULL, 0, 0);
    is_int(nnlab("--json train --data syn --model '%s/spec' --batch 32 --seed 5 --epochs 5 "
                 "--ssh-config '%s/ssh_config' --hosts node1:1 --name ov-one",
                 sd.dir, sd.dir),
           0, "1 worker trains 5 epochs with --overlap auto: %s", errtext);
    ok(isnan(overlap_field("step")), "a run of one member measures nothing");

    /* A resumed run keeps its mode; --overlap does not go with --resume. */
    is_int(nnlab("--json train --resume ov-off --epochs 6 --overlap on --hosts node1:1,node2:1 "
                 "--ssh-config '%s/ssh_config'",
                 sd.dir),
           2, "--overlap with --resume is a usage error");
    like(errtext, "--overlap does not go with it", "the message: %s", errtext);
    is_int(nnlab("--json train --resume ov-off --epochs 6 --hosts node1:1,node2:1 --ssh-config "
                 "'%s/ssh_config'",
                 sd.dir),
           0, "ov-off resumed to 6 epochs: %s", errtext);
    ok(sshd_db_int(&sd, "SELECT count(*) FROM runs WHERE name = 'ov-off' AND epochs_done = 6 AND "
                        "settings LIKE '%%\"overlap\":\"off\"%%'") == 1,
       "the resumed run keeps overlap off");
    /* auto measures again in the resumed part: steps 66-68 warm up, 69-92 are measured. */
    is_int(nnlab("--json train --resume ov-auto --epochs 10 --hosts node1:1,node2:1 --ssh-config "
                 "'%s/ssh_config'",
                 sd.dir),
           0, "ov-auto resumed to 10 epochs: %s", errtext);
    is_float(overlap_field("step"), 65 + NL_OVERLAP_PROBE_STEPS, 0,
             "the resumed run measured again, from step 69 to 92");
    ok(sshd_db_int(&sd, "SELECT count(*) FROM runs WHERE name = 'ov-auto' AND epochs_done = 10 AND "
                        "settings LIKE '%%\"overlap\":\"auto\"%%' AND "
                        "json_extract(settings, '$.overlap_step') = 92") == 1,
       "and records its new measurement, still overlap auto");
    is_int(nnlab("runs ov-auto"), 0, "runs ov-auto: %s", errtext);
    like(out, " from step 93 (", "and shows the new choice, from step 93");
    test_mpi();
    sshd_stop(&sd);
    return done_testing();
}
