/* The bf16 GEMM on AMX tiles (the amx path only; lib/isa/gemm_bf16.c has the contract).
 *
 * Eight tile registers of 16 rows x 64 bytes: four hold a 32 x 32 block of C in fp32 (2 x 2
 * tiles of 16 x 16), two hold A (16 rows x 32 bf16 of k each), two hold B (16 pairs of k x 16
 * columns, each row the 16 columns' pairs side by side: the layout tdpbf16ps takes). Per 32
 * steps of k, two A tiles and two B tiles are loaded and four tdpbf16ps run:
 *   C(i, j) += sum over the 16 pairs of A(i, 2q) B(2q, j) + A(i, 2q+1) B(2q+1, j)
 * The loops and blocks are the other kernels' (gemm_tile.h: k slices by the plan's kc alone);
 * A is packed into 32-row micro-panels and B into 32-column panels, each in tile order with k
 * padded with zeros to a multiple of 32.
 *
 * The tiles need the kernel's leave (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA), which
 * lib/cpu.c asks once per process before it reports the amx path as supported; each call loads
 * the tile configuration on its own thread and releases the tiles at the end.
 *
 * Its tests (tests/test_bf16.c) run where the CPU has AMX and the kernel grants the tiles, and
 * skip elsewhere, saying so; docs/results.md names the machines it ran on. What can be checked
 * without the tiles is: compiled once more with TG_AMX_EMULATED (tests only, never in the library), the
 * six tile instructions below are C functions on memory tiles (tdpbf16ps as its definition
 * reads: per pair, the two exact products added to the fp32 accumulator), so the packing, the
 * blocking and the update of C run on any AVX512-BF16 CPU against the reference. */
#include <stdlib.h>

#include "lib/bf16.h"
#include "lib/isa/gemm_tile.h"
#include "tapegrad/error.h"

#if TG_ISA_LEVEL == 4
#include <immintrin.h>

#ifdef TG_AMX_EMULATED
/* 8 tiles of 16 rows x 64 bytes, as the configuration below sets them all */
static _Thread_local uint8_t emulated_tiles[8][16][64];
static void emulated_load(int t, const void *src, int64_t stride) {
    for (int r = 0; r < 16; r++) memcpy(emulated_tiles[t][r], (const uint8_t *)src + r * stride, 64);
}
static void emulated_store(int t, void *dst, int64_t stride) {
    for (int r = 0; r < 16; r++) memcpy((uint8_t *)dst + r * stride, emulated_tiles[t][r], 64);
}
/* C (16 x 16 fp32) += A (16 x 32 bf16) B (16 pairs x 16 columns' pairs) */
static void emulated_dpbf16ps(int c, int a, int b) {
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float acc;
            memcpy(&acc, &emulated_tiles[c][m][4 * n], sizeof acc);
            for (int q = 0; q < 16; q++)
                for (int e = 0; e < 2; e++) {
                    uint16_t x, y;
                    memcpy(&x, &emulated_tiles[a][m][4 * q + 2 * e], sizeof x);
                    memcpy(&y, &emulated_tiles[b][q][4 * n + 2 * e], sizeof y);
                    acc += tg_bf16_to_float(x) * tg_bf16_to_float(y);
                }
            memcpy(&emulated_tiles[c][m][4 * n], &acc, sizeof acc);
        }
}
#define AMX_LOADCONFIG(cfg) ((void)(cfg))
#define AMX_ZERO(t) memset(emulated_tiles[t], 0, sizeof emulated_tiles[t])
#define AMX_LOAD(t, src, stride) emulated_load(t, src, stride)
#define AMX_STORE(t, dst, stride) emulated_store(t, dst, stride)
#define AMX_DPBF16PS(c, a, b) emulated_dpbf16ps(c, a, b)
#define AMX_RELEASE() ((void)0)
#else
#define AMX_LOADCONFIG(cfg) _tile_loadconfig(cfg)
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_LOAD(t, src, stride) _tile_loadd(t, src, stride)
#define AMX_STORE(t, dst, stride) _tile_stored(t, dst, stride)
#define AMX_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
#define AMX_RELEASE() _tile_release()
#endif

