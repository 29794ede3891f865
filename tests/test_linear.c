/* linear (sgemm) against a naive triple loop, forward and backward, on odd shapes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- lora_linear ---- */

/* A fresh adapter (B = 0) leaves the product bitwise as tg_linear and tg_linear_residual compute
 * it: a LoRA run's step 0 is the base model's. */
Test(lora_linear, zero_b_equals_the_base_bitwise) {
    TestTape tt;
    test_tape_init(&tt, 2);
    TgRng rng;
    tg_rng_seed(&rng, 11);
    TgTensor *x = test_tensor("x", 2, (int64_t[]){37, 70}, &rng, -1, 1);
    TgTensor *w = test_tensor("w", 2, (int64_t[]){45, 70}, &rng, -1, 1);
    TgTensor *a = test_tensor("a", 2, (int64_t[]){8, 70}, &rng, -1, 1);
    TgTensor *b = test_tensor("b", 2, (int64_t[]){45, 8}, &rng, 0, 0);
    TgTensor *r = test_tensor("r", 2, (int64_t[]){37, 45}, &rng, -1, 1);
    for (int64_t i = 0; i < b->numel; i++) b->data[i] = 0.0f;
    TgTensor *base = tg_linear(&tt.tape, x, w), *lora = tg_lora_linear(&tt.tape, x, w, a, b, 2.0f, NULL);
    cr_expect_eq(memcmp(base->data, lora->data, (size_t)base->numel * sizeof(float)), 0, "x W^T changed by a zero B");
    base = tg_linear_residual(&tt.tape, x, w, r), lora = tg_lora_linear(&tt.tape, x, w, a, b, 2.0f, r);
    cr_expect_eq(memcmp(base->data, lora->data, (size_t)base->numel * sizeof(float)), 0, "r + x W^T changed by a zero B");
    /* and a nonzero B does change it: the comparison above can fail */
    b->data[0] = 1.0f;
    lora = tg_lora_linear(&tt.tape, x, w, a, b, 2.0f, r);
    cr_expect_neq(memcmp(base->data, lora->data, (size_t)base->numel * sizeof(float)), 0);
    TgTensor *all[] = {x, w, a, b, r};
    for (int i = 0; i < 5; i++) test_tensor_free(all[i]);
    test_tape_free(&tt);
}

/* The base frozen (no requires_grad): its weight gets no gradient at all, while A and B get
 * theirs, equal to a naive evaluation of dA = s (dy B)^T x and dB = s dy^T (x A^T). */
Test(lora_linear, frozen_base_gets_no_gradient_and_adapters_match_naive) {
    TestTape tt;
    test_tape_init(&tt, 1);
    TgRng rng;
    tg_rng_seed(&rng, 12);
    enum { ROWS = 9, IN = 11, OUT = 7, RANK = 3 };
    TgTensor *x = test_tensor("x", 2, (int64_t[]){ROWS, IN}, &rng, -1, 1);
    TgTensor *w = test_tensor("w", 2, (int64_t[]){OUT, IN}, &rng, -1, 1);
    TgTensor *a = test_tensor("a", 2, (int64_t[]){RANK, IN}, &rng, -1, 1);
    TgTensor *b = test_tensor("b", 2, (int64_t[]){OUT, RANK}, &rng, -1, 1);
    TgTensor *dy = test_tensor("dy", 2, (int64_t[]){ROWS, OUT}, &rng, -1, 1);
    a->requires_grad = b->requires_grad = true;
    const float s = 0.75f;
    TgTensor *y = tg_lora_linear(&tt.tape, x, w, a, b, s, NULL);
    for (int64_t i = 0; i < y->numel; i++) tg_tensor_grad(&tt.tape, y)[i] = dy->data[i];
    tg_tape_backward_from_seeded(&tt.tape);
    cr_expect_null(w->grad, "the frozen base got a gradient");
    cr_expect_null(x->grad, "x needs no gradient and must get none");
    double h[ROWS][RANK] = {{0}}, g[ROWS][RANK] = {{0}}, worst_a = 0, worst_b = 0;
    for (int r = 0; r < ROWS; r++)
        for (int k = 0; k < RANK; k++) {
            for (int i = 0; i < IN; i++) h[r][k] += (double)x->data[r * IN + i] * a->data[k * IN + i];
            for (int o = 0; o < OUT; o++) g[r][k] += s * (double)dy->data[r * OUT + o] * b->data[o * RANK + k];
        }
    for (int k = 0; k < RANK; k++)
        for (int i = 0; i < IN; i++) {
            double da = 0;
            for (int r = 0; r < ROWS; r++) da += g[r][k] * x->data[r * IN + i];
            worst_a = fmax(worst_a, fabs(da - a->grad[k * IN + i]));
        }
    for (int o = 0; o < OUT; o++)
        for (int k = 0; k < RANK; k++) {
            double db = 0;
            for (int r = 0; r < ROWS; r++) db += s * (double)dy->data[r * OUT + o] * h[r][k];
            worst_b = fmax(worst_b, fabs(db - b->grad[o * RANK + k]));
        }
    cr_expect_lt(worst_a, 1e-5, "dA off by %g", worst_a);
    cr_expect_lt(worst_b, 1e-5, "dB off by %g", worst_b);
    TgTensor *all[] = {x, w, a, b, dy};
    for (int i = 0; i < 5; i++) test_tensor_free(all[i]);
    test_tape_free(&tt);
}
