/* Datasets in the store: existence, listing, removal, loading a whole dataset into memory, and
 * cutting normalised batches out of it for training. */
#include "nnlab/dataset.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/formats/json.h"
#include "nnlab/alloc.h"
#include "store_internal.h"

#define MAX_DIM          65536
#define MAX_SAMPLE_BYTES (1u << 26)

const char *const nl_split_names[NL_NSPLITS] = {"train", "val", "test"};

int nl_dataset_exists(struct nl_store *s, const char *name, struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc = nl_store_prepare(s, &st, "SELECT 1 FROM datasets WHERE name = ?", err);

    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    switch (sqlite3_step(st)) {
    case SQLITE_ROW:
        rc = 1;
        break;
    case SQLITE_DONE:
        rc = 0;
        break;
    default:
        rc = nl_store_db_error(s, err, NULL);
    }
    sqlite3_finalize(st);
    return rc;
}

static void copy_text(char *dst, size_t size, const unsigned char *src)
{
    snprintf(dst, size, "%s", src ? (const char *)src : "");
}

/* Ends a loop over the rows of st: rc as it was, or where it was 0 and the last step did not
 * reach the end (step, not SQLITE_DONE), the store's error while what; st is finalized. */
static int finish_rows(struct nl_store *s, sqlite3_stmt *st, int step, int rc, const char *what,
                       struct nl_error *err)
{
    if (rc == 0 && step != SQLITE_DONE)
        rc = nl_store_db_error(s, err, what);
    sqlite3_finalize(st);
    return rc;
}

/* The samples of dataset id in each split (its table's index, not its samples). */
static int count_splits(struct nl_store *s, sqlite3_int64 id, uint32_t count[NL_NSPLITS],
                        struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc, step;

    memset(count, 0, NL_NSPLITS * sizeof *count);
    rc = nl_store_preparef(s, &st, err, "SELECT split, count(*) FROM samples_%lld GROUP BY split",
                           (long long)id);
    if (rc)
        return rc;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int split = sqlite3_column_int(st, 0);
        sqlite3_int64 n = sqlite3_column_int64(st, 1);
        if (split >= 0 && split < NL_NSPLITS && n >= 0 && n <= UINT32_MAX)
            count[split] = (uint32_t)n;
    }
    return finish_rows(s, st, step, rc, "counting samples", err);
}

int nl_dataset_list(struct nl_store *s, struct nl_dataset_info **out, int *count,
                    struct nl_error *err)
{
    static const char sql[] =
        "SELECT name, kind, source, created, channels, height, width, nclasses, dtype, id, "
        "(SELECT count(*) FROM vocab WHERE dataset = d.id), "
        "CASE WHEN kind = 'csv' AND json_valid(preprocessing) THEN "
        "json_extract(preprocessing, '$.task') END, "
        "CASE WHEN kind = 'csv' AND json_valid(preprocessing) THEN "
        "json_extract(preprocessing, '$.target.column') END, "
        "CASE WHEN kind = 'csv' AND json_valid(preprocessing) THEN "
        "json_extract(preprocessing, '$.embedded.columns') END, "
        "CASE WHEN kind = 'csv' AND json_valid(preprocessing) THEN "
        "json_extract(preprocessing, '$.embedded.rows') END "
        "FROM datasets d WHERE substr(name, 1, 1) <> char(31) ORDER BY name"; /* not staged */
    struct nl_dataset_info *list = NULL;
    int n = 0, rc, step;
    size_t cap = 0;
    sqlite3_stmt *st;

