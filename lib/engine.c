#include "tapegrad/engine.h"

#include "lib/fpmode.h"

#include <stdbool.h>

void tg_engine_open(TgEngine *engine, int threads, size_t arena_bytes) {
    engine->fp_mode = tg_fp_mode_enter();
    engine->pool = tg_pool_create(threads);
    tg_arena_init(&engine->arena, arena_bytes);
    tg_tape_init(&engine->tape, &engine->arena, engine->pool);
}

void tg_engine_close(TgEngine *engine) {
    bool opened = engine->pool != NULL;   /* a zeroed engine that was never opened has no mode to put back */
    tg_tape_free(&engine->tape);
    tg_arena_free(&engine->arena);
    tg_pool_destroy(engine->pool);
    engine->pool = NULL;
    if (opened) tg_fp_mode_restore(engine->fp_mode);
}
