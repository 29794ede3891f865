/* A pthread pool with a deterministic parallel-for.
 *
 * tg_pool_parallel_for(pool, n, fn, ctx) splits [0, n) into `threads` contiguous ranges,
 * range t = [n*t/T, n*(t+1)/T), and calls fn(ctx, begin, end, t) once per non-empty range.
 * The partition depends only on n and the thread count, so an op that reduces per range and
 * then combines the partials in range order gives bitwise the same result on every run.
 *
 * Between jobs a worker spins for at most 50 microseconds (jobs come back to back within a
 * step), then sleeps on a condition variable. GEMMs run on this pool too (lib/blas.h), with
 * OpenBLAS single-threaded, so no other set of threads competes for the cores. The calling
 * thread runs range 0.
 */
#ifndef TG_POOL_H
#define TG_POOL_H

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(default)

typedef struct TgPool TgPool;
typedef void (*TgRangeFn)(void *ctx, int64_t begin, int64_t end, int thread);

/* Starts threads - 1 workers (threads >= 1; 1 runs everything on the caller). Aborts if the
 * system cannot start a thread. Free it with tg_pool_destroy. */
TgPool *tg_pool_create(int threads);
/* Stops and joins the workers and frees the pool; NULL is allowed. No job may be running. */
void tg_pool_destroy(TgPool *pool);
/* 1 for a NULL pool. */
int tg_pool_threads(const TgPool *pool);
/* A NULL pool runs fn(ctx, 0, n, 0) on the caller. Not reentrant: fn must not call the pool. */
void tg_pool_parallel_for(TgPool *pool, int64_t n, TgRangeFn fn, void *ctx);
/* The pool for a loop of `work` units, or NULL (run on the caller) when waking the threads would
 * cost more than the loop: a unit is one elementwise float operation, and a wake-up costs about
 * TG_POOL_MIN_WORK of them. An op whose element costs about two units passes 2 * n. */
enum { TG_POOL_MIN_WORK = 1 << 15 };
static inline TgPool *tg_pool_if_worth(TgPool *pool, int64_t work) { return work >= TG_POOL_MIN_WORK ? pool : NULL; }
/* The range of `thread` in a split of n over `threads`. */
void tg_pool_range(int64_t n, int threads, int thread, int64_t *begin, int64_t *end);

#pragma GCC visibility pop

#endif
