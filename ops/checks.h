/* The registry of finite-difference checks: one entry per op and shape case.
 * The test suite (tests/test_ops_*.c) and `tapegrad gradcheck` both run exactly these. */
#ifndef TAPEGRAD_OPS_CHECKS_H
#define TAPEGRAD_OPS_CHECKS_H

#include <stdbool.h>
#include <stdint.h>

#include "../lib/gradcheck.h"

enum { OP_CHECK_MAX_INPUTS = 6 };

typedef struct OpCheck {
    const char *op;       /* op family, e.g. "linear" */
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

/* A family's cases, each defined beside nothing else in ops/checks_<family>.c */
typedef struct {
    const OpCheck *cases;
    int count;
} OpCheckList;

int op_checks_count(void);
const OpCheck *op_check_get(int i);
/* Allocates the inputs, draws them from `seed`, runs gradcheck; results has n_inputs slots. */
bool op_check_run(const OpCheck *check, Tape *tape, uint64_t seed, GradcheckResult *results);
/* Runs every case whose op equals `op` (NULL: all); returns the number of failing cases.
 * Prints a failing case to stderr with its worst element. */
int op_checks_run_family(const char *op, Tape *tape, uint64_t seed);

#endif
