/* The mesh and the sliced allreduce, with N member processes on 127.0.0.1: results equal to a
 * single-process reference (bit for bit in fp32, within bf16 rounding with compression), the same
 * parameters on every member, bytes sent per step within 2(N-1)/N of the parameter bytes plus
 * framing, a connection without the secret dropped while the mesh still forms, and a member
 * that never comes reported by name. Also: statistics after the trainable range (summed, not
 * optimized, returned in the gradient), clipping of the summed gradient, and overlapped steps
 * whose gradient becomes final piece by piece from the top while slices already travel; frames
 * that are not due (wrong length, or twice in a step) refused naming the peer; and recovery's
 * pieces: a step called off by its cancel fd, a slice's state exported after its latest step and
 * the one before, and imported. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mesh_util.h"
#include "nnlab/alloc.h"
#include "nnlab/allreduce.h"
#include "nnlab/mesh.h"
#include "nnlab/rng.h"
#include "tap.h"

#define NPARAMS 10007 /* not a multiple of 16: the last slice is short */
#define NSTATS  300   /* with statistics: the last NSTATS floats */
#define STEPS   6
#define MAXN    4

static const char secret[] = "test-secret-of-at-least-16-bytes";

struct result {
    int rc;
    char msg[NL_ERR_MAX];
    unsigned long long step_bytes; /* sent during the last step */
    float params[NPARAMS];
    float stat_sums[NSTATS]; /* with statistics: the summed statistics of the last step */
};

static void init_params(float *p)
{
    struct nl_rng r;
    nl_rng_seed(&r, 99);
    for (size_t i = 0; i < NPARAMS; i++)
        p[i] = nl_rng_uniform(&r) - 0.5f;
}

/* Member r's gradient at step s: depends on the parameters, so any divergence between replicas
 * would grow. */
static void gradient(float *g, const float *p, int r, long s)
{
    struct nl_rng rng;
    nl_rng_seed(&rng, (uint64_t)(1000 * r + s));
    for (size_t i = 0; i < NPARAMS; i++)
        g[i] = 0.05f * (float)(r + 1) * p[i] + 0.01f * (nl_rng_uniform(&rng) - 0.5f);
}

struct mode {
    int size;
    const struct nl_optim *o;
    int bf16, rogue;
    int stats, overlap; /* statistics after the trainable range; overlapped steps */
    int stats_last;     /* overlapped: the statistics become final after the trainable part */
    float clip_value, clip_norm;
};

static size_t ntrainable(const struct mode *md)
{
    return md->stats ? NPARAMS - NSTATS : NPARAMS;
}

/* The gradient made final in chunks, as a backward pass would, each announced while the slices
 * before it may already be on their way: from the top down, or (stats_last) the trainable part
 * from the top down and the statistics at the end, as batch normalisation's come. */
static void overlapped_gradient(struct nl_allreduce *a, float *g, const float *p, int r, long s,
                                size_t nt, int stats_last)
{
    static float full[NPARAMS];
    gradient(full, p, r, s);
    const size_t top = stats_last ? nt : NPARAMS;
    for (size_t hi = top; hi > 0;) {
        size_t lo = hi > 1500 ? hi - 1500 : 0;
        memcpy(g + lo, full + lo, (hi - lo) * sizeof(float));
        if (stats_last)
            nl_allreduce_ready(a, lo, NPARAMS);
        else
            nl_allreduce_ready(a, lo < nt ? lo : nt, lo > nt ? lo : nt);
        usleep(200);
        hi = lo;
    }
    if (stats_last) {
        memcpy(g + nt, full + nt, (NPARAMS - nt) * sizeof(float));
        nl_allreduce_ready(a, 0, nt);
    }
}

static void member(int rank, int listen_fd, const struct nl_member *members, const struct mode *md,
                   struct result *res)
{
    const int size = md->size;
    const struct nl_optim *o = md->o;
    struct nl_error err = {0};
    struct nl_mesh *mesh = NULL;
    struct nl_allreduce *a = NULL;
    float *g = nl_alloc_floats(NPARAMS);
    int rc;

