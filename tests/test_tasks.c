/* Tasks (data/task_file.h, train/tasks.h): task files read into candidates, every refusal in one
 * line naming the file and the line, scores equal to the model's own log-probabilities (its
 * cross-entropy over the continuation), on 1 and 2 threads bitwise, the chat template of a
 * fine-tuned run, the Wilson interval against its formula; `eval --task` and its JSON,
 * `train --eval-task` into metrics.jsonl, bitwise across a resume, and into the report; and a
 * learning test: subject-verb agreement over distractor words, near chance at step 0 and learnt
 * after a short pretraining, on every kernel path of the CPU. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckptutil.h"
#include "data/chat_format.h"
#include "data/task_file.h"
#include "datagen.h"
#include "inspect/run_history.h"
#include "lib/cpu.h"
#include "lib/kernels.h"
#include "tapegrad/rng.h"
#include "tapegrad/model.h"
#include "testutil.h"
#include "train/tasks.h"

static char *dir;
static void setup(void) { dir = datagen_tempdir(); }
static void teardown(void) {
    datagen_remove_tree(dir);
    free(dir);
}
TestSuite(tasks, .init = setup, .fini = teardown, .timeout = 120);

/* dir/name holding text; the path (malloc'ed). */
static char *write_file(const char *name, const char *text) {
    datagen_write(dir, name, text, strlen(text));
    return datagen_path(dir, name);
}

static const char ALPHABET[] = "abcdefghijklmnopqrstuvwxyz .,'\n";

static TgTokenizer char_tokenizer(void) {
    TgTokenizer tok;
    assert_ok(tg_tokenizer_char_train(ALPHABET, strlen(ALPHABET), &tok));
    return tok;
}

/* The ids tok gives text. */
static size_t encode(const TgTokenizer *tok, const char *text, int32_t *out) {
    size_t n;
    assert_ok(tg_tokenizer_encode(tok, text, strlen(text), out, 256, &n));
    return n;
}

/* Candidate c's ids are `start` then the ids of each text in turn; its continuation the last text's. */
static void expect_candidate(const TgTaskFile *f, int64_t c, int32_t start, const char *context, const char *text) {
    const TgTaskCandidate *cand = &f->candidates[c];
    cr_assert_eq(f->ids[cand->offset], start, "candidate %lld starts with <eot>", (long long)c);
    cr_expect_eq(cand->bytes, (int64_t)strlen(text), "candidate %lld: the continuation's bytes", (long long)c);
    cr_expect_eq(cand->len - cand->scored_from, (int32_t)strlen(text), "candidate %lld: a char a token", (long long)c);
    cr_expect_eq(cand->scored_from, 1 + (int32_t)strlen(context));
}

Test(tasks, files_are_read_into_candidates) {
    TgTokenizer tok = char_tokenizer();
    TgTaskEncoding enc = {&tok, 33, TG_TASK_PLAIN_TEXT};
    char *pairs =
        write_file("blimp_agreement.jsonl", "{\"sentence_good\": \"the dogs run.\", \"sentence_bad\": \"the dogs "
                                            "runs.\", \"UID\": \"x\", \"pair_id\": 3}\n\n"
                                            "{\"sentence_bad\": \"a cat sit.\", \"sentence_good\": \"a cat sits.\"}\n");
    TgTaskFile f;
    assert_ok(tg_task_file_read(pairs, &enc, &f));
    cr_expect_str_eq(f.name, "blimp_agreement");
    cr_expect_eq(f.format, TG_TASK_MINIMAL_PAIRS);
    cr_assert_eq(f.n_items, 2);
    cr_expect_eq(f.items[1].line, 3, "a blank line is counted");
    cr_expect(f.items[0].count == 2 && f.items[0].label == 0 && f.items[1].first == 2);
    expect_candidate(&f, 0, tok.eot_id, "", "the dogs run.");
    expect_candidate(&f, 3, tok.eot_id, "", "a cat sit.");
    int32_t ids[256];
    size_t n = encode(&tok, "a cat sits.", ids);
    cr_expect_eq(memcmp(f.ids + f.candidates[2].offset + 1, ids, n * sizeof *ids), 0);
    tg_task_file_free(&f);
    char *choices =
        write_file("mc.jsonl.gz.jsonl", "{\"context\": \"the dog\", \"choices\": [\" runs.\", \" run.\", \" ran "
                                        "far.\"], \"label\": 2}\n");
    assert_ok(tg_task_file_read(choices, &enc, &f));
    cr_expect_eq(f.format, TG_TASK_MULTIPLE_CHOICE);
    cr_expect_str_eq(f.name, "mc.jsonl.gz");
    cr_expect(f.n_items == 1 && f.items[0].count == 3 && f.items[0].label == 2);
    expect_candidate(&f, 2, tok.eot_id, "the dog", " ran far.");
    n = encode(&tok, "the dog", ids);
    n += encode(&tok, " ran far.", ids + n);
    cr_expect_eq(memcmp(f.ids + f.candidates[2].offset + 1, ids, n * sizeof *ids), 0, "context, then the choice");
    tg_task_file_free(&f);
    tg_tokenizer_free(&tok);
    free(pairs), free(choices);
}

/* ---- refusals ---- */

