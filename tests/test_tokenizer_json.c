/* tokenizer.json files a user may hand tapegrad (`train --tokenizer hf:FILE`):
 *   - what the importer accepts round-trips through what a run writes (tokenizer.txt and its
 *     tokenizer.json), to the same fingerprint and the same ids, for added tokens out of id
 *     order, listed twice, with any UTF-8 text; and every `ckpt export --hf` is strict JSON;
 *   - what it refuses, it refuses in one line naming the file and the fault (and the CLI exits 1);
 *   - reading takes no more memory than tokenizer_hf.h states, and a lack of memory is said so;
 *   - a tokenizer_config.json beside it gives the BOS and EOS that frame documents, as MiniMind's;
 *   - 65,535 added tokens do not make encoding quadratic. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckptutil.h"
#include "tokenizer/tokenizer_hf.h"
#include "datagen.h"
#include "tapegrad/tokenizer.h"
#include "data/tokfile.h"
#include "testutil.h"


static char *dir;
static char *base;      /* a tokenizer.json tapegrad wrote: a BPE of 400 ids, <|endoftext|> 256 */
static TgTokenizer bpe; /* the tokenizer it holds */

static void setup(void) {
    dir = datagen_tempdir();
    char *text = datagen_english(5, 20000), *path = datagen_path(dir, "base.json");
    assert_ok(tg_tokenizer_bpe_train(text, 20000, 400, &bpe));
    assert_ok(tg_tokenizer_hf_save(&bpe, path));
    base = ckpt_read_text(path);
    free(text), free(path);
}

static void teardown(void) {
    tg_tokenizer_free(&bpe);
    datagen_remove_tree(dir);
    free(dir), free(base);
}

/* printf into a malloc'ed string. */
static char *format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format(const char *fmt, ...) {
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *s = malloc((size_t)n + 1);
    vsnprintf(s, (size_t)n + 1, fmt, again);
    va_end(again);
    va_end(ap);
    return s;
}