    *out = NULL;
    *count = 0;
    rc = nl_store_prepare(s, &st, sql, err);
    if (rc)
        return rc;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        struct nl_dataset_info *d;
        struct nl_dataset_info *more = nl_grow(list, &cap, (size_t)n + 1, sizeof *list, 8);
        if (!more) {
            rc = nl_error_set(err, NL_ENOMEM, "out of memory listing datasets");
            break;
        }
        list = more;
        d = &list[n++];
        memset(d, 0, sizeof *d);
        copy_text(d->name, sizeof d->name, sqlite3_column_text(st, 0));
        copy_text(d->kind, sizeof d->kind, sqlite3_column_text(st, 1));
        copy_text(d->source, sizeof d->source, sqlite3_column_text(st, 2));
        copy_text(d->created, sizeof d->created, sqlite3_column_text(st, 3));
        d->shape.c = sqlite3_column_int(st, 4);
        d->shape.h = sqlite3_column_int(st, 5);
        d->shape.w = sqlite3_column_int(st, 6);
        d->nclasses = sqlite3_column_int(st, 7);
        rc = count_splits(s, sqlite3_column_int64(st, 9), d->count, err);
        if (rc)
            break;
        d->nvocab = sqlite3_column_int(st, 10);
        const unsigned char *task = sqlite3_column_text(st, 11);
        d->regression = task && strcmp((const char *)task, "regression") == 0;
        if (d->regression)
            copy_text(d->target, sizeof d->target, sqlite3_column_text(st, 12));
        d->embed_columns = sqlite3_column_int(st, 13);
        d->embed_rows = sqlite3_column_int(st, 14);
        d->bytes = ((uint64_t)d->count[0] + d->count[1] + d->count[2]) * nl_shape_size(d->shape) *
                   (sqlite3_column_int(st, 8) == NL_F32 ? 4 : 1);
    }
    rc = finish_rows(s, st, step, rc, "listing datasets", err);
    if (rc) {
        nl_free(list);
        return rc;
    }
    *out = list;
    *count = n;
    return 0;
}

/* Its row and its samples table go in one transaction (a DROP TABLE: see core/store/store.c). */
int nl_dataset_remove(struct nl_store *s, const char *name, struct nl_error *err)
{
    const char *db = nl_store_path(s);
    sqlite3_int64 id = 0;
    sqlite3_stmt *st;
    int rc = nl_store_begin(s, err), step;

    if (rc)
        return rc;
    rc = nl_store_prepare(s, &st, "SELECT id FROM datasets WHERE name = ?", err);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        step = sqlite3_step(st);
        if (step == SQLITE_ROW)
            id = sqlite3_column_int64(st, 0);
        else if (step == SQLITE_DONE)
            rc = nl_error_set(err, NL_ENOENT, "no dataset named '%s' in %s", name, db);
        else
            rc = nl_store_db_error(s, err, "removing a dataset");
        sqlite3_finalize(st);
    }
    if (rc == 0) {
        int dropped = nl_store_drop_dataset(s, id, err);
        if (dropped < 0)
            rc = dropped;
        else if (dropped == 1)
            rc = nl_error_set(err, NL_ENOENT, "no dataset named '%s' in %s", name, db);
    }
    if (rc) {
        nl_store_rollback(s);
        return rc;
    }
    rc = nl_store_commit(s, err);
    if (rc == 0) {
        struct nl_error ignored = {0};
        long long unused;
        (void)nl_store_reclaim(s, &unused, &ignored);
    }
    return rc;
}

/* Frees the n strings of v (which may be NULL) and v. */
static void free_strings(char **v, int n)
{
    for (int k = 0; v && k < n; k++)
        nl_free(v[k]);
    nl_free(v);
}

void nl_dataset_free(struct nl_dataset *d)
{
    if (!d)
        return;
    nl_free(d->name);
    nl_free(d->source);
    nl_free(d->kind);
    nl_free(d->preprocessing);
    free_strings(d->class_names, d->nclasses);
    nl_free(d->mean);
    nl_free(d->std);
    free_strings(d->vocab, d->nvocab);
    nl_free(d->vocab_count);
    for (int k = 0; k < NL_NSPLITS; k++) {
        nl_free(d->split[k].x);
        nl_free(d->split[k].y);
        nl_free(d->split[k].t);
    }
    nl_free(d);
}