static const struct {
    const char *text, *says;
} refusals[] = {
    {"{\"sentence_good\": \"a.\", \"sentence_bad\": \"b.\"}\n{\"sentence_good\": \"a.\"\n",
     "t.jsonl line 2 is not valid JSON"},
    {"[1, 2]\n", "t.jsonl line 1 is an array, not a JSON object"},
    {"{\"text\": \"a\"}\n", "t.jsonl line 1: members of neither format"},
    {"{\"sentence_good\": \"a\", \"sentence_bad\": \"b\", \"label\": 0}\n", "t.jsonl line 1: members of both formats"},
    {"{\"sentence_good\": \"a.\", \"sentence_bad\": \"b.\"}\n{\"context\": \"a\", \"choices\": [\"b\", \"c\"], "
     "\"label\": 0}\n",
     "t.jsonl line 2: a multiple-choice item in a file of minimal pairs (line 1)"},
    {"{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": 2}\n",
     "t.jsonl line 1: \"label\" 2 is not the index of one of its 2 choices"},
    {"{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": -1}\n",
     "t.jsonl line 1: \"label\" -1 is not the index"},
    {"{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": 0.5}\n",
     "t.jsonl line 1: \"label\" 0.5 is not the index"},
    {"{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": \"1\"}\n",
     "t.jsonl line 1: \"label\" is a string, not a number"},
    {"{\"context\": \"a\", \"choices\": [\"b\", \"c\"]}\n", "t.jsonl line 1: no \"label\""},
    {"{\"context\": \"a\", \"choices\": [\"b\"], \"label\": 0}\n", "t.jsonl line 1: 1 choices: an item has 2 to 64"},
    {"{\"context\": \"a\", \"choices\": \"b\", \"label\": 0}\n",
     "t.jsonl line 1: \"choices\" is a string, not an array"},
    {"{\"context\": \"a\", \"choices\": [\"b\", 3], \"label\": 0}\n",
     "t.jsonl line 1: \"choices\"[1] is a number, not a string"},
    {"{\"context\": \"a\", \"choices\": [\"b\", \"\"], \"label\": 0}\n", "t.jsonl line 1: \"choices\"[1] is empty"},
    {"{\"context\": \"a\", \"context\": \"b\", \"choices\": [\"b\", \"c\"], \"label\": 0}\n",
     "t.jsonl line 1: \"context\" is given twice"},
    {"{\"sentence_good\": \"\", \"sentence_bad\": \"b\"}\n", "t.jsonl line 1: \"sentence_good\" is empty"},
    {"{\"sentence_good\": \"a\"}\n", "t.jsonl line 1: no \"sentence_bad\""},
    {"{\"sentence_good\": \"a\", \"sentence_bad\": 7}\n", "t.jsonl line 1: \"sentence_bad\" is a number, not a string"},
    {"{\"sentence_good\": \"a\", \"sentence_bad\": \"B!\"}\n",
     "t.jsonl line 1: \"sentence_bad\" cannot be encoded with the run's tokenizer"},
    {"{\"context\": \"the dog the dog the dog the dog\", \"choices\": [\" runs\", \" run\"], \"label\": 0}\n",
     "t.jsonl line 1: \"choices\"[0] takes 36 tokens with what comes before it, more than the model's context of 32"},
    {"\n\n", "t.jsonl holds no task item"},
};

Test(tasks, every_refusal_names_the_file_and_the_line) {
    TgTokenizer tok = char_tokenizer();
    TgTaskEncoding enc = {&tok, 33, TG_TASK_PLAIN_TEXT};
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        char *path = write_file("t.jsonl", refusals[i].text);
        TgTaskFile f;
        assert_fails(tg_task_file_read(path, &enc, &f), TG_ERR_FORMAT, refusals[i].says);
        cr_expect(!strchr(tg_error_message(), '\n'), "one line: %s", tg_error_message());
        cr_expect_eq(f.n_items, 0, "a refused file is left empty");
        free(path);
    }
    char *path = write_file("my task.jsonl", "{\"sentence_good\": \"a\", \"sentence_bad\": \"b\"}\n");
    TgTaskFile f;
    assert_fails(tg_task_file_read(path, &enc, &f), TG_ERR_ARG, "my task.jsonl: a task is named by its file's name");
    assert_fails(tg_task_file_read("/nonexistent/t.jsonl", &enc, &f), TG_ERR_IO, "/nonexistent/t.jsonl");
    free(path);
    tg_tokenizer_free(&tok);
}

/* ---- scores ---- */

/* A tiny model for tok, its weights from `seed`. */
static void build_model(TgModel *m, const TgTokenizer *tok, uint64_t seed) {
    TgModelConfig c = tg_model_preset_config(TG_PRESET_TINY);
    c.vocab = tok->vocab_size;
    tg_model_build(m, &c);
    tg_model_init_weights(m, seed);
    /* larger weights than the init's: logits far from uniform, so every score differs */
    for (size_t i = 0; i < m->params.total; i++) m->params.data[i] *= 4.0f;
}

/* The log-likelihood of candidate c straight from the model: its cross-entropy over the
 * continuation's targets alone, times their count. */
static double direct_score(TgModel *m, TgTape *tape, const TgTaskFile *f, int64_t c) {
    const TgTaskCandidate *cand = &f->candidates[c];
    int64_t T = cand->len - 1;
    int32_t *targets = malloc((size_t)T * sizeof *targets);
    for (int64_t t = 0; t < T; t++)
        targets[t] = t + 1 >= cand->scored_from ? f->ids[cand->offset + t + 1] : TG_IGNORE_INDEX;
    bool old = tg_tape_set_grad_enabled(tape, false);
    TgTensor *loss = tg_model_loss(
        m, tape, &(TgBatch){.tokens = f->ids + cand->offset, .targets = targets, .batch = 1, .seq = T}, NULL);
    double ll = -(double)loss->data[0] * (double)(cand->len - cand->scored_from);
    tg_tape_reset(tape);
    tg_tape_set_grad_enabled(tape, old);
    free(targets);
    return ll;
}

