/* A cluster run on MPI (include/nnlab/mpi.h): the launch checks, the ranks' links to the driver,
 * and rank 0's driver.
 *
 * Communicators. Three duplicates of MPI_COMM_WORLD, so that no message can be taken for
 * another: DOWN carries frames from the driver (rank 0's main thread) to the members, UP from
 * the members to the driver (rank 0's own member, a thread, sends to its own process on it), and
 * DATA the exchange (net/transport_mpi.c). A frame on DOWN or UP is one message whose tag is its
 * type and whose payload is the SSH channel's payload (net/proto.h), so the member's side is the
 * worker of net/worker.c over a link (nl_worker_link) and not a copy of it:
 *
 *   driver -> rank r   SETUP (rank r of N, members "rank R (HOST)"), then after the member's
 *                      HAVE the partition (DATA) unless its ~/.cache/nnlab/data holds it, INIT,
 *                      and STATE (its slice of the optimizer state) when resuming
 *   rank r -> driver   METRIC every step; STATE at checkpoint steps; PARAMS (rank 0, mid-epoch
 *                      checkpoints); WEIGHTS (rank 0, every epoch's end); DONE
 *   driver -> rank r   JUDGE after every epoch but the last in a judged run
 *   both ways          HEARTBEAT every heartbeat timeout / 4 (a thread on each side)
 *   rank r -> driver   FAULT "C message" when its step or its own work failed
 *
 * Rank 0 reads each rank's frames in order (MPI_Iprobe by source, never ahead of what it can
 * use, as the SSH driver reads its channels) and hands each to the follower the SSH driver uses
 * too (net/follow.c): it sums each step's METRICs into one ITER event, and at an epoch's end
 * validates rank 0's WEIGHTS (classification or regression metrics), stores the checkpoint with
 * every rank's STATE and judges: the core's epoch end (nl_epoch_event, nl_epoch_report,
 * nl_judge_epoch).
 *
 * Faults. MPI jobs are fail-stop: there is no restart or re-partitioning, as the SSH mode has.
 * A rank that dies is normally ended with the whole job by the launcher, which sends the others
 * SIGTERM: rank 0 takes that for the job's end and fails the run (nl_mpi_opts.terminated), where a
 * person's SIGINT stops it. The launcher kills a rank still there a second after its SIGTERM, so
 * rank 0 must notice the signal at once: no thread ever blocks in MPI on another rank's frame.
 * A frame is matched, then received without blocking (recv_from); a rank killed in the middle of
 * sending one (Open MPI's shared-memory single copy then logs "Read -1, expected N, errno = 3")
 * leaves that receive unfinished forever, and a blocking MPI_Recv there once kept rank 0 from
 * recording the failure before the launcher's SIGKILL. Whatever else goes
 * wrong, nothing waits forever: the driver fails the run when a rank sends FAULT or nothing (not
 * even a heartbeat) for the heartbeat timeout, members fail their step when the exchange makes
 * no progress for it (net/transport_mpi.c) and exit when the driver is silent for it. Rank 0
 * then records the run as failed (resumable from its last checkpoint, with any N) and ends the
 * job with MPI_Abort. */
#include "nnlab/mpi.h"

#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net/follow.h"
#include "net/proto.h"
#include "net/transport_mpi.h"
#include "nnlab/alloc.h"
#include "nnlab/allreduce.h"
#include "nnlab/clock.h"
#include "nnlab/partition.h"
#include "nnlab/wire.h"
#include "nnlab/worker.h"

#define RANK_NAME_MAX 96
#define VERSION_MAX   64
#define WINDOW        4 /* steps whose metrics may be in flight */

struct nl_mpi {
    int rank, size;
    MPI_Comm up, down, data;
    char (*name)[RANK_NAME_MAX]; /* (size) */
    const char **names;          /* (size) pointers into name */
    int hb_ms;
    int collective; /* the exchange's form (nl_mpi_set_exchange) */
    /* Rank 0: its member's thread, and the driver's heartbeat thread. */
    pthread_t member, beat;
    int member_started, beat_started;
    int member_rc;
    struct nl_error member_err;
};

/* What the threads of a member's link share with nl_mpi_end: net/worker.c's reader and
 * heartbeat threads outlive a run (they are detached), so this is process-wide and never freed.
 * A call on the links enters before it touches the run (mp, its communicators) and is refused
 * once they close; nl_mpi_end closes them, waits for the calls under way, and only then frees the
 * run, so a thread that wakes later finds them closed. */
