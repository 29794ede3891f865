/* The JSON writer (support/json_write.h): the two layouts of a document byte for byte (they are
 * cJSON's, which the Hugging Face configs, the report's data and compare-ffn's summary were
 * written with before, so those files keep their bytes), numbers in 15 or 17 digits, the short
 * escapes of documents against the \u form of lines, '<' kept out of an HTML script, and every
 * document read back by the strict reader. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/json_reader.h"
#include "support/json_write.h"
#include "testutil.h"

typedef struct {
    char *text;
    size_t len;
    FILE *f;
} Memory;

/* A stream into memory; open_memstream keeps pointers into *m, so m stays where it is. */
static void memory_open(Memory *m) {
    memset(m, 0, sizeof *m);
    m->f = open_memstream(&m->text, &m->len);
    cr_assert_not_null(m->f);
}

/* The text written, closed; the caller frees it. */
static char *memory_close(Memory *m) {
    fclose(m->f);
    return m->text;
}

/* {"name": "w", "shape": [2, 3], "empty": {}, "none": [], "rows": [{"ok": true, "v": null}]} */
static void sample_document(TgJsonWriter *w) {
    tg_json_open_object(w, NULL);
    tg_json_put_string(w, "name", "w");
    tg_json_open_array(w, "shape");
    tg_json_put_number(w, NULL, 2);
    tg_json_put_number(w, NULL, 3);
    tg_json_close(w);
    tg_json_open_object(w, "empty");
    tg_json_close(w);
    tg_json_open_array(w, "none");
    tg_json_close(w);
    tg_json_open_array(w, "rows");
    tg_json_open_object(w, NULL);
    tg_json_put_bool(w, "ok", true);
    tg_json_put_null(w, "v");
    tg_json_close(w);
    tg_json_close(w);
    tg_json_close(w);
}

Test(json_write, lays_documents_out_compact_or_indented) {
    Memory m;
    memory_open(&m);
    TgJsonWriter w = tg_json_writer(m.f, TG_JSON_COMPACT, false);
    sample_document(&w);
    cr_expect_eq(w.depth, 0);
    char *compact = memory_close(&m);
    cr_expect_str_eq(compact, "{\"name\":\"w\",\"shape\":[2,3],\"empty\":{},\"none\":[],\"rows\":[{\"ok\":true,\"v\":null}]}");
    memory_open(&m);
    w = tg_json_writer(m.f, TG_JSON_INDENTED, false);
    sample_document(&w);
    char *indented = memory_close(&m);
    cr_expect_str_eq(indented, "{\n"
                               "\t\"name\":\t\"w\",\n"
                               "\t\"shape\":\t[2, 3],\n"
                               "\t\"empty\":\t{\n"
                               "\t},\n"
                               "\t\"none\":\t[],\n"
                               "\t\"rows\":\t[{\n"
                               "\t\t\t\"ok\":\ttrue,\n"
                               "\t\t\t\"v\":\tnull\n"
                               "\t\t}]\n"
                               "}");
    assert_ok(tg_json_check(compact, strlen(compact), "compact"));
    assert_ok(tg_json_check(indented, strlen(indented), "indented"));
    free(compact), free(indented);
}

static char *number_text(double v) {
    Memory m;
    memory_open(&m);
    tg_json_write_double(m.f, v);
    return memory_close(&m);
}

Test(json_write, writes_numbers_in_15_digits_or_17) {
    static const struct {
        double v;
        const char *text;
    } cases[] = {
        {3, "3"}, {-0.0, "-0"}, {0.02, "0.02"}, {1e-5, "1e-05"}, {1e6, "1000000"}, {2147483648.0, "2147483648"},
        {1.0 / 3, "0.33333333333333331"},  /* 15 digits read back 3e-16 away: 17 */
        {0.1f, "0.10000000149011612"},     /* a float's value: 17 */
        /* 2^53: 15 digits read back 2 below it, within DBL_EPSILON (2 at 2^53): kept, as cJSON kept them */
        {9007199254740992.0, "9.00719925474099e+15"},
        {NAN, "null"}, {INFINITY, "null"}, {-INFINITY, "null"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = number_text(cases[i].v);
        cr_expect_str_eq(text, cases[i].text, "%.17g", cases[i].v);
        free(text);
    }
}

Test(json_write, escapes_strings_for_documents_lines_and_html) {
    const char *s = "a\"\\/\b\f\n\r\t\x01<\xc3\xa9\xff";
    Memory m;
    memory_open(&m);
    TgJsonWriter w = tg_json_writer(m.f, TG_JSON_COMPACT, false);
    tg_json_open_object(&w, NULL);
    tg_json_put_string(&w, "k\n<", s);
    tg_json_close(&w);
    char *document = memory_close(&m);
    /* short escapes in a document; a byte that is not UTF-8 as U+FFFD; '/' and 0x7f as they are */
    cr_expect_str_eq(document, "{\"k\\n<\":\"a\\\"\\\\/\\b\\f\\n\\r\\t\\u0001<\xc3\xa9\\ufffd\"}");
    memory_open(&m);
    w = tg_json_writer(m.f, TG_JSON_COMPACT, true);
    tg_json_put_string(&w, NULL, "</script>");
    char *html = memory_close(&m);
    cr_expect_str_eq(html, "\"\\u003c/script>\"", "html_safe");
    memory_open(&m);
    tg_json_write_string(m.f, s);
    char *line = memory_close(&m);
    /* a line of metrics.jsonl or a reply of chat --jsonl keeps the \u form it always had */
    cr_expect_str_eq(line, "\"a\\\"\\\\/\\u0008\\u000c\\u000a\\u000d\\u0009\\u0001<\xc3\xa9\\ufffd\"");
    const char *texts[] = {document, html, line};
    for (int i = 0; i < 3; i++) assert_ok(tg_json_check(texts[i], strlen(texts[i]), "written"));
    free(document), free(html), free(line);
}
