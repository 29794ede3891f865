/* Hostile checkpoints and token files: the crafted inputs that once overflowed a heap buffer
 * (a 100-byte header asking for a 2^62-position RoPE table), asked for gigabytes (ckpt info on a
 * declared count), aborted on an internal check (token ids past the vocabulary) or left a run
 * that could not resume (a negative step) are each refused with one line naming the file and a
 * non-zero exit, by every command that reads them. Also the limits and checked helpers they
 * rest on. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "support/clock.h"
#include "ckptutil.h"
#include "data/tokfile.h"
#include "datagen.h"
#include "lib/checked.h"
#include "tapegrad/params.h"
#include "testutil.h"
#include "checkpoint/checkpoint.h"

static char *dir, *corpus, *run, *ckpt;

static void setup(void) {
    dir = ckpt_test_setup(&corpus);
    run = datagen_path(dir, "run");
    ckpt_train_small(corpus, run, 2, "");
    ckpt = datagen_path(run, "ckpt-00000002.tgck");
}

static void teardown(void) {
    datagen_remove_tree(dir);
    free(dir), free(corpus), free(run), free(ckpt);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* `tapegrad ARGS` (ARGS a format with one %s, the run folder) exits `code` with one line holding
 * every fragment (NULL-terminated list). */
static void expect_refused(const char *args_fmt, int code, const char *const *fragments) {
    char args[8192], *out = NULL;
    snprintf(args, sizeof args, args_fmt, run);
    int rc = ckpt_cli(&out, "%s", args);
    cr_expect_eq(rc, code, "`tapegrad %s` exited %d, expected %d:\n%s", args, rc, code, out);
    cr_expect_eq(count_lines(out), 1, "`tapegrad %s`: not one line:\n%s", args, out);
    for (const char *const *f = fragments; *f; f++)
        cr_expect(strstr(out, *f), "`tapegrad %s`: the message lacks '%s':\n%s", args, *f, out);
    free(out);
}

/* The run's checkpoint rewritten with the i64 config fields [dim, layers, heads, kv_heads, hidden,
 * vocab, seq] given (KEEP keeps a field). */
#define KEEP INT64_MIN
static void write_config(const int64_t fields[7]) {
    size_t len;
    uint8_t *raw = ckpt_raw_read(ckpt, &len);
    for (int i = 0; i < 7; i++)
        if (fields[i] != KEEP) memcpy(raw + CKPT_OFF_CONFIG + 8 * i, &fields[i], 8);
    ckpt_raw_write(ckpt, raw, len);
    free(raw);
}

/* The run's checkpoint rewritten with its trainer state changed by `edit`. The state sits just
 * before the 8-byte end marker: step, tokens seen, 56 loader bytes, best val, elapsed, seed. */
enum { STATE_FROM_END = 8 + 8 + 8 + 8 + TG_LOADER_STATE_BYTES + 8 + 8 };
static void write_state(void (*edit)(TgTrainerState *)) {
    size_t len;
    uint8_t *raw = ckpt_raw_read(ckpt, &len);
    uint8_t *p = raw + len - STATE_FROM_END;
    TgTrainerState s;
    memcpy(&s.step, p, 8), memcpy(&s.tokens_seen, p + 8, 8);
    memcpy(&s.best_val_loss, p + 16 + TG_LOADER_STATE_BYTES, 8), memcpy(&s.elapsed_s, p + 24 + TG_LOADER_STATE_BYTES, 8);
    edit(&s);
    memcpy(p, &s.step, 8), memcpy(p + 8, &s.tokens_seen, 8);
    memcpy(p + 16 + TG_LOADER_STATE_BYTES, &s.best_val_loss, 8), memcpy(p + 24 + TG_LOADER_STATE_BYTES, &s.elapsed_s, 8);
    ckpt_raw_write(ckpt, raw, len);
    free(raw);
}

TestSuite(hostile, .init = setup, .fini = teardown, .timeout = 120);

