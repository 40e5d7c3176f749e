/* The module nnlab-mpi.so (app/meson.build): the MPI mode's entry points as one table, which
 * `nnlab train --mpi` looks up (app/cmd_train.c), so that the program maps Open MPI only then. */
#include "mpi_module.h"

const struct nl_mpi_module nl_mpi_module = {
    .start = nl_mpi_start,
    .rank = nl_mpi_rank,
    .size = nl_mpi_size,
    .set_exchange = nl_mpi_set_exchange,
    .member = nl_mpi_member,
    .train = nl_mpi_train,
    .end = nl_mpi_end,
};
