/* Checkpoint save/load times and compression ratios at the minimind-26m shape, with and
 * without the byte-plane shuffle, at deflate levels 1 and 6: for the random-init weights (AdamW
 * moments all zero) and again after some training steps (weights moved, moments filled).
 *
 *   build/ckpt_bench [--steps N] [--dir DIR] [--threads N]
 *
 * Prints a Markdown table (docs/results.md holds its figures). Not a test: ctest does not run it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "tapegrad/pool.h"
#include "tapegrad/rng.h"
#include "checkpoint/checkpoint.h"
#include "tapegrad/model.h"
#include "tapegrad/optim.h"
#include "support/clock.h"

static void die(const char *what) {
    fprintf(stderr, "ckpt_bench: %s: %s\n", what, tg_error_message());
    exit(1);
}

/* Training on token streams with structure (a random walk over a Zipf-like vocabulary), so the
 * gradients, and with them the weights and moments, look like those of a real run. */
static void train_steps(TgModel *m, int steps, int threads) {
    int64_t B = 2, T = m->cfg.seq_len, V = m->cfg.vocab;
    TgPool *pool = tg_pool_create(threads);
    TgArena arena;
    tg_arena_init(&arena, 64u << 20);
    TgTape tape;
    tg_tape_init(&tape, &arena, pool);
    int32_t *tokens = malloc((size_t)(B * (T + 1)) * sizeof(int32_t));
    TgRng rng;
    tg_rng_seed(&rng, 42);
    TgAdamWConfig cfg = tg_adamw_defaults();
    TgLrSchedule sched = {3e-3, 3e-4, 2, steps};
    for (int s = 0; s < steps; s++) {
        for (int64_t i = 0; i < B * (T + 1); i++) {
            double u = tg_rng_uniform(&rng);
            int64_t zipf = (int64_t)(pow((double)V, u * u)) - 1;
            tokens[i] = (int32_t)(i > 0 && tg_rng_uniform(&rng) < 0.5f ? (tokens[i - 1] * 31 + 7) % V : zipf);
        }
        int32_t *in = malloc((size_t)(B * T) * sizeof(int32_t)), *tg = malloc((size_t)(B * T) * sizeof(int32_t));
        for (int64_t b = 0; b < B; b++) {
            memcpy(in + b * T, tokens + b * (T + 1), (size_t)T * sizeof(int32_t));
            memcpy(tg + b * T, tokens + b * (T + 1) + 1, (size_t)T * sizeof(int32_t));
        }
        tg_params_zero_grad(&m->params);
        TgTensor *loss = tg_model_loss(m, &tape, &(TgBatch){.tokens = in, .targets = tg, .batch = B, .seq = T}, NULL);
        double value = loss->data[0];
        tg_tape_backward(&tape, loss);
        tg_tape_reset(&tape);
        tg_clip_grad_norm(&m->params, 1.0);
        tg_adamw_step(&m->params, &cfg, s + 1, tg_lr_at(&sched, s), pool);
        fprintf(stderr, "  training step %d/%d: loss %.4f\n", s + 1, steps, value);
        free(in);
        free(tg);
    }
    free(tokens);
    tg_tape_free(&tape);
    tg_arena_free(&arena);
    tg_pool_destroy(pool);
}

/* raw / deflated size of one flat buffer, plain or shuffled into byte planes, at level 6 */
static double buffer_ratio(const float *data, size_t n, bool shuffle) {
    size_t bytes = n * sizeof(float);
    uint8_t *in = malloc(bytes);
    if (shuffle) {
        for (size_t i = 0; i < n; i++) {
            uint32_t x;
            memcpy(&x, data + i, 4);
            for (int b = 0; b < 4; b++) in[(size_t)b * n + i] = (uint8_t)(x >> (8 * b));
        }
    } else {
        memcpy(in, data, bytes);
    }
    uLongf out_len = compressBound(bytes);
    uint8_t *out = malloc(out_len);
    compress2(out, &out_len, in, bytes, 6);
    free(in);
    free(out);
    return (double)bytes / (double)out_len;
}

