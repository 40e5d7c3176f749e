/* nnlab's entry point: the table of commands, the global options (accepted before or after the
 * command), and dispatch. Nothing here touches a display; the commands live in app/cmd_*.c, the
 * window in the module nnlab-gui.so (app/meson.build), loaded only to open it. */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "nnlab-config.h"
#include "nnlab/kernels.h"
#include "nnlab/text.h"

struct globals g;
volatile sig_atomic_t interrupted;

#if NNLAB_HAVE_MPI
#define MPI_HELP                                                                                   \
    "MPI mode (under mpirun -np N, or srun; rank 0 drives the run and keeps the store):\n"         \
    "      --mpi             train on the launcher's ranks, each on its partition; goes with\n"    \
    "                        --compress, --overlap, --heartbeat-timeout and --resume RUN (any\n"   \
    "                        number of ranks)\n"                                                   \
    "      --mpi-exchange p2p|collective\n"                                                        \
    "                        p2p (default): the sliced exchange in point-to-point messages,\n"     \
    "                        summed in rank order, bit-identical to SSH runs; collective:\n"       \
    "                        MPI_Ireduce_scatter and MPI_Iallgatherv, MPI's order of\n"            \
    "                        summation (equal within float rounding, not bit-identical;\n"         \
    "                        no --compress bf16)\n"
#else
#define MPI_HELP ""
#endif

