/* Training as members of a cluster, without SSH: N member processes on 127.0.0.1 each train
 * their partition through the trainer's gradient synchroniser (partition + mesh + allreduce).
 *
 * - With the same seed and global batch, runs on 1, 2 and 3 members give the same loss curve
 *   and the same final parameters within float tolerance; every member holds the same
 *   parameters; the partitions cover every sample once; bytes per step stay within 2(N-1)/N of
 *   the parameter bytes plus framing; bf16 compression still trains.
 * - Overlap, the trainer's side: with a recording synchroniser, every range the trainer
 *   announces as final (ready) is final, announcements come before the backward pass ends, and
 *   the run ends with the same bits as without overlap.
 * - Overlapping the exchange with the backward pass changes nothing: the shipped lenet and mlp
 *   and a batch-normalised model, fp32 and bf16, on 2 and 3 members of 2 threads each, end with
 *   the same bits as without overlap.
 * - Batch normalisation: N members of T threads each (the same shards as one member of N T
 *   threads) follow one member's loss curve and end with its running statistics.
 * - Clipping (value and norm) on 2 members matches a clipped local run (full batches, so that
 *   the local run sees the same samples per step), as does an unclipped overlapped 1-member run.
 * - Judging, the trainer's side: a member told each epoch's watched accuracy lowers its rate on
 *   a plateau and stops early as the values say, and a resumed one replays the earlier ones.
 * - Text: a small embedbag (embedding, masked average, two dense layers) on token ids, whose
 *   embedding gradients are exchanged as any other, follows a local run on 2 members. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mesh_util.h"
#include "nnlab/alloc.h"
#include "nnlab/cluster.h"
#include "nnlab/model.h"
#include "tap.h"
#include "test_util.h"

enum { CLASSES = 4, MAXN = 3, MAXSTEPS = 64 };
#define MAXPARAMS 600000

static const char secret[] = "cluster-train-test-secret-0123456789";
static const char mlp_small[] = "fc1: dense 24\nrelu\nfc2: dense N\n";
/* A residual block with batch normalisation, as resnet8's, small. */
static const char bn_spec[] = "conv1: conv 6 3x3 pad=1 bias=no\n"
                              "bn1:   batchnorm\n"
                              "stem:  relu\n"
                              "c2:    conv 6 3x3 pad=1 bias=no\n"
                              "b2:    batchnorm\n"
                              "add:   add in=b2,stem\n"
                              "r2:    relu\n"
                              "pool:  globalavgpool\n"
                              "fc:    dense N\n";

struct cfg {
    const char *spec;
    int side, ntrain, batch, epochs;
    int size, threads, bf16, overlap;
    float clip_value, clip_norm; /* side 0: token ids of TEXT_LEN, not images */
};

enum { TEXT_LEN = 16, TEXT_VOCAB = 40 };

struct result {
    int rc;
    char msg[NL_ERR_MAX];
    size_t nparams, ntrainable, nreduce;
    double loss_sum[MAXSTEPS]; /* this member's summed loss per step */
    long samples[MAXSTEPS];
    unsigned long long max_step_bytes;
    double comm, exchange; /* seconds over the run: waited, and exchanged in all */
    double early;          /* the share of bytes sent during backward, summed over the steps */
    long steps;
    float params[MAXPARAMS];
};

/* Documents of 3 to TEXT_LEN words, padding after: common words (ids 2..23) with, one in three,
 * a word of the class (4 per class, ids 24..39). */
static struct nl_dataset *synthetic_text(int ntrain)
{
    struct nl_dataset *d = dataset_new("synthetic", "text", (struct nl_shape){1, 1, TEXT_LEN},
                                       NL_F32, CLASSES, "c", 0.0f, 1.0f);
    struct nl_rng r;

    nl_rng_seed(&r, 12);
    d->nvocab = TEXT_VOCAB;
    float *x = nl_calloc((size_t)ntrain * TEXT_LEN, sizeof *x);
    int32_t *y = nl_calloc((size_t)ntrain, sizeof *y);
    for (int i = 0; i < ntrain; i++) {
        int k = (int)nl_rng_below(&r, CLASSES), n = 3 + (int)nl_rng_below(&r, TEXT_LEN - 2);
        for (int t = 0; t < n; t++)
            x[(size_t)i * TEXT_LEN + t] =
                (float)(nl_rng_below(&r, 3) == 0 ? 24 + 4 * k + (int)nl_rng_below(&r, 4)
                                                 : 2 + (int)nl_rng_below(&r, 22));
        y[i] = k;
    }
    d->split[NL_TRAIN].n = (size_t)ntrain;
    d->split[NL_TRAIN].x = x;
    d->split[NL_TRAIN].y = y;
    return d;
}

