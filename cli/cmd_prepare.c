/* `tapegrad prepare`: sources -> a dataset folder (data/dataset.h), prepared once and read by any
 * number of runs (`train --dataset DIR`). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/train_report.h"
#include "data/corpus.h"
#include "data/prepare.h"
#include "support/path.h"
#include "run/shared_flags.h"
#include "run/train_options.h"

typedef struct {
    const char *data, *out, *special_tokens, *text_field;
    TgTokenizerChoice tokenizer;
    int64_t vocab, seq;
    double val_fraction;
    bool strict;
    int threads;
} PrepareFlags;

#define P PrepareFlags
static const TgOptSpec specs[] = {
    TG_FLAG_DATA(P, data, "text or JSONL file (gzip-compressed or not), or a folder of them (a mixture)", 0,
              TG_CORPUS_DEFAULT_PATH),
    TG_FLAG_OUT(P, out, "the dataset folder to write (made whole or not at all)", 0, "required"),
    TG_FLAG_TOKENIZER(P, tokenizer, "bpe (trained on the data), char, or hf:FILE (a Hugging Face byte-level BPE tokenizer.json)",
                   0, NULL),
    TG_FLAG_VOCAB(P, vocab, "BPE vocabulary size, the special tokens included", 0, NULL),
    TG_FLAG_SPECIAL_TOKENS(P, special_tokens, 0),
    TG_FLAG_TEXT_FIELD(P, text_field, 0),
    TG_OPT(P, strict, "--strict", TG_OPT_BOOL, "stop at the first malformed JSONL line instead of skipping and counting it",
        TG_OPT_ANY, NULL, 0, NULL),
    TG_OPT(P, val_fraction, "--val-fraction", TG_OPT_DOUBLE, "last fraction of the tokens kept for validation", TG_OPT_FRACTION,
        NULL, 0, NULL),
    TG_FLAG_SEQ(P, seq, "the longest context a run will read: each split must hold one window of it", 0, NULL),
    TG_FLAG_THREADS(P, threads, "threads encoding the documents (the output does not depend on them)", 0, NULL),
};
#undef P
static const TgOptTable table = {"prepare", "--out DIR [--data PATH] [--tokenizer bpe|char|hf:FILE] [flags]", specs,
                               (int)(sizeof specs / sizeof specs[0]), 0};

/* Whether dir/name exists. */
static bool folder_holds(const char *dir, const char *name) {
    char path[TG_PATH_CAP];
    return tg_path_join(path, sizeof path, dir, name) == TG_OK && access(path, F_OK) == 0;
}

static int run_prepare(int argc, char **argv) {
    const PrepareFlags defaults = {.tokenizer = {TG_TOKENIZER_USE_BPE, NULL}, .vocab = TG_TRAIN_DEFAULT_BPE_VOCAB, .seq = 256,
                                   .val_fraction = TG_PREPARE_DEFAULT_VAL_FRACTION, .threads = TG_TRAIN_DEFAULT_THREADS};
    PrepareFlags o = defaults;
    TgOptSet given = 0;
    int rc = cli_parse(&table, &o, &defaults, &given, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!o.out) return cli_usage_error("prepare", "--out DIR is required: the dataset folder to write");
    bool hf = o.tokenizer.source == TG_TOKENIZER_USE_HF;
    char tokenizer[TG_PATH_CAP + 8];
    tg_tokenizer_choice_format(&o.tokenizer, tokenizer, sizeof tokenizer);
    if ((given & TG_OPT_BIT(tg_opt_find(&table, "--vocab"))) && o.tokenizer.source != TG_TOKENIZER_USE_BPE)
        return cli_usage_error("prepare", "--vocab sets the size of a BPE trained on the data; drop it with --tokenizer %s",
                               tokenizer);
    TgPrepareOptions p;
    tg_prepare_options_default(&p);
    p.sources = o.data;
    p.kind = o.tokenizer.source == TG_TOKENIZER_USE_CHAR ? TG_TOKENIZER_CHAR : TG_TOKENIZER_BPE;
    p.tokenizer_json = hf ? o.tokenizer.hf_file : NULL;
    p.vocab_size = (int32_t)o.vocab;
    p.special_tokens = o.special_tokens;
    p.text_field = o.text_field;
    p.strict = o.strict;
    p.val_fraction = o.val_fraction;
    p.seq_len = o.seq;
    p.threads = o.threads;
    if (folder_holds(o.out, TG_RUN_IDENTITY_FILE))
        return cli_exit("prepare", tg_fail(TG_ERR_IO,
                                           "%s is a run folder (it holds %s), not a dataset folder: give --out a new path "
                                           "(a run reads a dataset with train --dataset)",
                                           o.out, TG_RUN_IDENTITY_FILE));
    CliTrainReport report;
    TgPrepareReporter reporter = cli_prepare_reporter(&report, "prepare");
    TgPrepareResult r;
    bool already = false;
    TgStatus s = tg_prepare_dataset(&p, o.out, &reporter, &r, &already);
    cli_train_report_end(&report);
    if (s == TG_OK && already) {
        printf("%s already holds this dataset (the same recipe and sources; fingerprint %016" PRIx64
               "): nothing to do\n",
               o.out, r.fingerprint);
    } else if (s == TG_OK) {
        printf("dataset %s: %" PRIu64 " documents, %.1f MB of sources -> %" PRIu64 " tokens (%" PRIu64 " train, %" PRIu64
               " val), vocab %" PRId32 ", %.2f bytes per token\n",
               o.out, r.documents, (double)r.text_bytes / 1e6, r.n_tokens, r.n_train, r.n_val, r.vocab_size,
               r.n_tokens ? (double)r.text_bytes / (double)r.n_tokens : 0.0);
        printf("time: %.1f s counting, %.1f s training the tokenizer, %.1f s encoding (%d threads); fingerprint %016" PRIx64
               "\n",
               r.count_seconds, r.tokenizer_seconds, r.encode_seconds, o.threads, r.fingerprint);
        char out[TG_PATH_CAP * 4 + 8];
        printf("train on it with: %s train --dataset %s\n", cli_program(), cli_shell_word(o.out, out, sizeof out));
    }
    return cli_exit("prepare", s);
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_prepare = {"prepare", "sources (text, JSONL, gzip) -> a dataset folder that runs train on",
                                run_prepare, option_tables};
