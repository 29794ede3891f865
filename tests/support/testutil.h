/* Helpers shared by the Criterion suites. */
#ifndef TAPEGRAD_SUPPORT_TESTUTIL_H
#define TAPEGRAD_SUPPORT_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tapegrad/arena.h"
#include "tapegrad/error.h"
#include "tapegrad/pool.h"
#include "tapegrad/rng.h"
#include "tapegrad/tape.h"
#include "tapegrad/tensor.h"

/* For Criterion tests (include <criterion/criterion.h> and <string.h> first): the call returns
 * TG_OK / fails with `status` and a message containing `needle`. */
#define assert_ok(expr)                                                                      \
    do {                                                                                     \
        TgStatus st_ = (expr);                                                              \
        cr_assert_eq(st_, TG_OK, "%s failed: %s", #expr, tg_error_message());                \
    } while (0)

#define assert_fails(expr, status, needle)                                                   \
    do {                                                                                     \
        tg_error_clear();                                                                    \
        TgStatus st_ = (expr);                                                              \
        cr_assert_eq(st_, (status), "%s returned %d, expected %d (message: %s)", #expr,      \
                     (int)st_, (int)(status), tg_error_message());                           \
        cr_assert(strstr(tg_error_message(), (needle)) != NULL,                              \
                  "message \"%s\" does not mention \"%s\"", tg_error_message(), (needle));   \
    } while (0)

/* Tests that need /usr/bin/python3 with torch (the PyTorch parity checks) fail when it is
 * missing, unless this variable is set to 1: then they are skipped, loudly. */
#define TEST_SKIP_TORCH_ENV "TAPEGRAD_SKIP_TORCH"

/* /usr/bin/python3 finds the torch package (looked up, not imported: fast). */
bool test_torch_available(void);
/* The environment variable `env` is set to 1. */
bool test_skip_requested(const char *env);

/* A check that needs a program other than tapegrad: when `available` is false the test fails,
 * saying `install` (how to get it), or is skipped, loudly, when the variable `env` is 1.
 * Criterion runs no .fini after a skip, so `cleanup` (a void (*)(void), or NULL) runs first. */
#define require_program(available, env, what, install, cleanup)                                \
    do {                                                                                      \
        if (available) break;                                                                 \
        if (test_skip_requested(env)) {                                                       \
            void (*cleanup_)(void) = (cleanup);                                               \
            fprintf(stderr, "\n*** SKIPPED (%s=1): %s: this check was NOT run ***\n\n", (env),  \
                    (what));                                                                  \
            if (cleanup_) cleanup_();                                                         \
            cr_skip_test("%s: skipped as %s=1 asks", (what), (env));                          \
        }                                                                                     \
        cr_assert_fail("%s needs %s; set %s=1 to skip it explicitly", (what), (install), (env)); \
    } while (0)

/* For Criterion tests that need PyTorch; `what` says what the test checks. */
#define require_torch(what, cleanup)                                                           \
    require_program(test_torch_available(), TEST_SKIP_TORCH_ENV, what,                         \
                    "/usr/bin/python3 with torch (apt-get install python3-torch)", cleanup)

/* The client programs of tests/clients (Node.js with the npm packages of its package-lock.json,
 * installed by scripts/test.sh) fail their tests when missing, unless this variable is 1. */
#define TEST_SKIP_CLIENTS_ENV "TAPEGRAD_SKIP_CLIENTS"
/* node runs and tests/clients/node_modules holds @huggingface/tokenizers, @huggingface/jinja,
 * node-llama-cpp and openai. */
bool test_clients_available(void);
#define require_clients(what, cleanup)                                                         \
    require_program(test_clients_available(), TEST_SKIP_CLIENTS_ENV, what,                     \
                    "node and the packages of tests/clients (bash scripts/test.sh installs them; by hand: " \
                    "cd tests/clients && npm ci --ignore-scripts --omit=optional)", cleanup)

/* A tape with its own arena and no pool (or a pool of `threads` if > 1). */
typedef struct {
    TgArena arena;
    TgPool *pool;
    TgTape tape;
} TestTape;

void test_tape_init(TestTape *t, int threads);
void test_tape_free(TestTape *t);

/* A heap tensor (freed by test_tensor_free) filled with uniform values in [lo, hi). */
TgTensor *test_tensor(const char *name, int ndim, const int64_t *shape, TgRng *rng, float lo, float hi);
void test_tensor_free(TgTensor *t);

/* Runs fn(ctx) in a child process and collects what it writes to stderr into msg (NUL-terminated,
 * at most cap - 1 bytes). Returns the signal that ended the child, or 0 when it returned. For
 * testing that an internal check aborts, and with which message. */
int test_run_expecting_abort(void (*fn)(void *ctx), void *ctx, char *msg, size_t cap);

/* Files in `folder` whose names end in ".tmp" (leftovers of an interrupted atomic write). */
int test_count_tmp_files(const char *folder);

/* Runs a shell command; returns its exit status (or -1; 128+N when killed by signal N). */
int test_run(const char *cmd);

/* UNDER_ASAN: 1 in a build with AddressSanitizer, which reserves terabytes of address space at
 * start (no address-space limit can be set under it) and adds shadow memory to every figure */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#endif
