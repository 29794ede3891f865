/* The tape, the arena, the flat parameter store and errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tapegrad/error.h"
#include "tapegrad/params.h"
#include "tapegrad/ops.h"
#include "testutil.h"

static TestTape tt;
static void setup(void) { test_tape_init(&tt, 1); }
static void teardown(void) { test_tape_free(&tt); }

TestSuite(engine, .init = setup, .fini = teardown);

static TgTensor *leaf(const char *name, float *values, int64_t n) {
    TgTensor *t = tg_tensor_new(&tt.arena, name, 1, (int64_t[]){n});
    memcpy(t->data, values, (size_t)n * sizeof(float));
    t->requires_grad = true;
    return t;
}

Test(engine, tensor_used_twice_accumulates_both_gradients) {
    TgTensor *x = leaf("x", (float[]){1.5f, -2.0f, 3.0f}, 3);
    /* L = sum(x * x) + sum(x + x): dL/dx = 2x + 2 */
    TgTensor *l = tg_add(&tt.tape, tg_sum(&tt.tape, tg_mul(&tt.tape, x, x)),
                       tg_sum(&tt.tape, tg_add(&tt.tape, x, x)));
    tg_tape_backward(&tt.tape, l);
    for (int i = 0; i < 3; i++) cr_expect_float_eq(x->grad[i], 2 * x->data[i] + 2, 1e-6);
}

Test(engine, diamond_graph) {
    TgTensor *x = leaf("x", (float[]){0.5f, -1.0f}, 2);
    /* a = 2x, b = 3x, L = sum(a*b) = 6 sum(x^2): dL/dx = 12x */
    TgTensor *a = tg_scale(&tt.tape, x, 2.0f);
    TgTensor *b = tg_scale(&tt.tape, x, 3.0f);
    TgTensor *l = tg_sum(&tt.tape, tg_mul(&tt.tape, a, b));
    cr_expect_float_eq(l->data[0], 6 * (0.25f + 1.0f), 1e-6);
    tg_tape_backward(&tt.tape, l);
    cr_expect_float_eq(x->grad[0], 6.0f, 1e-6);
    cr_expect_float_eq(x->grad[1], -12.0f, 1e-6);
    cr_expect_eq(tt.tape.n_nodes, 4);
}

Test(engine, backward_twice_accumulates) {
    /* two backward passes without zeroing add up, as gradient accumulation needs */
    TgTensor *x = leaf("x", (float[]){2.0f}, 1);
    tg_tape_backward(&tt.tape, tg_sum(&tt.tape, tg_scale(&tt.tape, x, 3.0f)));
    tt.tape.n_nodes = 0;
    tg_tape_backward(&tt.tape, tg_sum(&tt.tape, tg_scale(&tt.tape, x, 3.0f)));
    cr_expect_float_eq(x->grad[0], 6.0f, 1e-6);
}

Test(engine, no_grad_records_nothing) {
    TgTensor *x = leaf("x", (float[]){1.0f, 2.0f}, 2);
    bool old = tg_tape_set_grad_enabled(&tt.tape, false);
    cr_expect(old);
    TgTensor *y = tg_sum(&tt.tape, tg_mul(&tt.tape, x, x));
    cr_expect_eq(tt.tape.n_nodes, 0);
    cr_expect_not(y->requires_grad);
    cr_expect_float_eq(y->data[0], 5.0f, 1e-6);
    tg_tape_set_grad_enabled(&tt.tape, true);
    tg_sum(&tt.tape, x);
    cr_expect_eq(tt.tape.n_nodes, 1);
}

Test(engine, constants_record_nothing) {
    TgTensor *c = tg_tensor_new(&tt.arena, "c", 1, (int64_t[]){2});
    c->data[0] = c->data[1] = 1.0f;
    TgTensor *y = tg_mul(&tt.tape, c, c);
    cr_expect_eq(tt.tape.n_nodes, 0);
    cr_expect_not(y->requires_grad);
}

Test(engine, unused_branch_gets_no_gradient) {
    TgTensor *x = leaf("x", (float[]){1.0f}, 1);
    TgTensor *y = leaf("y", (float[]){1.0f}, 1);
    tg_scale(&tt.tape, y, 2.0f); /* recorded, but the loss does not use it */
    tg_tape_backward(&tt.tape, tg_sum(&tt.tape, x));
    cr_expect_null(y->grad);
    cr_expect_float_eq(x->grad[0], 1.0f, 1e-6);
}

