/* Tokenizers: round trips, the BPE algorithm against hand-worked examples and a naive
 * reference, the file format and its refusals, and speed. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/corpus.h"
#include "tapegrad/tokenizer.h"
#include "datagen.h"
#include "testutil.h"
#include "tapegrad/error.h"
#include "tapegrad/rng.h"
#include "support/clock.h"

/* encode then decode must give back exactly the same bytes; returns the token count. */
static size_t round_trip(const TgTokenizer *tok, const char *text, size_t len) {
    int32_t *ids = malloc((len ? len : 1) * sizeof *ids);
    size_t n;
    assert_ok(tg_tokenizer_encode(tok, text, len, ids, len, &n));
    cr_assert_leq(n, len);
    for (size_t i = 0; i < n; i++) {
        cr_assert(ids[i] >= 0 && ids[i] < tok->vocab_size, "id %d out of range", ids[i]);
        cr_assert_neq(ids[i], tok->eot_id, "plain text never encodes to <eot>");
    }
    char *back;
    size_t back_len;
    assert_ok(tg_tokenizer_decode(tok, ids, n, &back, &back_len));
    cr_assert_eq(back_len, len, "decoded %zu bytes, expected %zu", back_len, len);
    cr_assert(len == 0 || memcmp(back, text, len) == 0, "round trip changed the bytes");
    cr_assert_eq(back[back_len], '\0');
    free(back);
    free(ids);
    return n;
}

static const char UTF8_TEXT[] = "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82"; /* héllo 世界 🙂 */
/* A lone continuation byte, an overlong '/', a truncated 3-byte and a truncated 4-byte
 * sequence, a surrogate, 0xff and 0xfe. */
static const char BAD_UTF8[] = "a\x80 b\xc0\xaf c\xe2\x82 d\xf0\x9f\x99 \xed\xa0\x80\xff\xfe z";

static char *random_bytes(uint64_t seed, size_t n) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    char *b = malloc(n);
    for (size_t i = 0; i < n; i++) b[i] = (char)(tg_rng_u64(&rng) & 0xff);
    return b;
}

/* ---- char tokenizer ---------------------------------------------------------------------- */

Test(char_tokenizer, vocabulary_is_sorted_distinct_bytes_plus_eot) {
    TgTokenizer tok;
    assert_ok(tg_tokenizer_char_train("hello world", 11, &tok));
    /* distinct bytes sorted: ' ' d e h l o r w, then <eot> */
    cr_assert_eq(tok.kind, TG_TOKENIZER_CHAR);
    cr_assert_eq(tok.n_chars, 8);
    cr_assert_eq(tok.vocab_size, 9);
    cr_assert_eq(tok.eot_id, 8);
    int32_t ids[5];
    size_t n;
    assert_ok(tg_tokenizer_encode(&tok, "hello", 5, ids, 5, &n));
    cr_assert_eq(n, 5);
    int32_t expect[5] = {3, 2, 4, 4, 5};
    for (int i = 0; i < 5; i++) cr_expect_eq(ids[i], expect[i], "id %d: %d", i, ids[i]);
    size_t len;
    tg_tokenizer_token_bytes(&tok, tok.eot_id, &len);
    cr_expect_eq(len, 0, "<eot> decodes to nothing");
    round_trip(&tok, "world hello", 11);
    tg_tokenizer_free(&tok);
}

Test(char_tokenizer, empty_input_and_one_byte_corpus) {
    TgTokenizer tok;
    assert_ok(tg_tokenizer_char_train("x", 1, &tok));
    cr_assert_eq(tok.vocab_size, 2);
    cr_assert_eq(tok.eot_id, 1);
    cr_assert_eq(round_trip(&tok, "", 0), 0);
    cr_assert_eq(round_trip(&tok, "xxx", 3), 3);
    tg_tokenizer_free(&tok);
}

Test(char_tokenizer, utf8_and_all_bytes_round_trip) {
    TgTokenizer tok;
    assert_ok(tg_tokenizer_char_train(UTF8_TEXT, sizeof UTF8_TEXT - 1, &tok));
    cr_assert_eq(round_trip(&tok, UTF8_TEXT, sizeof UTF8_TEXT - 1), sizeof UTF8_TEXT - 1);
    tg_tokenizer_free(&tok);
    char *bytes = random_bytes(5, 4096);
    assert_ok(tg_tokenizer_char_train(bytes, 4096, &tok));
    cr_assert_eq(tok.n_chars, 256);
    round_trip(&tok, bytes, 4096);
    tg_tokenizer_free(&tok);
    free(bytes);
}

