/* Gradient and activation statistics (inspect/inspect.c), the probe set through the trainer's
 * hooks, and the HTML report (inspect/report.c), through the library. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datagen.h"
#include "tapegrad/rng.h"
#include "report_check.h"
#include "testutil.h"
#include "inspect/inspect.h"
#include "inspect/report.h"
#include "inspect/run_history.h"
#include "cli/study/seed_stats.h"
#include "tapegrad/model.h"
#include "train/trainer.h"

/* ---- dead units and zeros on constructed activations ---------------------------------------- */

Test(ffn_stats, dead_units_of_a_constructed_matrix) {
    /* 4 tokens x 6 units; units 1 and 4 are zero for every token, unit 2 only for some */
    const float a[4][6] = {
        {0.5f, 0.0f, 0.0f, -1.0f, 0.0f, 2.0f},
        {0.1f, 0.0f, 3.0f, 0.0f, 0.0f, 1.0f},
        {0.0f, 0.0f, 0.0f, 0.2f, 0.0f, 1.0f},
        {0.7f, 0.0f, 0.0f, 0.4f, 0.0f, 1e-30f}, /* a tiny value is alive, not dead */
    };
    TgFfnActStats s;
    tg_ffn_stats_init(&s, 6);
    tg_ffn_stats_add_rows(&s, &a[0][0], 4);
    cr_assert_eq(tg_ffn_stats_dead_units(&s), 2);
    cr_assert_float_eq(tg_ffn_stats_dead_fraction(&s), 2.0 / 6.0, 1e-12);
    int zeros = 0;
    double sum = 0, sum_sq = 0;
    for (int t = 0; t < 4; t++)
        for (int j = 0; j < 6; j++) zeros += a[t][j] == 0.0f, sum += a[t][j], sum_sq += (double)a[t][j] * a[t][j];
    cr_assert_eq(zeros, 13);
    cr_assert_float_eq(tg_ffn_stats_zero_fraction(&s), 13.0 / 24.0, 1e-12);
    double mean = sum / 24.0;
    cr_assert_float_eq(tg_ffn_stats_mean(&s), mean, 1e-9);
    cr_assert_float_eq(tg_ffn_stats_std(&s), sqrt(sum_sq / 24.0 - mean * mean), 1e-9);
    tg_ffn_stats_free(&s);
}

Test(ffn_stats, a_unit_alive_in_any_batch_is_not_dead) {
    const float first[2][3] = {{0, 0, 1}, {0, 0, 2}};  /* units 0, 1 zero here */
    const float second[1][3] = {{0, 5, 0}};            /* unit 1 fires here */
    TgFfnActStats s;
    tg_ffn_stats_init(&s, 3);
    cr_assert_eq(tg_ffn_stats_dead_units(&s), 0, "no token seen: nothing can be called dead");
    tg_ffn_stats_add_rows(&s, &first[0][0], 2);
    cr_assert_eq(tg_ffn_stats_dead_units(&s), 2);
    tg_ffn_stats_add_rows(&s, &second[0][0], 1);
    cr_assert_eq(tg_ffn_stats_dead_units(&s), 1);
    cr_assert_eq(s.tokens, 3);
    tg_ffn_stats_reset(&s);
    cr_assert_eq(s.tokens, 0);
    cr_assert_eq(tg_ffn_stats_dead_units(&s), 0);
    tg_ffn_stats_free(&s);
}

Test(ffn_stats, zero_gradient_rows_of_a_constructed_gradient) {
    float data[4 * 3] = {0}, grad[4 * 3] = {1, 2, 3, 0, 0, 0, 0, -1e-20f, 0, 0, 0, 0};
    TgTensor w = {.data = data, .grad = grad};
    tg_tensor_set_shape(&w, 2, (int64_t[]){4, 3});
    cr_assert_float_eq(tg_zero_grad_row_fraction(&w), 0.5, 1e-12); /* rows 1 and 3 */
    TgParamStats p = tg_param_stats(&w);
    cr_assert_float_eq(p.grad_norm, sqrt(14.0), 1e-6);
    cr_assert_float_eq(p.grad_max_abs, 3.0, 1e-12);
    cr_assert_float_eq(p.weight_norm, 0.0, 1e-12);
}

