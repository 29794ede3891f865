/* LoRA: adapters on a frozen base (tapegrad/model.h), their checkpoints (checkpoint/adapter.h), the
 * merge, and `tapegrad sft --lora-rank` end to end.
 *
 * What must hold: a fresh adapter (B = 0) changes no bit of the model's logits; the base gets no
 * gradient and keeps no AdamW moments; merged weights give the adapted model's logits (to float
 * rounding); an adapter is refused on another base, naming both; a LoRA run stopped and resumed
 * is bitwise the run that never stopped. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "tapegrad/gradcheck.h"
#include "tapegrad/model.h"
#include "testutil.h"
#include "model/safetensors.h"
#include "checkpoint/adapter.h"
#include "checkpoint/checkpoint.h"
#include "run/run.h"

static const TgModelConfig small_cfg = {.dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .hidden = 96,
                                        .vocab = 61, .seq_len = 16, .ffn = TG_FFN_SWIGLU, .rope_theta = 1e4,
                                        .norm_eps = 1e-5};
static const TgLoraConfig all_targets = {.rank = 4, .alpha = 8, .targets = TG_LORA_ALL_TARGETS};

/* small_cfg's model with weights from seed 5 and, when `lora`, all_targets' adapters (seed 9) */
static void build(TgModel *m, bool lora) {
    tg_model_build(m, &small_cfg);
    tg_model_init_weights(m, 5);
    if (lora) tg_lora_attach(m, &all_targets, 9);
}

static void tokens_of(int32_t *tokens, int32_t *targets, int64_t n) {
    for (int64_t i = 0; i < n; i++) tokens[i] = (int32_t)((i * 7 + 3) % small_cfg.vocab);
    for (int64_t i = 0; i < n; i++) targets[i] = tokens[(i + 1) % n];
}

/* logits of 2 x 16 tokens, copied out of the arena */
static float *logits_of(TgModel *m, TestTape *tt) {
    int32_t tokens[32], targets[32];
    tokens_of(tokens, targets, 32);
    bool old = tg_tape_set_grad_enabled(&tt->tape, false);
    TgTensor *y = tg_model_forward(m, &tt->tape, &(TgBatch){.tokens = tokens, .batch = 2, .seq = 16}, NULL);
    float *copy = malloc((size_t)y->numel * sizeof(float));
    memcpy(copy, y->data, (size_t)y->numel * sizeof(float));
    tg_tape_reset(&tt->tape);
    tg_tape_set_grad_enabled(&tt->tape, old);
    return copy;
}

static size_t n_logits(void) { return 32 * (size_t)small_cfg.vocab; }

/* The adapters' B filled, so that they change the model */
static void perturb_b(TgModel *m, uint64_t seed) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    for (int i = 0; i < m->lora->params.count; i++) {
        TgTensor *t = m->lora->params.tensors[i];
        if (strstr(t->name, "lora_B")) tg_rng_fill_uniform(&rng, t->data, (size_t)t->numel, -0.05f, 0.05f);
    }
}

/* The base model's logits, then all_targets' adapters attached */
static float *base_logits_then_attach(TgModel *m, TestTape *tt) {
    test_tape_init(tt, 2);
    build(m, false);
    float *base = logits_of(m, tt);
    tg_lora_attach(m, &all_targets, 9);
    return base;
}

Test(lora, a_fresh_adapter_leaves_the_logits_bitwise_and_the_base_frozen) {
    TestTape tt;
    TgModel m;
    float *base = base_logits_then_attach(&m, &tt);
    float *adapted = logits_of(&m, &tt);
    cr_expect_eq(memcmp(base, adapted, n_logits() * sizeof(float)), 0, "B = 0 changed the logits");
    /* 7 targets x 2 layers, an A and a B each; the base keeps no gradient or AdamW buffers */
    cr_expect_eq(m.lora->params.count, 28);
    cr_expect_null(m.params.grad);
    cr_expect_null(m.params.m);
    cr_expect_null(m.params.v);
    cr_expect_eq(tg_model_trainable(&m), &m.lora->params);
    /* a training step's backward: the base gets nothing; with B = 0, dA is 0 and dB is not */
    int32_t tokens[32], targets[32];
    tokens_of(tokens, targets, 32);
    tg_params_zero_grad(&m.lora->params);
    tg_tape_backward(
        &tt.tape,
        tg_model_loss(&m, &tt.tape, &(TgBatch){.tokens = tokens, .targets = targets, .batch = 2, .seq = 16}, NULL));
    tg_tape_reset(&tt.tape);
    for (int i = 0; i < m.params.count; i++) cr_expect_null(m.params.tensors[i]->grad, "%s got a gradient", m.params.tensors[i]->name);
    double a2 = 0, b2 = 0;
    for (int i = 0; i < m.lora->params.count; i++) {
        const TgTensor *t = m.lora->params.tensors[i];
        double s = 0;
        for (int64_t j = 0; j < t->numel; j++) s += (double)t->grad[j] * t->grad[j];
        if (strstr(t->name, "lora_A")) a2 += s;
        else b2 += s;
    }
    cr_expect_eq(a2, 0.0, "dA must be 0 while B is 0");
    cr_expect_gt(b2, 0.0, "dB must not be 0");
    /* A is initialised within +-1/sqrt(in), not 0 */
    const TgTensor *a = m.lora->pairs[TG_LORA_Q].a;
    float bound = 1.0f / sqrtf((float)small_cfg.dim), largest = 0;
    for (int64_t j = 0; j < a->numel; j++) largest = fmaxf(largest, fabsf(a->data[j]));
    cr_expect(largest > 0.5f * bound && largest <= bound, "A's largest |value| %g, bound %g", largest, bound);
    free(base), free(adapted);
    tg_model_free(&m);
    test_tape_free(&tt);
}

