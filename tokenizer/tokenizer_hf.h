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
 * are their UTF-8 text, which may not hold a NUL (U+0000). Every id from 0 up must be named
 * once, and every byte must have a token.
 *
 * Added tokens are kept sorted by id, whatever their order in the file, so that what the run
 * saves (tokenizer.txt, and a tokenizer.json that lists them by id) has the fingerprint of what
 * was imported. The same entry twice is kept once (Hugging Face's tokenizers do the same); two
 * entries giving one id different contents, or the same content once special and once not, are
 * refused, naming both. The end-of-text token (tok->eot_id) is the special added token
 * "<|endoftext|>", or else the special added token of the lowest id.
 *
 * A tokenizer_config.json in the same folder (as Hugging Face keeps one beside it) may change
 * that: when its "bos_token" names a special added token other than <eot> and its "eos_token"
 * (MiniMind's: "<|im_start|>" and "<|im_end|>"), the tokenizer frames documents as MiniMind's
 * pretraining does, BOS + text + EOS: tok->bos_id is the BOS and tok->eot_id the EOS. A BOS that
 * is <eot> or the EOS (GPT-2 names <|endoftext|> for both), or none, changes nothing. Only the
 * two members are read (a string, an object with its "content", or null); a token the
 * tokenizer does not have as special is refused, naming the file. A run saves such a tokenizer
 * with a tokenizer_config.json of those two members beside its tokenizer.json.
 *
 * The file must be JSON as RFC 8259 writes it (support/json_reader.h): UTF-8, nothing after the
 * object, no member that tapegrad reads given twice; each refusal names the byte offset.
 *
 * Limits (a tokenizer.json may come from anywhere): TG_TOKENIZER_HF_MAX_BYTES of JSON,
 * TG_TOKENIZER_HF_MAX_IDS ids and merges, TG_TOKENIZER_HF_MAX_ADDED added tokens holding at most
 * TG_TOKENIZER_HF_MAX_ADDED_BYTES of text in all.
 *
 * Memory: reading a file of F bytes takes at most 10 F + 64 MiB (peak RSS above the caller's),
 * whatever it holds. The file's text (F) is read whole and freed before the encoding tables are
 * built; what tapegrad skips costs nothing more. Each vocabulary entry (at least 5 bytes of
 * JSON) keeps its bytes, an offset (8 bytes) and an index slot (at most 16 bytes), and needs 8
 * more while it is read; each merge (at least 6 bytes) keeps 12 bytes and up to 48 of the rank
 * map that encoding probes (at most half full): 5.8 bytes a byte of vocabulary, 10 a byte of
 * merges at the worst. The added tokens' automaton (tokenizer/tokenizer_added.c) takes 13 bytes a
 * byte of their text: at most 52 MiB, in the constant. An allocation that fails is "out of
 * memory reading FILE (...)" (TG_ERR_NOMEM), never a parse error and never an abort.
 * docs/results.md has the figures measured on crafted files (bench/tokenizer_bench.c).
 */
#ifndef TAPEGRAD_TOKENIZER_HF_H
#define TAPEGRAD_TOKENIZER_HF_H

#include <stdbool.h>

#include "tapegrad/tokenizer.h"

#define TG_TOKENIZER_HF_FILE "tokenizer.json"
#define TG_TOKENIZER_HF_CONFIG_FILE "tokenizer_config.json"
#define TG_TOKENIZER_HF_CONFIG_MAX_BYTES ((size_t)16 << 20)
#define TG_TOKENIZER_HF_MAX_BYTES ((size_t)256 << 20)
enum { TG_TOKENIZER_HF_MAX_IDS = 1 << 22, TG_TOKENIZER_HF_MAX_ADDED = 1 << 16, TG_TOKENIZER_HF_MAX_ADDED_BYTES = 1 << 22 };

/* Loads a tokenizer.json (see above) as an imported BPE tokenizer (tok->hf). On failure tok is
 * left empty. */
TgStatus tg_tokenizer_hf_load(const char *path, TgTokenizer *tok);

/* Whether tok can be written as a tokenizer.json (and embedded in GGUF): a char tokenizer
 * (as a byte-level BPE without merges over the corpus's bytes, <eot> as "<|endoftext|>"), a
 * BPE with the GPT-2 split, an imported one. A BPE with tapegrad's first split is refused
 * with the reason: no other program cuts text that way. */
TgStatus tg_tokenizer_hf_check_exportable(const TgTokenizer *tok);

/* Writes tok as a tokenizer.json at path (atomically). */
TgStatus tg_tokenizer_hf_save(const TgTokenizer *tok, const char *path);

/* The text of token `id` in tokenizer.json's vocabulary and GGUF's token list: its bytes
 * through GPT-2's byte-to-character map, or an added token's own text (for <eot> of a char
 * tokenizer "<|endoftext|>"). malloc'ed, NUL-terminated. */
char *tg_tokenizer_hf_token_text(const TgTokenizer *tok, int32_t id);

/* The bytes the vocabulary string s[0..len) (UTF-8) stands for through GPT-2's byte map, into
 * out (room for len bytes), *n of them: false when a character is outside the map. */
bool tg_tokenizer_hf_bytes_of_text(const char *s, size_t len, uint8_t *out, size_t *n);

/* Whether `id` is matched as a whole in text (an added token, or <eot>); *special tells a
 * control token from an added word. */
bool tg_tokenizer_hf_is_added(const TgTokenizer *tok, int32_t id, bool *special);

#endif
