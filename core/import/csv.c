/* Importing a CSV file: one sample per row, feature columns and one label or target column.
 *
 * The separator is a comma, a semicolon or a tab, whichever occurs most (outside quotes) in the
 * first line; with a semicolon, a decimal comma ("1,5") reads as a point. Fields may be quoted
 * ("a, b", "say ""hi""") and quoted fields may hold line breaks. The label column is the last one
 * unless --label names it (by header name or 1-based index). The first row is a header when the
 * label or a --categorical column is named by its header name, or when one of its fields is not a
 * number where the second row's is (in a file of one row: when a feature field is not a number).
 * Blank lines are ignored. Numbers are decimal: hexadecimal ("0x10", which strtod would read as
 * 16) is not a number, and a NUL byte anywhere (which would cut a number or a label short) is
 * refused with FILE:LINE.
 *
 * The task. Classification (the default): labels that are all integers become classes in numeric
 * order, other labels classes in sorted order, their text kept as the class names. Regression
 * (--task regression): the target column must hold numbers; the dataset has one "class", named
 * after the target column, and each sample's samples.label holds the IEEE-754 bits of its float32
 * target as a signed 32-bit integer (core/store/dataset.c turns them back into floats and
 * standardises them with the train split's target mean and std, recorded in the preprocessing
 * record).
 *
 * Feature columns. A column is categorical when --categorical names it or when its first
 * non-empty value is not a number; otherwise it is numeric, and a later non-number in it is an
 * error naming FILE:LINE. One-hot for few levels, a learned embedding for many: a categorical
 * column of at most --embed-levels train levels (nl_import_opts.embed_levels; by default the
 * one-hot cap, NL_CSV_ONEHOT_MAX) becomes a one-hot block, and one of more an embedded column.
 *
 * A one-hot block has one slot for each of the column's NL_CSV_ONEHOT_MAX most frequent levels in
 * the train split (ties in text order), and one "other" slot for the rest: rarer levels (a column
 * of more levels imported with --embed-levels 0, never, or above the cap), levels seen only in
 * the validation or test split, and at predict time levels never seen (reported once per
 * column). The model's first dense layer on the one-hot block is the column's learned encoding.
 * Every model input, one-hot slots included, is then standardised with the train split's
 * per-input mean and std, at train, eval and predict.
 *
 * An embedded column becomes one input instead: its level's row id in one table that every
 * embedded column shares, each column its own block of rows. A column's block starts with its
 * "unknown" row (levels not in the train split, and at predict time levels never seen, reported
 * once per column; an empty field filled by --missing mean/median/mode takes its most frequent
 * level), then one row per train level in slot order (most frequent first, ties in text order).
 * The embedded inputs come after every other input, in column order; the record's "embedded"
 * {first, columns, rows} says where they are and how many rows the table has, and each such
 * column says "embedded": true and "row", its block's first row. Row ids are integers held as
 * floats (exact below 2^24 rows) and are never standardised: nl_dataset_load gives those inputs
 * mean 0 and std 1 whatever the import's statistics of the ids were, and fills the dataset's
 * embed_first, embed_columns and embed_rows from the record. The table lives in the model: an
 * `embed-columns DIM` layer (core/engine/layers/seq.c) first in the spec maps each id to DIM
 * learned floats after the other inputs, taking K (columns) and R (rows) from the dataset as an
 * embedding takes a text dataset's vocabulary (nl_spec_use); a model on such a dataset without
 * it is refused at build, since its first layer would read the ids as numbers. Its weight
 * [R, DIM] is in the flat parameter vector like any layer's, so it trains locally and on a
 * cluster alike and exports to safetensors as LAYER.weight (it has no ONNX form). A run records
 * K and R beside the vocabulary ("embedded" in its settings) and sends them to cluster workers
 * in SETUP ("embed K R"), so that eval, predict, resume and export build the model without the
 * dataset.
 *
 * Missing values (an empty field): --missing error (the default) refuses them with FILE:LINE;
 * drop drops the row (listed in the record's dropped_lines); mean, median and mode fill a numeric
 * column with the train split's mean, median or most frequent value, and a categorical column,
 * whatever the mode, with its most frequent train level. An empty label or target is refused
 * unless rows are dropped.
 *
 * Passes over the file: the first checks every row and collects the labels or targets (8 bytes a
 * row) and the categorical levels, so that the seeded stratified splits are known before anything
 * is written; the second takes the train split's statistics (the fills, the levels' counts, each
 * column's mean, std, min and max, the target's); the third encodes the rows and streams them
 * into the store as float32 samples of shape (F, 1, 1), F the model inputs.
 *
 * The preprocessing record (JSON) says all of it, for nnlab show and for predicting from rows:
 * "task", "missing", "onehot_max", "target" {column, mean, std} for regression, "embed_levels"
 * (the threshold used; 0: never) and "embedded" {first, columns, rows} where columns are
 * embedded, "feature_names" (NAME, NAME=LEVEL, NAME=(other), NAME=(row id)), and "columns": per
 * column of the file in order its name, kind ("numeric", "categorical", "label" or "target"),
 * missing count, the train statistics (numeric and target: mean, std, min, max; categorical:
 * "levels", the count of train levels, "slots", the kept levels in slot order, and "embedded" and
 * "row" for an embedded one), "fill" where empty fields are filled (every feature column under
 * mean, median and mode, so that predict fills rows alike), and "first", its first model input. */
#include "import_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/formats/json.h"
#include "core/store/store_internal.h"
#include "nnlab/alloc.h"

#define MAX_RECORD        (1u << 20) /* bytes in one row */
#define MAX_FIELDS        65536
#define MAX_CLASSES       65536
#define MAX_LISTED        20
#define PROGRESS_ROWS     1024
#define NL_CSV_ONEHOT_MAX 16 /* one-hot slots of a categorical column, "other" aside */

/* The level count above which a categorical column is embedded; 0 or less: never. */
static int embed_levels(const struct nl_import_opts *o)
{
    return o->embed_levels == 0 ? NL_CSV_ONEHOT_MAX : o->embed_levels;
}

/* ---- The CSV reader (import_internal.h), shared with core/import/textdata.c ---- */

static int put_char(struct nl_csv *c, char ch, struct nl_error *err)
{
    if (c->len + 1 >= c->cap) {
        char *p;
        size_t max = c->max_record ? c->max_record : MAX_RECORD;
        if (c->len >= max)
            return nl_error_set(err, NL_EFORMAT, "%s:%ld: a row longer than %zu bytes", c->path,
                                c->rec_line, max);
        p = nl_grow(c->buf, &c->cap, c->len + 2, 1, 4096);
        if (!p)
            return nl_error_set(err, NL_ENOMEM, "%s: out of memory", c->path);
        c->buf = p;
    }
    c->buf[c->len++] = ch;
    return 0;
}

static int start_field(struct nl_csv *c, struct nl_error *err)
{
    if (c->nf > MAX_FIELDS)
        return nl_error_set(err, NL_EFORMAT, "%s:%ld: more than %d fields", c->path, c->rec_line,
                            MAX_FIELDS);
    size_t *p = nl_grow(c->off, &c->fcap, (size_t)c->nf + 1, sizeof *p, 64);
    if (!p)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", c->path);
    c->off = p;
    c->off[c->nf++] = c->len;
    return 0;
}

/* A NUL byte would cut a number or a label short in silence ("x\0y" read as "x"): refused. The
 * rest of its line is consumed, so that --skip-bad goes on at the next one. */
static int nul_byte(struct nl_csv *c, struct nl_error *err)
{
    long line = c->line;
    int ch;

    nl_error_set(err, NL_EFORMAT, "%s:%ld: field %d has a NUL byte", c->path, line, c->nf);
    while ((ch = getc(c->f)) != EOF && ch != '\n')
        ;
    if (ch == '\n')
        c->line++;
    return err->code;
}

