/* Looking inside a model: gradient statistics per parameter tensor, activation statistics of
 * every layer's FFN hidden activation (the input of w2), and the grads.jsonl log that
 * `tapegrad train --log-grads N` writes.
 *
 * Why the FFN hidden activation: a ReLU unit whose pre-activation is negative for every token
 * outputs exact zeros, so its w1 row gets an all-zero gradient and it can stay "dead" for good.
 * SwiGLU's silu(gate) * up is exactly zero almost never. Counting exact zeros, and units that are
 * zero for every token seen, tells the two apart.
 */
#ifndef TAPEGRAD_INSPECT_H
#define TAPEGRAD_INSPECT_H

#include "support/append_file.h"
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tapegrad/error.h"
#include "tapegrad/tape.h"
#include "tapegrad/model.h"
#include "train/evaluate.h"
#include "train/trainer.h"

/* ---- FFN hidden activation statistics, accumulated over tokens ---- */
typedef struct TgFfnActStats {
    int64_t hidden;       /* units (the activation's last dim) */
    int64_t tokens;       /* rows added so far */
    int64_t zeros;        /* elements exactly 0.0 */
    double sum, sum_sq;   /* of all elements, for mean and std */
    bool *alive;          /* [hidden]: the unit was non-zero for at least one token */
} TgFfnActStats;

void tg_ffn_stats_init(TgFfnActStats *s, int64_t hidden);
void tg_ffn_stats_free(TgFfnActStats *s);
void tg_ffn_stats_reset(TgFfnActStats *s);
/* Adds `rows` tokens of `s->hidden` floats each (row-major). */
void tg_ffn_stats_add_rows(TgFfnActStats *s, const float *data, int64_t rows);
/* Adds an activation tensor (..., hidden). */
void tg_ffn_stats_add(TgFfnActStats *s, const TgTensor *activation);
/* Units that were exactly zero for every token added (0 when no token was added). */
int64_t tg_ffn_stats_dead_units(const TgFfnActStats *s);
double tg_ffn_stats_dead_fraction(const TgFfnActStats *s);
double tg_ffn_stats_zero_fraction(const TgFfnActStats *s);
double tg_ffn_stats_mean(const TgFfnActStats *s);
double tg_ffn_stats_std(const TgFfnActStats *s); /* population std over all elements */

/* ---- per parameter tensor ---- */
typedef struct TgParamStats {
    double weight_norm;   /* ||w||, L2 */
    double grad_norm;     /* ||g||, L2 */
    double grad_max_abs;  /* max |g| */
} TgParamStats;

TgParamStats tg_param_stats(const TgTensor *param);
/* Share of the rows of a 2-d parameter whose gradient is exactly zero. For w1 (hidden, dim) a
 * row belongs to one hidden unit: the row is all-zero when no token passed gradient through
 * that unit, which for ReLU means it was dead on the whole batch. */
double tg_zero_grad_row_fraction(const TgTensor *param);

/* The exact zeros of the FFN hidden activation of a freshly initialised model (the zero ratio of
 * ReLU against SwiGLU at initialisation): `rows` inputs x ~ N(0, 1) of dim floats,
 * the scale an RMSNorm with unit gain hands the FFN, through every layer's w1 (and w3) as
 * tg_model_init_weights(seed) sets them. Returns the fraction of exact zeros over all layers. ReLU
 * gives about 1/2, as w1 x is symmetric about 0; SwiGLU's silu(w1 x) * w3 x is almost never 0. */
double tg_ffn_zero_fraction_at_init(const TgModelConfig *cfg, uint64_t seed, int64_t rows, int threads);

/* The FFN part of tg_model_config_param_count (tapegrad/model.h): 2 or 3 matrices of dim x hidden per layer. */
int64_t tg_model_config_ffn_param_count(const TgModelConfig *cfg);

/* ---- a whole model ---- */
typedef struct TgModelInspection {
    int n_params;
    TgParamStats *params;         /* [n_params], in parameter-store order */
    int64_t n_layers;
    TgFfnActStats *ffn;           /* [n_layers] */
    double *w1_zero_grad_rows;  /* [n_layers]: tg_zero_grad_row_fraction of each layer's w1 */
} TgModelInspection;

