/* Datasets: JSON Lines read by the rules of data/jsonl.h, sources streamed as documents
 * (data/sources.h), special tokens, `tapegrad prepare` and the runs that read its folders. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ckptutil.h"
#include "data/dataset.h"
#include "data/jsonl.h"
#include "data/prepare.h"
#include "data/sources.h"
#include "tokenizer/tokenizer_hf.h"
#include "data/tokfile.h"
#include "datagen.h"
#include "tapegrad/tokenizer.h"
#include "testutil.h"

static char *dir;
static void make_dir(void) { dir = datagen_tempdir(); }
static void remove_dir(void) {
    datagen_remove_tree(dir);
    free(dir);
}
TestSuite(jsonl, .init = make_dir, .fini = remove_dir);
TestSuite(specials, .init = make_dir, .fini = remove_dir);
TestSuite(datasets, .init = make_dir, .fini = remove_dir, .timeout = 300);

/* ---- helpers ----------------------------------------------------------------------------- */

typedef struct {
    char *texts[64];
    size_t lens[64];
    int n;
    TgDocReader reader;
} Docs;

/* Every document of `path` (each read whole), the reader's counts kept in d->reader. */
static TgStatus read_docs(const char *path, bool strict, Docs *d) {
    memset(d, 0, sizeof *d);
    TgSourceList list;
    TG_TRY(tg_sources_list(path, &list));
    TgDocOptions opt = {.strict = strict, .whole_documents = true};
    tg_doc_reader_open(&d->reader, &list, &opt);
    TgStatus st;
    for (;;) {
        TgDocPiece p;
        bool got;
        st = tg_doc_reader_next(&d->reader, &p, &got);
        if (st != TG_OK || !got) break;
        cr_assert(p.doc_end);
        if (d->n == 64) continue; /* the first 64 kept */
        d->texts[d->n] = malloc(p.len + 1);
        memcpy(d->texts[d->n], p.text, p.len);
        d->texts[d->n][p.len] = '\0';
        d->lens[d->n++] = p.len;
    }
    tg_doc_reader_close(&d->reader);
    tg_sources_free(&list);
    return st;
}

static void free_docs(Docs *d) {
    for (int i = 0; i < d->n; i++) free(d->texts[i]);
}

/* Whether one of the reader's first errors holds `needle`. */
static bool error_says(const Docs *d, const char *needle) {
    for (int i = 0; i < d->reader.n_errors; i++)
        if (strstr(d->reader.errors[i], needle)) return true;
    return false;
}

static void write_gzip(const char *path, const void *data, size_t len) {
    gzFile f = gzopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(gzwrite(f, data, (unsigned)len), (int)len);
    cr_assert_eq(gzclose(f), Z_OK);
}

/* A MiniMind-style pretraining set: {"text": ...} lines, some texts in <|im_start|> ... <|im_end|>,
 * some ending in <|endoftext|>. */
static char *minimind_jsonl(uint64_t seed, int lines, size_t *len) {
    size_t cap = (size_t)lines * 700 + 1, n = 0;
    char *out = malloc(cap);
    for (int i = 0; i < lines; i++) {
        char *text = datagen_english(seed + (uint64_t)i, 200 + (size_t)(i % 7) * 60);
        for (char *c = text; *c; c++)
            if (*c == '\n') *c = ' ';
        const char *pre = i % 3 == 0 ? "<|im_start|>" : "", *post = i % 3 == 0 ? "<|im_end|>" : i % 5 == 1 ? "<|endoftext|>" : "";
        n += (size_t)snprintf(out + n, cap - n, "{\"text\": \"%s%s%s\"}\n", pre, text, post);
        free(text);
    }
    *len = n;
    return out;
}

/* ---- JSONL rules ------------------------------------------------------------------------- */