/* text with its first `from` replaced by `to` (malloc'ed). */
static char *replaced(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    cr_assert_not_null(at, "\"%s\" is not in the file", from);
    return format("%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
}

/* The base file with these entries as its added_tokens. */
static char *with_added(const char *entries) {
    const char *open = strstr(base, "\"added_tokens\": ["), *close = strstr(base, "\n  ],\n");
    cr_assert(open && close);
    open += strlen("\"added_tokens\": [");
    return format("%.*s%s%s", (int)(open - base), base, entries, close);
}

static char *write_json(const char *name, const char *text) {
    datagen_write(dir, name, text, strlen(text));
    return datagen_path(dir, name);
}

#define EOT "{\"id\": 256, \"content\": \"<|endoftext|>\", \"special\": true}"
#define ADDED(id, content, special) "{\"id\": " #id ", \"content\": \"" content "\", \"special\": " #special "}"

/* Runs tests/support/strict_json.py on the files; its verdict in *why (malloc'ed). */
static bool strict_json(const char *files, char **why) {
    char *cmd = format("/usr/bin/python3 %s/tests/support/strict_json.py %s 2>&1", TAPEGRAD_SOURCE_DIR, files);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = '\0';
    int rc = pclose(p);
    free(cmd);
    *why = strdup(buf);
    return rc == 0;
}

static int32_t *encode(const TgTokenizer *tok, const char *text, size_t *n) {
    size_t cap = tg_tokenizer_max_ids(tok, strlen(text)) + 1;
    int32_t *ids = malloc(cap * sizeof *ids);
    assert_ok(tg_tokenizer_encode(tok, text, strlen(text), ids, cap, n));
    return ids;
}

static void expect_same_ids(const TgTokenizer *a, const TgTokenizer *b, const char *text, const char *what) {
    size_t na, nb;
    int32_t *x = encode(a, text, &na), *y = encode(b, text, &nb);
    cr_expect(na == nb && memcmp(x, y, na * sizeof *x) == 0, "%s: %zu and %zu ids", what, na, nb);
    free(x), free(y);
}

/* ---- what is accepted round-trips -------------------------------------------------------- */

static const struct {
    const char *name, *entries;
    int32_t eot; /* what must end texts */
} families[] = {
    {"in-order", EOT "," ADDED(400, "<|a|>", true) "," ADDED(401, "<|b|>", false), 256},
    {"out-of-order", ADDED(401, "<|b|>", false) "," ADDED(400, "<|a|>", true) "," EOT, 256},
    {"eot-last", ADDED(400, "<|a|>", true) "," ADDED(401, "<|b|>", false) "," EOT, 256},
    {"twice", EOT "," ADDED(400, "<|a|>", true) "," EOT "," ADDED(400, "<|a|>", true), 256},
    /* no <|endoftext|>: the special token of the lowest id ends texts, in any order */
    {"no-eot-name", ADDED(401, "<|s1|>", true) "," ADDED(400, "<|s0|>", true) "," ADDED(256, "<|w|>", false), 400},
    /* UTF-8 of every length, JSON escapes, a space, a control character, DEL, and "Ã", which
     * spells byte 0xC3's vocabulary string (model.vocab must not hold that key twice) */
    {"texts", EOT "," ADDED(402, "\\u00e9t\\u00e9", false) "," ADDED(401, "\xf0\x9f\x98\x80", false) "," ADDED(400, "a b", false)
              "," ADDED(403, "\\\"q\\\\", false) "," ADDED(404, "\\u0001x\\u007f", true) "," ADDED(405, "\xc3\x83", false) ","
              ADDED(406, "\\ud83d\\ude00!", false),
     256},
};

static const char SAMPLE[] = "x <|a|> y<|b|><|s0|><|s1|> \xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80! a b \"q\\ \x01x\x7f \xc3\x83 \xc3\x83"
                             "<|endoftext|> the end";

/* Every family imports, saves as a run does, and loads back to the fingerprint and the ids it
 * had; the saved tokenizer.json is strict JSON and a second save writes the same bytes. Added
 * tokens in another order give the tokenizer of the same tokens in id order. */
Test(tokenizer_json, what_is_imported_saves_and_loads_to_the_same_fingerprint, .init = setup, .fini = teardown) {
    char files[16384] = "";
    uint64_t in_order = 0;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        char *text = with_added(families[f].entries), *name = format("%s.json", families[f].name);
        char *path = write_json(name, text);
        TgTokenizer tok, back, again;
        assert_ok(tg_tokenizer_hf_load(path, &tok));
        cr_expect_eq(tok.eot_id, families[f].eot, "%s: <eot> is %d", families[f].name, (int)tok.eot_id);
        char *run = format("%s/run-%s/tokenizer.txt", dir, families[f].name), *run2 = format("%s/again-%s/tokenizer.txt", dir, families[f].name);
        datagen_write(dir, strstr(run, "run-"), "", 0); /* the run folder */
        datagen_write(dir, strstr(run2, "again-"), "", 0);
        assert_ok(tg_tokenizer_save(&tok, run));
        tg_error_clear();
        cr_assert_eq(tg_tokenizer_load(run, &back), TG_OK, "%s: %s", families[f].name, tg_error_message());
        cr_expect_eq(tg_tokenizer_fingerprint(&back), tg_tokenizer_fingerprint(&tok), "%s: the run's tokenizer", families[f].name);
        expect_same_ids(&tok, &back, SAMPLE, families[f].name);
        assert_ok(tg_tokenizer_save(&back, run2));
        assert_ok(tg_tokenizer_load(run2, &again));
        cr_expect_eq(tg_tokenizer_fingerprint(&again), tg_tokenizer_fingerprint(&tok));
        char *json1 = format("%s/run-%s/tokenizer.json", dir, families[f].name), *json2 = format("%s/again-%s/tokenizer.json", dir, families[f].name);
        char *a = ckpt_read_text(json1), *b = ckpt_read_text(json2);
        cr_expect_str_eq(a, b, "%s: saving what was loaded writes the same file", families[f].name);
        strcat(files, " "), strcat(files, json1);
        if (f == 0) in_order = tg_tokenizer_fingerprint(&tok);
        if (f == 1 || f == 2)
            cr_expect_eq(tg_tokenizer_fingerprint(&tok), in_order, "%s: the order of added_tokens does not count", families[f].name);
        tg_tokenizer_free(&tok), tg_tokenizer_free(&back), tg_tokenizer_free(&again);
        free(text), free(name), free(path), free(run), free(run2), free(json1), free(json2), free(a), free(b);
    }
    char *why;
    cr_expect(strict_json(files, &why), "the saved tokenizer.json files: %s", why);
    free(why);
}

/* ---- what is refused, in one line --------------------------------------------------------- */

/* Writes text as NAME.json, expects the load to fail with TG_ERR_FORMAT and a message that
 * names the file and holds `needle`. */
static void expect_refused(const char *name, const char *text, size_t len, const char *needle) {
    char *file = format("%s.json", name), *path = datagen_path(dir, file);
    datagen_write(dir, file, text, len);
    TgTokenizer tok;
    tg_error_clear();
    TgStatus s = tg_tokenizer_hf_load(path, &tok);
    cr_expect_eq(s, TG_ERR_FORMAT, "%s: status %d: %s", name, (int)s, tg_error_message());
    cr_expect(strstr(tg_error_message(), path) != NULL, "%s: the message does not name the file: %s", name, tg_error_message());
    cr_expect(strstr(tg_error_message(), needle) != NULL, "%s: \"%s\" does not say \"%s\"", name, tg_error_message(), needle);
    cr_expect(strchr(tg_error_message(), '\n') == NULL, "%s: more than one line", name);
    cr_expect_eq(tok.kind, TG_TOKENIZER_NONE);
    free(file), free(path);
}