enum { AMX_ROWS = 32, AMX_COLS = 32, AMX_K = 32 };

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} AmxConfig;

static void amx_configure(void) {
    AmxConfig cfg __attribute__((aligned(64))) = {.palette = 1};
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    AMX_LOADCONFIG(&cfg);
}

/* op(A) rows [0, rows) x k [0, kc) -> panels of AMX_ROWS rows; per block of AMX_K steps of k, two
 * tiles (rows 0-15, 16-31) of 16 rows x AMX_K bf16. Zero past rows and kc. */
static void pack_a_amx(const float *a, int64_t lda, bool trans, int64_t rows, int64_t kc, uint16_t *dst) {
    int64_t kblocks = (kc + AMX_K - 1) / AMX_K, panel = (int64_t)AMX_ROWS * AMX_K * kblocks;
    memset(dst, 0, (size_t)((rows + AMX_ROWS - 1) / AMX_ROWS * panel) * sizeof(uint16_t));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t p = 0; p < kc; p++) {
            float v = trans ? a[p * lda + i] : a[i * lda + p];
            int64_t r = i % AMX_ROWS;
            dst[i / AMX_ROWS * panel + (p / AMX_K) * AMX_ROWS * AMX_K + r * AMX_K + p % AMX_K] = tg_bf16_from_float(v);
        }
}

/* op(B) k [0, kc) x columns [0, cols) -> panels of AMX_COLS columns; per block of AMX_K steps,
 * two tiles (columns 0-15, 16-31) of 16 pairs x 16 columns' pairs. Zero past cols and kc. */
static void pack_b_amx(const float *b, int64_t ldb, bool trans, int64_t kc, int64_t cols, uint16_t *dst) {
    int64_t kblocks = (kc + AMX_K - 1) / AMX_K, panel = (int64_t)AMX_COLS * AMX_K * kblocks;
    memset(dst, 0, (size_t)((cols + AMX_COLS - 1) / AMX_COLS * panel) * sizeof(uint16_t));
    for (int64_t p = 0; p < kc; p++)
        for (int64_t j = 0; j < cols; j++) {
            float v = trans ? b[j * ldb + p] : b[p * ldb + j];
            int64_t c = j % AMX_COLS, pk = p % AMX_K;
            dst[j / AMX_COLS * panel + (p / AMX_K) * AMX_COLS * AMX_K + (c / 16) * 16 * 32 + (pk / 2) * 32 + (c % 16) * 2 +
                (pk & 1)] = tg_bf16_from_float(v);
        }
}

/* acc (32 x 32 floats) = A panel * B panel over kblocks blocks of AMX_K */
static void tile_product_amx(int64_t kblocks, const uint16_t *ap, const uint16_t *bp, float *acc) {
    AMX_ZERO(0);
    AMX_ZERO(1);
    AMX_ZERO(2);
    AMX_ZERO(3);
    for (int64_t kb = 0; kb < kblocks; kb++) {
        const uint16_t *a = ap + kb * AMX_ROWS * AMX_K, *b = bp + kb * AMX_COLS * AMX_K;
        AMX_LOAD(4, a, 64);
        AMX_LOAD(5, a + 16 * AMX_K, 64);
        AMX_LOAD(6, b, 64);
        AMX_LOAD(7, b + 16 * 32, 64);
        AMX_DPBF16PS(0, 4, 6);
        AMX_DPBF16PS(1, 4, 7);
        AMX_DPBF16PS(2, 5, 6);
        AMX_DPBF16PS(3, 5, 7);
    }
    AMX_STORE(0, acc, AMX_COLS * 4);
    AMX_STORE(1, acc + 16, AMX_COLS * 4);
    AMX_STORE(2, acc + 16 * AMX_COLS, AMX_COLS * 4);
    AMX_STORE(3, acc + 16 * AMX_COLS + 16, AMX_COLS * 4);
}

