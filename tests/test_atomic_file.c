/* The one atomic writer every file of tapegrad goes through: a new file appears whole or not at
 * all, the old one stays on any failure, no temporary file is left, and a symlink planted at the
 * temporary name is never followed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datagen.h"
#include "support/atomic_file.h"
#include "testutil.h"

static char *dir;
static void setup(void) { dir = datagen_tempdir(); }
static void teardown(void) {
    datagen_remove_tree(dir);
    free(dir);
}
TestSuite(atomic_file, .init = setup, .fini = teardown);

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 4096);
    size_t n = fread(buf, 1, 4095, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void expect_contents(const char *path, const char *want) {
    char *got = read_all(path);
    cr_assert_not_null(got, "%s is missing", path);
    cr_expect_str_eq(got, want);
    free(got);
}

Test(atomic_file, writes_and_replaces_leaving_no_temporary) {
    char *path = datagen_path(dir, "f.txt");
    assert_ok(tg_atomic_write(path, "first\n", 6));
    expect_contents(path, "first\n");
    TgAtomicFile af;
    assert_ok(tg_atomic_file_open(&af, path));
    fprintf(tg_atomic_file_stream(&af), "second %d\n", 2);
    expect_contents(path, "first\n");   /* nothing changes before the commit */
    cr_expect_eq(test_count_tmp_files(dir), 1);
    assert_ok(tg_atomic_file_commit(&af));
    expect_contents(path, "second 2\n");
    cr_expect_eq(test_count_tmp_files(dir), 0);
    free(path);
}

Test(atomic_file, abandon_keeps_the_old_file) {
    char *path = datagen_path(dir, "f.txt");
    assert_ok(tg_atomic_write(path, "old", 3));
    TgAtomicFile af;
    assert_ok(tg_atomic_file_open(&af, path));
    cr_expect_eq(write(af.fd, "new", 3), 3);
    tg_atomic_file_abandon(&af);
    expect_contents(path, "old");
    cr_expect_eq(test_count_tmp_files(dir), 0);
    free(path);
}

Test(atomic_file, failed_commit_keeps_the_target_and_says_so) {
    /* a non-empty folder at the target: the rename fails after the data was written */
    datagen_write(dir, "target/inside", "x", 1);
    char *path = datagen_path(dir, "target");
    assert_fails(tg_atomic_write(path, "data", 4), TG_ERR_IO, "is untouched");
    cr_expect(strstr(tg_error_message(), path));
    struct stat st;
    cr_expect(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    cr_expect_eq(test_count_tmp_files(dir), 0);
    free(path);
}

Test(atomic_file, missing_folder_is_refused_with_a_message) {
    char *path = datagen_path(dir, "no/such/folder/f.txt");
    assert_fails(tg_atomic_write(path, "x", 1), TG_ERR_IO, "does the folder exist");
    free(path);
}

Test(atomic_file, symlink_at_the_temporary_name_is_not_followed) {
    char *victim = datagen_path(dir, "victim.txt"), *path = datagen_path(dir, "f.txt");
    assert_ok(tg_atomic_write(victim, "precious", 8));
    char link[4200];
    snprintf(link, sizeof link, "%s.%ld.tmp", path, (long)getpid());
    cr_assert_eq(symlink(victim, link), 0);
    assert_ok(tg_atomic_write(path, "new", 3));
    expect_contents(victim, "precious");
    expect_contents(path, "new");
    struct stat st;
    cr_expect_eq(lstat(path, &st), 0);
    cr_expect(S_ISREG(st.st_mode), "the target must be a regular file, not the planted link");
    free(victim);
    free(path);
}

/* The output check (run/output_check.h) refuses a link at an output path, but one can appear
 * between the check and the write: the commit's rename replaces the link itself, and the file
 * it points to keeps its bytes. The same for a FIFO, which the write never opens. */
Test(atomic_file, a_link_or_fifo_planted_at_the_target_is_replaced_not_written_through) {
    char *victim = datagen_path(dir, "victim.txt"), *target = datagen_path(dir, "out.gguf");
    datagen_write(dir, "victim.txt", "keep me\n", 8);
    cr_assert_eq(symlink(victim, target), 0);
    assert_ok(tg_atomic_write(target, "new\n", 4));
    struct stat st;
    cr_assert_eq(lstat(target, &st), 0);
    cr_expect(S_ISREG(st.st_mode), "the target is still a link");
    char *text = read_all(target);
    cr_expect_str_eq(text, "new\n");
    free(text);
    text = read_all(victim);
    cr_expect_str_eq(text, "keep me\n", "the link's target was written");
    free(text);

    cr_assert_eq(unlink(target), 0);
    cr_assert_eq(mkfifo(target, 0644), 0);
    assert_ok(tg_atomic_write(target, "new\n", 4)); /* would block for good if it opened the FIFO */
    cr_assert_eq(lstat(target, &st), 0);
    cr_expect(S_ISREG(st.st_mode), "the target is still a FIFO");
    cr_expect_eq(test_count_tmp_files(dir), 0);
    free(victim), free(target);
}

Test(atomic_file, make_folders_creates_parents_and_refuses_a_file) {
    char *deep = datagen_path(dir, "a/b/c");
    assert_ok(tg_make_folders(deep));
    assert_ok(tg_make_folders(deep));   /* existing: fine */
    struct stat st;
    cr_expect(stat(deep, &st) == 0 && S_ISDIR(st.st_mode));
    datagen_write(dir, "plain", "x", 1);
    char *plain = datagen_path(dir, "plain");
    assert_fails(tg_make_folders(plain), TG_ERR_IO, "is not a folder");
    free(deep);
    free(plain);
}
