/* The tokenizer interface common to both kinds: validation, the token table, encode/decode
 * dispatch, the fingerprint, and the text file format (see tokenizer.h). */
#include "tapegrad/tokenizer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/atomic_file.h"
#include "tokenizer/tokenizer_hf.h"
#include "lib/file_read.h"
#include "tapegrad/limits.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode_class.h"
#include "lib/path.h"

static const char MAGIC[] = "tapegrad-tokenizer";

const char *tg_tokenizer_kind_name(TgTokenizerKind kind) {
    switch (kind) {
    case TG_TOKENIZER_CHAR: return "char";
    case TG_TOKENIZER_BPE: return "bpe";
    case TG_TOKENIZER_NONE: break;
    }
    return "none";
}

void tg_tokenizer_free(TgTokenizer *tok) {
    if (!tok) return;
    free(tok->merges);
    free(tok->merge_ids);
    free(tok->added);
    free(tok->token_offsets);
    free(tok->token_bytes);
    tg_bpe_rank_map_free(tok->ranks);
    tg_token_index_free(tok->index);
    tg_added_matcher_free(tok->matcher);
    tg_tokenizer_specials_free(tok->specials, tok->n_specials);
    memset(tok, 0, sizeof *tok);
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
        TgStatus st = tg_tokenizer_special_check(p, len, "--special-tokens");
        if (st == TG_OK && len == strlen(TG_TOKENIZER_EOT_TEXT) && memcmp(p, TG_TOKENIZER_EOT_TEXT, len) == 0) {
            /* <eot> is always there (id 256) */
        } else if (st == TG_OK) {
            for (int32_t i = 0; i < n && st == TG_OK; i++)
                if (strlen(names[i]) == len && memcmp(names[i], p, len) == 0)
                    st = tg_fail(TG_ERR_ARG, "--special-tokens names %s twice", names[i]);
            if (st == TG_OK && n == TG_TOKENIZER_MAX_SPECIALS)
                st = tg_fail(TG_ERR_ARG, "--special-tokens: at most %d names", TG_TOKENIZER_MAX_SPECIALS);
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

/* FNV-1a over a canonical little-endian serialisation of what decides the encoding. */
static uint64_t fnv_u32(uint64_t h, uint32_t v) {
    for (int i = 0; i < 4; i++) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* What an imported tokenizer adds: every token's bytes, the merge results, the added tokens. */
static uint64_t fingerprint_imported(const TgTokenizer *tok, uint64_t h) {
    h = fnv_u32(h, 0x68660000u | (tok->ignore_merges ? 1u : 0u)); /* "hf" */
    for (int32_t id = 0; id < tok->vocab_size; id++) {
        h = fnv_u32(h, (uint32_t)(tok->token_offsets[id + 1] - tok->token_offsets[id]));
        for (int64_t i = tok->token_offsets[id]; i < tok->token_offsets[id + 1]; i++) h = fnv_u32(h, tok->token_bytes[i]);
    }
    for (int32_t i = 0; i < tok->n_merges; i++) h = fnv_u32(h, (uint32_t)tok->merge_ids[i]);
    h = fnv_u32(h, (uint32_t)tok->n_added);
    for (int32_t k = 0; k < tok->n_added; k++) h = fnv_u32(h, (uint32_t)tok->added[k].id * 2u + tok->added[k].special);
    return h;
}

static uint64_t compute_fingerprint(const TgTokenizer *tok) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *p = MAGIC; *p; p++) {
        h ^= (unsigned char)*p;
        h *= 0x100000001b3ULL;
    }
    h = fnv_u32(h, (uint32_t)tok->kind);
    h = fnv_u32(h, (uint32_t)tok->vocab_size);
    h = fnv_u32(h, (uint32_t)tok->eot_id);
    if (tok->kind == TG_TOKENIZER_CHAR) {
        h = fnv_u32(h, (uint32_t)tok->n_chars);
        for (int32_t i = 0; i < tok->n_chars; i++) h = fnv_u32(h, tok->chars[i]);
    } else {
        h = fnv_u32(h, (uint32_t)tok->n_merges);
        for (int32_t i = 0; i < tok->n_merges; i++) {
            h = fnv_u32(h, (uint32_t)tok->merges[i].left);
            h = fnv_u32(h, (uint32_t)tok->merges[i].right);
        }
        /* version-1 tokenizers end here, so their recorded fingerprints stay valid */
        if (tok->split != TG_TOKENIZER_SPLIT_TAPEGRAD) h = fnv_u32(h, (uint32_t)tok->split);
        /* and version 2 here */
        if (tok->n_specials > 0) {
            h = fnv_u32(h, 0x73700000u | (uint32_t)tok->n_specials); /* "sp" */
            for (int32_t i = 0; i < tok->n_specials; i++) {
                size_t len = strlen(tok->specials[i]);
                h = fnv_u32(h, (uint32_t)len);
                for (size_t j = 0; j < len; j++) h = fnv_u32(h, (unsigned char)tok->specials[i][j]);
            }
        }
        if (tok->hf) h = fingerprint_imported(tok, h);
    }
    return h ? h : 1;
}

uint64_t tg_tokenizer_fingerprint(const TgTokenizer *tok) { return tok->fingerprint; }

static TgStatus validate_char(TgTokenizer *tok, const char *origin) {
    if (tok->n_chars < 1 || tok->n_chars > 256)
        return tg_fail(TG_ERR_FORMAT, "%s: a char tokenizer has 1 to 256 chars, not %" PRId32,
                       origin, tok->n_chars);
    if (tok->vocab_size != tok->n_chars + 1 || tok->eot_id != tok->n_chars)
        return tg_fail(TG_ERR_FORMAT,
                       "%s: a char tokenizer with %" PRId32 " chars has vocab_size %" PRId32
                       " and eot_id %" PRId32 ", not %" PRId32 " and %" PRId32,
                       origin, tok->n_chars, tok->n_chars + 1, tok->n_chars, tok->vocab_size,
                       tok->eot_id);
    for (int i = 0; i < 256; i++) tok->id_of_byte[i] = -1;
    for (int32_t i = 0; i < tok->n_chars; i++) {
        if (i > 0 && tok->chars[i] <= tok->chars[i - 1])
            return tg_fail(TG_ERR_FORMAT,
                           "%s: char bytes must be strictly ascending, but char %" PRId32
                           " (%u) follows %u",
                           origin, i, tok->chars[i], tok->chars[i - 1]);
        tok->id_of_byte[tok->chars[i]] = i;
    }
    return TG_OK;
}

static int64_t token_len(const TgTokenizer *tok, int32_t id) {
    return tok->token_offsets[id + 1] - tok->token_offsets[id];
}

/* Builds token_offsets/token_bytes; for BPE also checks each merge against the ids before it. */
static TgStatus build_token_table(TgTokenizer *tok, const char *origin) {
    int32_t v = tok->vocab_size;
    tok->token_offsets = tg_malloc(((size_t)v + 1) * sizeof *tok->token_offsets);
    if (tok->kind == TG_TOKENIZER_CHAR) {
        tok->token_bytes = tg_malloc((size_t)tok->n_chars);
        for (int32_t i = 0; i <= tok->n_chars; i++) tok->token_offsets[i] = i;
        memcpy(tok->token_bytes, tok->chars, (size_t)tok->n_chars);
        tok->token_offsets[v] = tok->n_chars; /* <eot> is empty */
        return TG_OK;
    }
    /* BPE: lengths first (validating), then the bytes. <eot> has its text with the GPT-2 split
     * (where the text means <eot>), none otherwise; the named specials their names. */
    const char *eot_text = tok->split == TG_TOKENIZER_SPLIT_GPT2 ? TG_TOKENIZER_EOT_TEXT : "";
    const int64_t eot_len = (int64_t)strlen(eot_text);
    const int32_t first_merge = tokenizer_first_merge(tok);
    tok->token_offsets[0] = 0;
    for (int32_t id = 0; id < TG_TOKENIZER_BPE_BASE; id++) tok->token_offsets[id + 1] = id + 1;
    tok->token_offsets[TG_TOKENIZER_BPE_EOT + 1] = TG_TOKENIZER_BPE_BASE + eot_len;
    for (int32_t k = 0; k < tok->n_specials; k++) {
        int32_t id = TG_TOKENIZER_BPE_FIRST_MERGE + k;
        tok->token_offsets[id + 1] = tok->token_offsets[id] + (int64_t)strlen(tok->specials[k]);
    }
    for (int32_t i = 0; i < tok->n_merges; i++) {
        int32_t id = first_merge + i;
        TgTokenPair p = tok->merges[i];
        if (p.left < 0 || p.left >= id || p.right < 0 || p.right >= id ||
            (p.left >= TG_TOKENIZER_BPE_EOT && p.left < first_merge) ||
            (p.right >= TG_TOKENIZER_BPE_EOT && p.right < first_merge))
            return tg_fail(TG_ERR_FORMAT,
                           "%s: merge %" PRId32 " (%" PRId32 " %" PRId32 ") must join two ids "
                           "below its own id %" PRId32 ", neither of them <eot> (256) or a special token",
                           origin, i, p.left, p.right, id);
        int64_t len = token_len(tok, p.left) + token_len(tok, p.right);
        if (len > TG_TOKENIZER_MAX_CHUNK)
            return tg_fail(TG_ERR_FORMAT,
                           "%s: merge %" PRId32 " makes a %" PRId64 "-byte token, longer than "
                           "any chunk (%d bytes): the file is corrupt",
                           origin, i, len, TG_TOKENIZER_MAX_CHUNK);
        tok->token_offsets[id + 1] = tok->token_offsets[id] + len;
    }
    tok->token_bytes = tg_malloc((size_t)tok->token_offsets[v]);
    for (int32_t id = 0; id < TG_TOKENIZER_BPE_BASE; id++) tok->token_bytes[id] = (uint8_t)id;
    memcpy(tok->token_bytes + TG_TOKENIZER_BPE_BASE, eot_text, (size_t)eot_len);
    for (int32_t k = 0; k < tok->n_specials; k++) {
        int32_t id = TG_TOKENIZER_BPE_FIRST_MERGE + k;
        memcpy(tok->token_bytes + tok->token_offsets[id], tok->specials[k], (size_t)token_len(tok, id));
    }
    for (int32_t i = 0; i < tok->n_merges; i++) {
        int32_t id = first_merge + i;
        TgTokenPair p = tok->merges[i];
        uint8_t *dst = tok->token_bytes + tok->token_offsets[id];
        size_t ll = (size_t)token_len(tok, p.left), rl = (size_t)token_len(tok, p.right);
        memcpy(dst, tok->token_bytes + tok->token_offsets[p.left], ll);
        memcpy(dst + ll, tok->token_bytes + tok->token_offsets[p.right], rl);
    }
    return TG_OK;
}

/* An imported tokenizer's token table against its byte ids, merges and added tokens. */
static TgStatus validate_imported(const TgTokenizer *tok, const char *origin) {
    int32_t v = tok->vocab_size;
    for (int b = 0; b < 256; b++) {
        size_t len;
        int32_t id = tok->byte_ids[b];
        if (id < 0 || id >= v || *tg_tokenizer_token_bytes(tok, id, &len) != b || len != 1)
            return tg_fail(TG_ERR_FORMAT, "%s: byte 0x%02x has no token of its own (a byte-level BPE has all 256)", origin, b);
    }
    for (int32_t i = 0; i < tok->n_merges; i++) {
        TgTokenPair p = tok->merges[i];
        int32_t id = tok->merge_ids[i];
        if (p.left < 0 || p.left >= v || p.right < 0 || p.right >= v || id < 0 || id >= v ||
            token_len(tok, id) != token_len(tok, p.left) + token_len(tok, p.right))
            return tg_fail(TG_ERR_FORMAT, "%s: merge %" PRId32 " does not make its token", origin, i);
        const uint8_t *t = tok->token_bytes + tok->token_offsets[id];
        size_t ll = (size_t)token_len(tok, p.left);
        if (memcmp(t, tok->token_bytes + tok->token_offsets[p.left], ll) != 0 ||
            memcmp(t + ll, tok->token_bytes + tok->token_offsets[p.right], (size_t)token_len(tok, p.right)) != 0)
            return tg_fail(TG_ERR_FORMAT, "%s: merge %" PRId32 " does not make its token", origin, i);
    }
    bool eot_is_special = false;
    for (int32_t k = 0; k < tok->n_added; k++) {
        int32_t id = tok->added[k].id;
        if (id < 0 || id >= v || token_len(tok, id) == 0)
            return tg_fail(TG_ERR_FORMAT, "%s: added token %" PRId32 " is empty or out of range", origin, k);
        eot_is_special |= id == tok->eot_id && tok->added[k].special;
    }
    if (!eot_is_special)
        return tg_fail(TG_ERR_FORMAT, "%s: the end-of-text id %" PRId32 " is not a special added token", origin, tok->eot_id);
    return TG_OK;
}

/* tapegrad's own BPE: ids 0..255 the bytes, 256 <eot> (matched in text with the GPT-2 split), then
 * the named specials (matched too), then the merges. */
static TgStatus validate_own_bpe(TgTokenizer *tok, const char *origin) {
    if (tok->n_specials < 0 || tok->n_specials > TG_TOKENIZER_MAX_SPECIALS ||
        (tok->n_specials > 0 && tok->split != TG_TOKENIZER_SPLIT_GPT2))
        return tg_fail(TG_ERR_FORMAT, "%s: %" PRId32 " special tokens (at most %d, with the GPT-2 split only)", origin,
                       tok->n_specials, TG_TOKENIZER_MAX_SPECIALS);
    const int32_t first_merge = tokenizer_first_merge(tok);
    if (tok->n_merges < 0 || tok->vocab_size != first_merge + tok->n_merges || tok->eot_id != TG_TOKENIZER_BPE_EOT)
        return tg_fail(TG_ERR_FORMAT,
                       "%s: a BPE tokenizer with %" PRId32 " merges and %" PRId32 " special tokens has vocab_size %" PRId64
                       " and eot_id %d, not %" PRId32 " and %" PRId32,
                       origin, tok->n_merges, tok->n_specials, (int64_t)first_merge + tok->n_merges,
                       TG_TOKENIZER_BPE_EOT, tok->vocab_size, tok->eot_id);
    for (int32_t k = 0; k < tok->n_specials; k++) {
        const char *name = tok->specials[k];
        size_t len = strlen(name);
        TgStatus st = tg_tokenizer_special_check(name, len, origin);
        if (st != TG_OK) return tg_fail(TG_ERR_FORMAT, "%s", tg_error_message());
        bool repeated = strcmp(name, TG_TOKENIZER_EOT_TEXT) == 0;
        for (int32_t j = 0; j < k && !repeated; j++) repeated = strcmp(name, tok->specials[j]) == 0;
        if (repeated) return tg_fail(TG_ERR_FORMAT, "%s: special token %s is named twice", origin, name);
    }
    for (int b = 0; b < 256; b++) tok->byte_ids[b] = b;
    if (tok->split == TG_TOKENIZER_SPLIT_GPT2) {
        tok->added = tg_malloc((size_t)(1 + tok->n_specials) * sizeof *tok->added);
        tok->added[0] = (TgTokenizerAdded){TG_TOKENIZER_BPE_EOT, true};
        for (int32_t k = 0; k < tok->n_specials; k++)
            tok->added[1 + k] = (TgTokenizerAdded){TG_TOKENIZER_BPE_FIRST_MERGE + k, true};
        tok->n_added = 1 + tok->n_specials;
    }
    return build_token_table(tok, origin);
}

TgStatus tg_tokenizer_finish(TgTokenizer *tok, const char *origin) {
    if (tok->kind == TG_TOKENIZER_CHAR) {
        TG_TRY(validate_char(tok, origin));
        TG_TRY(build_token_table(tok, origin));
    } else if (tok->kind == TG_TOKENIZER_BPE && tok->hf) {
        TG_TRY(validate_imported(tok, origin));
        int32_t a = -1, b = -1;
        if (!tok->index) TG_TRY(tg_token_index_build(tok, &tok->index, &a, &b));
        if (!tok->index)
            return tg_fail(TG_ERR_FORMAT, "%s: ids %" PRId32 " and %" PRId32 " are the same token", origin, a, b);
    } else if (tok->kind == TG_TOKENIZER_BPE) {
        TG_TRY(validate_own_bpe(tok, origin));
    } else {
        return tg_fail(TG_ERR_FORMAT, "%s: unknown tokenizer kind %d", origin, (int)tok->kind);
    }
    if (tok->kind == TG_TOKENIZER_BPE) {
        int32_t dup = -1;
        TG_TRY(tg_bpe_rank_map_build(tok->merges, tok->n_merges, &tok->ranks, &dup));
        if (!tok->ranks)
            return tg_fail(TG_ERR_FORMAT,
                           "%s: merge %" PRId32 " (%" PRId32 " %" PRId32 ") repeats an earlier "
                           "merge: the file is corrupt",
                           origin, dup, tok->merges[dup].left, tok->merges[dup].right);
    }
    TG_TRY(tg_added_matcher_build(tok, &tok->matcher));
    tok->fingerprint = compute_fingerprint(tok);
    return TG_OK;
}

size_t tg_tokenizer_max_ids(const TgTokenizer *tok, size_t len) { return tok->hf ? 3 * len : len; }

TgStatus tg_tokenizer_encode(const TgTokenizer *tok, const char *text, size_t len, int32_t *out,
                           size_t out_cap, size_t *n_out) {
    return tg_tokenizer_encode_cached(tok, text, len, out, out_cap, n_out, NULL);
}

TgStatus tg_tokenizer_encode_cached(const TgTokenizer *tok, const char *text, size_t len, int32_t *out, size_t out_cap,
                                 size_t *n_out, TgChunkCache *cache) {
    TG_CHECK(tok->kind == TG_TOKENIZER_CHAR || tok->kind == TG_TOKENIZER_BPE, "encode with an empty tokenizer");
    TG_CHECK(out_cap >= tg_tokenizer_max_ids(tok, len), "encode needs room for %zu ids, not %zu",
             tg_tokenizer_max_ids(tok, len), out_cap);
    *n_out = 0;
    if (len == 0) return TG_OK;
    const unsigned char *bytes = (const unsigned char *)text;
    if (tok->kind == TG_TOKENIZER_CHAR) return tg_tokenizer_char_encode(tok, bytes, len, out, n_out);
    tg_tokenizer_bpe_encode(tok, bytes, len, out, n_out, cache);
    return TG_OK;
}

const uint8_t *tg_tokenizer_token_bytes(const TgTokenizer *tok, int32_t id, size_t *len) {
    TG_CHECK(id >= 0 && id < tok->vocab_size, "token id %d outside [0, %d)", (int)id, (int)tok->vocab_size);
    *len = (size_t)token_len(tok, id);
    return tok->token_bytes + tok->token_offsets[id];
}

/* <eot> marks where a text ends; it is not part of any text */
static size_t decoded_len(const TgTokenizer *tok, int32_t id) {
    return id == tok->eot_id ? 0 : (size_t)token_len(tok, id);
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

/* ---- saving ---------------------------------------------------------------------------- */

static void write_escaped(FILE *f, const uint8_t *b, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = b[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c >= 0x20 && c < 0x7f) fputc(c, f);
        else fprintf(f, "\\x%02x", c);
    }
    fputc('"', f);
}

/* The sizes and the char table or the merges of a tokenizer file. */
static void save_entries(FILE *f, const TgTokenizer *tok) {
    fprintf(f, "vocab_size %" PRId32 "\neot_id %" PRId32 "\n", tok->vocab_size, tok->eot_id);
    if (tok->n_specials > 0) {
        fprintf(f, "special_tokens %" PRId32 "\n", tok->n_specials);
        for (int32_t k = 0; k < tok->n_specials; k++) fprintf(f, "%s\n", tok->specials[k]);
    }
    if (tok->kind == TG_TOKENIZER_CHAR) {
        fprintf(f, "chars %" PRId32 "\n", tok->n_chars);
        for (int32_t i = 0; i < tok->n_chars; i++) {
            fprintf(f, "%u\t# ", tok->chars[i]);
            write_escaped(f, &tok->chars[i], 1);
            fputc('\n', f);
        }
        return;
    }
    fprintf(f, "merges %" PRId32 "\n", tok->n_merges);
    for (int32_t i = 0; i < tok->n_merges; i++) {
        size_t l;
        const uint8_t *b = tg_tokenizer_token_bytes(tok, tokenizer_first_merge(tok) + i, &l);
        fprintf(f, "%" PRId32 " %" PRId32 "\t# ", tok->merges[i].left, tok->merges[i].right);
        write_escaped(f, b, l);
        fputc('\n', f);
    }
}

TgStatus tg_tokenizer_save(const TgTokenizer *tok, const char *path) {
    TG_CHECK(tok->kind == TG_TOKENIZER_CHAR || tok->kind == TG_TOKENIZER_BPE, "saving an empty tokenizer");
    bool gpt2 = tok->kind == TG_TOKENIZER_BPE && tok->split == TG_TOKENIZER_SPLIT_GPT2;
    if (tok->hf) {
        char folder[TG_PATH_CAP], json[TG_PATH_CAP];
        tg_path_folder(path, folder, sizeof folder);
        TG_TRY(tg_path_join(json, sizeof json, folder, TG_TOKENIZER_HF_FILE));
        TG_TRY(tg_tokenizer_hf_save(tok, json));
    }
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    FILE *f = tg_atomic_file_stream(&af);
    int version = tok->n_specials > 0 ? TG_TOKENIZER_FILE_VERSION : gpt2 ? 2 : 1;
    fprintf(f, "%s %d\nkind %s\n", MAGIC, version, tg_tokenizer_kind_name(tok->kind));
    if (gpt2) fputs("split gpt2\n", f);
    if (tok->hf) fprintf(f, "file %s\n", TG_TOKENIZER_HF_FILE);
    else save_entries(f, tok);
    fprintf(f, "fingerprint %016" PRIx64 "\n", tok->fingerprint);
    TgStatus st = tg_atomic_file_commit(&af);
    if (st != TG_OK) return tg_fail_context(st, "saving tokenizer");
    return TG_OK;
}

/* ---- loading --------------------------------------------------------------------------- */

typedef struct {
    FILE *f;
    const char *path;
    char *line;
    size_t cap;
    int64_t lineno;
} LineReader;

/* Reads the next line without its newline; false at end of file. */
static bool next_line(LineReader *r) {
    ssize_t n = getline(&r->line, &r->cap, r->f);
    if (n < 0) return false;
    r->lineno++;
    while (n > 0 && (r->line[n - 1] == '\n' || r->line[n - 1] == '\r')) r->line[--n] = '\0';
    return true;
}

static TgStatus need_line(LineReader *r, const char *what) {
    if (next_line(r)) return TG_OK;
    return tg_fail(TG_ERR_FORMAT,
                   "tokenizer file %s is truncated: it ends after line %" PRId64 " where %s "
                   "should follow; save the tokenizer again (tapegrad prepare)",
                   r->path, r->lineno, what);
}

/* Parses up to `count` integers from s, then allows only blanks or a '#' comment. */
static bool parse_ints(const char *s, int64_t *vals, int count) {
    for (int i = 0; i < count; i++) {
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || errno) return false;
        vals[i] = v;
        s = end;
    }
    while (*s == ' ' || *s == '\t') s++;
    return *s == '\0' || *s == '#';
}