/* ---- a whole model at initialisation ------------------------------------------------------- */

static void tiny_config(TgModelConfig *c, TgFfnKind ffn) {
    cr_assert_eq(tg_model_preset("tiny", c), TG_OK);
    c->vocab = 61;
    c->seq_len = 16;
    c->ffn = ffn;
    c->hidden = ffn == TG_FFN_RELU ? 4 * c->dim : tg_model_swiglu_hidden(c->dim);
}

/* Forward + backward of the initial model on random tokens through tg_model_inspect_batches. */
static void inspect_at_init(TgFfnKind ffn, TgModelInspection *mi, TgModel *m, float **weights_before) {
    TgModelConfig c;
    tiny_config(&c, ffn);
    tg_model_build(m, &c);
    tg_model_init_weights(m, 7);
    *weights_before = malloc(m->params.total * sizeof(float));
    memcpy(*weights_before, m->params.data, m->params.total * sizeof(float));
    int64_t k = 2, B = 4, T = c.seq_len;
    int32_t *in = malloc((size_t)(k * B * T) * sizeof(int32_t)), *tg = malloc((size_t)(k * B * T) * sizeof(int32_t));
    TgRng rng;
    tg_rng_seed(&rng, 99);
    for (int64_t i = 0; i < k * B * T; i++) {
        in[i] = (int32_t)tg_rng_below(&rng, (uint64_t)c.vocab);
        tg[i] = (int32_t)tg_rng_below(&rng, (uint64_t)c.vocab);
    }
    TestTape tt;
    test_tape_init(&tt, 1);
    tg_model_inspection_init(mi, m);
    double loss = tg_model_inspect_batches(m, &tt.tape, &(TgEvalBatches){in, tg, NULL, k, B, T}, mi);
    cr_assert(fabs(loss - log((double)c.vocab)) < 0.3, "initial loss %.3f, ln(vocab) %.3f", loss, log((double)c.vocab));
    test_tape_free(&tt);
    free(in);
    free(tg);
}

Test(model_inspection, relu_hidden_is_about_half_zero_at_init) {
    TgModel m;
    TgModelInspection mi;
    float *before;
    inspect_at_init(TG_FFN_RELU, &mi, &m, &before);
    for (int64_t l = 0; l < mi.n_layers; l++) {
        double z = tg_ffn_stats_zero_fraction(&mi.ffn[l]);
        cr_assert(z >= 0.4 && z <= 0.6, "layer %lld: ReLU zero fraction %.4f outside [0.4, 0.6]", (long long)l, z);
        cr_assert_eq(mi.ffn[l].tokens, 2 * 4 * 16);
        /* with 128 tokens a unit of a random init is almost surely positive somewhere */
        cr_assert(tg_ffn_stats_dead_fraction(&mi.ffn[l]) < 0.05);
    }
    tg_model_inspection_free(&mi);
    free(before);
    tg_model_free(&m);
}

Test(model_inspection, swiglu_hidden_has_no_exact_zeros_at_init) {
    TgModel m;
    TgModelInspection mi;
    float *before;
    inspect_at_init(TG_FFN_SWIGLU, &mi, &m, &before);
    for (int64_t l = 0; l < mi.n_layers; l++) {
        double z = tg_ffn_stats_zero_fraction(&mi.ffn[l]);
        cr_assert(z < 0.01, "layer %lld: SwiGLU exact-zero fraction %.4f", (long long)l, z);
        cr_assert_eq(tg_ffn_stats_dead_units(&mi.ffn[l]), 0);
        cr_assert_float_eq(mi.w1_zero_grad_rows[l], 0.0, 1e-12);
    }
    tg_model_inspection_free(&mi);
    free(before);
    tg_model_free(&m);
}

