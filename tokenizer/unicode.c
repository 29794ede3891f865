/* Unicode class look-ups (unicode_class.h). */
#include "tokenizer/unicode_class.h"

#include <stdbool.h>

static bool in_ranges(const TgUnicodeRange *r, size_t n, uint32_t cp) {
    size_t a = 0, b = n;
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (cp < r[mid].lo) b = mid;
        else if (cp > r[mid].hi) a = mid + 1;
        else return true;
    }
    return false;
}

TgUnicodeClass tg_unicode_class(uint32_t cp) {
    if (cp < 0x80) { /* ASCII without a search: most text is */
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return TG_UNICODE_LETTER;
        if (cp >= '0' && cp <= '9') return TG_UNICODE_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return TG_UNICODE_SPACE;
        return TG_UNICODE_OTHER;
    }
    if (cp == TG_UTF8_INVALID) return TG_UNICODE_OTHER;
    if (in_ranges(tg_unicode_letter_ranges, tg_unicode_letter_ranges_count, cp)) return TG_UNICODE_LETTER;
    if (in_ranges(tg_unicode_number_ranges, tg_unicode_number_ranges_count, cp)) return TG_UNICODE_NUMBER;
    if (in_ranges(tg_unicode_space_ranges, tg_unicode_space_ranges_count, cp)) return TG_UNICODE_SPACE;
    return TG_UNICODE_OTHER;
}
