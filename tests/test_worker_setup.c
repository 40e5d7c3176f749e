/* A worker's checks of what its driver hands it for a generation: the real `nnlab worker` with a
 * socket pair as its stdin and stdout and this test as its driver (secret, LISTEN, SETUP, HAVE,
 * DATA, INIT, STATE: net/worker.c). Weights (INIT) of the wrong size, optimizer state (STATE) of
 * another slice, a partition with a label out of range and a regression partition with a target
 * that is not a number each end the worker with status 1 and a message that says what was wrong.
 * A well-formed setup with STATE, as a restarted member gets, trains its one member to DONE. The
 * worker's partition cache lives under a temporary HOME, removed at the end. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/crypto.h"
#include "net/proto.h"
#include "nnlab/alloc.h"
#include "nnlab/allreduce.h"
#include "nnlab/model.h"
#include "nnlab/optim.h"
#include "nnlab/partition.h"
#include "nnlab/spec.h"
#include "nnlab/trainer.h"
#include "nnlab/wire.h"
#include "tap.h"

enum { SIDE = 4, CLASSES = 3, NTRAIN = 24, BATCH = 8 };

static const char *bin;
static char home[64];

/* What a case changes in a well-formed generation. */
enum fault { NONE, SHORT_INIT, OTHER_SLICE, BAD_LABEL, NAN_TARGET };

struct worker {
    pid_t pid;
    struct nl_conn c;
    char err_path[128];
};

