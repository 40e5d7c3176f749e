/* The model spec parser: turns the text a person writes (data/models/lenet, or a file of their
 * own) into an array of configured, named and wired struct nl_layer, and finds specs by name.
 *
 * Grammar
 * -------
 *     spec    := { line '\n' }            lines end in LF or CRLF; a UTF-8 BOM is skipped
 *     line    := [ NAME ':' ] KIND { POSITIONAL } { KEY '=' VALUE }
 *     NAME    := WORD { '.' SEGMENT }     at most NL_NAME_MAX - 1 characters, unique
 *     WORD    := [A-Za-z_][A-Za-z0-9_-]*
 *     SEGMENT := [A-Za-z0-9_-]+
 *
 * A dotted name is a PyTorch module path (layer1.0.conv1, features.3.conv.1.0): tensors are
 * saved and loaded as NAME.weight, NAME.running_var, ..., so a state_dict of torchvision's
 * models matches a spec that names its layers as the modules are named, with no renaming.
 *
 * '#' starts a comment anywhere on a line; blank lines are ignored; whitespace is spaces and
 * tabs. Positional arguments come before key=value options; no spaces around '='.
 *
 *     conv FILTERS KxK        FILTERS >= 1 output channels; window K or KxK (height x width)
 *                             keys: stride=S|SxS pad=P|PxP bias=yes|no init=he|xavier|zero in=
 *     dense UNITS             UNITS >= 1, or N: the dataset's class count (NL_UNITS_CLASSES)
 *                             keys: bias= init= in=
 *     maxpool K, avgpool K    window K or KxK; keys: stride= pad= in=
 *     dropout [P]             probability of dropping a value, 0 <= P < 1, default 0.5; key: in=
 *     leakyrelu [SLOPE]       slope for negative inputs, 0 <= SLOPE < 1, default 0.01; key: in=
 *     batchnorm               keys: momentum=M (0 < M <= 1, default 0.1) eps=E (default 1e-5) in=
 *     conv ... groups=G       G > 1 makes a grouped convolution (kind gconv; G = C: depthwise);
 *                             gconv FILTERS KxK takes conv's keys and groups=
 *     add, concat             2 to 4 inputs, named with in=a,b (concat: along the channels)
 *     embedding DIM           token vectors of DIM (text datasets); keys: vocab=V (default: the
 *                             dataset's vocabulary size) init= in=
 *     conv1d FILTERS K        1-D convolution over a sequence (C x 1 x L); keys: stride= pad=
 *                             bias= init= in=
 *     maxpool1d K             keys: stride= pad= in=
 *     lstm UNITS, gru UNITS   recurrent layers over a sequence; key: states=last|all (default
 *                             last: the final hidden state; all: every step's, UNITS x 1 x L) in=
 *     embed-columns DIM       a table's embedded categorical columns (core/import/csv.c): each
 *                             of the last K inputs, a row id, becomes DIM learned floats; keys:
 *                             columns=K vocab=R (the rows; default: the dataset's, and when
 *                             given they must agree with it) init= in=
 *     globalavgpool1d, globalmaxpool1d  over a sequence's steps; in=x,input leaves out the steps
 *                             whose token is padding
 *     relu, relu6, tanh, sigmoid, flatten, gelu, softmax, globalavgpool, and any other kind of
 *                             core/engine/layer.c: no arguments; key: in=
 *
 * Numbers are decimal digits, at most NUM_MAX. Strides are >= 1; pads >= 0; 0 in a layer's
 * sh/sw means the kind's default stride (conv 1, pools the window).
 *
 * in=NAME[,NAME...] lists the layer's inputs: names of earlier layers, or `input`, the model's
 * input (a reserved name). Without in= a layer reads the previous one (the first layer reads
 * the input). The count must suit the kind (ops->min_inputs .. ops->max_inputs).
 *
 * A layer without a name is called KIND + a running number counted among the unnamed layers of
 * that kind, skipping names taken anywhere in the spec: lenet's three relus are relu1, relu2,
 * relu3. Those names may be used in in=.
 *
 * Errors read "ORIGIN:LINE: what is wrong" (NL_EINVAL). A key that the kind does not use is a
 * warning, "ORIGIN:LINE: unknown key 'foo' for conv (ignored)", through the warn callback; a line
 * with more says so once, "ORIGIN:LINE: 3 unknown keys for conv, the first 'foo' (ignored)".
 *
 * Parsing makes three passes: lines into layers (explicit names checked for clashes as they
 * come), names for the unnamed layers, then in= resolved once every name is known. Names are
 * found through a small hash table, so a spec of any length parses in linear time. */
#include "nnlab/spec.h"

#include "nnlab/alloc.h"
#include "nnlab/dataset.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Written by core/engine/embed_models.py: {name, text} rows, ending with {NULL, NULL}. */
extern const char *const nl_shipped_models[][2];

#define NUM_MAX      (1 << 24)  /* largest count, window, stride or pad a spec may give */
#define FILE_MAX     (16 << 20) /* largest spec file nl_spec_load reads, in bytes */
#define QUOTE_MAX    40         /* characters of a person's text quoted in a message */
#define EXAMPLE_LINE "as in 'conv1: conv 20 5x5'"