/* Reads one record into c: 1, 0 at the end of the file, or an error. Blank lines are skipped. */
int nl_csv_read(struct nl_csv *c, struct nl_error *err)
{
    for (;;) {
        int ch = getc(c->f), rc = 0, quoted_any = 0;

        if (ch == EOF)
            return ferror(c->f)
                       ? nl_error_set(err, NL_EIO, "%s: read error: %s", c->path, strerror(errno))
                       : 0;
        c->rec_line = c->line;
        c->len = 0;
        c->nf = 0;
        rc = start_field(c, err);
        while (rc == 0) {
            if (ch == '"' && c->len == c->off[c->nf - 1]) {
                quoted_any = 1;
                for (;;) {
                    ch = getc(c->f);
                    if (ch == EOF)
                        return nl_error_set(err, NL_EFORMAT, "%s:%ld: a quoted field is not closed",
                                            c->path, c->rec_line);
                    if (ch == '"') {
                        ch = getc(c->f);
                        if (ch != '"')
                            break;
                    }
                    if (ch == '\n')
                        c->line++;
                    if (ch == '\0')
                        return nul_byte(c, err);
                    rc = put_char(c, (char)ch, err);
                    if (rc)
                        return rc;
                }
                continue; /* ch is the character after the closing quote */
            }
            if (ch == c->sep) {
                rc = put_char(c, '\0', err);
                if (rc == 0)
                    rc = start_field(c, err);
            } else if (ch == '\n' || ch == '\r' || ch == EOF) {
                if (ch == '\r') {
                    int next = getc(c->f);
                    if (next != '\n' && next != EOF)
                        ungetc(next, c->f);
                }
                if (ch != EOF)
                    c->line++;
                rc = put_char(c, '\0', err);
                break;
            } else if (ch == '\0') {
                return nul_byte(c, err);
            } else {
                rc = put_char(c, (char)ch, err);
            }
            if (rc == 0)
                ch = getc(c->f);
        }
        if (rc)
            return rc;
        if (c->nf == 1 && c->buf[0] == '\0' && !quoted_any)
            continue; /* a blank line */
        return 1;
    }
}

/* Skips a UTF-8 byte-order mark and positions the file at its first record. */
int nl_csv_rewind(struct nl_csv *c, struct nl_error *err)
{
    unsigned char bom[3];

    if (fseek(c->f, 0, SEEK_SET) != 0)
        return nl_error_set(err, NL_EIO, "%s: cannot read it twice (not a regular file?)", c->path);
    if (fread(bom, 1, 3, c->f) != 3 || bom[0] != 0xef || bom[1] != 0xbb || bom[2] != 0xbf)
        fseek(c->f, 0, SEEK_SET);
    c->line = 1;
    return 0;
}

/* The separator: the most frequent of , ; and tab outside quotes in the first line. */
void nl_csv_detect_separator(struct nl_csv *c)
{
    long n[3] = {0};
    int quoted = 0, ch;
    size_t seen = 0;

    while ((ch = getc(c->f)) != EOF && seen++ < (c->max_record ? c->max_record : MAX_RECORD)) {
        if (ch == '"')
            quoted = !quoted;
        else if (!quoted && (ch == '\n' || ch == '\r'))
            break;
        else if (!quoted && ch == ',')
            n[0]++;
        else if (!quoted && ch == ';')
            n[1]++;
        else if (!quoted && ch == '\t')
            n[2]++;
    }
    c->sep = n[1] > n[0] && n[1] >= n[2] ? ';' : n[2] > n[0] ? '\t' : ',';
}

void nl_csv_release(struct nl_csv *c)
{
    nl_free(c->buf);
    nl_free(c->off);
    c->buf = NULL;
    c->off = NULL;
    c->len = c->cap = c->fcap = 0;
    c->nf = 0;
}

/* Parses a decimal number; 0 when s is not one (empty, text, hexadecimal, inf or nan). */
static int parse_number(const char *s, char sep, float *out)
{
    char tmp[128];
    char *end;
    double v;
    size_t n;

    while (*s == ' ' || *s == '\t')
        s++;
    n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0 || n >= sizeof tmp)
        return 0;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    /* strtod reads hexadecimal ("0x10" is 16); a CSV's numbers are decimal. */
    if (strpbrk(tmp, "xX"))
        return 0;
    if (sep == ';' && !strchr(tmp, '.')) {
        char *comma = strchr(tmp, ',');
        if (comma && !strchr(comma + 1, ','))
            *comma = '.';
    }
    errno = 0;
    v = strtod(tmp, &end);
    if (end == tmp || *end || !isfinite(v) || fabs(v) > 3.4e38)
        return 0;
    *out = (float)v;
    return 1;
}

static int is_blank(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return *s == '\0';
}

/* Trims spaces and tabs around s in place; returns its start. */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

/* Distinct strings (labels, a categorical column's levels), by hashing; ids in order of first
 * appearance. */
struct labels {
    char **name; /* (n) */
    size_t cap;
    int n;
    int *slot; /* (nslots) id + 1, 0 empty */
    int nslots;
    int all_int;
};

static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The id of s, -1 when it is not there. */
static int label_find(const struct labels *L, const char *s)
{
    if (!L->nslots)
        return -1;
    uint32_t h = hash(s) & (uint32_t)(L->nslots - 1);
    while (L->slot[h]) {
        if (strcmp(L->name[L->slot[h] - 1], s) == 0)
            return L->slot[h] - 1;
        h = (h + 1) & (uint32_t)(L->nslots - 1);
    }
    return -1;
}

/* The id of s, added when new; column names the categorical column in errors (NULL: labels). */
static int label_id(struct labels *L, const char *s, struct nl_error *err, const char *path,
                    const char *column)
{
    int id = label_find(L, s);
    if (id >= 0)
        return id;
    if (L->n >= MAX_CLASSES)
        return column ? nl_error_set(err, NL_EFORMAT,
                                     "%s: column '%s' has more than %d distinct values", path,
                                     column, MAX_CLASSES)
                      : nl_error_set(err, NL_EFORMAT,
                                     "%s: more than %d distinct labels; is the label column right "
                                     "(--label COLUMN)?",
                                     path, MAX_CLASSES);
    if (2 * (L->n + 1) > L->nslots) {
        int nslots = L->nslots ? 2 * L->nslots : 64;
        int *slot = nl_calloc((size_t)nslots, sizeof *slot);
        if (!slot)
            return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
        for (int i = 0; i < L->n; i++) {
            uint32_t h = hash(L->name[i]) & (uint32_t)(nslots - 1);
            while (slot[h])
                h = (h + 1) & (uint32_t)(nslots - 1);
            slot[h] = i + 1;
        }
        nl_free(L->slot);
        L->slot = slot;
        L->nslots = nslots;
    }
    char **names = nl_grow(L->name, &L->cap, (size_t)L->n + 1, sizeof *names, 16);
    if (!names)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    L->name = names;
    L->name[L->n] = nl_strdup(s);
    if (!L->name[L->n])
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    char *end;
    errno = 0;
    (void)strtol(s, &end, 10);
    if (end == s || *end || errno)
        L->all_int = 0;
    uint32_t h = hash(s) & (uint32_t)(L->nslots - 1);
    while (L->slot[h])
        h = (h + 1) & (uint32_t)(L->nslots - 1);
    L->slot[h] = L->n + 1;
    return L->n++;
}

static void labels_free(struct labels *L)
{
    for (int i = 0; i < L->n; i++)
        nl_free(L->name[i]);
    nl_free(L->name);
    nl_free(L->slot);
    memset(L, 0, sizeof *L);
}

/* A label being sorted: integers by value, others by text. */
struct sort_key {
    const char *name;
    long value;
    int id;
};

static int cmp_int_key(const void *a, const void *b)
{
    const struct sort_key *x = a, *y = b;
    return x->value < y->value ? -1 : x->value > y->value;
}

static int cmp_text_key(const void *a, const void *b)
{
    return strcmp(((const struct sort_key *)a)->name, ((const struct sort_key *)b)->name);
}

enum col_kind { COL_UNDECIDED = 0, COL_NUMERIC, COL_CATEGORICAL, COL_LABEL };

