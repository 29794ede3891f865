/* Safetensors reader and writer: round trips, conversions, every malformed input refused with a
 * message that says what is wrong, and the PyTorch parity reference read back. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tapegrad/error.h"
#include "model/safetensors.h"
#include "testutil.h"

static char temp_dir[64];

static void make_temp_dir(void) {
    strcpy(temp_dir, "/tmp/tapegrad_st_XXXXXX");
    cr_assert_not_null(mkdtemp(temp_dir), "mkdtemp failed");
}

/* The tests only create plain files (and one empty subdirectory) directly inside temp_dir. */
static void remove_temp_dir(void) {
    DIR *dir = opendir(temp_dir);
    if (!dir) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(dir))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", temp_dir, e->d_name);
        if (unlink(path) != 0) rmdir(path);
    }
    closedir(dir);
    rmdir(temp_dir);
}

TestSuite(safetensors, .init = make_temp_dir, .fini = remove_temp_dir);

/* A path inside the temp dir; each call has its own buffer among a few. */
static const char *temp_path(const char *name) {
    static char buffers[4][512];
    static int next;
    char *buf = buffers[next++ % 4];
    snprintf(buf, sizeof buffers[0], "%s/%s", temp_dir, name);
    return buf;
}

static void write_bytes(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* A file whose length field says `header_len`, followed by `header` and `data_len` data bytes. */
static void write_raw(const char *path, uint64_t header_len, const char *header, size_t data_len) {
    size_t text_len = strlen(header), n = 8 + text_len + data_len;
    uint8_t *bytes = calloc(1, n);
    for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)(header_len >> (8 * i));
    memcpy(bytes + 8, header, text_len);
    for (size_t i = 0; i < data_len; i++) bytes[8 + text_len + i] = (uint8_t)i;
    write_bytes(path, bytes, n);
    free(bytes);
}

/* The usual case: the length field matches the header text. */
static void write_header(const char *path, const char *header, size_t data_len) {
    write_raw(path, strlen(header), header, data_len);
}

/* tg_st_open must refuse the file with a message naming it and containing `expected`. */
static void expect_refused(const char *path, TgStatus status, const char *expected) {
    TgStFile *file = (TgStFile *)1;
    tg_error_clear();
    TgStatus got = tg_st_open(path, &file);
    const char *message = tg_error_message();
    cr_assert_eq(got, status, "expected status %s, got %s (%s)", tg_status_name(status), tg_status_name(got),
                 message);
    cr_expect_null(file);
    cr_expect(strncmp(message, path, strlen(path)) == 0, "message does not start with the path: %s", message);
    cr_expect(strstr(message, expected) != NULL, "message lacks \"%s\": %s", expected, message);
}

static TgStFile *open_ok(const char *path) {
    TgStFile *file = NULL;
    TgStatus status = tg_st_open(path, &file);
    cr_assert_eq(status, TG_OK, "st_open(%s): %s", path, tg_error_message());
    cr_assert_not_null(file);
    return file;
}

static void expect_shape(const TgStEntry *e, int ndim, const int64_t *shape) {
    char want[128], got[128];
    cr_assert_not_null(e);
    cr_expect(e->ndim == ndim && memcmp(e->shape, shape, (size_t)ndim * sizeof *shape) == 0,
              "tensor '%s' has shape %s, expected %s", e->name, tg_st_shape_str(e->ndim, e->shape, got, sizeof got),
              tg_st_shape_str(ndim, shape, want, sizeof want));
}

static uint64_t header_length_of(const char *path) {
    uint8_t length[8];
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    cr_assert_eq(fread(length, 1, 8, f), 8u);
    fclose(f);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | length[i];
    return n;
}

/* ---- round trips ---- */

