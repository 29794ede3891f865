/* `tapegrad bench`: training throughput on random tokens, no data files.
 *
 * One timed step is what a training step does: random tokens, zero the gradients, forward and
 * loss, backward, gradient-norm clip (1.0), AdamW. After the warm-up steps (which also grow the
 * arena to its steady size) every step is timed; the report gives the median, which one
 * preempted step cannot move. FLOPs per token follow ../shared/bench/torch_minimind.py:
 * 6 N + 12 L T dim (N counts the tied embedding once; the causal mask is not discounted). MFU is
 * against the FP32 multiply-add ceiling of the kernel path in use, measured on this machine's
 * threads after the timed steps (lib/cpu.h, tg_peak_gflops).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "../lib/blas.h"
#include "../lib/cpu.h"
#include "../lib/rng.h"
#include "cli.h"
#include "model.h"
#include "optim.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* user + system CPU seconds of the whole process so far */
static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median of n values (sorts them) */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* kilobytes on Linux */
}

typedef struct {
    const char *preset;
    int64_t batch, seq, vocab;
    int threads, steps, warmup;
    const char *ffn, *gemm;
    int64_t seed;
    bool json;
} BenchOptions;

/* The shapes of the comparison with PyTorch: presets plus the batch and vocab it uses. */
static tg_status bench_config(const BenchOptions *o, ModelConfig *c, int64_t *batch) {
    TG_TRY(model_preset(o->preset, c));
    int64_t default_vocab = 0;
    if (strcmp(o->preset, "tiny") == 0) default_vocab = 64, *batch = 4;
    else if (strcmp(o->preset, "small") == 0) default_vocab = 96, *batch = 16;
    else default_vocab = c->vocab, *batch = 8;
    if (!c->vocab) c->vocab = default_vocab;
    if (o->vocab > 0) c->vocab = o->vocab;
    if (o->seq > 0) c->seq_len = o->seq;
    if (o->batch > 0) *batch = o->batch;
    if (o->ffn && strcmp(o->ffn, "relu") == 0) {
        c->ffn = FFN_RELU;
        c->hidden = 4 * c->dim; /* the same parameter count as SwiGLU at 8/3 */
    } else if (o->ffn && strcmp(o->ffn, "swiglu") != 0) {
        return tg_fail(TG_ERR_ARG, "--ffn must be swiglu or relu, got '%s'", o->ffn);
    }
    return model_config_validate(c);
}

typedef struct {
    double step, forward, backward, optimizer; /* seconds */
} StepTimes;

