#include "data/prepare.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/tokenizer_hf.h"
#include "data/tokfile.h"
#include "lib/atomic_file.h"
#include "lib/clock.h"
#include "lib/path.h"

void prepare_options_default(PrepareOptions *opt) {
    *opt = (PrepareOptions){
        .corpus_path = NULL,
        .out_dir = "data",
        .kind = TG_TOKENIZER_BPE,
        .vocab_size = 2048,
        .val_fraction = PREPARE_DEFAULT_VAL_FRACTION,
        .seq_len = 256,
    };
}

TgStatus corpus_split(size_t n, double val_fraction, int64_t seq_len, size_t *n_train, size_t *n_val) {
    if (!(val_fraction > 0.0 && val_fraction < 1.0))
        return tg_fail(TG_ERR_ARG, "val_fraction %g is not in (0, 1): give e.g. 0.1 for the last 10%%",
                       val_fraction);
    if (seq_len < 1) return tg_fail(TG_ERR_ARG, "seq_len %" PRId64 " must be at least 1", seq_len);
    size_t val = (size_t)llround((double)n * val_fraction);
    if (val > n) val = n;
    size_t train = n - val, need = (size_t)seq_len + 1;
    if (train < need || val < need) {
        /* smallest total for which both splits reach `need`, give or take rounding */
        double frac = val_fraction < 0.5 ? val_fraction : 1.0 - val_fraction;
        size_t total = (size_t)ceil((double)need / frac);
        return tg_fail(TG_ERR_ARG,
                       "corpus too short: %zu tokens split into %zu train + %zu val (val_fraction "
                       "%g), but each split needs at least %zu tokens (one window of seq_len %" PRId64
                       " + 1), so about %zu tokens in all; use a larger corpus, a smaller "
                       "seq_len, or a val_fraction nearer 0.5",
                       n, train, val, val_fraction, need, seq_len, total);
    }
    *n_train = train;
    *n_val = val;
    return TG_OK;
}

/* Encodes text and splits the stream: fills res's counts; *ids (caller frees) holds the stream. */
static TgStatus encode_and_split(const TgTokenizer *tok, const char *text, size_t len, double val_fraction,
                                  int64_t seq_len, int32_t **ids, PrepareResult *res) {
    res->corpus_bytes = len;
    res->vocab_size = tok->vocab_size;
    res->tokenizer_fingerprint = tg_tokenizer_fingerprint(tok);
    *ids = NULL;
    /* Validate the arguments before the (possibly long) encode. */
    if (!(val_fraction > 0.0 && val_fraction < 1.0) || seq_len < 1) {
        size_t a, b;
        return corpus_split(0, val_fraction, seq_len, &a, &b);
    }
    double t0 = clock_seconds();
    size_t cap = tg_tokenizer_max_ids(tok, len);
    *ids = tg_malloc((cap ? cap : 1) * sizeof **ids);
    size_t n = 0;
    TgStatus st = tg_tokenizer_encode(tok, text, len, *ids, cap, &n);
    res->encode_seconds = clock_seconds() - t0;
    res->n_tokens = n;
    res->n_train = res->n_val = 0;
    if (st == TG_OK) st = corpus_split(n, val_fraction, seq_len, &res->n_train, &res->n_val);
    if (st != TG_OK) {
        free(*ids);
        *ids = NULL;
    }
    return st;
}

/* Writes out_dir/train.tok and out_dir/val.tok (out_dir created when missing). */
static TgStatus write_splits(const char *out_dir, const TgTokenizer *tok, const int32_t *ids, size_t n_train,
                              size_t n_val) {
    char path[TG_PATH_CAP];
    uint64_t fingerprint = tg_tokenizer_fingerprint(tok);
    TG_TRY(make_folders(out_dir));
    TG_TRY(path_join(path, sizeof path, out_dir, PREPARE_TRAIN_FILE));
    TG_TRY(tokfile_write_tagged(path, ids, n_train, (uint32_t)tok->vocab_size, fingerprint));
    TG_TRY(path_join(path, sizeof path, out_dir, PREPARE_VAL_FILE));
    return tokfile_write_tagged(path, ids + n_train, n_val, (uint32_t)tok->vocab_size, fingerprint);
}

