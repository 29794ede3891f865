/* Byte-level BPE: training and encoding.
 *
 * Training (the classic algorithm, made incremental):
 *   1. cut the text into chunks (the pre-split rule) and count the distinct ones in a hash
 *      map: a 1 MB English text has ~200k chunks but only ~30k distinct ones ("words");
 *   2. count every adjacent pair over the words, weighted by word frequency, and remember for
 *      each pair the words it occurs in;
 *   3. repeat: take the pair with the highest count (ties: smallest left id, then smallest
 *      right id) from a max-heap, and rewrite only the words that contain it, updating the
 *      counts of the pairs in those words and pushing the changed counts onto the heap.
 *      Heap entries whose count no longer matches the pair's are stale and skipped when popped.
 *   The cost of a merge is proportional to the words it touches, not to the corpus.
 *
 * Encoding is in tokenizer_bpe_encode.c; this file also holds the pair -> rank map it uses and
 * the bytes -> id index of imported tokenizers.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

/* ---- pre-split ------------------------------------------------------------------------- */

enum { CLASS_LETTER, CLASS_DIGIT, CLASS_SPACE, CLASS_NEWLINE, CLASS_OTHER };

static int byte_class(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return CLASS_LETTER;
    if (c >= '0' && c <= '9') return CLASS_DIGIT;
    if (c == ' ') return CLASS_SPACE;
    if (c == '\n' || c == '\r') return CLASS_NEWLINE;
    return CLASS_OTHER;
}

/* A space may lead a run of these. */
static bool joins_space(int cls) { return cls == CLASS_LETTER || cls == CLASS_DIGIT || cls == CLASS_OTHER; }

size_t tg_tokenizer_bpe_chunk_len(const char *text, size_t len) {
    if (len == 0) return 0;
    const unsigned char *b = (const unsigned char *)text;
    const size_t max = TG_TOKENIZER_MAX_CHUNK;
    size_t limit = len < max ? len : max;
    int cls = byte_class(b[0]);
    size_t i = 1;
    if (cls == CLASS_SPACE) {
        /* Scan at most max+1 bytes: a longer run is cut at max whatever follows it. */
        while (i < len && i <= max && b[i] == ' ') i++;
        if (i > max) return max;
        if (i < len && joins_space(byte_class(b[i]))) {
            if (i > 1) return i - 1; /* the last space goes with the word */
            int next = byte_class(b[1]);
            i = 2;
            while (i < limit && byte_class(b[i]) == next) i++;
            return i;
        }
        return i;
    }
    while (i < limit && byte_class(b[i]) == cls) i++;
    return i;
}

/* ---- pair -> int32 hash map (open addressing, linear probing) ------------------------- */

#define EMPTY_KEY UINT64_MAX

typedef struct {
    uint64_t *keys;
    int32_t *vals;
    size_t cap; /* power of two */
    size_t count;
} PairMap;

static uint64_t pair_key(int32_t left, int32_t right) {
    return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}

static size_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (size_t)x;
}

static uint64_t hash_bytes(const unsigned char *b, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    h = (uint64_t)mix64(h ^ n);
    return h ? h : 1;
}

/* false when the memory cannot be had (m is then empty) */
static bool pairmap_try_init(PairMap *m, size_t expected) {
    size_t cap = 64;
    while (cap < 2 * expected) cap *= 2;
    m->cap = cap;
    m->count = 0;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        free(m->keys), free(m->vals);
        memset(m, 0, sizeof *m);
        return false;
    }
    for (size_t i = 0; i < cap; i++) m->keys[i] = EMPTY_KEY;
    return true;
}

static void pairmap_init(PairMap *m, size_t expected) {
    TG_CHECK(pairmap_try_init(m, expected), "out of memory for a map of %zu pairs", expected);
}

static void pairmap_free(PairMap *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* Index of key's slot: the one holding it, or the empty slot where it would go. */
static size_t pairmap_slot(const PairMap *m, uint64_t key) {
    size_t mask = m->cap - 1, i = mix64(key) & mask;
    while (m->keys[i] != EMPTY_KEY && m->keys[i] != key) i = (i + 1) & mask;
    return i;
}

static int32_t pairmap_get(const PairMap *m, uint64_t key) {
    size_t i = pairmap_slot(m, key);
    return m->keys[i] == key ? m->vals[i] : -1;
}

static void pairmap_grow(PairMap *m) {
    PairMap bigger;
    pairmap_init(&bigger, m->cap);
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == EMPTY_KEY) continue;
        size_t j = pairmap_slot(&bigger, m->keys[i]);
        bigger.keys[j] = m->keys[i];
        bigger.vals[j] = m->vals[i];
    }
    bigger.count = m->count;
    pairmap_free(m);
    *m = bigger;
}

