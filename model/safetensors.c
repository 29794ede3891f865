#include "model/safetensors.h"

#include "support/atomic_file.h"
#include "support/file_read.h"
#include "support/json_reader.h"
#include "tapegrad/limits.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c copies tensor bytes as they are: it needs a little-endian host"
#endif

/* ---- dtypes and shapes ---- */

static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
    [TG_ST_F32] = {"F32", 4}, [TG_ST_F16] = {"F16", 2}, [TG_ST_BF16] = {"BF16", 2}, [TG_ST_F64] = {"F64", 8},
    [TG_ST_I32] = {"I32", 4}, [TG_ST_I64] = {"I64", 8}, [TG_ST_U8] = {"U8", 1},     [TG_ST_I8] = {"I8", 1},
};
enum { DTYPE_COUNT = sizeof dtype_table / sizeof dtype_table[0] };

const char *tg_st_dtype_name(TgStDtype dtype) {
    return (unsigned)dtype < DTYPE_COUNT ? dtype_table[dtype].name : "?";
}

size_t tg_st_dtype_size(TgStDtype dtype) { return (unsigned)dtype < DTYPE_COUNT ? dtype_table[dtype].size : 0; }

const char *tg_st_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t used = 0;
    if (cap == 0) return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

/* numel and byte size of a shape, or false when either overflows. A zero dim anywhere makes the
 * tensor empty, however large the other dims are. */
static bool shape_sizes(int ndim, const int64_t *shape, size_t dtype_size, int64_t *numel, size_t *nbytes) {
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) count = 0;
    for (int i = 0; i < ndim && count; i++)
        if (__builtin_mul_overflow(count, (uint64_t)shape[i], &count) || count > (uint64_t)INT64_MAX) return false;
    uint64_t bytes;
    if (__builtin_mul_overflow(count, (uint64_t)dtype_size, &bytes) || bytes > SIZE_MAX) return false;
    *numel = (int64_t)count;
    *nbytes = (size_t)bytes;
    return true;
}

/* RFC 3629 UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. The format requires a
 * UTF-8 header, and the Rust reader refuses anything else, so the writer must not produce it. */
static bool valid_utf8(const uint8_t *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t extra;
        uint32_t min, code;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) extra = 1, min = 0x80, code = c & 0x1F;
        else if ((c & 0xF0) == 0xE0) extra = 2, min = 0x800, code = c & 0x0F;
        else if ((c & 0xF8) == 0xF0) extra = 3, min = 0x10000, code = c & 0x07;
        else return false;
        if (len - i <= extra) return false;
        for (size_t k = 1; k <= extra; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            code = (code << 6) | (s[i + k] & 0x3F);
        }
        if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
        i += extra + 1;
    }
    return true;
}

/* ---- reading ---- */

typedef struct {
    const char *name;
    size_t index;
} NameIndex;

struct TgStFile {
    char *path;
    uint8_t *contents; /* the whole file; entries point into it */
    size_t size;
    TgStEntry *entries;  /* header order */
    size_t count;
    NameIndex *by_name; /* sorted by name, for tg_st_find */
    char **meta_keys, **meta_values;
    size_t meta_count;
};

static int compare_name_index(const void *a, const void *b) {
    return strcmp(((const NameIndex *)a)->name, ((const NameIndex *)b)->name);
}

void tg_st_close(TgStFile *file) {
    if (!file) return;
    for (size_t i = 0; i < file->count; i++) free((char *)file->entries[i].name);
    for (size_t i = 0; i < file->meta_count; i++) {
        free(file->meta_keys[i]);
        free(file->meta_values[i]);
    }
    free(file->meta_keys);
    free(file->meta_values);
    free(file->entries);
    free(file->by_name);
    free(file->contents);
    free(file->path);
    free(file);
}

/* A member of `object` that must appear exactly once (JSON allows repeats; we refuse them, since
 * two readers could then disagree on which one counts). */
static TgStatus unique_member(const TgJsonCursor *object, const char *key, TgJsonCursor *out) {
    size_t n = tg_json_find(object, key, out);
    if (n > 1) return tg_fail(TG_ERR_FORMAT, "\"%s\" appears twice", key);
    if (n == 0) return tg_fail(TG_ERR_FORMAT, "missing \"%s\"", key);
    return TG_OK;
}

