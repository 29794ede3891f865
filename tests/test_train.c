/* Training end to end: a tiny model overfits a short text, runs are reproducible bitwise,
 * KV-cache decoding equals full recomputation, and bad input is refused with a message. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/loader.h"
#include "tapegrad/tokenizer.h"
#include "datagen.h"
#include "testutil.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_folder.h"
#include "tapegrad/model.h"
#include "tapegrad/optim.h"
#include "tapegrad/sample.h"

static TgModelConfig tiny_config(int64_t vocab) {
    TgModelConfig c;
    cr_assert_eq(tg_model_preset("tiny", &c), TG_OK);
    c.vocab = vocab;
    return c;
}

Test(train, tiny_model_overfits_a_200_character_text, .timeout = 120) {
    const char *text =
        "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a "
        "single step. All that glitters is not gold; fortune favours the bold, and time waits for "
        "no one at all, ever!!!";
    size_t len = strlen(text);
    cr_assert_eq(len, 200);
    TgTokenizer tok = {0};
    cr_assert_eq(tg_tokenizer_char_train(text, len, &tok), TG_OK);
    int32_t *ids = malloc(len * sizeof *ids);
    size_t n;
    cr_assert_eq(tg_tokenizer_encode(&tok, text, len, ids, len, &n), TG_OK);
    TgModel m;
    TgModelConfig c = tiny_config(tok.vocab_size);
    tg_model_build(&m, &c);
    tg_model_init_weights(&m, 1);
    TestTape tt;
    test_tape_init(&tt, 2);
    TgLoader ld;
    int64_t B = 8, T = c.seq_len;
    cr_assert_eq(tg_loader_init(&ld, ids, n, B, T, 7), TG_OK);
    int32_t in[8 * 32], tg[8 * 32];
    TgAdamWConfig opt = tg_adamw_defaults();
    opt.weight_decay = 0.0;
    TgLrSchedule sched = {.lr = 3e-3, .min_lr = 3e-4, .warmup = 20, .total = 300};
    double loss = INFINITY, first = 0;
    int64_t step;
    for (step = 0; step < 300 && loss >= 0.1; step++) {
        tg_loader_next(&ld, in, tg);
        tg_params_zero_grad(&m.params);
        TgTensor *l = tg_model_loss(&m, &tt.tape, &(TgBatch){.tokens = in, .targets = tg, .batch = B, .seq = T}, NULL);
        loss = l->data[0];
        if (step == 0) first = loss;
        tg_tape_backward(&tt.tape, l);
        tg_tape_reset(&tt.tape);
        tg_clip_grad_norm(&m.params, 1.0);
        tg_adamw_step(&m.params, &opt, step + 1, tg_lr_at(&sched, step), tt.pool);
    }
    fprintf(stderr, "overfit: loss %.4f -> %.4f after %lld steps\n", first, loss, (long long)step);
    cr_expect(fabs(first - log((double)tok.vocab_size)) < 0.3, "first loss %.3f, ln V %.3f", first,
              log((double)tok.vocab_size));
    cr_expect_lt(loss, 0.1, "loss %.4f after 300 steps", loss);
    test_tape_free(&tt);
    tg_model_free(&m);
    tg_tokenizer_free(&tok);
    free(ids);
}

Test(train, kv_cache_decoding_equals_full_recomputation) {
    TgModel m;
    TgModelConfig c = tiny_config(37);
    c.n_kv_heads = 1; /* exercise GQA */
    tg_model_build(&m, &c);
    tg_model_init_weights(&m, 3);
    /* larger weights than at init, so the logits differ clearly between positions */
    for (size_t i = 0; i < m.params.total; i++) m.params.data[i] *= 10.0f;
    TestTape tt;
    test_tape_init(&tt, 2);
    tg_tape_set_grad_enabled(&tt.tape, false);
    int64_t T = 20;
    int32_t tokens[20];
    for (int i = 0; i < T; i++) tokens[i] = (i * 7 + 3) % 37;
    TgTensor *full = tg_model_forward(&m, &tt.tape, &(TgBatch){.tokens = tokens, .batch = 1, .seq = T}, NULL);
    float *expect = malloc((size_t)full->numel * sizeof(float));
    memcpy(expect, full->data, (size_t)full->numel * sizeof(float));
    tg_tape_reset(&tt.tape);
    TgKVCache cache;
    tg_kv_cache_init(&cache, &c, c.seq_len);
    double worst = 0, scale = 0;
    /* a 5-token prompt, then one token at a time */
    TgTensor *first = tg_model_forward(&m, &tt.tape, &(TgBatch){.tokens = tokens, .batch = 1, .seq = 5}, &cache);
    for (int64_t i = 0; i < 5 * c.vocab; i++) worst = fmax(worst, fabs(first->data[i] - expect[i]));
    tg_tape_reset(&tt.tape);
    for (int64_t t = 5; t < T; t++) {
        TgTensor *step = tg_model_forward(&m, &tt.tape, &(TgBatch){.tokens = &tokens[t], .batch = 1, .seq = 1}, &cache);
        for (int64_t v = 0; v < c.vocab; v++) {
            worst = fmax(worst, fabs(step->data[v] - expect[t * c.vocab + v]));
            scale = fmax(scale, fabs(expect[t * c.vocab + v]));
        }
        tg_tape_reset(&tt.tape);
    }
    cr_expect_eq(cache.len, T);
    cr_expect_gt(scale, 0.1);
    cr_expect_lt(worst, 1e-4 * scale, "cached logits differ by %g (scale %g)", worst, scale);
    tg_kv_cache_free(&cache);
    free(expect);
    test_tape_free(&tt);
    tg_model_free(&m);
}

