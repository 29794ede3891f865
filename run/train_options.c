#include "run/train_options.h"
#include "lib/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/corpus.h"
#include "data/prepare.h"
#include "data/task_file.h"
#include "support/atomic_file.h"
#include "lib/gemm_plan.h"
#include "checkpoint/checkpoint.h"
#include "run/run_folder.h"
#include "support/path.h"

/* --tokenizer's char, bpe or hf:FILE, wherever the text comes from (a flag, run.txt) */
static TgStatus tokenizer_parse(const TgOptSpec *spec, void *field, const char *text) {
    TgTokenizerChoice *c = field;
    if (strcmp(text, "char") == 0) *c = (TgTokenizerChoice){TG_TOKENIZER_USE_CHAR, NULL};
    else if (strcmp(text, "bpe") == 0) *c = (TgTokenizerChoice){TG_TOKENIZER_USE_BPE, NULL};
    else if (strncmp(text, "hf:", 3) == 0 && text[3]) *c = (TgTokenizerChoice){TG_TOKENIZER_USE_HF, text + 3};
    else return tg_fail(TG_ERR_ARG, "%s must be char, bpe or hf:PATH/tokenizer.json, got '%s'", spec->flag, text);
    return TG_OK;
}

void tg_tokenizer_choice_format(const TgTokenizerChoice *c, char *buf, size_t cap) {
    switch (c->source) {
    case TG_TOKENIZER_USE_CHAR: snprintf(buf, cap, "char"); break;
    case TG_TOKENIZER_USE_BPE: snprintf(buf, cap, "bpe"); break;
    case TG_TOKENIZER_USE_HF: snprintf(buf, cap, "hf:%s", c->hf_file); break;
    default: snprintf(buf, cap, "%s", ""); break;
    }
}

static void tokenizer_format(const void *field, char *buf, size_t cap) { tg_tokenizer_choice_format(field, buf, cap); }

static bool tokenizer_equal(const void *a, const void *b) {
    const TgTokenizerChoice *x = a, *y = b;
    return x->source == y->source && (x->source != TG_TOKENIZER_USE_HF || strcmp(x->hf_file, y->hf_file) == 0);
}

const TgOptCodec tg_tokenizer_choice_codec = {sizeof(TgTokenizerChoice), tokenizer_parse, tokenizer_format,
                                              tokenizer_equal};

/* --beta of DPO: above 0; written to run.txt only by a dpo run (0 is "not given") */
static TgStatus beta_parse(const TgOptSpec *spec, void *field, const char *text) {
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !(v > 0 && v <= TG_DPO_MAX_BETA))
        return tg_fail(TG_ERR_ARG, "%s must be a number above 0 and at most %g (0.1 is usual), got '%s'", spec->flag,
                       TG_DPO_MAX_BETA, text);
    *(double *)field = v;
    return TG_OK;
}

static void beta_format(const void *field, char *buf, size_t cap) {
    double v = *(const double *)field;
    if (v > 0)
        snprintf(buf, cap, "%.17g", v);
    else
        snprintf(buf, cap, "%s", "");
}

static bool beta_equal(const void *a, const void *b) { return *(const double *)a == *(const double *)b; }

static const TgOptCodec beta_codec = {sizeof(double), beta_parse, beta_format, beta_equal};

/* --chat-template of sft: chatml or minimind-3; written to run.txt only when not ChatML, so that
 * the run.txt of every other run keeps its bytes */
static TgStatus template_parse(const TgOptSpec *spec, void *field, const char *text) {
    for (int t = 0; t < TG_CHAT_TEMPLATE_COUNT; t++)
        if (strcmp(text, tg_chat_template_name((TgChatTemplate)t)) == 0) {
            *(TgChatTemplate *)field = (TgChatTemplate)t;
            return TG_OK;
        }
    return tg_fail(TG_ERR_ARG, "%s must be chatml or minimind-3, got '%s'", spec->flag, text);
}

static void template_format(const void *field, char *buf, size_t cap) {
    TgChatTemplate t = *(const TgChatTemplate *)field;
    snprintf(buf, cap, "%s", t == TG_CHAT_TEMPLATE_CHATML ? "" : tg_chat_template_name(t));
}

static bool template_equal(const void *a, const void *b) {
    return *(const TgChatTemplate *)a == *(const TgChatTemplate *)b;
}

static const TgOptCodec template_codec = {sizeof(TgChatTemplate), template_parse, template_format, template_equal};

/* 0, or a k slice the GEMM takes (a multiple of 8 in [TG_GEMM_KC_MIN, TG_GEMM_KC_MAX]) */
static TgStatus check_gemm_kc(const TgOptSpec *spec, const void *field) {
    int64_t kc = *(const int64_t *)field;
    if (kc == 0 || (kc >= TG_GEMM_KC_MIN && kc <= TG_GEMM_KC_MAX && kc % 8 == 0)) return TG_OK;
    return tg_fail(TG_ERR_ARG, "%s must be 0 (this CPU's) or a multiple of 8 in [%d, %d], got %lld", spec->flag,
                   TG_GEMM_KC_MIN, TG_GEMM_KC_MAX, (long long)kc);
}

/* a weights fingerprint as tg_model_weights_fingerprint's hex: 16 hex digits */
static TgStatus check_fingerprint(const TgOptSpec *spec, const void *field) {
    const char *v = *(const char *const *)field;
    if (!v || (strlen(v) == 16 && strspn(v, "0123456789abcdef") == 16)) return TG_OK;
    return tg_fail(TG_ERR_ARG, "%s must be 16 lowercase hex digits (a weights fingerprint, as run.txt records it), got '%s'",
                   spec->flag, v);
}

