/* Text datasets: the tokenizer, the vocabulary, and the two importers of text (a folder of class
 * folders of .txt files, and a CSV/TSV file with a text column).
 *
 * Words. A document must be valid UTF-8 (no overlong forms, no surrogates); a file that is not
 * is named with the offset of its first bad byte and fails the import, or is skipped with
 * --skip-bad. A word is a maximal run of letters and digits: ASCII letters and digits, the
 * letters of Latin-1 (U+00AA, U+00B5, U+00BA, U+00C0 to U+00FF but for x and the division sign),
 * and every code point from U+0100 up except those of the blocks of punctuation, symbols,
 * spaces, private use and specials (General Punctuation, currency, arrows, mathematical and
 * technical symbols, box drawing, dingbats, CJK symbols and punctuation, fullwidth punctuation,
 * emoji...) and the punctuation marks of Greek, Cyrillic, Armenian, Hebrew, Arabic and
 * Devanagari; combining marks (U+0300 to U+036F) stay inside a word. Everything else separates
 * words and is dropped. Words are lower-cased one code point to one, for Latin (ASCII, Latin-1,
 * Extended-A, the regular pairs of Extended-B, Extended Additional, fullwidth), Greek (with the
 * polytonic capitals of Greek Extended; final sigma is kept as it is), Cyrillic and Armenian;
 * capital I with dot becomes i. No Unicode normalisation: a composed and a decomposed spelling are
 * different words. A word longer than WORD_MAX bytes is cut to its first WORD_MAX bytes at a
 * character boundary.
 *
 * Vocabulary. Words are counted over the train split only; the --vocab K most frequent (ties in
 * byte order) get ids 2 .. K+1 by falling count; id 0 is padding and id 1 every other word (see
 * the vocab table in core/store/store.c). Coverage, stored in the preprocessing record, is the
 * share of the train split's words that are in the vocabulary.
 *
 * Samples. A document becomes L = --max-len token ids, its words first and padding after; a
 * longer document keeps its first L words, or its last L with --keep end. Ids are stored as
 * float32 samples of shape (1, 1, L) with mean 0 and std 1 (see include/nnlab/dataset.h).
 *
 * Layouts. A folder holds class folders of .txt files, either directly (DIR/CLASS/NAME.txt, all
 * train, with --val and --test carving stratified splits) or under train/, val/ and test/ (the
 * IMDB layout, DIR/train/pos/NAME.txt). Classes are the class folders of train/ in byte order; a
 * folder of train/ with no counterpart in an existing test/ (IMDB's train/unsup, unlabelled) is
 * left out with a warning. Files of other names, and loose files beside the class folders
 * (IMDB's urls_pos.txt, labeledBow.feat), are ignored.
 * A CSV file (separator: the most frequent of comma, semicolon and tab in the first line; a
 * .tsv file is tab-separated) has quoted fields as core/import/csv.c reads them; --text names the
 * text column and --label the label column (default: the last column that is not the text), by
 * header name or 1-based index; the first row is a header when either is given by name. Labels
 * that are all integers become classes in numeric order, others in byte order.
 *
 * Both importers read their source twice: the first pass checks every document and counts the
 * train words (memory: the distinct words), the second writes the samples through the staged
 * writer of core/import/import.c, so the import is one atomic publish and memory does not grow with
 * the number of documents. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "import_internal.h"
#include "nnlab/alloc.h"
#include "nnlab/text.h"

#define WORD_MAX        256        /* bytes of one word */
#define DOC_MAX         (64 << 20) /* bytes of one document */
#define VOCAB_DEFAULT   20000
#define MAXLEN_DEFAULT  200
#define VOCAB_LIMIT     (1 << 22)
#define MAXLEN_LIMIT    65536
#define MAX_SKIP_LISTED 20
#define MAX_CLASSES     65536
#define MAX_RECORD      (64u << 20)

/* ---- characters ---------------------------------------------------------------------------- */

/* The length (1 to 4) of the valid UTF-8 sequence at p (n bytes left) and its code point, or 0
 * when none starts there. */
