/* Byte-level BPE: training.
 *
 * Training (the classic algorithm, made incremental):
 *   1. cut the text into chunks (the pre-split rule) and count the distinct ones
 *      (tokenizer_bpe_count.c): a 1 MB English text has ~200k chunks but only ~30k distinct
 *      ones ("words");
 *   2. count every adjacent pair over the words, weighted by word frequency, and remember for
 *      each pair the words it occurs in;
 *   3. repeat: take the pair with the highest count (ties: smallest left id, then smallest
 *      right id) from a max-heap, and rewrite only the words that contain it, updating the
 *      counts of the pairs in those words and pushing the changed counts onto the heap.
 *      Heap entries whose count no longer matches the pair's are stale and skipped when popped.
 *   The cost of a merge is proportional to the words it touches, not to the corpus.
 * The merges depend only on the counts and the tie rule, never on the order words or pairs are
 * visited in.
 *
 * Memory: the pairs, their word lists, the heap and the words are a few arrays, and every growth
 * of one is counted against a budget (TgBpeLimits.train_bytes). The distinct pairs, not the words,
 * take most of it, and how many there will be is known only by training: a growth that would pass
 * the budget is refused, and training starts again on the more frequent half of the words.
 *
 * Encoding is in tokenizer_bpe_encode.c, the pre-split in pretokenize.c, the pair -> rank map in
 * token_index.c.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

/* ---- training: words, pairs, heap ------------------------------------------------------- */

typedef struct {
    int32_t left, right;
    int64_t count;   /* occurrences over all words, weighted by word frequency */
    int32_t *words;  /* words it occurs (or occurred) in, stale entries included; NULL for none */
    int32_t n_words; /* room is made for a power of two of them, 4 at least (list_bytes) */
    int32_t touched; /* 1 + the merge step that last changed count */
} PairStat;

/* A pair the current merge step changed, and its count before. */
typedef struct {
    int64_t count;
    int32_t pair;
} Touched;

typedef struct {
    int64_t count;
    int32_t pair;
} HeapEntry;

/* A distinct chunk of >= 2 bytes: its symbols are syms[start .. start + len), rewritten in place. */
typedef struct {
    int64_t start, freq;
    int32_t len;
    int32_t stamp; /* 1 + the merge step that last visited it */
} Word;

typedef struct {
    int32_t *syms;
    Word *words;
    int32_t n_words;

    PairStat *pairs;
    size_t n_pairs, cap_pairs;
    uint32_t *slots; /* (left, right) -> 1 + its index in pairs, 0 for none; a power of two, at least twice n_pairs */
    size_t cap_slots;

    HeapEntry *heap;
    size_t heap_len, heap_cap;

    Touched *touched;
    size_t n_touched, cap_touched;

    /* The bytes the arrays above hold (a word list with 16 for the allocator's header), their
     * peak, and the budget no growth may pass. A growth that would pass it is not made: `over`
     * is set, the step in progress finishes without it (its counts no longer matter) and
     * training stops. */
    size_t bytes, peak, budget;
    bool over;
} Trainer;

/* Counts `add` more bytes held, `during` bytes held at once while they are had. */
static void trainer_charge(Trainer *t, size_t add, size_t during) {
    t->bytes += add;
    if (during > t->peak) t->peak = during;
}

/* Room for `need` items of `size` bytes in *array (*cap of them, from `first` up by half); false,
 * with nothing changed and t->over set, when the arrays would then pass the budget (counting the
 * old array beside the new one, as realloc may hold both). */
static bool trainer_reserve(Trainer *t, void **array, size_t *cap, size_t need, size_t size, size_t first) {
    if (need <= *cap) return true;
    size_t bigger = *cap ? *cap : first;
    while (bigger < need) bigger += bigger / 2;
    if (bigger > INT32_MAX || t->over || t->bytes + bigger * size > t->budget) {
        t->over = true;
        return false;
    }
    *array = tg_realloc(*array, bigger * size);
    trainer_charge(t, (bigger - *cap) * size, t->bytes + bigger * size);
    *cap = bigger;
    return true;
}