/* task files whose names (tg_task_file_name) are valid and distinct: each names its metrics */
static TgStatus check_task_files(const TgOptSpec *spec, const void *field) {
    const TgOptList *list = field;
    char names[TG_OPT_LIST_MAX][TG_TASK_NAME_CAP];
    for (int i = 0; i < list->count; i++) {
        if (tg_task_file_name(list->items[i], names[i], sizeof names[i]) != TG_OK)
            return tg_fail_context(TG_ERR_ARG, "%s", spec->flag);
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                return tg_fail(TG_ERR_ARG, "%s %s and %s are both the task '%s' (a task is named by its file): rename one",
                               spec->flag, list->items[j], list->items[i], names[i]);
    }
    return TG_OK;
}

#define ID TG_TRAIN_OPT_IDENTITY
#define SHAPE TG_TRAIN_OPT_SHAPE
#define SAVED TG_TRAIN_OPT_SAVED
#define NUM TG_TRAIN_OPT_NUMERIC
#define T TgTrainOptions

static const TgOptSpec specs[] = {
    TG_OPT(T, spec.task, "--task", TG_OPT_ENUM,
           "what it trains on: text, conversations (supervised fine-tuning, as `tapegrad sft`) or preference pairs "
           "(DPO, as `tapegrad dpo`)",
           TG_OPT_ANY, TG_TRAIN_TASK_CHOICES, ID, NULL),
    TG_FLAG_PRESET(T, spec.preset, "model preset", ID, NULL),
    TG_OPT(T, spec.model.dim, "--dim", TG_OPT_INT64, "model width", TG_OPT_POSITIVE, NULL, SHAPE, "the preset's"),
    TG_OPT(T, spec.model.n_layers, "--layers", TG_OPT_INT64, "transformer blocks", TG_OPT_POSITIVE, NULL, SHAPE,
           "the preset's"),
    TG_OPT(T, spec.model.n_heads, "--heads", TG_OPT_INT64, "query heads (must divide --dim)", TG_OPT_POSITIVE, NULL,
           SHAPE, "the preset's"),
    TG_OPT(T, spec.model.n_kv_heads, "--kv-heads", TG_OPT_INT64, "key/value heads (must divide --heads)",
           TG_OPT_POSITIVE, NULL, SHAPE, "the preset's"),
    TG_OPT(T, spec.model.hidden, "--hidden", TG_OPT_INT64, "FFN hidden size", TG_OPT_POSITIVE, NULL, SHAPE,
           "the preset's; with another --dim or --ffn relu, the size giving SwiGLU's parameter count"),
    TG_FLAG_SEQ(T, spec.model.seq_len, "context length in tokens", SHAPE, "the preset's"),
    TG_FLAG_VOCAB(T, spec.model.vocab, "BPE vocabulary size (at least " TG_OPT_STRINGIFY(TG_TRAIN_MIN_BPE_VOCAB) ")",
                  SHAPE, "the preset's, else " TG_OPT_STRINGIFY(TG_TRAIN_DEFAULT_BPE_VOCAB)),
    TG_FLAG_FFN(T, spec.ffn, "feed-forward block", SHAPE, NULL),
    TG_OPT(T, spec.model.rope_theta, "--rope-theta", TG_OPT_DOUBLE, "RoPE base",
           ((TgOptRange){1, INFINITY, true, false}), NULL, SHAPE, "the preset's"),
    TG_OPT(T, spec.ffn_hidden_rule, "--ffn-hidden-rule", TG_OPT_ENUM,
           "the SwiGLU hidden size of a width when --hidden is not given: eight-thirds, 64 ceil(8 dim / 3 / 64) "
           "(MiniMind2), or pi, 64 ceil(dim pi / 64) (MiniMind-3); run.txt records it",
           TG_OPT_ANY, TG_FFN_HIDDEN_RULE_CHOICES, ID, "the preset's"),
    TG_OPT(T, spec.model.norm_eps, "--norm-eps", TG_OPT_DOUBLE, "RMSNorm's eps, inside the square root",
           TG_OPT_BETWEEN(TG_MODEL_MIN_NORM_EPS, TG_MODEL_MAX_NORM_EPS), NULL, SHAPE, "the preset's"),
    TG_OPT(T, spec.model.qk_norm, "--qk-norm", TG_OPT_BOOL,
           "QK-norm: an RMSNorm over each query and key head, its gain shared by a layer's heads, before RoPE",
           TG_OPT_ANY, NULL, SHAPE, "the preset's"),
    TG_FLAG_DATA(T, spec.data_path,
                 "text or JSONL file (gzip-compressed or not) or a folder of them, prepared into the run; sft: JSONL "
                 "conversations",
                 ID, TG_CORPUS_DEFAULT_PATH " (sft: none)"),
    TG_FLAG_DATASET(T, spec.dataset, "a dataset folder made by `tapegrad prepare`, instead of --data", ID, NULL),
    TG_FLAG_SPECIAL_TOKENS(T, spec.special_tokens, ID),
    TG_FLAG_TEXT_FIELD(T, spec.text_field, ID),
    TG_FLAG_TOKENIZER(
        T, spec.tokenizer,
        "tokenizer: char, bpe (trained on the corpus) or hf:FILE (a Hugging Face byte-level BPE tokenizer.json)", ID,
        "bpe when the preset has a vocabulary of its own, else char"),
    TG_OPT(T, spec.val_fraction, "--val-fraction", TG_OPT_DOUBLE,
           "last fraction of the tokens (sft: of the conversations) kept for validation", TG_OPT_FRACTION, NULL, ID,
           NULL),
    TG_FLAG_SEED(T, spec.seed, "seed of init and data order", ID, NULL),
    TG_OPT(
        T, spec.init_from, "--init-from", TG_OPT_STRING,
        "start a new run from these weights: a run folder or checkpoint (its tokenizer and shape carry over; run.txt "
        "records the checkpoint), or a safetensors file (from `tapegrad ckpt export`)",
        TG_OPT_ANY, NULL, ID, NULL),
    TG_OPT_CHECKED(T, spec.init_fingerprint, "--init-fingerprint", TG_OPT_STRING,
                   "the fingerprint of the --init-from weights (16 hex digits): weights with another are refused; "
                   "run.txt records it, and a LoRA run's commands find its base by it",
                   TG_OPT_ANY, NULL, ID, "any", check_fingerprint),
    TG_OPT_CHECKED(T, spec.gemm_kc, "--gemm-kc", TG_OPT_INT64,
                   "the GEMMs' k slice, which fixes the order of their sums; run.txt records it, so a resume on "
                   "another CPU sums as the run did",
                   TG_OPT_BETWEEN(0, TG_GEMM_KC_MAX), NULL, ID, "from this CPU's L1 cache", check_gemm_kc),
    TG_OPT(T, spec.lora_rank, "--lora-rank", TG_OPT_INT64,
           "train LoRA adapters of this rank on the frozen --init-from weights instead of every weight",
           TG_OPT_BETWEEN(0, TG_LORA_MAX_RANK), NULL, ID, "none: full fine-tuning"),
    TG_OPT(T, spec.lora_alpha, "--lora-alpha", TG_OPT_DOUBLE, "LoRA scale numerator: the update is (alpha / rank) B A",
           TG_OPT_BETWEEN(0, TG_LORA_MAX_ALPHA), NULL, ID, "2 x --lora-rank"),
    TG_OPT(T, spec.lora_targets, "--lora-targets", TG_OPT_STRING,
           "the linears LoRA adapts, any of q,k,v,o,gate,up,down", TG_OPT_ANY, NULL, ID, TG_TRAIN_DEFAULT_LORA_TARGETS),
    TG_OPT(T, spec.lora_tokens, "--lora-tokens", TG_OPT_STRING,
           "tokens whose embedding rows train beside LoRA adapters: auto (chat, and the tokens of the data the "
           "base never trained on), chat (the markers <|im_start|>, <|im_end|>), none, or a comma-separated list "
           "of tokens (their texts or ids)",
           TG_OPT_ANY, NULL, ID, TG_TRAIN_DEFAULT_LORA_TOKENS),
    TG_FLAG_PRECISION(T, spec.precision,
                      "the linear layers' products: fp32, or bf16 (operands rounded to bf16, fp32 sums; weights, "
                      "gradients and AdamW moments stay fp32); run.txt records it and a resume continues in it",
                      ID, NULL),
    TG_OPT_CODEC(
        T, spec.keep_best, "--keep-best",
        "keep the checkpoint of the best evaluation by this figure (the lowest val_loss or val_bpb, the highest "
        "accuracy of an --eval-task) beside the newest; DIR/best names it and --keep never deletes it; run.txt records "
        "it",
        "none|val_loss|val_bpb|task:NAME|task:NAME:acc_norm", ID, "none", &tg_best_metric_codec),
    TG_OPT_CODEC(T, spec.dpo_beta, "--beta",
                 "dpo: how far the model may move from the one it starts from (the loss is -log sigmoid(beta "
                 "(log-ratio of the chosen reply - that of the rejected one))); run.txt records it",
                 NULL, ID, TG_OPT_STRINGIFY(TG_DPO_DEFAULT_BETA), &beta_codec),
    TG_OPT_CODEC(T, spec.chat_template, "--chat-template",
                 "sft: how conversations render: chatml, or minimind-3 (MiniMind-3's template: tools, tool calls and "
                 "responses, thinking; its SFT files as they are); run.txt records it",
                 "chatml|minimind-3", ID, "chatml", &template_codec),
    TG_FLAG_STEPS(T, schedule.steps, "optimizer steps; the LR schedule spans them", SAVED | NUM, NULL),
    TG_FLAG_BATCH(T, schedule.batch, "sequences per micro-batch (dpo: pairs, each two sequences)", SAVED | NUM, NULL),
    TG_OPT(T, schedule.accum, "--accum", TG_OPT_INT64, "micro-batches per step: gradient accumulation",
           TG_FLAG_RANGE_COUNT, NULL, SAVED | NUM, NULL),
    TG_OPT(T, schedule.lr, "--lr", TG_OPT_DOUBLE, "peak learning rate", TG_OPT_POSITIVE, NULL, SAVED | NUM,
           "3e-3; dpo: " TG_OPT_STRINGIFY(TG_DPO_DEFAULT_LR)),
    TG_OPT(T, schedule.min_lr, "--min-lr", TG_OPT_DOUBLE, "final learning rate of the cosine", TG_OPT_NON_NEGATIVE,
           NULL, SAVED | NUM, "lr/10"),
    TG_FLAG_WARMUP(T, schedule.warmup, "linear warmup steps", SAVED | NUM, "5% of --steps"),
    TG_OPT(T, schedule.adamw.weight_decay, "--weight-decay", TG_OPT_DOUBLE,
           "AdamW decoupled decay; never on norm weights", TG_OPT_NON_NEGATIVE, NULL, SAVED | NUM, NULL),
    TG_OPT(T, schedule.adamw.beta1, "--beta1", TG_OPT_DOUBLE, "AdamW beta1", ((TgOptRange){0, 1, false, true}), NULL,
           SAVED | NUM, NULL),
    TG_OPT(T, schedule.adamw.beta2, "--beta2", TG_OPT_DOUBLE, "AdamW beta2", ((TgOptRange){0, 1, false, true}), NULL,
           SAVED | NUM, NULL),
    TG_OPT(T, schedule.clip, "--clip", TG_OPT_DOUBLE, "global gradient-norm clip, 0 for none", TG_OPT_NON_NEGATIVE,
           NULL, SAVED | NUM, NULL),
    TG_FLAG_EVAL_EVERY(T, schedule.eval_every, "val loss every N steps, 0 for only at the end", SAVED, NULL),
    TG_FLAG_EVAL_BATCHES(T, schedule.eval_batches, "fixed val batches per evaluation", SAVED, NULL),
    TG_OPT_CHECKED(
        T, schedule.eval_tasks, "--eval-task", TG_OPT_LIST,
        "a task file (minimal pairs or multiple choice, JSONL) scored at every evaluation, its accuracies in "
        "metrics.jsonl as task/NAME/acc and task/NAME/acc_norm",
        TG_OPT_ANY, NULL, SAVED, "none", check_task_files),
    TG_OPT(T, schedule.log_every, "--log-every", TG_OPT_INT64, "log line every N steps", TG_OPT_POSITIVE, NULL, SAVED,
           NULL),
    TG_FLAG_LOG_GRADS(T, schedule.log_grads,
                      "every N steps, per-tensor gradient and FFN activation statistics to grads.jsonl, 0 for none", 0,
                      "off"),
    TG_OPT(T, schedule.ckpt_every, "--ckpt-every", TG_OPT_INT64, "checkpoint every N steps, 0 for only at the end",
           TG_OPT_NON_NEGATIVE, NULL, SAVED, NULL),
    TG_OPT(T, schedule.keep, "--keep", TG_OPT_INT, "checkpoints kept, newest first (0: all)", TG_OPT_NON_NEGATIVE, NULL,
           SAVED, NULL),
    TG_OPT(T, schedule.early_stop, "--early-stop", TG_OPT_INT64,
           "end the run, saved, after N evaluations in a row without a better --keep-best figure (val_loss without it)",
           TG_OPT_BETWEEN(0, TG_TRAIN_MAX_COUNT), NULL, SAVED, "never"),
    TG_OPT(T, schedule.probe_prompts, "--probe-prompts", TG_OPT_STRING,
           "a text file of prompts, one a line: at every evaluation their greedy continuations go to DIR/probes.jsonl "
           "(a fine-tuning run's through the chat template, as a user turn)",
           TG_OPT_ANY, NULL, SAVED, "none"),
    TG_OPT(T, schedule.probe_tokens, "--probe-tokens", TG_OPT_INT64,
           "tokens of each --probe-prompts continuation (fewer when it ends: <eot>, <|im_end|>)",
           TG_OPT_BETWEEN(1, TG_TRAIN_MAX_PROBE_TOKENS), NULL, SAVED, NULL),
    TG_OPT(T, schedule.sample_tokens, "--sample-tokens", TG_OPT_INT64, "tokens sampled at the end, 0 for none",
           TG_OPT_BETWEEN(0, TG_TRAIN_MAX_COUNT), NULL, SAVED, NULL),
    TG_FLAG_THREADS(T, schedule.threads, "threads for the ops and OpenBLAS", SAVED | NUM, NULL),
    TG_OPT(T, invocation.time_budget_min, "--time-budget", TG_OPT_DOUBLE,
           "stop after this many minutes even if steps remain", TG_OPT_NON_NEGATIVE, NULL, 0, "none"),
    TG_FLAG_OUT(T, invocation.out_dir, "run folder", 0, "checkpoints/<preset>-<tokenizer>-<time>"),
    TG_OPT(T, invocation.resume, "--resume", TG_OPT_STRING,
           "continue the run in this folder (or from this checkpoint file), bitwise as if it never stopped", TG_OPT_ANY,
           NULL, 0, NULL),
    TG_OPT(T, invocation.stop_after, "--stop-after", TG_OPT_INT64,
           "stop after step N, save and exit 0; the LR schedule still spans --steps, so --resume continues exactly",
           TG_OPT_NON_NEGATIVE, NULL, 0, "none"),
    TG_OPT(T, invocation.strict, "--strict", TG_OPT_BOOL,
           "preparing --data: stop at the first malformed line (dpo: or pair that teaches nothing) instead of "
           "skipping and counting it",
           TG_OPT_ANY, NULL, 0, NULL),
    TG_OPT(T, invocation.comm_timeout_s, "--comm-timeout", TG_OPT_DOUBLE,
           "under mpirun: seconds a rank waits for the others before it ends the job (a rank died or hangs)",
           ((TgOptRange){0, 1e9, true, false}) /* 31 years: a deadline that fits a struct timespec */, NULL, 0, NULL),
};

