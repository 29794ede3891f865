/* Corpus reading, token files, preparation and the batch loader. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/corpus.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "tapegrad/tokenizer.h"
#include "data/tokfile.h"
#include "datagen.h"
#include "testutil.h"
#include "tapegrad/error.h"

static char *dir;
static void make_dir(void) { dir = datagen_tempdir(); }
static void remove_dir(void) {
    datagen_remove_tree(dir);
    free(dir);
}
TestSuite(corpus, .init = make_dir, .fini = remove_dir);
TestSuite(tokfile, .init = make_dir, .fini = remove_dir);
TestSuite(prepare, .init = make_dir, .fini = remove_dir);

static void write_str(const char *name, const char *text) { datagen_write(dir, name, text, strlen(text)); }

/* ---- corpus ---------------------------------------------------------------------------- */

Test(corpus, folder_order_and_skipped_names) {
    write_str("b.txt", "bee\n");
    write_str("a.txt", "ay");           /* no final newline: one is added before the next file */
    write_str("A.txt", "capital A\n");  /* 'A' < 'a' in byte order */
    write_str("sub/c", "see\n%\nsea\n"); /* subfolder, at its place in the order; '%' kept */
    write_str("sub/c.dat", "\x01\x02 index");
    write_str("a.u8", "symlink twin");
    write_str(".hidden", "secret");
    write_str(".git/config", "[core]");
    write_str("empty", "");
    char *text;
    size_t len;
    TgCorpusInfo info;
    assert_ok(tg_corpus_read_info(dir, &text, &len, &info));
    const char *expect = "capital A\nay\nbee\nsee\n%\nsea\n";
    cr_assert_str_eq(text, expect);
    cr_assert_eq(len, strlen(expect));
    cr_expect_eq(info.files_read, 4);
    cr_expect_eq(info.files_empty, 1);
    cr_expect_eq(info.files_binary, 0);
    free(text);
}

Test(corpus, symlinks_are_followed_and_each_folder_read_once) {
    write_str("real/x.txt", "x\n");
    char *outside = datagen_tempdir();
    datagen_write(outside, "y.txt", "y\n", 2);
    char *target = datagen_path(dir, "real/x.txt"), *link1 = datagen_path(dir, "link.txt");
    char *link2 = datagen_path(dir, "loop"), *link3 = datagen_path(dir, "m-outside");
    cr_assert_eq(symlink(target, link1), 0);
    cr_assert_eq(symlink(dir, link2), 0); /* would recurse forever if followed twice */
    cr_assert_eq(symlink(outside, link3), 0);
    char *text;
    size_t len;
    assert_ok(tg_corpus_read(dir, &text, &len));
    cr_expect_str_eq(text, "x\ny\nx\n", "link.txt, then the linked folder's y.txt, then real/x.txt");
    free(text);
    /* a link whose target is gone is an error naming it */
    char *dangling = datagen_path(dir, "n-missing.txt");
    cr_assert_eq(symlink("gone.txt", dangling), 0);
    assert_fails(tg_corpus_read(dir, &text, &len), TG_ERR_IO, "n-missing.txt is a symbolic link to gone.txt, which does not exist");
    datagen_remove_tree(outside);
    free(outside), free(dangling), free(target), free(link1), free(link2), free(link3);
}

Test(corpus, single_file) {
    write_str("one.txt", "hello\r\nworld\twith tab\b\a\n");
    char *path = datagen_path(dir, "one.txt"), *text;
    size_t len;
    assert_ok(tg_corpus_read(path, &text, &len));
    cr_expect_eq(len, 24);
    cr_expect_eq(memcmp(text, "hello\r\nworld\twith tab\b\a\n", 24), 0);
    free(text);
    free(path);
}

Test(corpus, missing_path_is_refused) {
    char *path = datagen_path(dir, "no-such-corpus"), *text;
    size_t len;
    assert_fails(tg_corpus_read(path, &text, &len), TG_ERR_IO, "No such file or directory");
    cr_expect(strstr(tg_error_message(), path));
    cr_expect_null(text);
    free(path);
}