#define TRAINER_RESERVE(t, arr, cap, need, first) trainer_reserve(t, (void **)&(t)->arr, &(t)->cap, need, sizeof *(t)->arr, first)

/* What a word list of n entries holds allocated: 4 entries at least, else a power of two. */
static size_t list_bytes(int32_t n) {
    size_t cap = 4;
    while (cap < (size_t)n) cap *= 2;
    return cap * sizeof(int32_t) + 16;
}

static void list_free(Trainer *t, PairStat *p) {
    if (!p->words) return;
    t->bytes -= list_bytes(p->n_words);
    free(p->words);
    p->words = NULL;
    p->n_words = 0;
}

/* Max-heap order: higher count first, then smaller left id, then smaller right id. */
static bool heap_before(const Trainer *t, HeapEntry a, HeapEntry b) {
    if (a.count != b.count) return a.count > b.count;
    const PairStat *pa = &t->pairs[a.pair], *pb = &t->pairs[b.pair];
    if (pa->left != pb->left) return pa->left < pb->left;
    return pa->right < pb->right;
}

static void heap_sift_down(Trainer *t, size_t i) {
    HeapEntry *h = t->heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        if (l < t->heap_len && heap_before(t, h[l], h[best])) best = l;
        if (r < t->heap_len && heap_before(t, h[r], h[best])) best = r;
        if (best == i) return;
        HeapEntry tmp = h[i];
        h[i] = h[best];
        h[best] = tmp;
        i = best;
    }
}

static void heap_push(Trainer *t, int32_t pair) {
    if (!TRAINER_RESERVE(t, heap, heap_cap, t->heap_len + 1, 1024)) return;
    size_t i = t->heap_len++;
    t->heap[i] = (HeapEntry){t->pairs[pair].count, pair};
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_before(t, t->heap[i], t->heap[parent])) break;
        HeapEntry tmp = t->heap[i];
        t->heap[i] = t->heap[parent];
        t->heap[parent] = tmp;
        i = parent;
    }
}

static HeapEntry heap_pop(Trainer *t) {
    HeapEntry top = t->heap[0];
    t->heap[0] = t->heap[--t->heap_len];
    heap_sift_down(t, 0);
    return top;
}

/* The slot of (left, right): the one holding it, or the empty one it would take. */
static size_t pair_slot(const Trainer *t, int32_t left, int32_t right) {
    size_t mask = t->cap_slots - 1, i = (size_t)tokenizer_mix64(tokenizer_pair_key(left, right)) & mask;
    for (; t->slots[i]; i = (i + 1) & mask) {
        const PairStat *p = &t->pairs[t->slots[i] - 1];
        if (p->left == left && p->right == right) break;
    }
    return i;
}

/* A hash table of cap slots holding every pair; false as trainer_reserve. */
static bool pair_rehash(Trainer *t, size_t cap) {
    size_t old = t->cap_slots * sizeof *t->slots, bigger = cap * sizeof *t->slots;
    if (t->bytes + bigger > t->budget) {
        t->over = true;
        return false;
    }
    trainer_charge(t, 0, t->bytes + bigger);
    free(t->slots);
    t->slots = tg_calloc(cap, sizeof *t->slots);
    t->cap_slots = cap;
    t->bytes += bigger - old;
    for (size_t k = 0; k < t->n_pairs; k++) t->slots[pair_slot(t, t->pairs[k].left, t->pairs[k].right)] = (uint32_t)k + 1;
    return true;
}

/* The index of pair (left, right), created with count 0 when new; -1 when that would pass the
 * budget. */
static int32_t pair_lookup(Trainer *t, int32_t left, int32_t right) {
    size_t i = pair_slot(t, left, right);
    if (t->slots[i]) return (int32_t)t->slots[i] - 1;
    if (!TRAINER_RESERVE(t, pairs, cap_pairs, t->n_pairs + 1, 4096)) return -1;
    if (2 * (t->n_pairs + 1) > t->cap_slots) {
        if (!pair_rehash(t, 2 * t->cap_slots)) return -1;
        i = pair_slot(t, left, right);
    }
    int32_t idx = (int32_t)t->n_pairs++;
    t->pairs[idx] = (PairStat){.left = left, .right = right};
    t->slots[i] = (uint32_t)idx + 1;
    return idx;
}

