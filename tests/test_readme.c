/* The README says what its two set-up commands print: this holds it to what the program prints.
 *
 * The quick start's block is run as scripts/quickstart.sh runs it after its build (prepare the
 * default corpus, train the small preset with its defaults), from a scratch folder so that the
 * relative paths the block shows are the ones printed. Each line of the block must match the next
 * line printed, in order: `[...]` alone skips any lines, `[...]` inside a line matches any text
 * (what varies with the CPU), and `N` matches a number (a time). The sample's text, whose draws
 * depend on the kernel path's rounding, is not compared: the block's lines after the sample's
 * header are. The test suite's block must name the suite's count of tests.
 *
 * The training takes minutes: a sanitizer build (tens of times slower) and a machine without the
 * default corpus (Debian's fortunes, which scripts/quickstart.sh installs) skip it. */
#include <criterion/criterion.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "testutil.h"

/* The code block that follows the line `after` in README.md (malloc'ed, without its fences). */
static char *readme_block(const char *after) {
    char path[4200];
    snprintf(path, sizeof path, "%s/README.md", TAPEGRAD_SOURCE_DIR);
    char *text = ckpt_read_text(path);
    const char *at = strstr(text, after);
    cr_assert_not_null(at, "README.md has no \"%s\"", after);
    /* the section's second block: the first is the command */
    const char *open = strstr(at, "```");
    cr_assert_not_null(open);
    open = strstr(open + 3, "```");
    open = open ? strstr(open + 3, "```") : NULL;
    cr_assert_not_null(open, "no output block after \"%s\"", after);
    open = strchr(open, '\n') + 1;
    const char *close = strstr(open, "\n```");
    cr_assert_not_null(close);
    char *block = strndup(open, (size_t)(close - open + 1));
    free(text);
    return block;
}

/* A README line as an anchored regex: `[...]` any text, a lone `N` a number, the rest literal. */
static void line_pattern(const char *line, char *out, size_t cap) {
    size_t n = 0;
    out[n++] = '^';
    for (const char *p = line; *p && n + 32 < cap;) {
        if (strncmp(p, "[...]", 5) == 0) {
            n += (size_t)snprintf(out + n, cap - n, ".*");
            p += 5;
        } else if (*p == 'N' && (p == line || p[-1] == ' ') && (p[1] == ' ' || p[1] == '\0' || p[1] == ',')) {
            n += (size_t)snprintf(out + n, cap - n, "[0-9]+([.][0-9]+)?");
            p++;
        } else {
            if (strchr(".[]()*+?^$|\\{}", *p)) out[n++] = '\\';
            out[n++] = *p++;
        }
    }
    out[n++] = '$';
    out[n] = '\0';
}

/* Whether printed's lines hold block's, in order, by the rules above. *why says where not. */
static bool block_matches(const char *block, const char *printed, char *why, size_t cap) {
    char *lines = strdup(printed), *save = NULL;
    char **got = NULL;
    size_t n_got = 0;
    for (char *l = strtok_r(lines, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        got = realloc(got, (n_got + 1) * sizeof *got);
        got[n_got++] = l;
    }
    char *want = strdup(block), *save2 = NULL;
    size_t at = 0;
    bool skip = false, ok = true;
    for (char *w = strtok_r(want, "\n", &save2); w && ok; w = strtok_r(NULL, "\n", &save2)) {
        if (strcmp(w, "[...]") == 0) {
            skip = true;
            continue;
        }
        char pattern[4096];
        line_pattern(w, pattern, sizeof pattern);
        regex_t re;
        cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0, "pattern %s", pattern);
        bool found = false;
        while (at < n_got && !found) {
            found = regexec(&re, got[at], 0, NULL, 0) == 0;
            if (!found && !skip) break;
            at++;
        }
        regfree(&re);
        if (!found) {
            snprintf(why, cap, "README line \"%s\" %s", w,
                     at < n_got ? "is not the line printed there" : "is not printed (after the lines before it)");
            if (at < n_got) snprintf(why + strlen(why), cap - strlen(why), ": \"%s\"", got[at]);
            ok = false;
        }
        skip = false;
        if (strncmp(w, "--- sample", 10) == 0) break; /* the sample's text depends on the kernel path */
    }
    free(got), free(lines), free(want);
    return ok;
}