static int utf8_decode(const unsigned char *p, size_t n, uint32_t *cp)
{
    uint32_t c;
    int len;

    if (p[0] < 0x80) {
        *cp = p[0];
        return 1;
    }
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        c = p[0] & 0x1fu;
        len = 2;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        c = p[0] & 0x0fu;
        len = 3;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        c = p[0] & 0x07u;
        len = 4;
    } else {
        return 0;
    }
    if ((size_t)len > n)
        return 0;
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (p[i] & 0x3fu);
    }
    if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10ffff)) ||
        (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

static int utf8_encode(uint32_t c, char *out)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xc0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | c >> 12);
        out[1] = (char)(0x80 | (c >> 6 & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | c >> 18);
    out[1] = (char)(0x80 | (c >> 12 & 0x3f));
    out[2] = (char)(0x80 | (c >> 6 & 0x3f));
    out[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* Ranges from U+0100 up that are not letters or digits (see the top of the file). */
static const uint32_t separators[][2] = {
    {0x02b9, 0x02ff}, /* spacing modifiers */
    {0x0375, 0x0375},    {0x037e, 0x037e}, {0x0384, 0x0385}, {0x0387, 0x0387}, /* Greek */
    {0x0482, 0x0482},    {0x055a, 0x055f}, {0x0589, 0x058a}, {0x05be, 0x05be},   {0x05c0, 0x05c0},
    {0x05c3, 0x05c3},    {0x05c6, 0x05c6}, {0x05f3, 0x05f4}, {0x0600, 0x060f},   {0x061b, 0x061f},
    {0x066a, 0x066d},    {0x06d4, 0x06d4}, {0x0964, 0x0965}, {0x0e3f, 0x0e3f},   {0x0e4f, 0x0e4f},
    {0x0e5a, 0x0e5b},    {0x1680, 0x1680}, {0x2000, 0x2bff}, /* punctuation .. symbols */
    {0x2e00, 0x2e7f},    {0x3000, 0x3004}, {0x3008, 0x3020}, {0x3030, 0x3030},   {0x303d, 0x303f},
    {0x30fb, 0x30fb},    {0xd800, 0xf8ff}, /* surrogates, private use */
    {0xfd3e, 0xfd3f},    {0xfe00, 0xfe6f}, {0xfeff, 0xfeff}, {0xff00, 0xff0f},   {0xff1a, 0xff20},
    {0xff3b, 0xff40},    {0xff5b, 0xff65}, {0xffe0, 0xffff}, {0x1f000, 0x1faff}, /* emoji */
    {0xe0000, 0x10ffff},                                                         /* tags, private */
};

static int is_word_char(uint32_t c)
{
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (c < 0x100)
        return c == 0xaa || c == 0xb5 || c == 0xba || (c >= 0xc0 && c != 0xd7 && c != 0xf7);
    for (size_t i = 0; i < sizeof separators / sizeof separators[0]; i++)
        if (c >= separators[i][0] && c <= separators[i][1])
            return 0;
    return 1;
}

static uint32_t to_lower(uint32_t c)
{
    if (c < 0x80)
        return c >= 'A' && c <= 'Z' ? c + 32 : c;
    if (c >= 0xc0 && c <= 0xde && c != 0xd7)
        return c + 32;
    if (c == 0x130)
        return 'i';
    if (c == 0x178)
        return 0xff;
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177) || (c >= 0x1de && c <= 0x1ef) ||
        (c >= 0x1f8 && c <= 0x21f) || (c >= 0x222 && c <= 0x233) || (c >= 0x3d8 && c <= 0x3ef) ||
        (c >= 0x460 && c <= 0x481) || (c >= 0x48a && c <= 0x4bf) || (c >= 0x4d0 && c <= 0x52f) ||
        (c >= 0x1e00 && c <= 0x1e95) || (c >= 0x1ea0 && c <= 0x1eff))
        return c % 2 == 0 ? c + 1 : c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e) || (c >= 0x1cd && c <= 0x1dc) ||
        (c >= 0x4c1 && c <= 0x4ce))
        return c % 2 == 1 ? c + 1 : c;
    if ((c >= 0x391 && c <= 0x3ab && c != 0x3a2) || (c >= 0x410 && c <= 0x42f) ||
        (c >= 0xff21 && c <= 0xff3a))
        return c + 32;
    if (c == 0x386)
        return 0x3ac;
    if (c >= 0x388 && c <= 0x38a)
        return c + 37;
    if (c == 0x38c)
        return 0x3cc;
    if (c == 0x38e || c == 0x38f)
        return c + 63;
    if (c >= 0x400 && c <= 0x40f)
        return c + 80;
    if (c == 0x4c0)
        return 0x4cf;
    if (c >= 0x531 && c <= 0x556)
        return c + 48;
    if (c == 0x1e9e)
        return 0xdf;
    /* Greek Extended (polytonic): capitals sit 8 above their small letters. */
    if ((c >= 0x1f08 && c <= 0x1f0f) || (c >= 0x1f18 && c <= 0x1f1d) ||
        (c >= 0x1f28 && c <= 0x1f2f) || (c >= 0x1f38 && c <= 0x1f3f) ||
        (c >= 0x1f48 && c <= 0x1f4d) || (c >= 0x1f68 && c <= 0x1f6f) ||
        (c >= 0x1f59 && c <= 0x1f5f && c % 2 == 1))
        return c - 8;
    return c;
}

/* 0 when s (len bytes) is valid UTF-8 (a NUL byte included), else the 1-based offset of the
 * first bad byte. */
static size_t first_bad(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    while (i < len) {
        uint32_t c;
        int k = utf8_decode(p + i, len - i, &c);
        if (k == 0)
            return i + 1;
        i += (size_t)k;
    }
    return 0;
}

size_t nl_text_words(const char *s, size_t len, void (*word)(void *ud, const char *w, size_t n),
                     void *ud)
{
    const unsigned char *p = (const unsigned char *)s;
    char buf[WORD_MAX + 4];
    size_t i = 0, n = 0;

    while (i < len) {
        uint32_t c;
        int k = utf8_decode(p + i, len - i, &c);
        if (k == 0)
            return i + 1;
        i += (size_t)k;
        if (is_word_char(c)) {
            char enc[4];
            int m = utf8_encode(to_lower(c), enc);
            if (n + (size_t)m <= WORD_MAX) {
                memcpy(buf + n, enc, (size_t)m);
                n += (size_t)m;
            }
            continue;
        }
        if (n) {
            buf[n] = '\0';
            word(ud, buf, n);
            n = 0;
        }
    }
    if (n) {
        buf[n] = '\0';
        word(ud, buf, n);
    }
    return 0;
}

/* ---- the vocabulary: words to counts and ids ---------------------------------------------- */

struct entry {
    char *word;
    int64_t count;
    int id; /* 0 until the vocabulary is chosen; then 2.. for the kept words, 1 for the others */
};

struct vocab {
    struct entry *e; /* (cap), open addressing; word NULL: empty */
    size_t cap, n;
    int failed; /* out of memory */
};

static uint64_t hash_word(const char *w, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)w[i]) * 1099511628211ull;
    return h;
}

static struct entry *vocab_find(const struct vocab *v, const char *w, size_t n)
{
    if (!v->cap)
        return NULL;
    for (size_t i = hash_word(w, n) & (v->cap - 1);; i = (i + 1) & (v->cap - 1)) {
        struct entry *e = &v->e[i];
        if (!e->word)
            return e;
        if (strncmp(e->word, w, n) == 0 && e->word[n] == '\0')
            return e;
    }
}