/* Four classes, each a bright 4x4 square in its own quadrant of a noisy side x side image. */
static struct nl_dataset *synthetic(int side, int ntrain)
{
    if (side <= 0)
        return synthetic_text(ntrain);
    struct nl_dataset *d = dataset_new("synthetic", "idx", (struct nl_shape){1, side, side}, NL_U8,
                                       CLASSES, "c", 0.25f, 0.3f);
    struct nl_rng r;

    nl_rng_seed(&r, 11);
    uint8_t *x = nl_calloc((size_t)ntrain * side * side, 1);
    int32_t *y = nl_calloc((size_t)ntrain, sizeof *y);
    const int half = side / 2;
    for (int i = 0; i < ntrain; i++) {
        int k = (int)nl_rng_below(&r, CLASSES);
        int oy = (k / 2) * half + 1 + (int)nl_rng_below(&r, (uint32_t)(half - 5));
        int ox = (k % 2) * half + 1 + (int)nl_rng_below(&r, (uint32_t)(half - 5));
        uint8_t *img = x + (size_t)i * side * side;
        for (int p = 0; p < side * side; p++)
            img[p] = (uint8_t)nl_rng_below(&r, 80);
        for (int yy = 0; yy < 4; yy++)
            for (int xx = 0; xx < 4; xx++)
                img[(oy + yy) * side + ox + xx] = (uint8_t)(150 + nl_rng_below(&r, 106));
        y[i] = k;
    }
    d->split[NL_TRAIN].n = (size_t)ntrain;
    d->split[NL_TRAIN].x = x;
    d->split[NL_TRAIN].y = y;
    return d;
}

static void train_opts(struct nl_train_opts *o, const struct cfg *c)
{
    nl_train_defaults(o);
    o->epochs = c->epochs;
    o->batch = c->batch;
    o->threads = c->threads;
    o->seed = 5;
    o->clip_value = c->clip_value;
    o->clip_norm = c->clip_norm;
}

struct hook {
    struct result *res;
    struct nl_member_sync *ms;
    long prev_samples;
};

static int on_event(void *ud, const struct nl_event *ev)
{
    struct hook *h = ud;
    if (ev->kind != NL_EVENT_ITER)
        return 0;
    const long i = (long)(ev->epoch - 1) * ev->iters + ev->iter - 1;
    const long n = ev->iter == 1 ? ev->samples : ev->samples - h->prev_samples;
    h->prev_samples = ev->samples;
    if (i < MAXSTEPS) {
        h->res->loss_sum[i] = ev->loss * (double)n;
        h->res->samples[i] = n;
    }
    h->res->steps = i + 1;
    if (h->ms && h->ms->last_bytes > h->res->max_step_bytes)
        h->res->max_step_bytes = h->ms->last_bytes;
    return 0;
}

static struct nl_model *model(const struct cfg *c, const struct nl_dataset *d, struct nl_error *err)
{
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;
    const char *text = nl_spec_shipped_text(c->spec);

    if (nl_spec_parse(&spec, text ? text : c->spec, "test", NULL, NULL, err) == 0 &&
        (spec->vocab = d->nvocab, nl_model_build(&m, spec, d->shape, d->nclasses, err) == 0))
        nl_model_init_params(m, 5);
    nl_spec_free(spec);
    return m;
}

static void keep(struct result *res, const struct nl_model *m)
{
    res->nparams = m->nparams;
    res->ntrainable = m->ntrainable;
    res->nreduce = m->nreduce;
    if (m->nparams <= MAXPARAMS)
        memcpy(res->params, m->params, m->nparams * sizeof(float));
}

static int member(const struct cfg *c, int rank, int fd, const struct nl_member *members,
                  struct result *res)
{
    struct nl_error err = {0};
    struct nl_dataset *d = synthetic(c->side, c->ntrain), *part_d = NULL;
    struct nl_model *m = NULL;
    struct nl_partition *part = NULL;
    struct nl_mesh *mesh = NULL;
    struct nl_allreduce *ar = NULL;
    struct nl_member_sync ms;
    struct nl_train_opts o;
    struct nl_train_result tr;
    int rc = -1;

