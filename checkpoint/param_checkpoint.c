/* A parameter set's checkpoint: the model checkpoint's stream with a tag in place of the model
 * config (checkpoint/checkpoint.h), written and read by the same code. */
#include "tapegrad/param_checkpoint.h"

#include <string.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_internal.h"

TgStatus tg_param_checkpoint_save(const char *path, const TgParamStore *ps, const char *tag, int64_t step) {
    TG_CHECK(ps->finalized, "tg_param_checkpoint_save of a parameter store not finalized");
    size_t len = tag ? strlen(tag) : 0;
    if (len == 0 || len >= TG_CHECKPOINT_PARAM_TAG_CAP)
        return tg_fail(TG_ERR_ARG, "saving %s: a parameter set's tag has 1 to %d bytes, not %zu", path,
                       TG_CHECKPOINT_PARAM_TAG_CAP - 1, len);
    TgCheckpointSource src = {.layout = ps, .data = ps->data, .m = ps->m, .v = ps->v, .state = {.step = step}, .tag = tag};
    return tg_checkpoint_write(path, &src);
}

TgStatus tg_param_checkpoint_load(const char *path, TgParamStore *ps, const char *tag, int64_t *step) {
    TG_CHECK(ps->finalized, "tg_param_checkpoint_load into a parameter store not finalized");
    TgCheckpointInfo info;
    TG_TRY(tg_checkpoint_load_store(path, ps, NULL, tag, &info));
    if (step) *step = info.state.step;
    return TG_OK;
}
