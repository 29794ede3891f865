/* Helpers shared by the Criterion suites. */
#ifndef TAPEGRAD_TESTUTIL_H
#define TAPEGRAD_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "lib/arena.h"
#include "lib/error.h"
#include "lib/pool.h"
#include "lib/rng.h"
#include "lib/tape.h"
#include "lib/tensor.h"

/* For Criterion tests (include <criterion/criterion.h> and <string.h> first): the call returns
 * TG_OK / fails with `status` and a message containing `needle`. */
#define assert_ok(expr)                                                                      \
    do {                                                                                     \
        tg_status st_ = (expr);                                                              \
        cr_assert_eq(st_, TG_OK, "%s failed: %s", #expr, tg_error_message());                \
    } while (0)

#define assert_fails(expr, status, needle)                                                   \
    do {                                                                                     \
        tg_error_clear();                                                                    \
        tg_status st_ = (expr);                                                              \
        cr_assert_eq(st_, (status), "%s returned %d, expected %d (message: %s)", #expr,      \
                     (int)st_, (int)(status), tg_error_message());                           \
        cr_assert(strstr(tg_error_message(), (needle)) != NULL,                              \
                  "message \"%s\" does not mention \"%s\"", tg_error_message(), (needle));   \
    } while (0)

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

/* Runs fn(ctx) in a child process and collects what it writes to stderr into msg (NUL-terminated,
 * at most cap - 1 bytes). Returns the signal that ended the child, or 0 when it returned. For
 * testing that an internal check aborts, and with which message. */
int test_run_expecting_abort(void (*fn)(void *ctx), void *ctx, char *msg, size_t cap);

/* Files in `folder` whose names end in ".tmp" (leftovers of an interrupted atomic write). */
int test_count_tmp_files(const char *folder);

/* Runs a shell command; returns its exit status (or -1; 128+N when killed by signal N). */
int test_run(const char *cmd);

#endif
