/* The tape, the arena, the flat parameter store and errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "lib/error.h"
#include "lib/params.h"
#include "ops/ops.h"
#include "testutil.h"

static TestTape tt;
static void setup(void) { test_tape_init(&tt, 1); }
static void teardown(void) { test_tape_free(&tt); }

TestSuite(engine, .init = setup, .fini = teardown);

static Tensor *leaf(const char *name, float *values, int64_t n) {
    Tensor *t = tensor_new(&tt.arena, name, 1, (int64_t[]){n});
    memcpy(t->data, values, (size_t)n * sizeof(float));
    t->requires_grad = true;
    return t;
}

Test(engine, tensor_used_twice_accumulates_both_gradients) {
    Tensor *x = leaf("x", (float[]){1.5f, -2.0f, 3.0f}, 3);
    /* L = sum(x * x) + sum(x + x): dL/dx = 2x + 2 */
    Tensor *l = op_add(&tt.tape, op_sum(&tt.tape, op_mul(&tt.tape, x, x)),
                       op_sum(&tt.tape, op_add(&tt.tape, x, x)));
    tape_backward(&tt.tape, l);
    for (int i = 0; i < 3; i++) cr_expect_float_eq(x->grad[i], 2 * x->data[i] + 2, 1e-6);
}

Test(engine, diamond_graph) {
    Tensor *x = leaf("x", (float[]){0.5f, -1.0f}, 2);
    /* a = 2x, b = 3x, L = sum(a*b) = 6 sum(x^2): dL/dx = 12x */
    Tensor *a = op_scale(&tt.tape, x, 2.0f);
    Tensor *b = op_scale(&tt.tape, x, 3.0f);
    Tensor *l = op_sum(&tt.tape, op_mul(&tt.tape, a, b));
    cr_expect_float_eq(l->data[0], 6 * (0.25f + 1.0f), 1e-6);
    tape_backward(&tt.tape, l);
    cr_expect_float_eq(x->grad[0], 6.0f, 1e-6);
    cr_expect_float_eq(x->grad[1], -12.0f, 1e-6);
    cr_expect_eq(tt.tape.n_nodes, 4);
}

Test(engine, backward_twice_accumulates) {
    /* two backward passes without zeroing add up, as gradient accumulation needs */
    Tensor *x = leaf("x", (float[]){2.0f}, 1);
    tape_backward(&tt.tape, op_sum(&tt.tape, op_scale(&tt.tape, x, 3.0f)));
    tt.tape.n_nodes = 0;
    tape_backward(&tt.tape, op_sum(&tt.tape, op_scale(&tt.tape, x, 3.0f)));
    cr_expect_float_eq(x->grad[0], 6.0f, 1e-6);
}

Test(engine, no_grad_records_nothing) {
    Tensor *x = leaf("x", (float[]){1.0f, 2.0f}, 2);
    bool old = tape_set_grad_enabled(&tt.tape, false);
    cr_expect(old);
    Tensor *y = op_sum(&tt.tape, op_mul(&tt.tape, x, x));
    cr_expect_eq(tt.tape.n_nodes, 0);
    cr_expect_not(y->requires_grad);
    cr_expect_float_eq(y->data[0], 5.0f, 1e-6);
    tape_set_grad_enabled(&tt.tape, true);
    op_sum(&tt.tape, x);
    cr_expect_eq(tt.tape.n_nodes, 1);
}

Test(engine, constants_record_nothing) {
    Tensor *c = tensor_new(&tt.arena, "c", 1, (int64_t[]){2});
    c->data[0] = c->data[1] = 1.0f;
    Tensor *y = op_mul(&tt.tape, c, c);
    cr_expect_eq(tt.tape.n_nodes, 0);
    cr_expect_not(y->requires_grad);
}

Test(engine, unused_branch_gets_no_gradient) {
    Tensor *x = leaf("x", (float[]){1.0f}, 1);
    Tensor *y = leaf("y", (float[]){1.0f}, 1);
    op_scale(&tt.tape, y, 2.0f); /* recorded, but the loss does not use it */
    tape_backward(&tt.tape, op_sum(&tt.tape, x));
    cr_expect_null(y->grad);
    cr_expect_float_eq(x->grad[0], 1.0f, 1e-6);
}

