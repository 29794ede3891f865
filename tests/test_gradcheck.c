/* The finite-difference checker: it passes every registered basic op, and it rejects a wrong
 * backward (a 5% scale, a dropped term, and errors confined to one element, one row, one KV-head
 * group, one position or one vocabulary column of a real op), which is what makes the other
 * checks mean anything. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/gradcheck.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"
#include "testutil.h"

static TestTape tt;
static void setup(void) { test_tape_init(&tt, 1); }
static void teardown(void) { test_tape_free(&tt); }
TestSuite(gradcheck, .init = setup, .fini = teardown);

static void free_params(struct criterion_test_params *params) { cr_free(params->params); }

/* Every op and composite of tapegrad/op_list.h, one test each: it has cases, and they all pass.
 * The parameters live in memory Criterion shares with the test processes (cr_malloc), as many as
 * the registry holds. */
ParameterizedTestParameters(gradcheck, every_listed_op) {
    size_t n = (size_t)tg_op_check_name_count();
    int *indices = cr_malloc(n * sizeof *indices);
    for (size_t i = 0; i < n; i++) indices[i] = (int)i;
    return cr_make_param_array(int, indices, n, free_params);
}

ParameterizedTest(int *index, gradcheck, every_listed_op) {
    const char *op = tg_op_check_name(*index);
    cr_assert_gt(tg_op_check_cases_of(op), 0, "%s has no gradcheck case", op);
    int failures = tg_op_checks_run(op, &tt.tape, 2024, 1, tg_op_check_print_failures, stderr);
    cr_expect_eq(failures, 0, "%s: %d gradcheck case(s) failed", op, failures);
}

Test(gradcheck, op_list_names_round_trip) {
    cr_expect_eq(tg_op_check_name_count(), TG_OP_COUNT + 3, "ops and the three composites");
    for (int i = 0; i < TG_OP_COUNT; i++) {
        cr_expect_str_eq(tg_op_check_name(i), tg_op_name((TgOp)i));
        cr_expect_eq(tg_op_from_name(tg_op_name((TgOp)i)), (TgOp)i);
    }
    cr_expect_eq(tg_op_from_name("no_such_op"), TG_OP_COUNT);
}

/* c = a * b + a, with a backward that can be made wrong on purpose */
typedef enum { BACKWARD_RIGHT, BACKWARD_SCALED, BACKWARD_DROPPED_TERM } BackwardKind;

static void muladd_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *a = node->in[0], *b = node->in[1];
    BackwardKind kind = (BackwardKind)node->iparam[0];
    const float *dc = node->out->grad;
    float *ga = tg_tensor_grad(tape, a), *gb = tg_tensor_grad(tape, b);
    for (int64_t i = 0; i < a->numel; i++) {
        float da = dc[i] * b->data[i] + (kind == BACKWARD_DROPPED_TERM ? 0.0f : dc[i]);
        ga[i] += kind == BACKWARD_SCALED ? 1.05f * da : da;
        gb[i] += dc[i] * a->data[i];
    }
}

static TgTensor *fwd_muladd(TgTape *tape, TgTensor *const *in, void *ctx) {
    TgTensor *a = in[0], *b = in[1];
    TgTensor *c = tg_tensor_new(tape->arena, "muladd", a->ndim, a->shape);
    for (int64_t i = 0; i < c->numel; i++) c->data[i] = a->data[i] * b->data[i] + a->data[i];
    TgTapeNode *node = tg_tape_record(tape, "muladd", muladd_backward, c, 2, in);
    if (node) node->iparam[0] = *(BackwardKind *)ctx;
    return c;
}