/* JSON numbers arrive as doubles; accept only integers in [0, 2^53], where doubles are exact. */
static bool json_count(TgJsonCursor item, uint64_t *out) {
    if (tg_json_type(&item) != TG_JSON_NUMBER) return false;
    double v = tg_json_read_number(&item);
    if (!(v >= 0 && v <= 9007199254740992.0) || v != (double)(uint64_t)v) return false;
    *out = (uint64_t)v;
    return true;
}

/* A string of the header decoded, with a NUL after it; refused when it holds one itself (the
 * names it gives could not be told from a shorter one's). `what` names it in the message. */
static TgStatus header_string(TgJsonCursor *at, const char *what, char **out) {
    TgJsonString raw = tg_json_read_string(at);
    size_t len;
    *out = tg_json_decode_alloc(raw, &len);
    if (!*out) return tg_fail(TG_ERR_NOMEM, "out of memory reading %s", what);
    if (strlen(*out) != len) {
        TgStatus s = tg_fail(TG_ERR_FORMAT, "%s '%s' holds a NUL byte (\\u0000, at header byte %zu)", what, *out, raw.pos);
        free(*out);
        *out = NULL;
        return s;
    }
    return TG_OK;
}

static TgStatus parse_shape(TgJsonCursor shape, TgStEntry *entry) {
    if (tg_json_type(&shape) != TG_JSON_ARRAY) return tg_fail(TG_ERR_FORMAT, "\"shape\" is not an array");
    size_t ndim = tg_json_count(&shape);
    if (ndim > TG_ST_MAX_DIMS)
        return tg_fail(TG_ERR_FORMAT, "shape has %zu dims, more than the %d supported", ndim, TG_ST_MAX_DIMS);
    tg_json_enter(&shape);
    for (int i = 0; tg_json_next_item(&shape); i++) {
        uint64_t value;
        if (!json_count(shape, &value) || value > (uint64_t)INT64_MAX) {
            if (tg_json_type(&shape) == TG_JSON_NUMBER) {
                double v = tg_json_read_number(&shape);
                if (v < 0) return tg_fail(TG_ERR_FORMAT, "shape has a negative dimension %g (entry %d)", v, i);
            }
            return tg_fail(TG_ERR_FORMAT, "shape entry %d is not a non-negative integer", i);
        }
        entry->shape[i] = (int64_t)value;
        tg_json_skip(&shape);
    }
    entry->ndim = (int)ndim;
    char buf[160];
    if (!shape_sizes(entry->ndim, entry->shape, tg_st_dtype_size(entry->dtype), &entry->numel, &entry->nbytes))
        return tg_fail(TG_ERR_FORMAT, "shape %s of %s is too large to address",
                       tg_st_shape_str(entry->ndim, entry->shape, buf, sizeof buf), tg_st_dtype_name(entry->dtype));
    return TG_OK;
}

/* "data_offsets": [begin, end], two counts */
static bool parse_offsets(TgJsonCursor offsets, uint64_t *begin, uint64_t *end) {
    if (tg_json_type(&offsets) != TG_JSON_ARRAY || tg_json_count(&offsets) != 2) return false;
    tg_json_enter(&offsets);
    tg_json_next_item(&offsets);
    if (!json_count(offsets, begin)) return false;
    tg_json_skip(&offsets);
    tg_json_next_item(&offsets);
    return json_count(offsets, end);
}