/* Every candidate's score is the direct one; the counts of right items follow from them; the
 * scores are the same bits on 2 threads. */
static void expect_scores_of_the_model(TgModel *m, const TgTaskFile *f) {
    TestTape one, two;
    test_tape_init(&one, 1), test_tape_init(&two, 2);
    double *scores = malloc((size_t)f->n_candidates * sizeof *scores),
           *again = malloc((size_t)f->n_candidates * sizeof *again);
    tg_task_score_candidates(m, &one.tape, f, scores, NULL);
    tg_task_score_candidates(m, &two.tape, f, again, NULL);
    cr_expect_eq(memcmp(scores, again, (size_t)f->n_candidates * sizeof *scores), 0, "2 threads change no bit");
    int64_t right[2] = {0, 0};
    for (int64_t i = 0; i < f->n_items; i++) {
        const TgTaskItem *it = &f->items[i];
        bool ok[2] = {true, true};
        for (int32_t k = 0; k < it->count; k++) {
            double d = direct_score(m, &one.tape, f, it->first + k), s = scores[it->first + k];
            cr_expect(fabs(s - d) <= 1e-5 * (1.0 + fabs(d)), "%s item %lld choice %d: %.9g, directly %.9g", f->name,
                      (long long)i, k, s, d);
            double bytes = (double)f->candidates[it->first + k].bytes,
                   label_bytes = (double)f->candidates[it->first + it->label].bytes;
            double label = scores[it->first + it->label];
            if (k != it->label) ok[0] &= label > s, ok[1] &= label / label_bytes > s / bytes;
        }
        right[0] += ok[0], right[1] += ok[1];
    }
    TgTaskResult r;
    tg_task_result_of(f, scores, &r);
    cr_expect(r.count == f->n_items && r.correct[0] == right[0] && r.correct[1] == right[1],
              "%s: %lld and %lld right, expected %lld and %lld", f->name, (long long)r.correct[0],
              (long long)r.correct[1], (long long)right[0], (long long)right[1]);
    cr_expect(right[0] > 0 && right[0] < f->n_items, "%s: a mix of right and wrong items (%lld of %lld)", f->name,
              (long long)right[0], (long long)f->n_items);
    free(scores), free(again);
    test_tape_free(&one), test_tape_free(&two);
}

/* n lines of pairs or choices built from a few words */
static char *generated_tasks(bool pairs, int n) {
    static const char *const nouns[] = {"dog", "cat", "bird", "fox"}, *const verbs[] = {"run", "sit", "eat", "swim"};
    size_t cap = (size_t)n * 160 + 1, used = 0;
    char *text = malloc(cap);
    for (int i = 0; i < n; i++) {
        const char *noun = nouns[i % 4], *verb = verbs[(i / 4) % 4], *plural = i % 2 ? "s" : "";
        if (pairs)
            used += (size_t)snprintf(text + used, cap - used,
                                     "{\"sentence_good\": \"the %s%s %s%s.\", \"sentence_bad\": \"the %s%s %s%s.\"}\n",
                                     noun, plural, verb, i % 2 ? "" : "s", noun, plural, verb, i % 2 ? "s" : "");
        else
            used += (size_t)snprintf(text + used, cap - used,
                                     "{\"context\": \"the %s%s\", \"choices\": [\" %s.\", \" %ss.\", \" %s "
                                     "far.\"], \"label\": %d}\n",
                                     noun, plural, verb, verb, verb, i % 3);
    }
    return text;
}

Test(tasks, scores_are_the_models_log_probabilities_on_both_formats) {
    TgTokenizer tok = char_tokenizer();
    TgModel m;
    build_model(&m, &tok, 5);
    TgTaskEncoding enc = {&tok, m.cfg.seq_len + 1, TG_TASK_PLAIN_TEXT};
    for (int format = 0; format < 2; format++) {
        char *text = generated_tasks(format == 0, 24),
             *path = write_file(format == 0 ? "pairs.jsonl" : "choices.jsonl", text);
        TgTaskFile f;
        assert_ok(tg_task_file_read(path, &enc, &f));
        expect_scores_of_the_model(&m, &f);
        tg_task_file_free(&f);
        free(text), free(path);
    }
    tg_model_free(&m);
    tg_tokenizer_free(&tok);
}

/* A fine-tuned run's choices are replies: the context a user turn, each choice the assistant's,
 * scored over its ids and its <|im_end|> as fine-tuning trains them; pairs stay plain text. */
Test(tasks, a_chat_runs_choices_are_scored_as_its_replies) {
    char *prose = datagen_prose(3, 30000);
    TgTokenizer tok;
    assert_ok(tg_tokenizer_bpe_train_specials(prose, strlen(prose), 400, "chatml", &tok));
    free(prose);
    TgChatTokens ct;
    assert_ok(tg_chat_tokens_find(&tok, "test", &ct));
    TgModel m;
    build_model(&m, &tok, 9);
    TgTaskEncoding enc = {&tok, m.cfg.seq_len + 1, TG_TASK_CHATML};
    char *text = generated_tasks(false, 16), *path = write_file("chat.jsonl", text);
    TgTaskFile f;
    assert_ok(tg_task_file_read(path, &enc, &f));
    TgChatIds want = {0};
    assert_ok(tg_chat_encode_turn(&tok, &ct, TG_CHAT_USER, "the dog", 7, &want));
    assert_ok(tg_chat_encode_turn(&tok, &ct, TG_CHAT_ASSISTANT, " run.", 5, &want));
    const TgTaskCandidate *c = &f.candidates[0];
    cr_assert_eq((size_t)c->len, want.n - 1, "the ids up to the reply's <|im_end|>");
    cr_expect_eq(memcmp(f.ids + c->offset, want.ids, (size_t)c->len * sizeof *want.ids), 0);
    cr_expect_eq(f.ids[c->offset + c->len - 1], ct.im_end);
    for (int32_t i = 0; i < c->len; i++) cr_expect_eq(want.trained[i], i >= c->scored_from, "id %d", i);
    cr_expect_eq(c->bytes, 5, "normalised by the reply's text, not its marker");
    expect_scores_of_the_model(&m, &f);
    tg_chat_ids_free(&want);
    tg_task_file_free(&f);
    free(text), free(path);
    text = generated_tasks(true, 4), path = write_file("pairs.jsonl", text);
    assert_ok(tg_task_file_read(path, &enc, &f));
    cr_expect_eq(f.ids[f.candidates[0].offset], tok.eot_id, "a pair is a sentence after <eot> in a chat run too");
    tg_task_file_free(&f);
    free(text), free(path);
    tg_model_free(&m);
    tg_tokenizer_free(&tok);
}