Test(jsonl, every_rule_on_a_crafted_file) {
    static const char text[] =
        "\xEF\xBB\xBF{\"text\": \"first, after a BOM\"}\n"               /* 1 */
        "{\"text\": \"crlf line\"}\r\n"                                    /* 2 */
        "\n"                                                               /* 3: empty */
        "   \t\n"                                                          /* 4: blank */
        "{\"text\": \"nul \\u0000 inside\", \"n\": [1, {\"a\": 2}]}\n"     /* 5 */
        "{\"text\": \"bad \xff utf-8\"}\n"                                 /* 6: malformed */
        "{\"text\": {\"nested\": \"object\"}}\n"                           /* 7: malformed */
        "{\"text\": [\"an\", \"array\"]}\n"                                /* 8: malformed */
        "{\"text\": 42}\n"                                                 /* 9: malformed */
        "{\"title\": \"no text field\"}\n"                                 /* 10: malformed */
        "[\"not an object\"]\n"                                            /* 11: malformed */
        "{\"text\": \"a\", \"text\": \"b\"}\n"                             /* 12: malformed */
        "\xEF\xBB\xBF{\"text\": \"a BOM not at the start\"}\n"             /* 13: malformed */
        "{\"text\": \"\"}\n"                                               /* 14: empty text */
        "{\"text\": \"escapes \\\" \\\\ \\n \\u00e9 \\ud83d\\ude00\"}\n"   /* 15 */
        "{\"text\": \"the last line is cut";                               /* 16: malformed */
    datagen_write(dir, "crafted.jsonl", text, sizeof text - 1);
    char *path = datagen_path(dir, "crafted.jsonl");
    Docs d;
    assert_ok(read_docs(path, false, &d));
    cr_assert_eq(d.n, 4, "documents: %d", d.n);
    cr_expect_str_eq(d.texts[0], "first, after a BOM");
    cr_expect_str_eq(d.texts[1], "crlf line");
    cr_expect_eq(d.lens[2], strlen("nul ") + 1 + strlen(" inside"));
    cr_expect(memcmp(d.texts[2], "nul \0 inside", d.lens[2]) == 0, "\\u0000 is a NUL byte of the text");
    cr_expect_str_eq(d.texts[3], "escapes \" \\ \n \xc3\xa9 \xf0\x9f\x98\x80");
    cr_expect_eq(d.reader.malformed_lines, 9);
    cr_expect_eq(d.reader.empty_texts, 1);
    cr_expect_eq(d.reader.n_errors, TG_DOC_REPORTED_ERRORS, "the first five are kept");
    cr_expect(error_says(&d, "line 6 is not valid JSON: byte 0xff, which is not UTF-8"));
    cr_expect(error_says(&d, "line 7: \"text\" is an object, not a string"));
    cr_expect(error_says(&d, "line 8: \"text\" is an array, not a string"));
    cr_expect(error_says(&d, "line 9: \"text\" is a number, not a string"));
    cr_expect(error_says(&d, "line 10 has no \"text\" field"));
    free_docs(&d);
    /* --strict: the first malformed line stops the reading, naming it */
    assert_fails(read_docs(path, true, &d), TG_ERR_FORMAT, "line 6 is not valid JSON");
    cr_expect(strstr(tg_error_message(), "crafted.jsonl") && strstr(tg_error_message(), "`strict`"));
    free_docs(&d);
    free(path);
}

Test(jsonl, the_rest_of_the_errors_and_a_truncated_last_line) {
    TgJsonlReader r;
    static const char text[] = "[\"not an object\"]\n{\"a\": 1, \"a\": 2}\n{\"text\": \"x\"} trailing\n{\"text\": \"cut";
    datagen_write(dir, "more.jsonl", text, sizeof text - 1);
    char *path = datagen_path(dir, "more.jsonl");
    assert_ok(tg_jsonl_open(&r, path));
    TgJsonlLine line;
    assert_ok(tg_jsonl_next(&r, &line));
    cr_expect(line.kind == TG_JSONL_MALFORMED && strstr(line.why, "line 1 is an array, not a JSON object"), "%s", line.why);
    assert_ok(tg_jsonl_next(&r, &line));
    cr_expect_eq(line.kind, TG_JSONL_OBJECT, "a key given twice is JSON; the reader of a member says whether it minds");
    assert_ok(tg_jsonl_next(&r, &line));
    cr_expect(line.kind == TG_JSONL_MALFORMED && strstr(line.why, "text after the JSON object"), "%s", line.why);
    assert_ok(tg_jsonl_next(&r, &line));
    cr_expect(line.kind == TG_JSONL_MALFORMED && line.number == 4 && strstr(line.why, "a string that never ends"), "%s",
              line.why);
    assert_ok(tg_jsonl_next(&r, &line));
    cr_expect_eq(line.kind, TG_JSONL_END);
    tg_jsonl_close(&r);
    free(path);
}