static void expect_refused_text(const char *name, char *text, const char *needle) {
    expect_refused(name, text, strlen(text), needle);
    free(text);
}

Test(tokenizer_json, what_cannot_round_trip_is_refused_naming_it, .init = setup, .fini = teardown) {
    expect_refused_text("same-id", with_added(EOT "," ADDED(400, "<|a|>", true) "," ADDED(400, "<|b|>", true)),
                        "added_tokens[1] (\"<|a|>\", special) and added_tokens[2] (\"<|b|>\", special) both have id 400");
    expect_refused_text("same-id-special", with_added(EOT "," ADDED(400, "<|a|>", false) "," ADDED(400, "<|a|>", true)),
                        "added_tokens[1] (\"<|a|>\") and added_tokens[2] (\"<|a|>\", special) both have id 400");
    expect_refused_text("same-id-out-of-order", with_added(ADDED(400, "<|b|>", false) "," EOT "," ADDED(400, "<|a|>", false)),
                        "added_tokens[0] (\"<|b|>\") and added_tokens[2] (\"<|a|>\") both have id 400");
    /* NUL: in an added token, a vocabulary string, a merge */
    expect_refused_text("nul", with_added(EOT "," ADDED(400, "ab\\u0000cd", false)),
                        "added token \"ab\\u0000cd\" (id 400) holds a NUL character (\\u0000)");
    expect_refused_text("nul-vocab", replaced(base, "\"a\": 97", "\"a\\u0000\": 97"),
                        "vocabulary token \"a\\u0000\" (id 97) is not made of ByteLevel characters");
    expect_refused_text("nul-merge", replaced(base, "\"merges\": [\n      \"", "\"merges\": [\n      \"a\\u0000 b\", \""),
                        "model.merges[0] (\"a\\u0000\" + \"b\") joins or makes a token not in the vocabulary");
    /* text after the object: the offset of its first byte */
    size_t len = strlen(base);
    char *after = format("text after the JSON object at byte %zu", len);
    expect_refused_text("after", format("%s{\"more\": 1}\n", base), after);
    free(after);
    {   /* white space after the object is fine */
        char *spaced = format("%s  \n\t\r\n", base), *path = write_json("space-after.json", spaced);
        TgTokenizer tok;
        assert_ok(tg_tokenizer_hf_load(path, &tok));
        tg_tokenizer_free(&tok);
        free(path), free(spaced);
    }
    /* bytes that are not UTF-8 (a raw 0xff in an added token: its export would not be JSON) */
    char *ff = with_added(EOT "," ADDED(400, "ab\xff" "cd", false));
    size_t at = (size_t)(strstr(ff, "\xff") - ff);
    char *ff_says = format("is not valid JSON: byte 0xff, which is not UTF-8 (JSON text is UTF-8), at byte %zu", at);
    expect_refused_text("ff", ff, ff_says);
    free(ff_says);
    expect_refused_text("overlong", with_added(EOT "," ADDED(400, "\xc0\xaf", false)), "which is not UTF-8");
    expect_refused_text("surrogate", with_added(EOT "," ADDED(400, "\\ud800x", false)), "a high surrogate with no low one after it");
    expect_refused_text("low-surrogate", with_added(EOT "," ADDED(400, "\\udc00", false)), "a low surrogate with no high one before it");
    expect_refused_text("raw-tab", with_added(EOT "," ADDED(400, "a\tb", false)), "a control character (0x09) not written as an escape");
    expect_refused_text("twice", replaced(base, "\"normalizer\": null", "\"normalizer\": null, \"normalizer\": null"),
                        "normalizer appears twice");
    expect_refused_text("leading-zero", replaced(base, "\"a\": 97", "\"a\": 097"), "a malformed number");
    expect_refused_text("nan", replaced(base, "\"dropout\": null", "\"dropout\": NaN"), "expected a value");
    /* nesting past 1000 levels, in a member tapegrad skips */
    char *deep = malloc(4096), *p = deep;
    p += sprintf(p, "{\"x\": ");
    for (int i = 0; i < 1001; i++) *p++ = '[';
    for (int i = 0; i < 1001; i++) *p++ = ']';
    strcpy(p, "}");
    expect_refused("deep", deep, strlen(deep), "nesting deeper than 1000 levels");
    free(deep);
    /* more added-token text than TG_TOKENIZER_HF_MAX_ADDED_BYTES */
    char *long_text = malloc(TG_TOKENIZER_HF_MAX_ADDED_BYTES + 2);
    memset(long_text, 'x', TG_TOKENIZER_HF_MAX_ADDED_BYTES + 1);
    long_text[TG_TOKENIZER_HF_MAX_ADDED_BYTES + 1] = '\0';
    char *entries = format(EOT ", {\"id\": 400, \"content\": \"%s\", \"special\": false}", long_text);
    expect_refused_text("too-long", with_added(entries), "hold 4194318 bytes of text; tapegrad reads at most 4194304");
    free(entries), free(long_text);
}