static const struct command commands[] = {
    {"demo", cmd_demo, "",
     "import Fashion-MNIST as 'fashion' if needed, train lenet one epoch, report test accuracy",
     "      --data-dir DIR  where the Fashion-MNIST IDX files are\n"
     "                      (default /usr/share/datasets/fashion-mnist)\n"
     "      --epochs N      epochs to train (default 1)\n"
     "      --threads T     threads (default: all cores)\n",
     NULL},
    {"import", cmd_import, "NAME SOURCE...",
     "import a dataset: IDX files, a folder of PNG/JPEG class folders, a CSV file, or text (a "
     "folder of class folders of .txt files, or a CSV file with --text)",
     "      --val F         carve a stratified validation split of this fraction from train\n"
     "      --test F        carve a test split likewise when the source has none\n"
     "      --seed S        seed of the carved splits (default 1)\n"
     "      --gray, --rgb   images: channels to store (default: what most files are)\n"
     "      --resize MODE   images: stretch:WxH (or WxH), shorter:S (shorter side to S, keeping\n"
     "                      the aspect), center-crop:WxH, or a resize and a crop together:\n"
     "                      shorter:256,center-crop:224x224 is torchvision's Resize(256) +\n"
     "                      CenterCrop(224) (default: the most common size, others stretched)\n"
     "      --normalize N   images: dataset (the train split's mean/std, the default),\n"
     "                      imagenet (PyTorch's ImageNet mean/std, for pretrained weights) or\n"
     "                      none (pixel / 255); train, eval and predict use it\n"
     "      --label COLUMN  CSV: the label column, a name or 1-based index (default: last)\n"
     "      --task T        CSV: classification (default) or regression (a numeric target,\n"
     "                      standardised with the train split's mean and std)\n"
     "      --categorical COL,...  CSV: feature columns that hold categories (names or 1-based\n"
     "                      indexes; a column whose first value is not a number is one anyway)\n"
     "      --embed-levels N  CSV: a categorical column of more than N train levels (default\n"
     "                      16) becomes one input, its level's row id, for a model that starts\n"
     "                      with embed-columns DIM; one of N or fewer becomes one-hot\n"
     "                      inputs. 0: never embed: one-hot for the 16 most frequent levels\n"
     "                      and an \"other\" input, whatever the level count\n"
     "      --missing M     CSV: empty fields: error (default), drop (the row), mean, median or\n"
     "                      mode (fill from the train split)\n"
     "      --text COLUMN   CSV: the text column, a name or 1-based index: a text dataset\n"
     "      --vocab K       text: keep the K most frequent words of train (default 20000)\n"
     "      --max-len L     text: tokens per document, cut or padded (default 200)\n"
     "      --keep start|end  text: which part of a longer document to keep (default start)\n"
     "      --skip-bad      skip bad files or rows, listing them, instead of stopping\n",
     NULL},
    {"datasets", cmd_datasets, "", "list the datasets in the store", NULL, NULL},
    {"show", cmd_show, "NAME", "show a dataset: classes and counts per split, shape, statistics",
     NULL, NULL},
    {"rm", cmd_rm, "NAME", "remove a dataset and its samples from the store", NULL, NULL},
    {"train", cmd_train, "--data NAME --model SPEC [options] | --resume RUN",
     "train a model on a dataset",
     "      --data NAME       dataset to train on (see nnlab datasets)\n"
     "      --model SPEC      a shipped model (lenet, mlp, resnet8, mobilenet-tiny, resnet18,\n"
     "                        mobilenet_v2; embedbag, textcnn for text) or a spec file\n"
     "      --epochs N        epochs (default 10)\n"
     "      --batch B         global batch size (default 64)\n"
     "      --lr X            learning rate (default: sgd 0.05, adam and adamw 0.001,\n"
     "                        rmsprop and adagrad 0.01)\n"
     "      --momentum M      SGD momentum (default 0.9)\n"
     "      --nesterov        Nesterov momentum\n"
     "      --weight-decay W  L2 weight decay (default 0; 0.01 for adamw)\n"
     "      --optim NAME      sgd, adam, adamw, rmsprop or adagrad (default sgd)\n"
     "      --schedule S      learning rate over the run (default cosine: from lr down to 0):\n"
     "                        constant, cosine, step:EPOCHS[:GAMMA], multistep:E1,E2[:GAMMA],\n"
     "                        exponential:GAMMA, plateau[:PATIENCE[:GAMMA]]\n"
     "      --warmup E        raise the rate linearly from 0 over the first E epochs\n"
     "      --early-stop-acc A  stop once validation accuracy reaches A\n"
     "      --patience P      stop after P epochs without a better validation accuracy\n"
     "      --threads T       threads (default: all cores)\n"
     "      --seed S          seed for initialisation, data order and dropout (default 1)\n"
     "      --augment LIST    training augmentation: flip, crop:P (shift), resized-crop\n"
     "                        [:SMIN-SMAX[:RMIN-RMAX]] (default 0.08-1:0.75-1.333),\n"
     "                        brightness:B, contrast:C, saturation:S; e.g. flip,crop:4\n"
     "      --loss L          xent (classification, the default), or for a regression dataset\n"
     "                        mse (its default), mae or huber\n"
     "      --name RUN        the run's name (default MODEL-DATASET-N)\n"
     "      --init FILE|RUN   start from weights: a .safetensors file or a run's, by name\n"
     "      --init-partial    load the tensors that match and report the rest\n"
     "      --replace-head    with --init: re-create the last layer with parameters (for a\n"
     "                        dataset with other classes) instead of loading it\n"
     "      --freeze L,...    freeze these layers: no weight gradients, no optimizer state,\n"
     "                        batchnorm on its running statistics\n"
     "      --freeze-up-to L  freeze every layer up to and including L\n"
     "      --feature-cache on|off  with frozen first layers and no augmentation, keep\n"
     "                        their output per sample from the first epoch and train the later\n"
     "                        ones from it, the same results faster (default on)\n"
     "      --feature-cache-limit MB  memory the cache may take (default 1024); a larger one\n"
     "                        goes to a file under ~/.cache/nnlab/features, kept for later runs\n"
     "      --clip-value V    clamp every gradient value to [-V, V]\n"
     "      --clip-norm N     scale the gradient down to a global L2 norm of at most N\n"
     "      --on-nan stop|skip-batch  on a NaN or infinite loss: stop (keeping the last\n"
     "                        checkpoint) or discard that step's update and go on (default stop)\n"
     "      --checkpoint-every N  also checkpoint every N steps (default: after every epoch)\n"
     "      --resume RUN      continue a run that was stopped, failed or killed from its latest\n"
     "                        checkpoint, with its own settings; --epochs N trains it to N\n"
     "                        epochs in all (also a finished run)\n",
#if NNLAB_HAVE_SSH
     "Cluster mode (one worker per host, reached over SSH):\n"
     "      --hosts H[:CORES],...  the hosts, in rank order; a host may repeat\n"
     "      --hostfile FILE   one HOST[:CORES] a line, # comments\n"
     "      --ssh-config FILE the OpenSSH config to resolve hosts with (default ~/.ssh/config)\n"
     "      --accept-new-host-keys  add unknown host keys to known_hosts (changed keys are\n"
     "                        always refused)\n"
     "      --remote-nnlab PATH  the nnlab to run on the hosts (default: nnlab on their PATH\n"
     "                        when it is this version, else this binary, uploaded)\n"
     "      --port-range A-B  ports the workers may listen on (default: any)\n"
     "      --bind ADDR       address the workers listen on (default: the one reached)\n"
     "      --compress bf16   send gradients and parameters as bf16 (sums stay fp32)\n"
     "      --overlap auto|on|off  exchange the gradient while backward runs (on) or after\n"
     "                        it (off), the same results either way; auto (default): time a\n"
     "                        few steps of each early in the run and keep the faster (runs\n"
     "                        of one worker or under 54 steps: on only where a host has a\n"
     "                        core free beside its workers' threads)\n"
     "      --insecure-plaintext  frames between workers checksummed, not sealed\n"
     "      --heartbeat-timeout S  a worker silent for S seconds is lost, and workers exit\n"
     "                        when the driver is silent that long (default 10)\n"
     "      --max-restarts N  restart a lost worker on its host up to N times per run, then\n"
     "                        drop it and share its data among the others (default 3); the\n"
     "                        run goes on from its last completed step either way\n"
     "      --resume RUN      also continues a cluster run (give --hosts again)\n" MPI_HELP
#elif NNLAB_HAVE_MPI
     MPI_HELP
#else
     NULL
#endif
    },
    {"runs", cmd_runs, "[RUN]",
     "list training runs with their status and results (status running, done, stopped, failed, "
     "or interrupted: its process is gone, resume it); with RUN, that run, its owner, how its "
     "cluster exchanged (--overlap, and what auto measured and chose) and the workers it lost",
     NULL, NULL},
    {"eval", cmd_eval, "RUN|FILE.safetensors [--data NAME] [--split test|val|train]",
     "evaluate a run's latest checkpoint, or a weights file, on a dataset split (accuracy, "
     "top-5, per-class precision, recall, F1; regression: R2, MAE, RMSE)",
     "      --data NAME     dataset (default: the run's own; needed with a file)\n"
     "      --model SPEC    the model of a weights file\n"
     "      --split SPLIT   test, val or train (default test)\n"
     "      --threads T     threads (default: all cores)\n",
     NULL},
    {"predict", cmd_predict,
     "RUN IMAGE... | RUN --text TEXT... | RUN --csv FILE | RUN --row V1,...",
     "classify PNG or JPEG images, or text for a run on a text dataset, with a run's model (top "
     "3), or predict rows of a table (CSV)",
     "      --top K         classes to show per image, text or row (default 3)\n"
     "      --text TEXT     text runs: a document to classify (repeatable), tokenised with the\n"
     "                      run's dataset's vocabulary\n"
     "      --csv FILE      table runs: predict every row of a CSV file (with or without the\n"
     "                      target column), preprocessed as the import did\n"
     "      --row VALUES    table runs: predict one row given as text (repeatable)\n",
     NULL},
    {"export", cmd_export, "RUN FILE.safetensors|FILE.onnx",
     "write a run's latest weights as safetensors with PyTorch's tensor names, or the model as "
     "ONNX",
     "  FILE.safetensors  the weights, named as PyTorch names them (conv1.weight, ...)\n"
     "  FILE.onnx         the graph and weights, ONNX opset 10: input 'input', float\n"
     "                    [batch, C, H, W] of pixel values 0-255 in the dataset's channel order\n"
     "                    (RGB or gray; CSV: the raw features as [batch, F, 1, 1]), normalised\n"
     "                    inside the graph with the dataset's statistics; outputs 'logits' and\n"
     "                    'probabilities' [batch, classes]; class names in the metadata\n"
     "                    (nnlab.classes). A layer kind with no ONNX form is refused by name.\n",
     NULL},
    {"summary", cmd_summary, "MODEL [--data NAME | --input CxHxW --classes N] [--freeze L,...]",
     "show a model's layers with output shapes and parameter counts",
     "      --data NAME     take the input shape and class count from a dataset\n"
     "      --input CxHxW   input shape (default 1x28x28)\n"
     "      --classes N     class count (default 10)\n"
     "      --freeze L,...  show these layers frozen (as train --freeze)\n"
     "      --freeze-up-to L  show every layer up to L frozen\n",
     NULL},
#if NNLAB_HAVE_SSH
    {"hosts", cmd_hosts, "check H1[:CORES],H2,... | check --hostfile FILE",
     "check hosts before a run: nnlab version, cores, memory, upload needed",
     "      --hostfile FILE   one HOST[:CORES] a line, # comments\n"
     "      --ssh-config FILE the OpenSSH config (default ~/.ssh/config)\n"
     "      --accept-new-host-keys  add unknown host keys to known_hosts\n"
     "      --remote-nnlab PATH  the nnlab to run on the hosts\n",
     NULL},
#endif
    {"worker", cmd_worker, "[--bind ADDR] [--port-range A-B]",
     "a cluster worker, started by a driver over SSH (not for people)",
     "      --bind ADDR       listen on this numeric address (default: every address; the\n"
     "                        other workers then use the one the driver reached)\n"
     "      --port-range A-B  the ports to listen on (default: any)\n",
     NULL},
    {"bench", cmd_bench, "[options]",
     "measure training and inference speed against this machine's sgemm rate",
     "      --steps N       timed steps per row (default 50)\n"
     "      --warmup N      untimed steps before them (default 5)\n"
     "      --model LIST    these models, separated by commas (default: lenet,mlp); a spec\n"
     "                      name or file runs on Fashion-MNIST; resnet18-S is torchvision's\n"
     "                      ResNet-18 on synthetic 3xSxS images (resnet18-64, resnet18-224)\n"
     "      --mode M        train (default), infer (forward passes only) or both\n"
     "      --batch B       only this batch size (default: 64 and 256)\n"
     "      --threads T     the many-thread rows use T threads (default: all cores)\n"
     "      --repeat N      rounds over all rows, each row showing its median (default 1)\n"
     "      --layers        then one more run of each model and mode on the most threads,\n"
     "                      showing the time of each layer's forward and backward per step\n"
     "      --data-dir DIR  Fashion-MNIST IDX files, used when the store has no 'fashion'\n"
     "                      dataset (default /usr/share/datasets/fashion-mnist)\n",
     NULL},
};

