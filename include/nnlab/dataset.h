/* Datasets: importing into the store, listing, and loading into memory for training.
 *
 * Samples stay in memory in the type they were imported in (uint8 for 8-bit pixels) and become
 * normalised floats one batch at a time: x = (pixel / 255 - mean[c]) / std[c], with mean and std
 * computed over the train split at import and stored with the dataset. */
#ifndef NNLAB_DATASET_H
#define NNLAB_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/error.h"
#include "nnlab/layer.h"
#include "nnlab/rng.h"
#include "nnlab/store.h"

enum nl_split { NL_TRAIN = 0, NL_VAL = 1, NL_TEST = 2, NL_NSPLITS = 3 };
enum nl_dtype { NL_U8 = 0, NL_F32 = 1 };

extern const char *const nl_split_names[NL_NSPLITS]; /* "train", "val", "test" */

struct nl_dataset {
    char *name;
    char *source;          /* where it was imported from */
    char *kind;            /* "idx", "png", "jpeg", "image" (PNG and JPEG) or "csv" */
    struct nl_shape shape; /* one sample */
    enum nl_dtype dtype;
    int nclasses;
    char **class_names;  /* (nclasses) */
    int nnorm;           /* shape.c: one mean/std per channel (per feature for CSV: (F, 1, 1)) */
    float *mean, *std;   /* (nnorm), in units of pixel / 255 for uint8 data */
    char *preprocessing; /* JSON: what the import did (resize, channels, splits, skipped...) */
    /* A regression dataset (a CSV imported with --task regression): one "class", named after the
     * target column; labels are all 0 and t holds the targets standardised with target_mean and
     * target_std, the train split's statistics. 0 and t NULL for classification. */
    int regression;
    double target_mean, target_std;
    /* A table's embedded columns (core/import/csv.c): embed_columns inputs from embed_first, row
     * ids into a table of embed_rows rows, for an embed-columns layer. 0 when it has none. */
    int embed_first, embed_columns, embed_rows;
    /* Text datasets (kind "text"): a sample is (1, 1, L) token ids held as float32 (exact: ids
     * are below 2^24), mean 0 and std 1, so batches carry the ids unchanged; words come first
     * and padding (id 0) fills the rest. The vocabulary is vocab[id] with its train count; id 0
     * is padding ("<pad>"), 1 out-of-vocabulary ("<unk>"). nvocab 0 for other kinds. */
    int nvocab;
    char **vocab;         /* (nvocab) */
    int64_t *vocab_count; /* (nvocab) */
    int keep_end;         /* longer documents kept their last L words, not their first */
    struct {
        uint32_t n;
        void *x;    /* (n, sample), uint8_t or float by dtype */
        int32_t *y; /* (n) labels in [0, nclasses) */
        float *t;   /* (n) regression: standardised targets; NULL otherwise */
    } split[NL_NSPLITS];
};

struct nl_dataset_info {
    char name[128];
    char kind[16];
    char source[512];
    char created[32];
    struct nl_shape shape;
    int nclasses;
    uint32_t count[NL_NSPLITS];
    uint64_t bytes;   /* of all samples */
    int nvocab;       /* text datasets: the vocabulary's size, padding and out-of-vocabulary in */
    int regression;   /* a CSV imported with --task regression: one "class", the target */
    char target[128]; /* regression: the target column's name */
    int embed_columns, embed_rows; /* a table's embedded columns and their rows; 0: none */
};

/* What an import stores as the dataset's mean and std: the train split's per-channel
 * statistics, ImageNet's (PyTorch's mean 0.485 0.456 0.406 and std 0.229 0.224 0.225, for
 * pretrained weights; RGB only), or none (mean 0, std 1: inputs are pixel / 255). */
enum nl_normalize { NL_NORM_DATASET = 0, NL_NORM_IMAGENET = 1, NL_NORM_NONE = 2 };

/* The geometry of image import (--resize): resize by a stretch to w x h or by the shorter side,
 * then optionally cut the centre; see core/import/image.c. All zero: none. */