Test(safetensors, round_trip_f32_i32_scalar_empty_and_metadata) {
    const char *path = temp_path("model.safetensors");
    float weights[6] = {1.5f, -2.25f, 0.0f, 3e-8f, -1e30f, 7.0f};
    int32_t tokens[4] = {0, -1, 2147483647, -2147483647 - 1};
    float scalar = 4.25f;
    TgStWriter *w = tg_st_writer_begin();
    cr_assert_eq(tg_st_writer_add_f32(w, "w", 2, (int64_t[]){2, 3}, weights), TG_OK);
    cr_assert_eq(tg_st_writer_add_i32(w, "tokens", 1, (int64_t[]){4}, tokens), TG_OK);
    cr_assert_eq(tg_st_writer_add_f32(w, "loss", 0, NULL, &scalar), TG_OK);
    cr_assert_eq(tg_st_writer_add_f32(w, "empty", 1, (int64_t[]){0}, NULL), TG_OK);
    cr_assert_eq(tg_st_writer_add_i32(w, "empty_3d", 3, (int64_t[]){2, 0, 5}, NULL), TG_OK);
    cr_assert_eq(tg_st_writer_set_metadata(w, "dim", "64"), TG_OK);
    cr_assert_eq(tg_st_writer_set_metadata(w, "note", "quote \" backslash \\ newline \n tab \t caf\xc3\xa9"), TG_OK);
    cr_assert_eq(tg_st_writer_finish(w, path), TG_OK, "%s", tg_error_message());
    cr_expect_eq(test_count_tmp_files(temp_dir), 0, "temporary file left behind");
    cr_expect_eq((8 + header_length_of(path)) % 8, 0u, "data buffer not 8-byte aligned");

    TgStFile *f = open_ok(path);
    cr_assert_eq(tg_st_count(f), 5u);
    const char *order[] = {"w", "tokens", "loss", "empty", "empty_3d"}; /* insertion order */
    for (size_t i = 0; i < 5; i++) cr_expect_str_eq(tg_st_entry_at(f, i)->name, order[i]);

    const TgStEntry *e = tg_st_find(f, "w");
    expect_shape(e, 2, (int64_t[]){2, 3});
    cr_expect_eq(e->dtype, TG_ST_F32);
    cr_expect_eq(e->numel, 6);
    cr_expect_eq(e->nbytes, 24u);
    float back[6];
    cr_assert_eq(tg_st_read_f32(f, "w", back, 6), TG_OK, "%s", tg_error_message());
    cr_expect_eq(memcmp(back, weights, sizeof back), 0, "F32 values changed");

    int32_t tokens_back[4];
    cr_assert_eq(tg_st_read_i32(f, "tokens", tokens_back, 4), TG_OK, "%s", tg_error_message());
    cr_expect_eq(memcmp(tokens_back, tokens, sizeof tokens), 0, "I32 values changed");
    cr_expect_eq(tg_st_find(f, "tokens")->dtype, TG_ST_I32);

    e = tg_st_find(f, "loss");
    cr_expect_eq(e->ndim, 0);
    cr_expect_eq(e->numel, 1);
    float scalar_back = 0;
    cr_assert_eq(tg_st_read_f32(f, "loss", &scalar_back, 1), TG_OK);
    cr_expect_eq(scalar_back, 4.25f);

    e = tg_st_find(f, "empty");
    expect_shape(e, 1, (int64_t[]){0});
    cr_expect_eq(e->numel, 0);
    cr_expect_eq(e->nbytes, 0u);
    cr_expect_eq(tg_st_read_f32(f, "empty", NULL, 0), TG_OK);
    expect_shape(tg_st_find(f, "empty_3d"), 3, (int64_t[]){2, 0, 5});
    cr_expect_eq(tg_st_find(f, "empty_3d")->dtype, TG_ST_I32);

    cr_expect_null(tg_st_find(f, "absent"));
    cr_expect_str_eq(tg_st_metadata(f, "dim"), "64");
    cr_expect_str_eq(tg_st_metadata(f, "note"), "quote \" backslash \\ newline \n tab \t caf\xc3\xa9");
    cr_expect_null(tg_st_metadata(f, "absent"));
    cr_assert_eq(tg_st_metadata_count(f), 2u);
    const char *key, *value;
    tg_st_metadata_at(f, 0, &key, &value);
    cr_expect_str_eq(key, "dim");
    cr_expect_str_eq(value, "64");
    cr_expect_str_eq(tg_st_path(f), path);
    tg_st_close(f);
}

Test(safetensors, data_buffer_is_aligned_and_packed_for_any_name_length) {
    float v[3] = {1, 2, 3};
    for (int len = 1; len <= 17; len++) {
        char name[32];
        memset(name, 'n', (size_t)len);
        name[len] = '\0';
        const char *path = temp_path("aligned.safetensors");
        TgStWriter *w = tg_st_writer_begin();
        cr_assert_eq(tg_st_writer_add_f32(w, name, 1, (int64_t[]){3}, v), TG_OK);
        cr_assert_eq(tg_st_writer_add_f32(w, "second", 1, (int64_t[]){2}, v), TG_OK);
        cr_assert_eq(tg_st_writer_finish(w, path), TG_OK, "%s", tg_error_message());
        uint64_t header_len = header_length_of(path);
        cr_expect_eq((8 + header_len) % 8, 0u, "name length %d: header length %llu", len,
                     (unsigned long long)header_len);
        struct stat st;
        cr_assert_eq(stat(path, &st), 0);
        cr_expect_eq((uint64_t)st.st_size, 8 + header_len + 5 * sizeof(float), "file has a gap or extra bytes");
        TgStFile *f = open_ok(path);
        cr_expect_eq(tg_st_find(f, name)->data_begin, 0u);
        cr_expect_eq(tg_st_find(f, "second")->data_begin, 12u);
        tg_st_close(f);
    }
}

Test(safetensors, writer_replaces_an_existing_file) {
    const char *path = temp_path("replace.safetensors");
    float a = 1.0f, b[2] = {2.0f, 3.0f};
    TgStWriter *w = tg_st_writer_begin();
    tg_st_writer_add_f32(w, "a", 1, (int64_t[]){1}, &a);
    cr_assert_eq(tg_st_writer_finish(w, path), TG_OK);
    w = tg_st_writer_begin();
    tg_st_writer_add_f32(w, "b", 1, (int64_t[]){2}, b);
    cr_assert_eq(tg_st_writer_finish(w, path), TG_OK);
    TgStFile *f = open_ok(path);
    cr_expect_eq(tg_st_count(f), 1u);
    cr_expect_null(tg_st_find(f, "a"));
    cr_expect_not_null(tg_st_find(f, "b"));
    tg_st_close(f);
    cr_expect_eq(test_count_tmp_files(temp_dir), 0);
}

