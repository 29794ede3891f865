/* `tapegrad dpo` (train --task dpo): a fine-tuned run trained on preference pairs.
 *
 * What it must get right: the run starts at the DPO loss of its own weights, ln 2 (the policy is
 * its reference); the reference's log-probabilities are computed once and kept in the run folder,
 * so that a resume, which holds no second model, continues bitwise, and a resume without them is
 * refused naming the file; --beta is recorded; the chosen replies move ahead on the val pairs; a
 * LoRA run's reference is its frozen base; and what cannot be trained is refused saying why.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "facts.h"
#include "testutil.h"
#include "train/dpo.h"

CKPT_SCRATCH_FIXTURE

static const char *const WORDS[] = {"tea", "rain", "paper", "bells", "stone", "clocks"};

/* A base run with the ChatML markers, fine-tuned on "Say W." -> "W, W." (a few steps: the SFT
 * model DPO starts from). */
static char *sft_run(void) {
    char *base = datagen_path(dir, "base"), *sft = datagen_path(dir, "sft"), *out = NULL;
    int rc =
        ckpt_cli(&out,
                 "train " CKPT_TEST_FLAGS " --data %s --tokenizer bpe --vocab 320 --special-tokens chatml --steps 2 "
                 "--eval-every 0 --out %s",
                 corpus, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *text = malloc(1 << 16);
    size_t n = 0;
    for (int i = 0; i < 60; i++)
        n += (size_t)sprintf(text + n,
                             "{\"conversations\": [{\"role\": \"user\", \"content\": \"Say %s.\"}, {\"role\": "
                             "\"assistant\", \"content\": \"%s, %s.\"}]}\n",
                             WORDS[i % 6], WORDS[i % 6], WORDS[i % 6]);
    datagen_write(dir, "conversations.jsonl", text, n);
    free(text);
    char *data = datagen_path(dir, "conversations.jsonl");
    rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --seq 64 --steps 6 --eval-every 0 --out %s",
                  base, data, sft);
    cr_assert_eq(rc, 0, "%s", out);
    free(out), free(data), free(base);
    return sft;
}

/* MiniMind's dpo.jsonl: the chosen reply names its source, the rejected one does not; and, when
 * `unlearnable`, a pair with the same reply twice and one whose sides have two prompts. */
static char *pairs_file(const char *name, int n_pairs, bool unlearnable) {
    char *text = malloc(1 << 17);
    size_t n = 0;
    for (int i = 0; i < n_pairs; i++) {
        const char *w = WORDS[i % 6];
        n += (size_t)sprintf(text + n,
                             "{\"chosen\": [{\"role\": \"user\", \"content\": \"Say %s.\"}, {\"role\": \"assistant\", "
                             "\"content\": \"%s, %s. (source: the list)\"}], \"rejected\": [{\"role\": \"user\", "
                             "\"content\": \"Say %s.\"}, {\"role\": \"assistant\", \"content\": \"%s, %s.\"}]}\n",
                             w, w, w, w, w, w);
    }
    if (unlearnable)
        n += (size_t)sprintf(
            text + n, "{\"chosen\": [{\"role\": \"user\", \"content\": \"Say tea.\"}, {\"role\": \"assistant\", "
                      "\"content\": \"tea.\"}], \"rejected\": [{\"role\": \"user\", \"content\": \"Say tea.\"}, "
                      "{\"role\": \"assistant\", \"content\": \"tea.\"}]}\n"
                      "{\"chosen\": [{\"role\": \"user\", \"content\": \"Say tea.\"}, {\"role\": \"assistant\", "
                      "\"content\": \"tea.\"}], \"rejected\": [{\"role\": \"user\", \"content\": \"Say rain.\"}, "
                      "{\"role\": \"assistant\", \"content\": \"rain.\"}]}\n");
    datagen_write(dir, name, text, n);
    free(text);
    return datagen_path(dir, name);
}

/* metrics.jsonl without its timings (tokens_per_s, elapsed_s), which no two runs share. */
static char *metrics_without_timings(const char *run) {
    char *path = datagen_path(run, "metrics.jsonl"), *text = ckpt_read_text(path);
    free(path);
    for (const char *field = "\"tokens_per_s\":"; field;
         field = strcmp(field, "\"elapsed_s\":") ? "\"elapsed_s\":" : NULL)
        for (char *at; (at = strstr(text, field));) {
            size_t len = strcspn(at, ",}");
            memmove(at, at + len, strlen(at + len) + 1);
        }
    return text;
}

/* The value of `field` ("\"val_accuracy\":") on the last line of a run's metrics.jsonl holding it. */
static double last_figure(const char *run, const char *field) {
    char *path = datagen_path(run, "metrics.jsonl"), *text = ckpt_read_text(path);
    double value = NAN;
    for (const char *at = text; (at = strstr(at, field)); at += strlen(field)) value = strtod(at + strlen(field), NULL);
    free(path), free(text);
    return value;
}

