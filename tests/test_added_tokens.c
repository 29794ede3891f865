/* Added tokens in text (tokenizer/tokenizer_added.c): the same matches as comparing every token at
 * every position (leftmost, then longest; for literal text, the special tokens left out), across
 * window boundaries, and a number of automaton steps linear in the text however many tokens there are. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/tokenizer_internal.h"
#include "tapegrad/rng.h"
#include "testutil.h"

/* A tokenizer whose ids are the given byte strings, every one of them an added token: all the
 * matcher looks at. With some_special, every third (from the first) is a special token, which a
 * literal scan (tokenizer.h: tg_tokenizer_encode_literal) leaves to the text. */
static void make_tokenizer(TgTokenizer *tok, char *const *tokens, const size_t *lens, int32_t n, bool some_special) {
    memset(tok, 0, sizeof *tok);
    tok->kind = TG_TOKENIZER_BPE;
    tok->vocab_size = n;
    tok->token_offsets = malloc(((size_t)n + 1) * sizeof *tok->token_offsets);
    size_t total = 0;
    for (int32_t k = 0; k < n; k++) total += lens[k];
    tok->token_bytes = malloc(total + 1);
    tok->added = malloc((size_t)n * sizeof *tok->added);
    tok->token_offsets[0] = 0;
    for (int32_t k = 0; k < n; k++) {
        memcpy(tok->token_bytes + tok->token_offsets[k], tokens[k], lens[k]);
        tok->token_offsets[k + 1] = tok->token_offsets[k] + (int64_t)lens[k];
        tok->added[k] = (TgTokenizerAdded){k, some_special && k % 3 == 0};
    }
    tok->n_added = n;
    assert_ok(tg_added_matcher_build(tok, false, &tok->matcher));
    assert_ok(tg_added_matcher_build(tok, true, &tok->word_matcher));
}

/* The rule as it was first written: at each position from `from`, every token compared (but the
 * special ones, when literal). */
static bool reference_next(const TgTokenizer *tok, const uint8_t *text, size_t len, size_t from, size_t *at,
                           int32_t *id, size_t *match_len, bool literal) {
    for (size_t p = from; p < len; p++) {
        size_t best = 0;
        for (int32_t k = 0; k < tok->n_added; k++) {
            if (literal && tok->added[k].special) continue;
            size_t l;
            const uint8_t *t = tg_tokenizer_token_bytes(tok, tok->added[k].id, &l);
            if (l > best && l <= len - p && memcmp(t, text + p, l) == 0) {
                best = l;
                *id = tok->added[k].id;
            }
        }
        if (best) {
            *at = p;
            *match_len = best;
            return true;
        }
    }
    return false;
}

/* Walks text as the encoder does (each search from the end of the last match) with both
 * matchers; returns the automaton's steps. */
static uint64_t expect_same_matches(const TgTokenizer *tok, const uint8_t *text, size_t len, const char *what,
                                    bool literal) {
    TgAddedScan scan;
    tg_added_scan_begin(&scan, tok, text, len, literal);
    size_t pos = 0;
    int matches = 0;
    for (;;) {
        size_t at = 0, ml = 0, rat = 0, rml = 0;
        int32_t id = -1, rid = -1;
        bool found = tg_added_scan_next(&scan, pos, &at, &id, &ml);
        bool want = reference_next(tok, text, len, pos, &rat, &rid, &rml, literal);
        cr_assert_eq(found, want, "%s: match %d from %zu: found %d, the reference %d", what, matches, pos, found, want);
        if (!found) break;
        cr_assert(at == rat && id == rid && ml == rml, "%s: match %d from %zu: id %d at %zu (%zu bytes), the reference id %d at %zu (%zu)",
                  what, matches, pos, (int)id, at, ml, (int)rid, rat, rml);
        pos = at + ml;
        matches++;
    }
    uint64_t steps = scan.steps;
    tg_added_scan_end(&scan);
    return steps;
}

Test(added_tokens, match_as_every_token_compared_at_every_position) {
    TgRng rng;
    tg_rng_seed(&rng, 7);
    char alphabet[] = "ab<|>";
    for (int round = 0; round < 400; round++) {
        int32_t n = 1 + (int32_t)(tg_rng_below(&rng, 24));
        char *tokens[24];
        size_t lens[24];
        for (int32_t k = 0; k < n; k++) {
            do { /* distinct tokens: a tokenizer's ids never share their bytes */
                lens[k] = 1 + tg_rng_below(&rng, 7);
                tokens[k] = malloc(lens[k]);
                for (size_t i = 0; i < lens[k]; i++) tokens[k][i] = alphabet[tg_rng_below(&rng, round % 2 ? 2 : 5)];
                bool again = false;
                for (int32_t j = 0; j < k; j++) again |= lens[j] == lens[k] && memcmp(tokens[j], tokens[k], lens[k]) == 0;
                if (!again) break;
                free(tokens[k]);
            } while (true);
        }
        TgTokenizer tok;
        make_tokenizer(&tok, tokens, lens, n, round % 4 < 2);
        uint8_t text[300];
        size_t len = tg_rng_below(&rng, sizeof text);
        for (size_t i = 0; i < len; i++) text[i] = (uint8_t)alphabet[tg_rng_below(&rng, round % 2 ? 2 : 5)];
        char what[32];
        snprintf(what, sizeof what, "round %d", round);
        expect_same_matches(&tok, text, len, what, false);
        expect_same_matches(&tok, text, len, what, true);
        tg_tokenizer_free(&tok);
        for (int32_t k = 0; k < n; k++) free(tokens[k]);
    }
}