/* ---- the interval, the metrics ---- */

Test(tasks, the_interval_is_wilsons) {
    double lo, hi;
    tg_wilson_interval(8, 10, TG_TASK_Z95, &lo, &hi);
    cr_expect(fabs(lo - 0.4901625) < 1e-6 && fabs(hi - 0.9433178) < 1e-6, "8 of 10: [%.7f, %.7f]", lo, hi);
    static const int64_t cases[][2] = {{0, 1}, {1, 3}, {50, 100}, {812, 1000}, {999, 1000}, {1000, 1000}, {0, 1000}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double k = (double)cases[i][0], n = (double)cases[i][1], z = 1.959963984540054, p = k / n;
        double centre = (p + z * z / (2 * n)) / (1 + z * z / n);
        double half = z / (1 + z * z / n) * sqrt(p * (1 - p) / n + z * z / (4 * n * n));
        tg_wilson_interval(cases[i][0], cases[i][1], TG_TASK_Z95, &lo, &hi);
        cr_expect(fabs(lo - fmax(0, fmin(p, centre - half))) < 1e-15 &&
                      fabs(hi - fmin(1, fmax(p, centre + half))) < 1e-15,
                  "%g of %g: [%.17g, %.17g]", k, n, lo, hi);
        cr_expect(lo >= 0 && lo <= p && p <= hi && hi <= 1);
    }
    tg_wilson_interval(0, 0, TG_TASK_Z95, &lo, &hi);
    cr_expect(isnan(lo) && isnan(hi));
}

Test(tasks, a_tasks_accuracy_is_found_by_its_name) {
    const char *paths[] = {"a/blimp.jsonl", "b/arc-easy.jsonl.gz"};
    assert_ok(tg_task_check_name("blimp", paths, 2));
    assert_ok(tg_task_check_name("arc-easy", paths, 2));
    assert_fails(tg_task_check_name("hellaswag", paths, 2), TG_ERR_ARG,
                 "no `eval_tasks` file is the task 'hellaswag'; the tasks are blimp, arc-easy");
    assert_fails(tg_task_check_name("blimp", paths, 0), TG_ERR_ARG, "(give the file with `eval_tasks`)");
    TgTokenizer tok = char_tokenizer();
    TgModel m;
    build_model(&m, &tok, 5);
    char *text = generated_tasks(true, 8), *path = write_file("pairs.jsonl", text);
    TgTaskEncoding enc = {&tok, m.cfg.seq_len + 1, TG_TASK_PLAIN_TEXT};
    TgTaskSuite suite;
    const char *files[] = {path};
    assert_ok(tg_task_suite_open(&suite, files, 1, &enc));
    double v = 0;
    assert_ok(tg_task_suite_accuracy(&suite, "pairs", TG_TASK_SUMMED, &v));
    cr_expect(isnan(v), "no value before the first scoring");
    TestTape tt;
    test_tape_init(&tt, 1);
    tg_task_suite_score(&suite, &m, &tt.tape, NULL);
    assert_ok(tg_task_suite_accuracy(&suite, "pairs", TG_TASK_NORMALISED, &v));
    cr_expect_eq(v, suite.latest[0].acc[TG_TASK_NORMALISED]);
    cr_expect_str_eq(suite.metrics[1].name, "task/pairs/acc_norm");
    assert_fails(tg_task_suite_accuracy(&suite, "other", TG_TASK_SUMMED, &v), TG_ERR_ARG, "the tasks are pairs");
    tg_task_suite_free(&suite);
    const char *twice[] = {path, path};
    assert_fails(tg_task_suite_open(&suite, twice, 2, &enc), TG_ERR_ARG, "are both the task 'pairs'");
    cr_expect_eq(suite.n, 0);
    test_tape_free(&tt);
    tg_model_free(&m);
    tg_tokenizer_free(&tok);
    free(text), free(path);
}

/* ---- a synthetic grammar: subject-verb agreement over distractor words ---- */

static const char *const NOUNS[] = {"dog", "cat", "bird", "cow", "fox", "pig"};
static const char *const VERBS[] = {"run", "sleep", "eat", "walk", "jump", "swim"};
static const char *const FILLERS[] = {"now", "then", "often", "still", "soon", "too"}; /* carry no number */

/* "the NOUN[s] FILLER... VERB[s]." with `fillers` distractor words between subject and verb; the
 * verb agrees with the subject when `agree` (a plural subject takes the bare verb). */