enum { COMM_UP, COMM_DOWN };
static struct {
    pthread_mutex_t lock;
    int stopping; /* the links are closing: calls end with NL_ECANCELED */
    int inflight; /* calls under way */
    struct nl_mpi *mp;
    struct nl_worker_link link;
} links = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void nap(long us)
{
    struct timespec ts = {us / 1000000L, (us % 1000000L) * 1000L};
    nanosleep(&ts, NULL);
}

int nl_mpi_rank(const struct nl_mpi *mp)
{
    return mp->rank;
}

int nl_mpi_size(const struct nl_mpi *mp)
{
    return mp->size;
}

const char *nl_mpi_name(const struct nl_mpi *mp, int rank)
{
    return mp->names[rank];
}

static long env_long(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? strtol(s, NULL, 10) : -1;
}

/* The tasks the launcher says it started (-1: it does not say), and whether it wired them up
 * for MPI (an Open MPI, PMI or PMIx launch). */
static long launched_tasks(int *wired)
{
    static const char *const wired_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                             "PMI_RANK", "MPI_LOCALNRANKS"};
    *wired = 0;
    for (size_t i = 0; i < sizeof wired_vars / sizeof *wired_vars; i++)
        if (getenv(wired_vars[i]))
            *wired = 1;
    long n = env_long("OMPI_COMM_WORLD_SIZE");
    if (n < 0)
        n = env_long("PMI_SIZE");
    if (n < 0)
        n = env_long("SLURM_STEP_NUM_TASKS");
    if (n < 0)
        n = env_long("SLURM_NTASKS");
    return n;
}

int nl_mpi_check_versions(const char *versions, int n, size_t stride, const char *const *names,
                          struct nl_error *err)
{
    for (int r = 1; r < n; r++) {
        const char *v = versions + (size_t)r * stride;
        if (strncmp(v, versions, stride) != 0)
            return nl_error_set(err, NL_EINVAL,
                                "%s runs %.*s, rank 0 runs %.*s: every rank must run the same "
                                "nnlab",
                                names[r], (int)strnlen(v, stride), v,
                                (int)strnlen(versions, stride), versions);
    }
    return 0;
}

static int mpi_err(struct nl_error *err, const char *what, int mrc)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(mrc, s, &n);
    return nl_error_set(err, NL_ENET, "MPI: %s: %s", what, s);
}

int nl_mpi_start(struct nl_mpi **out, const char *version, struct nl_error *err)
{
    int wired, provided = 0, inited = 0;
    const long tasks = launched_tasks(&wired);

    *out = NULL;
    if (!wired && tasks > 1)
        return nl_error_set(err, NL_EINVAL,
                            "--mpi: the launcher started %ld tasks but did not connect them for "
                            "MPI: each would run alone as rank 0 (with Slurm: srun --mpi=pmix or "
                            "--mpi=pmi2, or mpirun inside the allocation)",
                            tasks);
    if (!wired)
        return nl_error_set(err, NL_EINVAL,
                            "--mpi: this process was not started by an MPI launcher; run it as "
                            "mpirun -np N nnlab train ... --mpi (or srun --mpi=pmix under Slurm)");
    struct nl_mpi *mp = nl_calloc(1, sizeof *mp);
    if (!mp)
        return nl_error_set(err, NL_ENOMEM, "out of memory");
    *out = mp;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return nl_error_set(err, NL_ENET, "--mpi: MPI_Init_thread failed");
    if (inited)
        MPI_Query_thread(&provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &mp->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mp->size);
    if (provided < MPI_THREAD_MULTIPLE)
        return nl_error_set(err, NL_EINVAL,
                            "--mpi: this MPI library does not support MPI_THREAD_MULTIPLE, which "
                            "nnlab's ranks need");
    if (mp->size == 1 && tasks > 1)
        return nl_error_set(err, NL_EINVAL,
                            "--mpi: the launcher started %ld tasks, but MPI sees this one alone "
                            "as rank 0 of 1: the tasks are singletons (with Slurm: srun "
                            "--mpi=pmix or --mpi=pmi2)",
                            tasks);
    mp->name = nl_calloc((size_t)mp->size, sizeof *mp->name);
    mp->names = nl_calloc((size_t)mp->size, sizeof *mp->names);
    char *versions = nl_calloc((size_t)mp->size, VERSION_MAX);
    if (!mp->name || !mp->names || !versions) {
        nl_free(versions);
        return nl_error_set(err, NL_ENOMEM, "out of memory for %d ranks", mp->size);
    }
    char host[MPI_MAX_PROCESSOR_NAME] = "", mine[RANK_NAME_MAX], v[VERSION_MAX] = "";
    int hl = 0;
    MPI_Get_processor_name(host, &hl);
    snprintf(mine, sizeof mine, "rank %d (%.60s)", mp->rank, host);
    snprintf(v, sizeof v, "%s wire %d", version, NL_WIRE_VERSION);
    int mrc = MPI_Allgather(mine, RANK_NAME_MAX, MPI_CHAR, mp->name, RANK_NAME_MAX, MPI_CHAR,
                            MPI_COMM_WORLD);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Allgather(v, VERSION_MAX, MPI_CHAR, versions, VERSION_MAX, MPI_CHAR,
                            MPI_COMM_WORLD);
    if (mrc != MPI_SUCCESS) {
        nl_free(versions);
        return mpi_err(err, "exchanging the ranks' names and versions", mrc);
    }
    for (int r = 0; r < mp->size; r++)
        mp->names[r] = mp->name[r];
    int rc = nl_mpi_check_versions(versions, mp->size, VERSION_MAX, mp->names, err);
    nl_free(versions);
    if (rc < 0)
        return rc;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &mp->up) != MPI_SUCCESS ||
        MPI_Comm_dup(MPI_COMM_WORLD, &mp->down) != MPI_SUCCESS ||
        MPI_Comm_dup(MPI_COMM_WORLD, &mp->data) != MPI_SUCCESS)
        return nl_error_set(err, NL_ENET, "MPI: cannot make the run's communicators");
    mp->hb_ms = NL_HEARTBEAT_DEFAULT_MS;
    return 0;
}