/* TAPEGRAD_DEFAULT_CORPUS replaces the installed default: what CI uses to prove no test reads it */
Test(corpus, default_path_follows_the_environment) {
    const char *saved = getenv("TAPEGRAD_DEFAULT_CORPUS");
    char *saved_copy = saved ? strdup(saved) : NULL;
    unsetenv("TAPEGRAD_DEFAULT_CORPUS");
    cr_expect_str_eq(tg_corpus_default_path(), TG_CORPUS_DEFAULT_PATH);
    setenv("TAPEGRAD_DEFAULT_CORPUS", "", 1);
    cr_expect_str_eq(tg_corpus_default_path(), TG_CORPUS_DEFAULT_PATH, "an empty value means unset");
    char *path = datagen_path(dir, "elsewhere.txt");
    setenv("TAPEGRAD_DEFAULT_CORPUS", path, 1);
    cr_expect_str_eq(tg_corpus_default_path(), path);
    if (saved_copy) setenv("TAPEGRAD_DEFAULT_CORPUS", saved_copy, 1);
    else unsetenv("TAPEGRAD_DEFAULT_CORPUS");
    free(saved_copy);
    free(path);
}

Test(corpus, empty_file_and_empty_folder_are_refused) {
    write_str("empty.txt", "");
    char *path = datagen_path(dir, "empty.txt"), *text;
    size_t len;
    assert_fails(tg_corpus_read(path, &text, &len), TG_ERR_FORMAT, "is empty");
    cr_expect(strstr(tg_error_message(), "empty.txt"));
    free(path);
    write_str("sub/x.dat", "index only");
    path = datagen_path(dir, "sub");
    assert_fails(tg_corpus_read(path, &text, &len), TG_ERR_FORMAT, "corpus folder");
    cr_expect(strstr(tg_error_message(), "is empty"));
    free(path);
}

Test(corpus, binary_files_are_refused_or_skipped) {
    unsigned char blob[4096];
    for (size_t i = 0; i < sizeof blob; i++) blob[i] = (unsigned char)(i * 7 + 3);
    datagen_write(dir, "bin/image.png", blob, sizeof blob);
    char *path = datagen_path(dir, "bin/image.png"), *text;
    size_t len;
    assert_fails(tg_corpus_read(path, &text, &len), TG_ERR_FORMAT, "looks binary (a NUL byte at offset");
    free(path);
    path = datagen_path(dir, "bin");
    assert_fails(tg_corpus_read(path, &text, &len), TG_ERR_FORMAT, "holds no text");
    cr_expect(strstr(tg_error_message(), "image.png"));
    /* next to a text file, the binary one is skipped and counted */
    write_str("bin/notes.txt", "real text\n");
    TgCorpusInfo info;
    assert_ok(tg_corpus_read_info(path, &text, &len, &info));
    cr_expect_str_eq(text, "real text\n");
    cr_expect_eq(info.files_binary, 1);
    cr_expect(strstr(info.first_binary, "image.png"));
    free(text);
    free(path);
}

Test(corpus, binary_rule) {
    char buf[1000];
    memset(buf, 'a', sizeof buf);
    cr_expect_not(tg_corpus_is_binary(buf, sizeof buf));
    cr_expect_not(tg_corpus_is_binary(buf, 0));
    memset(buf, '\t', 500); /* tabs, newlines, backspaces, bells, ESC are text */
    memset(buf + 500, '\b', 100);
    memset(buf + 600, 0x1b, 100);
    cr_expect_not(tg_corpus_is_binary(buf, sizeof buf));
    memset(buf, 'a', sizeof buf);
    buf[999] = '\0';
    cr_expect(tg_corpus_is_binary(buf, sizeof buf), "a NUL in the first 8 KiB");
    memset(buf, 'a', sizeof buf);
    memset(buf, 0x01, 300);
    cr_expect_not(tg_corpus_is_binary(buf, sizeof buf), "exactly 30%% is still text");
    buf[300] = 0x7f;
    cr_expect(tg_corpus_is_binary(buf, sizeof buf), "more than 30%% control bytes");
    char *utf8 = "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c";
    cr_expect_not(tg_corpus_is_binary(utf8, strlen(utf8)));
}

