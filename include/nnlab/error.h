/* Errors: every library function that can fail returns 0 or a negative nl_code and fills the
 * caller's struct nl_error with one sentence naming the file, line, host or layer concerned.
 * Only app/ turns an error into an exit status. */
#ifndef NNLAB_ERROR_H
#define NNLAB_ERROR_H

#include <stddef.h>

#if defined(__GNUC__)
#define NL_PRINTF(f, a) __attribute__((format(printf, f, a)))
/* On functions whose failure must reach the user (the store's writes): ignoring the result is a
 * compiler warning, an error with -Dwerror=true. */
#define NL_MUST_CHECK __attribute__((warn_unused_result))
#else
#define NL_PRINTF(f, a)
#define NL_MUST_CHECK
#endif

enum nl_code {
    NL_OK = 0,
    NL_EINVAL = -1,     /* bad argument or bad input a person wrote */
    NL_ENOMEM = -2,     /* out of memory */
    NL_EIO = -3,        /* reading or writing a file failed */
    NL_EFORMAT = -4,    /* a file is not what it claims to be */
    NL_EDB = -5,        /* the SQLite store failed */
    NL_ENOENT = -6,     /* a named thing (dataset, run, model, file) does not exist */
    NL_EEXIST = -7,     /* a named thing already exists */
    NL_ENET = -8,       /* a connection failed */
    NL_EAUTH = -9,      /* authentication or host-key check failed */
    NL_ETIMEDOUT = -10, /* a peer did not answer in time */
    NL_ENAN = -11,      /* training diverged */
    NL_ECANCELED = -12, /* stopped on request */
    NL_EBUSY = -13,     /* another process holds it (a run being trained) */
};

#define NL_ERR_MAX 1024

struct nl_error {
    int code;
    char msg[NL_ERR_MAX];
};

/* Records code and message in err (which may be NULL) and returns code, so that
 * `return nl_error_set(err, NL_EIO, "%s: %s", path, strerror(errno));` reads naturally. */
int nl_error_set(struct nl_error *err, int code, const char *fmt, ...) NL_PRINTF(3, 4);

/* Prefixes the message already in err with "prefix: " (for adding context on the way up). */
int nl_error_prefix(struct nl_error *err, const char *fmt, ...) NL_PRINTF(2, 3);

/* The one table from codes to text. */
const char *nl_strerror(int code);

/* Non-fatal diagnostics (unknown keys in a spec, skipped files) go to a callback. */
typedef void (*nl_warn_fn)(void *ud, const char *msg);

#endif
