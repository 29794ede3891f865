/* `tapegrad inspect`: forward + backward of a trained model on validation batches, without an
 * update, and a table (or one JSON object) of every parameter's gradient and every layer's FFN
 * activation statistics; optionally every gradient saved as safetensors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/prepare.h"
#include "data/loader.h"
#include "lib/checked.h"
#include "support/json_write.h"
#include "tapegrad/engine.h"
#include "model/safetensors.h"
#include "cli/cli.h"
#include "data/sft_loader.h"
#include "inspect/inspect.h"
#include "run/output_check.h"
#include "run/memory_plan.h"
#include "run/run.h"

static TgStatus dump_gradients(const TgModel *m, const char *path, const char *checkpoint, int64_t batches) {
    TgStWriter *w = tg_st_writer_begin();
    char name[TG_NAME_CAP + 16], value[64];
    for (int i = 0; i < m->params.count; i++) {
        const TgTensor *t = m->params.tensors[i];
        snprintf(name, sizeof name, "grad.%s", t->name);
        TgStatus s = tg_st_writer_add_f32(w, name, t->ndim, t->shape, t->grad);
        if (s != TG_OK) {
            tg_st_writer_free(w);
            return s;
        }
    }
    snprintf(value, sizeof value, "%lld", (long long)batches);
    tg_st_writer_set_metadata(w, "val_batches", value);
    tg_st_writer_set_metadata(w, "checkpoint", checkpoint);
    tg_st_writer_set_metadata(w, "what", "mean gradient of the val loss, no update applied");
    return tg_st_writer_finish(w, path);
}

static void print_table(const TgModel *m, const TgModelInspection *mi) {
    printf("%-48s %-12s %10s %11s %12s %11s\n", "parameter", "shape", "norm", "grad norm", "grad/weight", "max |g|");
    for (int i = 0; i < mi->n_params; i++) {
        const TgTensor *t = m->params.tensors[i];
        const TgParamStats *p = &mi->params[i];
        char shape[48];
        printf("%-48s %-12s %10.4f %11.4e %12.4e %11.4e\n", t->name, tg_tensor_shape_str(t, shape, sizeof shape),
               p->weight_norm, p->grad_norm, p->weight_norm > 0 ? p->grad_norm / p->weight_norm : NAN, p->grad_max_abs);
    }
    printf("\n%-6s %-7s %7s %11s %10s %10s %11s %10s %18s\n", "layer", "ffn", "hidden", "dead units", "dead frac",
           "zero frac", "act mean", "act std", "w1 zero-grad rows");
    for (int64_t l = 0; l < mi->n_layers; l++) {
        const TgFfnActStats *s = &mi->ffn[l];
        printf("%-6lld %-7s %7lld %11lld %10.4f %10.4f %11.4e %10.4e %18.4f\n", (long long)l,
               tg_ffn_kind_name(m->cfg.ffn), (long long)s->hidden, (long long)tg_ffn_stats_dead_units(s),
               tg_ffn_stats_dead_fraction(s), tg_ffn_stats_zero_fraction(s), tg_ffn_stats_mean(s), tg_ffn_stats_std(s),
               mi->w1_zero_grad_rows[l]);
    }
}

static void print_json(const TgRun *run, const TgModelInspection *mi, int64_t k, int64_t batch, double loss) {
    const TgModel *m = &run->model;
    const TgModelConfig *c = &m->cfg;
    /* the checkpoint path is the only free text */
    printf("{\"checkpoint\":");
    tg_json_write_string(stdout, run->last_checkpoint);
    printf(",\"step\":%lld,\"batches\":%lld,\"batch\":%lld,\"seq\":%lld,\"precision\":\"%s\",\"loss\":",
           (long long)run->state.step, (long long)k, (long long)batch, (long long)c->seq_len,
           tg_precision_name(run->precision));
    tg_json_write_number(stdout, loss, 6);
    printf(",\"model\":{\"dim\":%lld,\"layers\":%lld,\"heads\":%lld,\"kv_heads\":%lld,\"hidden\":%lld,\"vocab\":%lld,"
           "\"ffn\":\"%s\",\"params\":%lld},",
           (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads, (long long)c->n_kv_heads,
           (long long)c->hidden, (long long)c->vocab, tg_ffn_kind_name(c->ffn), (long long)tg_model_param_count(m));
    tg_model_inspection_write_json(stdout, mi, m, NULL, NULL);
    printf("}\n");
}

