/* The flags several subcommands share, each described once: its name, type, range and choices.
 * A subcommand's table (run/train_options.c, cli/study/compare_ffn.c, cli/cmd_*.c) takes the
 * flag from here with its own help, group and default text, so `--steps` cannot accept in
 * compare-ffn what `train` refuses. tests/test_options.c walks every subcommand's table and
 * fails when a flag of one name has two types, ranges or choices.
 *
 *   TG_FLAG_BATCH(Struct, field, "help", group, default_text)   and so on for each flag below.
 *
 * The ranges are what the program can act on: counts a flag may set keep the token buffers
 * (counts x batch x seq) far inside int64 and size_t, steps stay within what a checkpoint holds
 * (TG_CHECKPOINT_MAX_STEP), shapes within what tapegrad/model.h builds. Whether a value fits this
 * machine's memory is checked where it is used (run/memory_plan.h), against the model. */
#ifndef TAPEGRAD_RUN_SHARED_FLAGS_H
#define TAPEGRAD_RUN_SHARED_FLAGS_H

#include "support/options.h"
#include "tapegrad/limits.h"
#include "tapegrad/model.h"
#include "checkpoint/checkpoint.h"

/* Counts a flag or train_options.txt may set: batch, accumulation, eval and probe batches,
 * sampled tokens. */
enum { TG_TRAIN_MAX_COUNT = 1 << 20 };

#define TG_FLAG_RANGE_COUNT ((TgOptRange){0, TG_TRAIN_MAX_COUNT, true, false})                 /* [1, 2^20] */
#define TG_FLAG_RANGE_STEPS ((TgOptRange){0, (double)TG_CHECKPOINT_MAX_STEP, true, false})     /* [1, 2^53] */
#define TG_FLAG_RANGE_STEP_COUNT ((TgOptRange){0, (double)TG_CHECKPOINT_MAX_STEP, false, false}) /* [0, 2^53] */
#define TG_FLAG_RANGE_THREADS TG_OPT_BETWEEN(1, 256)
#define TG_FLAG_RANGE_SEQ TG_OPT_BETWEEN(1, TG_MODEL_MAX_SEQ)
#define TG_FLAG_RANGE_VOCAB TG_OPT_BETWEEN(2, TG_MAX_VOCAB)
#define TG_FLAG_RANGE_SEED TG_OPT_NON_NEGATIVE /* [0, 2^63 - 1]: a seed of a list too (compare-ffn --seeds) */

/* a TgPreset */
#define TG_FLAG_PRESET(S, field, help, group, def) \
    TG_OPT(S, field, "--preset", TG_OPT_ENUM, help, TG_OPT_ANY, TG_PRESET_CHOICES, group, def)
/* a TgFfnKind */
#define TG_FLAG_FFN(S, field, help, group, def) TG_OPT(S, field, "--ffn", TG_OPT_ENUM, help, TG_OPT_ANY, TG_FFN_CHOICES, group, def)
/* --precision, a TgPrecision: the linear layers' products (tg_tape_set_precision) */
#define TG_FLAG_PRECISION_CHOICES TG_ENUM_CHOICES(TG_PRECISIONS)
#define TG_FLAG_PRECISION(S, field, help, group, def) \
    TG_OPT(S, field, "--precision", TG_OPT_ENUM, help, TG_OPT_ANY, TG_FLAG_PRECISION_CHOICES, group, def)
#define TG_FLAG_DATA(S, field, help, group, def) TG_OPT(S, field, "--data", TG_OPT_STRING, help, TG_OPT_ANY, NULL, group, def)
/* --tokenizer: char, bpe or hf:FILE into a TgTokenizerChoice (run/train_options.h) */
extern const TgOptCodec tg_tokenizer_choice_codec;
#define TG_FLAG_TOKENIZER(S, field, help, group, def) \
    TG_OPT_CODEC(S, field, "--tokenizer", help, NULL, group, def, &tg_tokenizer_choice_codec)
#define TG_FLAG_DATASET(S, field, help, group, def) TG_OPT(S, field, "--dataset", TG_OPT_STRING, help, TG_OPT_ANY, NULL, group, def)
#define TG_FLAG_SPECIAL_TOKENS(S, field, group)                                                                   \
    TG_OPT(S, field, "--special-tokens", TG_OPT_STRING,                                                           \
        "BPE: named special tokens, each one id, never split: chatml (<|im_start|>, <|im_end|>) or a comma list", \
        TG_OPT_ANY, NULL, group, "none but <|endoftext|>")
#define TG_FLAG_TEXT_FIELD(S, field, group)                                                                             \
    TG_OPT(S, field, "--text-field", TG_OPT_STRING, "JSONL sources: the member of each line's object holding its text", \
        TG_OPT_ANY, NULL, group, "text")
