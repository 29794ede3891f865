/* Supervised fine-tuning: the ChatML rendering and its ids (data/chat_format.h), the loss mask,
 * the packing loader (data/sft_loader.h), what the gradients see, and `tapegrad sft` end to end.
 *
 * What the mask must get right, the bugs MiniMind's users found in theirs: the reply and its
 * closing <|im_end|> are trained, the <|im_start|>assistant\n that opens it is not, nor anything
 * of a system or user turn. The gradients prove it: a user turn that no trained token can see
 * changes no bit of them, the logits of masked positions get exactly zero gradient, and a
 * conversation packed after another is computed bitwise as if that other were any other. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptutil.h"
#include "data/chat_format.h"
#include "data/sft_data.h"
#include "data/sft_loader.h"
#include "datagen.h"
#include "tapegrad/model.h"
#include "tapegrad/ops.h"
#include "testutil.h"

/* ---- a tokenizer with the ChatML markers, trained on generated prose ---- */

/* Prose, and indented lines: the merge of "\n" and " " that a reply beginning with white space
 * can share with the header's "\n". */
static TgTokenizer chat_tokenizer(TgChatTokens *ct) {
    size_t prose_len = 60000, extra = 300 * 12;
    char *text = datagen_prose(3, prose_len + extra);
    for (size_t i = 0; i < 300; i++) memcpy(text + prose_len + 12 * i, "list:\n  item", 12);
    TgTokenizer tok;
    cr_assert_eq(tg_tokenizer_bpe_train_specials(text, prose_len + extra, 600, "chatml", &tok), TG_OK, "%s", tg_error_message());
    free(text);
    cr_assert_eq(tg_chat_tokens_find(&tok, "test", ct), TG_OK, "%s", tg_error_message());
    return tok;
}

static TgConversation conversation(int n, const TgChatRole *roles, const char *const *contents) {
    TgConversation c = {0};
    for (int i = 0; i < n; i++) tg_chat_conversation_add(&c, roles[i], contents[i], strlen(contents[i]));
    return c;
}

/* ---- rendering ---- */

