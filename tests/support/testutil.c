#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/error.h"

void test_tape_init(TestTape *t, int threads) {
    arena_init(&t->arena, 1 << 20);
    t->pool = threads > 1 ? pool_create(threads) : NULL;
    tape_init(&t->tape, &t->arena, t->pool);
}

void test_tape_free(TestTape *t) {
    tape_free(&t->tape);
    pool_destroy(t->pool);
    arena_free(&t->arena);
}

Tensor *test_tensor(const char *name, int ndim, const int64_t *shape, Rng *rng, float lo, float hi) {
    Tensor *t = tg_calloc(1, sizeof *t);
    tensor_set_shape(t, ndim, shape);
    tensor_set_name(t, name);
    t->data = tg_malloc((size_t)t->numel * sizeof(float) + 1);
    if (rng) rng_fill_uniform(rng, t->data, (size_t)t->numel, lo, hi);
    else memset(t->data, 0, (size_t)t->numel * sizeof(float));
    return t;
}

void test_tensor_free(Tensor *t) {
    if (!t) return;
    free(t->data);
    free(t);
}

int test_run(const char *cmd) {
    int rc = system(cmd);
    if (rc == -1) return -1;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

bool test_torch_available(void) {
    return access("/usr/bin/python3", X_OK) == 0 &&
           test_run("/usr/bin/python3 -c 'import importlib.util, sys; "
                    "sys.exit(importlib.util.find_spec(\"torch\") is None)' >/dev/null 2>&1") == 0;
}

bool test_torch_skip_requested(void) {
    const char *skip = getenv(TEST_SKIP_TORCH_ENV);
    return skip && strcmp(skip, "1") == 0;
}
