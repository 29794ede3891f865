/* Byte-level BPE encoding: added tokens, the GPT-2 pre-split, merges by rank.
 *
 *   text -> [replace invalid UTF-8 by U+FFFD: imported tokenizers only]
 *        -> cut at added tokens (leftmost, then longest), each one id (tokenizer_added.c)
 *        -> cut the rest into chunks (the pre-split rule)
 *        -> each chunk: its bytes' ids, then merges by rank
 *
 * A chunk is merged as Hugging Face's BPE and llama.cpp do it: a min-heap of the adjacent pairs
 * that have a merge, keyed by (rank, position of the left symbol); the top pair is joined, its
 * neighbours' new pairs are pushed, and entries made stale by an earlier join are skipped when
 * popped. For tapegrad's own merges (each joins ids older than itself) this gives the same
 * tokens as joining every occurrence of the lowest-rank pair left to right, the way those
 * tokenizers were trained; for an imported file whose merge order is arbitrary it is what the
 * file's own programs do. Cost: O(n log n) for a chunk of n bytes.
 *
 * A chunk longer than TG_TOKENIZER_ENCODE_WINDOW bytes (a run of letters with no space, of digits,
 * of white space: never natural text, whose chunks are words) is merged a window of that many
 * bytes at a time, as if the pre-split had cut it there. Over a whole chunk of megabytes the heap
 * and the symbols would take 36 bytes a byte and every pop would miss the cache; a window keeps
 * them small and in cache. Training counts such a chunk in pieces of TG_TOKENIZER_MAX_CHUNK bytes
 * from its start, and the window is a multiple of that: encoding cuts where training cut.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode_class.h"

/* ---- invalid UTF-8 ----------------------------------------------------------------------- */

/* text with every maximal subpart of invalid UTF-8 replaced by U+FFFD (EF BF BD), malloc'ed;
 * NULL when the text is valid UTF-8. */
static unsigned char *replace_invalid_utf8(const unsigned char *text, size_t len, size_t *out_len) {
    size_t i = 0;
    uint32_t cp = 0;
    while (i < len && (i += tg_utf8_next(text + i, len - i, &cp), cp != TG_UTF8_INVALID)) {}
    if (cp != TG_UTF8_INVALID) return NULL;
    unsigned char *out = tg_malloc(3 * len);
    *out_len = tg_utf8_mark_invalid((const char *)text, len, (char *)out);
    return out;
}

/* ---- merging one chunk ------------------------------------------------------------------- */

typedef struct {
    int32_t id;         /* -1 once joined into the symbol on its left */
    int32_t prev, next; /* neighbours, -1 at the ends */
} Symbol;

typedef struct {
    int32_t rank, pos; /* pos: the left symbol */
} Candidate;

typedef struct {
    Symbol *syms;
    Candidate *heap;
    size_t heap_len, cap; /* cap symbols; the heap holds up to 3 * cap */
} MergeScratch;

static bool candidate_before(Candidate a, Candidate b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void heap_push(MergeScratch *m, int32_t rank, int32_t pos) {
    size_t i = m->heap_len++;
    m->heap[i] = (Candidate){rank, pos};
    while (i > 0 && candidate_before(m->heap[i], m->heap[(i - 1) / 2])) {
        Candidate tmp = m->heap[i];
        m->heap[i] = m->heap[(i - 1) / 2];
        m->heap[(i - 1) / 2] = tmp;
        i = (i - 1) / 2;
    }
}

static Candidate heap_pop(MergeScratch *m) {
    Candidate top = m->heap[0];
    m->heap[0] = m->heap[--m->heap_len];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        if (l < m->heap_len && candidate_before(m->heap[l], m->heap[best])) best = l;
        if (r < m->heap_len && candidate_before(m->heap[r], m->heap[best])) best = r;
        if (best == i) break;
        Candidate tmp = m->heap[i];
        m->heap[i] = m->heap[best];
        m->heap[best] = tmp;
        i = best;
    }
    return top;
}

