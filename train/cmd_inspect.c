/* `tapegrad inspect`: forward + backward of a trained model on validation batches, without an
 * update, and a table (or one JSON object) of every parameter's gradient and every layer's FFN
 * activation statistics; optionally every gradient saved as safetensors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../data/prepare.h"
#include "../data/loader.h"
#include "../data/tokfile.h"
#include "../lib/engine.h"
#include "../lib/safetensors.h"
#include "cli.h"
#include "inspect.h"
#include "run.h"

static tg_status dump_gradients(const Model *m, const char *path, const char *checkpoint, int64_t batches) {
    StWriter *w = st_writer_begin();
    char name[TG_NAME_CAP + 16], value[64];
    for (int i = 0; i < m->params.count; i++) {
        const Tensor *t = m->params.tensors[i];
        snprintf(name, sizeof name, "grad.%s", t->name);
        tg_status s = st_writer_add_f32(w, name, t->ndim, t->shape, t->grad);
        if (s != TG_OK) {
            st_writer_free(w);
            return s;
        }
    }
    snprintf(value, sizeof value, "%lld", (long long)batches);
    st_writer_set_metadata(w, "val_batches", value);
    st_writer_set_metadata(w, "checkpoint", checkpoint);
    st_writer_set_metadata(w, "what", "mean gradient of the val loss, no update applied");
    return st_writer_finish(w, path);
}

static void print_table(const Model *m, const ModelInspection *mi) {
    printf("%-48s %-12s %10s %11s %12s %11s\n", "parameter", "shape", "norm", "grad norm", "grad/weight", "max |g|");
    for (int i = 0; i < mi->n_params; i++) {
        const Tensor *t = m->params.tensors[i];
        const ParamStats *p = &mi->params[i];
        char shape[48];
        printf("%-48s %-12s %10.4f %11.4e %12.4e %11.4e\n", t->name, tensor_shape_str(t, shape, sizeof shape),
               p->weight_norm, p->grad_norm, p->weight_norm > 0 ? p->grad_norm / p->weight_norm : NAN, p->grad_max_abs);
    }
    printf("\n%-6s %-7s %7s %11s %10s %10s %11s %10s %18s\n", "layer", "ffn", "hidden", "dead units", "dead frac",
           "zero frac", "act mean", "act std", "w1 zero-grad rows");
    for (int64_t l = 0; l < mi->n_layers; l++) {
        const FfnActStats *s = &mi->ffn[l];
        printf("%-6lld %-7s %7lld %11lld %10.4f %10.4f %11.4e %10.4e %18.4f\n", (long long)l,
               ffn_kind_name(m->cfg.ffn), (long long)s->hidden, (long long)ffn_stats_dead_units(s),
               ffn_stats_dead_fraction(s), ffn_stats_zero_fraction(s), ffn_stats_mean(s), ffn_stats_std(s),
               mi->w1_zero_grad_rows[l]);
    }
}

static void print_json(const Run *run, const ModelInspection *mi, int64_t k, int64_t batch, double loss) {
    const Model *m = &run->model;
    const ModelConfig *c = &m->cfg;
    /* the checkpoint path is the only free text: escape what JSON requires */
    printf("{\"checkpoint\":\"");
    for (const char *p = run->last_checkpoint; *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if ((unsigned char)*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    printf("\",\"step\":%lld,\"batches\":%lld,\"batch\":%lld,\"seq\":%lld,\"loss\":", (long long)run->state.step,
           (long long)k, (long long)batch, (long long)c->seq_len);
    json_write_number(stdout, loss);
    printf(",\"model\":{\"dim\":%lld,\"layers\":%lld,\"heads\":%lld,\"kv_heads\":%lld,\"hidden\":%lld,\"vocab\":%lld,"
           "\"ffn\":\"%s\",\"params\":%lld},",
           (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads, (long long)c->n_kv_heads,
           (long long)c->hidden, (long long)c->vocab, ffn_kind_name(c->ffn), (long long)model_param_count(m));
    model_inspection_write_json(stdout, mi, m, NULL);
    printf("}\n");
}

static int run_inspect(int argc, char **argv) {
    const char *dir = NULL, *ckpt = NULL, *dump = NULL;
    int64_t k = 4, batch = 8;
    int threads = 2;
    bool json = false;
    Flag flags[] = {
        {"--run", FLAG_STRING, &dir, "run folder (its latest checkpoint)", false},
        {"--ckpt", FLAG_STRING, &ckpt, "a checkpoint file inside a run folder", false},
        {"--batches", FLAG_INT64, &k, "validation batches to average the gradient over (4)", false},
        {"--batch", FLAG_INT64, &batch, "sequences per batch (8)", false},
        {"--json", FLAG_BOOL, &json, "print one JSON object instead of tables", false},
        {"--dump-grads", FLAG_STRING, &dump, "also write every gradient, named grad.<weight>, to this .safetensors file", false},
        {"--threads", FLAG_INT, &threads, "threads (2)", false},
    };
    bool help;
    int rc = flags_parse("inspect", "--run DIR | --ckpt FILE [--batches K] [--json] [--dump-grads OUT.safetensors]",
                         flags, (int)(sizeof flags / sizeof flags[0]), argc, argv, NULL, 0, NULL, &help);
    if (rc || help) return rc;
    if (!dir == !ckpt) {
        fprintf(stderr, "tapegrad inspect: give exactly one of --run DIR or --ckpt FILE\n");
        return 2;
    }
    if (k <= 0 || batch <= 0 || threads <= 0) {
        fprintf(stderr, "tapegrad inspect: --batches, --batch and --threads must be positive\n");
        return 2;
    }
    Run run;
    int32_t *val = NULL, *inputs = NULL, *targets = NULL;
    size_t n_val = 0;
    tg_status s = run_open_existing(dir ? dir : ckpt, &run);
    if (s == TG_OK) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", run.dir, PREPARE_VAL_FILE);
        s = tokfile_read(path, &val, &n_val, &(uint32_t){0});
    }
    int64_t T = run.model_built ? run.model.cfg.seq_len : 0;
    if (s == TG_OK) {
        inputs = tg_malloc((size_t)(k * batch * T) * sizeof(int32_t));
        targets = tg_malloc((size_t)(k * batch * T) * sizeof(int32_t));
        s = loader_fixed_batches(val, n_val, batch, T, k, inputs, targets);
    }
    if (s != TG_OK) {
        fprintf(stderr, "tapegrad inspect: %s\n", tg_error_message());
        free(val);
        free(inputs);
        free(targets);
        run_close(&run);
        return 1;
    }
    Engine engine;
    engine_open(&engine, threads, 16u << 20);
    ModelInspection mi;
    model_inspection_init(&mi, &run.model);
    double loss = model_inspect_batches(&run.model, &engine.tape, inputs, targets, k, batch, T, &mi);
    int exit_code = 0;
    if (json) {
        print_json(&run, &mi, k, batch, loss);
    } else {
        printf("%s (step %lld): %lld val batches of %lld x %lld tokens, mean loss %.4f, no update applied\n\n",
               run.last_checkpoint, (long long)run.state.step, (long long)k, (long long)batch, (long long)T, loss);
        print_table(&run.model, &mi);
    }
    if (dump) {
        if (dump_gradients(&run.model, dump, run.last_checkpoint, k) != TG_OK) {
            fprintf(stderr, "tapegrad inspect: %s\n", tg_error_message());
            exit_code = 1;
        } else if (!json) {
            printf("\ngradients written to %s (%d tensors named grad.<weight>)\n", dump, run.model.params.count);
        }
    }
    model_inspection_free(&mi);
    engine_close(&engine);
    free(val);
    free(inputs);
    free(targets);
    run_close(&run);
    return exit_code;
}

const Subcommand cmd_inspect = {"inspect", "gradients and FFN activations of a trained run on val batches (no update)",
                                run_inspect};
