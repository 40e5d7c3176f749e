/* The bench command: training (and with --mode, inference) speed of models on one thread and on
 * all, beside this machine's sgemm rate (nl_sgemm's: OpenBLAS's, or nnlab's own kernels where
 * OpenBLAS runs narrower vectors than the CPU has; the kernels line printed says which). The
 * shipped image models run on Fashion-MNIST, the text models (embedbag, textcnn) on synthetic
 * documents; "resnet18-S" is torchvision's ResNet-18 (the shipped data/models/resnet18) on
 * synthetic 3xSxS images. The measuring is in core/engine/bench.c; this file finds the data, runs
 * the grid and prints a table or one JSON object.
 *
 * Scaling: each (model, mode, batch) runs on one thread and on all, one right after the other in
 * every round, the one-thread run first in odd rounds and last in even ones, so that a load that
 * rises or falls across a round weighs on both alike. The speedup of all threads over one is then
 * taken round by round, from the two runs next to each other, and reported as the median of the
 * rounds' ratios with their lowest and highest: on a shared machine this holds still where the
 * ratio of the two median rows, taken from different rounds, does not. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "nnlab/alloc.h"
#include "nnlab/bench.h"
#include "nnlab/dataset.h"
#include "nnlab/kernels.h"
#include "nnlab/model.h"
#include "nnlab/spec.h"
#include "nnlab/text.h"

#define BENCH_DATA  "/usr/share/datasets/fashion-mnist"
#define SGEMM_SIZE  512
#define MAX_MODELS  8
#define MAX_RESULTS (MAX_MODELS * 2 * 2 * 2) /* models x batches x thread counts x modes */
#define MAX_REPEAT  9
#define SYNTH_STEPS 8     /* synthetic datasets hold this many batches */
#define TEXT_LEN    200   /* tokens of a synthetic document (IMDB's reviews: 230 words median) */
#define TEXT_VOCAB  20002 /* the default --vocab 20000, with padding and out-of-vocabulary */

/* One model of the grid: its spec and the data it runs on (the shared Fashion-MNIST, or a
 * synthetic dataset of its own). */
struct bench_model {
    const char *name;
    struct nl_model *m;
    struct nl_dataset *synthetic; /* owned; NULL on Fashion-MNIST */
    const struct nl_dataset *d;
};

struct row {
    const char *model;
    struct nl_model *m;
    const struct nl_dataset *d;
    int infer;    /* 0: training, 1: inference */
    double flops; /* per sample */
    int batch, threads;
    struct nl_bench_train runs[MAX_REPEAT]; /* one per round */
    struct nl_bench_train r;                /* the round of median speed */
};

/* The run of median images/s among n (the lower middle one when n is even). */
static struct nl_bench_train median_run(const struct nl_bench_train *runs, int n)
{
    int order[MAX_REPEAT];

    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i;
             j > 0 && runs[order[j]].images_per_second < runs[order[j - 1]].images_per_second;
             j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    return runs[order[(n - 1) / 2]];
}

/* The median of n values (the lower middle one when n is even), and their least and greatest. */
static double median_of(const double *v, int n, double *lo, double *hi)
{
    double s[MAX_REPEAT];

    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && s[j - 1] > v[i]; j--)
            s[j] = s[j - 1];
        s[j] = v[i];
    }
    *lo = s[0];
    *hi = s[n - 1];
    return s[(n - 1) / 2];
}

/* Round k's speedup of row w (all threads) over row one (one thread) of the same model, mode and
 * batch: the ratio of the two runs of that round. */
static double round_speedup(const struct row *one, const struct row *w, int k)
{
    const double base = one->runs[k].images_per_second;
    return base > 0.0 ? w->runs[k].images_per_second / base : 0.0;
}

/* The median of the rounds' speedups of w over one, with the least and greatest. */
static double speedup(const struct row *one, const struct row *w, int repeat, double *lo,
                      double *hi)
{
    double v[MAX_REPEAT];

    for (int k = 0; k < repeat; k++)
        v[k] = round_speedup(one, w, k);
    return median_of(v, repeat, lo, hi);
}