Test(jsonl, a_line_past_the_limit_is_skipped_without_being_held, .timeout = 120) {
    /* 100 MB of one line, between two good ones: malformed, and the next line is read */
    char *path = datagen_path(dir, "long.jsonl");
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs("{\"text\": \"before\"}\n{\"text\": \"", f);
    enum { BLOCK = 1 << 20 };
    char *block = malloc(BLOCK);
    memset(block, 'a', BLOCK);
    for (int i = 0; i < 100; i++) cr_assert_eq(fwrite(block, 1, BLOCK, f), (size_t)BLOCK);
    fputs("\"}\n{\"text\": \"after\"}\n", f);
    cr_assert_eq(fclose(f), 0);
    free(block);
    TgJsonlReader r;
    TgJsonlLine line;
    assert_ok(tg_jsonl_open(&r, path));
    assert_ok(tg_jsonl_next(&r, &line));
    cr_expect_eq(line.kind, TG_JSONL_OBJECT);
    assert_ok(tg_jsonl_next(&r, &line));
    cr_expect(line.kind == TG_JSONL_MALFORMED && line.number == 2 && strstr(line.why, "longer than 64 MiB"), "%s", line.why);
    cr_expect_leq(r.cap, (size_t)TG_JSONL_MAX_LINE_BYTES + 2 * TG_JSONL_BLOCK_BYTES + 1, "the buffer grew to %zu", r.cap);
    assert_ok(tg_jsonl_next(&r, &line));
    cr_assert_eq(line.kind, TG_JSONL_OBJECT);
    cr_expect_eq(line.number, 3);
    cr_expect(strstr(line.text, "after"));
    tg_jsonl_close(&r);
    free(path);
}

Test(jsonl, a_truncated_gzip_is_an_error_after_its_good_lines) {
    size_t len;
    char *text = minimind_jsonl(5, 200, &len);
    char *path = datagen_path(dir, "cut.jsonl.gz");
    write_gzip(path, text, len);
    size_t gz_len;
    uint8_t *gz = ckpt_read_file(path, &gz_len);
    ckpt_write_file(path, gz, gz_len / 2);
    Docs d;
    assert_fails(read_docs(path, false, &d), TG_ERR_FORMAT, "cut.jsonl.gz (gzip)");
    cr_expect_gt(d.n, 0, "the lines before the cut were read");
    free_docs(&d);
    free(gz);
    free(path);
    free(text);
}

/* ---- special tokens ---------------------------------------------------------------------------- */