static TgStatus parse_entry(const TgJsonCursor *json, TgStEntry *entry, const uint8_t *data, size_t data_size) {
    TgJsonCursor at = *json;
    if (tg_json_type(&at) != TG_JSON_OBJECT) return tg_fail(TG_ERR_FORMAT, "entry is not a JSON object");
    TgJsonCursor dtype, shape, offsets;
    TG_TRY(unique_member(&at, "dtype", &dtype));
    TG_TRY(unique_member(&at, "shape", &shape));
    TG_TRY(unique_member(&at, "data_offsets", &offsets));
    if (tg_json_type(&dtype) != TG_JSON_STRING) return tg_fail(TG_ERR_FORMAT, "\"dtype\" is not a string");
    TgJsonString dtype_name = tg_json_read_string(&dtype);
    bool known = false;
    for (unsigned i = 0; i < DTYPE_COUNT && !known; i++)
        if (tg_json_string_is(dtype_name, dtype_table[i].name)) {
            entry->dtype = (TgStDtype)i;
            known = true;
        }
    if (!known) {
        char *name = tg_json_decode_alloc(dtype_name, NULL);
        TgStatus s = tg_fail(TG_ERR_FORMAT, "unknown dtype '%s' (supported: F32, F16, BF16, F64, I32, I64, U8, I8)",
                             name ? name : "?");
        free(name);
        return s;
    }
    TG_TRY(parse_shape(shape, entry));

    uint64_t begin, end;
    if (!parse_offsets(offsets, &begin, &end))
        return tg_fail(TG_ERR_FORMAT, "\"data_offsets\" is not a pair [begin, end] of non-negative integers");
    if (begin > end)
        return tg_fail(TG_ERR_FORMAT, "data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin", begin, end);
    if (end > data_size)
        return tg_fail(TG_ERR_FORMAT,
                       "data_offsets [%" PRIu64 ", %" PRIu64 "] reach past the end of the %zu-byte data buffer"
                       " (file truncated?)",
                       begin, end, data_size);
    if (end - begin != entry->nbytes) {
        char buf[160];
        return tg_fail(TG_ERR_FORMAT, "data_offsets [%" PRIu64 ", %" PRIu64 "] but shape %s of %s needs %zu bytes",
                       begin, end, tg_st_shape_str(entry->ndim, entry->shape, buf, sizeof buf),
                       tg_st_dtype_name(entry->dtype), entry->nbytes);
    }
    entry->data_begin = (size_t)begin;
    entry->bytes = data + begin;
    return TG_OK;
}

static TgStatus parse_metadata(TgStFile *file, TgJsonCursor json) {
    if (tg_json_type(&json) != TG_JSON_OBJECT) return tg_fail(TG_ERR_FORMAT, "__metadata__ is not a JSON object");
    size_t n = tg_json_count(&json);
    file->meta_keys = tg_calloc(n, sizeof *file->meta_keys);
    file->meta_values = tg_calloc(n, sizeof *file->meta_values);
    tg_json_enter(&json);
    TgJsonString raw_key;
    while (tg_json_next_key(&json, &raw_key)) {
        TgJsonCursor key_at = tg_json_cursor(json.text, json.len, raw_key.pos);
        char *key;
        TG_TRY(header_string(&key_at, "the __metadata__ key", &key));
        file->meta_keys[file->meta_count++] = key; /* freed with the file */
        if (tg_json_type(&json) != TG_JSON_STRING)
            return tg_fail(TG_ERR_FORMAT, "__metadata__ value of '%s' is not a string", key);
        for (size_t i = 0; i + 1 < file->meta_count; i++)
            if (strcmp(file->meta_keys[i], key) == 0)
                return tg_fail(TG_ERR_FORMAT, "__metadata__ key '%s' appears twice", key);
        char what[96];
        snprintf(what, sizeof what, "the __metadata__ value of '%.40s'", key);
        TG_TRY(header_string(&json, what, &file->meta_values[file->meta_count - 1]));
    }
    return TG_OK;
}

typedef struct {
    size_t begin, end, index;
} ByteRange;