    init_params(res->params);
    rc = nl_mesh_connect(&mesh, rank, size, listen_fd, members, secret, strlen(secret), 5000, &err);
    if (rc == 0)
        rc = nl_allreduce_new(&a, mesh, res->params,
                              &(struct nl_allreduce_opts){.n = NPARAMS,
                                                          .ntrainable = ntrainable(md),
                                                          .optim = o,
                                                          .bf16 = md->bf16,
                                                          .clip_value = md->clip_value,
                                                          .clip_norm = md->clip_norm,
                                                          .overlap = md->overlap},
                              &err);
    for (long s = 1; rc == 0 && s <= STEPS; s++) {
        unsigned long long before = nl_mesh_bytes_sent(mesh);
        if (md->overlap) {
            nl_allreduce_begin(a, res->params, g, s, o->lr);
            overlapped_gradient(a, g, res->params, rank, s, ntrainable(md), md->stats_last);
            rc = nl_allreduce_finish(a, &err);
        } else {
            gradient(g, res->params, rank, s);
            rc = nl_allreduce_step(a, res->params, g, s, o->lr, &err);
        }
        res->step_bytes = nl_mesh_bytes_sent(mesh) - before;
        /* Statistics: what came back is the members' sums; the test keeps the last step's. */
        memcpy(res->stat_sums, g + ntrainable(md), (NPARAMS - ntrainable(md)) * sizeof(float));
    }
    res->rc = rc;
    memcpy(res->msg, err.msg, sizeof res->msg);
    nl_allreduce_free(a);
    nl_mesh_free(mesh);
    nl_free(g);
}

