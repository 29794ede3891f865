/* `tapegrad gradcheck`: every registered finite-difference check, as a table. */
#include <stdio.h>
#include <string.h>

#include "../lib/arena.h"
#include "../lib/cpu.h"
#include "../ops/checks.h"
#include "cli.h"

static void print_row(void *ctx, const char *op, const OpCheck *c, const GradcheckResult *worst) {
    double rtol = c->rtol > 0 ? c->rtol : gradcheck_defaults().rtol;
    for (int k = 0; k < c->n_inputs; k++)
        printf("%-16s %-32s %-6s %6.0e %7lld %14.6e %14.6e %9.2e %11.2e  %s\n", op, c->variant, worst[k].input, rtol,
               (long long)worst[k].worst_index, worst[k].worst_analytic, worst[k].worst_numeric, worst[k].worst_ratio,
               worst[k].rel_err, worst[k].pass ? "ok" : "FAIL");
}

static int run_gradcheck(int argc, char **argv) {
    const char *op = NULL;
    int64_t seed = 2024, seeds = 1;
    Flag flags[] = {
        {"--op", FLAG_STRING, &op, "check only this op family (e.g. rmsnorm)", false},
        {"--seed", FLAG_INT64, &seed, "seed of the inputs and of R (default 2024)", false},
        {"--seeds", FLAG_INT64, &seeds, "run seeds seed .. seed+N-1 and show each input's worst (default 1)", false},
    };
    bool help;
    int rc = flags_parse("gradcheck", "[--op NAME] [--seed N] [--seeds N]", flags, 3, argc, argv, NULL, 0, NULL,
                         &help);
    if (rc || help) return rc;
    if (seeds < 1) {
        fprintf(stderr, "tapegrad gradcheck: --seeds %lld: give a count of at least 1\n", (long long)seeds);
        return 2;
    }

    int ran = op ? op_check_cases_of(op) : op_checks_count();
    if (ran == 0) {
        fprintf(stderr, "tapegrad gradcheck: no op named '%s'; run without --op to see them all\n", op);
        return 2;
    }
    Arena arena;
    arena_init(&arena, 1 << 20);
    Tape tape;
    tape_init(&tape, &arena, NULL);
    GradcheckOptions defaults = gradcheck_defaults();
    printf("every element: |analytic - numeric| <= %g * max|numeric| + %g * noise + rtol * |numeric|; "
           "'x bound' is the worst element's error over its bound (pass <= 1)\n",
           defaults.atol_scale, defaults.atol_noise);
    printf("%-16s %-32s %-6s %6s %7s %14s %14s %9s %11s  %s\n", "op", "case", "input", "rtol", "worst",
           "analytic", "numeric", "x bound", "tensor err", "result");
    int failures = op_checks_run(op, &tape, (uint64_t)seed, seeds, print_row, NULL);
    tape_free(&tape);
    arena_free(&arena);
    printf("%d checks, %d failed\n", ran, failures);
    return failures ? 1 : 0;
}

const Subcommand cmd_gradcheck = {"gradcheck", "finite-difference check of every op's backward", run_gradcheck};

/* `tapegrad selftest`: a quick end-to-end check of the installation. */
static int run_selftest(int argc, char **argv) {
    bool help;
    int rc = flags_parse("selftest", "", NULL, 0, argc, argv, NULL, 0, NULL, &help);
    if (rc || help) return rc;
    Arena arena;
    arena_init(&arena, 1 << 20);
    Tape tape;
    tape_init(&tape, &arena, NULL);
    int failures = op_checks_run(NULL, &tape, 7, 1, op_check_print_failures, NULL);
    tape_free(&tape);
    arena_free(&arena);
    printf("selftest: %d op checks, %s (kernels: %s on %s)\n", op_checks_count(), failures ? "FAILED" : "all passed",
           tg_isa_name(tg_isa_active()), tg_cpu_name());
    return failures ? 1 : 0;
}

const Subcommand cmd_selftest = {"selftest", "check that this build computes right (gradients, BLAS)", run_selftest};