static int compare_range(const void *a, const void *b) {
    const ByteRange *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static TgStatus check_no_overlap(const TgStFile *file) {
    ByteRange *ranges = tg_malloc(file->count * sizeof *ranges);
    size_t n = 0;
    for (size_t i = 0; i < file->count; i++) {
        const TgStEntry *e = &file->entries[i];
        /* an empty tensor owns no bytes, so it can sit anywhere */
        if (e->nbytes) ranges[n++] = (ByteRange){e->data_begin, e->data_begin + e->nbytes, i};
    }
    qsort(ranges, n, sizeof *ranges, compare_range);
    TgStatus status = TG_OK;
    for (size_t i = 1; i < n; i++) {
        /* sorted by begin and the earlier ones disjoint: only the previous range can reach here */
        if (ranges[i].begin < ranges[i - 1].end) {
            const ByteRange *a = &ranges[i - 1], *b = &ranges[i];
            status = tg_fail(TG_ERR_FORMAT,
                             "tensors '%s' (data_offsets [%zu, %zu]) and '%s' (data_offsets [%zu, %zu]) overlap",
                             file->entries[a->index].name, a->begin, a->end, file->entries[b->index].name,
                             b->begin, b->end);
            break;
        }
    }
    free(ranges);
    return status;
}

static TgStatus parse_tensors(TgStFile *file, const TgJsonCursor *root, const uint8_t *data, size_t data_size) {
    size_t members = tg_json_count(root);
    if (members > (size_t)TG_MAX_TENSORS + 1) /* + __metadata__ */
        return tg_fail(TG_ERR_FORMAT, "header lists %zu tensors, more than the %d tapegrad reads", members, TG_MAX_TENSORS);
    file->entries = tg_calloc(members, sizeof *file->entries);
    TgJsonCursor at = *root, metadata;
    bool has_metadata = false;
    tg_json_enter(&at);
    TgJsonString key;
    while (tg_json_next_key(&at, &key)) {
        if (tg_json_string_is(key, "__metadata__")) {
            if (has_metadata) return tg_fail(TG_ERR_FORMAT, "__metadata__ appears twice");
            metadata = at;
            has_metadata = true;
            tg_json_skip(&at);
            continue;
        }
        TgStEntry *entry = &file->entries[file->count];
        TgJsonCursor name_at = tg_json_cursor(at.text, at.len, key.pos);
        char *name;
        TG_TRY(header_string(&name_at, "the tensor name", &name));
        entry->name = name;
        file->count++;
        TgStatus status = parse_entry(&at, entry, data, data_size);
        if (status != TG_OK) return tg_fail_context(status, "tensor '%s'", name);
        tg_json_skip(&at);
    }
    if (has_metadata) TG_TRY(parse_metadata(file, metadata));

    file->by_name = tg_malloc((file->count ? file->count : 1) * sizeof *file->by_name);
    for (size_t i = 0; i < file->count; i++) file->by_name[i] = (NameIndex){file->entries[i].name, i};
    qsort(file->by_name, file->count, sizeof *file->by_name, compare_name_index);
    for (size_t i = 1; i < file->count; i++)
        if (strcmp(file->by_name[i - 1].name, file->by_name[i].name) == 0)
            return tg_fail(TG_ERR_FORMAT, "tensor '%s' appears twice", file->by_name[i].name);
    return check_no_overlap(file);
}

static TgStatus parse_file(TgStFile *file) {
    const uint8_t *bytes = file->contents;
    size_t size = file->size;
    if (size == 0)
        return tg_fail(TG_ERR_FORMAT, "file is empty (a safetensors file starts with an 8-byte header length)");
    if (size < 8)
        return tg_fail(TG_ERR_FORMAT, "file is only %zu bytes, too short for the 8-byte header length", size);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = (header_len << 8) | bytes[i];
    if (header_len < 2)
        return tg_fail(TG_ERR_FORMAT, "header length %" PRIu64 " is too small (\"{}\" alone takes 2 bytes)",
                       header_len);
    if (header_len > TG_ST_MAX_HEADER_BYTES)
        return tg_fail(TG_ERR_FORMAT, "header length %" PRIu64 " exceeds the limit of %" PRIu64 " bytes",
                       header_len, TG_ST_MAX_HEADER_BYTES);
    if (header_len > size - 8)
        return tg_fail(TG_ERR_FORMAT,
                       "header length %" PRIu64 " is larger than the %zu bytes that follow it (truncated, or "
                       "not a safetensors file?)",
                       header_len, size - 8);
    const uint8_t *header = bytes + 8;
    size_t n = (size_t)header_len;
    if (header[0] != '{') {
        if (header[0] >= 0x20 && header[0] < 0x7f)
            return tg_fail(TG_ERR_FORMAT, "header is not a JSON object (it starts with '%c', not '{')", header[0]);
        return tg_fail(TG_ERR_FORMAT, "header is not a JSON object (it starts with byte 0x%02x, not '{')",
                       header[0]);
    }
    if (memchr(header, 0, n)) return tg_fail(TG_ERR_FORMAT, "header is not valid JSON (it holds a NUL byte)");
    if (!valid_utf8(header, n)) return tg_fail(TG_ERR_FORMAT, "header is not valid UTF-8");

    /* the check needs a NUL after the text: a copy, so that nothing reads past the header */
    char *text = malloc(n + 1);
    if (!text) return tg_fail(TG_ERR_NOMEM, "cannot allocate %zu bytes for the header", n + 1);
    memcpy(text, header, n);
    text[n] = '\0';
    TgStatus status = tg_json_check(text, n, "header");
    if (status == TG_OK) {
        TgJsonCursor root = tg_json_cursor(text, n, 0);
        /* header[0] is '{', so the checked value is an object */
        status = parse_tensors(file, &root, header + n, size - 8 - n);
    }
    free(text);
    return status;
}

static TgStFile *file_named(const char *path) {
    TgStFile *file = tg_calloc(1, sizeof *file);
    file->path = strdup(path);
    if (!file->path) tg_abort_at(__FILE__, __LINE__, "out of memory copying a path");
    return file;
}

/* The contents are in place (or `status` says why not): parse them, hand the file out or free it. */
static TgStatus finish_open(TgStFile *file, TgStatus status, TgStFile **out) {
    if (status == TG_OK) status = parse_file(file);
    if (status != TG_OK) {
        TgStatus s = tg_fail_context(status, "%s", file->path);
        tg_st_close(file);
        return s;
    }
    *out = file;
    return TG_OK;
}

TgStatus tg_st_open(const char *path, TgStFile **out) {
    *out = NULL;
    TgStFile *file = file_named(path);
    char *contents = NULL;
    TgStatus s = tg_file_read_all(path, TG_ST_MAX_FILE_BYTES, &contents, &file->size);
    file->contents = (uint8_t *)contents;
    return finish_open(file, s, out);
}

TgStatus tg_st_open_buffer(const char *name, const void *bytes, size_t size, TgStFile **out) {
    *out = NULL;
    TgStFile *file = file_named(name);
    file->contents = tg_malloc(size ? size : 1);
    if (size) memcpy(file->contents, bytes, size);
    file->size = size;
    return finish_open(file, TG_OK, out);
}

const char *tg_st_path(const TgStFile *file) { return file->path; }
size_t tg_st_count(const TgStFile *file) { return file->count; }

const TgStEntry *tg_st_entry_at(const TgStFile *file, size_t index) {
    TG_CHECK(index < file->count, "entry %zu of %zu", index, file->count);
    return &file->entries[index];
}

const TgStEntry *tg_st_find(const TgStFile *file, const char *name) {
    NameIndex key = {name, 0};
    const NameIndex *hit = bsearch(&key, file->by_name, file->count, sizeof key, compare_name_index);
    return hit ? &file->entries[hit->index] : NULL;
}

static TgStatus require_entry(const TgStFile *file, const char *name, const TgStEntry **out) {
    *out = tg_st_find(file, name);
    if (!*out) return tg_fail(TG_ERR_MISMATCH, "%s: no tensor named '%s'", file->path, name);
    return TG_OK;
}

TgStatus tg_st_expect_shape(const TgStFile *file, const char *name, int ndim, const int64_t *shape) {
    const TgStEntry *e;
    TG_TRY(require_entry(file, name, &e));
    bool same = e->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = e->shape[i] == shape[i];
    if (same) return TG_OK;
    char found[160], wanted[160];
    return tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s' has shape %s, expected %s", file->path, name,
                   tg_st_shape_str(e->ndim, e->shape, found, sizeof found),
                   tg_st_shape_str(ndim, shape, wanted, sizeof wanted));
}

