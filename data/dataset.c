/* Dataset folders (dataset.h): the manifest read back, and a dataset opened for reading. */
#include "data/dataset.h"
#include "data/jsonl.h"
#include "data/sources.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/json_reader.h"
#include "support/file_read.h"
#include "support/hash.h"
#include "support/path.h"
#include "tapegrad/limits.h"

uint64_t tg_dataset_fingerprint(uint64_t tokenizer_fingerprint, const TgDatasetSplit *train, const TgDatasetSplit *val) {
    uint64_t v[5] = {tokenizer_fingerprint, train->tokens, train->hash, val->tokens, val->hash};
    unsigned char b[40];
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 8; k++) b[8 * i + k] = (unsigned char)(v[i] >> (8 * k));
    uint64_t h = tg_hash64_of(b, sizeof b, 0x7461706567726164ull /* "tapegrad" */);
    return h ? h : 1;
}

bool tg_dataset_is_dataset(const char *dir) {
    char path[TG_PATH_CAP];
    return tg_path_join(path, sizeof path, dir, TG_DATASET_MANIFEST_FILE) == TG_OK && access(path, F_OK) == 0;
}

/* ---- reading the manifest ---------------------------------------------------------------- */

typedef struct {
    const char *path;
    const char *text;
    size_t len;
} ManifestText;

#define MAX_COUNT 9007199254740992.0 /* 2^53: every count is exact in a double */

