/* The test variant's faults (support/fault.h): compiled only with TAPEGRAD_FAULT_INJECTION. */
#include "support/fault.h"

#ifndef TAPEGRAD_FAULT_INJECTION
#error "support/fault.c belongs to the test variant only (TAPEGRAD_FAULT_INJECTION)"
#endif

#include <stdlib.h>
#include <string.h>

bool fault_write_fails(const char *path) {
    static _Atomic long failed; /* writes failed so far, for TAPEGRAD_FAIL_WRITE_TIMES */
    const char *pattern = getenv("TAPEGRAD_FAIL_WRITE"), *times = getenv("TAPEGRAD_FAIL_WRITE_TIMES");
    if (!pattern || !*pattern || !strstr(path, pattern)) return false;
    return !(times && *times) || failed++ < strtol(times, NULL, 10);
}

bool fault_replica_drifts(int64_t step) {
    const char *at = getenv("TAPEGRAD_FAIL_REPLICA");
    return at && *at && strtoll(at, NULL, 10) == step;
}

int fault_token_delay_ms(void) {
    const char *ms = getenv("TAPEGRAD_SLOW_TOKENS_MS");
    return ms && *ms ? (int)strtol(ms, NULL, 10) : 0;
}
