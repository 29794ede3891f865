/* The name each op records on the tape (tapegrad/op_list.h). Apart from the check runner
 * (ops/checks.c): every op calls tg_op_name, and the runner calls every op. */
#include "tapegrad/op_list.h"

#include <string.h>

#include "tapegrad/error.h"

static const char *const op_names[] = {
#define TG_OP_NAME(id, name, checks) name,
    TG_OP_LIST(TG_OP_NAME)
#undef TG_OP_NAME
};
_Static_assert(sizeof op_names / sizeof op_names[0] == TG_OP_COUNT, "one name per op");

const char *tg_op_name(TgOp op) {
    TG_CHECK(op >= 0 && op < TG_OP_COUNT, "op %d is not in tapegrad/op_list.h", (int)op);
    return op_names[op];
}

TgOp tg_op_from_name(const char *name) {
    for (int i = 0; i < TG_OP_COUNT; i++)
        if (strcmp(op_names[i], name) == 0) return (TgOp)i;
    return TG_OP_COUNT;
}