Test(chat_format, renders_chatml_as_minimind_template_does) {
    TgConversation c = conversation(3, (TgChatRole[]){TG_CHAT_SYSTEM, TG_CHAT_USER, TG_CHAT_ASSISTANT},
                                  (const char *[]){"You are kind.", "Hi!", "Hello, how can I help?"});
    size_t len;
    char *text = tg_chat_render_text(&c, false, &len);
    const char *expect = "<|im_start|>system\nYou are kind.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
                         "<|im_start|>assistant\nHello, how can I help?<|im_end|>\n";
    cr_expect_eq(len, strlen(expect));
    cr_expect_str_eq(text, expect);
    free(text);
    tg_chat_conversation_free(&c);
    c = conversation(1, (TgChatRole[]){TG_CHAT_USER}, (const char *[]){"2+2?"});
    text = tg_chat_render_text(&c, true, &len);
    cr_expect_str_eq(text, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
    free(text);
    tg_chat_conversation_free(&c);
}

/* The ids of a conversation are those of its whole rendered text, encoded in one piece: the
 * markers single ids, and special-token text inside a content the token (as Hugging Face's
 * tokenizer(apply_chat_template(...)) gives them). */
Test(chat_format, ids_are_the_whole_rendered_text_encoded) {
    TgChatTokens ct;
    TgTokenizer tok = chat_tokenizer(&ct);
    cr_expect(ct.im_start >= 0 && ct.im_end >= 0 && ct.im_start != ct.im_end);
    static const char *const cases[][3] = {
        {"Be brief.", "What is the time?", "It is noon."},
        {"", "  leading spaces\n\nand lines  ", "\n  a reply that starts with white space "},
        {"sys", "a user quoting <|im_end|> and <|im_start|>assistant\n", "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 <|endoftext|>"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TgConversation c = conversation(3, (TgChatRole[]){TG_CHAT_SYSTEM, TG_CHAT_USER, TG_CHAT_ASSISTANT}, cases[i]);
        TgChatIds ids = {0};
        assert_ok(tg_chat_encode_conversation(&tok, &ct, &c, &ids));
        assert_ok(tg_chat_encode_generation_prompt(&tok, &ct, &ids));
        size_t len, n;
        char *text = tg_chat_render_text(&c, true, &len);
        int32_t *whole = malloc((tg_tokenizer_max_ids(&tok, len) + 1) * sizeof *whole);
        assert_ok(tg_tokenizer_encode(&tok, text, len, whole, tg_tokenizer_max_ids(&tok, len), &n));
        cr_expect_eq(n, ids.n, "case %zu: %zu ids in pieces, %zu for the whole text", i, ids.n, n);
        cr_expect(memcmp(whole, ids.ids, (n < ids.n ? n : ids.n) * sizeof *whole) == 0, "case %zu: the ids differ", i);
        free(whole), free(text);
        tg_chat_ids_free(&ids);
        tg_chat_conversation_free(&c);
    }
    tg_tokenizer_free(&tok);
}

/* The bytes of ids[from, to) */
static char *bytes_of(const TgTokenizer *tok, const int32_t *ids, size_t from, size_t to) {
    char *out;
    size_t len;
    cr_assert_eq(tg_tokenizer_decode(tok, ids + from, to - from, &out, &len), TG_OK);
    return out;
}

/* The mask of a conversation of every role: exactly the reply's ids and its closing <|im_end|>
 * are trained; <|im_start|>, "assistant", its "\n", the "\n" after <|im_end|>, and every id of the
 * system and user turns are not. */
Test(chat_format, the_mask_covers_each_reply_and_its_im_end_and_not_the_header) {
    TgChatTokens ct;
    TgTokenizer tok = chat_tokenizer(&ct);
    const char *contents[] = {"Answer in one line.", "What colour is the sky?", "The sky is blue.", "And grass?",
                              "Grass is green, mostly."};
    TgConversation c = conversation(5, (TgChatRole[]){TG_CHAT_SYSTEM, TG_CHAT_USER, TG_CHAT_ASSISTANT, TG_CHAT_USER, TG_CHAT_ASSISTANT},
                                  contents);
    TgChatIds ids = {0};
    assert_ok(tg_chat_encode_conversation(&tok, &ct, &c, &ids));
    /* walk the turns: <|im_start|> role \n content <|im_end|> \n */
    size_t at = 0;
    for (size_t t = 0; t < c.n_turns; t++) {
        cr_assert_eq(ids.ids[at], ct.im_start, "turn %zu starts with <|im_start|>", t);
        size_t end = at + 1;
        while (ids.ids[end] != ct.im_end) end++;
        bool reply = c.turns[t].role == TG_CHAT_ASSISTANT;
        cr_expect_eq(ids.trained[at], 0, "turn %zu: <|im_start|> is not trained", t);
        cr_expect_eq(ids.trained[end], reply, "turn %zu: <|im_end|> is trained exactly in a reply", t);
        /* the header "role\n" and the content */
        size_t first_trained = end;
        for (size_t i = at + 1; i < end; i++)
            if (ids.trained[i] && first_trained == end) first_trained = i;
        for (size_t i = first_trained; i < end; i++) cr_expect_eq(ids.trained[i], 1, "turn %zu, id %zu: a hole in the mask", t, i);
        char *header = bytes_of(&tok, ids.ids, at + 1, first_trained), *content = bytes_of(&tok, ids.ids, first_trained, end);
        char expect_header[64];
        snprintf(expect_header, sizeof expect_header, "%s\n", tg_chat_role_name(c.turns[t].role));
        if (reply) {
            cr_expect_str_eq(header, expect_header, "turn %zu: the untrained ids of the reply are its header", t);
            cr_expect_str_eq(content, contents[t], "turn %zu: the trained ids are the content", t);
        } else {
            cr_expect_eq(first_trained, end, "turn %zu (%s): nothing is trained", t, tg_chat_role_name(c.turns[t].role));
        }
        free(header), free(content);
        /* then "\n", never trained */
        size_t next = end + 1;
        while (next < ids.n && ids.ids[next] != ct.im_start) cr_expect_eq(ids.trained[next++], 0, "the \\n after <|im_end|>");
        at = next;
    }
    cr_expect_eq(at, ids.n);
    tg_chat_ids_free(&ids);
    tg_chat_conversation_free(&c);
    tg_tokenizer_free(&tok);
}

/* A reply that begins with white space can share an id with the header's "\n" (the pre-split
 * joins "\n " before a word's space): that id holds reply text, so it is trained. */
Test(chat_format, an_id_shared_by_the_header_and_the_reply_is_trained) {
    TgChatTokens ct;
    TgTokenizer tok = chat_tokenizer(&ct);
    TgChatIds ids = {0};
    assert_ok(tg_chat_encode_turn(&tok, &ct, TG_CHAT_ASSISTANT, "   spaced out", 13, &ids));
    size_t first = 1;
    while (!ids.trained[first]) first++;
    char *header = bytes_of(&tok, ids.ids, 1, first), *shared = bytes_of(&tok, ids.ids, first, first + 1);
    cr_expect_str_eq(header, "assistant", "only the ids inside \"assistant\\n\" are the header's");
    cr_expect(shared[0] == '\n' && shared[1] == ' ', "the first trained id is \"\\n \"... (got \"%s\")", shared);
    free(header), free(shared);
    tg_chat_ids_free(&ids);
    tg_tokenizer_free(&tok);
}

/* ---- reading conversations ---- */

static bool parse(const char *json, TgConversation *c, char *why, size_t cap) {
    TgJsonlLine line = {.kind = TG_JSONL_OBJECT, .number = 7, .text = json, .len = strlen(json)};
    cr_assert_eq(tg_json_check(json, strlen(json), "line"), TG_OK, "%s", tg_error_message());
    return tg_chat_conversation_parse(&line, c, why, cap);
}

/* A line exactly as MiniMind's sft_mini_512.jsonl writes one reads as it is: no conversion step. */
Test(chat_format, reads_a_line_of_minimind_sft_set) {
    const char *line = "{\"conversations\": [{\"role\": \"user\", \"content\": \"\\u8bf7\\u7528\\u4e00\\u53e5\\u8bdd"
                       "\\u4ecb\\u7ecd\\u4f60\\u81ea\\u5df1\\u3002\"}, {\"role\": \"assistant\", \"content\": "
                       "\"\xe6\x88\x91\xe6\x98\xaf MiniMind\xef\xbc\x8c\xe4\xb8\x80\xe4\xb8\xaa\xe5\xb0\x8f\xe6\xa8\xa1"
                       "\xe5\x9e\x8b\xe3\x80\x82\\n\\n\\\"ok\\\"\"}]}";
    TgConversation c = {0};
    char why[256];
    cr_assert(parse(line, &c, why, sizeof why), "%s", why);
    cr_assert_eq(c.n_turns, 2);
    const char *user = "\xe8\xaf\xb7\xe7\x94\xa8\xe4\xb8\x80\xe5\x8f\xa5\xe8\xaf\x9d\xe4\xbb\x8b\xe7\xbb\x8d"
                       "\xe4\xbd\xa0\xe8\x87\xaa\xe5\xb7\xb1\xe3\x80\x82",
               *reply = "\xe6\x88\x91\xe6\x98\xaf MiniMind\xef\xbc\x8c\xe4\xb8\x80\xe4\xb8\xaa\xe5\xb0\x8f"
                        "\xe6\xa8\xa1\xe5\x9e\x8b\xe3\x80\x82\n\n\"ok\"";
    cr_expect(c.turns[0].role == TG_CHAT_USER && c.turns[0].len == strlen(user) && memcmp(chat_turn_text(&c, 0), user, strlen(user)) == 0);
    cr_expect(c.turns[1].role == TG_CHAT_ASSISTANT && c.turns[1].len == strlen(reply) &&
              memcmp(chat_turn_text(&c, 1), reply, strlen(reply)) == 0);
    /* members tapegrad does not read are skipped; a NUL in a content is kept */
    cr_assert(parse("{\"id\": 3, \"conversations\": [{\"role\": \"system\", \"content\": \"a\\u0000b\", \"x\": [1]}, "
                    "{\"content\": \"q\", \"role\": \"user\", \"reasoning_content\": null}], \"tools\": {}}",
                    &c, why, sizeof why),
              "%s", why);
    cr_expect_eq(c.n_turns, 2);
    cr_expect(c.turns[0].len == 3 && memcmp(chat_turn_text(&c, 0), "a\0b", 3) == 0);
    cr_expect(!tg_chat_conversation_has_reply(&c));
    tg_chat_conversation_free(&c);
}

Test(chat_format, refuses_what_is_no_conversation_naming_the_place) {
    static const struct {
        const char *json, *says;
    } cases[] = {
        {"{\"text\": \"hello\"}", "line 7 has no \"conversations\" array"},
        {"{\"conversations\": {}}", "line 7: \"conversations\" is an object, not an array"},
        {"{\"conversations\": [], \"x\": 1}", "line 7: \"conversations\" is empty"},
        {"{\"conversations\": [], \"conversations\": []}", "line 7 gives \"conversations\" twice"},
        {"{\"conversations\": [\"hi\"]}", "line 7, turn 1 is a string, not an object"},
        {"{\"conversations\": [{\"role\": \"user\"}]}", "line 7, turn 1 has no \"content\""},
        {"{\"conversations\": [{\"role\": \"user\", \"content\": 3}]}", "line 7, turn 1: \"content\" is a number, not a string"},
        {"{\"conversations\": [{\"role\": \"user\", \"content\": \"a\"}, {\"content\": \"b\"}]}", "line 7, turn 2 has no \"role\""},
        {"{\"conversations\": [{\"role\": \"tool\", \"content\": \"a\"}]}", "line 7, turn 1 has the role \"tool\""},
        {"{\"conversations\": [{\"role\": \"user\", \"role\": \"user\", \"content\": \"a\"}]}", "turn 1 gives \"role\" twice"},
    };
    TgConversation c = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[256] = "";
        cr_expect(!parse(cases[i].json, &c, why, sizeof why), "case %zu was read", i);
        cr_expect(strstr(why, cases[i].says) != NULL, "case %zu: \"%s\" does not say \"%s\"", i, why, cases[i].says);
    }
    tg_chat_conversation_free(&c);
}

Test(chat_format, a_tokenizer_without_the_markers_is_refused_saying_how_to_get_one) {
    char *text = datagen_english(1, 5000);
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train(text, strlen(text), 300, &tok));
    TgChatTokens ct;
    assert_fails(tg_chat_tokens_find(&tok, "base/", &ct), TG_ERR_MISMATCH, "base/ has no <|im_start|> and <|im_end|>");
    assert_fails(tg_chat_tokens_find(&tok, "base/", &ct), TG_ERR_MISMATCH, "`special_tokens` chatml");
    tg_tokenizer_free(&tok);
    assert_ok(tg_tokenizer_char_train(text, strlen(text), &tok));
    assert_fails(tg_chat_tokens_find(&tok, "char run", &ct), TG_ERR_MISMATCH, "(a char tokenizer)");
    tg_tokenizer_free(&tok);
    free(text);
}