static int no_memory(const char *name, struct nl_error *err)
{
    return nl_error_set(err, NL_ENOMEM, "out of memory loading dataset '%s'", name);
}

/* Prepares sql, whose one parameter is the dataset's id, with id bound to it. */
static int prepare_for(struct nl_store *s, sqlite3_stmt **st, const char *sql, sqlite3_int64 id,
                       struct nl_error *err)
{
    int rc = nl_store_prepare(s, st, sql, err);
    if (rc == 0)
        sqlite3_bind_int64(*st, 1, id);
    return rc;
}

static char *dup_column(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return nl_strdup(t ? (const char *)t : "");
}

static float get_le32f(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8;
    float v;

    u |= (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    memcpy(&v, &u, 4);
    return v;
}

/* Reads the datasets row: name, shape, type, class count and statistics. */
static int load_header(struct nl_store *s, const char *name, struct nl_dataset *d,
                       sqlite3_int64 *id, struct nl_error *err)
{
    static const char sql[] = "SELECT id, kind, source, channels, height, width, dtype, nclasses, "
                              "norm_mean, norm_std, preprocessing FROM datasets WHERE name = ?";
    sqlite3_stmt *st;
    int rc = nl_store_prepare(s, &st, sql, err), step;

    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    step = sqlite3_step(st);
    if (step == SQLITE_DONE) {
        const char *db = nl_store_path(s);
        rc = nl_error_set(err, NL_ENOENT, "no dataset named '%s' in %s (see nnlab datasets)", name,
                          db);
        goto out;
    }
    if (step != SQLITE_ROW) {
        rc = nl_store_db_error(s, err, "loading a dataset");
        goto out;
    }
    *id = sqlite3_column_int64(st, 0);
    d->name = nl_strdup(name);
    d->kind = dup_column(st, 1);
    d->source = dup_column(st, 2);
    d->preprocessing = dup_column(st, 10);
    d->shape.c = sqlite3_column_int(st, 3);
    d->shape.h = sqlite3_column_int(st, 4);
    d->shape.w = sqlite3_column_int(st, 5);
    d->dtype = (enum nl_dtype)sqlite3_column_int(st, 6);
    d->nclasses = sqlite3_column_int(st, 7);
    if (!d->name || !d->kind || !d->source || !d->preprocessing) {
        rc = no_memory(name, err);
        goto out;
    }
    if (d->shape.c < 1 || d->shape.h < 1 || d->shape.w < 1 || d->shape.c > MAX_DIM ||
        d->shape.h > MAX_DIM || d->shape.w > MAX_DIM ||
        nl_shape_size(d->shape) * (d->dtype == NL_F32 ? 4 : 1) > MAX_SAMPLE_BYTES ||
        (d->dtype != NL_U8 && d->dtype != NL_F32) || d->nclasses < 1 || d->nclasses > 65536) {
        rc = nl_error_set(err, NL_EFORMAT,
                          "%s: dataset '%s' has an invalid record (shape %d x %d x %d, type %d, "
                          "%d classes); remove it and import it again",
                          nl_store_path(s), name, d->shape.c, d->shape.h, d->shape.w, d->dtype,
                          d->nclasses);
        goto out;
    }
    d->nnorm = d->shape.c;
    d->mean = nl_malloc((size_t)d->nnorm * sizeof *d->mean);
    d->std = nl_malloc((size_t)d->nnorm * sizeof *d->std);
    if (!d->mean || !d->std) {
        rc = no_memory(name, err);
        goto out;
    }
    for (int i = 0; i < 2; i++) {
        const unsigned char *b = sqlite3_column_blob(st, 8 + i);
        int bytes = sqlite3_column_bytes(st, 8 + i);
        float *dst = i ? d->std : d->mean;
        if (!b || bytes != 4 * d->nnorm) {
            rc = nl_error_set(err, NL_EFORMAT,
                              "%s: dataset '%s' has no valid normalisation statistics; remove it "
                              "and import it again",
                              nl_store_path(s), name);
            goto out;
        }
        for (int c = 0; c < d->nnorm; c++)
            dst[c] = get_le32f(b + 4 * c);
    }
    for (int c = 0; c < d->nnorm; c++)
        if (!(d->std[c] > 0))
            d->std[c] = 1;
out:
    sqlite3_finalize(st);
    return rc;
}

static int load_classes(struct nl_store *s, sqlite3_int64 id, struct nl_dataset *d,
                        struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc, step;

    d->class_names = nl_calloc((size_t)d->nclasses, sizeof *d->class_names);
    if (!d->class_names)
        return no_memory(d->name, err);
    rc = prepare_for(s, &st, "SELECT label, name FROM classes WHERE dataset = ?", id, err);
    if (rc)
        return rc;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int label = sqlite3_column_int(st, 0);
        if (label < 0 || label >= d->nclasses || d->class_names[label])
            continue;
        d->class_names[label] = dup_column(st, 1);
        if (!d->class_names[label]) {
            rc = no_memory(d->name, err);
            break;
        }
    }
    rc = finish_rows(s, st, step, rc, "loading class names", err);
    /* A class without a stored name is called by its number. */
    for (int k = 0; k < d->nclasses && rc == 0; k++) {
        char digits[16];
        if (d->class_names[k])
            continue;
        snprintf(digits, sizeof digits, "%d", k);
        d->class_names[k] = nl_strdup(digits);
        if (!d->class_names[k])
            rc = no_memory(d->name, err);
    }
    return rc;
}

