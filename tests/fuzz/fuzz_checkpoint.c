/* The checkpoint reader, as `ckpt info` uses it (tg_checkpoint_inspect) and as sample, eval, resume
 * and `ckpt export` do (tg_checkpoint_read_config, tg_model_build from that config, tg_checkpoint_load).
 *
 * Built twice from this file: fuzz_checkpoint gzip-wraps the fuzzer's bytes, so its inputs are
 * decompressed streams and mutations reach the header, records and trainer state behind the
 * CRC; fuzz_checkpoint_raw takes the bytes as the file itself (gzip framing, CRC, trailers). */
#include <stdlib.h>
#include <zlib.h>

#include "fuzz_support.h"
#include "checkpoint/checkpoint.h"

#ifndef FUZZ_CHECKPOINT_RAW
#define FUZZ_CHECKPOINT_RAW 0
#endif

#if !FUZZ_CHECKPOINT_RAW
static uint8_t *gzip_wrap(const uint8_t *data, size_t size, size_t *len) {
    z_stream zs = {0};
    if (deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
    uLong cap = deflateBound(&zs, (uLong)size);
    uint8_t *out = malloc(cap);
    zs.next_in = (Bytef *)data, zs.avail_in = (uInt)size;
    zs.next_out = out, zs.avail_out = (uInt)cap;
    if (deflate(&zs, Z_FINISH) != Z_STREAM_END) abort();
    *len = zs.total_out;
    deflateEnd(&zs);
    return out;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
#if FUZZ_CHECKPOINT_RAW
    const char *path = fuzz_write("ckpt.tgck", data, size);
#else
    size_t len;
    uint8_t *file = gzip_wrap(data, size, &len);
    const char *path = fuzz_write("ckpt.tgck", file, len);
    free(file);
#endif
    TgCheckpointInfo info;
    TgCheckpointTensorInfo *tensors = NULL;
    int n = 0;
    if (tg_checkpoint_inspect(path, &info, &tensors, &n) == TG_OK) free(tensors);
    TgModelConfig cfg;
    uint64_t fingerprint;
    if (tg_checkpoint_read_config(path, &cfg, &fingerprint) == TG_OK) {
        TgModel model;
        tg_model_build(&model, &cfg);
        tg_checkpoint_load(path, &model, &info);
        tg_model_free(&model);
    }
    return 0;
}
