/* Checkpoint files: exact round trips in every format variant, and every way a file can be bad
 * refused with one message naming the file and the problem, a non-zero exit from the CLI
 * (`tapegrad sample --run FILE` and `tapegrad train --resume DIR`), and the good checkpoint
 * beside it untouched and still loading. A save that fails keeps the last good checkpoint. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "tapegrad/rng.h"
#include "testutil.h"
#include "checkpoint/checkpoint_folder.h"

static char *dir, *corpus, *run, *good, *bad;
static uint8_t *good_bytes;
static size_t good_len;

/* A run folder with checkpoints at steps 3 and 6; `latest` names step 6, the "good" one. */
static void setup_run(void) {
    dir = ckpt_test_setup(&corpus);
    run = datagen_path(dir, "run");
    char *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 6 --ckpt-every 3 --keep 0 --eval-every 3 --out %s",
                      corpus, run);
    cr_assert_eq(rc, 0, "training the fixture failed:\n%s", out);
    free(out);
    good = datagen_path(run, "ckpt-00000006.tgck");
    bad = datagen_path(run, "ckpt-00000099.tgck");
    good_bytes = ckpt_read_file(good, &good_len);
}

static void teardown_run(void) {
    datagen_remove_tree(dir);
    free(dir), free(corpus), free(run), free(good), free(bad), free(good_bytes);
}

static void set_latest(const char *name) {
    char *path = datagen_path(run, "latest");
    char line[128];
    snprintf(line, sizeof line, "%s\n", name);
    ckpt_write_file(path, line, strlen(line));
    free(path);
}

