/* The training commands: train, demo, runs, eval, predict. */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "nnlab-config.h"
#include "nnlab/alloc.h"
#include "nnlab/dataset.h"
#include "nnlab/text.h"
#if NNLAB_HAVE_SSH
#include "nnlab/driver.h"
#endif
#if NNLAB_HAVE_MPI
#include "mpi_module.h"
#endif
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "nnlab/safetensors.h"
#include "nnlab/session.h"
#include "nnlab/spec.h"

/* Long-only options of train's cluster mode, outside the range of short option letters. */
enum {
    OPT_HOSTS = 0x100,
    OPT_HOSTFILE,
    OPT_SSH_CONFIG,
    OPT_ACCEPT_NEW,
    OPT_REMOTE_NNLAB,
    OPT_PORT_RANGE,
    OPT_BIND,
    OPT_COMPRESS,
    OPT_RESUME,
    OPT_ON_NAN,
    OPT_CHECKPOINT_EVERY,
    OPT_HEARTBEAT,
    OPT_MAX_RESTARTS,
    OPT_INSECURE_PLAINTEXT,
    OPT_FEATURE_CACHE,
    OPT_FEATURE_CACHE_LIMIT,
    OPT_MPI,
    OPT_OVERLAP,
    OPT_MPI_EXCHANGE,
};

/* The frozen-feature cache (include/nnlab/trainer.h): on or off, and the MiB it may hold in
 * memory before it goes to a file under $XDG_CACHE_HOME/nnlab/features. It changes no result,
 * so a resumed run takes it from the command line too. */
static struct {
    int on;
    long limit_mib;
    char dir[512];
} features = {1, 1024, ""};

static void feature_note(void *ud, const char *text)
{
    (void)ud;
    if (!g.quiet)
        fprintf(stderr, "nnlab: %s\n", text);
}

/* The cache options into o, with the cache directory when one can be named. */
static void feature_opts(struct nl_train_opts *o)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");

    if (xdg && xdg[0] == '/')
        snprintf(features.dir, sizeof features.dir, "%s/nnlab/features", xdg);
    else if (home && home[0])
        snprintf(features.dir, sizeof features.dir, "%s/.cache/nnlab/features", home);
    o->feature_cache = features.on;
    o->feature_cache_limit = (size_t)features.limit_mib << 20;
    o->feature_cache_dir = features.dir[0] ? features.dir : NULL;
    o->note = feature_note;
    o->note_ud = NULL;
}

#define DEMO_DATA "/usr/share/datasets/fashion-mnist"

/* stats: each worker's totals of a cluster run (nworkers 0 for a local run). */
static void print_done(const char *run, const struct nl_train_result *res,
                       const struct nl_worker_metrics *stats, int nworkers)
{
    if (g.json) {
        printf("{\"event\":\"done\",\"run\":");
        json_str(stdout, run);
        printf(",\"test_accuracy\":");
        json_num(stdout, res->test_accuracy);
        if (res->regression) {
            printf(",\"test_r2\":");
            json_num(stdout, res->test_accuracy);
            printf(",\"test_mae\":");
            json_num(stdout, res->test_mae);
            printf(",\"test_rmse\":");
            json_num(stdout, res->test_rmse);
        }
        printf(",\"epochs\":%d,\"stopped_early\":%s,\"skipped_batches\":%ld,\"seconds\":",
               res->epochs, res->stopped_early ? "true" : "false", res->skipped_batches);
        json_num(stdout, res->seconds);
        if (nworkers > 0) {
            printf(",\"workers\":[");
            for (int i = 0; i < nworkers; i++) {
                const struct nl_worker_metrics *w = &stats[i];
                const double busy = w->compute_seconds + w->comm_seconds;
                printf("%s{\"host\":", i ? "," : "");
                json_str(stdout, w->host);
                printf(",\"bytes_sent\":%llu,\"images_per_second\":", w->bytes_sent);
                json_num(stdout, busy > 0 ? (double)w->samples / busy : NAN);
                printf(",\"comm_fraction\":");
                json_num(stdout, busy > 0 ? w->comm_seconds / busy : NAN);
                printf("}");
            }
            printf("]");
        }
        printf("}\n");
    } else {
        if (isfinite(res->test_accuracy) && res->regression)
            printf("test R2 %.4f, MAE %.4g, RMSE %.4g (loss %.4f)\n", res->test_accuracy,
                   res->test_mae, res->test_rmse, res->test_loss);
        else if (isfinite(res->test_accuracy))
            printf("test accuracy %.4f (loss %.4f)\n", res->test_accuracy, res->test_loss);
        else if (!g.quiet)
            printf("no test split to evaluate\n");
        if (!g.quiet)
            printf("run '%s': %d epochs in %.1f s, %.0f images/s\n", run, res->epochs, res->seconds,
                   res->images_per_second);
        if (res->skipped_batches > 0)
            printf("skipped %ld batches with a non-finite loss\n", res->skipped_batches);
    }
    fflush(stdout);
}

/* Fine-tuning options: layers to freeze (a comma-separated list, and/or every layer up to one),
 * and whether to re-create the head instead of loading it from --init. */
struct finetune {
    char *freeze; /* modified in place; NULL: none */
    const char *up_to;
    int replace_head;
};

#define MAX_FREEZE 256