Test(corpus, unreadable_file_is_refused) {
    if (geteuid() == 0) {
        datagen_remove_tree(dir); /* a skipped test does not run the suite's .fini */
        cr_skip_test("running as root: permissions do not stop reads");
    }
    write_str("locked.txt", "secret\n");
    char *path = datagen_path(dir, "locked.txt"), *text;
    size_t len;
    chmod(path, 0);
    assert_fails(tg_corpus_read(dir, &text, &len), TG_ERR_IO, "cannot read corpus file");
    cr_expect(strstr(tg_error_message(), "locked.txt"));
    free(path);
}

/* ---- token files ---------------------------------------------------------------------------- */

static int32_t *ramp(size_t n, uint32_t vocab) {
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 2654435761u) % vocab);
    return ids;
}

static void check_round_trip(const char *name, size_t n, uint32_t vocab, uint32_t width) {
    char *path = datagen_path(dir, name);
    int32_t *ids = ramp(n, vocab);
    assert_ok(tg_tokfile_write_tagged(path, ids, n, vocab, 0x1234abcdULL));
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_expect_eq((size_t)sb.st_size, TG_TOKFILE_HEADER_BYTES + n * width, "file size %lld", (long long)sb.st_size);
    int32_t *back;
    size_t n_back;
    uint32_t vocab_back;
    assert_ok(tg_tokfile_read(path, &back, &n_back, &vocab_back));
    cr_assert_eq(n_back, n);
    cr_assert_eq(vocab_back, vocab);
    cr_assert(n == 0 || memcmp(back, ids, n * sizeof *ids) == 0);
    TgTokfileHeader h;
    assert_ok(tg_tokfile_read_header(path, &h));
    cr_expect_eq(h.token_bytes, width);
    cr_expect_eq(h.n_tokens, n);
    cr_expect_eq(h.tokenizer_fingerprint, 0x1234abcdULL);
    cr_expect_eq(h.version, TG_TOKFILE_VERSION);
    cr_expect_eq(test_count_tmp_files(dir), 0, "the temporary file is gone");
    free(back);
    free(ids);
    free(path);
}

Test(tokfile, round_trip_widths) {
    check_round_trip("small.tok", 100000, 300, 2);
    check_round_trip("edge.tok", 1000, 65536, 2);
    check_round_trip("wide.tok", 1000, 70000, 4);
    check_round_trip("empty.tok", 0, 50, 2);
}

Test(tokfile, layout_is_little_endian) {
    char *path = datagen_path(dir, "le.tok");
    assert_ok(tg_tokfile_write(path, (int32_t[]){0x0102, 0x0304}, 2, 1000));
    FILE *f = fopen(path, "rb");
    unsigned char b[68];
    cr_assert_eq(fread(b, 1, sizeof b, f), sizeof b);
    fclose(f);
    cr_expect_eq(memcmp(b, "TGTOK\0\0\0", 8), 0);
    cr_expect(b[8] == 1 && b[9] == 0 && b[12] == 0xe8 && b[13] == 0x03 && b[16] == 2 && b[24] == 2);
    cr_expect(b[64] == 0x02 && b[65] == 0x01 && b[66] == 0x04 && b[67] == 0x03);
    free(path);
}

/* Writes a valid file, then lets the caller damage it. */
static char *valid_tokfile(const char *name) {
    char *path = datagen_path(dir, name);
    int32_t *ids = ramp(1000, 300);
    assert_ok(tg_tokfile_write(path, ids, 1000, 300));
    free(ids);
    return path;
}