/* One column of the file being imported. */
struct column {
    char *name;
    enum col_kind kind;
    int named;       /* --categorical named it */
    long missing;    /* empty fields in the rows kept or dropped for them */
    struct labels L; /* categorical: its levels, all rows */
    /* Train-split statistics of the values present (pass 2). */
    long n;
    double sum, sumsq, min, max;
    float *values; /* (n) numeric, for the median or mode fill; NULL when not needed */
    long *count;   /* (L.n) categorical: train rows of each level */
    /* The encoding. */
    float fill;     /* numeric: the value an empty field takes */
    int fill_level; /* categorical: the level an empty field takes (-1: none) */
    int has_fill;
    int first;         /* first of its features */
    int kept;          /* categorical: levels with a slot of their own; slot kept is "other" */
    int *slot;         /* (L.n) categorical: the slot of each level */
    int *top;          /* (kept) categorical: level ids by slot */
    int ntrain_levels; /* categorical: levels present in the train split */
    int embedded;      /* categorical: one input, its level's row id (slot: row in its block) */
    int row;           /* embedded: the first row of its block, the unknown level's */
};

struct import_csv {
    struct nl_csv c;
    const struct nl_import_opts *opts;
    int ncols, label_col, header, nfeat;
    struct column *col; /* (ncols) */
    struct labels L;    /* classification labels */
    int32_t *row_label; /* (nrows) first-seen id, then class (0 for regression); -1: not kept */
    float *row_target;  /* (nrows) regression targets */
    size_t label_cap, target_cap;
    uint32_t nrows, skipped, dropped;
    int embed_first, nembed, table_rows;      /* the embedded columns' inputs and their table */
    double t_n, t_sum, t_sumsq, t_min, t_max; /* regression: the train split's targets */
    struct nl_text skipped_json, dropped_json;
};

static const char *kind_name(const struct import_csv *im, int i)
{
    switch (im->col[i].kind) {
    case COL_LABEL:
        return im->opts->regression ? "target" : "label";
    case COL_CATEGORICAL:
        return "categorical";
    default:
        return "numeric";
    }
}

static int push_row(struct import_csv *im, int32_t label, float target, struct nl_error *err)
{
    if (im->nrows >= (1u << 30))
        return nl_error_set(err, NL_EFORMAT, "%s: too many rows", im->c.path);
    /* Both arrays grow together: each keeps its own capacity, the same sequence. */
    int32_t *p = nl_grow(im->row_label, &im->label_cap, (size_t)im->nrows + 1, sizeof *p, 1024);
    if (!p)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", im->c.path);
    im->row_label = p;
    float *q = nl_grow(im->row_target, &im->target_cap, (size_t)im->nrows + 1, sizeof *q, 1024);
    if (!q)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", im->c.path);
    im->row_target = q;
    im->row_target[im->nrows] = target;
    im->row_label[im->nrows++] = label;
    return 0;
}

/* Column by name or 1-based index in the first record (names only where it is a header); -1. */
static int find_column(const struct nl_csv *c, const char *want, int by_name)
{
    char *end;
    errno = 0;
    long idx = strtol(want, &end, 10);
    if (!*end && end != want && !errno)
        return idx >= 1 && idx <= c->nf ? (int)idx - 1 : -2;
    for (int i = 0; by_name && i < c->nf; i++)
        if (strcmp(nl_csv_field(c, i), want) == 0)
            return i;
    return -1;
}

/* Whether the first record is a header: the label or a categorical column is named by name, or
 * a field of the first record is not a number where the second record's is one; a file of one
 * record has a header when one of its feature fields is not a number. first holds the first
 * record's fields (nf of them, NUL-separated), c the second record (c->nf 0 when none). */
static int detect_header(const struct import_csv *im, const char *first, int nf)
{
    const struct nl_csv *c = &im->c;
    const char *f = first;
    float v;

    for (int i = 0; i < nf; i++, f += strlen(f) + 1) {
        int num = parse_number(f, c->sep, &v) || is_blank(f);
        if (c->nf == 0 && i != im->label_col && !num)
            return 1;
        if (c->nf > i && !num && parse_number(nl_csv_field(c, i), c->sep, &v))
            return 1;
    }
    return 0;
}

/* The label column from --label (a name or a 1-based index) or the last; whether the first record
 * is a header; the categorical columns --categorical names; the column names. Reads the first
 * two records and leaves the file at the start. */
static int choose_columns(struct import_csv *im, struct nl_error *err)
{
    struct nl_csv *c = &im->c;
    const char *want = im->opts->label;
    char *first = NULL;
    size_t first_len;
    int named = 0, rc;

    rc = nl_csv_read(c, err);
    if (rc == 0)
        return nl_error_set(err, NL_EFORMAT, "%s: empty file, no rows", c->path);
    if (rc < 0)
        return rc;
    im->ncols = c->nf;
    if (im->ncols < 2)
        return nl_error_set(err, NL_EFORMAT,
                            "%s:%ld: one column; a CSV dataset needs feature columns and a label "
                            "column (separator ',', ';' or tab)",
                            c->path, c->rec_line);
    im->col = nl_calloc((size_t)im->ncols, sizeof *im->col);
    if (!im->col)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", c->path);
    im->label_col = im->ncols - 1;
    if (want && *want) {
        int i = find_column(c, want, 1);
        if (i == -2)
            return nl_error_set(err, NL_EINVAL, "%s: --label %s: the file has %d columns", c->path,
                                want, im->ncols);
        if (i < 0)
            return nl_error_set(err, NL_EINVAL, "%s:%ld: no column named '%s' in the header",
                                c->path, c->rec_line, want);
        im->label_col = i;
        named = strcmp(nl_csv_field(c, i), want) == 0;
    }
    /* --categorical: each name or index. */
    const char *list = im->opts->categorical;
    while (list && *list) {
        char name[256];
        size_t n = strcspn(list, ",");
        if (n >= sizeof name)
            return nl_error_set(err, NL_EINVAL, "--categorical: a column name over 255 bytes");
        memcpy(name, list, n);
        name[n] = '\0';
        list += n + (list[n] == ',');
        if (!*name)
            continue;
        int i = find_column(c, name, 1);
        if (i < 0)
            return nl_error_set(err, NL_EINVAL, "%s:%ld: --categorical %s: %s", c->path,
                                c->rec_line, name,
                                i == -2 ? "no such column number" : "no column of that name");
        if (i == im->label_col)
            return nl_error_set(err, NL_EINVAL,
                                "%s: --categorical %s: that is the %s column, not a feature",
                                c->path, name, im->opts->regression ? "target" : "label");
        im->col[i].named = 1;
        im->col[i].kind = COL_CATEGORICAL;
        named |= strcmp(nl_csv_field(c, i), name) == 0;
    }
    im->col[im->label_col].kind = COL_LABEL;
    first_len = c->len;
    first = nl_malloc(first_len + 1);
    if (!first)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", c->path);
    memcpy(first, c->buf, first_len);
    /* The second record only helps to tell a header; a bad one is reported by the first pass
     * (and skipped there with --skip-bad). */
    rc = nl_csv_read(c, err);
    if (rc <= 0)
        c->nf = 0;
    {
        rc = 0;
        if (err)
            memset(err, 0, sizeof *err);
        im->header = named || detect_header(im, first, im->ncols);
        const char *f = first;
        for (int i = 0; i < im->ncols && rc == 0; i++, f += strlen(f) + 1) {
            char num[32];
            snprintf(num, sizeof num, "column %d", i + 1);
            im->col[i].name = nl_strdup(im->header ? f : num);
            if (!im->col[i].name)
                rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", c->path);
        }
    }
    nl_free(first);
    return rc;
}

static void note_line(struct nl_text *t, uint32_t count, long line)
{
    if (count < MAX_LISTED)
        nl_text_printf(t, "%s%ld", count ? "," : "", line);
}

static void note_skipped(struct import_csv *im, const struct nl_error *err)
{
    note_line(&im->skipped_json, im->skipped, im->c.rec_line);
    im->skipped++;
    if (im->opts->warn) {
        char msg[NL_ERR_MAX + 16];
        snprintf(msg, sizeof msg, "skipped %s", err->msg);
        im->opts->warn(im->opts->warn_ud, msg);
    }
}

/* Checks one data row and collects its label or target and its categorical levels: 1 when the
 * row is kept, 0 when --missing drop drops it, or an error naming the line. */