/* "PATH: FIELD WHAT; ...": the one refusal of a manifest, naming the member. */
static TgStatus bad(const ManifestText *t, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static TgStatus bad(const ManifestText *t, const char *field, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tg_fail(TG_ERR_FORMAT, "%s: %s %s; the file was edited or damaged: prepare the dataset again (tapegrad prepare)",
                   t->path, field, what);
}

/* The text of the value at c, for messages: the first 40 bytes. */
static void value_text(TgJsonCursor *c, char *out, size_t cap) {
    TgJsonType type = tg_json_type(c);
    size_t begin = c->pos;
    TgJsonCursor end = *c;
    tg_json_skip(&end);
    size_t n = end.pos - begin;
    if (type == TG_JSON_ARRAY || type == TG_JSON_OBJECT) {
        snprintf(out, cap, "%s", tg_json_type_name(type));
        return;
    }
    snprintf(out, cap, "%.*s%s", (int)(n < 40 ? n : 40), c->text + begin, n > 40 ? "..." : "");
}

/* A whole number in [lo, hi] into *v. */
static TgStatus read_whole(const ManifestText *t, TgJsonCursor *c, const char *field, double lo, double hi, int64_t *v) {
    char seen[64];
    value_text(c, seen, sizeof seen);
    if (tg_json_type(c) != TG_JSON_NUMBER) return bad(t, field, "is %s, not a number", seen);
    double d = tg_json_read_number(c);
    if (!(d >= lo && d <= hi) || d != floor(d)) return bad(t, field, "is %s, not a whole number in [%.0f, %.0f]", seen, lo, hi);
    *v = (int64_t)d;
    return TG_OK;
}

static TgStatus read_count(const ManifestText *t, TgJsonCursor *c, const char *field, uint64_t *v) {
    int64_t x;
    TG_TRY(read_whole(t, c, field, 0, MAX_COUNT, &x));
    *v = (uint64_t)x;
    return TG_OK;
}

/* A 16-digit hex string into *v. */
static TgStatus read_hex(const ManifestText *t, TgJsonCursor *c, const char *field, uint64_t *v) {
    char seen[64];
    value_text(c, seen, sizeof seen);
    bool ok = tg_json_type(c) == TG_JSON_STRING;
    TgJsonString s = ok ? tg_json_read_string(c) : (TgJsonString){0};
    ok = ok && s.raw_len == 16;
    for (size_t i = 0; ok && i < 16; i++) ok = isxdigit((unsigned char)s.raw[i]) != 0;
    if (!ok) return bad(t, field, "is %s, not 16 hex digits", seen);
    char buf[17];
    memcpy(buf, s.raw, 16);
    buf[16] = '\0';
    *v = strtoull(buf, NULL, 16);
    return TG_OK;
}

/* A string of at most cap - 1 bytes without a NUL into out. */
static TgStatus read_text(const ManifestText *t, TgJsonCursor *c, const char *field, char *out, size_t cap) {
    char seen[64];
    value_text(c, seen, sizeof seen);
    if (tg_json_type(c) != TG_JSON_STRING) return bad(t, field, "is %s, not a string", seen);
    TgJsonString s = tg_json_read_string(c);
    char *buf = malloc(s.raw_len + 1);
    if (!buf) return tg_fail(TG_ERR_NOMEM, "%s: no memory to read %s", t->path, field);
    size_t n = tg_json_decode(s, buf);
    bool fits = n < cap && memchr(buf, '\0', n) == NULL;
    if (fits) {
        memcpy(out, buf, n);
        out[n] = '\0';
    }
    free(buf);
    return fits ? TG_OK : bad(t, field, "is longer than %zu bytes or holds a NUL", cap - 1);
}

/* An object's members: each of names[] once, and no other; *which the member at key. */
typedef struct {
    const ManifestText *t;
    const char *object; /* "the manifest", "split", "sources[3]" */
    const char *const *names;
    int n;
    unsigned seen, optional;
} Members;

static TgStatus member_of(Members *m, TgJsonString key, int *which) {
    for (int i = 0; i < m->n; i++)
        if (tg_json_string_is(key, m->names[i])) {
            if (m->seen & (1u << i)) return bad(m->t, m->object, "gives \"%s\" twice", m->names[i]);
            m->seen |= 1u << i;
            *which = i;
            return TG_OK;
        }
    return bad(m->t, m->object, "has a member \"%.*s\" that prepare does not write", (int)(key.raw_len < 64 ? key.raw_len : 64),
               key.raw);
}

static TgStatus members_end(const Members *m) {
    for (int i = 0; i < m->n; i++)
        if (!(m->seen & (1u << i)) && !(m->optional & (1u << i))) return bad(m->t, m->object, "has no \"%s\"", m->names[i]);
    return TG_OK;
}

static TgStatus enter_object(const ManifestText *t, TgJsonCursor *c, const char *field) {
    char seen[64];
    value_text(c, seen, sizeof seen);
    if (tg_json_type(c) != TG_JSON_OBJECT) return bad(t, field, "is %s, not an object", seen);
    tg_json_enter(c);
    return TG_OK;
}

static TgStatus enter_array(const ManifestText *t, TgJsonCursor *c, const char *field) {
    char seen[64];
    value_text(c, seen, sizeof seen);
    if (tg_json_type(c) != TG_JSON_ARRAY) return bad(t, field, "is %s, not an array", seen);
    tg_json_enter(c);
    return TG_OK;
}

/* A file of the dataset's folder: a plain name, nothing that leads out of it. */
static TgStatus read_file_name(const ManifestText *t, TgJsonCursor *c, const char *field, char *out) {
    TG_TRY(read_text(t, c, field, out, TG_DATASET_FILE_NAME_CAP));
    if (!out[0] || strchr(out, '/') || strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
        return bad(t, field, "is \"%s\", not the name of a file in the dataset's folder (a plain name, without '/')", out);
    return TG_OK;
}

/* {"file": NAME, "tokens": N, "hash": "HEX"} */
static TgStatus read_split(const ManifestText *t, TgJsonCursor *c, const char *name, TgDatasetSplit *s, char *file) {
    static const char *const names[] = {"file", "tokens", "hash"};
    Members m = {t, name, names, 3, 0, 0};
    TG_TRY(enter_object(t, c, name));
    TgJsonString key;
    char field[32];
    while (tg_json_next_key(c, &key)) {
        int which;
        TG_TRY(member_of(&m, key, &which));
        snprintf(field, sizeof field, "%s.%s", name, names[which]);
        if (which == 0) TG_TRY(read_file_name(t, c, field, file));
        else if (which == 1) TG_TRY(read_count(t, c, field, &s->tokens));
        else TG_TRY(read_hex(t, c, field, &s->hash));
    }
    return members_end(&m);
}

static void hash_id(TgHash64 *h, int64_t id) {
    unsigned char b[4] = {(unsigned char)id, (unsigned char)(id >> 8), (unsigned char)(id >> 16), (unsigned char)(id >> 24)};
    tg_hash64_update(h, b, 4);
}

/* [{"id": N, "text": "..."}, ...] */
static TgStatus read_specials(const ManifestText *t, TgJsonCursor *c, TgDatasetManifest *m, int64_t *max_id) {
    TG_TRY(enter_array(t, c, "tokenizer.special_tokens"));
    TgHash64 h;
    tg_hash64_init(&h, 0);
    *max_id = -1;
    while (tg_json_next_item(c)) {
        char object[64], field[80];
        snprintf(object, sizeof object, "tokenizer.special_tokens[%" PRId64 "]", m->n_special_tokens);
        static const char *const names[] = {"id", "text"};
        Members mm = {t, object, names, 2, 0, 0};
        TG_TRY(enter_object(t, c, object));
        TgJsonString key;
        while (tg_json_next_key(c, &key)) {
            int which;
            TG_TRY(member_of(&mm, key, &which));
            snprintf(field, sizeof field, "%s.%s", object, names[which]);
            if (which == 0) {
                int64_t id;
                TG_TRY(read_whole(t, c, field, 0, TG_MAX_VOCAB - 1, &id));
                hash_id(&h, id);
                if (id > *max_id) *max_id = id;
            } else {
                char seen[64];
                value_text(c, seen, sizeof seen);
                if (tg_json_type(c) != TG_JSON_STRING) return bad(t, field, "is %s, not a string", seen);
                tg_json_skip(c);
            }
        }
        TG_TRY(members_end(&mm));
        m->n_special_tokens++;
    }
    m->special_ids_hash = tg_hash64_final(&h);
    return TG_OK;
}

/* {"kind": "bpe", "vocab_size": N, "fingerprint": "HEX", "special_tokens": [...]} */
static TgStatus read_tokenizer(const ManifestText *t, TgJsonCursor *c, TgDatasetManifest *m) {
    static const char *const names[] = {"kind", "vocab_size", "fingerprint", "special_tokens"};
    Members mm = {t, "tokenizer", names, 4, 0, 0};
    TG_TRY(enter_object(t, c, "tokenizer"));
    TgJsonString key;
    int64_t max_id = -1;
    while (tg_json_next_key(c, &key)) {
        int which;
        TG_TRY(member_of(&mm, key, &which));
        if (which == 0) {
            TG_TRY(read_text(t, c, "tokenizer.kind", m->tokenizer_kind, sizeof m->tokenizer_kind));
            if (strcmp(m->tokenizer_kind, tg_tokenizer_kind_name(TG_TOKENIZER_CHAR)) != 0 &&
                strcmp(m->tokenizer_kind, tg_tokenizer_kind_name(TG_TOKENIZER_BPE)) != 0)
                return bad(t, "tokenizer.kind", "is \"%s\", not char or bpe", m->tokenizer_kind);
        } else if (which == 1) {
            TG_TRY(read_whole(t, c, "tokenizer.vocab_size", 1, TG_MAX_VOCAB, &m->vocab_size));
        } else if (which == 2) {
            TG_TRY(read_hex(t, c, "tokenizer.fingerprint", &m->tokenizer_fingerprint));
        } else {
            TG_TRY(read_specials(t, c, m, &max_id));
        }
    }
    TG_TRY(members_end(&mm));
    if (max_id >= m->vocab_size)
        return bad(t, "tokenizer.special_tokens", "holds id %" PRId64 ", past the vocabulary of %" PRId64, max_id, m->vocab_size);
    return TG_OK;
}

/* {"rule": TG_DATASET_SPLIT_RULE, "val_fraction": F, "seq_len": N} */
static TgStatus read_split_rule(const ManifestText *t, TgJsonCursor *c, TgDatasetManifest *m) {
    static const char *const names[] = {"rule", "val_fraction", "seq_len"};
    Members mm = {t, "split", names, 3, 0, 0};
    TG_TRY(enter_object(t, c, "split"));
    TgJsonString key;
    while (tg_json_next_key(c, &key)) {
        int which;
        TG_TRY(member_of(&mm, key, &which));
        char seen[64];
        value_text(c, seen, sizeof seen);
        if (which == 0) {
            if (tg_json_type(c) != TG_JSON_STRING || !tg_json_string_is(tg_json_read_string(c), TG_DATASET_SPLIT_RULE))
                return bad(t, "split.rule", "is %s, not \"" TG_DATASET_SPLIT_RULE "\"", seen);
        } else if (which == 1) {
            if (tg_json_type(c) != TG_JSON_NUMBER) return bad(t, "split.val_fraction", "is %s, not a number", seen);
            m->val_fraction = tg_json_read_number(c);
            if (!(m->val_fraction > 0.0 && m->val_fraction < 1.0))
                return bad(t, "split.val_fraction", "is %s, not a fraction in (0, 1)", seen);
        } else {
            TG_TRY(read_whole(t, c, "split.seq_len", 1, TG_MAX_CONTEXT, &m->seq_len));
        }
    }
    return members_end(&mm);
}

/* The totals of the manifest's top level, checked against the sum over its sources. */
enum { TOTAL_DOCUMENTS, TOTAL_TEXT_BYTES, TOTAL_FILE_BYTES, TOTAL_MALFORMED, TOTAL_EMPTY_TEXTS, TOTAL_BINARY, TOTALS };
static const char *const TOTAL_NAMES[TOTALS] = {"documents", "text_bytes", "file_bytes", "malformed_lines", "empty_texts",
                                                "binary_files"};

static TgStatus add_total(const ManifestText *t, const char *field, uint64_t *sum, uint64_t v) {
    if (__builtin_add_overflow(*sum, v, sum)) return bad(t, field, "add up past 2^64");
    return TG_OK;
}

/* [{"path": P, "kind": K, "file_bytes": N, "text_bytes": N, "hash": "HEX", "documents": N, "malformed_lines": N}, ...] */
static TgStatus read_sources(const ManifestText *t, TgJsonCursor *c, uint64_t sums[TOTALS], uint64_t *n_sources) {
    TG_TRY(enter_array(t, c, "sources"));
    static const char *const names[] = {"path", "kind", "file_bytes", "text_bytes", "hash", "documents", "malformed_lines"};
    static const char *const kinds[] = {"text", "jsonl", "binary (skipped)"};
    while (tg_json_next_item(c)) {
        char object[48], field[80];
        snprintf(object, sizeof object, "sources[%" PRIu64 "]", *n_sources);
        Members mm = {t, object, names, 7, 0, 0};
        TG_TRY(enter_object(t, c, object));
        TgJsonString key;
        while (tg_json_next_key(c, &key)) {
            int which;
            TG_TRY(member_of(&mm, key, &which));
            snprintf(field, sizeof field, "%s.%s", object, names[which]);
            char seen[64];
            value_text(c, seen, sizeof seen);
            uint64_t v;
            if (which == 0) {
                if (tg_json_type(c) != TG_JSON_STRING || tg_json_read_string(c).raw_len == 0)
                    return bad(t, field, "is %s, not a path", seen);
            } else if (which == 1) {
                bool known = false;
                if (tg_json_type(c) == TG_JSON_STRING) {
                    TgJsonString k = tg_json_read_string(c);
                    for (int i = 0; i < 3; i++) known = known || tg_json_string_is(k, kinds[i]);
                    if (tg_json_string_is(k, kinds[2])) TG_TRY(add_total(t, "sources' binary files", &sums[TOTAL_BINARY], 1));
                }
                if (!known) return bad(t, field, "is %s, not \"text\", \"jsonl\" or \"binary (skipped)\"", seen);
            } else if (which == 4) {
                TG_TRY(read_hex(t, c, field, &v));
            } else {
                TG_TRY(read_count(t, c, field, &v));
                int total = which == 2 ? TOTAL_FILE_BYTES : which == 3 ? TOTAL_TEXT_BYTES : which == 5 ? TOTAL_DOCUMENTS : TOTAL_MALFORMED;
                TG_TRY(add_total(t, field, &sums[total], v));
            }
        }
        TG_TRY(members_end(&mm));
        ++*n_sources;
    }
    return TG_OK;
}

/* An array of at most `most` strings. */
static TgStatus read_strings(const ManifestText *t, TgJsonCursor *c, const char *field, int most) {
    TG_TRY(enter_array(t, c, field));
    int n = 0;
    while (tg_json_next_item(c)) {
        char seen[64];
        value_text(c, seen, sizeof seen);
        if (tg_json_type(c) != TG_JSON_STRING) return bad(t, field, "holds %s, not only strings", seen);
        tg_json_skip(c);
        if (++n > most) return bad(t, field, "holds more than %d entries", most);
    }
    return TG_OK;
}

/* {"by_name": N, "not_files": N, "folders_again": N, "empty_files": N, "examples": [...]} */
static TgStatus read_skipped(const ManifestText *t, TgJsonCursor *c) {
    static const char *const names[] = {"by_name", "not_files", "folders_again", "empty_files", "examples"};
    Members mm = {t, "skipped", names, 5, 0, 0};
    TG_TRY(enter_object(t, c, "skipped"));
    TgJsonString key;
    while (tg_json_next_key(c, &key)) {
        int which;
        TG_TRY(member_of(&mm, key, &which));
        char field[48];
        snprintf(field, sizeof field, "skipped.%s", names[which]);
        uint64_t v;
        if (which == 4) TG_TRY(read_strings(t, c, field, TG_SOURCE_SKIP_KINDS * TG_SOURCE_SKIPS_NAMED));
        else TG_TRY(read_count(t, c, field, &v));
    }
    return members_end(&mm);
}

static TgStatus read_members(const ManifestText *t, TgDatasetManifest *m) {
    enum { FORMAT, FINGERPRINT, RECIPE, RECIPE_FINGERPRINT, TOKENIZER, SPLIT, TRAIN, VAL, MALFORMED_EXAMPLES, SOURCES, SKIPPED,
           FIRST_TOTAL };
    static const char *const names[FIRST_TOTAL + TOTALS] = {
        "format", "fingerprint", "recipe", "recipe_fingerprint", "tokenizer", "split", "train", "val", "malformed_examples",
        "sources", "skipped", "documents", "text_bytes", "file_bytes", "malformed_lines", "empty_texts", "binary_files"};
    Members mm = {t, "the manifest", names, FIRST_TOTAL + TOTALS, 0, 1u << SKIPPED}; /* "skipped": since issue 32 */
    TgJsonCursor c = tg_json_cursor(t->text, t->len, 0);
    if (tg_json_type(&c) != TG_JSON_OBJECT) return bad(t, "the manifest", "is not a JSON object");
    tg_json_enter(&c);
    TgJsonString key;
    uint64_t totals[TOTALS] = {0}, sums[TOTALS] = {0}, n_sources = 0;
    while (tg_json_next_key(&c, &key)) {
        int which;
        TG_TRY(member_of(&mm, key, &which));
        char seen[64];
        value_text(&c, seen, sizeof seen);
        switch (which) {
        case FORMAT:
            if (tg_json_type(&c) != TG_JSON_STRING || !tg_json_string_is(tg_json_read_string(&c), TG_DATASET_FORMAT))
                return bad(t, "format", "is %s, not \"" TG_DATASET_FORMAT "\" (made by another version of tapegrad?)", seen);
            break;
        case FINGERPRINT: TG_TRY(read_hex(t, &c, "fingerprint", &m->fingerprint)); break;
        case RECIPE: TG_TRY(read_text(t, &c, "recipe", m->recipe, sizeof m->recipe)); break;
        case RECIPE_FINGERPRINT: TG_TRY(read_hex(t, &c, "recipe_fingerprint", &m->recipe_fingerprint)); break;
        case TOKENIZER: TG_TRY(read_tokenizer(t, &c, m)); break;
        case SPLIT: TG_TRY(read_split_rule(t, &c, m)); break;
        case TRAIN: TG_TRY(read_split(t, &c, "train", &m->train, m->train_file)); break;
        case VAL: TG_TRY(read_split(t, &c, "val", &m->val, m->val_file)); break;
        case MALFORMED_EXAMPLES: TG_TRY(read_strings(t, &c, "malformed_examples", TG_DOC_REPORTED_ERRORS)); break;
        case SOURCES: TG_TRY(read_sources(t, &c, sums, &n_sources)); break;
        case SKIPPED: TG_TRY(read_skipped(t, &c)); break;
        default: TG_TRY(read_count(t, &c, names[which], &totals[which - FIRST_TOTAL])); break;
        }
    }
    TG_TRY(members_end(&mm));
    if (tg_dataset_fingerprint(m->tokenizer_fingerprint, &m->train, &m->val) != m->fingerprint)
        return bad(t, "fingerprint", "does not match the tokenizer's fingerprint and the splits' counts and hashes");
    if (strcmp(m->train_file, m->val_file) == 0) return bad(t, "train.file and val.file", "are both \"%s\"", m->train_file);
    size_t n_train, n_val;
    if (m->train.tokens + m->val.tokens < m->train.tokens ||
        tg_corpus_split((size_t)(m->train.tokens + m->val.tokens), m->val_fraction, m->seq_len, &n_train, &n_val) != TG_OK ||
        n_train != m->train.tokens || n_val != m->val.tokens) {
        tg_error_clear();
        return bad(t, "split",
                   "(val_fraction %.17g, seq_len %" PRId64 ") does not give the splits' counts (train %" PRIu64 ", val %" PRIu64 ")",
                   m->val_fraction, m->seq_len, m->train.tokens, m->val.tokens);
    }
    if (n_sources == 0) return bad(t, "sources", "is empty");
    for (int i = 0; i < TOTALS; i++)
        if (i != TOTAL_EMPTY_TEXTS && totals[i] != sums[i])
            return bad(t, TOTAL_NAMES[i], "is %" PRIu64 ", but the sources' add up to %" PRIu64, totals[i], sums[i]);
    return TG_OK;
}

TgStatus tg_dataset_manifest_read(const char *dir, TgDatasetManifest *m) {
    memset(m, 0, sizeof *m);
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_DATASET_MANIFEST_FILE));
    char *text;
    size_t len;
    TgStatus s = tg_file_read_all(path, TG_DATASET_MANIFEST_MAX_BYTES, &text, &len);
    if (s != TG_OK)
        return tg_fail(s, "%s is not a dataset folder: its %s: %s (make one with tapegrad prepare)", dir,
                       TG_DATASET_MANIFEST_FILE, tg_error_message());
    s = tg_json_check(text, len, path);
    ManifestText t = {path, text, len};
    if (s == TG_OK) s = read_members(&t, m);
    free(text);
    return s;
}

