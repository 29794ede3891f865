/* BPE training's first pass: the distinct chunks of a corpus and how often each occurs (the word
 * table), in memory with a cap whatever the corpus.
 *
 * A chunk's bytes go once into a store, its record (count, where its bytes are) into an array in
 * order of first occurrence, and a hash table maps the bytes to the record. The table holds at
 * most limits.max_words chunks and limits.max_bytes of their bytes. When a new chunk would pass
 * either, the table is pruned to half of both, as lossy counting does: the chunks seen most often
 * stay, and among those seen equally often the ones seen last (one met early had the longest time
 * to come again); the rest are dropped with their counts, and a dropped chunk that comes again
 * starts from its new occurrences. A prune is one pass over the table and comes at most once per
 * max_words / 2 new chunks, so counting stays linear in the text. A corpus whose distinct chunks
 * fit is counted exactly: below the cap the table is what an unbounded one would be.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

typedef struct {
    int64_t count;
    uint32_t offset; /* of its bytes in the store */
    uint32_t len;    /* 2 .. TG_TOKENIZER_MAX_CHUNK, and KEEP_MARK while a prune decides */
} CountedChunk;

typedef struct {
    uint32_t hash;
    uint32_t index; /* of the chunk, + 1; 0 marks an empty slot */
} ChunkSlot;

struct TgBpeCounter {
    TgTokenizerSplit split;
    TgTokenizer cut;  /* the bytes, <eot> and the specials without merges: finds them in text */
    bool has_cut;     /* the GPT-2 split: <|endoftext|> and the specials are cut out */
    char **specials;
    int32_t n_specials;
    TgBpeLimits limits;
    CountedChunk *chunks; /* in order of first occurrence (since the last prune that kept them) */
    size_t n_chunks, cap_chunks;
    ChunkSlot *slots;     /* a power of two, at least twice n_chunks */
    size_t cap_slots;
    uint8_t *bytes;       /* the chunks' bytes, in the same order */
    size_t n_bytes, cap_bytes;
    uint64_t prunes, dropped;
};

enum { KEEP_MARK = 1u << 31, PRUNE_CLASSES = 1 << 16 };

static size_t pow2_at_least(size_t n) {
    size_t p = 1;
    while (p < n) p *= 2;
    return p;
}

/* The slot of the chunk b[0..len) with hash h: the one holding it, or the empty one it would take. */
static size_t slot_of(const TgBpeCounter *c, const uint8_t *b, size_t len, uint32_t h) {
    size_t mask = c->cap_slots - 1, i = h & mask;
    for (; c->slots[i].index; i = (i + 1) & mask) {
        const ChunkSlot *s = &c->slots[i];
        if (s->hash != h) continue;
        const CountedChunk *k = &c->chunks[s->index - 1];
        if (k->len == len && memcmp(c->bytes + k->offset, b, len) == 0) break;
    }
    return i;
}

/* A table of cap slots holding every chunk. */
static void rehash(TgBpeCounter *c, size_t cap) {
    free(c->slots);
    c->slots = tg_calloc(cap, sizeof *c->slots);
    c->cap_slots = cap;
    for (size_t k = 0; k < c->n_chunks; k++) {
        const CountedChunk *ch = &c->chunks[k];
        uint32_t h = (uint32_t)tokenizer_hash_bytes(c->bytes + ch->offset, ch->len);
        c->slots[slot_of(c, c->bytes + ch->offset, ch->len, h)] = (ChunkSlot){h, (uint32_t)k + 1};
    }
}

/* A chunk's count class: its count, counts from PRUNE_CLASSES - 1 up forming one class (only a
 * table where more than half the chunks were seen that often prunes among them). */
static size_t count_class(const CountedChunk *ch) {
    return ch->count < PRUNE_CLASSES - 1 ? (size_t)ch->count : PRUNE_CLASSES - 1;
}

/* Keeps at most keep_words chunks and keep_bytes of their bytes: every chunk of a count class
 * above a threshold, and the last ones seen of the class at it. Survivors keep their order. */
