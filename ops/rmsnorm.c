/* RMSNorm over the last dim:  y = x / sqrt(mean(x^2) + eps) * g.   x (..., d), g (d) -> y (..., d).
 * Over each group of d of the last dim when it holds several, g shared by the groups: x (..., n*d),
 * g (d) -> y (..., n*d). That is QK-norm, an RMSNorm over each head of q and k after the head split:
 * (B, T, H*hd) with g (hd).
 *
 * Per row of d, rstd = (mean(x^2) + eps)^(-1/2) and xhat = x * rstd, so y = xhat * g. The forward
 * keeps rstd (rows floats, in the arena) for the backward; xhat is recomputed from x. The row
 * loops are kernels of the active path (lib/kernels.h), their sums over d in double. */
#include <math.h>

#include "tapegrad/error.h"
#include "lib/kernels.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"

typedef struct {
    int64_t rows, d;
    float eps;
    const float *x, *g;  /* (rows, d), (d) */
    float *rstd;         /* (rows) */
    float *y;            /* (rows, d), forward */
    const float *dy;     /* (rows, d), backward */
    float *dx;           /* (rows, d), NULL when x wants no gradient */
    bool dx_accumulate;  /* add into dx (else store) */
    float *dg;           /* (d), NULL when g wants no gradient */
    double *dg_sum;      /* (d) scratch for dg */
} RmsnormJob;

static void rmsnorm_forward_rows(void *ctx, int64_t begin, int64_t end, int thread) {
    const RmsnormJob *job = ctx;
    const int64_t d = job->d;
    const TgKernels *kernels = tg_kernels();
    for (int64_t row = begin; row < end; row++)
        job->rstd[row] = kernels->rmsnorm_forward(job->x + row * d, job->g, job->y + row * d, d, job->eps);
}

/* Differentiating y = xhat * g, xhat = x * rstd, rstd = (mean(x^2) + eps)^(-1/2):
 *   dxhat_j = dy_j * g_j,   d rstd / dx_k = -rstd^3 x_k / d, hence
 *   dx_k += rstd * (dxhat_k - xhat_k * mean_j(dxhat_j * xhat_j))                        */
static void rmsnorm_backward_dx_rows(void *ctx, int64_t begin, int64_t end, int thread) {
    const RmsnormJob *job = ctx;
    const int64_t d = job->d;
    const TgKernels *kernels = tg_kernels();
    for (int64_t row = begin; row < end; row++)
        kernels->rmsnorm_backward(job->x + row * d, job->g, job->dy + row * d, job->rstd[row], job->dx + row * d, d,
                                  job->dx_accumulate);
}

/*   dg_j += sum_rows dy_j * xhat_j
 * A thread owns the columns [begin, end) and walks every row in order: each sum is taken in
 * the same order whatever the thread count, so dg is bitwise the same for 1 or N threads. */
static void rmsnorm_backward_dg_columns(void *ctx, int64_t begin, int64_t end, int thread) {
    const RmsnormJob *job = ctx;
    const int64_t d = job->d;
    const TgKernels *kernels = tg_kernels();
    for (int64_t j = begin; j < end; j++) job->dg_sum[j] = 0.0;
    for (int64_t row = 0; row < job->rows; row++)
        kernels->rmsnorm_gain_grad(job->x + row * d + begin, job->dy + row * d + begin, job->rstd[row],
                                   job->dg_sum + begin, end - begin);
    for (int64_t j = begin; j < end; j++) job->dg[j] += (float)job->dg_sum[j];
}

static void rmsnorm_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *x = node->in[0], *g = node->in[1], *y = node->out;
    RmsnormJob job = {
        .rows = x->numel / g->numel, .d = g->numel, .x = x->data, .g = g->data, .rstd = node->saved, .dy = y->grad};
    TgPool *pool = tg_pool_if_worth(tape->pool, 2 * x->numel);
    if (tg_tensor_wants_grad(x)) {
        job.dx = tg_tensor_grad_for_write(tape, x, &job.dx_accumulate);
        tg_pool_parallel_for(pool, job.rows, rmsnorm_backward_dx_rows, &job);
    }
    if (tg_tensor_wants_grad(g)) {
        job.dg = tg_tensor_grad(tape, g);
        job.dg_sum = tg_arena_alloc(tape->arena, (size_t)job.d * sizeof(double));
        tg_pool_parallel_for(pool, job.d, rmsnorm_backward_dg_columns, &job);
    }
}

