/* The kernels of one path (lib/isa/simd.h names them with the path's suffix), for table.c. */
#ifndef TAPEGRAD_ISA_KERNELS_H
#define TAPEGRAD_ISA_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/kernels.h"
#include "lib/isa/simd.h"

/* The blocked GEMM's register tile (gemm_tiled.c says why these) */
#if TG_VLANES == 16
#define TG_ISA_GEMM_MR 12
#else
#define TG_ISA_GEMM_MR 6
#endif
#define TG_ISA_GEMM_NR (2 * TG_VLANES)
/* independent multiply-add chains of fma_loop: more than latency x pipes on any of these CPUs */
#define TG_ISA_PEAK_CHAINS 12
/* tile products per round of amx_loop: four C tiles, each 16 x 16 over k = 32 */
#define TG_ISA_AMX_LOOP_TILES 4

void TG_ISA_FN(sgemm_tiled)(const struct TgGemmPlan *plan, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
void TG_ISA_FN(bf16gemm_pairs)(const struct TgGemmPlan *plan, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                            int64_t ldc);
#if TG_ISA_LEVEL == 4
void TG_ISA_FN(bf16gemm_amx)(const struct TgGemmPlan *plan, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                          int64_t ldc);
void TG_ISA_FN(amx_loop)(int64_t iters, float *sink);
#endif
#if TG_ISA_LEVEL >= 3
void TG_ISA_FN(bf16_loop)(int64_t iters, float *sink);
#endif
void TG_ISA_FN(gemm_rows)(int rows, int64_t k, const float *a, int64_t a_row, int64_t a_col, const float *b,
                       int64_t ldb, int64_t n, float *c, int64_t ldc, bool accumulate);
void TG_ISA_FN(softmax_scaled)(float *p, int64_t n, float scale);
void TG_ISA_FN(softmax_backward)(const float *p, float *dp, int64_t n, float scale);
double TG_ISA_FN(logsumexp)(const float *z, int64_t n);
void TG_ISA_FN(scaled_exp)(const float *z, int64_t n, float shift, float scale, float *out, bool accumulate);
void TG_ISA_FN(swiglu_forward)(const float *a, const float *b, float *y, int64_t n);
void TG_ISA_FN(swiglu_backward)(const float *a, const float *b, const float *dy, float *da, float *db, int64_t n,
                             bool da_accumulate, bool db_accumulate);
float TG_ISA_FN(rmsnorm_forward)(const float *x, const float *g, float *y, int64_t d, float eps);
void TG_ISA_FN(rmsnorm_backward)(const float *x, const float *g, const float *dy, float rstd, float *dx, int64_t d,
                              bool accumulate);
void TG_ISA_FN(rmsnorm_gain_grad)(const float *x, const float *dy, float rstd, double *dg_sum, int64_t n);
void TG_ISA_FN(rope)(const float *in, float *out, const float *cos, const float *sin, int64_t heads, int64_t head_dim,
                  TgRopeMode mode);
void TG_ISA_FN(adamw)(const TgAdamW *args, int64_t begin, int64_t end);
void TG_ISA_FN(fma_loop)(int64_t iters, float *sink);

#endif