/* The scan reads the text in windows of max(2^16, twice the longest token) positions, each from
 * as far past its end as the longest token reaches: tokens that cross a window's end, one that
 * ends on it and one right after it are found as they should be. */
Test(added_tokens, matches_across_the_scan_windows) {
    char big[40000]; /* longer than a quarter of 2^16: the windows are 80,000 positions */
    memset(big, 'x', sizeof big);
    big[sizeof big - 1] = 'q';
    char *tokens[] = {"xyz", "yz<", "<|tok|>", "z", big};
    size_t lens[] = {3, 3, 7, 1, sizeof big};
    TgTokenizer tok;
    make_tokenizer(&tok, tokens, lens, 5, false);
    const size_t window = 2 * sizeof big, len = 5 * window;
    uint8_t *text = malloc(len);
    memset(text, '.', len);
    memcpy(text + window - 3, "<|tok|>", 7);    /* across the first window's end */
    memcpy(text + 2 * window - 1, "xyz<", 4);   /* starts on the last position of the second */
    memcpy(text + 2 * window + 100, "z", 1);
    memcpy(text + 3 * window - 4, "xyz", 3);    /* ends on the third's last position */
    memcpy(text + 3 * window, "<|tok|>", 7);    /* right after it */
    memset(text + 4 * window - 20000, 'x', sizeof big - 1); /* the long token, across the fourth's end */
    text[4 * window - 20000 + sizeof big - 1] = 'q';
    memcpy(text + len - 3, "xyz", 3);
    expect_same_matches(&tok, text, len, "windows", false);
    free(text);
    tg_tokenizer_free(&tok);
}

/* 65,535 added tokens, as many as a tokenizer.json may hold: comparing each at each position
 * took 35-50 s for a 171 kB text. The automaton takes one transition a byte and never more
 * failure steps than bytes, whatever the tokens: counted, not timed, so a busy machine cannot
 * make it flaky. */
Test(added_tokens, steps_grow_with_the_text_not_with_the_tokens) {
    int32_t n = 65535;
    char **tokens = malloc((size_t)n * sizeof *tokens);
    size_t *lens = malloc((size_t)n * sizeof *lens);
    for (int32_t k = 0; k < n; k++) {
        tokens[k] = malloc(16);
        lens[k] = (size_t)snprintf(tokens[k], 16, "<|tok%05d|>", (int)k);
    }
    TgTokenizer tok;
    make_tokenizer(&tok, tokens, lens, n, false);
    /* text that keeps the automaton deep: tokens, their prefixes and suffixes, words */
    size_t big = 8 * 40000;
    uint8_t *text = malloc(big);
    TgRng rng;
    tg_rng_seed(&rng, 3);
    for (size_t i = 0; i < big;) {
        char piece[32];
        int k = (int)(tg_rng_below(&rng, (uint64_t)n)), kind = (int)(tg_rng_below(&rng, 4));
        int l = kind == 0 ? snprintf(piece, sizeof piece, "<|tok%05d|>", k)
                : kind == 1 ? snprintf(piece, sizeof piece, "<|tok%03d", k % 1000)
                : kind == 2 ? snprintf(piece, sizeof piece, "%05d|> ", k) : snprintf(piece, sizeof piece, " word ");
        for (int j = 0; j < l && i < big; j++) text[i++] = (uint8_t)piece[j];
    }
    TgAddedScan scan;
    uint64_t steps[2];
    size_t lens_of_text[2] = {big / 8, big};
    for (int r = 0; r < 2; r++) {
        tg_added_scan_begin(&scan, &tok, text, lens_of_text[r], false);
        size_t pos = 0, at, ml;
        int32_t id;
        int found = 0;
        while (tg_added_scan_next(&scan, pos, &at, &id, &ml)) pos = at + ml, found++;
        cr_expect_gt(found, 1000);
        steps[r] = scan.steps;
        tg_added_scan_end(&scan);
        cr_expect_leq(steps[r], 2 * lens_of_text[r], "%llu steps for %zu bytes", (unsigned long long)steps[r], lens_of_text[r]);
    }
    cr_expect_leq(steps[1], 8 * steps[0] + steps[0] / 8, "8 times the text: %llu then %llu steps", (unsigned long long)steps[0],
                  (unsigned long long)steps[1]);
    /* the worst case for failure links: a run of a's against tokens b a^k */
    tg_tokenizer_free(&tok);
    for (int32_t k = 0; k < n; k++) free(tokens[k]);
    int32_t m = 300;
    for (int32_t k = 0; k < m; k++) {
        tokens[k] = malloc((size_t)k + 2);
        tokens[k][0] = 'b';
        memset(tokens[k] + 1, 'a', (size_t)k + 1);
        lens[k] = (size_t)k + 2;
    }
    make_tokenizer(&tok, tokens, lens, m, false);
    memset(text, 'a', big);
    for (size_t i = 0; i < big; i += 997) text[i] = 'b';
    uint64_t worst = expect_same_matches(&tok, text, 20000, "b a^k", false);
    cr_expect_leq(worst, 2 * 20000 + 2 * 300);
    tg_tokenizer_free(&tok);
    for (int32_t k = 0; k < m; k++) free(tokens[k]);
    free(text), free(tokens), free(lens);
}
