/* Safetensors: the tensor file format of Hugging Face, read and written.
 *
 * Layout: an 8-byte little-endian header length N; N bytes of UTF-8 JSON,
 *   {"name": {"dtype": "F32", "shape": [3, 4], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * possibly padded with trailing spaces; then the data buffer, every tensor a little-endian,
 * row-major byte range [begin, end) of it.
 *
 * Reading validates the whole file before tg_st_open returns, so the lookups below never see a
 * malformed entry; every refusal names the file, the tensor and the problem. Accepted: the
 * dtypes of TgStDtype, up to TG_ST_MAX_DIMS dims, a header of at most TG_ST_MAX_HEADER_BYTES, byte
 * ranges that fit the buffer, match their shape and do not overlap; at most TG_MAX_TENSORS
 * tensors (tapegrad/limits.h). Gaps between ranges are
 * tolerated on reading (the writer never leaves any).
 *
 * Writing keeps tensors in insertion order, in the header and in the data buffer, packed with
 * no gaps; the header is padded with spaces so the data buffer starts 8-byte aligned. The file
 * is written through support/atomic_file.h, so a reader sees the old file or the complete new one,
 * never a partial one.
 *
 * Assumes a little-endian host (checked at compile time).
 */
#ifndef TAPEGRAD_MODEL_SAFETENSORS_H
#define TAPEGRAD_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "tapegrad/error.h"

enum { TG_ST_MAX_DIMS = 8 };
/* Same cap as the reference Rust implementation: a larger header is surely not a real one. */
#define TG_ST_MAX_HEADER_BYTES ((uint64_t)100000000)
/* The largest file tg_st_open reads: the header, its 8-byte length and TG_MAX_ELEMENTS elements of
 * the widest dtype (8 bytes), plus the gaps that alignment can leave between at most TG_MAX_TENSORS
 * tensors. */
#define TG_ST_MAX_FILE_BYTES ((uint64_t)(8 + TG_ST_MAX_HEADER_BYTES) + 8 * (uint64_t)TG_MAX_ELEMENTS + 64 * (uint64_t)TG_MAX_TENSORS)

typedef enum { TG_ST_F32, TG_ST_F16, TG_ST_BF16, TG_ST_F64, TG_ST_I32, TG_ST_I64, TG_ST_U8, TG_ST_I8 } TgStDtype;

/* One tensor of an open file. Everything points into the TgStFile and lives until tg_st_close. */
typedef struct TgStEntry {
    const char *name;
    TgStDtype dtype;
    int ndim;                       /* 0 for a scalar (numel 1) */
    int64_t shape[TG_ST_MAX_DIMS];
    int64_t numel;
    /* Little-endian bytes of the tensor, NOT necessarily aligned for its dtype: load them with
     * memcpy, or use tg_st_read_f32 / tg_st_read_i32. */
    const uint8_t *bytes;
    size_t nbytes;
    size_t data_begin;              /* offset of `bytes` in the data buffer */
} TgStEntry;

typedef struct TgStFile TgStFile;

/* Reads and validates the whole file. On success *out owns it (tg_st_close frees it); on failure
 * *out is NULL and tg_error_message() says what is wrong: TG_ERR_IO (cannot open/read),
 * TG_ERR_FORMAT (malformed), TG_ERR_NOMEM (file too big to hold in memory). */
TgStatus tg_st_open(const char *path, TgStFile **out);
/* The same for a file already in memory (copied; `name` stands for the path in messages). */
TgStatus tg_st_open_buffer(const char *name, const void *bytes, size_t size, TgStFile **out);
void tg_st_close(TgStFile *file);

const char *tg_st_path(const TgStFile *file);
/* Iteration in header order: for (size_t i = 0; i < tg_st_count(f); i++) tg_st_entry_at(f, i). */
size_t tg_st_count(const TgStFile *file);
const TgStEntry *tg_st_entry_at(const TgStFile *file, size_t index);
/* NULL when absent. */
const TgStEntry *tg_st_find(const TgStFile *file, const char *name);

/* TG_ERR_MISMATCH with a message unless `name` exists with exactly this shape. */
TgStatus tg_st_expect_shape(const TgStFile *file, const char *name, int ndim, const int64_t *shape);
/* Copies tensor `name` into out[expected_numel], converting F32, F16, BF16 or F64 to float.
 * TG_ERR_MISMATCH when it is absent, of another dtype, or holds another number of elements. */
TgStatus tg_st_read_f32(const TgStFile *file, const char *name, float *out, int64_t expected_numel);
/* The same for integer tensors (token arrays): I32 or I64, every I64 value within int32 range. */
TgStatus tg_st_read_i32(const TgStFile *file, const char *name, int32_t *out, int64_t expected_numel);

/* The value of __metadata__[key], NULL when absent. */
const char *tg_st_metadata(const TgStFile *file, const char *key);
size_t tg_st_metadata_count(const TgStFile *file);
void tg_st_metadata_at(const TgStFile *file, size_t index, const char **key, const char **value);

/* "F32", "BF16", ... */
const char *tg_st_dtype_name(TgStDtype dtype);
size_t tg_st_dtype_size(TgStDtype dtype);
/* "[3, 4]" (or "[]" for a scalar) into buf; returns buf. */
const char *tg_st_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);

/* ---- writing ---- */

typedef struct TgStWriter TgStWriter;

TgStWriter *tg_st_writer_begin(void);
/* Adds a tensor of `dtype`, copying its bytes (little-endian, row-major) now, so `data` may be
 * reused at once. TG_ERR_ARG, writer unchanged, for a duplicate or empty name, the reserved name
 * "__metadata__", a name that is not UTF-8, ndim outside [0, TG_ST_MAX_DIMS] or a negative dim.
 * `data` may be NULL when the tensor has no elements. */
TgStatus tg_st_writer_add(TgStWriter *w, const char *name, TgStDtype dtype, int ndim, const int64_t *shape,
                        const void *data);
TgStatus tg_st_writer_add_f32(TgStWriter *w, const char *name, int ndim, const int64_t *shape,
                            const float *data);
TgStatus tg_st_writer_add_i32(TgStWriter *w, const char *name, int ndim, const int64_t *shape,
                            const int32_t *data);
/* Sets __metadata__[key] = value (replacing an earlier value of the same key). */
TgStatus tg_st_writer_set_metadata(TgStWriter *w, const char *key, const char *value);
/* Writes the file atomically (see above), then frees the writer, whether it succeeded or not. */
TgStatus tg_st_writer_finish(TgStWriter *w, const char *path);
/* Frees a writer without writing anything. */
void tg_st_writer_free(TgStWriter *w);

#endif
