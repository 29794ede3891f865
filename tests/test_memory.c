/* Sizes are checked against the machine before they are allocated (lib/memory.h,
 * run/memory_plan.h): the activation estimate is an upper bound of what the step arena takes,
 * and a close one, on a grid of shapes (the presets', GQA, ReLU, P saved and recomputed, one and
 * two threads, odd sizes); the plan names the flag, what it would take and what the machine has;
 * the machine's limit comes from physical memory, RLIMIT_AS and cgroups; and `train --batch
 * 1048576` (the flag's own maximum), which used to abort in the arena after 2.3 GB, is refused
 * in one line before anything is read. No test here allocates more than a few hundred MB. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "lib/memory.h"
#include "tapegrad/engine.h"
#include "tapegrad/model.h"
#include "tapegrad/rng.h"
#include "testutil.h"
#include "run/memory_plan.h"


typedef enum { STEP_TRAIN, STEP_TRAIN_SCALED, STEP_INSPECTED, STEP_EVAL } StepKind;
static const char *const step_names[] = {"train", "train, scaled loss", "inspected", "eval"};

/* The arena's peak for one step of `kind` on (B, T) random tokens, with the arena reserved at
 * the estimate: it must then never have grown (one system allocation). */
static double measured_peak(const TgModelConfig *c, int64_t B, int64_t T, int threads, size_t saved_probs_limit,
                            StepKind kind, double estimate) {
    TgModel m;
    tg_model_build(&m, c);
    tg_model_init_weights(&m, 5);
    TgEngine e;
    tg_engine_open(&e, threads, 0);
    tg_tape_set_saved_probs_limit(&e.tape, saved_probs_limit);
    cr_assert_eq(tg_arena_reserve(&e.arena, (size_t)estimate), TG_OK, "%s", tg_error_message());
    int32_t *x = malloc((size_t)(B * T) * sizeof(int32_t)), *y = malloc((size_t)(B * T) * sizeof(int32_t));
    TgRng rng;
    tg_rng_seed(&rng, 9);
    for (int64_t i = 0; i < B * T; i++) {
        x[i] = (int32_t)tg_rng_below(&rng, (uint64_t)c->vocab);
        y[i] = i % 7 == 3 ? TG_IGNORE_INDEX : (int32_t)tg_rng_below(&rng, (uint64_t)c->vocab);
    }
    TgTensor **hidden = calloc((size_t)c->n_layers, sizeof *hidden);
    bool old = tg_tape_set_grad_enabled(&e.tape, kind != STEP_EVAL);
    TgTensor *loss =
        kind == STEP_INSPECTED
            ? tg_model_loss(&m, &e.tape, &(TgBatch){.tokens = x, .targets = y, .batch = B, .seq = T},
                            &(TgModelOutputs){.ffn_hidden = hidden})
            : tg_model_loss(&m, &e.tape, &(TgBatch){.tokens = x, .targets = y, .batch = B, .seq = T}, NULL);
    if (kind == STEP_TRAIN_SCALED) loss = tg_scale(&e.tape, loss, 0.5f);
    if (kind != STEP_EVAL) tg_tape_backward(&e.tape, loss);
    tg_tape_set_grad_enabled(&e.tape, old);
    double peak = (double)e.arena.peak;
    cr_expect_eq(e.arena.system_allocs, 1, "the arena reserved at the estimate grew during the step");
    tg_tape_reset(&e.tape);
    tg_engine_close(&e);
    tg_model_free(&m);
    free(x), free(y), free(hidden);
    return peak;
}

static TgModelConfig preset(const char *name, int64_t vocab) {
    TgModelConfig c;
    cr_assert_eq(tg_model_preset(name, &c), TG_OK);
    if (!c.vocab) c.vocab = vocab;
    return c;
}