#undef ID
#undef SHAPE
#undef SAVED
#undef NUM
#undef T

static const TgOptTable table = {"train", "[flags]   (no flags: the small preset on the default corpus)", specs,
                               (int)(sizeof specs / sizeof specs[0]), 0};
static const TgOptTable sft_table = {"sft", "--init-from RUN --data CONVERSATIONS.jsonl [flags]   (train --task sft)",
                                   specs, (int)(sizeof specs / sizeof specs[0]), 0};
static const TgOptTable dpo_table = {"dpo", "--init-from RUN --data PAIRS.jsonl [flags]   (train --task dpo)", specs,
                                     (int)(sizeof specs / sizeof specs[0]), 0};

const TgOptTable *tg_train_option_table(void) { return &table; }
const TgOptTable *tg_sft_option_table(void) { return &sft_table; }
const TgOptTable *tg_dpo_option_table(void) { return &dpo_table; }

void tg_train_options_defaults(TgTrainOptions *o) {
    memset(o, 0, sizeof *o);
    o->spec.task = TG_TASK_PRETRAIN;
    o->spec.preset = TG_TRAIN_DEFAULT_PRESET;
    o->spec.precision = TG_PRECISION_FP32;
    o->spec.ffn = TG_FFN_SWIGLU;
    o->spec.val_fraction = TG_PREPARE_DEFAULT_VAL_FRACTION;
    o->spec.seed = TG_TRAIN_DEFAULT_SEED;
    o->schedule.steps = 1500;
    o->schedule.batch = 16;
    o->schedule.accum = 1;
    o->schedule.warmup = -1;
    o->schedule.lr = 3e-3;
    o->schedule.min_lr = -1;
    o->schedule.clip = 1.0;
    o->schedule.adamw = tg_adamw_defaults();
    o->schedule.eval_every = 100;
    o->schedule.eval_batches = 8;
    o->schedule.log_every = 10;
    o->schedule.ckpt_every = 200;
    o->schedule.keep = 3;
    o->schedule.probe_tokens = 32;
    o->schedule.sample_tokens = 300;
    o->schedule.threads = TG_TRAIN_DEFAULT_THREADS;
    o->invocation.stop_after = -1;
    o->invocation.comm_timeout_s = TG_DIST_DEFAULT_TIMEOUT_S;
}