typedef struct {
    const char *run, *ckpt, *dump;
    TgPrecision precision;
    int64_t batches, batch;
    int threads;
    bool json, force;
} InspectFlags;

#define I InspectFlags
static const TgOptSpec specs[] = {
    TG_FLAG_RUN(I, run, "run folder (its latest checkpoint)", 0, NULL),
    TG_OPT(I, ckpt, "--ckpt", TG_OPT_STRING, "a checkpoint file inside a run folder", TG_OPT_ANY, NULL, 0, NULL),
    TG_OPT(I, batches, "--batches", TG_OPT_INT64, "validation batches to average the gradient over", TG_FLAG_RANGE_COUNT, NULL,
        0, NULL),
    TG_FLAG_BATCH(I, batch, "sequences per batch", 0, NULL),
    TG_FLAG_JSON(I, json, "print one JSON object instead of tables", 0, NULL),
    TG_OPT(I, dump, "--dump-grads", TG_OPT_STRING, "also write every gradient, named grad.<weight>, to this .safetensors file",
        TG_OPT_ANY, NULL, 0, NULL),
    TG_OPT(I, force, "--force", TG_OPT_BOOL, "replace an existing --dump-grads file (a run's own files never)", TG_OPT_ANY, NULL, 0,
        NULL),
    TG_FLAG_THREADS(I, threads, "threads", 0, NULL),
    TG_FLAG_PRECISION(I, precision, "the linear layers' products of the forward and backward: fp32 or bf16", 0,
                   "the run's (run.txt)"),
};
#undef I
static const TgOptTable table = {"inspect", "--run DIR | --ckpt FILE [--batches K] [--json] [--dump-grads OUT.safetensors [--force]]",
                               specs, (int)(sizeof specs / sizeof specs[0]), 0};

/* The step of --batch sequences and the --batches val batches, before either is allocated. */
static TgStatus inspect_memory_check(const TgRun *run, const InspectFlags *o) {
    const TgModelConfig *c = &run->model.cfg;
    TgMemoryPlan plan = {0};
    char subject[64];
    tg_memory_plan_add(&plan, tg_model_memory_bytes(c), NULL, NULL, "for the model");
    snprintf(subject, sizeof subject, "--batch %lld", (long long)o->batch);
    tg_memory_plan_add_activations(&plan, c, o->batch, c->seq_len, o->threads, true, subject, "lower --batch");
    snprintf(subject, sizeof subject, "--batches %lld", (long long)o->batches);
    tg_memory_plan_add(&plan, 2.0 * (double)o->batches * (double)o->batch * (double)c->seq_len * sizeof(int32_t), subject,
                    "lower --batches or --batch", "for its val batches of %lld x %lld tokens each", (long long)o->batch,
                    (long long)c->seq_len);
    return tg_memory_plan_check(&plan);
}

/* The k fixed val batches the gradients are averaged over (a fine-tuned run's: packed
 * conversations, with *key_start). */
static TgStatus inspect_batches(TgRun *run, int64_t k, int64_t batch, int32_t **inputs, int32_t **targets,
                                int32_t **key_start) {
    size_t bytes;
    int64_t T = run->model.cfg.seq_len, tokens;
    if (!tg_mul_i64(k, batch, &tokens) || !tg_mul_i64(tokens, T, &tokens) || !tg_bytes_of(tokens, sizeof(int32_t), &bytes))
        return tg_fail(TG_ERR_ARG, "--batches %lld x --batch %lld x %lld tokens is too many", (long long)k,
                       (long long)batch, (long long)T);
    TG_TRY(tg_run_open_val(run));
    *inputs = tg_malloc(bytes);
    *targets = tg_malloc(bytes);
    if (!tg_train_task_chat(run->task))
        return tg_loader_fixed_batches_store(&run->val.tokens, batch, T, k, *inputs, *targets);
    *key_start = tg_malloc(bytes);
    return tg_sft_fixed_batches(&run->val, batch, T, k, run->tok.eot_id, *inputs, *targets, *key_start);
}