    train_opts(&o, c);
    m = model(c, d, &err);
    if (m)
        rc = nl_partition_new(&part, (uint32_t)c->ntrain, c->batch, c->size, rank, o.seed, &err);
    if (rc == 0)
        rc = nl_dataset_subset(&part_d, d, nl_partition_global(part), nl_partition_count(part),
                               &err);
    if (rc == 0)
        rc =
            nl_mesh_connect(&mesh, rank, c->size, fd, members, secret, strlen(secret), 20000, &err);
    if (rc == 0) {
        struct nl_allreduce_opts ao = {
            .n = m->nreduce,
            .ntrainable = m->ntrainable,
            .optim = &o.optim,
            .bf16 = c->bf16,
            .clip_value = c->clip_value,
            .clip_norm = c->clip_norm,
            .overlap = c->overlap,
        };
        rc = nl_allreduce_new(&ar, mesh, m->params, &ao, &err);
    }
    if (rc == 0) {
        nl_member_sync_init(&ms, part, ar, mesh);
        o.sync = &ms.sync;
        struct hook h = {res, &ms, 0};
        struct nl_train_hooks hooks = {on_event, NULL, &h};
        rc = nl_train(m, part_d, &o, &hooks, &tr, &err);
        res->comm = ms.comm_seconds;
        res->exchange = ms.exchange_seconds;
        res->early = ms.early_fraction;
    }
    if (rc == 0)
        keep(res, m);
    res->rc = rc;
    memcpy(res->msg, err.msg, sizeof res->msg);
    nl_allreduce_free(ar);
    nl_mesh_free(mesh);
    nl_partition_free(part);
    nl_dataset_free(part_d);
    nl_model_free(m);
    nl_dataset_free(d);
    return rc == 0 ? 0 : 1;
}

