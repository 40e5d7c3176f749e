/* Error records and the one table from codes to text. */
#include "nnlab/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int nl_error_set(struct nl_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

int nl_error_prefix(struct nl_error *err, const char *fmt, ...)
{
    char prefix[NL_ERR_MAX], old[NL_ERR_MAX];
    va_list ap;

    if (!err)
        return 0;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
    return err->code;
}

const char *nl_strerror(int code)
{
    static const struct {
        int code;
        const char *text;
    } table[] = {
        {NL_OK, "success"},
        {NL_EINVAL, "invalid input"},
        {NL_ENOMEM, "out of memory"},
        {NL_EIO, "input/output error"},
        {NL_EFORMAT, "bad file format"},
        {NL_EDB, "database error"},
        {NL_ENOENT, "not found"},
        {NL_EEXIST, "already exists"},
        {NL_ENET, "network error"},
        {NL_EAUTH, "authentication failed"},
        {NL_ETIMEDOUT, "timed out"},
        {NL_ENAN, "training diverged"},
        {NL_ECANCELED, "canceled"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].code == code)
            return table[i].text;
    return "unknown error";
}
