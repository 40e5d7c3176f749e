/* Running the real nnlab binary from a TAP test: nnlab("ARGS") runs `$NNLAB_BIN --db DB ARGS`
 * with no standard input and returns its exit status (128 + signal when killed), leaving its
 * stdout in out and its stderr in errtext. The test fills bin, db, out_path and err_path (under
 * its own temporary folder, dir) before the first call. */
#ifndef NNLAB_TESTS_CLI_H
#define NNLAB_TESTS_CLI_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

static char dir[64] __attribute__((unused)), db[320], out_path[320], err_path[320];
static const char *bin;
static char out[1 << 16], errtext[1 << 14];

/* The file's first size - 1 bytes into buf, NUL-terminated; empty when it cannot be read. */
static inline void slurp(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

static inline int nnlab(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int nnlab(const char *fmt, ...)
{
    char args[2048], cmd[4096];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' --db '%s' %s >'%s' 2>'%s' </dev/null", bin, db, args, out_path,
             err_path);
    int status = system(cmd);
    slurp(out_path, out, sizeof out);
    slurp(err_path, errtext, sizeof errtext);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif
