/* UTF-8 decoding (RFC 3629, with the maximal-subpart rule for errors). */
#include "support/utf8.h"

#include <stdbool.h>
#include <string.h>

/* The range of the second byte after lead byte b (the first continuation byte is narrowed to
 * exclude overlong forms, surrogates and code points past U+10FFFF); false for no lead byte. */
static bool second_byte_range(unsigned char b, unsigned char *lo, unsigned char *hi, size_t *need) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) *need = 2;
    else if (b >= 0xE0 && b <= 0xEF) *need = 3;
    else if (b >= 0xF0 && b <= 0xF4) *need = 4;
    else return false;
    if (b == 0xE0) *lo = 0xA0;
    else if (b == 0xED) *hi = 0x9F;
    else if (b == 0xF0) *lo = 0x90;
    else if (b == 0xF4) *hi = 0x8F;
    return true;
}

size_t tg_utf8_next(const unsigned char *s, size_t len, uint32_t *cp) {
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    unsigned char lo, hi;
    size_t need;
    *cp = TG_UTF8_INVALID;
    if (!second_byte_range(s[0], &lo, &hi, &need)) return 1;
    uint32_t value = s[0] & (need == 2 ? 0x1Fu : need == 3 ? 0x0Fu : 0x07u);
    for (size_t i = 1; i < need; i++) {
        if (i >= len || s[i] < lo || s[i] > hi) return i; /* the maximal subpart ends before s[i] */
        value = (value << 6) | (s[i] & 0x3Fu);
        lo = 0x80;
        hi = 0xBF;
    }
    *cp = value;
    return need;
}

size_t tg_utf8_mark_invalid(const char *s, size_t len, char *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t at = 0, n = 0;
    while (at < len) {
        uint32_t cp;
        size_t k = tg_utf8_next(u + at, len - at, &cp);
        if (cp == TG_UTF8_INVALID) {
            memcpy(out + n, "\xEF\xBF\xBD", 3);
            n += 3;
        } else {
            memcpy(out + n, s + at, k);
            n += k;
        }
        at += k;
    }
    return n;
}
