/* Writing text that came from files or people where it can do harm: JSON strings and terminals.
 * Everything nnlab writes as a JSON string and everything from a file (tensor, class and layer
 * names, CSV labels, paths) that it prints for people goes through these, so one rule holds
 * everywhere (core/formats/text.c states it). */
#ifndef NNLAB_TEXT_H
#define NNLAB_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* Whether s is valid UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF). */
int nl_utf8_valid(const char *s);

/* s as a JSON string, quotes included: '"' and '\' escaped, control characters (U+0000 to
 * U+001F, U+007F) as \n, \t, \r, \b, \f or \u00XX, and each byte that is not part of valid
 * UTF-8 as U+FFFD, so the output is always valid JSON in UTF-8. put receives the pieces. */
void nl_json_write(void (*put)(void *ud, const char *p, size_t n), void *ud, const char *s);
void nl_json_fputs(FILE *f, const char *s);

/* s for a terminal: control characters (C0, DEL and the C1 range U+0080 to U+009F, which
 * terminals also obey) as \n, \t, \r, \e or \xNN, and bytes that are not valid UTF-8 as \xNN;
 * valid printable UTF-8 as it is. */
void nl_term_write(void (*put)(void *ud, const char *p, size_t n), void *ud, const char *s);
void nl_term_fputs(FILE *f, const char *s);
/* The same for a message of several lines (errors, warnings): newlines and tabs are kept. */
void nl_term_fputs_lines(FILE *f, const char *s);
/* Into buf (NUL-terminated, cut with "..." when it does not fit); returns buf. For printf. */
const char *nl_term_str(char *buf, size_t size, const char *s);

#endif