/* Returns the value stored for key, inserting `val` first when key is absent (*added true). */
static int32_t pairmap_get_or_add(PairMap *m, uint64_t key, int32_t val, bool *added) {
    size_t i = pairmap_slot(m, key);
    if (m->keys[i] == key) {
        *added = false;
        return m->vals[i];
    }
    if (2 * (m->count + 1) > m->cap) {
        pairmap_grow(m);
        i = pairmap_slot(m, key);
    }
    m->keys[i] = key;
    m->vals[i] = val;
    m->count++;
    *added = true;
    return val;
}

/* ---- the rank map used by encoding ------------------------------------------------------ */

struct TgBpeRankMap {
    PairMap map;
};

TgStatus tg_bpe_rank_map_build(const TgTokenPair *merges, int32_t n_merges, TgBpeRankMap **map, int32_t *duplicate) {
    *map = NULL;
    TgBpeRankMap *rm = calloc(1, sizeof *rm);
    if (!rm || !pairmap_try_init(&rm->map, (size_t)n_merges)) {
        free(rm);
        return tg_fail(TG_ERR_NOMEM, "the rank map of %" PRId32 " merges", n_merges);
    }
    for (int32_t i = 0; i < n_merges; i++) {
        bool added;
        pairmap_get_or_add(&rm->map, pair_key(merges[i].left, merges[i].right), i, &added);
        if (!added) {
            *duplicate = i;
            tg_bpe_rank_map_free(rm);
            return TG_OK;
        }
    }
    *map = rm;
    return TG_OK;
}

int32_t tg_bpe_rank_map_get(const TgBpeRankMap *rm, int32_t left, int32_t right) {
    return pairmap_get(&rm->map, pair_key(left, right));
}

void tg_bpe_rank_map_free(TgBpeRankMap *rm) {
    if (!rm) return;
    pairmap_free(&rm->map);
    free(rm);
}

/* ---- bytes -> id index of imported tokenizers ------------------------------------------ */

struct TgTokenIndex {
    int32_t *slots; /* id + 1; 0 marks an empty slot */
    size_t cap;     /* power of two, at least twice the ids */
};

static size_t token_index_slot(const TgTokenIndex *ix, const TgTokenizer *tok, const uint8_t *b, size_t len) {
    size_t mask = ix->cap - 1, i = hash_bytes(b, len) & mask;
    for (; ix->slots[i]; i = (i + 1) & mask) {
        size_t l;
        const uint8_t *t = tg_tokenizer_token_bytes(tok, ix->slots[i] - 1, &l);
        if (l == len && memcmp(t, b, len) == 0) break;
    }
    return i;
}

TgStatus tg_token_index_build(const TgTokenizer *tok, TgTokenIndex **index, int32_t *first, int32_t *second) {
    *index = NULL;
    TgTokenIndex *ix = calloc(1, sizeof *ix);
    if (ix) {
        ix->cap = 64;
        while (ix->cap < 2 * (size_t)tok->vocab_size) ix->cap *= 2;
        ix->slots = calloc(ix->cap, sizeof *ix->slots);
    }
    if (!ix || !ix->slots) {
        free(ix);
        return tg_fail(TG_ERR_NOMEM, "the index of %" PRId32 " tokens", tok->vocab_size);
    }
    for (int32_t id = 0; id < tok->vocab_size; id++) {
        size_t len;
        const uint8_t *b = tg_tokenizer_token_bytes(tok, id, &len);
        size_t i = token_index_slot(ix, tok, b, len);
        if (ix->slots[i]) {
            *first = ix->slots[i] - 1;
            *second = id;
            tg_token_index_free(ix);
            return TG_OK;
        }
        ix->slots[i] = id + 1;
    }
    *index = ix;
    return TG_OK;
}

int32_t tg_token_index_find(const TgTokenIndex *ix, const TgTokenizer *tok, const uint8_t *b, size_t len) {
    return ix->slots[token_index_slot(ix, tok, b, len)] - 1;
}

void tg_token_index_free(TgTokenIndex *ix) {
    if (!ix) return;
    free(ix->slots);
    free(ix);
}

/* ---- training: distinct chunks, counted over a stream -------------------------------- */