/* The CLI: a file refused at import exits 1 with the one line; a file accepted trains, and the
 * run opens again for every command that reads it. */
Test(tokenizer_json, every_command_opens_a_run_trained_on_an_imported_file, .init = setup, .fini = teardown, .timeout = 300) {
    char *corpus = datagen_english(11, 20000);
    datagen_write(dir, "corpus.txt", corpus, strlen(corpus));
    free(corpus);
    char *bad = with_added(EOT "," ADDED(400, "<|a|>", true) "," ADDED(400, "<|b|>", true)), *bad_path = write_json("bad.json", bad);
    char *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_SMALL_FLAGS " --data %s/corpus.txt --steps 1 --tokenizer hf:%s --out %s/bad-run", dir, bad_path, dir);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "both have id 400") != NULL, "%s", out);
    free(out), free(bad), free(bad_path);
    char *good = with_added(families[1].entries), *path = write_json("good.json", good);
    rc = ckpt_cli(&out, "train " CKPT_SMALL_FLAGS " --data %s/corpus.txt --steps 2 --eval-every 0 --tokenizer hf:%s --out %s/run", dir, path, dir);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    const char *commands[] = {"sample --run %s/run --tokens 4 --threads 1", "train --resume %s/run --steps 3 --threads 1",
                              "ckpt export %s/run --gguf %s/run.gguf", "ckpt export %s/run --hf %s/hf", "eval --run %s/run --threads 1"};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        char *args = format(commands[i], dir, dir);
        rc = ckpt_cli(&out, "%s", args);
        cr_expect_eq(rc, 0, "tapegrad %s exited %d:\n%s", args, rc, out);
        free(out), free(args);
    }
    TgTokenizer from_file, from_export;
    char *exported = format("%s/hf/tokenizer.json", dir);
    assert_ok(tg_tokenizer_hf_load(path, &from_file));
    assert_ok(tg_tokenizer_hf_load(exported, &from_export));
    cr_expect_eq(tg_tokenizer_fingerprint(&from_export), tg_tokenizer_fingerprint(&from_file));
    tg_tokenizer_free(&from_file), tg_tokenizer_free(&from_export);
    free(good), free(path), free(exported);
}

/* `ckpt export --hf` writes strict JSON for every kind of tokenizer: char, BPE, imported (with
 * added tokens of every sort of text). */
Test(tokenizer_json, every_export_is_strict_json, .init = setup, .fini = teardown, .timeout = 300) {
    char *corpus = datagen_english(12, 20000);
    strcpy(corpus + 1000, "\xc3\xa9t\xc3\xa9 \x01\x7f ");
    corpus[1000 + strlen("\xc3\xa9t\xc3\xa9 \x01\x7f ")] = ' ';
    datagen_write(dir, "corpus.txt", corpus, 20000);
    free(corpus);
    char *texts = with_added(families[5].entries), *path = write_json("texts.json", texts);
    const char *kinds[][2] = {{"char", "--tokenizer char"}, {"bpe", "--tokenizer bpe --vocab 300"}, {"hf", NULL}};
    char files[8192] = "";
    for (int k = 0; k < 3; k++) {
        char *flags = kinds[k][1] ? strdup(kinds[k][1]) : format("--tokenizer hf:%s", path), *out = NULL;
        int rc = ckpt_cli(&out, "train " CKPT_SMALL_FLAGS " --data %s/corpus.txt --steps 1 --eval-every 0 %s --out %s/%s", dir, flags, dir,
                          kinds[k][0]);
        cr_assert_eq(rc, 0, "%s", out);
        free(out);
        rc = ckpt_cli(&out, "ckpt export %s/%s --hf %s/%s-hf", dir, kinds[k][0], dir, kinds[k][0]);
        cr_assert_eq(rc, 0, "%s", out);
        free(out), free(flags);
        const char *names[] = {"tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"};
        for (int i = 0; i < 4; i++) snprintf(files + strlen(files), sizeof files - strlen(files), " %s/%s-hf/%s", dir, kinds[k][0], names[i]);
    }
    char *why;
    cr_expect(strict_json(files, &why), "%s", why);
    free(why), free(texts), free(path);
}

/* ---- tokenizer_config.json: the framing of documents ------------------------------------- */

#define MINIMIND_ADDED                                                                                                 \
    EOT "," ADDED(400, "<|im_start|>", true) "," ADDED(401, "<|im_end|>", true) "," ADDED(402, "<think>", false)

