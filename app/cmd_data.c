/* The dataset commands: import, datasets, show, rm. */
#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "nnlab/alloc.h"
#include "nnlab/clock.h"
#include "nnlab/dataset.h"
#include "nnlab/text.h"

/* Import progress: a bar with files (or rows) per second on a terminal, nothing otherwise. */
struct import_progress {
    int tty;
    double start, last_draw;
    int drawn;
};

static int import_progress(void *ud, uint64_t done, uint64_t total)
{
    struct import_progress *p = ud;
    const int width = 24;

    if (p->tty && !g.json && !g.quiet) {
        double t = nl_now();
        if (t - p->last_draw >= 0.1 || done == total) {
            double rate = t > p->start ? (double)done / (t - p->start) : 0;
            int filled = total ? (int)((double)done / (double)total * width + 0.5) : 0;
            p->last_draw = t;
            p->drawn = 1;
            fputs("\r\033[Kimporting [", stdout);
            for (int i = 0; i < width; i++)
                fputc(i < filled ? '#' : '.', stdout);
            printf("] %3d%% %llu/%llu %.0f/s",
                   total ? (int)(100.0 * (double)done / (double)total) : 0,
                   (unsigned long long)done, (unsigned long long)total, rate);
            fflush(stdout);
        }
    }
    return interrupted ? 1 : 0;
}

/* Warnings during an import; skipped files are counted for the summary. */
struct import_warn {
    struct import_progress *progress;
    unsigned skipped;
};

static void import_warn(void *ud, const char *msg)
{
    struct import_warn *w = ud;

    if (w->progress->drawn) {
        fputs("\r\033[K", stdout);
        fflush(stdout);
    }
    if (strncmp(msg, "skipped ", 8) == 0)
        w->skipped++;
    warn_cb(NULL, msg);
}

/* import's options into io; EXIT_OK, or the usage error's exit status. */
static int parse_import_opts(int argc, char **argv, struct nl_import_opts *io)
{
    static const struct option opts[] = {
        {"val", required_argument, NULL, 'v'},
        {"test", required_argument, NULL, 'T'},
        {"seed", required_argument, NULL, 's'},
        {"gray", no_argument, NULL, 'g'},
        {"rgb", no_argument, NULL, 'r'},
        {"resize", required_argument, NULL, 'R'},
        {"label", required_argument, NULL, 'l'},
        {"skip-bad", no_argument, NULL, 'k'},
        {"normalize", required_argument, NULL, 'N'},
        {"normalise", required_argument, NULL, 'N'},
        {"task", required_argument, NULL, 'y'},
        {"categorical", required_argument, NULL, 'C'},
        {"embed-levels", required_argument, NULL, 'E'},
        {"missing", required_argument, NULL, 'M'},
        {"text", required_argument, NULL, 'x'},
        {"vocab", required_argument, NULL, 'V'},
        {"max-len", required_argument, NULL, 'L'},
        {"keep", required_argument, NULL, 'K'},
        {NULL, 0, NULL, 0},
    };
    struct nl_error err = {0};
    double f;
    long seed;
    int c;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'v':
        case 'T':
            if (!parse_float(optarg, 0.0, 0.9, &f))
                return usage_error("import", "--%s %s: want a fraction in [0, 0.9]",
                                   c == 'v' ? "val" : "test", optarg);
            if (c == 'v')
                io->val_fraction = (float)f;
            else
                io->test_fraction = (float)f;
            break;
        case 's':
            if (!parse_int(optarg, 0, 0x7fffffffL, &seed))
                return usage_error("import", "--seed %s: want a non-negative integer", optarg);
            io->seed = (uint64_t)seed;
            break;
        case 'g':
        case 'r':
            io->channels = c == 'g' ? 1 : 3;
            break;
        case 'R': {
            struct nl_resize r;
            if (nl_resize_parse(&r, optarg, &err) < 0)
                return usage_error("import", "--resize %s: %s", optarg, err.msg);
            io->width = r.w;
            io->height = r.h;
            io->shorter = r.shorter;
            io->crop_w = r.crop_w;
            io->crop_h = r.crop_h;
            break;
        }
        case 'N':
            if (strcmp(optarg, "dataset") == 0)
                io->normalize = NL_NORM_DATASET;
            else if (strcmp(optarg, "imagenet") == 0)
                io->normalize = NL_NORM_IMAGENET;
            else if (strcmp(optarg, "none") == 0)
                io->normalize = NL_NORM_NONE;
            else
                return usage_error("import", "--normalize %s: want dataset, imagenet or none",
                                   optarg);
            break;
        case 'l':
            io->label = optarg;
            break;
        case 'k':
            io->skip_bad = 1;
            break;
        case 'y':
            if (strcmp(optarg, "regression") != 0 && strcmp(optarg, "classification") != 0)
                return usage_error("import", "--task %s: want classification or regression",
                                   optarg);
            io->regression = strcmp(optarg, "regression") == 0;
            break;
        case 'C':
            io->categorical = optarg;
            break;
        case 'E': {
            long v;
            if (!parse_int(optarg, 0, 65536L, &v))
                return usage_error(
                    "import", "--embed-levels %s: want a whole number (0: never embed)", optarg);
            io->embed_levels = v > 0 ? (int)v : -1; /* 0 says never */
            break;
        }
        case 'M':
            if (nl_missing_parse(optarg) < 0)
                return usage_error("import", "--missing %s: want error, drop, mean, median or mode",
                                   optarg);
            io->missing = (enum nl_missing)nl_missing_parse(optarg);
            break;
        case 'x':
            io->text = optarg;
            break;
        case 'V':
        case 'L': {
            long v;
            if (!parse_int(optarg, 1, c == 'V' ? (1L << 22) : 65536L, &v))
                return usage_error("import", "--%s %s: want a positive integer",
                                   c == 'V' ? "vocab" : "max-len", optarg);
            if (c == 'V')
                io->vocab = (int)v;
            else
                io->max_len = (int)v;
            break;
        }
        case 'K':
            if (strcmp(optarg, "start") != 0 && strcmp(optarg, "end") != 0)
                return usage_error("import", "--keep %s: want start or end", optarg);
            io->keep_end = strcmp(optarg, "end") == 0;
            break;
        default:
            return option_error("import");
        }
    }
    if (io->val_fraction + io->test_fraction >= 0.95f)
        return usage_error("import", "--val and --test leave nothing to train on");
    if (argc - optind < 2)
        return usage_error("import", "needs a NAME and a SOURCE");
    return EXIT_OK;
}

