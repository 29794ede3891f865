/* Paths are built whole or refused (support/path.h): nothing is cut short into another file's name. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "support/path.h"
#include "testutil.h"
#include "ckptutil.h"
#include "datagen.h"

Test(path, join_puts_one_slash_between_folder_and_name) {
    char out[64];
    assert_ok(tg_path_join(out, sizeof out, "runs/a", "latest"));
    cr_expect_str_eq(out, "runs/a/latest");
    assert_ok(tg_path_join(out, sizeof out, "runs/a/", "latest"));
    cr_expect_str_eq(out, "runs/a/latest");
    assert_ok(tg_path_join(out, sizeof out, ".", "latest"));
    cr_expect_str_eq(out, "latest");
    assert_ok(tg_path_join(out, sizeof out, "", "latest"));
    cr_expect_str_eq(out, "latest");
    assert_ok(tg_path_join(out, sizeof out, "/", "etc"));
    cr_expect_str_eq(out, "/etc");
}

Test(path, a_path_that_does_not_fit_is_refused_not_cut) {
    char out[16];
    /* 15 bytes fit, 16 do not */
    assert_ok(tg_path_join(out, sizeof out, "abcdefghi", "jklmn"));
    cr_expect_str_eq(out, "abcdefghi/jklmn");
    assert_fails(tg_path_join(out, sizeof out, "abcdefghi", "jklmno"), TG_ERR_ARG, "would be 16 bytes long, more than the 15");
    assert_fails(tg_path_format(out, sizeof out, "%s.%d.tmp", "checkpoint", 12345), TG_ERR_ARG, "more than the 15");
}

Test(path, folder_of_a_path) {
    char out[64];
    tg_path_folder("a/b/c", out, sizeof out);
    cr_expect_str_eq(out, "a/b");
    tg_path_folder("c", out, sizeof out);
    cr_expect_str_eq(out, ".");
    tg_path_folder("/c", out, sizeof out);
    cr_expect_str_eq(out, "/");
    /* in place */
    snprintf(out, sizeof out, "x/y/z");
    tg_path_folder(out, out, sizeof out);
    tg_path_folder(out, out, sizeof out);
    cr_expect_str_eq(out, "x");
}

/* The program: an --out too long for the run's files is one line and exit 2, and nothing is made. */
Test(path, a_run_folder_too_long_for_its_files_is_refused_by_train) {
    char *corpus = NULL, *dir = ckpt_test_setup(&corpus);
    char *out_dir = malloc(TG_PATH_CAP + 64);
    int n = snprintf(out_dir, TG_PATH_CAP + 64, "%s/", dir);
    while (n < TG_PATH_CAP - 8) n += snprintf(out_dir + n, (size_t)(TG_PATH_CAP + 64 - n), "d");
    char *out = NULL;
    int rc = ckpt_cli(&out, "train --preset tiny --steps 1 --data %s --out %s", corpus, out_dir);
    cr_expect_eq(rc, 2, "exit %d: %s", rc, out);
    cr_expect(strstr(out, "too long"), "%s", out);
    cr_expect_eq(strchr(out, '\n'), out + strlen(out) - 1, "more than one line: %s", out);
    free(out);
    free(out_dir);
    datagen_remove_tree(dir);
    free(dir);
    free(corpus);
}