/* Applies ft to m: the head keeps its fresh initialisation on loads; the layers are frozen. */
static int apply_finetune(struct nl_model *m, const struct finetune *ft, struct nl_error *err)
{
    const char *names[MAX_FREEZE];
    int n = 0;

    for (char *p = ft->freeze, *save = NULL; p; p = NULL) {
        for (char *tok = strtok_r(p, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (n == MAX_FREEZE)
                return nl_error_set(err, NL_EINVAL, "--freeze: more than %d layers", MAX_FREEZE);
            names[n++] = tok;
        }
    }
    if (n == 0 && !ft->up_to)
        return 0;
    int rc = nl_model_freeze(m, names, n, ft->up_to, err);
    if (rc == 0 && nl_model_count_trainable(m) == 0)
        rc = nl_error_set(err, NL_EINVAL,
                          "--freeze: every layer with parameters would be frozen, so training "
                          "would change nothing; leave at least one out");
    return rc;
}

#if NNLAB_HAVE_SSH
static void worker_log(void *ud, const char *host, const char *line)
{
    char hb[512];
    (void)ud;
    fprintf(stderr, "%s: ", nl_term_str(hb, sizeof hb, host));
    nl_term_fputs(stderr, line);
    fputc('\n', stderr);
}
#endif

#if NNLAB_HAVE_SSH
static void cluster_opts(struct nl_cluster_opts *co, const struct cluster_args *ca)
{
    *co = (struct nl_cluster_opts){
        .ssh = {.config = ca->ssh_config,
                .accept_new = ca->accept_new,
                .remote_nnlab = ca->remote_nnlab,
                .version = "nnlab " NNLAB_VERSION,
                .timeout_ms = 30000},
        .bind = ca->bind,
        .port_lo = ca->port_lo,
        .port_hi = ca->port_hi,
        .bf16 = ca->bf16,
        .insecure_plaintext = ca->insecure_plaintext,
        .heartbeat_ms = ca->heartbeat_ms,
        .max_restarts = ca->max_restarts >= 0 ? ca->max_restarts : 3,
        .stop = &interrupted,
        .log = worker_log,
    };
}
#endif

#if NNLAB_HAVE_MPI
/* Under an MPI launcher SIGTERM is the launcher ending the job (a rank died, or the job was
 * cancelled): rank 0 records the run as failed, not stopped (include/nnlab/mpi.h). */
static volatile sig_atomic_t mpi_terminated;

static void on_mpi_term(int sig)
{
    (void)sig;
    mpi_terminated = 1;
    interrupted = 1;
}

/* The MPI mode, from the module nnlab-mpi.so (app/meson.build), loaded by mpi_begin. */
static const struct nl_mpi_module *mpi;
#endif

/* Trains the session's model, locally or on the hosts of ca when it is a cluster run, showing its
 * progress; then finishes its record (done, stopped or failed) and reports. Frees s. */
static int train_and_finish(struct nl_session *s, const struct cluster_args *ca)
{
    struct nl_error err = {0};
    struct progress p = {.tty = isatty(STDOUT_FILENO)};
    struct nl_train_hooks hooks = nl_session_hooks(s, progress_event, &p);
    struct nl_worker_metrics *stats = NULL;
    void *hosts_mem = NULL; /* the hosts, which stats name */
    int nworkers = 0, rc;

    feature_opts(&s->opts);
    if (!s->cluster) {
        rc = nl_train(s->model, s->data, &s->opts, &hooks, &s->res, &err);
    } else if (ca->mpi) {
#if NNLAB_HAVE_MPI
        const struct nl_mpi_opts mo = {.bf16 = ca->bf16,
                                       .heartbeat_ms = ca->heartbeat_ms,
                                       .stop = &interrupted,
                                       .terminated = &mpi_terminated};
        nworkers = mpi->size(ca->mp);
        stats = nl_calloc((size_t)nworkers, sizeof *stats);
        rc = stats ? mpi->train(ca->mp, &mo, s->model, s->data, &s->opts, &hooks, &s->res, stats,
                                &err)
                   : nl_error_set(&err, NL_ENOMEM, "out of memory");
#else
        rc = nl_error_set(&err, NL_EINVAL, "this nnlab was built without MPI");
#endif
    } else {
#if NNLAB_HAVE_SSH
        struct nl_host *hosts = NULL;
        struct nl_cluster_opts co;
        cluster_opts(&co, ca);
        rc = ca->hostfile ? nl_hosts_load(ca->hostfile, &hosts, &nworkers, &err)
                          : nl_hosts_parse(ca->hosts, &hosts, &nworkers, &err);
        if (rc == 0) {
            stats = nl_calloc((size_t)nworkers, sizeof *stats);
            rc = stats ? nl_cluster_train(hosts, nworkers, &co, s->model, s->data, &s->opts, &hooks,
                                          &s->res, stats, &err)
                       : nl_error_set(&err, NL_ENOMEM, "out of memory");
        }
        hosts_mem = hosts;
#else
        (void)ca;
        rc = nl_error_set(&err, NL_EINVAL, "this nnlab was built without cluster mode (libssh)");
#endif
    }
    rc = nl_session_finish(s, rc, &err);
    if (p.tty && !g.json && !g.quiet && rc < 0)
        fputc('\n', stdout);
    if (rc == 0)
        print_done(s->run.name, &s->res, stats, nworkers);
    nl_session_free(s);
    nl_free(stats);
    nl_free(hosts_mem);
    return rc < 0 ? fail(&err) : EXIT_OK;
}

/* NNLAB_EPOCHS_MAX=N and NNLAB_TRAIN_SAMPLES=N shorten every new training run, to try the
 * README's examples quickly (tests/test_readme runs them so): at most N epochs, and the first N
 * samples of the train split (validation and test splits stay whole). Each says so on stderr,
 * and the run records what it did: its epochs in its settings, its sample count in its first
 * line. Resumed runs are not shortened. Returns 0, or a usage error's exit status. */
static int shorten(struct nl_train_opts *o, struct nl_dataset *d)
{
    const char *names[] = {"NNLAB_EPOCHS_MAX", "NNLAB_TRAIN_SAMPLES"};
    long v[2] = {0, 0};

    for (int i = 0; i < 2; i++) {
        const char *s = getenv(names[i]);
        if (s && *s && !parse_int(s, 1, 0x7fffffffL, &v[i]))
            return failf("%s=%s: want a whole number from 1", names[i], s);
    }
    if (v[0] > 0 && o->epochs > v[0]) {
        fprintf(stderr, "nnlab: NNLAB_EPOCHS_MAX=%ld: %ld epochs instead of %d\n", v[0], v[0],
                o->epochs);
        o->epochs = (int)v[0];
    }
    if (v[1] > 0 && d->split[NL_TRAIN].n > (uint32_t)v[1]) {
        fprintf(stderr, "nnlab: NNLAB_TRAIN_SAMPLES=%ld: the first %ld of %u training samples\n",
                v[1], v[1], d->split[NL_TRAIN].n);
        d->split[NL_TRAIN].n = (uint32_t)v[1];
    }
    return 0;
}

/* Trains model on dataset as a new run named run_name (NULL: generated), from init when given
 * and with ft's frozen layers, and reports; on the hosts of ca when it names any. */
static int train_session(struct nl_store *store, const char *dataset, const char *model,
                         const struct nl_train_opts *o, const char *run_name, const char *init,
                         int init_partial, const struct finetune *ft, const struct cluster_args *ca)
{
    struct nl_error err = {0};
    struct nl_dataset *d = NULL;
    struct nl_model *m = NULL;
    struct nl_session *s = NULL;
    struct nl_train_opts shortened = *o;
    int rc;

    rc = nl_dataset_load(store, dataset, &d, &err);
    if (rc == NL_ENOENT)
        nl_error_set(&err, rc, "no dataset named '%s' (see nnlab datasets; nnlab import)", dataset);
    if (rc < 0)
        return fail(&err);
    rc = shorten(&shortened, d);
    if (rc) {
        nl_dataset_free(d);
        return rc;
    }
    o = &shortened;
    rc = build_model(&m, model, NULL, d, &err);
    if (rc < 0) {
        nl_dataset_free(d);
        return fail(&err);
    }
    nl_model_init_params(m, o->seed);
    if (ft && ft->replace_head && nl_model_head(m) >= 0)
        m->layers[nl_model_head(m)].fresh = 1;
    if ((init && (rc = load_init(store, m, init, init_partial, &err)) < 0) ||
        (ft && (rc = apply_finetune(m, ft, &err)) < 0)) {
        nl_model_free(m);
        nl_dataset_free(d);
        return fail(&err);
    }
    const struct nl_session_new new = {
        .name = run_name,
        .dataset = dataset,
        .model = model,
        .cluster = ca && (ca->hosts || ca->hostfile || ca->mpi),
    };
    rc = nl_session_start(store, &new, m, d, o, &s, &err);
    if (rc < 0)
        return fail(&err);
    if (!g.json && !g.quiet)
        printf("run '%s': %s on %s, %zu parameters (%zu trainable), %u training samples\n",
               s->run.name, model, dataset, nl_model_count_params(s->model),
               nl_model_count_trainable(s->model), s->data->split[NL_TRAIN].n);
    return train_and_finish(s, ca);
}

/* Continues the run named run_name from its latest checkpoint in its own record, with its own
 * settings but for what req changes, and reports; a cluster run on the hosts of ca (the hosts
 * may differ from the first time: the data order does not depend on them). */
static int resume_session(struct nl_store *store, const char *run_name,
                          struct nl_resume_request *req, const struct cluster_args *ca)
{
    struct nl_error err = {0};
    struct nl_session *s = NULL;

    req->on_hosts = ca->hosts || ca->hostfile || ca->mpi;
    int rc = nl_session_resume(store, run_name, req, warn_cb, NULL, &s, &err);
    if (rc < 0)
        return fail(&err);
    if (!g.json && !g.quiet)
        printf("run '%s': resuming after epoch %d, step %ld, to epoch %d\n", s->run.name,
               s->opts.resume->epoch, s->opts.resume->iteration, s->opts.epochs);
    struct cluster_args run_ca = *ca;
    run_ca.bf16 = s->opts.bf16; /* the run's own compression, or what --compress changed it to */
    return train_and_finish(s, &run_ca);
}

/* Training options as given, before the optimizer's defaults are applied. */
struct train_args {
    struct nl_train_opts o;
    enum nl_optim_kind kind;
    double lr, momentum, weight_decay; /* < 0: not given */
    int nesterov;
};

static void train_args_init(struct train_args *a)
{
    nl_train_defaults(&a->o);
    a->kind = NL_OPTIM_SGD;
    a->lr = a->momentum = a->weight_decay = -1.0;
    a->nesterov = 0;
}

/* The optimizer's defaults, then what the command line said. */
static void train_args_apply(struct train_args *a)
{
    nl_optim_defaults(&a->o.optim, a->kind);
    if (a->lr >= 0)
        a->o.optim.lr = (float)a->lr;
    if (a->momentum >= 0)
        a->o.optim.momentum = (float)a->momentum;
    if (a->weight_decay >= 0)
        a->o.optim.weight_decay = (float)a->weight_decay;
    a->o.optim.nesterov = a->nesterov;
}

/* Parses one of the options train and demo share; returns 0 or an exit status. */
static int parse_train_opt(const char *cmd, int c, struct train_args *a)
{
    struct nl_error err = {0};
    double f;
    long v;

    switch (c) {
    case 'e':
        if (!parse_int(optarg, 1, 100000, &v))
            return usage_error(cmd, "--epochs %s: want a whole number from 1 to 100000", optarg);
        a->o.epochs = (int)v;
        return 0;
    case 'b':
        if (!parse_int(optarg, 1, 1 << 20, &v))
            return usage_error(cmd, "--batch %s: want a whole number from 1 to 1048576", optarg);
        a->o.batch = (int)v;
        return 0;
    case 't':
        if (!parse_int(optarg, 1, 1024, &v))
            return usage_error(cmd, "--threads %s: want a whole number from 1 to 1024", optarg);
        a->o.threads = (int)v;
        return 0;
    case 's':
        if (!parse_int(optarg, 0, 0x7fffffffL, &v))
            return usage_error(cmd, "--seed %s: want a non-negative integer", optarg);
        a->o.seed = (uint64_t)v;
        return 0;
    case 'l':
        if (!parse_float(optarg, 1e-12, 1e6, &a->lr))
            return usage_error(cmd, "--lr %s: want a number in (0, 1e6]", optarg);
        return 0;
    case 'm':
        if (!parse_float(optarg, 0.0, 0.999999, &a->momentum))
            return usage_error(cmd, "--momentum %s: want a number in [0, 1)", optarg);
        return 0;
    case 'w':
        if (!parse_float(optarg, 0.0, 1.0, &a->weight_decay))
            return usage_error(cmd, "--weight-decay %s: want a number in [0, 1]", optarg);
        return 0;
    case 'N':
        a->nesterov = 1;
        return 0;
    case 'o':
        if (nl_optim_kind_parse(&a->kind, optarg, &err) < 0)
            return usage_error(cmd, "--optim: %s", err.msg);
        return 0;
    case 'S':
        if (nl_schedule_parse(&a->o.schedule, optarg, &err) < 0)
            return usage_error(cmd, "--schedule: %s", err.msg);
        return 0;
    case 'W':
        if (!parse_float(optarg, 0.0, 1000.0, &f))
            return usage_error(cmd, "--warmup %s: want epochs, 0 or more", optarg);
        a->o.schedule.warmup_epochs = (float)f;
        return 0;
    case 'E':
        if (!parse_float(optarg, 0.0, 1.0, &a->o.target_accuracy))
            return usage_error(cmd, "--early-stop-acc %s: want an accuracy in [0, 1]", optarg);
        return 0;
    case 'C':
        if (!parse_float(optarg, 1e-12, 1e12, &f))
            return usage_error(cmd, "--clip-value %s: want a number in (0, 1e12]", optarg);
        a->o.clip_value = (float)f;
        return 0;
    case 'K':
        if (!parse_float(optarg, 1e-12, 1e12, &f))
            return usage_error(cmd, "--clip-norm %s: want a number in (0, 1e12]", optarg);
        a->o.clip_norm = (float)f;
        return 0;
    case 'p':
        if (!parse_int(optarg, 1, 100000, &v))
            return usage_error(cmd, "--patience %s: want a whole number of epochs from 1", optarg);
        a->o.patience = (int)v;
        return 0;
    case 'A':
        if (nl_augment_parse(&a->o.augment, optarg, &err) < 0)
            return usage_error(cmd, "--augment: %s", err.msg);
        return 0;
    case 'L':
        if (nl_loss_parse(optarg) <= 0)
            return usage_error(cmd, "--loss %s: want xent, mse, mae or huber", optarg);
        a->o.loss = (enum nl_loss)nl_loss_parse(optarg);
        return 0;
    default:
        return option_error(cmd);
    }
}

static const struct option train_opts[] = {
    {"data", required_argument, NULL, 'd'},
    {"model", required_argument, NULL, 'M'},
    {"epochs", required_argument, NULL, 'e'},
    {"batch", required_argument, NULL, 'b'},
    {"lr", required_argument, NULL, 'l'},
    {"momentum", required_argument, NULL, 'm'},
    {"nesterov", no_argument, NULL, 'N'},
    {"weight-decay", required_argument, NULL, 'w'},
    {"optim", required_argument, NULL, 'o'},
    {"schedule", required_argument, NULL, 'S'},
    {"warmup", required_argument, NULL, 'W'},
    {"early-stop-acc", required_argument, NULL, 'E'},
    {"patience", required_argument, NULL, 'p'},
    {"threads", required_argument, NULL, 't'},
    {"seed", required_argument, NULL, 's'},
    {"name", required_argument, NULL, 'n'},
    {"init", required_argument, NULL, 'i'},
    {"init-partial", no_argument, NULL, 'P'},
    {"augment", required_argument, NULL, 'A'},
    {"loss", required_argument, NULL, 'L'},
    {"clip-value", required_argument, NULL, 'C'},
    {"clip-norm", required_argument, NULL, 'K'},
    {"freeze", required_argument, NULL, 'F'},
    {"freeze-up-to", required_argument, NULL, 'U'},
    {"replace-head", no_argument, NULL, 'R'},
    {"hosts", required_argument, NULL, OPT_HOSTS},
    {"hostfile", required_argument, NULL, OPT_HOSTFILE},
    {"ssh-config", required_argument, NULL, OPT_SSH_CONFIG},
    {"accept-new-host-keys", no_argument, NULL, OPT_ACCEPT_NEW},
    {"remote-nnlab", required_argument, NULL, OPT_REMOTE_NNLAB},
    {"port-range", required_argument, NULL, OPT_PORT_RANGE},
    {"bind", required_argument, NULL, OPT_BIND},
    {"compress", required_argument, NULL, OPT_COMPRESS},
    {"resume", required_argument, NULL, OPT_RESUME},
    {"on-nan", required_argument, NULL, OPT_ON_NAN},
    {"checkpoint-every", required_argument, NULL, OPT_CHECKPOINT_EVERY},
    {"heartbeat-timeout", required_argument, NULL, OPT_HEARTBEAT},
    {"max-restarts", required_argument, NULL, OPT_MAX_RESTARTS},
    {"insecure-plaintext", no_argument, NULL, OPT_INSECURE_PLAINTEXT},
    {"feature-cache", required_argument, NULL, OPT_FEATURE_CACHE},
    {"feature-cache-limit", required_argument, NULL, OPT_FEATURE_CACHE_LIMIT},
    {"mpi", no_argument, NULL, OPT_MPI},
    {"overlap", required_argument, NULL, OPT_OVERLAP},
    {"mpi-exchange", required_argument, NULL, OPT_MPI_EXCHANGE},
    {NULL, 0, NULL, 0},
};

/* `nnlab train`'s command line. */
struct train_cmd {
    struct train_args a;
    struct cluster_args ca;
    struct finetune ft;
    struct nl_resume_request ra;
    const char *data, *model, *name, *init, *resume;
    int init_partial;
    /* The first option that fixes a setting of a new run, which --resume takes from the run. */
    const char *setting;
};

/* One option of train's own, or one it shares with demo: 0 or an exit status. */
static int train_cmd_opt(struct train_cmd *t, int c)
{
    long v;

    if (c == 'e')
        t->ra.epochs = 0; /* given: set once parsed */
    if (c == OPT_FEATURE_CACHE) {
        if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0)
            return usage_error("train", "--feature-cache %s: want on or off", optarg);
        features.on = strcmp(optarg, "on") == 0;
        return 0;
    }
    if (c == OPT_FEATURE_CACHE_LIMIT) {
        if (!parse_int(optarg, 0, 1L << 30, &features.limit_mib))
            return usage_error("train", "--feature-cache-limit %s: want MiB, 0 or more", optarg);
        return 0;
    }
    if (c == OPT_RESUME) {
        t->resume = optarg;
    } else if (c == OPT_ON_NAN) {
        if (strcmp(optarg, "stop") != 0 && strcmp(optarg, "skip-batch") != 0)
            return usage_error("train", "--on-nan %s: want stop or skip-batch", optarg);
        t->ra.on_nan = strcmp(optarg, "skip-batch") == 0 ? NL_ON_NAN_SKIP_BATCH : NL_ON_NAN_STOP;
        t->a.o.on_nan = (enum nl_on_nan)t->ra.on_nan;
    } else if (c == OPT_CHECKPOINT_EVERY) {
        if (!parse_int(optarg, 1, 0x7fffffffL, &v))
            return usage_error("train",
                               "--checkpoint-every %s: want a whole number of steps "
                               "from 1",
                               optarg);
        t->ra.checkpoint_every = t->a.o.checkpoint_every = v;
    } else if (c == 'd') {
        t->data = optarg;
    } else if (c == 'M') {
        t->model = optarg;
    } else if (c == 'n') {
        if (!*optarg)
            return usage_error("train", "--name must not be empty (leave it out for a "
                                        "generated name)");
        t->name = optarg;
    } else if (c == 'i') {
        t->init = optarg;
    } else if (c == 'P') {
        t->init_partial = 1;
    } else if (c == 'F') {
        t->ft.freeze = optarg;
    } else if (c == 'U') {
        t->ft.up_to = optarg;
    } else if (c == 'R') {
        t->ft.replace_head = 1;
    } else if (c == OPT_HOSTS) {
        t->ca.hosts = optarg;
    } else if (c == OPT_HOSTFILE) {
        t->ca.hostfile = optarg;
    } else if (c == OPT_SSH_CONFIG) {
        t->ca.ssh_config = optarg;
    } else if (c == OPT_ACCEPT_NEW) {
        t->ca.accept_new = 1;
    } else if (c == OPT_REMOTE_NNLAB) {
        t->ca.remote_nnlab = optarg;
    } else if (c == OPT_BIND) {
        t->ca.bind = optarg;
    } else if (c == OPT_PORT_RANGE) {
        if (!parse_port_range(optarg, &t->ca.port_lo, &t->ca.port_hi))
            return usage_error("train", "--port-range %s: want A-B, ports from 1 to 65535", optarg);
    } else if (c == OPT_HEARTBEAT) {
        double sec;
        if (!parse_float(optarg, 0.1, 3600.0, &sec))
            return usage_error("train", "--heartbeat-timeout %s: want seconds, 0.1 to 3600",
                               optarg);
        t->ca.heartbeat_ms = (int)(sec * 1000.0 + 0.5);
    } else if (c == OPT_MAX_RESTARTS) {
        if (!parse_int(optarg, 0, 1000000, &v))
            return usage_error("train", "--max-restarts %s: want a whole number from 0", optarg);
        t->ca.max_restarts = (int)v;
    } else if (c == OPT_COMPRESS) {
        if (strcmp(optarg, "bf16") != 0 && strcmp(optarg, "none") != 0)
            return usage_error("train", "--compress %s: want bf16 or none", optarg);
        t->ca.bf16 = strcmp(optarg, "bf16") == 0;
        t->ra.compress = optarg;
    } else if (c == OPT_OVERLAP) {
        int k = NL_OVERLAP_AUTO;
        while (k <= NL_OVERLAP_OFF && strcmp(optarg, nl_overlap_names[k]) != 0)
            k++;
        if (k > NL_OVERLAP_OFF)
            return usage_error("train", "--overlap %s: want auto, on or off", optarg);
        t->a.o.overlap = k;
    } else if (c == OPT_INSECURE_PLAINTEXT) {
        t->ca.insecure_plaintext = 1;
    } else if (c == OPT_MPI) {
        t->ca.mpi = 1;
    } else if (c == OPT_MPI_EXCHANGE) {
        if (strcmp(optarg, "p2p") != 0 && strcmp(optarg, "collective") != 0)
            return usage_error("train", "--mpi-exchange %s: want p2p or collective", optarg);
        t->ca.mpi_exchange = strcmp(optarg, "collective") == 0 ? 2 : 1;
    } else {
        return parse_train_opt("train", c, &t->a);
    }
    return 0;
}