Test(train, sampling_is_deterministic) {
    TgModel m;
    TgModelConfig c = tiny_config(29);
    tg_model_build(&m, &c);
    tg_model_init_weights(&m, 5);
    for (size_t i = 0; i < m.params.total; i++) m.params.data[i] *= 20.0f;
    TestTape tt;
    test_tape_init(&tt, 1);
    int32_t prompt[3] = {1, 2, 3}, a[64], b[64], d[64];
    TgSampleOptions greedy = {.temperature = 0.0}, warm = {.temperature = 1.0, .top_k = 10};
    TgRng r1, r2;
    tg_rng_seed(&r1, 1);
    tg_rng_seed(&r2, 2);
    int64_t na = tg_sample_generate(&(TgSampler){&m, &tt.tape, &greedy, &r1}, prompt, 3, 60, -1, a);
    int64_t nb = tg_sample_generate(&(TgSampler){&m, &tt.tape, &greedy, &r2}, prompt, 3, 60, -1, b);
    cr_assert_eq(na, 63);
    cr_assert_eq(nb, 63);
    cr_expect_eq(memcmp(a, b, sizeof(int32_t) * 63), 0, "greedy decoding depends on the seed");
    /* greedy = argmax of the full recomputation at every position inside the context (the wrap
     * is tested in test_sample.c) */
    TgTensor *logits = tg_model_forward(&m, &tt.tape, &(TgBatch){.tokens = a, .batch = 1, .seq = c.seq_len}, NULL);
    for (int64_t t = 2; t + 1 < c.seq_len; t++) {
        const float *row = logits->data + t * c.vocab;
        int64_t best = 0;
        for (int64_t v = 1; v < c.vocab; v++)
            if (row[v] > row[best]) best = v;
        cr_expect_eq(a[t + 1], best, "position %lld: greedy token %d, argmax %lld", (long long)t + 1, a[t + 1],
                     (long long)best);
    }
    tg_tape_reset(&tt.tape);
    tg_rng_seed(&r1, 9);
    tg_rng_seed(&r2, 9);
    tg_sample_generate(&(TgSampler){&m, &tt.tape, &warm, &r1}, prompt, 3, 60, -1, b);
    tg_sample_generate(&(TgSampler){&m, &tt.tape, &warm, &r2}, prompt, 3, 60, -1, d);
    cr_expect_eq(memcmp(b, d, sizeof(int32_t) * 63), 0, "same seed, different samples");
    test_tape_free(&tt);
    tg_model_free(&m);
}