static void patch(const char *path, long offset, const void *bytes, size_t n) {
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    fseek(f, offset, SEEK_SET);
    fwrite(bytes, 1, n, f);
    fclose(f);
}

Test(tokfile, damaged_files_are_refused) {
    int32_t *ids;
    size_t n;
    uint32_t vocab;
    char *path = valid_tokfile("trunc.tok");
    cr_assert_eq(truncate(path, TG_TOKFILE_HEADER_BYTES + 1999), 0);
    assert_fails(tg_tokfile_read(path, &ids, &n, &vocab), TG_ERR_FORMAT, "is truncated");
    cr_expect(strstr(tg_error_message(), "1000 tokens"));
    cr_expect_null(ids);
    cr_assert_eq(truncate(path, 20), 0);
    assert_fails(tg_tokfile_read(path, &ids, &n, &vocab), TG_ERR_FORMAT, "shorter than the 64-byte header");
    /* cut inside the magic itself, or to nothing: truncated, and empty, not "wrong magic" */
    cr_assert_eq(truncate(path, 3), 0);
    assert_fails(tg_tokfile_read(path, &ids, &n, &vocab), TG_ERR_FORMAT, "is truncated: 3 bytes");
    cr_assert_eq(truncate(path, 0), 0);
    assert_fails(tg_tokfile_read(path, &ids, &n, &vocab), TG_ERR_FORMAT, "is empty (0 bytes)");
    free(path);

    path = valid_tokfile("magic.tok");
    patch(path, 0, "GGUF", 4);
    assert_fails(tg_tokfile_read(path, &ids, &n, &vocab), TG_ERR_FORMAT, "wrong magic");
    free(path);

    path = valid_tokfile("version.tok");
    patch(path, 8, "\x07", 1);
    assert_fails(tg_tokfile_read(path, &ids, &n, &vocab), TG_ERR_FORMAT, "format version 7");
    free(path);

    path = valid_tokfile("vocab.tok"); /* tokens up to 299, header now says vocab 200 */
    patch(path, 12, "\xc8\x00", 2);
    assert_fails(tg_tokfile_read(path, &ids, &n, &vocab), TG_ERR_FORMAT, "is >= vocab_size 200");
    cr_expect(strstr(tg_error_message(), "at index"));
    free(path);

    path = valid_tokfile("width.tok");
    patch(path, 16, "\x04", 1);
    assert_fails(tg_tokfile_read(path, &ids, &n, &vocab), TG_ERR_FORMAT, "token width 4 bytes");
    free(path);

    path = valid_tokfile("trailing.tok");
    FILE *f = fopen(path, "ab");
    fputs("xyz", f);
    fclose(f);
    assert_fails(tg_tokfile_read(path, &ids, &n, &vocab), TG_ERR_FORMAT, "3 bytes after its 1000 tokens");
    free(path);

    path = datagen_path(dir, "missing.tok");
    assert_fails(tg_tokfile_read(path, &ids, &n, &vocab), TG_ERR_IO, "cannot open token file");
    free(path);
}

Test(tokfile, writer_refuses_tokens_outside_the_vocabulary) {
    char *path = datagen_path(dir, "bad.tok");
    assert_fails(tg_tokfile_write(path, (int32_t[]){1, 2, 9}, 3, 9), TG_ERR_ARG, "token 9 at index 2");
    assert_fails(tg_tokfile_write(path, (int32_t[]){-1}, 1, 9), TG_ERR_ARG, "token -1 at index 0");
    cr_expect_neq(access(path, F_OK), 0, "nothing written");
    free(path);
}

/* ---- preparation ------------------------------------------------------------------------ */