Test(char_tokenizer, unknown_byte_is_refused) {
    TgTokenizer tok;
    assert_ok(tg_tokenizer_char_train("abc", 3, &tok));
    int32_t ids[4];
    size_t n;
    assert_fails(tg_tokenizer_encode(&tok, "abzc", 4, ids, 4, &n), TG_ERR_ARG, "byte 'z' (0x7a) at offset 2");
    cr_expect(strstr(tg_error_message(), "not in the char tokenizer's vocabulary"));
    tg_tokenizer_free(&tok);
}

Test(char_tokenizer, empty_corpus_is_refused) {
    TgTokenizer tok;
    assert_fails(tg_tokenizer_char_train("", 0, &tok), TG_ERR_ARG, "empty");
    tg_tokenizer_free(&tok);
}

Test(tokenizer, decode_refuses_ids_outside_the_vocabulary) {
    TgTokenizer tok;
    assert_ok(tg_tokenizer_char_train("ab", 2, &tok));
    char *text;
    size_t len;
    assert_fails(tg_tokenizer_decode(&tok, (int32_t[]){0, 7}, 2, &text, &len), TG_ERR_ARG, "token id 7 at position 1");
    cr_expect_null(text);
    assert_fails(tg_tokenizer_decode(&tok, (int32_t[]){-1}, 1, &text, &len), TG_ERR_ARG, "token id -1");
    tg_tokenizer_free(&tok);
}

/* ---- BPE: pre-split ------------------------------------------------------------------- */

static int split(const char *text, const char **chunks, int max) {
    size_t len = strlen(text), pos = 0;
    int n = 0;
    while (pos < len && n < max) {
        size_t cl = tg_tokenizer_bpe_chunk_len(text + pos, len - pos);
        cr_assert(cl >= 1 && cl <= len - pos);
        char *c = malloc(cl + 1);
        memcpy(c, text + pos, cl);
        c[cl] = '\0';
        chunks[n++] = c;
        pos += cl;
    }
    return n;
}

Test(bpe_tokenizer, pre_split_rule) {
    const char *chunks[16];
    int n = split("Hello,  world 42\n\nfoo's   \xc3\xa9t\xc3\xa9!", chunks, 16);
    const char *expect[] = {"Hello", ",", " ", " world", " 42", "\n\n", "foo", "'", "s", "  ", " \xc3\xa9t\xc3\xa9", "!"};
    int n_expect = (int)(sizeof expect / sizeof expect[0]);
    cr_assert_eq(n, n_expect, "got %d chunks", n);
    for (int i = 0; i < n; i++) {
        cr_expect_str_eq(chunks[i], expect[i], "chunk %d", i);
        free((void *)chunks[i]);
    }
    /* long runs are cut every TG_TOKENIZER_MAX_CHUNK bytes */
    char run[200];
    memset(run, 'a', sizeof run);
    cr_expect_eq(tg_tokenizer_bpe_chunk_len(run, sizeof run), TG_TOKENIZER_MAX_CHUNK);
    memset(run, ' ', sizeof run);
    run[150] = 'x';
    cr_expect_eq(tg_tokenizer_bpe_chunk_len(run, sizeof run), TG_TOKENIZER_MAX_CHUNK);
    cr_expect_eq(tg_tokenizer_bpe_chunk_len(run + 128, 72), 21, "21 of the 22 spaces, the last joins 'x'");
    cr_expect_eq(tg_tokenizer_bpe_chunk_len(run, 0), 0);
}

/* ---- BPE: hand-worked examples ---------------------------------------------------------- */

