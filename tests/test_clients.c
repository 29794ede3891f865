/* Programs other than tapegrad use its exports and its imports (tests/clients):
 *   - Hugging Face's JavaScript tokenizers encode texts with the tokenizer.json of `ckpt export
 *     --hf` to the ids tapegrad gives them, for a BPE and for a char run;
 *   - tapegrad encodes texts with a MiniMind-style tokenizer.json, made by an independent
 *     JavaScript BPE trainer, to the ids Hugging Face's tokenizers give them, and trains with it;
 *   - llama.cpp (node-llama-cpp's prebuilt binaries) runs the GGUF export: the same next-token
 *     log-probabilities as tapegrad's model within a stated bound, the same 20 greedy tokens,
 *     the same tokenization of the texts;
 *   - the chat template a fine-tuned run exports: Hugging Face's Jinja engine renders
 *     conversations to the very bytes tapegrad's renderer gives, and node-llama-cpp's chat
 *     session on the GGUF, applying the file's template, replies to a conversation of two turns
 *     as `tapegrad chat` does, greedy, id for id, over the same context;
 *   - a MiniMind-3-shaped model pretrained on MiniMind's own files (its tokenizer.json and
 *     tokenizer_config.json, a pretrain_t2t_mini.jsonl) samples in llama.cpp the text
 *     `tapegrad sample --temperature 0` gives.
 * They need Node.js and the packages of tests/clients/package-lock.json (scripts/test.sh
 * installs them); without them the tests fail, unless TAPEGRAD_SKIP_CLIENTS=1. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptutil.h"
#include "data/chat_format.h"
#include "data/chat_tools.h"
#include "support/json_write.h"
#include "tapegrad/tokenizer.h"
#include "tokenizer/tokenizer_hf.h"
#include "tokenizer/unicode_class.h"
#include "datagen.h"
#include "testutil.h"
#include "model/chat.h"
#include "model/tool_chat.h"
#include "tapegrad/rng.h"
#include "tapegrad/sample.h"
#include "run/run.h"

#define TEXT(s) {s, sizeof s - 1}
typedef struct {
    const char *bytes;
    size_t len;
} Text;

/* Every pre-split rule, scripts, emoji sequences, digits of other scripts, white space of
 * several kinds, the end-of-text text, a NUL, a run longer than any trained token. (U+0085 and
 * U+FEFF are left out: JavaScript's \s and Unicode's White_Space disagree on them.) */
static const Text VALID[] = {
    TEXT("Hello world, it's 42 days! We'll see: don't they'RE I'M 'tis"),
    TEXT("two  spaces,   three, tab\there,\n\nnew paragraph \r\n crlf   \n trailing   "),
    TEXT("numbers 12345 3.14159 1,000,000 \xd9\xa3\xd9\xa4\xd9\xa5 \xe2\x85\xab \xc2\xbd x2y"),
    TEXT("\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe7\xac\xa6 \xe3\x81\xb2\xe3\x82\x89\xe3\x81\x8c\xe3\x81\xaa "
         "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 caf\xc3\xa9 e\xcc\x81 na\xc3\xafve \xce\xb1\xce\xb2\xce\xb3"),
    TEXT("emoji \xf0\x9f\x98\x80\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 "
         "\xf0\x9f\x87\xab\xf0\x9f\x87\xb7 \xe2\x9d\xa4\xef\xb8\x8f!!"),
    TEXT("nbsp\xc2\xa0here ideographic\xe3\x80\x80space line\xe2\x80\xa8sep \xe2\x80\x83" "em"),
    TEXT("end<|endoftext|>start <|endoftext|> <|endoftext| x'sy ''' ' s"),
    TEXT("nul\0byte and aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
    TEXT("   leading spaces, ending in one "),
    TEXT("x"),
};
/* Not UTF-8: a stray continuation byte, 0xff, a cut sequence, an overlong form, a surrogate,
 * a code point past U+10FFFF. */
static const Text INVALID[] = {
    TEXT("bad \xff\xfe utf8 \xe2\x82 x \x80 end"),
    TEXT("overlong \xc0\xaf surrogate \xed\xa0\x80 high \xf4\x90\x80\x80 cut \xf0\x9f\x98"),
};
/* MiniMind's chat markup and added words. */
static const Text CHAT[] = {
    TEXT("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>easy</think>4<|im_end|>"),
    TEXT("<tool_call>{\"name\": \"f\"}</tool_call><|buffer1|><|im_end|<|endoftext|>"),
};
enum { N_VALID = sizeof VALID / sizeof VALID[0], N_INVALID = sizeof INVALID / sizeof INVALID[0],
       N_CHAT = sizeof CHAT / sizeof CHAT[0] };

static char *dir, *corpus_path;

/* A corpus with English-like prose and lines of other scripts, so that merges join UTF-8. */
static void setup(void) {
    dir = datagen_tempdir();
    size_t prose_len = 120000;
    char *prose = datagen_prose(5, prose_len);
    const char *lines = "\n\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe7\xac\xa6\xe6\xb5\x8b\xe8\xaf\x95 caf\xc3\xa9 na\xc3\xafve "
                        "\xce\xb1\xce\xb2\xce\xb3 \xf0\x9f\x98\x80\xf0\x9f\x98\x80 it's we'll 2024.\n";
    size_t ll = strlen(lines), len = prose_len + 200 * ll;
    char *text = malloc(len);
    memcpy(text, prose, prose_len);
    for (int i = 0; i < 200; i++) memcpy(text + prose_len + (size_t)i * ll, lines, ll);
    datagen_write(dir, "corpus.txt", text, len);
    corpus_path = datagen_path(dir, "corpus.txt");
    free(text);
    free(prose);
}

static void teardown(void) {
    if (dir) datagen_remove_tree(dir);
    free(dir), free(corpus_path);
    dir = corpus_path = NULL;
}

/* Trains a run of `steps` steps into dir/name with extra flags; returns its path. */
static char *make_run(const char *name, const char *flags, int steps) {
    char *run = datagen_path(dir, name), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s %s --steps %d --eval-every 0 --out %s", corpus_path, flags,
                      steps, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    return run;
}

/* ---- JSON in and out of the clients ------------------------------------------------------ */

static void write_texts(const char *path, const Text *texts, int n, const char *prompt_json, int steps) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"texts\": [", f);
    for (int i = 0; i < n; i++) {
        fputs(i ? ", \"" : "\"", f);
        for (size_t j = 0; j < texts[i].len; j++) fprintf(f, "%02x", (unsigned char)texts[i].bytes[j]);
        fputc('"', f);
    }
    fprintf(f, "]%s%s, \"steps\": %d}\n", prompt_json ? ", \"prompt\": " : "", prompt_json ? prompt_json : "", steps);
    fclose(f);
}

/* Runs `node tests/clients/<script> <args>`; returns its parsed stdout. */
static cJSON *run_client(const char *script, const char *args) {
    char *out = datagen_path(dir, "client.out"), *err = datagen_path(dir, "client.err"), cmd[8192];
    snprintf(cmd, sizeof cmd, "node %s/tests/clients/%s %s >%s 2>%s", TAPEGRAD_SOURCE_DIR, script, args, out, err);
    int rc = test_run(cmd);
    size_t len;
    char *text = (char *)ckpt_read_file(out, &len), *log = (char *)ckpt_read_file(err, &len);
    cr_assert_eq(rc, 0, "%s failed (exit %d):\n%s", cmd, rc, log);
    cJSON *json = cJSON_Parse(text);
    cr_assert_not_null(json, "%s printed no JSON:\n%.2000s", script, text);
    free(text), free(log), free(out), free(err);
    return json;
}

static int32_t *ids_of(const cJSON *array, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(array);
    int32_t *ids = malloc((*n + 1) * sizeof *ids);
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, array) ids[i++] = (int32_t)e->valuedouble;
    return ids;
}

