/* Importing a folder of image class folders: DIR/CLASS/FILE.png (or .jpg, PNG and JPEG files
 * mixed in any folder, told apart by their signatures), or DIR/train/CLASS/FILE with
 * DIR/val/... and DIR/test/... beside it.
 *
 * Class names are the folder names, sorted bytewise; files are taken in sorted order, so an
 * import is reproducible. Files whose names start with '.' are ignored. The import runs in two
 * passes over the file list: the first reads only each file's header, to find the most common
 * size and channel kind (the defaults) and to reject files that are neither PNG nor JPEG early;
 * the second decodes each file (core/import/image.c, core/import/jpeg.c), converts, orients,
 * resizes and crops it (--resize), and streams it into the store through the import writer. Only
 * the list of paths is held in memory; each image is freed after it is stored. */
#include "import_internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/store/store_internal.h"
#include "nnlab/alloc.h"

#define MAX_CLASSES        65536
#define MAX_SKIPPED_LISTED 20
#define MAX_SAMPLE_VALUES  (1u << 24) /* bytes of one stored sample */

static const char *const split_dirs[NL_NSPLITS] = {"train", "val", "test"};

struct entry {
    char *path;
    int32_t label; /* -1: bad, skipped */
    uint8_t split;
    uint8_t color;
    uint8_t format; /* enum nl_image_format */
    uint32_t w, h;  /* after the EXIF orientation */
};

struct names {
    char **v;
    size_t n, cap;
};

struct pngdir {
    const char *dir;
    const struct nl_import_opts *opts;
    struct entry *e;
    size_t n, cap;
    struct names classes;
    int has_split[NL_NSPLITS];
    int split_layout;
    uint32_t skipped;
    uint32_t nformat[3]; /* good files by enum nl_image_format */
    struct nl_resize resize;
    struct nl_text skipped_json; /* the first MAX_SKIPPED_LISTED, as JSON strings */
};

