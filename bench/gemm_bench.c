/* GEMM kernels per path on the models' shapes, single-threaded: tapegrad's blocked kernel of each
 * kernel path this CPU runs, and OpenBLAS's, in GFLOP/s of the thread's own CPU time (so another
 * process on the machine slows the wall clock but not the figure), against the path's measured
 * multiply-add ceiling on one thread; on a path with bf16 instructions (avx512bf16, amx) also its bf16
 * GEMM (operands rounded to bf16, fp32 sums) against that instruction's ceiling. Built with the
 * project, never run by ctest.
 *
 *   build/gemm_bench                 # both models' shapes
 *   build/gemm_bench small           # one model's
 *   build/gemm_bench minimind-26m 15 # best of 15 runs (default 5): on a machine whose neighbours
 *                                    # share its L3 and memory, more runs find the quiet moments
 *   build/gemm_bench minimind-26m 5 160  # with k slices of 160 (the plan's kc otherwise), as
 *                                    # `train --gemm-kc 160` would run
 *   TAPEGRAD_ISA=avx2 build/gemm_bench  # one path only
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "lib/blas.h"
#include "lib/gemm_plan.h"
#include "lib/cpu.h"
#include "lib/kernels.h"
#include "tapegrad/rng.h"

typedef struct {
    const char *model, *what;
    bool ta, tb;
    int64_t m, n, k;
} Shape;

/* Y = X W^T (NT), dX = dY W (NN), dW = dY^T X (TN), 2048 tokens per step */
static const Shape shapes[] = {
    {"small", "qkvo/w2 fwd   Y = X W^T", false, true, 2048, 128, 128},
    {"small", "w1/w3 fwd     Y = X W^T", false, true, 2048, 352, 128},
    {"small", "w2 fwd        Y = H W^T", false, true, 2048, 128, 352},
    {"small", "w1/w3 dX      dY W", false, false, 2048, 128, 352},
    {"small", "w1/w3 dW      dY^T X", true, false, 352, 128, 2048},
    {"small", "qkvo dW       dY^T X", true, false, 128, 128, 2048},
    {"minimind-26m", "q/o fwd       Y = X W^T", false, true, 2048, 512, 512},
    {"minimind-26m", "k/v fwd       Y = X W^T", false, true, 2048, 128, 512},
    {"minimind-26m", "w1/w3 fwd     Y = X W^T", false, true, 2048, 1408, 512},
    {"minimind-26m", "w2 fwd        Y = H W^T", false, true, 2048, 512, 1408},
    {"minimind-26m", "head fwd      Y = X E^T", false, true, 2048, 6400, 512},
    {"minimind-26m", "head dX       dY E", false, false, 2048, 512, 6400},
    {"minimind-26m", "head dE       dY^T X", true, false, 6400, 512, 2048},
    {"minimind-26m", "w1/w3 dX      dY W", false, false, 2048, 512, 1408},
    {"minimind-26m", "w1/w3 dW      dY^T X", true, false, 1408, 512, 2048},
    {"minimind-26m", "q/o dW        dY^T X", true, false, 512, 512, 2048},
};

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef void (*GemmFn)(bool, bool, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *, int64_t,
                       float, float *, int64_t);

static int rounds = 5;

/* best of `rounds` runs of at least 0.1 s of CPU each */
static double gflops_of(GemmFn gemm, const Shape *s, const float *a, const float *b, float *c) {
    int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k, best = 0;
    gemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);   /* warm-up, packing buffers */
    for (int r = 0; r < rounds; r++) {
        int reps = 0;
        double t0 = cpu_now(), t;
        do {
            gemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
            reps++;
        } while ((t = cpu_now() - t0) < 0.1);
        if (reps * flops / t / 1e9 > best) best = reps * flops / t / 1e9;
    }
    return best;
}

