/* A run that fails before its first step leaves nothing behind: no run folder, no default
 * checkpoints/ folder, no parent folder of --out, nothing in an --out folder that existed. A
 * resume that fails changes nothing in its run's folder. And the steps of a new run's
 * temporary folder (run/run_folder.h) on their own. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "testutil.h"
#include "run/run_folder.h"

static char *scratch, *work; /* the runs start in work; their output goes to scratch, beside it */

static void setup(void) {
    scratch = datagen_tempdir();
    work = datagen_path(scratch, "work");
    char *text = datagen_english(11, 20000);
    datagen_write(scratch, "work/corpus.txt", text, strlen(text));
    free(text);
    datagen_write(work, "empty.txt", "", 0);
    datagen_write(work, "not.safetensors", "this is not a safetensors file", 30);
}

static void teardown(void) {
    datagen_remove_tree(scratch);
    free(scratch);
    free(work);
}

/* Runs `tapegrad <args>` in work; returns its exit code and its stderr in *err (malloc'ed). */
static int cli(char **err, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s %s > '%s/out.txt' 2> '%s/err.txt' < /dev/null", work, TAPEGRAD_BIN, args,
             scratch, scratch);
    int rc = test_run(cmd);
    char *path = datagen_path(scratch, "err.txt");
    size_t len;
    *err = (char *)ckpt_read_file(path, &len);
    *err = realloc(*err, len + 1);
    (*err)[len] = '\0';
    free(path);
    return rc;
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* One line per entry under root/rel, in name order: folders by name, files with their size, a
 * hash of their bytes and their modification time (a rewrite with the same bytes shows too).
 * The run's lock file is listed by name only: every trainer that takes the lock writes its PID. */
static void list_tree(FILE *out, const char *root, const char *rel) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s%s%s", root, rel[0] ? "/" : "", rel);
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    cr_assert_geq(n, 0, "cannot list %s", dir);
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0) {
            char child_rel[4096], child[8200];
            snprintf(child_rel, sizeof child_rel, "%s%s%.255s", rel, rel[0] ? "/" : "", name);
            snprintf(child, sizeof child, "%s/%s", root, child_rel);
            struct stat st;
            cr_assert_eq(lstat(child, &st), 0, "cannot stat %s", child);
            if (S_ISDIR(st.st_mode)) {
                fprintf(out, "%s/\n", child_rel);
                list_tree(out, root, child_rel);
            } else if (strcmp(name, TG_RUN_LOCK_FILE) == 0) {
                fprintf(out, "%s: the lock\n", child_rel);
            } else {
                size_t len;
                uint8_t *bytes = ckpt_read_file(child, &len);
                fprintf(out, "%s: %zu bytes, fnv %016llx, mtime %lld.%09ld\n", child_rel, len,
                        (unsigned long long)fnv1a(bytes, len), (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
                free(bytes);
            }
        }
        free(names[i]);
    }
    free(names);
}

static char *tree(const char *root) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    list_tree(out, root, "");
    fclose(out);
    return text;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* `tapegrad <args>` fails (exit 1 or 2, not a crash) with one line on stderr naming `fragment`,
 * and everything under `root` is as it was. */
static void expect_fails_changing_nothing(const char *root, const char *args, const char *fragment) {
    char *before = tree(root), *err;
    int rc = cli(&err, args);
    char *after = tree(root);
    cr_expect(rc == 1 || rc == 2, "`tapegrad %s` exited %d: %s", args, rc, err);
    cr_expect(strstr(err, fragment), "`tapegrad %s`: the message lacks '%s': %s", args, fragment, err);
    cr_expect_eq(count_lines(err), 1, "`tapegrad %s`: expected one message line, got: %s", args, err);
    cr_expect_str_eq(after, before, "`tapegrad %s` changed %s; before:\n%s\nafter:\n%s", args, root, before, after);
    free(before);
    free(after);
    free(err);
}

#define TINY "--preset tiny --batch 4 --threads 1 --eval-batches 2 --sample-tokens 0 "

/* Failures before the first step: flags, the model config, the corpus, the tokenizer, and
 * (the last) one found only after the run's files were written. */