/* tg_prepare_into with a char tokenizer, the sources at `path`. */
static TgStatus prepare_char(const char *path, const char *out, double val_fraction, int64_t seq, TgPrepareResult *res,
                             TgTokenizer *tok) {
    TgPrepareOptions opt;
    tg_prepare_options_default(&opt);
    opt.sources = path;
    opt.kind = TG_TOKENIZER_CHAR;
    opt.val_fraction = val_fraction;
    opt.seq_len = seq;
    return tg_prepare_into(&opt, out, NULL, res, tok);
}

Test(prepare, val_is_the_last_fraction) {
    char *text = datagen_english(61, 5000);
    write_str("text.txt", text);
    char *path = datagen_path(dir, "text.txt"), *out = datagen_path(dir, "out");
    mkdir(out, 0755);
    TgTokenizer tok;
    TgPrepareResult res;
    assert_ok(prepare_char(path, out, 0.1, 32, &res, &tok));
    cr_expect_eq(res.n_tokens, 5001, "the text's bytes and one <eot>");
    cr_expect_eq(res.n_val, 500);
    cr_expect_eq(res.n_train, 4501);
    char *train_path = datagen_path(out, TG_PREPARE_TRAIN_FILE), *val_path = datagen_path(out, TG_PREPARE_VAL_FILE);
    int32_t *train, *val;
    size_t n_train, n_val;
    TgTokfileHeader h;
    assert_ok(tg_tokfile_read_full(train_path, &train, &n_train, &h));
    cr_expect_eq(h.tokenizer_fingerprint, tg_tokenizer_fingerprint(&tok));
    cr_expect_eq(h.vocab_size, (uint32_t)tok.vocab_size);
    assert_ok(tg_tokfile_read_full(val_path, &val, &n_val, NULL));
    cr_assert_eq(n_train, 4501);
    cr_assert_eq(n_val, 500);
    cr_expect_eq(val[n_val - 1], tok.eot_id, "the document ends with <eot>");
    /* train + val is the whole stream, val at the end */
    char *dec;
    size_t len;
    assert_ok(tg_tokenizer_decode(&tok, val, n_val, &dec, &len));
    cr_assert_eq(len, 499);
    cr_expect_eq(memcmp(dec, text + 4501, 499), 0);
    free(dec);
    assert_ok(tg_tokenizer_decode(&tok, train, n_train, &dec, &len));
    cr_expect_eq(memcmp(dec, text, 4501), 0);
    free(dec);
    free(train);
    free(val);
    free(train_path);
    free(val_path);
    free(out);
    free(path);
    tg_tokenizer_free(&tok);
    free(text);
}

Test(prepare, too_short_corpus_is_refused) {
    write_str("short.txt", "abcdefghabcdefghabcdefghabcdefghabcdefgh"); /* 41 tokens with <eot>: 37 train + 4 val */
    char *path = datagen_path(dir, "short.txt");
    assert_fails(prepare_char(path, dir, 0.1, 8, NULL, NULL), TG_ERR_ARG, "corpus too short: 41 tokens");
    cr_expect(strstr(tg_error_message(), "37 train + 4 val"));
    cr_expect(strstr(tg_error_message(), "at least 9 tokens"));
    /* 41 tokens are enough for seq_len 3 (4 tokens per split) */
    assert_ok(prepare_char(path, dir, 0.1, 3, NULL, NULL));
    assert_fails(prepare_char(path, dir, 1.0, 3, NULL, NULL), TG_ERR_ARG, "val_fraction 1 is not in (0, 1)");
    free(path);
    size_t a, b;
    assert_fails(tg_corpus_split(100, 0.5, 50, &a, &b), TG_ERR_ARG, "each split needs at least 51 tokens");
    assert_ok(tg_corpus_split(102, 0.5, 50, &a, &b));
    cr_expect(a == 51 && b == 51);
}