/* ---- a split in memory, for the loader and the gradients ---- */

typedef struct {
    TgSplit split;
    int32_t *tokens, *mask;
    size_t n, cap;
} MemSplit;

/* Appends the conversation's ids and mask as tg_sft_prepare writes them. */
static void mem_add(MemSplit *m, const TgChatIds *ids) {
    if (m->n + ids->n > m->cap) {
        m->cap = 2 * (m->n + ids->n);
        m->tokens = realloc(m->tokens, m->cap * sizeof *m->tokens);
        m->mask = realloc(m->mask, m->cap * sizeof *m->mask);
    }
    size_t c = m->split.n_conversations++;
    m->split.starts = realloc(m->split.starts, (c + 2) * sizeof *m->split.starts);
    m->split.starts[c] = m->n;
    for (size_t i = 0; i < ids->n; i++) {
        m->tokens[m->n + i] = ids->ids[i];
        m->mask[m->n + i] = i == 0 ? TG_SFT_MASK_START : ids->trained[i] ? TG_SFT_MASK_TRAINED : TG_SFT_MASK_CONTEXT;
    }
    m->n += ids->n;
    m->split.starts[c + 1] = m->n;
}

static void mem_finish(MemSplit *m) {
    tg_token_store_from_memory(&m->split.tokens, m->tokens, m->n);
    tg_token_store_from_memory(&m->split.mask, m->mask, m->n);
}

static void mem_free(MemSplit *m) {
    free(m->tokens), free(m->mask), free(m->split.starts);
    memset(m, 0, sizeof *m);
}

/* n conversations of 1 to 3 exchanges, of varied lengths. */
static void mem_conversations(MemSplit *m, const TgTokenizer *tok, const TgChatTokens *ct, int n) {
    static const char *const words[] = {"tea", "river", "seven", "bright", "cold", "map", "lantern", "quiet", "north"};
    for (int i = 0; i < n; i++) {
        TgConversation c = {0};
        char text[256];
        for (int t = 0; t <= i % 2; t++) {
            int len = snprintf(text, sizeof text, "about %s %d", words[(i + t) % 9], i);
            tg_chat_conversation_add(&c, TG_CHAT_USER, text, (size_t)len);
            len = snprintf(text, sizeof text, "%s%s", words[(i * 7 + t) % 9], i % 3 ? "." : " is a word I know well.");
            tg_chat_conversation_add(&c, TG_CHAT_ASSISTANT, text, (size_t)len);
        }
        TgChatIds ids = {0};
        cr_assert_eq(tg_chat_encode_conversation(tok, ct, &c, &ids), TG_OK);
        mem_add(m, &ids);
        tg_chat_ids_free(&ids);
        tg_chat_conversation_free(&c);
    }
    mem_finish(m);
}

/* ---- the loader ---- */

enum { SEQ = 128, PAD = 5 };

/* Every row: whole conversations one after the other, then padding; key_start the start of each
 * one's own; targets its next id where the mask trains it, else ignored; padding ignored and
 * alone. Together the rows of an epoch hold every conversation once. */