static const char global_help[] =
    "Global options (before or after the command):\n"
    "      --db PATH   the database (default $XDG_DATA_HOME/nnlab/nnlab.db; with\n"
    "                  XDG_DATA_HOME unset, ~/.local/share/nnlab/nnlab.db)\n"
    "      --json      print one JSON object per line on stdout, nothing else\n"
    "  -q, --quiet     no progress output\n"
    "  -h, --help      help; with a command, that command's help\n"
    "      --version   print the version\n";

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: nnlab [--db PATH] [--json] [--quiet] COMMAND [ARGS]\n\n"
        "nnlab trains neural networks on this machine's cores, or on hosts it reaches over SSH.\n"
        "With no command and a display, it opens the desktop window.\n\nCommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n%s\nRun 'nnlab COMMAND --help' for a command's options.\n", global_help);
}

/* What app/cmd_train.c's shorten() reads, for train and demo. */
static const char shorten_help[] =
    "Environment (to try examples quickly; new runs only, each said on stderr):\n"
    "      NNLAB_EPOCHS_MAX=N     train at most N epochs, whatever --epochs says\n"
    "      NNLAB_TRAIN_SAMPLES=N  train on the first N samples of the train split\n";

int command_help(const char *cmd)
{
    const struct command *c = find_command(cmd);

    if (!c)
        return EXIT_USAGE;
    printf("usage: nnlab %s %s\n\n%s.\n", c->name, c->args, c->summary);
    if (c->help)
        printf("\nOptions:\n%s", c->help);
    if (c->more)
        fputs(c->more, stdout);
    if (c->run == cmd_train || c->run == cmd_demo)
        printf("\n%s", shorten_help);
    printf("\n%s", global_help);
    return EXIT_OK;
}