void tg_model_inspection_init(TgModelInspection *mi, const TgModel *model);
void tg_model_inspection_free(TgModelInspection *mi);
/* Forgets the activations added so far. */
void tg_model_inspection_reset_activations(TgModelInspection *mi);
/* Adds ffn_hidden[l] of every layer (from tg_model_loss_inspected), before the tape is reset. */
void tg_model_inspection_add_activations(TgModelInspection *mi, TgTensor *const *ffn_hidden);
/* Reads the parameters and their gradients as they are now. */
void tg_model_inspection_read_gradients(TgModelInspection *mi, const TgModel *model);

/* Forward + backward over the batches (packed rows when key_start is given: TgBatch.key_start),
 * gradients averaged (the model's weights are not changed; its gradients hold the mean gradient
 * afterwards), activations of all batches accumulated into `mi`. Returns the mean loss. */
double tg_model_inspect_batches(TgModel *model, TgTape *tape, const TgEvalBatches *batches, TgModelInspection *mi);

/* Writes `"params":[...],"ffn":[...]` (no braces) for the JSON object of a log line or of
 * `tapegrad inspect --json`. update_ratio (may be NULL): ||dw|| / ||w|| per parameter. probe (may
 * be NULL): per layer, the statistics of the probe set (TgTrainHooks), written into each layer's
 * object as probe_tokens, probe_dead_units, probe_dead_frac, probe_zero_frac. */
void tg_model_inspection_write_json(FILE *f, const TgModelInspection *mi, const TgModel *model, const double *update_ratio,
                                 const TgFfnActStats *probe);

/* ---- grads.jsonl during training ---- */
typedef struct TgGradLogger {
    int64_t every;              /* 0: disabled, every call is a no-op */
    int64_t requested_every;    /* what tg_grad_logger_hooks was asked for, until the run folder is known */
    TgAppendFile out;             /* grads.jsonl */
    TgModelInspection mi;
    float *weights_before;      /* flat copy of the weights before the logged step's update */
    double *update_ratio;       /* [n_params] */
    int64_t probe_batches;      /* fixed val batches per logged step (0: no probe) */
    TgFfnActStats *probe;         /* [n_layers], on the probe batches (NULL without a probe) */
} TgGradLogger;

/* every <= 0 leaves the logger disabled; else opens DIR/grads.jsonl for appending. With
 * probe_batches > 0 each logged line also holds the probe set's statistics. */
TgStatus tg_grad_logger_open(TgGradLogger *g, const char *run_dir, const TgModel *model, int64_t every,
                           int64_t probe_batches);
void tg_grad_logger_close(TgGradLogger *g);
/* Whether the step that ends with optimizer step number `step` (1-based) is logged: every
 * `every` steps, and step 1, whose activations are those of the initial weights. */
static inline bool grad_logger_due(const TgGradLogger *g, int64_t step) {
    return g->every > 0 && (step == 1 || step % g->every == 0);
}
/* The trainer calls these on a logged step only, so other steps cost one branch:
 *   after each probe batch's forward, before the step's own  tg_grad_logger_add_probe_activations
 *   after each micro-batch's forward (tg_model_loss_inspected) tg_grad_logger_add_activations
 *   after the backward of all micro-batches, before clip   tg_grad_logger_before_update
 *   after the optimizer update                              tg_grad_logger_write */
void tg_grad_logger_add_activations(TgGradLogger *g, TgTensor *const *ffn_hidden);
/* Adds one probe batch's activations (the probe of TgTrainHooks). */
void tg_grad_logger_add_probe_activations(TgGradLogger *g, TgTensor *const *ffn_hidden);
/* The trainer's hooks (train/trainer.h) that open DIR/grads.jsonl when the run starts and log
 * every `every` steps (0: nothing), with dead units and zeros also on `probe_batches` fixed val
 * batches (0: the training batch only). tg_grad_logger_close after tg_train_run. */
TgTrainHooks tg_grad_logger_hooks(TgGradLogger *g, int64_t every, int64_t probe_batches);
void tg_grad_logger_before_update(TgGradLogger *g, const TgModel *model);
TgStatus tg_grad_logger_write(TgGradLogger *g, const TgModel *model, int64_t step, double lr, double loss);

#endif
