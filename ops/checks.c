#include "checks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/error.h"
#include "../lib/rng.h"

/* every family's list; each checks_<family>.c defines one */
extern const OpCheckList checks_basic;
extern const OpCheckList checks_act_norm;
extern const OpCheckList checks_attn;

static const OpCheckList *const families[] = {
    &checks_basic,
    &checks_act_norm,
    &checks_attn,
};

int op_checks_count(void) {
    int n = 0;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) n += families[f]->count;
    return n;
}

const OpCheck *op_check_get(int i) {
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        if (i < families[f]->count) return &families[f]->cases[i];
        i -= families[f]->count;
    }
    return NULL;
}

bool op_check_run(const OpCheck *check, Tape *tape, uint64_t seed, GradcheckResult *results) {
    Rng rng;
    rng_seed(&rng, seed);
    Tensor *inputs[OP_CHECK_MAX_INPUTS];
    float lo = check->lo, hi = check->hi;
    if (lo == 0.0f && hi == 0.0f) lo = -1.0f, hi = 1.0f;
    for (int k = 0; k < check->n_inputs; k++) {
        Tensor *t = tg_calloc(1, sizeof *t);
        tensor_set_shape(t, check->ndim[k], check->shape[k]);
        tensor_set_name(t, check->names[k]);
        t->data = tg_malloc((size_t)t->numel * sizeof(float));
        rng_fill_uniform(&rng, t->data, (size_t)t->numel, lo, hi);
        inputs[k] = t;
    }
    GradcheckOptions opts = gradcheck_defaults();
    opts.seed = seed ^ 0x5bd1e995u;
    if (check->rtol > 0) opts.rtol = check->rtol;
    bool ok = gradcheck(tape, check->forward, check->ctx, inputs, check->n_inputs, &opts, results);
    for (int k = 0; k < check->n_inputs; k++) {
        free(inputs[k]->data);
        free(inputs[k]);
    }
    return ok;
}

int op_checks_run_family(const char *op, Tape *tape, uint64_t seed) {
    int failures = 0;
    for (int i = 0; i < op_checks_count(); i++) {
        const OpCheck *c = op_check_get(i);
        if (op && strcmp(c->op, op) != 0) continue;
        GradcheckResult res[OP_CHECK_MAX_INPUTS];
        if (!op_check_run(c, tape, seed, res)) {
            failures++;
            for (int k = 0; k < c->n_inputs; k++)
                if (!res[k].pass)
                    fprintf(stderr,
                            "gradcheck FAILED: %s [%s] input %s: %lld elements over the bound; worst at %lld: "
                            "analytic %.6g, numeric %.6g (%.3g x the bound)\n",
                            c->op, c->variant, res[k].input, (long long)res[k].n_failing,
                            (long long)res[k].worst_index, res[k].worst_analytic, res[k].worst_numeric,
                            res[k].worst_ratio);
        }
    }
    return failures;
}
