/* The dying-ReLU experiment behind `tapegrad compare-ffn`. For each learning rate, trains a ReLU
 * FFN model (hidden 4*dim unless told) and a SwiGLU FFN model (the preset's hidden) from the
 * same seed and data, with the ordinary trainer and gradient logging; then reads their
 * metrics.jsonl and grads.jsonl back and reports them side by side.
 *
 * Every run folder stays under OUT (OUT/lr<lr>-<ffn>), so inspect, sample, eval and report work
 * on each. OUT/report.html holds the combined report, OUT/compare.jsonl every series it charts,
 * OUT/summary.json the final figures. */
#ifndef TAPEGRAD_INSPECT_COMPARE_FFN_H
#define TAPEGRAD_INSPECT_COMPARE_FFN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/error.h"
#include "lib/options.h"

typedef struct CompareFfnOptions {
    const char *preset, *lrs, *data, *out;
    int64_t steps, log_grads, eval_every, eval_batches, batch, seed, relu_hidden;
    int threads;
    bool reuse;
} CompareFfnOptions;

const OptTable *compare_ffn_option_table(void);
void compare_ffn_defaults(CompareFfnOptions *o);
/* Runs the experiment; every check happens before anything is written. A non-zero *stop (may be
 * NULL) ends it after the current run's current step (that run is saved; --reuse goes on). */
tg_status compare_ffn_run(const CompareFfnOptions *o, volatile sig_atomic_t *stop);

#endif