static void agreement_sentence(TgRng *rng, bool plural, int fillers, bool agree, char *out, size_t cap) {
    const char *noun = NOUNS[tg_rng_below(rng, 6)], *verb = VERBS[tg_rng_below(rng, 6)];
    int used = snprintf(out, cap, "the %s%s", noun, plural ? "s" : "");
    for (int i = 0; i < fillers; i++)
        used += snprintf(out + used, cap - (size_t)used, " %s", FILLERS[tg_rng_below(rng, 6)]);
    snprintf(out + used, cap - (size_t)used, " %s%s.", verb, plural == agree ? "" : "s");
}

/* dir/corpus.jsonl: `n` grammatical sentences, a document each; dir/NAME: `pairs` minimal pairs,
 * half of them with a plural subject, one or two distractors each. Their paths in corpus, task. */
static void write_grammar(int n, int pairs, const char *name, char **corpus, char **task) {
    TgRng rng;
    tg_rng_seed(&rng, 21);
    char *text = malloc((size_t)n * 64 + (size_t)pairs * 128 + 1), good[64], bad[64];
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        agreement_sentence(&rng, tg_rng_below(&rng, 2), (int)tg_rng_below(&rng, 3), true, good, sizeof good);
        used += (size_t)sprintf(text + used, "{\"text\": \"%s\"}\n", good);
    }
    *corpus = write_file("corpus.jsonl", text);
    used = 0;
    for (int i = 0; i < pairs; i++) {
        TgRng copy = rng;
        agreement_sentence(&rng, i % 2, 1 + (i / 2) % 2, true, good, sizeof good);
        agreement_sentence(&copy, i % 2, 1 + (i / 2) % 2, false, bad, sizeof bad);
        used += (size_t)sprintf(text + used, "{\"sentence_good\": \"%s\", \"sentence_bad\": \"%s\"}\n", good, bad);
    }
    *task = write_file(name, text);
    free(text);
}

/* ---- the program ---- */

#define TASK_TRAIN_FLAGS "--preset tiny --batch 4 --threads 1 --eval-batches 2 --sample-tokens 0"

/* `tapegrad ARGS` exits with `code`; its output (malloc'ed). */
static char *expect_cli(int code, const char *args) {
    char *out = NULL;
    int rc = ckpt_cli(&out, "%s", args);
    cr_assert_eq(rc, code, "`tapegrad %s` exited %d, expected %d:\n%s", args, rc, code, out);
    return out;
}

/* The grammar's corpus.jsonl and two task files, pairs.jsonl and choices.jsonl. */
typedef struct {
    char *corpus, *pairs, *choices;
} TaskFiles;

static TaskFiles task_files(void) {
    TaskFiles f;
    write_grammar(400, 20, "pairs.jsonl", &f.corpus, &f.pairs);
    char *text = generated_tasks(false, 12);
    f.choices = write_file("choices.jsonl", text);
    free(text);
    return f;
}

static void task_files_free(TaskFiles *f) { free(f->corpus), free(f->pairs), free(f->choices); }

/* dir/NAME: a run of 8 steps on the corpus, evaluated every 2, with `extra` flags. */
static char *small_run(const TaskFiles *f, const char *name, const char *extra) {
    char args[20000], *run = datagen_path(dir, name);
    snprintf(args, sizeof args, "train " TASK_TRAIN_FLAGS " --data '%s' --steps 8 --eval-every 2 --out '%s' %s",
             f->corpus, run, extra);
    free(expect_cli(0, args));
    return run;
}

/* The member `key` of a task object of eval's JSON. */
static double json_number(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    cr_assert(cJSON_IsNumber(v), "no number \"%s\"", key);
    return v->valuedouble;
}

Test(tasks, eval_scores_task_files_a_line_each_or_as_json) {
    TaskFiles files = task_files();
    char *run = small_run(&files, "run", ""), *pairs = files.pairs, *choices = files.choices, args[8192];
    snprintf(args, sizeof args, "eval --run '%s' --task '%s' --task '%s'", run, pairs, choices);
    char *out = expect_cli(0, args);
    cr_expect(strstr(out, "pairs.jsonl: minimal_pairs, 20 items: acc ") &&
                  strstr(out, "choices.jsonl: multiple_choice, 12 items"),
              "%s", out);
    int lines = 0;
    for (char *p = out; (p = strchr(p, '\n')); p++) lines++;
    cr_expect_eq(lines, 2, "a line per file:\n%s", out);
    free(out);
    snprintf(args, sizeof args, "eval --run '%s' --task '%s' --task '%s' --json --threads 2", run, pairs, choices);
    out = expect_cli(0, args);
    cJSON *json = cJSON_Parse(out);
    cr_assert(json, "not JSON: %s", out);
    cr_expect_eq(json_number(json, "step"), 8);
    cr_expect_str_eq(cJSON_GetObjectItem(json, "template")->valuestring, "plain_text");
    const cJSON *tasks = cJSON_GetObjectItem(json, "tasks"), *first = cJSON_GetArrayItem(tasks, 0);
    cr_assert_eq(cJSON_GetArraySize(tasks), 2);
    cr_expect_str_eq(cJSON_GetObjectItem(first, "name")->valuestring, "pairs");
    cr_expect_str_eq(cJSON_GetObjectItem(first, "format")->valuestring, "minimal_pairs");
    cr_expect_eq(json_number(first, "count"), 20);
    double acc = json_number(first, "acc");
    const cJSON *ci = cJSON_GetObjectItem(first, "acc_ci");
    double lo, hi;
    tg_wilson_interval((int64_t)llround(acc * 20), 20, TG_TASK_Z95, &lo, &hi);
    cr_expect(cJSON_GetArraySize(ci) == 2 && cJSON_GetArrayItem(ci, 0)->valuedouble == lo &&
                  cJSON_GetArrayItem(ci, 1)->valuedouble == hi,
              "the interval of %g of 20", acc);
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetArrayItem(tasks, 1), "acc_norm")));
    cJSON_Delete(json);
    free(out);
    snprintf(args, sizeof args, "eval --run '%s' --task '%s' --data '%s'", run, pairs, pairs);
    out = expect_cli(2, args);
    cr_expect(strstr(out, "--task scores task files"), "%s", out);
    free(out), free(run);
    task_files_free(&files);
}

