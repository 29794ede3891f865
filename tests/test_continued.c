/* Continued pretraining: `tapegrad train --init-from RUN|CKPT --data NEW` starts a new run from a
 * run's (or one of its checkpoints') weights, with its tokenizer and shape (docs/training.md).
 *
 * What must hold: the new run's text is encoded with the base's tokenizer (its tokenizer.txt is
 * the base's, byte for byte, a BPE included); it starts from exactly the base's weights (run.txt
 * records the checkpoint and the fingerprint of its weights, which the test recomputes) and logs
 * their val loss as its first line of metrics; a shape or tokenizer flag that differs, special
 * tokens, and a dataset of another tokenizer are refused before anything is written; and it
 * resumes bitwise as any run. (With --lora-rank: tests/test_lora.c.) */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "tapegrad/model.h"
#include "testutil.h"

CKPT_SCRATCH_FIXTURE

/* A BPE base of 2 steps, with a checkpoint after each, and a new text to continue it on. */
static char *base, *text;

static void setup_base(void) {
    setup();
    base = datagen_path(dir, "base");
    char *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --tokenizer bpe --vocab 320 --steps 2 --ckpt-every 1 "
                            "--keep 0 --eval-every 0 --out %s", corpus, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *other = datagen_prose(11, 20000);
    datagen_write(dir, "new.txt", other, strlen(other));
    free(other);
    text = datagen_path(dir, "new.txt");
}

static void teardown_base(void) {
    free(base), free(text);
    teardown();
}

TestSuite(continued, .init = setup_base, .fini = teardown_base, .timeout = 120);

/* The fingerprint of the weights of the checkpoint `ckpt`, as run.txt writes it. */
static void fingerprint_of(const char *ckpt, char out[17]) {
    TgModel m;
    TgCheckpointInfo info;
    cr_assert_eq(ckpt_load_model(ckpt, &m, &info), TG_OK, "%s", tg_error_message());
    snprintf(out, 17, "%016" PRIx64, tg_model_weights_fingerprint(&m));
    tg_model_free(&m);
}

static void expect_same_file(const char *a, const char *b) {
    size_t na, nb;
    uint8_t *x = ckpt_read_file(a, &na), *y = ckpt_read_file(b, &nb);
    cr_expect(na == nb && memcmp(x, y, na) == 0, "%s and %s differ", a, b);
    free(x), free(y);
}

Test(continued, a_run_or_a_checkpoint_starts_a_new_run_with_its_weights_and_tokenizer) {
    char *run = datagen_path(dir, "run"), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --init-from %s --data %s --steps 3 --eval-every 0 --out %s", base, text, run);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "with the tokenizer of ") && strstr(out, "weights from"), "%s", out);
    free(out);
    char *base_tok = datagen_path(base, "tokenizer.txt"), *run_tok = datagen_path(run, "tokenizer.txt");
    expect_same_file(base_tok, run_tok);
    /* run.txt: the checkpoint (absolute) and its weights, which are the base's latest */
    char *real = realpath(base, NULL), *ckpt2 = datagen_path(real, "ckpt-00000002.tgck"), fingerprint[17], expect[4200];
    fingerprint_of(ckpt2, fingerprint);
    snprintf(expect, sizeof expect, "--init-from %s\n--init-fingerprint %s\n", ckpt2, fingerprint);
    char *run_txt_path = datagen_path(run, "run.txt"), *run_txt = ckpt_read_text(run_txt_path);
    cr_expect(strstr(run_txt, expect) && strstr(run_txt, "--tokenizer bpe\n") && strstr(run_txt, "--preset tiny\n"),
              "expected %s in\n%s", expect, run_txt);
    free(run_txt), free(run_txt_path);
    /* the first line of metrics: the base's val loss on the new text, before any step */
    char *metrics_path = datagen_path(run, "metrics.jsonl"), *metrics = ckpt_read_text(metrics_path);
    cr_expect(strncmp(metrics, "{\"step\":0,\"val_loss\":", 21) == 0, "%s", metrics);
    free(metrics), free(metrics_path);
    /* a checkpoint names its own weights, not the folder's latest */
    char *from1 = datagen_path(dir, "from1"), *ckpt1 = datagen_path(real, "ckpt-00000001.tgck");
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --init-from %s/ckpt-00000001.tgck --data %s --steps 1 --eval-every 0 --out %s",
                  base, text, from1);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    fingerprint_of(ckpt1, fingerprint);
    snprintf(expect, sizeof expect, "--init-from %s\n--init-fingerprint %s\n", ckpt1, fingerprint);
    run_txt_path = datagen_path(from1, "run.txt"), run_txt = ckpt_read_text(run_txt_path);
    cr_expect(strstr(run_txt, expect), "expected %s in\n%s", expect, run_txt);
    free(run_txt), free(run_txt_path);
    free(base_tok), free(run_tok), free(real), free(ckpt1), free(ckpt2), free(from1), free(run);
}

Test(continued, what_the_base_fixes_is_refused_naming_both_and_leaves_nothing) {
    char *run = datagen_path(dir, "run"), *other = datagen_path(dir, "other"), *out = NULL;
    int rc = ckpt_cli(&out, "prepare --data %s --tokenizer bpe --vocab 300 --out %s", text, other);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    static const struct {
        const char *flags;
        int rc;
        const char *says;
    } cases[] = {
        {"--data NEW --dim 32", 2, "--dim 32 differs from the 64 of --init-from"},
        {"--data NEW --tokenizer char", 2, "--tokenizer char differs from the bpe of --init-from"},
        {"--data NEW --vocab 400", 2, "--vocab 400 differs from the 320 of --init-from"},
        {"--data NEW --preset small", 2, "--preset small differs from the tiny of --init-from"},
        {"--data NEW --tokenizer bpe --special-tokens chatml", 2, "encodes with its tokenizer: drop --special-tokens"},
        {"--data NEW --init-fingerprint 0123456789abcdef", 1,
         "--init-fingerprint 0123456789abcdef: the weights of --init-from"},
        {"--dataset OTHER", 1, "is not the one of --init-from"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char flags[8192];
        const char *at = strstr(cases[i].flags, "NEW") ? strstr(cases[i].flags, "NEW") : strstr(cases[i].flags, "OTHER");
        size_t word = strncmp(at, "NEW", 3) == 0 ? 3 : 5;
        snprintf(flags, sizeof flags, "%.*s%s%s", (int)(at - cases[i].flags), cases[i].flags, word == 3 ? text : other,
                 at + word);
        rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --init-from %s %s --steps 1 --out %s", base, flags, run);
        cr_expect_eq(rc, cases[i].rc, "%s: exit %d\n%s", cases[i].flags, rc, out);
        cr_expect(strstr(out, cases[i].says), "%s:\n%s", cases[i].flags, out);
        free(out);
        cr_expect(access(run, F_OK) != 0, "a refused run left %s behind", run);
    }
    free(run), free(other);
}

Test(continued, a_continued_run_resumes_bitwise) {
    char *straight = datagen_path(dir, "straight"), *split = datagen_path(dir, "split"), *out = NULL;
    const char *flags = CKPT_TEST_FLAGS " --steps 6 --eval-every 2";
    int rc = ckpt_cli(&out, "train %s --init-from %s --data %s --out %s", flags, base, text, straight);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train %s --init-from %s --data %s --stop-after 3 --out %s", flags, base, text, split);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train --resume %s", split);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "resuming at step 3 of 6"), "%s", out);
    free(out);
    ckpt_expect_same_metrics(straight, split, 3, 3);
    ckpt_expect_same_checkpoints(straight, split, 6);
    free(straight), free(split);
}