/* One training-like step: params in a flat store, activations in the arena. */
static void one_step(TgParamStore *ps, TgRng *rng) {
    TgTensor *x = TG_TENSOR(&tt.arena, "x", 16, 32);
    tg_rng_fill_uniform(rng, x->data, (size_t)x->numel, -1, 1);
    TgTensor *h = tg_linear(&tt.tape, x, tg_params_find(ps, "w1"));
    TgTensor *y = tg_linear(&tt.tape, tg_mul(&tt.tape, h, h), tg_params_find(ps, "w2"));
    tg_tape_backward(&tt.tape, tg_mean(&tt.tape, y));
    tg_tape_reset(&tt.tape);
}

Test(engine, arena_does_not_grow_over_1000_steps) {
    TgParamStore ps;
    tg_params_init(&ps);
    tg_params_add(&ps, "w1", 2, (int64_t[]){64, 32}, true, TG_PARAM_INIT_NORMAL(0.02f));
    tg_params_add(&ps, "w2", 2, (int64_t[]){8, 64}, true, TG_PARAM_INIT_NORMAL(0.02f));
    tg_params_finalize(&ps);
    TgRng rng;
    tg_rng_seed(&rng, 7);
    tg_rng_fill_normal(&rng, ps.data, ps.total, 0, 0.02f);
    /* start from an arena too small for one step, so the first step must grow it */
    tg_arena_free(&tt.arena);
    tg_arena_init(&tt.arena, 4096);
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
    tg_params_free(&ps);
}

Test(engine, arena_alignment_and_rewind) {
    void *a = tg_arena_alloc(&tt.arena, 3);
    void *b = tg_arena_alloc(&tt.arena, 5);
    cr_expect_eq((uintptr_t)a % TG_ARENA_ALIGN, 0);
    cr_expect_eq((uintptr_t)b % TG_ARENA_ALIGN, 0);
    TgArenaMark m = tg_arena_mark(&tt.arena);
    tg_arena_alloc(&tt.arena, 10u << 20); /* forces a new chunk */
    tg_arena_rewind(&tt.arena, m);
    cr_expect_eq(tt.arena.used, m.used);
    void *c = tg_arena_alloc(&tt.arena, 8);
    cr_expect_eq((char *)c, (char *)b + TG_ARENA_ALIGN);
}

Test(engine, params_are_views_into_flat_buffers) {
    TgParamStore ps;
    tg_params_init(&ps);
    TgTensor *a = tg_params_add(&ps, "a", 2, (int64_t[]){3, 5}, true, TG_PARAM_INIT_NORMAL(0.02f));
    TgTensor *b = tg_params_add(&ps, "b", 1, (int64_t[]){7}, false, TG_PARAM_INIT_ONES);
    tg_params_finalize(&ps);
    cr_expect_eq(ps.count, 2);
    cr_expect_geq(ps.total, 15 + 7);
    cr_expect(a->data >= ps.data && a->data + a->numel <= ps.data + ps.total);
    cr_expect(b->data >= ps.data && b->data + b->numel <= ps.data + ps.total);
    cr_expect(b->data >= a->data + a->numel, "views overlap");
    cr_expect_eq(b->grad - ps.grad, b->data - ps.data);
    cr_expect_eq(tg_params_find(&ps, "b"), b);
    cr_expect_null(tg_params_find(&ps, "c"));
    for (int64_t i = 0; i < b->numel; i++) b->grad[i] = 2.0f;
    cr_expect_float_eq(tg_params_grad_norm(&ps), sqrt(7 * 4.0), 1e-9);
    tg_params_zero_grad(&ps);
    cr_expect_float_eq(tg_params_grad_norm(&ps), 0.0, 1e-12);
    cr_expect(ps.decay[0] && !ps.decay[1]);
    tg_params_free(&ps);
}

/* A backward adds into the buffer the views point at: another one (a micro-batch's gradient kept
 * apart), then ps->grad again. */