/* Each refused file: one line naming the file and the line, exit 1; eval and train alike, and a
 * refused train leaves no run folder. */
Test(tasks, the_program_refuses_a_bad_task_file_in_one_line) {
    TaskFiles files = task_files();
    char *run = small_run(&files, "run", ""), *pairs = files.pairs, args[8192];
    static const size_t picked[] = {1, 4, 5, 10, 13, 18, 19};
    for (size_t i = 0; i < sizeof picked / sizeof picked[0]; i++) {
        char *bad = write_file("t.jsonl", refusals[picked[i]].text);
        snprintf(args, sizeof args, "eval --run '%s' --task '%s' --task '%s'", run, pairs, bad);
        char *out = expect_cli(1, args);
        cr_expect(strstr(out, refusals[picked[i]].says) && strstr(out, "tapegrad eval: ") == out, "%s", out);
        cr_expect_eq(strchr(out, '\n'), out + strlen(out) - 1, "one line: %s", out);
        free(out);
        free(bad);
    }
    char *bad = write_file("t.jsonl", refusals[5].text), *other = datagen_path(dir, "other");
    snprintf(args, sizeof args, "train " TASK_TRAIN_FLAGS " --data '%s' --steps 2 --eval-task '%s' --out '%s'",
             files.corpus, bad, other);
    char *out = expect_cli(1, args);
    cr_expect(strstr(out, refusals[5].says), "%s", out);
    struct stat st;
    cr_expect_neq(stat(other, &st), 0, "a refused run leaves no folder");
    free(out);
    snprintf(args, sizeof args,
             "train " TASK_TRAIN_FLAGS " --data '%s' --eval-task '%s' --eval-task '%s/pairs.jsonl.gz'", files.corpus,
             pairs, dir);
    out = expect_cli(2, args);
    cr_expect(strstr(out, "are both the task 'pairs'"), "%s", out);
    free(out), free(bad), free(other), free(run);
    task_files_free(&files);
}

/* Whether dir holds an entry whose name contains `part`. */
static bool dir_has(const char *folder, const char *part) {
    DIR *d = opendir(folder);
    bool found = false;
    for (struct dirent *e; d && (e = readdir(d));) found |= strstr(e->d_name, part) != NULL;
    if (d) closedir(d);
    return found;
}

/* A valid task file too large for the memory left (about 20M token ids under `ulimit -v`) is said
 * so, "out of memory reading FILE", exit 1, and the refused run leaves no folder, not
 * even its temporary one: no abort. The limit is the least (in 32 MiB steps) under which the same
 * run trains without the file, plus 32 MiB: less than the file's ids take. */
Test(tasks, a_task_file_larger_than_the_memory_left_is_said_so, .timeout = 300) {
    if (UNDER_ASAN) {
        fprintf(stderr, "address-space limits are not tried under AddressSanitizer (it reserves terabytes)\n");
        return;
    }
    TaskFiles files = task_files();
    char *pairs = ckpt_read_text(files.pairs), *big = datagen_path(dir, "big.jsonl"), args[8192];
    size_t first = strcspn(pairs, "\n") + 1;
    FILE *f = fopen(big, "w");
    cr_assert_not_null(f);
    for (size_t bytes = 0; bytes < ((size_t)24 << 20); bytes += first) fwrite(pairs, 1, first, f);
    cr_assert_eq(fclose(f), 0);
    long kb = 64L << 10;
    for (; kb < (2048L << 10); kb += 32L << 10) {
        snprintf(args, sizeof args, "ulimit -v %ld && OPENBLAS_NUM_THREADS=1 timeout 120", kb);
        char *out = NULL;
        int rc = ckpt_cli_launched(&out, args, "train " TASK_TRAIN_FLAGS " --data '%s' --steps 1 --eval-every 1 "
                                   "--eval-task '%s' --out '%s/base-%ld'", files.corpus, files.pairs, dir, kb);
        free(out);
        if (rc == 0) break;
    }
    cr_assert_lt(kb, 2048L << 10, "the run never trained under ulimit -v");
    snprintf(args, sizeof args, "ulimit -v %ld && OPENBLAS_NUM_THREADS=1 timeout 120", kb + (32L << 10));
    char *out = NULL, *refused = datagen_path(dir, "refused");
    int rc = ckpt_cli_launched(&out, args, "train " TASK_TRAIN_FLAGS " --data '%s' --steps 1 --eval-every 1 "
                               "--eval-task '%s' --out '%s'", files.corpus, big, refused);
    char want[4300];
    snprintf(want, sizeof want, "out of memory reading %s (", big);
    cr_expect(rc == 1 && strstr(out, want), "ulimit -v %ld: exit %d: %s", kb + (32L << 10), rc, out);
    cr_expect_null(strstr(out, "internal error"), "%s", out);
    free(out);
    cr_expect_not(dir_has(dir, "refused"), "the refused run left a folder (or its temporary one)");
    free(pairs), free(big), free(refused);
    task_files_free(&files);
}

/* The task members of every line of RUN/metrics.jsonl with one, as written: "STEP:{...task...}" lines. */
static char *task_lines(const char *run) {
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    char *text = ckpt_read_text(path), *out = calloc(strlen(text) + 1, 1);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        const char *task = strstr(line, ",\"task/");
        if (!task) continue;
        sprintf(out + strlen(out), "%lld:%s\n", atoll(strstr(line, "\"step\":") + 7), task);
    }
    free(text);
    return out;
}