static int wait_child(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void run(const struct mode *md)
{
    const int size = md->size, bf16 = md->bf16;
    const struct nl_optim *o = md->o;
    const size_t nt = ntrainable(md);
    struct result *res =
        mmap(NULL, sizeof *res * size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct nl_member members[MAXN];
    int fds[MAXN];
    pid_t pids[MAXN];
    char what[128];
    snprintf(what, sizeof what, "%s%s%s%s%s%s",
             bf16                       ? "bf16"
             : o->kind == NL_OPTIM_ADAM ? "adam"
                                        : "sgd",
             md->stats ? ", statistics" : "", md->clip_value > 0 ? ", clip-value" : "",
             md->clip_norm > 0 ? ", clip-norm" : "", md->overlap ? ", overlapped" : "",
             md->stats_last ? " (statistics last)" : "");

    loopback_members(members, fds, size);
    for (int r = 0; r < size; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            member(r, fds[r], members, md, &res[r]);
            _exit(0);
        }
        if (r == 0 && md->rogue) {
            /* Someone without the secret knocks at member 0 before the others. */
            struct nl_conn c;
            struct nl_error e2 = {0};
            int32_t id;
            int s;
            s = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in sin = {.sin_family = AF_INET,
                                      .sin_port = htons((uint16_t)members[0].port)};
            inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
            connect(s, (struct sockaddr *)&sin, sizeof sin);
            nl_conn_init(&c, s, "member 0", 3000);
            is_int(nl_wire_handshake(&c, NL_WIRE_CLIENT, "a-wrong-secret-of-16-bytes", 26, 0, 1,
                                     &id, &e2),
                   NL_EAUTH, "a connection without the secret is refused");
            like(e2.msg, "failed the challenge-response", "with the reason: %s", e2.msg);
            nl_conn_close(&c);
        }
    }
    for (int r = 0; r < size; r++) {
        close(fds[r]);
        is_int(wait_child(pids[r]), 0, "%s N=%d: member %d exited", what, size, r);
        if (res[r].rc != 0)
            diag("member %d: %s", r, res[r].msg);
    }
    int all_ok = 1;
    for (int r = 0; r < size; r++)
        all_ok &= res[r].rc == 0;
    ok(all_ok, "%s N=%d: every member completed %d steps", what, size, STEPS);

    /* The reference: one process, the same sums in rank order, clipping, one optimizer over the
     * trainable range; the statistics summed and left out of the parameters. */
    float *p = nl_alloc_floats(NPARAMS), *g = nl_alloc_floats(NPARAMS);
    float *sum = nl_alloc_floats(NPARAMS), *st = nl_alloc_floats(2 * NPARAMS);
    float *state[NL_OPTIM_MAX_STATE] = {st, st + NPARAMS};
    double clipped = 0;
    init_params(p);
    for (long s = 1; s <= STEPS; s++) {
        for (int r = 0; r < size; r++) {
            gradient(g, p, r, s);
            for (size_t i = 0; i < NPARAMS; i++)
                sum[i] = r == 0 ? g[i] : sum[i] + g[i];
        }
        const float v = md->clip_value;
        for (size_t i = 0; v > 0 && i < nt; i++)
            sum[i] = sum[i] > v ? v : sum[i] < -v ? -v : sum[i];
        double sq = 0;
        for (size_t i = 0; i < nt; i++)
            sq += (double)sum[i] * sum[i];
        if (md->clip_norm > 0 && sqrt(sq) > md->clip_norm) {
            clipped++;
            for (size_t i = 0; i < nt; i++)
                sum[i] *= (float)(md->clip_norm / (sqrt(sq) + 1e-6));
        }
        nl_optim_step(o, p, sum, state, nt, s, o->lr);
    }
    double worst = 0, spread = 0, sworst = 0;
    for (int r = 0; r < size; r++) {
        for (size_t i = 0; i < NPARAMS; i++) {
            worst = fmax(worst, fabs((double)res[r].params[i] - p[i]));
            spread = fmax(spread, fabs((double)res[r].params[i] - res[0].params[i]));
        }
        for (size_t i = nt; i < NPARAMS; i++)
            sworst = fmax(sworst, fabs((double)res[r].stat_sums[i - nt] - sum[i]));
    }
    if (bf16)
        ok(worst < 0.02, "%s N=%d: within bf16 rounding of the fp32 reference (%.3g)", what, size,
           worst);
    else if (md->clip_norm > 0)
        ok(worst < 1e-6, "%s N=%d: within 1e-6 of the single-process reference (%.3g)", what, size,
           worst);
    else
        is_float(worst, 0.0, 0.0, "%s N=%d: equal to the single-process reference", what, size);
    is_float(spread, 0.0, 0.0, "%s N=%d: every member holds the same parameters", what, size);
    if (md->clip_norm > 0)
        ok(clipped == STEPS, "%s N=%d: the norm was clipped at every step", what, size);
    if (md->stats)
        is_float(sworst, 0.0, 0.0,
                 "%s N=%d: the statistics come back as the members' sums, in fp32, and the "
                 "parameters there stay as they were",
                 what, size);

    /* Statistics travel in fp32 even with bf16; a NORM frame is a sealed header, a double and a
     * tag. */
    const double bytes = (double)nt * (bf16 ? 2.0 : 4.0) + (double)(NPARAMS - nt) * 4.0;
    const double bound =
        1.02 * 2.0 * (size - 1) / size * bytes +
        (md->clip_norm > 0 ? 3.0 : 2.0) * (size - 1) * (NL_WIRE_SEALED_HEADER + NL_WIRE_TAG) +
        (md->clip_norm > 0 ? 8.0 * (size - 1) : 0.0);
    unsigned long long most = 0;
    for (int r = 0; r < size; r++)
        if (res[r].step_bytes > most)
            most = res[r].step_bytes;
    diag("%s N=%d: at most %llu bytes sent per member per step; bound %.0f", what, size, most,
         bound);
    ok(most <= bound && (size == 1 || most > 0), "%s N=%d: bytes per step within the bound", what,
       size);
    nl_free(p);
    nl_free(g);
    nl_free(sum);
    nl_free(st);
    munmap(res, sizeof *res * size);
}

static void test_missing_member(void)
{
    struct nl_member members[2] = {{"node1", "127.0.0.1", 0}, {"node2", "127.0.0.1", 1}};
    struct nl_error err = {0};
    struct nl_mesh *m;
    int fd;

    nl_net_listen(&fd, "127.0.0.1", 0, 0, &members[0].port, &err);
    is_int(nl_mesh_connect(&m, 0, 2, fd, members, secret, strlen(secret), 300, &err), NL_ETIMEDOUT,
           "a member that never connects times out");
    like(err.msg, "node1: 1 of 1 members did not connect within 300 ms", "the message: %s",
         err.msg);
    close(fd);
    is_int(
        nl_net_listen(&fd, "127.0.0.1", members[0].port, members[0].port, &members[1].port, &err),
        0, "a listening port can be taken again once free");
    int fd2;
    ok(nl_net_listen(&fd2, "127.0.0.1", members[1].port, members[1].port, &members[0].port, &err) <
           0,
       "a port range with no free port is refused");
    like(err.msg, "cannot listen on 127.0.0.1", "the message: %s", err.msg);
    close(fd);
}

/* A member whose frames are not those due: a PARAM of the wrong length, a GRAD twice. Member 0
 * (this process, overlapped or not) must refuse them, naming the peer. */
static void test_undue_frames(void)
{
    for (int c = 0; c < 2; c++) {
        struct nl_member members[2];
        struct nl_error err = {0};
        struct nl_optim o;
        int fds[2];
        nl_optim_defaults(&o, NL_OPTIM_SGD);
        loopback_members(members, fds, 2);
        pid_t pid = fork();
        if (pid == 0) {
            struct nl_mesh *mesh = NULL;
            static float buf[NPARAMS];
            close(fds[0]);
            if (nl_mesh_connect(&mesh, 1, 2, fds[1], members, secret, strlen(secret), 5000, &err) <
                0)
                _exit(1);
            if (c == 0) {
                nl_wire_send(&mesh->peers[0], NL_FRAME_PARAM, buf, 12, &err);
            } else {
                /* Member 0 owns the first half of the 16-float blocks. */
                const uint32_t own = (uint32_t)((NPARAMS + 15) / 16 / 2 * 16 * sizeof(float));
                nl_wire_send(&mesh->peers[0], NL_FRAME_GRAD, buf, own, &err);
                nl_wire_send(&mesh->peers[0], NL_FRAME_GRAD, buf, own, &err);
            }
            /* Until member 0 gives up (what it sends meanwhile is read and dropped, so that it
             * does not meet a closed connection before it sees the frame not due). */
            char b[4096];
            while (read(mesh->peers[0].fd, b, sizeof b) > 0)
                ;
            nl_mesh_free(mesh);
            _exit(0);
        }
        close(fds[1]);
        struct nl_mesh *mesh = NULL;
        struct nl_allreduce *a = NULL;
        float *p = nl_alloc_floats(NPARAMS), *g = nl_alloc_floats(NPARAMS);
        int rc = nl_mesh_connect(&mesh, 0, 2, fds[0], members, secret, strlen(secret), 5000, &err);
        if (rc == 0)
            rc = nl_allreduce_new(
                &a, mesh, p,
                &(struct nl_allreduce_opts){
                    .n = NPARAMS, .ntrainable = NPARAMS, .optim = &o, .overlap = c},
                &err);
        if (rc == 0)
            rc = nl_allreduce_step(a, p, g, 1, o.lr, &err);
        is_int(rc, NL_EFORMAT, "%s is refused",
               c == 0 ? "a parameter slice of the wrong length"
                      : "a second gradient piece in one step");
        like(err.msg, "node2 (127.0.0.1", "naming the peer: %s", err.msg);
        like(err.msg, "not due", "and saying the frame was not due");
        nl_allreduce_free(a);
        nl_mesh_free(mesh);
        close(fds[0]);
        wait_child(pid);
        nl_free(p);
        nl_free(g);
    }
}

/* Recovery's pieces: after STEPS steps each member exports its slice's state after the last
 * step and after the one before (equal to the reference's), a readable cancel fd calls a step
 * off at once, and an imported state is what the next step starts from. */
struct pieces {
    int rc;
    long steps[2];
    size_t lo, hi;
    double cancel_seconds;
    float copies[2][2 * NPARAMS]; /* master, then the momentum */
};

static void pieces_member(int rank, int listen_fd, const struct nl_member *members,
                          const struct nl_optim *o, struct pieces *res)
{
    struct nl_error err = {0};
    struct nl_mesh *mesh = NULL;
    struct nl_allreduce *a = NULL;
    float *p = nl_alloc_floats(NPARAMS), *g = nl_alloc_floats(NPARAMS);
    int rc, fds[2];

    init_params(p);
    rc = nl_mesh_connect(&mesh, rank, 2, listen_fd, members, secret, strlen(secret), 5000, &err);
    if (rc == 0)
        rc = nl_allreduce_new(
            &a, mesh, p,
            &(struct nl_allreduce_opts){.n = NPARAMS, .ntrainable = NPARAMS, .optim = o}, &err);
    for (long s = 1; rc == 0 && s <= STEPS; s++) {
        gradient(g, p, rank, s);
        rc = nl_allreduce_step(a, p, g, s, o->lr, &err);
    }
    if (rc == 0) {
        nl_allreduce_slice(a, rank, &res->lo, &res->hi);
        res->steps[0] = nl_allreduce_export(a, 0, res->copies[0]);
        res->steps[1] = nl_allreduce_export(a, 1, res->copies[1]);
        /* Called off: a byte waits on the cancel fd. */
        if (pipe(fds) == 0 && write(fds[1], "x", 1) == 1) {
            struct timespec t0, t1;
            nl_allreduce_set_cancel_fd(a, fds[0]);
            gradient(g, p, rank, STEPS + 1);
            clock_gettime(CLOCK_MONOTONIC, &t0);
            rc = nl_allreduce_step(a, p, g, STEPS + 1, o->lr, &err);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            res->cancel_seconds =
                (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            close(fds[0]);
            close(fds[1]);
        }
    }
    res->rc = rc;
    nl_allreduce_free(a);
    nl_mesh_free(mesh);
    nl_free(p);
    nl_free(g);
}

static void test_recovery_pieces(const struct nl_optim *o)
{
    struct pieces *res =
        mmap(NULL, 2 * sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct nl_member members[2];
    struct nl_error err = {0};
    int fds[2];
    pid_t pids[2];

    loopback_members(members, fds, 2);
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            pieces_member(r, fds[r], members, o, &res[r]);
            _exit(0);
        }
    }
    for (int r = 0; r < 2; r++) {
        close(fds[r]);
        is_int(wait_child(pids[r]), 0, "recovery: member %d exited", r);
        is_int(res[r].rc, NL_ECANCELED, "member %d: a readable cancel fd calls the step off", r);
        ok(res[r].cancel_seconds < 1.0, "at once (%.3f s)", res[r].cancel_seconds);
        is_int(res[r].steps[0], STEPS, "member %d: its current state is after step %d", r, STEPS);
        is_int(res[r].steps[1], STEPS - 1, "and the copy before after step %d", STEPS - 1);
    }

    /* The reference, after STEPS - 1 and after STEPS steps. */
    float *p = nl_alloc_floats(NPARAMS), *g = nl_alloc_floats(NPARAMS);
    float *sum = nl_alloc_floats(NPARAMS), *st = nl_alloc_floats(NPARAMS);
    float *ref[2] = {nl_alloc_floats(2 * NPARAMS), nl_alloc_floats(2 * NPARAMS)};
    float *state[NL_OPTIM_MAX_STATE] = {st};
    init_params(p);
    for (long s = 1; s <= STEPS; s++) {
        for (int r = 0; r < 2; r++) {
            gradient(g, p, r, s);
            for (size_t i = 0; i < NPARAMS; i++)
                sum[i] = r == 0 ? g[i] : sum[i] + g[i];
        }
        nl_optim_step(o, p, sum, state, NPARAMS, s, o->lr);
        if (s >= STEPS - 1) {
            float *dst = ref[s == STEPS ? 0 : 1];
            memcpy(dst, p, NPARAMS * sizeof(float));
            memcpy(dst + NPARAMS, st, NPARAMS * sizeof(float));
        }
    }
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 2; c++) {
            const size_t lo = res[r].lo, own = res[r].hi - lo;
            const float *got = res[r].copies[c];
            double worst = 0;
            for (size_t i = 0; i < own; i++) {
                worst = fmax(worst, fabs((double)got[i] - ref[c][lo + i]));
                worst = fmax(worst, fabs((double)got[own + i] - ref[c][NPARAMS + lo + i]));
            }
            is_float(worst, 0.0, 0.0,
                     "member %d: its %s copy of master and momentum is the "
                     "reference's",
                     r, c == 0 ? "current" : "earlier");
        }

    /* Import into a member of one, then a step: the optimizer goes on from the imported state. */
    struct nl_mesh *mesh = NULL;
    struct nl_allreduce *a = NULL;
    int fd, port;
    nl_net_listen(&fd, "127.0.0.1", 0, 0, &port, &err);
    struct nl_member one = {"node1", "127.0.0.1", port};
    int rc = nl_mesh_connect(&mesh, 0, 1, fd, &one, secret, strlen(secret), 1000, &err);
    float *q = nl_alloc_floats(NPARAMS), *slice = nl_alloc_floats(2 * NPARAMS);
    memcpy(q, ref[1], NPARAMS * sizeof(float));
    if (rc == 0)
        rc = nl_allreduce_new(
            &a, mesh, q,
            &(struct nl_allreduce_opts){.n = NPARAMS, .ntrainable = NPARAMS, .optim = o}, &err);
    if (rc == 0) {
        nl_allreduce_import(a, ref[1], STEPS - 1);
        is_int(nl_allreduce_export(a, 1, slice), STEPS - 1, "an imported state is after its step");
        for (int r = 0; r < 2; r++) {
            gradient(g, ref[1], r, STEPS);
            for (size_t i = 0; i < NPARAMS; i++)
                sum[i] = r == 0 ? g[i] : sum[i] + g[i];
        }
        rc = nl_allreduce_step(a, q, sum, STEPS, o->lr, &err);
    }
    is_int(rc, 0, "a step after the import: %s", err.msg);
    double worst = 0;
    for (size_t i = 0; i < NPARAMS; i++)
        worst = fmax(worst, fabs((double)q[i] - ref[0][i]));
    is_float(worst, 0.0, 0.0, "it gives the reference's next parameters");
    nl_allreduce_free(a);
    nl_mesh_free(mesh);
    close(fd);
    nl_free(q);
    nl_free(slice);
    nl_free(p);
    nl_free(g);
    nl_free(sum);
    nl_free(st);
    nl_free(ref[0]);
    nl_free(ref[1]);
    munmap(res, 2 * sizeof *res);
}

