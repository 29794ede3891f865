/* Hugging Face tokenizer.json: importing a byte-level BPE, and writing any tapegrad tokenizer as
 * one that Hugging Face's tokenizers (Python, Rust, JavaScript) load.
 *
 * Importing accepts what a byte-level BPE such as MiniMind's or GPT-2's is made of:
 *   model          {"type": "BPE", "vocab": {token: id}, "merges": ["a b", ...] or [["a", "b"], ...],
 *                   "ignore_merges": bool}; no dropout, subword prefix or suffix, byte fallback
 *   pre_tokenizer  {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}
 *   normalizer     null
 *   added_tokens   [{"id", "content", "special", "lstrip": false, "rstrip": false,
 *                    "single_word": false}], matched in text before the pre-split
 * and refuses anything else with a one-line reason naming the field. The post-processor and the
 * decoder are not read: tapegrad encodes text as Hugging Face's encode(text,
 * add_special_tokens=False) does and decodes ids to their bytes. Vocabulary tokens are the
 * bytes of a token through GPT-2's byte-to-character map (ByteLevel's alphabet); added tokens
 * are their UTF-8 text. Every id from 0 up must be named once, and every byte must have a token.
 * The end-of-text token (tok->eot_id) is the special added token "<|endoftext|>", or the first
 * special added token when there is none of that name.
 *
 * Limits (a tokenizer.json may come from anywhere): TOKENIZER_HF_MAX_BYTES of JSON,
 * TOKENIZER_HF_MAX_IDS ids and merges, TOKENIZER_HF_MAX_ADDED added tokens.
 */
#ifndef TAPEGRAD_DATA_TOKENIZER_HF_H
#define TAPEGRAD_DATA_TOKENIZER_HF_H

#include <stdbool.h>

#include "tapegrad/tokenizer.h"

#define TOKENIZER_HF_FILE "tokenizer.json"
#define TOKENIZER_HF_MAX_BYTES ((size_t)256 << 20)
enum { TOKENIZER_HF_MAX_IDS = 1 << 22, TOKENIZER_HF_MAX_ADDED = 1 << 16 };

/* Loads a tokenizer.json (see above) as an imported BPE tokenizer (tok->hf). On failure tok is
 * left empty. */
TgStatus tokenizer_hf_load(const char *path, TgTokenizer *tok);

/* Whether tok can be written as a tokenizer.json (and embedded in GGUF): a char tokenizer
 * (as a byte-level BPE without merges over the corpus's bytes, <eot> as "<|endoftext|>"), a
 * BPE with the GPT-2 split, an imported one. A BPE with tapegrad's first split is refused
 * with the reason: no other program cuts text that way. */
TgStatus tokenizer_hf_check_exportable(const TgTokenizer *tok);

/* Writes tok as a tokenizer.json at path (atomically). */
TgStatus tokenizer_hf_save(const TgTokenizer *tok, const char *path);

/* The text of token `id` in tokenizer.json's vocabulary and GGUF's token list: its bytes
 * through GPT-2's byte-to-character map, or an added token's own text (for <eot> of a char
 * tokenizer "<|endoftext|>"). malloc'ed, NUL-terminated. */
char *tokenizer_hf_token_text(const TgTokenizer *tok, int32_t id);

/* Whether `id` is matched as a whole in text (an added token, or <eot>); *special tells a
 * control token from an added word. */
bool tokenizer_hf_is_added(const TgTokenizer *tok, int32_t id, bool *special);

#endif
