/* The pre-split rules (tokenizer_internal.h): how a text is cut into chunks before BPE merges
 * each, tapegrad's own rule and GPT-2's. Training counts chunks and encoding merges them, so both
 * take them from here. */
#include <stdbool.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode_class.h"

/* ---- tapegrad's pre-split ---- */

enum { CLASS_LETTER, CLASS_DIGIT, CLASS_SPACE, CLASS_NEWLINE, CLASS_OTHER };

static int byte_class(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return CLASS_LETTER;
    if (c >= '0' && c <= '9') return CLASS_DIGIT;
    if (c == ' ') return CLASS_SPACE;
    if (c == '\n' || c == '\r') return CLASS_NEWLINE;
    return CLASS_OTHER;
}

/* A space may lead a run of these. */
static bool joins_space(int cls) { return cls == CLASS_LETTER || cls == CLASS_DIGIT || cls == CLASS_OTHER; }

size_t tg_tokenizer_bpe_chunk_len(const char *text, size_t len) {
    if (len == 0) return 0;
    const unsigned char *b = (const unsigned char *)text;
    const size_t max = TG_TOKENIZER_MAX_CHUNK;
    size_t limit = len < max ? len : max;
    int cls = byte_class(b[0]);
    size_t i = 1;
    if (cls == CLASS_SPACE) {
        /* Scan at most max+1 bytes: a longer run is cut at max whatever follows it. */
        while (i < len && i <= max && b[i] == ' ') i++;
        if (i > max) return max;
        if (i < len && joins_space(byte_class(b[i]))) {
            if (i > 1) return i - 1; /* the last space goes with the word */
            int next = byte_class(b[1]);
            i = 2;
            while (i < limit && byte_class(b[i]) == next) i++;
            return i;
        }
        return i;
    }
    while (i < limit && byte_class(b[i]) == cls) i++;
    return i;
}

/* ---- pre-split ------------------------------------------------------------------------- */

static TgUnicodeClass class_at(const unsigned char *b, size_t len, size_t i, size_t *n) {
    uint32_t cp;
    *n = tg_utf8_next(b + i, len - i, &cp);
    return tg_unicode_class(cp);
}

/* 's 't 'm 'd 're 've 'll: the length of the contraction at b[0], or 0. */
static size_t contraction_len(const unsigned char *b, size_t len) {
    if (len < 2 || b[0] != '\'') return 0;
    if (b[1] == 's' || b[1] == 't' || b[1] == 'm' || b[1] == 'd') return 2;
    if (len >= 3 && ((b[1] == 'r' && b[2] == 'e') || (b[1] == 'v' && b[2] == 'e') || (b[1] == 'l' && b[2] == 'l')))
        return 3;
    return 0;
}

size_t tg_tokenizer_gpt2_chunk_len(const char *text, size_t len) {
    if (len == 0) return 0;
    const unsigned char *b = (const unsigned char *)text;
    size_t n = contraction_len(b, len);
    if (n) return n;
    TgUnicodeClass run = class_at(b, len, 0, &n);
    size_t start = 0;
    if (b[0] == ' ' && len > 1) { /* " ?X+": one space joins the run of letters, numbers or others after it */
        size_t n1;
        TgUnicodeClass next = class_at(b, len, 1, &n1);
        if (next != TG_UNICODE_SPACE) {
            run = next;
            start = 1;
        }
    }
    size_t i = start;
    if (run != TG_UNICODE_SPACE) {
        while (i < len && class_at(b, len, i, &n) == run) i += n;
        return i;
    }
    size_t last = 0; /* the start of the run's last white-space character */
    while (i < len && class_at(b, len, i, &n) == TG_UNICODE_SPACE) {
        last = i;
        i += n;
    }
    /* "\s+(?!\S)": before a non-space, the run gives up its last character, which then stands
     * alone (or, if it is a space, leads the next chunk); "\s+" takes a run of one, or the end */
    if (i < len && last > 0) return last;
    return i;
}

size_t tg_tokenizer_chunk_len(TgTokenizerSplit split, const char *text, size_t len) {
    return split == TG_TOKENIZER_SPLIT_GPT2 ? tg_tokenizer_gpt2_chunk_len(text, len) : tg_tokenizer_bpe_chunk_len(text, len);
}

