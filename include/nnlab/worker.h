/* The worker side of a cluster run: what `nnlab worker` does on each host after the driver
 * started it over SSH. */
#ifndef NNLAB_WORKER_H
#define NNLAB_WORKER_H

#include <stdint.h>

#include "nnlab/error.h"
#include "nnlab/transport.h"

struct nl_worker_opts {
    const char *bind;     /* numeric address to listen on; NULL: every address */
    int port_lo, port_hi; /* 0, 0: any port */
};

/* Whether a member overlaps its exchange with the backward pass before (or without) measuring,
 * for mode (enum nl_overlap in include/nnlab/trainer.h): ON and OFF say so; AUTO overlaps only
 * where the host keeps a core free for the exchange's thread, that is where its cores exceed
 * threads x sharing (threads: the member's compute threads; sharing: the members on this host,
 * itself included). AUTO's rule for a run of one member, or one too short to measure; longer
 * runs of several members measure both modes and keep the faster (nl_worker_overlap_decide).
 * 1 or 0. */
int nl_worker_overlap(int mode, int threads, int cores, int sharing);

/* --overlap auto's choice from what the members measured: times holds, for each of `members`
 * members in rank order, its median step wall time synchronous then overlapped (seconds,
 * NL_ALLREDUCE_TIMES doubles a member). *sync_seconds and *overlap_seconds get their means
 * (summed in rank order: every member that has the same times gets the same bits). 1 (overlap)
 * unless the overlapped mean is above the synchronous one by more than NL_OVERLAP_MARGIN of it;
 * 0 then, and 0 for no members. The tie rule: within the margin the exchange overlaps. In
 * bench_overlap's rotated runs (README, "Cluster mode") overlapped was never measurably slower
 * where the host was quiet and was the faster mode in most pairs where it was loaded, by more than
 * the 2% a probe on a loaded host can resolve; so a measurement that cannot tell the modes apart
 * keeps the mode that has usually won. A pure function of its arguments. */
#define NL_OVERLAP_MARGIN 0.02
/* What a measuring member does (nl_member_sync_probe in include/nnlab/cluster.h): WARMUP steps in
 * the static rule's mode (the first steps fault pages in and fill caches: the first often takes
 * twice as long as a later one, and the second and third are sometimes still slow), then ROUNDS
 * blocks of BLOCK steps of each mode in the Thue-Morse order (S O O S O S S O for 4), whose first
 * step is not measured, so that (BLOCK - 1) x ROUNDS steps of each mode are; only a run with at
 * least MIN_RUN times that many steps left measures, so that the choice governs most of it. */
#define NL_OVERLAP_PROBE_WARMUP  3
#define NL_OVERLAP_PROBE_BLOCK   3
#define NL_OVERLAP_PROBE_ROUNDS  4
#define NL_OVERLAP_PROBE_MIN_RUN 2
#define NL_OVERLAP_PROBE_STEPS                                                                     \
    (NL_OVERLAP_PROBE_WARMUP + 2 * NL_OVERLAP_PROBE_BLOCK * NL_OVERLAP_PROBE_ROUNDS)
int nl_worker_overlap_decide(const double *times, int members, double *sync_seconds,
                             double *overlap_seconds);
/* The median of v's n values (v is sorted in place); 0 when n is 0. */
double nl_worker_median(double *v, int n);

/* Talks to the driver over in_fd and out_fd (stdin and stdout), joins the mesh, trains its share
 * and streams metrics; returns when the run is over. The end of in_fd after the setup means the
 * driver is gone or wants the run stopped: the process exits at once (status 3). */
int nl_worker_run(int in_fd, int out_fd, const struct nl_worker_opts *wo, struct nl_error *err);

/* A member's link to its driver where that is not an SSH channel (an MPI rank's, net/mpi.c),
 * and the transport of its exchange. The frames and their order are the SSH channel's
 * (net/worker.c) from SETUP on: there is no secret to read and no LISTEN to send, members need
 * no mesh. send is called by one thread at a time; recv only ever by one thread.
 *   send       one frame to the driver;
 *   recv       the driver's next frame into a new block (freed with nl_free), waiting at most
 *              timeout_ms (NL_ETIMEDOUT); NL_ECANCELED once the link is being closed;
 *   transport  the exchange's transport for member rank of size (freed with
 *              nl_transport_free). */
struct nl_worker_link {
    int (*send)(void *ud, uint32_t type, const void *p, uint32_t len, struct nl_error *err);
    int (*recv)(void *ud, uint32_t *type, void **buf, uint32_t *len, int timeout_ms,
                struct nl_error *err);
    int (*transport)(void *ud, int rank, int size, struct nl_transport **out, struct nl_error *err);
    void *ud;
};

/* nl_worker_run over such a link: a driver that is silent for the heartbeat timeout ends the
 * process (status 3), as it does a worker's. One per process. */
int nl_worker_run_link(const struct nl_worker_link *wl, struct nl_error *err);

#endif