Test(model_inspection, inspecting_changes_no_weight_and_fills_every_gradient) {
    TgModel m;
    TgModelInspection mi;
    float *before;
    inspect_at_init(TG_FFN_RELU, &mi, &m, &before);
    cr_assert(memcmp(before, m.params.data, m.params.total * sizeof(float)) == 0, "a weight changed");
    cr_assert_eq(mi.n_params, m.params.count);
    for (int i = 0; i < mi.n_params; i++) {
        cr_assert(mi.params[i].grad_norm > 0, "%s has a zero gradient", m.params.tensors[i]->name);
        cr_assert(mi.params[i].grad_max_abs <= mi.params[i].grad_norm + 1e-12);
    }
    tg_model_inspection_free(&mi);
    free(before);
    tg_model_free(&m);
}

Test(model_inspection, zero_share_at_init_on_random_inputs_is_a_half_for_relu_and_none_for_swiglu) {
    TgModelConfig c;
    tiny_config(&c, TG_FFN_RELU);
    /* 512 rows x 256 units x 2 layers: the share of a fair coin's heads within +-0.03 */
    double relu = tg_ffn_zero_fraction_at_init(&c, 3, 512, 1);
    cr_assert(relu > 0.47 && relu < 0.53, "ReLU zeros at init %.4f", relu);
    tiny_config(&c, TG_FFN_SWIGLU);
    double swiglu = tg_ffn_zero_fraction_at_init(&c, 3, 512, 1);
    cr_assert(swiglu < 1e-4, "SwiGLU zeros at init %.6f", swiglu);
    cr_assert_eq(tg_ffn_zero_fraction_at_init(&c, 3, 512, 1), swiglu, "the same seed gives the same figure");
}

Test(model_inspection, parameter_count_from_the_config_matches_the_model) {
    for (int kind = 0; kind < 2; kind++) {
        TgModelConfig c;
        tiny_config(&c, (TgFfnKind)kind);
        c.n_kv_heads = 1; /* GQA: k and v smaller than q */
        TgModel m;
        tg_model_build(&m, &c);
        cr_assert_eq(tg_model_config_param_count(&c), tg_model_param_count(&m), "%s", tg_ffn_kind_name(c.ffn));
        int64_t ffn = 0;
        for (int64_t l = 0; l < c.n_layers; l++)
            ffn += m.layers[l].w1->numel + m.layers[l].w2->numel + (m.layers[l].w3 ? m.layers[l].w3->numel : 0);
        cr_assert_eq(tg_model_config_ffn_param_count(&c), ffn);
        tg_model_free(&m);
    }
}

/* ---- the HTML report ------------------------------------------------------------------------ */

static char *dir;
static void make_dir(void) { dir = datagen_tempdir(); }
static void remove_dir(void) {
    datagen_remove_tree(dir);
    free(dir);
}
TestSuite(report, .init = make_dir, .fini = remove_dir);