/* The keys a spec knows; a kind's syntax says which of them it uses. */
enum key {
    KEY_STRIDE = 1 << 0,
    KEY_PAD = 1 << 1,
    KEY_BIAS = 1 << 2,
    KEY_INIT = 1 << 3,
    KEY_IN = 1 << 4,
    KEY_GROUPS = 1 << 5,
    KEY_MOMENTUM = 1 << 6,
    KEY_EPS = 1 << 7,
    KEY_VOCAB = 1 << 8,
    KEY_STATES = 1 << 9,
    KEY_COLUMNS = 1 << 10,
};

static const struct {
    const char *word;
    unsigned key;
} keys[] = {
    {"stride", KEY_STRIDE}, {"pad", KEY_PAD},       {"bias", KEY_BIAS},         {"init", KEY_INIT},
    {"in", KEY_IN},         {"groups", KEY_GROUPS}, {"momentum", KEY_MOMENTUM}, {"eps", KEY_EPS},
    {"vocab", KEY_VOCAB},   {"states", KEY_STATES}, {"columns", KEY_COLUMNS},
};

enum args { ARGS_NONE, ARGS_CONV, ARGS_DENSE, ARGS_POOL, ARGS_DROPOUT, ARGS_SLOPE };

/* What a kind's line looks like. A kind of core/engine/layer.c that is not listed takes no
 * positional arguments and only in=. */
struct syntax {
    const char *kind;
    enum args args;
    int max_positional;
    unsigned keys;     /* enum key bits */
    const char *takes; /* for "extra argument" messages */
};

static const struct syntax syntaxes[] = {
    {"conv", ARGS_CONV, 2, KEY_STRIDE | KEY_PAD | KEY_BIAS | KEY_INIT | KEY_IN | KEY_GROUPS,
     "a filter count and a window"},
    {"gconv", ARGS_CONV, 2, KEY_STRIDE | KEY_PAD | KEY_BIAS | KEY_INIT | KEY_IN | KEY_GROUPS,
     "a filter count and a window"},
    {"leakyrelu", ARGS_SLOPE, 1, KEY_IN, "at most a slope"},
    {"batchnorm", ARGS_NONE, 0, KEY_MOMENTUM | KEY_EPS | KEY_IN, "no arguments"},
    {"dense", ARGS_DENSE, 1, KEY_BIAS | KEY_INIT | KEY_IN, "a unit count"},
    {"maxpool", ARGS_POOL, 1, KEY_STRIDE | KEY_PAD | KEY_IN, "a window"},
    {"avgpool", ARGS_POOL, 1, KEY_STRIDE | KEY_PAD | KEY_IN, "a window"},
    {"dropout", ARGS_DROPOUT, 1, KEY_IN, "at most a probability"},
    {"embedding", ARGS_DENSE, 1, KEY_INIT | KEY_IN | KEY_VOCAB, "a dimension"},
    {"conv1d", ARGS_CONV, 2, KEY_STRIDE | KEY_PAD | KEY_BIAS | KEY_INIT | KEY_IN,
     "a filter count and a window"},
    {"maxpool1d", ARGS_POOL, 1, KEY_STRIDE | KEY_PAD | KEY_IN, "a window"},
    {"lstm", ARGS_DENSE, 1, KEY_INIT | KEY_IN | KEY_STATES, "a unit count"},
    {"gru", ARGS_DENSE, 1, KEY_INIT | KEY_IN | KEY_STATES, "a unit count"},
    {"embed-columns", ARGS_DENSE, 1, KEY_INIT | KEY_IN | KEY_VOCAB | KEY_COLUMNS, "a dimension"},
};

static const struct syntax plain_syntax = {NULL, ARGS_NONE, 0, KEY_IN, "no arguments"};

struct parser {
    const char *origin;
    nl_warn_fn warn;
    void *warn_ud;
    struct nl_error *err;

    struct nl_layer *layers; /* nlayers used of cap */
    char **in_text;          /* per layer: its in= value (owned), or NULL for the default */
    int nlayers, cap;

    int *slots; /* hash of names: layer index + 1, 0 for an empty slot; nslots a power of 2 */
    size_t nslots, nnames;

    /* Unknown keys of the current line: said once per line, with a count. */
    long unknown;
    char unknown_first[QUOTE_MAX + 4];
    const char *unknown_kind;

    char *line; /* the current line, copied so that it can be cut into tokens */
    size_t line_cap;
    int lineno;
};

/* Copies s into buf for quoting in a message: at most QUOTE_MAX characters, then "...";
 * control characters become '?'. */
static const char *quote(char buf[QUOTE_MAX + 4], const char *s)
{
    size_t i;

    for (i = 0; s[i] && i < QUOTE_MAX; i++)
        buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    if (s[i]) {
        memcpy(buf + i, "...", 3);
        i += 3;
    }
    buf[i] = '\0';
    return buf;
}

