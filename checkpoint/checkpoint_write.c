/* Checkpoint files: writing the gzip stream described in checkpoint.h, through zlib's deflate
 * directly, to NAME.tmp, then fsync and rename. */
#include "checkpoint/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "support/atomic_file.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_internal.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint files are little-endian; this host is not"
#endif

/* Level 1: with shuffled planes level 6 gains little size for about twice the CPU time
 * (docs/results.md, 2026-11-29), and a background save's CPU time is taken from training. */
TgCheckpointWriteOptions tg_checkpoint_default_options(void) { return (TgCheckpointWriteOptions){.level = 1, .shuffle = true}; }

TgCheckpointSource tg_checkpoint_source_of(const TgModel *model, uint64_t tokenizer_fingerprint, const TgTrainerState *state) {
    const TgParamStore *ps = model->lora ? &model->lora->params : &model->params;
    TgCheckpointSource src = {model->cfg, tokenizer_fingerprint, ps, ps->data, ps->m, ps->v, *state, NULL, ""};
    if (model->lora) tg_adapter_tag(model->lora, src.adapter, sizeof src.adapter);
    return src;
}

/* The four byte planes of n floats: out[b*n + i] = byte b of in[i]. */
static void shuffle_planes(const float *in, size_t n, uint8_t *out) {
    uint8_t *p0 = out, *p1 = out + n, *p2 = out + 2 * n, *p3 = out + 3 * n;
    for (size_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, in + i, 4);
        p0[i] = (uint8_t)x, p1[i] = (uint8_t)(x >> 8), p2[i] = (uint8_t)(x >> 16), p3[i] = (uint8_t)(x >> 24);
    }
}

/* ---------------------------------------------------------------- writing */

typedef struct {
    int fd;
    z_stream zs;
    unsigned char *out;
    uint8_t *scratch; /* shuffled planes of one tensor */
    size_t scratch_cap;
    bool shuffle;
    int err;          /* errno of a failed write, or -1 for a zlib failure; 0 while fine */
    int64_t written;
} Writer;

static void write_all(Writer *w, const unsigned char *p, size_t n) {
    while (!w->err && n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            w->err = k < 0 ? errno : EIO;
            return;
        }
        p += k, n -= (size_t)k, w->written += k;
    }
}

static void deflate_bytes(Writer *w, const void *p, size_t n, int flush) {
    const unsigned char *b = p;
    do {
        size_t chunk = n > UINT_MAX ? UINT_MAX : n;
        w->zs.next_in = (Bytef *)b;
        w->zs.avail_in = (uInt)chunk;
        int mode = chunk == n ? flush : Z_NO_FLUSH, rc;
        do {
            w->zs.next_out = w->out;
            w->zs.avail_out = TG_CHECKPOINT_IO_CHUNK;
            rc = deflate(&w->zs, mode);
            if (rc == Z_STREAM_ERROR) {
                w->err = -1;
                return;
            }
            write_all(w, w->out, TG_CHECKPOINT_IO_CHUNK - w->zs.avail_out);
        } while (!w->err && (w->zs.avail_out == 0 || (mode == Z_FINISH && rc != Z_STREAM_END)));
        b += chunk, n -= chunk;
    } while (!w->err && n > 0);
}

static void put(Writer *w, const void *p, size_t n) {
    if (!w->err && n > 0) deflate_bytes(w, p, n, Z_NO_FLUSH);
}
static void put_u8(Writer *w, uint8_t x) { put(w, &x, 1); }
static void put_u16(Writer *w, uint16_t x) { put(w, &x, 2); }
static void put_u32(Writer *w, uint32_t x) { put(w, &x, 4); }
static void put_i64(Writer *w, int64_t x) { put(w, &x, 8); }
static void put_f64(Writer *w, double x) { put(w, &x, 8); }

static void put_floats(Writer *w, const float *data, size_t n) {
    if (!w->shuffle) {
        put(w, data, n * sizeof(float));
        return;
    }
    if (w->scratch_cap < n * sizeof(float)) {
        free(w->scratch);
        w->scratch_cap = n * sizeof(float);
        w->scratch = tg_malloc(w->scratch_cap);
    }
    shuffle_planes(data, n, w->scratch);
    put(w, w->scratch, n * sizeof(float));
}

static void put_config(Writer *w, const TgModelConfig *c) {
    int64_t ints[7] = {c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->hidden, c->vocab, c->seq_len};
    for (int i = 0; i < 7; i++) put_i64(w, ints[i]);
    put_u32(w, (uint32_t)c->ffn);
    put_f64(w, c->rope_theta);
    put_f64(w, c->norm_eps);
}

