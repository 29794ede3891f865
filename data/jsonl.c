/* JSON Lines, streamed (jsonl.h). */
#include "data/jsonl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/memory.h"

TgStatus tg_jsonl_open(TgJsonlReader *r, const char *path) {
    memset(r, 0, sizeof *r);
    TG_TRY(tg_file_stream_open(&r->fs, path));
    TgStatus s = tg_memory_grow((void **)&r->buf, 1 << 16, "reading JSON lines");
    if (s != TG_OK) {
        tg_file_stream_close(&r->fs);
        return s;
    }
    r->cap = 1 << 16;
    return TG_OK;
}

void tg_jsonl_close(TgJsonlReader *r) {
    tg_file_stream_close(&r->fs);
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* Moves the unread bytes to the front and reads up to a block after them, the buffer doubling from
 * 64 KiB while a line fills it, to the longest line and two blocks at most. */
static TgStatus fill(TgJsonlReader *r) {
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start, r->scanned -= r->start, r->start = 0;
    }
    const size_t most = (size_t)TG_JSONL_MAX_LINE_BYTES + 2 * TG_JSONL_BLOCK_BYTES + 1;
    if (r->cap - r->end <= TG_JSONL_BLOCK_BYTES && r->cap < most) {
        size_t cap = 2 * r->cap < most ? 2 * r->cap : most;
        TG_TRY(tg_memory_grow((void **)&r->buf, cap, "a JSON line"));
        r->cap = cap;
    }
    size_t room = r->cap - r->end - 1, got; /* a byte stays free for the NUL after a last line */
    TG_TRY(tg_file_stream_read(&r->fs, r->buf + r->end, room < TG_JSONL_BLOCK_BYTES ? room : TG_JSONL_BLOCK_BYTES, &got));
    if (got == 0) r->at_eof = true;
    r->end += got;
    return TG_OK;
}

/* Drops the bytes of an over-long line up to and including its '\n'. */
static TgStatus skip_rest_of_line(TgJsonlReader *r) {
    for (;;) {
        char *nl = memchr(r->buf + r->start, '\n', r->end - r->start);
        if (nl) {
            r->start = r->scanned = (size_t)(nl - r->buf) + 1;
            return TG_OK;
        }
        r->start = r->scanned = r->end;
        if (r->at_eof) return TG_OK;
        TG_TRY(fill(r));
    }
}

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return false;
    return true;
}

bool tg_jsonl_line_content(const char **text, size_t *len, bool first) {
    if (first && *len >= 3 && memcmp(*text, "\xEF\xBB\xBF", 3) == 0) *text += 3, *len -= 3; /* the BOM */
    return !blank(*text, *len);
}

/* The next raw line into buf[*begin, *begin + *len) (NUL-terminated, '\r\n' and '\n' cut);
 * *too_long when it was longer than the limit (then skipped); false at the end of the file. */
static TgStatus next_raw(TgJsonlReader *r, size_t *begin, size_t *len, bool *too_long, bool *got) {
    *got = *too_long = false;
    for (;;) {
        char *nl = memchr(r->buf + r->scanned, '\n', r->end - r->scanned);
        if (nl || (r->at_eof && r->end > r->start)) {
            size_t stop = nl ? (size_t)(nl - r->buf) : r->end;
            *begin = r->start;
            *len = stop - r->start;
            if (*len > 0 && r->buf[stop - 1] == '\r') (*len)--;
            r->buf[*begin + *len] = '\0'; /* there is always a byte after the data: cap > end */
            r->start = r->scanned = nl ? stop + 1 : r->end;
            r->line_no++;
            *got = true;
            return TG_OK;
        }
        if (r->at_eof) return TG_OK;
        r->scanned = r->end;
        if (r->end - r->start > TG_JSONL_MAX_LINE_BYTES) {
            r->line_no++;
            *too_long = *got = true;
            return skip_rest_of_line(r);
        }
        TG_TRY(fill(r));
    }
}

TgStatus tg_jsonl_next(TgJsonlReader *r, TgJsonlLine *line) {
    memset(line, 0, sizeof *line);
    for (;;) {
        size_t begin = 0, len = 0;
        bool too_long, got;
        TG_TRY(next_raw(r, &begin, &len, &too_long, &got));
        if (!got) {
            line->kind = TG_JSONL_END;
            return TG_OK;
        }
        line->number = r->line_no;
        if (too_long) {
            line->kind = TG_JSONL_MALFORMED;
            snprintf(line->why, sizeof line->why, "line %lld is longer than %d MiB, the longest line read",
                     (long long)line->number, TG_JSONL_MAX_LINE_BYTES >> 20);
            return TG_OK;
        }
        const char *text = r->buf + begin;
        bool first = !r->started;
        r->started = true;
        if (!tg_jsonl_line_content(&text, &len, first)) {
            r->empty_lines++;
            continue;
        }
        tg_jsonl_line_of(text, len, line->number, line);
        return TG_OK;
    }
}

void tg_jsonl_line_of(const char *text, size_t len, int64_t number, TgJsonlLine *line) {
    memset(line, 0, sizeof *line);
    line->number = number;
    line->kind = TG_JSONL_MALFORMED;
    char name[48];
    snprintf(name, sizeof name, "line %lld", (long long)number);
    if (tg_json_check(text, len, name) != TG_OK) {
        snprintf(line->why, sizeof line->why, "%s", tg_error_message());
        tg_error_clear();
        return;
    }
    TgJsonCursor c = tg_json_cursor(text, len, 0);
    TgJsonType type = tg_json_type(&c);
    if (type != TG_JSON_OBJECT) {
        snprintf(line->why, sizeof line->why, "line %lld is %s, not a JSON object", (long long)number, tg_json_type_name(type));
        return;
    }
    line->kind = TG_JSONL_OBJECT;
    line->text = text;
    line->len = len;
}

const char *tg_json_type_name(TgJsonType type) {
    switch (type) {
    case TG_JSON_NULL: return "null";
    case TG_JSON_FALSE:
    case TG_JSON_TRUE: return "a boolean";
    case TG_JSON_NUMBER: return "a number";
    case TG_JSON_STRING: return "a string";
    case TG_JSON_ARRAY: return "an array";
    case TG_JSON_OBJECT: return "an object";
    }
    return "a value";
}

bool tg_jsonl_string_member(const TgJsonlLine *line, const char *key, TgJsonString *value, char *why, size_t why_cap) {
    TgJsonCursor c = tg_json_cursor(line->text, line->len, 0);
    tg_json_enter(&c);
    TgJsonString k;
    int found = 0;
    TgJsonType type = TG_JSON_NULL;
    while (tg_json_next_key(&c, &k)) {
        if (tg_json_string_is(k, key)) {
            if (found++ == 0) {
                type = tg_json_type(&c);
                if (type == TG_JSON_STRING) {
                    *value = tg_json_read_string(&c);
                    continue;
                }
            }
        }
        tg_json_skip(&c);
    }
    if (found == 1 && type == TG_JSON_STRING) return true;
    if (found == 0) snprintf(why, why_cap, "line %lld has no \"%s\" field", (long long)line->number, key);
    else if (found > 1) snprintf(why, why_cap, "line %lld gives \"%s\" twice", (long long)line->number, key);
    else snprintf(why, why_cap, "line %lld: \"%s\" is %s, not a string", (long long)line->number, key, tg_json_type_name(type));
    return false;
}
