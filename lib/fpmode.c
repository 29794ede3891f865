#include "lib/fpmode.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>

enum { MXCSR_DAZ = 1u << 6, MXCSR_FTZ = 1u << 15 };

unsigned tg_fp_mode_enter(void) {
    unsigned saved = _mm_getcsr();
    if ((saved & (MXCSR_DAZ | MXCSR_FTZ)) != (MXCSR_DAZ | MXCSR_FTZ)) _mm_setcsr(saved | MXCSR_DAZ | MXCSR_FTZ);
    return saved;
}

/* Only the two bits tg_fp_mode_enter sets go back: the rest of the register (exception masks,
 * rounding) is the caller's, and a saved value of 0 (an engine closed without being opened) must
 * never unmask every floating-point exception. */
void tg_fp_mode_restore(unsigned saved) {
    unsigned now = _mm_getcsr(), want = (now & ~(MXCSR_DAZ | MXCSR_FTZ)) | (saved & (MXCSR_DAZ | MXCSR_FTZ));
    if (now != want) _mm_setcsr(want);
}

bool tg_fp_mode_flushes(void) { return (_mm_getcsr() & (MXCSR_DAZ | MXCSR_FTZ)) == (MXCSR_DAZ | MXCSR_FTZ); }

#else

unsigned tg_fp_mode_enter(void) { return 0; }
void tg_fp_mode_restore(unsigned saved) { (void)saved; }
bool tg_fp_mode_flushes(void) { return false; }

#endif
