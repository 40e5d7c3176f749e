/* Training as members of a cluster, without SSH: N member processes on 127.0.0.1 each train
 * their partition through the trainer's gradient synchroniser (partition + mesh + allreduce).
 * With the same seed and global batch, runs on 1, 2 and 3 members give the same loss curve and
 * the same final parameters within float tolerance; every member holds the same parameters; the
 * partitions cover every sample once; bytes per step stay within 2(N-1)/N of the parameter
 * bytes plus framing; bf16 compression still trains. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/cluster.h"
#include "nnlab/model.h"
#include "tap.h"

enum { SIDE = 12, CLASSES = 4, NTRAIN = 500, BATCH = 32, EPOCHS = 2, MAXN = 3 };
#define ITERS     ((NTRAIN + BATCH - 1) / BATCH)
#define MAXPARAMS 8192

static const char secret[] = "cluster-train-test-secret-0123456789";
static const char spec_text[] = "fc1: dense 24\nrelu\nfc2: dense N\n";

struct result {
    int rc;
    char msg[NL_ERR_MAX];
    size_t nparams;
    double loss_sum[EPOCHS * ITERS]; /* this member's summed loss per step */
    long samples[EPOCHS * ITERS];
    unsigned long long max_step_bytes;
    float params[MAXPARAMS];
};

static struct nl_dataset *synthetic(void)
{
    struct nl_dataset *d = nl_calloc(1, sizeof *d);
    struct nl_rng r;

    nl_rng_seed(&r, 11);
    d->name = nl_strdup("synthetic");
    d->source = nl_strdup("test");
    d->kind = nl_strdup("idx");
    d->shape = (struct nl_shape){1, SIDE, SIDE};
    d->dtype = NL_U8;
    d->nclasses = CLASSES;
    d->class_names = nl_calloc(CLASSES, sizeof *d->class_names);
    for (int k = 0; k < CLASSES; k++)
        d->class_names[k] = nl_strdup("c");
    d->nnorm = 1;
    d->mean = nl_calloc(1, sizeof(float));
    d->std = nl_calloc(1, sizeof(float));
    d->mean[0] = 0.25f;
    d->std[0] = 0.3f;
    uint8_t *x = nl_calloc((size_t)NTRAIN * SIDE * SIDE, 1);
    int32_t *y = nl_calloc(NTRAIN, sizeof *y);
    for (uint32_t i = 0; i < NTRAIN; i++) {
        int k = (int)nl_rng_below(&r, CLASSES);
        int oy = (k / 2) * 6 + 1 + (int)nl_rng_below(&r, 3);
        int ox = (k % 2) * 6 + 1 + (int)nl_rng_below(&r, 3);
        uint8_t *img = x + (size_t)i * SIDE * SIDE;
        for (int p = 0; p < SIDE * SIDE; p++)
            img[p] = (uint8_t)nl_rng_below(&r, 80);
        for (int yy = 0; yy < 4; yy++)
            for (int xx = 0; xx < 4; xx++)
                img[(oy + yy) * SIDE + ox + xx] = (uint8_t)(150 + nl_rng_below(&r, 106));
        y[i] = k;
    }
    d->split[NL_TRAIN].n = NTRAIN;
    d->split[NL_TRAIN].x = x;
    d->split[NL_TRAIN].y = y;
    return d;
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
    h->res->loss_sum[i] = ev->loss * (double)n;
    h->res->samples[i] = n;
    if (h->ms->last_bytes > h->res->max_step_bytes)
        h->res->max_step_bytes = h->ms->last_bytes;
    return 0;
}

static int member(int rank, int size, int fd, const struct nl_member *members, int bf16,
                  struct result *res)
{
    struct nl_error err = {0};
    struct nl_dataset *d = synthetic(), *part_d = NULL;
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;
    struct nl_partition *part = NULL;
    struct nl_mesh *mesh = NULL;
    struct nl_allreduce *ar = NULL;
    struct nl_member_sync ms;
    struct nl_train_opts o;
    struct nl_train_result tr;
    int rc;

