/* Finite-difference gradient checker.
 *
 * For a forward f(inputs) -> out and a fixed random R (uniform in [-1, 1], shape of out), the
 * scalar L = sum(out * R) is differentiated two ways:
 *   analytic: backward through the tape from d(out) = R;
 *   numeric:  (L(x + eps) - L(x - eps)) / (2 eps) for every element of every input,
 *             with L accumulated in double.
 * The error of one input is  max_i |analytic_i - numeric_i| / max(max_i |numeric_i|, 1e-3):
 * the worst deviation measured against the gradient's own scale. The check passes when every
 * input's error is at most `tol`. With float32 forwards, eps = 1e-2 and tol = 1e-2 separate
 * rounding noise (~1e-4 on well-conditioned inputs) from a wrong backward (>= 5e-2).
 */
#ifndef TAPEGRAD_GRADCHECK_H
#define TAPEGRAD_GRADCHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "tape.h"

typedef Tensor *(*gradcheck_forward_fn)(Tape *tape, Tensor *const *inputs, void *ctx);

typedef struct {
    double eps;    /* perturbation; default 1e-2 */
    double tol;    /* largest accepted error; default 1e-2 */
    uint64_t seed; /* for R */
} GradcheckOptions;

typedef struct {
    char input[TG_NAME_CAP];
    double max_abs_err;
    double scale;   /* max |numeric| */
    double rel_err; /* max_abs_err / max(scale, 1e-3) */
    int64_t worst_index;
    bool pass;
} GradcheckResult;

GradcheckOptions gradcheck_defaults(void);
/* Checks every input (all must be float tensors the caller owns, outside the tape's arena).
 * Fills results[0..n_inputs) and returns true when all pass. The tape is left reset. */
bool gradcheck(Tape *tape, gradcheck_forward_fn forward, void *ctx, Tensor *const *inputs,
               int n_inputs, const GradcheckOptions *opts, GradcheckResult *results);

#endif
