/* The tokenizer file reader (tg_tokenizer_load), and what a loaded tokenizer must then do: encode
 * and decode a text back to the same bytes, give every id's bytes, save and load again to the
 * same fingerprint. */
#include <stdlib.h>
#include <string.h>

#include "tapegrad/tokenizer.h"
#include "fuzz_support.h"

static const char text[] = "The quick brown fox jumps over the lazy dog.\n%\nSo it goes, 42 times: \xc3\xa9t\xc3\xa9 \x01!";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    TgTokenizer tok, again;
    if (tg_tokenizer_load(fuzz_write("tokenizer.txt", data, size), &tok) != TG_OK) return 0;
    int32_t ids[sizeof text];
    size_t n, len;
    /* a char tokenizer may lack a byte of the text and refuse it; what it encodes must come back */
    if (tg_tokenizer_encode(&tok, text, sizeof text - 1, ids, sizeof text, &n) == TG_OK) {
        char *back;
        if (tg_tokenizer_decode(&tok, ids, n, &back, &len) != TG_OK || len != sizeof text - 1 || memcmp(back, text, len) != 0)
            abort();
        free(back);
    }
    for (int32_t id = 0; id < tok.vocab_size; id++) tg_tokenizer_token_bytes(&tok, id, &len);
    const char *path = fuzz_write("saved.txt", "", 0);
    if (tg_tokenizer_save(&tok, path) != TG_OK || tg_tokenizer_load(path, &again) != TG_OK) abort();
    if (again.fingerprint != tok.fingerprint) abort();
    tg_tokenizer_free(&again);
    tg_tokenizer_free(&tok);
    return 0;
}