/* ---- opening ------------------------------------------------------------------------------ */

static TgStatus open_split(TgDataset *d, const char *file, const TgDatasetSplit *want, TgTokenStore *store) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, d->dir, file));
    TG_TRY(tg_token_store_open(store, path, (uint32_t)d->tok.vocab_size, d->tok.fingerprint));
    if (store->n != want->tokens || store->hash != want->hash)
        return tg_fail(TG_ERR_MISMATCH,
                       "%s holds %" PRIu64 " tokens of hash %016" PRIx64 ", but the dataset's manifest records %" PRIu64
                       " tokens of hash %016" PRIx64 ": the file changed after it was prepared; prepare the dataset again",
                       path, store->n, store->hash, want->tokens, want->hash);
    return TG_OK;
}

/* The tokenizer the manifest describes (its fingerprint matched: this catches an edited manifest). */
static TgStatus check_tokenizer(const TgDataset *d) {
    const TgDatasetManifest *m = &d->manifest;
    TgHash64 h;
    tg_hash64_init(&h, 0);
    for (int32_t k = 0; k < d->tok.n_added; k++) hash_id(&h, d->tok.added[k].id);
    const char *kind = tg_tokenizer_kind_name(d->tok.kind), *what = NULL;
    if (strcmp(kind, m->tokenizer_kind) != 0) what = "kind";
    else if (d->tok.vocab_size != m->vocab_size) what = "vocab_size";
    else if (d->tok.n_added != m->n_special_tokens || tg_hash64_final(&h) != m->special_ids_hash) what = "special_tokens";
    if (!what) return TG_OK;
    return tg_fail(TG_ERR_FORMAT,
                   "%s/%s: tokenizer.%s is not that of the dataset's tokenizer (%s, %" PRId32 " ids, %" PRId32
                   " special tokens); the file was edited or damaged: prepare the dataset again (tapegrad prepare)",
                   d->dir, TG_DATASET_MANIFEST_FILE, what, kind, d->tok.vocab_size, d->tok.n_added);
}

