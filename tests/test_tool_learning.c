/* A model learns to use tools: the task of scripts/sft_tools.py (three tools, invented cities),
 * in MiniMind-3's template, from pretraining to answers checked end to end through
 * `tapegrad chat --jsonl`, the test playing the tools. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptutil.h"
#include "datagen.h"
#include "facts.h"
#include "testutil.h"

#include "data/chat_tools.h"
#include "data/jsonl.h"
#include "lib/cpu.h"
#include "lib/kernels.h"

CKPT_SCRATCH_FIXTURE

/* The script writes its conversations into the pretraining text as MiniMind-3's template renders
 * them: the first of train.jsonl's conversations, those with thinking among them, rendered by
 * tapegrad, are in pretrain.txt. */
static void renders_as_tapegrad(const char *task) {
    char path[4200];
    snprintf(path, sizeof path, "%s/pretrain.txt", task);
    char *pretrain = ckpt_read_text(path);
    snprintf(path, sizeof path, "%s/train.jsonl", task);
    char *train = ckpt_read_text(path), *line = train;
    int thinking = 0;
    TgToolConversation conv = {0};
    for (int number = 1; number <= 40; number++) {
        size_t len = strcspn(line, "\n");
        char why[320], *copy = strndup(line, len);
        TgJsonlLine l;
        tg_jsonl_line_of(copy, len, number, &l);
        cr_assert(tg_tool_conversation_parse(&l, &conv, why, sizeof why), "%s", why);
        TgToolRendering r;
        tg_tool_render(&conv, false, false, &r);
        cr_expect(strstr(pretrain, r.text), "train.jsonl line %d is not in pretrain.txt as tapegrad renders it:\n%s",
                  number, r.text);
        thinking += memmem(line, len, "reasoning_content", 17) != NULL;
        tg_tool_rendering_free(&r);
        free(copy);
        line += len + 1;
    }
    cr_expect_gt(thinking, 0, "the check wants conversations with thinking among the first 40");
    tg_tool_conversation_free(&conv);
    free(train), free(pretrain);
}

/* `tapegrad chat --jsonl` on `in`, greedy and without a repetition penalty (the tools' words are
 * all in the context), on one kernel path. */
static void chat(const char *isa, const char *run, const char *in, const char *out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "env TAPEGRAD_ISA=%s %s chat --run %s --jsonl --temperature 0 --repetition-penalty 1 --tokens 40 "
             "--threads 1 <%s >%s 2>&1",
             isa, TAPEGRAD_BIN, run, in, out);
    int rc = test_run(cmd);
    char *text = rc ? ckpt_read_text(out) : NULL;
    cr_assert_eq(rc, 0, "%s:\n%s", cmd, text);
}

/* Sixty questions on cities no training line names, each end to end: the model's call, the tool's
 * response to that call (the script plays the tools), the model's answer, which must quote it. */
static double answered(const char *isa, const char *task, const char *run) {
    char test[4200], cmd[8192], *replies = datagen_path(dir, "replies.jsonl"), *next = datagen_path(dir, "next.jsonl"),
                                *answers = datagen_path(dir, "answers.jsonl"), *log = datagen_path(dir, "respond.log");
    snprintf(test, sizeof test, "%s/test.jsonl", task);
    chat(isa, run, test, replies);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/scripts/sft_tools.py respond %s %s >%s 2>%s", TAPEGRAD_SOURCE_DIR,
             test, replies, next, log);
    cr_assert_eq(test_run(cmd), 0, "%s", cmd);
    chat(isa, run, next, answers);
    cJSON *score = tools_script(dir, "score %s %s %s", test, replies, answers);
    double rate = cJSON_GetObjectItem(score, "rate")->valuedouble,
           calls = cJSON_GetObjectItem(score, "calls")->valuedouble;
    int total = cJSON_GetObjectItem(score, "total")->valueint;
    fprintf(stderr, "%s: %.1f%% of %d held-out questions answered right, %.1f%% called right\n", isa, 100 * rate, total,
            100 * calls);
    cr_expect_eq(total, 60);
    cJSON_Delete(score);
    free(replies), free(next), free(answers), free(log);
    return rate;
}

/* A minimind-3-shaped model (twice as many query heads as key/value heads, QK-norm, MiniMind-3's
 * SwiGLU rule), scaled down to width 64, 4 layers and 2/1 heads of 32, pretrained on the task's
 * text and fine-tuned on its conversations, answers at least 90% of the held-out questions right:
 * the right tool of three, the city copied into its arguments, the tool's value in the answer.
 * Trained once, on the CPU's best kernel path; asked on every path the CPU has. */
