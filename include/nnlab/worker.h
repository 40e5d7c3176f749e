/* The worker side of a cluster run: what `nnlab worker` does on each host after the driver
 * started it over SSH. */
#ifndef NNLAB_WORKER_H
#define NNLAB_WORKER_H

#include "nnlab/error.h"

struct nl_worker_opts {
    const char *bind;     /* numeric address to listen on; NULL: every address */
    int port_lo, port_hi; /* 0, 0: any port */
};

/* Talks to the driver over in_fd and out_fd (stdin and stdout), joins the mesh, trains its share
 * and streams metrics; returns when the run is over. The end of in_fd after the setup means the
 * driver is gone or wants the run stopped: the process exits at once (status 3). */
int nl_worker_run(int in_fd, int out_fd, const struct nl_worker_opts *wo, struct nl_error *err);

#endif
