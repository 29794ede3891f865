/* The GPT-2 pre-split, UTF-8 decoding, version-2 tokenizer files, and tokenizer.json in and out
 * without any other program (tests/test_clients.c has the checks against Hugging Face's and
 * llama.cpp's own tokenizers). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptutil.h"
#include "tapegrad/tokenizer.h"
#include "tokenizer/tokenizer_hf.h"
#include "tokenizer/unicode_class.h"
#include "datagen.h"
#include "testutil.h"

/* The chunks of text under the GPT-2 rule, joined by '|'. */
static char *gpt2_chunks(const char *text, size_t len) {
    char *out = malloc(2 * len + 2), *p = out;
    for (size_t pos = 0; pos < len;) {
        size_t cl = tg_tokenizer_gpt2_chunk_len(text + pos, len - pos);
        cr_assert(cl >= 1 && cl <= len - pos);
        if (pos) *p++ = '|';
        memcpy(p, text + pos, cl);
        p += cl;
        pos += cl;
    }
    *p = '\0';
    return out;
}

static void expect_split(const char *text, const char *want) {
    char *got = gpt2_chunks(text, strlen(text));
    cr_expect_str_eq(got, want, "split of \"%s\"", text);
    free(got);
}

Test(gpt2_split, follows_the_regex_alternative_by_alternative) {
    /* 's|'t|'re|'ve|'m|'ll|'d, lower case only */
    expect_split("it's we'll they're I'M don't", "it|'s| we|'ll| they|'re| I|'|M| don|'t");
    /* " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": one space joins the run after it */
    expect_split("Hello world 42 ... x2y", "Hello| world| 42| ...| x|2|y");
    /* "\s+(?!\S)": a run of white space gives up its last character before a non-space */
    expect_split("a  b", "a| | b");
    expect_split("a\n\nb", "a|\n|\n|b");
    expect_split("a \tb", "a| |\t|b");
    expect_split("a\tb", "a|\t|b");
    /* "\s+" at the end */
    expect_split("end   ", "end|   ");
    /* Unicode: letters (CJK, accented), numbers of other scripts, white space beyond ASCII */
    expect_split("caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xd9\xa3\xd9\xa4", "caf\xc3\xa9| \xe4\xb8\xad\xe6\x96\x87| \xd9\xa3\xd9\xa4");
    expect_split("a\xc2\xa0\x62", "a|\xc2\xa0|b");
    expect_split("e\xcc\x81t\xc3\xa9", "e|\xcc\x81|t\xc3\xa9"); /* a combining mark is not a letter */
    expect_split("hi \xf0\x9f\x98\x80\xf0\x9f\x98\x80!", "hi| \xf0\x9f\x98\x80\xf0\x9f\x98\x80!");
    /* invalid bytes are "other" characters, as U+FFFD would be */
    expect_split("ab\xff\xfe cd \x80x", "ab|\xff\xfe| cd| \x80|x");
    /* runs have no length limit */
    char run[300];
    memset(run, 'a', sizeof run);
    cr_expect_eq(tg_tokenizer_gpt2_chunk_len(run, sizeof run), sizeof run);
    cr_expect_eq(tg_tokenizer_gpt2_chunk_len(run, 0), 0);
}

Test(utf8, maximal_subparts_of_invalid_sequences) {
    static const struct {
        const char *bytes;
        size_t len, want_len;
        uint32_t want_cp;
    } cases[] = {
        {"A", 1, 1, 'A'},
        {"\xc3\xa9", 2, 2, 0xE9},
        {"\xe4\xb8\xad", 3, 3, 0x4E2D},
        {"\xf0\x9f\x98\x80", 4, 4, 0x1F600},
        {"\x80", 1, 1, TG_UTF8_INVALID},         /* a continuation byte alone */
        {"\xc0\xaf", 2, 1, TG_UTF8_INVALID},     /* overlong: C0 is never a lead byte */
        {"\xe2\x82x", 3, 2, TG_UTF8_INVALID},    /* cut: the two bytes are one subpart */
        {"\xed\xa0\x80", 3, 1, TG_UTF8_INVALID}, /* a surrogate: ED then A0 is not allowed */
        {"\xf4\x90\x80\x80", 4, 1, TG_UTF8_INVALID},
        {"\xf0\x9f\x98", 3, 3, TG_UTF8_INVALID}, /* cut by the end of the text */
        {"\xff", 1, 1, TG_UTF8_INVALID},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t cp;
        size_t n = tg_utf8_next((const unsigned char *)cases[i].bytes, cases[i].len, &cp);
        cr_expect(n == cases[i].want_len && cp == cases[i].want_cp, "case %zu: length %zu, code point %x", i, n, cp);
    }
    cr_expect_eq(tg_unicode_class(0x4E2D), TG_UNICODE_LETTER);
    cr_expect_eq(tg_unicode_class(0x0663), TG_UNICODE_NUMBER);
    cr_expect_eq(tg_unicode_class(0x3000), TG_UNICODE_SPACE);
    cr_expect_eq(tg_unicode_class(0x1F600), TG_UNICODE_OTHER);
    cr_expect_eq(tg_unicode_class(TG_UTF8_INVALID), TG_UNICODE_OTHER);
}

