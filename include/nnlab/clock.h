/* The one clock nnlab measures durations with: monotonic seconds (CLOCK_MONOTONIC), which a
 * change of the wall clock does not move. Step times, epoch times, heartbeats and timeouts all
 * read it. */
#ifndef NNLAB_CLOCK_H
#define NNLAB_CLOCK_H

/* Seconds since an arbitrary point, nanosecond resolution where the system has it. */
double nl_now(void);

#endif
