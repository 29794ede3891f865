/* A model exported as safetensors (model/weights_file.h) with its config.json beside it. */
#ifndef TAPEGRAD_EXPORT_CONVERT_H
#define TAPEGRAD_EXPORT_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/weights_file.h"
#include "tapegrad/error.h"
#include "tapegrad/model.h"
#include "run/output_check.h"

/* The outputs of tg_model_export_safetensors, checked before anything is read or written
 * (run/output_check.h): `path`, and config.json beside it, which may stay without `force` when
 * it already says what the export writes (the config `cfg` and the tokenizer's fingerprint). */
TgStatus tg_model_export_safetensors_check(TgOutputPlan *plan, const char *path, const TgModelConfig *cfg,
                                        uint64_t tokenizer_fingerprint, bool force);
/* Writes the weights (F32) to `path` and the model config to config.json in the same folder:
 * dim, n_layers, n_heads, n_kv_heads, hidden_dim, vocab_size, max_seq_len, rope_theta, norm_eps,
 * ffn, tie_word_embeddings, tokenizer_fingerprint. Both files are written atomically; the folder
 * is created when missing. Check both paths first (tg_model_export_safetensors_check).
 * config_path_out may be NULL. */
TgStatus tg_model_export_safetensors(const TgModel *model, const char *path, const char *source_note,
                                  uint64_t tokenizer_fingerprint, char *config_path_out, size_t cap);

#endif