Test(specials, chatml_tokens_are_single_ids_saved_and_exported) {
    size_t len;
    char *text = minimind_jsonl(11, 80, &len);
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train_specials(text, len, 400, "chatml", &tok));
    cr_assert_eq(tok.n_specials, 2);
    cr_expect_eq(tok.vocab_size, 400);
    const char *sample = "<|im_start|>hello<|im_end|><|im_start|><|endoftext|><|im_end|>";
    int32_t ids[128];
    size_t n;
    assert_ok(tg_tokenizer_encode(&tok, sample, strlen(sample), ids, 128, &n));
    cr_expect_eq(ids[0], 257, "<|im_start|> is id 257");
    cr_expect_eq(ids[n - 1], 258, "<|im_end|> is id 258");
    cr_expect_eq(ids[n - 3], 257);
    cr_expect_eq(ids[n - 2], TG_TOKENIZER_BPE_EOT);
    for (int32_t i = 0; i < tok.n_merges; i++) {
        size_t l;
        const uint8_t *b = tg_tokenizer_token_bytes(&tok, 259 + i, &l);
        cr_expect_null(memmem(b, l, "<|im", 4) && l > 4 ? memmem(b, l, "|>", 2) : NULL, "a merge learnt a special");
    }
    /* saved (version 3) and loaded: the same tokenizer */
    char *path = datagen_path(dir, "tokenizer.txt");
    assert_ok(tg_tokenizer_save(&tok, path));
    char *saved = ckpt_read_text(path);
    cr_expect(strncmp(saved, "tapegrad-tokenizer 3\n", 21) == 0);
    cr_expect(strstr(saved, "special_tokens 2\n<|im_start|>\n<|im_end|>\n"));
    TgTokenizer back;
    assert_ok(tg_tokenizer_load(path, &back));
    cr_expect_eq(back.fingerprint, tok.fingerprint);
    cr_expect_eq(back.n_specials, 2);
    /* exported as special (control) tokens */
    bool special = false;
    cr_expect(tg_tokenizer_hf_is_added(&back, 257, &special) && special);
    cr_expect(tg_tokenizer_hf_is_added(&back, 258, &special) && special);
    char *json = datagen_path(dir, "tokenizer.json");
    assert_ok(tg_tokenizer_hf_save(&back, json));
    char *exported = ckpt_read_text(json);
    cr_expect(strstr(exported, "\"content\": \"<|im_start|>\""), "%s", exported);
    free(exported), free(json);
    /* a tokenizer without specials still writes version 2, as before */
    TgTokenizer plain;
    assert_ok(tg_tokenizer_bpe_train(text, len, 300, &plain));
    assert_ok(tg_tokenizer_save(&plain, path));
    char *v2 = ckpt_read_text(path);
    cr_expect(strncmp(v2, "tapegrad-tokenizer 2\n", 21) == 0);
    free(v2);
    tg_tokenizer_free(&plain);
    tg_tokenizer_free(&back);
    tg_tokenizer_free(&tok);
    free(saved), free(path), free(text);
}

Test(specials, bad_names_are_refused) {
    TgTokenizer tok;
    assert_fails(tg_tokenizer_bpe_train_specials("abcabc", 6, 300, "<a>,<a>", &tok), TG_ERR_ARG, "names <a> twice");
    assert_fails(tg_tokenizer_bpe_train_specials("abcabc", 6, 300, "<a b>", &tok), TG_ERR_ARG, "white space");
    assert_fails(tg_tokenizer_bpe_train_specials("abcabc", 6, 300, "<a>,,<b>", &tok), TG_ERR_ARG, "1 to 64 bytes");
    assert_fails(tg_tokenizer_bpe_train_specials("abcabc", 6, 258, "chatml", &tok), TG_ERR_ARG, "at least 259");
}

/* ---- prepare ---------------------------------------------------------------------------------- */

static void options(TgPrepareOptions *opt, const char *sources, int32_t vocab, int threads) {
    tg_prepare_options_default(opt);
    opt->sources = sources;
    opt->vocab_size = vocab;
    opt->special_tokens = "chatml";
    opt->seq_len = 16;
    opt->threads = threads;
}

static uint8_t *tokens_of(const char *dataset, const char *file, size_t *len) {
    char *path = datagen_path(dataset, file);
    uint8_t *b = ckpt_read_file(path, len);
    free(path);
    return b;
}