Test(report, html_is_balanced_offline_and_holds_every_series) {
    TgReport *r = tg_report_new("a <test> & \"report\"");
    tg_report_heading(r, "section </script> one");
    tg_report_text(r, "text with < and > and & and a %d", 42);
    static const char *const header[] = {"name", "value"};
    TgReportTable *t = tg_report_table(r, "a table", 2, header);
    tg_report_cell(t, "x<y");
    tg_report_cell(t, "%.2f", 1.5);
    TgReportChart *c = tg_report_chart(r, "linear", "step", "loss", false);
    TgReportSeries *a = tg_report_series(c, "alpha <a&b>", 0, false), *b = tg_report_series(c, "beta", 1, true);
    for (int i = 0; i < 50; i++) {
        tg_report_point(a, i, 3.0 - 0.01 * i);
        tg_report_point(b, i, i % 7 == 0 ? NAN : 2.0); /* NaN points are skipped */
    }
    TgReportChart *lg = tg_report_chart(r, "log", "step", "norm", true);
    TgReportSeries *g = tg_report_series(lg, "gamma", 2, false);
    tg_report_point(g, 1, 1e-3);
    tg_report_point(g, 2, 0.0); /* not on a log axis: a gap */
    tg_report_point(g, 3, 10.0);
    tg_report_series(lg, "empty", 3, false);
    char *html_path = datagen_path(dir, "r.html"), *jsonl_path = datagen_path(dir, "r.jsonl");
    cr_assert_eq(tg_report_write_html(r, html_path), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_report_write_series_jsonl(r, jsonl_path), TG_OK, "%s", tg_error_message());
    tg_report_free(r);

    char *html = check_read_file(html_path, NULL);
    cr_assert_not_null(html);
    char why[256];
    cr_assert(html_tags_balanced(html, why, sizeof why), "%s", why);
    cr_assert_null(strstr(html, "http://"));
    cr_assert_null(strstr(html, "https://"));
    cr_assert_null(strstr(html, "<test>"), "the title must be escaped");
    cJSON *data = html_report_data(html);
    cr_assert_not_null(data, "no parsable JSON data block");
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(data, "title")), "a <test> & \"report\"");
    cr_assert_eq(html_series_drawn(html, data, why, sizeof why), 4, "%s", why);
    cr_assert(report_has_series(data, "alpha <a&b>", 50));
    cr_assert(report_has_series(data, "beta", 42) && !report_has_series(data, "beta", 43));
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(data, "tables")), 1);
    cJSON_Delete(data);

    /* the series file: one parsable line per series */
    FILE *f = fopen(jsonl_path, "r");
    cr_assert_not_null(f);
    char line[8192];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        cr_assert_not_null(o, "line %d does not parse", lines + 1);
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(o, "chart")) && cJSON_IsString(cJSON_GetObjectItem(o, "name")));
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "x")), cJSON_GetArraySize(cJSON_GetObjectItem(o, "y")));
        cJSON_Delete(o);
        lines++;
    }
    fclose(f);
    cr_assert_eq(lines, 4);
    free(html);
    free(html_path);
    free(jsonl_path);
}

Test(report, the_tag_checker_rejects_broken_markup) {
    char why[128];
    cr_assert(html_tags_balanced("<p>a<br><b>b</b></p><svg><path d=\"M 1 > 2\"/></svg>", why, sizeof why), "%s", why);
    cr_assert_not(html_tags_balanced("<p><b>a</p></b>", why, sizeof why));
    cr_assert_not(html_tags_balanced("<div>", why, sizeof why));
    cr_assert_not(html_tags_balanced("<p>1 < 2</p>", why, sizeof why));
    cr_assert_not(html_tags_balanced("<script>x", why, sizeof why));
}

/* ---- the probe set: dead units on fixed held-out batches, through the trainer's hooks -------- */

TestSuite(probe, .init = make_dir, .fini = remove_dir, .timeout = 60);

/* A 4-step tiny ReLU run into dir/NAME, statistics at steps 1, 2, 4 with a probe of
 * probe_batches fixed val batches (0: none). */
static void train_logged(const char *name, int64_t probe_batches, TgRunHistory *h) {
    char *text = datagen_english(5, 30000);
    datagen_write(dir, "text.txt", text, strlen(text));
    free(text);
    char *data = datagen_path(dir, "text.txt"), *out = datagen_path(dir, name);
    TgTrainOptions t;
    tg_train_options_defaults(&t);
    t.spec.preset = TG_PRESET_TINY, t.spec.ffn = TG_FFN_RELU, t.spec.data_path = data, t.invocation.out_dir = out;
    t.schedule.steps = 4, t.schedule.batch = 2, t.schedule.eval_every = 2, t.schedule.eval_batches = 1,
    t.schedule.log_grads = 2, t.schedule.sample_tokens = 0;
    t.schedule.ckpt_every = 0, t.schedule.threads = 1;
    TgGradLogger g;
    TgTrainHooks hooks = tg_grad_logger_hooks(&g, t.schedule.log_grads, probe_batches);
    TgTrainRequest req;
    assert_ok(tg_train_options_request(&t, &req));
    assert_ok(tg_train_run(&req, NULL, &hooks, NULL));
    tg_grad_logger_close(&g);
    assert_ok(tg_run_history_load(out, h));
    free(data);
    free(out);
}

