/* `tapegrad train`, `tapegrad sample`, `tapegrad eval`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../data/corpus.h"
#include "../lib/engine.h"
#include "cli.h"
#include "run.h"
#include "trainer.h"

/* On --resume, the flags saved by the run (TRAIN_OPTIONS_FILE) fill in every flag not given now. */
static int apply_saved_options(const char *resume, Flag *flags, int n_flags) {
    char dir[4096], path[4200];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", resume);
    if (stat(resume, &st) == 0 && !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    snprintf(path, sizeof path, "%s/%s", dir, TRAIN_OPTIONS_FILE);
    FILE *f = fopen(path, "r");
    if (!f) return 0; /* a run from before the file existed, or not a run: the resume says which */
    enum { MAX_SAVED = 64 };
    char lines[MAX_SAVED][256];
    char *args[2 * MAX_SAVED + 1];
    int n_args = 0, n_lines = 0;
    args[n_args++] = "train";
    while (n_lines < MAX_SAVED && fgets(lines[n_lines], sizeof lines[n_lines], f)) {
        char *line = lines[n_lines++];
        line[strcspn(line, "\r\n")] = '\0';
        char *value = strchr(line, ' ');
        if (!value) continue;
        *value++ = '\0';
        const Flag *flag = flags_find(flags, n_flags, line);
        if (!flag) continue;
        if (flag->seen) {
            /* given again: it wins, and a changed value is said, so nobody is surprised */
            bool differs = flag->type == FLAG_DOUBLE ? strtod(value, NULL) != *(double *)flag->target
                         : flag->type == FLAG_INT64  ? strtoll(value, NULL, 10) != *(int64_t *)flag->target
                         : flag->type == FLAG_INT    ? strtol(value, NULL, 10) != *(int *)flag->target
                                                     : false;
            char shown[64];
            if (flag->type == FLAG_DOUBLE) snprintf(shown, sizeof shown, "%g", strtod(value, NULL));
            else snprintf(shown, sizeof shown, "%s", value);
            if (differs)
                printf("note: %s applies from the resumed step on, instead of the run's %s%s\n", line, shown,
                       strcmp(line, "--batch") == 0 || strcmp(line, "--threads") == 0 || strcmp(line, "--accum") == 0
                           ? " (the run is no longer bitwise the one it would have been)" : "");
            continue;
        }
        args[n_args++] = line;
        args[n_args++] = value;
    }
    fclose(f);
    bool help;
    int rc = flags_parse("train", NULL, flags, n_flags, n_args, args, NULL, 0, NULL, &help);
    if (rc) fprintf(stderr, "tapegrad train: %s holds a bad value (above); fix or delete it and give the flags\n", path);
    return rc;
}

static int run_train(int argc, char **argv) {
    TrainOptions o;
    train_options_defaults(&o);
    const char *ffn = NULL;
    int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, hidden = 0, seq = 0, vocab = 0;
    double theta = 0;
    Flag flags[] = {
        {"--preset", FLAG_STRING, &o.preset, "tiny | small | minimind-26m (default small)", false},
        {"--dim", FLAG_INT64, &dim, "model width", false},
        {"--layers", FLAG_INT64, &layers, "transformer blocks", false},
        {"--heads", FLAG_INT64, &heads, "query heads (must divide --dim)", false},
        {"--kv-heads", FLAG_INT64, &kv_heads, "key/value heads (must divide --heads)", false},
        {"--hidden", FLAG_INT64, &hidden, "FFN hidden size (default: SwiGLU 64*ceil(8*dim/3/64), ReLU 4*dim)", false},
        {"--seq", FLAG_INT64, &seq, "context length in tokens", false},
        {"--vocab", FLAG_INT64, &vocab, "BPE vocabulary size (256 < V; default 2048, minimind-26m 6400)", false},
        {"--ffn", FLAG_STRING, &ffn, "swiglu (default) | relu", false},
        {"--rope-theta", FLAG_DOUBLE, &theta, "RoPE base (default 1e6)", false},
        {"--data", FLAG_STRING, &o.data_path, "text file or folder of text files (default " CORPUS_DEFAULT_PATH ")", false},
        {"--tokenizer", FLAG_STRING, &o.tokenizer, "char (default) | bpe (default for minimind-26m)", false},
        {"--val-fraction", FLAG_DOUBLE, &o.val_fraction, "last fraction of the tokens kept for validation (0.1)", false},
        {"--steps", FLAG_INT64, &o.steps, "optimizer steps (1500); the LR schedule spans them", false},
        {"--time-budget", FLAG_DOUBLE, &o.time_budget_min, "stop after this many minutes even if steps remain", false},
        {"--batch", FLAG_INT64, &o.batch, "sequences per micro-batch (16)", false},
        {"--accum", FLAG_INT64, &o.accum, "micro-batches per step: gradient accumulation (1)", false},
        {"--lr", FLAG_DOUBLE, &o.lr, "peak learning rate (3e-3)", false},
        {"--min-lr", FLAG_DOUBLE, &o.min_lr, "final learning rate of the cosine (lr/10)", false},
        {"--warmup", FLAG_INT64, &o.warmup, "linear warmup steps (5% of --steps)", false},
        {"--weight-decay", FLAG_DOUBLE, &o.adamw.weight_decay, "AdamW decoupled decay (0.1); never on norm weights", false},
        {"--beta1", FLAG_DOUBLE, &o.adamw.beta1, "AdamW beta1 (0.9)", false},
        {"--beta2", FLAG_DOUBLE, &o.adamw.beta2, "AdamW beta2 (0.95)", false},
        {"--clip", FLAG_DOUBLE, &o.clip, "global gradient-norm clip, 0 for none (1.0)", false},
        {"--eval-every", FLAG_INT64, &o.eval_every, "val loss every N steps (100), 0 for only at the end", false},
        {"--eval-batches", FLAG_INT64, &o.eval_batches, "fixed val batches per evaluation (8)", false},
        {"--log-every", FLAG_INT64, &o.log_every, "log line every N steps (10)", false},
        {"--log-grads", FLAG_INT64, &o.log_grads, "every N steps, per-tensor gradient and FFN activation statistics to grads.jsonl (off)", false},
        {"--ckpt-every", FLAG_INT64, &o.ckpt_every, "checkpoint every N steps (200), 0 for only at the end", false},
        {"--keep", FLAG_INT, &o.keep, "checkpoints kept, newest first (3)", false},
        {"--sample-tokens", FLAG_INT64, &o.sample_tokens, "tokens sampled at the end (300), 0 for none", false},
        {"--seed", FLAG_INT64, &o.seed, "seed of init and data order (1337)", false},
        {"--threads", FLAG_INT, &o.threads, "threads for the ops and OpenBLAS (2)", false},
        {"--out", FLAG_STRING, &o.out_dir, "run folder (default checkpoints/<preset>-<tokenizer>-<time>)", false},
        {"--resume", FLAG_STRING, &o.resume, "continue the run in this folder (or from this checkpoint file), bitwise as if it never stopped", false},
        {"--stop-after", FLAG_INT64, &o.stop_after, "stop after step N, save and exit 0; the LR schedule still spans --steps, so --resume continues exactly", false},
        {"--init-from", FLAG_STRING, &o.init_from, "start a new run from these safetensors weights (from `tapegrad ckpt export`)", false},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);
    bool help;
    int rc = flags_parse("train", "[flags]   (no flags: the small preset on the default corpus)", flags, n_flags,
                         argc, argv, NULL, 0, NULL, &help);
    if (rc || help) return rc;
    o.model.dim = dim, o.model.n_layers = layers, o.model.n_heads = heads, o.model.n_kv_heads = kv_heads;
    o.model.hidden = hidden, o.model.seq_len = seq, o.model.vocab = vocab, o.model.rope_theta = theta;
    for (int i = 0; i < n_flags; i++) {
        const Flag *f = &flags[i];
        if (f->seen && f->type == FLAG_INT64 && *(int64_t *)f->target <= 0 && strcmp(f->name, "--seed") != 0 &&
            strcmp(f->name, "--eval-every") != 0 && strcmp(f->name, "--ckpt-every") != 0 &&
            strcmp(f->name, "--sample-tokens") != 0 && strcmp(f->name, "--warmup") != 0 &&
            strcmp(f->name, "--stop-after") != 0) {
            fprintf(stderr, "tapegrad train: %s must be positive, got %lld\n", f->name, (long long)*(int64_t *)f->target);
            return 2;
        }
    }
    if (flags_find(flags, n_flags, "--stop-after")->seen && o.stop_after < 0) {
        fprintf(stderr, "tapegrad train: --stop-after must not be negative, got %lld\n", (long long)o.stop_after);
        return 2;
    }
    if (flags_find(flags, n_flags, "--seed")->seen && o.seed < 0) {
        fprintf(stderr, "tapegrad train: --seed must not be negative\n");
        return 2;
    }
    if (ffn) {
        if (strcmp(ffn, "swiglu") == 0) o.ffn = 0;
        else if (strcmp(ffn, "relu") == 0) o.ffn = 1;
        else {
            fprintf(stderr, "tapegrad train: --ffn must be swiglu or relu, got '%s'\n", ffn);
            return 2;
        }
    }
    if (flags_find(flags, n_flags, "--rope-theta")->seen && !(theta > 1.0)) {
        fprintf(stderr, "tapegrad train: --rope-theta must be above 1, got %g\n", theta);
        return 2;
    }
    if (flags_find(flags, n_flags, "--val-fraction")->seen && !(o.val_fraction > 0 && o.val_fraction < 1)) {
        fprintf(stderr, "tapegrad train: --val-fraction must be in (0, 1), got %g\n", o.val_fraction);
        return 2;
    }
    if (o.resume) {
        rc = apply_saved_options(o.resume, flags, n_flags);
        if (rc) return rc;
    }
    return train_run(&o);
}

const Subcommand cmd_train = {"train", "train a model (no flags: the small preset on the default corpus)", run_train};

static int run_sample(int argc, char **argv) {
    const char *dir = NULL, *prompt = "\n";
    int64_t n = 300, seed = 1;
    double temperature = 0.8;
    int top_k = 40, threads = 2;
    Flag flags[] = {
        {"--run", FLAG_STRING, &dir, "run folder (its latest checkpoint) or a checkpoint file", false},
        {"--prompt", FLAG_STRING, &prompt, "text to continue (default a newline)", false},
        {"--tokens", FLAG_INT64, &n, "tokens to generate (300)", false},
        {"--temperature", FLAG_DOUBLE, &temperature, "0 = always the most likely token (0.8)", false},
        {"--top-k", FLAG_INT, &top_k, "sample among the k most likely, 0 = all (40)", false},
        {"--seed", FLAG_INT64, &seed, "sampling seed (1)", false},
        {"--threads", FLAG_INT, &threads, "threads (2)", false},
    };
    bool help;
    int rc = flags_parse("sample", "--run DIR [flags]", flags, 7, argc, argv, NULL, 0, NULL, &help);
    if (rc || help) return rc;
    if (!dir) {
        fprintf(stderr, "tapegrad sample: --run DIR is required (a folder written by `tapegrad train`)\n");
        return 2;
    }
    if (n <= 0 || temperature < 0 || top_k < 0 || threads <= 0) {
        fprintf(stderr, "tapegrad sample: --tokens and --threads must be positive, --temperature and --top-k not negative\n");
        return 2;
    }
    Run run;
    if (run_open_existing(dir, &run) != TG_OK) {
        fprintf(stderr, "tapegrad sample: %s\n", tg_error_message());
        run_close(&run);
        return 1;
    }
    Engine engine;
    engine_open(&engine, threads, 16u << 20);
    tg_status s = run_print_sample(&run, &engine.tape, prompt, n, temperature, top_k, (uint64_t)seed);
    if (s == TG_OK) putchar('\n');
    else fprintf(stderr, "tapegrad sample: %s\n", tg_error_message());
    engine_close(&engine);
    run_close(&run);
    return s == TG_OK ? 0 : 1;
}

const Subcommand cmd_sample = {"sample", "generate text from a trained run (KV-cache decoding)", run_sample};

#include "../data/corpus.h"
#include "../data/prepare.h"
#include "../data/tokfile.h"

/* Mean loss over every non-overlapping window of `tokens`, in batches of up to 8 windows. */
static double loss_over_windows(Model *model, Tape *tape, const int32_t *tokens, int64_t n, int64_t *n_windows) {
    int64_t T = model->cfg.seq_len, windows = (n - 1) / T, max_batch = 8;
    int32_t *in = tg_malloc((size_t)(max_batch * T) * sizeof(int32_t));
    int32_t *tg = tg_malloc((size_t)(max_batch * T) * sizeof(int32_t));
    double total = 0.0;
    for (int64_t w = 0; w < windows; w += max_batch) {
        int64_t b = windows - w < max_batch ? windows - w : max_batch;
        for (int64_t i = 0; i < b; i++) {
            memcpy(in + i * T, tokens + (w + i) * T, (size_t)T * sizeof(int32_t));
            memcpy(tg + i * T, tokens + (w + i) * T + 1, (size_t)T * sizeof(int32_t));
        }
        total += evaluate_loss(model, tape, in, tg, 1, b, T) * (double)b;
    }
    free(in);
    free(tg);
    *n_windows = windows;
    return windows ? total / (double)windows : NAN;
}

static int run_eval(int argc, char **argv) {
    const char *dir = NULL, *data = NULL;
    int threads = 2;
    Flag flags[] = {
        {"--run", FLAG_STRING, &dir, "run folder (its latest checkpoint) or a checkpoint file", false},
        {"--data", FLAG_STRING, &data, "text file or folder to evaluate on (default: the run's val split)", false},
        {"--threads", FLAG_INT, &threads, "threads (2)", false},
    };
    bool help;
    int rc = flags_parse("eval", "--run DIR [--data PATH]", flags, 3, argc, argv, NULL, 0, NULL, &help);
    if (rc || help) return rc;
    if (!dir) {
        fprintf(stderr, "tapegrad eval: --run DIR is required (a folder written by `tapegrad train`)\n");
        return 2;
    }
    if (threads <= 0) {
        fprintf(stderr, "tapegrad eval: --threads must be positive\n");
        return 2;
    }
    Run run;
    int32_t *tokens = NULL;
    size_t n = 0;
    tg_status s = run_open_existing(dir, &run);
    if (s == TG_OK && data) {
        char *text = NULL;
        size_t len = 0;
        s = corpus_read(data, &text, &len);
        if (s == TG_OK) {
            tokens = tg_malloc((len + 1) * sizeof(int32_t));
            s = tokenizer_encode(&run.tok, text, len, tokens, len, &n);
            if (s != TG_OK) tg_fail_context(s, "%s cannot be encoded with the run's tokenizer", data);
        }
        free(text);
    } else if (s == TG_OK) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", run.dir, PREPARE_VAL_FILE);
        s = tokfile_read(path, &tokens, &n, &(uint32_t){0});
    }
    if (s == TG_OK && (int64_t)n < run.model.cfg.seq_len + 1)
        s = tg_fail(TG_ERR_ARG, "%s holds %zu tokens, fewer than one window of %lld; give more text",
                    data ? data : "the val split", n, (long long)run.model.cfg.seq_len + 1);
    if (s != TG_OK) {
        fprintf(stderr, "tapegrad eval: %s\n", tg_error_message());
        free(tokens);
        run_close(&run);
        return 1;
    }
    Engine engine;
    engine_open(&engine, threads, 16u << 20);
    int64_t windows = 0;
    double loss = loss_over_windows(&run.model, &engine.tape, tokens, (int64_t)n, &windows);
    printf("{\"val_loss\":%.9g,\"tokens\":%lld,\"windows\":%lld,\"step\":%lld,\"checkpoint\":\"%s\"}\n", loss,
           (long long)(windows * run.model.cfg.seq_len), (long long)windows, (long long)run.state.step,
           run.last_checkpoint);
    engine_close(&engine);
    free(tokens);
    run_close(&run);
    return 0;
}

const Subcommand cmd_eval = {"eval", "val loss of a trained run, as JSON", run_eval};