static void print_row(const struct row *w, const struct nl_bench_train *r,
                      const struct nl_bench_sgemm *sg)
{
    double peak = r->threads > 1 ? sg->all_gflops : sg->one_gflops;

    char mb[128];
    printf("%-14s %-5s %6d %8d %10.0f %10.2f %9.1f %7.0f%% %12.0f\n",
           nl_term_str(mb, sizeof mb, w->model), w->infer ? "infer" : "train", r->batch, r->threads,
           r->images_per_second, w->flops / 1e6, r->gflops, 100.0 * r->gflops / peak,
           r->peak_rss_mb);
    fflush(stdout);
}

/* The CPU's model name from /proc/cpuinfo, or "unknown". */
static void cpu_model(char *buf, size_t size)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];

    snprintf(buf, size, "unknown");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            colon += 1 + strspn(colon + 1, " \t");
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(buf, size, "%s", colon);
            break;
        }
    }
    fclose(f);
}

/* The Fashion-MNIST data (for the rows of models that are not "resnet18-S"): the store's 'fashion'
 * dataset when the store exists and holds one; otherwise Fashion-MNIST imported from dir into a
 * temporary store that is removed again. *source says which, for the report. */
static int load_data(struct nl_dataset **d, const char *dir, char *source, size_t size,
                     struct nl_error *err)
{
    char path[4200], tmp[4096];
    struct nl_store *store;
    struct stat st;
    int rc;

    *d = NULL;
    if (g.db_path) {
        snprintf(path, sizeof path, "%s", g.db_path);
    } else {
        rc = nl_store_default_path(path, sizeof path, err);
        if (rc < 0)
            return rc;
    }
    if (stat(path, &st) == 0) {
        rc = nl_store_open(&store, path, err);
        if (rc < 0)
            return rc;
        rc = nl_dataset_exists(store, "fashion", err);
        if (rc > 0)
            rc = nl_dataset_load(store, "fashion", d, err);
        nl_store_close(store);
        if (rc < 0)
            return rc;
        if (*d) {
            snprintf(source, size, "dataset 'fashion' of %s", path);
            return 0;
        }
    }

    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return nl_error_set(err, NL_ENOENT,
                            "bench: no 'fashion' dataset in the store and no Fashion-MNIST in %s "
                            "(apt-get install dataset-fashion-mnist, or give --data-dir)",
                            dir);
    const char *tmpdir = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/nnlab-bench-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(tmp))
        return nl_error_set(err, NL_EIO, "bench: cannot create a temporary folder %s", tmp);
    snprintf(path, sizeof path, "%s/bench.db", tmp);
    rc = nl_store_open(&store, path, err);
    if (rc == 0) {
        struct nl_import_opts io = {.seed = 1, .warn = warn_cb};
        const char *paths[] = {dir};
        rc = nl_import_idx(store, "fashion", paths, 1, &io, err);
        if (rc == 0)
            rc = nl_dataset_load(store, "fashion", d, err);
        nl_store_close(store);
    }
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        char file[4300];
        snprintf(file, sizeof file, "%s%s", path, suffixes[i]);
        unlink(file);
    }
    rmdir(tmp);
    if (rc == 0)
        snprintf(source, size, "Fashion-MNIST from %s, imported into a temporary store", dir);
    return rc;
}

/* "resnet18-S" with 16 <= S <= 1024: the side S of its synthetic images; 0 for other names. */
static int synthetic_side(const char *name)
{
    long side;

    if (strncmp(name, "resnet18-", 9) != 0 || !parse_int(name + 9, 16, 1024, &side))
        return 0;
    return (int)side;
}