/* The good checkpoint: same bytes as written, and it loads. */
static void expect_good_intact(const char *label) {
    size_t len;
    uint8_t *now = ckpt_read_file(good, &len);
    cr_expect(len == good_len && memcmp(now, good_bytes, len) == 0, "%s: the good checkpoint changed", label);
    free(now);
    TgModel m;
    TgCheckpointInfo info;
    cr_expect_eq(ckpt_load_model(good, &m, &info), TG_OK, "%s: the good checkpoint no longer loads: %s", label,
                 tg_error_message());
    if (info.state.step == 6) tg_model_free(&m);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* `bytes` as the newest checkpoint of the run: both CLIs refuse it, in one line naming the file
 * and `problem`; then it is removed and the good one must be intact. */
static void expect_refused(const char *label, const void *bytes, size_t len, const char *problem) {
    ckpt_write_file(bad, bytes, len);
    char *out = NULL;
    int rc = ckpt_cli(&out, "sample --run %s --tokens 4", bad);
    cr_expect_eq(rc, 1, "%s: sample exited %d:\n%s", label, rc, out);
    cr_expect(strstr(out, bad) && strstr(out, problem), "%s: sample's message lacks the file or '%s':\n%s", label, problem, out);
    cr_expect_eq(count_lines(out), 1, "%s: not one line:\n%s", label, out);
    free(out);

    set_latest("ckpt-00000099.tgck");
    rc = ckpt_cli(&out, "train --resume %s", run);
    cr_expect_eq(rc, 1, "%s: train --resume exited %d:\n%s", label, rc, out);
    cr_expect(strstr(out, "ckpt-00000099.tgck") && strstr(out, problem), "%s: resume's message lacks the file or '%s':\n%s",
              label, problem, out);
    cr_expect(strstr(out, "ckpt-00000006.tgck"), "%s: resume's message does not point at the good checkpoint:\n%s", label, out);
    free(out);
    set_latest("ckpt-00000006.tgck");
    unlink(bad);
    expect_good_intact(label);
}

static uint8_t *good_raw(size_t *len) { return ckpt_raw_read(good, len); }

/* The raw stream compressed into a buffer, to hand to expect_refused. */
static uint8_t *compress_raw(const uint8_t *raw, size_t len, size_t *out_len) {
    char *path = datagen_path(dir, "crafted.gz");
    ckpt_raw_write(path, raw, len);
    uint8_t *bytes = ckpt_read_file(path, out_len);
    unlink(path);
    free(path);
    return bytes;
}

static void expect_raw_refused(const char *label, const uint8_t *raw, size_t len, const char *problem) {
    size_t n;
    uint8_t *bytes = compress_raw(raw, len, &n);
    expect_refused(label, bytes, n, problem);
    free(bytes);
}

TestSuite(refusal, .init = setup_run, .fini = teardown_run, .timeout = 120);

Test(refusal, file_cut_at_every_tenth_of_its_length) {
    for (int tenth = 1; tenth <= 9; tenth++) {
        char label[32];
        snprintf(label, sizeof label, "cut at %d0%%", tenth);
        expect_refused(label, good_bytes, good_len * (size_t)tenth / 10, "truncated checkpoint");
    }
    expect_refused("gzip trailer cut", good_bytes, good_len - 4, "truncated checkpoint");
}

Test(refusal, flipped_bytes_and_extra_bytes) {
    uint8_t *copy = malloc(good_len + 8);
    const int percents[] = {20, 50, 80, 99};
    for (int i = 0; i < 4; i++) {
        memcpy(copy, good_bytes, good_len);
        size_t at = good_len * (size_t)percents[i] / 100;
        copy[at] ^= 0x5a;
        char label[48];
        snprintf(label, sizeof label, "byte %zu of %zu flipped", at, good_len);
        expect_refused(label, copy, good_len, "corrupt checkpoint");
    }
    memcpy(copy, good_bytes, good_len);
    memcpy(copy + good_len, "garbage!", 8);
    expect_refused("bytes appended", copy, good_len + 8, "extra bytes after the end of the gzip stream");
    free(copy);
}

Test(refusal, files_that_are_not_checkpoints) {
    expect_refused("empty file", "", 0, "empty file");
    const char *text = "step,loss\n1,3.4\n";
    expect_refused("a text file", text, strlen(text), "not a gzip file");
    char *other = datagen_english(3, 5000);
    expect_raw_refused("gzip of a text", (const uint8_t *)other, strlen(other), "without the tapegrad checkpoint magic");
    free(other);

    size_t len;
    uint8_t *raw = good_raw(&len);
    uint32_t version = 3;
    memcpy(raw + CKPT_OFF_VERSION, &version, 4);
    expect_raw_refused("future version", raw, len, "format version 3; this tapegrad reads versions 1 to 2 (a newer tapegrad");
    version = 2;
    memcpy(raw + CKPT_OFF_VERSION, &version, 4);
    uint32_t flags = 0x81;
    memcpy(raw + CKPT_OFF_FLAGS, &flags, 4);
    expect_raw_refused("unknown flags", raw, len, "unknown checkpoint flags 0x81");
    free(raw);
}

Test(refusal, config_mismatches) {
    size_t len;
    uint8_t *raw = good_raw(&len);
    int64_t vocab, layers;
    memcpy(&vocab, raw + CKPT_OFF_CONFIG + 5 * 8, 8);
    int64_t other_vocab = vocab + 1;
    memcpy(raw + CKPT_OFF_CONFIG + 5 * 8, &other_vocab, 8);
    expect_raw_refused("vocab unlike the tokenizer's", raw, len, "vocabulary of");
    memcpy(raw + CKPT_OFF_CONFIG + 5 * 8, &vocab, 8);
    memcpy(&layers, raw + CKPT_OFF_CONFIG + 8, 8);
    cr_assert_eq(layers, 2);
    int64_t one = 1;
    memcpy(raw + CKPT_OFF_CONFIG + 8, &one, 8);
    expect_raw_refused("config says 1 layer, tensors hold 2", raw, len,
                       "tensor 'model.layers.1.input_layernorm.weight' (weight) is not part of this model");
    free(raw);

    /* loading into a model of another shape */
    TgModel m;
    TgModelConfig cfg;
    uint64_t fingerprint;
    cr_assert_eq(tg_checkpoint_read_config(good, &cfg, &fingerprint), TG_OK);
    cfg.dim = 32, cfg.hidden = 96;
    tg_model_build(&m, &cfg);
    cr_expect_eq(tg_checkpoint_load(good, &m, NULL), TG_ERR_MISMATCH);
    cr_expect(strstr(tg_error_message(), good) && strstr(tg_error_message(), "differs from the one asked for"), "%s",
              tg_error_message());
    tg_model_free(&m);

    /* a resume that changes what the run is */
    char *out = NULL;
    int rc = ckpt_cli(&out, "train --resume %s --dim 32", run);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "--dim 32 differs from the resumed run's 64"), "%s", out);
    free(out);
    expect_good_intact("after the mismatches");
}