Test(hostile, overflowing_configs_are_refused_by_every_reader) {
    static const struct {
        int64_t fields[7];
        const char *says;
    } configs[] = {
        /* the RoPE table (seq * hd/2 floats) wrapped to 0 bytes, then 2^62 floats were written */
        {{2, KEEP, 1, 1, KEEP, KEEP, (int64_t)1 << 62}, "--seq 4611686018427387904 is above"},
        /* the parameter store's offsets wrapped: tiny buffers, written far past by the load */
        {{KEEP, KEEP, KEEP, KEEP, (int64_t)1 << 59, KEEP, KEEP}, "--hidden 576460752303423488 is above"},
        {{KEEP, 1000000, KEEP, KEEP, KEEP, KEEP, KEEP}, "--layers 1000000 is above 1024"},
        {{KEEP, KEEP, KEEP, KEEP, KEEP, (int64_t)1 << 40, KEEP}, "--vocab 1099511627776 is above"},
        {{KEEP, KEEP, KEEP, KEEP, KEEP, KEEP, -2}, "--seq must be positive"},
    };
    size_t len;
    uint8_t *good = ckpt_read_file(ckpt, &len);
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        ckpt_write_file(ckpt, good, len);
        write_config(configs[i].fields);
        const char *says[] = {ckpt, "invalid model config", configs[i].says, NULL};
        expect_refused("ckpt info %s", 1, says);
        expect_refused("ckpt export %1$s --safetensors %1$s/export/w.safetensors", 1, says);
        expect_refused("sample --run %s --tokens 2", 1, says);
        expect_refused("eval --run %s", 1, says);
        expect_refused("train --resume %s", 1, says);
    }
    free(good);
}

Test(hostile, a_header_declaring_more_than_the_file_can_hold_is_refused_before_allocating) {
    /* a valid 7B-like shape in a file of a few kB: ~6.7e9 parameters, 80 GB of floats */
    write_config((const int64_t[7]){4096, 32, 32, 32, 11008, 32000, 2048});
    const char *says[] = {ckpt, "declares a model of", "more than a file of", NULL};
    double t0 = tg_clock_seconds();
    expect_refused("ckpt info %s", 1, says);
    expect_refused("ckpt export %1$s --safetensors %1$s/export/w.safetensors", 1, says);
    expect_refused("sample --run %s --tokens 2", 1, says);
    double t1 = tg_clock_seconds();
    double seconds = t1 - t0;
    cr_expect_lt(seconds, 20.0, "three refusals took %.1f s: something was allocated or read first", seconds);
}

Test(hostile, ckpt_info_refuses_a_declared_record_count_the_file_cannot_hold) {
    size_t len;
    uint8_t *raw = ckpt_raw_read(ckpt, &len);
    static const uint32_t counts[] = {0xffffffffu, 3 * 65536 + 1};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        memcpy(raw + CKPT_OFF_COUNT, &counts[i], 4);
        ckpt_raw_write(ckpt, raw, len);
        char count[32];
        snprintf(count, sizeof count, "claims %u tensors", counts[i]);
        expect_refused("ckpt info %s", 1, (const char *[]){ckpt, count, NULL});
    }
    free(raw);
}

Test(hostile, a_record_larger_than_the_file_can_inflate_to_is_refused) {
    size_t len;
    uint8_t *raw = ckpt_raw_read(ckpt, &len);
    CkptRecord rec;
    cr_assert(ckpt_raw_find(raw, len, "model.embed_tokens.weight", TG_CHECKPOINT_KIND_WEIGHT, &rec));
    int64_t rows = (int64_t)1 << 40;
    memcpy(raw + rec.shape, &rows, 8);
    ckpt_raw_write(ckpt, raw, len);
    free(raw);
    expect_refused("ckpt info %s", 1, (const char *[]){ckpt, "impossible in a file of", NULL});
}

/* The run's checkpoint with `value` at index `i` of the record `name` of `kind`. */
static void plant_value(const char *name, int kind, int64_t i, float value) { ckpt_plant_values(ckpt, name, kind, i, 1, value); }