static void prune(TgBpeCounter *c, size_t keep_words, size_t keep_bytes) {
    size_t *words = tg_calloc(PRUNE_CLASSES, sizeof *words), *bytes = tg_calloc(PRUNE_CLASSES, sizeof *bytes);
    for (size_t k = 0; k < c->n_chunks; k++) {
        words[count_class(&c->chunks[k])]++;
        bytes[count_class(&c->chunks[k])] += c->chunks[k].len;
    }
    size_t kept_words = 0, kept_bytes = 0, threshold = 0;
    for (size_t cls = PRUNE_CLASSES - 1; cls > 0; cls--) {
        if (kept_words + words[cls] > keep_words || kept_bytes + bytes[cls] > keep_bytes) {
            threshold = cls;
            break;
        }
        kept_words += words[cls];
        kept_bytes += bytes[cls];
    }
    free(words);
    free(bytes);
    /* the threshold class: the last seen first, while they fit */
    for (size_t k = c->n_chunks; k-- > 0 && kept_words < keep_words;) {
        CountedChunk *ch = &c->chunks[k];
        if (count_class(ch) != threshold || kept_bytes + ch->len > keep_bytes) continue;
        ch->len |= KEEP_MARK;
        kept_words++;
        kept_bytes += ch->len & ~KEEP_MARK;
    }
    size_t n = 0, at = 0;
    for (size_t k = 0; k < c->n_chunks; k++) {
        CountedChunk ch = c->chunks[k];
        bool keep = count_class(&ch) > threshold || (ch.len & KEEP_MARK);
        if (!keep) continue;
        ch.len &= ~KEEP_MARK;
        memmove(c->bytes + at, c->bytes + ch.offset, ch.len); /* at <= offset: survivors only move down */
        ch.offset = (uint32_t)at;
        at += ch.len;
        c->chunks[n++] = ch;
    }
    c->prunes++;
    c->dropped += c->n_chunks - n;
    c->n_chunks = n;
    c->n_bytes = at;
    rehash(c, c->cap_slots);
}

static void counter_insert(TgBpeCounter *c, const unsigned char *b, size_t len) {
    uint32_t h = (uint32_t)tokenizer_hash_bytes(b, len);
    size_t i = slot_of(c, b, len, h);
    if (c->slots[i].index) {
        c->chunks[c->slots[i].index - 1].count++;
        return;
    }
    const TgBpeLimits *lim = &c->limits;
    if (c->n_chunks == lim->max_words || c->n_bytes + len > lim->max_bytes) {
        prune(c, lim->max_words / 2, lim->max_bytes / 2);
        i = slot_of(c, b, len, h);
    }
    if (2 * (c->n_chunks + 1) > c->cap_slots) {
        rehash(c, 2 * c->cap_slots);
        i = slot_of(c, b, len, h);
    }
    if (c->n_chunks == c->cap_chunks) {
        c->cap_chunks = 2 * c->cap_chunks < lim->max_words ? 2 * c->cap_chunks : lim->max_words;
        c->chunks = tg_realloc(c->chunks, c->cap_chunks * sizeof *c->chunks);
    }
    if (c->cap_bytes - c->n_bytes < len) {
        size_t cap = 2 * c->cap_bytes;
        while (cap - c->n_bytes < len) cap *= 2;
        c->cap_bytes = cap < lim->max_bytes ? cap : lim->max_bytes;
        c->bytes = tg_realloc(c->bytes, c->cap_bytes);
    }
    memcpy(c->bytes + c->n_bytes, b, len);
    c->chunks[c->n_chunks] = (CountedChunk){1, (uint32_t)c->n_bytes, (uint32_t)len};
    c->slots[i] = (ChunkSlot){h, (uint32_t)++c->n_chunks};
    c->n_bytes += len;
}

/* Counts the chunks of text[begin, end) as words, a long chunk in pieces of at most
 * TG_TOKENIZER_MAX_CHUNK bytes (so no token is longer). */
