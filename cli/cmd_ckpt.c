/* `tapegrad ckpt info FILE|DIR` and `tapegrad ckpt export FILE|DIR --safetensors OUT | --hf DIR | --gguf FILE`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/adapter.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_folder.h"
#include "cli/cli.h"
#include "data/chat_format.h"
#include "export/convert.h"
#include "export/export_gguf.h"
#include "export/export_hf.h"
#include "export/merge.h"
#include "run/output_check.h"
#include "run/run.h"
#include "support/path.h"

static void print_ckpt_usage(FILE *f) {
    fprintf(f, "usage: tapegrad ckpt info FILE|DIR                      what a checkpoint holds (and verify it)\n"
               "       tapegrad ckpt export FILE|DIR --safetensors OUT  its weights as safetensors, config.json beside\n"
               "       tapegrad ckpt export FILE|DIR --hf DIR           a Hugging Face Llama folder (weights, configs, tokenizer)\n"
               "       tapegrad ckpt export FILE|DIR --gguf FILE        a GGUF file for llama.cpp (--gguf-type f32|f16|q8_0)\n"
               "       tapegrad ckpt export RUN --gguf-adapter FILE [--gguf-base FILE]\n"
               "                                                    a LoRA run's adapters for llama.cpp, and the base they go on\n"
               "       tapegrad ckpt export RUN --peft DIR              a LoRA run's adapters for PEFT (with its base's --hf)\n"
               "       tapegrad ckpt merge RUN --out DIR                a LoRA run's adapters folded into its base: a new run\n");
}

static const char *shape_text(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && n < cap; d++) n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

static int by_name_and_kind(const void *a, const void *b) {
    const TgCheckpointTensorInfo *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->kind > y->kind) - (x->kind < y->kind);
}

/* One line per weight: its shape and the L2 norms of it and of its AdamW moments. */
static void print_tensor_norms(const TgCheckpointTensorInfo *tensors, int n) {
    printf("%-46s %-14s %12s %12s %12s\n", "name", "shape", "|weight|", "|AdamW m|", "|AdamW v|");
    /* the moments of each weight are looked up in a sorted copy: n can be ~10^5 records */
    TgCheckpointTensorInfo *sorted = tg_malloc((size_t)(n + 1) * sizeof *sorted);
    memcpy(sorted, tensors, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, by_name_and_kind);
    for (int i = 0; i < n; i++) {
        if (tensors[i].kind != TG_CHECKPOINT_KIND_WEIGHT) continue;
        double norms[3] = {tensors[i].l2_norm, NAN, NAN};
        for (int kind = TG_CHECKPOINT_KIND_ADAM_M; kind <= TG_CHECKPOINT_KIND_ADAM_V; kind++) {
            TgCheckpointTensorInfo key = {.kind = kind};
            snprintf(key.name, sizeof key.name, "%s", tensors[i].name);
            const TgCheckpointTensorInfo *hit = bsearch(&key, sorted, (size_t)n, sizeof key, by_name_and_kind);
            if (hit) norms[kind] = hit->l2_norm;
        }
        char shape[64];
        printf("%-46s %-14s %12.6g %12.6g %12.6g\n", tensors[i].name, shape_text(tensors[i].ndim, tensors[i].shape, shape, sizeof shape),
               norms[0], norms[1], norms[2]);
        if (ferror(stdout)) break; /* lost: the rest would be too */
    }
    free(sorted);
}

/* The checkpoint `ckpt info` and `ckpt export --safetensors` read: a checkpoint file anywhere (they
 * need nothing else), or a run folder's newest one; a folder that is no run is refused as every
 * command refuses it (tg_run_folder_locate). */
static TgStatus resolve_source(const char *given, char *path, size_t cap) {
    struct stat st;
    char dir[TG_PATH_CAP];
    if (stat(given, &st) != 0 || S_ISDIR(st.st_mode)) TG_TRY(tg_run_folder_locate(given, dir, sizeof dir));
    return tg_checkpoint_resolve(given, path, cap);
}

static const TgOptTable info_table = {"ckpt info", "FILE|DIR", NULL, 0, 1};

/* An adapter's LoRA settings and the base it was trained on. */
static void print_adapter(const TgCheckpointInfo *info, const char *path) {
    TgLoraConfig lora;
    uint64_t base;
    char targets[64];
    if (tg_adapter_tag_parse(info->tag, path, &lora, &base) != TG_OK) return;
    tg_lora_targets_format(lora.targets, targets, sizeof targets);
    printf("adapters     LoRA rank %lld, alpha %g on %s (tag '%s')\n", (long long)lora.rank, lora.alpha, targets,
           info->tag);
    if (lora.n_tokens > 0) printf("token rows   the embedding rows of %d tokens train beside them\n", lora.n_tokens);
    printf("base         weights fingerprint %016llx, tokenizer fingerprint %016llx\n", (unsigned long long)base,
           (unsigned long long)info->tokenizer_fingerprint);
}