/* "key N" with lo <= N <= hi, on the line just read. */
static TgStatus parse_field_here(LineReader *r, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    size_t kl = strlen(key);
    if (strncmp(r->line, key, kl) != 0 || (r->line[kl] != ' ' && r->line[kl] != '\t') ||
        !parse_ints(r->line + kl, out, 1))
        return tg_fail(TG_ERR_FORMAT, "tokenizer file %s, line %" PRId64 ": expected \"%s N\", found \"%.80s\"",
                       r->path, r->lineno, key, r->line);
    if (*out < lo || *out > hi)
        return tg_fail(TG_ERR_FORMAT,
                       "tokenizer file %s, line %" PRId64 ": %s %" PRId64 " is outside [%" PRId64
                       ", %" PRId64 "]",
                       r->path, r->lineno, key, *out, lo, hi);
    return TG_OK;
}

/* "key N" with lo <= N <= hi, on the next line. */
static TgStatus parse_field(LineReader *r, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    TG_TRY(need_line(r, key));
    return parse_field_here(r, key, lo, hi, out);
}

/* The char table or the merges of a tokenizer file. */
/* "special_tokens K" and K names (version 3). */
static TgStatus load_specials(LineReader *r, TgTokenizer *tok) {
    int64_t count;
    TG_TRY(parse_field(r, "special_tokens", 1, TG_TOKENIZER_MAX_SPECIALS, &count));
    tok->specials = tg_calloc((size_t)count, sizeof *tok->specials);
    for (int64_t k = 0; k < count; k++) {
        TG_TRY(need_line(r, "a special token"));
        size_t len = strlen(r->line);
        char origin[TG_PATH_CAP + 48];
        snprintf(origin, sizeof origin, "tokenizer file %s, line %" PRId64, r->path, r->lineno);
        if (tg_tokenizer_special_check(r->line, len, origin) != TG_OK) return tg_fail(TG_ERR_FORMAT, "%s", tg_error_message());
        tok->specials[k] = strdup(r->line);
        tok->n_specials = (int32_t)(k + 1);
    }
    return TG_OK;
}