static int wait_child(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int steps_of(const struct cfg *c)
{
    return c->epochs * ((c->ntrain + c->batch - 1) / c->batch);
}

/* Runs c->size members; fills curve (the global mean loss per step) and returns the results
 * (munmap them with release()). */
static struct result *run(const struct cfg *c, double *curve, const char *what)
{
    const int size = c->size;
    struct result *res =
        mmap(NULL, sizeof *res * size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct nl_member members[MAXN];
    int fds[MAXN];
    pid_t pids[MAXN];

    if (res == MAP_FAILED)
        abort();
    loopback_members(members, fds, size);
    for (int r = 0; r < size; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(member(c, r, fds[r], members, &res[r]));
    }
    int all = 1;
    for (int r = 0; r < size; r++) {
        close(fds[r]);
        int st = wait_child(pids[r]);
        if (st != 0)
            diag("member %d: exit %d: %s", r, st, res[r].msg);
        all &= st == 0;
    }
    ok(all, "%s: %d member%s of %d thread%s trained %d epoch%s", what, size, size > 1 ? "s" : "",
       c->threads, c->threads > 1 ? "s" : "", c->epochs, c->epochs > 1 ? "s" : "");
    for (int i = 0; i < steps_of(c) && i < MAXSTEPS; i++) {
        double s = 0;
        long n = 0;
        for (int r = 0; r < size; r++) {
            s += res[r].loss_sum[i];
            n += res[r].samples[i];
        }
        curve[i] = n > 0 ? s / (double)n : NAN;
    }
    return res;
}

static void release(struct result *res, int size)
{
    munmap(res, sizeof *res * (size_t)size);
}

/* The largest difference between two runs' curves, and between their member 0's parameters. */
static double curve_diff(const double *a, const double *b, int steps)
{
    double worst = 0;
    for (int i = 0; i < steps; i++)
        worst = fmax(worst, fabs(a[i] - b[i]));
    return worst;
}

static double param_diff(const float *a, const float *b, size_t lo, size_t hi)
{
    double worst = 0;
    for (size_t i = lo; i < hi; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    return worst;
}

/* N = 1, 2, 3 members of the small mlp agree; bf16 still trains. */
static void test_members(void)
{
    enum { SIDE = 12, NTRAIN = 500, BATCH = 32, EPOCHS = 2 };
    const int steps = EPOCHS * ((NTRAIN + BATCH - 1) / BATCH);
    static double curve[4][MAXSTEPS];
    struct result *res[4];

    for (int n = 1; n <= 3; n++) {
        struct cfg c = {mlp_small, SIDE, NTRAIN, BATCH, EPOCHS, n, 1, 0, 0, 0, 0};
        res[n] = run(&c, curve[n], "mlp");
        long covered = 0;
        for (int r = 0; r < n; r++)
            for (int i = 0; i < steps / EPOCHS; i++)
                covered += res[n][r].samples[i];
        is_int(covered, NTRAIN, "N=%d: an epoch sees every sample once", n);
    }
    const size_t np = res[1]->nparams;
    ok(np > 0 && np <= MAXPARAMS, "the model has %zu parameters", np);
    ok(curve[1][steps - 1] < 0.5 * curve[1][0], "the loss falls: %.4f -> %.4f", curve[1][0],
       curve[1][steps - 1]);
    for (int n = 2; n <= 3; n++) {
        double pworst = 0, spread = 0;
        for (int r = 0; r < n; r++) {
            pworst = fmax(pworst, param_diff(res[n][r].params, res[1][0].params, 0, np));
            spread = fmax(spread, param_diff(res[n][r].params, res[n][0].params, 0, np));
        }
        double worst = curve_diff(curve[n], curve[1], steps);
        ok(worst < 1e-4, "N=%d: the loss curve matches one member's within 1e-4 (%.3g)", n, worst);
        ok(pworst < 1e-4, "N=%d: the final parameters match one member's within 1e-4 (%.3g)", n,
           pworst);
        is_float(spread, 0.0, 0.0, "N=%d: every member holds the same parameters", n);
        unsigned long long most = 0;
        for (int r = 0; r < n; r++)
            if (res[n][r].max_step_bytes > most)
                most = res[n][r].max_step_bytes;
        const double bound = 1.02 * 2.0 * (n - 1) / n * (double)np * 4.0 +
                             2.0 * (n - 1) * (NL_WIRE_SEALED_HEADER + NL_WIRE_TAG);
        ok(most <= bound, "N=%d: at most %llu bytes per member per step (bound %.0f)", n, most,
           bound);
    }
    struct cfg c = {mlp_small, SIDE, NTRAIN, BATCH, EPOCHS, 2, 1, 1, 0, 0, 0};
    res[0] = run(&c, curve[0], "mlp, bf16");
    double worst = curve_diff(curve[0], curve[1], steps);
    ok(worst < 0.05, "bf16 on 2 members follows the fp32 curve within 0.05 (%.3g)", worst);
    release(res[0], 2);
    for (int n = 1; n <= 3; n++)
        release(res[n], n);
}

/* Overlapped and synchronous steps give the same bits. */
static void test_overlap(void)
{
    static const struct {
        const char *spec, *name;
        int side, ntrain;
    } models[] = {
        {"lenet", "lenet", 28, 192},
        {"mlp", "mlp", 28, 192},
        {bn_spec, "batchnorm", 12, 192},
    };
    static double curve[2][MAXSTEPS];
    double comm[2] = {0}, exchange[2] = {0}, early = 0;
    long steps_timed = 0;

    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++)
        for (int bf16 = 0; bf16 <= 1; bf16++)
            for (int n = 2; n <= 3; n++) {
                struct result *res[2];
                char what[2][96];
                struct cfg c = {models[mi].spec,
                                models[mi].side,
                                models[mi].ntrain,
                                32,
                                1,
                                n,
                                2,
                                bf16,
                                0,
                                0,
                                0};
                if (models[mi].spec == bn_spec && bf16)
                    continue; /* bf16 is the same code for every model */
                for (int ov = 0; ov <= 1; ov++) {
                    snprintf(what[ov], sizeof what[ov], "%s%s%s", models[mi].name,
                             bf16 ? " bf16" : "", ov ? ", overlapped" : "");
                    c.overlap = ov;
                    res[ov] = run(&c, curve[ov], what[ov]);
                }
                const size_t np = res[0][0].nparams;
                int same = np > 0 && np <= MAXPARAMS && res[1][0].nparams == np;
                for (int r = 0; same && r < n; r++)
                    same = memcmp(res[0][r].params, res[1][r].params, np * sizeof(float)) == 0 &&
                           memcmp(res[0][0].params, res[0][r].params, np * sizeof(float)) == 0;
                ok(same, "%s on %d members: overlapped and synchronous runs end bit for bit alike",
                   what[0], n);
                ok(memcmp(curve[0], curve[1], (size_t)steps_of(&c) * sizeof(double)) == 0,
                   "%s on %d members: so do their loss curves", what[0], n);
                for (int ov = 0; ov <= 1; ov++)
                    for (int r = 0; r < n; r++) {
                        comm[ov] += res[ov][r].comm;
                        exchange[ov] += res[ov][r].exchange;
                        early += ov ? res[ov][r].early : 0.0;
                        steps_timed += ov == 0 ? res[ov][r].steps : 0;
                    }
                release(res[0], n);
                release(res[1], n);
            }
    /* Timing on a loaded machine proves nothing; report it. The overlapped exchange's span runs
     * from the first slice ready to the end, so it takes in backward time too. */
    diag("per member-step: synchronous steps wait %.3f ms (exchanging %.3f ms); overlapped "
         "steps wait %.3f ms after the backward pass (exchange span %.3f ms): %.0f%% of the "
         "wait hidden; %.0f%% of the bytes went out during the backward pass",
         1e3 * comm[0] / (double)steps_timed, 1e3 * exchange[0] / (double)steps_timed,
         1e3 * comm[1] / (double)steps_timed, 1e3 * exchange[1] / (double)steps_timed,
         comm[0] > 0 ? 100.0 * (1.0 - comm[1] / comm[0]) : 0.0,
         100.0 * early / (double)steps_timed);
}

/* Batch normalisation: N members of T threads each against one member of N T threads (the same
 * shards, so the same normalisation), and the running statistics. */
static void test_batchnorm(void)
{
    enum { SIDE = 12, NTRAIN = 192, BATCH = 24, EPOCHS = 2 };
    static double curve[2][MAXSTEPS];

    for (int n = 2; n <= 3; n++) {
        struct cfg one = {bn_spec, SIDE, NTRAIN, BATCH, EPOCHS, 1, n, 0, 0, 0, 0};
        struct cfg many = {bn_spec, SIDE, NTRAIN, BATCH, EPOCHS, n, 1, 0, 1, 0, 0};
        struct result *r1 = run(&one, curve[0], "batchnorm");
        struct result *rn = run(&many, curve[1], "batchnorm, overlapped");
        const size_t nt = r1->ntrainable, nr = r1->nreduce, np = r1->nparams;
        const int steps = steps_of(&one);
        ok(nt < nr && nr <= np, "the model has statistics: [%zu, %zu)", nt, nr);
        double moved = 0;
        for (size_t i = nt; i < nr; i++)
            moved = fmax(moved, fabs(r1->params[i] - (i < (nt + nr) / 2 ? 0.0f : 1.0f)));
        ok(moved > 1e-3, "the running statistics moved (by up to %.3g)", moved);
        ok(curve[0][steps - 1] < curve[0][0], "the loss falls: %.4f -> %.4f", curve[0][0],
           curve[0][steps - 1]);
        double worst = curve_diff(curve[0], curve[1], steps);
        ok(worst < 1e-4, "%d members x 1 thread follow 1 member x %d threads within 1e-4 (%.3g)", n,
           n, worst);
        double st = 0, tr = 0, spread = 0;
        for (int r = 0; r < n; r++) {
            tr = fmax(tr, param_diff(rn[r].params, r1->params, 0, nt));
            st = fmax(st, param_diff(rn[r].params, r1->params, nt, nr));
            spread = fmax(spread, param_diff(rn[r].params, rn[0].params, 0, np));
        }
        ok(tr < 1e-4, "N=%d: the trained parameters match within 1e-4 (%.3g)", n, tr);
        ok(st < 1e-4, "N=%d: the running statistics match within 1e-4 (%.3g)", n, st);
        is_float(spread, 0.0, 0.0, "N=%d: every member holds the same parameters and statistics",
                 n);
        release(r1, 1);
        release(rn, n);
    }
}

/* A local run of c (no synchroniser), in this process. */
static void local(const struct cfg *c, struct result *res, double *curve)
{
    struct nl_error err = {0};
    struct nl_dataset *d = synthetic(c->side, c->ntrain);
    struct nl_model *m = model(c, d, &err);
    struct nl_train_opts o;
    struct nl_train_result tr;
    struct hook h = {res, NULL, 0};
    struct nl_train_hooks hooks = {on_event, NULL, &h};

    memset(res, 0, sizeof *res);
    train_opts(&o, c);
    res->rc = m ? nl_train(m, d, &o, &hooks, &tr, &err) : -1;
    if (res->rc == 0)
        keep(res, m);
    else
        diag("local run: %s", err.msg);
    for (int i = 0; i < steps_of(c); i++)
        curve[i] = res->loss_sum[i] / (double)res->samples[i];
    nl_model_free(m);
    nl_dataset_free(d);
}

/* Clipping on a cluster against clipping on one machine; full batches, so that every step sees
 * the same samples whatever the order. */
static void test_clipping(void)
{
    enum { SIDE = 12, NTRAIN = 96, EPOCHS = 8 };
    static double curve[3][MAXSTEPS];
    static struct result loc, plain;
    static const struct {
        float value, norm;
        const char *name;
    } clips[] = {
        {0.0f, 0.0f, "no clipping"},
        {0.0f, 0.05f, "clip-norm 0.05"},
        {2e-3f, 0.0f, "clip-value 0.002"},
        {2e-3f, 0.05f, "clip-value 0.002 and clip-norm 0.05"},
    };

    for (size_t k = 0; k < sizeof clips / sizeof clips[0]; k++) {
        const int n = k == 0 ? 1 : 2;
        struct cfg c = {mlp_small, SIDE, NTRAIN, NTRAIN,         EPOCHS,       n,
                        2,         0,    1,      clips[k].value, clips[k].norm};
        struct result *rn = run(&c, curve[1], clips[k].name);
        c.size = 1;
        local(&c, k == 0 ? &plain : &loc, curve[2]);
        struct result *l = k == 0 ? &plain : &loc;
        const size_t np = l->nparams;
        if (k == 0)
            memcpy(curve[0], curve[2], sizeof curve[0]);
        ok(l->rc == 0 && np == rn[0].nparams, "%s: a local run of the same model", clips[k].name);
        double worst = curve_diff(curve[1], curve[2], EPOCHS);
        double pw = param_diff(rn[0].params, l->params, 0, np);
        ok(worst < 1e-5 && pw<1e-5,
                              "%s: %d member%s (overlapped) match%s the local run (loss %.3g, "
                              "parameters %.3g)",
                              clips[k].name, n, n> 1
               ? "s"
               : "",
           n > 1 ? "" : "es", worst, pw);
        if (k > 0) {
            double effect = param_diff(l->params, plain.params, 0, np);
            ok(effect > 1e-3, "%s: clipping changes the result (by up to %.3g)", clips[k].name,
               effect);
        }
        release(rn, n);
    }
}

/* A synchroniser without a network that records what the trainer announces: each
 * ready(from, stats_from) copies what it newly declares final aside; step() checks that the
 * copies equal the final gradient, then applies plain SGD (the statistics sums stay in grad, as
 * one member's are the global ones). */
struct probe {
    struct nl_sync sync;
    size_t nt, nr;
    int batch, ntrain;
    pthread_mutex_t lock;
    float *grad, *snap;
    size_t low, low_s;
    long early, steps, bad;
};

static int probe_share(void *ud, int epoch, long it, uint32_t *idx, int *global)
{
    struct probe *p = ud;
    for (int i = 0; i < p->batch; i++)
        idx[i] = (uint32_t)(((long)(epoch - 1) * 7 + it * p->batch + i) % p->ntrain);
    *global = p->batch;
    return p->batch;
}

static int probe_begin(void *ud, float *params, float *grad, long step, float lr)
{
    struct probe *p = ud;
    p->grad = grad;
    p->low = p->nt;
    p->low_s = p->nr;
    return 0;
}

static void probe_ready(void *ud, size_t from, size_t stats_from)
{
    struct probe *p = ud;
    pthread_mutex_lock(&p->lock);
    if (from < p->low) {
        memcpy(p->snap + from, p->grad + from, (p->low - from) * sizeof(float));
        p->low = from;
    }
    if (stats_from < p->low_s) {
        memcpy(p->snap + stats_from, p->grad + stats_from, (p->low_s - stats_from) * sizeof(float));
        p->low_s = stats_from;
    }
    p->early += p->low > 0 || p->low_s > p->nt;
    pthread_mutex_unlock(&p->lock);
}

static int probe_step(void *ud, float *params, float *grad, long step, float lr,
                      struct nl_error *err)
{
    struct probe *p = ud;
    p->steps++;
    if (p->sync.begin &&
        (p->low != 0 || p->low_s != p->nt || memcmp(p->snap, grad, p->nr * sizeof(float)) != 0))
        p->bad++;
    for (size_t i = 0; i < p->nt; i++)
        params[i] -= lr * grad[i];
    return 0;
}

static void test_announcements(void)
{
    static const struct {
        const char *spec, *name;
        int side;
    } models[] = {{"lenet", "lenet", 28}, {"mlp", "mlp", 28}, {bn_spec, "batchnorm", 12}};
    enum { NTRAIN = 90, BATCH = 20, THREADS = 3 };

    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        struct cfg c = {models[mi].spec, models[mi].side, NTRAIN, BATCH, 1, 1, THREADS, 0, 0, 0, 0};
        struct nl_dataset *d = synthetic(c.side, NTRAIN);
        struct nl_error err = {0};
        struct nl_model *m[2] = {model(&c, d, &err), model(&c, d, &err)};
        struct probe p[2];
        int rc[2];
        for (int ov = 0; ov <= 1; ov++) {
            struct nl_train_opts o;
            struct nl_train_result tr;
            train_opts(&o, &c);
            memset(&p[ov], 0, sizeof p[ov]);
            p[ov].nt = m[ov]->ntrainable;
            p[ov].nr = m[ov]->nreduce;
            p[ov].batch = BATCH;
            p[ov].ntrain = NTRAIN;
            p[ov].snap = nl_alloc_floats(m[ov]->nreduce);
            pthread_mutex_init(&p[ov].lock, NULL);
            p[ov].sync = (struct nl_sync){.iters = 4,
                                          .share = probe_share,
                                          .step = probe_step,
                                          .begin = ov ? probe_begin : NULL,
                                          .ready = ov ? probe_ready : NULL,
                                          .ud = &p[ov]};
            o.sync = &p[ov].sync;
            rc[ov] = nl_train(m[ov], d, &o, NULL, &tr, &err);
            if (rc[ov] < 0)
                diag("%s: %s", models[mi].name, err.msg);
            pthread_mutex_destroy(&p[ov].lock);
            nl_free(p[ov].snap);
        }
        ok(rc[0] == 0 && rc[1] == 0 && p[1].steps == 4,
           "%s, %d threads: 4 steps with a recording "
           "synchroniser",
           models[mi].name, THREADS);
        is_int(p[1].bad, 0, "%s: every range announced as final was final", models[mi].name);
        ok(p[1].early >= 4, "%s: %ld announcements before the end of the backward pass",
           models[mi].name, p[1].early);
        ok(memcmp(m[0]->params, m[1]->params, m[0]->nparams * sizeof(float)) == 0,
           "%s: the run ends with the same bits as without overlap", models[mi].name);
        nl_model_free(m[0]);
        nl_model_free(m[1]);
        nl_dataset_free(d);
    }
}

/* A member that follows a run's watched accuracy: the probe's share and SGD step, and a judge
 * that hands out scripted values (or fails) and records the epochs it was asked about. */
struct judged {
    struct probe p;
    const double *script;
    int asked[16], nasked;
    int fail_at;  /* the judge fails at this epoch; 0: never */
    float lr[16]; /* the rate of each epoch's first step */
};

static int judged_judge(void *ud, int epoch, double *watched, struct nl_error *err)
{
    struct judged *j = ud;
    if (j->nasked < 16)
        j->asked[j->nasked++] = epoch;
    if (epoch == j->fail_at)
        return nl_error_set(err, NL_ECANCELED, "the driver called the run off after epoch %d",
                            epoch);
    *watched = j->script[epoch - 1];
    return 0;
}

static int judged_event(void *ud, const struct nl_event *ev)
{
    struct judged *j = ud;
    if (ev->kind == NL_EVENT_ITER && ev->iter == 1 && ev->epoch < 16)
        j->lr[ev->epoch] = (float)ev->lr;
    return 0;
}

static int judged_run(struct judged *j, const struct nl_resume *resume, int with_judge,
                      struct nl_train_result *tr, struct nl_error *err)
{
    enum { NTRAIN = 60, BATCH = 15 };
    struct cfg c = {mlp_small, 12, NTRAIN, BATCH, 6, 1, 2, 0, 0, 0, 0};
    struct nl_dataset *d = synthetic(c.side, NTRAIN);
    struct nl_model *m = model(&c, d, err);
    struct nl_train_opts o;
    train_opts(&o, &c);
    o.optim.momentum = 0.0f;
    o.optim.lr = 0.1f;
    nl_schedule_parse(&o.schedule, "plateau:1:0.1", NULL);
    o.target_accuracy = 0.85;
    memset(&j->p, 0, sizeof j->p);
    j->p.nt = m->ntrainable;
    j->p.nr = m->nreduce;
    j->p.batch = BATCH;
    j->p.ntrain = NTRAIN;
    j->p.sync = (struct nl_sync){.iters = 4,
                                 .share = probe_share,
                                 .step = probe_step,
                                 .judge = with_judge ? judged_judge : NULL,
                                 .ud = j};
    o.sync = &j->p.sync;
    o.resume = resume;
    struct nl_train_hooks hooks = {judged_event, NULL, j};
    int rc = nl_train(m, d, &o, &hooks, tr, err);
    nl_model_free(m);
    nl_dataset_free(d);
    return rc;
}

/* The trainer's side of judging: a member asks for each epoch's watched accuracy (but the
 * last's), lowers the rate on a plateau and stops early as the values say; a resumed member
 * replays the values of the epochs before its start; a judge's error ends the run; a member
 * that cannot be told is refused. */
static void test_judge(void)
{
    /* Epoch 2 does not improve on epoch 1 (plateau, patience 1: the rate drops tenfold for
     * epoch 3); epoch 4 reaches the target 0.85. */
    static const double script[6] = {0.5, 0.5, 0.6, 0.9, 0.95, 0.99};
    struct judged j = {.script = script};
    struct nl_train_result tr;
    struct nl_error err = {0};

    int rc = judged_run(&j, NULL, 1, &tr, &err);
    ok(rc == 0, "a judged member trains: %s", rc ? err.msg : "");
    is_int(tr.epochs, 4, "it stops after the epoch that reaches the target");
    is_int(tr.stopped_early, 1, "early");
    ok(j.nasked == 4 && j.asked[0] == 1 && j.asked[1] == 2 && j.asked[2] == 3 && j.asked[3] == 4,
       "it asked about epochs 1 to 4 in order (%d asks)", j.nasked);
    ok(j.lr[1] == 0.1f && j.lr[2] == 0.1f && fabsf(j.lr[3] - 0.01f) < 1e-9f &&
           fabsf(j.lr[4] - 0.01f) < 1e-9f,
       "the plateau lowered the rate after epoch 2 (%g %g %g %g)", j.lr[1], j.lr[2], j.lr[3],
       j.lr[4]);

    /* Resumed after epoch 2: the factor of the replayed epochs from the first step on. */
    struct judged jr = {.script = script};
    struct nl_resume r = {.epoch = 2, .iteration = 8, .watched = script};
    rc = judged_run(&jr, &r, 1, &tr, &err);
    ok(rc == 0 && tr.epochs == 4 && tr.stopped_early,
       "a resumed judged member stops after epoch %d", tr.epochs);
    ok(jr.nasked == 2 && jr.asked[0] == 3 && fabsf(jr.lr[3] - 0.01f) < 1e-9f,
       "it asks from epoch 3 on (%d), at the lowered rate %g", jr.nasked ? jr.asked[0] : 0,
       jr.lr[3]);

    struct judged jf = {.script = script, .fail_at = 2};
    rc = judged_run(&jf, NULL, 1, &tr, &err);
    is_int(rc, NL_ECANCELED, "a judge's error ends the run");
    like(err.msg, "after epoch 2", "with its message: %s", err.msg);

    struct judged jn = {.script = script};
    rc = judged_run(&jn, NULL, 0, &tr, &err);
    is_int(rc, NL_EINVAL, "a member that cannot be told the watched accuracy is refused");
    like(err.msg, "validation accuracy", "saying why: %s", err.msg);
}

/* A small embedbag on 2 members against one member (mini-batches: the same data order), and
 * against a local run of the same seed (full batches, so that every step sees the same samples
 * whatever the order). */
static void test_text(void)
{
    enum { NTRAIN = 400, BATCH = 40, EPOCHS = 6, FULL_EPOCHS = 20 };
    static const char spec[] = "embed: embedding 8\npool: globalavgpool1d in=embed,input\n"
                               "fc1: dense 16\nrelu\nfc2: dense N\n";
    const int steps = EPOCHS * ((NTRAIN + BATCH - 1) / BATCH);
    static double curve[4][MAXSTEPS];
    static struct result loc;
    struct result *res[4];

    for (int n = 1; n <= 2; n++) {
        struct cfg c = {spec, 0, NTRAIN, BATCH, EPOCHS, n, 2, 0, 0, 0, 0};
        res[n] = run(&c, curve[n], "embedbag on token ids");
    }
    const size_t np = res[1]->nparams;
    ok(curve[1][steps - 1] < 0.95 * curve[1][0], "text: the loss falls: %.4f -> %.4f", curve[1][0],
       curve[1][steps - 1]);
    double worst = curve_diff(curve[2], curve[1], steps);
    double pworst = fmax(param_diff(res[2][0].params, res[1][0].params, 0, np),
                         param_diff(res[2][1].params, res[1][0].params, 0, np));
    ok(worst < 1e-4, "text: 2 members follow one member's loss curve within 1e-4 (%.3g)", worst);
    ok(pworst < 1e-4, "text: and end with its parameters within 1e-4 (%.3g)", pworst);

    struct cfg full = {spec, 0, NTRAIN, NTRAIN, FULL_EPOCHS, 2, 2, 0, 0, 0, 0};
    res[3] = run(&full, curve[3], "embedbag on token ids, full batches");
    full.size = 1;
    local(&full, &loc, curve[0]);
    worst = curve_diff(curve[3], curve[0], FULL_EPOCHS);
    pworst = param_diff(res[3][0].params, loc.params, 0, np);
    ok(worst < 1e-4, "text: 2 members follow a local run's loss curve within 1e-4 (%.3g)", worst);
    ok(pworst < 1e-4, "text: and end with its parameters within 1e-4 (%.3g)", pworst);
    release(res[1], 1);
    release(res[2], 2);
    release(res[3], 2);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_text();
    test_judge();
    test_announcements();
    test_members();
    test_batchnorm();
    test_clipping();
    test_overlap();
    return done_testing();
}