/* The classic "aaabdaaabac" (one chunk: all letters). a=97 b=98 c=99 d=100.
 *   pairs: aa x4 (overlapping, counted as adjacent pairs), ab x2, bd da ba ac x1
 *   merge 0: (97,97) -> 257 "aa";  left to right: [aa a b d aa a b a c] = 257 97 98 100 257 97 98 97 99
 *   pairs: (257,97) x2, (97,98) x2, others x1: tie at 2 -> smaller left id: (97,98)
 *   merge 1: (97,98) -> 258 "ab";  257 258 100 257 258 97 99
 *   pairs: (257,258) x2, others x1
 *   merge 2: (257,258) -> 259 "aaab"; 259 100 259 97 99
 *   pairs all x1: (259,100) (100,259) (259,97) (97,99): smallest left -> (97,99)
 *   merge 3: (97,99) -> 260 "ac";  259 100 259 260
 *   merge 4: (100,259) -> 261 "daaab" (smallest left of (259,100) (100,259) (259,260))
 *   merge 5: (259,261) -> 262; merge 6: (262,260) -> 263, the whole string; nothing is left,
 *   so vocab 264 is the largest reachable. */
Test(bpe_tokenizer, classic_example_merges_and_encoding) {
    const char *text = "aaabdaaabac";
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train(text, 11, 261, &tok));
    cr_assert_eq(tok.n_merges, 4);
    cr_assert_eq(tok.vocab_size, 261);
    cr_assert_eq(tok.eot_id, 256);
    TgTokenPair expect[4] = {{97, 97}, {97, 98}, {257, 258}, {97, 99}};
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(tok.merges[i].left, expect[i].left, "merge %d left %d", i, tok.merges[i].left);
        cr_expect_eq(tok.merges[i].right, expect[i].right, "merge %d right %d", i, tok.merges[i].right);
    }
    int32_t ids[16];
    size_t n;
    assert_ok(tg_tokenizer_encode(&tok, text, 11, ids, 16, &n));
    int32_t want[] = {259, 100, 259, 260};
    cr_assert_eq(n, 4, "%zu ids", n);
    for (int i = 0; i < 4; i++) cr_expect_eq(ids[i], want[i], "id %d is %d", i, ids[i]);
    /* new text, same merges by rank: "aaaa" -> aa aa; "abab" -> ab ab; "caaab" -> c aaab */
    assert_ok(tg_tokenizer_encode(&tok, "aaaa", 4, ids, 16, &n));
    cr_expect(n == 2 && ids[0] == 257 && ids[1] == 257);
    assert_ok(tg_tokenizer_encode(&tok, "abab", 4, ids, 16, &n));
    cr_expect(n == 2 && ids[0] == 258 && ids[1] == 258);
    assert_ok(tg_tokenizer_encode(&tok, "caaab", 5, ids, 16, &n));
    cr_expect(n == 2 && ids[0] == 99 && ids[1] == 259);
    size_t len;
    const uint8_t *b = tg_tokenizer_token_bytes(&tok, 259, &len);
    cr_expect(len == 4 && memcmp(b, "aaab", 4) == 0);
    tg_tokenizer_free(&tok);

    assert_ok(tg_tokenizer_bpe_train(text, 11, 264, &tok));
    TgTokenPair rest[3] = {{100, 259}, {259, 261}, {262, 260}};
    for (int i = 0; i < 3; i++)
        cr_expect(tok.merges[4 + i].left == rest[i].left && tok.merges[4 + i].right == rest[i].right,
                  "merge %d is (%d %d)", 4 + i, tok.merges[4 + i].left, tok.merges[4 + i].right);
    assert_ok(tg_tokenizer_encode(&tok, text, 11, ids, 16, &n));
    cr_expect(n == 1 && ids[0] == 263);
    tg_tokenizer_free(&tok);

    assert_fails(tg_tokenizer_bpe_train(text, 11, 265, &tok), TG_ERR_ARG, "largest reachable vocab_size is 264");
    assert_fails(tg_tokenizer_bpe_train(text, 11, INT32_MAX, &tok), TG_ERR_ARG, "largest reachable vocab_size is 264");
    cr_expect_eq(tok.kind, TG_TOKENIZER_NONE, "a failed training leaves the tokenizer empty");
}

Test(bpe_tokenizer, ties_go_to_the_smallest_ids_not_the_first_seen) {
    /* "cdab": pairs (99,100) (100,97) (97,98) all once. (97,98) has the smallest left id, though
     * it comes last -> 257 "ab"; then c d 257: (99,100) -> 258; then (258,257) -> 259. */
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train("cdab", 4, 260, &tok));
    cr_expect(tok.merges[0].left == 97 && tok.merges[0].right == 98);
    cr_expect(tok.merges[1].left == 99 && tok.merges[1].right == 100);
    cr_expect(tok.merges[2].left == 258 && tok.merges[2].right == 257);
    tg_tokenizer_free(&tok);
    /* Equal counts across chunks: "xb ya" -> chunks "xb", " ya"; pairs (120,98) (32,121)
     * (121,97) once each -> (32,121) first (left 32 is smallest). */
    assert_ok(tg_tokenizer_bpe_train("xb ya", 5, 258, &tok));
    cr_expect(tok.merges[0].left == 32 && tok.merges[0].right == 121);
    tg_tokenizer_free(&tok);
}