static int vocab_grow(struct vocab *v)
{
    size_t cap = v->cap ? 2 * v->cap : 1024;
    struct entry *e = nl_calloc(cap, sizeof *e);

    if (!e)
        return -1;
    for (size_t i = 0; i < v->cap; i++) {
        if (!v->e[i].word)
            continue;
        size_t j = hash_word(v->e[i].word, strlen(v->e[i].word)) & (cap - 1);
        while (e[j].word)
            j = (j + 1) & (cap - 1);
        e[j] = v->e[i];
    }
    nl_free(v->e);
    v->e = e;
    v->cap = cap;
    return 0;
}

/* The entry of w, added with count 0 when new; NULL when out of memory. */
static struct entry *vocab_add(struct vocab *v, const char *w, size_t n)
{
    struct entry *e;

    if (4 * (v->n + 1) > 3 * v->cap && vocab_grow(v) < 0)
        return NULL;
    e = vocab_find(v, w, n);
    if (!e->word) {
        e->word = nl_malloc(n + 1);
        if (!e->word)
            return NULL;
        memcpy(e->word, w, n);
        e->word[n] = '\0';
        v->n++;
    }
    return e;
}

static void vocab_free(struct vocab *v)
{
    for (size_t i = 0; i < v->cap; i++)
        nl_free(v->e[i].word);
    nl_free(v->e);
    memset(v, 0, sizeof *v);
}

static void count_word(void *ud, const char *w, size_t n)
{
    struct vocab *v = ud;
    struct entry *e = v->failed ? NULL : vocab_add(v, w, n);

    if (e)
        e->count++;
    else
        v->failed = 1;
}

static int cmp_entries(const void *a, const void *b)
{
    const struct entry *x = *(const struct entry *const *)a, *y = *(const struct entry *const *)b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return strcmp(x->word, y->word);
}

/* Ids for the k most frequent words; the others (and the rest of the table) get id 1. *kept
 * receives them in id order (2..), which the caller frees; *covered their total count. */
static int vocab_choose(struct vocab *v, int k, struct entry ***kept, int *nkept, int64_t *covered)
{
    struct entry **all = nl_malloc((v->n ? v->n : 1) * sizeof *all);
    size_t n = 0;

    if (!all)
        return -1;
    for (size_t i = 0; i < v->cap; i++)
        if (v->e[i].word)
            all[n++] = &v->e[i];
    qsort(all, n, sizeof *all, cmp_entries);
    *covered = 0;
    for (size_t i = 0; i < n; i++) {
        all[i]->id = i < (size_t)k ? (int)i + 2 : 1;
        if (i < (size_t)k)
            *covered += all[i]->count;
    }
    *kept = all;
    *nkept = n < (size_t)k ? (int)n : k;
    return 0;
}

/* ---- documents to token ids ---------------------------------------------------------------- */

struct tokens {
    const struct vocab *v;
    int32_t *ids; /* every word's id, grown */
    size_t n, cap;
    int unknown;
    int failed;
};

static void add_token(void *ud, const char *w, size_t n)
{
    struct tokens *t = ud;
    const struct entry *e = vocab_find(t->v, w, n);
    int id = e && e->word ? e->id : 1;

    if (t->failed)
        return;
    int32_t *p = nl_grow(t->ids, &t->cap, t->n + 1, sizeof *p, 1024);
    if (!p) {
        t->failed = 1;
        return;
    }
    t->ids = p;
    if (id < 2)
        id = 1;
    t->unknown += id == 1;
    t->ids[t->n++] = id;
}

/* x (L) = the ids of t cut as keep_end says, then padding. Returns whether it was cut. */
static int place_tokens(const struct tokens *t, int len, int keep_end, float *x)
{
    size_t from = t->n > (size_t)len && keep_end ? t->n - (size_t)len : 0;

    for (int i = 0; i < len; i++)
        x[i] = from + (size_t)i < t->n ? (float)t->ids[from + (size_t)i] : 0.0f;
    return t->n > (size_t)len;
}

/* ---- shared import state ------------------------------------------------------------------- */

struct doc {
    char *path; /* the file, or NULL for a CSV row */
    long line;  /* CSV: the line the row starts on */
    int32_t label;
    uint8_t split;
    uint8_t bad; /* skipped */
};

struct textimp {
    const struct nl_import_opts *opts;
    const char *source; /* the file or folder, for messages */
    struct doc *docs;
    uint32_t ndocs;
    size_t cap;
    int nclasses;
    char **class_names;
    struct vocab vocab;
    int64_t train_words;
    uint32_t skipped, truncated, empty;
    struct nl_text skipped_json;
    char *buf; /* one document */
    size_t buf_len, buf_cap;
    uint64_t progress_total, progress_done;
};

static void textimp_free(struct textimp *t)
{
    for (uint32_t i = 0; i < t->ndocs; i++)
        nl_free(t->docs[i].path);
    nl_free(t->docs);
    if (t->class_names)
        for (int k = 0; k < t->nclasses; k++)
            nl_free(t->class_names[k]);
    nl_free(t->class_names);
    vocab_free(&t->vocab);
    nl_text_free(&t->skipped_json);
    nl_free(t->buf);
}

static int oom(struct nl_error *err)
{
    return nl_error_set(err, NL_ENOMEM, "out of memory");
}

static void warn(const struct textimp *t, const char *msg)
{
    if (t->opts->warn)
        t->opts->warn(t->opts->warn_ud, msg);
}

