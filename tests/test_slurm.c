/* MPI mode under a real Slurm: a one-node cluster started by hand under a temporary folder (munged
 * with its own key and socket, slurmctld and slurmd from a generated slurm.conf on 127.0.0.1 at
 * free ports, all children of this test, each ended by its pid), then `sbatch --wait` of a job of
 * 3 tasks whose `srun --mpi=pmix nnlab train ... --mpi` trains to completion, recorded in the
 * store with its 3 ranks; and `srun --mpi=none` of 3 tasks, each of which would be a rank 0 of 1,
 * refused with its reason. Skipped with the reason when Slurm, munge or the MPI build is missing
 * or when the daemons do not start here. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sh.h"
#include "sshd.h"
#include "tap.h"

static struct sshd sd; /* only its folder and helpers: no sshd is started */
static const char *bin;
static pid_t daemons[3];
static char out[1 << 16];

/* Starts argv (NULL-terminated) as a child with stdout and stderr to log; its pid. */
static pid_t spawn(const char *log, char *const argv[])
{
    const pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(log, "w", stdout) || !freopen(log, "a", stderr))
            _exit(127);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static void stop_daemons(void)
{
    /* slurmd, then slurmctld, then munged: each by its pid, each waited for. */
    for (int i = 2; i >= 0; i--) {
        if (daemons[i] <= 0)
            continue;
        kill(daemons[i], SIGTERM);
        int st;
        for (int t = 0; t < 100 && waitpid(daemons[i], &st, WNOHANG) == 0; t++) {
            struct timespec ts = {0, 50000000};
            nanosleep(&ts, NULL);
        }
        if (waitpid(daemons[i], &st, WNOHANG) == 0) {
            kill(daemons[i], SIGKILL);
            waitpid(daemons[i], &st, 0);
        }
        daemons[i] = 0;
    }
}

static void give_up(const char *why)
{
    stop_daemons();
    sshd_stop(&sd);
    skip_all("%s", why);
}

static void read_file(const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", sd.dir, name);
    char *t = sshd_read(path);
    snprintf(out, sizeof out, "%s", t ? t : "");
    for (char *c = out; *c; c++)
        if (*c == '\n')
            *c = ' '; /* one line, for TAP descriptions */
}

