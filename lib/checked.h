/* Size arithmetic that cannot wrap, and numbers from text that cannot be undefined.
 *
 * Every size derived from a file (a tensor's shape, a model's config, a record count) is
 * multiplied and added through these: each returns false, leaving *out unspecified, when the
 * exact result does not fit its type, so a hostile 2^62 never wraps into a small allocation.
 */
#ifndef TAPEGRAD_LIB_CHECKED_H
#define TAPEGRAD_LIB_CHECKED_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool tg_mul_size(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool tg_add_size(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool tg_mul_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool tg_add_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }

/* n elements of `elem_bytes` each, as a byte count: false for a negative n or an overflow. */
static inline bool tg_bytes_of(int64_t n, size_t elem_bytes, size_t *out) {
    return n >= 0 && (uint64_t)n <= SIZE_MAX && tg_mul_size((size_t)n, elem_bytes, out);
}

/* A double that is exactly an integer in [lo, hi] (both within +-2^53, where every integer is a
 * double), as int64_t: false for NaN, an infinity, a fraction or a value out of range. Casting
 * such a double straight to int64_t would be undefined behaviour for NaN, inf and |v| >= 2^63. */
static inline bool tg_double_to_i64(double v, int64_t lo, int64_t hi, int64_t *out) {
    if (!(v >= (double)lo && v <= (double)hi) || v != floor(v)) return false;
    *out = (int64_t)v;
    return true;
}

#endif
