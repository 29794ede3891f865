/* How tapegrad's threads compute with subnormal floats: they don't. Every thread that runs an op
 * (the pool's workers for their whole life, the caller for the duration of each parallel loop,
 * lib/pool.c) has flush-to-zero and denormals-are-zero set: a result below FLT_MIN (1.2e-38) is 0,
 * and so is an input below it. Intel cores take a microcode assist of ~100 cycles on every
 * subnormal operand or result, and at high learning rates attention probabilities and
 * activations underflow into them: a lr 3e-2 run slows down many times over as it goes
 * (bench/high_lr.sh measures it; docs/results.md, 2026-12-02, has a run). What changes in the
 * bits: only a value that was subnormal (below 1.2e-38, where a float keeps fewer than 24 bits
 * anyway) is 0 instead; the same operations round the same way on normal numbers, a gradient
 * check's values never come near FLT_MIN, and the mode is the same on every kernel path and
 * thread, so a run stays bitwise the same on every thread count.
 *
 * On x86-64 this is the MXCSR's FTZ and DAZ bits (SSE and AVX arithmetic alike); elsewhere the
 * calls do nothing. */
#ifndef TAPEGRAD_LIB_FPMODE_H
#define TAPEGRAD_LIB_FPMODE_H

#include <stdbool.h>

/* Sets flush-to-zero and denormals-are-zero on the calling thread; returns the mode it replaced,
 * for tg_fp_mode_restore. */
unsigned tg_fp_mode_enter(void);
/* Puts back the flush bits of a mode tg_fp_mode_enter returned (nothing else of the register). */
void tg_fp_mode_restore(unsigned saved);
/* Whether the calling thread computes with subnormals flushed (for tests). */
bool tg_fp_mode_flushes(void);

#endif
