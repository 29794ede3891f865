/* Time for measuring and for deadlines: seconds of CLOCK_MONOTONIC, which no change of the wall
 * clock moves (a step's duration, a timeout, the time budget). */
#ifndef TAPEGRAD_SUPPORT_CLOCK_H
#define TAPEGRAD_SUPPORT_CLOCK_H

#include <time.h>

/* Monotonic seconds since an arbitrary start, nanosecond resolution. */
double tg_clock_seconds(void);
/* The struct timespec of s seconds of that clock, for pthread_cond_timedwait on a condition
 * variable set to CLOCK_MONOTONIC. */
struct timespec tg_clock_timespec(double s);

#endif
