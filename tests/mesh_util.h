/* Members of an in-process mesh for the exchange tests: node1..nodeN on 127.0.0.1, each listening
 * on a port the system picks, before the test forks them. */
#ifndef NNLAB_TESTS_MESH_UTIL_H
#define NNLAB_TESTS_MESH_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "nnlab/mesh.h"

/* Names n members node1..nodeN at 127.0.0.1 and opens their listening sockets (into fds, their
 * ports into members); a socket that cannot listen ends the test (abort). */
static inline void loopback_members(struct nl_member *members, int *fds, int n)
{
    struct nl_error err = {0};
    for (int r = 0; r < n; r++) {
        snprintf(members[r].name, sizeof members[r].name, "node%d", r + 1);
        snprintf(members[r].addr, sizeof members[r].addr, "127.0.0.1");
        if (nl_net_listen(&fds[r], "127.0.0.1", 0, 0, &members[r].port, &err) < 0)
            abort();
    }
}

#endif
