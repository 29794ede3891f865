/* Probe prompts (--probe-prompts, --probe-tokens; train/probe_prompts.h): a line of probes.jsonl
 * per prompt at every evaluation, each the greedy continuation the model gives at that step
 * (recomputed here from the run's checkpoint: by tg_sample_text for text, by a chat session for a
 * fine-tuned run, which takes the prompt as a user turn), bitwise the same after a stop and a
 * resume, also from a checkpoint older than the lines; and the refusals of a bad file, each
 * naming the file and the line, before anything is written. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "model/chat.h"
#include "run/run.h"
#include "testutil.h"

CKPT_SCRATCH_FIXTURE

typedef struct {
    int64_t step;
    char prompt[128], text[256];
} ProbeLine;

/* The text of RUN/NAME (malloc'ed). */
static char *text_in(const char *run, const char *name) {
    char *path = datagen_path(run, name), *text = ckpt_read_text(path);
    free(path);
    return text;
}

/* The lines of RUN/probes.jsonl, each read by cJSON. */
static int probe_lines(const char *run, ProbeLine *out, int cap) {
    char *text = text_in(run, "probes.jsonl");
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *json = cJSON_Parse(line);
        cr_assert_not_null(json, "not JSON: %s", line);
        cJSON *step = cJSON_GetObjectItem(json, "step"), *prompt = cJSON_GetObjectItem(json, "prompt"),
              *cont = cJSON_GetObjectItem(json, "text");
        cr_assert(cJSON_IsNumber(step) && cJSON_IsString(prompt) && cJSON_IsString(cont), "%s", line);
        cr_assert_lt(n, cap);
        out[n].step = (int64_t)step->valuedouble;
        snprintf(out[n].prompt, sizeof out[n].prompt, "%s", prompt->valuestring);
        snprintf(out[n].text, sizeof out[n].text, "%s", cont->valuestring);
        n++;
        cJSON_Delete(json);
    }
    free(text);
    return n;
}

static const char *const PROMPTS[] = {"the old man", "she said", "a day"};

/* The prompts as a file: the last line ends in \r\n, as a file from Windows does. */
static char *prompt_file(void) {
    const char *text = "the old man\nshe said\na day\r\n";
    datagen_write(dir, "prompts.txt", text, strlen(text));
    return datagen_path(dir, "prompts.txt");
}

/* The lines of a run's last evaluation (one a prompt of PROMPTS) are the greedy continuations
 * tg_sample_text gives from its final checkpoint, and not all empty. */
static void expect_greedy_continuations(const char *run, const ProbeLine *last) {
    TgRun r;
    TestTape tt;
    assert_ok(tg_run_open_existing(run, &r));
    test_tape_init(&tt, 1);
    TgSampleOptions greedy = {.temperature = 0};
    bool any_text = false;
    for (int i = 0; i < 3; i++) {
        char *text;
        size_t len;
        assert_ok(tg_run_sample(&r, &tt.tape, PROMPTS[i], 8, &greedy, 1, &text, &len));
        cr_expect_str_eq(last[i].text, text, "prompt '%s'", PROMPTS[i]);
        any_text |= len > 0;
        free(text);
    }
    cr_expect(any_text, "every continuation is empty: the test shows little");
    test_tape_free(&tt);
    tg_run_close(&r);
}

#define PROBE_FLAGS CKPT_TEST_FLAGS " --steps 12 --eval-every 4 --probe-tokens 8"