Test(bpe_tokenizer, frequency_counts_every_occurrence_of_a_chunk) {
    /* chunks: "ab" once, " cd" three times. (32,99) and (99,100) occur 3 times, (97,98) once:
     * (32,99) wins the tie with (99,100) by its smaller left id. */
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train("ab cd cd cd", 11, 259, &tok));
    cr_expect(tok.merges[0].left == 32 && tok.merges[0].right == 99);
    cr_expect(tok.merges[1].left == 257 && tok.merges[1].right == 100, "then \" c\"+\"d\" (3 times)");
    tg_tokenizer_free(&tok);
}

Test(bpe_tokenizer, merges_never_cross_chunk_boundaries) {
    TgTokenizer tok;
    const char *text = "a b a b b b\nb a";
    assert_ok(tg_tokenizer_bpe_train(text, strlen(text), 259, &tok));
    /* a space only ever starts a chunk, and a newline is its own chunk */
    for (int i = 0; i < tok.n_merges; i++) {
        cr_expect_neq(tok.merges[i].right, ' ');
        cr_expect_neq(tok.merges[i].left, '\n');
        cr_expect_neq(tok.merges[i].right, '\n');
    }
    cr_expect(tok.merges[0].left == ' ' && tok.merges[0].right == 'b', "\" b\" occurs 4 times");
    tg_tokenizer_free(&tok);
    /* "a\nb" has only 1-byte chunks: nothing to merge */
    assert_fails(tg_tokenizer_bpe_train("a\nb", 3, 258, &tok), TG_ERR_ARG, "largest reachable vocab_size is 257");
}

Test(bpe_tokenizer, small_vocab_sizes_are_refused) {
    TgTokenizer tok;
    assert_fails(tg_tokenizer_bpe_train("hello", 5, 256, &tok), TG_ERR_ARG, "at least 257");
    assert_ok(tg_tokenizer_bpe_train("hello", 5, 257, &tok)); /* bytes + <eot>, no merges */
    cr_expect_eq(tok.n_merges, 0);
    round_trip(&tok, "any bytes \xff", 11);
    tg_tokenizer_free(&tok);
    assert_ok(tg_tokenizer_bpe_train("", 0, 257, &tok));
    tg_tokenizer_free(&tok);
    assert_fails(tg_tokenizer_bpe_train("x", 1, 258, &tok), TG_ERR_ARG, "largest reachable vocab_size is 257");
}

/* ---- BPE: against a naive reference ---------------------------------------------------- */

/* Textbook BPE: every step recounts every adjacent pair of every chunk occurrence (no
 * deduplication, no incremental counts), takes the largest count (ties: smallest left, then
 * right) and rewrites all chunks. Returns the number of merges made; *final holds the
 * resulting segmentation of the whole text. */
static size_t chunk_len_of(TgTokenizerSplit split, const char *text, size_t len) {
    return split == TG_TOKENIZER_SPLIT_GPT2 ? tg_tokenizer_gpt2_chunk_len(text, len) : tg_tokenizer_bpe_chunk_len(text, len);
}

