/* Unicode class look-ups (unicode_class.h). */
#include "tokenizer/unicode_class.h"

#include <stdbool.h>

static bool in_ranges(const UnicodeRange *r, size_t n, uint32_t cp) {
    size_t a = 0, b = n;
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (cp < r[mid].lo) b = mid;
        else if (cp > r[mid].hi) a = mid + 1;
        else return true;
    }
    return false;
}

UnicodeClass unicode_class(uint32_t cp) {
    if (cp < 0x80) { /* ASCII without a search: most text is */
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return UNICODE_LETTER;
        if (cp >= '0' && cp <= '9') return UNICODE_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return UNICODE_SPACE;
        return UNICODE_OTHER;
    }
    if (cp == UTF8_INVALID) return UNICODE_OTHER;
    if (in_ranges(unicode_letter_ranges, unicode_letter_ranges_count, cp)) return UNICODE_LETTER;
    if (in_ranges(unicode_number_ranges, unicode_number_ranges_count, cp)) return UNICODE_NUMBER;
    if (in_ranges(unicode_space_ranges, unicode_space_ranges_count, cp)) return UNICODE_SPACE;
    return UNICODE_OTHER;
}
