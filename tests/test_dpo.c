/* Preference training (DPO): MiniMind's dpo.jsonl read as pairs (data/preference.h) and prepared
 * into a run's files (data/sft_data.h with `pairs`).
 *
 * What a pair must get right: both sides are the one prompt, encoded once, then their own reply;
 * what DPO predicts of each side is the reply (its content and <|im_end|>), as fine-tuning's mask
 * says; and a pair DPO can learn nothing from (no reply, the same reply twice, two prompts) is
 * named in one line with its file and line, counted, or stops the preparation with `strict`. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/chat_format.h"
#include "data/pair_loader.h"
#include "data/preference.h"
#include "data/sft_data.h"
#include "data/tokfile.h"
#include "datagen.h"
#include "tapegrad/model.h"
#include "tapegrad/ops.h"
#include "tapegrad/optim.h"
#include "train/dpo.h"
#include "testutil.h"

static TgTokenizer tok;
static TgChatTokens ct;
static char *dir;

static void setup(void) {
    dir = datagen_tempdir();
    size_t len = 40000;
    char *text = datagen_prose(4, len);
    cr_assert_eq(tg_tokenizer_bpe_train_specials(text, len, 500, "chatml", &tok), TG_OK, "%s", tg_error_message());
    free(text);
    cr_assert_eq(tg_chat_tokens_find(&tok, "test", &ct), TG_OK, "%s", tg_error_message());
}

static void teardown(void) {
    tg_tokenizer_free(&tok);
    datagen_remove_tree(dir);
    free(dir);
}

/* A line of dpo.jsonl: the prompt's user turn, then each side's reply. */
static void write_pair(FILE *f, const char *user, const char *chosen, const char *rejected) {
    fprintf(
        f,
        "{\"chosen\": [{\"role\": \"user\", \"content\": \"%s\"}, {\"role\": \"assistant\", \"content\": \"%s\"}], "
        "\"rejected\": [{\"role\": \"user\", \"content\": \"%s\"}, {\"role\": \"assistant\", \"content\": \"%s\"}]}\n",
        user, chosen, user, rejected);
}

static TgJsonlLine line_of(const char *text) {
    return (TgJsonlLine){.kind = TG_JSONL_OBJECT, .number = 3, .text = text, .len = strlen(text)};
}

/* Both sides start with the prompt's ids, the same; each then holds its reply's, and only the
 * reply's content and <|im_end|> are predicted. */
Test(preference, a_pair_is_one_prompt_and_two_replies, .init = setup, .fini = teardown) {
    const char *text = "{\"chosen\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                       "\"content\": \"Name a river.\"},"
                       " {\"role\": \"assistant\", \"content\": \"The Nile, says the atlas.\"}],"
                       " \"rejected\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                       "\"content\": \"Name a river.\"},"
                       " {\"role\": \"assistant\", \"content\": \"Nile\"}], \"source\": \"ignored\"}";
    TgJsonlLine line = line_of(text);
    TgConversation chosen = {0}, rejected = {0};
    char why[320];
    cr_assert(tg_pair_parse(&line, &chosen, &rejected, why, sizeof why), "%s", why);
    cr_assert_eq(tg_pair_check(&chosen, &rejected, why, sizeof why), TG_PAIR_OK, "%s", why);
    TgChatIds c = {0}, r = {0}, prompt = {0}, whole = {0};
    cr_assert_eq(tg_pair_encode(&tok, &ct, &chosen, &rejected, &c, &r), TG_OK, "%s", tg_error_message());
    for (size_t i = 0; i < 2; i++)
        cr_assert_eq(tg_chat_encode_turn(&tok, &ct, chosen.turns[i].role, chat_turn_text(&chosen, i),
                                         chosen.turns[i].len, &prompt),
                     TG_OK);
    cr_assert(c.n > prompt.n && r.n > prompt.n);
    cr_expect(memcmp(c.ids, prompt.ids, prompt.n * sizeof *c.ids) == 0 &&
                  memcmp(r.ids, prompt.ids, prompt.n * sizeof *r.ids) == 0,
              "both sides start with the prompt's ids");
    for (size_t i = 0; i < prompt.n; i++) cr_expect(!c.trained[i] && !r.trained[i], "prompt id %zu is predicted", i);
    /* each side is the conversation as fine-tuning encodes it, mask and all */
    cr_assert_eq(tg_chat_encode_conversation(&tok, &ct, &chosen, &whole), TG_OK);
    cr_expect(whole.n == c.n && memcmp(whole.ids, c.ids, c.n * sizeof *c.ids) == 0 &&
              memcmp(whole.trained, c.trained, c.n) == 0);
    cr_expect(c.trained[c.n - 2] && c.ids[c.n - 2] == ct.im_end && !c.trained[c.n - 1],
              "the reply's <|im_end|> is predicted, its \\n not");
    tg_chat_ids_free(&c), tg_chat_ids_free(&r), tg_chat_ids_free(&prompt), tg_chat_ids_free(&whole);
    tg_chat_conversation_free(&chosen), tg_chat_conversation_free(&rejected);
}

