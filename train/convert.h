/* Weights to and from safetensors, under the Llama/MiniMind names the parameters already carry
 * (model.embed_tokens.weight, model.layers.{i}.self_attn.q_proj.weight, ...; the output head is
 * tied to the embedding, so there is no lm_head.weight). */
#ifndef TAPEGRAD_CONVERT_H
#define TAPEGRAD_CONVERT_H

#include <stdbool.h>
#include <stddef.h>

#include "tapegrad/error.h"
#include "tapegrad/model.h"
#include "train/output_check.h"

/* Writes the weights (F32, under the parameters' names, format "pt", `source_note` as the
 * "source" metadata when not NULL) to `path`, atomically. */
TgStatus model_write_weights(const TgModel *model, const char *path, const char *source_note);
/* The outputs of model_export_safetensors, checked before anything is read or written
 * (train/output_check.h): `path`, and config.json beside it, which may stay without `force` when
 * it already says what the export writes (the config `cfg`). */
TgStatus model_export_safetensors_check(OutputPlan *plan, const char *path, const TgModelConfig *cfg, bool force);
/* Writes the weights (F32) to `path` and the model config to config.json in the same folder:
 * dim, n_layers, n_heads, n_kv_heads, hidden_dim, vocab_size, max_seq_len, rope_theta, norm_eps,
 * ffn, tie_word_embeddings. Both files are written atomically; the folder
 * is created when missing. Check both paths first (model_export_safetensors_check).
 * config_path_out may be NULL. */
TgStatus model_export_safetensors(const TgModel *model, const char *path, const char *source_note,
                                  char *config_path_out, size_t cap);
/* Loads every weight of `model` from a safetensors file: each must be present with the model's
 * shape (F32, F16, BF16 or F64), and the file may hold nothing else. The model is unchanged on
 * failure; the AdamW moments are not touched. */
TgStatus model_import_safetensors(TgModel *model, const char *path);

#endif