static bool check_muladd(BackwardKind kind, TgGradcheckResult res[2]) {
    TgRng rng;
    tg_rng_seed(&rng, 5);
    TgTensor *a = test_tensor("a", 2, (int64_t[]){3, 4}, &rng, -1, 1);
    TgTensor *b = test_tensor("b", 2, (int64_t[]){3, 4}, &rng, -1, 1);
    TgGradcheckOptions opts = tg_gradcheck_defaults();
    bool ok = tg_gradcheck(&tt.tape, fwd_muladd, &kind, (TgTensor *[]){a, b}, 2, &opts, res);
    test_tensor_free(a);
    test_tensor_free(b);
    return ok;
}

Test(gradcheck, accepts_right_backward) {
    TgGradcheckResult res[2];
    cr_expect(check_muladd(BACKWARD_RIGHT, res));
    cr_expect_lt(res[0].worst_ratio, 0.1, "a: %g of the bound", res[0].worst_ratio);
    cr_expect_lt(res[1].worst_ratio, 0.1, "b: %g of the bound", res[1].worst_ratio);
}

Test(gradcheck, rejects_backward_scaled_by_5_percent) {
    TgGradcheckResult res[2];
    cr_expect_not(check_muladd(BACKWARD_SCALED, res), "the checker accepted a 5%% scale error");
    cr_expect_not(res[0].pass);
    cr_expect_gt(res[0].rel_err, 0.01);
    cr_expect(res[1].pass, "b's backward is right and must pass");
}

Test(gradcheck, rejects_backward_with_dropped_term) {
    TgGradcheckResult res[2];
    cr_expect_not(check_muladd(BACKWARD_DROPPED_TERM, res), "the checker accepted a dropped term");
    cr_expect_not(res[0].pass);
    cr_expect_gt(res[0].rel_err, 0.1);
}

/* Every case has inputs of at least one dim, and a name of its own within its op (the tests
 * below find cases by it). */
Test(gradcheck, registry_cases_have_inputs_and_distinct_names) {
    cr_assert_gt(tg_op_checks_count(), 0);
    for (int i = 0; i < tg_op_checks_count(); i++) {
        TgOpCheckRef r = tg_op_check_get(i);
        int n_inputs = tg_op_check_input_count(r.check);
        for (int k = 0; k < n_inputs; k++)
            cr_expect_gt(tg_op_check_input_ndim(&r.check->inputs[k]), 0, "%s [%s] input %s", r.op, r.check->variant,
                         r.check->inputs[k].name);
        for (int j = 0; j < i; j++) {
            TgOpCheckRef earlier = tg_op_check_get(j);
            cr_expect(strcmp(earlier.op, r.op) != 0 || strcmp(earlier.check->variant, r.check->variant) != 0,
                      "%s has two cases named [%s]", r.op, r.check->variant);
        }
    }
}

/* The case format's two derivations: inputs end at the first unnamed one, dims at the first 0. */
Test(gradcheck, case_counts_come_from_the_data) {
    const TgOpCheck c = {.variant = "derived", .inputs = {{"x", {2, 3, 4, 5}}, {"g", {7}}, {"s", {0}}}};
    cr_expect_eq(tg_op_check_input_count(&c), 3);
    cr_expect_eq(tg_op_check_input_ndim(&c.inputs[0]), 4);
    cr_expect_eq(tg_op_check_input_ndim(&c.inputs[1]), 1);
    cr_expect_eq(tg_op_check_input_ndim(&c.inputs[2]), 0, "no dims: a scalar");
}

/* A case written wrong aborts naming it: a dim after the 0 that ends the shape. */
Test(gradcheck, a_dim_after_the_end_of_a_shape_aborts, .signal = SIGABRT) {
    const TgOpCheckInput x = {"x", {3, 0, 4}};
    tg_op_check_input_ndim(&x);
}

