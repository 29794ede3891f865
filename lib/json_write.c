#include "lib/json_write.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

void tg_json_write_number(FILE *f, double v, int digits) {
    if (isfinite(v)) fprintf(f, "%.*g", digits, v);
    else fputs("null", f);
}

void tg_json_write_field(FILE *f, const char *key, double v, int digits) {
    fprintf(f, ",\"%s\":", key);
    tg_json_write_number(f, v, digits);
}

/* The length of the UTF-8 sequence at s[0..n) (1 to 4), or 0 when it is not one: a stray
 * continuation byte, an overlong form, a surrogate, past U+10FFFF, or cut short. */
static size_t utf8_length(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (len == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0))) return 0; /* overlong, surrogate */
    if (len == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))) return 0; /* overlong, too large */
    return len;
}

void tg_json_write_bytes(FILE *f, const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < len;) {
        size_t n = utf8_length(p + i, len - i);
        if (n == 0) {
            fputs("\\ufffd", f);
            i++;
        } else if (n == 1 && (p[i] == '"' || p[i] == '\\')) {
            fprintf(f, "\\%c", p[i++]);
        } else if (n == 1 && p[i] < 0x20) {
            fprintf(f, "\\u%04x", p[i++]);
        } else {
            fwrite(p + i, 1, n, f);
            i += n;
        }
    }
    fputc('"', f);
}

/* A path or a message may hold any bytes (a message quotes its input, and may be cut short): each
 * goes out as tg_json_write_bytes writes a model's text, so that the line stays UTF-8. */
void tg_json_write_string(FILE *f, const char *s) { tg_json_write_bytes(f, s, strlen(s)); }