/* Whether the spec of that name (shipped or a path) starts from token ids: an embedding. */
static int text_model(const char *name)
{
    struct nl_spec *spec;
    struct nl_error ignored = {0};
    int text = 0;

    if (synthetic_side(name) || nl_spec_load(&spec, name, NULL, NULL, &ignored) < 0)
        return 0;
    for (int i = 0; i < spec->nlayers; i++)
        text |= strcmp(spec->layers[i].ops->kind, "embedding") == 0;
    nl_spec_free(spec);
    return text;
}

/* Builds b's model: the shipped ResNet-18 (data/models/resnet18) on a synthetic dataset of
 * max_batch * SYNTH_STEPS images for "resnet18-S", a text model (embedbag, textcnn) on
 * TEXT_LEN-token synthetic documents of a TEXT_VOCAB vocabulary, else a spec by name or path on
 * fashion. */
static int build(struct bench_model *b, const struct nl_dataset *fashion, int max_batch,
                 struct nl_error *err)
{
    struct nl_spec *spec;
    int side = synthetic_side(b->name), rc;

    if (side > 0) {
        rc = nl_spec_load(&spec, "resnet18", warn_cb, NULL, err); /* data/models/resnet18 */
        if (rc == 0)
            rc = nl_bench_synthetic(&b->synthetic, (struct nl_shape){3, side, side}, 10,
                                    (uint32_t)max_batch * SYNTH_STEPS, 1, err);
        b->d = b->synthetic;
    } else if (text_model(b->name)) {
        rc = nl_spec_load(&spec, b->name, warn_cb, NULL, err);
        if (rc == 0)
            rc = nl_bench_synthetic_text(&b->synthetic, TEXT_LEN, TEXT_VOCAB, 2,
                                         (uint32_t)max_batch * SYNTH_STEPS, 1, err);
        b->d = b->synthetic;
    } else {
        rc = nl_spec_load(&spec, b->name, warn_cb, NULL, err);
        b->d = fashion;
    }
    if (rc < 0)
        return rc;
    nl_spec_use(spec, b->d);
    rc = nl_model_build(&b->m, spec, b->d->shape, b->d->nclasses, err);
    nl_spec_free(spec);
    return rc;
}

static void print_json(const char *cpu, int cores, const char *source, const struct nl_dataset *d,
                       int steps, int warmup, int repeat, const struct nl_bench_sgemm *sg,
                       const struct row *rows, int nrows, const double load[2][3])
{
    printf("{\"event\":\"bench\",\"cpu\":");
    json_str(stdout, cpu);
    printf(",\"cores\":%d,\"data\":", cores);
    json_str(stdout, source);
    printf(",\"train_samples\":%u,\"steps\":%d,\"warmup_steps\":%d,\"rounds\":%d",
           d ? d->split[NL_TRAIN].n : 0, steps, warmup, repeat);
    printf(",\"sgemm\":{\"size\":%d,\"gflops_1_thread\":", sg->size);
    json_num(stdout, sg->one_gflops);
    printf(",\"threads\":%d,\"gflops_all_threads\":", sg->threads);
    json_num(stdout, sg->all_gflops);
    printf(",\"round_trip_ns\":");
    json_num(stdout, sg->round_trip_ns);
    printf("},\"results\":[");
    for (int i = 0; i < nrows; i++) {
        const struct row *w = &rows[i];
        printf("%s{\"model\":", i ? "," : "");
        json_str(stdout, w->model);
        printf(",\"batch\":%d,\"threads\":%d,\"steps\":%d,\"mode\":\"%s\",\"seconds\":", w->r.batch,
               w->r.threads, w->r.steps, w->infer ? "infer" : "train");
        json_num(stdout, w->r.seconds);
        printf(",\"images_per_second\":");
        json_num(stdout, w->r.images_per_second);
        printf(",\"data\":");
        json_str(stdout, w->d->name);
        printf(",\"mflop_per_image\":");
        json_num(stdout, w->flops / 1e6);
        printf(",\"gflops\":");
        json_num(stdout, w->r.gflops);
        printf(",\"peak_rss_mb\":");
        json_num(stdout, w->r.peak_rss_mb);
        printf(",\"allocations_per_step\":");
        json_num(stdout, w->r.allocs_per_step);
        printf(",\"images_per_second_rounds\":[");
        for (int k = 0; k < repeat; k++) {
            printf("%s", k ? "," : "");
            json_num(stdout, w->runs[k].images_per_second);
        }
        printf("]");
        if (w->threads > 1 && i > 0) { /* its one-thread row is the one before it */
            double lo, hi;
            printf(",\"speedup_over_1_thread\":");
            json_num(stdout, speedup(&rows[i - 1], w, repeat, &lo, &hi));
            printf(",\"speedup_rounds\":[");
            for (int k = 0; k < repeat; k++) {
                printf("%s", k ? "," : "");
                json_num(stdout, round_speedup(&rows[i - 1], w, k));
            }
            printf("]");
        }
        printf("}");
    }
    printf("],\"process_peak_rss_mb\":");
    json_num(stdout, nl_peak_rss_mb());
    printf(",\"load_average_before\":[%.2f,%.2f,%.2f],\"load_average_after\":[%.2f,%.2f,%.2f]}\n",
           load[0][0], load[0][1], load[0][2], load[1][0], load[1][1], load[1][2]);
}