TgStatus tg_dataset_open(const char *dir, bool want_train, TgDataset *d) {
    memset(d, 0, sizeof *d);
    d->train.fd = d->val.fd = -1;
    if (snprintf(d->dir, sizeof d->dir, "%s", dir) >= (int)sizeof d->dir) return tg_fail(TG_ERR_ARG, "path too long: %s", dir);
    TgStatus s = tg_dataset_manifest_read(dir, &d->manifest);
    char path[TG_PATH_CAP];
    if (s == TG_OK) s = tg_path_join(path, sizeof path, dir, TG_PREPARE_TOKENIZER_FILE);
    if (s == TG_OK) s = tg_tokenizer_load(path, &d->tok);
    if (s == TG_OK && d->tok.fingerprint != d->manifest.tokenizer_fingerprint)
        s = tg_fail(TG_ERR_MISMATCH, "%s is not the tokenizer the dataset %s was prepared with; prepare it again", path, dir);
    if (s == TG_OK) s = check_tokenizer(d);
    if (s == TG_OK && want_train) s = open_split(d, d->manifest.train_file, &d->manifest.train, &d->train);
    if (s == TG_OK) s = open_split(d, d->manifest.val_file, &d->manifest.val, &d->val);
    if (s != TG_OK) tg_dataset_close(d);
    return s;
}