Test(probe, logged_on_fixed_val_batches_without_changing_training) {
    TgRunHistory plain, probed;
    train_logged("plain", 0, &plain);
    train_logged("probed", 3, &probed);
    cr_assert_not(plain.has_probe);
    cr_assert(probed.has_probe);
    cr_assert_eq(probed.n_logs, 3);
    /* the probe runs nothing the update sees: the same losses, bit for bit */
    cr_assert_eq(probed.n_metrics, plain.n_metrics);
    for (int64_t i = 0; i < plain.n_metrics; i++)
        cr_assert_eq(probed.metrics[i].loss, plain.metrics[i].loss, "step %lld", (long long)plain.metrics[i].step);
    char *path = datagen_path(dir, "probed/grads.jsonl");
    char *text = check_read_file(path, NULL);
    cr_assert_not_null(text);
    int lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *ffn = cJSON_GetObjectItem(o, "ffn");
        for (int l = 0; l < cJSON_GetArraySize(ffn); l++) {
            const cJSON *f = cJSON_GetArrayItem(ffn, l);
            /* 3 batches of 2 sequences of the tiny preset's 32 tokens */
            cr_assert_eq(cJSON_GetObjectItem(f, "probe_tokens")->valueint, 3 * 2 * 32);
            double z = cJSON_GetObjectItem(f, "probe_zero_frac")->valuedouble;
            cr_assert(z > 0.2 && z < 0.8, "ReLU zeros on the probe set, layer %d: %.3f", l, z);
            cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(f, "probe_dead_frac")));
        }
        cJSON_Delete(o);
    }
    cr_assert_eq(lines, 3);
    free(text);
    free(path);
    tg_run_history_free(&plain);
    tg_run_history_free(&probed);
}

Test(report, bands_are_drawn_under_their_series_and_carried_in_the_data) {
    TgReport *r = tg_report_new("bands");
    TgReportChart *c = tg_report_chart(r, "spread over seeds", "step", "loss", false);
    TgReportSeries *mean = tg_report_series(c, "mean", 0, false), *plain = tg_report_series(c, "plain", 1, true);
    for (int i = 0; i < 6; i++) {
        /* point 2 has no range: the band is drawn as two pieces around it */
        tg_report_point_range(mean, i, 2.0 + i, i == 2 ? NAN : 1.5 + i, 2.5 + i);
        tg_report_point(plain, i, 1.0);
    }
    char *path = datagen_path(dir, "bands.html");
    cr_assert_eq(tg_report_write_html(r, path), TG_OK, "%s", tg_error_message());
    tg_report_free(r);
    char *html = check_read_file(path, NULL);
    char why[256];
    cr_assert(html_tags_balanced(html, why, sizeof why), "%s", why);
    cJSON *data = html_report_data(html);
    cr_assert_eq(html_series_drawn(html, data, why, sizeof why), 2, "%s", why);
    cr_assert_null(strstr(html, "data-band=\"plain\""), "a series without ranges has no band");
    const char *band = strstr(html, "data-band=\"mean\"");
    cr_assert_not_null(band);
    const char *end = strchr(band + strlen("data-band=\"mean\" d=\""), '"');
    int pieces = 0;
    for (const char *p = band; p < end; p++) pieces += *p == 'Z';
    cr_assert_eq(pieces, 2, "the band has %d pieces", pieces);
    /* the band is under the line: drawn first */
    cr_assert_lt(band, strstr(html, "data-series=\"mean\""));
    const cJSON *s = report_find_series(data, "mean", 6);
    const cJSON *lo = cJSON_GetObjectItem(s, "lo"), *hi = cJSON_GetObjectItem(s, "hi");
    cr_assert_eq(cJSON_GetArraySize(lo), 6);
    cr_assert(cJSON_IsNull(cJSON_GetArrayItem(lo, 2)) && cJSON_IsNull(cJSON_GetArrayItem(hi, 2)));
    cr_assert_float_eq(cJSON_GetArrayItem(lo, 5)->valuedouble, 6.5, 1e-12);
    cr_assert_float_eq(cJSON_GetArrayItem(hi, 0)->valuedouble, 2.5, 1e-12);
    cr_assert_null(cJSON_GetObjectItem(report_find_series(data, "plain", 6), "lo"));
    cJSON_Delete(data);
    free(html);
    free(path);
}