/* Starts `nnlab worker` on one end of a socket pair, its stderr into a file, HOME the test's. */
static int worker_start(struct worker *w, int k)
{
    int sv[2];
    snprintf(w->err_path, sizeof w->err_path, "%s/stderr%d", home, k);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return -1;
    w->pid = fork();
    if (w->pid == 0) {
        FILE *e = freopen(w->err_path, "w", stderr);
        if (!e || dup2(sv[1], 0) < 0 || dup2(sv[1], 1) < 0)
            _exit(127);
        close(sv[0]);
        close(sv[1]);
        setenv("HOME", home, 1);
        execl(bin, bin, "worker", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    if (w->pid < 0) {
        close(sv[0]);
        return -1;
    }
    nl_conn_init(&w->c, sv[0], "the worker", 20000);
    return 0;
}

/* The worker's exit status once it ended by itself (within 30 s; then the end of its stdin ends
 * it, status 3); -1 for a signal. Its stderr in errbuf. */
static int worker_end(struct worker *w, char *errbuf, size_t cap)
{
    int status = 0;
    for (int i = 0; i < 3000 && waitpid(w->pid, &status, WNOHANG) == 0; i++)
        usleep(10000);
    nl_conn_close(&w->c);
    waitpid(w->pid, &status, 0);
    FILE *f = fopen(w->err_path, "r");
    size_t n = f ? fread(errbuf, 1, cap - 1, f) : 0;
    errbuf[n] = '\0';
    if (f)
        fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The worker's next frame other than a HEARTBEAT; its type, or -1. */
static int next_frame(struct worker *w, void **pl, uint32_t *len)
{
    struct nl_error err = {0};
    uint32_t type;
    for (;;) {
        *pl = NULL;
        if (nl_wire_recv_alloc(&w->c, &type, pl, len, NL_WIRE_MAX_PAYLOAD, &err) < 0)
            return -1;
        if (type != NL_FRAME_HEARTBEAT)
            return (int)type;
        nl_free(*pl);
    }
}

/* The partition of the one member: samples (float32), then labels or regression targets (their
 * float32 bits), both as int32 LE; the case's fault in sample 5. */
static unsigned char *partition(const struct nl_setup *s, uint32_t count, enum fault f,
                                size_t *size)
{
    const size_t sample = nl_setup_sample_bytes(s);
    unsigned char *b = nl_calloc((size_t)count, sample + 4);
    if (!b)
        return NULL;
    for (uint32_t i = 0; i < count; i++) {
        float *x = (float *)(void *)(b + i * sample);
        for (int j = 0; j < SIDE * SIDE; j++)
            x[j] = (float)((i * 7 + (uint32_t)j * 3) % 11) / 11.0f;
        uint32_t v = i % CLASSES;
        if (s->regression) {
            const float t = i == 5 && f == NAN_TARGET ? NAN : (float)v - 1.0f;
            memcpy(&v, &t, sizeof v);
        } else if (i == 5 && f == BAD_LABEL) {
            v = CLASSES;
        }
        unsigned char *y = b + (size_t)count * sample + 4 * (size_t)i;
        y[0] = (unsigned char)v;
        y[1] = (unsigned char)(v >> 8);
        y[2] = (unsigned char)(v >> 16);
        y[3] = (unsigned char)(v >> 24);
    }
    *size = (size_t)count * (sample + 4);
    return b;
}

/* One generation for a member of one, as the driver sends it, with the case's fault. Returns the
 * worker's exit status and its stderr in errbuf; *done: its DONE came. */
static int run_case(int k, enum fault f, char *errbuf, size_t cap, int *done)
{
    struct nl_member member = {"node1", "127.0.0.1", 0};
    struct nl_setup s = {.rank = 0,
                         .size = 1,
                         .timeout_ms = 20000,
                         .heartbeat_ms = 60000,
                         .has_state = f != SHORT_INIT && f != BAD_LABEL && f != NAN_TARGET,
                         .ntrain = NTRAIN,
                         .shape = {1, SIDE, SIDE},
                         .nclasses = f == NAN_TARGET ? 1 : CLASSES,
                         .regression = f == NAN_TARGET,
                         .dtype = NL_F32,
                         .nnorm = 1,
                         .members = &member,
                         .spec = "fc: dense N\n"};
    struct nl_error err = {0};
    struct nl_partition *part = NULL;
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;
    struct worker w = {.pid = -1};
    unsigned char *data = NULL, *st = NULL;
    char *text = NULL;
    void *pl = NULL;
    size_t dsize = 0, tlen = 0, slen = 0, lo = 0, hi = 0;
    uint32_t len = 0;
    int rc = -1, port = 0;
    long pid = 0;
    char addr[64];

    *done = 0;
    errbuf[0] = '\0';
    nl_train_defaults(&s.o);
    s.o.epochs = 1;
    s.o.batch = BATCH;
    s.o.seed = 5;
    s.o.threads = 1;
    s.std[0] = 1.0f;
    if (nl_partition_new(&part, NTRAIN, BATCH, 1, 0, s.o.seed, &err) < 0 ||
        nl_spec_parse(&spec, s.spec, "the test's model", NULL, NULL, &err) < 0 ||
        nl_model_build(&m, spec, s.shape, s.nclasses, &err) < 0)
        goto out;
    data = partition(&s, nl_partition_count(part), f, &dsize);
    if (!data)
        goto out;
    nl_sha256_hex(s.data_hash, data, dsize);
    const int nstate = nl_optim_state_arrays(&s.o.optim);
    float *zeros = nl_alloc_floats((size_t)nstate * m->ntrainable + 1);
    nl_allreduce_state_bounds(m->nreduce, m->ntrainable, 1, 0, &lo, &hi);
    if (!zeros || nl_state_encode_slice(&st, &slen, lo, f == OTHER_SLICE ? hi - 1 : hi, 0,
                                        m->params, zeros, m->ntrainable, nstate, &err) < 0) {
        nl_free(zeros);
        goto out;
    }
    nl_free(zeros);

    if (worker_start(&w, k) < 0)
        goto out;
    if (nl_wire_write_all(w.c.fd,
                          "0123456789abcdef0123456789abcdef"
                          "0123456789abcdef0123456789abcdef\n",
                          65, 20000) < 0 ||
        next_frame(&w, &pl, &len) != NL_FRAME_LISTEN ||
        nl_listen_decode(pl, len, &port, &pid, addr) < 0)
        goto end;
    member.port = port;
    nl_free(pl);
    pl = NULL;
    if (nl_setup_encode(&s, &text, &tlen, &err) < 0 ||
        nl_wire_send(&w.c, NL_FRAME_SETUP, text, (uint32_t)tlen, &err) < 0 ||
        next_frame(&w, &pl, &len) != NL_FRAME_HAVE || len != 1)
        goto end;
    if (((unsigned char *)pl)[0] == 0 &&
        nl_wire_send(&w.c, NL_FRAME_DATA, data, (uint32_t)dsize, &err) < 0)
        goto end;
    const size_t nsent = f == SHORT_INIT ? m->nparams - 1 : m->nparams;
    if (nl_wire_send(&w.c, NL_FRAME_INIT, m->params, (uint32_t)(nsent * sizeof(float)), &err) < 0)
        goto end;
    if (s.has_state && nl_wire_send(&w.c, NL_FRAME_STATE, st, (uint32_t)slen, &err) < 0)
        goto end;
    for (int type = 0; f == NONE && type >= 0 && !*done;) {
        nl_free(pl);
        type = next_frame(&w, &pl, &len);
        *done = type == NL_FRAME_DONE;
    }
end:
    rc = worker_end(&w, errbuf, cap);
out:
    if (rc < 0 && !errbuf[0])
        snprintf(errbuf, cap, "%s", err.msg);
    nl_free(pl);
    nl_free(text);
    nl_free(st);
    nl_free(data);
    nl_model_free(m);
    nl_spec_free(spec);
    nl_partition_free(part);
    return rc;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(void)
{
    char errbuf[4096];
    int done = 0;

    signal(SIGPIPE, SIG_IGN);
    bin = getenv("NNLAB_BIN");
    if (!bin)
        skip_all("NNLAB_BIN is not set");
    snprintf(home, sizeof home, "/tmp/nnlab-worker-setup-XXXXXX");
    if (!mkdtemp(home)) {
        printf("Bail out! cannot make a temporary folder\n");
        return 1;
    }

    is_int(run_case(0, NONE, errbuf, sizeof errbuf, &done), 0,
           "a well-formed generation with STATE: the worker ends well: %s", errbuf);
    ok(done, "after its DONE");

    is_int(run_case(1, SHORT_INIT, errbuf, sizeof errbuf, &done), 1,
           "INIT one value short: the worker fails");
    like(errbuf, "nnlab worker: the driver's weights (frame type 39) hold ", "saying so: %s",
         errbuf);
    like(errbuf, " values, the model has ", "with both counts");

    is_int(run_case(2, OTHER_SLICE, errbuf, sizeof errbuf, &done), 1,
           "STATE of another slice: the worker fails");
    like(errbuf, "nnlab worker: the driver's optimizer state is not that of slice [0, ",
         "saying which slice it wanted: %s", errbuf);

    is_int(run_case(3, BAD_LABEL, errbuf, sizeof errbuf, &done), 1,
           "a label out of range in the partition: the worker fails");
    like(errbuf, "nnlab worker: label 3 of the partition is out of range", "naming it: %s", errbuf);

    is_int(run_case(4, NAN_TARGET, errbuf, sizeof errbuf, &done), 1,
           "a regression target that is not a number: the worker fails");
    like(errbuf, "nnlab worker: target 5 of the partition is not a number", "naming it: %s",
         errbuf);

    ok(nftw(home, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0, "the temporary HOME is removed");
    return done_testing();
}
