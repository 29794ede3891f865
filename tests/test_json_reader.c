/* data/json_reader: tg_json_check accepts exactly RFC 8259's JSON text, each refusal at the right
 * byte; the cursor walks what it accepted and decodes strings with their length. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/json_reader.h"
#include "testutil.h"

static TgStatus check(const char *text, size_t len) {
    char *copy = malloc(len + 1); /* tg_json_check wants the NUL after the text, and nothing more */
    memcpy(copy, text, len);
    copy[len] = '\0';
    TgStatus s = tg_json_check(copy, len, "t.json");
    free(copy);
    return s;
}

Test(json_reader, accepts_json) {
    static const char *const valid[] = {
        "{}", "[]", " \t\r\n{} \n", "0", "-0", "1.5e+10", "-12.25E-3", "\"\"", "true", "false", "null",
        "{\"a\": [1, {\"b\": null}], \"c\": \"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\ud83d\\ude00\"}",
        "[\"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80 \x7f\"]", "{\"\": {}}", "[[[[[]]]]]", "1e400",
    };
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        TgStatus s = check(valid[i], strlen(valid[i]));
        cr_expect_eq(s, TG_OK, "%s: %s", valid[i], tg_error_message());
    }
}

Test(json_reader, refuses_what_is_not_json_at_its_byte) {
    static const struct {
        const char *text;
        size_t len;
        const char *message;
    } invalid[] = {
        {"", 0, "expected a value, found the end of the text, at byte 0"},
        {"{", 1, "expected a string (a key) at byte 1"},
        {"[1,]", 4, "expected a value at byte 3"},
        {"{\"a\":1,}", 8, "expected a string (a key) at byte 7"},
        {"{\"a\" 1}", 7, "expected ':' after a key at byte 5"},
        {"[1 2]", 5, "expected ',' or ']' at byte 3"},
        {"{\"a\":1 \"b\":2}", 13, "expected ',' or '}' at byte 7"},
        {"[01]", 4, "a malformed number (a leading zero) at byte 1"},
        {"[1.]", 4, "a malformed number at byte 1"},
        {"[.5]", 4, "expected a value at byte 1"},
        {"[+1]", 4, "expected a value at byte 1"},
        {"[1e]", 4, "a malformed number at byte 1"},
        {"[NaN]", 5, "expected a value at byte 1"},
        {"[tru]", 5, "expected a value at byte 1"},
        {"[\"a\tb\"]", 7, "a control character (0x09) not written as an escape in a string at byte 3"},
        {"[\"a\0b\"]", 7, "a control character (0x00) not written as an escape in a string at byte 3"},
        {"[\"\\x\"]", 6, "an unknown escape \\x at byte 2"},
        {"[\"\\u12\"]", 8, "a \\u escape without 4 hex digits at byte 2"},
        {"[\"\\ud800\"]", 10, "a high surrogate with no low one after it at byte 2"},
        {"[\"\\ud800\\u0041\"]", 16, "a high surrogate with no low one after it at byte 2"},
        {"[\"\\udc00\"]", 10, "a low surrogate with no high one before it at byte 2"},
        {"[\"\xff\"]", 5, "byte 0xff, which is not UTF-8 (JSON text is UTF-8), at byte 2"},
        {"[\"\xc0\xaf\"]", 6, "byte 0xc0, which is not UTF-8"},
        {"[\"\xed\xa0\x80\"]", 7, "byte 0xed, which is not UTF-8"},
        {"[\"\xe2\x82\"]", 6, "byte 0xe2, which is not UTF-8"},
        {"[\"abc", 5, "a string that never ends, from its quote at byte 1"},
        {"[\xc3\xa9]", 4, "expected a value at byte 1"},
        {"{} x", 4, "t.json: text after the JSON object at byte 3"},
        {"[] []", 5, "t.json: text after the JSON array at byte 3"},
        {"1 2", 3, "t.json: text after the JSON value at byte 2"},
        {"{}\0", 3, "t.json: text after the JSON object at byte 2"},
    };
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        tg_error_clear();
        TgStatus s = check(invalid[i].text, invalid[i].len);
        cr_expect_eq(s, TG_ERR_FORMAT, "case %zu (%s) was accepted", i, invalid[i].text);
        cr_expect(strstr(tg_error_message(), invalid[i].message) != NULL, "case %zu: \"%s\", not \"%s\"", i, tg_error_message(),
                  invalid[i].message);
    }
    /* nesting: 1000 levels are read, 1001 are not */
    char deep[2100];
    for (int depth = 1000; depth <= 1001; depth++) {
        memset(deep, '[', (size_t)depth);
        memset(deep + depth, ']', (size_t)depth);
        TgStatus s = check(deep, 2 * (size_t)depth);
        cr_expect_eq(s, depth == 1000 ? TG_OK : TG_ERR_FORMAT, "%d levels: %s", depth, tg_error_message());
    }
    cr_expect(strstr(tg_error_message(), "nesting deeper than 1000 levels at byte 1000"), "%s", tg_error_message());
}

