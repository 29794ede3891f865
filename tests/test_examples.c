/* The examples (examples/), as built against the shared library: custom_op's check passes, and
 * fails naming the input when its backward is broken on purpose; mlp reaches its accuracy and
 * resumes bitwise from its checkpoint, which `tapegrad ckpt info` describes; generate continues a
 * prompt from a run trained here, and refuses a folder that holds no run. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "ckptutil.h"
#include "datagen.h"
#include "testutil.h"

#ifndef TAPEGRAD_EXAMPLES_DIR
#error "CMake passes the folder of the built examples"
#endif

/* Runs an example with `args` (stdout and stderr into *out, malloc'ed); returns its exit code. */
static int run_example(char **out, const char *example, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/%s %s 2>&1 </dev/null", TAPEGRAD_EXAMPLES_DIR, example, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "cannot run %s", cmd);
    size_t len = 0, cap = 4096;
    char *text = malloc(cap);
    size_t got;
    while ((got = fread(text + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len < 2) text = realloc(text, cap *= 2);
    }
    text[len] = '\0';
    int status = pclose(p);
    *out = text;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Test(examples, custom_op_check_passes_and_catches_a_broken_backward) {
    char *out;
    int rc = run_example(&out, "custom_op", "");
    cr_expect_eq(rc, 0, "custom_op exited %d:\n%s", rc, out);
    cr_expect(strstr(out, "gradient check: all 3 cases pass") && strstr(out, "fit: beta within"), "%s", out);
    free(out);
    rc = run_example(&out, "custom_op", "--break-backward");
    cr_expect_eq(rc, 1, "custom_op --break-backward exited %d:\n%s", rc, out);
    cr_expect(strstr(out, "gradcheck FAILED: swish [4x9] input x:") && strstr(out, "3 of 3 cases FAIL"),
              "the broken backward was not reported:\n%s", out);
    cr_expect_null(strstr(out, "input beta"), "beta's gradient is right, yet reported:\n%s", out);
    free(out);
}

Test(examples, mlp_reaches_its_accuracy_and_resumes_bitwise, .timeout = 60) {
    char *dir = datagen_tempdir(), *path = datagen_path(dir, "mlp.tgck"), *out;
    int rc = run_example(&out, "mlp", path);
    cr_expect_eq(rc, 0, "mlp exited %d:\n%s", rc, out);
    cr_expect(strstr(out, "weights and AdamW moments bitwise equal") && strstr(out, "ok: held-out accuracy"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt info %s", path);
    cr_expect(rc == 0 && strstr(out, "tagged 'spiral-mlp-v1'") && strstr(out, "step         300"), "ckpt info:\n%s", out);
    free(out);
    datagen_remove_tree(dir);
    free(dir), free(path);
}

Test(examples, generate_continues_a_prompt_from_a_trained_run, .timeout = 120) {
    char *corpus, *dir = ckpt_test_setup(&corpus), *run = datagen_path(dir, "run"), *out;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 3 --out %s", corpus, run);
    cr_assert_eq(rc, 0, "training failed:\n%s", out);
    free(out);
    char args[4200];
    snprintf(args, sizeof args, "%s 'The ' 40", run);
    rc = run_example(&out, "generate", args);
    cr_expect_eq(rc, 0, "generate exited %d:\n%s", rc, out);
    cr_expect(strstr(out, "ckpt-00000003.tgck: step 3") && strstr(out, "char tokenizer"), "%s", out);
    cr_expect(strstr(out, "\nThe ") && strlen(strstr(out, "\nThe ")) > 6, "no continuation of the prompt:\n%s", out);
    free(out);
    rc = run_example(&out, "generate", dir); /* the folder holds no run */
    cr_expect_eq(rc, 1, "generate on a folder without a run exited %d:\n%s", rc, out);
    cr_expect(strstr(out, "generate: ") && strstr(out, dir), "%s", out);
    free(out);
    datagen_remove_tree(dir);
    free(dir), free(corpus), free(run);
}

/* docs/api.md quotes the examples: every ```c block after a line "From `examples/NAME.c`:" is
 * found, verbatim, in that file, so the page cannot drift from the code CI runs. */
Test(examples, the_api_page_quotes_the_examples_verbatim) {
    size_t len;
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/api.md", TAPEGRAD_SOURCE_DIR);
    char *page = (char *)ckpt_read_file(path, &len);
    page = realloc(page, len + 1);
    page[len] = '\0';
    int quotes = 0;
    for (const char *at = strstr(page, "From `examples/"); at; at = strstr(at + 1, "From `examples/")) {
        const char *name = at + strlen("From `"), *name_end = strchr(name, '`');
        const char *open = strstr(at, "```c\n"), *close = open ? strstr(open + 5, "\n```") : NULL;
        cr_assert(name_end && open && close, "a quote in docs/api.md without its code block");
        snprintf(path, sizeof path, "%s/%.*s", TAPEGRAD_SOURCE_DIR, (int)(name_end - name), name);
        char *source = (char *)ckpt_read_file(path, &len);
        source = realloc(source, len + 1);
        source[len] = '\0';
        char *block = strndup(open + 5, (size_t)(close + 1 - (open + 5)));
        cr_expect(strstr(source, block), "docs/api.md quotes %.*s, which no longer holds:\n%s", (int)(name_end - name), name,
                  block);
        free(block);
        free(source);
        quotes++;
    }
    cr_expect_geq(quotes, 8, "only %d quotes of the examples in docs/api.md", quotes);
    free(page);
}
