/* The tokenizer.json reader (tokenizer_hf_load: `train --tokenizer hf:FILE`, and a run whose
 * tokenizer.txt points to one), and what a loaded tokenizer must then do: encode a text to ids
 * in range, decode them, give every id's bytes and text, and, when it can be exported, save and
 * load again to the same fingerprint. */
#include <stdlib.h>
#include <string.h>

#include "tapegrad/tokenizer.h"
#include "data/tokenizer_hf.h"
#include "fuzz_support.h"

static const char text[] = "The quick brown fox jumps over the lazy dog. It's 42\xe2\x82\xac, caf\xc3\xa9!\n\n  end";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    TgTokenizer tok, again;
    if (tokenizer_hf_load(fuzz_write("tokenizer.json", data, size), &tok) != TG_OK) return 0;
    size_t cap = tg_tokenizer_max_ids(&tok, sizeof text - 1), n, len;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (tg_tokenizer_encode(&tok, text, sizeof text - 1, ids, cap, &n) == TG_OK) {
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= tok.vocab_size) abort();
        char *back;
        if (tg_tokenizer_decode(&tok, ids, n, &back, &len) != TG_OK) abort();
        free(back);
    }
    free(ids);
    for (int32_t id = 0; id < tok.vocab_size; id++) {
        tg_tokenizer_token_bytes(&tok, id, &len);
        free(tokenizer_hf_token_text(&tok, id));
    }
    if (tokenizer_hf_check_exportable(&tok) == TG_OK) {
        const char *path = fuzz_write("saved.json", "", 0);
        if (tokenizer_hf_save(&tok, path) != TG_OK || tokenizer_hf_load(path, &again) != TG_OK) abort();
        if (again.fingerprint != tok.fingerprint) abort();
        tg_tokenizer_free(&again);
    }
    tg_tokenizer_free(&tok);
    return 0;
}
