/* JSON checked, then read in place (see json_reader.h). */
#include "support/json_reader.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/utf8.h"

/* ---- the check ------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *t;
    size_t len, pos;
    const char *name;
} Scan;

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static void skip_ws(Scan *s) {
    while (s->pos < s->len && is_ws(s->t[s->pos])) s->pos++;
}

static TgStatus invalid(const Scan *s, size_t at, const char *what) {
    return tg_fail(TG_ERR_FORMAT, "%s is not valid JSON: %s at byte %zu", s->name, what, at);
}

static int hex_value(unsigned char c) {
    if (is_digit(c)) return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
    return -1;
}

/* The 4 hex digits of a \u escape at t[at] ('\\'), or -1. */
static long escape_u(const Scan *s, size_t at) {
    if (at + 6 > s->len || s->t[at + 1] != 'u') return -1;
    long v = 0;
    for (size_t i = at + 2; i < at + 6; i++) {
        int h = hex_value(s->t[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static TgStatus check_escape(Scan *s) {
    size_t at = s->pos;
    if (at + 1 >= s->len) return invalid(s, at, "a string that never ends");
    unsigned char e = s->t[at + 1];
    if (strchr("\"\\/bfnrt", e) && e) {
        s->pos += 2;
        return TG_OK;
    }
    if (e != 'u') {
        char what[64];
        snprintf(what, sizeof what, e >= 0x20 && e < 0x7f ? "an unknown escape \\%c" : "an unknown escape (byte 0x%02x)", e);
        return invalid(s, at, what);
    }
    long u = escape_u(s, at);
    if (u < 0) return invalid(s, at, "a \\u escape without 4 hex digits");
    if (u >= 0xDC00 && u <= 0xDFFF) return invalid(s, at, "a \\u escape of a low surrogate with no high one before it");
    if (u >= 0xD800 && u <= 0xDBFF) {
        long low = escape_u(s, at + 6);
        if (s->t[at + 6] != '\\' || low < 0xDC00 || low > 0xDFFF)
            return invalid(s, at, "a \\u escape of a high surrogate with no low one after it");
        s->pos += 12;
        return TG_OK;
    }
    s->pos += 6;
    return TG_OK;
}

static TgStatus check_string(Scan *s) {
    size_t start = s->pos++;
    while (s->pos < s->len) {
        unsigned char c = s->t[s->pos];
        if (c == '"') {
            s->pos++;
            return TG_OK;
        }
        if (c == '\\') {
            TG_TRY(check_escape(s));
        } else if (c < 0x20) {
            char what[96];
            snprintf(what, sizeof what, "a control character (0x%02x) not written as an escape in a string", c);
            return invalid(s, s->pos, what);
        } else if (c < 0x80) {
            s->pos++;
        } else {
            uint32_t cp;
            size_t n = tg_utf8_next(s->t + s->pos, s->len - s->pos, &cp);
            if (cp == TG_UTF8_INVALID) {
                char what[96];
                snprintf(what, sizeof what, "byte 0x%02x, which is not UTF-8 (JSON text is UTF-8),", c);
                return invalid(s, s->pos, what);
            }
            s->pos += n;
        }
    }
    return invalid(s, start, "a string that never ends, from its quote");
}

static TgStatus check_number(Scan *s) {
    size_t start = s->pos;
    const unsigned char *t = s->t;
    if (t[s->pos] == '-') s->pos++;
    if (s->pos < s->len && t[s->pos] == '0') {
        if (++s->pos < s->len && is_digit(t[s->pos])) return invalid(s, start, "a malformed number (a leading zero)");
    }
    else if (s->pos < s->len && is_digit(t[s->pos])) while (s->pos < s->len && is_digit(t[s->pos])) s->pos++;
    else return invalid(s, start, "a malformed number");
    if (s->pos < s->len && t[s->pos] == '.') {
        s->pos++;
        if (s->pos >= s->len || !is_digit(t[s->pos])) return invalid(s, start, "a malformed number");
        while (s->pos < s->len && is_digit(t[s->pos])) s->pos++;
    }
    if (s->pos < s->len && (t[s->pos] | 0x20) == 'e') {
        s->pos++;
        if (s->pos < s->len && (t[s->pos] == '+' || t[s->pos] == '-')) s->pos++;
        if (s->pos >= s->len || !is_digit(t[s->pos])) return invalid(s, start, "a malformed number");
        while (s->pos < s->len && is_digit(t[s->pos])) s->pos++;
    }
    return TG_OK;
}

static TgStatus check_literal(Scan *s, const char *word) {
    size_t n = strlen(word);
    if (s->len - s->pos < n || memcmp(s->t + s->pos, word, n) != 0) return invalid(s, s->pos, "expected a value");
    s->pos += n;
    return TG_OK;
}

/* A scalar value, or the opening bracket of a container (pushed: *opened). */
static TgStatus check_value_start(Scan *s, char *stack, int *depth, bool *opened) {
    *opened = false;
    skip_ws(s);
    if (s->pos >= s->len) return invalid(s, s->pos, "expected a value, found the end of the text,");
    unsigned char c = s->t[s->pos];
    switch (c) {
    case '{':
    case '[':
        if (*depth == TG_JSON_MAX_DEPTH) {
            char what[64];
            snprintf(what, sizeof what, "nesting deeper than %d levels", TG_JSON_MAX_DEPTH);
            return invalid(s, s->pos, what);
        }
        stack[(*depth)++] = (char)c;
        s->pos++;
        *opened = true;
        return TG_OK;
    case '"': return check_string(s);
    case 't': return check_literal(s, "true");
    case 'f': return check_literal(s, "false");
    case 'n': return check_literal(s, "null");
    default:
        if (c == '-' || is_digit(c)) return check_number(s);
        return invalid(s, s->pos, "expected a value");
    }
}

/* In an object, after '{' or ',': a key, then ':'. */
static TgStatus check_key(Scan *s) {
    skip_ws(s);
    if (s->pos >= s->len || s->t[s->pos] != '"') return invalid(s, s->pos, "expected a string (a key)");
    TG_TRY(check_string(s));
    skip_ws(s);
    if (s->pos >= s->len || s->t[s->pos] != ':') return invalid(s, s->pos, "expected ':' after a key");
    s->pos++;
    return TG_OK;
}

TgStatus tg_json_check(const char *text, size_t len, const char *name) {
    TG_CHECK(text[len] == '\0', "json_check needs a NUL after the text");
    Scan s = {(const unsigned char *)text, len, 0, name};
    char stack[TG_JSON_MAX_DEPTH]; /* '{' or '[' of each open container */
    int depth = 0;
    bool opened;
    skip_ws(&s);
    char root = s.pos < len ? text[s.pos] : 0;
    TG_TRY(check_value_start(&s, stack, &depth, &opened));
    while (depth > 0) { /* just after a container opened, or after one of its members */
        char open = stack[depth - 1], close = open == '{' ? '}' : ']';
        skip_ws(&s);
        if (s.pos < len && text[s.pos] == close) {
            s.pos++;
            depth--;
            opened = false;
            continue;
        }
        if (!opened) {
            if (s.pos >= len || text[s.pos] != ',') return invalid(&s, s.pos, open == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
            s.pos++;
        }
        if (open == '{') TG_TRY(check_key(&s));
        TG_TRY(check_value_start(&s, stack, &depth, &opened));
    }
    skip_ws(&s);
    if (s.pos < len)
        return tg_fail(TG_ERR_FORMAT, "%s: text after the JSON %s at byte %zu", name,
                       root == '{' ? "object" : root == '[' ? "array" : "value", s.pos);
    return TG_OK;
}

/* ---- the cursor (on checked text) ------------------------------------------------------- */

static void cursor_ws(TgJsonCursor *c) {
    while (c->pos < c->len && is_ws((unsigned char)c->text[c->pos])) c->pos++;
}

TgJsonCursor tg_json_cursor(const char *text, size_t len, size_t pos) { return (TgJsonCursor){text, len, pos}; }

TgJsonType tg_json_type(TgJsonCursor *c) {
    cursor_ws(c);
    switch (c->pos < c->len ? c->text[c->pos] : 'n') {
    case '{': return TG_JSON_OBJECT;
    case '[': return TG_JSON_ARRAY;
    case '"': return TG_JSON_STRING;
    case 't': return TG_JSON_TRUE;
    case 'f': return TG_JSON_FALSE;
    case 'n': return TG_JSON_NULL;
    default: return TG_JSON_NUMBER;
    }
}

/* Past the string whose quote is at c->pos. */
static void skip_string(TgJsonCursor *c) {
    c->pos++;
    while (c->pos < c->len && c->text[c->pos] != '"') c->pos += c->text[c->pos] == '\\' ? 2 : 1;
    c->pos++;
}

void tg_json_skip(TgJsonCursor *c) {
    TgJsonType type = tg_json_type(c);
    if (type == TG_JSON_STRING) {
        skip_string(c);
    } else if (type == TG_JSON_OBJECT || type == TG_JSON_ARRAY) {
        size_t depth = 0;
        do {
            char ch = c->text[c->pos];
            if (ch == '"') {
                skip_string(c);
                continue;
            }
            if (ch == '{' || ch == '[') depth++;
            else if (ch == '}' || ch == ']') depth--;
            c->pos++;
        } while (depth > 0 && c->pos < c->len);
    } else { /* a number or a literal runs to the next delimiter */
        while (c->pos < c->len && !strchr(",]} \t\n\r", c->text[c->pos])) c->pos++;
    }
}

void tg_json_enter(TgJsonCursor *c) {
    cursor_ws(c);
    c->pos++;
}

/* Past a ',' before the next member; false (and past the bracket) at the end of the container. */
static bool next_member(TgJsonCursor *c) {
    cursor_ws(c);
    if (c->pos < c->len && c->text[c->pos] == ',') {
        c->pos++;
        cursor_ws(c);
    }
    if (c->pos >= c->len || c->text[c->pos] == '}' || c->text[c->pos] == ']') {
        c->pos++;
        return false;
    }
    return true;
}

bool tg_json_next_key(TgJsonCursor *c, TgJsonString *key) {
    if (!next_member(c)) return false;
    *key = tg_json_read_string(c);
    cursor_ws(c);
    c->pos++; /* ':' */
    return true;
}

bool tg_json_next_item(TgJsonCursor *c) { return next_member(c); }

size_t tg_json_count(const TgJsonCursor *c) {
    TgJsonCursor at = *c;
    TgJsonType type = tg_json_type(&at);
    if (type != TG_JSON_OBJECT && type != TG_JSON_ARRAY) return 0;
    bool object = type == TG_JSON_OBJECT;
    tg_json_enter(&at);
    size_t n = 0;
    TgJsonString key;
    while (object ? tg_json_next_key(&at, &key) : tg_json_next_item(&at)) {
        n++;
        tg_json_skip(&at);
    }
    return n;
}

size_t tg_json_find(const TgJsonCursor *object, const char *key, TgJsonCursor *value) {
    TgJsonCursor at = *object;
    if (tg_json_type(&at) != TG_JSON_OBJECT) return 0;
    tg_json_enter(&at);
    size_t n = 0;
    TgJsonString k;
    while (tg_json_next_key(&at, &k)) {
        if (tg_json_string_is(k, key) && n++ == 0 && value) {
            *value = at;
            tg_json_type(value); /* at the value itself, past the white space */
        }
        tg_json_skip(&at);
    }
    return n;
}

TgJsonString tg_json_read_string(TgJsonCursor *c) {
    cursor_ws(c);
    TgJsonString s = {c->text + c->pos + 1, 0, c->pos};
    skip_string(c);
    s.raw_len = c->pos - s.pos - 2;
    return s;
}

double tg_json_read_number(TgJsonCursor *c) {
    cursor_ws(c);
    char *end;
    double v = strtod(c->text + c->pos, &end); /* stops where the checked number does */
    c->pos = (size_t)(end - c->text);
    return v;
}

static unsigned hex4(const char *p) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) v = v * 16 + (unsigned)hex_value((unsigned char)p[i]);
    return v;
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes the character or escape at s.raw[*i] into out (up to 4 bytes); returns their count. */
static size_t decode_one(TgJsonString s, size_t *i, char *out) {
    char ch = s.raw[*i];
    if (ch != '\\') {
        out[0] = ch;
        *i += 1;
        return 1;
    }
    char e = s.raw[*i + 1];
    *i += 2;
    switch (e) {
    case 'b': out[0] = '\b'; return 1;
    case 'f': out[0] = '\f'; return 1;
    case 'n': out[0] = '\n'; return 1;
    case 'r': out[0] = '\r'; return 1;
    case 't': out[0] = '\t'; return 1;
    case 'u': {
        uint32_t cp = hex4(s.raw + *i);
        *i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* the check saw the low half follow */
            cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(s.raw + *i + 2) - 0xDC00);
            *i += 6;
        }
        return put_utf8(out, cp);
    }
    default: out[0] = e; return 1; /* '"', '\\', '/' */
    }
}

size_t tg_json_decode(TgJsonString s, char *out) {
    size_t n = 0;
    for (size_t i = 0; i < s.raw_len;) n += decode_one(s, &i, out + n);
    return n;
}

char *tg_json_decode_alloc(TgJsonString s, size_t *len) {
    char *out = malloc(s.raw_len + 1);
    if (!out) return NULL;
    size_t n = tg_json_decode(s, out);
    out[n] = '\0';
    if (len) *len = n;
    return out;
}

bool tg_json_string_is(TgJsonString s, const char *lit) {
    size_t n = strlen(lit), at = 0;
    for (size_t i = 0; i < s.raw_len;) {
        char bytes[4];
        size_t k = decode_one(s, &i, bytes);
        if (at + k > n || memcmp(lit + at, bytes, k) != 0) return false;
        at += k;
    }
    return at == n;
}
