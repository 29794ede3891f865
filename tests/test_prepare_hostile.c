/* `tapegrad prepare` and dataset folders against what a user's disk holds (issue 32): a dataset
 * folder that lost or cut a token file, a run folder given as --out, folders holding links, FIFOs
 * and devices, damaged gzip sources, an edited dataset.json, and ChatML markers a BPE would
 * split into bytes without a word. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ckptutil.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/sources.h"
#include "datagen.h"
#include "testutil.h"

static char *dir;
static void make_dir(void) { dir = datagen_tempdir(); }
static void remove_dir(void) {
    datagen_remove_tree(dir);
    free(dir);
}
/* the bound of a test that could hang (a FIFO opened for reading waits for a writer) */
TestSuite(prepare_hostile, .init = make_dir, .fini = remove_dir, .timeout = 120);

/* ---- helpers --------------------------------------------------------------------------------- */

/* `lines` lines of {"text": ...}; every third wrapped in <|im_start|> ... <|im_end|> when markers. */
static char *jsonl(uint64_t seed, int lines, bool markers, size_t *len) {
    size_t cap = (size_t)lines * 400 + 1, n = 0;
    char *out = malloc(cap);
    for (int i = 0; i < lines; i++) {
        char *text = datagen_english(seed + (uint64_t)i, 150 + (size_t)(i % 5) * 40);
        for (char *c = text; *c; c++)
            if (*c == '\n') *c = ' ';
        bool wrap = markers && i % 3 == 0;
        n += (size_t)snprintf(out + n, cap - n, "{\"text\": \"%s%s%s\"}\n", wrap ? "<|im_start|>" : "", text,
                              wrap ? "<|im_end|>" : "");
        free(text);
    }
    *len = n;
    return out;
}

static void write_jsonl(const char *name, uint64_t seed, int lines) {
    size_t len;
    char *text = jsonl(seed, lines, false, &len);
    datagen_write(dir, name, text, len);
    free(text);
}

static void options(TgPrepareOptions *opt, const char *sources) {
    tg_prepare_options_default(opt);
    opt->sources = sources;
    opt->vocab_size = 300;
    opt->seq_len = 16;
    opt->threads = 1;
}

/* The messages of a preparation, one a line. */
typedef struct {
    char text[16384];
    size_t len;
} Messages;

static void collect(void *ctx, TgMessageLevel level, const char *text) {
    Messages *m = ctx;
    if (m->len < sizeof m->text)
        m->len += (size_t)snprintf(m->text + m->len, sizeof m->text - m->len, "%s%s\n",
                                   level == TG_MESSAGE_WARNING ? "warning: " : level == TG_MESSAGE_NOTE ? "note: " : "", text);
}

static TgPrepareReporter reporter_of(Messages *m) {
    memset(m, 0, sizeof *m);
    return (TgPrepareReporter){.ctx = m, .message = collect};
}

static void write_gzip(const char *path, const void *data, size_t len) {
    gzFile f = gzopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(gzwrite(f, data, (unsigned)len), (int)len);
    cr_assert_eq(gzclose(f), Z_OK);
}

/* Every document of `path` through the sources reader; *docs their count. */
static TgStatus read_all(const char *path, uint64_t *docs) {
    TgSourceList list;
    TG_TRY(tg_sources_list(path, &list));
    TgDocReader r;
    TgDocOptions opt = {0};
    tg_doc_reader_open(&r, &list, &opt);
    TgStatus st;
    for (;;) {
        TgDocPiece p;
        bool got;
        st = tg_doc_reader_next(&r, &p, &got);
        if (st != TG_OK || !got) break;
    }
    *docs = r.documents;
    tg_doc_reader_close(&r);
    tg_sources_free(&list);
    return st;
}

/* ---- 4a: "already holds" means "opens" ------------------------------------------------------ */

Test(prepare_hostile, a_folder_missing_or_cutting_a_token_file_is_not_already_prepared) {
    write_jsonl("pre.jsonl", 1, 200);
    char *src = datagen_path(dir, "pre.jsonl"), *out = datagen_path(dir, "ds");
    TgPrepareOptions opt;
    options(&opt, src);
    bool already = false;
    assert_ok(tg_prepare_dataset(&opt, out, NULL, NULL, &already));
    /* val.tok deleted */
    char *val = datagen_path(out, TG_PREPARE_VAL_FILE), *train = datagen_path(out, TG_PREPARE_TRAIN_FILE);
    cr_assert_eq(unlink(val), 0);
    assert_fails(tg_prepare_dataset(&opt, out, NULL, NULL, &already), TG_ERR_IO, "val.tok");
    cr_expect_not(already);
    cr_expect(strstr(tg_error_message(), "holds a dataset that cannot be opened") && strstr(tg_error_message(), "remove"),
              "%s", tg_error_message());
    /* the advice works: removed and prepared again */
    datagen_remove_tree(out);
    assert_ok(tg_prepare_dataset(&opt, out, NULL, NULL, &already));
    cr_expect_not(already);
    /* train.tok truncated */
    cr_assert_eq(truncate(train, 1000), 0);
    assert_fails(tg_prepare_dataset(&opt, out, NULL, NULL, &already), TG_ERR_FORMAT, "train.tok is truncated");
    cr_expect_not(already);
    free(val), free(train), free(src), free(out);
}

