/* The flags several subcommands share, each described once: its name, type, range and choices.
 * A subcommand's table (train/train_options.c, inspect/compare_ffn.c, cli/cmd_*.c) takes the
 * flag from here with its own help, group and default text, so `--steps` cannot accept in
 * compare-ffn what `train` refuses. tests/test_options.c walks every subcommand's table and
 * fails when a flag of one name has two types, ranges or choices.
 *
 *   FLAG_BATCH(Struct, field, "help", group, default_text)   and so on for each flag below.
 *
 * The ranges are what the program can act on: counts a flag may set keep the token buffers
 * (counts x batch x seq) far inside int64 and size_t, steps stay within what a checkpoint holds
 * (CHECKPOINT_MAX_STEP), shapes within what tapegrad/model.h builds. Whether a value fits this
 * machine's memory is checked where it is used (train/memory_plan.h), against the model. */
#ifndef TAPEGRAD_TRAIN_SHARED_FLAGS_H
#define TAPEGRAD_TRAIN_SHARED_FLAGS_H

#include "lib/options.h"
#include "tapegrad/limits.h"
#include "tapegrad/model.h"
#include "checkpoint/checkpoint.h"

/* Counts a flag or train_options.txt may set: batch, accumulation, eval and probe batches,
 * sampled tokens. */
enum { TRAIN_MAX_COUNT = 1 << 20 };

#define FLAG_RANGE_COUNT ((OptRange){0, TRAIN_MAX_COUNT, true, false})                 /* [1, 2^20] */
#define FLAG_RANGE_STEPS ((OptRange){0, (double)CHECKPOINT_MAX_STEP, true, false})     /* [1, 2^53] */
#define FLAG_RANGE_STEP_COUNT ((OptRange){0, (double)CHECKPOINT_MAX_STEP, false, false}) /* [0, 2^53] */
#define FLAG_RANGE_THREADS OPT_BETWEEN(1, 256)
#define FLAG_RANGE_SEQ OPT_BETWEEN(1, TG_MODEL_MAX_SEQ)
#define FLAG_RANGE_VOCAB OPT_BETWEEN(2, TG_MAX_VOCAB)
#define FLAG_RANGE_SEED OPT_NON_NEGATIVE /* [0, 2^63 - 1]: a seed of a list too (compare-ffn --seeds) */

#define FLAG_PRESET(S, field, help, group, def) \
    OPT(S, field, "--preset", OPT_STRING, help, OPT_ANY, TG_PRESET_CHOICES, group, def)
#define FLAG_FFN(S, field, help, group, def) OPT(S, field, "--ffn", OPT_STRING, help, OPT_ANY, TG_FFN_CHOICES, group, def)
/* --precision: the linear layers' products (tg_tape_set_precision) */
#define FLAG_PRECISION_CHOICES "fp32|bf16"
#define FLAG_PRECISION(S, field, help, group, def) \
    OPT(S, field, "--precision", OPT_STRING, help, OPT_ANY, FLAG_PRECISION_CHOICES, group, def)
#define FLAG_DATA(S, field, help, group, def) OPT(S, field, "--data", OPT_STRING, help, OPT_ANY, NULL, group, def)
/* --tokenizer: char, bpe or hf:FILE (defined in train/train_options.c) */
TgStatus train_check_tokenizer(const OptSpec *spec, const void *field);
#define FLAG_TOKENIZER(S, field, help, group, def) \
    OPT_CHECKED(S, field, "--tokenizer", OPT_STRING, help, OPT_ANY, NULL, group, def, train_check_tokenizer)
#define FLAG_DATASET(S, field, help, group, def) OPT(S, field, "--dataset", OPT_STRING, help, OPT_ANY, NULL, group, def)
#define FLAG_SPECIAL_TOKENS(S, field, group)                                                                     \
    OPT(S, field, "--special-tokens", OPT_STRING,                                                               \
        "BPE: named special tokens, each one id, never split: chatml (<|im_start|>, <|im_end|>) or a comma list", \
        OPT_ANY, NULL, group, "none but <|endoftext|>")
