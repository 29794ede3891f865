/* Whole-model parity with PyTorch: tests/parity/make_reference.py builds the same model in
 * PyTorch (bench/torch_model.py, the model bench/torch_reference.py benchmarks) and runs five training steps the way
 * train/trainer.c does (micro-batches, clipping, AdamW at the scheduled learning rate); tapegrad loads the initial
 * weights through its own safetensors reader, runs the same steps through the trainer's calls, and must reproduce the
 * logits, every step's loss and gradient norm, the first step's gradients, and the parameters
 * and AdamW moments after the last step, tensor by tensor.
 *
 * Two shapes: the reference's defaults (small, sizes mostly multiples of the kernels' blocks)
 * and a ragged one whose sizes are multiples of nothing and whose GEMMs are split over a pool of
 * 2 threads; the ragged one in bf16 against PyTorch's bf16 autocast (BF16_TOLERANCES), and with
 * QK-norm (also in bf16, and on one thread), and as DPO's preference pairs (train/dpo.h); and the
 * default one with a ReLU FFN. The reference's
 * presets are held to the program's. Without torch the test fails, unless TAPEGRAD_SKIP_TORCH=1
 * asks to skip it. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tapegrad/engine.h"
#include "model/safetensors.h"
#include "testutil.h"
#include "tapegrad/model.h"
#include "tapegrad/optim.h"
#include "train/dpo.h"

/* Tolerances on err = max|c - ref| / max|ref| per tensor, about 10 times the worst error
 * measured on either shape (the tables are in docs/results.md). float32 rounds to
 * u = 2^-24 = 6e-8 relative; a sum of K terms formed in another order differs by up to K u of
 * the sum of their magnitudes (K = 96..256 here: 0.6e-5..1.5e-5), by about sqrt(K) u when the
 * roundings are independent, which is what both sides show: PyTorch in float32 is as far from
 * PyTorch in float64 as tapegrad is from it. AdamW then divides by sqrt(v) + eps, which magnifies
 * a gradient's rounding where |g| is small, and five steps compound it: the parameters and
 * moments get wider bounds, still 7 times below the 3.6e-4 of the largest weight that the five
 * steps of weight decay take off (sum of lr_s * 0.1). */
enum { PARITY_STEPS_MAX = 64 };
static const double LOSS_TOL = 2e-6;      /* each step's loss and gradient norm before clipping */
static const double LOGITS_TOL = 3e-6;
static const double GRAD_TOL = 1e-5;      /* the first step's gradients, before clipping */
static const double PARAM_TOL = 5e-5;     /* the weights after the last step */
static const double MOMENT_TOL = 2e-5;    /* AdamW m and v after the last step */

/* AdamW's eps at 1e-6, not the trainer's 1e-8: the first update of an element is
 * lr g / (|g| + eps), whose slope lr eps / (|g| + eps)^2 peaks at lr / (4 eps) where |g| = eps;
 * at eps 1e-8 a 1e-9 rounding of such a gradient moves its weight by up to 2.5e-5, 3e-4 of the
 * tensor's scale, as much as the 5 steps of weight decay (3.6e-4): a dropped decay would pass.
 * At 1e-6 that worst case is 100 times smaller. The code path is the same for any eps. */
#define PARITY_COMMON_ARGS "--eps 1e-6"

/* What a case's comparison allows, per quantity (relative errors as above). */
typedef struct {
    double loss, logits, grad, param, moment;
} ParityTolerances;
static const ParityTolerances FP32_TOLERANCES = {LOSS_TOL, LOGITS_TOL, GRAD_TOL, PARAM_TOL, MOMENT_TOL};

/* bf16 against PyTorch's bf16 autocast. The two round different things: tapegrad rounds the
 * operands of each linear layer's three products and keeps every activation in fp32; autocast
 * runs every matrix product (attention's too) on bf16 operands and hands its bf16 results to
 * the ops after it, which then compute in bf16. Each side is a bf16 rounding (2^-9 = 2e-3
 * relative) away from fp32 per product, so they differ by about that, carried through the
 * layers; about 3 times the worst error measured on the ragged shape (docs/results.md). */
