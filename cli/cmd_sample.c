/* `tapegrad sample`: text from a trained run, with the KV cache. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "tapegrad/engine.h"
#include "support/utf8.h"
#include "tapegrad/sample.h"
#include "run/memory_plan.h"
#include "run/run.h"

typedef struct {
    const char *run, *prompt;
    int64_t tokens, seed;
    double temperature, top_p, repetition_penalty, frequency_penalty, presence_penalty;
    int top_k, threads;
} SampleFlags;

#define S SampleFlags
static const TgOptSpec specs[] = {
    TG_FLAG_RUN(S, run, "run folder (its latest checkpoint) or a checkpoint file", 0, "required"),
    TG_OPT(S, prompt, "--prompt", TG_OPT_STRING, "text to continue", TG_OPT_ANY, NULL, 0, "a newline"),
    TG_OPT(S, tokens, "--tokens", TG_OPT_INT64, "tokens to generate", ((TgOptRange){0, TG_TRAIN_MAX_COUNT, true, false}), NULL, 0, NULL),
    TG_FLAG_TEMPERATURE(S, temperature, 0),
    TG_FLAG_TOP_K(S, top_k, 0),
    TG_FLAG_TOP_P(S, top_p, 0),
    TG_FLAG_REPETITION_PENALTY(S, repetition_penalty, 0),
    TG_FLAG_FREQUENCY_PENALTY(S, frequency_penalty, 0),
    TG_FLAG_PRESENCE_PENALTY(S, presence_penalty, 0),
    TG_FLAG_SEED(S, seed, "sampling seed", 0, NULL),
    TG_FLAG_THREADS(S, threads, "threads", 0, NULL),
};
#undef S
static const TgOptTable table = {"sample", "--run DIR [flags]", specs, (int)(sizeof specs / sizeof specs[0]), 0};


static int sample_main(int argc, char **argv) {
    const TgSampleOptions sampling = tg_sample_defaults();
    const SampleFlags defaults = {.prompt = TG_RUN_SAMPLE_PROMPT, .tokens = 300, .seed = 1, .temperature = sampling.temperature,
                                  .top_k = sampling.top_k, .top_p = 1.0, .repetition_penalty = 1.0,
                                  .threads = TG_TRAIN_DEFAULT_THREADS};
    SampleFlags o = defaults;
    int rc = cli_parse(&table, &o, &defaults, NULL, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!o.run) return cli_usage_error("sample", "--run DIR is required (a folder written by `tapegrad train`)");
    TgRun run;
    TgStatus s = tg_run_open_existing(o.run, &run);
    if (s == TG_OK) s = tg_sampling_memory_check(&run.model.cfg, run.last_checkpoint, o.tokens, o.threads);
    if (s == TG_OK) {
        TgEngine engine;
        tg_engine_open(&engine, o.threads, 16u << 20);
        char *text = NULL;
        size_t len = 0;
        TgSampleOptions so = tg_sample_defaults();
        so.temperature = o.temperature, so.top_k = o.top_k, so.top_p = o.top_p, so.repetition_penalty = o.repetition_penalty;
        so.frequency_penalty = o.frequency_penalty, so.presence_penalty = o.presence_penalty;
        s = tg_run_sample(&run, &engine.tape, o.prompt, o.tokens, &so, (uint64_t)o.seed, &text, &len);
        if (s == TG_OK) {
            /* the prompt as given, then the continuation */
            fputs(o.prompt, stdout);
            char *shown = tg_malloc(3 * len + 1); /* a character the draw cut shows as U+FFFD */
            fwrite(shown, 1, tg_utf8_mark_invalid(text, len, shown), stdout);
            free(shown);
            putchar('\n');
            s = cli_stdout_check();
        } else if (s == TG_ERR_NUMERIC) {
            tg_fail_context(s, "%s", run.last_checkpoint); /* the model, not the prompt */
        }
        free(text);
        tg_engine_close(&engine);
    }
    tg_run_close(&run);
    return cli_exit("sample", s);
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_sample = {"sample", "generate text from a trained run (KV-cache decoding)",
                               sample_main, option_tables};
