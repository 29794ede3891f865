/* The RNG: reproducible, restorable bit-exactly, and distributed as claimed. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "tapegrad/rng.h"

Test(rng, same_seed_same_stream) {
    TgRng a, b;
    tg_rng_seed(&a, 42);
    tg_rng_seed(&b, 42);
    for (int i = 0; i < 1000; i++) cr_assert_eq(tg_rng_u64(&a), tg_rng_u64(&b));
    for (int i = 0; i < 1000; i++) cr_assert_eq(tg_rng_normal(&a), tg_rng_normal(&b));
}

Test(rng, different_seeds_differ) {
    TgRng a, b;
    tg_rng_seed(&a, 1);
    tg_rng_seed(&b, 2);
    int same = 0;
    for (int i = 0; i < 100; i++) same += tg_rng_u64(&a) == tg_rng_u64(&b);
    cr_expect_eq(same, 0);
}

Test(rng, state_round_trip_mid_stream) {
    TgRng a;
    tg_rng_seed(&a, 123);
    for (int i = 0; i < 17; i++) tg_rng_u64(&a);
    tg_rng_normal(&a); /* leaves a spare normal in the state: it must be saved too */
    unsigned char saved[sizeof(TgRng)];
    memcpy(saved, &a, sizeof a);
    double expect[64];
    for (int i = 0; i < 64; i++) expect[i] = i % 2 ? tg_rng_normal(&a) : (double)tg_rng_uniform(&a);
    TgRng b;
    memcpy(&b, saved, sizeof b);
    for (int i = 0; i < 64; i++) {
        double got = i % 2 ? tg_rng_normal(&b) : (double)tg_rng_uniform(&b);
        cr_assert_eq(memcmp(&got, &expect[i], sizeof got), 0, "draw %d differs after restore", i);
    }
}

Test(rng, uniform_range_and_moments) {
    TgRng r;
    tg_rng_seed(&r, 9);
    double sum = 0, sq = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        float u = tg_rng_uniform(&r);
        cr_assert(u >= 0.0f && u < 1.0f);
        sum += u;
        sq += (double)u * u;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    cr_expect(fabs(mean - 0.5) < 0.005, "mean %f", mean);
    cr_expect(fabs(var - 1.0 / 12) < 0.002, "var %f", var);
}

Test(rng, normal_moments) {
    TgRng r;
    tg_rng_seed(&r, 10);
    double sum = 0, sq = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = tg_rng_normal(&r);
        sum += x;
        sq += x * x;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    cr_expect(fabs(mean) < 0.01, "mean %f", mean);
    cr_expect(fabs(var - 1.0) < 0.02, "var %f", var);
}

Test(rng, below_is_in_range_and_covers) {
    TgRng r;
    tg_rng_seed(&r, 11);
    int counts[7] = {0};
    for (int i = 0; i < 70000; i++) {
        uint64_t x = tg_rng_below(&r, 7);
        cr_assert_lt(x, 7);
        counts[x]++;
    }
    for (int i = 0; i < 7; i++) cr_expect(counts[i] > 9500 && counts[i] < 10500, "bucket %d: %d", i, counts[i]);
}
