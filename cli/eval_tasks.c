/* `tapegrad eval --task`: task files scored with a run's newest checkpoint (eval_tasks.h). */
#include "cli/eval_tasks.h"

#include <stdio.h>

#include "cli/cli.h"
#include "support/json_write.h"
#include "run/memory_plan.h"
#include "run/run.h"
#include "tapegrad/engine.h"
#include "train/tasks.h"

/* The model, and one batch of candidates through it without a tape, fit this machine. */
static TgStatus check_memory(const TgRun *run, int threads) {
    TgMemoryPlan plan = {0};
    tg_memory_plan_add(&plan, tg_model_memory_bytes(&run->model.cfg), NULL, NULL, "for the model");
    tg_memory_plan_add_activations(&plan, &run->model.cfg, TG_TASK_BATCH_ROWS, run->model.cfg.seq_len, threads, false,
                                   run->last_checkpoint, NULL);
    return tg_memory_plan_check(&plan);
}

/* One member "acc": x and "acc_ci": [lo, hi] per scoring. */
static void put_accuracies(TgJsonWriter *w, const TgTaskResult *r) {
    for (int k = 0; k < TG_TASK_SCORING_COUNT; k++) {
        char key[32];
        const char *name = tg_task_scoring_name((TgTaskScoring)k);
        tg_json_put_number(w, name, r->acc[k]);
        snprintf(key, sizeof key, "%s_ci", name);
        tg_json_open_array(w, key);
        tg_json_put_number(w, NULL, r->lo[k]);
        tg_json_put_number(w, NULL, r->hi[k]);
        tg_json_close(w);
    }
}

static void print_json(const TgRun *run, const TgTaskSuite *suite) {
    TgJsonWriter w = tg_json_writer(stdout, TG_JSON_COMPACT, false);
    tg_json_open_object(&w, NULL);
    tg_json_put_number(&w, "step", (double)run->state.step);
    tg_json_put_string(&w, "checkpoint", run->last_checkpoint);
    tg_json_put_string(&w, "template", tg_train_task_chat(run->task) ? "chatml" : "plain_text");
    tg_json_open_array(&w, "tasks");
    for (int i = 0; i < suite->n; i++) {
        const TgTaskFile *f = &suite->files[i];
        tg_json_open_object(&w, NULL);
        tg_json_put_string(&w, "file", f->path);
        tg_json_put_string(&w, "name", f->name);
        tg_json_put_string(&w, "format", tg_task_format_name(f->format));
        tg_json_put_number(&w, "count", (double)suite->latest[i].count);
        tg_json_put_number(&w, "chance", tg_task_chance(f));
        put_accuracies(&w, &suite->latest[i]);
        tg_json_close(&w);
    }
    tg_json_close(&w);
    tg_json_close(&w);
    fputc('\n', stdout);
}

static void print_lines(const TgTaskSuite *suite) {
    for (int i = 0; i < suite->n; i++) {
        char text[256];
        tg_task_result_format(&suite->files[i], &suite->latest[i], text, sizeof text);
        printf("%s: %s\n", suite->files[i].path, text);
    }
}

/* The run's model scored on every file. */
static TgStatus score(TgRun *run, const CliTaskEval *e, TgTaskSuite *suite) {
    TgEngine engine;
    tg_engine_open(&engine, e->threads, 0);
    TgStatus s =
        tg_arena_reserve(&engine.arena, (size_t)tg_model_activation_bytes(&run->model.cfg, TG_TASK_BATCH_ROWS,
                                                                          run->model.cfg.seq_len, e->threads, false));
    TgTaskEncoding enc = tg_task_encoding_of(run);
    if (s == TG_OK) s = tg_task_suite_open(suite, e->tasks->items, e->tasks->count, &enc);
    if (s == TG_OK) tg_task_suite_score(suite, &run->model, &engine.tape, NULL);
    tg_engine_close(&engine);
    return s;
}

int cli_eval_tasks(const CliTaskEval *e) {
    if (e->other_data)
        return cli_usage_error("eval", "--task scores task files; --data and --dataset choose the text of a loss: "
                                       "give one or the other");
    TgRun run;
    TgTaskSuite suite = {0};
    TgStatus s = tg_run_open_existing(e->run, &run);
    /* a fine-tuned run's choices go through its chat template (tg_task_encoding_of) */
    if (s == TG_OK) s = tg_run_task(run.dir, &run.task);
    if (s == TG_OK) s = check_memory(&run, e->threads);
    if (s == TG_OK) s = score(&run, e, &suite);
    if (s == TG_OK) {
        if (e->json)
            print_json(&run, &suite);
        else
            print_lines(&suite);
        s = cli_stdout_check();
    }
    tg_task_suite_free(&suite);
    tg_run_close(&run);
    return cli_exit("eval", s);
}
