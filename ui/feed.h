/* The feed from a training thread to the window: a locked ring buffer of points. The training
 * thread pushes (never blocking on the window); the main loop pulls about ten times a second.
 * When the window falls behind, the oldest points are overwritten and counted as dropped. Beside
 * the points, a short queue of the run's events (a cluster run's recoveries), which the main loop
 * pulls with them; none is overwritten: when FEED_EVENTS wait, a newer one is counted as dropped.
 * No GTK here: tests use it without a display. */
#ifndef NNLAB_UI_FEED_H
#define NNLAB_UI_FEED_H

#include <pthread.h>

#define FEED_MAX_WORKERS 7 /* as many as the throughput chart shows */

enum feed_kind { FEED_ITER = 0, FEED_EPOCH = 1 };

struct feed_point {
    enum feed_kind kind;
    int epoch, epochs;
    long iter, iters; /* ITER: 1-based step within the epoch, steps per epoch */
    double loss, accuracy, val_loss, val_accuracy;
    double images_per_second, eta_seconds, lr, seconds;
    /* ITER of a cluster run: each worker's images per second in that step (its samples over its
     * compute and communication seconds), in rank order; nworkers 0 for a local run. */
    int nworkers;
    double worker_ips[FEED_MAX_WORKERS];
};

/* A cluster run's recovery from a lost worker (struct nl_recovery, its strings cut to fit). */
struct feed_event {
    double x;  /* on the charts' axis: completed epochs, fractional within one */
    long step; /* completed steps the run continues from */
    int restarts, max_restarts, workers;
    char host[64], what[192], action[16];
};

#define FEED_EVENTS 64

struct feed {
    pthread_mutex_t lock;
    struct feed_point *ring; /* (cap) */
    int cap, head, count;    /* oldest point at head */
    long pushed, dropped;
    struct feed_event events[FEED_EVENTS]; /* oldest first */
    int nevents;
    long events_dropped;
};

int feed_init(struct feed *f, int cap); /* 0, or -1 out of memory */
void feed_release(struct feed *f);
void feed_push(struct feed *f, const struct feed_point *p);
/* Moves up to max of the oldest points into out; returns how many. */
int feed_pull(struct feed *f, struct feed_point *out, int max);
void feed_push_event(struct feed *f, const struct feed_event *e);
/* Moves up to max of the oldest events into out; returns how many. */
int feed_pull_events(struct feed *f, struct feed_event *out, int max);

#endif
