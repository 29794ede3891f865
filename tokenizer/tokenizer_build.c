/* A tokenizer made whole once its kind's fields are set (tg_tokenizer_finish): validation, the
 * token table, the merges' rank map, the added-token matcher, the fingerprint; and freeing it. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

/* The fingerprint starts from the file format's name: a tokenizer of another format never shares one. */
static const char MAGIC[] = "tapegrad-tokenizer";

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
    /* tokenizers without a BOS end here, as they did before it was read */
    if (tok->has_bos) h = fnv_u32(fnv_u32(h, 0x626f0000u), (uint32_t)tok->bos_id); /* "bo" */
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
    bool bos_is_special = false;
    for (int32_t k = 0; k < tok->n_added && tok->has_bos; k++)
        bos_is_special |= tok->added[k].id == tok->bos_id && tok->added[k].special;
    if (tok->has_bos && (!bos_is_special || tok->bos_id == tok->eot_id))
        return tg_fail(TG_ERR_FORMAT,
                       "%s: the begin-of-text id %" PRId32
                       " is not a special added token other than the end-of-text one",
                       origin, tok->bos_id);
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
    if (tok->has_bos && !tok->hf)
        return tg_fail(TG_ERR_FORMAT, "%s: only an imported tokenizer has a begin-of-text token", origin);
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
    TG_TRY(tg_added_matcher_build(tok, false, &tok->matcher));
    TG_TRY(tg_added_matcher_build(tok, true, &tok->word_matcher));
    tok->fingerprint = compute_fingerprint(tok);
    return TG_OK;
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
    tg_added_matcher_free(tok->word_matcher);
    tg_tokenizer_specials_free(tok->specials, tok->n_specials);
    memset(tok, 0, sizeof *tok);
}
