/* What a forward and backward need to run: the thread pool (ops and GEMMs), the step arena and
 * the tape over them, set up and torn down together. The tape points into the struct, so an
 * Engine stays where engine_open put it. */
#ifndef TAPEGRAD_ENGINE_H
#define TAPEGRAD_ENGINE_H

#include <stddef.h>

#include "lib/arena.h"
#include "lib/pool.h"
#include "lib/tape.h"

#pragma GCC visibility push(default)

typedef struct Engine {
    Pool *pool;
    Arena arena;
    Tape tape;
} Engine;

/* `threads` (>= 1) for the pool and the GEMMs; the arena starts at `arena_bytes` and grows as
 * needed; the tape records. The Engine struct is the caller's, what it points to the engine's. */
void engine_open(Engine *engine, int threads, size_t arena_bytes);
/* Frees the tape, the arena (every activation with it) and the pool. */
void engine_close(Engine *engine);

#pragma GCC visibility pop

#endif
