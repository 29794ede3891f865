/* How the blocked GEMM (lib/isa/gemm_tiled.c) cuts a product, derived from this machine's caches.
 *
 * C (m x n) += A (m x k) B (k x n), row-major. The kernel keeps an TG_MR x TG_NR tile of C in
 * registers; per step of k it loads TG_NR floats of a packed B panel (two vectors) and broadcasts TG_MR
 * floats of an A micro-panel. The loops run in BLIS's order with A's and B's roles exchanged
 * (row-major C is BLIS's column-major C^T): an A micro-panel (TG_MR x kc) is used against every B
 * panel (kc x TG_NR) of a B block (kc x nc) in turn, so the micro-panel is what stays in L1, the B
 * block what stays in L2, and each B panel is read once per tile, in order, as a stream:
 *
 *   kc  the length of a k slice: the A micro-panel takes the ways of L1 but one (left to C's
 *       tile and to the B panel streaming through),
 *         kc = (W1 - 1) x (L1 bytes / W1) / (TG_MR x 4)
 *       A slice as long as L1 allows spreads the tile's fixed costs (C read and written, the
 *       accumulators cleared and stored) over the most steps. BLIS's analytical model (Low et
 *       al., ACM TOMS 2016) keeps the streamed panel's share of L1 in proportion TG_NR : TG_MR, which
 *       gives slices 3-4x shorter; docs/results.md has what was measured.
 *   nc  the columns of a packed B block (kc x nc), which stays in L2 across the A micro-panels:
 *       the ways of L2 not taken by an A micro-panel or C,
 *         nc = (W2 - 1 - ceil(TG_MR kc 4 / way2)) x way2 / (kc x 4), a multiple of TG_NR
 *   mc  the rows of an A block (mc x kc), which stays in L3 across the B blocks: likewise with
 *       half of L3 (the other cores share it), a multiple of TG_MR, at most 8192
 *
 * The register tile is the path's (lib/isa/isa_kernels.h): enough independent accumulators to
 * hide the multiply-add latency on every port (latency 4 x 2 ports = 8 at least on the x86-64
 * cores tapegrad runs on; avx2 has 12, avx512 24), with two registers left for the B vectors
 * and one for the broadcast.
 *
 * Only kc decides the order of the sums: every element of C is a chain of multiply-adds over one
 * k slice, the slices added in order, and k is cut into equal slices of at most kc that depend
 * on k and kc alone. mc and nc change the speed, never a bit. A run records the kc it trained
 * with (run.txt, run/run.c), and a resumed run uses it on any machine. */
#ifndef TAPEGRAD_LIB_GEMM_PLAN_H
#define TAPEGRAD_LIB_GEMM_PLAN_H

#include <stdint.h>

#include "lib/cpu.h"
#include "tapegrad/error.h"

typedef struct TgGemmPlan {
    int mr, nr;             /* the register tile (the path's) */
    int64_t kc, nc, mc;     /* see above */
} TgGemmPlan;

/* kc's bounds, whatever the caches say: a slice of fewer than 64 steps pays a tile's fixed costs
 * (C read and written) too often, and more than 1024 never fits L1. */
enum { TG_GEMM_KC_MIN = 64, TG_GEMM_KC_MAX = 1024 };

/* The plan of a register tile on these caches (pure: tests feed other CPUs' caches). */
TgGemmPlan tg_gemm_plan_for(int mr, int nr, const TgCaches *caches);
/* The plan the active path's GEMM uses: tg_gemm_plan_for its tile and tg_cpu_caches(), with kc
 * replaced by tg_gemm_plan_set_kc's. */
TgGemmPlan tg_gemm_plan(void);
/* Makes every later GEMM slice k at `kc` (a run resumed on another machine sums as it trained);
 * 0 returns to the caches' kc. TG_ERR_ARG outside [TG_GEMM_KC_MIN, TG_GEMM_KC_MAX] or not a
 * multiple of 8. Not while GEMMs run. */
TgStatus tg_gemm_plan_set_kc(int64_t kc);
/* "kc 320, nc 304, mc 4096 (tile 6x16; caches from sysfs: L1d 32 KiB 8-way, L2 512 KiB 8-way,
 * L3 32 MiB 16-way)" into buf. */
void tg_gemm_plan_describe(const TgGemmPlan *plan, char *buf, size_t cap);

#endif
