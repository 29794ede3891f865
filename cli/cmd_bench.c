/* `tapegrad bench`: training throughput on random tokens, no data files.
 *
 * One timed step is what a training step does: random tokens, zero the gradients, forward and
 * loss, backward, gradient-norm clip (1.0), AdamW. After the warm-up steps (which also grow the
 * arena to its steady size) every step is timed; the report gives the median, which one
 * preempted step cannot move. FLOPs per token are counted as the PyTorch reference
 * (bench/torch_reference.py) counts them: 6 N + 12 L T dim (N counts the tied embedding once;
 * the causal mask is not discounted). MFU is against the ceiling of the kernel path in use,
 * measured on this machine's threads after the timed steps (lib/cpu.h): the FP32 multiply-add's
 * (tg_peak_gflops), or with --precision bf16 the bf16 GEMM's instruction's
 * (tg_peak_bf16_gflops: vdpbf16ps, AMX's tdpbf16ps), every FLOP counted at it although norms,
 * attention and the optimizer stay fp32.
 *
 * Under mpirun every rank runs the same step on its own random tokens and the gradients are
 * summed over the ranks as training sums them (lib/dist.h), so tokens/s counts every rank's
 * tokens. The sum is timed apart ("comm"), after a barrier that measures how long the ranks wait
 * for the slowest one ("wait"); --reduce allreduce times MPI_Allreduce instead, whose order of
 * additions MPI leaves open, to show what the fixed order costs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli/cli.h"
#include "support/clock.h"
#include "lib/cpu.h"
#include "lib/gemm_plan.h"
#include "lib/kernels.h"
#include "support/json_write.h"
#include "tapegrad/model.h"
#include "tapegrad/optim.h"
#include "tapegrad/rng.h"
#include "lib/dist.h"
#include "run/memory_plan.h"
#include "run/train_options.h"

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
static double median(double *v, int64_t n) {
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* kilobytes on Linux */
}

typedef struct {
    TgPreset preset;
    int64_t batch, seq, vocab;
    int threads;
    int64_t steps, warmup;
    TgFfnKind ffn;
    const char *gemm, *reduce;
    TgPrecision precision;
    int64_t seed;
    bool json;
} BenchOptions;

/* The shapes each preset is benchmarked at, here and by the PyTorch reference
 * (bench/torch_model.py's PRESETS, which tests/test_parity.c holds to the presets): its batch,
 * and for a preset without a vocabulary of its own, the vocabulary of a char tokenizer (0: the
 * preset's). */
static const struct {
    int64_t batch, vocab;
} bench_shapes[] = {
    [TG_PRESET_TINY] = {4, 64},
    [TG_PRESET_SMALL] = {16, 96},
    [TG_PRESET_MINIMIND_26M] = {8, 0},
    [TG_PRESET_MINIMIND_3] = {8, 0},
};
_Static_assert(sizeof bench_shapes / sizeof bench_shapes[0] == TG_PRESET_COUNT, "bench shapes for every preset");