/* Sizes each split's arrays from the counts, then fills them in one pass over the samples in
 * idx order (the primary key's order). */
static int load_samples(struct nl_store *s, sqlite3_int64 id, struct nl_dataset *d,
                        struct nl_error *err)
{
    size_t sample = nl_shape_size(d->shape) * (d->dtype == NL_F32 ? sizeof(float) : 1);
    uint32_t fill[NL_NSPLITS] = {0};
    sqlite3_stmt *st;
    int rc, step;

    rc = nl_store_preparef(s, &st, err, "SELECT split, count(*) FROM samples_%lld GROUP BY split",
                           (long long)id);
    if (rc)
        return rc;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int split = sqlite3_column_int(st, 0);
        sqlite3_int64 n = sqlite3_column_int64(st, 1);
        if (split < 0 || split >= NL_NSPLITS || n > UINT32_MAX ||
            (uint64_t)n * sample > (uint64_t)SIZE_MAX / 2) {
            rc = nl_error_set(err, NL_EFORMAT, "%s: dataset '%s' has %lld samples in split %d",
                              nl_store_path(s), d->name, (long long)n, split);
            break;
        }
        d->split[split].n = (uint32_t)n;
    }
    rc = finish_rows(s, st, step, rc, "counting samples", err);
    for (int k = 0; k < NL_NSPLITS && rc == 0; k++) {
        d->split[k].x = nl_malloc((size_t)d->split[k].n * sample);
        d->split[k].y = nl_malloc((size_t)d->split[k].n * sizeof(int32_t));
        if (d->regression)
            d->split[k].t = nl_malloc(((size_t)d->split[k].n + 1) * sizeof(float));
        if (!d->split[k].x || !d->split[k].y || (d->regression && !d->split[k].t))
            rc = nl_error_set(err, NL_ENOMEM, "out of memory loading dataset '%s' (%u samples)",
                              d->name, d->split[k].n);
    }
    if (rc)
        return rc;

    rc = nl_store_preparef(s, &st, err, "SELECT split, label, data FROM samples_%lld ORDER BY idx",
                           (long long)id);
    if (rc)
        return rc;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int split = sqlite3_column_int(st, 0);
        int label = sqlite3_column_int(st, 1);
        const void *data = sqlite3_column_blob(st, 2);
        size_t bytes = (size_t)sqlite3_column_bytes(st, 2);
        if (split >= 0 && split < NL_NSPLITS && fill[split] < d->split[split].n && d->regression) {
            float t;
            memcpy(&t, &label, sizeof t);
            d->split[split].t[fill[split]] = (float)((t - d->target_mean) / d->target_std);
            label = isfinite(t) ? 0 : -1;
        }
        if (split < 0 || split >= NL_NSPLITS || fill[split] >= d->split[split].n || label < 0 ||
            label >= d->nclasses || bytes != sample || !data) {
            rc = nl_error_set(err, NL_EFORMAT,
                              "%s: dataset '%s' has a bad sample (split %d, label %d, %zu bytes "
                              "where %zu were expected); remove it and import it again",
                              nl_store_path(s), d->name, split, label, bytes, sample);
            break;
        }
        memcpy((unsigned char *)d->split[split].x + (size_t)fill[split] * sample, data, sample);
        d->split[split].y[fill[split]++] = label;
    }
    rc = finish_rows(s, st, step, rc, "loading samples", err);
    for (int k = 0; k < NL_NSPLITS && rc == 0; k++)
        if (fill[k] != d->split[k].n)
            rc = nl_error_set(err, NL_EFORMAT, "%s: dataset '%s' changed while it was loaded",
                              nl_store_path(s), d->name);
    return rc;
}

