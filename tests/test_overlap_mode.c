/* --overlap auto|on|off: the rule auto follows (nl_worker_overlap: overlap only where a host has a
 * core free beside the compute threads of every member it runs), the option's refusals, and,
 * through the real binary and the private sshd of tests/sshd.h, that the three modes train 2
 * workers to the same weights bit for bit (the mode changes when bytes move, not what is
 * summed), that the run's settings record the mode, and that a resumed run keeps it. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>

#include "cluster_util.h"
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

    /* The three modes: the same weights, bit for bit; each recorded in the run's settings. */
    char *w[3] = {NULL, NULL, NULL};
    size_t wn[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        is_int(nnlab("%s --epochs 2 --overlap %s --name ov-%s", train_args(), modes[k], modes[k]),
               0, "2 workers train with --overlap %s: %s", modes[k], errtext);
        ok(sshd_db_int(&sd,
                       "SELECT count(*) FROM runs WHERE name = 'ov-%s' AND settings LIKE "
                       "'%%\"overlap\":\"%s\"%%'",
                       modes[k], modes[k]) == 1,
           "the run's settings record overlap %s", modes[k]);
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
       "and so does auto (%zu bytes)", wn[2]);
    for (int k = 0; k < 3; k++)
        free(w[k]);

    /* A resumed run keeps its mode; --overlap does not go with --resume. */
    is_int(nnlab("--json train --resume ov-off --epochs 3 --overlap on --hosts node1:1,node2:1 "
                 "--ssh-config '%s/ssh_config'",
                 sd.dir),
           2, "--overlap with --resume is a usage error");
    like(errtext, "--overlap does not go with it", "the message: %s", errtext);
    is_int(nnlab("--json train --resume ov-off --epochs 3 --hosts node1:1,node2:1 --ssh-config "
                 "'%s/ssh_config'",
                 sd.dir),
           0, "ov-off resumed to 3 epochs: %s", errtext);
    ok(sshd_db_int(&sd, "SELECT count(*) FROM runs WHERE name = 'ov-off' AND epochs_done = 3 AND "
                        "settings LIKE '%%\"overlap\":\"off\"%%'") == 1,
       "the resumed run keeps overlap off");
    sshd_stop(&sd);
    return done_testing();
}