#define B_ BenchOptions
static TgOptSpec specs[] = {
    TG_FLAG_PRESET(B_, preset, "model preset", 0, NULL),
    TG_FLAG_BATCH(B_, batch, "sequences per step", 0, NULL /* bench_defaults_text */),
    TG_FLAG_SEQ(B_, seq, "tokens per sequence", 0, "the preset's context"),
    TG_FLAG_VOCAB(B_, vocab, "vocabulary", 0, NULL /* bench_defaults_text */),
    TG_FLAG_FFN(B_, ffn, "feed-forward block (relu: the hidden size of SwiGLU's parameter count)", 0, NULL),
    TG_FLAG_THREADS(B_, threads, "threads", 0, NULL),
    TG_FLAG_STEPS(B_, steps, "timed steps (their median is reported)", 0, NULL),
    TG_FLAG_WARMUP(B_, warmup, "untimed steps first", 0, NULL),
    TG_OPT(B_, gemm, "--gemm", TG_OPT_STRING,
        "pool: tapegrad's GEMM kernel on tapegrad's threads | pool-openblas: OpenBLAS's kernel, single-threaded, on "
        "tapegrad's threads | openblas: OpenBLAS's kernel and threads",
        TG_OPT_ANY, "pool|pool-openblas|openblas", 0, "pool"),
    TG_OPT(B_, reduce, "--reduce", TG_OPT_STRING,
        "under mpirun, the gradient sum: ordered (training's: fixed rank order) | allreduce (MPI_Allreduce)", TG_OPT_ANY,
        "ordered|allreduce", 0, "ordered"),
    TG_FLAG_PRECISION(B_, precision,
                   "the linear layers' products: fp32, or bf16 (operands rounded to bf16, fp32 sums); MFU is then "
                   "against the path's bf16 ceiling",
                   0, "fp32"),
    TG_FLAG_SEED(B_, seed, "seed of weights and tokens", 0, NULL),
    TG_FLAG_JSON(B_, json, "print one JSON object", 0, NULL),
};
#undef B_
static const TgOptTable table = {"bench", "[--preset NAME] [--batch B] [--seq T] [--vocab V] [--threads N] [--steps S] [--json]",
                               specs, (int)(sizeof specs / sizeof specs[0]), 0};

/* "tiny 4, small 16, minimind-26m 8" and "tiny 64, small 96, minimind-26m 6400": the help's
 * defaults of --batch and --vocab, from the tables. */
static void bench_defaults_text(void) {
    static char batch_text[256], vocab_text[256];
    size_t nb = 0, nv = 0;
    for (int p = 0; p < TG_PRESET_COUNT; p++) {
        const char *name = tg_model_preset_name((TgPreset)p);
        TgModelConfig c;
        tg_model_preset(name, &c);
        int64_t vocab = bench_shapes[p].vocab ? bench_shapes[p].vocab : c.vocab;
        nb += (size_t)snprintf(batch_text + nb, sizeof batch_text - nb, "%s%s %lld", p ? ", " : "", name,
                               (long long)bench_shapes[p].batch);
        nv += (size_t)snprintf(vocab_text + nv, sizeof vocab_text - nv, "%s%s %lld", p ? ", " : "", name,
                               (long long)vocab);
    }
    specs[tg_opt_find(&table, "--batch")].default_text = batch_text;
    specs[tg_opt_find(&table, "--vocab")].default_text = vocab_text;
}

/* The shapes of the comparison with PyTorch: the preset, with the batch and vocab it runs. */
static TgStatus bench_config(const BenchOptions *o, TgModelConfig *c, int64_t *batch) {
    TgPreset p = o->preset;
    *c = tg_model_preset_config(p);
    if (!c->vocab) c->vocab = bench_shapes[p].vocab;
    if (o->vocab > 0) c->vocab = o->vocab;
    if (o->seq > 0) c->seq_len = o->seq;
    *batch = o->batch > 0 ? o->batch : bench_shapes[p].batch;
    c->ffn = o->ffn;
    if (c->ffn != TG_FFN_SWIGLU) c->hidden = tg_model_ffn_hidden(c->ffn, c->dim);
    return tg_model_config_validate(c);
}

typedef struct {
    double step, forward, backward, optimizer; /* seconds */
    double wait, comm;                         /* under mpirun: waiting for the other ranks, the gradient sum */
} StepTimes;
enum { STEP_TIME_FIELDS = 6 };

typedef struct {
    StepTimes median;
    double mean_step, cpu_per_step, first_loss, last_loss, arena_peak_mb;
    double peak_gflops;   /* the ceiling MFU is taken against: the precision's (peak_fp32_gflops or the bf16 one) */
    double peak_fp32_gflops;   /* the FP32 multiply-add ceiling of the kernel path, on the bench's threads */
    TgPrecision precision;
    TgGemmMode gemm_mode; /* --gemm */
} BenchResult;

