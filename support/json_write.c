#include "support/json_write.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/error.h"

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

void tg_json_write_double(FILE *f, double v) {
    if (!isfinite(v)) {
        fputs("null", f);
        return;
    }
    char text[32];
    snprintf(text, sizeof text, "%1.15g", v);
    double back = strtod(text, NULL);
    if (!(fabs(back - v) <= fmax(fabs(back), fabs(v)) * DBL_EPSILON)) snprintf(text, sizeof text, "%1.17g", v);
    fputs(text, f);
}

enum { SHORT_ESCAPES = 1, HTML_SAFE = 2 };

static void write_escaped(FILE *f, const char *s, size_t len, int how) {
    static const char short_escape[0x20] = {['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't'};
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < len;) {
        size_t n = utf8_length(p + i, len - i);
        if (n == 0) {
            fputs("\\ufffd", f);
            i++;
        } else if (n == 1 && (p[i] == '"' || p[i] == '\\')) {
            fprintf(f, "\\%c", p[i++]);
        } else if (n == 1 && p[i] < 0x20 && (how & SHORT_ESCAPES) && short_escape[p[i]]) {
            fprintf(f, "\\%c", short_escape[p[i++]]);
        } else if ((n == 1 && p[i] < 0x20) || (p[i] == '<' && (how & HTML_SAFE))) {
            fprintf(f, "\\u%04x", p[i++]);
        } else {
            fwrite(p + i, 1, n, f);
            i += n;
        }
    }
    fputc('"', f);
}

void tg_json_write_bytes(FILE *f, const char *s, size_t len) { write_escaped(f, s, len, 0); }

/* A path or a message may hold any bytes (a message quotes its input, and may be cut short): each
 * goes out as tg_json_write_bytes writes a model's text, so that the line stays UTF-8. */
void tg_json_write_string(FILE *f, const char *s) { tg_json_write_bytes(f, s, strlen(s)); }

/* ---- documents ---- */

TgJsonWriter tg_json_writer(FILE *f, TgJsonLayout layout, bool html_safe) {
    return (TgJsonWriter){.f = f, .layout = layout, .html_safe = html_safe};
}

static void indent(const TgJsonWriter *w, int levels) {
    for (int i = 0; i < levels; i++) fputc('\t', w->f);
}

/* What goes before a value: the separator, and the key inside an object. */
static void before_value(TgJsonWriter *w, const char *key) {
    bool in_object = w->depth > 0 && w->is_object[w->depth];
    TG_CHECK((key != NULL) == in_object, "a JSON value %s a key %s", key ? "with" : "without",
             in_object ? "inside an object" : "outside one");
    if (w->depth == 0) return;
    bool indented = w->layout == TG_JSON_INDENTED, first = !w->has_values[w->depth];
    w->has_values[w->depth] = true;
    if (!in_object) {
        if (!first) fputs(indented ? ", " : ",", w->f);
        return;
    }
    if (indented) {
        fputs(first ? "\n" : ",\n", w->f);
        indent(w, w->depth);
    } else if (!first) {
        fputc(',', w->f);
    }
    write_escaped(w->f, key, strlen(key), SHORT_ESCAPES | (w->html_safe ? HTML_SAFE : 0));
    fputs(indented ? ":\t" : ":", w->f);
}

static void open_container(TgJsonWriter *w, const char *key, bool object) {
    before_value(w, key);
    TG_CHECK(w->depth < TG_JSON_WRITER_DEPTH, "JSON nested deeper than %d", TG_JSON_WRITER_DEPTH);
    w->depth++;
    w->is_object[w->depth] = object;
    w->has_values[w->depth] = false;
    fputc(object ? '{' : '[', w->f);
}

void tg_json_open_object(TgJsonWriter *w, const char *key) { open_container(w, key, true); }
void tg_json_open_array(TgJsonWriter *w, const char *key) { open_container(w, key, false); }

void tg_json_close(TgJsonWriter *w) {
    TG_CHECK(w->depth > 0, "tg_json_close with no container open");
    if (w->is_object[w->depth] && w->layout == TG_JSON_INDENTED) {
        fputc('\n', w->f);
        indent(w, w->depth - 1);
    }
    fputc(w->is_object[w->depth] ? '}' : ']', w->f);
    w->depth--;
}

void tg_json_put_string(TgJsonWriter *w, const char *key, const char *s) {
    before_value(w, key);
    write_escaped(w->f, s, strlen(s), SHORT_ESCAPES | (w->html_safe ? HTML_SAFE : 0));
}

void tg_json_put_number(TgJsonWriter *w, const char *key, double v) {
    before_value(w, key);
    tg_json_write_double(w->f, v);
}

void tg_json_put_bool(TgJsonWriter *w, const char *key, bool v) {
    before_value(w, key);
    fputs(v ? "true" : "false", w->f);
}

void tg_json_put_null(TgJsonWriter *w, const char *key) {
    before_value(w, key);
    fputs("null", w->f);
}