struct nl_resize {
    int w, h;           /* stretch:WxH */
    int shorter;        /* shorter:S */
    int crop_w, crop_h; /* center-crop:WxH */
};

/* Parses "stretch:WxH" (or "WxH"), "shorter:S", "center-crop:WxH", a resize and a crop joined by
 * a comma ("shorter:256,center-crop:224x224"), or "none"; nl_resize_format writes it back. */
int nl_resize_parse(struct nl_resize *r, const char *text, struct nl_error *err);
void nl_resize_format(const struct nl_resize *r, char *buf, size_t size);

/* What a CSV import does with an empty field (--missing): refuse it with FILE:LINE, drop its row,
 * or fill it with the train split's mean or median (numeric columns) or most frequent level
 * (categorical columns; mode fills numeric columns with their most frequent value). An empty
 * target is refused unless rows are dropped. */
enum nl_missing {
    NL_MISSING_ERROR = 0,
    NL_MISSING_DROP = 1,
    NL_MISSING_MEAN = 2,
    NL_MISSING_MEDIAN = 3,
    NL_MISSING_MODE = 4,
};
/* Parses "error", "drop", "mean", "median" or "mode"; -1 for anything else. */
int nl_missing_parse(const char *text);
extern const char *const nl_missing_names[5];

struct nl_import_opts {
    float val_fraction;  /* carve a stratified validation split of this share from train; 0: none */
    float test_fraction; /* carve a test split likewise, when the source has none; 0: none */
    uint64_t seed;       /* for the carved splits */
    int channels;        /* PNG: 1 (gray) or 3 (RGB); 0: what most files are */
    int width, height;   /* images: stretch every image to this; 0: the most common size */
    int shorter;         /* images: or scale the shorter side to this, keeping the aspect */
    int crop_w, crop_h;  /* images: then cut the centre to this size (torchvision's CenterCrop) */
    enum nl_normalize normalize; /* images: the statistics batches are normalised with */
    const char *label; /* CSV: the label column, a name or a 1-based index; NULL: the last */
    int regression;    /* CSV: the label column is a numeric target (--task regression) */
    /* CSV: feature columns to treat as categorical, comma-separated names or 1-based indexes;
     * columns holding a non-number are categorical anyway. NULL: none named. */
    const char *categorical;
    /* CSV: a categorical column with more train levels than this becomes one input, its level's
     * row id, for an embed-columns layer (see core/import/csv.c). 0: the one-hot cap, 16 (a
     * column of more levels is embedded); negative: never (one-hot slots for the 16 most
     * frequent levels and an "other" slot, whatever the level count). */
    int embed_levels;
    enum nl_missing missing; /* CSV: what an empty field does */
    const char *text;        /* CSV: the text column, a name or a 1-based index: a text dataset */
    int vocab;       /* text: words in the vocabulary, the train split's most frequent; 0: 20000 */
    int max_len;     /* text: tokens per document, cut or padded; 0: 200 */
    int keep_end;    /* text: a longer document keeps its last max_len words */
    int skip_bad;    /* skip bad files or rows (each reported through warn) */
    nl_warn_fn warn; /* may be NULL */
    void *warn_ud;
    /* Called as files or rows are imported; a non-zero return stops the import (NL_ECANCELED).
     * May be NULL. */
    int (*progress)(void *ud, uint64_t done, uint64_t total);
    void *progress_ud;
};

/* Imports a dataset from what paths name, deciding by the source: a folder of IDX files or an
 * IDX images file and labels file (nl_import_idx), a folder of PNG/JPEG class folders (optionally
 * under train/, val/ and test/), or a .csv file. One transaction: nothing is stored when it fails,
 * and errors read "PATH[:LINE]: why". */
int nl_import(struct nl_store *s, const char *name, const char *const *paths, int npaths,
              const struct nl_import_opts *opts, struct nl_error *err);

/* Imports MNIST-family IDX files as dataset `name`, in one transaction: nothing is left in the
 * store when it fails. paths is either one folder holding train-images-idx3-ubyte and
 * train-labels-idx1-ubyte (and optionally the t10k pair, which becomes the test split), each
 * possibly .gz, or an images file and a labels file (the train split). Errors name the file. */
