/* The JSON reader: recursive descent over the text, two passes' worth of work in one: values
 * are built in a growing array of nodes per container, then moved into the arena. */
#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nnlab/alloc.h"

#define MAX_DEPTH 64

struct nl_json_doc {
    struct nl_json root;
    void **blocks; /* every allocation of the tree, freed together */
    size_t nblocks, cap;
};

struct parser {
    const char *s, *end, *start;
    const char *what;
    struct nl_json_doc *doc;
    struct nl_error *err;
};

static void *keep(struct parser *p, void *block)
{
    struct nl_json_doc *d = p->doc;
    if (!block)
        return NULL;
    void **b = nl_grow(d->blocks, &d->cap, d->nblocks + 1, sizeof *b, 64);
    if (!b) {
        nl_free(block);
        return NULL;
    }
    d->blocks = b;
    d->blocks[d->nblocks++] = block;
    return block;
}

static int fail(struct parser *p, const char *why)
{
    return nl_error_set(p->err, NL_EFORMAT, "%s: bad JSON at byte %zu: %s", p->what,
                        (size_t)(p->s - p->start), why);
}

static void skip_ws(struct parser *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static int literal(struct parser *p, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0)
        return 0;
    p->s += n;
    return 1;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

static size_t utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* p->s is at the opening quote. The unescaped text is never longer than the escaped one. */
static int parse_string(struct parser *p, char **out)
{
    const char *s = ++p->s;
    size_t cap = 0;

    while (s < p->end && *s != '"') {
        if (*s == '\\')
            s++;
        s++;
    }
    if (s >= p->end)
        return fail(p, "unterminated string");
    cap = (size_t)(s - p->s) + 1;
    char *o = keep(p, nl_malloc(cap)), *w = o;
    if (!o)
        return nl_error_set(p->err, NL_ENOMEM, "%s: out of memory", p->what);
    while (*p->s != '"') {
        unsigned char c = (unsigned char)*p->s;
        if (c < 0x20)
            return fail(p, "control character in a string");
        if (c != '\\') {
            *w++ = (char)c;
            p->s++;
            continue;
        }
        p->s++;
        switch (*p->s) {
        case '"':
        case '\\':
        case '/':
            *w++ = *p->s;
            break;
        case 'b':
            *w++ = '\b';
            break;
        case 'f':
            *w++ = '\f';
            break;
        case 'n':
            *w++ = '\n';
            break;
        case 'r':
            *w++ = '\r';
            break;
        case 't':
            *w++ = '\t';
            break;
        case 'u': {
            unsigned cp, lo;
            if (p->end - p->s < 5 || !hex4(p->s + 1, &cp))
                return fail(p, "bad \\u escape");
            p->s += 4;
            if (cp >= 0xd800 && cp < 0xdc00) {
                if (p->end - p->s < 7 || p->s[1] != '\\' || p->s[2] != 'u' ||
                    !hex4(p->s + 3, &lo) || lo < 0xdc00 || lo >= 0xe000)
                    return fail(p, "unpaired surrogate");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                p->s += 6;
            } else if (cp >= 0xdc00 && cp < 0xe000) {
                return fail(p, "unpaired surrogate");
            }
            if (cp == 0)
                return fail(p, "NUL in a string");
            w += utf8(w, cp);
            break;
        }
        default:
            return fail(p, "bad escape");
        }
        p->s++;
    }
    p->s++;
    *w = '\0';
    *out = o;
    return 0;
}

static int parse_number(struct parser *p, struct nl_json *v)
{
    const char *s = p->s;
    if (s < p->end && *s == '-')
        s++;
    if (s >= p->end || *s < '0' || *s > '9')
        return fail(p, "bad number");
    if (*s == '0' && s + 1 < p->end && s[1] >= '0' && s[1] <= '9')
        return fail(p, "leading zero");
    while (s < p->end && ((*s >= '0' && *s <= '9') || *s == '.' || *s == 'e' || *s == 'E' ||
                          *s == '+' || *s == '-'))
        s++;
    char buf[64];
    size_t n = (size_t)(s - p->s);
    if (n >= sizeof buf)
        return fail(p, "number too long");
    memcpy(buf, p->s, n);
    buf[n] = '\0';
    char *end;
    v->number = strtod(buf, &end);
    if (*end)
        return fail(p, "bad number");
    v->type = NL_JSON_NUMBER;
    if (!strpbrk(buf, ".eE") && fabs(v->number) < 9.2e18) {
        v->integer = strtoll(buf, NULL, 10);
        v->is_integer = 1;
    }
    p->s = s;
    return 0;
}

static int parse_value(struct parser *p, struct nl_json *v, int depth);

/* Arrays and objects: the items grow in a private buffer that joins the arena once the
 * container is complete (what the items own is in the arena already). */
static int parse_items(struct parser *p, struct nl_json *v, int depth, int object, size_t *cap)
{
    char close = object ? '}' : ']';

    p->s++;
    skip_ws(p);
    if (p->s < p->end && *p->s == close) {
        p->s++;
        return 0;
    }
    for (;;) {
        struct nl_json *items = nl_grow(v->items, cap, v->count + 1, sizeof *items, 8);
        if (!items)
            return nl_error_set(p->err, NL_ENOMEM, "%s: out of memory", p->what);
        v->items = items;
        struct nl_json *item = &v->items[v->count];
        memset(item, 0, sizeof *item);
        skip_ws(p);
        if (object) {
            if (p->s >= p->end || *p->s != '"')
                return fail(p, "expected a key");
            int rc = parse_string(p, &item->key);
            if (rc < 0)
                return rc;
            skip_ws(p);
            if (p->s >= p->end || *p->s != ':')
                return fail(p, "expected ':'");
            p->s++;
        }
        int rc = parse_value(p, item, depth + 1);
        if (rc < 0)
            return rc;
        v->count++;
        skip_ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        if (p->s < p->end && *p->s == close) {
            p->s++;
            return 0;
        }
        return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_container(struct parser *p, struct nl_json *v, int depth, int object)
{
    size_t cap = 0;
    int rc;

    v->type = object ? NL_JSON_OBJECT : NL_JSON_ARRAY;
    rc = parse_items(p, v, depth, object, &cap);
    if (rc < 0 || (v->items && !keep(p, v->items))) {
        if (rc == 0)
            rc = nl_error_set(p->err, NL_ENOMEM, "%s: out of memory", p->what);
        else
            nl_free(v->items);
        v->items = NULL;
        v->count = 0;
    }
    return rc;
}

static int parse_value(struct parser *p, struct nl_json *v, int depth)
{
    if (depth > MAX_DEPTH)
        return fail(p, "nested too deeply");
    skip_ws(p);
    if (p->s >= p->end)
        return fail(p, "unexpected end");
    switch (*p->s) {
    case '{':
        return parse_container(p, v, depth, 1);
    case '[':
        return parse_container(p, v, depth, 0);
    case '"':
        v->type = NL_JSON_STRING;
        return parse_string(p, &v->string);
    case 't':
    case 'f':
        v->type = NL_JSON_BOOL;
        v->boolean = *p->s == 't';
        return literal(p, v->boolean ? "true" : "false") ? 0 : fail(p, "bad literal");
    case 'n':
        v->type = NL_JSON_NULL;
        return literal(p, "null") ? 0 : fail(p, "bad literal");
    default:
        return parse_number(p, v);
    }
}

void nl_json_free(struct nl_json_doc *doc)
{
    if (!doc)
        return;
    for (size_t i = 0; i < doc->nblocks; i++)
        nl_free(doc->blocks[i]);
    nl_free(doc->blocks);
    nl_free(doc);
}

int nl_json_parse(struct nl_json_doc **out, const char *text, size_t len, const char *what,
                  struct nl_error *err)
{
    struct nl_json_doc *doc = nl_calloc(1, sizeof *doc);
    struct parser p = {text, text + len, text, what, doc, err};

    *out = NULL;
    if (!doc)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", what);
    int rc = parse_value(&p, &doc->root, 0);
    if (rc == 0) {
        skip_ws(&p);
        if (p.s != p.end)
            rc = fail(&p, "text after the value");
    }
    if (rc < 0) {
        nl_json_free(doc);
        return rc;
    }
    *out = doc;
    return 0;
}

/* Frees the blocks kept since mark (one member's tree). */
static void release_from(struct nl_json_doc *d, size_t mark)
{
    while (d->nblocks > mark)
        nl_free(d->blocks[--d->nblocks]);
}

static int parse_members(struct parser *p, int (*member)(void *ud, const struct nl_json *value),
                         void *ud)
{
    skip_ws(p);
    if (p->s >= p->end || *p->s != '{')
        return fail(p, "not a JSON object");
    p->s++;
    skip_ws(p);
    if (p->s < p->end && *p->s == '}') {
        p->s++;
        return 0;
    }
    for (;;) {
        size_t mark = p->doc->nblocks;
        struct nl_json item = {0};
        int rc = 0;
        skip_ws(p);
        if (p->s >= p->end || *p->s != '"')
            rc = fail(p, "expected a key");
        if (rc == 0)
            rc = parse_string(p, &item.key);
        if (rc == 0) {
            skip_ws(p);
            if (p->s >= p->end || *p->s != ':')
                rc = fail(p, "expected ':'");
        }
        if (rc == 0) {
            p->s++;
            rc = parse_value(p, &item, 1);
        }
        if (rc == 0)
            rc = member(ud, &item);
        release_from(p->doc, mark);
        if (rc < 0)
            return rc;
        skip_ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        if (p->s < p->end && *p->s == '}') {
            p->s++;
            return 0;
        }
        return fail(p, "expected ',' or '}'");
    }
}

int nl_json_parse_members(const char *text, size_t len, const char *what,
                          int (*member)(void *ud, const struct nl_json *value), void *ud,
                          struct nl_error *err)
{
    struct nl_json_doc *doc = nl_calloc(1, sizeof *doc);
    struct parser p = {text, text + len, text, what, doc, err};

    if (!doc)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", what);
    int rc = parse_members(&p, member, ud);
    if (rc == 0) {
        skip_ws(&p);
        if (p.s != p.end)
            rc = fail(&p, "text after the value");
    }
    nl_json_free(doc);
    return rc;
}

const struct nl_json *nl_json_root(const struct nl_json_doc *doc)
{
    return &doc->root;
}

const struct nl_json *nl_json_get(const struct nl_json *obj, const char *key)
{
    if (!obj || obj->type != NL_JSON_OBJECT)
        return NULL;
    for (size_t i = 0; i < obj->count; i++)
        if (strcmp(obj->items[i].key, key) == 0)
            return &obj->items[i];
    return NULL;
}
