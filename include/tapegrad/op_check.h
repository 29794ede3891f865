/* An op's finite-difference check cases, and running them: how every op of tapegrad proves its
 * backward (its cases sit at the end of the op's own file, tapegrad/op_list.h lists them), and how an
 * op written outside tapegrad proves its own the same way.
 *
 *   static TgTensor *fwd_swish(TgTape *tape, TgTensor *const *in, void *ctx) { return op_swish(tape, in[0], in[1]); }
 *   static const TgOpCheck swish_cases[] = {
 *       {"4x9", 2, {"x", "beta"}, {2, 1}, {{4, 9}, {9}}, 0, 0, fwd_swish, NULL, 0},
 *   };
 *   const TgOpCheckList swish_checks = TG_OP_CHECK_LIST(swish_cases);
 *   ...
 *   int failing = tg_op_check_list_run("swish", &swish_checks, tape, 1, 3, tg_op_check_print_failures, NULL);
 *
 * Each case draws its inputs (uniform in [lo, hi)), then tapegrad/gradcheck.h compares every element
 * of every input's gradient from the tape with central differences.
 */
#ifndef TG_OP_CHECK_H
#define TG_OP_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/gradcheck.h"

#pragma GCC visibility push(default)

enum { TG_OP_CHECK_MAX_INPUTS = 6 };

typedef struct TgOpCheck {
    const char *variant;  /* shape case, e.g. "129x65x33" */
    int n_inputs;
    const char *names[TG_OP_CHECK_MAX_INPUTS];
    int ndim[TG_OP_CHECK_MAX_INPUTS];
    int64_t shape[TG_OP_CHECK_MAX_INPUTS][4];
    float lo, hi;         /* inputs drawn uniform in [lo, hi) (0, 0 means [-1, 1)) */
    TgGradcheckForwardFn forward;
    void *ctx;            /* op parameters the forward needs (token ids, heads, ...) */
    double rtol;          /* 0 means the checker's default */
} TgOpCheck;

typedef struct {
    const TgOpCheck *cases;
    int count;
} TgOpCheckList;

#define TG_OP_CHECK_LIST(cases) {(cases), (int)(sizeof(cases) / sizeof((cases)[0]))}

/* Allocates the inputs (exactly their size, so an out-of-bounds access shows under a sanitizer),
 * draws them from `seed`, runs gradcheck; results has check->n_inputs slots. True when every
 * input passes. Any tape will do (its pool, if any, runs the op); it is left reset. A forward
 * that records nothing on the tape is a bug in the op: gradcheck aborts naming it. */
bool tg_op_check_run(const TgOpCheck *check, TgTape *tape, uint64_t seed, TgGradcheckResult *results);

/* Called once per case with each input's worst result over the seeds. */
typedef void (*TgOpCheckReportFn)(void *ctx, const char *op, const TgOpCheck *check, const TgGradcheckResult *worst);
/* Runs every case of `list` for seeds seed .. seed + n_seeds - 1 (n_seeds >= 1) and reports each
 * under the name `op` (report may be NULL). Returns the number of failing cases: 0 means the
 * backward agrees with finite differences everywhere. */
int tg_op_check_list_run(const char *op, const TgOpCheckList *list, TgTape *tape, uint64_t seed, int64_t n_seeds,
                      TgOpCheckReportFn report, void *ctx);
/* A report function that prints each failing input, with its worst element, to stderr. */
void tg_op_check_print_failures(void *ctx, const char *op, const TgOpCheck *check, const TgGradcheckResult *worst);

#pragma GCC visibility pop

#endif
