/* tokenizer.json in and out (see tokenizer_hf.h). */
#include "data/tokenizer_hf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/tokenizer_internal.h"
#include "data/unicode_class.h"
#include "lib/atomic_file.h"
#include "lib/file_read.h"

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

/* The bytes a vocabulary string stands for, into out (room for strlen(s) bytes): false when a
 * character is outside the map. */
static bool bytes_of_text(const char *s, uint8_t *out, size_t *n) {
    size_t len = strlen(s);
    *n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += utf8_next((const unsigned char *)s + i, len - i, &cp);
        int b = char_byte(cp);
        if (b < 0) return false;
        out[(*n)++] = (uint8_t)b;
    }
    return true;
}

bool tokenizer_hf_is_added(const TgTokenizer *tok, int32_t id, bool *special) {
    *special = true;
    if (id == tok->eot_id) return true;
    for (int32_t k = 0; k < tok->n_added; k++)
        if (tok->added[k].id == id) {
            *special = tok->added[k].special;
            return true;
        }
    return false;
}

char *tokenizer_hf_token_text(const TgTokenizer *tok, int32_t id) {
    size_t len;
    const uint8_t *b = tg_tokenizer_token_bytes(tok, id, &len);
    bool special;
    if (tokenizer_hf_is_added(tok, id, &special)) {
        if (len == 0) { /* a char tokenizer's <eot> */
            b = (const uint8_t *)TG_TOKENIZER_EOT_TEXT;
            len = strlen(TG_TOKENIZER_EOT_TEXT);
        }
        char *text = tg_malloc(len + 1);
        memcpy(text, b, len);
        text[len] = '\0';
        return text;
    }
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

/* ---- reading ------------------------------------------------------------------------------ */

static bool is_null_or_absent(const cJSON *item) { return !item || cJSON_IsNull(item); }
static bool is_false_or_absent(const cJSON *item) { return !item || cJSON_IsNull(item) || cJSON_IsFalse(item); }

/* The id of a JSON number: an integer in [0, TOKENIZER_HF_MAX_IDS), or -1. */
static int32_t json_id(const cJSON *item) {
    if (!cJSON_IsNumber(item)) return -1;
    double v = item->valuedouble;
    return v >= 0 && v < TOKENIZER_HF_MAX_IDS && v == floor(v) ? (int32_t)v : -1;
}

/* Everything around the vocabulary: what tapegrad does not implement is refused, by name. */
static TgStatus check_pipeline(const cJSON *root, const char *path) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsObject(model) || (type && !(cJSON_IsString(type) && strcmp(type->valuestring, "BPE") == 0)))
        return tg_fail(TG_ERR_FORMAT, "%s: model is not a BPE model (tapegrad imports byte-level BPE tokenizers)", path);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (!is_null_or_absent(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return tg_fail(TG_ERR_FORMAT, "%s: model.dropout is set; tapegrad encodes without BPE dropout", path);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
        if (!is_null_or_absent(a) && !(cJSON_IsString(a) && a->valuestring[0] == '\0'))
            return tg_fail(TG_ERR_FORMAT, "%s: model.%s is set; a byte-level BPE has none", path, affixes[i]);
    }
    if (!is_false_or_absent(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")))
        return tg_fail(TG_ERR_FORMAT, "%s: model.byte_fallback is on: that is a SentencePiece-style BPE, not a byte-level one", path);
    if (!is_null_or_absent(cJSON_GetObjectItemCaseSensitive(root, "normalizer")))
        return tg_fail(TG_ERR_FORMAT, "%s: it has a normalizer; tapegrad imports tokenizers without one", path);
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *pre_type = cJSON_GetObjectItemCaseSensitive(pre, "type");
    if (!cJSON_IsString(pre_type) || strcmp(pre_type->valuestring, "ByteLevel") != 0)
        return tg_fail(TG_ERR_FORMAT, "%s: pre_tokenizer is %s, not ByteLevel; tapegrad imports ByteLevel BPE tokenizers",
                       path, cJSON_IsString(pre_type) ? pre_type->valuestring : "missing");
    if (!is_false_or_absent(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space")))
        return tg_fail(TG_ERR_FORMAT, "%s: pre_tokenizer.add_prefix_space is true; tapegrad imports it false only", path);
    const cJSON *regex = cJSON_GetObjectItemCaseSensitive(pre, "use_regex");
    if (regex && !cJSON_IsTrue(regex))
        return tg_fail(TG_ERR_FORMAT, "%s: pre_tokenizer.use_regex is off; tapegrad splits with the GPT-2 regex", path);
    return TG_OK;
}

/* Sets the bytes of every id: added tokens their content, vocabulary strings the bytes they
 * stand for. Fills token_offsets/token_bytes, vocab_size and byte_ids. */
static TgStatus load_tokens(const cJSON *vocab, const cJSON *added, const char *path, TgTokenizer *tok) {
    int32_t v = 0, n_vocab = cJSON_GetArraySize(vocab);
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) if (json_id(e) + 1 > v) v = json_id(e) + 1;
    cJSON_ArrayForEach(e, added) if (json_id(cJSON_GetObjectItemCaseSensitive(e, "id")) + 1 > v) v = json_id(cJSON_GetObjectItemCaseSensitive(e, "id")) + 1;
    if (n_vocab < 1 || n_vocab > TOKENIZER_HF_MAX_IDS)
        return tg_fail(TG_ERR_FORMAT, "%s: model.vocab holds %d tokens; tapegrad reads 1 to %d", path, n_vocab, TOKENIZER_HF_MAX_IDS);
    const cJSON **text_of = tg_calloc((size_t)v, sizeof *text_of); /* the JSON string naming each id */
    bool *is_added = tg_calloc((size_t)v, sizeof *is_added);
    TgStatus s = TG_OK;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = json_id(e);
        if (id < 0 || text_of[id]) {
            s = tg_fail(TG_ERR_FORMAT, "%s: model.vocab[\"%.40s\"] is not a new id below %d", path, e->string, TOKENIZER_HF_MAX_IDS);
            break;
        }
        text_of[id] = e;
    }
    cJSON_ArrayForEach(e, added) {
        if (s != TG_OK) break;
        int32_t id = json_id(cJSON_GetObjectItemCaseSensitive(e, "id"));
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (id < 0 || !cJSON_IsString(content) || !content->valuestring[0])
            s = tg_fail(TG_ERR_FORMAT, "%s: an added token lacks an id or a content", path);
        else {
            text_of[id] = content;
            is_added[id] = true;
        }
    }
    size_t total = 0;
    for (int32_t id = 0; s == TG_OK && id < v; id++) {
        if (!text_of[id]) s = tg_fail(TG_ERR_FORMAT, "%s: no token has id %" PRId32 " (ids must run from 0 without gaps)", path, id);
        else total += strlen(is_added[id] ? text_of[id]->valuestring : text_of[id]->string);
    }
    if (s == TG_OK) {
        tok->vocab_size = v;
        tok->token_offsets = tg_malloc(((size_t)v + 1) * sizeof *tok->token_offsets);
        tok->token_bytes = tg_malloc(total + 1);
        for (int b = 0; b < 256; b++) tok->byte_ids[b] = -1;
        tok->token_offsets[0] = 0;
    }
    for (int32_t id = 0; s == TG_OK && id < v; id++) {
        uint8_t *dst = tok->token_bytes + tok->token_offsets[id];
        size_t n;
        if (is_added[id]) {
            n = strlen(text_of[id]->valuestring);
            memcpy(dst, text_of[id]->valuestring, n);
        } else if (!bytes_of_text(text_of[id]->string, dst, &n)) {
            s = tg_fail(TG_ERR_FORMAT, "%s: vocabulary token \"%.40s\" (id %" PRId32 ") is not made of ByteLevel characters", path,
                        text_of[id]->string, id);
            break;
        } else if (n == 1 && tok->byte_ids[dst[0]] < 0) {
            tok->byte_ids[dst[0]] = id;
        }
        tok->token_offsets[id + 1] = tok->token_offsets[id] + (int64_t)n;
    }
    free(text_of);
    free(is_added);
    return s;
}

/* "a b" or ["a", "b"]: the two operand strings of a merge. */
static bool merge_operands(const cJSON *m, char *buf, size_t cap, const char **a, const char **b) {
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
        *a = m->child->valuestring;
        *b = m->child->next->valuestring;
        return true;
    }
    if (!cJSON_IsString(m) || strlen(m->valuestring) >= cap) return false;
    strcpy(buf, m->valuestring);
    char *space = strchr(buf, ' ');
    if (!space || space == buf || !space[1] || strchr(space + 1, ' ')) return false;
    *space = '\0';
    *a = buf;
    *b = space + 1;
    return true;
}

/* The id of a merge operand or result, or -1. */
static int32_t id_of_text(const TgTokenizer *tok, const char *text, uint8_t *scratch) {
    size_t n;
    if (!bytes_of_text(text, scratch, &n)) return -1;
    return token_index_find(tok->index, tok, scratch, n);
}

static TgStatus load_merges(const cJSON *merges, const char *path, TgTokenizer *tok) {
    int n = cJSON_GetArraySize(merges);
    if (!cJSON_IsArray(merges) || n > TOKENIZER_HF_MAX_IDS)
        return tg_fail(TG_ERR_FORMAT, "%s: model.merges is not a list of at most %d merges", path, TOKENIZER_HF_MAX_IDS);
    int32_t a_id = -1, b_id = -1;
    tok->index = token_index_build(tok, &a_id, &b_id);
    if (!tok->index) return tg_fail(TG_ERR_FORMAT, "%s: ids %" PRId32 " and %" PRId32 " are the same token", path, a_id, b_id);
    tok->merges = tg_malloc(((size_t)n + 1) * sizeof *tok->merges);
    tok->merge_ids = tg_malloc(((size_t)n + 1) * sizeof *tok->merge_ids);
    size_t cap = 4096;
    char *buf = tg_malloc(cap), *joined = tg_malloc(2 * cap);
    uint8_t *scratch = tg_malloc(2 * cap);
    TgStatus s = TG_OK;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *a, *b;
        int32_t i = tok->n_merges;
        if (!merge_operands(m, buf, cap, &a, &b) || strlen(a) + strlen(b) >= cap) {
            s = tg_fail(TG_ERR_FORMAT, "%s: model.merges[%" PRId32 "] is not \"left right\" or [\"left\", \"right\"]", path, i);
            break;
        }
        snprintf(joined, 2 * cap, "%s%s", a, b);
        tok->merges[i] = (TgTokenPair){id_of_text(tok, a, scratch), id_of_text(tok, b, scratch)};
        tok->merge_ids[i] = id_of_text(tok, joined, scratch);
        if (tok->merges[i].left < 0 || tok->merges[i].right < 0 || tok->merge_ids[i] < 0) {
            s = tg_fail(TG_ERR_FORMAT, "%s: model.merges[%" PRId32 "] (\"%.40s\" + \"%.40s\") joins or makes a token not in the vocabulary",
                        path, i, a, b);
            break;
        }
        tok->n_merges++;
    }
    free(buf), free(joined), free(scratch);
    token_index_free(tok->index);
    tok->index = NULL;
    return s;
}