Test(refusal, missing_tensor_and_wrong_shape) {
    size_t len;
    uint8_t *raw = good_raw(&len);
    CkptRecord rec;
    const char *up = "model.layers.1.mlp.up_proj.weight";
    cr_assert(ckpt_raw_find(raw, len, up, TG_CHECKPOINT_KIND_ADAM_V, &rec));
    /* without the record, and a count that agrees */
    uint8_t *cut = malloc(len);
    memcpy(cut, raw, rec.begin);
    memcpy(cut + rec.begin, raw + rec.end, len - rec.end);
    uint32_t count;
    memcpy(&count, cut + CKPT_OFF_COUNT, 4);
    count--;
    memcpy(cut + CKPT_OFF_COUNT, &count, 4);
    expect_raw_refused("missing tensor", cut, len - (rec.end - rec.begin),
                       "tensor 'model.layers.1.mlp.up_proj.weight' (AdamW v) is missing");
    free(cut);

    const char *gate = "model.layers.0.mlp.gate_proj.weight";
    cr_assert(ckpt_raw_find(raw, len, gate, TG_CHECKPOINT_KIND_WEIGHT, &rec));
    cr_assert_eq(rec.ndim, 2u);
    int64_t shape[2];
    memcpy(shape, raw + rec.shape, 16);
    int64_t swapped[2] = {shape[1], shape[0]};
    memcpy(raw + rec.shape, swapped, 16);
    char problem[160];
    snprintf(problem, sizeof problem, "tensor '%s' (weight) has shape [%lld, %lld], the model's is [%lld, %lld]", gate,
             (long long)shape[1], (long long)shape[0], (long long)shape[0], (long long)shape[1]);
    expect_raw_refused("wrong shape", raw, len, problem);
    free(raw);
}

Test(refusal, folders_without_a_usable_checkpoint) {
    char *empty = datagen_path(dir, "empty");
    cr_assert_eq(mkdir(empty, 0755), 0);
    char *out = NULL;
    /* an empty folder is no run (test_run_folder.c: nor does anything get created in it) */
    int rc = ckpt_cli(&out, "sample --run %s", empty);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, empty) && strstr(out, "is not a run folder or a checkpoint in one"), "%s", out);
    free(out);
    /* a run's folder without a checkpoint (its files say it is a run) */
    datagen_write(dir, "empty/run.txt", "--preset tiny\n", 14);
    rc = ckpt_cli(&out, "sample --run %s", empty);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, empty) && strstr(out, "folder holds no checkpoint"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train --resume %s", empty);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, empty) && strstr(out, "folder holds no checkpoint"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt info %s", empty);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    free(out);

    set_latest("ckpt-00000077.tgck");
    rc = ckpt_cli(&out, "sample --run %s", run);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "names ckpt-00000077.tgck, which is missing") && strstr(out, "ckpt-00000006.tgck"), "%s", out);
    free(out);
    set_latest("not a checkpoint name");
    rc = ckpt_cli(&out, "train --resume %s", run);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "does not name a checkpoint"), "%s", out);
    free(out);
    set_latest("ckpt-00000006.tgck");
    expect_good_intact("folders");
    free(empty);
}

