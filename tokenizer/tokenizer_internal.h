/* Shared by the files of tokenizer/; not part of the public API. */
#ifndef TAPEGRAD_TOKENIZER_INTERNAL_H
#define TAPEGRAD_TOKENIZER_INTERNAL_H

#include "tapegrad/tokenizer.h"

/* Validates the primary fields (kind, vocab_size, eot_id, the char table or the merges) and
 * builds the derived ones (token table, rank map, fingerprint). `origin` names where the
 * fields came from for messages ("tokenizer file x.txt"). An imported tokenizer (hf) arrives
 * with its token table already filled; it is checked against the merges, the byte ids and the
 * added tokens. On failure frees nothing: the caller frees the tokenizer. */
TgStatus tg_tokenizer_finish(TgTokenizer *tok, const char *origin);

/* Reads the tokenizer_config.json beside the tokenizer.json at json_path, if there is one, into an
 * imported tokenizer read but not yet finished: its BOS and EOS (tokenizer_hf.h says the rule). */
TgStatus tg_tokenizer_hf_read_config(const char *json_path, TgTokenizer *tok);

TgStatus tg_tokenizer_char_encode(const TgTokenizer *tok, const unsigned char *text, size_t len,
                                int32_t *out, size_t *n_out);
/* The ids of chunks already merged, kept across calls (a thread's, in prepare): NULL makes a call
 * keep its own, for a long text. */
typedef struct TgChunkCache TgChunkCache;
/* Encoding merges a longer chunk this many bytes at a time (tokenizer_bpe_encode.c says why). */
enum { TG_TOKENIZER_ENCODE_WINDOW = 64 * TG_TOKENIZER_MAX_CHUNK };
TgChunkCache *tg_chunk_cache_new(void); /* NULL when there is no memory: encoding then merges every chunk */
void tg_chunk_cache_free(TgChunkCache *cache);
void tg_tokenizer_bpe_encode(const TgTokenizer *tok, const unsigned char *text, size_t len, int32_t *out, size_t *n_out,
                             TgChunkCache *cache, bool literal);
/* tg_tokenizer_encode with a cache (BPE; a char tokenizer ignores it). */
TgStatus tg_tokenizer_encode_cached(const TgTokenizer *tok, const char *text, size_t len, int32_t *out, size_t out_cap,
                                 size_t *n_out, TgChunkCache *cache);

/* The chunk length of `split`'s rule (tg_tokenizer_bpe_chunk_len or tg_tokenizer_gpt2_chunk_len). */
size_t tg_tokenizer_chunk_len(TgTokenizerSplit split, const char *text, size_t len);

/* The id merge `rank` makes. */
static inline int32_t tokenizer_merge_id(const TgTokenizer *tok, int32_t rank) {
    return tok->merge_ids ? tok->merge_ids[rank] : TG_TOKENIZER_BPE_FIRST_MERGE + tok->n_specials + rank;
}

/* The first merge's id in tapegrad's own BPE: after the bytes, <eot> and the named specials. */
static inline int32_t tokenizer_first_merge(const TgTokenizer *tok) { return TG_TOKENIZER_BPE_FIRST_MERGE + tok->n_specials; }

/* Parses a --special-tokens value (tokenizer.h: tg_tokenizer_bpe_train_specials) into names
 * (malloc'ed array of malloc'ed strings; <|endoftext|> left out, since it is <eot>). */
TgStatus tg_tokenizer_specials_parse(const char *spec, char ***names, int32_t *n);
/* Checks one name (the rules of tokenizer.h), for messages naming `origin`. */
TgStatus tg_tokenizer_special_check(const char *name, size_t len, const char *origin);
void tg_tokenizer_specials_free(char **names, int32_t n);

/* ---- BPE training from a stream (tokenizer_bpe_count.c, tokenizer_bpe.c) ---- */

/* What BPE training may hold: the word table (the distinct chunks) at most max_words chunks and
 * max_bytes of their bytes, pruned to half when a new chunk would pass either; training's own
 * arrays at most train_bytes, or the table is halved and training starts again. */
typedef struct {
    size_t max_words, max_bytes, train_bytes;
} TgBpeLimits;

/* 2^20 chunks, several times the distinct chunks of a few GB of prose, so natural text stays
 * below the cap; 8 MiB of their bytes, as many for chunks of 8 bytes, a word and its space; and a
 * training budget that random text at these caps stays well under, so that the restart is for the
 * worst text only. docs/data.md states the bounds they give. */
#define TG_BPE_LIMITS_DEFAULT {(size_t)1 << 20, (size_t)8 << 20, (size_t)512 << 20}

/* The distinct chunks of every text added, counted: what BPE training needs of a corpus,
 * however large, in the memory of its word table alone (tokenizer_bpe_count.c). */
typedef struct TgBpeCounter TgBpeCounter;
/* A counter for a BPE with `split` and the named specials (as tg_tokenizer_specials_parse gives
 * them; copied), which are cut out of the text as <eot> is; with TG_BPE_LIMITS_DEFAULT. */