typedef struct {
    uint64_t hash; /* 0 marks an empty slot */
    size_t offset; /* of its bytes in the counter's store, which holds each distinct chunk once */
    uint32_t len;
    int64_t count;
} ChunkSlot;

typedef struct {
    ChunkSlot *slots;
    size_t cap, count;
} ChunkMap;

struct TgBpeCounter {
    TgTokenizerSplit split;
    TgTokenizer cut;         /* the bytes, <eot> and the specials without merges: finds them in text */
    bool has_cut;            /* the GPT-2 split: <|endoftext|> and the specials are cut out */
    ChunkMap chunks;
    uint8_t *bytes;          /* the distinct chunks' bytes, in order of first occurrence */
    size_t n_bytes, cap_bytes;
    char **specials;
    int32_t n_specials;
};

static void chunkmap_grow(ChunkMap *m) {
    ChunkMap bigger = {tg_calloc(m->cap * 2, sizeof(ChunkSlot)), m->cap * 2, 0};
    for (size_t i = 0; i < m->cap; i++) {
        ChunkSlot *s = &m->slots[i];
        if (!s->hash) continue;
        size_t mask = bigger.cap - 1, j = s->hash & mask;
        while (bigger.slots[j].hash) j = (j + 1) & mask;
        bigger.slots[j] = *s;
        bigger.count++;
    }
    free(m->slots);
    *m = bigger;
}

static void counter_insert(TgBpeCounter *c, const unsigned char *b, size_t len, int64_t count) {
    ChunkMap *m = &c->chunks;
    if (2 * (m->count + 1) > m->cap) chunkmap_grow(m);
    uint64_t h = hash_bytes(b, len);
    size_t mask = m->cap - 1, i = h & mask;
    for (;; i = (i + 1) & mask) {
        ChunkSlot *s = &m->slots[i];
        if (!s->hash) {
            if (c->cap_bytes - c->n_bytes < len) {
                c->cap_bytes = c->cap_bytes ? 2 * c->cap_bytes : 1 << 16;
                while (c->cap_bytes - c->n_bytes < len) c->cap_bytes *= 2;
                c->bytes = tg_realloc(c->bytes, c->cap_bytes);
            }
            memcpy(c->bytes + c->n_bytes, b, len);
            *s = (ChunkSlot){h, c->n_bytes, (uint32_t)len, count};
            c->n_bytes += len;
            m->count++;
            return;
        }
        if (s->hash == h && s->len == len && memcmp(c->bytes + s->offset, b, len) == 0) {
            s->count += count;
            return;
        }
    }
}

static int chunk_by_offset(const void *a, const void *b) {
    size_t x = ((const ChunkSlot *)a)->offset, y = ((const ChunkSlot *)b)->offset;
    return (x > y) - (x < y);
}

/* The counter's chunks in order of first occurrence (malloc'ed, *n of them). */
static ChunkSlot *chunks_in_order(const TgBpeCounter *c, size_t *n) {
    ChunkSlot *order = tg_malloc((c->chunks.count ? c->chunks.count : 1) * sizeof *order);
    size_t k = 0;
    for (size_t i = 0; i < c->chunks.cap; i++)
        if (c->chunks.slots[i].hash) order[k++] = c->chunks.slots[i];
    qsort(order, k, sizeof *order, chunk_by_offset);
    *n = k;
    return order;
}

/* Counts the chunks of text[begin, end) as words, a long chunk in pieces of at most
 * TG_TOKENIZER_MAX_CHUNK bytes (so no token is longer). */
static void count_chunks(TgBpeCounter *c, const unsigned char *text, size_t begin, size_t end) {
    for (size_t pos = begin; pos < end;) {
        size_t cl = tg_tokenizer_chunk_len(c->split, (const char *)text + pos, end - pos);
        for (size_t piece = 0; piece < cl; piece += TG_TOKENIZER_MAX_CHUNK) {
            size_t pl = cl - piece < TG_TOKENIZER_MAX_CHUNK ? cl - piece : TG_TOKENIZER_MAX_CHUNK;
            if (pl >= 2) counter_insert(c, text + pos + piece, pl, 1); /* 1-byte chunks never merge */
        }
        pos += cl;
    }
}

