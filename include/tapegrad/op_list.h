/* Every op the tape can record, each tied to the finite-difference cases that prove its
 * backward:
 *
 *   X(ID, "name", checks)
 *
 * ID gives TG_OP_<ID>; "name" is what the op records on the tape (tg_op_name(TG_OP_<ID>)) and
 * what `tapegrad gradcheck --op` and `tapegrad graph` show; `checks` is the TgOpCheckList defined
 * at the end of the op's own file. A new op is one line here: the list names its checks, so an
 * op without them does not link, and tests/test_op_coverage.c fails when a training step records
 * a name that is not listed.
 *
 * TG_COMPOSITE_LIST: functions built from several ops (recording those ops, not a name of their
 * own), checked as a whole all the same because the model trains through them.
 */
#ifndef TG_OP_LIST_H
#define TG_OP_LIST_H

#pragma GCC visibility push(default)

#define TG_OP_LIST(X)                                                                                                  \
    X(LINEAR, "linear", tg_linear_checks)                                                                              \
    X(LINEAR_RESIDUAL, "linear_residual", tg_linear_residual_checks)                                                   \
    X(LORA_LINEAR, "lora_linear", tg_lora_linear_checks)                                                               \
    X(ADD, "add", tg_add_checks)                                                                                       \
    X(MUL, "mul", tg_mul_checks)                                                                                       \
    X(SCALE, "scale", tg_scale_checks)                                                                                 \
    X(SUM, "sum", tg_sum_checks)                                                                                       \
    X(MEAN, "mean", tg_mean_checks)                                                                                    \
    X(RELU, "relu", tg_relu_checks)                                                                                    \
    X(SILU, "silu", tg_silu_checks)                                                                                    \
    X(GELU, "gelu", tg_gelu_checks)                                                                                    \
    X(SIGMOID, "sigmoid", tg_sigmoid_checks)                                                                           \
    X(RMSNORM, "rmsnorm", tg_rmsnorm_checks)                                                                           \
    X(ROPE, "rope", tg_rope_checks)                                                                                    \
    X(ATTENTION, "attention", tg_attention_checks)                                                                     \
    X(SWIGLU, "swiglu", tg_swiglu_checks)                                                                              \
    X(EMBEDDING, "embedding", tg_embedding_checks)                                                                     \
    X(ROWS_REPLACED, "rows_replaced", tg_rows_replaced_checks)                                                         \
    X(CROSS_ENTROPY, "cross_entropy", tg_cross_entropy_checks)                                                         \
    X(SEQUENCE_LOGPROB, "sequence_logprob", tg_sequence_logprob_checks)                                                \
    X(DPO_LOSS, "dpo_loss", tg_dpo_loss_checks)

#define TG_COMPOSITE_LIST(X)                          \
    X(FFN_SWIGLU, "ffn_swiglu", tg_ffn_swiglu_checks) \
    X(FFN_RELU, "ffn_relu", tg_ffn_relu_checks)       \
    X(GRAPH, "graph", tg_graph_checks)

typedef enum {
#define TG_OP_ENUM(id, name, checks) TG_OP_##id,
    TG_OP_LIST(TG_OP_ENUM)
#undef TG_OP_ENUM
    TG_OP_COUNT
} TgOp;

/* The name an op records on the tape. */
const char *tg_op_name(TgOp op);
/* The op recording `name`, or TG_OP_COUNT when no listed op does. */
TgOp tg_op_from_name(const char *name);

#pragma GCC visibility pop

#endif
