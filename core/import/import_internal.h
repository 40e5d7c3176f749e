/* What the importers (IDX, image folders, CSV) share: a streaming writer that stages one import
 * in bounded transactions, publishes it at the end, and sums the train split's statistics as
 * samples go by, the seeded stratified
 * split, and a few helpers for messages. Not part of the public headers.
 *
 * A reader calls nl_writer_begin (which creates the staged datasets row), then nl_writer_add
 * once per sample with its final split and label, then nl_writer_commit with the class names and
 * the preprocessing record, which publishes the dataset under its name; on any error it calls
 * nl_writer_abort, which removes everything staged. Memory does not grow with the number of
 * samples. */
#ifndef NNLAB_IMPORT_INTERNAL_H
#define NNLAB_IMPORT_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "nnlab/dataset.h"

struct nl_writer;

struct nl_writer_spec {
    const char *name;   /* the dataset's name, checked with nl_store_check_name */
    const char *kind;   /* "idx", "png", "jpeg", "image" (both), "csv" */
    const char *source; /* the files or folder, for people */
    struct nl_shape shape;
    enum nl_dtype dtype;
};

int nl_writer_begin(struct nl_writer **out, struct nl_store *s, const struct nl_writer_spec *spec,
                    struct nl_error *err);

/* data is one sample of the spec's shape and type. Train samples feed the statistics: per
 * channel for uint8 data (in units of pixel / 255), per channel too for float data, where a CSV
 * dataset's channels are its features. */
int nl_writer_add(struct nl_writer *w, enum nl_split split, int label, const void *data,
                  struct nl_error *err);

/* A regression sample: its float32 target's bits are stored as the label (see core/import/csv.c);
 * it counts as class 0 of the train split. */
int nl_writer_add_target(struct nl_writer *w, enum nl_split split, float target, const void *data,
                         struct nl_error *err);

uint32_t nl_writer_count(const struct nl_writer *w, enum nl_split split);

/* Text datasets: one row of the vocabulary (the vocab table of core/store/store.c), staged with the
 * samples. */
int nl_writer_add_word(struct nl_writer *w, int id, const char *word, int64_t count,
                       struct nl_error *err);

/* Stores the classes (names[k] may be NULL: named by its number), the statistics and the
 * preprocessing record (JSON), commits, and frees w whatever happens. Warns about classes with
 * no train sample. */
int nl_writer_commit(struct nl_writer *w, int nclasses, const char *const *names,
                     const char *preprocessing, const struct nl_import_opts *opts,
                     struct nl_error *err);

/* Rolls the import back and frees w; accepts NULL. */
void nl_writer_abort(struct nl_writer *w);

/* Stratified seeded split: among the samples with labels[i] >= 0 (others are left alone), per
 * class in label order, round(val * count) samples become NL_VAL and round(test * count) NL_TEST,
 * chosen by a shuffle of that class's samples, keeping at least one in train. split[] must hold
 * the samples' current splits (NL_TRAIN for those that may move). */
int nl_split_assign(const int32_t *labels, uint32_t n, int nclasses, float val, float test,
                    uint64_t seed, uint8_t *split, struct nl_error *err);

/* Whether an error of this code is about one bad input file that --skip-bad may skip. */
static inline int nl_import_skippable(int code)
{
    return code == NL_EFORMAT || code == NL_EIO || code == NL_ENOENT;
}

/* A growing text buffer for the preprocessing JSON; on out-of-memory it stays NULL and the
 * import fails at commit. */
struct nl_text {
    char *s;
    size_t len, cap;
    int failed;
};
void nl_text_printf(struct nl_text *t, const char *fmt, ...) NL_PRINTF(2, 3);
void nl_text_json_str(struct nl_text *t, const char *s);
void nl_text_free(struct nl_text *t);

/* Opens path for reading, refusing what is not a regular file (a FIFO, a device, a folder) before
 * any read could block on it: open with O_NONBLOCK, fstat, then blocking reads. NULL with err
 * set ("PATH: not a regular file (a FIFO)"). */
FILE *nl_fopen_regular(const char *path, struct nl_error *err);
int nl_open_regular(const char *path, struct nl_error *err);

/* The source column: the paths as absolute paths where they resolve, comma-separated. */
void nl_import_describe_source(const char *const *paths, int npaths, char *out, size_t size);

/* The CSV/TSV reader (core/import/csv.c) behind both CSV importers and predict's rows. Fields are
 * separated by sep (a comma, a semicolon or a tab) and may be quoted ("a, b", "say ""hi""");
 * quoted fields may hold line breaks; a line ends with LF, CRLF or CR; blank lines are skipped. A
 * row is at most max_record bytes (0: 1 MiB) and 65536 fields; a NUL byte is refused with FILE:LINE
 * (and the rest of its line consumed, so that a caller may skip the row). The caller fills path, f
 * and sep (or calls nl_csv_detect_separator), sets line to 1 or calls nl_csv_rewind, and releases
 * the buffers with nl_csv_release; f stays the caller's. */