static const ParityTolerances BF16_TOLERANCES = {1.5e-3, 1e-2, 3e-2, 6e-2, 3e-2};
/* With QK-norm, autocast also normalises q and k in bf16, from its bf16 products: the gradients
 * of the q and k projections (worst 1.4e-2 measured) move by about one more rounding, and v, a
 * running mean of squared gradients, moves by up to twice their relative error, so its bound is
 * the gradients' doubled. */
static const ParityTolerances BF16_QK_NORM_TOLERANCES = {1.5e-3, 1e-2, 3e-2, 6e-2, 6e-2};

/* DPO's loss is a function of margins, each a difference of two sums of a reply's token
 * log-probabilities (|sum| up to ~100 here, rounded at about 1e-7 of it on either side), so the
 * loss and the gradient norm carry a relative error a few times the cross-entropy's (2.4e-6 the
 * worst measured, on step 3 of 5); the gradients, weights and moments keep their bounds. */
static const ParityTolerances DPO_TOLERANCES = {1e-5, LOGITS_TOL, GRAD_TOL, PARAM_TOL, MOMENT_TOL};

typedef struct {
    const char *name; /* in messages */
    const char *args; /* make_reference.py's options */
    int threads;      /* the engine's pool, as tapegrad train --threads */
    TgPrecision precision;
    const ParityTolerances *tol;
} ParityCase;

static char tmpdir[256];
static char ref_path[512];
static TgStFile *ref;

static int64_t meta_int(const char *key) {
    const char *v = tg_st_metadata(ref, key);
    cr_assert_not_null(v, "reference metadata lacks '%s'", key);
    return strtoll(v, NULL, 10);
}

static double meta_double(const char *key) {
    const char *v = tg_st_metadata(ref, key);
    cr_assert_not_null(v, "reference metadata lacks '%s'", key);
    return strtod(v, NULL);
}

static void cleanup(void) {
    if (ref) tg_st_close(ref);
    ref = NULL;
    if (ref_path[0]) unlink(ref_path);
    if (tmpdir[0]) rmdir(tmpdir);
    ref_path[0] = tmpdir[0] = '\0';
}

static void make_reference(const ParityCase *pc) {
    require_torch("PyTorch parity", NULL);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tapegrad-parity-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(ref_path, sizeof ref_path, "%s/ref.safetensors", tmpdir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 /usr/bin/python3 %s/tests/parity/make_reference.py %s %s >&2",
             TAPEGRAD_SOURCE_DIR, ref_path, pc->args);
    cr_assert_eq(test_run(cmd), 0, "make_reference.py failed: %s", cmd);
    cr_assert_eq(tg_st_open(ref_path, &ref), TG_OK, "%s", tg_error_message());
}

static void build_from_reference(TgModel *m) {
    TgModelConfig c = {
        .dim = meta_int("dim"), .n_layers = meta_int("layers"), .n_heads = meta_int("heads"),
        .n_kv_heads = meta_int("kv_heads"), .hidden = meta_int("hidden"), .vocab = meta_int("vocab"),
        .seq_len = meta_int("seq"), .rope_theta = meta_double("rope_theta"), .norm_eps = meta_double("norm_eps"),
    };
    const char *qk_norm = tg_st_metadata(ref, "qk_norm");
    c.qk_norm = qk_norm && strcmp(qk_norm, "1") == 0;
    const char *ffn = tg_st_metadata(ref, "ffn");
    cr_assert_not_null(ffn, "reference metadata lacks 'ffn'");
    cr_assert_eq(tg_ffn_kind_parse(ffn, &c.ffn), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_model_config_validate(&c), TG_OK, "%s", tg_error_message());
    tg_model_build(m, &c);
    for (int i = 0; i < m->params.count; i++) {
        TgTensor *t = m->params.tensors[i];
        cr_assert_eq(tg_st_expect_shape(ref, t->name, t->ndim, t->shape), TG_OK, "%s", tg_error_message());
        cr_assert_eq(tg_st_read_f32(ref, t->name, t->data, t->numel), TG_OK, "%s", tg_error_message());
    }
}