/* Splits a comma list of model names into names (pointing into list, which is cut). */
static int split_models(char *list, const char **names, int max)
{
    int n = 0;

    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == max)
            return -1;
        names[n++] = tok;
    }
    return n;
}

static void free_models(struct bench_model *models, int n)
{
    for (int i = 0; i < n; i++) {
        nl_model_free(models[i].m);
        nl_dataset_free(models[i].synthetic);
    }
}

/* What bench was asked: the grid of models, batches, thread counts and modes, and how long. */
struct bench_args {
    const char *names[MAX_MODELS];
    char model_list[1024]; /* --model's list, cut into names */
    int nmodels, batches[2], nbatches, modes[2], nmodes;
    long steps, warmup, threads, repeat;
    const char *dir;
    int layers; /* --layers: where each step's time goes, layer by layer */
};

/* bench's options into a; EXIT_OK, or the usage error's exit status. */
static int parse_bench_args(int argc, char **argv, struct bench_args *a)
{
    static const struct option opts[] = {
        {"steps", required_argument, NULL, 's'},   {"warmup", required_argument, NULL, 'w'},
        {"model", required_argument, NULL, 'm'},   {"batch", required_argument, NULL, 'b'},
        {"threads", required_argument, NULL, 't'}, {"data-dir", required_argument, NULL, 'D'},
        {"repeat", required_argument, NULL, 'r'},  {"mode", required_argument, NULL, 'M'},
        {"layers", no_argument, NULL, 'L'},        {NULL, 0, NULL, 0},
    };
    long v;
    int c;

    *a = (struct bench_args){.names = {"lenet", "mlp"},
                             .nmodels = 2,
                             .batches = {64, 256},
                             .nbatches = 2,
                             .modes = {0, 1},
                             .nmodes = 1,
                             .steps = 50,
                             .warmup = 5,
                             .repeat = 1,
                             .dir = BENCH_DATA};
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            if (!parse_int(optarg, 1, 1000000, &a->steps))
                return usage_error("bench", "--steps %s: want a whole number from 1 to 1000000",
                                   optarg);
            break;
        case 'w':
            if (!parse_int(optarg, 0, 1000000, &a->warmup))
                return usage_error("bench", "--warmup %s: want a whole number from 0 to 1000000",
                                   optarg);
            break;
        case 'm':
            snprintf(a->model_list, sizeof a->model_list, "%s", optarg);
            a->nmodels = split_models(a->model_list, a->names, MAX_MODELS);
            if (a->nmodels < 1)
                return usage_error("bench", "--model %s: want 1 to %d names, separated by commas",
                                   optarg, MAX_MODELS);
            break;
        case 'b':
            if (!parse_int(optarg, 1, 1 << 20, &v))
                return usage_error("bench", "--batch %s: want a whole number from 1 to 1048576",
                                   optarg);
            a->batches[0] = (int)v;
            a->nbatches = 1;
            break;
        case 't':
            if (!parse_int(optarg, 1, 1024, &a->threads))
                return usage_error("bench", "--threads %s: want a whole number from 1 to 1024",
                                   optarg);
            break;
        case 'D':
            a->dir = optarg;
            break;
        case 'r':
            if (!parse_int(optarg, 1, MAX_REPEAT, &a->repeat))
                return usage_error("bench", "--repeat %s: want a whole number from 1 to %d", optarg,
                                   MAX_REPEAT);
            break;
        case 'M':
            if (strcmp(optarg, "train") == 0 || strcmp(optarg, "infer") == 0) {
                a->modes[0] = optarg[0] == 'i';
                a->nmodes = 1;
            } else if (strcmp(optarg, "both") == 0) {
                a->modes[0] = 0;
                a->modes[1] = 1;
                a->nmodes = 2;
            } else {
                return usage_error("bench", "--mode %s: want train, infer or both", optarg);
            }
            break;
        case 'L':
            a->layers = 1;
            break;
        default:
            return option_error("bench");
        }
    }
    if (optind < argc)
        return usage_error("bench", "unexpected argument '%s'", argv[optind]);
    return EXIT_OK;
}

