/* Step arena: bump allocation for activations and their gradients.
 *
 * A training step allocates every activation from here and calls tg_arena_reset() at the end.
 * Reset keeps the memory: if the step needed more than one chunk, the chunks are replaced by a
 * single chunk as large as the step's peak, so from the second step on there is no malloc at all.
 */
#ifndef TG_ARENA_H
#define TG_ARENA_H

#include <stddef.h>

#include "tapegrad/error.h"

#pragma GCC visibility push(default)

typedef struct TgArenaChunk TgArenaChunk;

typedef struct TgArena {
    TgArenaChunk *head;     /* chunk currently bumped; older chunks follow via ->prev */
    size_t used;          /* bytes handed out since the last reset (with alignment padding) */
    size_t peak;          /* largest `used` seen since creation */
    size_t capacity;      /* bytes held in all chunks */
    size_t system_allocs; /* how many chunks were ever malloc'ed: flat in the steady state */
} TgArena;

typedef struct TgArenaMark {
    TgArenaChunk *chunk;
    size_t chunk_used;
    size_t used;
} TgArenaMark;

enum { TG_ARENA_ALIGN = 64 };

/* An empty arena holding one chunk of initial_bytes (0: none until the first allocation). The
 * TgArena struct is the caller's; the chunks are the arena's, until tg_arena_free. */
void tg_arena_init(TgArena *arena, size_t initial_bytes);
/* Makes an arena that holds nothing (used 0) one chunk of at least `bytes`, so that allocations up
 * to that many bytes in all need no further malloc (a step whose peak is known: tapegrad/model.h,
 * tg_model_activation_bytes). TG_ERR_NOMEM, with the size, when the memory cannot be had: unlike a
 * growing allocation, which aborts. The arena keeps its chunks when they hold enough already. */
TgStatus tg_arena_reserve(TgArena *arena, size_t bytes);
/* Frees every chunk; every pointer the arena handed out dies with it. */
void tg_arena_free(TgArena *arena);
/* 64-byte aligned, contents undefined, valid until the next tg_arena_reset, tg_arena_rewind past it or
 * tg_arena_free; never freed one by one. Never returns NULL (aborts when memory is exhausted). */
void *tg_arena_alloc(TgArena *arena, size_t bytes);
/* tg_arena_alloc, zeroed. */
void *tg_arena_calloc(TgArena *arena, size_t bytes);
/* Takes back everything handed out (see the top): the memory stays with the arena. */
void tg_arena_reset(TgArena *arena);
/* Everything allocated after tg_arena_mark() is released by tg_arena_rewind(). */
TgArenaMark tg_arena_mark(const TgArena *arena);
void tg_arena_rewind(TgArena *arena, TgArenaMark mark);

#pragma GCC visibility pop

#endif
