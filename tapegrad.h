/* tapegrad: the whole public API in one include.
 *
 *   #include <tapegrad/tapegrad.h>
 *   cc prog.c $(pkg-config --cflags --libs tapegrad)      or, in CMake,
 *   find_package(tapegrad) + target_link_libraries(prog PRIVATE tapegrad::tapegrad)
 *
 * The headers it includes are installed beside it under include/tapegrad/ and include each other
 * from there ("lib/tape.h"), so the include path holds both include/ and include/tapegrad/ (the
 * pkg-config and CMake packages give both); a program may include any one of them instead.
 * docs/api.md walks through the API; each header documents its own functions.
 */
#ifndef TAPEGRAD_H
#define TAPEGRAD_H

#include "lib/version.h"

/* the engine: errors, memory, threads, tensors, the tape, parameters, the gradient checker */
#include "lib/error.h"
#include "lib/arena.h"
#include "lib/pool.h"
#include "lib/rng.h"
#include "lib/tensor.h"
#include "lib/tape.h"
#include "lib/engine.h"
#include "lib/params.h"
#include "lib/gradcheck.h"

/* the ops, and how an op proves its backward */
#include "ops/op_list.h"
#include "ops/ops.h"
#include "ops/op_check.h"

/* training: the optimizer and schedule, checkpoints of a program's own parameters */
#include "train/optim.h"
#include "train/param_checkpoint.h"

/* the built-in transformer, its tokenizers, trained runs and sampling */
#include "data/tokenizer.h"
#include "train/model.h"
#include "train/pretrained.h"
#include "train/sample.h"

#endif
