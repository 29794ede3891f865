/* The tokenizer file reader (tokenizer_load), and what a loaded tokenizer must then do: encode
 * and decode a text back to the same bytes, give every id's bytes, save and load again to the
 * same fingerprint. */
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "fuzz_support.h"

static const char text[] = "The quick brown fox jumps over the lazy dog.\n%\nSo it goes, 42 times: \xc3\xa9t\xc3\xa9 \x01!";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Tokenizer tok, again;
    if (tokenizer_load(fuzz_write("tokenizer.txt", data, size), &tok) != TG_OK) return 0;
    int32_t ids[sizeof text];
    size_t n, len;
    /* a char tokenizer may lack a byte of the text and refuse it; what it encodes must come back */
    if (tokenizer_encode(&tok, text, sizeof text - 1, ids, sizeof text, &n) == TG_OK) {
        char *back;
        if (tokenizer_decode(&tok, ids, n, &back, &len) != TG_OK || len != sizeof text - 1 || memcmp(back, text, len) != 0)
            abort();
        free(back);
    }
    for (int32_t id = 0; id < tok.vocab_size; id++) tokenizer_token_bytes(&tok, id, &len);
    const char *path = fuzz_write("saved.txt", "", 0);
    if (tokenizer_save(&tok, path) != TG_OK || tokenizer_load(path, &again) != TG_OK) abort();
    if (again.fingerprint != tok.fingerprint) abort();
    tokenizer_free(&again);
    tokenizer_free(&tok);
    return 0;
}