/* The report's head for people: the data, the machine, the sgemm rate, and the table's header.
 * Paths, model names and the CPU's name (from /proc/cpuinfo) are escaped for the terminal. */
static void print_header(const struct bench_args *a, const struct bench_model *models,
                         const struct nl_dataset *d, const char *source, const char *cpu,
                         const struct nl_bench_sgemm *sg, const double load[3])
{
    char tb[1024];
    if (d)
        printf("data: %s (%u training images)\n", nl_term_str(tb, sizeof tb, source),
               d->split[NL_TRAIN].n);
    for (int mi = 0; mi < a->nmodels; mi++)
        if (models[mi].synthetic && models[mi].d->nvocab)
            printf("data of %s: %u synthetic documents of %d token ids (random words of a "
                   "vocabulary of %d)\n",
                   models[mi].name, models[mi].d->split[NL_TRAIN].n, models[mi].d->shape.w,
                   models[mi].d->nvocab);
        else if (models[mi].synthetic)
            printf("data of %s: %u synthetic %dx%dx%d images (uniform random pixels)\n",
                   nl_term_str(tb, sizeof tb, models[mi].name), models[mi].d->split[NL_TRAIN].n,
                   models[mi].d->shape.c, models[mi].d->shape.h, models[mi].d->shape.w);
    printf("machine: %s, %d cores; load average %.2f %.2f %.2f\n", nl_term_str(tb, sizeof tb, cpu),
           sg->cores, load[0], load[1], load[2]);
    printf("%s\n", nl_kernels_blas_note());
    printf("sgemm %dx%d on those kernels: %.1f GFLOP/s on 1 thread, %.1f on %d at once\n", sg->size,
           sg->size, sg->one_gflops, sg->all_gflops, sg->threads);
    if (sg->round_trip_ns > 0)
        printf("a cache line from one thread to another and back: %.0f ns\n", sg->round_trip_ns);
    printf("training: SGD lr 0.05 momentum 0.9, %ld steps per row after %ld warm-up steps%s\n",
           a->steps, a->warmup, a->repeat > 1 ? ", median of the rounds" : "");
    if (a->nmodes == 2 || a->modes[0] == 1)
        printf("inference: forward passes without dropout, batchnorm on running statistics\n");
    printf("\n%-14s %-5s %6s %8s %10s %10s %9s %8s %12s\n", "MODEL", "MODE", "BATCH", "THREADS",
           "IMAGES/S", "MFLOP/IMG", "GFLOP/S", "OF_PEAK", "PEAK_RSS_MB");
    fflush(stdout);
}