Test(prepare, whole_pipeline_from_a_folder) {
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "corpus/part%d.txt", i);
        char *text = datagen_english(70 + (uint64_t)i, 20000);
        datagen_write(dir, name, text, 20000);
        free(text);
    }
    datagen_write(dir, "corpus/part0.dat", "\0\0\0\1", 4);
    TgPrepareOptions opt;
    tg_prepare_options_default(&opt);
    char *corpus = datagen_path(dir, "corpus"), *out = datagen_path(dir, "prepared");
    opt.sources = corpus;
    opt.vocab_size = 400;
    opt.seq_len = 64;
    TgPrepareResult res;
    bool already;
    assert_ok(tg_prepare_dataset(&opt, out, NULL, &res, &already));
    cr_expect_not(already);
    cr_expect_eq(res.files, 3);
    cr_expect_eq(res.documents, 3, "a text file is one document");
    cr_expect_eq(res.text_bytes, 60000);
    cr_expect_eq(res.n_train + res.n_val, res.n_tokens);
    cr_expect_lt(res.n_tokens, 60000 / 2);
    TgDataset d;
    assert_ok(tg_dataset_open(out, true, &d));
    cr_expect_eq(d.manifest.fingerprint, res.fingerprint);
    cr_expect_eq(d.train.n, res.n_train);
    cr_expect_eq(d.val.n, res.n_val);
    cr_expect_eq(d.tok.fingerprint, res.tokenizer_fingerprint);
    tg_dataset_close(&d);
    /* the same again: nothing to do */
    assert_ok(tg_prepare_dataset(&opt, out, NULL, &res, &already));
    cr_expect(already);

    /* no corpus given: the default one, which TAPEGRAD_DEFAULT_CORPUS names */
    const char *saved = getenv("TAPEGRAD_DEFAULT_CORPUS");
    char *saved_copy = saved ? strdup(saved) : NULL;
    setenv("TAPEGRAD_DEFAULT_CORPUS", corpus, 1);
    opt.sources = NULL;
    char *again = datagen_path(dir, "again");
    assert_ok(tg_prepare_dataset(&opt, again, NULL, &res, &already));
    cr_expect_eq(res.files, 3);
    free(again);
    if (saved_copy) setenv("TAPEGRAD_DEFAULT_CORPUS", saved_copy, 1);
    else unsetenv("TAPEGRAD_DEFAULT_CORPUS");
    free(saved_copy);
    opt.sources = corpus;

    /* settings are checked before the corpus is read */
    char *unwritten = datagen_path(dir, "unwritten");
    opt.val_fraction = 0;
    assert_fails(tg_prepare_dataset(&opt, unwritten, NULL, NULL, NULL), TG_ERR_ARG, "val_fraction 0 is not in (0, 1)");
    opt.val_fraction = 0.1;
    opt.vocab_size = 100;
    assert_fails(tg_prepare_dataset(&opt, unwritten, NULL, NULL, NULL), TG_ERR_ARG, "at least 257");
    opt.sources = "";
    opt.vocab_size = 400;
    assert_fails(tg_prepare_dataset(&opt, unwritten, NULL, NULL, NULL), TG_ERR_IO, "corpus path");
    /* a corpus refused after the tokenizer was trained: nothing written */
    opt.sources = corpus;
    opt.seq_len = 100000;
    assert_fails(tg_prepare_dataset(&opt, unwritten, NULL, NULL, NULL), TG_ERR_ARG, "corpus too short");
    cr_expect_neq(access(unwritten, F_OK), 0, "%s was created", unwritten);
    DIR *folder = opendir(dir);
    struct dirent *e;
    while ((e = readdir(folder))) cr_expect_null(strstr(e->d_name, ".tmp-"), "%s was left behind", e->d_name);
    closedir(folder);
    free(unwritten);
    free(corpus);
    free(out);
}

/* ---- loader ---------------------------------------------------------------------------- */

enum { N_TOK = 1000, BATCH = 4, SEQ = 16 };

/* tokens[i] = i, so a row's first input is its window start */
static int32_t *identity_tokens(size_t n) {
    int32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)i;
    return t;
}

static void draw(TgLoader *ld, int32_t *in, int32_t *tg) { tg_loader_next(ld, in, tg); }

