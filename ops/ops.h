/* Every op of tapegrad. Each forward records itself on the tape (when the tape records and an
 * input requires grad); its backward sits beside it in the op's file and adds into the inputs'
 * gradients. Shapes: leading dims are flattened into rows unless an op says otherwise. */
#ifndef TAPEGRAD_OPS_H
#define TAPEGRAD_OPS_H

#include "../lib/tape.h"

/* ---- linear.c ---- */
/* y = x W^T.  x (..., in), w (out, in) -> y (..., out). No bias. */
Tensor *op_linear(Tape *tape, Tensor *x, Tensor *w);

/* ---- elementwise.c ---- */
Tensor *op_add(Tape *tape, Tensor *a, Tensor *b);     /* a + b, same shape */
Tensor *op_mul(Tape *tape, Tensor *a, Tensor *b);     /* a * b, same shape */
Tensor *op_scale(Tape *tape, Tensor *a, float s);     /* s * a */
Tensor *op_sum(Tape *tape, Tensor *a);                /* scalar: sum of all elements */
Tensor *op_mean(Tape *tape, Tensor *a);               /* scalar: mean of all elements */

#endif