int nl_mpi_set_exchange(struct nl_mpi *mp, int collective, struct nl_error *err)
{
    int *all = nl_calloc((size_t)mp->size, sizeof *all);
    if (!all)
        return nl_error_set(err, NL_ENOMEM, "out of memory for %d ranks", mp->size);
    int mrc = MPI_Allgather(&collective, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    int rc = mrc == MPI_SUCCESS ? 0 : mpi_err(err, "agreeing on the exchange", mrc);
    for (int r = 1; rc == 0 && r < mp->size; r++)
        if (all[r] != all[0])
            rc = nl_error_set(err, NL_EINVAL,
                              "%s has --mpi-exchange %s, rank 0 %s: every rank must have the same",
                              mp->names[r], all[r] ? "collective" : "p2p",
                              all[0] ? "collective" : "p2p");
    nl_free(all);
    mp->collective = collective;
    return rc;
}

/* A call on the links begins (0) or is refused because they are closing. */
static int enter(struct nl_error *err)
{
    pthread_mutex_lock(&links.lock);
    const int stopping = links.stopping || !links.mp;
    if (!stopping)
        links.inflight++;
    pthread_mutex_unlock(&links.lock);
    return stopping ? nl_error_set(err, NL_ECANCELED, "the run is over") : 0;
}

static void leave(void)
{
    pthread_mutex_lock(&links.lock);
    links.inflight--;
    pthread_mutex_unlock(&links.lock);
}

static MPI_Comm comm_of(const struct nl_mpi *mp, int which)
{
    return which == COMM_UP ? mp->up : mp->down;
}

/* A frame to rank `to` on the UP or DOWN communicator of mp (NULL: the links' run). */
static int send_to(struct nl_mpi *mp, int which, int to, uint32_t type, const void *p, size_t len,
                   struct nl_error *err)
{
    int rc = enter(err);
    if (rc < 0)
        return rc;
    if (!mp)
        mp = links.mp;
    if (len > NL_WIRE_MAX_PAYLOAD)
        rc = nl_error_set(err, NL_EINVAL, "%s: a frame of %zu bytes is too long", mp->names[to],
                          len);
    int mrc =
        rc == 0 ? MPI_Send(p, (int)len, MPI_BYTE, to, (int)type, comm_of(mp, which)) : MPI_SUCCESS;
    if (mrc != MPI_SUCCESS)
        rc = mpi_err(err, mp->names[to], mrc);
    leave();
    return rc;
}

/* Whether a signal handler asked this rank's driver to give up (mo NULL: never). */
static int quitting(const struct nl_mpi_opts *mo)
{
    return mo && ((mo->terminated && *mo->terminated) || (mo->stop && *mo->stop));
}

/* Waits for the body of a matched frame of count bytes from rank `from` (req): a rank that dies
 * in the middle of sending one leaves it incomplete forever, so the wait ends at the heartbeat
 * timeout plus a second per 10 MB, or at once when the links close or mo's flags are set. A
 * request given up stays MPI's, with its buffer (*buf is then NULL): the process is ending. */
static int wait_body(struct nl_mpi *mp, MPI_Request *req, int from, int count, void **buf,
                     const struct nl_mpi_opts *mo, struct nl_error *err)
{
    const double deadline = nl_now() + 1e-3 * mp->hb_ms + (double)count / 1e7;
    for (long spin = 0;; spin++) {
        int flag = 0, rc = enter(err);
        if (rc == 0) {
            int mrc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
            if (mrc != MPI_SUCCESS)
                rc = mpi_err(err, "receiving a frame", mrc);
            leave();
        }
        if (rc == 0 && flag)
            return 0;
        if (rc == 0 && quitting(mo))
            rc = nl_error_set(err, NL_ECANCELED, "%s: a frame of %d bytes was cut short",
                              mp->names[from], count);
        if (rc == 0 && nl_now() > deadline)
            rc = nl_error_set(err, NL_ETIMEDOUT,
                              "%s: a frame of %d bytes did not arrive whole within %.1f s",
                              mp->names[from], count, 1e-3 * mp->hb_ms + (double)count / 1e7);
        if (rc < 0) {
            *buf = NULL; /* MPI may still write into it */
            return rc;
        }
        nap(spin < 100 ? 50 : 1000);
    }
}

/* The next frame from `from` (MPI_ANY_SOURCE: any rank, *src set) on the UP or DOWN
 * communicator of mp (NULL: the links' run), into a new block; waits at most timeout_ms
 * (NL_ETIMEDOUT), or not at all when timeout_ms is 0 (1: a frame came, 0: none). A frame is
 * matched (MPI_Improbe) and then received without blocking (MPI_Imrecv, wait_body), so that no
 * thread waits in MPI for a rank that died mid-frame; mo (NULL: none) is the driver's, whose
 * signals end the wait. */
static int recv_from(struct nl_mpi *mp, int which, int from, int *src, uint32_t *type, void **buf,
                     uint32_t *len, int timeout_ms, const struct nl_mpi_opts *mo,
                     struct nl_error *err)
{
    const double deadline = nl_now() + 1e-3 * timeout_ms;
    for (long spin = 0;; spin++) {
        int rc = enter(err);
        if (rc < 0)
            return rc;
        struct nl_mpi *m = mp ? mp : links.mp;
        const MPI_Comm comm = comm_of(m, which);
        int flag = 0, count = 0;
        MPI_Status st;
        MPI_Message msg = MPI_MESSAGE_NULL;
        MPI_Request req = MPI_REQUEST_NULL;
        int mrc = MPI_Improbe(from, MPI_ANY_TAG, comm, &flag, &msg, &st);
        if (mrc == MPI_SUCCESS && flag) {
            MPI_Get_count(&st, MPI_BYTE, &count);
            *buf = nl_malloc((size_t)count + 1);
            /* A matched message must be received: without memory, into a scratch byte. */
            static char scratch;
            if (!*buf)
                rc = nl_error_set(err, NL_ENOMEM, "out of memory for a frame of %d bytes", count);
            mrc = MPI_Imrecv(*buf ? *buf : &scratch, *buf ? count : 0, MPI_BYTE, &msg, &req);
        }
        if (rc == 0 && mrc != MPI_SUCCESS)
            rc = mpi_err(err, "receiving a frame", mrc);
        if (rc == 0 && !flag && timeout_ms > 0 && nl_now() > deadline)
            rc = nl_error_set(err, NL_ETIMEDOUT, "%s: nothing came within %d ms",
                              from == MPI_ANY_SOURCE ? "the ranks" : m->names[from], timeout_ms);
        leave();
        if (rc == 0 && flag)
            rc = wait_body(m, &req, st.MPI_SOURCE, count, buf, mo, err);
        if (rc < 0)
            return rc;
        if (flag) {
            *type = (uint32_t)st.MPI_TAG;
            *len = (uint32_t)count;
            if (src)
                *src = st.MPI_SOURCE;
            return 1;
        }
        if (timeout_ms == 0)
            return 0;
        nap(spin < 100 ? 50 : 1000);
    }
}

/* The member's link (nl_worker_link) to the driver on rank 0. */
static int link_send(void *ud, uint32_t type, const void *p, uint32_t len, struct nl_error *err)
{
    (void)ud;
    return send_to(NULL, COMM_UP, 0, type, p, len, err);
}

static int link_recv(void *ud, uint32_t *type, void **buf, uint32_t *len, int timeout_ms,
                     struct nl_error *err)
{
    (void)ud;
    int rc = recv_from(NULL, COMM_DOWN, 0, NULL, type, buf, len, timeout_ms, NULL, err);
    return rc < 0 ? rc : 0;
}

static int link_transport(void *ud, int rank, int size, struct nl_transport **out,
                          struct nl_error *err)
{
    (void)ud;
    const struct nl_mpi *mp = links.mp; /* during a generation: the links are open */
    if (rank != mp->rank || size != mp->size)
        return nl_error_set(err, NL_EFORMAT,
                            "the driver made this rank member %d of %d, MPI rank %d of %d", rank,
                            size, mp->rank, mp->size);
    return nl_transport_mpi_new(out, mp->data, mp->names, mp->hb_ms, mp->collective, err);
}

/* A member's own error, for the driver to report: FAULT with the steps it knows of as 0. */
static void report_error(const struct nl_error *e)
{
    char text[NL_ERR_MAX + 32];
    int k = nl_fault_encode(text, sizeof text, 0, e->msg);
    (void)link_send(NULL, NL_FRAME_FAULT, text, (uint32_t)k, NULL);
}

/* The links of this process's run. */
static void links_open(struct nl_mpi *mp)
{
    pthread_mutex_lock(&links.lock);
    links.mp = mp;
    links.stopping = 0;
    links.link = (struct nl_worker_link){link_send, link_recv, link_transport, NULL};
    pthread_mutex_unlock(&links.lock);
}

int nl_mpi_member(struct nl_mpi *mp, struct nl_error *err)
{
    links_open(mp);
    int rc = nl_worker_run_link(&links.link, err);
    if (rc < 0 && rc != NL_ECANCELED) {
        report_error(err);
        /* The driver records the failure and ends the job; it is not waited for longer than a
         * heartbeat timeout. */
        const double until = nl_now() + 1e-3 * mp->hb_ms;
        while (nl_now() < until)
            nap(20000);
    }
    return rc;
}

/* Rank 0's member. */
static void *member_main(void *arg)
{
    struct nl_mpi *mp = arg;
    int rc = nl_worker_run_link(&links.link, &mp->member_err);
    if (rc < 0 && rc != NL_ECANCELED)
        report_error(&mp->member_err);
    mp->member_rc = rc;
    return NULL;
}

/* The driver's heartbeats to every rank. */
static void *beat_main(void *arg)
{
    struct nl_mpi *mp = arg;
    for (;;) {
        for (int i = 0; i < 40; i++) {
            nap((long)mp->hb_ms * 25L / 4); /* a quarter of the timeout (ms), in 40 naps (us) */
            pthread_mutex_lock(&links.lock);
            const int stopping = links.stopping;
            pthread_mutex_unlock(&links.lock);
            if (stopping)
                return NULL;
        }
        for (int r = 0; r < mp->size; r++)
            if (send_to(mp, COMM_DOWN, r, NL_FRAME_HEARTBEAT, NULL, 0, NULL) == NL_ECANCELED)
                return NULL;
    }
}

/* Closes the links: later calls are refused, and calls under way end. */
static void links_close(void)
{
    pthread_mutex_lock(&links.lock);
    links.stopping = 1;
    pthread_mutex_unlock(&links.lock);
    for (;;) {
        pthread_mutex_lock(&links.lock);
        const int n = links.inflight;
        pthread_mutex_unlock(&links.lock);
        if (n == 0)
            break;
        nap(1000);
    }
}

void nl_mpi_end(struct nl_mpi *mp, int failed)
{
    int inited = 0, finalized = 0;
    if (!mp)
        return;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized && failed) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    links_close();
    if (mp->beat_started)
        pthread_join(mp->beat, NULL);
    if (mp->member_started)
        pthread_join(mp->member, NULL);
    if (inited && !finalized) {
        /* Every rank is done with the others before any leaves. */
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
    }
    pthread_mutex_lock(&links.lock);
    links.mp = NULL;
    pthread_mutex_unlock(&links.lock);
    nl_free(mp->name);
    nl_free(mp->names);
    nl_free(mp);
}

