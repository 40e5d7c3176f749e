/* Cluster fault tolerance end to end, through the real binary and a private sshd on 127.0.0.1
 * (tests/sshd.h): a worker killed with SIGKILL in the middle of a 2-worker and of a 3-worker run
 * is restarted on its host and the run finishes within a point of the same run undisturbed, the
 * recovery shown on stdout and stored in the database; with --max-restarts 0 the lost worker is
 * dropped and the others finish; a stalled worker (SIGSTOP) is found by its missing heartbeats;
 * a driver killed outright or stalled leaves no worker behind after the heartbeat timeout; and a
 * cluster run killed in the middle continues with --resume on the same data order; a plateau
 * schedule goes through a lost worker and a resumed driver unchanged; a worker lost again while
 * the driver recovers from a first loss is recovered from in turn; a batch-normalised model goes
 * through a lost worker with its running statistics. Workers are
 * found as descendants of the sshd this test started, never by name. */
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

#include <sqlite3.h>

#include "cluster_util.h"
#include "nnlab/rng.h"
#include "tap.h"

enum { SIDE = 12, NTRAIN = 2000, EPOCHS = 8, BATCH = 4 };
/* The heartbeat timeout in seconds: short, and generous on a loaded machine; under the
 * sanitizers a driver's recovery work can keep it from beating for longer. */
#if defined(__SANITIZE_ADDRESS__)
#define HEARTBEAT "6"
#else
#define HEARTBEAT "3"
#endif

/* The nearest sshd process above pid (its SSH session); 0 when none. */
static long session_of(long pid)
{
    for (long a = sshd_parent_of(pid); a > 1 && a != sd.pid; a = sshd_parent_of(a)) {
        char path[64], cmd[256];
        snprintf(path, sizeof path, "/proc/%ld/cmdline", a);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(cmd, 1, sizeof cmd - 1, f) : 0;
        if (f)
            fclose(f);
        cmd[n] = '\0';
        if (strncmp(cmd, "sshd:", 5) == 0)
            return a;
    }
    return 0;
}

/* 1 when process pid has a TCP socket in the LISTEN state (/proc/net/tcp, tcp6). */
static int listening(long pid)
{
    unsigned long inodes[64];
    int n = 0;
    for (int v = 0; v < 2; v++) {
        FILE *f = fopen(v ? "/proc/net/tcp6" : "/proc/net/tcp", "r");
        char line[512];
        while (f && fgets(line, sizeof line, f) && n < 64) {
            char local[128], remote[128];
            unsigned st;
            unsigned long inode;
            if (sscanf(line, " %*d: %127s %127s %x %*s %*s %*s %*s %*s %lu", local, remote, &st,
                       &inode) == 4 &&
                st == 0x0A)
                inodes[n++] = inode;
        }
        if (f)
            fclose(f);
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/fd", pid);
    DIR *d = opendir(path);
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d))) {
        char link[320], target[128];
        snprintf(link, sizeof link, "%s/%s", path, e->d_name);
        ssize_t l = readlink(link, target, sizeof target - 1);
        unsigned long inode;
        if (l <= 0)
            continue;
        target[l] = '\0';
        if (sscanf(target, "socket:[%lu]", &inode) == 1)
            for (int i = 0; i < n && !found; i++)
                found = inodes[i] == inode;
    }
    if (d)
        closedir(d);
    return found;
}

/* Waits up to seconds for the background run's stdout to hold count lines with needle, or one
 * with other (may be NULL). */
static int wait_for(const char *needle, int count, const char *other, double seconds)
{
    for (int i = 0; i < (int)(seconds * 50); i++) {
        cluster_slurp("bg.out", out, sizeof out);
        int k = 0;
        for (const char *p = out; (p = strstr(p, needle)); p++)
            k++;
        if (k >= count || (other && strstr(out, other)))
            return 1;
        usleep(20000);
    }
    return 0;
}

/* The train_loss of the last epoch line in out. */
static double last_loss(void)
{
    const char *last = NULL;
    for (const char *p = out; (p = strstr(p, "\"event\":\"epoch\"")); p++)
        last = p;
    return last ? json_field(last, "train_loss") : NAN;
}