static void expect_same_ids(const TgTokenizer *tok, const Text *t, const cJSON *theirs, const char *who, int index) {
    size_t cap = tg_tokenizer_max_ids(tok, t->len), n, n_theirs;
    int32_t *ids = malloc((cap + 1) * sizeof *ids), *other = ids_of(theirs, &n_theirs);
    cr_assert_eq(tg_tokenizer_encode(tok, t->bytes, t->len, ids, cap, &n), TG_OK, "%s", tg_error_message());
    bool same = n == n_theirs && memcmp(ids, other, n * sizeof *ids) == 0;
    size_t at = 0;
    while (at < n && at < n_theirs && ids[at] == other[at]) at++;
    cr_expect(same, "text %d: tapegrad gives %zu ids, %s %zu; first difference at %zu (%d vs %d)", index, n, who, n_theirs,
              at, at < n ? ids[at] : -1, at < n_theirs ? other[at] : -1);
    free(ids), free(other);
}

/* The text with each invalid sequence replaced by U+FFFD, as a JavaScript string holds it. */
static Text replaced(const Text *t) {
    char *out = malloc(3 * t->len + 1);
    size_t n = 0;
    for (size_t i = 0; i < t->len;) {
        uint32_t cp;
        size_t l = tg_utf8_next((const unsigned char *)t->bytes + i, t->len - i, &cp);
        if (cp == TG_UTF8_INVALID) memcpy(out + n, "\xef\xbf\xbd", 3), n += 3;
        else memcpy(out + n, t->bytes + i, l), n += l;
        i += l;
    }
    return (Text){out, n};
}

/* ---- tokenizer.json out ----------------------------------------------------------------- */

/* Exports run to dir/<name> with --hf; loads the run's tokenizer into *tok. */
static char *export_hf(const char *run, const char *name, TgTokenizer *tok) {
    char *folder = datagen_path(dir, name), *out = NULL, path[4200];
    int rc = ckpt_cli(&out, "ckpt export %s --hf %s", run, folder);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    snprintf(path, sizeof path, "%s/tokenizer.txt", run);
    cr_assert_eq(tg_tokenizer_load(path, tok), TG_OK, "%s", tg_error_message());
    return folder;
}

Test(clients, hf_tokenizers_encode_the_exported_tokenizer_json_as_tapegrad_does, .init = setup, .fini = teardown,
     .timeout = 300) {
    require_clients("the JavaScript tokenizers on the exported tokenizer.json", teardown);
    char *run = make_run("bpe", "--tokenizer bpe --vocab 600", 2), *texts = datagen_path(dir, "texts.json"), args[8400];
    TgTokenizer tok;
    char *folder = export_hf(run, "hf-bpe", &tok);
    Text all[N_VALID + N_INVALID];
    memcpy(all, VALID, sizeof VALID);
    for (int i = 0; i < N_INVALID; i++) all[N_VALID + i] = replaced(&INVALID[i]);
    write_texts(texts, all, N_VALID + N_INVALID, NULL, 0);
    snprintf(args, sizeof args, "%s/tokenizer.json %s", folder, texts);
    cJSON *json = run_client("hf_tokenize.mjs", args), *ids = cJSON_GetObjectItem(json, "ids");
    cr_assert_eq(cJSON_GetArraySize(ids), N_VALID + N_INVALID);
    for (int i = 0; i < N_VALID + N_INVALID; i++) expect_same_ids(&tok, &all[i], cJSON_GetArrayItem(ids, i), "Hugging Face", i);
    /* invalid UTF-8: tapegrad's own BPE keeps the bytes, the JavaScript string holds U+FFFD */
    size_t n;
    int32_t buf[256];
    cr_assert_eq(tg_tokenizer_encode(&tok, INVALID[0].bytes, INVALID[0].len, buf, 256, &n), TG_OK);
    char *back;
    size_t back_len;
    cr_assert_eq(tg_tokenizer_decode(&tok, buf, n, &back, &back_len), TG_OK);
    cr_expect(back_len == INVALID[0].len && memcmp(back, INVALID[0].bytes, back_len) == 0, "the bytes round-trip");
    free(back);
    for (int i = 0; i < N_INVALID; i++) free((void *)all[N_VALID + i].bytes);
    cJSON_Delete(json);
    tg_tokenizer_free(&tok);
    free(folder), free(run);

    /* the char tokenizer, as a BPE without merges over the corpus's bytes */
    run = make_run("char", "--tokenizer char", 1);
    folder = export_hf(run, "hf-char", &tok);
    size_t corpus_len;
    char *corpus = (char *)ckpt_read_file(corpus_path, &corpus_len);
    Text corpus_texts[3] = {{corpus, 200}, {corpus + 5000, 1000}, {corpus + corpus_len - 300, 300}};
    write_texts(texts, corpus_texts, 3, NULL, 0);
    snprintf(args, sizeof args, "%s/tokenizer.json %s", folder, texts);
    json = run_client("hf_tokenize.mjs", args);
    for (int i = 0; i < 3; i++)
        expect_same_ids(&tok, &corpus_texts[i], cJSON_GetArrayItem(cJSON_GetObjectItem(json, "ids"), i), "Hugging Face", i);
    cJSON_Delete(json);
    tg_tokenizer_free(&tok);
    free(folder), free(run), free(texts), free(corpus);
}

/* ---- tokenizer.json in ------------------------------------------------------------------ */

static void check_import(const char *merge_form) {
    char *made = datagen_path(dir, "minimind.json"), *texts = datagen_path(dir, "texts.json"), args[8400];
    snprintf(args, sizeof args, "%s 300 %s %s", corpus_path, made, merge_form);
    cJSON_Delete(run_client("make_minimind_tokenizer.mjs", args));
    TgTokenizer tok;
    cr_assert_eq(tg_tokenizer_hf_load(made, &tok), TG_OK, "%s", tg_error_message());
    cr_expect_eq(tok.vocab_size, 36 + 256 + 300);
    cr_expect_eq(tok.eot_id, 0, "<|endoftext|> ends texts");
    Text all[N_VALID + N_INVALID + N_CHAT];
    memcpy(all, VALID, sizeof VALID);
    memcpy(all + N_VALID, INVALID, sizeof INVALID);
    memcpy(all + N_VALID + N_INVALID, CHAT, sizeof CHAT);
    int n = N_VALID + N_INVALID + N_CHAT;
    write_texts(texts, all, n, NULL, 0);
    snprintf(args, sizeof args, "%s %s", made, texts);
    cJSON *json = run_client("hf_tokenize.mjs", args), *ids = cJSON_GetObjectItem(json, "ids");
    for (int i = 0; i < n; i++) expect_same_ids(&tok, &all[i], cJSON_GetArrayItem(ids, i), "Hugging Face", i);
    cJSON_Delete(json);
    tg_tokenizer_free(&tok);
    free(made), free(texts);
}

Test(clients, tapegrad_encodes_with_a_minimind_tokenizer_json_as_hf_tokenizers_do, .init = setup, .fini = teardown,
     .timeout = 300) {
    require_clients("importing a MiniMind-style tokenizer.json", teardown);
    check_import("pairs");
    check_import("strings");
    /* and trains with it; its export carries the same tokenizer */
    char flags[4400], *made = datagen_path(dir, "minimind.json");
    snprintf(flags, sizeof flags, "--tokenizer hf:%s", made);
    char *run = make_run("hf-run", flags, 2);
    TgTokenizer from_run, from_file;
    char *folder = export_hf(run, "hf-out", &from_run);
    char *exported = datagen_path(folder, "tokenizer.json");
    cr_assert_eq(tg_tokenizer_hf_load(made, &from_file), TG_OK);
    cr_expect_eq(tg_tokenizer_fingerprint(&from_run), tg_tokenizer_fingerprint(&from_file), "the run holds the file's tokenizer");
    tg_tokenizer_free(&from_file);
    cr_assert_eq(tg_tokenizer_hf_load(exported, &from_file), TG_OK, "%s", tg_error_message());
    cr_expect_eq(tg_tokenizer_fingerprint(&from_run), tg_tokenizer_fingerprint(&from_file), "the export holds the run's tokenizer");
    tg_tokenizer_free(&from_file);
    tg_tokenizer_free(&from_run);
    free(made), free(run), free(folder), free(exported);
}