static bool given(const TgTrainOptions *o, const char *flag) {
    int i = tg_opt_find(&table, flag);
    return i >= 0 && (o->given & TG_OPT_BIT(i));
}

/* " (DIR/train_options.txt line 5)" for an option whose value came from the resumed run's file,
 * "" for one given now or left to its default. */
static const char *origin(const TgTrainOptions *o, const char *flag, char *buf, size_t cap) {
    int i = tg_opt_find(&table, flag);
    buf[0] = '\0';
    if (o->options_file && i >= 0 && (o->from_file.read & TG_OPT_BIT(i)))
        snprintf(buf, cap, " (%s line %d)", o->options_file, o->from_file.line[i]);
    return buf;
}

const char *tg_train_options_origin(const TgTrainOptions *o, const char *setting, char *buf, size_t cap) {
    int i = tg_opt_find_setting(&table, setting);
    return origin(o, i >= 0 ? table.specs[i].flag : "", buf, cap);
}

/* Two options that do not go together: the file's fault (TG_ERR_FORMAT, exit 1) when both came
 * from train_options.txt, else the flags' (TG_ERR_ARG). */
static TgStatus conflict(const TgTrainOptions *o, const char *a, const char *b) {
    char oa[TG_PATH_CAP + 32], ob[TG_PATH_CAP + 32];
    bool from_file = origin(o, a, oa, sizeof oa)[0] && origin(o, b, ob, sizeof ob)[0];
    return from_file ? TG_ERR_FORMAT : TG_ERR_ARG;
}

