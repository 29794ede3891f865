/* Figures over the seeds of one experiment cell (the same model and learning rate trained from
 * several seeds), and whether two cells differ by more than their seed-to-seed spread.
 *
 * "Exceeds the spread" is decided on the ranges: every seed of one cell ended below every seed
 * of the other (min-max ranges that do not overlap). It assumes nothing about the shape of the
 * seed-to-seed noise. If both cells' values came from one distribution (the FFN made no
 * difference), each of the C(na+nb, na) ways to split the sorted values between the cells is
 * equally likely, and two of them separate the ranges: the chance of a separation is
 * 2 / C(na+nb, na) (0.1 for 3 seeds each, 0.029 for 4, 0.008 for 5; a Mann-Whitney U of 0).
 * The difference of the means in units of the pooled standard deviation is given beside it as
 * the size of the effect. */
#ifndef TAPEGRAD_STUDY_SEED_STATS_H
#define TAPEGRAD_STUDY_SEED_STATS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct SeedSpread {
    int n;                      /* finite values */
    int missing;                /* values that were not finite (a run that diverged) */
    double mean, std, min, max; /* over the finite values; std with n - 1 (0 for one value); NaN for none */
} SeedSpread;

SeedSpread seed_spread(const double *values, int count);

typedef struct SeedComparison {
    double diff;       /* mean(a) - mean(b), over the finite values */
    double pooled_std; /* sqrt(((na-1) sa^2 + (nb-1) sb^2) / (na+nb-2)); NaN with fewer than 3 values */
    double effect;     /* |diff| / pooled_std (inf when the pooled std is 0 and the means differ) */
    bool testable;     /* both cells have at least 2 seeds */
    int separated;     /* -1: every a below every b; +1: every b below every a; 0: the ranges overlap */
    double chance;     /* 2 / C(na+nb, na): the chance of a separation if a and b did not differ */
} SeedComparison;

/* For figures where lower is better (a loss): a value that is not finite (the run diverged)
 * counts as worse than every finite one in the separation, and is left out of the means. */
SeedComparison seed_compare(const double *a, int na, const double *b, int nb);

/* One line for a report: "yes: every <a> seed below every <b> seed (chance 10% if ...)",
 * "no: the seed ranges overlap", or why it cannot say. */
void seed_comparison_verdict(const SeedComparison *c, const char *a_name, const char *b_name, char *buf, size_t cap);

#endif