static void bench_state(const char *label, TgModel *m, const char *dir, int repeats) {
    TgTrainerState st = {.step = 1, .seed = 1, .best_val_loss = INFINITY};
    TgCheckpointSource src = tg_checkpoint_source_of(m, 1, &st);
    const TgParamStore *ps = &m->params;
    size_t raw_floats = 3 * ps->total;

    /* what a background save costs the training loop: copying into the snapshot buffer */
    float *snapshot = malloc(raw_floats * sizeof(float));
    double snapshot_s[2], t0 = 0;
    for (int pass = 0; pass < 2; pass++) { /* the first copy also pays the page faults */
        t0 = tg_clock_seconds();
        memcpy(snapshot, ps->data, ps->total * sizeof(float));
        memcpy(snapshot + ps->total, ps->m, ps->total * sizeof(float));
        memcpy(snapshot + 2 * ps->total, ps->v, ps->total * sizeof(float));
        snapshot_s[pass] = tg_clock_seconds() - t0;
    }
    free(snapshot);

    printf("\n### %s\n\n", label);
    printf("Snapshot copy of %.1f MB (the pause a background save costs training): %.1f ms into the saver's "
           "pre-touched buffer; %.1f ms into a fresh one (page faults)\n\n",
           (double)raw_floats * 4 / 1e6, 1e3 * snapshot_s[1], 1e3 * snapshot_s[0]);
    printf("Per buffer, deflate level 6, raw/compressed: weights %.3f -> %.3f shuffled, AdamW m %.3f -> %.3f, AdamW v %.3f -> %.3f\n\n",
           buffer_ratio(ps->data, ps->total, false), buffer_ratio(ps->data, ps->total, true),
           buffer_ratio(ps->m, ps->total, false), buffer_ratio(ps->m, ps->total, true),
           buffer_ratio(ps->v, ps->total, false), buffer_ratio(ps->v, ps->total, true));
    printf("| variant | file MB | ratio | save s (compress+write+fsync) | load s (inflate+verify) |\n");
    printf("|---|---:|---:|---:|---:|\n");
    char path[4200];
    snprintf(path, sizeof path, "%s/ckpt_bench.tgck", dir);
    for (int shuffle = 0; shuffle < 2; shuffle++)
        for (int li = 0; li < 2; li++) {
            TgCheckpointWriteOptions o = {.level = li == 0 ? 1 : 6, .shuffle = shuffle};
            double best_save = INFINITY, best_load = INFINITY;
            int64_t bytes = 0, raw = 0;
            for (int r = 0; r < repeats; r++) {
                t0 = tg_clock_seconds();
                if (tg_checkpoint_write_with(path, &src, &o, &bytes) != TG_OK) die("write");
                best_save = fmin(best_save, tg_clock_seconds() - t0);
                TgModel copy;
                tg_model_build(&copy, &m->cfg);
                TgCheckpointInfo info;
                t0 = tg_clock_seconds();
                if (tg_checkpoint_load(path, &copy, &info) != TG_OK) die("load");
                best_load = fmin(best_load, tg_clock_seconds() - t0);
                raw = info.raw_bytes;
                if (memcmp(copy.params.data, ps->data, ps->total * sizeof(float)) != 0) die("round trip differs");
                tg_model_free(&copy);
            }
            printf("| %s, level %d | %.1f | %.3f | %.2f | %.2f |\n", shuffle ? "shuffled" : "plain", o.level,
                   (double)bytes / 1e6, (double)raw / (double)bytes, best_save, best_load);
            fflush(stdout);
        }
    unlink(path);
}

int main(int argc, char **argv) {
    int steps = 10, threads = 2, repeats = 2;
    const char *dir = "/tmp";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) dir = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: ckpt_bench [--steps N (10)] [--dir DIR (/tmp)] [--threads N (2)] [--repeats N (2)]\n");
            return 2;
        }
    }
    if (steps < 0 || threads < 1 || repeats < 1) {
        fprintf(stderr, "ckpt_bench: --steps must be >= 0, --threads and --repeats >= 1\n");
        return 2;
    }
    TgModelConfig cfg;
    if (tg_model_preset("minimind-26m", &cfg) != TG_OK) die("preset");
    TgModel m;
    tg_model_build(&m, &cfg);
    tg_model_init_weights(&m, 1337);
    printf("## Checkpoints at the minimind-26m shape: %lld parameters, %.1f MB raw (weights + AdamW m + v)\n",
           (long long)tg_model_param_count(&m), 3.0 * (double)m.params.total * 4 / 1e6);
    printf("\nTimes: best of %d, writing to %s.\n", repeats, dir);
    bench_state("Random init: N(0, 0.02) weights, AdamW moments all zero", &m, dir, repeats);
    if (steps > 0) {
        train_steps(&m, steps, threads);
        char label[128];
        snprintf(label, sizeof label, "After %d AdamW steps (lr 3e-3)", steps);
        bench_state(label, &m, dir, repeats);
    }
    tg_model_free(&m);
    return 0;
}
