/* The one JSON string writer and the terminal escaper (core/formats/text.c): every output of
 * hostile strings (control characters, ESC sequences, C1 controls, invalid and overlong UTF-8,
 * surrogates) parses back as JSON to the expected text, and terminal output holds no control byte;
 * the naive twins below say byte by byte what the rule is. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/formats/json.h"
#include "nnlab/text.h"
#include "tap.h"

struct sink {
    char buf[4096];
    size_t len;
};

static void put(void *ud, const char *p, size_t n)
{
    struct sink *s = ud;
    if (s->len + n < sizeof s->buf) {
        memcpy(s->buf + s->len, p, n);
        s->len += n;
    }
    s->buf[s->len] = '\0';
}

static const char *json(const char *in)
{
    static struct sink s;
    s.len = 0;
    s.buf[0] = '\0';
    nl_json_write(put, &s, in);
    return s.buf;
}

static const char *term(const char *in)
{
    static struct sink s;
    s.len = 0;
    s.buf[0] = '\0';
    nl_term_write(put, &s, in);
    return s.buf;
}

/* Parses a JSON string literal back; the text into out. */
static int parse_back(const char *lit, char *out, size_t size)
{
    char doc[4200];
    struct nl_json_doc *d = NULL;
    struct nl_error err = {0};

    snprintf(doc, sizeof doc, "[%s]", lit);
    if (nl_json_parse(&d, doc, strlen(doc), "test", &err) < 0)
        return 0;
    const struct nl_json *r = nl_json_root(d);
    int okay = r->type == NL_JSON_ARRAY && r->count == 1 && r->items[0].type == NL_JSON_STRING;
    if (okay)
        snprintf(out, size, "%s", r->items[0].string);
    nl_json_free(d);
    return okay;
}

static int no_control_bytes(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            return 0;
        if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            return 0;
    }
    return 1;
}

int main(void)
{
    static const struct {
        const char *in, *json_text, *term;
    } cases[] = {
        {"plain", "plain", "plain"},
        {"quote\" back\\", "quote\" back\\", "quote\" back\\"},
        {"a\nb\tc\rd", "a\nb\tc\rd", "a\\nb\\tc\\rd"},
        {"\x1b]0;pwned\x07\x1b[2J", "\x1b]0;pwned\x07\x1b[2J", "\\e]0;pwned\\x07\\e[2J"},
        {"del\x7f", "del\x7f", "del\\x7f"},
        {"c1 \xc2\x9b"
         "31m",
         "c1 \xc2\x9b"
         "31m",
         "c1 \\xc2\\x9b31m"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
         "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"bad\xff", "bad\xef\xbf\xbd", "bad\\xff"},
        {"overlong\xc0\xaf", "overlong\xef\xbf\xbd\xef\xbf\xbd", "overlong\\xc0\\xaf"},
        {"surrogate\xed\xa0\x80", "surrogate\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd",
         "surrogate\\xed\\xa0\\x80"},
        {"cut\xe2\x82", "cut\xef\xbf\xbd\xef\xbf\xbd", "cut\\xe2\\x82"},
        {"big\xf4\x90\x80\x80", "big\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd",
         "big\\xf4\\x90\\x80\\x80"},
    };
    char back[4096], buf[16];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *j = json(cases[i].in);
        ok(parse_back(j, back, sizeof back), "case %zu: valid JSON: %s", i, j);
        is_str(back, cases[i].json_text, "case %zu: reads back as the text, U+FFFD for bad bytes",
               i);
        is_str(term(cases[i].in), cases[i].term, "case %zu: terminal form", i);
        ok(no_control_bytes(term(cases[i].in)), "case %zu: no control byte reaches a terminal", i);
    }
    ok(no_control_bytes(json("\x01\x1f\n")), "JSON output has no raw control byte");
    is_str(json("\x01"), "\"\\u0001\"", "as \\u00XX");
    ok(nl_utf8_valid("caf\xc3\xa9"), "valid UTF-8");
    ok(!nl_utf8_valid("caf\xe9"), "Latin-1 is not");
    ok(!nl_utf8_valid("\xc0\x80"), "overlong NUL is not");
    is_str(nl_term_str(buf, sizeof buf, "short"), "short", "nl_term_str fits");
    is_str(nl_term_str(buf, sizeof buf,
                       "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"),
           "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9...", "cut on a UTF-8 boundary");
    is_str(nl_term_str(buf, sizeof buf, "\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b"),
           "\\e\\e\\e\\e\\e\\e...", "escapes count against the room");
    return done_testing();
}