Test(refusal, every_checkpoint_passes_gzip_t_and_ckpt_info_describes_it) {
    if (test_run("gzip --version >/dev/null 2>&1") != 0) {
        fprintf(stderr, "\n*** SKIPPED the gzip -t check: gzip is not installed ***\n\n");
    } else {
        char cmd[4400];
        snprintf(cmd, sizeof cmd, "gzip -t %s/ckpt-*.tgck", run);
        cr_expect_eq(test_run(cmd), 0, "gzip -t refused a checkpoint");
    }
    char *out = NULL;
    int rc = ckpt_cli(&out, "ckpt info %s", run);
    cr_assert_eq(rc, 0, "%s", out);
    const char *expected[] = {"ckpt-00000006.tgck", "version 2, floats byte-shuffled", "dim 64, 2 layers", "step         6",
                              "tokens seen  768", "best val     ", "ratio ", "model.embed_tokens.weight",
                              "model.layers.1.mlp.down_proj.weight", "[64, 176]", "|AdamW v|"};
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        cr_expect(strstr(out, expected[i]), "ckpt info lacks '%s':\n%s", expected[i], out);
    free(out);
    rc = ckpt_cli(&out, "ckpt info");
    cr_expect_eq(rc, 2, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt frobnicate %s", run);
    cr_expect_eq(rc, 2, "%s", out);
    free(out);
}

/* ---------------------------------------------------------------- saving */

/* A background save that fails (a full disk) stops no run: a warning names the newest checkpoint
 * on disk, the next save tries again, and the run ends whole. */
Test(saving, a_failed_background_save_warns_and_the_next_save_tries_again, .timeout = 120) {
    dir = ckpt_test_setup(&corpus);
    char *r = datagen_path(dir, "blocked");
    char *out = NULL;
    /* the save of step 10 fails as on a full disk, after writing all its data */
    setenv("TAPEGRAD_FAIL_WRITE", "ckpt-00000010.tgck", 1);
    int rc = ckpt_cli_faults(&out, "", "train " CKPT_TEST_FLAGS " --data %s --steps 20 --ckpt-every 5 --keep 0 --out %s",
                             corpus, r);
    cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "ckpt-00000010.tgck") && strstr(out, "the previous checkpoint is untouched") &&
                  strstr(out, "training goes on and each checkpoint tries again (the newest on disk: ") &&
                  strstr(out, "ckpt-00000005.tgck)"),
              "%s", out);
    cr_expect(strstr(out, "checkpoints are saved again (1 saves failed before)") && strstr(out, "ckpt-00000015.tgck"),
              "%s", out);
    free(out);
    char path[4200];
    TgModel m;
    TgCheckpointInfo info;
    char *ten = datagen_path(r, "ckpt-00000010.tgck");
    cr_expect_neq(access(ten, F_OK), 0, "the failed save left %s", ten);
    free(ten);
    cr_assert_eq(tg_checkpoint_resolve(r, path, sizeof path), TG_OK, "%s", tg_error_message());
    cr_assert_eq(ckpt_load_model(path, &m, &info), TG_OK, "%s", tg_error_message());
    cr_expect_eq(info.state.step, 20, "latest names step %lld", (long long)info.state.step);
    tg_model_free(&m);

    /* the final save failing fails the run, naming the newest checkpoint on disk */
    char *r2 = datagen_path(dir, "blocked-final");
    setenv("TAPEGRAD_FAIL_WRITE", "ckpt-00000008.tgck", 1);
    rc = ckpt_cli_faults(&out, "", "train " CKPT_TEST_FLAGS " --data %s --steps 8 --ckpt-every 4 --out %s", corpus, r2);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    unsetenv("TAPEGRAD_FAIL_WRITE");
    cr_expect(strstr(out, "ckpt-00000008.tgck") && strstr(out, "the run's newest checkpoint is ") &&
                  strstr(out, "ckpt-00000004.tgck"),
              "%s", out);
    free(out);
    cr_assert_eq(tg_checkpoint_resolve(r2, path, sizeof path), TG_OK, "%s", tg_error_message());
    cr_assert_eq(ckpt_load_model(path, &m, &info), TG_OK, "%s", tg_error_message());
    cr_expect_eq(info.state.step, 4);
    tg_model_free(&m);
    datagen_remove_tree(dir);
    free(r), free(r2), free(dir), free(corpus);
}

/* ---------------------------------------------------------------- the format */

static void random_model(TgModel *m, uint64_t seed) {
    TgModelConfig c = {.dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .hidden = 96, .vocab = 50,
                     .seq_len = 16, .ffn = TG_FFN_SWIGLU, .rope_theta = 1e6, .norm_eps = 1e-5};
    cr_assert_eq(tg_model_config_validate(&c), TG_OK, "%s", tg_error_message());
    tg_model_build(m, &c);
    tg_model_init_weights(m, seed);
    TgRng rng;
    tg_rng_seed(&rng, seed + 1);
    tg_rng_fill_normal(&rng, m->params.m, m->params.total, 0, 1e-3f);
    for (size_t i = 0; i < m->params.total; i++) m->params.v[i] = 1e-6f * tg_rng_uniform(&rng);
}

