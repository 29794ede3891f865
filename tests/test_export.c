/* Safetensors export and import: `tapegrad ckpt export` writes the weights under their
 * Llama/MiniMind names plus config.json; `tapegrad train --init-from` starts a new run from them
 * exactly where the checkpoint was; PyTorch reads the file and computes the same loss. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "model/safetensors.h"
#include "testutil.h"
#include "checkpoint/checkpoint_folder.h"

static char *dir, *corpus, *trained, *exported;

/* A run of 20 steps (val loss logged at step 20) and its export. */
static void setup(void) {
    dir = ckpt_test_setup(&corpus);
    trained = datagen_path(dir, "trained");
    exported = datagen_path(dir, "export/model.safetensors");
    char *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 20 --eval-every 20 --out %s", corpus, trained);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *folder = datagen_path(dir, "export");
    cr_assert_eq(mkdir(folder, 0755), 0);
    free(folder);
    rc = ckpt_cli(&out, "ckpt export %s --safetensors %s", trained, exported);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
}

/* safe to run twice: require_torch runs it before a skip */
static void teardown(void) {
    datagen_remove_tree(dir);
    free(dir), free(corpus), free(trained), free(exported);
    dir = corpus = trained = exported = NULL;
}

/* The raw "val_loss" text of the first metrics line of a run that has one (NULL if none). */
static char *first_val_loss(const char *run, int64_t *step) {
    char *path = datagen_path(run, "metrics.jsonl");
    char *text = ckpt_read_text(path);
    free(path);
    char *found = NULL;
    for (char *line = strtok(text, "\n"); line && !found; line = strtok(NULL, "\n")) {
        char *v = strstr(line, "\"val_loss\":");
        if (!v) continue;
        *step = strtoll(strstr(line, "\"step\":") + 7, NULL, 10);
        v += strlen("\"val_loss\":");
        found = strndup(v, strcspn(v, ",}"));
    }
    free(text);
    return found;
}

/* The fingerprint line of RUN/tokenizer.txt: 16 hex digits (malloc'ed). */
static char *tokenizer_fingerprint_of(const char *run) {
    char *path = datagen_path(run, "tokenizer.txt"), *text = ckpt_read_text(path);
    char *line = strstr(text, "\nfingerprint ");
    cr_assert_not_null(line, "%s has no fingerprint line", path);
    char *hex = strndup(line + 13, 16);
    free(text), free(path);
    return hex;
}

/* A copy of the safetensors file `src` at `dst`, with metadata key = value (value NULL: no metadata
 * at all) and, when `poison` names a tensor, `bad` at its element `index`. */
static void rewrite_weights(const char *src, const char *dst, const char *key, const char *value, const char *poison,
                            int64_t index, float bad) {
    TgStFile *st;
    cr_assert_eq(tg_st_open(src, &st), TG_OK, "%s", tg_error_message());
    TgStWriter *w = tg_st_writer_begin();
    for (size_t i = 0; i < tg_st_count(st); i++) {
        const TgStEntry *e = tg_st_entry_at(st, i);
        uint8_t *bytes = malloc(e->nbytes);
        memcpy(bytes, e->bytes, e->nbytes);
        if (poison && strcmp(e->name, poison) == 0) memcpy(bytes + 4 * index, &bad, 4);
        cr_assert_eq(tg_st_writer_add(w, e->name, e->dtype, e->ndim, e->shape, bytes), TG_OK);
        free(bytes);
    }
    if (value) {
        for (size_t i = 0; i < tg_st_metadata_count(st); i++) {
            const char *k, *v;
            tg_st_metadata_at(st, i, &k, &v);
            tg_st_writer_set_metadata(w, k, v);
        }
        tg_st_writer_set_metadata(w, key, value);
    }
    tg_st_close(st);
    cr_assert_eq(tg_st_writer_finish(w, dst), TG_OK, "%s", tg_error_message());
}

/* corpus with its letters rotated (a->b, ..., z->a): as many distinct bytes, so a char tokenizer
 * of the same size, but other ids for them */