Test(json_reader, the_cursor_reads_members_and_strings_with_their_length) {
    const char *text = "{\"skip\": [1, {\"x\": \"]}\"}], \"n\\u0061me\": \"a\\u0000b\\ud83d\\ude00\\n\", \"n\": -2.5e1, \"l\": [true, null]}";
    size_t len = strlen(text);
    assert_ok(tg_json_check(text, len, "t.json"));
    TgJsonCursor c = tg_json_cursor(text, len, 0);
    cr_assert_eq(tg_json_type(&c), TG_JSON_OBJECT);
    tg_json_enter(&c);
    TgJsonString key;
    int members = 0;
    while (tg_json_next_key(&c, &key)) {
        members++;
        if (tg_json_string_is(key, "skip")) {
            cr_expect_eq(tg_json_type(&c), TG_JSON_ARRAY);
            tg_json_skip(&c);
        } else if (tg_json_string_is(key, "name")) { /* an escaped key */
            cr_assert_eq(tg_json_type(&c), TG_JSON_STRING);
            TgJsonString s = tg_json_read_string(&c);
            char out[64];
            size_t n = tg_json_decode(s, out);
            cr_expect(n == 8 && memcmp(out, "a\0b\xf0\x9f\x98\x80\n", 8) == 0, "%zu bytes", n);
        } else if (tg_json_string_is(key, "n")) {
            cr_assert_eq(tg_json_type(&c), TG_JSON_NUMBER);
            cr_expect_eq(tg_json_read_number(&c), -25.0);
        } else {
            cr_expect(tg_json_string_is(key, "l"));
            cr_assert_eq(tg_json_type(&c), TG_JSON_ARRAY);
            tg_json_enter(&c);
            cr_assert(tg_json_next_item(&c));
            cr_expect_eq(tg_json_type(&c), TG_JSON_TRUE);
            tg_json_skip(&c);
            cr_assert(tg_json_next_item(&c));
            cr_expect_eq(tg_json_type(&c), TG_JSON_NULL);
            tg_json_skip(&c);
            cr_expect_not(tg_json_next_item(&c));
        }
    }
    cr_expect_eq(members, 4);
    cr_expect_eq(c.pos, len);
    cr_expect_not(tg_json_string_is(key, "skip!"));
}

/* Looking a member up by its key: how many members have it (a reader refuses two), the first one's
 * value, keys compared decoded; counting an array's items or an object's members without moving. */
Test(json_reader, finds_members_by_key_and_counts_them) {
    const char *text = "{\"a\": 1, \"l\": [[], {}, \"]\", 4], \"b\\u0061\": \"x\", \"a\": 2, \"o\": {}, \"s\": \"a\\u0000b\"}";
    size_t len = strlen(text);
    assert_ok(tg_json_check(text, len, "t.json"));
    TgJsonCursor root = tg_json_cursor(text, len, 0), v;
    cr_expect_eq(tg_json_count(&root), 6);
    cr_expect_eq(root.pos, 0, "counting moved the cursor");
    cr_expect_eq(tg_json_find(&root, "a", &v), 2, "\"a\" is given twice");
    cr_assert_eq(tg_json_type(&v), TG_JSON_NUMBER);
    cr_expect_eq(tg_json_read_number(&v), 1.0, "the first \"a\"");
    cr_expect_eq(tg_json_find(&root, "ba", &v), 1, "the key b\\u0061 is ba");
    cr_expect_eq(tg_json_type(&v), TG_JSON_STRING);
    cr_expect_eq(tg_json_find(&root, "b", NULL), 0, "a key is matched whole");
    cr_expect_eq(tg_json_find(&root, "missing", NULL), 0);
    cr_assert_eq(tg_json_find(&root, "l", &v), 1);
    cr_expect_eq(tg_json_count(&v), 4, "[[], {}, \"]\", 4]");
    cr_expect_eq(tg_json_find(&v, "a", NULL), 0, "an array has no members to find");
    TgJsonCursor item = v;
    tg_json_enter(&item);
    cr_assert(tg_json_next_item(&item));
    cr_expect_eq(tg_json_count(&item), 0, "[]");
    cr_assert_eq(tg_json_find(&root, "o", &v), 1);
    cr_expect_eq(tg_json_count(&v), 0, "{}");
    cr_assert_eq(tg_json_find(&root, "s", &v), 1);
    TgJsonCursor scalar = v;
    cr_expect_eq(tg_json_count(&scalar), 0, "a string holds no items");
    size_t n;
    char *s = tg_json_decode_alloc(tg_json_read_string(&v), &n);
    cr_assert_not_null(s);
    cr_expect(n == 3 && memcmp(s, "a\0b", 4) == 0, "\"a\\u0000b\" decodes to 3 bytes and a NUL after them");
    cr_expect_eq(strlen(s), 1, "the NUL inside stays: strlen tells a caller it is there");
    free(s);
}
