/* MPI as the allreduce's transport (include/nnlab/transport.h): each frame is one non-blocking
 * point-to-point message on the run's exchange communicator, its tag the frame's type
 * (NL_FRAME_GRAD, NL_FRAME_NORM, NL_FRAME_PARAM), its payload the frame's payload as the TCP mesh
 * carries it (no header, no checksum: MPI delivers whole messages, and its transports check
 * their own integrity; nothing outside the job can write to a communicator).
 *
 * send is MPI_Isend; expect posts MPI_Irecv of exactly the expected length from that rank with
 * that tag straight into the destination, so messages land where they belong in whatever order
 * they come, and MPI's non-overtaking rule keeps each type's frames in step order. A longer
 * message fails with MPI_ERR_TRUNCATE, a shorter one is caught by its count: both are refused as
 * frames not due, naming the rank. progress is MPI_Testsome over every request under way; while
 * none completes it polls the caller's wake and cancel fds, spinning briefly and then sleeping a
 * millisecond at a time (MPI offers no fd to wait on). MPI is fail-stop: a rank that dies is
 * normally ended by the launcher with the whole job, and where it is not (a stalled rank, a
 * launcher that keeps the others alive) no completion within the timeout is NL_ETIMEDOUT, so a
 * job never hangs in an exchange. Bytes counted are payload bytes, at each send's completion.
 *
 * Collective exchange (--mpi-exchange collective): the step's gradient is summed by
 * MPI_Ireduce_scatter into each owner's slice and the updated slices gathered by MPI_Iallgatherv,
 * each tested as above (MPI_Test, the cancel fd, the timeout). The reduce-scatter goes in buckets
 * (net/allreduce.c: about 4 MB each, at least 8 for a small model, at most 32, and the statistics
 * sums), each on a lane: a communicator of its own, MPI_Comm_dup'ed once when the exchange is
 * made, so that one bucket's messages can never be matched by another's. Buckets start as
 * backward makes them final, last layers first, always in the same order on every rank whatever
 * each rank's timing or overlap, and every MPI call on them is made by the one thread that runs
 * the step. An earlier form, one MPI_Ireduce per slice to its owner on the one exchange
 * communicator, with a single MPI_Ireduce_scatter instead on a rank whose gradient happened to be
 * whole at the step's start, failed under Open MPI 4.1.4 on every 3-rank run tried
 * ("NBC_Progress: an error 15", MPI_ERR_TRUNCATE, then a crash in libnbc): ranks could start
 * different collectives on one communicator. MPI picks the algorithm and the order of
 * summation, so the sums are not the rank-ordered ones of the frames: not bit-identical to an SSH
 * run, equal within float rounding. Bytes counted for them are what the frames would carry (the
 * collective's own traffic is MPI's to choose): every slice but the own one out, the own slice to
 * every other rank. */
#include "net/transport_mpi.h"

#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "nnlab/alloc.h"
#include "nnlab/clock.h"

#define MAX_EXPECT 4 /* frame types expected from one peer at a time */

struct mpit {
    MPI_Comm comm;
    int rank, size, timeout_ms;
    const char *const *names;
    /* Requests: [0, size) the send to each peer, then MAX_EXPECT receives per peer. */
    MPI_Request *req;
    size_t *len;    /* per request: payload bytes */
    uint32_t *type; /* per request: frame type */
    int *idx;
    MPI_Status *st;
    int nreq;
    unsigned long long bytes;
    /* Lanes of the collective exchange: (nlanes) each's communicator, its reduce-scatter under
     * way, and the bytes it counts when done. */
    int nlanes;
    MPI_Comm *lane_comm;
    MPI_Request *lane_req;
    unsigned long long *lane_bytes;
};

static int mpi_fail(struct nl_error *err, int code, const char *who, const char *what, int mrc)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(mrc, s, &n);
    return nl_error_set(err, code, "%s: %s: %s", who, what, s);
}

static int mt_reserve(void *impl, int k, size_t max_len, struct nl_error *err)
{
    const struct mpit *t = impl;
    if (max_len > INT_MAX)
        return nl_error_set(err, NL_EINVAL, "%s: frames of %zu bytes are too long for MPI",
                            t->names[k], max_len);
    return 0;
}