struct nl_csv {
    const char *path; /* for messages */
    FILE *f;
    char sep;
    long line;     /* of the next character */
    long rec_line; /* where the current record starts */
    char *buf;     /* the record's fields, each NUL-terminated */
    size_t len, cap;
    size_t *off; /* (nf) field starts in buf */
    size_t fcap;
    int nf;
    size_t max_record; /* bytes in one row; 0: 1 MiB */
};

/* The next record into c: 1, 0 at the end of the file, or an error. */
int nl_csv_read(struct nl_csv *c, struct nl_error *err);
/* Back to the first record, past a UTF-8 byte-order mark; line 1. */
int nl_csv_rewind(struct nl_csv *c, struct nl_error *err);
/* c->sep: the most frequent of , ; and tab outside quotes in the first line, read from where the
 * file is (call nl_csv_rewind after). */
void nl_csv_detect_separator(struct nl_csv *c);
/* Frees the record buffers (not f); c may be used again. */
void nl_csv_release(struct nl_csv *c);

static inline const char *nl_csv_field(const struct nl_csv *c, int i)
{
    return c->buf + c->off[i];
}

/* The readers behind nl_import. */
int nl_import_image_dir(struct nl_store *s, const char *name, const char *dir,
                        const struct nl_import_opts *opts, struct nl_error *err);
int nl_import_csv(struct nl_store *s, const char *name, const char *path,
                  const struct nl_import_opts *opts, struct nl_error *err);
/* Text (core/import/textdata.c): a folder of class folders of .txt files, or a CSV/TSV file with a
 * text column (opts->text). nl_text_dir_probe says whether a folder looks like the first. */
int nl_import_text_dir(struct nl_store *s, const char *name, const char *dir,
                       const struct nl_import_opts *opts, struct nl_error *err);
int nl_import_text_csv(struct nl_store *s, const char *name, const char *path,
                       const struct nl_import_opts *opts, struct nl_error *err);
int nl_text_dir_probe(const char *dir);

/* Image files (core/import/image.c, core/import/jpeg.c). */
enum nl_image_format { NL_IMAGE_PNG = 1, NL_IMAGE_JPEG = 2 };

struct nl_image_info {
    uint32_t w, h;   /* after the EXIF orientation */
    int color;       /* stored as colour (not gray) */
    int format;      /* enum nl_image_format */
    int orientation; /* EXIF 1..8; 1 for PNG */
};

/* 8-bit pixel planes (c, h, w); px owned by the holder (nl_free). */
struct nl_image {
    int c, h, w;
    uint8_t *px;
};

/* The header of a PNG or JPEG file, told apart by its signature. */
int nl_image_probe(const char *path, struct nl_image_info *info, struct nl_error *err);

/* The image at path as out (channels, out_h, out_w) of 8-bit values: decoded, converted to
 * channels (1 or 3), oriented, resized by r (NULL or all zero: stretched to out_h x out_w) and
 * cropped to out_h x out_w, as core/import/image.c describes. *dct_denom (may be NULL) is the JPEG
 * DCT reduction used (1, 2, 4 or 8). */
int nl_image_read(const char *path, int channels, const struct nl_resize *r, int out_h, int out_w,
                  uint8_t *out, int *dct_denom, struct nl_error *err);

/* The size of an image of iw x ih after r, when r fixes it (a crop, or a stretch): *w x *h; with
 * shorter:S alone, the size after scaling. */
void nl_resize_size(const struct nl_resize *r, uint32_t iw, uint32_t ih, int *w, int *h);

/* PNG header: width, height, and whether the colour type is colour (palette, RGB, RGBA).
 * Reads only the signature and the IHDR chunk. */
int nl_png_probe(const char *path, uint32_t *w, uint32_t *h, int *color, struct nl_error *err);

/* JPEG (core/import/jpeg.c): open reads the header (size after orientation, colour, orientation);
 * decode reads the pixels at 1/denom scale (1, 2, 4, 8) into img->px (planes of channels, after
 * orientation), which the caller frees; close accepts NULL. */
struct nl_jpeg;
int nl_jpeg_open(struct nl_jpeg **out, const char *path, struct nl_image_info *info,
                 struct nl_error *err);
int nl_jpeg_decode(struct nl_jpeg *j, int denom, int channels, struct nl_image *img,
                   struct nl_error *err);
void nl_jpeg_close(struct nl_jpeg *j);

#endif