/* The model's shape and the trainer's state. */
static void print_model_state(const TgCheckpointInfo *info) {
    const TgModelConfig *c = &info->cfg;
    const TgTrainerState *s = &info->state;
    printf("model        dim %lld, %lld layers, %lld heads, %lld kv heads%s, %s hidden %lld, vocab %lld, seq %lld, "
           "rope theta %g, norm eps %g\n",
           (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads, (long long)c->n_kv_heads,
           c->qk_norm ? " with QK-norm" : "", tg_ffn_kind_name(c->ffn), (long long)c->hidden, (long long)c->vocab,
           (long long)c->seq_len, c->rope_theta, c->norm_eps);
    printf("tokenizer    fingerprint %016llx\n", (unsigned long long)info->tokenizer_fingerprint);
    printf("step         %lld\n", (long long)s->step);
    printf("tokens seen  %lld\n", (long long)s->tokens_seen);
    if (isfinite(s->best_val_loss))
        printf("best val     %.6f\n", s->best_val_loss);
    else
        printf("best val     - (never evaluated)\n");
    printf("trained for  %.1f s; seed %llu; loader at batch %llu\n", s->elapsed_s, (unsigned long long)s->seed,
           (unsigned long long)s->loader.batches_drawn);
}

/* The elements of the weights, the records of AdamW m and v left out. */
static int64_t weight_count(const TgCheckpointTensorInfo *tensors, int n) {
    int64_t params = 0;
    for (int i = 0; i < n; i++)
        if (tensors[i].kind == TG_CHECKPOINT_KIND_WEIGHT) {
            int64_t numel = 1;
            for (int d = 0; d < tensors[i].ndim; d++) numel *= tensors[i].shape[d];
            params += numel;
        }
    return params;
}

static int run_info(int argc, char **argv) {
    const char *positional[1];
    int n_positional = 0;
    int rc = cli_parse(&info_table, NULL, NULL, NULL, argc, argv, positional, &n_positional);
    if (rc >= 0) return rc;
    if (n_positional != 1) return cli_usage_error("ckpt info", "give one checkpoint file or run folder");
    char path[TG_PATH_CAP];
    TgCheckpointInfo info;
    TgCheckpointTensorInfo *tensors = NULL;
    int n = 0;
    TgStatus status = resolve_source(positional[0], path, sizeof path);
    if (status == TG_OK) status = tg_checkpoint_inspect(path, &info, &tensors, &n);
    if (status != TG_OK) return cli_exit("ckpt info", status);
    printf("checkpoint   %s\n", path);
    printf("format       version %u%s; gzip stream verified (CRC32 and length)\n", info.version,
           info.flags & TG_CHECKPOINT_FLAG_SHUFFLED ? ", floats byte-shuffled into 4 planes" : "");
    if (info.flags & TG_CHECKPOINT_FLAG_ADAPTER) print_adapter(&info, path);
    if (info.tag[0] && !(info.flags & TG_CHECKPOINT_FLAG_ADAPTER)) {
        /* a program's own parameter set (tapegrad/param_checkpoint.h): a tag and a step, no model */
        printf("parameters   a program's own set, tagged '%s'\n", info.tag);
        printf("step         %lld\n", (long long)info.state.step);
    } else {
        print_model_state(&info);
    }
    printf("size         %lld bytes raw, %lld bytes compressed: ratio %.3f\n", (long long)info.raw_bytes,
           (long long)info.file_bytes, info.file_bytes > 0 ? (double)info.raw_bytes / (double)info.file_bytes : 0.0);
    printf("tensors      %d records: %lld weights, each with AdamW m and v\n\n", n,
           (long long)weight_count(tensors, n));
    print_tensor_norms(tensors, n);
    free(tensors);
    return cli_exit("ckpt info", cli_stdout_check());
}

typedef struct {
    const char *safetensors, *hf, *gguf, *gguf_type, *gguf_adapter, *gguf_base, *peft;
    bool force;
} ExportFlags;

static const TgOptSpec export_specs[] = {
    TG_OPT(ExportFlags, safetensors, "--safetensors", TG_OPT_STRING,
        "the .safetensors file to write (config.json goes beside it)", TG_OPT_ANY, NULL, 0, NULL),
    TG_OPT(ExportFlags, hf, "--hf", TG_OPT_STRING,
        "a Hugging Face model folder to write (LlamaForCausalLM: weights, config.json, tokenizer.json, ...)", TG_OPT_ANY,
        NULL, 0, NULL),
    TG_OPT(ExportFlags, gguf, "--gguf", TG_OPT_STRING, "a GGUF file to write (llama.cpp, ollama, LM Studio), tokenizer included",
        TG_OPT_ANY, NULL, 0, NULL),
    TG_OPT(ExportFlags, gguf_type, "--gguf-type", TG_OPT_STRING, "GGUF weight type", TG_OPT_ANY, TG_GGUF_WEIGHTS_CHOICES, 0, NULL),
    TG_OPT(ExportFlags, gguf_adapter, "--gguf-adapter", TG_OPT_STRING,
        "a LoRA run's adapters as a llama.cpp LoRA adapter GGUF, for its --gguf-base (or the --gguf export of its base)",
        TG_OPT_ANY, NULL, 0, NULL),
    TG_OPT(ExportFlags, gguf_base, "--gguf-base", TG_OPT_STRING,
        "a LoRA run's base as a GGUF file for its --gguf-adapter: the embedding rows the run trained (--lora-tokens) in "
        "place, and a fine-tuned run's chat template",
        TG_OPT_ANY, NULL, 0, NULL),
    TG_OPT(ExportFlags, peft, "--peft", TG_OPT_STRING,
        "a LoRA run's adapters as a PEFT adapter folder (adapter_model.safetensors, adapter_config.json)", TG_OPT_ANY, NULL,
        0, NULL),
    TG_OPT(ExportFlags, force, "--force", TG_OPT_BOOL,
        "replace an existing output file (or the model files of a --hf folder that holds others); a run's own files never",
        TG_OPT_ANY, NULL, 0, NULL),
};
static const TgOptTable export_table = {"ckpt export",
                                      "FILE|DIR --safetensors OUT | --hf DIR | --gguf FILE | --gguf-adapter FILE [--gguf-base FILE] | --peft DIR",
                                      export_specs,
                                      (int)(sizeof export_specs / sizeof export_specs[0]), 1};

/* Weights and config.json: needs no tokenizer, so it works on a checkpoint file alone. */
static int export_safetensors(const char *source, const char *out, bool force) {
    char path[TG_PATH_CAP], config[TG_PATH_CAP];
    TgModelConfig cfg;
    uint64_t fingerprint;
    TgOutputPlan *plan = tg_malloc(sizeof *plan);
    tg_output_plan_init(plan);
    TgStatus rs = resolve_source(source, path, sizeof path);
    if (rs == TG_OK) rs = tg_checkpoint_read_config(path, &cfg, &fingerprint);
    if (rs == TG_OK) {
        tg_output_plan_input(plan, path);
        rs = tg_model_export_safetensors_check(plan, out, &cfg, fingerprint, force);
    }
    free(plan);
    if (rs != TG_OK) return cli_exit("ckpt export", rs);
    TgModel model;
    tg_model_build(&model, &cfg);
    TgCheckpointInfo info;
    char note[TG_PATH_CAP + 64];
    TgStatus s = tg_checkpoint_load(path, &model, &info);
    if (s == TG_OK) {
        snprintf(note, sizeof note, "tapegrad checkpoint %s, step %lld", path, (long long)info.state.step);
        s = tg_model_export_safetensors(&model, out, note, fingerprint, config, sizeof config);
    }
    if (s == TG_OK) printf("wrote %s (%d tensors, %lld parameters, step %lld) and %s\n", out, model.params.count,
                (long long)tg_model_param_count(&model), (long long)info.state.step, config);
    tg_model_free(&model);
    return cli_exit("ckpt export", s);
}

/* What the export says of a chat model's template. */
static const char *template_note(TgChatTemplate t) {
    return t == TG_CHAT_TEMPLATE_MINIMIND3 ? "; a chat model: MiniMind-3's template (tools, thinking), " TG_CHAT_IM_END
                                             " ends a reply"
                                           : "; a chat model: the ChatML template, " TG_CHAT_IM_END " ends a reply";
}

/* A run fine-tuned on conversations exports as a chat model: the ChatML template, <|im_end|> as
 * eos. *sft says whether it was; *chat then holds its markers. */
static TgStatus chat_of(const TgRun *run, TgChatTokens *chat, bool *sft, TgChatTemplate *t) {
    TgTrainTask task = TG_TASK_PRETRAIN;
    TG_TRY(tg_run_task(run->dir, &task));
    TG_TRY(tg_run_chat_template(run->dir, t));
    *sft = tg_train_task_chat(task);
    return *sft ? tg_chat_tokens_find(&run->tok, run->dir, chat) : TG_OK;
}

/* A LoRA run's adapters (--gguf-adapter, --peft) and its base for llama.cpp (--gguf-base). */
static TgStatus export_adapter(const char *source, TgRun *run, const ExportFlags *o, TgGgufWeights weights) {
    const TgLora *lora = run->model.lora;
    if (!lora)
        return tg_fail(TG_ERR_ARG, "%s holds no LoRA adapters; --gguf-adapter, --gguf-base and --peft export those of a LoRA run",
                       source);
    if (o->gguf_adapter && !o->gguf_base && lora->cfg.n_tokens > 0)
        return tg_fail(TG_ERR_ARG,
                       "the run trains the embedding rows of %d tokens beside its adapters (--lora-tokens), which a llama.cpp "
                       "LoRA adapter cannot hold: export its base with them in the same command (add --gguf-base FILE), "
                       "or the merged model (ckpt merge, then --gguf)",
                       lora->cfg.n_tokens);
    if (o->gguf_base) {
        TgChatTokens chat;
        bool sft = false;
        TgChatTemplate t;
        TG_TRY(chat_of(run, &chat, &sft, &t));
        tg_lora_place_token_rows(&run->model); /* the adapters stay; the model's outputs are the same */
        TG_TRY(tg_model_export_gguf(&run->model, &run->tok, sft ? &chat : NULL, t, o->gguf_base, weights));
        printf("wrote %s (the base of the LoRA run, %lld parameters%s%s) for the adapter %s\n", o->gguf_base,
               (long long)tg_model_param_count(&run->model),
               lora->cfg.n_tokens ? ", with the embedding rows the run trained" : "", !sft ? "" : template_note(t),
               o->gguf_adapter ? o->gguf_adapter : "the run exports with --gguf-adapter");
    }
    if (o->peft || o->gguf_adapter) {
        const char *path = o->peft ? o->peft : o->gguf_adapter;
        TG_TRY(o->peft ? tg_model_export_peft(&run->model, o->peft)
                       : tg_model_export_gguf_adapter(&run->model, o->gguf_adapter, o->gguf_base != NULL));
        printf("wrote %s (LoRA rank %lld, alpha %g, %d tensors, step %lld) for the base %s\n", path, (long long)lora->cfg.rank,
               lora->cfg.alpha, lora->params.count, (long long)run->state.step,
               o->peft ? "exported with --hf" : o->gguf_base ? o->gguf_base : "exported with --gguf");
    }
    return TG_OK;
}

/* A Hugging Face folder or a GGUF file: the weights with the run's tokenizer. */
static int export_with_tokenizer(const char *source, const ExportFlags *o) {
    TgGgufWeights weights;
    TgStatus s = tg_gguf_weights_parse(o->gguf_type, &weights);
    TgOutputPlan *plan = tg_malloc(sizeof *plan);
    tg_output_plan_init(plan);
    char dir[TG_PATH_CAP];
    if (s == TG_OK) s = tg_run_folder_locate(source, dir, sizeof dir); /* before the outputs: they are checked against it */
    if (s == TG_OK && o->hf) s = tg_model_export_hf_check(plan, o->hf, o->force);
    if (s == TG_OK && o->gguf) s = tg_output_check(plan, "--gguf", o->gguf, o->force);
    if (s == TG_OK && o->gguf_adapter) s = tg_output_check(plan, "--gguf-adapter", o->gguf_adapter, o->force);
    if (s == TG_OK && o->gguf_base) s = tg_output_check(plan, "--gguf-base", o->gguf_base, o->force);
    if (s == TG_OK && o->peft) s = tg_model_export_peft_check(plan, o->peft, o->force);
    free(plan);
    if (s != TG_OK) return cli_exit("ckpt export", s);
    TgRun run;
    s = tg_run_open_existing(source, &run);
    if (s == TG_OK && (o->gguf_adapter || o->gguf_base || o->peft)) {
        s = export_adapter(source, &run, o, weights);
        tg_run_close(&run);
        return cli_exit("ckpt export", s);
    }
    if (s == TG_OK) s = tg_run_merge_weights(&run.model, run.last_checkpoint); /* a LoRA run exports merged */
    char note[TG_PATH_CAP + 64];
    snprintf(note, sizeof note, "tapegrad checkpoint %s, step %lld", run.last_checkpoint, (long long)run.state.step);
    TgChatTokens chat;
    bool sft = false;
    TgChatTemplate t = TG_CHAT_TEMPLATE_CHATML;
    if (s == TG_OK) s = chat_of(&run, &chat, &sft, &t);
    if (s == TG_OK && o->hf) s = tg_model_export_hf(&run.model, &run.tok, sft ? &chat : NULL, t, o->hf, note);
    if (s == TG_OK && o->gguf) s = tg_model_export_gguf(&run.model, &run.tok, sft ? &chat : NULL, t, o->gguf, weights);
    if (s == TG_OK)
        printf("wrote %s (%lld parameters, step %lld, %s tokenizer of %d ids%s)\n", o->hf ? o->hf : o->gguf,
               (long long)tg_model_param_count(&run.model), (long long)run.state.step,
               tg_tokenizer_kind_name(run.tok.kind), (int)run.tok.vocab_size, !sft ? "" : template_note(t));
    tg_run_close(&run);
    return cli_exit("ckpt export", s);
}

static int run_export(int argc, char **argv) {
    const ExportFlags defaults = {.gguf_type = tg_gguf_weights_name(0)}; /* the first type is the default */
    ExportFlags o = defaults;
    TgOptSet given = 0;
    const char *positional[1];
    int n_positional = 0;
    int rc = cli_parse(&export_table, &o, &defaults, &given, argc, argv, positional, &n_positional);
    if (rc >= 0) return rc;
    /* --gguf-adapter and --gguf-base are one target: a pair, or either alone */
    int targets = !!o.safetensors + !!o.hf + !!o.gguf + !!(o.gguf_adapter || o.gguf_base) + !!o.peft;
    if (n_positional != 1 || targets != 1)
        return cli_usage_error("ckpt export", "give one checkpoint file or run folder and one of --safetensors OUT, --hf DIR, "
                                              "--gguf FILE, --gguf-adapter FILE (with --gguf-base FILE), --peft DIR");
    if ((given & TG_OPT_BIT(tg_opt_find(&export_table, "--gguf-type"))) && !o.gguf && !o.gguf_base)
        return cli_usage_error("ckpt export", "--gguf-type goes with --gguf or --gguf-base");
    if (o.safetensors) return export_safetensors(positional[0], o.safetensors, o.force);
    return export_with_tokenizer(positional[0], &o);
}

typedef struct {
    const char *out;
} MergeFlags;

static const TgOptSpec merge_specs[] = {
    TG_OPT(MergeFlags, out, "--out", TG_OPT_STRING, "the new run folder to write (never one holding a run's files)", TG_OPT_ANY,
        NULL, 0, NULL),
};
static const TgOptTable merge_table = {"ckpt merge", "RUN|FILE --out DIR", merge_specs,
                                     (int)(sizeof merge_specs / sizeof merge_specs[0]), 1};

static int run_merge(int argc, char **argv) {
    MergeFlags o = {0};
    const char *positional[1];
    int n_positional = 0;
    int rc = cli_parse(&merge_table, &o, &o, NULL, argc, argv, positional, &n_positional);
    if (rc >= 0) return rc;
    if (n_positional != 1 || !o.out)
        return cli_usage_error("ckpt merge", "give one LoRA run folder (or adapter checkpoint in one) and --out DIR");
    char merged[TG_PATH_CAP];
    TgStatus s = tg_run_merge_adapter(positional[0], o.out, merged, sizeof merged);
    if (s == TG_OK)
        printf("wrote %s: the base with the adapters of %s folded in, a whole model (sample, chat, eval and export it as "
               "any run)\n",
               merged, positional[0]);
    return cli_exit("ckpt merge", s);
}

static int run_ckpt(int argc, char **argv) {
    if (argc < 2) {
        print_ckpt_usage(stderr);
        return 2;
    }
    const char *what = argv[1];
    if (strcmp(what, "--help") == 0 || strcmp(what, "-h") == 0) {
        print_ckpt_usage(stdout);
        return 0;
    }
    if (strcmp(what, "info") == 0) return run_info(argc - 1, argv + 1);
    if (strcmp(what, "export") == 0) return run_export(argc - 1, argv + 1);
    if (strcmp(what, "merge") == 0) return run_merge(argc - 1, argv + 1);
    return cli_usage_error("ckpt", "unknown action '%s'; the actions are info, export and merge", what);
}

static const TgOptTable *option_tables(int i) {
    return i == 0 ? &info_table : i == 1 ? &export_table : i == 2 ? &merge_table : NULL;
}

const Subcommand cmd_ckpt = {"ckpt", "inspect a checkpoint (info), export it (safetensors, a Hugging Face folder, GGUF) or merge a LoRA run (merge)",
                             run_ckpt, option_tables};