/* Fills err with "ORIGIN:LINE: message" and returns code. */
static int fail(struct parser *ps, int code, const char *fmt, ...) NL_PRINTF(3, 4);
static int fail(struct parser *ps, int code, const char *fmt, ...)
{
    char msg[NL_ERR_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nl_error_set(ps->err, code, "%s:%d: %s", ps->origin, ps->lineno, msg);
}

static int fail_nomem(struct parser *ps)
{
    return nl_error_set(ps->err, NL_ENOMEM, "%s: out of memory", ps->origin);
}

static void warn(struct parser *ps, const char *fmt, ...) NL_PRINTF(2, 3);
static void warn(struct parser *ps, const char *fmt, ...)
{
    char msg[NL_ERR_MAX], line[NL_ERR_MAX + 64];
    va_list ap;

    if (!ps->warn)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "%s:%d: %s", ps->origin, ps->lineno, msg);
    ps->warn(ps->warn_ud, line);
}

/* ---- names ---- */

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* Index of the layer called name, or -1. */
static int find_name(const struct parser *ps, const char *name)
{
    if (!ps->nslots)
        return -1;
    for (size_t i = hash_name(name) & (ps->nslots - 1);; i = (i + 1) & (ps->nslots - 1)) {
        int slot = ps->slots[i];
        if (!slot)
            return -1;
        if (strcmp(ps->layers[slot - 1].name, name) == 0)
            return slot - 1;
    }
}

static void place(int *slots, size_t nslots, const struct nl_layer *layers, int index)
{
    size_t i = hash_name(layers[index].name) & (nslots - 1);

    while (slots[i])
        i = (i + 1) & (nslots - 1);
    slots[i] = index + 1;
}

/* Adds layers[index].name, which is not there yet; keeps the table at most half full. */
static int add_name(struct parser *ps, int index)
{
    if (2 * (ps->nnames + 1) > ps->nslots) {
        size_t n = ps->nslots ? 2 * ps->nslots : 64;
        int *slots = nl_calloc(n, sizeof *slots);
        if (!slots)
            return fail_nomem(ps);
        for (size_t i = 0; i < ps->nslots; i++)
            if (ps->slots[i])
                place(slots, n, ps->layers, ps->slots[i] - 1);
        nl_free(ps->slots);
        ps->slots = slots;
        ps->nslots = n;
    }
    place(ps->slots, ps->nslots, ps->layers, index);
    ps->nnames++;
    return 0;
}

static int is_name_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static int is_name_char(char c)
{
    return is_name_start(c) || (c >= '0' && c <= '9') || c == '-';
}

/* Whether name follows NAME of the grammar: a word, then '.'-separated non-empty segments. */
static int valid_name(const char *name)
{
    if (!is_name_start(name[0]))
        return 0;
    for (size_t i = 1; name[i]; i++) {
        if (name[i] == '.') {
            if (!is_name_char(name[i + 1]))
                return 0; /* an empty segment: "a..b" or a trailing '.' */
        } else if (!is_name_char(name[i])) {
            return 0;
        }
    }
    return 1;
}

/* Checks a NAME a person gave a layer and records it in layers[index]. */
static int set_name(struct parser *ps, int index, const char *name)
{
    char q[QUOTE_MAX + 4];
    size_t len = strlen(name);
    int other;

    if (len == 0)
        return fail(ps, NL_EINVAL, "missing name before ':', " EXAMPLE_LINE);
    if (!valid_name(name))
        return fail(ps, NL_EINVAL,
                    "invalid name '%s': a name starts with a letter or '_' and holds only "
                    "letters, digits, '_', '-' and '.' between parts (layer1.0.conv1)",
                    quote(q, name));
    if (len >= NL_NAME_MAX)
        return fail(ps, NL_EINVAL, "name '%s' is longer than %d characters", quote(q, name),
                    NL_NAME_MAX - 1);
    if (strcmp(name, "input") == 0)
        return fail(ps, NL_EINVAL, "name 'input' is reserved for the model's input");
    other = find_name(ps, name);
    if (other >= 0)
        return fail(ps, NL_EINVAL, "name '%s' already used on line %d", name,
                    ps->layers[other].line);
    memcpy(ps->layers[index].name, name, len + 1);
    return add_name(ps, index);
}

/* ---- numbers ---- */

/* Parses decimal digits into *v. Returns 0, -1 when s is not a number, -2 when it exceeds
 * NUM_MAX. */
static int parse_int(const char *s, const char *end, int *v)
{
    long n = 0;

    if (s == end)
        return -1;
    for (; s < end; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        n = n * 10 + (*s - '0');
        if (n > NUM_MAX)
            return -2;
    }
    *v = (int)n;
    return 0;
}

/* A count such as a filter count: an integer >= min. what names it in messages. */
static int parse_count(struct parser *ps, const char *tok, const char *what, int min, int *v)
{
    char q[QUOTE_MAX + 4];
    int rc = parse_int(tok, tok + strlen(tok), v);

    if (rc == -1)
        return fail(ps, NL_EINVAL, "bad number '%s' for the %s", quote(q, tok), what);
    if (rc == -2)
        return fail(ps, NL_EINVAL, "%s '%s' is too large (at most %d)", what, quote(q, tok),
                    NUM_MAX);
    if (*v < min)
        return fail(ps, NL_EINVAL, "%s '%s' is less than %d", what, tok, min);
    return 0;
}