Test(report, axes_of_huge_values_have_a_bounded_number_of_ticks, .timeout = 20) {
    /* 1e17 and the next double up are 16 apart; the tick step (5) is under half of that, so a
     * tick loop that adds the step to a value would never leave 1e17 */
    double a = 1e17, b = nextafter(1e17, INFINITY);
    TgReport *r = tg_report_new("huge");
    TgReportSeries *s = tg_report_series(tg_report_chart(r, "adjacent doubles", "x", "y", false), "s", 0, false);
    tg_report_point(s, a, a);
    tg_report_point(s, b, b);
    char *path = datagen_path(dir, "huge.html");
    cr_assert_eq(tg_report_write_html(r, path), TG_OK, "%s", tg_error_message());
    tg_report_free(r);
    char *html = check_read_file(path, NULL);
    int lines = 0;
    for (const char *p = html; (p = strstr(p, "<line")) != NULL; p++) lines++;
    cr_assert(lines >= 2 && lines <= 2 * 40 + 1, "%d grid lines", lines);
    free(html);
    free(path);
}

/* The tick labels of the chart titled `title` in html, in order: y first, then x. */
static void chart_ticks(const char *html, const char *title, char *out, size_t cap) {
    const char *at = strstr(html, title), *end = at ? strstr(at, "</svg>") : NULL;
    cr_assert(at && end, "no chart %s", title);
    out[0] = '\0';
    for (const char *p = at; (p = strstr(p, "<text x=\"")) && p < end; p++) {
        const char *tag_end = strchr(p, '>');
        if (!strstr(p, "text-anchor=\"end\"") && !strstr(p, "text-anchor=\"middle\">")) continue;
        if (strstr(p, "rotate(") && strstr(p, "rotate(") < tag_end) continue; /* the y axis's label */
        size_t n = strcspn(tag_end + 1, "<");
        snprintf(out + strlen(out), cap - strlen(out), "%.*s|", (int)n, tag_end + 1);
    }
}

/* Axes a reader can read: an all-zero series from 0 to 1 (no axis below a count that cannot be
 * negative), one point at step 40 on an axis from 0, and a log x axis labelled with the values. */
Test(report, flat_and_single_point_series_and_log_x_axes_read_as_values) {
    TgReport *r = tg_report_new("axes");
    TgReportSeries *zeros = tg_report_series(tg_report_chart(r, "zeros", "step", "dead units", false), "z", 0, false);
    for (int i = 1; i <= 5; i++) tg_report_point(zeros, 10 * i, 0.0);
    tg_report_point(tg_report_series(tg_report_chart(r, "one point", "step", "val loss", false), "v", 0, false), 40, 2.5);
    TgReportChart *lr = tg_report_chart(r, "sweep", "learning rate", "val loss", false);
    tg_report_chart_log_x(lr);
    TgReportSeries *sweep = tg_report_series(lr, "s", 0, false);
    const double lrs[] = {1e-3, 3e-3, 1e-2, 3e-2};
    for (int i = 0; i < 4; i++) tg_report_point(sweep, lrs[i], 2.0 + i);
    char *path = datagen_path(dir, "axes.html");
    cr_assert_eq(tg_report_write_html(r, path), TG_OK, "%s", tg_error_message());
    tg_report_free(r);
    char *html = check_read_file(path, NULL), ticks[2048];
    chart_ticks(html, ">zeros<", ticks, sizeof ticks);
    cr_expect(strncmp(ticks, "0|0.2|0.4|0.6|0.8|1|", 20) == 0 && !strchr(ticks, '-'), "%s", ticks);
    chart_ticks(html, ">one point<", ticks, sizeof ticks);
    cr_expect(strstr(ticks, "|0|") && strstr(ticks, "|40|") && !strstr(ticks, "39.6"), "%s", ticks);
    chart_ticks(html, ">sweep<", ticks, sizeof ticks);
    cr_expect(strstr(ticks, "|0.001|0.002|0.005|0.01|0.02|"), "%s", ticks);
    cr_expect(strstr(html, "learning rate (log)"), "the log axis says so");
    cJSON *data = html_report_data(html);
    const cJSON *s = report_find_series(data, "s", 4);
    cr_expect_float_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(s, "x"), 0)->valuedouble, 1e-3, 1e-15, "the data holds the rates");
    cJSON_Delete(data);
    free(html);
    free(path);
}