Test(loader, same_seed_same_batches_different_seeds_differ) {
    int32_t *tok = identity_tokens(N_TOK);
    TgLoader a, b, c;
    assert_ok(tg_loader_init(&a, tok, N_TOK, BATCH, SEQ, 42));
    assert_ok(tg_loader_init(&b, tok, N_TOK, BATCH, SEQ, 42));
    assert_ok(tg_loader_init(&c, tok, N_TOK, BATCH, SEQ, 43));
    int32_t ia[BATCH * SEQ], ta[BATCH * SEQ], ib[BATCH * SEQ], tb[BATCH * SEQ], ic[BATCH * SEQ], tc[BATCH * SEQ];
    int differ = 0;
    for (int step = 0; step < 20; step++) {
        draw(&a, ia, ta);
        draw(&b, ib, tb);
        draw(&c, ic, tc);
        cr_assert_eq(memcmp(ia, ib, sizeof ia), 0);
        cr_assert_eq(memcmp(ta, tb, sizeof ta), 0);
        differ += memcmp(ia, ic, sizeof ia) != 0;
    }
    cr_expect_eq(differ, 20);
    cr_expect_eq(a.state.batches_drawn, 20);
    free(tok);
}

/* Skipping n batches moves the stream as drawing them does: the ranks of a data-parallel run
 * each copy only their slice of a global batch and still share one stream. */
Test(loader, skipping_batches_moves_the_stream_as_drawing_them) {
    int32_t *tok = identity_tokens(N_TOK);
    TgLoader drawn, skipped;
    assert_ok(tg_loader_init(&drawn, tok, N_TOK, BATCH, SEQ, 42));
    assert_ok(tg_loader_init(&skipped, tok, N_TOK, BATCH, SEQ, 42));
    int32_t ia[BATCH * SEQ], ta[BATCH * SEQ], ib[BATCH * SEQ], tb[BATCH * SEQ];
    for (int i = 0; i < 3; i++) draw(&drawn, ia, ta);
    tg_loader_skip(&skipped, 3);
    cr_expect_eq(skipped.state.batches_drawn, 3);
    cr_expect_eq(memcmp(&drawn.state, &skipped.state, sizeof drawn.state), 0, "the loader states differ");
    draw(&drawn, ia, ta);
    draw(&skipped, ib, tb);
    cr_expect_eq(memcmp(ia, ib, sizeof ia), 0, "the batch after the skipped ones differs");
    cr_expect_eq(memcmp(ta, tb, sizeof ta), 0);
    free(tok);
}

Test(loader, targets_are_inputs_shifted_and_windows_stay_inside) {
    size_t n = 40;
    int32_t *tok = identity_tokens(n);
    TgLoader ld;
    assert_ok(tg_loader_init(&ld, tok, n, BATCH, SEQ, 7));
    int32_t in[BATCH * SEQ], tg[BATCH * SEQ];
    int seen[40] = {0};
    for (int step = 0; step < 500; step++) {
        draw(&ld, in, tg);
        for (int b = 0; b < BATCH; b++) {
            int32_t start = in[b * SEQ];
            cr_assert(start >= 0 && (size_t)start + SEQ <= n - 1, "window at %d overruns %zu tokens", start, n);
            seen[start]++;
            for (int t = 0; t < SEQ; t++) {
                cr_assert_eq(in[b * SEQ + t], start + t);
                cr_assert_eq(tg[b * SEQ + t], start + t + 1, "target is the next token");
            }
        }
    }
    /* every start in [0, n - seq - 1] = [0, 23] is drawn, including both ends */
    for (int s = 0; s <= 23; s++) cr_expect_gt(seen[s], 0, "start %d never drawn", s);
    /* the smallest data: exactly one window */
    assert_ok(tg_loader_init(&ld, tok, SEQ + 1, 1, SEQ, 1));
    draw(&ld, in, tg);
    cr_expect(in[0] == 0 && tg[SEQ - 1] == SEQ);
    free(tok);
}

