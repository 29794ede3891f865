/* Tokenizers: text bytes <-> int32 token ids.
 *
 * Two kinds share one struct and one file format:
 *
 *  - CHAR: one id per distinct byte of the training corpus, in ascending byte order
 *    (ids 0 .. n_chars-1), then <eot> (id n_chars). Encoding a byte the corpus never held is
 *    refused with a message naming the byte and its offset (there is no <unk>: a model trained
 *    without a byte has nothing sensible to say about it, and silently mapping it would make
 *    decode(encode(x)) != x).
 *
 *  - BPE (byte level), trained by tapegrad: ids 0..255 are the 256 bytes, id 256 is <eot>, id
 *    257+i is merge i (the concatenation of merges[i].left and merges[i].right). Any byte
 *    string round-trips, invalid UTF-8 included. Text is first cut into chunks and merges never
 *    cross a chunk boundary. Two pre-split rules exist (TgTokenizerSplit): files of version 1 use
 *    tapegrad's first rule (tg_tokenizer_bpe_chunk_len), and encode with it as they always did;
 *    tokenizers trained now use the GPT-2 rule (tg_tokenizer_gpt2_chunk_len), the one Hugging
 *    Face's ByteLevel pre-tokenizer and llama.cpp's "gpt-2" pre-tokenizer apply, so that an
 *    exported tokenizer encodes alike everywhere. With the GPT-2 rule the text
 *    "<|endoftext|>" (TG_TOKENIZER_EOT_TEXT) is the <eot> token wherever it appears, as it is for
 *    those programs.
 *
 *    Such a BPE may reserve named special tokens (`--special-tokens`): they take the ids 257 ..
 *    256 + n_specials, below the merges (merge i then makes id 257 + n_specials + i), are matched
 *    in the text as whole tokens wherever they appear (never learnt by a merge, never split), and
 *    are saved in the tokenizer file and exported as special (control) tokens.
 *
 *  - BPE imported from a Hugging Face tokenizer.json (tokenizer/tokenizer_hf.h, `hf` set): the
 *    file's ids, vocabulary, merges (in its rank order) and added tokens, the GPT-2 pre-split,
 *    and Hugging Face's handling of bytes that are not UTF-8: those programs take text as
 *    Unicode strings, so each invalid sequence reaches them as U+FFFD, and tapegrad encodes it
 *    as U+FFFD too (unlike its own BPE, which keeps the bytes).
 *
 * Encoding a BPE chunk applies the merges by rank: the adjacent pair of lowest rank (leftmost
 * first among equals) is joined, again and again, as Hugging Face and llama.cpp do. A chunk longer
 * than 4 KiB (never a word: a run of letters without a space, of digits or of white space) is
 * merged 4 KiB at a time, as if the pre-split had cut it there, so that encoding takes bounded
 * memory and time per byte.
 *
 * Text is passed as (const char *, size_t length) and treated as raw bytes; it may contain NUL.
 * <eot> ("end of text") decodes to no bytes; a sampler stops on tok->eot_id.
 *
 * A TgTokenizer owns heap memory: release it with tg_tokenizer_free(). A zeroed struct is "empty"
 * and safe to free.
 */
#ifndef TG_TOKENIZER_H
#define TG_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#include "tapegrad/error.h"
#include "tapegrad/version.h"

#pragma GCC visibility push(default)

typedef enum { TG_TOKENIZER_NONE = 0, TG_TOKENIZER_CHAR = 1, TG_TOKENIZER_BPE = 2 } TgTokenizerKind;

/* How BPE text is cut into chunks before merging (the number is part of the fingerprint). */
typedef enum { TG_TOKENIZER_SPLIT_TAPEGRAD = 0, TG_TOKENIZER_SPLIT_GPT2 = 1 } TgTokenizerSplit;

#define TG_TOKENIZER_EOT_TEXT "<|endoftext|>"

enum {
    TG_TOKENIZER_BPE_BASE = 256,   /* byte ids 0..255 */
    TG_TOKENIZER_BPE_EOT = 256,    /* the <eot> id of every BPE tokenizer */
    TG_TOKENIZER_BPE_FIRST_MERGE = 257,
    TG_TOKENIZER_MAX_CHUNK = 64,   /* tapegrad's BPE tokens are at most this many bytes */
    TG_TOKENIZER_FILE_VERSION = TG_TOKENIZER_FORMAT, /* version 1: char, and BPE with the tapegrad split */
    TG_TOKENIZER_MAX_SPECIALS = 256,    /* named special tokens of a BPE tapegrad trains */
    TG_TOKENIZER_MAX_SPECIAL_BYTES = 64, /* the longest name of one */
};

/* The special tokens `--special-tokens chatml` reserves besides <|endoftext|> (ids 257, 258):
 * ChatML's, as MiniMind's tokenizer and template use them. */
#define TG_TOKENIZER_CHATML_SPECIALS "<|im_start|>,<|im_end|>"

typedef struct TgTokenPair {
    int32_t left, right;
} TgTokenPair;