static void write_idx(void)
{
    char path[600];
    struct nl_rng r;
    unsigned char hdr[16];
    nl_rng_seed(&r, 7);
    snprintf(path, sizeof path, "%s/data", sd.dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/data/train-images-idx3-ubyte", sd.dir);
    FILE *fi = fopen(path, "wb");
    snprintf(path, sizeof path, "%s/data/train-labels-idx1-ubyte", sd.dir);
    FILE *fl = fopen(path, "wb");
    const unsigned ih[4] = {0x803, NTRAIN, SIDE, SIDE}, lh[2] = {0x801, NTRAIN};
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 4; b++)
            hdr[4 * i + b] = (unsigned char)(ih[i] >> (24 - 8 * b));
    fwrite(hdr, 1, 16, fi);
    for (int i = 0; i < 2; i++)
        for (int b = 0; b < 4; b++)
            hdr[4 * i + b] = (unsigned char)(lh[i] >> (24 - 8 * b));
    fwrite(hdr, 1, 8, fl);
    /* Four classes: a bright 4x4 square in one of four quadrants, on noise, some faint. */
    for (int i = 0; i < NTRAIN; i++) {
        unsigned char img[SIDE * SIDE];
        int k = (int)nl_rng_below(&r, 4);
        int oy = (k / 2) * 6 + 1 + (int)nl_rng_below(&r, 2);
        int ox = (k % 2) * 6 + 1 + (int)nl_rng_below(&r, 2);
        int bright = 90 + (int)nl_rng_below(&r, 100);
        for (int p = 0; p < SIDE * SIDE; p++)
            img[p] = (unsigned char)nl_rng_below(&r, 120);
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 4; x++)
                img[(oy + y) * SIDE + ox + x] = (unsigned char)(bright + nl_rng_below(&r, 60));
        fwrite(img, 1, sizeof img, fi);
        fputc(k, fl);
    }
    fclose(fi);
    fclose(fl);
}

static const char *train_args_for(int epochs)
{
    static char a[1024];
    snprintf(a, sizeof a,
             "train --data syn --model '%s/spec' --epochs %d --batch %d --seed 3 --lr 0.02 "
             "--ssh-config '%s/ssh_config' --heartbeat-timeout " HEARTBEAT,
             sd.dir, epochs, BATCH, sd.dir);
    return a;
}

static const char *train_args(void)
{
    return train_args_for(EPOCHS);
}

/* Kills one worker of a background run with sig once `after` epoch lines are out (JSON lines
 * or text). */
static int kill_a_worker(int after, int sig, long *victim)
{
    long pids[8];
    char text[32];
    snprintf(text, sizeof text, "epoch %d/", after);
    if (!wait_for("\"event\":\"epoch\"", after, text, 60))
        return 0;
    int n = sshd_worker_pids(&sd, pids, 8);
    if (n == 0)
        return 0;
    *victim = pids[n - 1];
    return kill((pid_t)*victim, sig) == 0;
}

/* The undisturbed runs' test accuracy on 2 and 3 workers (base[2], base[3]) and the 2-worker
 * run's last loss, which the disturbed runs match. */
static double base[4] = {NAN, NAN, NAN, NAN}, base_loss = NAN;

/* Undisturbed runs on 2 and 3 workers: the accuracy and loss the others match. */
static void check_undisturbed(void)
{
    for (int n = 2; n <= 3; n++) {
        is_int(nnlab("--json %s --hosts %s --name base%d", train_args(),
                     n == 2 ? "node1,node2" : "node1,node2,node3", n),
               0, "an undisturbed %d-worker run: %s", n, errtext);
        base[n] = done_value("test_accuracy");
        if (n == 2)
            base_loss = last_loss();
        ok(base[n] > 0.5, "it learns (test accuracy %.4f)", base[n]);
        ok(!strstr(out, "\"event\":\"recovery\""), "and reports no recovery");
    }
}

/* A worker that ends before the driver has read what it sent: the driver is stopped (SIGSTOP)
 * after epoch 1 of 3 while its one worker trains on, says DONE and exits, so the channel closes
 * with the last epochs' reports still unread. Continued, the driver cannot send its next
 * heartbeat there; it must read what is there and finish the run, not call the worker lost. */