static int check_row(struct import_csv *im, int32_t *label, float *target, struct nl_error *err)
{
    struct nl_csv *c = &im->c;
    const struct nl_import_opts *o = im->opts;
    int drop = 0;
    float v;

    if (c->nf != im->ncols)
        return nl_error_set(err, NL_EFORMAT, "%s:%ld: expected %d fields, found %d", c->path,
                            c->rec_line, im->ncols, c->nf);
    for (int i = 0; i < c->nf; i++) {
        struct column *col = &im->col[i];
        if (is_blank(nl_csv_field(c, i))) {
            if (i == im->label_col && o->missing != NL_MISSING_DROP)
                return nl_error_set(
                    err, NL_EFORMAT, "%s:%ld: the %s (field %d) is empty%s", c->path, c->rec_line,
                    o->regression ? "target" : "label", i + 1,
                    o->missing == NL_MISSING_ERROR ? "" : " (only --missing drop drops such rows)");
            if (o->missing == NL_MISSING_ERROR)
                return nl_error_set(err, NL_EFORMAT,
                                    "%s:%ld: field %d is empty (column '%s'); --missing drop, "
                                    "mean, median or mode handles empty fields",
                                    c->path, c->rec_line, i + 1, col->name);
            drop |= o->missing == NL_MISSING_DROP;
            continue;
        }
        if (i == im->label_col) {
            if (o->regression && !parse_number(nl_csv_field(c, i), c->sep, target))
                return nl_error_set(err, NL_EFORMAT,
                                    "%s:%ld: the target (field %d, '%.40s') is not a number",
                                    c->path, c->rec_line, i + 1, nl_csv_field(c, i));
            continue;
        }
        /* A column's kind is its first value's: a number or a category. */
        if (col->kind == COL_UNDECIDED)
            col->kind =
                parse_number(nl_csv_field(c, i), c->sep, &v) ? COL_NUMERIC : COL_CATEGORICAL;
        if (col->kind == COL_NUMERIC && !parse_number(nl_csv_field(c, i), c->sep, &v))
            return nl_error_set(err, NL_EFORMAT,
                                "%s:%ld: field %d ('%.40s') is not a number (column '%s' is "
                                "numeric; --categorical %s if it holds categories)",
                                c->path, c->rec_line, i + 1, nl_csv_field(c, i), col->name,
                                col->name);
    }
    /* Every field is good: count the missing ones, collect the levels and the label. */
    for (int i = 0; i < c->nf; i++) {
        struct column *col = &im->col[i];
        char *f = trim((char *)nl_csv_field(c, i));
        if (!*f) {
            col->missing++;
            continue;
        }
        if (drop)
            continue;
        if (col->kind == COL_CATEGORICAL) {
            int rc = label_id(&col->L, f, err, c->path, col->name);
            if (rc < 0)
                return rc;
        } else if (i == im->label_col && !o->regression) {
            int rc = label_id(&im->L, f, err, c->path, NULL);
            if (rc < 0)
                return rc;
            *label = rc;
        }
    }
    if (drop) {
        note_line(&im->dropped_json, im->dropped, c->rec_line);
        im->dropped++;
        return 0;
    }
    if (o->regression)
        *label = 0;
    return 1;
}