int nl_import_idx(struct nl_store *s, const char *name, const char *const *paths, int npaths,
                  const struct nl_import_opts *opts, struct nl_error *err);

int nl_dataset_exists(struct nl_store *s, const char *name, struct nl_error *err); /* 1, 0, <0 */
int nl_dataset_list(struct nl_store *s, struct nl_dataset_info **out, int *count,
                    struct nl_error *err); /* *out freed with nl_free */
/* One dataset's summary by name; NL_ENOENT naming it when there is none. */
int nl_dataset_info(struct nl_store *s, const char *name, struct nl_dataset_info *info,
                    struct nl_error *err);
/* Removes a dataset (its samples, classes and vocabulary) in one transaction, then gives the
 * freed pages back to the file system (nl_store_reclaim; best effort: pages it could not give
 * back are reused by later imports). NL_ENOENT naming it when there is none. */
int nl_dataset_remove(struct nl_store *s, const char *name, struct nl_error *err);

int nl_dataset_load(struct nl_store *s, const char *name, struct nl_dataset **out,
                    struct nl_error *err);
void nl_dataset_free(struct nl_dataset *d);

/* x (n, sample) = normalised samples idx[0..n) of the split; y (n) = their labels (y may be NULL).
 */
void nl_dataset_batch(const struct nl_dataset *d, enum nl_split split, const uint32_t *idx, int n,
                      float *x, int32_t *y);

/* Reads a PNG or JPEG file and turns it into one normalised sample of d's shape, converted,
 * oriented, resized and cropped as the dataset's import did. x has nl_shape_size(d->shape)
 * floats. */
int nl_dataset_sample_from_image(const struct nl_dataset *d, const char *path, float *x,
                                 struct nl_error *err);

/* x (n) = the standardised regression targets of samples idx[0..n) of the split. */
void nl_dataset_targets(const struct nl_dataset *d, enum nl_split split, const uint32_t *idx, int n,
                        float *t);

/* Rows of a table (CSV) dataset for prediction, preprocessed as its import did: the columns
 * recorded in the dataset's preprocessing (kinds, categorical levels, fill values), then the
 * per-feature standardisation. A row holds every feature column, in the import's order, and
 * optionally the target column where the import had it. A categorical level the import did not
 * see in the train split becomes the column's "other" slot, reported once per column through
 * warn; an empty field is filled as the import's --missing said (drop and error refuse it). */
struct nl_table;
int nl_table_open(struct nl_table **out, const struct nl_dataset *d, nl_warn_fn warn, void *ud,
                  struct nl_error *err);
void nl_table_free(struct nl_table *t);
/* The columns of the source file, in its order: what the import made of each, and the train
 * split's statistics (numeric columns and the target: of the values present; categorical: the
 * level count and the levels kept, most frequent first). */
struct nl_table_column {
    const char *name; /* the header's, or "column N" */
    const char *kind; /* "numeric", "categorical", "target" (regression) or "label" */
    long missing;     /* empty fields over all rows */
    double mean, std, min, max;
    int levels;             /* categorical: distinct values in the train split */
    int kept;               /* categorical: levels with their own one-hot slot */
    const char *const *top; /* (kept) those levels */
    const char *fill;       /* what fills an empty field ("3.5", "red"), or NULL */
    int features;           /* model inputs it becomes (0 for the target) */
    int embedded;           /* categorical: one input, a row id for embed-columns */
    int row;                /* embedded: its first row (the unknown level's) in the table */
};
/* The dataset's embedded columns (core/import/csv.c): *columns inputs from *first, ids into a table
 * of *rows rows (an embed-columns layer's columns= and vocab=). 0 when it has none. */
int nl_table_embedded(const struct nl_table *t, int *first, int *columns, int *rows);
int nl_table_columns(const struct nl_table *t);
void nl_table_column(const struct nl_table *t, int col, struct nl_table_column *out);
/* One row given as text ("v1,v2,...", the import's separator or a comma): x (shape) the
 * normalised sample; *target the row's target when it has one (NAN otherwise; for a
 * classification dataset the class index as a float, NAN when unknown). where names the row in
 * errors ("--row", "FILE:LINE"). */
