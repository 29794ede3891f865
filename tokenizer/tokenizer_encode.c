/* Encoding, by kind: char (tokenizer_char.c) or byte-level BPE (tokenizer_bpe_encode.c). */
#include "tapegrad/tokenizer.h"

#include "tokenizer/tokenizer_internal.h"

TgStatus tg_tokenizer_encode(const TgTokenizer *tok, const char *text, size_t len, int32_t *out,
                           size_t out_cap, size_t *n_out) {
    return tg_tokenizer_encode_cached(tok, text, len, out, out_cap, n_out, NULL);
}

/* Both encodings; literal: special tokens' text stays text. */
static TgStatus encode(const TgTokenizer *tok, const char *text, size_t len, int32_t *out, size_t out_cap,
                       size_t *n_out, TgChunkCache *cache, bool literal) {
    TG_CHECK(tok->kind == TG_TOKENIZER_CHAR || tok->kind == TG_TOKENIZER_BPE, "encode with an empty tokenizer");
    TG_CHECK(out_cap >= tg_tokenizer_max_ids(tok, len), "encode needs room for %zu ids, not %zu",
             tg_tokenizer_max_ids(tok, len), out_cap);
    *n_out = 0;
    if (len == 0) return TG_OK;
    const unsigned char *bytes = (const unsigned char *)text;
    if (tok->kind == TG_TOKENIZER_CHAR) return tg_tokenizer_char_encode(tok, bytes, len, out, n_out);
    tg_tokenizer_bpe_encode(tok, bytes, len, out, n_out, cache, literal);
    return TG_OK;
}

TgStatus tg_tokenizer_encode_cached(const TgTokenizer *tok, const char *text, size_t len, int32_t *out, size_t out_cap,
                                    size_t *n_out, TgChunkCache *cache) {
    return encode(tok, text, len, out, out_cap, n_out, cache, false);
}

TgStatus tg_tokenizer_encode_literal(const TgTokenizer *tok, const char *text, size_t len, int32_t *out, size_t out_cap,
                                     size_t *n_out) {
    return encode(tok, text, len, out, out_cap, n_out, NULL, true);
}