static int mt_send(void *impl, int k, uint32_t type, const void *p, size_t len,
                   struct nl_error *err)
{
    struct mpit *t = impl;
    if (t->req[k] != MPI_REQUEST_NULL)
        return nl_error_set(err, NL_EINVAL, "%s: a frame is already under way (a bug)",
                            t->names[k]);
    int mrc = MPI_Isend(p, (int)len, MPI_BYTE, k, (int)type, t->comm, &t->req[k]);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(err, NL_ENET, t->names[k], "sending", mrc);
    t->len[k] = len;
    t->type[k] = type;
    return 0;
}

static int mt_expect(void *impl, int k, uint32_t type, void *dst, size_t len, struct nl_error *err)
{
    struct mpit *t = impl;
    for (int j = 0; j < MAX_EXPECT; j++) {
        const int i = t->size + k * MAX_EXPECT + j;
        if (t->req[i] != MPI_REQUEST_NULL)
            continue;
        int mrc = MPI_Irecv(dst, (int)len, MPI_BYTE, k, (int)type, t->comm, &t->req[i]);
        if (mrc != MPI_SUCCESS)
            return mpi_fail(err, NL_ENET, t->names[k], "receiving", mrc);
        t->len[i] = len;
        t->type[i] = type;
        return 0;
    }
    return nl_error_set(err, NL_EINVAL, "%s: too many frames expected at once (a bug)",
                        t->names[k]);
}

/* A completed request i with status st: reported, or refused. */
static int completed(struct mpit *t, int i, const MPI_Status *st,
                     const struct nl_transport_sink *sink, struct nl_error *err)
{
    if (i < t->size) {
        if (st->MPI_ERROR != MPI_SUCCESS)
            return mpi_fail(err, NL_ENET, t->names[i], "sending", st->MPI_ERROR);
        t->bytes += t->len[i];
        sink->sent(sink->ud, i, t->len[i], 1);
        return 0;
    }
    const int k = (i - t->size) / MAX_EXPECT;
    int count = -1;
    if (st->MPI_ERROR == MPI_SUCCESS)
        MPI_Get_count(st, MPI_BYTE, &count);
    if (st->MPI_ERROR == MPI_ERR_TRUNCATE || count != (int)t->len[i])
        return nl_error_set(err, NL_EFORMAT,
                            "%s: sent a frame of type %u and %s%d bytes, which was not due in "
                            "this step of the exchange",
                            t->names[k], t->type[i], count < 0 ? "more than " : "",
                            count < 0 ? (int)t->len[i] : count);
    if (st->MPI_ERROR != MPI_SUCCESS)
        return mpi_fail(err, NL_ENET, t->names[k], "receiving", st->MPI_ERROR);
    sink->received(sink->ud, k, t->type[i]);
    return 0;
}

/* The first rank a request under way waits on, for a timeout's message. */
static const char *waited(const struct mpit *t)
{
    for (int i = 0; i < t->nreq; i++)
        if (t->req[i] != MPI_REQUEST_NULL)
            return t->names[i < t->size ? i : (i - t->size) / MAX_EXPECT];
    return "no rank";
}

static int mt_progress(void *impl, int wake_fd, int cancel_fd, const struct nl_transport_sink *sink,
                       struct nl_error *err)
{
    struct mpit *t = impl;
    const double deadline = nl_now() + 1e-3 * t->timeout_ms;
    struct pollfd pf[2];
    int np = 0, wake_i = -1, cancel_i = -1;

    if (wake_fd >= 0) {
        wake_i = np;
        pf[np++] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
    }
    if (cancel_fd >= 0) {
        cancel_i = np;
        pf[np++] = (struct pollfd){.fd = cancel_fd, .events = POLLIN};
    }
    for (long spin = 0;; spin++) {
        int out = 0;
        int mrc = MPI_Testsome(t->nreq, t->req, &out, t->idx, t->st);
        if (mrc != MPI_SUCCESS && mrc != MPI_ERR_IN_STATUS)
            return mpi_fail(err, NL_ENET, "the exchange", "MPI_Testsome", mrc);
        if (out == MPI_UNDEFINED && wake_fd < 0)
            return nl_error_set(err, NL_EINVAL, "the exchange waits for nothing (a bug)");
        if (out != MPI_UNDEFINED && out > 0) {
            for (int j = 0; j < out; j++) {
                if (mrc == MPI_SUCCESS)
                    t->st[j].MPI_ERROR = MPI_SUCCESS;
                int rc = completed(t, t->idx[j], &t->st[j], sink, err);
                if (rc < 0)
                    return rc;
            }
            return 0;
        }
        /* Spin a little for a fast peer, then sleep a millisecond at a time. */
        const int r = np > 0 || spin >= 200 ? poll(pf, (nfds_t)np, spin < 200 ? 0 : 1) : 0;
        if (r > 0 && cancel_i >= 0 && (pf[cancel_i].revents & (POLLIN | POLLHUP | POLLERR)))
            return nl_error_set(err, NL_ECANCELED, "the exchange was called off");
        if (r > 0 && wake_i >= 0 && (pf[wake_i].revents & POLLIN))
            return 0;
        if ((spin & 63) == 0 && nl_now() > deadline) {
            if (wake_fd >= 0)
                return 0; /* still computing: the peers wait for this member */
            return nl_error_set(err, NL_ETIMEDOUT, "%s: no progress in the exchange within %d ms",
                                waited(t), t->timeout_ms);
        }
    }
}