int main(int argc, char **argv) {
    const char *only = argc > 1 && strcmp(argv[1], "all") != 0 ? argv[1] : NULL;
    if (argc > 2) rounds = atoi(argv[2]) > 0 ? atoi(argv[2]) : 5;
    if (argc > 3 && tg_gemm_plan_set_kc(atoll(argv[3])) != TG_OK) {
        fprintf(stderr, "gemm_bench: %s\n", tg_error_message());
        return 2;
    }
    const char *one_path = getenv("TAPEGRAD_ISA");
    printf("CPU: %s; one thread; GFLOP/s of thread CPU time, best of %d; %s, kernel %s\n", tg_cpu_name(), rounds,
           openblas_get_config(), openblas_get_corename());
    TgIsa paths[TG_ISA_COUNT];
    double peaks[TG_ISA_COUNT], bf16_peaks[TG_ISA_COUNT];
    int n_paths = 0;
    for (int i = TG_ISA_COUNT - 1; i >= 0; i--)
        if (tg_isa_supported((TgIsa)i) && (!one_path || !one_path[0] || strcmp(one_path, tg_isa_name((TgIsa)i)) == 0)) {
            tg_isa_set((TgIsa)i);
            paths[n_paths] = (TgIsa)i;
            peaks[n_paths] = tg_peak_gflops(NULL, 0.2);
            bf16_peaks[n_paths] = tg_kernels()->bf16_native ? tg_peak_bf16_gflops(NULL, 0.2) : 0;
            TgGemmPlan plan = tg_gemm_plan();
            char plan_text[256];
            tg_gemm_plan_describe(&plan, plan_text, sizeof plan_text);
            printf("  %s multiply-add ceiling: %.1f GFLOP/s", tg_isa_name((TgIsa)i), peaks[n_paths]);
            if (bf16_peaks[n_paths] > 0) printf(", bf16 ceiling %.1f GFLOP/s", bf16_peaks[n_paths]);
            printf("; plan: %s\n", plan_text);
            n_paths++;
        }
    printf("\n| model | product | m | n | k |");
    for (int p = 0; p < n_paths; p++) printf(" %s |", tg_isa_name(paths[p]));
    int bf16_columns = 0;
    for (int p = 0; p < n_paths; p++)
        if (bf16_peaks[p] > 0) printf(" %s bf16 |", tg_isa_name(paths[p])), bf16_columns++;
    printf(" OpenBLAS |\n|---|---|---:|---:|---:|");
    for (int p = 0; p <= n_paths + bf16_columns; p++) printf("---:|");
    printf("\n");
    TgRng rng;
    tg_rng_seed(&rng, 1);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const Shape *s = &shapes[i];
        if (only && strcmp(only, s->model) != 0) continue;
        float *a = malloc((size_t)(s->m * s->k) * sizeof(float)), *b = malloc((size_t)(s->k * s->n) * sizeof(float));
        float *c = malloc((size_t)(s->m * s->n) * sizeof(float));
        tg_rng_fill_uniform(&rng, a, (size_t)(s->m * s->k), -1, 1);
        tg_rng_fill_uniform(&rng, b, (size_t)(s->k * s->n), -1, 1);
        printf("| %s | %s (%c%c) | %lld | %lld | %lld |", s->model, s->what, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N',
               (long long)s->m, (long long)s->n, (long long)s->k);
        for (int p = 0; p < n_paths; p++) {
            tg_isa_set(paths[p]);
            double g = gflops_of(tg_sgemm, s, a, b, c);
            printf(" %.0f (%.0f%%) |", g, 100 * g / peaks[p]);
            fflush(stdout);
        }
        for (int p = 0; p < n_paths; p++) {
            if (bf16_peaks[p] <= 0) continue;
            tg_isa_set(paths[p]);
            double g = gflops_of(tg_bf16gemm, s, a, b, c);
            printf(" %.0f (%.0f%%) |", g, 100 * g / bf16_peaks[p]);
            fflush(stdout);
        }
        printf(" %.0f |\n", gflops_of(tg_sgemm_openblas, s, a, b, c));
        free(a), free(b), free(c);
    }
    return 0;
}