static const struct {
    const char *args, *fragment;
} failures[] = {
    {TINY "--data corpus.txt --dim 128 --heads 3", "--heads 3 does not divide --dim 128"},
    {TINY "--data corpus.txt --seq 4000", "corpus too short"},
    /* a context whose attention scratch alone (threads x (head + T) x T floats) exceeds any machine */
    {TINY "--data corpus.txt --seq 200000", "--batch 4 --seq 200000 needs about"},
    {TINY "--data missing.txt", "missing.txt"},
    {TINY "--data empty.txt", "empty.txt"},
    {TINY "--data corpus.txt --lr abc", "--lr"},
    {TINY "--data corpus.txt --steps 0", "--steps must be in [1, 9007199254740992], got 0"},
    {TINY "--data corpus.txt --threads 0", "--threads"},
    {TINY "--data corpus.txt --val-fraction 1.5", "--val-fraction"},
    {TINY "--data corpus.txt --ffn gelu", "--ffn"},
    {TINY "--data corpus.txt --tokenizer bpe --vocab 100000", "largest reachable vocab_size"},
    {TINY "--data corpus.txt --tokenizer bpe --vocab 100", "257"},
    {TINY "--data corpus.txt --init-from not.safetensors", "not.safetensors"},
};
enum { N_FAILURES = sizeof failures / sizeof failures[0] };

static void expect_every_failure_changes_nothing(const char *out_flag) {
    char args[1024];
    for (int i = 0; i < N_FAILURES; i++) {
        snprintf(args, sizeof args, "train %s %s", failures[i].args, out_flag);
        expect_fails_changing_nothing(work, args, failures[i].fragment);
    }
}

TestSuite(failed_start, .init = setup, .fini = teardown, .timeout = 120);

Test(failed_start, creates_no_default_folder) {
    expect_every_failure_changes_nothing("");
    /* with checkpoints/ there already, holding a run */
    datagen_write(work, "checkpoints/old/latest", "ckpt-00000010.tgck\n", 19);
    expect_every_failure_changes_nothing("");
    /* and the listing sees a run that starts */
    char *before = tree(work), *err;
    cr_assert_eq(cli(&err, "train " TINY "--data corpus.txt --steps 2"), 0, "%s", err);
    char *after = tree(work);
    cr_expect(strstr(after, "checkpoints/tiny-char-") && strstr(after, "/latest:"), "%s", after);
    cr_expect(!strstr(after, ".tmp-"), "a temporary folder is left:\n%s", after);
    free(before), free(after), free(err);
}

Test(failed_start, creates_no_out_folder_nor_its_parents) {
    expect_every_failure_changes_nothing("--out runs/a/run");
    char *err;
    cr_assert_eq(cli(&err, "train " TINY "--data corpus.txt --steps 2 --out runs/a/run"), 0, "%s", err);
    free(err);
    char *after = tree(work);
    cr_expect(strstr(after, "runs/a/run/latest:") && !strstr(after, ".tmp-"), "%s", after);
    free(after);
}

Test(failed_start, leaves_an_existing_out_folder_as_it_was) {
    datagen_write(work, "mine/job.log", "the job's own log\n", 18);
    expect_every_failure_changes_nothing("--out mine");
    /* a run that starts moves its files in beside the others */
    char *err;
    cr_assert_eq(cli(&err, "train " TINY "--data corpus.txt --steps 2 --out mine"), 0, "%s", err);
    free(err);
    char *after = tree(work);
    cr_expect(strstr(after, "mine/job.log:") && strstr(after, "mine/latest:") && strstr(after, "mine/train.tok:") &&
                  !strstr(after, ".tmp-"),
              "%s", after);
    free(after);
    /* a folder holding a run, or a run's files without a checkpoint, is refused as it is */
    expect_fails_changing_nothing(work, "train " TINY "--data corpus.txt --out mine", "already holds a run");
    char *latest = datagen_path(work, "mine/latest");
    cr_assert_eq(unlink(latest), 0);
    free(latest);
    expect_fails_changing_nothing(work, "train " TINY "--data corpus.txt --out mine", "holds files of another run");
}

/* ------------------------------------------------------------------ a failing resume */