/* The reference entry `prefix` + `name` with the shape of `like` (malloc'd). */
static float *read_like(const char *prefix, const char *name, const TgTensor *like) {
    char entry[160];
    snprintf(entry, sizeof entry, "%s%s", prefix, name);
    cr_assert_eq(tg_st_expect_shape(ref, entry, like->ndim, like->shape), TG_OK, "%s", tg_error_message());
    float *out = malloc((size_t)like->numel * sizeof(float));
    cr_assert_not_null(out);
    cr_assert_eq(tg_st_read_f32(ref, entry, out, like->numel), TG_OK, "%s", tg_error_message());
    return out;
}

/* max |a - b| / max |b|: the worst difference relative to the reference tensor's own scale (an
 * all-zero reference must be matched exactly). */
static double rel_err(const float *a, const float *b, int64_t n) {
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
        scale = fmax(scale, fabs((double)b[i]));
        if (isnan(a[i]) != isnan(b[i])) return INFINITY;
    }
    return worst / fmax(scale, DBL_MIN);
}

/* rel_err of `a` against the reference entry prefix + t->name */
static double rel_err_entry(const char *prefix, const TgTensor *t, const float *a) {
    float *b = read_like(prefix, t->name, t);
    double err = rel_err(a, b, t->numel);
    free(b);
    return err;
}

/* Per tensor, the worst relative error of each compared quantity. */
typedef struct {
    double grad, param, m, v;
} TensorErrors;