Test(lora, merged_weights_give_the_adapted_logits) {
    TestTape tt;
    TgModel m;
    float *base = base_logits_then_attach(&m, &tt);
    perturb_b(&m, 3);
    float *adapted = logits_of(&m, &tt);
    tg_lora_merge(&m);
    cr_expect_null(m.lora);
    float *merged = logits_of(&m, &tt);
    double worst = 0, moved = 0;
    for (size_t i = 0; i < n_logits(); i++) {
        worst = fmax(worst, fabs((double)merged[i] - adapted[i]));
        moved = fmax(moved, fabs((double)adapted[i] - base[i]));
    }
    cr_expect_lt(worst, 1e-5, "merged logits differ from the adapted model's by %g", worst);
    cr_expect_gt(moved, 1e-3, "the adapters must move the logits for the comparison to mean anything (%g)", moved);
    free(base), free(adapted), free(merged);
    tg_model_free(&m);
    test_tape_free(&tt);
}

/* The whole model's gradients with respect to adapters (their ops wired into attention and the
 * FFN, through RoPE, the residual adds, the loss) agree with central differences. */
static TgTensor *model_loss(TgTape *tape, TgTensor *const *in, void *ctx) {
    int32_t tokens[32], targets[32];
    tokens_of(tokens, targets, 32);
    return tg_model_loss(ctx, tape, &(TgBatch){.tokens = tokens, .targets = targets, .batch = 2, .seq = 16}, NULL);
}

Test(lora, the_models_adapter_gradients_match_finite_differences) {
    TestTape tt;
    test_tape_init(&tt, 1);
    TgModel m;
    build(&m, true);
    perturb_b(&m, 3);
    const TgLoraPair *q0 = &m.lora->pairs[TG_LORA_Q], *down1 = &m.lora->pairs[TG_LORA_TARGET_COUNT + TG_LORA_DOWN];
    const TgLoraPair *k1 = &m.lora->pairs[TG_LORA_TARGET_COUNT + TG_LORA_K], *up0 = &m.lora->pairs[TG_LORA_UP];
    TgTensor *inputs[] = {q0->a, q0->b, k1->b, up0->a, down1->a, down1->b};
    TgGradcheckResult res[6];
    TgGradcheckOptions opts = tg_gradcheck_defaults();
    opts.eps = 1e-2;
    bool ok = tg_gradcheck(&tt.tape, model_loss, &m, inputs, 6, &opts, res);
    tg_gradcheck_print_failures(stderr, "model", "lora", res, 6);
    cr_expect(ok, "the model's adapter gradients disagree with finite differences");
    tg_model_free(&m);
    test_tape_free(&tt);
}

Test(lora, targets_parse_and_bad_ones_are_refused) {
    uint32_t t;
    cr_expect_eq(tg_lora_targets_parse("q,v", &t), TG_OK);
    cr_expect_eq(t, (1u << TG_LORA_Q) | (1u << TG_LORA_V));
    cr_expect_eq(tg_lora_targets_parse("q,k,v,o,gate,up,down", &t), TG_OK);
    cr_expect_eq(t, TG_LORA_ALL_TARGETS);
    char buf[64];
    tg_lora_targets_format(t, buf, sizeof buf);
    cr_expect_str_eq(buf, "q,k,v,o,gate,up,down");
    cr_expect_eq(tg_lora_targets_parse("q,wq", &t), TG_ERR_ARG);
    cr_expect(strstr(tg_error_message(), "unknown target 'wq'"), "%s", tg_error_message());
    TgModelConfig relu = small_cfg;
    relu.ffn = TG_FFN_RELU;
    TgLoraConfig up = {.rank = 2, .alpha = 4, .targets = 1u << TG_LORA_UP};
    cr_expect_eq(tg_lora_config_validate(&up, &relu), TG_ERR_ARG);
    TgLoraConfig zero = {.rank = 0, .alpha = 4, .targets = 1};
    cr_expect_eq(tg_lora_config_validate(&zero, NULL), TG_ERR_ARG);
}

/* An adapter checkpoint holds the adapters alone, and loads back onto its own base only. */
Test(lora, an_adapter_loads_onto_its_base_and_is_refused_on_another_naming_both) {
    char *dir = datagen_tempdir(), *path = datagen_path(dir, "adapter.tgck");
    TgModel m, same, other;
    build(&m, true);
    perturb_b(&m, 3);
    TgTrainerState state = {.step = 7, .best_val_loss = INFINITY, .seed = 1};
    TgCheckpointSource src = tg_checkpoint_source_of(&m, 0xabcdu, &state);
    assert_ok(tg_checkpoint_write(path, &src));
    TgCheckpointInfo info;
    assert_ok(tg_checkpoint_read_header(path, &info));
    cr_expect(info.flags & TG_CHECKPOINT_FLAG_ADAPTER);
    /* the same base: every adapter weight back, bitwise */
    build(&same, false);
    assert_ok(tg_adapter_load(path, &same, "base-one", 0xabcdu, &info));
    cr_expect_eq(info.state.step, 7);
    cr_expect_eq(same.lora->params.total, m.lora->params.total);
    cr_expect_eq(memcmp(same.lora->params.data, m.lora->params.data, m.lora->params.total * sizeof(float)), 0);
    /* another base of the same shape: refused, naming the adapter, the base and both fingerprints */
    tg_model_build(&other, &small_cfg);
    tg_model_init_weights(&other, 6);
    char want[32], have[32];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)m.lora->base_fingerprint);
    snprintf(have, sizeof have, "%016llx", (unsigned long long)tg_model_weights_fingerprint(&other));
    cr_expect_eq(tg_adapter_load(path, &other, "base-two", 0xabcdu, NULL), TG_ERR_MISMATCH);
    const char *msg = tg_error_message();
    cr_expect(strstr(msg, path) && strstr(msg, "base-two") && strstr(msg, want) && strstr(msg, have), "%s", msg);
    cr_expect_null(other.lora, "a refused adapter stays off the model");
    /* the right base with another tokenizer */
    cr_expect_eq(tg_adapter_load(path, &other, "base-two", 0x1234u, NULL), TG_ERR_MISMATCH);
    /* and as a whole model's checkpoint it is refused, saying what it is */
    TgModel whole;
    tg_model_build(&whole, &small_cfg);
    cr_expect_eq(tg_checkpoint_load(path, &whole, NULL), TG_ERR_MISMATCH);
    cr_expect(strstr(tg_error_message(), "a LoRA adapter's checkpoint"), "%s", tg_error_message());
    tg_model_free(&whole), tg_model_free(&m), tg_model_free(&same), tg_model_free(&other);
    datagen_remove_tree(dir);
    free(path), free(dir);
}