/* ---- Rank 0: the driver ---- */

/* One rank as the driver follows it. */
struct mrank {
    struct nl_follow_member fm; /* what the follower keeps of it (net/follow.h) */
    double last;                /* when its last frame came */
    /* A frame read but not handled yet (a checkpoint's piece for a later step). */
    void *held;
    uint32_t held_type, held_len;
};

struct mrun {
    struct nl_mpi *mp;
    const struct nl_mpi_opts *mo;
    int n;
    struct mrank *r;
    struct nl_follow f; /* steps, epochs, checkpoints, judging: net/follow.c */
};

/* The members link of the follower (net/follow.h) over MPI. */
static const char *link_name(void *ud, int i)
{
    const struct mrun *run = ud;
    return run->mp->names[i];
}

static int link_judge(void *ud, int i, uint32_t type, const void *p, size_t len,
                      struct nl_error *err)
{
    struct mrun *run = ud;
    return send_to(run->mp, COMM_DOWN, i, type, p, len, err);
}

/* The driver's own work (validation, a store write) reads nothing meanwhile: what came is not
 * read yet, and the heartbeat thread keeps the members content. */
static void link_busy(void *ud, int begin)
{
    struct mrun *run = ud;
    for (int i = 0; !begin && i < run->n; i++)
        run->r[i].last = nl_now();
}