#define FLAG_TEXT_FIELD(S, field, group)                                                                         \
    OPT(S, field, "--text-field", OPT_STRING, "JSONL sources: the member of each line's object holding its text", \
        OPT_ANY, NULL, group, "text")
#define FLAG_SEED(S, field, help, group, def) OPT(S, field, "--seed", OPT_INT64, help, FLAG_RANGE_SEED, NULL, group, def)
#define FLAG_THREADS(S, field, help, group, def) \
    OPT(S, field, "--threads", OPT_INT, help, FLAG_RANGE_THREADS, NULL, group, def)
#define FLAG_BATCH(S, field, help, group, def) OPT(S, field, "--batch", OPT_INT64, help, FLAG_RANGE_COUNT, NULL, group, def)
#define FLAG_SEQ(S, field, help, group, def) OPT(S, field, "--seq", OPT_INT64, help, FLAG_RANGE_SEQ, NULL, group, def)
#define FLAG_VOCAB(S, field, help, group, def) OPT(S, field, "--vocab", OPT_INT64, help, FLAG_RANGE_VOCAB, NULL, group, def)
#define FLAG_STEPS(S, field, help, group, def) OPT(S, field, "--steps", OPT_INT64, help, FLAG_RANGE_STEPS, NULL, group, def)
#define FLAG_WARMUP(S, field, help, group, def) \
    OPT(S, field, "--warmup", OPT_INT64, help, FLAG_RANGE_STEP_COUNT, NULL, group, def)
#define FLAG_EVAL_BATCHES(S, field, help, group, def) \
    OPT(S, field, "--eval-batches", OPT_INT64, help, FLAG_RANGE_COUNT, NULL, group, def)
#define FLAG_EVAL_EVERY(S, field, help, group, def) \
    OPT(S, field, "--eval-every", OPT_INT64, help, FLAG_RANGE_STEP_COUNT, NULL, group, def)
#define FLAG_LOG_GRADS(S, field, help, group, def) \
    OPT(S, field, "--log-grads", OPT_INT64, help, FLAG_RANGE_STEP_COUNT, NULL, group, def)
#define FLAG_OUT(S, field, help, group, def) OPT(S, field, "--out", OPT_STRING, help, OPT_ANY, NULL, group, def)
#define FLAG_RUN(S, field, help, group, def) OPT(S, field, "--run", OPT_STRING, help, OPT_ANY, NULL, group, def)
#define FLAG_JSON(S, field, help, group, def) OPT(S, field, "--json", OPT_BOOL, help, OPT_ANY, NULL, group, def)
/* sampling (tapegrad/sample.h): sample, chat */
#define FLAG_TEMPERATURE(S, field, group)                                                                             \
    OPT(S, field, "--temperature", OPT_DOUBLE, "0 = always the most likely token", OPT_NON_NEGATIVE, NULL, group, \
        NULL)
#define FLAG_TOP_K(S, field, group) \
    OPT(S, field, "--top-k", OPT_INT, "sample among the k most likely, 0 = all", OPT_NON_NEGATIVE, NULL, group, NULL)
#define FLAG_TOP_P(S, field, group)                                                                                  \
    OPT(S, field, "--top-p", OPT_DOUBLE, "sample among the fewest most likely tokens holding this probability, 1 = all", \
        ((OptRange){0, 1, true, false}), NULL, group, NULL)
#define FLAG_REPETITION_PENALTY(S, field, group)                                                               \
    OPT(S, field, "--repetition-penalty", OPT_DOUBLE,                                                         \
        "divide the logits (multiply the negative ones) of tokens already in the context by this, 1 = none", \
        ((OptRange){0, 10, true, false}), NULL, group, NULL)

#endif
