/* The finite-difference checker: it passes every registered basic op, and it rejects a wrong
 * backward (a 5% scale, a dropped term), which is what makes the other checks mean anything. */
#include <criterion/criterion.h>
#include <math.h>

#include "lib/gradcheck.h"
#include "ops/checks.h"
#include "ops/ops.h"
#include "testutil.h"

static TestTape tt;
static void setup(void) { test_tape_init(&tt, 1); }
static void teardown(void) { test_tape_free(&tt); }
TestSuite(gradcheck, .init = setup, .fini = teardown);

static void run_family(const char *op) {
    int n = 0;
    for (int i = 0; i < op_checks_count(); i++) n += strcmp(op_check_get(i)->op, op) == 0;
    cr_assert_gt(n, 0, "no gradcheck case registered for %s", op);
    cr_expect_eq(op_checks_run_family(op, &tt.tape, 2024), 0, "%s: a gradcheck case failed", op);
}

Test(gradcheck, linear) { run_family("linear"); }
Test(gradcheck, linear_residual) { run_family("linear_residual"); }
Test(gradcheck, add) { run_family("add"); }
Test(gradcheck, mul) { run_family("mul"); }
Test(gradcheck, scale) { run_family("scale"); }
Test(gradcheck, sum) { run_family("sum"); }
Test(gradcheck, mean) { run_family("mean"); }
Test(gradcheck, composite) { run_family("composite"); }

/* c = a * b + a, with a backward that can be made wrong on purpose */
typedef enum { BACKWARD_RIGHT, BACKWARD_SCALED, BACKWARD_DROPPED_TERM } BackwardKind;

static void muladd_backward(Tape *tape, TapeNode *node) {
    Tensor *a = node->in[0], *b = node->in[1];
    BackwardKind kind = (BackwardKind)node->iparam[0];
    const float *dc = node->out->grad;
    float *ga = tensor_grad(tape, a), *gb = tensor_grad(tape, b);
    for (int64_t i = 0; i < a->numel; i++) {
        float da = dc[i] * b->data[i] + (kind == BACKWARD_DROPPED_TERM ? 0.0f : dc[i]);
        ga[i] += kind == BACKWARD_SCALED ? 1.05f * da : da;
        gb[i] += dc[i] * a->data[i];
    }
}

static Tensor *fwd_muladd(Tape *tape, Tensor *const *in, void *ctx) {
    Tensor *a = in[0], *b = in[1];
    Tensor *c = tensor_new(tape->arena, "muladd", a->ndim, a->shape);
    for (int64_t i = 0; i < c->numel; i++) c->data[i] = a->data[i] * b->data[i] + a->data[i];
    TapeNode *node = tape_record(tape, "muladd", muladd_backward, c, 2, in);
    if (node) node->iparam[0] = *(BackwardKind *)ctx;
    return c;
}

static bool check_muladd(BackwardKind kind, GradcheckResult res[2]) {
    Rng rng;
    rng_seed(&rng, 5);
    Tensor *a = test_tensor("a", 2, (int64_t[]){3, 4}, &rng, -1, 1);
    Tensor *b = test_tensor("b", 2, (int64_t[]){3, 4}, &rng, -1, 1);
    GradcheckOptions opts = gradcheck_defaults();
    bool ok = gradcheck(&tt.tape, fwd_muladd, &kind, (Tensor *[]){a, b}, 2, &opts, res);
    test_tensor_free(a);
    test_tensor_free(b);
    return ok;
}

Test(gradcheck, accepts_right_backward) {
    GradcheckResult res[2];
    cr_expect(check_muladd(BACKWARD_RIGHT, res));
    cr_expect_lt(res[0].rel_err, 1e-3, "a: %g", res[0].rel_err);
    cr_expect_lt(res[1].rel_err, 1e-3, "b: %g", res[1].rel_err);
}

Test(gradcheck, rejects_backward_scaled_by_5_percent) {
    GradcheckResult res[2];
    cr_expect_not(check_muladd(BACKWARD_SCALED, res), "the checker accepted a 5%% scale error");
    cr_expect_not(res[0].pass);
    cr_expect_gt(res[0].rel_err, 0.01);
    cr_expect(res[1].pass, "b's backward is right and must pass");
}

Test(gradcheck, rejects_backward_with_dropped_term) {
    GradcheckResult res[2];
    cr_expect_not(check_muladd(BACKWARD_DROPPED_TERM, res), "the checker accepted a dropped term");
    cr_expect_not(res[0].pass);
    cr_expect_gt(res[0].rel_err, 0.1);
}

Test(gradcheck, registry_names_every_input) {
    cr_assert_gt(op_checks_count(), 0);
    for (int i = 0; i < op_checks_count(); i++) {
        const OpCheck *c = op_check_get(i);
        cr_expect(c->n_inputs > 0 && c->n_inputs <= OP_CHECK_MAX_INPUTS, "%s", c->op);
        for (int k = 0; k < c->n_inputs; k++) cr_expect_not_null(c->names[k], "%s input %d", c->op, k);
    }
}