static char *rotated_corpus(void) {
    char *text = ckpt_read_text(corpus);
    for (char *p = text; *p; p++)
        if (*p >= 'a' && *p <= 'z') *p = (char)('a' + (*p - 'a' + 1) % 26);
    char *path = datagen_path(dir, "rotated.txt");
    ckpt_write_file(path, text, strlen(text));
    free(text);
    return path;
}

static char *eval_loss_text(const char *run) {
    char *out = NULL;
    int rc = ckpt_cli(&out, "eval --run %s --threads 1", run);
    cr_assert_eq(rc, 0, "%s", out);
    char *v = strstr(out, "\"val_loss\":");
    cr_assert_not_null(v, "%s", out);
    v += strlen("\"val_loss\":");
    char *text = strndup(v, strcspn(v, ","));
    free(out);
    return text;
}

Test(export, init_from_the_export_starts_exactly_where_the_checkpoint_was, .init = setup, .fini = teardown, .timeout = 120) {
    /* config.json beside the weights */
    char *config = datagen_path(dir, "export/config.json");
    size_t len;
    char *json = (char *)ckpt_read_file(config, &len);
    json = realloc(json, len + 1);
    json[len] = '\0';
    const char *keys[] = {"\"dim\": 64", "\"n_layers\": 2", "\"n_heads\": 2", "\"n_kv_heads\": 2", "\"hidden_dim\": 176",
                          "\"vocab_size\": ", "\"max_seq_len\": 32", "\"rope_theta\": 1000000", "\"norm_eps\": ",
                          "\"ffn\": \"swiglu\"", "\"tie_word_embeddings\": true"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) cr_expect(strstr(json, keys[i]), "config.json lacks %s:\n%s", keys[i], json);
    free(json);

    /* the export holds exactly the weights, bitwise */
    char ckpt[4200];
    TgModel original;
    TgCheckpointInfo info;
    cr_assert_eq(tg_checkpoint_resolve(trained, ckpt, sizeof ckpt), TG_OK);
    cr_assert_eq(ckpt_load_model(ckpt, &original, &info), TG_OK, "%s", tg_error_message());
    TgStFile *st;
    cr_assert_eq(tg_st_open(exported, &st), TG_OK, "%s", tg_error_message());
    cr_expect_eq(tg_st_count(st), (size_t)original.params.count);
    for (int i = 0; i < original.params.count; i++) {
        const TgTensor *t = original.params.tensors[i];
        const TgStEntry *e = tg_st_find(st, t->name);
        cr_assert_not_null(e, "the export lacks %s", t->name);
        cr_expect(e->dtype == TG_ST_F32 && e->nbytes == (size_t)t->numel * 4 && memcmp(e->bytes, t->data, e->nbytes) == 0,
                  "%s differs in the export", t->name);
    }
    /* the tokenizer the weights were trained with, in the metadata and in config.json */
    char *fingerprint = tokenizer_fingerprint_of(trained);
    cr_expect_str_eq(tg_st_metadata(st, "tokenizer_fingerprint"), fingerprint);
    tg_st_close(st);
    char *config_text = ckpt_read_text(config);
    char key[64];
    snprintf(key, sizeof key, "\"tokenizer_fingerprint\": \"%s\"", fingerprint);
    cr_expect(strstr(config_text, key), "config.json lacks %s:\n%s", key, config_text);
    free(config_text), free(fingerprint);

    /* a new run from the export: its first logged val loss (step 0, before training) is the
     * original run's val loss at step 20, on the same fixed val batches */
    char *fresh = datagen_path(dir, "fresh"), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 20 --eval-every 20 --init-from %s --stop-after 0 --out %s",
                      corpus, exported, fresh);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "before training"), "%s", out);
    free(out);
    int64_t step_a = -1, step_b = -1;
    char *val_a = first_val_loss(trained, &step_a), *val_b = first_val_loss(fresh, &step_b);
    cr_assert(val_a && val_b);
    cr_expect_eq(step_a, 20);
    cr_expect_eq(step_b, 0);
    cr_expect_str_eq(val_b, val_a, "val loss from the export %s, the original's at step 20 %s", val_b, val_a);
    free(val_a), free(val_b);

    /* `tapegrad eval` of both checkpoints agrees to the last digit */
    char *eval_a = eval_loss_text(trained), *eval_b = eval_loss_text(fresh);
    cr_expect_str_eq(eval_b, eval_a, "eval: %s from the export, %s from the original", eval_b, eval_a);
    free(eval_a), free(eval_b);

    /* and the new run's checkpoint holds the same weights, with fresh AdamW moments */
    TgModel imported;
    cr_assert_eq(tg_checkpoint_resolve(fresh, ckpt, sizeof ckpt), TG_OK);
    cr_assert_eq(ckpt_load_model(ckpt, &imported, &info), TG_OK, "%s", tg_error_message());
    cr_expect_eq(info.state.step, 0);
    size_t bytes = original.params.total * sizeof(float);
    cr_expect_eq(memcmp(imported.params.data, original.params.data, bytes), 0, "weights differ after import");
    for (size_t i = 0; i < imported.params.total; i++)
        if (imported.params.m[i] != 0 || imported.params.v[i] != 0) cr_assert_fail("AdamW moments not fresh at %zu", i);
    tg_model_free(&imported);
    tg_model_free(&original);
    free(fresh), free(config);
}