/* One training-like step: params in a flat store, activations in the arena. */
static void one_step(ParamStore *ps, Rng *rng) {
    Tensor *x = TENSOR(&tt.arena, "x", 16, 32);
    rng_fill_uniform(rng, x->data, (size_t)x->numel, -1, 1);
    Tensor *h = op_linear(&tt.tape, x, params_find(ps, "w1"));
    Tensor *y = op_linear(&tt.tape, op_mul(&tt.tape, h, h), params_find(ps, "w2"));
    tape_backward(&tt.tape, op_mean(&tt.tape, y));
    tape_reset(&tt.tape);
}

Test(engine, arena_does_not_grow_over_1000_steps) {
    ParamStore ps;
    params_init(&ps);
    params_add(&ps, "w1", 2, (int64_t[]){64, 32}, true, PARAM_INIT_NORMAL(0.02f));
    params_add(&ps, "w2", 2, (int64_t[]){8, 64}, true, PARAM_INIT_NORMAL(0.02f));
    params_finalize(&ps);
    Rng rng;
    rng_seed(&rng, 7);
    rng_fill_normal(&rng, ps.data, ps.total, 0, 0.02f);
    /* start from an arena too small for one step, so the first step must grow it */
    arena_free(&tt.arena);
    arena_init(&tt.arena, 4096);
    one_step(&ps, &rng);
    one_step(&ps, &rng);
    size_t capacity = tt.arena.capacity, allocs = tt.arena.system_allocs;
    size_t node_cap = tt.tape.cap_nodes;
    for (int i = 0; i < 1000; i++) one_step(&ps, &rng);
    cr_expect_eq(tt.arena.capacity, capacity, "arena grew from %zu to %zu", capacity, tt.arena.capacity);
    cr_expect_eq(tt.arena.system_allocs, allocs, "arena allocated %zu more chunks",
                 tt.arena.system_allocs - allocs);
    cr_expect_eq(tt.tape.cap_nodes, node_cap);
    cr_expect_geq(capacity, tt.arena.peak);
    params_free(&ps);
}

Test(engine, arena_alignment_and_rewind) {
    void *a = arena_alloc(&tt.arena, 3);
    void *b = arena_alloc(&tt.arena, 5);
    cr_expect_eq((uintptr_t)a % TG_ARENA_ALIGN, 0);
    cr_expect_eq((uintptr_t)b % TG_ARENA_ALIGN, 0);
    ArenaMark m = arena_mark(&tt.arena);
    arena_alloc(&tt.arena, 10u << 20); /* forces a new chunk */
    arena_rewind(&tt.arena, m);
    cr_expect_eq(tt.arena.used, m.used);
    void *c = arena_alloc(&tt.arena, 8);
    cr_expect_eq((char *)c, (char *)b + TG_ARENA_ALIGN);
}

Test(engine, params_are_views_into_flat_buffers) {
    ParamStore ps;
    params_init(&ps);
    Tensor *a = params_add(&ps, "a", 2, (int64_t[]){3, 5}, true, PARAM_INIT_NORMAL(0.02f));
    Tensor *b = params_add(&ps, "b", 1, (int64_t[]){7}, false, PARAM_INIT_ONES);
    params_finalize(&ps);
    cr_expect_eq(ps.count, 2);
    cr_expect_geq(ps.total, 15 + 7);
    cr_expect(a->data >= ps.data && a->data + a->numel <= ps.data + ps.total);
    cr_expect(b->data >= ps.data && b->data + b->numel <= ps.data + ps.total);
    cr_expect(b->data >= a->data + a->numel, "views overlap");
    cr_expect_eq(b->grad - ps.grad, b->data - ps.data);
    cr_expect_eq(params_find(&ps, "b"), b);
    cr_expect_null(params_find(&ps, "c"));
    for (int64_t i = 0; i < b->numel; i++) b->grad[i] = 2.0f;
    cr_expect_float_eq(params_grad_norm(&ps), sqrt(7 * 4.0), 1e-9);
    params_zero_grad(&ps);
    cr_expect_float_eq(params_grad_norm(&ps), 0.0, 1e-12);
    cr_expect(ps.decay[0] && !ps.decay[1]);
    params_free(&ps);
}

