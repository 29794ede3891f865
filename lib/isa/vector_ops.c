/* The ops' vector loops, one copy per kernel path (lib/isa/simd.h): softmax and its backward,
 * log-sum-exp and scaled exponentials (cross-entropy), SwiGLU, RMSNorm, RoPE, AdamW, and the
 * multiply-add loop that measures the path's ceiling. The contracts are in lib/kernels.h.
 *
 * Every loop runs whole vectors and then one partial vector (load_part / store_part), so each
 * element goes through the same lane-wise code wherever its range ends; reductions keep TG_VLANES
 * partial sums (in double where the op's definition says so) added lane 0 first. */
#include <math.h>

#include "lib/isa/isa_kernels.h"
#include "lib/isa/simd.h"

/* Rows of at most TG_VLANES - 1 floats past the last whole vector. */
#define FOR_VECTORS(j, n) for (int64_t j = 0; j < (n); j += TG_VLANES)

/* ---- softmax ---- */

/* max_j p_j: exact in any order, so whole vectors and then the scalar tail */
TG_ALWAYS_INLINE float row_max(const float *p, int64_t n) {
    float max_value = p[0];
    int64_t j = 0;
    if (n >= TG_VLANES) {
        vf maxes = TG_VF(p);
        for (j = TG_VLANES; j + TG_VLANES <= n; j += TG_VLANES) {
            vf next = TG_VF(p + j);
            vmax_inplace(&maxes, &next);
        }
        max_value = lane_max(&maxes);
    }
    for (; j < n; j++) max_value = p[j] > max_value ? p[j] : max_value;
    return max_value;
}

/* zero the lanes at and past `count` (count < TG_VLANES) */
TG_ALWAYS_INLINE void zero_past(vf *v, int64_t count) {
    for (int64_t l = count; l < TG_VLANES; l++) (*v)[l] = 0.0f;
}

void TG_ISA_FN(softmax_scaled)(float *p, int64_t n, float scale) {
    float max_score = row_max(p, n);
    vf sums = {0};
    FOR_VECTORS(j, n) {
        vf e;
        load_part(&e, p + j, n - j);
        e = (e - max_score) * scale;
        exp_nonpositive(&e);
        if (n - j < TG_VLANES) zero_past(&e, n - j);
        store_part(p + j, &e, n - j);
        sums += e;
    }
    float inv_sum = 1.0f / lane_sum(&sums);
    FOR_VECTORS(j, n) {
        vf e;
        load_part(&e, p + j, n - j);
        e *= inv_sum;
        store_part(p + j, &e, n - j);
    }
}

void TG_ISA_FN(softmax_backward)(const float *p, float *dp, int64_t n, float scale) {
    vf sums = {0};
    FOR_VECTORS(j, n) {   /* the padding lanes are 0 * 0 */
        vf p_j, dp_j;
        load_part(&p_j, p + j, n - j);
        load_part(&dp_j, dp + j, n - j);
        sums += p_j * dp_j;
    }
    float rowsum = lane_sum(&sums);
    FOR_VECTORS(j, n) {
        vf p_j, dp_j;
        load_part(&p_j, p + j, n - j);
        load_part(&dp_j, dp + j, n - j);
        dp_j = scale * p_j * (dp_j - rowsum);
        store_part(dp + j, &dp_j, n - j);
    }
}

/* ---- cross-entropy's exponentials ---- */

double TG_ISA_FN(logsumexp)(const float *z, int64_t n) {
    float max_value = row_max(z, n);
    vd sums = {0};
    FOR_VECTORS(j, n) {
        vf e;
        load_part(&e, z + j, n - j);
        e -= max_value;
        exp_nonpositive(&e);
        if (n - j < TG_VLANES) zero_past(&e, n - j);
        vd wide;
        widen(&wide, &e);
        sums += wide;
    }
    return (double)max_value + log(lane_sum_d(&sums));
}

void TG_ISA_FN(scaled_exp)(const float *z, int64_t n, float shift, float scale, float *out, bool accumulate) {
    FOR_VECTORS(j, n) {
        vf e;
        load_part(&e, z + j, n - j);   /* before out is written: out may be z */
        e -= shift;
        exp_nonpositive(&e);
        e *= scale;
        if (accumulate) {
            vf old;
            load_part(&old, out + j, n - j);
            e = old + e;
        }
        store_part(out + j, &e, n - j);
    }
}

