/* The tokenizer.json reader (tg_tokenizer_hf_load: `train --tokenizer hf:FILE`, and a run whose
 * tokenizer.txt points to one), and what a loaded tokenizer must then do: encode a text to ids
 * in range, decode them, give every id's bytes and text, be exportable, and round-trip through
 * what a run writes: saved as tokenizer.txt + tokenizer.json and loaded again it has the same
 * fingerprint and encodes the same ids, and saving that writes the same tokenizer.json again.
 * Literal encoding (special tokens' text left as text) gives ids in range, and on a text the
 * file's special tokens may well not spell, tg_tokenizer_encode's ids unless one is in it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tapegrad/tokenizer.h"
#include "tokenizer/tokenizer_hf.h"
#include "fuzz_support.h"

static const char text[] =
    "The quick brown fox jumps over the lazy dog. It's 42\xe2\x82\xac, caf\xc3\xa9!\n\n  end<|endoftext|>\xff";

/* The ids of text, checked to be in range (malloc'ed). */
static int32_t *encode(const TgTokenizer *tok, size_t *n) {
    size_t cap = tg_tokenizer_max_ids(tok, sizeof text - 1);
    int32_t *ids = malloc(cap * sizeof *ids);
    if (tg_tokenizer_encode(tok, text, sizeof text - 1, ids, cap, n) != TG_OK) abort(); /* a BPE encodes any bytes */
    for (size_t i = 0; i < *n; i++)
        if (ids[i] < 0 || ids[i] >= tok->vocab_size) abort();
    return ids;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) abort();
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    char *b = malloc(*len + 1);
    if (fread(b, 1, *len, f) != *len) abort();
    fclose(f);
    return b;
}

/* Saves tok as a run does, in scratch/folder; returns its tokenizer.txt (static storage). */
static const char *save_as_run(const TgTokenizer *tok, const char *folder) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", fuzz_scratch(), folder);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/tokenizer.txt", fuzz_scratch(), folder);
    if (tg_tokenizer_save(tok, path) != TG_OK) abort();
    return path;
}

/* Literal encoding of text: ids in range; with no special token's text in it (checked by
 * matching each), the ids of the usual encoding. */
static void check_literal(const TgTokenizer *tok, const int32_t *ids, size_t n) {
    size_t cap = tg_tokenizer_max_ids(tok, sizeof text - 1), nl;
    int32_t *lit = malloc(cap * sizeof *lit);
    if (tg_tokenizer_encode_literal(tok, text, sizeof text - 1, lit, cap, &nl) != TG_OK) abort();
    for (size_t i = 0; i < nl; i++)
        if (lit[i] < 0 || lit[i] >= tok->vocab_size) abort();
    bool spelled = false;
    for (int32_t k = 0; k < tok->n_added; k++) {
        size_t len;
        const uint8_t *b = tg_tokenizer_token_bytes(tok, tok->added[k].id, &len);
        if (tok->added[k].special && len && memmem(text, sizeof text - 1, b, len)) spelled = true;
    }
    if (!spelled && (nl != n || memcmp(lit, ids, n * sizeof *ids) != 0)) abort();
    free(lit);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    TgTokenizer tok, again;
    if (tg_tokenizer_hf_load(fuzz_write("tokenizer.json", data, size), &tok) != TG_OK) return 0;
    size_t n, m, len;
    int32_t *ids = encode(&tok, &n);
    check_literal(&tok, ids, n);
    char *back;
    if (tg_tokenizer_decode(&tok, ids, n, &back, &len) != TG_OK) abort();
    free(back);
    for (int32_t id = 0; id < tok.vocab_size; id++) {
        tg_tokenizer_token_bytes(&tok, id, &len);
        free(tg_tokenizer_hf_token_text(&tok, id));
    }
    /* what was accepted is what a run keeps: exportable, and the same after saving */
    if (tg_tokenizer_hf_check_exportable(&tok) != TG_OK) abort();
    if (tg_tokenizer_load(save_as_run(&tok, "run"), &again) != TG_OK) abort();
    if (again.fingerprint != tok.fingerprint) abort();
    int32_t *ids_again = encode(&again, &m);
    if (m != n || memcmp(ids, ids_again, n * sizeof *ids) != 0) abort();
    save_as_run(&again, "again");
    char first[1024], second[1024];
    snprintf(first, sizeof first, "%s/run/tokenizer.json", fuzz_scratch());
    snprintf(second, sizeof second, "%s/again/tokenizer.json", fuzz_scratch());
    size_t la, lb;
    char *a = read_all(first, &la), *b = read_all(second, &lb);
    if (la != lb || memcmp(a, b, la) != 0) abort();
    free(a), free(b), free(ids), free(ids_again);
    tg_tokenizer_free(&again);
    tg_tokenizer_free(&tok);
    return 0;
}