/* Messages name files, tensors, classes and labels: all of it goes to the terminal escaped. */
static void vmessage(const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0), nonnull(2)));
static void vmessage(const char *prefix, const char *fmt, va_list ap)
{
    char msg[4096];

    vsnprintf(msg, sizeof msg, fmt, ap);
    fputs(prefix, stderr);
    nl_term_fputs_lines(stderr, msg);
}

int fail(const struct nl_error *err)
{
    fputs("nnlab: ", stderr);
    nl_term_fputs_lines(stderr, err->msg[0] ? err->msg : nl_strerror(err->code));
    fputc('\n', stderr);
    return err->code == NL_ECANCELED ? EXIT_INTERRUPTED : EXIT_FAIL;
}

int failf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("nnlab: ", fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return EXIT_FAIL;
}

int usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "nnlab: %s: ", cmd);
    va_start(ap, fmt);
    vmessage("", fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see 'nnlab %s --help')\n", cmd);
    return EXIT_USAGE;
}

int option_error(const char *cmd)
{
    const char *arg = g.argv && optind > 0 ? g.argv[optind - 1] : "";
    int len = (int)strcspn(arg, "=");

    if (optopt != 0 && strncmp(arg, "--", 2) == 0)
        return usage_error(cmd, "option '%.*s' needs a value", len, arg);
    return usage_error(cmd, "unknown option '%.*s'", len, arg);
}