/* The grid's rows, models x modes x batches x (1 thread, all threads); returns their count. */
static int make_rows(struct row *rows, const struct bench_args *a, const struct bench_model *models,
                     int threads)
{
    int nrows = 0;

    for (int mi = 0; mi < a->nmodels; mi++)
        for (int ki = 0; ki < a->nmodes; ki++)
            for (int bi = 0; bi < a->nbatches; bi++)
                for (int ti = 0; ti < (threads > 1 ? 2 : 1); ti++) {
                    struct row *w = &rows[nrows++];
                    memset(w, 0, sizeof *w);
                    w->model = models[mi].name;
                    w->m = models[mi].m;
                    w->d = models[mi].d;
                    w->infer = a->modes[ki];
                    w->flops = w->infer ? nl_model_infer_flops(w->m) : nl_model_train_flops(w->m);
                    w->batch = a->batches[bi];
                    w->threads = ti == 0 ? 1 : threads;
                }
    return nrows;
}

/* The speedup of all threads over one for each pair of rows (see the top of the file). */
static void print_speedups(const struct row *rows, int nrows, int repeat)
{
    if (nrows < 2 || rows[1].threads <= 1)
        return;
    printf("\nSPEEDUP: images/s on %d threads over 1 thread, %s\n", rows[1].threads,
           repeat > 1 ? "the median of the rounds' ratios (each from its round's two runs), "
                        "lowest and highest"
                      : "from the two runs");
    printf("%-14s %-5s %6s %8s%s\n", "MODEL", "MODE", "BATCH", "SPEEDUP",
           repeat > 1 ? "          ROUNDS" : "");
    for (int i = 1; i < nrows; i += 2) {
        double lo, hi;
        const double x = speedup(&rows[i - 1], &rows[i], repeat, &lo, &hi);
        char mb[128];
        printf("%-14s %-5s %6d %7.2fx", nl_term_str(mb, sizeof mb, rows[i].model),
               rows[i].infer ? "infer" : "train", rows[i].batch, x);
        if (repeat > 1)
            printf("   %5.2f to %5.2f", lo, hi);
        printf("\n");
    }
    fflush(stdout);
}

/* The grid, then `repeat` rounds over it: a load that comes and goes on a shared machine then
 * touches every row alike, and each row reports its median round. */
static int run_rows(struct row *rows, int nrows, const struct bench_args *a,
                    const struct nl_bench_sgemm *sg, struct nl_error *err)
{
    int rc = 0;
    /* rows come in pairs (one thread, all threads) where there are several threads: the pair's
     * order turns round every other round (see the top of the file) */
    const int pairs = nrows > 1 && rows[1].threads > 1;

    for (int rep = 0; rc == 0 && rep < a->repeat; rep++) {
        for (int k = 0; rc == 0 && k < nrows; k++) {
            const int i = pairs && rep % 2 == 1 ? k ^ 1 : k;
            struct row *w = &rows[i];
            if (interrupted) {
                rc = nl_error_set(err, NL_ECANCELED, "bench: interrupted");
                break;
            }
            if (w->infer)
                rc = nl_bench_infer(&w->runs[rep], w->m, w->d, w->batch, w->threads, (int)a->warmup,
                                    (int)a->steps, err);
            else
                rc = nl_bench_train(&w->runs[rep], w->m, w->d, w->batch, w->threads, (int)a->warmup,
                                    (int)a->steps, err);
            if (rc == 0 && a->repeat == 1 && !g.json)
                print_row(w, &w->runs[0], sg);
        }
    }
    for (int i = 0; rc == 0 && i < nrows; i++) {
        struct row *w = &rows[i];
        w->r = median_run(w->runs, (int)a->repeat);
        if (a->repeat > 1 && !g.json)
            print_row(w, &w->r, sg);
    }
    return rc;
}