Test(prepare_hostile, a_run_folder_is_not_a_dataset_folder) {
    write_jsonl("pre.jsonl", 2, 300);
    char *out;
    cr_assert_eq(ckpt_cli(&out, "prepare --data %s/pre.jsonl --out %s/ds --vocab 300 --seq 16", dir, dir), 0, "%s", out);
    free(out);
    /* a run on the dataset (its folder holds a copy of dataset.json), and one that prepared into its folder */
    cr_assert_eq(ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --dataset %s/ds --steps 2 --eval-every 0 --out %s/run", dir, dir),
                 0, "%s", out);
    free(out);
    cr_assert_eq(ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s/pre.jsonl --tokenizer bpe --vocab 300 --steps 2 "
                                "--eval-every 0 --out %s/run2",
                          dir, dir),
                 0, "%s", out);
    free(out);
    for (int i = 0; i < 2; i++) {
        const char *run = i ? "run2" : "run";
        int rc = ckpt_cli(&out, "prepare --data %s/pre.jsonl --out %s/%s --vocab 300 --seq 16", dir, dir, run);
        cr_expect_eq(rc, 1, "%s: %s", run, out);
        cr_expect(strstr(out, "is a run folder (it holds run.txt), not a dataset folder"), "%s: %s", run, out);
        cr_expect_null(strstr(out, "already holds"), "%s: %s", run, out);
        free(out);
    }
}

/* ---- 4b: every entry of a folder read, or named ------------------------------------------------ */

Test(prepare_hostile, links_fifos_and_devices_are_read_or_named_never_dropped) {
    write_jsonl("corpus/real/a.jsonl", 3, 100);
    write_jsonl("shards/b.jsonl", 4, 60); /* outside the folder, reached through a link */
    write_jsonl("corpus/z.jsonl", 5, 40);
    char *corpus = datagen_path(dir, "corpus"), *link = datagen_path(dir, "corpus/linked");
    char *fifo = datagen_path(dir, "corpus/pipe"), *null = datagen_path(dir, "corpus/null");
    char *loop = datagen_path(dir, "corpus/real/up"), *shards = datagen_path(dir, "shards");
    cr_assert_eq(symlink(shards, link), 0);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    cr_assert_eq(symlink("/dev/null", null), 0);
    cr_assert_eq(symlink("..", loop), 0); /* a cycle: corpus/real/up/real/up/... */
    datagen_write(dir, "corpus/empty.txt", "", 0);
    char *out = datagen_path(dir, "ds");
    TgPrepareOptions opt;
    options(&opt, corpus);
    Messages m;
    TgPrepareReporter rep = reporter_of(&m);
    TgPrepareResult res;
    assert_ok(tg_prepare_dataset(&opt, out, &rep, &res, NULL));
    cr_expect_eq(res.documents, 200, "the linked folder's 60 lines are read too: %s", m.text);
    cr_expect_eq(res.files, 3);
    cr_expect(strstr(m.text, "warning: ") && strstr(m.text, "null (a link to a character device)") &&
                  strstr(m.text, "pipe (a FIFO)"),
              "%s", m.text);
    cr_expect(strstr(m.text, "real/up (a link to a folder already read"), "%s", m.text);
    cr_expect(strstr(m.text, "empty.txt"), "%s", m.text);
    char *manifest_path = datagen_path(out, TG_DATASET_MANIFEST_FILE), *manifest = ckpt_read_text(manifest_path);
    cr_expect(strstr(manifest, "corpus/linked/b.jsonl"), "%s", manifest);
    cr_expect(strstr(manifest, "\"not_files\": 2, \"folders_again\": 1, \"empty_files\": 1"), "%s", manifest);
    free(manifest), free(manifest_path);
    free(corpus), free(link), free(fifo), free(null), free(loop), free(shards), free(out);
}

Test(prepare_hostile, a_dangling_link_is_an_error_naming_it) {
    write_jsonl("corpus/shard-1.jsonl", 6, 100);
    char *corpus = datagen_path(dir, "corpus"), *link = datagen_path(dir, "corpus/shard-2.jsonl");
    cr_assert_eq(symlink("/nonexistent/shard-2.jsonl", link), 0);
    char *out = datagen_path(dir, "ds");
    TgPrepareOptions opt;
    options(&opt, corpus);
    assert_fails(tg_prepare_dataset(&opt, out, NULL, NULL, NULL), TG_ERR_IO, "shard-2.jsonl is a symbolic link to /nonexistent/");
    cr_expect(strstr(tg_error_message(), "which does not exist"), "%s", tg_error_message());
    cr_expect_neq(access(out, F_OK), 0, "nothing was written");
    free(corpus), free(link), free(out);
}