/* Loads dir/mm/tokenizer.json with `config` as the tokenizer_config.json beside it (NULL: none). */
static TgStatus load_with_config(const char *config, TgTokenizer *tok) {
    char *json = with_added(MINIMIND_ADDED), *path = datagen_path(dir, "mm/tokenizer.json"),
         *cpath = datagen_path(dir, "mm/tokenizer_config.json");
    datagen_write(dir, "mm/tokenizer.json", json, strlen(json));
    remove(cpath);
    if (config) datagen_write(dir, "mm/tokenizer_config.json", config, strlen(config));
    TgStatus s = tg_tokenizer_hf_load(path, tok);
    free(json), free(path), free(cpath);
    return s;
}

/* MiniMind's tokenizer_config.json beside its tokenizer.json names the BOS <|im_start|> and the
 * EOS <|im_end|>: the import frames documents with them and a run saves and loads them back;
 * GPT-2's (<|endoftext|> for both) changes nothing; a token the file lacks as special is refused,
 * naming the file. */
Test(tokenizer_json, a_tokenizer_config_beside_it_names_the_bos_and_eos, .init = setup, .fini = teardown) {
    TgTokenizer plain, framed, gpt2, saved;
    assert_ok(load_with_config(NULL, &plain));
    cr_expect(!plain.has_bos && plain.eot_id == 256 && tg_tokenizer_doc_start(&plain) == 256);
    const char *minimind =
        "{\"add_bos_token\": false, \"bos_token\": \"<|im_start|>\", \"chat_template\": \"{{ x }}\",\n"
        " \"eos_token\": {\"__type\": \"AddedToken\", \"content\": \"<|im_end|>\"}, \"pad_token\": \"<|endoftext|>\"}";
    assert_ok(load_with_config(minimind, &framed));
    cr_expect(framed.has_bos && framed.bos_id == 400 && framed.eot_id == 401, "bos %d, eos %d", (int)framed.bos_id,
              (int)framed.eot_id);
    cr_expect_eq(tg_tokenizer_doc_start(&framed), 400);
    cr_expect_neq(tg_tokenizer_fingerprint(&framed), tg_tokenizer_fingerprint(&plain),
                  "the framing is part of the encoding");
    expect_same_ids(&plain, &framed, SAMPLE, "the text itself encodes alike");
    char *txt = datagen_path(dir, "saved/tokenizer.txt");
    datagen_write(dir, "saved/placeholder", "", 0);
    assert_ok(tg_tokenizer_save(&framed, txt));
    assert_ok(tg_tokenizer_load(txt, &saved));
    cr_expect(saved.has_bos && saved.bos_id == 400 && saved.eot_id == 401);
    cr_expect_eq(tg_tokenizer_fingerprint(&saved), tg_tokenizer_fingerprint(&framed));
    assert_ok(load_with_config(
        "{\"bos_token\": \"<|endoftext|>\", \"eos_token\": \"<|endoftext|>\", \"unk_token\": null}", &gpt2));
    cr_expect(!gpt2.has_bos && gpt2.eot_id == 256);
    cr_expect_eq(tg_tokenizer_fingerprint(&gpt2), tg_tokenizer_fingerprint(&plain),
                 "a BOS that is <eot> frames nothing");
    tg_tokenizer_free(&plain), tg_tokenizer_free(&framed), tg_tokenizer_free(&gpt2), tg_tokenizer_free(&saved),
        free(txt);

    static const struct {
        const char *config, *needle;
    } refused[] = {
        {"{\"bos_token\": \"<s>\", \"eos_token\": \"<|im_end|>\"}",
         "\"bos_token\" is \"<s>\", which the tokenizer.json beside it does not have"},
        {"{\"bos_token\": \"<think>\", \"eos_token\": \"<|im_end|>\"}", "\"bos_token\" is \"<think>\""},
        {"{\"bos_token\": \"<|im_start|>\"}", "no \"eos_token\""},
        {"{\"bos_token\": 7, \"eos_token\": \"<|im_end|>\"}", "\"bos_token\" must be"},
        {"{\"bos_token\": \"<|im_start|>\", \"eos_token\": \"<|im_end|>\",", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        TgTokenizer tok;
        cr_expect_eq(load_with_config(refused[i].config, &tok), TG_ERR_FORMAT, "%s was taken", refused[i].config);
        cr_expect(strstr(tg_error_message(), refused[i].needle) &&
                      strstr(tg_error_message(), "mm/tokenizer_config.json"),
                  "%s: %s", refused[i].config, tg_error_message());
    }
}

/* prepare frames each document as MiniMind's pretraining does, BOS + text + EOS, once (a text
 * that already starts with the BOS or ends with the EOS gets no second), and no <eot> between. */
Test(tokenizer_json, prepare_frames_each_document_with_the_bos_and_eos, .init = setup, .fini = teardown,
     .timeout = 120) {
    TgTokenizer tok;
    assert_ok(load_with_config("{\"bos_token\": \"<|im_start|>\", \"eos_token\": \"<|im_end|>\"}", &tok));
    char *prose = datagen_english(3, 12000), line[512];
    char *jsonl = datagen_path(dir, "pretrain_t2t_mini.jsonl");
    FILE *f = fopen(jsonl, "w");
    cr_assert_not_null(f);
    const int docs = 60;
    for (int d = 0; d < docs; d++) {
        snprintf(line, sizeof line, "%s%.*s%s", d == 7 ? "<|im_start|>" : "", 150, prose + d * 190,
                 d == 9 ? "<|im_end|>" : "");
        for (char *c = line; *c; c++)
            if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = ' ';
        fprintf(f, "{\"text\": \"%s\"}\n", line);
    }
    fclose(f);
    char *out = NULL;
    int rc =
        ckpt_cli(&out, "prepare --data %s --tokenizer hf:%s/mm/tokenizer.json --out %s/ds --seq 16", jsonl, dir, dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(
        strstr(
            out,
            "each document framed as <|im_start|> + text + <|im_end|>, the BOS and EOS of the tokenizer_config.json"),
        "prepare says how it frames documents:\n%s", out);
    free(out);
    int32_t *train, *val;
    size_t n_train, n_val;
    uint32_t vocab;
    char *tp = datagen_path(dir, "ds/train.tok"), *vp = datagen_path(dir, "ds/val.tok");
    assert_ok(tg_tokfile_read(tp, &train, &n_train, &vocab));
    assert_ok(tg_tokfile_read(vp, &val, &n_val, &vocab));
    int32_t *ids = malloc((n_train + n_val) * sizeof *ids);
    memcpy(ids, train, n_train * sizeof *ids);
    memcpy(ids + n_train, val, n_val * sizeof *ids);
    size_t n = n_train + n_val;
    int bos = 0, eos = 0, eot = 0;
    for (size_t i = 0; i < n; i++) {
        bos += ids[i] == 400, eos += ids[i] == 401, eot += ids[i] == 256;
        if (ids[i] == 401 && i + 1 < n)
            cr_expect_eq(ids[i + 1], 400, "the EOS at %zu is followed by %d, not the BOS", i, (int)ids[i + 1]);
    }
    cr_expect(ids[0] == 400 && ids[n - 1] == 401, "the stream runs from BOS %d to EOS %d", (int)ids[0],
              (int)ids[n - 1]);
    cr_expect(bos == docs && eos == docs && eot == 0, "%d documents: %d BOS, %d EOS, %d <eot>", docs, bos, eos, eot);
    tg_tokenizer_free(&tok);
    free(prose), free(jsonl), free(tp), free(vp), free(train), free(val), free(ids);
}

/* ---- memory ------------------------------------------------------------------------------ */

/* A /proc/self/status figure in kB ("VmRSS", "VmHWM", "VmSize"). */
static long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0 && line[strlen(key)] == ':') kb = strtol(line + strlen(key) + 1, NULL, 10);
    if (f) fclose(f);
    return kb;
}

