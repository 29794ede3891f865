#include "gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "rng.h"

GradcheckOptions gradcheck_defaults(void) {
    GradcheckOptions o = {.eps = 1e-2, .tol = 1e-2, .seed = 1234};
    return o;
}

static double weighted_sum(const Tensor *out, const float *r) {
    double s = 0.0;
    for (int64_t i = 0; i < out->numel; i++) s += (double)out->data[i] * r[i];
    return s;
}

bool gradcheck(Tape *tape, gradcheck_forward_fn forward, void *ctx, Tensor *const *inputs,
               int n_inputs, const GradcheckOptions *opts_in, GradcheckResult *results) {
    GradcheckOptions opts = opts_in ? *opts_in : gradcheck_defaults();
    tape_reset(tape);
    bool old_enabled = tape_set_grad_enabled(tape, true);

    /* analytic: one backward from d(out) = R */
    for (int k = 0; k < n_inputs; k++) {
        inputs[k]->requires_grad = true;
        inputs[k]->grad = NULL;
    }
    Tensor *out = forward(tape, inputs, ctx);
    TG_CHECK(out->requires_grad, "gradcheck: the forward recorded nothing");
    float *r = tg_malloc((size_t)out->numel * sizeof(float));
    Rng rng;
    rng_seed(&rng, opts.seed);
    rng_fill_uniform(&rng, r, (size_t)out->numel, -1.0f, 1.0f);
    memcpy(tensor_grad(tape, out), r, (size_t)out->numel * sizeof(float));
    tape_backward_from_seeded(tape);

    float **analytic = tg_malloc((size_t)n_inputs * sizeof(float *));
    for (int k = 0; k < n_inputs; k++) {
        size_t bytes = (size_t)inputs[k]->numel * sizeof(float);
        analytic[k] = tg_malloc(bytes);
        if (inputs[k]->grad) memcpy(analytic[k], inputs[k]->grad, bytes);
        else memset(analytic[k], 0, bytes);
        inputs[k]->grad = NULL; /* it lived in the arena */
    }
    tape_reset(tape);

    /* numeric: central differences, no tape */
    tape_set_grad_enabled(tape, false);
    bool all_pass = true;
    for (int k = 0; k < n_inputs; k++) {
        Tensor *x = inputs[k];
        GradcheckResult *res = &results[k];
        memset(res, 0, sizeof *res);
        memcpy(res->input, x->name, sizeof res->input);
        double max_abs = 0.0, scale = 0.0;
        for (int64_t i = 0; i < x->numel; i++) {
            float saved = x->data[i];
            x->data[i] = (float)(saved + opts.eps);
            double lp = weighted_sum(forward(tape, inputs, ctx), r);
            tape_reset(tape);
            x->data[i] = (float)(saved - opts.eps);
            double lm = weighted_sum(forward(tape, inputs, ctx), r);
            tape_reset(tape);
            x->data[i] = saved;
            /* divide by the step actually taken after rounding to float */
            double h = (double)(float)(saved + opts.eps) - (double)(float)(saved - opts.eps);
            double numeric = (lp - lm) / h;
            double err = fabs(numeric - analytic[k][i]);
            if (fabs(numeric) > scale) scale = fabs(numeric);
            if (err > max_abs || i == 0) {
                max_abs = err;
                res->worst_index = i;
            }
        }
        res->max_abs_err = max_abs;
        res->scale = scale;
        res->rel_err = max_abs / (scale > 1e-3 ? scale : 1e-3);
        res->pass = res->rel_err <= opts.tol;
        all_pass &= res->pass;
    }
    tape_set_grad_enabled(tape, old_enabled);
    for (int k = 0; k < n_inputs; k++) free(analytic[k]);
    free(analytic);
    free(r);
    return all_pass;
}