/* The added tokens, and <eot> among them. */
static TgStatus load_added(const cJSON *added, const char *path, TgTokenizer *tok) {
    int n = cJSON_GetArraySize(added);
    if (n > TOKENIZER_HF_MAX_ADDED)
        return tg_fail(TG_ERR_FORMAT, "%s: %d added tokens; tapegrad reads at most %d", path, n, TOKENIZER_HF_MAX_ADDED);
    tok->added = tg_malloc(((size_t)n + 1) * sizeof *tok->added);
    int32_t named_eot = -1, first_special = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, added) {
        static const char *const unsupported[] = {"lstrip", "rstrip", "single_word"};
        const char *content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "content"));
        for (int i = 0; i < 3; i++)
            if (!is_false_or_absent(cJSON_GetObjectItemCaseSensitive(e, unsupported[i])))
                return tg_fail(TG_ERR_FORMAT, "%s: added token \"%.40s\" sets %s; tapegrad matches added tokens exactly", path,
                               content, unsupported[i]);
        TgTokenizerAdded a = {json_id(cJSON_GetObjectItemCaseSensitive(e, "id")),
                            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special"))};
        tok->added[tok->n_added++] = a;
        if (a.special && strcmp(content, TG_TOKENIZER_EOT_TEXT) == 0) named_eot = a.id;
        if (a.special && first_special < 0) first_special = a.id;
    }
    tok->eot_id = named_eot >= 0 ? named_eot : first_special;
    if (tok->eot_id < 0)
        return tg_fail(TG_ERR_FORMAT, "%s: no special added token (such as \"%s\") to end a text with", path, TG_TOKENIZER_EOT_TEXT);
    return TG_OK;
}

