/* Shared by tokenizer.c, tokenizer_char.c and tokenizer_bpe.c; not part of the public API. */
#ifndef TAPEGRAD_DATA_TOKENIZER_INTERNAL_H
#define TAPEGRAD_DATA_TOKENIZER_INTERNAL_H

#include "data/tokenizer.h"

/* Validates the primary fields (kind, vocab_size, eot_id, the char table or the merges) and
 * builds the derived ones (token table, rank map, fingerprint). `origin` names where the
 * fields came from for messages ("tokenizer file x.txt"). On failure frees nothing: the
 * caller frees the tokenizer. */
tg_status tokenizer_finish(Tokenizer *tok, const char *origin);

tg_status tokenizer_char_encode(const Tokenizer *tok, const unsigned char *text, size_t len,
                                int32_t *out, size_t *n_out);
void tokenizer_bpe_encode(const Tokenizer *tok, const unsigned char *text, size_t len,
                          int32_t *out, size_t *n_out);

/* Pair -> rank map over the merges. Returns NULL when two merges join the same pair and then
 * sets *duplicate to the later merge's index. */
BpeRankMap *bpe_rank_map_build(const TokenPair *merges, int32_t n_merges, int32_t *duplicate);
void bpe_rank_map_free(BpeRankMap *map);

#endif