Test(datasets, documents_end_in_one_eot_and_specials_are_never_doubled) {
    size_t len;
    char *text = minimind_jsonl(21, 300, &len);
    datagen_write(dir, "pre.jsonl", text, len);
    char *src = datagen_path(dir, "pre.jsonl"), *out = datagen_path(dir, "ds");
    TgPrepareOptions opt;
    options(&opt, src, 400, 2);
    TgPrepareResult res;
    assert_ok(tg_prepare_dataset(&opt, out, NULL, &res, NULL));
    cr_expect_eq(res.documents, 300);
    TgDataset d;
    assert_ok(tg_dataset_open(out, true, &d));
    size_t n = (size_t)(d.train.n + d.val.n), eots = 0, starts = 0, ends = 0;
    int32_t *ids = malloc(n * sizeof *ids);
    assert_ok(tg_token_store_read(&d.train, 0, (size_t)d.train.n, ids));
    assert_ok(tg_token_store_read(&d.val, 0, (size_t)d.val.n, ids + d.train.n));
    for (size_t i = 0; i < n; i++) {
        eots += ids[i] == TG_TOKENIZER_BPE_EOT;
        starts += ids[i] == 257, ends += ids[i] == 258;
        if (i > 0) cr_assert(!(ids[i] == TG_TOKENIZER_BPE_EOT && ids[i - 1] == TG_TOKENIZER_BPE_EOT), "<eot> doubled at %zu", i);
    }
    cr_expect_eq(eots, 300, "one <eot> a document, those ending in <|endoftext|> included");
    cr_expect_eq(starts, 100);
    cr_expect_eq(ends, 100);
    cr_expect_eq(ids[n - 1], TG_TOKENIZER_BPE_EOT);
    /* the stream decodes to the texts, the specials' text included */
    char *back;
    size_t back_len;
    assert_ok(tg_tokenizer_decode(&d.tok, ids, n, &back, &back_len));
    cr_expect(strstr(back, "<|im_start|>") && strstr(back, "<|im_end|>"));
    free(back), free(ids);
    tg_dataset_close(&d);
    free(src), free(out), free(text);
}

Test(datasets, gzip_gives_the_dataset_of_the_plain_file) {
    size_t len;
    char *text = minimind_jsonl(31, 200, &len);
    datagen_write(dir, "plain/pre.jsonl", text, len);
    char *plain_dir = datagen_path(dir, "plain"), *gz_path = datagen_path(dir, "gz/pre.jsonl.gz"), *gz_dir = datagen_path(dir, "gz");
    mkdir(gz_dir, 0755);
    write_gzip(gz_path, text, len);
    char *a = datagen_path(dir, "a"), *b = datagen_path(dir, "b");
    TgPrepareOptions opt;
    TgPrepareResult ra, rb;
    options(&opt, plain_dir, 350, 2);
    assert_ok(tg_prepare_dataset(&opt, a, NULL, &ra, NULL));
    options(&opt, gz_dir, 350, 2);
    assert_ok(tg_prepare_dataset(&opt, b, NULL, &rb, NULL));
    cr_expect_eq(ra.fingerprint, rb.fingerprint);
    cr_expect_eq(rb.text_bytes, len);
    cr_expect_lt(rb.file_bytes, len);
    size_t la, lb;
    uint8_t *ta = tokens_of(a, TG_PREPARE_TRAIN_FILE, &la), *tb = tokens_of(b, TG_PREPARE_TRAIN_FILE, &lb);
    cr_expect(la == lb && memcmp(ta, tb, la) == 0, "train.tok differs");
    free(ta), free(tb), free(a), free(b), free(plain_dir), free(gz_path), free(gz_dir), free(text);
}

Test(datasets, the_tokens_do_not_depend_on_the_threads_or_the_pieces) {
    /* a 3 MiB text document, cut into pieces (sources.h), and a folder mixing it with JSONL */
    size_t big = 3u << 20, len;
    char *prose = datagen_prose(41, big);
    datagen_write(dir, "mix/a.txt", prose, big);
    char *jsonl = minimind_jsonl(42, 100, &len);
    datagen_write(dir, "mix/b.jsonl", jsonl, len);
    char *mix = datagen_path(dir, "mix");
    uint64_t first = 0;
    for (int threads = 1; threads <= 3; threads++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", threads);
        char *out = datagen_path(dir, name);
        TgPrepareOptions opt;
        options(&opt, mix, 600, threads);
        TgPrepareResult res;
        assert_ok(tg_prepare_dataset(&opt, out, NULL, &res, NULL));
        if (threads == 1) first = res.fingerprint;
        cr_expect_eq(res.fingerprint, first, "%d threads give another dataset", threads);
        if (threads == 2) {
            /* the pieces encode as the whole document does */
            TgDataset d;
            assert_ok(tg_dataset_open(out, true, &d));
            size_t cap = big + 1, n, all = (size_t)(d.train.n + d.val.n);
            int32_t *whole = malloc(cap * sizeof *whole), *stream = malloc(all * sizeof *stream);
            assert_ok(tg_tokenizer_encode(&d.tok, prose, big, whole, cap, &n));
            cr_assert_lt(n, all);
            assert_ok(tg_token_store_read(&d.train, 0, (size_t)d.train.n, stream));
            assert_ok(tg_token_store_read(&d.val, 0, (size_t)d.val.n, stream + d.train.n));
            cr_expect(memcmp(whole, stream, n * sizeof *whole) == 0, "the pieces' tokens differ from the whole's");
            cr_expect_eq(stream[n], TG_TOKENIZER_BPE_EOT);
            free(whole), free(stream);
            tg_dataset_close(&d);
        }
        free(out);
    }
    free(mix), free(jsonl), free(prose);
}