static void run_case(const ParityCase *pc) {
    make_reference(pc);
    TgModel m;
    build_from_reference(&m);
    TgParamStore *ps = &m.params;
    int64_t B = meta_int("batch"), T = meta_int("seq"), V = m.cfg.vocab, accum = meta_int("accum");
    int64_t steps = meta_int("steps"), rows = accum * B * T;
    cr_assert(steps >= 1 && steps <= PARITY_STEPS_MAX && accum >= 1, "steps %lld, accum %lld", (long long)steps,
              (long long)accum);
    int32_t *tokens = malloc((size_t)rows * sizeof(int32_t)), *targets = malloc((size_t)rows * sizeof(int32_t));
    cr_assert_eq(tg_st_read_i32(ref, "tokens", tokens, rows), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_st_read_i32(ref, "targets", targets, rows), TG_OK, "%s", tg_error_message());
    int64_t ignored = 0;
    for (int64_t i = 0; i < rows; i++) ignored += targets[i] == TG_IGNORE_INDEX;
    cr_assert_eq(ignored, meta_int("ignored"), "%lld targets ignored, the reference says %lld", (long long)ignored,
                 (long long)meta_int("ignored"));

    /* the trainer's engine: pool, arena and tape (tg_train_run) */
    TgEngine engine;
    tg_engine_open(&engine, pc->threads, 16u << 20);
    TgTape *tape = &engine.tape;
    tg_tape_set_precision(tape, pc->precision);
    const ParityTolerances *tol = pc->tol;

    /* logits at the initial weights, without a tape, one micro-batch at a time as evaluation */
    float *logits = malloc((size_t)(rows * V) * sizeof(float));
    float *ref_logits = malloc((size_t)(rows * V) * sizeof(float));
    cr_assert_eq(tg_st_read_f32(ref, "logits", ref_logits, rows * V), TG_OK, "%s", tg_error_message());
    bool grad_was = tg_tape_set_grad_enabled(tape, false);
    for (int64_t micro = 0; micro < accum; micro++) {
        TgTensor *z =
            tg_model_forward(&m, tape, &(TgBatch){.tokens = tokens + micro * B * T, .batch = B, .seq = T}, NULL);
        memcpy(logits + micro * B * T * V, z->data, (size_t)(B * T * V) * sizeof(float));
        tg_tape_reset(tape);
    }
    tg_tape_set_grad_enabled(tape, grad_was);
    double logits_err = rel_err(logits, ref_logits, rows * V);
    cr_expect_leq(logits_err, tol->logits, "[%s] logits: relative error %.2e > %.0e", pc->name, logits_err, tol->logits);

    /* the training steps, call for call as tg_train_run makes them */
    float ref_losses[PARITY_STEPS_MAX], ref_norms[PARITY_STEPS_MAX];
    cr_assert_eq(tg_st_read_f32(ref, "adamw_losses", ref_losses, steps), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_st_read_f32(ref, "grad_norms", ref_norms, steps), TG_OK, "%s", tg_error_message());
    /* DPO (make_reference.py --dpo-beta): each micro-batch's pairs against the reference's log-probabilities */
    const char *dpo_beta = tg_st_metadata(ref, "dpo_beta");
    float *dpo_ref = NULL, dpo_margins[64];
    if (dpo_beta) {
        dpo_ref = malloc((size_t)(accum * B) * sizeof *dpo_ref);
        cr_assert_eq(tg_st_read_f32(ref, "dpo_ref", dpo_ref, accum * B), TG_OK, "%s", tg_error_message());
        cr_assert(accum <= 64);
        cr_assert_eq(tg_st_read_f32(ref, "dpo_margins", dpo_margins, accum), TG_OK, "%s", tg_error_message());
    }
    TgAdamWConfig adamw = {.eps = meta_double("eps"), .weight_decay = meta_double("weight_decay")};
    cr_assert_eq(sscanf(tg_st_metadata(ref, "betas"), "%lf,%lf", &adamw.beta1, &adamw.beta2), 2);
    TgLrSchedule sched = {meta_double("lr"), meta_double("min_lr"), meta_int("warmup"), steps};
    double clip = meta_double("clip"), worst_loss = 0, worst_norm = 0;
    const char *ref_lrs = tg_st_metadata(ref, "lrs");
    cr_assert_not_null(ref_lrs);
    TensorErrors *errs = calloc((size_t)ps->count, sizeof *errs);
    for (int64_t s = 0; s < steps; s++) {
        char *lr_end;
        double lr = tg_lr_at(&sched, s), ref_lr = strtod(ref_lrs, &lr_end);
        cr_assert(lr_end != ref_lrs, "reference metadata lrs holds fewer than %lld values", (long long)steps);
        ref_lrs = lr_end + (*lr_end == ',');
        cr_expect_leq(fabs(lr - ref_lr), 1e-12 * ref_lr, "[%s] step %lld: lr %.17g, the reference's %.17g", pc->name,
                      (long long)s, lr, ref_lr);
        tg_params_zero_grad(ps);
        double loss_sum = 0.0;
        for (int64_t micro = 0; micro < accum; micro++) {
            size_t off = (size_t)(micro * B * T);
            TgBatch batch = {.tokens = tokens + off, .targets = targets + off, .batch = B, .seq = T};
            TgDpoStats st;
            TgTensor *loss = dpo_ref
                                 ? tg_dpo_batch_loss(&m, tape, &batch, dpo_ref + micro * B, strtod(dpo_beta, NULL), &st)
                                 : tg_model_loss(&m, tape, &batch, NULL);
            /* the first step's mean reward margin of each micro-batch, as PyTorch's */
            if (dpo_ref && s == 0)
                cr_expect_leq(fabs(st.margin - dpo_margins[micro]), tol->loss * fabs(dpo_margins[micro]),
                              "[%s] micro-batch %lld: margin %.8f, PyTorch %.8f", pc->name, (long long)micro, st.margin,
                              (double)dpo_margins[micro]);
            loss_sum += loss->data[0];
            tg_tape_backward(tape, accum > 1 ? tg_scale(tape, loss, 1.0f / (float)accum) : loss);
            tg_tape_reset(tape);
        }
        double loss = loss_sum / (double)accum, loss_err = fabs(loss - ref_losses[s]) / fabs(ref_losses[s]);
        worst_loss = fmax(worst_loss, loss_err);
        cr_expect_leq(loss_err, tol->loss, "[%s] step %lld: loss %.8f, PyTorch %.8f", pc->name, (long long)s, loss,
                      ref_losses[s]);
        if (s == 0)
            for (int i = 0; i < ps->count; i++)
                errs[i].grad = rel_err_entry("grad.", ps->tensors[i], ps->tensors[i]->grad);
        double norm = tg_clip_grad_norm_pool(ps, clip, engine.pool), norm_err = fabs(norm - ref_norms[s]) / ref_norms[s];
        worst_norm = fmax(worst_norm, norm_err);
        cr_expect_leq(norm_err, tol->loss, "[%s] step %lld: gradient norm %.8f, PyTorch %.8f", pc->name, (long long)s,
                      norm, ref_norms[s]);
        cr_assert_gt(norm, clip, "[%s] step %lld: gradient norm %.4f does not exceed the clip %.4f: clipping untested",
                     pc->name, (long long)s, norm, clip);
        tg_adamw_step(ps, &adamw, s + 1, lr, engine.pool);
    }

    TensorErrors worst = {0};
    for (int i = 0; i < ps->count; i++) {
        const TgTensor *t = ps->tensors[i];
        size_t off = ps->offsets[i];
        errs[i].param = rel_err_entry("final.", t, t->data);
        errs[i].m = rel_err_entry("adamw_m.", t, ps->m + off);
        errs[i].v = rel_err_entry("adamw_v.", t, ps->v + off);
        fprintf(stderr, "parity %s: %-46s grad %.1e  param %.1e  m %.1e  v %.1e\n", pc->name, t->name, errs[i].grad,
                errs[i].param, errs[i].m, errs[i].v);
        worst.grad = fmax(worst.grad, errs[i].grad);
        worst.param = fmax(worst.param, errs[i].param);
        worst.m = fmax(worst.m, errs[i].m);
        worst.v = fmax(worst.v, errs[i].v);
        cr_expect_leq(errs[i].grad, tol->grad, "[%s] grad of %s: relative error %.2e > %.0e", pc->name, t->name,
                      errs[i].grad, tol->grad);
        cr_expect_leq(errs[i].param, tol->param, "[%s] %s after %lld steps: relative error %.2e > %.0e", pc->name,
                      t->name, (long long)steps, errs[i].param, tol->param);
        cr_expect_leq(errs[i].m, tol->moment, "[%s] AdamW m of %s: relative error %.2e > %.0e", pc->name, t->name,
                      errs[i].m, tol->moment);
        cr_expect_leq(errs[i].v, tol->moment, "[%s] AdamW v of %s: relative error %.2e > %.0e", pc->name, t->name,
                      errs[i].v, tol->moment);
    }
    fprintf(stderr,
            "parity %s: worst relative errors: logits %.1e, loss %.1e, gradient norm %.1e (%lld steps, all clipped "
            "at %g), grad %.1e, param %.1e, m %.1e, v %.1e\n",
            pc->name, logits_err, worst_loss, worst_norm, (long long)steps, clip, worst.grad, worst.param, worst.m,
            worst.v);

    free(errs);
    free(dpo_ref);
    free(logits);
    free(ref_logits);
    free(tokens);
    free(targets);
    tg_engine_close(&engine);
    tg_model_free(&m);
}