Test(train, lr_schedule_warmup_then_cosine) {
    TgLrSchedule s = {.lr = 1.0, .min_lr = 0.1, .warmup = 10, .total = 110};
    cr_expect_float_eq(tg_lr_at(&s, 0), 0.1, 1e-12);
    cr_expect_float_eq(tg_lr_at(&s, 9), 1.0, 1e-12);
    cr_expect_float_eq(tg_lr_at(&s, 10), 1.0, 1e-12);
    cr_expect_float_eq(tg_lr_at(&s, 60), 0.55, 1e-12); /* halfway: (lr + min) / 2 */
    cr_expect_float_eq(tg_lr_at(&s, 110), 0.1, 1e-12);
    for (int64_t t = 11; t < 110; t++) cr_expect_leq(tg_lr_at(&s, t), tg_lr_at(&s, t - 1));
}

Test(train, minimind_26m_has_25829888_parameters) {
    TgModelConfig c;
    cr_assert_eq(tg_model_preset("minimind-26m", &c), TG_OK);
    TgModel m;
    tg_model_build(&m, &c);
    cr_expect_eq(tg_model_param_count(&m), 25829888);
    cr_expect_eq(tg_model_swiglu_hidden(512), 1408);
    tg_model_free(&m);
}

/* MiniMind-3's dense model: dim 768, 8 layers, 8 / 4 heads of 96, SwiGLU hidden by its pi rule
 * (2432), QK-norm (gains of 96 per layer for q and k), eps 1e-6, vocab 6400, tied. */
Test(train, minimind_3_has_63912192_parameters) {
    TgModelConfig c;
    cr_assert_eq(tg_model_preset("minimind-3", &c), TG_OK);
    cr_expect(c.qk_norm);
    cr_expect_eq(c.norm_eps, 1e-6);
    cr_expect_eq(tg_model_config_param_count(&c), 63912192);
    TgModel m;
    tg_model_build(&m, &c);
    cr_expect_eq(tg_model_param_count(&m), 63912192);
    cr_expect_eq(m.layers[7].q_norm->numel, 96);
    cr_expect_str_eq(m.layers[7].k_norm->name, "model.layers.7.self_attn.k_norm.weight");
    tg_model_free(&m);
    cr_expect_eq(tg_model_preset_hidden_rule(TG_PRESET_MINIMIND_3), TG_FFN_HIDDEN_PI);
    /* the pi rule: ceil(dim pi / 64) x 64; eight-thirds: 64 ceil(8 dim / 3 / 64) */
    cr_expect_eq(tg_model_ffn_hidden_by(TG_FFN_SWIGLU, TG_FFN_HIDDEN_PI, 768), 2432);
    cr_expect_eq(tg_model_ffn_hidden_by(TG_FFN_SWIGLU, TG_FFN_HIDDEN_PI, 512), 1664);
    cr_expect_eq(tg_model_ffn_hidden_by(TG_FFN_SWIGLU, TG_FFN_HIDDEN_EIGHT_THIRDS, 512), 1408);
    cr_expect_eq(tg_model_ffn_hidden_by(TG_FFN_RELU, TG_FFN_HIDDEN_PI, 512), 2048);
}

/* ------------------------------------------------------------------ through the CLI */

static char *scratch;
static void make_scratch(void) { scratch = datagen_tempdir(); }
static void drop_scratch(void) {
    datagen_remove_tree(scratch);
    free(scratch);
}