/* The imported dataset d as a JSON line or a sentence; skipped files or rows were counted. */
static void print_imported(const struct nl_dataset_info *d, int regression, unsigned skipped,
                           double secs)
{
    if (g.json) {
        printf("{\"event\":\"imported\",\"dataset\":");
        json_str(stdout, d->name);
        printf(",\"kind\":");
        json_str(stdout, d->kind);
        printf(",\"shape\":[%d,%d,%d],\"classes\":%d,\"train\":%u,\"val\":%u,\"test\":%u,"
               "\"skipped\":%u,\"seconds\":",
               d->shape.c, d->shape.h, d->shape.w, d->nclasses, d->count[NL_TRAIN],
               d->count[NL_VAL], d->count[NL_TEST], skipped);
        json_num(stdout, secs);
        printf("}\n");
    } else if (!g.quiet) {
        char nb[512];
        char what[32];
        snprintf(what, sizeof what, regression ? "a regression target" : "%d classes", d->nclasses);
        printf("imported '%s': %u train, %u val, %u test samples of %dx%dx%d, %s (%.1f s)\n",
               nl_term_str(nb, sizeof nb, d->name), d->count[NL_TRAIN], d->count[NL_VAL],
               d->count[NL_TEST], d->shape.c, d->shape.h, d->shape.w, what, secs);
        if (skipped)
            printf("skipped %u bad file%s or row%s (listed above)\n", skipped,
                   skipped == 1 ? "" : "s", skipped == 1 ? "" : "s");
    }
}

int cmd_import(int argc, char **argv)
{
    struct import_progress prog = {.tty = isatty(STDOUT_FILENO)};
    struct import_warn wstate = {.progress = &prog};
    struct nl_import_opts io = {.seed = 1,
                                .warn = import_warn,
                                .warn_ud = &wstate,
                                .progress = import_progress,
                                .progress_ud = &prog};
    struct nl_error err = {0};
    struct nl_store *store;
    int rc = parse_import_opts(argc, argv, &io);

    if (rc != EXIT_OK)
        return rc;
    const char *name = argv[optind];
    if (open_store(&store, &err) < 0)
        return fail(&err);
    prog.start = nl_now();
    rc = nl_import(store, name, (const char *const *)argv + optind + 1, argc - optind - 1, &io,
                   &err);
    if (prog.drawn) {
        fputs(rc < 0 ? "\r\033[K" : "\n", stdout);
        fflush(stdout);
    }
    if (rc < 0) {
        nl_store_close(store);
        nl_error_prefix(&err, "import");
        return fail(&err);
    }
    double secs = nl_now() - prog.start;
    struct nl_dataset_info *list;
    int n;
    rc = nl_dataset_list(store, &list, &n, &err);
    nl_store_close(store);
    if (rc < 0)
        return fail(&err);
    for (int i = 0; i < n; i++)
        if (strcmp(list[i].name, name) == 0)
            print_imported(&list[i], io.regression, wstate.skipped, secs);
    nl_free(list);
    return EXIT_OK;
}