Test(probes, a_line_per_prompt_at_every_evaluation_bitwise_across_resumes, .init = setup, .fini = teardown,
     .timeout = 60) {
    char *prompts = prompt_file(), *straight = datagen_path(dir, "straight"), *split = datagen_path(dir, "split"),
         *older = datagen_path(dir, "older"), *out = NULL;
    int rc = ckpt_cli(&out, "train " PROBE_FLAGS " --data %s --probe-prompts %s --ckpt-every 0 --out %s", corpus,
                      prompts, straight);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    ProbeLine lines[32];
    int n = probe_lines(straight, lines, 32);
    cr_assert_eq(n, 9, "3 evaluations of 3 prompts");
    for (int i = 0; i < n; i++) {
        cr_expect_eq(lines[i].step, 4 * (i / 3 + 1));
        cr_expect_str_eq(lines[i].prompt, PROMPTS[i % 3]);
        cr_expect_leq(strlen(lines[i].text), 8, "8 tokens of one byte at most: '%s'", lines[i].text);
    }
    /* the last evaluation's continuations are the greedy ones of the final weights */
    expect_greedy_continuations(straight, lines + 6);
    char *expect = text_in(straight, "probes.jsonl");
    /* stopped between two evaluations and resumed with --resume alone */
    rc = ckpt_cli(&out, "train " PROBE_FLAGS " --data %s --probe-prompts %s --ckpt-every 0 --stop-after 6 --out %s",
                  corpus, prompts, split);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train --resume %s", split);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *got = text_in(split, "probes.jsonl");
    cr_expect_str_eq(got, expect, "a resumed run's probes.jsonl");
    free(got);
    /* resumed from a checkpoint older than its last lines: those are dropped and written again */
    rc = ckpt_cli(&out, "train " PROBE_FLAGS " --data %s --probe-prompts %s --ckpt-every 4 --stop-after 10 --out %s",
                  corpus, prompts, older);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *older_probes = datagen_path(older, "probes.jsonl");
    cr_assert_eq(ckpt_count_lines(older_probes), 6);
    free(older_probes);
    rc = ckpt_cli(&out, "train --resume %s/ckpt-00000004.tgck", older);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "probes.jsonl logged after step 4"), "%s", out);
    free(out);
    got = text_in(older, "probes.jsonl");
    cr_expect_str_eq(got, expect, "probes.jsonl after a resume from step 4");
    free(got);
    /* the report shows them by step */
    char *html = datagen_path(dir, "report.html");
    rc = ckpt_cli(&out, "report %s --out %s", straight, html);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *page = ckpt_read_text(html);
    cr_expect(strstr(page, "Probe prompts") && strstr(page, "<caption>she said</caption>"),
              "the report has no probe tables");
    free(page), free(html);
    free(expect), free(prompts), free(straight), free(split), free(older);
}