/* SIGINT while a run scores a large task file stops the scoring between batches, not after the
 * whole file: the note says so, no metrics line holds a task figure, and the run saves and ends as
 * after any signal. The signal lands in step 2's evaluation or before it; then the evaluation a
 * stopped run makes on its way out gives its scoring up the same way. */
Test(tasks, a_signal_stops_the_task_scoring_between_batches, .timeout = 120) {
    TaskFiles files = task_files();
    char *pairs = ckpt_read_text(files.pairs), *big = datagen_path(dir, "big.jsonl"), *run = datagen_path(dir, "run");
    char *log = datagen_path(dir, "train.log"), *metrics = datagen_path(run, "metrics.jsonl");
    size_t first = strcspn(pairs, "\n") + 1;
    FILE *f = fopen(big, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 40000; i++) fwrite(pairs, 1, first, f); /* seconds of scoring for the tiny model */
    cr_assert_eq(fclose(f), 0);
    char *args[] = {"tapegrad", "train", "--preset", "tiny", "--batch", "4", "--threads", "1", "--eval-batches", "2",
                    "--sample-tokens", "0", "--data", files.corpus, "--steps", "8", "--eval-every", "2", "--log-every",
                    "1", "--eval-task", big, "--out", run, NULL};
    pid_t pid = ckpt_spawn_cli(log, args);
    /* once step 1 is logged (bounded: 60 s), step 2's evaluation is next */
    for (int i = 0; i < 12000 && ckpt_count_lines(metrics) < 1; i++) usleep(5000);
    cr_assert_geq(ckpt_count_lines(metrics), 1, "the run logged no step in 60 s");
    cr_assert_eq(kill(pid, SIGINT), 0);
    int status = ckpt_wait_at_most(pid, 100);
    char *out = ckpt_read_text(log);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d: %s", status, out);
    cr_expect(strstr(out, "the task scoring of step ") && strstr(out, " stopped at the signal"), "%s", out);
    free(out);
    char *lines = task_lines(run);
    cr_expect_str_empty(lines, "task figures of a scoring that stopped were logged:\n%s", lines);
    free(lines), free(pairs), free(big), free(run), free(log), free(metrics);
    task_files_free(&files);
}


Test(tasks, eval_task_lines_are_logged_bitwise_across_a_resume_and_reported) {
    TaskFiles files = task_files();
    char extra[8192], args[8192];
    snprintf(extra, sizeof extra, "--eval-task '%s' --eval-task '%s'", files.pairs, files.choices);
    char *straight = small_run(&files, "straight", extra);
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " --stop-after 4");
    char *resumed = small_run(&files, "resumed", extra);
    snprintf(args, sizeof args, "train --resume '%s'", resumed);
    free(expect_cli(0, args));
    char *a = task_lines(straight), *b = task_lines(resumed);
    cr_expect_str_eq(a, b, "the task figures of the run that stopped and resumed");
    cr_expect(strstr(a, "2:,\"task/pairs/acc\":") && strstr(a, "\n8:,\"task/pairs/acc\":") &&
                  strstr(a, "\"task/choices/acc_norm\":"),
              "%s", a);
    /* the report's history holds them, and eval gives the same accuracies */
    TgRunHistory h;
    assert_ok(tg_run_history_load(straight, &h));
    cr_assert_eq(h.n_tasks, 2);
    cr_expect_str_eq(h.task_names[0], "pairs");
    cr_expect_eq(h.n_task_points, 8, "two tasks at steps 2, 4, 6 and 8");
    const TgTaskPoint *last = &h.task_points[h.n_task_points - 2];
    cr_expect(last->items > 0 && last->chance == 0.5, "pairs: %lld items, chance %g", (long long)last->items, last->chance);
    snprintf(args, sizeof args, "eval --run '%s' --task '%s' --json", straight, files.pairs);
    char *out = expect_cli(0, args);
    cJSON *json = cJSON_Parse(out);
    const cJSON *task = cJSON_GetArrayItem(cJSON_GetObjectItem(json, "tasks"), 0);
    cr_expect(last->step == 8 && fabs(json_number(task, "acc") - last->acc) < 1e-8 &&
                  fabs(json_number(task, "acc_norm") - last->acc_norm) < 1e-8,
              "eval and the run's last evaluation agree");
    cJSON_Delete(json);
    tg_run_history_free(&h);
    snprintf(args, sizeof args, "report '%s'", straight);
    free(expect_cli(0, args));
    snprintf(args, sizeof args, "%s/report.html", straight);
    char *html = ckpt_read_text(args);
    cr_expect(strstr(html, "data-series=\"pairs acc\"") && strstr(html, "data-series=\"choices acc_norm\""));
    /* the 95% interval of each accuracy as a band, and the line of chance: minimal pairs 1 in 2 */
    cr_expect(strstr(html, "data-band=\"pairs acc\"") && strstr(html, "data-series=\"pairs chance\"") &&
              strstr(html, "data-series=\"choices chance\""));
    free(html), free(out), free(a), free(b), free(straight), free(resumed);
    task_files_free(&files);
}

