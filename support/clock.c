#include "support/clock.h"

#include <stdint.h>

double tg_clock_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct timespec tg_clock_timespec(double s) {
    double whole = (double)(int64_t)s;
    return (struct timespec){(time_t)whole, (long)((s - whole) * 1e9)};
}