/* The member key of the object obj (which may be NULL) when it has that type; NULL otherwise. */
static const struct nl_json *field(const struct nl_json *obj, const char *key,
                                   enum nl_json_type type)
{
    const struct nl_json *v = nl_json_get(obj, key);
    return v && v->type == type ? v : NULL;
}

/* A regression dataset's task and target statistics, from its preprocessing record; a table's
 * embedded columns, whose inputs are row ids (core/import/csv.c) that no standardisation may touch:
 * their mean is 0 and their std 1, whatever the import's statistics of the ids were; where they
 * are and their table's rows go in embed_first, embed_columns and embed_rows. */
static int load_task(struct nl_dataset *d, struct nl_error *err)
{
    struct nl_json_doc *doc = NULL;

    if (strcmp(d->kind, "csv") != 0 ||
        (!strstr(d->preprocessing, "\"regression\"") && !strstr(d->preprocessing, "\"embedded\"")))
        return 0;
    int rc = nl_json_parse(&doc, d->preprocessing, strlen(d->preprocessing), d->name, err);
    if (rc)
        return rc;
    const struct nl_json *root = nl_json_root(doc), *task = field(root, "task", NL_JSON_STRING);
    const struct nl_json *emb = field(root, "embedded", NL_JSON_OBJECT);
    if (emb) {
        const struct nl_json *first = field(emb, "first", NL_JSON_NUMBER);
        const struct nl_json *n = field(emb, "columns", NL_JSON_NUMBER);
        const struct nl_json *rows = field(emb, "rows", NL_JSON_NUMBER);
        if (!first || !first->is_integer || !n || !n->is_integer || first->integer < 0 ||
            n->integer < 1 || first->integer + n->integer > d->nnorm || !rows ||
            !rows->is_integer || rows->integer < 2 || rows->integer > (1 << 24)) {
            nl_json_free(doc);
            return nl_error_set(err, NL_EFORMAT,
                                "dataset '%s': its embedded columns do not fit its %d inputs; "
                                "remove it and import it again",
                                d->name, d->nnorm);
        }
        for (int64_t k = first->integer; k < first->integer + n->integer; k++) {
            d->mean[k] = 0.0f;
            d->std[k] = 1.0f;
        }
        d->embed_first = (int)first->integer;
        d->embed_columns = (int)n->integer;
        d->embed_rows = (int)rows->integer;
    }
    const struct nl_json *target = field(root, "target", NL_JSON_OBJECT);
    const struct nl_json *mean = field(target, "mean", NL_JSON_NUMBER);
    const struct nl_json *std = field(target, "std", NL_JSON_NUMBER);
    if (task && strcmp(task->string, "regression") == 0) {
        if (!mean || !std || !(std->number > 0) || d->nclasses != 1)
            rc = nl_error_set(err, NL_EFORMAT,
                              "dataset '%s': a regression dataset without valid target "
                              "statistics; remove it and import it again",
                              d->name);
        else {
            d->regression = 1;
            d->target_mean = mean->number;
            d->target_std = std->number;
        }
    }
    nl_json_free(doc);
    return rc;
}