/* ---- GGUF in llama.cpp ------------------------------------------------------------------ */

/* log-softmax of every position's logits for `ids` through tapegrad's model (n x vocab). */
static double *tapegrad_logprobs(TgModel *m, const int32_t *ids, int64_t n) {
    TestTape tt;
    test_tape_init(&tt, 1);
    tg_tape_set_grad_enabled(&tt.tape, false);
    const TgTensor *logits = tg_model_forward(m, &tt.tape, &(TgBatch){.tokens = ids, .batch = 1, .seq = n}, NULL);
    int64_t v = m->cfg.vocab;
    double *out = malloc((size_t)(n * v) * sizeof *out);
    for (int64_t t = 0; t < n; t++) {
        const float *z = logits->data + t * v;
        double max = z[0], sum = 0;
        for (int64_t j = 1; j < v; j++) max = fmax(max, z[j]);
        for (int64_t j = 0; j < v; j++) sum += exp(z[j] - max);
        for (int64_t j = 0; j < v; j++) out[t * v + j] = z[j] - max - log(sum);
    }
    test_tape_free(&tt);
    return out;
}

/* Greedy continuation by tapegrad: `steps` argmax tokens after ids[0..n). */
static void tapegrad_greedy(TgModel *m, int32_t *ids, int64_t n, int steps) {
    for (int s = 0; s < steps; s++) {
        double *lp = tapegrad_logprobs(m, ids, n + s);
        const double *last = lp + (n + s - 1) * m->cfg.vocab;
        int32_t best = 0;
        for (int64_t j = 1; j < m->cfg.vocab; j++)
            if (last[j] > last[best]) best = (int32_t)j;
        ids[n + s] = best;
        free(lp);
    }
}