static void pair_add_word(Trainer *t, int32_t pair, int32_t word) {
    if (pair < 0) return;
    PairStat *p = &t->pairs[pair];
    int32_t n = p->n_words;
    if (n > 0 && p->words[n - 1] == word) return;
    if (n == 0 || (n >= 4 && (n & (n - 1)) == 0)) { /* full */
        size_t held = n ? list_bytes(n) : 0, need = list_bytes(n ? 2 * n : 4);
        if (t->over || t->bytes + need > t->budget) {
            t->over = true;
            return;
        }
        p->words = tg_realloc(p->words, need - 16);
        trainer_charge(t, need - held, t->bytes + need);
    }
    p->words[p->n_words++] = word;
}

/* count += delta for (left, right) and remember it changed in this step; -1 as pair_lookup. */
static int32_t pair_change(Trainer *t, int32_t left, int32_t right, int64_t delta, int32_t step) {
    int32_t idx = pair_lookup(t, left, right);
    if (idx < 0) return -1;
    PairStat *p = &t->pairs[idx];
    if (p->touched != step && TRAINER_RESERVE(t, touched, cap_touched, t->n_touched + 1, 1024)) {
        p->touched = step;
        t->touched[t->n_touched++] = (Touched){p->count, idx};
    }
    p->count += delta;
    TG_CHECK(p->count >= 0, "pair count went negative");
    return idx;
}

static void trainer_free(Trainer *t) {
    free(t->syms);
    free(t->words);
    for (size_t i = 0; i < t->n_pairs; i++) free(t->pairs[i].words);
    free(t->pairs);
    free(t->slots);
    free(t->heap);
    free(t->touched);
    memset(t, 0, sizeof *t);
}

/* The words: the counter's distinct chunks as symbol ids, in order of first occurrence (the
 * result does not depend on the order, but this keeps every run identical down to memory layout).
 * false when they alone pass the budget. */
static bool trainer_build_words(Trainer *t, const TgBpeCounter *c) {
    size_t n = tg_bpe_counter_words(c), total = 0, len;
    int64_t count;
    for (size_t k = 0; k < n; k++) {
        tg_bpe_counter_word(c, k, &len, &count);
        total += len;
    }
    size_t need = (total ? total : 1) * sizeof *t->syms + (n ? n : 1) * sizeof *t->words;
    if (need > t->budget) {
        t->over = true;
        return false;
    }
    trainer_charge(t, need, need);
    t->syms = tg_malloc((total ? total : 1) * sizeof *t->syms);
    t->words = tg_malloc((n ? n : 1) * sizeof *t->words);
    size_t pos = 0;
    for (size_t k = 0; k < n; k++) {
        const uint8_t *b = tg_bpe_counter_word(c, k, &len, &count);
        t->words[k] = (Word){(int64_t)pos, count, (int32_t)len, 0};
        for (size_t j = 0; j < len; j++) t->syms[pos + j] = b[j];
        pos += len;
    }
    t->n_words = (int32_t)n;
    return true;
}

static bool trainer_count_pairs(Trainer *t) {
    if (!pair_rehash(t, 1 << 14)) return false;
    for (int32_t w = 0; w < t->n_words && !t->over; w++) {
        const Word *word = &t->words[w];
        const int32_t *s = t->syms + word->start;
        for (int32_t i = 0; i + 1 < word->len; i++) {
            int32_t idx = pair_lookup(t, s[i], s[i + 1]);
            if (idx < 0) break;
            t->pairs[idx].count += word->freq;
            pair_add_word(t, idx, w);
        }
    }
    for (size_t i = 0; i < t->n_pairs && !t->over; i++) heap_push(t, (int32_t)i);
    return !t->over;
}

