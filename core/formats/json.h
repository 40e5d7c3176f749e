/* A small strict JSON reader (RFC 8259) for the headers nnlab reads: safetensors and run
 * settings. It parses a whole document into a tree in one allocation arena; numbers are kept as
 * doubles and, when integral, as int64. Errors give the byte offset. */
#ifndef NNLAB_JSON_H
#define NNLAB_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/error.h"

enum nl_json_type {
    NL_JSON_NULL,
    NL_JSON_BOOL,
    NL_JSON_NUMBER,
    NL_JSON_STRING,
    NL_JSON_ARRAY,
    NL_JSON_OBJECT
};

struct nl_json {
    enum nl_json_type type;
    int boolean;
    double number;
    int64_t integer; /* number, when it is integral and fits */
    int is_integer;
    char *string; /* NUL-terminated, unescaped (UTF-8); for objects' members, the key is key */
    char *key;    /* set on members of an object */
    size_t count; /* array elements or object members */
    struct nl_json *items;
};

struct nl_json_doc;

/* Parses text[0..len); nesting is limited to 64 levels. what names the document in errors. */
int nl_json_parse(struct nl_json_doc **out, const char *text, size_t len, const char *what,
                  struct nl_error *err);
void nl_json_free(struct nl_json_doc *doc);
const struct nl_json *nl_json_root(const struct nl_json_doc *doc);

/* Parses text[0..len) as one object member by member, for documents too large to hold as a
 * tree (a safetensors header of a million tensors): member(ud, value) is called for each member
 * in order, value->key set, and the member's tree is freed when it returns, so the parse needs
 * the memory of one member at a time. The text is checked as strictly as nl_json_parse checks
 * it. A negative return of member stops the parse and is returned. */
int nl_json_parse_members(const char *text, size_t len, const char *what,
                          int (*member)(void *ud, const struct nl_json *value), void *ud,
                          struct nl_error *err);

/* The member of an object by key, or NULL. */
const struct nl_json *nl_json_get(const struct nl_json *obj, const char *key);

#endif