/* ---- spreads over seeds ------------------------------------------------------------------- */

Test(seed_stats, spread_leaves_out_and_counts_runs_without_a_value) {
    const double v[] = {2.0, NAN, 1.0, 3.0, INFINITY};
    SeedSpread s = seed_spread(v, 5);
    cr_assert_eq(s.n, 3);
    cr_assert_eq(s.missing, 2);
    cr_assert_float_eq(s.mean, 2.0, 1e-12);
    cr_assert_float_eq(s.std, 1.0, 1e-12); /* sample std of 1, 2, 3 */
    cr_assert_float_eq(s.min, 1.0, 1e-12);
    cr_assert_float_eq(s.max, 3.0, 1e-12);
    s = seed_spread(v, 1);
    cr_assert(s.n == 1 && s.std == 0 && s.mean == 2.0);
    s = seed_spread(v + 1, 1);
    cr_assert(s.n == 0 && s.missing == 1 && isnan(s.mean));
}

Test(seed_stats, separated_ranges_and_their_chance) {
    const double relu[] = {1.0, 2.0, 3.0}, swiglu[] = {4.0, 5.0, 6.0}, mixed[] = {2.5, 5.0, 6.0};
    SeedComparison c = seed_compare(relu, 3, swiglu, 3);
    cr_assert(c.testable);
    cr_assert_eq(c.separated, -1);
    cr_assert_float_eq(c.diff, -3.0, 1e-12);
    cr_assert_float_eq(c.pooled_std, 1.0, 1e-12);
    cr_assert_float_eq(c.effect, 3.0, 1e-12);
    cr_assert_float_eq(c.chance, 2.0 / 20.0, 1e-12); /* 2 of the C(6,3) = 20 splits */
    cr_assert_eq(seed_compare(swiglu, 3, relu, 3).separated, 1);
    cr_assert_eq(seed_compare(relu, 3, mixed, 3).separated, 0, "2.5 lies inside the other range");
    cr_assert_float_eq(seed_compare(relu, 2, swiglu, 2).chance, 2.0 / 6.0, 1e-12);
    const double four_a[] = {1, 2, 3, 4}, four_b[] = {5, 6, 7, 8};
    cr_assert_float_eq(seed_compare(four_a, 4, four_b, 4).chance, 2.0 / 70.0, 1e-12);
    char verdict[160];
    seed_comparison_verdict(&c, "relu", "swiglu", verdict, sizeof verdict);
    cr_assert(strstr(verdict, "yes: every relu seed ended below every swiglu seed (chance 10%"), "%s", verdict);
    SeedComparison overlap = seed_compare(relu, 3, mixed, 3);
    seed_comparison_verdict(&overlap, "relu", "swiglu", verdict, sizeof verdict);
    cr_assert_str_eq(verdict, "no: the seed ranges overlap");
}

Test(seed_stats, a_diverged_run_counts_as_worst_and_one_seed_decides_nothing) {
    const double finished[] = {1.0, 2.0, 3.0}, with_nan[] = {4.0, NAN, 5.0}, nan_low[] = {0.5, NAN};
    SeedComparison c = seed_compare(finished, 3, with_nan, 3);
    cr_assert_eq(c.separated, -1, "a diverged run is worse than every finished one");
    cr_assert_float_eq(c.diff, 2.0 - 4.5, 1e-12);
    cr_assert_eq(seed_compare(nan_low, 2, finished, 3).separated, 0, "its NaN is above 3, its 0.5 below 1");
    SeedComparison one = seed_compare(finished, 1, with_nan, 1);
    cr_assert_not(one.testable);
    cr_assert_eq(one.separated, 0);
    char verdict[160];
    seed_comparison_verdict(&one, "relu", "swiglu", verdict, sizeof verdict);
    cr_assert(strstr(verdict, "cannot say"), "%s", verdict);
}
