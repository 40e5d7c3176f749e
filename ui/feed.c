/* The training feed's ring buffer (see feed.h). */
#include "feed.h"

#include <stdlib.h>
#include <string.h>

int feed_init(struct feed *f, int cap)
{
    memset(f, 0, sizeof *f);
    f->ring = calloc((size_t)cap, sizeof *f->ring);
    if (!f->ring)
        return -1;
    f->cap = cap;
    pthread_mutex_init(&f->lock, NULL);
    return 0;
}

void feed_release(struct feed *f)
{
    if (!f || !f->ring)
        return;
    pthread_mutex_destroy(&f->lock);
    free(f->ring);
    f->ring = NULL;
}

void feed_push(struct feed *f, const struct feed_point *p)
{
    pthread_mutex_lock(&f->lock);
    if (f->count == f->cap) {
        f->head = (f->head + 1) % f->cap;
        f->count--;
        f->dropped++;
    }
    f->ring[(f->head + f->count) % f->cap] = *p;
    f->count++;
    f->pushed++;
    pthread_mutex_unlock(&f->lock);
}

int feed_pull(struct feed *f, struct feed_point *out, int max)
{
    int n = 0;
    pthread_mutex_lock(&f->lock);
    while (n < max && f->count > 0) {
        out[n++] = f->ring[f->head];
        f->head = (f->head + 1) % f->cap;
        f->count--;
    }
    pthread_mutex_unlock(&f->lock);
    return n;
}

void feed_push_event(struct feed *f, const struct feed_event *e)
{
    pthread_mutex_lock(&f->lock);
    if (f->nevents < FEED_EVENTS)
        f->events[f->nevents++] = *e;
    else
        f->events_dropped++;
    pthread_mutex_unlock(&f->lock);
}

int feed_pull_events(struct feed *f, struct feed_event *out, int max)
{
    pthread_mutex_lock(&f->lock);
    int n = f->nevents < max ? f->nevents : max;
    memcpy(out, f->events, (size_t)n * sizeof *out);
    memmove(f->events, f->events + n, (size_t)(f->nevents - n) * sizeof *out);
    f->nevents -= n;
    pthread_mutex_unlock(&f->lock);
    return n;
}
