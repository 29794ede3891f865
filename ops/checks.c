#include "ops/checks.h"

#include <stdlib.h>
#include <string.h>

#include "tapegrad/error.h"
#include "tapegrad/rng.h"
#include "tapegrad/ops.h"

/* ---- the registry: each op's list, then each composite's ---- */

typedef struct {
    const char *name;
    const TgOpCheckList *list;
} Family;

static const Family families[] = {
#define TG_OP_FAMILY(id, name, checks) {name, &checks},
    TG_OP_LIST(TG_OP_FAMILY)
    TG_COMPOSITE_LIST(TG_OP_FAMILY)
#undef TG_OP_FAMILY
};
enum { N_FAMILIES = sizeof families / sizeof families[0] };

int tg_op_check_name_count(void) { return N_FAMILIES; }
const char *tg_op_check_name(int i) { return i >= 0 && i < N_FAMILIES ? families[i].name : NULL; }

int tg_op_check_cases_of(const char *name) {
    for (int f = 0; f < N_FAMILIES; f++)
        if (strcmp(families[f].name, name) == 0) return families[f].list->count;
    return 0;
}

int tg_op_checks_count(void) {
    int n = 0;
    for (int f = 0; f < N_FAMILIES; f++) n += families[f].list->count;
    return n;
}

TgOpCheckRef tg_op_check_get(int i) {
    for (int f = 0; f < N_FAMILIES; f++) {
        if (i < families[f].list->count) return (TgOpCheckRef){families[f].name, &families[f].list->cases[i]};
        i -= families[f].list->count;
    }
    return (TgOpCheckRef){NULL, NULL};
}

/* ---- running ---- */

int tg_op_check_input_count(const TgOpCheck *check) {
    int n = 0;
    while (n < TG_OP_CHECK_MAX_INPUTS && check->inputs[n].name) n++;
    TG_CHECK(n > 0, "gradcheck case [%s] has no input", check->variant);
    for (int k = n; k < TG_OP_CHECK_MAX_INPUTS; k++)
        TG_CHECK(!check->inputs[k].name, "gradcheck case [%s]: input %s follows an unnamed one", check->variant,
                 check->inputs[k].name);
    return n;
}

int tg_op_check_input_ndim(const TgOpCheckInput *input) {
    int ndim = 0;
    while (ndim < TG_MAX_DIMS && input->shape[ndim] != 0) ndim++;
    for (int d = ndim; d < TG_MAX_DIMS; d++)
        TG_CHECK(input->shape[d] == 0, "gradcheck input %s: dim %d follows the 0 that ends its shape", input->name, d);
    return ndim;
}

bool tg_op_check_run(const TgOpCheck *check, TgTape *tape, uint64_t seed, TgGradcheckResult *results) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    TgTensor *inputs[TG_OP_CHECK_MAX_INPUTS];
    int n_inputs = tg_op_check_input_count(check);
    float lo = check->lo, hi = check->hi;
    if (lo == 0.0f && hi == 0.0f) lo = -1.0f, hi = 1.0f;
    for (int k = 0; k < n_inputs; k++) {
        TgTensor *t = tg_calloc(1, sizeof *t);
        tg_tensor_set_shape(t, tg_op_check_input_ndim(&check->inputs[k]), check->inputs[k].shape);
        tg_tensor_set_name(t, check->inputs[k].name);
        t->data = tg_malloc((size_t)t->numel * sizeof(float));
        tg_rng_fill_uniform(&rng, t->data, (size_t)t->numel, lo, hi);
        inputs[k] = t;
    }
    TgGradcheckOptions opts = tg_gradcheck_defaults();
    opts.seed = seed ^ 0x5bd1e995u;
    if (check->rtol > 0) opts.rtol = check->rtol;
    bool ok = tg_gradcheck(tape, check->forward, check->ctx, inputs, n_inputs, &opts, results);
    for (int k = 0; k < n_inputs; k++) {
        free(inputs[k]->data);
        free(inputs[k]);
    }
    return ok;
}

int tg_op_check_list_run(const char *op, const TgOpCheckList *list, TgTape *tape, uint64_t seed, int64_t n_seeds,
                         TgOpCheckReportFn report, void *ctx) {
    TG_CHECK(n_seeds >= 1, "%s: checking with %lld seeds", op, (long long)n_seeds);
    int failures = 0;
    for (int i = 0; i < list->count; i++) {
        const TgOpCheck *check = &list->cases[i];
        TgGradcheckResult res[TG_OP_CHECK_MAX_INPUTS], worst[TG_OP_CHECK_MAX_INPUTS];
        int n_inputs = tg_op_check_input_count(check);
        for (int64_t s = 0; s < n_seeds; s++) {
            tg_op_check_run(check, tape, seed + (uint64_t)s, res);
            for (int k = 0; k < n_inputs; k++)
                if (s == 0 || res[k].worst_ratio > worst[k].worst_ratio) worst[k] = res[k];
        }
        bool pass = true;
        for (int k = 0; k < n_inputs; k++) pass &= worst[k].pass;
        failures += !pass;
        if (report) report(ctx, op, check, worst);
    }
    return failures;
}

int tg_op_checks_run(const char *op, TgTape *tape, uint64_t seed, int64_t n_seeds, TgOpCheckReportFn report, void *ctx) {
    int failures = 0;
    for (int f = 0; f < N_FAMILIES; f++)
        if (!op || strcmp(families[f].name, op) == 0)
            failures += tg_op_check_list_run(families[f].name, families[f].list, tape, seed, n_seeds, report, ctx);
    return failures;
}

void tg_op_check_print_failures(void *out, const char *op, const TgOpCheck *check, const TgGradcheckResult *worst) {
    tg_gradcheck_print_failures(out, op, check->variant, worst, tg_op_check_input_count(check));
}

/* ---- the graph itself: a tensor used twice and a diamond, through several ops ---- */

/* y = x W1^T, z = x W2^T; out = y * z + 0.5 y: x reaches out along four paths, y along two */
static TgTensor *fwd_graph_diamond(TgTape *t, TgTensor *const *in, void *ctx) {
    TgTensor *y = tg_linear(t, in[0], in[1]);
    TgTensor *z = tg_linear(t, in[0], in[2]);
    return tg_add(t, tg_mul(t, y, z), tg_scale(t, y, 0.5f));
}

static const TgOpCheck graph_cases[] = {
    {.variant = "x twice, diamond", .inputs = {{"x", {3, 4}}, {"w1", {5, 4}}, {"w2", {5, 4}}},
     .forward = fwd_graph_diamond},
};
const TgOpCheckList tg_graph_checks = TG_OP_CHECK_LIST(graph_cases);