/* The medians (and the mean step) of the timed steps. */
static void bench_medians(const BenchOptions *o, const StepTimes *times, BenchResult *r) {
    double *v = tg_malloc((size_t)o->steps * sizeof(double));
    double *fields[STEP_TIME_FIELDS] = {&r->median.step, &r->median.forward, &r->median.backward,
                                        &r->median.optimizer, &r->median.wait, &r->median.comm};
    r->mean_step = 0;
    for (int f = 0; f < STEP_TIME_FIELDS; f++) {
        for (int64_t s = 0; s < o->steps; s++) {
            const StepTimes *st = &times[s];
            const double values[STEP_TIME_FIELDS] = {st->step, st->forward, st->backward, st->optimizer, st->wait, st->comm};
            v[s] = values[f];
            if (f == 0) r->mean_step += v[s] / (double)o->steps;
        }
        *fields[f] = median(v, o->steps);
    }
    free(v);
}

/* What the timed steps run on: the threads, the step arena and tape, the random tokens, the times. */
typedef struct {
    TgPool *pool;
    TgArena arena;
    TgTape tape;
    TgRng rng;
    float *scratch;                     /* the gradient sum's, on more than one rank */
    int32_t *tokens, *inputs, *targets; /* (B, T + 1), (B, T), (B, T) */
    StepTimes *times;                   /* the timed steps' */
} BenchRun;

/* Everything a step needs, allocated before the first; fails when the arena cannot take a step's
 * size at once. */
static TgStatus bench_run_open(BenchRun *run, const BenchOptions *o, const TgModelConfig *cfg, int64_t B,
                               const TgModel *model, const BenchResult *r) {
    int64_t T = cfg->seq_len;
    run->pool = tg_pool_create(o->threads);
    tg_arena_init(&run->arena, 0);
    /* the step's size at once (checked by bench_memory_check): the warm-up grows nothing */
    TgStatus status = tg_arena_reserve(&run->arena, (size_t)tg_model_activation_bytes(cfg, B, T, o->threads, true));
    tg_tape_init(&run->tape, &run->arena, run->pool);
    tg_tape_set_precision(&run->tape, r->precision);
    tg_tape_set_gemm_mode(&run->tape, r->gemm_mode);
    tg_rng_seed(&run->rng, (uint64_t)o->seed + 1 + (uint64_t)tg_dist_rank()); /* each rank its own tokens */
    run->scratch = tg_dist_ranks() > 1 ? tg_malloc(model->params.total * sizeof(float)) : NULL;
    run->tokens = tg_malloc((size_t)(B * (T + 1)) * sizeof(int32_t));
    run->inputs = tg_malloc((size_t)(B * T) * sizeof(int32_t));
    run->targets = tg_malloc((size_t)(B * T) * sizeof(int32_t));
    run->times = tg_calloc((size_t)o->steps, sizeof *run->times);
    return status;
}

static void bench_run_close(BenchRun *run) {
    free(run->scratch);
    free(run->times);
    free(run->tokens);
    free(run->inputs);
    free(run->targets);
    tg_tape_free(&run->tape);
    tg_arena_free(&run->arena);
    tg_pool_destroy(run->pool);
}

/* B sequences of T + 1 random tokens, as inputs and their next tokens. */
static void random_batch(BenchRun *run, int64_t vocab, int64_t B, int64_t T) {
    for (int64_t i = 0; i < B * (T + 1); i++) run->tokens[i] = (int32_t)tg_rng_below(&run->rng, (uint64_t)vocab);
    for (int64_t b = 0; b < B; b++) {
        memcpy(run->inputs + b * T, run->tokens + b * (T + 1), (size_t)T * sizeof(int32_t));
        memcpy(run->targets + b * T, run->tokens + b * (T + 1) + 1, (size_t)T * sizeof(int32_t));
    }
}

/* Runs warmup + steps training steps on random tokens and times each; the medians go to *r.
 * Fails only when a collective of a multi-rank run does. */
