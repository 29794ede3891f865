/* Checkpoints of a program's own parameter set (tapegrad/param_checkpoint.h): an exact round trip of
 * weights, both AdamW moments and the step into a store built in another order; a tag, a model
 * checkpoint, a missing, extra or reshaped tensor and a damaged file refused with the file's name,
 * the store untouched; a parameter set refused where a model is expected (the API and
 * `tapegrad ckpt export`); `tapegrad ckpt info` showing the tag. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptutil.h"
#include "datagen.h"
#include "tapegrad/rng.h"
#include "testutil.h"
#include "tapegrad/param_checkpoint.h"

static char *dir, *path;

static void setup(void) {
    dir = datagen_tempdir();
    path = datagen_path(dir, "mlp.tgck");
}

static void teardown(void) {
    datagen_remove_tree(dir);
    free(dir), free(path);
}

TestSuite(param_checkpoint, .init = setup, .fini = teardown, .timeout = 60);

/* An MLP's store: w1 [hidden, 3], w2 [2, hidden] and a gain [hidden], added in `order` (0 or 1). */
static void build_store(TgParamStore *ps, int64_t hidden, int order) {
    tg_params_init(ps);
    for (int i = 0; i < 3; i++) {
        int which = order ? 2 - i : i;
        if (which == 0) tg_params_add(ps, "w1", 2, TG_SHAPE(hidden, 3), true, TG_PARAM_INIT_NORMAL(0.5f));
        if (which == 1) tg_params_add(ps, "w2", 2, TG_SHAPE(2, hidden), true, TG_PARAM_INIT_NORMAL(0.5f));
        if (which == 2) tg_params_add(ps, "gain", 1, TG_SHAPE(hidden), false, TG_PARAM_INIT_ONES);
    }
    tg_params_finalize(ps);
}

/* Weights, m and v all different and non-zero, as after some training. */
static void fill_store(TgParamStore *ps, uint64_t seed) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    tg_rng_fill_uniform(&rng, ps->data, ps->total, -1.0f, 1.0f);
    tg_rng_fill_uniform(&rng, ps->m, ps->total, -0.1f, 0.1f);
    tg_rng_fill_uniform(&rng, ps->v, ps->total, 0.0f, 0.01f);
}

/* Every named tensor of a equals b's of the same name, bitwise, in weights, m and v. */
static bool stores_equal(const TgParamStore *a, const TgParamStore *b) {
    if (a->count != b->count) return false;
    for (int i = 0; i < a->count; i++) {
        int j = tg_params_index(b, a->tensors[i]->name);
        if (j < 0) return false;
        size_t n = (size_t)a->tensors[i]->numel * sizeof(float), oa = a->offsets[i], ob = b->offsets[j];
        if (memcmp(a->data + oa, b->data + ob, n) || memcmp(a->m + oa, b->m + ob, n) || memcmp(a->v + oa, b->v + ob, n))
            return false;
    }
    return true;
}

Test(param_checkpoint, round_trip_is_exact_into_a_store_built_in_another_order) {
    TgParamStore a, b;
    build_store(&a, 5, 0);
    build_store(&b, 5, 1);
    fill_store(&a, 1);
    fill_store(&b, 2);
    assert_ok(tg_param_checkpoint_save(path, &a, "mlp-3x5x2", 17));
    int64_t step = -1;
    assert_ok(tg_param_checkpoint_load(path, &b, "mlp-3x5x2", &step));
    cr_expect_eq(step, 17);
    cr_expect(stores_equal(&a, &b), "weights or moments differ after the round trip");
    /* a NULL tag loads whatever tag the file has */
    fill_store(&b, 3);
    assert_ok(tg_param_checkpoint_load(path, &b, NULL, NULL));
    cr_expect(stores_equal(&a, &b));
    tg_params_free(&a);
    tg_params_free(&b);
}

/* A load that must fail leaves the store as it was. */
static void expect_refused(TgParamStore *ps, const char *file, const char *tag, TgStatus status, const char *needle) {
    fill_store(ps, 99);
    TgParamStore before;
    build_store(&before, ps->tensors[0]->shape[0], 0);
    memcpy(before.data, ps->data, ps->total * sizeof(float));
    memcpy(before.m, ps->m, ps->total * sizeof(float));
    memcpy(before.v, ps->v, ps->total * sizeof(float));
    assert_fails(tg_param_checkpoint_load(file, ps, tag, NULL), status, needle);
    cr_expect(strstr(tg_error_message(), file) != NULL, "the message does not name the file: %s", tg_error_message());
    cr_expect(stores_equal(ps, &before), "a refused load changed the store");
    tg_params_free(&before);
}