typedef struct TgBpeRankMap TgBpeRankMap; /* private: pair -> merge rank, for encoding */
typedef struct TgTokenIndex TgTokenIndex; /* private: token bytes -> id (imported tokenizers) */
typedef struct TgAddedMatcher TgAddedMatcher; /* private: finds the added tokens in text */

/* A token matched in the text before the pre-split: Hugging Face's "added tokens". Its text is
 * the token's bytes (tg_tokenizer_token_bytes). */
typedef struct TgTokenizerAdded {
    int32_t id;
    bool special; /* control tokens (<eot>, <|im_start|>, ...), as opposed to added words */
} TgTokenizerAdded;

typedef struct TgTokenizer {
    TgTokenizerKind kind;
    int32_t vocab_size; /* ids are in [0, vocab_size) */
    int32_t eot_id;     /* <eot>: CHAR n_chars, BPE 256; imported: see tokenizer_hf.h */
    bool has_bos;       /* imported only: each document starts with bos_id (tokenizer_hf.h) */
    int32_t bos_id;

    /* CHAR: chars[id] is the byte of id (ascending); id_of_byte[b] is -1 when b is absent. */
    int32_t n_chars;
    uint8_t chars[256];
    int32_t id_of_byte[256];

    /* BPE: merge i (rank i) makes id merge_ids[i] out of merges[i]; for tapegrad's own
     * tokenizers merge_ids is NULL, merge i makes 257 + i and vocab_size = 257 + n_merges. */
    TgTokenizerSplit split;
    int32_t n_merges;
    TgTokenPair *merges;
    int32_t *merge_ids;
    int32_t byte_ids[256];   /* the id of each single byte (b for tapegrad's own) */
    int32_t n_specials;      /* tapegrad's own BPE: named special tokens, ids 257 .. 256 + n_specials */
    char **specials;         /* their names (NUL-terminated) */
    int32_t n_added;         /* matched in text, longest first at the leftmost position; sorted by id */
    TgTokenizerAdded *added;
    bool hf;                 /* imported from a tokenizer.json (see above) */
    bool ignore_merges;      /* hf: a chunk that is itself a token is that token */

    /* Derived (both kinds): the bytes of token `id` are
     * token_bytes[token_offsets[id] .. token_offsets[id + 1]). */
    int64_t *token_offsets; /* vocab_size + 1 entries */
    uint8_t *token_bytes;
    TgBpeRankMap *ranks;      /* BPE only */
    TgTokenIndex *index;      /* hf only */
    TgAddedMatcher *matcher;  /* BPE with added tokens */
    TgAddedMatcher *word_matcher; /* those of them that are not special (control) tokens; NULL for none */
    uint64_t fingerprint;   /* see tg_tokenizer_fingerprint */
} TgTokenizer;

/* Builds a CHAR tokenizer from the distinct bytes of `text`. Refuses an empty text. */
TgStatus tg_tokenizer_char_train(const char *text, size_t len, TgTokenizer *tok);

/* Trains a byte-level BPE tokenizer of exactly `vocab_size` ids on `text`: repeatedly merges the
 * most frequent adjacent pair (counted over chunks, weighted by how often each chunk occurs);
 * ties go to the smallest (left, right) ids. Refuses vocab_size < 257, and a vocab_size the
 * text cannot reach (no adjacent pair left), naming the largest reachable size.
 * On failure `tok` is left empty. */
TgStatus tg_tokenizer_bpe_train(const char *text, size_t len, int32_t vocab_size, TgTokenizer *tok);
/* The same with a chosen pre-split (tg_tokenizer_bpe_train uses TG_TOKENIZER_SPLIT_GPT2). Chunks of
 * more than TG_TOKENIZER_MAX_CHUNK bytes are counted in pieces of that length, so that no token
 * is longer. */
TgStatus tg_tokenizer_bpe_train_split(const char *text, size_t len, int32_t vocab_size, TgTokenizerSplit split,
                                    TgTokenizer *tok);

/* tg_tokenizer_bpe_train with named special tokens reserved (see above): `specials` is a comma
 * list of names ("<|im_start|>,<|im_end|>"), or "chatml" for TG_TOKENIZER_CHATML_SPECIALS; NULL or ""
 * for none. "<|endoftext|>" is <eot> (id 256) and may be listed. A name is 1 to
 * TG_TOKENIZER_MAX_SPECIAL_BYTES bytes of UTF-8 without white space, control characters or commas;
 * a bad or repeated name is refused (TG_ERR_ARG). vocab_size counts the specials. */
TgStatus tg_tokenizer_bpe_train_specials(const char *text, size_t len, int32_t vocab_size, const char *specials,
                                         TgTokenizer *tok);

