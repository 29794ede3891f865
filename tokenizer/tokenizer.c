/* What every tokenizer has (tokenizer.h): its kind's name, the named special tokens, the bytes
 * of a token, decoding. Building one (tokenizer_build.c), encoding (tokenizer_encode.c) and its
 * file (tokenizer_file.c) sit beside it. */
#include "tapegrad/tokenizer.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode_class.h"

const char *tg_tokenizer_kind_name(TgTokenizerKind kind) {
    switch (kind) {
    case TG_TOKENIZER_CHAR: return "char";
    case TG_TOKENIZER_BPE: return "bpe";
    case TG_TOKENIZER_NONE: break;
    }
    return "none";
}

void tg_tokenizer_specials_free(char **names, int32_t n) {
    for (int32_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

TgStatus tg_tokenizer_special_check(const char *name, size_t len, const char *origin) {
    if (len == 0 || len > TG_TOKENIZER_MAX_SPECIAL_BYTES)
        return tg_fail(TG_ERR_ARG, "%s: a special token's name is 1 to %d bytes, not %zu (\"%.80s\")", origin,
                       TG_TOKENIZER_MAX_SPECIAL_BYTES, len, name);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = tg_utf8_next((const unsigned char *)name + i, len - i, &cp);
        if (cp == TG_UTF8_INVALID || cp < 0x21 || cp == 0x7f || cp == ',' || (cp >= 0x80 && cp < 0xa0) ||
            tg_unicode_class(cp) == TG_UNICODE_SPACE)
            return tg_fail(TG_ERR_ARG,
                           "%s: special token \"%.*s\" holds byte %zu that is white space, a control character, a "
                           "comma or not UTF-8: a name is printable text without those",
                           origin, (int)len, name, i);
        i += n;
    }
    return TG_OK;
}

TgStatus tg_tokenizer_specials_parse(const char *spec, char ***names_out, int32_t *n_out) {
    *names_out = NULL;
    *n_out = 0;
    if (!spec || !*spec) return TG_OK;
    if (strcmp(spec, "chatml") == 0) spec = TG_TOKENIZER_CHATML_SPECIALS;
    char **names = NULL;
    int32_t n = 0;
    for (const char *p = spec;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        TgStatus st = tg_tokenizer_special_check(p, len, "`special_tokens`");
        if (st == TG_OK && len == strlen(TG_TOKENIZER_EOT_TEXT) && memcmp(p, TG_TOKENIZER_EOT_TEXT, len) == 0) {
            /* <eot> is always there (id 256) */
        } else if (st == TG_OK) {
            for (int32_t i = 0; i < n && st == TG_OK; i++)
                if (strlen(names[i]) == len && memcmp(names[i], p, len) == 0)
                    st = tg_fail(TG_ERR_ARG, "`special_tokens` names %s twice", names[i]);
            if (st == TG_OK && n == TG_TOKENIZER_MAX_SPECIALS)
                st = tg_fail(TG_ERR_ARG, "`special_tokens`: at most %d names", TG_TOKENIZER_MAX_SPECIALS);
            if (st == TG_OK) {
                names = tg_realloc(names, (size_t)(n + 1) * sizeof *names);
                names[n] = tg_malloc(len + 1);
                memcpy(names[n], p, len);
                names[n++][len] = '\0';
            }
        }
        if (st != TG_OK) {
            tg_tokenizer_specials_free(names, n);
            return st;
        }
        if (!comma) break;
        p = comma + 1;
    }
    *names_out = names;
    *n_out = n;
    return TG_OK;
}

uint64_t tg_tokenizer_fingerprint(const TgTokenizer *tok) { return tok->fingerprint; }

int32_t tg_tokenizer_doc_start(const TgTokenizer *tok) { return tok->has_bos ? tok->bos_id : tok->eot_id; }

size_t tg_tokenizer_max_ids(const TgTokenizer *tok, size_t len) { return tok->hf ? 3 * len : len; }

const uint8_t *tg_tokenizer_token_bytes(const TgTokenizer *tok, int32_t id, size_t *len) {
    TG_CHECK(id >= 0 && id < tok->vocab_size, "token id %d outside [0, %d)", (int)id, (int)tok->vocab_size);
    *len = (size_t)(tok->token_offsets[id + 1] - tok->token_offsets[id]);
    return tok->token_bytes + tok->token_offsets[id];
}

/* <eot> marks where a text ends; it is not part of any text */
static size_t decoded_len(const TgTokenizer *tok, int32_t id) {
    return id == tok->eot_id ? 0 : (size_t)(tok->token_offsets[id + 1] - tok->token_offsets[id]);
}

TgStatus tg_tokenizer_decode(const TgTokenizer *tok, const int32_t *ids, size_t n, char **text,
                           size_t *len) {
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->vocab_size)
            return tg_fail(TG_ERR_ARG,
                           "cannot decode token id %" PRId32 " at position %zu: the %s tokenizer's "
                           "ids are 0..%" PRId32 " (were the tokens made by another tokenizer?)",
                           ids[i], i, tg_tokenizer_kind_name(tok->kind), tok->vocab_size - 1);
        total += decoded_len(tok, ids[i]);
    }
    char *out = tg_malloc(total + 1);
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = decoded_len(tok, ids[i]);
        memcpy(out + pos, tok->token_bytes + tok->token_offsets[ids[i]], l);
        pos += l;
    }
    out[pos] = '\0';
    *text = out;
    *len = pos;
    return TG_OK;
}