/* --mpi: the ranks are the cluster, which SSH's options do not reach. */
static int mpi_parse_check(const struct train_cmd *t)
{
    const struct cluster_args *ca = &t->ca;
    if (!ca->mpi && ca->mpi_exchange)
        return usage_error("train", "--mpi-exchange goes with --mpi");
    if (!ca->mpi)
        return 0;
#if !NNLAB_HAVE_MPI
    return usage_error("train", "--mpi: this nnlab was built without MPI");
#else
    if (ca->hosts || ca->hostfile)
        return usage_error("train", "give --hosts, --hostfile or --mpi, not two of them");
    if (ca->ssh_config || ca->remote_nnlab || ca->bind || ca->accept_new || ca->port_lo ||
        ca->max_restarts >= 0 || ca->insecure_plaintext)
        return usage_error("train", "--mpi: the ranks come from the MPI launcher; of the cluster "
                                    "options only --compress, --overlap and --heartbeat-timeout "
                                    "go with it");
    if (t->a.o.on_nan != NL_ON_NAN_STOP)
        return usage_error("train", "--on-nan skip-batch runs on one machine only; a cluster run "
                                    "stops on a non-finite loss");
    if (ca->mpi_exchange == 2 && ca->bf16)
        return usage_error("train", "--mpi-exchange collective sums fp32 gradients: it does not "
                                    "go with --compress bf16");
    return 0;
#endif
}