static void put_state(Writer *w, const TgTrainerState *s) {
    put_i64(w, s->step);
    put_i64(w, s->tokens_seen);
    uint8_t loader[TG_LOADER_STATE_BYTES];
    tg_loader_state_pack(&s->loader, loader);
    put(w, loader, sizeof loader);
    put_f64(w, s->best_val_loss);
    put_f64(w, s->elapsed_s);
    put(w, &s->seed, 8);
    if (!s->best.kept) return;
    put_f64(w, s->best.value);
    put_i64(w, s->best.step);
    put_i64(w, s->best.evals_since);
    if (s->best.source) put(w, &s->best.source, 8);
}

static void put_tensor(Writer *w, const TgTensor *t, uint8_t kind, const float *data) {
    uint16_t len = (uint16_t)strlen(t->name);
    put_u16(w, len);
    put(w, t->name, len);
    put_u8(w, kind);
    put_u32(w, (uint32_t)t->ndim);
    for (int d = 0; d < t->ndim; d++) put_i64(w, t->shape[d]);
    put_floats(w, data, (size_t)t->numel);
}

TgStatus tg_checkpoint_write_with(const char *path, const TgCheckpointSource *src, const TgCheckpointWriteOptions *opts,
                                int64_t *file_bytes) {
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    Writer w;
    memset(&w, 0, sizeof w);
    w.shuffle = opts->shuffle;
    w.fd = af.fd;
    if (deflateInit2(&w.zs, opts->level, Z_DEFLATED, TG_CHECKPOINT_GZIP_WINDOW_BITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        tg_atomic_file_abandon(&af);
        return tg_fail(TG_ERR_NOMEM, "cannot start a gzip stream for %s", path);
    }
    w.out = tg_malloc(TG_CHECKPOINT_IO_CHUNK);

    const TgParamStore *ps = src->layout;
    put(&w, CHECKPOINT_MAGIC, sizeof CHECKPOINT_MAGIC);
    put_u32(&w, TG_CHECKPOINT_VERSION);
    put_u32(&w, (opts->shuffle ? TG_CHECKPOINT_FLAG_SHUFFLED : 0) | (src->tag ? TG_CHECKPOINT_FLAG_PARAM_SET : 0) |
                    (src->adapter[0] ? TG_CHECKPOINT_FLAG_ADAPTER : 0) |
                    (src->state.best.kept ? TG_CHECKPOINT_FLAG_BEST : 0) |
                    (src->state.best.kept && src->state.best.source ? TG_CHECKPOINT_FLAG_BEST_SOURCE : 0) |
                    (!src->tag && src->cfg.qk_norm ? TG_CHECKPOINT_FLAG_QK_NORM : 0));
    if (src->tag) {
        size_t len = strlen(src->tag);
        TG_CHECK(len > 0 && len < TG_CHECKPOINT_PARAM_TAG_CAP, "a parameter set tag of %zu bytes", len);
        put_u16(&w, (uint16_t)len);
        put(&w, src->tag, len);
    } else {
        put_config(&w, &src->cfg);
        put(&w, &src->tokenizer_fingerprint, 8);
        size_t len = strlen(src->adapter);
        if (len) {
            put_u16(&w, (uint16_t)len);
            put(&w, src->adapter, len);
        }
    }
    put_u32(&w, (uint32_t)(3 * ps->count));
    const float *bufs[3] = {src->data, src->m, src->v};
    for (int kind = 0; kind < 3; kind++)
        for (int i = 0; i < ps->count; i++)
            put_tensor(&w, ps->tensors[i], (uint8_t)kind, bufs[kind] + ps->offsets[i]);
    put_state(&w, &src->state);
    if (!w.err) deflate_bytes(&w, CHECKPOINT_END_MARK, sizeof CHECKPOINT_END_MARK, Z_FINISH);
    deflateEnd(&w.zs);
    free(w.out);
    free(w.scratch);

    if (w.err) {
        tg_atomic_file_abandon(&af);
        return tg_fail(TG_ERR_IO, "writing checkpoint %s failed (%s); the previous checkpoint is untouched", path,
                       w.err < 0 ? "compression error" : strerror(w.err));
    }
    if (tg_atomic_file_commit(&af) != TG_OK)
        return tg_fail(TG_ERR_IO, "saving checkpoint %s failed; the previous checkpoint is untouched (%s)", path,
                       tg_error_message());
    if (file_bytes) *file_bytes = w.written;
    return TG_OK;
}

TgStatus tg_checkpoint_write(const char *path, const TgCheckpointSource *src) {
    TgCheckpointWriteOptions opts = tg_checkpoint_default_options();
    return tg_checkpoint_write_with(path, src, &opts, NULL);
}