Test(export, init_from_refuses_weights_that_do_not_fit, .init = setup, .fini = teardown, .timeout = 120) {
    char *out = NULL, *target = datagen_path(dir, "wide");
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 5 --dim 32 --init-from %s --out %s", corpus, exported,
                      target);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, exported) && strstr(out, "tensor 'model.embed_tokens.weight' has shape [") && strstr(out, ", 64], but the model") &&
                  strstr(out, ", 32]"),
              "%s", out);
    free(out);

    /* a file with a tensor the model lacks (an untied head) */
    char *extra = datagen_path(dir, "export/extra.safetensors");
    TgStFile *st;
    cr_assert_eq(tg_st_open(exported, &st), TG_OK);
    TgStWriter *w = tg_st_writer_begin();
    for (size_t i = 0; i < tg_st_count(st); i++) {
        const TgStEntry *e = tg_st_entry_at(st, i);
        cr_assert_eq(tg_st_writer_add(w, e->name, e->dtype, e->ndim, e->shape, e->bytes), TG_OK);
        if (strcmp(e->name, "model.embed_tokens.weight") == 0)
            cr_assert_eq(tg_st_writer_add(w, "lm_head.weight", e->dtype, e->ndim, e->shape, e->bytes), TG_OK);
    }
    cr_assert_eq(tg_st_writer_finish(w, extra), TG_OK, "%s", tg_error_message());
    tg_st_close(st);
    char *other = datagen_path(dir, "other");
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 5 --init-from %s --out %s", corpus, extra, other);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, extra) && strstr(out, "tensor 'lm_head.weight' is not part of this model"), "%s", out);
    free(out);

    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 5 --init-from %s/nothing.safetensors --out %s/x", corpus,
                  dir, dir);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "nothing.safetensors: cannot read it"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train --resume %s --init-from %s", trained, exported);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    free(out);
    rc = ckpt_cli(&out, "ckpt export %s", trained);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    free(out);
    free(target), free(extra), free(other);
}

/* --init-from loaded weights trained on another tokenizer of the same size without a word (the ids
 * of one are not the other's), and trained on a NaN in the file. */