Test(safetensors, writer_refuses_bad_tensors_and_stays_usable) {
    float v[2] = {1, 2};
    TgStWriter *w = tg_st_writer_begin();
    cr_assert_eq(tg_st_writer_add_f32(w, "x", 1, (int64_t[]){2}, v), TG_OK);
    struct {
        const char *name;
        int ndim;
        int64_t shape[9];
        const char *expected;
    } bad[] = {
        {"x", 1, {2}, "added twice"},
        {"", 1, {2}, "empty tensor name"},
        {"__metadata__", 1, {2}, "reserved"},
        {"bad\xff", 1, {2}, "not valid UTF-8"},
        {"neg", 2, {2, -1}, "negative dimension -1"},
        {"deep", 9, {1, 1, 1, 1, 1, 1, 1, 1, 2}, "9 dims"},
        {"huge", 3, {1LL << 40, 1LL << 40, 1LL << 40}, "too large"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tg_error_clear();
        cr_expect_eq(tg_st_writer_add_f32(w, bad[i].name, bad[i].ndim, bad[i].shape, v), TG_ERR_ARG, "case %zu", i);
        cr_expect(strstr(tg_error_message(), bad[i].expected), "case %zu: message lacks \"%s\": %s", i,
                  bad[i].expected, tg_error_message());
    }
    cr_expect_eq(tg_st_writer_add_f32(w, "nodata", 1, (int64_t[]){2}, NULL), TG_ERR_ARG);
    cr_expect_eq(tg_st_writer_set_metadata(w, "", "v"), TG_ERR_ARG);
    cr_expect_eq(tg_st_writer_set_metadata(w, "k", "\xc0\xaf"), TG_ERR_ARG); /* overlong '/' */
    cr_assert_eq(tg_st_writer_set_metadata(w, "k", "first"), TG_OK);
    cr_assert_eq(tg_st_writer_set_metadata(w, "k", "second"), TG_OK);
    const char *path = temp_path("usable.safetensors");
    cr_assert_eq(tg_st_writer_finish(w, path), TG_OK, "%s", tg_error_message());
    TgStFile *f = open_ok(path);
    cr_expect_eq(tg_st_count(f), 1u);
    cr_expect_eq(tg_st_metadata_count(f), 1u);
    cr_expect_str_eq(tg_st_metadata(f, "k"), "second");
    tg_st_close(f);
}

Test(safetensors, writer_reports_an_unwritable_path) {
    const char *path = temp_path("no_such_dir/model.safetensors");
    TgStWriter *w = tg_st_writer_begin();
    float v = 1;
    tg_st_writer_add_f32(w, "v", 0, NULL, &v);
    cr_expect_eq(tg_st_writer_finish(w, path), TG_ERR_IO);
    cr_expect(strstr(tg_error_message(), "cannot create") && strstr(tg_error_message(), "no_such_dir"), "%s",
              tg_error_message());
}

Test(safetensors, writer_output_needs_no_metadata) {
    const char *path = temp_path("plain.safetensors");
    TgStWriter *w = tg_st_writer_begin();
    cr_assert_eq(tg_st_writer_finish(w, path), TG_OK, "%s", tg_error_message()); /* no tensors at all */
    TgStFile *f = open_ok(path);
    cr_expect_eq(tg_st_count(f), 0u);
    cr_expect_eq(tg_st_metadata_count(f), 0u);
    cr_expect_null(tg_st_find(f, "x"));
    tg_st_close(f);
}

/* ---- conversions on reading ---- */

static TgStFile *write_typed(const char *file_name, const char *name, TgStDtype dtype, int64_t n, const void *data) {
    const char *path = temp_path(file_name);
    TgStWriter *w = tg_st_writer_begin();
    cr_assert_eq(tg_st_writer_add(w, name, dtype, 1, (int64_t[]){n}, data), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_st_writer_finish(w, path), TG_OK, "%s", tg_error_message());
    return open_ok(path);
}

Test(safetensors, reads_f16_bf16_f64_as_float) {
    /* 1, -2, 65504 (largest half), 2^-24 (smallest subnormal), 2^-14 (smallest normal), -0, +inf, NaN */
    uint16_t half[8] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x0400, 0x8000, 0x7C00, 0x7E00};
    float expected[8] = {1.0f, -2.0f, 65504.0f, 0x1p-24f, 0x1p-14f, -0.0f, INFINITY, NAN};
    TgStFile *f = write_typed("f16.safetensors", "h", TG_ST_F16, 8, half);
    float out[8];
    cr_assert_eq(tg_st_read_f32(f, "h", out, 8), TG_OK, "%s", tg_error_message());
    for (int i = 0; i < 7; i++) cr_expect_eq(out[i], expected[i], "F16 element %d: %g", i, out[i]);
    cr_expect(signbit(out[5]), "-0 lost its sign");
    cr_expect(isnan(out[7]));
    tg_st_close(f);

    uint16_t bf16[4] = {0x3F80, 0xC040, 0x4049, 0xFF80}; /* 1, -3, 3.140625, -inf */
    f = write_typed("bf16.safetensors", "b", TG_ST_BF16, 4, bf16);
    cr_assert_eq(tg_st_read_f32(f, "b", out, 4), TG_OK);
    cr_expect_eq(out[0], 1.0f);
    cr_expect_eq(out[1], -3.0f);
    cr_expect_eq(out[2], 3.140625f);
    cr_expect_eq(out[3], -INFINITY);
    tg_st_close(f);

    double f64[3] = {0.1, -1e300, 1e-300};
    f = write_typed("f64.safetensors", "d", TG_ST_F64, 3, f64);
    cr_assert_eq(tg_st_read_f32(f, "d", out, 3), TG_OK);
    cr_expect_eq(out[0], 0.1f);
    cr_expect_eq(out[1], -INFINITY);
    cr_expect_eq(out[2], 0.0f);
    tg_st_close(f);
}

