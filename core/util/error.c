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
    char old[NL_ERR_MAX];
    va_list ap;
    int n;

    if (!err)
        return 0;
    memcpy(old, err->msg, sizeof old);
    va_start(ap, fmt);
    n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    /* "prefix: old", cut at the buffer's end. */
    size_t used = (size_t)n < sizeof err->msg ? (size_t)n : sizeof err->msg - 1;
    size_t room = sizeof err->msg - used;
    if (room > 2) {
        memcpy(err->msg + used, ": ", 2);
        used += 2;
        room -= 2;
        size_t len = strnlen(old, sizeof old - 1);
        if (len >= room)
            len = room - 1;
        memcpy(err->msg + used, old, len);
        err->msg[used + len] = '\0';
    }
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
        {NL_EBUSY, "in use"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].code == code)
            return table[i].text;
    return "unknown error";
}