/* The report writes to the FILE it is given, and nothing without one. */
Test(gradcheck, print_failures_writes_only_where_it_is_told) {
    const TgOpCheck c = {.variant = "4x9", .inputs = {{"x", {4, 9}}, {"beta", {9}}}};
    TgGradcheckResult worst[2] = {{.input = "x", .n_failing = 3, .worst_index = 13, .worst_ratio = 394},
                                  {.input = "beta", .pass = true}};
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    tg_op_check_print_failures(out, "swish", &c, worst);
    fclose(out);
    cr_expect(strstr(text, "gradcheck FAILED: swish [4x9] input x: 3 elements over the bound; worst at 13") != NULL,
              "%s", text);
    cr_expect_null(strstr(text, "beta"), "a passing input was reported: %s", text);
    free(text);
    tg_op_check_print_failures(NULL, "swish", &c, worst);   /* no FILE: nothing, and no crash */
}

/* ---- errors planted in real ops' backwards --------------------------------------------------
 * The op under test runs as registered; its backward is wrapped so that, after the real one,
 * chosen elements of one input's gradient are moved by half a percent of that gradient's
 * largest element. That is below the tensor-wide 1% the checker once used (asserted below), so
 * only the per-element bound can see it. */

typedef enum { PLANT_LAST_ROW, PLANT_LAST_KV_GROUP, PLANT_LAST_POSITION, PLANT_LAST_COLUMN, PLANT_SMALLEST } PlantWhere;

typedef struct {
    const TgOpCheck *check;
    int input;          /* which input's gradient is made wrong */
    PlantWhere where;
    int64_t kv_heads;   /* for PLANT_LAST_KV_GROUP */
    int64_t planted;    /* elements moved (set by the wrapper) */
} Plant;

static Plant *active_plant;
static TgTensor *planted_input;
static TgBackwardFn real_backward;

/* Is element i of a tensor shaped like t in the planted set? */
static bool planted_at(const Plant *p, const TgTensor *t, int64_t i, int64_t smallest) {
    int64_t last = t->shape[t->ndim - 1];
    switch (p->where) {
    case PLANT_LAST_ROW: return i / last == t->shape[0] - 1;          /* (rows, cols): the last row */
    case PLANT_LAST_COLUMN: return i % last == last - 1;              /* (..., V): the last column */
    case PLANT_LAST_KV_GROUP: {                                       /* (B, T, KVH*hd): last head */
        int64_t hd = last / p->kv_heads;
        return (i % last) / hd == p->kv_heads - 1;
    }
    case PLANT_LAST_POSITION: return (i / last) % t->shape[1] == t->shape[1] - 1; /* (B, T, D) */
    case PLANT_SMALLEST: return i == smallest;
    }
    return false;
}

static void planted_backward(TgTape *tape, TgTapeNode *node) {
    real_backward(tape, node);
    TgTensor *t = planted_input;
    float *g = t->grad;
    float largest = 0;
    int64_t smallest = 0;
    for (int64_t i = 0; i < t->numel; i++) {
        largest = fmaxf(largest, fabsf(g[i]));
        if (fabsf(g[i]) < fabsf(g[smallest])) smallest = i;
    }
    active_plant->planted = 0;
    for (int64_t i = 0; i < t->numel; i++)
        if (planted_at(active_plant, t, i, smallest)) {
            g[i] += 0.005f * largest;
            active_plant->planted++;
        }
}

/* Runs the registered forward, then wraps the backward of the first node reading the input. */
static TgTensor *fwd_planted(TgTape *tape, TgTensor *const *in, void *ctx) {
    Plant *p = ctx;
    size_t first = tape->n_nodes;
    TgTensor *out = p->check->forward(tape, in, p->check->ctx);
    for (size_t n = first; n < tape->n_nodes; n++) {
        TgTapeNode *node = &tape->nodes[n];
        for (int k = 0; k < node->n_in; k++)
            if (node->in[k] == in[p->input] && node->backward != planted_backward) {
                real_backward = node->backward;
                node->backward = planted_backward;
                planted_input = in[p->input];
                active_plant = p;
                return out;
            }
    }
    return out;
}