/* --keep-best, --early-stop and --probe-prompts act at the evaluations of --eval-every, which 0
 * leaves to the end alone. */
static TgStatus check_evaluations(const TgTrainOptions *o) {
    const char *flag = o->spec.keep_best.kind != TG_EVAL_METRIC_NONE             ? "--keep-best"
                       : o->schedule.early_stop > 0                              ? "--early-stop"
                       : o->schedule.probe_prompts && *o->schedule.probe_prompts ? "--probe-prompts"
                                                                                 : NULL;
    if (!flag || o->schedule.eval_every > 0) return TG_OK;
    char oa[TG_PATH_CAP + 32], ob[TG_PATH_CAP + 32];
    return tg_fail(conflict(o, flag, "--eval-every"),
                   "%s%s acts at the evaluations of --eval-every, and --eval-every 0%s makes none before the end: "
                   "give --eval-every N",
                   flag, origin(o, flag, oa, sizeof oa), origin(o, "--eval-every", ob, sizeof ob));
}

TG_ENUM_DEFINE(TgTrainTask, tg_train_task, TG_TRAIN_TASKS, TG_TASK_COUNT, "task")
bool tg_train_task_chat(TgTrainTask task) { return task == TG_TASK_SFT || task == TG_TASK_DPO; }
TG_ENUM_DEFINE(TgEvalMetric, tg_eval_metric, TG_EVAL_METRICS, TG_EVAL_METRIC_COUNT, "figure")
static const bool eval_metric_maximised[] = {
#define TG_EVAL_METRIC_MAXIMISED(id, name, maximised) maximised,
    TG_EVAL_METRICS(TG_EVAL_METRIC_MAXIMISED)
#undef TG_EVAL_METRIC_MAXIMISED
};

bool tg_eval_metric_maximised(TgEvalMetric metric) {
    return (unsigned)metric < TG_EVAL_METRIC_COUNT && eval_metric_maximised[metric];
}

void tg_best_metric_format(const TgBestMetric *m, char *buf, size_t cap) {
    if (m->kind == TG_EVAL_METRIC_TASK_ACC) snprintf(buf, cap, "task:%s", m->task);
    else if (m->kind == TG_EVAL_METRIC_TASK_ACC_NORM) snprintf(buf, cap, "task:%s:acc_norm", m->task);
    else snprintf(buf, cap, "%s", tg_eval_metric_name(m->kind));
}

/* --keep-best's text, wherever it comes from (a flag, run.txt) */
static TgStatus best_metric_parse(const TgOptSpec *spec, void *field, const char *text) {
    TgBestMetric *m = field, parsed = {TG_EVAL_METRIC_NONE, ""};
    if (strncmp(text, "task:", 5) == 0) {
        const char *name = text + 5, *colon = strchr(name, ':');
        size_t len = colon ? (size_t)(colon - name) : strlen(name);
        bool norm = colon && strcmp(colon, ":acc_norm") == 0;
        if (!tg_task_name_valid(name, len) || (colon && !norm && strcmp(colon, ":acc") != 0))
            return tg_fail(TG_ERR_ARG, "%s task:%s: expected task:NAME or task:NAME:acc_norm, NAME an --eval-task file's "
                                       "name (1 to 64 letters, digits, '-', '_' or '.')",
                           spec->flag, name);
        parsed.kind = norm ? TG_EVAL_METRIC_TASK_ACC_NORM : TG_EVAL_METRIC_TASK_ACC;
        memcpy(parsed.task, name, len);
        parsed.task[len] = '\0';
    } else {
        TgStatus known = tg_eval_metric_parse(text, &parsed.kind);
        if (known != TG_OK || parsed.kind >= TG_EVAL_METRIC_TASK_ACC) /* a task's figure names its task */
            return tg_fail(TG_ERR_ARG, "%s must be none, val_loss, val_bpb, task:NAME or task:NAME:acc_norm, got '%s'",
                           spec->flag, text);
    }
    *m = parsed;
    return TG_OK;
}

static void best_metric_format(const void *field, char *buf, size_t cap) { tg_best_metric_format(field, buf, cap); }