Test(export, init_from_refuses_weights_of_another_tokenizer_or_not_finite, .init = setup, .fini = teardown, .timeout = 120) {
    char *rotated = rotated_corpus(), *target = datagen_path(dir, "new"), *out = NULL;
    char *fingerprint = tokenizer_fingerprint_of(trained);
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 2 --init-from %s --out %s", rotated, exported, target);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    char says[256];
    snprintf(says, sizeof says, "%s was trained with another tokenizer: it records tokenizer %s, this run's char tokenizer",
             exported, fingerprint);
    cr_expect(strstr(out, says) && strstr(out, "the --data and --tokenizer of the run it was exported from"), "%s", out);
    cr_expect_neq(access(target, F_OK), 0, "a refused run left %s", target);
    free(out);

    /* weights that record no tokenizer (another program's) load, with a note */
    char *bare = datagen_path(dir, "bare.safetensors");
    rewrite_weights(exported, bare, NULL, NULL, NULL, 0, 0);
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 1 --init-from %s --out %s/bare-run", rotated, bare, dir);
    cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "records no tokenizer fingerprint") && strstr(out, bare), "%s", out);
    free(out);

    /* a recorded fingerprint must be one */
    char *odd = datagen_path(dir, "odd.safetensors");
    rewrite_weights(exported, odd, "tokenizer_fingerprint", "12zz", NULL, 0, 0);
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 1 --init-from %s --out %s", corpus, odd, target);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "metadata tokenizer_fingerprint '12zz' is not a tokenizer fingerprint"), "%s", out);
    free(out);

    /* a NaN or an Inf in the weights is refused, naming the tensor and the index */
    static const struct {
        float value;
        const char *says;
    } bad[] = {{NAN, "holds NaN at index 7"}, {-INFINITY, "holds Inf at index 7"}};
    for (int i = 0; i < 2; i++) {
        rewrite_weights(exported, odd, "tokenizer_fingerprint", fingerprint, "model.layers.1.mlp.down_proj.weight", 7,
                        bad[i].value);
        rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 1 --init-from %s --out %s", corpus, odd, target);
        cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
        cr_expect(strstr(out, "tensor 'model.layers.1.mlp.down_proj.weight'") && strstr(out, bad[i].says), "%s", out);
        cr_expect_neq(access(target, F_OK), 0, "a refused run left %s", target);
        free(out);
    }
    free(rotated), free(target), free(fingerprint), free(bare), free(odd);
}

/* A Hugging Face folder's weights record its tokenizer.json as a run imports it: a run with that
 * tokenizer (or the same BPE trained again) starts from them, another is told to use it. */
Test(export, hf_weights_start_a_run_with_their_own_tokenizer, .init = setup, .fini = teardown, .timeout = 120) {
    char *bpe = datagen_path(dir, "bpe"), *hf = datagen_path(dir, "hf"), *out = NULL;
    const char *flags = CKPT_TEST_FLAGS " --tokenizer bpe --vocab 300 --eval-every 0";
    int rc = ckpt_cli(&out, "train %s --data %s --steps 2 --out %s", flags, corpus, bpe);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt export %s --hf %s", bpe, hf);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --eval-every 0 --tokenizer hf:%s/tokenizer.json --data %s --steps 1 "
                  "--init-from %s/model.safetensors --out %s/from-json",
                  hf, corpus, hf, dir);
    cr_expect_eq(rc, 0, "the folder's own tokenizer: exit %d\n%s", rc, out);
    free(out);
    rc = ckpt_cli(&out, "train %s --data %s --steps 1 --init-from %s/model.safetensors --out %s/same-bpe", flags, corpus, hf, dir);
    cr_expect_eq(rc, 0, "the same BPE trained again: exit %d\n%s", rc, out);
    free(out);
    char *rotated = rotated_corpus();
    rc = ckpt_cli(&out, "train %s --data %s --steps 1 --init-from %s/model.safetensors --out %s/other", flags, rotated, hf, dir);
    cr_expect_eq(rc, 1, "another BPE: exit %d\n%s", rc, out);
    char says[4400];
    snprintf(says, sizeof says, "train with its own: --tokenizer hf:%s/tokenizer.json", hf);
    cr_expect(strstr(out, "was trained with another tokenizer") && strstr(out, says), "%s", out);
    free(out), free(rotated), free(bpe), free(hf);
}

