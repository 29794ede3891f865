#include "tapegrad/pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "tapegrad/error.h"
#include "support/clock.h"
#include "lib/fpmode.h"

struct TgPool {
    int threads;
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t job_ready;
    pthread_cond_t job_done;
    uint64_t generation; /* bumped for every job; workers run a job once per generation */
    uint64_t pending;    /* workers still running the current job */
    int shutting_down;
    /* the current job */
    TgRangeFn fn;
    void *ctx;
    int64_t n;
};

typedef struct {
    TgPool *pool;
    int index;
} WorkerArg;

/* Before sleeping on the condition variable, a worker waiting for the next job and the caller
 * waiting for the workers spin this long, reading one word: ops come back to back during a
 * step (a GEMM, a norm, a GEMM...), and waking a sleeping thread through the kernel costs tens
 * of microseconds in this VM. Between steps and when idle, everyone sleeps. */
static const double SPIN_SECONDS = 50e-6;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins until (*word == value) == until_equal, or the spin time is up; the caller then checks
 * under the lock and sleeps if it must. */
static void spin_on(const uint64_t *word, uint64_t value, bool until_equal) {
    double deadline = 0;
    for (unsigned i = 1;; i++) {
        if ((__atomic_load_n(word, __ATOMIC_ACQUIRE) == value) == until_equal) return;
        cpu_relax();
        if ((i & 255) == 0) {   /* the clock only every 256 rounds */
            double t = tg_clock_seconds();
            if (deadline == 0) deadline = t + SPIN_SECONDS;
            else if (t > deadline) return;
        }
    }
}

void tg_pool_range(int64_t n, int threads, int thread, int64_t *begin, int64_t *end) {
    /* n*t/T without overflow for any n < 2^62 and T < 2^31 */
    *begin = (int64_t)(((__int128)n * thread) / threads);
    *end = (int64_t)(((__int128)n * (thread + 1)) / threads);
}

static void *worker_main(void *arg_) {
    WorkerArg *arg = arg_;
    TgPool *pool = arg->pool;
    int index = arg->index;
    free(arg);
    tg_fp_mode_enter(); /* for the worker's whole life (lib/fpmode.h) */
    uint64_t seen = 0;
    for (;;) {
        spin_on(&pool->generation, seen, false);   /* until a new job is posted */
        pthread_mutex_lock(&pool->lock);
        while (!pool->shutting_down && pool->generation == seen)
            pthread_cond_wait(&pool->job_ready, &pool->lock);
        if (pool->shutting_down) {
            pthread_mutex_unlock(&pool->lock);
            return NULL;
        }
        seen = pool->generation;
        TgRangeFn fn = pool->fn;
        void *ctx = pool->ctx;
        int64_t n = pool->n;
        pthread_mutex_unlock(&pool->lock);

        int64_t begin, end;
        tg_pool_range(n, pool->threads, index, &begin, &end);
        if (end > begin) fn(ctx, begin, end, index);

        pthread_mutex_lock(&pool->lock);
        if (__atomic_sub_fetch(&pool->pending, 1, __ATOMIC_RELEASE) == 0) pthread_cond_signal(&pool->job_done);
        pthread_mutex_unlock(&pool->lock);
    }
}

TgPool *tg_pool_create(int threads) {
    TG_CHECK(threads >= 1, "pool of %d threads", threads);
    TgPool *pool = tg_calloc(1, sizeof *pool);
    pool->threads = threads;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->job_ready, NULL);
    pthread_cond_init(&pool->job_done, NULL);
    pool->workers = tg_calloc((size_t)threads, sizeof(pthread_t));
    for (int i = 1; i < threads; i++) {
        WorkerArg *arg = tg_malloc(sizeof *arg);
        arg->pool = pool;
        arg->index = i;
        int rc = pthread_create(&pool->workers[i], NULL, worker_main, arg);
        TG_CHECK(rc == 0, "pthread_create failed (%d)", rc);
    }
    return pool;
}

void tg_pool_destroy(TgPool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    pool->shutting_down = 1;
    pthread_cond_broadcast(&pool->job_ready);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 1; i < pool->threads; i++) pthread_join(pool->workers[i], NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->job_ready);
    pthread_cond_destroy(&pool->job_done);
    free(pool->workers);
    free(pool);
}

int tg_pool_threads(const TgPool *pool) { return pool ? pool->threads : 1; }

void tg_pool_parallel_for(TgPool *pool, int64_t n, TgRangeFn fn, void *ctx) {
    if (n <= 0) return;
    /* the caller computes its range as the workers do (lib/fpmode.h), then gets its own mode back */
    unsigned caller_mode = tg_fp_mode_enter();
    if (!pool || pool->threads == 1) {
        fn(ctx, 0, n, 0);
        tg_fp_mode_restore(caller_mode);
        return;
    }
    pthread_mutex_lock(&pool->lock);
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n = n;
    __atomic_store_n(&pool->pending, (uint64_t)(pool->threads - 1), __ATOMIC_RELAXED);
    __atomic_store_n(&pool->generation, pool->generation + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool->job_ready);
    pthread_mutex_unlock(&pool->lock);

    int64_t begin, end;
    tg_pool_range(n, pool->threads, 0, &begin, &end);
    if (end > begin) fn(ctx, begin, end, 0);

    spin_on(&pool->pending, 0, true);   /* until every worker is done */
    if (__atomic_load_n(&pool->pending, __ATOMIC_ACQUIRE) != 0) {
        pthread_mutex_lock(&pool->lock);
        while (__atomic_load_n(&pool->pending, __ATOMIC_ACQUIRE) > 0)
            pthread_cond_wait(&pool->job_done, &pool->lock);
        pthread_mutex_unlock(&pool->lock);
    }
    tg_fp_mode_restore(caller_mode);
}