Test(dpo_cli, trains_toward_the_chosen_replies_and_resumes_bitwise_from_its_kept_reference, .init = setup,
     .fini = teardown, .timeout = 180) {
    char *sft = sft_run(), *data = pairs_file("dpo.jsonl", 60, true);
    char *straight = datagen_path(dir, "straight"), *split = datagen_path(dir, "split"), *out = NULL;
    const char *flags =
        "dpo " CKPT_TEST_FLAGS " --batch 2 --init-from %s --data %s --lr 3e-3 --steps 16 --eval-every 4 %s --out %s";
    int rc = ckpt_cli(&out, flags, sft, data, "", straight);
    cr_assert_eq(rc, 0, "%s", out);
    /* the policy starts as its reference: every margin 0, the loss ln 2 */
    cr_expect(strstr(out, ": val loss 0.6931 before training"), "%s", out);
    cr_expect(strstr(out, "left out: 1 pair whose chosen and rejected replies are the same, 1 whose two sides have "
                          "different prompts"),
              "%s", out);
    cr_expect(strstr(out, "reference: both replies' log-probabilities of 54 train and 6 val pairs"), "%s", out);
    cr_expect(strstr(out, "batch 2 pairs (4 rows)"), "%s", out);
    cr_expect(strstr(out, "val preference pairs: "), "%s", out);
    cr_expect_null(strstr(out, "bits per byte"), "a DPO loss is no text's: %s", out);
    double accuracy = last_figure(straight, "\"val_accuracy\":"), loss = last_figure(straight, "\"val_loss\":");
    cr_expect(accuracy >= 0.9, "the chosen replies did not move ahead: val accuracy %g", accuracy);
    cr_expect(loss < 0.5 * log(2.0), "val DPO loss %g did not fall from ln 2", loss);
    cr_expect(!isnan(last_figure(straight, "\"margin\":")) && !isnan(last_figure(straight, "\"rejected_logp\":")),
              "a step's margin and log-probabilities are logged");
    char *identity = datagen_path(straight, "run.txt"), *text = ckpt_read_text(identity);
    cr_expect(strstr(text, "--task dpo\n") && strstr(text, "--beta 0.10000000000000001\n"), "%s", text);
    free(text), free(identity), free(out);
    /* stopped at step 6 and resumed: the very figures and weights, with no reference model */
    rc = ckpt_cli(&out, flags, sft, data, "--stop-after 6", split);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "dpo --resume %s", split);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "resuming at step 6 of 16") && !strstr(out, "reference: both"), "%s", out);
    free(out);
    char *a = metrics_without_timings(straight), *b = metrics_without_timings(split);
    cr_expect_str_eq(a, b, "a resumed DPO run's metrics differ from its straight twin's");
    free(a), free(b);
    ckpt_expect_same_checkpoints(straight, split, 16);
    /* without its reference, or with another's, a run cannot resume: refused, naming the file */
    char *ref = datagen_path(split, TG_DPO_REFERENCE_FILE);
    char *kept = ckpt_read_text(ref);
    cr_assert_eq(unlink(ref), 0);
    rc = ckpt_cli(&out, "dpo --resume %s --steps 20", split);
    cr_expect(rc != 0 && strstr(out, TG_DPO_REFERENCE_FILE) && strstr(out, "cannot resume"), "%s", out);
    free(out);
    datagen_write(split, TG_DPO_REFERENCE_FILE, "TGDPOREF", 8);
    rc = ckpt_cli(&out, "train --resume %s --steps 20", split);
    cr_expect(rc != 0 && strstr(out, "is not the reference of this run's pairs"), "%s", out);
    free(out), free(kept), free(ref);
    free(sft), free(data), free(straight), free(split);
}

/* With LoRA the frozen base is the reference (its adapters start at 0): no second copy of the
 * weights, and the run starts at ln 2 too. */
Test(dpo_cli, a_lora_run_starts_at_its_base_and_moves_its_adapters, .init = setup, .fini = teardown, .timeout = 120) {
    char *sft = sft_run(), *data = pairs_file("dpo.jsonl", 30, false), *lora = datagen_path(dir, "lora"), *out = NULL;
    int rc = ckpt_cli(&out,
                      "dpo " CKPT_TEST_FLAGS " --batch 2 --init-from %s --data %s --lora-rank 4 --lr 0.01 --steps 12 "
                      "--eval-every 6 --beta 0.5 --out %s",
                      sft, data, lora);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, ": val loss 0.6931 before training") && strstr(out, "beta 0.5"), "%s", out);
    double loss = last_figure(lora, "\"val_loss\":");
    cr_expect(loss < log(2.0) - 0.05, "val DPO loss %g did not fall from ln 2", loss);
    free(out), free(sft), free(data), free(lora);
}