/* Waits for a collective's request: NL_ECANCELED when cancel_fd is readable, NL_ETIMEDOUT when
 * nothing completes within the timeout. */
static int wait_collective(struct mpit *t, MPI_Request *req, int cancel_fd, const char *what,
                           struct nl_error *err)
{
    const double deadline = nl_now() + 1e-3 * t->timeout_ms;
    struct pollfd pf = {.fd = cancel_fd, .events = POLLIN};
    for (long spin = 0;; spin++) {
        int flag = 0;
        int mrc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (mrc != MPI_SUCCESS)
            return mpi_fail(err, NL_ENET, "the exchange", what, mrc);
        if (flag)
            return 0;
        const int r = cancel_fd >= 0 || spin >= 200
                          ? poll(&pf, cancel_fd >= 0 ? 1 : 0, spin < 200 ? 0 : 1)
                          : 0;
        if (r > 0 && (pf.revents & (POLLIN | POLLHUP | POLLERR)))
            return nl_error_set(err, NL_ECANCELED, "the exchange was called off");
        if ((spin & 63) == 0 && nl_now() > deadline)
            return nl_error_set(err, NL_ETIMEDOUT,
                                "the ranks: no progress in the exchange's %s within %d ms", what,
                                t->timeout_ms);
    }
}

static int mt_reduce_scatter(void *impl, const float *send, float *recv, const int *counts,
                             int cancel_fd, struct nl_error *err)
{
    struct mpit *t = impl;
    MPI_Request req = MPI_REQUEST_NULL;
    int mrc = MPI_Ireduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, t->comm, &req);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(err, NL_ENET, "the exchange", "MPI_Ireduce_scatter", mrc);
    int rc = wait_collective(t, &req, cancel_fd, "MPI_Ireduce_scatter", err);
    for (int r = 0; rc == 0 && r < t->size; r++)
        if (r != t->rank)
            t->bytes += (unsigned long long)counts[r] * sizeof(float);
    return rc;
}

static int mt_allgather(void *impl, void *buf, const int *counts, const int *displs, int cancel_fd,
                        struct nl_error *err)
{
    struct mpit *t = impl;
    MPI_Request req = MPI_REQUEST_NULL;
    int mrc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_BYTE,
                              t->comm, &req);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(err, NL_ENET, "the exchange", "MPI_Iallgatherv", mrc);
    int rc = wait_collective(t, &req, cancel_fd, "MPI_Iallgatherv", err);
    if (rc == 0)
        t->bytes += (unsigned long long)counts[t->rank] * (unsigned long long)(t->size - 1);
    return rc;
}

static int mt_lanes(void *impl, int n, struct nl_error *err)
{
    struct mpit *t = impl;
    if (t->nlanes > 0)
        return nl_error_set(err, NL_EINVAL, "the exchange's lanes are made twice (a bug)");
    t->lane_comm = nl_calloc((size_t)n, sizeof *t->lane_comm);
    t->lane_req = nl_calloc((size_t)n, sizeof *t->lane_req);
    t->lane_bytes = nl_calloc((size_t)n, sizeof *t->lane_bytes);
    if (!t->lane_comm || !t->lane_req || !t->lane_bytes)
        return nl_error_set(err, NL_ENOMEM, "out of memory for %d lanes of the exchange", n);
    for (int l = 0; l < n; l++) {
        t->lane_req[l] = MPI_REQUEST_NULL;
        int mrc = MPI_Comm_dup(t->comm, &t->lane_comm[l]);
        if (mrc != MPI_SUCCESS)
            return mpi_fail(err, NL_ENET, "the exchange", "MPI_Comm_dup for its lanes", mrc);
        t->nlanes = l + 1;
    }
    return 0;
}