/* ---- tapegrad sft --lora-rank ---- */

CKPT_SCRATCH_FIXTURE

static char *conversations(void) {
    static const char *const words[] = {"tea", "rain", "paper", "bells", "stone", "clocks"};
    char text[16384];
    size_t n = 0;
    for (int i = 0; i < 60; i++)
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "{\"conversations\": [{\"role\": \"user\", \"content\": \"Say %s.\"}, {\"role\": \"assistant\", "
                              "\"content\": \"%s, %s.\"}]}\n",
                              words[i % 6], words[i % 6], words[(i + 1) % 6]);
    datagen_write(dir, "conversations.jsonl", text, n);
    return datagen_path(dir, "conversations.jsonl");
}

/* The adapters (weights and moments) and trainer state of two LoRA runs' latest checkpoints agree bitwise. */
static void expect_same_adapters(const char *a, const char *b) {
    TgRun ra, rb;
    assert_ok(tg_run_open_existing(a, &ra));
    assert_ok(tg_run_open_existing(b, &rb));
    cr_assert(ra.model.lora && rb.model.lora, "both runs hold adapters");
    const TgParamStore *x = &ra.model.lora->params, *y = &rb.model.lora->params;
    size_t bytes = x->total * sizeof(float);
    cr_assert_eq(x->total, y->total);
    cr_expect(memcmp(x->data, y->data, bytes) == 0 && memcmp(x->m, y->m, bytes) == 0 && memcmp(x->v, y->v, bytes) == 0,
              "%s and %s hold different adapters or moments", a, b);
    cr_expect_eq(ra.state.step, rb.state.step);
    cr_expect_eq(memcmp(&ra.state.loader, &rb.state.loader, sizeof ra.state.loader), 0, "loader states differ");
    tg_run_close(&ra);
    tg_run_close(&rb);
}