TgTensor *tg_rmsnorm(TgTape *tape, TgTensor *x, TgTensor *g, float eps) {
    TG_CHECK(g->ndim == 1, "rmsnorm weight '%s' must be 1-d", g->name);
    TG_CHECK(g->shape[0] > 0 && x->ndim >= 1 && tg_tensor_dim(x, -1) % g->shape[0] == 0,
             "rmsnorm: x '%s' last dim %lld is no multiple of weight '%s' dim %lld", x->name,
             (long long)(x->ndim ? tg_tensor_dim(x, -1) : 0), g->name, (long long)g->shape[0]);
    TG_CHECK(eps >= 0.0f, "rmsnorm: eps %g < 0", (double)eps);
    TgTensor *y = tg_tensor_new(tape->arena, "rmsnorm", x->ndim, x->shape);  /* (..., d) */
    RmsnormJob job = {.rows = x->numel / g->numel, .d = g->numel, .eps = eps, .x = x->data, .g = g->data, .y = y->data};
    job.rstd = tg_arena_alloc(tape->arena, (size_t)job.rows * sizeof(float)); /* (rows of d) */
    tg_pool_parallel_for(tg_pool_if_worth(tape->pool, 2 * x->numel), job.rows, rmsnorm_forward_rows, &job);
    TgTapeNode *node = tg_tape_record(tape, tg_op_name(TG_OP_RMSNORM), rmsnorm_backward, y, 2, (TgTensor *[]){x, g});
    if (node) {
        node->saved = job.rstd;
        node->fparam[0] = eps;
    }
    return y;
}

/* ---- gradient checks (tapegrad/op_list.h) ---- */

/* ctx: the eps, a float; NULL means the model's 1e-5 */
static TgTensor *fwd_rmsnorm(TgTape *t, TgTensor *const *in, void *eps) {
    return tg_rmsnorm(t, in[0], in[1], eps ? *(const float *)eps : 1e-5f);
}

/* d one short of and one past multiples of the vector widths (4, 8, 16 floats), for 1 row and
 * 7, with eps near 0. Uniform inputs keep mean(x^2) near 1/3 at these d, far above eps, so the
 * central differences stay well-conditioned however small eps is. */
#define RMSNORM_CASE(rows, d, eps)                                                   \
    {.variant = #rows "x" #d " eps " #eps, .inputs = {{"x", {rows, d}}, {"g", {d}}}, \
     .forward = fwd_rmsnorm, .ctx = &(float){eps}},
#define RMSNORM_EPS_NEAR_0(rows, d) RMSNORM_CASE(rows, d, 1e-5) RMSNORM_CASE(rows, d, 1e-6)
#define RMSNORM_ROWS_1_AND_7(d) RMSNORM_EPS_NEAR_0(1, d) RMSNORM_EPS_NEAR_0(7, d)

static const TgOpCheck rmsnorm_cases[] = {
    {.variant = "3x7", .inputs = {{"x", {3, 7}}, {"g", {7}}}, .forward = fwd_rmsnorm},
    /* d = 1 with eps 0.1: y = x / sqrt(x^2 + eps) * g has a real slope in x. (At eps 1e-5,
     * y ~ sign(x) g and dy/dx ~ eps / |x|^3 drowns in float noise.) */
    {.variant = "3x1 eps 0.1", .inputs = {{"x", {3, 1}}, {"g", {1}}}, .forward = fwd_rmsnorm, .ctx = &(float){0.1f}},
    {.variant = "2x3x8 (3-d x)", .inputs = {{"x", {2, 3, 8}}, {"g", {8}}}, .forward = fwd_rmsnorm},
    RMSNORM_ROWS_1_AND_7(15) RMSNORM_ROWS_1_AND_7(17) RMSNORM_ROWS_1_AND_7(33) RMSNORM_ROWS_1_AND_7(65)
    /* per head (QK-norm): g shared by the heads of each position, its gradient summed over both */
    {.variant = "per head B2 T3 H4 hd8",
     .inputs = {{"x", {2, 3, 32}}, {"g", {8}}},
     .forward = fwd_rmsnorm,
     .ctx = &(float){1e-6f}},
    {.variant = "per head B1 T5 H2 hd17", .inputs = {{"x", {1, 5, 34}}, {"g", {17}}}, .forward = fwd_rmsnorm},
    {.variant = "per head B1 T2 H3 hd96",
     .inputs = {{"x", {1, 2, 288}}, {"g", {96}}},
     .forward = fwd_rmsnorm,
     .ctx = &(float){1e-6f}},
};
const TgOpCheckList tg_rmsnorm_checks = TG_OP_CHECK_LIST(rmsnorm_cases);