int nl_table_row_text(struct nl_table *t, const char *text, const char *where, float *x,
                      double *target, struct nl_error *err);
/* Every data row of a CSV file (a header row, when the first row is the import's header or has
 * no number, is skipped): fn(ud, line, x, target) per row; a non-zero return stops with it. */
int nl_table_read_csv(struct nl_table *t, const char *path,
                      int (*fn)(void *ud, long line, const float *x, double target), void *ud,
                      struct nl_error *err);
/* Text datasets: text (len bytes of UTF-8) as one sample x (1, 1, L) of d's token ids, split
 * into words, lower-cased and looked up as the import did (core/import/textdata.c); *unknown (may
 * be NULL) receives the number of its words outside the vocabulary. Errors for invalid UTF-8 name
 * the byte. */
int nl_dataset_sample_from_text(const struct nl_dataset *d, const char *text, size_t len, float *x,
                                int *unknown, struct nl_error *err);

/* The tokenizer of text datasets: calls word(ud, w, n) with each word of s (len bytes of UTF-8),
 * lower-cased, in order. Returns 0, or the 1-based byte offset of the first invalid UTF-8
 * sequence (no word after it is given). */
size_t nl_text_words(const char *s, size_t len, void (*word)(void *ud, const char *w, size_t n),
                     void *ud);
/* Turns n raw feature values (a CSV row's, in the file's units) into one normalised sample of a
 * float dataset, standardised as its batches are: x = (v - mean) / std per feature. n must be
 * the dataset's feature count. */
int nl_dataset_sample_from_values(const struct nl_dataset *d, const float *v, int n, float *x,
                                  struct nl_error *err);

/* Training-time augmentation, applied to normalised training batches only, in torchvision's
 * order: random resized crop, horizontal flip, colour jitter, then the shift (crop:P). */
struct nl_augment {
    int flip; /* mirror left-right with probability 1/2 */
    int crop; /* shift by up to this many pixels each way, filling with 0 (the mean) */
    /* Random resized crop (torchvision's RandomResizedCrop): a box of a uniform share in
     * [scale_min, scale_max] of the area and a log-uniform aspect in [ratio_min, ratio_max],
     * resized bilinearly back to the sample's size. scale_max 0: off. */
    float scale_min, scale_max, ratio_min, ratio_max;
    /* Colour jitter (torchvision's ColorJitter): factors uniform in [max(0, 1 - v), 1 + v], applied
     * in a random order on pixels in [0, 1]. 0: off. */
    float brightness, contrast, saturation;
};

/* Parses a comma-separated list: "flip", "crop:P", "resized-crop" (scale 0.08-1, ratio 3/4-4/3),
 * "resized-crop:SMIN-SMAX" or "resized-crop:SMIN-SMAX:RMIN-RMAX", "brightness:B",
 * "contrast:C", "saturation:S" ("none" or "" for nothing). nl_augment_format writes the same
 * text back (floats exactly), for run settings and cluster workers. */
int nl_augment_parse(struct nl_augment *a, const char *text, struct nl_error *err);
void nl_augment_format(const struct nl_augment *a, char *buf, size_t size);
int nl_augment_active(const struct nl_augment *a);
/* x (n, shape) in place, with rng; mean and std (shape.c) are the dataset's normalisation, for
 * the colour jitter, which works on pixels. Allocates nothing. */
void nl_augment_batch(const struct nl_augment *a, struct nl_shape shape, const float *mean,
                      const float *std, float *x, int n, struct nl_rng *rng);
/* A preview of what training sees: the first n train samples of an 8-bit dataset, normalised,
 * augmented by a with a generator seeded by seed, and turned back into 8-bit pixels (n, shape)
 * (values outside [0, 255] clamped), for the window's Datasets page. */
int nl_augment_preview(const struct nl_dataset *d, const struct nl_augment *a, uint64_t seed, int n,
                       uint8_t *pixels, struct nl_error *err);

#endif