static TgStatus check_numel(const TgStFile *file, const TgStEntry *e, int64_t expected_numel) {
    if (e->numel == expected_numel) return TG_OK;
    char buf[160];
    return tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s' has shape %s (%" PRId64 " elements), expected %" PRId64,
                   file->path, e->name, tg_st_shape_str(e->ndim, e->shape, buf, sizeof buf), e->numel,
                   expected_numel);
}

/* IEEE half to float; every half is exactly representable as a float. */
static float half_to_float(uint16_t half) {
    uint32_t sign = (uint32_t)(half >> 15) << 31, exponent = (half >> 10) & 0x1F, mantissa = half & 0x3FF;
    uint32_t bits;
    if (exponent == 0x1F) {
        bits = sign | 0x7F800000u | (mantissa << 13); /* inf, or NaN keeping its payload */
    } else if (exponent != 0) {
        bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    } else {
        float subnormal = (float)mantissa * 0x1p-24f; /* also covers +-0 */
        return sign ? -subnormal : subnormal;
    }
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

TgStatus tg_st_read_f32(const TgStFile *file, const char *name, float *out, int64_t expected_numel) {
    const TgStEntry *e;
    TG_TRY(require_entry(file, name, &e));
    TG_TRY(check_numel(file, e, expected_numel));
    const uint8_t *src = e->bytes;
    size_t n = (size_t)e->numel;
    switch (e->dtype) {
    case TG_ST_F32:
        if (n) memcpy(out, src, n * sizeof(float));
        return TG_OK;
    case TG_ST_F16:
    case TG_ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t half;
            memcpy(&half, src + 2 * i, 2);
            if (e->dtype == TG_ST_F16) {
                out[i] = half_to_float(half);
            } else {
                uint32_t bits = (uint32_t)half << 16; /* bfloat16 is the top half of a float */
                memcpy(&out[i], &bits, sizeof bits);
            }
        }
        return TG_OK;
    case TG_ST_F64:
        for (size_t i = 0; i < n; i++) {
            double value;
            memcpy(&value, src + 8 * i, 8);
            out[i] = (float)value; /* rounds to nearest; out of range becomes +-inf (IEEE, Annex F) */
        }
        return TG_OK;
    default:
        return tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s' is %s, expected a float dtype (F32, F16, BF16 or F64)",
                       file->path, name, tg_st_dtype_name(e->dtype));
    }
}

