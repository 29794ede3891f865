#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tapegrad/error.h"

void test_tape_init(TestTape *t, int threads) {
    tg_arena_init(&t->arena, 1 << 20);
    t->pool = threads > 1 ? tg_pool_create(threads) : NULL;
    tg_tape_init(&t->tape, &t->arena, t->pool);
}

void test_tape_free(TestTape *t) {
    tg_tape_free(&t->tape);
    tg_pool_destroy(t->pool);
    tg_arena_free(&t->arena);
}

TgTensor *test_tensor(const char *name, int ndim, const int64_t *shape, TgRng *rng, float lo, float hi) {
    TgTensor *t = tg_calloc(1, sizeof *t);
    tg_tensor_set_shape(t, ndim, shape);
    tg_tensor_set_name(t, name);
    t->data = tg_malloc((size_t)t->numel * sizeof(float));
    if (rng) tg_rng_fill_uniform(rng, t->data, (size_t)t->numel, lo, hi);
    else memset(t->data, 0, (size_t)t->numel * sizeof(float));
    return t;
}

void test_tensor_free(TgTensor *t) {
    if (!t) return;
    free(t->data);
    free(t);
}

int test_run_expecting_abort(void (*fn)(void *ctx), void *ctx, char *msg, size_t cap) {
    int fds[2];
    if (pipe(fds) != 0) tg_abort_at(__FILE__, __LINE__, "pipe failed");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) tg_abort_at(__FILE__, __LINE__, "fork failed");
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        signal(SIGABRT, SIG_DFL);
        fn(ctx);
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < cap && (n = read(fds[0], msg + got, cap - 1 - got)) > 0) got += (size_t)n;
    char sink[256];
    while (read(fds[0], sink, sizeof sink) > 0) {}
    msg[got] = '\0';
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

int test_count_tmp_files(const char *folder) {
    DIR *d = opendir(folder);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        n += len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0;
    }
    closedir(d);
    return n;
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

bool test_skip_requested(const char *env) {
    const char *skip = getenv(env);
    return skip && strcmp(skip, "1") == 0;
}

bool test_clients_available(void) {
    return test_run("node --version >/dev/null 2>&1") == 0 &&
           access(TAPEGRAD_SOURCE_DIR "/tests/clients/node_modules/@huggingface/tokenizers/package.json", R_OK) == 0 &&
           access(TAPEGRAD_SOURCE_DIR "/tests/clients/node_modules/@huggingface/jinja/package.json", R_OK) == 0 &&
           access(TAPEGRAD_SOURCE_DIR "/tests/clients/node_modules/node-llama-cpp/package.json", R_OK) == 0 &&
           access(TAPEGRAD_SOURCE_DIR "/tests/clients/node_modules/openai/package.json", R_OK) == 0;
}