/* --mpi: MPI is started on every rank; every rank but 0 is a member until the run ends, and
 * returns its exit status in *status (1); rank 0 goes on to drive the run (0). */
static int mpi_begin(struct train_cmd *t, int *status)
{
#if NNLAB_HAVE_MPI
    struct nl_error err = {0};
    mpi = nl_app_module("nnlab-mpi.so", "nl_mpi_module", 1, "the MPI mode's module");
    if (!mpi) {
        *status = EXIT_FAILURE;
        return 1;
    }
    int rc = mpi->start(&t->ca.mp, "nnlab " NNLAB_VERSION, &err);
    if (rc < 0) {
        /* Every rank knows; rank 0 (or a process with no rank) says it. */
        if (!t->ca.mp || mpi->rank(t->ca.mp) == 0)
            *status = fail(&err);
        else
            *status = EXIT_FAILURE;
        mpi->end(t->ca.mp, 0);
        t->ca.mp = NULL;
        return 1;
    }
    /* Every rank read the same command line; nl_mpi_set_exchange checks that they agree. */
    rc = mpi->set_exchange(t->ca.mp, t->ca.mpi_exchange == 2, &err);
    if (rc < 0) {
        /* Rank 0 says why, then ends the job; the others wait for it in nl_mpi_end. */
        const int rank0 = mpi->rank(t->ca.mp) == 0;
        *status = rank0 ? fail(&err) : EXIT_FAILURE;
        mpi->end(t->ca.mp, rank0);
        t->ca.mp = NULL;
        return 1;
    }
    if (mpi->rank(t->ca.mp) == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_mpi_term;
        sigaction(SIGTERM, &sa, NULL);
        return 0;
    }
    rc = mpi->member(t->ca.mp, &err);
    *status = rc < 0 && rc != NL_ECANCELED ? fail(&err) : EXIT_OK;
    mpi->end(t->ca.mp, rc < 0);
    return 1;
#else
    (void)t;
    *status = EXIT_FAILURE;
    return 1;
#endif
}

/* Rank 0's end of an MPI run: the others end with it (aborted when it failed). */
static int mpi_finish(struct train_cmd *t, int status)
{
#if NNLAB_HAVE_MPI
    if (t->ca.mp)
        mpi->end(t->ca.mp, status != EXIT_OK);
    t->ca.mp = NULL;
#else
    (void)t;
#endif
    return status;
}

/* The command line into t, checked as far as it can be without the store: 0 or an exit status. */
static int train_parse(int argc, char **argv, struct train_cmd *t)
{
    int c, li = -1, rc;

    *t = (struct train_cmd){.ca = {.max_restarts = -1},
                            .ra = {.epochs = -1, .on_nan = -1, .checkpoint_every = -1}};
    train_args_init(&t->a);
    while ((c = getopt_long(argc, argv, "", train_opts, &li)) != -1) {
        if (c != 'e' && c != OPT_RESUME && c != OPT_ON_NAN && c != OPT_CHECKPOINT_EVERY &&
            c != '?' && !(c >= OPT_HOSTS && c <= OPT_COMPRESS) && c != OPT_HEARTBEAT &&
            c != OPT_MAX_RESTARTS && c != OPT_INSECURE_PLAINTEXT && c != OPT_FEATURE_CACHE &&
            c != OPT_FEATURE_CACHE_LIMIT && c != OPT_MPI && c != OPT_MPI_EXCHANGE && !t->setting &&
            li >= 0)
            t->setting = train_opts[li].name;
        li = -1;
        rc = train_cmd_opt(t, c);
        if (rc)
            return rc;
    }
    if (optind < argc)
        return usage_error("train", "unexpected argument '%s'", argv[optind]);
    rc = mpi_parse_check(t);
    if (rc)
        return rc;
    if (t->resume && t->setting)
        return usage_error("train",
                           "--resume RUN takes the run's own settings; --%s does not go with it "
                           "(only --epochs, --on-nan, --checkpoint-every and the cluster options "
                           "do)",
                           t->setting);
    if (t->resume && t->ra.compress && !t->ca.hosts && !t->ca.hostfile)
        return usage_error("train", "--compress sets a cluster run's exchange; it needs --hosts or "
                                    "--hostfile");
    if (t->resume)
        return 0;
    if (!t->data || !t->model)
        return usage_error("train", "needs --data NAME and --model SPEC (or --resume RUN)");
    if ((t->ca.hosts || t->ca.hostfile) && t->a.o.on_nan != NL_ON_NAN_STOP)
        return usage_error("train", "--on-nan skip-batch runs on one machine only; a cluster run "
                                    "stops on a non-finite loss");
    if (t->init_partial && !t->init)
        return usage_error("train", "--init-partial needs --init FILE|RUN");
    if (t->ft.replace_head && !t->init)
        return usage_error("train", "--replace-head needs --init FILE|RUN");
    if (t->ca.hosts && t->ca.hostfile)
        return usage_error("train", "give --hosts or --hostfile, not both");
    if (!t->ca.hosts && !t->ca.hostfile && !t->ca.mpi &&
        (t->ca.ssh_config || t->ca.remote_nnlab || t->ca.bind || t->ca.accept_new ||
         t->ca.port_lo || t->ca.bf16 || t->ca.heartbeat_ms || t->ca.max_restarts >= 0 ||
         t->ca.insecure_plaintext || t->a.o.overlap != NL_OVERLAP_AUTO))
        return usage_error("train", "cluster options need --hosts or --hostfile");
    t->a.o.bf16 = t->ca.bf16;
    return 0;
}

