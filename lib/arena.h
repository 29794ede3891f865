/* Step arena: bump allocation for activations and their gradients.
 *
 * A training step allocates every activation from here and calls arena_reset() at the end.
 * Reset keeps the memory: if the step needed more than one chunk, the chunks are replaced by a
 * single chunk as large as the step's peak, so from the second step on there is no malloc at all.
 */
#ifndef TAPEGRAD_ARENA_H
#define TAPEGRAD_ARENA_H

#include <stddef.h>

#pragma GCC visibility push(default)

typedef struct ArenaChunk ArenaChunk;

typedef struct Arena {
    ArenaChunk *head;     /* chunk currently bumped; older chunks follow via ->prev */
    size_t used;          /* bytes handed out since the last reset (with alignment padding) */
    size_t peak;          /* largest `used` seen since creation */
    size_t capacity;      /* bytes held in all chunks */
    size_t system_allocs; /* how many chunks were ever malloc'ed: flat in the steady state */
} Arena;

typedef struct ArenaMark {
    ArenaChunk *chunk;
    size_t chunk_used;
    size_t used;
} ArenaMark;

enum { TG_ARENA_ALIGN = 64 };

/* An empty arena holding one chunk of initial_bytes (0: none until the first allocation). The
 * Arena struct is the caller's; the chunks are the arena's, until arena_free. */
void arena_init(Arena *arena, size_t initial_bytes);
/* Frees every chunk; every pointer the arena handed out dies with it. */
void arena_free(Arena *arena);
/* 64-byte aligned, contents undefined, valid until the next arena_reset, arena_rewind past it or
 * arena_free; never freed one by one. Never returns NULL (aborts when memory is exhausted). */
void *arena_alloc(Arena *arena, size_t bytes);
/* arena_alloc, zeroed. */
void *arena_calloc(Arena *arena, size_t bytes);
/* Takes back everything handed out (see the top): the memory stays with the arena. */
void arena_reset(Arena *arena);
/* Everything allocated after arena_mark() is released by arena_rewind(). */
ArenaMark arena_mark(const Arena *arena);
void arena_rewind(Arena *arena, ArenaMark mark);

#pragma GCC visibility pop

#endif