/* The usual schedule around the loss: 4 pairs a micro-batch, or 2 pairs x accum 2, make the same
 * steps (the loss is a mean over pairs: each micro-batch's weighs half); bf16 trains too; and with
 * `--strict` a pair that teaches nothing stops the preparation, naming its line. */
Test(dpo_cli, accumulation_bf16_and_strict_as_for_any_run, .init = setup, .fini = teardown, .timeout = 120) {
    char *sft = sft_run(), *data = pairs_file("dpo.jsonl", 30, false), *out = NULL;
    char *whole = datagen_path(dir, "whole"), *halves = datagen_path(dir, "halves"), *bf16 = datagen_path(dir, "bf16");
    const char *flags =
        "dpo " CKPT_TEST_FLAGS " --init-from %s --data %s --lr 3e-3 --steps 6 --eval-every 0 %s --out %s";
    int rc = ckpt_cli(&out, flags, sft, data, "--batch 4", whole);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, flags, sft, data, "--batch 2 --accum 2", halves);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    CkptMetricLine a[16], b[16];
    int na = ckpt_read_metrics(whole, 0, a, 16), nb = ckpt_read_metrics(halves, 0, b, 16);
    cr_assert(na >= 6 && na == nb, "%d and %d lines", na, nb);
    for (int i = 0; i < na; i++) {
        double la = strtod(a[i].loss, NULL), lb = strtod(b[i].loss, NULL);
        double ga = strtod(a[i].grad_norm, NULL), gb = strtod(b[i].grad_norm, NULL);
        cr_expect(fabs(la - lb) <= 1e-5 * fabs(la) && fabs(ga - gb) <= 1e-4 * fabs(ga),
                  "step %lld: loss %s and %s, grad norm %s and %s", (long long)a[i].step, a[i].loss, b[i].loss,
                  a[i].grad_norm, b[i].grad_norm);
    }
    rc = ckpt_cli(&out, flags, sft, data, "--batch 2 --precision bf16", bf16);
    cr_expect(rc == 0 && !isnan(last_figure(bf16, "\"val_loss\":")), "%s", out);
    free(out);
    free(data);
    data = pairs_file("unlearnable.jsonl", 10, true);
    char *strict = datagen_path(dir, "strict");
    rc = ckpt_cli(&out, flags, sft, data, "--batch 2 --strict", strict);
    cr_expect(rc != 0 && strstr(out, "unlearnable.jsonl") && strstr(out, "line 11"), "%s", out);
    cr_expect(access(strict, F_OK) != 0, "a refused run left its folder");
    free(out), free(strict);
    free(sft), free(data), free(whole), free(halves), free(bf16);
}

