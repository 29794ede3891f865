/* Training in bf16 (--precision bf16, tg_tape_set_precision):
 *   - the whole model's gradient in bf16 against the same step in fp32, tensor by tensor, on a
 *     ragged shape split over 2 threads: within a stated relative error, and not equal (the
 *     products did round);
 *   - the learning check: the same run in bf16 and fp32, its val loss within a stated margin of
 *     fp32's, both well below ln(vocab);
 *   - a bf16 run stopped and resumed is bitwise the run that never stopped, and resumes in bf16;
 *   - run.txt records the precision; a resume asked in another precision, and an unknown one,
 *     are refused with one line; a bf16 run that diverges stops naming the step, as fp32 does;
 *   - in fp32 the bf16 paths give avx512's bits (they run its fp32 code);
 *   - bench --precision bf16 names the bf16 ceiling it reports MFU against; compare-ffn keeps an
 *     experiment in one precision. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptutil.h"
#include "datagen.h"
#include "tapegrad/engine.h"
#include "tapegrad/model.h"
#include "lib/cpu.h"
#include "lib/kernels.h"
#include "testutil.h"

CKPT_SCRATCH_FIXTURE

/* max |g_bf16 - g_fp32| / max |g_fp32| per tensor: the products' operands keep 8 significant bits
 * (a relative rounding of at most 2^-9 = 2e-3 each), which the forward carries into every later
 * activation and the backward into every gradient; measured up to ~1e-2 on this shape (the norm
 * gains, whose gradients sum products over every row), so 5e-2 is the bound. Every weight matrix
 * must differ by more than 1e-5: its gradient went through a bf16 product. */
static const double GRAD_REL_TOL = 5e-2, GRAD_REL_MIN = 1e-5;

/* The ragged model of the tests below, its weights and a batch of tokens */
enum { GRAD_B = 5, GRAD_T = 23, GRAD_VOCAB = 131 };
static void ragged_model(TgModel *model, int32_t *tokens, int32_t *targets) {
    TgModelConfig cfg;
    cr_assert_eq(tg_model_preset("tiny", &cfg), TG_OK);
    cfg.dim = 96, cfg.n_layers = 2, cfg.n_heads = 6, cfg.n_kv_heads = 2, cfg.hidden = 256, cfg.vocab = GRAD_VOCAB;
    cfg.seq_len = GRAD_T;
    tg_model_build(model, &cfg);
    tg_model_init_weights(model, 3);
    TgRng rng;
    tg_rng_seed(&rng, 9);
    for (int64_t i = 0; i < GRAD_B * GRAD_T; i++)
        tokens[i] = (int32_t)tg_rng_below(&rng, GRAD_VOCAB), targets[i] = (int32_t)tg_rng_below(&rng, GRAD_VOCAB);
}

/* One step's loss and gradients (malloc'd copy) in `precision` */
static float *model_gradients(TgModel *model, TgEngine *engine, const int32_t *tokens, const int32_t *targets,
                              TgPrecision precision, double *loss_out) {
    tg_tape_set_precision(&engine->tape, precision);
    tg_params_zero_grad(&model->params);
    TgTensor *loss = tg_model_loss(
        model, &engine->tape, &(TgBatch){.tokens = tokens, .targets = targets, .batch = GRAD_B, .seq = GRAD_T}, NULL);
    *loss_out = loss->data[0];
    tg_tape_backward(&engine->tape, loss);
    tg_tape_reset(&engine->tape);
    float *grads = malloc(model->params.total * sizeof(float));
    memcpy(grads, model->params.grad, model->params.total * sizeof(float));
    return grads;
}

/* The bf16 paths run avx512's fp32 code: in fp32 a step gives its bits exactly, so a run started
 * on the avx512 path resumes bitwise on a CPU (or a build) that picks avx512bf16 or amx. */
Test(bf16_train, fp32_on_the_bf16_paths_is_bitwise_avx512_s) {
    if (!tg_isa_supported(TG_ISA_AVX512BF16)) cr_skip_test("no bf16 path on %s", tg_cpu_name());
    TgModel model;
    int32_t tokens[GRAD_B * GRAD_T], targets[GRAD_B * GRAD_T];
    ragged_model(&model, tokens, targets);
    TgEngine engine;
    tg_engine_open(&engine, 2, 0);
    double loss[3];
    float *grads[3];
    const TgIsa paths[3] = {TG_ISA_AVX512, TG_ISA_AVX512BF16, TG_ISA_AMX};
    int n = tg_isa_supported(TG_ISA_AMX) ? 3 : 2;
    for (int p = 0; p < n; p++) {
        cr_assert_eq(tg_isa_set(paths[p]), TG_OK);
        grads[p] = model_gradients(&model, &engine, tokens, targets, TG_PRECISION_FP32, &loss[p]);
    }
    cr_assert_eq(tg_isa_set(tg_isa_best()), TG_OK);
    for (int p = 1; p < n; p++) {
        cr_expect_eq(loss[p], loss[0], "%s loss %.9g, avx512 %.9g", tg_isa_name(paths[p]), loss[p], loss[0]);
        cr_expect(memcmp(grads[p], grads[0], model.params.total * sizeof(float)) == 0, "%s gradients differ from avx512's",
                  tg_isa_name(paths[p]));
    }
    for (int p = 0; p < n; p++) free(grads[p]);
    tg_engine_close(&engine);
    tg_model_free(&model);
}

