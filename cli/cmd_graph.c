/* `tapegrad graph`: the tape of one training step, printed for a person: every node the forward
 * recorded, in order, with its inputs, its output's shape and the memory it took; then the
 * backward walks these nodes from the bottom up. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tapegrad/engine.h"
#include "tapegrad/rng.h"
#include "tapegrad/model.h"
#include "run/memory_plan.h"
#include "run/shared_flags.h"

typedef struct {
    TgPreset preset;
    TgFfnKind ffn;
    int64_t batch, seq, vocab;
} GraphFlags;

/* a vocabulary of a char tokenizer's size, for a preset without one of its own */
#define GRAPH_DEFAULT_VOCAB 96

#define G GraphFlags
static const TgOptSpec specs[] = {
    TG_FLAG_PRESET(G, preset, "model preset", 0, NULL),
    TG_FLAG_FFN(G, ffn, "feed-forward block", 0, NULL),
    TG_FLAG_BATCH(G, batch, "sequences", 0, NULL),
    TG_FLAG_SEQ(G, seq, "tokens per sequence", 0, "the preset's context"),
    TG_FLAG_VOCAB(G, vocab, "vocabulary", 0, "the preset's, or " TG_OPT_STRINGIFY(GRAPH_DEFAULT_VOCAB)),
};
#undef G
static const TgOptTable table = {"graph", "[--preset NAME] [--ffn KIND] [--batch B] [--seq T]", specs,
                               (int)(sizeof specs / sizeof specs[0]), 0};

/* An input as the graph sees it: "#k" for the output of node k, a parameter by its name. */
static void describe_input(const TgTape *tape, size_t before, const TgModel *m, const TgTensor *t, char *buf, size_t cap) {
    for (size_t k = before; k-- > 0;)
        if (tape->nodes[k].out == t) {
            snprintf(buf, cap, "#%zu", k);
            return;
        }
    for (int i = 0; i < m->params.count; i++)
        if (m->params.tensors[i] == t) {
            snprintf(buf, cap, "%s", t->name);
            return;
        }
    char shape[64];
    snprintf(buf, cap, "%s%s", t->name, tg_tensor_shape_str(t, shape, sizeof shape));
}

/* The preset with the flags' changes. */
static TgStatus graph_config(const GraphFlags *o, TgModelConfig *cfg) {
    *cfg = tg_model_preset_config(o->preset);
    cfg->ffn = o->ffn;
    if (cfg->ffn != TG_FFN_SWIGLU) cfg->hidden = tg_model_ffn_hidden(cfg->ffn, cfg->dim);
    if (!cfg->vocab) cfg->vocab = GRAPH_DEFAULT_VOCAB;
    if (o->vocab > 0) cfg->vocab = o->vocab;
    if (o->seq > 0) cfg->seq_len = o->seq;
    return tg_model_config_validate(cfg);
}

/* The model and one step's tape, before either is allocated. */
static TgStatus graph_memory_check(const GraphFlags *o, const TgModelConfig *cfg) {
    TgMemoryPlan plan = {0};
    char subject[64];
    tg_memory_plan_add(&plan, tg_model_memory_bytes(cfg), "the model", "a smaller --preset or --vocab",
                       "for its parameters");
    if (o->seq > 0)
        snprintf(subject, sizeof subject, "--batch %lld --seq %lld", (long long)o->batch, (long long)o->seq);
    else
        snprintf(subject, sizeof subject, "--batch %lld", (long long)o->batch);
    tg_memory_plan_add_activations(&plan, cfg, o->batch, cfg->seq_len, 1, true, subject, "lower --batch or --seq");
    return tg_memory_plan_check(&plan);
}

/* The forward of one step on the tokens, and the nodes it recorded, one line each. */
static void print_step(const GraphFlags *o, TgModel *model, TgTape *tape, const int32_t *tokens,
                       const int32_t *targets) {
    const TgModelConfig *cfg = &model->cfg;
    TgTensor *loss = tg_model_loss(
        model, tape, &(TgBatch){.tokens = tokens, .targets = targets, .batch = o->batch, .seq = cfg->seq_len}, NULL);
    printf("one training step of the %s preset (%s FFN), batch %lld x seq %lld: %zu nodes on the tape\n",
           tg_model_preset_name(o->preset),
           tg_ffn_kind_name(cfg->ffn), (long long)o->batch, (long long)cfg->seq_len, tape->n_nodes);
    printf("%5s  %-16s %-16s %10s  %s\n", "node", "op", "output", "arena", "inputs (#k: the output of node k)");
    for (size_t i = 0; i < tape->n_nodes; i++) {
        const TgTapeNode *node = &tape->nodes[i];
        char inputs[512] = "", one[160], shape[64];
        for (int k = 0; k < node->n_in; k++) {
            describe_input(tape, i, model, node->in[k], one, sizeof one);
            snprintf(inputs + strlen(inputs), sizeof inputs - strlen(inputs), "%s%s", k ? ", " : "", one);
        }
        printf("#%-4zu  %-16s %-16s %7.2f MB  %s\n", i, node->op, tg_tensor_shape_str(node->out, shape, sizeof shape),
               (double)node->arena_used / (1024.0 * 1024.0), inputs);
    }
    printf("loss %.4f (ln V = %.4f). 'arena': the step's activation memory in use after the node; the backward\n"
           "runs the nodes from #%zu up to #0, each adding into the gradients of its inputs\n",
           loss->data[0], log((double)cfg->vocab), tape->n_nodes ? tape->n_nodes - 1 : 0);
    tg_tape_reset(tape);
}

static int run_graph(int argc, char **argv) {
    const GraphFlags defaults = {.preset = TG_PRESET_TINY, .ffn = TG_FFN_SWIGLU, .batch = 2};
    GraphFlags o = defaults;
    int rc = cli_parse(&table, &o, &defaults, NULL, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    TgModelConfig cfg;
    TgStatus s = graph_config(&o, &cfg);
    if (s == TG_OK) s = graph_memory_check(&o, &cfg);
    if (s != TG_OK) return cli_exit("graph", s);
    TgModel model;
    tg_model_build(&model, &cfg);
    tg_model_init_weights(&model, 1);
    int64_t n = o.batch * cfg.seq_len;
    int32_t *tokens = tg_malloc((size_t)n * sizeof(int32_t)), *targets = tg_malloc((size_t)n * sizeof(int32_t));
    TgRng rng;
    tg_rng_seed(&rng, 2);
    for (int64_t i = 0; i < n; i++) tokens[i] = (int32_t)tg_rng_below(&rng, (uint64_t)cfg.vocab);
    for (int64_t i = 0; i < n; i++) targets[i] = (int32_t)tg_rng_below(&rng, (uint64_t)cfg.vocab);
    TgEngine engine;
    tg_engine_open(&engine, 1, 0);
    s = tg_arena_reserve(&engine.arena, (size_t)tg_model_activation_bytes(&cfg, o.batch, cfg.seq_len, 1, true));
    if (s == TG_OK) print_step(&o, &model, &engine.tape, tokens, targets);
    tg_engine_close(&engine);
    free(tokens);
    free(targets);
    tg_model_free(&model);
    return cli_exit("graph", s);
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_graph = {"graph", "print the tape of one training step: ops, inputs, shapes, memory",
                              run_graph, option_tables};