/* A window, stride or pad: "K" (both sides K) or "HxW", each side an integer >= min. */
static int parse_pair(struct parser *ps, const char *s, const char *what, int min, int *h, int *w)
{
    char q[QUOTE_MAX + 4];
    const char *x = strchr(s, 'x'), *end = s + strlen(s);
    int rc = parse_int(s, x ? x : end, h);

    if (rc == 0 && x)
        rc = parse_int(x + 1, end, w);
    else if (rc == 0)
        *w = *h;
    quote(q, s);
    if (rc == -1)
        return fail(ps, NL_EINVAL, "bad number '%s' for the %s (K or HxW)", q, what);
    if (rc == -2)
        return fail(ps, NL_EINVAL, "%s '%s' is too large (at most %d)", what, q, NUM_MAX);
    if (*h < min || *w < min)
        return fail(ps, NL_EINVAL, "%s '%s' is less than %d", what, q, min);
    return 0;
}

/* A decimal fraction such as "0.25", "-1" or ".5", without exponent, into *v. Parsed here
 * rather than with strtod, which reads "0,5" instead in some locales. */
static int parse_decimal(const char *s, double *v)
{
    double sign = 1.0, scale = 1.0;
    uint64_t mant = 0;
    int digits = 0, dot = 0;

    if (*s == '-' || *s == '+')
        sign = *s++ == '-' ? -1.0 : 1.0;
    for (; *s; s++) {
        if (*s == '.' && !dot) {
            dot = 1;
        } else if (*s >= '0' && *s <= '9') {
            if (++digits > 18)
                return -1;
            mant = mant * 10 + (uint64_t)(*s - '0');
            if (dot)
                scale *= 10.0;
        } else {
            return -1;
        }
    }
    if (!digits)
        return -1;
    *v = sign * ((double)mant / scale);
    return 0;
}

/* ---- one line ---- */

static int is_space(char c)
{
    return c == ' ' || c == '\t';
}

/* Cuts the next whitespace-separated token out of *cursor, NUL-terminating it in place;
 * NULL at the end of the line. */
static char *next_token(char **cursor)
{
    char *p = *cursor, *tok;

    while (is_space(*p))
        p++;
    if (!*p) {
        *cursor = p;
        return NULL;
    }
    tok = p;
    while (*p && !is_space(*p))
        p++;
    if (*p)
        *p++ = '\0';
    *cursor = p;
    return tok;
}

static const struct syntax *find_syntax(const char *kind)
{
    for (size_t i = 0; i < sizeof syntaxes / sizeof syntaxes[0]; i++)
        if (strcmp(syntaxes[i].kind, kind) == 0)
            return &syntaxes[i];
    return &plain_syntax;
}

static int unknown_kind(struct parser *ps, const char *kind)
{
    char known[NL_ERR_MAX] = "", q[QUOTE_MAX + 4];
    size_t len = 0;

    for (const struct nl_layer_ops *const *k = nl_layer_kinds(); k && *k; k++) {
        int n = snprintf(known + len, sizeof known - len, "%s%s", len ? ", " : "", (*k)->kind);
        if (n < 0 || (size_t)n >= sizeof known - len)
            break;
        len += (size_t)n;
    }
    return fail(ps, NL_EINVAL, "unknown kind '%s' (known: %s)", quote(q, kind),
                len ? known : "none");
}

/* Checks how many inputs a layer reads against what its kind accepts; given: in= was there. */
static int check_input_count(struct parser *ps, const struct nl_layer *l, int given)
{
    const struct nl_layer_ops *ops = l->ops;
    char takes[64];

    if (l->ninputs >= ops->min_inputs && l->ninputs <= ops->max_inputs)
        return 0;
    if (ops->min_inputs == ops->max_inputs)
        snprintf(takes, sizeof takes, "%d input%s", ops->min_inputs,
                 ops->min_inputs == 1 ? "" : "s");
    else
        snprintf(takes, sizeof takes, "%d to %d inputs", ops->min_inputs, ops->max_inputs);
    if (given)
        return fail(ps, NL_EINVAL, "%s takes %s, in= names %d", ops->kind, takes, l->ninputs);
    return fail(ps, NL_EINVAL, "%s takes %s; name them with in=", ops->kind, takes);
}

/* Counts the names of an in= value (already known to be non-empty). */
static int count_inputs(struct parser *ps, const char *value, int *n)
{
    char q[QUOTE_MAX + 4];
    const char *p = value;

    *n = 0;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0)
            return fail(ps, NL_EINVAL, "empty name in 'in=%s'", quote(q, value));
        if (++*n > NL_MAX_INPUTS)
            return fail(ps, NL_EINVAL, "in= names more than %d layers", NL_MAX_INPUTS);
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* One warning for the unknown keys of a line, however many there are. */
static void flush_unknown(struct parser *ps)
{
    if (ps->unknown == 1)
        warn(ps, "unknown key '%s' for %s (ignored)", ps->unknown_first, ps->unknown_kind);
    else if (ps->unknown > 1)
        warn(ps, "%ld unknown keys for %s, the first '%s' (ignored)", ps->unknown, ps->unknown_kind,
             ps->unknown_first);
    ps->unknown = 0;
}

