/* A small TAP producer for nnlab's tests. Each test program prints a plan, one "ok N - name" or
 * "not ok N - name" line per check, and diagnostics as "# " lines; meson reads it with
 * protocol: 'tap'. Failed checks print file:line and both values. Nothing but TAP on stdout:
 * diagnostics a test wants to print go through diag(). */
#ifndef NNLAB_TAP_H
#define NNLAB_TAP_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_count, tap_failed, tap_planned = -1;

/* Text that holds newlines (a message quoting a command's output) must not read as TAP of its
 * own: a diagnostic ("# ") continues on lines that start with "# ", a check's name stays on one
 * line with its newlines shown as "\\n". */
static inline void tap_vline(const char *prefix, const char *fmt, va_list ap)
{
    char buf[8192];
    vsnprintf(buf, sizeof buf, fmt, ap);
    fputs(prefix, stdout);
    for (const char *p = buf; *p; p++) {
        if (*p == '\n' && p[1])
            fputs(strcmp(prefix, "# ") == 0 ? "\n# " : "\\n", stdout);
        else if (*p != '\n')
            fputc(*p, stdout);
    }
    fputc('\n', stdout);
    fflush(stdout);
}

static inline void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tap_vline("# ", fmt, ap);
    va_end(ap);
}

static inline void plan(int n)
{
    tap_planned = n;
    printf("1..%d\n", n);
    fflush(stdout);
}

/* Skips the whole program: "1..0 # SKIP why", exit 0. */
static inline void skip_all(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void skip_all(const char *fmt, ...)
{
    va_list ap;
    printf("1..0 # SKIP ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    exit(0);
}

static inline int tap_result(int pass, const char *file, int line, const char *fmt, va_list ap)
{
    char prefix[48];
    tap_count++;
    snprintf(prefix, sizeof prefix, "%s %d - ", pass ? "ok" : "not ok", tap_count);
    tap_vline(prefix, fmt, ap);
    if (!pass) {
        tap_failed++;
        printf("#   failed at %s:%d\n", file, line);
    }
    fflush(stdout);
    return pass;
}

static inline int tap_ok(int pass, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int tap_ok(int pass, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tap_result(pass, file, line, fmt, ap);
    va_end(ap);
    return pass;
}

static inline int tap_is_int(long long got, long long want, const char *file, int line,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static inline int tap_is_int(long long got, long long want, const char *file, int line,
                             const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int pass = tap_result(got == want, file, line, fmt, ap);
    va_end(ap);
    if (!pass)
        printf("#   got: %lld\n#  want: %lld\n", got, want);
    return pass;
}

/* Passes when |got - want| <= tol, or both are the same infinity; NaN never passes. */
static inline int tap_is_float(double got, double want, double tol, const char *file, int line,
                               const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static inline int tap_is_float(double got, double want, double tol, const char *file, int line,
                               const char *fmt, ...)
{
    va_list ap;
    int close = fabs(got - want) <= tol || (isinf(got) && got == want);
    va_start(ap, fmt);
    int pass = tap_result(close, file, line, fmt, ap);
    va_end(ap);
    if (!pass)
        printf("#   got: %.9g\n#  want: %.9g (tolerance %.3g)\n", got, want, tol);
    return pass;
}

static inline int tap_is_str(const char *got, const char *want, const char *file, int line,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static inline int tap_is_str(const char *got, const char *want, const char *file, int line,
                             const char *fmt, ...)
{
    va_list ap;
    int same = got && want ? strcmp(got, want) == 0 : got == want;
    va_start(ap, fmt);
    int pass = tap_result(same, file, line, fmt, ap);
    va_end(ap);
    if (!pass)
        printf("#   got: \"%s\"\n#  want: \"%s\"\n", got ? got : "(null)", want ? want : "(null)");
    return pass;
}

/* Passes when needle occurs in haystack. */
static inline int tap_like(const char *haystack, const char *needle, const char *file, int line,
                           const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static inline int tap_like(const char *haystack, const char *needle, const char *file, int line,
                           const char *fmt, ...)
{
    va_list ap;
    int found = haystack && needle && strstr(haystack, needle) != NULL;
    va_start(ap, fmt);
    int pass = tap_result(found, file, line, fmt, ap);
    va_end(ap);
    if (!pass)
        printf("#   text: \"%s\"\n#   lacks: \"%s\"\n", haystack ? haystack : "(null)", needle);
    return pass;
}

#define ok(cond, ...)          tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is_int(got, want, ...) tap_is_int((got), (want), __FILE__, __LINE__, __VA_ARGS__)
#define is_float(got, want, tol, ...)                                                              \
    tap_is_float((got), (want), (tol), __FILE__, __LINE__, __VA_ARGS__)
#define is_str(got, want, ...)  tap_is_str((got), (want), __FILE__, __LINE__, __VA_ARGS__)
#define like(text, needle, ...) tap_like((text), (needle), __FILE__, __LINE__, __VA_ARGS__)

/* Prints the plan when none was given up front and returns the exit status. */
static inline int done_testing(void)
{
    if (tap_planned < 0)
        printf("1..%d\n", tap_count);
    else if (tap_planned != tap_count)
        printf("# planned %d tests but ran %d\n", tap_planned, tap_count);
    fflush(stdout);
    return tap_failed || (tap_planned >= 0 && tap_planned != tap_count) ? 1 : 0;
}

#endif