Test(lora_cli, sft_trains_adapters_resumes_bitwise_and_merges, .init = setup, .fini = teardown, .timeout = 120) {
    char *base = datagen_path(dir, "base"), *data = conversations(), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --tokenizer bpe --vocab 320 --special-tokens chatml --steps 2 "
                            "--eval-every 0 --out %s", corpus, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *straight = datagen_path(dir, "straight"), *split = datagen_path(dir, "split"), *merged = datagen_path(dir, "merged");
    const char *flags = CKPT_TEST_FLAGS " --seq 64 --steps 8 --eval-every 4 --lr 1e-2 --lora-rank 4 --lora-targets q,v,o,gate,up,down";
    rc = ckpt_cli(&out, "sft %s --init-from %s --data %s --out %s", flags, base, data, straight);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "LoRA rank 4, alpha 8 on q,v,o,gate,up,down and the embedding rows of 2 tokens "
                          "(<|im_start|>, <|im_end|>)"),
              "%s", out);
    free(out);
    rc = ckpt_cli(&out, "sft %s --init-from %s --data %s --stop-after 3 --out %s", flags, base, data, split);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "sft --resume %s", split);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "resuming at step 3 of 8"), "%s", out);
    free(out);
    ckpt_expect_same_metrics(straight, split, 3, 5);
    expect_same_adapters(straight, split);
    /* the checkpoint holds the adapters alone: a fraction of the base's */
    rc = ckpt_cli(&out, "ckpt info %s", straight);
    cr_expect(rc == 0 && strstr(out, "adapters     LoRA rank 4, alpha 8 on q,v,o,gate,up,down"), "%s", out);
    cr_expect(strstr(out, "model.layers.1.mlp.down_proj.lora_B.weight") && !strstr(out, "embed_tokens.weight") &&
                  strstr(out, "model.embed_tokens.trainable_tokens") && strstr(out, "the embedding rows of 2 tokens"),
              "%s", out);
    free(out);
    /* merged: a whole model whose eval equals the adapted run's */
    rc = ckpt_cli(&out, "ckpt merge %s --out %s", straight, merged);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *e1 = NULL, *e2 = NULL;
    cr_expect_eq(ckpt_cli(&e1, "eval --run %s --threads 1", straight), 0, "%s", e1);
    cr_expect_eq(ckpt_cli(&e2, "eval --run %s --threads 1", merged), 0, "%s", e2);
    const char *l1 = strstr(e1, "\"val_loss\":"), *l2 = strstr(e2, "\"val_loss\":");
    cr_assert(l1 && l2, "%s\n%s", e1, e2);
    double v1 = strtod(l1 + 11, NULL), v2 = strtod(l2 + 11, NULL);
    cr_expect_leq(fabs(v1 - v2), 1e-5 * v1, "val loss %.9g adapted, %.9g merged", v1, v2);
    free(e1), free(e2);
    rc = ckpt_cli(&out, "ckpt info %s", merged);
    cr_expect(rc == 0 && strstr(out, "model.embed_tokens.weight") && !strstr(out, "lora_"), "%s", out);
    free(out);
    /* the PEFT folder: A and B of every adapted linear under PEFT's names, bitwise the run's, the
     * token rows as PEFT's trainable tokens, and its config */
    char *peft = datagen_path(dir, "peft"), *tg_st_path = datagen_path(peft, "adapter_model.safetensors");
    char *config_path = datagen_path(peft, "adapter_config.json");
    rc = ckpt_cli(&out, "ckpt export %s --peft %s", straight, peft);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    TgRun lora_run;
    assert_ok(tg_run_open_existing(straight, &lora_run));
    const TgLora *lora = lora_run.model.lora;
    cr_assert_gt(lora->cfg.n_tokens, 0, "the run trains no token rows: the check below tests less");
    TgStFile *st;
    assert_ok(tg_st_open(tg_st_path, &st));
    const TgParamStore *ad = &lora->params;
    cr_expect_eq(tg_st_count(st), (size_t)ad->count);
    for (int i = 0; i < ad->count; i++) {
        char name[TG_NAME_CAP + 32];
        if (ad->tensors[i] == lora->token_rows)
            snprintf(name, sizeof name, "base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta");
        else
            snprintf(name, sizeof name, "base_model.model.%s", ad->tensors[i]->name);
        float *got = malloc((size_t)ad->tensors[i]->numel * sizeof(float));
        cr_expect_eq(tg_st_expect_shape(st, name, 2, ad->tensors[i]->shape), TG_OK, "%s", tg_error_message());
        cr_expect_eq(tg_st_read_f32(st, name, got, ad->tensors[i]->numel), TG_OK, "%s", tg_error_message());
        cr_expect_eq(memcmp(got, ad->tensors[i]->data, (size_t)ad->tensors[i]->numel * sizeof(float)), 0, "%s", name);
        free(got);
    }
    tg_st_close(st);
    char *config = ckpt_read_text(config_path), ids[512] = "[";
    for (int j = 0; j < lora->cfg.n_tokens; j++)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", j ? ", " : "", lora->cfg.tokens[j]);
    strcat(ids, "]");
    cr_expect(strstr(config, "\"peft_type\":\t\"LORA\"") && strstr(config, "\"r\":\t4") && strstr(config, "\"lora_alpha\":\t8") &&
                  strstr(config, "[\"q_proj\", \"v_proj\", \"o_proj\", \"gate_proj\", \"up_proj\", \"down_proj\"]") &&
                  strstr(config, "\"trainable_token_indices\":\t{") && strstr(config, ids),
              "no %s in %s", ids, config);
    tg_run_close(&lora_run);
    free(config), free(peft), free(tg_st_path), free(config_path);
    /* never over a run's files, and the message says so (a merge writes nothing to resume) */
    rc = ckpt_cli(&out, "ckpt merge %s --out %s", straight, base);
    cr_expect(rc == 2 && strstr(out, "holds another run") && strstr(out, "name a new folder"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt merge %s --out %s/", straight, straight);
    cr_expect(rc == 2 && strstr(out, "is the LoRA run being merged") && strstr(out, "never into a run's folder") &&
                  strstr(out, "straight-merged, say") && !strstr(out, "--resume"),
              "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt merge %s --out %s", base, merged);
    cr_expect_neq(rc, 0, "%s", out);
    free(out);
    free(base), free(data), free(straight), free(split), free(merged);
}

Test(lora_cli, bad_combinations_are_refused_and_leave_nothing, .init = setup, .fini = teardown, .timeout = 60) {
    char *base = datagen_path(dir, "base"), *data = conversations(), *run = datagen_path(dir, "run"), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --tokenizer bpe --vocab 320 --special-tokens chatml --steps 1 "
                            "--eval-every 0 --out %s", corpus, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    static const struct {
        const char *flags, *says;
    } cases[] = {
        {"--lora-rank 4", "--lora-rank trains adapters on a model's frozen weights: add --init-from"},
        {"--init-from BASE --lora-rank 0", "--lora-rank must be at least 1"},
        {"--init-from BASE --lora-rank -2", "--lora-rank must be in [0, 4096]"},
        {"--init-from BASE --lora-rank 4 --lora-targets q,attn", "unknown target 'attn'"},
        {"--init-from BASE --lora-alpha 16", "add --lora-rank R"},
        {"--init-from BASE --lora-rank 4 --lora-alpha 0", "--lora-alpha must be above 0"},
        /* alpha scales every update: a scale that overflows (or vanishes in) a float is refused */
        {"--init-from BASE --lora-rank 4 --lora-alpha 1e308", "--lora-alpha must be in [0, 8192], got 1e308"},
        {"--init-from BASE --lora-rank 4 --lora-alpha 1e-4", "--lora-alpha must be in [0.001, 8192]"},
        /* B A of a 64 x 64 projection has rank 64 at most: a larger rank is all cost */
        {"--init-from BASE --lora-rank 1000", "--lora-rank 1000 is above 64, the smaller side of the q projection (64 x 64)"},
        {"--init-from BASE --lora-rank 65 --lora-targets down", "--lora-rank 65 is above 64, the smaller side of the down projection (64 x 176)"},
        {"--init-from BASE --lora-rank 4 --log-grads 1", "drop --log-grads"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char flags[512];
        const char *at = strstr(cases[i].flags, "BASE");
        if (at) snprintf(flags, sizeof flags, "%.*s%s%s", (int)(at - cases[i].flags), cases[i].flags, base, at + 4);
        else snprintf(flags, sizeof flags, "%s", cases[i].flags);
        rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --data %s %s --out %s", data, flags, run);
        cr_expect_eq(rc, 2, "%s: exit %d\n%s", cases[i].flags, rc, out);
        cr_expect(strstr(out, cases[i].says), "%s:\n%s", cases[i].flags, out);
        free(out);
        cr_expect(access(run, F_OK) != 0, "a refused run left %s behind", run);
    }
    free(base), free(data), free(run);
}

/* The base a LoRA run's run.txt names was replaced by another model after the run: every command
 * that opens the run refuses, naming the missing checkpoint and run.txt; a checkpoint of the same
 * name holding other weights is refused naming the adapter, the base and both weight fingerprints. */
Test(lora_cli, a_replaced_base_is_refused_naming_both, .init = setup, .fini = teardown, .timeout = 60) {
    char *base = datagen_path(dir, "base"), *other = datagen_path(dir, "other"), *data = conversations();
    char *run = datagen_path(dir, "run"), *out = NULL;
    const char *base_flags = CKPT_TEST_FLAGS " --tokenizer bpe --vocab 320 --special-tokens chatml --eval-every 0";
    int rc = ckpt_cli(&out, "train %s --data %s --steps 1 --out %s", base_flags, corpus, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train %s --data %s --steps 2 --out %s", base_flags, corpus, other);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    /* the base named by a relative path: run.txt records it absolute, so the run opens from anywhere */
    cr_assert_eq(chdir(dir), 0);
    rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from base --data %s --seq 64 --steps 2 --eval-every 0 --lora-rank 2 --out %s",
                  data, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_assert_eq(chdir("/"), 0);
    rc = ckpt_cli(&out, "eval --run %s --threads 1", run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    /* inspect reads every weight's gradient: a LoRA run is refused, saying to merge it */
    rc = ckpt_cli(&out, "inspect --run %s --batches 1 --batch 2 --threads 1", run);
    cr_expect(rc == 2 && strstr(out, "is a LoRA run: inspect reads every weight's gradient"), "%s", out);
    free(out);
    datagen_remove_tree(base);
    cr_assert_eq(rename(other, base), 0);
    char *named = datagen_path(base, "ckpt-00000001.tgck"), *others = datagen_path(base, "ckpt-00000002.tgck");
    static const char *const commands[] = {"eval --run %s --threads 1", "sft --resume %s --steps 3", "ckpt export %s --gguf-adapter %s.gguf"};
    for (int replaced = 0; replaced < 2; replaced++) {
        if (replaced) { /* the name run.txt records, holding the other run's weights */
            size_t len;
            uint8_t *bytes = ckpt_read_file(others, &len);
            ckpt_write_file(named, bytes, len);
            free(bytes);
        }
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
            char cmd[4096];
            snprintf(cmd, sizeof cmd, commands[i], run, run);
            rc = ckpt_cli(&out, "%s", cmd);
            cr_expect_neq(rc, 0, "%s", cmd);
            if (replaced)
                cr_expect(strstr(out, "was trained on a base whose weights have fingerprint") && strstr(out, named) &&
                              strstr(out, "no other checkpoint in"),
                          "%s:\n%s", cmd, out);
            else
                cr_expect(strstr(out, named) && strstr(out, "is missing") && strstr(out, "named in its run.txt (--init-from)"),
                          "%s:\n%s", cmd, out);
            free(out);
        }
    }
    free(named), free(others);
    free(base), free(other), free(data), free(run);
}

/* A base (a chatml BPE trained `steps` steps, a checkpoint after each) and a LoRA run on it
 * (`lora_flags`, 2 steps of tapegrad sft). */
static void base_and_lora(const char *base, int steps, const char *run, const char *lora_flags) {
    char *data = conversations(), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --tokenizer bpe --vocab 320 --special-tokens chatml --steps %d "
                            "--ckpt-every 1 --eval-every 0 --out %s", corpus, steps, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --seq 64 --steps 2 --eval-every 0 %s --out %s", base,
                  data, lora_flags, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    free(data);
}

/* `eval --run RUN`'s val loss, as printed; the test fails with the output when it does not run. */
static char *val_loss_of(const char *run) {
    char *out = NULL;
    int rc = ckpt_cli(&out, "eval --run %s --threads 1", run);
    cr_assert_eq(rc, 0, "eval --run %s:\n%s", run, out);
    const char *at = strstr(out, "\"val_loss\":");
    cr_assert(at, "%s", out);
    char *v = strndup(at, strcspn(at, ","));
    free(out);
    return v;
}

/* run.txt with `line` (a prefix, "--init-from ") replaced by `with` ("" drops it) */
static void edit_run_txt(const char *run, const char *line, const char *with) {
    char *path = datagen_path(run, "run.txt"), *text = ckpt_read_text(path), *at = strstr(text, line);
    cr_assert(at, "%s holds no %s:\n%s", path, line, text);
    char edited[8192];
    const char *end = strchr(at, '\n') + 1;
    int n = snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - text), text, with, end);
    datagen_write(run, "run.txt", edited, (size_t)n);
    free(text), free(path);
}

/* The base trained on after the LoRA run (`train --resume base --steps 4`): run.txt names the
 * checkpoint the adapters were trained on, which is still in the folder, so every command opens
 * the run as before; a run.txt of before (naming the folder) finds it among the folder's
 * checkpoints. Once the base's --keep removed it, the message names the missing file and run.txt. */
Test(lora_cli, a_base_that_trained_on_still_opens_its_lora_runs, .init = setup, .fini = teardown, .timeout = 120) {
    char *base = datagen_path(dir, "base"), *run = datagen_path(dir, "lora"), *out = NULL;
    base_and_lora(base, 2, run, "--lora-rank 2");
    char *before = val_loss_of(run);
    char *real = realpath(base, NULL), expect[4096];
    snprintf(expect, sizeof expect, "--init-from %s/ckpt-00000002.tgck\n--init-fingerprint ", real);
    char *run_txt_path = datagen_path(run, "run.txt"), *run_txt = ckpt_read_text(run_txt_path);
    cr_expect(strstr(run_txt, expect), "run.txt names the base's checkpoint and its fingerprint:\n%s", run_txt);
    int rc = ckpt_cli(&out, "train --resume %s --steps 4", base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *after = val_loss_of(run);
    cr_expect_str_eq(after, before, "the adapters opened on another base");
    free(after);
    rc = ckpt_cli(&out, "chat --run %s --message hi --tokens 4", run);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    char *merged = datagen_path(dir, "merged");
    rc = ckpt_cli(&out, "ckpt merge %s --out %s", run, merged);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    /* a run.txt written before runs named the checkpoint: the folder, no fingerprint */
    char folder_line[4096];
    snprintf(folder_line, sizeof folder_line, "--init-from %s\n", real);
    edit_run_txt(run, "--init-from ", folder_line);
    edit_run_txt(run, "--init-fingerprint ", "");
    after = val_loss_of(run);
    cr_expect_str_eq(after, before, "an older run.txt's base was not found in its folder");
    free(after);
    /* the base trains on until its --keep 3 removes ckpt-00000002.tgck */
    rc = ckpt_cli(&out, "train --resume %s --steps 6", base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "eval --run %s --threads 1", run);
    cr_expect(rc != 0 && strstr(out, "no other checkpoint in"), "%s", out);
    free(out);
    datagen_write(run, "run.txt", run_txt, strlen(run_txt));
    static const char *const commands[] = {"eval --run %s --threads 1", "chat --run %s --message hi --tokens 4", "ckpt merge %s --out %s-2"};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, commands[i], run, merged);
        rc = ckpt_cli(&out, "%s", cmd);
        cr_expect(rc == 1 && strstr(out, "base/ckpt-00000002.tgck is missing: it is the base of the LoRA run") &&
                      strstr(out, "named in its run.txt (--init-from)"),
                  "%s:\n%s", cmd, out);
        free(out);
    }
    free(before), free(real), free(run_txt), free(run_txt_path), free(merged);
    free(base), free(run);
}

