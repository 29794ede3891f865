/* The look-ups both BPE training and encoding use (tokenizer_internal.h): the pair -> rank map of
 * the merges, and the bytes -> id index of imported tokenizers. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

/* ---- pair -> int32 hash map (open addressing, linear probing) ------------------------- */

#define EMPTY_KEY UINT64_MAX

typedef struct {
    uint64_t *keys;
    int32_t *vals;
    size_t cap; /* power of two */
    size_t count;
} PairMap;

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
    size_t mask = m->cap - 1, i = (size_t)tokenizer_mix64(key) & mask;
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
        pairmap_get_or_add(&rm->map, tokenizer_pair_key(merges[i].left, merges[i].right), i, &added);
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
    return pairmap_get(&rm->map, tokenizer_pair_key(left, right));
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
    size_t mask = ix->cap - 1, i = (size_t)tokenizer_hash_bytes(b, len) & mask;
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

