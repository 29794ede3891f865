/* Faults the tests inject into the program: a file write that fails as on a full disk, a replica
 * whose weights drift. They exist only in the test variant of the library and the program
 * (build/tapegrad-faults, compiled with TAPEGRAD_FAULT_INJECTION by the test build and never
 * installed); everywhere else each question below is the constant `false`, and nothing reads the
 * environment.
 *
 * In the test variant, the environment says what fails:
 *   TAPEGRAD_FAIL_WRITE=TEXT     the commit of every atomic file whose path contains TEXT fails
 *                                with ENOSPC, after all its data was written (support/atomic_file.h)
 *   TAPEGRAD_FAIL_WRITE_TIMES=N  ... only the first N such commits: a disk full for a moment
 *   TAPEGRAD_FAIL_REPLICA=STEP   after update STEP, the last rank of a data-parallel job moves one
 *                                weight by 1e-3, as a faulty machine might (train/trainer.c)
 *   TAPEGRAD_SLOW_TOKENS_MS=N    each token `tapegrad serve` draws takes N ms more, as on a slow
 *                                machine, so that its queue and its stops can be watched (serve/server.c)
 * A source file that asks includes this header; CMake compiles each such file twice (the
 * ordinary library and the test variant), found by that include. */
#ifndef TAPEGRAD_SUPPORT_FAULT_H
#define TAPEGRAD_SUPPORT_FAULT_H

#include <stdbool.h>
#include <stdint.h>

#ifdef TAPEGRAD_FAULT_INJECTION
bool fault_write_fails(const char *path);
bool fault_replica_drifts(int64_t step);
int fault_token_delay_ms(void);
#else
static inline bool fault_write_fails(const char *path) { (void)path; return false; }
static inline bool fault_replica_drifts(int64_t step) { (void)step; return false; }
static inline int fault_token_delay_ms(void) { return 0; }
#endif

#endif
