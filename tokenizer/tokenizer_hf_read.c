/* tokenizer.json in (see tokenizer_hf.h): the file is checked as JSON (support/json_reader.h), then
 * read in place, member by member, into the tokenizer's own tables: no tree of the file is
 * built, so what the reader skips costs no memory, and every string is read with its length.
 * The memory this takes is bounded in tokenizer_hf.h; an allocation that fails is reported, not
 * aborted on. */
#include "tokenizer/tokenizer_hf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "support/json_reader.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode_class.h"
#include "lib/checked.h"
#include "support/file_read.h"

#define ABSENT SIZE_MAX /* the offset of a member the file does not have */

typedef struct {
    const char *path, *text;
    size_t len;
    char *scratch; /* decoded strings */
    size_t scratch_cap;
} Reader;

static TgStatus out_of_memory(const Reader *r, size_t n, size_t size, const char *what) {
    return tg_fail(TG_ERR_NOMEM, "out of memory reading %s (%.0f MiB more for %s)", r->path, (double)n * (double)size / (1 << 20), what);
}

/* malloc that reports instead of aborting: a large file is the user's to hear about. */
static TgStatus reader_alloc(const Reader *r, void **p, size_t n, size_t size, const char *what) {
    size_t bytes;
    *p = NULL;
    if (tg_mul_size(n ? n : 1, size, &bytes)) *p = malloc(bytes);
    return *p ? TG_OK : out_of_memory(r, n, size, what);
}

/* The bytes of the string s, decoded into the reader's scratch buffer (from byte `at` of it,
 * so that two strings can be held at once). */
static TgStatus decode(Reader *r, TgJsonString s, size_t at, const char **out, size_t *n) {
    if (at + s.raw_len >= r->scratch_cap) { /* >=: an empty string too needs a buffer to point into */
        size_t need = at + s.raw_len, cap = need + need / 4 + 64; /* grown a quarter: one long string costs little more than itself */
        char *bigger = realloc(r->scratch, cap);
        if (!bigger) return out_of_memory(r, cap, 1, "a string");
        r->scratch = bigger;
        r->scratch_cap = cap;
    }
    *n = tg_json_decode(s, r->scratch + at);
    *out = r->scratch + at;
    return TG_OK;
}

/* Bytes as a message shows them: JSON-escaped, cut after 40 characters. buf has 256 bytes. */
static const char *shown(const char *b, size_t n, char *buf) {
    size_t o = 0, chars = 0;
    for (size_t i = 0; i < n && o < 240;) {
        if (++chars > 40) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char c = (unsigned char)b[i];
        if (c == '"' || c == '\\') o += (size_t)snprintf(buf + o, 256 - o, "\\%c", c), i++;
        else if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, 256 - o, "\\u%04x", c), i++;
        else {
            uint32_t cp;
            size_t l = tg_utf8_next((const unsigned char *)b + i, n - i, &cp);
            if (cp == TG_UTF8_INVALID) o += (size_t)snprintf(buf + o, 256 - o, "\\x%02x", c);
            else memcpy(buf + o, b + i, l), o += l;
            i += l;
        }
    }
    buf[o] = '\0';
    return buf;
}

/* A JSON string as a message shows it (see shown). */
static const char *shown_string(Reader *r, TgJsonString s, char *buf) {
    const char *b = NULL;
    size_t n = 0;
    if (decode(r, s, 0, &b, &n) != TG_OK) return "(a string too long to show)";
    return shown(b, n, buf);
}

static TgJsonType type_at(const Reader *r, size_t at) {
    TgJsonCursor c = tg_json_cursor(r->text, r->len, at);
    return tg_json_type(&c);
}

static bool null_or_absent(const Reader *r, size_t at) { return at == ABSENT || type_at(r, at) == TG_JSON_NULL; }
static bool false_or_absent(const Reader *r, size_t at) {
    return at == ABSENT || type_at(r, at) == TG_JSON_NULL || type_at(r, at) == TG_JSON_FALSE;
}
static bool is_true(const Reader *r, size_t at) { return at != ABSENT && type_at(r, at) == TG_JSON_TRUE; }

