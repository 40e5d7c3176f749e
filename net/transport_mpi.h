/* The MPI transport of the allreduce (net/transport_mpi.c). Private to net/; only built with MPI
 * (NNLAB_HAVE_MPI). */
#ifndef NNLAB_NET_TRANSPORT_MPI_H
#define NNLAB_NET_TRANSPORT_MPI_H

#include <mpi.h>

#include "nnlab/transport.h"

/* The ranks of comm as the allreduce's members (this process its rank). names (comm's size, each
 * kept) names the ranks in errors; no completion within timeout_ms, while the exchange waits on
 * its peers alone, is NL_ETIMEDOUT naming one it waits for. With collective the allreduce
 * exchanges through MPI_Ireduce_scatter and MPI_Iallgatherv. comm stays the caller's. */
int nl_transport_mpi_new(struct nl_transport **out, MPI_Comm comm, const char *const *names,
                         int timeout_ms, int collective, struct nl_error *err);

#endif