/* load_export.py reads `what` (the safetensors file, or a Hugging Face folder, of `run`) into its
 * own PyTorch model: every tensor's norm and the loss on a fixed batch must be tapegrad's. */
static void expect_pytorch_loss_of(const char *run, const char *what) {
    char *log = datagen_path(dir, "python.log"), cmd[8192];
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 /usr/bin/python3 %s/tests/parity/load_export.py %s >%s 2>&1", TAPEGRAD_SOURCE_DIR,
             what, log);
    int rc = test_run(cmd);
    char *text = ckpt_read_text(log);
    cr_assert_eq(rc, 0, "load_export.py failed:\n%s", text);

    char ckpt[4200];
    TgModel m;
    TgCheckpointInfo info;
    cr_assert_eq(tg_checkpoint_resolve(run, ckpt, sizeof ckpt), TG_OK);
    cr_assert_eq(ckpt_load_model(ckpt, &m, &info), TG_OK, "%s", tg_error_message());
    int norms = 0;
    double py_loss = NAN;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char name[128];
        double value;
        if (sscanf(line, "norm %127s %lf", name, &value) == 2) {
            const TgTensor *t = tg_params_find(&m.params, name);
            cr_assert_not_null(t, "python reports a tensor '%s' the model lacks", name);
            double sum = 0;
            for (int64_t i = 0; i < t->numel; i++) sum += (double)t->data[i] * t->data[i];
            cr_expect_leq(fabs(sqrt(sum) - value), 1e-9 * value, "%s: norm %.12g in C, %.12g in PyTorch", name, sqrt(sum), value);
            norms++;
        } else if (sscanf(line, "loss %lf", &value) == 1) {
            py_loss = value;
        }
    }
    cr_expect_eq(norms, m.params.count);

    /* the same fixed batch through tapegrad's model */
    int64_t B = 2, T = m.cfg.seq_len;
    int32_t *tokens = malloc((size_t)(B * T) * sizeof(int32_t)), *targets = malloc((size_t)(B * T) * sizeof(int32_t));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            tokens[b * T + t] = (int32_t)((b * (T + 1) + t) * 7 % m.cfg.vocab);
            targets[b * T + t] = (int32_t)((b * (T + 1) + t + 1) * 7 % m.cfg.vocab);
        }
    TestTape tt;
    test_tape_init(&tt, 1);
    tg_tape_set_grad_enabled(&tt.tape, false);
    double loss =
        tg_model_loss(&m, &tt.tape, &(TgBatch){.tokens = tokens, .targets = targets, .batch = B, .seq = T}, NULL)
            ->data[0];
    fprintf(stderr, "export: loss on the fixed batch %.7f in tapegrad, %.7f in PyTorch\n", loss, py_loss);
    cr_expect_leq(fabs(loss - py_loss), 1e-5 * fabs(py_loss), "loss %.9g in tapegrad, %.9g in PyTorch", loss, py_loss);
    test_tape_free(&tt);
    free(tokens), free(targets), free(text), free(log);
    tg_model_free(&m);
}

static void expect_pytorch_loss(const char *what) { expect_pytorch_loss_of(trained, what); }

Test(export, pytorch_reads_the_export_and_computes_the_same_loss, .init = setup, .fini = teardown, .timeout = 120) {
    require_torch("reading the safetensors export in PyTorch", teardown);
    expect_pytorch_loss(exported);
}

Test(export, pytorch_reads_the_hf_folder_by_its_llama_config_and_computes_the_same_loss, .init = setup, .fini = teardown,
     .timeout = 120) {
    require_torch("reading the Hugging Face folder in PyTorch", teardown);
    char *folder = datagen_path(dir, "hf"), *out = NULL;
    int rc = ckpt_cli(&out, "ckpt export %s --hf %s", trained, folder);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    const char *files[] = {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *path = datagen_path(folder, files[i]);
        cr_expect_eq(access(path, R_OK), 0, "the folder lacks %s", files[i]);
        free(path);
    }
    expect_pytorch_loss(folder);
    free(folder);
}