static TgJsonString string_at(const Reader *r, size_t at) {
    TgJsonCursor c = tg_json_cursor(r->text, r->len, at);
    return tg_json_read_string(&c);
}

static bool is_string(const Reader *r, size_t at, const char *lit) {
    return at != ABSENT && type_at(r, at) == TG_JSON_STRING && tg_json_string_is(string_at(r, at), lit);
}

/* The id a JSON number names: an integer in [0, TG_TOKENIZER_HF_MAX_IDS), or -1. */
static int32_t id_at(const Reader *r, size_t at) {
    if (at == ABSENT || type_at(r, at) != TG_JSON_NUMBER) return -1;
    TgJsonCursor c = tg_json_cursor(r->text, r->len, at);
    int64_t id;
    return tg_double_to_i64(tg_json_read_number(&c), 0, TG_TOKENIZER_HF_MAX_IDS - 1, &id) ? (int32_t)id : -1;
}

typedef struct {
    const char *name;
    size_t at; /* the offset of its value, or ABSENT */
} Field;

/* Finds the members `fields` names in the object at `at` (the others are skipped). A name
 * that appears twice is refused: programs differ in which of the two they take. */
static TgStatus find_fields(const Reader *r, size_t at, const char *where, Field *fields, int n) {
    for (int k = 0; k < n; k++) fields[k].at = ABSENT;
    TgJsonCursor c = tg_json_cursor(r->text, r->len, at);
    tg_json_enter(&c);
    TgJsonString key;
    while (tg_json_next_key(&c, &key)) {
        tg_json_type(&c); /* to the value */
        for (int k = 0; k < n; k++) {
            if (!tg_json_string_is(key, fields[k].name)) continue;
            if (fields[k].at != ABSENT)
                return tg_fail(TG_ERR_FORMAT, "%s: %s%s appears twice (at bytes %zu and %zu)", r->path, where, fields[k].name,
                               fields[k].at, c.pos);
            fields[k].at = c.pos;
        }
        tg_json_skip(&c);
    }
    return TG_OK;
}

/* The number of members of the array or object at `at`, and where it ends. */
static size_t count_members(const Reader *r, size_t at, size_t *end) {
    TgJsonCursor c = tg_json_cursor(r->text, r->len, at);
    bool object = tg_json_type(&c) == TG_JSON_OBJECT;
    tg_json_enter(&c);
    size_t n = 0;
    TgJsonString key;
    while (object ? tg_json_next_key(&c, &key) : tg_json_next_item(&c)) {
        tg_json_skip(&c);
        n++;
    }
    *end = c.pos;
    return n;
}

/* The fields of the file that tapegrad reads; the other members are skipped. */
enum { ROOT_MODEL, ROOT_ADDED, ROOT_NORMALIZER, ROOT_PRE, ROOT_FIELDS };
enum { MODEL_TYPE, MODEL_VOCAB, MODEL_MERGES, MODEL_DROPOUT, MODEL_PREFIX, MODEL_SUFFIX, MODEL_BYTE_FALLBACK,
       MODEL_IGNORE_MERGES, MODEL_FIELDS };