static TgStatus bench_measure(const BenchOptions *o, const TgModelConfig *cfg, int64_t B, TgModel *model, BenchResult *r) {
    int64_t T = cfg->seq_len;
    BenchRun run;
    TgStatus status = bench_run_open(&run, o, cfg, B, model, r);
    TgAdamWConfig adamw = tg_adamw_defaults();
    bool allreduce = o->reduce && strcmp(o->reduce, "allreduce") == 0;
    int64_t n_total = o->warmup + o->steps; /* each at most 2^53: no overflow */
    double cpu_at_timed_start = 0;
    for (int64_t s = 0; status == TG_OK && s < n_total; s++) {
        if (s == o->warmup) cpu_at_timed_start = cpu_seconds();
        double t0 = tg_clock_seconds();
        random_batch(&run, cfg->vocab, B, T);
        tg_params_zero_grad(&model->params);
        double t1 = tg_clock_seconds();
        TgTensor *loss = tg_model_loss(
            model, &run.tape, &(TgBatch){.tokens = run.inputs, .targets = run.targets, .batch = B, .seq = T}, NULL);
        double t2 = tg_clock_seconds();
        tg_tape_backward(&run.tape, loss);
        double t3 = tg_clock_seconds();
        if (s == 0) r->first_loss = loss->data[0];
        r->last_loss = loss->data[0];
        tg_tape_reset(&run.tape);
        TgParamStore *ps = &model->params;
        if ((status = tg_dist_barrier()) != TG_OK) break;
        double t_wait = tg_clock_seconds();
        status = allreduce ? tg_dist_allreduce_floats(ps->grad, ps->total)
                           : tg_dist_sum_floats(ps->grad, ps->total, run.scratch, run.pool);
        if (status != TG_OK) break;
        double t_comm = tg_clock_seconds();
        tg_clip_grad_norm_pool(&model->params, 1.0, run.pool);
        tg_adamw_step(&model->params, &adamw, s + 1, 5e-4, run.pool);
        double t4 = tg_clock_seconds();
        if (s >= o->warmup)
            run.times[s - o->warmup] =
                (StepTimes){t4 - t0, t2 - t1, t3 - t2, (t4 - t_comm) + (t1 - t0), t_wait - t3, t_comm - t_wait};
    }
    /* CPU time per step over all threads: unlike wall time, other processes taking the cores
     * barely change it, so it is the steadier figure for comparing two builds on a busy machine */
    r->cpu_per_step = (cpu_seconds() - cpu_at_timed_start) / (double)o->steps;
    if (status == TG_OK) bench_medians(o, run.times, r);
    r->arena_peak_mb = (double)run.arena.peak / (1024.0 * 1024.0);
    r->peak_fp32_gflops = tg_peak_gflops(run.pool, 0.3);
    r->peak_gflops = r->precision == TG_PRECISION_BF16 ? tg_peak_bf16_gflops(run.pool, 0.3) : r->peak_fp32_gflops;
    bench_run_close(&run);
    return status;
}

/* What the ceiling of MFU is: the instruction of the precision's GEMM on the active path */
static const char *peak_name(TgPrecision precision) {
    if (precision != TG_PRECISION_BF16 || !tg_kernels()->bf16_native) return "fp32 multiply-add";
    return tg_isa_active() == TG_ISA_AMX ? "bf16 AMX tdpbf16ps" : "bf16 vdpbf16ps";
}

/* The figures of a report, the same for its JSON and its text. */
typedef struct {
    int64_t seq, tokens_per_step, n_params;
    const char *gemm_name, *reduce_name, *ffn_name;
    double flops_per_token, tokens_per_s;
    double mb_sent; /* what each rank sends (and receives) in one gradient sum */
    double gflops, mfu, rss;
} BenchFigures;