/* "[id, id, ...]" */
static void ids_json(const int32_t *ids, size_t n, char *buf, size_t cap) {
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (size_t i = 0; i < n && at < cap; i++) at += (size_t)snprintf(buf + at, cap - at, i ? ", %d" : "%d", ids[i]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* Opens `run` and encodes the prompt both llama.cpp checks use into ids (64 at most) and their
 * JSON; returns how many ids. */
static size_t open_with_prompt(const char *run, TgRun *r, int32_t *ids, char *json, size_t cap) {
    cr_assert_eq(tg_run_open_existing(run, r), TG_OK, "%s", tg_error_message());
    const char *prompt = "The old man said: it's";
    size_t n;
    cr_assert_eq(tg_tokenizer_encode(&r->tok, prompt, strlen(prompt), ids, 64, &n), TG_OK);
    ids_json(ids, n, json, cap);
    return n;
}

/* Compares llama.cpp's log-probabilities with tapegrad's; returns the largest difference. */
static double compare_logprobs(const cJSON *json, const double *ours, int64_t n, int64_t vocab) {
    const cJSON *rows = cJSON_GetObjectItem(json, "logprobs");
    cr_assert_eq(cJSON_GetArraySize(rows), n);
    double worst = 0;
    for (int64_t t = 0; t < n; t++) {
        const cJSON *row = cJSON_GetArrayItem(rows, (int)t);
        cr_assert_eq(cJSON_GetArraySize(row), vocab, "position %lld: llama.cpp gave %d tokens", (long long)t,
                     cJSON_GetArraySize(row));
        int64_t j = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, row) {
            cr_assert(cJSON_IsNumber(e), "position %lld, token %lld: no probability", (long long)t, (long long)j);
            worst = fmax(worst, fabs(e->valuedouble - ours[t * vocab + j]));
            j++;
        }
    }
    return worst;
}

/* llama.cpp runs the GGUF export of `run` (n_kinds of the weight types below) as tapegrad's model
 * does: the log-probabilities of the prompt, and with F32 the 20 greedy tokens and the tokenizer. */
static void expect_llama_cpp_runs_as_tapegrad(char *run, size_t n_kinds) {
    char args[8400];
    TgRun r;
    int32_t ids[64];
    char prompt_json[1024];
    size_t n_prompt = open_with_prompt(run, &r, ids, prompt_json, sizeof prompt_json);
    const int steps = 20;
    cr_assert_leq((int64_t)n_prompt + steps, r.model.cfg.seq_len);
    char *request = datagen_path(dir, "request.json");
    write_texts(request, VALID, N_VALID, prompt_json, steps);
    double *ours = tapegrad_logprobs(&r.model, ids, (int64_t)n_prompt);
    tapegrad_greedy(&r.model, ids, (int64_t)n_prompt, steps);

    /* F32: the same numbers up to float rounding in two implementations (llama_check.mjs keeps
     * llama.cpp's attention in F32: no flash attention, an F32 key/value cache); F16 and Q8_0
     * round the weights (a relative error of 2^-11, and up to 1/254 of each block's largest);
     * measured 4.6e-6, 3.0e-3 and 5.3e-2, tests/clients/README.md */
    static const struct {
        const char *type;
        double bound;
        bool greedy;
    } kinds[] = {{"f32", 2e-5, true}, {"f16", 1e-2, false}, {"q8_0", 1e-1, false}};
    for (size_t k = 0; k < n_kinds; k++) {
        char *gguf = datagen_path(dir, "model.gguf"), *out = NULL;
        int rc = ckpt_cli(&out, "ckpt export %s --gguf %s --gguf-type %s --force", run, gguf, kinds[k].type);
        cr_assert_eq(rc, 0, "%s", out);
        free(out);
        snprintf(args, sizeof args, "%s %s", gguf, request);
        cJSON *json = run_client("llama_check.mjs", args);
        double worst = compare_logprobs(json, ours, (int64_t)n_prompt, r.model.cfg.vocab);
        fprintf(stderr, "gguf %s: largest |log p llama.cpp - log p tapegrad| over %zu positions x %lld tokens: %.3g\n",
                kinds[k].type, n_prompt, (long long)r.model.cfg.vocab, worst);
        cr_expect_leq(worst, kinds[k].bound, "%s: log-probabilities differ by %g", kinds[k].type, worst);
        if (kinds[k].greedy) {
            size_t n_greedy;
            int32_t *greedy = ids_of(cJSON_GetObjectItem(json, "greedy"), &n_greedy);
            cr_assert_eq(n_greedy, (size_t)steps);
            for (int s = 0; s < steps; s++)
                cr_expect_eq(greedy[s], ids[n_prompt + s], "greedy step %d: llama.cpp %d, tapegrad %d", s, greedy[s], ids[n_prompt + s]);
            free(greedy);
            const cJSON *text_ids = cJSON_GetObjectItem(json, "text_ids");
            for (int i = 0; i < N_VALID; i++) expect_same_ids(&r.tok, &VALID[i], cJSON_GetArrayItem(text_ids, i), "llama.cpp", i);
        }
        cJSON_Delete(json);
        free(gguf);
    }
    free(ours), free(request);
    tg_run_close(&r);
}

Test(clients, llama_cpp_runs_the_gguf_export_as_tapegrad_does, .init = setup, .fini = teardown, .timeout = 300) {
    require_clients("llama.cpp on the GGUF export", teardown);
    char *run = make_run("bpe", "--tokenizer bpe --vocab 600 --lr 1e-2 --seq 48", 300);
    expect_llama_cpp_runs_as_tapegrad(run, 3);
    free(run);
}

/* A model with QK-norm is llama.cpp's qwen3 (MiniMind-3's architecture): its q and k rows as
 * tapegrad has them (qwen3's RoPE takes the halves), attn_q_norm and attn_k_norm; F32 only (the
 * rounding of the other types is the same as above). */
Test(clients, llama_cpp_runs_the_gguf_of_a_qk_norm_model_as_qwen3, .init = setup, .fini = teardown, .timeout = 300) {
    require_clients("llama.cpp on the qwen3 GGUF export", teardown);
    char *run = make_run("qk", "--tokenizer bpe --vocab 600 --lr 1e-2 --seq 48 --qk-norm --norm-eps 1e-6", 300);
    expect_llama_cpp_runs_as_tapegrad(run, 1);
    free(run);
}

/* MiniMind-3's shape scaled down (the preset's QK-norm, its eps and its FFN rule; grouped-query
 * attention, tied embeddings) pretrained for 300 steps on MiniMind's files as they come: a
 * tokenizer.json laid out as MiniMind's with its tokenizer_config.json beside it (so documents
 * are framed BOS <|im_start|> + text + EOS <|im_end|>), and a JSONL named pretrain_t2t_mini.jsonl.
 * The val loss falls well below ln(vocab); the GGUF runs in llama.cpp as qwen3, and llama.cpp's
 * greedy text after the framed prompt is `tapegrad sample --temperature 0`'s. */
Test(clients, a_minimind_3_shaped_model_trained_on_minimind_files_samples_as_in_llama_cpp, .init = setup,
     .fini = teardown, .timeout = 600) {
    require_clients("llama.cpp on a MiniMind-3-shaped model", teardown);
    const char *config = "{\"add_bos_token\": false, \"bos_token\": \"<|im_start|>\", \"eos_token\": \"<|im_end|>\", "
                         "\"pad_token\": \"<|endoftext|>\", \"tokenizer_class\": \"PreTrainedTokenizerFast\"}\n";
    datagen_write(dir, "model/tokenizer_config.json", config, strlen(config));
    char *tokenizer = datagen_path(dir, "model/tokenizer.json"), args[8400];
    snprintf(args, sizeof args, "%s 600 %s", corpus_path, tokenizer);
    cJSON_Delete(run_client("make_minimind_tokenizer.mjs", args));
    /* documents of about 300 bytes of prose, one a line */
    size_t len = 90000;
    char *prose = datagen_prose(21, len), *jsonl = datagen_path(dir, "dataset/pretrain_t2t_mini.jsonl");
    datagen_write(dir, "dataset/placeholder", "", 0);
    FILE *f = fopen(jsonl, "w");
    cr_assert_not_null(f);
    for (size_t at = 0; at + 300 <= len; at += 300) {
        fputs("{\"text\": ", f);
        tg_json_write_bytes(f, prose + at, 300);
        fputs("}\n", f);
    }
    fclose(f);
    char *run = datagen_path(dir, "mm3"), *out = NULL;
    int rc =
        ckpt_cli(&out,
                 "train --preset minimind-3 --dim 64 --layers 2 --heads 4 --kv-heads 2 --seq 64 --batch 8 --lr 1e-2 "
                 "--steps 300 --eval-every 100 --eval-batches 4 --sample-tokens 0 --threads 2 --data %s --tokenizer "
                 "hf:%s --out %s",
                 jsonl, tokenizer, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);

    TgRun r;
    cr_assert_eq(tg_run_open_existing(run, &r), TG_OK, "%s", tg_error_message());
    const TgModelConfig *c = &r.model.cfg;
    cr_expect(c->qk_norm && c->n_kv_heads == 2 && c->n_heads == 4 && c->hidden == 256 && c->norm_eps == 1e-6,
              "the preset's QK-norm, the pi rule (256 at dim 64) and eps 1e-6 under the flags' shape");
    cr_expect(r.tok.has_bos && r.tok.bos_id == 1 && r.tok.eot_id == 2, "MiniMind's BOS 1 and EOS 2: %d, %d",
              (int)r.tok.bos_id, (int)r.tok.eot_id);
    CkptMetricLine lines[64];
    int n_lines = ckpt_read_metrics(run, 299, lines, 64); /* the last step, evaluated */
    double val = -1;
    for (int i = 0; i < n_lines; i++)
        if (lines[i].val_loss[0]) val = atof(lines[i].val_loss);
    double ln_vocab = log((double)c->vocab);
    fprintf(stderr, "minimind-3-shaped: vocab %lld, val loss %.4f after 300 steps (ln vocab %.3f)\n",
            (long long)c->vocab, val, ln_vocab);
    cr_expect(val > 0 && val < 0.6 * ln_vocab, "val loss %g is not well below ln(vocab) %g", val, ln_vocab);

    /* the prompt as a document starts: the BOS, then the text */
    const char *prompt = "The old man said";
    int32_t ids[64];
    size_t n;
    ids[0] = r.tok.bos_id;
    cr_assert_eq(tg_tokenizer_encode(&r.tok, prompt, strlen(prompt), ids + 1, 63, &n), TG_OK);
    n++;
    char prompt_json[1024], *request = datagen_path(dir, "request.json"), *gguf = datagen_path(dir, "mm3.gguf");
    ids_json(ids, n, prompt_json, sizeof prompt_json);
    const int steps = 40;
    f = fopen(request, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"texts\": [], \"prompt\": %s, \"steps\": %d, \"stop\": %d}\n", prompt_json, steps, (int)r.tok.eot_id);
    fclose(f);
    rc = ckpt_cli(&out, "ckpt export %s --gguf %s", run, gguf);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    snprintf(args, sizeof args, "%s %s", gguf, request);
    cJSON *json = run_client("llama_check.mjs", args);
    const char *hex = cJSON_GetStringValue(cJSON_GetObjectItem(json, "greedy_text"));
    cr_assert_not_null(hex);
    size_t n_theirs = strlen(hex) / 2;
    char *theirs = malloc(n_theirs + 1);
    for (size_t i = 0; i < n_theirs; i++) sscanf(hex + 2 * i, "%2hhx", (unsigned char *)&theirs[i]);
    theirs[n_theirs] = '\0';

    char *sampled = datagen_path(dir, "sample.out");
    snprintf(args, sizeof args, "%s sample --run %s --prompt '%s' --temperature 0 --tokens %d --threads 1 >%s 2>&1",
             TAPEGRAD_BIN, run, prompt, steps, sampled);
    cr_assert_eq(test_run(args), 0, "%s", ckpt_read_text(sampled));
    char *ours = ckpt_read_text(sampled);
    size_t n_ours = strlen(ours);
    cr_assert(n_ours > strlen(prompt) && strncmp(ours, prompt, strlen(prompt)) == 0 && ours[n_ours - 1] == '\n', "%s",
              ours);
    ours[n_ours - 1] = '\0';
    fprintf(stderr, "tapegrad sample: %s\nllama.cpp:      %s%s\n", ours, prompt, theirs);
    cr_expect(strlen(theirs) > 20, "llama.cpp's greedy text is %zu bytes", strlen(theirs));
    cr_expect_str_eq(ours + strlen(prompt), theirs,
                     "tapegrad sample --temperature 0 and llama.cpp's greedy text differ");
    cJSON_Delete(json);
    tg_run_close(&r);
    free(tokenizer), free(prose), free(jsonl), free(run), free(request), free(gguf), free(theirs), free(sampled),
        free(ours);
}

/* ---- a LoRA adapter in llama.cpp ---------------------------------------------------------- */

/* A LoRA run (rank 4 on every linear, trained on a base's safetensors) exported as a GGUF
 * adapter: llama.cpp, loading the base's GGUF with the adapter at scale 1, gives the
 * log-probabilities of tapegrad's merged model. llama.cpp computes W x + (alpha / r) B (A x)
 * where the merged model has (W + (alpha / r) B A) x: the two differ in rounding only. Bounds
 * per base type as for the base alone (the adapter stays F32); measured in tests/clients/README.md. */
/* The check above for a base trained with `flags` (its shape and tokenizer), on n_kinds weight
 * types of its GGUF. */
static void expect_llama_cpp_applies_the_adapter(const char *flags, size_t n_kinds) {
    char base_flags[512];
    snprintf(base_flags, sizeof base_flags, "%s --lr 1e-2", flags);
    char *base = make_run("lora-base", base_flags, 60);
    char *weights = datagen_path(dir, "base.safetensors"), *lora = datagen_path(dir, "lora-run");
    char *adapter = datagen_path(dir, "adapter.gguf"), *out = NULL, args[8400];
    int rc = ckpt_cli(&out, "ckpt export %s --safetensors %s", base, weights);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s %s --init-from %s --lora-rank 4 --lr 3e-2 --steps 30 "
                        "--eval-every 0 --out %s", corpus_path, flags, weights, lora);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "ckpt export %s --gguf-adapter %s", lora, adapter);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    TgRun r;
    int32_t ids[64];
    char prompt_json[1024];
    size_t n_prompt = open_with_prompt(lora, &r, ids, prompt_json, sizeof prompt_json);
    char *request = datagen_path(dir, "request.json");
    write_texts(request, VALID, 0, prompt_json, 1);
    double *adapted = tapegrad_logprobs(&r.model, ids, (int64_t)n_prompt);
    tg_lora_merge(&r.model);
    double *merged = tapegrad_logprobs(&r.model, ids, (int64_t)n_prompt);
    static const struct {
        const char *type;
        double bound;
    } kinds[] = {{"f32", 5e-5}, {"f16", 1e-2}, {"q8_0", 1e-1}};
    for (size_t k = 0; k < n_kinds; k++) {
        char *gguf = datagen_path(dir, "base.gguf");
        rc = ckpt_cli(&out, "ckpt export %s --gguf %s --gguf-type %s --force", base, gguf, kinds[k].type);
        cr_assert_eq(rc, 0, "%s", out);
        free(out);
        snprintf(args, sizeof args, "%s %s %s", gguf, request, adapter);
        cJSON *json = run_client("llama_check.mjs", args);
        double worst = compare_logprobs(json, merged, (int64_t)n_prompt, r.model.cfg.vocab);
        cJSON_Delete(json);
        fprintf(stderr, "gguf %s base + F32 LoRA adapter: largest |log p llama.cpp - log p tapegrad merged| %.3g\n",
                kinds[k].type, worst);
        cr_expect_leq(worst, kinds[k].bound, "%s: log-probabilities differ by %g", kinds[k].type, worst);
        if (k == 0) {
            /* the same base without the adapter: far off, so the agreement above is the adapter's */
            snprintf(args, sizeof args, "%s %s", gguf, request);
            json = run_client("llama_check.mjs", args);
            double without = compare_logprobs(json, merged, (int64_t)n_prompt, r.model.cfg.vocab);
            cJSON_Delete(json);
            cr_expect_gt(without, 100 * kinds[k].bound, "the adapter moves the log-probabilities by only %g", without);
        }
        free(gguf);
    }
    double apart = 0;
    for (size_t i = 0; i < n_prompt * (size_t)r.model.cfg.vocab; i++) apart = fmax(apart, fabs(adapted[i] - merged[i]));
    cr_expect_leq(apart, 1e-5, "merged and adapted log-probabilities differ by %g", apart);
    free(adapted), free(merged), free(request), free(base), free(weights), free(lora), free(adapter);
    tg_run_close(&r);
}