static int train_rank0(struct train_cmd *tp);

int cmd_train(int argc, char **argv)
{
    struct train_cmd t;
    int rc = train_parse(argc, argv, &t);

    if (rc)
        return rc;
    if (t.ca.mpi) {
        int status;
        if (mpi_begin(&t, &status))
            return status; /* a member's part, or MPI could not start */
        return mpi_finish(&t, train_rank0(&t));
    }
    return train_rank0(&t);
}

/* The driver's side of `nnlab train`: everything but the members of an MPI run. */
static int train_rank0(struct train_cmd *tp)
{
    struct train_cmd t = *tp;
    struct nl_error err = {0};
    struct nl_store *store;
    int rc;

    if (t.resume) {
        if (t.ra.epochs == 0)
            t.ra.epochs = t.a.o.epochs;
        if (open_store(&store, &err) < 0)
            return fail(&err);
        rc = resume_session(store, t.resume, &t.ra, &t.ca);
        nl_store_close(store);
        return rc;
    }
#if NNLAB_HAVE_SSH
    if (t.ca.hosts || t.ca.hostfile) {
        /* Checked here so that a mistake is a usage error before any run is recorded. */
        struct nl_host *hosts;
        int nhosts;
        if ((t.ca.hostfile ? nl_hosts_load(t.ca.hostfile, &hosts, &nhosts, &err)
                           : nl_hosts_parse(t.ca.hosts, &hosts, &nhosts, &err)) < 0)
            return usage_error("train", "%s", err.msg);
        nl_free(hosts);
    }
#else
    if (t.ca.hosts || t.ca.hostfile)
        return usage_error("train", "this nnlab was built without cluster mode (libssh)");
#endif
    train_args_apply(&t.a);
    if (nl_optim_validate(&t.a.o.optim, &err) < 0)
        return usage_error("train", "%s", err.msg);

    if (open_store(&store, &err) < 0)
        return fail(&err);
    rc =
        train_session(store, t.data, t.model, &t.a.o, t.name, t.init, t.init_partial, &t.ft, &t.ca);
    nl_store_close(store);
    return rc;
}

int cmd_demo(int argc, char **argv)
{
    static const struct option opts[] = {
        {"data-dir", required_argument, NULL, 'D'},
        {"epochs", required_argument, NULL, 'e'},
        {"threads", required_argument, NULL, 't'},
        {NULL, 0, NULL, 0},
    };
    struct train_args a;
    struct nl_error err = {0};
    const char *dir = DEMO_DATA;
    int c, rc;

    train_args_init(&a);
    a.o.epochs = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'D') {
            dir = optarg;
        } else {
            rc = parse_train_opt("demo", c, &a);
            if (rc)
                return rc;
        }
    }
    if (optind < argc)
        return usage_error("demo", "unexpected argument '%s'", argv[optind]);
    train_args_apply(&a);

    struct nl_store *store;
    if (open_store(&store, &err) < 0)
        return fail(&err);
    rc = nl_dataset_exists(store, "fashion", &err);
    if (rc == 0) {
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            nl_store_close(store);
            return failf("demo: %s: no Fashion-MNIST there (apt-get install "
                         "dataset-fashion-mnist, or give --data-dir)",
                         dir);
        }
        if (!g.json && !g.quiet)
            printf("importing Fashion-MNIST from %s as 'fashion'\n", dir);
        /* With a validation split, as the README's examples use it. */
        struct nl_import_opts io = {.val_fraction = 0.1f, .seed = 1, .warn = warn_cb};
        const char *paths[] = {dir};
        rc = nl_import_idx(store, "fashion", paths, 1, &io, &err);
    }
    if (rc < 0) {
        nl_store_close(store);
        return fail(&err);
    }
    rc = train_session(store, "fashion", "lenet", &a.o, NULL, NULL, 0, NULL, NULL);
    nl_store_close(store);
    return rc;
}

/* A run's record as JSON members (no braces): name, dataset, model, status, epochs,
 * val_accuracy, test_accuracy, seconds, created, and the owner of a running or interrupted run. */
static void json_run_members(const struct nl_run_info *r)
{
    printf("\"name\":");
    json_str(stdout, r->name);
    printf(",\"dataset\":");
    json_str(stdout, r->dataset);
    printf(",\"model\":");
    json_str(stdout, r->model);
    printf(",\"status\":");
    json_str(stdout, r->status);
    printf(",\"epochs\":%d,\"val_accuracy\":", r->epochs_done);
    json_num(stdout, r->val_accuracy);
    printf(",\"test_accuracy\":");
    json_num(stdout, r->test_accuracy);
    printf(",\"task\":\"%s\"", r->regression ? "regression" : "classification");
    if (r->regression) {
        /* The accuracies above are R^2. */
        printf(",\"val_r2\":");
        json_num(stdout, r->val_accuracy);
        printf(",\"val_mae\":");
        json_num(stdout, r->val_mae);
        printf(",\"val_rmse\":");
        json_num(stdout, r->val_rmse);
        printf(",\"test_r2\":");
        json_num(stdout, r->test_accuracy);
        printf(",\"test_mae\":");
        json_num(stdout, r->test_mae);
        printf(",\"test_rmse\":");
        json_num(stdout, r->test_rmse);
    }
    printf(",\"seconds\":");
    json_num(stdout, r->seconds);
    printf(",\"created\":");
    json_str(stdout, r->created);
    if (r->owner_host[0]) {
        /* The process training it, or that trained it when it was interrupted. */
        printf(",\"owner\":{\"host\":");
        json_str(stdout, r->owner_host);
        printf(",\"pid\":%ld,\"lives\":%s}", r->owner_pid, r->owner_lives ? "true" : "false");
    }
}

/* `nnlab runs RUN`: one run's record, how its cluster exchanged (--overlap, and what auto chose)
 * and what it did about lost workers. */
static int show_run(struct nl_store *store, const char *name)
{
    struct nl_error err = {0};
    struct nl_run_info r;
    struct nl_run_recovery *rec = NULL;
    struct nl_run_overlap ov = {0};
    char *settings = NULL;
    int n = 0;
    int rc = nl_run_get(store, name, &r, NULL, &settings, &err);
    if (rc == NL_ENOENT)
        nl_error_set(&err, rc, "no run named '%s' (see nnlab runs)", name);
    if (rc == 0 && settings)
        rc = nl_run_overlap_parse(settings, &ov, &err);
    nl_free(settings);
    if (rc == 0)
        rc = nl_run_recoveries(store, r.id, &rec, &n, &err);
    if (rc < 0)
        return fail(&err);
    if (g.json) {
        printf("{");
        json_run_members(&r);
        if (ov.cluster) {
            /* The exchange's --overlap mode and what auto measured and chose. */
            printf(",\"overlap\":{\"mode\":");
            json_str(stdout, ov.mode);
            if (ov.measured) {
                printf(",\"chosen\":\"%s\",\"sync_ms\":",
                       ov.overlapped ? "overlapped" : "synchronous");
                json_num(stdout, ov.sync_ms);
                printf(",\"overlapped_ms\":");
                json_num(stdout, ov.overlapped_ms);
                printf(",\"step\":%ld", ov.step);
            }
            printf("}");
        }
        printf(",\"recoveries\":[");
        for (int i = 0; i < n; i++) {
            printf("%s{\"step\":%ld,\"host\":", i ? "," : "", rec[i].step);
            json_str(stdout, rec[i].host);
            printf(",\"what\":");
            json_str(stdout, rec[i].what);
            printf(",\"action\":");
            json_str(stdout, rec[i].action);
            printf(",\"restarts\":%d,\"workers\":%d,\"time\":", rec[i].restarts, rec[i].workers);
            json_str(stdout, rec[i].created);
            printf("}");
        }
        printf("]}\n");
    } else {
        char mb[4096];
        printf("run '%s': %s on %s, %s, %d epochs", r.name, nl_term_str(mb, sizeof mb, r.model),
               r.dataset, r.status, r.epochs_done);
        if (r.regression) {
            if (isfinite(r.val_accuracy))
                printf(", val R2 %.4f (MAE %.4g, RMSE %.4g)", r.val_accuracy, r.val_mae,
                       r.val_rmse);
            if (isfinite(r.test_accuracy))
                printf(", test R2 %.4f (MAE %.4g, RMSE %.4g)", r.test_accuracy, r.test_mae,
                       r.test_rmse);
        } else {
            if (isfinite(r.val_accuracy))
                printf(", val_acc %.4f", r.val_accuracy);
            if (isfinite(r.test_accuracy))
                printf(", test_acc %.4f", r.test_accuracy);
        }
        printf("\n");
        if (r.owner_lives)
            printf("trained by process %ld on %s\n", r.owner_pid, r.owner_host);
        else if (strcmp(r.status, "interrupted") == 0)
            printf("its process is gone: nnlab train --resume %s goes on from its latest "
                   "checkpoint\n",
                   r.name);
        if (ov.cluster) {
            char ot[160];
            printf("overlap       %s\n", nl_run_overlap_text(&ov, ot, sizeof ot));
        }
        if (n == 0)
            printf("no worker was lost\n");
        for (int i = 0; i < n; i++)
            printf("%s  %s: %s; %s, continued from step %ld on %d worker%s\n", rec[i].created,
                   nl_term_str(mb, sizeof mb, rec[i].host), rec[i].what, rec[i].action, rec[i].step,
                   rec[i].workers, rec[i].workers == 1 ? "" : "s");
    }
    nl_free(rec);
    return EXIT_OK;
}