/* ---- SwiGLU ---- */

void TG_ISA_FN(swiglu_forward)(const float *a, const float *b, float *y, int64_t n) {
    FOR_VECTORS(i, n) {
        vf a_i, b_i;
        load_part(&a_i, a + i, n - i);
        load_part(&b_i, b + i, n - i);
        vf s = a_i;
        sigmoid(&s);
        vf y_i = a_i * s * b_i;   /* silu(a) * b */
        store_part(y + i, &y_i, n - i);
    }
}

/* Differentiating y = silu(a) b = a s(a) b:
 *   da += dy b silu'(a),  silu'(a) = s (1 + a (1 - s))
 *   db += dy silu(a)                                   */
void TG_ISA_FN(swiglu_backward)(const float *a, const float *b, const float *dy, float *da, float *db, int64_t n,
                             bool da_accumulate, bool db_accumulate) {
    FOR_VECTORS(i, n) {
        vf a_i, b_i, dy_i, old;
        load_part(&a_i, a + i, n - i);
        load_part(&b_i, b + i, n - i);
        load_part(&dy_i, dy + i, n - i);
        vf s = a_i;
        sigmoid(&s);
        if (da) {
            vf da_i = dy_i * b_i * s * (1.0f + a_i * (1.0f - s));
            if (da_accumulate) load_part(&old, da + i, n - i), da_i = old + da_i;
            store_part(da + i, &da_i, n - i);
        }
        if (db) {   /* after da: when b is a, this adds to what was just stored */
            vf db_i = dy_i * a_i * s;
            if (db_accumulate) load_part(&old, db + i, n - i), db_i = old + db_i;
            store_part(db + i, &db_i, n - i);
        }
    }
}

/* ---- RMSNorm ---- */

float TG_ISA_FN(rmsnorm_forward)(const float *x, const float *g, float *y, int64_t d, float eps) {
    vd sums = {0};
    FOR_VECTORS(j, d) {
        vf x_j;
        load_part(&x_j, x + j, d - j);
        vd wide;
        widen(&wide, &x_j);
        sums += wide * wide;
    }
    float rstd = (float)(1.0 / sqrt(lane_sum_d(&sums) / (double)d + (double)eps));
    FOR_VECTORS(j, d) {
        vf x_j, g_j;
        load_part(&x_j, x + j, d - j);
        load_part(&g_j, g + j, d - j);
        vf y_j = x_j * rstd * g_j;
        store_part(y + j, &y_j, d - j);
    }
    return rstd;
}

/* Differentiating y = xhat g, xhat = x rstd, rstd = (mean(x^2) + eps)^(-1/2):
 *   dxhat_j = dy_j g_j,   d rstd / dx_k = -rstd^3 x_k / d, hence
 *   dx_k += rstd (dxhat_k - xhat_k mean_j(dxhat_j xhat_j)) */
void TG_ISA_FN(rmsnorm_backward)(const float *x, const float *g, const float *dy, float rstd, float *dx, int64_t d,
                              bool accumulate) {
    vd sums = {0};
    FOR_VECTORS(j, d) {
        vf x_j, g_j, dy_j;
        load_part(&x_j, x + j, d - j);
        load_part(&g_j, g + j, d - j);
        load_part(&dy_j, dy + j, d - j);
        vf dxhat = dy_j * g_j, xhat = x_j * rstd;
        vd dxhat_wide, xhat_wide;
        widen(&dxhat_wide, &dxhat);
        widen(&xhat_wide, &xhat);
        sums += dxhat_wide * xhat_wide;
    }
    const float mean_dot = (float)(lane_sum_d(&sums) / (double)d);
    FOR_VECTORS(j, d) {
        vf x_j, g_j, dy_j;
        load_part(&x_j, x + j, d - j);
        load_part(&g_j, g + j, d - j);
        load_part(&dy_j, dy + j, d - j);
        vf dx_j = rstd * (dy_j * g_j - x_j * rstd * mean_dot);
        if (accumulate) {
            vf old;
            load_part(&old, dx + j, d - j);
            dx_j = old + dx_j;
        }
        store_part(dx + j, &dx_j, d - j);
    }
}