/* A text dataset's vocabulary (the vocab table, ids 0 .. n - 1 without gaps). */
static int load_vocab(struct nl_store *s, sqlite3_int64 id, struct nl_dataset *d,
                      struct nl_error *err)
{
    sqlite3_stmt *st;
    int rc, step, n = 0;

    if (strcmp(d->kind, "text") != 0)
        return 0;
    d->keep_end = strstr(d->preprocessing, "\"keep\":\"end\"") != NULL;
    rc = prepare_for(s, &st, "SELECT count(*) FROM vocab WHERE dataset = ?", id, err);
    if (rc)
        return rc;
    if (sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (n < 2 || n > (1 << 24))
        return nl_error_set(err, NL_EFORMAT,
                            "%s: text dataset '%s' has no valid vocabulary (%d words); remove it "
                            "and import it again",
                            nl_store_path(s), d->name, n);
    d->vocab = nl_calloc((size_t)n, sizeof *d->vocab);
    d->vocab_count = nl_calloc((size_t)n, sizeof *d->vocab_count);
    if (!d->vocab || !d->vocab_count)
        return no_memory(d->name, err);
    d->nvocab = n;
    rc = prepare_for(s, &st, "SELECT id, word, count FROM vocab WHERE dataset = ? ORDER BY id", id,
                     err);
    if (rc)
        return rc;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int k = sqlite3_column_int(st, 0);
        if (k < 0 || k >= n || d->vocab[k]) {
            rc = nl_error_set(err, NL_EFORMAT, "%s: text dataset '%s' has a bad vocabulary id %d",
                              nl_store_path(s), d->name, k);
            break;
        }
        d->vocab[k] = dup_column(st, 1);
        d->vocab_count[k] = sqlite3_column_int64(st, 2);
        if (!d->vocab[k]) {
            rc = no_memory(d->name, err);
            break;
        }
    }
    rc = finish_rows(s, st, step, rc, "loading the vocabulary", err);
    for (int k = 0; k < n && rc == 0; k++)
        if (!d->vocab[k])
            rc = nl_error_set(err, NL_EFORMAT, "%s: text dataset '%s' lacks vocabulary id %d",
                              nl_store_path(s), d->name, k);
    /* Every token id names a word of the vocabulary. */
    for (int k = 0; k < NL_NSPLITS && rc == 0 && d->dtype == NL_F32; k++) {
        const float *x = d->split[k].x;
        size_t m = (size_t)d->split[k].n * nl_shape_size(d->shape);
        for (size_t i = 0; i < m; i++) {
            if (!(x[i] >= 0 && x[i] < (float)n && x[i] == (float)(int)x[i])) {
                rc = nl_error_set(err, NL_EFORMAT,
                                  "%s: text dataset '%s' has a token id %g outside its "
                                  "vocabulary of %d; remove it and import it again",
                                  nl_store_path(s), d->name, (double)x[i], n);
                break;
            }
        }
    }
    return rc;
}

int nl_dataset_load(struct nl_store *s, const char *name, struct nl_dataset **out,
                    struct nl_error *err)
{
    struct nl_dataset *d = nl_calloc(1, sizeof *d);
    int own = sqlite3_get_autocommit(nl_store_sqlite(s));
    sqlite3_int64 id = 0;
    int rc;

