/* JSON Lines read as a stream: one JSON object a line, from a plain or gzip-compressed file
 * (data/file_stream.h), in bounded memory. Pretraining sets ({"text": "..."}) and conversations
 * ({"conversations": [{"role": ..., "content": ...}]}) are both read through it.
 *
 * The rules, line by line:
 *   - a line ends at '\n'; a '\r' before it is dropped (CRLF files); the last line needs no '\n';
 *   - a UTF-8 byte order mark at the very start of the file is skipped (RFC 8259 lets a reader
 *     ignore one); anywhere else it is an error of its line;
 *   - an empty line, or one of white space only, is skipped and counted (empty_lines);
 *   - every other line must be one JSON object as support/json_reader.h checks it (RFC 8259: strict
 *     UTF-8, escapes, numbers, nesting up to TG_JSON_MAX_DEPTH, nothing after the object); one that
 *     is not is a malformed line, handed to the caller with its number and the reason (the byte
 *     offset within the line included), so the caller decides whether to skip it or stop;
 *   - a line longer than TG_JSONL_MAX_LINE_BYTES is malformed and is skipped without being held:
 *     the reader's memory is at most TG_JSONL_MAX_LINE_BYTES plus two blocks of TG_JSONL_BLOCK_BYTES.
 * A read error, or a truncated or corrupt gzip stream, is an error (a status), not a line.
 * A truncated last line (no '\n', cut inside the object) is a malformed line like any other. */
#ifndef TAPEGRAD_DATA_JSONL_H
#define TAPEGRAD_DATA_JSONL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/file_stream.h"
#include "support/json_reader.h"
#include "tapegrad/error.h"

enum { TG_JSONL_MAX_LINE_BYTES = 64 << 20, TG_JSONL_BLOCK_BYTES = 1 << 20 };

typedef enum { TG_JSONL_OBJECT, TG_JSONL_MALFORMED, TG_JSONL_END } TgJsonlKind;

typedef struct TgJsonlLine {
    TgJsonlKind kind;
    int64_t number;   /* 1 for the file's first line */
    const char *text; /* TG_JSONL_OBJECT: the line, checked JSON, NUL-terminated; valid until the next call */
    size_t len;
    char why[256];    /* TG_JSONL_MALFORMED: "line 12 is not valid JSON: ... at byte 40" */
} TgJsonlLine;

typedef struct TgJsonlReader {
    TgFileStream fs;
    char *buf;
    size_t cap, start, end; /* buf[start, end) read and not yet handed out */
    size_t scanned;         /* buf[start, scanned) holds no '\n' */
    bool at_eof, started;
    int64_t line_no;
    int64_t empty_lines;
} TgJsonlReader;

TgStatus tg_jsonl_open(TgJsonlReader *r, const char *path);
/* The next line that is not empty (line->kind TG_JSONL_OBJECT or TG_JSONL_MALFORMED), or TG_JSONL_END. */
TgStatus tg_jsonl_next(TgJsonlReader *r, TgJsonlLine *line);
void tg_jsonl_close(TgJsonlReader *r);

/* What of a line (no '\n' in it) the rules above judge: *text and *len lose the BOM when it is the
 * first line (`first`); false when it is empty or blank (skipped). tg_jsonl_next applies it, and so
 * must a reader of lines from elsewhere than a file, before tg_jsonl_line_of. */
bool tg_jsonl_line_content(const char **text, size_t *len, bool first);

/* One line already read (text[len] a NUL; no '\n' in it), line number `number`, judged by the rules
 * above: a TG_JSONL_OBJECT, or TG_JSONL_MALFORMED with the reason. For lines that come from elsewhere
 * than a file (a program's standard input). */
void tg_jsonl_line_of(const char *text, size_t len, int64_t number, TgJsonlLine *line);

/* The string member `key` of a TG_JSONL_OBJECT line's object (top level), into *value: false, with
 * the reason in why ("no \"text\" field", "\"text\" is an array, not a string", "\"text\" is
 * given twice"), when there is no such string. tg_json_decode(*value, out) gives its bytes. */
bool tg_jsonl_string_member(const TgJsonlLine *line, const char *key, TgJsonString *value, char *why, size_t why_cap);

/* The name of a JSON type, for messages: "a string", "an object", ... */
const char *tg_json_type_name(TgJsonType type);

#endif
