/* tokenizer_config.json beside an imported tokenizer.json: its BOS and EOS, which decide how
 * pretraining documents are framed (tokenizer_hf.h). Only the two members are read. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "support/file_read.h"
#include "support/json_reader.h"
#include "support/path.h"
#include "tokenizer/tokenizer_hf.h"
#include "tokenizer/tokenizer_internal.h"

/* The id of the added token whose text is s[0..n), or -1; *special tells its kind. */
static int32_t added_id(const TgTokenizer *tok, const char *s, size_t n, bool *special) {
    for (int32_t k = 0; k < tok->n_added; k++) {
        int32_t id = tok->added[k].id;
        size_t len = (size_t)(tok->token_offsets[id + 1] - tok->token_offsets[id]);
        if (len == n && memcmp(tok->token_bytes + tok->token_offsets[id], s, n) == 0) {
            *special = tok->added[k].special;
            return id;
        }
    }
    return -1;
}

/* The token a member names ("<|im_start|>", {"content": "<|im_start|>", ...}, or null/absent: -1),
 * which must be a special added token of the tokenizer. */
static TgStatus member_token(const char *path, const TgJsonCursor *root, const char *key, const TgTokenizer *tok,
                             int32_t *id) {
    *id = -1;
    TgJsonCursor v;
    size_t n = tg_json_find(root, key, &v);
    if (n > 1) return tg_fail(TG_ERR_FORMAT, "%s: \"%s\" is given %zu times", path, key, n);
    if (n == 0 || tg_json_type(&v) == TG_JSON_NULL) return TG_OK;
    if (tg_json_type(&v) == TG_JSON_OBJECT) {
        TgJsonCursor content;
        if (tg_json_find(&v, "content", &content) != 1 || tg_json_type(&content) != TG_JSON_STRING)
            return tg_fail(TG_ERR_FORMAT, "%s: \"%s\" is an object without one string \"content\"", path, key);
        v = content;
    } else if (tg_json_type(&v) != TG_JSON_STRING) {
        return tg_fail(TG_ERR_FORMAT, "%s: \"%s\" must be a token's text, an object with its \"content\", or null",
                       path, key);
    }
    size_t len;
    char *text = tg_json_decode_alloc(tg_json_read_string(&v), &len);
    if (!text) return tg_fail(TG_ERR_NOMEM, "out of memory reading %s", path);
    bool special = false;
    *id = added_id(tok, text, len, &special);
    TgStatus s = TG_OK;
    if (*id < 0 || !special)
        s = tg_fail(
            TG_ERR_FORMAT,
            "%s: \"%s\" is \"%.60s\", which the tokenizer.json beside it does not have as a special added "
            "token; give the tokenizer_config.json of that tokenizer, or remove it to end each text with <eot> alone",
            path, key, text);
    free(text);
    return s;
}

TgStatus tg_tokenizer_hf_read_config(const char *json_path, TgTokenizer *tok) {
    char folder[TG_PATH_CAP], path[TG_PATH_CAP];
    tg_path_folder(json_path, folder, sizeof folder);
    TG_TRY(tg_path_join(path, sizeof path, folder, TG_TOKENIZER_HF_CONFIG_FILE));
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return TG_OK; /* none: the tokenizer's own <eot> rule */
    char *text = NULL;
    size_t len = 0;
    TgStatus s = tg_file_read_all(path, TG_TOKENIZER_HF_CONFIG_MAX_BYTES, &text, &len);
    if (s != TG_OK) return tg_fail_context(s, "%s", path);
    s = tg_json_check(text, len, path);
    TgJsonCursor root = tg_json_cursor(text, len, 0);
    if (s == TG_OK && tg_json_type(&root) != TG_JSON_OBJECT)
        s = tg_fail(TG_ERR_FORMAT, "%s is not a JSON object", path);
    int32_t bos = -1, eos = -1;
    if (s == TG_OK) s = member_token(path, &root, "bos_token", tok, &bos);
    if (s == TG_OK) s = member_token(path, &root, "eos_token", tok, &eos);
    free(text);
    TG_TRY(s);
    /* a BOS of its own (not the end-of-text token, nor the EOS: GPT-2 names <|endoftext|> for both)
     * frames documents; the EOS then ends them */
    if (bos < 0 || bos == tok->eot_id || bos == eos) return TG_OK;
    if (eos < 0)
        return tg_fail(TG_ERR_FORMAT,
                       "%s names a \"bos_token\" but no \"eos_token\" to end a text with; name both, or neither", path);
    tok->has_bos = true;
    tok->bos_id = bos;
    tok->eot_id = eos;
    return TG_OK;
}
