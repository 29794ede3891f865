/* A Hugging Face model folder that transformers loads as LlamaForCausalLM without custom code:
 *
 *   config.json             the Llama config (hidden_size, intermediate_size, num_hidden_layers,
 *                           num_attention_heads, num_key_value_heads, vocab_size, rope_theta,
 *                           rms_norm_eps, max_position_embeddings, tie_word_embeddings, ...)
 *   model.safetensors       the weights, F32, under the names they already carry (the head is
 *                           tied: there is no lm_head.weight)
 *   generation_config.json  <eot> as bos and eos
 *   tokenizer.json          the run's tokenizer (tokenizer/tokenizer_hf.h)
 *   tokenizer_config.json   PreTrainedTokenizerFast, <eot> as bos, eos and pad
 *
 * A model fine-tuned on conversations (a chat model: `chat` given) ends its replies with
 * <|im_end|>: that is its eos (config.json, tokenizer_config.json; generation_config.json stops at
 * <|im_end|> or <eot>), and tokenizer_config.json holds the ChatML "chat_template" (Jinja,
 * data/chat_format.h) that apply_chat_template renders as tapegrad's chat does.
 *
 * tapegrad's model is the Llama architecture (RMSNorm, RoPE rotating halves (i, i + hd/2) as
 * transformers' rotate_half does, GQA, SwiGLU w2(silu(w1 x) * w3 x)), so the weights need no
 * change. A ReLU-FFN model is not: its export is refused. */
#ifndef TAPEGRAD_EXPORT_HF_H
#define TAPEGRAD_EXPORT_HF_H

#include <stdbool.h>

#include "tapegrad/tokenizer.h"
#include "tapegrad/error.h"
#include "tapegrad/model.h"
#include "data/chat_format.h"
#include "tokenizer/tokenizer_hf.h"
#include "run/output_check.h"

/* TG_ERR_MISMATCH with the reason when no Llama (or, with QK-norm, Qwen3) config describes the
 * model (a ReLU FFN). */
TgStatus tg_export_check_llama(const TgModelConfig *cfg);

/* The names of the files the folder gets. */
#define TG_EXPORT_HF_FILES {"config.json", "model.safetensors", "generation_config.json", TG_TOKENIZER_HF_FILE, "tokenizer_config.json"}

/* The outputs of tg_model_export_hf, checked before anything is read or written
 * (run/output_check.h): the folder (not a run folder; one that holds anything is refused
 * unless `force`, which replaces the five files and keeps the rest), and each of its five files. */
TgStatus tg_model_export_hf_check(TgOutputPlan *plan, const char *dir, bool force);

/* A PEFT LoRA adapter for the --hf export of the base: adapter_model.safetensors (the adapters,
 * named base_model.model.<tapegrad's name>, A (r, in), B (out, r), F32) and adapter_config.json
 * (r, lora_alpha, target_modules q_proj ... down_proj). PEFT's forward is W x + (alpha / r) B A x,
 * tapegrad's own. _check: as tg_model_export_hf_check, for those two files. */
#define TG_EXPORT_PEFT_FILES {"adapter_model.safetensors", "adapter_config.json"}
TgStatus tg_model_export_peft_check(TgOutputPlan *plan, const char *dir, bool force);
TgStatus tg_model_export_peft(const TgModel *model, const char *dir);
/* An adapter export of a run that trains token rows beside its adapters (--lora-tokens) is refused:
 * TG_ERR_ARG saying `why` the format lacks them and naming the merged export (`merged_flag`). */
TgStatus tg_export_adapter_check(const TgLora *lora, const char *why, const char *merged_flag);
/* Writes the folder `dir` (created with its parents when missing), checked first
 * (tg_model_export_hf_check); `chat` (NULL for a model not fine-tuned on conversations) its ChatML
 * markers, `chat_template` the template tokenizer_config.json gets (data/chat_tools.h). model.safetensors records the
 * run's tokenizer fingerprint and the one the folder's tokenizer.json has when a run imports it (export/convert.h:
 * TgWeightsTokenizer). The model and the tokenizer are checked before anything is written. */
TgStatus tg_model_export_hf(const TgModel *model, const TgTokenizer *tok, const TgChatTokens *chat,
                            TgChatTemplate chat_template, const char *dir, const char *source_note);

#endif
