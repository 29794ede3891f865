/* The kernel table of one path (lib/kernels.h), compiled once per path like the kernels. */
#include "lib/isa/isa_kernels.h"

const TgKernels ISA_FN(tg_kernels) = {
    .isa = (tg_isa)TG_ISA_LEVEL,
    .gemm_mr = ISA_GEMM_MR,
    .gemm_nr = ISA_GEMM_NR,
    .sgemm = ISA_FN(sgemm_tiled),
#if TG_ISA_LEVEL == 4
    .bf16gemm = ISA_FN(bf16gemm_amx),
    .bf16_native = true,
    .bf16_loop = ISA_FN(amx_loop),
    .bf16_loop_flops = 2.0 * 16 * 16 * 32 * ISA_AMX_LOOP_TILES,
#elif TG_ISA_LEVEL == 3
    .bf16gemm = ISA_FN(bf16gemm_pairs),
    .bf16_native = true,
    .bf16_loop = ISA_FN(bf16_loop),
    .bf16_loop_flops = 4.0 * ISA_PEAK_CHAINS * VLANES,
#else
    .bf16gemm = ISA_FN(bf16gemm_pairs),
    .bf16_native = false,
    .bf16_loop = ISA_FN(fma_loop),
    .bf16_loop_flops = 2.0 * ISA_PEAK_CHAINS * VLANES,
#endif
    .gemm_rows = ISA_FN(gemm_rows),
    .softmax_scaled = ISA_FN(softmax_scaled),
    .softmax_backward = ISA_FN(softmax_backward),
    .logsumexp = ISA_FN(logsumexp),
    .scaled_exp = ISA_FN(scaled_exp),
    .swiglu_forward = ISA_FN(swiglu_forward),
    .swiglu_backward = ISA_FN(swiglu_backward),
    .rmsnorm_forward = ISA_FN(rmsnorm_forward),
    .rmsnorm_backward = ISA_FN(rmsnorm_backward),
    .rmsnorm_gain_grad = ISA_FN(rmsnorm_gain_grad),
    .rope = ISA_FN(rope),
    .adamw = ISA_FN(adamw),
    .fma_loop = ISA_FN(fma_loop),
    .fma_loop_flops = 2.0 * ISA_PEAK_CHAINS * VLANES,
};