static void format_bytes(char *buf, size_t size, uint64_t b)
{
    if (b >= (1ull << 30))
        snprintf(buf, size, "%.1f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20))
        snprintf(buf, size, "%.1f MiB", (double)b / (double)(1ull << 20));
    else if (b >= 1024)
        snprintf(buf, size, "%.1f KiB", (double)b / 1024.0);
    else
        snprintf(buf, size, "%llu B", (unsigned long long)b);
}

int cmd_datasets(int argc, char **argv)
{
    struct nl_error err = {0};
    struct nl_store *store;
    struct nl_dataset_info *list;
    int n;

    if (argc > 1)
        return usage_error("datasets", "takes no arguments");
    if (open_store_read(&store, &err) < 0) {
        /* No store yet: nothing to list, and nothing created. */
        if (err.code != NL_ENOENT)
            return fail(&err);
        if (g.json)
            printf("{\"datasets\":[]}\n");
        else
            printf("no datasets yet: %s\n", err.msg);
        return EXIT_OK;
    }
    int rc = nl_dataset_list(store, &list, &n, &err);
    nl_store_close(store);
    if (rc < 0)
        return fail(&err);
    if (g.json) {
        printf("{\"datasets\":[");
        for (int i = 0; i < n; i++) {
            const struct nl_dataset_info *d = &list[i];
            printf("%s{\"name\":", i ? "," : "");
            json_str(stdout, d->name);
            printf(",\"kind\":");
            json_str(stdout, d->kind);
            /* A regression dataset has a target where a classification dataset has classes. */
            printf(",\"shape\":[%d,%d,%d],", d->shape.c, d->shape.h, d->shape.w);
            if (!d->regression)
                printf("\"classes\":%d,", d->nclasses);
            printf("\"train\":%u,\"val\":%u,\"test\":%u,\"bytes\":%llu,\"task\":\"%s\",",
                   d->count[NL_TRAIN], d->count[NL_VAL], d->count[NL_TEST],
                   (unsigned long long)d->bytes, d->regression ? "regression" : "classification");
            if (d->regression) {
                printf("\"target\":");
                json_str(stdout, d->target);
                printf(",");
            }
            printf("\"source\":");
            json_str(stdout, d->source);
            printf(",\"created\":");
            json_str(stdout, d->created);
            printf("}");
        }
        printf("]}\n");
    } else if (n == 0) {
        printf("no datasets yet: nnlab import NAME SOURCE, or nnlab demo\n");
    } else {
        printf("%-20s %-5s %-10s %-16s %7s %6s %6s %9s  %s\n", "NAME", "KIND", "SHAPE", "TASK",
               "TRAIN", "VAL", "TEST", "SIZE", "SOURCE");
        for (int i = 0; i < n; i++) {
            const struct nl_dataset_info *d = &list[i];
            char shape[48], size[32], nb[512], sb[4096], task[192], tb[160];
            snprintf(shape, sizeof shape, "%dx%dx%d", d->shape.c, d->shape.h, d->shape.w);
            format_bytes(size, sizeof size, d->bytes);
            if (d->regression)
                snprintf(task, sizeof task, "regress %s", nl_term_str(tb, sizeof tb, d->target));
            else
                snprintf(task, sizeof task, "%d class%s", d->nclasses,
                         d->nclasses == 1 ? "" : "es");
            printf("%-20s %-5s %-10s %-16s %7u %6u %6u %9s  %s\n",
                   nl_term_str(nb, sizeof nb, d->name), d->kind, shape, task, d->count[NL_TRAIN],
                   d->count[NL_VAL], d->count[NL_TEST], size,
                   nl_term_str(sb, sizeof sb, d->source));
        }
    }
    nl_free(list);
    return EXIT_OK;
}

/* A table (CSV) dataset's columns: kind, train statistics, missing values and fills. */
static void show_columns(const struct nl_dataset *d)
{
    struct nl_error err = {0};
    struct nl_table *t;
    char nb[512];

    if (strcmp(d->kind, "csv") != 0 || nl_table_open(&t, d, NULL, NULL, &err) < 0)
        return; /* imported before columns were recorded */
    printf("\n%-20s %-12s %s\n", "COLUMN", "KIND", "TRAIN STATISTICS");
    for (int i = 0; i < nl_table_columns(t); i++) {
        struct nl_table_column c;
        nl_table_column(t, i, &c);
        printf("%-20s %-12s ", nl_term_str(nb, sizeof nb, c.name), c.kind);
        if (strcmp(c.kind, "categorical") == 0) {
            printf("%d level%s", c.levels, c.levels == 1 ? "" : "s");
            for (int k = 0; k < c.kept && k < 8; k++)
                printf("%s%s", k ? ", " : ": ", nl_term_str(nb, sizeof nb, c.top[k]));
            if (c.kept > 8 || c.levels > c.kept)
                printf(", ...");
            if (c.embedded)
                printf(", embedded (%d rows)", c.kept + 1);
            else
                printf(" (%d inputs)", c.features);
        } else if (strcmp(c.kind, "label") != 0) {
            printf("mean %.4g, std %.4g, min %.4g, max %.4g", c.mean, c.std, c.min, c.max);
        }
        if (c.missing)
            printf("; %ld missing", c.missing);
        if (c.fill && c.missing)
            printf(" (filled with %s)", nl_term_str(nb, sizeof nb, c.fill));
        printf("\n");
    }
    int first, columns, rows;
    if (nl_table_embedded(t, &first, &columns, &rows)) {
        char where[64];
        if (columns == 1)
            snprintf(where, sizeof where, "1 column (input %d, the last)", first + 1);
        else
            snprintf(where, sizeof where, "%d columns (inputs %d to %d, the last)", columns,
                     first + 1, first + columns);
        printf("\nembedded: %s, %d rows in one table, each column's unknown level and train "
               "levels; a model starts with 'embed-columns DIM'\n",
               where, rows);
    }
    nl_table_free(t);
}

/* A text dataset's vocabulary: size, coverage of the train split (from the preprocessing
 * record) and the most frequent words with their counts. */
static void show_vocab(const struct nl_dataset *d)
{
    const char *cov = strstr(d->preprocessing, "\"coverage\":");
    const char *len = strstr(d->preprocessing, "\"max_len\":");
    char wb[256];

    printf("vocabulary: %d tokens (padding, out-of-vocabulary and %d words)", d->nvocab,
           d->nvocab - 2);
    if (cov)
        printf(", covering %.1f%% of the train split's words", 100 * atof(cov + 11));
    printf("\n");
    if (len)
        printf("documents: %d tokens each, keeping the %s of longer ones\n", atoi(len + 10),
               d->keep_end ? "end" : "start");
    printf("most frequent:");
    for (int i = 2; i < d->nvocab && i < 22; i++)
        printf(" %s (%lld)", nl_term_str(wb, sizeof wb, d->vocab[i]), (long long)d->vocab_count[i]);
    printf("\n");
}

int cmd_show(int argc, char **argv)
{
    struct nl_error err = {0};
    struct nl_store *store;
    struct nl_dataset *d;

    if (argc != 2)
        return usage_error("show", "needs one dataset NAME");
    if (open_store_read(&store, &err) < 0)
        return fail(&err);
    int rc = nl_dataset_load(store, argv[1], &d, &err);
    nl_store_close(store);
    if (rc < 0)
        return fail(&err);

    uint32_t *counts = nl_calloc((size_t)d->nclasses * NL_NSPLITS, sizeof *counts);
    if (!counts) {
        nl_dataset_free(d);
        return failf("out of memory");
    }
    for (int s = 0; s < NL_NSPLITS; s++)
        for (uint32_t i = 0; i < d->split[s].n; i++)
            counts[d->split[s].y[i] * NL_NSPLITS + s]++;

    if (g.json) {
        printf("{\"name\":");
        json_str(stdout, d->name);
        printf(",\"kind\":");
        json_str(stdout, d->kind);
        printf(",\"source\":");
        json_str(stdout, d->source);
        printf(",\"shape\":[%d,%d,%d],\"dtype\":\"%s\",\"train\":%u,\"val\":%u,\"test\":%u",
               d->shape.c, d->shape.h, d->shape.w, d->dtype == NL_U8 ? "u8" : "f32",
               d->split[NL_TRAIN].n, d->split[NL_VAL].n, d->split[NL_TEST].n);
        printf(",\"mean\":[");
        for (int i = 0; i < d->nnorm; i++) {
            printf(i ? "," : "");
            json_num(stdout, d->mean[i]);
        }
        printf("],\"std\":[");
        for (int i = 0; i < d->nnorm; i++) {
            printf(i ? "," : "");
            json_num(stdout, d->std[i]);
        }
        /* The preprocessing record is JSON already. */
        if (d->nvocab) {
            /* Text: the vocabulary's size and its most frequent words (ids 2..). */
            printf("],\"vocab\":%d,\"top_words\":[", d->nvocab);
            for (int i = 2; i < d->nvocab && i < 22; i++) {
                printf("%s{\"id\":%d,\"word\":", i > 2 ? "," : "", i);
                json_str(stdout, d->vocab[i]);
                printf(",\"count\":%lld}", (long long)d->vocab_count[i]);
            }
        }
        printf("],\"preprocessing\":%s,\"classes\":[",
               d->preprocessing[0] == '{' ? d->preprocessing : "{}");
        for (int k = 0; k < d->nclasses; k++) {
            printf("%s{\"label\":%d,\"name\":", k ? "," : "", k);
            json_str(stdout, d->class_names[k]);
            printf(",\"train\":%u,\"val\":%u,\"test\":%u}", counts[k * NL_NSPLITS + NL_TRAIN],
                   counts[k * NL_NSPLITS + NL_VAL], counts[k * NL_NSPLITS + NL_TEST]);
        }
        printf("]}\n");
    } else {
        char nb[512], sb[4096];
        printf("%s: %s dataset from %s\n", nl_term_str(nb, sizeof nb, d->name), d->kind,
               nl_term_str(sb, sizeof sb, d->source));
        if (d->regression)
            printf("shape %dx%dx%d (%s), regression of '%s'\n", d->shape.c, d->shape.h, d->shape.w,
                   d->dtype == NL_U8 ? "8-bit" : "float",
                   nl_term_str(nb, sizeof nb, d->class_names[0]));
        else
            printf("shape %dx%dx%d (%s), %d classes\n", d->shape.c, d->shape.h, d->shape.w,
                   d->dtype == NL_U8 ? "8-bit" : "float", d->nclasses);
        printf("samples: %u train, %u val, %u test\n", d->split[NL_TRAIN].n, d->split[NL_VAL].n,
               d->split[NL_TEST].n);
        if (d->nvocab)
            show_vocab(d);
        for (int i = 0; i < d->nnorm && i < 16 && !d->nvocab; i++)
            printf("%s %d: mean %.4f, std %.4f\n", d->dtype == NL_F32 ? "feature" : "channel", i,
                   d->mean[i], d->std[i]);
        if (d->nnorm > 16)
            printf("(%d more; see --json)\n", d->nnorm - 16);
        printf("preprocessing: ");
        nl_term_fputs(stdout, d->preprocessing);
        printf("\n");
        show_columns(d);
        if (d->regression)
            printf("\nregression target '%s': %u train, %u val, %u test\n",
                   nl_term_str(nb, sizeof nb, d->class_names[0]), counts[NL_TRAIN], counts[NL_VAL],
                   counts[NL_TEST]);
        else
            printf("\n%5s  %-20s %7s %7s %7s\n", "LABEL", "CLASS", "TRAIN", "VAL", "TEST");
        for (int k = 0; k < d->nclasses && !d->regression; k++)
            printf("%5d  %-20s %7u %7u %7u\n", k, nl_term_str(nb, sizeof nb, d->class_names[k]),
                   counts[k * NL_NSPLITS + NL_TRAIN], counts[k * NL_NSPLITS + NL_VAL],
                   counts[k * NL_NSPLITS + NL_TEST]);
    }
    nl_free(counts);
    nl_dataset_free(d);
    return EXIT_OK;
}

int cmd_rm(int argc, char **argv)
{
    struct nl_error err = {0};
    struct nl_store *store;

    if (argc != 2)
        return usage_error("rm", "needs one dataset NAME");
    if (open_store(&store, &err) < 0)
        return fail(&err);
    long long unused = 0;
    int rc = nl_dataset_remove(store, argv[1], &err);
    if (rc == 0)
        rc = nl_store_reclaim(store, &unused, &err);
    nl_store_close(store);
    if (rc < 0)
        return fail(&err);
    if (g.json) {
        printf("{\"removed\":");
        json_str(stdout, argv[1]);
        printf("}\n");
    } else if (!g.quiet) {
        char nb[512];
        printf("removed dataset '%s'\n", nl_term_str(nb, sizeof nb, argv[1]));
        if (unused >= (16ll << 20))
            printf("%.0f MiB stay free inside the store file, which predates incremental vacuum; "
                   "to shrink it, with no nnlab running: sqlite3 STORE.db 'VACUUM'\n",
                   (double)unused / (1 << 20));
    }
    return EXIT_OK;
}
