/* Character (byte) tokenizer: one id per distinct corpus byte, ascending, then <eot>. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

TgStatus tg_tokenizer_char_train(const char *text, size_t len, TgTokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    if (len == 0)
        return tg_fail(TG_ERR_ARG, "cannot build a char tokenizer from an empty text: give it a non-empty corpus");
    bool seen[256] = {false};
    const unsigned char *b = (const unsigned char *)text;
    for (size_t i = 0; i < len; i++) seen[b[i]] = true;
    tok->kind = TG_TOKENIZER_CHAR;
    for (int c = 0; c < 256; c++)
        if (seen[c]) tok->chars[tok->n_chars++] = (uint8_t)c;
    tok->eot_id = tok->n_chars;
    tok->vocab_size = tok->n_chars + 1;
    TgStatus st = tg_tokenizer_finish(tok, "char tokenizer");
    TG_CHECK(st == TG_OK, "a freshly built char tokenizer is invalid: %s", tg_error_message());
    return TG_OK;
}

static void describe_byte(unsigned char c, char *buf, size_t cap) {
    if (c >= 0x20 && c < 0x7f) snprintf(buf, cap, "'%c' (0x%02x)", c, c);
    else snprintf(buf, cap, "0x%02x", c);
}

TgStatus tg_tokenizer_char_encode(const TgTokenizer *tok, const unsigned char *text, size_t len,
                                int32_t *out, size_t *n_out) {
    for (size_t i = 0; i < len; i++) {
        int32_t id = tok->id_of_byte[text[i]];
        if (id < 0) {
            char what[32];
            describe_byte(text[i], what, sizeof what);
            *n_out = 0;
            return tg_fail(TG_ERR_ARG,
                           "byte %s at offset %zu is not in the char tokenizer's vocabulary "
                           "(%d distinct bytes of its training corpus): remove it from the text, "
                           "or train on a corpus that contains it, or use a BPE tokenizer (it "
                           "encodes every byte)",
                           what, i, (int)tok->n_chars);
        }
        out[i] = id;
    }
    *n_out = len;
    return TG_OK;
}