TgStatus tg_bpe_counter_new(TgTokenizerSplit split, char *const *specials, int32_t n_specials, TgBpeCounter **out) {
    *out = NULL;
    if (n_specials > 0 && split != TG_TOKENIZER_SPLIT_GPT2)
        return tg_fail(TG_ERR_ARG, "named special tokens need the GPT-2 pre-split");
    TgBpeCounter *c = tg_calloc(1, sizeof *c);
    c->split = split;
    c->chunks = (ChunkMap){tg_calloc(1024, sizeof(ChunkSlot)), 1024, 0};
    if (n_specials > 0) {
        c->specials = tg_malloc((size_t)n_specials * sizeof *c->specials);
        for (int32_t i = 0; i < n_specials; i++) c->specials[i] = strdup(specials[i]);
        c->n_specials = n_specials;
    }
    if (split == TG_TOKENIZER_SPLIT_GPT2) {
        /* with the GPT-2 split, TG_TOKENIZER_EOT_TEXT is the <eot> token wherever it appears, and
         * a special is its own token: no chunk spans one and no merge learns one */
        TgTokenizer *t = &c->cut;
        t->kind = TG_TOKENIZER_BPE;
        t->split = split;
        t->n_specials = n_specials;
        t->specials = n_specials ? tg_malloc((size_t)n_specials * sizeof *t->specials) : NULL;
        for (int32_t i = 0; i < n_specials; i++) t->specials[i] = strdup(specials[i]);
        t->vocab_size = TG_TOKENIZER_BPE_FIRST_MERGE + n_specials;
        t->eot_id = TG_TOKENIZER_BPE_EOT;
        TgStatus st = tg_tokenizer_finish(t, "--special-tokens");
        if (st != TG_OK) {
            tg_bpe_counter_free(c);
            return st;
        }
        c->has_cut = true;
    }
    *out = c;
    return TG_OK;
}

void tg_bpe_counter_add(TgBpeCounter *c, const char *text, size_t len) {
    const unsigned char *b = (const unsigned char *)text;
    if (!c->has_cut) {
        count_chunks(c, b, 0, len);
        return;
    }
    TgAddedScan scan;
    tg_added_scan_begin(&scan, &c->cut, b, len);
    for (size_t pos = 0; pos < len;) {
        size_t at = len, match_len = 0;
        int32_t id;
        tg_added_scan_next(&scan, pos, &at, &id, &match_len);
        count_chunks(c, b, pos, at);
        pos = at + match_len;
    }
    tg_added_scan_end(&scan);
}

void tg_bpe_counter_merge(TgBpeCounter *into, const TgBpeCounter *from) {
    size_t n;
    ChunkSlot *order = chunks_in_order(from, &n);
    for (size_t k = 0; k < n; k++) counter_insert(into, from->bytes + order[k].offset, order[k].len, order[k].count);
    free(order);
}

size_t tg_bpe_counter_words(const TgBpeCounter *c) { return c->chunks.count; }

size_t tg_bpe_counter_bytes(const TgBpeCounter *c) { return c->chunks.cap * sizeof(ChunkSlot) + c->cap_bytes; }

void tg_bpe_counter_free(TgBpeCounter *c) {
    if (!c) return;
    free(c->chunks.slots);
    free(c->bytes);
    tg_tokenizer_free(&c->cut);
    tg_tokenizer_specials_free(c->specials, c->n_specials);
    free(c);
}

/* ---- training: words, pairs, heap ------------------------------------------------------- */

typedef struct {
    int32_t left, right;
    int64_t count;      /* occurrences over all words, weighted by word frequency */
    int64_t heap_count; /* count of the newest heap entry for this pair */
    int32_t *words;     /* words it occurs (or occurred) in; may hold stale entries */
    int32_t n_words, cap_words;
    int32_t touched;    /* 1 + the merge step that last changed count */
} PairStat;

typedef struct {
    int64_t count;
    int32_t pair;
} HeapEntry;

typedef struct {
    /* words: the distinct chunks of >= 2 bytes, as symbol ids rewritten in place */
    int32_t *syms;
    int64_t *word_start;
    int32_t *word_len;
    int64_t *word_freq;
    int32_t *word_stamp; /* 1 + the merge step that last visited the word */
    int32_t n_words;

    PairMap pair_index; /* (left, right) -> index into pairs */
    PairStat *pairs;
    int32_t n_pairs, cap_pairs;

    HeapEntry *heap;
    size_t heap_len, heap_cap;

    int32_t *touched;
    int32_t n_touched, cap_touched;
} Trainer;

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
    if (t->heap_len == t->heap_cap) {
        t->heap_cap = t->heap_cap ? 2 * t->heap_cap : 1024;
        t->heap = tg_realloc(t->heap, t->heap_cap * sizeof *t->heap);
    }
    t->pairs[pair].heap_count = t->pairs[pair].count;
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

