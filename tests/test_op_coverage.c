/* Every op a training step records has finite-difference cases (tapegrad/op_list.h): one step of each
 * model variant and each loss path is run, the op names its tape recorded are collected, and a
 * name without cases fails the test. So a new op that the model uses cannot train unchecked. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/rng.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"
#include "testutil.h"
#include "tapegrad/model.h"

/* The distinct names seen, as many as the tapes record */
typedef struct {
    const char **names;
    int count, cap;
} OpNames;

static void collect(const TgTape *tape, OpNames *seen) {
    for (size_t i = 0; i < tape->n_nodes; i++) {
        const char *op = tape->nodes[i].op;
        bool known = false;
        for (int k = 0; k < seen->count; k++) known |= strcmp(seen->names[k], op) == 0;
        if (known) continue;
        if (seen->count == seen->cap) {
            seen->cap = seen->cap ? 2 * seen->cap : 16;
            seen->names = tg_realloc(seen->names, (size_t)seen->cap * sizeof *seen->names);
        }
        seen->names[seen->count++] = op;
    }
}

/* The recorded names with no check cases, as "a, b" (empty when all are covered). */
static void uncovered(const OpNames *seen, char *out, size_t cap) {
    out[0] = '\0';
    for (int k = 0; k < seen->count; k++)
        if (tg_op_check_cases_of(seen->names[k]) == 0)
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? ", " : "", seen->names[k]);
}

typedef enum { LOSS_TRAINING, LOSS_WITH_LOGITS, LOSS_INSPECTED, LOSS_ACCUMULATED } LossPath;

static void one_step(TgFfnKind ffn, LossPath path, OpNames *seen) {
    TgModelConfig c = {.dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .hidden = 96, .vocab = 40,
                     .seq_len = 8, .ffn = ffn, .rope_theta = 1e6, .norm_eps = 1e-5};
    if (ffn == TG_FFN_RELU) c.hidden = 128;
    TgModel m;
    tg_model_build(&m, &c);
    tg_model_init_weights(&m, 3);
    TgRng rng;
    tg_rng_seed(&rng, 4);
    int32_t tokens[2 * 8], targets[2 * 8];
    for (int i = 0; i < 16; i++) tokens[i] = (int32_t)tg_rng_below(&rng, 40), targets[i] = (int32_t)tg_rng_below(&rng, 40);
    targets[5] = TG_IGNORE_INDEX;
    TestTape tt;
    test_tape_init(&tt, 1);
    TgTensor *logits, *hidden[2];
    TgTensor *loss =
        path == LOSS_WITH_LOGITS
            ? tg_model_loss(&m, &tt.tape, &(TgBatch){.tokens = tokens, .targets = targets, .batch = 2, .seq = 8},
                            &(TgModelOutputs){.logits = &logits})
        : path == LOSS_INSPECTED
            ? tg_model_loss(&m, &tt.tape, &(TgBatch){.tokens = tokens, .targets = targets, .batch = 2, .seq = 8},
                            &(TgModelOutputs){.ffn_hidden = hidden})
            : tg_model_loss(&m, &tt.tape, &(TgBatch){.tokens = tokens, .targets = targets, .batch = 2, .seq = 8}, NULL);
    if (path == LOSS_ACCUMULATED) loss = tg_scale(&tt.tape, loss, 0.5f); /* the trainer's --accum 2 */
    collect(&tt.tape, seen);
    tg_params_zero_grad(&m.params);
    tg_tape_backward(&tt.tape, loss);
    test_tape_free(&tt);
    tg_model_free(&m);
}

Test(op_coverage, every_op_a_training_step_records_has_check_cases) {
    OpNames seen = {0};
    for (int ffn = 0; ffn < 2; ffn++)
        for (int path = LOSS_TRAINING; path <= LOSS_ACCUMULATED; path++) one_step((TgFfnKind)ffn, (LossPath)path, &seen);
    char missing[512];
    uncovered(&seen, missing, sizeof missing);
    cr_expect_str_eq(missing, "", "recorded by a training step but without gradient-check cases: %s", missing);
    /* and the step did record the ops both FFNs are made of */
    const char *expected[] = {"embedding", "rmsnorm", "linear", "rope", "attention", "linear_residual", "swiglu",
                              "relu", "cross_entropy", "scale"};
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        bool found = false;
        for (int k = 0; k < seen.count; k++) found |= strcmp(seen.names[k], expected[i]) == 0;
        cr_expect(found, "no training step recorded %s", expected[i]);
    }
    free(seen.names);
}

/* The check above can fail: an op recorded under a name the list does not know is reported. */
static void no_backward(TgTape *tape, TgTapeNode *node) {
    (void)tape;
    (void)node;
}

Test(op_coverage, an_unlisted_op_is_reported) {
    TestTape tt;
    test_tape_init(&tt, 1);
    TgRng rng;
    tg_rng_seed(&rng, 1);
    TgTensor *x = test_tensor("x", 1, (int64_t[]){4}, &rng, -1, 1);
    x->requires_grad = true;
    TgTensor *y = tg_tensor_new(tt.tape.arena, "y", 1, x->shape);
    tg_tape_record(&tt.tape, "layernorm_without_checks", no_backward, y, 1, &x);
    tg_relu(&tt.tape, y);
    OpNames seen = {0};
    collect(&tt.tape, &seen);
    char missing[512];
    uncovered(&seen, missing, sizeof missing);
    cr_expect_str_eq(missing, "layernorm_without_checks");
    free(seen.names);
    test_tensor_free(x);
    test_tape_free(&tt);
}