/* Pass 1: checks every row; collects the labels or targets and the categorical levels. */
static int first_pass(struct import_csv *im, struct nl_error *err)
{
    struct nl_csv *c = &im->c;
    int rc = nl_csv_rewind(c, err);

    if (rc)
        return rc;
    nl_csv_detect_separator(c);
    rc = nl_csv_rewind(c, err);
    if (rc == 0)
        rc = choose_columns(im, err);
    if (rc == 0)
        rc = nl_csv_rewind(c, err);
    if (rc == 0 && im->header)
        rc = nl_csv_read(c, err) == 1 ? 0 : nl_error_set(err, NL_EIO, "%s: changed", c->path);
    while (rc == 0 && (rc = nl_csv_read(c, err)) == 1) {
        int32_t label = -1;
        float target = 0.0f;
        rc = check_row(im, &label, &target, err);
        if (rc < 0 && im->opts->skip_bad && nl_import_skippable(rc)) {
            note_skipped(im, err);
            rc = push_row(im, -1, 0.0f, err);
            continue;
        }
        if (rc >= 0)
            rc = push_row(im, rc == 1 ? label : -1, target, err);
    }
    int kept = 0;
    for (uint32_t r = 0; r < im->nrows && !kept; r++)
        kept = im->row_label[r] >= 0;
    if (rc == 0 && !kept)
        rc = nl_error_set(err, NL_EFORMAT, "%s: no data rows%s%s", c->path,
                          im->header ? " after the header" : "",
                          im->dropped ? " left after dropping those with empty fields" : "");
    for (int i = 0; rc == 0 && i < im->ncols; i++)
        if (im->col[i].kind == COL_UNDECIDED) /* every field empty */
            im->col[i].kind = im->col[i].named ? COL_CATEGORICAL : COL_NUMERIC;
    return rc;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Pass 2: the train split's statistics of every column, the target's, and the fill values. */
static int stats_pass(struct import_csv *im, const uint8_t *split, struct nl_error *err)
{
    struct nl_csv *c = &im->c;
    const enum nl_missing mode = im->opts->missing;
    uint32_t row = 0;
    int rc = nl_csv_rewind(c, err);

    for (int i = 0; rc == 0 && i < im->ncols; i++) {
        struct column *col = &im->col[i];
        col->min = INFINITY;
        col->max = -INFINITY;
        col->fill_level = -1;
        if (col->kind == COL_CATEGORICAL &&
            !(col->count = nl_calloc((size_t)col->L.n + 1, sizeof *col->count)))
            rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", c->path);
        if (col->kind == COL_NUMERIC && (mode == NL_MISSING_MEDIAN || mode == NL_MISSING_MODE) &&
            !(col->values = nl_malloc(((size_t)im->nrows + 1) * sizeof *col->values)))
            rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", c->path);
    }
    im->t_min = INFINITY;
    im->t_max = -INFINITY;
    if (rc == 0 && im->header)
        rc = nl_csv_read(c, err) == 1 ? 0 : nl_error_set(err, NL_EIO, "%s: changed", c->path);
    while (rc == 0 && row < im->nrows && (rc = nl_csv_read(c, err)) == 1) {
        rc = 0;
        if (im->row_label[row] < 0 || split[row] != NL_TRAIN) {
            row++;
            continue;
        }
        if (c->nf != im->ncols) {
            rc = nl_error_set(err, NL_EIO, "%s:%ld: the file changed during the import", c->path,
                              c->rec_line);
            break;
        }
        for (int i = 0; i < im->ncols; i++) {
            struct column *col = &im->col[i];
            char *f = trim((char *)nl_csv_field(c, i));
            float v;
            if (!*f || col->kind == COL_LABEL)
                continue;
            if (col->kind == COL_CATEGORICAL) {
                int id = label_find(&col->L, f);
                if (id >= 0)
                    col->count[id]++;
                continue;
            }
            if (!parse_number(f, c->sep, &v))
                continue;
            if (col->values)
                col->values[col->n] = v;
            col->n++;
            col->sum += v;
            col->sumsq += (double)v * v;
            col->min = v < col->min ? v : col->min;
            col->max = v > col->max ? v : col->max;
        }
        if (im->opts->regression) {
            double t = im->row_target[row];
            im->t_n++;
            im->t_sum += t;
            im->t_sumsq += t * t;
            im->t_min = t < im->t_min ? t : im->t_min;
            im->t_max = t > im->t_max ? t : im->t_max;
        }
        row++;
    }
    if (rc == 0 && row < im->nrows)
        rc = nl_error_set(err, NL_EIO, "%s: the file changed during the import", c->path);
    /* The fills. */
    for (int i = 0; rc == 0 && i < im->ncols; i++) {
        struct column *col = &im->col[i];
        if (col->kind == COL_NUMERIC && col->n > 0) {
            col->fill = (float)(col->sum / (double)col->n);
            if (col->values) {
                qsort(col->values, (size_t)col->n, sizeof *col->values, cmp_float);
                if (mode == NL_MISSING_MEDIAN) {
                    long h = col->n / 2;
                    col->fill =
                        col->n % 2 ? col->values[h] : (col->values[h - 1] + col->values[h]) / 2.0f;
                } else {
                    long best = 0, run = 0;
                    for (long k = 0; k < col->n; k++) {
                        run = k > 0 && col->values[k] == col->values[k - 1] ? run + 1 : 1;
                        if (run > best) {
                            best = run;
                            col->fill = col->values[k];
                        }
                    }
                }
            }
            col->has_fill = mode >= NL_MISSING_MEAN; /* for predict too */
        }
        if (col->kind == COL_NUMERIC && col->n == 0 && col->missing && mode >= NL_MISSING_MEAN)
            rc = nl_error_set(err, NL_EFORMAT,
                              "%s: column '%s' has no value in the train split to fill its "
                              "empty fields with",
                              c->path, col->name);
    }
    return rc;
}

/* A level being ranked: by train count, most frequent first, ties in text order. */
struct level_key {
    long count;
    const char *name;
    int id;
};

static int cmp_level(const void *a, const void *b)
{
    const struct level_key *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Each categorical column's slots: its NL_CSV_ONEHOT_MAX most frequent train levels, then one
 * "other" slot; the features' first indices; the fill levels. */
static int encode_columns(struct import_csv *im, struct nl_error *err)
{
    int next = 0;
    for (int i = 0; i < im->ncols; i++) {
        struct column *col = &im->col[i];
        col->first = next;
        if (col->kind == COL_LABEL)
            continue;
        if (col->kind == COL_NUMERIC) {
            next++;
            continue;
        }
        int *order = nl_malloc(((size_t)col->L.n + 1) * sizeof *order);
        col->slot = nl_malloc(((size_t)col->L.n + 1) * sizeof *col->slot);
        if (!order || !col->slot) {
            nl_free(order);
            return nl_error_set(err, NL_ENOMEM, "%s: out of memory", im->c.path);
        }
        struct level_key *keys = nl_malloc(((size_t)col->L.n + 1) * sizeof *keys);
        if (!keys) {
            nl_free(order);
            return nl_error_set(err, NL_ENOMEM, "%s: out of memory", im->c.path);
        }
        for (int k = 0; k < col->L.n; k++)
            keys[k] = (struct level_key){col->count[k], col->L.name[k], k};
        qsort(keys, (size_t)col->L.n, sizeof *keys, cmp_level);
        for (int k = 0; k < col->L.n; k++)
            order[k] = keys[k].id;
        nl_free(keys);
        col->ntrain_levels = 0;
        for (int k = 0; k < col->L.n; k++)
            col->ntrain_levels += col->count[k] > 0;
        col->embedded = embed_levels(im->opts) > 0 && col->ntrain_levels > embed_levels(im->opts);
        col->kept = col->embedded                            ? col->ntrain_levels
                    : col->ntrain_levels < NL_CSV_ONEHOT_MAX ? col->ntrain_levels
                                                             : NL_CSV_ONEHOT_MAX;
        /* One-hot: the slot of each level, kept for the rest ("other"); embedded: the row in
         * the column's block, 1 + rank for a train level, 0 (unknown) for the others. */
        for (int k = 0; k < col->L.n; k++)
            col->slot[order[k]] = col->embedded   ? (k < col->kept ? k + 1 : 0)
                                  : k < col->kept ? k
                                                  : col->kept;
        col->top = order;
        if (im->opts->missing >= NL_MISSING_MEAN && col->kept > 0) {
            col->fill_level = order[0];
            col->has_fill = 1;
        }
        if (!col->embedded)
            next += col->kept + 1;
    }
    /* The embedded columns' inputs come last, in column order; their blocks of rows follow one
     * another in one table. */
    im->embed_first = next;
    im->table_rows = 0;
    for (int i = 0; i < im->ncols; i++) {
        struct column *col = &im->col[i];
        if (col->kind != COL_CATEGORICAL || !col->embedded)
            continue;
        col->first = next++;
        col->row = im->table_rows;
        im->table_rows += col->kept + 1;
        if (im->table_rows > (1 << 24))
            return nl_error_set(err, NL_EFORMAT,
                                "%s: the embedded columns have more than %d levels together",
                                im->c.path, 1 << 24);
    }
    im->nembed = next - im->embed_first;
    im->nfeat = next;
    if (next < 1)
        return nl_error_set(err, NL_EFORMAT, "%s: no feature columns", im->c.path);
    return 0;
}

/* The features of the current record into x (nfeat). */
static int encode_row(const struct import_csv *im, float *x, struct nl_error *err)
{
    const struct nl_csv *c = &im->c;
    for (int i = 0; i < im->ncols; i++) {
        const struct column *col = &im->col[i];
        char *f = trim((char *)nl_csv_field(c, i));
        if (col->kind == COL_LABEL)
            continue;
        if (col->kind == COL_NUMERIC) {
            if (!*f)
                x[col->first] = col->fill;
            else if (!parse_number(f, c->sep, &x[col->first]))
                return nl_error_set(err, NL_EIO, "%s:%ld: the file changed during the import",
                                    c->path, c->rec_line);
            continue;
        }
        int id = *f ? label_find(&col->L, f) : col->fill_level;
        if (col->embedded) {
            x[col->first] = (float)(col->row + (id >= 0 ? col->slot[id] : 0));
            continue;
        }
        memset(x + col->first, 0, ((size_t)col->kept + 1) * sizeof *x);
        x[col->first + (id >= 0 ? col->slot[id] : col->kept)] = 1.0f;
    }
    return 0;
}

/* Pass 3: parses, encodes and stores the features of every kept row. */
static int write_pass(struct import_csv *im, struct nl_writer *w, const uint8_t *split,
                      struct nl_error *err)
{
    struct nl_csv *c = &im->c;
    float *x = nl_malloc((size_t)im->nfeat * sizeof *x);
    uint32_t row = 0;
    int rc = x ? nl_csv_rewind(c, err) : nl_error_set(err, NL_ENOMEM, "out of memory");

    if (rc == 0 && im->header)
        rc = nl_csv_read(c, err) == 1 ? 0 : nl_error_set(err, NL_EIO, "%s: changed", c->path);
    while (rc == 0 && row < im->nrows && (rc = nl_csv_read(c, err)) == 1) {
        int32_t label = im->row_label[row];
        rc = 0;
        if (label >= 0 && c->nf != im->ncols)
            rc = nl_error_set(err, NL_EIO, "%s:%ld: the file changed during the import", c->path,
                              c->rec_line);
        if (label >= 0 && rc == 0)
            rc = encode_row(im, x, err);
        if (label >= 0 && rc == 0)
            rc = im->opts->regression
                     ? nl_writer_add_target(w, split[row], im->row_target[row], x, err)
                     : nl_writer_add(w, split[row], label, x, err);
        row++;
        if (rc == 0 && im->opts->progress && (row % PROGRESS_ROWS == 0 || row == im->nrows) &&
            im->opts->progress(im->opts->progress_ud, row, im->nrows))
            rc = nl_error_set(err, NL_ECANCELED, "stopped");
    }
    if (rc == 0 && row < im->nrows)
        rc = nl_error_set(err, NL_EIO, "%s: the file changed during the import", c->path);
    nl_free(x);
    return rc;
}

static void json_num(struct nl_text *t, double v)
{
    if (isfinite(v))
        nl_text_printf(t, "%.9g", v);
    else
        nl_text_printf(t, "null");
}

/* The preprocessing record's columns and task (see the top of the file). */
static void describe_columns(const struct import_csv *im, struct nl_text *pre)
{
    const int reg = im->opts->regression;
    nl_text_printf(pre, ",\"task\":\"%s\",\"missing\":\"%s\",\"onehot_max\":%d",
                   reg ? "regression" : "classification", nl_missing_names[im->opts->missing],
                   NL_CSV_ONEHOT_MAX);
    nl_text_printf(pre, ",\"embed_levels\":%d",
                   embed_levels(im->opts) > 0 ? embed_levels(im->opts) : 0);
    if (im->nembed > 0)
        nl_text_printf(pre, ",\"embedded\":{\"first\":%d,\"columns\":%d,\"rows\":%d}",
                       im->embed_first, im->nembed, im->table_rows);
    if (reg) {
        double n = im->t_n > 0 ? im->t_n : 1, mean = im->t_sum / n;
        double var = im->t_sumsq / n - mean * mean;
        nl_text_printf(pre, ",\"target\":{\"column\":");
        nl_text_json_str(pre, im->col[im->label_col].name);
        nl_text_printf(pre, ",\"mean\":");
        json_num(pre, mean);
        nl_text_printf(pre, ",\"std\":");
        json_num(pre, var > 0 ? sqrt(var) : 1.0);
        nl_text_printf(pre, "}");
    }
    nl_text_printf(pre, ",\"columns\":[");
    for (int i = 0; i < im->ncols; i++) {
        const struct column *col = &im->col[i];
        nl_text_printf(pre, "%s{\"name\":", i ? "," : "");
        nl_text_json_str(pre, col->name);
        nl_text_printf(pre, ",\"kind\":\"%s\",\"missing\":%ld", kind_name(im, i), col->missing);
        if (col->kind == COL_NUMERIC || (col->kind == COL_LABEL && reg)) {
            double n = col->kind == COL_LABEL ? im->t_n : (double)col->n;
            double sum = col->kind == COL_LABEL ? im->t_sum : col->sum;
            double sumsq = col->kind == COL_LABEL ? im->t_sumsq : col->sumsq;
            double mean = n > 0 ? sum / n : NAN, var = n > 0 ? sumsq / n - mean * mean : NAN;
            nl_text_printf(pre, ",\"mean\":");
            json_num(pre, mean);
            nl_text_printf(pre, ",\"std\":");
            json_num(pre, var > 0 ? sqrt(var) : n > 0 ? 0.0 : NAN);
            nl_text_printf(pre, ",\"min\":");
            json_num(pre, col->kind == COL_LABEL ? im->t_min : col->min);
            nl_text_printf(pre, ",\"max\":");
            json_num(pre, col->kind == COL_LABEL ? im->t_max : col->max);
        }
        if (col->kind == COL_NUMERIC && col->has_fill) {
            nl_text_printf(pre, ",\"fill\":");
            json_num(pre, col->fill);
        }
        if (col->kind == COL_CATEGORICAL) {
            nl_text_printf(pre, ",\"levels\":%d,\"slots\":[", col->ntrain_levels);
            for (int k = 0; k < col->kept; k++) {
                nl_text_printf(pre, "%s", k ? "," : "");
                nl_text_json_str(pre, col->L.name[col->top[k]]);
            }
            nl_text_printf(pre, "]");
            if (col->embedded)
                nl_text_printf(pre, ",\"embedded\":true,\"row\":%d", col->row);
            if (col->has_fill) {
                nl_text_printf(pre, ",\"fill\":");
                nl_text_json_str(pre, col->L.name[col->fill_level]);
            }
        }
        if (col->kind != COL_LABEL)
            nl_text_printf(pre, ",\"first\":%d", col->first);
        nl_text_printf(pre, "}");
    }
    nl_text_printf(pre, "]");
}

/* The model inputs' names: a numeric column's name, NAME=LEVEL per kept level and NAME=(other). */
static void feature_names(const struct import_csv *im, struct nl_text *pre)
{
    int any = 0;
    nl_text_printf(pre, ",\"feature_names\":[");
    for (int i = 0; i < im->ncols; i++) {
        const struct column *col = &im->col[i];
        if (col->kind == COL_LABEL)
            continue;
        if (col->kind == COL_NUMERIC) {
            nl_text_printf(pre, "%s", any++ ? "," : "");
            nl_text_json_str(pre, col->name);
            continue;
        }
        if (col->embedded) {
            struct nl_text t = {0};
            nl_text_printf(&t, "%s=(row id)", col->name);
            nl_text_printf(pre, "%s", any++ ? "," : "");
            nl_text_json_str(pre, t.s ? t.s : "");
            nl_text_free(&t);
            continue;
        }
        for (int k = 0; k <= col->kept; k++) {
            struct nl_text t = {0};
            nl_text_printf(&t, "%s=%s", col->name,
                           k < col->kept ? col->L.name[col->top[k]] : "(other)");
            nl_text_printf(pre, "%s", any++ ? "," : "");
            nl_text_json_str(pre, t.s ? t.s : "");
            nl_text_free(&t);
        }
    }
    nl_text_printf(pre, "]");
}

static void import_free(struct import_csv *im)
{
    for (int i = 0; im->col && i < im->ncols; i++) {
        struct column *col = &im->col[i];
        nl_free(col->name);
        labels_free(&col->L);
        nl_free(col->values);
        nl_free(col->count);
        nl_free(col->slot);
        nl_free(col->top);
    }
    nl_free(im->col);
    labels_free(&im->L);
    nl_free(im->row_label);
    nl_free(im->row_target);
    nl_csv_release(&im->c);
    nl_text_free(&im->skipped_json);
    nl_text_free(&im->dropped_json);
}

int nl_import_csv(struct nl_store *s, const char *name, const char *path,
                  const struct nl_import_opts *opts, struct nl_error *err)
{
    struct import_csv im = {.c = {.path = path, .line = 1}, .opts = opts, .L = {.all_int = 1}};
    struct nl_writer *w = NULL;
    struct nl_text pre = {0};
    uint8_t *split = NULL;
    struct sort_key *order = NULL;
    int *rank = NULL;
    char source[PATH_MAX + 8];
    const int reg = opts->regression;
    const int nclasses = reg ? 1 : 0;
    int rc = nl_store_check_name("dataset", name, err);

    if (rc)
        return rc;
    if ((unsigned)opts->missing > NL_MISSING_MODE)
        return nl_error_set(err, NL_EINVAL, "missing-value mode %d is unknown", (int)opts->missing);
    im.c.f = nl_fopen_regular(path, err);
    if (!im.c.f)
        return err->code;
    rc = first_pass(&im, err);
    const int nlab = reg ? nclasses : im.L.n;
    if (rc == 0) {
        order = nl_malloc((size_t)nlab * sizeof *order);
        rank = nl_malloc((size_t)nlab * sizeof *rank);
        split = nl_malloc((size_t)im.nrows + 1);
        if (!order || !rank || !split)
            rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    }
    if (rc == 0 && !reg) {
        /* Classes in numeric or text order. */
        for (int i = 0; i < im.L.n; i++) {
            order[i].name = im.L.name[i];
            order[i].value = strtol(im.L.name[i], NULL, 10);
            order[i].id = i;
        }
        qsort(order, (size_t)im.L.n, sizeof *order, im.L.all_int ? cmp_int_key : cmp_text_key);
        for (int i = 0; i < im.L.n; i++)
            rank[order[i].id] = i;
        for (uint32_t r = 0; r < im.nrows; r++)
            if (im.row_label[r] >= 0)
                im.row_label[r] = rank[im.row_label[r]];
    }
    if (rc == 0) {
        memset(split, NL_TRAIN, (size_t)im.nrows + 1);
        rc = nl_split_assign(im.row_label, im.nrows, nlab, opts->val_fraction, opts->test_fraction,
                             opts->seed, split, err);
    }
    if (rc == 0)
        rc = stats_pass(&im, split, err);
    if (rc == 0)
        rc = encode_columns(&im, err);
    if (rc == 0) {
        const char *paths[1] = {path};
        nl_import_describe_source(paths, 1, source, sizeof source);
        struct nl_writer_spec spec = {.name = name,
                                      .kind = "csv",
                                      .source = source,
                                      .shape = {im.nfeat, 1, 1},
                                      .dtype = NL_F32};
        rc = nl_writer_begin(&w, s, &spec, err);
    }
    if (rc == 0)
        rc = write_pass(&im, w, split, err);
    if (rc == 0) {
        const char **names = nl_malloc(((size_t)nlab + 1) * sizeof *names);
        if (!names)
            rc = nl_error_set(err, NL_ENOMEM, "out of memory");
        for (int i = 0; rc == 0 && i < nlab; i++)
            names[i] = reg ? im.col[im.label_col].name : order[i].name;
        nl_text_printf(&pre, "{\"reader\":\"csv\",\"separator\":");
        nl_text_json_str(&pre, im.c.sep == '\t' ? "\t" : im.c.sep == ';' ? ";" : ",");
        nl_text_printf(&pre, ",\"header\":%s,\"label_column\":%d,\"labels\":\"%s\",\"features\":%d",
                       im.header ? "true" : "false", im.label_col + 1,
                       reg            ? "numbers"
                       : im.L.all_int ? "integers"
                                      : "strings",
                       im.nfeat);
        feature_names(&im, &pre);
        describe_columns(&im, &pre);
        nl_text_printf(&pre,
                       ",\"normalise\":\"per-feature mean/std of train\",\"val_fraction\":%g,"
                       "\"test_fraction\":%g,\"seed\":%llu,\"skipped\":%u,\"skipped_lines\":[%s],"
                       "\"dropped\":%u,\"dropped_lines\":[%s]}",
                       (double)opts->val_fraction, (double)opts->test_fraction,
                       (unsigned long long)opts->seed, im.skipped,
                       im.skipped_json.s ? im.skipped_json.s : "", im.dropped,
                       im.dropped_json.s ? im.dropped_json.s : "");
        if (rc == 0)
            rc = nl_writer_commit(w, nlab, names, pre.failed ? NULL : pre.s, opts, err);
        else
            nl_writer_abort(w);
        w = NULL;
        nl_free(names);
    }
    nl_writer_abort(w);
    fclose(im.c.f);
    import_free(&im);
    nl_free(order);
    nl_free(rank);
    nl_free(split);
    nl_text_free(&pre);
    return rc;
}

/* ---- Rows for prediction, preprocessed as the import did ---- */

const char *const nl_missing_names[5] = {"error", "drop", "mean", "median", "mode"};

int nl_missing_parse(const char *text)
{
    for (int i = 0; i < 5; i++)
        if (text && strcmp(text, nl_missing_names[i]) == 0)
            return i;
    return -1;
}

struct table_col {
    char *name;
    char kind[16];
    long missing;
    double mean, std, min, max;
    int levels, kept, first, has_fill, warned;
    int embedded, row; /* one input: row + 1 + slot, row for a level the import did not keep */
    float fill;
    char *fill_text;
    char **top;      /* (kept) */
    struct labels L; /* the kept levels, id = slot */
};

struct nl_table {
    const struct nl_dataset *d;
    char sep;
    int header, ncols, label_col, nfeat, regression;
    int embed_first, nembed, table_rows;
    enum nl_missing missing;
    struct table_col *col; /* (ncols) */
    nl_warn_fn warn;
    void *ud;
    float *raw; /* (nfeat) */
};

void nl_table_free(struct nl_table *t)
{
    if (!t)
        return;
    for (int i = 0; t->col && i < t->ncols; i++) {
        struct table_col *c = &t->col[i];
        nl_free(c->name);
        nl_free(c->fill_text);
        for (int k = 0; c->top && k < c->kept; k++)
            nl_free(c->top[k]);
        nl_free(c->top);
        labels_free(&c->L);
    }
    nl_free(t->col);
    nl_free(t->raw);
    nl_free(t);
}

static double jnum(const struct nl_json *o, const char *key, double dflt)
{
    const struct nl_json *v = nl_json_get(o, key);
    return v && v->type == NL_JSON_NUMBER ? v->number : dflt;
}

static int table_column(struct nl_table *t, int i, const struct nl_json *o, struct nl_error *err)
{
    struct table_col *c = &t->col[i];
    const struct nl_json *name = nl_json_get(o, "name"), *kind = nl_json_get(o, "kind");
    const struct nl_json *slots = nl_json_get(o, "slots"), *fill = nl_json_get(o, "fill");
    const char *ds = t->d->name;

    if (o->type != NL_JSON_OBJECT || !name || name->type != NL_JSON_STRING || !kind ||
        kind->type != NL_JSON_STRING)
        return nl_error_set(err, NL_EFORMAT, "dataset '%s': column %d of its record is invalid", ds,
                            i + 1);
    c->name = nl_strdup(name->string);
    snprintf(c->kind, sizeof c->kind, "%s", kind->string);
    c->missing = (long)jnum(o, "missing", 0);
    c->mean = jnum(o, "mean", NAN);
    c->std = jnum(o, "std", NAN);
    c->min = jnum(o, "min", NAN);
    c->max = jnum(o, "max", NAN);
    c->levels = (int)jnum(o, "levels", 0);
    c->first = (int)jnum(o, "first", -1);
    if (!c->name)
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    if (strcmp(c->kind, "target") == 0 || strcmp(c->kind, "label") == 0) {
        t->label_col = i;
        return 0;
    }
    int width = 1;
    if (strcmp(c->kind, "categorical") == 0) {
        if (!slots || slots->type != NL_JSON_ARRAY || slots->count > MAX_CLASSES)
            return nl_error_set(err, NL_EFORMAT, "dataset '%s': column '%s' has no levels", ds,
                                c->name);
        c->kept = (int)slots->count;
        c->top = nl_calloc((size_t)c->kept + 1, sizeof *c->top);
        if (!c->top)
            return nl_error_set(err, NL_ENOMEM, "out of memory");
        for (int k = 0; k < c->kept; k++) {
            if (slots->items[k].type != NL_JSON_STRING)
                return nl_error_set(err, NL_EFORMAT, "dataset '%s': column '%s': a bad level", ds,
                                    c->name);
            c->top[k] = nl_strdup(slots->items[k].string);
            if (!c->top[k] || label_id(&c->L, slots->items[k].string, err, ds, c->name) < 0)
                return nl_error_set(err, NL_ENOMEM, "out of memory");
        }
        if (fill && fill->type == NL_JSON_STRING) {
            c->fill_text = nl_strdup(fill->string);
            c->has_fill = 1;
        }
        const struct nl_json *emb = nl_json_get(o, "embedded");
        c->embedded = emb && emb->type == NL_JSON_BOOL && emb->boolean;
        c->row = (int)jnum(o, "row", -1);
        if (c->embedded && (c->row < 0 || c->row + c->kept + 1 > t->table_rows))
            return nl_error_set(err, NL_EFORMAT,
                                "dataset '%s': column '%s' does not fit its table of %d rows", ds,
                                c->name, t->table_rows);
        width = c->embedded ? 1 : c->kept + 1;
    } else if (strcmp(c->kind, "numeric") == 0) {
        if (fill && fill->type == NL_JSON_NUMBER) {
            char num[48];
            c->fill = (float)fill->number;
            snprintf(num, sizeof num, "%.6g", fill->number);
            c->fill_text = nl_strdup(num);
            c->has_fill = 1;
        }
    } else {
        return nl_error_set(err, NL_EFORMAT, "dataset '%s': column '%s' is of kind '%s'", ds,
                            c->name, c->kind);
    }
    if (c->first < 0 || c->first + width > t->nfeat)
        return nl_error_set(err, NL_EFORMAT,
                            "dataset '%s': column '%s' does not fit its %d features", ds, c->name,
                            t->nfeat);
    return 0;
}

int nl_table_open(struct nl_table **out, const struct nl_dataset *d, nl_warn_fn warn, void *ud,
                  struct nl_error *err)
{
    struct nl_json_doc *doc = NULL;
    struct nl_table *t;
    int rc;

    *out = NULL;
    if (strcmp(d->kind, "csv") != 0 || d->dtype != NL_F32)
        return nl_error_set(err, NL_EINVAL, "dataset '%s' is a %s dataset, not a table (CSV)",
                            d->name, d->kind);
    t = nl_calloc(1, sizeof *t);
    if (!t)
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    t->d = d;
    t->warn = warn;
    t->ud = ud;
    t->label_col = -1;
    t->nfeat = d->shape.c;
    t->regression = d->regression;
    rc = nl_json_parse(&doc, d->preprocessing, strlen(d->preprocessing), d->name, err);
    const struct nl_json *root = rc == 0 ? nl_json_root(doc) : NULL;
    const struct nl_json *cols = root ? nl_json_get(root, "columns") : NULL;
    const struct nl_json *sep = root ? nl_json_get(root, "separator") : NULL;
    const struct nl_json *header = root ? nl_json_get(root, "header") : NULL;
    const struct nl_json *missing = root ? nl_json_get(root, "missing") : NULL;
    const struct nl_json *emb = root ? nl_json_get(root, "embedded") : NULL;
    if (emb && emb->type == NL_JSON_OBJECT) {
        t->embed_first = (int)jnum(emb, "first", 0);
        t->nembed = (int)jnum(emb, "columns", 0);
        t->table_rows = (int)jnum(emb, "rows", 0);
    }
    if (rc == 0 &&
        (!cols || cols->type != NL_JSON_ARRAY || cols->count < 2 || cols->count > MAX_FIELDS))
        rc = nl_error_set(err, NL_EFORMAT,
                          "dataset '%s' was imported without a record of its columns; import it "
                          "again to predict from rows",
                          d->name);
    if (rc == 0) {
        t->sep = sep && sep->type == NL_JSON_STRING && sep->string[0] ? sep->string[0] : ',';
        t->header = header && header->type == NL_JSON_BOOL && header->boolean;
        t->missing = missing && missing->type == NL_JSON_STRING
                         ? (enum nl_missing)nl_missing_parse(missing->string)
                         : NL_MISSING_ERROR;
        t->ncols = (int)cols->count;
        t->col = nl_calloc((size_t)t->ncols, sizeof *t->col);
        t->raw = nl_malloc((size_t)t->nfeat * sizeof *t->raw);
        if (!t->col || !t->raw)
            rc = nl_error_set(err, NL_ENOMEM, "out of memory");
    }
    for (int i = 0; rc == 0 && i < t->ncols; i++)
        rc = table_column(t, i, &cols->items[i], err);
    nl_json_free(doc);
    if (rc) {
        nl_table_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int nl_table_embedded(const struct nl_table *t, int *first, int *columns, int *rows)
{
    *first = t->embed_first;
    *columns = t->nembed;
    *rows = t->table_rows;
    return t->nembed > 0;
}

int nl_table_columns(const struct nl_table *t)
{
    return t->ncols;
}

void nl_table_column(const struct nl_table *t, int col, struct nl_table_column *out)
{
    const struct table_col *c = &t->col[col];
    *out = (struct nl_table_column){
        .name = c->name,
        .kind = c->kind,
        .missing = c->missing,
        .mean = c->mean,
        .std = c->std,
        .min = c->min,
        .max = c->max,
        .levels = c->levels,
        .kept = c->kept,
        .top = (const char *const *)c->top,
        .fill = c->fill_text,
        .features = col == t->label_col      ? 0
                    : c->top && !c->embedded ? c->kept + 1
                                             : 1,
        .embedded = c->embedded,
        .row = c->row,
    };
}

/* One record's fields (nf of them) into x; where names it in errors. */
static int table_fields(struct nl_table *t, const struct nl_csv *rec, const char *where, float *x,
                        double *target, struct nl_error *err)
{
    const struct nl_dataset *d = t->d;
    const int with_target = rec->nf == t->ncols;
    float v;

    *target = NAN;
    if (rec->nf != t->ncols && rec->nf != t->ncols - 1)
        return nl_error_set(err, NL_EFORMAT,
                            "%s: %d fields; dataset '%s' takes %d (its feature columns, "
                            "optionally with its %s column)",
                            where, rec->nf, d->name, t->ncols - 1,
                            t->regression ? "target" : "label");
    for (int i = 0, f = 0; i < t->ncols; i++) {
        struct table_col *c = &t->col[i];
        if (i == t->label_col) {
            if (with_target) {
                char *s = trim((char *)nl_csv_field(rec, f++));
                if (t->regression && parse_number(s, rec->sep, &v))
                    *target = v;
                for (int k = 0; !t->regression && *s && k < d->nclasses; k++)
                    if (strcmp(d->class_names[k], s) == 0)
                        *target = k;
            }
            continue;
        }
        char *s = trim((char *)nl_csv_field(rec, f++));
        if (!*s && !c->has_fill)
            return nl_error_set(err, NL_EFORMAT,
                                "%s: field %d (column '%s') is empty, and the dataset was imported "
                                "with --missing %s",
                                where, f, c->name, nl_missing_names[t->missing]);
        if (!c->top) {
            if (!*s)
                t->raw[c->first] = c->fill;
            else if (!parse_number(s, rec->sep, &t->raw[c->first]))
                return nl_error_set(err, NL_EFORMAT,
                                    "%s: field %d ('%.40s') is not a number (column '%s')", where,
                                    f, s, c->name);
            continue;
        }
        int id = label_find(&c->L, *s ? s : c->fill_text);
        if (id < 0 && !c->warned && t->warn) {
            char msg[NL_ERR_MAX];
            snprintf(msg, sizeof msg,
                     "%s: column '%.100s': level '%.60s' was not among the train split's "
                     "levels the model knows; such levels count as the column's %s level",
                     where, c->name, s, c->embedded ? "unknown" : "other");
            t->warn(t->ud, msg);
            c->warned = 1;
        }
        if (c->embedded) {
            t->raw[c->first] = (float)(c->row + (id >= 0 ? id + 1 : 0));
            continue;
        }
        memset(t->raw + c->first, 0, ((size_t)c->kept + 1) * sizeof *t->raw);
        t->raw[c->first + (id >= 0 ? id : c->kept)] = 1.0f;
    }
    for (int k = 0; k < t->nfeat; k++)
        x[k] = (t->raw[k] - d->mean[k]) / d->std[k];
    return 0;
}

int nl_table_row_text(struct nl_table *t, const char *text, const char *where, float *x,
                      double *target, struct nl_error *err)
{
    size_t n = strlen(text);
    FILE *f = fmemopen((void *)text, n ? n : 1, "r");
    struct nl_csv c = {.path = where, .f = f, .line = 1};
    int rc;

    if (!f)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", where);
    /* The import's separator, or else the first of ';', tab and ',' that the row has. */
    c.sep = strchr(text, t->sep) ? t->sep
            : strchr(text, ';')  ? ';'
            : strchr(text, '\t') ? '\t'
                                 : ',';
    rc = n ? nl_csv_read(&c, err) : 0;
    if (rc == 0)
        rc = nl_error_set(err, NL_EFORMAT, "%s: an empty row", where);
    if (rc == 1)
        rc = table_fields(t, &c, where, x, target, err);
    fclose(f);
    nl_csv_release(&c);
    return rc;
}

int nl_table_read_csv(struct nl_table *t, const char *path,
                      int (*fn)(void *ud, long line, const float *x, double target), void *ud,
                      struct nl_error *err)
{
    struct nl_csv c = {.path = path, .line = 1};
    float *x = nl_malloc((size_t)t->nfeat * sizeof *x);
    int rc = 0, first = 1;

    c.f = x ? nl_fopen_regular(path, err) : NULL;
    if (!x || !c.f) {
        nl_free(x);
        return x ? err->code : nl_error_set(err, NL_ENOMEM, "out of memory");
    }
    rc = nl_csv_rewind(&c, err);
    if (rc == 0) {
        nl_csv_detect_separator(&c);
        rc = nl_csv_rewind(&c, err);
    }
    while (rc == 0 && (rc = nl_csv_read(&c, err)) == 1) {
        char where[PATH_MAX + 32];
        double target;
        rc = 0;
        if (first) {
            /* A header: the import's column names, or a first field that is not a number in a
             * numeric column. */
            int header = 0;
            float v;
            first = 0;
            for (int i = 0, f = 0; i < t->ncols && f < c.nf && !header; i++) {
                if (i == t->label_col && c.nf == t->ncols - 1)
                    continue;
                const char *s = nl_csv_field(&c, f++);
                header =
                    strcmp(s, t->col[i].name) == 0 || (!t->col[i].top && i != t->label_col &&
                                                       !is_blank(s) && !parse_number(s, c.sep, &v));
            }
            if (header)
                continue;
        }
        snprintf(where, sizeof where, "%s:%ld", path, c.rec_line);
        rc = table_fields(t, &c, where, x, &target, err);
        if (rc == 0)
            rc = fn(ud, c.rec_line, x, target);
    }
    if (rc == 1)
        rc = 0;
    fclose(c.f);
    nl_csv_release(&c);
    nl_free(x);
    return rc;
}