int cmd_runs(int argc, char **argv)
{
    struct nl_error err = {0};
    struct nl_store *store;
    struct nl_run_info *list;
    int n;

    if (argc > 2)
        return usage_error("runs", "takes at most one RUN");
    if (open_store_read(&store, &err) < 0) {
        /* No store yet: no runs, and nothing created. */
        if (err.code != NL_ENOENT || argc == 2)
            return fail(&err);
        if (g.json)
            printf("{\"runs\":[]}\n");
        else
            printf("no runs yet: %s\n", err.msg);
        return EXIT_OK;
    }
    if (argc == 2) {
        int rc = show_run(store, argv[1]);
        nl_store_close(store);
        return rc;
    }
    int rc = nl_run_list(store, &list, &n, &err);
    nl_store_close(store);
    if (rc < 0)
        return fail(&err);
    if (g.json) {
        printf("{\"runs\":[");
        for (int i = 0; i < n; i++) {
            printf("%s{", i ? "," : "");
            json_run_members(&list[i]);
            printf("}");
        }
        printf("]}\n");
    } else if (n == 0) {
        printf("no runs yet: nnlab train --data NAME --model lenet, or nnlab demo\n");
    } else {
        printf("%-28s %-12s %-10s %-11s %6s %8s %8s %8s  %s\n", "NAME", "DATASET", "MODEL",
               "STATUS", "EPOCHS", "VAL_ACC", "TEST_ACC", "SECONDS", "CREATED");
        for (int i = 0; i < n; i++) {
            const struct nl_run_info *r = &list[i];
            char val[16] = "-", test[16] = "-", secs[16] = "-";
            /* A regression run's scores are R^2, marked so. */
            if (isfinite(r->val_accuracy))
                snprintf(val, sizeof val, "%s%.4f", r->regression ? "R2 " : "", r->val_accuracy);
            if (isfinite(r->test_accuracy))
                snprintf(test, sizeof test, "%s%.4f", r->regression ? "R2 " : "", r->test_accuracy);
            if (isfinite(r->seconds))
                snprintf(secs, sizeof secs, "%.1f", r->seconds);
            char mb[512];
            printf("%-28s %-12s %-10s %-11s %6d %8s %8s %8s  %s\n", r->name, r->dataset,
                   nl_term_str(mb, sizeof mb, r->model), r->status, r->epochs_done, val, test, secs,
                   r->created);
        }
    }
    nl_free(list);
    return EXIT_OK;
}

/* Loads a run's model with its latest weights, and the dataset (the run's unless named). */
static int load_run(struct nl_store *store, const char *run_name, const char *dataset,
                    struct nl_run_info *run, struct nl_model **m, struct nl_dataset **d,
                    struct nl_error *err)
{
    int rc = nl_run_model(store, run_name, 1, warn_cb, NULL, run, m, err);

    *d = NULL;
    if (rc == 0)
        rc = nl_dataset_load(store, dataset ? dataset : run->dataset, d, err);
    if (rc < 0) {
        nl_model_free(*m);
        *m = NULL;
    }
    return rc;
}

/* The members "precision", "recall", "f1" and "support" of one class's (or an average's)
 * metrics; first: they open the object, with no comma before. */
static void print_class_json(const struct nl_class_metrics *cm, int first)
{
    printf("%s\"precision\":", first ? "" : ",");
    json_num(stdout, cm->precision);
    printf(",\"recall\":");
    json_num(stdout, cm->recall);
    printf(",\"f1\":");
    json_num(stdout, cm->f1);
    printf(",\"support\":%ld", cm->support);
}

/* Per class precision, recall, F1 and support, then the macro and weighted averages, as
 * scikit-learn's classification_report lays them out. */
static void print_class_table(const struct nl_metrics *mt, const struct nl_dataset *d)
{
    int width = 12;
    for (int k = 0; k < mt->nclasses; k++)
        if ((int)strlen(d->class_names[k]) > width)
            width = (int)strlen(d->class_names[k]);
    printf("%-*s %9s %9s %9s %9s\n", width, "class", "precision", "recall", "f1", "support");
    for (int k = 0; k < mt->nclasses; k++) {
        const struct nl_class_metrics *cm = &mt->classes[k];
        printf("%-*s %9.4f %9.4f %9.4f %9ld\n", width, d->class_names[k], cm->precision, cm->recall,
               cm->f1, cm->support);
    }
    printf("\n%-*s %9.4f %9.4f %9.4f %9ld\n", width, "macro avg", mt->macro.precision,
           mt->macro.recall, mt->macro.f1, mt->macro.support);
    printf("%-*s %9.4f %9.4f %9.4f %9ld\n", width, "weighted avg", mt->weighted.precision,
           mt->weighted.recall, mt->weighted.f1, mt->weighted.support);
}

/* eval of a regression run: MAE, RMSE and R^2 of the split, in the target's units. */
static int eval_regression(const struct nl_model *m, const struct nl_dataset *d,
                           enum nl_split split, int threads, const char *what, int from_file,
                           struct nl_error *err)
{
    struct nl_reg_sums sums;
    double loss, r2, mae, rmse;
    int rc = nl_evaluate_reg(m, d, split, threads, NL_LOSS_DEFAULT, &loss, &r2, &sums, err);

    if (rc < 0)
        return rc;
    nl_reg_finish(&sums, d->target_std, &mae, &rmse, &r2);
    if (g.json) {
        printf(from_file ? "{\"weights\":" : "{\"run\":");
        json_str(stdout, what);
        printf(",\"dataset\":");
        json_str(stdout, d->name);
        printf(",\"split\":\"%s\",\"samples\":%u,\"task\":\"regression\",\"r2\":",
               nl_split_names[split], d->split[split].n);
        json_num(stdout, r2);
        printf(",\"mae\":");
        json_num(stdout, mae);
        printf(",\"rmse\":");
        json_num(stdout, rmse);
        printf(",\"loss\":");
        json_num(stdout, loss);
        printf(",\"target\":");
        json_str(stdout, d->class_names[0]);
        printf("}\n");
    } else {
        char nb[512];
        printf("%s R2 %.4f, MAE %.4g, RMSE %.4g (loss %.4f) on %u samples of '%s', target '%s'\n",
               nl_split_names[split], r2, mae, rmse, loss, d->split[split].n, d->name,
               nl_term_str(nb, sizeof nb, d->class_names[0]));
    }
    return 0;
}

/* What eval was asked: a run, or a weights file with its --model and --data. */
struct eval_args {
    const char *what; /* RUN or FILE.safetensors */
    const char *data, *model;
    enum nl_split split;
    long threads;
    int from_file;
};