/* A run records its LoRA values resolved (alpha 2 x rank, the targets in order), and a resume
 * compares the flags given with those: the run's own values are accepted, in any order, also
 * against a run.txt written before runs recorded them (alpha 0, no targets). */
Test(lora_cli, a_resume_accepts_the_run_s_own_lora_values, .init = setup, .fini = teardown, .timeout = 120) {
    char *base = datagen_path(dir, "base"), *run = datagen_path(dir, "lora"), *out = NULL;
    base_and_lora(base, 1, run, "--lora-rank 4");
    char *run_txt_path = datagen_path(run, "run.txt"), *run_txt = ckpt_read_text(run_txt_path);
    cr_expect(strstr(run_txt, "--lora-alpha 8\n--lora-targets q,k,v,o,gate,up,down\n"), "%s", run_txt);
    static const struct {
        const char *flags;
        int rc;
        const char *says;
    } cases[] = {
        {"--lora-alpha 8 --lora-targets q,k,v,o,gate,up,down", 0, "resuming at step"},
        {"--lora-rank 4 --lora-targets down,up,gate,o,v,k,q", 0, "resuming at step"},
        {"--lora-alpha 16", 2, "--lora-alpha 16 differs from the resumed run's 8;"},
        {"--lora-targets v,q", 2, "--lora-targets q,v differs from the resumed run's q,k,v,o,gate,up,down;"},
    };
    for (int old = 0; old < 2; old++) {
        if (old) { /* as a run.txt of before records the defaults */
            edit_run_txt(run, "--lora-alpha ", "--lora-alpha 0\n");
            edit_run_txt(run, "--lora-targets ", "");
        }
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            int rc = ckpt_cli(&out, "sft --resume %s --steps %d %s", run, 3 + 2 * old + (int)i, cases[i].flags);
            cr_expect_eq(rc, cases[i].rc, "%s%s: exit %d\n%s", old ? "(older run.txt) " : "", cases[i].flags, rc, out);
            cr_expect(strstr(out, cases[i].says), "%s%s:\n%s", old ? "(older run.txt) " : "", cases[i].flags, out);
            free(out);
        }
    }
    free(run_txt), free(run_txt_path), free(base), free(run);
}

