/* Weights to and from safetensors, under the Llama/MiniMind names the parameters already carry
 * (model.embed_tokens.weight, model.layers.{i}.self_attn.q_proj.weight, ...; the output head is
 * tied to the embedding, so there is no lm_head.weight). */
#ifndef TAPEGRAD_MODEL_WEIGHTS_FILE_H
#define TAPEGRAD_MODEL_WEIGHTS_FILE_H

#include <stdint.h>

#include "support/messages.h"
#include "model/safetensors.h"
#include "tapegrad/error.h"
#include "tapegrad/model.h"
#include "tapegrad/tokenizer.h"

/* What exported weights record of the tokenizer they were trained with, as safetensors metadata
 * (hex, 16 digits): "tokenizer_fingerprint", the run's (tg_tokenizer_fingerprint, as its
 * checkpoints record it), and in a Hugging Face folder "tokenizer_json_fingerprint", the one its
 * tokenizer.json has when a run imports it (--tokenizer hf:DIR/tokenizer.json). 0: not recorded. */
#define TG_WEIGHTS_TOKENIZER_KEY "tokenizer_fingerprint"
#define TG_WEIGHTS_TOKENIZER_JSON_KEY "tokenizer_json_fingerprint"
typedef struct TgWeightsTokenizer {
    uint64_t fingerprint, json_fingerprint;
} TgWeightsTokenizer;

/* Writes the weights (F32, under the parameters' names, format "pt", `source_note` as the
 * "source" metadata when not NULL, the tokenizer's fingerprints when not 0) to `path`,
 * atomically. */
TgStatus tg_model_write_weights(const TgModel *model, const char *path, const char *source_note, TgWeightsTokenizer tok);
/* Loads every weight of `model` from a safetensors file: each must be present with the model's
 * shape (F32, F16, BF16 or F64) and finite (the first NaN or Inf is named, tensor and index), and
 * the file may hold nothing else. Weights that record a tokenizer (TgWeightsTokenizer) are refused
 * (TG_ERR_MISMATCH) unless it is `tok` (NULL: not checked), naming both and how to train with
 * theirs; weights that record none (from elsewhere) load, with a note to `messages` (may be
 * NULL). The model is unchanged on failure; the AdamW moments are not touched. */
TgStatus tg_model_import_safetensors(TgModel *model, const char *path, const TgTokenizer *tok, const TgMessageSink *messages);
/* The tokenizer fingerprints `f` records (0 for a key that is absent); TG_ERR_FORMAT for a value
 * that is not 16 hex digits. */
TgStatus tg_weights_tokenizer_read(const TgStFile *f, TgWeightsTokenizer *out);

#endif
