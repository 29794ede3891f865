/* Helpers shared by the Criterion suites. */
#ifndef TAPEGRAD_TESTUTIL_H
#define TAPEGRAD_TESTUTIL_H

#include <stdint.h>

#include "lib/arena.h"
#include "lib/pool.h"
#include "lib/rng.h"
#include "lib/tape.h"
#include "lib/tensor.h"

/* A tape with its own arena and no pool (or a pool of `threads` if > 1). */
typedef struct {
    Arena arena;
    Pool *pool;
    Tape tape;
} TestTape;

void test_tape_init(TestTape *t, int threads);
void test_tape_free(TestTape *t);

/* A heap tensor (freed by test_tensor_free) filled with uniform values in [lo, hi). */
Tensor *test_tensor(const char *name, int ndim, const int64_t *shape, Rng *rng, float lo, float hi);
void test_tensor_free(Tensor *t);

/* Runs a shell command; returns its exit status (or -1; 128+N when killed by signal N). */
int test_run(const char *cmd);

#endif