static int run_inspect(int argc, char **argv) {
    const InspectFlags defaults = {.batches = 4, .batch = 8, .threads = TG_TRAIN_DEFAULT_THREADS};
    InspectFlags o = defaults;
    TgOptSet given = 0;
    int rc = cli_parse(&table, &o, &defaults, &given, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!o.run == !o.ckpt) return cli_usage_error("inspect", "give exactly one of --run DIR or --ckpt FILE");
    if (o.force && !o.dump) return cli_usage_error("inspect", "--force goes with --dump-grads");
    char dir[TG_PATH_CAP];
    TgStatus s = tg_run_folder_locate(o.run ? o.run : o.ckpt, dir, sizeof dir); /* before the output: checked against it */
    if (s == TG_OK && o.dump) s = tg_output_check(NULL, "--dump-grads", o.dump, o.force);
    if (s != TG_OK) return cli_exit("inspect", s);
    TgRun run;
    int32_t *inputs = NULL, *targets = NULL, *key_start = NULL;
    s = tg_run_open_existing(o.run ? o.run : o.ckpt, &run);
    if (s == TG_OK && run.model.lora)
        s = tg_fail(TG_ERR_ARG,
                    "%s is a LoRA run: inspect reads every weight's gradient, and its base is frozen; merge it "
                    "(tapegrad ckpt merge %s --out DIR) and inspect the merged run",
                    o.run ? o.run : o.ckpt, o.run ? o.run : o.ckpt);
    if (s == TG_OK) s = inspect_memory_check(&run, &o);
    if (s == TG_OK) s = inspect_batches(&run, o.batches, o.batch, &inputs, &targets, &key_start);
    TgEngine engine = {0};
    if (s == TG_OK) {
        tg_engine_open(&engine, o.threads, 0);
        if (given & TG_OPT_BIT(tg_opt_find(&table, "--precision"))) run.precision = o.precision;
        tg_tape_set_precision(&engine.tape, run.precision);
        const TgModelConfig *c = &run.model.cfg;
        s = tg_arena_reserve(&engine.arena, (size_t)tg_model_activation_bytes(c, o.batch, c->seq_len, o.threads, true));
    }
    if (s == TG_OK) {
        int64_t k = o.batches, T = run.model.cfg.seq_len;
        TgModelInspection mi;
        tg_model_inspection_init(&mi, &run.model);
        TgEvalBatches batches = {inputs, targets, key_start, k, o.batch, T};
        double loss = tg_model_inspect_batches(&run.model, &engine.tape, &batches, &mi);
        if (o.json) {
            print_json(&run, &mi, k, o.batch, loss);
        } else {
            printf("%s (step %lld): %lld val batches of %lld x %lld tokens, mean loss %.4f (%s), no update applied\n\n",
                   run.last_checkpoint, (long long)run.state.step, (long long)k, (long long)o.batch, (long long)T,
                   loss, tg_precision_name(run.precision));
            print_table(&run.model, &mi);
        }
        if (o.dump) {
            s = dump_gradients(&run.model, o.dump, run.last_checkpoint, k);
            if (s == TG_OK && !o.json)
                printf("\ngradients written to %s (%d tensors named grad.<weight>)\n", o.dump, run.model.params.count);
        }
        tg_model_inspection_free(&mi);
    }
    if (engine.pool) tg_engine_close(&engine);
    free(inputs);
    free(targets);
    free(key_start);
    tg_run_close(&run);
    return cli_exit("inspect", s);
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_inspect = {"inspect", "gradients and FFN activations of a trained run on val batches (no update)",
                                run_inspect, option_tables};