/* The BPE pre-split rule: the length of the chunk starting at text[0] (1 <= result <= len and
 * <= TG_TOKENIZER_MAX_CHUNK; 0 when len == 0). Byte classes: letters (A-Z, a-z and every byte
 * >= 0x80, so UTF-8 sequences stay whole), digits, space ' ', newlines ('\n', '\r'), and
 * other (punctuation, tab, controls). A chunk is a maximal run of one class, except that a
 * single space joins the letter/digit/other run that follows it (" the", " 42", " ..."): in a
 * run of k spaces before such a run, the first k-1 spaces form their own chunk. Runs longer
 * than TG_TOKENIZER_MAX_CHUNK bytes are cut every TG_TOKENIZER_MAX_CHUNK bytes. */
size_t tg_tokenizer_bpe_chunk_len(const char *text, size_t len);

/* The GPT-2 pre-split: the length of the first match of
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * in text[0..len) (0 when len == 0), with letters, numbers and white space as Unicode defines
 * them (tokenizer/unicode_class.h). Bytes that are not UTF-8 count as one "other" character per
 * maximal subpart, as U+FFFD would. Chunks have no length limit. */
size_t tg_tokenizer_gpt2_chunk_len(const char *text, size_t len);

/* The most ids encoding len bytes can give: len (every byte yields at most one id), or 3 * len
 * for an imported tokenizer (an invalid byte becomes the three bytes of U+FFFD). */
size_t tg_tokenizer_max_ids(const TgTokenizer *tok, size_t len);

/* Encodes len bytes into out[0 .. *n_out); out_cap >= tg_tokenizer_max_ids(tok, len) (out may be
 * NULL when len == 0). CHAR refuses a byte outside its vocabulary (TG_ERR_ARG, naming the byte
 * and offset). */
TgStatus tg_tokenizer_encode(const TgTokenizer *tok, const char *text, size_t len, int32_t *out,
                           size_t out_cap, size_t *n_out);
/* The same, with the text of the special (control) tokens left as text: "<|im_end|>" in it is
 * the ids of those bytes, never the token; added words that are not special are still one id.
 * For text nobody vouches for (what a chat's user types), which must not open or close a turn. */
TgStatus tg_tokenizer_encode_literal(const TgTokenizer *tok, const char *text, size_t len, int32_t *out, size_t out_cap,
                                     size_t *n_out);

/* Decodes n ids into a malloc'ed buffer (*text, caller frees; NUL-terminated for convenience,
 * the terminator not counted in *len). Refuses an id outside [0, vocab_size). */
TgStatus tg_tokenizer_decode(const TgTokenizer *tok, const int32_t *ids, size_t n, char **text,
                           size_t *len);

/* The bytes of one id (not NUL-terminated): for <eot> its text when it has one (the GPT-2 split,
 * imported tokenizers), none otherwise. `id` must be in range. */
const uint8_t *tg_tokenizer_token_bytes(const TgTokenizer *tok, int32_t id, size_t *len);

/* The token every document of a prepared corpus starts after: bos_id when the tokenizer frames
 * documents as BOS + text + EOS (an imported one whose tokenizer_config.json names a BOS, as
 * MiniMind's does), <eot> otherwise (the end of the document before). A prompt is framed alike. */
int32_t tg_tokenizer_doc_start(const TgTokenizer *tok);

/* A 64-bit fingerprint of everything that decides the encoding (kind, vocab size, eot id, the
 * char table or the merge list, the pre-split; for imported tokenizers also every token's
 * bytes, the merge results, the added tokens and the BOS): checkpoints and token files record it so a run can refuse a
 * tokenizer it was not trained with. Never 0 for a built tokenizer. */
uint64_t tg_tokenizer_fingerprint(const TgTokenizer *tok);

/* Saves as a text file (written to path.tmp, fsynced, renamed):
 *
 *     tapegrad-tokenizer 2     (1 for char tokenizers and the tapegrad split, which lack "split")
 *     kind bpe                 ("char" or "bpe")
 *     split gpt2
 *     vocab_size 2048
 *     eot_id 256
 *     merges 1791              (BPE: then one "left right" line per merge, in rank order)
 *     104 101\t# "he"          (anything after '#' is a comment: the merged token, escaped)
 *     ...
 *     fingerprint 0123456789abcdef
 *
 * CHAR writes "chars N" then one decimal byte value per line (ascending) instead of merges.
 * An imported tokenizer is written as a tokenizer.json beside the file, which then holds
 * "file tokenizer.json" in place of the sizes and merges (and the fingerprint, checked on
 * loading the JSON).
 * Loading checks the magic line, the version, every count and id (vocab_size at most
 * TG_MAX_VOCAB, tapegrad/limits.h), and the fingerprint (which catches edits and corruption), and
 * says what is wrong and where. */
TgStatus tg_tokenizer_save(const TgTokenizer *tok, const char *path);
TgStatus tg_tokenizer_load(const char *path, TgTokenizer *tok);

/* Frees what the tokenizer holds and leaves it empty. */
void tg_tokenizer_free(TgTokenizer *tok);

/* "char", "bpe" (or "none"): a static string. */
const char *tg_tokenizer_kind_name(TgTokenizerKind kind);

#pragma GCC visibility pop

#endif