static void check_ends_unread(void)
{
    long pids[8];
    int left = 1;
    pid_t pid = start("--json %s --hosts node1 --max-restarts 0 --name unread", train_args_for(3));
    const int stopped = wait_for("\"event\":\"epoch\"", 1, NULL, 60) && kill(pid, SIGSTOP) == 0;
    for (int i = 0; stopped && left && i < (int)(50 * atof(HEARTBEAT)); i++) {
        usleep(10000);
        left = sshd_worker_pids(&sd, pids, 8);
    }
    ok(stopped && !left, "the driver stopped after epoch 1; its one worker ended meanwhile");
    usleep((useconds_t)(atof(HEARTBEAT) * 5e5)); /* its next heartbeat is due */
    kill(pid, SIGCONT);
    is_int(finish(pid), 0, "continued, the driver finishes the run: %s", errtext);
    ok(!strstr(out, "\"event\":\"recovery\""), "no worker was lost");
    double loss[8];
    is_int(losses(loss, 8), 3, "all 3 epochs are reported");
    ok(isfinite(done_value("test_accuracy")), "and the test accuracy");
}

/* SIGKILL one worker in the middle: restarted on its host, the run finishes. */
static void check_killed_worker(void)
{
    for (int n = 2; n <= 3; n++) {
        long victim = 0;
        pid_t pid = start("%s %s --hosts %s --name kill%d", n == 2 ? "--json" : "", train_args(),
                          n == 2 ? "node1,node2" : "node1,node2,node3", n);
        ok(kill_a_worker(2, SIGKILL, &victim), "%d workers: one killed after epoch 2", n);
        is_int(finish(pid), 0, "%d workers: the run finishes: %s", n, errtext);
        if (n == 2) {
            like(out, "{\"event\":\"recovery\",\"host\":\"node", "the recovery is a JSON line");
            like(out, "\"action\":\"restarted\",\"restarts\":1,\"max_restarts\":3",
                 "the worker was restarted, the first of 3");
            like(out, "worker died (", "saying what happened");
            const double acc = done_value("test_accuracy");
            ok(fabs(acc - base[n]) <= 0.01, "test accuracy %.4f, undisturbed %.4f", acc, base[n]);
        } else {
            like(out, ": worker died (", "the recovery is shown on its own line");
            like(out, "; restarted (1 of 3), continuing from step ", "with what was done");
            const char *t = strstr(out, "test accuracy ");
            const double acc = t ? strtod(t + 14, NULL) : NAN;
            ok(fabs(acc - base[n]) <= 0.01, "test accuracy %.4f, undisturbed %.4f", acc, base[n]);
        }
        is_int(
            sshd_db_int(&sd,
                        "SELECT count(*) FROM recoveries JOIN runs ON runs.id = run WHERE name = "
                        "'kill%d' AND action = 'restarted'",
                        n),
            1, "%d workers: the recovery is stored with the run", n);
        is_int(sshd_db_int(&sd,
                           "SELECT count(*) FROM epochs JOIN runs ON runs.id = run WHERE name = "
                           "'kill%d'",
                           n),
               EPOCHS, "%d workers: every epoch is stored", n);
        ok(sshd_no_workers_left(&sd, 5), "%d workers: no worker is left", n);
        is_int(nnlab("runs kill%d", n), 0, "nnlab runs kill%d", n);
        like(out, "worker died (", "lists the recovery");
        like(out, "restarted, continued from step ", "with what was done");
    }
    is_int(nnlab("--json runs kill2"), 0, "nnlab --json runs kill2");
    like(out, "\"recoveries\":[{\"step\":", "lists the recoveries as JSON");
    is_int(nnlab("runs base2"), 0, "nnlab runs base2");
    like(out, "no worker was lost", "says when nothing happened");
}

/* Without optimizer state (SGD without momentum) nothing is lost with a worker: the run
 * goes on from the very parameters the undisturbed run had, on the same data order, and
 * ends as it does. */