static int set_key(struct parser *ps, int index, const struct syntax *syn, char *tok,
                   unsigned *seen)
{
    struct nl_layer *l = &ps->layers[index];
    char *value = strchr(tok, '='), q[QUOTE_MAX + 4];
    unsigned key = 0; /* an enum key bit; 0 for a word not in keys[] */
    int rc;

    *value++ = '\0';
    if (!*tok)
        return fail(ps, NL_EINVAL, "missing key before '=%s' (no spaces around '=')",
                    quote(q, value));
    if (!*value)
        return fail(ps, NL_EINVAL, "empty value for key '%s'", quote(q, tok));
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(keys[i].word, tok) == 0)
            key = keys[i].key;
    if (!(key & syn->keys)) {
        if (ps->unknown++ == 0) {
            snprintf(ps->unknown_first, sizeof ps->unknown_first, "%s", quote(q, tok));
            ps->unknown_kind = l->ops->kind;
        }
        return 0;
    }
    if (*seen & key)
        return fail(ps, NL_EINVAL, "key '%s' given twice", tok);
    *seen |= key;

    switch (key) {
    case KEY_STRIDE:
        return parse_pair(ps, value, "stride", 1, &l->sh, &l->sw);
    case KEY_PAD:
        return parse_pair(ps, value, "pad", 0, &l->ph, &l->pw);
    case KEY_BIAS:
        if (strcmp(value, "yes") == 0 || strcmp(value, "no") == 0) {
            l->no_bias = value[0] == 'n';
            return 0;
        }
        return fail(ps, NL_EINVAL, "bad value '%s' for bias (yes or no)", quote(q, value));
    case KEY_INIT:
        if (strcmp(value, "he") == 0)
            l->init = NL_INIT_HE;
        else if (strcmp(value, "xavier") == 0)
            l->init = NL_INIT_XAVIER;
        else if (strcmp(value, "zero") == 0)
            l->init = NL_INIT_ZERO;
        else
            return fail(ps, NL_EINVAL, "bad value '%s' for init (he, xavier or zero)",
                        quote(q, value));
        return 0;
    case KEY_GROUPS:
        rc = parse_count(ps, value, "group count", 1, &l->groups);
        if (rc == 0 && l->groups > 1)
            l->ops = nl_layer_kind("gconv"); /* conv groups=G: the grouped kind */
        return rc;
    case KEY_MOMENTUM:
    case KEY_EPS: {
        double v;
        int is_eps = key == KEY_EPS;
        if (parse_decimal(value, &v) < 0)
            return fail(ps, NL_EINVAL, "bad number '%s' for %s", quote(q, value), tok);
        if (is_eps ? !(v > 0.0 && v < 1.0) : !(v > 0.0 && v <= 1.0))
            return fail(ps, NL_EINVAL, "%s %s not in %s", tok, value, is_eps ? "(0, 1)" : "(0, 1]");
        if (is_eps)
            l->eps = (float)v;
        else
            l->momentum = (float)v;
        return 0;
    }
    case KEY_VOCAB:
        return parse_count(ps, value, "vocabulary size", 2, &l->vocab);
    case KEY_COLUMNS:
        return parse_count(ps, value, "column count", 1, &l->columns);
    case KEY_STATES:
        if (strcmp(value, "last") == 0 || strcmp(value, "all") == 0) {
            l->all_states = value[0] == 'a';
            return 0;
        }
        return fail(ps, NL_EINVAL, "bad value '%s' for states (last or all)", quote(q, value));
    case KEY_IN:
        rc = count_inputs(ps, value, &l->ninputs);
        if (rc < 0)
            return rc;
        ps->in_text[index] = nl_strdup(value);
        return ps->in_text[index] ? 0 : fail_nomem(ps);
    }
    return 0;
}

/* Fills the configuration from the positional arguments pos[0..npos). */
static int set_positional(struct parser *ps, struct nl_layer *l, const struct syntax *syn,
                          char **pos, int npos)
{
    char q[QUOTE_MAX + 4];
    double p;

    switch (syn->args) {
    case ARGS_NONE:
        return 0;
    case ARGS_CONV:
        if (npos < 2)
            return fail(ps, NL_EINVAL, "%s needs a filter count and a window, e.g. '%s 20 %s'",
                        l->ops->kind, l->ops->kind, strcmp(l->ops->kind, "conv1d") ? "5x5" : "5");
        if (parse_count(ps, pos[0], "filter count", 1, &l->filters) < 0)
            return NL_EINVAL;
        return parse_pair(ps, pos[1], "window", 1, &l->kh, &l->kw);
    case ARGS_DENSE:
        if (npos < 1)
            return fail(ps, NL_EINVAL,
                        "%s needs a unit count, or N for the class count, e.g. '%s 64'",
                        l->ops->kind, l->ops->kind);
        if (strcmp(pos[0], "N") == 0) {
            l->units = NL_UNITS_CLASSES;
            return 0;
        }
        return parse_count(ps, pos[0], "unit count", 1, &l->units);
    case ARGS_POOL:
        if (npos < 1)
            return fail(ps, NL_EINVAL, "%s needs a window, e.g. '%s 2'", l->ops->kind,
                        l->ops->kind);
        return parse_pair(ps, pos[0], "window", 1, &l->kh, &l->kw);
    case ARGS_DROPOUT:
        l->p = 0.5f;
        if (npos < 1)
            return 0;
        if (parse_decimal(pos[0], &p) < 0)
            return fail(ps, NL_EINVAL, "bad number '%s' for the dropout probability",
                        quote(q, pos[0]));
        if (!(p >= 0.0 && p < 1.0))
            return fail(ps, NL_EINVAL, "dropout probability %s not in [0, 1)", pos[0]);
        l->p = (float)p;
        return 0;
    case ARGS_SLOPE:
        l->slope = 0.01f;
        if (npos < 1)
            return 0;
        if (parse_decimal(pos[0], &p) < 0)
            return fail(ps, NL_EINVAL, "bad number '%s' for the leakyrelu slope", quote(q, pos[0]));
        if (!(p >= 0.0 && p < 1.0))
            return fail(ps, NL_EINVAL, "leakyrelu slope %s not in [0, 1)", pos[0]);
        l->slope = (float)p;
        return 0;
    }
    return 0;
}