Test(clients, llama_cpp_applies_the_gguf_lora_adapter_as_tapegrad_merges_it, .init = setup, .fini = teardown,
     .timeout = 300) {
    require_clients("llama.cpp with the GGUF LoRA adapter", teardown);
    expect_llama_cpp_applies_the_adapter("--tokenizer bpe --vocab 600 --seq 48", 3);
}

/* The same on a base with QK-norm, llama.cpp's qwen3, whose adapters' q and k rows stay unpermuted
 * as its weights' do (F32). */
Test(clients, llama_cpp_applies_the_gguf_lora_adapter_of_a_qk_norm_base, .init = setup, .fini = teardown,
     .timeout = 300) {
    require_clients("llama.cpp with the GGUF LoRA adapter of a qwen3 base", teardown);
    expect_llama_cpp_applies_the_adapter("--tokenizer bpe --vocab 600 --seq 48 --qk-norm --norm-eps 1e-6", 1);
}

/* ---- the chat template ------------------------------------------------------------------ */

/* A run fine-tuned on short exchanges ("Say river." -> "river, and then stone."), for long
 * enough that its greedy replies are words: seq 128, the ChatML tokens. */
/* A fine-tuned run of `steps` steps on a base of base_steps: of every weight, or (lora_flags, e.g. "--lora-rank 8") LoRA
 * adapters. */
static char *make_chat_run_with(const char *lora_flags, int base_steps, int steps) {
    char *base = make_run("chat-base", "--tokenizer bpe --vocab 600 --special-tokens chatml --seq 192", base_steps);
    static const char *const words[] = {"river", "stone", "lamp", "orchard", "violin", "harbour", "meadow", "copper"};
    char *text = malloc(1 << 16);
    size_t n = 0;
    for (int i = 0; i < 160; i++)
        n += (size_t)snprintf(text + n, (1 << 16) - n,
                              "{\"conversations\": [{\"role\": \"system\", \"content\": \"Answer briefly.\"}, {\"role\": "
                              "\"user\", \"content\": \"Say %s.\"}, {\"role\": \"assistant\", \"content\": \"%s, and then %s.\"}]}\n",
                              words[i % 8], words[i % 8], words[(i * 3 + 1) % 8]);
    datagen_write(dir, "chat.jsonl", text, n);
    free(text);
    char *data = datagen_path(dir, "chat.jsonl"), *run = datagen_path(dir, lora_flags ? "chat-lora-run" : "chat-run"), *out = NULL;
    int rc = ckpt_cli(&out, "sft --init-from %s --data %s --threads 1 --batch 8 --steps %d --eval-every 0 %s --out %s", base, data,
                      steps, lora_flags ? lora_flags : "", run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out), free(data), free(base);
    return run;
}

static char *make_chat_run(void) { return make_chat_run_with(NULL, 60, 150); }

/* Conversations with what a template could get wrong: every role, several turns, an empty
 * content, Jinja's own syntax, quotes and backslashes, special-token text, white space at the
 * ends, new lines and tabs, scripts and emoji. */
static const char *const TEMPLATE_TEXTS[] = {
    "You are a helpful assistant.", "What is {{ 2 + 2 }}? {% if x %}y{% endif %}", "It is \"4\", or '4' \\ 4.",
    "", "  <|im_start|>user\nfake<|im_end|>  ", "line one\nline two\t\ttabbed\r\n",
    "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80 caf\xc3\xa9 <b>bold</b> &amp;",
};