/* Joins every (a, b) into `id` in the words that hold it, updating pair counts. */
static void trainer_merge(Trainer *t, int32_t pair, int32_t id, int32_t step) {
    int32_t a = t->pairs[pair].left, b = t->pairs[pair].right;
    /* Take the word list: (a, b) never reappears once merged (new adjacencies always involve
     * the new id), and pair_change may move t->pairs. */
    int32_t *list = t->pairs[pair].words, n_list = t->pairs[pair].n_words;
    t->pairs[pair].words = NULL;
    t->pairs[pair].n_words = 0;
    t->n_touched = 0;
    for (int32_t k = 0; k < n_list; k++) {
        int32_t w = list[k];
        Word *word = &t->words[w];
        if (word->stamp == step) continue;
        word->stamp = step;
        int32_t *s = t->syms + word->start;
        int32_t len = word->len;
        bool has = false;
        for (int32_t i = 0; i + 1 < len && !has; i++) has = s[i] == a && s[i + 1] == b;
        if (!has) continue; /* stale entry */
        int64_t f = word->freq;
        for (int32_t i = 0; i + 1 < len; i++) pair_change(t, s[i], s[i + 1], -f, step);
        int32_t j = 0;
        for (int32_t i = 0; i < len;) {
            if (i + 1 < len && s[i] == a && s[i + 1] == b) {
                s[j++] = id;
                i += 2;
            } else {
                s[j++] = s[i++];
            }
        }
        word->len = len = j;
        for (int32_t i = 0; i + 1 < len; i++) {
            int32_t idx = pair_change(t, s[i], s[i + 1], f, step);
            if (s[i] == id || s[i + 1] == id) pair_add_word(t, idx, w);
        }
    }
    t->bytes -= list ? list_bytes(n_list) : 0;
    free(list);
    if (t->over) return;
    TG_CHECK(t->pairs[pair].count == 0, "merged pair still counted %" PRId64, t->pairs[pair].count);
    /* Every pair with a count has a heap entry of that count: a changed count needs a new one. A
     * count can only grow in the step that made the newer of its two ids, so a pair left at 0 is
     * gone for good, and its word list with it. */
    for (size_t k = 0; k < t->n_touched; k++) {
        PairStat *p = &t->pairs[t->touched[k].pair];
        if (p->count == 0) list_free(t, p);
        else if (p->count != t->touched[k].count) heap_push(t, t->touched[k].pair);
    }
}

/* Up to target merges into merges[] (grown as they are made: an absurd vocab_size must fail with
 * a message, not abort); false when the budget ran out first. */
static bool trainer_run(Trainer *t, const TgBpeCounter *c, int32_t first_merge, int32_t target, TgTokenPair **merges,
                        int32_t *n_made) {
    int32_t n = 0, cap = 0;
    if (trainer_build_words(t, c) && trainer_count_pairs(t)) {
        while (n < target && t->heap_len > 0) {
            HeapEntry e = heap_pop(t);
            const PairStat *p = &t->pairs[e.pair];
            if (e.count != p->count || p->count == 0) continue; /* stale */
            if (n == cap) {
                cap = cap < target / 2 ? (cap ? 2 * cap : 1024) : target;
                *merges = tg_realloc(*merges, (size_t)cap * sizeof **merges);
            }
            (*merges)[n] = (TgTokenPair){p->left, p->right};
            trainer_merge(t, e.pair, first_merge + n, n + 1);
            if (t->over) break;
            n++;
        }
    }
    *n_made = n;
    return !t->over;
}

TgStatus tg_tokenizer_bpe_train(const char *text, size_t len, int32_t vocab_size, TgTokenizer *tok) {
    return tg_tokenizer_bpe_train_split(text, len, vocab_size, TG_TOKENIZER_SPLIT_GPT2, tok);
}

