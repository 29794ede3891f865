/* The kernel tables and the active path (kernels.h); what the CPU can run is lib/cpu.c's. */
#include "lib/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#define TG_HAVE_X86_KERNELS 1
#else
#define TG_HAVE_X86_KERNELS 0
#endif

/* The tables, one per path, defined by lib/isa/table.c compiled per path. */
extern const TgKernels tg_isa_kernels_generic;
#if TG_HAVE_X86_KERNELS
extern const TgKernels tg_isa_kernels_avx2;
extern const TgKernels tg_isa_kernels_avx512;
extern const TgKernels tg_isa_kernels_avx512bf16;
extern const TgKernels tg_isa_kernels_amx;
#endif

const TgKernels *tg_kernels_of(TgIsa isa) {
    switch (isa) {
    case TG_ISA_GENERIC: return &tg_isa_kernels_generic;
#if TG_HAVE_X86_KERNELS
    case TG_ISA_AVX2: return &tg_isa_kernels_avx2;
    case TG_ISA_AVX512: return &tg_isa_kernels_avx512;
    case TG_ISA_AVX512BF16: return &tg_isa_kernels_avx512bf16;
    case TG_ISA_AMX: return &tg_isa_kernels_amx;
#endif
    default: return NULL;
    }
}

bool tg_isa_supported(TgIsa isa) { return tg_kernels_of(isa) && tg_cpu_runs(isa); }

TgIsa tg_isa_best(void) {
    for (int isa = TG_ISA_COUNT - 1; isa > TG_ISA_GENERIC; isa--)
        if (tg_isa_supported((TgIsa)isa)) return (TgIsa)isa;
    return TG_ISA_GENERIC;
}

/* The active table; NULL until the first tg_isa_init, tg_isa_set or kernel call. Written
 * between ops only; an atomic pointer so that the first kernel calls, which may come from
 * several pool threads at once, read a whole value. */
static _Atomic(const TgKernels *) active;

TgStatus tg_isa_set(TgIsa isa) {
    if (!tg_isa_supported(isa)) {
        char supported[64] = "";
        for (int i = TG_ISA_COUNT - 1; i >= 0; i--)
            if (tg_isa_supported((TgIsa)i))
                snprintf(supported + strlen(supported), sizeof supported - strlen(supported), "%s%s",
                         supported[0] ? ", " : "", tg_isa_name((TgIsa)i));
        return tg_fail(TG_ERR_ARG, "kernel path %s needs more than this CPU (%s) has; it runs: %s", tg_isa_name(isa),
                       tg_cpu_name(), supported);
    }
    atomic_store_explicit(&active, tg_kernels_of(isa), memory_order_release);
    return TG_OK;
}

TgStatus tg_isa_init(void) {
    const char *want = getenv("TAPEGRAD_ISA");
    if (!want || !want[0]) return tg_isa_set(tg_isa_best());
    for (int i = 0; i < TG_ISA_COUNT; i++)
        if (strcmp(want, tg_isa_name((TgIsa)i)) == 0) {
            TgStatus st = tg_isa_set((TgIsa)i);
            return st == TG_OK ? TG_OK : tg_fail_context(st, "TAPEGRAD_ISA=%s", want);
        }
    return tg_fail(TG_ERR_ARG, "TAPEGRAD_ISA=%s: unknown kernel path; use generic, avx2, avx512, avx512bf16 or amx (or unset it)", want);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_from_environment(void) {
    if (atomic_load_explicit(&active, memory_order_acquire)) return;   /* set explicitly already */
    if (tg_isa_init() == TG_OK) return;
    /* a library user's environment asks for a path this CPU cannot run: nothing sensible to
     * compute with, and no caller to hand a status to */
    tg_abort_at(__FILE__, __LINE__, "%s", tg_error_message());
}

const TgKernels *tg_kernels(void) {
    const TgKernels *k = atomic_load_explicit(&active, memory_order_acquire);
    if (__builtin_expect(k != NULL, 1)) return k;
    pthread_once(&init_once, init_from_environment);
    return atomic_load_explicit(&active, memory_order_acquire);
}

TgIsa tg_isa_active(void) { return tg_kernels()->isa; }

/* ---- the multiply-add ceiling ---- */

enum { PEAK_MAX_THREADS = 256 };

typedef struct {
    const TgKernels *kernels;
    void (*loop)(int64_t iters, float *sink);   /* fma_loop or bf16_loop */
    double loop_flops;
    int64_t iters;
    float sink[PEAK_MAX_THREADS];
    double gflops[PEAK_MAX_THREADS];   /* per thread: its FLOPs over the CPU time it was given */
} PeakJob;

static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void peak_range(void *ctx, int64_t begin, int64_t end, int thread) {
    PeakJob *job = ctx;
    double t0 = thread_cpu_seconds();
    for (int64_t i = begin; i < end; i++) job->loop(job->iters, &job->sink[thread]);
    double spent = thread_cpu_seconds() - t0;
    job->gflops[thread] = spent > 0 ? (double)(end - begin) * (double)job->iters * job->loop_flops / spent / 1e9 : 0;
}

/* Each thread's rate is taken over its own CPU time, not the wall clock: when another process
 * shares the cores, a thread that waits for one loses wall time but no CPU time, so the ceiling
 * stays that of the hardware (the figure a quiet machine gives) instead of halving. */
static double peak_gflops(TgPool *pool, double seconds, bool bf16) {
    int threads = tg_pool_threads(pool);
    TG_CHECK(threads <= PEAK_MAX_THREADS, "tg_peak_gflops: %d threads", threads);
    PeakJob *job = tg_calloc(1, sizeof *job);
    job->kernels = tg_kernels();
    job->loop = bf16 ? job->kernels->bf16_loop : job->kernels->fma_loop;
    job->loop_flops = bf16 ? job->kernels->bf16_loop_flops : job->kernels->fma_loop_flops;
    job->iters = 1 << 12;
    /* grow a round until it takes a tenth of the time, then keep the fastest of the rounds (the
     * first ones also bring the cores up to speed) */
    double best = 0.0, spent = 0.0, t0 = thread_cpu_seconds();
    while (spent < seconds || best == 0.0) {
        tg_pool_parallel_for(pool, threads, peak_range, job);
        double round = thread_cpu_seconds() - t0;
        spent += round;
        t0 += round;
        double gflops = 0.0;
        for (int t = 0; t < threads; t++) gflops += job->gflops[t];
        if (round < seconds / 10 && job->iters < ((int64_t)1 << 40)) job->iters *= 2;
        else if (gflops > best) best = gflops;
    }
    free(job);
    return best;
}

double tg_peak_gflops(TgPool *pool, double seconds) { return peak_gflops(pool, seconds, false); }
double tg_peak_bf16_gflops(TgPool *pool, double seconds) { return peak_gflops(pool, seconds, true); }