/* Each kind of pair DPO learns nothing from gets its verdict and one line naming the fault; a
 * pair without a side is no pair at all. */
Test(preference, pairs_that_prefer_nothing_are_named, .init = setup, .fini = teardown) {
    static const struct {
        const char *text;
        TgPairVerdict verdict;
        const char *needle;
    } cases[] = {
        {"{\"chosen\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}],"
         " \"rejected\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}",
         TG_PAIR_IDENTICAL, "replies are the same"},
        {"{\"chosen\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}],"
         " \"rejected\": [{\"role\": \"user\", \"content\": \"z\"}, {\"role\": \"assistant\", \"content\": \"c\"}]}",
         TG_PAIR_PROMPTS_DIFFER, "differ before their last turn"},
        {"{\"chosen\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}],"
         " \"rejected\": [{\"role\": \"user\", \"content\": \"a\"}]}",
         TG_PAIR_NO_REPLY, "rejected conversation does not end with an assistant turn"},
        {"{\"chosen\": [{\"role\": \"user\", \"content\": \"a\"}], \"rejected\": [{\"role\": \"user\", \"content\": "
         "\"a\"},"
         " {\"role\": \"assistant\", \"content\": \"b\"}]}",
         TG_PAIR_NO_REPLY, "chosen conversation does not end with an assistant turn"},
    };
    TgConversation chosen = {0}, rejected = {0};
    char why[320];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TgJsonlLine line = line_of(cases[i].text);
        cr_assert(tg_pair_parse(&line, &chosen, &rejected, why, sizeof why), "%s", why);
        TgPairVerdict v = tg_pair_check(&chosen, &rejected, why, sizeof why);
        cr_expect_eq(v, cases[i].verdict, "case %zu: verdict %d", i, (int)v);
        cr_expect(strstr(why, cases[i].needle), "case %zu: %s", i, why);
    }
    TgJsonlLine one_side = line_of(
        "{\"chosen\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}");
    cr_expect_not(tg_pair_parse(&one_side, &chosen, &rejected, why, sizeof why));
    cr_expect(strstr(why, "line 3 has no \"rejected\" array"), "%s", why);
    tg_chat_conversation_free(&chosen), tg_chat_conversation_free(&rejected);
}

/* A dpo.jsonl of 40 good pairs and one of each fault: the pairs kept are written chosen then
 * rejected, the faults counted and named with file and line; `strict` stops at the first. */