/* One frame from rank i: 0, NL_FOLLOW_HOLD (it waits for the checkpoint in progress), or an
 * error. */
static int handle_frame(struct mrun *run, int i, uint32_t type, const unsigned char *pl,
                        uint32_t len, struct nl_error *err)
{
    const char *who = run->mp->names[i];
    int rc = nl_follow_frame(&run->f, i, type, pl, len, err);
    if (rc != NL_FOLLOW_OTHER)
        return rc;
    if (type == NL_FRAME_HEARTBEAT)
        return 0;
    if (type == NL_FRAME_FAULT) {
        char msg[400];
        long done;
        nl_fault_decode(pl, len, &done, msg, sizeof msg);
        return nl_error_set(err, NL_ENET, "%s: %s", who, msg);
    }
    return nl_error_set(err, NL_EFORMAT, "%s: an unexpected frame (type %u)", who, type);
}

static int link_check(void *ud, int progressed, struct nl_error *err);

/* Reads what rank i sent, as far as the driver can use it: 1 when a frame was handled. */
static int serve(struct mrun *run, int i, struct nl_error *err)
{
    struct mrank *p = &run->r[i];
    int progressed = 0;
    for (;;) {
        if (!nl_follow_readable(&run->f, i) || p->fm.done) {
            p->last = nl_now(); /* not read now: its silence says nothing */
            return progressed;
        }
        uint32_t type, len;
        void *pl;
        if (p->held) {
            type = p->held_type;
            len = p->held_len;
            pl = p->held;
            p->held = NULL;
        } else {
            int got = recv_from(run->mp, COMM_UP, i, NULL, &type, &pl, &len, 0, run->mo, err);
            if (got < 0 && quitting(run->mo))
                return link_check(run, 0, err); /* the signal's own message */
            if (got < 0)
                return got;
            if (got == 0)
                return progressed;
            p->last = nl_now();
        }
        int rc = handle_frame(run, i, type, pl, len, err);
        if (rc == NL_FOLLOW_HOLD) {
            p->held = pl;
            p->held_type = type;
            p->held_len = len;
            return progressed;
        }
        nl_free(pl);
        if (rc < 0)
            return rc;
        progressed = 1;
    }
}

