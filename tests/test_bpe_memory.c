/* The memory of BPE training and encoding has a bound whatever the text (docs/data.md, "Memory
 * and threads"): the word table has a cap, training a budget, encoding a window. Checked on text
 * whose chunks are all distinct (random letters), the worst case, through the figures the code
 * keeps of itself; and below the caps nothing changes. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "datagen.h"
#include "testutil.h"
#include "tapegrad/rng.h"

/* `len` bytes of words of 4 to 12 random letters, 12 to a line: nearly every chunk is new. */
static char *distinct_words(uint64_t seed, size_t len) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    char *t = malloc(len + 1);
    for (size_t n = 0, words = 0; n < len; words++) {
        size_t w = 4 + tg_rng_below(&rng, 9);
        for (size_t i = 0; i < w && n < len; i++) t[n++] = (char)('a' + tg_rng_below(&rng, 26));
        if (n < len) t[n++] = words % 12 == 11 ? '\n' : ' ';
    }
    t[len] = '\0';
    return t;
}

static TgBpeCounter *counter_with(const TgBpeLimits *limits) {
    TgBpeCounter *c;
    assert_ok(tg_bpe_counter_new(TG_TOKENIZER_SPLIT_GPT2, NULL, 0, &c));
    if (limits) tg_bpe_counter_limit(c, limits);
    return c;
}

/* Counted a megabyte at a time (prepare hands its text over in pieces too). */
static void count_text(TgBpeCounter *c, const char *text, size_t len) {
    for (size_t at = 0; at < len; at += 1 << 20) tg_bpe_counter_add(c, text + at, len - at < (1 << 20) ? len - at : 1 << 20);
}

/* 20 MB of distinct words hold about 2.3 million distinct chunks and 19 MB of them: twice the
 * default cap. The table stays under the bound docs/data.md states (40 MiB) and says it pruned. */
Test(bpe_memory, the_word_table_stays_under_its_cap_on_all_distinct_text) {
    size_t len = 20u << 20;
    char *text = distinct_words(1, len);
    TgBpeCounter *c = counter_with(NULL);
    count_text(c, text, len);
    TgBpeCounterStats s;
    tg_bpe_counter_stats(c, &s);
    const TgBpeLimits *lim = tg_bpe_counter_limits(c);
    cr_assert_leq(s.words, lim->max_words);
    cr_assert_leq(s.word_bytes, lim->max_bytes);
    cr_assert_eq(tg_bpe_counter_bytes_bound(lim), (size_t)40 << 20, "the bound docs/data.md states");
    cr_assert_leq(s.table_bytes, tg_bpe_counter_bytes_bound(lim), "table %zu bytes, bound %zu", s.table_bytes,
                  tg_bpe_counter_bytes_bound(lim));
    cr_assert_geq(s.prunes, 1, "a table past its cap was never pruned");
    cr_assert_geq(s.words, lim->max_words / 2 - 64, "a prune keeps half the table: %zu chunks", s.words);
    tg_bpe_counter_free(c);
    free(text);
}

/* Chunks seen often survive every prune with their exact counts; chunks seen once go. */
Test(bpe_memory, pruning_keeps_the_frequent_chunks_and_their_counts) {
    const TgBpeLimits lim = {1024, 16 << 10, 64 << 20};
    TgBpeCounter *c = counter_with(&lim);
    char *noise = distinct_words(2, 1 << 20);
    /* " alpha" 3 times and " beta" once in each 4 KiB of noise */
    size_t alpha = 0, beta = 0;
    for (size_t at = 0; at < (1 << 20); at += 4096) {
        tg_bpe_counter_add(c, noise + at, 4096 - 1);
        tg_bpe_counter_add(c, " alpha alpha beta alpha", 23);
        alpha += 3, beta += 1;
    }
    TgBpeCounterStats s;
    tg_bpe_counter_stats(c, &s);
    cr_assert_geq(s.prunes, 10);
    cr_assert_leq(s.words, lim.max_words);
    int64_t got_alpha = -1, got_beta = -1;
    for (size_t k = 0; k < s.words; k++) {
        size_t n;
        int64_t count;
        const uint8_t *b = tg_bpe_counter_word(c, k, &n, &count);
        if (n == 6 && memcmp(b, " alpha", 6) == 0) got_alpha = count;
        if (n == 5 && memcmp(b, " beta", 5) == 0) got_beta = count;
    }
    cr_assert_eq(got_alpha, (int64_t)alpha, "\" alpha\" counted %lld of %zu times", (long long)got_alpha, alpha);
    cr_assert_eq(got_beta, (int64_t)beta, "\" beta\" counted %lld of %zu times", (long long)got_beta, beta);
    tg_bpe_counter_free(c);
    free(noise);
}

/* A table whose training would need more than the budget is halved until it fits: the peak the
 * trainer counted stays under the budget, and the tokenizer is whole and the same every time. */