/* Runs the CLI; returns its exit code and leaves stderr in scratch/err.txt. */
static int cli(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s > out.txt 2> err.txt", scratch, TAPEGRAD_BIN, args);
    return test_run(cmd);
}

static char *read_file(const char *name) {
    char *path = datagen_path(scratch, name);
    FILE *f = fopen(path, "rb");
    free(path);
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = calloc((size_t)n + 1, 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) buf[0] = '\0';
    fclose(f);
    return buf;
}

static void expect_refused(const char *args, const char *fragment) {
    int rc = cli(args);
    char *err = read_file("err.txt");
    cr_expect_neq(rc, 0, "`tapegrad %s` exited 0", args);
    cr_expect(rc != 134 && rc != 139, "`tapegrad %s` crashed (exit %d): %s", args, rc, err);
    cr_expect_not_null(strstr(err, fragment), "`tapegrad %s`: message lacks '%s': %s", args, fragment, err);
    size_t lines = 0;
    for (char *p = err; *p; p++) lines += *p == '\n';
    cr_expect_eq(lines, 1, "`tapegrad %s`: expected one message line, got: %s", args, err);
    free(err);
}

TestSuite(cli, .init = make_scratch, .fini = drop_scratch, .timeout = 120);

Test(cli, bad_input_is_refused_with_one_clear_message) {
    char *text = datagen_english(1, 20000);
    datagen_write(scratch, "corpus.txt", text, strlen(text));
    datagen_write(scratch, "short.txt", "tiny text", 9);
    datagen_write(scratch, "empty.txt", "", 0);
    datagen_write(scratch, "blob.bin", "\0\1\2\3\0\0\5\6\0\0\0\0", 12);
    datagen_write(scratch, "emptydir/.keep", "", 0);
    datagen_write(scratch, "afile", "x", 1);
    free(text);
    expect_refused("train --data missing.txt --out r", "missing.txt");
    expect_refused("train --data empty.txt --out r", "empty.txt");
    expect_refused("train --data blob.bin --out r", "binary");
    expect_refused("train --preset tiny --data short.txt --out r", "tokens");
    expect_refused("train --preset tiny --data corpus.txt --tokenizer bpe --vocab 100000 --out r", "vocab");
    expect_refused("train --preset tiny --data corpus.txt --steps 0 --out r", "--steps");
    expect_refused("train --preset tiny --data corpus.txt --steps -5 --out r", "--steps");
    expect_refused("train --preset tiny --data corpus.txt --dim 60 --heads 7 --out r", "--heads");
    expect_refused("train --preset tiny --data corpus.txt --heads 4 --kv-heads 3 --out r", "--kv-heads");
    expect_refused("train --preset tiny --data corpus.txt --out afile/run", "afile/run");
    expect_refused("train --preset huge --data corpus.txt --out r", "preset");
    expect_refused("train --tokenizer words --data corpus.txt --out r", "--tokenizer");
    expect_refused("train --lr abc", "--lr");
    expect_refused("train --frobnicate", "--frobnicate");
    expect_refused("sample --run nowhere", "nowhere");
    expect_refused("sample --run emptydir", "emptydir");
}

static void last_checkpoint_params(const char *run, TgModel *m) {
    char *dir = datagen_path(scratch, run);
    char path[4096];
    cr_assert_eq(tg_checkpoint_resolve(dir, path, sizeof path), TG_OK, "%s", tg_error_message());
    TgModelConfig c;
    uint64_t fp;
    cr_assert_eq(tg_checkpoint_read_config(path, &c, &fp), TG_OK, "%s", tg_error_message());
    tg_model_build(m, &c);
    cr_assert_eq(tg_checkpoint_load(path, m, NULL), TG_OK, "%s", tg_error_message());
    free(dir);
}

