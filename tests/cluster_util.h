/* What the cluster tests share over the private sshd of tests/sshd.h: the nnlab binary
 * (NNLAB_BIN), the fixture sd, and runs of that binary with the fixture's database (DIR/db).
 * A run named NAME writes its stdout and stderr to DIR/NAME.out and DIR/NAME.err, which are read
 * back into out and errtext, errtext on one line (it goes into TAP descriptions): nnlab() runs
 * to the end as "run", start() and finish() run in the background as "bg". The environment's
 * SSH agent is dropped (cluster_bin), so every connection authenticates with the fixture's keys. */
#ifndef NNLAB_TESTS_CLUSTER_UTIL_H
#define NNLAB_TESTS_CLUSTER_UTIL_H

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "slurp.h"
#include "sshd.h"

static struct sshd sd;
static const char *bin;
static char out[1 << 17], errtext[1 << 16];

/* slurp of DIR/name. */
static inline void cluster_slurp(const char *name, char *buf, size_t size)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", sd.dir, name);
    slurp(path, buf, size);
}

static inline void one_line(char *s)
{
    for (char *c = s; *c; c++)
        if (*c == '\n')
            *c = ' ';
}

/* A wait status as a shell gives it: the exit status, or 128 + the signal that ended it. */
static inline int exit_code(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* `exec PREFIX 'BIN' --db 'DIR/db' ARGS` with its output in DIR/NAME.out and NAME.err and no
 * standard input; prefix (a launcher such as mpirun) may be "". */
static inline void cluster_command(char *cmd, size_t cap, const char *prefix, const char *name,
                                   const char *args)
{
    snprintf(cmd, cap, "exec %s '%s' --db '%s/db' %s >'%s/%s.out' 2>'%s/%s.err' </dev/null", prefix,
             bin, sd.dir, args, sd.dir, name, sd.dir, name);
}

/* DIR/NAME.out and NAME.err into out and errtext. */
static inline void cluster_outputs(const char *name)
{
    char file[64];
    snprintf(file, sizeof file, "%s.out", name);
    cluster_slurp(file, out, sizeof out);
    snprintf(file, sizeof file, "%s.err", name);
    cluster_slurp(file, errtext, sizeof errtext);
    one_line(errtext);
}

/* Runs nnlab ARGS after prefix to its end, as "run"; its exit status. */
static inline int cluster_run(const char *prefix, const char *args)
{
    char cmd[4096];
    cluster_command(cmd, sizeof cmd, prefix, "run", args);
    int st = system(cmd);
    cluster_outputs("run");
    return exit_code(st);
}

/* cluster_run with the arguments of fmt and ap. */
static inline int cluster_vrun(const char *prefix, const char *fmt, va_list ap)
{
    char args[2048];
    vsnprintf(args, sizeof args, fmt, ap);
    return cluster_run(prefix, args);
}

/* nnlab ARGS to its end; its exit status, with out and errtext filled. */
static inline int nnlab(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int nnlab(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int st = cluster_vrun("", fmt, ap);
    va_end(ap);
    return st;
}

/* Starts `sh -c CMD` in the background; its pid. */
static inline pid_t cluster_spawn(const char *cmd)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Starts nnlab ARGS after prefix in the background as name (an old DIR/NAME.out is removed
 * first, not to be read for the new run's); its pid (nnlab's or the launcher's). */
static inline pid_t cluster_start_as(const char *prefix, const char *name, const char *args)
{
    char cmd[4096], path[600];
    cluster_command(cmd, sizeof cmd, prefix, name, args);
    snprintf(path, sizeof path, "%s/%s.out", sd.dir, name);
    unlink(path);
    return cluster_spawn(cmd);
}

/* nnlab ARGS in the background as "bg"; its pid. */
static inline pid_t start(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline pid_t start(const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return cluster_start_as("", "bg", args);
}

/* Waits for the background nnlab pid; its exit status (-1 when there is none), with out and
 * errtext filled. */
static inline int finish(pid_t pid)
{
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    cluster_outputs("bg");
    return exit_code(st);
}

/* The number value of "key": in text (NULL: none), NAN without one. */
static inline double json_field(const char *text, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = text ? strstr(text, k) : NULL;
    return p ? strtod(p + strlen(k), NULL) : NAN;
}

/* The number value of "key": in the done line of out; NAN without one. */
static inline double done_value(const char *key)
{
    return json_field(strstr(out, "\"event\":\"done\""), key);
}

/* The "train_loss" values of the epoch lines in out. */
static inline int losses(double *v, int max)
{
    int n = 0;
    for (const char *p = out; n < max && (p = strstr(p, "\"train_loss\":")); p++)
        v[n++] = strtod(p + 13, NULL);
    return n;
}

/* The bytes_sent of each worker in the done line in out. */
static inline int done_bytes(unsigned long long *v, int max)
{
    const char *done = strstr(out, "\"event\":\"done\"");
    int n = 0;
    for (const char *p = done; p && n < max && (p = strstr(p, "\"bytes_sent\":")); p++)
        v[n++] = strtoull(p + 13, NULL, 10);
    return n;
}

/* DIR/reg.csv (a,b,kind,y): 500 rows of a regression table, y a linear function of two numbers
 * and a category, with noise. */
static inline void cluster_write_regression(void)
{
    static char csv[1 << 15];
    size_t len = (size_t)snprintf(csv, sizeof csv, "a,b,kind,y\n");
    for (int i = 0; i < 500; i++) {
        const double a = (i * 37 % 101) / 50.0 - 1.0, b = (i * 53 % 97) / 48.0 - 1.0;
        const double noise = ((i * 7919 % 1000) / 1000.0 - 0.5) * 0.4;
        len += (size_t)snprintf(csv + len, sizeof csv - len, "%.4f,%.4f,%s,%.4f\n", a, b,
                                i % 3 ? "p" : "q", 3 * a - 2 * b + (i % 3 ? 1 : -1) + noise);
    }
    sshd_write(sd.dir, "reg.csv", csv);
}

/* Sets bin from NNLAB_BIN and drops the SSH agent; NULL, or why the binary cannot be run. */
static inline const char *cluster_bin(void)
{
    bin = getenv("NNLAB_BIN");
    if (!bin || access(bin, X_OK) != 0)
        return "NNLAB_BIN does not name the nnlab binary";
    signal(SIGPIPE, SIG_IGN);
    unsetenv("SSH_AUTH_SOCK");
    return NULL;
}

/* cluster_bin, then a binary with cluster mode and a running sshd in sd; NULL, or why not (with
 * nothing left running). */
static inline const char *cluster_start(void)
{
    const char *why = cluster_bin();
    char probe[700];
    if (why)
        return why;
    snprintf(probe, sizeof probe, "'%s' hosts --help >/dev/null 2>&1", bin);
    if (system(probe) != 0)
        return "this nnlab was built without cluster mode (libssh)";
    why = sshd_start(&sd);
    if (why)
        sshd_stop(&sd);
    return why;
}

#endif