Test(preference, prepare_writes_pairs_and_counts_the_rest, .init = setup, .fini = teardown) {
    char *path = datagen_path(dir, "dpo.jsonl");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    static const char *const rivers[] = {"Nile", "Amazon", "Danube", "Volga", "Rhine"};
    for (int i = 0; i < 40; i++) {
        char user[64], good[96], bad[64];
        snprintf(user, sizeof user, "Name river %d.", i);
        snprintf(good, sizeof good, "The %s, says the atlas.", rivers[i % 5]);
        snprintf(bad, sizeof bad, "%s", rivers[(i + 1) % 5]);
        write_pair(f, user, good, bad);
        if (i == 10) write_pair(f, "Same?", "Yes.", "Yes."); /* line 12 */
        if (i == 20)                                         /* line 23 */
            fputs("{\"chosen\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": "
                  "\"a\"}], "
                  "\"rejected\": [{\"role\": \"user\", \"content\": \"other\"}, {\"role\": \"assistant\", \"content\": "
                  "\"b\"}]}\n",
                  f);
    }
    fclose(f);
    char *out = datagen_path(dir, "prepared");
    datagen_write(dir, "prepared/placeholder", "", 0);
    TgSftPrepareOptions opt = {.sources = path, .tok = &tok, .seq_len = 64, .val_fraction = 0.1, .pairs = true};
    TgSftPrepareResult res;
    cr_assert_eq(tg_sft_prepare(&opt, out, NULL, &res), TG_OK, "%s", tg_error_message());
    cr_expect_eq(res.lines, 42);
    cr_expect_eq(res.conversations, 80, "40 pairs, two conversations each");
    cr_expect_eq(res.identical_pairs, 1);
    cr_expect_eq(res.prompts_differ, 1);
    cr_expect(res.train_conversations == 72 && res.val_conversations == 8, "36 pairs and 4: %llu and %llu",
              (unsigned long long)res.train_conversations, (unsigned long long)res.val_conversations);
    cr_assert_eq(res.n_errors, 2);
    cr_expect(strstr(res.errors[0], "dpo.jsonl: line 12: the chosen and rejected replies are the same"), "%s",
              res.errors[0]);
    cr_expect(strstr(res.errors[1], "dpo.jsonl: line 23: the chosen and rejected conversations differ"), "%s",
              res.errors[1]);
    /* the files: each pair's two sides share their prompt, then differ */
    TgSplit split;
    cr_assert_eq(tg_sft_split_open(&split, out, TG_PREPARE_TRAIN_FILE, TG_SFT_TRAIN_MASK_FILE, (uint32_t)tok.vocab_size,
                                   tok.fingerprint, 64),
                 TG_OK, "%s", tg_error_message());
    cr_assert_eq(split.n_conversations, 72);
    int32_t a[64], b[64];
    for (size_t p = 0; p < 36; p++) {
        uint64_t c0 = split.starts[2 * p], r0 = split.starts[2 * p + 1], end = split.starts[2 * p + 2];
        cr_assert_leq(r0 - c0, 64);
        cr_assert_leq(end - r0, 64);
        assert_ok(tg_token_store_read(&split.tokens, c0, (size_t)(r0 - c0), a));
        assert_ok(tg_token_store_read(&split.tokens, r0, (size_t)(end - r0), b));
        size_t same = 0;
        while (same < r0 - c0 && same < end - r0 && a[same] == b[same]) same++;
        cr_expect(same >= 6 && same < r0 - c0, "pair %zu shares %zu ids", p, same);
    }
    tg_split_close(&split);

    opt.strict = true;
    datagen_remove_tree(out);
    datagen_write(dir, "prepared/placeholder", "", 0);
    cr_expect_eq(tg_sft_prepare(&opt, out, NULL, &res), TG_ERR_FORMAT);
    cr_expect(strstr(tg_error_message(), "line 12: the chosen and rejected replies are the same") &&
                  strstr(tg_error_message(), "`strict`"),
              "%s", tg_error_message());
    /* too few pairs left: the counts say why */
    f = fopen(path, "w");
    cr_assert_not_null(f);
    write_pair(f, "One?", "One, says the atlas.", "Two.");
    write_pair(f, "Same?", "Yes.", "Yes.");
    fclose(f);
    opt.strict = false;
    datagen_remove_tree(out);
    datagen_write(dir, "prepared/placeholder", "", 0);
    cr_expect_eq(tg_sft_prepare(&opt, out, NULL, &res), TG_ERR_FORMAT);
    cr_expect(strstr(tg_error_message(),
                     "holds 1 pair to train on (2 lines: 0 malformed, 0 without an assistant reply, 1 with the "
                     "same reply twice, 0 with two prompts"),
              "%s", tg_error_message());
    free(path), free(out);
}

/* ---- the pair loader ---- */

/* The pairs of `n` lines of dpo.jsonl prepared into dir/NAME and opened as its train split. */
static void prepared_pairs(int n, const char *name, TgSplit *split) {
    char *path = datagen_path(dir, "pairs.jsonl"), file[64];
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < n; i++) {
        char user[64], good[96], bad[64];
        snprintf(user, sizeof user, "Question %d, %s?", i, i % 2 ? "briefly" : "at length if you can");
        snprintf(good, sizeof good, "Answer %d, from the atlas.", i);
        snprintf(bad, sizeof bad, "%d", i);
        write_pair(f, user, good, bad);
    }
    fclose(f);
    snprintf(file, sizeof file, "%s/placeholder", name);
    datagen_write(dir, file, "", 0);
    char *out = datagen_path(dir, name);
    TgSftPrepareOptions opt = {.sources = path, .tok = &tok, .seq_len = 64, .val_fraction = 0.2, .pairs = true};
    TgSftPrepareResult res;
    cr_assert_eq(tg_sft_prepare(&opt, out, NULL, &res), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_sft_split_open(split, out, TG_PREPARE_TRAIN_FILE, TG_SFT_TRAIN_MASK_FILE, (uint32_t)tok.vocab_size,
                                   tok.fingerprint, 64),
                 TG_OK, "%s", tg_error_message());
    free(path), free(out);
}