/* The members link's loop over MPI (net/follow.h). */
static int link_serve(void *ud, int i, struct nl_error *err)
{
    return serve(ud, i, err);
}

/* The launcher's SIGTERM fails the run, a stop stops it, and a rank silent for the heartbeat
 * timeout (nothing came this round) is lost: MPI is fail-stop. */
static int link_check(void *ud, int progressed, struct nl_error *err)
{
    struct mrun *run = ud;
    if (run->mo->terminated && *run->mo->terminated)
        return nl_error_set(err, NL_EIO,
                            "the MPI launcher ended the job during epoch %d (SIGTERM): a rank "
                            "died, or the job was cancelled or ran out of time; resume it with "
                            "train --resume RUN --mpi",
                            run->f.epochs_done + 1);
    if (run->mo->stop && *run->mo->stop)
        return nl_error_set(err, NL_ECANCELED, "training stopped at epoch %d",
                            run->f.epochs_done + 1);
    if (progressed)
        return 0;
    const double t = nl_now();
    for (int i = 0; i < run->n; i++) {
        struct mrank *p = &run->r[i];
        if (!p->fm.done && !p->held && t - p->last > 1e-3 * run->mp->hb_ms)
            return nl_error_set(err, NL_ETIMEDOUT,
                                "%s: lost (no heartbeat for %.1f s during step %ld)",
                                run->mp->names[i], t - p->last, p->fm.next_step + 1);
    }
    return 0;
}