static bool best_metric_equal(const void *a, const void *b) {
    const TgBestMetric *x = a, *y = b;
    return x->kind == y->kind && strcmp(x->task, y->task) == 0;
}

const TgOptCodec tg_best_metric_codec = {sizeof(TgBestMetric), best_metric_parse, best_metric_format, best_metric_equal};

/* A new fine-tuning or DPO run: conversations (pairs) to read, and the tokenizer of the model it
 * starts from; DPO starts from a model, which is its reference. */
static TgStatus check_sft(const TgTrainOptions *o) {
    if (o->spec.task == TG_TASK_DPO && !o->spec.data_path && !o->spec.dataset)
        return tg_fail(TG_ERR_ARG,
                       "tapegrad dpo needs --data: a JSONL file of preference pairs (MiniMind's DPO format, "
                       "{\"chosen\": [messages], \"rejected\": [messages]} a line) or a folder of them");
    if (o->spec.task == TG_TASK_DPO && !o->spec.init_from)
        return tg_fail(TG_ERR_ARG,
                       "tapegrad dpo moves a fine-tuned model toward the preferred replies, measured against "
                       "that model as it starts: give --init-from RUN (a run or checkpoint of tapegrad sft)");
    if (o->spec.dataset)
        return tg_fail(TG_ERR_ARG, "fine-tuning reads conversations (--data FILE.jsonl); --dataset is a prepared text "
                                   "corpus for pretraining: drop it");
    if (given(o, "--special-tokens") || given(o, "--text-field") || given(o, "--vocab"))
        return tg_fail(TG_ERR_ARG, "fine-tuning keeps the tokenizer of the model it starts from: drop --special-tokens, "
                                   "--text-field and --vocab");
    if (!o->spec.data_path)
        return tg_fail(TG_ERR_ARG, "tapegrad sft needs --data: a JSONL file of conversations (MiniMind's SFT format, "
                                   "{\"conversations\": [{\"role\": ..., \"content\": ...}, ...]} a line) or a folder "
                                   "of them");
    return TG_OK;
}

/* The LoRA flags with each other and with the run. */
static TgStatus check_lora(const TgTrainOptions *o) {
    if (given(o, "--lora-rank") && o->spec.lora_rank <= 0)
        return tg_fail(TG_ERR_ARG, "--lora-rank must be at least 1 (8 or 16 is usual); leave it out for full fine-tuning");
    if (given(o, "--lora-alpha") && !(o->spec.lora_alpha > 0))
        return tg_fail(TG_ERR_ARG, "--lora-alpha must be above 0, got %g", o->spec.lora_alpha);
    if (!o->invocation.resume &&
        (given(o, "--lora-alpha") || given(o, "--lora-targets") || given(o, "--lora-tokens")) && o->spec.lora_rank <= 0)
        return tg_fail(TG_ERR_ARG, "--lora-alpha, --lora-targets and --lora-tokens set up LoRA adapters: add --lora-rank R "
                                   "(8 or 16 is usual)");
    if (!o->invocation.resume && o->spec.lora_rank > 0 && !o->spec.init_from)
        return tg_fail(TG_ERR_ARG, "--lora-rank trains adapters on a model's frozen weights: add --init-from (a run, "
                                   "checkpoint or safetensors file to adapt)");
    if (o->spec.lora_rank > 0 && o->schedule.log_grads > 0)
        return tg_fail(TG_ERR_ARG, "--log-grads inspects the gradients of every weight; a LoRA run has those of its "
                                   "adapters alone: drop --log-grads");
    if (o->spec.lora_rank <= 0) return TG_OK;
    TgLoraConfig lora;
    return tg_run_spec_lora(&o->spec, &lora);
}

/* --vocab against the tokenizer it would size. */
static TgStatus check_vocab(const TgTrainOptions *o) {
    if (given(o, "--vocab") && o->spec.model.vocab < TG_TRAIN_MIN_BPE_VOCAB)
        return tg_fail(TG_ERR_ARG,
                       "--vocab %lld is below %d: a byte-level BPE holds the 256 bytes and <eot> before "
                       "any merge",
                       (long long)o->spec.model.vocab, TG_TRAIN_MIN_BPE_VOCAB);
    if (!o->invocation.resume && given(o, "--vocab") && o->spec.tokenizer.source == TG_TOKENIZER_USE_HF)
        return tg_fail(TG_ERR_ARG, "--vocab sets the size of a BPE trained on the corpus; the vocabulary of --tokenizer "
                                   "hf:FILE is the file's. Drop --vocab");
    if (!o->invocation.resume && given(o, "--vocab") && o->spec.tokenizer.source == TG_TOKENIZER_USE_CHAR)
        return tg_fail(TG_ERR_ARG, "--vocab sets the BPE vocabulary; the char tokenizer's vocabulary is the corpus's "
                                   "distinct bytes. Add --tokenizer bpe or drop --vocab");
    return TG_OK;
}

/* --lr, or its default: a dpo run's is TG_DPO_DEFAULT_LR. */
static double peak_lr(const TgTrainOptions *o) {
    return o->spec.task == TG_TASK_DPO && !given(o, "--lr") ? TG_DPO_DEFAULT_LR : o->schedule.lr;
}

