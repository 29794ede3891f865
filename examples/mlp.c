/* A model of one's own: an MLP that classifies points of three interleaved spirals, trained with
 * AdamW on a warmup + cosine schedule, checkpointed halfway, and resumed from that checkpoint in
 * a fresh parameter store, which must end bitwise where the uninterrupted run ended.
 *
 *     logits = W3 silu(W2 silu(W1 [x, y, 1]))     W1 (64, 3), W2 (64, 64), W3 (3, 64)
 *
 * (the constant 1 gives the first layer its bias; tg_linear has none.) It reaches at least 95%
 * accuracy on 120 held-out points.
 *
 *   ./mlp [CHECKPOINT]     (default mlp.tgck; exit 0 when the accuracy and the resume hold)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tapegrad/tapegrad.h>

enum { CLASSES = 3, PER_CLASS = 200, POINTS = CLASSES * PER_CLASS, TRAIN = 480, TEST = POINTS - TRAIN };
enum { FEATURES = 3, HIDDEN = 64, STEPS = 600 };

typedef struct {
    float features[POINTS][FEATURES]; /* x, y, 1 */
    int32_t labels[POINTS];
} Spirals;

/* Class c's arm: radius r in [0, 1), angle 4 (c + r) plus noise; then shuffled, so the first
 * TRAIN points train and the rest test. */
static void make_spirals(Spirals *d, uint64_t seed) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    for (int c = 0; c < CLASSES; c++)
        for (int i = 0; i < PER_CLASS; i++) {
            int p = c * PER_CLASS + i;
            double r = (double)i / PER_CLASS, angle = 4.0 * (c + r) + 0.2 * tg_rng_normal(&rng);
            d->features[p][0] = (float)(r * sin(angle));
            d->features[p][1] = (float)(r * cos(angle));
            d->features[p][2] = 1.0f;
            d->labels[p] = c;
        }
    for (int p = POINTS - 1; p > 0; p--) {
        int q = (int)tg_rng_below(&rng, (uint64_t)p + 1);
        float f[FEATURES];
        memcpy(f, d->features[p], sizeof f);
        memcpy(d->features[p], d->features[q], sizeof f);
        memcpy(d->features[q], f, sizeof f);
        int32_t l = d->labels[p];
        d->labels[p] = d->labels[q], d->labels[q] = l;
    }
}

typedef struct {
    TgParamStore params;
    TgTensor *w1, *w2, *w3;
} Mlp;

/* The parameters, declared by name and shape, then allocated in one flat buffer each for the
 * weights, gradients and AdamW moments; initial values drawn from `seed`. */
static void mlp_build(Mlp *m, uint64_t seed) {
    tg_params_init(&m->params);
    m->w1 = tg_params_add(&m->params, "w1", 2, TG_SHAPE(HIDDEN, FEATURES), true, TG_PARAM_INIT_NORMAL(1.0f));
    m->w2 = tg_params_add(&m->params, "w2", 2, TG_SHAPE(HIDDEN, HIDDEN), true, TG_PARAM_INIT_NORMAL(0.125f));
    m->w3 = tg_params_add(&m->params, "w3", 2, TG_SHAPE(CLASSES, HIDDEN), true, TG_PARAM_INIT_NORMAL(0.125f));
    tg_params_finalize(&m->params);
    tg_params_init_values(&m->params, seed);
}

/* logits (rows, CLASSES) of rows points starting at `first` */
static TgTensor *mlp_forward(Mlp *m, TgTape *tape, Spirals *d, int first, int rows) {
    TgTensor *x = tg_tensor_view(tape->arena, "points", &d->features[first][0], 2, TG_SHAPE(rows, FEATURES));
    TgTensor *h = tg_silu(tape, tg_linear(tape, x, m->w1));
    h = tg_silu(tape, tg_linear(tape, h, m->w2));
    return tg_linear(tape, h, m->w3);
}