Test(bf16_train, model_gradient_in_bf16_is_fp32_s_within_the_bound) {
    TgModel model;
    int32_t tokens[GRAD_B * GRAD_T], targets[GRAD_B * GRAD_T];
    ragged_model(&model, tokens, targets);
    TgEngine engine;
    tg_engine_open(&engine, 2, 0);
    float *grads[2];
    double losses[2];
    for (int p = 0; p < 2; p++)
        grads[p] = model_gradients(&model, &engine, tokens, targets, p ? TG_PRECISION_BF16 : TG_PRECISION_FP32, &losses[p]);
    cr_expect_leq(fabs(losses[1] - losses[0]), 1e-2 * losses[0], "loss fp32 %.6f, bf16 %.6f", losses[0], losses[1]);
    cr_expect_neq(losses[1], losses[0], "the bf16 loss is the fp32 one: were the products rounded?");
    double worst = 0;
    for (int t = 0; t < model.params.count; t++) {
        const TgTensor *w = model.params.tensors[t];
        size_t off = model.params.offsets[t];
        double diff = 0, scale = 0;
        for (int64_t i = 0; i < w->numel; i++) {
            diff = fmax(diff, fabs((double)grads[1][off + i] - grads[0][off + i]));
            scale = fmax(scale, fabs((double)grads[0][off + i]));
        }
        double rel = diff / scale;
        worst = fmax(worst, rel);
        cr_expect_leq(rel, GRAD_REL_TOL, "%s: bf16 gradient off fp32's by %.3g (relative)", w->name, rel);
        if (w->ndim == 2) cr_expect_geq(rel, GRAD_REL_MIN, "%s: bf16 gradient equals fp32's (%.3g)", w->name, rel);
        cr_log_info("%-42s %.3g", w->name, rel);
    }
    cr_log_info("worst relative error of a bf16 gradient: %.3g", worst);
    free(grads[0]), free(grads[1]);
    tg_engine_close(&engine);
    tg_model_free(&model);
}

/* The number after `key` in the run's last line ("done at step N: val loss X (ln vocab Y) ...") */
static double final_figure(const char *out, const char *key) {
    const char *done = strstr(out, "done at step ");
    cr_assert_not_null(done, "no final line in:\n%s", out);
    const char *at = strstr(done, key);
    cr_assert_not_null(at, "no '%s' in:\n%s", key, done);
    return strtod(at + strlen(key), NULL);
}

/* The learning check: 200 steps of the tiny preset on the test corpus in each precision. bf16's
 * val loss must be within 3% of fp32's (measured on Zen 5: 0.02% to 1.2% at 80 to 400 steps on
 * two corpora; either may be the lower) and both must have learned: 1.0 below ln(vocab), where
 * the first steps sit. */
Test(bf16_train, learns_as_fp32_does, .init = setup, .fini = teardown, .timeout = 120) {
    double val[2], ln_vocab = 0;
    for (int p = 0; p < 2; p++) {
        char *run = datagen_path(dir, p ? "bf16" : "fp32"), *out = NULL;
        int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 200 --eval-every 0 --ckpt-every 0 --precision %s --out %s",
                          corpus, p ? "bf16" : "fp32", run);
        cr_assert_eq(rc, 0, "%s", out);
        cr_assert(strstr(out, p ? "precision bf16" : "precision fp32"), "%s", out);
        val[p] = final_figure(out, "val loss ");
        ln_vocab = final_figure(out, "(ln vocab ");
        free(out), free(run);
    }
    cr_log_info("val loss after 200 steps: fp32 %.4f, bf16 %.4f (ln vocab %.3f)", val[0], val[1], ln_vocab);
    cr_expect_leq(fabs(val[1] - val[0]), 0.03 * val[0], "val loss fp32 %.4f, bf16 %.4f", val[0], val[1]);
    cr_expect_lt(val[0], ln_vocab - 1.0, "fp32 did not learn: %.4f", val[0]);
    cr_expect_lt(val[1], ln_vocab - 1.0, "bf16 did not learn: %.4f", val[1]);
}

/* The run folder's run.txt records bf16 */
static void expect_recorded_bf16(const char *run) {
    char *run_txt = datagen_path(run, "run.txt");
    char *identity = ckpt_read_text(run_txt);
    cr_assert(strstr(identity, "--precision bf16\n"), "%s does not record the precision:\n%s", run_txt, identity);
    free(identity), free(run_txt);
}