/* ---- files ------------------------------------------------------------------------------ */

static char *dir;
static void make_dir(void) { dir = datagen_tempdir(); }
static void remove_dir(void) {
    datagen_remove_tree(dir);
    free(dir);
}

static const char SAMPLE[] = "The cat's hat. It's 42 days, <|endoftext|> don't  stop \xe4\xb8\xad\xe6\x96\x87 \xff end";

static void expect_same_encoding(const TgTokenizer *a, const TgTokenizer *b, const char *text, size_t len) {
    size_t cap = tg_tokenizer_max_ids(a, len) + tg_tokenizer_max_ids(b, len), na, nb;
    int32_t *x = malloc(cap * sizeof *x), *y = malloc(cap * sizeof *y);
    assert_ok(tg_tokenizer_encode(a, text, len, x, cap, &na));
    assert_ok(tg_tokenizer_encode(b, text, len, y, cap, &nb));
    cr_expect(na == nb && memcmp(x, y, na * sizeof *x) == 0, "%zu and %zu ids", na, nb);
    free(x), free(y);
}

/* A model's text cut inside a character prints U+FFFD for the cut, whole characters as they are. */
Test(utf8, text_that_is_not_utf8_is_marked_and_whole_characters_kept) {
    static const char in[] = "exer\xA4ing caf\xC3\xA9 \xE4\xBD\xA0\xE5 \xF0\x9F\x98\x80\xF0\x9F";
    char out[3 * sizeof in];
    size_t n = tg_utf8_mark_invalid(in, sizeof in - 1, out);
    static const char want[] = "exer\xEF\xBF\xBDing caf\xC3\xA9 \xE4\xBD\xA0\xEF\xBF\xBD \xF0\x9F\x98\x80\xEF\xBF\xBD";
    cr_expect_eq(n, sizeof want - 1);
    cr_expect_eq(memcmp(out, want, sizeof want - 1), 0, "%.*s", (int)n, out);
}

Test(tokenizer_v2, the_gpt2_split_saves_as_version_2_and_its_eot_text_is_one_token, .init = make_dir, .fini = remove_dir) {
    char *text = datagen_english(3, 20000);
    TgTokenizer tok, back;
    assert_ok(tg_tokenizer_bpe_train(text, 20000, 400, &tok));
    cr_expect_eq(tok.split, TG_TOKENIZER_SPLIT_GPT2);
    int32_t ids[256];
    size_t n;
    assert_ok(tg_tokenizer_encode(&tok, "a<|endoftext|>b", 15, ids, 256, &n));
    cr_expect(n == 3 && ids[1] == tok.eot_id, "<|endoftext|> is <eot>: %zu ids", n);
    char *path = datagen_path(dir, "tokenizer.txt");
    assert_ok(tg_tokenizer_save(&tok, path));
    size_t len;
    char *file = (char *)ckpt_read_file(path, &len);
    cr_expect(strncmp(file, "tapegrad-tokenizer 2\nkind bpe\nsplit gpt2\n", 41) == 0, "%.60s", file);
    assert_ok(tg_tokenizer_load(path, &back));
    cr_expect_eq(tg_tokenizer_fingerprint(&back), tg_tokenizer_fingerprint(&tok));
    expect_same_encoding(&tok, &back, SAMPLE, sizeof SAMPLE - 1);
    tg_tokenizer_free(&back);
    /* the tapegrad split keeps version 1, and its fingerprint differs: the encodings do */
    TgTokenizer v1;
    assert_ok(tg_tokenizer_bpe_train_split(text, 20000, 400, TG_TOKENIZER_SPLIT_TAPEGRAD, &v1));
    cr_expect_neq(tg_tokenizer_fingerprint(&v1), tg_tokenizer_fingerprint(&tok));
    assert_ok(tg_tokenizer_save(&v1, path));
    free(file);
    file = (char *)ckpt_read_file(path, &len);
    cr_expect(strncmp(file, "tapegrad-tokenizer 1\nkind bpe\nvocab_size", 40) == 0, "%.60s", file);
    assert_fails(tg_tokenizer_hf_check_exportable(&v1), TG_ERR_MISMATCH, "no Hugging Face or llama.cpp pre-tokenizer");
    tg_tokenizer_free(&v1);
    tg_tokenizer_free(&tok);
    free(file), free(path), free(text);
}

