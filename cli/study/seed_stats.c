#include "cli/study/seed_stats.h"

#include <math.h>
#include <stdio.h>

SeedSpread seed_spread(const double *values, int count) {
    SeedSpread s = {0, 0, NAN, NAN, NAN, NAN};
    double sum = 0;
    for (int i = 0; i < count; i++) {
        if (!isfinite(values[i])) {
            s.missing++;
            continue;
        }
        s.min = s.n ? fmin(s.min, values[i]) : values[i];
        s.max = s.n ? fmax(s.max, values[i]) : values[i];
        sum += values[i];
        s.n++;
    }
    if (s.n == 0) return s;
    s.mean = sum / s.n;
    double sq = 0; /* two passes: the mean first, so the squares are of small deviations */
    for (int i = 0; i < count; i++)
        if (isfinite(values[i])) sq += (values[i] - s.mean) * (values[i] - s.mean);
    s.std = s.n > 1 ? sqrt(sq / (s.n - 1)) : 0.0;
    return s;
}

/* The largest value of a cell, a diverged run (not finite) counting as +inf. */
static double worst(const double *v, int n) {
    double w = -INFINITY;
    for (int i = 0; i < n; i++) w = fmax(w, isfinite(v[i]) ? v[i] : INFINITY);
    return w;
}

static double best(const double *v, int n) {
    double b = INFINITY;
    for (int i = 0; i < n; i++) b = fmin(b, isfinite(v[i]) ? v[i] : INFINITY);
    return b;
}

static double binomial(int n, int k) {
    double c = 1;
    for (int i = 1; i <= k; i++) c = c * (n - k + i) / i;
    return c;
}

SeedComparison seed_compare(const double *a, int na, const double *b, int nb) {
    SeedSpread sa = seed_spread(a, na), sb = seed_spread(b, nb);
    SeedComparison c = {.diff = sa.mean - sb.mean, .pooled_std = NAN, .effect = NAN};
    if (sa.n >= 1 && sb.n >= 1 && sa.n + sb.n >= 3) {
        double var = ((sa.n - 1) * sa.std * sa.std + (sb.n - 1) * sb.std * sb.std) / (sa.n + sb.n - 2);
        c.pooled_std = sqrt(var);
        c.effect = c.pooled_std > 0 ? fabs(c.diff) / c.pooled_std : c.diff != 0 ? INFINITY : 0;
    }
    c.testable = na >= 2 && nb >= 2;
    c.chance = 2.0 / binomial(na + nb, na);
    if (c.testable) c.separated = worst(a, na) < best(b, nb) ? -1 : worst(b, nb) < best(a, na) ? 1 : 0;
    return c;
}

void seed_comparison_verdict(const SeedComparison *c, const char *a_name, const char *b_name, char *buf, size_t cap) {
    if (!c->testable) {
        snprintf(buf, cap, "cannot say: needs at least 2 seeds of each");
    } else if (c->separated) {
        snprintf(buf, cap, "yes: every %s seed ended below every %s seed (chance %.2g%% if the FFN made no difference)",
                 c->separated < 0 ? a_name : b_name, c->separated < 0 ? b_name : a_name, 100 * c->chance);
    } else {
        snprintf(buf, cap, "no: the seed ranges overlap");
    }
}