Test(engine, param_gradients_go_where_the_views_point) {
    TgParamStore ps;
    tg_params_init(&ps);
    TgTensor *w = tg_params_add(&ps, "w", 1, (int64_t[]){3}, false, TG_PARAM_INIT_ONES);
    tg_params_finalize(&ps);
    tg_params_init_values(&ps, 1);
    float *apart = calloc(ps.total, sizeof(float));
    tg_params_point_grads(&ps, apart);
    TgTensor *x = leaf("x", (float[]){1.0f, 2.0f, 3.0f}, 3);
    tg_tape_backward(&tt.tape, tg_sum(&tt.tape, tg_mul(&tt.tape, w, x))); /* dL/dw = x */
    tg_tape_reset(&tt.tape);
    for (int i = 0; i < 3; i++) {
        cr_expect_float_eq(apart[i], (float)(i + 1), 0.0f);
        cr_expect_float_eq(ps.grad[i], 0.0f, 0.0f, "ps->grad[%d] changed while the views pointed elsewhere", i);
    }
    tg_params_point_grads(&ps, NULL);
    cr_expect_eq(w->grad, ps.grad);
    x = leaf("x", (float[]){1.0f, 2.0f, 3.0f}, 3);
    tg_tape_backward(&tt.tape, tg_sum(&tt.tape, tg_mul(&tt.tape, w, x)));
    for (int i = 0; i < 3; i++) cr_expect_float_eq(ps.grad[i], (float)(i + 1), 0.0f);
    free(apart);
    tg_params_free(&ps);
}

/* Each parameter starts as its init kind says (not by its shape), and the normal ones come from
 * one seeded stream in the order they were added. */
Test(engine, params_start_as_their_init_kind_says) {
    TgParamStore ps;
    tg_params_init(&ps);
    TgTensor *w = tg_params_add(&ps, "w", 2, (int64_t[]){200, 50}, true, TG_PARAM_INIT_NORMAL(0.5f));
    TgTensor *bias = tg_params_add(&ps, "bias", 1, (int64_t[]){9}, false, TG_PARAM_INIT_ZEROS);
    TgTensor *gain = tg_params_add(&ps, "gain", 1, (int64_t[]){9}, false, TG_PARAM_INIT_ONES);
    tg_params_finalize(&ps);
    for (int64_t i = 0; i < bias->numel; i++) bias->data[i] = 7.0f; /* must be overwritten */
    tg_params_init_values(&ps, 42);
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
    tg_params_init_values(&ps, 42);
    cr_expect_eq(w->data[0], first, "the same seed draws the same values");
    tg_params_init_values(&ps, 43);
    cr_expect_neq(w->data[0], first);
    tg_params_free(&ps);
}

Test(engine, error_message_with_context) {
    TgStatus s = tg_fail(TG_ERR_IO, "cannot open %s", "x.bin");
    cr_expect_eq(s, TG_ERR_IO);
    tg_fail_context(s, "loading checkpoint");
    cr_expect_str_eq(tg_error_message(), "loading checkpoint: cannot open x.bin");
}

Test(engine, shape_mismatch_aborts, .signal = SIGABRT) {
    TgTensor *a = TG_TENSOR(&tt.arena, "a", 2, 3);
    TgTensor *b = TG_TENSOR(&tt.arena, "b", 3, 2);
    tg_add(&tt.tape, a, b);
}

Test(engine, backward_from_non_scalar_aborts, .signal = SIGABRT) {
    TgTensor *x = leaf("x", (float[]){1.0f, 2.0f}, 2);
    tg_tape_backward(&tt.tape, tg_scale(&tt.tape, x, 2.0f));
}

/* A broken invariant's message reaches the abort handler a program installs, then the process
 * aborts; the previous handler comes back from tg_set_abort_handler. In a child, so the abort
 * ends it alone. */
static int abort_pipe = -1;
static void handler_to_pipe(const char *message) { (void)!write(abort_pipe, message, strlen(message)); }

Test(engine, a_broken_invariant_goes_to_the_abort_handler_then_aborts) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        close(fds[0]);
        abort_pipe = fds[1];
        TgAbortHandler previous = tg_set_abort_handler(handler_to_pipe);
        if (previous == NULL || tg_set_abort_handler(handler_to_pipe) != handler_to_pipe) _exit(3);
        TG_CHECK(1 + 1 == 3, "arithmetic holds for %s", "no one");
        _exit(4); /* not reached */
    }
    close(fds[1]);
    char text[1024] = "";
    size_t n = 0;
    for (ssize_t r; n < sizeof text - 1 && (r = read(fds[0], text + n, sizeof text - 1 - n)) > 0;) n += (size_t)r;
    close(fds[0]);
    int status = 0;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "the child did not abort (status %d)", status);
    cr_expect(strstr(text, "tapegrad: internal error at ") && strstr(text, "check failed: 1 + 1 == 3 -- arithmetic "
                                                                             "holds for no one\n"),
              "the handler saw: %s", text);
}
