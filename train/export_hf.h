/* A Hugging Face model folder that transformers loads as LlamaForCausalLM without custom code:
 *
 *   config.json             the Llama config (hidden_size, intermediate_size, num_hidden_layers,
 *                           num_attention_heads, num_key_value_heads, vocab_size, rope_theta,
 *                           rms_norm_eps, max_position_embeddings, tie_word_embeddings, ...)
 *   model.safetensors       the weights, F32, under the names they already carry (the head is
 *                           tied: there is no lm_head.weight)
 *   generation_config.json  <eot> as bos and eos
 *   tokenizer.json          the run's tokenizer (data/tokenizer_hf.h)
 *   tokenizer_config.json   PreTrainedTokenizerFast, <eot> as bos, eos and pad
 *
 * tapegrad's model is the Llama architecture (RMSNorm, RoPE rotating halves (i, i + hd/2) as
 * transformers' rotate_half does, GQA, SwiGLU w2(silu(w1 x) * w3 x)), so the weights need no
 * change. A ReLU-FFN model is not: its export is refused. */
#ifndef TAPEGRAD_TRAIN_EXPORT_HF_H
#define TAPEGRAD_TRAIN_EXPORT_HF_H

#include <stdbool.h>

#include "tapegrad/tokenizer.h"
#include "tapegrad/error.h"
#include "tapegrad/model.h"

/* TG_ERR_MISMATCH with the reason when the model is not a Llama model (a ReLU FFN). */
TgStatus export_check_llama(const TgModelConfig *cfg);

/* Writes the folder `dir` (created with its parents when missing). An existing folder that
 * holds anything is refused unless `force`, which replaces the five files and keeps the rest.
 * The model and the tokenizer are checked before anything is written. */
TgStatus model_export_hf(const TgModel *model, const TgTokenizer *tok, const char *dir, bool force, const char *source_note);

#endif
