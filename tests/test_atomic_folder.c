/* The one folder publisher (support/atomic_folder.h): a folder is filled under "<path>.tmp-XXXXXX"
 * beside its target and appears whole in one rename; an empty folder at the target is replaced, one
 * holding anything (or a link) is refused and left alone, with the temporary folder kept for
 * another name; abandoning removes it and its files; the folder gets the permissions mkdir gives. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datagen.h"
#include "support/atomic_folder.h"
#include "testutil.h"

static char *dir;
static void setup(void) { dir = datagen_tempdir(); }
static void teardown(void) {
    datagen_remove_tree(dir);
    free(dir);
}
TestSuite(atomic_folder, .init = setup, .fini = teardown);

static bool is_folder(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* How many entries `folder` holds, . and .. aside. */
static int count_entries(const char *folder) {
    DIR *d = opendir(folder);
    cr_assert_not_null(d, "%s cannot be read", folder);
    int n = 0;
    const struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

Test(atomic_folder, fills_beside_the_target_and_publishes_in_one_rename) {
    char *target = datagen_path(dir, "ds");
    TgAtomicFolder af;
    assert_ok(tg_atomic_folder_open(&af, target));
    /* "<target>.tmp-" and six letters or digits, beside the target, which does not exist yet */
    size_t n = strlen(target);
    cr_assert_eq(strncmp(af.temp, target, n), 0, "%s is not beside %s", af.temp, target);
    cr_assert_eq(strncmp(af.temp + n, ".tmp-", 5), 0, "%s", af.temp);
    cr_assert_eq(strlen(af.temp + n + 5), 6, "%s", af.temp);
    for (const char *p = af.temp + n + 5; *p; p++) cr_expect(isalnum((unsigned char)*p), "%s", af.temp);
    cr_assert(is_folder(af.temp));
    cr_expect_not(exists(target), "the target exists before the commit");
    datagen_write(af.temp, "a.txt", "a", 1);
    datagen_write(af.temp, "b.txt", "bb", 2);
    char temp[TG_PATH_CAP];
    memcpy(temp, af.temp, sizeof temp);
    assert_ok(tg_atomic_folder_commit(&af, NULL, NULL));
    cr_expect(is_folder(target));
    cr_expect_eq(count_entries(target), 2, "the files moved with the folder");
    cr_expect_not(exists(temp), "the temporary folder is left after the commit");
    cr_expect_eq(count_entries(dir), 1, "something beside the target is left");
    cr_expect_str_eq(af.temp, "");
    tg_atomic_folder_abandon(&af); /* after a commit: nothing */
    cr_expect_eq(count_entries(target), 2, "abandoning a committed folder removed files");
    free(target);
}

Test(atomic_folder, gives_the_permissions_mkdir_gives) {
    char *target = datagen_path(dir, "private");
    mode_t old = umask(077);
    TgAtomicFolder af;
    TgStatus s = tg_atomic_folder_open(&af, target);
    umask(old);
    assert_ok(s);
    assert_ok(tg_atomic_folder_commit(&af, NULL, NULL));
    struct stat st;
    cr_assert_eq(stat(target, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0700, "umask 077: mode %o", (unsigned)(st.st_mode & 0777));
    free(target);
    target = datagen_path(dir, "shared");
    old = umask(022);
    s = tg_atomic_folder_open(&af, target);
    umask(old);
    assert_ok(s);
    assert_ok(tg_atomic_folder_commit(&af, NULL, NULL));
    cr_assert_eq(stat(target, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0755, "umask 022: mode %o", (unsigned)(st.st_mode & 0777));
    free(target);
}

Test(atomic_folder, replaces_an_empty_folder_and_refuses_one_with_files) {
    char *target = datagen_path(dir, "ds");
    cr_assert_eq(mkdir(target, 0755), 0);
    TgAtomicFolder af;
    assert_ok(tg_atomic_folder_open(&af, target));
    datagen_write(af.temp, "a.txt", "a", 1);
    bool taken = true;
    assert_ok(tg_atomic_folder_commit(&af, NULL, &taken));
    cr_expect_not(taken);
    cr_expect_eq(count_entries(target), 1, "the empty folder was not replaced by the new one");

    /* the target now holds a file: refused, both left as they were, the temporary folder kept */
    assert_ok(tg_atomic_folder_open(&af, target));
    datagen_write(af.temp, "b.txt", "b", 1);
    assert_fails(tg_atomic_folder_commit(&af, NULL, &taken), TG_ERR_IO, "exists and is not empty");
    cr_expect(taken, "a folder holding files is taken");
    cr_expect_eq(count_entries(target), 1, "the folder that was there changed");
    cr_assert(is_folder(af.temp), "the temporary folder went on a refused commit");
    cr_expect_eq(count_entries(af.temp), 1);
    /* committed under another name instead */
    char *other = datagen_path(dir, "ds-2");
    assert_ok(tg_atomic_folder_commit(&af, other, &taken));
    cr_expect_not(taken);
    cr_expect_str_eq(af.path, other);
    cr_expect_eq(count_entries(other), 1);
    cr_expect_eq(count_entries(dir), 2, "ds and ds-2, and nothing else");
    free(other);
    free(target);
}

Test(atomic_folder, refuses_a_link_or_a_file_at_the_target_and_follows_neither) {
    char *elsewhere = datagen_path(dir, "elsewhere"), *link = datagen_path(dir, "link"), *file = datagen_path(dir, "file");
    cr_assert_eq(mkdir(elsewhere, 0755), 0);
    cr_assert_eq(symlink(elsewhere, link), 0);
    datagen_write(dir, "file", "x", 1);
    const char *targets[] = {link, file};
    for (int i = 0; i < 2; i++) {
        TgAtomicFolder af;
        assert_ok(tg_atomic_folder_open(&af, targets[i]));
        datagen_write(af.temp, "a.txt", "a", 1);
        bool taken = true;
        cr_expect_neq(tg_atomic_folder_commit(&af, NULL, &taken), TG_OK, "%s was replaced", targets[i]);
        cr_expect(strstr(tg_error_message(), "cannot rename"), "%s", tg_error_message());
        cr_expect_not(taken, "a link or a file is not a folder another writer made");
        cr_expect(is_folder(af.temp));
        tg_atomic_folder_abandon(&af);
    }
    struct stat st;
    cr_expect(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced");
    cr_expect_eq(count_entries(elsewhere), 0, "a file went through the link");
    cr_expect(lstat(file, &st) == 0 && S_ISREG(st.st_mode), "the file was replaced");
    cr_expect_eq(count_entries(dir), 3, "a temporary folder is left");
    free(elsewhere), free(link), free(file);
}

Test(atomic_folder, abandon_removes_the_folder_and_its_files) {
    char *target = datagen_path(dir, "ds/");   /* a trailing slash names the same folder */
    TgAtomicFolder af;
    assert_ok(tg_atomic_folder_open(&af, target));
    cr_expect_eq(strncmp(af.temp + strlen(dir), "/ds.tmp-", 8), 0, "%s", af.temp);
    datagen_write(af.temp, "a.txt", "a", 1);
    datagen_write(af.temp, "b.txt", "b", 1);
    tg_atomic_folder_abandon(&af);
    cr_expect_eq(count_entries(dir), 0, "the temporary folder or a file is left");
    cr_expect_str_eq(af.temp, "");
    free(target);
}

Test(atomic_folder, refuses_a_missing_parent_in_one_line) {
    char *target = datagen_path(dir, "missing/ds");
    TgAtomicFolder af;
    assert_fails(tg_atomic_folder_open(&af, target), TG_ERR_IO, "cannot create a folder beside");
    cr_expect(strstr(tg_error_message(), "No such file or directory"), "%s", tg_error_message());
    cr_expect_str_eq(af.temp, "");
    cr_expect_eq(count_entries(dir), 0);
    free(target);
}