/* A CRC-valid checkpoint holding one NaN or Inf, an AdamW v below 0, or a norm eps no model
 * computes with is refused by every reader, naming the tensor and index: before, eval printed
 * {"val_loss":nan,...}, sample printed only the prompt, ckpt export wrote the NaN, and a resume
 * failed its first step blaming the learning rate. Each of these is also a fuzz regression
 * (tests/fuzz/regressions/checkpoint/non-finite-*, eps-*). */
Test(hostile, non_finite_values_and_a_bad_norm_eps_are_refused_by_every_reader) {
    static const struct {
        const char *tensor;
        int kind;
        int64_t index;
        float value;
        double eps; /* 0: the value above instead */
        const char *says;
    } cases[] = {
        {"model.layers.0.mlp.down_proj.weight", TG_CHECKPOINT_KIND_WEIGHT, 5, NAN, 0,
         "tensor 'model.layers.0.mlp.down_proj.weight' holds NaN at index 5 of"},
        {"model.norm.weight", TG_CHECKPOINT_KIND_WEIGHT, 0, -INFINITY, 0, "tensor 'model.norm.weight' holds -Inf at index 0"},
        {"model.embed_tokens.weight", TG_CHECKPOINT_KIND_ADAM_M, 3, INFINITY, 0,
         "tensor 'model.embed_tokens.weight' (AdamW m) holds +Inf at index 3"},
        {"model.layers.0.self_attn.q_proj.weight", TG_CHECKPOINT_KIND_ADAM_V, 7, -0.5f, 0,
         "(AdamW v) holds a negative value (-0.5) at index 7"},
        {NULL, 0, 0, 0, 1e300, "norm eps must be in [1.17549e-38, 0.01], got 1e+300"},
        {NULL, 0, 0, 0, 1e-40, "norm eps must be in [1.17549e-38, 0.01], got 1e-40"},
    };
    size_t len;
    uint8_t *good = ckpt_read_file(ckpt, &len);
    char *export = datagen_path(dir, "export/w.safetensors"), *hf = datagen_path(dir, "hf");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ckpt_write_file(ckpt, good, len);
        if (cases[i].tensor) {
            plant_value(cases[i].tensor, cases[i].kind, cases[i].index, cases[i].value);
        } else {
            size_t raw_len;
            uint8_t *raw = ckpt_raw_read(ckpt, &raw_len);
            memcpy(raw + CKPT_OFF_CONFIG + 7 * 8 + 4 + 8, &cases[i].eps, 8); /* after the ints, ffn, theta */
            ckpt_raw_write(ckpt, raw, raw_len);
            free(raw);
        }
        const char *says[] = {ckpt, cases[i].says, NULL};
        char args[4096];
        expect_refused("ckpt info %s", 1, says);
        snprintf(args, sizeof args, "ckpt export %%s --safetensors %s", export);
        expect_refused(args, 1, says);
        snprintf(args, sizeof args, "ckpt export %%s --hf %s", hf);
        expect_refused(args, 1, says);
        expect_refused("sample --run %s --tokens 2", 1, says);
        expect_refused("eval --run %s", 1, says);
        expect_refused("inspect --run %s --json", 1, says);
        expect_refused("train --resume %s", 1, says);
        cr_expect_neq(access(export, F_OK), 0, "ckpt export wrote %s", export);
        cr_expect_neq(access(hf, F_OK), 0, "ckpt export wrote %s", hf);
    }
    ckpt_write_file(ckpt, good, len);
    free(good), free(export), free(hf);
}

static void negative_step(TgTrainerState *s) { s->step = -1; }
static void nan_best_val(TgTrainerState *s) { s->best_val_loss = NAN; }
static void negative_elapsed(TgTrainerState *s) { s->elapsed_s = -5; }
static void step_past_the_limit(TgTrainerState *s) { s->step = INT64_MAX; }