TgStatus tg_bpe_counter_new(TgTokenizerSplit split, char *const *specials, int32_t n_specials, TgBpeCounter **out);
/* Other limits (tests), before the first tg_bpe_counter_add. */
void tg_bpe_counter_limit(TgBpeCounter *c, const TgBpeLimits *limits);
const TgBpeLimits *tg_bpe_counter_limits(const TgBpeCounter *c);
TgTokenizerSplit tg_bpe_counter_split(const TgBpeCounter *c);
/* The named specials (the counter's own copies), *n of them. */
char *const *tg_bpe_counter_specials(const TgBpeCounter *c, int32_t *n);
/* Counts the chunks of text (a piece that ends where the pre-split cuts, sources.h). */
void tg_bpe_counter_add(TgBpeCounter *c, const char *text, size_t len);
/* Distinct chunks held, and chunk k's bytes and count (k < tg_bpe_counter_words, in order of first
 * occurrence). */
size_t tg_bpe_counter_words(const TgBpeCounter *c);
const uint8_t *tg_bpe_counter_word(const TgBpeCounter *c, size_t k, size_t *len, int64_t *count);
/* Drops the rarer half of the chunks (and of their bytes), as a prune does. */
void tg_bpe_counter_halve(TgBpeCounter *c);

typedef struct {
    size_t words, word_bytes; /* distinct chunks held and the bytes of them */
    size_t table_bytes;       /* what the table has allocated: at most tg_bpe_counter_bytes_bound */
    uint64_t prunes;          /* times a full table was pruned to half (or halved for training) */
    uint64_t dropped;         /* chunks dropped by them (a chunk dropped twice counts twice) */
} TgBpeCounterStats;
void tg_bpe_counter_stats(const TgBpeCounter *c, TgBpeCounterStats *stats);
/* The most a table with these limits allocates: 16 bytes a chunk, 8 a hash slot (a power of two
 * at least twice max_words) and max_bytes. */
size_t tg_bpe_counter_bytes_bound(const TgBpeLimits *limits);

typedef struct {
    size_t peak_bytes; /* the most training's arrays held at once (old and new during a growth) */
    int restarts;      /* times they would have passed limits.train_bytes */
} TgBpeTrainReport;
/* Trains the tokenizer of vocab_size ids (specials included) from the counts
 * (tg_tokenizer_bpe_train's rules), in at most the counter's train_bytes: when training would
 * need more, it halves the table (tg_bpe_counter_halve) and starts again. report may be NULL. */
TgStatus tg_bpe_counter_train(TgBpeCounter *c, int32_t vocab_size, TgTokenizer *tok, TgBpeTrainReport *report);
void tg_bpe_counter_free(TgBpeCounter *c);

/* One 64-bit key for an adjacent pair of ids (the rank map, training's pair table). */
static inline uint64_t tokenizer_pair_key(int32_t left, int32_t right) {
    return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}

static inline uint64_t tokenizer_mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* A hash of n bytes (FNV-1a, mixed), never 0. */
static inline uint64_t tokenizer_hash_bytes(const unsigned char *b, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    h = tokenizer_mix64(h ^ n);
    return h ? h : 1;
}

/* Pair -> rank map over the merges, into *map. When two merges join the same pair *map is NULL
 * and *duplicate the later merge's index. TG_ERR_NOMEM (the message names what) when the memory
 * cannot be had: the callers read files, which must not abort. */
TgStatus tg_bpe_rank_map_build(const TgTokenPair *merges, int32_t n_merges, TgBpeRankMap **map, int32_t *duplicate);
/* The rank of merge (left, right), or -1. */
int32_t tg_bpe_rank_map_get(const TgBpeRankMap *map, int32_t left, int32_t right);
void tg_bpe_rank_map_free(TgBpeRankMap *map);

/* Token bytes -> id over every id of tok, into *index. When two ids have the same bytes *index
 * is NULL and *first, *second are them. TG_ERR_NOMEM as tg_bpe_rank_map_build. */
TgStatus tg_token_index_build(const TgTokenizer *tok, TgTokenIndex **index, int32_t *first, int32_t *second);
/* The id whose bytes are b[0..len), or -1. */
int32_t tg_token_index_find(const TgTokenIndex *index, const TgTokenizer *tok, const uint8_t *b, size_t len);
void tg_token_index_free(TgTokenIndex *index);

/* ---- added tokens (tokenizer_added.c) ---- */

/* The automaton that finds tok->added in text (with words_only, those that are not special);
 * NULL when there are none. TG_ERR_NOMEM as tg_bpe_rank_map_build. */
TgStatus tg_added_matcher_build(const TgTokenizer *tok, bool words_only, TgAddedMatcher **matcher);
void tg_added_matcher_free(TgAddedMatcher *matcher);

/* One text searched for added tokens, front to back. */
typedef struct {
    const TgTokenizer *tok;
    const TgAddedMatcher *m; /* tok->matcher, or tok->word_matcher for literal text */
    const uint8_t *text;
    size_t len;
    size_t lo, hi, window; /* longest[p - lo] for the positions [lo, hi) scanned last */
    int32_t *longest;
    uint64_t steps; /* the automaton's transitions and failure steps so far: at most twice the bytes scanned */
} TgAddedScan;

/* literal: special tokens' text is text, only added words are found */
void tg_added_scan_begin(TgAddedScan *scan, const TgTokenizer *tok, const uint8_t *text, size_t len, bool literal);
/* The first added token in text[from, len), the longest of those starting there: true and *at,
 * *id, *match_len set; false when there is none. Calls must ask for increasing `from`. */
bool tg_added_scan_next(TgAddedScan *scan, size_t from, size_t *at, int32_t *id, size_t *match_len);
void tg_added_scan_end(TgAddedScan *scan);

#endif