static void check_no_optimizer_state(void)
{
    long victim = 0;
    is_int(nnlab("--json %s --hosts node1,node2 --momentum 0 --name plain", train_args()), 0,
           "an undisturbed run without momentum: %s", errtext);
    const double plain = last_loss();
    pid_t pid = start("--json %s --hosts node1,node2 --momentum 0 --name plain-kill", train_args());
    ok(kill_a_worker(2, SIGKILL, &victim), "a worker killed after epoch 2");
    is_int(finish(pid), 0, "the run finishes: %s", errtext);
    like(out, "\"action\":\"restarted\"", "the worker was restarted");
    const double loss = last_loss();
    ok(isfinite(plain) && fabs(loss - plain) <= 1e-6 + 1e-5 * fabs(plain),
       "the last epoch's loss %.9g is the undisturbed run's %.9g", loss, plain);
    ok(sshd_no_workers_left(&sd, 5), "no worker is left");
}

/* A plateau schedule (the rate halved after every epoch from the second on: validation
 * accuracy is 1 from the first) through a lost worker and through a lost driver: the new
 * generation's members, and the resumed run's, learn the watched accuracy of the epochs
 * before their start, apply the same rate, and (without optimizer state) end as the
 * undisturbed run. */
static void check_plateau(void)
{
    long victim = 0;
    const char *plateau = "--momentum 0 --schedule plateau:1:0.5";
    is_int(nnlab("--json %s --hosts node1,node2 %s --name plateau", train_args(), plateau), 0,
           "an undisturbed plateau run: %s", errtext);
    const double undisturbed = last_loss();
    is_int(nnlab("--json %s --hosts node1,node2 --momentum 0 --schedule constant", train_args()), 0,
           "the same at a constant rate: %s", errtext);
    ok(last_loss() < 0.8 * undisturbed, "the plateau lowered the rate (%.6g against %.6g)",
       undisturbed, last_loss());
    pid_t pid =
        start("--json %s --hosts node1,node2 %s --name plateau-kill", train_args(), plateau);
    ok(kill_a_worker(2, SIGKILL, &victim), "a plateau run's worker killed after epoch 2");
    is_int(finish(pid), 0, "the run finishes: %s", errtext);
    like(out, "\"action\":\"restarted\"", "the worker was restarted");
    double loss = last_loss();
    ok(isfinite(undisturbed) && fabs(loss - undisturbed) <= 1e-6 + 1e-5 * fabs(undisturbed),
       "the last epoch's loss %.9g is the undisturbed run's %.9g", loss, undisturbed);
    ok(sshd_no_workers_left(&sd, 5), "no worker is left");

    pid = start("--json %s --hosts node1,node2 %s --checkpoint-every 100 --name "
                "plateau-resumed",
                train_args(), plateau);
    ok(wait_for("\"event\":\"epoch\"", 3, NULL, 60), "a plateau run to be resumed is past "
                                                     "epoch 3");
    usleep(150000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ok(sshd_no_workers_left(&sd, 6), "its driver killed, no worker is left");
    is_int(nnlab("--json train --resume plateau-resumed --hosts node1,node2 --ssh-config "
                 "'%s/ssh_config' --heartbeat-timeout " HEARTBEAT,
                 sd.dir),
           0, "--resume continues it on the cluster: %s", errtext);
    loss = last_loss();
    ok(fabs(loss - undisturbed) <= 1e-6 + 1e-5 * fabs(undisturbed),
       "the last epoch's loss %.9g is the undisturbed run's %.9g", loss, undisturbed);
    ok(sshd_no_workers_left(&sd, 5), "no worker is left");
}

/* A second loss during the recovery: the restarted worker killed as soon as it appears
 * (the driver waits for it to say where it listens), or as soon as it listens (the driver
 * sets the new generation up, or the mesh forms again). The driver recovers again,
 * restarting it while restarts last and dropping it after; the run finishes either way. */
static void check_second_loss(void)
{
    static const struct {
        int max, listening;
    } twice[] = {{3, 0}, {3, 1}, {1, 1}};
    for (int t = 0; t < 3; t++) {
        const int max = twice[t].max;
        long pids[8], before[8], second = 0;
        pid_t pid = start("--json %s --hosts node1,node2 --max-restarts %d --name twice%d",
                          train_args(), max, t);
        int nb =
            wait_for("\"event\":\"epoch\"", 2, NULL, 60) ? sshd_worker_pids(&sd, before, 8) : 0;
        ok(nb == 2 && kill((pid_t)before[1], SIGKILL) == 0,
           "max-restarts %d: a worker (pid %ld) killed after epoch 2", max, nb ? before[1] : 0L);
        for (int i = 0; nb == 2 && i < 20000 && !second; i++) {
            const int n = sshd_worker_pids(&sd, pids, 8);
            for (int k = 0; k < n && !second; k++)
                if (pids[k] != before[0] && pids[k] != before[1] &&
                    (!twice[t].listening || listening(pids[k])))
                    second = pids[k];
            if (!second)
                usleep(500);
        }
        ok(second > 0 && kill((pid_t)second, SIGKILL) == 0,
           "its restarted worker (pid %ld) killed as soon as it %s", second,
           twice[t].listening ? "listened" : "appeared");
        is_int(finish(pid), 0, "the run finishes: %s", errtext);
        int nrec = 0;
        for (const char *q = out; (q = strstr(q, "{\"event\":\"recovery\"")); q++) {
            diag("%.*s", (int)strcspn(q, "\n"), q);
            nrec++;
        }
        if (max == 3) {
            like(out, "\"restarts\":2,", "both losses were recovered from by restarts");
            ok(!strstr(out, "\"action\":\"dropped\""), "none was dropped");
            const double acc = done_value("test_accuracy");
            ok(fabs(acc - base[2]) <= 0.01, "test accuracy %.4f, undisturbed %.4f", acc, base[2]);
        } else {
            like(out, "\"action\":\"dropped\",\"restarts\":1,",
                 "with 1 restart, the worker is dropped after its second loss");
            like(out, "\"workers\":1}", "1 worker went on");
            const double acc = done_value("test_accuracy");
            ok(fabs(acc - base[2]) <= 0.02, "test accuracy %.4f, undisturbed %.4f", acc, base[2]);
        }
        is_int(
            sshd_db_int(&sd,
                        "SELECT count(*) FROM recoveries JOIN runs ON runs.id = run WHERE name = "
                        "'twice%d'",
                        t),
            nrec, "the %d recoveries are stored", nrec);
        is_int(sshd_db_int(&sd,
                           "SELECT count(*) FROM epochs JOIN runs ON runs.id = run WHERE name = "
                           "'twice%d'",
                           t),
               EPOCHS, "every epoch is stored");
        ok(sshd_no_workers_left(&sd, 5), "no worker is left");
    }
}

/* Batch normalisation through a lost worker: the running statistics (exchanged beside the
 * gradient, outside the optimizer's slices) come back with the parameters. Without
 * optimizer state the run ends exactly as the undisturbed one; with momentum (one slice's
 * lost since the last checkpoint) close to it. */
static void check_batchnorm(void)
{
    sshd_write(sd.dir, "bnspec",
               "c1: conv 8 3x3 pad=1 bias=no\nb1: batchnorm\nrelu\npool: maxpool 3\n"
               "fc: dense N\n");
    for (int momentum = 0; momentum <= 1; momentum++) {
        char args[1600];
        long victim = 0;
        snprintf(
            args, sizeof args,
            "--json train --data syn --model '%s/bnspec' --epochs %d --batch %d --seed 3 "
            "--lr 0.02 --momentum %s --ssh-config '%s/ssh_config' --heartbeat-timeout " HEARTBEAT
            " --hosts node1,node2",
            sd.dir, EPOCHS, BATCH, momentum ? "0.9" : "0", sd.dir);
        is_int(nnlab("%s --name bn%d", args, momentum), 0, "an undisturbed batch-norm run: %s",
               errtext);
        const double loss0 = last_loss(), acc0 = done_value("test_accuracy");
        ok(acc0 > 0.5, "it learns (test accuracy %.4f)", acc0);
        pid_t pid = start("%s --name bn%d-kill", args, momentum);
        ok(kill_a_worker(2, SIGKILL, &victim), "a worker of a batch-norm run killed after epoch 2");
        is_int(finish(pid), 0, "the run finishes: %s", errtext);
        like(out, "\"action\":\"restarted\"", "the worker was restarted");
        is_int(
            sshd_db_int(&sd,
                        "SELECT count(*) FROM recoveries JOIN runs ON runs.id = run WHERE name = "
                        "'bn%d-kill'",
                        momentum),
            1, "the recovery is stored");
        const double loss = last_loss(), acc = done_value("test_accuracy");
        if (momentum == 0)
            ok(isfinite(loss0) && fabs(loss - loss0) <= 1e-6 + 1e-5 * fabs(loss0),
               "without momentum, the last epoch's loss %.9g is the undisturbed run's %.9g", loss,
               loss0);
        else
            ok(isfinite(loss0) && fabs(loss - loss0) <= 0.2 * fabs(loss0) + 0.01,
               "with momentum, the last epoch's loss %.6g is close to the undisturbed run's %.6g",
               loss, loss0);
        ok(fabs(acc - acc0) <= 0.01, "test accuracy %.4f, undisturbed %.4f", acc, acc0);
        ok(sshd_no_workers_left(&sd, 5), "no worker is left");
    }
}

/* A worker's SSH connection cut (its sshd session killed): the driver reaches the host
 * again and restarts the worker there. */
static void check_ssh_cut(void)
{
    long pids[8];
    pid_t pid = start("--json %s --hosts node1,node2 --name cut", train_args());
    int up = wait_for("\"event\":\"epoch\"", 2, NULL, 60) && sshd_worker_pids(&sd, pids, 8) == 2;
    const long session = up ? session_of(pids[0]) : 0;
    ok(session > 0 && kill((pid_t)session, SIGKILL) == 0,
       "the SSH session (pid %ld) of a worker killed", session);
    is_int(finish(pid), 0, "the run finishes: %s", errtext);
    const char *what = strstr(out, "\"what\":");
    like(out, "\"action\":\"restarted\"", "the worker was restarted on a new connection (%.80s)",
         what ? what : "");
    ok(sshd_no_workers_left(&sd, 5), "no worker is left");
}

/* A worker's SSH session stalled (its sshd stopped): the driver hears nothing from the
 * worker, which trains on with the others for a while; it is found by heartbeat, its host
 * reached again and the worker restarted, and the run finishes as it should. */
static void check_ssh_stalled(void)
{
    long pids[8];
    pid_t pid = start("--json %s --hosts node1,node2 --name frozen", train_args());
    int up = wait_for("\"event\":\"epoch\"", 2, NULL, 60) && sshd_worker_pids(&sd, pids, 8) == 2;
    const long session = up ? session_of(pids[0]) : 0;
    ok(session > 0 && kill((pid_t)session, SIGSTOP) == 0,
       "the SSH session (pid %ld) of a worker stopped", session);
    const int st = finish(pid);
    kill((pid_t)session, SIGKILL);
    kill((pid_t)session, SIGCONT);
    is_int(st, 0, "the run finishes: %s", errtext);
    const char *what = strstr(out, "\"what\":");
    like(out, "\"action\":\"restarted\"", "the worker was restarted (%.90s)", what ? what : "");
    const double acc = done_value("test_accuracy");
    ok(fabs(acc - base[2]) <= 0.01, "test accuracy %.4f, undisturbed %.4f", acc, base[2]);
    ok(sshd_no_workers_left(&sd, atof(HEARTBEAT) + 4.0), "no worker is left");
}

/* No restarts allowed: the lost worker is dropped and the other two finish. */
static void check_drop(void)
{
    long victim = 0;
    pid_t pid =
        start("--json %s --hosts node1,node2,node3 --max-restarts 0 --name drop", train_args());
    ok(kill_a_worker(2, SIGKILL, &victim), "a worker of 3 killed");
    is_int(finish(pid), 0, "with --max-restarts 0 the run finishes: %s", errtext);
    like(out, "\"action\":\"dropped\"", "the worker was dropped");
    like(out, "\"workers\":2}", "2 workers went on");
    const double acc = done_value("test_accuracy");
    ok(fabs(acc - base[3]) <= 0.01, "test accuracy %.4f, undisturbed %.4f", acc, base[3]);
    is_int(sshd_db_int(&sd,
                       "SELECT count(*) FROM recoveries JOIN runs ON runs.id = run WHERE name = "
                       "'drop' AND action = 'dropped' AND workers = 2"),
           1, "the drop is stored");
    ok(sshd_no_workers_left(&sd, 5), "no worker is left");
}

/* A stalled worker: no heartbeat, found within the timeout, ended and restarted. */
static void check_stalled_worker(void)
{
    long victim = 0;
    pid_t pid = start("--json %s --hosts node1,node2 --name stall", train_args());
    ok(kill_a_worker(1, SIGSTOP, &victim), "a worker stopped with SIGSTOP");
    is_int(finish(pid), 0, "the run finishes: %s", errtext);
    like(out, "worker stalled (no heartbeat for ", "the stall is found by heartbeat");
    like(out, "\"action\":\"restarted\"", "and the worker restarted");
    /* It was killed on its host; were it not, nothing must be left either way. */
    int gone = kill((pid_t)victim, 0) != 0 || sshd_parent_of(victim) < 0;
    kill((pid_t)victim, SIGCONT);
    kill((pid_t)victim, SIGKILL);
    ok(gone, "the stalled worker was ended on its host");
    ok(sshd_no_workers_left(&sd, 5), "no worker is left");
}

/* The driver killed outright, or stalled: its workers exit within the heartbeat timeout. */
static void check_driver_lost(void)
{
    for (int round = 0; round < 2; round++) {
        long pids[8];
        pid_t pid =
            start("--json %s --hosts node1,node2 --name driver%d", train_args_for(1000), round);
        int up =
            wait_for("\"event\":\"epoch\"", 1, NULL, 60) && sshd_worker_pids(&sd, pids, 8) == 2;
        ok(up, "a long run has its 2 workers up");
        kill(pid, round == 0 ? SIGKILL : SIGSTOP);
        ok(sshd_no_workers_left(&sd, atof(HEARTBEAT) + 4.0),
           "the driver %s: no worker is left after the timeout", round == 0 ? "killed" : "stalled");
        if (round == 1)
            kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
}

/* A cluster run whose driver is killed in the middle resumes from its latest checkpoint,
 * optimizer state included, on the same data order: it ends as the undisturbed run. */
static void check_resume(void)
{
    pid_t pid =
        start("--json %s --hosts node1,node2 --checkpoint-every 100 --name resumed", train_args());
    ok(wait_for("\"event\":\"epoch\"", 3, NULL, 60), "a run to be resumed is past epoch 3");
    usleep(150000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ok(sshd_no_workers_left(&sd, 6), "its driver killed, no worker is left");
    ok(sshd_db_int(&sd, "SELECT count(*) FROM checkpoints JOIN runs ON runs.id = run WHERE name = "
                        "'resumed' AND optim IS NOT NULL") > 0,
       "its checkpoints hold the optimizer state");
    is_int(nnlab("--json train --resume resumed --hosts node1,node2 --ssh-config "
                 "'%s/ssh_config' --heartbeat-timeout " HEARTBEAT,
                 sd.dir),
           0, "--resume continues it on the cluster: %s", errtext);
    const double acc = done_value("test_accuracy"), loss = last_loss();
    ok(fabs(acc - base[2]) <= 0.01, "test accuracy %.4f, undisturbed %.4f", acc, base[2]);
    ok(fabs(loss - base_loss) <= 1e-5 + 1e-3 * fabs(base_loss),
       "the last epoch's loss %.6g is the undisturbed run's %.6g: the same data order", loss,
       base_loss);
    is_int(sshd_db_int(&sd, "SELECT epochs_done FROM runs WHERE name = 'resumed'"), EPOCHS,
           "the run is done with its %d epochs", EPOCHS);
    is_int(nnlab("--json train --resume resumed --epochs %d --ssh-config '%s/ssh_config'",
                 EPOCHS + 1, sd.dir),
           1, "resuming a cluster run without hosts is refused");
    like(errtext, "give --hosts or --hostfile", "saying why: %s", errtext);
    ok(sshd_no_workers_left(&sd, 5), "no worker is left");
}

int main(void)
{
    const char *why;

    why = cluster_start();
    if (why)
        skip_all("%s", why);
    write_idx();
    sshd_write(sd.dir, "spec", "fc1: dense 32\nrelu\nfc2: dense N\n");
    is_int(nnlab("import syn '%s/data' --val 0.1 --test 0.2", sd.dir), 0,
           "import a synthetic dataset");

    check_ends_unread();
    check_undisturbed();
    check_killed_worker();
    check_no_optimizer_state();
    check_plateau();
    check_second_loss();
    check_batchnorm();
    check_ssh_cut();
    check_ssh_stalled();
    check_drop();
    check_stalled_worker();
    check_driver_lost();
    check_resume();

    sshd_stop(&sd);
    return done_testing();
}