TgStatus tg_st_read_i32(const TgStFile *file, const char *name, int32_t *out, int64_t expected_numel) {
    const TgStEntry *e;
    TG_TRY(require_entry(file, name, &e));
    TG_TRY(check_numel(file, e, expected_numel));
    size_t n = (size_t)e->numel;
    if (e->dtype == TG_ST_I32) {
        if (n) memcpy(out, e->bytes, n * sizeof(int32_t));
        return TG_OK;
    }
    if (e->dtype != TG_ST_I64)
        return tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s' is %s, expected I32 or I64", file->path, name,
                       tg_st_dtype_name(e->dtype));
    for (size_t i = 0; i < n; i++) {
        int64_t value;
        memcpy(&value, e->bytes + 8 * i, 8);
        if (value < INT32_MIN || value > INT32_MAX)
            return tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s' element %zu is %" PRId64 ", outside the int32 range",
                           file->path, name, i, value);
        out[i] = (int32_t)value;
    }
    return TG_OK;
}

const char *tg_st_metadata(const TgStFile *file, const char *key) {
    for (size_t i = 0; i < file->meta_count; i++)
        if (strcmp(file->meta_keys[i], key) == 0) return file->meta_values[i];
    return NULL;
}

size_t tg_st_metadata_count(const TgStFile *file) { return file->meta_count; }

void tg_st_metadata_at(const TgStFile *file, size_t index, const char **key, const char **value) {
    TG_CHECK(index < file->meta_count, "metadata %zu of %zu", index, file->meta_count);
    *key = file->meta_keys[index];
    *value = file->meta_values[index];
}

/* ---- writing ---- */

typedef struct {
    char *name;
    TgStDtype dtype;
    int ndim;
    int64_t shape[TG_ST_MAX_DIMS];
    uint8_t *bytes;
    size_t nbytes;
} PendingTensor;

struct TgStWriter {
    PendingTensor *tensors;
    size_t count, cap;
    char **meta_keys, **meta_values;
    size_t meta_count, meta_cap;
};

