/* The kernel table of one path (lib/kernels.h), compiled once per path like the kernels. */
#include "lib/isa/isa_kernels.h"

const TgKernels TG_ISA_FN(kernels) = {
    .isa = (TgIsa)TG_ISA_LEVEL,
    .gemm_mr = TG_ISA_GEMM_MR,
    .gemm_nr = TG_ISA_GEMM_NR,
    .sgemm = TG_ISA_FN(sgemm_tiled),
#if TG_ISA_LEVEL == 4
    .bf16gemm = TG_ISA_FN(bf16gemm_amx),
    .bf16_native = true,
    .bf16_loop = TG_ISA_FN(amx_loop),
    .bf16_loop_flops = 2.0 * 16 * 16 * 32 * TG_ISA_AMX_LOOP_TILES,
#elif TG_ISA_LEVEL == 3
    .bf16gemm = TG_ISA_FN(bf16gemm_pairs),
    .bf16_native = true,
    .bf16_loop = TG_ISA_FN(bf16_loop),
    .bf16_loop_flops = 4.0 * TG_ISA_PEAK_CHAINS * TG_VLANES,
#else
    .bf16gemm = TG_ISA_FN(bf16gemm_pairs),
    .bf16_native = false,
    .bf16_loop = TG_ISA_FN(fma_loop),
    .bf16_loop_flops = 2.0 * TG_ISA_PEAK_CHAINS * TG_VLANES,
#endif
    .gemm_rows = TG_ISA_FN(gemm_rows),
    .softmax_scaled = TG_ISA_FN(softmax_scaled),
    .softmax_backward = TG_ISA_FN(softmax_backward),
    .logsumexp = TG_ISA_FN(logsumexp),
    .scaled_exp = TG_ISA_FN(scaled_exp),
    .swiglu_forward = TG_ISA_FN(swiglu_forward),
    .swiglu_backward = TG_ISA_FN(swiglu_backward),
    .rmsnorm_forward = TG_ISA_FN(rmsnorm_forward),
    .rmsnorm_backward = TG_ISA_FN(rmsnorm_backward),
    .rmsnorm_gain_grad = TG_ISA_FN(rmsnorm_gain_grad),
    .rope = TG_ISA_FN(rope),
    .adamw = TG_ISA_FN(adamw),
    .fma_loop = TG_ISA_FN(fma_loop),
    .fma_loop_flops = 2.0 * TG_ISA_PEAK_CHAINS * TG_VLANES,
};
