/* JSON read where it lies: a strict check of a whole text, then a cursor over its values that
 * builds no tree. Every JSON file tapegrad reads goes through it: tokenizer.json
 * (tokenizer/tokenizer_hf_read.c), safetensors headers (model/safetensors.c), the lines of
 * metrics.jsonl and grads.jsonl (inspect/run_history.c), JSON Lines sources and conversations.
 *
 * Why no tree (cJSON's, say): a tree costs about 80 bytes a value (an array of one-digit numbers
 * becomes 40 times its text), so what a file holds but a reader ignores would still take memory
 * out of proportion to it; and a tree's strings end at their first NUL, so "a\u0000b" would read
 * as "a". Here skipping a value allocates nothing, and a string is decoded into the caller's
 * buffer with its length.
 *
 * tg_json_check accepts exactly RFC 8259's JSON text: one value with white space around it,
 * strings of UTF-8 (no raw control characters, no escape naming half a surrogate pair), numbers
 * as the grammar writes them, nesting to TG_JSON_MAX_DEPTH. Anything else is refused in one line
 * naming the text and the byte offset (from 0) where it goes wrong, also text after the value.
 * The cursor functions may be used only on a text tg_json_check accepted: they rely on its syntax.
 */
#ifndef TAPEGRAD_SUPPORT_JSON_READER_H
#define TAPEGRAD_SUPPORT_JSON_READER_H

#include <stdbool.h>
#include <stddef.h>

#include "tapegrad/error.h"

enum { TG_JSON_MAX_DEPTH = 1000 };

typedef enum { TG_JSON_NULL, TG_JSON_FALSE, TG_JSON_TRUE, TG_JSON_NUMBER, TG_JSON_STRING, TG_JSON_ARRAY, TG_JSON_OBJECT } TgJsonType;

/* Checks that text[0..len) is one JSON value (see above). text[len] must be '\0' (tg_file_read_all
 * puts one there). `name` names the text in messages ("FILE is not valid JSON: ... at byte N";
 * "FILE: text after the JSON object at byte N"); TG_ERR_FORMAT. */
TgStatus tg_json_check(const char *text, size_t len, const char *name);

/* A place in a checked text. */
typedef struct {
    const char *text;
    size_t len, pos;
} TgJsonCursor;

/* A string as written between its quotes, escapes and all; tg_json_decode gives its bytes. */
typedef struct {
    const char *raw;
    size_t raw_len;
    size_t pos; /* the offset of its opening quote */
} TgJsonString;

/* The cursor at text[pos] (0: the whole text's value). */
TgJsonCursor tg_json_cursor(const char *text, size_t len, size_t pos);
/* The type of the value at c; c moves past the white space before it. */
TgJsonType tg_json_type(TgJsonCursor *c);
/* Moves c past the value at it. */
void tg_json_skip(TgJsonCursor *c);

/* Members: tg_json_enter moves past the '{' or '[' at c; then each call of tg_json_next_key (objects)
 * or tg_json_next_item (arrays) moves to the next member's value and returns true, or past the
 * closing bracket and returns false. The caller moves past each value (tg_json_skip or a read)
 * before asking for the next. */
void tg_json_enter(TgJsonCursor *c);
bool tg_json_next_key(TgJsonCursor *c, TgJsonString *key);
bool tg_json_next_item(TgJsonCursor *c);

/* The string at c (tg_json_type TG_JSON_STRING); c moves past it. */
TgJsonString tg_json_read_string(TgJsonCursor *c);
/* The number at c (tg_json_type TG_JSON_NUMBER), as strtod reads it; c moves past it. */
double tg_json_read_number(TgJsonCursor *c);

/* How many members the object or items the array at c holds (0 for any other value); c does not
 * move. */
size_t tg_json_count(const TgJsonCursor *c);
/* The members of the object at `object` whose key decodes to `key` (`object` does not move): how
 * many there are (0 when `object` is not at an object), and *value (may be NULL) at the first
 * one's value when there is one. JSON allows
 * a key twice; a reader that refuses it (two readers could disagree on which one counts) asks
 * for the count. */
size_t tg_json_find(const TgJsonCursor *object, const char *key, TgJsonCursor *value);

/* Decodes s into out (room for s.raw_len bytes: decoding never lengthens a string) and returns
 * the number of bytes, NULs included; out is not NUL-terminated. */
size_t tg_json_decode(TgJsonString s, char *out);
/* s decoded into memory of its own with a NUL after it (the caller frees it), its length in *len
 * (may be NULL; NULs inside count, so strlen may be less); NULL when the memory cannot be had. */
char *tg_json_decode_alloc(TgJsonString s, size_t *len);
/* Whether s decodes to the NUL-terminated text lit. */
bool tg_json_string_is(TgJsonString s, const char *lit);

#endif