static char *copy_string(const char *s) {
    char *copy = strdup(s);
    if (!copy) tg_abort_at(__FILE__, __LINE__, "out of memory copying a string");
    return copy;
}

TgStWriter *tg_st_writer_begin(void) { return tg_calloc(1, sizeof(TgStWriter)); }

void tg_st_writer_free(TgStWriter *w) {
    if (!w) return;
    for (size_t i = 0; i < w->count; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].bytes);
    }
    for (size_t i = 0; i < w->meta_count; i++) {
        free(w->meta_keys[i]);
        free(w->meta_values[i]);
    }
    free(w->tensors);
    free(w->meta_keys);
    free(w->meta_values);
    free(w);
}

TgStatus tg_st_writer_add(TgStWriter *w, const char *name, TgStDtype dtype, int ndim, const int64_t *shape,
                        const void *data) {
    if (!name || !*name) return tg_fail(TG_ERR_ARG, "safetensors writer: empty tensor name");
    if (strcmp(name, "__metadata__") == 0)
        return tg_fail(TG_ERR_ARG, "safetensors writer: '__metadata__' is reserved, not a tensor name");
    if (!valid_utf8((const uint8_t *)name, strlen(name)))
        return tg_fail(TG_ERR_ARG, "safetensors writer: tensor name '%s' is not valid UTF-8", name);
    if ((unsigned)dtype >= DTYPE_COUNT)
        return tg_fail(TG_ERR_ARG, "safetensors writer: tensor '%s': unknown dtype %d", name, (int)dtype);
    if (ndim < 0 || ndim > TG_ST_MAX_DIMS)
        return tg_fail(TG_ERR_ARG, "safetensors writer: tensor '%s': %d dims (0 to %d supported)", name, ndim,
                       TG_ST_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return tg_fail(TG_ERR_ARG, "safetensors writer: tensor '%s': negative dimension %" PRId64, name,
                           shape[i]);
    for (size_t i = 0; i < w->count; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return tg_fail(TG_ERR_ARG, "safetensors writer: tensor '%s' added twice", name);
    int64_t numel;
    size_t nbytes;
    if (!shape_sizes(ndim, shape, tg_st_dtype_size(dtype), &numel, &nbytes))
        return tg_fail(TG_ERR_ARG, "safetensors writer: tensor '%s': shape too large", name);
    if (nbytes && !data) return tg_fail(TG_ERR_ARG, "safetensors writer: tensor '%s': no data", name);

    if (w->count == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->tensors = tg_realloc(w->tensors, w->cap * sizeof *w->tensors);
    }
    PendingTensor *t = &w->tensors[w->count++];
    *t = (PendingTensor){.name = copy_string(name), .dtype = dtype, .ndim = ndim, .nbytes = nbytes};
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->bytes = tg_malloc(nbytes);
    if (nbytes) memcpy(t->bytes, data, nbytes);
    return TG_OK;
}

TgStatus tg_st_writer_add_f32(TgStWriter *w, const char *name, int ndim, const int64_t *shape, const float *data) {
    return tg_st_writer_add(w, name, TG_ST_F32, ndim, shape, data);
}

TgStatus tg_st_writer_add_i32(TgStWriter *w, const char *name, int ndim, const int64_t *shape, const int32_t *data) {
    return tg_st_writer_add(w, name, TG_ST_I32, ndim, shape, data);
}

TgStatus tg_st_writer_set_metadata(TgStWriter *w, const char *key, const char *value) {
    if (!key || !*key || !value) return tg_fail(TG_ERR_ARG, "safetensors writer: empty metadata key or no value");
    if (!valid_utf8((const uint8_t *)key, strlen(key)) || !valid_utf8((const uint8_t *)value, strlen(value)))
        return tg_fail(TG_ERR_ARG, "safetensors writer: metadata '%s' is not valid UTF-8", key);
    for (size_t i = 0; i < w->meta_count; i++)
        if (strcmp(w->meta_keys[i], key) == 0) {
            free(w->meta_values[i]);
            w->meta_values[i] = copy_string(value);
            return TG_OK;
        }
    if (w->meta_count == w->meta_cap) {
        w->meta_cap = w->meta_cap ? 2 * w->meta_cap : 8;
        w->meta_keys = tg_realloc(w->meta_keys, w->meta_cap * sizeof *w->meta_keys);
        w->meta_values = tg_realloc(w->meta_values, w->meta_cap * sizeof *w->meta_values);
    }
    w->meta_keys[w->meta_count] = copy_string(key);
    w->meta_values[w->meta_count] = copy_string(value);
    w->meta_count++;
    return TG_OK;
}

typedef struct {
    char *data;
    size_t len, cap;
} TextBuffer;

static void text_append(TextBuffer *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        while (b->len + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 1024;
        b->data = tg_realloc(b->data, b->cap);
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void text_printf(TextBuffer *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(TextBuffer *b, const char *fmt, ...) {
    char small[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    TG_CHECK(n >= 0 && (size_t)n < sizeof small, "text_printf is for short fragments");
    text_append(b, small, (size_t)n);
}

/* A JSON string literal; names were checked to be UTF-8, so only quotes, backslashes and control
 * characters need escaping. */
static void text_json_string(TextBuffer *b, const char *s) {
    text_append(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char escaped[2] = {'\\', (char)c};
            text_append(b, escaped, 2);
        } else if (c < 0x20) {
            text_printf(b, "\\u%04x", c);
        } else {
            text_append(b, (const char *)&c, 1);
        }
    }
    text_append(b, "\"", 1);
}

static void build_header(const TgStWriter *w, TextBuffer *header) {
    text_append(header, "{", 1);
    bool first = true;
    if (w->meta_count) {
        text_append(header, "\"__metadata__\":{", 16);
        for (size_t i = 0; i < w->meta_count; i++) {
            if (i) text_append(header, ",", 1);
            text_json_string(header, w->meta_keys[i]);
            text_append(header, ":", 1);
            text_json_string(header, w->meta_values[i]);
        }
        text_append(header, "}", 1);
        first = false;
    }
    size_t offset = 0;
    for (size_t i = 0; i < w->count; i++) {
        const PendingTensor *t = &w->tensors[i];
        if (!first) text_append(header, ",", 1);
        first = false;
        text_json_string(header, t->name);
        text_printf(header, ":{\"dtype\":\"%s\",\"shape\":[", tg_st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) text_printf(header, "%s%" PRId64, d ? "," : "", t->shape[d]);
        text_printf(header, "],\"data_offsets\":[%zu,%zu]}", offset, offset + t->nbytes);
        offset += t->nbytes;
    }
    text_append(header, "}", 1);
    /* spaces after the JSON are allowed, and make the data buffer start 8-byte aligned */
    while ((8 + header->len) % 8) text_append(header, " ", 1);
}

static bool write_fully(FILE *f, const void *data, size_t n) { return n == 0 || fwrite(data, 1, n, f) == n; }

/* Makes the rename itself durable; some file systems cannot fsync a directory, which is fine. */

TgStatus tg_st_writer_finish(TgStWriter *w, const char *path) {
    size_t total = 0;
    for (size_t i = 0; i < w->count; i++)
        if (__builtin_add_overflow(total, w->tensors[i].nbytes, &total)) {
            tg_st_writer_free(w);
            return tg_fail(TG_ERR_ARG, "%s: tensors too large to write", path);
        }
    TextBuffer header = {0};
    build_header(w, &header);

    TgAtomicFile af;
    TgStatus status = tg_atomic_file_open(&af, path);
    if (status == TG_OK) {
        FILE *f = tg_atomic_file_stream(&af);
        uint8_t length[8];
        for (int i = 0; i < 8; i++) length[i] = (uint8_t)((uint64_t)header.len >> (8 * i));
        bool ok = write_fully(f, length, 8) && write_fully(f, header.data, header.len);
        for (size_t i = 0; ok && i < w->count; i++) ok = write_fully(f, w->tensors[i].bytes, w->tensors[i].nbytes);
        if (ok) {
            status = tg_atomic_file_commit(&af);
        } else {
            status = tg_fail(TG_ERR_IO, "cannot write %s: %s", path, strerror(errno));
            tg_atomic_file_abandon(&af);
        }
    }
    free(header.data);
    tg_st_writer_free(w);
    return status;
}