Test(param_checkpoint, another_tag_shape_or_set_of_tensors_is_refused) {
    TgParamStore a, b, wider, fewer;
    build_store(&a, 5, 0);
    fill_store(&a, 1);
    assert_ok(tg_param_checkpoint_save(path, &a, "mlp-v1", 3));
    build_store(&b, 5, 0);
    expect_refused(&b, path, "mlp-v2", TG_ERR_MISMATCH, "tagged 'mlp-v1', not 'mlp-v2'");
    build_store(&wider, 6, 0);
    expect_refused(&wider, path, NULL, TG_ERR_MISMATCH, "tensor 'w1' (weight) has shape [5, 3], the model's is [6, 3]");
    /* the file holds a tensor the store lacks */
    tg_params_init(&fewer);
    tg_params_add(&fewer, "w1", 2, TG_SHAPE(5, 3), true, TG_PARAM_INIT_ZEROS);
    tg_params_finalize(&fewer);
    assert_fails(tg_param_checkpoint_load(path, &fewer, NULL, NULL), TG_ERR_MISMATCH, "tensor 'w2' (weight) is not part of");
    /* the store holds a tensor the file lacks */
    char *small_path = datagen_path(dir, "w1-only.tgck");
    fill_store(&fewer, 4);
    assert_ok(tg_param_checkpoint_save(small_path, &fewer, "mlp-v1", 1));
    expect_refused(&b, small_path, NULL, TG_ERR_MISMATCH, "tensor 'w2' is missing");
    free(small_path);
    tg_params_free(&a), tg_params_free(&b), tg_params_free(&wider), tg_params_free(&fewer);
}

Test(param_checkpoint, bad_tags_damaged_files_and_model_checkpoints_are_refused) {
    TgParamStore a;
    build_store(&a, 4, 0);
    char long_tag[80];
    memset(long_tag, 'x', sizeof long_tag - 1);
    long_tag[sizeof long_tag - 1] = '\0';
    assert_fails(tg_param_checkpoint_save(path, &a, "", 0), TG_ERR_ARG, "1 to 63 bytes");
    assert_fails(tg_param_checkpoint_save(path, &a, long_tag, 0), TG_ERR_ARG, "1 to 63 bytes");
    assert_fails(tg_param_checkpoint_load(path, &a, NULL, NULL), TG_ERR_IO, "cannot open");
    assert_ok(tg_param_checkpoint_save(path, &a, "mlp", 0));
    /* cut short */
    size_t len;
    uint8_t *bytes = ckpt_read_file(path, &len);
    ckpt_write_file(path, bytes, len / 2);
    expect_refused(&a, path, "mlp", TG_ERR_FORMAT, "truncated");
    free(bytes);
    /* a model's checkpoint is not a parameter set's */
    TgModel m;
    TgModelConfig c;
    assert_ok(tg_model_preset("tiny", &c));
    c.vocab = 40;
    tg_model_build(&m, &c);
    TgTrainerState st = {.step = 1};
    TgCheckpointSource src = tg_checkpoint_source_of(&m, 7, &st);
    assert_ok(tg_checkpoint_write(path, &src));
    expect_refused(&a, path, NULL, TG_ERR_MISMATCH, "a model's checkpoint, not a parameter set's");
    /* and a parameter set is no model */
    assert_ok(tg_param_checkpoint_save(path, &a, "mlp", 0));
    uint64_t fingerprint;
    assert_fails(tg_checkpoint_read_config(path, &c, &fingerprint), TG_ERR_MISMATCH, "a parameter set's checkpoint (tag 'mlp')");
    assert_fails(tg_checkpoint_load(path, &m, NULL), TG_ERR_MISMATCH, "a parameter set's checkpoint (tag 'mlp')");
    tg_model_free(&m);
    tg_params_free(&a);
}

Test(param_checkpoint, the_cli_describes_one_and_will_not_export_it_as_a_model) {
    TgParamStore a;
    build_store(&a, 4, 0);
    fill_store(&a, 5);
    assert_ok(tg_param_checkpoint_save(path, &a, "mlp-demo", 42));
    char *out = NULL;
    int rc = ckpt_cli(&out, "ckpt info %s", path);
    cr_expect_eq(rc, 0, "ckpt info failed:\n%s", out);
    cr_expect(strstr(out, "tagged 'mlp-demo'") && strstr(out, "step         42") && strstr(out, "gain"),
              "ckpt info does not describe the parameter set:\n%s", out);
    free(out);
    char *st = datagen_path(dir, "mlp.safetensors");
    rc = ckpt_cli(&out, "ckpt export %s --safetensors %s", path, st);
    free(st);
    cr_expect_eq(rc, 1, "exporting a parameter set as a model exited %d:\n%s", rc, out);
    cr_expect(strstr(out, "a parameter set's checkpoint (tag 'mlp-demo'), not a model's"), "%s", out);
    free(out);
    tg_params_free(&a);
}
