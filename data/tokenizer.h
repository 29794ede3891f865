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
 *  - BPE (byte level): ids 0..255 are the 256 bytes, id 256 is <eot>, id 257+i is merge i
 *    (the concatenation of merges[i].left and merges[i].right). Any byte string round-trips,
 *    invalid UTF-8 included. Text is first cut into chunks (see tokenizer_bpe_chunk_len) and
 *    merges never cross a chunk boundary.
 *
 * Text is passed as (const char *, size_t length) and treated as raw bytes; it may contain NUL.
 * <eot> ("end of text") decodes to no bytes; a sampler stops on tok->eot_id.
 *
 * A Tokenizer owns heap memory: release it with tokenizer_free(). A zeroed struct is "empty"
 * and safe to free.
 */
#ifndef TAPEGRAD_DATA_TOKENIZER_H
#define TAPEGRAD_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "lib/error.h"

typedef enum { TOKENIZER_NONE = 0, TOKENIZER_CHAR = 1, TOKENIZER_BPE = 2 } TokenizerKind;

enum {
    TOKENIZER_BPE_BASE = 256,   /* byte ids 0..255 */
    TOKENIZER_BPE_EOT = 256,    /* the <eot> id of every BPE tokenizer */
    TOKENIZER_BPE_FIRST_MERGE = 257,
    TOKENIZER_MAX_CHUNK = 64,   /* BPE chunks (hence tokens) are at most this many bytes */
    TOKENIZER_FILE_VERSION = 1,
};

typedef struct TokenPair {
    int32_t left, right;
} TokenPair;

typedef struct BpeRankMap BpeRankMap; /* private: pair -> merge rank, for encoding */

typedef struct Tokenizer {
    TokenizerKind kind;
    int32_t vocab_size; /* ids are in [0, vocab_size) */
    int32_t eot_id;     /* <eot>: CHAR n_chars, BPE 256 */

    /* CHAR: chars[id] is the byte of id (ascending); id_of_byte[b] is -1 when b is absent. */
    int32_t n_chars;
    uint8_t chars[256];
    int32_t id_of_byte[256];

    /* BPE: merge i makes id 257 + i out of merges[i]; vocab_size = 257 + n_merges. */
    int32_t n_merges;
    TokenPair *merges;

    /* Derived (both kinds): the bytes of token `id` are
     * token_bytes[token_offsets[id] .. token_offsets[id + 1]). */
    int64_t *token_offsets; /* vocab_size + 1 entries */
    uint8_t *token_bytes;
    BpeRankMap *ranks;      /* BPE only */
    uint64_t fingerprint;   /* see tokenizer_fingerprint */
} Tokenizer;

/* Builds a CHAR tokenizer from the distinct bytes of `text`. Refuses an empty text. */
tg_status tokenizer_char_train(const char *text, size_t len, Tokenizer *tok);

/* Trains a byte-level BPE tokenizer of exactly `vocab_size` ids on `text`: repeatedly merges the
 * most frequent adjacent pair (counted over chunks, weighted by how often each chunk occurs);
 * ties go to the smallest (left, right) ids. Refuses vocab_size < 257, and a vocab_size the
 * text cannot reach (no adjacent pair left), naming the largest reachable size.
 * On failure `tok` is left empty. */
tg_status tokenizer_bpe_train(const char *text, size_t len, int32_t vocab_size, Tokenizer *tok);

/* The BPE pre-split rule: the length of the chunk starting at text[0] (1 <= result <= len and
 * <= TOKENIZER_MAX_CHUNK; 0 when len == 0). Byte classes: letters (A-Z, a-z and every byte
 * >= 0x80, so UTF-8 sequences stay whole), digits, space ' ', newlines ('\n', '\r'), and
 * other (punctuation, tab, controls). A chunk is a maximal run of one class, except that a
 * single space joins the letter/digit/other run that follows it (" the", " 42", " ..."): in a
 * run of k spaces before such a run, the first k-1 spaces form their own chunk. Runs longer
 * than TOKENIZER_MAX_CHUNK bytes are cut every TOKENIZER_MAX_CHUNK bytes. */
size_t tokenizer_bpe_chunk_len(const char *text, size_t len);

/* Encodes len bytes into out[0 .. *n_out). Every byte yields at most one id, so `out` needs
 * room for `len` ids (out_cap >= len; out may be NULL when len == 0).
 * CHAR refuses a byte outside its vocabulary (TG_ERR_ARG, naming the byte and offset). */
tg_status tokenizer_encode(const Tokenizer *tok, const char *text, size_t len, int32_t *out,
                           size_t out_cap, size_t *n_out);

/* Decodes n ids into a malloc'ed buffer (*text, caller frees; NUL-terminated for convenience,
 * the terminator not counted in *len). Refuses an id outside [0, vocab_size). */
tg_status tokenizer_decode(const Tokenizer *tok, const int32_t *ids, size_t n, char **text,
                           size_t *len);

/* The bytes of one id (not NUL-terminated; <eot> has none). `id` must be in range. */
const uint8_t *tokenizer_token_bytes(const Tokenizer *tok, int32_t id, size_t *len);

/* A 64-bit fingerprint of everything that decides the encoding (kind, vocab size, eot id, the
 * char table or the merge list): checkpoints and token files record it so a run can refuse a
 * tokenizer it was not trained with. Never 0 for a built tokenizer. */
uint64_t tokenizer_fingerprint(const Tokenizer *tok);

/* Saves as a text file (written to path.tmp, fsynced, renamed):
 *
 *     tapegrad-tokenizer 1
 *     kind bpe                 ("char" or "bpe")
 *     vocab_size 2048
 *     eot_id 256
 *     merges 1791              (BPE: then one "left right" line per merge, in rank order)
 *     104 101\t# "he"          (anything after '#' is a comment: the merged token, escaped)
 *     ...
 *     fingerprint 0123456789abcdef
 *
 * CHAR writes "chars N" then one decimal byte value per line (ascending) instead of merges.
 * Loading checks the magic line, the version, every count and id (vocab_size at most
 * TG_MAX_VOCAB, lib/limits.h), and the fingerprint (which catches edits and corruption), and
 * says what is wrong and where. */
tg_status tokenizer_save(const Tokenizer *tok, const char *path);
tg_status tokenizer_load(const char *path, Tokenizer *tok);

void tokenizer_free(Tokenizer *tok);

const char *tokenizer_kind_name(TokenizerKind kind);

#endif
