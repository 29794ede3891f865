#include "tapegrad/arena.h"

#include <stdlib.h>
#include <string.h>

#include "tapegrad/error.h"

struct TgArenaChunk {
    TgArenaChunk *prev;
    size_t size; /* usable bytes in data[] */
    size_t used;
    unsigned char *data; /* TG_ARENA_ALIGN-aligned */
};

static size_t align_up(size_t n) { return (n + TG_ARENA_ALIGN - 1) & ~(size_t)(TG_ARENA_ALIGN - 1); }

static TgArenaChunk *chunk_new(TgArena *arena, size_t size) {
    TgArenaChunk *c = tg_malloc(sizeof *c);
    c->data = aligned_alloc(TG_ARENA_ALIGN, align_up(size));
    if (!c->data) tg_abort_at(__FILE__, __LINE__, "out of memory: arena chunk of %zu bytes", size);
    c->size = align_up(size);
    c->used = 0;
    c->prev = arena->head;
    arena->head = c;
    arena->capacity += c->size;
    arena->system_allocs++;
    return c;
}

static void chunks_free(TgArenaChunk *c) {
    while (c) {
        TgArenaChunk *prev = c->prev;
        free(c->data);
        free(c);
        c = prev;
    }
}

void tg_arena_init(TgArena *arena, size_t initial_bytes) {
    memset(arena, 0, sizeof *arena);
    if (initial_bytes) chunk_new(arena, initial_bytes);
}

TgStatus tg_arena_reserve(TgArena *arena, size_t bytes) {
    TG_CHECK(arena->used == 0, "tg_arena_reserve on an arena holding %zu bytes", arena->used);
    if (arena->head && !arena->head->prev && arena->head->size >= bytes) return TG_OK;
    size_t size = align_up(bytes ? bytes : 1);
    if (size < bytes) return tg_fail(TG_ERR_NOMEM, "cannot reserve %zu bytes for the step arena: too large", bytes);
    unsigned char *data = aligned_alloc(TG_ARENA_ALIGN, size);
    if (!data)
        return tg_fail(TG_ERR_NOMEM, "cannot reserve %.1f MiB for the step arena: out of memory",
                       (double)bytes / (1024.0 * 1024.0));
    chunks_free(arena->head);
    arena->head = NULL;
    arena->capacity = 0;
    TgArenaChunk *c = tg_malloc(sizeof *c);
    *c = (TgArenaChunk){.prev = NULL, .size = size, .used = 0, .data = data};
    arena->head = c;
    arena->capacity = size;
    arena->system_allocs++;
    return TG_OK;
}

void tg_arena_free(TgArena *arena) {
    chunks_free(arena->head);
    memset(arena, 0, sizeof *arena);
}

void *tg_arena_alloc(TgArena *arena, size_t bytes) {
    size_t need = align_up(bytes ? bytes : 1);
    TgArenaChunk *c = arena->head;
    if (!c || c->size - c->used < need) {
        /* Grow geometrically so a cold step needs few chunks; reset coalesces them anyway. */
        size_t size = arena->capacity > need ? arena->capacity : need;
        if (size < ((size_t)1 << 20)) size = (size_t)1 << 20;
        c = chunk_new(arena, size);
    }
    void *p = c->data + c->used;
    c->used += need;
    arena->used += need;
    if (arena->used > arena->peak) arena->peak = arena->used;
    return p;
}

void *tg_arena_calloc(TgArena *arena, size_t bytes) {
    void *p = tg_arena_alloc(arena, bytes);
    memset(p, 0, bytes);
    return p;
}

void tg_arena_reset(TgArena *arena) {
    if (arena->head && arena->head->prev) {
        /* More than one chunk: replace them by one that holds the whole peak. */
        size_t size = arena->peak;
        chunks_free(arena->head);
        arena->head = NULL;
        arena->capacity = 0;
        chunk_new(arena, size);
    }
    if (arena->head) arena->head->used = 0;
    arena->used = 0;
}

TgArenaMark tg_arena_mark(const TgArena *arena) {
    TgArenaMark m = {arena->head, arena->head ? arena->head->used : 0, arena->used};
    return m;
}

void tg_arena_rewind(TgArena *arena, TgArenaMark mark) {
    /* Chunks added after the mark stay allocated (they are reused) but become empty; the
     * simplest correct policy is to free them now and let reset coalesce later. */
    while (arena->head != mark.chunk) {
        TgArenaChunk *c = arena->head;
        TG_CHECK(c != NULL, "tg_arena_rewind: mark does not belong to this arena");
        arena->head = c->prev;
        arena->capacity -= c->size;
        free(c->data);
        free(c);
    }
    if (arena->head) arena->head->used = mark.chunk_used;
    arena->used = mark.used;
}
