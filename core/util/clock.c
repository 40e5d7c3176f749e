/* The monotonic clock of include/nnlab/clock.h. */
#include "nnlab/clock.h"

#include <time.h>

double nl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