static TgStatus load_json(const cJSON *root, const char *path, TgTokenizer *tok) {
    if (!cJSON_IsObject(root)) return tg_fail(TG_ERR_FORMAT, "%s is not a tokenizer.json: not a JSON object", path);
    TG_TRY(check_pipeline(root, path));
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab)) return tg_fail(TG_ERR_FORMAT, "%s: model.vocab is not an object", path);
    if (added && !cJSON_IsArray(added)) return tg_fail(TG_ERR_FORMAT, "%s: added_tokens is not a list", path);
    tok->kind = TG_TOKENIZER_BPE;
    tok->split = TG_TOKENIZER_SPLIT_GPT2;
    tok->hf = true;
    tok->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    TG_TRY(load_tokens(vocab, added, path, tok));
    TG_TRY(load_merges(cJSON_GetObjectItemCaseSensitive(model, "merges"), path, tok));
    TG_TRY(load_added(added, path, tok));
    return tokenizer_finish(tok, path);
}

TgStatus tokenizer_hf_load(const char *path, TgTokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    char *text = NULL;
    size_t len = 0;
    TgStatus read = file_read_all(path, TOKENIZER_HF_MAX_BYTES, &text, &len);
    if (read != TG_OK) return tg_fail_context(read, "%s", path);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root) return tg_fail(TG_ERR_FORMAT, "%s is not valid JSON", path);
    TgStatus s = load_json(root, path, tok);
    cJSON_Delete(root);
    if (s != TG_OK) tg_tokenizer_free(tok);
    return s;
}