static int naive_bpe(const char *text, size_t len, int vocab, TgTokenizerSplit split, TgTokenPair *merges, int32_t *final,
                     size_t *n_final) {
    int32_t *sym = malloc(len * sizeof *sym);
    size_t *chunk_end = malloc((len + 1) * sizeof *chunk_end), n_chunks = 0;
    for (size_t pos = 0; pos < len;) {
        size_t cl = chunk_len_of(split, text + pos, len - pos);
        cr_assert_leq(cl, TG_TOKENIZER_MAX_CHUNK, "the reference does not cut long chunks as training does");
        pos += cl;
        chunk_end[n_chunks++] = pos;
    }
    for (size_t i = 0; i < len; i++) sym[i] = (unsigned char)text[i];
    size_t *chunk_len = malloc(n_chunks * sizeof *chunk_len);
    for (size_t c = 0; c < n_chunks; c++) chunk_len[c] = chunk_end[c] - (c ? chunk_end[c - 1] : 0);
    int64_t *count = malloc((size_t)vocab * (size_t)vocab * sizeof *count);
    int made = 0;
    for (int id = 257; id < vocab; id++) {
        memset(count, 0, (size_t)vocab * (size_t)vocab * sizeof *count);
        for (size_t c = 0; c < n_chunks; c++) {
            int32_t *s = sym + (c ? chunk_end[c - 1] : 0);
            for (size_t i = 0; i + 1 < chunk_len[c]; i++) count[s[i] * vocab + s[i + 1]]++;
        }
        int64_t best = 0;
        int bl = -1, br = -1;
        for (int l = 0; l < id; l++)
            for (int r = 0; r < id; r++)
                if (count[l * vocab + r] > best) best = count[l * vocab + r], bl = l, br = r;
        if (best == 0) break;
        merges[made++] = (TgTokenPair){bl, br};
        for (size_t c = 0; c < n_chunks; c++) {
            int32_t *s = sym + (c ? chunk_end[c - 1] : 0);
            size_t j = 0;
            for (size_t i = 0; i < chunk_len[c];) {
                if (i + 1 < chunk_len[c] && s[i] == bl && s[i + 1] == br) s[j++] = id, i += 2;
                else s[j++] = s[i++];
            }
            chunk_len[c] = j;
        }
    }
    *n_final = 0;
    for (size_t c = 0; c < n_chunks; c++) {
        int32_t *s = sym + (c ? chunk_end[c - 1] : 0);
        for (size_t i = 0; i < chunk_len[c]; i++) final[(*n_final)++] = s[i];
    }
    free(sym);
    free(chunk_end);
    free(chunk_len);
    free(count);
    return made;
}

static void check_against_naive(const char *text, size_t len, int vocab, TgTokenizerSplit split) {
    TgTokenPair *merges = malloc((size_t)vocab * sizeof *merges);
    int32_t *naive_ids = malloc(len * sizeof *naive_ids), *ids = malloc(len * sizeof *ids);
    size_t n_naive, n;
    int made = naive_bpe(text, len, vocab, split, merges, naive_ids, &n_naive);
    cr_assert_eq(made, vocab - 257, "the reference only reached %d merges", made);
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train_split(text, len, vocab, split, &tok));
    for (int i = 0; i < made; i++)
        cr_assert(tok.merges[i].left == merges[i].left && tok.merges[i].right == merges[i].right,
                  "merge %d: (%d %d), reference (%d %d)", i, tok.merges[i].left, tok.merges[i].right,
                  merges[i].left, merges[i].right);
    assert_ok(tg_tokenizer_encode(&tok, text, len, ids, len, &n));
    cr_assert_eq(n, n_naive);
    cr_assert_eq(memcmp(ids, naive_ids, n * sizeof *ids), 0, "encoding differs from training's segmentation");
    tg_tokenizer_free(&tok);
    free(merges);
    free(naive_ids);
    free(ids);
}

Test(bpe_tokenizer, matches_a_naive_reference_implementation) {
    size_t len = 6000;
    char *text = datagen_english(3, len);
    /* some UTF-8, invalid bytes and repeats, to exercise overlapping pairs like "aaaa" */
    memcpy(text + 100, UTF8_TEXT, sizeof UTF8_TEXT - 1);
    memcpy(text + 200, BAD_UTF8, sizeof BAD_UTF8 - 1);
    memcpy(text + 300, "aaaaaaa bbbbbbbbbb aaaa", 23);
    check_against_naive(text, len, 420, TG_TOKENIZER_SPLIT_TAPEGRAD);
    check_against_naive(text, len, 420, TG_TOKENIZER_SPLIT_GPT2);
    free(text);
    char *bytes = random_bytes(7, 3000); /* runs of invalid bytes: longer than 64 with the GPT-2 split */
    check_against_naive(bytes, 3000, 300, TG_TOKENIZER_SPLIT_TAPEGRAD);
    free(bytes);
}

/* ---- BPE: round trips and compression ------------------------------------------------- */