/* ByteLevel text of byte b (the vocabulary string of its token). */
static char *byte_text(int b) { return tg_tokenizer_hf_token_text(&bpe, b); }

/* The files the bound is held to, each close to the worst of its kind. */
static void write_bytes_vocab(FILE *f) {
    for (int b = 0; b < 256; b++) {
        char *t = byte_text(b);
        fputc('"', f);
        for (const char *c = t; *c; c++) fprintf(f, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
        fprintf(f, "\":%d,", b);
        free(t);
    }
}

#define HEAD "{\"added_tokens\":[" EOT "],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\"},"

static char *make_junk(size_t target) { /* a long array of numbers under a member tapegrad skips */
    char *path = datagen_path(dir, "junk.json");
    FILE *f = fopen(path, "w");
    fprintf(f, "%.*s, \"junk\": [1", (int)(strrchr(base, '}') - base), base);
    for (size_t n = strlen(base); n < target; n += 2) fputs(",1", f);
    fputs("]}", f);
    fclose(f);
    return path;
}

static char *make_vocab(void) { /* 150,000 short vocabulary strings, no merges */
    char *path = datagen_path(dir, "vocab.json");
    FILE *f = fopen(path, "w");
    fputs(HEAD "\"model\":{\"type\":\"BPE\",\"vocab\":{", f);
    write_bytes_vocab(f);
    fputs("\"<|endoftext|>\":256", f);
    int id = 257;
    for (int a = 'A'; a <= 'z' && id < 150000; a++)
        for (int b = 'A'; b <= 'z' && id < 150000; b++)
            for (int c = 'A'; c <= 'z' && id < 150000; c++)
                if (a != '\\' && b != '\\' && c != '\\') fprintf(f, ",\"%c%c%c\":%d", a, b, c, id++);
    fputs("},\"merges\":[]}}", f);
    fclose(f);
    return path;
}

static char *make_merges(void) { /* every string of 2 to 4 of 18 letters, each made by every split */
    char *path = datagen_path(dir, "merges.json");
    FILE *f = fopen(path, "w");
    fputs(HEAD "\"model\":{\"type\":\"BPE\",\"vocab\":{", f);
    write_bytes_vocab(f);
    fputs("\"<|endoftext|>\":256", f);
    enum { K = 18 };
    int id = 257;
    char s[5];
    for (int len = 2; len <= 4; len++) {
        int count = 1;
        for (int i = 0; i < len; i++) count *= K;
        for (int x = 0; x < count; x++) {
            for (int i = 0, v = x; i < len; i++, v /= K) s[i] = (char)('a' + v % K);
            fprintf(f, ",\"%.*s\":%d", len, s, id++);
        }
    }
    fputs("},\"merges\":[", f);
    bool first = true;
    for (int len = 2; len <= 4; len++) {
        int count = 1;
        for (int i = 0; i < len; i++) count *= K;
        for (int x = 0; x < count; x++) {
            for (int i = 0, v = x; i < len; i++, v /= K) s[i] = (char)('a' + v % K);
            for (int cut = 1; cut < len; cut++, first = false) fprintf(f, "%s\"%.*s %.*s\"", first ? "" : ",", cut, s, len - cut, s + cut);
        }
    }
    fputs("]}}", f);
    fclose(f);
    return path;
}

static char *make_added(void) { /* 65,535 added tokens of 62 bytes: the text limit, nearly */
    char *path = datagen_path(dir, "added.json");
    FILE *f = fopen(path, "w");
    fputs("{\"added_tokens\":[" EOT, f);
    for (int k = 0; k < 65535; k++) {
        fprintf(f, ",{\"id\":%d,\"content\":\"", 257 + k);
        for (int r = 0; r < 12; r++) fprintf(f, "%05d", k);
        fputs("<>\",\"special\":false}", f);
    }
    fputs("],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{", f);
    write_bytes_vocab(f);
    fputs("\"<|endoftext|>\":256},\"merges\":[]}}", f);
    fclose(f);
    return path;
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

/* Loads path in a child process and returns how far its RSS rose (kB), or -1 when the load
 * failed. */
static long load_peak_kb(const char *path) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        long before = status_kb("VmRSS");
        TgTokenizer tok;
        TgStatus s = tg_tokenizer_hf_load(path, &tok);
        long rose = s == TG_OK ? status_kb("VmHWM") - before : -1;
        if (s != TG_OK) fprintf(stderr, "%s\n", tg_error_message());
        tg_tokenizer_free(&tok);
        ssize_t w = write(fds[1], &rose, sizeof rose);
        _exit(w == sizeof rose ? 0 : 1);
    }
    close(fds[1]);
    long rose = -1;
    ssize_t got = read(fds[0], &rose, sizeof rose);
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    cr_assert(got == sizeof rose && WIFEXITED(status), "the child loading %s did not report", path);
    return rose;
}