/* The index of pair (left, right), created with count 0 when new. */
static int32_t pair_lookup(Trainer *t, int32_t left, int32_t right) {
    bool added;
    int32_t idx = pairmap_get_or_add(&t->pair_index, pair_key(left, right), t->n_pairs, &added);
    if (added) {
        TG_CHECK(t->n_pairs < INT32_MAX, "too many distinct pairs");
        if (t->n_pairs == t->cap_pairs) {
            t->cap_pairs = t->cap_pairs ? 2 * t->cap_pairs : 4096;
            t->pairs = tg_realloc(t->pairs, (size_t)t->cap_pairs * sizeof *t->pairs);
        }
        t->pairs[t->n_pairs++] = (PairStat){.left = left, .right = right};
    }
    return idx;
}

static void pair_add_word(PairStat *p, int32_t word) {
    if (p->n_words > 0 && p->words[p->n_words - 1] == word) return;
    if (p->n_words == p->cap_words) {
        p->cap_words = p->cap_words ? 2 * p->cap_words : 4;
        p->words = tg_realloc(p->words, (size_t)p->cap_words * sizeof *p->words);
    }
    p->words[p->n_words++] = word;
}

/* count += delta for (left, right) and remember it changed in this step. */
static int32_t pair_change(Trainer *t, int32_t left, int32_t right, int64_t delta, int32_t step) {
    int32_t idx = pair_lookup(t, left, right);
    PairStat *p = &t->pairs[idx];
    p->count += delta;
    TG_CHECK(p->count >= 0, "pair count went negative");
    if (p->touched != step) {
        p->touched = step;
        if (t->n_touched == t->cap_touched) {
            t->cap_touched = t->cap_touched ? 2 * t->cap_touched : 1024;
            t->touched = tg_realloc(t->touched, (size_t)t->cap_touched * sizeof *t->touched);
        }
        t->touched[t->n_touched++] = idx;
    }
    return idx;
}

static void trainer_free(Trainer *t) {
    free(t->syms);
    free(t->word_start);
    free(t->word_len);
    free(t->word_freq);
    free(t->word_stamp);
    for (int32_t i = 0; i < t->n_pairs; i++) free(t->pairs[i].words);
    free(t->pairs);
    pairmap_free(&t->pair_index);
    free(t->heap);
    free(t->touched);
}

/* The words: the counter's distinct chunks as symbol ids, in order of first occurrence (the
 * result does not depend on the order, but this keeps every run identical down to memory layout). */
static void trainer_build_words(Trainer *t, const TgBpeCounter *c) {
    TG_CHECK(c->chunks.count < INT32_MAX, "too many distinct chunks: %zu", c->chunks.count);
    size_t n;
    ChunkSlot *order = chunks_in_order(c, &n);
    t->syms = tg_malloc((c->n_bytes ? c->n_bytes : 1) * sizeof *t->syms);
    size_t nw = n ? n : 1;
    t->word_start = tg_malloc(nw * sizeof *t->word_start);
    t->word_len = tg_malloc(nw * sizeof *t->word_len);
    t->word_freq = tg_malloc(nw * sizeof *t->word_freq);
    t->word_stamp = tg_calloc(nw, sizeof *t->word_stamp);
    size_t pos = 0;
    for (size_t k = 0; k < n; k++) {
        const ChunkSlot *s = &order[k];
        t->word_start[k] = (int64_t)pos;
        t->word_len[k] = (int32_t)s->len;
        t->word_freq[k] = s->count;
        for (uint32_t j = 0; j < s->len; j++) t->syms[pos + j] = c->bytes[s->offset + j];
        pos += s->len;
    }
    t->n_words = (int32_t)n;
    free(order);
}

static void trainer_count_pairs(Trainer *t) {
    pairmap_init(&t->pair_index, 1 << 14);
    for (int32_t w = 0; w < t->n_words; w++) {
        const int32_t *s = t->syms + t->word_start[w];
        for (int32_t i = 0; i + 1 < t->word_len[w]; i++) {
            int32_t idx = pair_lookup(t, s[i], s[i + 1]);
            t->pairs[idx].count += t->word_freq[w];
            pair_add_word(&t->pairs[idx], w);
        }
    }
    for (int32_t i = 0; i < t->n_pairs; i++) heap_push(t, i);
}

