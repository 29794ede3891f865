/* The pthread pool: every index exactly once, a deterministic partition. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "tapegrad/engine.h"
#include "tapegrad/pool.h"
#include "lib/fpmode.h"

typedef struct {
    unsigned char *visits;
    int64_t *first_of_thread;
    int threads;
} VisitCtx;

static void visit(void *ctx_, int64_t begin, int64_t end, int thread) {
    VisitCtx *ctx = ctx_;
    cr_assert(thread >= 0 && thread < ctx->threads);
    ctx->first_of_thread[thread] = begin;
    for (int64_t i = begin; i < end; i++) ctx->visits[i]++;
}

static void check_visits(int threads, int64_t n) {
    TgPool *pool = tg_pool_create(threads);
    VisitCtx ctx = {calloc((size_t)n + 1, 1), calloc((size_t)threads, sizeof(int64_t)), threads};
    for (int t = 0; t < threads; t++) ctx.first_of_thread[t] = -1;
    tg_pool_parallel_for(pool, n, visit, &ctx);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) wrong += ctx.visits[i] != 1;
    cr_expect_eq(wrong, 0, "n=%lld threads=%d: %lld indices not visited exactly once", (long long)n,
                 threads, (long long)wrong);
    for (int t = 0; t < threads; t++) {
        int64_t begin, end;
        tg_pool_range(n, threads, t, &begin, &end);
        if (end > begin) cr_expect_eq(ctx.first_of_thread[t], begin, "thread %d started elsewhere", t);
        else cr_expect_eq(ctx.first_of_thread[t], -1, "thread %d ran an empty range", t);
    }
    free(ctx.visits);
    free(ctx.first_of_thread);
    tg_pool_destroy(pool);
}

Test(pool, every_index_once_1_thread) {
    int64_t ns[] = {0, 1, 7, 1000003};
    for (int i = 0; i < 4; i++) check_visits(1, ns[i]);
}

Test(pool, every_index_once_2_threads) {
    int64_t ns[] = {0, 1, 7, 1000003};
    for (int i = 0; i < 4; i++) check_visits(2, ns[i]);
}

Test(pool, every_index_once_5_threads) {
    int64_t ns[] = {0, 1, 7, 1000003};
    for (int i = 0; i < 4; i++) check_visits(5, ns[i]);
}

Test(pool, ranges_tile_without_gaps) {
    for (int threads = 1; threads <= 8; threads++)
        for (int64_t n = 0; n < 50; n++) {
            int64_t expect = 0;
            for (int t = 0; t < threads; t++) {
                int64_t b, e;
                tg_pool_range(n, threads, t, &b, &e);
                cr_assert_eq(b, expect);
                cr_assert_geq(e, b);
                expect = e;
            }
            cr_assert_eq(expect, n);
        }
}

static void add_range(void *ctx, int64_t begin, int64_t end, int thread) {
    int64_t *partial = ctx;
    for (int64_t i = begin; i < end; i++) partial[thread] += i;
}

Test(pool, many_small_jobs_complete) {
    /* thousands of back-to-back jobs: a lost wake-up or a worker running a job twice shows here */
    TgPool *pool = tg_pool_create(2);
    int64_t partial[2] = {0, 0};
    for (int j = 0; j < 20000; j++) tg_pool_parallel_for(pool, 10, add_range, partial);
    cr_expect_eq(partial[0] + partial[1], 20000LL * 45);
    tg_pool_destroy(pool);
}

Test(pool, null_pool_runs_serially) {
    int64_t partial[1] = {0};
    tg_pool_parallel_for(NULL, 100, add_range, partial);
    cr_expect_eq(partial[0], 4950);
    cr_expect_eq(tg_pool_threads(NULL), 1);
}

/* Every thread of a job computes with subnormals flushed to zero (lib/fpmode.h): a product below
 * FLT_MIN is 0 and a subnormal input counts as 0, on the workers and on the caller; the caller's
 * own mode comes back after the job. */
typedef struct {
    volatile float tiny, scale; /* volatile: computed at run time, under the thread's mode */
    float product[4], doubled[4];
    bool flushes[4];
} SubnormalJob;

static void subnormal_range(void *ctx, int64_t begin, int64_t end, int thread) {
    SubnormalJob *job = ctx;
    job->product[thread] = job->tiny * job->scale;      /* 1e-30 * 1e-10: a subnormal result */
    job->doubled[thread] = (job->tiny * 1e-10f) * 2.0f; /* flushed, it stays 0 */
    job->flushes[thread] = tg_fp_mode_flushes();
}

Test(pool, every_thread_of_a_job_flushes_subnormals_and_the_caller_gets_its_mode_back) {
    bool before = tg_fp_mode_flushes();
    for (int threads = 1; threads <= 2; threads++) {
        TgPool *pool = threads == 1 ? NULL : tg_pool_create(threads);
        SubnormalJob job = {.tiny = 1e-30f, .scale = 1e-10f};
        tg_pool_parallel_for(pool, threads, subnormal_range, &job);
        for (int t = 0; t < threads; t++) {
            cr_expect(job.flushes[t], "thread %d of %d computes with subnormals", t, threads);
            cr_expect_eq(job.product[t], 0.0f, "thread %d: 1e-30 * 1e-10 = %g", t, (double)job.product[t]);
            cr_expect_eq(job.doubled[t], 0.0f);
        }
        cr_expect_eq(tg_fp_mode_flushes(), before, "the caller's mode changed");
        tg_pool_destroy(pool);
    }
    /* outside a job the caller's arithmetic is its own: a subnormal comes out */
    volatile float tiny = 1e-30f, scale = 1e-10f;
    if (!before) cr_expect_gt(tiny * scale, 0.0f);
}

#if defined(__x86_64__)
/* The flush mode is the only part of the floating-point register the library sets and puts back:
 * an engine closed without being opened (a trainer that failed before opening it) and a restore
 * of a zero mode leave the exception masks and the rounding as they were. */
Test(pool, closing_an_unopened_engine_leaves_the_floating_point_register_alone) {
    unsigned before = _mm_getcsr();
    TgEngine engine;
    memset(&engine, 0, sizeof engine);
    tg_engine_close(&engine);
    cr_expect_eq(_mm_getcsr(), before, "MXCSR %#x, was %#x", _mm_getcsr(), before);
    unsigned saved = tg_fp_mode_enter();
    tg_fp_mode_restore(0);
    cr_expect_eq(_mm_getcsr() & 0x7f80u, before & 0x7f80u, "exception masks or rounding changed: %#x", _mm_getcsr());
    tg_fp_mode_restore(saved);
    cr_expect_eq(_mm_getcsr(), before);
    volatile double third = 1.0 / 3.0; /* inexact: trapped if its mask were cleared */
    cr_expect_gt(third, 0.33);
}
#endif