Test(failed_resume, changes_nothing_in_the_run_folder, .init = setup, .fini = teardown, .timeout = 120) {
    char *err;
    cr_assert_eq(cli(&err, "train " TINY "--data corpus.txt --steps 4 --ckpt-every 2 --keep 0 --out run"), 0, "%s", err);
    free(err);
    /* what a run killed during a save and after a logged step leaves, and a resume tidies */
    datagen_write(work, "run/ckpt-00000006.tgck.tmp", "half a checkpoint", 17);
    char *metrics = datagen_path(work, "run/metrics.jsonl");
    FILE *f = fopen(metrics, "a");
    cr_assert_not_null(f);
    fputs("{\"step\":5,\"loss\":1.5}\n", f);
    fclose(f);
    char *ckpt_path = datagen_path(work, "run/ckpt-00000004.tgck");
    size_t ckpt_len;
    uint8_t *ckpt = ckpt_read_file(ckpt_path, &ckpt_len);
    char *before = tree(work);

    static const struct {
        const char *args, *fragment;
    } resumes[] = {
        {"--resume run --heads 3", "--heads 3 differs from the resumed run's 2"},
        {"--resume run --dim 128 --heads 3", "--dim 128 differs"},
        {"--resume run --seed 7", "--seed 7 differs"},
        {"--resume run --data empty.txt", "--data empty.txt differs"},
        {"--resume run --tokenizer bpe", "--tokenizer bpe differs"},
        {"--resume run --threads 0", "--threads"},
        {"--resume run --steps 0", "--steps"},
        {"--resume run --stop-after 99", "past --steps 4"},
        {"--resume run --lr abc", "--lr"},
        {"--resume run --out elsewhere", "drop --out"},
        {"--resume run --init-from not.safetensors", "--init-from"},
        {"--resume run/ckpt-00000077.tgck", "ckpt-00000077.tgck"},
    };
    char args[512];
    for (size_t i = 0; i < sizeof resumes / sizeof resumes[0]; i++) {
        snprintf(args, sizeof args, "train %s", resumes[i].args);
        expect_fails_changing_nothing(work, args, resumes[i].fragment);
        size_t len;
        uint8_t *now = ckpt_read_file(ckpt_path, &len);
        cr_expect(len == ckpt_len && memcmp(now, ckpt, len) == 0, "`tapegrad %s` changed the checkpoint", args);
        free(now);
    }
    /* a resume that goes ahead does tidy: the listing would have seen it */
    cr_assert_eq(cli(&err, "train --resume run --steps 6"), 0, "%s", err);
    free(err);
    char *after = tree(work);
    cr_expect(!strstr(after, "ckpt-00000006.tgck.tmp") && strstr(after, "run/ckpt-00000006.tgck:"), "%s", after);
    cr_expect_str_neq(after, before);
    free(after), free(before), free(ckpt), free(ckpt_path), free(metrics);
}

/* `train --resume docs/notes.txt` or `--resume emptyfolder` exited 1 but left a train.lock there,
 * with "cannot open tokenizer file docs/tokenizer.txt" for the file. Every command that opens a
 * run now refuses what is no run with the same line, before anything is created. */
Test(failed_resume, what_is_no_run_is_refused_before_anything_is_created, .init = setup, .fini = teardown) {
    datagen_write(work, "docs/notes.txt", "my notes\n", 9);
    datagen_write(work, "emptyfolder/.keep", "", 0);
    datagen_write(work, "locked/" TG_RUN_LOCK_FILE, "123\n", 4); /* what an older tapegrad left */
    static const char *const given[] = {"docs/notes.txt", "emptyfolder", "locked", "docs", "corpus.txt"};
    static const char *const commands[] = {
        "train --resume %s",          "sample --run %s",       "eval --run %s",
        "inspect --run %s",           "inspect --ckpt %s",     "report %s",
        "ckpt export %s --gguf m.gguf", "ckpt export %s --hf hf", "train --resume %s --steps 9",
    };
    char args[512], fragment[256];
    for (size_t g = 0; g < sizeof given / sizeof given[0]; g++)
        for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
            snprintf(args, sizeof args, commands[c], given[g]);
            snprintf(fragment, sizeof fragment,
                     "%s is not a run folder or a checkpoint in one: a run folder holds the files `tapegrad train` writes",
                     given[g]);
            expect_fails_changing_nothing(work, args, fragment);
        }
    /* ckpt info and export --safetensors read a checkpoint file anywhere, but a folder only if it is a run's */
    for (size_t g = 1; g < 4; g++) {
        snprintf(fragment, sizeof fragment, "%s is not a run folder or a checkpoint in one", given[g]);
        snprintf(args, sizeof args, "ckpt info %s", given[g]);
        expect_fails_changing_nothing(work, args, fragment);
        snprintf(args, sizeof args, "ckpt export %s --safetensors w.safetensors", given[g]);
        expect_fails_changing_nothing(work, args, fragment);
    }
    expect_fails_changing_nothing(work, "train --resume missing", "missing: no such run folder or checkpoint file");
    expect_fails_changing_nothing(work, "sample --run ''", "an empty path names no run");
}