/* tokenizer_hf.h: reading a file of F bytes takes at most 10 F + 64 MiB more RSS. */
Test(tokenizer_json, reading_takes_no_more_memory_than_the_stated_bound, .init = setup, .fini = teardown, .timeout = 300) {
    if (UNDER_ASAN) {
        fprintf(stderr, "the memory bound is not measured under AddressSanitizer (its shadow memory and quarantine)\n");
        return;
    }
    char *files[] = {make_junk(16 << 20), make_vocab(), make_merges(), make_added()};
    for (int i = 0; i < 4; i++) {
        long size = file_size(files[i]), rose = load_peak_kb(files[i]);
        double bound = (10.0 * (double)size + 64.0 * (1 << 20)) / 1024;
        cr_expect(rose >= 0, "%s was refused", files[i]);
        cr_expect(rose <= bound, "%s: %ld bytes took %ld kB, more than the %.0f kB bound", files[i], size, rose, bound);
        fprintf(stderr, "tokenizer.json of %ld bytes: RSS rose by %ld kB (%.2f per byte)\n", size, rose, (double)rose * 1024 / (double)size);
        /* what the reader skips costs nothing: a tree of it took 40 times the file */
        if (i == 0) cr_expect(rose <= (1.5 * (double)size + 16.0 * (1 << 20)) / 1024, "skipped members: %ld kB for %ld bytes", rose, size);
        free(files[i]);
    }
}

