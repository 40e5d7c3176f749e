/* The full mesh of a cluster run: every worker listens, then connects to every worker of lower
 * rank and accepts every worker of higher rank, each connection opened by the wire handshake on
 * the run's secret. A connection that fails the handshake is dropped and the wait goes on; how a
 * member's port stands up to connections from anyone is told at the top of net/mesh.c. */
#ifndef NNLAB_MESH_H
#define NNLAB_MESH_H

#include <stddef.h>

#include "nnlab/error.h"
#include "nnlab/wire.h"

/* Where a member listens, and what to call it in messages. */
struct nl_member {
    char name[64]; /* the host as the user wrote it, e.g. "node2" */
    char addr[64]; /* numeric IPv4 or IPv6 address */
    int port;
};

struct nl_mesh {
    int rank, size;
    struct nl_conn *peers; /* (size); peers[rank].fd is -1 */
    unsigned long guard;   /* private: the listening socket's guard (net/mesh.c), 0 if none */
};

/* Opens a listening TCP socket on addr (numeric; NULL or "" for every IPv4 address) at the first
 * free port of [port_lo, port_hi] (0, 0: any port); *port is the port taken. */
int nl_net_listen(int *fd, const char *addr, int port_lo, int port_hi, int *port,
                  struct nl_error *err);

/* Builds the mesh for member `rank` of `size`, listening on listen_fd (kept open; the caller
 * closes it, after nl_mesh_free). The whole of it lasts at most timeout_ms; an accepted
 * connection that has not passed the handshake within a few seconds is closed, and a slow or
 * silent one delays no other. listen_fd is left non-blocking, and until nl_mesh_free (or the
 * next nl_mesh_connect on it) a thread accepts and closes whatever else connects there. Errors
 * name the member and the step. */
int nl_mesh_connect(struct nl_mesh **out, int rank, int size, int listen_fd,
                    const struct nl_member *members, const void *secret, size_t secret_len,
                    int timeout_ms, struct nl_error *err);
/* The same with the handshake's options (NL_WIRE_PLAINTEXT: checksummed frames, not sealed
 * ones; nl_mesh_connect seals), giving up with NL_ECANCELED as soon as cancel_fd (-1: none) is
 * readable: a member told to stop while the mesh forms (a lost member will never join) does not
 * wait out the timeout. */
int nl_mesh_connect_cancel(struct nl_mesh **out, int rank, int size, int listen_fd,
                           const struct nl_member *members, const void *secret, size_t secret_len,
                           unsigned wire_opts, int timeout_ms, int cancel_fd, struct nl_error *err);
void nl_mesh_free(struct nl_mesh *m);

/* Frame bytes this member has sent to all its peers so far. */
unsigned long long nl_mesh_bytes_sent(const struct nl_mesh *m);

#endif
