/* JSON Lines, streamed (jsonl.h). */
#include "data/jsonl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/memory.h"

TgStatus jsonl_open(JsonlReader *r, const char *path) {
    memset(r, 0, sizeof *r);
    TG_TRY(file_stream_open(&r->fs, path));
    TgStatus s = memory_grow((void **)&r->buf, 1 << 16, "reading JSON lines");
    if (s != TG_OK) {
        file_stream_close(&r->fs);
        return s;
    }
    r->cap = 1 << 16;
    return TG_OK;
}

void jsonl_close(JsonlReader *r) {
    file_stream_close(&r->fs);
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* Moves the unread bytes to the front and reads up to a block after them, the buffer doubling from
 * 64 KiB while a line fills it, to the longest line and two blocks at most. */
static TgStatus fill(JsonlReader *r) {
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start, r->scanned -= r->start, r->start = 0;
    }
    const size_t most = (size_t)JSONL_MAX_LINE_BYTES + 2 * JSONL_BLOCK_BYTES + 1;
    if (r->cap - r->end <= JSONL_BLOCK_BYTES && r->cap < most) {
        size_t cap = 2 * r->cap < most ? 2 * r->cap : most;
        TG_TRY(memory_grow((void **)&r->buf, cap, "a JSON line"));
        r->cap = cap;
    }
    size_t room = r->cap - r->end - 1, got; /* a byte stays free for the NUL after a last line */
    TG_TRY(file_stream_read(&r->fs, r->buf + r->end, room < JSONL_BLOCK_BYTES ? room : JSONL_BLOCK_BYTES, &got));
    if (got == 0) r->at_eof = true;
    r->end += got;
    return TG_OK;
}

/* Drops the bytes of an over-long line up to and including its '\n'. */
static TgStatus skip_rest_of_line(JsonlReader *r) {
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

bool jsonl_line_content(const char **text, size_t *len, bool first) {
    if (first && *len >= 3 && memcmp(*text, "\xEF\xBB\xBF", 3) == 0) *text += 3, *len -= 3; /* the BOM */
    return !blank(*text, *len);
}

/* The next raw line into buf[*begin, *begin + *len) (NUL-terminated, '\r\n' and '\n' cut);
 * *too_long when it was longer than the limit (then skipped); false at the end of the file. */
static TgStatus next_raw(JsonlReader *r, size_t *begin, size_t *len, bool *too_long, bool *got) {
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
        if (r->end - r->start > JSONL_MAX_LINE_BYTES) {
            r->line_no++;
            *too_long = *got = true;
            return skip_rest_of_line(r);
        }
        TG_TRY(fill(r));
    }
}

TgStatus jsonl_next(JsonlReader *r, JsonlLine *line) {
    memset(line, 0, sizeof *line);
    for (;;) {
        size_t begin = 0, len = 0;
        bool too_long, got;
        TG_TRY(next_raw(r, &begin, &len, &too_long, &got));
        if (!got) {
            line->kind = JSONL_END;
            return TG_OK;
        }
        line->number = r->line_no;
        if (too_long) {
            line->kind = JSONL_MALFORMED;
            snprintf(line->why, sizeof line->why, "line %lld is longer than %d MiB, the longest line read",
                     (long long)line->number, JSONL_MAX_LINE_BYTES >> 20);
            return TG_OK;
        }
        const char *text = r->buf + begin;
        bool first = !r->started;
        r->started = true;
        if (!jsonl_line_content(&text, &len, first)) {
            r->empty_lines++;
            continue;
        }
        jsonl_line_of(text, len, line->number, line);
        return TG_OK;
    }
}

void jsonl_line_of(const char *text, size_t len, int64_t number, JsonlLine *line) {
    memset(line, 0, sizeof *line);
    line->number = number;
    line->kind = JSONL_MALFORMED;
    char name[48];
    snprintf(name, sizeof name, "line %lld", (long long)number);
    if (json_check(text, len, name) != TG_OK) {
        snprintf(line->why, sizeof line->why, "%s", tg_error_message());
        tg_error_clear();
        return;
    }
    JsonCursor c = json_cursor(text, len, 0);
    JsonType type = json_type(&c);
    if (type != JSON_OBJECT) {
        snprintf(line->why, sizeof line->why, "line %lld is %s, not a JSON object", (long long)number, json_type_name(type));
        return;
    }
    line->kind = JSONL_OBJECT;
    line->text = text;
    line->len = len;
}

const char *json_type_name(JsonType type) {
    switch (type) {
    case JSON_NULL: return "null";
    case JSON_FALSE:
    case JSON_TRUE: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    case JSON_OBJECT: return "an object";
    }
    return "a value";
}

bool jsonl_string_member(const JsonlLine *line, const char *key, JsonString *value, char *why, size_t why_cap) {
    JsonCursor c = json_cursor(line->text, line->len, 0);
    json_enter(&c);
    JsonString k;
    int found = 0;
    JsonType type = JSON_NULL;
    while (json_next_key(&c, &k)) {
        if (json_string_is(k, key)) {
            if (found++ == 0) {
                type = json_type(&c);
                if (type == JSON_STRING) {
                    *value = json_read_string(&c);
                    continue;
                }
            }
        }
        json_skip(&c);
    }
    if (found == 1 && type == JSON_STRING) return true;
    if (found == 0) snprintf(why, why_cap, "line %lld has no \"%s\" field", (long long)line->number, key);
    else if (found > 1) snprintf(why, why_cap, "line %lld gives \"%s\" twice", (long long)line->number, key);
    else snprintf(why, why_cap, "line %lld: \"%s\" is %s, not a string", (long long)line->number, key, json_type_name(type));
    return false;
}