void tg_dataset_close(TgDataset *d) {
    tg_token_store_close(&d->train);
    tg_token_store_close(&d->val);
    tg_tokenizer_free(&d->tok);
}

TgStatus tg_corpus_split(size_t n, double val_fraction, int64_t seq_len, size_t *n_train, size_t *n_val) {
    if (!(val_fraction > 0.0 && val_fraction < 1.0))
        return tg_fail(TG_ERR_ARG, "val_fraction %g is not in (0, 1): give e.g. 0.1 for the last 10%%",
                       val_fraction);
    if (seq_len < 1) return tg_fail(TG_ERR_ARG, "seq_len %" PRId64 " must be at least 1", seq_len);
    size_t val = (size_t)llround((double)n * val_fraction);
    if (val > n) val = n;
    size_t train = n - val, need = (size_t)seq_len + 1;
    if (train < need || val < need) {
        /* smallest total for which both splits reach `need`, give or take rounding */
        double frac = val_fraction < 0.5 ? val_fraction : 1.0 - val_fraction;
        size_t total = (size_t)ceil((double)need / frac);
        return tg_fail(TG_ERR_ARG,
                       "corpus too short: %zu tokens split into %zu train + %zu val (val_fraction "
                       "%g), but each split needs at least %zu tokens (one window of seq_len %" PRId64
                       " + 1), so about %zu tokens in all; use a larger corpus, a smaller "
                       "seq_len, or a val_fraction nearer 0.5",
                       n, train, val, val_fraction, need, seq_len, total);
    }
    *n_train = train;
    *n_val = val;
    return TG_OK;
}