static void link_wait(void *ud)
{
    (void)ud;
    nap(500);
}

/* Rank r's setup: SETUP, its partition unless cached, INIT, and its STATE when resuming. */
static int setup_rank(struct mrun *run, int r, const char *frozen, struct nl_member *members,
                      const float *state, long start, struct nl_error *err)
{
    const struct nl_dataset *d = run->f.d;
    const struct nl_model *m = run->f.m;
    const struct nl_train_opts *o = run->f.o;
    struct nl_mpi *mp = run->mp;
    struct nl_setup s = {
        .rank = r,
        .size = run->n,
        .o = *o,
        .bf16 = run->mo->bf16,
        .timeout_ms = mp->hb_ms,
        .start = start,
        .has_state = state != NULL,
        .heartbeat_ms = mp->hb_ms,
        .ntrain = (uint32_t)d->split[NL_TRAIN].n,
        .shape = d->shape,
        .nclasses = d->nclasses,
        .regression = d->regression,
        .vocab = d->nvocab,
        .embed_columns = m->embed_columns,
        .embed_rows = m->embed_rows,
        .dtype = (int)d->dtype,
        .nnorm = d->nnorm < NL_PROTO_MAX_NORM ? d->nnorm : NL_PROTO_MAX_NORM,
        .members = members,
        .spec = m->spec_text,
        .frozen = frozen[0] ? (char *)frozen : NULL,
        .watched = run->f.judges ? run->f.watched : NULL,
        .nwatched = run->f.judges ? (int)(start / run->f.iters) : 0,
    };
    unsigned char *data = NULL;
    size_t dlen = 0, tlen;
    char *text;
    void *pl = NULL;
    uint32_t type, len;
    int have = 0;

    s.o.sync = NULL;
    s.o.resume = NULL;
    memcpy(s.mean, d->mean, (size_t)s.nnorm * sizeof(float));
    memcpy(s.std, d->std, (size_t)s.nnorm * sizeof(float));
    int rc = nl_partition_payload(d, o->batch, o->seed, run->n, r, &data, &dlen, s.data_hash, err);
    if (rc == 0)
        rc = nl_setup_encode(&s, &text, &tlen, err);
    if (rc == 0) {
        rc = send_to(mp, COMM_DOWN, r, NL_FRAME_SETUP, text, tlen, err);
        nl_free(text);
    }
    /* Its HAVE, after heartbeats. */
    while (rc == 0) {
        rc = recv_from(mp, COMM_UP, r, NULL, &type, &pl, &len, 60000, run->mo, err);
        if (rc < 0)
            break;
        rc = 0;
        if (type != NL_FRAME_HEARTBEAT)
            break;
        nl_free(pl);
        pl = NULL;
    }
    if (rc == 0 && type == NL_FRAME_FAULT)
        rc = handle_frame(run, r, type, pl, len, err);
    else if (rc == 0 && (type != NL_FRAME_HAVE || nl_have_decode(pl, len, &have) < 0))
        rc = nl_error_set(err, NL_EFORMAT,
                          "%s: did not answer its setup (frame type %u of %u bytes)", mp->names[r],
                          type, len);
    nl_free(pl);
    if (rc == 0 && !have)
        rc = send_to(mp, COMM_DOWN, r, NL_FRAME_DATA, data, dlen, err);
    nl_free(data);
    if (rc == 0)
        rc = send_to(mp, COMM_DOWN, r, NL_FRAME_INIT, m->params, m->nparams * sizeof(float), err);
    if (rc == 0 && state) {
        unsigned char *b = NULL;
        size_t lo, hi, bytes;
        nl_allreduce_state_bounds(m->nreduce, m->ntrainable, run->n, r, &lo, &hi);
        rc = nl_state_encode_slice(&b, &bytes, lo, hi, start, m->params, state, m->ntrainable,
                                   run->f.nstate, err);
        if (rc == 0)
            rc = send_to(mp, COMM_DOWN, r, NL_FRAME_STATE, b, bytes, err);
        nl_free(b);
    }
    run->r[r].fm.next_step = start;
    run->r[r].last = nl_now();
    return rc;
}

