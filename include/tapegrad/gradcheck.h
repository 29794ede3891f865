/* Finite-difference gradient checker.
 *
 * For a forward f(inputs) -> out and a fixed random R (uniform in [-1, 1], shape of out), the
 * scalar L = sum(out * R) is differentiated two ways:
 *   analytic a: backward through the tape from d(out) = R;
 *   numeric n:  (L(x + eps) - L(x - eps)) / (2 eps) for every element of every input,
 *               with L accumulated in double.
 *
 * Every element of every input must satisfy
 *     |a - n| <= atol + rtol * |n|,   atol = atol_scale * s + atol_noise * nu,
 * where s = max |n| over the input and nu = 2^-24 * sum|out * R| / (2 eps) is what one float32
 * rounding of every output moves the central difference by. The defaults, and why:
 *   rtol 1e-2:       a wrong term or a wrong index is off by far more than 1% of the element;
 *                    the truncation error eps^2 f'''/6 of a smooth op at eps 1e-2 is ~1e-5.
 *   atol_scale 1e-4: the truncation error of an element whose own gradient is near zero, as a
 *                    share of the tensor's gradients;
 *   atol_noise 4:    the forward's float32 rounding seen through the difference (attention's
 *                    softmax and long sums round more than once per output).
 * Over every registered case and seeds 1..500 the largest error met is 0.30 of this bound
 * (tests/README.md). An error confined to one element, one row or one head group is caught as
 * soon as it exceeds 1% of that element's own gradient plus atol, however small it is next to
 * the tensor's largest element. The tensor-wide figure max|a - n| / max|n| is reported too.
 */
#ifndef TG_GRADCHECK_H
#define TG_GRADCHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tapegrad/tape.h"

#pragma GCC visibility push(default)

typedef TgTensor *(*TgGradcheckForwardFn)(TgTape *tape, TgTensor *const *inputs, void *ctx);

typedef struct {
    double eps;         /* perturbation; default 1e-2 */
    double rtol;        /* allowed error relative to the element's own |n|; default 1e-2 */
    double atol_scale;  /* allowed error as a share of the input's largest |n|; default 1e-4 */
    double atol_noise;  /* allowed error in units of the rounding noise nu; default 4 */
    uint64_t seed;      /* for R */
} TgGradcheckOptions;

typedef struct {
    char input[TG_NAME_CAP];
    /* the element furthest past (or nearest to) its bound */
    int64_t worst_index;
    double worst_analytic, worst_numeric;
    double worst_ratio;   /* |a - n| / (atol + rtol |n|) there: the input passes when <= 1 */
    int64_t n_failing;    /* elements over their bound */
    double atol;          /* the absolute part of the bound, as computed for this input */
    /* the tensor-wide figures */
    double scale;         /* max |n| */
    double max_abs_err;   /* max |a - n| */
    double rel_err;       /* max_abs_err / max(scale, 1e-3) */
    bool pass;
} TgGradcheckResult;

/* The defaults above; seed 1234. */
TgGradcheckOptions tg_gradcheck_defaults(void);
/* Checks every input (all must be float tensors the caller owns, outside the tape's arena).
 * Fills results[0..n_inputs) and returns true when all pass (opts may be NULL: the defaults).
 * forward(tape, inputs, ctx) must compute the op's output from the inputs alone, the same way
 * each call; it runs 1 + 2 x (elements of all inputs) times. The tape is left reset. Aborts when
 * the forward records nothing. */
bool tg_gradcheck(TgTape *tape, TgGradcheckForwardFn forward, void *ctx, TgTensor *const *inputs,
               int n_inputs, const TgGradcheckOptions *opts, TgGradcheckResult *results);
/* Writes one line to `out` for each failing input of results[0..n_inputs), naming the op and the
 * case checked ("gradcheck FAILED: OP [CASE] input x: ..."), with its worst element; nothing for
 * the inputs that pass, nothing at all when out is NULL. */
void tg_gradcheck_print_failures(FILE *out, const char *op, const char *case_name, const TgGradcheckResult *results,
                                 int n_inputs);

#pragma GCC visibility pop

#endif