    *out = NULL;
    if (!d)
        return no_memory(name, err);
    /* One read transaction (unless the caller has one open): the header, counts and samples
     * come from the same snapshot. */
    rc = own ? nl_store_exec(s, "BEGIN", err) : 0;
    if (rc) {
        nl_free(d);
        return rc;
    }
    rc = load_header(s, name, d, &id, err);
    if (rc == 0)
        rc = load_task(d, err);
    if (rc == 0)
        rc = load_classes(s, id, d, err);
    if (rc == 0)
        rc = load_samples(s, id, d, err);
    if (rc == 0)
        rc = load_vocab(s, id, d, err);
    if (own)
        nl_store_rollback(s);
    if (rc) {
        nl_dataset_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void nl_dataset_batch(const struct nl_dataset *d, enum nl_split split, const uint32_t *idx, int n,
                      float *x, int32_t *y)
{
    size_t plane = (size_t)d->shape.h * d->shape.w, sample = (size_t)d->shape.c * plane;

    assert(split >= 0 && split < NL_NSPLITS);
    for (int i = 0; i < n; i++) {
        uint32_t j = idx[i];
        float *dst = x + (size_t)i * sample;

        assert(j < d->split[split].n);
        if (y)
            y[i] = d->split[split].y[j];
        if (d->dtype == NL_U8) {
            const uint8_t *src = (const uint8_t *)d->split[split].x + (size_t)j * sample;
            for (int c = 0; c < d->shape.c; c++) {
                const float mean = d->mean[c], std = d->std[c];
                for (size_t p = 0; p < plane; p++)
                    dst[c * plane + p] = nl_normalise_u8((float)src[c * plane + p], mean, std);
            }
        } else {
            const float *src = (const float *)d->split[split].x + (size_t)j * sample;
            for (int c = 0; c < d->shape.c; c++) {
                const float mean = d->mean[c], std = d->std[c];
                for (size_t p = 0; p < plane; p++)
                    dst[c * plane + p] = (src[c * plane + p] - mean) / std;
            }
        }
    }
}

void nl_dataset_targets(const struct nl_dataset *d, enum nl_split split, const uint32_t *idx, int n,
                        float *t)
{
    assert(split >= 0 && split < NL_NSPLITS && d->split[split].t);
    for (int i = 0; i < n; i++) {
        assert(idx[i] < d->split[split].n);
        t[i] = d->split[split].t[idx[i]];
    }
}

int nl_dataset_sample_from_values(const struct nl_dataset *d, const float *v, int n, float *x,
                                  struct nl_error *err)
{
    const size_t size = nl_shape_size(d->shape);
    if (d->dtype != NL_F32)
        return nl_error_set(err, NL_EINVAL,
                            "dataset '%s' holds images: give it an image, not a row of values",
                            d->name);
    if (n < 0 || (size_t)n != size)
        return nl_error_set(err, NL_EINVAL, "dataset '%s' has %zu features; the row has %d",
                            d->name, size, n);
    const size_t plane = (size_t)d->shape.h * d->shape.w;
    for (int c = 0; c < d->shape.c; c++)
        for (size_t p = 0; p < plane; p++)
            x[c * plane + p] = (v[c * plane + p] - d->mean[c]) / d->std[c];
    return 0;
}

int nl_dataset_info(struct nl_store *s, const char *name, struct nl_dataset_info *info,
                    struct nl_error *err)
{
    struct nl_dataset_info *list;
    int n, found = 0;
    int rc = nl_dataset_list(s, &list, &n, err);

    if (rc < 0)
        return rc;
    for (int i = 0; i < n && !found; i++) {
        if (strcmp(list[i].name, name) == 0) {
            *info = list[i];
            found = 1;
        }
    }
    nl_free(list);
    if (!found)
        return nl_error_set(err, NL_ENOENT, "no dataset named '%s' (see nnlab datasets)", name);
    return 0;
}