static TgStatus load_entries(LineReader *r, TgTokenizer *tok, int64_t vocab, int64_t version) {
    int64_t count;
    if (tok->kind == TG_TOKENIZER_CHAR) {
        TG_TRY(parse_field(r, "chars", 1, 256, &count));
        tok->n_chars = (int32_t)count;
        for (int64_t i = 0; i < count; i++) {
            int64_t b;
            TG_TRY(need_line(r, "a char byte"));
            if (!parse_ints(r->line, &b, 1) || b < 0 || b > 255)
                return tg_fail(TG_ERR_FORMAT,
                               "tokenizer file %s, line %" PRId64 ": expected a byte value 0..255, "
                               "found \"%.60s\"",
                               r->path, r->lineno, r->line);
            tok->chars[i] = (uint8_t)b;
        }
        return TG_OK;
    }
    if (vocab < TG_TOKENIZER_BPE_FIRST_MERGE)
        return tg_fail(TG_ERR_FORMAT,
                       "tokenizer file %s: a BPE vocab_size is at least %d, not %" PRId64,
                       r->path, TG_TOKENIZER_BPE_FIRST_MERGE, vocab);
    if (version >= 3) TG_TRY(load_specials(r, tok));
    int64_t first_merge = TG_TOKENIZER_BPE_FIRST_MERGE + tok->n_specials;
    if (vocab < first_merge)
        return tg_fail(TG_ERR_FORMAT, "tokenizer file %s: vocab_size %" PRId64 " is below the %" PRId64 " ids of its bytes, <eot> and special tokens",
                       r->path, vocab, first_merge);
    TG_TRY(parse_field(r, "merges", vocab - first_merge, vocab - first_merge, &count));
    /* grown as lines arrive, so a corrupt count cannot ask for a huge block up front */
    int64_t cap = 0;
    for (int64_t i = 0; i < count; i++) {
        if (i == cap) {
            cap = cap ? 2 * cap : 1024;
            tok->merges = tg_realloc(tok->merges, (size_t)cap * sizeof *tok->merges);
        }
        int64_t lr[2];
        TG_TRY(need_line(r, "a merge line"));
        if (!parse_ints(r->line, lr, 2) || lr[0] < 0 || lr[1] < 0 || lr[0] > INT32_MAX ||
            lr[1] > INT32_MAX)
            return tg_fail(TG_ERR_FORMAT,
                           "tokenizer file %s, line %" PRId64 ": expected a merge \"left right\", "
                           "found \"%.60s\"",
                           r->path, r->lineno, r->line);
        tok->merges[i] = (TgTokenPair){(int32_t)lr[0], (int32_t)lr[1]};
        tok->n_merges = (int32_t)(i + 1);
    }
    return TG_OK;
}