Test(bpe_memory, training_stays_under_its_budget_by_halving_the_table) {
    const TgBpeLimits lim = {1 << 15, 1 << 18, 3 << 20};
    size_t len = 1 << 20;
    char *text = distinct_words(3, len);
    TgTokenizer tok[2];
    for (int run = 0; run < 2; run++) {
        TgBpeCounter *c = counter_with(&lim);
        count_text(c, text, len);
        TgBpeTrainReport r;
        assert_ok(tg_bpe_counter_train(c, 1500, &tok[run], &r));
        cr_assert_leq(r.peak_bytes, lim.train_bytes, "training held %zu bytes, budget %zu", r.peak_bytes, lim.train_bytes);
        cr_assert_geq(r.restarts, 1, "the budget was never reached: the test proves nothing (peak %zu)", r.peak_bytes);
        cr_assert_eq(tok[run].vocab_size, 1500);
        tg_bpe_counter_free(c);
    }
    cr_assert_eq(memcmp(tok[0].merges, tok[1].merges, (size_t)tok[0].n_merges * sizeof *tok[0].merges), 0);
    /* it learns from the sample it kept about as well as from the whole text */
    TgTokenizer full;
    assert_ok(tg_tokenizer_bpe_train(text, len, 1500, &full));
    int32_t *ids = malloc(len * sizeof *ids);
    size_t n, n_full;
    assert_ok(tg_tokenizer_encode(&full, text, len, ids, len, &n_full));
    assert_ok(tg_tokenizer_encode(&tok[0], text, len, ids, len, &n));
    cr_assert_lt((double)n, 1.05 * (double)n_full, "%zu tokens, %zu with the whole table", n, n_full);
    tg_tokenizer_free(&full);
    char *back;
    size_t back_len;
    assert_ok(tg_tokenizer_decode(&tok[0], ids, n, &back, &back_len));
    cr_assert(back_len == len && memcmp(back, text, len) == 0);
    free(back);
    free(ids);
    tg_tokenizer_free(&tok[0]);
    tg_tokenizer_free(&tok[1]);
    free(text);
}

typedef struct {
    const char *b;
    size_t n;
} Piece;

static int compare_pieces(const void *x, const void *y) {
    const Piece *a = x, *b = y;
    int c = memcmp(a->b, b->b, a->n < b->n ? a->n : b->n);
    return c ? c : (a->n > b->n) - (a->n < b->n);
}

/* Natural text below the caps is counted exactly, and trains without a prune or a restart. */
Test(bpe_memory, natural_text_below_the_caps_is_untouched) {
    size_t len = 2 << 20;
    char *text = datagen_prose(4, len);
    TgBpeCounter *c = counter_with(NULL);
    tg_bpe_counter_add(c, text, len);
    TgBpeCounterStats s;
    tg_bpe_counter_stats(c, &s);
    cr_assert_eq(s.prunes, 0);
    cr_assert_eq(s.dropped, 0);
    /* every chunk of two bytes or more, counted here by sorting */
    Piece *pieces = malloc(len * sizeof *pieces);
    size_t n_pieces = 0;
    for (size_t at = 0; at < len;) {
        size_t cl = tg_tokenizer_gpt2_chunk_len(text + at, len - at);
        cr_assert_leq(cl, TG_TOKENIZER_MAX_CHUNK);
        if (cl >= 2) pieces[n_pieces++] = (Piece){text + at, cl};
        at += cl;
    }
    qsort(pieces, n_pieces, sizeof *pieces, compare_pieces);
    size_t distinct = 0;
    for (size_t k = 0; k < n_pieces; k++) distinct += k == 0 || compare_pieces(&pieces[k - 1], &pieces[k]) != 0;
    free(pieces);
    int64_t total = 0;
    for (size_t k = 0; k < s.words; k++) {
        size_t n;
        int64_t count;
        tg_bpe_counter_word(c, k, &n, &count);
        total += count;
    }
    cr_assert_eq(s.words, distinct, "%zu distinct chunks in the table, %zu in the text", s.words, distinct);
    cr_assert_eq(total, (int64_t)n_pieces, "the counts add up to %lld, the text has %zu chunks", (long long)total, n_pieces);
    TgTokenizer tok;
    TgBpeTrainReport r;
    assert_ok(tg_bpe_counter_train(c, 2048, &tok, &r));
    cr_assert_eq(r.restarts, 0);
    cr_assert_leq(r.peak_bytes, tg_bpe_counter_limits(c)->train_bytes);
    tg_tokenizer_free(&tok);
    tg_bpe_counter_free(c);
    free(text);
}

/* A chunk longer than the encoding window is merged a window at a time: a merge that would
 * join the last byte of one window to the first of the next is not made; inside a window it is. */
Test(bpe_memory, a_chunk_past_the_window_is_merged_window_by_window) {
    const size_t w = TG_TOKENIZER_ENCODE_WINDOW, len = 2 * w + 100;
    cr_assert_eq(w % TG_TOKENIZER_MAX_CHUNK, 0, "windows cut where training cut a long chunk");
    char train[3000];
    size_t tl = 0;
    for (int i = 0; i < 1000; i++) tl += (size_t)snprintf(train + tl, sizeof train - tl, "%sxy", i ? " " : "");
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train(train, tl, 259, &tok));
    cr_assert(tok.merges[0].left == 'x' && tok.merges[0].right == 'y', "the first merge joins x and y");
    char *text = malloc(len); /* z never merges: only "xy" can */
    int32_t *ids = malloc(len * sizeof *ids);
    size_t at[] = {w - 3, w - 1}, want[] = {len - 1, len};
    for (int k = 0; k < 2; k++) {
        memset(text, 'z', len);
        text[at[k]] = 'x', text[at[k] + 1] = 'y';
        cr_assert_eq(tg_tokenizer_gpt2_chunk_len(text, len), len, "the text is one chunk");
        size_t n;
        assert_ok(tg_tokenizer_encode(&tok, text, len, ids, len, &n));
        cr_assert_eq(n, want[k], "xy at %zu of a %zu-byte window: %zu ids for %zu bytes", at[k], w, n, len);
    }
    free(ids);
    free(text);
    tg_tokenizer_free(&tok);
}