Test(safetensors, reads_i64_tokens_as_int32_within_range) {
    int64_t tokens[3] = {5, -7, 2147483647};
    TgStFile *f = write_typed("i64.safetensors", "t", TG_ST_I64, 3, tokens);
    int32_t out[3];
    cr_assert_eq(tg_st_read_i32(f, "t", out, 3), TG_OK, "%s", tg_error_message());
    cr_expect(out[0] == 5 && out[1] == -7 && out[2] == 2147483647);
    tg_st_close(f);

    int64_t too_big[2] = {1, 1LL << 31};
    f = write_typed("i64_big.safetensors", "t", TG_ST_I64, 2, too_big);
    cr_expect_eq(tg_st_read_i32(f, "t", out, 2), TG_ERR_MISMATCH);
    cr_expect(strstr(tg_error_message(), "element 1 is 2147483648, outside the int32 range"), "%s",
              tg_error_message());
    tg_st_close(f);
}

/* `status` is the result of a call made just now, so the thread's message is still its own. */
static void expect_mismatch(TgStatus status, const char *path, const char *expected) {
    const char *message = tg_error_message();
    cr_expect_eq(status, TG_ERR_MISMATCH, "expected a mismatch about \"%s\", got %s", expected,
                 tg_status_name(status));
    cr_expect(strstr(message, expected) && strncmp(message, path, strlen(path)) == 0,
              "message lacks \"%s\" or the path: %s", expected, message);
}

Test(safetensors, read_refuses_wrong_dtype_count_name_or_shape) {
    const char *path = temp_path("mix.safetensors");
    float v[6] = {0};
    int32_t t[2] = {0};
    uint8_t u[2] = {0};
    TgStWriter *w = tg_st_writer_begin();
    tg_st_writer_add_f32(w, "w", 2, (int64_t[]){2, 3}, v);
    tg_st_writer_add_i32(w, "t", 1, (int64_t[]){2}, t);
    tg_st_writer_add(w, "u", TG_ST_U8, 1, (int64_t[]){2}, u);
    cr_assert_eq(tg_st_writer_finish(w, path), TG_OK);
    TgStFile *f = open_ok(path);
    float out[8];
    int32_t iout[8];
    expect_mismatch(tg_st_read_f32(f, "w", out, 5), path, "tensor 'w' has shape [2, 3] (6 elements), expected 5");
    expect_mismatch(tg_st_read_f32(f, "t", out, 2), path, "tensor 't' is I32, expected a float dtype");
    expect_mismatch(tg_st_read_i32(f, "w", iout, 6), path, "tensor 'w' is F32, expected I32 or I64");
    expect_mismatch(tg_st_read_i32(f, "u", iout, 2), path, "tensor 'u' is U8");
    expect_mismatch(tg_st_read_f32(f, "missing", out, 1), path, "no tensor named 'missing'");
    expect_mismatch(tg_st_expect_shape(f, "w", 2, (int64_t[]){3, 2}), path,
                    "tensor 'w' has shape [2, 3], expected [3, 2]");
    expect_mismatch(tg_st_expect_shape(f, "w", 1, (int64_t[]){6}), path, "expected [6]");
    expect_mismatch(tg_st_expect_shape(f, "gone", 1, (int64_t[]){6}), path, "no tensor named 'gone'");
    cr_expect_eq(tg_st_expect_shape(f, "w", 2, (int64_t[]){2, 3}), TG_OK);
    tg_st_close(f);
}

/* ---- what the reader tolerates ---- */

Test(safetensors, accepts_padding_unknown_fields_and_gaps) {
    const char *path = temp_path("lenient.safetensors");
    /* a gap [4, 8) between the tensors, an extra field, an empty tensor inside another's bytes,
     * trailing spaces and a newline after the object */
    write_header(path,
                 "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"extra\":1},"
                 "\"b\":{\"dtype\":\"I8\",\"shape\":[2,2],\"data_offsets\":[8,12]},"
                 "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[1,1]}}   \n ",
                 12);
    TgStFile *f = open_ok(path);
    cr_expect_eq(tg_st_count(f), 3u);
    const TgStEntry *b = tg_st_find(f, "b");
    cr_expect_eq(b->dtype, TG_ST_I8);
    cr_expect_eq(b->bytes[0], 8); /* write_raw fills data byte i with i */
    cr_expect_eq(tg_st_find(f, "e")->numel, 0);
    tg_st_close(f);
}

/* ---- malformed files ---- */

#define ONE_TENSOR(dtype, shape, offsets) \
    "{\"x\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offsets "}}"

Test(safetensors, refuses_a_missing_file) {
    expect_refused(temp_path("absent.safetensors"), TG_ERR_IO, "cannot open: No such file or directory");
}

Test(safetensors, refuses_a_directory) {
    const char *path = temp_path("subdir");
    cr_assert_eq(mkdir(path, 0700), 0);
    expect_refused(path, TG_ERR_IO, "not a regular file");
}

Test(safetensors, refuses_an_empty_file) {
    const char *path = temp_path("empty.safetensors");
    write_bytes(path, "", 0);
    expect_refused(path, TG_ERR_FORMAT, "file is empty");
}