Test(sft_loader, rows_hold_whole_conversations_each_on_its_own) {
    TgChatTokens ct;
    TgTokenizer tok = chat_tokenizer(&ct);
    MemSplit m = {0};
    mem_conversations(&m, &tok, &ct, 23);
    TgSftLoader ld;
    assert_ok(tg_sft_loader_init(&ld, &m.split, 3, SEQ, 11, PAD, TG_SFT_ORDER_SHUFFLED));
    int32_t in[3 * SEQ], tg[3 * SEQ], ks[3 * SEQ];
    int seen[23] = {0}, rows = 0;
    while (ld.epoch == 0) {
        assert_ok(tg_sft_loader_next(&ld, in, tg, ks));
        for (int r = 0; r < 3; r++, rows++) {
            int32_t *row_in = in + r * SEQ, *row_tg = tg + r * SEQ, *row_ks = ks + r * SEQ;
            int p = 0;
            while (p < SEQ && row_in[p] == ct.im_start && row_ks[p] == p) {
                /* the conversation that starts here spans the positions that see from p: find
                 * one of that length with those ids */
                int end = p;
                while (end < SEQ && row_ks[end] == p) end++;
                int found = -1;
                for (size_t c = 0; c < m.split.n_conversations && found < 0; c++) {
                    size_t len = m.split.starts[c + 1] - m.split.starts[c];
                    if (len == (size_t)(end - p) && memcmp(row_in + p, m.tokens + m.split.starts[c], len * sizeof *row_in) == 0)
                        found = (int)c;
                }
                cr_assert_geq(found, 0, "row %d, position %d: no whole conversation starts there", rows, p);
                size_t at = m.split.starts[found], len = m.split.starts[found + 1] - at;
                seen[found]++;
                for (size_t i = 0; i < len; i++) {
                    int32_t expect = i + 1 < len && m.mask[at + i + 1] == TG_SFT_MASK_TRAINED ? m.tokens[at + i + 1] : TG_IGNORE_INDEX;
                    cr_expect_eq(row_tg[p + (int)i], expect, "row %d, position %zu: target %d, expected %d", rows, i, row_tg[p + (int)i], expect);
                }
                p = end;
            }
            cr_expect_gt(p, 0, "row %d holds no conversation", rows);
            for (; p < SEQ; p++)
                cr_expect(row_in[p] == PAD && row_tg[p] == TG_IGNORE_INDEX && row_ks[p] == p, "row %d: position %d is no padding",
                          rows, p);
        }
    }
    /* the batches up to the one that crossed into epoch 1 hold all of epoch 0: each conversation */
    for (int c = 0; c < 23; c++) cr_expect_geq(seen[c], 1, "conversation %d never drawn in the first epoch", c);
    tg_sft_loader_free(&ld);
    mem_free(&m);
    tg_tokenizer_free(&tok);
}

/* The state is the batches drawn: skipping n draws as n batches do, and a loader set to a state
 * draws next what the loader that got there draws (a resume), across epochs; the seed decides
 * the order. */
Test(sft_loader, skipping_and_setting_the_state_draw_what_drawing_does) {
    TgChatTokens ct;
    TgTokenizer tok = chat_tokenizer(&ct);
    MemSplit m = {0};
    mem_conversations(&m, &tok, &ct, 17);
    TgSftLoader a, b, c, d;
    assert_ok(tg_sft_loader_init(&a, &m.split, 2, SEQ, 3, PAD, TG_SFT_ORDER_SHUFFLED));
    assert_ok(tg_sft_loader_init(&b, &m.split, 2, SEQ, 3, PAD, TG_SFT_ORDER_SHUFFLED));
    assert_ok(tg_sft_loader_init(&c, &m.split, 2, SEQ, 3, PAD, TG_SFT_ORDER_SHUFFLED));
    assert_ok(tg_sft_loader_init(&d, &m.split, 2, SEQ, 4, PAD, TG_SFT_ORDER_SHUFFLED));
    int32_t in_a[2 * SEQ], tg_a[2 * SEQ], ks_a[2 * SEQ], in_b[2 * SEQ], tg_b[2 * SEQ], ks_b[2 * SEQ];
    for (int i = 0; i < 25; i++) assert_ok(tg_sft_loader_next(&a, in_a, tg_a, ks_a));
    tg_sft_loader_skip(&b, 25);
    TgLoaderState st = tg_sft_loader_get_state(&a);
    cr_expect_eq(st.batches_drawn, 25);
    tg_sft_loader_set_state(&c, &st);
    cr_expect_gt(a.epoch, 1, "the test crosses epochs");
    bool differs_from_other_seed = false;
    for (int i = 0; i < 5; i++) {
        assert_ok(tg_sft_loader_next(&a, in_a, tg_a, ks_a));
        assert_ok(tg_sft_loader_next(&b, in_b, tg_b, ks_b));
        cr_expect(memcmp(in_a, in_b, sizeof in_a) == 0 && memcmp(tg_a, tg_b, sizeof tg_a) == 0 &&
                      memcmp(ks_a, ks_b, sizeof ks_a) == 0,
                  "batch %d after skipping differs", i);
        assert_ok(tg_sft_loader_next(&c, in_b, tg_b, ks_b));
        cr_expect(memcmp(in_a, in_b, sizeof in_a) == 0 && memcmp(tg_a, tg_b, sizeof tg_a) == 0, "batch %d after a resume differs", i);
        assert_ok(tg_sft_loader_next(&d, in_b, tg_b, ks_b));
        differs_from_other_seed |= memcmp(in_a, in_b, sizeof in_a) != 0;
    }
    cr_expect(differs_from_other_seed, "another seed draws the same batches");
    tg_sft_loader_free(&a), tg_sft_loader_free(&b), tg_sft_loader_free(&c), tg_sft_loader_free(&d);
    mem_free(&m);
    tg_tokenizer_free(&tok);
}

/* Evaluation batches are the split in its order, the same at every call; a loader of one pass
 * draws every conversation once, then padding. */
Test(sft_loader, evaluation_batches_are_fixed_and_one_pass_draws_each_once) {
    TgChatTokens ct;
    TgTokenizer tok = chat_tokenizer(&ct);
    MemSplit m = {0};
    mem_conversations(&m, &tok, &ct, 9);
    int32_t in1[4 * 2 * SEQ], tg1[4 * 2 * SEQ], ks1[4 * 2 * SEQ], in2[4 * 2 * SEQ], tg2[4 * 2 * SEQ], ks2[4 * 2 * SEQ];
    assert_ok(tg_sft_fixed_batches(&m.split, 2, SEQ, 4, PAD, in1, tg1, ks1));
    assert_ok(tg_sft_fixed_batches(&m.split, 2, SEQ, 4, PAD, in2, tg2, ks2));
    cr_expect(memcmp(in1, in2, sizeof in1) == 0 && memcmp(tg1, tg2, sizeof tg1) == 0 && memcmp(ks1, ks2, sizeof ks1) == 0);
    cr_expect(memcmp(in1, m.tokens, (m.split.starts[1]) * sizeof *in1) == 0, "the first conversation comes first");
    TgSftLoader once;
    assert_ok(tg_sft_loader_init(&once, &m.split, 2, SEQ, 0, PAD, TG_SFT_ORDER_ONCE));
    uint64_t trained = 0;
    size_t positions = 0;
    while (!tg_sft_loader_done(&once)) {
        assert_ok(tg_sft_loader_next(&once, in1, tg1, ks1));
        for (int i = 0; i < 2 * SEQ; i++) {
            trained += tg1[i] != TG_IGNORE_INDEX;
            positions += in1[i] != PAD;
        }
    }
    uint64_t expect = 0;
    for (size_t i = 0; i < m.n; i++) expect += m.mask[i] == TG_SFT_MASK_TRAINED;
    cr_expect_eq(trained, expect, "one pass trains every trained id once");
    cr_expect_eq(positions, m.n);
    assert_ok(tg_sft_loader_next(&once, in1, tg1, ks1));
    for (int i = 0; i < 2 * SEQ; i++) cr_expect_eq(tg1[i], TG_IGNORE_INDEX, "after the pass, padding");
    tg_sft_loader_free(&once);
    mem_free(&m);
    tg_tokenizer_free(&tok);
}