/* Under a lowered address-space limit (ulimit -v, in a fresh process: the test's own threads
 * keep malloc arenas whose reserved address space would hide the limit), reading says it ran out
 * of memory, whichever allocation fails first, and never aborts or calls the file malformed.
 * OpenBLAS runs one thread (its start-up spins for good when it cannot make its threads). */
Test(tokenizer_json, a_lack_of_memory_is_said_so, .init = setup, .fini = teardown, .timeout = 300) {
    if (UNDER_ASAN) {
        fprintf(stderr, "address-space limits are not tried under AddressSanitizer (it reserves terabytes)\n");
        return;
    }
    char *path = make_merges(), *corpus = datagen_english(13, 4000), *out = NULL;
    datagen_write(dir, "corpus.txt", corpus, strlen(corpus));
    long start_kb = 16 << 10; /* the least that lets the program start */
    while (start_kb < (4L << 20)) {
        char *launcher = format("ulimit -v %ld && OPENBLAS_NUM_THREADS=1 timeout 60", start_kb);
        int rc = ckpt_cli_launched(&out, launcher, "--version");
        free(launcher), free(out);
        if (rc == 0) break;
        start_kb += 8 << 10;
    }
    int nomem = 0, read = 0;
    char *want = format("out of memory reading %s (", path);
    for (long kb = start_kb; kb < start_kb + (256L << 10) && !read; kb += 4 << 10) {
        char *launcher = format("ulimit -v %ld && OPENBLAS_NUM_THREADS=1 timeout 120", kb);
        int rc = ckpt_cli_launched(&out, launcher, "train " CKPT_SMALL_FLAGS " --data %s/corpus.txt --steps 1 --eval-every 0 "
                                   "--tokenizer hf:%s --out %s/run-%ld", dir, path, dir, kb);
        const char *error = strstr(out, "tapegrad train: "), *end = error ? strchr(error, '\n') : NULL;
        if (error && memmem(error, end ? (size_t)(end - error) : strlen(error), path, strlen(path))) { /* the file's fault */
            cr_expect(rc == 1 && strstr(error, want), "ulimit -v %ld: exit %d: %s", kb, rc, error);
            nomem += strstr(error, want) != NULL;
        }
        cr_expect(!strstr(out, "internal error at") || !strstr(out, "/data/"), "ulimit -v %ld: the reader aborted: %s", kb, out);
        read += strstr(out, "\ncorpus: ") != NULL; /* past the tokenizer: what follows is not this test's */
        free(launcher), free(out);
    }
    cr_expect(nomem >= 2 && read == 1, "%d limits ran out of memory reading, %d read the file", nomem, read);
    free(want), free(path), free(corpus);
}

/* ---- 65,535 added tokens ------------------------------------------------------------------ */

/* Comparing every added token at every position took 35-50 s for this; the automaton takes a
 * few milliseconds. A quadratic matcher would overrun the bound by far, on any machine. */
Test(tokenizer_json, sixty_five_thousand_added_tokens_encode_in_linear_time, .init = setup, .fini = teardown, .timeout = 120) {
    size_t cap = 65535 * 80 + 64, n = 0;
    char *entries = malloc(cap);
    n += (size_t)snprintf(entries + n, cap - n, "%s", EOT);
    for (int k = 0; k < 65534; k++)
        n += (size_t)snprintf(entries + n, cap - n, ",{\"id\": %d, \"content\": \"<|tok%05d|>\", \"special\": false}", 400 + k, k);
    char *text = with_added(entries), *path = write_json("many.json", text);
    TgTokenizer tok;
    assert_ok(tg_tokenizer_hf_load(path, &tok));
    cr_assert_eq(tok.n_added, 65535);
    size_t len = 171000;
    char *corpus = datagen_english(9, len);
    for (size_t at = 0; at + 12 < len; at += 97) memcpy(corpus + at, "<|tok", 5), snprintf(corpus + at + 5, 8, "%05d|>", (int)(at % 65534)), corpus[at + 12] = ' ';
    size_t n_ids;
    clock_t t0 = clock();
    int32_t *ids = encode(&tok, corpus, &n_ids);
    double cpu = (double)(clock() - t0) / CLOCKS_PER_SEC;
    cr_expect_lt(cpu, 5.0, "encoding %zu bytes with 65,535 added tokens took %.1f s of CPU", len, cpu);
    int added = 0;
    for (size_t i = 0; i < n_ids; i++) added += ids[i] >= 400;
    cr_expect_gt(added, 1700, "%d added tokens found", added);
    char *back;
    size_t back_len;
    assert_ok(tg_tokenizer_decode(&tok, ids, n_ids, &back, &back_len));
    cr_expect(back_len == len && memcmp(back, corpus, len) == 0, "decoding gives the text back");
    free(back), free(ids), free(corpus), free(entries), free(text), free(path);
    tg_tokenizer_free(&tok);
}