/* A fine-tuned run: its choices scored as replies by eval and by sft --eval-task alike. */
Test(tasks, a_fine_tuned_runs_tasks_go_through_its_chat_template) {
    TaskFiles files = task_files();
    char *base = datagen_path(dir, "base"), *tuned = datagen_path(dir, "tuned"), args[8192];
    snprintf(args, sizeof args,
             "train " TASK_TRAIN_FLAGS " --data '%s' --tokenizer bpe --vocab 320 --special-tokens chatml --steps 2 "
             "--eval-every 0 --out '%s'",
             files.corpus, base);
    free(expect_cli(0, args));
    char text[4096] = "";
    for (int i = 0; i < 20; i++)
        strcat(text, "{\"conversations\": [{\"role\": \"user\", \"content\": \"the dogs\"}, {\"role\": "
                     "\"assistant\", \"content\": \" run.\"}]}\n");
    char *chats = write_file("chats.jsonl", text);
    snprintf(args, sizeof args,
             "sft " TASK_TRAIN_FLAGS " --seq 64 --init-from '%s' --data '%s' --steps 4 --eval-every 4 --eval-task '%s' "
             "--out '%s'",
             base, chats, files.choices, tuned);
    free(expect_cli(0, args));
    snprintf(args, sizeof args, "eval --run '%s' --task '%s' --json", tuned, files.choices);
    char *out = expect_cli(0, args);
    cJSON *json = cJSON_Parse(out);
    cr_assert(json, "%s", out);
    cr_expect_str_eq(cJSON_GetObjectItem(json, "template")->valuestring, "chatml");
    const cJSON *task = cJSON_GetArrayItem(cJSON_GetObjectItem(json, "tasks"), 0);
    char *lines = task_lines(tuned), want[256];
    snprintf(want, sizeof want,
             "4:,\"task/choices/acc\":%.9g,\"task/choices/acc_norm\":%.9g,\"task/choices/items\":%d,"
             "\"task/choices/chance\":%.9g}\n",
             json_number(task, "acc"), json_number(task, "acc_norm"), (int)json_number(task, "count"),
             json_number(task, "chance"));
    /* the line before the first step (the --init-from weights), then the evaluation at step 4 */
    cr_expect(strncmp(lines, "0:,\"task/choices/acc\":", 22) == 0 && strstr(lines, want) &&
                  strlen(strstr(lines, want)) == strlen(want),
              "the run's evaluations, the last as eval gives it: %s against %s", lines, want);
    cJSON_Delete(json);
    free(lines), free(out), free(chats), free(base), free(tuned);
    task_files_free(&files);
}

/* ---- learning ---- */

/* RUN's pairs accuracy, acc (summed) from eval --json: `at_least` <= it <= `at_most`. */
static void expect_accuracy(const char *launcher, const char *run, const char *task, double at_least, double at_most,
                            const char *when) {
    char *out = NULL;
    int rc = ckpt_cli_launched(&out, launcher, "eval --run '%s' --task '%s' --json", run, task);
    cr_assert_eq(rc, 0, "%s", out);
    cJSON *json = cJSON_Parse(out);
    cr_assert(json, "%s", out);
    const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(json, "tasks"), 0);
    double acc = json_number(t, "acc"), norm = json_number(t, "acc_norm");
    fprintf(stderr, "%s, %s: acc %.3f, acc_norm %.3f\n", launcher, when, acc, norm);
    cr_expect(acc >= at_least && acc <= at_most && norm >= at_least && norm <= at_most,
              "%s, %s: acc %.3f, acc_norm %.3f, expected within [%.2f, %.2f]", launcher, when, acc, norm, at_least,
              at_most);
    cJSON_Delete(json);
    free(out);
}

/* Agreement across one or two distractor words: chance at step 0 (the pairs are half singular,
 * half plural), at least 95% after 200 steps of the tiny preset on a BPE of 300 ids; the
 * metrics.jsonl line of the last evaluation says the same. */
static void learns_agreement_on(TgIsa isa) {
    if (!tg_isa_supported(isa)) cr_skip_test("%s: not a path of %s", tg_isa_name(isa), tg_cpu_name());
    char *corpus, *pairs, *run = datagen_path(dir, "run"), *out = NULL, launcher[64];
    write_grammar(4000, 200, "pairs.jsonl", &corpus, &pairs);
    snprintf(launcher, sizeof launcher, "env TAPEGRAD_ISA=%s", tg_isa_name(isa));
    int rc = ckpt_cli_launched(
        &out, launcher,
        "train --preset tiny --tokenizer bpe --vocab 300 --data '%s' --steps 200 --batch 16 --threads 1 "
        "--eval-every 200 --sample-tokens 0 --eval-task '%s' --out '%s' --stop-after 0",
        corpus, pairs, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    expect_accuracy(launcher, run, pairs, 0.35, 0.65, "step 0");
    rc = ckpt_cli_launched(&out, launcher, "train --resume '%s'", run);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "task pairs: minimal_pairs, 200 items"), "%s", out);
    free(out);
    expect_accuracy(launcher, run, pairs, 0.95, 1.0, "step 200");
    char *lines = task_lines(run);
    cr_expect(strncmp(lines, "200:,\"task/pairs/acc\":", 22) == 0 && atof(lines + 22) >= 0.95, "%s", lines);
    free(lines), free(corpus), free(pairs), free(run);
}

Test(tasks, learns_agreement_on_the_generic_path, .timeout = 60) { learns_agreement_on(TG_ISA_GENERIC); }
Test(tasks, learns_agreement_on_the_avx2_path, .timeout = 60) { learns_agreement_on(TG_ISA_AVX2); }
Test(tasks, learns_agreement_on_the_avx512_path, .timeout = 60) { learns_agreement_on(TG_ISA_AVX512); }
Test(tasks, learns_agreement_on_the_avx512bf16_path, .timeout = 60) { learns_agreement_on(TG_ISA_AVX512BF16); }
Test(tasks, learns_agreement_on_the_amx_path, .timeout = 60) { learns_agreement_on(TG_ISA_AMX); }