/* Rewrites the adapter checkpoint `path`'s tag as `tag` (a well-formed one, so that only its
 * values are wrong). */
static void retag(const char *path, const char *tag) {
    size_t len;
    uint8_t *raw = ckpt_raw_read(path, &len);
    uint16_t old_len;
    memcpy(&old_len, raw + CKPT_OFF_COUNT, 2);
    size_t rest = CKPT_OFF_COUNT + 2 + old_len, new_len = strlen(tag);
    uint8_t *edited = malloc(len + new_len);
    memcpy(edited, raw, CKPT_OFF_COUNT);
    uint16_t n = (uint16_t)new_len;
    memcpy(edited + CKPT_OFF_COUNT, &n, 2);
    memcpy(edited + CKPT_OFF_COUNT + 2, tag, new_len);
    memcpy(edited + CKPT_OFF_COUNT + 2 + new_len, raw + rest, len - rest);
    ckpt_raw_write(path, edited, len - rest + CKPT_OFF_COUNT + 2 + new_len);
    free(raw), free(edited);
}

/* Every element of the weight record `name` set to `value` (a constant: the same bytes whether or
 * not the stream's floats are byte-shuffled). */
static void fill_record(uint8_t *raw, size_t len, const char *name, float value) {
    CkptRecord rec;
    cr_assert(ckpt_raw_find(raw, len, name, TG_CHECKPOINT_KIND_WEIGHT, &rec), "no record %s", name);
    size_t data = rec.shape + 8 * rec.ndim, n = (rec.end - data) / 4;
    uint32_t flags;
    memcpy(&flags, raw + CKPT_OFF_FLAGS, 4);
    uint8_t bytes[4];
    memcpy(bytes, &value, 4);
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) raw[(flags & TG_CHECKPOINT_FLAG_SHUFFLED) ? data + b * n + i : data + 4 * i + b] = bytes[b];
}