static int mt_lane_start(void *impl, int l, const float *send, float *recv, const int *counts,
                         struct nl_error *err)
{
    struct mpit *t = impl;
    if (l < 0 || l >= t->nlanes || t->lane_req[l] != MPI_REQUEST_NULL)
        return nl_error_set(err, NL_EINVAL, "lane %d of the exchange is not free (a bug)", l);
    int mrc = MPI_Ireduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, t->lane_comm[l],
                                  &t->lane_req[l]);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(err, NL_ENET, "the exchange", "MPI_Ireduce_scatter", mrc);
    t->lane_bytes[l] = 0;
    for (int r = 0; r < t->size; r++)
        if (r != t->rank)
            t->lane_bytes[l] += (unsigned long long)counts[r] * sizeof(float);
    return 0;
}

static int mt_lane_test(void *impl, int l, int *done, struct nl_error *err)
{
    struct mpit *t = impl;
    int mrc = MPI_Test(&t->lane_req[l], done, MPI_STATUS_IGNORE);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(err, NL_ENET, "the exchange", "MPI_Ireduce_scatter", mrc);
    if (*done)
        t->bytes += t->lane_bytes[l];
    return 0;
}

static int mt_lane_wait(void *impl, int l, int cancel_fd, struct nl_error *err)
{
    struct mpit *t = impl;
    int rc = wait_collective(t, &t->lane_req[l], cancel_fd, "MPI_Ireduce_scatter", err);
    if (rc == 0)
        t->bytes += t->lane_bytes[l];
    return rc;
}

static const char *mt_peer_name(const void *impl, int k)
{
    const struct mpit *t = impl;
    return t->names[k];
}

static unsigned long long mt_bytes_sent(const void *impl)
{
    const struct mpit *t = impl;
    return t->bytes;
}

static void mt_free(void *impl)
{
    struct mpit *t = impl;
    if (!t)
        return;
    /* Requests still under way (a failed step) are left to MPI_Finalize or MPI_Abort: a
     * receive cannot be taken back from a rank that may be gone. */
    int busy = 0;
    for (int l = 0; l < t->nlanes; l++)
        busy |= t->lane_req[l] != MPI_REQUEST_NULL;
    for (int l = 0; !busy && l < t->nlanes; l++)
        MPI_Comm_free(&t->lane_comm[l]);
    nl_free(t->lane_comm);
    nl_free(t->lane_req);
    nl_free(t->lane_bytes);
    nl_free(t->req);
    nl_free(t->len);
    nl_free(t->type);
    nl_free(t->idx);
    nl_free(t->st);
    nl_free(t);
}

static const struct nl_transport_ops mpi_ops = {
    .name = "mpi",
    .reserve = mt_reserve,
    .send = mt_send,
    .expect = mt_expect,
    .progress = mt_progress,
    .peer_name = mt_peer_name,
    .bytes_sent = mt_bytes_sent,
    .free = mt_free,
    .reduce_scatter = mt_reduce_scatter,
    .allgather = mt_allgather,
    .lanes = mt_lanes,
    .lane_start = mt_lane_start,
    .lane_test = mt_lane_test,
    .lane_wait = mt_lane_wait,
};

int nl_transport_mpi_new(struct nl_transport **out, MPI_Comm comm, const char *const *names,
                         int timeout_ms, int collective, struct nl_error *err)
{
    struct nl_transport *tr = nl_calloc(1, sizeof *tr);
    struct mpit *t = nl_calloc(1, sizeof *t);
    int rank = 0, size = 1;

    *out = NULL;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (t) {
        t->comm = comm;
        t->rank = rank;
        t->size = size;
        t->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
        t->names = names;
        t->nreq = size * (1 + MAX_EXPECT);
        t->req = nl_calloc((size_t)t->nreq, sizeof *t->req);
        t->len = nl_calloc((size_t)t->nreq, sizeof *t->len);
        t->type = nl_calloc((size_t)t->nreq, sizeof *t->type);
        t->idx = nl_calloc((size_t)t->nreq, sizeof *t->idx);
        t->st = nl_calloc((size_t)t->nreq, sizeof *t->st);
    }
    if (!tr || !t || !t->req || !t->len || !t->type || !t->idx || !t->st) {
        mt_free(t);
        nl_free(tr);
        return nl_error_set(err, NL_ENOMEM, "out of memory for an MPI transport of %d ranks", size);
    }
    for (int i = 0; i < t->nreq; i++)
        t->req[i] = MPI_REQUEST_NULL;
    *tr = (struct nl_transport){&mpi_ops, t, rank, size, collective};
    *out = tr;
    return 0;
}