Test(export, hf_and_gguf_exports_refuse_what_they_cannot_hold, .init = setup, .fini = teardown, .timeout = 120) {
    char *folder = datagen_path(dir, "hf"), *out = NULL;
    /* a folder with files in it needs --force, which keeps the other files */
    datagen_write(dir, "hf/notes.txt", "mine", 4);
    int rc = ckpt_cli(&out, "ckpt export %s --hf %s", trained, folder);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "is not empty") && strstr(out, "--force"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt export %s --hf %s --force", trained, folder);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    char *notes = datagen_path(folder, "notes.txt"), *config = datagen_path(folder, "config.json");
    cr_expect(access(notes, R_OK) == 0 && access(config, R_OK) == 0);
    free(notes), free(config);
    rc = ckpt_cli(&out, "ckpt export %s --gguf %s/m.gguf --gguf-type q4", trained, dir);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "f32|f16|q8_0"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt export %s --gguf %s/m.gguf --hf %s", trained, dir, folder);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    free(out);

    /* a ReLU FFN is no Llama model */
    char *relu = datagen_path(dir, "relu");
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 1 --ffn relu --out %s", corpus, relu);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    const char *targets[] = {"--hf", "--gguf"};
    for (int i = 0; i < 2; i++) {
        rc = ckpt_cli(&out, "ckpt export %s %s %s/relu-out", relu, targets[i], dir);
        cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
        cr_expect(strstr(out, "feed-forward block is relu") && strstr(out, "SwiGLU") && strstr(out, "--safetensors"), "%s", out);
        free(out);
    }
    char *nothing = datagen_path(dir, "relu-out");
    cr_expect_neq(access(nothing, F_OK), 0, "a refused export writes nothing");
    free(nothing), free(relu), free(folder);
}

/* QK-norm (--qk-norm) is part of the model's shape: the checkpoint records it (ckpt info says
 * so), a resume and a run started from the weights keep it and refuse another, sampling decodes
 * through it, and its safetensors config says it. */
Test(export, a_qk_norm_run_keeps_its_shape, .init = setup, .fini = teardown, .timeout = 120) {
    char *out = NULL, *qk = datagen_path(dir, "qk");
    int rc =
        ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 4 --stop-after 2 --qk-norm --out %s", corpus, qk);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt info %s", qk);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "2 heads, 2 kv heads with QK-norm"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train --resume %s --qk-norm", qk);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    /* a run without it cannot take it on */
    rc = ckpt_cli(&out, "train --resume %s --qk-norm", trained);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "--qk-norm true differs from the resumed run's false"), "%s", out);
    free(out);
    char *from_plain = datagen_path(dir, "from-plain"), *from_qk = datagen_path(dir, "from-qk");
    rc = ckpt_cli(&out, "train --init-from %s --data %s --steps 1 --qk-norm --out %s", trained, corpus, from_plain);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "--qk-norm true differs from the false of --init-from"), "%s", out);
    free(out);
    rc = ckpt_cli(&out,
                  "train --init-from %s --data %s --steps 1 --threads 1 --batch 4 --eval-batches 2 "
                  "--sample-tokens 0 --out %s",
                  qk, corpus, from_qk);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt info %s", from_qk);
    cr_expect(rc == 0 && strstr(out, "with QK-norm"), "a run started from a QK-norm run keeps it:\n%s", out);
    free(out);
    rc = ckpt_cli(&out, "sample --run %s --prompt 'the ' --tokens 8 --temperature 0", qk);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    /* the weights' config says it */
    char *weights = datagen_path(dir, "qk-export/w.safetensors"), *config = datagen_path(dir, "qk-export/config.json");
    rc = ckpt_cli(&out, "ckpt export %s --safetensors %s", qk, weights);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    char *text = ckpt_read_text(config);
    cr_expect(strstr(text, "\"qk_norm\": true"), "%s", text);
    free(text);
    free(weights), free(config), free(from_plain), free(from_qk), free(qk);
}