Test(format, every_variant_round_trips_bitwise_and_passes_gzip_t) {
    char *tmp = datagen_tempdir();
    TgModel a;
    random_model(&a, 5);
    TgTrainerState st = {.step = 123, .tokens_seen = 4567, .best_val_loss = 2.5, .elapsed_s = 8.25, .seed = 99};
    tg_rng_seed(&st.loader.rng, 77);
    st.loader.batches_drawn = 123;
    TgCheckpointSource src = tg_checkpoint_source_of(&a, 0xfeedULL, &st);
    bool have_gzip = test_run("gzip --version >/dev/null 2>&1") == 0;
    int64_t sizes[2][2];
    for (int shuffle = 0; shuffle < 2; shuffle++)
        for (int fast = 0; fast < 2; fast++) {
            TgCheckpointWriteOptions o = {.level = fast ? 1 : 6, .shuffle = shuffle};
            char name[64];
            snprintf(name, sizeof name, "v-%d-%d.tgck", shuffle, fast);
            char *path = datagen_path(tmp, name);
            cr_assert_eq(tg_checkpoint_write_with(path, &src, &o, &sizes[shuffle][fast]), TG_OK, "%s", tg_error_message());
            TgModel b;
            TgCheckpointInfo info;
            cr_assert_eq(ckpt_load_model(path, &b, &info), TG_OK, "%s", tg_error_message());
            cr_expect(ckpt_models_equal(&a, &b), "%s: not bitwise equal", name);
            cr_expect_eq(info.flags, shuffle ? (uint32_t)TG_CHECKPOINT_FLAG_SHUFFLED : 0u);
            cr_expect_eq(info.file_bytes, sizes[shuffle][fast]);
            cr_expect_eq(memcmp(&info.state.loader, &st.loader, sizeof st.loader), 0);
            cr_expect(info.state.step == 123 && info.state.tokens_seen == 4567 && info.state.best_val_loss == 2.5 &&
                      info.state.elapsed_s == 8.25 && info.state.seed == 99 && info.tokenizer_fingerprint == 0xfeedULL);
            tg_model_free(&b);
            TgCheckpointTensorInfo *t;
            int n;
            cr_assert_eq(tg_checkpoint_inspect(path, &info, &t, &n), TG_OK, "%s", tg_error_message());
            cr_assert_eq(n, 3 * a.params.count);
            for (int i = 0; i < n; i++) {
                const TgParamStore *ps = &a.params;
                int idx = tg_params_index(ps, t[i].name);
                cr_assert_geq(idx, 0);
                const float *buf = (t[i].kind == 0 ? ps->data : t[i].kind == 1 ? ps->m : ps->v) + ps->offsets[idx];
                double sum = 0;
                for (int64_t j = 0; j < ps->tensors[idx]->numel; j++) sum += (double)buf[j] * buf[j];
                cr_expect_eq(t[i].l2_norm, sqrt(sum), "%s: norm of %s", name, t[i].name);
            }
            free(t);
            if (have_gzip) {
                char cmd[4400];
                snprintf(cmd, sizeof cmd, "gzip -t %s", path);
                cr_expect_eq(test_run(cmd), 0, "gzip -t %s", name);
            }
            free(path);
        }
    fprintf(stderr, "format: tiny random model, bytes plain/shuffled at level 6: %lld / %lld, level 1: %lld / %lld\n",
            (long long)sizes[0][0], (long long)sizes[1][0], (long long)sizes[0][1], (long long)sizes[1][1]);
    tg_model_free(&a);
    datagen_remove_tree(tmp);
    free(tmp);
}

Test(format, version_1_files_still_load) {
    char *tmp = datagen_tempdir();
    TgModel a;
    random_model(&a, 9);
    TgTrainerState st = {.step = 7, .seed = 1};
    TgCheckpointSource src = tg_checkpoint_source_of(&a, 1, &st);
    TgCheckpointWriteOptions plain = {.level = 6, .shuffle = false};
    char *v2 = datagen_path(tmp, "v2.tgck"), *v1 = datagen_path(tmp, "v1.tgck");
    cr_assert_eq(tg_checkpoint_write_with(v2, &src, &plain, NULL), TG_OK, "%s", tg_error_message());
    size_t len;
    uint8_t *raw = ckpt_raw_read(v2, &len);
    /* version 1: no flags field */
    uint32_t one = 1;
    memcpy(raw + CKPT_OFF_VERSION, &one, 4);
    memmove(raw + CKPT_OFF_FLAGS, raw + CKPT_OFF_FLAGS + 4, len - CKPT_OFF_FLAGS - 4);
    ckpt_raw_write(v1, raw, len - 4);
    TgModel b;
    TgCheckpointInfo info;
    cr_assert_eq(ckpt_load_model(v1, &b, &info), TG_OK, "%s", tg_error_message());
    cr_expect_eq(info.version, 1u);
    cr_expect(ckpt_models_equal(&a, &b));
    tg_model_free(&a);
    tg_model_free(&b);
    free(raw), free(v1), free(v2);
    datagen_remove_tree(tmp);
    free(tmp);
}