#define TG_FLAG_SEED(S, field, help, group, def) TG_OPT(S, field, "--seed", TG_OPT_INT64, help, TG_FLAG_RANGE_SEED, NULL, group, def)
#define TG_FLAG_THREADS(S, field, help, group, def) \
    TG_OPT(S, field, "--threads", TG_OPT_INT, help, TG_FLAG_RANGE_THREADS, NULL, group, def)
#define TG_FLAG_BATCH(S, field, help, group, def) TG_OPT(S, field, "--batch", TG_OPT_INT64, help, TG_FLAG_RANGE_COUNT, NULL, group, def)
#define TG_FLAG_SEQ(S, field, help, group, def) TG_OPT(S, field, "--seq", TG_OPT_INT64, help, TG_FLAG_RANGE_SEQ, NULL, group, def)
#define TG_FLAG_VOCAB(S, field, help, group, def) TG_OPT(S, field, "--vocab", TG_OPT_INT64, help, TG_FLAG_RANGE_VOCAB, NULL, group, def)
#define TG_FLAG_STEPS(S, field, help, group, def) TG_OPT(S, field, "--steps", TG_OPT_INT64, help, TG_FLAG_RANGE_STEPS, NULL, group, def)
#define TG_FLAG_WARMUP(S, field, help, group, def) \
    TG_OPT(S, field, "--warmup", TG_OPT_INT64, help, TG_FLAG_RANGE_STEP_COUNT, NULL, group, def)
#define TG_FLAG_EVAL_BATCHES(S, field, help, group, def) \
    TG_OPT(S, field, "--eval-batches", TG_OPT_INT64, help, TG_FLAG_RANGE_COUNT, NULL, group, def)
#define TG_FLAG_EVAL_EVERY(S, field, help, group, def) \
    TG_OPT(S, field, "--eval-every", TG_OPT_INT64, help, TG_FLAG_RANGE_STEP_COUNT, NULL, group, def)
#define TG_FLAG_LOG_GRADS(S, field, help, group, def) \
    TG_OPT(S, field, "--log-grads", TG_OPT_INT64, help, TG_FLAG_RANGE_STEP_COUNT, NULL, group, def)
#define TG_FLAG_OUT(S, field, help, group, def) TG_OPT(S, field, "--out", TG_OPT_STRING, help, TG_OPT_ANY, NULL, group, def)
#define TG_FLAG_RUN(S, field, help, group, def) TG_OPT(S, field, "--run", TG_OPT_STRING, help, TG_OPT_ANY, NULL, group, def)
#define TG_FLAG_JSON(S, field, help, group, def) TG_OPT(S, field, "--json", TG_OPT_BOOL, help, TG_OPT_ANY, NULL, group, def)
/* sampling (tapegrad/sample.h): sample, chat */
#define TG_FLAG_TEMPERATURE(S, field, group)                                                                               \
    TG_OPT(S, field, "--temperature", TG_OPT_DOUBLE, "0 = always the most likely token", TG_OPT_NON_NEGATIVE, NULL, group, \
        NULL)
#define TG_FLAG_TOP_K(S, field, group) \
    TG_OPT(S, field, "--top-k", TG_OPT_INT, "sample among the k most likely, 0 = all", TG_OPT_NON_NEGATIVE, NULL, group, NULL)
#define TG_FLAG_TOP_P(S, field, group)                                                                                  \
    TG_OPT(S, field, "--top-p", TG_OPT_DOUBLE, "sample among the fewest most likely tokens holding this probability, 1 = all", \
        ((TgOptRange){0, 1, true, false}), NULL, group, NULL)
#define TG_FLAG_FREQUENCY_PENALTY(S, field, group)                                                               \
    TG_OPT(S, field, "--frequency-penalty", TG_OPT_DOUBLE,                                                       \
        "OpenAI's: lower the logit of each token drawn so far by this times its count in the reply, 0 = none", \
        TG_OPT_BETWEEN(-2, 2), NULL, group, NULL)
#define TG_FLAG_PRESENCE_PENALTY(S, field, group)                                                                    \
    TG_OPT(S, field, "--presence-penalty", TG_OPT_DOUBLE, "OpenAI's: lower the logit of each token drawn so far by this, 0 = none", \
        TG_OPT_BETWEEN(-2, 2), NULL, group, NULL)
#define TG_FLAG_REPETITION_PENALTY(S, field, group)                                                          \
    TG_OPT(S, field, "--repetition-penalty", TG_OPT_DOUBLE,                                                  \
        "divide the logits (multiply the negative ones) of tokens already in the context by this, 1 = none", \
        ((TgOptRange){0, 10, true, false}), NULL, group, NULL)

#endif