/* --layers: one more run of each (model, mode, batch) on the many-thread rows' threads (or the
 * one), its layer times (nl_bench_layers) as a table, or as one JSON object a run
 * (after the report's), with the run's step time beside them. */
static int print_layers(const struct row *rows, int nrows, const struct bench_args *a,
                        struct nl_error *err)
{
    for (int i = 0; i < nrows; i++) {
        const struct row *w = &rows[i];
        if (i + 1 < nrows && rows[i + 1].threads > w->threads)
            continue; /* the pair's one-thread row; its many-thread one follows */
        const struct nl_model *m = w->m;
        struct nl_bench_layer *lt = nl_calloc((size_t)m->nlayers, sizeof *lt);
        struct nl_bench_train r;
        if (!lt)
            return nl_error_set(err, NL_ENOMEM, "out of memory for %d layers' times", m->nlayers);
        int rc = nl_bench_layers(&r, lt, w->infer, w->m, w->d, w->batch, w->threads, (int)a->warmup,
                                 (int)a->steps, err);
        if (rc < 0) {
            nl_free(lt);
            return rc;
        }
        double fwd = 0.0, bwd = 0.0;
        for (int k = 0; k < m->nlayers; k++) {
            fwd += lt[k].forward_ms;
            bwd += lt[k].backward_ms;
        }
        const double total = fwd + bwd;
        char mb[128], nb[128], ib[128];
        if (g.json) {
            printf("{\"event\":\"bench_layers\",\"model\":");
            json_str(stdout, w->model);
            printf(",\"mode\":\"%s\",\"batch\":%d,\"threads\":%d,\"images_per_second\":",
                   w->infer ? "infer" : "train", r.batch, r.threads);
            json_num(stdout, r.images_per_second);
            printf(",\"step_ms\":");
            json_num(stdout, r.seconds * 1e3 / r.steps);
            printf(",\"layers\":[");
        } else {
            printf("\nLAYERS of %s, %s, batch %d, %d thread%s (%.0f images/s): thread 0's wall "
                   "time per step, ms\n",
                   nl_term_str(mb, sizeof mb, w->model), w->infer ? "inference" : "training",
                   r.batch, r.threads, r.threads > 1 ? "s" : "", r.images_per_second);
            printf("%-22s %-13s %-12s %9s %9s %7s  %s\n", "LAYER", "KIND", "OUTPUT", "FORWARD",
                   w->infer ? "" : "BACKWARD", "SHARE", "HOW");
        }
        for (int k = 0; k < m->nlayers; k++) {
            const struct nl_layer *l = &m->layers[k];
            const int in = lt[k].runs_in;
            char how[160] = "";
            if (in != k)
                snprintf(how, sizeof how, "runs inside %s",
                         nl_term_str(ib, sizeof ib, m->layers[in].name));
            else if (strcmp(l->ops->kind, "conv") == 0 || strcmp(l->ops->kind, "gconv") == 0)
                snprintf(how, sizeof how, "%s%s", nl_lowering_name(lt[k].lower),
                         lt[k].turned ? ", products turned" : "");
            const double share = total > 0 ? (lt[k].forward_ms + lt[k].backward_ms) / total : 0;
            if (g.json) {
                printf("%s{\"layer\":", k ? "," : "");
                json_str(stdout, l->name);
                printf(",\"kind\":");
                json_str(stdout, l->ops->kind);
                printf(",\"in\":\"%dx%dx%d\",\"out\":\"%dx%dx%d\"", l->in[0].c, l->in[0].h,
                       l->in[0].w, l->out.c, l->out.h, l->out.w);
                if (l->kh > 0)
                    printf(",\"window\":\"%dx%d\"", l->kh, l->kw);
                printf(",\"forward_ms\":");
                json_num(stdout, lt[k].forward_ms);
                printf(",\"backward_ms\":");
                json_num(stdout, lt[k].backward_ms);
                printf(",\"runs_in\":");
                json_str(stdout, m->layers[in].name);
                printf(",\"how\":");
                json_str(stdout, how);
                printf("}");
                continue;
            }
            char shape[64];
            snprintf(shape, sizeof shape, "%dx%dx%d", l->out.c, l->out.h, l->out.w);
            printf("%-22s %-13s %-12s %9.3f", nl_term_str(nb, sizeof nb, l->name), l->ops->kind,
                   shape, lt[k].forward_ms);
            if (w->infer)
                printf(" %9s", "");
            else
                printf(" %9.3f", lt[k].backward_ms);
            printf(" %6.1f%%  %s\n", 100.0 * share, how);
        }
        if (g.json)
            printf("]}\n");
        else if (w->infer)
            printf("%-22s %-13s %-12s %9.3f %9s %6.1f%%\n", "all layers", "", "", fwd, "", 100.0);
        else
            printf("%-22s %-13s %-12s %9.3f %9.3f %6.1f%%\n", "all layers", "", "", fwd, bwd,
                   100.0);
        nl_free(lt);
        fflush(stdout);
    }
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    struct bench_args a;
    struct nl_error err = {0};
    int rc = parse_bench_args(argc, argv, &a);

