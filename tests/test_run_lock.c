/* One trainer per run folder: the folder lock (support/folder_lock.h) in one process, and through the
 * CLI a second `train --resume` on a folder another process trains in, refused with that
 * process's PID while the first run goes on untouched. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "support/folder_lock.h"
#include "testutil.h"
#include "run/run_folder.h"

static char *dir, *corpus;
static void setup(void) { dir = ckpt_test_setup(&corpus); }
static void teardown(void) {
    datagen_remove_tree(dir);
    free(dir), free(corpus);
}

TestSuite(run_lock, .init = setup, .fini = teardown, .timeout = 120);

Test(run_lock, a_held_lock_refuses_another_holder_and_names_the_pid) {
    TgFolderLock first, second;
    assert_ok(tg_folder_lock_acquire(&first, dir, TG_RUN_LOCK_FILE));
    cr_assert(first.held);
    /* a second open file description conflicts even in the same process */
    char pid[64];
    snprintf(pid, sizeof pid, "process %ld trains in it", (long)getpid());
    assert_fails(tg_folder_lock_acquire(&second, dir, TG_RUN_LOCK_FILE), TG_ERR_IO, pid);
    cr_expect(strstr(tg_error_message(), TG_RUN_LOCK_FILE), "%s", tg_error_message());
    cr_expect_not(second.held);
    tg_folder_lock_release(&first);
    cr_expect_not(first.held);
    assert_ok(tg_folder_lock_acquire(&second, dir, TG_RUN_LOCK_FILE));
    tg_folder_lock_release(&second);
    tg_folder_lock_release(&second); /* a second release does nothing */
}

Test(run_lock, a_lock_file_planted_as_a_symlink_is_not_followed) {
    char *target = datagen_path(dir, "victim.txt"), *link = datagen_path(dir, TG_RUN_LOCK_FILE);
    datagen_write(dir, "victim.txt", "keep me", 7);
    cr_assert_eq(symlink(target, link), 0);
    TgFolderLock lock;
    assert_fails(tg_folder_lock_acquire(&lock, dir, TG_RUN_LOCK_FILE), TG_ERR_IO, "cannot open the lock file");
    size_t len;
    uint8_t *text = ckpt_read_file(target, &len);
    cr_expect(len == 7 && memcmp(text, "keep me", 7) == 0, "the symlink's target was written");
    free(text), free(target), free(link);
}

Test(run_lock, a_second_trainer_on_a_folder_in_use_is_refused_and_the_first_goes_on) {
    char *run = datagen_path(dir, "run"), *log = datagen_path(dir, "first.log"), *lock = datagen_path(run, TG_RUN_LOCK_FILE);
    char *args[] = {"tapegrad", "train", "--preset", "tiny", "--batch", "4", "--threads", "1", "--eval-batches", "2",
                    "--sample-tokens", "0", "--data", corpus, "--steps", "100000", "--eval-every", "0",
                    "--ckpt-every", "5", "--out", run, NULL};
    pid_t first = ckpt_spawn_cli(log, args);
    /* the lock moves into place with the folder, after the first step; the first checkpoint
     * (step 5) makes the folder one a resume would otherwise accept */
    char *ckpt5 = datagen_path(run, "ckpt-00000005.tgck");
    for (int i = 0; i < 6000 && access(ckpt5, F_OK) != 0; i++) usleep(5000);
    cr_assert_eq(access(ckpt5, F_OK), 0, "the first trainer saved no checkpoint in 30 s");

    char *out = NULL, pid[64];
    /* (without the lock it would train: a time budget keeps that short) */
    int rc = ckpt_cli(&out, "train --resume %s --time-budget 0.01", run);
    snprintf(pid, sizeof pid, "process %ld trains in it", (long)first);
    cr_expect_eq(rc, 1, "the second trainer exited %d:\n%s", rc, out);
    cr_expect(strstr(out, pid) && strstr(out, lock), "the refusal does not name the holder:\n%s", out);
    cr_expect_eq(strchr(out, '\n') - out + 1, (long)strlen(out), "not one line:\n%s", out);
    free(out);
    cr_expect_eq(waitpid(first, NULL, WNOHANG), 0, "the first trainer stopped");

    /* the first still trains and saves: stop it; then the folder is free again */
    cr_assert_eq(kill(first, SIGTERM), 0);
    int status;
    cr_assert_eq(waitpid(first, &status, 0), first);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the first trainer ended with status %d", status);
    TgFolderLock free_again;
    assert_ok(tg_folder_lock_acquire(&free_again, run, TG_RUN_LOCK_FILE));
    tg_folder_lock_release(&free_again);
    free(run), free(log), free(lock), free(ckpt5);
}