static int grow_layers(struct parser *ps)
{
    size_t cap = (size_t)ps->cap, cap_text = (size_t)ps->cap;
    struct nl_layer *layers;
    char **in_text;

    if (ps->cap > INT32_MAX / 4)
        return fail(ps, NL_EINVAL, "too many layers");
    layers = nl_grow(ps->layers, &cap, (size_t)ps->cap + 1, sizeof *layers, 16);
    if (!layers)
        return fail_nomem(ps);
    ps->layers = layers;
    in_text = nl_grow(ps->in_text, &cap_text, (size_t)ps->cap + 1, sizeof *in_text, 16);
    if (!in_text)
        return fail_nomem(ps);
    ps->in_text = in_text;
    ps->cap = (int)(cap < cap_text ? cap : cap_text);
    return 0;
}

/* Splits an optional "NAME:" off the start of *p (which is past leading whitespace): *name is
 * the name or NULL, *p moves past the ':'. Rejects any other ':' and spaces around '='. */
static int split_name(struct parser *ps, char **p, char **name)
{
    char *end = *p, *colon, *eq;

    *name = NULL;
    while (*end && !is_space(*end) && *end != ':')
        end++;
    colon = end;
    while (is_space(*colon))
        colon++;
    if (*colon == ':') {
        *end = '\0';
        *name = *p;
        *p = colon + 1;
    }
    if (strchr(*p, ':'))
        return fail(
            ps, NL_EINVAL,
            "unexpected ':'; a layer's name is one word at the start of the line, " EXAMPLE_LINE);
    for (eq = strchr(*p, '='); eq; eq = strchr(eq + 1, '='))
        if (is_space(eq[1]) || (eq > *p && is_space(eq[-1])))
            return fail(ps, NL_EINVAL, "space around '='; write key=value, as in 'stride=2'");
    return 0;
}

/* Parses ps->line (comment and line end already cut off); adds a layer unless it is blank. */
static int parse_line(struct parser *ps)
{
    char q[QUOTE_MAX + 4], *p = ps->line, *name, *kind, *tok, *pos[2]; /* max_positional <= 2 */
    const struct syntax *syn;
    struct nl_layer *l;
    unsigned seen = 0;
    int index, npos = 0, keyed = 0, rc;

    while (is_space(*p))
        p++;
    if (!*p)
        return 0;
    rc = split_name(ps, &p, &name);
    if (rc < 0)
        return rc;
    kind = next_token(&p);
    if (!kind)
        return fail(ps, NL_EINVAL, "missing a layer kind after '%s:', " EXAMPLE_LINE,
                    quote(q, name));

    if (ps->nlayers == ps->cap) {
        rc = grow_layers(ps);
        if (rc < 0)
            return rc;
    }
    index = ps->nlayers;
    l = &ps->layers[index];
    memset(l, 0, sizeof *l);
    ps->in_text[index] = NULL;
    ps->nlayers++; /* counted now so that the layer and its in= text are released on error */
    l->line = ps->lineno;
    l->ops = nl_layer_kind(kind);
    if (!l->ops)
        return unknown_kind(ps, kind);
    if (name) {
        rc = set_name(ps, index, name);
        if (rc < 0)
            return rc;
    }
    syn = find_syntax(l->ops->kind);

    for (tok = next_token(&p); tok; tok = next_token(&p)) {
        if (strchr(tok, '=')) {
            keyed = 1;
            rc = set_key(ps, index, syn, tok, &seen);
            if (rc < 0)
                return rc;
        } else if (keyed) {
            return fail(ps, NL_EINVAL,
                        "argument '%s' after key=value options; arguments come first",
                        quote(q, tok));
        } else if (npos == syn->max_positional) {
            return fail(ps, NL_EINVAL, "extra argument '%s': %s takes %s", quote(q, tok),
                        l->ops->kind, syn->takes);
        } else {
            pos[npos++] = tok;
        }
    }
    rc = set_positional(ps, l, syn, pos, npos);
    if (rc < 0)
        return rc;
    if (!(seen & KEY_IN)) {
        l->ninputs = 1;
        l->inputs[0] = index - 1; /* the previous layer; -1, the input, for the first */
    }
    return check_input_count(ps, l, (seen & KEY_IN) != 0);
}

/* ---- the whole spec ---- */