/* Pushes the pair (left, its right neighbour) when a merge joins it. */
static void push_pair(const TgTokenizer *tok, MergeScratch *m, int32_t left) {
    int32_t right = m->syms[left].next;
    if (right < 0) return;
    int32_t rank = tg_bpe_rank_map_get(tok->ranks, m->syms[left].id, m->syms[right].id);
    if (rank >= 0) heap_push(m, rank, left);
}

/* Encodes one chunk into out; returns the number of ids. */
static size_t encode_chunk(const TgTokenizer *tok, const unsigned char *b, size_t len, MergeScratch *m, int32_t *out) {
    if (tok->ignore_merges) {
        int32_t whole = tg_token_index_find(tok->index, tok, b, len);
        if (whole >= 0) {
            out[0] = whole;
            return 1;
        }
    }
    if (len > m->cap) {
        m->cap = len > 2 * m->cap ? len : 2 * m->cap;
        m->syms = tg_realloc(m->syms, m->cap * sizeof *m->syms);
        m->heap = tg_realloc(m->heap, 3 * m->cap * sizeof *m->heap);
    }
    TG_CHECK(len < INT32_MAX, "a chunk of %zu bytes", len);
    for (size_t i = 0; i < len; i++) m->syms[i] = (Symbol){tok->byte_ids[b[i]], (int32_t)i - 1, i + 1 < len ? (int32_t)i + 1 : -1};
    m->heap_len = 0;
    for (size_t i = 0; i + 1 < len; i++) push_pair(tok, m, (int32_t)i);
    while (m->heap_len > 0) {
        Candidate c = heap_pop(m);
        Symbol *s = &m->syms[c.pos];
        if (s->id < 0 || s->next < 0 || tg_bpe_rank_map_get(tok->ranks, s->id, m->syms[s->next].id) != c.rank)
            continue; /* stale: one of the two was joined to another neighbour since */
        Symbol *right = &m->syms[s->next];
        s->id = tokenizer_merge_id(tok, c.rank);
        s->next = right->next;
        right->id = -1;
        if (s->next >= 0) m->syms[s->next].prev = c.pos;
        if (s->prev >= 0) push_pair(tok, m, s->prev);
        push_pair(tok, m, c.pos);
    }
    size_t n = 0;
    for (int32_t i = 0; i >= 0; i = m->syms[i].next) out[n++] = m->syms[i].id;
    return n;
}

/* ---- the chunk cache ---------------------------------------------------------------------- */

/* A text's chunks repeat (a word's frequency falls as 1/rank): a long text keeps the ids of the
 * short chunks it has merged, up to CACHE_SLOTS / 2 of them, and copies them when the chunk comes
 * again. The ids are those encode_chunk gives, so the cache changes the time, never the tokens. */
enum { CACHE_MIN_TEXT = 1 << 12, CACHE_SLOTS = 1 << 14, CACHE_MAX_CHUNK = 24 };

typedef struct {
    uint64_t hash;  /* 0: an empty slot */
    uint32_t key;   /* offset of the chunk's bytes in keys */
    uint32_t ids;   /* offset of its ids in ids */
    uint8_t len, n_ids;
} CacheSlot;

struct TgChunkCache {
    uint64_t fingerprint; /* of the tokenizer whose ids it holds */
    CacheSlot *slots;
    uint8_t *keys;
    int32_t *ids;
    size_t count, keys_len, ids_len;
};

static void chunk_cache_alloc(TgChunkCache *c);

static uint64_t chunk_hash(const unsigned char *b, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    h ^= h >> 29;
    return h ? h : 1;
}

static void cache_open(TgChunkCache *c, size_t text_len) {
    memset(c, 0, sizeof *c);
    if (text_len < CACHE_MIN_TEXT) return;
    chunk_cache_alloc(c);
}

static void cache_close(TgChunkCache *c) { free(c->slots), free(c->keys), free(c->ids); }

TgChunkCache *tg_chunk_cache_new(void) {
    TgChunkCache *c = calloc(1, sizeof *c);
    if (c) chunk_cache_alloc(c);
    return c;
}

