/* Numbers and strings as JSON, for the program's every JSON writer that is not cJSON (eval,
 * inspect --json, bench --json, metrics.jsonl, grads.jsonl). JSON has no NaN or infinity: a
 * non-finite number is written as null, so every line stays parseable by a strict reader. */
#ifndef TAPEGRAD_JSON_WRITE_H
#define TAPEGRAD_JSON_WRITE_H

#include <stdio.h>

/* v with `digits` significant digits (%.*g), or null when v is NaN or infinite. */
void tg_json_write_number(FILE *f, double v, int digits);
/* `,"key":` and the number, as tg_json_write_number writes it. */
void tg_json_write_field(FILE *f, const char *key, double v, int digits);
/* s as a JSON string, quoted: '"', '\\' and control bytes escaped, as tg_json_write_bytes writes it
 * (a byte that is not UTF-8 becomes U+FFFD). */
void tg_json_write_string(FILE *f, const char *s);
/* The same for len bytes that may hold NULs and bytes that are not UTF-8 (text a model drew):
 * each NUL as \u0000, each byte that begins no UTF-8 sequence as U+FFFD, so the
 * line stays JSON. */
void tg_json_write_bytes(FILE *f, const char *s, size_t len);

#endif
