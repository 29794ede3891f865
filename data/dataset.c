/* Dataset folders (dataset.h): the manifest read back, and a dataset opened for reading. */
#include "data/dataset.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/json_reader.h"
#include "data/prepare.h"
#include "lib/file_read.h"
#include "lib/hash.h"
#include "lib/path.h"

uint64_t dataset_fingerprint(uint64_t tokenizer_fingerprint, const DatasetSplit *train, const DatasetSplit *val) {
    uint64_t v[5] = {tokenizer_fingerprint, train->tokens, train->hash, val->tokens, val->hash};
    unsigned char b[40];
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 8; k++) b[8 * i + k] = (unsigned char)(v[i] >> (8 * k));
    uint64_t h = hash64_of(b, sizeof b, 0x7461706567726164ull /* "tapegrad" */);
    return h ? h : 1;
}

bool dataset_is_dataset(const char *dir) {
    char path[TG_PATH_CAP];
    return path_join(path, sizeof path, dir, DATASET_MANIFEST_FILE) == TG_OK && access(path, F_OK) == 0;
}

/* ---- reading the manifest ---------------------------------------------------------------- */

typedef struct {
    const char *path;
    const char *text;
    size_t len;
} ManifestText;

static TgStatus bad(const ManifestText *t, const char *what) {
    return tg_fail(TG_ERR_FORMAT, "%s: %s; prepare the dataset again (tapegrad prepare)", t->path, what);
}

/* A 16-digit hex string into *v. */
static bool read_hex(JsonCursor *c, uint64_t *v) {
    if (json_type(c) != JSON_STRING) return false;
    JsonString s = json_read_string(c);
    if (s.raw_len != 16) return false;
    char buf[17];
    memcpy(buf, s.raw, 16);
    buf[16] = '\0';
    char *end;
    errno = 0;
    *v = strtoull(buf, &end, 16);
    return errno == 0 && *end == '\0' && buf[0] != '-' && buf[0] != '+' && buf[0] != ' ';
}

/* A whole number in [0, 2^53] into *v. */
static bool read_count(JsonCursor *c, uint64_t *v) {
    if (json_type(c) != JSON_NUMBER) return false;
    double d = json_read_number(c);
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d) return false;
    *v = (uint64_t)d;
    return true;
}

/* {"tokens": N, "hash": "HEX", ...} */
static TgStatus read_split(const ManifestText *t, JsonCursor *c, const char *name, DatasetSplit *s) {
    char what[96];
    snprintf(what, sizeof what, "\"%s\" is not an object with \"tokens\" and \"hash\"", name);
    if (json_type(c) != JSON_OBJECT) return bad(t, what);
    json_enter(c);
    JsonString key;
    int seen = 0;
    while (json_next_key(c, &key)) {
        if (json_string_is(key, "tokens")) {
            if (!read_count(c, &s->tokens)) return bad(t, what);
            seen |= 1;
        } else if (json_string_is(key, "hash")) {
            if (!read_hex(c, &s->hash)) return bad(t, what);
            seen |= 2;
        } else {
            json_skip(c);
        }
    }
    return seen == 3 ? TG_OK : bad(t, what);
}

static TgStatus read_tokenizer(const ManifestText *t, JsonCursor *c, uint64_t *fingerprint) {
    if (json_type(c) != JSON_OBJECT) return bad(t, "\"tokenizer\" is not an object");
    json_enter(c);
    JsonString key;
    bool seen = false;
    while (json_next_key(c, &key)) {
        if (json_string_is(key, "fingerprint")) {
            if (!read_hex(c, fingerprint)) return bad(t, "the tokenizer's \"fingerprint\" is not 16 hex digits");
            seen = true;
        } else {
            json_skip(c);
        }
    }
    return seen ? TG_OK : bad(t, "the tokenizer has no \"fingerprint\"");
}