/* Row p and row P + p are the two sides of one pair: the same prompt from position 0, then
 * their replies, each side's targets its reply's tokens alone; padding predicts nothing. Every
 * pair comes once an epoch; skipping and setting the state draw what drawing does. */
Test(pair_loader, rows_are_the_sides_of_a_pair_and_resume_draws_the_same, .init = setup, .fini = teardown) {
    TgSplit split;
    prepared_pairs(10, "ten", &split);
    size_t n_pairs;
    assert_ok(tg_pair_split_count(&split, &n_pairs));
    cr_assert_eq(n_pairs, 8);
    enum { P = 3, T = 64, BATCHES = 8 };
    TgPairLoader ld, again;
    assert_ok(tg_pair_loader_init(&ld, &split, P, T, 7, tok.eot_id, true));
    int32_t in[BATCHES][2 * P * T], tg[BATCHES][2 * P * T];
    uint64_t which[BATCHES][P];
    int seen[8] = {0};
    for (int b = 0; b < BATCHES; b++) {
        assert_ok(tg_pair_loader_next(&ld, in[b], tg[b], which[b]));
        for (int p = 0; p < P; p++) {
            cr_assert_lt(which[b][p], 8);
            if (b * P + p < 8) seen[which[b][p]]++;
            const int32_t *c = in[b] + p * T, *r = in[b] + (P + p) * T, *ct_ = tg[b] + p * T, *rt = tg[b] + (P + p) * T;
            cr_expect(c[0] == ct.im_start && r[0] == ct.im_start, "batch %d pair %d: each side starts its own row", b,
                      p);
            int same = 0;
            while (same < T && c[same] == r[same]) same++;
            cr_expect(same > 5 && same < T, "batch %d pair %d: the sides share %d positions", b, p, same);
            for (int i = 0; i + 1 < same; i++)
                cr_expect(ct_[i] == TG_IGNORE_INDEX && rt[i] == TG_IGNORE_INDEX,
                          "batch %d pair %d: prompt position %d is a target", b, p, i);
            int c_targets = 0, r_targets = 0;
            for (int i = 0; i < T; i++) {
                c_targets += ct_[i] != TG_IGNORE_INDEX, r_targets += rt[i] != TG_IGNORE_INDEX;
                if (ct_[i] != TG_IGNORE_INDEX) cr_expect_eq(ct_[i], c[i + 1], "a target is the next token");
                if (c[i] == tok.eot_id && i > 0 && c[i - 1] == tok.eot_id)
                    cr_expect_eq(ct_[i], TG_IGNORE_INDEX, "padding predicts");
            }
            cr_expect(c_targets > r_targets && r_targets >= 2, "the longer reply has more targets: %d, %d", c_targets,
                      r_targets);
        }
    }
    for (int k = 0; k < 8; k++) cr_expect_eq(seen[k], 1, "pair %d drawn %d times in the first epoch", k, seen[k]);
    assert_ok(tg_pair_loader_init(&again, &split, P, T, 7, tok.eot_id, true));
    TgLoaderState st = {.batches_drawn = 5};
    tg_pair_loader_set_state(&again, &st);
    int32_t in2[2 * P * T], tg2[2 * P * T];
    uint64_t which2[P];
    assert_ok(tg_pair_loader_next(&again, in2, tg2, which2));
    cr_expect(memcmp(in2, in[5], sizeof in2) == 0 && memcmp(tg2, tg[5], sizeof tg2) == 0 &&
                  memcmp(which2, which[5], sizeof which2) == 0,
              "the sixth batch, drawn after setting the state to 5");
    tg_pair_loader_free(&ld), tg_pair_loader_free(&again);
    /* a split of conversations, not pairs: one of them dropped, the count is odd */
    split.n_conversations--;
    cr_expect_eq(tg_pair_split_count(&split, &n_pairs), TG_ERR_FORMAT);
    cr_expect(strstr(tg_error_message(), "15 conversations: preference pairs come two by two"), "%s",
              tg_error_message());
    split.n_conversations++;
    tg_split_close(&split);
}