/* A model with QK-norm leaves as a Qwen3 folder (MiniMind-3's architecture): its config.json
 * names Qwen3ForCausalLM, its weights q_norm and k_norm; PyTorch's model read by that config
 * alone gives tapegrad's loss. Its safetensors export, read by its own config, does too. */
Test(export, pytorch_reads_a_qk_norm_model_as_qwen3_and_computes_the_same_loss, .init = setup, .fini = teardown,
     .timeout = 120) {
    require_torch("reading a Qwen3 folder in PyTorch", teardown);
    char *out = NULL, *qk = datagen_path(dir, "qk"), *folder = datagen_path(dir, "qwen3");
    int rc =
        ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 6 --qk-norm --norm-eps 1e-6 --out %s", corpus, qk);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt export %s --hf %s", qk, folder);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *config = datagen_path(folder, "config.json"), *text = ckpt_read_text(config);
    cr_expect(strstr(text, "\"Qwen3ForCausalLM\"") && strstr(text, "\"model_type\":\t\"qwen3\"") &&
                  strstr(text, "\"rms_norm_eps\":\t1e-06") && strstr(text, "\"head_dim\":\t32"),
              "%s", text);
    free(text), free(config);
    expect_pytorch_loss_of(qk, folder);
    char *weights = datagen_path(dir, "qk-st/model.safetensors");
    rc = ckpt_cli(&out, "ckpt export %s --safetensors %s", qk, weights);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    expect_pytorch_loss_of(qk, weights);
    free(weights), free(folder), free(qk);
}

/* MiniMind-3's family by flags: --ffn-hidden-rule pi sizes the FFN of another width as
 * MiniMind-3 does (ceil(96 pi / 64) x 64 = 320), --norm-eps sets RMSNorm's eps; run.txt records
 * the rule and the checkpoint the shape. The minimind-3 preset at another width takes its rule,
 * QK-norm and eps 1e-6 along; a flag given again on a resume must agree. */
Test(export, the_minimind_3_family_is_made_by_its_flags, .init = setup, .fini = teardown, .timeout = 120) {
    char *out = NULL, *pi = datagen_path(dir, "pi"), *m3 = datagen_path(dir, "m3");
    int rc = ckpt_cli(&out,
                      "train " CKPT_TEST_FLAGS " --data %s --steps 1 --dim 96 --heads 2 --ffn-hidden-rule pi "
                      "--norm-eps 1e-6 --out %s",
                      corpus, pi);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt info %s", pi);
    cr_expect(rc == 0 && strstr(out, "swiglu hidden 320,") && strstr(out, "norm eps 1e-06"), "%s", out);
    cr_expect(!strstr(out, "QK-norm"), "%s", out);
    free(out);
    char *run_txt = datagen_path(pi, "run.txt"), *text = ckpt_read_text(run_txt);
    cr_expect(strstr(text, "--ffn-hidden-rule pi\n"), "%s", text);
    free(text), free(run_txt);
    rc = ckpt_cli(&out, "train --resume %s --steps 2 --norm-eps 1e-5", pi);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "--norm-eps 1.0000000000000001e-05 differs from the resumed run's 9.99"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train --resume %s --steps 2 --ffn-hidden-rule eight-thirds", pi);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "--ffn-hidden-rule eight-thirds differs from the resumed run's pi"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train --resume %s --steps 2 --ffn-hidden-rule pi --norm-eps 1e-6", pi);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out,
                  "train --preset minimind-3 --dim 128 --heads 2 --kv-heads 1 --layers 1 --seq 16 --tokenizer char "
                  "--data %s --steps 1 --batch 2 --threads 1 --eval-batches 1 --sample-tokens 0 --out %s",
                  corpus, m3);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt info %s", m3);
    cr_expect(rc == 0 && strstr(out, "with QK-norm, swiglu hidden 448,") && strstr(out, "norm eps 1e-06"), "%s", out);
    free(out), free(pi), free(m3);
}
