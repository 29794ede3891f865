/* An op's finite-difference check cases, and running them: how every op of tapegrad proves its
 * backward (its cases sit at the end of the op's own file, ops/op_list.h lists them), and how an
 * op written outside tapegrad proves its own the same way.
 *
 *   static Tensor *fwd_swish(Tape *tape, Tensor *const *in, void *ctx) { return op_swish(tape, in[0], in[1]); }
 *   static const OpCheck swish_cases[] = {
 *       {"4x9", 2, {"x", "beta"}, {2, 1}, {{4, 9}, {9}}, 0, 0, fwd_swish, NULL, 0},
 *   };
 *   const OpCheckList swish_checks = OP_CHECK_LIST(swish_cases);
 *   ...
 *   int failing = op_check_list_run("swish", &swish_checks, tape, 1, 3, op_check_print_failures, NULL);
 *
 * Each case draws its inputs (uniform in [lo, hi)), then lib/gradcheck.h compares every element
 * of every input's gradient from the tape with central differences.
 */
#ifndef TAPEGRAD_OPS_OP_CHECK_H
#define TAPEGRAD_OPS_OP_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/gradcheck.h"

#pragma GCC visibility push(default)

enum { OP_CHECK_MAX_INPUTS = 6 };

typedef struct OpCheck {
    const char *variant;  /* shape case, e.g. "129x65x33" */
    int n_inputs;
    const char *names[OP_CHECK_MAX_INPUTS];
    int ndim[OP_CHECK_MAX_INPUTS];
    int64_t shape[OP_CHECK_MAX_INPUTS][4];
    float lo, hi;         /* inputs drawn uniform in [lo, hi) (0, 0 means [-1, 1)) */
    gradcheck_forward_fn forward;
    void *ctx;            /* op parameters the forward needs (token ids, heads, ...) */
    double rtol;          /* 0 means the checker's default */
} OpCheck;

typedef struct {
    const OpCheck *cases;
    int count;
} OpCheckList;

#define OP_CHECK_LIST(cases) {(cases), (int)(sizeof(cases) / sizeof((cases)[0]))}

/* Allocates the inputs (exactly their size, so an out-of-bounds access shows under a sanitizer),
 * draws them from `seed`, runs gradcheck; results has check->n_inputs slots. True when every
 * input passes. Any tape will do (its pool, if any, runs the op); it is left reset. A forward
 * that records nothing on the tape is a bug in the op: gradcheck aborts naming it. */
bool op_check_run(const OpCheck *check, Tape *tape, uint64_t seed, GradcheckResult *results);

/* Called once per case with each input's worst result over the seeds. */
typedef void (*op_check_report_fn)(void *ctx, const char *op, const OpCheck *check, const GradcheckResult *worst);
/* Runs every case of `list` for seeds seed .. seed + n_seeds - 1 (n_seeds >= 1) and reports each
 * under the name `op` (report may be NULL). Returns the number of failing cases: 0 means the
 * backward agrees with finite differences everywhere. */
int op_check_list_run(const char *op, const OpCheckList *list, Tape *tape, uint64_t seed, int64_t n_seeds,
                      op_check_report_fn report, void *ctx);
/* A report function that prints each failing input, with its worst element, to stderr. */
void op_check_print_failures(void *ctx, const char *op, const OpCheck *check, const GradcheckResult *worst);

#pragma GCC visibility pop

#endif