/* eval's options and argument into a; EXIT_OK, or the usage error's exit status. */
static int parse_eval_args(int argc, char **argv, struct eval_args *a)
{
    static const struct option opts[] = {
        {"data", required_argument, NULL, 'd'},
        {"model", required_argument, NULL, 'M'},
        {"split", required_argument, NULL, 'S'},
        {"threads", required_argument, NULL, 't'},
        {NULL, 0, NULL, 0},
    };
    int c;

    *a = (struct eval_args){.split = NL_TEST};
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'd') {
            a->data = optarg;
        } else if (c == 'M') {
            a->model = optarg;
        } else if (c == 'S') {
            int found = 0;
            for (int s = 0; s < NL_NSPLITS; s++)
                if (strcmp(optarg, nl_split_names[s]) == 0) {
                    a->split = (enum nl_split)s;
                    found = 1;
                }
            if (!found)
                return usage_error("eval", "--split %s: want test, val or train", optarg);
        } else if (c == 't') {
            if (!parse_int(optarg, 1, 1024, &a->threads))
                return usage_error("eval", "--threads %s: want a whole number from 1 to 1024",
                                   optarg);
        } else {
            return option_error("eval");
        }
    }
    if (argc - optind != 1)
        return usage_error("eval", "needs one RUN or FILE.safetensors");
    a->what = argv[optind];
    const size_t wl = strlen(a->what);
    a->from_file = wl > 12 && strcmp(a->what + wl - 12, ".safetensors") == 0;
    if (a->from_file && (!a->model || !a->data))
        return usage_error("eval", "a weights file needs --model SPEC and --data NAME");
    if (!a->from_file && a->model)
        return usage_error("eval", "--model goes with a FILE.safetensors, not a run");
    return EXIT_OK;
}

/* The model and dataset eval measures: a weights file's on --data, or a run's (on --data when
 * given). run is zeroed for a file. */
static int eval_load(const struct eval_args *a, struct nl_run_info *run, struct nl_model **m,
                     struct nl_dataset **d, struct nl_error *err)
{
    struct nl_store *store;
    int rc;

    *m = NULL;
    *d = NULL;
    rc = open_store_read(&store, err);
    if (rc < 0)
        return rc;
    if (a->from_file) {
        memset(run, 0, sizeof *run);
        rc = nl_dataset_load(store, a->data, d, err);
        if (rc == 0)
            rc = build_model(m, a->model, NULL, *d, err);
        if (rc == 0)
            rc = nl_safetensors_load(*m, a->what, 0, warn_cb, NULL, NULL, err);
        if (rc < 0) {
            nl_model_free(*m);
            nl_dataset_free(*d);
            *m = NULL;
            *d = NULL;
        }
    } else {
        rc = load_run(store, a->what, a->data, run, m, d, err);
        /* Evaluating a run on a dataset imported again since it trained (with a validation
         * split carved from what was its training data, say) is warned about. */
        char why[1024];
        if (rc == 0 && strcmp((*d)->name, run->dataset) == 0 && a->split != NL_TRAIN &&
            nl_run_data_replaced(store, run, why, sizeof why, err) == 1)
            warn_cb(NULL, why);
    }
    nl_store_close(store);
    return rc;
}

/* eval of a classification run as one JSON object: accuracy, loss, the per-class table and the
 * confusion matrix. */
static void print_eval_json(const struct nl_metrics *mt, const struct nl_dataset *d,
                            enum nl_split split, const char *what, int from_file, double loss)
{
    printf(from_file ? "{\"weights\":" : "{\"run\":");
    json_str(stdout, what);
    printf(",\"dataset\":");
    json_str(stdout, d->name);
    printf(",\"split\":\"%s\",\"samples\":%u,\"accuracy\":", nl_split_names[split],
           d->split[split].n);
    json_num(stdout, mt->accuracy);
    printf(",\"loss\":");
    json_num(stdout, loss);
    printf(",\"%s_accuracy\":", nl_split_names[split]);
    json_num(stdout, mt->accuracy);
    printf(",\"top5_accuracy\":");
    json_num(stdout, mt->topk_accuracy);
    printf(",\"classes\":[");
    for (int k = 0; k < mt->nclasses; k++) {
        printf("%s{\"label\":%d,\"class\":", k ? "," : "", k);
        json_str(stdout, d->class_names[k]);
        print_class_json(&mt->classes[k], 0);
        printf("}");
    }
    printf("],\"macro\":{");
    print_class_json(&mt->macro, 1);
    printf("},\"weighted\":{");
    print_class_json(&mt->weighted, 1);
    printf("},\"confusion\":%s", mt->confusion ? "[" : "null");
    for (int r = 0; mt->confusion && r < mt->nclasses; r++) {
        printf("%s[", r ? "," : "");
        for (int c = 0; c < mt->nclasses; c++)
            printf("%s%ld", c ? "," : "", mt->confusion[(size_t)r * mt->nclasses + c]);
        printf("]");
    }
    printf("%s}\n", mt->confusion ? "]" : "");
}

int cmd_eval(int argc, char **argv)
{
    struct eval_args a;
    struct nl_error err = {0};
    struct nl_run_info run;
    struct nl_model *m;
    struct nl_dataset *d;
    int rc = parse_eval_args(argc, argv, &a);

    if (rc != EXIT_OK)
        return rc;
    if (eval_load(&a, &run, &m, &d, &err) < 0)
        return fail(&err);
    const char *name = a.from_file ? a.what : run.name;
    const enum nl_split split = a.split;
    double loss = NAN;
    struct nl_metrics mt = {0};
    if (d->split[split].n == 0)
        rc = nl_error_set(&err, NL_EINVAL, "dataset '%s' has no %s split", d->name,
                          nl_split_names[split]);
    else if (d->regression)
        rc = eval_regression(m, d, split, (int)a.threads, name, a.from_file, &err);
    else
        rc = nl_evaluate_metrics(m, d, split, (int)a.threads, &loss, &mt, &err);
    if (rc == 0 && !d->regression) {
        if (g.json) {
            print_eval_json(&mt, d, split, name, a.from_file, loss);
        } else {
            printf("%s accuracy %.4f (loss %.4f) on %u samples of '%s'\n", nl_split_names[split],
                   mt.accuracy, loss, d->split[split].n, d->name);
            printf("top-5 accuracy %.4f\n\n", mt.topk_accuracy);
            print_class_table(&mt, d);
        }
    }
    nl_metrics_release(&mt);
    nl_model_free(m);
    nl_dataset_free(d);
    return rc < 0 ? fail(&err) : EXIT_OK;
}

/* One prediction's output: the top classes with probabilities, or a regression value; actual is
 * the row's own target (NAN: none). what names the input (a file, "FILE:LINE", "--row"). */
struct predict_out {
    FILE *out;
    struct nl_exec *x;
    struct nl_infer *run; /* x on the machine's cores, where the model is large enough */
    const struct nl_model *m;
    const struct nl_dataset *d;
    float *probs;
    int *rank;
    int top, count;
    const char *csv; /* the --csv file */
    int text;        /* what is a --text document */
};

static void predict_one(struct predict_out *p, const char *what, const float *in, double actual)
{
    const struct nl_dataset *d = p->d;
    const int k = p->m->nclasses;
    FILE *out = p->out;
    const float *y = nl_infer_forward(p->run, p->m->params, in, 1);
    char cb[512];

    if (d->regression) {
        const double v = (double)y[0] * d->target_std + d->target_mean;
        if (g.json) {
            fprintf(out, "%s{\"input\":", p->count ? "," : "");
            json_str(out, what);
            fprintf(out, ",\"value\":");
            json_num(out, v);
            if (isfinite(actual)) {
                fprintf(out, ",\"actual\":");
                json_num(out, actual);
            }
            fprintf(out, "}");
        } else {
            nl_term_fputs(out, what);
            fprintf(out, ": %s %.6g", nl_term_str(cb, sizeof cb, d->class_names[0]), v);
            if (isfinite(actual))
                fprintf(out, " (actual %.6g)", actual);
            fprintf(out, "\n");
        }
        p->count++;
        return;
    }
    nl_softmax(p->probs, y, 1, k);
    /* The top classes, by selection: top is small. */
    for (int i = 0; i < k; i++)
        p->rank[i] = i;
    for (int i = 0; i < p->top; i++)
        for (int j = i + 1; j < k; j++)
            if (p->probs[p->rank[j]] > p->probs[p->rank[i]]) {
                int t = p->rank[i];
                p->rank[i] = p->rank[j];
                p->rank[j] = t;
            }
    if (g.json) {
        fprintf(out, "%s{\"%s\":", p->count ? "," : "",
                p->text                               ? "text"
                : strchr(what, ':') || what[0] == '-' ? "input"
                                                      : "file");
        json_str(out, what);
        if (isfinite(actual)) {
            fprintf(out, ",\"actual\":");
            json_str(out, d->class_names[(int)actual]);
        }
        fprintf(out, ",\"top\":[");
        for (int i = 0; i < p->top; i++) {
            fprintf(out, "%s{\"label\":%d,\"class\":", i ? "," : "", p->rank[i]);
            json_str(out, d->class_names[p->rank[i]]);
            fprintf(out, ",\"probability\":");
            json_num(out, p->probs[p->rank[i]]);
            fprintf(out, "}");
        }
        fprintf(out, "]}");
    } else {
        if (p->text) {
            char tb[64]; /* the document's start, quoted */
            fprintf(out, "\"%s\"", nl_term_str(tb, sizeof tb, what));
        } else {
            nl_term_fputs(out, what);
        }
        fputc(':', out);
        for (int i = 0; i < p->top; i++)
            fprintf(out, "%s %s %.4f", i ? "," : "",
                    nl_term_str(cb, sizeof cb, d->class_names[p->rank[i]]), p->probs[p->rank[i]]);
        if (isfinite(actual))
            fprintf(out, " (actual %s)", nl_term_str(cb, sizeof cb, d->class_names[(int)actual]));
        fprintf(out, "\n");
    }
    p->count++;
}

