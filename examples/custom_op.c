/* A new op written outside tapegrad, registered the way tapegrad's own ops are: Swish with a
 * learnable slope per channel,
 *
 *     y = x * sigmoid(beta * x)        x (..., d), beta (d) -> y (..., d)
 *
 * with its forward (recorded on the tape under its name), its backward beside it, and its
 * finite-difference check cases run by tg_op_check_list_run. Then it trains: beta, started at 1,
 * is fitted to data made with beta = 1.7, 0.4, 2.5.
 *
 *   ./custom_op                   the check passes, beta is learnt, exit 0
 *   ./custom_op --break-backward  the backward drops a term of dx, as a slip would: the check
 *                                 names the input and element it disagrees on, exit 1
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <tapegrad/tapegrad.h>

static bool break_backward; /* --break-backward: the bug the check must catch */

static float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

/* With s = sigmoid(beta x) and s' = s (1 - s):
 *   dy/dx    = s + beta x s'
 *   dy/dbeta = x^2 s'
 * so dx += dy (s + beta x s'), and dbeta_j += sum over rows of dy x^2 s'. */
static void swish_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *x = node->in[0], *beta = node->in[1], *y = node->out;
    const int64_t d = beta->numel, rows = x->numel / d;
    float *dx = tg_tensor_wants_grad(x) ? tg_tensor_grad(tape, x) : NULL;
    float *dbeta = tg_tensor_wants_grad(beta) ? tg_tensor_grad(tape, beta) : NULL;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d; j++) {
            int64_t i = r * d + j;
            float xv = x->data[i], b = beta->data[j], s = sigmoid(b * xv), slope = s * (1.0f - s);
            if (dx) dx[i] += y->grad[i] * (break_backward ? s : s + b * xv * slope);
            if (dbeta) dbeta[j] += y->grad[i] * xv * xv * slope;
        }
}

/* The forward: computes y into the tape's arena, then records itself. tg_tape_record keeps a node
 * only when the tape records and an input wants a gradient; the backward runs from it. */
static TgTensor *op_swish(TgTape *tape, TgTensor *x, TgTensor *beta) {
    TG_CHECK(beta->ndim == 1 && x->ndim >= 1 && tg_tensor_dim(x, -1) == beta->shape[0],
             "swish: x '%s' and beta '%s' disagree on the channel count", x->name, beta->name);
    TgTensor *y = tg_tensor_new(tape->arena, "swish", x->ndim, x->shape);
    const int64_t d = beta->numel;
    for (int64_t i = 0; i < x->numel; i++) y->data[i] = x->data[i] * sigmoid(beta->data[i % d] * x->data[i]);
    tg_tape_record(tape, "swish", swish_backward, y, 2, (TgTensor *[]){x, beta});
    return y;
}

/* ---- the finite-difference cases: a forward per case and the shapes of its inputs ---- */

static TgTensor *fwd_swish(TgTape *tape, TgTensor *const *in, void *ctx) {
    (void)ctx; /* a case's parameters; swish has none */
    return op_swish(tape, in[0], in[1]);
}

/* An input is {name, shape}, its dims those before the first 0; a field left out is zero: no ctx
 * (swish has no parameters), the checker's rtol. */
static const TgOpCheck swish_cases[] = {
    {.variant = "4x9", .inputs = {{"x", {4, 9}}, {"beta", {9}}}, .forward = fwd_swish, .lo = -2, .hi = 2},
    {.variant = "2x3x5 (3-d x)", .inputs = {{"x", {2, 3, 5}}, {"beta", {5}}}, .forward = fwd_swish, .lo = -2, .hi = 2},
    {.variant = "7x1", .inputs = {{"x", {7, 1}}, {"beta", {1}}}, .forward = fwd_swish, .lo = -2, .hi = 2},
};
static const TgOpCheckList swish_checks = TG_OP_CHECK_LIST(swish_cases);

/* Fits beta to y = swish(x; true_beta) by mean squared error with AdamW; returns the worst
 * |beta - true_beta| after `steps` steps. */
static float fit_beta(TgEngine *engine, int steps) {
    enum { ROWS = 256, D = 3 };
    const float true_beta[D] = {1.7f, 0.4f, 2.5f};
    TgParamStore ps;
    tg_params_init(&ps);
    TgTensor *beta = tg_params_add(&ps, "beta", 1, TG_SHAPE(D), false, TG_PARAM_INIT_ONES);
    tg_params_finalize(&ps);
    tg_params_init_values(&ps, 1);
    static float x_data[ROWS * D], target_data[ROWS * D];
    TgRng rng;
    tg_rng_seed(&rng, 2);
    tg_rng_fill_uniform(&rng, x_data, ROWS * D, -3.0f, 3.0f);
    for (int i = 0; i < ROWS * D; i++) target_data[i] = x_data[i] * sigmoid(true_beta[i % D] * x_data[i]);
    TgAdamWConfig adamw = tg_adamw_defaults();
    adamw.weight_decay = 0;
    TgTape *tape = &engine->tape;
    for (int step = 1; step <= steps; step++) {
        TgTensor *x = tg_tensor_view(tape->arena, "x", x_data, 2, TG_SHAPE(ROWS, D));
        TgTensor *neg_target = tg_scale(tape, tg_tensor_view(tape->arena, "target", target_data, 2, TG_SHAPE(ROWS, D)), -1.0f);
        TgTensor *err = tg_add(tape, op_swish(tape, x, beta), neg_target);
        TgTensor *loss = tg_mean(tape, tg_mul(tape, err, err));
        tg_tape_backward(tape, loss);
        tg_adamw_step(&ps, &adamw, step, 0.05, engine->pool);
        tg_params_zero_grad(&ps);
        tg_tape_reset(tape);
    }
    float worst = 0;
    for (int j = 0; j < D; j++) {
        printf("  beta[%d] = %.4f (data made with %.1f)\n", j, beta->data[j], true_beta[j]);
        worst = fmaxf(worst, fabsf(beta->data[j] - true_beta[j]));
    }
    tg_params_free(&ps);
    return worst;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--break-backward") == 0) break_backward = true;
        else {
            fprintf(stderr, "usage: %s [--break-backward]\n", argv[0]);
            return 2;
        }
    }
    printf("tapegrad %s; swish: y = x * sigmoid(beta x)%s\n", tg_version(),
           break_backward ? ", with a term of its backward dropped on purpose" : "");
    TgEngine engine;
    tg_engine_open(&engine, 1, 1 << 20);
    /* 3 seeds of every case; each failing input is printed to stderr with its worst element */
    int failing = tg_op_check_list_run("swish", &swish_checks, &engine.tape, 1, 3, tg_op_check_print_failures, stderr);
    if (failing > 0) {
        printf("gradient check: %d of %d cases FAIL: the backward is wrong\n", failing, swish_checks.count);
        tg_engine_close(&engine);
        return 1;
    }
    printf("gradient check: all %d cases pass (3 seeds each)\n", swish_checks.count);
    float worst = fit_beta(&engine, 300);
    tg_engine_close(&engine);
    printf("fit: beta within %.4f of the truth (the bar: 0.02)\n", worst);
    return worst <= 0.02f ? 0 : 1;
}