static int push_doc(struct textimp *t, char *path, long line, int32_t label, int split,
                    struct nl_error *err)
{
    if (t->ndocs == UINT32_MAX - 1) {
        nl_free(path);
        return nl_error_set(err, NL_EFORMAT, "%s: too many documents", t->source);
    }
    struct doc *p = nl_grow(t->docs, &t->cap, (size_t)t->ndocs + 1, sizeof *p, 1024);
    if (!p) {
        nl_free(path);
        return oom(err);
    }
    t->docs = p;
    t->docs[t->ndocs++] = (struct doc){path, line, label, (uint8_t)split, 0};
    return 0;
}

static int progress(struct textimp *t, struct nl_error *err)
{
    t->progress_done++;
    if (t->opts->progress && (t->progress_done % 256 == 0 || t->progress_done == t->progress_total))
        if (t->opts->progress(t->opts->progress_ud, t->progress_done, t->progress_total))
            return nl_error_set(err, NL_ECANCELED, "%s: import interrupted", t->source);
    return 0;
}

/* Checks the document in t->buf (whose name is what); counts its words when it is in train.
 * A bad one is skipped (with --skip-bad) or fails the import. */
static int first_pass_doc(struct textimp *t, struct doc *d, const char *what, struct nl_error *err)
{
    size_t bad = first_bad(t->buf, t->buf_len);

    if (bad) {
        nl_error_set(err, NL_EFORMAT, "%s: not valid UTF-8 (byte %zu)", what, bad);
    } else if (d->split == NL_TRAIN) {
        struct vocab *v = &t->vocab;
        nl_text_words(t->buf, t->buf_len, count_word, v);
        if (v->failed)
            return oom(err);
        return 0;
    } else {
        return 0;
    }
    if (!t->opts->skip_bad)
        return err->code;
    if (t->skipped < MAX_SKIP_LISTED) {
        nl_text_printf(&t->skipped_json, "%s", t->skipped ? "," : "");
        nl_text_json_str(&t->skipped_json, what);
    }
    t->skipped++;
    d->bad = 1;
    char msg[NL_ERR_MAX + 16];
    snprintf(msg, sizeof msg, "skipped %s", err->msg);
    warn(t, msg);
    err->code = 0;
    err->msg[0] = '\0';
    return 0;
}

/* Writes the vocabulary and the preprocessing record, after the samples. */
static int finish(struct textimp *t, struct nl_writer *w, struct entry **kept, int nkept,
                  int64_t covered, const char *reader, struct nl_error *err)
{
    struct nl_text pre = {0};
    int rc = nl_writer_add_word(w, 0, "<pad>", 0, err);

    if (rc == 0)
        rc = nl_writer_add_word(w, 1, "<unk>", t->train_words - covered, err);
    for (int i = 0; i < nkept && rc == 0; i++)
        rc = nl_writer_add_word(w, i + 2, kept[i]->word, kept[i]->count, err);
    if (rc) {
        nl_writer_abort(w);
        return rc;
    }
    nl_text_printf(
        &pre,
        "{\"reader\":\"%s\",\"max_len\":%d,\"keep\":\"%s\",\"vocab\":%d,"
        "\"words\":%zu,\"train_words\":%lld,\"coverage\":%.6f,\"truncated\":%u,"
        "\"empty\":%u,\"lowercase\":\"simple: Latin, Greek, Cyrillic, Armenian\"",
        reader, t->opts->max_len ? t->opts->max_len : MAXLEN_DEFAULT,
        t->opts->keep_end ? "end" : "start", nkept + 2, t->vocab.n, (long long)t->train_words,
        t->train_words ? (double)covered / (double)t->train_words : 0.0, t->truncated, t->empty);
    if (t->opts->val_fraction > 0 || t->opts->test_fraction > 0)
        nl_text_printf(&pre, ",\"val_fraction\":%g,\"test_fraction\":%g,\"seed\":%llu",
                       (double)t->opts->val_fraction, (double)t->opts->test_fraction,
                       (unsigned long long)t->opts->seed);
    if (t->skipped)
        nl_text_printf(&pre, ",\"skipped\":%u,\"skipped_files\":[%s]", t->skipped,
                       t->skipped_json.s ? t->skipped_json.s : "");
    nl_text_printf(&pre, "}");
    struct nl_import_opts o = *t->opts;
    o.normalize = NL_NORM_NONE;
    rc = nl_writer_commit(w, t->nclasses, (const char *const *)t->class_names,
                          pre.failed ? NULL : pre.s, &o, err);
    nl_text_free(&pre);
    return rc;
}

/* Carves the --val and --test splits out of train (stratified, seeded). */
static int carve(struct textimp *t, int has_val, int has_test, struct nl_error *err)
{
    float val = has_val ? 0 : t->opts->val_fraction, test = has_test ? 0 : t->opts->test_fraction;
    int32_t *labels;
    uint8_t *split;
    int rc;

    if (val <= 0 && test <= 0)
        return 0;
    labels = nl_malloc((size_t)t->ndocs * sizeof *labels + 1);
    split = nl_malloc((size_t)t->ndocs + 1);
    if (!labels || !split) {
        nl_free(labels);
        nl_free(split);
        return oom(err);
    }
    for (uint32_t i = 0; i < t->ndocs; i++) {
        labels[i] = t->docs[i].split == NL_TRAIN ? t->docs[i].label : -1;
        split[i] = t->docs[i].split;
    }
    rc = nl_split_assign(labels, t->ndocs, t->nclasses, val, test, t->opts->seed, split, err);
    for (uint32_t i = 0; i < t->ndocs && rc == 0; i++)
        t->docs[i].split = split[i];
    nl_free(labels);
    nl_free(split);
    return rc;
}