/* Everything around the vocabulary: what tapegrad does not implement is refused, by name. */
static TgStatus check_pipeline(Reader *r, const Field *root, Field *model) {
    size_t m = root[ROOT_MODEL].at;
    if (m == ABSENT || type_at(r, m) != TG_JSON_OBJECT)
        return tg_fail(TG_ERR_FORMAT, "%s: model is not a BPE model (tapegrad imports byte-level BPE tokenizers)", r->path);
    TG_TRY(find_fields(r, m, "model.", model, MODEL_FIELDS));
    if (model[MODEL_TYPE].at != ABSENT && !is_string(r, model[MODEL_TYPE].at, "BPE"))
        return tg_fail(TG_ERR_FORMAT, "%s: model is not a BPE model (tapegrad imports byte-level BPE tokenizers)", r->path);
    size_t dropout = model[MODEL_DROPOUT].at;
    if (!null_or_absent(r, dropout)) {
        TgJsonCursor c = tg_json_cursor(r->text, r->len, dropout);
        if (tg_json_type(&c) != TG_JSON_NUMBER || tg_json_read_number(&c) != 0)
            return tg_fail(TG_ERR_FORMAT, "%s: model.dropout is set; tapegrad encodes without BPE dropout", r->path);
    }
    for (int k = MODEL_PREFIX; k <= MODEL_SUFFIX; k++)
        if (!null_or_absent(r, model[k].at) && !is_string(r, model[k].at, ""))
            return tg_fail(TG_ERR_FORMAT, "%s: model.%s is set; a byte-level BPE has none", r->path, model[k].name);
    if (!false_or_absent(r, model[MODEL_BYTE_FALLBACK].at))
        return tg_fail(TG_ERR_FORMAT, "%s: model.byte_fallback is on: that is a SentencePiece-style BPE, not a byte-level one", r->path);
    if (!null_or_absent(r, root[ROOT_NORMALIZER].at))
        return tg_fail(TG_ERR_FORMAT, "%s: it has a normalizer; tapegrad imports tokenizers without one", r->path);
    Field pre[] = {{"type", ABSENT}, {"add_prefix_space", ABSENT}, {"use_regex", ABSENT}};
    size_t p = root[ROOT_PRE].at;
    if (p != ABSENT && type_at(r, p) == TG_JSON_OBJECT) TG_TRY(find_fields(r, p, "pre_tokenizer.", pre, 3));
    if (!is_string(r, pre[0].at, "ByteLevel")) {
        char buf[256];
        bool named = pre[0].at != ABSENT && type_at(r, pre[0].at) == TG_JSON_STRING;
        return tg_fail(TG_ERR_FORMAT, "%s: pre_tokenizer is %s, not ByteLevel; tapegrad imports ByteLevel BPE tokenizers", r->path,
                       named ? shown_string(r, string_at(r, pre[0].at), buf) : "missing");
    }
    if (!false_or_absent(r, pre[1].at))
        return tg_fail(TG_ERR_FORMAT, "%s: pre_tokenizer.add_prefix_space is true; tapegrad imports it false only", r->path);
    if (pre[2].at != ABSENT && !is_true(r, pre[2].at))
        return tg_fail(TG_ERR_FORMAT, "%s: pre_tokenizer.use_regex is off; tapegrad splits with the GPT-2 regex", r->path);
    return TG_OK;
}

/* ---- added tokens ----------------------------------------------------------------------- */

typedef struct {
    int32_t id;
    bool special;
    int32_t index; /* in added_tokens */
    size_t off, len; /* its content: bytes [off, off + len) of AddedList.bytes */
} AddedEntry;

typedef struct {
    AddedEntry *e;
    int32_t n;
    char *bytes;
} AddedList;