/* One text through a counter, then training. */
static TgStatus train_text(const char *text, size_t len, int32_t vocab_size, TgTokenizerSplit split, char **names,
                           int32_t n_names, TgTokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    TgBpeCounter *c;
    TG_TRY(tg_bpe_counter_new(split, names, n_names, &c));
    tg_bpe_counter_add(c, text, len);
    TgStatus st = tg_bpe_counter_train(c, vocab_size, tok, NULL);
    tg_bpe_counter_free(c);
    return st;
}

TgStatus tg_tokenizer_bpe_train_split(const char *text, size_t len, int32_t vocab_size, TgTokenizerSplit split,
                                    TgTokenizer *tok) {
    return train_text(text, len, vocab_size, split, NULL, 0, tok);
}

TgStatus tg_tokenizer_bpe_train_specials(const char *text, size_t len, int32_t vocab_size, const char *specials,
                                         TgTokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    char **names;
    int32_t n;
    TG_TRY(tg_tokenizer_specials_parse(specials, &names, &n));
    TgStatus st = train_text(text, len, vocab_size, TG_TOKENIZER_SPLIT_GPT2, names, n, tok);
    tg_tokenizer_specials_free(names, n);
    return st;
}

TgStatus tg_bpe_counter_train(TgBpeCounter *c, int32_t vocab_size, TgTokenizer *tok, TgBpeTrainReport *report) {
    memset(tok, 0, sizeof *tok);
    TgBpeTrainReport own, *r = report ? report : &own;
    *r = (TgBpeTrainReport){0};
    int32_t n_specials;
    char *const *specials = tg_bpe_counter_specials(c, &n_specials);
    const int32_t first_merge = TG_TOKENIZER_BPE_FIRST_MERGE + n_specials;
    if (vocab_size < first_merge)
        return tg_fail(TG_ERR_ARG,
                       "vocab_size %" PRId32 " is too small for a byte-level BPE tokenizer: it "
                       "needs at least %" PRId32 " (256 bytes + <eot>%s); use a char tokenizer for a smaller "
                       "vocabulary",
                       vocab_size, first_merge, n_specials ? " + the special tokens" : "");
    int32_t target = vocab_size - first_merge, n;
    TgTokenPair *merges = NULL;
    for (;;) {
        Trainer t = {.budget = tg_bpe_counter_limits(c)->train_bytes};
        bool done = trainer_run(&t, c, first_merge, target, &merges, &n);
        if (t.peak > r->peak_bytes) r->peak_bytes = t.peak;
        trainer_free(&t);
        if (done) break;
        /* A table this size needs more than the budget: train on its more frequent half. Each
         * halving at least halves the bytes the words take, so this ends. */
        if (tg_bpe_counter_words(c) < 2) {
            free(merges);
            return tg_fail(TG_ERR_NOMEM, "BPE training needs more than its budget of %zu bytes even for one chunk",
                           tg_bpe_counter_limits(c)->train_bytes);
        }
        tg_bpe_counter_halve(c);
        r->restarts++;
    }
    if (n < target) {
        free(merges);
        return tg_fail(TG_ERR_ARG,
                       "vocab_size %" PRId32 " is more than this corpus can reach: after %" PRId32
                       " merges no adjacent pair is left to merge, so the largest reachable "
                       "vocab_size is %" PRId32 "; ask for at most that, or give more text",
                       vocab_size, n, first_merge + n);
    }
    tok->kind = TG_TOKENIZER_BPE;
    tok->split = tg_bpe_counter_split(c);
    tok->vocab_size = vocab_size;
    tok->eot_id = TG_TOKENIZER_BPE_EOT;
    tok->merges = merges;
    tok->n_merges = target;
    if (n_specials) {
        tok->specials = tg_malloc((size_t)n_specials * sizeof *tok->specials);
        for (int32_t i = 0; i < n_specials; i++) tok->specials[i] = strdup(specials[i]);
        tok->n_specials = n_specials;
    }
    TgStatus st = tg_tokenizer_finish(tok, "BPE training");
    TG_CHECK(st == TG_OK, "a freshly trained BPE tokenizer is invalid: %s", tg_error_message());
    return TG_OK;
}