static void count_chunks(TgBpeCounter *c, const unsigned char *text, size_t begin, size_t end) {
    for (size_t pos = begin; pos < end;) {
        size_t cl = tg_tokenizer_chunk_len(c->split, (const char *)text + pos, end - pos);
        for (size_t piece = 0; piece < cl; piece += TG_TOKENIZER_MAX_CHUNK) {
            size_t pl = cl - piece < TG_TOKENIZER_MAX_CHUNK ? cl - piece : TG_TOKENIZER_MAX_CHUNK;
            if (pl >= 2) counter_insert(c, text + pos + piece, pl); /* 1-byte chunks never merge */
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
    tg_bpe_counter_limit(c, &(TgBpeLimits)TG_BPE_LIMITS_DEFAULT);
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
        TgStatus st = tg_tokenizer_finish(t, "`special_tokens`");
        if (st != TG_OK) {
            tg_bpe_counter_free(c);
            return st;
        }
        c->has_cut = true;
    }
    *out = c;
    return TG_OK;
}

void tg_bpe_counter_limit(TgBpeCounter *c, const TgBpeLimits *limits) {
    TG_CHECK(c->n_chunks == 0, "limits are set before the first chunk is counted");
    TG_CHECK(limits->max_words >= 2 && limits->max_words < UINT32_MAX / 2 && limits->max_bytes >= 2 * TG_TOKENIZER_MAX_CHUNK &&
                 limits->max_bytes <= UINT32_MAX,
             "BPE table limits out of range: %zu chunks, %zu bytes", limits->max_words, limits->max_bytes);
    c->limits = *limits;
    free(c->chunks), free(c->slots), free(c->bytes);
    c->cap_chunks = limits->max_words < 1024 ? limits->max_words : 1024;
    c->chunks = tg_malloc(c->cap_chunks * sizeof *c->chunks);
    c->cap_slots = pow2_at_least(2 * c->cap_chunks);
    c->slots = tg_calloc(c->cap_slots, sizeof *c->slots);
    c->cap_bytes = limits->max_bytes < (1 << 16) ? limits->max_bytes : 1 << 16;
    c->bytes = tg_malloc(c->cap_bytes);
}

const TgBpeLimits *tg_bpe_counter_limits(const TgBpeCounter *c) { return &c->limits; }

TgTokenizerSplit tg_bpe_counter_split(const TgBpeCounter *c) { return c->split; }

char *const *tg_bpe_counter_specials(const TgBpeCounter *c, int32_t *n) {
    *n = c->n_specials;
    return c->specials;
}

void tg_bpe_counter_add(TgBpeCounter *c, const char *text, size_t len) {
    const unsigned char *b = (const unsigned char *)text;
    if (!c->has_cut) {
        count_chunks(c, b, 0, len);
        return;
    }
    TgAddedScan scan;
    tg_added_scan_begin(&scan, &c->cut, b, len, false);
    for (size_t pos = 0; pos < len;) {
        size_t at = len, match_len = 0;
        int32_t id;
        tg_added_scan_next(&scan, pos, &at, &id, &match_len);
        count_chunks(c, b, pos, at);
        pos = at + match_len;
    }
    tg_added_scan_end(&scan);
}

void tg_bpe_counter_halve(TgBpeCounter *c) { prune(c, c->n_chunks / 2, c->n_bytes / 2); }

size_t tg_bpe_counter_words(const TgBpeCounter *c) { return c->n_chunks; }

const uint8_t *tg_bpe_counter_word(const TgBpeCounter *c, size_t k, size_t *len, int64_t *count) {
    *len = c->chunks[k].len;
    *count = c->chunks[k].count;
    return c->bytes + c->chunks[k].offset;
}

void tg_bpe_counter_stats(const TgBpeCounter *c, TgBpeCounterStats *s) {
    *s = (TgBpeCounterStats){
        .words = c->n_chunks,
        .word_bytes = c->n_bytes,
        .table_bytes = c->cap_chunks * sizeof *c->chunks + c->cap_slots * sizeof *c->slots + c->cap_bytes,
        .prunes = c->prunes,
        .dropped = c->dropped,
    };
}

size_t tg_bpe_counter_bytes_bound(const TgBpeLimits *limits) {
    return limits->max_words * sizeof(CountedChunk) + pow2_at_least(2 * limits->max_words) * sizeof(ChunkSlot) +
           limits->max_bytes;
}

void tg_bpe_counter_free(TgBpeCounter *c) {
    if (!c) return;
    free(c->chunks);
    free(c->slots);
    free(c->bytes);
    tg_tokenizer_free(&c->cut);
    tg_tokenizer_specials_free(c->specials, c->n_specials);
    free(c);
}