/* dim 64, 4 heads / 2 KV heads of 16, hidden 192, vocab 67, seq 16, batch 3: multiples of the
 * blocks but for the vocabulary, GEMMs below the threaded split (at most 48 x 192 x 64 = 0.6M
 * multiply-adds). */
Test(parity, default_shape_matches_pytorch, .fini = cleanup, .timeout = 300) {
    run_case(&(ParityCase){"default", PARITY_COMMON_ARGS, 2, TG_PRECISION_FP32, &FP32_TOLERANCES});
}

/* dim 96, 6 heads / 2 KV heads of 16, hidden 256, vocab 131, seq 23, batch 5 x accum 2, 7 ignored
 * targets, clip 0.5, a pool of 2. tg_sgemm_pool (lib/blas.c) splits a product over the pool when
 * m n k >= 2^20 and C has at least two 16-row / 32-column units: with 115 tokens per
 * micro-batch, the q and o projections (115 x 96 x 96 = 1.06M), gate/up/down (2.8M), the head
 * (115 x 131 x 96 = 1.45M), their input gradients and their weight gradients are all split;
 * only k and v (115 x 32 x 96) and their gradients stay on one thread. 23, 115 and 131 leave
 * ragged tails in the attention blocks, the GEMM tiles and the threads' shares of C. */
