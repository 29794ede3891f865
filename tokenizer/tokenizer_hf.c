/* tokenizer.json out, and GPT-2's byte map both ways (see tokenizer_hf.h; tokenizer_hf_read.c reads). */
#include "tokenizer/tokenizer_hf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode_class.h"
#include "support/atomic_file.h"
#include "support/json_write.h"
#include "support/path.h"

/* ---- GPT-2's byte <-> character map ----------------------------------------------------
 * The printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves; the other 68
 * (0x00..0x20, 0x7F..0xA0, 0xAD), in byte order, become U+0100, U+0101, ...: so the space is
 * U+0120 'Ġ' and the newline U+010A 'Ċ'. */

static uint32_t byte_char(uint8_t b) {
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu);
    if (b == 0xAD) return 0x100u + 67;
    return b;
}

/* The byte a character stands for, or -1. */
static int char_byte(uint32_t cp) {
    if (cp >= 0x100 && cp <= 0x120) return (int)(cp - 0x100);
    if (cp >= 0x121 && cp <= 0x142) return (int)(cp - 0x121 + 0x7F);
    if (cp == 0x143) return 0xAD;
    if (cp < 0x100 && byte_char((uint8_t)cp) == cp) return (int)cp;
    return -1;
}

/* The index of id in tok->added (sorted by id), or -1. */
static int32_t added_index(const TgTokenizer *tok, int32_t id) {
    int32_t lo = 0, hi = tok->n_added;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (tok->added[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < tok->n_added && tok->added[lo].id == id ? lo : -1;
}

bool tg_tokenizer_hf_is_added(const TgTokenizer *tok, int32_t id, bool *special) {
    *special = true;
    if (id == tok->eot_id) return true;
    int32_t k = added_index(tok, id);
    if (k >= 0) *special = tok->added[k].special;
    return k >= 0;
}

/* Bytes through GPT-2's map: the text a vocabulary or a merge writes them as. */
static char *mapped_text(const uint8_t *b, size_t len) {
    char *text = tg_malloc(2 * len + 1), *p = text; /* mapped characters take 1 or 2 bytes */
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = byte_char(b[i]);
        if (cp < 0x80) {
            *p++ = (char)cp;
        } else {
            *p++ = (char)(0xC0 | (cp >> 6));
            *p++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    *p = '\0';
    return text;
}

bool tg_tokenizer_hf_bytes_of_text(const char *s, size_t len, uint8_t *out, size_t *n) {
    *n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += tg_utf8_next((const unsigned char *)s + i, len - i, &cp);
        int b = char_byte(cp);
        if (b < 0) return false;
        out[(*n)++] = (uint8_t)b;
    }
    return true;
}

char *tg_tokenizer_hf_token_text(const TgTokenizer *tok, int32_t id) {
    size_t len;
    const uint8_t *b = tg_tokenizer_token_bytes(tok, id, &len);
    bool special;
    if (!tg_tokenizer_hf_is_added(tok, id, &special)) return mapped_text(b, len);
    if (len == 0) { /* a char tokenizer's <eot> */
        b = (const uint8_t *)TG_TOKENIZER_EOT_TEXT;
        len = strlen(TG_TOKENIZER_EOT_TEXT);
    }
    char *text = tg_malloc(len + 1);
    memcpy(text, b, len);
    text[len] = '\0';
    return text;
}

/* ---- writing ------------------------------------------------------------------------------ */

TgStatus tg_tokenizer_hf_check_exportable(const TgTokenizer *tok) {
    if (tok->kind == TG_TOKENIZER_BPE && tok->split != TG_TOKENIZER_SPLIT_GPT2)
        return tg_fail(TG_ERR_MISMATCH,
                       "this run's BPE tokenizer (a tokenizer file of version 1) cuts text into chunks by tapegrad's "
                       "first rule, which no Hugging Face or llama.cpp pre-tokenizer reproduces, so no tokenizer.json "
                       "or GGUF would encode text as it does; train a new run (its BPE uses the GPT-2 split), or export "
                       "the weights alone as `safetensors`");
    /* JSON text is UTF-8 and GGUF's strings are read as C strings: an added token's own text,
     * which is written as it is, must be both (the importer refuses any other) */
    for (int32_t k = 0; k < tok->n_added; k++) {
        size_t len;
        const uint8_t *b = tg_tokenizer_token_bytes(tok, tok->added[k].id, &len);
        for (size_t i = 0; i < len;) {
            uint32_t cp;
            i += tg_utf8_next(b + i, len - i, &cp);
            if (cp == TG_UTF8_INVALID || cp == 0)
                return tg_fail(TG_ERR_MISMATCH, "added token %" PRId32 " holds %s, which no tokenizer.json or GGUF can hold",
                               tok->added[k].id, cp ? "bytes that are not UTF-8" : "a NUL byte");
        }
    }
    return TG_OK;
}

/* Whether added token id is spelled, in its own text, like another id's vocabulary string:
 * it is then left out of model.vocab (added_tokens names it), which would hold the key twice. */
static bool added_text_taken(const TgTokenizer *tok, int32_t id) {
    if (!tok->index) return false; /* tapegrad's own: <eot>'s text is no chunk's */
    size_t len;
    const uint8_t *b = tg_tokenizer_token_bytes(tok, id, &len);
    uint8_t *bytes = tg_malloc(len + 1);
    size_t n;
    bool spelled = tg_tokenizer_hf_bytes_of_text((const char *)b, len, bytes, &n);
    int32_t other = spelled ? tg_token_index_find(tok->index, tok, bytes, n) : -1;
    bool special;
    free(bytes);
    return other >= 0 && other != id && !tg_tokenizer_hf_is_added(tok, other, &special);
}

static void write_added(FILE *f, const TgTokenizer *tok) {
    fputs("  \"added_tokens\": [", f);
    int written = 0;
    for (int32_t id = 0; id < tok->vocab_size; id++) {
        bool special;
        if (!tg_tokenizer_hf_is_added(tok, id, &special)) continue;
        char *text = tg_tokenizer_hf_token_text(tok, id);
        fprintf(f, "%s\n    {\"id\": %" PRId32 ", \"content\": ", written++ ? "," : "", id);
        tg_json_write_string(f, text);
        fprintf(f, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": %s}",
                special ? "true" : "false");
        free(text);
    }
    fputs("\n  ],\n", f);
}

static void write_model(FILE *f, const TgTokenizer *tok) {
    fprintf(f, "  \"model\": {\n    \"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null,\n"
               "    \"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": %s,\n"
               "    \"vocab\": {",
            tok->ignore_merges ? "true" : "false");
    bool first = true, special;
    for (int32_t id = 0; id < tok->vocab_size; id++) {
        if (tg_tokenizer_hf_is_added(tok, id, &special) && added_text_taken(tok, id)) continue;
        char *text = tg_tokenizer_hf_token_text(tok, id);
        fputs(first ? "\n      " : ",\n      ", f);
        first = false;
        tg_json_write_string(f, text);
        fprintf(f, ": %" PRId32, id);
        free(text);
    }
    /* the operands as vocabulary strings, also an added token's: its own text may not spell its bytes */
    fputs("\n    },\n    \"merges\": [", f);
    for (int32_t i = 0; i < tok->n_merges; i++) {
        size_t la, lb;
        const uint8_t *ba = tg_tokenizer_token_bytes(tok, tok->merges[i].left, &la);
        const uint8_t *bb = tg_tokenizer_token_bytes(tok, tok->merges[i].right, &lb);
        char *a = mapped_text(ba, la), *b = mapped_text(bb, lb);
        size_t ta = strlen(a), tb = strlen(b);
        char *pair = tg_malloc(ta + tb + 2);
        snprintf(pair, ta + tb + 2, "%s %s", a, b);
        fputs(i ? ",\n      " : "\n      ", f);
        tg_json_write_string(f, pair);
        free(a), free(b), free(pair);
    }
    fputs("\n    ]\n  }\n}\n", f);
}

/* The tokenizer_config.json that gives a framing tokenizer its BOS and EOS back when it is read. */
static TgStatus save_config(const TgTokenizer *tok, const char *json_path) {
    char folder[TG_PATH_CAP], path[TG_PATH_CAP];
    tg_path_folder(json_path, folder, sizeof folder);
    TG_TRY(tg_path_join(path, sizeof path, folder, TG_TOKENIZER_HF_CONFIG_FILE));
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    FILE *f = tg_atomic_file_stream(&af);
    char *bos = tg_tokenizer_hf_token_text(tok, tok->bos_id), *eos = tg_tokenizer_hf_token_text(tok, tok->eot_id);
    fputs("{\n  \"bos_token\": ", f);
    tg_json_write_string(f, bos);
    fputs(",\n  \"eos_token\": ", f);
    tg_json_write_string(f, eos);
    fputs("\n}\n", f);
    free(bos), free(eos);
    return tg_atomic_file_commit(&af);
}

TgStatus tg_tokenizer_hf_save(const TgTokenizer *tok, const char *path) {
    TG_TRY(tg_tokenizer_hf_check_exportable(tok));
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    FILE *f = tg_atomic_file_stream(&af);
    fputs("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n", f);
    write_added(f, tok);
    fputs("  \"normalizer\": null,\n"
          "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n"
          "  \"post_processor\": null,\n"
          "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n",
          f);
    write_model(f, tok);
    TG_TRY(tg_atomic_file_commit(&af));
    return tok->has_bos ? save_config(tok, path) : TG_OK;
}