/* ---- what the gradients see ---- */

static void tiny_model(TgModel *model, int64_t vocab) {
    TgModelConfig c;
    cr_assert_eq(tg_model_preset("tiny", &c), TG_OK);
    c.vocab = vocab, c.seq_len = SEQ, c.n_kv_heads = 1;
    tg_model_build(model, &c);
    tg_model_init_weights(model, 9);
}

/* One row of a conversation and padding, as the loader makes it. */
static void one_row(const TgChatIds *ids, int32_t *in, int32_t *tg, int32_t *ks) {
    cr_assert_leq(ids->n, SEQ);
    for (int p = 0; p < SEQ; p++) {
        bool inside = (size_t)p < ids->n;
        in[p] = inside ? ids->ids[p] : PAD;
        ks[p] = inside ? 0 : p;
        tg[p] = inside && (size_t)p + 1 < ids->n && ids->trained[p + 1] ? ids->ids[p + 1] : TG_IGNORE_INDEX;
    }
}

/* The parameters' gradient of the packed loss of one row, copied out. */
static float *gradient_of(TgModel *model, const int32_t *in, const int32_t *tg, const int32_t *ks) {
    TestTape tt;
    test_tape_init(&tt, 1);
    tg_params_zero_grad(&model->params);
    tg_tape_backward(&tt.tape,
                     tg_model_loss(model, &tt.tape,
                                   &(TgBatch){.tokens = in, .targets = tg, .key_start = ks, .batch = 1, .seq = SEQ},
                                   NULL));
    float *g = malloc(model->params.total * sizeof *g);
    memcpy(g, model->params.grad, model->params.total * sizeof *g);
    test_tape_free(&tt);
    return g;
}

/* A user turn after the last reply: no trained id comes after it or sees it, so changing its
 * text (even its length) changes no bit of the gradients. A mask that trained it, or attention
 * that looked ahead, would change them; changing the reply does (the test can fail). */
Test(sft_gradients, a_user_turn_no_reply_sees_changes_no_bit_of_them) {
    TgChatTokens ct;
    TgTokenizer tok = chat_tokenizer(&ct);
    TgModel model;
    tiny_model(&model, tok.vocab_size);
    const char *last_users[] = {"thanks, that is all", "wait, one more question about something else entirely"};
    const char *replies[] = {"It is five.", "It is five.", "It is six."};
    float *grads[3];
    for (int v = 0; v < 3; v++) {
        TgConversation c = conversation(3, (TgChatRole[]){TG_CHAT_USER, TG_CHAT_ASSISTANT, TG_CHAT_USER},
                                      (const char *[]){"What is two and three?", replies[v], last_users[v % 2]});
        TgChatIds ids = {0};
        assert_ok(tg_chat_encode_conversation(&tok, &ct, &c, &ids));
        int32_t in[SEQ], tg[SEQ], ks[SEQ];
        one_row(&ids, in, tg, ks);
        grads[v] = gradient_of(&model, in, tg, ks);
        tg_chat_ids_free(&ids);
        tg_chat_conversation_free(&c);
    }
    size_t bytes = model.params.total * sizeof(float);
    cr_expect(memcmp(grads[0], grads[1], bytes) == 0, "another last user turn changed the gradients");
    cr_expect(memcmp(grads[0], grads[2], bytes) != 0, "another reply did not change the gradients");
    for (int v = 0; v < 3; v++) free(grads[v]);
    tg_model_free(&model);
    tg_tokenizer_free(&tok);
}

/* The logits' gradient is exactly zero at every position whose target is masked (system, user,
 * header, the "\n" after <|im_end|>, the last id, padding), and not at the trained ones. */
Test(sft_gradients, masked_positions_get_exactly_zero_gradient) {
    TgChatTokens ct;
    TgTokenizer tok = chat_tokenizer(&ct);
    TgModel model;
    tiny_model(&model, tok.vocab_size);
    TgConversation c = conversation(3, (TgChatRole[]){TG_CHAT_SYSTEM, TG_CHAT_USER, TG_CHAT_ASSISTANT},
                                  (const char *[]){"Be short.", "Name a colour.", "Blue."});
    TgChatIds ids = {0};
    assert_ok(tg_chat_encode_conversation(&tok, &ct, &c, &ids));
    int32_t in[SEQ], tg[SEQ], ks[SEQ];
    one_row(&ids, in, tg, ks);
    TestTape tt;
    test_tape_init(&tt, 1);
    TgTensor *logits =
        tg_model_forward(&model, &tt.tape, &(TgBatch){.tokens = in, .key_start = ks, .batch = 1, .seq = SEQ}, NULL);
    tg_tensor_retain_grad(logits);
    tg_tape_backward(&tt.tape, tg_cross_entropy(&tt.tape, logits, tg, TG_IGNORE_INDEX));
    int64_t V = model.cfg.vocab, trained = 0;
    for (int p = 0; p < SEQ; p++) {
        double sum = 0;
        for (int64_t v = 0; v < V; v++) sum += fabs(logits->grad[p * V + v]);
        if (tg[p] == TG_IGNORE_INDEX) {
            cr_expect_eq(sum, 0.0, "position %d is masked but its logits get gradient %g", p, sum);
        } else {
            cr_expect_gt(sum, 0.0, "position %d is trained but gets no gradient", p);
            trained++;
        }
    }
    /* "Blue." and <|im_end|> */
    uint64_t expect = 0;
    for (size_t i = 0; i < ids.n; i++) expect += ids.trained[i];
    cr_expect_eq(trained, (int64_t)expect);
    test_tape_free(&tt);
    tg_chat_ids_free(&ids);
    tg_chat_conversation_free(&c);
    tg_model_free(&model);
    tg_tokenizer_free(&tok);
}