static int predict_csv_row(void *ud, long line, const float *x, double target)
{
    struct predict_out *p = ud;
    char what[PATH_MAX + 32];
    snprintf(what, sizeof what, "%s:%ld", p->csv, line);
    predict_one(p, what, x, target);
    return 0;
}

#define MAX_ROWS 1024

/* What predict was asked: a run and its inputs, images (argv[first..argc)), --text documents,
 * or table rows (--row, --csv). */
struct predict_args {
    const char *run;
    char **images;
    int nimages;
    const char *csv, *rows[MAX_ROWS], *texts[MAX_ROWS];
    int nrows, ntexts;
    int table; /* --csv or --row */
    long top;
};

/* predict's options and arguments into a; EXIT_OK, or the usage error's exit status. */
static int parse_predict_args(int argc, char **argv, struct predict_args *a)
{
    static const struct option opts[] = {
        {"top", required_argument, NULL, 'k'},
        {"csv", required_argument, NULL, 'c'},
        {"row", required_argument, NULL, 'r'},
        {"text", required_argument, NULL, 't'},
        {NULL, 0, NULL, 0},
    };
    int c;

    a->csv = NULL;
    a->nrows = a->ntexts = 0;
    a->top = 3;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'c') {
            a->csv = optarg;
        } else if (c == 'r') {
            if (a->nrows == MAX_ROWS)
                return usage_error("predict", "at most %d --row options", MAX_ROWS);
            a->rows[a->nrows++] = optarg;
        } else if (c == 't') {
            if (a->ntexts == MAX_ROWS)
                return usage_error("predict", "at most %d --text options", MAX_ROWS);
            a->texts[a->ntexts++] = optarg;
        } else if (c == 'k') {
            if (!parse_int(optarg, 1, 1000, &a->top))
                return usage_error("predict", "--top %s: want a whole number from 1 to 1000",
                                   optarg);
        } else {
            return option_error("predict");
        }
    }
    a->table = a->csv || a->nrows > 0;
    if (argc - optind < (a->table || a->ntexts ? 1 : 2))
        return usage_error("predict", "needs a RUN and at least one image (PNG or JPEG), "
                                      "--text TEXT for a text run, or --csv FILE or --row VALUES "
                                      "for a table (CSV) run");
    if ((a->table || a->ntexts) && argc - optind > 1)
        return usage_error("predict", "give images, --text, or --csv and --row, not two kinds");
    if (a->table && a->ntexts)
        return usage_error("predict", "give --text, or --csv and --row, not both");
    a->run = argv[optind];
    a->images = argv + optind + 1;
    a->nimages = argc - optind - 1;
    return EXIT_OK;
}

/* Whether the inputs a gives suit what the run trained on: a table, text, or images. */
static int predict_check_run(const struct predict_args *a, const struct nl_run_info *run,
                             const struct nl_dataset *d, struct nl_error *err)
{
    if (!a->table && strcmp(d->kind, "csv") == 0)
        return nl_error_set(err, NL_EINVAL,
                            "run '%s' trained on a table (CSV): predict from --csv FILE or "
                            "--row VALUES",
                            run->name);
    if (a->ntexts && !d->nvocab)
        return nl_error_set(err, NL_EINVAL,
                            "--text: run '%s' was trained on '%s', which is not a text dataset",
                            run->name, run->dataset);
    if (!a->ntexts && d->nvocab)
        return nl_error_set(err, NL_EINVAL, "run '%s' classifies text: give --text TEXT",
                            run->name);
    return 0;
}

/* Every input of a through predict_one, into p->out; in holds one sample. */
static int predict_inputs(const struct predict_args *a, struct predict_out *p, struct nl_table *tab,
                          float *in, struct nl_error *err)
{
    int rc = 0;

    for (int f = 0; rc == 0 && !a->table && f < a->nimages; f++) {
        rc = nl_dataset_sample_from_image(p->d, a->images[f], in, err);
        if (rc == 0)
            predict_one(p, a->images[f], in, NAN);
    }
    p->text = 1;
    for (int i = 0; rc == 0 && i < a->ntexts; i++) {
        rc = nl_dataset_sample_from_text(p->d, a->texts[i], strlen(a->texts[i]), in, NULL, err);
        if (rc < 0)
            nl_error_prefix(err, "--text");
        else
            predict_one(p, a->texts[i], in, NAN);
    }
    p->text = 0;
    for (int r = 0; rc == 0 && r < a->nrows; r++) {
        double target;
        char what[32];
        snprintf(what, sizeof what, a->nrows > 1 ? "--row %d" : "--row", r + 1);
        rc = nl_table_row_text(tab, a->rows[r], what, in, &target, err);
        if (rc == 0)
            predict_one(p, what, in, target);
    }
    if (rc == 0 && a->csv)
        rc = nl_table_read_csv(tab, a->csv, predict_csv_row, p, err);
    return rc;
}

int cmd_predict(int argc, char **argv)
{
    struct predict_args a;
    struct nl_error err = {0};
    int rc = parse_predict_args(argc, argv, &a);

    if (rc != EXIT_OK)
        return rc;
    struct nl_store *store;
    struct nl_run_info run;
    struct nl_model *m;
    struct nl_dataset *d;
    struct nl_table *tab = NULL;
    if (open_store_read(&store, &err) < 0)
        return fail(&err);
    rc = load_run(store, a.run, NULL, &run, &m, &d, &err);
    nl_store_close(store);
    if (rc < 0)
        return fail(&err);
    rc = predict_check_run(&a, &run, d, &err);
    if (rc == 0 && a.table)
        rc = nl_table_open(&tab, d, warn_cb, NULL, &err);
    struct predict_out p = {
        .m = m, .d = d, .csv = a.csv, .top = (int)(a.top > m->nclasses ? m->nclasses : a.top)};
    float *in = nl_alloc_floats(nl_shape_size(d->shape));
    p.probs = nl_alloc_floats((size_t)m->nclasses);
    p.rank = nl_calloc((size_t)m->nclasses, sizeof *p.rank);
    if (rc == 0 && (!in || !p.probs || !p.rank))
        rc = nl_error_set(&err, NL_ENOMEM, "out of memory");
    struct nl_prep *prep = NULL;
    if (rc == 0)
        rc = nl_exec_new_forward(&p.x, m, 1, &err);
    if (rc == 0 && (rc = nl_prep_new(&prep, m, m->params, 0, &err)) == 0)
        nl_exec_use_prep(p.x, prep);
    if (rc == 0)
        rc = nl_infer_new(&p.run, p.x, m, 0, &err);
    /* JSON goes out whole or not at all: it is gathered in memory first. */
    char *json = NULL;
    size_t json_len = 0;
    p.out = stdout;
    if (rc == 0 && g.json) {
        p.out = open_memstream(&json, &json_len);
        if (!p.out) {
            p.out = stdout;
            rc = nl_error_set(&err, NL_ENOMEM, "out of memory");
        }
    }
    if (rc == 0 && g.json) {
        fprintf(p.out, "{\"run\":");
        json_str(p.out, run.name);
        if (d->regression) {
            fprintf(p.out, ",\"target\":");
            json_str(p.out, d->class_names[0]);
        }
        fprintf(p.out, ",\"predictions\":[");
    }
    if (rc == 0)
        rc = predict_inputs(&a, &p, tab, in, &err);
    if (p.out != stdout) {
        fprintf(p.out, "]}\n");
        fclose(p.out);
        if (rc == 0)
            fwrite(json, 1, json_len, stdout);
        free(json);
    }
    nl_table_free(tab);
    nl_infer_free(p.run);
    nl_exec_free(p.x);
    nl_prep_free(prep);
    nl_free(in);
    nl_free(p.probs);
    nl_free(p.rank);
    nl_model_free(m);
    nl_dataset_free(d);
    return rc < 0 ? fail(&err) : EXIT_OK;
}
