/* A tape's settings are its own (tapegrad/tape.h): two tapes in one process, set differently and
 * used one after the other, each keep theirs. The saved-P limit of attention decides whether a
 * recorded node keeps P; the gemm mode decides which kernel computes a linear layer's product, so
 * each tape's output must be bitwise that kernel's. */
#include <criterion/criterion.h>
#include <string.h>

#include "lib/blas.h"
#include "tapegrad/ops.h"
#include "testutil.h"

/* attention over (1, 24, 2 x 8) q/k/v that require gradients, on `tape`; the node it recorded */
static const TgTapeNode *attend(TgTape *tape, TgTensor *const qkv[3], TgTensor **out) {
    *out = tg_attention(tape, qkv[0], qkv[1], qkv[2], 2, 2);
    cr_assert_gt(tape->n_nodes, 0);
    return &tape->nodes[tape->n_nodes - 1];
}

Test(tape_settings, two_tapes_keep_their_own_saved_probs_limit) {
    TgRng rng;
    tg_rng_seed(&rng, 11);
    TgTensor *qkv[3];
    for (int m = 0; m < 3; m++) {
        qkv[m] = test_tensor("x", 3, (int64_t[]){1, 24, 16}, &rng, -1, 1);
        qkv[m]->requires_grad = true;
    }
    TestTape recomputing, keeping;
    test_tape_init(&recomputing, 1);
    test_tape_init(&keeping, 1);
    cr_expect_eq(keeping.tape.saved_probs_limit, TG_TAPE_SAVED_PROBS_LIMIT, "a new tape's limit");
    tg_tape_set_saved_probs_limit(&recomputing.tape, 0);
    /* one after the other, and the first again after the second: a setting shared between tapes
     * would be the last one set */
    TgTensor *out_r, *out_k, *out_r2;
    const TgTapeNode *r = attend(&recomputing.tape, qkv, &out_r);
    const TgTapeNode *k = attend(&keeping.tape, qkv, &out_k);
    const TgTapeNode *r2 = attend(&recomputing.tape, qkv, &out_r2);
    cr_expect_null(r->saved, "a tape with limit 0 kept P");
    cr_expect_null(r2->saved, "the tape with limit 0 kept P after the other tape recorded");
    cr_expect_not_null(k->saved, "a tape with the default limit recomputes P (24 x 24 x 2 floats)");
    size_t bytes = (size_t)out_k->numel * sizeof(float);
    cr_expect_eq(memcmp(out_r->data, out_k->data, bytes), 0, "the forward differs");
    cr_expect_eq(memcmp(out_r2->data, out_k->data, bytes), 0, "the forward differs");
    tg_tape_set_saved_probs_limit(&keeping.tape, 24 * 24 * 2 * sizeof(float) - 1); /* one byte short */
    TgTensor *out_k2;
    cr_expect_null(attend(&keeping.tape, qkv, &out_k2)->saved, "P one byte over the limit was kept");
    for (int m = 0; m < 3; m++) test_tensor_free(qkv[m]);
    test_tape_free(&recomputing);
    test_tape_free(&keeping);
}

/* y = x W^T on the tape, copied out */
static float *linear_on(TgTape *tape, TgTensor *x, TgTensor *w) {
    TgTensor *y = tg_linear(tape, x, w);
    float *copy = malloc((size_t)y->numel * sizeof(float));
    memcpy(copy, y->data, (size_t)y->numel * sizeof(float));
    tg_tape_reset(tape);
    return copy;
}

Test(tape_settings, two_tapes_keep_their_own_gemm_mode) {
    enum { ROWS = 37, OUT = 45 };
    /* the kernels sum k in another order, in blocks whose size each picks for the CPU: at one of
     * these depths some element differs, or this test could not tell them apart */
    static const int depths[] = {300, 1000, 3000};
    TgRng rng;
    tg_rng_seed(&rng, 12);
    TgTensor *x = NULL, *w = NULL;
    size_t bytes = (size_t)(ROWS * OUT) * sizeof(float);
    float *own = malloc(bytes), *openblas = malloc(bytes);
    bool apart = false;
    for (size_t d = 0; d < sizeof depths / sizeof *depths && !apart; d++) {
        int in = depths[d];
        if (x) test_tensor_free(x), test_tensor_free(w);
        x = test_tensor("x", 2, (int64_t[]){ROWS, in}, &rng, -1, 1);
        w = test_tensor("w", 2, (int64_t[]){OUT, in}, &rng, -1, 1);
        tg_sgemm(false, true, ROWS, OUT, in, 1.0f, x->data, in, w->data, in, 0.0f, own, OUT);
        tg_sgemm_openblas(false, true, ROWS, OUT, in, 1.0f, x->data, in, w->data, in, 0.0f, openblas, OUT);
        apart = memcmp(own, openblas, bytes) != 0;
    }
    cr_assert(apart, "tapegrad's kernel and OpenBLAS's gave the same bits at every depth tried");

    TestTape pooled, with_openblas;
    test_tape_init(&pooled, 1);
    test_tape_init(&with_openblas, 1);
    cr_expect_eq(pooled.tape.gemm_mode, TG_GEMM_POOL, "a new tape's gemm mode");
    tg_tape_set_gemm_mode(&with_openblas.tape, TG_GEMM_POOL_OPENBLAS);
    float *a = linear_on(&with_openblas.tape, x, w), *b = linear_on(&pooled.tape, x, w);
    float *c = linear_on(&with_openblas.tape, x, w);
    cr_expect_eq(memcmp(a, openblas, bytes), 0, "the pool-openblas tape did not run OpenBLAS's kernel");
    cr_expect_eq(memcmp(b, own, bytes), 0, "the pool tape did not run tapegrad's kernel");
    cr_expect_eq(memcmp(c, openblas, bytes), 0, "the pool-openblas tape changed after the pool tape ran");
    tg_tape_set_gemm_mode(&pooled.tape, TG_GEMM_OPENBLAS);
    float *d = linear_on(&pooled.tape, x, w), *e = linear_on(&with_openblas.tape, x, w);
    cr_expect_eq(memcmp(d, openblas, bytes), 0, "a tape set to openblas afterwards did not run OpenBLAS's kernel");
    cr_expect_eq(memcmp(e, openblas, bytes), 0, "the other tape's mode changed");
    free(a), free(b), free(c), free(d), free(e), free(own), free(openblas);
    test_tensor_free(x);
    test_tensor_free(w);
    test_tape_free(&pooled);
    test_tape_free(&with_openblas);
}
