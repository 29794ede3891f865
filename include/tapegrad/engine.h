/* What a forward and backward need to run: the thread pool (ops and GEMMs), the step arena and
 * the tape over them, set up and torn down together. The tape points into the struct, so an
 * TgEngine stays where tg_engine_open put it. */
#ifndef TG_ENGINE_H
#define TG_ENGINE_H

#include <stddef.h>

#include "tapegrad/arena.h"
#include "tapegrad/pool.h"
#include "tapegrad/tape.h"

#pragma GCC visibility push(default)

typedef struct TgEngine {
    TgPool *pool;
    TgArena arena;
    TgTape tape;
    unsigned fp_mode; /* the opening thread's floating-point mode before tg_engine_open */
} TgEngine;

/* `threads` (>= 1) for the pool and the GEMMs; the arena starts at `arena_bytes` and grows as
 * needed; the tape records. The TgEngine struct is the caller's, what it points to the engine's.
 * Until tg_engine_close, the calling thread computes with subnormal floats flushed to zero, as
 * every thread running an op does (the pool's threads always: a result or input below FLT_MIN
 * is 0, which spares Intel cores a slow assist per subnormal and changes nothing else); close it
 * on the same thread. */
void tg_engine_open(TgEngine *engine, int threads, size_t arena_bytes);
/* Frees the tape, the arena (every activation with it) and the pool, and puts back the flush mode;
 * an engine zeroed and never opened is closed without touching the floating-point mode. */
void tg_engine_close(TgEngine *engine);

#pragma GCC visibility pop

#endif