Test(clients, hf_jinja_renders_the_exported_chat_template_as_tapegrad_does, .init = setup, .fini = teardown, .timeout = 300) {
    require_clients("@huggingface/jinja on the exported chat template", teardown);
    char *run = make_chat_run(), *folder = datagen_path(dir, "hf-chat"), *out = NULL, args[8400];
    int rc = ckpt_cli(&out, "ckpt export %s --hf %s", run, folder);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "a chat model"), "%s", out);
    free(out);
    /* conversations of 1 to 7 turns, system first or not, with and without the generation prompt */
    enum { N = 8 };
    TgConversation conv[N] = {{0}};
    for (int c = 0; c < N; c++) {
        int turns = 1 + c % 7;
        for (int t = 0; t < turns; t++) {
            TgChatRole role = t == 0 && c % 2 ? TG_CHAT_SYSTEM : (t + (c % 2)) % 2 ? TG_CHAT_USER : TG_CHAT_ASSISTANT;
            if (t == 0 && !(c % 2)) role = TG_CHAT_USER;
            const char *text = TEMPLATE_TEXTS[(c + t) % 7];
            tg_chat_conversation_add(&conv[c], role, text, strlen(text));
        }
    }
    char *path = datagen_path(dir, "conversations.json");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputc('[', f);
    for (int c = 0; c < N; c++) {
        fputs(c ? ", {\"messages\": [" : "{\"messages\": [", f);
        for (size_t t = 0; t < conv[c].n_turns; t++) {
            fprintf(f, "%s{\"role\": \"%s\", \"content\": ", t ? ", " : "", tg_chat_role_name(conv[c].turns[t].role));
            tg_json_write_bytes(f, chat_turn_text(&conv[c], t), conv[c].turns[t].len);
            fputc('}', f);
        }
        fprintf(f, "], \"add_generation_prompt\": %s}", c % 3 ? "true" : "false");
    }
    fputs("]\n", f);
    fclose(f);
    snprintf(args, sizeof args, "%s/tokenizer_config.json %s", folder, path);
    cJSON *json = run_client("chat_template.mjs", args), *rendered = cJSON_GetObjectItem(json, "rendered");
    cr_assert_eq(cJSON_GetArraySize(rendered), N);
    for (int c = 0; c < N; c++) {
        size_t len;
        char *ours = tg_chat_render_text(&conv[c], c % 3 != 0, &len);
        const char *hex = cJSON_GetArrayItem(rendered, c)->valuestring;
        size_t theirs_len = strlen(hex) / 2;
        char *theirs = malloc(theirs_len + 1);
        for (size_t i = 0; i < theirs_len; i++) sscanf(hex + 2 * i, "%2hhx", (unsigned char *)&theirs[i]);
        theirs[theirs_len] = '\0';
        cr_expect(len == theirs_len && memcmp(ours, theirs, len) == 0, "conversation %d: Jinja renders\n%s\ntapegrad\n%s", c,
                  theirs, ours);
        free(ours), free(theirs);
        tg_chat_conversation_free(&conv[c]);
    }
    cJSON_Delete(json);
    free(run), free(folder), free(path);
}

/* Conversations with tools and thinking covering every branch of MiniMind-3's template: the
 * generation prompt with and without open thinking; <think> inside a content (once, twice, open
 * only); reasoning_content with newlines to strip; tools on the system turn as a JSON string and
 * beside the conversation as an array, an empty list of them; tool calls as a JSON string and as
 * an array, wrapped in "function", arguments as an object and as a string, after content and
 * without; consecutive tool responses, a tool response first; a system turn past the first; JSON
 * with non-ASCII text, escapes, nesting, booleans, null, negative and fractional numbers. */
static const char *const TOOL_LINES[] = {
    "{\"conversations\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": true}",
    "{\"conversations\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": true, \"open_thinking\": true}",
    "{\"conversations\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": true, \"open_thinking\": false}",
    "{\"conversations\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nadd them\\n</think>\\n\\n4\"}], \"add_generation_prompt\": false}",
    "{\"conversations\": [{\"role\": \"system\", \"content\": \"You help.\", \"tools\": \"[{\\\"type\\\": \\\"function\\\", \\\"function\\\": {\\\"name\\\": \\\"get_weather\\\", \\\"description\\\": \\\"\xe4\xbb\x8a\xe5\xa4\xa9\xe7\x9a\x84\xe5\xa4\xa9\xe6\xb0\x94 \\\\\\\"quoted\\\\\\\" \\\\\\\\ tab\\\\t\\\", \\\"parameters\\\": {\\\"type\\\": \\\"object\\\", \\\"properties\\\": {\\\"city\\\": {\\\"type\\\": \\\"string\\\", \\\"enum\\\": [\\\"Paris\\\", \\\"\xe5\x8c\x97\xe4\xba\xac\\\"]}, \\\"days\\\": {\\\"type\\\": \\\"integer\\\", \\\"minimum\\\": 1, \\\"maximum\\\": 7, \\\"default\\\": 3}}, \\\"required\\\": [\\\"city\\\"]}}}, {\\\"name\\\": \\\"add\\\", \\\"description\\\": \\\"a + b\\\", \\\"parameters\\\": {\\\"a\\\": 1.5, \\\"b\\\": -2, \\\"exact\\\": true, \\\"note\\\": null, \\\"list\\\": [[], {}, [1, [2]]]}}]\"}, {\"role\": \"user\", \"content\": \"Weather in Paris, and 1.5 + 2?\"}, {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"\\n\\nI need two tools.\\n\", \"tool_calls\": \"[{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": {\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 2}}, {\\\"name\\\": \\\"add\\\", \\\"arguments\\\": {\\\"a\\\": 1.5, \\\"b\\\": 2}}]\"}, {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 21}\"}, {\"role\": \"tool\", \"content\": \"3.5\"}, {\"role\": \"assistant\", \"content\": \"It is 21 degrees; 1.5 + 2 = 3.5.\", \"reasoning_content\": \"both came back\"}, {\"role\": \"user\", \"content\": \"thanks\"}], \"add_generation_prompt\": true}",
    "{\"conversations\": [{\"role\": \"user\", \"content\": \"add 1 and 2\"}, {\"role\": \"assistant\", \"content\": \"Calling it.\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": 2}\"}}]}, {\"role\": \"tool\", \"content\": \"3\"}], \"tools\": [{\"name\": \"add\", \"description\": \"a + b\", \"parameters\": {\"a\": 1.5, \"b\": -2, \"exact\": true, \"note\": null, \"list\": [[], {}, [1, [2]]]}}], \"add_generation_prompt\": true, \"open_thinking\": true}",
    "{\"conversations\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"system\", \"content\": \"late system\"}, {\"role\": \"user\", \"content\": \"b\"}, {\"role\": \"assistant\", \"content\": \"\\n\\nno think\\n\"}], \"add_generation_prompt\": false}",
    "{\"conversations\": [{\"role\": \"tool\", \"content\": \"first\"}, {\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": \"pre<think>\\n\\nr1</think>mid<think>r2\\n</think>\\n\\nend</think>\\n\\nlast\", \"tool_calls\": []}], \"add_generation_prompt\": false}",
    "{\"conversations\": [{\"role\": \"system\", \"content\": \"Tools none.\", \"tools\": \"[]\"}, {\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"\", \"tool_calls\": [{\"name\": \"noop\", \"arguments\": {}}]}], \"add_generation_prompt\": true}",
    "{\"conversations\": [{\"role\": \"system\", \"content\": \"S\", \"tools\": [{\"name\": \"add\", \"description\": \"a + b\", \"parameters\": {\"a\": 1.5, \"b\": -2, \"exact\": true, \"note\": null, \"list\": [[], {}, [1, [2]]]}}]}, {\"role\": \"user\", \"content\": \"<|im_end|> text\\u0001\"}, {\"role\": \"assistant\", \"content\": \"<think>open only\"}], \"add_generation_prompt\": false}",
};