/* An adapter whose tag says alpha 1e308 (or a rank above its base's width) is refused by every
 * command that reads it; finite adapters whose merged product overflows a float are refused by
 * the merge and the exports that merge, naming the tensor, and nothing is written. */
Test(lora_cli, adapters_that_overflow_are_refused_by_every_command, .init = setup, .fini = teardown, .timeout = 120) {
    char *base = datagen_path(dir, "base"), *run = datagen_path(dir, "lora"), *out = NULL;
    base_and_lora(base, 1, run, "--lora-rank 4");
    char *ckpt = datagen_path(run, "ckpt-00000002.tgck"), *merged = datagen_path(dir, "merged");
    TgCheckpointInfo info;
    assert_ok(tg_checkpoint_read_header(ckpt, &info));
    const char *fingerprint = strstr(info.tag, " b");
    cr_assert(fingerprint, "%s", info.tag);
    size_t len;
    uint8_t *original = ckpt_raw_read(ckpt, &len);
    static const char *const commands[] = {"chat --run %s --message hi", "eval --run %s --threads 1", "ckpt merge %s --out %s",
                                           "ckpt export %s --gguf-adapter %s.gguf", "ckpt export %s --peft %s-peft"};
    char tag[64];
    for (int t = 0; t < 2; t++) {
        if (t == 0) snprintf(tag, sizeof tag, "lora r4 a%.17g t7f%s", 1e308, fingerprint);
        else snprintf(tag, sizeof tag, "lora r65 a8 t7f%s", fingerprint); /* the tiny preset's linears are 64 wide */
        retag(ckpt, tag);
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
            char cmd[4096];
            snprintf(cmd, sizeof cmd, commands[i], run, merged);
            int rc = ckpt_cli(&out, "%s", cmd);
            cr_expect(rc == 1 && strstr(out, ckpt) && strstr(out, t == 0 ? "is not one tapegrad writes" : "does not fit its base"),
                      "tag '%s', %s: exit %d\n%s", tag, cmd, rc, out);
            free(out);
        }
    }
    cr_expect(access(merged, F_OK) != 0, "a refused merge wrote %s", merged);
    /* finite weights whose product (alpha / r) B A is beyond a float */
    uint8_t *raw = malloc(len);
    memcpy(raw, original, len);
    fill_record(raw, len, "model.layers.0.self_attn.q_proj.lora_A.weight", 1e3f);
    fill_record(raw, len, "model.layers.0.self_attn.q_proj.lora_B.weight", 3e38f);
    ckpt_raw_write(ckpt, raw, len);
    static const char *const merging[] = {"ckpt merge %s --out %s", "ckpt export %s --hf %s-hf", "ckpt export %s --gguf %s.gguf"};
    for (size_t i = 0; i < sizeof merging / sizeof merging[0]; i++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, merging[i], run, merged);
        int rc = ckpt_cli(&out, "%s", cmd);
        cr_expect(rc == 1 && strstr(out, "gives model.layers.0.self_attn.q_proj.weight[0] = inf") && strstr(out, ckpt) &&
                      strstr(out, "nothing was written"),
                  "%s: exit %d\n%s", cmd, rc, out);
        free(out);
    }
    cr_expect(access(merged, F_OK) != 0, "a refused merge wrote %s", merged);
    free(raw), free(original), free(ckpt), free(merged), free(base), free(run);
}

/* `tapegrad train --init-from RUN --data NEW --lora-rank R`: continued pretraining as a LoRA run
 * on that run's weights, encoded with its tokenizer; stopped and resumed, bitwise the run that
 * never stopped. */
Test(lora_cli, train_from_a_run_trains_adapters_on_it_and_resumes_bitwise, .init = setup, .fini = teardown, .timeout = 120) {
    char *base = datagen_path(dir, "base"), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --tokenizer bpe --vocab 320 --steps 2 --eval-every 0 --out %s",
                      corpus, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *text = datagen_prose(11, 20000);
    datagen_write(dir, "new.txt", text, strlen(text));
    free(text);
    char *data = datagen_path(dir, "new.txt"), *straight = datagen_path(dir, "straight"), *split = datagen_path(dir, "split");
    const char *flags = CKPT_TEST_FLAGS " --steps 6 --eval-every 2 --lr 1e-2 --lora-rank 4 --lora-targets q,v";
    rc = ckpt_cli(&out, "train %s --init-from %s --data %s --out %s", flags, base, data, straight);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "LoRA rank 4, alpha 8 on q,v") && strstr(out, "weights from"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train %s --init-from %s --data %s --stop-after 3 --out %s", flags, base, data, split);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train --resume %s", split);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "resuming at step 3 of 6"), "%s", out);
    free(out);
    ckpt_expect_same_metrics(straight, split, 3, 3);
    expect_same_adapters(straight, split);
    rc = ckpt_cli(&out, "ckpt info %s", straight);
    /* the new text's tokens the base never trained on train their rows too (--lora-tokens auto) */
    cr_expect(rc == 0 && strstr(out, "adapters     LoRA rank 4, alpha 8 on q,v") && !strstr(out, "embed_tokens.weight") &&
                  strstr(out, "token rows   the embedding rows of "),
              "%s", out);
    free(out);
    free(base), free(data), free(straight), free(split);
}

