/* sh("FORMAT", ...): runs the printf-formatted command line with /bin/sh and returns its exit
 * status (128 when it did not exit: killed, or not run). */
#ifndef NNLAB_TESTS_SH_H
#define NNLAB_TESTS_SH_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

static inline int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int status = system(cmd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

#endif