static BenchFigures bench_figures(const BenchOptions *o, const TgModelConfig *cfg, int64_t B, const TgModel *model,
                                  const BenchResult *r) {
    BenchFigures f = {.seq = cfg->seq_len, .n_params = tg_model_param_count(model)};
    f.tokens_per_step = tg_dist_ranks() * B * f.seq;
    f.gemm_name = o->gemm ? o->gemm : "pool";
    f.reduce_name = tg_dist_ranks() == 1 ? "none" : o->reduce ? o->reduce : "ordered";
    f.flops_per_token = 6.0 * (double)f.n_params + 12.0 * (double)(cfg->n_layers * f.seq * cfg->dim);
    f.tokens_per_s = (double)f.tokens_per_step / r->median.step;
    /* 2 (N - 1) / N of the gradients */
    f.mb_sent = 2.0 * (tg_dist_ranks() - 1) / tg_dist_ranks() * (double)model->params.total * sizeof(float) / 1e6;
    f.gflops = f.tokens_per_s * f.flops_per_token / 1e9;
    f.mfu = f.gflops / r->peak_gflops;
    f.rss = peak_rss_mb();
    f.ffn_name = tg_ffn_kind_name(cfg->ffn);
    return f;
}

/* The GEMM plan and the caches it was made for, as the member "gemm_plan" of the JSON object. */
static void print_json_gemm_plan(void) {
    const TgCaches *caches = tg_cpu_caches();
    TgGemmPlan plan = tg_gemm_plan();
    printf(",\"gemm_plan\":{\"mr\":%d,\"nr\":%d,\"kc\":%lld,\"nc\":%lld,\"mc\":%lld,\"caches\":\"%s\","
           "\"l1d_bytes\":%lld,\"l1d_ways\":%d,\"l2_bytes\":%lld,\"l2_ways\":%d,\"l3_bytes\":%lld,\"l3_ways\":%d}",
           plan.mr, plan.nr, (long long)plan.kc, (long long)plan.nc, (long long)plan.mc, caches->source,
           (long long)caches->l1d.bytes, caches->l1d.ways, (long long)caches->l2.bytes, caches->l2.ways,
           (long long)caches->l3.bytes, caches->l3.ways);
}

/* --json: every figure through the one JSON number writer, so a step timed at 0 or a diverged
 * loss gives null, not inf or nan. */
static void bench_print_json(const BenchOptions *o, const TgModelConfig *cfg, int64_t B, const BenchResult *r,
                             const BenchFigures *f) {
    const StepTimes *med = &r->median;
    printf("{\"preset\":");
    tg_json_write_string(stdout, tg_model_preset_name(o->preset));
    printf(",\"dim\":%lld,\"layers\":%lld,\"heads\":%lld,\"kv_heads\":%lld,\"hidden\":%lld,\"vocab\":%lld,"
           "\"seq\":%lld,\"batch\":%lld,\"ffn\":\"%s\",\"threads\":%d,\"gemm\":",
           (long long)cfg->dim, (long long)cfg->n_layers, (long long)cfg->n_heads, (long long)cfg->n_kv_heads,
           (long long)cfg->hidden, (long long)cfg->vocab, (long long)f->seq, (long long)B, f->ffn_name, o->threads);
    tg_json_write_string(stdout, f->gemm_name);
    printf(",\"steps\":%lld,\"warmup\":%lld,\"params\":%lld", (long long)o->steps, (long long)o->warmup,
           (long long)f->n_params);
    const struct {
        const char *key;
        double value;
    } figures[] = {
        {"flops_per_token", f->flops_per_token},
        {"tokens_per_s", f->tokens_per_s},
        {"tokens_per_s_mean", (double)f->tokens_per_step / r->mean_step},
        {"ms_per_step", 1e3 * med->step},
        {"ms_fwd", 1e3 * med->forward},
        {"ms_bwd", 1e3 * med->backward},
        {"ms_opt", 1e3 * med->optimizer},
        {"achieved_gflops", f->gflops},
        {"mfu", f->mfu},
        {"peak_rss_mb", f->rss},
        {"arena_peak_mb", r->arena_peak_mb},
        {"cpu_ms_per_step", 1e3 * r->cpu_per_step},
        {"loss_first", r->first_loss},
        {"loss_last", r->last_loss},
        {"ms_wait", 1e3 * med->wait},
        {"ms_comm", 1e3 * med->comm},
        {"comm_share", med->comm / med->step},
        {"mb_sent_per_rank", f->mb_sent},
        {"peak_gflops", r->peak_gflops},
        {"peak_fp32_gflops", r->peak_fp32_gflops},
    };
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++)
        tg_json_write_field(stdout, figures[i].key, figures[i].value, 9);
    printf(",\"precision\":\"%s\",\"peak\":", tg_precision_name(r->precision));
    tg_json_write_string(stdout, peak_name(r->precision));
    printf(",\"ranks\":%d,\"reduce\":", tg_dist_ranks());
    tg_json_write_string(stdout, f->reduce_name);
    printf(",\"isa\":");
    tg_json_write_string(stdout, tg_isa_name(tg_isa_active()));
    printf(",\"cpu\":");
    tg_json_write_string(stdout, tg_cpu_name());
    print_json_gemm_plan();
    printf("}\n");
}

