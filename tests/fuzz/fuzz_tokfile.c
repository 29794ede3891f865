/* The token file reader (train.tok, val.tok): the whole file, its header, and the check against
 * a model's vocabulary that eval, inspect and resume make. Every id handed out must be inside
 * the vocabulary it was checked against. */
#include <stdlib.h>

#include "data/tokfile.h"
#include "fuzz_support.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write("val.tok", data, size);
    int32_t *ids;
    size_t n;
    TgTokfileHeader h;
    if (tg_tokfile_read_full(path, &ids, &n, &h) == TG_OK) {
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || (uint32_t)ids[i] >= h.vocab_size) abort();
        free(ids);
    }
    tg_tokfile_read_header(path, &h);
    if (tg_tokfile_read_for(path, 17, 0, &ids, &n) == TG_OK) {
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= 17) abort();
        free(ids);
    }
    return 0;
}