#define PARITY_RAGGED_ARGS                                                                             \
    PARITY_COMMON_ARGS " --dim 96 --heads 6 --kv-heads 2 --hidden 256 --vocab 131 --seq 23 --batch 5 " \
                       "--accum 2 --ignore 7 --clip 0.5"
Test(parity, ragged_threaded_shape_matches_pytorch, .fini = cleanup, .timeout = 300) {
    run_case(&(ParityCase){"ragged", PARITY_RAGGED_ARGS, 2, TG_PRECISION_FP32, &FP32_TOLERANCES});
}

/* The ragged shape in bf16 (tg_tape_set_precision) against PyTorch's bf16 autocast
 * (make_reference.py --autocast bf16), within BF16_TOLERANCES. */
Test(parity, ragged_shape_in_bf16_matches_pytorch_autocast, .fini = cleanup, .timeout = 300) {
    run_case(&(ParityCase){"ragged bf16", PARITY_RAGGED_ARGS " --autocast bf16", 2, TG_PRECISION_BF16, &BF16_TOLERANCES});
}

/* The default shape with a ReLU FFN, w2(relu(w1 x)), hidden 4 x 64 (make_reference.py --ffn relu):
 * no up projection, and the backward through ReLU's mask. */
Test(parity, relu_ffn_matches_pytorch, .fini = cleanup, .timeout = 300) {
    run_case(&(ParityCase){"relu", PARITY_COMMON_ARGS " --ffn relu", 2, TG_PRECISION_FP32, &FP32_TOLERANCES});
}

/* The ragged shape with QK-norm (make_reference.py --qk-norm), MiniMind-3's eps 1e-6: each query
 * and key head RMS-normed by its layer's gain of 16 before RoPE, the gains' gradients summed over
 * heads, positions and rows, on 2 threads. */
Test(parity, qk_norm_matches_pytorch, .fini = cleanup, .timeout = 300) {
    run_case(&(ParityCase){"qk-norm", PARITY_RAGGED_ARGS " --qk-norm --norm-eps 1e-6", 2, TG_PRECISION_FP32,
                           &FP32_TOLERANCES});
}

/* QK-norm on the default shape, on one thread: the per-head norms' rows and their gains' column
 * sums unsplit. */
Test(parity, qk_norm_on_one_thread_matches_pytorch, .fini = cleanup, .timeout = 300) {
    run_case(&(ParityCase){"qk-norm, 1 thread", PARITY_COMMON_ARGS " --qk-norm --norm-eps 1e-6", 1, TG_PRECISION_FP32,
                           &FP32_TOLERANCES});
}

/* QK-norm in bf16 against PyTorch's autocast, within BF16_TOLERANCES. */
Test(parity, qk_norm_in_bf16_matches_pytorch_autocast, .fini = cleanup, .timeout = 300) {
    run_case(&(ParityCase){"qk-norm bf16", PARITY_RAGGED_ARGS " --qk-norm --norm-eps 1e-6 --autocast bf16", 2,
                           TG_PRECISION_BF16, &BF16_QK_NORM_TOLERANCES});
}

/* The integer after "key": in one JSON object's text (json.dumps' spacing), or -1. */
static int64_t json_int_in(const char *object, const char *end, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    const char *at = strstr(object, pattern);
    return at && at < end ? strtoll(at + strlen(pattern), NULL, 10) : -1;
}