/* ------------------------------------------------------------------ the steps on their own */

TestSuite(run_folder, .init = setup, .fini = teardown);

static char *path_in(const char *rel) { return datagen_path(work, rel); }

Test(run_folder, discard_removes_the_temporary_folder_and_the_parents_it_made) {
    char *before = tree(work), *out = path_in("a/b/run");
    TgRunFolder f;
    cr_assert_eq(tg_run_folder_choose(&f, out, NULL), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_run_folder_begin(&f), TG_OK, "%s", tg_error_message());
    cr_expect(strstr(f.temp, "/a/b/run.tmp-"), "temporary folder %s", f.temp);
    datagen_write(f.temp, "train.tok", "tokens", 6);
    tg_run_folder_discard(&f);
    char *after = tree(work);
    cr_expect_str_eq(after, before);
    free(before), free(after), free(out);
}

Test(run_folder, an_existing_folder_keeps_its_files_and_gets_the_run_s_at_the_commit) {
    datagen_write(work, "mine/job.log", "log", 3);
    char *out = path_in("mine"), *before = tree(work);
    TgRunFolder f;
    cr_assert_eq(tg_run_folder_choose(&f, out, NULL), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_run_folder_begin(&f), TG_OK, "%s", tg_error_message());
    cr_expect(strstr(f.temp, "/mine/run.tmp-"), "temporary folder %s", f.temp);
    datagen_write(f.temp, "train.tok", "tokens", 6);
    tg_run_folder_discard(&f);
    char *after = tree(work);
    cr_expect_str_eq(after, before);
    free(after);

    cr_assert_eq(tg_run_folder_choose(&f, out, NULL), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_run_folder_begin(&f), TG_OK, "%s", tg_error_message());
    datagen_write(f.temp, "train.tok", "tokens", 6);
    cr_assert_eq(tg_run_folder_commit(&f), TG_OK, "%s", tg_error_message());
    tg_run_folder_discard(&f); /* after the commit: nothing */
    after = tree(work);
    cr_expect(strstr(after, "mine/job.log:") && strstr(after, "mine/train.tok:") && !strstr(after, ".tmp-"), "%s", after);
    free(after), free(before), free(out);
}

Test(run_folder, a_generated_name_taken_meanwhile_gets_a_suffix) {
    char *name = path_in("checkpoints/tiny-char-20250101-000000");
    TgRunFolder f;
    cr_assert_eq(tg_run_folder_choose(&f, NULL, name), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_run_folder_begin(&f), TG_OK, "%s", tg_error_message());
    datagen_write(f.temp, "train.tok", "ours", 4);
    datagen_write(work, "checkpoints/tiny-char-20250101-000000/train.tok", "another run's", 13); /* same second */
    cr_assert_eq(tg_run_folder_commit(&f), TG_OK, "%s", tg_error_message());
    char expected[4200];
    snprintf(expected, sizeof expected, "%s-2", name);
    cr_expect_str_eq(f.path, expected);
    char *after = tree(work);
    cr_expect(strstr(after, "tiny-char-20250101-000000/train.tok: 13 bytes") &&
                  strstr(after, "tiny-char-20250101-000000-2/train.tok: 4 bytes"),
              "%s", after);
    free(after);
    /* and a name already taken is passed over from the start */
    cr_assert_eq(tg_run_folder_choose(&f, NULL, name), TG_OK, "%s", tg_error_message());
    snprintf(expected, sizeof expected, "%s-3", name);
    cr_expect_str_eq(f.path, expected);
    free(name);
}