static int check_text_opts(const struct nl_import_opts *o, const char *path, struct nl_error *err)
{
    if (o->vocab < 0 || o->vocab > VOCAB_LIMIT)
        return nl_error_set(err, NL_EINVAL, "%s: --vocab %d: want 1 to %d words", path, o->vocab,
                            VOCAB_LIMIT);
    if (o->max_len < 0 || o->max_len > MAXLEN_LIMIT)
        return nl_error_set(err, NL_EINVAL, "%s: --max-len %d: want 1 to %d tokens", path,
                            o->max_len, MAXLEN_LIMIT);
    return 0;
}

/* The vocabulary, the writer and the second pass, shared by both importers: next_doc fills
 * t->buf with document i. */
static int write_all(struct textimp *t, struct nl_store *s, const char *name, const char *kind,
                     int (*next_doc)(struct textimp *t, void *src, uint32_t i,
                                     struct nl_error *err),
                     void *src, struct nl_error *err)
{
    const int len = t->opts->max_len ? t->opts->max_len : MAXLEN_DEFAULT;
    const int k = t->opts->vocab ? t->opts->vocab : VOCAB_DEFAULT;
    struct nl_writer_spec spec = {
        .name = name, .kind = "text", .shape = {1, 1, len}, .dtype = NL_F32};
    struct tokens tok = {.v = &t->vocab};
    struct entry **kept = NULL;
    struct nl_writer *w = NULL;
    char source[4096];
    int64_t covered = 0;
    int nkept = 0, rc;
    float *x = nl_malloc((size_t)len * sizeof *x);

    if (!x)
        return oom(err);
    for (size_t i = 0; i < t->vocab.cap; i++)
        if (t->vocab.e[i].word)
            t->train_words += t->vocab.e[i].count;
    if (vocab_choose(&t->vocab, k, &kept, &nkept, &covered) < 0) {
        nl_free(x);
        return oom(err);
    }
    nl_import_describe_source(&t->source, 1, source, sizeof source);
    spec.source = source;
    rc = nl_writer_begin(&w, s, &spec, err);
    for (uint32_t i = 0; i < t->ndocs && rc == 0; i++) {
        struct doc *d = &t->docs[i];
        if (d->bad)
            continue;
        rc = next_doc(t, src, i, err);
        if (rc)
            break;
        tok.n = 0;
        tok.unknown = 0;
        nl_text_words(t->buf, t->buf_len, add_token, &tok);
        if (tok.failed) {
            rc = oom(err);
            break;
        }
        t->truncated += (uint32_t)place_tokens(&tok, len, t->opts->keep_end, x);
        t->empty += tok.n == 0;
        rc = nl_writer_add(w, (enum nl_split)d->split, d->label, x, err);
        if (rc == 0)
            rc = progress(t, err);
    }
    if (rc == 0)
        rc = finish(t, w, kept, nkept, covered, kind, err);
    else
        nl_writer_abort(w);
    nl_free(kept);
    nl_free(tok.ids);
    nl_free(x);
    return rc;
}

/* ---- a folder of class folders of .txt files ----------------------------------------------- */

static int ends_with_txt(const char *s)
{
    size_t n = strlen(s);
    return n > 4 && strcasecmp(s + n - 4, ".txt") == 0;
}

/* out = a/b; -1 when it does not fit. */
static int join(char *out, size_t size, const char *a, const char *b)
{
    int n = snprintf(out, size, "%s/%s", a, b);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The names in dir (sorted) that are folders (want_dirs) or .txt files; *out freed by the
 * caller, with each name. */
static int list_dir(const char *dir, int want_dirs, char ***out, int *count, struct nl_error *err)
{
    DIR *dp = opendir(dir);
    struct dirent *de;
    char **names = NULL, path[PATH_MAX];
    size_t cap = 0;
    int n = 0;

    *out = NULL;
    *count = 0;
    if (!dp)
        return nl_error_set(err, errno == ENOENT ? NL_ENOENT : NL_EIO, "%s: cannot open: %s", dir,
                            strerror(errno));
    while ((de = readdir(dp))) {
        if (de->d_name[0] == '.')
            continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path)
            continue;
        if (want_dirs ? !is_dir(path) : (!ends_with_txt(de->d_name) || is_dir(path)))
            continue;
        char **p = nl_grow(names, &cap, (size_t)n + 1, sizeof *p, 64);
        if (!p)
            break;
        names = p;
        names[n] = nl_strdup(de->d_name);
        if (!names[n])
            break;
        n++;
    }
    closedir(dp);
    if (de) {
        for (int i = 0; i < n; i++)
            nl_free(names[i]);
        nl_free(names);
        return oom(err);
    }
    if (n)
        qsort(names, (size_t)n, sizeof *names, cmp_str);
    *out = names;
    *count = n;
    return 0;
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        nl_free(names[i]);
    nl_free(names);
}

/* Whether dir holds a file an image import would read (.png, .jpg, .jpeg). */
static int has_image_file(const char *dir)
{
    DIR *dp = opendir(dir);
    struct dirent *de;
    int found = 0;

    if (!dp)
        return 0;
    while (!found && (de = readdir(dp))) {
        size_t n = strlen(de->d_name);
        found = (n > 4 && (strcasecmp(de->d_name + n - 4, ".png") == 0 ||
                           strcasecmp(de->d_name + n - 4, ".jpg") == 0)) ||
                (n > 5 && strcasecmp(de->d_name + n - 5, ".jpeg") == 0);
    }
    closedir(dp);
    return found;
}