Test(datasets, an_existing_output_is_reused_or_refused) {
    size_t len;
    char *text = minimind_jsonl(51, 120, &len);
    datagen_write(dir, "pre.jsonl", text, len);
    char *src = datagen_path(dir, "pre.jsonl"), *out = datagen_path(dir, "ds");
    TgPrepareOptions opt;
    options(&opt, src, 300, 2);
    bool already;
    assert_ok(tg_prepare_dataset(&opt, out, NULL, NULL, &already));
    cr_expect_not(already);
    assert_ok(tg_prepare_dataset(&opt, out, NULL, NULL, &already));
    cr_expect(already);
    opt.vocab_size = 301;
    assert_fails(tg_prepare_dataset(&opt, out, NULL, NULL, NULL), TG_ERR_IO, "holds another dataset, prepared with bpe vocab 300");
    opt.vocab_size = 300;
    text[20] = text[20] == 'a' ? 'b' : 'a'; /* the same recipe, another source */
    datagen_write(dir, "pre.jsonl", text, len);
    assert_fails(tg_prepare_dataset(&opt, out, NULL, NULL, NULL), TG_ERR_IO, "other sources");
    datagen_write(dir, "not-a-dataset/x", "x", 1);
    char *other = datagen_path(dir, "not-a-dataset");
    assert_fails(tg_prepare_dataset(&opt, other, NULL, NULL, NULL), TG_ERR_IO, "is not a dataset folder");
    /* a token file changed after prepare is caught when the dataset is opened */
    char *val = datagen_path(out, TG_PREPARE_VAL_FILE);
    size_t vlen;
    uint8_t *v = ckpt_read_file(val, &vlen);
    v[vlen - 2] ^= 1;
    ckpt_write_file(val, v, vlen);
    TgDataset d;
    assert_fails(tg_dataset_open(out, false, &d), TG_ERR_MISMATCH, "changed after it was prepared");
    free(v), free(val), free(other), free(src), free(out), free(text);
}

/* ---- the commands -------------------------------------------------------------------------------- */

static double json_number_of(const char *json, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *at = strstr(json, pattern);
    return at ? strtod(at + strlen(pattern), NULL) : NAN;
}