static int by_id_then_index(const void *a, const void *b) {
    const AddedEntry *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* One entry of added_tokens. */
static TgStatus read_added_entry(Reader *r, size_t at, int32_t k, AddedList *list, size_t *used) {
    Field f[] = {{"id", ABSENT}, {"content", ABSENT}, {"special", ABSENT}, {"lstrip", ABSENT}, {"rstrip", ABSENT}, {"single_word", ABSENT}};
    if (type_at(r, at) != TG_JSON_OBJECT)
        return tg_fail(TG_ERR_FORMAT, "%s: added_tokens[%" PRId32 "] is not an object with an id and a content", r->path, k);
    TG_TRY(find_fields(r, at, "an added token's ", f, 6));
    AddedEntry *e = &list->e[k];
    e->id = id_at(r, f[0].at);
    e->special = is_true(r, f[2].at);
    e->index = k;
    e->off = *used;
    if (f[1].at != ABSENT && type_at(r, f[1].at) == TG_JSON_STRING) {
        e->len = tg_json_decode(string_at(r, f[1].at), list->bytes + *used);
        *used += e->len;
    }
    if (e->id < 0 || e->len == 0)
        return tg_fail(TG_ERR_FORMAT, "%s: added_tokens[%" PRId32 "] lacks an id (below %d) or a content", r->path, k,
                       TG_TOKENIZER_HF_MAX_IDS);
    char buf[256];
    const char *content = list->bytes + e->off;
    if (memchr(content, '\0', e->len))
        return tg_fail(TG_ERR_FORMAT, "%s: added token \"%s\" (id %" PRId32 ") holds a NUL character (\\u0000), which no token may hold",
                       r->path, shown(content, e->len, buf), e->id);
    static const int unsupported[] = {3, 4, 5};
    for (int i = 0; i < 3; i++)
        if (!false_or_absent(r, f[unsupported[i]].at))
            return tg_fail(TG_ERR_FORMAT, "%s: added token \"%s\" sets %s; tapegrad matches added tokens exactly", r->path,
                           shown(content, e->len, buf), f[unsupported[i]].name);
    return TG_OK;
}

/* added_tokens, sorted by id (the order of the file is not kept: a run's own tokenizer.json
 * lists them by id, and the fingerprint must not depend on it). The same entry twice is kept
 * once, as Hugging Face's tokenizers do; two entries that give one id different contents (or
 * one special, one not) are refused, naming both. */
static TgStatus read_added(Reader *r, size_t at, AddedList *list) {
    if (at == ABSENT) return TG_OK;
    if (type_at(r, at) != TG_JSON_ARRAY) return tg_fail(TG_ERR_FORMAT, "%s: added_tokens is not a list", r->path);
    size_t end, n = count_members(r, at, &end);
    if (n > TG_TOKENIZER_HF_MAX_ADDED)
        return tg_fail(TG_ERR_FORMAT, "%s: %zu added tokens; tapegrad reads at most %d", r->path, n, TG_TOKENIZER_HF_MAX_ADDED);
    TG_TRY(reader_alloc(r, (void **)&list->e, n, sizeof *list->e, "the added tokens"));
    TG_TRY(reader_alloc(r, (void **)&list->bytes, end - at, 1, "the added tokens")); /* decoding never lengthens */
    TgJsonCursor c = tg_json_cursor(r->text, r->len, at);
    tg_json_enter(&c);
    size_t used = 0;
    for (int32_t k = 0; tg_json_next_item(&c); k++) {
        tg_json_type(&c);
        list->e[k] = (AddedEntry){0};
        TG_TRY(read_added_entry(r, c.pos, k, list, &used));
        list->n = k + 1;
        if (used > TG_TOKENIZER_HF_MAX_ADDED_BYTES)
            return tg_fail(TG_ERR_FORMAT, "%s: the added tokens up to added_tokens[%" PRId32 "] hold %zu bytes of text; tapegrad reads at most %d",
                           r->path, k, used, TG_TOKENIZER_HF_MAX_ADDED_BYTES);
        tg_json_skip(&c);
    }
    qsort(list->e, (size_t)list->n, sizeof *list->e, by_id_then_index);
    int32_t kept = 0;
    for (int32_t k = 0; k < list->n; k++) {
        AddedEntry *e = &list->e[k], *prev = kept ? &list->e[kept - 1] : NULL;
        if (prev && prev->id == e->id) {
            bool same_text = prev->len == e->len && memcmp(list->bytes + prev->off, list->bytes + e->off, e->len) == 0;
            if (same_text && prev->special == e->special) continue;
            char a[256], b[256];
            return tg_fail(TG_ERR_FORMAT, "%s: added_tokens[%" PRId32 "] (\"%s\"%s) and added_tokens[%" PRId32 "] (\"%s\"%s) both have id %" PRId32,
                           r->path, prev->index, shown(list->bytes + prev->off, prev->len, a), prev->special ? ", special" : "",
                           e->index, shown(list->bytes + e->off, e->len, b), e->special ? ", special" : "", e->id);
        }
        list->e[kept++] = *e;
    }
    list->n = kept;
    return TG_OK;
}

/* ---- the vocabulary and the merges -------------------------------------------------------- */

/* The first pass over model.vocab: every value an id below the limit, and how many. *v: the
 * largest id (of the vocabulary or of the added tokens) + 1; *end: where the object ends. */
static TgStatus vocab_ids(Reader *r, size_t at, const AddedList *added, int32_t *v, size_t *end) {
    int64_t n_vocab = 0;
    int32_t max_id = added->n ? added->e[added->n - 1].id : -1;
    TgJsonCursor c = tg_json_cursor(r->text, r->len, at);
    tg_json_enter(&c);
    TgJsonString key;
    char buf[256];
    while (tg_json_next_key(&c, &key)) {
        tg_json_type(&c);
        int32_t id = id_at(r, c.pos);
        if (id < 0)
            return tg_fail(TG_ERR_FORMAT, "%s: model.vocab[\"%s\"] is not a new id below %d", r->path, shown_string(r, key, buf),
                           TG_TOKENIZER_HF_MAX_IDS);
        if (id > max_id) max_id = id;
        n_vocab++;
        tg_json_skip(&c);
    }
    *end = c.pos;
    if (n_vocab < 1 || n_vocab > TG_TOKENIZER_HF_MAX_IDS)
        return tg_fail(TG_ERR_FORMAT, "%s: model.vocab holds %" PRId64 " tokens; tapegrad reads 1 to %d", r->path, n_vocab,
                       TG_TOKENIZER_HF_MAX_IDS);
    *v = max_id + 1;
    return TG_OK;
}

/* The second pass: where each id's string is, key_at[id] (offset + 1; 0: none), each id once.
 * Then every id below v has a string or an added token's content. */
static TgStatus vocab_keys(Reader *r, size_t at, const AddedList *added, int32_t v, size_t *key_at) {
    TgJsonCursor c = tg_json_cursor(r->text, r->len, at);
    tg_json_enter(&c);
    TgJsonString key;
    char buf[256];
    while (tg_json_next_key(&c, &key)) {
        tg_json_type(&c);
        int32_t id = id_at(r, c.pos);
        if (key_at[id])
            return tg_fail(TG_ERR_FORMAT, "%s: model.vocab[\"%s\"] is not a new id below %d", r->path,
                           shown_string(r, key, buf), TG_TOKENIZER_HF_MAX_IDS);
        key_at[id] = key.pos + 1;
        tg_json_skip(&c);
    }
    int32_t k = 0;
    for (int32_t id = 0; id < v; id++) {
        while (k < added->n && added->e[k].id < id) k++;
        if (!key_at[id] && !(k < added->n && added->e[k].id == id))
            return tg_fail(TG_ERR_FORMAT, "%s: no token has id %" PRId32 " (ids must run from 0 without gaps)", r->path,
                           id);
    }
    return TG_OK;
}

/* Every id's bytes, in id order, into tok->token_bytes and token_offsets; an added token's content
 * replaces a vocabulary string. Sets byte_ids. */
static TgStatus vocab_bytes(Reader *r, const AddedList *added, const size_t *key_at, TgTokenizer *tok) {
    char buf[256];
    int32_t k = 0;
    for (int32_t id = 0; id < tok->vocab_size; id++) {
        uint8_t *dst = tok->token_bytes + tok->token_offsets[id];
        size_t n;
        while (k < added->n && added->e[k].id < id) k++;
        if (k < added->n && added->e[k].id == id) {
            n = added->e[k].len;
            memcpy(dst, added->bytes + added->e[k].off, n);
        } else {
            TgJsonString text = string_at(r, key_at[id] - 1);
            const char *b;
            size_t len;
            TG_TRY(decode(r, text, 0, &b, &len));
            if (!tg_tokenizer_hf_bytes_of_text(b, len, dst, &n))
                return tg_fail(TG_ERR_FORMAT,
                               "%s: vocabulary token \"%s\" (id %" PRId32 ") is not made of ByteLevel characters",
                               r->path, shown(b, len, buf), id);
            if (n == 1 && tok->byte_ids[dst[0]] < 0) tok->byte_ids[dst[0]] = id;
        }
        tok->token_offsets[id + 1] = tok->token_offsets[id] + (int64_t)n;
    }
    return TG_OK;
}

/* Sets the bytes of every id: added tokens their content, vocabulary strings the bytes they
 * stand for. Fills token_offsets/token_bytes, vocab_size and byte_ids. */
static TgStatus read_vocab(Reader *r, size_t at, const AddedList *added, TgTokenizer *tok) {
    if (at == ABSENT || type_at(r, at) != TG_JSON_OBJECT)
        return tg_fail(TG_ERR_FORMAT, "%s: model.vocab is not an object", r->path);
    int32_t v = 0;
    size_t end = at;
    TG_TRY(vocab_ids(r, at, added, &v, &end));
    size_t *key_at = calloc((size_t)v, sizeof *key_at); /* calloc: a page no id reaches costs nothing */
    if (!key_at) return out_of_memory(r, (size_t)v, sizeof *key_at, "the vocabulary");
    TgStatus s = vocab_keys(r, at, added, v, key_at);
    if (s == TG_OK)
        s = reader_alloc(r, (void **)&tok->token_offsets, (size_t)v + 1, sizeof *tok->token_offsets, "the vocabulary");
    size_t cap = end - at; /* a vocabulary string's bytes are no more than its text's */
    for (int32_t i = 0; i < added->n; i++) cap += added->e[i].len;
    if (s == TG_OK) s = reader_alloc(r, (void **)&tok->token_bytes, cap, 1, "the vocabulary's bytes");
    if (s == TG_OK) {
        tok->vocab_size = v;
        for (int b = 0; b < 256; b++) tok->byte_ids[b] = -1;
        tok->token_offsets[0] = 0;
        s = vocab_bytes(r, added, key_at, tok);
    }
    free(key_at);
    if (s == TG_OK) { /* give back what the bound left over */
        uint8_t *fit = realloc(tok->token_bytes, (size_t)tok->token_offsets[v] + 1);
        if (fit) tok->token_bytes = fit;
    }
    return s;
}

/* "a b" or ["a", "b"]: the bytes of a merge's two operands, decoded into the scratch buffer. */
static bool merge_operands(Reader *r, size_t at, const char **a, size_t *la, const char **b, size_t *lb, TgStatus *s) {
    TgJsonCursor c = tg_json_cursor(r->text, r->len, at);
    TgJsonType type = tg_json_type(&c);
    *s = TG_OK;
    if (type == TG_JSON_STRING) {
        const char *t;
        size_t n;
        if ((*s = decode(r, tg_json_read_string(&c), 0, &t, &n)) != TG_OK) return false;
        const char *space = memchr(t, ' ', n);
        if (!space || space == t || space == t + n - 1 || memchr(space + 1, ' ', (size_t)(t + n - space - 1))) return false;
        *a = t, *la = (size_t)(space - t);
        *b = space + 1, *lb = (size_t)(t + n - space - 1);
        return true;
    }
    if (type != TG_JSON_ARRAY) return false;
    tg_json_enter(&c);
    TgJsonString parts[2];
    int n = 0;
    while (tg_json_next_item(&c)) {
        if (n == 2 || tg_json_type(&c) != TG_JSON_STRING) return false;
        parts[n++] = tg_json_read_string(&c);
    }
    if (n != 2) return false;
    if ((*s = decode(r, parts[0], 0, a, la)) != TG_OK || (*s = decode(r, parts[1], parts[0].raw_len, b, lb)) != TG_OK) return false;
    *a = r->scratch; /* the second decode may have moved the buffer */
    return true;
}

/* The id whose vocabulary string is text[0..n), or -1; out has room for n bytes. */
static int32_t id_of_text(const TgTokenizer *tok, const char *text, size_t n, uint8_t *out, size_t *len) {
    if (!tg_tokenizer_hf_bytes_of_text(text, n, out, len)) return -1;
    return tg_token_index_find(tok->index, tok, out, *len);
}

static TgStatus read_merges(Reader *r, size_t at, TgTokenizer *tok) {
    size_t end, n = at != ABSENT && type_at(r, at) == TG_JSON_ARRAY ? count_members(r, at, &end) : 0;
    if (at == ABSENT || type_at(r, at) != TG_JSON_ARRAY || n > TG_TOKENIZER_HF_MAX_IDS)
        return tg_fail(TG_ERR_FORMAT, "%s: model.merges is not a list of at most %d merges", r->path, TG_TOKENIZER_HF_MAX_IDS);
    TG_TRY(reader_alloc(r, (void **)&tok->merges, n + 1, sizeof *tok->merges, "the merges"));
    TG_TRY(reader_alloc(r, (void **)&tok->merge_ids, n + 1, sizeof *tok->merge_ids, "the merges"));
    uint8_t *joined = NULL;
    size_t joined_cap = 0;
    TgStatus s = TG_OK;
    TgJsonCursor c = tg_json_cursor(r->text, r->len, at);
    tg_json_enter(&c);
    while (tg_json_next_item(&c)) {
        tg_json_type(&c);
        int32_t i = tok->n_merges;
        const char *a, *b;
        size_t la, lb, ba, bb;
        if (!merge_operands(r, c.pos, &a, &la, &b, &lb, &s)) {
            if (s == TG_OK)
                s = tg_fail(TG_ERR_FORMAT, "%s: model.merges[%" PRId32 "] is not \"left right\" or [\"left\", \"right\"]", r->path, i);
            break;
        }
        if (!joined || la + lb > joined_cap) { /* two empty operands too need a buffer to point into */
            free(joined);
            joined_cap = 2 * (la + lb) + 16;
            if ((s = reader_alloc(r, (void **)&joined, joined_cap, 1, "a merge")) != TG_OK) break;
        }
        int32_t left = id_of_text(tok, a, la, joined, &ba);
        int32_t right = left < 0 ? -1 : id_of_text(tok, b, lb, joined + ba, &bb);
        int32_t made = right < 0 ? -1 : tg_token_index_find(tok->index, tok, joined, ba + bb);
        if (made < 0) {
            char x[256], y[256];
            s = tg_fail(TG_ERR_FORMAT, "%s: model.merges[%" PRId32 "] (\"%s\" + \"%s\") joins or makes a token not in the vocabulary",
                        r->path, i, shown(a, la, x), shown(b, lb, y));
            break;
        }
        tok->merges[i] = (TgTokenPair){left, right};
        tok->merge_ids[i] = made;
        tok->n_merges++;
        tg_json_skip(&c);
    }
    free(joined);
    return s;
}

/* The added tokens of the tokenizer, and <eot> among them: the special one named
 * "<|endoftext|>", or else the special one of the lowest id. */
static TgStatus set_added(const Reader *r, const AddedList *list, TgTokenizer *tok) {
    TG_TRY(reader_alloc(r, (void **)&tok->added, (size_t)list->n + 1, sizeof *tok->added, "the added tokens"));
    int32_t named_eot = -1, first_special = -1;
    for (int32_t k = 0; k < list->n; k++) {
        const AddedEntry *e = &list->e[k];
        tok->added[tok->n_added++] = (TgTokenizerAdded){e->id, e->special};
        bool eot_text = e->len == strlen(TG_TOKENIZER_EOT_TEXT) && memcmp(list->bytes + e->off, TG_TOKENIZER_EOT_TEXT, e->len) == 0;
        if (e->special && eot_text) named_eot = e->id;
        if (e->special && first_special < 0) first_special = e->id;
    }
    tok->eot_id = named_eot >= 0 ? named_eot : first_special;
    if (tok->eot_id < 0)
        return tg_fail(TG_ERR_FORMAT, "%s: no special added token (such as \"%s\") to end a text with", r->path, TG_TOKENIZER_EOT_TEXT);
    return TG_OK;
}

/* Everything but the checks and the tables tg_tokenizer_finish adds. */
static TgStatus read_tokenizer(Reader *r, TgTokenizer *tok, AddedList *added) {
    TG_TRY(tg_json_check(r->text, r->len, r->path));
    if (type_at(r, 0) != TG_JSON_OBJECT) return tg_fail(TG_ERR_FORMAT, "%s is not a tokenizer.json: not a JSON object", r->path);
    Field root[ROOT_FIELDS] = {{"model", ABSENT}, {"added_tokens", ABSENT}, {"normalizer", ABSENT}, {"pre_tokenizer", ABSENT}};
    Field model[MODEL_FIELDS] = {{"type", ABSENT},           {"vocab", ABSENT},  {"merges", ABSENT},
                                 {"dropout", ABSENT},        {"continuing_subword_prefix", ABSENT},
                                 {"end_of_word_suffix", ABSENT}, {"byte_fallback", ABSENT}, {"ignore_merges", ABSENT}};
    TG_TRY(find_fields(r, 0, "", root, ROOT_FIELDS));
    TG_TRY(check_pipeline(r, root, model));
    tok->kind = TG_TOKENIZER_BPE;
    tok->split = TG_TOKENIZER_SPLIT_GPT2;
    tok->hf = true;
    tok->ignore_merges = is_true(r, model[MODEL_IGNORE_MERGES].at);
    TG_TRY(read_added(r, root[ROOT_ADDED].at, added));
    TG_TRY(read_vocab(r, model[MODEL_VOCAB].at, added, tok));
    int32_t a = -1, b = -1;
    TG_TRY(tg_token_index_build(tok, &tok->index, &a, &b));
    if (!tok->index) return tg_fail(TG_ERR_FORMAT, "%s: ids %" PRId32 " and %" PRId32 " are the same token", r->path, a, b);
    TG_TRY(read_merges(r, model[MODEL_MERGES].at, tok));
    return set_added(r, added, tok);
}

TgStatus tg_tokenizer_hf_load(const char *path, TgTokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    Reader r = {.path = path};
    char *text = NULL;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT)
        return tg_fail(TG_ERR_IO, "%s: no such file; give a Hugging Face tokenizer.json (MiniMind's is model/tokenizer.json "
                                  "in its repository, github.com/jingyaogong/minimind)",
                       path);
    TgStatus s = tg_file_read_all(path, TG_TOKENIZER_HF_MAX_BYTES, &text, &r.len);
    if (s == TG_ERR_NOMEM) return tg_fail(s, "out of memory reading %s (%s)", path, tg_error_message());
    if (s != TG_OK) return tg_fail_context(s, "%s", path);
    r.text = text;
    AddedList added = {0};
    s = read_tokenizer(&r, tok, &added);
    free(added.e), free(added.bytes), free(r.scratch), free(text); /* before the tables that follow */
    if (s == TG_OK) s = tg_tokenizer_hf_read_config(path, tok);
    if (s == TG_OK) s = tg_tokenizer_finish(tok, path);
    if (s == TG_ERR_NOMEM && strncmp(tg_error_message(), "out of memory", 13) != 0)
        s = tg_fail(s, "out of memory reading %s (%s)", path, tg_error_message());
    if (s != TG_OK) tg_tokenizer_free(tok);
    return s;
}