/* ---- writing ------------------------------------------------------------------------------ */

TgStatus tokenizer_hf_check_exportable(const TgTokenizer *tok) {
    if (tok->kind == TG_TOKENIZER_BPE && tok->split != TG_TOKENIZER_SPLIT_GPT2)
        return tg_fail(TG_ERR_MISMATCH,
                       "this run's BPE tokenizer (a tokenizer file of version 1) cuts text into chunks by tapegrad's "
                       "first rule, which no Hugging Face or llama.cpp pre-tokenizer reproduces, so no tokenizer.json "
                       "or GGUF would encode text as it does; train a new run (its BPE uses the GPT-2 split), or export "
                       "the weights alone with --safetensors");
    return TG_OK;
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void write_added(FILE *f, const TgTokenizer *tok) {
    fputs("  \"added_tokens\": [", f);
    int written = 0;
    for (int32_t id = 0; id < tok->vocab_size; id++) {
        bool special;
        if (!tokenizer_hf_is_added(tok, id, &special)) continue;
        char *text = tokenizer_hf_token_text(tok, id);
        fprintf(f, "%s\n    {\"id\": %" PRId32 ", \"content\": ", written++ ? "," : "", id);
        json_string(f, text);
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
    for (int32_t id = 0; id < tok->vocab_size; id++) {
        char *text = tokenizer_hf_token_text(tok, id);
        fputs(id ? ",\n      " : "\n      ", f);
        json_string(f, text);
        fprintf(f, ": %" PRId32, id);
        free(text);
    }
    fputs("\n    },\n    \"merges\": [", f);
    for (int32_t i = 0; i < tok->n_merges; i++) {
        char *a = tokenizer_hf_token_text(tok, tok->merges[i].left), *b = tokenizer_hf_token_text(tok, tok->merges[i].right);
        size_t la = strlen(a), lb = strlen(b);
        char *pair = tg_malloc(la + lb + 2);
        snprintf(pair, la + lb + 2, "%s %s", a, b);
        fputs(i ? ",\n      " : "\n      ", f);
        json_string(f, pair);
        free(a), free(b), free(pair);
    }
    fputs("\n    ]\n  }\n}\n", f);
}

TgStatus tokenizer_hf_save(const TgTokenizer *tok, const char *path) {
    TG_TRY(tokenizer_hf_check_exportable(tok));
    AtomicFile af;
    TG_TRY(atomic_file_open(&af, path));
    FILE *f = atomic_file_stream(&af);
    fputs("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n", f);
    write_added(f, tok);
    fputs("  \"normalizer\": null,\n"
          "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n"
          "  \"post_processor\": null,\n"
          "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n",
          f);
    write_model(f, tok);
    return atomic_file_commit(&af);
}