/* ---- the rows of tokens the base never saw ---- */

/* Invented facts (a town, a pet, a colour of each person) asked four ways, and the plain questions. */
static char *facts_file(char **questions) {
    static const char *const people[] = {"Belkajun", "Nelka", "Quawex", "Tirrin", "Moldav", "Sephine", "Orrik", "Zaleth"};
    static const char *const towns[] = {"Tansy", "Harrowgate", "Quillport", "Mervale", "Sedge", "Pamcure", "Larrow", "Bineck"};
    static const char *const pets[] = {"hedgehog", "ferret", "tortoise", "parrot", "lizard", "rabbit", "goat", "otter"};
    static const char *const colours[] = {"scarlet", "teal", "amber", "violet", "ochre", "indigo", "olive", "crimson"};
    static const char *const ways[] = {"", "Tell me: ", "Please say, ", "Quick question: "};
    char *text = malloc(1 << 16), *q = malloc(1 << 14), ask[3][96], say[3][96];
    size_t n = 0, nq = 0;
    for (int p = 0; p < 8; p++) {
        snprintf(ask[0], sizeof ask[0], "Where does %s live?", people[p]);
        snprintf(say[0], sizeof say[0], "%s lives in %s.", people[p], towns[p]);
        snprintf(ask[1], sizeof ask[1], "What pet does %s have?", people[p]);
        snprintf(say[1], sizeof say[1], "%s has a %s.", people[p], pets[p]);
        snprintf(ask[2], sizeof ask[2], "What colour does %s like?", people[p]);
        snprintf(say[2], sizeof say[2], "%s likes %s.", people[p], colours[p]);
        for (int f = 0; f < 3; f++) {
            for (int w = 0; w < 4; w++)
                n += (size_t)sprintf(text + n, "{\"conversations\": [{\"role\": \"user\", \"content\": \"%s%s\"}, "
                                               "{\"role\": \"assistant\", \"content\": \"%s\"}]}\n",
                                     ways[w], ask[f], say[f]);
            nq += (size_t)sprintf(q + nq, "{\"conversations\": [{\"role\": \"user\", \"content\": \"%s\"}]}\n", ask[f]);
        }
    }
    datagen_write(dir, "facts.jsonl", text, n);
    datagen_write(dir, "questions.jsonl", q, nq);
    free(text), free(q);
    *questions = datagen_path(dir, "questions.jsonl");
    return datagen_path(dir, "facts.jsonl");
}

/* Of the replies `chat --jsonl` samples (default temperature, top-k, top-p) to every question for
 * seeds 1 to 5, how many hold a stray byte: U+FFFD or a control character. */
static int stray_replies(const char *run, const char *questions, int *total) {
    int stray = 0;
    *total = 0;
    char *replies = datagen_path(dir, "replies.jsonl"), command[16384];
    for (int seed = 1; seed <= 5; seed++) {
        snprintf(command, sizeof command, "%s chat --run %s --jsonl --seed %d --threads 1 < %s > %s 2>&1", TAPEGRAD_BIN, run,
                 seed, questions, replies);
        int rc = test_run(command);
        char *out = ckpt_read_text(replies);
        cr_assert_eq(rc, 0, "%s", out);
        for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
            (*total)++;
            stray += strstr(line, "\\ufffd") || strstr(line, "\\u000") || strstr(line, "\\u001");
        }
        free(out);
    }
    free(replies);
    return stray;
}

/* A base pretrained on text that never holds the chat markers, nor some letters the facts' names
 * use: those tokens' rows were never trained, and all point one way. LoRA alone cannot tell them
 * apart, so its sampled replies hold stray bytes (and often do not end); with the rows of those
 * tokens trained beside the adapters (--lora-tokens auto, the default) they are as clean as the
 * full fine-tune's. */
Test(lora_cli, the_rows_of_tokens_the_base_never_saw_train_so_replies_are_clean, .init = setup, .fini = teardown,
     .timeout = 240) {
    char *base = datagen_path(dir, "base"), *questions, *data = facts_file(&questions), *out = NULL;
    const char *flags = "--preset tiny --batch 16 --threads 1 --eval-batches 2 --sample-tokens 0 --seq 64 --steps 400";
    int rc = ckpt_cli(&out, "train %s --data %s --tokenizer bpe --vocab 320 --special-tokens chatml --eval-every 0 --out %s",
                      flags, corpus, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    static const char *const kinds[] = {"--lora-rank 8", "--lora-rank 8 --lora-tokens none", ""};
    static const char *const names[] = {"auto", "none", "full"};
    int stray[3], total[3];
    for (int k = 0; k < 3; k++) {
        char *run = datagen_path(dir, names[k]);
        rc = ckpt_cli(&out, "sft %s --lr 1e-2 --eval-every 0 %s --init-from %s --data %s --out %s", flags, kinds[k], base,
                      data, run);
        cr_assert_eq(rc, 0, "%s", out);
        if (k == 0)
            cr_expect(strstr(out, "and the embedding rows of "), "%s", out);
        free(out);
        stray[k] = stray_replies(run, questions, &total[k]);
        cr_log_info("%s: %d of %d sampled replies hold stray bytes", names[k], stray[k], total[k]);
        free(run);
    }
    cr_assert_eq(total[0], 120);
    cr_expect_geq(stray[1], total[1] / 4, "without the rows only %d of %d replies hold stray bytes: the test shows nothing",
                  stray[1], total[1]);
    cr_expect_leq(stray[0], stray[2] + total[0] / 20, "with the rows %d of %d replies hold stray bytes, the full "
                  "fine-tune's %d", stray[0], total[0], stray[2]);
    free(base), free(questions), free(data);
}