Test(dpo_cli, what_cannot_be_trained_is_refused_saying_why, .init = setup, .fini = teardown, .timeout = 60) {
    char *data = pairs_file("dpo.jsonl", 4, false), *out = NULL, *run = datagen_path(dir, "refused");
    struct {
        const char *flags, *says;
    } cases[] = {
        {"dpo --data %s --out %s", "give --init-from RUN"},
        {"dpo --init-from %s --out %s", "tapegrad dpo needs --data"},
        {"sft --init-from RUN --data %s --beta 0.2 --out %s", "--beta is DPO's"},
        {"dpo --init-from RUN --data %s --beta 0 --out %s", "--beta must be a number above 0"},
        {"dpo --init-from RUN --data %s --beta x --out %s", "--beta must be a number above 0"},
        {"dpo --init-from RUN --data %s --keep-best val_bpb --out %s", "no bits per byte"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = ckpt_cli(&out, cases[i].flags, data, run);
        cr_expect(rc != 0 && strstr(out, cases[i].says), "tapegrad %s: rc %d\n%s", cases[i].flags, rc, out);
        cr_expect(access(run, F_OK) != 0, "tapegrad %s left a run folder", cases[i].flags);
        free(out);
    }
    free(data), free(run);
}

/* ---- what DPO teaches ---- */

static double number(const cJSON *json, const char *name) {
    const cJSON *item = cJSON_GetObjectItem(json, name);
    cr_assert(cJSON_IsNumber(item), "no number '%s'", name);
    return item->valuedouble;
}

/* The greedy replies of `run` to the facts' held-out questions (test.jsonl, through `tapegrad chat
 * --jsonl`): the share holding the right answer, and the share naming the source. */
static void held_out_replies(const char *run, const char *facts, double *right, double *sourced) {
    char cmd[8192], *replies = datagen_path(dir, "replies.jsonl");
    snprintf(cmd, sizeof cmd,
             "%s chat --run %s --jsonl --temperature 0 --threads 1 --tokens 40 <%s/test.jsonl >%s 2>&1", TAPEGRAD_BIN,
             run, facts, replies);
    cr_assert_eq(test_run(cmd), 0, "%s failed", cmd);
    cJSON *json = facts_script(dir, "score %s/test.jsonl %s", facts, replies);
    *right = number(json, "rate"), *sourced = number(json, "sourced");
    cJSON_Delete(json);
    free(replies);
}

/* Twenty invented people's three facts, fine-tuned into a tiny model (on a base pretrained on
 * generated prose) as in test_chat, a tenth of the answers ending by naming their source, so that
 * the model has the style (as a model has both replies of pairs drawn from it) but does not use it
 * unasked: its greedy replies do not. Then DPO at the default lr on pairs whose chosen reply names
 * the source and the rejected one does not (each fact in its eight training phrasings), its val
 * split the pairs of the held-out phrasing. Before the first step every val pair is a tie
 * (accuracy 0.5); after 30 steps the chosen side wins on at least 95% of them, at least 90% of the
 * greedy replies to held-out questions (alone and as a second turn) name the source, and at least
 * 80% still hold the right fact. Trained on, DPO on pairs this alike lowers both replies'
 * likelihoods and the facts go (docs/dpo.md; results.md has the sweep): the step count is the
 * measured window where every kernel path of this CPU passed with room (tests/README.md). */
Test(dpo_learning, pairs_preferring_a_style_teach_it_and_keep_the_facts, .init = setup, .fini = teardown,
     .timeout = 400) {
    char *facts = datagen_path(dir, "facts"), *base = datagen_path(dir, "base"), *tuned = datagen_path(dir, "tuned");
    char *dpo = datagen_path(dir, "dpo"), *out = NULL;
    cJSON *made = facts_script(dir, "generate --people 20 --seed 3 --sourced 0.1 --out %s", facts);
    double pairs = number(made, "dpo"), held_out = number(made, "dpo_held_out");
    cJSON_Delete(made);
    char *text = datagen_prose(11, 200000);
    datagen_write(dir, "prose.txt", text, strlen(text));
    free(text);
    char *prose = datagen_path(dir, "prose.txt");
    int rc = ckpt_cli(&out,
                      "train --preset tiny --threads 1 --tokenizer bpe --vocab 512 --special-tokens chatml --data %s "
                      "--steps 60 --batch 16 --eval-every 0 --sample-tokens 0 --out %s",
                      prose, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out,
                  "sft --init-from %s --data %s/train.jsonl --threads 1 --seq 96 --steps 600 --batch 16 "
                  "--eval-every 0 --out %s",
                  base, facts, tuned);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    /* the val split: the held-out phrasing's pairs, the last of the file (6 pairs x 10 batches = 60) */
    rc = ckpt_cli(&out,
                  "dpo --init-from %s --data %s/dpo.jsonl --val-fraction %.17g --threads 1 --batch 6 --steps 30 "
                  "--eval-every 10 --eval-batches %d --out %s",
                  tuned, facts, held_out / pairs, (int)held_out / 6, dpo);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "480 train and 60 val pairs"), "%s", out);
    free(out);
    char *path = datagen_path(dpo, "metrics.jsonl"), *metrics = ckpt_read_text(path);
    cr_expect(strstr(metrics, "{\"step\":0,\"val_loss\":0.693147") && strstr(metrics, "\"val_accuracy\":0.5,"),
              "before the first step every pair is a tie:\n%s", metrics);
    free(path), free(metrics);
    double accuracy = last_figure(dpo, "\"val_accuracy\":");
    double tuned_right, tuned_sourced, dpo_right, dpo_sourced;
    held_out_replies(tuned, facts, &tuned_right, &tuned_sourced);
    held_out_replies(dpo, facts, &dpo_right, &dpo_sourced);
    fprintf(stderr,
            "dpo: held-out pairs preferred %.1f%%; held-out replies naming the source %.1f%% (fine-tuned %.1f%%), "
            "facts right %.1f%% (fine-tuned %.1f%%)\n",
            100 * accuracy, 100 * dpo_sourced, 100 * tuned_sourced, 100 * dpo_right, 100 * tuned_right);
    cr_expect_geq(accuracy, 0.95, "held-out preference accuracy %.3f", accuracy);
    cr_expect_leq(tuned_sourced, 0.05, "the fine-tuned model named the source unasked: %.3f", tuned_sourced);
    cr_expect_geq(tuned_right, 0.9, "the fine-tuned model answered %.3f of the held-out facts", tuned_right);
    cr_expect_geq(dpo_sourced, 0.9, "replies naming the source after DPO: %.3f", dpo_sourced);
    cr_expect_geq(dpo_right, 0.8, "facts right after DPO %.3f, after fine-tuning %.3f", dpo_right, tuned_right);
    free(facts), free(base), free(tuned), free(dpo), free(prose);
}
