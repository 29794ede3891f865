/* An op's finite-difference check cases, and running them: how every op of tapegrad proves its
 * backward (its cases sit at the end of the op's own file, tapegrad/op_list.h lists them), and how an
 * op written outside tapegrad proves its own the same way.
 *
 *   static TgTensor *fwd_swish(TgTape *tape, TgTensor *const *in, void *ctx) { return op_swish(tape, in[0], in[1]); }
 *   static const TgOpCheck swish_cases[] = {
 *       {.variant = "4x9", .inputs = {{"x", {4, 9}}, {"beta", {9}}}, .forward = fwd_swish},
 *       {.variant = "2x3x5 on [-2, 2)", .inputs = {{"x", {2, 3, 5}}, {"beta", {5}}}, .forward = fwd_swish,
 *        .lo = -2, .hi = 2},
 *   };
 *   const TgOpCheckList swish_checks = TG_OP_CHECK_LIST(swish_cases);
 *   ...
 *   int failing = tg_op_check_list_run("swish", &swish_checks, tape, 1, 3, tg_op_check_print_failures, stderr);
 *
 * A case is written with designated initializers and says nothing the data already says:
 *   - an input is {name, shape}; its dims are the shape's entries up to the first 0 (a check has
 *     no empty dim), so {"g", {7}} is 1-d and {"x", {2, 3, 8}} 3-d; no entry at all is a scalar;
 *   - the inputs end at the first one without a name: {"x", ...}, {"g", ...} is two inputs;
 *   - the fields left out are zero: no ctx, inputs drawn from [-1, 1), the checker's rtol.
 * Each case draws its inputs (uniform in [lo, hi)), then tapegrad/gradcheck.h compares every element
 * of every input's gradient from the tape with central differences.
 */
#ifndef TG_OP_CHECK_H
#define TG_OP_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/gradcheck.h"
#include "tapegrad/limits.h"

#pragma GCC visibility push(default)

enum { TG_OP_CHECK_MAX_INPUTS = 6 };

typedef struct {
    const char *name;              /* NULL ends the case's inputs */
    int64_t shape[TG_MAX_DIMS];    /* the dims, ended by the first 0 */
} TgOpCheckInput;

typedef struct TgOpCheck {
    const char *variant;           /* what sets the case apart, e.g. "GQA B2 T7 H4 KV2 hd4" */
    TgOpCheckInput inputs[TG_OP_CHECK_MAX_INPUTS];
    TgGradcheckForwardFn forward;
    void *ctx;                     /* op parameters the forward needs (token ids, heads, ...), or NULL */
    float lo, hi;                  /* inputs drawn uniform in [lo, hi); 0, 0 means [-1, 1) */
    double rtol;                   /* 0 means the checker's default */
} TgOpCheck;

typedef struct {
    const TgOpCheck *cases;
    int count;
} TgOpCheckList;

#define TG_OP_CHECK_LIST(cases) {(cases), (int)(sizeof(cases) / sizeof((cases)[0]))}

/* The number of inputs of `check` (those before the first unnamed one), and the dims of one
 * input (its shape's entries before the first 0). Both abort on a case written wrong: no input
 * at all, a named input after an unnamed one, a dim after the 0 that ends a shape. */
int tg_op_check_input_count(const TgOpCheck *check);
int tg_op_check_input_ndim(const TgOpCheckInput *input);

/* Allocates the inputs (exactly their size, so an out-of-bounds access shows under a sanitizer),
 * draws them from `seed`, runs gradcheck; results has tg_op_check_input_count(check) slots. True
 * when every input passes. Any tape will do (its pool, if any, runs the op); it is left reset. A
 * forward that records nothing on the tape is a bug in the op: gradcheck aborts naming it. */
bool tg_op_check_run(const TgOpCheck *check, TgTape *tape, uint64_t seed, TgGradcheckResult *results);

/* Called once per case with each input's worst result over the seeds. */
typedef void (*TgOpCheckReportFn)(void *ctx, const char *op, const TgOpCheck *check, const TgGradcheckResult *worst);
/* Runs every case of `list` for seeds seed .. seed + n_seeds - 1 (n_seeds >= 1) and reports each
 * under the name `op` (report may be NULL; it is passed `ctx`). Returns the number of failing
 * cases: 0 means the backward agrees with finite differences everywhere. */
int tg_op_check_list_run(const char *op, const TgOpCheckList *list, TgTape *tape, uint64_t seed, int64_t n_seeds,
                         TgOpCheckReportFn report, void *ctx);
/* A report function that writes each failing input, with its worst element, to the FILE * given
 * as ctx (stderr, say; the library prints nothing on its own). A NULL ctx writes nothing. */
void tg_op_check_print_failures(void *ctx, const char *op, const TgOpCheck *check, const TgGradcheckResult *worst);

#pragma GCC visibility pop

#endif