    nl_train_defaults(&o);
    o.epochs = EPOCHS;
    o.batch = BATCH;
    o.threads = 1;
    o.seed = 5;
    rc = nl_spec_parse(&spec, spec_text, "test", NULL, NULL, &err);
    if (rc == 0)
        rc = nl_model_build(&m, spec, d->shape, d->nclasses, &err);
    if (rc == 0) {
        nl_model_init_params(m, o.seed);
        rc = nl_partition_new(&part, NTRAIN, BATCH, size, rank, o.seed, &err);
    }
    if (rc == 0)
        rc = nl_dataset_subset(&part_d, d, nl_partition_global(part), nl_partition_count(part),
                               &err);
    if (rc == 0)
        rc = nl_mesh_connect(&mesh, rank, size, fd, members, secret, strlen(secret), 10000, &err);
    if (rc == 0)
        rc = nl_allreduce_new(&ar, mesh, m->params, m->nparams, &o.optim, bf16, &err);
    if (rc == 0) {
        nl_member_sync_init(&ms, part, ar, mesh);
        o.sync = &ms.sync;
        struct hook h = {res, &ms, 0};
        struct nl_train_hooks hooks = {on_event, NULL, &h};
        rc = nl_train(m, part_d, &o, &hooks, &tr, &err);
    }
    if (rc == 0) {
        res->nparams = m->nparams;
        memcpy(res->params, m->params, m->nparams * sizeof(float));
    }
    res->rc = rc;
    memcpy(res->msg, err.msg, sizeof res->msg);
    nl_allreduce_free(ar);
    nl_mesh_free(mesh);
    nl_partition_free(part);
    nl_dataset_free(part_d);
    nl_model_free(m);
    nl_spec_free(spec);
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

/* Runs size members; fills curve (the global mean loss per step) and returns the results. */
static struct result *run(int size, int bf16, double *curve)
{
    struct result *res =
        mmap(NULL, sizeof *res * size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct nl_member members[MAXN];
    struct nl_error err = {0};
    int fds[MAXN];
    pid_t pids[MAXN];

    for (int r = 0; r < size; r++) {
        snprintf(members[r].name, sizeof members[r].name, "node%d", r + 1);
        snprintf(members[r].addr, sizeof members[r].addr, "127.0.0.1");
        if (nl_net_listen(&fds[r], "127.0.0.1", 0, 0, &members[r].port, &err) < 0)
            abort();
    }
    for (int r = 0; r < size; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(member(r, size, fds[r], members, bf16, &res[r]));
    }
    int all = 1;
    for (int r = 0; r < size; r++) {
        close(fds[r]);
        int st = wait_child(pids[r]);
        if (st != 0)
            diag("member %d: exit %d: %s", r, st, res[r].msg);
        all &= st == 0;
    }
    ok(all, "%d member%s%s trained %d epochs", size, size > 1 ? "s" : "", bf16 ? " (bf16)" : "",
       EPOCHS);
    long covered = 0;
    for (int i = 0; i < EPOCHS * ITERS; i++) {
        double s = 0;
        long n = 0;
        for (int r = 0; r < size; r++) {
            s += res[r].loss_sum[i];
            n += res[r].samples[i];
        }
        curve[i] = s / (double)n;
        if (i < ITERS)
            covered += n;
    }
    is_int(covered, NTRAIN, "N=%d: an epoch sees every sample once", size);
    return res;
}

int main(void)
{
    static double curve[4][EPOCHS * ITERS];
    struct result *res[4];

    signal(SIGPIPE, SIG_IGN);
    for (int n = 1; n <= 3; n++)
        res[n] = run(n, 0, curve[n]);
    const size_t np = res[1]->nparams;
    ok(np > 0 && np <= MAXPARAMS, "the model has %zu parameters", np);
    ok(curve[1][EPOCHS * ITERS - 1] < 0.5 * curve[1][0], "the loss falls: %.4f -> %.4f",
       curve[1][0], curve[1][EPOCHS * ITERS - 1]);
    for (int n = 2; n <= 3; n++) {
        double worst = 0, pworst = 0, spread = 0;
        for (int i = 0; i < EPOCHS * ITERS; i++)
            worst = fmax(worst, fabs(curve[n][i] - curve[1][i]));
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < np; i++) {
                pworst = fmax(pworst, fabs((double)res[n][r].params[i] - res[1][0].params[i]));
                spread = fmax(spread, fabs((double)res[n][r].params[i] - res[n][0].params[i]));
            }
        ok(worst < 1e-4, "N=%d: the loss curve matches one member's within 1e-4 (%.3g)", n, worst);
        ok(pworst < 1e-4, "N=%d: the final parameters match one member's within 1e-4 (%.3g)", n,
           pworst);
        is_float(spread, 0.0, 0.0, "N=%d: every member holds the same parameters", n);
        unsigned long long most = 0;
        for (int r = 0; r < n; r++)
            if (res[n][r].max_step_bytes > most)
                most = res[n][r].max_step_bytes;
        const double bound =
            1.02 * 2.0 * (n - 1) / n * (double)np * 4.0 + 2.0 * (n - 1) * NL_WIRE_HEADER;
        ok(most <= bound, "N=%d: at most %llu bytes per member per step (bound %.0f)", n, most,
           bound);
    }
    res[0] = run(2, 1, curve[0]);
    double worst = 0;
    for (int i = 0; i < EPOCHS * ITERS; i++)
        worst = fmax(worst, fabs(curve[0][i] - curve[1][i]));
    ok(worst < 0.05, "bf16 on 2 members follows the fp32 curve within 0.05 (%.3g)", worst);
    for (int n = 0; n <= 3; n++)
        munmap(res[n], sizeof *res[n] * (size_t)(n == 0 ? 2 : n));
    return done_testing();
}