Test(hostile, an_invalid_trainer_state_is_refused_and_the_run_stays_resumable) {
    static const struct {
        void (*edit)(TgTrainerState *);
        const char *says;
    } states[] = {
        {negative_step, "an invalid step (step -1,"},
        {nan_best_val, "an invalid best val loss (step 2,"},
        {negative_elapsed, "an invalid elapsed time (step 2,"},
        {step_past_the_limit, "an invalid step (step 9223372036854775807,"},
    };
    size_t len;
    uint8_t *good = ckpt_read_file(ckpt, &len);
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
        write_state(states[i].edit);
        const char *says[] = {ckpt, "the trainer state has", states[i].says, NULL};
        expect_refused("ckpt info %s", 1, says);
        expect_refused("train --resume %s", 1, says);
        ckpt_write_file(ckpt, good, len);
    }
    free(good);
    /* nothing was saved under a name the folder reader refuses (ckpt--0000001.tgck) */
    ckpt_expect_resume_reaches(run, "--steps 3", 3, "the untouched run");
}

Test(hostile, token_ids_past_the_model_vocabulary_are_refused_not_aborted_on) {
    TgModel m;
    TgCheckpointInfo info;
    assert_ok(ckpt_load_model(ckpt, &m, &info));
    uint32_t vocab = (uint32_t)m.cfg.vocab;
    tg_model_free(&m);
    /* a val split of another tokenizer: ids up to vocab + 99, no fingerprint recorded */
    int32_t ids[400];
    for (int i = 0; i < 400; i++) ids[i] = (int32_t)(vocab + (uint32_t)(i % 100));
    char *val = datagen_path(run, "val.tok");
    assert_ok(tg_tokfile_write(val, ids, 400, vocab + 100));
    char vocab_text[64];
    snprintf(vocab_text, sizeof vocab_text, "past the model's vocabulary of %u ids", vocab);
    const char *says[] = {val, vocab_text, NULL};
    expect_refused("eval --run %s", 1, says);
    expect_refused("inspect --run %s --batches 1 --batch 1", 1, says);
    expect_refused("train --resume %s", 1, says);
    /* the reader itself, for a tokenizer of that vocabulary */
    int32_t *back;
    size_t n;
    assert_fails(tg_tokfile_read_for(val, vocab, 0, &back, &n), TG_ERR_MISMATCH, "past the model's vocabulary");
    cr_expect_null(back);
    assert_ok(tg_tokfile_read_for(val, vocab + 100, 0, &back, &n));
    free(back);
    free(val);
}

Test(hostile, a_checkpoint_name_too_long_for_int64_names_no_checkpoint) {
    char *latest = datagen_path(run, "latest");
    const char *name = "ckpt-99999999999999999999999.tgck\n";
    ckpt_write_file(latest, name, strlen(name));
    free(latest);
    expect_refused("ckpt info %s", 1, (const char *[]){"does not name a checkpoint", NULL});
    expect_refused("train --resume %s", 1, (const char *[]){"does not name a checkpoint", NULL});
}

/* ---- the limits and the checked arithmetic under them ---- */

Test(limits, checked_arithmetic_reports_every_overflow) {
    size_t s;
    int64_t i;
    cr_expect(tg_mul_size(SIZE_MAX / 2, 2, &s) && s == SIZE_MAX - 1);
    cr_expect_not(tg_mul_size(SIZE_MAX / 2 + 1, 2, &s));
    cr_expect_not(tg_add_size(SIZE_MAX, 1, &s));
    cr_expect_not(tg_mul_i64((int64_t)1 << 62, 2, &i));
    cr_expect(tg_mul_i64((int64_t)1 << 61, -4, &i) && i == INT64_MIN);
    cr_expect_not(tg_add_i64(INT64_MAX, 1, &i));
    cr_expect_not(tg_bytes_of(-1, 4, &s));
    cr_expect_not(tg_bytes_of(INT64_MAX, 4, &s));
    cr_expect(tg_bytes_of(3, 4, &s) && s == 12);
    /* doubles from JSON: only whole numbers in range become integers */
    cr_expect(tg_double_to_i64(42.0, 0, 100, &i) && i == 42);
    const double refused[] = {NAN, INFINITY, -INFINITY, 1e300, 9223372036854775808.0, 2.5, -1.0, 101.0};
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++)
        cr_expect_not(tg_double_to_i64(refused[k], 0, 100, &i), "%g was accepted", refused[k]);
}

