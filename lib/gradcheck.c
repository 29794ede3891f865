#include "tapegrad/gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/error.h"
#include "tapegrad/rng.h"

TgGradcheckOptions tg_gradcheck_defaults(void) {
    TgGradcheckOptions o = {.eps = 1e-2, .rtol = 1e-2, .atol_scale = 1e-4, .atol_noise = 4, .seed = 1234};
    return o;
}

static double weighted_sum(const TgTensor *out, const float *r) {
    double s = 0.0;
    for (int64_t i = 0; i < out->numel; i++) s += (double)out->data[i] * r[i];
    return s;
}

/* Compares one input's analytic and numeric gradients element by element (see gradcheck.h);
 * nu is the rounding noise of the central difference. */
static bool judge(const TgTensor *x, const float *analytic, const double *numeric, double nu,
                  const TgGradcheckOptions *opts, TgGradcheckResult *res) {
    memset(res, 0, sizeof *res);
    memcpy(res->input, x->name, sizeof res->input);
    double scale = 0.0;
    for (int64_t i = 0; i < x->numel; i++) scale = fmax(scale, fabs(numeric[i]));
    double atol = opts->atol_scale * scale + opts->atol_noise * nu;
    res->worst_ratio = -1.0;
    for (int64_t i = 0; i < x->numel; i++) {
        double err = fabs(numeric[i] - analytic[i]);
        double bound = atol + opts->rtol * fabs(numeric[i]);
        /* a zero bound (an input the output does not depend on) admits only an exact zero */
        double ratio = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0.0);
        if (ratio > 1.0) res->n_failing++;
        if (ratio > res->worst_ratio) {
            res->worst_ratio = ratio;
            res->worst_index = i;
            res->worst_analytic = analytic[i];
            res->worst_numeric = numeric[i];
        }
        res->max_abs_err = fmax(res->max_abs_err, err);
    }
    res->atol = atol;
    res->scale = scale;
    res->rel_err = res->max_abs_err / (scale > 1e-3 ? scale : 1e-3);
    res->pass = res->n_failing == 0;
    return res->pass;
}

bool tg_gradcheck(TgTape *tape, TgGradcheckForwardFn forward, void *ctx, TgTensor *const *inputs,
               int n_inputs, const TgGradcheckOptions *opts_in, TgGradcheckResult *results) {
    TgGradcheckOptions opts = opts_in ? *opts_in : tg_gradcheck_defaults();
    tg_tape_reset(tape);
    bool old_enabled = tg_tape_set_grad_enabled(tape, true);

    /* analytic: one backward from d(out) = R */
    for (int k = 0; k < n_inputs; k++) {
        inputs[k]->requires_grad = true;
        inputs[k]->grad = NULL;
    }
    TgTensor *out = forward(tape, inputs, ctx);
    TG_CHECK(out->requires_grad, "gradcheck: the forward recorded nothing");
    float *r = tg_malloc((size_t)out->numel * sizeof(float));
    TgRng rng;
    tg_rng_seed(&rng, opts.seed);
    tg_rng_fill_uniform(&rng, r, (size_t)out->numel, -1.0f, 1.0f);
    double magnitude = 0.0;   /* sum |out * R|: one float32 rounding of each output moves L by ~2^-24 of it */
    for (int64_t i = 0; i < out->numel; i++) magnitude += fabs((double)out->data[i] * r[i]);
    double nu = 0x1p-24 * magnitude / (2 * opts.eps);
    memcpy(tg_tensor_grad(tape, out), r, (size_t)out->numel * sizeof(float));
    tg_tape_backward_from_seeded(tape);

    float **analytic = tg_malloc((size_t)n_inputs * sizeof(float *));
    for (int k = 0; k < n_inputs; k++) {
        size_t bytes = (size_t)inputs[k]->numel * sizeof(float);
        analytic[k] = tg_malloc(bytes);
        if (inputs[k]->grad) memcpy(analytic[k], inputs[k]->grad, bytes);
        else memset(analytic[k], 0, bytes);
        inputs[k]->grad = NULL; /* it lived in the arena */
    }
    tg_tape_reset(tape);

    /* numeric: central differences, no tape */
    tg_tape_set_grad_enabled(tape, false);
    bool all_pass = true;
    for (int k = 0; k < n_inputs; k++) {
        TgTensor *x = inputs[k];
        double *numeric = tg_malloc((size_t)x->numel * sizeof(double));
        for (int64_t i = 0; i < x->numel; i++) {
            float saved = x->data[i];
            x->data[i] = (float)(saved + opts.eps);
            double lp = weighted_sum(forward(tape, inputs, ctx), r);
            tg_tape_reset(tape);
            x->data[i] = (float)(saved - opts.eps);
            double lm = weighted_sum(forward(tape, inputs, ctx), r);
            tg_tape_reset(tape);
            x->data[i] = saved;
            /* divide by the step actually taken after rounding to float */
            double h = (double)(float)(saved + opts.eps) - (double)(float)(saved - opts.eps);
            numeric[i] = (lp - lm) / h;
        }
        all_pass &= judge(x, analytic[k], numeric, nu, &opts, &results[k]);
        free(numeric);
    }
    tg_tape_set_grad_enabled(tape, old_enabled);
    for (int k = 0; k < n_inputs; k++) free(analytic[k]);
    free(analytic);
    free(r);
    return all_pass;
}

void tg_gradcheck_print_failures(FILE *out, const char *op, const char *case_name, const TgGradcheckResult *results,
                                 int n_inputs) {
    if (!out) return;
    for (int k = 0; k < n_inputs; k++)
        if (!results[k].pass)
            fprintf(out,
                    "gradcheck FAILED: %s [%s] input %s: %lld elements over the bound; worst at %lld: "
                    "analytic %.6g, numeric %.6g (%.3g x the bound)\n",
                    op, case_name, results[k].input, (long long)results[k].n_failing,
                    (long long)results[k].worst_index, results[k].worst_analytic, results[k].worst_numeric,
                    results[k].worst_ratio);
}