Test(bpe_tokenizer, round_trips_any_bytes) {
    char *english = datagen_english(11, 20000);
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train(english, 20000, 400, &tok));
    cr_assert_eq(round_trip(&tok, "", 0), 0);
    cr_assert_eq(round_trip(&tok, "q", 1), 1);
    round_trip(&tok, UTF8_TEXT, sizeof UTF8_TEXT - 1);
    round_trip(&tok, BAD_UTF8, sizeof BAD_UTF8 - 1);
    round_trip(&tok, english, 20000);
    char *bytes = random_bytes(12, 65536); /* every byte value, NULs included */
    round_trip(&tok, bytes, 65536);
    tg_tokenizer_free(&tok);
    /* trained on random bytes too */
    assert_ok(tg_tokenizer_bpe_train(bytes, 65536, 600, &tok));
    round_trip(&tok, bytes, 65536);
    round_trip(&tok, english, 20000);
    round_trip(&tok, BAD_UTF8, sizeof BAD_UTF8 - 1);
    tg_tokenizer_free(&tok);
    /* a 1-byte corpus */
    assert_ok(tg_tokenizer_bpe_train("z", 1, 257, &tok));
    round_trip(&tok, UTF8_TEXT, sizeof UTF8_TEXT - 1);
    tg_tokenizer_free(&tok);
    free(bytes);
    free(english);
}

Test(bpe_tokenizer, utf8_text_round_trips_and_compresses) {
    /* a corpus of repeated multi-byte text learns the multi-byte sequences */
    char corpus[2000];
    size_t len = 0;
    while (len + sizeof UTF8_TEXT < sizeof corpus) {
        memcpy(corpus + len, UTF8_TEXT, sizeof UTF8_TEXT - 1);
        len += sizeof UTF8_TEXT - 1;
        corpus[len++] = '\n';
    }
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train(corpus, len, 270, &tok));
    size_t n = round_trip(&tok, UTF8_TEXT, sizeof UTF8_TEXT - 1);
    cr_expect_lt(n, sizeof UTF8_TEXT - 1, "%zu tokens for %zu bytes", n, sizeof UTF8_TEXT - 1);
    tg_tokenizer_free(&tok);
}

Test(bpe_tokenizer, compresses_english_like_text) {
    size_t len = 200000;
    char *text = datagen_english(21, len);
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train(text, len, 512, &tok));
    char *held_out = datagen_english(22, 50000);
    size_t n = round_trip(&tok, held_out, 50000);
    cr_expect_lt(n, 50000 / 2, "%zu tokens for 50000 bytes", n);
    cr_log_info("BPE 512 on English-like text: %.2f bytes per token", 50000.0 / (double)n);
    tg_tokenizer_free(&tok);
    free(text);
    free(held_out);
}

Test(bpe_tokenizer, training_is_deterministic) {
    char *text = datagen_english(31, 30000);
    TgTokenizer a, b;
    assert_ok(tg_tokenizer_bpe_train(text, 30000, 700, &a));
    assert_ok(tg_tokenizer_bpe_train(text, 30000, 700, &b));
    cr_assert_eq(a.n_merges, b.n_merges);
    cr_assert_eq(memcmp(a.merges, b.merges, (size_t)a.n_merges * sizeof *a.merges), 0);
    cr_assert_eq(tg_tokenizer_fingerprint(&a), tg_tokenizer_fingerprint(&b));
    tg_tokenizer_free(&b);
    /* a different vocabulary gives a different fingerprint */
    assert_ok(tg_tokenizer_bpe_train(text, 30000, 699, &b));
    cr_expect_neq(tg_tokenizer_fingerprint(&a), tg_tokenizer_fingerprint(&b));
    tg_tokenizer_free(&b);
    assert_ok(tg_tokenizer_char_train(text, 30000, &b));
    cr_expect_neq(tg_tokenizer_fingerprint(&a), tg_tokenizer_fingerprint(&b));
    cr_expect_neq(tg_tokenizer_fingerprint(&b), 0);
    tg_tokenizer_free(&a);
    tg_tokenizer_free(&b);
    free(text);
}

/* ---- save / load -------------------------------------------------------------------------- */

static char *dir;
static void make_dir(void) { dir = datagen_tempdir(); }
static void remove_dir(void) {
    datagen_remove_tree(dir);
    free(dir);
}