void TG_ISA_FN(bf16gemm_amx)(const TgGemmPlan *plan, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                          int64_t ldc) {
    if (gemm_trivial(m, n, k, beta, c, ldc)) return;
    int64_t slice = gemm_slice(k, plan->kc), slice_k = (slice + AMX_K - 1) / AMX_K * AMX_K;
    int64_t mc = equal_blocks(m, 2 * plan->mc * plan->kc / slice, AMX_ROWS);
    int64_t nc = equal_blocks(n, 2 * plan->nc * plan->kc / slice, AMX_COLS);
    size_t a_elems = (size_t)mc * (size_t)slice_k, b_elems = (size_t)nc * (size_t)slice_k;
    uint16_t *a_pack = TG_ISA_FN(gemm_thread_buffer)(0, (a_elems + b_elems) * sizeof(uint16_t));
    uint16_t *b_pack = a_pack + a_elems;
    float acc[AMX_ROWS * AMX_COLS] __attribute__((aligned(64)));
    amx_configure();
    for (int64_t i0 = 0; i0 < m; i0 += mc) {
        int64_t mb = m - i0 < mc ? m - i0 : mc;
        for (int64_t p0 = 0; p0 < k; p0 += slice) {
            int64_t kc = k - p0 < slice ? k - p0 : slice, kblocks = (kc + AMX_K - 1) / AMX_K;
            pack_a_amx(trans_a ? a + p0 * lda + i0 : a + i0 * lda + p0, lda, trans_a, mb, kc, a_pack);
            for (int64_t j0 = 0; j0 < n; j0 += nc) {
                int64_t nb = n - j0 < nc ? n - j0 : nc;
                pack_b_amx(trans_b ? b + j0 * ldb + p0 : b + p0 * ldb + j0, ldb, trans_b, kc, nb, b_pack);
                for (int64_t ir = 0; ir < mb; ir += AMX_ROWS) {
                    int rows = mb - ir < AMX_ROWS ? (int)(mb - ir) : AMX_ROWS;
                    for (int64_t jr = 0; jr < nb; jr += AMX_COLS) {
                        int cols = nb - jr < AMX_COLS ? (int)(nb - jr) : AMX_COLS;
                        tile_product_amx(kblocks, a_pack + ir * kblocks * AMX_K, b_pack + jr * kblocks * AMX_K, acc);
                        float *ct = c + (i0 + ir) * ldc + j0 + jr;
                        for (int r = 0; r < rows; r++)
                            for (int j = 0; j < cols; j++) {
                                float *cj = ct + r * ldc + j, v = alpha * acc[r * AMX_COLS + j];
                                *cj = p0 > 0 ? *cj + v : beta == 0.0f ? v : v + beta * *cj;
                            }
                    }
                }
            }
        }
    }
    AMX_RELEASE();
}

/* The AMX ceiling: four independent tile products on registers per round, TG_ISA_AMX_LOOP_TILES x
 * 16 x 16 x 32 multiply-adds. */
void TG_ISA_FN(amx_loop)(int64_t iters, float *sink) {
    static const uint16_t zeros[16 * 32] __attribute__((aligned(64)));
    float out[16 * 16] __attribute__((aligned(64)));
    amx_configure();
    AMX_LOAD(4, zeros, 64);
    AMX_LOAD(5, zeros, 64);
    AMX_LOAD(6, zeros, 64);
    AMX_ZERO(0);
    AMX_ZERO(1);
    AMX_ZERO(2);
    AMX_ZERO(3);
    for (int64_t it = 0; it < iters; it++) {
        AMX_DPBF16PS(0, 4, 6);
        AMX_DPBF16PS(1, 5, 6);
        AMX_DPBF16PS(2, 4, 6);
        AMX_DPBF16PS(3, 5, 6);
    }
    AMX_STORE(0, out, 64);
    *sink = out[0];
    AMX_RELEASE();
}

#endif
