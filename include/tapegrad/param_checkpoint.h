/* Checkpoints of a parameter set a program defines itself (an MLP, a small RNN, ...): its
 * weights, their AdamW moments and the optimizer step, so that training resumes exactly.
 *
 * The file is a tapegrad checkpoint (format TG_CHECKPOINT_FORMAT, tapegrad/version.h): one gzip
 * stream, written to a temporary file, fsynced and renamed, and on load checked against gzip's
 * CRC32 and length. It differs from a model's checkpoint only in its header: flag bit 1 set,
 * and in place of the model config a tag, the program's name for what the parameters are
 * ("mlp-2x64-v1"), which a load compares. `tapegrad ckpt info FILE` lists what one holds.
 */
#ifndef TG_PARAM_CHECKPOINT_H
#define TG_PARAM_CHECKPOINT_H

#include <stdint.h>

#include "tapegrad/error.h"
#include "tapegrad/params.h"

#pragma GCC visibility push(default)

/* Writes the weights, AdamW m and v of every parameter of `ps` (finalized), and `step`, to
 * `path`. tag: 1 to 63 bytes (TG_ERR_ARG otherwise). A failed write (TG_ERR_IO) leaves any
 * earlier file at `path` as it was. */
TgStatus tg_param_checkpoint_save(const char *path, const TgParamStore *ps, const char *tag, int64_t step);

/* Loads a file written by tg_param_checkpoint_save into `ps` (finalized, built the same way: the
 * same names and shapes; the order may differ). Refuses, with a message naming the file and
 * what is wrong: a missing or unreadable file (TG_ERR_IO), a damaged or cut one or not a
 * checkpoint (TG_ERR_FORMAT), another tag (unless `tag` is NULL), a model's checkpoint, a tensor
 * the store lacks or lacking one it has, or another shape (TG_ERR_MISMATCH). `ps` changes only
 * when everything is right. *step (may be NULL) receives the step saved. */
TgStatus tg_param_checkpoint_load(const char *path, TgParamStore *ps, const char *tag, int64_t *step);

#pragma GCC visibility pop

#endif