/* "file NAME": an imported tokenizer's tokenizer.json, which must sit beside the file. */
static TgStatus load_imported(LineReader *r, TgTokenizer *tok) {
    const char *name = r->line + 5;
    if (strcmp(name, TG_TOKENIZER_HF_FILE) != 0)
        return tg_fail(TG_ERR_FORMAT, "tokenizer file %s, line %" PRId64 ": expected \"file %s\", found \"%.60s\"",
                       r->path, r->lineno, TG_TOKENIZER_HF_FILE, r->line);
    char folder[TG_PATH_CAP], json[TG_PATH_CAP];
    tg_path_folder(r->path, folder, sizeof folder);
    TG_TRY(tg_path_join(json, sizeof json, folder, TG_TOKENIZER_HF_FILE));
    return tg_tokenizer_hf_load(json, tok);
}

/* The body of a tokenizer file, read top to bottom in the file's own order (kind, split,
 * sizes, the char table or the merges, the fingerprint). */
static TgStatus load_body(LineReader *r, TgTokenizer *tok) {
    TG_TRY(need_line(r, "the magic line"));
    size_t ml = strlen(MAGIC);
    int64_t version;
    if (strncmp(r->line, MAGIC, ml) != 0 || r->line[ml] != ' ' || !parse_ints(r->line + ml, &version, 1))
        return tg_fail(TG_ERR_FORMAT,
                       "%s is not a tapegrad tokenizer file: its first line is \"%.60s\", expected "
                       "\"%s %d\"",
                       r->path, r->line, MAGIC, TG_TOKENIZER_FILE_VERSION);
    if (version < 1 || version > TG_TOKENIZER_FILE_VERSION)
        return tg_fail(TG_ERR_FORMAT,
                       "tokenizer file %s has format version %" PRId64 ", this build reads "
                       "versions 1 to %d: use a matching tapegrad or prepare the data again",
                       r->path, version, TG_TOKENIZER_FILE_VERSION);
    TG_TRY(need_line(r, "\"kind char|bpe\""));
    if (strcmp(r->line, "kind char") == 0) tok->kind = TG_TOKENIZER_CHAR;
    else if (strcmp(r->line, "kind bpe") == 0) tok->kind = TG_TOKENIZER_BPE;
    else
        return tg_fail(TG_ERR_FORMAT,
                       "tokenizer file %s, line %" PRId64 ": expected \"kind char\" or \"kind bpe\", "
                       "found \"%.60s\"",
                       r->path, r->lineno, r->line);
    if (version >= 2) {
        TG_TRY(need_line(r, "\"split gpt2\""));
        if (tok->kind != TG_TOKENIZER_BPE || strcmp(r->line, "split gpt2") != 0)
            return tg_fail(TG_ERR_FORMAT, "tokenizer file %s, line %" PRId64 ": expected \"split gpt2\" after \"kind bpe\", found \"%.60s\"",
                           r->path, r->lineno, r->line);
        tok->split = TG_TOKENIZER_SPLIT_GPT2;
    }
    TG_TRY(need_line(r, "vocab_size"));
    if (version >= 2 && strncmp(r->line, "file ", 5) == 0) {
        TG_TRY(load_imported(r, tok));
    } else {
        int64_t vocab, eot;
        TG_TRY(parse_field_here(r, "vocab_size", 2, TG_MAX_VOCAB, &vocab));
        TG_TRY(parse_field(r, "eot_id", 0, vocab - 1, &eot));
        tok->vocab_size = (int32_t)vocab;
        tok->eot_id = (int32_t)eot;
        TG_TRY(load_entries(r, tok, vocab, version));
    }
    TG_TRY(need_line(r, "the fingerprint line"));
    uint64_t stored;
    char extra;
    if (sscanf(r->line, "fingerprint %16" SCNx64 " %c", &stored, &extra) != 1)
        return tg_fail(TG_ERR_FORMAT,
                       "tokenizer file %s, line %" PRId64 ": expected \"fingerprint HEX\", found "
                       "\"%.60s\" (more entries than the header announced?)",
                       r->path, r->lineno, r->line);
    while (next_line(r))
        if (r->line[strspn(r->line, " \t")] != '\0')
            return tg_fail(TG_ERR_FORMAT, "tokenizer file %s, line %" PRId64 ": unexpected text after the fingerprint: \"%.60s\"",
                           r->path, r->lineno, r->line);
    char origin[TG_PATH_CAP + 32];
    snprintf(origin, sizeof origin, "tokenizer file %s", r->path);
    if (!tok->hf) { /* tg_tokenizer_hf_load finished it */
        TgStatus st = tg_tokenizer_finish(tok, origin);
        if (st == TG_ERR_NOMEM) return tg_fail(st, "out of memory reading %s (%s)", origin, tg_error_message());
        TG_TRY(st);
    }
    if (tok->fingerprint != stored)
        return tg_fail(TG_ERR_FORMAT,
                       "tokenizer file %s is corrupt or was edited: its contents hash to "
                       "%016" PRIx64 " but it records fingerprint %016" PRIx64
                       "; prepare the data again to get a consistent tokenizer",
                       r->path, tok->fingerprint, stored);
    return TG_OK;
}

TgStatus tg_tokenizer_load(const char *path, TgTokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    LineReader r = {.path = path};
    r.f = tg_file_open_read(path);
    if (!r.f) return tg_fail(TG_ERR_IO, "cannot open tokenizer file %s: %s", path, tg_file_open_error(errno));
    TgStatus st = load_body(&r, tok);
    free(r.line);
    fclose(r.f);
    if (st != TG_OK) tg_tokenizer_free(tok);
    return st;
}