static void bench_print_text(const BenchOptions *o, const TgModelConfig *cfg, int64_t B, const BenchResult *r,
                             const BenchFigures *f) {
    const StepTimes *med = &r->median;
    printf("model: %s, %lld parameters (dim %lld, %lld layers, %lld/%lld heads, %s hidden %lld, vocab %lld)\n",
           tg_model_preset_name(o->preset), (long long)f->n_params, (long long)cfg->dim, (long long)cfg->n_layers, (long long)cfg->n_heads,
           (long long)cfg->n_kv_heads, f->ffn_name, (long long)cfg->hidden, (long long)cfg->vocab);
    printf("batch %lld x seq %lld x %d ranks = %lld tokens/step, %d threads (GEMMs: %s), %lld warm-up + %lld timed "
           "steps\n",
           (long long)B, (long long)f->seq, tg_dist_ranks(), (long long)f->tokens_per_step, o->threads, f->gemm_name,
           (long long)o->warmup, (long long)o->steps);
    printf("kernels: %s on %s; precision %s\n", tg_isa_name(tg_isa_active()), tg_cpu_name(),
           tg_precision_name(r->precision));
    TgGemmPlan plan = tg_gemm_plan();
    char plan_text[256];
    tg_gemm_plan_describe(&plan, plan_text, sizeof plan_text);
    printf("GEMM plan: %s\n", plan_text);
    printf("tokens/s      %10.0f   (median step; mean step gives %.0f)\n", f->tokens_per_s,
           (double)f->tokens_per_step / r->mean_step);
    printf("ms per step   %10.2f   forward %.2f, backward %.2f, optimizer %.2f (medians)\n", 1e3 * med->step,
           1e3 * med->forward, 1e3 * med->backward, 1e3 * med->optimizer);
    if (tg_dist_ranks() > 1)
        printf("gradient sum  %10.2f ms (%s, %.1f MB sent per rank, %.1f%% of the step); %.2f ms waiting for the "
               "slowest rank\n",
               1e3 * med->comm, f->reduce_name, f->mb_sent, 100.0 * med->comm / med->step, 1e3 * med->wait);
    printf("CPU ms/step   %10.2f   (all threads, mean)\n", 1e3 * r->cpu_per_step);
    printf("GFLOP/s       %10.1f   (%.0f FLOPs/token = 6N + 12 L T dim)\n", f->gflops, f->flops_per_token);
    printf("MFU           %10.1f %% of %.0f GFLOP/s (the %s path's %s ceiling, measured on %d threads)\n",
           100.0 * f->mfu, r->peak_gflops, tg_isa_name(tg_isa_active()), peak_name(r->precision), o->threads);
    printf("peak RSS      %10.1f MB (step arena peak %.1f MB)\n", f->rss, r->arena_peak_mb);
    printf("loss          %10.4f -> %.4f (ln V = %.4f)\n", r->first_loss, r->last_loss, log((double)cfg->vocab));
}

