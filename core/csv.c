/* Importing a CSV file: one sample per row, numeric feature columns and one label column.
 *
 * The separator is a comma, a semicolon or a tab, whichever occurs most (outside quotes) in the
 * first line; with a semicolon, a decimal comma ("1,5") reads as a point. Fields may be quoted
 * ("a, b", "say ""hi""") and quoted fields may hold line breaks. The first row is a header when
 * one of its feature fields is not a number (or when the label column is given by name). The
 * label column is the last one unless --label names it (by header name or 1-based index); labels
 * that are all integers become classes in numeric order, other labels become classes in sorted
 * order, their text kept as the class names. Blank lines are ignored. Numbers are decimal:
 * hexadecimal ("0x10", which strtod would read as 16) is not a number, and a NUL byte anywhere
 * (which would cut a number or a label short) is refused with FILE:LINE.
 *
 * Two passes over the file: the first checks every row and collects the labels (4 bytes a row),
 * so that the seeded stratified splits are known before anything is written; the second parses
 * the features and streams them into the store as float32 samples of shape (F, 1, 1), whose
 * per-"channel" statistics are the per-feature mean and standard deviation of the train split:
 * features are standardised at train, eval and predict time. */
#include "import_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnlab/alloc.h"
#include "store_internal.h"

#define MAX_RECORD    (1u << 20) /* bytes in one row */
#define MAX_FIELDS    65536
#define MAX_CLASSES   65536
#define MAX_LISTED    20
#define PROGRESS_ROWS 1024

struct csv {
    const char *path;
    FILE *f;
    char sep;
    long line;     /* of the next character */
    long rec_line; /* where the current record starts */
    char *buf;     /* the record's fields, each NUL-terminated */
    size_t len, cap;
    size_t *off; /* (nf) field starts in buf */
    int nf, fcap;
};

static int put_char(struct csv *c, char ch, struct nl_error *err)
{
    if (c->len + 1 >= c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 4096;
        char *p;
        if (cap > MAX_RECORD + 16)
            return nl_error_set(err, NL_EFORMAT, "%s:%ld: a row longer than %u bytes", c->path,
                                c->rec_line, MAX_RECORD);
        p = nl_realloc(c->buf, cap);
        if (!p)
            return nl_error_set(err, NL_ENOMEM, "%s: out of memory", c->path);
        c->buf = p;
        c->cap = cap;
    }
    c->buf[c->len++] = ch;
    return 0;
}

static int start_field(struct csv *c, struct nl_error *err)
{
    if (c->nf > MAX_FIELDS)
        return nl_error_set(err, NL_EFORMAT, "%s:%ld: more than %d fields", c->path, c->rec_line,
                            MAX_FIELDS);
    if (c->nf == c->fcap) {
        int cap = c->fcap ? 2 * c->fcap : 64;
        size_t *p;
        p = nl_realloc(c->off, (size_t)cap * sizeof *p);
        if (!p)
            return nl_error_set(err, NL_ENOMEM, "%s: out of memory", c->path);
        c->off = p;
        c->fcap = cap;
    }
    c->off[c->nf++] = c->len;
    return 0;
}

static const char *field(const struct csv *c, int i)
{
    return c->buf + c->off[i];
}

/* A NUL byte would cut a number or a label short in silence ("x\0y" read as "x"): refused. The
 * rest of its line is consumed, so that --skip-bad goes on at the next one. */
