#include "lib/cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#define TG_HAVE_X86_KERNELS 1
#else
#define TG_HAVE_X86_KERNELS 0
#endif

/* The tables, one per path, defined by lib/isa/table.c compiled per path. */
extern const TgKernels tg_kernels_generic;
#if TG_HAVE_X86_KERNELS
extern const TgKernels tg_kernels_avx2;
extern const TgKernels tg_kernels_avx512;
#endif

static const char *const isa_names[TG_ISA_COUNT] = {"generic", "avx2", "avx512"};

const char *tg_isa_name(tg_isa isa) { return (unsigned)isa < TG_ISA_COUNT ? isa_names[isa] : "unknown"; }

const TgKernels *tg_kernels_of(tg_isa isa) {
    switch (isa) {
    case TG_ISA_GENERIC: return &tg_kernels_generic;
#if TG_HAVE_X86_KERNELS
    case TG_ISA_AVX2: return &tg_kernels_avx2;
    case TG_ISA_AVX512: return &tg_kernels_avx512;
#endif
    default: return NULL;
    }
}

bool tg_isa_supported(tg_isa isa) {
    if (!tg_kernels_of(isa)) return false;
#if TG_HAVE_X86_KERNELS
    /* __builtin_cpu_supports reports a feature only when the operating system also saves the
     * registers it needs (xgetbv: YMM state for AVX2, opmask and ZMM state for AVX-512). */
    __builtin_cpu_init();
    switch (isa) {
    case TG_ISA_GENERIC: return true;
    case TG_ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case TG_ISA_AVX512:
        return tg_isa_supported(TG_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq");
    }
    return false;
#else
    return isa == TG_ISA_GENERIC;
#endif
}

tg_isa tg_isa_best(void) {
    for (int isa = TG_ISA_COUNT - 1; isa > TG_ISA_GENERIC; isa--)
        if (tg_isa_supported((tg_isa)isa)) return (tg_isa)isa;
    return TG_ISA_GENERIC;
}

/* The active table; NULL until the first tg_isa_init, tg_isa_set or kernel call. Written
 * between ops only; an atomic pointer so that the first kernel calls, which may come from
 * several pool threads at once, read a whole value. */
static _Atomic(const TgKernels *) active;

TgStatus tg_isa_set(tg_isa isa) {
    if (!tg_isa_supported(isa)) {
        char supported[64] = "";
        for (int i = TG_ISA_COUNT - 1; i >= 0; i--)
            if (tg_isa_supported((tg_isa)i))
                snprintf(supported + strlen(supported), sizeof supported - strlen(supported), "%s%s",
                         supported[0] ? ", " : "", isa_names[i]);
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
        if (strcmp(want, isa_names[i]) == 0) {
            TgStatus st = tg_isa_set((tg_isa)i);
            return st == TG_OK ? TG_OK : tg_fail_context(st, "TAPEGRAD_ISA=%s", want);
        }
    return tg_fail(TG_ERR_ARG, "TAPEGRAD_ISA=%s: unknown kernel path; use generic, avx2 or avx512 (or unset it)", want);
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

tg_isa tg_isa_active(void) { return tg_kernels()->isa; }

/* ---- the CPU's name ---- */

static char cpu_name[128];
static pthread_once_t cpu_name_once = PTHREAD_ONCE_INIT;

static void read_cpu_name(void) {
    char brand[49] = "";
#if defined(__x86_64__)
    unsigned regs[12], eax, ebx, ecx, edx;
    if (__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) && eax >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
        memcpy(brand, regs, 48);
        brand[48] = '\0';
    }
    /* family and model as Linux's /proc/cpuinfo shows them (extended fields folded in) */
    unsigned family = 0, model = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        family = (eax >> 8) & 0xf;
        model = (eax >> 4) & 0xf;
        if (family == 0xf) family += (eax >> 20) & 0xff;
        if (family >= 6) model += ((eax >> 16) & 0xf) << 4;
    }
#endif
    /* the brand string is padded with spaces, at either end depending on the vendor */
    char *start = brand;
    while (*start == ' ') start++;
    size_t len = strlen(start);
    while (len > 0 && start[len - 1] == ' ') start[--len] = '\0';
#if defined(__x86_64__)
    snprintf(cpu_name, sizeof cpu_name, "%s (family %u, model %u)", len ? start : "unnamed x86-64 CPU", family, model);
#else
    snprintf(cpu_name, sizeof cpu_name, "%s", len ? start : "unknown CPU");
#endif
}

const char *tg_cpu_name(void) {
    pthread_once(&cpu_name_once, read_cpu_name);
    return cpu_name;
}

/* ---- the multiply-add ceiling ---- */

enum { PEAK_MAX_THREADS = 256 };

typedef struct {
    const TgKernels *kernels;
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
    for (int64_t i = begin; i < end; i++) job->kernels->fma_loop(job->iters, &job->sink[thread]);
    double spent = thread_cpu_seconds() - t0;
    job->gflops[thread] = spent > 0 ? (double)(end - begin) * (double)job->iters * job->kernels->fma_loop_flops / spent / 1e9 : 0;
}

/* Each thread's rate is taken over its own CPU time, not the wall clock: when another process
 * shares the cores, a thread that waits for one loses wall time but no CPU time, so the ceiling
 * stays that of the hardware (the figure a quiet machine gives) instead of halving. */
double tg_peak_gflops(TgPool *pool, double seconds) {
    int threads = tg_pool_threads(pool);
    TG_CHECK(threads <= PEAK_MAX_THREADS, "tg_peak_gflops: %d threads", threads);
    PeakJob *job = tg_calloc(1, sizeof *job);
    job->kernels = tg_kernels();
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
