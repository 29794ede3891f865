/* Activations, RMSNorm, RoPE, SwiGLU and the FFNs: every registered gradient check, plus the
 * known values and properties a gradient check cannot see (a forward that is wrong but whose
 * backward matches it passes any gradient check). */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <string.h>

#include "tapegrad/error.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"
#include "testutil.h"

static TestTape tt;
static void setup(void) { test_tape_init(&tt, 1); }
static void teardown(void) { test_tape_free(&tt); }
TestSuite(ops_act_norm, .init = setup, .fini = teardown);

/* ---------------------------------------------------------------- helpers */

static TgTensor *tensor_from(const char *name, int ndim, const int64_t *shape, const float *values) {
    TgTensor *t = test_tensor(name, ndim, shape, NULL, 0, 0);
    memcpy(t->data, values, (size_t)t->numel * sizeof(float));
    return t;
}

static TgTensor *normal_tensor(const char *name, int64_t rows, int64_t cols, TgRng *rng, float std) {
    TgTensor *t = test_tensor(name, 2, (int64_t[]){rows, cols}, NULL, 0, 0);
    tg_rng_fill_normal(rng, t->data, (size_t)t->numel, 0.0f, std);
    return t;
}

static double silu_ref(double x) { return x / (1.0 + exp(-x)); }
static double gelu_ref(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

/* ---------------------------------------------------------------- activations */

static const float probe[5] = {-3, -1, 0, 1, 3};

/* The functions' values at the probes, rounded to 4 decimals by hand (x sigmoid(x), x Phi(x),
 * ...): within half a unit of the 4th decimal, plus float rounding */
static void expect_4_decimals(const char *what, const float *got, const float *expected) {
    for (int i = 0; i < 5; i++)
        cr_expect_leq(fabsf(got[i] - expected[i]), 5e-5f + 1e-6f, "%s(%g) = %.6f, expected %.4f", what,
                      (double)probe[i], (double)got[i], (double)expected[i]);
}

Test(ops_act_norm, silu_known_values) {
    static const float expected[5] = {-0.1423f, -0.2689f, 0.0f, 0.7311f, 2.8577f};
    TgTensor *x = tensor_from("x", 1, (int64_t[]){5}, probe);
    TgTensor *y = tg_silu(&tt.tape, x);
    float helper[5];
    for (int i = 0; i < 5; i++) helper[i] = tg_act_silu(probe[i]);
    expect_4_decimals("tg_silu", y->data, expected);
    expect_4_decimals("tg_act_silu", helper, expected);
    for (int i = 0; i < 5; i++)
        cr_expect_leq(fabs(y->data[i] - silu_ref(probe[i])), 1e-6, "silu(%g)", (double)probe[i]);
    test_tensor_free(x);
}

Test(ops_act_norm, gelu_known_values_erf_form) {
    static const float expected[5] = {-0.0040f, -0.1587f, 0.0f, 0.8413f, 2.9960f};
    TgTensor *x = tensor_from("x", 1, (int64_t[]){5}, probe);
    TgTensor *y = tg_gelu(&tt.tape, x);
    float helper[5];
    for (int i = 0; i < 5; i++) helper[i] = tg_act_gelu(probe[i]);
    expect_4_decimals("tg_gelu", y->data, expected);
    expect_4_decimals("tg_act_gelu", helper, expected);
    /* the tanh approximation differs by ~4e-4 at +-3: this tells the two apart */
    for (int i = 0; i < 5; i++)
        cr_expect_leq(fabs(y->data[i] - gelu_ref(probe[i])), 1e-6, "gelu(%g)", (double)probe[i]);
    test_tensor_free(x);
}

Test(ops_act_norm, sigmoid_relu_swiglu_known_values) {
    TgTensor *x = tensor_from("x", 1, (int64_t[]){5}, probe);
    TgTensor *s = tg_sigmoid(&tt.tape, x), *r = tg_relu(&tt.tape, x);
    static const float relu_expected[5] = {0, 0, 0, 1, 3};
    for (int i = 0; i < 5; i++) {
        double sig = 1.0 / (1.0 + exp(-(double)probe[i]));
        cr_expect_leq(fabs(s->data[i] - sig), 1e-6, "sigmoid(%g)", (double)probe[i]);
        cr_expect_leq(fabs(tg_act_sigmoid(probe[i]) - sig), 1e-6, "tg_act_sigmoid(%g)", (double)probe[i]);
        cr_expect_eq(r->data[i], relu_expected[i], "relu(%g)", (double)probe[i]);
    }
    /* swiglu(a, b) = silu(a) * b */
    TgTensor *b = tensor_from("b", 1, (int64_t[]){5}, (float[]){2, -1, 5, 2, 0.5f});
    TgTensor *g = tg_swiglu(&tt.tape, x, b);
    for (int i = 0; i < 5; i++)
        cr_expect_leq(fabs(g->data[i] - silu_ref(probe[i]) * b->data[i]), 1e-6, "swiglu #%d", i);
    test_tensor_free(x);
    test_tensor_free(b);
}

/* ---------------------------------------------------------------- RoPE */

Test(ops_act_norm, rope_rotate_half_known_value) {
    const float x[4] = {2, 4, 6, 8};
    float out[4];
    tg_rope_rotate_half(x, out, 4);
    const float expected[4] = {-6, -8, 2, 4};
    for (int i = 0; i < 4; i++) cr_expect_eq(out[i], expected[i], "rotate_half[%d] = %g", i, (double)out[i]);
}

/* A unit vector on x[i] (resp. x[i+h]) at position p comes out as (cos, sin) (resp. (-sin, cos))
 * of p * theta^(-2i/hd) on (i, i+h): the half-split pairing and the frequencies, in one test. */
Test(ops_act_norm, rope_rotates_pair_i_and_i_plus_half) {
    const int64_t hd = 8, half = 4, pos = 3;
    const double theta = 10.0;
    TgRopeTable rope;
    tg_rope_table_init(&rope, 8, hd, theta);
    for (int64_t i = 0; i < hd; i++) {
        float unit[8] = {0};
        unit[i] = 1.0f;
        TgTensor *x = tensor_from("x", 3, (int64_t[]){1, 1, hd}, unit);
        TgTensor *y = tg_rope(&tt.tape, x, 1, &rope, pos);
        int64_t pair = i % half;
        double angle = (double)pos * pow(theta, -2.0 * (double)pair / (double)hd);
        double c = cos(angle), s = sin(angle);
        double expect_first = i < half ? c : -s, expect_second = i < half ? s : c;
        for (int64_t j = 0; j < hd; j++) {
            double expected = j == pair ? expect_first : j == pair + half ? expect_second : 0.0;
            cr_expect_leq(fabs(y->data[j] - expected), 1e-6, "unit %lld -> y[%lld] = %g, expected %g",
                          (long long)i, (long long)j, (double)y->data[j], expected);
        }
        test_tensor_free(x);
    }
    tg_rope_table_free(&rope);
}

Test(ops_act_norm, rope_keeps_the_norm_of_each_pair) {
    const int64_t B = 2, T = 5, heads = 3, hd = 16, half = hd / 2, width = heads * hd;
    TgRopeTable rope;
    tg_rope_table_init(&rope, 64, hd, 1e4);
    TgRng rng;
    tg_rng_seed(&rng, 3);
    TgTensor *x = test_tensor("x", 3, (int64_t[]){B, T, width}, &rng, -1, 1);
    TgTensor *y = tg_rope(&tt.tape, x, heads, &rope, 7);
    double moved = 0.0; /* the rotation must do something, or this test proves nothing */
    for (int64_t row = 0; row < B * T; row++)
        for (int64_t head = 0; head < heads; head++)
            for (int64_t i = 0; i < half; i++) {
                int64_t a = row * width + head * hd + i, b = a + half;
                double before = (double)x->data[a] * x->data[a] + (double)x->data[b] * x->data[b];
                double after = (double)y->data[a] * y->data[a] + (double)y->data[b] * y->data[b];
                cr_expect_leq(fabs(after - before), 1e-5 * before + 1e-12, "row %lld head %lld pair %lld",
                              (long long)row, (long long)head, (long long)i);
                moved += fabs(y->data[a] - x->data[a]);
            }
    cr_expect_gt(moved, 1.0);
    test_tensor_free(x);
    tg_rope_table_free(&rope);
}

/* q . k with q at position m and k at n (one head of hd values). */
static double rope_score(const TgRopeTable *rope, TgTensor *q, TgTensor *k, int64_t m, int64_t n) {
    TgTensor *q_rot = tg_rope(&tt.tape, q, 1, rope, m), *k_rot = tg_rope(&tt.tape, k, 1, rope, n);
    double dot = 0.0;
    for (int64_t i = 0; i < q->numel; i++) dot += (double)q_rot->data[i] * k_rot->data[i];
    return dot;
}

Test(ops_act_norm, rope_score_depends_only_on_relative_position) {
    const int64_t hd = 64;
    TgRopeTable rope;
    tg_rope_table_init(&rope, 4096, hd, 1e6);
    TgRng rng;
    tg_rng_seed(&rng, 9);
    TgTensor *q = test_tensor("q", 3, (int64_t[]){1, 1, hd}, &rng, -1, 1);
    TgTensor *k = test_tensor("k", 3, (int64_t[]){1, 1, hd}, &rng, -1, 1);
    static const int64_t mns[][3] = {{0, 0, 1}, {3, 7, 5}, {7, 3, 11}, {10, 2, 100},
                                     {100, 37, 900}, {1, 1000, 3000}, {2500, 40, 1500}};
    for (size_t c = 0; c < sizeof mns / sizeof mns[0]; c++) {
        int64_t m = mns[c][0], n = mns[c][1], s = mns[c][2];
        double here = rope_score(&rope, q, k, m, n), shifted = rope_score(&rope, q, k, m + s, n + s);
        cr_expect_leq(fabs(here - shifted), 1e-5 * fmax(1.0, fabs(here)),
                      "q at %lld, k at %lld: %.9g; both shifted by %lld: %.9g", (long long)m,
                      (long long)n, here, (long long)s, shifted);
        tg_tape_reset(&tt.tape);
    }
    /* and it does depend on the offset (an identity "rope" would pass the loop above) */
    cr_expect_gt(fabs(rope_score(&rope, q, k, 0, 0) - rope_score(&rope, q, k, 0, 3)), 1e-2);
    test_tensor_free(q);
    test_tensor_free(k);
    tg_rope_table_free(&rope);
}

/* KV-cache decoding feeds one token at position p: it must match row p of the full pass. */
Test(ops_act_norm, rope_one_token_at_offset_equals_row_of_full_sequence) {
    const int64_t B = 2, T = 12, heads = 2, hd = 8, width = heads * hd;
    TgRopeTable rope;
    tg_rope_table_init(&rope, 32, hd, 10.0);
    TgRng rng;
    tg_rng_seed(&rng, 4);
    TgTensor *x = test_tensor("x", 3, (int64_t[]){B, T, width}, &rng, -1, 1);
    TgTensor *y = tg_rope(&tt.tape, x, heads, &rope, 0);  /* (B, T, width) */
    TgTensor *token = test_tensor("token", 3, (int64_t[]){B, 1, width}, NULL, 0, 0);
    for (int64_t p = 0; p < T; p++) {
        for (int64_t b = 0; b < B; b++)
            memcpy(token->data + b * width, x->data + (b * T + p) * width, (size_t)width * sizeof(float));
        TgTensor *y_token = tg_rope(&tt.tape, token, heads, &rope, p);  /* (B, 1, width) */
        for (int64_t b = 0; b < B; b++)
            cr_expect_eq(memcmp(y_token->data + b * width, y->data + (b * T + p) * width,
                                (size_t)width * sizeof(float)), 0, "batch %lld position %lld differs",
                         (long long)b, (long long)p);
    }
    test_tensor_free(x);
    test_tensor_free(token);
    tg_rope_table_free(&rope);
}

Test(ops_act_norm, rope_aborts_past_the_table, .signal = SIGABRT) {
    TgRopeTable rope;
    tg_rope_table_init(&rope, 8, 4, 10.0);
    TgTensor *x = test_tensor("x", 3, (int64_t[]){1, 3, 4}, NULL, 0, 0);
    tg_rope(&tt.tape, x, 1, &rope, 6);  /* positions 6, 7, 8: 8 is past max_pos */
}

Test(ops_act_norm, rope_aborts_on_odd_head_dim, .signal = SIGABRT) {
    float table[16] = {0};
    TgRopeTable odd = {.cos = table, .sin = table, .max_pos = 4, .head_dim = 3, .theta = 10.0};
    TgTensor *x = test_tensor("x", 3, (int64_t[]){1, 2, 3}, NULL, 0, 0);
    tg_rope(&tt.tape, x, 1, &odd, 0);
}

/* ---------------------------------------------------------------- RMSNorm */

static void expect_rmsnorm_matches_double_loop(int64_t rows, int64_t d, float lo, float hi, uint64_t seed) {
    const float eps = 1e-5f;
    TgRng rng;
    tg_rng_seed(&rng, seed);
    TgTensor *x = test_tensor("x", 2, (int64_t[]){rows, d}, &rng, lo, hi);
    TgTensor *g = test_tensor("g", 1, (int64_t[]){d}, &rng, 0.5f, 1.5f);
    TgTensor *y = tg_rmsnorm(&tt.tape, x, g, eps);
    for (int64_t r = 0; r < rows; r++) {
        double sum_sq = 0.0;
        for (int64_t j = 0; j < d; j++) sum_sq += (double)x->data[r * d + j] * x->data[r * d + j];
        double rstd = 1.0 / sqrt(sum_sq / (double)d + (double)eps);
        for (int64_t j = 0; j < d; j++) {
            double expected = x->data[r * d + j] * rstd * g->data[j];
            cr_expect_leq(fabs(y->data[r * d + j] - expected), 1e-6 * fmax(1.0, fabs(expected)),
                          "row %lld col %lld: %.9g vs %.9g", (long long)r, (long long)j,
                          (double)y->data[r * d + j], expected);
        }
    }
    test_tensor_free(x);
    test_tensor_free(g);
}

Test(ops_act_norm, rmsnorm_forward_matches_double_loop) {
    expect_rmsnorm_matches_double_loop(5, 37, -2.0f, 2.0f, 1);
    /* mean(x^2) ~ 1e-3 here, so where eps sits (inside the sqrt) changes y by ~1% */
    expect_rmsnorm_matches_double_loop(4, 16, -0.05f, 0.05f, 2);
    expect_rmsnorm_matches_double_loop(3, 1, 0.1f, 1.0f, 3);
}

/* Per head (QK-norm): x (B, T, H*hd) with g (hd) is x (B*T*H, hd) normed row by row, bit for bit,
 * forward and backward (dg then sums over every head of every position). */
Test(ops_act_norm, rmsnorm_per_head_is_rmsnorm_of_the_heads_as_rows) {
    const int64_t B = 2, T = 3, H = 4, hd = 96;
    TgRng rng;
    tg_rng_seed(&rng, 7);
    TgTensor *x = test_tensor("x", 3, (int64_t[]){B, T, H * hd}, &rng, -2.0f, 2.0f);
    TgTensor *rows = test_tensor("rows", 2, (int64_t[]){B * T * H, hd}, NULL, 0, 0);
    TgTensor *g = test_tensor("g", 1, (int64_t[]){hd}, &rng, 0.5f, 1.5f);
    memcpy(rows->data, x->data, (size_t)x->numel * sizeof(float));
    x->requires_grad = rows->requires_grad = g->requires_grad = true;
    TgTensor *y = tg_rmsnorm(&tt.tape, x, g, 1e-6f);
    cr_assert_eq(y->ndim, 3);
    cr_assert_eq(y->shape[2], H * hd);
    tg_tape_backward(&tt.tape, tg_sum(&tt.tape, tg_mul(&tt.tape, y, y)));
    float *y_heads = tg_malloc((size_t)x->numel * sizeof(float)), *dg_heads = tg_malloc((size_t)hd * sizeof(float));
    memcpy(y_heads, y->data, (size_t)x->numel * sizeof(float));
    memcpy(dg_heads, g->grad, (size_t)hd * sizeof(float));
    float *dx_heads = tg_malloc((size_t)x->numel * sizeof(float));
    memcpy(dx_heads, x->grad, (size_t)x->numel * sizeof(float));
    tg_tape_reset(&tt.tape);
    g->grad = NULL;
    TgTensor *y_rows = tg_rmsnorm(&tt.tape, rows, g, 1e-6f);
    tg_tape_backward(&tt.tape, tg_sum(&tt.tape, tg_mul(&tt.tape, y_rows, y_rows)));
    cr_expect_eq(memcmp(y_heads, y_rows->data, (size_t)x->numel * sizeof(float)), 0, "y differs");
    cr_expect_eq(memcmp(dx_heads, rows->grad, (size_t)x->numel * sizeof(float)), 0, "dx differs");
    cr_expect_eq(memcmp(dg_heads, g->grad, (size_t)hd * sizeof(float)), 0, "dg differs");
    free(y_heads), free(dx_heads), free(dg_heads);
    test_tensor_free(x), test_tensor_free(rows), test_tensor_free(g);
}

Test(ops_act_norm, rmsnorm_refuses_a_last_dim_that_is_no_multiple_of_the_gain, .signal = SIGABRT) {
    TgTensor *x = test_tensor("x", 2, (int64_t[]){2, 10}, NULL, 0, 0);
    TgTensor *g = test_tensor("g", 1, (int64_t[]){4}, NULL, 0, 0);
    tg_rmsnorm(&tt.tape, x, g, 1e-5f);
}

typedef struct {
    float *y, *dx, *dg;
} RmsnormRun;

/* Forward and backward (from the given dy) on a tape with `threads` threads; copies the results. */
static RmsnormRun rmsnorm_run(int threads, TgTensor *x, TgTensor *g, const float *dy) {
    TestTape run;
    test_tape_init(&run, threads);
    x->requires_grad = g->requires_grad = true;
    x->grad = g->grad = NULL;
    TgTensor *y = tg_rmsnorm(&run.tape, x, g, 1e-5f);
    memcpy(tg_tensor_grad(&run.tape, y), dy, (size_t)y->numel * sizeof(float));
    tg_tape_backward_from_seeded(&run.tape);
    size_t x_bytes = (size_t)x->numel * sizeof(float), g_bytes = (size_t)g->numel * sizeof(float);
    RmsnormRun out = {tg_malloc(x_bytes), tg_malloc(x_bytes), tg_malloc(g_bytes)};
    memcpy(out.y, y->data, x_bytes);
    memcpy(out.dx, x->grad, x_bytes);
    memcpy(out.dg, g->grad, g_bytes);
    x->grad = g->grad = NULL;  /* they lived in the run's arena */
    test_tape_free(&run);
    return out;
}

static void rmsnorm_run_free(RmsnormRun *r) {
    free(r->y);
    free(r->dx);
    free(r->dg);
}

/* Large enough that the ops do use the pool (well past their thresholds of 2^14 elements). */
Test(ops_act_norm, rmsnorm_is_bitwise_the_same_on_1_2_and_3_threads) {
    const int64_t rows = 256, d = 384;
    TgRng rng;
    tg_rng_seed(&rng, 21);
    TgTensor *x = test_tensor("x", 2, (int64_t[]){rows, d}, &rng, -2, 2);
    TgTensor *g = test_tensor("g", 1, (int64_t[]){d}, &rng, 0.5f, 1.5f);
    TgTensor *dy = test_tensor("dy", 2, (int64_t[]){rows, d}, &rng, -1, 1);
    RmsnormRun one = rmsnorm_run(1, x, g, dy->data);
    int thread_counts[] = {2, 2, 3};
    for (int k = 0; k < 3; k++) {
        RmsnormRun many = rmsnorm_run(thread_counts[k], x, g, dy->data);
        size_t bytes = (size_t)x->numel * sizeof(float), g_bytes = (size_t)d * sizeof(float);
        cr_expect_eq(memcmp(one.y, many.y, bytes), 0, "y differs on %d threads", thread_counts[k]);
        cr_expect_eq(memcmp(one.dx, many.dx, bytes), 0, "dx differs on %d threads", thread_counts[k]);
        cr_expect_eq(memcmp(one.dg, many.dg, g_bytes), 0, "dg differs on %d threads", thread_counts[k]);
        rmsnorm_run_free(&many);
    }
    rmsnorm_run_free(&one);
    test_tensor_free(x);
    test_tensor_free(g);
    test_tensor_free(dy);
}

/* ---------------------------------------------------------------- threads */

typedef TgTensor *(*ForwardFn)(TgTape *tape, TgTensor *const *in);

/* y, then each input's gradient after a backward from a fixed random dy, on `threads` threads:
 * one heap buffer of out_numel + sum of the inputs' numel floats. */
static float *forward_backward(int threads, ForwardFn forward, TgTensor *const *in, int n_in) {
    TestTape run;
    test_tape_init(&run, threads);
    for (int k = 0; k < n_in; k++) {
        in[k]->requires_grad = true;
        in[k]->grad = NULL;
    }
    TgTensor *y = forward(&run.tape, in);
    TgRng rng;
    tg_rng_seed(&rng, 77);
    tg_rng_fill_uniform(&rng, tg_tensor_grad(&run.tape, y), (size_t)y->numel, -1, 1);
    tg_tape_backward_from_seeded(&run.tape);
    int64_t total = y->numel;
    for (int k = 0; k < n_in; k++) total += in[k]->numel;
    float *all = tg_malloc((size_t)total * sizeof(float)), *at = all;
    memcpy(at, y->data, (size_t)y->numel * sizeof(float));
    at += y->numel;
    for (int k = 0; k < n_in; k++) {
        memcpy(at, in[k]->grad, (size_t)in[k]->numel * sizeof(float));
        at += in[k]->numel;
        in[k]->grad = NULL;  /* it lived in the run's arena */
    }
    test_tape_free(&run);
    return all;
}

static TgRopeTable thread_test_rope;
static TgTensor *fwd_relu(TgTape *t, TgTensor *const *in) { return tg_relu(t, in[0]); }
static TgTensor *fwd_silu(TgTape *t, TgTensor *const *in) { return tg_silu(t, in[0]); }
static TgTensor *fwd_gelu(TgTape *t, TgTensor *const *in) { return tg_gelu(t, in[0]); }
static TgTensor *fwd_sigmoid(TgTape *t, TgTensor *const *in) { return tg_sigmoid(t, in[0]); }
static TgTensor *fwd_swiglu(TgTape *t, TgTensor *const *in) { return tg_swiglu(t, in[0], in[1]); }
static TgTensor *fwd_rope(TgTape *t, TgTensor *const *in) { return tg_rope(t, in[0], 4, &thread_test_rope, 3); }

/* (4, 64, 256) = 65536 elements: past every op's threshold for using the pool */
Test(ops_act_norm, elementwise_ops_and_rope_give_the_same_bits_on_2_threads) {
    const int64_t B = 4, T = 64, C = 256;
    tg_rope_table_init(&thread_test_rope, 128, 64, 1e4);
    TgRng rng;
    tg_rng_seed(&rng, 31);
    TgTensor *a = test_tensor("a", 3, (int64_t[]){B, T, C}, &rng, -4, 4);
    TgTensor *b = test_tensor("b", 3, (int64_t[]){B, T, C}, &rng, -4, 4);
    struct { const char *name; ForwardFn forward; int n_in; } ops[] = {
        {"relu", fwd_relu, 1}, {"silu", fwd_silu, 1}, {"gelu", fwd_gelu, 1},
        {"sigmoid", fwd_sigmoid, 1}, {"swiglu", fwd_swiglu, 2}, {"rope", fwd_rope, 1},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        size_t bytes = (size_t)(a->numel * (1 + ops[i].n_in)) * sizeof(float);
        float *serial = forward_backward(1, ops[i].forward, (TgTensor *[]){a, b}, ops[i].n_in);
        float *threaded = forward_backward(2, ops[i].forward, (TgTensor *[]){a, b}, ops[i].n_in);
        cr_expect_eq(memcmp(serial, threaded, bytes), 0, "%s: 2 threads differ from 1", ops[i].name);
        free(serial);
        free(threaded);
    }
    test_tensor_free(a);
    test_tensor_free(b);
    tg_rope_table_free(&thread_test_rope);
}

/* ---------------------------------------------------------------- FFNs */

static double zero_fraction(const TgTensor *t) {
    int64_t zeros = 0;
    for (int64_t i = 0; i < t->numel; i++) zeros += t->data[i] == 0.0f;
    return (double)zeros / (double)t->numel;
}

Test(ops_act_norm, relu_ffn_hidden_is_half_zeros_at_init) {
    const int64_t rows = 64, dim = 64, hidden = 256;
    TgRng rng;
    tg_rng_seed(&rng, 11);
    TgTensor *x = normal_tensor("x", rows, dim, &rng, 1.0f);
    TgTensor *w1 = normal_tensor("w1", hidden, dim, &rng, 0.02f);
    TgTensor *w2 = normal_tensor("w2", dim, hidden, &rng, 0.02f);
    TgTensor *hidden_act = NULL;
    TgTensor *out = tg_ffn_relu(&tt.tape, x, w1, w2, NULL, &hidden_act);
    cr_assert_not_null(hidden_act);
    cr_expect(hidden_act->ndim == 2 && hidden_act->shape[0] == rows && hidden_act->shape[1] == hidden);
    cr_expect(out->ndim == 2 && out->shape[0] == rows && out->shape[1] == dim);
    double frac = zero_fraction(hidden_act);
    cr_expect(frac >= 0.4 && frac <= 0.6, "relu hidden zero fraction %.3f", frac);
    test_tensor_free(x);
    test_tensor_free(w1);
    test_tensor_free(w2);
}

Test(ops_act_norm, swiglu_ffn_hidden_has_no_exact_zeros_at_init) {
    const int64_t rows = 64, dim = 64, hidden = 192;
    TgRng rng;
    tg_rng_seed(&rng, 12);
    TgTensor *x = normal_tensor("x", rows, dim, &rng, 1.0f);
    TgTensor *w1 = normal_tensor("w1", hidden, dim, &rng, 0.02f);
    TgTensor *w3 = normal_tensor("w3", hidden, dim, &rng, 0.02f);
    TgTensor *w2 = normal_tensor("w2", dim, hidden, &rng, 0.02f);
    TgTensor *hidden_act = NULL;
    TgTensor *out = tg_ffn_swiglu(&tt.tape, x, w1, w3, w2, NULL, &hidden_act);
    cr_assert_not_null(hidden_act);
    cr_expect(hidden_act->ndim == 2 && hidden_act->shape[0] == rows && hidden_act->shape[1] == hidden);
    cr_expect(out->ndim == 2 && out->shape[0] == rows && out->shape[1] == dim);
    double frac = zero_fraction(hidden_act);
    cr_expect_lt(frac, 0.01, "swiglu hidden zero fraction %.4f", frac);
    test_tensor_free(x);
    test_tensor_free(w1);
    test_tensor_free(w3);
    test_tensor_free(w2);
}

/* w1 is the gate and w3 the up projection: swapping them passes every gradient check. */
Test(ops_act_norm, swiglu_ffn_matches_double_loop_with_w1_as_gate) {
    const int64_t rows = 3, dim = 5, hidden = 7;
    TgRng rng;
    tg_rng_seed(&rng, 13);
    TgTensor *x = test_tensor("x", 2, (int64_t[]){rows, dim}, &rng, -1, 1);
    TgTensor *w1 = test_tensor("w1", 2, (int64_t[]){hidden, dim}, &rng, -1, 1);
    TgTensor *w3 = test_tensor("w3", 2, (int64_t[]){hidden, dim}, &rng, -1, 1);
    TgTensor *w2 = test_tensor("w2", 2, (int64_t[]){dim, hidden}, &rng, -1, 1);
    TgTensor *out = tg_ffn_swiglu(&tt.tape, x, w1, w3, w2, NULL, NULL);
    for (int64_t r = 0; r < rows; r++) {
        double h[7];
        for (int64_t j = 0; j < hidden; j++) {
            double gate = 0.0, up = 0.0;
            for (int64_t k = 0; k < dim; k++) {
                gate += (double)x->data[r * dim + k] * w1->data[j * dim + k];
                up += (double)x->data[r * dim + k] * w3->data[j * dim + k];
            }
            h[j] = silu_ref(gate) * up;
        }
        for (int64_t o = 0; o < dim; o++) {
            double expected = 0.0;
            for (int64_t j = 0; j < hidden; j++) expected += h[j] * w2->data[o * hidden + j];
            cr_expect_leq(fabs(out->data[r * dim + o] - expected), 1e-5, "row %lld out %lld: %g vs %g",
                          (long long)r, (long long)o, (double)out->data[r * dim + o], expected);
        }
    }
    test_tensor_free(x);
    test_tensor_free(w1);
    test_tensor_free(w3);
    test_tensor_free(w2);
}