TgStatus tg_train_options_validate(const TgTrainOptions *o) {
    TG_TRY(tg_opt_check(&table, o, o->given));
    /* the options against each other */
    char oa[TG_PATH_CAP + 32], ob[TG_PATH_CAP + 32];
    if (o->invocation.resume && o->invocation.out_dir)
        return tg_fail(TG_ERR_ARG, "--resume continues in the resumed run's folder; drop --out");
    if (tg_train_task_chat(o->spec.task) && !o->invocation.resume) TG_TRY(check_sft(o));
    if (given(o, "--beta") && o->spec.task != TG_TASK_DPO && !o->invocation.resume)
        return tg_fail(TG_ERR_ARG, "--beta is DPO's (tapegrad dpo, or --task dpo): drop it");
    if (o->spec.chat_template != TG_CHAT_TEMPLATE_CHATML && o->spec.task != TG_TASK_SFT && !o->invocation.resume)
        return tg_fail(TG_ERR_ARG, "--chat-template %s renders the conversations of `tapegrad sft`; %s",
                       tg_chat_template_name(o->spec.chat_template),
                       o->spec.task == TG_TASK_DPO ? "dpo reads its pairs as ChatML"
                                                   : "a pretraining run has none: drop it");
    if (o->spec.task == TG_TASK_DPO && o->spec.keep_best.kind == TG_EVAL_METRIC_VAL_BPB)
        return tg_fail(TG_ERR_ARG,
                       "--keep-best val_bpb: a dpo run's val loss is DPO's, a loss over pairs with no bits per "
                       "byte; keep the best by val_loss or by a task's accuracy");
    if (o->spec.dataset && (given(o, "--data") || given(o, "--tokenizer") || given(o, "--vocab") ||
                            given(o, "--val-fraction") || given(o, "--special-tokens") || given(o, "--text-field")))
        return tg_fail(TG_ERR_ARG, "--dataset brings its own tokenizer and split: drop --data, --tokenizer, --vocab, "
                                   "--val-fraction, --special-tokens and --text-field (they are `tapegrad prepare`'s)");
    if (o->spec.special_tokens && *o->spec.special_tokens && o->spec.tokenizer.source != TG_TOKENIZER_FROM_PRESET &&
        o->spec.tokenizer.source != TG_TOKENIZER_USE_BPE)
        return tg_fail(TG_ERR_ARG, "--special-tokens reserves tokens in a BPE trained on the corpus: add --tokenizer bpe");
    if (given(o, "--init-fingerprint") && !o->spec.init_from && !o->invocation.resume)
        return tg_fail(TG_ERR_ARG, "--init-fingerprint pins the weights of --init-from: add --init-from, or drop it");
    if (o->invocation.resume && o->spec.init_from)
        return tg_fail(TG_ERR_ARG, "--init-from starts a new run from another's weights; --resume continues one: give one "
                                   "of them");
    TG_TRY(check_lora(o));
    if (o->invocation.stop_after >= 0 && o->invocation.stop_after > o->schedule.steps)
        return tg_fail(conflict(o, "--stop-after", "--steps"), "--stop-after %lld%s is past --steps %lld%s",
                       (long long)o->invocation.stop_after, origin(o, "--stop-after", oa, sizeof oa),
                       (long long)o->schedule.steps, origin(o, "--steps", ob, sizeof ob));
    double lr = peak_lr(o);
    if (o->schedule.min_lr > lr)
        return tg_fail(conflict(o, "--min-lr", "--lr"), "--min-lr %g%s is above --lr %g%s", o->schedule.min_lr,
                       origin(o, "--min-lr", oa, sizeof oa), lr, origin(o, "--lr", ob, sizeof ob));
    TG_TRY(check_evaluations(o));
    /* what a resume reads back: a value its file cannot hold is refused now, not lost then */
    TG_TRY(tg_opt_check_storable(&table, o, TG_TRAIN_OPT_IDENTITY, TG_RUN_IDENTITY_FILE));
    TG_TRY(tg_opt_check_storable(&table, o, TG_TRAIN_OPT_SAVED, TG_TRAIN_OPTIONS_FILE));
    return check_vocab(o);
}

TgStatus tg_run_spec_lora(const TgRunSpec *spec, TgLoraConfig *cfg) {
    memset(cfg, 0, sizeof *cfg); /* the token rows come with the tokenizer (run/run_lora.c) */
    cfg->rank = spec->lora_rank;
    cfg->alpha = spec->lora_alpha > 0 ? spec->lora_alpha : 2.0 * (double)spec->lora_rank;
    TG_TRY(tg_lora_targets_parse(spec->lora_targets ? spec->lora_targets : TG_TRAIN_DEFAULT_LORA_TARGETS,
                                 &cfg->targets));
    return tg_lora_config_validate(cfg, NULL);
}

TgStatus tg_run_spec_resolve_lora(TgRunSpec *spec, char *targets, size_t cap) {
    if (spec->lora_rank <= 0) return TG_OK;
    TgLoraConfig cfg;
    TG_TRY(tg_run_spec_lora(spec, &cfg));
    spec->lora_alpha = cfg.alpha;
    tg_lora_targets_format(cfg.targets, targets, cap);
    spec->lora_targets = targets;
    if (!spec->lora_tokens) spec->lora_tokens = TG_TRAIN_DEFAULT_LORA_TOKENS;
    return TG_OK;
}

void tg_train_options_derive(TgTrainOptions *o) {
    if (!given(o, "--ffn-hidden-rule")) o->spec.ffn_hidden_rule = tg_model_preset_hidden_rule(o->spec.preset);
    if (o->schedule.warmup < 0) o->schedule.warmup = o->schedule.steps / 20;
    o->schedule.lr = peak_lr(o);
    if (o->schedule.min_lr < 0) o->schedule.min_lr = o->schedule.lr / 10;
    if (o->spec.task == TG_TASK_DPO && !(o->spec.dpo_beta > 0)) o->spec.dpo_beta = TG_DPO_DEFAULT_BETA;
}

TgStatus tg_train_options_request(TgTrainOptions *o, TgTrainRequest *req) {
    TG_TRY(tg_train_options_validate(o));
    tg_train_options_derive(o);
    *req = (TgTrainRequest){&o->spec, &o->schedule, &o->invocation, o->given, ""};
    tg_train_options_origin(o, "eval_tasks", req->eval_tasks_origin, sizeof req->eval_tasks_origin);
    return TG_OK;
}

/* Options holding one concern given, the others at their defaults: what the table reads and writes. */
static TgTrainOptions options_of(const TgRunSpec *spec, const TgTrainSchedule *schedule) {
    TgTrainOptions o;
    tg_train_options_defaults(&o);
    if (spec) o.spec = *spec;
    if (schedule) o.schedule = *schedule;
    return o;
}