/* ---- 4i: gzip as gzip -t has it ------------------------------------------------------------- */

Test(prepare_hostile, a_truncated_gzip_is_named_by_its_path) {
    size_t len;
    char *text = jsonl(7, 300, false, &len);
    char *path = datagen_path(dir, "cut.jsonl.gz");
    write_gzip(path, text, len);
    cr_assert_eq(truncate(path, 2000), 0);
    uint64_t docs;
    assert_fails(read_all(path, &docs), TG_ERR_FORMAT, "cut.jsonl.gz (gzip)");
    cr_expect_null(strstr(tg_error_message(), "<fd:"), "%s", tg_error_message());
    cr_expect(strstr(tg_error_message(), "truncated"), "%s", tg_error_message());
    free(path), free(text);
}

Test(prepare_hostile, gzip_members_are_read_and_trailing_garbage_refused) {
    size_t la, lb;
    char *a = jsonl(8, 120, false, &la), *b = jsonl(9, 80, false, &lb);
    char *pa = datagen_path(dir, "a.gz"), *pb = datagen_path(dir, "b.gz");
    write_gzip(pa, a, la);
    write_gzip(pb, b, lb);
    size_t ga, gb;
    uint8_t *za = ckpt_read_file(pa, &ga), *zb = ckpt_read_file(pb, &gb);
    uint8_t *joined = malloc(ga + gb + 64);
    char *two = datagen_path(dir, "two.jsonl.gz"), *junk = datagen_path(dir, "junk.jsonl.gz");
    char *zeros = datagen_path(dir, "zeros.jsonl.gz");
    /* two members: gzip reads both, and so does prepare */
    memcpy(joined, za, ga), memcpy(joined + ga, zb, gb);
    ckpt_write_file(two, joined, ga + gb);
    uint64_t docs = 0;
    assert_ok(read_all(two, &docs));
    cr_expect_eq(docs, 200);
    /* a member, then bytes that are not one: gzip -t's "trailing garbage" */
    memcpy(joined + ga, "garbage\n", 8);
    ckpt_write_file(junk, joined, ga + 8);
    assert_fails(read_all(junk, &docs), TG_ERR_FORMAT, "junk.jsonl.gz (gzip): 8 bytes after the end of its gzip data");
    cr_expect(strstr(tg_error_message(), "trailing garbage"), "%s", tg_error_message());
    /* zeros to the end are padding, which gzip -t accepts */
    memset(joined + ga, 0, 64);
    ckpt_write_file(zeros, joined, ga + 64);
    assert_ok(read_all(zeros, &docs));
    cr_expect_eq(docs, 120);
    joined[ga + 63] = 'x'; /* but not zeros, then something */
    ckpt_write_file(zeros, joined, ga + 64);
    assert_fails(read_all(zeros, &docs), TG_ERR_FORMAT, "trailing garbage");
    free(a), free(b), free(pa), free(pb), free(za), free(zb), free(joined), free(two), free(junk), free(zeros);
}

/* ---- 4i: an edited dataset.json ------------------------------------------------------------------ */

/* A copy of the dataset `from` as `name`, its manifest's first `find` replaced by `put`. */
static char *edited_copy(const char *from, const char *name, const char *find, const char *put) {
    char *to = datagen_path(dir, name);
    mkdir(to, 0755);
    const char *files[] = {TG_DATASET_MANIFEST_FILE, TG_PREPARE_TOKENIZER_FILE, TG_PREPARE_TRAIN_FILE, TG_PREPARE_VAL_FILE};
    for (int i = 0; i < 4; i++) {
        char *src = datagen_path(from, files[i]), *dst = datagen_path(to, files[i]);
        size_t len;
        uint8_t *b = ckpt_read_file(src, &len);
        if (i == 0) {
            char *at = strstr((char *)b, find);
            cr_assert_not_null(at, "%s not in the manifest", find);
            size_t before = (size_t)(at - (char *)b), fl = strlen(find), pl = strlen(put);
            uint8_t *e = malloc(len - fl + pl);
            memcpy(e, b, before), memcpy(e + before, put, pl), memcpy(e + before + pl, at + fl, len - before - fl);
            free(b);
            b = e, len = len - fl + pl;
        }
        ckpt_write_file(dst, b, len);
        free(b), free(src), free(dst);
    }
    return to;
}