static int run_bench(int argc, char **argv) {
    BenchOptions o = {.preset = "small", .threads = 2, .steps = 7, .warmup = 2, .seed = 1234};
    Flag flags[] = {
        {"--preset", FLAG_STRING, &o.preset, "tiny | small | minimind-26m (default small)", false},
        {"--batch", FLAG_INT64, &o.batch, "sequences per step (tiny 4, small 16, minimind-26m 8)", false},
        {"--seq", FLAG_INT64, &o.seq, "tokens per sequence (the preset's context)", false},
        {"--vocab", FLAG_INT64, &o.vocab, "vocabulary (tiny 64, small 96, minimind-26m 6400)", false},
        {"--ffn", FLAG_STRING, &o.ffn, "swiglu (default) | relu (hidden 4*dim)", false},
        {"--threads", FLAG_INT, &o.threads, "threads (2)", false},
        {"--steps", FLAG_INT, &o.steps, "timed steps, at least 5 (7)", false},
        {"--warmup", FLAG_INT, &o.warmup, "untimed steps first (2)", false},
        {"--gemm", FLAG_STRING, &o.gemm, "pool (default): tapegrad's GEMM kernel on tapegrad's threads | pool-openblas: OpenBLAS's kernel, single-threaded, on tapegrad's threads | openblas: OpenBLAS's kernel and threads", false},
        {"--seed", FLAG_INT64, &o.seed, "seed of weights and tokens (1234)", false},
        {"--json", FLAG_BOOL, &o.json, "print one JSON object", false},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);
    bool help;
    int rc = flags_parse("bench", "[--preset NAME] [--batch B] [--seq T] [--vocab V] [--threads N] [--steps S] [--json]",
                         flags, n_flags, argc, argv, NULL, 0, NULL, &help);
    if (rc || help) return rc;
    if (o.threads < 1 || o.steps < 5 || o.warmup < 0) {
        fprintf(stderr, "tapegrad bench: --threads must be >= 1, --steps >= 5, --warmup >= 0\n");
        return 2;
    }
    tg_gemm_mode gemm_mode = TG_GEMM_POOL;
    const char *gemm_name = o.gemm ? o.gemm : "pool";
    if (strcmp(gemm_name, "openblas") == 0) gemm_mode = TG_GEMM_OPENBLAS;
    else if (strcmp(gemm_name, "pool-openblas") == 0) gemm_mode = TG_GEMM_POOL_OPENBLAS;
    else if (strcmp(gemm_name, "pool") != 0) {
        fprintf(stderr, "tapegrad bench: --gemm must be pool, pool-openblas or openblas, got '%s'\n", gemm_name);
        return 2;
    }
    ModelConfig cfg;
    int64_t B = 0;
    if (bench_config(&o, &cfg, &B) != TG_OK) {
        fprintf(stderr, "tapegrad bench: %s\n", tg_error_message());
        return 2;
    }
    int64_t T = cfg.seq_len;

    tg_blas_set_gemm_mode(gemm_mode);
    tg_blas_set_threads(o.threads);
    Model model;
    model_build(&model, &cfg);
    model_init_weights(&model, (uint64_t)o.seed);
    Pool *pool = pool_create(o.threads);
    Arena arena;
    arena_init(&arena, 0);
    Tape tape;
    tape_init(&tape, &arena, pool);
    AdamWConfig adamw = adamw_defaults();
    Rng rng;
    rng_seed(&rng, (uint64_t)o.seed + 1);
    int32_t *tokens = tg_malloc((size_t)(B * (T + 1)) * sizeof(int32_t));
    int32_t *inputs = tg_malloc((size_t)(B * T) * sizeof(int32_t));
    int32_t *targets = tg_malloc((size_t)(B * T) * sizeof(int32_t));

    int n_total = o.warmup + o.steps;
    StepTimes *times = tg_calloc((size_t)n_total, sizeof *times);
    double first_loss = 0, last_loss = 0;
    double cpu_at_timed_start = 0;
    for (int s = 0; s < n_total; s++) {
        if (s == o.warmup) cpu_at_timed_start = cpu_seconds();
        double t0 = now_s();
        for (int64_t i = 0; i < B * (T + 1); i++) tokens[i] = (int32_t)rng_below(&rng, (uint64_t)cfg.vocab);
        for (int64_t b = 0; b < B; b++) {
            memcpy(inputs + b * T, tokens + b * (T + 1), (size_t)T * sizeof(int32_t));
            memcpy(targets + b * T, tokens + b * (T + 1) + 1, (size_t)T * sizeof(int32_t));
        }
        params_zero_grad(&model.params);
        double t1 = now_s();
        Tensor *loss = model_loss(&model, &tape, inputs, targets, B, T, NULL);
        double t2 = now_s();
        tape_backward(&tape, loss);
        double t3 = now_s();
        if (s == 0) first_loss = loss->data[0];
        last_loss = loss->data[0];
        tape_reset(&tape);
        clip_grad_norm_pool(&model.params, 1.0, pool);
        adamw_step(&model.params, &adamw, s + 1, 5e-4, pool);
        double t4 = now_s();
        times[s] = (StepTimes){t4 - t0, t2 - t1, t3 - t2, (t4 - t3) + (t1 - t0)};
    }

    /* CPU time per step over all threads: unlike wall time, other processes taking the cores
     * barely change it, so it is the steadier figure for comparing two builds on a busy machine */
    double cpu_per_step = (cpu_seconds() - cpu_at_timed_start) / o.steps;
    double *v = tg_malloc((size_t)o.steps * sizeof(double));
    StepTimes med;
    double *fields[4] = {&med.step, &med.forward, &med.backward, &med.optimizer};
    double mean_step = 0;
    for (int f = 0; f < 4; f++) {
        for (int s = 0; s < o.steps; s++) {
            const StepTimes *st = &times[o.warmup + s];
            v[s] = f == 0 ? st->step : f == 1 ? st->forward : f == 2 ? st->backward : st->optimizer;
            if (f == 0) mean_step += v[s] / o.steps;
        }
        *fields[f] = median(v, o.steps);
    }
    int64_t n_params = model_param_count(&model);
    double flops_per_token = 6.0 * (double)n_params + 12.0 * (double)(cfg.n_layers * T * cfg.dim);
    double tokens_per_s = (double)(B * T) / med.step;
    double gflops = tokens_per_s * flops_per_token / 1e9;
    double peak_gflops = tg_peak_gflops(pool, 0.3);
    double mfu = gflops / peak_gflops;
    double rss = peak_rss_mb();
    double arena_mb = (double)arena.peak / (1024.0 * 1024.0);
    const char *ffn_name = cfg.ffn == FFN_SWIGLU ? "swiglu" : "relu";

    if (o.json) {
        printf("{\"preset\": \"%s\", \"dim\": %lld, \"layers\": %lld, \"heads\": %lld, \"kv_heads\": %lld, "
               "\"hidden\": %lld, \"vocab\": %lld, \"seq\": %lld, \"batch\": %lld, \"ffn\": \"%s\", "
               "\"threads\": %d, \"gemm\": \"%s\", \"steps\": %d, \"warmup\": %d, \"params\": %lld, "
               "\"flops_per_token\": %.0f, \"tokens_per_s\": %.1f, \"tokens_per_s_mean\": %.1f, "
               "\"ms_per_step\": %.3f, \"ms_fwd\": %.3f, \"ms_bwd\": %.3f, \"ms_opt\": %.3f, "
               "\"achieved_gflops\": %.2f, \"mfu\": %.4f, \"peak_rss_mb\": %.1f, \"arena_peak_mb\": %.1f, "
               "\"cpu_ms_per_step\": %.3f, \"loss_first\": %.9g, \"loss_last\": %.9g, \"isa\": \"%s\", "
               "\"cpu\": \"%s\", \"peak_gflops\": %.1f}\n",
               o.preset, (long long)cfg.dim, (long long)cfg.n_layers, (long long)cfg.n_heads,
               (long long)cfg.n_kv_heads, (long long)cfg.hidden, (long long)cfg.vocab, (long long)T, (long long)B,
               ffn_name, o.threads, gemm_name, o.steps, o.warmup, (long long)n_params, flops_per_token,
               tokens_per_s, (double)(B * T) / mean_step, 1e3 * med.step, 1e3 * med.forward,
               1e3 * med.backward, 1e3 * med.optimizer, gflops, mfu, rss, arena_mb, 1e3 * cpu_per_step, first_loss, last_loss,
               tg_isa_name(tg_isa_active()), tg_cpu_name(), peak_gflops);
    } else {
        printf("model: %s, %lld parameters (dim %lld, %lld layers, %lld/%lld heads, %s hidden %lld, vocab %lld)\n",
               o.preset, (long long)n_params, (long long)cfg.dim, (long long)cfg.n_layers, (long long)cfg.n_heads,
               (long long)cfg.n_kv_heads, ffn_name, (long long)cfg.hidden, (long long)cfg.vocab);
        printf("batch %lld x seq %lld = %lld tokens/step, %d threads (GEMMs: %s), %d warm-up + %d timed steps\n",
               (long long)B, (long long)T, (long long)(B * T), o.threads, gemm_name, o.warmup, o.steps);
        printf("kernels: %s on %s\n", tg_isa_name(tg_isa_active()), tg_cpu_name());
        printf("tokens/s      %10.0f   (median step; mean step gives %.0f)\n", tokens_per_s,
               (double)(B * T) / mean_step);
        printf("ms per step   %10.2f   forward %.2f, backward %.2f, optimizer %.2f (medians)\n", 1e3 * med.step,
               1e3 * med.forward, 1e3 * med.backward, 1e3 * med.optimizer);
        printf("CPU ms/step   %10.2f   (all threads, mean)\n", 1e3 * cpu_per_step);
        printf("GFLOP/s       %10.1f   (%.0f FLOPs/token = 6N + 12 L T dim)\n", gflops, flops_per_token);
        printf("MFU           %10.1f %% of %.0f GFLOP/s (the %s multiply-add ceiling, measured on %d threads)\n",
               100.0 * mfu, peak_gflops, tg_isa_name(tg_isa_active()), o.threads);
        printf("peak RSS      %10.1f MB (step arena peak %.1f MB)\n", rss, arena_mb);
        printf("loss          %10.4f -> %.4f (ln V = %.4f)\n", first_loss, last_loss, log((double)cfg.vocab));
    }
    free(v);
    free(times);
    free(tokens);
    free(inputs);
    free(targets);
    tape_free(&tape);
    arena_free(&arena);
    pool_destroy(pool);
    model_free(&model);
    return 0;
}

const Subcommand cmd_bench = {"bench", "training throughput on random tokens: tokens/s, ms per phase, peak RSS, MFU",
                              run_bench};