int nl_text_dir_probe(const char *dir)
{
    char base[PATH_MAX], path[PATH_MAX];
    char **classes = NULL, **files = NULL;
    int nc = 0, nf = 0, found = 0;
    struct nl_error ignored = {0};

    if (strlen(dir) + 64 > sizeof base || join(base, sizeof base, dir, "train") < 0)
        return 0;
    if (!is_dir(base))
        memcpy(base, dir, strlen(dir) + 1);
    if (list_dir(base, 1, &classes, &nc, &ignored) < 0)
        return 0;
    /* Text: .txt files in the class folders, and no image among them. */
    for (int i = 0; i < nc && found >= 0; i++) {
        if (join(path, sizeof path, base, classes[i]) < 0)
            continue;
        if (has_image_file(path)) {
            found = -1;
            break;
        }
        if (list_dir(path, 0, &files, &nf, &ignored) == 0 && nf > 0)
            found = 1;
        free_names(files, nf);
    }
    free_names(classes, nc);
    return found > 0;
}

/* Adds the .txt files of dir's class folders as documents of split; classes holds the class
 * names in label order. */
static int add_split(struct textimp *t, const char *dir, int split, struct nl_error *err)
{
    char path[PATH_MAX];
    int rc = 0;

    for (int k = 0; k < t->nclasses && rc == 0; k++) {
        char **files;
        int nf;
        if (join(path, sizeof path, dir, t->class_names[k]) < 0)
            continue;
        if (!is_dir(path))
            continue;
        rc = list_dir(path, 0, &files, &nf, err);
        for (int i = 0; i < nf && rc == 0; i++) {
            char *p = nl_malloc(strlen(path) + strlen(files[i]) + 2);
            if (!p) {
                rc = oom(err);
                break;
            }
            sprintf(p, "%s/%s", path, files[i]);
            rc = push_doc(t, p, 0, k, split, err);
        }
        free_names(files, nf);
    }
    return rc;
}

static int read_file(struct textimp *t, const char *path, struct nl_error *err)
{
    FILE *f = nl_fopen_regular(path, err);
    size_t got;

    if (!f)
        return err->code;
    t->buf_len = 0;
    for (;;) {
        if (t->buf_cap - t->buf_len < 65536) {
            char *p;
            if (t->buf_len + 65536 > DOC_MAX) {
                fclose(f);
                return nl_error_set(err, NL_EFORMAT, "%s: longer than %d MiB", path, DOC_MAX >> 20);
            }
            p = nl_grow(t->buf, &t->buf_cap, t->buf_len + 65536, 1, 1 << 17);
            if (!p) {
                fclose(f);
                return oom(err);
            }
            t->buf = p;
        }
        got = fread(t->buf + t->buf_len, 1, t->buf_cap - t->buf_len - 1, f);
        t->buf_len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        fclose(f);
        return nl_error_set(err, NL_EIO, "%s: cannot read: %s", path, strerror(errno));
    }
    fclose(f);
    t->buf[t->buf_len] = '\0';
    return 0;
}

static int dir_next(struct textimp *t, void *src, uint32_t i, struct nl_error *err)
{
    (void)src;
    return read_file(t, t->docs[i].path, err);
}

int nl_import_text_dir(struct nl_store *s, const char *name, const char *dir,
                       const struct nl_import_opts *opts, struct nl_error *err)
{
    static const char *const split_dirs[NL_NSPLITS] = {"train", "val", "test"};
    struct textimp t = {.opts = opts, .source = dir};
    char base[PATH_MAX], path[PATH_MAX];
    char **classes = NULL;
    int nc = 0, rc, layered, has[NL_NSPLITS] = {0};

    rc = check_text_opts(opts, dir, err);
    if (rc)
        return rc;
    if (strlen(dir) + 64 > sizeof base || join(base, sizeof base, dir, "train") < 0)
        return nl_error_set(err, NL_EINVAL, "%.80s...: path too long", dir);
    layered = is_dir(base);
    if (!layered)
        memcpy(base, dir, strlen(dir) + 1);
    for (int k = 0; k < NL_NSPLITS; k++) {
        if (join(path, sizeof path, dir, split_dirs[k]) < 0)
            continue;
        has[k] = layered && is_dir(path);
    }
    rc = list_dir(base, 1, &classes, &nc, err);
    if (rc)
        return rc;
    /* Classes: train's folders, less those an existing test/ lacks. */
    t.class_names = nl_calloc((size_t)nc + 1, sizeof *t.class_names);
    if (!t.class_names)
        rc = oom(err);
    for (int i = 0; i < nc && rc == 0; i++) {
        char test_dir[PATH_MAX];
        if (join(test_dir, sizeof test_dir, dir, "test") < 0 ||
            join(path, sizeof path, test_dir, classes[i]) < 0)
            continue;
        if (has[NL_TEST] && !is_dir(path)) {
            char msg[PATH_MAX + 80];
            snprintf(msg, sizeof msg, "%s/%s: no test/%s beside it; left out (unlabelled)", base,
                     classes[i], classes[i]);
            warn(&t, msg);
            continue;
        }
        t.class_names[t.nclasses++] = classes[i];
        classes[i] = NULL;
    }
    free_names(classes, nc);
    if (rc == 0 && t.nclasses == 0)
        rc = nl_error_set(err, NL_EFORMAT, "%s: no class folders of .txt files", base);
    if (rc == 0 && t.nclasses > MAX_CLASSES)
        rc = nl_error_set(err, NL_EFORMAT, "%s: more than %d class folders", base, MAX_CLASSES);
    for (int k = 0; k < NL_NSPLITS && rc == 0; k++) {
        if (k == NL_TRAIN) {
            rc = add_split(&t, base, k, err);
        } else if (has[k]) {
            if (join(path, sizeof path, dir, split_dirs[k]) == 0)
                rc = add_split(&t, path, k, err);
        }
    }
    if (rc == 0 && t.ndocs == 0)
        rc = nl_error_set(err, NL_EFORMAT, "%s: no .txt files in the class folders", base);
    if (rc == 0 && has[NL_VAL] && opts->val_fraction > 0) {
        char msg[PATH_MAX + 40];
        snprintf(msg, sizeof msg, "%.4000s has a val folder; --val is ignored", dir);
        warn(&t, msg);
    }
    if (rc == 0)
        rc = carve(&t, has[NL_VAL], has[NL_TEST], err);
    t.progress_total = 2 * (uint64_t)t.ndocs;
    for (uint32_t i = 0; i < t.ndocs && rc == 0; i++) {
        rc = read_file(&t, t.docs[i].path, err);
        if (rc && nl_import_skippable(rc) && opts->skip_bad) {
            /* An unreadable file is skipped as a bad one is. */
            t.buf_len = 0;
            char msg[NL_ERR_MAX + 16];
            snprintf(msg, sizeof msg, "skipped %s", err->msg);
            warn(&t, msg);
            if (t.skipped < MAX_SKIP_LISTED) {
                nl_text_printf(&t.skipped_json, "%s", t.skipped ? "," : "");
                nl_text_json_str(&t.skipped_json, t.docs[i].path);
            }
            t.skipped++;
            t.docs[i].bad = 1;
            rc = 0;
            continue;
        }
        if (rc == 0)
            rc = first_pass_doc(&t, &t.docs[i], t.docs[i].path, err);
        if (rc == 0)
            rc = progress(&t, err);
    }
    if (rc == 0)
        rc = write_all(&t, s, name, "text-folder", dir_next, NULL, err);
    textimp_free(&t);
    return rc;
}

