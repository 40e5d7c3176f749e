/* What the sliced allreduce (include/nnlab/allreduce.h) needs of a transport between the members
 * of a cluster run, and its two implementations: the TCP mesh of the SSH mode
 * (net/transport_tcp.c: sealed or checksummed frames moved by one poll() loop) and MPI
 * (net/transport_mpi.c: non-blocking point-to-point messages, one tag per frame type).
 *
 * The allreduce owns the algorithm (slices, owner sums in rank order, optimizer, bf16, norms,
 * overlap); a transport only moves whole frames, each a type and a payload, between member
 * `rank` and its peers, never blocking:
 *   - send starts a frame to a peer; at most one send to each peer is under way, and the
 *     payload stays untouched until the sink hears it is complete;
 *   - expect says a frame of that type may come from that peer, and where its payload of
 *     exactly len bytes goes; a frame of another length is refused with NL_EFORMAT naming the
 *     peer ("... not due ..."), and so is one of a type not expected (or already received) where
 *     the transport sees it come (TCP; on MPI it waits unmatched, its tag not being asked for);
 *   - progress moves what can move and reports each completed send and receive to the sink; it
 *     returns after reporting something, when wake_fd (-1: none) is readable, or, when nothing
 *     came within the transport's timeout, with NL_ETIMEDOUT naming a peer (with a wake_fd it
 *     returns 0 instead: the caller is still computing, and the peers wait for it). A readable
 *     cancel_fd (-1: none) ends it with NL_ECANCELED. A peer gone is NL_ENET naming it.
 * Frames between two members arrive in the order they were sent, for each type. */
#ifndef NNLAB_TRANSPORT_H
#define NNLAB_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "nnlab/error.h"

struct nl_mesh;

/* Where progress reports what completed. sent: bytes of a frame to peer went out (complete: the
 * whole frame, its payload may be reused); received: a whole frame of that type came in from
 * peer, checked, its payload in place. */
struct nl_transport_sink {
    void (*sent)(void *ud, int peer, size_t bytes, int complete);
    void (*received)(void *ud, int peer, uint32_t type);
    void *ud;
};

struct nl_transport_ops {
    const char *name; /* "tcp", "mpi" */
    /* Frames of up to max_len payload bytes will go to peer (buffers sized once, here). */
    int (*reserve)(void *t, int peer, size_t max_len, struct nl_error *err);
    int (*send)(void *t, int peer, uint32_t type, const void *p, size_t len, struct nl_error *err);
    int (*expect)(void *t, int peer, uint32_t type, void *dst, size_t len, struct nl_error *err);
    int (*progress)(void *t, int wake_fd, int cancel_fd, const struct nl_transport_sink *sink,
                    struct nl_error *err);
    const char *(*peer_name)(const void *t, int peer);
    /* Bytes this member has sent to its peers so far, frame headers included. */
    unsigned long long (*bytes_sent)(const void *t);
    void (*free)(void *t);
    /* Optional (NULL: the transport has none; TCP): a step's exchange as two non-blocking
     * collectives over every member, each waited for here (the transport's timeout, cancel_fd as
     * for progress), no frame under way. reduce_scatter sums the members' send (the floats of
     * every slice, counts[r] of them for member r, in rank order) into recv (counts[rank]
     * floats) in the library's order of summation; allgather fills every member's part of buf
     * (counts and displs in bytes) from that member. */
    int (*reduce_scatter)(void *t, const float *send, float *recv, const int *counts, int cancel_fd,
                          struct nl_error *err);
    int (*allgather)(void *t, void *buf, const int *counts, const int *displs, int cancel_fd,
                     struct nl_error *err);
    /* Optional, beside the two above: the reduce-scatter cut into lanes, each on a communicator of
     * its own, so that several run at once and each starts as its part of the gradient becomes
     * final. lanes makes n of them, once (every member calls it alike, at the same point);
     * lane_start begins lane l's reduce-scatter (arguments as reduce_scatter's; every member
     * starts the same lanes in the same order, each at most once per step); lane_test says
     * whether it is done (*done) without waiting; lane_wait waits for it (the transport's
     * timeout, cancel_fd as for progress). One thread drives a step's lanes. */
    int (*lanes)(void *t, int n, struct nl_error *err);
    int (*lane_start)(void *t, int lane, const float *send, float *recv, const int *counts,
                      struct nl_error *err);
    int (*lane_test)(void *t, int lane, int *done, struct nl_error *err);
    int (*lane_wait)(void *t, int lane, int cancel_fd, struct nl_error *err);
};

struct nl_transport {
    const struct nl_transport_ops *ops;
    void *impl;
    int rank, size;
    /* The allreduce exchanges through the collectives above rather than frames (MPI's
     * --mpi-exchange collective). */
    int collective;
};

/* The TCP mesh as a transport. The mesh stays the caller's and must outlive the transport. */
int nl_transport_tcp_new(struct nl_transport **out, struct nl_mesh *mesh, struct nl_error *err);
/* Frees the transport (not what it was made over); accepts NULL. */
void nl_transport_free(struct nl_transport *t);
unsigned long long nl_transport_bytes_sent(const struct nl_transport *t);

#endif