static void names_free(struct names *a)
{
    for (size_t i = 0; i < a->n; i++)
        nl_free(a->v[i]);
    nl_free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

static int names_push(struct names *a, const char *s)
{
    char **v = nl_grow(a->v, &a->cap, a->n + 1, sizeof *v, 16);
    if (!v)
        return -1;
    a->v = v;
    a->v[a->n] = nl_strdup(s);
    if (!a->v[a->n])
        return -1;
    a->n++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int path_join(char *out, const char *a, const char *b, struct nl_error *err)
{
    int n = snprintf(out, PATH_MAX, "%s/%s", a, b);
    if (n < 0 || n >= PATH_MAX)
        return nl_error_set(err, NL_EINVAL, "%s/%s: path too long", a, b);
    return 0;
}

/* The entries of dir not starting with '.', sorted. */
static int list_dir(const char *dir, struct names *out, struct nl_error *err)
{
    DIR *d = opendir(dir);
    struct dirent *de;

    out->n = 0;
    if (!d)
        return nl_error_set(err, errno == ENOENT ? NL_ENOENT : NL_EIO, "%s: cannot open: %s", dir,
                            strerror(errno));
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (names_push(out, de->d_name) != 0) {
            closedir(d);
            return nl_error_set(err, NL_ENOMEM, "%s: out of memory listing", dir);
        }
    }
    if (errno) {
        int e = errno;
        closedir(d);
        return nl_error_set(err, NL_EIO, "%s: cannot list: %s", dir, strerror(e));
    }
    closedir(d);
    if (out->n > 1)
        qsort(out->v, out->n, sizeof *out->v, cmp_str);
    return 0;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void warn(const struct pngdir *p, const char *fmt, const char *a)
{
    char msg[PATH_MAX + 128];

    if (!p->opts->warn)
        return;
    snprintf(msg, sizeof msg, fmt, a);
    p->opts->warn(p->opts->warn_ud, msg);
}

/* Records a bad file that --skip-bad skips (the message names it). */
static void note_skipped(struct pngdir *p, const char *path, const char *msg)
{
    if (p->skipped < MAX_SKIPPED_LISTED) {
        nl_text_printf(&p->skipped_json, "%s", p->skipped ? "," : "");
        nl_text_json_str(&p->skipped_json, path);
    }
    p->skipped++;
    warn(p, "skipped %s", msg);
}

static int add_entry(struct pngdir *p, const char *path, int split, int label, struct nl_error *err)
{
    struct entry *more = nl_grow(p->e, &p->cap, p->n + 1, sizeof *more, 1024);
    if (!more)
        return nl_error_set(err, NL_ENOMEM, "out of memory listing %s", p->dir);
    p->e = more;
    struct entry *e = &p->e[p->n];
    memset(e, 0, sizeof *e);
    e->path = nl_strdup(path);
    if (!e->path)
        return nl_error_set(err, NL_ENOMEM, "out of memory listing %s", p->dir);
    e->split = (uint8_t)split;
    e->label = label;
    p->n++;
    return 0;
}

/* Adds the files of one class folder; returns 1 when the folder had none. */
static int scan_class(struct pngdir *p, const char *cdir, int split, int label,
                      struct nl_error *err)
{
    struct names files = {0};
    char path[PATH_MAX];
    size_t before = p->n;
    int rc = list_dir(cdir, &files, err);

    for (size_t i = 0; i < files.n && rc == 0; i++) {
        rc = path_join(path, cdir, files.v[i], err);
        if (rc)
            break;
        if (is_dir(path)) {
            warn(p, "%s: a folder inside a class folder; ignored", path);
            continue;
        }
        rc = add_entry(p, path, split, label, err);
    }
    names_free(&files);
    if (rc == 0 && p->n == before) {
        rc = nl_error_set(err, NL_EFORMAT, "%s: empty class folder (no files)", cdir);
        if (!p->opts->skip_bad)
            return rc;
        note_skipped(p, cdir, err->msg);
        return 1;
    }
    return rc;
}

static int find_class(const struct names *classes, const char *name)
{
    const char *key = name;
    char **hit = bsearch(&key, classes->v, classes->n, sizeof *classes->v, cmp_str);
    return hit ? (int)(hit - classes->v) : -1;
}

/* Finds the layout, the classes and every file. */
static int scan(struct pngdir *p, struct nl_error *err)
{
    struct names top = {0}, sub = {0};
    char path[PATH_MAX], cdir[PATH_MAX];
    int rc = list_dir(p->dir, &top, err);

    for (int k = 0; k < NL_NSPLITS && rc == 0; k++) {
        rc = path_join(path, p->dir, split_dirs[k], err);
        p->has_split[k] = rc == 0 && is_dir(path);
        p->split_layout |= p->has_split[k];
    }
    /* The classes: the union of the class folders' names. */
    for (size_t i = 0; i < top.n && rc == 0; i++) {
        rc = path_join(path, p->dir, top.v[i], err);
        if (rc)
            break;
        if (!is_dir(path)) {
            warn(p, "%s: not a folder; ignored", path);
            continue;
        }
        if (!p->split_layout) {
            if (names_push(&p->classes, top.v[i]) != 0)
                rc = nl_error_set(err, NL_ENOMEM, "out of memory");
            continue;
        }
        int k = 0;
        while (k < NL_NSPLITS && strcmp(top.v[i], split_dirs[k]) != 0)
            k++;
        if (k == NL_NSPLITS) {
            warn(p, "%s: not train, val or test; ignored", path);
            continue;
        }
        rc = list_dir(path, &sub, err);
        for (size_t j = 0; j < sub.n && rc == 0; j++) {
            rc = path_join(cdir, path, sub.v[j], err);
            if (rc == 0 && is_dir(cdir) && names_push(&p->classes, sub.v[j]) != 0)
                rc = nl_error_set(err, NL_ENOMEM, "out of memory");
            else if (rc == 0 && !is_dir(cdir))
                warn(p, "%s: not a folder; ignored", cdir);
        }
        names_free(&sub);
    }
    if (rc == 0 && p->classes.n > 1) {
        size_t out = 1;
        qsort(p->classes.v, p->classes.n, sizeof *p->classes.v, cmp_str);
        for (size_t i = 1; i < p->classes.n; i++) {
            if (strcmp(p->classes.v[i], p->classes.v[out - 1]) == 0)
                nl_free(p->classes.v[i]);
            else
                p->classes.v[out++] = p->classes.v[i];
        }
        p->classes.n = out;
    }
    if (rc == 0 && p->classes.n == 0)
        rc = nl_error_set(
            err, NL_EFORMAT,
            "%s: no class folders; expected %s/CLASS/FILE.png or %s/train/CLASS/FILE.png", p->dir,
            p->dir, p->dir);
    if (rc == 0 && p->classes.n > MAX_CLASSES)
        rc = nl_error_set(err, NL_EFORMAT, "%s: %zu class folders; at most %d", p->dir,
                          p->classes.n, MAX_CLASSES);
    if (rc == 0 && p->split_layout && !p->has_split[NL_TRAIN])
        rc = nl_error_set(err, NL_EFORMAT, "%s: has val or test folders but no train folder",
                          p->dir);

    /* The files, split by split, class by class. */
    for (int k = 0; k < NL_NSPLITS && rc == 0; k++) {
        const char *base = p->dir;
        if (p->split_layout && !p->has_split[k])
            continue;
        if (!p->split_layout && k > 0)
            break;
        if (p->split_layout) {
            rc = path_join(path, p->dir, split_dirs[k], err);
            base = path;
        }
        rc = rc ? rc : list_dir(base, &sub, err);
        for (size_t j = 0; j < sub.n && rc == 0; j++) {
            rc = path_join(cdir, base, sub.v[j], err);
            if (rc || !is_dir(cdir))
                continue;
            int label = find_class(&p->classes, sub.v[j]);
            rc = scan_class(p, cdir, k, label, err);
            if (rc == 1)
                rc = 0;
        }
        names_free(&sub);
    }
    names_free(&top);
    names_free(&sub);
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Reads every header: marks bad files (or fails), then picks the channels and size. */
static int probe_all(struct pngdir *p, int *channels, int *h, int *w, struct nl_error *err)
{
    uint64_t *sizes = nl_malloc((p->n + 1) * sizeof *sizes);
    size_t ngood = 0, ncolor = 0;
    int rc = 0;

    if (!sizes)
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->n && rc == 0; i++) {
        struct entry *e = &p->e[i];
        struct nl_image_info info;
        int dw, dh;
        rc = nl_image_probe(e->path, &info, err);
        if (rc && p->opts->skip_bad && nl_import_skippable(rc)) {
            note_skipped(p, e->path, err->msg);
            e->label = -1;
            rc = 0;
            continue;
        }
        if (rc)
            break;
        e->w = info.w;
        e->h = info.h;
        e->color = (uint8_t)info.color;
        e->format = (uint8_t)info.format;
        p->nformat[info.format]++;
        ncolor += (size_t)info.color;
        nl_resize_size(&p->resize, e->w, e->h, &dw, &dh);
        sizes[ngood++] = (uint64_t)dw << 32 | (uint32_t)dh;
    }
    if (rc == 0 && ngood == 0)
        rc = nl_error_set(err, NL_EFORMAT, "%s: no PNG or JPEG files to import", p->dir);
    if (rc == 0) {
        *channels = p->opts->channels ? p->opts->channels : ncolor * 2 > ngood ? 3 : 1;
        if (p->resize.crop_w || p->resize.w) {
            nl_resize_size(&p->resize, 1, 1, w, h);
        } else {
            /* The most common size; ties go to the smaller. */
            size_t best = 0, best_n = 0;
            qsort(sizes, ngood, sizeof *sizes, cmp_u64);
            for (size_t i = 0; i < ngood;) {
                size_t j = i;
                while (j < ngood && sizes[j] == sizes[i])
                    j++;
                if (j - i > best_n) {
                    best_n = j - i;
                    best = i;
                }
                i = j;
            }
            *w = (int)(sizes[best] >> 32);
            *h = (int)(sizes[best] & 0xffffffffu);
        }
    }
    nl_free(sizes);
    return rc;
}

/* Assigns the carved validation and test splits among the train files. */
static int carve(struct pngdir *p, struct nl_error *err)
{
    float val = p->has_split[NL_VAL] ? 0 : p->opts->val_fraction;
    float test = p->has_split[NL_TEST] ? 0 : p->opts->test_fraction;
    int32_t *labels;
    uint8_t *split;
    int rc;

    if (p->has_split[NL_VAL] && p->opts->val_fraction > 0)
        warn(p, "%s has a val folder; --val is ignored", p->dir);
    if (p->has_split[NL_TEST] && p->opts->test_fraction > 0)
        warn(p, "%s has a test folder; --test is ignored", p->dir);
    if (val <= 0 && test <= 0)
        return 0;
    labels = nl_malloc((p->n + 1) * sizeof *labels);
    split = nl_malloc(p->n + 1);
    if (!labels || !split) {
        nl_free(labels);
        nl_free(split);
        return nl_error_set(err, NL_ENOMEM, "out of memory choosing the splits");
    }
    for (size_t i = 0; i < p->n; i++) {
        labels[i] = p->e[i].label;
        split[i] = p->e[i].split;
    }
    rc = nl_split_assign(labels, (uint32_t)p->n, (int)p->classes.n, val, test, p->opts->seed, split,
                         err);
    for (size_t i = 0; i < p->n && rc == 0; i++)
        p->e[i].split = split[i];
    nl_free(labels);
    nl_free(split);
    return rc;
}

/* Decodes and stores every good file. */
static int store_all(struct pngdir *p, struct nl_writer *w, int c, int h, int wd, uint32_t *resized,
                     uint32_t *converted, uint32_t *scaled, struct nl_error *err)
{
    size_t sample = (size_t)c * h * wd;
    uint8_t *px = nl_malloc(sample);
    int rc = 0, denom;

    if (!px)
        rc = nl_error_set(err, NL_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->n && rc == 0; i++) {
        struct entry *e = &p->e[i];
        if (e->label < 0)
            continue;
        rc = nl_image_read(e->path, c, &p->resize, h, wd, px, &denom, err);
        if (rc && p->opts->skip_bad && nl_import_skippable(rc)) {
            note_skipped(p, e->path, err->msg);
            e->label = -1;
            rc = 0;
            continue;
        }
        if (rc)
            break;
        *resized += (int)e->w != wd || (int)e->h != h;
        *scaled += denom > 1;
        *converted += (e->color ? 3 : 1) != c;
        rc = nl_writer_add(w, e->split, e->label, px, err);
        if (rc == 0 && p->opts->progress &&
            p->opts->progress(p->opts->progress_ud, (uint64_t)i + 1, (uint64_t)p->n))
            rc = nl_error_set(err, NL_ECANCELED, "stopped");
    }
    nl_free(px);
    return rc;
}

static const char *const norm_names[] = {"per-channel mean/std of train",
                                         "imagenet: mean 0.485 0.456 0.406, std 0.229 0.224 0.225",
                                         "none: pixel / 255"};

int nl_import_image_dir(struct nl_store *s, const char *name, const char *dir,
                        const struct nl_import_opts *opts, struct nl_error *err)
{
    struct pngdir p = {
        .dir = dir,
        .opts = opts,
        .resize = {opts->width, opts->height, opts->shorter, opts->crop_w, opts->crop_h}};
    char resize_text[96];
    struct nl_writer *w = NULL;
    struct nl_text pre = {0};
    char source[PATH_MAX + 8];
    uint32_t resized = 0, converted = 0, scaled = 0;
    int c = 0, h = 0, wd = 0, rc;

    rc = nl_store_check_name("dataset", name, err);
    if (rc == 0 && opts->channels != 0 && opts->channels != 1 && opts->channels != 3)
        rc = nl_error_set(err, NL_EINVAL, "%d channels: image import makes 1 (gray) or 3 (RGB)",
                          opts->channels);
    if (rc == 0 && (unsigned)opts->normalize > NL_NORM_NONE)
        rc = nl_error_set(err, NL_EINVAL, "unknown normalisation %d", (int)opts->normalize);
    if (rc == 0)
        rc = scan(&p, err);
    if (rc == 0)
        rc = probe_all(&p, &c, &h, &wd, err);
    if (rc == 0 && (uint64_t)c * h * wd > MAX_SAMPLE_VALUES)
        rc = nl_error_set(err, NL_EINVAL,
                          "%s: samples of %d x %d x %d values are too large to store; choose a "
                          "smaller size with --resize WxH",
                          dir, c, h, wd);
    if (rc == 0 && opts->normalize == NL_NORM_IMAGENET && c != 3)
        rc = nl_error_set(err, NL_EINVAL,
                          "%s: --normalize imagenet needs RGB samples; these have %d channel "
                          "(add --rgb)",
                          dir, c);
    if (rc == 0)
        rc = carve(&p, err);
    if (rc == 0) {
        const char *paths[1] = {dir};
        nl_import_describe_source(paths, 1, source, sizeof source);
        const char *kind = !p.nformat[NL_IMAGE_JPEG]  ? "png"
                           : !p.nformat[NL_IMAGE_PNG] ? "jpeg"
                                                      : "image";
        struct nl_writer_spec spec = {
            .name = name, .kind = kind, .source = source, .shape = {c, h, wd}, .dtype = NL_U8};
        rc = nl_writer_begin(&w, s, &spec, err);
    }
    if (rc == 0)
        rc = store_all(&p, w, c, h, wd, &resized, &converted, &scaled, err);
    if (rc == 0 &&
        nl_writer_count(w, NL_TRAIN) + nl_writer_count(w, NL_VAL) + nl_writer_count(w, NL_TEST) ==
            0)
        rc = nl_error_set(err, NL_EFORMAT, "%s: no image file could be imported", dir);
    if (rc == 0) {
        nl_resize_format(&p.resize, resize_text, sizeof resize_text);
        nl_text_printf(&pre,
                       "{\"reader\":\"image\",\"png\":%u,\"jpeg\":%u,\"layout\":\"%s\","
                       "\"channels\":%d,\"size\":[%d,%d],\"resize\":\"%s\","
                       "\"filter\":\"bilinear (Pillow's)\",\"resized\":%u,\"dct_scaled\":%u,"
                       "\"converted\":%u,\"alpha\":\"over black\",\"exif_orientation\":"
                       "\"applied\",\"val_fraction\":%g,\"test_fraction\":%g,"
                       "\"seed\":%llu,\"normalise\":\"%s\","
                       "\"skipped\":%u,\"skipped_files\":[%s]}",
                       p.nformat[NL_IMAGE_PNG], p.nformat[NL_IMAGE_JPEG],
                       p.split_layout ? "train/val/test" : "classes", c, wd, h, resize_text,
                       resized, scaled, converted,
                       p.has_split[NL_VAL] ? 0.0 : (double)opts->val_fraction,
                       p.has_split[NL_TEST] ? 0.0 : (double)opts->test_fraction,
                       (unsigned long long)opts->seed, norm_names[opts->normalize], p.skipped,
                       p.skipped_json.s ? p.skipped_json.s : "");
        rc = nl_writer_commit(w, (int)p.classes.n, (const char *const *)p.classes.v,
                              pre.failed ? NULL : pre.s, opts, err);
        w = NULL;
    }
    nl_writer_abort(w);
    for (size_t i = 0; i < p.n; i++)
        nl_free(p.e[i].path);
    nl_free(p.e);
    names_free(&p.classes);
    nl_text_free(&p.skipped_json);
    nl_text_free(&pre);
    return rc;
}
