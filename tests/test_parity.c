/* Whole-model parity with PyTorch: tests/parity/make_reference.py builds the same MiniMind-style
 * model in PyTorch and writes its weights, a batch, the logits, the loss, every gradient and the
 * losses of 5 AdamW steps; tapegrad loads the weights through its own safetensors reader and
 * must reproduce all of it. Without torch the test fails, unless TAPEGRAD_SKIP_TORCH=1 asks to
 * skip it. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/safetensors.h"
#include "testutil.h"
#include "train/model.h"
#include "train/optim.h"

static char tmpdir[256];
static char ref_path[512];
static StFile *ref;

static int64_t meta_int(const char *key) {
    const char *v = st_metadata(ref, key);
    cr_assert_not_null(v, "reference metadata lacks '%s'", key);
    return strtoll(v, NULL, 10);
}

static double meta_double(const char *key) {
    const char *v = st_metadata(ref, key);
    cr_assert_not_null(v, "reference metadata lacks '%s'", key);
    return strtod(v, NULL);
}

static void make_reference(void) {
    require_torch("PyTorch parity", NULL);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tapegrad-parity-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(ref_path, sizeof ref_path, "%s/ref.safetensors", tmpdir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 /usr/bin/python3 %s/tests/parity/make_reference.py %s",
             TAPEGRAD_SOURCE_DIR, ref_path);
    cr_assert_eq(test_run(cmd), 0, "make_reference.py failed");
    cr_assert_eq(st_open(ref_path, &ref), TG_OK, "%s", tg_error_message());
}

static void cleanup(void) {
    if (ref) st_close(ref);
    ref = NULL;
    if (ref_path[0]) unlink(ref_path);
    if (tmpdir[0]) rmdir(tmpdir);
}

static void build_from_reference(Model *m) {
    ModelConfig c = {
        .dim = meta_int("dim"), .n_layers = meta_int("layers"), .n_heads = meta_int("heads"),
        .n_kv_heads = meta_int("kv_heads"), .hidden = meta_int("hidden"), .vocab = meta_int("vocab"),
        .seq_len = meta_int("seq"), .ffn = FFN_SWIGLU, .rope_theta = meta_double("rope_theta"),
        .norm_eps = meta_double("norm_eps"),
    };
    cr_assert_eq(model_config_validate(&c), TG_OK, "%s", tg_error_message());
    model_build(m, &c);
    for (int i = 0; i < m->params.count; i++) {
        Tensor *t = m->params.tensors[i];
        cr_assert_eq(st_expect_shape(ref, t->name, t->ndim, t->shape), TG_OK, "%s", tg_error_message());
        cr_assert_eq(st_read_f32(ref, t->name, t->data, t->numel), TG_OK, "%s", tg_error_message());
    }
}

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const float *b, int64_t n, double *max_ref) {
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    if (max_ref) *max_ref = scale;
    return scale > 0 ? worst / scale : worst;
}

Test(parity, forward_backward_and_adamw_match_pytorch, .init = make_reference, .fini = cleanup, .timeout = 300) {
    Model m;
    build_from_reference(&m);
    int64_t B = meta_int("batch"), T = meta_int("seq"), V = m.cfg.vocab;
    int32_t *tokens = malloc((size_t)(B * T) * sizeof(int32_t)), *targets = malloc((size_t)(B * T) * sizeof(int32_t));
    cr_assert_eq(st_read_i32(ref, "tokens", tokens, B * T), TG_OK, "%s", tg_error_message());
    cr_assert_eq(st_read_i32(ref, "targets", targets, B * T), TG_OK, "%s", tg_error_message());
    float ref_loss;
    float *ref_logits = malloc((size_t)(B * T * V) * sizeof(float));
    cr_assert_eq(st_read_f32(ref, "loss", &ref_loss, 1), TG_OK, "%s", tg_error_message());
    cr_assert_eq(st_read_f32(ref, "logits", ref_logits, B * T * V), TG_OK, "%s", tg_error_message());

    TestTape tt;
    test_tape_init(&tt, 2);
    Tensor *logits;
    Tensor *loss = model_loss(&m, &tt.tape, tokens, targets, B, T, &logits);
    double loss_rel = fabs(loss->data[0] - ref_loss) / fabs(ref_loss);
    double logits_rel = rel_diff(logits->data, ref_logits, B * T * V, NULL);
    fprintf(stderr, "parity: loss %.7f vs %.7f (rel %.2e), logits max rel %.2e\n", loss->data[0], ref_loss, loss_rel,
            logits_rel);
    cr_expect_leq(loss_rel, 1e-5, "loss %.8f vs PyTorch %.8f", loss->data[0], ref_loss);
    cr_expect_leq(logits_rel, 1e-5, "logits differ by %.3e relative", logits_rel);

    params_zero_grad(&m.params);
    tape_backward(&tt.tape, loss);
    double worst_grad_ratio = 0;
    for (int i = 0; i < m.params.count; i++) {
        Tensor *t = m.params.tensors[i];
        char name[128];
        snprintf(name, sizeof name, "grad.%s", t->name);
        float *g = malloc((size_t)t->numel * sizeof(float));
        cr_assert_eq(st_read_f32(ref, name, g, t->numel), TG_OK, "%s", tg_error_message());
        double max_ref, diff = rel_diff(t->grad, g, t->numel, &max_ref) * max_ref;
        double allowed = 1e-5 * max_ref + 1e-6;
        worst_grad_ratio = fmax(worst_grad_ratio, diff / allowed);
        cr_expect_leq(diff, allowed, "%s: max |dg| %.3e > %.3e (max |g| %.3e)", name, diff, allowed, max_ref);
        free(g);
    }
    fprintf(stderr, "parity: worst gradient difference = %.2f of the allowed bound\n", worst_grad_ratio);
    tape_reset(&tt.tape);

    /* 5 steps of clip + AdamW with the reference's hyper-parameters */
    int64_t steps = meta_int("steps");
    float *ref_losses = malloc((size_t)steps * sizeof(float));
    cr_assert_eq(st_read_f32(ref, "adamw_losses", ref_losses, steps), TG_OK, "%s", tg_error_message());
    AdamWConfig cfg = {.beta1 = 0.9, .beta2 = 0.95, .eps = meta_double("eps"), .weight_decay = meta_double("weight_decay")};
    const char *betas = st_metadata(ref, "betas");
    cr_assert_eq(sscanf(betas, "%lf,%lf", &cfg.beta1, &cfg.beta2), 2);
    double lr = meta_double("lr"), clip = meta_double("clip"), worst_step = 0;
    for (int64_t s = 0; s < steps; s++) {
        params_zero_grad(&m.params);
        Tensor *l = model_loss(&m, &tt.tape, tokens, targets, B, T, NULL);
        double diff = fabs(l->data[0] - ref_losses[s]);
        worst_step = fmax(worst_step, diff);
        cr_expect_leq(diff, 1e-5, "AdamW step %lld: loss %.7f vs PyTorch %.7f", (long long)s, l->data[0], ref_losses[s]);
        tape_backward(&tt.tape, l);
        tape_reset(&tt.tape);
        clip_grad_norm(&m.params, clip);
        adamw_step(&m.params, &cfg, s + 1, lr, tt.pool);
    }
    fprintf(stderr, "parity: %lld AdamW losses, max abs difference %.2e\n", (long long)steps, worst_step);

    free(ref_losses);
    free(tokens);
    free(targets);
    free(ref_logits);
    test_tape_free(&tt);
    model_free(&m);
}