/* Packed: the logits of a conversation that follows another in a row are bitwise the same
 * whatever that other holds (of the same length); without key_start (one sequence a row) they
 * are not, so the test sees the packing. */
Test(sft_gradients, a_packed_conversation_sees_only_itself) {
    TgChatTokens ct;
    TgTokenizer tok = chat_tokenizer(&ct);
    TgModel model;
    tiny_model(&model, tok.vocab_size);
    TgChatIds x = {0}, y = {0};
    assert_ok(tg_chat_encode_turn(&tok, &ct, TG_CHAT_USER, "first conversation here", 23, &x));
    assert_ok(tg_chat_encode_turn(&tok, &ct, TG_CHAT_ASSISTANT, "and its reply", 13, &x));
    assert_ok(tg_chat_encode_turn(&tok, &ct, TG_CHAT_USER, "second one", 10, &y));
    assert_ok(tg_chat_encode_turn(&tok, &ct, TG_CHAT_ASSISTANT, "right", 5, &y));
    cr_assert_leq(x.n + y.n, SEQ);
    int32_t in[2][SEQ], ks[SEQ];
    for (int r = 0; r < 2; r++) {
        for (int p = 0; p < SEQ; p++) {
            in[r][p] = (size_t)p < x.n ? x.ids[p] : (size_t)p < x.n + y.n ? y.ids[p - x.n] : PAD;
            ks[p] = (size_t)p < x.n ? 0 : (size_t)p < x.n + y.n ? (int32_t)x.n : p;
        }
    }
    for (size_t p = 2; p + 2 < x.n; p++) in[1][p] = (in[1][p] + 7) % ct.im_start; /* another first conversation */
    TestTape tt;
    test_tape_init(&tt, 1);
    tg_tape_set_grad_enabled(&tt.tape, false);
    int64_t V = model.cfg.vocab;
    size_t y_bytes = y.n * (size_t)V * sizeof(float);
    float *seen[2][2];
    for (int packed = 0; packed < 2; packed++)
        for (int r = 0; r < 2; r++) {
            TgTensor *logits = tg_model_forward(
                &model, &tt.tape, &(TgBatch){.tokens = in[r], .key_start = packed ? ks : NULL, .batch = 1, .seq = SEQ},
                NULL);
            seen[packed][r] = malloc(y_bytes);
            memcpy(seen[packed][r], logits->data + x.n * (size_t)V, y_bytes);
            tg_tape_reset(&tt.tape);
        }
    cr_expect(memcmp(seen[1][0], seen[1][1], y_bytes) == 0, "packed: the second conversation saw the first");
    cr_expect(memcmp(seen[0][0], seen[0][1], y_bytes) != 0, "unpacked, the first conversation should show");
    for (int i = 0; i < 4; i++) free(seen[i / 2][i % 2]);
    test_tape_free(&tt);
    tg_chat_ids_free(&x), tg_chat_ids_free(&y);
    tg_model_free(&model);
    tg_tokenizer_free(&tok);
}

/* The loss of a packed batch is the mean over the trained targets alone: recomputed here in
 * double from the logits, over the rows the loader made, divided by the count of targets (the
 * mask's trained ids), not by the positions. */
Test(sft_gradients, the_loss_is_the_mean_over_assistant_tokens) {
    TgChatTokens ct;
    TgTokenizer tok = chat_tokenizer(&ct);
    MemSplit m = {0};
    mem_conversations(&m, &tok, &ct, 11);
    TgModel model;
    tiny_model(&model, tok.vocab_size);
    int32_t in[3 * SEQ], tg[3 * SEQ], ks[3 * SEQ];
    assert_ok(tg_sft_fixed_batches(&m.split, 3, SEQ, 1, PAD, in, tg, ks));
    TestTape tt;
    test_tape_init(&tt, 1);
    tg_tape_set_grad_enabled(&tt.tape, false);
    double loss = tg_model_loss(&model, &tt.tape,
                                &(TgBatch){.tokens = in, .targets = tg, .key_start = ks, .batch = 3, .seq = SEQ}, NULL)
                      ->data[0];
    tg_tape_reset(&tt.tape);
    TgTensor *logits =
        tg_model_forward(&model, &tt.tape, &(TgBatch){.tokens = in, .key_start = ks, .batch = 3, .seq = SEQ}, NULL);
    int64_t V = model.cfg.vocab, count = 0;
    double total = 0;
    for (int p = 0; p < 3 * SEQ; p++) {
        if (tg[p] == TG_IGNORE_INDEX) continue;
        const float *z = logits->data + p * V;
        double max = z[0], sum = 0;
        for (int64_t v = 1; v < V; v++) max = fmax(max, z[v]);
        for (int64_t v = 0; v < V; v++) sum += exp(z[v] - max);
        total += max + log(sum) - z[tg[p]];
        count++;
    }
    /* targets are the trained ids (the loader's test shows which): far fewer than the positions */
    int64_t positions = 0;
    for (int p = 0; p < 3 * SEQ; p++) positions += in[p] != PAD;
    cr_expect_gt(count, 0);
    cr_expect_lt(2 * count, positions, "%lld targets of %lld positions", (long long)count, (long long)positions);
    cr_expect_leq(fabs(loss - total / (double)count), 1e-5 * total / (double)count, "loss %.8f, the mean over %lld targets %.8f",
                  loss, (long long)count, total / (double)count);
    test_tape_free(&tt);
    tg_model_free(&model);
    mem_free(&m);
    tg_tokenizer_free(&tok);
}

/* ---- tapegrad sft ---- */

CKPT_SCRATCH_FIXTURE

/* A base run with the ChatML markers (2 steps of the tiny preset), and a JSONL of conversations:
 * a line exactly as MiniMind's sft_mini_512.jsonl writes one, short exchanges, a system turn, a
 * conversation longer than the window, one without a reply, and two malformed lines. */
static char *base_run(const char *flags) {
    char *base = datagen_path(dir, "base"), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --tokenizer bpe --vocab 320 %s --steps 2 --eval-every 0 --out %s",
                      corpus, flags, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    return base;
}

