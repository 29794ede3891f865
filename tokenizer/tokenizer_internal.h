/* Shared by the data/tokenizer*.c files; not part of the public API. */
#ifndef TAPEGRAD_DATA_TOKENIZER_INTERNAL_H
#define TAPEGRAD_DATA_TOKENIZER_INTERNAL_H

#include "tapegrad/tokenizer.h"

/* Validates the primary fields (kind, vocab_size, eot_id, the char table or the merges) and
 * builds the derived ones (token table, rank map, fingerprint). `origin` names where the
 * fields came from for messages ("tokenizer file x.txt"). An imported tokenizer (hf) arrives
 * with its token table already filled; it is checked against the merges, the byte ids and the
 * added tokens. On failure frees nothing: the caller frees the tokenizer. */
TgStatus tg_tokenizer_finish(TgTokenizer *tok, const char *origin);

TgStatus tg_tokenizer_char_encode(const TgTokenizer *tok, const unsigned char *text, size_t len,
                                int32_t *out, size_t *n_out);
/* The ids of chunks already merged, kept across calls (a thread's, in prepare): NULL makes a call
 * keep its own, for a long text. */
typedef struct TgChunkCache TgChunkCache;
TgChunkCache *tg_chunk_cache_new(void); /* NULL when there is no memory: encoding then merges every chunk */
void tg_chunk_cache_free(TgChunkCache *cache);
void tg_tokenizer_bpe_encode(const TgTokenizer *tok, const unsigned char *text, size_t len,
                          int32_t *out, size_t *n_out, TgChunkCache *cache);
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

/* ---- BPE training from a stream (tokenizer_bpe.c) ---- */

/* The distinct chunks of every text added, counted: what BPE training needs of a corpus,
 * however large, in memory proportional to the distinct chunks (the word table) alone. */
typedef struct TgBpeCounter TgBpeCounter;
/* A counter for a BPE with `split` and the named specials (as tg_tokenizer_specials_parse gives
 * them; copied), which are cut out of the text as <eot> is. */
TgStatus tg_bpe_counter_new(TgTokenizerSplit split, char *const *specials, int32_t n_specials, TgBpeCounter **out);
/* Counts the chunks of text (a piece that ends where the pre-split cuts, sources.h). */
void tg_bpe_counter_add(TgBpeCounter *c, const char *text, size_t len);
/* Adds the counts of `from` into `into`: words new to `into` are appended in from's order. */
void tg_bpe_counter_merge(TgBpeCounter *into, const TgBpeCounter *from);
/* Distinct chunks so far, and the bytes the counter holds. */
size_t tg_bpe_counter_words(const TgBpeCounter *c);
size_t tg_bpe_counter_bytes(const TgBpeCounter *c);
/* Trains the tokenizer of vocab_size ids (specials included) from the counts (tg_tokenizer_bpe_train's rules). */
TgStatus tg_bpe_counter_train(const TgBpeCounter *c, int32_t vocab_size, TgTokenizer *tok);
void tg_bpe_counter_free(TgBpeCounter *c);

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

/* The automaton that finds tok->added in text; NULL when there are none. TG_ERR_NOMEM as
 * tg_bpe_rank_map_build. */
TgStatus tg_added_matcher_build(const TgTokenizer *tok, TgAddedMatcher **matcher);
void tg_added_matcher_free(TgAddedMatcher *matcher);

/* One text searched for added tokens, front to back. */
typedef struct {
    const TgTokenizer *tok;
    const uint8_t *text;
    size_t len;
    size_t lo, hi, window; /* longest[p - lo] for the positions [lo, hi) scanned last */
    int32_t *longest;
    uint64_t steps; /* the automaton's transitions and failure steps so far: at most twice the bytes scanned */
} TgAddedScan;

void tg_added_scan_begin(TgAddedScan *scan, const TgTokenizer *tok, const uint8_t *text, size_t len);
/* The first added token in text[from, len), the longest of those starting there: true and *at,
 * *id, *match_len set; false when there is none. Calls must ask for increasing `from`. */
bool tg_added_scan_next(TgAddedScan *scan, size_t from, size_t *at, int32_t *id, size_t *match_len);
void tg_added_scan_end(TgAddedScan *scan);

#endif