static TgStatus read_members(const ManifestText *t, DatasetManifest *m) {
    JsonCursor c = json_cursor(t->text, t->len, 0);
    if (json_type(&c) != JSON_OBJECT) return bad(t, "not a JSON object");
    json_enter(&c);
    JsonString key;
    unsigned seen = 0;
    while (json_next_key(&c, &key)) {
        unsigned bit = 0;
        if (json_string_is(key, "format")) {
            bit = 1;
            if (json_type(&c) != JSON_STRING || !json_string_is(json_read_string(&c), DATASET_FORMAT))
                return bad(t, "\"format\" is not \"" DATASET_FORMAT "\" (made by another version of tapegrad?)");
        } else if (json_string_is(key, "fingerprint")) {
            bit = 2;
            if (!read_hex(&c, &m->fingerprint)) return bad(t, "\"fingerprint\" is not 16 hex digits");
        } else if (json_string_is(key, "recipe_fingerprint")) {
            bit = 4;
            if (!read_hex(&c, &m->recipe_fingerprint)) return bad(t, "\"recipe_fingerprint\" is not 16 hex digits");
        } else if (json_string_is(key, "recipe")) {
            bit = 8;
            if (json_type(&c) != JSON_STRING) return bad(t, "\"recipe\" is not a string");
            JsonString s = json_read_string(&c);
            if (s.raw_len >= sizeof m->recipe) return bad(t, "\"recipe\" is too long");
            m->recipe[json_decode(s, m->recipe)] = '\0';
        } else if (json_string_is(key, "tokenizer")) {
            bit = 16;
            TG_TRY(read_tokenizer(t, &c, &m->tokenizer_fingerprint));
        } else if (json_string_is(key, "train")) {
            bit = 32;
            TG_TRY(read_split(t, &c, "train", &m->train));
        } else if (json_string_is(key, "val")) {
            bit = 64;
            TG_TRY(read_split(t, &c, "val", &m->val));
        } else {
            json_skip(&c);
        }
        if (seen & bit) return bad(t, "a member is given twice");
        seen |= bit;
    }
    if (seen != 127) return bad(t, "a member is missing (format, fingerprint, recipe, recipe_fingerprint, tokenizer, train, val)");
    if (dataset_fingerprint(m->tokenizer_fingerprint, &m->train, &m->val) != m->fingerprint)
        return bad(t, "its fingerprint does not match its tokenizer and splits: the file was edited");
    return TG_OK;
}

TgStatus dataset_manifest_read(const char *dir, DatasetManifest *m) {
    memset(m, 0, sizeof *m);
    char path[TG_PATH_CAP];
    TG_TRY(path_join(path, sizeof path, dir, DATASET_MANIFEST_FILE));
    char *text;
    size_t len;
    TgStatus s = file_read_all(path, DATASET_MANIFEST_MAX_BYTES, &text, &len);
    if (s != TG_OK)
        return tg_fail(s, "%s is not a dataset folder: its %s: %s (make one with tapegrad prepare)", dir,
                       DATASET_MANIFEST_FILE, tg_error_message());
    s = json_check(text, len, path);
    ManifestText t = {path, text, len};
    if (s == TG_OK) s = read_members(&t, m);
    free(text);
    return s;
}

/* ---- opening ------------------------------------------------------------------------------ */

static TgStatus open_split(Dataset *d, const char *file, const DatasetSplit *want, TokenStore *store) {
    char path[TG_PATH_CAP];
    TG_TRY(path_join(path, sizeof path, d->dir, file));
    TG_TRY(token_store_open(store, path, (uint32_t)d->tok.vocab_size, d->tok.fingerprint));
    if (store->n != want->tokens || store->hash != want->hash)
        return tg_fail(TG_ERR_MISMATCH,
                       "%s holds %" PRIu64 " tokens of hash %016" PRIx64 ", but the dataset's manifest records %" PRIu64
                       " tokens of hash %016" PRIx64 ": the file changed after it was prepared; prepare the dataset again",
                       path, store->n, store->hash, want->tokens, want->hash);
    return TG_OK;
}

TgStatus dataset_open(const char *dir, bool want_train, Dataset *d) {
    memset(d, 0, sizeof *d);
    d->train.fd = d->val.fd = -1;
    if (snprintf(d->dir, sizeof d->dir, "%s", dir) >= (int)sizeof d->dir) return tg_fail(TG_ERR_ARG, "path too long: %s", dir);
    TgStatus s = dataset_manifest_read(dir, &d->manifest);
    char path[TG_PATH_CAP];
    if (s == TG_OK) s = path_join(path, sizeof path, dir, PREPARE_TOKENIZER_FILE);
    if (s == TG_OK) s = tg_tokenizer_load(path, &d->tok);
    if (s == TG_OK && d->tok.fingerprint != d->manifest.tokenizer_fingerprint)
        s = tg_fail(TG_ERR_MISMATCH, "%s is not the tokenizer the dataset %s was prepared with; prepare it again", path, dir);
    if (s == TG_OK && want_train) s = open_split(d, PREPARE_TRAIN_FILE, &d->manifest.train, &d->train);
    if (s == TG_OK) s = open_split(d, PREPARE_VAL_FILE, &d->manifest.val, &d->val);
    if (s != TG_OK) dataset_close(d);
    return s;
}

void dataset_close(Dataset *d) {
    token_store_close(&d->train);
    token_store_close(&d->val);
    tg_tokenizer_free(&d->tok);
}