/* The frozen layers' names, comma-separated ("" for none): members freeze the same. */
static char *frozen_names(const struct nl_model *m)
{
    size_t cap = 1;
    for (int i = 0; i < m->nlayers; i++)
        cap += strlen(m->layers[i].name) + 1;
    char *f = nl_calloc(cap, 1);
    for (int i = 0; f && i < m->nlayers; i++) {
        if (!m->layers[i].frozen)
            continue;
        if (f[0])
            strcat(f, ",");
        strcat(f, m->layers[i].name);
    }
    return f;
}

static void run_free(struct mrun *run)
{
    for (int i = 0; run->r && i < run->n; i++)
        nl_free(run->r[i].held);
    nl_free(run->r);
    nl_follow_release(&run->f);
}

int nl_mpi_train(struct nl_mpi *mp, const struct nl_mpi_opts *mo, struct nl_model *m,
                 const struct nl_dataset *d, const struct nl_train_opts *o,
                 const struct nl_train_hooks *hooks, struct nl_train_result *res,
                 struct nl_worker_metrics *stats, struct nl_error *err)
{
    struct mrun run = {.mp = mp, .mo = mo, .n = mp->size};
    char *frozen = NULL;
    struct nl_member *members = NULL;
    int rc;

    if (mp->rank != 0)
        return nl_error_set(err, NL_EINVAL, "only rank 0 drives an MPI run");
    run.r = nl_calloc((size_t)run.n, sizeof *run.r);
    if (!run.r)
        return nl_error_set(err, NL_ENOMEM, "out of memory for %d ranks", run.n);
    run.f = (struct nl_follow){
        .link = {.name = link_name,
                 .send = link_judge,
                 .busy = link_busy,
                 .serve = link_serve,
                 .check = link_check,
                 .wait = link_wait,
                 .ud = &run},
        .n = run.n,
        .window = WINDOW,
        .member0 = (unsigned char *)&run.r[0].fm,
        .member_stride = sizeof *run.r,
        .m = m,
        .d = d,
        .o = o,
        .hooks = hooks,
        .res = res,
    };
    rc = nl_follow_init(&run.f, err);
    if (rc < 0)
        goto out;
    mp->hb_ms = mo->heartbeat_ms > 0 ? mo->heartbeat_ms : NL_HEARTBEAT_DEFAULT_MS;
    if (mp->collective && mo->bf16) {
        rc = nl_error_set(err, NL_EINVAL,
                          "--mpi-exchange collective sums fp32 gradients: this run exchanges bf16 "
                          "(--compress none turns it off)");
        goto out;
    }
    frozen = frozen_names(m);
    members = nl_calloc((size_t)run.n, sizeof *members);
    if (!frozen || !members) {
        rc = nl_error_set(err, NL_ENOMEM, "out of memory for %d ranks", run.n);
        goto out;
    }
    for (int i = 0; i < run.n; i++) {
        snprintf(members[i].name, sizeof members[i].name, "rank%d", i);
        snprintf(members[i].addr, sizeof members[i].addr, "mpi");
    }
    long start;
    const float *state = nl_follow_resume(&run.f, &start);

    /* Rank 0's member, and the heartbeats that keep every member's reader content. */
    links_open(mp);
    mp->member_started = pthread_create(&mp->member, NULL, member_main, mp) == 0;
    mp->beat_started = mp->member_started && pthread_create(&mp->beat, NULL, beat_main, mp) == 0;
    if (!mp->beat_started) {
        rc = nl_error_set(err, NL_ENOMEM, "cannot start the driver's threads");
        goto out;
    }
    for (int r = 0; r < run.n && rc == 0; r++)
        rc = setup_rank(&run, r, frozen, members, state, start, err);
    if (rc == 0)
        rc = nl_follow_run(&run.f, err);
    if (rc == 0)
        rc = nl_follow_finish(&run.f, err);
    for (int i = 0; rc == 0 && stats && i < run.n; i++)
        stats[i] = run.f.step_w[i];
out:
    run_free(&run);
    nl_free(frozen);
    nl_free(members);
    return rc;
}