Test(bf16_train, stopped_and_resumed_is_bitwise_the_straight_run, .init = setup, .fini = teardown, .timeout = 120) {
    char *straight = datagen_path(dir, "straight"), *split = datagen_path(dir, "split"), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 16 --eval-every 8 --ckpt-every 0 --precision bf16 --out %s",
                      corpus, straight);
    cr_assert_eq(rc, 0, "straight run failed:\n%s", out);
    free(out);
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 16 --eval-every 8 --ckpt-every 0 --precision bf16 --stop-after 8 --out %s",
                  corpus, split);
    cr_assert_eq(rc, 0, "run stopped at 8 failed:\n%s", out);
    free(out);
    expect_recorded_bf16(split);
    /* --resume alone continues in bf16 */
    rc = ckpt_cli(&out, "train --resume %s", split);
    cr_assert_eq(rc, 0, "resume failed:\n%s", out);
    cr_assert(strstr(out, "precision bf16"), "%s", out);
    free(out);
    ckpt_expect_same_metrics(straight, split, 8, 8);
    ckpt_expect_same_checkpoints(straight, split, 16);
    /* another precision on resume, and one tapegrad has not, are refused in one line */
    rc = ckpt_cli(&out, "train --resume %s --steps 20 --precision fp32", split);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "--precision fp32 differs from the resumed run's bf16"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --precision fp16", corpus);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "--precision must be one of fp32|bf16, got 'fp16'"), "%s", out);
    free(out);
    free(straight), free(split);
}

/* A path without bf16 instructions computes the same numbers through the fp32 kernel, after one
 * line saying it is slower; its run equals, to the bit, no other path's, so only the line and
 * the success are checked here (the numbers are tests/test_bf16.c's). */
Test(bf16_train, a_path_without_bf16_instructions_says_it_is_slower, .init = setup, .fini = teardown, .timeout = 60) {
    char *run = datagen_path(dir, "emulated"), *out = NULL;
    int rc = ckpt_cli_launched(&out, "env TAPEGRAD_ISA=generic",
                               "train " CKPT_TEST_FLAGS " --data %s --steps 2 --ckpt-every 0 --precision bf16 --out %s",
                               corpus, run);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "bf16 on the generic path, which has no bf16 instructions"), "%s", out);
    free(out), free(run);
}

/* lr 1e30: the first update makes the weights overflow, the next loss is NaN */
Test(bf16_train, a_diverging_bf16_run_stops_naming_the_step, .init = setup, .fini = teardown, .timeout = 60) {
    char *run = datagen_path(dir, "div"), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 20 --warmup 0 --clip 0 --lr 1e30 --precision bf16 --out %s",
                      corpus, run);
    cr_expect_neq(rc, 0, "%s", out);
    cr_expect(strstr(out, "tapegrad train: step ") && (strstr(out, "the loss is") || strstr(out, "the gradient of '")),
              "%s", out);
    free(out), free(run);
}

/* bench --precision bf16 names its precision and the ceiling MFU is taken against: the path's
 * bf16 instruction where it has one; the ceiling is a positive rate */
Test(bf16_train, bench_reports_the_bf16_ceiling) {
    char *out = NULL;
    int rc = ckpt_cli(&out, "bench --preset tiny --batch 2 --seq 8 --steps 1 --warmup 0 --threads 1 --precision bf16 --json");
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "\"precision\":\"bf16\""), "%s", out);
    const char *peak = tg_isa_supported(TG_ISA_AMX)          ? "\"peak\":\"bf16 AMX tdpbf16ps\""
                       : tg_isa_supported(TG_ISA_AVX512BF16) ? "\"peak\":\"bf16 vdpbf16ps\""
                                                             : "\"peak\":\"fp32 multiply-add\"";
    cr_expect(strstr(out, peak), "no %s in %s", peak, out);
    const char *at = strstr(out, "\"peak_gflops\":");
    cr_assert_not_null(at, "%s", out);
    double gflops = strtod(at + strlen("\"peak_gflops\":"), NULL);
    cr_expect(gflops > 0 && isfinite(gflops), "peak %g GFLOP/s", gflops);
    cr_expect(strstr(out, "\"gemm_plan\":{"), "%s", out);
    free(out);
}

/* compare-ffn trains every run in its --precision, and --reuse does not set a run of the other
 * precision beside them */
Test(bf16_train, compare_ffn_keeps_its_runs_in_one_precision, .init = setup, .fini = teardown, .timeout = 60) {
    char *exp = datagen_path(dir, "cmp"), *out = NULL;
    const char *flags = "compare-ffn --preset tiny --batch 4 --eval-batches 2 --threads 1 --steps 3 --lrs 1e-3 --seeds 1";
    int rc = ckpt_cli(&out, "%s --data %s --out %s --precision bf16", flags, corpus, exp);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *run = datagen_path(exp, "lr0.001-swiglu-s1337");
    expect_recorded_bf16(run);
    free(run);
    rc = ckpt_cli(&out, "%s --data %s --out %s --reuse", flags, corpus, exp);
    cr_expect_neq(rc, 0, "%s", out);
    cr_expect(strstr(out, "holds a run in bf16; this experiment trains in fp32"), "%s", out);
    free(out), free(exp);
}
