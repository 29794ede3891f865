/* `tapegrad gradcheck`: every registered finite-difference check, as a table. */
#include <stdio.h>
#include <string.h>

#include "../lib/arena.h"
#include "../ops/checks.h"
#include "cli.h"

static int run_gradcheck(int argc, char **argv) {
    const char *op = NULL;
    int64_t seed = 2024;
    Flag flags[] = {
        {"--op", FLAG_STRING, &op, "check only this op family (e.g. rmsnorm)", false},
        {"--seed", FLAG_INT64, &seed, "seed of the inputs and of R (default 2024)", false},
    };
    bool help;
    int rc = flags_parse("gradcheck", "[--op NAME] [--seed N]", flags, 2, argc, argv, NULL, 0, NULL, &help);
    if (rc || help) return rc;

    Arena arena;
    arena_init(&arena, 1 << 20);
    Tape tape;
    tape_init(&tape, &arena, NULL);
    printf("%-14s %-28s %-8s %14s %10s  %s\n", "op", "case", "input", "max rel err", "tolerance", "result");
    int failures = 0, ran = 0;
    for (int i = 0; i < op_checks_count(); i++) {
        const OpCheck *c = op_check_get(i);
        if (op && strcmp(op, c->op) != 0) continue;
        GradcheckResult res[OP_CHECK_MAX_INPUTS];
        op_check_run(c, &tape, (uint64_t)seed, res);
        ran++;
        double tol = c->tol > 0 ? c->tol : gradcheck_defaults().tol;
        for (int k = 0; k < c->n_inputs; k++) {
            printf("%-14s %-28s %-8s %14.3e %10.1e  %s\n", c->op, c->variant, res[k].input,
                   res[k].rel_err, tol, res[k].pass ? "ok" : "FAIL");
            failures += !res[k].pass;
        }
    }
    tape_free(&tape);
    arena_free(&arena);
    if (ran == 0) {
        fprintf(stderr, "tapegrad gradcheck: no op named '%s'; run without --op to see them all\n", op);
        return 2;
    }
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
    int failures = op_checks_run_family(NULL, &tape, 7);
    tape_free(&tape);
    arena_free(&arena);
    printf("selftest: %d op checks, %s\n", op_checks_count(), failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}

const Subcommand cmd_selftest = {"selftest", "check that this build computes right (gradients, BLAS)", run_selftest};