TgStatus corpus_prepare(const TgTokenizer *tok, const char *text, size_t len, const char *out_dir,
                         double val_fraction, int64_t seq_len, PrepareResult *result) {
    PrepareResult local;
    PrepareResult *res = result ? result : &local;
    int32_t *ids;
    TG_TRY(encode_and_split(tok, text, len, val_fraction, seq_len, &ids, res));
    TgStatus st = write_splits(out_dir, tok, ids, res->n_train, res->n_val);
    free(ids);
    return st;
}

TgStatus prepare_corpus(const PrepareOptions *opt, PreparedCorpus *out, PrepareResult *result) {
    PrepareResult local;
    PrepareResult *res = result ? result : &local;
    memset(res, 0, sizeof *res);
    memset(out, 0, sizeof *out);
    if (opt->kind != TG_TOKENIZER_CHAR && opt->kind != TG_TOKENIZER_BPE)
        return tg_fail(TG_ERR_ARG, "unknown tokenizer kind %d: use char or bpe", (int)opt->kind);
    if (!(opt->val_fraction > 0.0 && opt->val_fraction < 1.0) || opt->seq_len < 1) {
        size_t a, b; /* refuse bad split settings before the slow part */
        return corpus_split(0, opt->val_fraction, opt->seq_len, &a, &b);
    }
    const char *corpus_path = opt->corpus_path ? opt->corpus_path : corpus_default_path();
    char *text;
    size_t len;
    TG_TRY(corpus_read_info(corpus_path, &text, &len, &res->corpus));
    double t0 = clock_seconds();
    TgStatus st = opt->tokenizer_json         ? tokenizer_hf_load(opt->tokenizer_json, &out->tok)
                   : opt->kind == TG_TOKENIZER_CHAR ? tg_tokenizer_char_train(text, len, &out->tok)
                                                 : tg_tokenizer_bpe_train(text, len, opt->vocab_size, &out->tok);
    res->tokenizer_seconds = clock_seconds() - t0;
    if (st == TG_OK) st = encode_and_split(&out->tok, text, len, opt->val_fraction, opt->seq_len, &out->ids, res);
    free(text);
    if (st != TG_OK) {
        prepared_corpus_free(out);
        return tg_fail_context(st, "preparing %s", corpus_path);
    }
    out->n_train = res->n_train;
    out->n_val = res->n_val;
    return TG_OK;
}

TgStatus prepare_write(const PreparedCorpus *p, const char *out_dir) {
    char path[TG_PATH_CAP];
    TG_TRY(make_folders(out_dir));
    TG_TRY(path_join(path, sizeof path, out_dir, PREPARE_TOKENIZER_FILE));
    TG_TRY(tg_tokenizer_save(&p->tok, path));
    return write_splits(out_dir, &p->tok, p->ids, p->n_train, p->n_val);
}

void prepared_corpus_free(PreparedCorpus *p) {
    tg_tokenizer_free(&p->tok);
    free(p->ids);
    memset(p, 0, sizeof *p);
}

TgStatus prepare_run(const PrepareOptions *opt, TgTokenizer *tok_out, PrepareResult *result) {
    if (tok_out) memset(tok_out, 0, sizeof *tok_out);
    if (!opt->out_dir || !*opt->out_dir) return tg_fail(TG_ERR_ARG, "no output folder given for the prepared data");
    PreparedCorpus p;
    TG_TRY(prepare_corpus(opt, &p, result));
    TgStatus st = prepare_write(&p, opt->out_dir);
    if (st == TG_OK && tok_out) {
        *tok_out = p.tok;
        memset(&p.tok, 0, sizeof p.tok);
    }
    prepared_corpus_free(&p);
    if (st != TG_OK) return tg_fail_context(st, "preparing %s", opt->corpus_path ? opt->corpus_path : CORPUS_DEFAULT_PATH);
    return TG_OK;
}