/* the "loss" values of metrics.jsonl, in order */
static char *losses_of(const char *run) {
    char name[256];
    snprintf(name, sizeof name, "%s/metrics.jsonl", run);
    char *all = read_file(name), *out = calloc(strlen(all) + 1, 1);
    for (char *p = all; (p = strstr(p, "\"loss\":")); p += 7) {
        strncat(out, p + 7, strcspn(p + 7, ",}"));
        strcat(out, " ");
    }
    free(all);
    return out;
}

Test(cli, same_seed_and_threads_give_bitwise_identical_runs) {
    char *text = datagen_english(2, 30000);
    datagen_write(scratch, "corpus.txt", text, strlen(text));
    free(text);
    const char *args = "train --preset tiny --data corpus.txt --steps 30 --eval-every 10 --threads 2 --seed 5 "
                       "--sample-tokens 0 --out ";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s a", args);
    cr_assert_eq(cli(cmd), 0, "first run failed");
    snprintf(cmd, sizeof cmd, "%s b", args);
    cr_assert_eq(cli(cmd), 0, "second run failed");
    char *la = losses_of("a"), *lb = losses_of("b");
    cr_expect_gt(strlen(la), 30);
    cr_expect_str_eq(la, lb);
    TgModel ma, mb;
    last_checkpoint_params("a", &ma);
    last_checkpoint_params("b", &mb);
    cr_assert_eq(ma.params.total, mb.params.total);
    cr_expect_eq(memcmp(ma.params.data, mb.params.data, ma.params.total * sizeof(float)), 0, "weights differ");
    cr_expect_eq(memcmp(ma.params.m, mb.params.m, ma.params.total * sizeof(float)), 0, "AdamW m differs");
    /* and a different seed gives a different run */
    snprintf(cmd, sizeof cmd, "%s", "train --preset tiny --data corpus.txt --steps 30 --eval-every 10 --threads 2 "
                                   "--seed 6 --sample-tokens 0 --out c");
    cr_assert_eq(cli(cmd), 0);
    char *lc = losses_of("c");
    cr_expect_str_neq(la, lc);
    free(la);
    free(lb);
    free(lc);
    tg_model_free(&ma);
    tg_model_free(&mb);
}

Test(cli, train_then_sample_and_eval) {
    char *text = datagen_english(3, 40000);
    datagen_write(scratch, "corpus.txt", text, strlen(text));
    free(text);
    cr_assert_eq(cli("train --preset tiny --data corpus.txt --steps 60 --sample-tokens 50 --out run"), 0);
    char *out = read_file("out.txt");
    cr_expect_not_null(strstr(out, "--- sample"), "no sample printed: %s", out);
    free(out);
    char *metrics = read_file("run/metrics.jsonl");
    const char *keys[] = {"\"step\"", "\"loss\"", "\"val_loss\"", "\"lr\"", "\"grad_norm\"", "\"tokens_per_s\"", "\"elapsed_s\""};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cr_expect_not_null(strstr(metrics, keys[i]), "metrics.jsonl lacks %s", keys[i]);
    free(metrics);
    cr_assert_eq(cli("sample --run run --prompt 'The ' --tokens 40 --temperature 0"), 0);
    char *s1 = read_file("out.txt");
    cr_assert_eq(cli("sample --run run --prompt 'The ' --tokens 40 --temperature 0 --seed 99"), 0);
    char *s2 = read_file("out.txt");
    cr_expect_str_eq(s1, s2, "greedy samples differ");
    cr_expect_eq(strncmp(s1, "The ", 4), 0, "sample does not start with the prompt: %s", s1);
    free(s1);
    free(s2);
    cr_assert_eq(cli("eval --run run"), 0);
    char *ev = read_file("out.txt");
    double val = -1;
    char *p = strstr(ev, "\"val_loss\":");
    cr_assert_not_null(p, "eval printed: %s", ev);
    val = strtod(p + 11, NULL);
    cr_expect(val > 0 && val < 4.0, "val loss %f", val);
    free(ev);
}
