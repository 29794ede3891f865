/* The corpus reader (a file, and a folder of up to three files: the input split at
 * FUZZ_SEPARATOR, one of them a skipped *.dat), the binary rule, and the tokenizers trained on
 * what it read: both must encode the text and decode it back to the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/corpus.h"
#include "data/prepare.h"
#include "tapegrad/tokenizer.h"
#include "fuzz_support.h"

/* BPE training grows with the text: a few kB of it is enough to reach every path */
enum { BPE_TEXT_MAX = 4096, BPE_VOCAB = 300 };

/* Encoding then decoding gives the text back, but for the GPT-2 split's "<|endoftext|>": that
 * text is the <eot> token, and <eot> decodes to no bytes (tapegrad/tokenizer.h). */
static void round_trip(const TgTokenizer *tok, const char *text, size_t len) {
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    size_t n;
    if (tg_tokenizer_encode(tok, text, len, ids, len, &n) != TG_OK) abort();
    char *back, *want = malloc(len + 1);
    size_t back_len, want_len = 0, eot_len = strlen(TG_TOKENIZER_EOT_TEXT);
    for (size_t i = 0; i < len;) {
        if (tok->kind == TG_TOKENIZER_BPE && tok->split == TG_TOKENIZER_SPLIT_GPT2 && len - i >= eot_len &&
            memcmp(text + i, TG_TOKENIZER_EOT_TEXT, eot_len) == 0) {
            i += eot_len;
            continue;
        }
        want[want_len++] = text[i++];
    }
    if (tg_tokenizer_decode(tok, ids, n, &back, &back_len) != TG_OK || back_len != want_len ||
        memcmp(back, want, want_len) != 0)
        abort();
    free(back);
    free(want);
    free(ids);
}

static void read_and_tokenize(const char *path) {
    char *text;
    size_t len;
    TgCorpusInfo info;
    if (tg_corpus_read_info(path, &text, &len, &info) != TG_OK) return;
    if (tg_corpus_is_binary(text, len) && info.files_read == 1 && info.files_binary == 0) abort(); /* it was read as text */
    TgTokenizer tok;
    if (tg_tokenizer_char_train(text, len, &tok) == TG_OK) {
        round_trip(&tok, text, len);
        tg_tokenizer_free(&tok);
    }
    size_t bpe_len = len < BPE_TEXT_MAX ? len : BPE_TEXT_MAX;
    if (tg_tokenizer_bpe_train(text, bpe_len, BPE_VOCAB, &tok) == TG_OK) {
        round_trip(&tok, text, bpe_len);
        tg_tokenizer_free(&tok);
    }
    size_t n_train, n_val;
    tg_corpus_split(len, TG_PREPARE_DEFAULT_VAL_FRACTION, 8, &n_train, &n_val);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    read_and_tokenize(fuzz_write("corpus.txt", data, size));
    const uint8_t *parts[3];
    size_t lens[3];
    fuzz_split(data, size, 3, parts, lens);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/folder", fuzz_scratch());
    mkdir(dir, 0700);
    fuzz_write("folder/a.txt", parts[0], lens[0]);
    fuzz_write("folder/b.dat", parts[1], lens[1]);
    fuzz_write("folder/c", parts[2], lens[2]);
    read_and_tokenize(dir);
    return 0;
}
