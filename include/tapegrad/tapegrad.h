/* tapegrad: the whole public API in one include.
 *
 *   #include <tapegrad/tapegrad.h>
 *   cc prog.c $(pkg-config --cflags --libs tapegrad)      or, in CMake,
 *   find_package(tapegrad) + target_link_libraries(prog PRIVATE tapegrad::tapegrad)
 *
 * The headers it includes sit beside it in include/tapegrad/, in the source tree as where they are
 * installed, and include each other as "tapegrad/NAME.h": the include path holds include/ alone
 * (pkg-config and the CMake package give it). A program may include any one of them instead.
 * Every name they declare carries the prefix: functions tg_, types Tg, macros and enum values TG_.
 * docs/api.md walks through the API; each header documents its own functions.
 */
#ifndef TG_TAPEGRAD_H
#define TG_TAPEGRAD_H

#include "tapegrad/version.h"

/* the engine: errors, memory, threads, tensors, the tape, parameters, the gradient checker */
#include "tapegrad/error.h"
#include "tapegrad/arena.h"
#include "tapegrad/pool.h"
#include "tapegrad/rng.h"
#include "tapegrad/tensor.h"
#include "tapegrad/tape.h"
#include "tapegrad/engine.h"
#include "tapegrad/params.h"
#include "tapegrad/gradcheck.h"

/* the ops, and how an op proves its backward */
#include "tapegrad/op_list.h"
#include "tapegrad/ops.h"
#include "tapegrad/op_check.h"

/* training: the optimizer and schedule, checkpoints of a program's own parameters */
#include "tapegrad/optim.h"
#include "tapegrad/param_checkpoint.h"

/* the built-in transformer, its tokenizers, trained runs and sampling */
#include "tapegrad/tokenizer.h"
#include "tapegrad/model.h"
#include "tapegrad/pretrained.h"
#include "tapegrad/sample.h"

#endif