/* ---- a CSV/TSV file with a text column ----------------------------------------------------- */

static int is_index(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* The column a name or a 1-based index names in the header (or the first row). */
static int find_column(const struct nl_csv *c, const char *what, const char *col, int header,
                       struct nl_error *err)
{
    if (!header || is_index(col)) {
        long i = strtol(col, NULL, 10);
        if (is_index(col) && i >= 1 && i <= c->nf)
            return (int)i - 1;
        if (!header)
            return nl_error_set(err, NL_EINVAL, "%s:%ld: %s column %s: want 1 to %d", c->path,
                                c->rec_line, what, col, c->nf);
    }
    for (int i = 0; i < c->nf; i++)
        if (strcmp(nl_csv_field(c, i), col) == 0)
            return i;
    return nl_error_set(err, NL_EINVAL, "%s:%ld: no column named '%s' for %s in the header",
                        c->path, c->rec_line, col, what);
}

struct label_list {
    char **names;
    int n, cap;
};

static int cmp_labels(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    return strcmp(x, y);
}

static int cmp_numeric(const void *a, const void *b)
{
    long x = strtol(*(const char *const *)a, NULL, 10),
         y = strtol(*(const char *const *)b, NULL, 10);
    return (x > y) - (x < y);
}

static int is_integer(const char *s)
{
    if (*s == '-' || *s == '+')
        s++;
    return is_index(s) && strlen(s) < 10;
}

/* Second pass over the CSV: the text of each row in order (the rows kept in the first pass). */
struct csvpass {
    struct nl_csv c;
    int text_col, header;
    uint32_t row;
};

static int csv_second(struct textimp *t, void *src, uint32_t i, struct nl_error *err)
{
    struct csvpass *p = src;
    int rc;

    do {
        rc = nl_csv_read(&p->c, err);
        if (rc < 0)
            return rc;
        if (rc == 0)
            return nl_error_set(err, NL_EFORMAT, "%s: changed while it was imported", t->source);
    } while (p->c.rec_line != t->docs[i].line);
    const char *text = nl_csv_field(&p->c, p->text_col);
    t->buf_len = strlen(text);
    char *q = nl_grow(t->buf, &t->buf_cap, t->buf_len + 1, 1, 4096);
    if (!q)
        return oom(err);
    t->buf = q;
    memcpy(t->buf, text, t->buf_len + 1);
    return 0;
}

/* The separator: a tab for a .tsv file, else the most frequent of , ; and tab in the first line
 * (nl_csv_detect_separator); the file is left at its first record. */
static int detect_sep(struct nl_csv *c, struct nl_error *err)
{
    size_t n = strlen(c->path);
    int rc = nl_csv_rewind(c, err);

    if (rc)
        return rc;
    if (n > 4 && strcasecmp(c->path + n - 4, ".tsv") == 0) {
        c->sep = '\t';
        return 0;
    }
    nl_csv_detect_separator(c);
    return nl_csv_rewind(c, err);
}

int nl_import_text_csv(struct nl_store *s, const char *name, const char *path,
                       const struct nl_import_opts *opts, struct nl_error *err)
{
    struct textimp t = {.opts = opts, .source = path};
    struct csvpass p = {.c = {.path = path, .line = 1, .max_record = MAX_RECORD}};
    struct label_list L = {0};
    char **row_labels = NULL;
    int rc, text_col = -1, label_col = -1, first = 1, header;
    int by_name = (opts->text && !is_index(opts->text)) || (opts->label && !is_index(opts->label));

    rc = check_text_opts(opts, path, err);
    if (rc)
        return rc;
    p.c.f = nl_fopen_regular(path, err);
    if (!p.c.f)
        return err->code;
    rc = detect_sep(&p.c, err);
    header = by_name;
    uint32_t nrows = 0;
    size_t rows_cap = 0;
    int all_int = 1;
    while (rc == 0) {
        rc = nl_csv_read(&p.c, err);
        if (rc <= 0)
            break;
        rc = 0;
        if (first) {
            text_col = find_column(&p.c, "--text", opts->text, header, err);
            if (text_col < 0) {
                rc = text_col;
                break;
            }
            if (opts->label) {
                label_col = find_column(&p.c, "--label", opts->label, header, err);
            } else {
                label_col = p.c.nf - 1 == text_col ? p.c.nf - 2 : p.c.nf - 1;
                if (label_col < 0)
                    label_col = nl_error_set(err, NL_EFORMAT,
                                             "%s:%ld: one column only; a label column is needed",
                                             path, p.c.rec_line);
            }
            if (label_col < 0) {
                rc = label_col;
                break;
            }
            if (label_col == text_col) {
                rc = nl_error_set(err, NL_EINVAL, "%s: the text and label columns are the same",
                                  path);
                break;
            }
            first = 0;
            if (header)
                continue;
        }
        const int ncols = text_col > label_col ? text_col + 1 : label_col + 1;
        char what[PATH_MAX + 32];
        snprintf(what, sizeof what, "%s:%ld", path, p.c.rec_line);
        if (p.c.nf < ncols) {
            rc = nl_error_set(err, NL_EFORMAT, "%s: %d fields where %d are needed", what, p.c.nf,
                              ncols);
            if (!opts->skip_bad)
                break;
            char msg[NL_ERR_MAX + 16];
            snprintf(msg, sizeof msg, "skipped %s", err->msg);
            warn(&t, msg);
            t.skipped++;
            rc = 0;
            continue;
        }
        char **q = nl_grow(row_labels, &rows_cap, (size_t)nrows + 1, sizeof *q, 1024);
        if (!q) {
            rc = oom(err);
            break;
        }
        row_labels = q;
        row_labels[nrows] = nl_strdup(nl_csv_field(&p.c, label_col));
        if (!row_labels[nrows]) {
            rc = oom(err);
            break;
        }
        all_int &= is_integer(row_labels[nrows]);
        rc = push_doc(&t, NULL, p.c.rec_line, 0, NL_TRAIN, err);
        if (rc) {
            nl_free(row_labels[nrows]);
            break;
        }
        nrows++;
        const char *text = nl_csv_field(&p.c, text_col);
        t.buf = (char *)text;
        t.buf_len = strlen(text);
        rc = first_pass_doc(&t, &t.docs[t.ndocs - 1], what, err);
        t.buf = NULL;
        t.buf_len = 0;
    }
    if (rc == 0 && nrows == 0)
        rc = nl_error_set(err, NL_EFORMAT, "%s: no rows", path);
    /* Classes: the distinct labels, in numeric or byte order. */
    if (rc == 0) {
        L.names = nl_malloc((size_t)nrows * sizeof *L.names);
        if (!L.names)
            rc = oom(err);
    }
    if (rc == 0) {
        memcpy(L.names, row_labels, (size_t)nrows * sizeof *L.names);
        qsort(L.names, nrows, sizeof *L.names, all_int ? cmp_numeric : cmp_labels);
        for (uint32_t i = 0; i < nrows; i++)
            if (L.n == 0 || (all_int ? cmp_numeric(&L.names[L.n - 1], &L.names[i])
                                     : strcmp(L.names[L.n - 1], L.names[i])) != 0)
                L.names[L.n++] = L.names[i];
        if (L.n > MAX_CLASSES)
            rc = nl_error_set(err, NL_EFORMAT, "%s: more than %d labels", path, MAX_CLASSES);
    }
    if (rc == 0) {
        t.nclasses = L.n;
        t.class_names = nl_calloc((size_t)L.n, sizeof *t.class_names);
        if (!t.class_names)
            rc = oom(err);
        for (int k = 0; k < L.n && rc == 0; k++) {
            t.class_names[k] = nl_strdup(L.names[k]);
            if (!t.class_names[k])
                rc = oom(err);
        }
    }
    for (uint32_t i = 0; i < nrows && rc == 0; i++) {
        const char *key = row_labels[i];
        const char **hit = bsearch(&key, L.names, (size_t)L.n, sizeof *L.names,
                                   all_int ? cmp_numeric : cmp_labels);
        t.docs[i].label = (int32_t)(hit ? (char **)hit - L.names : 0);
    }
    if (rc == 0)
        rc = carve(&t, 0, 0, err);
    if (rc == 0)
        rc = nl_csv_rewind(&p.c, err);
    if (rc == 0) {
        p.text_col = text_col;
        t.progress_total = (uint64_t)t.ndocs;
        rc = write_all(&t, s, name, "text-csv", csv_second, &p, err);
    }
    for (uint32_t i = 0; i < nrows; i++)
        nl_free(row_labels[i]);
    nl_free(row_labels);
    nl_free(L.names);
    fclose(p.c.f);
    nl_csv_release(&p.c);
    textimp_free(&t);
    return rc;
}

/* ---- predicting from text ------------------------------------------------------------------ */

int nl_dataset_sample_from_text(const struct nl_dataset *d, const char *text, size_t len, float *x,
                                int *unknown, struct nl_error *err)
{
    struct vocab v = {0};
    struct tokens tok = {.v = &v};
    size_t bad = first_bad(text, len);
    int rc = 0;

    if (d->nvocab < 2 || !d->vocab)
        return nl_error_set(err, NL_EINVAL, "dataset '%s' is not a text dataset", d->name);
    if (bad)
        return nl_error_set(err, NL_EFORMAT, "the text is not valid UTF-8 (byte %zu)", bad);
    for (int i = 2; i < d->nvocab && rc == 0; i++) {
        struct entry *e = vocab_add(&v, d->vocab[i], strlen(d->vocab[i]));
        if (!e)
            rc = oom(err);
        else
            e->id = i;
    }
    if (rc == 0) {
        nl_text_words(text, len, add_token, &tok);
        if (tok.failed)
            rc = oom(err);
    }
    if (rc == 0) {
        place_tokens(&tok, d->shape.w, d->keep_end, x);
        if (unknown)
            *unknown = tok.unknown;
    }
    nl_free(tok.ids);
    vocab_free(&v);
    return rc;
}