Test(clients, hf_jinja_renders_minimind3s_template_with_tools_and_thinking_as_tapegrad_does, .init = setup, .fini = teardown,
     .timeout = 120) {
    require_clients("@huggingface/jinja on MiniMind-3's chat template", teardown);
    enum { N = sizeof TOOL_LINES / sizeof TOOL_LINES[0] };
    char *lines = datagen_path(dir, "tools.jsonl"), *config = datagen_path(dir, "tokenizer_config.json"), args[8400];
    FILE *f = fopen(lines, "w");
    for (int i = 0; i < N; i++) fprintf(f, "%s\n", TOOL_LINES[i]);
    fclose(f);
    f = fopen(config, "w");
    fputs("{\"chat_template\": ", f);
    tg_json_write_string(f, tg_tool_template_jinja);
    fputs("}\n", f);
    fclose(f);
    snprintf(args, sizeof args, "%s %s", config, lines);
    cJSON *json = run_client("tools_template.mjs", args), *rendered = cJSON_GetObjectItem(json, "rendered");
    cr_assert_eq(cJSON_GetArraySize(rendered), N);
    TgToolConversation conv = {0};
    for (int i = 0; i < N; i++) {
        TgJsonlLine line;
        tg_jsonl_line_of(TOOL_LINES[i], strlen(TOOL_LINES[i]), i + 1, &line);
        char why[320];
        cr_assert(tg_tool_conversation_parse(&line, &conv, why, sizeof why), "line %d: %s", i + 1, why);
        cJSON *options = cJSON_Parse(TOOL_LINES[i]);
        bool prompt = cJSON_IsTrue(cJSON_GetObjectItem(options, "add_generation_prompt")),
             open = cJSON_IsTrue(cJSON_GetObjectItem(options, "open_thinking"));
        cJSON_Delete(options);
        TgToolRendering ours;
        tg_tool_render(&conv, prompt, open, &ours);
        const char *hex = cJSON_GetArrayItem(rendered, i)->valuestring;
        size_t theirs_len = strlen(hex) / 2;
        char *theirs = malloc(theirs_len + 1);
        for (size_t b = 0; b < theirs_len; b++) sscanf(hex + 2 * b, "%2hhx", (unsigned char *)&theirs[b]);
        theirs[theirs_len] = '\0';
        cr_expect(ours.len == theirs_len && memcmp(ours.text, theirs, theirs_len) == 0, "line %d: Jinja renders\n%s\ntapegrad\n%s",
                  i + 1, theirs, ours.text);
        /* what the assistant wrote: each span opens after <|im_start|>assistant\n and closes with <|im_end|> */
        for (size_t k = 0; k < ours.n_trained; k++) {
            const TgToolText *t = &ours.trained[k];
            cr_expect(t->offset >= 22 && memcmp(ours.text + t->offset - 22, "<|im_start|>assistant\n", 22) == 0 &&
                          t->len >= 10 && memcmp(ours.text + t->offset + t->len - 10, "<|im_end|>", 10) == 0,
                      "line %d, span %zu: %.*s", i + 1, k, (int)t->len, ours.text + t->offset);
        }
        free(theirs);
        tg_tool_rendering_free(&ours);
    }
    tg_tool_conversation_free(&conv);
    cJSON_Delete(json);
    free(lines), free(config);
}

static const char CHAT_SYSTEM_TEXT[] = "Answer briefly.";
static const char *const CHAT_TURNS[] = {"Say violin.", "Say harbour.", "Say copper.", "Say meadow."};
enum { CHAT_N_TURNS = sizeof CHAT_TURNS / sizeof CHAT_TURNS[0] };
enum { CHAT_MAX_REPLY = 16 };

/* The JSON array of ids[0..n). */
static void expect_ids(const cJSON *theirs, const int32_t *ours, size_t n, const char *what) {
    size_t n_theirs;
    int32_t *ids = ids_of(theirs, &n_theirs);
    size_t same = 0;
    while (same < n && same < n_theirs && ids[same] == ours[same]) same++;
    cr_expect(n == n_theirs && same == n, "%s: tapegrad %zu ids, llama.cpp %zu; the first difference at %zu (%d vs %d)", what, n,
              n_theirs, same, same < n ? ours[same] : -1, same < n_theirs ? ids[same] : -1);
    free(ids);
}

/* node-llama-cpp's chat session on gguf (with the adapter, when not NULL) replies to CHAT_TURNS
 * with the very ids `tapegrad chat` of run draws, greedy, with no penalty. */
static void expect_chat_as_tapegrad(const char *run, const char *gguf, const char *adapter) {
    char *request = datagen_path(dir, "chat-request.json"), args[8400];
    FILE *f = fopen(request, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"system\": \"%s\", \"turns\": [", CHAT_SYSTEM_TEXT);
    for (int t = 0; t < CHAT_N_TURNS; t++) fprintf(f, "%s\"%s\"", t ? ", " : "", CHAT_TURNS[t]);
    fprintf(f, "], \"max_tokens\": %d}\n", CHAT_MAX_REPLY);
    fclose(f);
    snprintf(args, sizeof args, "%s %s %s", gguf, request, adapter ? adapter : "");
    cJSON *json = run_client("chat_check.mjs", args);
    fprintf(stderr, "node-llama-cpp would pick the %s wrapper by itself\n", cJSON_GetObjectItem(json, "wrapper")->valuestring);

    /* tapegrad chat: greedy (--temperature 0), penalty 1, the same limit */
    TgRun r;
    cr_assert_eq(tg_run_open_existing(run, &r), TG_OK, "%s", tg_error_message());
    TestTape tt;
    test_tape_init(&tt, 1);
    TgSampleOptions greedy = {.temperature = 0, .repetition_penalty = 1.0};
    TgChatSession s;
    cr_assert_eq(tg_chat_session_open(&s, &r.model, &r.tok, &tt.tape, &greedy, 1, CHAT_MAX_REPLY, run), TG_OK);
    cr_assert_eq(tg_chat_session_add(&s, TG_CHAT_SYSTEM, CHAT_SYSTEM_TEXT, strlen(CHAT_SYSTEM_TEXT)), TG_OK);
    int words = 0; /* replies of more than two ids: the model's weights, and so its replies, vary with the CPU */
    for (int t = 0; t < CHAT_N_TURNS; t++) {
        TgChatReply reply;
        cr_assert_eq(tg_chat_session_reply(&s, CHAT_TURNS[t], strlen(CHAT_TURNS[t]), NULL, NULL, &reply), TG_OK);
        int64_t drawn = reply.n_ids;
        const char *theirs = cJSON_GetArrayItem(cJSON_GetObjectItem(json, "replies"), t)->valuestring;
        fprintf(stderr, "turn %d: tapegrad \"%s\" (%lld ids), llama.cpp \"%s\"\n", t + 1, reply.text, (long long)drawn,
                theirs);
        words += drawn > 2;
        cr_expect_str_eq(reply.text, theirs, "turn %d", t + 1);
        size_t end = s.ids.n - 1;
        while (s.ids.ids[end] != s.ct.im_end) end--;
        char what[32];
        snprintf(what, sizeof what, "the ids of reply %d", t + 1);
        expect_ids(cJSON_GetArrayItem(cJSON_GetObjectItem(json, "reply_ids"), t), s.ids.ids + end - drawn, (size_t)drawn, what);
        free(reply.text);
    }
    cr_expect_geq(words, CHAT_N_TURNS - 1, "%d of %d replies hold more than two ids: the comparison tests little",
                  words, CHAT_N_TURNS);
    cr_expect_eq(s.rebuilds, 0);
    expect_ids(cJSON_GetObjectItem(json, "context"), s.context, (size_t)s.cache.len, "the context after the last reply");
    tg_chat_session_close(&s);
    test_tape_free(&tt);
    tg_run_close(&r);
    cJSON_Delete(json);
    free(request);
}

Test(clients, llama_cpp_chat_session_on_the_gguf_replies_as_tapegrad_chat, .init = setup, .fini = teardown, .timeout = 300) {
    require_clients("node-llama-cpp's chat session on the GGUF export", teardown);
    char *run = make_chat_run(), *gguf = datagen_path(dir, "chat.gguf"), *out = NULL;
    int rc = ckpt_cli(&out, "ckpt export %s --gguf %s", run, gguf);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    expect_chat_as_tapegrad(run, gguf, NULL);
    free(run), free(gguf);
}

/* A LoRA run with token rows (the markers, by --lora-tokens auto): the adapter alone is refused,
 * with the fix; the pair of --gguf-adapter and --gguf-base chats in llama.cpp as the run does. */