static void bench_print(const BenchOptions *o, const TgModelConfig *cfg, int64_t B, const TgModel *model,
                        const BenchResult *r) {
    BenchFigures f = bench_figures(o, cfg, B, model, r);
    if (o->json)
        bench_print_json(o, cfg, B, r, &f);
    else
        bench_print_text(o, cfg, B, r, &f);
}

/* The model, a step of B sequences, the tokens and the timed steps' times, before any of it is
 * allocated. */
static TgStatus bench_memory_check(const BenchOptions *o, const TgModelConfig *cfg, int64_t B) {
    TgMemoryPlan plan = {0};
    char subject[64];
    double model = tg_model_memory_bytes(cfg), tokens = (double)B * (double)(cfg->seq_len + 1);
    if (tg_dist_ranks() > 1) model += (double)tg_model_config_param_count(cfg) * sizeof(float); /* the sum's scratch */
    tg_memory_plan_add(&plan, model, "the model", "a smaller --preset or --vocab",
                    "for its weights, gradients and AdamW moments");
    if (o->seq > 0) snprintf(subject, sizeof subject, "--batch %lld --seq %lld", (long long)B, (long long)o->seq);
    else snprintf(subject, sizeof subject, "--batch %lld", (long long)B);
    tg_memory_plan_add_activations(&plan, cfg, B, cfg->seq_len, o->threads, true, subject, "lower --batch or --seq");
    tg_memory_plan_add(&plan, 3 * tokens * sizeof(int32_t), subject, "lower --batch or --seq", "for its random tokens");
    snprintf(subject, sizeof subject, "--steps %lld", (long long)o->steps);
    tg_memory_plan_add(&plan, (double)o->steps * (sizeof(StepTimes) + sizeof(double)), subject, "lower --steps",
                    "for the times of the timed steps");
    return tg_memory_plan_check(&plan);
}

static int run_bench(int argc, char **argv) {
    const BenchOptions defaults = {.preset = TG_TRAIN_DEFAULT_PRESET, .ffn = TG_FFN_SWIGLU,
                                   .threads = TG_TRAIN_DEFAULT_THREADS, .steps = 7, .warmup = 2, .seed = 1234};
    BenchOptions o = defaults;
    bench_defaults_text();
    int rc = cli_parse(&table, &o, &defaults, NULL, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    const char *gemm_name = o.gemm ? o.gemm : "pool";
    BenchResult r = {.gemm_mode = strcmp(gemm_name, "openblas") == 0        ? TG_GEMM_OPENBLAS
                                  : strcmp(gemm_name, "pool-openblas") == 0 ? TG_GEMM_POOL_OPENBLAS
                                                                            : TG_GEMM_POOL};
    TgModelConfig cfg;
    int64_t B = 0;
    TgStatus s = bench_config(&o, &cfg, &B);
    if (s == TG_OK) s = bench_memory_check(&o, &cfg, B);
    if (s != TG_OK) return cli_exit("bench", s);
    if ((s = cli_join_job(TG_DIST_DEFAULT_TIMEOUT_S)) != TG_OK) return cli_exit("bench", s);
    TgModel model;
    tg_model_build(&model, &cfg);
    tg_model_init_weights(&model, (uint64_t)o.seed);
    r.precision = o.precision;
    if (r.precision == TG_PRECISION_BF16 && !tg_kernels()->bf16_native)
        fprintf(stderr, "bench: bf16 on the %s path, which has no bf16 instructions: the products round their operands "
                        "and run the fp32 kernel, slower than fp32\n", tg_isa_name(tg_isa_active()));
    s = bench_measure(&o, &cfg, B, &model, &r);
    if (s == TG_OK) bench_print(&o, &cfg, B, &model, &r);
    tg_model_free(&model);
    tg_dist_close(false);
    return cli_exit("bench", s);
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_bench = {"bench", "training throughput on random tokens: tokens/s, ms per phase, peak RSS, MFU",
                              run_bench, option_tables};
