/* UTF-8, decoded one code point at a time (support/utf8.c). */
#ifndef TAPEGRAD_SUPPORT_UTF8_H
#define TAPEGRAD_SUPPORT_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* What tg_utf8_next reports for bytes that are not well-formed UTF-8. */
#define TG_UTF8_INVALID UINT32_MAX

/* The code point starting at s[0] (len >= 1): returns its length in bytes and sets *cp. Bytes
 * that are not well-formed UTF-8 give *cp = TG_UTF8_INVALID and the length of the maximal
 * subpart (the longest prefix of a well-formed sequence, at least 1 byte): the unit that
 * decoders replacing errors with U+FFFD replace, as WHATWG's TextDecoder, Python's
 * errors="replace" and Rust's from_utf8_lossy do. */
size_t tg_utf8_next(const unsigned char *s, size_t len, uint32_t *cp);
/* The len bytes of s with every maximal subpart that is not UTF-8 replaced by U+FFFD (EF BF BD),
 * into out (room for 3 x len bytes): a model's text cut inside a character prints a mark, not a
 * stray byte. Returns the bytes written. */
size_t tg_utf8_mark_invalid(const char *s, size_t len, char *out);

#endif