void warn_cb(void *ud, const char *msg)
{
    (void)ud;
    fputs("nnlab: warning: ", stderr);
    nl_term_fputs_lines(stderr, msg);
    fputc('\n', stderr);
}

int open_store(struct nl_store **out, struct nl_error *err)
{
    char path[4096];

    if (g.db_path)
        return nl_store_open(out, g.db_path, err);
    int rc = nl_store_default_path(path, sizeof path, err);
    return rc < 0 ? rc : nl_store_open(out, path, err);
}

int open_store_read(struct nl_store **out, struct nl_error *err)
{
    char path[4096];

    if (g.db_path)
        return nl_store_open_read(out, g.db_path, err);
    int rc = nl_store_default_path(path, sizeof path, err);
    return rc < 0 ? rc : nl_store_open_read(out, path, err);
}

int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

int parse_float(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* Takes the global options out of argv wherever they stand; returns the new argc, or -1 after
 * reporting a usage error. */
static int take_globals(int argc, char **argv)
{
    int out = 1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            while (i < argc)
                argv[out++] = argv[i++];
            break;
        }
        if (strcmp(a, "--json") == 0) {
            g.json = 1;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            g.quiet = 1;
        } else if (strncmp(a, "--db=", 5) == 0) {
            g.db_path = a + 5;
        } else if (strcmp(a, "--db") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "nnlab: --db needs a path\n");
                return -1;
            }
            g.db_path = argv[++i];
        } else {
            argv[out++] = argv[i];
        }
    }
    argv[out] = NULL;
    return out;
}

void *nl_app_module(const char *file, const char *symbol, int global, const char *what)
{
    char path[PATH_MAX + 64], dir[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", dir, sizeof dir - 1);
    char *slash = NULL;

    if (len > 0) {
        dir[len] = '\0';
        slash = strrchr(dir, '/');
    }
    if (slash) {
        *slash = '\0';
        snprintf(path, sizeof path, "%s/%s", dir, file);
    }
    if (!slash || access(path, F_OK) != 0)
        snprintf(path, sizeof path, "%s/%s", NNLAB_MODULE_DIR, file);
    void *module = dlopen(path, RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
    void *sym = module ? dlsym(module, symbol) : NULL;
    if (!sym)
        fprintf(stderr,
                "nnlab: %s: %s (reinstall nnlab; the commands run without it: nnlab --help)\n",
                what, dlerror());
    return sym;
}

#if NNLAB_HAVE_GTK
/* Runs the window of the module nnlab-gui.so (its nl_ui_run, ui/nnlab-ui.h). */
static int run_window(int argc, char **argv)
{
    void *sym = nl_app_module("nnlab-gui.so", "nl_ui_run", 0, "the window's module");
    if (!sym)
        return EXIT_FAIL;
    int (*run)(int, char **, const char *);
    memcpy(&run, &sym, sizeof run);
    return run(argc, argv, g.db_path);
}
#endif

int main(int argc, char **argv)
{
    argc = take_globals(argc, argv);
    if (argc < 0)
        return EXIT_USAGE;
    if (argc < 2) {
#if NNLAB_HAVE_GTK
        /* No command: the desktop window, when there is a display to show it on. */
        if ((getenv("DISPLAY") && *getenv("DISPLAY")) ||
            (getenv("WAYLAND_DISPLAY") && *getenv("WAYLAND_DISPLAY")))
            return run_window(argc, argv);
#endif
        usage(stdout);
        return EXIT_OK;
    }
    const char *name = argv[1];
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        if (g.json)
            printf("{\"version\":\"%s\"}\n", NNLAB_VERSION);
        else
            printf("nnlab %s\n", NNLAB_VERSION);
        return EXIT_OK;
    }
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        if (argc > 2 && find_command(argv[2]))
            return command_help(argv[2]);
        usage(stdout);
        return EXIT_OK;
    }
    const struct command *c = find_command(name);
    if (!c) {
        fprintf(stderr, "nnlab: '%s' is not a command\n\n", name);
        usage(stderr);
        return EXIT_USAGE;
    }
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return command_help(c->name);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    nl_kernels_init();
    optind = 0; /* glibc: a full re-initialisation of getopt for the command's own options */
    opterr = 0; /* option_error names a bad option in the command's own line */
    g.argv = argv + 1;
    return c->run(argc - 1, argv + 1);
}