/* The cluster: munge key and daemon, slurm.conf, slurmctld, slurmd; NULL or why not. */
static const char *start_slurm(void)
{
    char path[600], key[600], sock[600], log[600], conf[600], host[256], text[4096];
    if (sh("cd '%s' && mkdir -p state spool log && head -c 1024 /dev/urandom > munge.key && "
           "chmod 600 munge.key",
           sd.dir) != 0)
        return "cannot write a munge key";
    snprintf(key, sizeof key, "--key-file=%s/munge.key", sd.dir);
    snprintf(sock, sizeof sock, "--socket=%s/munge.sock", sd.dir);
    snprintf(path, sizeof path, "--pid-file=%s/munged.pid", sd.dir);
    snprintf(log, sizeof log, "--log-file=%s/log/munged.log", sd.dir);
    char seed[600];
    snprintf(seed, sizeof seed, "--seed-file=%s/munged.seed", sd.dir);
    char *margv[] = {"/usr/sbin/munged", "-F", "-f", key, sock, path, log, seed, NULL};
    snprintf(text, sizeof text, "%s/log/munged.out", sd.dir);
    daemons[0] = spawn(text, margv);
    for (int i = 0; i < 50; i++) {
        snprintf(path, sizeof path, "%s/munge.sock", sd.dir);
        if (access(path, F_OK) == 0)
            break;
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
    if (access(path, F_OK) != 0)
        return "munged did not start";
    if (gethostname(host, sizeof host) != 0)
        return "no host name";
    host[strcspn(host, ".")] = '\0';
    const int p1 = sshd_free_port(), p2 = sshd_free_port();
    snprintf(text, sizeof text,
             "ClusterName=nnlabtest\nSlurmctldHost=%s(127.0.0.1)\nSlurmctldPort=%d\n"
             "SlurmdPort=%d\nSlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\n"
             "AuthInfo=socket=%s/munge.sock\nCredType=cred/munge\nStateSaveLocation=%s/state\n"
             "SlurmdSpoolDir=%s/spool\nSlurmctldPidFile=%s/slurmctld.pid\n"
             "SlurmdPidFile=%s/slurmd.pid\nSlurmctldLogFile=%s/log/slurmctld.log\n"
             "SlurmdLogFile=%s/log/slurmd.log\nProctrackType=proctrack/linuxproc\n"
             "TaskPlugin=task/none\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
             "SchedulerType=sched/builtin\nJobAcctGatherType=jobacct_gather/none\n"
             "AccountingStorageType=accounting_storage/none\nMpiDefault=none\n"
             "ReturnToService=2\nSlurmdParameters=config_overrides\n"
             "NodeName=%s NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN\n"
             "PartitionName=debug Nodes=%s Default=YES MaxTime=INFINITE State=UP "
             "OverSubscribe=YES\n",
             host, p1, p2, sd.dir, sd.dir, sd.dir, sd.dir, sd.dir, sd.dir, sd.dir, host, host);
    sshd_write(sd.dir, "slurm.conf", text);
    snprintf(conf, sizeof conf, "%s/slurm.conf", sd.dir);
    setenv("SLURM_CONF", conf, 1);
    char *cargv[] = {"/usr/sbin/slurmctld", "-D", "-f", conf, NULL};
    snprintf(text, sizeof text, "%s/log/slurmctld.out", sd.dir);
    daemons[1] = spawn(text, cargv);
    char *dargv[] = {"/usr/sbin/slurmd", "-D", "-f", conf, NULL};
    snprintf(text, sizeof text, "%s/log/slurmd.out", sd.dir);
    daemons[2] = spawn(text, dargv);
    for (int i = 0; i < 60; i++) {
        if (sh("sinfo -h -o %%T 2>/dev/null | grep -q idle") == 0)
            return NULL;
        struct timespec ts = {0, 250000000};
        nanosleep(&ts, NULL);
    }
    return "slurmctld and slurmd did not report an idle node within 15 s";
}

int main(void)
{
    char probe[700], script[4096];

    bin = getenv("NNLAB_BIN");
    if (!bin || access(bin, X_OK) != 0)
        skip_all("NNLAB_BIN does not name the nnlab binary");
    if (access("/usr/sbin/slurmctld", X_OK) != 0 || access("/usr/sbin/slurmd", X_OK) != 0 ||
        access("/usr/sbin/munged", X_OK) != 0 || sh("command -v sbatch >/dev/null") != 0)
        skip_all("no Slurm or munge (apt-get install slurm-wlm munge)");
    snprintf(probe, sizeof probe, "'%s' train --help | grep -q -- --mpi", bin);
    if (sh("%s", probe) != 0)
        skip_all("this nnlab was built without MPI");
    if (geteuid() != 0)
        skip_all("a hand-started slurmd runs jobs as root only");
    /* A private folder (sshd.h's helpers), without an sshd. */
    snprintf(sd.dir, sizeof sd.dir, "/tmp/nnlab-slurm-XXXXXX");
    if (!mkdtemp(sd.dir))
        skip_all("cannot make a temporary folder");
    const char *why = start_slurm();
    if (why)
        give_up(why);

    sshd_write_quadrants(&sd, 400, 12);
    sshd_write(sd.dir, "spec", "fc1: dense 16\nrelu\nfc2: dense N\n");
    is_int(sh("'%s' --db '%s/db' import syn '%s/data' >/dev/null 2>&1", bin, sd.dir, sd.dir), 0,
           "import a synthetic dataset");

    /* A batch job of 3 tasks: srun --mpi=pmix starts the ranks. */
    snprintf(script, sizeof script,
             "#!/bin/sh\n#SBATCH --ntasks=3\n#SBATCH --output=%s/job.out\n"
             "#SBATCH --error=%s/job.err\nexport HOME='%s'\n"
             "srun --mpi=pmix '%s' --db '%s/db' --json train --data syn --model '%s/spec' "
             "--epochs 2 --batch 32 --threads 1 --name slurm --mpi\n",
             sd.dir, sd.dir, sd.dir, bin, sd.dir, sd.dir);
    sshd_write(sd.dir, "job.sbatch", script);
    is_int(sh("cd '%s' && timeout 120 sbatch --wait job.sbatch >/dev/null 2>&1", sd.dir), 0,
           "sbatch --wait of a 3-task job ends well");
    read_file("job.out");
    like(out, "\"event\":\"done\"", "the job trained to the end");
    like(out, "\"host\":\"rank 2 (", "on 3 ranks");
    is_int(sshd_db_int(&sd, "SELECT COUNT(DISTINCT worker) FROM worker_steps WHERE run = (SELECT "
                            "id FROM runs WHERE name = 'slurm')"),
           3, "the store has each rank's steps");
    is_int(sshd_db_int(&sd, "SELECT COUNT(*) FROM runs WHERE name = 'slurm' AND status = 'done'"),
           1, "the run is done");

    /* srun without PMI: 3 tasks that are each a singleton. */
    const int st = sh("cd '%s' && timeout 60 srun -n 3 --mpi=none '%s' --db '%s/db' train --data "
                      "syn --model '%s/spec' --epochs 1 --name single --mpi >'%s/single.out' "
                      "2>&1",
                      sd.dir, bin, sd.dir, sd.dir, sd.dir);
    ok(st != 0, "srun --mpi=none of 3 tasks fails");
    read_file("single.out");
    like(out, "did not connect them", "each task says why: %.200s", out);
    is_int(sshd_db_int(&sd, "SELECT COUNT(*) FROM runs WHERE name = 'single'"), 0,
           "and no run is recorded");

    stop_daemons();
    sshd_stop(&sd);
    return done_testing();
}