    if (rc != EXIT_OK)
        return rc;
    char cpu[256], source[4400] = "";
    double load[2][3] = {{0}};
    struct nl_dataset *d = NULL;
    struct nl_bench_sgemm sg;
    struct bench_model models[MAX_MODELS];
    struct row rows[MAX_RESULTS];
    int nrows, fashion = 0, max_batch = 0;

    memset(models, 0, sizeof models);
    for (int mi = 0; mi < a.nmodels; mi++) {
        models[mi].name = a.names[mi];
        fashion |= synthetic_side(a.names[mi]) == 0 && !text_model(a.names[mi]);
    }
    for (int bi = 0; bi < a.nbatches; bi++)
        if (a.batches[bi] > max_batch)
            max_batch = a.batches[bi];
    cpu_model(cpu, sizeof cpu);
    if (getloadavg(load[0], 3) < 0)
        memset(load[0], 0, sizeof load[0]);
    if (fashion)
        rc = load_data(&d, a.dir, source, sizeof source, &err);
    if (rc < 0)
        return fail(&err);
    for (int mi = 0; rc == 0 && mi < a.nmodels; mi++)
        rc = build(&models[mi], d, max_batch, &err);
    if (rc == 0)
        rc = nl_bench_sgemm(&sg, SGEMM_SIZE, (int)a.threads, 0.3, &err);
    if (rc < 0) {
        free_models(models, a.nmodels);
        nl_dataset_free(d);
        return fail(&err);
    }
    a.threads = sg.threads; /* 0 became all cores */
    if (!g.json)
        print_header(&a, models, d, source, cpu, &sg, load[0]);
    nrows = make_rows(rows, &a, models, (int)a.threads);
    rc = run_rows(rows, nrows, &a, &sg, &err);
    if (getloadavg(load[1], 3) < 0)
        memset(load[1], 0, sizeof load[1]);
    if (rc == 0) {
        if (g.json) {
            print_json(cpu, sg.cores, source, d, (int)a.steps, (int)a.warmup, (int)a.repeat, &sg,
                       rows, nrows, (const double(*)[3])load);
        } else {
            print_speedups(rows, nrows, (int)a.repeat);
            printf("\nOF_PEAK: achieved GFLOP/s of the conv and dense products over the sgemm rate "
                   "on as many threads.\npeak RSS of this process: %.0f MB; load average after: "
                   "%.2f %.2f %.2f\n",
                   nl_peak_rss_mb(), load[1][0], load[1][1], load[1][2]);
        }
        if (a.layers)
            rc = print_layers(rows, nrows, &a, &err);
    }
    free_models(models, a.nmodels);
    nl_dataset_free(d);
    return rc < 0 ? fail(&err) : EXIT_OK;
}