Test(tokenizer_json, written_and_read_back_encodes_the_same, .init = make_dir, .fini = remove_dir) {
    char *text = datagen_english(5, 20000), *path = datagen_path(dir, "tokenizer.json");
    TgTokenizer tok, back, again;
    assert_ok(tg_tokenizer_bpe_train(text, 20000, 500, &tok));
    assert_ok(tg_tokenizer_hf_save(&tok, path));
    assert_ok(tg_tokenizer_hf_load(path, &back));
    cr_expect(back.hf && back.vocab_size == 500 && back.eot_id == 256 && back.n_merges == 500 - 257);
    expect_same_encoding(&tok, &back, text, 20000);
    char valid[sizeof SAMPLE];
    memcpy(valid, SAMPLE, sizeof SAMPLE);
    valid[sizeof SAMPLE - 6] = ' '; /* without the 0xff, which only the imported one replaces */
    expect_same_encoding(&tok, &back, valid, sizeof valid - 1);
    /* a run folder keeps an imported tokenizer as tokenizer.txt + tokenizer.json */
    char *txt = datagen_path(dir, "run/tokenizer.txt");
    datagen_write(dir, "run/placeholder", "", 0);
    assert_ok(tg_tokenizer_save(&back, txt));
    assert_ok(tg_tokenizer_load(txt, &again));
    cr_expect_eq(tg_tokenizer_fingerprint(&again), tg_tokenizer_fingerprint(&back));
    expect_same_encoding(&back, &again, SAMPLE, sizeof SAMPLE - 1);
    tg_tokenizer_free(&again), tg_tokenizer_free(&back), tg_tokenizer_free(&tok);
    free(txt), free(path), free(text);
}

/* Writes a small tokenizer.json, replaces `from` by `to` in it, and expects the load to fail. */
static void expect_json_refused(const char *from, const char *to, const char *needle) {
    char *path = datagen_path(dir, "t.json");
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train("aaabdaaabac the the the", 23, 262, &tok));
    assert_ok(tg_tokenizer_hf_save(&tok, path));
    tg_tokenizer_free(&tok);
    size_t len;
    char *text = (char *)ckpt_read_file(path, &len);
    text = realloc(text, len + 1);
    text[len] = '\0';
    char *at = strstr(text, from);
    cr_assert_not_null(at, "\"%s\" not in the file", from);
    char *edited = calloc(1, len + strlen(to) + 1);
    memcpy(edited, text, (size_t)(at - text));
    strcat(edited, to);
    strcat(edited, at + strlen(from));
    ckpt_write_file(path, edited, strlen(edited));
    assert_fails(tg_tokenizer_hf_load(path, &tok), TG_ERR_FORMAT, needle);
    cr_expect_eq(tok.kind, TG_TOKENIZER_NONE, "a refused load leaves the tokenizer empty");
    free(text), free(edited), free(path);
}

Test(tokenizer_json, what_tapegrad_cannot_encode_alike_is_refused_by_name, .init = make_dir, .fini = remove_dir) {
    expect_json_refused("{\n  \"version\"", "[{\n  \"version\"", "not valid JSON");
    expect_json_refused("\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", "it has a normalizer");
    expect_json_refused("\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n  \"post",
                        "\"type\": \"Metaspace\"},\n  \"post", "pre_tokenizer is Metaspace");
    expect_json_refused("\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n  \"post",
                        "\"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n  \"post", "add_prefix_space is true");
    expect_json_refused("\"byte_fallback\": false", "\"byte_fallback\": true", "byte_fallback is on");
    expect_json_refused("\"dropout\": null", "\"dropout\": 0.1", "dropout");
    expect_json_refused("\"type\": \"BPE\"", "\"type\": \"Unigram\"", "not a BPE model");
    expect_json_refused("\"lstrip\": false", "\"lstrip\": true", "sets lstrip");
    expect_json_refused("\"special\": true", "\"special\": false", "no special added token");
    expect_json_refused("\"a\": 97", "\"a\": 1000", "no token has id 97");
    expect_json_refused("\"a\": 97", "\"a\": -1", "is not a new id");
    expect_json_refused("\"a\": 97", "\"\xe4\xb8\xad\": 97", "not made of ByteLevel characters");
    expect_json_refused("\"merges\": [\n      \"", "\"merges\": [\n      \"zz zz\", \"", "joins or makes a token not in the vocabulary");
    expect_json_refused("\"merges\": [\n      \"", "\"merges\": [\n      \"ab\", \"", "is not \"left right\"");
    /* a vocabulary token that spells another's bytes: two ids for one token */
    expect_json_refused("\"a\": 97", "\"a\": 97, \"\\u0100\": 0", "is not a new id");
    TgTokenizer tok;
    char *missing = datagen_path(dir, "none.json");
    assert_fails(tg_tokenizer_hf_load(missing, &tok), TG_ERR_IO, "no such file; give a Hugging Face tokenizer.json");
    free(missing);
}
