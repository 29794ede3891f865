/* JSON written as it goes, with no tree: every JSON the program writes comes from here (eval,
 * inspect --json, bench --json, metrics.jsonl, grads.jsonl, tokenizer.json, the Hugging Face
 * folder's configs, the HTML report's data, compare-ffn's summary). JSON has no NaN or infinity:
 * a non-finite number is written as null, so every line stays parseable by a strict reader
 * (support/json_reader.h). */
#ifndef TAPEGRAD_SUPPORT_JSON_WRITE_H
#define TAPEGRAD_SUPPORT_JSON_WRITE_H

#include <stdbool.h>
#include <stdio.h>

/* v with `digits` significant digits (%.*g), or null when v is NaN or infinite. */
void tg_json_write_number(FILE *f, double v, int digits);
/* `,"key":` and the number, as tg_json_write_number writes it. */
void tg_json_write_field(FILE *f, const char *key, double v, int digits);
/* v as the documents below write numbers: %g with 15 significant digits when they read back
 * within a relative DBL_EPSILON of v, else with 17 (so 3 is "3", 1e-05 "1e-05", -0.0 "-0"); null
 * when v is NaN or infinite. It is the form cJSON printed, so the files written through cJSON
 * before keep their bytes. */
void tg_json_write_double(FILE *f, double v);
/* s as a JSON string, quoted: '"', '\\' and control bytes escaped, as tg_json_write_bytes writes it
 * (a byte that is not UTF-8 becomes U+FFFD). */
void tg_json_write_string(FILE *f, const char *s);
/* The same for len bytes that may hold NULs and bytes that are not UTF-8 (text a model drew):
 * each NUL as \u0000, each byte that begins no UTF-8 sequence as U+FFFD, so the
 * line stays JSON. */
void tg_json_write_bytes(FILE *f, const char *s, size_t len);

/* A document of objects and arrays: open a container, give each value with its key inside an
 * object (NULL inside an array, and for the document's own value), close it. Two layouts:
 *   TG_JSON_COMPACT   no white space: {"a":1,"b":[1,2]}
 *   TG_JSON_INDENTED  a member a line, a tab a level, a tab after the colon; an array's items on
 *                     one line after ", ":  {\n\t"a":\t1,\n\t"b":\t[1, 2]\n}  (an empty object: {\n})
 * Numbers as tg_json_write_double writes them; strings as tg_json_write_bytes, except that a
 * backspace, form feed, newline, carriage return and tab take their short escapes (\b \f \n \r
 * \t); with html_safe, '<' is written \u003c as well, so that text holding "</script>" cannot end
 * the HTML element the document sits in. Errors are the stream's (ferror). */
typedef enum { TG_JSON_COMPACT, TG_JSON_INDENTED } TgJsonLayout;
enum { TG_JSON_WRITER_DEPTH = 16 };
typedef struct TgJsonWriter {
    FILE *f;
    TgJsonLayout layout;
    bool html_safe;
    int depth;                                  /* containers open */
    bool is_object[TG_JSON_WRITER_DEPTH + 1];   /* [d]: the container open at depth d */
    bool has_values[TG_JSON_WRITER_DEPTH + 1];  /* [d]: it holds a value already */
} TgJsonWriter;

TgJsonWriter tg_json_writer(FILE *f, TgJsonLayout layout, bool html_safe);
void tg_json_open_object(TgJsonWriter *w, const char *key);
void tg_json_open_array(TgJsonWriter *w, const char *key);
void tg_json_close(TgJsonWriter *w);
void tg_json_put_string(TgJsonWriter *w, const char *key, const char *s);
void tg_json_put_number(TgJsonWriter *w, const char *key, double v);
void tg_json_put_bool(TgJsonWriter *w, const char *key, bool v);
void tg_json_put_null(TgJsonWriter *w, const char *key);

#endif
