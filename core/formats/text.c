/* JSON strings and terminal-safe text (include/nnlab/text.h).
 *
 * The rule, one for all of nnlab: text is UTF-8. In JSON, control characters are escaped and a
 * byte that is not part of a valid UTF-8 sequence becomes U+FFFD (JSON cannot carry raw bytes);
 * for a terminal, control characters (C0, DEL, C1) and invalid bytes are shown as escapes, so
 * nothing read from a file can move the cursor, retitle or clear the terminal, or fake output.
 * Names people give (datasets, runs) must be valid UTF-8 (nl_store_check_name), so a name is
 * stored, listed and looked up as the same bytes. */
#include "nnlab/text.h"

#include <stdint.h>
#include <string.h>

/* The length of the valid UTF-8 sequence at p (1 to 4) and its code point, or 0 when the byte
 * at p does not start one. */
static int utf8_seq(const unsigned char *p, uint32_t *cp)
{
    uint32_t c;
    int n;

    if (p[0] < 0x80) {
        *cp = p[0];
        return 1;
    }
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        c = p[0] & 0x1fu;
        n = 2;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        c = p[0] & 0x0fu;
        n = 3;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        c = p[0] & 0x07u;
        n = 4;
    } else {
        return 0;
    }
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (p[i] & 0x3fu);
    }
    if ((n == 3 && c < 0x800) || (n == 4 && (c < 0x10000 || c > 0x10ffff)) ||
        (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return n;
}

int nl_utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    uint32_t cp;

    while (*p) {
        int n = utf8_seq(p, &cp);
        if (n == 0)
            return 0;
        p += n;
    }
    return 1;
}

void nl_json_write(void (*put)(void *ud, const char *p, size_t n), void *ud, const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    char esc[8];

    put(ud, "\"", 1);
    while (*p) {
        const unsigned char *run = p;
        uint32_t cp;
        int n;
        /* The longest run that needs no escape, in one piece. */
        while (*p && *p >= 0x20 && *p != '"' && *p != '\\' && *p != 0x7f &&
               (n = utf8_seq(p, &cp)) > 0)
            p += n;
        if (p > run)
            put(ud, (const char *)run, (size_t)(p - run));
        if (!*p)
            break;
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            put(ud, esc, 2);
        } else if (*p == '\n') {
            put(ud, "\\n", 2);
        } else if (*p == '\t') {
            put(ud, "\\t", 2);
        } else if (*p == '\r') {
            put(ud, "\\r", 2);
        } else if (*p == '\b') {
            put(ud, "\\b", 2);
        } else if (*p == '\f') {
            put(ud, "\\f", 2);
        } else if (*p < 0x20 || *p == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            put(ud, esc, 6);
        } else {
            put(ud, "\\ufffd", 6); /* not valid UTF-8 */
        }
        p++;
    }
    put(ud, "\"", 1);
}

static void put_file(void *ud, const char *p, size_t n)
{
    fwrite(p, 1, n, (FILE *)ud);
}

void nl_json_fputs(FILE *f, const char *s)
{
    nl_json_write(put_file, f, s);
}

static void term_write(void (*put)(void *ud, const char *p, size_t n), void *ud, const char *s,
                       int lines)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    char esc[8];

    while (*p) {
        const unsigned char *run = p;
        uint32_t cp = 0;
        int n = 0;
        while (*p && *p >= 0x20 && *p != 0x7f && (n = utf8_seq(p, &cp)) > 0 &&
               !(cp >= 0x80 && cp <= 0x9f))
            p += n;
        if (p > run)
            put(ud, (const char *)run, (size_t)(p - run));
        if (!*p)
            break;
        if (lines && (*p == '\n' || *p == '\t')) {
            put(ud, (const char *)p, 1);
        } else if (*p == '\n') {
            put(ud, "\\n", 2);
        } else if (*p == '\t') {
            put(ud, "\\t", 2);
        } else if (*p == '\r') {
            put(ud, "\\r", 2);
        } else if (*p == 0x1b) {
            put(ud, "\\e", 2);
        } else if (*p < 0x20 || *p == 0x7f || n == 0) {
            snprintf(esc, sizeof esc, "\\x%02x", *p);
            put(ud, esc, 4);
        } else { /* a C1 control, U+0080 to U+009F: both its bytes */
            snprintf(esc, sizeof esc, "\\x%02x", p[0]);
            put(ud, esc, 4);
            snprintf(esc, sizeof esc, "\\x%02x", p[1]);
            put(ud, esc, 4);
            p++;
        }
        p++;
    }
}

void nl_term_write(void (*put)(void *ud, const char *p, size_t n), void *ud, const char *s)
{
    term_write(put, ud, s, 0);
}

void nl_term_fputs(FILE *f, const char *s)
{
    term_write(put_file, f, s, 0);
}

void nl_term_fputs_lines(FILE *f, const char *s)
{
    term_write(put_file, f, s, 1);
}

struct buf {
    char *s;
    size_t size, len; /* size >= 4 */
    int cut;
};

/* Keeps room for "..." and the NUL; cuts on a UTF-8 boundary. */
static void put_buf(void *ud, const char *p, size_t n)
{
    struct buf *b = ud;
    size_t room;

    if (b->cut)
        return;
    if (b->len + n < b->size) {
        memcpy(b->s + b->len, p, n);
        b->len += n;
        return;
    }
    b->cut = 1;
    if (b->len > b->size - 4) {
        b->len = b->size - 4;
        while (b->len > 0 && ((unsigned char)b->s[b->len] & 0xc0) == 0x80)
            b->len--;
    }
    room = b->size - 4 - b->len;
    while (room > 0 && room < n && ((unsigned char)p[room] & 0xc0) == 0x80)
        room--;
    memcpy(b->s + b->len, p, room);
    b->len += room;
}

const char *nl_term_str(char *buf, size_t size, const char *s)
{
    struct buf b = {buf, size, 0, 0};

    if (size < 4) {
        if (size)
            buf[0] = '\0';
        return buf;
    }
    nl_term_write(put_buf, &b, s);
    memcpy(buf + b.len, b.cut ? "..." : "", b.cut ? 4 : 1);
    return buf;
}