static const TgOpCheck *find_case(const char *op, const char *variant) {
    for (int i = 0; i < tg_op_checks_count(); i++) {
        TgOpCheckRef r = tg_op_check_get(i);
        if (strcmp(r.op, op) == 0 && strcmp(r.check->variant, variant) == 0) return r.check;
    }
    cr_assert_fail("no gradcheck case %s [%s]", op, variant);
    return NULL;
}

/* Attention splits its (batch, head) units over the pool's threads whatever their size, and
 * cross-entropy and embedding their rows and columns: cases whose units split unevenly over two
 * threads (3 or 5 of them), once more on two. */
Test(gradcheck, uneven_thread_splits_pass_on_two_threads) {
    const struct {
        const char *op, *variant;
    } uneven[] = {
        {"attention", "B1 H3 KV3 hd6 Tq3 Tk17"}, {"attention", "B3 H4 KV1 hd9 Tq1 Tk7"},
        {"cross_entropy", "5x17 ignore -1"},      {"embedding", "V3 D5 one id 4 times"},
    };
    TestTape two;
    test_tape_init(&two, 2);
    for (size_t i = 0; i < sizeof uneven / sizeof uneven[0]; i++) {
        TgOpCheckList one = {find_case(uneven[i].op, uneven[i].variant), 1};
        int failures = tg_op_check_list_run(uneven[i].op, &one, &two.tape, 2024, 1, tg_op_check_print_failures, stderr);
        cr_expect_eq(failures, 0, "%s [%s] failed on 2 threads", uneven[i].op, uneven[i].variant);
    }
    test_tape_free(&two);
}

static void expect_planted_error_caught(Plant *p) {
    const TgOpCheck *c = p->check;
    TgRng rng;
    tg_rng_seed(&rng, 99);
    TgTensor *inputs[TG_OP_CHECK_MAX_INPUTS];
    int n_inputs = tg_op_check_input_count(c);
    for (int k = 0; k < n_inputs; k++) {
        float lo = c->lo, hi = c->hi;
        if (lo == 0.0f && hi == 0.0f) lo = -1.0f, hi = 1.0f;
        inputs[k] = test_tensor(c->inputs[k].name, tg_op_check_input_ndim(&c->inputs[k]), c->inputs[k].shape, &rng,
                                lo, hi);
    }
    const char *planted_name = c->inputs[p->input].name;
    TgGradcheckResult res[TG_OP_CHECK_MAX_INPUTS];
    real_backward = NULL;
    bool ok = tg_gradcheck(&tt.tape, fwd_planted, p, inputs, n_inputs, NULL, res);
    cr_assert_not_null(real_backward, "%s: no node read input %s", c->variant, planted_name);
    cr_expect_gt(p->planted, 0, "%s: nothing was planted", c->variant);
    cr_expect_not(ok, "[%s]: an error in %lld elements of d%s was accepted", c->variant,
                  (long long)p->planted, planted_name);
    cr_expect_not(res[p->input].pass);
    /* the tensor-wide figure alone would have let it through */
    cr_expect_lt(res[p->input].rel_err, 1e-2, "%s: tensor-wide error %g", c->variant, res[p->input].rel_err);
    for (int k = 0; k < n_inputs; k++)
        if (k != p->input)
            cr_expect(res[k].pass, "%s: input %s is right and must pass", c->variant, c->inputs[k].name);
    for (int k = 0; k < n_inputs; k++) test_tensor_free(inputs[k]);
}

Test(gradcheck, rejects_error_in_last_row_of_linear_weight_gradient) {
    Plant p = {.check = find_case("linear", "3x5x7"), .input = 1, .where = PLANT_LAST_ROW};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 5);
}

/* LoRA's adapter gradients: an error in the last row of dA (one rank's direction), and in the
 * last row of dB (one output), each caught while the other inputs pass */
Test(gradcheck, rejects_error_in_last_row_of_lora_a_gradient) {
    Plant p = {.check = find_case("lora_linear", "m3 n7 k5 r2"), .input = 2, .where = PLANT_LAST_ROW};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 5);
}