static char *conversations_file(void) {
    char *text = malloc(1 << 16);
    size_t n = 0;
    n += (size_t)sprintf(text + n, "{\"conversations\": [{\"role\": \"user\", \"content\": \"\\u4f60\\u597d\"}, {\"role\": "
                                   "\"assistant\", \"content\": \"\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x81\"}]}\n");
    static const char *const words[] = {"tea", "rain", "paper", "bells", "stone", "clocks"};
    for (int i = 0; i < 60; i++)
        n += (size_t)sprintf(text + n,
                             "{\"conversations\": [%s{\"role\": \"user\", \"content\": \"Say %s.\"}, {\"role\": \"assistant\", "
                             "\"content\": \"%s, %s.\"}]}\n",
                             i % 5 ? "" : "{\"role\": \"system\", \"content\": \"Echo the word.\"}, ", words[i % 6],
                             words[i % 6], words[(i + 1) % 6]);
    n += (size_t)sprintf(text + n, "{\"conversations\": [{\"role\": \"user\", \"content\": \"");
    for (int i = 0; i < 40; i++) n += (size_t)sprintf(text + n, "a long question ");
    n += (size_t)sprintf(text + n, "\"}, {\"role\": \"assistant\", \"content\": \"cut\"}]}\n");
    n += (size_t)sprintf(text + n, "{\"conversations\": [{\"role\": \"user\", \"content\": \"no reply\"}]}\n");
    n += (size_t)sprintf(text + n, "{\"conversations\": [{\"role\": \"tool\", \"content\": \"x\"}]}\nnot json\n");
    datagen_write(dir, "conversations.jsonl", text, n);
    free(text);
    return datagen_path(dir, "conversations.jsonl");
}

Test(sft_cli, fine_tunes_a_run_and_resumes_bitwise, .init = setup, .fini = teardown, .timeout = 120) {
    char *base = base_run("--special-tokens chatml"), *data = conversations_file();
    char *straight = datagen_path(dir, "straight"), *split = datagen_path(dir, "split"), *out = NULL;
    int rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --seq 96 --steps 12 --eval-every 4 --out %s",
                      base, data, straight);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "conversations: 61 from 1 file"), "%s", out);
    cr_expect(strstr(out, "1 conversation longer than --seq 96 tokens cut to the window"), "%s", out);
    cr_expect(strstr(out, "left out: 1 conversation without an assistant turn, 1 without one within the window"), "%s", out);
    cr_expect(strstr(out, "2 malformed lines skipped"), "%s", out);
    cr_expect(strstr(out, "conversations.jsonl: line 64, turn 1 has the role \"tool\""), "%s", out);
    cr_expect(strstr(out, "weights from"), "the base's val loss before training is reported:\n%s", out);
    /* ln vocab is a yardstick of training from random weights only; the base's val loss is not
     * shown on the progress lines as if measured since */
    cr_expect_null(strstr(out, "(ln vocab"), "%s", out);
    const char *first = strstr(out, "\nstep 1/12 ");
    cr_assert_not_null(first, "%s", out);
    cr_expect_not_null(memmem(first, strcspn(first + 1, "\n") + 1, " val - ", 7), "%.*s", (int)strcspn(first + 1, "\n") + 1,
                       first);
    /* the first step warms up: no ETA from it alone; from the next on, the pace since it */
    cr_expect_not_null(memmem(first, strcspn(first + 1, "\n") + 1, " ETA ?", 6), "%.*s", (int)strcspn(first + 1, "\n") + 1,
                       first);
    const char *fourth = strstr(out, "\nstep 4/12 ");
    cr_assert_not_null(fourth, "%s", out);
    cr_expect_not_null(memmem(fourth, strcspn(fourth + 1, "\n") + 1, " ETA 0m", 7), "%.*s", (int)strcspn(fourth + 1, "\n") + 1,
                       fourth);
    /* the hint runs as printed: the program as it was started, the run's folder */
    char *hint = strstr(out, "talk to it: ");
    cr_assert_not_null(hint, "%s", out);
    hint += strlen("talk to it: ");
    char command[8192];
    snprintf(command, sizeof command, "%.*s </dev/null >/dev/null 2>&1", (int)strcspn(hint, "\n"), hint);
    cr_expect(strncmp(hint, TAPEGRAD_BIN " chat --run ", strlen(TAPEGRAD_BIN " chat --run ")) == 0, "%s", hint);
    cr_expect_eq(test_run(command), 0, "the hint did not run as printed: %s", command);
    free(out);
    rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --seq 96 --steps 12 --eval-every 4 --stop-after 5 --out %s",
                  base, data, split);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "sft --resume %s", split);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "resuming at step 5 of 12"), "%s", out);
    free(out);
    ckpt_expect_same_metrics(straight, split, 5, 7);
    ckpt_expect_same_checkpoints(straight, split, 12);
    char *identity = datagen_path(straight, "run.txt"), *text = ckpt_read_text(identity);
    cr_expect(strstr(text, "--task sft\n"), "%s", text);
    free(text), free(identity);
    /* inspection and reports as for pretraining; eval: the val split's conversations, per assistant token */
    char *logged = datagen_path(dir, "logged"), *html = datagen_path(dir, "report.html");
    rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --seq 96 --steps 4 --eval-every 2 --log-grads 2 --out %s",
                  base, data, logged);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *grads = datagen_path(logged, "grads.jsonl");
    cr_expect_eq(ckpt_count_lines(grads), 3, "--log-grads 2 over 4 steps: steps 1, 2 and 4");
    rc = ckpt_cli(&out, "report %s --out %s", logged, html);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "inspect --run %s --batches 2 --batch 2 --threads 1", logged);
    cr_expect(rc == 0 && strstr(out, "model.embed_tokens.weight"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "eval --run %s --threads 1", logged);
    cr_expect(rc == 0 && strstr(out, "\"data\":\"the val split's conversations (the loss per assistant token)\""), "%s", out);
    free(out);
    free(grads), free(logged), free(html);
    free(base), free(data), free(straight), free(split);
}

/* The step's loss is the mean over every trained token of its micro-batches: two rows in one
 * micro-batch, or the same two rows as two micro-batches, give the same loss (up to rounding)
 * although the rows hold different numbers of trained tokens (a mean of the micro-batches'
 * means would not). */