/* ---- the loss on a model ---- */

static void tiny_model(TgModel *model, int64_t vocab) {
    TgModelConfig c;
    cr_assert_eq(tg_model_preset("tiny", &c), TG_OK);
    c.vocab = vocab, c.seq_len = 64, c.n_kv_heads = 1;
    tg_model_build(model, &c);
    tg_model_init_weights(model, 9);
}

/* A side's log-probability is minus the sum of its targets' cross-entropy (tg_model_loss of that
 * row alone, times its targets); before any step the policy is the reference, so every margin is
 * 0 and the loss ln 2; a few AdamW steps on the loss make the chosen sides likelier than the
 * rejected ones (positive margins, all pairs right, a loss below ln 2). */
Test(dpo_loss, at_the_reference_the_loss_is_ln2_and_steps_raise_the_margin, .init = setup, .fini = teardown,
     .timeout = 60) {
    TgSplit split;
    prepared_pairs(10, "ten", &split);
    TgModel model;
    tiny_model(&model, tok.vocab_size);
    TestTape tt;
    test_tape_init(&tt, 1);
    enum { P = 4, T = 64 };
    float *ref = malloc(16 * sizeof *ref);
    assert_ok(tg_dpo_reference(&model, &tt.tape, &split, 3, T, tok.eot_id, ref));
    TgPairLoader ld;
    assert_ok(tg_pair_loader_init(&ld, &split, P, T, 3, tok.eot_id, true));
    int32_t in[2 * P * T], tg[2 * P * T];
    uint64_t which[P];
    assert_ok(tg_pair_loader_next(&ld, in, tg, which));
    float batch_ref[2 * P];
    for (int p = 0; p < P; p++) batch_ref[p] = ref[2 * which[p]], batch_ref[P + p] = ref[2 * which[p] + 1];
    /* each side's log-probability, from the cross-entropy of its row alone */
    for (int r = 0; r < 2 * P; r++) {
        int count = 0;
        for (int i = 0; i < T; i++) count += tg[r * T + i] != TG_IGNORE_INDEX;
        TgTensor *ce = tg_model_loss(
            &model, &tt.tape, &(TgBatch){.tokens = in + r * T, .targets = tg + r * T, .batch = 1, .seq = T}, NULL);
        double logp = -(double)ce->data[0] * count;
        tg_tape_reset(&tt.tape);
        cr_expect(fabs(logp - batch_ref[r]) <= 1e-5 * fabs(logp),
                  "row %d: %.7g from the cross-entropy, %.7g as the reference", r, logp, (double)batch_ref[r]);
    }
    TgBatch b = {.tokens = in, .targets = tg, .batch = 2 * P, .seq = T};
    TgDpoStats st;
    TgTensor *loss = tg_dpo_batch_loss(&model, &tt.tape, &b, batch_ref, 0.1, &st);
    cr_expect(fabs(loss->data[0] - log(2.0)) < 1e-6 && st.margin == 0 && st.accuracy == 0.5,
              "at the reference: loss %.8f, margin %g, accuracy %g (every pair a tie)", (double)loss->data[0], st.margin,
              st.accuracy);
    tg_tape_reset(&tt.tape);
    TgAdamWConfig opt = tg_adamw_defaults();
    for (int step = 0; step < 10; step++) {
        tg_params_zero_grad(&model.params);
        tg_tape_backward(&tt.tape, tg_dpo_batch_loss(&model, &tt.tape, &b, batch_ref, 0.1, NULL));
        tg_adamw_step(&model.params, &opt, step + 1, 1e-2, NULL);
        tg_tape_reset(&tt.tape);
    }
    loss = tg_dpo_batch_loss(&model, &tt.tape, &b, batch_ref, 0.1, &st);
    fprintf(stderr, "after 10 steps: loss %.4f, margin %.4f, accuracy %.2f, chosen %.2f, rejected %.2f\n",
            (double)loss->data[0], st.margin, st.accuracy, st.chosen, st.rejected);
    cr_expect(loss->data[0] < 0.6 && st.margin > 0.1 && st.accuracy == 1.0, "loss %g, margin %g, accuracy %g",
              (double)loss->data[0], st.margin, st.accuracy);
    tg_tape_reset(&tt.tape);
    test_tape_free(&tt);
    tg_pair_loader_free(&ld);
    tg_model_free(&model);
    tg_split_close(&split);
    free(ref);
}