static int nul_byte(struct csv *c, struct nl_error *err)
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
static int read_record(struct csv *c, struct nl_error *err)
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
static int rewind_csv(struct csv *c, struct nl_error *err)
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
static void detect_separator(struct csv *c)
{
    long n[3] = {0};
    int quoted = 0, ch;
    size_t seen = 0;

    while ((ch = getc(c->f)) != EOF && seen++ < MAX_RECORD) {
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

/* The distinct labels, by hashing; ids in order of first appearance. */
struct labels {
    char **name; /* (n) */
    int n, cap;
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

static int label_id(struct labels *L, const char *s, struct nl_error *err, const char *path)
{
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
    uint32_t h = hash(s) & (uint32_t)(L->nslots - 1);
    while (L->slot[h]) {
        if (strcmp(L->name[L->slot[h] - 1], s) == 0)
            return L->slot[h] - 1;
        h = (h + 1) & (uint32_t)(L->nslots - 1);
    }
    if (L->n >= MAX_CLASSES)
        return nl_error_set(err, NL_EFORMAT,
                            "%s: more than %d distinct labels; is the label column right "
                            "(--label COLUMN)?",
                            path, MAX_CLASSES);
    if (L->n == L->cap) {
        int cap = L->cap ? 2 * L->cap : 16;
        char **p = nl_realloc(L->name, (size_t)cap * sizeof *p);
        if (!p)
            return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
        L->name = p;
        L->cap = cap;
    }
    L->name[L->n] = nl_strdup(s);
    if (!L->name[L->n])
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    char *end;
    errno = 0;
    (void)strtol(s, &end, 10);
    if (end == s || *end || errno)
        L->all_int = 0;
    L->slot[h] = L->n + 1;
    return L->n++;
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

struct import_csv {
    struct csv c;
    const struct nl_import_opts *opts;
    int ncols, label_col, header;
    struct labels L;
    int32_t *row_label; /* (nrows) first-seen id, then class; -1: skipped */
    uint32_t nrows, rcap, skipped;
    struct nl_text skipped_json, names_json;
};

/* Checks one data row; 0 or an error naming the line. */
static int check_row(struct import_csv *im, struct nl_error *err)
{
    struct csv *c = &im->c;
    float v;

    if (c->nf != im->ncols)
        return nl_error_set(err, NL_EFORMAT, "%s:%ld: expected %d fields, found %d", c->path,
                            c->rec_line, im->ncols, c->nf);
    for (int i = 0; i < c->nf; i++) {
        if (i == im->label_col) {
            if (is_blank(field(c, i)))
                return nl_error_set(err, NL_EFORMAT, "%s:%ld: the label (field %d) is empty",
                                    c->path, c->rec_line, i + 1);
            continue;
        }
        if (is_blank(field(c, i)))
            return nl_error_set(err, NL_EFORMAT, "%s:%ld: field %d is empty", c->path, c->rec_line,
                                i + 1);
        if (!parse_number(field(c, i), c->sep, &v))
            return nl_error_set(err, NL_EFORMAT, "%s:%ld: field %d ('%.40s') is not a number",
                                c->path, c->rec_line, i + 1, field(c, i));
    }
    return 0;
}

static int push_row(struct import_csv *im, int32_t label, struct nl_error *err)
{
    if (im->nrows == im->rcap) {
        uint32_t cap = im->rcap ? 2 * im->rcap : 1024;
        int32_t *p;
        if (im->rcap >= (1u << 30))
            return nl_error_set(err, NL_EFORMAT, "%s: too many rows", im->c.path);
        p = nl_realloc(im->row_label, (size_t)cap * sizeof *p);
        if (!p)
            return nl_error_set(err, NL_ENOMEM, "%s: out of memory", im->c.path);
        im->row_label = p;
        im->rcap = cap;
    }
    im->row_label[im->nrows++] = label;
    return 0;
}

/* The label column from --label (a name or a 1-based index) or the last; and whether the first
 * record is a header. */
static int choose_columns(struct import_csv *im, struct nl_error *err)
{
    struct csv *c = &im->c;
    const char *want = im->opts->label;
    char *end;
    long idx;
    float v;

    im->ncols = c->nf;
    if (im->ncols < 2)
        return nl_error_set(err, NL_EFORMAT,
                            "%s:%ld: one column; a CSV dataset needs feature columns and a label "
                            "column (separator ',', ';' or tab)",
                            c->path, c->rec_line);
    im->label_col = im->ncols - 1;
    if (want && *want) {
        errno = 0;
        idx = strtol(want, &end, 10);
        if (!*end && end != want && !errno) {
            if (idx < 1 || idx > im->ncols)
                return nl_error_set(err, NL_EINVAL, "%s: --label %s: the file has %d columns",
                                    c->path, want, im->ncols);
            im->label_col = (int)idx - 1;
        } else {
            int found = -1;
            for (int i = 0; i < c->nf && found < 0; i++)
                if (strcmp(field(c, i), want) == 0)
                    found = i;
            if (found < 0)
                return nl_error_set(err, NL_EINVAL, "%s:%ld: no column named '%s' in the header",
                                    c->path, c->rec_line, want);
            im->label_col = found;
            im->header = 1;
            return 0;
        }
    }
    for (int i = 0; i < c->nf && !im->header; i++)
        if (i != im->label_col && !parse_number(field(c, i), c->sep, &v))
            im->header = 1;
    return 0;
}

static void note_skipped(struct import_csv *im, const struct nl_error *err)
{
    if (im->skipped < MAX_LISTED)
        nl_text_printf(&im->skipped_json, "%s%ld", im->skipped ? "," : "", im->c.rec_line);
    im->skipped++;
    if (im->opts->warn) {
        char msg[NL_ERR_MAX + 16];
        snprintf(msg, sizeof msg, "skipped %s", err->msg);
        im->opts->warn(im->opts->warn_ud, msg);
    }
}

/* Pass 1: checks every row and collects the labels. */
static int first_pass(struct import_csv *im, struct nl_error *err)
{
    struct csv *c = &im->c;
    int rc = rewind_csv(c, err), first = 1;

    if (rc)
        return rc;
    detect_separator(c);
    rc = rewind_csv(c, err);
    while (rc == 0 && (rc = read_record(c, err)) == 1) {
        rc = 0;
        if (first) {
            first = 0;
            rc = choose_columns(im, err);
            if (rc == 0 && im->header) {
                for (int i = 0; i < c->nf; i++) {
                    if (i == im->label_col)
                        continue;
                    nl_text_printf(&im->names_json, "%s", im->names_json.len ? "," : "");
                    nl_text_json_str(&im->names_json, field(c, i));
                }
                continue;
            }
            if (rc)
                break;
        }
        rc = check_row(im, err);
        if (rc && im->opts->skip_bad && nl_import_skippable(rc)) {
            note_skipped(im, err);
            rc = push_row(im, -1, err);
            continue;
        }
        if (rc == 0) {
            char *lab = (char *)field(c, im->label_col);
            /* Labels are compared trimmed. */
            while (*lab == ' ' || *lab == '\t')
                lab++;
            size_t n = strlen(lab);
            while (n > 0 && (lab[n - 1] == ' ' || lab[n - 1] == '\t'))
                lab[--n] = '\0';
            rc = label_id(&im->L, lab, err, c->path);
            if (rc >= 0)
                rc = push_row(im, rc, err);
        }
    }
    if (rc == 0 && first)
        rc = nl_error_set(err, NL_EFORMAT, "%s: empty file, no rows", c->path);
    if (rc == 0 && im->L.n == 0)
        rc = nl_error_set(err, NL_EFORMAT, "%s: no data rows%s", c->path,
                          im->header ? " after the header" : "");
    return rc;
}

/* Pass 2: parses and stores the features of every good row. */
static int second_pass(struct import_csv *im, struct nl_writer *w, const uint8_t *split,
                       struct nl_error *err)
{
    struct csv *c = &im->c;
    const int nfeat = im->ncols - 1;
    float *x = nl_malloc((size_t)nfeat * sizeof *x);
    uint32_t row = 0;
    int rc = x ? rewind_csv(c, err) : nl_error_set(err, NL_ENOMEM, "out of memory");

    if (rc == 0 && im->header)
        rc = read_record(c, err) == 1 ? 0 : nl_error_set(err, NL_EIO, "%s: changed", c->path);
    while (rc == 0 && row < im->nrows && (rc = read_record(c, err)) == 1) {
        int32_t label = im->row_label[row];
        rc = 0;
        if (label >= 0 && c->nf != im->ncols)
            rc = nl_error_set(err, NL_EIO, "%s:%ld: the file changed during the import", c->path,
                              c->rec_line);
        for (int i = 0, k = 0; label >= 0 && rc == 0 && i < c->nf; i++)
            if (i != im->label_col && !parse_number(field(c, i), c->sep, &x[k++]))
                rc = nl_error_set(err, NL_EIO, "%s:%ld: the file changed during the import",
                                  c->path, c->rec_line);
        if (label >= 0 && rc == 0)
            rc = nl_writer_add(w, split[row], label, x, err);
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
    int rc = nl_store_check_name("dataset", name, err);

    if (rc)
        return rc;
    im.c.f = nl_fopen_regular(path, err);
    if (!im.c.f)
        return err->code;
    rc = first_pass(&im, err);
    if (rc == 0) {
        /* Classes in numeric or text order. */
        order = nl_malloc((size_t)im.L.n * sizeof *order);
        rank = nl_malloc((size_t)im.L.n * sizeof *rank);
        split = nl_malloc((size_t)im.nrows + 1);
        if (!order || !rank || !split)
            rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    }
    if (rc == 0) {
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
        memset(split, NL_TRAIN, (size_t)im.nrows + 1);
        rc = nl_split_assign(im.row_label, im.nrows, im.L.n, opts->val_fraction,
                             opts->test_fraction, opts->seed, split, err);
    }
    if (rc == 0) {
        const char *paths[1] = {path};
        nl_import_describe_source(paths, 1, source, sizeof source);
        struct nl_writer_spec spec = {.name = name,
                                      .kind = "csv",
                                      .source = source,
                                      .shape = {im.ncols - 1, 1, 1},
                                      .dtype = NL_F32};
        rc = nl_writer_begin(&w, s, &spec, err);
    }
    if (rc == 0)
        rc = second_pass(&im, w, split, err);
    if (rc == 0) {
        const char **names = nl_malloc((size_t)im.L.n * sizeof *names);
        if (!names)
            rc = nl_error_set(err, NL_ENOMEM, "out of memory");
        for (int i = 0; rc == 0 && i < im.L.n; i++)
            names[i] = order[i].name;
        nl_text_printf(&pre, "{\"reader\":\"csv\",\"separator\":");
        nl_text_json_str(&pre, im.c.sep == '\t' ? "\t" : im.c.sep == ';' ? ";" : ",");
        nl_text_printf(&pre, ",\"header\":%s,\"label_column\":%d,\"labels\":\"%s\",\"features\":%d",
                       im.header ? "true" : "false", im.label_col + 1,
                       im.L.all_int ? "integers" : "strings", im.ncols - 1);
        if (im.header)
            nl_text_printf(&pre, ",\"feature_names\":[%s]", im.names_json.s ? im.names_json.s : "");
        nl_text_printf(&pre,
                       ",\"normalise\":\"per-feature mean/std of train\",\"val_fraction\":%g,"
                       "\"test_fraction\":%g,\"seed\":%llu,\"skipped\":%u,\"skipped_lines\":[%s]}",
                       (double)opts->val_fraction, (double)opts->test_fraction,
                       (unsigned long long)opts->seed, im.skipped,
                       im.skipped_json.s ? im.skipped_json.s : "");
        if (rc == 0)
            rc = nl_writer_commit(w, im.L.n, names, pre.failed ? NULL : pre.s, opts, err);
        else
            nl_writer_abort(w);
        w = NULL;
        nl_free(names);
    }
    nl_writer_abort(w);
    fclose(im.c.f);
    for (int i = 0; i < im.L.n; i++)
        nl_free(im.L.name[i]);
    nl_free(im.L.name);
    nl_free(im.L.slot);
    nl_free(im.row_label);
    nl_free(im.c.buf);
    nl_free(im.c.off);
    nl_free(order);
    nl_free(rank);
    nl_free(split);
    nl_text_free(&im.skipped_json);
    nl_text_free(&im.names_json);
    nl_text_free(&pre);
    return rc;
}
