/* The safetensors reader from a buffer (tg_st_open_buffer, every entry read as float and as int),
 * and the importer behind `train --init-from` into a model of the seed run's shape. */
#include <stdbool.h>
#include <stdlib.h>

#include "fuzz_support.h"
#include "model/safetensors.h"
#include "export/convert.h"

/* The shape of the run the seeds come from (make_seeds.sh), so that seeds get past the checks
 * of every tensor's name and shape. */
/* the fingerprint of the seed run's tokenizer, as its export records it */
#define FUZZ_SEED_TOKENIZER 0x694058cfaaca2283ULL

static TgModel *seed_model(void) {
    static TgModel model;
    static bool built;
    if (!built) {
        TgModelConfig c = {.dim = 4, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1, .hidden = 8, .vocab = 17,
                         .seq_len = 8, .ffn = TG_FFN_SWIGLU, .rope_theta = 1e6, .norm_eps = 1e-5};
        tg_model_build(&model, &c);
        built = true;
    }
    return &model;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    TgStFile *file;
    if (tg_st_open_buffer("fuzz.safetensors", data, size, &file) == TG_OK) {
        for (size_t i = 0; i < tg_st_count(file); i++) {
            const TgStEntry *e = tg_st_entry_at(file, i);
            /* numel <= nbytes <= size: every dtype takes at least a byte */
            void *out = malloc((size_t)e->numel * 4 + 4);
            tg_st_read_f32(file, e->name, out, e->numel);
            tg_st_read_i32(file, e->name, out, e->numel);
            if (tg_st_find(file, e->name) != e) abort(); /* names are unique: each finds itself */
            free(out);
        }
        TgWeightsTokenizer recorded;
        tg_weights_tokenizer_read(file, &recorded);
        for (size_t i = 0; i < tg_st_metadata_count(file); i++) {
            const char *key, *value;
            tg_st_metadata_at(file, i, &key, &value);
            if (tg_st_metadata(file, key) != value) abort();
        }
        tg_st_close(file);
    }
    /* the seeds record the tokenizer of the run they come from (make_seeds.sh): a mutation gets
     * past the check of the fingerprint only when it keeps it */
    static const TgTokenizer seed_tokenizer = {.kind = TG_TOKENIZER_CHAR, .vocab_size = 17, .fingerprint = FUZZ_SEED_TOKENIZER};
    tg_model_import_safetensors(seed_model(), fuzz_write("w.safetensors", data, size), &seed_tokenizer, NULL);
    return 0;
}