TgStatus tg_run_spec_write(const char *path, const TgRunSpec *spec) {
    TgTrainOptions o = options_of(spec, NULL);
    return tg_opt_write(&table, &o, TG_TRAIN_OPT_IDENTITY, path);
}

TgStatus tg_run_spec_read(const char *path, TgRunSpec *spec, TgOptStrings *strings) {
    TgTrainOptions o = options_of(NULL, NULL);
    o.spec.seed = -1, o.spec.tokenizer.source = TG_TOKENIZER_FROM_PRESET; /* the file must say both */
    TgStatus s = tg_opt_read(&table, &o, TG_TRAIN_OPT_IDENTITY, 0, path, NULL, strings);
    *spec = o.spec;
    return s;
}

/* The first setting given now (`given`) of those `compared` picks whose value in `now` is not the
 * one in `stored`: its row (-1: none), its two values as text in value and was (cap each). */
static int first_difference(TgOptSet given, bool (*compared)(const TgOptSpec *), const TgTrainOptions *now,
                            const TgTrainOptions *stored, char *value, char *was, size_t cap) {
    for (int i = 0; i < table.count; i++) {
        if (!(given & TG_OPT_BIT(i)) || !compared(&table.specs[i]) || tg_opt_equal(&table, i, now, stored)) continue;
        tg_opt_format(&table, i, now, value, cap);
        tg_opt_format(&table, i, stored, was, cap);
        return i;
    }
    return -1;
}

static bool identity_or_shape(const TgOptSpec *spec) {
    return (spec->group & (TG_TRAIN_OPT_IDENTITY | TG_TRAIN_OPT_SHAPE)) != 0;
}

/* What a run started from a base keeps: its shape (seq_len aside), preset, tokenizer and FFN. */
static bool kept_from_base(const TgOptSpec *spec) {
    const char *setting = tg_opt_setting(spec);
    if (strcmp(setting, "seq_len") == 0) return false;
    return (spec->group & TG_TRAIN_OPT_SHAPE) || strcmp(setting, "preset") == 0 || strcmp(setting, "tokenizer") == 0 ||
           strcmp(setting, "ffn") == 0 || strcmp(setting, "ffn_hidden_rule") == 0;
}

TgStatus tg_run_spec_check_resumed(const TgRunSpec *now_spec, TgOptSet given, const TgRunSpec *stored_spec) {
    TgTrainOptions now = options_of(now_spec, NULL), stored = options_of(stored_spec, NULL);
    char now_targets[64], stored_targets[64], value[2048], was[2048];
    if (!(given & TG_OPT_BIT(tg_opt_find_setting(&table, "lora_rank")))) now.spec.lora_rank = stored.spec.lora_rank;
    TG_TRY(tg_run_spec_resolve_lora(&now.spec, now_targets, sizeof now_targets));
    TG_TRY(tg_run_spec_resolve_lora(&stored.spec, stored_targets, sizeof stored_targets));
    int i = first_difference(given, identity_or_shape, &now, &stored, value, was, sizeof value);
    if (i < 0) return TG_OK;
    if (!was[0]) snprintf(was, sizeof was, "(none)");
    return tg_fail(TG_ERR_ARG,
                   "%s %s differs from the resumed run's %s; drop the flag or start a new run with another `out_dir`",
                   table.specs[i].flag, value, was);
}

TgStatus tg_run_spec_check_base(const TgRunSpec *now_spec, TgOptSet given, const TgRunSpec *base,
                                const TgModelConfig *base_cfg, const char *name) {
    TgTrainOptions now = options_of(now_spec, NULL), stored = now;
    stored.spec.model = *base_cfg;
    stored.spec.ffn = base_cfg->ffn;
    stored.spec.preset = base->preset, stored.spec.tokenizer = base->tokenizer;
    stored.spec.ffn_hidden_rule = base->ffn_hidden_rule;
    char value[2048], was[2048];
    int i = first_difference(given, kept_from_base, &now, &stored, value, was, sizeof value);
    if (i < 0) return TG_OK;
    return tg_fail(TG_ERR_ARG,
                   "%s %s differs from the %s of `init_from` %s: a run started from it keeps the base model's shape "
                   "and tokenizer; drop %s",
                   table.specs[i].flag, value, was, name, table.specs[i].flag);
}

TgStatus tg_train_schedule_save(const char *dir, const TgTrainSchedule *schedule) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_TRAIN_OPTIONS_FILE));
    TgTrainOptions o = options_of(NULL, schedule);
    return tg_opt_write(&table, &o, TG_TRAIN_OPT_SAVED, path);
}

TgStatus tg_train_options_restore(const char *resume, TgTrainOptions *o, TgTrainOptions *saved, TgOptStrings *strings) {
    /* the run folder: RESUME itself, or the folder of a checkpoint file */
    char dir[TG_PATH_CAP], path[TG_PATH_CAP];
    TG_TRY(tg_run_folder_locate(resume, dir, sizeof dir));
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_TRAIN_OPTIONS_FILE));
    if (saved) *saved = *o;
    if (access(path, F_OK) != 0) return TG_OK; /* a run from before the file existed */
    TgOptFileRead from;
    TgStatus s = tg_opt_read(&table, o, TG_TRAIN_OPT_SAVED, o->given, path, &from, strings);
    if (s == TG_OK && saved) s = tg_opt_read(&table, saved, TG_TRAIN_OPT_SAVED, 0, path, NULL, strings);
    if (s != TG_OK)
        return tg_fail(s == TG_ERR_IO ? s : TG_ERR_FORMAT, "%s; fix or delete the file and give the flags",
                       tg_error_message());
    o->given |= from.read;
    /* the messages of tg_train_options_validate name the file's lines */
    o->options_file = tg_opt_strings_keep(strings, path);
    o->from_file = from;
    return TG_OK;
}