/* A backward adds into the buffer the views point at: another one (a micro-batch's gradient kept
 * apart), then ps->grad again. */
Test(engine, param_gradients_go_where_the_views_point) {
    ParamStore ps;
    params_init(&ps);
    Tensor *w = params_add(&ps, "w", 1, (int64_t[]){3}, false, PARAM_INIT_ONES);
    params_finalize(&ps);
    params_init_values(&ps, 1);
    float *apart = calloc(ps.total, sizeof(float));
    params_point_grads(&ps, apart);
    Tensor *x = leaf("x", (float[]){1.0f, 2.0f, 3.0f}, 3);
    tape_backward(&tt.tape, op_sum(&tt.tape, op_mul(&tt.tape, w, x))); /* dL/dw = x */
    tape_reset(&tt.tape);
    for (int i = 0; i < 3; i++) {
        cr_expect_float_eq(apart[i], (float)(i + 1), 0.0f);
        cr_expect_float_eq(ps.grad[i], 0.0f, 0.0f, "ps->grad[%d] changed while the views pointed elsewhere", i);
    }
    params_point_grads(&ps, NULL);
    cr_expect_eq(w->grad, ps.grad);
    x = leaf("x", (float[]){1.0f, 2.0f, 3.0f}, 3);
    tape_backward(&tt.tape, op_sum(&tt.tape, op_mul(&tt.tape, w, x)));
    for (int i = 0; i < 3; i++) cr_expect_float_eq(ps.grad[i], (float)(i + 1), 0.0f);
    free(apart);
    params_free(&ps);
}

/* Each parameter starts as its init kind says (not by its shape), and the normal ones come from
 * one seeded stream in the order they were added. */
Test(engine, params_start_as_their_init_kind_says) {
    ParamStore ps;
    params_init(&ps);
    Tensor *w = params_add(&ps, "w", 2, (int64_t[]){200, 50}, true, PARAM_INIT_NORMAL(0.5f));
    Tensor *bias = params_add(&ps, "bias", 1, (int64_t[]){9}, false, PARAM_INIT_ZEROS);
    Tensor *gain = params_add(&ps, "gain", 1, (int64_t[]){9}, false, PARAM_INIT_ONES);
    params_finalize(&ps);
    for (int64_t i = 0; i < bias->numel; i++) bias->data[i] = 7.0f; /* must be overwritten */
    params_init_values(&ps, 42);
    for (int64_t i = 0; i < 9; i++) {
        cr_expect_eq(bias->data[i], 0.0f);
        cr_expect_eq(gain->data[i], 1.0f);
    }
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < w->numel; i++) sum += w->data[i], sum_sq += (double)w->data[i] * w->data[i];
    double mean = sum / (double)w->numel, std = sqrt(sum_sq / (double)w->numel - mean * mean);
    cr_expect_lt(fabs(mean), 0.02, "mean %g", mean);         /* 10,000 draws: sd of the mean 0.005 */
    cr_expect_lt(fabs(std - 0.5), 0.02, "std %g", std);
    float first = w->data[0];
    params_init_values(&ps, 42);
    cr_expect_eq(w->data[0], first, "the same seed draws the same values");
    params_init_values(&ps, 43);
    cr_expect_neq(w->data[0], first);
    params_free(&ps);
}

Test(engine, error_message_with_context) {
    tg_status s = tg_fail(TG_ERR_IO, "cannot open %s", "x.bin");
    cr_expect_eq(s, TG_ERR_IO);
    tg_fail_context(s, "loading checkpoint");
    cr_expect_str_eq(tg_error_message(), "loading checkpoint: cannot open x.bin");
}

Test(engine, shape_mismatch_aborts, .signal = SIGABRT) {
    Tensor *a = TENSOR(&tt.arena, "a", 2, 3);
    Tensor *b = TENSOR(&tt.arena, "b", 3, 2);
    op_add(&tt.tape, a, b);
}

Test(engine, backward_from_non_scalar_aborts, .signal = SIGABRT) {
    Tensor *x = leaf("x", (float[]){1.0f, 2.0f}, 2);
    tape_backward(&tt.tape, op_scale(&tt.tape, x, 2.0f));
}