/* Pass 2: names the unnamed layers KIND1, KIND2, ... per kind, skipping names taken. */
static int name_unnamed(struct parser *ps)
{
    const struct nl_layer_ops *const *kinds = nl_layer_kinds();
    int nkinds = 0, *counters, rc = 0;

    while (kinds && kinds[nkinds])
        nkinds++;
    counters = nl_calloc((size_t)nkinds + 1, sizeof *counters); /* the last: kinds not listed */
    if (!counters)
        return fail_nomem(ps);
    for (int i = 0; i < ps->nlayers && rc == 0; i++) {
        struct nl_layer *l = &ps->layers[i];
        char name[NL_NAME_MAX + 16];
        int k = 0, len;

        if (l->name[0])
            continue;
        while (k < nkinds && kinds[k] != l->ops)
            k++;
        do {
            len = snprintf(name, sizeof name, "%s%d", l->ops->kind, ++counters[k]);
        } while (len > 0 && len < NL_NAME_MAX && find_name(ps, name) >= 0);
        ps->lineno = l->line;
        if (len <= 0 || len >= NL_NAME_MAX) {
            rc = fail(ps, NL_EINVAL, "cannot make a name for this %s layer; give it one",
                      l->ops->kind);
            break;
        }
        memcpy(l->name, name, (size_t)len + 1);
        rc = add_name(ps, i);
    }
    nl_free(counters);
    return rc;
}

/* Pass 3: turns each in= list into indices of earlier layers. */
static int resolve_inputs(struct parser *ps)
{
    char q[QUOTE_MAX + 4];

    for (int i = 0; i < ps->nlayers; i++) {
        struct nl_layer *l = &ps->layers[i];
        char *name = ps->in_text[i];
        int n = 0;

        if (!name)
            continue;
        ps->lineno = l->line;
        while (name) {
            char *comma = strchr(name, ',');
            int j;
            if (comma)
                *comma = '\0';
            j = strcmp(name, "input") == 0 ? -1 : find_name(ps, name);
            if (j == -1 && strcmp(name, "input") != 0)
                return fail(ps, NL_EINVAL, "in=: no layer named '%s' before line %d",
                            quote(q, name), l->line);
            if (j == i)
                return fail(ps, NL_EINVAL, "in=: layer '%s' cannot read itself", name);
            if (j > i)
                return fail(ps, NL_EINVAL,
                            "in=: no layer named '%s' before line %d ('%s' is on line %d; a "
                            "layer reads only earlier layers)",
                            name, l->line, name, ps->layers[j].line);
            l->inputs[n++] = j;
            name = comma ? comma + 1 : NULL;
        }
    }
    return 0;
}

/* Copies the line starting at text (up to '\n' or the end) into ps->line without its comment,
 * CR and trailing whitespace. */
static int take_line(struct parser *ps, const char *text, size_t len)
{
    const char *hash = memchr(text, '#', len);

    if (hash)
        len = (size_t)(hash - text);
    while (len && (is_space(text[len - 1]) || text[len - 1] == '\r'))
        len--;
    char *line = nl_grow(ps->line, &ps->line_cap, len + 1, 1, 64);
    if (!line)
        return fail_nomem(ps);
    ps->line = line;
    memcpy(ps->line, text, len);
    ps->line[len] = '\0';
    return 0;
}

/* Parses text, which it owns from here on: the new spec keeps it, or it is released. */
static int parse_owned(struct nl_spec **out, char *text, const char *origin, nl_warn_fn warn_fn,
                       void *warn_ud, struct nl_error *err)
{
    struct parser ps = {.origin = origin, .warn = warn_fn, .warn_ud = warn_ud, .err = err};
    struct nl_spec *s = NULL;
    const char *p = text;
    int rc = 0;

    if (strncmp(p, "\xef\xbb\xbf", 3) == 0)
        p += 3; /* a UTF-8 byte order mark, as some editors write */
    for (ps.lineno = 1; rc == 0; ps.lineno++) {
        const char *nl = strchr(p, '\n');
        rc = take_line(&ps, p, nl ? (size_t)(nl - p) : strlen(p));
        if (rc == 0)
            rc = parse_line(&ps);
        flush_unknown(&ps);
        if (!nl)
            break;
        if (ps.lineno == INT32_MAX && rc == 0)
            rc = fail(&ps, NL_EINVAL, "too many lines");
        p = nl + 1;
    }
    if (rc == 0 && ps.nlayers == 0)
        rc = nl_error_set(err, NL_EINVAL, "%s: no layers", origin);
    if (rc == 0)
        rc = name_unnamed(&ps);
    if (rc == 0)
        rc = resolve_inputs(&ps);
    if (rc == 0) {
        s = nl_calloc(1, sizeof *s);
        if (s)
            s->origin = nl_strdup(origin);
        if (!s || !s->origin) {
            nl_free(s);
            s = NULL;
            rc = fail_nomem(&ps);
        }
    }
    if (rc == 0) {
        s->text = text;
        s->nlayers = ps.nlayers;
        s->layers = ps.layers;
        *out = s;
    } else {
        nl_free(ps.layers);
        nl_free(text);
    }
    for (int i = 0; i < ps.nlayers; i++)
        nl_free(ps.in_text[i]);
    nl_free(ps.in_text);
    nl_free(ps.slots);
    nl_free(ps.line);
    return rc;
}