Test(gradcheck, rejects_error_in_last_row_of_lora_b_gradient) {
    Plant p = {.check = find_case("lora_linear", "m13 n17 k9 r4"), .input = 3, .where = PLANT_LAST_ROW};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 4);
}

/* LoRA's trainable token rows: an error in the last replaced row's gradient, and in the last row
 * of the table's (one the rows leave alone), each caught while the other input passes */
Test(gradcheck, rejects_error_in_last_row_of_replaced_rows_gradient) {
    Plant p = {.check = find_case("rows_replaced", "V7 D5 K3 first and last"), .input = 1, .where = PLANT_LAST_ROW};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 5);
}

Test(gradcheck, rejects_error_in_last_row_of_a_table_with_rows_replaced) {
    Plant p = {.check = find_case("rows_replaced", "V4 D3 K1"), .input = 0, .where = PLANT_LAST_ROW};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 3);
}

Test(gradcheck, rejects_error_in_one_kv_head_group_of_attention_dk) {
    Plant p = {.check = find_case("attention", "GQA B2 T7 H4 KV2 hd4"), .input = 1,
               .where = PLANT_LAST_KV_GROUP, .kv_heads = 2};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 2 * 7 * 4);
}

/* the same on a grid case: GQA 8/2 with 14 keys cached, dV's last KV head over all 17 keys */
Test(gradcheck, rejects_error_in_one_kv_head_group_behind_a_kv_cache) {
    Plant p = {.check = find_case("attention", "B1 H8 KV2 hd3 Tq3 Tk17"), .input = 2,
               .where = PLANT_LAST_KV_GROUP, .kv_heads = 2};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 17 * 3);
}

Test(gradcheck, rejects_error_at_one_position_after_rope_offset) {
    Plant p = {.check = find_case("rope", "B2 T7 H2 hd8 pos5 th10"), .input = 0, .where = PLANT_LAST_POSITION};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 2 * 16);
}

/* DPO's two ops: an error in one row of a sequence's dlogits, and in one sequence's
 * d(log-probability) alone (the smallest: the pairs' gradients differ as their margins do) */
Test(gradcheck, rejects_error_in_one_row_of_sequence_logprob) {
    Plant p = {.check = find_case("sequence_logprob", "B4 T7 V33"), .input = 0, .where = PLANT_LAST_ROW};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 33);
}

Test(gradcheck, rejects_error_in_one_logprob_of_dpo_loss) {
    Plant p = {.check = find_case("dpo_loss", "P3 beta 2.5"), .input = 0, .where = PLANT_SMALLEST};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 1);
}

Test(gradcheck, rejects_error_in_last_vocabulary_column_of_cross_entropy) {
    Plant p = {.check = find_case("cross_entropy", "6x11, 2 ignored"), .input = 0, .where = PLANT_LAST_COLUMN};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 6);
}

/* QK-norm's rmsnorm per head: an error in one head's dx, and in one element of the gain the heads
 * share (its gradient a sum over heads and positions), each caught while the other input passes */
Test(gradcheck, rejects_error_in_one_head_of_a_per_head_rmsnorm) {
    Plant p = {.check = find_case("rmsnorm", "per head B2 T3 H4 hd8"),
               .input = 0,
               .where = PLANT_LAST_KV_GROUP,
               .kv_heads = 4};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 2 * 3 * 8);
}

Test(gradcheck, rejects_error_in_one_element_of_a_shared_head_gain) {
    Plant p = {.check = find_case("rmsnorm", "per head B1 T5 H2 hd17"), .input = 1, .where = PLANT_SMALLEST};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 1);
}

Test(gradcheck, rejects_error_in_a_single_element) {
    Plant p = {.check = find_case("rmsnorm", "3x7"), .input = 0, .where = PLANT_SMALLEST};
    expect_planted_error_caught(&p);
    cr_expect_eq(p.planted, 1);
}