/* Full-batch steps from `from` + 1 to `to`: loss, backward, clip, AdamW at the schedule's rate. */
static double train_steps(Mlp *m, TgEngine *engine, Spirals *d, int64_t from, int64_t to) {
    const TgAdamWConfig adamw = {.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 1e-4};
    const TgLrSchedule schedule = {.lr = 2e-2, .min_lr = 1e-3, .warmup = 20, .total = STEPS};
    TgTape *tape = &engine->tape;
    double loss_value = 0;
    for (int64_t step = from + 1; step <= to; step++) {
        TgTensor *loss = tg_cross_entropy(tape, mlp_forward(m, tape, d, 0, TRAIN), d->labels, TG_IGNORE_INDEX);
        loss_value = loss->data[0];
        tg_tape_backward(tape, loss);
        tg_clip_grad_norm(&m->params, 1.0);
        tg_adamw_step(&m->params, &adamw, step, tg_lr_at(&schedule, step - 1), engine->pool);
        tg_params_zero_grad(&m->params);
        tg_tape_reset(tape);
    }
    return loss_value;
}

/* Share of the held-out points whose largest logit is their class. */
static double test_accuracy(Mlp *m, TgEngine *engine, Spirals *d) {
    TgTape *tape = &engine->tape;
    bool was = tg_tape_set_grad_enabled(tape, false);
    TgTensor *logits = mlp_forward(m, tape, d, TRAIN, TEST);
    int right = 0;
    for (int i = 0; i < TEST; i++) {
        const float *row = logits->data + i * CLASSES;
        int best = 0;
        for (int c = 1; c < CLASSES; c++)
            if (row[c] > row[best]) best = c;
        right += best == d->labels[TRAIN + i];
    }
    tg_tape_reset(tape);
    tg_tape_set_grad_enabled(tape, was);
    return (double)right / TEST;
}

static int fail(const char *what) {
    fprintf(stderr, "mlp: %s: %s\n", what, tg_error_message());
    return 1;
}

int main(int argc, char **argv) {
    const char *checkpoint = argc > 1 ? argv[1] : "mlp.tgck";
    static Spirals data;
    make_spirals(&data, 7);
    TgEngine engine;
    tg_engine_open(&engine, 1, 1 << 20);
    Mlp m;
    mlp_build(&m, 1);
    printf("spirals: %d training points, %d held out; MLP %d-%d-%d-%d, %d parameters\n", TRAIN, TEST, FEATURES,
           HIDDEN, HIDDEN, CLASSES, HIDDEN * FEATURES + HIDDEN * HIDDEN + CLASSES * HIDDEN);
    printf("before training: held-out accuracy %.3f\n", test_accuracy(&m, &engine, &data));
    double loss = train_steps(&m, &engine, &data, 0, STEPS / 2);
    if (tg_param_checkpoint_save(checkpoint, &m.params, "spiral-mlp-v1", STEPS / 2) != TG_OK) return fail("saving");
    printf("step %d: loss %.4f; saved %s\n", STEPS / 2, loss, checkpoint);
    loss = train_steps(&m, &engine, &data, STEPS / 2, STEPS);
    double accuracy = test_accuracy(&m, &engine, &data);
    printf("step %d: loss %.4f, held-out accuracy %.3f\n", STEPS, loss, accuracy);

    /* a fresh store, other initial values, the checkpoint loaded: the second half again */
    Mlp resumed;
    mlp_build(&resumed, 99);
    int64_t step = 0;
    if (tg_param_checkpoint_load(checkpoint, &resumed.params, "spiral-mlp-v1", &step) != TG_OK) return fail("loading");
    train_steps(&resumed, &engine, &data, step, STEPS);
    bool same = memcmp(m.params.data, resumed.params.data, m.params.total * sizeof(float)) == 0 &&
                memcmp(m.params.m, resumed.params.m, m.params.total * sizeof(float)) == 0 &&
                memcmp(m.params.v, resumed.params.v, m.params.total * sizeof(float)) == 0;
    printf("resumed from step %lld: weights and AdamW moments %s the uninterrupted run's\n", (long long)step,
           same ? "bitwise equal" : "DIFFER from");
    tg_params_free(&m.params);
    tg_params_free(&resumed.params);
    tg_engine_close(&engine);
    bool reached = accuracy >= 0.95;
    printf("%s: held-out accuracy %.3f (the bar: 0.95)\n", reached && same ? "ok" : "FAILED", accuracy);
    return reached && same ? 0 : 1;
}