int nl_spec_parse(struct nl_spec **out, const char *text, const char *origin, nl_warn_fn warn_fn,
                  void *warn_ud, struct nl_error *err)
{
    char *copy;

    if (!origin)
        origin = "<spec>";
    if (!out)
        return nl_error_set(err, NL_EINVAL, "%s: nowhere to put the parsed spec", origin);
    *out = NULL;
    if (!text)
        return nl_error_set(err, NL_EINVAL, "%s: no text", origin);
    copy = nl_strdup(text);
    if (!copy)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", origin);
    return parse_owned(out, copy, origin, warn_fn, warn_ud, err);
}

/* ---- files and shipped models ---- */

/* Reads a whole spec file into *text (NUL-terminated, the caller's). Errors name the path. */
static int read_file(const char *path, char **text, struct nl_error *err)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;

    *text = NULL;
    if (!f) {
        rc = errno == ENOENT || errno == ENOTDIR ? NL_ENOENT : NL_EIO;
        return nl_error_set(err, rc, "%s: %s", path, strerror(errno));
    }
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return nl_error_set(err, NL_EIO, "%s: %s", path, strerror(EISDIR));
    }
    for (;;) {
        size_t got;
        /* cap: bytes allocated, one kept for the NUL. */
        char *more = nl_grow(buf, &cap, len + 4096 + 1, 1, 8192 + 1);
        if (!more) {
            rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
            break;
        }
        buf = more;
        got = fread(buf + len, 1, cap - 1 - len, f);
        len += got;
        if (len > FILE_MAX) {
            rc = nl_error_set(err, NL_EFORMAT,
                              "%s: larger than %d MiB, too large for a model "
                              "spec",
                              path, FILE_MAX >> 20);
            break;
        }
        if (got == 0) {
            if (ferror(f))
                rc = nl_error_set(err, NL_EIO, "%s: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (rc == 0 && memchr(buf, '\0', len))
        rc = nl_error_set(err, NL_EFORMAT, "%s: holds a NUL byte; a spec is plain text", path);
    if (rc < 0) {
        nl_free(buf);
        return rc;
    }
    buf[len] = '\0';
    *text = buf;
    return 0;
}

int nl_spec_load(struct nl_spec **out, const char *name_or_path, nl_warn_fn warn_fn, void *warn_ud,
                 struct nl_error *err)
{
    struct stat st;
    const char *shipped;
    char *text, names[NL_ERR_MAX / 2] = "", q[QUOTE_MAX + 4];
    size_t len = 0;
    int rc;

    if (!out)
        return nl_error_set(err, NL_EINVAL, "nl_spec_load: nowhere to put the parsed spec");
    *out = NULL;
    if (!name_or_path || !*name_or_path)
        return nl_error_set(err, NL_EINVAL, "no model given: name a spec file or a shipped model");
    if (strchr(name_or_path, '/') || (stat(name_or_path, &st) == 0 && S_ISREG(st.st_mode))) {
        rc = read_file(name_or_path, &text, err);
        if (rc < 0)
            return rc;
        return parse_owned(out, text, name_or_path, warn_fn, warn_ud, err);
    }
    shipped = nl_spec_shipped_text(name_or_path);
    if (shipped) {
        text = nl_strdup(shipped);
        if (!text)
            return nl_error_set(err, NL_ENOMEM, "%s: out of memory", name_or_path);
        return parse_owned(out, text, name_or_path, warn_fn, warn_ud, err);
    }
    for (int i = 0; nl_shipped_models[i][0]; i++) {
        int n = snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "",
                         nl_shipped_models[i][0]);
        if (n < 0 || (size_t)n >= sizeof names - len)
            break;
        len += (size_t)n;
    }
    return nl_error_set(err, NL_ENOENT,
                        "unknown model '%s': not a file, and not a shipped model (%s)",
                        quote(q, name_or_path), len ? names : "none");
}

void nl_spec_use(struct nl_spec *s, const struct nl_dataset *d)
{
    s->vocab = d->nvocab;
    s->embed_columns = d->embed_columns;
    s->embed_rows = d->embed_rows;
    s->data = d->name;
}

void nl_spec_free(struct nl_spec *s)
{
    if (!s)
        return;
    nl_free(s->origin);
    nl_free(s->text);
    nl_free(s->layers);
    nl_free(s);
}

static const char **shipped_names;
static pthread_once_t shipped_once = PTHREAD_ONCE_INIT;

static void list_shipped(void)
{
    int n = 0;

    while (nl_shipped_models[n][0])
        n++;
    shipped_names = nl_calloc((size_t)n + 1, sizeof *shipped_names);
    for (int i = 0; shipped_names && i < n; i++)
        shipped_names[i] = nl_shipped_models[i][0];
}

const char *const *nl_spec_shipped_names(void)
{
    static const char *const none[] = {NULL};

    pthread_once(&shipped_once, list_shipped);
    return shipped_names ? shipped_names : none;
}

const char *nl_spec_shipped_text(const char *name)
{
    if (!name)
        return NULL;
    for (int i = 0; nl_shipped_models[i][0]; i++)
        if (strcmp(nl_shipped_models[i][0], name) == 0)
            return nl_shipped_models[i][1];
    return NULL;
}