Test(safetensors, refuses_a_file_shorter_than_the_length_field) {
    const char *path = temp_path("short.safetensors");
    write_bytes(path, "\x02\0\0\0\0", 5);
    expect_refused(path, TG_ERR_FORMAT, "only 5 bytes, too short for the 8-byte header length");
}

Test(safetensors, refuses_header_length_larger_than_the_file) {
    const char *path = temp_path("long.safetensors");
    write_raw(path, 1000, "{}", 4);
    expect_refused(path, TG_ERR_FORMAT, "header length 1000 is larger than the 6 bytes that follow it");
}

Test(safetensors, refuses_header_length_zero_and_one) {
    const char *path = temp_path("tiny.safetensors");
    write_raw(path, 0, "{}", 0);
    expect_refused(path, TG_ERR_FORMAT, "header length 0 is too small");
    write_raw(path, 1, "{}", 0);
    expect_refused(path, TG_ERR_FORMAT, "header length 1 is too small");
}

Test(safetensors, refuses_a_header_length_over_the_cap) {
    const char *path = temp_path("cap.safetensors");
    write_raw(path, TG_ST_MAX_HEADER_BYTES + 1, "{}", 0);
    expect_refused(path, TG_ERR_FORMAT, "header length 100000001 exceeds the limit of 100000000 bytes");
    write_raw(path, UINT64_MAX, "{}", 0);
    expect_refused(path, TG_ERR_FORMAT, "exceeds the limit");
}

Test(safetensors, refuses_a_header_that_is_not_json) {
    const char *path = temp_path("notjson.safetensors");
    write_header(path, "{\"x\": }", 0);
    expect_refused(path, TG_ERR_FORMAT, "header is not valid JSON");
    write_header(path, "{\"x\":{}", 0); /* unterminated */
    expect_refused(path, TG_ERR_FORMAT, "header is not valid JSON");
    write_header(path, "{} trailing", 0);
    expect_refused(path, TG_ERR_FORMAT, "header: text after the JSON object at byte 3");
    write_bytes(path, "\x04\0\0\0\0\0\0\0{}\0 ", 12);
    expect_refused(path, TG_ERR_FORMAT, "NUL byte");
    write_header(path, "{\"caf\xe9\":1}", 0); /* Latin-1, not UTF-8 */
    expect_refused(path, TG_ERR_FORMAT, "not valid UTF-8");
}

/* JSON that RFC 8259 does not allow: a number with a leading zero (cjson, the reader before, took "08" for 8) or a plus,
 * a comma before a closing bracket, a single-quoted string; each refused with its header byte. */
Test(safetensors, refuses_json_a_lenient_parser_would_read) {
    const char *path = temp_path("lenient-json.safetensors");
    write_header(path, ONE_TENSOR("F32", "[2]", "[0,08]"), 8);
    expect_refused(path, TG_ERR_FORMAT, "header is not valid JSON: a malformed number (a leading zero) at byte 50");
    write_header(path, ONE_TENSOR("F32", "[+2]", "[0,8]"), 8);
    expect_refused(path, TG_ERR_FORMAT, "header is not valid JSON: expected a value at byte 29");
    write_header(path, ONE_TENSOR("F32", "[2,]", "[0,8]"), 8);
    expect_refused(path, TG_ERR_FORMAT, "header is not valid JSON");
    write_header(path, "{'x':{}}", 0);
    expect_refused(path, TG_ERR_FORMAT, "header is not valid JSON: expected a string (a key) at byte 1");
}

/* A name is the whole of its string: one holding \u0000 is refused, not cut at the NUL (where a
 * tensor "x\u0000y" would have been read as "x"); escapes are decoded ("\u0078" is "x"). */
