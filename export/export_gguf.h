/* GGUF (version 3) for llama.cpp and the programs built on it (ollama, LM Studio, ...):
 * architecture "llama", the weights as F32, F16 or Q8_0, and the run's tokenizer embedded.
 *
 * Tensors (GGUF lists dimensions innermost first, so a PyTorch [out, in] weight is {in, out}
 * with the same bytes): token_embd.weight, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output,
 * ffn_norm, ffn_gate (w1), ffn_up (w3), ffn_down (w2)}.weight, output_norm.weight; no
 * output.weight, which tells llama.cpp the head is tied to token_embd.
 *
 * RoPE: llama.cpp's llama architecture rotates the pairs (2i, 2i+1) of a head, tapegrad (like
 * transformers) the pairs (i, i + hd/2), both at angle pos * theta^(-2i/hd). So the rows of
 * attn_q and attn_k are permuted within each head, new row 2i + s = old row s * hd/2 + i
 * (s = 0, 1): the query and key of every head then hold the same numbers in llama.cpp's order,
 * their rotated dot products are unchanged, and v and the output projection need nothing.
 *
 * Norm weights stay F32 in every type; Q8_0 (blocks of 32 weights, one F16 scale max|w|/127
 * and 32 int8) needs rows whose length is a multiple of 32, and falls back to F16 otherwise.
 *
 * TgTokenizer: model "gpt2" (byte-level BPE) with the pre-tokenizer "gpt-2", the GPT-2 regex
 * tapegrad's BPE splits with; tokens in Hugging Face's text form, merges as "left right",
 * <eot> (and imported special tokens) as control tokens, bos = eos = <eot>, no BOS added. A
 * model fine-tuned on conversations (`chat` given) has <|im_end|> as eos, and the ChatML template
 * (data/chat_format.h) as tokenizer.chat_template, which llama.cpp applies to a conversation. */
#ifndef TAPEGRAD_EXPORT_GGUF_H
#define TAPEGRAD_EXPORT_GGUF_H

#include "data/chat_format.h"
#include "tapegrad/tokenizer.h"
#include "tapegrad/error.h"
#include "tapegrad/model.h"

/* The weight types: X(ID, "name"), giving TG_GGUF_WEIGHTS_<ID>; the first is the default. */
#define TG_GGUF_WEIGHT_TYPES(X) \
    X(F32, "f32")               \
    X(F16, "f16")               \
    X(Q8_0, "q8_0")

typedef enum {
#define TG_GGUF_WEIGHTS_ENUM(id, name) TG_GGUF_WEIGHTS_##id,
    TG_GGUF_WEIGHT_TYPES(TG_GGUF_WEIGHTS_ENUM)
#undef TG_GGUF_WEIGHTS_ENUM
    TG_GGUF_WEIGHTS_COUNT
} TgGgufWeights;

/* "f32|f16|q8_0": the choices, for a flag's help */
#define TG_GGUF_WEIGHTS_CHOICES TG_ENUM_CHOICES(TG_GGUF_WEIGHT_TYPES)

/* tg_gguf_weights_name: "f32", ...; tg_gguf_weights_parse: the type of a name (tapegrad/error.h) */
TG_ENUM_DECLARE(TgGgufWeights, tg_gguf_weights);

/* Writes the model and its tokenizer to `path` (atomically). Refuses a model that is not a Llama
 * model and a tokenizer no llama.cpp pre-tokenizer reproduces, before writing anything. */
TgStatus tg_model_export_gguf(const TgModel *model, const TgTokenizer *tok, const TgChatTokens *chat,
                              TgChatTemplate chat_template, const char *path, TgGgufWeights weights);

/* Writes the model's LoRA adapters as a llama.cpp LoRA adapter (atomically): general.type
 * "adapter", adapter.type "lora", adapter.lora.alpha, and per adapted weight W of the base's GGUF
 * the F32 tensors W.lora_a (A, {in, r}) and W.lora_b (B, {r, out}), e.g. blk.0.attn_q.weight.lora_a;
 * the rows of B for attn_q and attn_k permuted as the base's rows are. llama.cpp adds
 * scale * alpha / r * B (A x) to W x. TG_ERR_ARG when the model has no adapters, and when it
 * trains token rows (TgLoraConfig.tokens), which the format cannot hold, unless base_has_rows
 * says the base exported beside it holds them (tg_lora_place_token_rows). */
TgStatus tg_model_export_gguf_adapter(const TgModel *model, const char *path, bool base_has_rows);

#endif