Test(probes, a_fine_tuned_run_takes_each_prompt_as_a_user_turn, .init = setup, .fini = teardown, .timeout = 90) {
    char *base = datagen_path(dir, "base"), *run = datagen_path(dir, "sft"), *prompts = prompt_file(), *out = NULL;
    int rc = ckpt_cli(&out,
                      "train " CKPT_TEST_FLAGS " --data %s --tokenizer bpe --vocab 320 --special-tokens chatml "
                      "--steps 2 --eval-every 0 --out %s",
                      corpus, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char conversations[4096] = "";
    static const char *const words[] = {"tea", "rain", "paper", "bells"};
    for (int i = 0; i < 24; i++)
        snprintf(conversations + strlen(conversations), sizeof conversations - strlen(conversations),
                 "{\"conversations\": [{\"role\": \"user\", \"content\": \"Say %s.\"}, {\"role\": \"assistant\", "
                 "\"content\": \"%s, %s.\"}]}\n",
                 words[i % 4], words[i % 4], words[(i + 1) % 4]);
    datagen_write(dir, "conversations.jsonl", conversations, strlen(conversations));
    char *data = datagen_path(dir, "conversations.jsonl");
    rc = ckpt_cli(&out,
                  "sft " CKPT_TEST_FLAGS
                  " --init-from %s --data %s --seq 64 --steps 4 --eval-every 2 --probe-prompts %s "
                  "--probe-tokens 12 --out %s",
                  base, data, prompts, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    ProbeLine lines[32];
    int n = probe_lines(run, lines, 32);
    cr_assert_eq(n, 9, "the weights it starts from, then steps 2 and 4");
    cr_expect(lines[0].step == 0 && lines[3].step == 2 && lines[6].step == 4);
    /* a chat session's greedy reply to the prompt as a user turn, from the step's weights */
    const char *weights[] = {base, run};
    const int first[] = {0, 6};
    for (int w = 0; w < 2; w++) {
        TgRun r;
        TestTape tt;
        assert_ok(tg_run_open_existing(weights[w], &r));
        test_tape_init(&tt, 1);
        TgSampleOptions greedy = {.temperature = 0};
        for (int i = 0; i < 3; i++) {
            TgChatSession s;
            assert_ok(tg_chat_session_open(&s, &r.model, &r.tok, &tt.tape, &greedy, 1, 12, weights[w]));
            TgChatReply reply;
            assert_ok(tg_chat_session_reply(&s, PROMPTS[i], strlen(PROMPTS[i]), NULL, NULL, &reply));
            cr_expect_str_eq(lines[first[w] + i].text, reply.text, "%s, prompt '%s'", weights[w], PROMPTS[i]);
            free(reply.text);
            tg_chat_session_close(&s);
        }
        test_tape_free(&tt);
        tg_run_close(&r);
    }
    free(base), free(run), free(prompts), free(data);
}

/* `train --probe-prompts` with a file of `text` is refused with exit 1, saying `why`, and leaves
 * no run folder. */
static void expect_refused(const char *what, const char *text, size_t len, const char *why) {
    datagen_write(dir, "bad.txt", text, len);
    char *bad = datagen_path(dir, "bad.txt"), *run = datagen_path(dir, "refused"), *out = NULL;
    int rc = ckpt_cli(&out, "train " PROBE_FLAGS " --data %s --probe-prompts %s --out %s", corpus, bad, run);
    char expect[4300];
    snprintf(expect, sizeof expect, why, bad);
    cr_expect(rc == 1 && strstr(out, expect), "%s: exit %d, expected '%s' in:\n%s", what, rc, expect, out);
    cr_expect_neq(access(run, F_OK), 0, "%s: a refused run leaves its folder", what);
    free(out), free(bad), free(run);
}

Test(probes, a_bad_prompt_file_is_refused_naming_the_file_and_line, .init = setup, .fini = teardown, .timeout = 60) {
    expect_refused("an empty line", "one\n\ntwo\n", 9, "%s line 2 is empty");
    expect_refused("an empty line of \\r\\n", "one\r\n\r\n", 7, "%s line 2 is empty");
    char line[64];
    memset(line, 'a', 40);
    line[40] = '\n';
    expect_refused("a prompt longer than the context", line, 41,
                   "%s line 1: the prompt is 40 tokens, more than the model's context of 32");
    expect_refused("a byte the tokenizer does not know", "one\ntwo \x01\n", 9,
                   "%s line 2: the tokenizer cannot encode the prompt");
    expect_refused("a NUL byte", "one\ntw\0o\n", 9, "%s line 2 holds a NUL byte");
    expect_refused("no prompt", "", 0, "--probe-prompts %s holds no prompt");
    char many[2048] = "";
    for (int i = 0; i < 257; i++) strcat(many, "the\n");
    expect_refused("too many prompts", many, strlen(many), "%s line 257: more than 256 prompts");
    char *missing = datagen_path(dir, "missing.txt"), *run = datagen_path(dir, "refused"), *out = NULL;
    int rc = ckpt_cli(&out, "train " PROBE_FLAGS " --data %s --probe-prompts %s --out %s", corpus, missing, run);
    cr_expect(rc == 1 && strstr(out, "--probe-prompts ") && strstr(out, "missing.txt"), "%d: %s", rc, out);
    cr_expect_neq(access(run, F_OK), 0);
    free(out), free(missing), free(run);
}

/* probes.jsonl is opened before the first step, as metrics.jsonl is: a symlink planted there on a
 * resume stops the run before it trains a step (no metrics line after the resumed step), and the
 * symlink's target is never written. */
Test(probes, a_symlink_at_probes_jsonl_is_refused_before_a_step, .init = setup, .fini = teardown, .timeout = 60) {
    char *prompts = prompt_file(), *run = datagen_path(dir, "run"), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --steps 8 --eval-every 4 --probe-tokens 4 --data %s --probe-prompts %s "
                            "--stop-after 4 --out %s", corpus, prompts, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *probes = datagen_path(run, "probes.jsonl"), *metrics = datagen_path(run, "metrics.jsonl"),
         *victim = datagen_path(dir, "victim.txt");
    datagen_write(dir, "victim.txt", "mine\n", 5);
    cr_assert_eq(unlink(probes), 0);
    cr_assert_eq(symlink(victim, probes), 0);
    int lines = ckpt_count_lines(metrics);
    rc = ckpt_cli(&out, "train --resume %s", run);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "probes.jsonl is a symbolic link"), "%s", out);
    free(out);
    cr_expect_eq(ckpt_count_lines(metrics), lines, "the refused resume trained steps first");
    char *text = ckpt_read_text(victim);
    cr_expect_str_eq(text, "mine\n", "the symlink's target was written");
    free(text), free(probes), free(metrics), free(victim), free(prompts), free(run);
}