static void expect_same(const TgTokenizer *a, const TgTokenizer *b, const char *probe, size_t probe_len) {
    cr_assert_eq(a->kind, b->kind);
    cr_assert_eq(a->vocab_size, b->vocab_size);
    cr_assert_eq(a->eot_id, b->eot_id);
    cr_assert_eq(tg_tokenizer_fingerprint(a), tg_tokenizer_fingerprint(b));
    int32_t *x = malloc(probe_len * sizeof *x), *y = malloc(probe_len * sizeof *y);
    size_t nx, ny;
    assert_ok(tg_tokenizer_encode(a, probe, probe_len, x, probe_len, &nx));
    assert_ok(tg_tokenizer_encode(b, probe, probe_len, y, probe_len, &ny));
    cr_assert_eq(nx, ny);
    cr_assert_eq(memcmp(x, y, nx * sizeof *x), 0);
    for (int32_t id = 0; id < a->vocab_size; id++) {
        size_t la, lb;
        const uint8_t *ba = tg_tokenizer_token_bytes(a, id, &la), *bb = tg_tokenizer_token_bytes(b, id, &lb);
        cr_assert(la == lb && memcmp(ba, bb, la) == 0, "token %d differs", id);
    }
    free(x);
    free(y);
}

Test(tokenizer_file, save_load_round_trip_both_kinds, .init = make_dir, .fini = remove_dir) {
    char *text = datagen_english(41, 20000);
    memcpy(text + 50, BAD_UTF8, sizeof BAD_UTF8 - 1); /* tokens with quotes, escapes, raw bytes */
    memcpy(text + 90, "\"\\\t\"", 4);
    char *path = datagen_path(dir, "bpe.txt");
    TgTokenizer tok, back;
    assert_ok(tg_tokenizer_bpe_train(text, 20000, 500, &tok));
    assert_ok(tg_tokenizer_save(&tok, path));
    assert_ok(tg_tokenizer_load(path, &back));
    expect_same(&tok, &back, text, 20000);
    cr_assert_eq(memcmp(tok.merges, back.merges, (size_t)tok.n_merges * sizeof *tok.merges), 0);
    tg_tokenizer_free(&tok);
    tg_tokenizer_free(&back);
    free(path);

    path = datagen_path(dir, "char.txt");
    assert_ok(tg_tokenizer_char_train(text, 20000, &tok));
    assert_ok(tg_tokenizer_save(&tok, path));
    assert_ok(tg_tokenizer_load(path, &back));
    expect_same(&tok, &back, text, 20000);
    tg_tokenizer_free(&tok);
    tg_tokenizer_free(&back);
    free(path);
    free(text);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* Saves a small BPE tokenizer, replaces the first `from` in its text by `to` (to NULL: cuts the
 * file there), and expects load to fail. */
static void expect_load_refused(const char *from, const char *to, TgStatus status, const char *needle) {
    char *path = datagen_path(dir, "tok.txt");
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train_split("aaabdaaabac", 11, 261, TG_TOKENIZER_SPLIT_TAPEGRAD, &tok));
    assert_ok(tg_tokenizer_save(&tok, path));
    tg_tokenizer_free(&tok);
    char *text = read_text(path), *at = strstr(text, from);
    cr_assert_not_null(at, "\"%s\" not in the saved file:\n%s", from, text);
    char *edited = calloc(1, strlen(text) + (to ? strlen(to) : 0) + 1);
    memcpy(edited, text, (size_t)(at - text));
    if (to) {
        strcat(edited, to);
        strcat(edited, at + strlen(from));
    }
    write_text(path, edited);
    TgTokenizer back;
    assert_fails(tg_tokenizer_load(path, &back), status, needle);
    cr_expect_eq(back.kind, TG_TOKENIZER_NONE, "a refused load leaves the tokenizer empty");
    tg_tokenizer_free(&back);
    free(text);
    free(edited);
    free(path);
}

