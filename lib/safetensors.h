/* Safetensors: the tensor file format of Hugging Face, read and written.
 *
 * Layout: an 8-byte little-endian header length N; N bytes of UTF-8 JSON,
 *   {"name": {"dtype": "F32", "shape": [3, 4], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * possibly padded with trailing spaces; then the data buffer, every tensor a little-endian,
 * row-major byte range [begin, end) of it.
 *
 * Reading validates the whole file before st_open returns, so the lookups below never see a
 * malformed entry; every refusal names the file, the tensor and the problem. Accepted: the
 * dtypes of StDtype, up to ST_MAX_DIMS dims, a header of at most ST_MAX_HEADER_BYTES, byte
 * ranges that fit the buffer, match their shape and do not overlap; at most TG_MAX_TENSORS
 * tensors (tapegrad/limits.h). Gaps between ranges are
 * tolerated on reading (the writer never leaves any).
 *
 * Writing keeps tensors in insertion order, in the header and in the data buffer, packed with
 * no gaps; the header is padded with spaces so the data buffer starts 8-byte aligned. The file
 * is written through lib/atomic_file.h, so a reader sees the old file or the complete new one,
 * never a partial one.
 *
 * Assumes a little-endian host (checked at compile time).
 */
#ifndef TAPEGRAD_SAFETENSORS_H
#define TAPEGRAD_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "tapegrad/error.h"

enum { ST_MAX_DIMS = 8 };
/* Same cap as the reference Rust implementation: a larger header is surely not a real one. */
#define ST_MAX_HEADER_BYTES ((uint64_t)100000000)
/* The largest file st_open reads: the header, its 8-byte length and TG_MAX_ELEMENTS elements of
 * the widest dtype (8 bytes), plus the gaps that alignment can leave between at most TG_MAX_TENSORS
 * tensors. */
#define ST_MAX_FILE_BYTES ((uint64_t)(8 + ST_MAX_HEADER_BYTES) + 8 * (uint64_t)TG_MAX_ELEMENTS + 64 * (uint64_t)TG_MAX_TENSORS)

typedef enum { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I32, ST_I64, ST_U8, ST_I8 } StDtype;

/* One tensor of an open file. Everything points into the StFile and lives until st_close. */
typedef struct StEntry {
    const char *name;
    StDtype dtype;
    int ndim;                       /* 0 for a scalar (numel 1) */
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    /* Little-endian bytes of the tensor, NOT necessarily aligned for its dtype: load them with
     * memcpy, or use st_read_f32 / st_read_i32. */
    const uint8_t *bytes;
    size_t nbytes;
    size_t data_begin;              /* offset of `bytes` in the data buffer */
} StEntry;

typedef struct StFile StFile;

/* Reads and validates the whole file. On success *out owns it (st_close frees it); on failure
 * *out is NULL and tg_error_message() says what is wrong: TG_ERR_IO (cannot open/read),
 * TG_ERR_FORMAT (malformed), TG_ERR_NOMEM (file too big to hold in memory). */
TgStatus st_open(const char *path, StFile **out);
/* The same for a file already in memory (copied; `name` stands for the path in messages). */
TgStatus st_open_buffer(const char *name, const void *bytes, size_t size, StFile **out);
void st_close(StFile *file);

const char *st_path(const StFile *file);
/* Iteration in header order: for (size_t i = 0; i < st_count(f); i++) st_entry_at(f, i). */
size_t st_count(const StFile *file);
const StEntry *st_entry_at(const StFile *file, size_t index);
/* NULL when absent. */
const StEntry *st_find(const StFile *file, const char *name);

/* TG_ERR_MISMATCH with a message unless `name` exists with exactly this shape. */
TgStatus st_expect_shape(const StFile *file, const char *name, int ndim, const int64_t *shape);
/* Copies tensor `name` into out[expected_numel], converting F32, F16, BF16 or F64 to float.
 * TG_ERR_MISMATCH when it is absent, of another dtype, or holds another number of elements. */
TgStatus st_read_f32(const StFile *file, const char *name, float *out, int64_t expected_numel);
/* The same for integer tensors (token arrays): I32 or I64, every I64 value within int32 range. */
TgStatus st_read_i32(const StFile *file, const char *name, int32_t *out, int64_t expected_numel);

/* The value of __metadata__[key], NULL when absent. */
const char *st_metadata(const StFile *file, const char *key);
size_t st_metadata_count(const StFile *file);
void st_metadata_at(const StFile *file, size_t index, const char **key, const char **value);

/* "F32", "BF16", ... */
const char *st_dtype_name(StDtype dtype);
size_t st_dtype_size(StDtype dtype);
/* "[3, 4]" (or "[]" for a scalar) into buf; returns buf. */
const char *st_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);

/* ---- writing ---- */

typedef struct StWriter StWriter;

StWriter *st_writer_begin(void);
/* Adds a tensor of `dtype`, copying its bytes (little-endian, row-major) now, so `data` may be
 * reused at once. TG_ERR_ARG, writer unchanged, for a duplicate or empty name, the reserved name
 * "__metadata__", a name that is not UTF-8, ndim outside [0, ST_MAX_DIMS] or a negative dim.
 * `data` may be NULL when the tensor has no elements. */
TgStatus st_writer_add(StWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape,
                        const void *data);
TgStatus st_writer_add_f32(StWriter *w, const char *name, int ndim, const int64_t *shape,
                            const float *data);
TgStatus st_writer_add_i32(StWriter *w, const char *name, int ndim, const int64_t *shape,
                            const int32_t *data);
/* Sets __metadata__[key] = value (replacing an earlier value of the same key). */
TgStatus st_writer_set_metadata(StWriter *w, const char *key, const char *value);
/* Writes the file atomically (see above), then frees the writer, whether it succeeded or not. */
TgStatus st_writer_finish(StWriter *w, const char *path);
/* Frees a writer without writing anything. */
void st_writer_free(StWriter *w);

#endif
