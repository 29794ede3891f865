/* What the commands that build a model will allocate, from the model's shapes and the flags,
 * checked against the machine's memory (lib/memory.h) before any of it is allocated: a size a flag
 * or a file asks for that cannot fit is refused in one line naming it, instead of ending in an
 * out-of-memory abort. Each command adds its own items to a TgMemoryPlan with these pieces. */
#ifndef TAPEGRAD_RUN_MEMORY_PLAN_H
#define TAPEGRAD_RUN_MEMORY_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/memory.h"
#include "tapegrad/model.h"
#include "run/train_options.h"

/* A built model: the parameter store's four buffers (weights, gradients, AdamW m and v) and the
 * RoPE tables. */
double tg_model_memory_bytes(const TgModelConfig *cfg);

/* A model built to be loaded from a checkpoint (the load stages weights, m and v before it
 * copies them in), as every reader of a checkpoint builds one. Checked before the build: a header
 * the file could hold may still declare a model this machine cannot (TG_ERR_NOMEM naming path). */
TgStatus tg_checkpoint_model_memory_check(const TgModelConfig *cfg, const char *path);

/* The activations of one forward (and backward, when training) of (batch, seq) tokens on
 * `threads` (tg_model_activation_bytes), as an item whose subject is `subject` ("--batch 16") and
 * whose purpose names the bytes per token. */
void tg_memory_plan_add_activations(TgMemoryPlan *plan, const TgModelConfig *cfg, int64_t batch, int64_t seq, int threads,
                                 bool training, const char *subject, const char *fix);

/* What sampling `tokens` tokens takes (tg_sample_text): *context the KV cache of the whole
 * context and the prompt's forward, *buffers the ids and the text of the tokens. */
void tg_sampling_memory_bytes(const TgModelConfig *cfg, int64_t tokens, int threads, double *context, double *buffers);
/* Whether the model of `checkpoint`, its KV cache and the buffers of `tokens` (--tokens, named in
 * the message) fit this machine (sample, chat). */
TgStatus tg_sampling_memory_check(const TgModelConfig *cfg, const char *checkpoint, int64_t tokens, int threads);

/* Everything a training run of schedule `s` (a resumed run when `resumed`; its context length given
 * when `seq_given`, the messages then name it) on a model of `cfg` allocates besides the corpus it holds
 * (`corpus_bytes`, already read, or 0): the model and a checkpoint's snapshot, the step's
 * activations (the arena is then reserved at that size), the fixed val batches, the probe of
 * `probe_batches` (compare-ffn's, 0: none), the final sample. One process's; under mpirun every
 * rank holds as much. TG_ERR_ARG naming the flag when it cannot fit. */
TgStatus tg_train_memory_check(const TgTrainSchedule *s, bool resumed, bool seq_given, const TgModelConfig *cfg,
                               int64_t probe_batches, double corpus_bytes);

#endif