Test(run_folder, choose_refuses_what_cannot_become_a_run_folder) {
    datagen_write(work, "afile", "x", 1);
    datagen_write(work, "done/latest", "ckpt-00000002.tgck\n", 19);
    datagen_write(work, "half/metrics.jsonl", "{}\n", 3);
    datagen_write(work, "junk/ckpt-00000004.tgck.tmp", "x", 1);
    char *before = tree(work);
    struct {
        const char *out, *fragment;
    } refused[] = {
        {"afile", "afile is a file, not a folder"},
        {"afile/run", "afile is a file, not a folder"},
        {"done", "already holds a run"},
        {"half", "holds files of another run (metrics.jsonl)"},
    };
    TgRunFolder f;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char *out = path_in(refused[i].out);
        cr_expect_eq(tg_run_folder_choose(&f, out, NULL), TG_ERR_ARG, "%s accepted", refused[i].out);
        cr_expect(strstr(tg_error_message(), refused[i].fragment), "%s: %s", refused[i].out, tg_error_message());
        free(out);
    }
    /* a save's leftover is no run's */
    char *junk = path_in("junk/");
    cr_expect_eq(tg_run_folder_choose(&f, junk, NULL), TG_OK, "%s", tg_error_message());
    cr_expect(f.existed && f.path[strlen(f.path) - 1] == 'k', "%s", f.path);
    char *after = tree(work);
    cr_expect_str_eq(after, before, "choosing wrote something");
    free(junk), free(before), free(after);
}

/* A run never goes among a project's sources: an existing folder of code files in a git work tree
 * is refused; a new folder made in one is taken, and noted for the warning the trainer prints. A
 * folder of code files outside any git work tree, and a folder of data in one, are taken as any. */
Test(run_folder, a_folder_of_source_files_in_a_git_work_tree_takes_no_run) {
    datagen_write(work, "project/.git/HEAD", "ref: refs/heads/main\n", 21);
    datagen_write(work, "project/src/model.c", "int x;\n", 7);
    datagen_write(work, "project/data/notes.txt", "notes\n", 6);
    datagen_write(work, "loose/tool.py", "print()\n", 8);
    char *before = tree(work);
    TgRunFolder f;
    char *src = path_in("project/src");
    cr_expect_eq(tg_run_folder_choose(&f, src, NULL), TG_ERR_ARG, "a folder of sources accepted");
    cr_expect(strstr(tg_error_message(), "holds model.c, in the git work tree ") &&
                  strstr(tg_error_message(), "pass `out_dir` checkpoints/NAME"),
              "%s", tg_error_message());
    char *inside = path_in("project/src/run1");
    cr_expect_eq(tg_run_folder_choose(&f, inside, NULL), TG_OK, "%s", tg_error_message());
    cr_expect(strstr(f.among_sources, "holds model.c, in the git work tree "), "noted: \"%s\"", f.among_sources);
    const char *taken[] = {"project/data", "project/data/run1", "loose", "loose/run1"};
    for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++) {
        char *out = path_in(taken[i]);
        cr_expect_eq(tg_run_folder_choose(&f, out, NULL), TG_OK, "%s: %s", taken[i], tg_error_message());
        cr_expect_str_eq(f.among_sources, "", "%s", taken[i]);
        free(out);
    }
    cr_expect(tg_run_folder_code_file("CMakeLists.txt") && tg_run_folder_code_file("a.h") && !tg_run_folder_code_file("a.txt") &&
              !tg_run_folder_code_file(".c"));
    char *after = tree(work);
    cr_expect_str_eq(after, before, "choosing wrote something");
    free(src), free(inside), free(before), free(after);
}

/* A checkpoint the run no longer keeps (--keep removed it) is named missing with the list of those
 * the folder holds; a missing path outside a run folder gets the general message. */
Test(run_folder, a_checkpoint_no_longer_kept_is_refused_with_the_ones_kept) {
    datagen_write(work, "r/run.txt", "x\n", 2);
    datagen_write(work, "r/latest", "ckpt-00000006.tgck\n", 19);
    datagen_write(work, "r/ckpt-00000004.tgck", "x", 1);
    datagen_write(work, "r/ckpt-00000006.tgck", "x", 1);
    char *gone = path_in("r/ckpt-00000002.tgck"), *elsewhere = path_in("nothing/ckpt-00000002.tgck"), dir[4200];
    cr_expect_eq(tg_run_folder_locate(gone, dir, sizeof dir), TG_ERR_IO);
    cr_expect(strstr(tg_error_message(), "ckpt-00000002.tgck: no such checkpoint; the run folder ") &&
                  strstr(tg_error_message(), " holds ckpt-00000006.tgck, ckpt-00000004.tgck ("),
              "%s", tg_error_message());
    cr_expect_eq(tg_run_folder_locate(elsewhere, dir, sizeof dir), TG_ERR_IO);
    cr_expect(strstr(tg_error_message(), "no such run folder or checkpoint file"), "%s", tg_error_message());
    free(gone), free(elsewhere);
}
