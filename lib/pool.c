#include "pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "error.h"

struct Pool {
    int threads;
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t job_ready;
    pthread_cond_t job_done;
    uint64_t generation; /* bumped for every job; workers run a job once per generation */
    int pending;         /* workers still running the current job */
    int shutting_down;
    /* the current job */
    tg_range_fn fn;
    void *ctx;
    int64_t n;
};

typedef struct {
    Pool *pool;
    int index;
} WorkerArg;

void pool_range(int64_t n, int threads, int thread, int64_t *begin, int64_t *end) {
    /* n*t/T without overflow for any n < 2^62 and T < 2^31 */
    *begin = (int64_t)(((__int128)n * thread) / threads);
    *end = (int64_t)(((__int128)n * (thread + 1)) / threads);
}

static void *worker_main(void *arg_) {
    WorkerArg *arg = arg_;
    Pool *pool = arg->pool;
    int index = arg->index;
    free(arg);
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&pool->lock);
        while (!pool->shutting_down && pool->generation == seen)
            pthread_cond_wait(&pool->job_ready, &pool->lock);
        if (pool->shutting_down) {
            pthread_mutex_unlock(&pool->lock);
            return NULL;
        }
        seen = pool->generation;
        tg_range_fn fn = pool->fn;
        void *ctx = pool->ctx;
        int64_t n = pool->n;
        pthread_mutex_unlock(&pool->lock);

        int64_t begin, end;
        pool_range(n, pool->threads, index, &begin, &end);
        if (end > begin) fn(ctx, begin, end, index);

        pthread_mutex_lock(&pool->lock);
        if (--pool->pending == 0) pthread_cond_signal(&pool->job_done);
        pthread_mutex_unlock(&pool->lock);
    }
}

Pool *pool_create(int threads) {
    TG_CHECK(threads >= 1, "pool of %d threads", threads);
    Pool *pool = tg_calloc(1, sizeof *pool);
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

void pool_destroy(Pool *pool) {
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

int pool_threads(const Pool *pool) { return pool ? pool->threads : 1; }

void pool_parallel_for(Pool *pool, int64_t n, tg_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (!pool || pool->threads == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&pool->lock);
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n = n;
    pool->pending = pool->threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->job_ready);
    pthread_mutex_unlock(&pool->lock);

    int64_t begin, end;
    pool_range(n, pool->threads, 0, &begin, &end);
    if (end > begin) fn(ctx, begin, end, 0);

    pthread_mutex_lock(&pool->lock);
    while (pool->pending > 0) pthread_cond_wait(&pool->job_done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
}