Test(safetensors, reads_names_whole_and_refuses_a_nul_in_one) {
    const char *path = temp_path("names.safetensors");
    write_header(path, "{\"x\\u0000y\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    expect_refused(path, TG_ERR_FORMAT, "the tensor name 'x' holds a NUL byte (\\u0000, at header byte 1)");
    write_header(path, "{\"__metadata__\":{\"k\\u0000\":\"v\"}}", 0);
    expect_refused(path, TG_ERR_FORMAT, "the __metadata__ key 'k' holds a NUL byte");
    write_header(path, "{\"__metadata__\":{\"k\":\"v\\u0000w\"}}", 0);
    expect_refused(path, TG_ERR_FORMAT, "the __metadata__ value of 'k' 'v' holds a NUL byte");
    write_header(path,
                 "{\"\\u0078\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                 "\"__meta\\u0064ata__\":{\"caf\\u00e9\":\"\\ud83d\\ude00\"}}",
                 1);
    TgStFile *f = open_ok(path);
    cr_expect_not_null(tg_st_find(f, "x"), "\\u0078 is x");
    cr_expect_eq(tg_st_count(f), 1, "__metadata__ written with an escape is the metadata, not a tensor");
    cr_expect_str_eq(tg_st_metadata(f, "caf\xc3\xa9"), "\xf0\x9f\x98\x80");
    tg_st_close(f);
}

Test(safetensors, refuses_json_that_is_not_an_object) {
    const char *path = temp_path("array.safetensors");
    write_header(path, "[1, 2]", 0);
    expect_refused(path, TG_ERR_FORMAT, "header is not a JSON object (it starts with '['");
    write_header(path, "\"{}\"", 0);
    expect_refused(path, TG_ERR_FORMAT, "header is not a JSON object");
    write_header(path, "{\"x\":[1]}", 0);
    expect_refused(path, TG_ERR_FORMAT, "tensor 'x': entry is not a JSON object");
}

Test(safetensors, refuses_an_unknown_dtype) {
    const char *path = temp_path("dtype.safetensors");
    write_header(path, ONE_TENSOR("Q4", "[2]", "[0,1]"), 1);
    expect_refused(path, TG_ERR_FORMAT, "tensor 'x': unknown dtype 'Q4'");
    write_header(path, ONE_TENSOR("f32", "[2]", "[0,8]"), 8); /* names are case-sensitive */
    expect_refused(path, TG_ERR_FORMAT, "unknown dtype 'f32'");
    write_header(path, "{\"x\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    expect_refused(path, TG_ERR_FORMAT, "\"dtype\" is not a string");
}

Test(safetensors, refuses_missing_or_repeated_fields) {
    const char *path = temp_path("fields.safetensors");
    write_header(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8);
    expect_refused(path, TG_ERR_FORMAT, "tensor 'x': missing \"data_offsets\"");
    write_header(path, "{\"x\":{\"dtype\":\"F32\",\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    expect_refused(path, TG_ERR_FORMAT, "\"dtype\" appears twice");
    write_header(path,
                 "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 8);
    expect_refused(path, TG_ERR_FORMAT, "tensor 'x' appears twice");
}

Test(safetensors, refuses_offsets_out_of_range) {
    const char *path = temp_path("range.safetensors");
    write_header(path, ONE_TENSOR("F32", "[12]", "[0,48]"), 16);
    expect_refused(path, TG_ERR_FORMAT,
                   "tensor 'x': data_offsets [0, 48] reach past the end of the 16-byte data buffer");
    write_header(path, ONE_TENSOR("F32", "[1]", "[8,4]"), 16);
    expect_refused(path, TG_ERR_FORMAT, "data_offsets [8, 4] end before they begin");
    write_header(path, ONE_TENSOR("F32", "[1]", "[0]"), 16);
    expect_refused(path, TG_ERR_FORMAT, "\"data_offsets\" is not a pair");
    write_header(path, ONE_TENSOR("F32", "[1]", "[-4,0]"), 16);
    expect_refused(path, TG_ERR_FORMAT, "\"data_offsets\" is not a pair");
    write_header(path, ONE_TENSOR("F32", "[1]", "[0.5,4.5]"), 16);
    expect_refused(path, TG_ERR_FORMAT, "\"data_offsets\" is not a pair");
}

Test(safetensors, refuses_overlapping_offsets) {
    const char *path = temp_path("overlap.safetensors");
    write_header(path,
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                 "\"c\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
                 32);
    expect_refused(path, TG_ERR_FORMAT,
                   "tensors 'a' (data_offsets [0, 16]) and 'b' (data_offsets [8, 24]) overlap");
    write_header(path,
                 "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                 4);
    expect_refused(path, TG_ERR_FORMAT, "overlap");
}

Test(safetensors, refuses_a_size_that_does_not_match_the_shape) {
    const char *path = temp_path("model.safetensors");
    write_header(path, ONE_TENSOR("F32", "[3,4]", "[0,40]"), 48);
    expect_refused(path, TG_ERR_FORMAT,
                   "model.safetensors: tensor 'x': data_offsets [0, 40] but shape [3, 4] of F32 needs 48 bytes");
    write_header(path, ONE_TENSOR("BF16", "[]", "[0,4]"), 4);
    expect_refused(path, TG_ERR_FORMAT, "shape [] of BF16 needs 2 bytes");
}

Test(safetensors, refuses_bad_shapes) {
    const char *path = temp_path("shape.safetensors");
    write_header(path, ONE_TENSOR("F32", "[3,-4]", "[0,48]"), 48);
    expect_refused(path, TG_ERR_FORMAT, "tensor 'x': shape has a negative dimension -4 (entry 1)");
    write_header(path, ONE_TENSOR("F32", "[2.5]", "[0,10]"), 10);
    expect_refused(path, TG_ERR_FORMAT, "shape entry 0 is not a non-negative integer");
    write_header(path, ONE_TENSOR("F32", "[\"2\"]", "[0,8]"), 8);
    expect_refused(path, TG_ERR_FORMAT, "shape entry 0 is not a non-negative integer");
    write_header(path, ONE_TENSOR("F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), 4);
    expect_refused(path, TG_ERR_FORMAT, "shape has 9 dims, more than the 8 supported");
    write_header(path, ONE_TENSOR("F32", "3", "[0,12]"), 12);
    expect_refused(path, TG_ERR_FORMAT, "\"shape\" is not an array");
    /* 2^40 cubed elements: the byte count overflows 64 bits and must not wrap to a small number */
    write_header(path, ONE_TENSOR("F32", "[1099511627776,1099511627776,1099511627776]", "[0,0]"), 0);
    expect_refused(path, TG_ERR_FORMAT, "is too large to address");
}

Test(safetensors, refuses_bad_metadata) {
    const char *path = temp_path("meta.safetensors");
    write_header(path, "{\"__metadata__\":{\"dim\":64}}", 0);
    expect_refused(path, TG_ERR_FORMAT, "__metadata__ value of 'dim' is not a string");
    write_header(path, "{\"__metadata__\":[\"a\"]}", 0);
    expect_refused(path, TG_ERR_FORMAT, "__metadata__ is not a JSON object");
    write_header(path, "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0);
    expect_refused(path, TG_ERR_FORMAT, "__metadata__ key 'k' appears twice");
    write_header(path, "{\"__metadata__\":{},\"__metadata__\":{}}", 0);
    expect_refused(path, TG_ERR_FORMAT, "__metadata__ appears twice");
}

/* A valid file with a few tensors; returns its size. */
static size_t write_sample(const char *path) {
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t t[3] = {7, 8, 9};
    TgStWriter *w_ = tg_st_writer_begin();
    tg_st_writer_add_f32(w_, "weight", 2, (int64_t[]){2, 3}, w);
    tg_st_writer_add_i32(w_, "tokens", 1, (int64_t[]){3}, t);
    tg_st_writer_set_metadata(w_, "k", "v");
    cr_assert_eq(tg_st_writer_finish(w_, path), TG_OK, "%s", tg_error_message());
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    return (size_t)st.st_size;
}

static uint8_t *slurp(const char *path, size_t size) {
    uint8_t *bytes = malloc(size);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    cr_assert_eq(fread(bytes, 1, size, f), size);
    fclose(f);
    return bytes;
}

Test(safetensors, refuses_truncated_data) {
    const char *path = temp_path("truncated.safetensors");
    size_t size = write_sample(path);
    cr_assert_eq(truncate(path, (off_t)size - 4), 0);
    expect_refused(path, TG_ERR_FORMAT,
                   "tensor 'tokens': data_offsets [24, 36] reach past the end of the 32-byte data buffer "
                   "(file truncated?)");
}

Test(safetensors, refuses_every_truncation_of_a_valid_file) {
    const char *src = temp_path("whole.safetensors"), *cut = temp_path("cut.safetensors");
    size_t size = write_sample(src);
    uint8_t *bytes = slurp(src, size);
    for (size_t len = 0; len < size; len++) {
        write_bytes(cut, bytes, len);
        TgStFile *f = NULL;
        TgStatus status = tg_st_open(cut, &f);
        cr_expect_eq(status, TG_ERR_FORMAT, "a %zu-byte prefix of a %zu-byte file was %s", len, size,
                     status == TG_OK ? "accepted" : tg_status_name(status));
        tg_st_close(f);
    }
    free(bytes);
}

/* Every header byte replaced by a few values: the reader must accept or refuse with a message,
 * never read out of bounds (the ASan build runs this too). */
Test(safetensors, survives_corrupted_header_bytes) {
    const char *src = temp_path("whole.safetensors"), *bad = temp_path("corrupt.safetensors");
    size_t size = write_sample(src);
    uint8_t *bytes = slurp(src, size);
    uint64_t header_len = header_length_of(src);
    const uint8_t replacements[] = {'0', '9', '-', '"', '}', ',', ' ', 0x00, 0x80, 0xff};
    int refused = 0;
    for (size_t at = 0; at < 8 + header_len; at++) {
        for (size_t r = 0; r < sizeof replacements; r++) {
            uint8_t saved = bytes[at];
            bytes[at] = replacements[r];
            write_bytes(bad, bytes, size);
            bytes[at] = saved;
            TgStFile *f = NULL;
            tg_error_clear();
            TgStatus status = tg_st_open(bad, &f);
            if (status != TG_OK) {
                refused++;
                cr_expect_null(f);
                cr_expect(strstr(tg_error_message(), bad) != NULL, "byte %zu: no path in \"%s\"", at,
                          tg_error_message());
            } else {
                /* whatever was accepted must be self-consistent */
                for (size_t i = 0; i < tg_st_count(f); i++) {
                    const TgStEntry *e = tg_st_entry_at(f, i);
                    cr_expect_leq(e->data_begin + e->nbytes, size - 8 - header_len);
                }
            }
            tg_st_close(f);
        }
    }
    cr_expect_gt(refused, 0);
    free(bytes);
}

/* ---- the PyTorch parity reference ---- */

static const char *parameter_suffixes[] = {
    "input_layernorm.weight",        "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",       "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",          "mlp.up_proj.weight",      "mlp.down_proj.weight",
};

/* The shapes of make_reference.py's defaults: dim 64, 4 heads of 16, 2 KV heads, hidden 192. */
static const int64_t parameter_shapes[][2] = {
    {64, 0}, {64, 64}, {32, 64}, {32, 64}, {64, 64}, {64, 0}, {192, 64}, {192, 64}, {64, 192},
};

static void expect_f32_entry(const TgStFile *f, const char *name, int ndim, const int64_t *shape) {
    const TgStEntry *e = tg_st_find(f, name);
    cr_assert_not_null(e, "reference lacks '%s'", name);
    cr_expect_eq(e->dtype, TG_ST_F32, "'%s' is %s", name, tg_st_dtype_name(e->dtype));
    expect_shape(e, ndim, shape);
}

static float *read_all_f32(const TgStFile *f, const char *name) {
    const TgStEntry *e = tg_st_find(f, name);
    cr_assert_not_null(e, "reference lacks '%s'", name);
    float *out = malloc((size_t)e->numel * sizeof *out + 1);
    cr_assert_eq(tg_st_read_f32(f, name, out, e->numel), TG_OK, "%s", tg_error_message());
    return out;
}

Test(safetensors, reads_the_pytorch_parity_reference, .timeout = 300) {
    require_torch("reading the PyTorch parity reference", remove_temp_dir);
    const char *path = temp_path("reference.safetensors");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/parity/make_reference.py %s >%s 2>&1",
             TAPEGRAD_SOURCE_DIR, path, temp_path("make_reference.log"));
    int rc = test_run(cmd);
    cr_assert_eq(rc, 0, "make_reference.py failed with status %d; see %s", rc, temp_path("make_reference.log"));
    TgStFile *f = open_ok(path);

    /* every weight: initial, its first gradient, after the last step, and its AdamW m and v */
    static const char *const prefixes[] = {"", "grad.", "final.", "adamw_m.", "adamw_v."};
    char name[128];
    size_t expected_count = 0;
    for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++) {
        const char *prefix = prefixes[p];
        snprintf(name, sizeof name, "%smodel.embed_tokens.weight", prefix);
        expect_f32_entry(f, name, 2, (int64_t[]){67, 64});
        snprintf(name, sizeof name, "%smodel.norm.weight", prefix);
        expect_f32_entry(f, name, 1, (int64_t[]){64});
        expected_count += 2;
        for (int layer = 0; layer < 2; layer++)
            for (size_t k = 0; k < sizeof parameter_suffixes / sizeof *parameter_suffixes; k++) {
                snprintf(name, sizeof name, "%smodel.layers.%d.%s", prefix, layer, parameter_suffixes[k]);
                int ndim = parameter_shapes[k][1] ? 2 : 1;
                expect_f32_entry(f, name, ndim, parameter_shapes[k]);
                expected_count++;
            }
    }
    expect_f32_entry(f, "logits", 3, (int64_t[]){3, 16, 67});
    expect_f32_entry(f, "adamw_losses", 1, (int64_t[]){5});
    expect_f32_entry(f, "grad_norms", 1, (int64_t[]){5});
    const TgStEntry *loss_entry = tg_st_find(f, "loss");
    cr_assert_not_null(loss_entry);
    cr_expect(loss_entry->dtype == TG_ST_F32 && loss_entry->numel == 1, "loss must be one F32");
    for (int k = 0; k < 2; k++) {
        const TgStEntry *e = tg_st_find(f, k ? "targets" : "tokens");
        cr_assert_not_null(e);
        cr_expect_eq(e->dtype, TG_ST_I32);
        expect_shape(e, 2, (int64_t[]){3, 16});
    }
    expected_count += 6;
    cr_expect_eq(tg_st_count(f), expected_count, "reference holds %zu entries, expected %zu", tg_st_count(f),
                 expected_count);

    const char *config[][2] = {{"dim", "64"},   {"layers", "2"}, {"heads", "4"},  {"kv_heads", "2"},
                               {"hidden", "192"}, {"vocab", "67"}, {"seq", "16"}, {"batch", "3"}};
    for (size_t i = 0; i < sizeof config / sizeof *config; i++) {
        const char *value = tg_st_metadata(f, config[i][0]);
        cr_expect(value && strcmp(value, config[i][1]) == 0, "metadata %s = %s, expected %s", config[i][0],
                  value ? value : "(absent)", config[i][1]);
    }
    const char *keys[] = {"rope_theta", "norm_eps", "lr", "min_lr", "warmup", "lrs", "betas", "eps",
                          "weight_decay", "clip", "accum", "ignored", "steps"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        cr_expect_not_null(tg_st_metadata(f, keys[i]), "metadata lacks %s", keys[i]);
    cr_expect_float_eq(strtod(tg_st_metadata(f, "rope_theta"), NULL), 1e6, 1e-9);

    /* at N(0, 0.02) init the prediction is nearly uniform: loss close to ln(vocab) */
    float loss;
    cr_assert_eq(tg_st_read_f32(f, "loss", &loss, 1), TG_OK);
    cr_expect(fabs(loss - log(67.0)) < 0.15, "loss %f, expected about ln 67 = %f", loss, log(67.0));
    float *losses = read_all_f32(f, "adamw_losses");
    cr_expect_float_eq(losses[0], loss, 1e-6, "the first AdamW loss is recorded before any update");
    for (int i = 1; i < 5; i++)
        cr_expect_lt(losses[i], losses[i - 1], "AdamW on one batch must lower the loss: %f then %f", losses[i - 1],
                     losses[i]);
    free(losses);

    int32_t tokens[48], targets[48];
    cr_assert_eq(tg_st_read_i32(f, "tokens", tokens, 48), TG_OK);
    cr_assert_eq(tg_st_read_i32(f, "targets", targets, 48), TG_OK);
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 16; t++) {
            cr_expect(tokens[b * 16 + t] >= 0 && tokens[b * 16 + t] < 67);
            cr_expect(targets[b * 16 + t] >= 0 && targets[b * 16 + t] < 67);
            if (t < 15) cr_expect_eq(targets[b * 16 + t], tokens[b * 16 + t + 1], "targets are the next tokens");
        }

    float *norm = read_all_f32(f, "model.norm.weight");
    for (int i = 0; i < 64; i++) cr_expect_eq(norm[i], 1.0f, "norm weights start at 1");
    free(norm);
    float *grad = read_all_f32(f, "grad.model.layers.0.mlp.down_proj.weight");
    double grad_norm = 0;
    for (int i = 0; i < 64 * 192; i++) grad_norm += (double)grad[i] * grad[i];
    cr_expect(grad_norm > 0 && isfinite(grad_norm), "gradient norm %g", grad_norm);
    free(grad);
    float *logits = read_all_f32(f, "logits");
    for (int i = 0; i < 3 * 16 * 67; i++) cr_assert(isfinite(logits[i]));
    free(logits);
    tg_st_close(f);
}