Test(prepare_hostile, every_member_of_an_edited_manifest_is_checked) {
    size_t len;
    char *text = jsonl(10, 200, true, &len);
    datagen_write(dir, "pre.jsonl", text, len);
    char *src = datagen_path(dir, "pre.jsonl"), *out = datagen_path(dir, "ds");
    TgPrepareOptions opt;
    options(&opt, src);
    opt.special_tokens = "chatml";
    assert_ok(tg_prepare_dataset(&opt, out, NULL, NULL, NULL));
    TgDataset d;
    assert_ok(tg_dataset_open(out, true, &d));
    tg_dataset_close(&d);
    static const struct {
        const char *find, *put, *says;
    } edits[] = {
        {"\"seq_len\": 16", "\"seq_len\": 99999999", "split.seq_len is 99999999, not a whole number in [1, 1048576]"},
        {"\"val_fraction\": 0.1", "\"val_fraction\": 7, \"x\": 0.1", "split.val_fraction is 7, not a fraction in (0, 1)"},
        {"\"file\": \"train.tok\"", "\"file\": \"../../elsewhere\"", "train.file is \"../../elsewhere\", not the name of a file"},
        {"\"file\": \"val.tok\"", "\"file\": \"train.tok\"", "train.file and val.file are both \"train.tok\""},
        {"\"seq_len\": 16", "\"seq_len\": 16.5", "split.seq_len is 16.5, not a whole number"},
        {"\"seq_len\": 16", "\"seq_len\": 100000", "split (val_fraction 0.10000000000000001, seq_len 100000) does not give"},
        {"\"documents\": 200,", "\"documents\": 201,", "documents is 201, but the sources' add up to 200"},
        {"\"kind\": \"jsonl\"", "\"kind\": \"parquet\"", "sources[0].kind is \"parquet\""},
        {"\"empty_texts\": 0", "\"empty_texts\": -1", "empty_texts is -1, not a whole number in [0, 9007199254740992]"},
        {"\"by_name\": 0", "\"by_name\": 0, \"extra\": 1", "skipped has a member \"extra\" that prepare does not write"},
        {"\"format\"", "\"formats\": 1, \"format\"", "the manifest has a member \"formats\""},
        {"\"id\": 257", "\"id\": 259", "tokenizer.special_tokens is not that of the dataset's tokenizer"},
        {"\"vocab_size\": 300", "\"vocab_size\": 299", "tokenizer.vocab_size is not that of the dataset's tokenizer"},
        {"\"rule\": \"the", "\"rule\": \"not the", "split.rule is \"not the"},
        {"\"malformed_examples\": [", "\"malformed_examples\": [3", "malformed_examples holds 3, not only strings"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, "edit%zu", i);
        char *copy = edited_copy(out, name, edits[i].find, edits[i].put);
        tg_error_clear();
        TgStatus st = tg_dataset_open(copy, true, &d);
        cr_expect_eq(st, TG_ERR_FORMAT, "edit %zu (%s) was accepted", i, edits[i].put);
        if (st == TG_OK) tg_dataset_close(&d);
        cr_expect(strstr(tg_error_message(), edits[i].says) && strstr(tg_error_message(), "dataset.json"),
                  "edit %zu: %s", i, tg_error_message());
        free(copy);
    }
    free(src), free(out), free(text);
}

/* ---- 6: ChatML markers a BPE would split --------------------------------------------------------- */

Test(prepare_hostile, chatml_markers_without_special_tokens_are_counted_and_named) {
    size_t len;
    char *text = jsonl(11, 300, true, &len); /* 100 of each marker */
    datagen_write(dir, "pre.jsonl", text, len);
    char *src = datagen_path(dir, "pre.jsonl");
    static const struct {
        const char *specials, *out, *says;
    } cases[] = {
        {NULL, "plain", "the texts hold 100 <|im_start|> and 100 <|im_end|>, which this BPE encodes as several byte-level ids "
                        "each, not as markers: `special_tokens` chatml makes each a single id"},
        {"<|im_start|>", "half", "the texts hold 100 <|im_end|>, which this BPE encodes as several byte-level ids each, not as "
                                 "markers: `special_tokens` '<|im_start|>,<|im_end|>' makes each a single id"},
        {"chatml", "chatml", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = datagen_path(dir, cases[i].out);
        TgPrepareOptions opt;
        options(&opt, src);
        opt.special_tokens = cases[i].specials;
        Messages m;
        TgPrepareReporter rep = reporter_of(&m);
        assert_ok(tg_prepare_dataset(&opt, out, &rep, NULL, NULL));
        if (cases[i].says) cr_expect(strstr(m.text, cases[i].says), "%s:\n%s", cases[i].out, m.text);
        else cr_expect_null(strstr(m.text, "the texts hold"), "%s:\n%s", cases[i].out, m.text);
        free(out);
    }
    free(src), free(text);
}