Test(tokenizer_file, corrupt_files_are_refused_with_a_reason, .init = make_dir, .fini = remove_dir) {
    expect_load_refused("tapegrad-tokenizer 1", "GPT2-vocab 1", TG_ERR_FORMAT, "is not a tapegrad tokenizer file");
    expect_load_refused("tapegrad-tokenizer 1", "tapegrad-tokenizer 9", TG_ERR_FORMAT, "format version 9");
    expect_load_refused("kind bpe", "kind wordpiece", TG_ERR_FORMAT, "expected \"kind char\" or \"kind bpe\"");
    expect_load_refused("merges 4", "merges 3", TG_ERR_FORMAT, "merges 3 is outside");
    /* a changed merge: still well-formed, caught by the fingerprint */
    expect_load_refused("97 99", "99 97", TG_ERR_FORMAT, "corrupt or was edited");
    /* a merge that uses an id not made yet */
    expect_load_refused("97 99", "97 300", TG_ERR_FORMAT, "must join two ids below its own id 260");
    expect_load_refused("97 99", "97 256", TG_ERR_FORMAT, "neither of them <eot>");
    expect_load_refused("97 99", "97 98", TG_ERR_FORMAT, "repeats an earlier merge");
    expect_load_refused("97 99", "97 x", TG_ERR_FORMAT, "line 9: expected a merge");
    /* truncated: everything from the third merge on is gone */
    expect_load_refused("257 258", NULL, TG_ERR_FORMAT, "truncated: it ends after line 7");
    expect_load_refused("fingerprint", "extra 1\nfingerprint", TG_ERR_FORMAT, "expected \"fingerprint HEX\"");

    TgTokenizer tok;
    char *missing = datagen_path(dir, "nope.txt");
    assert_fails(tg_tokenizer_load(missing, &tok), TG_ERR_IO, "cannot open tokenizer file");
    char *empty = datagen_path(dir, "empty.txt");
    write_text(empty, "");
    assert_fails(tg_tokenizer_load(empty, &tok), TG_ERR_FORMAT, "truncated");
    free(missing);
    free(empty);
}

Test(tokenizer_file, corrupt_char_file_is_refused, .init = make_dir, .fini = remove_dir) {
    char *path = datagen_path(dir, "char.txt");
    write_text(path, "tapegrad-tokenizer 1\nkind char\nvocab_size 3\neot_id 2\nchars 2\n98\n97\nfingerprint 0\n");
    TgTokenizer tok;
    assert_fails(tg_tokenizer_load(path, &tok), TG_ERR_FORMAT, "strictly ascending");
    write_text(path, "tapegrad-tokenizer 1\nkind char\nvocab_size 3\neot_id 2\nchars 2\n97\n300\nfingerprint 0\n");
    assert_fails(tg_tokenizer_load(path, &tok), TG_ERR_FORMAT, "line 7: expected a byte value");
    free(path);
}

/* ---- a megabyte ------------------------------------------------------------------------------ */

/* Training a 2048-token BPE on 1 MiB of generated prose with a 6,000-word lexicon (the same text
 * on every machine: nothing installed is read): it reaches the vocabulary, round-trips and
 * compresses. The time is printed for information, never asserted (timing belongs in
 * benchmarks). The sanitizer build does a quarter of the work. */
Test(bpe_tokenizer, trains_and_encodes_a_megabyte) {
#ifdef NDEBUG
    size_t want = 1 << 20;
#else
    size_t want = 1 << 18;
#endif
    size_t len = want;
    char *text = datagen_prose(51, len);
    TgTokenizer tok;
    double t0 = tg_clock_seconds();
    assert_ok(tg_tokenizer_bpe_train(text, len, 2048, &tok));
    double t_train = tg_clock_seconds() - t0;
    int32_t *ids = malloc(len * sizeof *ids);
    size_t n;
    t0 = tg_clock_seconds();
    assert_ok(tg_tokenizer_encode(&tok, text, len, ids, len, &n));
    double t_encode = tg_clock_seconds() - t0;
    fprintf(stderr, "BPE 2048 on %zu bytes of generated prose: train %.2f s, encode %.2f s, %.2f bytes/token\n", len,
            t_train, t_encode, (double)len / (double)n);
    cr_expect_eq(tok.vocab_size, 2048);
    cr_expect_lt(n, len / 2, "2048-token BPE left %zu tokens for %zu bytes", n, len);
    char *back = NULL;
    size_t back_len = 0;
    assert_ok(tg_tokenizer_decode(&tok, ids, n, &back, &back_len));
    cr_expect_eq(back_len, len);
    cr_expect_eq(memcmp(back, text, len), 0, "a megabyte does not round-trip");
    free(back);
    tg_tokenizer_free(&tok);
    free(ids);
    free(text);
}