Test(clients, llama_cpp_chats_with_a_lora_runs_base_and_adapter_as_tapegrad_chat, .init = setup, .fini = teardown,
     .timeout = 300) {
    require_clients("node-llama-cpp's chat session on a LoRA run's base and adapter", teardown);
    char *run = make_chat_run_with("--lora-rank 8 --lr 1e-2", 600, 300), *base = datagen_path(dir, "lora-base.gguf");
    char *adapter = datagen_path(dir, "lora-adapter.gguf"), *out = NULL;
    int rc = ckpt_cli(&out, "ckpt export %s --gguf-adapter %s", run, adapter);
    cr_expect(rc != 0 && strstr(out, "add --gguf-base FILE"), "exit %d: %s", rc, out);
    free(out);
    rc = ckpt_cli(&out, "ckpt export %s --gguf-adapter %s --gguf-base %s", run, adapter, base);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "with the embedding rows the run trained; a chat model"), "%s", out);
    free(out);
    expect_chat_as_tapegrad(run, base, adapter);
    free(run), free(base), free(adapter);
}

/* ---- a chat over a tool call in llama.cpp ------------------------------------------------- */

/* The tool as node-llama-cpp hands it to a template (OpenAI's form), and the conversation around
 * it: a question, the call, its result. */
#define TOOL_SYSTEM "You answer with tools."
#define TOOL_PARAMS "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}"
#define TOOL_DEFS                                                                                                      \
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"temperature in "           \
    "degrees\", "                                                                                                      \
    "\"parameters\": " TOOL_PARAMS "}}]"

/* A tiny model fine-tuned in MiniMind-3's template on calls of that tool and answers from its
 * results. */
static char *make_tool_run(void) {
    char *base = make_run("tool-base", "--tokenizer bpe --vocab 600 --special-tokens chatml --seq 1024", 30);
    static const char *const cities[] = {"Paris", "Oslo", "Lima", "Rome", "Kyiv", "Bern"};
    size_t cap = 1 << 17, n = 0;
    char *text = malloc(cap);
    for (int i = 0; i < 60; i++) {
        const char *city = cities[i % 6];
        int temp = 10 + (i * 7) % 20;
        n +=
            (size_t)snprintf(text + n, cap - n,
                             "{\"conversations\": [{\"role\": \"system\", \"content\": \"" TOOL_SYSTEM
                             "\", \"tools\": " TOOL_DEFS "}, {\"role\": \"user\", \"content\": \"How warm is it in "
                             "%s?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"name\": "
                             "\"get_weather\", \"arguments\": {\"city\": \"%s\"}}]}, {\"role\": \"tool\", \"content\": "
                             "\"{\\\"temp\\\": %d}\"}, {\"role\": \"assistant\", \"content\": \"It is %d degrees in "
                             "%s.\"}]}\n",
                             city, city, temp, temp, city);
    }
    datagen_write(dir, "tools.jsonl", text, n);
    free(text);
    char *data = datagen_path(dir, "tools.jsonl"), *run = datagen_path(dir, "tool-run"), *out = NULL;
    int rc = ckpt_cli(&out,
                      "sft --chat-template minimind-3 --init-from %s --data %s --threads 1 --batch 4 --seq 1024 "
                      "--steps 160 --eval-every 0 --out %s",
                      base, data, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out), free(data), free(base);
    return run;
}

/* node-llama-cpp (LlamaChat, the GGUF's template through JinjaTemplateChatWrapper) continues the
 * model's turn after a call of the tool and its result: its context holds the ids tapegrad's
 * chat gives the same conversation with the thinking open (as node-llama-cpp opens it), the
 * call and the result written alike, and then the very ids tapegrad draws, greedy, with no
 * penalty. */
Test(clients, llama_cpp_chats_over_a_tool_call_and_its_result_as_tapegrad_chat, .init = setup, .fini = teardown,
     .timeout = 300) {
    require_clients("node-llama-cpp's chat over a tool call on the GGUF export", teardown);
    enum { MAX_REPLY = 32 };
    char *run = make_tool_run(), *gguf = datagen_path(dir, "tools.gguf"), *out = NULL, args[8400];
    int rc = ckpt_cli(&out, "ckpt export %s --gguf %s", run, gguf);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *request = datagen_path(dir, "tool-request.json");
    FILE *f = fopen(request, "w");
    cr_assert_not_null(f);
    fprintf(
        f,
        "{\"system\": \"" TOOL_SYSTEM "\", \"question\": \"How warm is it in Oslo?\", \"max_tokens\": %d, "
        "\"functions\": {\"get_weather\": {\"description\": \"temperature in degrees\", \"params\": " TOOL_PARAMS
        "}}, \"call\": {\"name\": \"get_weather\", \"params\": {\"city\": \"Oslo\"}}, \"result\": {\"temp\": 12}}\n",
        MAX_REPLY);
    fclose(f);
    snprintf(args, sizeof args, "%s %s", gguf, request);
    cJSON *json = run_client("tool_chat_check.mjs", args);

    /* tapegrad: the same conversation, the reply drawn as `tapegrad chat --think --temperature 0
     * --repetition-penalty 1` draws it */
    static const char line[] =
        "{\"conversations\": [{\"role\": \"system\", \"content\": \"" TOOL_SYSTEM "\", \"tools\": " TOOL_DEFS
        "}, {\"role\": \"user\", \"content\": \"How warm is it in Oslo?\"}, {\"role\": \"assistant\", \"content\": "
        "null, \"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]}, {\"role\": "
        "\"tool\", \"content\": \"{\\\"temp\\\": 12}\"}]}";
    TgJsonlLine l;
    tg_jsonl_line_of(line, sizeof line - 1, 1, &l);
    TgToolConversation conv = {0};
    char why[320];
    cr_assert(tg_tool_conversation_parse(&l, &conv, why, sizeof why), "%s", why);
    TgRun r;
    cr_assert_eq(tg_run_open_existing(run, &r), TG_OK, "%s", tg_error_message());
    TgChatTokens ct;
    cr_assert_eq(tg_chat_tokens_find(&r.tok, run, &ct), TG_OK);
    TgChatIds prompt = {0};
    cr_assert_eq(tg_tool_prompt_ids(&r.tok, &ct, &conv, true, &prompt), TG_OK);
    TestTape tt;
    test_tape_init(&tt, 1);
    TgSampleOptions greedy = {.temperature = 0, .repetition_penalty = 1.0};
    TgRng rng;
    tg_rng_seed(&rng, 1);
    TgSampler sampler = {&r.model, &tt.tape, &greedy, &rng};
    int32_t *ids = malloc((prompt.n + MAX_REPLY + 1) * sizeof *ids);
    int64_t total = tg_sample_generate(&sampler, prompt.ids, (int64_t)prompt.n, MAX_REPLY, ct.im_end, ids);
    cr_assert(total > (int64_t)prompt.n && ids[total - 1] == ct.im_end, "the reply wants its <|im_end|> within %d ids",
              MAX_REPLY);
    total--; /* llama.cpp's context stops before it */
    size_t drawn = (size_t)total - prompt.n;
    char *reply;
    size_t reply_len;
    cr_assert_eq(tg_tokenizer_decode(&r.tok, ids + prompt.n, drawn, &reply, &reply_len), TG_OK);
    const char *theirs = cJSON_GetObjectItem(json, "reply")->valuestring;
    fprintf(stderr, "after the tool's result: tapegrad \"%s\" (%zu ids), llama.cpp \"%s\"\n", reply, drawn, theirs);
    cr_expect(drawn > 2, "a reply of %zu ids tests little", drawn);
    cr_expect_str_eq(reply, theirs);
    expect_ids(cJSON_GetObjectItem(json, "context"), ids, (size_t)total,
               "the context: the conversation with the call and its result, then the reply");
    free(reply), free(ids);
    test_tape_free(&tt);
    tg_chat_ids_free(&prompt);
    tg_tool_conversation_free(&conv);
    tg_run_close(&r);
    cJSON_Delete(json);
    free(run), free(gguf), free(request);
}