/* Joins every (a, b) into `id` in the words that hold it, updating pair counts. */
static void trainer_merge(Trainer *t, int32_t pair, int32_t id, int32_t step) {
    int32_t a = t->pairs[pair].left, b = t->pairs[pair].right;
    /* Take the word list: (a, b) never reappears once merged (new adjacencies always involve
     * the new id), and pair_change may move t->pairs. */
    int32_t *words = t->pairs[pair].words, n_words = t->pairs[pair].n_words;
    t->pairs[pair].words = NULL;
    t->pairs[pair].n_words = t->pairs[pair].cap_words = 0;
    t->n_touched = 0;
    for (int32_t k = 0; k < n_words; k++) {
        int32_t w = words[k];
        if (t->word_stamp[w] == step) continue;
        t->word_stamp[w] = step;
        int32_t *s = t->syms + t->word_start[w];
        int32_t len = t->word_len[w];
        bool has = false;
        for (int32_t i = 0; i + 1 < len && !has; i++) has = s[i] == a && s[i + 1] == b;
        if (!has) continue; /* stale entry */
        int64_t f = t->word_freq[w];
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
        t->word_len[w] = len = j;
        for (int32_t i = 0; i + 1 < len; i++) {
            int32_t idx = pair_change(t, s[i], s[i + 1], f, step);
            if (s[i] == id || s[i + 1] == id) pair_add_word(&t->pairs[idx], w);
        }
    }
    free(words);
    TG_CHECK(t->pairs[pair].count == 0, "merged pair still counted %" PRId64, t->pairs[pair].count);
    for (int32_t k = 0; k < t->n_touched; k++) {
        PairStat *p = &t->pairs[t->touched[k]];
        if (p->count > 0 && p->count != p->heap_count) heap_push(t, t->touched[k]);
    }
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
    TgStatus st = tg_bpe_counter_train(c, vocab_size, tok);
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

TgStatus tg_bpe_counter_train(const TgBpeCounter *c, int32_t vocab_size, TgTokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    const int32_t first_merge = TG_TOKENIZER_BPE_FIRST_MERGE + c->n_specials;
    if (vocab_size < first_merge)
        return tg_fail(TG_ERR_ARG,
                       "vocab_size %" PRId32 " is too small for a byte-level BPE tokenizer: it "
                       "needs at least %" PRId32 " (256 bytes + <eot>%s); use a char tokenizer for a smaller "
                       "vocabulary",
                       vocab_size, first_merge, c->n_specials ? " + the special tokens" : "");
    int32_t target = vocab_size - first_merge;
    Trainer t = {0};
    trainer_build_words(&t, c);
    trainer_count_pairs(&t);
    /* grown as merges are made: an absurd vocab_size must fail with a message, not abort */
    TgTokenPair *merges = NULL;
    int32_t n = 0, cap = 0;
    while (n < target) {
        if (t.heap_len == 0) break;
        HeapEntry e = heap_pop(&t);
        const PairStat *p = &t.pairs[e.pair];
        if (e.count != p->count || p->count == 0) continue; /* stale */
        if (n == cap) {
            cap = cap < target / 2 ? (cap ? 2 * cap : 1024) : target;
            merges = tg_realloc(merges, (size_t)cap * sizeof *merges);
        }
        merges[n] = (TgTokenPair){p->left, p->right};
        trainer_merge(&t, e.pair, first_merge + n, n + 1);
        n++;
    }
    trainer_free(&t);
    if (n < target) {
        free(merges);
        return tg_fail(TG_ERR_ARG,
                       "vocab_size %" PRId32 " is more than this corpus can reach: after %" PRId32
                       " merges no adjacent pair is left to merge, so the largest reachable "
                       "vocab_size is %" PRId32 "; ask for at most that, or give more text",
                       vocab_size, n, first_merge + n);
    }
    tok->kind = TG_TOKENIZER_BPE;
    tok->split = c->split;
    tok->vocab_size = vocab_size;
    tok->eot_id = TG_TOKENIZER_BPE_EOT;
    tok->merges = merges;
    tok->n_merges = target;
    if (c->n_specials) {
        tok->specials = tg_malloc((size_t)c->n_specials * sizeof *tok->specials);
        for (int32_t i = 0; i < c->n_specials; i++) tok->specials[i] = strdup(c->specials[i]);
        tok->n_specials = c->n_specials;
    }
    TgStatus st = tg_tokenizer_finish(tok, "BPE training");
    TG_CHECK(st == TG_OK, "a freshly trained BPE tokenizer is invalid: %s", tg_error_message());
    return TG_OK;
}
