/* The table of the MPI mode's entry points (include/nnlab/mpi.h) that the module nnlab-mpi.so
 * gives the program (app/mpi_module.c, app/meson.build). */
#ifndef NNLAB_APP_MPI_MODULE_H
#define NNLAB_APP_MPI_MODULE_H

#include "nnlab/mpi.h"

struct nl_mpi_module {
    int (*start)(struct nl_mpi **out, const char *version, struct nl_error *err);
    int (*rank)(const struct nl_mpi *mp);
    int (*size)(const struct nl_mpi *mp);
    int (*set_exchange)(struct nl_mpi *mp, int collective, struct nl_error *err);
    int (*member)(struct nl_mpi *mp, struct nl_error *err);
    int (*train)(struct nl_mpi *mp, const struct nl_mpi_opts *mo, struct nl_model *m,
                 const struct nl_dataset *d, const struct nl_train_opts *o,
                 const struct nl_train_hooks *hooks, struct nl_train_result *res,
                 struct nl_worker_metrics *stats, struct nl_error *err);
    void (*end)(struct nl_mpi *mp, int failed);
};

extern const struct nl_mpi_module nl_mpi_module;

#endif