static void test_bf16(void)
{
    is_int(nl_bf16_from_float(1.0f), 0x3f80, "bf16(1)");
    /* 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to even (1). */
    is_int(nl_bf16_from_float(1.00390625f), 0x3f80, "a tie rounds to even");
    is_int(nl_bf16_from_float(1.01171875f), 0x3f82, "a tie rounds to even (up)");
    is_float(nl_bf16_to_float(nl_bf16_from_float(3.14159f)), 3.140625, 0, "pi in bf16");
    ok(isnan(nl_bf16_to_float(nl_bf16_from_float(NAN))), "NaN stays NaN");
}

int main(void)
{
    struct nl_optim sgd, adam;

    signal(SIGPIPE, SIG_IGN);
    nl_optim_defaults(&sgd, NL_OPTIM_SGD);
    nl_optim_defaults(&adam, NL_OPTIM_ADAM);
    test_bf16();
    run(&(struct mode){.size = 1, .o = &sgd});
    run(&(struct mode){.size = 2, .o = &sgd});
    run(&(struct mode){.size = 3, .o = &sgd, .rogue = 1});
    run(&(struct mode){.size = 4, .o = &adam});
    run(&(struct mode){.size = 3, .o = &sgd, .bf16 = 1});
    run(&(struct mode){.size = 1, .o = &sgd, .stats = 1, .overlap = 1});
    run(&(struct mode){.size = 3, .o = &sgd, .stats = 1});
    run(&(struct mode){.size = 3, .o = &adam, .stats = 1, .overlap = 1});
    run(&(struct mode){.size = 2, .o = &sgd, .bf16 = 1, .stats = 1, .overlap = 1});
    run(&(struct mode){.size = 3, .o = &sgd, .stats = 1, .overlap = 1, .stats_last = 1});
    run(&(struct mode){.size = 3, .o = &sgd, .bf16 = 1, .stats = 1, .overlap = 1, .stats_last = 1});
    run(&(struct mode){.size = 3, .o = &sgd, .stats = 1, .clip_value = 0.02f, .clip_norm = 0.5f});
    run(&(struct mode){.size = 2, .o = &adam, .clip_norm = 0.5f, .overlap = 1});
    test_missing_member();
    test_undue_frames();
    test_recovery_pieces(&sgd);
    return done_testing();
}
