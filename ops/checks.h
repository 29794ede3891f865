/* The finite-difference cases of every op (ops/op_list.h ties each op to its list) and the one
 * runner that the test suite, `tapegrad gradcheck` and `tapegrad selftest` share. An op's cases
 * sit at the end of the op's own file:
 *
 *   static const OpCheck rmsnorm_cases[] = {
 *       {"3x7", 2, {"x", "g"}, {2, 1}, {{3, 7}, {7}}, 0, 0, fwd_rmsnorm, NULL, 0},
 *   };
 *   const OpCheckList rmsnorm_checks = OP_CHECK_LIST(rmsnorm_cases);
 */
#ifndef TAPEGRAD_OPS_CHECKS_H
#define TAPEGRAD_OPS_CHECKS_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/gradcheck.h"
#include "ops/op_list.h"

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

#define TG_OP_CHECKS_DECLARE(id, name, checks) extern const OpCheckList checks;
TG_OP_LIST(TG_OP_CHECKS_DECLARE)
TG_COMPOSITE_LIST(TG_OP_CHECKS_DECLARE)
#undef TG_OP_CHECKS_DECLARE

/* Every case of every op and composite, in list order. */
typedef struct {
    const char *op;       /* the op's (or composite's) name */
    const OpCheck *check;
} OpCheckRef;

int op_checks_count(void);
OpCheckRef op_check_get(int i);
/* Cases registered under `name` (an op or a composite); 0 for an unknown name. */
int op_check_cases_of(const char *name);
/* The names of the ops and composites, in list order: name_count() of them. */
int op_check_name_count(void);
const char *op_check_name(int i);

/* Allocates the inputs (exactly their size), draws them from `seed`, runs gradcheck; results
 * has n_inputs slots. */
bool op_check_run(const OpCheck *check, Tape *tape, uint64_t seed, GradcheckResult *results);

/* Called once per case with each input's worst result over the seeds. */
typedef void (*op_check_report_fn)(void *ctx, const char *op, const OpCheck *check, const GradcheckResult *worst);
/* Runs every case of `op` (NULL: all) for seeds seed .. seed + n_seeds - 1 and reports each
 * (report may be NULL). Returns the number of failing cases. */
int op_checks_run(const char *op, Tape *tape, uint64_t seed, int64_t n_seeds, op_check_report_fn report, void *ctx);
/* A report function that prints each failing input, with its worst element, to stderr. */
void op_check_print_failures(void *ctx, const char *op, const OpCheck *check, const GradcheckResult *worst);

#endif