Test(datasets, minimind_jsonl_through_prepare_train_eval) {
    size_t len;
    char *text = minimind_jsonl(61, 400, &len);
    datagen_write(dir, "pretrain_hq.jsonl", text, len);
    char *out;
    int rc = ckpt_cli(&out, "prepare --data %s/pretrain_hq.jsonl --out %s/ds --vocab 320 --special-tokens chatml --seq 32",
                      dir, dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "400 documents"), "%s", out);
    /* the hint runs as printed (a short run's flags after it) */
    char *hint = strstr(out, "train on it with: "), command[8192];
    cr_assert_not_null(hint, "%s", out);
    hint += strlen("train on it with: ");
    cr_expect(strncmp(hint, TAPEGRAD_BIN " train --dataset ", strlen(TAPEGRAD_BIN " train --dataset ")) == 0, "%s", hint);
    snprintf(command, sizeof command, "%.*s " CKPT_TEST_FLAGS " --steps 1 --eval-every 0 --out %s/hinted >/dev/null 2>&1",
             (int)strcspn(hint, "\n"), hint, dir);
    cr_expect_eq(test_run(command), 0, "the hint did not run as printed: %s", command);
    free(out);
    /* a dataset folder given where a run is asked for: named as what it is, with what to do */
    rc = ckpt_cli(&out, "eval --run %s/ds", dir);
    cr_expect(rc == 1 && strstr(out, "is a dataset folder (tapegrad prepare's), not a run: train a run on it"), "%d: %s",
              rc, out);
    free(out);
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --dataset %s/ds --steps 20 --eval-every 10 --out %s/run", dir, dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "bits per byte"), "%s", out);
    free(out);
    char *metrics_path = datagen_path(dir, "run/metrics.jsonl"), *metrics = ckpt_read_text(metrics_path);
    cr_expect(strstr(metrics, "\"val_bpb\":"), "%s", metrics);
    char *run_txt_path = datagen_path(dir, "run/run.txt"), *run_txt = ckpt_read_text(run_txt_path);
    cr_expect(strstr(run_txt, "--dataset /"), "run.txt records the dataset's path: %s", run_txt);
    char *copy = datagen_path(dir, "run/dataset.json");
    cr_expect_eq(access(copy, F_OK), 0, "the run keeps the manifest of its dataset");
    char *token_file = datagen_path(dir, "run/train.tok");
    cr_expect_neq(access(token_file, F_OK), 0, "the tokens stay in the dataset");
    free(token_file);
    rc = ckpt_cli(&out, "eval --run %s/run", dir);
    cr_assert_eq(rc, 0, "%s", out);
    double loss = json_number_of(out, "val_loss"), bpb = json_number_of(out, "bits_per_byte");
    double tokens = json_number_of(out, "tokens"), bytes = json_number_of(out, "bytes");
    cr_expect(isfinite(bpb) && bpb > 0, "%s", out);
    cr_expect_lt(fabs(bpb - loss * tokens / (log(2.0) * bytes)), 1e-6 * bpb, "bits per byte as docs define it: %s", out);
    free(out);
    /* on the sources themselves, and on the dataset: the same split gives the same figures */
    rc = ckpt_cli(&out, "eval --run %s/run --dataset %s/ds", dir, dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect_eq(json_number_of(out, "bits_per_byte"), bpb);
    free(out);
    rc = ckpt_cli(&out, "eval --run %s/run --data %s/pretrain_hq.jsonl", dir, dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect_gt(json_number_of(out, "tokens"), tokens, "every window of the whole set: %s", out);
    free(out);
    rc = ckpt_cli(&out, "inspect --run %s/run --batches 1 --batch 2", dir);
    cr_expect_eq(rc, 0, "inspect reads the dataset's val split: %s", out);
    free(out);
    free(copy), free(run_txt), free(run_txt_path), free(metrics), free(metrics_path), free(text);
}

Test(datasets, a_resume_on_another_dataset_is_refused) {
    size_t len;
    char *text = minimind_jsonl(71, 300, &len);
    datagen_write(dir, "pre.jsonl", text, len);
    char *out;
    cr_assert_eq(ckpt_cli(&out, "prepare --data %s/pre.jsonl --out %s/ds --vocab 300 --seq 16", dir, dir), 0, "%s", out);
    free(out);
    cr_assert_eq(ckpt_cli(&out, "prepare --data %s/pre.jsonl --out %s/other --vocab 300 --seq 16 --val-fraction 0.2", dir, dir),
                 0, "%s", out);
    free(out);
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --dataset %s/ds --steps 6 --stop-after 3 --out %s/run", dir, dir);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *ds = datagen_path(dir, "ds"), *saved = datagen_path(dir, "ds-saved"), *other = datagen_path(dir, "other");
    cr_assert_eq(rename(ds, saved), 0);
    cr_assert_eq(rename(other, ds), 0);
    rc = ckpt_cli(&out, "train --resume %s/run", dir);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "is not the dataset the run") && strstr(out, "put that dataset back"), "%s", out);
    free(out);
    cr_assert_eq(rename(ds, other), 0);
    cr_assert_eq(rename(saved, ds), 0);
    rc = ckpt_cli(&out, "train --resume %s/run", dir);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "done at step 6"), "%s", out);
    free(out);
    free(ds), free(saved), free(other), free(text);
}