Test(sft_cli, the_loss_is_per_trained_token_across_micro_batches, .init = setup, .fini = teardown, .timeout = 60) {
    char *base = base_run("--special-tokens chatml");
    /* replies of one word or of many: rows of very different numbers of trained tokens */
    char text[16384];
    size_t n = 0;
    for (int i = 0; i < 24; i++)
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "{\"conversations\": [{\"role\": \"user\", \"content\": \"q%d\"}, {\"role\": \"assistant\", "
                              "\"content\": \"%s\"}]}\n",
                              i, i % 3 ? "yes" : "the answer is a long one, with many words in it, more than fit in a few tokens");
    datagen_write(dir, "mixed.jsonl", text, n);
    char *data = datagen_path(dir, "mixed.jsonl");
    char *one = datagen_path(dir, "one"), *two = datagen_path(dir, "two"), *out = NULL;
    const char *flags = "--preset tiny --threads 1 --eval-batches 1 --seq 48 --steps 1 --eval-every 0";
    int rc = ckpt_cli(&out, "sft %s --batch 2 --accum 1 --init-from %s --data %s --out %s", flags, base, data, one);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "sft %s --batch 1 --accum 2 --init-from %s --data %s --out %s", flags, base, data, two);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    CkptMetricLine a, b;
    cr_assert_eq(ckpt_read_metrics(one, 0, &a, 1), 1);
    cr_assert_eq(ckpt_read_metrics(two, 0, &b, 1), 1);
    double la = strtod(a.loss, NULL), lb = strtod(b.loss, NULL), ga = strtod(a.grad_norm, NULL), gb = strtod(b.grad_norm, NULL);
    cr_expect_leq(fabs(la - lb), 1e-6 * la, "loss %s in one micro-batch, %s in two", a.loss, b.loss);
    cr_expect_leq(fabs(ga - gb), 1e-5 * ga, "gradient norm %s in one micro-batch, %s in two", a.grad_norm, b.grad_norm);
    free(base), free(data), free(one), free(two);
}

Test(sft_cli, what_cannot_be_fine_tuned_is_refused_saying_why, .init = setup, .fini = teardown, .timeout = 60) {
    char *base = base_run(""), *data = conversations_file(), *out_dir = datagen_path(dir, "out"), *out = NULL;
    /* a tokenizer without the markers */
    int rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --out %s", base, data, out_dir);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "has no <|im_start|> and <|im_end|> as a special token"), "%s", out);
    cr_expect(strstr(out, "--special-tokens chatml"), "%s", out);
    free(out);
    cr_expect(access(out_dir, F_OK) != 0, "a refused run left %s behind", out_dir);
    datagen_remove_tree(base);
    free(base);
    base = base_run("--special-tokens chatml");
    static const struct {
        const char *flags;
        int rc;
        const char *says;
    } cases[] = {
        {"--dim 32", 2, "--dim 32 differs from the 64 of --init-from"},
        {"--ffn relu", 2, "--ffn relu differs from the swiglu of --init-from"},
        {"--tokenizer char", 2, "--tokenizer char differs from the bpe of --init-from"},
        {"--dataset somewhere", 2, "--dataset is a prepared text corpus for pretraining"},
        {"--vocab 400", 2, "fine-tuning keeps the tokenizer of the model it starts from"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s %s --out %s", base, data, cases[i].flags, out_dir);
        cr_expect_eq(rc, cases[i].rc, "%s: exit %d\n%s", cases[i].flags, rc, out);
        cr_expect(strstr(out, cases[i].says), "%s:\n%s", cases[i].flags, out);
        free(out);
    }
    rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --out %s", base, out_dir);
    cr_expect(rc == 2 && strstr(out, "tapegrad sft needs --data"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --data %s --out %s", data, out_dir);
    cr_expect(rc == 2 && strstr(out, "give --init-from RUN"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --out %s", base, corpus, out_dir);
    cr_expect(rc == 1 && strstr(out, "holds 0 conversations to train on"), "text is no conversations:\n%s", out);
    free(out);
    cr_expect(access(out_dir, F_OK) != 0, "a refused run left %s behind", out_dir);
    free(base), free(data), free(out_dir);
}

/* A run folder's conversations changed after they were prepared: a mask that says something no
 * preparation writes, or that no longer matches its tokens, is refused on resume, naming it. */
Test(sft_cli, damaged_conversation_files_are_refused_on_resume, .init = setup, .fini = teardown, .timeout = 60) {
    char *base = base_run("--special-tokens chatml"), *data = conversations_file(), *run = datagen_path(dir, "run"), *out = NULL;
    int rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --seq 96 --steps 2 --eval-every 0 --out %s", base,
                      data, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *mask = datagen_path(run, TG_SFT_TRAIN_MASK_FILE), *val = datagen_path(run, TG_SFT_VAL_MASK_FILE);
    size_t len, val_len;
    uint8_t *bytes = ckpt_read_file(mask, &len), *val_bytes = ckpt_read_file(val, &val_len);
    /* a value 7 where 0, 1 or 2 stand (2-byte ids after a 64-byte header) */
    bytes[64 + 10] = 7;
    ckpt_write_file(mask, bytes, len);
    rc = ckpt_cli(&out, "sft --resume %s --steps 3", run);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, TG_SFT_TRAIN_MASK_FILE), "the message names the file:\n%s", out);
    free(out);
    /* the val split's mask in place of the train split's: another length */
    ckpt_write_file(mask, val_bytes, val_len);
    rc = ckpt_cli(&out, "sft --resume %s --steps 3", run);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "they are prepared together and must agree"), "%s", out);
    free(out);
    free(bytes), free(val_bytes), free(mask), free(val), free(base), free(data), free(run);
}

/* A folder of conversations is walked as prepare walks one (data/sources.h): a FIFO in it is
 * never opened and is named in a warning, a dangling link is an error naming it. */
Test(sft_cli, a_folder_of_conversations_names_what_it_skips, .init = setup, .fini = teardown, .timeout = 60) {
    char *base = base_run("--special-tokens chatml"), *data = conversations_file(), *run = datagen_path(dir, "run"), *out = NULL;
    char *folder = datagen_path(dir, "chats"), *moved = datagen_path(folder, "a.jsonl"), *fifo = datagen_path(folder, "pipe");
    cr_assert_eq(mkdir(folder, 0755), 0);
    cr_assert_eq(rename(data, moved), 0);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    int rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --seq 96 --steps 2 --eval-every 0 --out %s", base,
                      folder, run);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "warning: ") && strstr(out, "pipe (a FIFO)"), "%s", out);
    free(out);
    char *link = datagen_path(folder, "b.jsonl"), *run2 = datagen_path(dir, "run2");
    cr_assert_eq(symlink("/nonexistent/b.jsonl", link), 0);
    rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --seq 96 --steps 2 --out %s", base, folder, run2);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "b.jsonl is a symbolic link to /nonexistent/b.jsonl, which does not exist"), "%s", out);
    free(out);
    free(base), free(data), free(run), free(folder), free(moved), free(fifo), free(link), free(run2);
}