void tg_chunk_cache_free(TgChunkCache *c) {
    if (!c) return;
    cache_close(c);
    free(c);
}

static void chunk_cache_alloc(TgChunkCache *c) {
    c->slots = calloc(CACHE_SLOTS, sizeof *c->slots);
    c->keys = malloc(CACHE_SLOTS / 2 * CACHE_MAX_CHUNK);
    c->ids = malloc(CACHE_SLOTS / 2 * CACHE_MAX_CHUNK * sizeof *c->ids);
    if (!c->slots || !c->keys || !c->ids) { /* no cache: slower, not wrong */
        free(c->slots), free(c->keys), free(c->ids);
        memset(c, 0, sizeof *c);
    }
}

/* The chunk's ids into out, from the cache or by merging (and then kept); returns their number. */
static size_t encode_cached(const TgTokenizer *tok, const unsigned char *b, size_t len, MergeScratch *m, TgChunkCache *c,
                            int32_t *out) {
    if (!c->slots || len > CACHE_MAX_CHUNK || len < 2) return encode_chunk(tok, b, len, m, out);
    uint64_t h = chunk_hash(b, len);
    size_t i = h & (CACHE_SLOTS - 1);
    for (; c->slots[i].hash; i = (i + 1) & (CACHE_SLOTS - 1)) {
        const CacheSlot *s = &c->slots[i];
        if (s->hash == h && s->len == len && memcmp(c->keys + s->key, b, len) == 0) {
            memcpy(out, c->ids + s->ids, s->n_ids * sizeof *out);
            return s->n_ids;
        }
    }
    size_t n = encode_chunk(tok, b, len, m, out);
    if (c->count < CACHE_SLOTS / 2) { /* at most half full: probes stay short */
        c->slots[i] = (CacheSlot){h, (uint32_t)c->keys_len, (uint32_t)c->ids_len, (uint8_t)len, (uint8_t)n};
        memcpy(c->keys + c->keys_len, b, len);
        memcpy(c->ids + c->ids_len, out, n * sizeof *out);
        c->keys_len += len, c->ids_len += n, c->count++;
    }
    return n;
}

void tg_tokenizer_bpe_encode(const TgTokenizer *tok, const unsigned char *text, size_t len, int32_t *out, size_t *n_out,
                             TgChunkCache *shared, bool literal) {
    size_t replaced_len = 0;
    unsigned char *replaced = tok->hf ? replace_invalid_utf8(text, len, &replaced_len) : NULL;
    if (replaced) {
        text = replaced;
        len = replaced_len;
    }
    MergeScratch m = {0};
    TgChunkCache own, *cache = shared;
    if (shared && shared->fingerprint != tok->fingerprint) { /* another tokenizer's ids: forget them */
        if (shared->slots) memset(shared->slots, 0, CACHE_SLOTS * sizeof *shared->slots);
        shared->count = shared->keys_len = shared->ids_len = 0;
        shared->fingerprint = tok->fingerprint;
    }
    if (!shared) cache_open(cache = &own, len);
    TgAddedScan scan;
    tg_added_scan_begin(&scan, tok, text, len, literal);
    size_t n = 0;
    for (size_t pos = 0; pos < len;) {
        size_t at = len, match_len = 0;
        int32_t added = -1;
        tg_added_scan_next(&scan, pos, &at, &added, &match_len);
        while (pos < at) {
            size_t cl = tg_tokenizer_chunk_len(tok->split, (const char *)text + pos, at - pos);
            for (size_t w = 0; w < cl; w += TG_TOKENIZER_ENCODE_WINDOW) {
                size_t wl = cl - w < TG_TOKENIZER_ENCODE_WINDOW ? cl - w : TG_TOKENIZER_ENCODE_WINDOW;
                n += encode_cached(tok, text + pos + w, wl, &m, cache, out + n);
            }
            pos += cl;
        }
        if (added >= 0) out[n++] = added;
        pos = at + match_len;
    }
    tg_added_scan_end(&scan);
    if (!shared) cache_close(&own);
    free(m.syms);
    free(m.heap);
    free(replaced);
    *n_out = n;
}