Test(memory, the_activation_estimate_bounds_the_arena_peak_closely, .timeout = 300) {
    TgModelConfig tiny = preset("tiny", 64), small = preset("small", 96), minimind = preset("minimind-26m", 0);
    minimind.n_layers = 1; /* its shapes, one layer of them: a few GFLOP under the sanitizers */
    TgModelConfig relu = small;
    relu.ffn = TG_FFN_RELU, relu.hidden = tg_model_ffn_hidden(TG_FFN_RELU, relu.dim);
    TgModelConfig ragged = {.dim = 96, .n_layers = 2, .n_heads = 6, .n_kv_heads = 2, .hidden = 200, .vocab = 131,
                            .seq_len = 23, .ffn = TG_FFN_SWIGLU, .rope_theta = 1e6, .norm_eps = 1e-5};
    TgModelConfig qk = ragged;
    qk.qk_norm = true, qk.norm_eps = 1e-6;
    const struct {
        const char *what;
        TgModelConfig cfg;
        int64_t batch, seq;
        int threads;
        bool recompute_p; /* the saved-P limit at 0: the backward recomputes P, with twice the scratch */
    } cases[] = {
        {"tiny", tiny, 4, 32, 1, false},
        {"tiny, 2 threads", tiny, 4, 32, 2, false},
        {"small", small, 2, 128, 2, false},
        {"small, P recomputed", small, 1, 64, 2, true},
        {"small, ReLU", relu, 1, 128, 1, false},
        {"minimind-26m (1 layer), GQA 8/2", minimind, 1, 64, 2, false},
        {"ragged, GQA 6/2", ragged, 3, 23, 2, false},
        {"ragged, GQA 6/2, QK-norm", qk, 3, 23, 2, false},
        {"ragged, QK-norm, P recomputed", qk, 2, 23, 1, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TgModelConfig c = cases[i].cfg;
        c.seq_len = cases[i].seq;
        cr_assert_eq(tg_model_config_validate(&c), TG_OK, "%s: %s", cases[i].what, tg_error_message());
        size_t limit = cases[i].recompute_p ? 0 : TG_TAPE_SAVED_PROBS_LIMIT;
        for (int k = 0; k <= STEP_EVAL; k++) {
            bool training = k != STEP_EVAL;
            double estimate = cases[i].recompute_p
                                  ? tg_model_activation_bytes_for(&c, cases[i].batch, cases[i].seq, cases[i].threads,
                                                                  training, limit)
                                  : tg_model_activation_bytes(&c, cases[i].batch, cases[i].seq, cases[i].threads, training);
            double peak = measured_peak(&c, cases[i].batch, cases[i].seq, cases[i].threads, limit, (StepKind)k, estimate);
            cr_expect_leq(peak, estimate, "%s, %s: the arena took %.0f bytes, above the estimate %.0f", cases[i].what,
                          step_names[k], peak, estimate);
            cr_expect_leq(estimate, 1.10 * peak + 65536, "%s, %s: the estimate %.0f is far above the peak %.0f",
                          cases[i].what, step_names[k], estimate, peak);
        }
    }
}

static const TgMemoryLimit machine = {23.4 * 1024 * 1024 * 1024, "physical memory"};

Test(memory, a_plan_names_the_flag_what_it_needs_and_what_the_machine_has) {
    char text[64];
    tg_memory_format(23.4 * 1024 * 1024 * 1024, text, sizeof text);
    cr_expect_str_eq(text, "23.4 GiB");
    tg_memory_format(512 * 1024, text, sizeof text);
    cr_expect_str_eq(text, "512 KiB");
    tg_memory_format(2.0 * 1024 * 1024 * 1024 * 1024, text, sizeof text);
    cr_expect_str_eq(text, "2.00 TiB");
    tg_memory_format(100, text, sizeof text);
    cr_expect_str_eq(text, "100 bytes");

    TgMemoryPlan plan = {0};
    tg_memory_plan_add(&plan, 1e9, "the model", "a smaller --preset", "for its parameters");
    tg_memory_plan_add(&plan, 2.3e12, "--batch 1048576", "lower --batch or --seq", "for one step's activations");
    assert_fails(tg_memory_plan_check_against(&plan, machine), TG_ERR_ARG,
                 "--batch 1048576 needs about 2.09 TiB for one step's activations; this machine has 23.4 GiB (physical "
                 "memory): lower --batch or --seq");
    /* no item alone is too large, together they are: the largest flag's is named, and the total */
    plan = (TgMemoryPlan){0};
    tg_memory_plan_add(&plan, 14e9, "--batch 512", "lower --batch", "for one step's activations");
    tg_memory_plan_add(&plan, 12e9, "--eval-batches 4000", "lower --eval-batches", "for its val batches");
    tg_memory_plan_add(&plan, 2e9, NULL, NULL, "for the corpus's tokens");
    assert_fails(tg_memory_plan_check_against(&plan, machine), TG_ERR_ARG,
                 "--batch 512 needs about 13.0 GiB for one step's activations, 26.1 GiB in all; this machine has");
    /* what no flag can change: a file's fault, exit 1 */
    plan = (TgMemoryPlan){0};
    tg_memory_plan_add(&plan, 1e11, "run/ckpt-00000100.tgck", NULL, "to load its model");
    assert_fails(tg_memory_plan_check_against(&plan, machine), TG_ERR_NOMEM,
                 "run/ckpt-00000100.tgck needs about 93.1 GiB to load its model; this machine has 23.4 GiB");
    /* what fits passes; an estimate beyond any integer does not */
    plan = (TgMemoryPlan){0};
    tg_memory_plan_add(&plan, 1e9, "--batch 4", "lower --batch", "for one step");
    assert_ok(tg_memory_plan_check_against(&plan, machine));
    tg_memory_plan_add(&plan, INFINITY, "--seq 1048576", "lower --seq", "for attention");
    assert_fails(tg_memory_plan_check_against(&plan, machine), TG_ERR_ARG, "--seq 1048576 needs about inf");
}

Test(memory, the_limit_is_the_lowest_of_the_cgroups_and_their_parents) {
    char *root = datagen_tempdir();
    /* cgroup v2: the process's group has no limit of its own, its parent one of 4 GiB */
    datagen_write(root, "user.slice/memory.max", "4294967296\n", 11);
    datagen_write(root, "user.slice/job/memory.max", "max\n", 4);
    TgMemoryLimit v2 = tg_memory_cgroup_limit("0::/user.slice/job\n", root);
    cr_expect_eq(v2.bytes, 4294967296.0);
    cr_expect_str_eq(v2.source, "cgroup memory.max");
    /* cgroup v1: the memory controller's hierarchy, its "no limit" (2^63 - 4096) and a real one */
    datagen_write(root, "memory/memory.limit_in_bytes", "9223372036854771712\n", 20);
    datagen_write(root, "memory/docker/abc/memory.limit_in_bytes", "2147483648\n", 11);
    TgMemoryLimit v1 = tg_memory_cgroup_limit("12:pids:/docker/abc\n4:cpu,memory:/docker/abc\n", root);
    cr_expect_eq(v1.bytes, 2147483648.0);
    cr_expect_str_eq(v1.source, "cgroup memory.limit_in_bytes");
    /* nothing set, or a group that is not there: no limit */
    cr_expect(isinf(tg_memory_cgroup_limit("0::/elsewhere\n", root).bytes));
    cr_expect(isinf(tg_memory_cgroup_limit("", root).bytes));
    datagen_remove_tree(root);
    free(root);
    /* this machine: physical memory at most, and something known */
    TgMemoryLimit here = tg_memory_limit();
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    cr_expect(here.bytes > 0 && here.bytes <= (double)pages * (double)page, "%g bytes (%s)", here.bytes, here.source);
}

Test(memory, an_address_space_limit_is_the_limit) {
    if (UNDER_ASAN) cr_skip_test("ASan's shadow memory leaves no room for RLIMIT_AS");
    /* Criterion runs each test in a process of its own: the limit dies with it */
    struct rlimit rl = {(rlim_t)3 << 30, RLIM_INFINITY};
    cr_assert_eq(setrlimit(RLIMIT_AS, &rl), 0);
    TgMemoryLimit l = tg_memory_limit();
    cr_expect_eq(l.bytes, 3.0 * (1 << 30));
    cr_expect(strstr(l.source, "RLIMIT_AS"), "%s", l.source);
}

/* ---- through the program ---- */

CKPT_SCRATCH_FIXTURE
TestSuite(memory_cli, .init = setup, .fini = teardown, .timeout = 120);

/* `tapegrad ARGS` exits `code` with one line holding every fragment (NULL-terminated). */
static void expect_refused(const char *args, int code, const char *const *fragments) {
    char *out = NULL;
    int rc = ckpt_cli(&out, "%s", args);
    cr_expect_eq(rc, code, "`tapegrad %s` exited %d, expected %d:\n%s", args, rc, code, out);
    cr_expect(strchr(out, '\n') && strchr(out, '\n')[1] == '\0', "`tapegrad %s`: not one line:\n%s", args, out);
    for (const char *const *f = fragments; *f; f++)
        cr_expect(strstr(out, *f), "`tapegrad %s`: the message lacks '%s':\n%s", args, *f, out);
    free(out);
}

Test(memory_cli, sizes_beyond_the_machine_are_refused_before_anything_is_read) {
    char args[4096], *out_dir = datagen_path(dir, "run");
    /* --batch at its maximum: once the arena's abort after 2.3 GB; now refused, nothing written */
    snprintf(args, sizeof args, "train --batch 1048576 --data %s --out %s", corpus, out_dir);
    expect_refused(args, 2,
                   (const char *[]){"tapegrad train: --batch 1048576 needs about ",
                                    " TiB for one step's activations at this model's size (",
                                    " per token at seq 128); this machine has ", ": lower --batch or --seq", NULL});
    cr_expect_neq(access(out_dir, F_OK), 0, "the refused run left %s", out_dir);
    /* the model itself */
    snprintf(args, sizeof args, "train --dim 8192 --layers 20 --heads 64 --data %s --out %s", corpus, out_dir);
    expect_refused(args, 2, (const char *[]){"the model needs about ", "parameters", "lower --dim, --layers", NULL});
    /* the same bounds, and the same check, in the other subcommands */
    expect_refused("bench --batch 1048576", 2, (const char *[]){"--batch 1048576 needs about", NULL});
    expect_refused("bench --steps 9007199254740992", 2, (const char *[]){"--steps 9007199254740992 needs about", NULL});
    expect_refused("graph --batch 1048576", 2, (const char *[]){"--batch 1048576 needs about", NULL});
    snprintf(args, sizeof args, "compare-ffn --batch 1048576 --data %s --out %s", corpus, out_dir);
    expect_refused(args, 2, (const char *[]){"--batch 1048576 needs about", NULL});
    cr_expect_neq(access(out_dir, F_OK), 0, "compare-ffn wrote %s", out_dir);
    snprintf(args, sizeof args, "compare-ffn --probe-batches 1048576 --batch 512 --data %s --out %s", corpus, out_dir);
    expect_refused(args, 2, (const char *[]){"--probe-batches 1048576 needs about", NULL});

    /* a model of the tiny preset's width and context (12 KiB per token): 2^20 sequences are 400 GiB */
    ckpt_train_small(corpus, out_dir, 1, "--dim 64 --heads 2 --kv-heads 2 --hidden 176 --seq 32");
    snprintf(args, sizeof args, "inspect --run %s --batches 1048576 --batch 1048576", out_dir);
    expect_refused(args, 2, (const char *[]){"needs about", "lower --batch", NULL});
    /* a resume notes first that --batch changes the run's (stdout), then refuses it (one line) */
    char *out = NULL;
    int rc = ckpt_cli(&out, "train --resume %s --batch 1048576", out_dir);
    cr_expect_eq(rc, 2, "%s", out);
    const char *error = strstr(out, "tapegrad train: --batch 1048576 needs about");
    cr_expect(error && strstr(error, "lower --batch (the context is the checkpoint's)\n") &&
                  strchr(error, '\n')[1] == '\0',
              "%s", out);
    free(out);
    free(out_dir);
}

Test(memory_cli, a_lower_address_space_limit_is_what_the_machine_has) {
    if (UNDER_ASAN) cr_skip_test("ASan's shadow memory leaves no room for ulimit -v");
    char cmd[8192], *log = datagen_path(dir, "log.txt");
    /* 3 GiB of address space: a small-preset step of 512 sequences needs about 5 */
    snprintf(cmd, sizeof cmd, "ulimit -v 3145728 && %s train --batch 512 --data %s --out %s/run >%s 2>&1 </dev/null",
             TAPEGRAD_BIN, corpus, dir, log);
    int rc = test_run(cmd);
    char *out = ckpt_read_text(log);
    cr_expect_eq(rc, 2, "exited %d: %s", rc, out);
    cr_expect(strstr(out, "--batch 512 needs about") && strstr(out, "this machine has 3.00 GiB (RLIMIT_AS, ulimit -v)"),
              "%s", out);
    free(out), free(log);
}