Test(loader, state_restore_gives_the_same_next_batches) {
    int32_t *tok = identity_tokens(N_TOK);
    TgLoader ld;
    assert_ok(tg_loader_init(&ld, tok, N_TOK, BATCH, SEQ, 99));
    int32_t in[BATCH * SEQ], tg[BATCH * SEQ];
    for (int i = 0; i < 13; i++) draw(&ld, in, tg);
    TgLoaderState saved = tg_loader_get_state(&ld);
    uint8_t packed[TG_LOADER_STATE_BYTES];
    tg_loader_state_pack(&saved, packed);
    int32_t expect[10][BATCH * SEQ];
    for (int i = 0; i < 10; i++) draw(&ld, expect[i], tg);

    TgLoader resumed; /* a fresh loader (another seed) resumed from the saved state */
    assert_ok(tg_loader_init(&resumed, tok, N_TOK, BATCH, SEQ, 1));
    tg_loader_set_state(&resumed, &saved);
    for (int i = 0; i < 10; i++) {
        draw(&resumed, in, tg);
        cr_assert_eq(memcmp(in, expect[i], sizeof in), 0, "batch %d after restore differs", i);
    }
    TgLoaderState unpacked;
    tg_loader_state_unpack(packed, &unpacked);
    cr_assert_eq(unpacked.batches_drawn, 13);
    tg_loader_set_state(&resumed, &unpacked);
    for (int i = 0; i < 10; i++) {
        draw(&resumed, in, tg);
        cr_assert_eq(memcmp(in, expect[i], sizeof in), 0, "batch %d after unpack differs", i);
    }
    free(tok);
}

Test(loader, bad_shapes_are_refused) {
    int32_t tok[10] = {0};
    TgLoader ld;
    assert_fails(tg_loader_init(&ld, tok, 10, BATCH, 10, 1), TG_ERR_ARG, "10 tokens are too few for seq_len 10");
    assert_fails(tg_loader_init(&ld, tok, 10, 0, 4, 1), TG_ERR_ARG, "batch size 0");
    assert_fails(tg_loader_init(&ld, tok, 10, 1, 0, 1), TG_ERR_ARG, "seq_len 0");
    int32_t in[8], tg[8];
    assert_fails(tg_loader_fixed_batches(tok, 10, 1, 4, 0, in, tg), TG_ERR_ARG, "at least 1");
}

Test(loader, fixed_batches_are_evenly_spaced_and_repeatable) {
    int32_t *tok = identity_tokens(N_TOK);
    enum { K = 3 };
    int32_t in[K * BATCH * SEQ], tg[K * BATCH * SEQ], in2[K * BATCH * SEQ], tg2[K * BATCH * SEQ];
    assert_ok(tg_loader_fixed_batches(tok, N_TOK, BATCH, SEQ, K, in, tg));
    assert_ok(tg_loader_fixed_batches(tok, N_TOK, BATCH, SEQ, K, in2, tg2));
    cr_assert_eq(memcmp(in, in2, sizeof in), 0);
    /* 12 windows over starts [0, 983]: start_i = floor(i * 983 / 11) */
    for (int i = 0; i < K * BATCH; i++) {
        int32_t start = in[i * SEQ];
        cr_expect_eq(start, (int32_t)((int64_t)i * 983 / 11), "window %d starts at %d", i, start);
        for (int t = 0; t < SEQ; t++) cr_assert_eq(tg[i * SEQ + t], in[i * SEQ + t] + 1);
    }
    cr_expect_eq(in[(K * BATCH - 1) * SEQ], N_TOK - SEQ - 1, "the last window ends at the last token");
    /* one window: at the start */
    assert_ok(tg_loader_fixed_batches(tok, N_TOK, 1, SEQ, 1, in, tg));
    cr_expect_eq(in[0], 0);
    free(tok);
}
