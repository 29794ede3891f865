/* linear (sgemm) against a naive triple loop, forward and backward, on odd shapes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "tapegrad/ops.h"
#include "testutil.h"

static void check_linear(int64_t rows, int64_t in, int64_t out) {
    TestTape tt;
    test_tape_init(&tt, 1);
    TgRng rng;
    tg_rng_seed(&rng, (uint64_t)(rows * 1000 + in * 10 + out));
    TgTensor *x = test_tensor("x", 2, (int64_t[]){rows, in}, &rng, -1, 1);
    TgTensor *w = test_tensor("w", 2, (int64_t[]){out, in}, &rng, -1, 1);
    TgTensor *dy = test_tensor("dy", 2, (int64_t[]){rows, out}, &rng, -1, 1);
    x->requires_grad = w->requires_grad = true;

    TgTensor *y = tg_linear(&tt.tape, x, w);
    cr_assert_eq(y->shape[0], rows);
    cr_assert_eq(y->shape[1], out);
    double worst = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double s = 0;
            for (int64_t i = 0; i < in; i++) s += (double)x->data[r * in + i] * w->data[o * in + i];
            worst = fmax(worst, fabs(s - y->data[r * out + o]));
        }
    cr_expect_lt(worst, 1e-4, "forward %lldx%lldx%lld off by %g", (long long)rows, (long long)in,
                 (long long)out, worst);

    for (int64_t i = 0; i < y->numel; i++) tg_tensor_grad(&tt.tape, y)[i] = dy->data[i];
    tg_tape_backward_from_seeded(&tt.tape);
    double worst_dx = 0, worst_dw = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < in; i++) {
            double s = 0; /* dx = dy W */
            for (int64_t o = 0; o < out; o++) s += (double)dy->data[r * out + o] * w->data[o * in + i];
            worst_dx = fmax(worst_dx, fabs(s - x->grad[r * in + i]));
        }
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double s = 0; /* dW = dy^T x */
            for (int64_t r = 0; r < rows; r++) s += (double)dy->data[r * out + o] * x->data[r * in + i];
            worst_dw = fmax(worst_dw, fabs(s - w->grad[o * in + i]));
        }
    cr_expect_lt(worst_dx, 1e-4, "dx off by %g", worst_dx);
    cr_expect_lt(worst_dw, 1e-4, "dW off by %g", worst_dw);
    test_tensor_free(x);
    test_tensor_free(w);
    test_tensor_free(dy);
    test_tape_free(&tt);
}

Test(linear, matches_naive_3x5x7) { check_linear(3, 5, 7); }
Test(linear, matches_naive_1x1x1) { check_linear(1, 1, 1); }
Test(linear, matches_naive_129x65x33) { check_linear(129, 65, 33); }
Test(linear, matches_naive_large_rows) { check_linear(1031, 17, 3); }

Test(linear, weight_gradient_accumulates_over_calls) {
    /* the same weight in two linears (as a tied head would be): dW is the sum of both */
    TestTape tt;
    test_tape_init(&tt, 1);
    TgRng rng;
    tg_rng_seed(&rng, 3);
    TgTensor *x = test_tensor("x", 2, (int64_t[]){2, 3}, &rng, -1, 1);
    TgTensor *w = test_tensor("w", 2, (int64_t[]){4, 3}, &rng, -1, 1);
    w->requires_grad = true;
    TgTensor *l1 = tg_sum(&tt.tape, tg_linear(&tt.tape, x, w));
    tg_tape_backward(&tt.tape, tg_add(&tt.tape, l1, l1));
    /* d/dW sum(x W^T) = column sums of x for each output row; used twice -> doubled */
    for (int o = 0; o < 4; o++)
        for (int i = 0; i < 3; i++)
            cr_expect_float_eq(w->grad[o * 3 + i], 2 * (x->data[i] + x->data[3 + i]), 1e-5);
    cr_expect_null(x->grad, "x needs no gradient and must get none");
    test_tensor_free(x);
    test_tensor_free(w);
    test_tape_free(&tt);
}