Test(tool_learning, a_model_learns_to_call_the_right_tool_and_answer_from_its_response, .init = setup, .fini = teardown,
     .timeout = 900) {
    if (UNDER_ASAN) cr_skip_test("minutes of training take too long under the sanitizers");
    char *task = datagen_path(dir, "task"), *base = datagen_path(dir, "base"), *tuned = datagen_path(dir, "tuned"),
         *out = NULL;
    cJSON_Delete(tools_script(dir, "generate --out %s --seed 1", task));
    renders_as_tapegrad(task);
    int rc = ckpt_cli(&out,
                      "train --preset minimind-3 --dim 64 --layers 4 --heads 2 --kv-heads 1 --seq 320 --vocab 1024 "
                      "--tokenizer bpe --special-tokens chatml --data %s/pretrain.txt --steps 900 --batch 16 --lr 1e-2 "
                      "--eval-every 0 --sample-tokens 0 --threads 2 --out %s",
                      task, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc =
        ckpt_cli(&out,
                 "sft --chat-template minimind-3 --init-from %s --data %s/train.jsonl --seq 320 --steps 150 --batch 16 "
                 "--lr 1e-3 --eval-every 0 --sample-tokens 0 --threads 2 --out %s",
                 base, task, tuned);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "conversations: 3000 ") && !strstr(out, "cut to the window"), "%s", out);
    free(out);
    for (int i = TG_ISA_GENERIC; i <= TG_ISA_AMX; i++) {
        if (!tg_isa_supported((TgIsa)i)) continue;
        const char *isa = tg_isa_name((TgIsa)i);
        double rate = answered(isa, task, tuned);
        cr_expect_geq(rate, 0.9, "%s: %.1f%% of the held-out questions answered right", isa, 100 * rate);
    }
    free(task), free(base), free(tuned);
}

/* The content of the last turn of conversation i of `lines`. */
static const char *last_content(const cJSON *lines, int i) {
    const cJSON *turns = cJSON_GetObjectItem(cJSON_GetArrayItem(lines, i), "conversations");
    const cJSON *content = cJSON_GetObjectItem(cJSON_GetArrayItem(turns, cJSON_GetArraySize(turns) - 1), "content");
    cr_assert(cJSON_IsString(content), "conversation %d ends with no text", i + 1);
    return content->valuestring;
}

/* What `sft_tools.py respond` feeds back for `replies` (JSON lines), parsed. */
static cJSON *respond(const char *test, const char *replies_text, const char *name) {
    datagen_write(dir, name, replies_text, strlen(replies_text));
    char *replies = datagen_path(dir, name), *next = datagen_path(dir, "next.jsonl"), cmd[8192];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/scripts/sft_tools.py respond %s %s >%s", TAPEGRAD_SOURCE_DIR, test,
             replies, next);
    cr_assert_eq(test_run(cmd), 0, "%s", cmd);
    cJSON *fed = ckpt_read_json_lines(next);
    cr_assert_eq(cJSON_GetArraySize(fed), 3);
    free(replies), free(next);
    return fed;
}

/* The judge of the task can say no: of three replies (the expected call, the expected tool on
 * another city, no call), each answered with the value the expected call gets, only the first
 * counts; respond feeds back what each call gets, and says when none was made. */
Test(tool_learning, the_score_counts_the_expected_call_answered_with_its_tools_value, .init = setup, .fini = teardown,
     .timeout = 60) {
    char *task = datagen_path(dir, "task"), test[4200], lines[4096];
    cJSON_Delete(tools_script(dir, "generate --out %s --seed 3 --lines 10 --conversations 10 --held-out 3", task));
    snprintf(test, sizeof test, "%s/test.jsonl", task);
    cJSON *tests = ckpt_read_json_lines(test);
    cr_assert_eq(cJSON_GetArraySize(tests), 3);
    char *calls[3];
    int n = 0;
    for (int i = 0; i < 3; i++) {
        calls[i] = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetArrayItem(tests, i), "expected"));
        n += snprintf(lines + n, sizeof lines - (size_t)n, "{\"reply\": \"\", \"tool_calls\": [%s]}\n", calls[i]);
    }
    cJSON *truth = respond(test, lines, "right.jsonl");
    const char *name =
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(tests, 1), "expected"), "name")->valuestring;
    n = snprintf(lines, sizeof lines,
                 "{\"reply\": \"\", \"tool_calls\": [%s]}\n"
                 "{\"reply\": \"\", \"tool_calls\": [{\"name\": \"%s\", \"arguments\": {\"city\": \"Nowhere\"}}]}\n"
                 "{\"reply\": \"I do not know.\", \"tool_calls\": []}\n",
                 calls[0], name);
    cJSON *fed = respond(test, lines, "replies.jsonl");
    cr_expect(strstr(last_content(fed, 2), "no tool was called"), "%s", last_content(fed, 2));
    cr_expect(strstr(last_content(fed, 0), "{\"") && strcmp(last_content(fed, 0), last_content(truth, 0)) == 0);
    /* every answer quotes the value the expected call gets: {"temp": V}, {"hour": V} or {"people": V} */
    n = 0;
    for (int i = 0; i < 3; i++) {
        cJSON *response = cJSON_Parse(last_content(truth, i));
        cr_assert(response && cJSON_IsNumber(response->child), "%s", last_content(truth, i));
        n += snprintf(lines + n, sizeof lines - (size_t)n, "{\"reply\": \"It is %d.\"}\n", response->child->valueint);
        cJSON_Delete(response);
    }
    datagen_write(dir, "answers.jsonl", lines, (size_t)n);
    char *replies = datagen_path(dir, "replies.jsonl"), *answers = datagen_path(dir, "answers.jsonl");
    cJSON *score = tools_script(dir, "score %s %s %s", test, replies, answers);
    cr_expect_eq(cJSON_GetObjectItem(score, "correct")->valueint, 1, "%s", cJSON_PrintUnformatted(score));
    cr_expect_float_eq(cJSON_GetObjectItem(score, "calls")->valuedouble, 1.0 / 3, 1e-9);
    cJSON_Delete(score), cJSON_Delete(fed), cJSON_Delete(truth), cJSON_Delete(tests);
    for (int i = 0; i < 3; i++) free(calls[i]);
    free(replies), free(answers), free(task);
}