/* bench/torch_reference.py --describe lists every preset per FFN with the shapes it trains; each
 * must be the program's (tg_model_preset, tg_model_ffn_hidden), with the parameters that
 * tg_model_config_param_count gives at the vocabulary the reference runs it with, so that
 * `bash bench/compare.sh` compares the same model on both sides. */
/* DPO (train/dpo.h): the ragged shape's rows, 6 a micro-batch, as 3 pairs, each pair's rows sharing a
 * prompt of 1 to 11 tokens whose targets are ignored, against reference log-probabilities that
 * put the margins away from 0; the loss, every gradient and five AdamW steps as for the others. */
Test(parity, dpo_on_ragged_pairs_matches_pytorch, .fini = cleanup, .timeout = 300) {
    run_case(&(ParityCase){"dpo",
                           PARITY_COMMON_ARGS
                           " --dim 96 --heads 6 --kv-heads 2 --hidden 256 --vocab 131 --seq 23 --batch 6 "
                           "--accum 2 --dpo-beta 0.5 --clip 0.05 --lr 1e-4 --min-lr 1e-5",
                           2, TG_PRECISION_FP32, &DPO_TOLERANCES});
}

Test(parity, the_references_presets_are_tapegrads, .timeout = 300) {
    require_torch("the PyTorch reference's presets", NULL);
    char dir[] = "/tmp/tapegrad-presets-XXXXXX", out[256], cmd[1024];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(out, sizeof out, "%s/describe.json", dir);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/bench/torch_reference.py --describe >%s", TAPEGRAD_SOURCE_DIR, out);
    cr_assert_eq(test_run(cmd), 0, "%s failed", cmd);
    FILE *f = fopen(out, "rb");
    cr_assert_not_null(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(out);
    rmdir(dir);
    int rows = 0;
    for (int p = 0; p < TG_PRESET_COUNT; p++)
        for (int k = 0; k < TG_FFN_KIND_COUNT; k++) {
            const char *name = tg_model_preset_name((TgPreset)p), *ffn = tg_ffn_kind_name((TgFfnKind)k);
            char head[128];
            snprintf(head, sizeof head, "{\"preset\": \"%s\", \"ffn\": \"%s\",", name, ffn);
            const char *object = strstr(text, head);
            cr_assert_not_null(object, "torch_reference.py --describe has no row for %s with %s: %s", name, ffn, text);
            const char *end = strchr(object, '}');
            cr_assert_not_null(end);
            TgModelConfig c;
            cr_assert_eq(tg_model_preset(name, &c), TG_OK);
            c.ffn = (TgFfnKind)k;
            if (c.ffn != TG_FFN_SWIGLU) c.hidden = tg_model_ffn_hidden(c.ffn, c.dim);
            int64_t vocab = json_int_in(object, end, "vocab");
            if (c.vocab) cr_expect_eq(vocab, c.vocab, "%s: the reference's vocabulary %lld, tapegrad's %lld", name,
                                      (long long)vocab, (long long)c.vocab);
            c.vocab = vocab;
            const struct {
                const char *key;
                int64_t value;
            } fields[] = {{"dim", c.dim},         {"layers", c.n_layers},
                          {"heads", c.n_heads},   {"kv_heads", c.n_kv_heads},
                          {"hidden", c.hidden},   {"seq", c.seq_len},
                          {"qk_norm", c.qk_norm}, {"params", tg_model_config_param_count(&c)}};
            for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
                cr_expect_eq(json_int_in(object, end, fields[i].key), fields[i].value,
                             "%s with %s: the reference's %s is %lld, tapegrad's %lld", name, ffn, fields[i].key,
                             (long long)json_int_in(object, end, fields[i].key), (long long)fields[i].value);
            rows++;
        }
    cr_expect_eq(rows, TG_PRESET_COUNT * TG_FFN_KIND_COUNT);
}