void TG_ISA_FN(rmsnorm_gain_grad)(const float *x, const float *dy, float rstd, double *dg_sum, int64_t n) {
    FOR_VECTORS(j, n) {
        vf x_j, dy_j;
        load_part(&x_j, x + j, n - j);
        load_part(&dy_j, dy + j, n - j);
        vf xhat = x_j * rstd;
        vd dy_wide, xhat_wide, sum;
        widen(&dy_wide, &dy_j);
        widen(&xhat_wide, &xhat);
        load_part_d(&sum, dg_sum + j, n - j);
        sum += dy_wide * xhat_wide;
        store_part_d(dg_sum + j, &sum, n - j);
    }
}

/* ---- RoPE ---- */

/* forward:   [x'_i, x'_{i+h}] = [[cos, -sin], [sin, cos]] [x_i, x_{i+h}]
 * backward:  the matrix is orthogonal, so [dx_i, dx_{i+h}] (+)= its transpose times
 *            [dy_i, dy_{i+h}]: dx_i = dy_i cos + dy_{i+h} sin, dx_{i+h} = dy_{i+h} cos - dy_i sin */
void TG_ISA_FN(rope)(const float *in, float *out, const float *cos, const float *sin, int64_t heads, int64_t head_dim,
                  TgRopeMode mode) {
    const int64_t half = head_dim / 2;
    for (int64_t head = 0; head < heads; head++) {
        const float *x = in + head * head_dim;
        float *y = out + head * head_dim;
        FOR_VECTORS(i, half) {
            vf c, s, first, second, out_first, out_second;
            load_part(&c, cos + i, half - i);
            load_part(&s, sin + i, half - i);
            load_part(&first, x + i, half - i);   /* both halves read before either is written */
            load_part(&second, x + half + i, half - i);
            if (mode == TG_ROPE_FORWARD) {
                out_first = first * c - second * s;
                out_second = second * c + first * s;
            } else {
                out_first = first * c + second * s;
                out_second = second * c - first * s;
            }
            if (mode == TG_ROPE_BACKWARD_ADD) {
                vf old;
                load_part(&old, y + i, half - i);
                out_first = old + out_first;
                load_part(&old, y + half + i, half - i);
                out_second = old + out_second;
            }
            store_part(y + i, &out_first, half - i);
            store_part(y + half + i, &out_second, half - i);
        }
    }
}

/* ---- AdamW ---- */

/* lane-wise square root: correctly rounded, like sqrtf (vsqrtps/sqrtps without errno) */
TG_ALWAYS_INLINE void vsqrt(vf *v) {
    for (int l = 0; l < TG_VLANES; l++) (*v)[l] = sqrtf((*v)[l]);
}

void TG_ISA_FN(adamw)(const TgAdamW *args, int64_t begin, int64_t end) {
    const float beta1 = args->beta1, beta2 = args->beta2, step_size = args->step_size;
    const float bias2_sqrt = args->bias2_sqrt, eps = args->eps, keep = 1.0f - args->decay;
    for (int64_t i = begin; i < end; i += TG_VLANES) {
        int64_t count = end - i;
        vf g, p, m, v;
        load_part(&g, args->g + i, count);
        load_part(&p, args->p + i, count);
        load_part(&m, args->m + i, count);
        load_part(&v, args->v + i, count);
        p *= keep;
        m = beta1 * m + (1.0f - beta1) * g;
        v = beta2 * v + (1.0f - beta2) * g * g;
        vf root = v;
        vsqrt(&root);
        p = p - step_size * m / (root / bias2_sqrt + eps);
        store_part(args->m + i, &m, count);
        store_part(args->v + i, &v, count);
        store_part(args->p + i, &p, count);
    }
}

/* ---- the multiply-add ceiling ---- */

enum { PEAK_CHAINS = TG_ISA_PEAK_CHAINS };

void TG_ISA_FN(fma_loop)(int64_t iters, float *sink) {
    volatile float seed = 1.0f;   /* values the compiler cannot see, so nothing folds */
    vf acc[PEAK_CHAINS], mul = (vf){0} + seed * 0.999999f, add = (vf){0} + seed * 1e-7f;
    for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = (vf){0} + (float)c;
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = acc[c] * mul + add;
    }
    vf total = {0};
    for (int c = 0; c < PEAK_CHAINS; c++) total += acc[c];
    *sink = lane_sum(&total);
}
