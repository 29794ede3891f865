#include "lib/engine.h"

#include "lib/blas.h"

void engine_open(Engine *engine, int threads, size_t arena_bytes) {
    tg_blas_set_threads(threads);
    engine->pool = pool_create(threads);
    arena_init(&engine->arena, arena_bytes);
    tape_init(&engine->tape, &engine->arena, engine->pool);
}

void engine_close(Engine *engine) {
    tape_free(&engine->tape);
    arena_free(&engine->arena);
    pool_destroy(engine->pool);
    engine->pool = NULL;
}