Test(limits, model_configs_beyond_a_limit_are_refused_naming_the_setting) {
    TgModelConfig ok;
    assert_ok(tg_model_preset("tiny", &ok));
    ok.vocab = 100;
    assert_ok(tg_model_config_validate(&ok));
    cr_expect_eq(tg_model_config_param_count(&ok) > 0, true);
    TgModelConfig c = ok;
    c.seq_len = TG_MODEL_MAX_SEQ + 1;
    assert_fails(tg_model_config_validate(&c), TG_ERR_ARG, "`seq_len` 1048577 is above 1048576");
    c = ok, c.n_layers = TG_MODEL_MAX_LAYERS + 1;
    assert_fails(tg_model_config_validate(&c), TG_ERR_ARG, "`n_layers` 1025 is above 1024");
    c = ok, c.dim = 2, c.n_heads = 1, c.n_kv_heads = 1, c.seq_len = TG_MODEL_MAX_SEQ;
    assert_ok(tg_model_config_validate(&c)); /* 2^20 positions of head size 2 fit the RoPE table */
    c.dim = 256, c.n_heads = 1, c.n_kv_heads = 1;
    assert_fails(tg_model_config_validate(&c), TG_ERR_ARG, "needs a RoPE table of more than");
    c = ok, c.dim = TG_MODEL_MAX_DIM, c.n_heads = 64, c.n_kv_heads = 64, c.hidden = TG_MODEL_MAX_HIDDEN, c.n_layers = 64;
    assert_fails(tg_model_config_validate(&c), TG_ERR_ARG, "more than");
    c = ok, c.hidden = INT64_MAX / 2, c.n_layers = INT64_MAX / 2;
    cr_expect_eq(tg_model_config_param_count(&c), -1, "an overflowing count must be -1");
}

static void overflowing_shape(void *ctx) {
    TgTensor t;
    tg_tensor_set_shape(&t, 3, (const int64_t[]){(int64_t)1 << 30, (int64_t)1 << 30, 1 << 10});
}

static void repeated_parameter(void *ctx) {
    TgParamStore ps;
    tg_params_init(&ps);
    tg_params_add(&ps, "w", 1, (const int64_t[]){4}, true, TG_PARAM_INIT_ZEROS);
    tg_params_add(&ps, "w", 1, (const int64_t[]){4}, true, TG_PARAM_INIT_ZEROS);
    tg_params_finalize(&ps);
}

Test(limits, shapes_and_parameter_stores_abort_rather_than_wrap) {
    char msg[1024];
    cr_expect_eq(test_run_expecting_abort(overflowing_shape, NULL, msg, sizeof msg), SIGABRT, "%s", msg);
    cr_expect(strstr(msg, "takes the tensor past"), "%s", msg);
    cr_expect_eq(test_run_expecting_abort(repeated_parameter, NULL, msg, sizeof msg), SIGABRT, "%s", msg);
    cr_expect(strstr(msg, "parameter 'w' added twice"), "%s", msg);
}

/* Every parameter is looked up by name when a checkpoint loads: with a scan per lookup (and per
 * add, for the uniqueness check) 60,000 tensors took ~2*10^9 string compares. */
Test(limits, parameter_names_are_found_in_log_time) {
    enum { N = 60000 };
    double t0 = tg_clock_seconds();
    TgParamStore ps;
    tg_params_init(&ps);
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "layer.%05d.w", i);
        tg_params_add(&ps, name, 1, (const int64_t[]){1}, true, TG_PARAM_INIT_ZEROS);
    }
    tg_params_finalize(&ps);
    int found = 0;
    for (int i = N - 1; i >= 0; i--) {
        snprintf(name, sizeof name, "layer.%05d.w", i);
        found += tg_params_index(&ps, name) == i;
    }
    double t1 = tg_clock_seconds();
    cr_expect_eq(found, N);
    cr_expect_eq(tg_params_index(&ps, "layer.99999.w"), -1);
    tg_params_free(&ps);
    double seconds = t1 - t0;
    cr_expect_lt(seconds, 2.0, "adding and finding %d parameters took %.2f s", N, seconds);
}
