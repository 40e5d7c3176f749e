/* A cluster run on MPI: `mpirun -np N nnlab train ... --mpi` (or srun, or mpirun inside sbatch).
 * Only built with MPI (NNLAB_HAVE_MPI); MPI is initialised by nl_mpi_start alone, which only
 * `--mpi` calls, so the window, local runs and the SSH mode never touch it.
 *
 * Rank roles. Rank 0 is the driver: it opens the store, validates, prints, checkpoints and records
 * the run, as an SSH run's driver does, and it is also member 0, trained by a thread of its own.
 * Every rank is a member: it trains its co-partition with the worker code of the SSH mode
 * (net/worker.c), its exchange the same sliced allreduce (net/allreduce.c) over MPI
 * (net/transport_mpi.c), so MPI and SSH runs of a seed compute the same bits. net/mpi.c tells the
 * frames and the fault model. */
#ifndef NNLAB_MPI_H
#define NNLAB_MPI_H

#include <signal.h>
#include <stddef.h>

#include "nnlab/dataset.h"
#include "nnlab/error.h"
#include "nnlab/model.h"
#include "nnlab/trainer.h"

struct nl_mpi;

/* Refuses a process that no MPI launcher started (NL_EINVAL, saying how to start one), and N
 * singletons that each think they are rank 0 (a launcher that started several tasks without
 * wiring them up: srun without --mpi=pmix or pmi2); then initialises MPI (it must support
 * MPI_THREAD_MULTIPLE) and checks that every rank runs this nnlab: version, the nnlab version
 * string of this binary ("nnlab 0.2.0"), is compared with every rank's, and a rank that differs
 * is named. Every rank calls it; on failure MPI may be initialised (nl_mpi_end, failed, ends the
 * job). */
int nl_mpi_start(struct nl_mpi **out, const char *version, struct nl_error *err);
int nl_mpi_rank(const struct nl_mpi *mp);
int nl_mpi_size(const struct nl_mpi *mp);
/* How the ranks exchange gradients and parameters: the sliced exchange in point-to-point
 * messages (collective 0: the rank-ordered sums, bit-identical to the SSH mode), or
 * MPI_Ireduce_scatter and MPI_Iallgatherv (1: MPI's order of summation, equal within float
 * rounding; no bf16). Every rank calls it after nl_mpi_start with what its command line says;
 * ranks that differ are refused (NL_EINVAL naming one). */
int nl_mpi_set_exchange(struct nl_mpi *mp, int collective, struct nl_error *err);
/* "rank R (HOST)", as errors and worker metrics name a rank. */
const char *nl_mpi_name(const struct nl_mpi *mp, int rank);

/* What versions[r] (n strings of stride bytes, rank order) say: 0 when all are versions[0], or
 * NL_EINVAL naming the first rank that differs. */
int nl_mpi_check_versions(const char *versions, int n, size_t stride, const char *const *names,
                          struct nl_error *err);

/* Every rank but 0: be a member until the run is over. An error of its own is reported to the
 * driver before this returns. */
int nl_mpi_member(struct nl_mpi *mp, struct nl_error *err);

struct nl_mpi_opts {
    int bf16;
    int heartbeat_ms; /* 0: 10 s */
    /* Set (by a signal handler) to stop the run at the next chance; may be NULL. */
    const volatile sig_atomic_t *stop;
    /* Set (by a SIGTERM handler) when the launcher ends the job: mpirun and srun end every rank
     * with SIGTERM when one of them died, or when the job is cancelled or out of time. The run
     * then fails (resumable) rather than stopping. May be NULL. */
    const volatile sig_atomic_t *terminated;
};

/* Rank 0: trains m on d's train split on every rank, as nl_cluster_train does on hosts
 * (include/nnlab/driver.h): o->resume, checkpoints with every rank's optimizer slice, events
 * through hooks, validation and test here. stats (nl_mpi_size) gets each rank's totals, named
 * by nl_mpi_name. A rank lost or failed fails the run (MPI is fail-stop), and so does the
 * launcher's SIGTERM (mo->terminated). */
int nl_mpi_train(struct nl_mpi *mp, const struct nl_mpi_opts *mo, struct nl_model *m,
                 const struct nl_dataset *d, const struct nl_train_opts *o,
                 const struct nl_train_hooks *hooks, struct nl_train_result *res,
                 struct nl_worker_metrics *stats, struct nl_error *err);

/* Ends this rank's part: MPI_Finalize, or when failed MPI_Abort, which ends every rank of the
 * job. Frees mp; NULL is fine. */
void nl_mpi_end(struct nl_mpi *mp, int failed);

#endif