Test(readme, the_quick_start_prints_what_the_readme_shows, .timeout = 900) {
    if (UNDER_ASAN) cr_skip_test("1500 steps of the small preset take too long under the sanitizers");
    const char *corpus = getenv("TAPEGRAD_DEFAULT_CORPUS");
    struct stat st;
    if ((corpus && *corpus && stat(corpus, &st) != 0) || (!(corpus && *corpus) && stat("/usr/share/games/fortunes", &st) != 0))
        cr_skip_test("no default corpus (apt-get install fortunes, as scripts/quickstart.sh does)");
    char *dir = datagen_tempdir(), *block = readme_block("### From a clone to a trained model"), cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && '%s' prepare --tokenizer char --seq 128 --out checkpoints/fortunes-char >out.txt 2>&1 && "
             "'%s' train --dataset checkpoints/fortunes-char >>out.txt 2>&1",
             dir, TAPEGRAD_BIN, TAPEGRAD_BIN);
    int rc = test_run(cmd);
    char *out_path = datagen_path(dir, "out.txt"), *printed = ckpt_read_text(out_path), why[8192];
    cr_assert_eq(rc, 0, "the quick start failed:\n%s", printed);
    cr_expect(block_matches(block, printed, why, sizeof why), "%s\nthe program printed:\n%s", why, printed);
    free(printed), free(out_path), free(block);
    datagen_remove_tree(dir);
    free(dir);
}

/* The rules catch what they should: a changed figure, a line out of its place, a missing line. */
Test(readme, the_block_rules_fail_on_a_changed_or_missing_line) {
    const char *printed = "a 1\nb 2.5 s\nc x y\nd\n";
    char why[1024];
    cr_expect(block_matches("a 1\nb N s\n[...]\nd\n", printed, why, sizeof why), "%s", why);
    cr_expect(block_matches("[...]\nc [...] y\nd\n", printed, why, sizeof why), "%s", why);
    cr_expect_not(block_matches("a 2\n", printed, why, sizeof why));
    cr_expect_not(block_matches("a 1\nc x y\n", printed, why, sizeof why), "a line left out without [...]");
    cr_expect_not(block_matches("a 1\n[...]\ne\n", printed, why, sizeof why));
    cr_expect_not(block_matches("b N s\n", printed, why, sizeof why), "the block starts at the first line");
}

/* The suite's block ends with the count ctest gives. */
Test(readme, the_test_suite_block_names_the_suite_s_count) {
    char *block = readme_block("### From a clone to a passing test suite"), cmd[8192], bin_dir[4096];
    snprintf(bin_dir, sizeof bin_dir, "%s", TAPEGRAD_BIN);
    *strrchr(bin_dir, '/') = '\0';
    char *dir = datagen_tempdir(), *out_path = datagen_path(dir, "n.txt");
    snprintf(cmd, sizeof cmd, "ctest -N --test-dir '%s' >'%s' 2>&1", bin_dir, out_path);
    cr_assert_eq(test_run(cmd), 0);
    char *listed = ckpt_read_text(out_path);
    const char *total = strstr(listed, "Total Tests: ");
    cr_assert_not_null(total, "%s", listed);
    char want[64];
    snprintf(want, sizeof want, "0 tests failed out of %d", atoi(total + 13));
    cr_expect(strstr(block, want), "README.md's test block does not say \"%s\":\n%s", want, block);
    free(listed), free(out_path), free(block);
    datagen_remove_tree(dir);
    free(dir);
}
