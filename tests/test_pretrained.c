/* A trained run read back through the library (tapegrad/pretrained.h) and sampled with tg_sample_text:
 * the model and tokenizer of the run's latest checkpoint or of a named one; greedy text equal to
 * `tapegrad sample`'s and to encode + tg_sample_generate + decode, a long prompt cut to its last
 * seq_len tokens, an empty one started from <eot>; a folder without a tokenizer, a tokenizer of another run and a damaged
 * checkpoint refused with the file's name, leaving the TgPretrained empty. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptutil.h"
#include "datagen.h"
#include "tapegrad/engine.h"
#include "testutil.h"
#include "tapegrad/pretrained.h"
#include "tapegrad/sample.h"

static char *dir, *corpus, *run;

/* One run of 4 steps with checkpoints at steps 2 and 4. */
static void setup(void) {
    dir = ckpt_test_setup(&corpus);
    run = datagen_path(dir, "run");
    char *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 4 --ckpt-every 2 --keep 0 --out %s", corpus, run);
    cr_assert_eq(rc, 0, "training the fixture failed:\n%s", out);
    free(out);
}

static void teardown(void) {
    datagen_remove_tree(dir);
    free(dir), free(corpus), free(run);
}

TestSuite(pretrained, .init = setup, .fini = teardown, .timeout = 120);

/* The text the first draw of a generation saw. */
typedef struct {
    int64_t len;
    int32_t text[64];
} FirstContext;

static void keep_first_context(void *ctx, const int32_t *text, int64_t len, const float *logits, int64_t vocab) {
    FirstContext *first = ctx;
    if (first->len > 0) return;
    first->len = len;
    memcpy(first->text, text, (size_t)(len < 64 ? len : 64) * sizeof *text);
}

Test(pretrained, opens_the_latest_or_a_named_checkpoint_and_samples_what_the_cli_samples) {
    TgPretrained p;
    assert_ok(tg_pretrained_open(run, &p));
    cr_expect_eq(p.step, 4);
    cr_expect(strstr(p.checkpoint, "ckpt-00000004.tgck"), "loaded %s", p.checkpoint);
    cr_expect_eq(p.model.cfg.vocab, p.tok.vocab_size);
    cr_expect_eq(p.model.cfg.dim, 64, "not the tiny preset's model");

    TgEngine engine;
    tg_engine_open(&engine, 1, 1 << 20);
    TgSampleOptions greedy = {.temperature = 0};
    TgRng rng;
    tg_rng_seed(&rng, 1);
    TgSampler sampler = {.model = &p.model, .tape = &engine.tape, .opts = &greedy, .rng = &rng};
    char *text = NULL;
    size_t len = 0;
    assert_ok(tg_sample_text(&sampler, &p.tok, "The ", 4, 30, &text, &len));
    cr_expect(len > 0 && strlen(text) == len, "%zu bytes of text", len);
    char *out = NULL;
    int rc = ckpt_cli(&out, "sample --run %s --prompt 'The ' --tokens 30 --temperature 0 --threads 1", run);
    cr_expect_eq(rc, 0, "%s", out);
    char expected[512];
    snprintf(expected, sizeof expected, "The %s\n", text);
    cr_expect_str_eq(out, expected, "the library's greedy text differs from tapegrad sample's");
    free(out);
    /* the same as encoding, generating and decoding by hand */
    int32_t ids[4], gen[4 + 30];
    size_t n_ids;
    assert_ok(tg_tokenizer_encode(&p.tok, "The ", 4, ids, 4, &n_ids));
    int64_t total = tg_sample_generate(&sampler, ids, (int64_t)n_ids, 30, p.tok.eot_id, gen);
    char *by_hand;
    size_t by_hand_len;
    assert_ok(tg_tokenizer_decode(&p.tok, gen + n_ids, (size_t)total - n_ids, &by_hand, &by_hand_len));
    cr_expect_str_eq(text, by_hand);
    free(by_hand);
    free(text);
    /* of a prompt longer than the context (32 tokens, one per byte here), the model sees the last 32 */
    const char *long_prompt = "the cat sat on the mat, and then the dog came in the house";
    size_t long_len = strlen(long_prompt);
    FirstContext seen = {0};
    TgSampleOptions watched = {.temperature = 0, .observer = keep_first_context, .observer_ctx = &seen};
    char *from_long;
    assert_ok(tg_sample_text(&(TgSampler){&p.model, &engine.tape, &watched, &rng}, &p.tok, long_prompt, long_len, 3,
                             &from_long, &len));
    free(from_long);
    int32_t tail[32];
    assert_ok(tg_tokenizer_encode(&p.tok, long_prompt + long_len - 32, 32, tail, 32, &n_ids));
    cr_expect_eq(seen.len, 32, "the first draw saw %lld tokens", (long long)seen.len);
    cr_expect_arr_eq(seen.text, tail, sizeof tail, "the first draw did not see the prompt's last 32 tokens");
    /* an empty prompt starts from <eot> */
    char *from_empty;
    assert_ok(tg_sample_text(&sampler, &p.tok, "", 0, 20, &from_empty, &len));
    ids[0] = p.tok.eot_id;
    total = tg_sample_generate(&sampler, ids, 1, 20, p.tok.eot_id, gen);
    assert_ok(tg_tokenizer_decode(&p.tok, gen + 1, (size_t)total - 1, &by_hand, &by_hand_len));
    cr_expect_str_eq(from_empty, by_hand);
    free(from_empty), free(by_hand);
    /* a byte the char tokenizer never saw: refused, not sampled */
    assert_fails(tg_sample_text(&sampler, &p.tok, "\x01", 1, 5, &text, &len), TG_ERR_ARG, "encoding the prompt");
    cr_expect_null(text);
    tg_pretrained_close(&p);

    char *older = datagen_path(run, "ckpt-00000002.tgck");
    assert_ok(tg_pretrained_open(older, &p));
    cr_expect_eq(p.step, 2);
    tg_pretrained_close(&p);
    free(older);
    tg_engine_close(&engine);
}

static void expect_open_refused(const char *what, TgStatus status, const char *needle) {
    TgPretrained p;
    memset(&p, 0x55, sizeof p);
    assert_fails(tg_pretrained_open(what, &p), status, needle);
    cr_expect(p.model.params.tensors == NULL && p.tok.token_offsets == NULL && p.step == 0,
              "a refused open left something in the TgPretrained");
    tg_pretrained_close(&p);
}

Test(pretrained, a_missing_tokenizer_another_runs_tokenizer_and_a_damaged_checkpoint_are_refused) {
    char *tok = datagen_path(run, "tokenizer.txt"), *moved = datagen_path(dir, "tokenizer.txt");
    cr_assert_eq(rename(tok, moved), 0);
    expect_open_refused(run, TG_ERR_IO, "tokenizer.txt");
    /* a char tokenizer of another text: another fingerprint */
    TgTokenizer other;
    assert_ok(tg_tokenizer_char_train("abc", 3, &other));
    assert_ok(tg_tokenizer_save(&other, tok));
    tg_tokenizer_free(&other);
    expect_open_refused(run, TG_ERR_MISMATCH, "trained with another tokenizer");
    cr_assert_eq(rename(moved, tok), 0);
    char *latest = datagen_path(run, "ckpt-00000004.tgck");
    size_t len;
    uint8_t *bytes = ckpt_read_file(latest, &len);
    ckpt_write_file(latest, bytes, len / 3);
    expect_open_refused(run, TG_ERR_FORMAT, "ckpt-00000002.tgck");
    free(bytes), free(latest), free(tok), free(moved);
}
